// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Tests of the .npy reader/writer of the dynattn tool. Files are built byte by byte the way NumPy
// lays them out, so the reader is checked against the format rather than against the writer;
// when python3 with NumPy happens to be installed, files are also exchanged with NumPy itself.

#include "tools/npy.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/support/harness.h"

namespace {

using dynattn::DType;
using dynattn::Status;
using dynattn::cli::NpyArray;
using dynattn::cli::ReadNpy;
using dynattn::cli::WriteNpy;

// A fresh directory under /tmp, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "npy_test.XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A .npy file: magic, version `major`.0, header length, `dict` padded with spaces and a newline
// to a multiple of `alignment` bytes, then `data`.
std::string NpyFile(const std::string& dict, const std::string& data, int major = 1,
                    size_t alignment = 64) {
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t unpadded = 8 + length_bytes + dict.size() + 1;
  const std::string header =
      dict + std::string((alignment - unpadded % alignment) % alignment, ' ') + "\n";
  std::string file = "\x93NUMPY";
  file.push_back(static_cast<char>(major));
  file.push_back('\0');
  for (size_t i = 0; i < length_bytes; ++i) {
    file.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xFF));
  }
  return file + header + data;
}

std::string Dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

std::vector<uint8_t> PatternBytes(size_t count, unsigned seed) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(i * 37 + seed * 11 + 5);
  return bytes;
}

// Reads `path`, expecting failure with a message naming the file and containing `problem`.
void ExpectReadError(const std::string& path, const std::string& problem) {
  NpyArray array;
  const Status status = ReadNpy(path, &array);
  INFO("message: ", status.message());
  CHECK_FALSE(status.ok());
  CHECK(status.message().find(path) != std::string::npos);
  CHECK(status.message().find(problem) != std::string::npos);
}

// Writes `contents` to a file and expects the reader to reject it (see ExpectReadError).
void ExpectRejected(const std::string& contents, const std::string& problem) {
  TempDir dir;
  const std::string path = dir.File("bad.npy");
  WriteBytes(path, contents);
  ExpectReadError(path, problem);
}

const DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kI8, DType::kI64, DType::kBF16};

TEST_SUITE("npy") {
  TEST_CASE("every dtype round-trips at every rank from 0 to 6") {
    TempDir dir;
    const std::vector<int64_t> extents = {2, 3, 1, 4, 1, 2};
    for (DType dtype : kAllDTypes) {
      for (size_t rank = 0; rank <= extents.size(); ++rank) {
        CAPTURE(dynattn::DTypeName(dtype));
        CAPTURE(rank);
        const std::vector<int64_t> shape(extents.begin(), extents.begin() + rank);
        int64_t count = 1;
        for (int64_t extent : shape) count *= extent;
        const std::vector<uint8_t> bytes =
            PatternBytes(count * dynattn::DTypeSize(dtype), static_cast<unsigned>(rank));
        const std::string path = dir.File("a.npy");
        REQUIRE(WriteNpy(path, dtype, shape, bytes.data()).ok());
        NpyArray array;
        const Status status = ReadNpy(path, &array);
        REQUIRE_MESSAGE(status.ok(), status.message());
        CHECK(array.dtype == dtype);
        CHECK(array.shape == shape);
        CHECK(array.bytes == bytes);
        CHECK(array.NumElements() == count);
      }
    }
  }

  TEST_CASE("bf16 is written as '<u2' bit patterns and read back as bf16") {
    TempDir dir;
    const std::vector<uint8_t> bytes = PatternBytes(2 * 6, 7);
    const std::string path = dir.File("bf16.npy");
    REQUIRE(WriteNpy(path, DType::kBF16, {2, 3}, bytes.data()).ok());
    const std::string file = ReadBytes(path);
    CHECK(file.find("'descr': '<u2'") != std::string::npos);
    CHECK(file.substr(file.size() - bytes.size()) == std::string(bytes.begin(), bytes.end()));
    NpyArray array;
    REQUIRE(ReadNpy(path, &array).ok());
    CHECK(array.dtype == DType::kBF16);
    CHECK_FALSE(array.fp8_bytes);
    CHECK(array.bytes == bytes);
  }

  TEST_CASE("fp8 is written as '|u1' bytes and read back as fp8 bytes of no named format") {
    TempDir dir;
    for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
      CAPTURE(dynattn::DTypeName(fp8));
      const std::vector<uint8_t> bytes = PatternBytes(2 * 3 * 4, 9);
      const std::string path = dir.File("fp8.npy");
      REQUIRE(WriteNpy(path, fp8, {2, 3, 4}, bytes.data()).ok());
      const std::string file = ReadBytes(path);
      CHECK(file.find("'descr': '|u1'") != std::string::npos);
      NpyArray array;
      REQUIRE(ReadNpy(path, &array).ok());
      CHECK(array.fp8_bytes);
      CHECK(array.dtype == dynattn::cli::kFp8BytesDType);
      CHECK(array.shape == std::vector<int64_t>{2, 3, 4});
      CHECK(array.bytes == bytes);
    }
    // A '|u1' file built by hand (as NumPy writes it) reads the same way.
    const std::string path = dir.File("hand.npy");
    WriteBytes(path, NpyFile(Dict("|u1", "(3,)"), std::string("\x7f\x80\xff", 3)));
    NpyArray array;
    REQUIRE(ReadNpy(path, &array).ok());
    CHECK(array.fp8_bytes);
    CHECK(array.bytes == std::vector<uint8_t>{0x7F, 0x80, 0xFF});
  }

  TEST_CASE("arrays with zero elements round-trip") {
    TempDir dir;
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{0}, std::vector<int64_t>{3, 0, 2}, std::vector<int64_t>{0, 0}}) {
      const std::string path = dir.File("empty.npy");
      REQUIRE(WriteNpy(path, DType::kF16, shape, nullptr).ok());
      NpyArray array;
      REQUIRE(ReadNpy(path, &array).ok());
      CHECK(array.shape == shape);
      CHECK(array.bytes.empty());
      CHECK(array.NumElements() == 0);
    }
  }

  TEST_CASE("the writer produces NumPy's format 1.0 header, 64-byte aligned") {
    TempDir dir;
    const std::string path = dir.File("h.npy");
    const float data[6] = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
    REQUIRE(WriteNpy(path, DType::kF32, {2, 3}, data).ok());
    const std::string file = ReadBytes(path);
    const std::string expected =
        NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                std::string(reinterpret_cast<const char*>(data), sizeof(data)));
    CHECK(file == expected);
    CHECK(file.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
    const size_t header_size = static_cast<uint8_t>(file[8]) | static_cast<uint8_t>(file[9]) << 8;
    CHECK((10 + header_size) % 64 == 0);
    CHECK(file[10 + header_size - 1] == '\n');
    CHECK(file.size() == 10 + header_size + sizeof(data));
  }

  TEST_CASE("the writer spells shapes of rank 0 and 1 as Python tuples") {
    TempDir dir;
    const int64_t scalar = 42;
    REQUIRE(WriteNpy(dir.File("s.npy"), DType::kI64, {}, &scalar).ok());
    CHECK(ReadBytes(dir.File("s.npy")).find("'shape': (), }") != std::string::npos);
    CHECK(ReadBytes(dir.File("s.npy")).find("'descr': '<i8'") != std::string::npos);
    const int8_t vector[5] = {1, -2, 3, -4, 5};
    REQUIRE(WriteNpy(dir.File("v.npy"), DType::kI8, {5}, vector).ok());
    CHECK(ReadBytes(dir.File("v.npy"))
              .find("'descr': '|i1', 'fortran_order': False, "
                    "'shape': (5,), }") != std::string::npos);
    REQUIRE(WriteNpy(dir.File("h.npy"), DType::kF16, {0}, nullptr).ok());
    CHECK(ReadBytes(dir.File("h.npy")).find("'descr': '<f2'") != std::string::npos);
  }

  TEST_CASE("the reader accepts format versions 2.0 and 3.0") {
    TempDir dir;
    const int64_t values[3] = {7, -8, 9};
    const std::string data(reinterpret_cast<const char*>(values), sizeof(values));
    for (int major : {2, 3}) {
      CAPTURE(major);
      const std::string path = dir.File("v.npy");
      WriteBytes(path, NpyFile(Dict("<i8", "(3,)"), data, major));
      NpyArray array;
      const Status status = ReadNpy(path, &array);
      REQUIRE_MESSAGE(status.ok(), status.message());
      CHECK(array.dtype == DType::kI64);
      CHECK(array.shape == std::vector<int64_t>{3});
      CHECK(std::string(array.bytes.begin(), array.bytes.end()) == data);
    }
  }

  TEST_CASE("the reader accepts older padding, other spacing, quotes and key orders") {
    TempDir dir;
    const std::string data(12, '\x01');
    const std::vector<std::string> dicts = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
        "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}",
        "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(3,)}",
        "{ 'descr' : '<f4' ,\n 'fortran_order' : False , 'shape' : ( 3 , ) , }",
    };
    for (const std::string& dict : dicts) {
      for (size_t alignment : {16, 64}) {
        CAPTURE(dict);
        CAPTURE(alignment);
        const std::string path = dir.File("p.npy");
        WriteBytes(path, NpyFile(dict, data, 1, alignment));
        NpyArray array;
        const Status status = ReadNpy(path, &array);
        REQUIRE_MESSAGE(status.ok(), status.message());
        CHECK(array.shape == std::vector<int64_t>{3});
        CHECK(array.dtype == DType::kF32);
      }
    }
  }

  TEST_CASE("View is a dense row-major view of the bytes") {
    NpyArray array = dynattn::cli::MakeZeroArray(DType::kF16, {2, 3, 4});
    CHECK(array.bytes.size() == 48);
    const dynattn::TensorView view = array.View();
    CHECK(view.data == array.bytes.data());
    CHECK(view.dtype == DType::kF16);
    CHECK(view.rank == 3);
    CHECK(view.shape[0] == 2);
    CHECK(view.shape[2] == 4);
    CHECK(view.strides[0] == 12);
    CHECK(view.strides[1] == 4);
    CHECK(view.strides[2] == 1);
    NpyArray scalar = dynattn::cli::MakeZeroArray(DType::kI64, {});
    CHECK(scalar.View().rank == 0);
    CHECK(scalar.View().NumElements() == 1);
  }

  TEST_CASE("missing files, directories and empty files are rejected by name") {
    TempDir dir;
    ExpectReadError(dir.File("absent.npy"), "no such file");
    ExpectReadError(dir.path().string(), "not a regular file");
    ExpectRejected("", "not a .npy file");
  }

  TEST_CASE("bad magic and unsupported versions are rejected") {
    const std::string good = NpyFile(Dict("<f4", "(1,)"), std::string(4, '\0'));
    std::string bad_magic = good;
    bad_magic[1] = 'M';
    ExpectRejected(bad_magic, "bad magic");
    ExpectRejected("PK\x03\x04 this is a zip file, not an array", "bad magic");
    std::string version_4 = good;
    version_4[6] = 4;
    ExpectRejected(version_4, "version 4.0");
    std::string version_1_1 = good;
    version_1_1[7] = 1;
    ExpectRejected(version_1_1, "version 1.1");
  }

  TEST_CASE("truncated files and trailing bytes are rejected") {
    const std::string good = NpyFile(Dict("<f4", "(2, 3)"), std::string(24, '\x02'));
    ExpectRejected(good.substr(0, 7), "not a .npy file");
    ExpectRejected(good.substr(0, 9), "not a .npy file");
    ExpectRejected(good.substr(0, 40), "truncated header");
    ExpectRejected(good.substr(0, good.size() - 1), "truncated data");
    ExpectRejected(good.substr(0, good.size() - 24), "truncated data");
    ExpectRejected(good + "x", "unexpected bytes");
    ExpectRejected(NpyFile(Dict("<i8", "(1000000000000, 1000000000000)"), ""), "truncated data");
  }

  TEST_CASE("Fortran-ordered arrays are rejected") {
    ExpectRejected(NpyFile(Dict("<f4", "(2, 3)", true), std::string(24, '\0')), "fortran_order");
  }

  TEST_CASE("dtypes other than <f4, <f2, <u2, |i1, |u1 and <i8 are rejected") {
    for (const char* descr :
         {"<f8", ">u2", "<i4", ">f4", ">i8", "|b1", "<u8", "<c8", "f4", "<i2"}) {
      CAPTURE(descr);
      ExpectRejected(NpyFile(Dict(descr, "(1,)"), std::string(8, '\0')),
                     std::string("dtype '") + descr + "' is not supported");
    }
    ExpectRejected(NpyFile("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                           std::string(4, '\0')),
                   "structured");
  }

  TEST_CASE("ranks above 6 are rejected on read and write") {
    ExpectRejected(NpyFile(Dict("|i1", "(1, 1, 1, 1, 1, 1, 1)"), "\x01"), "rank 7");
    TempDir dir;
    const int8_t byte = 1;
    const Status status = WriteNpy(dir.File("r7.npy"), DType::kI8, {1, 1, 1, 1, 1, 1, 1}, &byte);
    CHECK_FALSE(status.ok());
    CHECK(status.message().find("r7.npy") != std::string::npos);
  }

  TEST_CASE("malformed header dicts are rejected") {
    const std::string data(4, '\0');
    ExpectRejected(NpyFile("{'fortran_order': False, 'shape': (1,), }", data), "no 'descr'");
    ExpectRejected(NpyFile("{'descr': '<f4', 'shape': (1,), }", data), "no 'fortran_order'");
    ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, }", data), "no 'shape'");
    ExpectRejected(NpyFile(Dict("<f4", "(1)"), data), "not a tuple");
    ExpectRejected(NpyFile(Dict("<f4", "(-1,)"), data), "integers >= 0");
    ExpectRejected(NpyFile(Dict("<f4", "[1]"), data), "must be a tuple");
    ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", data),
                   "True or False");
    ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", data),
                   "unexpected header key 'x'");
    ExpectRejected(NpyFile("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1,), }",
                           data),
                   "duplicate key");
    ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", data),
                   "malformed header");
    ExpectRejected(NpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", data),
                   "malformed header");
  }

  TEST_CASE("writing into a missing directory fails with the path") {
    TempDir dir;
    const std::string path = dir.File("no/such/dir/a.npy");
    const float value = 1.0f;
    const Status status = WriteNpy(path, DType::kF32, {1}, &value);
    CHECK_FALSE(status.ok());
    CHECK(status.message().find(path) != std::string::npos);
  }
}

namespace {

/// The Python interpreter with NumPy: DYNATTN_PYTHON (meson passes the one the setup provisions),
/// else python3 from PATH.
std::string Python() {
  const char* python = std::getenv("DYNATTN_PYTHON");
  return std::string("'") + (python != nullptr && *python != '\0' ? python : "python3") + "'";
}

}  // namespace

// A suite (and meson test) of its own, so that a machine without NumPy counts it as skipped.
TEST_SUITE("npy_numpy") {
  TEST_CASE("files are exchanged with NumPy when python3 and NumPy are installed") {
    if (std::system((Python() + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
      dynattn_test::SkipTest("python3 with NumPy not found; NumPy cross-check not run");
      return;
    }
    TempDir dir;
    const std::string script = dir.File("exchange.py");
    // NumPy saves one array per dtype plus its raw bytes, then checks the file written by us.
    WriteBytes(script,
               "import sys, numpy as np\n"
               "d = sys.argv[1]\n"
               "for dt in ['<f4', '<f2', '|i1', '<i8', '<u2', '|u1']:\n"
               "    a = (np.arange(24) * 3 - 20).astype(dt).reshape(2, 3, 4)\n"
               "    np.save(d + '/np_' + dt[1:] + '.npy', a)\n"
               "    open(d + '/np_' + dt[1:] + '.bin', 'wb').write(a.tobytes())\n"
               "np.save(d + '/np_scalar.npy', np.array(5, dtype='<i8'))\n"
               "np.save(d + '/np_fortran.npy', np.asfortranarray(np.ones((2, 3), '<f4')))\n"
               "if len(sys.argv) > 2:\n"
               "    b = np.load(d + '/ours.npy')\n"
               "    assert b.dtype == np.float16 and b.shape == (3, 1, 2), (b.dtype, b.shape)\n"
               "    assert b.tobytes() == open(d + '/ours.bin', 'rb').read()\n"
               "    c = np.load(d + '/ours_bf16.npy')\n"
               "    assert c.dtype == np.uint16 and c.shape == (3, 2), (c.dtype, c.shape)\n"
               "    assert c.tobytes() == open(d + '/ours.bin', 'rb').read()\n"
               "    e = np.load(d + '/ours_fp8.npy')\n"
               "    assert e.dtype == np.uint8 and e.shape == (12,), (e.dtype, e.shape)\n"
               "    assert e.tobytes() == open(d + '/ours.bin', 'rb').read()\n");
    const std::string dir_arg = "'" + dir.path().string() + "'";
    REQUIRE(std::system((Python() + " '" + script + "' " + dir_arg).c_str()) == 0);
    for (const char* name : {"f4", "f2", "i1", "i8", "u2", "u1"}) {
      CAPTURE(name);
      NpyArray array;
      const Status status = ReadNpy(dir.File(std::string("np_") + name + ".npy"), &array);
      REQUIRE_MESSAGE(status.ok(), status.message());
      CHECK(array.dtype == (std::string(name) == "u2"   ? DType::kBF16
                            : std::string(name) == "u1" ? dynattn::cli::kFp8BytesDType
                                                        : array.dtype));
      CHECK(array.fp8_bytes == (std::string(name) == "u1"));
      CHECK(array.shape == std::vector<int64_t>{2, 3, 4});
      const std::string raw = ReadBytes(dir.File(std::string("np_") + name + ".bin"));
      CHECK(std::string(array.bytes.begin(), array.bytes.end()) == raw);
    }
    NpyArray scalar;
    REQUIRE(ReadNpy(dir.File("np_scalar.npy"), &scalar).ok());
    CHECK(scalar.shape.empty());
    CHECK(scalar.bytes.size() == 8);
    ExpectReadError(dir.File("np_fortran.npy"), "fortran_order");

    const std::vector<uint8_t> ours = PatternBytes(12, 3);
    REQUIRE(WriteNpy(dir.File("ours.npy"), DType::kF16, {3, 1, 2}, ours.data()).ok());
    WriteBytes(dir.File("ours.bin"), std::string(ours.begin(), ours.end()));
    REQUIRE(WriteNpy(dir.File("ours_bf16.npy"), DType::kBF16, {3, 2}, ours.data()).ok());
    REQUIRE(WriteNpy(dir.File("ours_fp8.npy"), DType::kF8E5M2, {12}, ours.data()).ok());
    CHECK(std::system((Python() + " '" + script + "' " + dir_arg + " check").c_str()) == 0);
  }
}

}  // namespace

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// .npy reading and writing, following the format description of NumPy's `numpy.lib.format`
// (magic, version, little-endian header length, a Python dict literal padded to 64 bytes, data).
// The header dict is parsed by a tiny grammar of its own rather than a general Python evaluator:
// it only has to understand what NumPy writes, and must reject everything else with a clear
// message.

#include "tools/npy.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

namespace dynattn::cli {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              ".npy data is read and written as little-endian host memory");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// Far more than any header NumPy writes for rank <= 6; bounds the allocation for a bad file.
constexpr uint32_t kMaxHeaderSize = 1 << 20;

std::string ErrnoText() { return std::strerror(errno); }

// The .npy `descr` string of each supported dtype. NumPy has no bfloat16 or fp8 dtypes: bf16
// tensors travel as the uint16 arrays of their bit patterns, fp8 caches as uint8 arrays of their
// bytes (the `run` command names their format with --cache_dtype).
const char* DescrOf(DType dtype) {
  // In DType's order; int32 is never accepted from a file (not in DTypeFromDescr's candidates).
  constexpr const char* kDescrs[] = {"<f4", "<f2", "|i1", "<i8", "<i4", "<u2", "|u1", "|u1"};
  static_assert(std::size(kDescrs) == static_cast<size_t>(DType::kF8E5M2) + 1);
  const size_t index = static_cast<size_t>(dtype);
  return index < std::size(kDescrs) ? kDescrs[index] : "?";
}

Status DTypeFromDescr(const std::string& path, const std::string& descr, DType* dtype,
                      bool* fp8_bytes) {
  *fp8_bytes = false;
  for (DType candidate : {DType::kF32, DType::kF16, DType::kI8, DType::kI64, DType::kBF16}) {
    if (descr == DescrOf(candidate)) {
      *dtype = candidate;
      return Status::Ok();
    }
  }
  if (descr == "|u1") {
    *dtype = kFp8BytesDType;
    *fp8_bytes = true;
    return Status::Ok();
  }
  std::string hint;
  if (descr == "<i4") hint = " (int32 is not accepted; index tensors and scalars are int64)";
  if (!descr.empty() && descr[0] == '>') hint = " (big-endian data is not accepted)";
  return Status::Invalid(path, "dtype '" + descr +
                                   "' is not supported; expected '<f4' (float32), '<f2' "
                                   "(float16), '<u2' (bfloat16 bit patterns), '|i1' (int8), "
                                   "'|u1' (fp8 cache bytes) or '<i8' (int64)" +
                                   hint);
}

std::string ShapeRepr(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return "(" + std::to_string(shape[0]) + ",)";
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + ")";
}

// The fields of a .npy header dict.
struct HeaderFields {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  bool has_descr = false;
  bool has_fortran_order = false;
  bool has_shape = false;
};

// Parses the header dict, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }".
// Accepts either quote style, any spacing, trailing commas and any key order; nothing else.
class HeaderDictParser {
 public:
  explicit HeaderDictParser(const std::string& text) : text_(text) {}

  // Returns an empty string on success, else what is wrong.
  std::string Parse(HeaderFields* fields) {
    SkipSpace();
    if (!Consume('{')) return Fail("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      std::string key;
      if (!ParseString(&key)) return Fail("expected a quoted key");
      SkipSpace();
      if (!Consume(':')) return Fail("expected ':' after '" + key + "'");
      SkipSpace();
      std::string error = ParseValue(key, fields);
      if (!error.empty()) return error;
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume('}')) break;
      return Fail("expected ',' or '}'");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Fail("unexpected text after the closing '}'");
    if (!fields->has_descr) return "header has no 'descr' key";
    if (!fields->has_fortran_order) return "header has no 'fortran_order' key";
    if (!fields->has_shape) return "header has no 'shape' key";
    return "";
  }

 private:
  std::string ParseValue(const std::string& key, HeaderFields* fields) {
    if (key == "descr") {
      if (fields->has_descr) return "duplicate key 'descr'";
      fields->has_descr = true;
      if (Peek() == '[') return "structured dtypes (a list 'descr') are not supported";
      if (!ParseString(&fields->descr)) return Fail("'descr' must be a quoted string");
      return "";
    }
    if (key == "fortran_order") {
      if (fields->has_fortran_order) return "duplicate key 'fortran_order'";
      fields->has_fortran_order = true;
      if (ConsumeWord("True")) {
        fields->fortran_order = true;
      } else if (!ConsumeWord("False")) {
        return Fail("'fortran_order' must be True or False");
      }
      return "";
    }
    if (key == "shape") {
      if (fields->has_shape) return "duplicate key 'shape'";
      fields->has_shape = true;
      return ParseShape(&fields->shape);
    }
    return "unexpected header key '" + key + "'";
  }

  // A Python tuple of non-negative integers: "()", "(3,)", "(2, 3)" or "(2, 3,)".
  std::string ParseShape(std::vector<int64_t>* shape) {
    if (!Consume('(')) return Fail("'shape' must be a tuple");
    bool trailing_comma = false;
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      int64_t extent = 0;
      if (!ParseNonNegativeInt(&extent)) return Fail("'shape' entries must be integers >= 0");
      shape->push_back(extent);
      SkipSpace();
      trailing_comma = Consume(',');
      if (trailing_comma) continue;
      if (Consume(')')) break;
      return Fail("expected ',' or ')' in 'shape'");
    }
    if (shape->size() == 1 && !trailing_comma) {
      return "'shape' (n) is not a tuple; a 1-d shape is written (n,)";
    }
    return "";
  }

  bool ParseNonNegativeInt(int64_t* value) {
    size_t start = pos_;
    int64_t result = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      int digit = text_[pos_] - '0';
      if (result > (std::numeric_limits<int64_t>::max() - digit) / 10) return false;
      result = result * 10 + digit;
      ++pos_;
    }
    *value = result;
    return pos_ > start;
  }

  bool ParseString(std::string* value) {
    char quote = Peek();
    if (quote != '\'' && quote != '"') return false;
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string::npos) return false;
    *value = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return true;
  }

  bool ConsumeWord(const char* word) {
    size_t length = std::strlen(word);
    if (text_.compare(pos_, length, word) != 0) return false;
    pos_ += length;
    return true;
  }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  std::string Fail(const std::string& what) const {
    return what + " at offset " + std::to_string(pos_) + " of the header dict";
  }

  const std::string& text_;
  size_t pos_ = 0;
};

uint32_t LittleEndianU32(const unsigned char* bytes, int count) {
  uint32_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// Reads magic, version and header dict; leaves `in` at the first data byte.
Status ReadHeaderText(const std::string& path, std::ifstream& in, uint64_t file_size,
                      std::string* header, uint64_t* data_offset) {
  unsigned char prefix[12] = {};
  if (file_size < 10 || !in.read(reinterpret_cast<char*>(prefix), 8)) {
    return Status::Invalid(path, "not a .npy file (shorter than the 10-byte preamble)");
  }
  if (std::memcmp(prefix, kMagic, kMagicSize) != 0) {
    return Status::Invalid(path, "not a .npy file (bad magic; expected \\x93NUMPY)");
  }
  const int major = prefix[6];
  const int minor = prefix[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0) {
    return Status::Invalid(path, "unsupported .npy format version " + std::to_string(major) + "." +
                                     std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  }
  const int length_bytes = major == 1 ? 2 : 4;
  if (!in.read(reinterpret_cast<char*>(prefix + 8), length_bytes)) {
    return Status::Invalid(path, "truncated .npy preamble");
  }
  const uint32_t header_size = LittleEndianU32(prefix + 8, length_bytes);
  *data_offset = 8 + length_bytes + static_cast<uint64_t>(header_size);
  if (header_size > kMaxHeaderSize || *data_offset > file_size) {
    return Status::Invalid(path, "truncated header (header length " + std::to_string(header_size) +
                                     " exceeds the file)");
  }
  header->resize(header_size);
  if (!in.read(header->data(), header_size)) {
    return Status::Invalid(path, "cannot read the header: " + ErrnoText());
  }
  return Status::Ok();
}

Status ParseHeader(const std::string& path, const std::string& header, HeaderFields* fields) {
  std::string error = HeaderDictParser(header).Parse(fields);
  if (!error.empty()) return Status::Invalid(path, "malformed header: " + error);
  if (fields->fortran_order) {
    return Status::Invalid(path,
                           "fortran_order is True; only C-ordered arrays are accepted "
                           "(write np.ascontiguousarray(a))");
  }
  if (fields->shape.size() > static_cast<size_t>(kMaxRank)) {
    return Status::Invalid(path, "rank " + std::to_string(fields->shape.size()) +
                                     " exceeds the maximum of " + std::to_string(kMaxRank));
  }
  return Status::Ok();
}

// Product of the extents, or `limit` when it would reach `limit` (so it never overflows).
uint64_t ElementCountUpTo(const std::vector<int64_t>& shape, uint64_t limit) {
  for (int64_t extent : shape) {
    if (extent == 0) return 0;
  }
  uint64_t count = 1;
  for (int64_t extent : shape) {
    const uint64_t e = static_cast<uint64_t>(extent);
    if (count > (limit - 1) / e) return limit;
    count *= e;
  }
  return count;
}

// Checks that the file holds exactly the data the header declares.
Status CheckDataSize(const std::string& path, const HeaderFields& fields, DType dtype,
                     uint64_t available, uint64_t* data_size) {
  const uint64_t item_size = DTypeSize(dtype);
  const uint64_t count = ElementCountUpTo(fields.shape, available / item_size + 1);
  const std::string declared = "shape " + ShapeRepr(fields.shape) + " of '" + fields.descr + "'";
  if (count * item_size > available) {
    return Status::Invalid(path, "truncated data: " + declared + " needs more than the " +
                                     std::to_string(available) + " data bytes in the file");
  }
  *data_size = count * item_size;
  if (*data_size < available) {
    return Status::Invalid(path, std::to_string(available - *data_size) +
                                     " unexpected bytes after the data of " + declared);
  }
  return Status::Ok();
}

Status OpenForReading(const std::string& path, std::ifstream& in, uint64_t* file_size) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) return Status::Invalid(path, "no such file");
  if (!std::filesystem::is_regular_file(status)) {
    return Status::Invalid(path, "is not a regular file");
  }
  *file_size = std::filesystem::file_size(path, error);
  if (error) return Status::Invalid(path, "cannot stat: " + error.message());
  in.open(path, std::ios::binary);
  if (!in) return Status::Invalid(path, "cannot open for reading: " + ErrnoText());
  return Status::Ok();
}

Status CheckShapeForWriting(const std::string& path, const std::vector<int64_t>& shape) {
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return Status::Invalid(path, "cannot write rank " + std::to_string(shape.size()) +
                                     " (the maximum is " + std::to_string(kMaxRank) + ")");
  }
  for (int64_t extent : shape) {
    if (extent < 0) return Status::Invalid(path, "cannot write negative extent in shape");
  }
  return Status::Ok();
}

// The format 1.0 preamble and header NumPy writes: the dict padded with spaces and a final
// newline so that the data starts at a multiple of 64 bytes.
std::string FormatHeader(DType dtype, const std::vector<int64_t>& shape) {
  std::string dict = std::string("{'descr': '") + DescrOf(dtype) +
                     "', 'fortran_order': False, 'shape': " + ShapeRepr(shape) + ", }";
  const size_t unpadded = kMagicSize + 2 + 2 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string preamble(kMagic, kMagicSize);
  preamble.push_back('\x01');
  preamble.push_back('\x00');
  preamble.push_back(static_cast<char>(dict.size() & 0xFF));
  preamble.push_back(static_cast<char>(dict.size() >> 8));
  return preamble + dict;
}

}  // namespace

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  bool overflow = false;
  for (int64_t extent : shape) {
    if (extent < 0) return -1;
    if (extent == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(count, extent, &count);
  }
  return overflow ? -1 : count;
}

int64_t NpyArray::NumElements() const {
  // Arrays come from ReadNpy (sizes checked against the file) or MakeZeroArray (checked there);
  // -1 for a shape whose count does not fit is never reached by either.
  return ElementCount(shape);
}

TensorView NpyArray::View() {
  return TensorView::Dense(bytes.data(), dtype, static_cast<int>(shape.size()), shape.data());
}

NpyArray MakeZeroArray(DType dtype, const std::vector<int64_t>& shape) {
  NpyArray array;
  array.dtype = dtype;
  array.shape = shape;
  array.bytes.assign(static_cast<size_t>(array.NumElements()) * DTypeSize(dtype), 0);
  return array;
}

Status ReadNpy(const std::string& path, NpyArray* out) {
  std::ifstream in;
  uint64_t file_size = 0;
  DYNATTN_RETURN_IF_ERROR(OpenForReading(path, in, &file_size));
  std::string header;
  uint64_t data_offset = 0;
  DYNATTN_RETURN_IF_ERROR(ReadHeaderText(path, in, file_size, &header, &data_offset));
  HeaderFields fields;
  DYNATTN_RETURN_IF_ERROR(ParseHeader(path, header, &fields));
  DType dtype = DType::kF32;
  bool fp8_bytes = false;
  DYNATTN_RETURN_IF_ERROR(DTypeFromDescr(path, fields.descr, &dtype, &fp8_bytes));
  uint64_t data_size = 0;
  DYNATTN_RETURN_IF_ERROR(CheckDataSize(path, fields, dtype, file_size - data_offset, &data_size));
  std::vector<uint8_t> bytes(data_size);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(data_size))) {
    return Status::Invalid(path, "cannot read the data: " + ErrnoText());
  }
  out->dtype = dtype;
  out->fp8_bytes = fp8_bytes;
  out->shape = std::move(fields.shape);
  out->bytes = std::move(bytes);
  return Status::Ok();
}

Status WriteNpy(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
                const void* data) {
  DYNATTN_RETURN_IF_ERROR(CheckShapeForWriting(path, shape));
  const int64_t count = ElementCount(shape);
  const std::string header = FormatHeader(dtype, shape);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::Invalid(path, "cannot open for writing: " + ErrnoText());
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data),
            static_cast<std::streamsize>(static_cast<size_t>(count) * DTypeSize(dtype)));
  out.close();
  if (!out) return Status::Invalid(path, "cannot write: " + ErrnoText());
  return Status::Ok();
}

Status WriteNpy(const std::string& path, const NpyArray& array) {
  return WriteNpy(path, array.dtype, array.shape, array.bytes.data());
}

}  // namespace dynattn::cli

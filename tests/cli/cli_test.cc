// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// End-to-end tests of the `dynattn run` command, driving the built binary (path in the
// DYNATTN_CLI environment variable) the way a comparison script would: valid runs must give the
// library's bytes at any thread count and leave their inputs alone, and every malformed run must
// end with exit status 2, one stderr line naming the culprit, and nothing written.

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"
#include "dynattn/named_args.h"
#include "reference/case_gen.h"
#include "reference/golden_matrix.h"
#include "reference/reference.h"
#include "tests/support/harness.h"
#include "tests/support/sanitizers.h"
#include "tools/dtypes.h"
#include "tools/npy.h"

namespace {

namespace fs = std::filesystem;

using dynattn::DType;
using dynattn::Status;
using dynattn::cli::MakeZeroArray;
using dynattn::cli::NpyArray;
using dynattn::cli::ReadNpy;
using dynattn::cli::WriteNpy;

using Arrays = std::map<std::string, NpyArray>;

constexpr const char* kKvc = "key_value_cache";
constexpr const char* kMha = "multi_head_attention";
constexpr const char* kMhca = "multi_head_cache_attention";

// The binary under test; the suite fails (not skips) without it.
std::string RequireCli() {
  const char* path = std::getenv("DYNATTN_CLI");
  REQUIRE_MESSAGE(path != nullptr,
                  "DYNATTN_CLI is not set; point it at the built dynattn binary "
                  "(meson passes dynattn_exe.full_path())");
  REQUIRE_MESSAGE(fs::exists(path), "DYNATTN_CLI=", path, " does not exist");
  return path;
}

// A fresh directory under /tmp, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cli_test.XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string Sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Every file of a directory (name -> bytes).
std::map<std::string, std::string> Snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadBytes(entry.path().string());
  }
  return files;
}

// ---------------------------------------------------------------------------------------------
// Building arrays.

// Deterministic pseudo-random numbers, the same on every platform.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  uint32_t Next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state_ >> 33);
  }
  // Uniform in [lo, hi).
  float Uniform(float lo, float hi) { return lo + (hi - lo) * (Next() % 65536) / 65536.0f; }

 private:
  uint64_t state_;
};

template <typename T>
NpyArray Make(DType dtype, const std::vector<int64_t>& shape, const std::vector<T>& values) {
  NpyArray array = MakeZeroArray(dtype, shape);
  REQUIRE(array.bytes.size() == values.size() * sizeof(T));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}

NpyArray I64(const std::vector<int64_t>& shape, const std::vector<int64_t>& values) {
  return Make(DType::kI64, shape, values);
}

NpyArray Scalar(int64_t value) { return I64({}, {value}); }

NpyArray RandomF32(const std::vector<int64_t>& shape, uint64_t seed, float lo = -2.0f,
                   float hi = 2.0f) {
  NpyArray array = MakeZeroArray(DType::kF32, shape);
  Lcg rng(seed);
  std::vector<float> values(array.NumElements());
  for (float& value : values) value = rng.Uniform(lo, hi);
  return Make(DType::kF32, shape, values);
}

// fp16 bit patterns with a random sign and a magnitude in [2^(min_exp-15), 2^(max_exp-14)).
NpyArray RandomF16(const std::vector<int64_t>& shape, uint64_t seed, int min_exp, int max_exp,
                   bool positive = false) {
  NpyArray array = MakeZeroArray(DType::kF16, shape);
  Lcg rng(seed);
  std::vector<uint16_t> values(array.NumElements());
  for (uint16_t& value : values) {
    const uint32_t sign = positive ? 0 : (rng.Next() & 1);
    const uint32_t exponent = min_exp + rng.Next() % (max_exp - min_exp + 1);
    value = static_cast<uint16_t>(sign << 15 | exponent << 10 | (rng.Next() & 0x3FF));
  }
  return Make(DType::kF16, shape, values);
}

NpyArray RandomI8(const std::vector<int64_t>& shape, uint64_t seed) {
  NpyArray array = MakeZeroArray(DType::kI8, shape);
  Lcg rng(seed);
  for (uint8_t& byte : array.bytes) {
    byte = static_cast<uint8_t>(rng.Next());
    if (byte == 0x80) byte = 0x81;  // int8 caches hold [-127, 127].
  }
  return array;
}

// bf16 bits of a finite or NaN float, rounded to nearest even (NaN stays NaN).
uint16_t Bf16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>(bits >> 16 | 0x40);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// `f32` (fp32 values) as bf16 bit patterns, the dtype '<u2' files carry.
NpyArray ToBf16(const NpyArray& f32) {
  REQUIRE(f32.dtype == DType::kF32);
  NpyArray out = MakeZeroArray(DType::kBF16, f32.shape);
  for (int64_t i = 0; i < f32.NumElements(); ++i) {
    float value;
    std::memcpy(&value, f32.bytes.data() + 4 * i, 4);
    const uint16_t bits = Bf16Bits(value);
    std::memcpy(out.bytes.data() + 2 * i, &bits, 2);
  }
  return out;
}

NpyArray RandomBf16(const std::vector<int64_t>& shape, uint64_t seed) {
  return ToBf16(RandomF32(shape, seed));
}

// Random fp8 bytes of format `fp8` that are finite numbers of magnitude at most 2^3 (no NaN, no
// e5m2 infinity), as an fp8 cache holds them.
NpyArray RandomFp8(DType fp8, const std::vector<int64_t>& shape, uint64_t seed) {
  NpyArray array = MakeZeroArray(fp8, shape);
  Lcg rng(seed);
  const int mantissa_bits = fp8 == DType::kF8E4M3 ? 3 : 2, bias = fp8 == DType::kF8E4M3 ? 7 : 15;
  for (uint8_t& byte : array.bytes) {
    const int exponent = bias - 4 + static_cast<int>(rng.Next() % 8);  // 2^-4 .. 2^3
    byte = static_cast<uint8_t>((rng.Next() & 1) << 7 | exponent << mantissa_bits |
                                (rng.Next() & ((1 << mantissa_bits) - 1)));
  }
  return array;
}

NpyArray F32Scalar(float value) { return Make(DType::kF32, {}, std::vector<float>{value}); }

// Scales in [2^-9, 2^-6): plausible for activations of magnitude about 2.
NpyArray RandomScales(const std::vector<int64_t>& shape, uint64_t seed) {
  return RandomF16(shape, seed, 6, 8, /*positive=*/true);
}

// Rewrites `array` with a new shape (same bytes) or a new dtype (fresh bytes).
NpyArray Reshaped(NpyArray array, const std::vector<int64_t>& shape) {
  array.shape = shape;
  return array;
}

// ---------------------------------------------------------------------------------------------
// Cases: inputs, flags, and the same call made on the library directly.

enum class OutDir { kEmpty, kNotEmpty, kMissing };

struct CliCase {
  std::string op;
  Arrays inputs;
  std::vector<std::string> flags;                // Attribute flags, e.g. {"--num_heads", "4"}.
  std::map<std::string, std::string> raw_files;  // Extra files written byte for byte.
  bool pass_outputs_flag = true;
  bool pass_inputs_dir = true;
  OutDir out_dir = OutDir::kEmpty;
  // Typed attributes matching `flags`, for the direct library call.
  dynattn::KeyValueCacheAttrs kvc_attrs;
  dynattn::AttentionAttrs attention_attrs;
  dynattn::CacheAttrs cache_attrs;
  std::vector<int64_t> gathered_shape;           // KVC key/value shape.
  dynattn::UnifiedAttentionAttrs unified_attrs;  // Unified: with cache_attrs and block_size.
  int block_size = 0;
  bool unified_lse = false;
};

// KVC: 2 requests (decode + prompt), int8 cache, G = 4, layer 1 of 2, layout 0, GQA repeat 2.
CliCase KvcCase() {
  CliCase c;
  c.op = kKvc;
  c.inputs["current_key"] = RandomF32({4, 2, 8}, 1);
  c.inputs["current_value"] = RandomF32({4, 2, 8}, 2);
  c.inputs["seqstarts"] = I64({3}, {0, 1, 4});
  c.inputs["kvstarts"] = I64({3}, {0, 5, 8});
  c.inputs["cachestarts"] = I64({2}, {0, 16});
  c.inputs["start_pos"] = I64({2}, {4, 0});
  c.inputs["max_seqlen"] = Scalar(3);
  c.inputs["max_kvlen"] = Scalar(5);
  c.inputs["cache"] = RandomI8({32, 2, 2, 2, 8}, 3);
  c.inputs["scale"] = RandomScales({32, 2, 2, 2, 2}, 4);
  c.flags = {"--num_layer",   "2", "--layer_idx",  "1", "--quant_bit", "8",
             "--quant_group", "4", "--num_repeat", "2"};
  c.kvc_attrs.cache.num_layer = 2;
  c.kvc_attrs.cache.layer_idx = 1;
  c.kvc_attrs.cache.quant_bit = 8;
  c.kvc_attrs.cache.quant_group = 4;
  c.kvc_attrs.num_repeat = 2;
  c.gathered_shape = {8, 4, 8};
  return c;
}

// MHA: 3 requests (1 decode, 2 prompts with past context), fp32, GQA 4:2, causal, 3-D mask.
CliCase MhaCase() {
  CliCase c;
  c.op = kMha;
  c.inputs["query"] = RandomF32({6, 4, 8}, 11);
  c.inputs["key"] = RandomF32({12, 2, 8}, 12);
  c.inputs["value"] = RandomF32({12, 2, 8}, 13);
  c.inputs["seqstarts"] = I64({4}, {0, 1, 4, 6});
  c.inputs["kvstarts"] = I64({4}, {0, 5, 8, 12});
  c.inputs["decoding_batches"] = Scalar(1);
  c.inputs["max_seqlen"] = Scalar(3);
  c.inputs["max_kvlen"] = Scalar(5);
  c.inputs["attn_mask"] = RandomF32({4, 6, 16}, 14, -1.0f, 1.0f);
  c.flags = {"--num_heads", "4", "--head_dim", "8", "--num_kv_heads", "2", "--is_causal", "1"};
  c.attention_attrs.num_heads = 4;
  c.attention_attrs.head_dim = 8;
  c.attention_attrs.num_kv_heads = 2;
  c.attention_attrs.is_causal = true;
  return c;
}

// MHCA: fp16, packed int4 cache, paged (page_size 4), layout 3, GQA 4:2, 2-D padded mask.
// Request 0 (decode, start_pos 5) uses pages at 8 and 0; request 1 (prompt) the page at 16.
CliCase MhcaCase() {
  CliCase c;
  c.op = kMhca;
  c.inputs["query"] = RandomF16({4, 4, 8}, 21, 12, 15);
  c.inputs["current_key"] = RandomF16({4, 2, 8}, 22, 12, 15);
  c.inputs["current_value"] = RandomF16({4, 2, 8}, 23, 12, 15);
  c.inputs["seqstarts"] = I64({3}, {0, 1, 4});
  c.inputs["kvstarts"] = I64({3}, {0, 6, 9});
  c.inputs["cachestarts"] = I64({2, 3}, {8, 0, -1, 16, -1, -1});
  c.inputs["start_pos"] = I64({2}, {5, 0});
  c.inputs["decoding_batches"] = Scalar(1);
  c.inputs["max_seqlen"] = Scalar(3);
  c.inputs["max_kvlen"] = Scalar(6);
  c.inputs["cache"] = RandomI8({1, 2, 2, 24, 4}, 24);
  c.inputs["scale"] = RandomScales({1, 2, 2, 24, 2}, 25);
  c.inputs["attn_mask"] = RandomF16({4, 16}, 26, 10, 13);
  c.flags = {"--num_heads",   "4", "--head_dim",   "8", "--num_kv_heads", "2", "--quant_bit", "4",
             "--quant_group", "4", "--cache_mode", "1", "--cache_layout", "3", "--page_size", "4"};
  c.attention_attrs.num_heads = 4;
  c.attention_attrs.head_dim = 8;
  c.attention_attrs.num_kv_heads = 2;
  c.cache_attrs.quant_bit = 4;
  c.cache_attrs.quant_group = 4;
  c.cache_attrs.cache_mode = 1;
  c.cache_attrs.cache_layout = 3;
  c.cache_attrs.page_size = 4;
  return c;
}

// MHCA: fp32 with an unquantized fp32 cache (no scale), offset mode, layout 0, ALiBi, defaults
// for everything else (num_kv_heads 0 = num_heads, is_causal 1).
CliCase MhcaPlainCase() {
  CliCase c;
  c.op = kMhca;
  c.inputs["query"] = RandomF32({3, 2, 4}, 31);
  c.inputs["current_key"] = RandomF32({3, 2, 4}, 32);
  c.inputs["current_value"] = RandomF32({3, 2, 4}, 33);
  c.inputs["seqstarts"] = I64({3}, {0, 1, 3});
  c.inputs["kvstarts"] = I64({3}, {0, 3, 5});
  c.inputs["cachestarts"] = I64({2}, {0, 8});
  c.inputs["start_pos"] = I64({2}, {2, 0});
  c.inputs["decoding_batches"] = Scalar(1);
  c.inputs["max_seqlen"] = Scalar(2);
  c.inputs["max_kvlen"] = Scalar(3);
  c.inputs["cache"] = RandomF32({16, 1, 2, 2, 4}, 34);
  c.flags = {"--num_heads", "2", "--head_dim", "4", "--is_alibi", "1"};
  c.attention_attrs.num_heads = 2;
  c.attention_attrs.head_dim = 4;
  c.attention_attrs.is_alibi = true;
  return c;
}

// `c` with the score attributes flagged and set for the direct call (both attention_attrs and
// unified_attrs): a sliding window, a logit soft-cap and a softmax scale.
CliCase WithScoreAttrs(CliCase c, int window_left, float cap, float scale) {
  c.flags.insert(c.flags.end(), {"--window_left", std::to_string(window_left), "--logits_soft_cap",
                                 std::to_string(cap), "--softmax_scale", std::to_string(scale)});
  // The direct call gets the values the tool parses from that text.
  const float parsed_cap = std::stof(std::to_string(cap));
  const float parsed_scale = std::stof(std::to_string(scale));
  c.attention_attrs.window_left = c.unified_attrs.window_left = window_left;
  c.attention_attrs.logits_soft_cap = c.unified_attrs.logits_soft_cap = parsed_cap;
  c.attention_attrs.softmax_scale = c.unified_attrs.softmax_scale = parsed_scale;
  return c;
}

// MHA with every score attribute: window 3, soft-cap 5, softmax scale 0.3 and per-head sinks,
// over MhaCase's mask, GQA and causal mix.
CliCase MhaScoreCase() {
  CliCase c = MhaCase();
  c = WithScoreAttrs(c, 3, 5.0f, 0.3f);
  c.inputs["sinks"] = RandomF32({4}, 15, -1.0f, 3.0f);
  return c;
}

// MHA in bf16: query, keys, values, mask and output as '<u2' bit patterns.
CliCase MhaBf16Case() {
  CliCase c = MhaCase();
  for (const char* name : {"query", "key", "value", "attn_mask"}) {
    c.inputs[name] = ToBf16(c.inputs.at(name));
  }
  return c;
}

// MHCA over an fp8 cache (uint8 file, --cache_dtype), with k_scale, v_scale, sinks and a window:
// MhcaPlainCase's step in fp32 activations, or bf16 with `bf16`.
CliCase MhcaFp8Case(DType fp8, bool bf16) {
  CliCase c = MhcaPlainCase();
  c.inputs["cache"] = RandomFp8(fp8, {16, 1, 2, 2, 4}, 35);
  c.inputs["k_scale"] = F32Scalar(0.375f);
  c.inputs["v_scale"] = F32Scalar(1.5f);
  c.inputs["sinks"] = RandomF32({2}, 36);
  if (bf16) {
    for (const char* name : {"query", "current_key", "current_value"}) {
      c.inputs[name] = ToBf16(c.inputs.at(name));
    }
  }
  c.flags.insert(c.flags.end(), {"--cache_dtype", fp8 == DType::kF8E4M3 ? "fp8_e4m3" : "fp8_e5m2"});
  return WithScoreAttrs(c, 1, 0.0f, 0.0f);
}

// KVC writing bf16 keys into a bf16 cache ('<u2' cache file), gathered as bf16.
CliCase KvcBf16Case() {
  CliCase c = KvcCase();
  c.inputs["current_key"] = RandomBf16({4, 2, 8}, 5);
  c.inputs["current_value"] = RandomBf16({4, 2, 8}, 6);
  c.inputs["cache"] = RandomBf16({32, 2, 2, 2, 8}, 7);
  c.inputs.erase("scale");
  c.flags = {"--num_layer", "2", "--layer_idx", "1", "--num_repeat", "2"};
  c.kvc_attrs.cache.quant_bit = 0;
  return c;
}

// KVC writing fp32 keys into an fp8 cache with its per-tensor scales.
CliCase KvcFp8Case(DType fp8) {
  CliCase c = KvcBf16Case();
  c.inputs["current_key"] = RandomF32({4, 2, 8}, 8, -30.0f, 30.0f);
  c.inputs["current_value"] = RandomF32({4, 2, 8}, 9);
  c.inputs["cache"] = RandomFp8(fp8, {32, 2, 2, 2, 8}, 10);
  c.inputs["k_scale"] = F32Scalar(0.0625f);
  c.inputs["v_scale"] = F32Scalar(3.0f);
  c.flags.insert(c.flags.end(), {"--cache_dtype", fp8 == DType::kF8E4M3 ? "fp8_e4m3" : "fp8_e5m2"});
  return c;
}

/// Views of the outputs, else of the inputs, by spec name; absent when neither has it.
dynattn::TensorLookup Lookup(Arrays& inputs, Arrays* outputs) {
  return [&inputs, outputs](const std::string& name) {
    for (Arrays* arrays : {outputs, &inputs}) {
      auto it = arrays->find(name);
      if (it != arrays->end()) return it->second.View();
    }
    return dynattn::TensorView();
  };
}

Status CallKeyValueCache(const CliCase& c, Arrays& in, Arrays* out) {
  const NpyArray& current_key = in.at("current_key");
  (*out)["key"] = MakeZeroArray(current_key.dtype, c.gathered_shape);
  (*out)["value"] = MakeZeroArray(current_key.dtype, c.gathered_shape);
  dynattn::KeyValueCacheArgs args = dynattn::KeyValueCacheArgsByName(Lookup(in, out));
  return dynattn::KeyValueCache(c.kvc_attrs, args);
}

Status CallMultiHeadAttention(const CliCase& c, Arrays& in, Arrays* out) {
  (*out)["attn_output"] = MakeZeroArray(in.at("query").dtype, in.at("query").shape);
  dynattn::MultiHeadAttentionArgs args = dynattn::MultiHeadAttentionArgsByName(Lookup(in, out));
  return dynattn::MultiHeadAttention(c.attention_attrs, args);
}

Status CallMultiHeadCacheAttention(const CliCase& c, Arrays& in, Arrays* out) {
  (*out)["attn_output"] = MakeZeroArray(in.at("query").dtype, in.at("query").shape);
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = c.attention_attrs;
  attrs.cache = c.cache_attrs;
  dynattn::MultiHeadCacheAttentionArgs args =
      dynattn::MultiHeadCacheAttentionArgsByName(Lookup(in, out));
  return dynattn::MultiHeadCacheAttention(attrs, args);
}

Status CallUnifiedAttention(const CliCase& c, Arrays& in, Arrays* out) {
  const NpyArray& query = in.at("query");
  (*out)["attn_output"] = MakeZeroArray(query.dtype, query.shape);
  if (c.unified_lse) (*out)["lse"] = MakeZeroArray(DType::kF32, {query.shape[0], query.shape[1]});
  const dynattn::TensorLookup tensors = Lookup(in, out);
  dynattn::BlockCache cache;
  DYNATTN_RETURN_IF_ERROR(dynattn::MakePmxBlockCache(
      tensors("cache"), tensors("scale"), c.cache_attrs, c.unified_attrs.num_kv_heads,
      c.unified_attrs.head_dim, c.block_size, &cache));
  return dynattn::UnifiedAttention(c.unified_attrs,
                                   dynattn::UnifiedAttentionArgsByName(tensors, &cache));
}

// The files the CLI should write (stem -> array), computed by calling the library directly.
Arrays ExpectedFiles(const CliCase& c) {
  Arrays in = c.inputs;  // The library updates these copies of the cache and scale.
  Arrays out;
  Status status;
  if (c.op == kKvc) status = CallKeyValueCache(c, in, &out);
  if (c.op == kMha) status = CallMultiHeadAttention(c, in, &out);
  if (c.op == kMhca) status = CallMultiHeadCacheAttention(c, in, &out);
  if (c.op == "unified_attention") status = CallUnifiedAttention(c, in, &out);
  REQUIRE_MESSAGE(status.ok(), "the library rejected a valid case: ", status.message());
  for (const char* in_out : {"cache", "scale"}) {
    if (in.count(in_out)) out[in_out] = in[in_out];
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Running the binary.

std::string Quote(const std::string& text) {
  std::string quoted = "'";
  for (char ch : text) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs the tool with `args`; `limits` is shell text run first (e.g. "ulimit -v N;").
CliResult RunCli(const std::vector<std::string>& args, const TempDir& scratch,
                 const std::string& limits = "") {
  std::string command = limits + Quote(RequireCli());
  for (const std::string& arg : args) command += " " + Quote(arg);
  const std::string out_path = scratch.Sub("stdout.txt");
  const std::string err_path = scratch.Sub("stderr.txt");
  command += " >" + Quote(out_path) + " 2>" + Quote(err_path) + " </dev/null";
  const int status = std::system(command.c_str());
  CliResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = ReadBytes(out_path);
  result.err = ReadBytes(err_path);
  return result;
}

void WriteInputs(const CliCase& c, const std::string& dir) {
  fs::create_directories(dir);
  for (const auto& [name, array] : c.inputs) {
    const Status status = WriteNpy(dir + "/" + name + ".npy", array);
    REQUIRE_MESSAGE(status.ok(), status.message());
  }
  for (const auto& [file_name, bytes] : c.raw_files) WriteBytes(dir + "/" + file_name, bytes);
}

std::vector<std::string> RunArgs(const CliCase& c, const std::string& in_dir,
                                 const std::string& out_dir) {
  std::vector<std::string> args = {"run", c.op, "--inputs", in_dir};
  if (c.pass_outputs_flag) {
    args.push_back("--outputs");
    args.push_back(out_dir);
  }
  args.insert(args.end(), c.flags.begin(), c.flags.end());
  return args;
}

// A successful run prints nothing of its own. oneTBB itself warns on stderr when --threads asks
// for more workers than the machine has cores; that line is tolerated, nothing else is.
bool HasOnlyTbbWarnings(const std::string& err) {
  size_t start = 0;
  while (start < err.size()) {
    size_t end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    const std::string line = err.substr(start, end - start);
    if (!line.empty() && line.rfind("TBB Warning", 0) != 0) return false;
    start = end + 1;
  }
  return true;
}

// Runs a valid case at several thread counts; every run must write exactly the library's bytes
// and leave the input files as they were.
void CheckValidCase(const CliCase& c) {
  const Arrays expected = ExpectedFiles(c);
  TempDir scratch;
  const std::string in_dir = scratch.Sub("in");
  WriteInputs(c, in_dir);
  const auto inputs_before = Snapshot(in_dir);
  std::map<std::string, std::string> first_run;
  for (const char* threads : {"1", "2", "3"}) {
    CAPTURE(threads);
    const std::string out_dir = scratch.Sub(std::string("out") + threads);
    fs::create_directory(out_dir);
    std::vector<std::string> args = RunArgs(c, in_dir, out_dir);
    args.insert(args.end(), {"--threads", threads});
    const CliResult result = RunCli(args, scratch);
    INFO("stderr: ", result.err);
    REQUIRE(result.exit_code == 0);
    CHECK(HasOnlyTbbWarnings(result.err));
    std::set<std::string> written;
    for (const auto& [file_name, bytes] : Snapshot(out_dir)) written.insert(file_name);
    std::set<std::string> wanted;
    for (const auto& [name, array] : expected) wanted.insert(name + ".npy");
    CHECK(written == wanted);
    for (const auto& entry : expected) {  // not a structured binding: CAPTURE takes a reference
      const std::string& name = entry.first;
      const auto& want = entry.second;
      CAPTURE(name);
      NpyArray got;
      const Status status = ReadNpy(out_dir + "/" + name + ".npy", &got);
      REQUIRE_MESSAGE(status.ok(), status.message());
      const bool fp8 = want.dtype == DType::kF8E4M3 || want.dtype == DType::kF8E5M2;
      CHECK(got.fp8_bytes == fp8);  // fp8 comes back as uint8 bytes of no named format
      if (!fp8) CHECK(got.dtype == want.dtype);
      CHECK(got.shape == want.shape);
      CHECK(got.bytes == want.bytes);
    }
    if (first_run.empty()) first_run = Snapshot(out_dir);
    CHECK(Snapshot(out_dir) == first_run);
    CHECK(Snapshot(in_dir) == inputs_before);
  }
}

// ---------------------------------------------------------------------------------------------
// Malformed runs.

struct BadRun {
  std::string title;
  CliCase c;
  std::vector<std::string> names;  // The error line must contain one of these.
};

// Runs `bad` and checks the failure contract: exit 2, one "dynattn: " line on stderr naming the
// input, nothing on stdout, the output directory as it was and the inputs untouched.
void CheckRejected(const BadRun& bad) {
  INFO("case: ", bad.title);
  TempDir scratch;
  const std::string in_dir = scratch.Sub("in");
  const std::string out_dir = scratch.Sub("out");
  WriteInputs(bad.c, in_dir);
  if (bad.c.out_dir != OutDir::kMissing) fs::create_directory(out_dir);
  if (bad.c.out_dir == OutDir::kNotEmpty) WriteBytes(out_dir + "/notes.txt", "keep me");
  const auto inputs_before = Snapshot(in_dir);
  const auto outputs_before =
      bad.c.out_dir == OutDir::kMissing ? std::map<std::string, std::string>() : Snapshot(out_dir);
  const std::string inputs_arg = bad.c.pass_inputs_dir ? in_dir : scratch.Sub("no_such_dir");
  const CliResult result = RunCli(RunArgs(bad.c, inputs_arg, out_dir), scratch);
  INFO("stderr: ", result.err);
  CHECK(result.exit_code == 2);
  CHECK(result.out.empty());
  CHECK(result.err.size() > std::strlen("dynattn: \n"));
  CHECK(result.err.rfind("dynattn: ", 0) == 0);
  CHECK(result.err.find('\n') == result.err.size() - 1);
  bool names_input = false;
  for (const std::string& name : bad.names)
    names_input |= result.err.find(name) != std::string::npos;
  CHECK_MESSAGE(names_input, "the line names none of the expected inputs");
  if (bad.c.out_dir == OutDir::kMissing) {
    CHECK_FALSE(fs::exists(out_dir));
  } else {
    CHECK(Snapshot(out_dir) == outputs_before);
  }
  CHECK(Snapshot(in_dir) == inputs_before);
}

// A copy of `c` changed by `edit`.
template <typename Edit>
CliCase With(CliCase c, Edit edit) {
  edit(c);
  return c;
}

CliCase WithFlags(CliCase c, const std::vector<std::string>& flags) {
  c.flags.insert(c.flags.end(), flags.begin(), flags.end());
  return c;
}

// A copy of `c` with attribute `flag` set to `value` (replaced when the case already sets it).
CliCase WithFlag(CliCase c, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < c.flags.size(); i += 2) {
    if (c.flags[i] == flag) {
      c.flags[i + 1] = value;
      return c;
    }
  }
  c.flags.insert(c.flags.end(), {flag, value});
  return c;
}

CliCase WithInput(CliCase c, const std::string& name, NpyArray array) {
  c.inputs[name] = std::move(array);
  return c;
}

CliCase Without(CliCase c, const std::string& name) {
  c.inputs.erase(name);
  return c;
}

// Replaces input `name` by its .npy bytes with `from` replaced by `to` (same length) in the
// header, or with the last `cut` bytes removed.
CliCase WithPatchedFile(CliCase c, const std::string& name, const std::string& from,
                        const std::string& to, size_t cut = 0) {
  TempDir scratch;
  const std::string path = scratch.Sub("x.npy");
  REQUIRE(WriteNpy(path, c.inputs.at(name)).ok());
  std::string bytes = ReadBytes(path);
  if (!from.empty()) {
    const size_t at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    bytes.replace(at, from.size(), to);
  }
  bytes.resize(bytes.size() - cut);
  c.inputs.erase(name);
  c.raw_files[name + ".npy"] = bytes;
  return c;
}

std::vector<BadRun> BadRuns() {
  const CliCase kvc = KvcCase();
  const CliCase mha = MhaCase();
  const CliCase mhca = MhcaCase();
  // KVC with an odd head_dim (5) and a packed int4 cache: there is no valid D/2.
  CliCase kvc_int4_odd = With(kvc, [](CliCase& c) {
    c.inputs["current_key"] = RandomF32({4, 2, 5}, 41);
    c.inputs["current_value"] = RandomF32({4, 2, 5}, 42);
    c.inputs["cache"] = RandomI8({32, 2, 2, 2, 2}, 43);
    c.inputs["scale"] = RandomScales({32, 2, 2, 2, 1}, 44);
    c.flags = {"--num_layer", "2", "--layer_idx", "1", "--quant_bit", "4", "--quant_group", "5"};
  });
  const CliCase mhca_fp8 = MhcaFp8Case(DType::kF8E4M3, false);
  const CliCase kvc_fp8 = KvcFp8Case(DType::kF8E5M2);
  // MHA with 3 query heads over 2 KV heads.
  CliCase mha_gqa_3_2 = With(Without(mha, "attn_mask"), [](CliCase& c) {
    c.inputs["query"] = RandomF32({6, 3, 8}, 45);
    c.flags = {"--num_heads", "3", "--head_dim", "8", "--num_kv_heads", "2"};
  });
  return {
      // Files and their format.
      {"missing required file", Without(kvc, "seqstarts"), {"seqstarts"}},
      {"missing required scalar", Without(mha, "decoding_batches"), {"decoding_batches"}},
      {"missing cache", Without(mhca, "cache"), {"cache"}},
      {"float seqstarts", WithInput(mha, "seqstarts", RandomF32({4}, 46)), {"seqstarts"}},
      {"2-D seqstarts",
       WithInput(mha, "seqstarts", Reshaped(mha.inputs.at("seqstarts"), {1, 4})),
       {"seqstarts"}},
      {"int32 start_pos", WithPatchedFile(kvc, "start_pos", "'<i8'", "'<i4'"), {"start_pos"}},
      {"fortran-order query",
       WithPatchedFile(mha, "query", "'fortran_order': False,", "'fortran_order': True, "),
       {"query"}},
      {"truncated key", WithPatchedFile(mha, "key", "", "", 3), {"key"}},
      {"unknown input file",
       With(mha, [](CliCase& c) { c.inputs["attn_masks"] = c.inputs.at("attn_mask"); }),
       {"attn_masks"}},
      {"key dtype differs from query",
       WithInput(mha, "key", RandomF16({12, 2, 8}, 47, 12, 15)),
       {"key"}},
      // Index tensors.
      {"seqstarts not non-decreasing",
       WithInput(mha, "seqstarts", I64({4}, {0, 4, 1, 6})),
       {"seqstarts"}},
      {"seqstarts[B] != query rows",
       WithInput(mha, "seqstarts", I64({4}, {0, 1, 4, 5})),
       {"seqstarts", "query"}},
      {"kvlen < seqlen in MHA",
       WithInput(mha, "kvstarts", I64({4}, {0, 5, 7, 12})),
       {"kvstarts", "seqstarts"}},
      {"kvlen != start_pos + seqlen",
       WithInput(kvc, "start_pos", I64({2}, {3, 0})),
       {"start_pos", "kvstarts"}},
      {"decoding_batches > B", WithInput(mha, "decoding_batches", Scalar(4)), {"decoding_batches"}},
      {"max_seqlen below the true maximum",
       WithInput(mha, "max_seqlen", Scalar(2)),
       {"max_seqlen"}},
      {"max_kvlen below the true maximum", WithInput(mha, "max_kvlen", Scalar(4)), {"max_kvlen"}},
      // Cache addressing.
      {"slot out of range", WithInput(kvc, "cachestarts", I64({2}, {0, 30})), {"cachestarts"}},
      {"duplicate write slots", WithInput(kvc, "cachestarts", I64({2}, {0, 2})), {"cachestarts"}},
      {"page entry -1 that is read",
       WithInput(mhca, "cachestarts", I64({2, 3}, {-1, 0, -1, 16, -1, -1})),
       {"cachestarts"}},
      {"page table with too few columns",
       WithInput(mhca, "cachestarts", I64({2, 1}, {8, 16})),
       {"cachestarts"}},
      // Cache format.
      {"quant_group does not divide head_dim",
       WithFlag(kvc, "--quant_group", "3"),
       {"quant_group"}},
      {"int4 with odd head_dim",
       kvc_int4_odd,
       {"head_dim", "current_key", "quant_bit", "quant_group"}},
      {"scale missing with quant_bit 8", Without(kvc, "scale"), {"scale"}},
      {"scale with the wrong shape",
       WithInput(kvc, "scale", RandomScales({32, 2, 2, 2, 1}, 48)),
       {"scale"}},
      {"cache shape does not match cache_layout", WithFlag(kvc, "--cache_layout", "1"), {"cache"}},
      {"rank-4 cache",
       WithInput(kvc, "cache", Reshaped(kvc.inputs.at("cache"), {32, 2, 2, 16})),
       {"cache"}},
      {"layer_idx >= num_layer", WithFlag(kvc, "--layer_idx", "2"), {"layer_idx"}},
      {"quant_bit 3", WithFlag(kvc, "--quant_bit", "3"), {"quant_bit"}},
      {"cache_mode 2", WithFlag(kvc, "--cache_mode", "2"), {"cache_mode"}},
      // Attention.
      {"num_heads not a multiple of num_kv_heads", mha_gqa_3_2, {"num_heads", "num_kv_heads"}},
      {"head_dim differs from the query", WithFlag(mha, "--head_dim", "4"), {"head_dim", "query"}},
      {"attn_mask with too few columns",
       WithInput(mha, "attn_mask", RandomF32({4, 6, 11}, 49)),
       {"attn_mask"}},
      {"rank-3 attn_mask whose first dim is not num_heads",
       WithInput(mha, "attn_mask", RandomF32({2, 6, 16}, 50)),
       {"attn_mask"}},
      {"attn_mask rows != query rows",
       WithInput(mha, "attn_mask", RandomF32({4, 5, 16}, 51)),
       {"attn_mask"}},
      // Score attributes (window, soft-cap, softmax scale), sinks, bf16 and fp8.
      {"window_left below -1", WithFlag(mha, "--window_left", "-2"), {"window_left"}},
      {"negative logits_soft_cap", WithFlag(mha, "--logits_soft_cap", "-1"), {"logits_soft_cap"}},
      {"NaN logits_soft_cap", WithFlag(mha, "--logits_soft_cap", "nan"), {"logits_soft_cap"}},
      {"infinite softmax_scale", WithFlag(mha, "--softmax_scale", "inf"), {"softmax_scale"}},
      {"negative softmax_scale", WithFlag(mhca, "--softmax_scale", "-0.5"), {"softmax_scale"}},
      {"non-numeric softmax_scale", WithFlag(mha, "--softmax_scale", "half"), {"softmax_scale"}},
      {"window_left is not an attribute of key_value_cache",
       WithFlag(kvc, "--window_left", "4"),
       {"window_left"}},
      {"sinks with a wrong length", WithInput(mha, "sinks", RandomF32({3}, 52)), {"sinks"}},
      {"sinks not float32", WithInput(mha, "sinks", RandomF16({4}, 53, 12, 14)), {"sinks"}},
      {"non-finite sink",
       WithInput(mha, "sinks", Make(DType::kF32, {4}, std::vector<float>{0, INFINITY, 1, 2})),
       {"sinks"}},
      {"bf16 key with an fp32 query",
       WithInput(mha, "key", ToBf16(mha.inputs.at("key"))),
       {"key", "query"}},
      {"unknown cache_dtype", WithFlag(mhca_fp8, "--cache_dtype", "fp8_e3m4"), {"cache_dtype"}},
      {"unknown precision", WithFlag(mha, "--precision", "turbo"), {"precision"}},
      {"precision is not an attribute of key_value_cache",
       WithFlag(kvc, "--precision", "fast"),
       {"precision"}},
      {"cache_dtype with an int8 cache",
       WithFlag(mhca, "--cache_dtype", "fp8_e4m3"),
       {"cache_dtype"}},
      {"uint8 cache without cache_dtype",
       With(mhca_fp8, [](CliCase& c) { c.flags.resize(c.flags.size() - 8); }),
       {"cache"}},
      {"uint8 query",
       WithInput(mhca_fp8, "query", RandomFp8(DType::kF8E4M3, {3, 2, 4}, 54)),
       {"query"}},
      {"zero k_scale", WithInput(mhca_fp8, "k_scale", F32Scalar(0.0f)), {"k_scale"}},
      {"NaN v_scale", WithInput(mhca_fp8, "v_scale", F32Scalar(NAN)), {"v_scale"}},
      {"k_scale that is not 0-d",
       WithInput(mhca_fp8, "k_scale", Make(DType::kF32, {2}, std::vector<float>{1, 1})),
       {"k_scale"}},
      {"k_scale with an int8 cache", WithInput(kvc, "k_scale", F32Scalar(1.0f)), {"k_scale"}},
      {"fp8 cache with a scale tensor",
       WithInput(kvc_fp8, "scale", RandomScales({32, 2, 2, 2, 2}, 55)),
       {"scale"}},
      // Command line.
      {"unknown op", With(mha, [](CliCase& c) { c.op = "multi_head_attn"; }), {"multi_head_attn"}},
      {"unknown attribute", WithFlag(mha, "--num_head", "4"), {"--num_head"}},
      {"attribute of another op", WithFlag(kvc, "--num_heads", "4"), {"num_heads"}},
      {"attribute MHCA does not take", WithFlag(mhca, "--num_repeat", "1"), {"num_repeat"}},
      {"non-numeric attribute", WithFlag(mha, "--head_dim", "eight"), {"head_dim"}},
      {"boolean attribute not 0 or 1", WithFlag(mha, "--is_causal", "2"), {"is_causal"}},
      {"attribute given twice", WithFlags(mha, {"--num_heads", "4"}), {"num_heads"}},
      {"non-numeric --threads", WithFlag(mha, "--threads", "many"), {"threads"}},
      {"negative --threads", WithFlag(mha, "--threads", "-1"), {"threads"}},
      {"empty --threads", WithFlag(mha, "--threads", ""), {"threads"}},
      {"--outputs not given",
       With(mha, [](CliCase& c) { c.pass_outputs_flag = false; }),
       {"--outputs"}},
      {"OUTDIR not empty",
       With(mha, [](CliCase& c) { c.out_dir = OutDir::kNotEmpty; }),
       {"--outputs"}},
      {"OUTDIR missing",
       With(mha, [](CliCase& c) { c.out_dir = OutDir::kMissing; }),
       {"--outputs"}},
      {"inputs directory missing",
       With(mha, [](CliCase& c) { c.pass_inputs_dir = false; }),
       {"--inputs"}},
  };
}

// ---------------------------------------------------------------------------------------------
// Unified attention: a random mixed step through the tool, against the float64 reference.

constexpr const char* kUnified = "unified_attention";
constexpr int kUnifiedBlockSize = 4;

// What varies between the unified cases.
struct UnifiedSetup {
  DType activations = DType::kF16;
  int quant_bit = 8;  // 0: plain cache of the activations' dtype, 8 or 4 with fp16 scales.
  int cache_layout = 3;
  int num_layer = 2;
  int layer_idx = 1;
  bool alibi = false;
  bool lse = true;
  uint64_t seed = 1;
};

// One request of the step: `query` new tokens after `context` cached ones, in the logical blocks
// `blocks` (indices into the step's list of blocks, which are then given permuted physical ids).
struct UnifiedRequest {
  int64_t context = 0;
  int64_t query = 0;
  std::vector<int> blocks;
};

// Block size 4. Logical blocks: 0, 1 a two-block prefix (0 read by requests 1, 2, 4; 1 by 1, 2),
// the rest each request's own. In order: a decode sharing the prefix (context 9), a prompt
// (6 tokens), a multi-token decode (context 7, 3 tokens), a prefix-cached prompt chunk (context
// 8, 5 tokens), a decode sharing only block 0 (context 6). 11 blocks in use of 14.
const std::vector<UnifiedRequest>& UnifiedRequests() {
  static const std::vector<UnifiedRequest> requests = {
      {9, 1, {0, 1, 6}}, {0, 6, {2, 3}}, {7, 3, {8, 9, 10}}, {8, 5, {0, 1, 4, 5}}, {6, 1, {0, 7}}};
  return requests;
}
constexpr int kUnifiedBlocksUsed = 11;
constexpr int kUnifiedBlocks = 14;

dynattn_ref::Array ToReference(const NpyArray& array) {
  dynattn_ref::Array out;
  out.dt = dynattn::cli::RefDtOf(array.dtype);
  out.shape = array.shape;
  out.bytes = array.bytes;
  return out;
}

// A permutation of [0, n).
std::vector<int64_t> Permutation(int64_t n, Lcg* rng) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  for (int64_t i = n - 1; i > 0; --i) std::swap(ids[i], ids[rng->Next() % (i + 1)]);
  return ids;
}

// (B, max_blocks) physical ids of every request's blocks; -1 past a request's last block.
NpyArray BlockTable(const std::vector<int64_t>& physical) {
  const std::vector<UnifiedRequest>& requests = UnifiedRequests();
  size_t width = 0;
  for (const UnifiedRequest& r : requests) width = std::max(width, r.blocks.size());
  std::vector<int64_t> table(requests.size() * width, -1);
  for (size_t b = 0; b < requests.size(); ++b) {
    for (size_t j = 0; j < requests[b].blocks.size(); ++j) {
      table[b * width + j] = physical[requests[b].blocks[j]];
    }
  }
  return I64({static_cast<int64_t>(requests.size()), static_cast<int64_t>(width)}, table);
}

// One valid cached element: a value in [-2, 2) as the cache stores it, or a random code.
void StoreValidElement(const UnifiedSetup& s, int64_t offset, Lcg* rng, NpyArray* cache) {
  if (s.quant_bit == 8) {
    cache->bytes[offset] = static_cast<uint8_t>(static_cast<int>(rng->Next() % 255) - 127);
  } else if (s.quant_bit == 4) {
    const int low = static_cast<int>(rng->Next() % 15) - 7, high = rng->Next() % 15 - 7;
    cache->bytes[offset] = static_cast<uint8_t>((low & 0xF) | (high & 0xF) << 4);
  } else if (s.activations == DType::kF16) {
    const uint16_t bits = dynattn_ref::F16Bits(rng->Uniform(-2.0f, 2.0f));
    std::memcpy(cache->bytes.data() + 2 * offset, &bits, 2);
  } else {
    const float value = rng->Uniform(-2.0f, 2.0f);
    std::memcpy(cache->bytes.data() + 4 * offset, &value, 4);
  }
}

// The cache (and scale) of the step: valid history in every slot of the blocks in use of layer
// `layer_idx`; all-ones bytes (NaN for floats and scales) everywhere else, which a correct
// implementation never reads.
void FillUnifiedCache(const UnifiedSetup& s, const std::vector<int64_t>& physical, int64_t hkv,
                      int64_t d, Lcg* rng, Arrays* inputs) {
  const int64_t max_t = int64_t{kUnifiedBlocks} * kUnifiedBlockSize;
  const int64_t row = s.quant_bit == 4 ? d / 2 : d, groups = d / 4;
  const DType cache_dtype = s.quant_bit == 0 ? s.activations : DType::kI8;
  NpyArray cache = MakeZeroArray(
      cache_dtype, dynattn_ref::detail::CacheShape(s.cache_layout, s.num_layer, max_t, hkv, row));
  NpyArray scale = MakeZeroArray(DType::kF16, dynattn_ref::detail::CacheShape(
                                                  s.cache_layout, s.num_layer, max_t, hkv, groups));
  std::fill(cache.bytes.begin(), cache.bytes.end(), 0xFF);
  std::fill(scale.bytes.begin(), scale.bytes.end(), 0xFF);
  const float scale_lo = s.quant_bit == 4 ? 0.1f : 0.005f;
  for (int i = 0; i < kUnifiedBlocksUsed; ++i) {
    for (int64_t slot = physical[i] * kUnifiedBlockSize;
         slot < (physical[i] + 1) * kUnifiedBlockSize; ++slot) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int64_t h = 0; h < hkv; ++h) {
          for (int64_t x = 0; x < row; ++x) {
            StoreValidElement(
                s,
                dynattn_ref::detail::CacheOffset(s.cache_layout, slot, s.layer_idx, kv, h, x,
                                                 s.num_layer, max_t, hkv, row),
                rng, &cache);
          }
          for (int64_t g = 0; g < groups; ++g) {
            const uint16_t bits = dynattn_ref::F16Bits(rng->Uniform(scale_lo, 2 * scale_lo));
            const int64_t at = dynattn_ref::detail::CacheOffset(
                s.cache_layout, slot, s.layer_idx, kv, h, g, s.num_layer, max_t, hkv, groups);
            std::memcpy(scale.bytes.data() + 2 * at, &bits, 2);
          }
        }
      }
    }
  }
  (*inputs)["cache"] = std::move(cache);
  if (s.quant_bit != 0) (*inputs)["scale"] = std::move(scale);
}

NpyArray RandomActivations(DType dtype, const std::vector<int64_t>& shape, uint64_t seed) {
  return dtype == DType::kF16 ? RandomF16(shape, seed, 12, 15) : RandomF32(shape, seed);
}

// The unified step of `s`: GQA 4:2, D = 16, quant groups of 4, block ids permuted.
CliCase UnifiedCase(const UnifiedSetup& s) {
  constexpr int64_t kHq = 4, kHkv = 2, kD = 16;
  CliCase c;
  c.op = kUnified;
  Lcg rng(s.seed);
  const std::vector<int64_t> physical = Permutation(kUnifiedBlocks, &rng);
  std::vector<int64_t> qsl{0}, context;
  for (const UnifiedRequest& r : UnifiedRequests()) {
    qsl.push_back(qsl.back() + r.query);
    context.push_back(r.context);
  }
  const int64_t t = qsl.back(), b = static_cast<int64_t>(context.size());
  c.inputs["query"] = RandomActivations(s.activations, {t, kHq, kD}, s.seed + 1);
  c.inputs["current_key"] = RandomActivations(s.activations, {t, kHkv, kD}, s.seed + 2);
  c.inputs["current_value"] = RandomActivations(s.activations, {t, kHkv, kD}, s.seed + 3);
  c.inputs["query_start_loc"] = I64({b + 1}, qsl);
  c.inputs["context_lens"] = I64({b}, context);
  c.inputs["block_table"] = BlockTable(physical);
  FillUnifiedCache(s, physical, kHkv, kD, &rng, &c.inputs);
  const auto text = [](int64_t value) { return std::to_string(value); };
  c.flags = {"--num_heads",    text(kHq),
             "--head_dim",     text(kD),
             "--num_kv_heads", text(kHkv),
             "--num_layer",    text(s.num_layer),
             "--layer_idx",    text(s.layer_idx),
             "--quant_bit",    text(s.quant_bit),
             "--quant_group",  "4",
             "--cache_layout", text(s.cache_layout),
             "--block_size",   text(kUnifiedBlockSize),
             "--is_alibi",     text(s.alibi),
             "--return_lse",   text(s.lse)};
  return c;
}

// What a unified case with the serving-feature inputs stores: bf16 activations and cache, or an fp8
// cache (with fp32 activations).
enum class UnifiedStorage { kBf16, kF8E4M3, kF8E5M2 };

// UnifiedCase's step (plain cache, layout 3, layer 1 of 2, lse) with a window of 5, a soft-cap of
// 20, a softmax scale of 0.2 and sinks, stored as `storage`; checked against the library called
// directly (CheckValidCase), bit for bit.
CliCase UnifiedScoreCase(UnifiedStorage storage, uint64_t seed) {
  UnifiedSetup s;
  s.activations = DType::kF32;
  s.quant_bit = 0;
  s.seed = seed;
  CliCase c = UnifiedCase(s);
  if (storage == UnifiedStorage::kBf16) {
    for (const char* name : {"query", "current_key", "current_value", "cache"}) {
      c.inputs[name] = ToBf16(c.inputs.at(name));
    }
  } else {
    const DType fp8 = storage == UnifiedStorage::kF8E4M3 ? DType::kF8E4M3 : DType::kF8E5M2;
    c.inputs["cache"] = RandomFp8(fp8, c.inputs.at("cache").shape, seed + 7);
    c.inputs["k_scale"] = F32Scalar(0.5f);
    c.inputs["v_scale"] = F32Scalar(0.25f);
    c.flags.insert(c.flags.end(),
                   {"--cache_dtype", fp8 == DType::kF8E4M3 ? "fp8_e4m3" : "fp8_e5m2"});
  }
  c.inputs["sinks"] = RandomF32({4}, seed + 8, -1.0f, 2.0f);
  c.cache_attrs.num_layer = s.num_layer;
  c.cache_attrs.layer_idx = s.layer_idx;
  c.cache_attrs.quant_group = 4;
  c.cache_attrs.cache_layout = s.cache_layout;
  c.unified_attrs.num_heads = 4;
  c.unified_attrs.num_kv_heads = 2;
  c.unified_attrs.head_dim = 16;
  c.block_size = kUnifiedBlockSize;
  c.unified_lse = true;
  return WithScoreAttrs(c, 5, 20.0f, 0.2f);
}

// The reference's attributes for `s` (as UnifiedCase sets the flags).
dynattn_ref::Attrs UnifiedReferenceAttrs(const UnifiedSetup& s) {
  dynattn_ref::Attrs attrs;
  attrs.num_heads = 4;
  attrs.head_dim = 16;
  attrs.num_kv_heads = 2;
  attrs.num_layer = s.num_layer;
  attrs.layer_idx = s.layer_idx;
  attrs.quant_bit = s.quant_bit;
  attrs.quant_group = 4;
  attrs.cache_layout = s.cache_layout;
  attrs.is_alibi = s.alibi ? 1 : 0;
  attrs.block_size = kUnifiedBlockSize;
  return attrs;
}

// Checks one run's output directory against the reference: attention and LSE within the spec's
// tolerances, cache and scale bytes exactly, and no other file.
void CheckUnifiedOutputs(const CliCase& c, bool lse, const dynattn_ref::AttnResult& want,
                         const std::string& out_dir) {
  const bool quantized = c.inputs.count("scale") != 0;
  std::set<std::string> written, wanted = {"attn_output.npy", "cache.npy"};
  if (lse) wanted.insert("lse.npy");
  if (quantized) wanted.insert("scale.npy");
  for (const auto& [file_name, bytes] : Snapshot(out_dir)) written.insert(file_name);
  CHECK(written == wanted);
  Arrays got;
  for (const std::string& file_name : wanted) {
    const std::string name = file_name.substr(0, file_name.size() - 4);
    const Status status = ReadNpy(out_dir + "/" + file_name, &got[name]);
    REQUIRE_MESSAGE(status.ok(), status.message());
  }
  const NpyArray& query = c.inputs.at("query");
  CHECK(got["attn_output"].dtype == query.dtype);
  const std::string attention = dynattn_ref::CheckAttention(want, ToReference(got["attn_output"]));
  CHECK_MESSAGE(attention.empty(), attention);
  if (lse) {
    CHECK(got["lse"].shape == std::vector<int64_t>{query.shape[0], query.shape[1]});
    const std::string lse_error = dynattn_ref::CheckLse(want, ToReference(got["lse"]));
    CHECK_MESSAGE(lse_error.empty(), lse_error);
  }
  CHECK(got["cache"].shape == want.cache.shape);
  CHECK(got["cache"].bytes == want.cache.bytes);
  if (quantized) {
    CHECK(got["scale"].shape == want.scale.shape);
    CHECK(got["scale"].bytes == want.scale.bytes);
  }
}

// Runs a unified case at each of `threads`: every run must match the reference, give the same
// bytes as the others and leave the inputs alone.
void CheckUnifiedRuns(const CliCase& c, const dynattn_ref::Attrs& attrs, bool lse,
                      const std::vector<std::string>& threads) {
  dynattn_ref::Tensors reference_inputs;
  for (const auto& [name, array] : c.inputs) reference_inputs[name] = ToReference(array);
  const dynattn_ref::AttnResult want = dynattn_ref::UnifiedAttention(attrs, reference_inputs);
  TempDir scratch;
  const std::string in_dir = scratch.Sub("in");
  WriteInputs(c, in_dir);
  const auto inputs_before = Snapshot(in_dir);
  std::map<std::string, std::string> first_run;
  for (const std::string& thread_count : threads) {
    CAPTURE(thread_count);
    const std::string out_dir = scratch.Sub("out" + thread_count);
    fs::create_directory(out_dir);
    std::vector<std::string> args = RunArgs(c, in_dir, out_dir);
    args.insert(args.end(), {"--threads", thread_count});
    const CliResult result = RunCli(args, scratch);
    INFO("stderr: ", result.err);
    REQUIRE(result.exit_code == 0);
    CHECK(HasOnlyTbbWarnings(result.err));
    CheckUnifiedOutputs(c, lse, want, out_dir);
    if (first_run.empty()) first_run = Snapshot(out_dir);
    CHECK(Snapshot(out_dir) == first_run);
    CHECK(Snapshot(in_dir) == inputs_before);
  }
}

// The hand-built step of `s` at 1, 2 and 3 threads.
void CheckUnifiedCase(const UnifiedSetup& s) {
  CheckUnifiedRuns(UnifiedCase(s), UnifiedReferenceAttrs(s), s.lse, {"1", "2", "3"});
}

NpyArray FromReference(const dynattn_ref::Array& array) {
  NpyArray out = MakeZeroArray(dynattn::cli::DTypeOf(array.dt), array.shape);
  out.bytes = array.bytes;
  return out;
}

// dynattn_ref::RandomUnifiedCase as a tool run, with --return_lse 1.
CliCase RandomUnifiedCliCase(const dynattn_ref::Case& random) {
  CliCase c;
  c.op = kUnified;
  for (const auto& [name, array] : random.inputs) c.inputs[name] = FromReference(array);
  const dynattn_ref::Attrs& a = random.attrs;
  for (const auto& [flag, value] :
       std::vector<std::pair<std::string, int>>{{"--num_heads", a.num_heads},
                                                {"--head_dim", a.head_dim},
                                                {"--num_kv_heads", a.num_kv_heads},
                                                {"--num_layer", a.num_layer},
                                                {"--layer_idx", a.layer_idx},
                                                {"--quant_bit", a.quant_bit},
                                                {"--quant_group", a.quant_group},
                                                {"--cache_layout", a.cache_layout},
                                                {"--block_size", a.block_size},
                                                {"--is_alibi", a.is_alibi},
                                                {"--return_lse", 1},
                                                {"--window_left", a.window_left}}) {
    c.flags.insert(c.flags.end(), {flag, std::to_string(value)});
  }
  // The float attributes exactly (%.9g reads back as the same float), and an fp8 cache's format.
  for (const auto& [flag, value] : std::vector<std::pair<std::string, double>>{
           {"--logits_soft_cap", a.logits_soft_cap}, {"--softmax_scale", a.softmax_scale}}) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.9g", value);
    c.flags.insert(c.flags.end(), {flag, text});
  }
  if (!a.cache_dtype.empty()) c.flags.insert(c.flags.end(), {"--cache_dtype", a.cache_dtype});
  return c;
}

// The base unified case with block table entry (request b, column j) set to logical block
// `block`'s physical id.
CliCase WithBlock(const CliCase& c, int64_t b, int64_t j, int64_t id) {
  NpyArray table = c.inputs.at("block_table");
  const int64_t value = id;
  std::memcpy(table.bytes.data() + (b * table.shape[1] + j) * sizeof(int64_t), &value,
              sizeof(value));
  return WithInput(c, "block_table", table);
}

int64_t BlockId(const CliCase& c, int64_t b, int64_t j) {
  const NpyArray& table = c.inputs.at("block_table");
  int64_t id = 0;
  std::memcpy(&id, table.bytes.data() + (b * table.shape[1] + j) * sizeof(int64_t), sizeof(id));
  return id;
}

std::vector<BadRun> UnifiedBadRuns() {
  const CliCase u = UnifiedCase({});
  const int64_t t = u.inputs.at("query").shape[0];
  return {
      {"unified: missing block_table", Without(u, "block_table"), {"block_table"}},
      {"unified: missing query_start_loc", Without(u, "query_start_loc"), {"query_start_loc"}},
      {"unified: missing cache", Without(u, "cache"), {"cache"}},
      {"unified: scale missing with quant_bit 8", Without(u, "scale"), {"scale"}},
      {"unified: misspelled input file",
       With(u, [](CliCase& c) { c.inputs["block_tables"] = c.inputs.at("block_table"); }),
       {"block_tables"}},
      {"unified: float context_lens",
       WithInput(u, "context_lens", RandomF32({5}, 61)),
       {"context_lens"}},
      {"unified: int32 block_table",
       WithPatchedFile(u, "block_table", "'<i8'", "'<i4'"),
       {"block_table"}},
      {"unified: context_lens with B+1 entries",
       WithInput(u, "context_lens", I64({6}, {9, 0, 7, 8, 6, 0})),
       {"context_lens", "query_start_loc"}},
      {"unified: negative context_lens",
       WithInput(u, "context_lens", I64({5}, {9, -1, 7, 8, 6})),
       {"context_lens"}},
      {"unified: query_start_loc[B] != T",
       WithInput(u, "query_start_loc", I64({6}, {0, 1, 7, 10, 15, t - 1})),
       {"query_start_loc", "query"}},
      {"unified: query_start_loc decreasing",
       WithInput(u, "query_start_loc", I64({6}, {0, 7, 1, 10, 15, t})),
       {"query_start_loc"}},
      {"unified: block id past the cache", WithBlock(u, 0, 2, kUnifiedBlocks), {"block_table"}},
      {"unified: block id -1 that is read", WithBlock(u, 3, 1, -1), {"block_table"}},
      {"unified: block_table with too few columns",
       WithInput(u, "block_table", I64({5, 1}, {0, 1, 2, 3, 4})),
       {"block_table"}},
      {"unified: two requests write the same slot",
       WithBlock(u, 2, 2, BlockId(u, 0, 2)),
       {"block_table"}},
      {"unified: a fresh token overwrites a shared prefix block",
       WithBlock(u, 4, 1, BlockId(u, 0, 1)),
       {"block_table"}},
      {"unified: block_size not given",
       With(u,
            [](CliCase& c) {
              for (size_t i = 0; i + 1 < c.flags.size(); i += 2) {
                if (c.flags[i] == "--block_size")
                  c.flags.erase(c.flags.begin() + i, c.flags.begin() + i + 2);
              }
            }),
       {"block_size"}},
      {"unified: block_size does not divide MaxT",
       WithFlag(u, "--block_size", "3"),
       {"block_size", "cache"}},
      {"unified: return_lse 2", WithFlag(u, "--return_lse", "2"), {"return_lse"}},
      {"unified: is_causal is not its attribute", WithFlag(u, "--is_causal", "1"), {"is_causal"}},
      {"unified: page_size is not its attribute", WithFlag(u, "--page_size", "4"), {"page_size"}},
      {"unified: cache shape does not match cache_layout",
       WithFlag(u, "--cache_layout", "0"),
       {"cache"}},
      {"unified: num_heads not a multiple of num_kv_heads",
       WithFlag(u, "--num_kv_heads", "3"),
       {"num_heads", "num_kv_heads", "current_key", "cache"}},
      {"unified: current_key dtype differs from query",
       WithInput(u, "current_key", RandomF32({t, 2, 16}, 62)),
       {"current_key"}},
  };
}

// ---------------------------------------------------------------------------------------------
// `dynattn golden`.

// The `run` arguments of a golden case, from its attributes.txt ("op OP", then "NAME VALUE").
std::vector<std::string> GoldenRunArgs(const std::string& case_dir, const std::string& out_dir) {
  std::istringstream lines(ReadBytes(case_dir + "/attributes.txt"));
  std::string key, value;
  REQUIRE((lines >> key >> value));
  REQUIRE(key == "op");
  std::vector<std::string> args = {"run",       value,  "--inputs", case_dir + "/inputs",
                                   "--outputs", out_dir};
  while (lines >> key >> value) args.insert(args.end(), {"--" + key, value});
  return args;
}

// The case names of DIR/manifest.txt, in order (comment lines skipped).
std::vector<std::string> ManifestNames(const std::string& dir) {
  std::istringstream lines(ReadBytes(dir + "/manifest.txt"));
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] != '#') names.push_back(line.substr(0, line.find('\t')));
  }
  return names;
}

// Runs `dynattn run` on a golden case's inputs and compares every output file with its bytes.
void CheckGoldenReproduces(const std::string& case_dir, const TempDir& scratch) {
  CAPTURE(case_dir);
  const std::string out_dir = scratch.Sub("rerun");
  fs::remove_all(out_dir);
  fs::create_directory(out_dir);
  const CliResult result = RunCli(GoldenRunArgs(case_dir, out_dir), scratch);
  INFO("stderr: ", result.err);
  REQUIRE(result.exit_code == 0);
  const auto golden = Snapshot(case_dir + "/outputs");
  CHECK(golden.count("attn_output.npy") + golden.count("key.npy") == 1);
  CHECK(Snapshot(out_dir) == golden);
}

TEST_SUITE("cli") {
  TEST_CASE("key_value_cache writes the library's key, value, cache and scale") {
    CheckValidCase(KvcCase());
  }

  TEST_CASE("multi_head_attention writes the library's attn_output") { CheckValidCase(MhaCase()); }

  TEST_CASE("multi_head_cache_attention writes the library's attn_output, cache and scale") {
    CheckValidCase(MhcaCase());
  }

  TEST_CASE("multi_head_cache_attention without a scale writes no scale.npy") {
    CheckValidCase(MhcaPlainCase());
  }

  TEST_CASE("multi_head_attention with window, soft-cap, softmax scale and sinks") {
    CheckValidCase(MhaScoreCase());
  }

  TEST_CASE("multi_head_attention in bf16 writes the library's '<u2' attn_output") {
    CheckValidCase(MhaBf16Case());
  }

  TEST_CASE("multi_head_cache_attention over fp8 caches with k_scale, v_scale, sinks, window") {
    for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
      for (bool bf16 : {false, true}) {
        CAPTURE(dynattn::DTypeName(fp8));
        CAPTURE(bf16);
        CheckValidCase(MhcaFp8Case(fp8, bf16));
      }
    }
  }

  TEST_CASE("key_value_cache writes bf16 and fp8 caches byte for byte") {
    CheckValidCase(KvcBf16Case());
    CheckValidCase(KvcFp8Case(DType::kF8E4M3));
    CheckValidCase(KvcFp8Case(DType::kF8E5M2));
  }

  TEST_CASE("unified_attention with window, soft-cap, scale and sinks over bf16 and fp8 caches") {
    const uint64_t seed = dynattn_test::BaseSeed();
    CheckValidCase(UnifiedScoreCase(UnifiedStorage::kBf16, seed));
    CheckValidCase(UnifiedScoreCase(UnifiedStorage::kF8E4M3, seed + 1));
    CheckValidCase(UnifiedScoreCase(UnifiedStorage::kF8E5M2, seed + 2));
  }

  TEST_CASE("the new attributes change the result (the flags are not ignored)") {
    // Each flag alone, on top of a base case, must change attn_output's bytes.
    const Arrays base = ExpectedFiles(MhaCase());
    for (const auto& entry : std::vector<std::pair<std::string, std::string>>{
             {"--window_left", "1"}, {"--logits_soft_cap", "0.5"}, {"--softmax_scale", "2"}}) {
      const std::string& flag = entry.first;  // not a structured binding: CAPTURE references it
      const std::string& value = entry.second;
      CAPTURE(flag);
      CliCase c = WithFlag(MhaCase(), flag, value);
      if (flag == "--window_left") c.attention_attrs.window_left = 1;
      if (flag == "--logits_soft_cap") c.attention_attrs.logits_soft_cap = 0.5f;
      if (flag == "--softmax_scale") c.attention_attrs.softmax_scale = 2.0f;
      CHECK(ExpectedFiles(c).at("attn_output").bytes != base.at("attn_output").bytes);
      CheckValidCase(c);
    }
  }

  TEST_CASE("unified_attention matches the reference: fp16, int8 cache, layout 3, layer 1 of 2") {
    CheckUnifiedCase({});
  }

  TEST_CASE("unified_attention matches the reference: fp32, plain cache, layout 0, ALiBi, no lse") {
    UnifiedSetup s;
    s.activations = DType::kF32;
    s.quant_bit = 0;
    s.cache_layout = 0;
    s.num_layer = 1;
    s.layer_idx = 0;
    s.alibi = true;
    s.lse = false;
    s.seed = 2;
    CheckUnifiedCase(s);
  }

  TEST_CASE("unified_attention matches the reference: fp16, int4 cache, layout 2, ALiBi") {
    UnifiedSetup s;
    s.quant_bit = 4;
    s.cache_layout = 2;
    s.num_layer = 3;
    s.layer_idx = 0;
    s.alibi = true;
    s.seed = 3;
    CheckUnifiedCase(s);
  }

  TEST_CASE("unified_attention matches the reference: fp16, plain fp16 cache, layout 1") {
    UnifiedSetup s;
    s.quant_bit = 0;
    s.cache_layout = 1;
    s.seed = 4;
    CheckUnifiedCase(s);
  }

  TEST_CASE("unified_attention matches the reference on random steps (RandomUnifiedCase)") {
    dynattn_ref::GenOptions options;
    options.small = true;
    for (uint64_t i = 0; i < 12; ++i) {
      const uint64_t seed = dynattn_test::BaseSeed() + i;
      const dynattn_ref::Case random = dynattn_ref::RandomUnifiedCase(seed, options);
      INFO("seed " << seed << ": " << random.description);
      CheckUnifiedRuns(RandomUnifiedCliCase(random), random.attrs, true, {"2"});
    }
  }

  TEST_CASE("every malformed unified_attention run exits 2 naming the input and writes nothing") {
    const std::vector<BadRun> bad_runs = UnifiedBadRuns();
    CHECK(bad_runs.size() >= 20);
    for (const BadRun& bad : bad_runs) CheckRejected(bad);
  }

  TEST_CASE("every malformed run exits 2 with one line naming the input and writes nothing") {
    const std::vector<BadRun> bad_runs = BadRuns();
    CHECK(bad_runs.size() >= 25);
    for (const BadRun& bad : bad_runs) CheckRejected(bad);
  }

  TEST_CASE("outputs are allocated only after the library accepted the inputs") {
    // A small invalid input (start_pos disagrees with kvstarts) whose --num_repeat implies 2 GiB
    // per output: refused as an invalid input under a 1 GiB address-space limit, not as "out of
    // memory", because the run plans before it allocates. (It used to zero-fill the outputs first.)
    // ASan reserves terabytes of shadow address space: there the limit cannot be set, and only
    // the order (the input's error, not the output's size) is checked.
#ifdef DYNATTN_TEST_ASAN
    const std::string limit = "";
#else
    const std::string limit = "ulimit -v 1048576; ";
#endif
    TempDir scratch;
    const CliCase bad = WithInput(WithFlag(KvcCase(), "--num_repeat", std::to_string(1 << 22)),
                                  "start_pos", I64({2}, {3, 0}));
    const std::string in_dir = scratch.Sub("in");
    const std::string out_dir = scratch.Sub("out");
    WriteInputs(bad, in_dir);
    fs::create_directory(out_dir);
    const CliResult result = RunCli(RunArgs(bad, in_dir, out_dir), scratch, limit);
    INFO("stderr: ", result.err);
    CHECK(result.exit_code == 2);
    CHECK(result.err.find("dynattn: kvstarts: request 0 has kvlen 5 but start_pos 3") == 0);
    CHECK(fs::is_empty(out_dir));
    if (limit.empty()) return;
    // The same input made valid needs the 2 x 2 GiB it asks for: under the same limit that is a
    // failure of the machine (exit 1), after validation, with nothing written.
    const CliCase big = WithFlag(KvcCase(), "--num_repeat", std::to_string(1 << 22));
    WriteInputs(big, in_dir);
    const CliResult valid = RunCli(RunArgs(big, in_dir, out_dir), scratch, limit);
    INFO("stderr: ", valid.err);
    CHECK(valid.exit_code == 1);
    CHECK(fs::is_empty(out_dir));
  }

  TEST_CASE("a dangling link for an optional input is a broken input, not an absent one") {
    TempDir scratch;
    const CliCase mha = Without(MhaCase(), "attn_mask");
    const std::string in_dir = scratch.Sub("in");
    const std::string out_dir = scratch.Sub("out");
    WriteInputs(mha, in_dir);
    fs::create_directory(out_dir);
    fs::create_symlink(scratch.Sub("nowhere.npy"), in_dir + "/attn_mask.npy");
    const CliResult result = RunCli(RunArgs(mha, in_dir, out_dir), scratch);
    INFO("stderr: ", result.err);
    CHECK(result.exit_code == 2);
    CHECK(result.err.find("attn_mask") != std::string::npos);
    CHECK(fs::is_empty(out_dir));
  }

  TEST_CASE("golden writes the fixed matrix, and `run` on each case reproduces its outputs") {
    const std::vector<dynattn_ref::GoldenSpec> matrix = dynattn_ref::GoldenMatrix();
    std::set<std::string> names, ops;
    for (const dynattn_ref::GoldenSpec& spec : matrix) {
      names.insert(spec.name);
      ops.insert(spec.op);
    }
    CHECK(names.size() == matrix.size());
    CHECK(ops.size() == 4);
    TempDir scratch;
    const std::string dir = scratch.Sub("golden");
    const CliResult result = RunCli({"golden", "--outputs", dir}, scratch);
    INFO("stderr: ", result.err);
    REQUIRE(result.exit_code == 0);
    const std::vector<std::string> listed = ManifestNames(dir);
    REQUIRE(listed.size() == matrix.size());
    for (size_t i = 0; i < matrix.size(); ++i) {
      CHECK(listed[i] == matrix[i].name);
      const std::string case_dir = dir + "/" + listed[i];
      CHECK(fs::exists(case_dir + "/command.txt"));
      CHECK(fs::exists(case_dir + "/inputs/" +
                       (matrix[i].op == kKvc ? "current_key.npy" : "query.npy")));
      CheckGoldenReproduces(case_dir, scratch);
    }
  }

  TEST_CASE("golden is deterministic, honours --cases and --seed, and refuses a full directory") {
    TempDir scratch;
    const auto write = [&](const std::string& name, std::vector<std::string> extra) {
      std::vector<std::string> args = {"golden", "--outputs", scratch.Sub(name), "--cases", "3"};
      args.insert(args.end(), extra.begin(), extra.end());
      const CliResult result = RunCli(args, scratch);
      INFO("stderr: ", result.err);
      CHECK(result.exit_code == 0);
      return ManifestNames(scratch.Sub(name));
    };
    const std::vector<std::string> first = write("a", {});
    CHECK(first.size() == 3);
    CHECK(write("b", {}) == first);
    for (const std::string& name : first) {
      for (const char* sub : {"/inputs", "/outputs"}) {
        CHECK(Snapshot(scratch.Sub("a/" + name) + sub) == Snapshot(scratch.Sub("b/" + name) + sub));
      }
    }
    write("c", {"--seed", "7"});
    CHECK(Snapshot(scratch.Sub("a/" + first[0]) + "/inputs") !=
          Snapshot(scratch.Sub("c/" + first[0]) + "/inputs"));
    const CliResult again = RunCli({"golden", "--outputs", scratch.Sub("a")}, scratch);
    CHECK(again.exit_code == 2);
    CHECK(again.err.rfind("dynattn: --outputs", 0) == 0);
  }

  TEST_CASE("--version and --help succeed") {
    TempDir scratch;
    const CliResult version = RunCli({"--version"}, scratch);
    CHECK(version.exit_code == 0);
    CHECK(version.out.find("dynattn") != std::string::npos);
    const CliResult help = RunCli({"run", "--help"}, scratch);
    CHECK(help.exit_code == 0);
    CHECK(help.out.find("--inputs") != std::string::npos);
  }

  TEST_CASE("compare times the build's library against itself; a bad library or row exits 2") {
    TempDir scratch;
    // The build's shared library, where the tool's RUNPATH finds it ($ORIGIN/../src).
    const std::string library =
        (fs::path(RequireCli()).parent_path().parent_path() / "src" / "libdynattn.so.0").string();
    const CliResult result = RunCli(
        {"compare", library, library, "--rows", "decode_8x4096_f16_paged_gqa8", "--rounds", "2"},
        scratch);
    if (result.err.find("built without the benchmark") != std::string::npos) {
      MESSAGE("dynattn compare is not built here (no benchmark): nothing to check");
      return;
    }
    INFO("stderr: ", result.err);
    REQUIRE(result.exit_code == 0);
    CHECK(result.out.find("decode_8x4096_f16_paged_gqa8") != std::string::npos);
    CHECK(result.out.find(" same") != std::string::npos);  // one library: the same bits
    const CliResult missing = RunCli({"compare", scratch.Sub("none.so"), library}, scratch);
    CHECK(missing.exit_code == 2);
    CHECK(missing.err.find("none.so: cannot load") != std::string::npos);
    const CliResult not_ours = RunCli({"compare", library, RequireCli()}, scratch);
    CHECK(not_ours.exit_code == 2);
    const CliResult no_row =
        RunCli({"compare", library, library, "--rows", "no_such_row"}, scratch);
    CHECK(no_row.exit_code == 2);
    CHECK(no_row.err.find("no step-matrix row matches") != std::string::npos);
  }

  TEST_CASE("no command, or an unknown command, exits 2 with one line") {
    TempDir scratch;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{}, std::vector<std::string>{"frobnicate"}}) {
      const CliResult result = RunCli(args, scratch);
      INFO("stderr: ", result.err);
      CHECK(result.exit_code == 2);
      CHECK(result.err.rfind("dynattn: ", 0) == 0);
      CHECK(result.err.find('\n') == result.err.size() - 1);
    }
  }
}

}  // namespace

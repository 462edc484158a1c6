// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The benchmark's pieces are only worth their figures if they compute attention: the composed
// oneDNN and Eigen baselines are checked against the float64 reference on small decode and causal
// prefill batches, and the serving steps of both cache modes through libdynattn likewise; the
// shared-prefix step through UnifiedAttention and as independent decodes, against the reference
// and against each other.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/baselines_eigen.h"
#include "bench/baselines_onednn.h"
#include "bench/fp32_batch.h"
#include "bench/report.h"
#include "bench/serving_step.h"
#include "bench/shared_prefix.h"
#include "bench/step_matrix.h"
#include "reference/reference.h"

namespace {

using dynattn::bench::Fp32Batch;
using dynattn::bench::Fp32Request;
using dynattn_ref::Array;
using dynattn_ref::Dt;

/// Packs per-request [Hkv, rows, d] blocks of `batch` into the reference's (tokens, heads, d),
/// reading the first d of every `stride` floats (stride 0: d).
Array Tokens(const Fp32Batch& batch, const std::vector<std::vector<float>>& blocks, bool queries,
             int64_t d, int64_t stride = 0) {
  const int64_t heads = queries ? batch.num_heads : batch.num_kv_heads;
  if (stride == 0) stride = d;
  int64_t total = 0;
  for (const Fp32Request& r : batch.requests) total += queries ? r.seqlen : r.context;
  Array a = dynattn_ref::MakeArray(Dt::kF32, {total, heads, d});
  float* data = a.data<float>();
  int64_t first = 0;
  for (size_t b = 0; b < batch.requests.size(); ++b) {
    const int64_t n = queries ? batch.requests[b].seqlen : batch.requests[b].context;
    for (int64_t h = 0; h < heads; ++h) {  // query head h = g * R + r sits at block row r * n + t
      for (int64_t t = 0; t < n; ++t) {
        const float* from = blocks[b].data() + (h * n + t) * stride;
        std::copy(from, from + d, data + ((first + t) * heads + h) * d);
      }
    }
    first += n;
  }
  return a;
}

/// The reference's MultiHeadAttention inputs for `batch` (its decodes must come first).
dynattn_ref::Tensors ReferenceInputs(const Fp32Batch& batch) {
  std::vector<int64_t> seqstarts{0}, kvstarts{0};
  int64_t max_seqlen = 0, max_kvlen = 0;
  for (const Fp32Request& r : batch.requests) {
    seqstarts.push_back(seqstarts.back() + r.seqlen);
    kvstarts.push_back(kvstarts.back() + r.context);
    max_seqlen = std::max(max_seqlen, r.seqlen);
    max_kvlen = std::max(max_kvlen, r.context);
  }
  const int64_t count = static_cast<int64_t>(batch.requests.size());
  int64_t decodes = 0;  // the leading single-token requests
  while (decodes < count && batch.requests[decodes].seqlen == 1) ++decodes;
  dynattn_ref::Tensors inputs = {{"query", Tokens(batch, batch.query, true, batch.head_dim)},
                                 {"key", Tokens(batch, batch.key, false, batch.head_dim)},
                                 {"seqstarts", dynattn_ref::MakeI64({count + 1}, seqstarts)},
                                 {"kvstarts", dynattn_ref::MakeI64({count + 1}, kvstarts)},
                                 {"decoding_batches", dynattn_ref::ScalarI64(decodes)},
                                 {"max_seqlen", dynattn_ref::ScalarI64(max_seqlen)},
                                 {"max_kvlen", dynattn_ref::ScalarI64(max_kvlen)}};
  if (!batch.latent) inputs["value"] = Tokens(batch, batch.value, false, batch.value_dim());
  return inputs;
}

dynattn_ref::AttnResult Reference(const Fp32Batch& batch) {
  dynattn_ref::Attrs attrs;
  attrs.num_heads = batch.num_heads;
  attrs.num_kv_heads = batch.num_kv_heads;
  attrs.head_dim = batch.head_dim;
  attrs.head_dim_v = batch.head_dim_v;
  attrs.value_from_key = batch.latent ? 1 : 0;
  attrs.is_causal = 1;
  return dynattn_ref::MultiHeadAttention(attrs, ReferenceInputs(batch));
}

/// Runs `Baseline` on a copy of `batch` and checks it against the fp32 tolerance of the spec.
template <typename Baseline>
void CheckBaseline(const char* name, const Fp32Batch& batch, const dynattn_ref::AttnResult& want,
                   int threads) {
  Fp32Batch run = batch;
  Baseline baseline(&run, threads);
  baseline.Run();
  double worst = 0;
  const std::string error =
      dynattn_ref::CheckAttention(want, Tokens(run, run.out, true, run.value_dim()), &worst);
  CHECK_MESSAGE(error.empty(), error);
  MESSAGE(std::string(name) << " on " << threads << " threads: worst error " << worst
                            << " of the fp32 bound");
}

/// The baselines on `requests` with equal head sizes, with Dk != Dv (96/64), and over a latent
/// head (MLA: 16 query heads, values the first 128 of each 144-element key row).
void CheckBaselines(const std::vector<Fp32Request>& requests) {
  const Fp32Batch batches[] = {
      dynattn::bench::RandomFp32Batch(32, 8, 128, requests, 42),
      dynattn::bench::RandomFp32Batch(8, 2, 96, requests, 43, 64),
      dynattn::bench::RandomFp32Batch(16, 1, 144, requests, 44, 128, true)};
  for (const Fp32Batch& batch : batches) {
    INFO("Dk " << batch.head_dim << ", Dv " << batch.value_dim()
               << (batch.latent ? ", latent" : ""));
    const dynattn_ref::AttnResult want = Reference(batch);
    for (int threads : {1, 2}) {
      CheckBaseline<dynattn::bench::OneDnnAttention>("oneDNN", batch, want, threads);
      CheckBaseline<dynattn::bench::EigenAttention>("Eigen", batch, want, threads);
    }
  }
}

/// The small step the step checks run: two decodes, a prompt and a chunk, pages of 16, 8/2 heads
/// of 64 unless told.
dynattn::bench::StepShape SmallStep(int num_heads = 8, int num_kv_heads = 2, int head_dim = 64) {
  dynattn::bench::StepShape shape;
  shape.num_heads = num_heads;
  shape.num_kv_heads = num_kv_heads;
  shape.head_dim = head_dim;
  shape.page_size = 16;
  shape.requests = {{40, 1}, {130, 1}, {0, 21}, {33, 9}};
  shape.decoding_batches = 2;
  return shape;
}

/// A small serving step through libdynattn, against the reference MultiHeadCacheAttention.
void CheckStep(int quant_bit, int cache_mode) {
  dynattn::bench::StepShape shape = SmallStep();
  shape.quant_bit = quant_bit;
  shape.cache_mode = cache_mode;
  const dynattn::bench::Step original = dynattn::bench::BuildStep(shape, 5);
  dynattn::bench::Step step = original;
  Array out;
  REQUIRE(dynattn::bench::RunStep(&step, &out).ok());
  const dynattn_ref::AttnResult want =
      dynattn_ref::MultiHeadCacheAttention(original.reference_attrs, original.inputs);
  const std::string error = dynattn_ref::CheckAttention(want, out);
  CHECK_MESSAGE(error.empty(), error);
}

Dt ReferenceDt(dynattn::DType dtype) {
  switch (dtype) {
    case dynattn::DType::kBF16:
      return Dt::kBF16;
    case dynattn::DType::kF8E4M3:
      return Dt::kF8E4M3;
    case dynattn::DType::kF8E5M2:
      return Dt::kF8E5M2;
    default:
      return Dt::kF16;
  }
}

/// The equal-size twin of a latent step, for the float64 reference (which has no latent cache):
/// the PMX tensor's value half holds its key half's bytes, current_value is current_key, and the
/// arrays carry the step's dtypes. Since V = K[..., :Dv], the first Dv elements of each of its
/// output rows are the latent step's output.
dynattn_ref::Tensors LatentTwin(const dynattn::bench::Step& step) {
  dynattn_ref::Tensors in = step.inputs;
  Array& cache = in.at("cache");  // [1, 2, Hkv, T, row]: the key half, then the value half
  const size_t half = cache.bytes.size() / 2;
  std::copy(cache.bytes.begin(), cache.bytes.begin() + half, cache.bytes.begin() + half);
  cache.dt = ReferenceDt(step.shape.plain_cache);
  in["current_value"] = in.at("current_key");
  for (const char* name : {"query", "current_key", "current_value"}) {
    in.at(name).dt = ReferenceDt(step.shape.activation);
  }
  return in;
}

/// A small MLA step (16 query heads over one latent head of 144, values its first 128; bf16
/// activations) through libdynattn over a latent cache of `cache`: its output against the float64
/// reference of its equal-size twin, and the latent rows it writes bit for bit.
void CheckLatentStep(dynattn::DType cache) {
  dynattn::bench::StepShape shape = SmallStep(16, 1, 144);
  shape.head_dim_v = 128;
  shape.latent = true;
  shape.quant_bit = 0;
  shape.activation = dynattn::DType::kBF16;
  shape.plain_cache = cache;
  const dynattn::bench::Step original = dynattn::bench::BuildStep(shape, 9);
  dynattn::bench::Step step = original;
  Array out;
  const dynattn::Status status = dynattn::bench::RunStep(&step, &out);
  REQUIRE_MESSAGE(status.ok(), status.message());
  const dynattn_ref::AttnResult twin =
      dynattn_ref::MultiHeadCacheAttention(original.reference_attrs, LatentTwin(original));
  const Array& written = step.inputs.at("cache");
  const size_t half = written.bytes.size() / 2;
  CHECK(std::equal(written.bytes.begin(), written.bytes.begin() + half, twin.cache.bytes.begin()));
  dynattn_ref::AttnResult want = twin;  // keep each output row's first Dv elements
  want.out.clear();
  for (size_t row = 0; row < twin.out.size() / shape.head_dim; ++row) {
    const auto first = twin.out.begin() + static_cast<int64_t>(row) * shape.head_dim;
    want.out.insert(want.out.end(), first, first + shape.head_dim_v);
  }
  out.dt = Dt::kBF16;
  const std::string error = dynattn_ref::CheckAttention(want, out);
  CHECK_MESSAGE(error.empty(), error);
}

/// The small step over a cache whose keys are dimension-major in pages of 16 (vLLM's CPU layout):
/// the float64 reference's output, the bits of the same step token-major, and its new keys
/// written into the dimension-major plane as the token-major step writes them.
void CheckDimMajorStep(dynattn::DType cache) {
  dynattn::bench::StepShape shape = SmallStep();
  shape.quant_bit = 0;
  shape.plain_cache = cache;
  const dynattn::bench::Step token_major_original = dynattn::bench::BuildStep(shape, 11);
  shape.dim_major_keys = true;
  dynattn::bench::Step step = dynattn::bench::BuildStep(shape, 11);
  dynattn::bench::Step token_major = token_major_original;
  Array out, token_major_out;
  const dynattn::Status status = dynattn::bench::RunStep(&step, &out);
  REQUIRE_MESSAGE(status.ok(), status.message());
  REQUIRE(dynattn::bench::RunStep(&token_major, &token_major_out).ok());
  CHECK(out.bytes == token_major_out.bytes);
  dynattn_ref::Tensors inputs = token_major_original.inputs;
  inputs.at("cache").dt = ReferenceDt(cache);  // the array holds the raw bytes
  const dynattn_ref::AttnResult want =
      dynattn_ref::MultiHeadCacheAttention(token_major_original.reference_attrs, inputs);
  const std::string error = dynattn_ref::CheckAttention(want, out);
  CHECK_MESSAGE(error.empty(), error);
  // Key element d of (slot, head) sits at d * 16 + slot % 16 of its page's [D, 16] block.
  const Array& written = token_major.inputs.at("cache");  // [1, 2, Hkv, T, D], keys first
  const int64_t slots = written.shape[3];
  const int64_t bytes = static_cast<int64_t>(dynattn::DTypeSize(cache));
  int64_t mismatches = 0;
  for (int h = 0; h < shape.num_kv_heads; ++h) {
    for (int64_t slot = 0; slot < slots; ++slot) {
      for (int d = 0; d < shape.head_dim; ++d) {
        const int64_t page = slot / 16, block = (page * shape.num_kv_heads + h) * shape.head_dim;
        const int64_t at = ((block + d) * 16 + slot % 16) * bytes;
        const int64_t from = ((h * slots + slot) * shape.head_dim + d) * bytes;
        mismatches += std::memcmp(&step.dim_major_keys[at], &written.bytes[from], bytes) != 0;
      }
    }
  }
  CHECK(mismatches == 0);
}

/// The benchmark's shared-prefix step, reduced (6 requests, prefix 64, 32 own tokens, 8/2 heads,
/// D = 64): UnifiedAttention and the independent decodes must both be correct attention for the
/// step, so each matches the reference and the two match each other within the fp16 tolerance;
/// both leave the cache the reference leaves; and the unified plan reads the prefix once.
void CheckSharedPrefix(int quant_bit) {
  dynattn::bench::SharedPrefixShape shape;
  shape.requests = 6;
  shape.prefix = 64;
  shape.own = 32;
  shape.num_heads = 8;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  shape.quant_bit = quant_bit;
  const dynattn::bench::SharedPrefixStep original = dynattn::bench::BuildSharedPrefixStep(shape, 7);
  const dynattn_ref::AttnResult want = dynattn_ref::UnifiedAttention(
      dynattn::bench::SharedPrefixReferenceAttrs(shape), original.inputs);
  dynattn::bench::SharedPrefixStep step = original;
  dynattn::UnifiedStepSummary summary;
  REQUIRE(dynattn::bench::DescribeUnified(&step, &summary).ok());
  Array unified, decodes;
  const dynattn::Status unified_status = dynattn::bench::RunUnified(&step, &unified);
  REQUIRE_MESSAGE(unified_status.ok(), unified_status.message());
  CHECK(step.inputs.at("cache").bytes == want.cache.bytes);
  CHECK(step.inputs.count("scale") == (quant_bit != 0 ? 1 : 0));
  if (quant_bit != 0) CHECK(step.inputs.at("scale").bytes == want.scale.bytes);
  REQUIRE(dynattn::bench::RunDecodes(&step, &decodes).ok());
  CHECK(step.inputs.at("cache").bytes == want.cache.bytes);
  for (const Array* out : {&unified, &decodes}) {
    const std::string error = dynattn_ref::CheckAttention(want, *out);
    CHECK_MESSAGE(error.empty(), error);
  }
  dynattn_ref::AttnResult twin = want;  // the decodes' output as the expected values
  for (size_t i = 0; i < twin.out.size(); ++i) {
    twin.out[i] = dynattn_ref::LoadAsDouble(decodes, static_cast<int64_t>(i));
  }
  double worst = 0;
  const std::string error = dynattn_ref::CheckAttention(twin, unified, &worst);
  CHECK_MESSAGE(error.empty(), error);
  MESSAGE("unified vs decodes (" << std::string(quant_bit == 0 ? "f16" : "int8") << "): worst "
                                 << worst << " of the fp16 bound; plan " << summary.phase << ", "
                                 << summary.num_shared_blocks << " shared and "
                                 << summary.num_unique_blocks << " unique blocks");
  CHECK(summary.num_shared_blocks == shape.prefix / shape.block_size);
  CHECK(summary.cache_bytes_read > 0);
  CHECK(static_cast<double>(summary.cache_bytes_read) < dynattn::bench::DecodesCacheBytes(shape));
}

TEST_SUITE("bench") {
  TEST_CASE("composed baselines match the float64 reference on decodes") {
    CheckBaselines({{1, 1}, {1, 37}, {1, 200}, {1, 129}});
  }

  TEST_CASE("composed baselines match the float64 reference on causal prefills") {
    CheckBaselines({{17, 17}, {64, 64}, {9, 40}});
  }

  TEST_CASE("composed baselines match the float64 reference on a mixed batch") {
    CheckBaselines({{1, 300}, {1, 5}, {33, 33}, {12, 100}});
  }

  TEST_CASE("the step matrix has every planned row, each named once") {
    const std::vector<dynattn::bench::BenchRow> full = dynattn::bench::StepMatrix(false);
    const std::vector<dynattn::bench::BenchRow> quick = dynattn::bench::StepMatrix(true);
    // 3 decode 8x4096, 18 decode 8x{512,2048,16384}, 3 prefill, mixed; bf16 decode, fp8 decode,
    // a 4096 window over 32768.
    // GQA 1 and 8, dimension-major keys, D 64 and 256, pages of 16, 1 decode at 16 and at
    // 131072 tokens.
    // MLA decode 8x4096 and 1x32768 over bf16 and fp8 latent caches, MLA prefill 512 over 4096.
    // Decode 8x4096 over int8 and int4 in groups of 128 and int8 in groups of 32, over fp16 and
    // bf16, and prefill 512 over fp16 and bf16, in both tiers.
    CHECK(full.size() == 55);
    CHECK(quick.size() == 6);
    std::set<std::string> names, shapes;
    for (const dynattn::bench::BenchRow& row : full) {
      names.insert(row.step);
      shapes.insert(row.baseline);
    }
    CHECK(names.size() == full.size());
    CHECK(shapes.size() == 17);  // the baselines run once per shape
    CHECK(names.count("decode_8x16384_int4_offset") == 1);
    CHECK(names.count("prefill_2048_causal_int8") == 1);
    CHECK(names.count("mixed_24dec_2x512_int8") == 1);
    CHECK(names.count("decode_1x32768_window4096_f16_paged") == 1);
    CHECK(names.count("decode_8x4096_fp8e4m3_paged") == 1);
    CHECK(names.count("decode_1x131072_f16_paged") == 1);
    CHECK(names.count("decode_8x4096_int8_paged_page16") == 1);
    CHECK(names.count("decode_8x4096_f16_paged_dmajor") == 1);
    CHECK(names.count("decode_8x4096_bf16_paged_fast") == 1);
    CHECK(names.count("prefill_512_causal_bf16_fast") == 1);
    CHECK(names.count("mla_decode_1x32768_fp8e4m3") == 1);
    CHECK(names.count("mla_prefill_512_over_4096_16h_bf16") == 1);
  }

  TEST_CASE("a row's hot step: its first request, one KV head, its K/V small enough to stay hot") {
    for (const dynattn::bench::BenchRow& row : dynattn::bench::StepMatrix(false)) {
      INFO(row.step);
      const dynattn::bench::StepShape hot = dynattn::bench::HotShape(row.shape);
      REQUIRE(hot.requests.size() == 1);
      const dynattn::bench::StepRequest& r = hot.requests[0];
      CHECK(r.start_pos + r.seqlen <= dynattn::bench::kHotKeys);
      CHECK(r.seqlen == std::min(row.shape.requests[0].seqlen, dynattn::bench::kHotKeys));
      CHECK(hot.num_kv_heads == 1);
      CHECK(hot.num_heads == row.shape.num_heads / row.shape.num_kv_heads);
      CHECK(hot.decoding_batches == (r.seqlen == 1 && row.shape.decoding_batches > 0 ? 1 : 0));
      CHECK(hot.quant_bit == row.shape.quant_bit);
      CHECK(hot.plain_cache == row.shape.plain_cache);
      CHECK(hot.head_dim == row.shape.head_dim);
    }
  }

  TEST_CASE("--markdown writes the machine line and one table row per result") {
    dynattn::bench::MachineLimits machine;
    machine.target = "AVX2";
    machine.threads = 2;
    machine.bandwidth_gbps = 40;
    machine.dim_major_read_gbps = 25.5;
    machine.fma_gflops = 200;
    machine.bf16_dot_gflops = 400;
    machine.bf16_dot_isa = "AVX512_BF16";  // and no int8 dot-product instructions
    dynattn::bench::RowResult row;
    row.step = "decode_8x4096_int8_paged";
    row.median_ms = 2.5;
    row.gbps = 30.25;
    row.roofline_ms = 2.0;
    row.fma_peak_pct = 12.5;
    row.onednn_ms = 5.0;
    row.eigen_ms = 10.0;
    row.hot_gbps_per_core = 12.5;
    row.hot_gelems_per_core = 6.25;
    dynattn::bench::SharedPrefixResult shared;
    shared.step = "shared_prefix_64x2048+256_f16";
    shared.phase = "-su";
    shared.unified_ms = 1;
    shared.unified_bytes = 40e6;
    shared.decodes_ms = 4;
    shared.decodes_bytes = 160e6;
    shared.flops = 1e9;
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("dynattn_bench_" + std::to_string(std::random_device{}()) + ".md"))
                                 .string();
    dynattn::bench::RowResult fast = row;  // a fast row on bf16 dot products: their share too
    fast.step = "prefill_512_causal_bf16_fast";
    fast.dot_peak_pct = 37.5;
    REQUIRE(dynattn::bench::WriteMarkdown(path, machine, 7, {row, fast}, {}, {shared}));
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    std::remove(path.c_str());
    const std::string md = text.str();
    CHECK(md.find("Machine: AVX2, 2 threads: read 40.0 GB/s (25.5 in the dimension-major keys' "
                  "order), fp32 FMA 200 GFLOP/s, bf16 dot 400 GFLOP/s (AVX512_BF16), int8 dot "
                  "none (no AVX512_VNNI or AVX_VNNI); medians of 7") != std::string::npos);
    CHECK(md.find("| decode_8x4096_int8_paged | 2.500 | 30.25 | 0.0 | 12.5% | - | 2.00 | 80.0% | "
                  "2.00x | 4.00x | 12.50 | 6.25 | - |") != std::string::npos);
    CHECK(
        md.find("| prefill_512_causal_bf16_fast | 2.500 | 30.25 | 0.0 | 12.5% | 37.5% | 2.00 |") !=
        std::string::npos);
    CHECK(md.find("| shared_prefix_64x2048+256_f16 | unified (-su) | 1.00 | 40.0 | 40.00 | 100% | "
                  "1000.0 | 4.00x |") != std::string::npos);
    CHECK(md.find("Composed fp32 baselines") == std::string::npos);  // none given: no table
  }

  TEST_CASE("--rows keeps the rows that contain one of its names, in matrix order") {
    using dynattn::bench::SelectRows;
    const std::vector<dynattn::bench::BenchRow> full = dynattn::bench::StepMatrix(false);
    CHECK(SelectRows(full, "").size() == full.size());
    CHECK(SelectRows(full, "no_such_row").empty());
    const auto picked = SelectRows(full, "prefill_2048,decode_8x4096_int8_paged_d");
    REQUIRE(picked.size() == 3);
    CHECK(picked[0].step == "prefill_2048_causal_int8");
    CHECK(picked[1].step == "decode_8x4096_int8_paged_d64");
    CHECK(picked[2].step == "decode_8x4096_int8_paged_d256");
    CHECK(SelectRows(full, ",prefill_2048_causal,").size() == 1);  // empty names match nothing
  }

  TEST_CASE("the shared-prefix step: unified and independent decodes agree, fp16 cache") {
    CheckSharedPrefix(0);
  }

  TEST_CASE("the shared-prefix step: unified and independent decodes agree, int8 cache") {
    CheckSharedPrefix(8);
  }

  TEST_CASE("MLA steps over bf16 and fp8 latent caches run correctly") {
    for (const dynattn::DType cache : {dynattn::DType::kBF16, dynattn::DType::kF8E4M3}) {
      CAPTURE(static_cast<int>(cache));
      CheckLatentStep(cache);
    }
  }

  TEST_CASE("a step with dimension-major keys gives the token-major bits and writes in place") {
    for (const dynattn::DType cache : {dynattn::DType::kF16, dynattn::DType::kF8E4M3}) {
      CAPTURE(static_cast<int>(cache));
      CheckDimMajorStep(cache);
    }
  }

  TEST_CASE("serving steps run correctly in both cache modes") {
    for (int quant_bit : {0, 8, 4}) {
      for (int cache_mode : {1, 0}) {
        CAPTURE(quant_bit);
        CAPTURE(cache_mode);
        CheckStep(quant_bit, cache_mode);
      }
    }
  }
}

}  // namespace

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The step matrix: decodes at several contexts for every cache type and both cache modes (the
// memory-bound side), causal prefills (the compute-bound side), the demo's mixed step, and MLA's
// latent decode and prefill (compute-bound at any context).

#include "bench/step_matrix.h"

#include <algorithm>
#include <utility>

namespace dynattn::bench {
namespace {

StepShape Decodes(int requests, int64_t context, int quant_bit, int cache_mode) {
  StepShape s;
  s.quant_bit = quant_bit;
  s.cache_mode = cache_mode;
  for (int i = 0; i < requests; ++i) s.requests.push_back({context - 1, 1});
  s.decoding_batches = requests;
  return s;
}

StepShape Prefill(int64_t tokens, int quant_bit) {
  StepShape s;
  s.quant_bit = quant_bit;
  s.requests.push_back({0, tokens});
  return s;
}

/// 24 decodes at contexts 513..7873 and two 512-token prefill chunks (fresh, and after 1024).
StepShape Mixed() {
  StepShape s;
  for (int i = 0; i < 24; ++i) s.requests.push_back({512 + i * 320, 1});
  s.requests.push_back({0, 512});
  s.requests.push_back({1024, 512});
  s.decoding_batches = 24;
  return s;
}

int64_t LargestContext(const StepShape& s) {
  int64_t largest = 0;
  for (const StepRequest& r : s.requests) largest = std::max(largest, r.start_pos + r.seqlen);
  return largest;
}

BenchRow DecodeRow(int64_t context, int quant_bit, int cache_mode) {
  const std::string shape = "decode_8x" + std::to_string(context);
  return {shape + "_" + CacheName(quant_bit) + "_" + CacheModeName(cache_mode), "decode", shape,
          context, Decodes(8, context, quant_bit, cache_mode)};
}

BenchRow PrefillRow(int64_t tokens, int quant_bit) {
  const std::string shape = "prefill_" + std::to_string(tokens) + "_causal";
  return {shape + "_" + CacheName(quant_bit), "prefill", shape, tokens, Prefill(tokens, quant_bit)};
}

/// Rows of the serving formats and windows: bf16 activations over a bf16 cache, an fp8 cache,
/// and a sliding window that must cost a window's bytes, not the context's.
void AddModernRows(std::vector<BenchRow>* rows) {
  BenchRow bf16 = DecodeRow(4096, 0, 1);
  bf16.step = "decode_8x4096_bf16_paged";
  bf16.shape.activation = DType::kBF16;
  bf16.shape.plain_cache = DType::kBF16;
  rows->push_back(bf16);
  BenchRow fp8 = DecodeRow(4096, 0, 1);
  fp8.step = "decode_8x4096_fp8e4m3_paged";
  fp8.shape.plain_cache = DType::kF8E4M3;
  rows->push_back(fp8);
  BenchRow window = {"decode_1x32768_window4096_f16_paged", "decode", "decode_1x4097", 4097,
                     Decodes(1, 32768, 0, 1)};
  window.shape.window_left = 4096;
  rows->push_back(window);
}

/// A decode row of another geometry: its own baseline shape, since the heads or the head size
/// differ from the Llama-3-8B-like default.
BenchRow VariantRow(const std::string& suffix, int requests, int64_t context, int quant_bit,
                    int num_heads, int num_kv_heads, int head_dim, int page_size) {
  StepShape shape = Decodes(requests, context, quant_bit, 1);
  shape.num_heads = num_heads;
  shape.num_kv_heads = num_kv_heads;
  shape.head_dim = head_dim;
  shape.page_size = page_size;
  const std::string base = "decode_" + std::to_string(requests) + "x" + std::to_string(context);
  const std::string geometry = num_heads == 32 && num_kv_heads == 8 && head_dim == 128
                                   ? ""
                                   : "_" + std::to_string(num_heads) + "/" +
                                         std::to_string(num_kv_heads) + "xD" +
                                         std::to_string(head_dim);
  return {base + "_" + CacheName(quant_bit) + "_paged" + suffix, "decode", base + geometry, context,
          shape};
}

/// Rows that keep every combination in sight: GQA 1 and 8, head dims 64 and 256, pages of 16
/// tokens, keys dimension-major in their pages (vLLM's CPU layout); a tiny step (its latency is
/// the per-call overhead) and one long request (split-KV must put both cores on a single decode).
void AddCoverageRows(std::vector<BenchRow>* rows) {
  rows->push_back(VariantRow("_gqa1", 8, 4096, 0, 32, 32, 128, 128));
  rows->push_back(VariantRow("_gqa8", 8, 4096, 0, 32, 4, 128, 128));
  rows->push_back(VariantRow("_dmajor", 8, 4096, 0, 32, 8, 128, 128));
  rows->back().shape.dim_major_keys = true;
  rows->push_back(VariantRow("_d64", 8, 4096, 8, 32, 8, 64, 128));
  rows->push_back(VariantRow("_d256", 8, 4096, 8, 16, 4, 256, 128));
  rows->push_back(VariantRow("_page16", 8, 4096, 8, 32, 8, 128, 16));
  rows->push_back(VariantRow("", 1, 16, 0, 32, 8, 128, 16));
  rows->push_back(VariantRow("", 1, 131072, 0, 32, 8, 128, 128));
}

/// The fast tier beside the exact one: decode 8 x 4096 over int8 and int4 caches with one scale
/// per (token, head) (groups of 128, the fast kernel's case) and int8 in groups of 32, each in
/// both tiers, and the exact f16 row it should beat; then fp16 and bf16 caches (bf16 with bf16
/// activations) in both tiers, whose fast rows take bf16 dot products where the CPU has them, in
/// decode and in a causal prefill of 512 tokens (fp16 rows with fp16 activations).
void AddTierRows(std::vector<BenchRow>* rows) {
  for (const auto& [bits, group] : {std::pair{8, 128}, std::pair{4, 128}, std::pair{8, 32}}) {
    for (const Precision precision : {Precision::kExact, Precision::kFast}) {
      BenchRow row = DecodeRow(4096, bits, 1);
      row.step = std::string("decode_8x4096_") + CacheName(bits) + "_g" + std::to_string(group) +
                 "_paged_" + PrecisionName(precision);
      row.shape.quant_group = group;
      row.shape.precision = precision;
      rows->push_back(row);
    }
  }
  for (const DType half : {DType::kF16, DType::kBF16}) {
    for (const Precision precision : {Precision::kExact, Precision::kFast}) {
      BenchRow row = DecodeRow(4096, 0, 1);
      row.step = std::string("decode_8x4096_") + (half == DType::kF16 ? "f16" : "bf16") +
                 "_paged_" + PrecisionName(precision);
      if (half == DType::kBF16) {
        row.shape.activation = DType::kBF16;
        row.shape.plain_cache = DType::kBF16;
      }
      row.shape.precision = precision;
      rows->push_back(row);
    }
  }
  for (const DType half : {DType::kF16, DType::kBF16}) {
    for (const Precision precision : {Precision::kExact, Precision::kFast}) {
      BenchRow row = PrefillRow(512, 0);
      row.step = std::string("prefill_512_causal_") + (half == DType::kF16 ? "f16" : "bf16") + "_" +
                 PrecisionName(precision);
      row.shape.activation = half;
      row.shape.plain_cache = half;
      row.shape.precision = precision;
      rows->push_back(row);
    }
  }
}

/// MLA's absorbed form as DeepSeek V3 serves it: one latent KV head of 576 (kv_lora_rank 512 +
/// rope 64) whose first 512 elements are the values, pages of 64, bf16 activations over a bf16 or
/// fp8 e4m3 latent cache. Decode has all 128 query heads on the latent head: a (128 x 576) by
/// (576 x context) product per request, bound by the FMA units, not by bandwidth.
StepShape Latent(StepShape s, int num_heads, DType cache) {
  s.num_heads = num_heads;
  s.num_kv_heads = 1;
  s.head_dim = 576;
  s.head_dim_v = 512;
  s.latent = true;
  s.quant_bit = 0;
  s.activation = DType::kBF16;
  s.plain_cache = cache;
  s.page_size = 64;
  return s;
}

/// MLA decode (8 x 4096 and 1 x 32768, 128 heads) over bf16 and fp8 latent caches, and a chunked
/// prefill (512 new tokens over 4096 cached) with a tensor-parallel rank's 16 heads (DeepSeek V3
/// on 8 ranks), which keeps the row's calls near half a second on 2 cores.
void AddMlaRows(std::vector<BenchRow>* rows) {
  for (const DType cache : {DType::kBF16, DType::kF8E4M3}) {
    const std::string label = cache == DType::kBF16 ? "_bf16" : "_fp8e4m3";
    for (const auto& [requests, context] : {std::pair{8, 4096}, std::pair{1, 32768}}) {
      const std::string shape =
          "mla_decode_" + std::to_string(requests) + "x" + std::to_string(context);
      rows->push_back({shape + label, "decode", shape, context,
                       Latent(Decodes(requests, context, 0, 1), 128, cache)});
    }
  }
  StepShape chunk;
  chunk.requests = {{4096, 512}};
  rows->push_back({"mla_prefill_512_over_4096_16h_bf16", "prefill", "mla_prefill_512_over_4096_16h",
                   4608, Latent(chunk, 16, DType::kBF16)});
}

BenchRow MixedRow() {
  const StepShape s = Mixed();
  return {"mixed_24dec_2x512_int8", "mixed", "mixed_24dec_2x512", LargestContext(s), s};
}

}  // namespace

const char* CacheName(int quant_bit) {
  return quant_bit == 0 ? "f16" : quant_bit == 8 ? "int8" : "int4";
}

const char* CacheLabel(const StepShape& shape) {
  if (shape.quant_bit != 0) return CacheName(shape.quant_bit);
  switch (shape.plain_cache) {
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "fp8e4m3";
    case DType::kF8E5M2:
      return "fp8e5m2";
    default:
      return "f16";
  }
}

const char* CacheModeName(int cache_mode) { return cache_mode == 0 ? "offset" : "paged"; }

std::vector<BenchRow> StepMatrix(bool quick) {
  std::vector<BenchRow> rows;
  for (int bits : {0, 8, 4}) rows.push_back(DecodeRow(4096, bits, 1));
  if (!quick) {
    for (int64_t context : {512, 2048, 16384}) {
      for (int bits : {0, 8, 4}) {
        for (int mode : {1, 0}) rows.push_back(DecodeRow(context, bits, mode));
      }
    }
  }
  for (int bits : {0, 8}) rows.push_back(PrefillRow(512, bits));
  if (!quick) rows.push_back(PrefillRow(2048, 8));
  rows.push_back(MixedRow());
  if (!quick) AddModernRows(&rows);
  if (!quick) AddCoverageRows(&rows);
  if (!quick) AddTierRows(&rows);
  if (!quick) AddMlaRows(&rows);
  return rows;
}

std::vector<BenchRow> SelectRows(std::vector<BenchRow> rows, const std::string& filter) {
  if (filter.empty()) return rows;
  std::vector<std::string> wanted;
  for (size_t start = 0; start <= filter.size();) {
    const size_t comma = std::min(filter.find(',', start), filter.size());
    if (comma > start) wanted.push_back(filter.substr(start, comma - start));
    start = comma + 1;
  }
  std::vector<BenchRow> kept;
  for (BenchRow& row : rows) {
    for (const std::string& w : wanted) {
      if (row.step.find(w) == std::string::npos) continue;
      kept.push_back(std::move(row));
      break;
    }
  }
  return kept;
}

std::vector<Fp32Request> BaselineRequests(const StepShape& shape) {
  std::vector<Fp32Request> requests;
  for (const StepRequest& r : shape.requests) {
    requests.push_back({r.seqlen, KeysRead(shape, r)});  // a windowed peer reads the window
  }
  return requests;
}

}  // namespace dynattn::bench

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Synthetic serving steps for the demo and the benchmarks: a batch of decodes and prefill chunks
// over a paged cache already holding quantized history, as MultiHeadCacheAttention inputs.

#ifndef DYNATTN_BENCH_SERVING_STEP_H_
#define DYNATTN_BENCH_SERVING_STEP_H_

#include <cstdint>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/reference.h"

namespace dynattn::bench {

/// One request of a step: `seqlen` new tokens after `start_pos` cached ones.
struct StepRequest {
  int64_t start_pos = 0;
  int64_t seqlen = 1;
};

/// The shape of a step. Decoding requests (seqlen 1) come first, as the PMX convention wants.
struct StepShape {
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;
  /// Elements per value and output row; 0: head_dim. With `latent`, the values are the first
  /// head_dim_v elements of each key row (MLA's absorbed form, one latent KV head).
  int head_dim_v = 0;
  bool latent = false;
  /// Keys stored dimension-major inside each page ([D, page_size] per page and head, vLLM's CPU
  /// layout); values stay token-major. Paged, unquantized caches only.
  bool dim_major_keys = false;
  int quant_bit = 8;                ///< 0 (a plain cache of `plain_cache`), 8 or 4.
  DType activation = DType::kF16;   ///< Query, fresh K/V and output: fp16 or bf16.
  DType plain_cache = DType::kF16;  ///< quant_bit 0: fp16, bf16, or fp8 (e4m3 / e5m2) bytes.
  int window_left = -1;             ///< Sliding window (-1 = off).
  int quant_group = 8;
  Precision precision = Precision::kExact;  ///< The numerics tier the step's calls ask for.
  int cache_mode = 1;  ///< 1: paged (pages of `page_size`), 0: one contiguous region per request.
  int page_size = 128;
  int cache_layout = 3;
  std::vector<StepRequest> requests;
  int64_t decoding_batches = 0;  ///< Leading requests that are decodes.

  int value_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
};

/// A step's inputs (named as the spec's) and attributes.
struct Step {
  StepShape shape;
  dynattn_ref::Tensors inputs;
  MultiHeadCacheAttentionAttrs attrs;
  dynattn_ref::Attrs reference_attrs;
  /// The step's cache when it is not the PMX tensor as such, set by StepArgs: a latent step's (the
  /// key half read as a latent cache, its value half unused) or one with dimension-major keys.
  CacheDesc cache_desc;
  /// dim_major_keys: the key plane, the PMX tensor's key half transposed page by page (the PMX
  /// key half is then unused).
  std::vector<uint8_t> dim_major_keys;
};

/// Builds a step with fp16 (or bf16) activations and a cache whose every slot holds valid random
/// history (fp16/bf16 values, fp8 bytes of normal values, or int8/int4 codes with positive
/// scales). Arrays hold the raw bits; RunStep gives the views the shape's dtypes. Paged steps get
/// their pages in shuffled order; offset steps (cache_mode 0) get one contiguous region per
/// request, in request order.
Step BuildStep(const StepShape& shape, uint64_t seed);

/// Runs MultiHeadCacheAttention on `step` (its cache and scale are updated) into `out`, which is
/// allocated on first use.
Status RunStep(Step* step, dynattn_ref::Array* out, const RunOptions& options = {});

/// The MultiHeadCacheAttention arguments of `step` (views over its arrays, with the shape's
/// dtypes) writing into `out`, which is allocated on first use.
MultiHeadCacheAttentionArgs StepArgs(Step* step, dynattn_ref::Array* out);

/// The step made of requests `picked` (in that order, decodes first) over the same cache, and
/// the rows of `out` that belong to them. Requests are independent, so the sub-step's result
/// equals those rows.
Step SubStep(const Step& step, const std::vector<int64_t>& picked, const dynattn_ref::Array& out,
             dynattn_ref::Array* rows);

/// Keys a request reads: its context, or only the keys some row's sliding window covers.
int64_t KeysRead(const StepShape& shape, const StepRequest& r);
/// Bytes of K, V and scales the step reads (every key a row sees, every KV head, once; a latent
/// step's values are its keys' bytes).
double KvBytesRead(const Step& step);
/// K and V elements the step's attention reads (every KV head, every key it sees).
double KvElementsRead(const Step& step);
/// Keys of the hot step of a row (HotShape): few enough that its K/V stays in the caches.
inline constexpr int64_t kHotKeys = 2048;
/// The hot step of `s`: its first request (context cut to kHotKeys keys) over one KV head with
/// its query heads. Timed on one thread, repeated without a cache flush, it gives the kernel's
/// per-core rate with its K/V in the caches (at D = 128, f16: 1 MiB).
StepShape HotShape(const StepShape& s);
/// Floating-point operations of the step's attention (QK^T over head_dim and PV over head_dim_v,
/// causal and windowed keys only).
double AttentionFlops(const Step& step);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_SERVING_STEP_H_

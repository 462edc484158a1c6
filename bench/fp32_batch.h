// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The input layout of the composed fp32 baselines (oneDNN, Eigen): the friendliest one for a
// general matmul library, so that the comparison is against their best case. K and V are fp32,
// head-major and contiguous per request; the R = Hq / Hkv query heads that share a KV head are
// stacked as the rows of one matrix, so GQA costs no K/V copy.

#ifndef DYNATTN_BENCH_FP32_BATCH_H_
#define DYNATTN_BENCH_FP32_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dynattn::bench {

/// One request: `seqlen` new queries over `context` keys, the last `seqlen` of which are the
/// queries' own positions (query i sees keys j <= context - seqlen + i when seqlen > 1).
struct Fp32Request {
  int64_t seqlen = 1;
  int64_t context = 1;
};

/// A batch of attention problems for the composed baselines, with their outputs.
struct Fp32Batch {
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_dim = 128;
  int head_dim_v = 0;   ///< Elements per value and output row (Dv); 0: head_dim.
  bool latent = false;  ///< MLA: the values are the first Dv elements of each key row.
  std::vector<Fp32Request> requests;
  /// Per request, [Hkv, R * seqlen, D]: row r * seqlen + i of KV head g is query head g * R + r
  /// at token i (R = num_heads / num_kv_heads).
  std::vector<std::vector<float>> query;
  std::vector<std::vector<float>> key;    ///< Per request, [Hkv, context, D].
  std::vector<std::vector<float>> value;  ///< Per request, [Hkv, context, Dv]; empty when latent.
  std::vector<std::vector<float>> out;    ///< Per request, [Hkv, R * seqlen, Dv], rows as `query`.

  /// Query heads per KV head (R).
  int group() const { return num_heads / num_kv_heads; }
  /// Dv.
  int value_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  /// Floats from one value row to the next: Dv, or D when the values are read from the keys.
  int value_stride() const { return latent ? head_dim : value_dim(); }
  /// Request b's values ([Hkv, context] rows of value_stride() floats, the first Dv used).
  const float* values(size_t b) const { return latent ? key[b].data() : value[b].data(); }
  /// 1 / sqrt(D).
  float scale() const;
};

/// A batch of `requests` with values uniform in [-1, 1) from `seed` and zeroed outputs; value
/// rows of `head_dim_v` elements (0: head_dim), read from the keys when `latent`.
Fp32Batch RandomFp32Batch(int num_heads, int num_kv_heads, int head_dim,
                          const std::vector<Fp32Request>& requests, uint64_t seed,
                          int head_dim_v = 0, bool latent = false);

/// Bytes of fp32 K and V the batch reads (every context token, every KV head, once; a latent
/// batch's values are its keys).
double Fp32KvBytes(const Fp32Batch& batch);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_FP32_BATCH_H_

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The README's API example, compiled and run by the test suite so that it stays true.

#include <cstdio>
#include <random>
#include <vector>

#include "dynattn/dynattn.h"

using namespace dynattn;

int main() {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  auto halves = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (uint16_t& h : v) h = FloatToHalf(normal(rng));
    return v;
  };
  std::vector<uint16_t> q = halves(4 * 32 * 128), k = halves(4 * 8 * 128), v = halves(4 * 8 * 128);
  std::vector<int8_t> cache(128 * 2 * 8 * 128, 0);
  std::vector<uint16_t> scale(128 * 2 * 8 * 16, FloatToHalf(0.01f));
  std::vector<uint16_t> out(4 * 32 * 128);

  // --- README example begins ---
  // One step: request 0 decodes (4 cached tokens + 1 new), request 1 is a 3-token prompt.
  int64_t seqstarts[] = {0, 1, 4}, kvstarts[] = {0, 5, 8}, start_pos[] = {4, 0};
  int64_t cachestarts[] = {0, 64}, decoding = 1, max_seqlen = 3, max_kvlen = 5;
  MultiHeadCacheAttentionArgs a;
  a.query = TensorView::Dense(q.data(), DType::kF16, {4, 32, 128});       // (Tq, Hq, D)
  a.current_key = TensorView::Dense(k.data(), DType::kF16, {4, 8, 128});  // (Tq, Hkv, D)
  a.current_value = TensorView::Dense(v.data(), DType::kF16, {4, 8, 128});
  a.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {3});
  a.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {3});
  a.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {2});
  a.start_pos = TensorView::Dense(start_pos, DType::kI64, {2});
  a.decoding_batches = TensorView::Dense(&decoding, DType::kI64, {});
  a.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
  a.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
  a.cache = TensorView::Dense(cache.data(), DType::kI8, {128, 1, 2, 8, 128});  // layout 0
  a.scale = TensorView::Dense(scale.data(), DType::kF16, {128, 1, 2, 8, 16});  // groups of 8
  a.attn_output = TensorView::Dense(out.data(), DType::kF16, {4, 32, 128});
  MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = {.num_heads = 32, .num_kv_heads = 8, .head_dim = 128, .is_causal = true};
  attrs.cache.quant_bit = 8;  // quant_group 8, cache_mode 0, cache_layout 0 by default
  Status s = MultiHeadCacheAttention(attrs, a, RunOptions{.num_threads = 0});
  if (!s.ok()) fprintf(stderr, "%s\n", s.message().c_str());
  // --- README example ends ---

  if (!s.ok()) return 1;
  std::printf("quickstart: ok on %s, out[0] = %g\n", CpuTargetName(), HalfToFloat(out[0]));
  // A broken input names itself and the rule.
  cachestarts[1] = 126;
  s = MultiHeadCacheAttention(attrs, a);
  std::printf("quickstart: with cachestarts[1] = 126: %s\n", s.message().c_str());
  return s.ok() ? 1 : 0;
}

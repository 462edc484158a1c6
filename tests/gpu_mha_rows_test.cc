// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's score features on the CUDA attention rows that MultiHeadAttention and
// MultiHeadCacheAttention run, driven directly (a problem and its plan, as src/ builds them):
// decodes, prefills and long decodes (split-KV merges) over bf16, fp8 and the other caches, with
// sliding windows, logit soft-capping, a settable softmax scale, ALiBi, attention sinks and
// additive masks. Outputs and log-sum-exps must be within tolerance of a float64 evaluation over
// the very keys and values the cache decodes to.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/alibi.h"
#include "core/plan.h"
#include "src/context.h"
#include "tests/support/gpu_features.h"

namespace dynattn_test {
namespace feature {
namespace {

/// MHA / MHCA on a CUDA row: decodes, prefills (tiles of 32 rows) and long decodes (split-KV
/// merges), causal or not, with an optional additive mask, against the float64 attention.
void CheckAttention(std::mt19937_64& rng) {
  // Requests: decodes first (decoding_batches), then prefills.
  const int64_t batch = Uniform(rng, 1, 4);
  const int64_t decodes = Uniform(rng, 0, static_cast<int>(batch));
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, cachestarts;
  int64_t slots = 0, longest = 1;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t seqlen = 1, kvlen = 0;
    if (b < decodes) {
      kvlen = rng() % 3 == 0 ? Uniform(rng, 1025, 2600) : Uniform(rng, 1, 200);
    } else {
      seqlen = Uniform(rng, 1, 45);
      kvlen = seqlen + (rng() % 3 == 0 ? Uniform(rng, 1025, 1500) : Uniform(rng, 0, 60));
    }
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + kvlen);
    cachestarts.push_back(slots + Uniform(rng, 0, 3));
    slots = cachestarts.back() + kvlen;
    longest = std::max(longest, kvlen);
  }
  const Features f = RandomFeatures(rng, longest);
  const bool causal = rng() % 4 != 0;
  const int mask_kind = rng() % 3;  // 0 none, 1 (Tq, kv), 2 (Hq, Tq, kv)
  const int64_t tokens = seqstarts.back();
  const int64_t mask_row = kvstarts.back() + Uniform(rng, 0, 5);
  const std::string where_case = Describe(f) + " causal " + std::to_string(causal) + " mask " +
                                 std::to_string(mask_kind) + " decodes " + std::to_string(decodes) +
                                 " batch " + std::to_string(batch);
  INFO(where_case);

  HostCache host(f.elem, f.kv_heads, f.dim, f.quant_group, f.scale_f16, slots, f.k_scale, f.v_scale,
                 rng);
  FillCache(&host, f.io, rng);
  const DecodedCache decoded(host, f.io);
  const Activations query = MakeActivations(f.io, static_cast<size_t>(tokens) * f.heads() * f.dim,
                                            [&] { return UniformF(rng, -1.0f, 1.0f); });
  const size_t mask_count =
      mask_kind == 0 ? 0
                     : static_cast<size_t>((mask_kind == 2 ? f.heads() : 1) * tokens * mask_row);
  const Activations mask = MakeActivations(
      f.io, mask_count, [&] { return rng() % 8 == 0 ? -INFINITY : UniformF(rng, -3.0f, 1.0f); });
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());

  DeviceCache cache(host);
  const DeviceBytes query_in(query.bytes), mask_in(mask.bytes);
  const size_t out_bytes = query.bytes.size();
  const DeviceBytes out(Poison(out_bytes)),
      lse(Poison(static_cast<size_t>(tokens) * f.heads() * 4));
  di::AttentionProblem p;
  FillFeatures(f, &p, slopes);
  p.batch.size = batch;
  p.batch.seqstarts = seqstarts.data();
  p.batch.kvstarts = kvstarts.data();
  p.batch.decoding_batches = decodes;
  p.is_causal = causal;
  p.query = query_in.get();
  p.output = out.get();
  p.lse = static_cast<float*>(lse.get());
  p.mask = mask_kind == 0 ? nullptr : mask_in.get();
  p.mask_row_stride = mask_row;
  p.mask_head_stride = mask_kind == 2 ? tokens * mask_row : 0;
  p.kv.cache = cache.desc;
  p.kv.slots.mode = di::SlotMap::Mode::kOffset;
  p.kv.slots.starts = cachestarts.data();
  const di::AttentionPlan plan = di::PlanAttention(p);
  dynattn::Context context;
  const di::BackendKernels& row = CudaRow(f.elem);
  const dynattn::Status status =
      row.run_attention(row, p, plan, dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<uint8_t> got = out.Fetch(), got_lse = lse.Fetch();

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kvlen = kvstarts[b + 1] - kvstarts[b];
    for (int64_t r = 0; r < seqstarts[b + 1] - seqstarts[b]; ++r) {
      const int64_t token = seqstarts[b] + r;
      const int64_t first = p.FirstVisibleKey(b, r), last = p.LastVisibleKey(b, r);
      const int64_t position = p.QueryPosition(b, r);
      REQUIRE(last <= kvlen - 1);
      for (int h = 0; h < f.heads(); ++h) {
        const int kvh = h / f.group_size;
        const auto key = [&](int64_t j) {
          return decoded.Row(0, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
        };
        const auto value = [&](int64_t j) {
          return decoded.Row(1, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
        };
        const auto bias = [&](int64_t j) {
          double x = 0.0;
          if (f.alibi) x += static_cast<double>(slopes[h]) * static_cast<double>(j - position);
          if (mask_kind != 0) {
            x += mask.values[(mask_kind == 2 ? h * tokens * mask_row : 0) + token * mask_row +
                             kvstarts[b] + j];
          }
          return x;
        };
        const float* q = query.values.data() + (token * f.heads() + h) * f.dim;
        CheckAttendedRow(f, q, first, last, key, value, bias,
                         f.sinks.empty() ? nullptr : &f.sinks[h], got, got_lse,
                         token * f.heads() + h,
                         "request " + std::to_string(b) + " row " + std::to_string(r) + " head " +
                             std::to_string(h));
      }
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("window, soft-cap, scale, sinks, bf16 and fp8 on the CUDA attention rows") {
    feature::RunTrials(24, &feature::CheckAttention);
  }
}

}  // namespace
}  // namespace feature
}  // namespace dynattn_test

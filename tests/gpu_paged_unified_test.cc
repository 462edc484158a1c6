// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The gpu suite's score features on the CUDA unified-attention rows, driven directly (a step and
// its plan, as src/ builds them): requests over a paged block cache whose leading blocks some of
// them share, long decodes (unique runs and splits) and prefills, with bf16 and fp8 caches,
// windows, soft-cap, softmax scale, ALiBi and sinks, against a float64 evaluation over the keys
// and values the cache decodes to.

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/alibi.h"
#include "core/plan_unified.h"
#include "src/context.h"
#include "tests/support/gpu_features.h"

namespace dynattn_test {
namespace feature {
namespace {

/// Unified attention on a CUDA row: requests over a block cache whose leading blocks some of them
/// share (shared items), long decodes (unique runs and splits) and prefills (causal items), every
/// token's parts merged once, against the float64 attention.
void CheckUnified(std::mt19937_64& rng) {
  const int64_t requests = Uniform(rng, 1, 4);
  const int64_t block_size = Pick(rng, std::vector<int64_t>{1, 4, 16, 32});
  const int64_t shared_blocks = Uniform(rng, 0, 3);
  std::vector<int64_t> qsl{0}, context_lens;
  std::vector<bool> shares;
  int64_t longest = 1;
  for (int64_t b = 0; b < requests; ++b) {
    const bool share = shared_blocks > 0 && rng() % 3 != 0;
    const int64_t query_len = rng() % 2 ? 1 : Uniform(rng, 1, 40);
    int64_t context = rng() % 4 == 0 ? Uniform(rng, 1025, 2200) : Uniform(rng, 0, 90);
    if (share) context = std::max(context, shared_blocks * block_size + Uniform(rng, 0, 5));
    qsl.push_back(qsl.back() + query_len);
    context_lens.push_back(context);
    shares.push_back(share);
    longest = std::max(longest, context + query_len);
  }
  int64_t table_stride = 1;
  for (int64_t b = 0; b < requests; ++b) {
    table_stride = std::max(table_stride,
                            (context_lens[b] + qsl[b + 1] - qsl[b] + block_size - 1) / block_size);
  }
  // Blocks: the shared ones first, then each request's own, in a shuffled order.
  std::vector<int64_t> table(static_cast<size_t>(requests * table_stride), 0);
  int64_t next_block = shared_blocks;
  std::vector<int64_t> own;
  for (int64_t b = 0; b < requests; ++b) {
    const int64_t blocks = (context_lens[b] + qsl[b + 1] - qsl[b] + block_size - 1) / block_size;
    for (int64_t j = 0; j < blocks; ++j) {
      if (shares[b] && j < shared_blocks) {
        table[b * table_stride + j] = j;
      } else {
        table[b * table_stride + j] = next_block++;
        own.push_back(b * table_stride + j);
      }
    }
  }
  std::vector<int64_t> ids(own.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = shared_blocks + static_cast<int64_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (size_t i = 0; i < own.size(); ++i) table[own[i]] = ids[i];
  const int64_t num_blocks = next_block;

  const Features f = RandomFeatures(rng, longest);
  INFO(Describe(f) << " requests " << requests << " block_size " << block_size << " shared "
                   << shared_blocks);
  HostCache host(f.elem, f.kv_heads, f.dim, f.quant_group, f.scale_f16, num_blocks * block_size,
                 f.k_scale, f.v_scale, rng);
  FillCache(&host, f.io, rng);
  const DecodedCache decoded(host, f.io);
  const int64_t tokens = qsl.back();
  const Activations query = MakeActivations(f.io, static_cast<size_t>(tokens) * f.heads() * f.dim,
                                            [&] { return UniformF(rng, -1.0f, 1.0f); });
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());

  di::UnifiedStep step;
  step.num_requests = requests;
  step.query_start_loc = qsl.data();
  step.context_lens = context_lens.data();
  step.block_table = table.data();
  step.table_stride = table_stride;
  step.block_size = block_size;
  step.block_stride = block_size;
  step.num_kv_heads = f.kv_heads;
  step.group_size = f.group_size;
  const di::UnifiedPlan plan = di::PlanUnified(step);
  REQUIRE(di::CheckCoverage(step, plan).empty());
  std::vector<int64_t> kvstarts{0};
  for (int64_t b = 0; b < requests; ++b) {
    kvstarts.push_back(kvstarts.back() + context_lens[b] + qsl[b + 1] - qsl[b]);
  }

  DeviceCache cache(host);
  const DeviceBytes query_in(query.bytes);
  const DeviceBytes out(Poison(query.bytes.size()));
  const DeviceBytes lse(Poison(static_cast<size_t>(tokens) * f.heads() * 4));
  di::AttentionProblem p;
  FillFeatures(f, &p, slopes);
  p.batch.size = requests;
  p.batch.seqstarts = qsl.data();
  p.batch.kvstarts = kvstarts.data();
  p.batch.start_pos = context_lens.data();
  p.is_causal = true;
  p.query = query_in.get();
  p.output = out.get();
  p.lse = static_cast<float*>(lse.get());
  p.kv.cache = cache.desc;
  p.kv.slots =
      di::SlotMap{di::SlotMap::Mode::kBlocks, table.data(), table_stride, block_size, block_size};
  dynattn::Context context;
  const di::BackendKernels& row = CudaRow(f.elem);
  const dynattn::Status status = row.run_unified(row, p, plan, dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<uint8_t> got = out.Fetch(), got_lse = lse.Fetch();

  for (int64_t b = 0; b < requests; ++b) {
    const auto slot = [&](int64_t j) {
      return table[b * table_stride + j / block_size] * block_size + j % block_size;
    };
    for (int64_t r = 0; r < qsl[b + 1] - qsl[b]; ++r) {
      const int64_t token = qsl[b] + r;
      const int64_t position = context_lens[b] + r;
      const int64_t first = di::AttentionProblem::WindowStart(position, f.window);
      for (int h = 0; h < f.heads(); ++h) {
        const int kvh = h / f.group_size;
        const auto key = [&](int64_t j) { return decoded.Row(0, slot(j), kvh, f.kv_heads, f.dim); };
        const auto value = [&](int64_t j) {
          return decoded.Row(1, slot(j), kvh, f.kv_heads, f.dim);
        };
        const auto bias = [&](int64_t j) {
          return f.alibi ? static_cast<double>(slopes[h]) * static_cast<double>(j - position) : 0.0;
        };
        const float* q = query.values.data() + (token * f.heads() + h) * f.dim;
        CheckAttendedRow(f, q, first, position, key, value, bias,
                         f.sinks.empty() ? nullptr : &f.sinks[h], got, got_lse,
                         token * f.heads() + h,
                         "request " + std::to_string(b) + " row " + std::to_string(r) + " head " +
                             std::to_string(h));
      }
    }
  }
}

TEST_SUITE("gpu") {
  TEST_CASE("window, soft-cap, scale, sinks, bf16 and fp8 on the CUDA unified rows") {
    feature::RunTrials(16, &feature::CheckUnified);
  }
}

}  // namespace
}  // namespace feature
}  // namespace dynattn_test

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The adapters' validation (dynattn/adapters.h): every rule of the Ksana, ATB, paged, combined
// and vLLM CPU caches and of the vLLM and FlashInfer metadata refuses its input with a status that
// names it, in the rule's own words where the rule is shared with the PMX validators.

#include <doctest/doctest.h>

#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/adapters.h"
#include "dynattn/dynattn.h"
#include "tests/support/adapter_caches.h"

namespace dynattn_test {
namespace {

TEST_SUITE("adapters") {
  TEST_CASE("every validation rule names its input") {
    std::mt19937_64 rng(BaseSeed() + 7500);
    Pool p = RandomPool(rng, 8, KsanaBlockOrder::kKvLayer, true, 2, 3, 4);
    const int64_t table[4] = {0, 2, 1, -1};
    const TensorView tv = TensorView::Dense(table, DType::kI64, {2, 2});
    const int64_t req[2] = {0, 1}, pos[2] = {0, 5}, bad_req[2] = {0, 2}, bad_pos[2] = {0, 8};
    const auto vec = [](const int64_t* v) { return TensorView::Dense(v, DType::kI64, {2}); };
    BlockCache bc;
    dynattn::AtbViews views;
    std::vector<int64_t> ids;
    using Check = std::pair<const char*, std::function<Status()>>;
    std::vector<Check> checks = {
        {"num_layer",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.num_layer = 0;
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"num_layer",  // 2 * L * T * Hkv * D overflows int64: refused, never wrapped
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.num_layer = a.block_size = a.num_kv_heads = std::numeric_limits<int>::max();
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"num_layer",  // N + 1 slack block overflows
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.num_blocks = std::numeric_limits<int64_t>::max();
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"block_size",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.block_size = 0;
           return dynattn::MakeAtbViews(p.View(), p.ScaleView(), a, &views);
         }},
        {"quant_group",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.format.quant_group = a.head_dim + 1;  // never divides head_dim
           return dynattn::MakeAtbViews(p.View(), p.ScaleView(), a, &views);
         }},
        {"pool",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.slack_block = false;
           return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), a, 0, &bc);
         }},
        {"pool",
         [&] {
           KsanaPoolAttrs a = p.attrs;
           a.format.quant_bit = 0;
           return dynattn::MakeKsanaBlockCache(p.View(), {}, a, 0, &bc);
         }},
        {"scale_pool", [&] { return dynattn::MakeKsanaBlockCache(p.View(), {}, p.attrs, 0, &bc); }},
        {"layer",
         [&] { return dynattn::MakeKsanaBlockCache(p.View(), p.ScaleView(), p.attrs, 2, &bc); }},
        {"ksana_table",
         [&] {
           const int64_t t[2] = {0, 3};
           return dynattn::KsanaToAtbBlockTable(TensorView::Dense(t, DType::kI64, {1, 2}), p.attrs,
                                                0, &ids);
         }},
        {"ksana_table", [&] { return dynattn::KsanaToAtbBlockTable(vec(req), p.attrs, 0, &ids); }},
        {"requests",
         [&] { return dynattn::AtbSlotMapping(tv, vec(bad_req), vec(pos), p.attrs, 0, &ids); }},
        {"positions",
         [&] { return dynattn::AtbSlotMapping(tv, vec(req), vec(bad_pos), p.attrs, 0, &ids); }},
        {"ksana_table",
         [&] {
           const int64_t r[2] = {1, 1}, q[2] = {0, 4};
           return dynattn::AtbSlotMapping(tv, vec(r), vec(q), p.attrs, 0, &ids);
         }},
    };
    // Paged caches.
    EngineCache c = RandomEngineCache(rng, Kind::kFiNhd, 3, 4, 8, DType::kF16);
    const CacheFormat f = c.format;
    checks.push_back({"key", [&] {
                        TensorView k = c.DataView(0);
                        k.rank = 3;
                        return dynattn::MakePagedBlockCache(k, c.DataView(1), c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"value", [&] {
                        TensorView v = c.DataView(1);
                        v.shape[0] = 2;
                        return dynattn::MakePagedBlockCache(c.DataView(0), v, c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"key_scale", [&] {
                        return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1), {},
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"value_scale", [&] {
                        TensorView s = c.ScaleView(1);
                        s.dtype = DType::kI8;
                        return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1),
                                                            c.ScaleView(0), s,
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"kv", [&] {
                        return dynattn::MakeCombinedBlockCache(c.DataView(0), c.ScaleView(0),
                                                               dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back(
        {"kv_cache",
         [&] { return dynattn::MakeVllmCpuBlockCache(c.DataView(0), {}, CacheFormat{}, &bc); }});
    // vLLM metadata: 2 requests, block size 4, 4 blocks; request 1 decodes position 5.
    const int64_t qsl[3] = {0, 2, 3}, seq[2] = {2, 6}, vt[4] = {3, 0, 1, 2}, slots[3] = {12, 13, 9};
    const auto vllm = [&](std::vector<int64_t> q, std::vector<int64_t> sl, std::vector<int64_t> t,
                          std::vector<int64_t> sm, int64_t cols) {
      dynattn::UnifiedMetadata m;
      dynattn::VllmMetadata in{
          TensorView::Dense(q.data(), DType::kI64, {static_cast<int64_t>(q.size())}),
          TensorView::Dense(sl.data(), DType::kI64, {static_cast<int64_t>(sl.size())}),
          TensorView::Dense(t.data(), DType::kI64, {2, cols}),
          TensorView::Dense(sm.data(), DType::kI64, {static_cast<int64_t>(sm.size())})};
      return dynattn::FromVllm(in, 4, 4, &m);
    };
    const std::vector<int64_t> q0(qsl, qsl + 3), s0(seq, seq + 2), t0(vt, vt + 4),
        m0(slots, slots + 3);
    REQUIRE(vllm(q0, s0, t0, m0, 2).ok());
    checks.push_back({"query_start_loc", [&] { return vllm({1, 2, 3}, s0, t0, m0, 2); }});
    checks.push_back({"query_start_loc", [&] { return vllm({0, 2, 1}, s0, t0, m0, 2); }});
    checks.push_back({"seq_lens", [&] { return vllm(q0, {1, 6}, t0, m0, 2); }});
    checks.push_back({"seq_lens", [&] { return vllm(q0, {2}, t0, m0, 2); }});
    checks.push_back({"block_table", [&] { return vllm(q0, s0, {3, 0, 1, 4}, m0, 2); }});
    checks.push_back({"block_table", [&] { return vllm(q0, s0, {3, 1}, m0, 1); }});
    checks.push_back({"slot_mapping: slot_mapping[2] = 10", [&] {
                        return vllm(q0, s0, t0, {12, 13, 10}, 2);
                      }});
    checks.push_back({"slot_mapping", [&] { return vllm(q0, s0, t0, {12, 13}, 2); }});
    // FlashInfer metadata: same step, page size 4.
    const auto fi = [&](std::vector<int64_t> qo, std::vector<int64_t> kv, std::vector<int64_t> idx,
                        std::vector<int64_t> last, DType type) {
      dynattn::UnifiedMetadata m;
      std::vector<int32_t> narrow(qo.begin(), qo.end());
      const void* qo_data =
          type == DType::kI32 ? static_cast<const void*>(narrow.data()) : qo.data();
      dynattn::FlashInferMetadata in{
          TensorView::Dense(qo_data, type, {static_cast<int64_t>(qo.size())}),
          TensorView::Dense(kv.data(), DType::kI64, {static_cast<int64_t>(kv.size())}),
          TensorView::Dense(idx.data(), DType::kI64, {static_cast<int64_t>(idx.size())}),
          TensorView::Dense(last.data(), DType::kI64, {static_cast<int64_t>(last.size())})};
      return dynattn::FromFlashInfer(in, 4, 4, &m);
    };
    REQUIRE(fi(q0, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kI32).ok());
    checks.push_back({"qo_indptr", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kF32);
                      }});
    checks.push_back({"kv_indptr", [&] {
                        return fi(q0, {0, 3, 1}, {3, 1, 2}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_indptr", [&] { return fi(q0, {0, 1}, {3, 1, 2}, {2, 2}, DType::kI64); }});
    checks.push_back({"kv_indices", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_indices", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 4}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_last_page_len", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {2, 0}, DType::kI64);
                      }});
    checks.push_back({"kv_last_page_len", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {5, 2}, DType::kI64);
                      }});
    checks.push_back({"qo_indptr", [&] {
                        return fi(q0, {0, 1, 3}, {3, 1, 2}, {1, 2}, DType::kI64);
                      }});
    // The rules shared with the PMX validators (src/validate.h), each on every adapter path that
    // uses it, with the rule's own words: dropping a rule, or weakening it, fails here.
    const auto ksana_format = [&](int bits, int group, int64_t head_dim) {
      KsanaPoolAttrs a = p.attrs;
      a.format.quant_bit = bits;
      a.format.quant_group = group;
      a.head_dim = head_dim;
      return dynattn::MakeAtbViews(p.View(), p.ScaleView(), a, &views);
    };
    checks.push_back(
        {"quant_bit: must be 0, 4 or 8, got 3", [&] { return ksana_format(3, 4, 8); }});
    checks.push_back({"head_dim: must be >= 1, got 0", [&] { return ksana_format(8, 4, 0); }});
    checks.push_back(
        {"quant_group: must divide head_dim 8, got 3", [&] { return ksana_format(8, 3, 8); }});
    checks.push_back({"quant_group: must be even for int4", [&] { return ksana_format(4, 1, 8); }});
    const auto paged_format = [&](int bits, int group) {
      CacheFormat g = f;
      g.quant_bit = bits;
      g.quant_group = group;
      return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1), c.ScaleView(0),
                                          c.ScaleView(1), dynattn::PageLayout::kNHD, g, &bc);
    };
    checks.push_back({"quant_bit: must be 0, 4 or 8, got 5", [&] { return paged_format(5, 4); }});
    checks.push_back({"quant_group: must divide head_dim", [&] {
                        // Larger than head_dim (at most twice the last dim): never divides it.
                        const TensorView k = c.DataView(0);
                        return paged_format(8, static_cast<int>(2 * k.shape[k.rank - 1] + 1));
                      }});
    // Storage: a negative extent, a null pointer, strides that are not row-major.
    checks.push_back({"key: has a negative extent", [&] {
                        TensorView k = c.DataView(0);
                        k.shape[0] = -1;
                        return dynattn::MakePagedBlockCache(k, c.DataView(1), c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"value: data is null", [&] {
                        TensorView v = c.DataView(1);
                        v.data = nullptr;
                        return dynattn::MakePagedBlockCache(c.DataView(0), v, c.ScaleView(0),
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    checks.push_back({"key_scale: must be dense row-major", [&] {
                        TensorView s = c.ScaleView(0);
                        s.strides[0] += 1;
                        return dynattn::MakePagedBlockCache(c.DataView(0), c.DataView(1), s,
                                                            c.ScaleView(1),
                                                            dynattn::PageLayout::kNHD, f, &bc);
                      }});
    // Shapes in messages: rank 1 reads "(2,)" everywhere.
    checks.push_back({"ksana_table: must have rank 2, got shape (2,)",
                      [&] { return dynattn::KsanaToAtbBlockTable(vec(req), p.attrs, 0, &ids); }});
    // Offsets: from 0, non-decreasing, in range; int32 and int64 alike.
    checks.push_back({"query_start_loc: must start at 0, got 1", [&] {
                        return vllm({1, 2, 3}, s0, t0, m0, 2);
                      }});
    checks.push_back(
        {"qo_indptr: must be non-decreasing (qo_indptr[2] = 1 < qo_indptr[1] = 2)", [&] {
           return fi({0, 2, 1}, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kI32);
         }});
    checks.push_back({"qo_indptr: must have B+1 >= 1 entries, got 0", [&] {
                        return fi({}, {0, 1, 3}, {3, 1, 2}, {2, 2}, DType::kI64);
                      }});
    checks.push_back({"kv_indptr: entry 2 = 140737488355328 is too large", [&] {
                        return fi(q0, {0, 1, int64_t{1} << 47}, {3, 1, 2}, {2, 2}, DType::kI64);
                      }});
    for (size_t i = 0; i < checks.size(); ++i) {
      const Status st = checks[i].second();
      INFO("check " << i << " expects " << std::string(checks[i].first)
                    << ", got: " << st.message());
      CHECK(st.code() == dynattn::StatusCode::kInvalidArgument);
      CHECK(st.message().find(checks[i].first) == 0);
    }
  }
}

}  // namespace
}  // namespace dynattn_test

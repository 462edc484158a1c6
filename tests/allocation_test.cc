// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Every allocation a Run makes happens before its first write: when memory runs out, the C++ API
// throws std::bad_alloc and the C API returns DYNATTN_STATUS_OUT_OF_MEMORY with the cache, its
// scales and the outputs as they were. This binary replaces the global operator new with one a
// test can arm to refuse large requests (the Context's scratch and partial states are the large
// allocations of a Run; the write kernel's scratch is a few rows).

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <utility>
#include <vector>

#include "dynattn/c_api.h"
#include "dynattn/dynattn.h"

namespace {

/// Requests of more bytes than this throw std::bad_alloc (armed by RefuseAbove).
std::atomic<size_t> g_refuse_above{std::numeric_limits<size_t>::max()};

/// Refuses allocations above `bytes` while it lives.
class RefuseAbove {
 public:
  explicit RefuseAbove(size_t bytes) { g_refuse_above = bytes; }
  ~RefuseAbove() { g_refuse_above = std::numeric_limits<size_t>::max(); }
  RefuseAbove(const RefuseAbove&) = delete;
  RefuseAbove& operator=(const RefuseAbove&) = delete;
};

}  // namespace

void* operator new(size_t bytes) {
  if (bytes > g_refuse_above.load(std::memory_order_relaxed)) throw std::bad_alloc();
  if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

using namespace dynattn;  // NOLINT: a test of the whole public API

/// A prefill step of one 192-token prompt over an int8 PMX cache (layout 0, 256 slots): its
/// attention items hold many query vectors, so a fresh Context's scratch for them is far larger
/// than the write's.
struct PrefillStep {
  static constexpr int kTokens = 192, kHeads = 8, kKvHeads = 1, kDim = 128, kSlots = 256;
  std::vector<uint16_t> query, key, value, output, scale;
  std::vector<int8_t> cache;
  int64_t seqstarts[2] = {0, kTokens}, kvstarts[2] = {0, kTokens}, start_pos[1] = {0};
  int64_t cachestarts[1] = {0}, decoding = 0, max_seqlen = kTokens, max_kvlen = kTokens;
  MultiHeadCacheAttentionAttrs attrs;
  MultiHeadCacheAttentionArgs args;

  explicit PrefillStep(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    auto halves = [&](size_t n) {
      std::vector<uint16_t> v(n);
      for (uint16_t& h : v) h = FloatToHalf(normal(rng));
      return v;
    };
    query = halves(size_t{kTokens} * kHeads * kDim);
    key = halves(size_t{kTokens} * kKvHeads * kDim);
    value = halves(size_t{kTokens} * kKvHeads * kDim);
    output.assign(query.size(), 0xFFFF);  // NaN: an element written shows
    cache.resize(size_t{kSlots} * 2 * kKvHeads * kDim);
    for (int8_t& c : cache) c = static_cast<int8_t>(rng());
    scale.resize(size_t{kSlots} * 2 * kKvHeads * kDim / 8);
    for (uint16_t& s : scale) s = FloatToHalf(0.01f + 0.001f * static_cast<float>(rng() % 16));
    args.query = TensorView::Dense(query.data(), DType::kF16, {kTokens, kHeads, kDim});
    args.current_key = TensorView::Dense(key.data(), DType::kF16, {kTokens, kKvHeads, kDim});
    args.current_value = TensorView::Dense(value.data(), DType::kF16, {kTokens, kKvHeads, kDim});
    args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    args.cachestarts = TensorView::Dense(cachestarts, DType::kI64, {1});
    args.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
    args.decoding_batches = TensorView::Dense(&decoding, DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
    args.cache = TensorView::Dense(cache.data(), DType::kI8, {kSlots, 1, 2, kKvHeads, kDim});
    args.scale = TensorView::Dense(scale.data(), DType::kF16, {kSlots, 1, 2, kKvHeads, kDim / 8});
    args.attn_output = TensorView::Dense(output.data(), DType::kF16, {kTokens, kHeads, kDim});
    attrs.attention = {.num_heads = kHeads, .num_kv_heads = kKvHeads, .head_dim = kDim};
    attrs.cache.quant_bit = 8;
  }
};

/// Bytes a fresh Context's Run may allocate while refused: the write's rows are far below it,
/// the attention's scratch far above.
constexpr size_t kRefused = 16 * 1024;

TEST_SUITE("allocation") {
  TEST_CASE("C++: a Run that runs out of memory throws before it writes anything") {
    PrefillStep step(0x5EED);
    Plan plan;
    REQUIRE(PlanMultiHeadCacheAttention(step.attrs, step.args, &plan).ok());
    const std::vector<int8_t> cache = step.cache;
    const std::vector<uint16_t> scale = step.scale, output = step.output;
    Context context(ContextOptions{.num_threads = 1});
    bool threw = false;
    try {
      RefuseAbove refuse(kRefused);
      (void)RunMultiHeadCacheAttention(plan, step.args, &context);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    CHECK(threw);
    CHECK(step.cache == cache);
    CHECK(step.scale == scale);
    CHECK(step.output == output);
    // With memory back, the same Context runs the plan.
    CHECK(RunMultiHeadCacheAttention(plan, step.args, &context).ok());
    CHECK(step.cache != cache);
    CHECK(step.output != output);
  }

  TEST_CASE("C: a Run that runs out of memory returns OUT_OF_MEMORY and writes nothing") {
    PrefillStep step(0x5EED + 1);
    const std::vector<int8_t> cache = step.cache;
    const std::vector<uint16_t> scale = step.scale, output = step.output;
    const MultiHeadCacheAttentionArgs& a = step.args;
    dynattn_multi_head_cache_attention_args_t args;
    REQUIRE(dynattn_multi_head_cache_attention_args_init(&args) == DYNATTN_STATUS_OK);
    const std::pair<const TensorView*, dynattn_tensor_t*> tensors[] = {
        {&a.query, &args.query},
        {&a.current_key, &args.current_key},
        {&a.current_value, &args.current_value},
        {&a.seqstarts, &args.seqstarts},
        {&a.kvstarts, &args.kvstarts},
        {&a.cachestarts, &args.cachestarts},
        {&a.start_pos, &args.start_pos},
        {&a.decoding_batches, &args.decoding_batches},
        {&a.max_seqlen, &args.max_seqlen},
        {&a.max_kvlen, &args.max_kvlen},
        {&a.cache, &args.cache},
        {&a.scale, &args.scale},
        {&a.attn_output, &args.attn_output}};
    for (const auto& [view, tensor] : tensors) {
      const dynattn_dtype_t dtype = view->dtype == DType::kF16  ? DYNATTN_DTYPE_F16
                                    : view->dtype == DType::kI8 ? DYNATTN_DTYPE_I8
                                                                : DYNATTN_DTYPE_I64;
      REQUIRE(dynattn_tensor_dense(view->data, dtype, view->rank, view->shape, DYNATTN_DEVICE_CPU,
                                   tensor) == DYNATTN_STATUS_OK);
    }
    dynattn_multi_head_cache_attention_attrs_t attrs;
    REQUIRE(dynattn_multi_head_cache_attention_attrs_init(&attrs) == DYNATTN_STATUS_OK);
    attrs.attention.num_heads = PrefillStep::kHeads;
    attrs.attention.num_kv_heads = PrefillStep::kKvHeads;
    attrs.attention.head_dim = PrefillStep::kDim;
    attrs.cache.quant_bit = 8;
    dynattn_plan_t* plan = nullptr;
    REQUIRE(dynattn_plan_create(&plan) == DYNATTN_STATUS_OK);
    REQUIRE(dynattn_plan_multi_head_cache_attention(&attrs, &args, plan) == DYNATTN_STATUS_OK);
    dynattn_context_options_t options;
    REQUIRE(dynattn_context_options_init(&options) == DYNATTN_STATUS_OK);
    options.num_threads = 1;
    dynattn_context_t* context = nullptr;
    REQUIRE(dynattn_context_create(&options, &context) == DYNATTN_STATUS_OK);
    dynattn_status_t status = DYNATTN_STATUS_OK;
    {
      RefuseAbove refuse(kRefused);
      status = dynattn_run_multi_head_cache_attention(plan, &args, context);
    }
    CHECK(status == DYNATTN_STATUS_OUT_OF_MEMORY);
    CHECK(step.cache == cache);
    CHECK(step.scale == scale);
    CHECK(step.output == output);
    CHECK(dynattn_run_multi_head_cache_attention(plan, &args, context) == DYNATTN_STATUS_OK);
    CHECK(step.cache != cache);
    dynattn_context_destroy(context);
    dynattn_plan_destroy(plan);
  }
}

}  // namespace

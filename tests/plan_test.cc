// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Plan once, run per layer (dynattn/plan.h): a plan made from one layer's tensors runs any other
// layer's tensors of the same shapes with the bits of the one-shot call on that layer; a Run whose
// tensors do not match its plan is refused before anything is written; once a Context has run
// a plan, running it again allocates nothing; and the planners plan a sliding window's keys only.

#include "core/plan.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/plan_unified.h"
#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "tests/support/plan_layers.h"
#include "tests/support/run_case.h"

// Every C++ heap allocation of this binary is counted while `g_counting` is set. The replacements
// allocate with malloc and release with free, which GCC's mismatched-new-delete check cannot see.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* Allocate(size_t bytes, size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (bytes == 0) bytes = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(bytes)
                : std::aligned_alloc(align, (bytes + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t bytes) { return Allocate(bytes, 0); }
void* operator new[](size_t bytes) { return Allocate(bytes, 0); }
void* operator new(size_t bytes, std::align_val_t align) {
  return Allocate(bytes, static_cast<size_t>(align));
}
void* operator new[](size_t bytes, std::align_val_t align) {
  return Allocate(bytes, static_cast<size_t>(align));
}
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return Allocate(bytes, 0);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t bytes, const std::nothrow_t& tag) noexcept {
  return operator new(bytes, tag);
}
void* operator new(size_t bytes, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return Allocate(bytes, static_cast<size_t>(align));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t bytes, std::align_val_t align, const std::nothrow_t& tag) noexcept {
  return operator new(bytes, align, tag);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace dynattn_test {
namespace {

using dynattn::Context;
using dynattn::Plan;
using dynattn::Status;
using dynattn_ref::Dt;

/// A batch of (seqlen, kvlen) requests for the attention planner, with its offset arrays.
struct PlannedBatch {
  std::vector<int64_t> seqstarts{0}, kvstarts{0};
  dynattn::internal::AttentionProblem problem;

  PlannedBatch(const std::vector<std::pair<int64_t, int64_t>>& requests, int64_t window,
               bool causal, int kv_heads = 2, int group = 4) {
    for (const auto& [seqlen, kvlen] : requests) {
      seqstarts.push_back(seqstarts.back() + seqlen);
      kvstarts.push_back(kvstarts.back() + kvlen);
    }
    problem.batch.size = static_cast<int64_t>(requests.size());
    problem.batch.seqstarts = seqstarts.data();
    problem.batch.kvstarts = kvstarts.data();
    problem.num_kv_heads = kv_heads;
    problem.group_size = group;
    problem.num_heads = kv_heads * group;
    problem.head_dim = problem.value_dim = 64;
    problem.padded_dim = problem.padded_value_dim = 64;
    problem.is_causal = causal;
    problem.window_left = window;
  }
};

/// For every (request, KV head, query row): the keys the plan's items give it, as the kernels
/// read them (an item's keys from the first tile one of its rows sees), must be exactly the
/// row's window [FirstVisibleKey, LastVisibleKey] plus at most the rest of the first key tile
/// and of the split boundary tiles; and every key is given at most once.
std::string CheckWindowPlan(const dynattn::internal::AttentionProblem& p,
                            const dynattn::internal::AttentionPlan& plan) {
  using dynattn::internal::kKeyTile;
  std::map<std::tuple<int64_t, int, int64_t>, std::vector<int>> seen;
  for (const auto& w : plan.items) {
    for (int64_t row = w.row_begin; row < w.row_end; ++row) {
      std::vector<int>& keys = seen[{w.request, w.kv_head, row}];
      keys.resize(static_cast<size_t>(p.batch.KvLen(w.request)), 0);
      if (w.key_begin % kKeyTile != 0) return "an item starts off the key tile grid";
      for (int64_t k = w.key_begin; k < w.key_end; ++k) ++keys[static_cast<size_t>(k)];
    }
  }
  for (int64_t b = 0; b < p.batch.size; ++b) {
    for (int g = 0; g < p.num_kv_heads; ++g) {
      for (int64_t row = 0; row < p.batch.SeqLen(b); ++row) {
        const std::vector<int>& keys = seen[{b, g, row}];
        const int64_t first = p.FirstVisibleKey(b, row), last = p.LastVisibleKey(b, row);
        // The item's first tile starts at most a tile (and a row tile's windows) before `first`.
        const int64_t slack = kKeyTile + dynattn::internal::kRowTile;
        for (int64_t k = 0; k < static_cast<int64_t>(keys.size()); ++k) {
          const bool visible = k >= first && k <= last;
          const std::string where = "request " + std::to_string(b) + " row " + std::to_string(row) +
                                    " key " + std::to_string(k);
          if (keys[k] > 1) return where + " is planned twice";
          if (visible && keys[k] == 0) return where + " is visible but not planned";
          if (!visible && keys[k] == 1 && (k < first - slack)) {
            return where + " is planned far outside the window";
          }
        }
      }
    }
  }
  return "";
}

TEST_SUITE("plan") {
  TEST_CASE("a sliding window plans the window's keys only") {
    const uint64_t seed = BaseSeed() + 31;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<std::pair<int64_t, int64_t>> requests;
      const int batch = 1 + static_cast<int>(rng() % 4);
      for (int b = 0; b < batch; ++b) {
        const int64_t kvlen = static_cast<int64_t>(rng() % 5000);
        const int64_t seqlen = std::min<int64_t>(kvlen, 1 + static_cast<int64_t>(rng() % 80));
        requests.emplace_back(seqlen, kvlen);
      }
      const int64_t windows[] = {0, 1, 63, 64, 100, 1023, 1024, 3000, 10000};
      const int64_t window = windows[rng() % std::size(windows)];
      const PlannedBatch planned(requests, window, trial % 2 == 0);
      const auto plan = dynattn::internal::PlanAttention(planned.problem);
      INFO("trial " << trial << ", window " << window);
      CHECK(CheckWindowPlan(planned.problem, plan) == "");
    }
  }

  TEST_CASE("split-KV of a windowed long decode reads about the window") {
    // One decode over 131072 keys with a 4096 window: only the window's splits are planned.
    for (int64_t window : {int64_t{4096}, int64_t{4000}, int64_t{-1}}) {
      const PlannedBatch planned({{1, 131072}}, window, true, 1, 8);
      const auto plan = dynattn::internal::PlanAttention(planned.problem);
      int64_t keys = 0;
      for (const auto& w : plan.items) keys += w.key_end - w.key_begin;
      INFO("window " << window);
      if (window < 0) {
        CHECK(keys == 131072);
        CHECK(plan.items.size() == 128);
        continue;
      }
      CHECK(keys >= window + 1);
      CHECK(keys <= window + 1 + dynattn::internal::kKeyTile);
      CHECK(plan.items.size() <= static_cast<size_t>(window / 1024 + 2));
      CHECK(plan.merges.size() == 1);
      CHECK(CheckWindowPlan(planned.problem, plan) == "");
      // Every split item starts at the window's first tile or at a split boundary.
      for (const auto& w : plan.items) {
        const int64_t first = planned.problem.FirstVisibleKey(0, 0) / 64 * 64;
        CHECK((w.key_begin == first || w.key_begin % 1024 == 0));
        CHECK(w.num_splits == static_cast<int32_t>(plan.items.size()));
      }
    }
  }

  TEST_CASE("work items come longest first, equal ones by request, row tile, KV head, split") {
    // The order only schedules the items (bits do not depend on it), but it must be the same on
    // every run: ties keep the order the planner makes items in.
    const uint64_t seed = BaseSeed() + 34;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    using dynattn::internal::WorkItem;
    const auto work = [](const WorkItem& w) {
      return (w.key_end - w.key_begin) * (w.row_end - w.row_begin);
    };
    const auto made = [](const WorkItem& w) {
      return std::make_tuple(w.request, w.row_begin, w.kv_head, w.key_begin);
    };
    size_t ties = 0;
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<std::pair<int64_t, int64_t>> requests;
      const int batch = 1 + static_cast<int>(rng() % 12);
      for (int b = 0; b < batch; ++b) {
        const int64_t kvlen = static_cast<int64_t>(rng() % 3000);
        const int64_t seqlen = rng() % 2 == 0 ? std::min<int64_t>(kvlen, 1)
                                              : static_cast<int64_t>(rng() % (kvlen + 1));
        requests.emplace_back(seqlen, kvlen);
      }
      const PlannedBatch planned(requests, rng() % 3 == 0 ? 700 : -1, trial % 2 == 0,
                                 1 + static_cast<int>(rng() % 4));
      const auto plan = dynattn::internal::PlanAttention(planned.problem);
      INFO("trial " << trial);
      for (size_t i = 1; i < plan.items.size(); ++i) {
        const WorkItem& a = plan.items[i - 1];
        const WorkItem& b = plan.items[i];
        REQUIRE(work(a) >= work(b));
        if (work(a) == work(b)) {
          ++ties;
          REQUIRE(made(a) < made(b));
        }
      }
    }
    CHECK(ties > 100);  // the tie rule was exercised
  }

  TEST_CASE("a unified decode with a 4096 window over 32768 keys reads about the window") {
    for (int64_t block_size : {int64_t{16}, int64_t{256}}) {
      const int64_t context = 32767;
      std::vector<int64_t> qsl{0, 1}, lens{context}, table;
      for (int64_t j = 0; j <= context / block_size; ++j) table.push_back(1000 - j);
      dynattn::internal::UnifiedStep step;
      step.num_requests = 1;
      step.query_start_loc = qsl.data();
      step.context_lens = lens.data();
      step.block_table = table.data();
      step.table_stride = static_cast<int64_t>(table.size());
      step.block_size = block_size;
      step.block_stride = block_size;
      step.num_kv_heads = 2;
      step.group_size = 4;
      step.window_left = 4096;
      const auto plan = dynattn::internal::PlanUnified(step);
      INFO("block size " << block_size);
      CHECK(dynattn::internal::CheckCoverage(step, plan) == "");
      int64_t keys = 0;
      for (const auto& w : plan.request_items) keys += w.key_end - w.key_begin;
      CHECK(keys >= 2 * 4097);  // two KV heads
      CHECK(keys <= 2 * (4097 + dynattn::internal::kKeyTile));
      CHECK(plan.shared_items.empty());
      CHECK(plan.num_unique_blocks == context / block_size - (context - 4096) / block_size + 1);
    }
  }

  TEST_CASE("unified plans with a sliding window cover each window exactly once") {
    const uint64_t seed = BaseSeed() + 32;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 200; ++trial) {
      const int64_t block_size = int64_t{1} << (rng() % 6);
      const int requests = 1 + static_cast<int>(rng() % 5);
      std::vector<int64_t> qsl{0}, context;
      std::vector<std::vector<int64_t>> tables;
      int64_t next_block = 0, columns = 0;
      std::vector<int64_t> shared_prefix;  // blocks some requests share
      for (int i = 0; i < 40; ++i) shared_prefix.push_back(next_block++);
      for (int b = 0; b < requests; ++b) {
        const int64_t q = rng() % 3 == 0 ? 1 + static_cast<int64_t>(rng() % 40) : 1;
        const int64_t ctx = static_cast<int64_t>(rng() % (block_size * 30 + 1));
        qsl.push_back(qsl.back() + q);
        context.push_back(ctx);
        const int64_t blocks = (ctx + q + block_size - 1) / block_size;
        const int64_t shared = rng() % 2 ? std::min<int64_t>(ctx / block_size, 40) : 0;
        std::vector<int64_t> row;
        for (int64_t j = 0; j < blocks; ++j) {
          row.push_back(j < shared ? shared_prefix[j] : next_block++);
        }
        columns = std::max<int64_t>(columns, blocks);
        tables.push_back(row);
      }
      std::vector<int64_t> table(static_cast<size_t>(requests * std::max<int64_t>(columns, 1)), 0);
      for (int b = 0; b < requests; ++b) {
        std::copy(tables[b].begin(), tables[b].end(),
                  table.begin() + b * std::max<int64_t>(columns, 1));
      }
      dynattn::internal::UnifiedStep step;
      step.num_requests = requests;
      step.query_start_loc = qsl.data();
      step.context_lens = context.data();
      step.block_table = table.data();
      step.table_stride = std::max<int64_t>(columns, 1);
      step.block_size = block_size;
      step.block_stride = block_size;
      step.num_kv_heads = 2;
      step.group_size = 2;
      const int64_t windows[] = {-1, 0, 1, 5, 17, 64, 200, 1000};
      step.window_left = windows[rng() % std::size(windows)];
      const auto plan = dynattn::internal::PlanUnified(step);
      INFO("trial " << trial << ", block_size " << block_size << ", window " << step.window_left);
      CHECK(dynattn::internal::CheckCoverage(step, plan) == "");
      // The blocks counted are exactly those holding a cached key inside some token's window.
      std::set<int64_t> read;
      for (int b = 0; b < requests; ++b) {
        if (qsl[b + 1] == qsl[b]) continue;
        const int64_t first =
            step.window_left < 0 ? 0 : std::max<int64_t>(0, context[b] - step.window_left);
        for (int64_t key = first; key < context[b]; ++key) read.insert(tables[b][key / block_size]);
      }
      CHECK(plan.num_shared_blocks + plan.num_unique_blocks == static_cast<int64_t>(read.size()));
    }
  }

  TEST_CASE("unified plans are the same for dense block ids and for ids spread far apart") {
    // Dense ids take the planner's counting sort, ids spread far apart its general sort; the
    // plans must agree item for item (spreading the ids keeps their order).
    const uint64_t seed = BaseSeed() + 33;
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    constexpr int64_t kSpread = 1000003;
    for (int trial = 0; trial < 100; ++trial) {
      const int64_t block_size = int64_t{1} << (rng() % 5);
      const int requests = 1 + static_cast<int>(rng() % 6);
      const int64_t columns = 48;
      std::vector<int64_t> qsl{0}, context, dense(static_cast<size_t>(requests * columns));
      // Block ids shuffled over a pool; the first 24 of each row are shared when rng() % 2.
      std::vector<int64_t> pool(static_cast<size_t>(columns * (requests + 1)));
      for (size_t k = 0; k < pool.size(); ++k) pool[k] = static_cast<int64_t>(k);
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int b = 0; b < requests; ++b) {
        const int64_t q = rng() % 3 == 0 ? 1 + static_cast<int64_t>(rng() % 8) : 1;
        qsl.push_back(qsl.back() + q);
        context.push_back(static_cast<int64_t>(rng() % (block_size * (columns - 8))));
        const bool shares = rng() % 2 == 0;
        for (int64_t j = 0; j < columns; ++j) {
          dense[b * columns + j] = pool[(shares && j < 24 ? 0 : (b + 1) * columns) + j];
        }
      }
      std::vector<int64_t> spread(dense);
      for (int64_t& id : spread) id = id * kSpread + 7;
      dynattn::internal::UnifiedStep step;
      step.num_requests = requests;
      step.query_start_loc = qsl.data();
      step.context_lens = context.data();
      step.table_stride = columns;
      step.block_size = block_size;
      step.block_stride = block_size;
      step.num_kv_heads = 2;
      step.group_size = 2;
      step.block_table = dense.data();
      const auto a = dynattn::internal::PlanUnified(step);
      step.block_table = spread.data();
      const auto b = dynattn::internal::PlanUnified(step);
      INFO("trial " << trial << ", block_size " << block_size);
      CHECK(dynattn::internal::CheckCoverage(step, b) == "");
      CHECK(a.num_states == b.num_states);
      CHECK(a.num_shared_blocks == b.num_shared_blocks);
      CHECK(a.num_unique_blocks == b.num_unique_blocks);
      CHECK(a.part_begin == b.part_begin);
      REQUIRE(a.segment_blocks.size() == b.segment_blocks.size());
      for (size_t k = 0; k < a.segment_blocks.size(); ++k) {
        CHECK(a.segment_blocks[k] * kSpread + 7 == b.segment_blocks[k]);
      }
      REQUIRE(a.request_items.size() == b.request_items.size());
      for (size_t k = 0; k < a.request_items.size(); ++k) {
        const auto& x = a.request_items[k];
        const auto& y = b.request_items[k];
        CHECK(std::tie(x.request, x.kv_head, x.row_begin, x.key_begin, x.key_end, x.state_index) ==
              std::tie(y.request, y.kv_head, y.row_begin, y.key_begin, y.key_end, y.state_index));
      }
      REQUIRE(a.shared_items.size() == b.shared_items.size());
      for (size_t k = 0; k < a.shared_items.size(); ++k) {
        const auto& x = a.shared_items[k];
        const auto& y = b.shared_items[k];
        CHECK(std::tie(x.num_readers, x.kv_head, x.key_begin, x.key_end, x.state_index) ==
              std::tie(y.num_readers, y.kv_head, y.key_begin, y.key_end, y.state_index));
      }
      REQUIRE(a.parts.size() == b.parts.size());
      for (size_t k = 0; k < a.parts.size(); ++k) {
        CHECK(a.parts[k].first == b.parts[k].first);
        CHECK(a.parts[k].head_stride == b.parts[k].head_stride);
      }
    }
  }

  TEST_CASE("a plan runs every layer of its step with the one-shot call's bits") {
    for (int i = 0; i < 12; ++i) {
      for (const Case& c : CasesOfEveryOp(BaseSeed() + 100 * static_cast<uint64_t>(i))) {
        INFO(c.op << ": " << c.description);
        dynattn::ContextOptions options;
        options.num_threads = 1 + i % 3;
        Context context(options);
        Layer first(c);
        Plan plan;
        REQUIRE_MESSAGE(PlanLayer(c, &first, &plan).ok(), PlanLayer(c, &first, &plan).message());
        const Case next = NextLayer(c);
        Layer second(next);
        // The second layer first: the plan holds no pointer into the first layer's tensors.
        REQUIRE(RunLayer(c, &second, plan, &context).ok());
        CheckSameAsOneShot(next, &second);
        REQUIRE(RunLayer(c, &first, plan, &context).ok());
        CheckSameAsOneShot(c, &first);
      }
    }
  }

  // The fast tier has kernels for int8 and int4 caches in groups of 32, 64, ..., and for fp16
  // and bf16 caches where the CPU has bf16 dot products (the fast suite checks their answers): a
  // call over any other cache asking for it runs the exact tier, its plan says so, and its
  // outputs are the exact call's bits.
  TEST_CASE("precision=fast: the plan names the tier that runs; the exact tier's bits elsewhere") {
    int exact_only = 0;
    for (int i = 0; i < 4; ++i) {
      for (const Case& exact : CasesOfEveryOp(BaseSeed() + 700 + 10 * static_cast<uint64_t>(i))) {
        if (exact.op == "key_value_cache") continue;
        Case fast = exact;
        fast.attrs.precision = "fast";
        INFO(fast.op << ": " << fast.description);
        const int group = exact.attrs.quant_group;
        const auto cache = exact.inputs.find("cache");
        const bool halves = exact.attrs.quant_bit == 0 && cache != exact.inputs.end() &&
                            (cache->second.dt == Dt::kF16 || cache->second.dt == Dt::kBF16);
        const bool covered =
            exact.op != "multi_head_attention" &&
            (exact.attrs.quant_bit != 0 ? group % 32 == 0 && (group & (group - 1)) == 0
                                        : halves && Bf16DotsRun());
        Layer exact_layer(exact), layer(fast);
        Plan exact_plan, plan;
        REQUIRE(PlanLayer(exact, &exact_layer, &exact_plan).ok());
        REQUIRE(PlanLayer(fast, &layer, &plan).ok());
        CHECK(exact_plan.precision() == dynattn::Precision::kExact);
        // A unified step with shared prefixes (path "s") runs the exact tier over int8 and int4
        // caches (their fast kernel is the decode's); fp16 and bf16 ones share bf16 tiles.
        const bool shared = plan.unified_summary() != nullptr &&
                            plan.unified_summary()->phase.find('s') != std::string::npos;
        const bool fast_runs = covered && (!shared || halves);
        CHECK(plan.precision() ==
              (fast_runs ? dynattn::Precision::kFast : dynattn::Precision::kExact));
        CHECK(std::string(plan.backend()) == exact_plan.backend());
        if (covered) continue;
        ++exact_only;
        Context context;
        REQUIRE(RunLayer(fast, &layer, plan, &context).ok());
        CheckSameAsOneShot(exact, &layer);
        const LibResult a = RunLibrary(exact), b = RunLibrary(fast);
        REQUIRE(a.status.ok());
        REQUIRE(b.status.ok());
        std::string why;
        CHECK_MESSAGE(SameBytes(a.attn_output, b.attn_output, &why), why);
        CHECK_MESSAGE(SameBytes(a.lse, b.lse, &why), why);
      }
    }
    CHECK(exact_only >= 6);
  }

  TEST_CASE("int32 index tensors (as engines pass them) give the bits of int64 ones") {
    for (int i = 0; i < 6; ++i) {
      for (const Case& c : CasesOfEveryOp(BaseSeed() + 500 + 10 * static_cast<uint64_t>(i))) {
        INFO(c.op << ": " << c.description);
        Layer layer(c);
        BoundArgs args(c, &layer);
        std::vector<std::vector<int32_t>> narrow;
        int narrowed = 0;
        for (dynattn::TensorView* t : args.IndexTensors()) {
          if (!t->present() || t->dtype != dynattn::DType::kI64) continue;
          const int64_t* wide = t->As<const int64_t>();
          narrow.emplace_back(wide, wide + t->NumElements());
          *t = dynattn::TensorView::Dense(narrow.back().data(), dynattn::DType::kI32, t->rank,
                                          t->shape);
          ++narrowed;
        }
        CHECK(narrowed >= 3);
        Plan plan;
        const Status planned = args.MakePlan(c, &plan);
        REQUIRE_MESSAGE(planned.ok(), planned.message());
        Context context;
        REQUIRE(args.Run(plan, &context).ok());
        CheckSameAsOneShot(c, &layer);
      }
    }
  }

  TEST_CASE("a plan keeps its own copies of the step's index tensors") {
    const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", BaseSeed() + 7);
    Plan plan;
    {
      Layer planning(c);
      REQUIRE(PlanLayer(c, &planning, &plan).ok());
      for (auto& [name, array] : planning.tensors) {  // the caller reuses its metadata buffers
        if (array.dt == Dt::kI64 && !array.bytes.empty()) {
          std::memset(array.bytes.data(), 0xFF, array.bytes.size());
        }
      }
    }
    Layer layer(c);
    Context context;
    REQUIRE(RunLayer(c, &layer, plan, &context).ok());
    CheckSameAsOneShot(c, &layer);
  }

  TEST_CASE("a Run whose tensors do not match its plan is refused and writes nothing") {
    const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", BaseSeed() + 11);
    Layer layer(c);
    Plan plan;
    REQUIRE(PlanLayer(c, &layer, &plan).ok());
    CHECK(std::string(plan.op()) == "MultiHeadCacheAttention");
    CHECK(std::string(plan.backend()).rfind("cpu/", 0) == 0);
    Context context;
    const Layer untouched = layer;
    auto args = dynattn::MultiHeadCacheAttentionArgsByName(layer.Lookup());

    dynattn::MultiHeadCacheAttentionArgs wrong = args;
    wrong.query.shape[0] += 1;
    Status s = dynattn::RunMultiHeadCacheAttention(plan, wrong, &context);
    CHECK(s.code() == dynattn::StatusCode::kInvalidArgument);
    CHECK(s.message().rfind("query: must match the plan", 0) == 0);

    wrong = args;
    wrong.attn_output.dtype = wrong.attn_output.dtype == dynattn::DType::kF16
                                  ? dynattn::DType::kF32
                                  : dynattn::DType::kF16;
    s = dynattn::RunMultiHeadCacheAttention(plan, wrong, &context);
    CHECK(s.message().rfind("attn_output: must match the plan", 0) == 0);

    wrong = args;
    wrong.cache.shape[0] -= 1;
    s = dynattn::RunMultiHeadCacheAttention(plan, wrong, &context);
    CHECK(s.message().rfind("cache: must match the plan", 0) == 0);

    s = dynattn::RunMultiHeadCacheAttention(plan, args, nullptr);
    CHECK(s.message() == "context: must not be null");
    s = dynattn::RunMultiHeadAttention(plan, dynattn::MultiHeadAttentionArgs{}, &context);
    CHECK(s.message() == "plan: is a plan of MultiHeadCacheAttention, not of MultiHeadAttention");
    s = dynattn::RunMultiHeadCacheAttention(Plan{}, args, &context);
    CHECK(s.message().rfind("plan: is empty", 0) == 0);

    for (const auto& entry : untouched.tensors) {  // doctest's messages capture, so no binding
      const std::string& name = entry.first;
      std::string why;
      CHECK_MESSAGE(SameBytes(layer.tensors.at(name), entry.second, &why), name << ": " << why);
    }
  }

  TEST_CASE("a Run may leave out the log-sum-exp its unified plan was made with") {
    const Case c = dynattn_ref::RandomUnifiedCase(BaseSeed() + 77);
    Layer with_lse(c), without_lse(c);
    Plan plan;
    REQUIRE(PlanLayer(c, &with_lse, &plan).ok());
    Context context;
    REQUIRE(RunLayer(c, &with_lse, plan, &context).ok());
    BoundArgs args(c, &without_lse);
    args.unified.lse = dynattn::TensorView{};
    REQUIRE(args.Run(plan, &context).ok());
    std::string why;
    CHECK_MESSAGE(
        SameBytes(with_lse.tensors.at("attn_output"), without_lse.tensors.at("attn_output"), &why),
        why);
    // The other way round stays refused: a plan made without it has no place for it.
    BoundArgs planned_without(c, &without_lse);
    planned_without.unified.lse = dynattn::TensorView{};
    Plan plan_without;
    REQUIRE(planned_without.MakePlan(c, &plan_without).ok());
    const Status s = BoundArgs(c, &with_lse).Run(plan_without, &context);
    CHECK(s.message().rfind("lse: must match the plan", 0) == 0);
  }

  TEST_CASE("DescribeUnifiedStep is the plan's summary") {
    const Case c = dynattn_ref::RandomUnifiedCase(BaseSeed() + 13);
    Layer layer(c);
    Plan plan;
    REQUIRE(PlanLayer(c, &layer, &plan).ok());
    dynattn::UnifiedStepSummary described;
    REQUIRE(dynattn::DescribeUnifiedStep(
                UnifiedAttrs(c),
                dynattn::UnifiedAttentionArgsByName(layer.Lookup(), &layer.block_cache), &described)
                .ok());
    REQUIRE(plan.unified_summary() != nullptr);
    CHECK(plan.unified_summary()->phase == described.phase);
    CHECK(plan.unified_summary()->num_work_items == described.num_work_items);
    CHECK(plan.unified_summary()->cache_bytes_read == described.cache_bytes_read);
  }

  TEST_CASE("in steady state a Run allocates nothing, with a layer's attributes too") {
    for (const int threads : {1, 2}) {
      for (const Case& c : CasesOfEveryOp(BaseSeed() + 31)) {
        INFO(c.op << " on " << threads << " threads: " << c.description);
        dynattn::ContextOptions options;
        options.num_threads = threads;
        Context context(options);
        Layer layer(c);
        Plan plan;
        REQUIRE(PlanLayer(c, &layer, &plan).ok());
        const BoundArgs args(c, &layer);
        // Every other layer has a window of its own and no sinks (planned at its first Run).
        dynattn::LayerAttrs local = plan.layer_attrs();
        local.window_left = 3;
        local.sinks = {};
        REQUIRE(args.Run(plan, &context).ok());  // the Context grows to the plan
        for (int warm = 0; warm < 3; ++warm) REQUIRE(args.Run(plan, &context, &local).ok());
        g_allocations = 0;
        g_counting = true;
        bool ok = true;
        for (int run = 0; run < 20; ++run)
          ok &= args.Run(plan, &context, run % 2 ? &local : nullptr).ok();
        g_counting = false;
        CHECK(ok);
        CHECK(g_allocations.load() == 0);
      }
    }
  }

  TEST_CASE("the allocation counter sees the library's allocations") {
    // The counter is live: the one-shot call plans (and so allocates) on every call.
    const Case c = dynattn_ref::RandomCase("multi_head_cache_attention", BaseSeed() + 37);
    g_allocations = 0;
    g_counting = true;
    const LibResult r = RunLibrary(c);
    g_counting = false;
    REQUIRE(r.status.ok());
    CHECK(g_allocations.load() > 0);
  }
}

}  // namespace
}  // namespace dynattn_test

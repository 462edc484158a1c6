// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/execute.h"

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "simd/kernels.h"
#include "src/plan.h"

namespace dynattn::internal {
namespace {

/// Calls body(i, scratch) for i in [0, n) on `options.num_threads` workers.
template <typename Body>
void ParallelFor(const RunOptions& options, int64_t n, const Body& body) {
  if (n <= 0) return;
  tbb::enumerable_thread_specific<Scratch> scratch;
  const int threads =
      options.num_threads > 0 ? options.num_threads : tbb::this_task_arena::max_concurrency();
  // TBB lends an arena at most cores - 1 workers unless told otherwise; a caller asking for more
  // threads than cores (tests do, to prove determinism) gets them for the duration of the call.
  std::unique_ptr<tbb::global_control> allow;
  if (threads > tbb::this_task_arena::max_concurrency()) {
    allow = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                  threads);
  }
  tbb::task_arena arena(threads);
  arena.execute([&] {
    // One task per piece: the pieces are coarse (work items, token chunks), and a few of them
    // (a long split, a shared segment for 64 readers) can outweigh many others, so an idle
    // worker must be able to take any single one.
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, n, 1),
        [&](const tbb::blocked_range<int64_t>& r) {
          Scratch& local = scratch.local();
          for (int64_t i = r.begin(); i < r.end(); ++i) body(i, &local);
        },
        tbb::simple_partitioner());
  });
}

}  // namespace

CpuKernels CpuKernelsFor(CacheElem elem) {
  switch (elem) {
    case CacheElem::kF32:
      return CpuKernelsF32();
    case CacheElem::kF16:
      return CpuKernelsF16();
    case CacheElem::kInt8:
      return CpuKernelsInt8();
    case CacheElem::kInt4:
      return CpuKernelsInt4();
  }
  return CpuKernelsF32();
}

void WriteNewTokens(const WriteProblem& problem, const RunOptions& options) {
  const CpuKernels kernels = CpuKernelsFor(problem.kv.cache.elem);
  const int64_t tokens = problem.batch.seqstarts[problem.batch.size];
  constexpr int64_t kChunk = 16;
  ParallelFor(options, (tokens + kChunk - 1) / kChunk, [&](int64_t chunk, Scratch*) {
    kernels.write_tokens(problem, chunk * kChunk, std::min(tokens, (chunk + 1) * kChunk));
  });
}

void GatherContext(const GatherProblem& problem, const RunOptions& options) {
  const CpuKernels kernels = CpuKernelsFor(problem.kv.cache.elem);
  constexpr int64_t kChunk = 64;
  struct Piece {
    int64_t request, begin, end;
  };
  std::vector<Piece> pieces;
  for (int64_t b = 0; b < problem.batch.size; ++b) {
    const int64_t kvlen = problem.batch.KvLen(b);
    for (int64_t p = 0; p < kvlen; p += kChunk)
      pieces.push_back({b, p, std::min(kvlen, p + kChunk)});
  }
  ParallelFor(options, static_cast<int64_t>(pieces.size()), [&](int64_t i, Scratch* scratch) {
    kernels.gather_rows(problem, pieces[i].request, pieces[i].begin, pieces[i].end, scratch);
  });
}

void RunAttention(const AttentionProblem& problem, const AttentionPlan& plan,
                  const RunOptions& options) {
  const CpuKernels kernels = CpuKernelsFor(problem.kv.cache.elem);
  std::vector<float> states(static_cast<size_t>(plan.num_states * StateFloats(problem.padded_dim)));
  ParallelFor(options, static_cast<int64_t>(plan.items.size()), [&](int64_t i, Scratch* scratch) {
    kernels.attend(problem, plan.items[i], states.data(), scratch);
  });
  ParallelFor(options, static_cast<int64_t>(plan.merges.size()), [&](int64_t i, Scratch* scratch) {
    kernels.merge(problem, plan.merges[i], states.data(), scratch);
  });
}

void RunUnified(const AttentionProblem& problem, const UnifiedPlan& plan,
                const RunOptions& options) {
  const CpuKernels kernels = CpuKernelsFor(problem.kv.cache.elem);
  std::vector<float> states(static_cast<size_t>(plan.num_states * StateFloats(problem.padded_dim)));
  const int64_t shared = static_cast<int64_t>(plan.shared_items.size());
  const int64_t items = shared + static_cast<int64_t>(plan.request_items.size());
  // Shared items first: they are the largest (a segment chunk for up to kSharedReaders tokens).
  ParallelFor(options, items, [&](int64_t i, Scratch* scratch) {
    if (i < shared) {
      kernels.attend_shared(problem, plan.shared_items[i], states.data(), scratch);
    } else {
      kernels.attend(problem, plan.request_items[i - shared], states.data(), scratch);
    }
  });
  const int64_t tokens = static_cast<int64_t>(plan.part_begin.size()) - 1;
  ParallelFor(options, tokens, [&](int64_t t, Scratch* scratch) {
    const int64_t begin = plan.part_begin[t], end = plan.part_begin[t + 1];
    if (end == begin) return;  // written directly by its only item
    kernels.merge_parts(problem, t, plan.parts.data() + begin, static_cast<int>(end - begin),
                        states.data(), scratch);
  });
}

}  // namespace dynattn::internal

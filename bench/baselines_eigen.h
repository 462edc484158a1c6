// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Composed fp32 attention on Eigen, the way a C++ user would write it with a linear-algebra
// library: RowMajor maps over the batch's buffers, S = scale * Q K^T as one GEMM, a causal mask
// and a row softmax as array expressions, O = P V as a second GEMM. Threads split the (request,
// KV head) pairs (an OpenMP loop); Eigen itself runs single-threaded inside each.

#ifndef DYNATTN_BENCH_BASELINES_EIGEN_H_
#define DYNATTN_BENCH_BASELINES_EIGEN_H_

#include <memory>

#include "bench/fp32_batch.h"

namespace dynattn::bench {

/// Eigen attention over the requests of one Fp32Batch, with per-thread score scratch kept
/// between calls.
class EigenAttention {
 public:
  /// Prepares `batch` (kept by pointer) to run on `threads` OpenMP threads.
  EigenAttention(Fp32Batch* batch, int threads);
  ~EigenAttention();
  EigenAttention(const EigenAttention&) = delete;
  EigenAttention& operator=(const EigenAttention&) = delete;

  /// Computes batch->out.
  void Run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_BASELINES_EIGEN_H_

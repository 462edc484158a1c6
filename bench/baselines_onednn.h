// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Composed fp32 attention on oneDNN, the way a user of a general DNN library would write it:
// S = Q K^T / sqrt(D) (matmul with output scales), + causal mask for prefill (a separate
// binary-add primitive: fused as a post-op, oneDNN 2.6 falls back to its reference matmul), a
// softmax primitive, and O = P V (matmul). One batched call per request, batched over KV heads.

#ifndef DYNATTN_BENCH_BASELINES_ONEDNN_H_
#define DYNATTN_BENCH_BASELINES_ONEDNN_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/fp32_batch.h"

namespace dynattn::bench {

/// oneDNN attention over the requests of one Fp32Batch. The primitives are created once, for
/// every distinct (seqlen, context) of the batch; Run() only executes them.
class OneDnnAttention {
 public:
  /// Prepares `batch` (kept by pointer; its buffers must stay put) to run on `threads` OpenMP
  /// threads.
  OneDnnAttention(Fp32Batch* batch, int threads);
  ~OneDnnAttention();
  OneDnnAttention(const OneDnnAttention&) = delete;
  OneDnnAttention& operator=(const OneDnnAttention&) = delete;

  /// Computes batch->out.
  void Run();

  /// "matmul brg:avx512_core, softmax jit:avx512_core, ..." for the first request's shape.
  std::string Implementations() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_BASELINES_ONEDNN_H_

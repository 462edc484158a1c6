// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Eigen composed attention (see the header). Eigen's own OpenMP GEMM threading is switched off:
// the parallel loop over (request, KV head) pairs already keeps every thread busy, and measured
// faster than Eigen's internal threading on these shapes.

#define EIGEN_DONT_PARALLELIZE
#include "bench/baselines_eigen.h"

#include <omp.h>

#include <Eigen/Dense>
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

namespace dynattn::bench {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;
/// Rows `stride` floats apart (a latent batch's values: the first Dv floats of each key row).
using StridedMap = Eigen::Map<const RowMatrix, Eigen::Unaligned, Eigen::OuterStride<>>;

/// Hides keys j > context - seqlen + i of row r * seqlen + i (bottom-right causal alignment).
void MaskCausal(const Fp32Request& r, int group, RowMatrix* scores) {
  for (int rep = 0; rep < group; ++rep) {
    for (int64_t i = 0; i < r.seqlen; ++i) {
      const int64_t visible = r.context - r.seqlen + i + 1;
      scores->row(rep * r.seqlen + i)
          .tail(r.context - visible)
          .setConstant(-std::numeric_limits<float>::infinity());
    }
  }
}

/// Row softmax in place.
void Softmax(RowMatrix* scores) {
  const Eigen::VectorXf max = scores->rowwise().maxCoeff();
  scores->array().colwise() -= max.array();
  scores->array() = scores->array().exp();
  const Eigen::VectorXf sum = scores->rowwise().sum();
  scores->array().colwise() /= sum.array();
}

/// Attention of KV head `head` of request `b`, with `scores` as scratch.
void AttendHead(Fp32Batch* batch, size_t b, int head, RowMatrix* scores) {
  const Fp32Request& r = batch->requests[b];
  const int64_t rows = batch->group() * r.seqlen, d = batch->head_dim, dv = batch->value_dim();
  const int64_t v_stride = batch->value_stride();
  const ConstMap q(batch->query[b].data() + head * rows * d, rows, d);
  const ConstMap k(batch->key[b].data() + head * r.context * d, r.context, d);
  const StridedMap v(batch->values(b) + head * r.context * v_stride, r.context, dv,
                     Eigen::OuterStride<>(v_stride));
  Map out(batch->out[b].data() + head * rows * dv, rows, dv);
  scores->resize(rows, r.context);
  scores->noalias() = batch->scale() * q * k.transpose();
  if (r.seqlen > 1) MaskCausal(r, batch->group(), scores);
  Softmax(scores);
  out.noalias() = *scores * v;
}

}  // namespace

struct EigenAttention::Impl {
  Fp32Batch* batch = nullptr;
  int threads = 1;
  std::vector<std::pair<size_t, int>> work;  ///< (request, KV head), largest first.
  std::vector<RowMatrix> scratch;            ///< One score matrix per thread.
};

EigenAttention::EigenAttention(Fp32Batch* batch, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->batch = batch;
  impl_->threads = threads;
  impl_->scratch.resize(threads);
  for (size_t b = 0; b < batch->requests.size(); ++b) {
    for (int head = 0; head < batch->num_kv_heads; ++head) impl_->work.emplace_back(b, head);
  }
  const auto cost = [batch](const std::pair<size_t, int>& w) {
    return batch->requests[w.first].seqlen * batch->requests[w.first].context;
  };
  std::stable_sort(impl_->work.begin(), impl_->work.end(),
                   [&](const auto& a, const auto& b) { return cost(a) > cost(b); });
}

EigenAttention::~EigenAttention() = default;

void EigenAttention::Run() {
  Impl& s = *impl_;
  const int64_t n = static_cast<int64_t>(s.work.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(s.threads)
  for (int64_t w = 0; w < n; ++w) {
    AttendHead(s.batch, s.work[w].first, s.work[w].second, &s.scratch[omp_get_thread_num()]);
  }
}

}  // namespace dynattn::bench

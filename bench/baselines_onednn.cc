// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// oneDNN 2.6 composed attention (see the header). Primitive creation (JIT code generation) is
// done in the constructor so that timed calls measure execution only, as a serving loop that
// reuses its primitives would see.

#include "bench/baselines_onednn.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>

namespace dynattn::bench {
namespace {

using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;

/// The primitives of one (seqlen, context) shape.
struct ShapePrimitives {
  memory::desc query, key_t, value, out, scores, heads_scores, mask;
  dnnl::matmul qk, pv;
  dnnl::binary add_mask;  ///< Only when causal (seqlen > 1).
  dnnl::softmax_forward softmax;
  std::vector<float> mask_values;  ///< [1, seqlen, context]: 0 or -inf.
  std::set<std::string> implementations;
};

/// The bottom-right causal mask: row i hides keys j > context - seqlen + i.
std::vector<float> CausalMask(const Fp32Request& r) {
  std::vector<float> mask(static_cast<size_t>(r.seqlen * r.context), 0.0f);
  for (int64_t i = 0; i < r.seqlen; ++i) {
    for (int64_t j = r.context - r.seqlen + i + 1; j < r.context; ++j) {
      mask[i * r.context + j] = -std::numeric_limits<float>::infinity();
    }
  }
  return mask;
}

void Describe(const char* kind, const dnnl::primitive_desc_base& pd, ShapePrimitives* p) {
  p->implementations.insert(std::string(kind) + " " + pd.impl_info_str());
}

/// The two matmuls: S = scale * Q K^T and O = P V.
void MakeMatmuls(const dnnl::engine& engine, float scale, ShapePrimitives* p) {
  dnnl::primitive_attr scaled;
  scaled.set_output_scales(0, {scale});
  const dnnl::matmul::primitive_desc qk(dnnl::matmul::desc(p->query, p->key_t, p->scores), scaled,
                                        engine);
  const dnnl::matmul::primitive_desc pv(dnnl::matmul::desc(p->scores, p->value, p->out), engine);
  p->qk = dnnl::matmul(qk);
  p->pv = dnnl::matmul(pv);
  Describe("matmul", qk, p);
  Describe("matmul", pv, p);
}

/// The causal mask add (S viewed as [Hq, seqlen, context], mask broadcast over heads) and the
/// row softmax.
void MakeMaskAndSoftmax(const dnnl::engine& engine, const Fp32Request& r, ShapePrimitives* p) {
  if (r.seqlen > 1) {
    const dnnl::binary::primitive_desc add(
        dnnl::binary::desc(dnnl::algorithm::binary_add, p->heads_scores, p->mask, p->heads_scores),
        engine);
    p->add_mask = dnnl::binary(add);
    p->mask_values = CausalMask(r);
    Describe("binary", add, p);
  }
  const dnnl::softmax_forward::primitive_desc softmax(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, p->scores, 2), engine);
  p->softmax = dnnl::softmax_forward(softmax);
  Describe("softmax", softmax, p);
}

ShapePrimitives MakePrimitives(const dnnl::engine& engine, const Fp32Batch& batch,
                               const Fp32Request& r) {
  const int64_t g = batch.num_kv_heads, m = batch.group() * r.seqlen, l = r.context,
                d = batch.head_dim, dv = batch.value_dim(), v_stride = batch.value_stride();
  ShapePrimitives p;
  p.query = memory::desc({g, m, d}, Dt::f32, Tag::abc);
  p.key_t = memory::desc({g, d, l}, Dt::f32, Tag::acb);  // K stored [Hkv, L, D], read as K^T
  // V: [Hkv, L, Dv] rows v_stride floats apart (a latent batch reads them from the keys).
  p.value = memory::desc({g, l, dv}, Dt::f32, memory::dims{l * v_stride, v_stride, 1});
  p.out = memory::desc({g, m, dv}, Dt::f32, Tag::abc);
  p.scores = memory::desc({g, m, l}, Dt::f32, Tag::abc);
  p.heads_scores = memory::desc({g * batch.group(), r.seqlen, l}, Dt::f32, Tag::abc);
  p.mask = memory::desc({1, r.seqlen, l}, Dt::f32, Tag::abc);
  MakeMatmuls(engine, batch.scale(), &p);
  MakeMaskAndSoftmax(engine, r, &p);
  return p;
}

/// One request's memory objects over the batch's buffers and the shared score scratch.
struct RequestMemory {
  ShapePrimitives* primitives = nullptr;
  memory query, key, value, scores, heads_scores, mask, out;
};

}  // namespace

struct OneDnnAttention::Impl {
  Fp32Batch* batch = nullptr;
  int threads = 1;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<std::pair<int64_t, int64_t>, ShapePrimitives> shapes;
  std::vector<float> scores;  ///< The largest request's S, reused by every request.
  std::vector<RequestMemory> requests;

  ShapePrimitives* Primitives(const Fp32Request& r) {
    auto [it, added] = shapes.try_emplace({r.seqlen, r.context});
    if (added) it->second = MakePrimitives(engine, *batch, r);
    return &it->second;
  }

  RequestMemory Bind(size_t b) {
    RequestMemory mem;
    ShapePrimitives* p = mem.primitives = Primitives(batch->requests[b]);
    mem.query = memory(p->query, engine, batch->query[b].data());
    mem.key = memory(p->key_t, engine, batch->key[b].data());
    mem.value = memory(p->value, engine, const_cast<float*>(batch->values(b)));
    mem.scores = memory(p->scores, engine, scores.data());
    mem.heads_scores = memory(p->heads_scores, engine, scores.data());
    mem.mask = memory(p->mask, engine, p->mask_values.empty() ? nullptr : p->mask_values.data());
    mem.out = memory(p->out, engine, batch->out[b].data());
    return mem;
  }

  void Execute(const RequestMemory& m) {
    const ShapePrimitives& p = *m.primitives;
    p.qk.execute(stream,
                 {{DNNL_ARG_SRC, m.query}, {DNNL_ARG_WEIGHTS, m.key}, {DNNL_ARG_DST, m.scores}});
    if (!p.mask_values.empty()) {
      p.add_mask.execute(stream, {{DNNL_ARG_SRC_0, m.heads_scores},
                                  {DNNL_ARG_SRC_1, m.mask},
                                  {DNNL_ARG_DST, m.heads_scores}});
    }
    p.softmax.execute(stream, {{DNNL_ARG_SRC, m.scores}, {DNNL_ARG_DST, m.scores}});
    p.pv.execute(stream,
                 {{DNNL_ARG_SRC, m.scores}, {DNNL_ARG_WEIGHTS, m.value}, {DNNL_ARG_DST, m.out}});
  }
};

OneDnnAttention::OneDnnAttention(Fp32Batch* batch, int threads) : impl_(std::make_unique<Impl>()) {
  impl_->batch = batch;
  impl_->threads = threads;
  omp_set_num_threads(threads);  // oneDNN sizes its work split for the threads it will get
  size_t largest = 0;
  for (const Fp32Request& r : batch->requests) {
    largest = std::max(largest, static_cast<size_t>(batch->num_heads * r.seqlen * r.context));
  }
  impl_->scores.assign(largest, 0.0f);
  for (size_t b = 0; b < batch->requests.size(); ++b) impl_->requests.push_back(impl_->Bind(b));
}

OneDnnAttention::~OneDnnAttention() = default;

void OneDnnAttention::Run() {
  omp_set_num_threads(impl_->threads);
  for (const RequestMemory& m : impl_->requests) impl_->Execute(m);
  impl_->stream.wait();
}

std::string OneDnnAttention::Implementations() const {
  std::set<std::string> all;
  for (const auto& [shape, p] : impl_->shapes)
    all.insert(p.implementations.begin(), p.implementations.end());
  std::string text;
  for (const std::string& s : all) text += (text.empty() ? "" : ", ") + s;
  return text;
}

}  // namespace dynattn::bench

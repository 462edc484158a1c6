// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Bitwise determinism: the same bytes for any thread count, any order of the requests in a batch,
// and across the FMA targets (AVX2, AVX-512). Cases include long contexts, so the split-KV path
// and its merge are covered, and they are also checked against the reference. The sliding
// window, logit soft-cap and sinks with bf16 activations and bf16 / fp8 caches are run through the
// CPU dispatch rows directly (WindowedCase), checked against a float64 loop of their definition.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/codec.h"
#include "core/plan.h"
#include "dynattn/plan.h"
#include "reference/reference.h"
#include "src/context.h"
#include "src/dispatch.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Dt;

const char* const kAttentionOps[] = {"multi_head_attention", "multi_head_cache_attention"};

/// Long contexts (several 1024-key splits) with few query rows, plus ordinary mixed cases.
Case DeterminismCase(const std::string& op, uint64_t seed) {
  dynattn_ref::GenOptions options;
  if (seed % 2 == 0) {
    options.max_batch = 3;
    options.max_seqlen = 20;
    options.max_context = 2600;
  }
  if (seed % 3 == 0) {  // decode shapes: the fused kernel
    options.max_seqlen = 2;
    options.lane_head_dims = true;
  }
  return dynattn_ref::RandomCase(op, seed, options);
}

std::vector<int64_t> Starts(const Case& c, const char* name) {
  const Array& a = c.inputs.at(name);
  return std::vector<int64_t>(a.data<int64_t>(), a.data<int64_t>() + a.numel());
}

int64_t RowBytes(const Array& a) {
  int64_t n = dynattn_ref::DtSize(a.dt);
  for (size_t i = 1; i < a.shape.size(); ++i) n *= a.shape[i];
  return n;
}

/// Copies rows [from, from + count) of `src` to rows starting at `to` of `dst` (dim 0 = rows).
void CopyRows(const Array& src, int64_t from, int64_t count, Array* dst, int64_t to) {
  const int64_t row = RowBytes(src);
  if (count * row == 0) return;
  std::memcpy(dst->bytes.data() + to * row, src.bytes.data() + from * row, count * row);
}

/// The permuted packing of per-request segments given old starts and the order.
std::vector<int64_t> PermutedStarts(const std::vector<int64_t>& starts,
                                    const std::vector<int>& order) {
  std::vector<int64_t> out(1, 0);
  for (int b : order) out.push_back(out.back() + starts[b + 1] - starts[b]);
  return out;
}

/// Moves every per-request segment of rows of `name` (packed by `starts`) to its new place.
void PermuteSegments(Case* c, const char* name, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& new_starts, const std::vector<int>& order) {
  auto it = c->inputs.find(name);
  if (it == c->inputs.end()) return;
  const Array old = it->second;
  for (size_t nb = 0; nb < order.size(); ++nb) {
    const int b = order[nb];
    CopyRows(old, starts[b], starts[b + 1] - starts[b], &it->second, new_starts[nb]);
  }
}

/// Moves the mask block of each request (rows by seqstarts, columns by kvstarts).
void PermuteMask(Case* c, const std::vector<int64_t>& qs, const std::vector<int64_t>& nqs,
                 const std::vector<int64_t>& ks, const std::vector<int64_t>& nks,
                 const std::vector<int>& order) {
  auto it = c->inputs.find("attn_mask");
  if (it == c->inputs.end() || it->second.numel() == 0) return;
  const Array old = it->second;
  const size_t rank = old.shape.size();
  const int64_t heads = rank == 3 ? old.shape[0] : 1;
  const int64_t rows = old.shape[rank - 2], cols = old.shape[rank - 1];
  const int64_t size = dynattn_ref::DtSize(old.dt);
  for (int64_t h = 0; h < heads; ++h) {
    for (size_t nb = 0; nb < order.size(); ++nb) {
      const int b = order[nb];
      for (int64_t i = 0; i < qs[b + 1] - qs[b]; ++i) {
        const int64_t src = ((h * rows + qs[b] + i) * cols + ks[b]) * size;
        const int64_t dst = ((h * rows + nqs[nb] + i) * cols + nks[nb]) * size;
        std::memcpy(it->second.bytes.data() + dst, old.bytes.data() + src,
                    (ks[b + 1] - ks[b]) * size);
      }
    }
  }
}

/// Reorders the requests of `c` (decoding requests stay first, so the semantics are unchanged).
Case PermuteRequests(const Case& c, const std::vector<int>& order) {
  Case p = c;
  const std::vector<int64_t> qs = Starts(c, "seqstarts"), ks = Starts(c, "kvstarts");
  const std::vector<int64_t> nqs = PermutedStarts(qs, order), nks = PermutedStarts(ks, order);
  p.inputs["seqstarts"] = dynattn_ref::MakeI64({int64_t(nqs.size())}, nqs);
  p.inputs["kvstarts"] = dynattn_ref::MakeI64({int64_t(nks.size())}, nks);
  for (const char* name : {"query", "current_key", "current_value"})
    PermuteSegments(&p, name, qs, nqs, order);
  for (const char* name : {"key", "value"}) PermuteSegments(&p, name, ks, nks, order);
  std::vector<int64_t> unit(order.size() + 1);
  std::iota(unit.begin(), unit.end(), 0);
  for (const char* name : {"start_pos", "cachestarts"})
    PermuteSegments(&p, name, unit, unit, order);
  PermuteMask(&p, qs, nqs, ks, nks, order);
  return p;
}

/// A random order of the requests that keeps [0, decoding_batches) first.
std::vector<int> RandomOrder(const Case& c, uint64_t seed) {
  const int size = static_cast<int>(c.inputs.at("seqstarts").numel()) - 1;
  int decoding = 0;
  auto it = c.inputs.find("decoding_batches");
  if (it != c.inputs.end()) decoding = static_cast<int>(*it->second.data<int64_t>());
  std::vector<int> order(size);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.begin() + decoding, rng);
  std::shuffle(order.begin() + decoding, order.end(), rng);
  return order;
}

void CheckSameOutputs(const LibResult& a, const LibResult& b) {
  std::string why;
  CHECK_MESSAGE(SameBytes(a.attn_output, b.attn_output, &why), "attn_output: " << why);
  CHECK_MESSAGE(SameBytes(a.cache, b.cache, &why), "cache: " << why);
  CHECK_MESSAGE(SameBytes(a.scale, b.scale, &why), "scale: " << why);
  CHECK_MESSAGE(SameBytes(a.key, b.key, &why), "key: " << why);
  CHECK_MESSAGE(SameBytes(a.value, b.value, &why), "value: " << why);
}

/// One MultiHeadCacheAttention-shaped call with a sliding window, a logit soft-cap and sinks,
/// bf16 or fp16 activations and a bf16 or fp8 cache (offset slot map), built for the CPU kernels.
struct WindowedCase {
  dynattn::CacheElem elem = dynattn::CacheElem::kBF16;
  dynattn::DType io = dynattn::DType::kBF16;  ///< Query and output: bf16 or fp16 bits.
  int kv_heads = 2, group = 4, dim = 64;
  int64_t window = -1, decoding = 0;
  float cap = 0.0f, scale = 0.125f;
  bool causal = true, with_sinks = true;
  std::vector<int64_t> seqlen, kvlen, seqstarts{0}, kvstarts{0}, cachestarts;
  std::vector<uint8_t> key_cache, value_cache;
  std::vector<uint16_t> query;  ///< (Tq, Hq, D) in `io`.
  std::vector<float> sinks;
  float k_scale = 1.0f, v_scale = 1.0f;

  int heads() const { return kv_heads * group; }
  bool io_f16() const { return io == dynattn::DType::kF16; }
  /// Attention reads values rounded to fp16 (fp8 caches under fp16 activations do not:
  /// internal::ReadsExactValues); keys always follow the activation type.
  bool values_round() const { return io_f16() && !dynattn::internal::ReadsExactValues(elem, io); }
  float FromIo(uint16_t bits) const {
    return io_f16() ? dynattn::internal::F16ToF32(bits) : dynattn::internal::Bf16ToF32(bits);
  }
  uint16_t ToIo(float x) const {
    return io_f16() ? dynattn::internal::F32ToF16(x) : dynattn::internal::F32ToBf16(x);
  }
  int64_t tokens() const { return seqstarts.back(); }
  int elem_bytes() const { return elem == dynattn::CacheElem::kBF16 ? 2 : 1; }
  int64_t row_bytes() const { return int64_t{dim} * elem_bytes(); }
  const uint8_t* Row(const std::vector<uint8_t>& plane, int64_t slot, int h) const {
    return plane.data() + (slot * kv_heads + h) * row_bytes();
  }
};

WindowedCase RandomWindowedCase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  WindowedCase c;
  const dynattn::CacheElem elems[] = {dynattn::CacheElem::kBF16, dynattn::CacheElem::kF8E4M3,
                                      dynattn::CacheElem::kF8E5M2};
  c.elem = elems[seed % 3];
  c.dim = (seed / 3) % 4 == 3 ? 40 : 64;  // 40: the row decoder of the tiled path
  c.io = (seed / 12) % 2 ? dynattn::DType::kF16 : dynattn::DType::kBF16;
  c.group = 1 + static_cast<int>(rng() % 4);
  const int64_t windows[] = {-1, 0, 5, 64, 100, 700, 1500};
  c.window = windows[rng() % std::size(windows)];
  c.cap = rng() % 3 == 0 ? 0.0f : 0.5f + 10.0f * static_cast<float>(rng() % 100) / 100.0f;
  c.scale = rng() % 2 ? 0.125f : 0.6f;
  c.causal = rng() % 4 != 0;
  c.with_sinks = rng() % 4 != 0;
  if (dynattn::internal::IsFp8(c.elem)) {
    c.k_scale = 0.01f + static_cast<float>(rng() % 100) / 400.0f;
    c.v_scale = 0.01f + static_cast<float>(rng() % 100) / 400.0f;
  }
  const int batch = 1 + static_cast<int>(rng() % 4);
  c.decoding = rng() % (batch + 1);
  for (int b = 0; b < batch; ++b) {
    const bool decode = b < c.decoding;
    const int64_t kv = static_cast<int64_t>(rng() % (seed % 2 ? 3000 : 300)) + (decode ? 1 : 0);
    const int64_t q = decode ? 1 : std::min<int64_t>(kv, static_cast<int64_t>(rng() % 70));
    c.seqlen.push_back(q);
    c.kvlen.push_back(kv);
    c.seqstarts.push_back(c.seqstarts.back() + q);
    c.kvstarts.push_back(c.kvstarts.back() + kv);
  }
  // Requests' cache regions in a shuffled order, with gaps.
  int64_t slots = 0;
  std::vector<int> order(batch);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.cachestarts.assign(batch, 0);
  for (int b : order) {
    slots += static_cast<int64_t>(rng() % 5);
    c.cachestarts[b] = slots;
    slots += c.kvlen[b];
  }
  for (auto* plane : {&c.key_cache, &c.value_cache}) {
    plane->assign(static_cast<size_t>(slots * c.kv_heads * c.row_bytes()), 0);
    const float tensor_scale = plane == &c.key_cache ? c.k_scale : c.v_scale;
    std::vector<float> x(c.dim);
    for (int64_t r = 0; r < slots * c.kv_heads; ++r) {
      for (float& v : x) v = normal(rng);
      dynattn::internal::EncodeRow([&](int i) { return x[i]; }, c.elem, c.dim, 1, false, false,
                                   plane->data() + r * c.row_bytes(), nullptr, tensor_scale);
    }
  }
  c.query.resize(static_cast<size_t>(c.tokens() * c.heads() * c.dim));
  for (uint16_t& q : c.query) q = c.ToIo(2.0f * normal(rng));
  for (int h = 0; h < c.heads(); ++h) c.sinks.push_back(normal(rng));
  return c;
}

/// The kernels' view of `c`, writing to `output` (bf16 bits) and `lse`.
dynattn::internal::AttentionProblem ProblemOf(WindowedCase& c, uint16_t* output, float* lse) {
  dynattn::internal::AttentionProblem p;
  p.batch.size = static_cast<int64_t>(c.seqlen.size());
  p.batch.seqstarts = c.seqstarts.data();
  p.batch.kvstarts = c.kvstarts.data();
  p.batch.decoding_batches = c.decoding;
  p.io_type = c.io;
  p.num_heads = c.heads();
  p.num_kv_heads = c.kv_heads;
  p.group_size = c.group;
  p.head_dim = c.dim;
  p.value_dim = c.dim;
  p.padded_dim = p.padded_value_dim = static_cast<int>(dynattn::internal::PadToLanes(c.dim));
  p.score_scale = c.scale;
  p.soft_cap = c.cap;
  p.window_left = c.window;
  p.is_causal = c.causal;
  p.sinks = c.with_sinks ? c.sinks.data() : nullptr;
  p.query = c.query.data();
  p.output = output;
  p.lse = lse;
  dynattn::CacheDesc& cache = p.kv.cache;
  cache.elem = c.elem;
  cache.num_kv_heads = c.kv_heads;
  cache.head_dim = c.dim;
  cache.num_slots = static_cast<int64_t>(c.key_cache.size()) / (c.kv_heads * c.row_bytes());
  for (auto [plane, bytes, tensor_scale] : {std::tuple{&cache.key, &c.key_cache, c.k_scale},
                                            std::tuple{&cache.value, &c.value_cache, c.v_scale}}) {
    plane->data = bytes->data();
    plane->slot_stride = int64_t{c.kv_heads} * c.dim;
    plane->head_stride = c.dim;
    plane->tensor_scale = tensor_scale;
  }
  p.kv.slots.mode = dynattn::internal::SlotMap::Mode::kOffset;
  p.kv.slots.starts = c.cachestarts.data();
  return p;
}

struct WindowedResult {
  std::vector<uint16_t> output;
  std::vector<float> lse;
};

/// Same bits, NaN included (memcmp, which an empty vector's null data must not reach).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Runs `c` through the CPU dispatch row of its cache element on `threads` threads.
WindowedResult RunWindowed(WindowedCase& c, int threads) {
  WindowedResult r;
  r.output.assign(static_cast<size_t>(c.tokens() * c.heads() * c.dim), 0x7FC1);  // poison: NaN
  r.lse.assign(static_cast<size_t>(c.tokens() * c.heads()), NAN);
  const dynattn::internal::AttentionProblem p = ProblemOf(c, r.output.data(), r.lse.data());
  const dynattn::internal::AttentionPlan plan = dynattn::internal::PlanAttention(p);
  const dynattn::internal::BackendKernels* row =
      dynattn::internal::KernelsFor(dynattn::Device::kCpu, c.elem);
  REQUIRE(row != nullptr);
  dynattn::ContextOptions options;
  options.num_threads = threads;
  dynattn::Context context(options);
  REQUIRE(row->run_attention(*row, p, plan, dynattn::internal::StateOf(context)).ok());
  return r;
}

/// float64 attention of `c` with its window, soft-cap, scale and sinks as docs/numerics.md defines
/// them (cached values as attention reads them); the first error beyond bf16 tolerance, or "".
std::string CheckWindowed(const WindowedCase& c, const WindowedResult& got) {
  using dynattn::internal::DecodeElement;
  for (size_t b = 0; b < c.seqlen.size(); ++b) {
    const bool limited =
        c.window >= 0 || (c.causal && c.seqlen[b] > 1 && static_cast<int64_t>(b) >= c.decoding);
    for (int64_t row = 0; row < c.seqlen[b]; ++row) {
      const int64_t i = c.kvlen[b] - c.seqlen[b] + row;
      const int64_t last = limited ? i : c.kvlen[b] - 1;
      const int64_t first = c.window >= 0 ? std::max<int64_t>(0, i - c.window) : 0;
      const int64_t token = c.seqstarts[b] + row;
      for (int h = 0; h < c.heads(); ++h) {
        const int g = h / c.group;
        std::vector<double> q(c.dim), acc(c.dim, 0.0);
        for (int d = 0; d < c.dim; ++d) {
          q[d] = c.FromIo(c.query[(token * c.heads() + h) * c.dim + d]);
        }
        std::vector<double> scores;
        double max = c.with_sinks ? c.sinks[h] : -INFINITY;
        for (int64_t j = first; j <= last; ++j) {
          const uint8_t* key = c.Row(c.key_cache, c.cachestarts[b] + j, g);
          double dot = 0;
          for (int d = 0; d < c.dim; ++d) {
            dot += q[d] * DecodeElement(key, nullptr, d, c.elem, 1, false, c.io, c.k_scale);
          }
          double s0 = c.scale * dot;
          if (c.cap > 0) s0 = c.cap * std::tanh(s0 / c.cap);
          scores.push_back(s0);
          max = std::max(max, s0);
        }
        double sum = c.with_sinks ? std::exp(c.sinks[h] - max) : 0.0;
        for (int64_t j = first; j <= last; ++j) {
          const double e = std::exp(scores[j - first] - max);
          sum += e;
          const uint8_t* value = c.Row(c.value_cache, c.cachestarts[b] + j, g);
          for (int d = 0; d < c.dim; ++d) {
            acc[d] +=
                e * DecodeElement(value, nullptr, d, c.elem, 1, false,
                                  c.values_round() ? dynattn::DType::kF16 : dynattn::DType::kF32,
                                  c.v_scale);
          }
        }
        const double lse = sum > 0 ? max + std::log(sum) : -INFINITY;
        const std::string where = "request " + std::to_string(b) + " row " + std::to_string(row) +
                                  " head " + std::to_string(h);
        const float got_lse = got.lse[token * c.heads() + h];
        if (!(std::fabs(got_lse - lse) <= 1e-4 * (1 + std::fabs(lse))) &&
            !(std::isinf(lse) && got_lse == lse)) {
          return where + ": lse " + std::to_string(got_lse) + ", want " + std::to_string(lse);
        }
        for (int d = 0; d < c.dim; ++d) {
          const double want = sum > 0 ? acc[d] / sum : 0.0;
          const double out = c.FromIo(got.output[(token * c.heads() + h) * c.dim + d]);
          if (!(std::fabs(out - want) <= 8e-3 * std::fabs(want) + 1e-4)) {
            return where + " element " + std::to_string(d) + ": " + std::to_string(out) +
                   ", want " + std::to_string(want);
          }
        }
      }
    }
  }
  return "";
}

/// `c` with its requests in `order` (decodes stay first); the cache itself is not moved.
WindowedCase PermuteWindowed(const WindowedCase& c, const std::vector<int>& order) {
  WindowedCase p = c;
  p.seqlen.clear();
  p.kvlen.clear();
  p.cachestarts.clear();
  p.seqstarts.assign(1, 0);
  p.kvstarts.assign(1, 0);
  p.query.clear();
  const size_t row = static_cast<size_t>(c.heads() * c.dim);
  for (int b : order) {
    p.seqlen.push_back(c.seqlen[b]);
    p.kvlen.push_back(c.kvlen[b]);
    p.cachestarts.push_back(c.cachestarts[b]);
    p.seqstarts.push_back(p.seqstarts.back() + c.seqlen[b]);
    p.kvstarts.push_back(p.kvstarts.back() + c.kvlen[b]);
    p.query.insert(p.query.end(), c.query.begin() + c.seqstarts[b] * row,
                   c.query.begin() + c.seqstarts[b + 1] * row);
  }
  return p;
}

TEST_SUITE("determinism") {
  TEST_CASE(
      "window, soft-cap and sinks with bf16 and fp8: correct, same bytes for any threads "
      "and request order") {
    for (int i = 0; i < 24; ++i) {
      const uint64_t seed = BaseSeed() + 600000 + i;
      WindowedCase c = RandomWindowedCase(seed);
      INFO("seed " << seed << ", elem " << static_cast<int>(c.elem) << ", io "
                   << dynattn::DTypeName(c.io) << ", window " << c.window << ", cap " << c.cap
                   << ", dim " << c.dim << ", group " << c.group);
      const WindowedResult base = RunWindowed(c, 1);
      const std::string error = CheckWindowed(c, base);
      CHECK_MESSAGE(error.empty(), error);
      for (int threads : {2, 3, 8}) {
        const WindowedResult other = RunWindowed(c, threads);
        CHECK_MESSAGE(other.output == base.output, "threads " << threads);
        CHECK_MESSAGE(SameBits(other.lse, base.lse), "threads " << threads);
      }
      // Reorder the requests (decodes first, as the semantics need) and undo it on the outputs.
      std::vector<int> order(c.seqlen.size());
      std::iota(order.begin(), order.end(), 0);
      std::mt19937_64 rng(seed);
      std::shuffle(order.begin(), order.begin() + c.decoding, rng);
      std::shuffle(order.begin() + c.decoding, order.end(), rng);
      WindowedCase permuted = PermuteWindowed(c, order);
      const WindowedResult moved = RunWindowed(permuted, 2);
      const size_t row = static_cast<size_t>(c.heads() * c.dim);
      for (size_t nb = 0; nb < order.size(); ++nb) {
        const int b = order[nb];
        const bool same = std::equal(base.output.begin() + c.seqstarts[b] * row,
                                     base.output.begin() + c.seqstarts[b + 1] * row,
                                     moved.output.begin() + permuted.seqstarts[nb] * row);
        CHECK_MESSAGE(same, "request " << b << " moved to " << nb);
      }
    }
  }

  TEST_CASE("same bytes for 1, 2, 3 and 8 threads, and correct on long contexts") {
    for (const char* op : kAttentionOps) {
      for (int i = 0; i < 12; ++i) {
        const uint64_t seed = BaseSeed() + 300000 + i;
        const Case c = DeterminismCase(op, seed);
        INFO("seed " << seed << ": " << c.description);
        dynattn::RunOptions one;
        one.num_threads = 1;
        const LibResult base = RunLibrary(c, one);
        REQUIRE_MESSAGE(base.status.ok(), base.status.message());
        const dynattn_ref::AttnResult ref =
            std::string(op) == "multi_head_attention"
                ? dynattn_ref::MultiHeadAttention(c.attrs, c.inputs)
                : dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
        const std::string error = dynattn_ref::CheckAttention(ref, base.attn_output);
        CHECK_MESSAGE(error.empty(), error);
        for (int threads : {2, 3, 8}) {
          dynattn::RunOptions options;
          options.num_threads = threads;
          INFO("threads " << threads);
          CheckSameOutputs(base, RunLibrary(c, options));
        }
      }
    }
  }

  TEST_CASE("a request's output does not depend on the order of the batch") {
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "key_value_cache"}) {
      for (int i = 0; i < 16; ++i) {
        const uint64_t seed = BaseSeed() + 400000 + i;
        const Case c = DeterminismCase(op, seed);
        const std::vector<int> order = RandomOrder(c, seed);
        const Case permuted = PermuteRequests(c, order);
        INFO("seed " << seed << ": " << c.description);
        const LibResult a = RunLibrary(c), b = RunLibrary(permuted);
        REQUIRE(a.status.ok());
        REQUIRE(b.status.ok());
        std::string why;
        CHECK_MESSAGE(SameBytes(a.cache, b.cache, &why), "cache: " << why);
        // Undo the permutation on b's outputs and compare whole tensors.
        const bool kvc = std::string(op) == "key_value_cache";
        const char* starts_name = kvc ? "kvstarts" : "seqstarts";
        const std::vector<int64_t> old_starts = Starts(c, starts_name);
        const std::vector<int64_t> new_starts = Starts(permuted, starts_name);
        for (const Array LibResult::*field :
             {&LibResult::attn_output, &LibResult::key, &LibResult::value}) {
          if ((a.*field).bytes.empty()) continue;
          Array restored = a.*field;
          for (size_t nb = 0; nb < order.size(); ++nb) {
            const int ob = order[nb];
            CopyRows(b.*field, new_starts[nb], old_starts[ob + 1] - old_starts[ob], &restored,
                     old_starts[ob]);
          }
          CHECK_MESSAGE(SameBytes(a.*field, restored, &why), why);
        }
      }
    }
  }
}

// A suite (and meson test) of its own, so that a machine without the pair counts it as skipped.
TEST_SUITE("determinism_targets") {
  TEST_CASE("window, soft-cap and sinks with bf16 and fp8: AVX2 and AVX-512 give the same bits") {
    if (!HaveAvx2AndAvx512()) {
      SkipTest("AVX2 or AVX-512 not available on this machine; cross-target check not run");
      return;
    }
    for (int i = 0; i < 12; ++i) {
      const uint64_t seed = BaseSeed() + 700000 + i;
      WindowedCase c = RandomWindowedCase(seed);
      INFO("seed " << seed << ", elem " << static_cast<int>(c.elem) << ", window " << c.window);
      std::map<std::string, WindowedResult> by_target;
      ForEachTarget([&](const std::string& target) { by_target[target] = RunWindowed(c, 2); });
      CHECK(by_target["AVX2"].output == by_target["AVX3"].output);
      CHECK(SameBits(by_target["AVX2"].lse, by_target["AVX3"].lse));
    }
  }

  TEST_CASE("AVX2 and AVX-512 give the same bits") {
    if (!HaveAvx2AndAvx512()) {
      SkipTest("AVX2 or AVX-512 not available on this machine; cross-target check not run");
      return;
    }
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "key_value_cache"}) {
      for (int i = 0; i < 12; ++i) {
        const uint64_t seed = BaseSeed() + 500000 + i;
        const Case c = DeterminismCase(op, seed);
        INFO("seed " << seed << ": " << c.description);
        std::map<std::string, LibResult> by_target;
        ForEachTarget([&](const std::string& target) { by_target[target] = RunLibrary(c); });
        CheckSameOutputs(by_target["AVX2"], by_target["AVX3"]);
      }
    }
  }
}

}  // namespace
}  // namespace dynattn_test

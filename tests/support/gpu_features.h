// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the gpu suite's feature files share: the serving formats and score features on the CUDA
// rows, driven directly (a problem and its plan, as src/ builds them) and through the public ops.
// Random draws from fresh seeds, host activations and caches encoded by core/codec.h's host codec
// with their device copies, random attention configurations (bf16 and fp8 caches, bf16
// activations, sliding windows, logit soft-capping, a settable softmax scale, ALiBi and attention
// sinks), and the float64 attention an output row is checked against.

#ifndef DYNATTN_TESTS_SUPPORT_GPU_FEATURES_H_
#define DYNATTN_TESTS_SUPPORT_GPU_FEATURES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cache_rows.h"
#include "core/codec.h"
#include "core/problem.h"
#include "dynattn/dynattn.h"
#include "src/dispatch.h"
#include "tests/support/gpu_device.h"

// Test-only helpers: the alias and the using-declarations below serve the gpu suite's files,
// and nothing outside the tests includes this header.
namespace dynattn_test {
namespace feature {

namespace di = dynattn::internal;
using dynattn::CacheElem;
using dynattn::DType;

/// A fresh seed per use, derived from the run's base seed (DYNATTN_TEST_SEED replays it). The
/// uses count across the binary's files, which doctest runs in file order.
uint64_t FreshSeed();

inline constexpr CacheElem kElems[] = {CacheElem::kF32,   CacheElem::kF16,  CacheElem::kBF16,
                                       CacheElem::kInt8,  CacheElem::kInt4, CacheElem::kF8E4M3,
                                       CacheElem::kF8E5M2};
inline constexpr DType kIoTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

/// Whether `elem` is int8 or int4 (a cache with group scales).
bool Quantized(CacheElem elem);

template <typename T>
const T& Pick(std::mt19937_64& rng, const std::vector<T>& options) {
  return options[rng() % options.size()];
}

/// A uniform draw from [lo, hi].
int Uniform(std::mt19937_64& rng, int lo, int hi);

/// A uniform draw from [lo, hi).
float UniformF(std::mt19937_64& rng, float lo, float hi);

/// Host activations of type `io`: the stored bytes and the exact values they hold.
struct Activations {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

template <typename Draw>
Activations MakeActivations(DType io, size_t count, Draw draw) {
  Activations a;
  a.bytes.assign(count * (io == DType::kF32 ? 4 : 2), 0);
  a.values.resize(count);
  for (size_t i = 0; i < count; ++i) {
    di::StoreActivationOf(draw(), a.bytes.data(), static_cast<int64_t>(i), io);
    a.values[i] = di::LoadActivationOf(a.bytes.data(), static_cast<int64_t>(i), io);
  }
  return a;
}

/// A device copy of host bytes, freed with it.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<uint8_t>& host) : size_(host.size()) {
    if (size_ == 0) return;
    REQUIRE_CUDA(cudaMalloc(&ptr_, size_));
    REQUIRE_CUDA(cudaMemcpy(ptr_, host.data(), size_, cudaMemcpyHostToDevice));
  }
  ~DeviceBytes() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  void* get() const { return ptr_; }
  std::vector<uint8_t> Fetch() const {
    std::vector<uint8_t> host(size_);
    if (size_ != 0) REQUIRE_CUDA(cudaMemcpy(host.data(), ptr_, size_, cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t size_;
};

/// `count` poisoned output bytes (0xFF: NaN in every float type) on the device.
std::vector<uint8_t> Poison(size_t count);

/// A cache of `slots` slots in layout (slot, head, d), its bytes on the host; `desc` points at
/// them (Place points a copy at device buffers).
struct HostCache {
  dynattn::CacheDesc desc;
  std::vector<uint8_t> planes[2], scales[2];

  HostCache(CacheElem elem, int heads, int dim, int group, bool scale_f16, int64_t slots,
            float k_scale, float v_scale, std::mt19937_64& rng) {
    desc.elem = elem;
    desc.scale_type = scale_f16 ? dynattn::ScaleType::kF16 : dynattn::ScaleType::kF32;
    desc.quant_group = group;
    desc.num_kv_heads = heads;
    desc.head_dim = dim;
    desc.num_slots = slots;
    const int64_t groups = Quantized(elem) ? dim / group : 0;
    const size_t plane_bytes = static_cast<size_t>(di::ByteOffset(elem, slots * heads * dim));
    const size_t scale_bytes = static_cast<size_t>(slots * heads * groups) * (scale_f16 ? 2 : 4);
    dynattn::CachePlane* out[2] = {&desc.key, &desc.value};
    for (int plane = 0; plane < 2; ++plane) {
      planes[plane].resize(plane_bytes);
      for (uint8_t& byte : planes[plane]) byte = static_cast<uint8_t>(rng());
      scales[plane].resize(scale_bytes);
      for (uint8_t& byte : scales[plane]) byte = static_cast<uint8_t>(rng());
      out[plane]->slot_stride = static_cast<int64_t>(heads) * dim;
      out[plane]->head_stride = dim;
      out[plane]->scale_slot_stride = heads * groups;
      out[plane]->scale_head_stride = groups;
      out[plane]->tensor_scale = plane == 0 ? k_scale : v_scale;
    }
    PointAt(planes, scales);
  }
  HostCache(const HostCache& other) : desc(other.desc) {
    for (int plane = 0; plane < 2; ++plane) {
      planes[plane] = other.planes[plane];
      scales[plane] = other.scales[plane];
    }
    PointAt(planes, scales);
  }
  HostCache& operator=(const HostCache&) = delete;

  bool scale_f16() const { return desc.scale_type == dynattn::ScaleType::kF16; }
  const dynattn::CachePlane& Plane(int plane) const { return plane == 0 ? desc.key : desc.value; }

  /// Encodes row (slot, head) of `plane` from `load(d)` as the kernels do.
  template <typename Load>
  void Encode(int plane, int64_t slot, int head, const Load& load, DType io) {
    const dynattn::CachePlane& p = Plane(plane);
    di::EncodeRow(load, desc.elem, desc.head_dim, desc.quant_group, scale_f16(), io == DType::kF16,
                  di::RowAddress(p, desc.elem, slot, head),
                  di::ScaleAddress(p, scale_f16(), slot, head), p.tensor_scale);
  }
  /// Element d of row (slot, head) of `plane` as activations of type `io` see it.
  float Decode(int plane, int64_t slot, int head, int d, DType io) const {
    const dynattn::CachePlane& p = Plane(plane);
    return di::DecodeElement(di::RowAddress(p, desc.elem, slot, head),
                             di::ScaleAddress(p, scale_f16(), slot, head), d, desc.elem,
                             desc.quant_group, scale_f16(), io, p.tensor_scale);
  }
  /// The same element as the fp32 product code x scale with no rounding: how CPU attention reads
  /// the values of a cache for which internal::ReadsExactValues holds.
  float DecodeUnrounded(int plane, int64_t slot, int head, int d) const {
    const dynattn::CachePlane& p = Plane(plane);
    const void* row = di::RowAddress(p, desc.elem, slot, head);
    if (!Quantized(desc.elem)) {  // fp8: fp8(b) x tensor_scale, kept in fp32
      return di::DecodeElement(row, nullptr, d, desc.elem, 1, false, DType::kF32, p.tensor_scale);
    }
    const float scale = di::LoadScale(di::ScaleAddress(p, scale_f16(), slot, head),
                                      d / desc.quant_group, scale_f16());
    const int code = desc.elem == CacheElem::kInt8
                         ? static_cast<const int8_t*>(row)[d]
                         : di::Int4At(static_cast<const uint8_t*>(row), d);
    return static_cast<float>(code) * scale;
  }

  /// The descriptor pointed at `planes` and `scales` (host or device).
  template <typename PlaneAt, typename ScaleAt>
  dynattn::CacheDesc PointedAt(const PlaneAt& planes_at, const ScaleAt& scales_at) const {
    dynattn::CacheDesc d = desc;
    d.key.data = planes_at(0);
    d.value.data = planes_at(1);
    d.key.scale = Quantized(desc.elem) ? scales_at(0) : nullptr;
    d.value.scale = Quantized(desc.elem) ? scales_at(1) : nullptr;
    return d;
  }

 private:
  void PointAt(std::vector<uint8_t>* p, std::vector<uint8_t>* s) {
    desc = PointedAt([p](int i) -> void* { return p[i].data(); },
                     [s](int i) -> void* { return s[i].data(); });
  }
};

/// A HostCache's copy in device memory.
struct DeviceCache {
  explicit DeviceCache(const HostCache& host)
      : planes{DeviceBytes(host.planes[0]), DeviceBytes(host.planes[1])},
        scales{DeviceBytes(host.scales[0]), DeviceBytes(host.scales[1])} {
    desc = host.PointedAt([this](int i) { return planes[i].get(); },
                          [this](int i) { return scales[i].get(); });
    desc.device = dynattn::Device::kCuda;
  }
  DeviceBytes planes[2], scales[2];
  dynattn::CacheDesc desc;
};

/// The CUDA row of cache element `elem`; fails the test when the module has none.
const di::BackendKernels& CudaRow(CacheElem elem);

/// One random attention configuration: formats, heads and the score features.
struct Features {
  CacheElem elem = CacheElem::kF32;
  DType io = DType::kF32;
  int kv_heads = 1, group_size = 1, dim = 1, quant_group = 8;
  bool scale_f16 = false;
  int64_t window = -1;
  float cap = 0.0f;
  float scale = 1.0f;  ///< Resolved softmax scale.
  bool alibi = false;
  std::vector<float> sinks;  ///< Empty: none.
  float k_scale = 1.0f, v_scale = 1.0f;

  int heads() const { return kv_heads * group_size; }
};

/// Random formats, heads and score features, with a window of at most `longest_context` keys.
Features RandomFeatures(std::mt19937_64& rng, int64_t longest_context);

/// `f` in words, for messages.
std::string Describe(const Features& f);

/// The float64 attention of one query vector over keys [first, last] (keys outside it, and keys
/// whose bias is -inf, are not seen): out = sum e^s v / (e^sink + sum e^s), LSE with the sink.
struct Expected {
  std::vector<double> out;
  double lse = -INFINITY;
};

template <typename KeyOf, typename ValueOf, typename BiasOf>
Expected Attend(const Features& f, const float* q, int64_t first, int64_t last, const KeyOf& key,
                const ValueOf& value, const BiasOf& bias, const float* sink) {
  std::vector<double> scores;
  std::vector<int64_t> keys;
  for (int64_t j = first; j <= last; ++j) {
    double dot = 0.0;
    const float* k = key(j);
    for (int d = 0; d < f.dim; ++d) dot += static_cast<double>(q[d]) * k[d];
    double s = static_cast<double>(f.scale) * dot;
    if (f.cap > 0.0f) s = f.cap * std::tanh(s / f.cap);
    s += bias(j);
    if (s == -INFINITY) continue;
    scores.push_back(s);
    keys.push_back(j);
  }
  double max = sink != nullptr ? *sink : -INFINITY;
  for (double s : scores) max = std::max(max, s);
  Expected e;
  e.out.assign(f.dim, 0.0);
  if (max == -INFINITY) return e;
  double sum = sink != nullptr ? std::exp(*sink - max) : 0.0;
  for (size_t i = 0; i < scores.size(); ++i) {
    const double w = std::exp(scores[i] - max);
    sum += w;
    const float* v = value(keys[i]);
    for (int d = 0; d < f.dim; ++d) e.out[d] += w * v[d];
  }
  for (double& x : e.out) x /= sum;
  e.lse = max + std::log(sum);
  return e;
}

/// Checks output row `index` (dim elements of type io) and its LSE against `e`. The bound: one
/// rounding to the output type (its unit roundoff times |expected|) plus fp32 accumulation.
void CheckRow(const Features& f, const std::vector<uint8_t>& out, const std::vector<uint8_t>& lse,
              int64_t index, const Expected& e, double vmax, const std::string& where);

/// Checks output row `index` of one query vector against the float64 attention over keys
/// [first, last], the bound scaled by the largest |value| of those keys.
template <typename KeyOf, typename ValueOf, typename BiasOf>
void CheckAttendedRow(const Features& f, const float* q, int64_t first, int64_t last,
                      const KeyOf& key, const ValueOf& value, const BiasOf& bias, const float* sink,
                      const std::vector<uint8_t>& out, const std::vector<uint8_t>& lse,
                      int64_t index, const std::string& where) {
  const Expected e = Attend(f, q, first, last, key, value, bias, sink);
  double vmax = 0.0;
  for (int64_t j = first; j <= last; ++j) {
    for (int d = 0; d < f.dim; ++d) vmax = std::max(vmax, std::fabs(double{value(j)[d]}));
  }
  CheckRow(f, out, lse, index, e, vmax, where);
}

/// The host decode of every slot of a cache: keys[(slot * heads + head) * dim + d].
struct DecodedCache {
  std::vector<float> planes[2];
  /// With `cpu_values`, values are read as CPU attention reads them (unrounded products where
  /// internal::ReadsExactValues holds); otherwise as the cache rule (and the CUDA rows) round them.
  DecodedCache(const HostCache& cache, DType io, bool cpu_values = false) {
    const int heads = cache.desc.num_kv_heads, dim = cache.desc.head_dim;
    const bool exact = cpu_values && di::ReadsExactValues(cache.desc.elem, io);
    for (int plane = 0; plane < 2; ++plane) {
      planes[plane].resize(static_cast<size_t>(cache.desc.num_slots) * heads * dim);
      for (int64_t slot = 0; slot < cache.desc.num_slots; ++slot) {
        for (int h = 0; h < heads; ++h) {
          for (int d = 0; d < dim; ++d) {
            planes[plane][(slot * heads + h) * dim + d] =
                plane == 1 && exact ? cache.DecodeUnrounded(plane, slot, h, d)
                                    : cache.Decode(plane, slot, h, d, io);
          }
        }
      }
    }
  }
  const float* Row(int plane, int64_t slot, int head, int heads, int dim) const {
    return planes[plane].data() + (slot * heads + head) * dim;
  }
};

/// Fills every slot of `cache` with the encoding of random values in [-1, 1] (finite, so every
/// format holds them; fp8 after its tensor scale).
void FillCache(HostCache* cache, DType io, std::mt19937_64& rng);

/// The problem fields every attention call shares.
void FillFeatures(const Features& f, di::AttentionProblem* p, const std::vector<float>& slopes);

/// Runs `check` on `trials` random problems drawn from a fresh seed, which a failure names.
void RunTrials(int trials, void (*check)(std::mt19937_64&));

}  // namespace feature
}  // namespace dynattn_test

#endif  // DYNATTN_TESTS_SUPPORT_GPU_FEATURES_H_

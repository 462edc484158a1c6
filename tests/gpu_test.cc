// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The GPU suite: the golden matrix (reference/golden_matrix.h, the cases `dynattn golden`
// writes, with this run's seeds) run on the CPU and then on the CUDA device through the same
// public API, with every data tensor in device memory and the index tensors on the host, as a
// serving engine calls it. Caches, scales and gathered keys/values must match the CPU byte for
// byte; attention outputs must be within the spec's tolerances of the float64 reference. Then
// the formats and score features of bf16/fp8 caches, windows, soft-cap, softmax scale and sinks on
// the CUDA rows (direct problems and the public ops), against the host codec's bytes and a float64
// attention written here.
//
// The same file runs on a real device (gpu_suite=device) and on the CUDA emulator
// (testing/cuda_emulator, gpu_suite=emulator), which executes the unmodified kernels on the CPU in
// the schedule CUDA_EMU_SCHEDULE names and fails a launch that breaks a CUDA rule. Without a device
// the binary says why on one line and exits 77, which meson counts as skipped; every case checks
// that kernels ran, so it never passes silently.

#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/alibi.h"
#include "core/cache_rows.h"
#include "core/codec.h"
#include "core/plan.h"
#include "core/plan_unified.h"
#include "core/problem.h"
#include "reference/golden_matrix.h"
#include "reference/reference.h"
#include "src/context.h"
#include "src/dispatch.h"
#include "tests/support/non_finite.h"
#include "tests/support/plan_layers.h"
#include "tests/support/row_padding.h"
#include "tests/support/run_case.h"

namespace {

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_ref::Dt;
using dynattn_test::LibResult;

std::string CudaError(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
}

#define REQUIRE_CUDA(call)                                                                   \
  do {                                                                                       \
    const cudaError_t cuda_status = (call);                                                  \
    REQUIRE_MESSAGE(cuda_status == cudaSuccess, #call, " failed: ", CudaError(cuda_status)); \
  } while (false)

// The small fp32 inputs the library reads on the host, as an engine passes them.
bool ReadOnHost(const std::string& name) {
  return name == "sinks" || name == "k_scale" || name == "v_scale";
}

// Data tensors (every dtype but int64) in device memory; index tensors (int64) and the inputs
// read on the host (ReadOnHost) stay on the host. Outputs arrive poisoned (0xFF bytes, NaN in
// floats) from RunLibrary and are copied as such, so an element the device never writes shows up
// after Fetch.

class DevicePlacement : public dynattn_test::Placement {
 public:
  DevicePlacement() = default;
  DevicePlacement(const DevicePlacement&) = delete;
  DevicePlacement& operator=(const DevicePlacement&) = delete;
  ~DevicePlacement() override {
    for (const Buffer& buffer : buffers_) cudaFree(buffer.device);
  }

  dynattn::TensorView Place(const std::string& name, Array& array) override {
    dynattn::TensorView view = dynattn_test::ViewOf(array);
    if (array.dt == Dt::kI64 || ReadOnHost(name)) return view;
    Buffer buffer{&array, nullptr};
    if (!array.bytes.empty()) {
      REQUIRE_CUDA(cudaMalloc(&buffer.device, array.bytes.size()));
      REQUIRE_CUDA(cudaMemcpy(buffer.device, array.bytes.data(), array.bytes.size(),
                              cudaMemcpyHostToDevice));
    }
    buffers_.push_back(buffer);
    view.data = buffer.device;
    view.device = dynattn::Device::kCuda;
    return view;
  }

  void Fetch() override {
    REQUIRE_CUDA(cudaDeviceSynchronize());
    for (const Buffer& buffer : buffers_) {
      if (buffer.device == nullptr) continue;
      REQUIRE_CUDA(cudaMemcpy(buffer.host->bytes.data(), buffer.device, buffer.host->bytes.size(),
                              cudaMemcpyDeviceToHost));
    }
  }

 private:
  struct Buffer {
    Array* host;
    void* device;
  };
  std::vector<Buffer> buffers_;
};

LibResult RunOnDevice(const Case& c) {
  DevicePlacement placement;
  return dynattn_test::RunLibrary(c, {}, &placement);
}

void CheckSameBytes(const char* what, const Array& cpu, const Array& gpu) {
  std::string why;
  CHECK_MESSAGE(dynattn_test::SameBytes(cpu, gpu, &why), what, " differs from the CPU: ", why);
}

// The float64 reference of an attention case (unified attention included).
dynattn_ref::AttnResult Reference(const Case& c) {
  if (c.op == "multi_head_attention") return dynattn_ref::MultiHeadAttention(c.attrs, c.inputs);
  if (c.op == "unified_attention") return dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  return dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
}

void CheckCase(const dynattn_ref::GoldenSpec& spec) {
  const Case c = dynattn_ref::MakeGoldenCase(spec);
  INFO(c.description);
  // One CPU thread: the bits are the same for any count (the determinism suite), and under
  // ThreadSanitizer (gpu-tsan) the only threads are then the emulated kernels'.
  const LibResult cpu = dynattn_test::RunLibrary(c, dynattn::RunOptions{.num_threads = 1});
  REQUIRE_MESSAGE(cpu.status.ok(), "CPU: ", cpu.status.message());
  const LibResult gpu = RunOnDevice(c);
  REQUIRE_MESSAGE(gpu.status.ok(), "CUDA: ", gpu.status.message());
  CheckSameBytes("cache", cpu.cache, gpu.cache);
  CheckSameBytes("scale", cpu.scale, gpu.scale);
  if (c.op == "key_value_cache") {
    CheckSameBytes("key", cpu.key, gpu.key);
    CheckSameBytes("value", cpu.value, gpu.value);
    return;
  }
  const dynattn_ref::AttnResult ref = Reference(c);
  const std::string cpu_error = dynattn_ref::CheckAttention(ref, cpu.attn_output);
  CHECK_MESSAGE(cpu_error.empty(), "CPU attn_output: ", cpu_error);
  const std::string gpu_error = dynattn_ref::CheckAttention(ref, gpu.attn_output);
  CHECK_MESSAGE(gpu_error.empty(), "CUDA attn_output: ", gpu_error);
  if (c.op == "unified_attention") {
    const std::string lse_error = dynattn_ref::CheckLse(ref, gpu.lse);
    CHECK_MESSAGE(lse_error.empty(), "CUDA lse: ", lse_error);
  }
}

// DYNATTN_GPU_REDUCED=1: the reduced matrix that compute-sanitizer runs on a device (its checks
// cost 10-100x a plain run): one golden cell per kernel key below, and fewer random trials.
bool Reduced() {
  const char* reduced = std::getenv("DYNATTN_GPU_REDUCED");
  return reduced != nullptr && std::string(reduced) == "1";
}

// What picks a cell's kernels: its activation and cache element types (one instantiation each)
// and whether its contexts are long enough to split (the merge kernels).
std::string KernelKey(const dynattn_ref::GoldenSpec& spec, const Case& c) {
  std::string key = spec.op;
  for (const char* name : {"query", "current_key", "cache"}) {
    auto it = c.inputs.find(name);
    if (it != c.inputs.end())
      key += std::string(" ") + name + ":" + dynattn_ref::DtName(it->second.dt);
  }
  key += " q" + std::to_string(c.attrs.quant_bit);
  if (spec.name.find("_long_") != std::string::npos) key += " long";
  return key;
}

// Every cell of the matrix whose op is `op`, with this run's seeds (reduced: one per kernel key).
void CheckOp(const std::string& op) {
  int cells = 0;
#ifdef DYNATTN_CUDA_EMULATOR
  const int64_t launches_before = cuda_emu::GetStats().launches;
#endif
  std::set<std::string> keys_run;
  for (const dynattn_ref::GoldenSpec& spec : dynattn_ref::GoldenMatrix(dynattn_test::BaseSeed())) {
    if (spec.op != op) continue;
    if (Reduced() && !keys_run.insert(KernelKey(spec, dynattn_ref::MakeGoldenCase(spec))).second) {
      continue;
    }
    CAPTURE(spec.name);
    CheckCase(spec);
    ++cells;
  }
  CHECK(cells > 0);
#ifdef DYNATTN_CUDA_EMULATOR
  const cuda_emu::Stats stats = cuda_emu::GetStats();
  MESSAGE(op, ": ", cells, " cases, ", stats.launches - launches_before, " kernel launches");
  CHECK(stats.launches - launches_before > 0);  // the device path really ran
#endif
}

TEST_SUITE("gpu") {
  TEST_CASE("key_value_cache on the device writes the CPU's cache, scale, key and value") {
    CheckOp("key_value_cache");
  }
  TEST_CASE("multi_head_attention on the device is within tolerance of the reference") {
    CheckOp("multi_head_attention");
  }
  TEST_CASE("multi_head_cache_attention on the device: CPU's cache bytes, reference's output") {
    CheckOp("multi_head_cache_attention");
  }
  TEST_CASE("unified_attention on the device: CPU's cache bytes, reference's output and lse") {
    CheckOp("unified_attention");
  }
#ifdef DYNATTN_CUDA_EMULATOR
  TEST_CASE("a launch the device refuses comes back as a Status naming the kernel") {
    Case c;
    for (uint64_t seed = dynattn_test::BaseSeed() + 77;
         c.inputs.empty() || c.inputs.at("query").shape[0] == 0;
         ++seed) {  // a step with new tokens, so that the write kernel launches
      c = dynattn_ref::RandomCase("multi_head_cache_attention", seed);
    }
    DevicePlacement placement;
    cuda_emu::FailNextLaunches(1);
    const LibResult r = dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &placement);
    cuda_emu::FailNextLaunches(0);
    CHECK(r.status.code() == dynattn::StatusCode::kDeviceError);
    CHECK(r.status.message() ==
          "CUDA error: WriteTokensKernel launch: cudaErrorLaunchOutOfResources (too many resources "
          "requested for launch)");
    // The device is usable again (the error was not sticky): the next call succeeds.
    DevicePlacement again;
    CHECK(dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &again).status.ok());
  }

  TEST_CASE("without a CUDA device a call says so and writes nothing") {
    Case c;
    for (uint64_t seed = dynattn_test::BaseSeed() + 78;
         c.inputs.empty() || c.inputs.at("query").shape[0] == 0; ++seed) {
      c = dynattn_ref::RandomCase("multi_head_cache_attention", seed);
    }
    DevicePlacement placement;
    cuda_emu::SetDeviceCount(0);
    const LibResult r = dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &placement);
    cuda_emu::SetDeviceCount(1);
    CHECK(r.status.code() == dynattn::StatusCode::kUnsupported);
    CHECK_MESSAGE(r.status.message().rfind("CUDA: no CUDA device is visible", 0) == 0,
                  r.status.message());
    std::string why;
    CHECK_MESSAGE(dynattn_test::SameBytes(r.cache, c.inputs.at("cache"), &why), why);
    DevicePlacement again;
    CHECK(dynattn_test::RunLibrary(c, dynattn::RunOptions{}, &again).status.ok());
  }

  TEST_CASE("a device allocation failure leaves the cache untouched") {
    // Placement allocates the call's tensors; after the last one, `allowed` more cudaMalloc calls
    // succeed and the rest fail. A Run allocates its whole workspace in its reserve step, before
    // the cache write: with 0 allowed it fails before writing; with 1 it needs no other. (Before
    // the reserve step, the write's staging took the first malloc and the attention's the second,
    // after the cache was written.)
    struct FailingPlacement : DevicePlacement {
      int allowed = 0;
      dynattn::TensorView Place(const std::string& name, Array& array) override {
        cuda_emu::FailMallocsAfter(-1);  // the tensor's own allocation
        dynattn::TensorView view = DevicePlacement::Place(name, array);
        cuda_emu::FailMallocsAfter(allowed);
        return view;
      }
      void Fetch() override {
        cuda_emu::FailMallocsAfter(-1);
        DevicePlacement::Fetch();
      }
    };
    for (const std::string op : {"key_value_cache", "multi_head_cache_attention"}) {
      CAPTURE(op);
      Case c;
      for (uint64_t seed = dynattn_test::BaseSeed() + 91;
           c.inputs.empty() || c.inputs.at("current_key").shape[0] == 0; ++seed) {
        c = dynattn_ref::RandomCase(op, seed);
      }
      for (int allowed : {0, 1}) {
        CAPTURE(allowed);
        FailingPlacement placement;
        placement.allowed = allowed;
        // A thread count no other test uses: a pooled Context of its own, with no workspace yet.
        const int threads = 40 + allowed + (op == "key_value_cache" ? 0 : 2);
        const LibResult r =
            dynattn_test::RunLibrary(c, dynattn::RunOptions{.num_threads = threads}, &placement);
        cuda_emu::FailMallocsAfter(-1);
        if (allowed == 0) {
          CHECK(r.status.code() == dynattn::StatusCode::kDeviceError);
          CHECK(r.status.message().find("cudaErrorMemoryAllocation") != std::string::npos);
        } else {
          CHECK_MESSAGE(r.status.ok(), r.status.message());
        }
        if (!r.status.ok()) CHECK(r.cache.bytes == c.inputs.at("cache").bytes);
      }
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// The serving formats and score features on the CUDA rows, driven directly (a problem and its
// plan, as src/ builds them): bf16 and fp8 caches, bf16 activations, sliding windows, logit
// soft-capping, a settable softmax scale and attention sinks, alone and combined. Cache bytes and
// gathered activations must equal core/codec.h's host encoding bit for bit (and the CPU row's,
// when this library has one for the format); attention outputs and log-sum-exps must be within
// tolerance of a float64 evaluation over the very keys and values the cache decodes to.

namespace feature {

namespace di = dynattn::internal;
using dynattn::CacheElem;
using dynattn::DType;

/// A fresh seed per use, derived from the run's base seed (DYNATTN_TEST_SEED replays it).
uint64_t FreshSeed() {
  static uint64_t next = 0;
  return dynattn_test::BaseSeed() + 0xD1B54A32D192ED03ull * ++next;
}

const CacheElem kElems[] = {CacheElem::kF32,   CacheElem::kF16,  CacheElem::kBF16,
                            CacheElem::kInt8,  CacheElem::kInt4, CacheElem::kF8E4M3,
                            CacheElem::kF8E5M2};
const DType kIoTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

bool Quantized(CacheElem elem) { return elem == CacheElem::kInt8 || elem == CacheElem::kInt4; }

template <typename T>
const T& Pick(std::mt19937_64& rng, const std::vector<T>& options) {
  return options[rng() % options.size()];
}

int Uniform(std::mt19937_64& rng, int lo, int hi) {  // [lo, hi]
  return lo + static_cast<int>(rng() % static_cast<uint64_t>(hi - lo + 1));
}

float UniformF(std::mt19937_64& rng, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(rng);
}

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
std::vector<uint8_t> Poison(size_t count) { return std::vector<uint8_t>(count, 0xFF); }

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

const di::BackendKernels& CudaRow(CacheElem elem) {
  const di::BackendKernels* row = di::CudaKernelsFor(elem);
  REQUIRE_MESSAGE(row != nullptr, "no CUDA row for cache element ", static_cast<int>(elem));
  return *row;
}

/// A value for a new cache row: ordinary values at a random range, with ties, zeros, huge, tiny
/// and non-finite values mixed in (e4m3 saturates past 448, e5m2 past 57344 or keeps infinity).
float CacheValue(std::mt19937_64& rng, float range) {
  switch (rng() % 12) {
    case 0:
      return rng() % 2 ? 0.0f : -0.0f;
    case 1:
      return std::numeric_limits<float>::quiet_NaN();
    case 2:
      return (rng() % 2 ? 1 : -1) * std::numeric_limits<float>::infinity();
    case 3:
      return static_cast<float>(Uniform(rng, -600, 600)) * 0.0625f;  // fp8 ties and saturation
    case 4:
      return UniformF(rng, -1e-5f, 1e-5f);
    case 5:
      return UniformF(rng, -7e4f, 7e4f);
    default:
      return UniformF(rng, -range, range);
  }
}

/// True when two arrays of activations of type `io` hold the same bits, except that any NaN
/// equals any NaN.
bool SameUpToNanPayload(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType io) {
  if (a.size() != b.size()) return false;
  const size_t bytes = io == DType::kF32 ? 4 : 2;
  for (size_t i = 0; i < a.size() / bytes; ++i) {
    if (std::memcmp(a.data() + i * bytes, b.data() + i * bytes, bytes) == 0) continue;
    const float x = di::LoadActivationOf(a.data(), static_cast<int64_t>(i), io);
    const float y = di::LoadActivationOf(b.data(), static_cast<int64_t>(i), io);
    if (!(std::isnan(x) && std::isnan(y))) {
      MESSAGE("element ", i, ": ", x, " vs ", y);
      return false;
    }
  }
  return true;
}

/// KeyValueCache on a CUDA row: new tokens written at start_pos, then every request's context
/// gathered num_repeat times. Cache and scales must be the host codec's (and the CPU row's)
/// bytes; the gathered rows the host decode of the whole cache (old random bytes included, so
/// any fp8 byte is read) stored in the activation type.
void CheckCacheIo(CacheElem elem, DType io, std::mt19937_64& rng) {
  const int heads = Uniform(rng, 1, 3), repeat = Uniform(rng, 1, 3);
  int dim = Uniform(rng, 1, 80);
  if (elem == CacheElem::kInt4) dim += dim % 2;
  std::vector<int> groups;
  for (int g = 1; g <= dim; ++g) {
    if (dim % g == 0 && (elem != CacheElem::kInt4 || g % 2 == 0)) groups.push_back(g);
  }
  const int group = Quantized(elem) ? Pick(rng, groups) : 8;
  const bool scale_f16 = rng() % 2;
  const float k_scale = std::exp(UniformF(rng, -7.0f, 2.0f));
  const float v_scale = rng() % 4 == 0 ? 1.0f : std::exp(UniformF(rng, -7.0f, 2.0f));
  const int64_t batch = Uniform(rng, 1, 3);
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos, cachestarts;
  int64_t slots = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = Uniform(rng, 0, 5), start = Uniform(rng, 0, 6);
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + start + seqlen);
    start_pos.push_back(start);
    cachestarts.push_back(slots + Uniform(rng, 0, 2));
    slots = cachestarts.back() + start + seqlen;
  }
  const int64_t tokens = seqstarts.back(), rows = kvstarts.back();
  INFO("elem " << static_cast<int>(elem) << " io " << std::string(dynattn::DTypeName(io))
               << " heads " << heads << " dim " << dim << " group " << group << " repeat " << repeat
               << " scales " << k_scale << " " << v_scale << " tokens " << tokens << " rows "
               << rows);
  const float range = std::exp(UniformF(rng, -6.0f, 6.0f));
  const auto draw = [&] { return CacheValue(rng, range); };
  const size_t new_count = static_cast<size_t>(tokens) * heads * dim;
  const Activations new_key = MakeActivations(io, new_count, draw);
  const Activations new_value = MakeActivations(io, new_count, draw);
  const HostCache initial(elem, heads, dim, group, scale_f16, slots, k_scale, v_scale, rng);

  // What the write must leave: the host codec's rows at every new token's slot.
  HostCache expected = initial;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = seqstarts[b]; t < seqstarts[b + 1]; ++t) {
      const int64_t slot = cachestarts[b] + start_pos[b] + (t - seqstarts[b]);
      for (int h = 0; h < heads; ++h) {
        for (int plane = 0; plane < 2; ++plane) {
          const std::vector<float>& src = plane == 0 ? new_key.values : new_value.values;
          const size_t first = (static_cast<size_t>(t) * heads + h) * dim;
          expected.Encode(
              plane, slot, h, [&](int d) { return src[first + d]; }, io);
        }
      }
    }
  }
  const size_t out_bytes =
      static_cast<size_t>(rows) * heads * repeat * dim * (io == DType::kF32 ? 4 : 2);
  std::vector<uint8_t> expected_out[2];
  for (int plane = 0; plane < 2; ++plane) {
    expected_out[plane] = Poison(out_bytes);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < kvstarts[b + 1] - kvstarts[b]; ++j) {
        const int64_t row = kvstarts[b] + j;
        for (int h = 0; h < heads; ++h) {
          for (int d = 0; d < dim; ++d) {
            const float x = expected.Decode(plane, cachestarts[b] + j, h, d, io);
            for (int r = 0; r < repeat; ++r) {
              di::StoreActivationOf(x, expected_out[plane].data(),
                                    ((row * heads + h) * repeat + r) * dim + d, io);
            }
          }
        }
      }
    }
  }

  // The CUDA row writes and gathers.
  DeviceCache cache(initial);
  const DeviceBytes key_in(new_key.bytes), value_in(new_value.bytes);
  const DeviceBytes key_out(Poison(out_bytes)), value_out(Poison(out_bytes));
  di::Batch b;
  b.size = batch;
  b.seqstarts = seqstarts.data();
  b.kvstarts = kvstarts.data();
  b.start_pos = start_pos.data();
  di::KvSource source;
  source.cache = cache.desc;
  source.slots.mode = di::SlotMap::Mode::kOffset;
  source.slots.starts = cachestarts.data();
  const di::WriteProblem write{b, io, key_in.get(), value_in.get(), source};
  dynattn::Context context;
  const di::BackendKernels& row = CudaRow(elem);
  const dynattn::Status written =
      row.write_new_tokens(row, write, dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(written.ok(), written.message());
  di::GatherProblem gather{b, io, repeat, key_out.get(), value_out.get(), source};
  const dynattn::Status gathered =
      row.gather_context(row, gather, di::PlanGather(b), dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(gathered.ok(), gathered.message());
  for (int plane = 0; plane < 2; ++plane) {
    CAPTURE(plane);
    CHECK(cache.planes[plane].Fetch() == expected.planes[plane]);
    CHECK(cache.scales[plane].Fetch() == expected.scales[plane]);
  }
  // Gathered rows: the host decode's bytes, but a NaN's sign and payload are not part of the
  // contract (NVIDIA hardware gives the canonical NaN for any NaN a product yields, x86 the
  // operand's); the cache bytes above are exact, NaN included.
  CHECK(SameUpToNanPayload(key_out.Fetch(), expected_out[0], io));
  CHECK(SameUpToNanPayload(value_out.Fetch(), expected_out[1], io));

  // The CPU row writes and gathers the same bytes (once the CPU backend has the bf16 and fp8
  // formats: its bf16 row stands for them all).
  const di::BackendKernels* cpu = di::KernelsFor(dynattn::Device::kCpu, elem);
  if (di::KernelsFor(dynattn::Device::kCpu, CacheElem::kBF16) == nullptr || cpu == nullptr) {
    static bool said = false;
    if (!said) MESSAGE("the CPU backend has no bf16/fp8 rows: compared with the host codec only");
    said = true;
    return;
  }
  HostCache cpu_cache = initial;
  di::KvSource cpu_source = source;
  cpu_source.cache = cpu_cache.desc;
  const di::WriteProblem cpu_write{b, io, new_key.bytes.data(), new_value.bytes.data(), cpu_source};
  di::Scratch scratch;
  cpu->cpu.write_tokens(cpu_write, 0, tokens, &scratch);
  std::vector<uint8_t> cpu_out[2] = {Poison(out_bytes), Poison(out_bytes)};
  const di::GatherProblem cpu_gather{b,         io, repeat, cpu_out[0].data(), cpu_out[1].data(),
                                     cpu_source};
  for (const di::GatherPiece& piece : di::PlanGather(b)) {
    cpu->cpu.gather_rows(cpu_gather, piece.request, piece.begin, piece.end, &scratch);
  }
  for (int plane = 0; plane < 2; ++plane) {
    CHECK(cpu_cache.planes[plane] == expected.planes[plane]);
    CHECK(cpu_cache.scales[plane] == expected.scales[plane]);
    // Old rows hold random bytes, int8/int4 group scales included: a NaN scale's payload is not
    // part of the contract, so the CPU's gather is compared with NaN equal to NaN.
    CHECK(SameUpToNanPayload(cpu_out[plane], expected_out[plane], io));
  }
}

/// Every fp8 byte through a CUDA row: a cache holding bytes 0..255 gathers to the host decode of
/// each (fp32, fp16 and bf16 activations), and new tokens holding every finite value of the format
/// times the tensor scale, the midpoints between neighbours, values past the largest finite one,
/// infinities, NaN and -0 write the host codec's bytes.
void CheckEveryFp8Byte(CacheElem elem, float tensor_scale, std::mt19937_64& rng) {
  INFO("elem " << static_cast<int>(elem) << " tensor_scale " << tensor_scale);
  const di::Fp8Format format = di::Fp8FormatOf(elem);
  std::vector<float> values;
  for (int byte = 0; byte < 256; ++byte) {
    const float x = di::Fp8ToF32(static_cast<uint8_t>(byte), format);
    values.push_back(x * tensor_scale);
    const float next =
        di::Fp8ToF32(static_cast<uint8_t>((byte & 0x80) | ((byte + 1) & 0x7F)), format);
    if (std::isfinite(x) && std::isfinite(next)) values.push_back((x + next) / 2 * tensor_scale);
  }
  for (float special :
       {2.0f * di::Fp8Max(format) * tensor_scale, 1e30f, -1e30f, INFINITY, -INFINITY, -0.0f, NAN}) {
    values.push_back(special);
  }
  const int dim = 32, heads = 1;
  while (values.size() % dim != 0) values.push_back(UniformF(rng, -1.0f, 1.0f));
  const int64_t tokens = static_cast<int64_t>(values.size()) / dim;
  const int64_t slots = std::max<int64_t>(tokens, 256 / dim);
  for (DType io : kIoTypes) {
    INFO("io " << std::string(dynattn::DTypeName(io)));
    // New tokens in fp32 carry the values exactly; bf16/fp16 activations round them first.
    const Activations keys =
        MakeActivations(io, values.size(), [&, i = size_t{0}]() mutable { return values[i++]; });
    HostCache initial(elem, heads, dim, 8, false, slots, tensor_scale, tensor_scale, rng);
    for (int plane = 0; plane < 2; ++plane) {
      for (size_t i = 0; i < initial.planes[plane].size(); ++i) {
        initial.planes[plane][i] = static_cast<uint8_t>(i + 97 * plane);
      }
    }
    HostCache expected = initial;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int plane = 0; plane < 2; ++plane) {
        expected.Encode(
            plane, t, 0, [&](int d) { return keys.values[t * dim + d]; }, io);
      }
    }
    // Gather the initial cache (every byte) without writing: a request of `slots` context rows.
    const size_t out_bytes = static_cast<size_t>(slots) * dim * (io == DType::kF32 ? 4 : 2);
    DeviceCache cache(initial);
    const DeviceBytes key_out(Poison(out_bytes)), value_out(Poison(out_bytes));
    const int64_t no_tokens[2] = {0, 0}, context[2] = {0, slots}, zero[1] = {0};
    di::Batch gather_batch{1, no_tokens, context, zero, 0};
    di::KvSource source;
    source.cache = cache.desc;
    source.slots.starts = zero;
    dynattn::Context ctx;
    const di::BackendKernels& row = CudaRow(elem);
    const di::GatherProblem gather{gather_batch, io, 1, key_out.get(), value_out.get(), source};
    REQUIRE(row.gather_context(row, gather, di::PlanGather(gather_batch),
                               dynattn::internal::StateOf(ctx))
                .ok());
    std::vector<uint8_t> expected_out[2] = {Poison(out_bytes), Poison(out_bytes)};
    for (int plane = 0; plane < 2; ++plane) {
      for (int64_t s = 0; s < slots; ++s) {
        for (int d = 0; d < dim; ++d) {
          di::StoreActivationOf(initial.Decode(plane, s, 0, d, io), expected_out[plane].data(),
                                s * dim + d, io);
        }
      }
    }
    CHECK(SameUpToNanPayload(key_out.Fetch(), expected_out[0], io));
    CHECK(SameUpToNanPayload(value_out.Fetch(), expected_out[1], io));
    // Then write every value as new tokens at positions 0.. and compare the bytes.
    const DeviceBytes key_in(keys.bytes);
    const int64_t seqstarts[2] = {0, tokens}, kvstarts[2] = {0, tokens};
    const di::Batch write_batch{1, seqstarts, kvstarts, zero, 0};
    const di::WriteProblem write{write_batch, io, key_in.get(), key_in.get(), source};
    REQUIRE(row.write_new_tokens(row, write, dynattn::internal::StateOf(ctx)).ok());
    CHECK(cache.planes[0].Fetch() == expected.planes[0]);
    CHECK(cache.planes[1].Fetch() == expected.planes[1]);
  }
}

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

Features RandomFeatures(std::mt19937_64& rng, int64_t longest_context) {
  Features f;
  f.elem = kElems[rng() % std::size(kElems)];
  f.io = kIoTypes[rng() % std::size(kIoTypes)];
  f.kv_heads = Uniform(rng, 1, 2);
  f.group_size = Pick(rng, std::vector<int>{1, 2, 4});
  f.dim = Pick(rng, std::vector<int>{1, 7, 16, 32, 48, 64, 80});
  if (f.elem == CacheElem::kInt4) f.dim += f.dim % 2;
  f.quant_group = Quantized(f.elem) ? (f.dim % 8 == 0 ? 8 : 2 - f.dim % 2) : 8;
  f.scale_f16 = rng() % 2;
  switch (rng() % 4) {
    case 0:
      f.window = -1;
      break;
    case 1:
      f.window = 0;
      break;
    default:
      f.window = Uniform(rng, 1, static_cast<int>(std::max<int64_t>(2, longest_context)));
  }
  f.cap = rng() % 2 ? 0.0f : UniformF(rng, 0.5f, 20.0f);
  f.scale = rng() % 2 ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(f.dim)))
                      : UniformF(rng, 0.02f, 1.5f);
  f.alibi = rng() % 4 == 0;
  if (rng() % 3 != 0) {
    for (int h = 0; h < f.heads(); ++h) f.sinks.push_back(UniformF(rng, -4.0f, 6.0f));
  }
  if (di::IsFp8(f.elem)) {
    f.k_scale = std::exp(UniformF(rng, -6.0f, 0.0f));
    f.v_scale = std::exp(UniformF(rng, -6.0f, 0.0f));
  }
  return f;
}

std::string Describe(const Features& f) {
  char text[400];
  std::snprintf(text, sizeof(text),
                "elem %d io %s heads %d/%d dim %d group %d window %lld cap %g scale %g alibi %d "
                "sinks %d k_scale %g v_scale %g",
                static_cast<int>(f.elem), dynattn::DTypeName(f.io), f.heads(), f.kv_heads, f.dim,
                f.quant_group, static_cast<long long>(f.window), f.cap, f.scale, f.alibi,
                static_cast<int>(!f.sinks.empty()), f.k_scale, f.v_scale);
  return text;
}

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
              int64_t index, const Expected& e, double vmax, const std::string& where) {
  const double unit = f.io == DType::kBF16 ? 0x1p-8 : f.io == DType::kF16 ? 0x1p-11 : 0x1p-23;
  for (int d = 0; d < f.dim; ++d) {
    const double got = di::LoadActivationOf(out.data(), index * f.dim + d, f.io);
    const double bound = 1.01 * unit * std::fabs(e.out[d]) + 2e-4 * vmax + 1e-6;
    if (!(std::fabs(got - e.out[d]) <= bound)) {
      FAIL_CHECK(where, " d ", d, ": got ", got, ", expected ", e.out[d], " (bound ", bound, ")");
      return;
    }
  }
  if (lse.empty()) return;  // the op returns no log-sum-exp
  float got_lse;
  std::memcpy(&got_lse, lse.data() + index * 4, 4);
  if (e.lse == -INFINITY) {
    CHECK_MESSAGE(got_lse == -INFINITY, where, " lse ", got_lse, ", expected -inf");
  } else {
    CHECK_MESSAGE(std::fabs(got_lse - e.lse) <= 2e-5 * std::max(1.0, std::fabs(e.lse)), where,
                  " lse ", got_lse, ", expected ", e.lse);
  }
}

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
void FillCache(HostCache* cache, DType io, std::mt19937_64& rng) {
  const int heads = cache->desc.num_kv_heads, dim = cache->desc.head_dim;
  std::vector<float> row(dim);
  for (int64_t slot = 0; slot < cache->desc.num_slots; ++slot) {
    for (int h = 0; h < heads; ++h) {
      for (int plane = 0; plane < 2; ++plane) {
        // Values as activations of type io hold them (the cache is written from activations).
        for (float& x : row) {
          uint8_t bytes[4];
          di::StoreActivationOf(UniformF(rng, -1.0f, 1.0f), bytes, 0, io);
          x = di::LoadActivationOf(bytes, 0, io);
        }
        cache->Encode(
            plane, slot, h, [&](int d) { return row[d]; }, io);
      }
    }
  }
}

/// The problem fields every attention call shares.
void FillFeatures(const Features& f, di::AttentionProblem* p, const std::vector<float>& slopes) {
  p->io_type = f.io;
  p->num_heads = f.heads();
  p->num_kv_heads = f.kv_heads;
  p->group_size = f.group_size;
  p->head_dim = f.dim;
  p->padded_dim = static_cast<int>(di::PadToLanes(f.dim));
  p->score_scale = f.scale;
  p->soft_cap = f.cap;
  p->window_left = f.window;
  p->alibi_slopes = f.alibi ? slopes.data() : nullptr;
  p->sinks = f.sinks.empty() ? nullptr : f.sinks.data();
}

/// MHA / MHCA on a CUDA row: decodes, prefills (tiles of 32 rows) and long decodes (split-KV
/// merges), causal or not, with an optional additive mask, against the float64 attention.
void CheckAttention(std::mt19937_64& rng) {
  // Requests: decodes first (decoding_batches), then prefills.
  const int64_t batch = Uniform(rng, 1, 4);
  const int64_t decodes = Uniform(rng, 0, static_cast<int>(batch));
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, cachestarts;
  int64_t slots = 0, longest = 1;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t seqlen = 1, kvlen = 0;
    if (b < decodes) {
      kvlen = rng() % 3 == 0 ? Uniform(rng, 1025, 2600) : Uniform(rng, 1, 200);
    } else {
      seqlen = Uniform(rng, 1, 45);
      kvlen = seqlen + (rng() % 3 == 0 ? Uniform(rng, 1025, 1500) : Uniform(rng, 0, 60));
    }
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + kvlen);
    cachestarts.push_back(slots + Uniform(rng, 0, 3));
    slots = cachestarts.back() + kvlen;
    longest = std::max(longest, kvlen);
  }
  const Features f = RandomFeatures(rng, longest);
  const bool causal = rng() % 4 != 0;
  const int mask_kind = rng() % 3;  // 0 none, 1 (Tq, kv), 2 (Hq, Tq, kv)
  const int64_t tokens = seqstarts.back();
  const int64_t mask_row = kvstarts.back() + Uniform(rng, 0, 5);
  const std::string where_case = Describe(f) + " causal " + std::to_string(causal) + " mask " +
                                 std::to_string(mask_kind) + " decodes " + std::to_string(decodes) +
                                 " batch " + std::to_string(batch);
  INFO(where_case);

  HostCache host(f.elem, f.kv_heads, f.dim, f.quant_group, f.scale_f16, slots, f.k_scale, f.v_scale,
                 rng);
  FillCache(&host, f.io, rng);
  const DecodedCache decoded(host, f.io);
  const Activations query = MakeActivations(f.io, static_cast<size_t>(tokens) * f.heads() * f.dim,
                                            [&] { return UniformF(rng, -1.0f, 1.0f); });
  const size_t mask_count =
      mask_kind == 0 ? 0
                     : static_cast<size_t>((mask_kind == 2 ? f.heads() : 1) * tokens * mask_row);
  const Activations mask = MakeActivations(
      f.io, mask_count, [&] { return rng() % 8 == 0 ? -INFINITY : UniformF(rng, -3.0f, 1.0f); });
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());

  DeviceCache cache(host);
  const DeviceBytes query_in(query.bytes), mask_in(mask.bytes);
  const size_t out_bytes = query.bytes.size();
  const DeviceBytes out(Poison(out_bytes)),
      lse(Poison(static_cast<size_t>(tokens) * f.heads() * 4));
  di::AttentionProblem p;
  FillFeatures(f, &p, slopes);
  p.batch.size = batch;
  p.batch.seqstarts = seqstarts.data();
  p.batch.kvstarts = kvstarts.data();
  p.batch.decoding_batches = decodes;
  p.is_causal = causal;
  p.query = query_in.get();
  p.output = out.get();
  p.lse = static_cast<float*>(lse.get());
  p.mask = mask_kind == 0 ? nullptr : mask_in.get();
  p.mask_row_stride = mask_row;
  p.mask_head_stride = mask_kind == 2 ? tokens * mask_row : 0;
  p.kv.cache = cache.desc;
  p.kv.slots.mode = di::SlotMap::Mode::kOffset;
  p.kv.slots.starts = cachestarts.data();
  const di::AttentionPlan plan = di::PlanAttention(p);
  dynattn::Context context;
  const di::BackendKernels& row = CudaRow(f.elem);
  const dynattn::Status status =
      row.run_attention(row, p, plan, dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<uint8_t> got = out.Fetch(), got_lse = lse.Fetch();

  for (int64_t b = 0; b < batch; ++b) {
    const int64_t kvlen = kvstarts[b + 1] - kvstarts[b];
    for (int64_t r = 0; r < seqstarts[b + 1] - seqstarts[b]; ++r) {
      const int64_t token = seqstarts[b] + r;
      const int64_t first = p.FirstVisibleKey(b, r), last = p.LastVisibleKey(b, r);
      const int64_t position = p.QueryPosition(b, r);
      REQUIRE(last <= kvlen - 1);
      for (int h = 0; h < f.heads(); ++h) {
        const int kvh = h / f.group_size;
        const auto key = [&](int64_t j) {
          return decoded.Row(0, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
        };
        const auto value = [&](int64_t j) {
          return decoded.Row(1, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
        };
        const auto bias = [&](int64_t j) {
          double x = 0.0;
          if (f.alibi) x += static_cast<double>(slopes[h]) * static_cast<double>(j - position);
          if (mask_kind != 0) {
            x += mask.values[(mask_kind == 2 ? h * tokens * mask_row : 0) + token * mask_row +
                             kvstarts[b] + j];
          }
          return x;
        };
        const float* q = query.values.data() + (token * f.heads() + h) * f.dim;
        CheckAttendedRow(f, q, first, last, key, value, bias,
                         f.sinks.empty() ? nullptr : &f.sinks[h], got, got_lse,
                         token * f.heads() + h,
                         "request " + std::to_string(b) + " row " + std::to_string(r) + " head " +
                             std::to_string(h));
      }
    }
  }
}

/// Unified attention on a CUDA row: requests over a block cache whose leading blocks some of them
/// share (shared items), long decodes (unique runs and splits) and prefills (causal items), every
/// token's parts merged once, against the float64 attention.
void CheckUnified(std::mt19937_64& rng) {
  const int64_t requests = Uniform(rng, 1, 4);
  const int64_t block_size = Pick(rng, std::vector<int64_t>{1, 4, 16, 32});
  const int64_t shared_blocks = Uniform(rng, 0, 3);
  std::vector<int64_t> qsl{0}, context_lens;
  std::vector<bool> shares;
  int64_t longest = 1;
  for (int64_t b = 0; b < requests; ++b) {
    const bool share = shared_blocks > 0 && rng() % 3 != 0;
    const int64_t query_len = rng() % 2 ? 1 : Uniform(rng, 1, 40);
    int64_t context = rng() % 4 == 0 ? Uniform(rng, 1025, 2200) : Uniform(rng, 0, 90);
    if (share) context = std::max(context, shared_blocks * block_size + Uniform(rng, 0, 5));
    qsl.push_back(qsl.back() + query_len);
    context_lens.push_back(context);
    shares.push_back(share);
    longest = std::max(longest, context + query_len);
  }
  int64_t table_stride = 1;
  for (int64_t b = 0; b < requests; ++b) {
    table_stride = std::max(table_stride,
                            (context_lens[b] + qsl[b + 1] - qsl[b] + block_size - 1) / block_size);
  }
  // Blocks: the shared ones first, then each request's own, in a shuffled order.
  std::vector<int64_t> table(static_cast<size_t>(requests * table_stride), 0);
  int64_t next_block = shared_blocks;
  std::vector<int64_t> own;
  for (int64_t b = 0; b < requests; ++b) {
    const int64_t blocks = (context_lens[b] + qsl[b + 1] - qsl[b] + block_size - 1) / block_size;
    for (int64_t j = 0; j < blocks; ++j) {
      if (shares[b] && j < shared_blocks) {
        table[b * table_stride + j] = j;
      } else {
        table[b * table_stride + j] = next_block++;
        own.push_back(b * table_stride + j);
      }
    }
  }
  std::vector<int64_t> ids(own.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = shared_blocks + static_cast<int64_t>(i);
  std::shuffle(ids.begin(), ids.end(), rng);
  for (size_t i = 0; i < own.size(); ++i) table[own[i]] = ids[i];
  const int64_t num_blocks = next_block;

  const Features f = RandomFeatures(rng, longest);
  INFO(Describe(f) << " requests " << requests << " block_size " << block_size << " shared "
                   << shared_blocks);
  HostCache host(f.elem, f.kv_heads, f.dim, f.quant_group, f.scale_f16, num_blocks * block_size,
                 f.k_scale, f.v_scale, rng);
  FillCache(&host, f.io, rng);
  const DecodedCache decoded(host, f.io);
  const int64_t tokens = qsl.back();
  const Activations query = MakeActivations(f.io, static_cast<size_t>(tokens) * f.heads() * f.dim,
                                            [&] { return UniformF(rng, -1.0f, 1.0f); });
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());

  di::UnifiedStep step;
  step.num_requests = requests;
  step.query_start_loc = qsl.data();
  step.context_lens = context_lens.data();
  step.block_table = table.data();
  step.table_stride = table_stride;
  step.block_size = block_size;
  step.block_stride = block_size;
  step.num_kv_heads = f.kv_heads;
  step.group_size = f.group_size;
  const di::UnifiedPlan plan = di::PlanUnified(step);
  REQUIRE(di::CheckCoverage(step, plan).empty());
  std::vector<int64_t> kvstarts{0};
  for (int64_t b = 0; b < requests; ++b) {
    kvstarts.push_back(kvstarts.back() + context_lens[b] + qsl[b + 1] - qsl[b]);
  }

  DeviceCache cache(host);
  const DeviceBytes query_in(query.bytes);
  const DeviceBytes out(Poison(query.bytes.size()));
  const DeviceBytes lse(Poison(static_cast<size_t>(tokens) * f.heads() * 4));
  di::AttentionProblem p;
  FillFeatures(f, &p, slopes);
  p.batch.size = requests;
  p.batch.seqstarts = qsl.data();
  p.batch.kvstarts = kvstarts.data();
  p.batch.start_pos = context_lens.data();
  p.is_causal = true;
  p.query = query_in.get();
  p.output = out.get();
  p.lse = static_cast<float*>(lse.get());
  p.kv.cache = cache.desc;
  p.kv.slots =
      di::SlotMap{di::SlotMap::Mode::kBlocks, table.data(), table_stride, block_size, block_size};
  dynattn::Context context;
  const di::BackendKernels& row = CudaRow(f.elem);
  const dynattn::Status status = row.run_unified(row, p, plan, dynattn::internal::StateOf(context));
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<uint8_t> got = out.Fetch(), got_lse = lse.Fetch();

  for (int64_t b = 0; b < requests; ++b) {
    const auto slot = [&](int64_t j) {
      return table[b * table_stride + j / block_size] * block_size + j % block_size;
    };
    for (int64_t r = 0; r < qsl[b + 1] - qsl[b]; ++r) {
      const int64_t token = qsl[b] + r;
      const int64_t position = context_lens[b] + r;
      const int64_t first = di::AttentionProblem::WindowStart(position, f.window);
      for (int h = 0; h < f.heads(); ++h) {
        const int kvh = h / f.group_size;
        const auto key = [&](int64_t j) { return decoded.Row(0, slot(j), kvh, f.kv_heads, f.dim); };
        const auto value = [&](int64_t j) {
          return decoded.Row(1, slot(j), kvh, f.kv_heads, f.dim);
        };
        const auto bias = [&](int64_t j) {
          return f.alibi ? static_cast<double>(slopes[h]) * static_cast<double>(j - position) : 0.0;
        };
        const float* q = query.values.data() + (token * f.heads() + h) * f.dim;
        CheckAttendedRow(f, q, first, position, key, value, bias,
                         f.sinks.empty() ? nullptr : &f.sinks[h], got, got_lse,
                         token * f.heads() + h,
                         "request " + std::to_string(b) + " row " + std::to_string(r) + " head " +
                             std::to_string(h));
      }
    }
  }
}

/// MultiHeadCacheAttention through the public API on the device (a raw cache descriptor over
/// device planes, every data tensor in device memory, index tensors, sinks and fp8 scales on the
/// host): new tokens written with the call's k_scale/v_scale (the descriptor's own tensor scales
/// are wrong on purpose), the window, soft-cap, softmax scale and sinks taken from the attributes.
/// The cache must hold the host codec's bytes, the output the float64 attention over it; and the
/// CPU backend, once it has the bf16 and fp8 formats, the same bytes and an output within
/// tolerance.
void CheckPublicCacheAttention(std::mt19937_64& rng) {
  const int64_t batch = Uniform(rng, 1, 3);
  const int64_t decodes = Uniform(rng, 0, static_cast<int>(batch));
  std::vector<int64_t> seqstarts{0}, kvstarts{0}, start_pos, cachestarts;
  int64_t slots = 0, longest = 1, max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = b < decodes ? 1 : Uniform(rng, 1, 40);
    const int64_t start = rng() % 4 == 0 ? Uniform(rng, 1025, 1300) : Uniform(rng, 0, 70);
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + start + seqlen);
    start_pos.push_back(start);
    cachestarts.push_back(slots + Uniform(rng, 0, 3));
    slots = cachestarts.back() + start + seqlen;
    longest = std::max(longest, start + seqlen);
    max_seqlen = std::max(max_seqlen, seqlen);
    max_kvlen = std::max(max_kvlen, start + seqlen);
  }
  const Features f = RandomFeatures(rng, longest);
  const bool causal = rng() % 4 != 0, masked = rng() % 3 == 0;
  const bool default_scale = f.scale == static_cast<float>(1.0 / std::sqrt(double{1.0} * f.dim));
  INFO(Describe(f) << " causal " << causal << " masked " << masked << " decodes " << decodes
                   << " batch " << batch);
  const int64_t tokens = seqstarts.back(), mask_cols = kvstarts.back() + Uniform(rng, 0, 4);
  const auto draw = [&] { return UniformF(rng, -1.0f, 1.0f); };
  const size_t new_count = static_cast<size_t>(tokens) * f.kv_heads * f.dim;
  const Activations new_key = MakeActivations(f.io, new_count, draw);
  const Activations new_value = MakeActivations(f.io, new_count, draw);
  const Activations query =
      MakeActivations(f.io, static_cast<size_t>(tokens) * f.heads() * f.dim, draw);
  const Activations mask =
      MakeActivations(f.io, masked ? static_cast<size_t>(tokens * mask_cols) : 0,
                      [&] { return rng() % 8 == 0 ? -INFINITY : UniformF(rng, -2.0f, 1.0f); });
  HostCache initial(f.elem, f.kv_heads, f.dim, f.quant_group, f.scale_f16, slots, f.k_scale,
                    f.v_scale, rng);
  FillCache(&initial, f.io, rng);
  HostCache expected = initial;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = seqstarts[b]; t < seqstarts[b + 1]; ++t) {
      const int64_t slot = cachestarts[b] + start_pos[b] + (t - seqstarts[b]);
      for (int h = 0; h < f.kv_heads; ++h) {
        const size_t first = (static_cast<size_t>(t) * f.kv_heads + h) * f.dim;
        expected.Encode(
            0, slot, h, [&](int d) { return new_key.values[first + d]; }, f.io);
        expected.Encode(
            1, slot, h, [&](int d) { return new_value.values[first + d]; }, f.io);
      }
    }
  }

  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = f.heads();
  attrs.attention.num_kv_heads = f.kv_heads;
  attrs.attention.head_dim = f.dim;
  attrs.attention.is_causal = causal;
  attrs.attention.is_alibi = f.alibi;
  attrs.attention.window_left = static_cast<int>(f.window);
  attrs.attention.logits_soft_cap = f.cap;
  attrs.attention.softmax_scale = default_scale && rng() % 2 ? 0.0f : f.scale;
  attrs.cache.quant_bit = f.elem == CacheElem::kInt8 ? 8 : f.elem == CacheElem::kInt4 ? 4 : 0;
  attrs.cache.quant_group = f.quant_group;
  const int64_t scalars[3] = {decodes, max_seqlen, max_kvlen};
  const float fp8_scales[2] = {f.k_scale, f.v_scale};
  using dynattn::TensorView;
  const auto host_i64 = [](const std::vector<int64_t>& v) {
    return TensorView::Dense(v.data(), DType::kI64, {static_cast<int64_t>(v.size())});
  };
  const auto run = [&](dynattn::Device device, std::vector<uint8_t> planes_out[2],
                       std::vector<uint8_t>* out_bytes) {
    const bool on_device = device == dynattn::Device::kCuda;
    HostCache host_copy = initial;
    // The descriptor's tensor scales are not the cache's: k_scale/v_scale must replace them.
    host_copy.desc.key.tensor_scale = 3.0f;
    host_copy.desc.value.tensor_scale = 5.0f;
    std::unique_ptr<DeviceCache> device_cache;
    if (on_device) device_cache = std::make_unique<DeviceCache>(host_copy);
    const dynattn::CacheDesc desc = on_device ? device_cache->desc : host_copy.desc;
    std::vector<std::unique_ptr<DeviceBytes>> buffers;
    const auto place = [&](const std::vector<uint8_t>& bytes) -> void* {
      if (!on_device) return const_cast<uint8_t*>(bytes.data());
      buffers.push_back(std::make_unique<DeviceBytes>(bytes));
      return buffers.back()->get();
    };
    std::vector<uint8_t> out_host = Poison(query.bytes.size());
    dynattn::MultiHeadCacheAttentionArgs args;
    const int64_t hq = f.heads(), hkv = f.kv_heads, dim = f.dim;
    args.query = TensorView::Dense(place(query.bytes), f.io, {tokens, hq, dim}, device);
    args.current_key = TensorView::Dense(place(new_key.bytes), f.io, {tokens, hkv, dim}, device);
    args.current_value =
        TensorView::Dense(place(new_value.bytes), f.io, {tokens, hkv, dim}, device);
    args.seqstarts = host_i64(seqstarts);
    args.kvstarts = host_i64(kvstarts);
    args.cachestarts = host_i64(cachestarts);
    args.start_pos = host_i64(start_pos);
    args.decoding_batches = TensorView::Dense(&scalars[0], DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&scalars[1], DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&scalars[2], DType::kI64, {});
    if (masked) {
      args.attn_mask = TensorView::Dense(place(mask.bytes), f.io, {tokens, mask_cols}, device);
    }
    if (!f.sinks.empty()) args.sinks = TensorView::Dense(f.sinks.data(), DType::kF32, {hq});
    if (di::IsFp8(f.elem)) {
      args.k_scale = TensorView::Dense(&fp8_scales[0], DType::kF32, {});
      args.v_scale = TensorView::Dense(&fp8_scales[1], DType::kF32, {});
    }
    args.cache_desc = &desc;
    void* out = place(out_host);
    args.attn_output = TensorView::Dense(out, f.io, {tokens, hq, dim}, device);
    // One CPU thread: under ThreadSanitizer (gpu-tsan) the only threads are then the emulated
    // kernels' (oneTBB's synchronisation is invisible to it).
    const dynattn::Status status =
        dynattn::MultiHeadCacheAttention(attrs, args, dynattn::RunOptions{.num_threads = 1});
    REQUIRE_MESSAGE(status.ok(), status.message());
    for (int plane = 0; plane < 2; ++plane) {
      planes_out[plane] = on_device ? device_cache->planes[plane].Fetch() : host_copy.planes[plane];
    }
    *out_bytes = on_device ? buffers.back()->Fetch() : out_host;
  };
  std::vector<uint8_t> planes[2], out;
  run(dynattn::Device::kCuda, planes, &out);
  CHECK(planes[0] == expected.planes[0]);
  CHECK(planes[1] == expected.planes[1]);

  // The float64 attention over the cache as written (its scales: the call's k_scale/v_scale).
  const DecodedCache rounded(expected, f.io), cpu_read(expected, f.io, true);
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());
  const std::vector<uint8_t> no_lse;
  const auto check_output = [&](const std::vector<uint8_t>& got, const DecodedCache& decoded,
                                const char* backend) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t seqlen = seqstarts[b + 1] - seqstarts[b];
      const int64_t kvlen = kvstarts[b + 1] - kvstarts[b];
      const bool limited = f.alibi || f.window >= 0 || (causal && seqlen > 1 && b >= decodes);
      for (int64_t r = 0; r < seqlen; ++r) {
        const int64_t token = seqstarts[b] + r, position = kvlen - seqlen + r;
        const int64_t first = di::AttentionProblem::WindowStart(position, f.window);
        const int64_t last = limited ? position : kvlen - 1;
        for (int h = 0; h < f.heads(); ++h) {
          const int kvh = h / f.group_size;
          const auto key = [&](int64_t j) {
            return decoded.Row(0, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
          };
          const auto value = [&](int64_t j) {
            return decoded.Row(1, cachestarts[b] + j, kvh, f.kv_heads, f.dim);
          };
          const auto bias = [&](int64_t j) {
            double x = f.alibi ? double{slopes[h]} * static_cast<double>(j - position) : 0.0;
            if (masked) x += mask.values[token * mask_cols + kvstarts[b] + j];
            return x;
          };
          const float* q = query.values.data() + (token * f.heads() + h) * f.dim;
          CheckAttendedRow(f, q, first, last, key, value, bias,
                           f.sinks.empty() ? nullptr : &f.sinks[h], got, no_lse,
                           token * f.heads() + h,
                           std::string(backend) + " request " + std::to_string(b) + " row " +
                               std::to_string(r) + " head " + std::to_string(h));
        }
      }
    }
  };
  check_output(out, rounded, "CUDA");
  if (di::KernelsFor(dynattn::Device::kCpu, CacheElem::kBF16) == nullptr) {
    static bool said = false;
    if (!said) MESSAGE("the CPU backend has no bf16/fp8 rows: no CPU comparison");
    said = true;
    return;
  }
  std::vector<uint8_t> cpu_planes[2], cpu_out;
  run(dynattn::Device::kCpu, cpu_planes, &cpu_out);
  CHECK(cpu_planes[0] == planes[0]);
  CHECK(cpu_planes[1] == planes[1]);
  check_output(cpu_out, cpu_read, "CPU");
}

/// MultiHeadAttention through the public API on the device: packed bf16/fp16/fp32 keys and values
/// (an unquantized cache of the activation type), with the window, soft-cap, softmax scale, sinks,
/// ALiBi and a per-head mask, against the float64 attention.
void CheckPublicAttention(std::mt19937_64& rng) {
  const int64_t batch = Uniform(rng, 1, 3);
  std::vector<int64_t> seqstarts{0}, kvstarts{0};
  int64_t longest = 1, max_seqlen = 0, max_kvlen = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = Uniform(rng, 1, 40);
    const int64_t kvlen =
        seqlen + (rng() % 4 == 0 ? Uniform(rng, 1025, 1200) : Uniform(rng, 0, 50));
    seqstarts.push_back(seqstarts.back() + seqlen);
    kvstarts.push_back(kvstarts.back() + kvlen);
    longest = std::max(longest, kvlen);
    max_seqlen = std::max(max_seqlen, seqlen);
    max_kvlen = std::max(max_kvlen, kvlen);
  }
  Features f = RandomFeatures(rng, longest);
  f.elem = f.io == DType::kF32   ? CacheElem::kF32
           : f.io == DType::kF16 ? CacheElem::kF16
                                 : CacheElem::kBF16;
  const bool causal = rng() % 3 != 0, masked = rng() % 2 == 0;
  INFO(Describe(f) << " causal " << causal << " masked " << masked << " batch " << batch);
  const int64_t tokens = seqstarts.back(), rows = kvstarts.back();
  const int64_t hq = f.heads(), hkv = f.kv_heads, dim = f.dim;
  const auto draw = [&] { return UniformF(rng, -1.0f, 1.0f); };
  const Activations query = MakeActivations(f.io, static_cast<size_t>(tokens * hq * dim), draw);
  const Activations key = MakeActivations(f.io, static_cast<size_t>(rows * hkv * dim), draw);
  const Activations value = MakeActivations(f.io, static_cast<size_t>(rows * hkv * dim), draw);
  const Activations mask =
      MakeActivations(f.io, masked ? static_cast<size_t>(hq * tokens * rows) : 0,
                      [&] { return rng() % 8 == 0 ? -INFINITY : UniformF(rng, -2.0f, 1.0f); });
  dynattn::AttentionAttrs attrs;
  attrs.num_heads = f.heads();
  attrs.num_kv_heads = f.kv_heads;
  attrs.head_dim = f.dim;
  attrs.is_causal = causal;
  attrs.is_alibi = f.alibi;
  attrs.window_left = static_cast<int>(f.window);
  attrs.logits_soft_cap = f.cap;
  attrs.softmax_scale = f.scale;
  using dynattn::TensorView;
  const dynattn::Device cuda = dynattn::Device::kCuda;
  const DeviceBytes q_in(query.bytes), k_in(key.bytes), v_in(value.bytes), m_in(mask.bytes);
  const DeviceBytes out(Poison(query.bytes.size()));
  const int64_t scalars[3] = {0, max_seqlen, max_kvlen};
  dynattn::MultiHeadAttentionArgs args;
  args.query = TensorView::Dense(q_in.get(), f.io, {tokens, hq, dim}, cuda);
  args.key = TensorView::Dense(k_in.get(), f.io, {rows, hkv, dim}, cuda);
  args.value = TensorView::Dense(v_in.get(), f.io, {rows, hkv, dim}, cuda);
  args.seqstarts = TensorView::Dense(seqstarts.data(), DType::kI64, {batch + 1});
  args.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {batch + 1});
  args.decoding_batches = TensorView::Dense(&scalars[0], DType::kI64, {});
  args.max_seqlen = TensorView::Dense(&scalars[1], DType::kI64, {});
  args.max_kvlen = TensorView::Dense(&scalars[2], DType::kI64, {});
  if (masked) args.attn_mask = TensorView::Dense(m_in.get(), f.io, {hq, tokens, rows}, cuda);
  if (!f.sinks.empty()) args.sinks = TensorView::Dense(f.sinks.data(), DType::kF32, {hq});
  args.attn_output = TensorView::Dense(out.get(), f.io, {tokens, hq, dim}, cuda);
  const dynattn::Status status = dynattn::MultiHeadAttention(attrs, args);
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<uint8_t> got = out.Fetch(), no_lse;
  const std::vector<float> slopes = di::AlibiSlopes(f.heads());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seqlen = seqstarts[b + 1] - seqstarts[b];
    const int64_t kvlen = kvstarts[b + 1] - kvstarts[b];
    const bool limited = f.alibi || f.window >= 0 || (causal && seqlen > 1);
    for (int64_t r = 0; r < seqlen; ++r) {
      const int64_t token = seqstarts[b] + r, position = kvlen - seqlen + r;
      const int64_t first = di::AttentionProblem::WindowStart(position, f.window);
      const int64_t last = limited ? position : kvlen - 1;
      for (int h = 0; h < f.heads(); ++h) {
        const int kvh = h / f.group_size;
        const auto row = [&](const Activations& a, int64_t j) {
          return a.values.data() + ((kvstarts[b] + j) * hkv + kvh) * dim;
        };
        const auto key_of = [&](int64_t j) { return row(key, j); };
        const auto value_of = [&](int64_t j) { return row(value, j); };
        const auto bias = [&](int64_t j) {
          double x = f.alibi ? double{slopes[h]} * static_cast<double>(j - position) : 0.0;
          if (masked) x += mask.values[(h * tokens + token) * rows + kvstarts[b] + j];
          return x;
        };
        const float* q = query.values.data() + (token * hq + h) * dim;
        CheckAttendedRow(f, q, first, last, key_of, value_of, bias,
                         f.sinks.empty() ? nullptr : &f.sinks[h], got, no_lse, token * hq + h,
                         "request " + std::to_string(b) + " row " + std::to_string(r) + " head " +
                             std::to_string(h));
      }
    }
  }
}

/// Runs `check` on `trials` random problems drawn from a fresh seed, which a failure names.
void RunTrials(int trials, void (*check)(std::mt19937_64&)) {
  if (Reduced()) trials = std::max(1, trials / 4);
  const uint64_t seed = FreshSeed();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(trial);
    check(rng);
  }
}

}  // namespace feature

TEST_SUITE("gpu") {
  TEST_CASE("bf16 and fp8 caches: the CUDA write and gather give the host codec's bytes") {
    const uint64_t seed = feature::FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (dynattn::CacheElem elem : feature::kElems) {
      for (dynattn::DType io : feature::kIoTypes) {
        for (int trial = 0; trial < 3; ++trial) feature::CheckCacheIo(elem, io, rng);
      }
    }
  }
  TEST_CASE("fp8 caches on the device: every byte reads and writes as the host codec says") {
    const uint64_t seed = feature::FreshSeed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    for (dynattn::CacheElem elem : {dynattn::CacheElem::kF8E4M3, dynattn::CacheElem::kF8E5M2}) {
      feature::CheckEveryFp8Byte(elem, 1.0f, rng);
      feature::CheckEveryFp8Byte(elem, 0.25f, rng);
      feature::CheckEveryFp8Byte(elem, std::exp(feature::UniformF(rng, -5.0f, 5.0f)), rng);
    }
  }
  TEST_CASE("window, soft-cap, scale, sinks, bf16 and fp8 on the CUDA attention rows") {
    feature::RunTrials(24, &feature::CheckAttention);
  }
  TEST_CASE("multi_head_cache_attention on the device with the new formats and attributes") {
    feature::RunTrials(12, &feature::CheckPublicCacheAttention);
  }
  TEST_CASE("multi_head_attention on the device with bf16 and the new attributes") {
    feature::RunTrials(10, &feature::CheckPublicAttention);
  }
  TEST_CASE("window, soft-cap, scale, sinks, bf16 and fp8 on the CUDA unified rows") {
    feature::RunTrials(16, &feature::CheckUnified);
  }
  TEST_CASE("vLLM's CPU layout (dimension-major keys) on the device: the CPU's cache bytes") {
    // 3 requests (a decode, a 2-token decode, a 5-token chunk) over 6 blocks of 4 slots, Hq 4,
    // Hkv 2, D 16, an fp16 cache [2, nb, Hkv, bs, D] with keys [D, bs] per (block, head).
    const int64_t nb = 6, bs = 4, hkv = 2, hq = 4, d = 16, tokens = 8;
    std::mt19937_64 rng(dynattn_test::BaseSeed() + 6300);
    std::normal_distribution<float> normal;
    std::vector<uint8_t> cache(size_t{2} * nb * hkv * bs * d * 2);
    for (size_t i = 0; i < cache.size(); i += 2) {
      const uint16_t h = dynattn::FloatToHalf(normal(rng));
      std::memcpy(&cache[i], &h, 2);
    }
    std::vector<uint8_t> query(size_t{tokens} * hq * d * 4), key(size_t{tokens} * hkv * d * 4),
        value(key.size());
    for (std::vector<uint8_t>* v : {&query, &key, &value}) {
      for (size_t i = 0; i < v->size(); i += 4) {
        const float x = normal(rng);
        std::memcpy(v->data() + i, &x, 4);
      }
    }
    const int64_t qsl[4] = {0, 1, 3, 8}, ctx[3] = {6, 3, 2}, table[3 * 2] = {4, 1, 0, 3, 5, 2};
    const auto run = [&](bool device, std::vector<uint8_t>* kv, std::vector<float>* out) {
      std::vector<uint8_t> out_bytes(query.size(), 0xFF);
      const feature::DeviceBytes kv_d(*kv), q_d(query), k_d(key), v_d(value), out_d(out_bytes);
      const auto place = [&](std::vector<uint8_t>& host, const feature::DeviceBytes& dev,
                             std::vector<int64_t> shape, dynattn::DType dtype) {
        dynattn::TensorView t = dynattn::TensorView::Dense(
            device ? dev.get() : host.data(), dtype, static_cast<int>(shape.size()), shape.data());
        if (device) t.device = dynattn::Device::kCuda;
        return t;
      };
      dynattn::BlockCache bc;
      REQUIRE(dynattn::MakeVllmCpuBlockCache(
                  place(*kv, kv_d, {2, nb, hkv, bs, d}, dynattn::DType::kF16), {},
                  dynattn::CacheFormat{}, &bc)
                  .ok());
      dynattn::UnifiedAttentionAttrs a;
      a.num_heads = hq;
      a.num_kv_heads = hkv;
      a.head_dim = d;
      dynattn::UnifiedAttentionArgs args;
      args.query = place(query, q_d, {tokens, hq, d}, dynattn::DType::kF32);
      args.current_key = place(key, k_d, {tokens, hkv, d}, dynattn::DType::kF32);
      args.current_value = place(value, v_d, {tokens, hkv, d}, dynattn::DType::kF32);
      args.query_start_loc = dynattn::TensorView::Dense(qsl, dynattn::DType::kI64, {4});
      args.context_lens = dynattn::TensorView::Dense(ctx, dynattn::DType::kI64, {3});
      args.block_table = dynattn::TensorView::Dense(table, dynattn::DType::kI64, {3, 2});
      args.cache = &bc;
      args.attn_output = place(out_bytes, out_d, {tokens, hq, d}, dynattn::DType::kF32);
      const dynattn::Status status = dynattn::UnifiedAttention(a, args);
      REQUIRE_MESSAGE(status.ok(), status.message());
      if (device) {
        REQUIRE_CUDA(cudaDeviceSynchronize());
        *kv = kv_d.Fetch();
        out_bytes = out_d.Fetch();
      }
      out->resize(out_bytes.size() / 4);
      std::memcpy(out->data(), out_bytes.data(), out_bytes.size());
    };
    std::vector<uint8_t> cpu_cache = cache, gpu_cache = cache;
    std::vector<float> cpu_out, gpu_out;
    run(false, &cpu_cache, &cpu_out);
    run(true, &gpu_cache, &gpu_out);
    CHECK(cpu_cache == gpu_cache);  // the new tokens' keys landed dimension-major on both
    CHECK(cpu_cache != cache);
    for (size_t i = 0; i < cpu_out.size(); ++i) {
      CAPTURE(i);
      REQUIRE(std::isfinite(cpu_out[i]));
      CHECK(std::fabs(gpu_out[i] - cpu_out[i]) <= 1e-5f * (1.0f + std::fabs(cpu_out[i])));
    }
  }
  TEST_CASE("row-strided activations on the device give the dense call's bits") {
    const char* const ops[] = {"key_value_cache", "multi_head_attention",
                               "multi_head_cache_attention", "unified_attention"};
    for (int i = 0; i < 2; ++i) {
      for (const char* op : ops) {
        const uint64_t seed = dynattn_test::BaseSeed() + 5000 + 17 * i;
        dynattn_ref::GenOptions small;  // the plumbing of strides, not the kernels' matrix
        small.small = true;
        const Case c = std::string(op) == "unified_attention"
                           ? dynattn_ref::RandomUnifiedCase(seed, small)
                           : dynattn_ref::RandomCase(op, seed, small);
        CAPTURE(c.description);
        DevicePlacement dense_placement;
        const LibResult dense = dynattn_test::RunLibrary(c, {}, &dense_placement);
        REQUIRE_MESSAGE(dense.status.ok(), dense.status.message());
        DevicePlacement device;
        dynattn_test::RowPadding padding(8 * i + 3, &device);
        const LibResult strided = dynattn_test::RunLibrary(c, {}, &padding);
        REQUIRE_MESSAGE(strided.status.ok(), strided.status.message());
        CHECK(padding.gaps_written().empty());
        const std::pair<const char*, std::pair<const Array*, const Array*>> outputs[] = {
            {"attn_output", {&dense.attn_output, &strided.attn_output}},
            {"lse", {&dense.lse, &strided.lse}},
            {"key", {&dense.key, &strided.key}},
            {"value", {&dense.value, &strided.value}},
            {"cache", {&dense.cache, &strided.cache}}};
        for (const auto& output : outputs) {  // not a structured binding: doctest captures it
          std::string why;
          CHECK_MESSAGE(dynattn_test::SameBytes(*output.second.first, *output.second.second, &why),
                        output.first, ": ", why);
        }
      }
    }
  }
  TEST_CASE("NaN and infinities on the device give float64 IEEE rows, as on the CPU") {
    int nan_outputs = 0;
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
      for (int i = 0; i < (Reduced() ? 1 : 4); ++i) {
        const uint64_t seed = dynattn_test::BaseSeed() + 6100 + 31 * i;
        dynattn_ref::GenOptions options;
        options.max_batch = 3;
        options.max_seqlen = 6;
        options.max_context = i % 2 == 0 ? 90 : 700;  // 700: decode splits and their merges
        Case c = std::string(op) == "unified_attention"
                     ? dynattn_ref::RandomUnifiedCase(seed, options)
                     : dynattn_ref::RandomCase(op, seed, options);
        const std::string planted = dynattn_test::PlantNonFinite(seed, &c);
        INFO(c.description, " ", planted);
        const dynattn_ref::AttnResult ref = Reference(c);
        const LibResult gpu = RunOnDevice(c);
        REQUIRE_MESSAGE(gpu.status.ok(), gpu.status.message());
        CHECK(dynattn_ref::CheckAttention(ref, gpu.attn_output) == "");
        if (c.op == "unified_attention") CHECK(dynattn_ref::CheckLse(ref, gpu.lse) == "");
        for (double x : ref.out) nan_outputs += std::isnan(x);
      }
    }
    CHECK(nan_outputs > 0);  // the planted values reached some rows
  }
  TEST_CASE("one device plan runs layers with their own window, soft-cap, scale and sinks") {
    // The step planned without them; its layers pin them (same seed: same step, same history).
    const auto layer_case = [](const char* op, int window, int cap, int scale, int sinks) {
      dynattn_ref::GenOptions options;
      options.max_batch = 3;
      options.max_seqlen = 6;
      options.max_context = 120;
      options.pins.window = window;
      options.pins.soft_cap = cap;
      options.pins.softmax_scale = scale;
      options.pins.sinks = sinks;
      const uint64_t seed = dynattn_test::BaseSeed() + 4242;
      return std::string(op) == "unified_attention" ? dynattn_ref::RandomUnifiedCase(seed, options)
                                                    : dynattn_ref::RandomCase(op, seed, options);
    };
    for (const char* op :
         {"multi_head_attention", "multi_head_cache_attention", "unified_attention"}) {
      const Case planned = layer_case(op, -1, 0, 0, 0);
      dynattn_test::Layer planning(planned);
      DevicePlacement planning_placement;
      planning.PlaceOn(&planning_placement, planned);
      dynattn::Plan plan;
      const dynattn::Status s = dynattn_test::PlanLayer(planned, &planning, &plan);
      REQUIRE_MESSAGE(s.ok(), s.message());
      dynattn::Context context;
      const int windows[] = {3, -1, 40, -1};
      for (int l = 0; l < 4; ++l) {
        const Case c = layer_case(op, windows[l], l == 1, l == 2, l != 1);
        CAPTURE(c.description);
        dynattn_test::Layer layer(c);
        DevicePlacement placement;
        layer.PlaceOn(&placement, c);
        dynattn::LayerAttrs attrs;
        attrs.window_left = c.attrs.window_left;
        attrs.logits_soft_cap = static_cast<float>(c.attrs.logits_soft_cap);
        attrs.softmax_scale = static_cast<float>(c.attrs.softmax_scale);
        if (c.inputs.count("sinks")) attrs.sinks = dynattn_test::ViewOf(layer.tensors.at("sinks"));
        const dynattn::Status run = dynattn_test::BoundArgs(c, &layer).Run(plan, &context, &attrs);
        REQUIRE_MESSAGE(run.ok(), run.message());
        placement.Fetch();
        const dynattn_ref::AttnResult ref =
            c.op == "multi_head_attention" ? dynattn_ref::MultiHeadAttention(c.attrs, c.inputs)
            : c.op == "unified_attention"  ? dynattn_ref::UnifiedAttention(c.attrs, c.inputs)
                                          : dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs);
        const std::string error = dynattn_ref::CheckAttention(ref, layer.tensors.at("attn_output"));
        CHECK_MESSAGE(error.empty(), "CUDA attn_output: ", error);
      }
    }
  }
}

#ifdef DYNATTN_CUDA_EMULATOR
// Last in the file, so last to run: the cases above, the reduced matrix (DYNATTN_GPU_REDUCED=1,
// which compute-sanitizer runs on a device) included, launched every kernel the module has: the
// write, gather and attention kernels of each cache element type and the two merges.
TEST_SUITE("gpu") {
  TEST_CASE("the cases above launched every kernel instantiation of the CUDA module") {
    constexpr int64_t kKernels = 3 * dynattn::kNumCacheElems + 2;
    CHECK(cuda_emu::GetStats().kernels == kKernels);
  }
}
#endif

}  // namespace

#ifdef DYNATTN_CUDA_EMULATOR
// CUDA_EMU_SCHEDULE=random without a seed takes the run's base seed, so it replays with it.
const char* ConfigureSchedule() {
  const char* schedule = std::getenv("CUDA_EMU_SCHEDULE");
  if (schedule != nullptr && std::string(schedule) == "random") {
    cuda_emu::SetSchedule(cuda_emu::Schedule::kRandom, dynattn_test::BaseSeed());
  }
  return schedule != nullptr ? schedule : "forward";
}
#endif

int main(int argc, char** argv) {
  dynattn_test::PrintBaseSeed();
#ifdef DYNATTN_CUDA_EMULATOR
  std::printf("emulated schedule: %s\n", ConfigureSchedule());
#endif
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::printf("gpu suite skipped: no usable CUDA device (cudaGetDeviceCount: %s)\n",
                error != cudaSuccess ? CudaError(error).c_str() : "0 devices");
    return dynattn_test::kExitSkipped;
  }
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess) {
    std::printf("gpu suite on %s (sm_%d%d)\n", properties.name, properties.major, properties.minor);
  }
  doctest::Context context(argc, argv);
  const int status = context.run();
#ifdef DYNATTN_CUDA_EMULATOR
  const cuda_emu::Stats stats = cuda_emu::GetStats();
  std::printf(
      "emulated: %lld launches of %lld kernels, %lld blocks, %lld threads, %lld fiber "
      "switches\n",
      static_cast<long long>(stats.launches), static_cast<long long>(stats.kernels),
      static_cast<long long>(stats.blocks), static_cast<long long>(stats.threads),
      static_cast<long long>(stats.switches));
#endif
  return status;
}

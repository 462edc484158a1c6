// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynattn_device_bench: the CUDA module on a real GPU, for the device kit (scripts/device_kit.sh).
//
//   dynattn_device_bench info      the device's properties, driver and runtime versions (JSON)
//   dynattn_device_bench timings   serving steps timed with CUDA events (JSON on stdout);
//                                  --small: tiny steps, for the CUDA emulator's test of it
//
// Why this shape: an engine plans a step once and runs it per layer on its own stream, so each
// step is planned once and `Run*` is timed, median of `--iters` calls after `--warmup`, with
// events on the Context's stream around each call (the index staging copies included, as an
// engine pays them). Each step's tensors are built on the host by the benchmark's step builders
// (bench/serving_step.h, bench/shared_prefix.h), copied to device memory, and its output is
// compared with the CPU library's on the same inputs, so that a timing of wrong work shows.
// Bandwidth is reported against a device-to-device copy measured in the same run
// ((read + written bytes) / time), prefill also as TFLOP/s. Exits 77 without a device.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/serving_step.h"
#include "bench/shared_prefix.h"
#include "dynattn/dynattn.h"
#include "dynattn/plan.h"
#include "reference/reference.h"

namespace dynattn::bench {
namespace {

using dynattn_ref::Array;
using dynattn_ref::Dt;

constexpr int kExitSkipped = 77;

bool CudaOk(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s (%s)\n", what, cudaGetErrorName(error), cudaGetErrorString(error));
  return false;
}

#define CUDA_OR_FAIL(call)                    \
  do {                                        \
    if (!CudaOk((call), #call)) std::exit(1); \
  } while (false)

/// Device copies of a step's host arrays, and the rebasing of views and cache descriptors from
/// host pointers to those copies.
class DeviceMirror {
 public:
  DeviceMirror() = default;
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;
  ~DeviceMirror() {
    for (auto& [host, buffer] : buffers_) cudaFree(buffer.device);
  }

  /// Copies `array` to the device (once); later rebasing maps its bytes there.
  void Add(Array& array) {
    if (array.bytes.empty() || buffers_.count(array.bytes.data()) != 0) return;
    Buffer buffer{nullptr, array.bytes.size()};
    CUDA_OR_FAIL(cudaMalloc(&buffer.device, buffer.bytes));
    CUDA_OR_FAIL(
        cudaMemcpy(buffer.device, array.bytes.data(), buffer.bytes, cudaMemcpyHostToDevice));
    buffers_[array.bytes.data()] = buffer;
  }

  /// The device address of host address `host`, or `host` itself when no copy holds it.
  void* Rebase(const void* host) const {
    const auto* p = static_cast<const uint8_t*>(host);
    auto it = buffers_.upper_bound(p);
    if (p == nullptr || it == buffers_.begin()) return const_cast<void*>(host);
    --it;
    if (p >= it->first + it->second.bytes) return const_cast<void*>(host);
    return static_cast<uint8_t*>(it->second.device) + (p - it->first);
  }

  /// `view` on the device when its memory was copied there (index tensors stay on the host).
  TensorView Place(TensorView view) const {
    void* device = Rebase(view.data);
    if (device == view.data) return view;
    view.data = device;
    view.device = Device::kCuda;
    return view;
  }

  void Place(CacheDesc* desc) const {
    for (CachePlane* plane : {&desc->key, &desc->value}) {
      plane->data = Rebase(plane->data);
      plane->scale = Rebase(plane->scale);
    }
    desc->device = Device::kCuda;
  }

  /// Copies the device bytes of `array` back into it.
  void Fetch(Array& array) const {
    if (array.bytes.empty()) return;
    CUDA_OR_FAIL(cudaMemcpy(array.bytes.data(), Rebase(array.bytes.data()), array.bytes.size(),
                            cudaMemcpyDeviceToHost));
  }

 private:
  struct Buffer {
    void* device;
    size_t bytes;
  };
  std::map<const uint8_t*, Buffer> buffers_;
};

/// The data tensors of a step (everything but the int64 index tensors) go to the device.
void MirrorData(dynattn_ref::Tensors& inputs, Array* out, DeviceMirror* mirror) {
  for (auto& [name, array] : inputs) {
    if (array.dt != Dt::kI64) mirror->Add(array);
  }
  mirror->Add(*out);
}

/// Median and minimum of `samples` (milliseconds).
struct Times {
  double median_ms = 0;
  double min_ms = 0;
};

Times Summarize(std::vector<float> samples) {
  std::sort(samples.begin(), samples.end());
  Times t;
  const size_t n = samples.size();
  t.median_ms = n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.min_ms = samples.front();
  return t;
}

/// Times `call` (which enqueues on `stream` and returns when the stream is done).
template <class Call>
Times TimeOnStream(cudaStream_t stream, int warmup, int iters, Call call) {
  for (int i = 0; i < warmup; ++i) call();
  cudaEvent_t start, stop;
  CUDA_OR_FAIL(cudaEventCreate(&start));
  CUDA_OR_FAIL(cudaEventCreate(&stop));
  std::vector<float> samples;
  for (int i = 0; i < iters; ++i) {
    CUDA_OR_FAIL(cudaEventRecord(start, stream));
    call();
    CUDA_OR_FAIL(cudaEventRecord(stop, stream));
    CUDA_OR_FAIL(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OR_FAIL(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return Summarize(samples);
}

/// (read + written bytes) / time of a device-to-device copy of `bytes`, in GB/s.
double CopyBandwidth(size_t bytes, cudaStream_t stream, int warmup, int iters) {
  void *from = nullptr, *to = nullptr;
  CUDA_OR_FAIL(cudaMalloc(&from, bytes));
  CUDA_OR_FAIL(cudaMalloc(&to, bytes));
  CUDA_OR_FAIL(cudaMemset(from, 1, bytes));
  const Times t = TimeOnStream(stream, warmup, iters, [&] {
    CUDA_OR_FAIL(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  cudaFree(from);
  cudaFree(to);
  return 2.0 * static_cast<double>(bytes) / (t.median_ms * 1e6);
}

/// One timed step.
struct Row {
  std::string name;
  std::string kind;  ///< "decode", "prefill" or "unified"
  Times times;
  double bytes = 0;  ///< K, V and scale bytes the step reads (shared blocks once).
  double flops = 0;
  double max_diff = 0;  ///< Largest |device - CPU| of the output, over max(1, max |CPU|).
  double allowed = 0;   ///< Its bound (the activation's tolerance, twice).
  std::string error;    ///< Non-empty when the step failed.
};

/// Compares the device output with the CPU library's.
void Compare(const Array& device, const Array& cpu, double allowed, Row* row) {
  double largest = 1, diff = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double c = dynattn_ref::LoadAsDouble(cpu, i), d = dynattn_ref::LoadAsDouble(device, i);
    largest = std::max(largest, std::fabs(c));
    diff = std::isfinite(d) ? std::max(diff, std::fabs(d - c)) : INFINITY;
  }
  row->max_diff = diff / largest;
  row->allowed = allowed;
  if (!(row->max_diff <= allowed)) row->error = "device output differs from the CPU's";
}

double Allowed(DType activation) { return activation == DType::kBF16 ? 2 * 0x1p-8 : 2 * 1e-2; }

/// The steps' sizes: the device kit's, or (--small) a few tokens of each, for the CUDA
/// emulator, on which a test runs this program.
struct Sizes {
  int num_heads = 32, num_kv_heads = 8, head_dim = 128;
  int64_t batch = 8, context = 4096, long_context = 131072, prompt = 512;
  SharedPrefixShape shared;  ///< 64 decodes over a 2048-token prefix + 256 own, fp16.
  size_t copy_bytes = size_t{1} << 30;

  static Sizes Small() {
    Sizes s;
    s.num_heads = 4, s.num_kv_heads = 2, s.head_dim = 64;
    s.batch = 2, s.context = 96, s.long_context = 1100, s.prompt = 24;
    s.shared.requests = 3, s.shared.prefix = 32, s.shared.own = 16;
    s.shared.num_heads = 4, s.shared.num_kv_heads = 2, s.shared.head_dim = 64;
    s.copy_bytes = size_t{1} << 20;
    return s;
  }
};

struct Settings {
  int warmup = 5;
  int iters = 20;
  Sizes sizes;
};

/// A step's output on both sides: the CPU library's (computed first) and the device's copy.
struct Outputs {
  const DeviceMirror* mirror;
  Array* device;
  const Array* cpu;
  double allowed;  ///< Largest |device - CPU| / max(1, max |CPU|) accepted.
};

/// Runs a step planned as `planned` on the device once, compares its output with the CPU's,
/// then times `run` on `stream` (errors land in `row`).
template <class Args>
void CheckAndTime(Status planned, const Plan& plan,
                  Status (*run)(const Plan&, const Args&, Context*, const LayerAttrs*),
                  const Args& args, const Outputs& out, const Settings& settings,
                  cudaStream_t stream, Row* row) {
  ContextOptions options;
  options.cuda_stream = stream;
  Context context(options);
  const Status status = planned.ok() ? run(plan, args, &context, nullptr) : planned;
  if (!status.ok()) {
    row->error = "CUDA: " + status.message();
    return;
  }
  out.mirror->Fetch(*out.device);
  Compare(*out.device, *out.cpu, out.allowed, row);
  row->times = TimeOnStream(stream, settings.warmup, settings.iters, [&] {
    const Status s = run(plan, args, &context, nullptr);
    if (!s.ok()) row->error = "CUDA: " + s.message();
  });
}

Row TimeCacheStep(const std::string& name, const StepShape& shape, const Settings& settings,
                  cudaStream_t stream) {
  Row row;
  row.name = name;
  row.kind = shape.decoding_batches > 0 ? "decode" : "prefill";
  Step step = BuildStep(shape, 2026);
  row.bytes = KvBytesRead(step);
  row.flops = AttentionFlops(step);
  const Dt out_dt = shape.activation == DType::kBF16 ? Dt::kBF16 : Dt::kF16;
  Array cpu_out = dynattn_ref::MakeArray(out_dt, step.inputs.at("query").shape);
  Array device_out = cpu_out;
  DeviceMirror mirror;
  MirrorData(step.inputs, &device_out, &mirror);  // before the CPU call writes the new tokens
  const Status cpu = RunStep(&step, &cpu_out);
  if (!cpu.ok()) {
    row.error = "CPU: " + cpu.message();
    return row;
  }
  MultiHeadCacheAttentionArgs args = StepArgs(&step, &device_out);
  for (TensorView* v : {&args.query, &args.current_key, &args.current_value, &args.cache,
                        &args.scale, &args.attn_output}) {
    *v = mirror.Place(*v);
  }
  Plan plan;
  const Status planned = PlanMultiHeadCacheAttention(step.attrs, args, &plan);
  CheckAndTime(planned, plan, &RunMultiHeadCacheAttention, args,
               Outputs{&mirror, &device_out, &cpu_out, Allowed(shape.activation)}, settings, stream,
               &row);
  return row;
}

Row TimeSharedPrefix(const Settings& settings, cudaStream_t stream) {
  const SharedPrefixShape& shape = settings.sizes.shared;
  Row row;
  row.name = "unified_" + SharedPrefixName(shape);
  row.kind = "unified";
  SharedPrefixStep step = BuildSharedPrefixStep(shape, 2026);
  const double unique_rows = static_cast<double>(shape.prefix + shape.requests * (shape.own + 1));
  row.bytes = unique_rows * shape.num_kv_heads * 2.0 * shape.head_dim * 2.0;  // K and V, fp16
  row.flops = SharedPrefixFlops(shape);
  Array cpu_out = dynattn_ref::MakeArray(Dt::kF16, step.inputs.at("query").shape);
  Array device_out = cpu_out;
  DeviceMirror mirror;
  MirrorData(step.inputs, &device_out, &mirror);
  const Status cpu = RunUnified(&step, &cpu_out);
  if (!cpu.ok()) {
    row.error = "CPU: " + cpu.message();
    return row;
  }
  BlockCache cache;
  UnifiedAttentionArgs args;
  Status planned = UnifiedArgs(&step, &device_out, &cache, &args);
  mirror.Place(&cache.cache);
  for (TensorView* v : {&args.query, &args.current_key, &args.current_value, &args.attn_output}) {
    *v = mirror.Place(*v);
  }
  Plan plan;
  if (planned.ok()) planned = PlanUnifiedAttention(MakeUnifiedAttrs(shape), args, &plan);
  CheckAndTime(planned, plan, &RunUnifiedAttention, args,
               Outputs{&mirror, &device_out, &cpu_out, Allowed(DType::kF16)}, settings, stream,
               &row);
  return row;
}

StepShape DecodeShape(const Sizes& sizes, int64_t batch, int64_t context, int quant_bit,
                      DType activation, DType plain_cache) {
  StepShape s;
  s.num_heads = sizes.num_heads;
  s.num_kv_heads = sizes.num_kv_heads;
  s.head_dim = sizes.head_dim;
  s.quant_bit = quant_bit;
  s.activation = activation;
  s.plain_cache = plain_cache;
  s.requests.assign(batch, StepRequest{context - 1, 1});
  s.decoding_batches = batch;
  return s;
}

std::vector<Row> TimeAll(const Settings& settings, double* copy_gbps) {
  cudaStream_t stream;
  CUDA_OR_FAIL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Sizes& z = settings.sizes;
  *copy_gbps = CopyBandwidth(z.copy_bytes, stream, settings.warmup, settings.iters);
  std::fprintf(stderr, "device-to-device copy: %.0f GB/s\n", *copy_gbps);
  std::vector<Row> rows;
  auto add = [&](Row row) {
    std::fprintf(stderr, "%-40s %9.4f ms  %s\n", row.name.c_str(), row.times.median_ms,
                 row.error.empty() ? "ok" : row.error.c_str());
    rows.push_back(std::move(row));
  };
  const std::string batch = "decode_" + std::to_string(z.batch) + "x" + std::to_string(z.context);
  const DType f16 = DType::kF16, bf16 = DType::kBF16;
  auto decode = [&](int quant_bit, DType activation, DType cache) {
    return DecodeShape(z, z.batch, z.context, quant_bit, activation, cache);
  };
  add(TimeCacheStep(batch + "_f16", decode(0, f16, f16), settings, stream));
  add(TimeCacheStep(batch + "_bf16", decode(0, bf16, bf16), settings, stream));
  add(TimeCacheStep(batch + "_int8", decode(8, f16, f16), settings, stream));
  add(TimeCacheStep(batch + "_fp8e4m3", decode(0, f16, DType::kF8E4M3), settings, stream));
  add(TimeCacheStep("decode_1x" + std::to_string(z.long_context) + "_f16",
                    DecodeShape(z, 1, z.long_context, 0, f16, f16), settings, stream));
  StepShape prefill = DecodeShape(z, 1, z.prompt, 0, f16, f16);
  prefill.requests = {StepRequest{0, z.prompt}};
  prefill.decoding_batches = 0;
  add(TimeCacheStep("prefill_" + std::to_string(z.prompt) + "_causal_f16", prefill, settings,
                    stream));
  add(TimeSharedPrefix(settings, stream));
  cudaStreamDestroy(stream);
  return rows;
}

void PrintTimings(const std::vector<Row>& rows, double copy_gbps) {
  std::printf("{\n  \"copy_gbps\": %.3f,\n  \"rows\": [\n", copy_gbps);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double seconds = r.times.median_ms * 1e-3;
    const double gbps = seconds > 0 ? r.bytes / seconds * 1e-9 : 0;
    std::printf(
        "    {\"name\": \"%s\", \"kind\": \"%s\", \"median_ms\": %.6f, \"min_ms\": %.6f, "
        "\"bytes\": %.0f, \"flops\": %.0f, \"gbps\": %.3f, \"copy_pct\": %.2f, "
        "\"tflops\": %.4f, \"max_diff_vs_cpu\": %.3g, \"allowed_diff\": %.3g, \"ok\": %s, "
        "\"error\": \"%s\"}%s\n",
        r.name.c_str(), r.kind.c_str(), r.times.median_ms, r.times.min_ms, r.bytes, r.flops, gbps,
        copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0,
        seconds > 0 ? r.flops / seconds * 1e-12 : 0.0, r.max_diff, r.allowed,
        r.error.empty() ? "true" : "false", r.error.c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
}

int PrintInfo() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  cudaDeviceProp p{};
  CUDA_OR_FAIL(cudaGetDeviceProperties(&p, 0));
  std::printf(
      "{\"name\": \"%s\", \"compute_capability\": \"%d.%d\", \"multiprocessors\": %d, "
      "\"global_memory_bytes\": %zu, \"l2_bytes\": %d, \"shared_per_block_optin\": %zu, "
      "\"shared_per_sm\": %zu, \"registers_per_sm\": %d, \"memory_bus_bits\": %d, "
      "\"driver_version\": %d, \"runtime_version\": %d, \"ecc\": %d}\n",
      p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem, p.l2CacheSize,
      p.sharedMemPerBlockOptin, p.sharedMemPerMultiprocessor, p.regsPerMultiprocessor,
      p.memoryBusWidth, driver, runtime, p.ECCEnabled);
  return 0;
}

int Main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  Settings settings;
  bool usage = command != "info" && command != "timings";
  for (int i = 2; i < argc && !usage; ++i) {
    const std::string flag = argv[i];
    if (flag == "--small") {
      settings.sizes = Sizes::Small();
    } else if (flag == "--iters" && i + 1 < argc) {
      settings.iters = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--warmup" && i + 1 < argc) {
      settings.warmup = std::max(0, std::atoi(argv[++i]));
    } else {
      usage = true;
    }
  }
  if (usage) {
    std::fprintf(stderr, "usage: %s info | timings [--iters N] [--warmup N] [--small]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "no usable CUDA device (cudaGetDeviceCount: %s)\n",
                 error != cudaSuccess ? cudaGetErrorName(error) : "0 devices");
    return kExitSkipped;
  }
  if (command == "info") return PrintInfo();
  double copy_gbps = 0;
  const std::vector<Row> rows = TimeAll(settings, &copy_gbps);
  PrintTimings(rows, copy_gbps);
  for (const Row& r : rows) {
    if (!r.error.empty()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dynattn::bench

int main(int argc, char** argv) { return dynattn::bench::Main(argc, argv); }

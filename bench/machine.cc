// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "bench/machine.h"

#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define DYNATTN_BENCH_X86_DOTS 1
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/machine.cc"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Sum of floats [0, n) with four vector accumulators (the compiler cannot drop it).
float SumFloats(const float* data, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (size_t i = 0; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, data + i));
    a1 = hn::Add(a1, hn::LoadU(d, data + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(d, data + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(d, data + i + 3 * lanes));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

/// Sum of `bytes` (whole blocks of kDimMajorBlockBytes) read in the order the dimension-major
/// decode kernel reads fp16 keys in blocks of 128 tokens with head dimension 128: a block is 128
/// rows (dimensions) of 256 bytes, a tile of 64 tokens reads the first 128 bytes of every row and
/// the next tile the other halves. Each piece's counterpart a block ahead is prefetched as it is
/// read, the fastest of the schedules tried for this order.
float SumDimMajorTileOrder(const char* data, size_t bytes) {
  constexpr size_t kRow = 256, kPiece = 128;
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto total = hn::Zero(d);
  for (size_t block = 0; block < bytes; block += kDimMajorBlockBytes) {
    const bool last = block + kDimMajorBlockBytes == bytes;
    for (size_t half = 0; half < kRow; half += kPiece) {
      for (size_t row = 0; row < kDimMajorBlockBytes; row += kRow) {
        const char* piece = data + block + row + half;
        if (!last) {
          hwy::Prefetch(piece + kDimMajorBlockBytes);
          hwy::Prefetch(piece + kDimMajorBlockBytes + 64);
        }
        const float* floats = reinterpret_cast<const float*>(piece);
        for (size_t i = 0; i < kPiece / sizeof(float); i += lanes) {
          total = hn::Add(total, hn::LoadU(d, floats + i));
        }
      }
    }
  }
  return hn::GetLane(hn::SumOfLanes(d, total));
}

/// `iterations` rounds of 12 independent FMA chains; returns the flops done.
double FmaChains(int64_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  hn::Vec<decltype(d)> a[12];
  for (int k = 0; k < 12; ++k) a[k] = hn::Set(d, 1.0f + k);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < 12; ++k) a[k] = hn::MulAdd(a[k], m, c);
  }
  auto total = a[0];
  for (int k = 1; k < 12; ++k) total = hn::Add(total, a[k]);
  *sink = hn::GetLane(total);
  return 2.0 * 12 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn::bench {
HWY_EXPORT(SumFloats);
HWY_EXPORT(SumDimMajorTileOrder);
HWY_EXPORT(FmaChains);

namespace {

volatile float flush_sink;  // keeps the flush read alive

/// Runs body(t) on `threads` threads at once and returns the wall time in seconds.
template <typename Body>
double TimeOnThreads(int threads, const Body& body) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) workers.emplace_back([&, t] { body(t); });
  for (std::thread& w : workers) w.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Clock ticks all CPUs spent busy (user, nice, system, irq, softirq, steal) since boot.
double MachineBusyTicks() {
  std::ifstream file("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  file >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return file ? user + nice + system + irq + softirq + steal : 0;
}

/// Clock ticks this process (all its threads) has run, user and system.
double OwnTicks() {
  std::ifstream file("/proc/self/stat");
  std::string line;
  std::getline(file, line);
  const size_t name_end = line.rfind(')');  // the command name may hold spaces
  if (name_end == std::string::npos) return 0;
  std::istringstream fields(line.substr(name_end + 1));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt (fields 3-13)
  double utime = 0, stime = 0;
  fields >> utime >> stime;
  return utime + stime;
}

}  // namespace

double ForeignCpuSeconds() {
  const double ticks = MachineBusyTicks() - OwnTicks();
  return std::max(0.0, ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int CpuCount() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

double MeasureReadBandwidth(int threads) {
  const size_t n = size_t{512} << 18;  // 512 MiB of floats
  std::vector<float> data(n, 1.0f);
  std::vector<float> sums(threads);
  std::vector<double> rates;
  for (int run = 0; run < 7; ++run) {
    const double seconds = TimeOnThreads(threads, [&](int t) {
      const size_t begin = n / threads * t, end = t + 1 == threads ? n : n / threads * (t + 1);
      sums[t] = HWY_DYNAMIC_DISPATCH(SumFloats)(data.data() + begin, end - begin);
    });
    rates.push_back(static_cast<double>(n) * sizeof(float) / seconds / 1e9);
  }
  return Median(rates);
}

double MeasureDimMajorReadBandwidth(int threads) {
  const size_t blocks = (size_t{512} << 20) / kDimMajorBlockBytes;  // 512 MiB
  const size_t bytes = blocks * kDimMajorBlockBytes;
  const hwy::AlignedFreeUniquePtr<char[]> data = hwy::AllocateAligned<char>(bytes);
  std::fill(data.get(), data.get() + bytes, 1);
  std::vector<float> sums(threads);
  std::vector<double> rates;
  for (int run = 0; run < 7; ++run) {
    const double seconds = TimeOnThreads(threads, [&](int t) {
      const size_t begin = blocks * t / threads, end = blocks * (t + 1) / threads;
      sums[t] = HWY_DYNAMIC_DISPATCH(SumDimMajorTileOrder)(data.get() + begin * kDimMajorBlockBytes,
                                                           (end - begin) * kDimMajorBlockBytes);
    });
    rates.push_back(static_cast<double>(bytes) / seconds / 1e9);
  }
  return Median(rates);
}

void FlushCaches() {
  static std::vector<float> buffer(size_t{64} << 20, 1.0f);  // 256 MiB > any L3 here
  flush_sink = HWY_DYNAMIC_DISPATCH(SumFloats)(buffer.data(), buffer.size());
}

/// Median G operations per second of `chains(iterations)` (which returns the operations it did)
/// on `threads` threads at once, over 7 runs.
template <typename Chains>
double MeasurePeak(int threads, const Chains& chains) {
  std::vector<double> rates;
  for (int run = 0; run < 7; ++run) {
    std::vector<double> operations(threads);
    const double seconds = TimeOnThreads(threads, [&](int t) { operations[t] = chains(t); });
    double total = 0;
    for (double f : operations) total += f;
    rates.push_back(total / seconds / 1e9);
  }
  return Median(rates);
}

double MeasureFmaPeak(int threads) {
  std::vector<float> sinks(threads);
  return MeasurePeak(threads,
                     [&](int t) { return HWY_DYNAMIC_DISPATCH(FmaChains)(20'000'000, &sinks[t]); });
}

namespace {

#ifdef DYNATTN_BENCH_X86_DOTS
// The dot-product instructions, with 12 independent accumulators as FmaChains (their latency is
// that of an FMA or longer); each function is compiled for its own instruction set and called
// only where the CPU reports it. Each returns the operations it did (a product and its sum: 2).
constexpr int kDotChains = 12;

__attribute__((target("avx512f,avx512bf16"))) double Bf16DotChains(int64_t iterations,
                                                                   float* sink) {
  __m512 acc[kDotChains];
  for (int k = 0; k < kDotChains; ++k) acc[k] = _mm512_set1_ps(static_cast<float>(k));
  const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));  // bf16 1.0
  const __m512bh y = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3380));  // bf16 2^-24
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kDotChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
  }
  __m512 total = acc[0];
  for (int k = 1; k < kDotChains; ++k) total = _mm512_add_ps(total, acc[k]);
  alignas(64) float lanes[16];  // (GCC 12's _mm512_reduce_* warn about their own temporaries)
  _mm512_store_ps(lanes, total);
  *sink = lanes[0] + lanes[15];
  return 2.0 * 32 * kDotChains * static_cast<double>(iterations);
}

__attribute__((target("avx512f,avx512vnni"))) double Int8DotChains512(int64_t iterations,
                                                                      int* sink) {
  __m512i acc[kDotChains];
  for (int k = 0; k < kDotChains; ++k) acc[k] = _mm512_set1_epi32(k);
  const __m512i u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(-1);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kDotChains; ++k) acc[k] = _mm512_dpbusd_epi32(acc[k], u, s);
  }
  __m512i total = acc[0];
  for (int k = 1; k < kDotChains; ++k) total = _mm512_add_epi32(total, acc[k]);
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, total);
  *sink = lanes[0] + lanes[15];
  return 2.0 * 64 * kDotChains * static_cast<double>(iterations);
}

__attribute__((target("avxvnni"))) double Int8DotChains256(int64_t iterations, int* sink) {
  __m256i acc[kDotChains];
  for (int k = 0; k < kDotChains; ++k) acc[k] = _mm256_set1_epi32(k);
  const __m256i u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(-1);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int k = 0; k < kDotChains; ++k) acc[k] = _mm256_dpbusd_avx_epi32(acc[k], u, s);
  }
  __m256i total = acc[0];
  for (int k = 1; k < kDotChains; ++k) total = _mm256_add_epi32(total, acc[k]);
  *sink = _mm256_extract_epi32(total, 0);
  return 2.0 * 32 * kDotChains * static_cast<double>(iterations);
}
#endif

}  // namespace

DotPeak MeasureBf16DotPeak(int threads) {
  DotPeak peak;
#ifdef DYNATTN_BENCH_X86_DOTS
  if (__builtin_cpu_supports("avx512bf16")) {
    std::vector<float> sinks(threads);
    peak.isa = "AVX512_BF16";
    peak.gops = MeasurePeak(threads, [&](int t) { return Bf16DotChains(20'000'000, &sinks[t]); });
  }
#endif
  return peak;
}

DotPeak MeasureInt8DotPeak(int threads) {
  DotPeak peak;
#ifdef DYNATTN_BENCH_X86_DOTS
  std::vector<int> sinks(threads);
  if (__builtin_cpu_supports("avx512vnni")) {
    peak.isa = "AVX512_VNNI";
    peak.gops =
        MeasurePeak(threads, [&](int t) { return Int8DotChains512(20'000'000, &sinks[t]); });
  } else if (__builtin_cpu_supports("avxvnni")) {
    peak.isa = "AVX_VNNI";
    peak.gops =
        MeasurePeak(threads, [&](int t) { return Int8DotChains256(20'000'000, &sinks[t]); });
  }
#endif
  return peak;
}

}  // namespace dynattn::bench
#endif

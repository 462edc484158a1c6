// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "bench/machine.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/machine.cc"
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

}  // namespace

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

void FlushCaches() {
  static std::vector<float> buffer(size_t{64} << 20, 1.0f);  // 256 MiB > any L3 here
  flush_sink = HWY_DYNAMIC_DISPATCH(SumFloats)(buffer.data(), buffer.size());
}

double MeasureFmaPeak(int threads) {
  std::vector<float> sinks(threads);
  std::vector<double> rates;
  for (int run = 0; run < 7; ++run) {
    std::vector<double> flops(threads);
    const double seconds = TimeOnThreads(
        threads, [&](int t) { flops[t] = HWY_DYNAMIC_DISPATCH(FmaChains)(20'000'000, &sinks[t]); });
    double total = 0;
    for (double f : flops) total += f;
    rates.push_back(total / seconds / 1e9);
  }
  return Median(rates);
}

}  // namespace dynattn::bench
#endif

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The machine's limits, measured in the same run as the benchmarks they scale: streaming read
// bandwidth, fp32 FMA throughput and the dot-product instructions' throughput (bf16 and int8,
// where the CPU has them: the fast tier's instructions), all with every thread busy; and how much
// of the machine other processes took meanwhile, since on a shared machine that decides what the
// figures mean.

#ifndef DYNATTN_BENCH_MACHINE_H_
#define DYNATTN_BENCH_MACHINE_H_

#include <cstddef>
#include <string>

namespace dynattn::bench {

/// Median GB/s of summing a 512 MiB buffer split over `threads` threads.
double MeasureReadBandwidth(int threads);

/// A block of fp16 keys stored dimension-major (vLLM's CPU layout): 128 dimensions x 128 tokens.
constexpr size_t kDimMajorBlockBytes = 128 * 256;

/// Median GB/s of summing a 512 MiB buffer on `threads` threads in the order the dimension-major
/// decode kernel reads its keys (SumDimMajorTileOrder: 128-byte halves of 256-byte rows, a tile
/// of 64 tokens at a time, with the best prefetch schedule found): the bandwidth that order leaves
/// any kernel, against the streaming read of MeasureReadBandwidth.
double MeasureDimMajorReadBandwidth(int threads);

/// Median GFLOP/s of independent fp32 fused multiply-add chains on `threads` threads, on the
/// best SIMD target of this machine.
double MeasureFmaPeak(int threads);

/// A dot-product instruction's peak: GFLOP/s (bf16) or G int8 multiply-adds x 2 per second,
/// all threads, and the instruction set it used; `isa` is empty (and `gops` 0) where this CPU
/// has none of them.
struct DotPeak {
  double gops = 0;
  std::string isa;
};

/// Peak of `vdpbf16ps` (AVX512_BF16: bf16 pairs multiplied exactly, summed into fp32), 2 FLOPs
/// per product, on `threads` threads.
DotPeak MeasureBf16DotPeak(int threads);

/// Peak of `vpdpbusd` (AVX512_VNNI, else the 256-bit AVX_VNNI: four u8 x s8 products summed into
/// int32 per lane), 2 operations per product, on `threads` threads.
DotPeak MeasureInt8DotPeak(int threads);

/// Reads a buffer larger than the last-level cache, so the next call starts with cold caches.
void FlushCaches();

/// CPU seconds that other processes (and the hypervisor, as steal time) have used on this
/// machine since boot: all busy time in /proc/stat minus this process's own. 0 where /proc is
/// missing.
double ForeignCpuSeconds();

/// Logical CPUs of this machine.
int CpuCount();

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_MACHINE_H_

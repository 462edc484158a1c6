// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The machine's limits, measured in the same run as the benchmarks they scale: streaming read
// bandwidth and fp32 FMA throughput, both with every thread busy; and how much of the machine
// other processes took meanwhile, since on a shared machine that decides what the figures mean.

#ifndef DYNATTN_BENCH_MACHINE_H_
#define DYNATTN_BENCH_MACHINE_H_

namespace dynattn::bench {

/// Median GB/s of summing a 512 MiB buffer split over `threads` threads.
double MeasureReadBandwidth(int threads);

/// Median GFLOP/s of independent fp32 fused multiply-add chains on `threads` threads, on the
/// best SIMD target of this machine.
double MeasureFmaPeak(int threads);

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

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The table of per-target CPU kernels (one per cache element type, see cpu/kernels.h) and the
// per-worker scratch they borrow. The problems and work items they run are core/'s.

#ifndef DYNATTN_CPU_KERNEL_TABLE_H_
#define DYNATTN_CPU_KERNEL_TABLE_H_

#include <array>
#include <cstddef>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/cache_rows.h"
#include "core/plan.h"
#include "core/problem.h"

namespace dynattn::internal {

/// Per-worker scratch, grown on demand; never shared between threads.
struct Scratch {
  std::vector<float> floats;
  std::vector<const float*> parts;  ///< The states one merge reads, in merge order.

  float* Reserve(size_t n) {
    if (floats.size() < n) floats.resize(n);
    return floats.data();
  }
  const float** ReserveParts(size_t n) {
    if (parts.size() < n) parts.resize(n);
    return parts.data();
  }
  /// Reserves consecutive parts of the given sizes (in floats), each 64-byte aligned relative to
  /// the first, and returns their starts.
  template <size_t kParts>
  std::array<float*, kParts> Carve(const std::array<size_t, kParts>& sizes) {
    float* next = Reserve(CarvedFloats(sizes));
    std::array<float*, kParts> parts;
    for (size_t i = 0; i < kParts; ++i) {
      parts[i] = next;
      next += PaddedSize(sizes[i]);
    }
    return parts;
  }
  /// The floats Carve(sizes) reserves.
  template <size_t kParts>
  static size_t CarvedFloats(const std::array<size_t, kParts>& sizes) {
    size_t total = 0;
    for (size_t size : sizes) total += PaddedSize(size);
    return total;
  }

 private:
  static size_t PaddedSize(size_t n) { return (n + 15) / 16 * 16; }
};

/// Groups of the fast tier's integer key scores are powers of two and multiples of this many
/// codes, so that a group is whole steps of at most 32 codes on every target.
inline constexpr int kFastGroupMultiple = 32;

/// True when the fast tier's kernels take caches like `cache` (in decode-shaped work items):
/// int8 or int4 keys in groups that are powers of two and multiples of kFastGroupMultiple, scored
/// by integer dot products (cpu/fast_keys-inl.h), and fp16 or bf16 caches whose keys are rows,
/// read by bf16 dot products (cpu/bf16_dots-inl.h) where the CPU has them (CpuHasBf16Dots).
inline bool FastCovers(const CacheDesc& cache) {
  const int group = cache.quant_group;
  const bool quantized = cache.elem == CacheElem::kInt8 || cache.elem == CacheElem::kInt4;
  if (quantized) return group % kFastGroupMultiple == 0 && (group & (group - 1)) == 0;
  const bool halves = cache.elem == CacheElem::kF16 || cache.elem == CacheElem::kBF16;
  return halves && DimStride(cache.key) == 1;
}

/// Bit `bit` of register `reg` (0 EAX, 2 ECX) of CPUID leaf 7, sub-leaf `sub`: the instruction
/// sets the fast tier needs beyond the AVX-512 target Highway selects (false off x86).
inline bool CpuidLeaf7Bit(unsigned sub, int reg, int bit) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned regs[4] = {};
  if (__get_cpuid_count(7, sub, &regs[0], &regs[1], &regs[2], &regs[3]) == 0) return false;
  return ((regs[reg] >> bit) & 1) != 0;
#else
  return false;
#endif
}

/// True when the CPU has AVX512_VNNI (sub-leaf 0, ECX bit 11): the byte dot products.
inline bool CpuHasVnni() { return CpuidLeaf7Bit(0, 2, 11); }

/// True when the CPU has AVX512_BF16 (sub-leaf 1, EAX bit 5): the bf16 dot products.
inline bool CpuHasBf16Dots() { return CpuidLeaf7Bit(1, 0, 5); }

/// A fast-tier attention entry (CpuKernels::attend_fast).
using AttendFastFn = bool (*)(const AttentionProblem&, const WorkItem&, float* states, Scratch*);

/// A shared-path entry of unified attention (CpuKernels::attend_shared, attend_shared_fast).
using AttendSharedFn = void (*)(const AttentionProblem&, const SharedItem&, float* states,
                                Scratch*);

/// A format's fast-tier entries on this machine (null where it has none).
struct FastKernels {
  AttendFastFn attend = nullptr;
  AttendSharedFn attend_shared = nullptr;
};

/// The per-target kernels for one cache element type.
struct CpuKernels {
  /// Quantizes and stores new tokens [token_begin, token_end) (packed query-row indices).
  void (*write_tokens)(const WriteProblem&, int64_t token_begin, int64_t token_end, Scratch*);
  /// Gathers context rows [row_begin, row_end) (packed kvstarts rows) of request b.
  void (*gather_rows)(const GatherProblem&, int64_t b, int64_t row_begin, int64_t row_end,
                      Scratch*);
  /// Runs one work item; writes output rows or partial states.
  void (*attend)(const AttentionProblem&, const WorkItem&, float* states, Scratch*);
  /// Fast-tier rows (null elsewhere): runs one work item and returns true where a fast kernel
  /// covers its shape and cache; returns false, having written nothing, where `attend` must run
  /// it.
  AttendFastFn attend_fast = nullptr;
  /// Merges the partial states of one split tile and writes its output rows.
  void (*merge)(const AttentionProblem&, const MergeTask&, const float* states, Scratch*);
  /// Runs one shared-path work item of unified attention; writes partial states.
  AttendSharedFn attend_shared;
  /// Fast-tier rows over fp16 and bf16 caches (null elsewhere): attend_shared in bf16 dot
  /// products. A fast row without it runs a unified step with shared prefixes exact.
  AttendSharedFn attend_shared_fast = nullptr;
  /// Merges the parts [parts, parts + count) of one query token, in that order, and writes its
  /// output rows (and log-sum-exp when asked).
  void (*merge_parts)(const AttentionProblem&, int64_t token, const PartRef* parts, int count,
                      const float* states, Scratch*);
  /// Scratch floats the cache-I/O kernels (write_tokens, gather_rows) need for rows of head_dim.
  size_t (*io_scratch_floats)(int head_dim);
  /// Scratch floats the attention kernels (attend, attend_shared, merge, merge_parts) need for
  /// work items of at most `max_vectors` query vectors: a Run reserves them in every slot
  /// before it writes anything, so that no kernel allocates once the cache is written.
  size_t (*attention_scratch_floats)(const AttentionProblem&, int max_vectors);
};

}  // namespace dynattn::internal

#endif  // DYNATTN_CPU_KERNEL_TABLE_H_

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CPU kernel table of one cache element type: which attention path runs a work item, and the
// KeyValueCache steps.
//
// Why it looks like this: the path depends on the item's shape only (its query vectors and the
// head size), never on threads or the target, so a given item always gets the same bits.
// * Few query vectors (decode, multi-token decode): decode-inl.h, codes consumed in registers.
// * Many query vectors (prefill, prompt chunks) or head sizes that are not multiples of 16:
//   prefill-inl.h, tiles decoded once into L1/L2 scratch and reused by every query vector.

#if defined(DYNATTN_CPU_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DYNATTN_CPU_ATTENTION_INL_H_
#undef DYNATTN_CPU_ATTENTION_INL_H_
#else
#define DYNATTN_CPU_ATTENTION_INL_H_
#endif

#include "cpu/cache_io-inl.h"
#include "cpu/decode-inl.h"
#include "cpu/kernel_table.h"
#include "cpu/prefill-inl.h"
#include "cpu/softmax-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// Runs one work item through the path its shape selects.
template <CacheElem kElem>
void Attend(const internal::AttentionProblem& p, const internal::WorkItem& w, float* states,
            internal::Scratch* scratch) {
  const int vectors = p.group_size * (w.row_end - w.row_begin);
  if (!UseFusedDecode(p, vectors)) return AttendTiled<kElem>(p, w, states, scratch);
  if constexpr (kElem != CacheElem::kF16) {
    if (ValuesRound<kElem>(p)) return AttendFused<kElem, true, true>(p, w, states, scratch);
    if (KeysRound<kElem>(p)) return AttendFused<kElem, true, false>(p, w, states, scratch);
  }
  AttendFused<kElem, false, false>(p, w, states, scratch);
}

/// Scratch floats of any item of at most `max_vectors` query vectors on either path, and of the
/// merges (two padded rows).
inline size_t AttentionScratchFloats(const internal::AttentionProblem& p, int max_vectors) {
  const size_t tiled = internal::Scratch::CarvedFloats(
      ItemScratch::Sizes(PaddedVectors(std::max(1, max_vectors)), p));
  const size_t fused = internal::Scratch::CarvedFloats(FusedBlockScratch(p, kFusedMaxVectors));
  const size_t merge = 2 * static_cast<size_t>(p.padded_value_dim);
  return std::max({tiled, fused, merge});
}

template <CacheElem kElem>
internal::CpuKernels MakeCpuKernels() {
  internal::CpuKernels k;
  k.write_tokens = &WriteTokens<kElem>;
  k.gather_rows = &GatherRows<kElem>;
  k.attend = &Attend<kElem>;
  k.merge = &MergeSplits;
  k.attend_shared = &AttendShared<kElem>;
  k.merge_parts = &MergeParts;
  k.io_scratch_floats = &IoScratchFloats;
  k.attention_scratch_floats = &AttentionScratchFloats;
  return k;
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#endif  // DYNATTN_CPU_ATTENTION_INL_H_

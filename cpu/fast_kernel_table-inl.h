// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Instantiates the fast tier's attention entry of one cache element type for every compiled
// Highway target. Included (once per target, through hwy/foreach_target.h) by the thin
// cpu/fast_kernels_*.cc files, which define DYNATTN_FAST_ELEM (a CacheElem enumerator),
// DYNATTN_FAST_TABLE (the per-target function name) and DYNATTN_FAST_GETTER (the dispatching
// getter in dynattn::internal). The fused decode and, for fp16 and bf16 caches, the tiled bf16
// kernel are compiled here: every other item of a fast call runs the exact kernels of
// cpu/kernels_*.cc. No include guard on purpose.

#include "cpu/bf16_tiles-inl.h"
#include "cpu/decode-inl.h"
#include "cpu/kernel_table.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// The fast tier over fp16 and bf16 caches: decode-shaped items through the fused decode's bf16
/// dot products, the others (prompts, chunks) through tiles of bf16 pairs.
template <CacheElem kElem>
bool AttendFastBf16Dots(const internal::AttentionProblem& p, const internal::WorkItem& w,
                        float* states, internal::Scratch* scratch) {
  if (AttendFastDecode<kElem>(p, w, states, scratch)) return true;
  if (!internal::FastCovers(p.kv.cache)) return false;
  AttendFastTiled<kElem>(p, w, states, scratch);
  return true;
}

/// This target's fast entries; none where its kernels cannot run (the bf16 dot products of fp16
/// and bf16 caches: off the AVX-512 targets, or on a CPU without AVX512_BF16; those caches' shared
/// prefixes take them too). Int8 and int4 caches take VNNI's byte dot products on the AVX-512
/// targets of CPUs with AVX512_VNNI, in decode-shaped items only.
internal::FastKernels DYNATTN_FAST_TABLE() {
  constexpr CacheElem kElem = CacheElem::DYNATTN_FAST_ELEM;
  if constexpr (IsBf16DotElem<kElem>()) {
    if constexpr (!kBf16DotsTarget) {
      return {};  // nothing of the kernels is compiled for this target
    } else {
      if (!internal::CpuHasBf16Dots()) return {};
      return {&AttendFastBf16Dots<kElem>, &AttendFastShared<kElem>};
    }
  } else {
    if constexpr (kVnniTarget) {
      if (internal::CpuHasVnni()) return {&AttendFastDecode<kElem, true>, nullptr};
    }
    return {&AttendFastDecode<kElem>, nullptr};
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(DYNATTN_FAST_TABLE);
namespace internal {
FastKernels DYNATTN_FAST_GETTER() { return HWY_DYNAMIC_DISPATCH(DYNATTN_FAST_TABLE)(); }
}  // namespace internal
}  // namespace dynattn
#endif

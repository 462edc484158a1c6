// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Instantiates the fast tier's attention entry of one cache element type for every compiled
// Highway target. Included (once per target, through hwy/foreach_target.h) by the thin
// cpu/fast_kernels_*.cc files, which define DYNATTN_FAST_ELEM (a CacheElem enumerator),
// DYNATTN_FAST_TABLE (the per-target function name) and DYNATTN_FAST_GETTER (the dispatching
// getter in dynattn::internal). Only the fused decode is compiled here: every other item of a
// fast call runs the exact kernels of cpu/kernels_*.cc. No include guard on purpose.

#include "cpu/decode-inl.h"
#include "cpu/kernel_table.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dynattn {
namespace HWY_NAMESPACE {

/// This target's fast entry; none where its kernel cannot run (the bf16 dot products of fp16 and
/// bf16 caches: off the AVX-512 targets, or on a CPU without AVX512_BF16). Int8 and int4 caches
/// take VNNI's byte dot products on the AVX-512 targets of CPUs with AVX512_VNNI.
internal::AttendFastFn DYNATTN_FAST_TABLE() {
  constexpr CacheElem kElem = CacheElem::DYNATTN_FAST_ELEM;
  if constexpr (IsBf16DotElem<kElem>() && !kBf16DotsTarget) {
    return nullptr;  // nothing of the kernel is compiled for this target
  } else {
    if (IsBf16DotElem<kElem>() && !internal::CpuHasBf16Dots()) return nullptr;
    if constexpr (!IsBf16DotElem<kElem>() && kVnniTarget) {
      if (internal::CpuHasVnni()) return &AttendFastDecode<kElem, true>;
    }
    return &AttendFastDecode<kElem>;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dynattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dynattn {
HWY_EXPORT(DYNATTN_FAST_TABLE);
namespace internal {
AttendFastFn DYNATTN_FAST_GETTER() { return HWY_DYNAMIC_DISPATCH(DYNATTN_FAST_TABLE)(); }
}  // namespace internal
}  // namespace dynattn
#endif

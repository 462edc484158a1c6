// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Umbrella header: everything a caller of libdynattn needs.

#ifndef DYNATTN_DYNATTN_H_
#define DYNATTN_DYNATTN_H_

#include "dynattn/adapters.h"
#include "dynattn/cache.h"
#include "dynattn/export.h"
#include "dynattn/half.h"
#include "dynattn/merge.h"
#include "dynattn/named_args.h"
#include "dynattn/ops.h"
#include "dynattn/plan.h"
#include "dynattn/status.h"
#include "dynattn/types.h"
#include "dynattn/unified.h"
#include "dynattn/version.h"

namespace dynattn {

/// Name of the SIMD target the CPU kernels dispatch to on this machine (e.g. "AVX3").
DYNATTN_EXPORT const char* CpuTargetName();

/// Makes the CPU kernels dispatch to one compiled SIMD target of this machine, by the name
/// CpuTargetName() would give it ("AVX2", "AVX3", "SSE4", "EMU128", ...; case-insensitive), or
/// to the best one again for an empty name. For comparing targets on one machine (`dynattn bench
/// --target avx2`); process-wide, so call it while no call runs. Results of the FMA targets are
/// the same bits.
DYNATTN_EXPORT Status ForceCpuTarget(const char* name);

}  // namespace dynattn

#endif  // DYNATTN_DYNATTN_H_

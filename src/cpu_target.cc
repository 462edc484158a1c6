// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// CpuTargetName (dynattn/dynattn.h): the Highway target the kernels dispatch to on this CPU.

#include "dynattn/dynattn.h"
#include "hwy/targets.h"

namespace dynattn {

const char* CpuTargetName() {
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(usable & -usable);  // the best one: lowest bit
}

}  // namespace dynattn

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// CpuTargetName (dynattn/dynattn.h): the Highway target the kernels dispatch to on this CPU.

#include <cctype>
#include <string>

#include "dynattn/dynattn.h"
#include "hwy/targets.h"
#include "src/dispatch.h"

namespace dynattn {

const char* CpuTargetName() {
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(usable & -usable);  // the best one: lowest bit
}

namespace {

bool SameName(const char* a, const char* b) {
  for (; *a != '\0' && *b != '\0'; ++a, ++b) {
    if (std::tolower(static_cast<unsigned char>(*a)) !=
        std::tolower(static_cast<unsigned char>(*b)))
      return false;
  }
  return *a == *b;
}

}  // namespace

Status ForceCpuTarget(const char* name) {
  if (name == nullptr || *name == '\0') {
    hwy::SetSupportedTargetsForTest(0);  // 0: the CPU's own targets again
    internal::RefillCpuRows();
    return Status::Ok();
  }
  hwy::SetSupportedTargetsForTest(0);
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  std::string known;
  for (int64_t rest = usable; rest != 0; rest &= rest - 1) {
    const int64_t target = rest & -rest;
    if (SameName(name, hwy::TargetName(target))) {
      hwy::SetSupportedTargetsForTest(target);
      internal::RefillCpuRows();
      return Status::Ok();
    }
    known += std::string(known.empty() ? "" : ", ") + hwy::TargetName(target);
  }
  return Status::Unsupported("target", std::string("\"") + name +
                                           "\" is not a target compiled in and supported here (" +
                                           known + ")");
}

}  // namespace dynattn

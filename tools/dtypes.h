// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The library's DType for the reference's Dt and back: one mapping for the test support, the
// CLI tests and the `golden` command (which writes reference cases as .npy files). Header-only,
// so the tool needs no test library; the reference itself stays free of include/dynattn.

#ifndef DYNATTN_TOOLS_DTYPES_H_
#define DYNATTN_TOOLS_DTYPES_H_

#include "dynattn/types.h"
#include "reference/reference.h"

namespace dynattn::cli {

/// The element types both sides have, paired.
struct DtPair {
  dynattn_ref::Dt ref;
  dynattn::DType lib;
};
inline constexpr DtPair kDtPairs[] = {{dynattn_ref::Dt::kF32, dynattn::DType::kF32},
                                      {dynattn_ref::Dt::kF16, dynattn::DType::kF16},
                                      {dynattn_ref::Dt::kI8, dynattn::DType::kI8},
                                      {dynattn_ref::Dt::kI64, dynattn::DType::kI64},
                                      {dynattn_ref::Dt::kBF16, dynattn::DType::kBF16},
                                      {dynattn_ref::Dt::kF8E4M3, dynattn::DType::kF8E4M3},
                                      {dynattn_ref::Dt::kF8E5M2, dynattn::DType::kF8E5M2}};

/// The library's element type for a reference one.
inline dynattn::DType DTypeOf(dynattn_ref::Dt dt) {
  for (const DtPair& p : kDtPairs) {
    if (p.ref == dt) return p.lib;
  }
  return dynattn::DType::kF32;
}

/// The reference's element type for a library one (int32, which it lacks, reads as int64).
inline dynattn_ref::Dt RefDtOf(dynattn::DType dtype) {
  for (const DtPair& p : kDtPairs) {
    if (p.lib == dtype) return p.ref;
  }
  return dynattn_ref::Dt::kI64;
}

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_DTYPES_H_

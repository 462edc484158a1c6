// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// DYNATTN_EXPORT marks the public API. The shared library is compiled with hidden visibility, so
// only what carries this macro is exported: internals (dynattn::internal, the SIMD kernels) stay
// out of the dynamic symbol table and may change without breaking the ABI.

#ifndef DYNATTN_EXPORT_H_
#define DYNATTN_EXPORT_H_

#if defined(_WIN32)
#define DYNATTN_EXPORT
#else
#define DYNATTN_EXPORT __attribute__((visibility("default")))
#endif

#endif  // DYNATTN_EXPORT_H_

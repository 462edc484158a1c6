// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CPU backend: the entries of the dispatch table's CPU rows (src/dispatch.h). Each runs the
// row's Highway kernels over the independent pieces of a plan on the Context's threads, with
// per-worker scratch and the Context's partial-state workspace.

#ifndef DYNATTN_SRC_EXECUTE_H_
#define DYNATTN_SRC_EXECUTE_H_

#include "src/dispatch.h"

#endif  // DYNATTN_SRC_EXECUTE_H_

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/aliasing.h"

#include <cstdint>
#include <string>

namespace dynattn::internal {

bool Overlap(const TensorView& a, const TensorView& b) {
  if (!a.present() || !b.present() || a.NumElements() == 0 || b.NumElements() == 0) return false;
  if (a.data == nullptr || b.data == nullptr) return false;  // an output not yet allocated
  const auto a0 = reinterpret_cast<uintptr_t>(a.data);
  const auto b0 = reinterpret_cast<uintptr_t>(b.data);
  // Extents are validated (at most 2^46 elements) before this runs: the ends cannot wrap.
  return a0 < b0 + b.NumBytes() && b0 < a0 + a.NumBytes();
}

Status CheckNoAliasing(std::initializer_list<CallBuffer> buffers, CallPhase phase) {
  for (const CallBuffer* w = buffers.begin(); w != buffers.end(); ++w) {
    if (!w->written) continue;
    for (const CallBuffer& other : buffers) {
      if (&other == w || (other.index && phase == CallPhase::kRun)) continue;
      if (!Overlap(*w->view, *other.view)) continue;
      return Status::Invalid(
          w->name, std::string("overlaps ") + (other.written ? "the output " : "the input ") +
                       other.name +
                       " (rule: a buffer the call writes shares no memory with any other input "
                       "or output; only the cache is updated in place)");
    }
  }
  return Status::Ok();
}

}  // namespace dynattn::internal

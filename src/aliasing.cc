// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/aliasing.h"

#include <cstdint>
#include <string>

#include "src/validate.h"

namespace dynattn::internal {

namespace {

/// The bytes [begin, end) of a view; empty when it is absent, has no elements, or is an output
/// not yet allocated (null data).
struct ByteSpan {
  uintptr_t begin = 0, end = 0;
  bool empty() const { return begin == end; }
};

ByteSpan SpanOf(const TensorView& t) {
  if (!t.present() || t.data == nullptr) return {};
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  // Extents are validated (at most 2^46 elements) before this runs: the end cannot wrap. A
  // row-strided view spans its first row to its last (the gaps between rows included).
  return {begin, begin + static_cast<uintptr_t>(SpannedElements(t)) * DTypeSize(t.dtype)};
}

bool Overlap(ByteSpan a, ByteSpan b) {
  return !a.empty() && !b.empty() && a.begin < b.end && b.begin < a.end;
}

}  // namespace

Status CheckNoAliasing(const CallBuffer* begin, const CallBuffer* end, CallPhase phase) {
  for (const CallBuffer* w = begin; w != end; ++w) {
    if (!w->written) continue;
    const ByteSpan written = SpanOf(*w->view);  // once per written buffer, not per pair
    if (written.empty()) continue;
    for (const CallBuffer* o = begin; o != end; ++o) {
      const CallBuffer& other = *o;
      if (&other == w || (other.index && phase == CallPhase::kRun)) continue;
      if (!Overlap(written, SpanOf(*other.view))) continue;
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

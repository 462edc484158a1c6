// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The aliasing rule every call checks before it writes: no buffer the call writes (the cache and
// its scales, the outputs) shares a byte with another buffer of the call, read or written. The
// cache's own in-place update is the one overlap allowed, and it is one buffer. Why: an output
// laid over an index tensor or a cache slot over the offsets would be overwritten halfway through
// the call, and the kernels would then read garbage offsets. Raw CacheDesc / BlockCache pointers
// are trusted by design (the library cannot know their extent), so only tensors are checked.

#ifndef DYNATTN_SRC_ALIASING_H_
#define DYNATTN_SRC_ALIASING_H_

#include <cstddef>
#include <initializer_list>

#include "dynattn/status.h"
#include "dynattn/types.h"

namespace dynattn::internal {

/// One buffer of a call: its input name, the tensor, whether the call writes it, and whether it
/// is an index tensor (read when the call is planned, never by a Run).
struct CallBuffer {
  const char* name;
  const TensorView* view;
  bool written;
  bool index = false;
};

/// A buffer the call reads (absent views are ignored).
inline CallBuffer ReadBuffer(const char* name, const TensorView& t) { return {name, &t, false}; }
/// A buffer the call writes (absent views are ignored).
inline CallBuffer WrittenBuffer(const char* name, const TensorView& t) { return {name, &t, true}; }
/// An index tensor: read by Plan* (which copies it), not by Run*.
inline CallBuffer IndexBuffer(const char* name, const TensorView& t) {
  return {name, &t, false, true};
}

/// Which buffers a check covers: a plan's (all) or a Run's (all but the index tensors).
enum class CallPhase { kPlan, kRun };

/// The aliasing rule over `buffers`: the first written buffer that overlaps any other one gives
/// an InvalidArgument naming both, e.g. "attn_output: overlaps seqstarts (...)".
/// Index buffers are left out in the kRun phase.
Status CheckNoAliasing(const CallBuffer* begin, const CallBuffer* end,
                       CallPhase phase = CallPhase::kPlan);
inline Status CheckNoAliasing(std::initializer_list<CallBuffer> buffers,
                              CallPhase phase = CallPhase::kPlan) {
  return CheckNoAliasing(buffers.begin(), buffers.end(), phase);
}

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_ALIASING_H_

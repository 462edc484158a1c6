// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The op tables of dynattn/op_signatures.h as data (each op's tensors as name, role and Args
// member), and what the library derives from them: the name map, the data tensors a plan records
// and each Run checks, and the aliasing rule's buffer list.

#ifndef DYNATTN_SRC_OP_FIELDS_H_
#define DYNATTN_SRC_OP_FIELDS_H_

#include <array>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <tuple>

#include "dynattn/named_args.h"
#include "dynattn/op_signatures.h"
#include "dynattn/ops.h"
#include "dynattn/unified.h"
#include "src/aliasing.h"
#include "src/ops/op_pipeline.h"

namespace dynattn::internal {

/// What a call does with a tensor (dynattn/op_signatures.h says each role's rule).
enum class TensorRole : uint8_t { kRead, kMask, kIndex, kOffsets, kHost, kWritten, kCache, kScale };

/// Whether a tensor of `role` is a data tensor (read or written besides the cache), which a plan
/// records and each Run passes again.
constexpr bool IsDataRole(TensorRole role) {
  return role == TensorRole::kRead || role == TensorRole::kMask || role == TensorRole::kWritten;
}

/// One tensor of an op's Args.
template <class Args>
struct TensorField {
  const char* name;
  TensorRole role;
  TensorView Args::*member;
};

/// OpTensors<Args>::kFields: the op's tensors in their documented order.
template <class Args>
struct OpTensors;

#define DYNATTN_TENSOR_FIELD(member, role) TensorField<A>{#member, TensorRole::k##role, &A::member},
#define DYNATTN_OP_TENSORS(Args, TENSORS)                                        \
  template <>                                                                    \
  struct OpTensors<Args> {                                                       \
    using A = Args;                                                              \
    static constexpr TensorField<A> kFields[] = {TENSORS(DYNATTN_TENSOR_FIELD)}; \
  };

DYNATTN_OP_TENSORS(KeyValueCacheArgs, DYNATTN_KEY_VALUE_CACHE_TENSORS)
DYNATTN_OP_TENSORS(MultiHeadAttentionArgs, DYNATTN_MULTI_HEAD_ATTENTION_TENSORS)
DYNATTN_OP_TENSORS(MultiHeadCacheAttentionArgs, DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS)
DYNATTN_OP_TENSORS(UnifiedAttentionArgs, DYNATTN_UNIFIED_ATTENTION_TENSORS)

#undef DYNATTN_OP_TENSORS
#undef DYNATTN_TENSOR_FIELD

/// Every tensor of an op's Args looked up by its name.
template <class Args>
Args ArgsByName(const TensorLookup& tensor) {
  Args args;
  for (const TensorField<Args>& f : OpTensors<Args>::kFields) args.*f.member = tensor(f.name);
  return args;
}

/// How many data tensors (read and written, the cache aside) an op has.
template <class Args>
constexpr size_t NumDataTensors() {
  size_t n = 0;
  for (const TensorField<Args>& f : OpTensors<Args>::kFields) {
    n += IsDataRole(f.role) ? 1 : 0;
  }
  return n;
}

/// The call's data tensors, as a plan records them and each Run checks its own.
template <class Args>
DataTensors DataTensorsOf(const Args& args) {
  static_assert(NumDataTensors<Args>() <= std::tuple_size_v<decltype(DataTensors::tensors)>);
  DataTensors tensors{};
  for (const TensorField<Args>& f : OpTensors<Args>::kFields) {
    if (IsDataRole(f.role)) {
      tensors.Add({f.name, args.*f.member});
    }
  }
  return tensors;
}

/// Widens the call's int32 index tensors in place (see WidenedIndex).
template <class Args>
void WidenIndexTensors(WidenedIndex* widen, Args* args) {
  for (const TensorField<Args>& f : OpTensors<Args>::kFields) {
    if (f.role == TensorRole::kIndex || f.role == TensorRole::kOffsets)
      args->*f.member = (*widen)(args->*f.member);
  }
}

/// Where a role's tensors stand in the aliasing rule's list, in the order its messages follow:
/// the reads, the index and host inputs, the outputs, the PMX cache, its scales.
constexpr int AliasingRank(TensorRole role) {
  switch (role) {
    case TensorRole::kRead:
    case TensorRole::kMask:
      return 0;
    case TensorRole::kIndex:
    case TensorRole::kOffsets:
    case TensorRole::kHost:
      return 1;
    case TensorRole::kWritten:
      return 2;
    case TensorRole::kCache:
      return 3;
    case TensorRole::kScale:
      return 4;
  }
  return 5;
}

/// The op's fields in aliasing-rule order (table order within a rank), computed at compile time.
template <class Args>
constexpr std::array<uint8_t, std::size(OpTensors<Args>::kFields)> AliasingOrder() {
  constexpr size_t kCount = std::size(OpTensors<Args>::kFields);
  std::array<uint8_t, kCount> order{};
  size_t next = 0;
  for (int rank = 0; rank < 5; ++rank) {
    for (size_t i = 0; i < kCount; ++i) {
      if (AliasingRank(OpTensors<Args>::kFields[i].role) == rank) {
        order[next++] = static_cast<uint8_t>(i);
      }
    }
  }
  return order;
}

/// The aliasing rule (src/aliasing.h) over the call's tensors, in AliasingOrder; the PMX cache
/// counts when `pmx_cache` (a raw CacheDesc is trusted), its scales when also `quantized`; a
/// Run's `layer` sinks replace the args' (and count in the Run phase).
template <class Args>
Status CheckOpAliasing(const Args& args, bool pmx_cache, bool quantized, CallPhase phase,
                       const LayerAttrs* layer = nullptr) {
  static const TensorView kNone;
  static constexpr auto kOrder = AliasingOrder<Args>();
  std::array<CallBuffer, kOrder.size()> buffers;
  for (size_t k = 0; k < kOrder.size(); ++k) {
    const TensorField<Args>& f = OpTensors<Args>::kFields[kOrder[k]];
    const TensorView& t = args.*f.member;
    switch (f.role) {
      case TensorRole::kRead:
      case TensorRole::kMask:
        buffers[k] = ReadBuffer(f.name, t);
        break;
      case TensorRole::kIndex:
      case TensorRole::kOffsets:
      case TensorRole::kHost:
        // A layer's sinks are read by the Run itself (the plan's were copied when planned).
        buffers[k] = layer != nullptr && std::string_view(f.name) == "sinks"
                         ? ReadBuffer(f.name, layer->sinks)
                         : IndexBuffer(f.name, t);
        break;
      case TensorRole::kWritten:
        buffers[k] = WrittenBuffer(f.name, t);
        break;
      case TensorRole::kCache:
        buffers[k] = WrittenBuffer(f.name, pmx_cache ? t : kNone);
        break;
      case TensorRole::kScale:
        buffers[k] = WrittenBuffer(f.name, pmx_cache && quantized ? t : kNone);
        break;
    }
  }
  return CheckNoAliasing(buffers.data(), buffers.data() + buffers.size(), phase);
}

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_OP_FIELDS_H_

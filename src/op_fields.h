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
#include <tuple>

#include "dynattn/named_args.h"
#include "dynattn/op_signatures.h"
#include "dynattn/ops.h"
#include "dynattn/unified.h"
#include "src/aliasing.h"
#include "src/ops/op_pipeline.h"

namespace dynattn::internal {

/// What a call does with a tensor (dynattn/op_signatures.h says each role's rule).
enum class TensorRole : uint8_t { kRead, kIndex, kHost, kWritten, kCache, kScale };

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

template <>
struct OpTensors<KeyValueCacheArgs> {
  using A = KeyValueCacheArgs;
  static constexpr TensorField<A> kFields[] = {
      DYNATTN_KEY_VALUE_CACHE_TENSORS(DYNATTN_TENSOR_FIELD)};
};
template <>
struct OpTensors<MultiHeadAttentionArgs> {
  using A = MultiHeadAttentionArgs;
  static constexpr TensorField<A> kFields[] = {
      DYNATTN_MULTI_HEAD_ATTENTION_TENSORS(DYNATTN_TENSOR_FIELD)};
};
template <>
struct OpTensors<MultiHeadCacheAttentionArgs> {
  using A = MultiHeadCacheAttentionArgs;
  static constexpr TensorField<A> kFields[] = {
      DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS(DYNATTN_TENSOR_FIELD)};
};
template <>
struct OpTensors<UnifiedAttentionArgs> {
  using A = UnifiedAttentionArgs;
  static constexpr TensorField<A> kFields[] = {
      DYNATTN_UNIFIED_ATTENTION_TENSORS(DYNATTN_TENSOR_FIELD)};
};

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
    n += f.role == TensorRole::kRead || f.role == TensorRole::kWritten ? 1 : 0;
  }
  return n;
}

/// The call's data tensors, as a plan records them and each Run checks its own.
template <class Args>
DataTensors DataTensorsOf(const Args& args) {
  static_assert(NumDataTensors<Args>() <= std::tuple_size_v<decltype(DataTensors::tensors)>);
  DataTensors tensors{};
  for (const TensorField<Args>& f : OpTensors<Args>::kFields) {
    if (f.role == TensorRole::kRead || f.role == TensorRole::kWritten) {
      tensors.Add({f.name, args.*f.member});
    }
  }
  return tensors;
}

/// Widens the call's int32 index tensors in place (see WidenedIndex).
template <class Args>
void WidenIndexTensors(WidenedIndex* widen, Args* args) {
  for (const TensorField<Args>& f : OpTensors<Args>::kFields) {
    if (f.role == TensorRole::kIndex) args->*f.member = (*widen)(args->*f.member);
  }
}

/// The aliasing rule (src/aliasing.h) over the call's tensors, in the order its messages
/// follow: the reads, the index and host inputs, the outputs, then the PMX cache (when
/// `pmx_cache`: a raw CacheDesc is trusted) and its scales (when also `quantized`).
template <class Args>
Status CheckOpAliasing(const Args& args, bool pmx_cache, bool quantized, CallPhase phase) {
  static const TensorView kNone;
  std::array<CallBuffer, std::size(OpTensors<Args>::kFields)> buffers{};
  size_t count = 0;
  for (int pass = 0; pass < 5; ++pass) {
    for (const TensorField<Args>& f : OpTensors<Args>::kFields) {
      const TensorView& t = args.*f.member;
      switch (f.role) {
        case TensorRole::kRead:
          if (pass == 0) buffers[count++] = ReadBuffer(f.name, t);
          break;
        case TensorRole::kIndex:
        case TensorRole::kHost:
          if (pass == 1) buffers[count++] = IndexBuffer(f.name, t);
          break;
        case TensorRole::kWritten:
          if (pass == 2) buffers[count++] = WrittenBuffer(f.name, t);
          break;
        case TensorRole::kCache:
          if (pass == 3) buffers[count++] = WrittenBuffer(f.name, pmx_cache ? t : kNone);
          break;
        case TensorRole::kScale:
          if (pass == 4)
            buffers[count++] = WrittenBuffer(f.name, pmx_cache && quantized ? t : kNone);
          break;
      }
    }
  }
  return CheckNoAliasing(buffers.data(), buffers.data() + count, phase);
}

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_OP_FIELDS_H_

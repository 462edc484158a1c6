// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Validation: every rule of spec pmx-ops §7.3 and §12, checked before anything is written.
// Each function either fills the kernels' view of the call or returns a Status that names the
// offending input and the rule; nothing is written in either case.

#ifndef DYNATTN_SRC_VALIDATE_H_
#define DYNATTN_SRC_VALIDATE_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "cpu/kernel_table.h"
#include "dynattn/ops.h"

namespace dynattn::internal {

/// A validated KeyValueCache call.
struct KeyValueCacheCall {
  WriteProblem write;
  GatherProblem gather;
};

/// A validated MultiHeadAttention call.
struct MultiHeadAttentionCall {
  AttentionProblem attention;
  std::vector<float> alibi_slopes;  ///< Owned storage behind attention.alibi_slopes.
  std::vector<float> sinks;         ///< Owned storage behind attention.sinks.
};

/// A validated MultiHeadCacheAttention call.
struct MultiHeadCacheAttentionCall {
  WriteProblem write;
  AttentionProblem attention;
  std::vector<float> alibi_slopes;
  std::vector<float> sinks;
};

Status ValidateKeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                             KeyValueCacheCall* call);
Status ValidateMultiHeadAttention(const AttentionAttrs& attrs, const MultiHeadAttentionArgs& args,
                                  MultiHeadAttentionCall* call);
Status ValidateMultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                       const MultiHeadCacheAttentionArgs& args,
                                       MultiHeadCacheAttentionCall* call);

// Building blocks shared by the validators of every op (validate.cc).

/// Largest element count a view may have (keeps every offset product far from int64 overflow).
inline constexpr int64_t kMaxElements = int64_t{1} << 46;
/// Positions a context shard's offsets, counts and start positions must stay below (keeps every
/// position sum far from int64 overflow).
inline constexpr int64_t kMaxPosition = kMaxElements;

/// The activations that may be row-strided (TensorView::IsRowStrided): query, current_key,
/// current_value, key, value and attn_output.
bool RowStridable(const char* name);
/// Elements between a row and the next of a validated view: strides[0] when it has more than one
/// row, else the dense row's length (then any stride is as good as dense).
int64_t RowStride(const TensorView& t);
/// Elements from a validated view's first element to one past its last (0 when it is empty).
int64_t SpannedElements(const TensorView& t);

/// "(2, 3, 4)"; rank 1 reads "(5,)" and rank 0 "()", as NumPy prints shapes.
std::string ShapeString(const int64_t* shape, int rank);
std::string ShapeString(const TensorView& t);
/// Whether a tensor's data pointer may be null (with elements) when its call is planned.
enum class PlanData {
  kRequired,   ///< Inputs: validation reads them.
  kMayBeNull,  ///< Outputs: a plan records their shape, dtype and device; Run needs the memory.
};
/// Rank, extents, density and data pointer of a present tensor.
Status CheckStorage(const char* name, const TensorView& t,
                    PlanData data_rule = PlanData::kRequired);
/// quant_bit is 0, 4 or 8 and head_dim >= 1; quantized, quant_group divides head_dim and is even
/// for int4 (so int4 rows are whole bytes). Names quant_bit, quant_group or head_dim.
Status CheckQuantization(int quant_bit, int quant_group, int64_t head_dim);
/// The element a cache of `quant_bit` (checked) stores in a tensor of `dtype`.
CacheElem CacheElemOf(int quant_bit, DType dtype);
/// The unquantized cache element MHA's packed K/V tensors of activation type `io` are read as.
CacheElem PlainCacheElemOf(DType io);
/// A float as messages print it ("%.9g", "nan", "inf").
std::string FloatString(float x);
/// window_left >= -1; logits_soft_cap and softmax_scale finite and >= 0 (0 = off / default).
Status CheckScoreOptions(int window_left, float logits_soft_cap, float softmax_scale);
/// The optional `sinks` input: float32 (num_heads) in CPU memory, every entry finite.
Status CheckSinks(const TensorView& t, int num_heads);
/// CheckSinks, then the entries copied into `sinks` (left empty when absent).
Status ReadSinks(const TensorView& t, int num_heads, std::vector<float>* sinks);
/// An optional float32 (num_heads) input in CPU memory (sinks, alibi_slopes), every entry finite.
Status CheckHeadFloats(const char* name, const TensorView& t, int num_heads);
/// The ALiBi slopes of a call into `slopes`: the `alibi_slopes` input's (CheckHeadFloats) when
/// present, else the standard slopes of num_heads heads when `is_alibi`, else none (empty).
Status ReadAlibiSlopes(bool is_alibi, const TensorView& t, int num_heads,
                       std::vector<float>* slopes);
/// The optional `lse` output: float32 (tokens, num_heads); messages name the token count
/// `tokens_name`.
Status CheckLse(const TensorView& t, int64_t tokens, int num_heads, const char* tokens_name);
/// The optional fp8 `k_scale` / `v_scale` inputs (0-d float32 in CPU memory) replace the cache's
/// per-tensor scales; refused for a cache that is not fp8. The resulting scales must be finite
/// and > 0.
Status ApplyFp8Scales(const TensorView& k_scale, const TensorView& v_scale, CacheDesc* cache);
/// The cache of a value_from_key call: its value plane is its key plane, read as rows of
/// `value_dim` (the keys' first elements, with their group scales and fp8 scale).
CacheDesc ValuesFromKeys(const CacheDesc& cache, int value_dim);
/// ValuesFromKeys after the fp8 scales (ApplyFp8Scales), with no `v_scale` given (the keys'
/// k_scale scales the values).
Status UseKeysAsValues(const TensorView& v_scale, int value_dim, CacheDesc* cache);
/// Bits per stored element of such a cache (int4: 4).
int64_t CacheElemBits(int quant_bit, DType dtype);
/// A present fp32/fp16 tensor of rank 3.
Status CheckActivation(const char* name, const TensorView& t);
/// `t` has exactly `dtype` and shape (a, b, c); `shape_rule` names the shape in the message.
Status CheckExact(const char* name, const TensorView& t, DType dtype, int64_t a, int64_t b,
                  int64_t c, const char* shape_rule, PlanData data_rule = PlanData::kRequired);
/// A tensor and its input name, for checks over several tensors.
struct NamedTensor {
  const char* name;
  const TensorView* view;
};
/// Index tensors (offsets, tables, scalars) are read on the host.
Status CheckOnHost(const char* name, const TensorView& t);
/// Every present tensor lives on `device` (the device of the call's data).
Status CheckSameDevice(Device device, std::initializer_list<NamedTensor> tensors);
/// Every present tensor lives where the cache does (a cache call runs on the cache's device).
Status CheckCallDevice(const CacheDesc& cache, std::initializer_list<NamedTensor> tensors);
/// A present int64 vector of `length` entries (any length when negative), in CPU memory.
Status CheckInt64Vector(const char* name, const TensorView& t, int64_t length);
/// Entry `flat` of an int32 or int64 tensor, as int64.
int64_t IndexAt(const TensorView& t, int64_t flat);
/// Offsets in a checked int32/int64 vector: B+1 >= 1 entries, starting at 0, non-decreasing,
/// none past the largest tensor a view may have.
Status CheckOffsets(const char* name, const TensorView& t);
/// Offsets: an int64 vector of `length` entries (any when negative) that passes CheckOffsets.
Status CheckStarts(const char* name, const TensorView& t, int64_t length);
/// head_dim >= 1 and head_dim_v >= 0 (0 means head_dim).
Status CheckHeadDims(int head_dim, int head_dim_v);
/// precision is one of the two tiers.
Status CheckPrecision(Precision precision);
/// precision (CheckPrecision), num_heads, head_dim, head_dim_v (CheckHeadDims), num_kv_heads (0
/// means num_heads; must divide it), and the score options (CheckScoreOptions).
Status CheckHeads(const AttentionAttrs& a, int* kv_heads);
/// Dv of attention attributes (AttentionAttrs or UnifiedAttentionAttrs): head_dim_v, or head_dim
/// when it is 0.
template <class Attrs>
int ValueDimOf(const Attrs& a) {
  return a.head_dim_v > 0 ? a.head_dim_v : a.head_dim;
}

/// What the first checks of an attention op establish: its KV heads, activation type and tokens.
struct QueryShape {
  int kv_heads = 0;
  DType io = DType::kF32;
  int64_t tokens = 0;
};
/// The head counts (CheckHeads), `query` as (tokens, num_heads, head_dim) activations, and, when
/// the op takes new tokens, `current_key` as (tokens, num_kv_heads, head_dim) and `current_value`
/// as (tokens, num_kv_heads, head_dim_v); messages name the token count `tokens_name` ("Tq" or
/// "T").
Status CheckQueryAndNewTokens(const AttentionAttrs& a, const TensorView& query,
                              const TensorView* current_key, const TensorView* current_value,
                              const std::string& tokens_name, QueryShape* shape);
/// A caller-built CacheDesc: consistent with the call and with itself.
Status CheckRawDesc(const CacheDesc& d, const CacheAttrs& a, int kv_heads, int head_dim,
                    int head_dim_v);
/// One new token's cache write: the slot it writes and its packed query row.
struct SlotWrite {
  int64_t slot;  ///< Any numbering in which equal slots are equal numbers.
  int64_t row;   ///< Packed query row (token) of the write.
};
/// No two `writes` hit the same slot; sorts them by slot. The error is on input `name`, with
/// `where` wording a slot.
Status CheckDistinctSlots(const char* name, std::vector<SlotWrite>* writes,
                          const std::function<std::string(int64_t slot)>& where);
/// No two new tokens of a PMX call write the same slot.
Status CheckDistinctWrites(const Batch& batch, const SlotMap& map);
/// The write problem of a call's new keys and values (with their row strides).
WriteProblem WriteOf(const Batch& batch, DType io, const TensorView& current_key,
                     const TensorView& current_value, const KvSource& source);
/// Points an attention problem at its query and output (with their row strides).
void SetActivations(const TensorView& query, const TensorView& output, AttentionProblem* p);
/// The score scale of `softmax_scale` (0 means 1 / sqrt(head_dim)).
float ScoreScale(float softmax_scale, int head_dim);
/// Heads, sizes and score scale of an attention problem.
void FillAttention(const AttentionAttrs& a, int kv_heads, DType io, AttentionProblem* p);

/// RunOptions: 0 (all cores) or a thread count up to kMaxThreads.
Status ValidateRunOptions(const RunOptions& options);
inline constexpr int kMaxThreads = 1024;

}  // namespace dynattn::internal

#endif  // DYNATTN_SRC_VALIDATE_H_

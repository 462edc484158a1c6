// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fuzz input format: a byte string decoded into one op call (op, attributes, and for each of
// the op's tensors its presence, rank, shape, dtype, a mutation, and the values of index
// tensors). Why a format of our own: libFuzzer mutates bytes, so every byte must mean something
// and small values must be cheap (one byte), while the extremes that break arithmetic (2^31,
// 2^62, INT64_MAX, negatives) stay one mutation away. Data tensors (activations, caches, scales)
// are filled from a generator, not from the input: their values do not steer validation.
//
// Layout: op byte, flags byte, 14 attribute integers, then per tensor of the op (OpTensors):
// a header byte (0xFF = absent; else rank = low 3 bits, mutation = next 3 bits), `rank` extents
// (at most 6 are stored; rank 7 is kept as an invalid rank), then for index tensors up to
// kMaxIndexValues values. Integers are "compact": see ReadInt.
//
// Then the extension (Ext), where a zero byte always means "off", so that an input written
// before it existed (which ends earlier: missing bytes read as 0) keeps its meaning: an ext
// byte (bf16 activations, cache element, which of the op's ExtraTensors are present), the
// window (compact integer + 1), the soft-cap and the softmax scale (compact reals, see
// ReadReal), then each present extra tensor: a header as above, its extents, a count and up to
// kMaxRealValues compact reals (its values, repeated; none: drawn from the generator), then
// head_dim_v (compact integer; 0: values of head_dim) and value_from_key (compact integer, not 0:
// on).

#ifndef DYNATTN_FUZZ_FUZZ_INPUT_H_
#define DYNATTN_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dynattn_fuzz {

/// The ops a fuzz input can call.
enum class Op : uint8_t { kKeyValueCache, kMultiHeadAttention, kMultiHeadCacheAttention, kUnified };
inline constexpr int kNumOps = 4;

/// What a tensor is to its op: decides its default dtype and how it is filled.
enum class Role : uint8_t {
  kActivation,   ///< fp32/fp16 input (query, keys, values, mask).
  kIndex,        ///< int64/int32 offsets, tables and scalars: values come from the input.
  kCache,        ///< The PMX cache: int8 when quantized, else the activation dtype.
  kScale,        ///< Group scales: fp16 or fp32.
  kOutput,       ///< Written by the call, activation dtype.
  kLse,          ///< Written by the call, fp32.
  kSinks,        ///< fp32 (Hq) sinks or ALiBi slopes: values from the input (or drawn).
  kTensorScale,  ///< fp32 0-d fp8 per-tensor scale: value from the input.
};

/// A tensor of an op, by its spec name.
struct TensorSpec {
  const char* name;
  Role role;
};

/// The tensors of `op`, in input order.
const std::vector<TensorSpec>& OpTensors(Op op);
/// The optional tensors of `op` drawn in the extension (sinks, k_scale, v_scale, alibi_slopes,
/// key_offsets, key_counts, lse; those it has).
const std::vector<TensorSpec>& ExtraTensors(Op op);
/// OpTensors(op) then ExtraTensors(op): the order of Call::tensors.
std::vector<TensorSpec> AllTensors(Op op);

/// How a tensor view is spoiled before the call (the library must refuse or survive each).
enum class Mutation : uint8_t {
  kNone,
  kNullData,       ///< data = nullptr.
  kBrokenStride,   ///< strides[0] = row - 1: rows overlap (refused when shape[0] > 1).
  kOnCuda,         ///< device = kCuda.
  kAliasPrevious,  ///< data = the previous present tensor's data.
  kAliasInside,    ///< data = one element into the previous present tensor.
  kOtherDType,     ///< another element type than its role's.
  kPaddedRows,     ///< strides[0] = row + pad over a buffer that spans it: row-strided.
};

/// Flags byte.
struct Flags {
  bool f16 = false;          ///< Activations fp16 (else fp32).
  bool int32_index = false;  ///< Index tensors int32 (else int64).
  bool f32_scale = false;    ///< Scales fp32 (else fp16).
  bool two_threads = false;  ///< RunOptions / ContextOptions num_threads 2 (else 1).
  bool plan_run = false;     ///< Plan once, Run twice (bits compared), instead of the one-shot.
  /// precision kFast in the attention ops (bit 7: bits 5 and 6 are read by no field, and a
  /// committed corpus file sets bit 5).
  bool fast = false;
  uint8_t Encode() const;
  static Flags Decode(uint8_t byte);
};

/// Element of the cache tensor (the extension's choice; kDefault: int8 when quantized, else the
/// activations' dtype).
enum class CacheChoice : uint8_t { kDefault, kBF16, kF8E4M3, kF8E5M2 };

/// The extension's draws: window, soft-cap and softmax scale, bf16 activations and the cache
/// element (its optional tensors: ExtraTensors).
struct Ext {
  bool bf16 = false;                          ///< Activations bf16 (overrides Flags::f16).
  CacheChoice cache = CacheChoice::kDefault;  ///< Element of the cache tensor.
  int64_t window_left = -1;                   ///< AttentionAttrs::window_left.
  float logits_soft_cap = 0.0f;               ///< AttentionAttrs::logits_soft_cap.
  float softmax_scale = 0.0f;                 ///< AttentionAttrs::softmax_scale.
  int64_t head_dim_v = 0;                     ///< AttentionAttrs::head_dim_v (after the tensors).
  bool value_from_key = false;                ///< AttentionAttrs::value_from_key (last).
};

/// The attributes of every op, in input order.
struct Attrs {
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0, is_causal = 0, is_alibi = 0, num_layer = 1,
          layer_idx = 0, quant_bit = 0, quant_group = 8, cache_mode = 0, cache_layout = 0,
          page_size = 1, num_repeat = 1, block_size = 1;
};
inline constexpr int kNumAttrs = 14;
int64_t* AttrAt(Attrs* attrs, int i);

/// One tensor as decoded.
struct TensorInput {
  bool present = false;
  int rank = 0;  ///< 0..7 (7 is an invalid rank, kept to test its refusal).
  int64_t shape[6] = {};
  Mutation mutation = Mutation::kNone;
  uint8_t other_dtype = 0;            ///< For kOtherDType: the dtype index to use.
  std::vector<int64_t> index_values;  ///< Index tensors: the values (repeated to fill).
  std::vector<float> real_values;     ///< Extra tensors: the values (repeated to fill).
};

/// Extra tensors carry at most this many values (the rest repeat the last one).
inline constexpr int kMaxRealValues = 64;

/// Index tensors carry at most this many values (the rest repeat the last one).
inline constexpr int kMaxIndexValues = 512;

/// A decoded call.
struct Call {
  Op op = Op::kKeyValueCache;
  Flags flags;
  Attrs attrs;
  Ext ext;
  std::vector<TensorInput> tensors;  ///< One per AllTensors(op) entry.
  uint64_t data_seed = 0;            ///< Seeds the fill of data tensors.
};

/// Decodes `size` bytes (any bytes decode: missing ones read as 0).
Call Decode(const uint8_t* data, size_t size);
/// Encodes a call so that Decode gives it back (the seed corpus is written this way).
std::string Encode(const Call& call);

}  // namespace dynattn_fuzz

#endif  // DYNATTN_FUZZ_FUZZ_INPUT_H_

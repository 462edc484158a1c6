// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Every rule of spec pmx-ops §7.3 and §12, in the order a caller would fix them: attributes,
// then each tensor's dtype and shape, then the batch arithmetic, then every slot the call will
// touch. Nothing here writes to a caller's buffer.

#include "src/validate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/alibi.h"
#include "core/checked_math.h"
#include "core/codec.h"

namespace dynattn::internal {

using std::to_string;

std::string ShapeString(const int64_t* shape, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + to_string(shape[i]);
  return s + (rank == 1 ? ",)" : ")");
}

std::string ShapeString(const TensorView& t) { return ShapeString(t.shape, t.rank); }

bool RowStridable(const char* name) {
  for (const char* stridable :
       {"query", "current_key", "current_value", "key", "value", "attn_output"}) {
    if (std::strcmp(name, stridable) == 0) return true;
  }
  return false;
}

int64_t RowStride(const TensorView& t) {
  int64_t row = 1;
  for (int i = 1; i < t.rank; ++i) row *= t.shape[i];
  return t.rank >= 1 && t.shape[0] > 1 ? t.strides[0] : row;
}

int64_t SpannedElements(const TensorView& t) {
  const int64_t count = t.NumElements();
  if (count == 0 || t.IsDense()) return count;
  return (t.shape[0] - 1) * RowStride(t) + count / t.shape[0];
}

namespace {

/// Dense, or (for the activations that may be) row-strided within the element limit.
Status CheckLayout(const char* name, const TensorView& t) {
  if (t.IsDense()) return Status::Ok();
  if (!RowStridable(name)) return Status::Invalid(name, "must be dense row-major (C order)");
  if (!t.IsRowStrided()) {
    return Status::Invalid(name,
                           "must be dense row-major, or rows of dense heads (strides (S, D, 1) "
                           "with S >= heads * D), got strides " +
                               ShapeString(t.strides, t.rank));
  }
  if (t.NumElements() > 0 && RowStride(t) > kMaxElements / t.shape[0]) {
    return Status::Invalid(
        name, "spans more than 2^46 elements (row stride " + to_string(RowStride(t)) + ")");
  }
  return Status::Ok();
}

}  // namespace

/// Common checks of a present tensor: rank range, extents, layout, data pointer.
Status CheckStorage(const char* name, const TensorView& t, PlanData data_rule) {
  if (t.rank > kMaxRank) return Status::Invalid(name, "rank must be <= 6");
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] < 0) return Status::Invalid(name, "has a negative extent " + ShapeString(t));
  }
  const int64_t count = CheckedElementCount(t.shape, t.rank);
  if (count < 0 || count > kMaxElements) {
    return Status::Invalid(name, "is too large " + ShapeString(t) + " (more than 2^46 elements)");
  }
  DYNATTN_RETURN_IF_ERROR(CheckLayout(name, t));
  if (count > 0 && t.data == nullptr && data_rule == PlanData::kRequired) {
    return Status::Invalid(name, "data is null");
  }
  // Elements are read as their type: an address that is not a multiple of the element size
  // would be undefined behaviour to load (NumPy and PyTorch always align to it).
  const size_t size = DTypeSize(t.dtype);
  if (size > 1 && reinterpret_cast<uintptr_t>(t.data) % size != 0) {
    return Status::Invalid(name, "data must be aligned to its element size (" + to_string(size) +
                                     " bytes for " + DTypeName(t.dtype) + ")");
  }
  return Status::Ok();
}

Status CheckQuantization(int quant_bit, int quant_group, int64_t head_dim) {
  if (quant_bit != 0 && quant_bit != 4 && quant_bit != 8) {
    return Status::Invalid("quant_bit", "must be 0, 4 or 8, got " + to_string(quant_bit));
  }
  if (head_dim < 1) return Status::Invalid("head_dim", "must be >= 1, got " + to_string(head_dim));
  if (quant_bit == 0) return Status::Ok();
  if (quant_group < 1 || head_dim % quant_group != 0) {
    return Status::Invalid("quant_group", "must divide head_dim " + to_string(head_dim) + ", got " +
                                              to_string(quant_group));
  }
  // An even group dividing head_dim makes head_dim even too: int4 rows are whole bytes.
  if (quant_bit == 4 && quant_group % 2 != 0) {
    return Status::Invalid("quant_group", "must be even for int4 caches (as must head_dim), got " +
                                              to_string(quant_group));
  }
  return Status::Ok();
}

std::string FloatString(float x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.9g", static_cast<double>(x));
  return buffer;
}

CacheElem PlainCacheElemOf(DType io) {
  return io == DType::kF32    ? CacheElem::kF32
         : io == DType::kBF16 ? CacheElem::kBF16
                              : CacheElem::kF16;
}

CacheElem CacheElemOf(int quant_bit, DType dtype) {
  if (quant_bit == 8) return CacheElem::kInt8;
  if (quant_bit == 4) return CacheElem::kInt4;
  if (dtype == DType::kF8E4M3) return CacheElem::kF8E4M3;
  if (dtype == DType::kF8E5M2) return CacheElem::kF8E5M2;
  return PlainCacheElemOf(dtype);
}

int64_t CacheElemBits(int quant_bit, DType dtype) {
  return quant_bit == 4 ? 4 : static_cast<int64_t>(DTypeSize(dtype)) * 8;
}

Status CheckRequired(const char* name, const TensorView& t,
                     PlanData data_rule = PlanData::kRequired) {
  if (!t.present()) return Status::Invalid(name, "is required but absent");
  return CheckStorage(name, t, data_rule);
}

Status CheckActivation(const char* name, const TensorView& t) {
  DYNATTN_RETURN_IF_ERROR(CheckRequired(name, t));
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
    return Status::Invalid(
        name, std::string("must be float32, float16 or bfloat16, got ") + DTypeName(t.dtype));
  }
  if (t.rank != 3) return Status::Invalid(name, "must have rank 3, got shape " + ShapeString(t));
  return Status::Ok();
}

/// `t` must have exactly `dtype` and the shape (a, b, c).
Status CheckExact(const char* name, const TensorView& t, DType dtype, int64_t a, int64_t b,
                  int64_t c, const char* shape_rule, PlanData data_rule) {
  DYNATTN_RETURN_IF_ERROR(CheckRequired(name, t, data_rule));
  if (t.dtype != dtype) {
    return Status::Invalid(name, std::string("must be ") + DTypeName(dtype) + " like query, got " +
                                     DTypeName(t.dtype));
  }
  if (t.rank != 3 || t.shape[0] != a || t.shape[1] != b || t.shape[2] != c) {
    return Status::Invalid(name, std::string("must have shape ") + shape_rule + " = (" +
                                     to_string(a) + ", " + to_string(b) + ", " + to_string(c) +
                                     "), got " + ShapeString(t));
  }
  return Status::Ok();
}

Status CheckOnHost(const char* name, const TensorView& t) {
  if (t.device == Device::kCpu) return Status::Ok();
  return Status::Unsupported(name, "index tensors are read on the host: must be in CPU memory");
}

Status CheckSameDevice(Device device, std::initializer_list<NamedTensor> tensors) {
  for (const NamedTensor& t : tensors) {
    if (t.view->present() && t.view->device != device) {
      return Status::Unsupported(t.name, std::string("is in ") + DeviceName(t.view->device) +
                                             " memory, the call's data in " + DeviceName(device) +
                                             " memory (one call runs on one device)");
    }
  }
  return Status::Ok();
}

Status CheckCallDevice(const CacheDesc& cache, std::initializer_list<NamedTensor> tensors) {
  return CheckSameDevice(cache.device, tensors);
}

Status CheckInt64Vector(const char* name, const TensorView& t, int64_t length) {
  DYNATTN_RETURN_IF_ERROR(CheckRequired(name, t));
  DYNATTN_RETURN_IF_ERROR(CheckOnHost(name, t));
  if (t.dtype != DType::kI64) {
    return Status::Invalid(name, std::string("must be int64 or int32, got ") + DTypeName(t.dtype));
  }
  if (t.rank != 1) return Status::Invalid(name, "must have rank 1, got shape " + ShapeString(t));
  if (length >= 0 && t.shape[0] != length) {
    return Status::Invalid(name, "must have " + to_string(length) + " entries (B or B+1), got " +
                                     to_string(t.shape[0]));
  }
  return Status::Ok();
}

/// A scalar input: int64, rank 0 (or one element of rank 1).
Status ReadScalar(const char* name, const TensorView& t, int64_t* value) {
  DYNATTN_RETURN_IF_ERROR(CheckRequired(name, t));
  DYNATTN_RETURN_IF_ERROR(CheckOnHost(name, t));
  if (t.dtype != DType::kI64) {
    return Status::Invalid(
        name, std::string("must be an int64 or int32 scalar, got ") + DTypeName(t.dtype));
  }
  if (t.NumElements() != 1 || t.rank > 1) {
    return Status::Invalid(name, "must be a scalar (0-d int64), got shape " + ShapeString(t));
  }
  *value = *t.As<const int64_t>();
  return Status::Ok();
}

int64_t IndexAt(const TensorView& t, int64_t flat) {
  return t.dtype == DType::kI64 ? t.As<const int64_t>()[flat] : t.As<const int32_t>()[flat];
}

Status CheckOffsets(const char* name, const TensorView& t) {
  if (t.shape[0] < 1) return Status::Invalid(name, "must have B+1 >= 1 entries, got 0");
  const int64_t first = IndexAt(t, 0);
  if (first != 0) return Status::Invalid(name, "must start at 0, got " + to_string(first));
  for (int64_t i = 1; i < t.shape[0]; ++i) {
    const int64_t v = IndexAt(t, i), previous = IndexAt(t, i - 1);
    if (v < previous) {
      return Status::Invalid(name, "must be non-decreasing (" + std::string(name) + "[" +
                                       to_string(i) + "] = " + to_string(v) + " < " + name + "[" +
                                       to_string(i - 1) + "] = " + to_string(previous) + ")");
    }
    if (v > kMaxElements) {
      return Status::Invalid(
          name, "entry " + to_string(i) + " = " + to_string(v) + " is too large (> 2^46)");
    }
  }
  return Status::Ok();
}

Status CheckStarts(const char* name, const TensorView& t, int64_t length) {
  DYNATTN_RETURN_IF_ERROR(CheckInt64Vector(name, t, length));
  return CheckOffsets(name, t);
}

/// The hints max_seqlen / max_kvlen: present scalars >= the true maxima.
Status CheckHint(const char* name, const TensorView& t, int64_t true_max) {
  int64_t hint = 0;
  DYNATTN_RETURN_IF_ERROR(ReadScalar(name, t, &hint));
  if (hint < true_max) {
    return Status::Invalid(name, "must be >= the largest length in the batch, " +
                                     to_string(true_max) + ", got " + to_string(hint));
  }
  return Status::Ok();
}

struct BatchShape {
  Batch batch;
  int64_t max_seqlen = 0;
  int64_t max_kvlen = 0;
};

/// seqstarts, kvstarts (and their hints) for `query_rows` packed query rows.
Status CheckBatch(const TensorView& seqstarts, const TensorView& kvstarts, int64_t query_rows,
                  const TensorView& max_seqlen, const TensorView& max_kvlen, BatchShape* out) {
  DYNATTN_RETURN_IF_ERROR(CheckStarts("seqstarts", seqstarts, -1));
  const int64_t size = seqstarts.shape[0] - 1;
  DYNATTN_RETURN_IF_ERROR(CheckStarts("kvstarts", kvstarts, size + 1));
  Batch batch;
  batch.size = size;
  batch.seqstarts = seqstarts.As<const int64_t>();
  batch.kvstarts = kvstarts.As<const int64_t>();
  if (batch.seqstarts[size] != query_rows) {
    return Status::Invalid("seqstarts", "last entry must equal the query rows " +
                                            to_string(query_rows) + ", got " +
                                            to_string(batch.seqstarts[size]));
  }
  for (int64_t b = 0; b < size; ++b) {
    out->max_seqlen = std::max(out->max_seqlen, batch.SeqLen(b));
    out->max_kvlen = std::max(out->max_kvlen, batch.KvLen(b));
  }
  DYNATTN_RETURN_IF_ERROR(CheckHint("max_seqlen", max_seqlen, out->max_seqlen));
  DYNATTN_RETURN_IF_ERROR(CheckHint("max_kvlen", max_kvlen, out->max_kvlen));
  out->batch = batch;
  return Status::Ok();
}

/// MHA: every request needs kvlen >= seqlen.
Status CheckContextCoversQueries(const Batch& batch) {
  for (int64_t b = 0; b < batch.size; ++b) {
    if (batch.KvLen(b) < batch.SeqLen(b)) {
      return Status::Invalid("kvstarts", "request " + to_string(b) + " has kvlen " +
                                             to_string(batch.KvLen(b)) + " < seqlen " +
                                             to_string(batch.SeqLen(b)) +
                                             " (rule: kvlen_b >= seqlen_b)");
    }
  }
  return Status::Ok();
}

/// MHCA on a context shard: key_offsets (B) int64 in [0, 2^46), start_pos below 2^46 too, and
/// no context key past the request's last new token: key_offsets_b + kvlen_b <= start_pos_b +
/// seqlen_b.
Status CheckKeyOffsets(const TensorView& t, Batch* batch) {
  DYNATTN_RETURN_IF_ERROR(CheckInt64Vector("key_offsets", t, batch->size));
  const int64_t* offsets = t.As<const int64_t>();
  for (int64_t b = 0; b < batch->size; ++b) {
    const int64_t sp = batch->start_pos[b];
    if (offsets[b] < 0 || offsets[b] >= kMaxPosition) {
      return Status::Invalid("key_offsets", "entry " + to_string(b) + " = " +
                                                to_string(offsets[b]) + " is outside [0, 2^46)");
    }
    if (sp >= kMaxPosition) {
      return Status::Invalid("start_pos", "entry " + to_string(b) + " = " + to_string(sp) +
                                              " is not below 2^46 (rule with key_offsets)");
    }
    if (offsets[b] + batch->KvLen(b) > sp + batch->SeqLen(b)) {
      return Status::Invalid(
          "key_offsets", "request " + to_string(b) + " holds positions [" + to_string(offsets[b]) +
                             ", " + to_string(offsets[b] + batch->KvLen(b)) +
                             ") past its last new token " + to_string(sp + batch->SeqLen(b) - 1) +
                             " (rule: key_offsets_b + kvlen_b <= start_pos_b + seqlen_b)");
    }
  }
  batch->key_offsets = offsets;
  return Status::Ok();
}

/// KVC/MHCA: start_pos (B) int64 >= 0 with kvlen_b == start_pos_b + seqlen_b; with MHCA's
/// `key_offsets` (a context shard) the rule of CheckKeyOffsets instead.
Status CheckStartPos(const TensorView& t, const TensorView& key_offsets, Batch* batch) {
  DYNATTN_RETURN_IF_ERROR(CheckInt64Vector("start_pos", t, batch->size));
  const int64_t* sp = t.As<const int64_t>();
  for (int64_t b = 0; b < batch->size; ++b) {
    if (sp[b] < 0) {
      return Status::Invalid("start_pos",
                             "entry " + to_string(b) + " is negative (" + to_string(sp[b]) + ")");
    }
  }
  batch->start_pos = sp;
  if (key_offsets.present()) return CheckKeyOffsets(key_offsets, batch);
  for (int64_t b = 0; b < batch->size; ++b) {
    // kvlen - seqlen cannot overflow (both are bounded offsets); start_pos + seqlen could.
    if (batch->KvLen(b) - batch->SeqLen(b) != sp[b]) {
      return Status::Invalid("kvstarts", "request " + to_string(b) + " has kvlen " +
                                             to_string(batch->KvLen(b)) + " but start_pos " +
                                             to_string(sp[b]) + " + seqlen " +
                                             to_string(batch->SeqLen(b)) +
                                             " (rule: kvlen_b == start_pos_b + seqlen_b)");
    }
  }
  return Status::Ok();
}

Status CheckDecodingBatches(const TensorView& t, Batch* batch) {
  int64_t value = 0;
  DYNATTN_RETURN_IF_ERROR(ReadScalar("decoding_batches", t, &value));
  if (value < 0 || value > batch->size) {
    return Status::Invalid("decoding_batches", "must be in [0, B = " + to_string(batch->size) +
                                                   "], got " + to_string(value));
  }
  batch->decoding_batches = value;
  return Status::Ok();
}

Status CheckHeadDims(int head_dim, int head_dim_v) {
  if (head_dim < 1) return Status::Invalid("head_dim", "must be >= 1, got " + to_string(head_dim));
  if (head_dim_v < 0) {
    return Status::Invalid("head_dim_v",
                           "must be 0 (head_dim) or >= 1, got " + to_string(head_dim_v));
  }
  return Status::Ok();
}

Status CheckPrecision(Precision precision) {
  if (precision != Precision::kExact && precision != Precision::kFast) {
    return Status::Invalid("precision",
                           "must be Precision::kExact (0) or Precision::kFast (1), got " +
                               to_string(static_cast<int>(precision)));
  }
  return Status::Ok();
}

Status CheckHeads(const AttentionAttrs& a, int* kv_heads) {
  DYNATTN_RETURN_IF_ERROR(CheckPrecision(a.precision));
  if (a.num_heads < 1)
    return Status::Invalid("num_heads", "must be >= 1, got " + to_string(a.num_heads));
  DYNATTN_RETURN_IF_ERROR(CheckHeadDims(a.head_dim, a.head_dim_v));
  if (a.value_from_key && ValueDimOf(a) > a.head_dim) {
    return Status::Invalid("head_dim_v", "must be <= head_dim = " + to_string(a.head_dim) +
                                             " with value_from_key (the values are the keys' "
                                             "first head_dim_v elements), got " +
                                             to_string(a.head_dim_v));
  }
  if (a.num_kv_heads < 0) {
    return Status::Invalid("num_kv_heads",
                           "must be >= 0 (0 means num_heads), got " + to_string(a.num_kv_heads));
  }
  *kv_heads = a.num_kv_heads == 0 ? a.num_heads : a.num_kv_heads;
  if (a.num_heads % *kv_heads != 0) {
    return Status::Invalid("num_kv_heads", "must divide num_heads = " + to_string(a.num_heads) +
                                               ", got " + to_string(*kv_heads));
  }
  return CheckScoreOptions(a.window_left, a.logits_soft_cap, a.softmax_scale);
}

Status CheckScoreOptions(int window_left, float logits_soft_cap, float softmax_scale) {
  if (window_left < -1) {
    return Status::Invalid(
        "window_left",
        "must be -1 (off) or >= 0 (keys left of the query), got " + to_string(window_left));
  }
  if (!std::isfinite(logits_soft_cap) || logits_soft_cap < 0.0f) {
    return Status::Invalid("logits_soft_cap", "must be 0 (off) or finite and > 0, got " +
                                                  FloatString(logits_soft_cap));
  }
  if (!std::isfinite(softmax_scale) || softmax_scale < 0.0f) {
    return Status::Invalid(
        "softmax_scale",
        "must be 0 (1 / sqrt(head_dim)) or finite and > 0, got " + FloatString(softmax_scale));
  }
  return Status::Ok();
}

Status CheckHeadFloats(const char* name, const TensorView& t, int num_heads) {
  if (!t.present()) return Status::Ok();
  DYNATTN_RETURN_IF_ERROR(CheckStorage(name, t));
  DYNATTN_RETURN_IF_ERROR(CheckOnHost(name, t));
  if (t.dtype != DType::kF32 || t.rank != 1 || t.shape[0] != num_heads) {
    return Status::Invalid(name, "must be float32 of shape (num_heads = " + to_string(num_heads) +
                                     ",), got " + DTypeName(t.dtype) + " " + ShapeString(t));
  }
  const float* values = t.As<const float>();
  for (int h = 0; h < num_heads; ++h) {
    if (!std::isfinite(values[h])) {
      return Status::Invalid(
          name, "entry " + to_string(h) + " is not finite (" + FloatString(values[h]) + ")");
    }
  }
  return Status::Ok();
}

Status CheckSinks(const TensorView& t, int num_heads) {
  return CheckHeadFloats("sinks", t, num_heads);
}

Status ReadSinks(const TensorView& t, int num_heads, std::vector<float>* sinks) {
  sinks->clear();
  DYNATTN_RETURN_IF_ERROR(CheckSinks(t, num_heads));
  if (t.present()) sinks->assign(t.As<const float>(), t.As<const float>() + num_heads);
  return Status::Ok();
}

Status ReadAlibiSlopes(bool is_alibi, const TensorView& t, int num_heads,
                       std::vector<float>* slopes) {
  slopes->clear();
  DYNATTN_RETURN_IF_ERROR(CheckHeadFloats("alibi_slopes", t, num_heads));
  if (t.present()) {
    slopes->assign(t.As<const float>(), t.As<const float>() + num_heads);
  } else if (is_alibi) {
    *slopes = AlibiSlopes(num_heads);
  }
  return Status::Ok();
}

Status CheckLse(const TensorView& t, int64_t tokens, int num_heads, const char* tokens_name) {
  if (!t.present()) return Status::Ok();
  DYNATTN_RETURN_IF_ERROR(CheckStorage("lse", t, PlanData::kMayBeNull));
  if (t.dtype != DType::kF32 || t.rank != 2 || t.shape[0] != tokens || t.shape[1] != num_heads) {
    return Status::Invalid("lse", std::string("must be float32 of shape (") + tokens_name +
                                      ", num_heads) = (" + to_string(tokens) + ", " +
                                      to_string(num_heads) + "), got " + DTypeName(t.dtype) + " " +
                                      ShapeString(t));
  }
  return Status::Ok();
}

namespace {

/// An optional fp8 per-tensor scale: a 0-d (or one-element) float32 in CPU memory, finite > 0.
Status ReadTensorScale(const char* name, const TensorView& t, float* value) {
  DYNATTN_RETURN_IF_ERROR(CheckStorage(name, t));
  DYNATTN_RETURN_IF_ERROR(CheckOnHost(name, t));
  if (t.dtype != DType::kF32 || t.NumElements() != 1 || t.rank > 1) {
    return Status::Invalid(name, std::string("must be a float32 scalar, got ") +
                                     DTypeName(t.dtype) + " " + ShapeString(t));
  }
  *value = *t.As<const float>();
  return Status::Ok();
}

Status CheckPlaneScale(const char* name, float value) {
  if (!std::isfinite(value) || !(value > 0.0f)) {
    return Status::Invalid(
        name, "an fp8 cache's per-tensor scale must be finite and > 0, got " + FloatString(value));
  }
  return Status::Ok();
}

}  // namespace

CacheDesc ValuesFromKeys(const CacheDesc& cache, int value_dim) {
  CacheDesc latent = cache;
  latent.value = cache.key;
  latent.head_dim_v = value_dim == cache.head_dim ? 0 : value_dim;
  return latent;
}

Status UseKeysAsValues(const TensorView& v_scale, int value_dim, CacheDesc* cache) {
  if (v_scale.present()) {
    return Status::Invalid("v_scale",
                           "must be absent with value_from_key: the values are the keys' bytes, "
                           "which k_scale scales");
  }
  *cache = ValuesFromKeys(*cache, value_dim);
  return Status::Ok();
}

Status ApplyFp8Scales(const TensorView& k_scale, const TensorView& v_scale, CacheDesc* cache) {
  const bool fp8 = IsFp8(cache->elem);
  for (const NamedTensor& t :
       {NamedTensor{"k_scale", &k_scale}, NamedTensor{"v_scale", &v_scale}}) {
    if (t.view->present() && !fp8) {
      return Status::Invalid(t.name, "is only taken by an fp8 cache (this cache holds " +
                                         std::string(CacheElemName(cache->elem)) + ")");
    }
  }
  if (!fp8) return Status::Ok();
  if (k_scale.present()) {
    DYNATTN_RETURN_IF_ERROR(ReadTensorScale("k_scale", k_scale, &cache->key.tensor_scale));
  }
  if (v_scale.present()) {
    DYNATTN_RETURN_IF_ERROR(ReadTensorScale("v_scale", v_scale, &cache->value.tensor_scale));
  }
  DYNATTN_RETURN_IF_ERROR(CheckPlaneScale("k_scale", cache->key.tensor_scale));
  return CheckPlaneScale("v_scale", cache->value.tensor_scale);
}

/// The optional additive mask: rank 2 (Tq, >= kvstarts[B]) or rank 3 (Hq, Tq, >= kvstarts[B]).
Status CheckMask(const TensorView& m, DType io, int num_heads, const Batch& batch,
                 AttentionProblem* p) {
  p->mask = nullptr;
  if (!m.present()) return Status::Ok();
  DYNATTN_RETURN_IF_ERROR(CheckStorage("attn_mask", m));  // the rank first: nothing reads past it
  if (m.NumElements() == 0) return Status::Ok();          // empty = absent (spec §5.4)
  if (m.dtype != io) {
    return Status::Invalid("attn_mask", std::string("must have the query's dtype ") +
                                            DTypeName(io) + ", got " + DTypeName(m.dtype));
  }
  if (m.rank != 2 && m.rank != 3) {
    return Status::Invalid("attn_mask", "must have rank 2 or 3, got shape " + ShapeString(m));
  }
  const int64_t rows = m.shape[m.rank - 2];
  const int64_t cols = m.shape[m.rank - 1];
  const int64_t tq = batch.seqstarts[batch.size];
  const int64_t kv = batch.kvstarts[batch.size];
  if (m.rank == 3 && m.shape[0] != num_heads) {
    return Status::Invalid("attn_mask", "rank-3 mask needs first dim num_heads = " +
                                            to_string(num_heads) + ", got " + ShapeString(m));
  }
  if (rows != tq) {
    return Status::Invalid(
        "attn_mask", "needs " + to_string(tq) + " rows (seqstarts[B]), got " + ShapeString(m));
  }
  if (cols < kv) {
    return Status::Invalid(
        "attn_mask", "needs >= " + to_string(kv) + " columns (kvstarts[B]), got " + ShapeString(m));
  }
  p->mask = m.data;
  p->mask_row_stride = cols;
  p->mask_head_stride = m.rank == 3 ? rows * cols : 0;
  return Status::Ok();
}

/// Cache attributes that do not depend on the cache tensor.
Status CheckAddressingAttrs(const CacheAttrs& a) {
  if (a.cache_mode != 0 && a.cache_mode != 1) {
    return Status::Invalid("cache_mode",
                           "must be 0 (offset) or 1 (paged), got " + to_string(a.cache_mode));
  }
  if (a.cache_mode == 1 && a.page_size < 1) {
    return Status::Invalid("page_size", "must be >= 1, got " + to_string(a.page_size));
  }
  return Status::Ok();
}

/// A caller-built CacheDesc: consistent with the call and with itself.
Status CheckRawDesc(const CacheDesc& d, const CacheAttrs& a, int kv_heads, int head_dim,
                    int head_dim_v) {
  if (d.num_kv_heads != kv_heads || d.head_dim != head_dim || d.head_dim_v < 0 ||
      ValueDim(d) != head_dim_v) {
    return Status::Invalid("cache_desc",
                           "num_kv_heads/head_dim/head_dim_v " + to_string(d.num_kv_heads) + "/" +
                               to_string(d.head_dim) + "/" + to_string(d.head_dim_v) + " must be " +
                               to_string(kv_heads) + "/" + to_string(head_dim) + "/" +
                               to_string(head_dim_v) + " (head_dim_v 0 means head_dim)");
  }
  if (d.num_slots < 0) return Status::Invalid("cache_desc", "num_slots must be >= 0");
  if (d.key.data == nullptr || d.value.data == nullptr) {
    return Status::Invalid("cache_desc", "key and value planes need data pointers");
  }
  const bool quantized = d.elem == CacheElem::kInt8 || d.elem == CacheElem::kInt4;
  const int bits = d.elem == CacheElem::kInt8 ? 8 : d.elem == CacheElem::kInt4 ? 4 : 0;
  if (bits != a.quant_bit) {
    return Status::Invalid("cache_desc",
                           "element type does not match quant_bit " + to_string(a.quant_bit));
  }
  if (quantized) {
    if (d.quant_group < 1 || head_dim % d.quant_group != 0 || head_dim_v % d.quant_group != 0 ||
        (d.elem == CacheElem::kInt4 && d.quant_group % 2)) {
      return Status::Invalid("cache_desc",
                             "quant_group must divide head_dim and head_dim_v (all even for int4)");
    }
    if (d.key.scale == nullptr || d.value.scale == nullptr) {
      return Status::Invalid("cache_desc", "quantized planes need scale pointers");
    }
  }
  if (d.elem == CacheElem::kInt4 && (d.key.slot_stride % 2 || d.key.head_stride % 2 ||
                                     d.value.slot_stride % 2 || d.value.head_stride % 2)) {
    return Status::Invalid("cache_desc", "int4 strides count nibbles and must be even");
  }
  for (const CachePlane* plane : {&d.key, &d.value}) {
    const char* which = plane == &d.key ? "key" : "value";
    if (plane->dim_stride < 0 || plane->slots_per_tile < 0 || plane->tile_stride < 0) {
      return Status::Invalid("cache_desc", std::string(which) +
                                               " plane: dim_stride, slots_per_tile and "
                                               "tile_stride must be >= 0");
    }
    if (quantized && (plane->dim_stride > 1 || plane->slots_per_tile > 0)) {
      return Status::Invalid("cache_desc",
                             std::string(which) +
                                 " plane: dimension-major rows (dim_stride > 1) and tiled slots "
                                 "need an unquantized cache (fp32, fp16, bf16, fp8)");
    }
  }
  return Status::Ok();
}

/// Resolves the cache (raw descriptor or PMX tensors) for `kv_heads` rows of `head_dim` keys and
/// `head_dim_v` values, the values read from the keys when `values_from_keys`.
Status ResolveCache(const CacheAttrs& a, const TensorView& cache, const TensorView& scale,
                    const CacheDesc* raw, int kv_heads, int head_dim, int head_dim_v,
                    bool values_from_keys, CacheDesc* desc) {
  DYNATTN_RETURN_IF_ERROR(CheckAddressingAttrs(a));
  if (raw != nullptr) {
    const CacheDesc given = values_from_keys ? ValuesFromKeys(*raw, head_dim_v) : *raw;
    DYNATTN_RETURN_IF_ERROR(CheckRawDesc(given, a, kv_heads, head_dim, head_dim_v));
    *desc = given;
    return Status::Ok();
  }
  if (values_from_keys) {
    return Status::Invalid("value_from_key",
                           "needs a cache_desc over the latent plane (a PMX cache tensor holds a "
                           "value half the call would never read)");
  }
  if (head_dim_v != head_dim) {
    return Status::Invalid("head_dim_v",
                           "a PMX cache tensor holds keys and values of one size, "
                           "head_dim = " +
                               to_string(head_dim) + ", got " + to_string(head_dim_v) +
                               " (pass a cache_desc for values of another size)");
  }
  if (cache.present()) DYNATTN_RETURN_IF_ERROR(CheckStorage("cache", cache));
  if (scale.present() && a.quant_bit != 0) DYNATTN_RETURN_IF_ERROR(CheckStorage("scale", scale));
  return MakePmxCacheDesc(cache, scale, a, kv_heads, head_dim, desc);
}

/// The slot map of `cachestarts` and the proof that every slot the call touches is in range.
Status CheckSlots(const CacheAttrs& a, const TensorView& cachestarts, const Batch& batch,
                  int64_t num_slots, SlotMap* map) {
  const int64_t size = batch.size;
  if (a.cache_mode == 0) {
    DYNATTN_RETURN_IF_ERROR(CheckInt64Vector("cachestarts", cachestarts, size));
    map->mode = SlotMap::Mode::kOffset;
  } else {
    DYNATTN_RETURN_IF_ERROR(CheckRequired("cachestarts", cachestarts));
    DYNATTN_RETURN_IF_ERROR(CheckOnHost("cachestarts", cachestarts));
    if (cachestarts.dtype != DType::kI64 || cachestarts.rank != 2 || cachestarts.shape[0] != size) {
      return Status::Invalid(
          "cachestarts", "paged mode needs an int64 page table of shape (B = " + to_string(size) +
                             ", MaxP), got " + std::string(DTypeName(cachestarts.dtype)) + " " +
                             ShapeString(cachestarts));
    }
    map->mode = SlotMap::Mode::kPaged;
    map->table_stride = cachestarts.shape[1];
    map->page_size = a.page_size;
  }
  map->starts = cachestarts.As<const int64_t>();
  for (int64_t b = 0; b < size; ++b) {
    const int64_t kvlen = batch.KvLen(b);
    if (kvlen == 0) continue;
    if (a.cache_mode == 0) {
      const int64_t start = map->starts[b];
      if (start < 0 || start > num_slots - kvlen) {
        return Status::Invalid(
            "cachestarts", "request " + to_string(b) + " uses slots [" + to_string(start) + ", " +
                               to_string(start) + " + " + to_string(kvlen) +
                               "), outside [0, MaxT = " + to_string(num_slots) + ")");
      }
      continue;
    }
    const int64_t pages = (kvlen + a.page_size - 1) / a.page_size;
    if (pages > map->table_stride) {
      return Status::Invalid("cachestarts", "request " + to_string(b) + " needs " +
                                                to_string(pages) + " pages for kvlen " +
                                                to_string(kvlen) + ", the table has " +
                                                to_string(map->table_stride) + " columns");
    }
    for (int64_t k = 0; k < pages; ++k) {
      const int64_t entry = map->starts[b * map->table_stride + k];
      const int64_t used = std::min<int64_t>(a.page_size, kvlen - k * a.page_size);
      if (entry < 0 || entry > num_slots - used) {
        return Status::Invalid("cachestarts",
                               "page entry [" + to_string(b) + ", " + to_string(k) +
                                   "] = " + to_string(entry) +
                                   " gives slots outside [0, MaxT = " + to_string(num_slots) + ")");
      }
    }
  }
  return Status::Ok();
}

Status CheckDistinctSlots(const char* name, std::vector<SlotWrite>* writes,
                          const std::function<std::string(int64_t slot)>& where) {
  std::sort(writes->begin(), writes->end(), [](const SlotWrite& a, const SlotWrite& b) {
    return a.slot != b.slot ? a.slot < b.slot : a.row < b.row;
  });
  for (size_t i = 1; i < writes->size(); ++i) {
    const SlotWrite &a = (*writes)[i - 1], &b = (*writes)[i];
    if (a.slot == b.slot) {
      return Status::Invalid(name, "new tokens at query rows " + to_string(a.row) + " and " +
                                       to_string(b.row) + " both write " + where(a.slot) +
                                       " (rule: write slots must be distinct)");
    }
  }
  return Status::Ok();
}

/// No two new tokens may write the same slot (spec §12).
Status CheckDistinctWrites(const Batch& batch, const SlotMap& map) {
  std::vector<SlotWrite> writes;
  writes.reserve(static_cast<size_t>(batch.seqstarts[batch.size]));
  for (int64_t b = 0; b < batch.size; ++b) {
    for (int64_t t = 0; t < batch.SeqLen(b); ++t) {
      const int64_t key = batch.WriteKeyNumber(b, t);
      if (key >= 0) writes.push_back({map.Slot(b, key), batch.seqstarts[b] + t});
    }
  }
  return CheckDistinctSlots("cachestarts", &writes,
                            [](int64_t slot) { return "slot " + to_string(slot); });
}

/// Everything about the cache side of KVC and MHCA: attributes, tensors, slots, writes.
Status CheckCacheSide(const CacheAttrs& attrs, const TensorView& cache, const TensorView& scale,
                      const CacheDesc* raw, const TensorView& cachestarts, int kv_heads,
                      int head_dim, int head_dim_v, bool values_from_keys, const Batch& batch,
                      KvSource* source) {
  DYNATTN_RETURN_IF_ERROR(ResolveCache(attrs, cache, scale, raw, kv_heads, head_dim, head_dim_v,
                                       values_from_keys, &source->cache));
  DYNATTN_RETURN_IF_ERROR(
      CheckSlots(attrs, cachestarts, batch, source->cache.num_slots, &source->slots));
  return CheckDistinctWrites(batch, source->slots);
}

WriteProblem WriteOf(const Batch& batch, DType io, const TensorView& current_key,
                     const TensorView& current_value, const KvSource& source) {
  WriteProblem write;
  write.batch = batch;
  write.io_type = io;
  write.current_key = current_key.data;
  write.current_value = current_value.data;
  write.kv = source;
  write.key_row_stride = RowStride(current_key);
  write.value_row_stride = RowStride(current_value);
  return write;
}

void SetActivations(const TensorView& query, const TensorView& output, AttentionProblem* p) {
  p->query = query.data;
  p->output = output.data;
  p->query_row_stride = RowStride(query);
  p->output_row_stride = RowStride(output);
}

float ScoreScale(float softmax_scale, int head_dim) {
  return softmax_scale > 0.0f ? softmax_scale
                              : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
}

void FillAttention(const AttentionAttrs& a, int kv_heads, DType io, AttentionProblem* p) {
  p->io_type = io;
  p->num_heads = a.num_heads;
  p->num_kv_heads = kv_heads;
  p->group_size = a.num_heads / kv_heads;
  p->head_dim = a.head_dim;
  p->value_dim = ValueDimOf(a);
  p->padded_dim = static_cast<int>(PadToLanes(a.head_dim));
  p->padded_value_dim = static_cast<int>(PadToLanes(p->value_dim));
  p->score_scale = ScoreScale(a.softmax_scale, a.head_dim);
  p->soft_cap = a.logits_soft_cap;
  p->window_left = a.window_left;
  p->is_causal = a.is_causal;
}

namespace {

/// The attention problem of an MHA or MHCA call (call->attention, its mask already checked):
/// FillAttention, the batch, the activations, and the ALiBi slopes and sinks that `call` keeps
/// (read by ReadAlibiSlopes and ReadSinks).
template <class Call>
void FinishAttention(const AttentionAttrs& a, int kv_heads, DType io, const Batch& batch,
                     const TensorView& query, const TensorView& output, const TensorView& lse,
                     Call* call) {
  AttentionProblem& p = call->attention;
  FillAttention(a, kv_heads, io, &p);
  p.batch = batch;
  SetActivations(query, output, &p);
  p.lse = lse.present() ? lse.As<float>() : nullptr;
  p.alibi_slopes = call->alibi_slopes.empty() ? nullptr : call->alibi_slopes.data();
  p.sinks = call->sinks.empty() ? nullptr : call->sinks.data();
}

}  // namespace

Status ValidateRunOptions(const RunOptions& options) {
  if (options.num_threads < 0 || options.num_threads > kMaxThreads) {
    return Status::Invalid("num_threads", "must be 0 (all cores) or in [1, " +
                                              to_string(kMaxThreads) + "], got " +
                                              to_string(options.num_threads));
  }
  return Status::Ok();
}

Status ValidateKeyValueCache(const KeyValueCacheAttrs& attrs, const KeyValueCacheArgs& args,
                             KeyValueCacheCall* call) {
  if (attrs.num_repeat < 1) {
    return Status::Invalid("num_repeat", "must be >= 1, got " + to_string(attrs.num_repeat));
  }
  DYNATTN_RETURN_IF_ERROR(CheckActivation("current_key", args.current_key));
  const TensorView& ck = args.current_key;
  const DType io = ck.dtype;
  const int64_t tq = ck.shape[0], kv_heads = ck.shape[1], dim = ck.shape[2];
  if (kv_heads < 1 || dim < 1 || kv_heads > (1 << 20) || dim > (1 << 20)) {
    return Status::Invalid("current_key",
                           "needs >= 1 heads and head_dim >= 1, got shape " + ShapeString(ck));
  }
  DYNATTN_RETURN_IF_ERROR(CheckActivation("current_value", args.current_value));
  const int64_t dim_v = args.current_value.shape[2];
  if (dim_v < 1 || dim_v > (1 << 20)) {
    return Status::Invalid("current_value", "needs head_dim_v in [1, 2^20], got shape " +
                                                ShapeString(args.current_value));
  }
  DYNATTN_RETURN_IF_ERROR(CheckExact("current_value", args.current_value, io, tq, kv_heads, dim_v,
                                     "(Tq, num_kv_heads of current_key, head_dim_v)"));
  BatchShape shape;
  DYNATTN_RETURN_IF_ERROR(
      CheckBatch(args.seqstarts, args.kvstarts, tq, args.max_seqlen, args.max_kvlen, &shape));
  DYNATTN_RETURN_IF_ERROR(CheckStartPos(args.start_pos, TensorView{}, &shape.batch));
  KvSource source;
  DYNATTN_RETURN_IF_ERROR(CheckCacheSide(attrs.cache, args.cache, args.scale, args.cache_desc,
                                         args.cachestarts, static_cast<int>(kv_heads),
                                         static_cast<int>(dim), static_cast<int>(dim_v),
                                         /*values_from_keys=*/false, shape.batch, &source));
  DYNATTN_RETURN_IF_ERROR(ApplyFp8Scales(args.k_scale, args.v_scale, &source.cache));
  const int64_t rows = shape.batch.kvstarts[shape.batch.size];
  const int64_t out_heads = kv_heads * attrs.num_repeat;
  DYNATTN_RETURN_IF_ERROR(CheckExact("key", args.key, io, rows, out_heads, dim,
                                     "(kvstarts[B], num_kv_heads * num_repeat, head_dim)",
                                     PlanData::kMayBeNull));
  DYNATTN_RETURN_IF_ERROR(CheckExact("value", args.value, io, rows, out_heads, dim_v,
                                     "(kvstarts[B], num_kv_heads * num_repeat, head_dim_v)",
                                     PlanData::kMayBeNull));
  DYNATTN_RETURN_IF_ERROR(CheckCallDevice(source.cache, {{"current_key", &args.current_key},
                                                         {"current_value", &args.current_value},
                                                         {"key", &args.key},
                                                         {"value", &args.value}}));
  call->write = WriteOf(shape.batch, io, ck, args.current_value, source);
  call->gather =
      GatherProblem{shape.batch, io, attrs.num_repeat, args.key.data, args.value.data, source};
  call->gather.key_row_stride = RowStride(args.key);
  call->gather.value_row_stride = RowStride(args.value);
  return Status::Ok();
}

Status CheckQueryAndNewTokens(const AttentionAttrs& a, const TensorView& query,
                              const TensorView* current_key, const TensorView* current_value,
                              const std::string& tokens_name, QueryShape* shape) {
  DYNATTN_RETURN_IF_ERROR(CheckHeads(a, &shape->kv_heads));
  DYNATTN_RETURN_IF_ERROR(CheckActivation("query", query));
  shape->io = query.dtype;
  shape->tokens = query.shape[0];
  const std::string query_rule = "(" + tokens_name + ", num_heads, head_dim)";
  DYNATTN_RETURN_IF_ERROR(CheckExact("query", query, shape->io, shape->tokens, a.num_heads,
                                     a.head_dim, query_rule.c_str()));
  if (current_key == nullptr) return Status::Ok();
  const std::string new_rule = "(" + tokens_name + ", num_kv_heads, head_dim)";
  DYNATTN_RETURN_IF_ERROR(CheckExact("current_key", *current_key, shape->io, shape->tokens,
                                     shape->kv_heads, a.head_dim, new_rule.c_str()));
  if (a.value_from_key) {
    if (!current_value->present()) return Status::Ok();
    return Status::Invalid("current_value",
                           "must be absent with value_from_key (the values are the keys' first "
                           "head_dim_v elements)");
  }
  const std::string value_rule = "(" + tokens_name + ", num_kv_heads, head_dim_v)";
  return CheckExact("current_value", *current_value, shape->io, shape->tokens, shape->kv_heads,
                    ValueDimOf(a), value_rule.c_str());
}

Status ValidateMultiHeadAttention(const AttentionAttrs& attrs, const MultiHeadAttentionArgs& args,
                                  MultiHeadAttentionCall* call) {
  QueryShape q;
  DYNATTN_RETURN_IF_ERROR(CheckQueryAndNewTokens(attrs, args.query, nullptr, nullptr, "Tq", &q));
  const auto [kv_heads, io, tq] = q;
  BatchShape shape;
  DYNATTN_RETURN_IF_ERROR(
      CheckBatch(args.seqstarts, args.kvstarts, tq, args.max_seqlen, args.max_kvlen, &shape));
  DYNATTN_RETURN_IF_ERROR(CheckContextCoversQueries(shape.batch));
  DYNATTN_RETURN_IF_ERROR(CheckDecodingBatches(args.decoding_batches, &shape.batch));
  const int64_t rows = shape.batch.kvstarts[shape.batch.size];
  DYNATTN_RETURN_IF_ERROR(CheckExact("key", args.key, io, rows, kv_heads, attrs.head_dim,
                                     "(kvstarts[B], num_kv_heads, head_dim)"));
  if (attrs.value_from_key && args.value.present()) {
    return Status::Invalid("value",
                           "must be absent with value_from_key (the values are the "
                           "keys' first head_dim_v elements)");
  }
  if (!attrs.value_from_key) {
    DYNATTN_RETURN_IF_ERROR(CheckExact("value", args.value, io, rows, kv_heads, ValueDimOf(attrs),
                                       "(kvstarts[B], num_kv_heads, head_dim_v)"));
  }
  AttentionProblem& p = call->attention;
  p = AttentionProblem{};
  DYNATTN_RETURN_IF_ERROR(CheckMask(args.attn_mask, io, attrs.num_heads, shape.batch, &p));
  DYNATTN_RETURN_IF_ERROR(ReadSinks(args.sinks, attrs.num_heads, &call->sinks));
  DYNATTN_RETURN_IF_ERROR(
      ReadAlibiSlopes(attrs.is_alibi, args.alibi_slopes, attrs.num_heads, &call->alibi_slopes));
  DYNATTN_RETURN_IF_ERROR(CheckExact("attn_output", args.attn_output, io, tq, attrs.num_heads,
                                     ValueDimOf(attrs), "(Tq, num_heads, head_dim_v)",
                                     PlanData::kMayBeNull));
  DYNATTN_RETURN_IF_ERROR(CheckLse(args.lse, tq, attrs.num_heads, "Tq"));
  DYNATTN_RETURN_IF_ERROR(CheckSameDevice(args.query.device, {{"key", &args.key},
                                                              {"value", &args.value},
                                                              {"attn_mask", &args.attn_mask},
                                                              {"attn_output", &args.attn_output},
                                                              {"lse", &args.lse}}));
  FinishAttention(attrs, kv_heads, io, shape.batch, args.query, args.attn_output, args.lse, call);
  // The packed K/V tensors are an unquantized cache addressed by kvstarts (their row strides
  // are its slot strides).
  CacheDesc& c = p.kv.cache;
  c.elem = PlainCacheElemOf(io);
  c.quant_group = attrs.head_dim;
  c.num_kv_heads = kv_heads;
  c.head_dim = attrs.head_dim;
  c.head_dim_v = ValueDimOf(attrs);
  c.num_slots = rows;
  c.key = CachePlane{args.key.data, RowStride(args.key), attrs.head_dim};
  c.value = CachePlane{args.value.data, RowStride(args.value), c.head_dim_v};
  if (attrs.value_from_key) c = ValuesFromKeys(c, c.head_dim_v);
  c.device = args.query.device;
  p.kv.slots = SlotMap{SlotMap::Mode::kOffset, shape.batch.kvstarts, 0, 1};
  return Status::Ok();
}

Status ValidateMultiHeadCacheAttention(const MultiHeadCacheAttentionAttrs& attrs,
                                       const MultiHeadCacheAttentionArgs& args,
                                       MultiHeadCacheAttentionCall* call) {
  const AttentionAttrs& a = attrs.attention;
  QueryShape q;
  DYNATTN_RETURN_IF_ERROR(
      CheckQueryAndNewTokens(a, args.query, &args.current_key, &args.current_value, "Tq", &q));
  const auto [kv_heads, io, tq] = q;
  BatchShape shape;
  DYNATTN_RETURN_IF_ERROR(
      CheckBatch(args.seqstarts, args.kvstarts, tq, args.max_seqlen, args.max_kvlen, &shape));
  DYNATTN_RETURN_IF_ERROR(CheckStartPos(args.start_pos, args.key_offsets, &shape.batch));
  DYNATTN_RETURN_IF_ERROR(CheckDecodingBatches(args.decoding_batches, &shape.batch));
  KvSource source;
  DYNATTN_RETURN_IF_ERROR(CheckCacheSide(attrs.cache, args.cache, args.scale, args.cache_desc,
                                         args.cachestarts, kv_heads, a.head_dim, ValueDimOf(a),
                                         a.value_from_key, shape.batch, &source));
  DYNATTN_RETURN_IF_ERROR(ApplyFp8Scales(args.k_scale, args.v_scale, &source.cache));
  if (a.value_from_key) {
    DYNATTN_RETURN_IF_ERROR(UseKeysAsValues(args.v_scale, ValueDimOf(a), &source.cache));
  }
  DYNATTN_RETURN_IF_ERROR(ReadSinks(args.sinks, a.num_heads, &call->sinks));
  DYNATTN_RETURN_IF_ERROR(
      ReadAlibiSlopes(a.is_alibi, args.alibi_slopes, a.num_heads, &call->alibi_slopes));
  AttentionProblem& p = call->attention;
  p = AttentionProblem{};
  DYNATTN_RETURN_IF_ERROR(CheckMask(args.attn_mask, io, a.num_heads, shape.batch, &p));
  DYNATTN_RETURN_IF_ERROR(CheckExact("attn_output", args.attn_output, io, tq, a.num_heads,
                                     ValueDimOf(a), "(Tq, num_heads, head_dim_v)",
                                     PlanData::kMayBeNull));
  DYNATTN_RETURN_IF_ERROR(CheckLse(args.lse, tq, a.num_heads, "Tq"));
  DYNATTN_RETURN_IF_ERROR(CheckCallDevice(source.cache, {{"query", &args.query},
                                                         {"current_key", &args.current_key},
                                                         {"current_value", &args.current_value},
                                                         {"attn_mask", &args.attn_mask},
                                                         {"attn_output", &args.attn_output},
                                                         {"lse", &args.lse}}));
  FinishAttention(a, kv_heads, io, shape.batch, args.query, args.attn_output, args.lse, call);
  p.kv = source;
  call->write = WriteOf(shape.batch, io, args.current_key, args.current_value, source);
  return Status::Ok();
}

}  // namespace dynattn::internal

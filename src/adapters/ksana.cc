// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// KsanaLLM block pools and their Ascend ATB kcache/vcache views (spec unified-and-ksana §4.3,
// §4.8). Why: a Ksana block holds every layer's K and V, so a layer's plane is the pool offset
// by that layer's sub-block, with Ksana block ids stepping over 2L sub-blocks (block_stride =
// 2L * T slots); the ATB views are the same memory seen as 2LN sub-blocks of T tokens, where
// (b, l) is sub-block 2L * b + sigma_l * l and V is K shifted by sigma_kv sub-blocks. Nothing is
// copied; only block tables become ATB ids.

#include <string>
#include <utility>
#include <vector>

#include "core/checked_math.h"
#include "dynattn/adapters.h"
#include "src/adapters/adapter_util.h"

namespace dynattn {

using adapters_internal::CheckDataTensor;
using adapters_internal::CheckFormat;
using adapters_internal::CheckIndexTensor;
using adapters_internal::FillBlockCache;
using adapters_internal::IndexAt;
using adapters_internal::RowLayout;
using adapters_internal::ShapeString;
using adapters_internal::Str;

namespace {

/// Rows of D elements (or D / G scales) in one sub-block: T * Hkv.
int64_t SubBlockRows(const KsanaPoolAttrs& a) {
  return static_cast<int64_t>(a.block_size) * a.num_kv_heads;
}

/// Elements (bytes for int4) in one pool row: 2L sub-blocks of T * Hkv * D.
int64_t PoolRowElems(const KsanaPoolAttrs& a) {
  const int64_t d = a.format.quant_bit == 4 ? a.head_dim / 2 : a.head_dim;
  return 2 * a.num_layer * SubBlockRows(a) * d;
}

Status CheckAttrs(const KsanaPoolAttrs& a) {
  if (a.order != KsanaBlockOrder::kKvLayer && a.order != KsanaBlockOrder::kLayerKv) {
    return Status::Invalid("order", "must be kKvLayer or kLayerKv");
  }
  if (a.num_layer < 1) return Status::Invalid("num_layer", "must be >= 1, got " + Str(a.num_layer));
  if (a.num_blocks < 0)
    return Status::Invalid("num_blocks", "must be >= 0, got " + Str(a.num_blocks));
  if (a.block_size < 1) {
    return Status::Invalid("block_size", "must be >= 1, got " + Str(a.block_size));
  }
  if (a.num_kv_heads < 1) {
    return Status::Invalid("num_kv_heads", "must be >= 1, got " + Str(a.num_kv_heads));
  }
  DYNATTN_RETURN_IF_ERROR(CheckFormat(a.format, a.head_dim));
  // The pool's shape is computed from these before it is compared with the tensor's.
  int64_t row = 0, blocks = 0;
  if (!internal::CheckedProduct({2, a.num_layer, a.block_size, a.num_kv_heads, a.head_dim}, &row) ||
      row > internal::kMaxElements || !internal::CheckedAdd(a.num_blocks, 1, &blocks)) {
    return Status::Invalid("num_layer",
                           "a pool of N blocks of 2 * num_layer * block_size * num_kv_heads * "
                           "head_dim elements is too large for any tensor");
  }
  // ATB block ids (2L * block + layer) and slots (id * T + offset) stay in int64.
  int64_t atb_slots = 0;
  if (!internal::CheckedProduct({2, a.num_layer, blocks, a.block_size}, &atb_slots)) {
    return Status::Invalid("num_blocks",
                           "2 * num_layer * (num_blocks + 1) * block_size ATB "
                           "slots overflow int64 (num_blocks = " +
                               Str(a.num_blocks) + ")");
  }
  return Status::Ok();
}

Status CheckLayer(const KsanaPoolAttrs& a, int layer) {
  if (layer < 0 || layer >= a.num_layer) {
    return Status::Invalid(
        "layer", "must be in [0, num_layer = " + Str(a.num_layer) + "), got " + Str(layer));
  }
  return Status::Ok();
}

/// A rank-2 pool tensor of shape (N [+1], row).
Status CheckPoolShape(const char* name, const TensorView& t, const KsanaPoolAttrs& a, int64_t row) {
  const int64_t blocks = a.num_blocks + (a.slack_block ? 1 : 0);
  if (t.shape[0] != blocks || t.shape[1] != row) {
    return Status::Invalid(name, "must have shape (" + Str(blocks) + ", " + Str(row) + ") = (N" +
                                     (a.slack_block ? " + 1 slack" : "") +
                                     " blocks, 2 * L * T * Hkv * row), got " + ShapeString(t));
  }
  return Status::Ok();
}

Status CheckScalePool(const TensorView& s, const KsanaPoolAttrs& a) {
  const CacheFormat& f = a.format;
  if (f.quant_bit == 0) {
    if (s.present()) return Status::Invalid("scale_pool", "must be absent when quant_bit is 0");
    return Status::Ok();
  }
  if (!s.present()) return Status::Invalid("scale_pool", "is required when quant_bit is nonzero");
  if (s.dtype != DType::kF16 && s.dtype != DType::kF32) {
    return Status::Invalid("scale_pool",
                           std::string("must be float16 or float32, got ") + DTypeName(s.dtype));
  }
  if (s.rank != 2) return Status::Invalid("scale_pool", "must have rank 2, got " + ShapeString(s));
  const int64_t groups = a.head_dim / f.quant_group;
  DYNATTN_RETURN_IF_ERROR(
      CheckPoolShape("scale_pool", s, a, 2 * a.num_layer * SubBlockRows(a) * groups));
  if (!s.IsDense()) return Status::Invalid("scale_pool", "must be dense row-major");
  return Status::Ok();
}

/// A dense [blocks, T, Hkv, row] view `sub_blocks` sub-blocks into `pool`.
TensorView SubBlockView(const TensorView& pool, const KsanaPoolAttrs& a, int64_t sub_blocks,
                        int64_t row) {
  const int64_t offset = sub_blocks * SubBlockRows(a) * row;
  char* data = static_cast<char*>(pool.data) + offset * static_cast<int64_t>(DTypeSize(pool.dtype));
  return TensorView::Dense(data, pool.dtype, {a.AtbViewBlocks(), a.block_size, a.num_kv_heads, row},
                           pool.device);
}

/// Ksana block id entry `flat` of `table`, checked against [0, N) (or -1 padding when allowed).
Status KsanaIdAt(const TensorView& table, int64_t flat, const KsanaPoolAttrs& a, bool padding,
                 int64_t* id) {
  *id = IndexAt(table, flat);
  if ((*id >= 0 && *id < a.num_blocks) || (padding && *id == -1)) return Status::Ok();
  const int64_t cols = table.shape[1];
  return Status::Invalid("ksana_table", "ksana_table[" + Str(flat / cols) + "][" +
                                            Str(flat % cols) + "] = " + Str(*id) +
                                            " must be in [0, num_blocks = " + Str(a.num_blocks) +
                                            ")" + (padding ? " or -1 (padding)" : ""));
}

}  // namespace

Status CheckKsanaPool(const TensorView& pool, const TensorView& scale_pool,
                      const KsanaPoolAttrs& attrs) {
  DYNATTN_RETURN_IF_ERROR(CheckAttrs(attrs));
  DYNATTN_RETURN_IF_ERROR(CheckDataTensor("pool", pool, attrs.format, 2));
  DYNATTN_RETURN_IF_ERROR(CheckPoolShape("pool", pool, attrs, PoolRowElems(attrs)));
  return CheckScalePool(scale_pool, attrs);
}

Status MakeKsanaBlockCache(const TensorView& pool, const TensorView& scale_pool,
                           const KsanaPoolAttrs& attrs, int layer, BlockCache* out) {
  DYNATTN_RETURN_IF_ERROR(CheckKsanaPool(pool, scale_pool, attrs));
  DYNATTN_RETURN_IF_ERROR(CheckLayer(attrs, layer));
  const int64_t sub = SubBlockRows(attrs);
  RowLayout rows;
  rows.key_offset = attrs.LayerStride() * layer * sub;
  rows.value_offset = rows.key_offset + attrs.KvStride() * sub;
  rows.block = 2 * attrs.num_layer * sub;
  rows.token = attrs.num_kv_heads;
  rows.head = 1;
  FillBlockCache(rows, {&pool, &pool, &scale_pool, &scale_pool}, attrs.format, attrs.num_kv_heads,
                 attrs.head_dim, attrs.head_dim, attrs.block_size, attrs.num_blocks, out);
  return Status::Ok();
}

Status MakeAtbViews(const TensorView& pool, const TensorView& scale_pool,
                    const KsanaPoolAttrs& attrs, AtbViews* out) {
  DYNATTN_RETURN_IF_ERROR(CheckKsanaPool(pool, scale_pool, attrs));
  const CacheFormat& f = attrs.format;
  const int64_t row = f.quant_bit == 4 ? attrs.head_dim / 2 : attrs.head_dim;
  AtbViews v;
  v.kcache = SubBlockView(pool, attrs, 0, row);
  v.vcache = SubBlockView(pool, attrs, attrs.KvStride(), row);
  if (f.quant_bit != 0) {
    const int64_t groups = attrs.head_dim / f.quant_group;
    v.kscale = SubBlockView(scale_pool, attrs, 0, groups);
    v.vscale = SubBlockView(scale_pool, attrs, attrs.KvStride(), groups);
  }
  *out = v;
  return Status::Ok();
}

Status KsanaToAtbBlockTable(const TensorView& ksana_table, const KsanaPoolAttrs& attrs, int layer,
                            std::vector<int64_t>* atb_table) {
  DYNATTN_RETURN_IF_ERROR(CheckAttrs(attrs));
  DYNATTN_RETURN_IF_ERROR(CheckLayer(attrs, layer));
  const int64_t any[2] = {-1, -1};
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("ksana_table", ksana_table, 2, any));
  std::vector<int64_t> ids(ksana_table.NumElements());
  for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) {
    int64_t id = 0;
    DYNATTN_RETURN_IF_ERROR(KsanaIdAt(ksana_table, i, attrs, /*padding=*/true, &id));
    ids[i] = id < 0 ? -1 : attrs.AtbBlockId(id, layer);
  }
  *atb_table = std::move(ids);
  return Status::Ok();
}

Status AtbSlotMapping(const TensorView& ksana_table, const TensorView& requests,
                      const TensorView& positions, const KsanaPoolAttrs& attrs, int layer,
                      std::vector<int64_t>* slots) {
  DYNATTN_RETURN_IF_ERROR(CheckAttrs(attrs));
  DYNATTN_RETURN_IF_ERROR(CheckLayer(attrs, layer));
  const int64_t any[2] = {-1, -1};
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("ksana_table", ksana_table, 2, any));
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("requests", requests, 1, any));
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("positions", positions, 1, &requests.shape[0]));
  const int64_t batch = ksana_table.shape[0], cols = ksana_table.shape[1];
  const int64_t t = attrs.block_size;
  std::vector<int64_t> out(requests.shape[0]);
  for (int64_t i = 0; i < requests.shape[0]; ++i) {
    const int64_t r = IndexAt(requests, i), p = IndexAt(positions, i);
    if (r < 0 || r >= batch) {
      return Status::Invalid("requests", "requests[" + Str(i) + "] = " + Str(r) +
                                             " must be in [0, B = " + Str(batch) + ")");
    }
    if (p < 0 || p / t >= cols) {
      return Status::Invalid("positions", "positions[" + Str(i) + "] = " + Str(p) +
                                              " must be in [0, max_blocks * T = " + Str(cols * t) +
                                              ")");
    }
    int64_t id = 0;
    DYNATTN_RETURN_IF_ERROR(KsanaIdAt(ksana_table, r * cols + p / t, attrs, false, &id));
    out[i] = attrs.AtbBlockId(id, layer) * t + p % t;
  }
  *slots = std::move(out);
  return Status::Ok();
}

}  // namespace dynattn

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Plain paged caches (vLLM, FlashInfer, ATB views) as block caches, in place. Why: every such
// layout is "pages of tokens of heads of D", only the order of the dims and where V starts
// differ; each function here names its dims, checks them, and lets FillBlockCache do the rest.
// A head-major page (HND) still fits the flat-slot descriptor: slot stride D, head stride
// page_size * D, and block ids step over Hkv * page_size slots.

#include <string>

#include "dynattn/adapters.h"
#include "src/adapters/adapter_util.h"

namespace dynattn {

using adapters_internal::CheckDataTensor;
using adapters_internal::CheckFormat;
using adapters_internal::CheckScaleTensor;
using adapters_internal::FillBlockCache;
using adapters_internal::HeadDimOf;
using adapters_internal::PlaneTensors;
using adapters_internal::RowLayout;
using adapters_internal::ShapeString;
using adapters_internal::Str;

namespace {

/// Extents of a paged cache.
struct PagedDims {
  int64_t pages = 0, page_size = 0, heads = 0;
};

Status CheckDims(const char* name, const PagedDims& d) {
  if (d.page_size < 1 || d.heads < 1) {
    return Status::Invalid(name, "page (block) size and num_kv_heads must be >= 1, got " +
                                     Str(d.page_size) + " and " + Str(d.heads));
  }
  if (d.page_size > (int64_t{1} << 30) || d.heads > (int64_t{1} << 30)) {
    return Status::Invalid(name, "page size and num_kv_heads must fit in int");
  }
  return Status::Ok();
}

/// Rows of one page: NHD is token-major, HND head-major.
RowLayout PageRows(PageLayout layout, const PagedDims& d, int64_t planes_per_page) {
  RowLayout l;
  l.block = planes_per_page * d.page_size * d.heads;
  l.token = layout == PageLayout::kNHD ? d.heads : 1;
  l.head = layout == PageLayout::kNHD ? 1 : d.page_size;
  return l;
}

/// Checks the scales of the (one or two) data tensors and builds the cache.
Status Finish(const RowLayout& rows, const PlaneTensors& t, const char* scale_names[2],
              const CacheFormat& f, const PagedDims& d, BlockCache* out) {
  const int64_t head_dim = HeadDimOf(*t.key, f), head_dim_v = HeadDimOf(*t.value, f);
  DYNATTN_RETURN_IF_ERROR(CheckFormat(f, head_dim));
  DYNATTN_RETURN_IF_ERROR(CheckFormat(f, head_dim_v));
  DYNATTN_RETURN_IF_ERROR(CheckScaleTensor(scale_names[0], *t.key_scale, *t.key, f, head_dim));
  DYNATTN_RETURN_IF_ERROR(
      CheckScaleTensor(scale_names[1], *t.value_scale, *t.value, f, head_dim_v));
  if (f.quant_bit != 0 && t.key_scale->dtype != t.value_scale->dtype) {
    return Status::Invalid(scale_names[1], "must have the dtype of " + std::string(scale_names[0]));
  }
  FillBlockCache(rows, t, f, static_cast<int>(d.heads), head_dim, head_dim_v,
                 static_cast<int>(d.page_size), d.pages, out);
  return Status::Ok();
}

}  // namespace

Status MakePagedBlockCache(const TensorView& key, const TensorView& value,
                           const TensorView& key_scale, const TensorView& value_scale,
                           PageLayout layout, const CacheFormat& format, BlockCache* out) {
  DYNATTN_RETURN_IF_ERROR(CheckDataTensor("key", key, format, 4));
  DYNATTN_RETURN_IF_ERROR(CheckDataTensor("value", value, format, 4));
  // The last dim may differ: value rows of their own size (head_dim_v).
  bool same = key.dtype == value.dtype && key.device == value.device;
  for (int i = 0; i < 3; ++i) same = same && key.shape[i] == value.shape[i];
  if (!same) {
    return Status::Invalid("value", std::string("must match key's dtype, device and shape but for "
                                                "its last dim (head_dim_v) ") +
                                        DTypeName(key.dtype) + " " + ShapeString(key) + ", got " +
                                        DTypeName(value.dtype) + " " + ShapeString(value));
  }
  const bool nhd = layout == PageLayout::kNHD;
  const PagedDims d{key.shape[0], key.shape[nhd ? 1 : 2], key.shape[nhd ? 2 : 1]};
  DYNATTN_RETURN_IF_ERROR(CheckDims("key", d));
  const char* scale_names[2] = {"key_scale", "value_scale"};
  return Finish(PageRows(layout, d, 1), {&key, &value, &key_scale, &value_scale}, scale_names,
                format, d, out);
}

Status MakeCombinedBlockCache(const TensorView& kv, const TensorView& kv_scale, PageLayout layout,
                              const CacheFormat& format, BlockCache* out) {
  DYNATTN_RETURN_IF_ERROR(CheckDataTensor("kv", kv, format, 5));
  if (kv.shape[1] != 2) {
    return Status::Invalid("kv", "dim 1 must be 2 (K, V), got shape " + ShapeString(kv));
  }
  const bool nhd = layout == PageLayout::kNHD;
  const PagedDims d{kv.shape[0], kv.shape[nhd ? 2 : 3], kv.shape[nhd ? 3 : 2]};
  DYNATTN_RETURN_IF_ERROR(CheckDims("kv", d));
  RowLayout rows = PageRows(layout, d, 2);
  rows.value_offset = d.page_size * d.heads;
  const char* scale_names[2] = {"kv_scale", "kv_scale"};
  return Finish(rows, {&kv, &kv, &kv_scale, &kv_scale}, scale_names, format, d, out);
}

Status MakeVllmCpuBlockCache(const TensorView& kv, const TensorView& kv_scale,
                             const CacheFormat& format, BlockCache* out) {
  if (format.quant_bit != 0) {
    return Status::Invalid("quant_bit",
                           "must be 0: vLLM's CPU cache is unquantized (fp32, fp16, "
                           "bf16, fp8), got " +
                               Str(format.quant_bit));
  }
  DYNATTN_RETURN_IF_ERROR(CheckDataTensor("kv_cache", kv, format, 5));
  if (kv.shape[0] != 2) {
    return Status::Invalid("kv_cache", "dim 0 must be 2 (K, V), got shape " + ShapeString(kv));
  }
  const PagedDims d{kv.shape[1], kv.shape[3], kv.shape[2]};
  DYNATTN_RETURN_IF_ERROR(CheckDims("kv_cache", d));
  RowLayout rows = PageRows(PageLayout::kHND, d, 1);
  rows.value_offset = d.pages * d.page_size * d.heads;
  const char* scale_names[2] = {"kv_scale", "kv_scale"};
  DYNATTN_RETURN_IF_ERROR(
      Finish(rows, {&kv, &kv, &kv_scale, &kv_scale}, scale_names, format, d, out));
  // Keys are dimension-major inside a (block, head): [D, block_size]. The block cache's slot
  // block * Hkv * block_size + t (the value plane's, head-major) is element t of the tile of
  // block `block`, whose rows are one element apart and whose dimensions block_size apart.
  const int64_t dim = out->cache.head_dim;
  CachePlane& key = out->cache.key;
  key.slot_stride = 1;
  key.head_stride = d.page_size * dim;
  key.dim_stride = d.page_size;
  key.slots_per_tile = d.heads * d.page_size;
  key.tile_stride = d.heads * d.page_size * dim;
  return Status::Ok();
}

}  // namespace dynattn

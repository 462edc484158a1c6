// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// vLLM and FlashInfer step metadata -> UnifiedAttention's (query_start_loc, context_lens,
// block_table). Why: the engines describe the same step with different numbers (total lengths,
// indptr arrays, last-page fill), in int32 or int64; converting costs O(B * max_blocks), never
// touches the cache, and checks every id the step will read so that a bad table is reported here,
// by the engine's own input name.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/adapters.h"
#include "src/adapters/adapter_util.h"

namespace dynattn {

using adapters_internal::CheckIndexTensor;
using adapters_internal::CheckOffsets;
using adapters_internal::IndexAt;
using adapters_internal::Str;

namespace {

std::string At(const char* name, int64_t i) { return std::string(name) + "[" + Str(i) + "]"; }

std::string At2(const char* name, int64_t i, int64_t j) {
  return std::string(name) + "[" + Str(i) + "][" + Str(j) + "]";
}

Status CheckSizes(int block_size, int64_t num_blocks) {
  if (block_size < 1) return Status::Invalid("block_size", "must be >= 1, got " + Str(block_size));
  if (num_blocks < 0) return Status::Invalid("num_blocks", "must be >= 0, got " + Str(num_blocks));
  return Status::Ok();
}

/// Checks the first `needed` ids of table row `b`.
Status CheckTableRow(const TensorView& table, int64_t b, int64_t needed, int64_t num_blocks) {
  const int64_t cols = table.shape[1];
  if (needed > cols) {
    return Status::Invalid("block_table", "request " + Str(b) + " needs " + Str(needed) +
                                              " blocks, the table has " + Str(cols) + " columns");
  }
  for (int64_t j = 0; j < needed; ++j) {
    const int64_t id = IndexAt(table, b * cols + j);
    if (id < 0 || id >= num_blocks) {
      return Status::Invalid("block_table", At2("block_table", b, j) + " = " + Str(id) +
                                                " must be in [0, num_blocks = " + Str(num_blocks) +
                                                ")");
    }
  }
  return Status::Ok();
}

/// Checks vLLM's slot_mapping against the converted metadata.
Status CheckSlotMapping(const TensorView& slots, const UnifiedMetadata& m, int block_size) {
  const int64_t tokens = m.query_start_loc.back();
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("slot_mapping", slots, 1, &tokens));
  for (int64_t b = 0; b < m.num_requests(); ++b) {
    for (int64_t t = m.query_start_loc[b]; t < m.query_start_loc[b + 1]; ++t) {
      const int64_t p = m.context_lens[b] + t - m.query_start_loc[b];
      const int64_t id = m.block_table[b * m.max_blocks + p / block_size];
      const int64_t want = id * block_size + p % block_size;
      if (IndexAt(slots, t) != want) {
        return Status::Invalid("slot_mapping",
                               At("slot_mapping", t) + " = " + Str(IndexAt(slots, t)) +
                                   ", but block_table gives slot " + Str(want) + " (request " +
                                   Str(b) + ", position " + Str(p) + ")");
      }
    }
  }
  return Status::Ok();
}

/// query_start_loc (or qo_indptr) copied as int64, after its checks.
Status ReadStarts(const char* name, const TensorView& t, UnifiedMetadata* m) {
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor(name, t, 1, std::vector<int64_t>{-1}.data()));
  DYNATTN_RETURN_IF_ERROR(CheckOffsets(name, t));
  m->query_start_loc.resize(t.shape[0]);
  for (int64_t i = 0; i < t.shape[0]; ++i) m->query_start_loc[i] = IndexAt(t, i);
  return Status::Ok();
}

/// kv length of FlashInfer request b with `pages` pages.
Status FlashInferKvLen(const TensorView& last_len, int64_t b, int64_t pages, int page_size,
                       int64_t* kv_len) {
  const int64_t last = IndexAt(last_len, b);
  const bool ok = pages > 0 ? last >= 1 && last <= page_size : last == 0;
  if (!ok) {
    return Status::Invalid("kv_last_page_len",
                           At("kv_last_page_len", b) + " = " + Str(last) + " must be in " +
                               (pages > 0 ? "[1, page_size = " + Str(page_size) + "]"
                                          : std::string("{0} for a request without pages")));
  }
  *kv_len = pages > 0 ? (pages - 1) * page_size + last : 0;
  return Status::Ok();
}

/// Context length of request b: kv (or sequence) length minus its query tokens.
Status ContextOf(const char* name, int64_t b, int64_t kv_len, const UnifiedMetadata& m,
                 int64_t* context) {
  const int64_t query = m.query_start_loc[b + 1] - m.query_start_loc[b];
  if (kv_len < query) {
    return Status::Invalid(name, "request " + Str(b) + " has " + Str(query) +
                                     " query tokens but a kv length of only " + Str(kv_len));
  }
  *context = kv_len - query;
  return Status::Ok();
}

/// FlashInfer's page ids of request b, checked, into row b of the table.
Status CopyPages(const TensorView& indices, int64_t begin, int64_t end, int64_t num_pages,
                 int64_t* row) {
  for (int64_t i = begin; i < end; ++i) {
    const int64_t id = IndexAt(indices, i);
    if (id < 0 || id >= num_pages) {
      return Status::Invalid("kv_indices", At("kv_indices", i) + " = " + Str(id) +
                                               " must be in [0, num_pages = " + Str(num_pages) +
                                               ")");
    }
    row[i - begin] = id;
  }
  return Status::Ok();
}

}  // namespace

void UnifiedMetadata::BindTo(UnifiedAttentionArgs* args) const {
  const int64_t b = num_requests();
  args->query_start_loc = TensorView::Dense(query_start_loc.data(), DType::kI64, {b + 1});
  args->context_lens = TensorView::Dense(context_lens.data(), DType::kI64, {b});
  args->block_table = TensorView::Dense(block_table.data(), DType::kI64, {b, max_blocks});
}

Status FromVllm(const VllmMetadata& in, int block_size, int64_t num_blocks, UnifiedMetadata* out) {
  DYNATTN_RETURN_IF_ERROR(CheckSizes(block_size, num_blocks));
  UnifiedMetadata m;
  DYNATTN_RETURN_IF_ERROR(ReadStarts("query_start_loc", in.query_start_loc, &m));
  const int64_t batch = in.query_start_loc.shape[0] - 1;
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("seq_lens", in.seq_lens, 1, &batch));
  const int64_t table_shape[2] = {batch, -1};
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("block_table", in.block_table, 2, table_shape));
  m.max_blocks = in.block_table.shape[1];
  m.context_lens.resize(batch);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t seq = IndexAt(in.seq_lens, b);
    DYNATTN_RETURN_IF_ERROR(ContextOf("seq_lens", b, seq, m, &m.context_lens[b]));
    const int64_t needed = (seq + block_size - 1) / block_size;
    DYNATTN_RETURN_IF_ERROR(CheckTableRow(in.block_table, b, needed, num_blocks));
  }
  m.block_table.resize(batch * m.max_blocks);
  for (int64_t i = 0; i < batch * m.max_blocks; ++i) m.block_table[i] = IndexAt(in.block_table, i);
  if (in.slot_mapping.present()) {
    DYNATTN_RETURN_IF_ERROR(CheckSlotMapping(in.slot_mapping, m, block_size));
  }
  *out = std::move(m);
  return Status::Ok();
}

Status FromFlashInfer(const FlashInferMetadata& in, int page_size, int64_t num_pages,
                      UnifiedMetadata* out) {
  if (page_size < 1) return Status::Invalid("page_size", "must be >= 1, got " + Str(page_size));
  if (num_pages < 0) return Status::Invalid("num_pages", "must be >= 0, got " + Str(num_pages));
  UnifiedMetadata m;
  DYNATTN_RETURN_IF_ERROR(ReadStarts("qo_indptr", in.qo_indptr, &m));
  const int64_t batch = in.qo_indptr.shape[0] - 1, starts = batch + 1;
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("kv_indptr", in.kv_indptr, 1, &starts));
  DYNATTN_RETURN_IF_ERROR(CheckOffsets("kv_indptr", in.kv_indptr));
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("kv_last_page_len", in.kv_last_page_len, 1, &batch));
  const int64_t used = IndexAt(in.kv_indptr, batch), any = -1;
  DYNATTN_RETURN_IF_ERROR(CheckIndexTensor("kv_indices", in.kv_indices, 1, &any));
  if (in.kv_indices.shape[0] < used) {
    return Status::Invalid("kv_indices", "must have at least kv_indptr[B] = " + Str(used) +
                                             " entries, got " + Str(in.kv_indices.shape[0]));
  }
  m.context_lens.resize(batch);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t pages = IndexAt(in.kv_indptr, b + 1) - IndexAt(in.kv_indptr, b);
    m.max_blocks = std::max(m.max_blocks, pages);
    int64_t kv_len = 0;
    DYNATTN_RETURN_IF_ERROR(FlashInferKvLen(in.kv_last_page_len, b, pages, page_size, &kv_len));
    DYNATTN_RETURN_IF_ERROR(ContextOf("qo_indptr", b, kv_len, m, &m.context_lens[b]));
  }
  m.block_table.assign(batch * m.max_blocks, 0);
  for (int64_t b = 0; b < batch; ++b) {
    DYNATTN_RETURN_IF_ERROR(CopyPages(in.kv_indices, IndexAt(in.kv_indptr, b),
                                      IndexAt(in.kv_indptr, b + 1), num_pages,
                                      m.block_table.data() + b * m.max_blocks));
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace dynattn

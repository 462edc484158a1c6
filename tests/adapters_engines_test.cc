// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The vLLM and FlashInfer adapters (dynattn/adapters.h): random steps over every cache layout
// (vLLM NHD and its CPU layout with dimension-major keys, FlashInfer NHD and HND, separate or
// combined K/V, quantized or not) with their int32 or int64 metadata, run through the adapters by
// UnifiedAttention and by paged MultiHeadCacheAttention, against the float64 reference over the
// same rows laid out by an independent formula; and vLLM's fp8 CPU cache against the same bytes
// in the PMX layout, bit for bit.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dynattn/adapters.h"
#include "dynattn/dynattn.h"
#include "reference/reference.h"
#include "tests/support/adapter_caches.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

const char* KindName(Kind k) {
  const char* names[] = {"vLLM NHD",       "vLLM CPU",          "FlashInfer NHD",
                         "FlashInfer HND", "FlashInfer NHD kv", "FlashInfer HND kv"};
  return names[static_cast<int>(k)];
}

/// Copies (`to_ref`) the engine's rows into a reference cache (MaxT, 1, 2, Hkv, row) with slot =
/// page * page_size + token, or compares them with it (returns false on the first difference).
bool MirrorRows(const EngineCache& c, dynattn_ref::Array* cache, dynattn_ref::Array* scale,
                bool to_ref) {
  for (int64_t page = 0; page < c.pages; ++page) {
    for (int64_t t = 0; t < c.page_size; ++t) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int64_t h = 0; h < c.heads; ++h) {
          const int64_t ref_row = ((page * c.page_size + t) * 2 + kv) * c.heads + h;
          const int64_t row = c.Row(kv, page, t, h);
          uint8_t* r = cache->bytes.data() + ref_row * c.RowBytes();
          if (c.DimMajor(kv)) {  // element by element
            const int64_t size = c.Bits() / 8;
            for (int64_t d = 0; d < c.dim; ++d) {
              const uint8_t* e = c.data[c.Buffer(kv)].data() + c.ElementByte(kv, page, t, h, d);
              if (to_ref) std::memcpy(r + d * size, e, size);
              if (!to_ref && std::memcmp(r + d * size, e, size) != 0) return false;
            }
            continue;
          }
          const uint8_t* e = c.data[c.Buffer(kv)].data() + row * c.RowBytes();
          if (to_ref) std::memcpy(r, e, c.RowBytes());
          if (!to_ref && std::memcmp(r, e, c.RowBytes()) != 0) return false;
          if (c.format.quant_bit == 0) continue;
          uint8_t* rs = scale->bytes.data() + ref_row * c.ScaleRowBytes();
          const uint8_t* es = c.scales[c.Buffer(kv)].data() + row * c.ScaleRowBytes();
          if (to_ref) std::memcpy(rs, es, c.ScaleRowBytes());
          if (!to_ref && std::memcmp(rs, es, c.ScaleRowBytes()) != 0) return false;
        }
      }
    }
  }
  return true;
}

/// vLLM metadata of a step, the table padded with `extra` columns.
struct VllmInputs {
  Index qsl, seq_lens, table, slots;
  dynattn::VllmMetadata View() const {
    return {qsl.View(), seq_lens.View(), table.View(), slots.View()};
  }
};

VllmInputs VllmOf(const Step& s, int extra, bool int32) {
  std::vector<int64_t> seq, table, slots;
  const int64_t cols = s.max_blocks + extra;
  for (int64_t b = 0; b < s.Batch(); ++b) {
    seq.push_back(s.KvLen(b));
    for (int64_t j = 0; j < cols; ++j) {
      table.push_back(j < s.max_blocks ? s.table[b * s.max_blocks + j] : 0);
    }
    for (int64_t p = s.context[b]; p < s.KvLen(b); ++p) {
      slots.push_back(s.table[b * s.max_blocks + p / s.block_size] * s.block_size +
                      p % s.block_size);
    }
  }
  return {Index(s.qsl, {s.Batch() + 1}, int32), Index(seq, {s.Batch()}, int32),
          Index(table, {s.Batch(), cols}, int32),
          Index(slots, {static_cast<int64_t>(slots.size())}, int32)};
}

/// FlashInfer metadata of a step (kv_indices with `extra` trailing unused entries).
struct FlashInferInputs {
  Index qo, kv, indices, last;
  dynattn::FlashInferMetadata View() const {
    return {qo.View(), kv.View(), indices.View(), last.View()};
  }
};

FlashInferInputs FlashInferOf(const Step& s, int extra, bool int32) {
  std::vector<int64_t> kv = {0}, indices, last;
  for (int64_t b = 0; b < s.Batch(); ++b) {
    for (int64_t j = 0; j < s.Pages(b); ++j) indices.push_back(s.table[b * s.max_blocks + j]);
    kv.push_back(static_cast<int64_t>(indices.size()));
    last.push_back(s.Pages(b) ? s.KvLen(b) - (s.Pages(b) - 1) * s.block_size : 0);
  }
  for (int i = 0; i < extra; ++i) indices.push_back(0);
  return {Index(s.qsl, {s.Batch() + 1}, int32), Index(kv, {s.Batch() + 1}, int32),
          Index(indices, {static_cast<int64_t>(indices.size())}, int32),
          Index(last, {s.Batch()}, int32)};
}

/// The float64 reference of the step over a PMX layout-0 copy of the engine cache.
dynattn_ref::AttnResult ReferenceOf(const StepTensors& t, const Step& s, const EngineCache& c) {
  dynattn_ref::Attrs attrs;
  attrs.num_heads = t.num_heads;
  attrs.head_dim = static_cast<int>(c.dim);
  attrs.num_kv_heads = static_cast<int>(c.heads);
  attrs.quant_bit = c.format.quant_bit;
  attrs.quant_group = c.format.quant_group;
  attrs.block_size = static_cast<int>(c.page_size);
  const int64_t max_t = c.pages * c.page_size;
  const int64_t row = c.format.quant_bit == 4 ? c.dim / 2 : c.dim;
  const dynattn_ref::Dt cache_dt =
      c.format.quant_bit
          ? dynattn_ref::Dt::kI8
          : (c.float_type == DType::kF32 ? dynattn_ref::Dt::kF32 : dynattn_ref::Dt::kF16);
  dynattn_ref::Tensors in;
  in["query"] = t.query;
  in["current_key"] = t.key;
  in["current_value"] = t.value;
  in["query_start_loc"] = dynattn_ref::MakeI64({s.Batch() + 1}, s.qsl);
  in["context_lens"] = dynattn_ref::MakeI64({s.Batch()}, s.context);
  in["block_table"] = dynattn_ref::MakeI64({s.Batch(), s.max_blocks}, s.table);
  in["cache"] = dynattn_ref::MakeArray(cache_dt, {max_t, 1, 2, c.heads, row});
  dynattn_ref::Array scale =
      dynattn_ref::MakeArray(dynattn_ref::Dt::kF16, {max_t, 1, 2, c.heads, c.Groups()});
  MirrorRows(c, &in["cache"], &scale, true);
  if (c.format.quant_bit) in["scale"] = scale;
  return dynattn_ref::UnifiedAttention(attrs, in);
}

/// MultiHeadCacheAttention of `t` over `bc` in paged mode (page = block, cachestarts = id *
/// stride) with the converted metadata `m`: the same step as UnifiedAttention, by the reference's
/// definition, on the base library.
Status RunPagedMhca(StepTensors& t, const dynattn::UnifiedMetadata& m, const BlockCache& bc,
                    dynattn_ref::Array* out) {
  *out = dynattn_ref::MakeArray(t.query.dt, t.query.shape);
  const int64_t batch = m.num_requests();
  std::vector<int64_t> kvstarts(batch + 1, 0), cachestarts(m.block_table.size());
  for (int64_t b = 0; b < batch; ++b) {
    kvstarts[b + 1] =
        kvstarts[b] + m.context_lens[b] + m.query_start_loc[b + 1] - m.query_start_loc[b];
  }
  for (size_t i = 0; i < cachestarts.size(); ++i) cachestarts[i] = m.block_table[i] * bc.Stride();
  const int64_t zero = 0, max_seq = std::max<int64_t>(m.query_start_loc.back(), 1);
  const int64_t max_kv = std::max<int64_t>(kvstarts[batch], 1);
  dynattn::MultiHeadCacheAttentionArgs args;
  args.query = ViewOf(t.query);
  args.current_key = ViewOf(t.key);
  args.current_value = ViewOf(t.value);
  args.seqstarts = TensorView::Dense(m.query_start_loc.data(), DType::kI64, {batch + 1});
  args.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {batch + 1});
  args.cachestarts = TensorView::Dense(cachestarts.data(), DType::kI64, {batch, m.max_blocks});
  args.start_pos = TensorView::Dense(m.context_lens.data(), DType::kI64, {batch});
  args.decoding_batches = Scalar(&zero);
  args.max_seqlen = Scalar(&max_seq);
  args.max_kvlen = Scalar(&max_kv);
  args.cache_desc = &bc.cache;
  args.attn_output = ViewOf(*out);
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention.num_heads = t.num_heads;
  attrs.attention.head_dim = bc.cache.head_dim;
  attrs.attention.num_kv_heads = bc.cache.num_kv_heads;
  const bool quantized =
      bc.cache.elem == dynattn::CacheElem::kInt8 || bc.cache.elem == dynattn::CacheElem::kInt4;
  attrs.cache.quant_bit = bc.cache.elem == dynattn::CacheElem::kInt8   ? 8
                          : bc.cache.elem == dynattn::CacheElem::kInt4 ? 4
                                                                       : 0;
  attrs.cache.quant_group = quantized ? bc.cache.quant_group : 8;
  attrs.cache.cache_mode = 1;
  attrs.cache.page_size = bc.block_size;
  return dynattn::MultiHeadCacheAttention(attrs, args);
}

/// Random vLLM and FlashInfer steps (every layout) through the adapters, run by UnifiedAttention
/// (`unified`) or by paged MultiHeadCacheAttention, against the float64 reference.
void CheckEngineSteps(uint64_t seed, bool unified) {
  std::mt19937_64 rng(seed);
  const Kind kinds[] = {Kind::kVllmNhd, Kind::kVllmCpu,       Kind::kFiNhd,
                        Kind::kFiHnd,   Kind::kFiNhdCombined, Kind::kFiHndCombined};
  for (int i = 0; i < 120; ++i) {
    const Kind kind = kinds[i % 6];
    // vLLM's CPU cache is unquantized (its keys are dimension-major).
    const int quant_bit = kind == Kind::kVllmCpu ? 0 : std::vector<int>{0, 8, 0, 4}[(i / 6) % 4];
    const DType io = Rand(rng, 0, 1) ? DType::kF32 : DType::kF16;
    const Step s = RandomStep(rng, Rand(rng, 1, 5), 0);
    EngineCache c = RandomEngineCache(rng, kind, s.num_blocks, s.block_size, quant_bit, io);
    StepTensors t = RandomStepTensors(rng, s, io, c.heads, c.dim);
    INFO("seed " << seed << " case " << i << ": " << std::string(KindName(kind)) << " quant "
                 << quant_bit << " Hkv " << c.heads << " D " << c.dim << " " << s.Describe());
    dynattn::UnifiedMetadata meta;
    Status status;
    const bool int32 = Rand(rng, 0, 1);
    if (kind == Kind::kVllmNhd || kind == Kind::kVllmCpu) {
      const VllmInputs in = VllmOf(s, Rand(rng, 0, 2), int32);
      status = dynattn::FromVllm(in.View(), static_cast<int>(s.block_size), s.num_blocks, &meta);
    } else {
      const FlashInferInputs in = FlashInferOf(s, Rand(rng, 0, 2), int32);
      status =
          dynattn::FromFlashInfer(in.View(), static_cast<int>(s.block_size), s.num_blocks, &meta);
    }
    REQUIRE_MESSAGE(status.ok(), status.message());
    CHECK(meta.query_start_loc == s.qsl);
    CHECK(meta.context_lens == s.context);
    for (int64_t b = 0; b < s.Batch(); ++b) {
      for (int64_t j = 0; j < s.Pages(b); ++j) {
        CHECK(meta.block_table[b * meta.max_blocks + j] == s.table[b * s.max_blocks + j]);
      }
    }
    const dynattn_ref::AttnResult ref = ReferenceOf(t, s, c);
    BlockCache bc;
    status = c.Make(&bc);
    REQUIRE_MESSAGE(status.ok(), status.message());
    dynattn_ref::Array out;
    status = unified ? RunUnified(t, meta, bc, &out) : RunPagedMhca(t, meta, bc, &out);
    REQUIRE_MESSAGE(status.ok(), status.message());
    const std::string err = dynattn_ref::CheckAttention(ref, out);
    CHECK_MESSAGE(err.empty(), err);
    dynattn_ref::Array ref_cache = ref.cache, ref_scale = ref.scale;
    CHECK_MESSAGE(MirrorRows(c, &ref_cache, &ref_scale, false),
                  "the engine cache differs from the reference's after the writes");
  }
}

TEST_SUITE("adapters") {
  TEST_CASE("vLLM and FlashInfer caches and metadata: paged MultiHeadCacheAttention = reference") {
    CheckEngineSteps(BaseSeed() + 7400, false);
  }

  TEST_CASE("vLLM and FlashInfer steps: UnifiedAttention = the float64 reference") {
    CheckEngineSteps(BaseSeed() + 7450, true);
  }

  TEST_CASE("vLLM's fp8 CPU cache: UnifiedAttention gives the bits of the same bytes as PMX") {
    // 3 requests (a decode, a 2-token decode, a 5-token chunk) over 6 blocks of 4 slots,
    // Hq 4, Hkv 2, D 16, fp8 e4m3 with per-tensor scales 0.5 (K) and 0.25 (V), sinks, a window.
    const int nb = 6, bs = 4, hkv = 2, hq = 4, d = 16;
    std::mt19937_64 rng(BaseSeed() + 7300);
    std::vector<uint8_t> vllm(size_t{2} * nb * hkv * bs * d);
    for (uint8_t& byte : vllm) {
      do byte = static_cast<uint8_t>(rng());
      while ((byte & 0x7F) == 0x7F);  // no NaN codes
    }
    // Calls element(vllm_byte, pmx_byte) for every (K/V, block, head, slot, dimension): vLLM's
    // CPU layout [2, nb, Hkv, bs, D], keys [D, bs] and values [bs, D] per (block, head) (vLLM's
    // cpu_attn backend, as its reshape_and_cache writes them), against PMX layout 3,
    // [1, 2, Hkv, MaxT = nb * bs, D].
    const auto for_each_element = [&](const std::function<void(size_t, size_t)>& element) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int b = 0; b < nb; ++b) {
          for (int h = 0; h < hkv; ++h) {
            const size_t region = ((size_t(kv) * nb + b) * hkv + h) * bs * d;
            for (int t = 0; t < bs; ++t) {
              for (int e = 0; e < d; ++e) {
                element(region + (kv == 0 ? size_t(e) * bs + t : size_t(t) * d + e),
                        ((size_t(kv) * hkv + h) * (nb * bs) + b * bs + t) * d + e);
              }
            }
          }
        }
      }
    };
    std::vector<uint8_t> pmx(vllm.size());
    for_each_element([&](size_t from, size_t to) { pmx[to] = vllm[from]; });
    TensorView vllm_view = TensorView::Dense(vllm.data(), DType::kF8E4M3, {2, nb, hkv, bs, d});
    BlockCache from_vllm, from_pmx;
    REQUIRE(dynattn::MakeVllmCpuBlockCache(vllm_view, {}, CacheFormat{}, &from_vllm).ok());
    CHECK(from_vllm.cache.elem == dynattn::CacheElem::kF8E4M3);
    dynattn::CacheAttrs attrs;
    attrs.cache_layout = 3;
    REQUIRE(dynattn::MakePmxBlockCache(
                TensorView::Dense(pmx.data(), DType::kF8E4M3, {1, 2, hkv, nb * bs, d}), {}, attrs,
                hkv, d, bs, &from_pmx)
                .ok());
    // A scale tensor is refused for a plain (fp8) format, naming it.
    const Status with_scale = dynattn::MakeVllmCpuBlockCache(vllm_view, vllm_view, {}, &from_vllm);
    CHECK(with_scale.message().rfind("kv_scale:", 0) == 0);
    REQUIRE(dynattn::MakeVllmCpuBlockCache(vllm_view, {}, CacheFormat{}, &from_vllm).ok());

    const int64_t qsl[4] = {0, 1, 3, 8}, ctx[3] = {6, 3, 2};
    const int64_t table[3 * 2] = {4, 1, 0, 3, 5, 2};
    const int tokens = 8;
    std::vector<float> query(size_t{tokens} * hq * d), key(size_t{tokens} * hkv * d),
        value(key.size());
    std::normal_distribution<float> normal;
    for (std::vector<float>* v : {&query, &key, &value}) {
      for (float& x : *v) x = normal(rng);
    }
    const float sinks[hq] = {0.5f, -1.0f, 1.5f, 0.0f};
    float k_scale = 0.5f, v_scale = 0.25f;
    const auto run = [&](const BlockCache* cache, std::vector<float>* out) {
      dynattn::UnifiedAttentionAttrs a;
      a.num_heads = hq;
      a.num_kv_heads = hkv;
      a.head_dim = d;
      a.window_left = 4;
      a.logits_soft_cap = 20.0f;
      dynattn::UnifiedAttentionArgs args;
      args.query = TensorView::Dense(query.data(), DType::kF32, {tokens, hq, d});
      args.current_key = TensorView::Dense(key.data(), DType::kF32, {tokens, hkv, d});
      args.current_value = TensorView::Dense(value.data(), DType::kF32, {tokens, hkv, d});
      args.query_start_loc = TensorView::Dense(qsl, DType::kI64, {4});
      args.context_lens = TensorView::Dense(ctx, DType::kI64, {3});
      args.block_table = TensorView::Dense(table, DType::kI64, {3, 2});
      args.cache = cache;
      args.k_scale = TensorView::Dense(&k_scale, DType::kF32, {});
      args.v_scale = TensorView::Dense(&v_scale, DType::kF32, {});
      args.sinks = TensorView::Dense(sinks, DType::kF32, {hq});
      out->assign(query.size(), std::numeric_limits<float>::quiet_NaN());
      args.attn_output = TensorView::Dense(out->data(), DType::kF32, {tokens, hq, d});
      return dynattn::UnifiedAttention(a, args);
    };
    std::vector<float> out_vllm, out_pmx;
    const Status s1 = run(&from_vllm, &out_vllm), s2 = run(&from_pmx, &out_pmx);
    REQUIRE_MESSAGE(s1.ok(), s1.message());
    REQUIRE_MESSAGE(s2.ok(), s2.message());
    CHECK(std::memcmp(out_vllm.data(), out_pmx.data(), out_vllm.size() * sizeof(float)) == 0);
    for (float x : out_vllm) REQUIRE(std::isfinite(x));
    // The fresh tokens were written as the same fp8 bytes in both layouts.
    int differing = 0;
    for_each_element([&](size_t from, size_t to) { differing += pmx[to] != vllm[from]; });
    CHECK(differing == 0);
    // A quantized format is refused: vLLM's CPU cache has none.
    CacheFormat int8;
    int8.quant_bit = 8;
    CHECK(dynattn::MakeVllmCpuBlockCache(vllm_view, {}, int8, &from_vllm)
              .message()
              .rfind("quant_bit:", 0) == 0);
  }
}

}  // namespace
}  // namespace dynattn_test

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Block caches over Python tensors (used in place) and the engines' metadata adapters
// (dynattn/unified.h, dynattn/adapters.h).

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings/python/src/bindings.h"

namespace dynattn_py {
namespace {

using namespace dynattn;  // NOLINT: the binding of a library uses all of it

using Cache = std::unique_ptr<PyBlockCache>;

PageLayout ParseLayout(const std::string& layout) {
  if (layout == "NHD") return PageLayout::kNHD;
  if (layout == "HND") return PageLayout::kHND;
  throw py::value_error("layout: must be \"NHD\" or \"HND\", got \"" + layout + "\"");
}

KsanaBlockOrder ParseOrder(const std::string& order) {
  if (order == "kv_layer") return KsanaBlockOrder::kKvLayer;
  if (order == "layer_kv") return KsanaBlockOrder::kLayerKv;
  throw py::value_error("order: must be \"kv_layer\" or \"layer_kv\", got \"" + order + "\"");
}

// The bytes [begin, end) a present view spans (its data to its last element).
std::pair<const char*, const char*> Extent(const TensorView& t) {
  const char* begin = static_cast<const char*>(t.data);
  return {begin, begin + t.NumBytes()};
}

bool Overlap(const TensorView& a, const TensorView& b) {
  if (!a.present() || !b.present() || a.NumBytes() == 0 || b.NumBytes() == 0) return false;
  const auto [a0, a1] = Extent(a);
  const auto [b0, b1] = Extent(b);
  return a0 < b1 && b0 < a1;
}

Cache NewCache(const char* kind) {
  auto cache = std::make_unique<PyBlockCache>();
  cache->kind = kind;
  return cache;
}

// An fp8 cache's planes carry their per-tensor scales (1 unless given).
void SetTensorScales(float k_scale, float v_scale, BlockCache* cache) {
  cache->cache.key.tensor_scale = k_scale;
  cache->cache.value.tensor_scale = v_scale;
}

Cache Paged(const py::object& key, const py::object& value, const py::object& key_scale,
            const py::object& value_scale, const std::string& layout, const py::object& bits,
            const py::object& group, const py::object& cache_dtype, const py::object& k_arg,
            const py::object& v_arg) {
  Cache c = NewCache("paged_block_cache");
  const int quant_bit = ToInt(bits, "quant_bit"), quant_group = ToInt(group, "quant_group");
  const float k_scale = ToFloat(k_arg, "k_scale"), v_scale = ToFloat(v_arg, "v_scale");
  const std::optional<DType> fp8 = ParseCacheDType(cache_dtype);
  const TensorView k = ToView(key, "key", true, &c->keep, fp8);
  const TensorView v = ToView(value, "value", true, &c->keep, fp8);
  const TensorView ks = ToView(key_scale, "key_scale", true, &c->keep);
  const TensorView vs = ToView(value_scale, "value_scale", true, &c->keep);
  c->Add("key", k);
  c->Add("value", v);
  c->Add("key_scale", ks);
  c->Add("value_scale", vs);
  Check(
      MakePagedBlockCache(k, v, ks, vs, ParseLayout(layout), {quant_bit, quant_group}, &c->cache));
  SetTensorScales(k_scale, v_scale, &c->cache);
  return c;
}

/// A block cache over one K/V tensor `kv` and its optional scales `kv_scale` (the combined and
/// vLLM CPU layouts): `make(kv, kv_scale, format, &cache)` builds the view.
template <class Make>
Cache KvTensorCache(const char* kind, const py::object& kv, const py::object& kv_scale,
                    const py::object& bits, const py::object& group, const py::object& cache_dtype,
                    const py::object& k_arg, const py::object& v_arg, Make make) {
  Cache c = NewCache(kind);
  const CacheFormat format{ToInt(bits, "quant_bit"), ToInt(group, "quant_group")};
  const float k_scale = ToFloat(k_arg, "k_scale"), v_scale = ToFloat(v_arg, "v_scale");
  const TensorView t = ToView(kv, "kv", true, &c->keep, ParseCacheDType(cache_dtype));
  const TensorView s = ToView(kv_scale, "kv_scale", true, &c->keep);
  c->Add("kv", t);
  c->Add("kv_scale", s);
  Check(make(t, s, format, &c->cache));
  SetTensorScales(k_scale, v_scale, &c->cache);
  return c;
}

Cache Combined(const py::object& kv, const py::object& kv_scale, const std::string& layout,
               const py::object& bits, const py::object& group, const py::object& cache_dtype,
               const py::object& k_arg, const py::object& v_arg) {
  const PageLayout page_layout = ParseLayout(layout);
  return KvTensorCache("combined_block_cache", kv, kv_scale, bits, group, cache_dtype, k_arg, v_arg,
                       [page_layout](const TensorView& t, const TensorView& s,
                                     const CacheFormat& format, BlockCache* out) {
                         return MakeCombinedBlockCache(t, s, page_layout, format, out);
                       });
}

/// A latent cache (MLA): one paged tensor whose rows are the keys, their first Dv elements the
/// values of value_from_key calls; its one plane is described as both (MakePagedBlockCache).
Cache Latent(const py::object& latent, const py::object& scale, const std::string& layout,
             const py::object& bits, const py::object& group, const py::object& cache_dtype,
             const py::object& k_arg) {
  const PageLayout page_layout = ParseLayout(layout);
  return KvTensorCache("latent_block_cache", latent, scale, bits, group, cache_dtype, k_arg, k_arg,
                       [page_layout](const TensorView& t, const TensorView& s,
                                     const CacheFormat& format, BlockCache* out) {
                         return MakePagedBlockCache(t, t, s, s, page_layout, format, out);
                       });
}

Cache VllmCpu(const py::object& kv, const py::object& kv_scale, const py::object& bits,
              const py::object& group, const py::object& cache_dtype, const py::object& k_arg,
              const py::object& v_arg) {
  return KvTensorCache("vllm_cpu_block_cache", kv, kv_scale, bits, group, cache_dtype, k_arg, v_arg,
                       &MakeVllmCpuBlockCache);
}

Cache Pmx(const py::object& cache, const py::object& scale, const py::object& heads,
          const py::object& dim, const py::object& block, const py::object& layers,
          const py::object& layer, const py::object& bits, const py::object& group,
          const py::object& layout, const py::object& cache_dtype, const py::object& k_arg,
          const py::object& v_arg) {
  Cache c = NewCache("pmx_block_cache");
  const int num_kv_heads = ToInt(heads, "num_kv_heads"), head_dim = ToInt(dim, "head_dim");
  const int block_size = ToInt(block, "block_size");
  const float k_scale = ToFloat(k_arg, "k_scale"), v_scale = ToFloat(v_arg, "v_scale");
  const TensorView t = ToView(cache, "cache", true, &c->keep, ParseCacheDType(cache_dtype));
  const TensorView s = ToView(scale, "scale", true, &c->keep);
  c->Add("cache", t);
  c->Add("scale", s);
  CacheAttrs attrs;
  attrs.num_layer = ToInt(layers, "num_layer");
  attrs.layer_idx = ToInt(layer, "layer_idx");
  attrs.quant_bit = ToInt(bits, "quant_bit");
  attrs.quant_group = ToInt(group, "quant_group");
  attrs.cache_layout = ToInt(layout, "cache_layout");
  Check(MakePmxBlockCache(t, s, attrs, num_kv_heads, head_dim, block_size, &c->cache));
  SetTensorScales(k_scale, v_scale, &c->cache);
  return c;
}

KsanaPoolAttrs ReadPool(const py::dict& d) {
  KsanaPoolAttrs a;
  a.order = ParseOrder(d["order"].cast<std::string>());
  a.num_layer = ToInt(d["num_layer"], "num_layer");
  a.num_blocks = ToInt64(d["num_blocks"], "num_blocks");
  a.slack_block = d["slack_block"].cast<bool>();
  a.block_size = ToInt(d["block_size"], "block_size");
  a.num_kv_heads = ToInt(d["num_kv_heads"], "num_kv_heads");
  a.head_dim = ToInt(d["head_dim"], "head_dim");
  a.format = {ToInt(d["quant_bit"], "quant_bit"), ToInt(d["quant_group"], "quant_group")};
  return a;
}

Cache Ksana(const py::object& pool, const py::object& scale_pool, const py::dict& attrs,
            const py::object& layer_arg) {
  const int layer = ToInt(layer_arg, "layer");
  Cache c = NewCache("ksana_block_cache");
  const TensorView p = ToView(pool, "pool", true, &c->keep);
  const TensorView s = ToView(scale_pool, "scale_pool", true, &c->keep);
  c->Add("pool", p);
  c->Add("scale_pool", s);
  Check(MakeKsanaBlockCache(p, s, ReadPool(attrs), layer, &c->cache));
  return c;
}

py::array_t<int64_t> ToArray(const std::vector<int64_t>& values, std::vector<py::ssize_t> shape) {
  py::array_t<int64_t> array(shape);
  std::copy(values.begin(), values.end(), array.mutable_data());
  return array;
}

py::tuple MetadataTuple(const UnifiedMetadata& md) {
  return py::make_tuple(
      ToArray(md.query_start_loc, {static_cast<py::ssize_t>(md.query_start_loc.size())}),
      ToArray(md.context_lens, {static_cast<py::ssize_t>(md.context_lens.size())}),
      ToArray(md.block_table, {static_cast<py::ssize_t>(md.num_requests()),
                               static_cast<py::ssize_t>(md.max_blocks)}));
}

/// An index tensor of an engine's metadata struct M: its argument name and member.
template <class M>
using IndexField = std::pair<const char*, TensorView M::*>;
#define DYNATTN_INDEX_FIELD(M, member) IndexField<M>(#member, &M::member)

/// A Python converter of an engine's metadata into the unified op's: it takes M's four index
/// tensors (`fields`' order), the page size and the page count (named `sizes`).
template <class M>
auto MetadataConverter(std::array<IndexField<M>, 4> fields, std::array<const char*, 2> sizes,
                       Status (*convert)(const M&, int, int64_t, UnifiedMetadata*)) {
  return [=](const py::object& a, const py::object& b, const py::object& c, const py::object& d,
             const py::object& page_size, const py::object& num_pages) {
    const int size = ToInt(page_size, sizes[0]);
    const int64_t count = ToInt64(num_pages, sizes[1]);
    Keep keep;
    M in;
    const py::object* values[] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; ++i) {
      in.*fields[i].second = ToView(*values[i], fields[i].first, false, &keep);
    }
    UnifiedMetadata out;
    Check(convert(in, size, count, &out));
    return MetadataTuple(out);
  };
}

py::array_t<int64_t> KsanaToAtb(const py::object& table, const py::dict& attrs,
                                const py::object& layer_arg) {
  const int layer = ToInt(layer_arg, "layer");
  Keep keep;
  const TensorView t = ToView(table, "ksana_table", false, &keep);
  std::vector<int64_t> out;
  Check(KsanaToAtbBlockTable(t, ReadPool(attrs), layer, &out));
  std::vector<py::ssize_t> shape(t.shape, t.shape + (t.rank > 0 ? t.rank : 0));
  return ToArray(out, shape);
}

py::array_t<int64_t> SlotMapping(const py::object& table, const py::object& requests,
                                 const py::object& positions, const py::dict& attrs,
                                 const py::object& layer_arg) {
  const int layer = ToInt(layer_arg, "layer");
  Keep keep;
  const TensorView t = ToView(table, "ksana_table", false, &keep);
  const TensorView r = ToView(requests, "requests", false, &keep);
  const TensorView p = ToView(positions, "positions", false, &keep);
  std::vector<int64_t> out;
  Check(AtbSlotMapping(t, r, p, ReadPool(attrs), layer, &out));
  return ToArray(out, {static_cast<py::ssize_t>(out.size())});
}

std::string CacheRepr(const PyBlockCache& c) {
  const BlockCache& b = c.cache;
  return "BlockCache(" + c.kind + ", elem=" + std::string(CacheElemName(b.cache.elem)) +
         ", num_blocks=" + std::to_string(b.num_blocks) +
         ", block_size=" + std::to_string(b.block_size) +
         ", num_kv_heads=" + std::to_string(b.cache.num_kv_heads) +
         ", head_dim=" + std::to_string(b.cache.head_dim) + ")";
}

void BindBlockCache(py::module_& m) {
  py::class_<PyBlockCache>(m, "BlockCache",
                           "A block cache over caller-owned tensors, used in place (no copy). "
                           "Holds references to its tensors while it lives.")
      .def_property_readonly("kind", [](const PyBlockCache& c) { return c.kind; })
      .def_property_readonly("block_size", [](const PyBlockCache& c) { return c.cache.block_size; })
      .def_property_readonly("block_stride", [](const PyBlockCache& c) { return c.cache.Stride(); })
      .def_property_readonly("num_blocks", [](const PyBlockCache& c) { return c.cache.num_blocks; })
      .def_property_readonly("num_slots",
                             [](const PyBlockCache& c) { return c.cache.cache.num_slots; })
      .def_property_readonly("num_kv_heads",
                             [](const PyBlockCache& c) { return c.cache.cache.num_kv_heads; })
      .def_property_readonly("head_dim",
                             [](const PyBlockCache& c) { return c.cache.cache.head_dim; })
      .def_property_readonly("head_dim_v",
                             [](const PyBlockCache& c) {
                               const CacheDesc& d = c.cache.cache;
                               return d.head_dim_v > 0 ? d.head_dim_v : d.head_dim;
                             })
      .def_property_readonly(
          "elem",
          [](const PyBlockCache& c) { return std::string(CacheElemName(c.cache.cache.elem)); })
      .def_property_readonly("quant_group",
                             [](const PyBlockCache& c) { return c.cache.cache.quant_group; })
      .def_property_readonly("k_scale",
                             [](const PyBlockCache& c) { return c.cache.cache.key.tensor_scale; })
      .def_property_readonly("v_scale",
                             [](const PyBlockCache& c) { return c.cache.cache.value.tensor_scale; })
      .def_property_readonly(
          "device",
          [](const PyBlockCache& c) { return std::string(DeviceName(c.cache.cache.device)); })
      .def("__repr__", &CacheRepr);
}

}  // namespace

void PyBlockCache::Add(const std::string& name, const TensorView& view) {
  if (!view.present()) return;
  for (const auto& [other, t] : tensors) {
    if (Overlap(view, t)) {
      throw py::value_error(name + ": overlaps " + other +
                            " (the cache's tensors must not share "
                            "memory)");
    }
  }
  tensors.emplace_back(name, view);
}

void PyBlockCache::CheckApart(const TensorMap& views) const {
  for (const auto& [name, view] : views) {
    for (const auto& [part, t] : tensors) {
      if (Overlap(view, t)) {
        throw py::value_error(name + ": overlaps the block cache's " + part + " tensor (" + kind +
                              "); a call's tensors must not share memory with its cache");
      }
    }
  }
}

void BindCaches(py::module_& m) {
  BindBlockCache(m);
  m.def("_paged_block_cache", &Paged, py::arg("key"), py::arg("value"), py::arg("key_scale"),
        py::arg("value_scale"), py::arg("layout"), py::arg("quant_bit"), py::arg("quant_group"),
        py::arg("cache_dtype"), py::arg("k_scale"), py::arg("v_scale"));
  m.def("_combined_block_cache", &Combined, py::arg("kv"), py::arg("kv_scale"), py::arg("layout"),
        py::arg("quant_bit"), py::arg("quant_group"), py::arg("cache_dtype"), py::arg("k_scale"),
        py::arg("v_scale"));
  m.def("_latent_block_cache", &Latent, py::arg("latent"), py::arg("scale"), py::arg("layout"),
        py::arg("quant_bit"), py::arg("quant_group"), py::arg("cache_dtype"), py::arg("k_scale"));
  m.def("_vllm_cpu_block_cache", &VllmCpu, py::arg("kv"), py::arg("kv_scale"), py::arg("quant_bit"),
        py::arg("quant_group"), py::arg("cache_dtype"), py::arg("k_scale"), py::arg("v_scale"));
  m.def("_pmx_block_cache", &Pmx, py::arg("cache"), py::arg("scale"), py::arg("num_kv_heads"),
        py::arg("head_dim"), py::arg("block_size"), py::arg("num_layer"), py::arg("layer_idx"),
        py::arg("quant_bit"), py::arg("quant_group"), py::arg("cache_layout"),
        py::arg("cache_dtype"), py::arg("k_scale"), py::arg("v_scale"));
  m.def("_ksana_block_cache", &Ksana, py::arg("pool"), py::arg("scale_pool"), py::arg("attrs"),
        py::arg("layer"));
  using Vllm = VllmMetadata;
  m.def("_from_vllm",
        MetadataConverter<Vllm>(
            {DYNATTN_INDEX_FIELD(Vllm, query_start_loc), DYNATTN_INDEX_FIELD(Vllm, seq_lens),
             DYNATTN_INDEX_FIELD(Vllm, block_table), DYNATTN_INDEX_FIELD(Vllm, slot_mapping)},
            {"block_size", "num_blocks"}, &FromVllm));
  using FlashInfer = FlashInferMetadata;
  m.def("_from_flashinfer",
        MetadataConverter<FlashInfer>(
            {DYNATTN_INDEX_FIELD(FlashInfer, qo_indptr), DYNATTN_INDEX_FIELD(FlashInfer, kv_indptr),
             DYNATTN_INDEX_FIELD(FlashInfer, kv_indices),
             DYNATTN_INDEX_FIELD(FlashInfer, kv_last_page_len)},
            {"page_size", "num_pages"}, &FromFlashInfer));
  m.def("_ksana_to_atb_block_table", &KsanaToAtb);
  m.def("_atb_slot_mapping", &SlotMapping);
}

}  // namespace dynattn_py

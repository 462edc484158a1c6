// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Independent float64 reference of the three OpenPPL PMX dynamic-batching ops (KeyValueCache,
// MultiHeadAttention, MultiHeadCacheAttention), written from the PMX ops spec (README.md, "Numerics
// contract") alone. It is the oracle libdynattn is tested against, so it deliberately shares no
// code with include/dynattn or src/: tensors are plain byte vectors, every formula is the spec's
// own. Section numbers (§) below refer to that spec.

#ifndef DYNATTN_TESTS_REFERENCE_REFERENCE_H_
#define DYNATTN_TESTS_REFERENCE_REFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dynattn_ref {

// Element types. kI8 also holds packed int4 caches (two nibbles per byte).
enum class Dt { kF32, kF16, kI8, kI64 };

int64_t DtSize(Dt dt);
const char* DtName(Dt dt);  // "f32", "f16", "i8", "i64"

// A dense row-major little-endian tensor, like a .npy file.
struct Array {
  Dt dt = Dt::kF32;
  std::vector<int64_t> shape;  // rank 0 = scalar (one element)
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
};

// A zero-filled array.
Array MakeArray(Dt dt, const std::vector<int64_t>& shape);
// An int64 array holding `values` (which must have the shape's element count).
Array MakeI64(const std::vector<int64_t>& shape, const std::vector<int64_t>& values);
// A rank-0 int64 scalar.
Array ScalarI64(int64_t value);
// Element `i` (flat index) converted to double; fp16 is decoded exactly.
double LoadAsDouble(const Array& array, int64_t i);
// Stores `value` at flat index `i`, rounded to the array's dtype (round-to-nearest-even for floats,
// truncation for integers: callers pass integral values).
void StoreRounded(Array* array, int64_t i, double value);
// "(2, 3, 4)".
std::string ShapeString(const std::vector<int64_t>& shape);

// Inputs by their spec names: query, current_key, current_value, key, value, seqstarts, kvstarts,
// cachestarts, start_pos, decoding_batches, max_seqlen, max_kvlen, cache, scale, attn_mask.
// Optional inputs are simply absent; a present one with zero elements also counts as absent.
using Tensors = std::map<std::string, Array>;

// Op attributes with the PPLNN parser defaults (§6).
struct Attrs {
  int num_heads = 0, head_dim = 0, is_causal = 1, is_alibi = 0, num_kv_heads = 0, num_layer = 1,
      layer_idx = 0, quant_bit = 0, quant_group = 8, num_repeat = 1, cache_mode = 0,
      cache_layout = 0, page_size = 128;
  int block_size = 0;  // unified attention only
};

// Result of KeyValueCache: the exact expected bytes of every output.
struct KvcResult {
  Array cache, scale;  // after the writes; without a scale input, scale is an empty f16 (0) array
  Array key, value;    // (kvstarts[B], Hkv * num_repeat, D), dtype of current_key
};

// Result of an attention op (float64; compare a library output with CheckAttention).
struct AttnResult {
  std::vector<double> out;            // (Tq, Hq, D)
  std::vector<double> vmax;           // per query row: largest |V element| of its request context
  std::vector<uint8_t> must_be_zero;  // per (row, head): fully masked or kvlen 0 -> exactly 0
  std::vector<double> lse;            // per (row, head): natural-log log-sum-exp of the scores
  Array cache, scale;                 // MHCA only: expected cache/scale after the call
};

// The ops. All three throw std::invalid_argument for inputs the spec rejects (§7.3, §12) and for
// non-finite values read from the inputs or the cache (a valid call never reads garbage).
//
// KeyValueCache (§4): writes the new tokens (quantized per §2) at their slots (§3.1, §3.2), all
// writes before any read, then gathers the dequantized context [0, kvlen_b) of every request.
// D and Hkv come from current_key; num_heads/head_dim/num_kv_heads are not KVC attributes.
KvcResult KeyValueCache(const Attrs& attrs, const Tensors& inputs);
// MultiHeadAttention (§5) with ALiBi applied per the §5.5 [REC] (the PMX reference drops it).
// only_heads: when non-empty, only those query heads are computed (others: out NaN, not zero).
AttnResult MultiHeadAttention(const Attrs& attrs, const Tensors& inputs,
                              const std::vector<int>& only_heads = {});
// MultiHeadCacheAttention (§6) = KeyValueCache (num_repeat 1), then MultiHeadAttention over the
// gathered dequantized K/V.
AttnResult MultiHeadCacheAttention(const Attrs& attrs, const Tensors& inputs,
                                   const std::vector<int>& only_heads = {});

// Unified attention (unified-and-ksana §1, §6), by its definition: token i of request b sits at
// position context_lens[b] + i and attends causally to positions 0..p of its request, i.e.
// MultiHeadCacheAttention in paged mode with one page per block (cachestarts[b][j] =
// block_table[b][j] * block_size), start_pos = context_lens, kvlen = context + query tokens.
// Inputs: query, current_key, current_value, query_start_loc, context_lens, block_table (int64),
// cache, scale; attrs.block_size is the block size, cache_mode/page_size are ignored.
AttnResult UnifiedAttention(const Attrs& attrs, const Tensors& inputs);

// Compares an f32 (T, Hq) log-sum-exp with ref.lse: |err| <= 1e-4 * max(1, |ref|), -inf exactly.
std::string CheckLse(const AttnResult& ref, const Array& got);

// Compares an fp32/fp16 output tensor of shape (Tq, Hq, D) with `ref` using the §12 tolerances:
//   fp32: |out - ref| <= 1e-5 * max(1, vmax);  fp16: |out - ref| <= 1e-2 * |ref| + 5e-4 * max(4,
//   vmax)
// must_be_zero rows exactly 0, never NaN/Inf. Entries whose ref is NaN (heads not computed) are
// skipped. Returns "" when everything is within bounds, else a one-line description of the worst
// violation. `worst_ratio` (optional) receives max |err| / bound (infinity for NaN/Inf or a
// non-zero must-be-zero entry).
std::string CheckAttention(const AttnResult& ref, const Array& got, double* worst_ratio = nullptr);

// IEEE binary16 helpers: correctly rounded (ties to even) conversion and exact decoding.
uint16_t F16Bits(double x);
double F16Value(uint16_t bits);

// Building blocks, exposed for the bit-exact tests of the spec's worked examples.
namespace detail {

// `x` rounded to the float type `dt` (kF32 or kF16), returned as double.
double RoundTo(Dt dt, double x);

// One quantized group (§2.1 int8, §2.2 int4).
struct GroupQuant {
  std::vector<int> q;  // in [-127, 127] (int8) or [-7, 7] (int4)
  double scale = 0;    // s in T1, the divisor used for q
  double stored = 0;   // T3(s), what the scale tensor holds
};
// Quantizes the T1 values `x` (already representable in t1) to `quant_bit` 8 or 4 bits; the
// scale is stored as t3.
GroupQuant QuantizeGroup(const std::vector<double>& x, Dt t1, Dt t3, int quant_bit);
// x̂ = T1(T3(q) * s_T3): the product is rounded to the scale dtype, then to T1.
double Dequantize(int q, double stored_scale, Dt t1, Dt t3);
// int4 storage: two's-complement nibbles, element 2k low, 2k+1 high.
uint8_t PackNibbles(int low, int high);
int DecodeNibble(uint8_t byte, int which);  // which 0 = low nibble, 1 = high nibble

// §3.2 flat element offset of (slot, layer, kv, head, index) in a cache of `cache_layout` whose
// innermost dimension has `last_dim` entries (D, D/2 for int4 bytes, D/G for the scale).
int64_t CacheOffset(int cache_layout, int64_t slot, int64_t layer, int64_t kv, int64_t head,
                    int64_t index, int64_t num_layer, int64_t max_t, int64_t num_kv_heads,
                    int64_t last_dim);
// §3.2 cache shape of a layout (MaxT at dim `cache_layout`); the scale passes last_dim = D / G.
std::vector<int64_t> CacheShape(int cache_layout, int64_t num_layer, int64_t max_t,
                                int64_t num_kv_heads, int64_t last_dim);
// §3.1 slot of logical position p of request b (no range checks).
int64_t SlotOf(const Array& cachestarts, int cache_mode, int64_t page_size, int64_t b, int64_t p);
// §5.5 ALiBi slope of every head.
std::vector<double> AlibiSlopes(int num_heads);

}  // namespace detail
}  // namespace dynattn_ref

#endif  // DYNATTN_TESTS_REFERENCE_REFERENCE_H_

// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Independent float64 reference of the three OpenPPL PMX dynamic-batching ops (KeyValueCache,
// MultiHeadAttention, MultiHeadCacheAttention), written from the PMX ops spec (docs/numerics.md)
// alone. It is the oracle libdynattn is tested against, so it deliberately shares no code with
// include/dynattn or src/: tensors are plain byte vectors, every formula is the spec's own.
// Section numbers (§) below refer to that spec.

#ifndef DYNATTN_REFERENCE_REFERENCE_H_
#define DYNATTN_REFERENCE_REFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dynattn_ref {

// Element types. kI8 also holds packed int4 caches (two nibbles per byte). kBF16 is stored as its
// 16-bit pattern (a uint16 .npy), the fp8 formats as their bytes (a uint8 .npy whose format the
// `cache_dtype` attribute names): OCP float8_e4m3fn (bias 7, max 448, no infinities, S.1111.111
// NaN) and float8_e5m2 (bias 15, max 57344, IEEE-like infinities and NaNs).
enum class Dt { kF32, kF16, kI8, kI64, kBF16, kF8E4M3, kF8E5M2 };

int64_t DtSize(Dt dt);
const char* DtName(Dt dt);  // "f32", "f16", "i8", "i64", "bf16", "f8e4m3", "f8e5m2"
// True for the activation float types f32, f16, bf16.
bool IsActivationDt(Dt dt);
// True for the two fp8 formats.
bool IsFp8Dt(Dt dt);

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
// Element `i` (flat index) converted to double; fp16, bf16 and fp8 are decoded exactly.
double LoadAsDouble(const Array& array, int64_t i);
// Stores `value` at flat index `i`, rounded to the array's dtype (round-to-nearest-even for floats,
// fp8 saturating finite values to the format's max (Fp8Bits), truncation for integers: callers
// pass integral values).
void StoreRounded(Array* array, int64_t i, double value);
// "(2, 3, 4)".
std::string ShapeString(const std::vector<int64_t>& shape);

// Inputs by their spec names: query, current_key, current_value, key, value, seqstarts, kvstarts,
// cachestarts, start_pos, decoding_batches, max_seqlen, max_kvlen, cache, scale, attn_mask, and
// the serving features' inputs sinks (f32 (Hq)), k_scale and v_scale (0-d f32, fp8 caches only),
// and a distributed rank's alibi_slopes (f32 (Hq): ALiBi on with these slopes) and, for
// MultiHeadCacheAttention, key_offsets (B): a context shard. Request b's context then holds
// positions [key_offsets_b, key_offsets_b + kvlen_b) of the whole request, start_pos_b is its
// first new token's position there (key_offsets_b + kvlen_b <= start_pos_b + seqlen_b), only
// the new tokens the shard holds are written, and causality, windows and ALiBi compare
// whole-request positions.
// Optional inputs are simply absent; a present one with zero elements also counts as absent.
using Tensors = std::map<std::string, Array>;

// Op attributes with the PPLNN parser defaults (§6).
struct Attrs {
  int num_heads = 0, head_dim = 0, is_causal = 1, is_alibi = 0, num_kv_heads = 0, num_layer = 1,
      layer_idx = 0, quant_bit = 0, quant_group = 8, num_repeat = 1, cache_mode = 0,
      cache_layout = 0, page_size = 128;
  int block_size = 0;  // unified attention only
  // Value and output rows' size Dv (0: head_dim). Any Dv with MultiHeadAttention's key and value
  // tensors; a PMX cache holds keys and values of one size, so the cache ops need Dv = head_dim.
  int head_dim_v = 0;
  // The values are the keys' first Dv elements (multi-head latent attention's absorbed form):
  // MultiHeadAttention takes no `value` input. Dv <= head_dim.
  int value_from_key = 0;
  // Serving features. window_left: -1 off, W >= 0 lets the query at position i see keys
  // max(0, i - W) <= j <= i (also for a non-causal request). logits_soft_cap: 0 off, else
  // s = cap * tanh(s0 / cap). softmax_scale: 0 means 1 / sqrt(head_dim). Both are float32
  // attributes in the library, so cases hold float-representable values.
  int window_left = -1;
  double logits_soft_cap = 0;
  double softmax_scale = 0;
  // "" (the cache tensor's dtype decides), "fp8_e4m3" or "fp8_e5m2": must match an fp8 cache.
  std::string cache_dtype;
  // The attention ops' numerics tier: "" (exact, the default) or "fast". A fast call's result
  // carries the fast tier's own answer where it differs (AttnResult::fast_out).
  std::string precision;
  // Not an op attribute: accept NaN and infinities in the query, the context (keys and values,
  // cached or given) and the mask, and let them flow through float64 IEEE arithmetic: a NaN score
  // or a max of +inf makes the row NaN (inf - inf), a visible key multiplies its value whatever
  // its weight (0 * NaN is NaN), and a key whose final score is -inf (hidden by causality, the
  // window, ALiBi, an -inf mask entry, or an -inf logit) has no weight and its value is not read.
  // Off: such values are refused, as the spec's inputs are finite.
  bool non_finite = false;
  // Not an op attribute: MultiHeadAttention with precision=fast gives the bf16 dot products'
  // answer and bound (fast_within_bound), the oracle of a fast call over an fp16 or bf16 cache
  // whose context a test gathers as keys and values (the library's MHA itself runs exact).
  bool bf16_dots_oracle = false;
};

// Result of KeyValueCache: the exact expected bytes of every output.
struct KvcResult {
  Array cache, scale;  // after the writes; without a scale input, scale is an empty f16 (0) array
  Array key, value;    // (kvstarts[B], Hkv * num_repeat, D), dtype of current_key
};

// Result of an attention op (float64; compare a library output with CheckAttention).
struct AttnResult {
  std::vector<double> out;            // (Tq, Hq, Dv)
  std::vector<double> vmax;           // per query row: largest |V element| of its request context
  std::vector<uint8_t> must_be_zero;  // per (row, head): no visible key -> exactly 0
  std::vector<uint8_t> computed;      // per (row, head): 1 where out and lse hold the answer
                                      // (empty: every one)
  std::vector<double> lse;  // per (row, head): natural-log log-sum-exp of the scores and the
                            // sink (no visible key: the sink, or -inf without sinks)
  Array cache, scale;       // MHCA only: expected cache/scale after the call
  // precision=fast over an int8/int4 cache whose groups are powers of two and multiples of 32
  // (empty otherwise): the answer with the fast tier's integer key scores, fl32(s_q * sum_i q'_i
  // c_i s_k), s_q = fl32(max|q| / 127), q'_i = rne(fl32(q_i / s_q)). Each (row, head) of a fast
  // call's output is held to out or to fast_out (lse to lse or fast_lse): the fast kernel runs
  // decode-shaped work items, the exact one the others. fast_bound per (row, head): the
  // documented bound on |fast_out - out|, (e^{2 delta} - 1 + 2^-7) * vmax.
  // precision=fast over an fp16 or bf16 cache (fast_within_bound): fast_out has the bf16 dot
  // products' scores, sum_i bf16(q_i) bf16(k_i), with exact weights and values; the kernel also
  // rounds those to bf16, so a fast row is held to out within fast_bound (plus the exact
  // tolerance), its lse to lse or fast_lse.
  std::vector<double> fast_out, fast_lse, fast_bound;
  bool fast_within_bound = false;
};

// The ops. All three throw std::invalid_argument for inputs the spec rejects (§7.3, §12 and the
// serving features' rules: window_left < -1, logits_soft_cap or softmax_scale < 0 or non-finite,
// a sinks tensor that is not f32 (Hq) or holds a non-finite value, an fp8 scale that is not a
// finite f32 > 0, k_scale/v_scale with a non-fp8 cache, an fp8 cache with a scale tensor, a
// bf16/fp8 cache with quant_bit != 0, cache_dtype naming another format) and for non-finite values
// read from the inputs or the cache (a valid call never reads garbage; with a window, context left
// of it is not read, see UnreadContextPrefix).
//
// Serving features' numerics. bf16 activations are exact fp32 values and every rule runs as for
// fp32 activations (quantization included); only the outputs are rounded to bf16 (RNE). A plain
// cache (f32/f16/bf16) stores RNE(x); an fp8 cache stores Fp8Encode(x, scale) with the per-tensor
// k_scale (K) / v_scale (V), default 1, and reads back fp32(fp8(byte) * scale); a cache value is
// rounded to fp16 only when the activations are fp16. Attention scores:
// s0 = softmax_scale * q.k, s = cap * tanh(s0 / cap) when capped, then + ALiBi, + mask; keys
// outside the window are hidden; sinks add exp(sink_h) to the denominator.
//
// KeyValueCache (§4): writes the new tokens (quantized per §2) at their slots (§3.1, §3.2), all
// writes before any read, then gathers the dequantized context [0, kvlen_b) of every request.
// D and Hkv come from current_key; num_heads/head_dim/num_kv_heads are not KVC attributes.
KvcResult KeyValueCache(const Attrs& attrs, const Tensors& inputs);
// MultiHeadAttention (§5) with ALiBi applied per the §5.5 [REC] (the PMX reference drops it).
// only_heads: when non-empty, only those query heads are computed (others: out NaN, not zero).
// Attrs::bf16_dots_oracle with precision=fast: the bf16 dot products' answer and bound.
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
// cache, scale; attrs.block_size is the block size, cache_mode/page_size are ignored. A context
// shard adds key_offsets and key_counts (B): its blocks hold key_counts[b] positions from
// key_offsets[b] (MultiHeadCacheAttention's key_offsets with kvlen = key_counts), and
// context_lens[b] is still the position of the first query token in the whole request.
AttnResult UnifiedAttention(const Attrs& attrs, const Tensors& inputs);

// Compares an f32 (T, Hq) log-sum-exp with ref.lse: |err| <= 1e-4 * max(1, |ref|), -inf exactly.
// With sinks the reference LSE includes the sink term.
std::string CheckLse(const AttnResult& ref, const Array& got);

// Compares an fp32/fp16/bf16 output tensor of shape (Tq, Hq, D) with `ref` using the §12
// tolerances:
//   fp32: |out - ref| <= 1e-5 * max(1, vmax);  fp16: |out - ref| <= 1e-2 * |ref| + 5e-4 * max(4,
//   vmax);  bf16: |out - ref| <= 2^-8 * |ref| + 1e-4 * max(1, vmax).
// Why the bf16 bound: bf16 inputs are exact fp32 values and all arithmetic is fp32, so the value
// before the output rounding meets the fp32 bound (1e-5 * max(1, vmax)); rounding it to bf16's
// 8-bit significand (RNE) moves it by at most half an ulp, 2^-8 of its magnitude. 2^-8 * |ref|
// plus the fp32 bound with a 10x margin (for the rounding of |out| instead of |ref| and the
// soft-cap's fp32 tanh) bounds the error; the absolute term stays ~40x below bf16's resolution at
// vmax, so a key dropped or counted twice, or an intermediate rounded to bf16, is still caught.
// These bounds hold with soft-capping, windows and sinks too.
// must_be_zero rows exactly 0, never NaN/Inf. Heads not computed are skipped; where the
// reference is NaN or infinite (Attrs::non_finite), the output must be NaN or that infinity.
// Returns "" when everything is within bounds, else a one-line description of the worst violation.
// `worst_ratio` (optional) receives max |err| / bound (infinity for NaN/Inf or a non-zero
// must-be-zero entry).
std::string CheckAttention(const AttnResult& ref, const Array& got, double* worst_ratio = nullptr);

// IEEE binary16 helpers: correctly rounded (ties to even) conversion and exact decoding.
uint16_t F16Bits(double x);
double F16Value(uint16_t bits);

// bfloat16 (8-bit significand, fp32's exponent range): round to nearest even from the double value
// (overflow to infinity, a NaN stays a quiet NaN: for a float NaN, its top 16 bits with the quiet
// bit set) and exact decoding.
uint16_t Bf16Bits(double x);
double Bf16Value(uint16_t bits);

// fp8 (`format` kF8E4M3 or kF8E5M2): round to nearest even, finite values past the max saturate to
// the max (and so does +-infinity for e4m3fn, which has none; e5m2 keeps infinities); a NaN gives
// the quiet NaN with its sign (e4m3fn S.1111.111, e5m2 S.11111.10). Fp8Value decodes exactly.
uint8_t Fp8Bits(double x, Dt format);
double Fp8Value(uint8_t byte, Dt format);
// An fp8 cache byte: Fp8Bits of the fp32 quotient x / scale (correctly rounded).
uint8_t Fp8Encode(double x, double scale, Dt format);
// A stored byte as read back: fp32(Fp8Value(byte) * scale).
double Fp8Decode(uint8_t byte, double scale, Dt format);

// Building blocks, exposed for the bit-exact tests of the spec's worked examples.
namespace detail {

// `x` rounded to the float type `dt` (kF32, kF16 or kBF16), returned as double.
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
// Keys left of a sliding window are neither read nor counted. Implementations skip them in units
// of their own (tiles, cache blocks, context splits); every such unit lies inside an aligned run of
// kWindowSkipAlign keys (the library's context split), so the keys of request b before
// UnreadContextPrefix (the first query row's window start rounded down to a multiple of
// kWindowSkipAlign) must never be read. The reference does not read them either, and the cases
// put NaN there.
inline constexpr int64_t kWindowSkipAlign = 1024;
int64_t UnreadContextPrefix(int window_left, int64_t kvlen, int64_t seqlen);
// §5.5 ALiBi slope of every head.
std::vector<double> AlibiSlopes(int num_heads);

}  // namespace detail
}  // namespace dynattn_ref

#endif  // DYNATTN_REFERENCE_REFERENCE_H_

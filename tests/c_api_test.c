/* Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
 *
 * The C API, from C (C11): random fp16 steps over int8 caches (MultiHeadCacheAttention,
 * KeyValueCache, MultiHeadAttention, UnifiedAttention; one-shot and planned, on two layers) and
 * MergeStates give the same bits as the same calls through the C++ API (c_api_test_cpp.cc); and
 * the error paths: codes, messages naming the input, poisoned outputs left untouched, null
 * handles, the per-thread last error. The base seed is printed; DYNATTN_TEST_SEED=N replays it.
 */

#include "dynattn/c_api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>

#include "c_api_test_cpp.h"
#include "dynattn/version.h"

/* ------------------------------------------------------------------------------------------ */
/* Checks.                                                                                    */

static int g_checks, g_failures;
static unsigned long long g_seed;

static void check_(int ok, const char* what, const char* file, int line) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    fprintf(stderr, "%s:%d: CHECK failed: %s (base seed %llu)\n", file, line, what, g_seed);
  }
}

/* `got` must be `want`; on failure the message must contain `needle`, on success be "". */
static void check_status_(dynattn_status_t got, dynattn_status_t want, const char* needle,
                          const char* what, const char* file, int line) {
  const char* message = dynattn_last_error_message();
  int ok = got == want;
  if (want == DYNATTN_STATUS_OK) ok = ok && message[0] == '\0';
  if (needle != NULL) ok = ok && strstr(message, needle) != NULL;
  ++g_checks;
  if (!ok) {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s: got %s (\"%s\"), want %s with \"%s\" (base seed %llu)\n", file,
            line, what, dynattn_status_name(got), message, dynattn_status_name(want),
            needle ? needle : "", g_seed);
  }
}

#define CHECK(cond) check_((cond), #cond, __FILE__, __LINE__)
#define CHECK_OK(call) check_status_((call), DYNATTN_STATUS_OK, NULL, #call, __FILE__, __LINE__)
#define CHECK_ERROR(call, code, needle) \
  check_status_((call), (code), (needle), #call, __FILE__, __LINE__)

/* ------------------------------------------------------------------------------------------ */
/* Random data (splitmix64).                                                                  */

static unsigned long long g_state;

static unsigned long long next_u64(void) {
  unsigned long long z = (g_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((double)(next_u64() >> 11) / 9007199254740992.0);
}

static int64_t uniform_int(int64_t lo, int64_t hi) {
  return lo + (int64_t)(next_u64() % (unsigned long long)(hi - lo + 1));
}

static void* xmalloc(size_t bytes) {
  void* p = malloc(bytes > 0 ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static void* clone(const void* data, size_t bytes) { return memcpy(xmalloc(bytes), data, bytes); }

static uint16_t* random_halves(size_t n, float lo, float hi) {
  uint16_t* v = xmalloc(n * sizeof *v);
  for (size_t i = 0; i < n; ++i) v[i] = dynattn_float_to_half(uniform(lo, hi));
  return v;
}

static int8_t* random_codes(size_t n) {
  int8_t* v = xmalloc(n);
  for (size_t i = 0; i < n; ++i) v[i] = (int8_t)uniform_int(-127, 127);
  return v;
}

/* bf16 bits of a finite float, rounded to nearest even. */
static uint16_t float_to_bf16(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

/* Activations of the variant's dtype (bf16 or fp16). */
static uint16_t* random_activations(const capi_variant* v, size_t n, float lo, float hi) {
  if (!v->bf16) return random_halves(n, lo, hi);
  uint16_t* a = xmalloc(n * sizeof *a);
  for (size_t i = 0; i < n; ++i) a[i] = float_to_bf16(uniform(lo, hi));
  return a;
}

/* Cache elements of the variant: int8 codes, or finite fp8 bytes (no NaN, no infinity). */
static int8_t* random_cache(const capi_variant* v, size_t n) {
  if (!v->fp8) return random_codes(n);
  uint8_t* bytes = xmalloc(n);
  for (size_t i = 0; i < n; ++i) {
    uint8_t b = (uint8_t)next_u64();
    if (v->fp8 == 1 && (b & 0x7F) == 0x7F) b ^= 1;    /* e4m3 NaN */
    if (v->fp8 == 2 && (b & 0x7C) == 0x7C) b &= 0x7B; /* e5m2 exponent 31 */
    bytes[i] = b;
  }
  return (int8_t*)bytes;
}

static dynattn_dtype_t activation_dtype(const capi_variant* v) {
  return v->bf16 ? DYNATTN_DTYPE_BF16 : DYNATTN_DTYPE_F16;
}

static dynattn_dtype_t cache_dtype(const capi_variant* v) {
  return v->fp8 == 1 ? DYNATTN_DTYPE_F8E4M3 : v->fp8 == 2 ? DYNATTN_DTYPE_F8E5M2 : DYNATTN_DTYPE_I8;
}

/* A variant with every serving-feature input: window, soft-cap, softmax scale and sinks; bf16 and
 * the fp8 format `fp8` (0: the int8 cache) as asked. */
static capi_variant score_variant(int bf16, int fp8, int num_heads) {
  capi_variant v;
  memset(&v, 0, sizeof v);
  v.bf16 = bf16;
  v.fp8 = fp8;
  v.score = 1;
  v.window_left = (int)uniform_int(0, 6);
  v.logits_soft_cap = uniform(2.0f, 30.0f);
  v.softmax_scale = uniform(0.05f, 0.5f);
  for (int h = 0; h < num_heads; ++h) v.sinks[h] = uniform(-2.0f, 3.0f);
  v.k_scale = uniform(0.01f, 0.2f);
  v.v_scale = uniform(0.01f, 0.2f);
  return v;
}

static int same_bytes(const void* a, const void* b, size_t bytes) {
  return memcmp(a, b, bytes) == 0;
}

static int all_bytes(const void* data, unsigned char value, size_t bytes) {
  const unsigned char* p = data;
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != value) return 0;
  }
  return 1;
}

/* A dense CPU tensor. */
static dynattn_tensor_t dense(const void* data, dynattn_dtype_t dtype, int rank,
                              const int64_t* shape) {
  dynattn_tensor_t t;
  CHECK_OK(dynattn_tensor_dense(data, dtype, rank, shape, DYNATTN_DEVICE_CPU, &t));
  return t;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

/* ------------------------------------------------------------------------------------------ */
/* MultiHeadCacheAttention cases.                                                             */

static size_t mhca_io_elems(const capi_mhca_case* c, int heads) {
  return (size_t)(c->num_tokens * heads * c->head_dim);
}
static size_t mhca_cache_elems(const capi_mhca_case* c) {
  return (size_t)(c->num_slots * 2 * c->num_kv_heads * c->head_dim);
}
static size_t mhca_scale_elems(const capi_mhca_case* c) {
  return mhca_cache_elems(c) / (size_t)c->quant_group;
}

/* Fresh random data of the case's shapes. */
static void mhca_randomize(capi_mhca_case* c) {
  c->query = random_activations(&c->v, mhca_io_elems(c, c->num_heads), -1, 1);
  c->current_key = random_activations(&c->v, mhca_io_elems(c, c->num_kv_heads), -1, 1);
  c->current_value = random_activations(&c->v, mhca_io_elems(c, c->num_kv_heads), -1, 1);
  c->cache = random_cache(&c->v, mhca_cache_elems(c));
  c->scale = random_halves(mhca_scale_elems(c), 0.002f, 0.02f);
  c->out = random_halves(mhca_io_elems(c, c->num_heads), -1, 1);
}

/* Request 0 decodes; the others are prompts or chunks after a cached context. `v` (may be null:
 * the fp16 / int8 default) says what the case adds. */
static void mhca_make_variant(capi_mhca_case* c, const capi_variant* v) {
  memset(c, 0, sizeof *c);
  if (v != NULL) c->v = *v;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->head_dim = 32;
  c->quant_group = 8;
  c->batch = 3;
  c->decoding_batches = 1;
  for (int64_t b = 0; b < c->batch; ++b) {
    const int64_t context = uniform_int(b == 1 ? 0 : 1, 20);
    const int64_t len = b < c->decoding_batches ? 1 : uniform_int(1, 6);
    c->seqstarts[b + 1] = c->seqstarts[b] + len;
    c->kvstarts[b + 1] = c->kvstarts[b] + context + len;
    c->cachestarts[b] = 32 * b;
    c->start_pos[b] = context;
    if (len > c->max_seqlen) c->max_seqlen = len;
    if (context + len > c->max_kvlen) c->max_kvlen = context + len;
  }
  c->num_tokens = c->seqstarts[c->batch];
  c->num_slots = 32 * c->batch;
  mhca_randomize(c);
}

static void mhca_make(capi_mhca_case* c) { mhca_make_variant(c, NULL); }

static capi_mhca_case mhca_clone(const capi_mhca_case* c) {
  capi_mhca_case copy = *c;
  copy.query = clone(c->query, mhca_io_elems(c, c->num_heads) * 2);
  copy.current_key = clone(c->current_key, mhca_io_elems(c, c->num_kv_heads) * 2);
  copy.current_value = clone(c->current_value, mhca_io_elems(c, c->num_kv_heads) * 2);
  copy.cache = clone(c->cache, mhca_cache_elems(c));
  copy.scale = clone(c->scale, mhca_scale_elems(c) * 2);
  copy.out = clone(c->out, mhca_io_elems(c, c->num_heads) * 2);
  return copy;
}

static void mhca_free(capi_mhca_case* c) {
  free(c->query);
  free(c->current_key);
  free(c->current_value);
  free(c->cache);
  free(c->scale);
  free(c->out);
}

static void mhca_attrs(const capi_mhca_case* c, dynattn_multi_head_cache_attention_attrs_t* a) {
  CHECK_OK(dynattn_multi_head_cache_attention_attrs_init(a));
  a->attention.num_heads = c->num_heads;
  a->attention.num_kv_heads = c->num_kv_heads;
  a->attention.head_dim = c->head_dim;
  a->cache.quant_bit = c->v.fp8 ? 0 : 8;
  a->cache.quant_group = c->quant_group;
  if (c->v.score) {
    a->attention.window_left = c->v.window_left;
    a->attention.logits_soft_cap = c->v.logits_soft_cap;
    a->attention.softmax_scale = c->v.softmax_scale;
  }
}

static void mhca_args(const capi_mhca_case* c, dynattn_multi_head_cache_attention_args_t* a) {
  const int64_t t = c->num_tokens, hq = c->num_heads, hkv = c->num_kv_heads, d = c->head_dim;
  const int64_t b = c->batch, slots = c->num_slots, groups = d / c->quant_group;
  CHECK_OK(dynattn_multi_head_cache_attention_args_init(a));
  const dynattn_dtype_t act = activation_dtype(&c->v);
  a->query = dense(c->query, act, 3, SHAPE(t, hq, d));
  a->current_key = dense(c->current_key, act, 3, SHAPE(t, hkv, d));
  a->current_value = dense(c->current_value, act, 3, SHAPE(t, hkv, d));
  a->seqstarts = dense(c->seqstarts, DYNATTN_DTYPE_I64, 1, SHAPE(b + 1));
  a->kvstarts = dense(c->kvstarts, DYNATTN_DTYPE_I64, 1, SHAPE(b + 1));
  a->cachestarts = dense(c->cachestarts, DYNATTN_DTYPE_I64, 1, SHAPE(b));
  a->start_pos = dense(c->start_pos, DYNATTN_DTYPE_I64, 1, SHAPE(b));
  a->decoding_batches = dense(&c->decoding_batches, DYNATTN_DTYPE_I64, 0, NULL);
  a->max_seqlen = dense(&c->max_seqlen, DYNATTN_DTYPE_I64, 0, NULL);
  a->max_kvlen = dense(&c->max_kvlen, DYNATTN_DTYPE_I64, 0, NULL);
  a->cache = dense(c->cache, cache_dtype(&c->v), 5, SHAPE(slots, 1, 2, hkv, d));
  if (!c->v.fp8) a->scale = dense(c->scale, DYNATTN_DTYPE_F16, 5, SHAPE(slots, 1, 2, hkv, groups));
  a->attn_output = dense(c->out, act, 3, SHAPE(t, hq, d));
  if (c->v.score) a->sinks = dense(c->v.sinks, DYNATTN_DTYPE_F32, 1, SHAPE(hq));
  if (c->v.fp8) {
    a->k_scale = dense(&c->v.k_scale, DYNATTN_DTYPE_F32, 0, NULL);
    a->v_scale = dense(&c->v.v_scale, DYNATTN_DTYPE_F32, 0, NULL);
  }
}

/* Output, cache and scales of `a` and `b` are the same bytes. */
static int mhca_same(const capi_mhca_case* a, const capi_mhca_case* b) {
  return same_bytes(a->out, b->out, mhca_io_elems(a, a->num_heads) * 2) &&
         same_bytes(a->cache, b->cache, mhca_cache_elems(a)) &&
         same_bytes(a->scale, b->scale, mhca_scale_elems(a) * 2);
}

static void test_mhca_bitwise(void) {
  capi_mhca_case c;
  mhca_make(&c);
  capi_mhca_case ref = mhca_clone(&c);
  dynattn_multi_head_cache_attention_attrs_t attrs;
  dynattn_multi_head_cache_attention_args_t args;
  dynattn_run_options_t options;
  mhca_attrs(&c, &attrs);
  mhca_args(&c, &args);
  CHECK_OK(dynattn_run_options_init(&options));
  options.num_threads = 2;
  options.pin_threads = (next_u64() & 1) != 0; /* the same bits pinned or not */
  CHECK_OK(dynattn_multi_head_cache_attention(&attrs, &args, &options));
  CHECK(capi_cpp_mhca(&ref) == 0);
  CHECK(mhca_same(&c, &ref));
  mhca_free(&c);
  mhca_free(&ref);
}

/* ------------------------------------------------------------------------------------------ */
/* UnifiedAttention cases.                                                                    */

static size_t unified_io_elems(const capi_unified_case* c, int heads) {
  return (size_t)(c->num_tokens * heads * c->head_dim);
}
static size_t unified_cache_elems(const capi_unified_case* c) {
  return (size_t)(c->num_blocks * c->block_size * 2 * c->num_kv_heads * c->head_dim);
}
static size_t unified_scale_elems(const capi_unified_case* c) {
  return unified_cache_elems(c) / (size_t)c->quant_group;
}
static size_t unified_lse_elems(const capi_unified_case* c) {
  return (size_t)(c->num_tokens * c->num_heads);
}

/* Three requests of random context and query lengths, on blocks drawn without repetition; `v`
 * (may be null) says what the case adds. */
static void unified_make_variant(capi_unified_case* c, const capi_variant* v) {
  memset(c, 0, sizeof *c);
  if (v != NULL) c->v = *v;
  c->num_heads = 4;
  c->num_kv_heads = 2;
  c->head_dim = 64;
  c->quant_group = 8;
  c->block_size = 4;
  c->batch = 3;
  c->num_blocks = 16;
  c->max_blocks = 5;
  int64_t ids[16];
  for (int64_t i = 0; i < c->num_blocks; ++i) ids[i] = i;
  for (int64_t i = c->num_blocks - 1; i > 0; --i) {
    const int64_t j = uniform_int(0, i), tmp = ids[i];
    ids[i] = ids[j];
    ids[j] = tmp;
  }
  int64_t next_id = 0;
  for (int64_t b = 0; b < c->batch; ++b) {
    const int64_t len = uniform_int(1, 5), context = uniform_int(0, 12);
    c->query_start_loc[b + 1] = c->query_start_loc[b] + len;
    c->context_lens[b] = context;
    const int64_t used = (context + len + c->block_size - 1) / c->block_size;
    for (int64_t k = 0; k < used; ++k) c->block_table[b * c->max_blocks + k] = ids[next_id++];
  }
  c->num_tokens = c->query_start_loc[c->batch];
  c->query = random_activations(&c->v, unified_io_elems(c, c->num_heads), -1, 1);
  c->current_key = random_activations(&c->v, unified_io_elems(c, c->num_kv_heads), -1, 1);
  c->current_value = random_activations(&c->v, unified_io_elems(c, c->num_kv_heads), -1, 1);
  c->cache = random_cache(&c->v, unified_cache_elems(c));
  c->scale = random_halves(unified_scale_elems(c), 0.002f, 0.02f);
  c->out = random_halves(unified_io_elems(c, c->num_heads), -1, 1);
  c->lse = xmalloc(unified_lse_elems(c) * sizeof(float));
  memset(c->lse, 0, unified_lse_elems(c) * sizeof(float));
}

static void unified_make(capi_unified_case* c) { unified_make_variant(c, NULL); }

static capi_unified_case unified_clone(const capi_unified_case* c) {
  capi_unified_case copy = *c;
  copy.query = clone(c->query, unified_io_elems(c, c->num_heads) * 2);
  copy.current_key = clone(c->current_key, unified_io_elems(c, c->num_kv_heads) * 2);
  copy.current_value = clone(c->current_value, unified_io_elems(c, c->num_kv_heads) * 2);
  copy.cache = clone(c->cache, unified_cache_elems(c));
  copy.scale = clone(c->scale, unified_scale_elems(c) * 2);
  copy.out = clone(c->out, unified_io_elems(c, c->num_heads) * 2);
  copy.lse = clone(c->lse, unified_lse_elems(c) * sizeof(float));
  return copy;
}

static void unified_free(capi_unified_case* c) {
  free(c->query);
  free(c->current_key);
  free(c->current_value);
  free(c->cache);
  free(c->scale);
  free(c->out);
  free(c->lse);
}

static int unified_same(const capi_unified_case* a, const capi_unified_case* b) {
  return same_bytes(a->out, b->out, unified_io_elems(a, a->num_heads) * 2) &&
         same_bytes(a->lse, b->lse, unified_lse_elems(a) * sizeof(float)) &&
         same_bytes(a->cache, b->cache, unified_cache_elems(a)) &&
         same_bytes(a->scale, b->scale, unified_scale_elems(a) * 2);
}

static void unified_block_cache(const capi_unified_case* c, dynattn_block_cache_t* cache) {
  const int64_t slots = c->num_blocks * c->block_size, hkv = c->num_kv_heads, d = c->head_dim;
  dynattn_cache_attrs_t attrs;
  CHECK_OK(dynattn_cache_attrs_init(&attrs));
  attrs.quant_bit = c->v.fp8 ? 0 : 8;
  attrs.quant_group = c->quant_group;
  const dynattn_tensor_t data = dense(c->cache, cache_dtype(&c->v), 5, SHAPE(slots, 1, 2, hkv, d));
  const dynattn_tensor_t scale =
      dense(c->scale, DYNATTN_DTYPE_F16, 5, SHAPE(slots, 1, 2, hkv, d / c->quant_group));
  CHECK_OK(dynattn_make_pmx_block_cache(&data, c->v.fp8 ? NULL : &scale, &attrs, c->num_kv_heads,
                                        c->head_dim, c->block_size, cache));
}

/* `cache` must outlive the args (they point at it). */
static void unified_args(const capi_unified_case* c, const dynattn_block_cache_t* cache,
                         dynattn_unified_attention_args_t* a) {
  const int64_t t = c->num_tokens, hq = c->num_heads, hkv = c->num_kv_heads, d = c->head_dim;
  const dynattn_dtype_t act = activation_dtype(&c->v);
  CHECK_OK(dynattn_unified_attention_args_init(a));
  a->query = dense(c->query, act, 3, SHAPE(t, hq, d));
  a->current_key = dense(c->current_key, act, 3, SHAPE(t, hkv, d));
  a->current_value = dense(c->current_value, act, 3, SHAPE(t, hkv, d));
  a->query_start_loc = dense(c->query_start_loc, DYNATTN_DTYPE_I64, 1, SHAPE(c->batch + 1));
  a->context_lens = dense(c->context_lens, DYNATTN_DTYPE_I64, 1, SHAPE(c->batch));
  a->block_table = dense(c->block_table, DYNATTN_DTYPE_I64, 2, SHAPE(c->batch, c->max_blocks));
  a->cache = cache;
  a->attn_output = dense(c->out, act, 3, SHAPE(t, hq, d));
  a->lse = dense(c->lse, DYNATTN_DTYPE_F32, 2, SHAPE(t, hq));
  if (c->v.score) a->sinks = dense(c->v.sinks, DYNATTN_DTYPE_F32, 1, SHAPE(hq));
  if (c->v.fp8) {
    a->k_scale = dense(&c->v.k_scale, DYNATTN_DTYPE_F32, 0, NULL);
    a->v_scale = dense(&c->v.v_scale, DYNATTN_DTYPE_F32, 0, NULL);
  }
}

static void unified_attrs(const capi_unified_case* c, dynattn_unified_attention_attrs_t* a) {
  CHECK_OK(dynattn_unified_attention_attrs_init(a));
  a->num_heads = c->num_heads;
  a->num_kv_heads = c->num_kv_heads;
  a->head_dim = c->head_dim;
  if (c->v.score) {
    a->window_left = c->v.window_left;
    a->logits_soft_cap = c->v.logits_soft_cap;
    a->softmax_scale = c->v.softmax_scale;
  }
}

static int same_summary(const dynattn_unified_step_summary_t* a,
                        const dynattn_unified_step_summary_t* b) {
  return strcmp(a->phase, b->phase) == 0 && a->query_len == b->query_len &&
         a->num_shared_blocks == b->num_shared_blocks &&
         a->num_unique_blocks == b->num_unique_blocks && a->num_logits == b->num_logits &&
         a->num_work_items == b->num_work_items && a->cache_bytes_read == b->cache_bytes_read;
}

static void test_unified_bitwise(void) {
  capi_unified_case c;
  unified_make(&c);
  capi_unified_case ref = unified_clone(&c);
  dynattn_block_cache_t cache;
  dynattn_unified_attention_attrs_t attrs;
  dynattn_unified_attention_args_t args;
  dynattn_unified_step_summary_t summary;
  unified_block_cache(&c, &cache);
  CHECK(cache.block_size == c.block_size && cache.num_blocks == c.num_blocks);
  CHECK(cache.cache.elem == DYNATTN_CACHE_ELEM_I8);
  unified_attrs(&c, &attrs);
  unified_args(&c, &cache, &args);
  CHECK_OK(dynattn_describe_unified_step(&attrs, &args, &summary));
  CHECK(summary.query_len == c.num_tokens && summary.num_logits == c.batch);
  CHECK(strlen(summary.phase) == 3 && strchr("c-", summary.phase[0]) &&
        strchr("s-", summary.phase[1]) && strchr("u-", summary.phase[2]));
  CHECK(unified_same(&c, &ref)); /* describing writes nothing */
  CHECK_OK(dynattn_unified_attention(&attrs, &args, NULL));
  CHECK(capi_cpp_unified(&ref) == 0);
  CHECK(unified_same(&c, &ref));
  attrs.precision = (dynattn_precision_t)3; /* neither tier: named, nothing written */
  CHECK_ERROR(dynattn_unified_attention(&attrs, &args, NULL), DYNATTN_STATUS_INVALID_ARGUMENT,
              "attrs.precision");
  CHECK(unified_same(&c, &ref));
  unified_free(&c);
  unified_free(&ref);
}

/* ------------------------------------------------------------------------------------------ */
/* bf16, fp8 caches, window, soft-cap, softmax scale, sinks, k_scale / v_scale.               */

/* The *_init functions give the C++ defaults of the new fields. */
static void test_new_field_defaults(void) {
  dynattn_attention_attrs_t attention;
  dynattn_unified_attention_attrs_t unified;
  dynattn_multi_head_cache_attention_args_t mhca;
  dynattn_unified_attention_args_t u;
  dynattn_key_value_cache_args_t kvc;
  dynattn_multi_head_attention_args_t mha;
  CHECK_OK(dynattn_attention_attrs_init(&attention));
  CHECK(attention.window_left == -1 && attention.logits_soft_cap == 0.0f &&
        attention.softmax_scale == 0.0f);
  CHECK_OK(dynattn_unified_attention_attrs_init(&unified));
  CHECK(unified.window_left == -1 && unified.logits_soft_cap == 0.0f &&
        unified.softmax_scale == 0.0f);
  CHECK(attention.precision == DYNATTN_PRECISION_EXACT &&
        unified.precision == DYNATTN_PRECISION_EXACT);
  CHECK_OK(dynattn_multi_head_cache_attention_args_init(&mhca));
  CHECK(mhca.sinks.rank == -1 && mhca.k_scale.rank == -1 && mhca.v_scale.rank == -1);
  CHECK(mhca.key_offsets.rank == -1 && mhca.alibi_slopes.rank == -1 && mhca.lse.rank == -1);
  CHECK_OK(dynattn_unified_attention_args_init(&u));
  CHECK(u.sinks.rank == -1 && u.k_scale.rank == -1 && u.v_scale.rank == -1);
  CHECK(u.key_offsets.rank == -1 && u.key_counts.rank == -1 && u.alibi_slopes.rank == -1);
  CHECK_OK(dynattn_key_value_cache_args_init(&kvc));
  CHECK(kvc.k_scale.rank == -1 && kvc.v_scale.rank == -1);
  CHECK_OK(dynattn_multi_head_attention_args_init(&mha));
  CHECK(mha.sinks.rank == -1 && mha.alibi_slopes.rank == -1 && mha.lse.rank == -1);
  dynattn_run_options_t run_options;
  dynattn_context_options_t context_options;
  CHECK_OK(dynattn_run_options_init(&run_options));
  CHECK_OK(dynattn_context_options_init(&context_options));
  CHECK(!run_options.pin_threads && !context_options.pin_threads);
  /* The new enum values are accepted by dynattn_tensor_dense and keep the old ones' numbers. */
  CHECK(DYNATTN_DTYPE_I32 == 4 && DYNATTN_DTYPE_BF16 == 5 && DYNATTN_DTYPE_F8E4M3 == 6 &&
        DYNATTN_DTYPE_F8E5M2 == 7 && DYNATTN_CACHE_ELEM_I4 == 3 && DYNATTN_CACHE_ELEM_F8E5M2 == 6);
  uint8_t byte = 0;
  dynattn_tensor_t t;
  CHECK_OK(dynattn_tensor_dense(&byte, DYNATTN_DTYPE_F8E5M2, 0, NULL, DYNATTN_DEVICE_CPU, &t));
  CHECK_ERROR(dynattn_tensor_dense(&byte, (dynattn_dtype_t)8, 0, NULL, DYNATTN_DEVICE_CPU, &t),
              DYNATTN_STATUS_INVALID_ARGUMENT, "dtype");
}

/* MHCA and unified steps with every new input give the C++ API's bits (bf16 and fp16, fp8 caches
 * of both formats and the int8 cache, window + soft-cap + softmax scale + sinks). */
static void test_variants_bitwise(void) {
  const int variants[][2] = {{1, 1}, {0, 2}, {1, 0}, {1, 2}}; /* (bf16, fp8) */
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; ++i) {
    const capi_variant v = score_variant(variants[i][0], variants[i][1], 4);
    capi_mhca_case c;
    mhca_make_variant(&c, &v);
    capi_mhca_case ref = mhca_clone(&c);
    dynattn_multi_head_cache_attention_attrs_t attrs;
    dynattn_multi_head_cache_attention_args_t args;
    mhca_attrs(&c, &attrs);
    mhca_args(&c, &args);
    CHECK_OK(dynattn_multi_head_cache_attention(&attrs, &args, NULL));
    CHECK(capi_cpp_mhca(&ref) == 0);
    CHECK(mhca_same(&c, &ref));
    mhca_free(&c);
    mhca_free(&ref);

    capi_unified_case u;
    unified_make_variant(&u, &v);
    capi_unified_case uref = unified_clone(&u);
    dynattn_block_cache_t cache;
    dynattn_unified_attention_attrs_t uattrs;
    dynattn_unified_attention_args_t uargs;
    unified_block_cache(&u, &cache);
    CHECK(cache.cache.elem == (v.fp8 == 1   ? DYNATTN_CACHE_ELEM_F8E4M3
                               : v.fp8 == 2 ? DYNATTN_CACHE_ELEM_F8E5M2
                                            : DYNATTN_CACHE_ELEM_I8));
    unified_attrs(&u, &uattrs);
    unified_args(&u, &cache, &uargs);
    CHECK_OK(dynattn_unified_attention(&uattrs, &uargs, NULL));
    CHECK(capi_cpp_unified(&uref) == 0);
    CHECK(unified_same(&u, &uref));
    unified_free(&u);
    unified_free(&uref);
  }
}

/* A bad new input is refused with its name, and nothing is written. */
static void test_new_inputs_refused(void) {
  const capi_variant v = score_variant(1, 1, 4);
  capi_mhca_case c;
  mhca_make_variant(&c, &v);
  capi_mhca_case before = mhca_clone(&c);
  dynattn_multi_head_cache_attention_attrs_t attrs;
  dynattn_multi_head_cache_attention_args_t args;
  mhca_attrs(&c, &attrs);
  mhca_args(&c, &args);
  attrs.attention.window_left = -2;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "window_left");
  mhca_attrs(&c, &attrs);
  attrs.attention.logits_soft_cap = -1.0f;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "logits_soft_cap");
  mhca_attrs(&c, &attrs);
  attrs.attention.softmax_scale = NAN;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "softmax_scale");
  mhca_attrs(&c, &attrs);
  const float zero = 0.0f;
  args.k_scale = dense(&zero, DYNATTN_DTYPE_F32, 0, NULL);
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "k_scale");
  mhca_args(&c, &args);
  args.sinks.shape[0] = 3;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "sinks");
  /* A distributed rank's inputs reach the library through the C structs too. */
  mhca_args(&c, &args);
  args.alibi_slopes = dense(c.v.sinks, DYNATTN_DTYPE_F32, 1, SHAPE(c.num_heads + 1));
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "alibi_slopes");
  mhca_args(&c, &args);
  const int64_t negative[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  args.key_offsets = dense(negative, DYNATTN_DTYPE_I64, 1, SHAPE(c.batch));
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "key_offsets");
  mhca_args(&c, &args);
  float* lse = xmalloc((size_t)((c.num_tokens + 1) * c.num_heads) * sizeof(float));
  args.lse = dense(lse, DYNATTN_DTYPE_F32, 2, SHAPE(c.num_tokens + 1, c.num_heads));
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "lse");
  free(lse);
  CHECK(mhca_same(&c, &before));
  mhca_free(&c);
  mhca_free(&before);
}

/* ------------------------------------------------------------------------------------------ */
/* Plans and contexts.                                                                        */

static void test_mhca_plan_two_layers(dynattn_context_t* context) {
  capi_mhca_case layer[2], ref[2];
  mhca_make(&layer[0]);
  layer[1] = layer[0]; /* the same step metadata, its own data */
  mhca_randomize(&layer[1]);
  dynattn_multi_head_cache_attention_attrs_t attrs;
  dynattn_multi_head_cache_attention_args_t args[2];
  dynattn_plan_t* plan = NULL;
  mhca_attrs(&layer[0], &attrs);
  for (int l = 0; l < 2; ++l) {
    ref[l] = mhca_clone(&layer[l]);
    mhca_args(&layer[l], &args[l]);
  }
  CHECK_OK(dynattn_plan_create(&plan));
  CHECK_OK(dynattn_plan_multi_head_cache_attention(&attrs, &args[0], plan));
  const char* op = NULL;
  const char* backend = NULL;
  CHECK_OK(dynattn_plan_op(plan, &op));
  CHECK_OK(dynattn_plan_backend(plan, &backend));
  CHECK(op != NULL && strcmp(op, "MultiHeadCacheAttention") == 0);
  CHECK(backend != NULL && strcmp(backend, "cpu/int8") == 0);
  dynattn_precision_t precision = DYNATTN_PRECISION_FAST;
  CHECK_OK(dynattn_plan_precision(plan, &precision));
  CHECK(precision == DYNATTN_PRECISION_EXACT);
  for (int l = 0; l < 2; ++l) {
    CHECK_OK(dynattn_run_multi_head_cache_attention(plan, &args[l], context));
    CHECK(capi_cpp_mhca(&ref[l]) == 0);
    CHECK(mhca_same(&layer[l], &ref[l]));
  }
  /* A layer whose query is not what the plan saw: named, nothing written. */
  memset(layer[1].out, 0xAB, mhca_io_elems(&layer[1], layer[1].num_heads) * 2);
  args[1].query.dtype = DYNATTN_DTYPE_F32;
  CHECK_ERROR(dynattn_run_multi_head_cache_attention(plan, &args[1], context),
              DYNATTN_STATUS_INVALID_ARGUMENT, "query");
  CHECK(all_bytes(layer[1].out, 0xAB, mhca_io_elems(&layer[1], layer[1].num_heads) * 2));
  dynattn_unified_step_summary_t summary;
  CHECK_ERROR(dynattn_plan_unified_summary(plan, &summary), DYNATTN_STATUS_INVALID_ARGUMENT,
              "plan");
  dynattn_plan_destroy(plan);
  for (int l = 0; l < 2; ++l) {
    mhca_free(&layer[l]);
    mhca_free(&ref[l]);
  }
}

/* One plan, a layer with its own window, soft-cap, scale and sinks (dynattn_run_*_layer): the
 * bits of the C++ one-shot call made with that layer's attributes; a bad one is named. */
static void test_mhca_plan_layer_attrs(dynattn_context_t* context) {
  capi_variant v = score_variant(0, 0, 4);
  capi_mhca_case layer;
  mhca_make_variant(&layer, &v);
  capi_mhca_case planned = mhca_clone(&layer); /* the same step, planned without the attrs */
  planned.v.score = 0;
  capi_mhca_case ref = mhca_clone(&layer);
  dynattn_multi_head_cache_attention_attrs_t attrs;
  dynattn_multi_head_cache_attention_args_t plan_args, args;
  mhca_attrs(&planned, &attrs);
  mhca_args(&planned, &plan_args);
  mhca_args(&layer, &args);
  dynattn_plan_t* plan = NULL;
  CHECK_OK(dynattn_plan_create(&plan));
  CHECK_OK(dynattn_plan_multi_head_cache_attention(&attrs, &plan_args, plan));
  dynattn_layer_attrs_t la;
  CHECK_OK(dynattn_plan_layer_attrs(plan, &la));
  CHECK(la.window_left == -1 && la.logits_soft_cap == 0.0f && la.sinks.rank == -1);
  la.window_left = v.window_left;
  la.logits_soft_cap = v.logits_soft_cap;
  la.softmax_scale = v.softmax_scale;
  la.sinks = dense(v.sinks, DYNATTN_DTYPE_F32, 1, SHAPE(4));
  CHECK_OK(dynattn_run_multi_head_cache_attention_layer(plan, &args, &la, context));
  CHECK(capi_cpp_mhca(&ref) == 0);
  CHECK(mhca_same(&layer, &ref));
  /* A bad layer attribute: named, nothing written. */
  memset(layer.out, 0xAB, mhca_io_elems(&layer, layer.num_heads) * 2);
  la.window_left = -3;
  CHECK_ERROR(dynattn_run_multi_head_cache_attention_layer(plan, &args, &la, context),
              DYNATTN_STATUS_INVALID_ARGUMENT, "window_left");
  CHECK(all_bytes(layer.out, 0xAB, mhca_io_elems(&layer, layer.num_heads) * 2));
  /* A null layer is the plan's attributes. */
  CHECK_OK(dynattn_run_multi_head_cache_attention_layer(plan, &plan_args, NULL, context));
  dynattn_plan_destroy(plan);
  mhca_free(&layer);
  mhca_free(&planned);
  mhca_free(&ref);
}

/* KeyValueCache, then MultiHeadAttention over what it gathered, each planned and run, and
 * one-shot: the C++ API's bits. The plan handle is planned again for the second op. */
static void kvc_args(const capi_mhca_case* c, uint16_t* key, uint16_t* value,
                     dynattn_key_value_cache_args_t* a) {
  const int64_t t = c->num_tokens, hkv = c->num_kv_heads, d = c->head_dim, b = c->batch;
  const int64_t rows = c->kvstarts[b], slots = c->num_slots, groups = d / c->quant_group;
  CHECK_OK(dynattn_key_value_cache_args_init(a));
  a->current_key = dense(c->current_key, DYNATTN_DTYPE_F16, 3, SHAPE(t, hkv, d));
  a->current_value = dense(c->current_value, DYNATTN_DTYPE_F16, 3, SHAPE(t, hkv, d));
  a->seqstarts = dense(c->seqstarts, DYNATTN_DTYPE_I64, 1, SHAPE(b + 1));
  a->kvstarts = dense(c->kvstarts, DYNATTN_DTYPE_I64, 1, SHAPE(b + 1));
  a->cachestarts = dense(c->cachestarts, DYNATTN_DTYPE_I64, 1, SHAPE(b));
  a->start_pos = dense(c->start_pos, DYNATTN_DTYPE_I64, 1, SHAPE(b));
  a->max_seqlen = dense(&c->max_seqlen, DYNATTN_DTYPE_I64, 0, NULL);
  a->max_kvlen = dense(&c->max_kvlen, DYNATTN_DTYPE_I64, 0, NULL);
  a->cache = dense(c->cache, DYNATTN_DTYPE_I8, 5, SHAPE(slots, 1, 2, hkv, d));
  a->scale = dense(c->scale, DYNATTN_DTYPE_F16, 5, SHAPE(slots, 1, 2, hkv, groups));
  a->key = dense(key, DYNATTN_DTYPE_F16, 3, SHAPE(rows, hkv, d));
  a->value = dense(value, DYNATTN_DTYPE_F16, 3, SHAPE(rows, hkv, d));
}

static void mha_args(const capi_mhca_case* c, const uint16_t* key, const uint16_t* value,
                     dynattn_multi_head_attention_args_t* a) {
  const int64_t t = c->num_tokens, hq = c->num_heads, hkv = c->num_kv_heads, d = c->head_dim;
  const int64_t b = c->batch, rows = c->kvstarts[b];
  CHECK_OK(dynattn_multi_head_attention_args_init(a));
  a->query = dense(c->query, DYNATTN_DTYPE_F16, 3, SHAPE(t, hq, d));
  a->key = dense(key, DYNATTN_DTYPE_F16, 3, SHAPE(rows, hkv, d));
  a->value = dense(value, DYNATTN_DTYPE_F16, 3, SHAPE(rows, hkv, d));
  a->seqstarts = dense(c->seqstarts, DYNATTN_DTYPE_I64, 1, SHAPE(b + 1));
  a->kvstarts = dense(c->kvstarts, DYNATTN_DTYPE_I64, 1, SHAPE(b + 1));
  a->decoding_batches = dense(&c->decoding_batches, DYNATTN_DTYPE_I64, 0, NULL);
  a->max_seqlen = dense(&c->max_seqlen, DYNATTN_DTYPE_I64, 0, NULL);
  a->max_kvlen = dense(&c->max_kvlen, DYNATTN_DTYPE_I64, 0, NULL);
  a->attn_output = dense(c->out, DYNATTN_DTYPE_F16, 3, SHAPE(t, hq, d));
}

static void test_kvc_then_mha(dynattn_context_t* context) {
  capi_mhca_case c;
  mhca_make(&c);
  capi_mhca_case ref = mhca_clone(&c);
  const size_t kv_bytes = (size_t)(c.kvstarts[c.batch] * c.num_kv_heads * c.head_dim) * 2;
  uint16_t *key = xmalloc(kv_bytes), *value = xmalloc(kv_bytes);
  uint16_t *ref_key = xmalloc(kv_bytes), *ref_value = xmalloc(kv_bytes);
  dynattn_key_value_cache_attrs_t kvc_attrs;
  dynattn_key_value_cache_args_t kvc;
  dynattn_attention_attrs_t attrs;
  dynattn_multi_head_attention_args_t mha;
  dynattn_plan_t* plan = NULL;
  const char* op = NULL;
  CHECK_OK(dynattn_key_value_cache_attrs_init(&kvc_attrs));
  CHECK(kvc_attrs.num_repeat == 1 && kvc_attrs.cache.page_size == 128);
  kvc_attrs.cache.quant_bit = 8;
  kvc_attrs.cache.quant_group = c.quant_group;
  kvc_args(&c, key, value, &kvc);
  CHECK_OK(dynattn_plan_create(&plan));
  CHECK_OK(dynattn_plan_key_value_cache(&kvc_attrs, &kvc, plan));
  CHECK_OK(dynattn_run_key_value_cache(plan, &kvc, context));
  CHECK(capi_cpp_kvc(&ref, ref_key, ref_value) == 0);
  CHECK(same_bytes(key, ref_key, kv_bytes) && same_bytes(value, ref_value, kv_bytes));
  CHECK(mhca_same(&c, &ref));
  CHECK_OK(dynattn_key_value_cache(&kvc_attrs, &kvc, NULL)); /* the same tokens again */
  CHECK(same_bytes(key, ref_key, kv_bytes) && mhca_same(&c, &ref));

  CHECK_OK(dynattn_attention_attrs_init(&attrs));
  CHECK(attrs.is_causal && !attrs.is_alibi);
  attrs.num_heads = c.num_heads;
  attrs.num_kv_heads = c.num_kv_heads;
  attrs.head_dim = c.head_dim;
  mha_args(&c, key, value, &mha);
  CHECK_OK(dynattn_plan_multi_head_attention(&attrs, &mha, plan));
  CHECK_OK(dynattn_plan_op(plan, &op));
  CHECK(op != NULL && strcmp(op, "MultiHeadAttention") == 0);
  CHECK_OK(dynattn_run_multi_head_attention(plan, &mha, context));
  CHECK(capi_cpp_mha(&ref, ref_key, ref_value) == 0);
  CHECK(mhca_same(&c, &ref));
  memset(c.out, 0, (size_t)(c.num_tokens * c.num_heads * c.head_dim) * 2);
  CHECK_OK(dynattn_multi_head_attention(&attrs, &mha, NULL));
  CHECK(mhca_same(&c, &ref));
  dynattn_plan_destroy(plan);
  free(key);
  free(value);
  free(ref_key);
  free(ref_value);
  mhca_free(&c);
  mhca_free(&ref);
}

static void test_unified_plan_two_layers(dynattn_context_t* context) {
  capi_unified_case layer[2], ref[2];
  unified_make(&layer[0]);
  layer[1] = unified_clone(&layer[0]);
  for (size_t i = 0; i < unified_io_elems(&layer[1], layer[1].num_heads); ++i) {
    layer[1].query[i] = dynattn_float_to_half(uniform(-1, 1));
  }
  dynattn_block_cache_t cache[2];
  dynattn_unified_attention_attrs_t attrs;
  dynattn_unified_attention_args_t args[2];
  dynattn_unified_step_summary_t described, planned;
  dynattn_plan_t* plan = NULL;
  unified_attrs(&layer[0], &attrs);
  for (int l = 0; l < 2; ++l) {
    ref[l] = unified_clone(&layer[l]);
    unified_block_cache(&layer[l], &cache[l]);
    unified_args(&layer[l], &cache[l], &args[l]);
  }
  CHECK_OK(dynattn_describe_unified_step(&attrs, &args[0], &described));
  CHECK_OK(dynattn_plan_create(&plan));
  CHECK_OK(dynattn_plan_unified_attention(&attrs, &args[0], plan));
  CHECK_OK(dynattn_plan_unified_summary(plan, &planned));
  CHECK(same_summary(&described, &planned));
  for (int l = 0; l < 2; ++l) {
    CHECK_OK(dynattn_run_unified_attention(plan, &args[l], context));
    CHECK(capi_cpp_unified(&ref[l]) == 0);
    CHECK(unified_same(&layer[l], &ref[l]));
  }
  size_t workspace = 0;
  CHECK_OK(dynattn_context_workspace_bytes(context, &workspace));
  dynattn_plan_destroy(plan);
  for (int l = 0; l < 2; ++l) {
    unified_free(&layer[l]);
    unified_free(&ref[l]);
  }
}

/* precision: FAST is accepted, and where no fast kernel serves the call (int8 groups of 8) the
 * exact tier runs: the plan says EXACT and the outputs are the C++ exact call's bits. Groups of 32
 * take the fast kernel: the plan says FAST. A value that is neither tier is named. */
static void test_mhca_precision(dynattn_context_t* context) {
  capi_mhca_case c;
  mhca_make(&c);
  capi_mhca_case ref = mhca_clone(&c);
  dynattn_multi_head_cache_attention_attrs_t attrs;
  dynattn_multi_head_cache_attention_args_t args;
  mhca_attrs(&c, &attrs);
  mhca_args(&c, &args);
  attrs.attention.precision = DYNATTN_PRECISION_FAST;
  dynattn_plan_t* plan = NULL;
  CHECK_OK(dynattn_plan_create(&plan));
  CHECK_OK(dynattn_plan_multi_head_cache_attention(&attrs, &args, plan));
  dynattn_precision_t precision = DYNATTN_PRECISION_FAST;
  CHECK_OK(dynattn_plan_precision(plan, &precision));
  CHECK(precision == DYNATTN_PRECISION_EXACT);
  CHECK_OK(dynattn_run_multi_head_cache_attention(plan, &args, context));
  CHECK(capi_cpp_mhca(&ref) == 0);
  CHECK(mhca_same(&c, &ref));
  c.quant_group = 32; /* the scale tensor holds fewer groups: its shape follows */
  mhca_attrs(&c, &attrs);
  mhca_args(&c, &args);
  attrs.attention.precision = DYNATTN_PRECISION_FAST;
  CHECK_OK(dynattn_plan_multi_head_cache_attention(&attrs, &args, plan));
  CHECK_OK(dynattn_plan_precision(plan, &precision));
  CHECK(precision == DYNATTN_PRECISION_FAST);
  attrs.attention.precision = (dynattn_precision_t)2;
  CHECK_ERROR(dynattn_plan_multi_head_cache_attention(&attrs, &args, plan),
              DYNATTN_STATUS_INVALID_ARGUMENT, "attrs.attention.precision");
  dynattn_plan_destroy(plan);
  mhca_free(&c);
  mhca_free(&ref);
}

static void test_plans(void) {
  dynattn_context_options_t options;
  dynattn_context_t* context = NULL;
  int threads = 0;
  CHECK_OK(dynattn_context_options_init(&options));
  CHECK(options.num_threads == 0 && options.cuda_stream == NULL);
  options.num_threads = 2;
  CHECK_OK(dynattn_context_create(&options, &context));
  CHECK_OK(dynattn_context_num_threads(context, &threads));
  CHECK(threads == 2);
  test_mhca_plan_two_layers(context);
  test_mhca_plan_layer_attrs(context);
  test_unified_plan_two_layers(context);
  test_kvc_then_mha(context);
  test_mhca_precision(context);
  dynattn_context_destroy(context);
}

/* ------------------------------------------------------------------------------------------ */
/* merge_states.                                                                              */

static void test_merge_states(void) {
  enum { K = 3, T = 4, H = 2, D = 8 };
  float out[K * T * H * D], lse[K * T * H];
  float merged[T * H * D], merged_lse[T * H], ref[T * H * D], ref_lse[T * H];
  for (int i = 0; i < K * T * H * D; ++i) out[i] = uniform(-1, 1);
  for (int i = 0; i < K * T * H; ++i) lse[i] = uniform(-3, 3);
  lse[0] = -INFINITY; /* part 0 of row 0 is empty */
  dynattn_merge_states_args_t args;
  CHECK_OK(dynattn_merge_states_args_init(&args));
  args.out = dense(out, DYNATTN_DTYPE_F32, 4, SHAPE(K, T, H, D));
  args.lse = dense(lse, DYNATTN_DTYPE_F32, 3, SHAPE(K, T, H));
  args.merged_out = dense(merged, DYNATTN_DTYPE_F32, 3, SHAPE(T, H, D));
  args.merged_lse = dense(merged_lse, DYNATTN_DTYPE_F32, 2, SHAPE(T, H));
  CHECK_OK(dynattn_merge_states(&args, NULL));
  CHECK(capi_cpp_merge(K, T, H, D, out, lse, ref, ref_lse) == 0);
  CHECK(same_bytes(merged, ref, sizeof merged) && same_bytes(merged_lse, ref_lse, sizeof ref_lse));
  /* And the formula, in double. */
  double worst = 0;
  for (int row = 0; row < T * H; ++row) {
    double m = -INFINITY, l = 0;
    for (int k = 0; k < K; ++k) m = fmax(m, lse[k * T * H + row]);
    for (int k = 0; k < K; ++k) l += exp(lse[k * T * H + row] - m);
    worst = fmax(worst, fabs(m + log(l) - merged_lse[row]));
    for (int e = 0; e < D; ++e) {
      double v = 0;
      for (int k = 0; k < K; ++k) {
        v += exp(lse[k * T * H + row] - m) * out[(k * T * H + row) * D + e];
      }
      worst = fmax(worst, fabs(v / l - merged[row * D + e]));
    }
  }
  CHECK(worst < 1e-5);
  /* Both forms at once: refused, by name. */
  args.acc = args.out;
  CHECK_ERROR(dynattn_merge_states(&args, NULL), DYNATTN_STATUS_INVALID_ARGUMENT, "acc");
}

/* ------------------------------------------------------------------------------------------ */
/* Errors.                                                                                    */

/* A call that fails leaves the output, the cache and the scales as they were. */
static void check_untouched(const capi_mhca_case* c, const capi_mhca_case* before) {
  CHECK(all_bytes(c->out, 0xAB, mhca_io_elems(c, c->num_heads) * 2));
  CHECK(same_bytes(c->cache, before->cache, mhca_cache_elems(c)));
  CHECK(same_bytes(c->scale, before->scale, mhca_scale_elems(c) * 2));
}

static void test_invalid_inputs(void) {
  capi_mhca_case c;
  mhca_make(&c);
  memset(c.out, 0xAB, mhca_io_elems(&c, c.num_heads) * 2); /* poison */
  capi_mhca_case before = mhca_clone(&c);
  dynattn_multi_head_cache_attention_attrs_t attrs;
  dynattn_multi_head_cache_attention_args_t args;
  mhca_attrs(&c, &attrs);
  mhca_args(&c, &args);

  attrs.attention.num_kv_heads = 3; /* does not divide num_heads = 4 */
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "num_kv_heads");
  check_untouched(&c, &before);
  mhca_attrs(&c, &attrs);

  args.query.rank = 7;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "query: rank 7 is out of range");
  args.query.rank = 3;
  args.current_key.dtype = (dynattn_dtype_t)42;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT,
              "current_key.dtype: unknown dynattn_dtype_t value 42");
  args.current_key.dtype = DYNATTN_DTYPE_F16;
  args.scale.device = (dynattn_device_t)-1;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "scale.device");
  args.scale.device = DYNATTN_DEVICE_CPU;
  dynattn_cache_desc_t desc;
  CHECK_OK(dynattn_make_pmx_cache_desc(&args.cache, &args.scale, &attrs.cache, c.num_kv_heads,
                                       c.head_dim, &desc));
  desc.elem = (dynattn_cache_elem_t)9;
  args.cache_desc = &desc;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "cache_desc.elem");
  args.cache_desc = NULL;
  args.start_pos.dtype = DYNATTN_DTYPE_F32; /* a rule of the C++ validator */
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "start_pos");
  args.start_pos.dtype = DYNATTN_DTYPE_I64;
  CHECK_ERROR(dynattn_multi_head_cache_attention(&attrs, NULL, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "args: must not be null");
  CHECK_ERROR(dynattn_multi_head_cache_attention(NULL, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "attrs: must not be null");
  check_untouched(&c, &before);

  /* Through the cache descriptor the same call gives the same bits as through the tensors. */
  CHECK_OK(dynattn_make_pmx_cache_desc(&args.cache, &args.scale, &attrs.cache, c.num_kv_heads,
                                       c.head_dim, &desc));
  args.cache_desc = &desc;
  CHECK_OK(dynattn_multi_head_cache_attention(&attrs, &args, NULL));
  CHECK(capi_cpp_mhca(&before) == 0);
  CHECK(mhca_same(&c, &before));
  mhca_free(&c);
  mhca_free(&before);
}

static void test_null_handles_and_helpers(void) {
  dynattn_multi_head_cache_attention_args_t args;
  dynattn_context_t* context = NULL;
  dynattn_plan_t* plan = NULL;
  const char* op = "unset";
  dynattn_tensor_t t;
  CHECK_OK(dynattn_multi_head_cache_attention_args_init(&args));
  CHECK(args.query.rank == -1 && args.attn_mask.rank == -1 && args.cache_desc == NULL);
  CHECK_ERROR(dynattn_context_create(NULL, NULL), DYNATTN_STATUS_INVALID_ARGUMENT, "out");
  CHECK_ERROR(dynattn_plan_create(NULL), DYNATTN_STATUS_INVALID_ARGUMENT, "out");
  CHECK_ERROR(dynattn_plan_op(NULL, &op), DYNATTN_STATUS_INVALID_ARGUMENT, "plan");
  CHECK_ERROR(dynattn_context_num_threads(NULL, NULL), DYNATTN_STATUS_INVALID_ARGUMENT,
              "context: must not be null");
  CHECK_OK(dynattn_context_create(NULL, &context));
  CHECK_OK(dynattn_plan_create(&plan));
  CHECK_ERROR(dynattn_run_multi_head_cache_attention(NULL, &args, context),
              DYNATTN_STATUS_INVALID_ARGUMENT, "plan: must not be null");
  CHECK_ERROR(dynattn_run_multi_head_cache_attention(plan, &args, NULL),
              DYNATTN_STATUS_INVALID_ARGUMENT, "context: must not be null");
  CHECK_ERROR(dynattn_plan_unified_attention(NULL, NULL, NULL), DYNATTN_STATUS_INVALID_ARGUMENT,
              "plan: must not be null");
  CHECK_OK(dynattn_plan_op(plan, &op));
  CHECK(op == NULL); /* empty plan */
  dynattn_plan_destroy(plan);
  dynattn_context_destroy(context);
  dynattn_plan_destroy(NULL);
  dynattn_context_destroy(NULL);

  CHECK_ERROR(dynattn_tensor_dense(NULL, DYNATTN_DTYPE_F32, 7, SHAPE(1), DYNATTN_DEVICE_CPU, &t),
              DYNATTN_STATUS_INVALID_ARGUMENT, "rank");
  CHECK_ERROR(dynattn_tensor_dense(NULL, DYNATTN_DTYPE_F32, 2, NULL, DYNATTN_DEVICE_CPU, &t),
              DYNATTN_STATUS_INVALID_ARGUMENT, "shape");
  CHECK_ERROR(dynattn_tensor_dense(NULL, (dynattn_dtype_t)8, 1, SHAPE(1), DYNATTN_DEVICE_CPU, &t),
              DYNATTN_STATUS_INVALID_ARGUMENT, "dtype");
  CHECK_OK(dynattn_tensor_dense(NULL, DYNATTN_DTYPE_F16, 2, SHAPE(3, 5), DYNATTN_DEVICE_CPU, &t));
  CHECK(t.rank == 2 && t.strides[0] == 5 && t.strides[1] == 1 && t.dtype == DYNATTN_DTYPE_F16);
  CHECK_OK(dynattn_tensor_absent(&t));
  CHECK(t.rank == -1);

  CHECK(strcmp(dynattn_version(), DYNATTN_VERSION) == 0);
  CHECK(strlen(dynattn_cpu_target_name()) > 0);
  CHECK(strcmp(dynattn_status_name(DYNATTN_STATUS_OUT_OF_MEMORY), "OUT_OF_MEMORY") == 0);
  CHECK(strcmp(dynattn_status_name((dynattn_status_t)77), "UNKNOWN") == 0);
  CHECK(dynattn_half_to_float(dynattn_float_to_half(1.5f)) == 1.5f);
}

/* Engines' paged caches: the C mirror of the block cache, and its errors. */
static void test_paged_block_cache(void) {
  enum { PAGES = 6, PAGE = 4, HKV = 2, D = 16 };
  static uint16_t key[PAGES * PAGE * HKV * D], value[PAGES * PAGE * HKV * D];
  const dynattn_tensor_t k = dense(key, DYNATTN_DTYPE_F16, 4, SHAPE(PAGES, PAGE, HKV, D));
  const dynattn_tensor_t v = dense(value, DYNATTN_DTYPE_F16, 4, SHAPE(PAGES, PAGE, HKV, D));
  dynattn_cache_format_t format = {0, 8};
  dynattn_block_cache_t cache;
  CHECK_OK(
      dynattn_make_paged_block_cache(&k, &v, NULL, NULL, DYNATTN_PAGE_LAYOUT_NHD, &format, &cache));
  CHECK(cache.block_size == PAGE && cache.num_blocks == PAGES && cache.cache.num_slots > 0);
  CHECK(cache.cache.elem == DYNATTN_CACHE_ELEM_F16 && cache.cache.device == DYNATTN_DEVICE_CPU);
  CHECK(cache.cache.key.data == key && cache.cache.value.data == value);
  CHECK(cache.cache.num_kv_heads == HKV && cache.cache.head_dim == D);
  CHECK(cache.cache.key.slot_stride == HKV * D && cache.cache.key.head_stride == D);
  /* The same memory read head-major: (PAGES, HKV, PAGE, D). */
  const dynattn_tensor_t k_hnd = dense(key, DYNATTN_DTYPE_F16, 4, SHAPE(PAGES, HKV, PAGE, D));
  const dynattn_tensor_t v_hnd = dense(value, DYNATTN_DTYPE_F16, 4, SHAPE(PAGES, HKV, PAGE, D));
  CHECK_OK(dynattn_make_paged_block_cache(&k_hnd, &v_hnd, NULL, NULL, DYNATTN_PAGE_LAYOUT_HND,
                                          &format, &cache));
  CHECK(cache.block_size == PAGE && cache.cache.num_kv_heads == HKV);
  CHECK(cache.cache.key.slot_stride == D && cache.cache.key.head_stride == PAGE * D);
  memset(&cache, 0x5A, sizeof cache);
  CHECK_ERROR(
      dynattn_make_paged_block_cache(&k, &v, NULL, NULL, (dynattn_page_layout_t)7, &format, &cache),
      DYNATTN_STATUS_INVALID_ARGUMENT, "layout: unknown dynattn_page_layout_t value 7");
  format.quant_bit = 8; /* needs int8 pages */
  CHECK_ERROR(
      dynattn_make_paged_block_cache(&k, &v, NULL, NULL, DYNATTN_PAGE_LAYOUT_NHD, &format, &cache),
      DYNATTN_STATUS_INVALID_ARGUMENT, "key: must be int8");
  CHECK_ERROR(dynattn_make_paged_block_cache(&k, NULL, NULL, NULL, DYNATTN_PAGE_LAYOUT_NHD, &format,
                                             &cache),
              DYNATTN_STATUS_INVALID_ARGUMENT, "value: must not be null");
  CHECK(all_bytes(&cache, 0x5A, sizeof cache));
}

/* The last error is per thread: another thread's failure does not replace this thread's. */
static int fail_in_thread(void* message_copy) {
  dynattn_plan_create(NULL);
  strncpy(message_copy, dynattn_last_error_message(), 127);
  return 0;
}

static void test_last_error_is_per_thread(void) {
  char other[128] = {0};
  thrd_t thread;
  CHECK_ERROR(dynattn_context_num_threads(NULL, NULL), DYNATTN_STATUS_INVALID_ARGUMENT, "context");
  CHECK(thrd_create(&thread, fail_in_thread, other) == thrd_success);
  CHECK(thrd_join(thread, NULL) == thrd_success);
  CHECK(strstr(other, "out: must not be null") != NULL);
  CHECK(strstr(dynattn_last_error_message(), "context: must not be null") != NULL);
}

int main(void) {
  const char* env = getenv("DYNATTN_TEST_SEED");
  g_seed = env != NULL ? strtoull(env, NULL, 10) : (unsigned long long)time(NULL);
  g_state = g_seed;
  printf("c_api: base seed %llu (DYNATTN_TEST_SEED=%llu replays it), target %s\n", g_seed, g_seed,
         dynattn_cpu_target_name());
  for (int round = 0; round < 4; ++round) {
    test_mhca_bitwise();
    test_unified_bitwise();
    test_merge_states();
  }
  test_new_field_defaults();
  test_variants_bitwise();
  test_new_inputs_refused();
  test_plans();
  test_invalid_inputs();
  test_null_handles_and_helpers();
  test_paged_block_cache();
  test_last_error_is_per_thread();
  printf("c_api: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

/* Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
 *
 * The C API test's cases as raw arrays, and the same calls made through the C++ API
 * (c_api_test_cpp.cc), so that c_api_test.c can compare the C API's results with them bit for bit.
 * C11 and C++17.
 */

#ifndef DYNATTN_TESTS_C_API_TEST_CPP_H_
#define DYNATTN_TESTS_C_API_TEST_CPP_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CAPI_MAX_BATCH 8
#define CAPI_MAX_BLOCKS 8
#define CAPI_MAX_HEADS 16

/** What a case adds to the fp16 / int8 default (all zero: nothing). */
typedef struct capi_variant {
  int bf16;  /**< Activations bf16 (else fp16). */
  int fp8;   /**< Cache: 0 int8 with fp16 scales; 1 float8_e4m3fn, 2 float8_e5m2 (no scales). */
  int score; /**< window_left, logits_soft_cap, softmax_scale and sinks are used. */
  int window_left;
  float logits_soft_cap, softmax_scale;
  float sinks[CAPI_MAX_HEADS];
  float k_scale, v_scale; /**< fp8 caches: passed as the 0-d k_scale / v_scale inputs. */
} capi_variant;

/** One MultiHeadCacheAttention step, fp16 in and out, int8 PMX cache (layout 0, one layer, fp16
 *  scales): cache (num_slots, 1, 2, Hkv, D), scale (num_slots, 1, 2, Hkv, D / quant_group); or
 *  as `v` says (bf16, an fp8 cache whose scale is unused, the score attributes). */
typedef struct capi_mhca_case {
  capi_variant v;
  int num_heads, num_kv_heads, head_dim, quant_group;
  int64_t batch, num_tokens, num_slots;
  int64_t seqstarts[CAPI_MAX_BATCH + 1], kvstarts[CAPI_MAX_BATCH + 1];
  int64_t cachestarts[CAPI_MAX_BATCH], start_pos[CAPI_MAX_BATCH];
  int64_t decoding_batches, max_seqlen, max_kvlen;
  uint16_t *query, *current_key, *current_value; /* (T, Hq|Hkv, D) */
  int8_t* cache;
  uint16_t* scale;
  uint16_t* out; /* (T, Hq, D) */
} capi_mhca_case;

/** One unified step, fp16 in and out, over the int8 PMX cache (num_blocks * block_size, 1, 2,
 *  Hkv, D) with fp16 scales, addressed as blocks of block_size tokens; or as `v` says. */
typedef struct capi_unified_case {
  capi_variant v;
  int num_heads, num_kv_heads, head_dim, quant_group, block_size;
  int64_t batch, num_tokens, num_blocks, max_blocks;
  int64_t query_start_loc[CAPI_MAX_BATCH + 1], context_lens[CAPI_MAX_BATCH];
  int64_t block_table[CAPI_MAX_BATCH * CAPI_MAX_BLOCKS]; /* (batch, max_blocks) */
  uint16_t *query, *current_key, *current_value;
  int8_t* cache;
  uint16_t* scale;
  uint16_t* out; /* (T, Hq, D) */
  float* lse;    /* (T, Hq) */
} capi_unified_case;

/** dynattn::MultiHeadCacheAttention on the case; 0 on success, else prints the message. */
int capi_cpp_mhca(const capi_mhca_case* c);
/** dynattn::KeyValueCache on the case's new tokens, cache and scales (num_repeat 1): gathers
 *  every context into key and value, (kvstarts[batch], Hkv, D) fp16 each; 0 on success. */
int capi_cpp_kvc(const capi_mhca_case* c, uint16_t* key, uint16_t* value);
/** dynattn::MultiHeadAttention of the case's query over key and value as capi_cpp_kvc gives
 *  them, into c->out; 0 on success. */
int capi_cpp_mha(const capi_mhca_case* c, const uint16_t* key, const uint16_t* value);
/** dynattn::UnifiedAttention on the case (lse too); 0 on success. */
int capi_cpp_unified(const capi_unified_case* c);
/** dynattn::MergeStates, normalised form: K parts of (T, H, D); 0 on success. */
int capi_cpp_merge(int k, int t, int h, int d, const float* out, const float* lse,
                   float* merged_out, float* merged_lse);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DYNATTN_TESTS_C_API_TEST_CPP_H_ */

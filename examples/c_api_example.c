/* Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
 * The README's C API example: plan one step, run it on two layers (run by the test suite). */
#include <stdio.h>

#include "dynattn/c_api.h"

#define TRY(call)                                                       \
  do {                                                                  \
    if ((call) != DYNATTN_STATUS_OK) {                                  \
      fprintf(stderr, "%s: %s\n", #call, dynattn_last_error_message()); \
      return 1;                                                         \
    }                                                                   \
  } while (0)

enum { T = 4, HQ = 8, HKV = 2, D = 64, SLOTS = 128 }; /* 4 new tokens, PMX cache of 128 slots */
static float q[2][T * HQ * D], k[2][T * HKV * D], v[2][T * HKV * D], out[2][T * HQ * D];
static float cache[2][SLOTS * 2 * HKV * D]; /* per layer: (SLOTS, 1, 2, HKV, D), layout 0 */

int main(void) {
  /* One step: request 0 decodes (4 cached tokens + 1 new), request 1 is a 3-token prompt. */
  int64_t seqstarts[] = {0, 1, 4}, kvstarts[] = {0, 5, 8}, start_pos[] = {4, 0};
  int64_t cachestarts[] = {0, 64}, decoding = 1, max_seqlen = 3, max_kvlen = 5;
  const int64_t q_shape[] = {T, HQ, D}, kv_shape[] = {T, HKV, D};
  const int64_t cache_shape[] = {SLOTS, 1, 2, HKV, D}, b1[] = {3}, b[] = {2};
  for (int i = 0; i < T * HQ * D; ++i) q[0][i] = q[1][i] = (float)(i % 7) / 7;
  for (int i = 0; i < T * HKV * D; ++i) k[1][i] = v[1][i] = 1 + (float)(i % 5) / 5;

  dynattn_multi_head_cache_attention_attrs_t attrs;
  TRY(dynattn_multi_head_cache_attention_attrs_init(&attrs)); /* causal, fp32 cache, mode 0 */
  attrs.attention.num_heads = HQ;
  attrs.attention.num_kv_heads = HKV;
  attrs.attention.head_dim = D;
  dynattn_multi_head_cache_attention_args_t a[2];
  for (int l = 0; l < 2; ++l) { /* layers share the step's index tensors */
    const dynattn_device_t cpu = DYNATTN_DEVICE_CPU;
    TRY(dynattn_multi_head_cache_attention_args_init(&a[l])); /* every tensor absent */
    TRY(dynattn_tensor_dense(q[l], DYNATTN_DTYPE_F32, 3, q_shape, cpu, &a[l].query));
    TRY(dynattn_tensor_dense(k[l], DYNATTN_DTYPE_F32, 3, kv_shape, cpu, &a[l].current_key));
    TRY(dynattn_tensor_dense(v[l], DYNATTN_DTYPE_F32, 3, kv_shape, cpu, &a[l].current_value));
    TRY(dynattn_tensor_dense(seqstarts, DYNATTN_DTYPE_I64, 1, b1, cpu, &a[l].seqstarts));
    TRY(dynattn_tensor_dense(kvstarts, DYNATTN_DTYPE_I64, 1, b1, cpu, &a[l].kvstarts));
    TRY(dynattn_tensor_dense(cachestarts, DYNATTN_DTYPE_I64, 1, b, cpu, &a[l].cachestarts));
    TRY(dynattn_tensor_dense(start_pos, DYNATTN_DTYPE_I64, 1, b, cpu, &a[l].start_pos));
    TRY(dynattn_tensor_dense(&decoding, DYNATTN_DTYPE_I64, 0, NULL, cpu, &a[l].decoding_batches));
    TRY(dynattn_tensor_dense(&max_seqlen, DYNATTN_DTYPE_I64, 0, NULL, cpu, &a[l].max_seqlen));
    TRY(dynattn_tensor_dense(&max_kvlen, DYNATTN_DTYPE_I64, 0, NULL, cpu, &a[l].max_kvlen));
    TRY(dynattn_tensor_dense(cache[l], DYNATTN_DTYPE_F32, 5, cache_shape, cpu, &a[l].cache));
    TRY(dynattn_tensor_dense(out[l], DYNATTN_DTYPE_F32, 3, q_shape, cpu, &a[l].attn_output));
  }

  dynattn_context_t* context = NULL; /* once: threads, scratch, workspace */
  dynattn_plan_t* plan = NULL;       /* per step: validated inputs, the work plan */
  TRY(dynattn_context_create(NULL, &context));
  TRY(dynattn_plan_create(&plan));
  TRY(dynattn_plan_multi_head_cache_attention(&attrs, &a[0], plan));
  for (int l = 0; l < 2; ++l) TRY(dynattn_run_multi_head_cache_attention(plan, &a[l], context));
  printf("c_api_example: ok on %s, out[1][0] = %g\n", dynattn_cpu_target_name(), out[1][0]);

  cachestarts[1] = 126; /* a broken input names itself and the rule */
  dynattn_status_t s = dynattn_plan_multi_head_cache_attention(&attrs, &a[0], plan);
  printf("c_api_example: %s: %s\n", dynattn_status_name(s), dynattn_last_error_message());
  dynattn_plan_destroy(plan);
  dynattn_context_destroy(context);
  return s == DYNATTN_STATUS_INVALID_ARGUMENT ? 0 : 1;
}

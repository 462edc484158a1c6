import torch

import dynattn

# A paged fp16 cache owned by the engine: [num_blocks, block_size, num_kv_heads, head_dim].
key_cache = torch.zeros(64, 16, 2, 64, dtype=torch.float16)
value_cache = torch.zeros_like(key_cache)
cache = dynattn.paged_block_cache(key_cache, value_cache)  # used in place, never copied

# One step: request 0 decodes after 20 cached tokens, request 1 is a 5-token prompt.
query_start_loc = torch.tensor([0, 1, 6], dtype=torch.int32)
context_lens = torch.tensor([20, 0], dtype=torch.int32)
block_table = torch.tensor([[3, 7], [9, 0]], dtype=torch.int32)
q = torch.randn(6, 8, 64, dtype=torch.float16)  # (T, Hq, D): 8 query heads, GQA over 2
k, v = torch.randn(6, 2, 64, dtype=torch.float16), torch.randn(6, 2, 64, dtype=torch.float16)

out = dynattn.unified_attention(q, k, v, query_start_loc, context_lens, block_table, cache)

# Plan once per step, run per layer (same shapes, any data), in a Context of your own.
plan = dynattn.plan_unified_attention(q, k, v, query_start_loc, context_lens, block_table, cache)
context = dynattn.Context(num_threads=0)
for layer in range(2):
    layer_out = plan.run(q, k, v, cache, context=context)
assert torch.equal(layer_out, out)  # the same bits as the one-shot call

# Layers may differ in window, soft-cap, scale and sinks (gpt-oss, Gemma): the same plan runs them.
sinks = torch.full((8,), 0.5)  # this layer's learned sinks: float32, one per query head
local = plan.run(q, k, v, cache, context=context, window_left=3, sinks=sinks)
assert torch.equal(local, dynattn.unified_attention(q, k, v, query_start_loc, context_lens,
                                                    block_table, cache, window_left=3, sinks=sinks))

# vLLM's CPU backend keeps one tensor [2, num_blocks, Hkv, block_size, D] whose keys are
# dimension-major inside a block ([D, block_size]): read and written in place, as vLLM lays it out.
vllm_kv = torch.stack([key_cache.permute(0, 2, 3, 1).reshape(64, 2, 16, 64),
                       value_cache.permute(0, 2, 1, 3)])
vllm_out = dynattn.unified_attention(q, k, v, query_start_loc, context_lens, block_table,
                                     dynattn.vllm_cpu_block_cache(vllm_kv))
assert torch.equal(vllm_out, out)  # the same values in vLLM's layout: the same bits
print(f"dynattn {dynattn.__version__} ({dynattn.cpu_target()}): {plan.backend}, "
      f"{plan.unified_summary.phase}, out {tuple(out.shape)} {out.dtype}")

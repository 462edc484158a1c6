#!/usr/bin/env python3
# The peer of the device kit's timings: PyTorch's scaled_dot_product_attention on the shapes that
# dynattn_device_bench times, with contiguous K/V (its best case: no paging, no quantization), timed
# with CUDA events, median of --iters calls after --warmup. Quantized-cache rows run the peer in
# fp16 (what the cache holds once dequantized). Prints JSON; exits 77 without torch or a GPU.
import argparse
import json
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as error:
    print(f"sdpa_peer: no PyTorch ({error})", file=sys.stderr)
    sys.exit(77)

HQ, HKV, D = 32, 8, 128  # the library's benchmark steps: 32 query heads, 8 KV heads, D = 128


def sdpa(q, k, v, causal):
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    except TypeError:  # torch before 2.5: no enable_gqa, expand the KV heads
        r = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1),
                                              v.repeat_interleave(r, 1), is_causal=causal)


def case(batch, queries, keys, dtype, causal):
    g = torch.Generator(device="cuda").manual_seed(2026)
    q = torch.randn(batch, HQ, queries, D, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(batch, HKV, keys, D, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(batch, HKV, keys, D, device="cuda", dtype=dtype, generator=g)
    return lambda: sdpa(q, k, v, causal)


def time_ms(call, warmup, iters):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop))
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_peer: torch sees no CUDA device", file=sys.stderr)
        sys.exit(77)
    f16, bf16 = torch.float16, torch.bfloat16
    # name (as dynattn_device_bench names its rows): (batch, queries, keys, dtype, causal, note)
    shapes = {
        "decode_8x4096_f16": (8, 1, 4096, f16, False, "fp16"),
        "decode_8x4096_bf16": (8, 1, 4096, bf16, False, "bf16"),
        "decode_8x4096_int8": (8, 1, 4096, f16, False, "fp16 K/V (no int8 SDPA)"),
        "decode_8x4096_fp8e4m3": (8, 1, 4096, f16, False, "fp16 K/V (no fp8 SDPA)"),
        "decode_1x131072_f16": (1, 1, 131072, f16, False, "fp16"),
        "prefill_512_causal_f16": (1, 512, 512, f16, True, "fp16, is_causal"),
        # 64 decodes over 2048 shared + 256 own tokens: the peer reads the prefix once per request.
        "unified_shared_prefix_64x2048+256_f16": (64, 1, 2305, f16, False,
                                                   "fp16, prefix copied per request"),
    }
    rows = {}
    for name, (batch, queries, keys, dtype, causal, note) in shapes.items():
        ms = time_ms(case(batch, queries, keys, dtype, causal), args.warmup, args.iters)
        rows[name] = {"median_ms": ms, "peer": note}
        print(f"{name:40s} {ms:9.4f} ms  torch SDPA ({note})", file=sys.stderr)
    print(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

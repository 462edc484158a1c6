#!/usr/bin/python3
"""Continuous-batching Llama/DeepSeek serving demo on libdynattn's unified attention.

    /usr/bin/python3 examples/serve/serve.py [--checkpoint DIR] [--model llama|deepseek]
                                             [--cache fp16|int8|fp8] [--check]
                                             [--tensor-parallel N | --context-parallel N]

Without --checkpoint it writes a small random Llama (or, with --model deepseek, DeepSeek-V3-style
MLA) checkpoint (config.json, safetensors, SentencePiece tokenizer.model) into a temporary
directory and serves a scripted workload:
requests arriving at different steps, a system prompt shared by all of them, long prompts
prefilled in chunks mixed with decodes, and different output lengths. --check runs a pure-torch
reference (float32 cache; for MLA the non-absorbed model on torch's scaled_dot_product_attention)
in lockstep and compares logits and greedy tokens. --tensor-parallel N
serves the same workload on N processes (torch.distributed, gloo), each with its share of the
heads, the MLP and the KV cache; --context-parallel N on N processes that each hold a contiguous
share of every request's context; either is checked against the single-process run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

import sentencepiece as spm
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import deepseek  # noqa: E402
import llama  # noqa: E402
import tiny_checkpoint  # noqa: E402
import distributed  # noqa: E402
import torch_unified  # noqa: E402
from batching import Request, Scheduler  # noqa: E402
from engine import Engine, EngineStats, UnifiedBackend  # noqa: E402
from paged_kv import BlockAllocator, CacheSpec  # noqa: E402

# Logit tolerance of the fp16-cache check: |engine - reference| <= ATOL + RTOL * |reference|.
# Both sides hold the same fp16-rounded K/V; what remains is fp32 attention arithmetic
# (docs/numerics.md: fp32 accumulation, within 1e-5*max(1, vmax) of float64) carried through
# the layers, so 1e-2 is far above what is seen and far below the gaps greedy sampling needs.
FP16_RTOL = 1e-2
FP16_ATOL = 1e-2

# Logit tolerance of the MLA check, by latent cache format: |engine - reference| <= tol +
# tol*|reference|. The reference rounds its latent rows as the cache stores them, so both sides
# attend over the same values; what differs is (1) float32 arithmetic: the absorbed and the
# expanded form associate their products differently, and the library's fp32 attention output is
# within 1e-5*max(1, vmax) of exact (docs/numerics.md; vmax < 10 for these RMS-normed latents),
# which reaches the logits through W_UV and o_proj (gain ~1 with 1/sqrt(fan_in) weights), the
# residual stream and the lm_head (gain 4): at most ~4 * layers * 1e-4 = 1.6e-3 for 4 layers; and
# (2) rounding-boundary flips: from layer 1 on the two sides' latent rows differ by (1), so an
# element that close to a rounding boundary lands on neighbouring codes, one step apart: 2^-11
# of it in fp16 (below (1)), but 1/127 of its group's max in int8 and up to 1/8 of it in fp8,
# which moves one key's score by up to |q| * 0.06 / sqrt(48) ~ 0.03 (1e-3 to 1.6e-3 seen). With
# fp16 activations (--attn-dtype float16) the absorbed queries and outputs are rounded to fp16,
# which the reference has no counterpart for: the check is then reported, not asserted.
MLA_TOLERANCE = {"fp16": 2e-3, "int8": 1e-2, "fp8": 1e-2}


def check_tolerance(spec: CacheSpec) -> Tuple[float, float]:
    """(atol, rtol) of the lockstep check over a cache of ``spec``."""
    if spec.kv_lora_rank:
        return MLA_TOLERANCE[spec.dtype], MLA_TOLERANCE[spec.dtype]
    return FP16_ATOL, FP16_RTOL


SYSTEM_PROMPT = ("You are the serving engine of a small model. Every request shares this "
                 "system prompt, so its blocks are computed once and reused. Answer briefly, "
                 "read the keys, write the values, and free every block when you are done.")


def load_attention_lib(choice: str):
    """The ``dynattn`` module (built package) or the torch stand-in."""
    if choice in ("auto", "dynattn"):
        try:
            import dynattn  # type: ignore
            return dynattn
        except ImportError as e:
            if choice == "dynattn":
                raise SystemExit(f"cannot import dynattn ({e}); set PYTHONPATH to its build")
    return torch_unified


def make_workload(sp: spm.SentencePieceProcessor, num_requests: int, seed: int,
                  max_new_tokens: int, bos_id: int, eos_id: Optional[int]) -> List[Request]:
    """Scripted requests: shared system prompt + a user part of varied length (one long one),
    arriving at increasing steps with varied output lengths."""
    rng = random.Random(seed)
    lines = tiny_checkpoint.corpus(num_lines=200, seed=seed + 1)
    system = [bos_id] + sp.encode(SYSTEM_PROMPT)
    requests = []
    step = 0
    for i in range(num_requests):
        n_lines = 24 if i == 1 else rng.randint(1, 8)  # request 1 is long: chunked prefill
        user = sp.encode(" ".join(rng.sample(lines, n_lines)))
        new = rng.randint(max(1, max_new_tokens // 4), max_new_tokens)
        requests.append(Request(rid=i, prompt=system + user, max_new_tokens=new,
                                arrival_step=step, eos_id=eos_id))
        step += rng.choice([0, 1, 2, 3, 5])
    return requests


def is_mla(model) -> bool:
    """Whether ``model`` is the DeepSeek-style one (multi-head latent attention)."""
    return isinstance(model, deepseek.DeepseekModel)


def build_engine(model, lib, args, backend=UnifiedBackend,
                 **backend_options) -> Tuple[Engine, CacheSpec]:
    """Allocator, scheduler, primary backend (`backend`, given `backend_options`) and (with
    --check) the torch reference. An MLA model's cache is one latent plane per layer."""
    cfg = model.config
    heads, dim, rank = (1, cfg.latent_dim, cfg.kv_lora_rank) if is_mla(model) else (
        cfg.num_key_value_heads, cfg.head_dim, 0)
    spec = CacheSpec(num_layers=cfg.num_hidden_layers, num_blocks=args.num_blocks,
                     block_size=args.block_size, num_kv_heads=heads, head_dim=dim,
                     dtype=args.cache, quant_group=args.quant_group, kv_lora_rank=rank)
    attn_dtype = torch.float16 if args.attn_dtype == "float16" else torch.float32
    context = lib.Context(num_threads=args.threads)
    if is_mla(model):
        backend_options.setdefault("softmax_scale", cfg.softmax_scale)
    primary = backend(getattr(lib, "__name__", "lib"), lib, spec, attn_dtype, context=context,
                      **backend_options)
    reference, reference_model = None, None
    if args.check and is_mla(model):
        # The non-absorbed model on torch's attention, its latent rounded as the cache rounds it.
        reference = deepseek.SdpaBackend(spec, cfg)
        reference_model = model.non_absorbed(deepseek.latent_rounding(spec, attn_dtype))
    elif args.check:
        ref_spec = CacheSpec(**{**spec.__dict__, "dtype": "fp32"})
        # fp16 cache: the reference stores the same fp16-rounded K/V in float32. int8: it keeps
        # the unquantized values, so the comparison shows the quantization error.
        round_kv = torch.float16 if args.cache == "fp16" else None
        reference = UnifiedBackend("torch reference", torch_unified, ref_spec, torch.float32,
                                   round_kv=round_kv)
    scheduler = Scheduler(BlockAllocator(args.num_blocks, args.block_size), args.token_budget,
                          prefix_sharing=not args.no_prefix_sharing)
    atol, rtol = check_tolerance(spec)
    engine = Engine(model, scheduler, primary, reference, rtol=rtol, atol=atol,
                    reference_model=reference_model)
    return engine, spec


# Logit tolerance of --tensor-parallel and --context-parallel against the single process: the
# ranks' all-reduces sum the output projection's and the MLP's partial products in another order
# than one matmul does, and a merge of attention shards rounds differently from one softmax; either
# moves float32 hidden states by a few ulps per layer (seen: up to about 1e-4 on the random
# checkpoint's logits); greedy tokens must be identical.
TP_RTOL = 1e-3
TP_ATOL = 1e-3


def parallel_kind(args) -> Tuple[str, int]:
    """("tensor", N), ("context", N) or ("", 1)."""
    if args.tensor_parallel > 1:
        return "tensor", args.tensor_parallel
    if args.context_parallel > 1:
        return "context", args.context_parallel
    return "", 1


def rank_engine(model, rank: int, world: int, args) -> Tuple[Engine, CacheSpec]:
    """A rank's engine (module level: the spawned ranks import it). Its share of the machine's
    cores runs its attention; a context-parallel rank attends over its share of each context."""
    lib = load_attention_lib(args.backend)
    rank_args = copy.copy(args)
    rank_args.check = False
    if rank_args.threads == 0:
        rank_args.threads = max(1, (os.cpu_count() or 1) // world)
    if args.context_parallel > 1:
        return build_engine(model, lib, rank_args, distributed.ContextShardBackend, rank=rank,
                            world=world, chunk=args.cp_chunk)
    return build_engine(model, lib, rank_args)


def check_parallel(args, directory: str, fresh: List[Request], served: List[Request],
                   single: Engine, single_seconds: float) -> bool:
    """Serves `fresh` (copies of the workload before it ran) on the ranks of --tensor-parallel or
    --context-parallel and compares them with the single-process run `single` of `served` (its
    logits recorded): identical greedy tokens on every rank, logits within TP_ATOL + TP_RTOL *
    |single|. Prints each rank's step time and its time in collectives."""
    kind, world = parallel_kind(args)
    reports = distributed.run(world, directory, fresh, rank_engine, args)
    want = {q.rid: list(q.output) for q in served}
    same_tokens = all(r["outputs"] == want for r in reports)
    worst = 0.0
    for got, want in zip(reports[0]["logits"], single.logits):
        got = torch.from_numpy(got)
        if want.numel() == 0:  # a step that sampled nothing (prefill chunks only)
            continue
        worst = max(worst, float(((got - want).abs() / (TP_ATOL + TP_RTOL * want.abs())).max()))
    steps = single.stats.steps
    collective = "all-reduce" if kind == "tensor" else "all-gather"
    print(f"{kind} parallel: {world} ranks (gloo over loopback), {steps} steps; single process "
          f"{1e3 * single_seconds / steps:.2f} ms/step")
    for r in reports:
        print(f"  rank {r['rank']}: {1e3 * r['wall_seconds'] / r['steps']:.2f} ms/step, "
              f"attention {1e3 * r['attention_seconds'] / r['steps']:.2f} ms/step, {collective} "
              f"{1e3 * r['comm_seconds'] / r['steps']:.2f} ms/step ({r['comm_calls']} calls, "
              f"{r['comm_bytes'] / max(1, r['comm_calls']) / 1024:.1f} KiB each on average)")
    ok = same_tokens and len(reports[0]["logits"]) == len(single.logits) and worst <= 1.0
    print(f"{kind}-parallel check (identical greedy tokens on every rank, |logit err| <= "
          f"{TP_ATOL} + {TP_RTOL}*|single|, worst {worst:.3f} of the bound): "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def report(stats: EngineStats, spec: CacheSpec, requests: List[Request], args,
           lib_name: str, phases: Dict[str, int]) -> bool:
    """Prints throughput, KV memory and the check; returns whether the check passed."""
    mib = 1024 * 1024
    bpb = spec.bytes_per_block()
    prompt_tokens = sum(len(r.prompt) for r in requests)
    print(f"attention: {lib_name}, cache {spec.dtype}, block_size {spec.block_size}, "
          f"token budget {args.token_budget}, {len(requests)} requests, {stats.steps} steps")
    print(f"throughput: {stats.step_tokens / stats.engine_seconds:.0f} tokens/s through the "
          f"model ({stats.step_tokens} tokens), {stats.generated_tokens / stats.engine_seconds:.0f}"
          f" generated tokens/s ({stats.generated_tokens} tokens) in {stats.engine_seconds:.2f} s"
          f" (attention library {stats.attention_seconds:.2f} s)")
    print(f"prefix sharing: {stats.prefix_hit_tokens} of {prompt_tokens} prompt tokens reused "
          f"from cached blocks (not recomputed)")
    print(f"KV memory: pool {spec.num_blocks} blocks x {bpb} bytes = "
          f"{spec.num_blocks * bpb / mib:.2f} MiB; peak {stats.peak_blocks} blocks in use = "
          f"{stats.peak_blocks * bpb / mib:.2f} MiB (without sharing {stats.peak_logical_blocks}"
          f" blocks = {stats.peak_logical_blocks * bpb / mib:.2f} MiB); sharing saves up to "
          f"{stats.max_saved_blocks} blocks = {stats.max_saved_blocks * bpb / mib:.2f} MiB")
    if stats.max_mixed_step:
        print(f"largest mixed step: {stats.max_mixed_step}")
    if phases:
        print("plan phases (c causal, s shared blocks, u unique blocks): "
              + ", ".join(f"{p} x{n}" for p, n in sorted(phases.items())))
    if not args.check:
        return True
    rate = stats.agreeing_rows / max(1, stats.compared_rows)
    # MLA: the reference rounds its latent rows as the cache does, so every format is checked.
    mla = spec.kv_lora_rank > 0
    reference = ("the non-absorbed model on torch's scaled_dot_product_attention (float64)"
                 if mla else "torch float32 reference")
    print(f"check vs {reference} ({stats.reference_seconds:.2f} s): "
          f"{stats.agreeing_rows}/{stats.compared_rows} greedy tokens agree ({100 * rate:.1f}%),"
          f" max |logit error| {stats.max_logit_error:.2e}")
    if (args.attn_dtype != "float32") if mla else (spec.dtype != "fp16"):
        return True
    ok = stats.agreeing_rows == stats.compared_rows and stats.max_logit_violation <= 1.0
    label = f"{spec.dtype} latent cache" if mla else "fp16"
    atol, rtol = check_tolerance(spec)
    print(f"{label} check (identical greedy tokens, |err| <= {atol} + {rtol}*|ref|): "
          f"{'PASS' if ok else 'FAIL'}")
    return ok


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", help="Llama or DeepSeek checkpoint directory (default: a "
                   "random one); its config's model_type selects the model")
    p.add_argument("--model", choices=["llama", "deepseek"],
                   help="the random checkpoint's architecture (default llama); deepseek: "
                        "multi-head latent attention over a latent cache")
    p.add_argument("--cache", choices=["fp16", "int8", "fp8"], default="fp16",
                   help="cache elements (fp8: e4m3 with scale 1.0, dynattn only)")
    p.add_argument("--check", action="store_true", help="compare with a torch reference")
    p.add_argument("--backend", choices=["auto", "dynattn", "torch"], default="auto",
                   help="attention library (auto: dynattn if importable, else torch stand-in)")
    p.add_argument("--attn-dtype", choices=["float32", "float16"], default="float32",
                   help="dtype of query/key/value handed to the attention library")
    p.add_argument("--num-requests", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int, default=256)
    p.add_argument("--token-budget", type=int, default=64, help="tokens per step")
    p.add_argument("--quant-group", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="attention threads (0: all)")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op threads for the model's matmuls (1: its small "
                        "matmuls gain nothing from more, and idle torch threads spinning "
                        "slow down the attention library's)")
    p.add_argument("--no-prefix-sharing", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", type=int, default=3, help="print this many decoded outputs")
    p.add_argument("--tensor-parallel", type=int, default=1, metavar="N",
                   help="also serve on N processes (torch.distributed, gloo), each with its share "
                        "of the heads, and check them against the single-process run")
    p.add_argument("--context-parallel", type=int, default=1, metavar="N",
                   help="also serve on N processes, each with its share of every request's "
                        "context, and check them against the single-process run")
    p.add_argument("--cp-chunk", type=int, default=64,
                   help="--context-parallel: rank r holds positions [r*C, (r+1)*C) of each "
                        "request, the last rank the rest (a multiple of --block-size)")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(max(1, args.torch_threads))
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.checkpoint
        if directory is None:
            if args.model == "deepseek":
                directory = os.path.join(tmp, "tiny-deepseek")
                tiny_checkpoint.make_tiny_mla_checkpoint(directory, seed=args.seed)
            else:
                directory = os.path.join(tmp, "tiny-llama")
                tiny_checkpoint.make_tiny_checkpoint(directory, seed=args.seed)
            print(f"random checkpoint written to {directory}")
        return serve(args, directory)


def load_model(directory: str, expected: Optional[str] = None):
    """The checkpoint's model, by its config's model_type: a DeepseekModel for deepseek_v2/v3,
    else a LlamaModel. ``expected`` ("llama" or "deepseek", from --model) must agree."""
    with open(os.path.join(directory, "config.json")) as f:
        model_type = json.load(f).get("model_type")
    kind = "deepseek" if model_type in deepseek.MODEL_TYPES else "llama"
    if expected is not None and expected != kind:
        raise SystemExit(f"--model {expected}, but {directory} holds a {model_type} model")
    return deepseek.load_model(directory) if kind == "deepseek" else llama.load_model(directory)


def describe(model) -> str:
    """The report's line about the model's sizes."""
    cfg = model.config
    if is_mla(model):
        attention = (f"{cfg.num_attention_heads} heads, MLA (kv_lora_rank {cfg.kv_lora_rank}, "
                     f"rope {cfg.qk_rope_head_dim}, nope {cfg.qk_nope_head_dim}, v "
                     f"{cfg.v_head_dim}, q_lora_rank {cfg.q_lora_rank})")
    else:
        attention = (f"{cfg.num_attention_heads} heads / {cfg.num_key_value_heads} KV heads, "
                     f"head_dim {cfg.head_dim}")
    return (f"model: hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, {attention}, "
            f"vocab {cfg.vocab_size}")


def serve(args, directory: str) -> int:
    """Serves the workload with the checkpoint in `directory`; returns the exit status."""
    lib = load_attention_lib(args.backend)
    model = load_model(directory, args.model)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(directory, "tokenizer.model"))
    cfg = model.config
    print(describe(model))
    requests = make_workload(sp, args.num_requests, args.seed, args.max_new_tokens,
                             cfg.bos_token_id, cfg.eos_token_id)
    fresh = copy.deepcopy(requests)  # for the ranks of --tensor-parallel
    if args.tensor_parallel > 1 and args.context_parallel > 1:
        raise SystemExit("--tensor-parallel and --context-parallel: one at a time")
    if is_mla(model) and parallel_kind(args)[1] > 1:
        raise SystemExit("--tensor-parallel and --context-parallel serve Llama models only")
    if args.cache == "fp8" and lib is torch_unified:
        raise SystemExit("--cache fp8 needs dynattn (the torch stand-in has no fp8 cache)")
    engine, spec = build_engine(model, lib, args)
    engine.record_logits = parallel_kind(args)[1] > 1
    start = time.perf_counter()
    stats = engine.run(requests)
    single_seconds = time.perf_counter() - start
    for r in requests[:args.show]:
        print(f"request {r.rid} (prompt {len(r.prompt)}, steps {r.first_step}-{r.finish_step}):"
              f" {sp.decode(r.output)!r}")
    name = f"{getattr(lib, '__name__', 'lib')} {getattr(lib, '__version__', '')}".strip()
    ok = report(stats, spec, requests, args, name, engine.primary.phases)
    if parallel_kind(args)[1] > 1:
        ok = check_parallel(args, directory, fresh, requests, engine, single_seconds) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

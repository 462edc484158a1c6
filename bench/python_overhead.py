# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""What a Python call costs over the C++ one, in the same run on the same machine.

The tiny step of `dynattn bench --only overhead` (1 decode over 16 cached tokens, Hq 32, Hkv 8,
D 128, fp16 paged cache, one page of 128): `Plan.run` with `out=` and without it, and the
one-shot call, against `RunMultiHeadCacheAttention` timed by the C++ tool right after. Medians
of warm calls on one thread.

    PYTHONPATH=build/bindings/python python3 bench/python_overhead.py [--tool build/tools/dynattn]
"""

import argparse
import re
import subprocess
import time

import numpy as np
import torch

import dynattn

HEADS, KV_HEADS, DIM, PAGE = 32, 8, 128, 128


def median_us(call, count):
    for _ in range(200):
        call()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    times.sort()
    return 1e6 * times[len(times) // 2]


def tiny_step():
    q = torch.full((1, HEADS, DIM), 1.0, dtype=torch.float16)
    k = torch.full((1, KV_HEADS, DIM), 0.5, dtype=torch.float16)
    v = torch.full((1, KV_HEADS, DIM), 0.25, dtype=torch.float16)
    cache = torch.full((PAGE, 1, 2, KV_HEADS, DIM), 0.125, dtype=torch.float16)
    index = (np.array([0, 1]), np.array([0, 16]), np.array([[0]]), np.array([15]), 1, 1, 16)
    return q, k, v, cache, index


def c_run_us(tool):
    """The C++ Run of the same step, 1 thread, from `dynattn bench --only overhead`."""
    text = subprocess.run([tool, "bench", "--only", "overhead", "--threads", "1",
                           "--repetitions", "3"], check=True, capture_output=True,
                          text=True).stdout
    row = re.search(r"^\s+1\s+([\d.]+)\s+([\d.]+)", text, re.M)
    return float(row.group(1)), float(row.group(2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", default="build/tools/dynattn")
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds alternating the C++ and the Python timings (a shared "
                             "machine drifts; each round's gap compares neighbours)")
    args = parser.parse_args()
    q, k, v, cache, index = tiny_step()
    out = torch.empty_like(q)
    context = dynattn.Context(num_threads=1)
    plan = dynattn.plan_multi_head_cache_attention(q, k, v, *index, cache, cache_mode=1,
                                                   page_size=PAGE)
    rows = {"Plan.run(out=...) / Run": [], "Plan.run (allocates out) / Run": [],
            "one-shot call / one-shot": []}
    for _ in range(args.rounds):
        c_one_shot, c_run = c_run_us(args.tool)
        python = [median_us(lambda: plan.run(q, k, v, cache, out=out, context=context),
                            args.calls),
                  median_us(lambda: plan.run(q, k, v, cache, context=context), args.calls),
                  median_us(lambda: dynattn.multi_head_cache_attention(
                      q, k, v, *index, cache, cache_mode=1, page_size=PAGE, out=out,
                      num_threads=1), args.calls // 5)]
        for row, py, c in zip(rows.values(), python, (c_run, c_run, c_one_shot)):
            row.append((py, c))
    print("tiny step, 1 thread, medians (us); per round: Python, C++, Python - C++")
    for name, row in rows.items():
        rounds = "  ".join(f"{py:5.1f} {c:5.1f} {py - c:+5.1f}" for py, c in row)
        gaps = sorted(py - c for py, c in row)
        print(f"{name:32s} {rounds}   median gap {gaps[len(gaps) // 2]:+.1f}")


if __name__ == "__main__":
    main()

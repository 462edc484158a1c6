#!/usr/bin/env python3
# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""Breaks the CUDA kernels on purpose and reports which runs of the gpu suite catch each break.

Each mutation edits one cuda/ source in place (restored afterwards, also on Ctrl-C), rebuilds the
gpu suite's binaries in the given build folders and runs them on the CUDA emulator: forward,
reverse and random schedules, the ThreadSanitizer run (gpu_tsan_tests, when built) and, for a
sanitizer build folder, its ASan + UBSan binary. A run "catches" a mutation when it fails.

  python3 scripts/gpu_mutations.py [--builds build,build-sanitize] [--only NAME[,NAME]] [--list]
      [--test-case PATTERN] [--schedules forward,reverse,random]
(--test-case and --schedules narrow the runs, e.g. to the feature cases while iterating.)
"""

import argparse
import os
import pathlib
import signal
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# name: (file, text to find, replacement, what it breaks)
MUTATIONS = {
    "barrier-tile-consumed": (
        "cuda/attention.cu",
        "      // race). Kept because without it ptxas (CUDA 13.0) spills 28 B in the int4 kernel on sm_90.\n"
        "      __syncthreads();\n",
        "      // race). Kept because without it ptxas (CUDA 13.0) spills 28 B in the int4 kernel on sm_90.\n",
        "attend: the __syncthreads at the top of the tile loop"),
    "barrier-slots": (
        "cuda/attention.cu",
        "key0 + threadIdx.x);\n      }\n      __syncthreads();\n",
        "key0 + threadIdx.x);\n      }\n",
        "attend: the __syncthreads between the tile's slots and its decode"),
    "barrier-decoded": (
        "cuda/attention.cu",
        "        values[j * dim + d] = x;\n      }\n      __syncthreads();\n",
        "        values[j * dim + d] = x;\n      }\n",
        "attend: the __syncthreads between the decoded tile and its scoring"),
    "barrier-next-pass": (
        "cuda/attention.cu",
        "    __syncthreads();  // the next pass reuses the vectors' storage\n", "",
        "attend: the __syncthreads before the next pass of query vectors"),
    "syncwarp-probs": (
        "cuda/attention.cu",
        "        __syncwarp();  // probs are written; every lane has also read maxes[v]\n", "",
        "attend: the __syncwarp between writing probs and reading them"),
    "syncwarp-updated": (
        "cuda/attention.cu",
        "        __syncwarp();  // every lane has read probs before the next vector rewrites them\n",
        "",
        "attend: the __syncwarp between reading probs and the next vector's writes"),
    "syncwarp-before-store": (
        "cuda/attention.cu",
        "    __syncwarp();  // lane 0's maxes/sums, also when the pass had no key tile (only resets)\n",
        "",
        "attend: the __syncwarp before a pass's states are stored"),
    "shuffle-sum-offset": (
        "cuda/attention.cu",
        "for (int o = 16; o > 0; o /= 2) x += ", "for (int o = 8; o > 0; o /= 2) x += ",
        "WarpSum starts at offset 8: sums over half warps"),
    "shuffle-max-down": (
        "cuda/attention.cu",
        "x = fmaxf(x, __shfl_xor_sync(kFullMask, x, o));",
        "x = fmaxf(x, __shfl_down_sync(kFullMask, x, o));",
        "WarpMax shuffles down instead of xor: upper lanes miss the maximum"),
    "tile-count-plus-one": (
        "cuda/attention.cu",
        "key_end - key0));", "key_end - key0 + 1));",
        "attend: a tile counts one key past the pass's end"),
    "tile-loop-short": (
        "cuda/attention.cu",
        "key0 < key_end; key0 += tile_keys)", "key0 < key_end - 1; key0 += tile_keys)",
        "attend: the tile loop stops before a last tile of one key"),
    "window-first-key-ignored": (
        "cuda/attention.cu",
        "key >= r.first_key && key <= r.last_key", "key <= r.last_key",
        "attend: keys before a row's sliding window are scored"),
    "window-off-by-one": (
        "cuda/attention.cu",
        "  r.first_key = p.FirstVisibleKey(b, row);\n",
        "  r.first_key = p.FirstVisibleKey(b, row) + 1;\n",
        "attend: a request row's window starts one key late"),
    "window-shared-ignored": (
        "cuda/attention.cu",
        "  r.first_key = AttentionProblem::WindowStart(reader.origin, p.window_left);\n",
        "  r.first_key = 0;\n",
        "attend: shared-segment readers ignore the window"),
    "pass-keys-skip-tile": (
        "cuda/attention.cu",
        "(lo - item_begin) / tile_keys * tile_keys : 0;",
        "(lo - item_begin + tile_keys - 1) / tile_keys * tile_keys : 0;",
        "attend: a pass skips the tile holding its first visible key"),
    "pass-keys-end-short": (
        "cuda/attention.cu",
        "return KeyRange{item_begin + skipped, hi + 1 < item_end ? hi + 1 : item_end};",
        "return KeyRange{item_begin + skipped, hi < item_end ? hi : item_end};",
        "attend: a pass stops before its last visible key"),
    "softcap-ignored": (
        "cuda/attention.cu",
        "  if (!(p.soft_cap > 0.0f)) return s0;\n", "  return s0;\n",
        "attend: the logit soft-cap is not applied"),
    "softcap-unscaled": (
        "cuda/attention.cu",
        "tanhf(DivRn(s0, p.soft_cap))", "tanhf(s0)",
        "attend: soft-cap as cap * tanh(s0) instead of cap * tanh(s0 / cap)"),
    "sink-ignored": (
        "cuda/attention.cu",
        "  if (p.sinks != nullptr) {\n    const internal::SinkFolded",
        "  if (false) {\n    const internal::SinkFolded",
        "StoreRow: the attention sink is not folded"),
    "sink-lse-unfolded": (
        "cuda/attention.cu",
        "    max = folded.max;\n    sum = folded.sum;\n", "    sum = folded.sum;\n",
        "StoreRow: the sink's max is left out of the stored state"),
    "sink-numerator": (
        "cuda/attention.cu",
        "const float a = p.sinks != nullptr ? MulRn(acc[d], acc_scale) : acc[d];",
        "const float a = acc[d];",
        "StoreRow: the accumulator is not rescaled to the sink-folded max"),
    "sinks-host-pointer": (
        "cuda/backend.cu",
        "    p->sinks = staging.At<float>(sinks);\n", "",
        "kernels get the host's sinks"),
    "fp8-key-scale-ignored": (
        "cuda/attention.cu",
        "scale_f16, io_f16, key_plane.tensor_scale);", "scale_f16, io_f16);",
        "attend: fp8 keys decoded without the key tensor scale"),
    "fp8-write-scale-ignored": (
        "cuda/cache_io.cu",
        "ScaleAddress(plane, scale_f16, slot, head),\n            plane.tensor_scale);",
        "ScaleAddress(plane, scale_f16, slot, head));",
        "cache write: fp8 rows encoded without the tensor scale"),
    "bf16-query-as-f16": (
        "cuda/attention.cu",
        "queries[v * dim + d] = LoadActivationOf(p.query, first + d, p.io_type);",
        "queries[v * dim + d] = LoadActivationOf(p.query, first + d, io_f16 ? DType::kF16 : "
        "DType::kF32);",
        "attend: a bf16 query is read as fp32"),
    "bf16-gather-out": (
        "cuda/cache_io.cu",
        "* dim + d, p.io_type);", "* dim + d, io_f16 ? DType::kF16 : DType::kF32);",
        "gather: bf16 outputs stored as fp32"),
    "shared-too-small": (
        "cuda/attention.cu",
        "(head_dim + 1) + kWarps * 32;", "(head_dim + 1) + kWarps * 24;",
        "attend: the shared-memory size leaves out 32 bytes of probs"),
    "host-batch": (
        "cuda/backend.cu",
        "    batch->seqstarts = staging.At<int64_t>(seqstarts);\n"
        "    batch->kvstarts = staging.At<int64_t>(kvstarts);\n", "",
        "kernels get the host's seqstarts/kvstarts"),
    "host-plan": (
        "cuda/backend.cu",
        "  work.items = staging.At<WorkItem>(items);\n"
        "  work.num_items = static_cast<int64_t>(plan.items.size());",
        "  work.items = plan.items.data();\n"
        "  work.num_items = static_cast<int64_t>(plan.items.size());",
        "MHA/MHCA attend gets the host's work items"),
    "no-smem-opt-in": (
        "cuda/attention.cu",
        "  DYNATTN_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(&AttendKernel<kElem>,\n"
        "                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,\n"
        "                                                    static_cast<int>(layout.bytes)));\n", "",
        "attend launches above 48 KiB of shared memory without the opt-in"),
    "write-bound-off-by-one": (
        "cuda/cache_io.cu",
        "if (index >= tokens * heads * 2) return;", "if (index > tokens * heads * 2) return;",
        "cache write: one thread past the last (token, head, plane)"),
    "gather-repeat-off-by-one": (
        "cuda/cache_io.cu",
        "for (int r = 0; r < p.num_repeat; ++r)", "for (int r = 0; r <= p.num_repeat; ++r)",
        "gather: each row stored num_repeat + 1 times"),
}


def run(command, env=None, timeout=900):
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=timeout)
        return result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s"


def first_evidence(output):
    """The line that best says why a run failed."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if "WARNING: ThreadSanitizer" in line or "ERROR: AddressSanitizer" in line:
            frames = [l.strip() for l in lines[i + 1:i + 12] if l.strip().startswith("#0")]
            return (line.strip() + (" at " + frames[0] if frames else ""))[:200]
    for key in ("cuda-emulator:", "runtime error", "libdynattn CUDA error", "logged:",
                "ERROR: CHECK", "ERROR: REQUIRE", "CRASHED", "timed out"):
        for line in lines:
            if key in line:
                return line.strip()[:200]
    return (lines[-1] if lines else "")[:200]


OPTIONS = {"test_case": "", "schedules": ("forward", "reverse", "random")}


def runs_for(build):
    """(label, binary, environment) of the gpu suite runs a build folder offers."""
    base = dict(os.environ, DYNATTN_TEST_SEED=os.environ.get("DYNATTN_TEST_SEED", "12345"))
    tests = ROOT / build / "tests"
    sanitized = "sanitize" in build
    out = []
    if sanitized:
        out.append(("asan", tests / "gpu_tests",
                    dict(base, CUDA_EMU_SCHEDULE="random", ASAN_OPTIONS="detect_leaks=0",
                         UBSAN_OPTIONS="halt_on_error=1")))
        return out
    for schedule in OPTIONS["schedules"]:
        out.append((schedule, tests / "gpu_tests", dict(base, CUDA_EMU_SCHEDULE=schedule)))
    if (tests / "gpu_tsan_tests").exists():
        out.append(("tsan", tests / "gpu_tsan_tests",
                    dict(base, CUDA_EMU_SCHEDULE="random", TSAN_OPTIONS="halt_on_error=1")))
    return out


def targets_for(build):
    names = ["tests/gpu_tests"]
    if (ROOT / build / "tests" / "gpu_tsan_tests").exists():
        names.append("tests/gpu_tsan_tests")
    return names


def try_mutation(name, builds):
    path, old, new, what = MUTATIONS[name]
    source = ROOT / path
    original = source.read_text()
    if original.count(old) != 1:
        return what, [("-", f"not applicable: the text occurs {original.count(old)} times")]
    results = []
    try:
        source.write_text(original.replace(old, new))
        for build in builds:
            status, output = run(["ninja", "-C", build] + targets_for(build))
            if status != 0:
                results.append((build, "build failed: " + first_evidence(output)))
                continue
            for label, binary, env in runs_for(build):
                command = [str(binary), "-ts=gpu"]
                if OPTIONS["test_case"]:
                    command.append("-tc=" + OPTIONS["test_case"])
                status, output = run(command, env=env)
                verdict = "caught" if status != 0 else "missed"
                results.append((label, verdict + ("" if status == 0 else
                                                  ": " + first_evidence(output))))
    finally:
        source.write_text(original)
    return what, results


def main():
    # A background job ignores SIGINT: make SIGTERM unwind too, so the source is restored.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", default="build")
    parser.add_argument("--only", default="")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--test-case", default="")
    parser.add_argument("--schedules", default="forward,reverse,random")
    args = parser.parse_args()
    OPTIONS["test_case"] = args.test_case
    OPTIONS["schedules"] = tuple(args.schedules.split(","))
    if args.list:
        for name, (_, _, _, what) in MUTATIONS.items():
            print(f"{name:26} {what}")
        return 0
    names = args.only.split(",") if args.only else list(MUTATIONS)
    builds = args.builds.split(",")
    missed = 0
    for name in names:
        what, results = try_mutation(name, builds)
        print(f"## {name}: {what}", flush=True)
        for label, verdict in results:
            print(f"   {label:8} {verdict}", flush=True)
        if all(not v.startswith("caught") for _, v in results):
            missed += 1
    # Leave the binaries built from the unmodified sources.
    for build in builds:
        run(["ninja", "-C", build] + targets_for(build))
    print(f"{len(names) - missed} of {len(names)} mutations caught by at least one run")
    return 0


if __name__ == "__main__":
    sys.exit(main())

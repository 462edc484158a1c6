#!/usr/bin/env python3
# Writes the device kit's summary.json from what run.sh left in its output folder (checks.tsv,
# device.json, timings.json, peer.json) and prints the table the README's device results take.
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(out, status):
    checks = []
    try:
        with open(os.path.join(out, "checks.tsv")) as f:
            for line in f:
                name, result, seconds, detail = (line.rstrip("\n").split("\t") + ["", "", ""])[:4]
                checks.append({"check": name, "result": result, "seconds": seconds,
                               "detail": detail})
    except OSError:
        pass
    timings = load(os.path.join(out, "timings.json")) or {}
    peer = (load(os.path.join(out, "peer.json")) or {}).get("rows", {})
    rows = []
    for row in timings.get("rows", []):
        theirs = peer.get(row["name"], {}).get("median_ms")
        row["torch_sdpa_ms"] = theirs
        row["torch_over_dynattn"] = theirs / row["median_ms"] if theirs and row["median_ms"] else None
        rows.append(row)
    summary = {
        "status": status,
        "device": load(os.path.join(out, "device.json")),
        "kit": open(os.path.join(out, "kit.txt")).read() if os.path.exists(
            os.path.join(out, "kit.txt")) else None,
        "checks": checks,
        "copy_gbps": timings.get("copy_gbps"),
        "timings": rows,
        "torch": (load(os.path.join(out, "peer.json")) or {}).get("torch"),
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print("\n| check | result | seconds | detail |\n|---|---|---|---|")
    for c in checks:
        print(f"| {c['check']} | {c['result']} | {c['seconds']} | {c['detail']} |")
    if rows:
        print(f"\ndevice-to-device copy: {timings.get('copy_gbps', 0):.0f} GB/s (read + written)")
        print("\n| step | median ms | GB/s | % of copy | TFLOP/s | torch SDPA ms | SDPA / dynattn |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            ratio = f"{r['torch_over_dynattn']:.2f}x" if r["torch_over_dynattn"] else "-"
            theirs = f"{r['torch_sdpa_ms']:.4f}" if r["torch_sdpa_ms"] else "-"
            print(f"| {r['name']} | {r['median_ms']:.4f} | {r['gbps']:.0f} | {r['copy_pct']:.1f} "
                  f"| {r['tflops']:.2f} | {theirs} | {ratio} |")
    print(f"\nstatus: {status}; summary: {os.path.join(out, 'summary.json')}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

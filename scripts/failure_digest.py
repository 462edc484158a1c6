#!/usr/bin/env python3
"""The lines that say why a meson test run failed, short enough to read at the end of CI's log.

Usage: failure_digest.py BUILD/meson-logs/testlog.json -> prints, for each failed or timed-out
test, its name and the lines of its output that name the failure: doctest's test case, error,
values and logged context (the random seed with it), the sanitizers' reports with their first
stack frames, pytest's failed asserts, the base seed.
Prints nothing when every test passed. CI shows only the end of its output; the full logs stay in
BUILD/meson-logs.
"""
import json
import re
import sys

# Lines that report a failure; a doctest block (or the output's tail) with one of them is kept.
FAILED = re.compile(r"ERROR:|runtime error:|Sanitizer|Assertion|terminate called|what\(\):|"
                    r"^E   |^FAILED ", re.M)
# Lines of a failed block that say where and with what: its test case, values, logged context
# (the seed), the sanitizer's summary and first stack frames, the replay line.
CONTEXT = re.compile(r"TEST CASE:|values:|logged:|SUMMARY:|DYNATTN_TEST_SEED|^\s+#[0-3] ")
MAX_LINES = 24  # per failed test


def digest(output):
    """The failure lines of one test's output: the run's base seed, then of each doctest block
    (test cases are separated by lines of '=') that failed, its kept lines, each logged context
    with its next line. Blocks that only passed or printed a message are left out; where no block
    failed (a signal, a timeout), the output's last lines instead."""
    kept = [line for line in output.splitlines() if line.startswith("base seed")][:1]
    for block in re.split(r"\n={20,}\n", output):
        if not FAILED.search(block):
            continue
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if FAILED.search(line) or CONTEXT.search(line):
                kept.append(line.rstrip())
                if "logged:" in line and i + 1 < len(lines):
                    kept.append(lines[i + 1].rstrip())
    if len(kept) <= 1:  # nothing doctest or a sanitizer reported (a signal, a timeout): the end
        kept += [line.rstrip() for line in output.splitlines() if line.strip()][-6:]
    unique = list(dict.fromkeys(kept))  # the same context repeats for every failed check
    if len(unique) > MAX_LINES:
        unique = unique[:MAX_LINES] + ["  ... (%d more lines)" % (len(unique) - MAX_LINES)]
    return unique


def main():
    with open(sys.argv[1]) as log:
        for line in log:
            test = json.loads(line)
            if test["result"] not in ("FAIL", "TIMEOUT", "UNEXPECTEDPASS"):
                continue
            print("failed: %s (%s)" % (test["name"], test["result"]))
            output = (test.get("stdout") or "") + "\n" + (test.get("stderr") or "")
            for kept in digest(output):
                print("  " + kept[:300])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Counts a meson test run for the closing "N passed, M failed" line.

Usage: count_tests.py BUILD/meson-logs/testlog.json -> prints "PASSED FAILED SKIPPED".
Each meson test counts once (an expected failure that failed passes), except the pytest files
(suite python), which count as the tests they ran: the numbers of pytest's summary line
("23 passed, 4 skipped in 5.0s"). A pytest file that failed without a summary counts one failure.
"""
import json
import re
import sys

SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s")


def pytest_counts(output):
    """(passed, failed, skipped) of the last pytest summary line in `output`, or None."""
    found = None
    for line in output.splitlines():
        match = SUMMARY.match(line.strip())
        if match:
            found = match.group(1)
    if found is None:
        return None
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for number, word in re.findall(r"(\d+) ([a-z]+)", found):
        key = {"xfailed": "passed", "xpassed": "failed", "error": "failed",
               "errors": "failed", "deselected": None, "warning": None,
               "warnings": None}.get(word, word)
        if key in counts:
            counts[key] += int(number)
    return counts["passed"], counts["failed"], counts["skipped"]


def main():
    passed = failed = skipped = 0
    with open(sys.argv[1]) as log:
        for line in log:
            test = json.loads(line)
            result = test["result"]
            output = test.get("stdout", "") + test.get("stderr", "")
            counts = pytest_counts(output) if "pytest" in test.get("command", []) else None
            if counts is not None and result in ("OK", "FAIL"):
                passed += counts[0]
                failed += counts[1] + (1 if result == "FAIL" and counts[1] == 0 else 0)
                skipped += counts[2]
            elif result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
    print(passed, failed, skipped)


if __name__ == "__main__":
    main()

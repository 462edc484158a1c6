# Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
"""The README's Python example is examples/python_example.py, verbatim (the `python_example`
test runs that file)."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_python_block_is_the_example():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## Python\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the Python section has one python block"
    assert blocks[0] == (ROOT / "examples" / "python_example.py").read_text()

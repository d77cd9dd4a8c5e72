#!/usr/bin/env python3
"""Golden IR tests: run each case's pipeline and print the IR (or the rendered diagnostics).

A case is `tests/golden/<pass stem>/NAME.tkir` (IR text) or `NAME.tk` (source) whose first line
names the pipeline: `// RUN: tile{BM=32}` (IR) or `# RUN: tile,software-pipeline` (source); `-D
NAME=VALUE` words before the pipeline override dims and constants of a .tk case. `NAME.expected`
holds the printed IR after the pipeline, or for a user error the rendered diagnostics, exactly as
`tkc opt` prints them (paths relative to the case's folder). tests/test_golden.py compares;

    python3 tests/golden/update.py [CASE ...]

rewrites the expected files (all cases when none is named). Review every change by eye.
"""

from __future__ import annotations

import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root, when run as a script

from dsl.diagnostics import TkError  # noqa: E402
from dsl.ir import print_module  # noqa: E402
from passes.manager import parse_pipeline, run_pipeline  # noqa: E402
from tkc import driver  # noqa: E402

# Cases whose .expected holds the correct output, hand-written, while a known bug makes them fail
# (test_golden.py marks them strict xfail; update.py leaves them alone unless named). Remove an
# entry once its bug is fixed.
KNOWN_BUGS: dict[str, str] = {}
_RUN = re.compile(r"^\s*(//|#)\s*RUN:\s*(.*?)\s*$")


def cases() -> list[str]:
    """Every case input, sorted (paths)."""
    found = glob.glob(os.path.join(HERE, "*", "*.tkir")) + glob.glob(os.path.join(HERE, "*", "*.tk"))
    return sorted(found)


def run_line(path: str) -> tuple[dict[str, int], str]:
    """(defines, pipeline) of the case's `RUN:` line; ValueError when the first line is not one."""
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    m = _RUN.match(first)
    if not m:
        raise ValueError(f"{path}: the first line must be `// RUN: PIPELINE` (or `# RUN:` in .tk)")
    words = m.group(2).split()
    defines: dict[str, int] = {}
    while len(words) >= 2 and words[0] == "-D":
        name, _, value = words[1].partition("=")
        defines[name] = int(value)
        words = words[2:]
    return defines, " ".join(words)


def run_case(path: str) -> str:
    """What `tkc opt NAME -p PIPELINE` prints for the case, run from the case's folder."""
    defines, pipeline = run_line(path)
    cwd = os.getcwd()
    os.chdir(os.path.dirname(path))
    try:
        passes = parse_pipeline(pipeline)
        module = driver.frontend(os.path.basename(path), defines)
        return print_module(run_pipeline(module, passes))
    except TkError as exc:
        return exc.render() + "\n"
    finally:
        os.chdir(cwd)


def expected_path(path: str) -> str:
    return os.path.splitext(path)[0] + ".expected"


def main(argv: list[str]) -> int:
    chosen = [os.path.abspath(a) for a in argv] or cases()
    for path in chosen:
        if not argv and os.path.relpath(path, HERE) in KNOWN_BUGS:
            print(f"kept {os.path.relpath(path, HERE)} (known bug: {KNOWN_BUGS[os.path.relpath(path, HERE)]})")
            continue
        out = run_case(path)
        target = expected_path(path)
        old = open(target, encoding="utf-8").read() if os.path.exists(target) else None
        if old != out:
            with open(target, "w", encoding="utf-8") as f:
                f.write(out)
            print(f"updated {os.path.relpath(target)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""print -> parse -> print is a fixed point: every example (lowered, after each pass of the default
pipeline) and every golden IR file (.tkir inputs and IR .expected outputs)."""

from __future__ import annotations

import glob
import os

import pytest

from dsl.ir import print_module
from dsl.ir_parser import parse_module
from dsl.lower import lower
from dsl.parser import parse
from passes.manager import parse_pipeline, run_pipeline
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk")))


def _is_ir(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        return path.endswith(".tkir") or f.read(9) == "tile.func"  # .expected: IR, not diagnostics


GOLDEN = sorted(p for p in glob.glob(os.path.join(ROOT, "tests", "golden", "*", "*.tkir"))
                + glob.glob(os.path.join(ROOT, "tests", "golden", "*", "*.expected")) if _is_ir(p))


def _id(path: str) -> str:
    return os.path.relpath(path, ROOT)


def assert_fixed_point(text: str, name: str) -> str:
    once = print_module(parse_module(text, name))
    twice = print_module(parse_module(once, name))
    assert twice == once
    return once


def lowered(path: str):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    return lower(parse(src, path), src)


def test_there_are_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_lowered_example(path):
    module = lowered(path)
    text = print_module(module)
    assert assert_fixed_point(text, path) == text


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
@pytest.mark.parametrize("target", ["tilelang", "tilelang-cpu"])
def test_example_after_each_pass_of_the_default_pipeline(path, target):
    module = lowered(path)
    seen = []

    def after(name, m):
        text = print_module(m)
        assert assert_fixed_point(text, path) == text, f"not a fixed point after `{name}`"
        seen.append(name)

    final = run_pipeline(module, parse_pipeline(driver.default_pipeline(target)), after)
    assert seen == [p.name for p in parse_pipeline(driver.default_pipeline(target))]
    # the parsed final IR is the same program: it prints, emits and keys the cache identically
    reparsed = parse_module(print_module(final), path)
    assert print_module(reparsed) == print_module(final)
    assert reparsed.env == final.env


@pytest.mark.parametrize("path", GOLDEN, ids=_id)
def test_golden_ir_file(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".expected"):
        assert assert_fixed_point(text, path) == text  # printer output: exactly reproduced
    else:
        assert_fixed_point(text, path)

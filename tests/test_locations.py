"""Locations survive (issue 14, item 4): after lowering and after every pass of the default
pipeline, every op of every example and test program carries a source location in its own file,
at a line of that file, so any later diagnostic can point at the source."""

from __future__ import annotations

import glob
import os

import pytest

from passes.manager import parse_pipeline, run_pipeline
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk")) + glob.glob(os.path.join(ROOT, "tests", "programs", "*.tk")))


def _check(module, path: str, lines: int, stage: str) -> None:
    for op in module.walk():
        loc = op.loc
        assert loc is not None, f"{stage}: `{op.name}` has no location"
        assert loc.file == path, f"{stage}: `{op.name}` is located in {loc.file}, not {path}"
        assert 1 <= loc.line <= lines and loc.col >= 1, f"{stage}: `{op.name}` at {loc} is outside the file"


@pytest.mark.parametrize("path", FILES, ids=[os.path.relpath(p, ROOT) for p in FILES])
def test_every_op_keeps_a_location_through_every_pass(path):
    lines = open(path, encoding="utf-8").read().count("\n") + 1
    module = driver.frontend(path)
    _check(module, path, lines, "after lowering")
    seen = []
    run_pipeline(module, parse_pipeline(driver.default_pipeline("tilelang")),
                 lambda name, m: (_check(m, path, lines, f"after `{name}`"), seen.append(name)))
    assert len(seen) == len(parse_pipeline(driver.default_pipeline("tilelang")))

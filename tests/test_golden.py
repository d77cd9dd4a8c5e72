"""Golden IR per pass: tests/golden/<pass stem>/NAME.(tkir|tk) -> NAME.expected (see golden/update.py)."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

from passes.manager import PASSES

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("golden_update", os.path.join(HERE, "golden", "update.py"))
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

CASES = golden.cases()
KNOWN_BUGS = golden.KNOWN_BUGS


def _id(path: str) -> str:
    return os.path.relpath(path, os.path.join(HERE, "golden"))


def _case(path: str):
    bug = KNOWN_BUGS.get(_id(path))
    return pytest.param(path, id=_id(path), marks=[pytest.mark.xfail(reason=bug, strict=True)] if bug else [])


@pytest.mark.parametrize("path", [_case(p) for p in CASES])
def test_golden(path):
    want_path = golden.expected_path(path)
    assert os.path.exists(want_path), f"no {_id(want_path)}: run tests/golden/update.py and review it"
    with open(want_path, encoding="utf-8") as f:
        want = f.read()
    got = golden.run_case(path)
    assert got == want, f"{_id(path)} differs from its .expected (regenerate with tests/golden/update.py)"


def _is_error_case(path: str) -> bool:
    with open(golden.expected_path(path), encoding="utf-8") as f:
        return re.match(r"^\S+:\d+:\d+: error: ", f.readline()) is not None


def test_every_pass_has_golden_cases_including_errors():
    for stem in sorted(p.replace("-", "_") for p in PASSES):
        mine = [c for c in CASES if os.path.basename(os.path.dirname(c)) == stem]
        assert len(mine) >= 3, f"tests/golden/{stem}/ needs at least 3 cases"
        assert all(os.path.exists(golden.expected_path(c)) for c in mine)
        errors = [c for c in mine if _is_error_case(c)]
        assert errors and len(errors) < len(mine), f"tests/golden/{stem}/ needs error and success cases"


def test_run_lines_name_the_pass_of_their_folder():
    for path in CASES:
        stem = os.path.basename(os.path.dirname(path))
        _, pipeline = golden.run_line(path)
        assert stem.replace("_", "-") in pipeline, f"{_id(path)}: RUN line does not run `{stem}`"

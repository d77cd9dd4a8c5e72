"""The mutant list of tests/mutants/mutants.py stays applicable as the code moves (issue 9, item 6).

Fast (no test tier runs here; tests/mutants/run.py does that): ids are unique, there are at least
40 mutants and the issue's six are among them, every `find` occurs exactly once in its file, the
mutated file still compiles (a mutant is a semantic change, not a syntax error), and the tiers and
hint test files are real. When an edit of dsl/, passes/ or codegen/ moves a mutant's text, this
fails: update the mutant (same bug, new text) rather than dropping it.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "mutants"))

from mutants import ISSUE_MUTANTS, MUTANTS  # noqa: E402

IDS = [m.id for m in MUTANTS]


def test_ids_unique_and_enough():
    assert len(IDS) == len(set(IDS)), sorted(i for i in IDS if IDS.count(i) > 1)
    assert len(MUTANTS) >= 40


def test_issue_mutants_present():
    missing = [i for i in ISSUE_MUTANTS if i not in IDS]
    assert not missing, f"the issue's mutants are missing: {missing}"
    assert len(ISSUE_MUTANTS) >= 7  # six items; max/min at 0 in both codegen/tilelang.py and cuda_prelude.py


def test_spread_over_the_compiler():
    tops = {m.file.split("/")[0] for m in MUTANTS}
    assert {"dsl", "passes", "codegen"} <= tops


@pytest.mark.parametrize("m", MUTANTS, ids=IDS)
def test_mutant_applies_and_compiles(m):
    assert m.tier in ("cpu", "gpu"), m.tier
    assert m.find != m.replace
    assert m.what.strip() and "\n" not in m.what
    path = os.path.join(ROOT, m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.count(m.find) == 1, f"`find` occurs {text.count(m.find)} times in {m.file}"
    compile(text.replace(m.find, m.replace), path, "exec")
    for hint in m.tests:
        assert os.path.isfile(os.path.join(ROOT, hint)), f"hint test file {hint} does not exist"


@pytest.mark.parametrize("m", [m for m in MUTANTS if m.select], ids=lambda m: m.id)
def test_gpu_selections_pick_quick_tier_cases(m):
    """A GPU mutant's `select` is a valid pytest -k expression that picks some, not all, of the
    quick tier's cases (test_gpu_quick.IDS: those not marked `slow`; matched as pytest does: a
    substring of the test id, case-insensitive)."""
    from _pytest.mark.expression import Expression

    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    import test_gpu_quick

    assert m.tier == "gpu", "select narrows the GPU tier's hint run only"
    # the hint run is `-m "gpu and not slow" <hints> -k select`: the quick cases picked here run
    # only if their file is among the hints (a full-tier file's tests are all deselected there)
    assert "tests/gpu/test_gpu_quick.py" in m.tests, "a GPU mutant with `select` lists tests/gpu/test_gpu_quick.py"
    expr = Expression.compile(m.select)
    ids = [f"test_gpu_backend_at_tile_edges[{i}]".lower() for i in test_gpu_quick.IDS]
    picked = [i for i in ids if expr.evaluate(lambda name, i=i, **_: name.lower() in i)]
    assert 0 < len(picked) < len(ids), (m.select, len(picked))

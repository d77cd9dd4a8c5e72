"""Program fuzzing (issue 14): generated .tk programs (tests/program_gen.py) through the parser,
lowering, every pass of the default pipeline and the IR's text round trip, each stage's IR run by
the reference interpreter and checked element by element against torch in float64 within the
program's own error bound, and bit for bit against the stage before (translation validation;
`defer-reduce` alone may reorder a sum), every op located at a line of the program (issue 14,
item 4); a sample also compiled by `tilelang-cpu` and run (tests/test_program_fuzz_compiled.py:
a file of its own, so that pytest-xdist runs it beside this one). A failing case is
shrunk by hypothesis and saved as tests/fuzz_regressions/new_<test>.tk (each failing example
overwrites it, so the last, minimal one stays): rename it and commit it, and
`test_saved_regression` replays it from then on.

Budgets: TKC_FUZZ_PROGRAMS (default 1000 under the `ci` profile, 150 otherwise) programs through
the passes, TKC_FUZZ_COMPILED (100 under `ci`, 10 otherwise) through `tilelang-cpu`.
"""

from __future__ import annotations

import glob
import os
import tempfile

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import profiles
from dsl.interpreter import run
from dsl.ir import print_module
from dsl.ir_parser import parse_module
from fenced import launch_fenced
from passes.manager import parse_pipeline, run_pipeline
from program_gen import Program, programs
from test_locations import _check as locations
from tkc import driver, oracle

HERE = os.path.dirname(os.path.abspath(__file__))
SAVED = os.path.join(HERE, "fuzz_regressions")


def _budget(var: str, ci: int, other: int) -> int:
    return int(os.environ.get(var) or (ci if profiles.ACTIVE == "ci" else other))


PROGRAMS = _budget("TKC_FUZZ_PROGRAMS", 1000, 150)
COMPILED = _budget("TKC_FUZZ_COMPILED", 100, 10)


def _save(program: Program, test: str) -> str:
    os.makedirs(SAVED, exist_ok=True)
    path = os.path.join(SAVED, f"new_{test}.tk")
    with open(path, "w", encoding="utf-8") as f:
        f.write(program.source())
    return path


def _results(outs: dict) -> list:
    return [torch.from_numpy(np.asarray(o, np.float64)) for o in outs.values()]


def check_program(program: Program, seed: int, dist: str, compiled: bool, test: str) -> None:
    """The whole check of one program (see the module docstring); saves it when it fails."""
    text = program.source()
    note(text)
    try:
        _check(program, text, seed, dist, compiled)
    except BaseException:
        _save(program, test)
        raise


def _check(program: Program, text: str, seed: int, dist: str, compiled: bool) -> None:
    module = driver.frontend("fuzz.tk", text=text)
    inputs = oracle.random_inputs(module, seed, "cpu", dist)
    names = oracle.input_names(module)
    named = dict(zip(names, inputs))
    # the generator's own float64 value must be the reference clause's (one math, two renderings)
    for (name, _, v, _), ref in zip(program.expected(named), oracle.reference(module, inputs)):
        assert torch.allclose(v, ref, rtol=1e-9, atol=0.0, equal_nan=False), f"generator: `{name}` disagrees with its reference"
    feed = oracle.interp_inputs(names, inputs)
    # a cluster program races until `map-dsmem` has put in its barriers (the interpreter says so)
    barriers = [program.template != "cluster"]

    last = []

    lines = text.count("\n") + 1

    def verify(stage: str, m) -> None:
        locations(m, "fuzz.tk", lines, f"after {stage}")
        barriers[0] = barriers[0] or stage == "pass `map-dsmem`"
        if not barriers[0]:
            return
        outs = _results(run(m, feed))
        problem = program.check(outs, named)
        assert problem is None, f"interpreter after {stage}: {problem}"
        # translation validation (docs/ARCHITECTURE.md, section 8): a pass keeps the result bit for
        # bit, except `defer-reduce`, which sums a loop's partial tiles before reducing them
        if last and stage != "pass `defer-reduce`":
            for a, b in zip(last, outs):
                assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)), f"the interpreter's result changed in {stage}"
        last[:] = outs

    verify("lowering", module)
    final = run_pipeline(module, parse_pipeline(driver.default_pipeline("tilelang")),
                         after_pass=lambda name, m: verify(f"pass `{name}`", m))
    verify("the IR text round trip", parse_module(print_module(final), "fuzz.tkir"))
    if compiled:
        import tkc

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "fuzz.tk")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            results = launch_fenced(tkc.compile(path, target="tilelang-cpu"), inputs)
        problem = program.check(results, named)
        assert problem is None, f"tilelang-cpu: {problem}"


_CASES = st.tuples(programs(), st.integers(0, 2**31 - 1), st.sampled_from(oracle.DISTRIBUTIONS))
_FAST = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]


@settings(max_examples=PROGRAMS, deadline=None, suppress_health_check=_FAST)
@given(case=_CASES)
def test_generated_programs_through_every_pass(case):
    program, seed, dist = case
    check_program(program, seed, dist, compiled=False, test="passes")


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(SAVED, "*.tk"))), ids=os.path.basename)
def test_saved_regression(path):
    with open(path, encoding="utf-8") as f:
        program = Program.from_source(f.read())
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):
        _check(program, program.source(), seed, dist, compiled=program.template != "cluster" and "bf16" not in program.source())


@settings(max_examples=200, deadline=None, suppress_health_check=_FAST)
@given(program=programs())
def test_generated_source_round_trips(program):
    """`Program.from_source` reads back what `source` wrote (the saved regressions rely on it)."""
    assert Program.from_source(program.source()) == program

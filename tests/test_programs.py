"""Language features beyond the MiSS examples (tests/programs/*.tk): the reference interpreter
and the TileLang C target against each program's torch reference, on random inputs."""

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tkc
from dsl.interpreter import run
from tkc.check import random_inputs, reference, rel_error
from tkc.driver import frontend

HERE = os.path.join(os.path.dirname(__file__), "programs")
PROGRAMS = sorted(f for f in os.listdir(HERE) if f.endswith(".tk"))


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 80), seed=st.integers(0, 2**16))
def test_interpreter_matches_torch(name, m, seed):
    path = os.path.join(HERE, name)
    module = frontend(path, {"M": m})
    inputs = random_inputs(module, seed, "cpu")
    names = [a.name for a in module.func.body.args[: len(inputs)]]
    outs = run(module, {n: t.numpy() for n, t in zip(names, inputs)})
    for out, ref in zip(outs.values(), reference(module, inputs)):
        assert rel_error(torch.from_numpy(np.asarray(out, np.float32)), ref) < 1e-2


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=2, deadline=None)
@given(m=st.integers(1, 80), seed=st.integers(0, 2**16))
def test_tilelang_cpu_matches_torch(name, m, seed):
    path = os.path.join(HERE, name)
    module = frontend(path, {"M": m})
    inputs = random_inputs(module, seed, "cpu")
    outs = tkc.compile(path, target="tilelang-cpu")(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    refs = reference(module, inputs)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        assert rel_error(out, ref) < 1e-2

"""Every example and test program on hypothesis-drawn dims (each tiled dim anywhere from below one
tile to past three, tests/edge_shapes.py) and input distributions (tkc/oracle.py), against torch
in float64 within the derived tolerance: the reference interpreter on the IR after the default
pipeline, and TileLang's C target. tests/test_edges.py runs the fixed edge cases."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import tkc
from dsl.interpreter import run
from edge_shapes import ROOT, SPECS, fix, grid_sync, tile_of
from profiles import examples
from tkc import driver, oracle

FILES = sorted(SPECS)
# TileLang's C target: no clusters, no bf16, no `sync grid` (located rejections: tests/test_edges.py,
# tests/verify/backends.tk)
NO_CLUSTER = [f for f in FILES if not re.search(r"\bcluster\s*\(", open(os.path.join(ROOT, f)).read())
              and "bf16[" not in open(os.path.join(ROOT, f)).read() and not grid_sync(f)]


@st.composite
def problems(draw, path: str):
    spec = SPECS[path]
    dims = dict(spec.base)
    for dim, tile in spec.tiles.items():
        t = tile_of(spec, tile, spec.base)
        hi = t if dim in spec.at_most_one_tile else 3 * t + 1
        dims[dim] = draw(st.integers(1, hi))
    dims = fix(spec, dims)
    dist = draw(st.sampled_from(spec.dists))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"{path}: dims={dims} dist={dist} seed={seed}")
    return {**dims, **spec.consts}, dist, seed


def compare(module, inputs, results) -> None:
    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    assert len(refs) == len(results)
    for (name, dtype), out, ref in zip(oracle.outputs(module), results, refs):
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        assert err <= tol, f"`{name}`: relative error {err:.3e} > tolerance {tol:.3e}"


@pytest.mark.parametrize("path", FILES)
@settings(max_examples=examples(6, 30))
@given(data=st.data())
def test_interpreter_matches_torch(path, data):
    values, dist, seed = data.draw(problems(path))
    full = os.path.join(ROOT, path)
    module = driver.frontend(full, values)
    final = driver.optimize(driver.frontend(full, values), "tilelang")
    inputs = oracle.random_inputs(module, seed, "cpu", dist)
    names = oracle.input_names(module)
    outs = run(final, oracle.interp_inputs(names, inputs))
    compare(module, inputs, [torch.from_numpy(np.asarray(o, np.float64)) for o in outs.values()])


@pytest.mark.parametrize("path", NO_CLUSTER)
@settings(max_examples=examples(2, 8))
@given(data=st.data())
def test_tilelang_cpu_matches_torch(path, data):
    values, dist, seed = data.draw(problems(path))
    full = os.path.join(ROOT, path)
    module = driver.frontend(full, values)
    consts = {k: v for k, v in values.items() if k in module.func.attrs["consts"]}
    inputs = oracle.random_inputs(module, seed, "cpu", dist)
    results = tkc.compile(full, target="tilelang-cpu", **consts)(*inputs)
    compare(module, inputs, list(results) if isinstance(results, tuple) else [results])

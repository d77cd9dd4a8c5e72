"""Clusters of 9 to 16 blocks (sm_90's non-portable sizes) through target `cuda`: the default
pipeline accepts them and the runtime sets the kernel's non-portable-cluster attribute, without
which the launch fails. `examples/attention_split.tk` with SPLIT = 16 (a head's 16 blocks merge
their partial softmax through DSMEM) against torch in float64 on the same inputs, fenced
(tests/fenced.py), at the first, a middle and the last position, on the input distributions
the example is defined on (tests/edge_shapes.py). Quick tier.
Run on the device machine: `python3 -m pytest -m gpu --hypothesis-profile=gpu tests/gpu`."""

from __future__ import annotations

import os
import sys

import pytest

import tkc
from tkc import driver, oracle

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from edge_shapes import dists  # noqa: E402  (the input distributions the example is defined on)
from fenced import launch_fenced  # noqa: E402

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.join(ROOT, "examples", "attention_split.tk")
DIMS = {"H": 3, "HD": 32, "S": 70, "KVD": 32}


@pytest.mark.parametrize("pos", [0, 37, 69])
def test_sixteen_block_clusters_match_torch(pos, tmp_path):
    consts = {"SPLIT": 16, "BT": 4, "threads": 64}  # 16 blocks x 4 positions cover 64 of the 70
    kernel = tkc.compile(PATH, target="cuda", cache_dir=str(tmp_path), **consts)
    artifact, _ = kernel.specialize(DIMS)
    assert "__cluster_dims__(16, 1, 1)" in artifact.source
    module = driver.frontend(PATH, {**DIMS, **consts})
    budget = oracle.error_budgets(module)["O"]
    for seed, dist in enumerate(dists("examples/attention_split.tk")):
        inputs = oracle.random_inputs(module, seed, "cuda", dist, {"pos": pos})
        (out,) = launch_fenced(kernel, inputs)
        (ref,) = oracle.reference(module, inputs)
        err = oracle.rel_error(out, ref)
        assert err <= budget.tol("f32"), f"pos {pos}, {dist}: relative error {err:.3e}"

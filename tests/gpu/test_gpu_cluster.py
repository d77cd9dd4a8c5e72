"""The cluster-reduce examples (seed 001) through every GPU backend (`tilelang`, `cuda`) against torch
in float64 on the same inputs (tkc/oracle.py), within the tolerance derived from the kernel's
dtypes, on hypothesis-drawn cluster counts (1 to 2048 clusters of 2 blocks), vector lengths and
input distributions; STAGE 0 (LINEAR) and 1 (FFN). Run on the device machine: `python3 -m pytest --hypothesis-profile=gpu
tests/gpu`. The race the seed's DSMEM kernel has gave wrong sums on an H200 at every cluster count, so
large cluster counts are always among the examples."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import example, given, note, settings
from hypothesis import strategies as st

import tkc
from profiles import examples
from tkc import driver, oracle
from tkc.runtime import TORCH_DTYPES

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_cuda_signal import PUSH4  # noqa: E402  (four-block pushes through st.async)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_KERNELS: dict[tuple, object] = {}


def path_of(name: str) -> str:
    return os.path.join(ROOT, "examples", f"{name}.tk")


def kernel(name: str, stage: int, target: str):
    key = (name, stage, target)
    if key not in _KERNELS:
        _KERNELS[key] = tkc.compile(path_of(name), target=target, STAGE=stage)
    return _KERNELS[key]


def check_runs(k, module, x: torch.Tensor, dist: str, runs: int = 3) -> None:
    """`k` on `x`, `runs` times (a race shows as a result that changes from run to run), each
    result against torch in float64 on `x` within the derived tolerance. An all-zero reference
    (relu of all-negative sums) passes only if every element is exactly 0 (rel_error: x/0 is Inf)."""
    (name, dtype), = oracle.outputs(module)
    (ref,) = oracle.reference(module, [x])
    tol = oracle.error_budgets(module)[name].tol(dtype)
    for i in range(runs):
        y = k(x)
        torch.cuda.synchronize()
        assert y.dtype == getattr(torch, TORCH_DTYPES[dtype]) and y.shape == ref.shape
        assert torch.isfinite(y).all(), f"run {i}, {dist}: NaN/Inf in the output"
        err = oracle.rel_error(y, ref)
        assert err <= tol, f"run {i}, {dist}: relative error {err:.3e} > tolerance {tol:.3e}"


@pytest.mark.parametrize("target", ["tilelang", "cuda"])
@pytest.mark.parametrize("name", ["cluster_reduce_dsmem", "cluster_reduce_dsmem_pull", "cluster_reduce_hbm"])
@pytest.mark.parametrize("stage", [0, 1])
@settings(max_examples=examples(3, 10, 4), deadline=None)
@given(clusters=st.integers(1, 2048), n=st.sampled_from([4096, 8192, 16384]),
       dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**31 - 1))
@example(clusters=1056, n=16384, dist="normal", seed=0)
@example(clusters=132, n=16384, dist="wide", seed=1)
def test_cluster_reduce_matches_torch(target, name, stage, clusters, n, dist, seed):
    note(f"{name} through {target}: STAGE={stage} clusters={clusters} N={n} dist={dist} seed={seed}")
    module = driver.frontend(path_of(name), {"B": 2 * clusters, "N": n, "STAGE": stage})
    (x,) = oracle.random_inputs(module, seed, "cuda", dist)
    check_runs(kernel(name, stage, target), module, x, dist)


@pytest.mark.parametrize("n", [256, 36, 34, 33, 4096])
@settings(max_examples=examples(3, 8, 4), deadline=None)
@given(clusters=st.integers(1, 2048), dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**31 - 1))
@example(clusters=1056, dist="normal", seed=0)
def test_signalled_pushes_match_torch(tmp_path_factory, n, clusters, dist, seed):
    """tests/test_cuda_signal.py's PUSH4 (four-block clusters, two pushed stores of f16 and f32
    through st.async and an mbarrier; at N=33 through the cluster barrier) through `cuda`. Its
    reference's `.float()` casts are dropped here, so torch computes it in float64."""
    if "push4" not in _KERNELS:
        path = tmp_path_factory.mktemp("push4") / "push4.tk"
        path.write_text(PUSH4.replace(".float()", ""))
        _KERNELS["push4"] = (str(path), tkc.compile(str(path), target="cuda"))  # specialized on B and N per call
    path, k = _KERNELS["push4"]
    note(f"push4 N={n} clusters={clusters} dist={dist} seed={seed}")
    module = driver.frontend(path, {"B": 4 * clusters, "N": n})
    (x,) = oracle.random_inputs(module, seed, "cuda", dist)
    check_runs(k, module, x, dist)

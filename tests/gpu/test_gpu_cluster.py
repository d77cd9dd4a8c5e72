"""The cluster-reduce examples (seed 001) through every GPU backend (`tilelang`, `cuda`) against torch, on
hypothesis-drawn cluster counts (1 to 2048 clusters of 2 blocks) and vector lengths; STAGE 0
(LINEAR) and 1 (FFN). Run on the device machine: `python3 -m pytest --hypothesis-profile=gpu
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
from tkc.check import rel_error

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_cuda_signal import PUSH4  # noqa: E402  (four-block pushes through st.async)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_KERNELS: dict[tuple, object] = {}


def kernel(name: str, stage: int, target: str):
    key = (name, stage, target)
    if key not in _KERNELS:
        _KERNELS[key] = tkc.compile(os.path.join(ROOT, "examples", f"{name}.tk"), target=target, STAGE=stage)
    return _KERNELS[key]


@pytest.mark.parametrize("target", ["tilelang", "cuda"])
@pytest.mark.parametrize("name", ["cluster_reduce_dsmem", "cluster_reduce_dsmem_pull", "cluster_reduce_hbm"])
@pytest.mark.parametrize("stage", [0, 1])
@settings(max_examples=examples(3, 10, 4), deadline=None)
@given(clusters=st.integers(1, 2048), n=st.sampled_from([4096, 8192, 16384]), seed=st.integers(0, 2**31 - 1))
@example(clusters=1056, n=16384, seed=0)
@example(clusters=132, n=16384, seed=1)
def test_cluster_reduce_matches_torch(target, name, stage, clusters, n, seed):
    note(f"{name} through {target}: STAGE={stage} clusters={clusters} N={n} seed={seed}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(2 * clusters, n, device="cuda", generator=gen).half()
    for _ in range(3):  # a race shows as a result that changes from run to run
        y = kernel(name, stage, target)(x)
        torch.cuda.synchronize()
        ref = (x + x.view(-1, 2, n).flip(1).reshape(2 * clusters, n)).float()
        if stage == 1:
            ref = torch.relu(ref)
        assert torch.isfinite(y.float()).all()
        assert rel_error(y, ref) < 1e-2


@pytest.mark.parametrize("n", [256, 36, 34, 33, 4096])
@settings(max_examples=examples(3, 8, 4), deadline=None)
@given(clusters=st.integers(1, 2048), seed=st.integers(0, 2**31 - 1))
@example(clusters=1056, seed=0)
def test_signalled_pushes_match_torch(tmp_path_factory, n, clusters, seed):
    """tests/test_cuda_signal.py's PUSH4 (four-block clusters, two pushed stores of f16 and f32
    through st.async and an mbarrier; at N=33 through the cluster barrier) through `cuda`."""
    if "push4" not in _KERNELS:
        path = tmp_path_factory.mktemp("push4") / "push4.tk"
        path.write_text(PUSH4)
        _KERNELS["push4"] = tkc.compile(str(path), target="cuda")  # specialized on B and N per call
    k = _KERNELS["push4"]
    note(f"push4 N={n} clusters={clusters} seed={seed}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(4 * clusters, n, device="cuda", generator=gen).half()
    v = x.view(-1, 4, n).float()
    ref = (v.roll(1, 1) + 2.0 * v.roll(-1, 1)).reshape(4 * clusters, n)
    for _ in range(3):
        y = k(x)
        torch.cuda.synchronize()
        assert torch.isfinite(y).all()
        assert rel_error(y, ref) < 1e-3

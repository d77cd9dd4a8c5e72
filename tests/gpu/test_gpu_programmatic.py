"""Programmatic dependent launch (tkc.programmatic_launch, `cuda` target): chains of dependent
kernels, each launched while the one before it may still run, give exactly what torch gives for
the same chain of f32 adds (a kernel that read its input before the predecessor finished would
not), called plainly and captured in a CUDA graph; the launches went through cuLaunchKernelEx.
The llama step with it: tests/gpu/test_gpu_llama.py (`programmatic`)."""

from __future__ import annotations

import os

import pytest
import torch

import tkc
from tkc import cuda_runtime

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCUM = os.path.join(ROOT, "examples", "accum.tk")


@pytest.fixture
def launches(monkeypatch):
    """The number of programmatic launches so far (a spy on cuda_runtime._launch_ex) whose last
    kernel argument (tk_pdl) tells the kernel so: it then triggers its successor's launch."""
    count = [0]
    real = cuda_runtime._launch_ex

    def spy(function, grid, block, args, *a, **k):
        count[0] += bool(k.get("programmatic")) and int(args[-1]) == 1
        return real(function, grid, block, args, *a, **k)

    monkeypatch.setattr(cuda_runtime, "_launch_ex", spy)
    return count


def _chain(k, x, ds):
    y = x
    for d in ds:
        y = k(y, d)
    return y


def test_dependent_chain_matches_torch(tmp_path, launches):
    k = tkc.compile(ACCUM, target="cuda", cache_dir=str(tmp_path))
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2048, 4096, device="cuda", generator=g)
    ds = [torch.randn(2048, 4096, device="cuda", generator=g) * (i + 1) for i in range(24)]
    want = _chain(torch.add, x, ds)
    k(x, ds[0])  # loads the kernel
    with tkc.programmatic_launch():
        got = _chain(k, x, ds)
    assert launches[0] == 24
    assert torch.equal(got, want)


def test_dependent_chain_in_a_graph_matches_torch(tmp_path, launches):
    k = tkc.compile(ACCUM, target="cuda", cache_dir=str(tmp_path), BN=512, threads=128)
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(1024, 4096, device="cuda", generator=g)
    ds = [torch.randn(1024, 4096, device="cuda", generator=g) for _ in range(16)]
    k(x, ds[0])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), tkc.programmatic_launch():
        out = _chain(k, x, ds)
    assert launches[0] == 16
    for seed in (2, 3):
        x.copy_(torch.randn(1024, 4096, device="cuda", generator=g) * seed)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, _chain(torch.add, x, ds))

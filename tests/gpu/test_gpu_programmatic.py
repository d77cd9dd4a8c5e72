"""Programmatic dependent launch (tkc.programmatic_launch, `cuda` target): chains of dependent
kernels, each launched while the one before it may still run, give exactly what torch gives for
the same chain of f32 adds (a kernel that read its input before the predecessor finished would
not), called plainly and captured in a CUDA graph; the launches went through cuLaunchKernelEx.
A sampled gemm's kernels after the first of each call are launched programmatically: calls in a
row with a new B each, and a B whose transpose runs long, match float64 torch. The llama step
with it: tests/gpu/test_gpu_llama.py (`programmatic`)."""

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


def _sampled_case(name: str, K: int = 512):
    """(M, N, K, pattern, dot_below) of a sampled-gemm case: "mix" (an R-MAT pattern at 1000 x
    1100, K = 256, about half its tiles on tensor cores and half as dot products), or "dots" /
    "tiles" (a uniform pattern over 65536 columns, whose transpose runs long, all on one path)."""
    from tkc import sparse as sp

    if name == "mix":
        M, N, K = 1000, 1100, 256
        p = sp.rmat(M, N, 90000, seed=4)
        per_tile = torch.bincount(p.rows.long() // 128 * -(-N // 128) + p.cols.long() // 128)
        return M, N, K, p, int(per_tile[per_tile > 0].median())
    return 256, 65536, K, sp.uniform(256, 65536, 30000, seed=6), 10**9 if name == "dots" else 0


def _sampled_kernel(tmp_path, dot_below):
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda", cache_dir=str(tmp_path))
    kernel.dot_below = dot_below
    return kernel


def _matches(P, A, B, p) -> bool:
    from tkc import oracle

    want = (A.double() @ B.double())[p.rows.long().cuda(), p.cols.long().cuda()]
    return oracle.rel_error(P, want) < 1e-5


def _calls_with_new_b(case: str, tmp_path, seed: int, calls: int, K: int = 512) -> None:
    """`calls` calls in a row of the sampled-gemm kernel on `_sampled_case(case, K)`'s pattern, a new
    B each (scaled by the call's number), each matching float64 torch at every entry."""
    M, N, K, p, dot_below = _sampled_case(case, K)
    kernel = _sampled_kernel(tmp_path, dot_below)
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(M, K, generator=g).half().cuda()
    for call in range(calls):
        B = (torch.randn(K, N, generator=g) * (call + 1)).half().cuda()
        assert _matches(kernel(A, B, p), A, B, p), call


def test_sampled_gemm_calls_in_a_row_read_their_own_b(tmp_path, monkeypatch):
    """A sampled gemm's call runs B's transpose, the tensor-core tiles and the dot products, the
    last two launched programmatically (cuda_runtime.CudaLaunch._sampled): each starts while the
    kernel before it runs and waits before it reads Bt. Calls in a row on one pattern with a new B
    each (Bt's buffer comes back from torch's allocator holding the call before's transpose, so
    a kernel that read it early would see the old B) match float64 torch at every entry."""
    programmatic = []
    real = cuda_runtime._cu_launch_kernel_ex()

    def spy(config_ref, function, params, extra):  # the driver's cuLaunchKernelEx: which launches are programmatic
        config = config_ref._obj
        programmatic.append(any(config.attrs[i].id == cuda_runtime._PROGRAMMATIC_STREAM_SERIALIZATION
                                for i in range(config.numAttrs)))
        return real(config_ref, function, params, extra)

    monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lambda: spy)
    _calls_with_new_b("mix", tmp_path, seed=5, calls=4)
    assert programmatic == [False, True, True] * 4  # per call: the transpose, then the tiles and the dot products


@pytest.mark.parametrize("transposed", [False, True])
def test_row_group_calls_in_a_row_read_their_own_operands(tmp_path, transposed):
    """At K = 32 (every entry by row groups: 600k entries over 3000 x 6000) four calls in a row on
    one pattern with a new A and B each: the first calls take the full path, the later ones the
    pattern's kept record, bound to its plan (tkc/runtime.py `_sampled_call`: only A's, B's and
    P's pointers taken per call). Each matches float64 torch at every entry; B contiguous
    (`<kernel>_groups_b` reads it) or a transposed view (not bound)."""
    from tkc import sparse as sp

    p = sp.uniform(3000, 6000, 600_000, seed=9)
    kernel = _sampled_kernel(tmp_path, None)
    g = torch.Generator().manual_seed(9)
    for call in range(4):
        A = torch.randn(3000, 32, generator=g).half().cuda()
        B = (torch.randn(32, 6000, generator=g) * (call + 1)).half().cuda()
        if transposed:
            B = B.t().contiguous().t()
        P = kernel(A, B, p)
        assert not P.isnan().any() and _matches(P, A, B, p), call
    bindings = next(v for v in p._memo.values() if isinstance(v, tuple) and len(v) == 6)[5]
    assert (bindings.get("cuda") is not None) == (not transposed)


@pytest.mark.parametrize("K", [64, 512])
@pytest.mark.parametrize("split", ["dots", "tiles"])
def test_sampled_gemm_kernels_wait_for_a_long_transpose(tmp_path, split, K):
    """The kernel after B's transpose (the dot products, or tensor-core tiles that read Bt: more
    than one wave of them) is launched while the transpose runs: with a B of 65536 columns, a
    kernel that read Bt before the transpose had finished would read the call before's B (Bt's
    buffer comes back from torch's allocator with it). At K = 512 the transpose takes several
    waves (its last one writes Bt's last K chunk); at K = 64 one wave, which the tiles' first
    copies meet (both caught their mutant on an H200: the dot products' at K = 512, the tiles' at 64)."""
    _calls_with_new_b(split, tmp_path, seed=7, calls=3, K=K)


@pytest.mark.parametrize("shape", ["mix", "long-transpose"])
def test_sampled_gemm_replayed_from_a_graph(tmp_path, shape):
    """A sampled gemm's call captured into a CUDA graph keeps its kernels' programmatic edges:
    each replay, with a new B copied into the captured input, matches float64 torch ("mix": the
    transpose, tensor-core tiles and dot products; "long-transpose": a B of 65536 columns at
    K = 512 and dot products only)."""
    M, N, K, p, dot_below = _sampled_case("mix" if shape == "mix" else "dots")
    kernel = _sampled_kernel(tmp_path, dot_below)
    g = torch.Generator().manual_seed(8)
    A = torch.randn(M, K, generator=g).half().cuda()
    B = torch.randn(K, N, generator=g).half().cuda()
    kernel(A, B, p)  # loads the kernels, uploads the plan
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        P = kernel(A, B, p)
    for replay in range(3):
        B.copy_((torch.randn(K, N, generator=g) * (replay + 2)).half())
        graph.replay()
        torch.cuda.synchronize()
        assert _matches(P, A, B, p), replay

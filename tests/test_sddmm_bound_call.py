"""A `cuda` SDDMM call on a pattern seen before, bound (tkc/runtime.py `_sampled_call`,
tkc/cuda_runtime.py `SampledBinding`): with B contiguous, a call takes only
the dense operands', the output's and Bt's pointers and reuses the pattern's and plan's (the
first calls on a pattern take the full path and keep a record; the record's first call binds it). Checked
on the CPU through a fake driver against the unbound path on the same inputs: every launch's
kernel, grid, block, shared memory and argument slots the same (the output's and a fresh Bt's
pointers aside, which are new allocations), on each of the call's forms (row groups with the
panels from B, row groups after B's transpose, tiles and dot products after the transpose, dot
products by column panels), with two patterns of one plan size called in turn (their launches'
slots are shared), a transposed and a misaligned operand. The kernels themselves run in
tests/gpu/test_gpu_sddmm.py."""

from __future__ import annotations

import ctypes
import os

import numpy
import pytest
import torch

import tkc
from tkc import cuda_runtime, runtime
from tkc import sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def fake_gpu(monkeypatch):
    """CPU tensors stand in for CUDA ones; the driver records each cuLaunchKernelEx as (kernel,
    grid, block, shared memory, argument slots)."""
    launched = []
    n_args = {}  # CUfunction -> its argument count (the transpose takes 2)

    def driver_call(config_ref, function, params, extra):
        config = config_ref._obj
        args = [ctypes.c_uint64.from_address(params[i]).value for i in range(n_args.get(function, 15))]
        launched.append((function, (config.gridDimX, config.gridDimY, config.gridDimZ),
                         (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes, args))
        return 0

    class OnGpu:  # a CPU tensor as cuda_runtime._pointer sees a CUDA one (its alignment copy kept alike)
        is_cuda = True

        def __init__(self, t):
            self.t = t

        def data_ptr(self):
            return self.t.data_ptr()

        def clone(self):
            return OnGpu(self.t.clone())

    real_pointer = cuda_runtime._pointer

    def function(self, index, name=None):
        name = name or self.name
        n_args[name] = 2 if self.transpose and name == self.transpose[0] else 15
        return type("F", (), {"kernel": type("K", (), {"ptr": name})})

    Runtime = type("Runtime", (), {"getDevice": staticmethod(lambda: -1)})  # (CPU tensors' get_device())
    fake_cupy = type("cupy", (), {"cuda": type("cuda", (), {"runtime": Runtime})})
    fake_torch = type("torch", (), {"_C": type("C", (), {"_cuda_getCurrentRawStream": staticmethod(lambda i: 77)})})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(runtime.Kernel, "_pattern", lambda self, obj, p: sp.as_pattern(obj, p.dtype))
    monkeypatch.setattr(cuda_runtime, "nvcc_path", lambda: None)  # (no cubin: the driver is fake)
    monkeypatch.setattr(cuda_runtime, "_pointer", lambda t, keep: real_pointer(OnGpu(t), keep))
    monkeypatch.setattr(cuda_runtime, "_cupy_available", lambda: True)
    monkeypatch.setattr(cuda_runtime, "_modules", lambda: (fake_cupy, numpy, fake_torch))
    monkeypatch.setattr(cuda_runtime, "_pdl_supported", lambda index: True)
    monkeypatch.setattr(cuda_runtime, "_launch_ex_supported", lambda: True)
    monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lambda: driver_call)
    monkeypatch.setattr(cuda_runtime.CudaLaunch, "function", function)
    monkeypatch.setattr(cuda_runtime.CudaLaunch, "resident", lambda self, *a, **k: (1, 3))
    monkeypatch.setattr(cuda_runtime.CudaLaunch, "l2_bytes", staticmethod(lambda index: 50 << 20))
    monkeypatch.setattr(runtime, "GROUP_NNZ_MIN", 1000)  # row groups at a CPU test's size
    monkeypatch.setattr(runtime, "GROUP_CELL_MEAN_MIN", 4)
    return launched


def _record(pattern):
    (record,) = [v for k, v in pattern._memo.items() if isinstance(v, tuple) and len(v) == 6]
    return record


def _call(kernel, launched, A, B, p, bound: bool):
    """(P, the call's launches) with the pattern's binding used (`bound`) or set aside."""
    bindings = _record(p)[5]
    saved = dict(bindings)
    if not bound:
        bindings["cuda"] = None
    launched.clear()
    try:
        P = kernel(A, B, p)
    finally:
        bindings.clear()
        bindings.update(saved)
    return P, list(launched)


def _normalized(launches, P, statics, A=None):
    """The launches with P's pointer and a per-call Bt (the transpose's output) as names; that Bt
    must be the one every kernel after the transpose takes, and none of the pattern's or plan's
    pointers. With a misaligned `A`, its aligned copy's pointer (the kernels' first argument) too."""
    bt = {args[1] for name, _, _, _, args in launches if name.endswith("_transpose_b")}
    assert len(bt) <= 1
    names = {P.data_ptr(): "P", **{b: "Bt" for b in bt}}
    if A is not None:
        copies = {args[0] for name, _, _, _, args in launches if not name.endswith("_transpose_b")}
        assert len(copies) == 1 and A.data_ptr() not in copies and min(copies) % 16 == 0
        names[min(copies)] = "A copy"
    assert not (bt & statics)
    return [(name, grid, block, smem, [names.get(a, a) for a in args]) for name, grid, block, smem, args in launches]


def _statics(p, record):
    plan = record[3]
    return {p.rows.data_ptr(), p.cols.data_ptr(), *[t.data_ptr() for t in plan.cuda_tensors() if t.numel()]}


CASES = {  # form -> (K, M, N, nnz, pattern, B as given, the kernel after the transpose)
    "groups from B": (32, 300, 3000, 60_000, "uniform", "contiguous", "sddmm_groups_b"),
    "groups after the transpose": (32, 300, 3001, 60_000, "rmat", "contiguous", "sddmm_groups"),
    "tiles and dot products": (256, 600, 700, 90_000, "rmat", "contiguous", None),
    "dot products by column panels": (256, 2000, 2000, 40_000, "uniform", "contiguous", "sddmm_panels"),
}


@pytest.mark.parametrize("form", CASES)
def test_bound_call_launches_as_the_unbound_one(fake_gpu, form):
    launched = fake_gpu
    K, M, N, nnz, kind, _, expected = CASES[form]
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")
    gen = torch.Generator().manual_seed(1)
    make = sp.rmat if kind == "rmat" else sp.uniform
    p = make(M, N, nnz, seed=3)
    # a second pattern object of the same plan size (its launches share the first's slots), other arrays
    q = sp.SparsePattern(p.M, p.N, p.fmt, p.rows.clone(), p.cols.clone())
    for pattern in (p, q) * 3:  # the full path (which checks it, then keeps a record), then the record's first call
        first = kernel(torch.randn(M, K, generator=gen).half(), torch.randn(K, N, generator=gen).half(), pattern)
    for pattern in (p, q):
        assert _record(pattern)[5].get("cuda") is not None, "a contiguous B's call is bound after the record's first"
    kernels = None
    for call, pattern in enumerate((p, q, p, q, p)):
        A = torch.randn(M, K, generator=gen).half()
        B = torch.randn(K, N, generator=gen).half()
        if call == 4:  # A misaligned (the kernels' vector loads need 16 bytes: an aligned copy is passed)
            A = torch.randn(M * K + 1, generator=gen).half()[1:].view(M, K)
            assert A.data_ptr() % 16
        statics = _statics(pattern, _record(pattern))
        P, bound = _call(kernel, launched, A, B, pattern, True)
        P2, unbound = _call(kernel, launched, A, B, pattern, False)
        assert P.shape == P2.shape == first.shape
        misaligned = A if call == 4 else None
        assert _normalized(bound, P, statics, misaligned) == _normalized(unbound, P2, statics, misaligned)
        kernels = [name for name, *_ in bound]
        args = bound[-1][4]
        # the bound pointers are this pattern's (the launches' slots are refilled for each pattern)
        assert args[2:4] == [pattern.rows.data_ptr(), pattern.cols.data_ptr()]
        if call < 4:
            assert args[0] == A.data_ptr()
        else:
            assert args[0] != A.data_ptr() and args[0] % 16 == 0
        assert args[1] == B.data_ptr() and args[4] == P.data_ptr()
    if expected:
        assert expected in kernels, kernels
    if form != "groups from B" and form != "dot products by column panels":
        assert kernels[0] == "sddmm_transpose_b"


def test_transposed_b_takes_the_unbound_path(fake_gpu):
    """B given as a transposed view after the call was bound: not bound (Bt is B's own memory,
    B's slot a contiguous copy), as the unbound path launches it."""
    launched = fake_gpu
    K, M, N = 32, 300, 3000
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")
    p = sp.uniform(M, N, 60_000, seed=3)
    A = torch.randn(M, K).half()
    for _ in range(3):
        kernel(A, torch.randn(K, N).half(), p)
    binding = _record(p)[5]["cuda"][0]
    calls = []
    original = type(binding).__call__
    try:
        type(binding).__call__ = lambda self, *given: calls.append(given) or original(self, *given)
        stored = torch.randn(N, K).half()
        launched.clear()
        kernel(A, stored.t(), p)
        assert not calls
        assert launched[-1][0] == "sddmm_groups" and launched[-1][4][5] == stored.data_ptr()
        kernel(A, torch.randn(K, N).half(), p)
        assert len(calls) == 1
    finally:
        type(binding).__call__ = original


def test_binding_checks_its_tensor_count(fake_gpu):
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")
    p = sp.uniform(300, 3000, 60_000, seed=3)
    for _ in range(3):
        kernel(torch.randn(300, 32).half(), torch.randn(32, 3000).half(), p)
    binding = _record(p)[5]["cuda"][0]
    with pytest.raises(TypeError, match="takes 4 tensors, got 3"):
        binding(torch.empty(1), torch.empty(1), torch.empty(1))

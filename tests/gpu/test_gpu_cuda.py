"""Every example and test program through the CUDA C++ backend (target `cuda`) on the GPU against
torch in float64 on the same inputs (tkc/oracle.py), on hypothesis-drawn shapes, schedules and
input distributions, within the tolerance derived from each kernel's dtypes and reduction length;
the `tilelang` backend on the same inputs is held to the same oracle. The MiSS shapes and checks
are those of tests/gpu/test_gpu_miss.py (no NaN or Inf); the cluster examples run through both
backends in tests/gpu/test_gpu_cluster.py.
Run on the device machine: `python3 -m pytest --hypothesis-profile=gpu tests/gpu`.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import tkc
from profiles import examples
from tkc import driver, oracle

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import test_gpu_miss as miss_gpu  # noqa: E402  (shapes, inputs, checks and TileLang kernels of the MiSS tests)
from dsl.interpreter import run  # noqa: E402
from edge_shapes import dists  # noqa: E402  (the input distributions each test program is defined on)
from test_cuda import DTYPE_MIX  # noqa: E402  (at import time: its @given tests must not nest in ours)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "tests", "programs")) if f.endswith(".tk"))
_KERNELS: dict[tuple, object] = {}


def cuda_kernel(path: str, **consts: int):
    key = (path, tuple(sorted(consts.items())))
    if key not in _KERNELS:
        _KERNELS[key] = tkc.compile(path, target="cuda", **consts)
    return _KERNELS[key]


def run_miss(name: str, dims: dict[str, int], dist: str, seed: int, **consts: int) -> torch.Tensor:
    module, (a, b) = miss_gpu.inputs(name, dims, dist, seed, **consts)
    out = cuda_kernel(miss_gpu.path_of(name), **consts)(a, b)
    torch.cuda.synchronize()
    miss_gpu.check_output(module, [a, b], out, dist)
    return out


@pytest.mark.parametrize("name", sorted(miss_gpu.SPECS))
@settings(max_examples=examples(4, 20, 6), deadline=None)
@given(data=st.data())
def test_miss_examples_match_torch(name, data):
    dims, dist, seed = data.draw(miss_gpu.problems(name))
    run_miss(name, dims, dist, seed)


@pytest.mark.parametrize("name", ["miss", "miss_v3"])
@settings(max_examples=examples(3, 15, 6), deadline=None)
@given(data=st.data(), bm=st.sampled_from([16, 32, 64, 128]), bn=st.sampled_from([32, 64, 128, 256]),
       stages=st.integers(1, 4), threads=st.sampled_from([64, 128, 256]))
def test_miss_schedules_match_torch(name, data, bm, bn, stages, threads):
    dims, dist, seed = data.draw(miss_gpu.problems(name))
    note(f"BM={bm} BN={bn} stages={stages} threads={threads}")
    run_miss(name, dims, dist, seed, BM=bm, BN=bn, stages=stages, threads=threads)


@pytest.mark.parametrize("name", sorted(miss_gpu.SPECS))
@settings(max_examples=examples(2, 8, 3), deadline=None)
@given(data=st.data())
def test_miss_cuda_and_tilelang_match_torch_on_the_same_inputs(name, data):
    """Both backends on the same inputs, each against torch in float64 within the derived
    tolerance (which bounds their difference too: at most twice the tolerance)."""
    dims, dist, seed = data.draw(miss_gpu.problems(name))
    module, (a, b) = miss_gpu.inputs(name, dims, dist, seed)
    ours = cuda_kernel(miss_gpu.path_of(name))(a, b)
    theirs = miss_gpu.kernel(name)(a, b)
    torch.cuda.synchronize()
    miss_gpu.check_output(module, [a, b], ours, dist, "cuda")
    miss_gpu.check_output(module, [a, b], theirs, dist, "tilelang")


def test_padded_k_matches_peft_zero_padding():
    miss_gpu.check_peft_padding(cuda_kernel(miss_gpu.path_of("miss")))


def check_outputs(module, inputs, outs, where: str, zeros_ok: bool = False, skip: tuple[str, ...] = ()) -> None:
    """Every output of `module` (but those named in `skip`) against torch in float64 on `inputs`
    within its derived tolerance. An all-zero reference fails unless `zeros_ok` (with `ints`,
    sums can cancel exactly at M = 1); rel_error then still demands exact zeros."""
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    assert len(outs) == len(refs) == len(oracle.outputs(module))
    for (name, dtype), out, ref in zip(oracle.outputs(module), outs, refs):
        if name in skip:
            continue
        assert zeros_ok or ref.abs().max().item() > 0, f"{where}: `{name}`: the reference is all zeros"
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        assert err <= tol, f"{where}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=examples(3, 10, 5), deadline=None)
@given(m=st.integers(1, 300), data=st.data(), seed=st.integers(0, 2**16))
def test_programs_match_torch(name, m, data, seed):
    path = os.path.join(ROOT, "tests", "programs", f"{name}.tk")
    dist = data.draw(st.sampled_from(dists(f"tests/programs/{name}.tk")), label="dist")
    module = driver.frontend(path, {"M": m})
    inputs = oracle.random_inputs(module, seed, "cuda", dist)
    outs = cuda_kernel(path)(*inputs)
    torch.cuda.synchronize()
    check_outputs(module, inputs, outs, dist, zeros_ok=dist == "ints")


# DTYPE_MIX's math (the kernel itself has no reference): relu(X @ W + b), the row sums of X,
# 2 (X @ W) and I + trunc(X @ W).
DTYPE_MIX_REFERENCE = '    reference "(torch.relu(X @ W + b), X.sum(1, keepdim=True), (X @ W) * 2.0, I + torch.trunc(X @ W))"\n'


def dtype_mix_source() -> str:
    head, sep, rest = DTYPE_MIX.partition("    requires K % BK == 0\n")
    assert sep, "DTYPE_MIX changed: put its reference after the requires clause"
    return head + sep + DTYPE_MIX_REFERENCE + rest


def check_dtype_mix(module, inputs, outs, dist: str, where: str) -> None:
    """Y, Z, D against torch in float64 within their derived tolerances. J = I + trunc(acc) is an
    integer: with `ints` inputs every product and partial sum of acc is exact in f32, and J must
    be exact; otherwise the f32 accumulator may differ from X @ W by up to D's tolerance times
    sum |x w| (per element), and where that interval holds a nonzero integer trunc may differ by up
    to that error plus 1; everywhere else J must be exact."""
    outs = list(outs)
    where = f"{where} {dist}"
    assert [n for n, _ in oracle.outputs(module)] == ["Y", "Z", "D", "J"]
    check_outputs(module, inputs, outs, where, zeros_ok=dist == "ints", skip=("J",))
    ref_j = oracle.reference(module, inputs)[3]
    x, w = inputs[0].double(), inputs[1].double()
    acc = x @ w
    bound = oracle.error_budgets(module)["D"].tol("f64") * (x.abs() @ w.abs())
    lo, hi = torch.ceil(acc - bound), torch.floor(acc + bound)  # the integers the f32 acc may reach
    crosses = (lo <= hi) & ~((lo == 0) & (hi == 0))  # trunc is continuous across 0
    if dist == "ints":
        crosses = torch.zeros_like(crosses)
    assert outs[3].dtype == torch.int32 and outs[3].shape == ref_j.shape
    diff = (outs[3].double() - ref_j).abs()
    bad = (diff > 0) & ~(crosses & (diff <= bound + 1))
    assert not bad.any(), f"{where}: J != I + trunc(X @ W) at {int(bad.sum())} elements"


@settings(max_examples=examples(2, 8, 3), deadline=None)
@given(m=st.integers(1, 300), dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**16))
def test_dtype_mix_matches_torch(tmp_path_factory, m, dist, seed):
    """bf16 tensor cores with a shared-memory accumulator, a reduction in a pipelined loop, f64
    and int outputs (tests/test_cuda.py's DTYPE_MIX) through `cuda` and the reference
    interpreter, each against torch in float64 on the same inputs."""
    path = tmp_path_factory.mktemp("mix") / "dtype_mix.tk"
    path.write_text(dtype_mix_source())
    lowered = driver.frontend(str(path), {"M": m})
    inputs = oracle.random_inputs(lowered, seed, "cuda", dist)
    outs = cuda_kernel(str(path))(*inputs)
    torch.cuda.synchronize()
    check_dtype_mix(lowered, inputs, outs, dist, "cuda")
    module = driver.optimize(lowered, "tilelang")
    args = module.func.body.args
    want = run(module, {a.name: t.float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()
                        for a, t in zip(args, inputs)})
    check_dtype_mix(lowered, [t.cpu() for t in inputs], [torch.from_numpy(want[n]) for n in ("Y", "Z", "D", "J")],
                    dist, "interpreter")


# examples/sgemm.tk's own tiling and others from benchmarks/sgemm.py's sweep (each satisfies the
# example's `requires`; tests/test_benchmarks.py checks the whole sweep list does)
SGEMM_TILINGS = [{}, {"TM": 4, "TN": 4, "WNITER": 2}, {"BN": 256, "threads": 256}, {"BK": 8, "stages": 3},
                 {"BM": 64, "WM": 32, "TM": 4, "TN": 4, "WNITER": 4}]


@settings(max_examples=examples(3, 12, 5), deadline=None)
@given(m=st.integers(1, 1100), n=st.integers(1, 1100), k=st.integers(1, 1100),
       tiling=st.sampled_from(SGEMM_TILINGS), dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**16))
def test_sgemm_tilings_match_torch(m, n, k, tiling, dist, seed):
    """The warp-tiled SIMT gemm (codegen/cuda_gemm.py) on hypothesis-drawn shapes, tile edges in
    every dim (M, N, K not multiples of the tiles, K not a multiple of 4: A and B loads without
    cp.async), against torch in float64."""
    path = os.path.join(ROOT, "examples", "sgemm.tk")
    module = driver.frontend(path, {"M": m, "N": n, "K": k, **tiling})
    inputs = oracle.random_inputs(module, seed, "cuda", dist)
    out = cuda_kernel(path, **tiling)(*inputs)
    torch.cuda.synchronize()
    check_outputs(module, inputs, out, f"{tiling} {dist}", zeros_ok=dist == "ints")

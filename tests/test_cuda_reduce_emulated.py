"""Reductions of register tiles in the CUDA backend (codegen/cuda_plan.RegReduce,
`_Emitter.reg_reduce`), global-view tiles (`gview`) and the `defer-reduce` pass, run on the CPU:
the generated kernels with tests/cuda_emu/shim.h (std::threads for CUDA threads, warp shuffles
through a per-warp barrier), against torch in float64 with the oracle's derived tolerance, for
every input distribution. Each case is one reduction layout: rows whose chunks fit in part of a
warp (xor shuffles in the group), rows spanning warps or whose chunk count is not a power of two
(shared scratch, merged by several threads per output), columns (axis 0) with lanes sharing
columns and with whole groups of threads (a power of two or not), sum/max/min, tiles that leave
threads idle, f64. The GPU runs the same code in tests/gpu. Skipped without a g++ with C++20 <barrier>.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

from codegen import cuda_plan
from tkc import driver, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
import emulate  # noqa: E402

if emulate.gxx() is None:
    pytest.skip("no g++ with C++20 <barrier>", allow_module_level=True)

REDUCE = """
kernel red<threads={threads}>(X: {dt}[R, C]) -> (Y: {dt}[{out}])
    where R = {r}, C = {c}
    reference "{ref}"
{{
    grid (1) as (b) threads(threads)
    x = X[0 : +R, 0 : +C] * 1.5
    Y[0 : +{orow}, 0 : +{ocol}] = {fn}(x, {axis})
}}
"""
TORCH = {"sum": "torch.sum", "amax": "torch.amax", "amin": "torch.amin"}

# (fn, axis, R, C, threads, expected layout: (kind, group, slots) of cuda_plan.RegReduce)
CASES = [
    ("sum", 1, 16, 64, 128, ("rows", 8, 1)),  # 8 chunks per row: xor shuffles in groups of 8 lanes
    ("amax", 1, 5, 24, 64, ("rows", 3, 3)),  # 3 chunks per row: no shuffles, 3 partials per row in scratch
    ("sum", 1, 40, 48, 128, ("rows", 6, 3)),  # attention's q . K at HD = 48: pairs of lanes, 3 partials per row
    ("amin", 1, 3, 768, 64, ("rows", 96, 3)),  # a row of 96 chunks: warp sums, 3 partials per row
    ("sum", 1, 4, 512, 128, ("rows", 64, 2)),  # a row spans two warps: scratch
    ("amin", 1, 3, 2048, 256, ("rows", 256, 8)),
    ("sum", 1, 2, 8, 64, ("rows", 1, 1)),  # one chunk per row, most threads idle
    ("sum", 0, 64, 128, 256, ("cols", 16, 8)),  # attention's p-weighted V: lanes 16 apart share columns
    ("amax", 0, 64, 1, 256, ("cols", 1, 2)),  # a column of 64: two warps hold it
    ("sum", 0, 7, 2, 64, ("cols", 1, 1)),  # 7 rows of 2 (chunks of 2): one warp, no scratch
    ("amin", 0, 8, 512, 128, ("cols", 64, 2)),  # 64 chunks per row: no lanes share, 2 groups of 64 threads
    ("sum", 0, 3, 1024, 128, ("cols", 128, 1)),  # every thread a column, 3 rows each
    ("sum", 0, 64, 48, 96, ("cols", 6, 16)),  # attention's p-weighted V at HD = 48: 16 groups of 6 threads
    ("amax", 0, 37, 24, 384, ("cols", 3, 37)),  # 3 chunks per row, 37 rows: groups of 3 threads left idle
    ("sum", 0, 64, 48, 128, ("cols", 6, None)),  # 128 threads are not whole groups of 6: shared path
]


def _program(fn, axis, r, c, threads, dt="f32"):
    out = f"1, {c}" if axis == 0 else f"{r}, 1"
    orow, ocol = ("1", "C") if axis == 0 else ("R", "1")
    ref = f"{TORCH[fn]}(X * 1.5, {axis}, keepdim=True)"
    return REDUCE.format(threads=threads, dt=dt, out=out, r=r, c=c, ref=ref, orow=orow, ocol=ocol, fn=fn,
                         axis=axis)


def _check(source: str, tmp_path, dists=oracle.DISTRIBUTIONS, defines=None) -> None:
    path = tmp_path / "k.tk"
    path.write_text(source)
    emulate.check_against_torch(str(path), defines, dists)


def _layout(source: str, tmp_path):
    path = tmp_path / "layout.tk"
    path.write_text(source)
    final = driver.optimize(driver.frontend(str(path)), "cuda")
    (op,) = [o for o in final.walk() if o.name == "tile.reduce"]
    threads = int(next(o for o in final.walk() if o.name == "tile.launch").attrs["threads"])
    return cuda_plan.register_reduce(cuda_plan.shape_of(op.operands[0]), op.attrs["axis"], threads)


@pytest.mark.parametrize("fn, axis, r, c, threads, layout", CASES,
                         ids=[f"{f}-axis{a}-{r}x{c}-t{t}" for f, a, r, c, t, _ in CASES])
def test_register_reduction_matches_torch(tmp_path, fn, axis, r, c, threads, layout):
    source = _program(fn, axis, r, c, threads)
    rr = _layout(source, tmp_path)
    kind, group, slots = layout
    if slots is None:
        assert rr is None  # staged in shared memory instead (the path every other test runs)
    else:
        assert (rr.kind, rr.group, rr.slots) == layout
    _check(source, tmp_path)


def test_register_reduction_in_f64(tmp_path):
    _check(_program("sum", 1, 4, 512, 128, "f64"), tmp_path, ["wide", "offset"])


GEMV = """
kernel gemv<BD={bd}, BK={bk}, threads={threads}>(W: f32[D, K], X: f32[1, K], S: f32[D, 1]) -> (Y: f32[D, 1])
    where D = {d}, K = {k}
    reference "(W @ X.T) * S"
{{
    grid (cdiv(D, BD)) as (i) threads(threads)
    acc = zeros(f32[BD, 1])
    for k in range(cdiv(K, BK)) {{
        acc += sum(W[i*BD : +BD, k*BK : +BK] * X[0 : +1, k*BK : +BK] * S[i*BD : +BD, 0 : +1], 1)
    }}
    Y[i*BD : +BD, 0 : +1] = acc
}}
"""


@pytest.mark.parametrize("bd, bk, threads, d, k", [(4, 512, 128, 9, 1100), (4, 64, 64, 16, 256), (8, 32, 128, 13, 100)])
def test_deferred_gemv_with_global_views_matches_torch(tmp_path, bd, bk, threads, d, k):
    """acc += sum(...) in the K loop is deferred (per-thread partial sums, one reduction after the
    loop); X's row and S's column are read in place (global views), with guarded partial tiles."""
    source = GEMV.format(bd=bd, bk=bk, threads=threads, d=d, k=k)
    path = tmp_path / "gemv.tk"
    path.write_text(source)
    final = driver.optimize(driver.frontend(str(path)), "cuda")
    ops = [o.name for o in final.walk()]
    assert ops.count("tile.reduce") == 1
    loop = next(o for o in final.walk() if o.name == "tile.for")
    assert not any(o.name == "tile.reduce" for o in loop.walk())
    from codegen import cuda
    text = cuda.emit(final)
    assert "read X in place" in text and "read S in place" in text
    _check(source, tmp_path)


@pytest.mark.parametrize("name, defines", [("matmul", {"D": 37, "K": 1000}), ("rmsnorm", {"B": 3, "N": 4096}),
                                           ("rmsnorm", {"B": 2, "N": 1000}),
                                           ("matmul_q8", {"D": 9, "G": 12, "GS": 32}),
                                           ("matmul_q8", {"D": 6, "G": 5, "GS": 48, "NG": 2, "threads": 64}),
                                           ("matmul_q8_residual", {"D": 9, "G": 12, "GS": 32}),
                                           ("rmsnorm_matmul_q8", {"D": 9, "G": 12, "GS": 32}),
                                           ("rmsnorm_matmul_q8", {"D": 6, "G": 5, "GS": 48, "NG": 2, "threads": 64}),
                                           ("matmul_w8a8", {"D": 9, "G": 12, "GS": 32}),
                                           ("matmul_w8a8", {"D": 7, "G": 5, "GS": 48, "BD": 4, "threads": 64}),
                                           ("matmul_w8a8", {"D": 7, "G": 16, "GS": 64, "NG": 16, "threads": 64})])
def test_examples_on_the_emulation(tmp_path, name, defines):
    with open(os.path.join(ROOT, "examples", f"{name}.tk"), encoding="utf-8") as f:
        _check(f.read(), tmp_path, ["offset", "wide"], defines)


def test_int8_ffn_gate_on_the_emulation(tmp_path):
    """rmsnorm_ffn_gate_q8 with its two accumulators and the gate; `normal` and `ints` (with `offset`
    or `wide` inputs W1 @ xn sits far below 0 on whole rows and silu underflows the reference to 0
    there, as for rmsnorm_ffn_gate.tk in tests/edge_shapes.py)."""
    with open(os.path.join(ROOT, "examples", "rmsnorm_ffn_gate_q8.tk"), encoding="utf-8") as f:
        _check(f.read(), tmp_path, ["normal", "ints"], {"H": 9, "G": 12, "GS": 32})


def test_int8_tiles_get_16_wide_chunks(tmp_path):
    """matmul_q8's [BD, NG, GS] tiles hold int8 weights: chunks of 16, one 16-byte load each
    (cuda_plan.wide_shapes), and the f32 products, partial sums and reduction use the same
    chunks (the emulated runs above check the values)."""
    from codegen import cuda

    path = os.path.join(ROOT, "examples", "matmul_q8.tk")
    src = cuda.emit(driver.optimize(driver.frontend(path, {"D": 64, "NG": 8, "threads": 128}), "cuda"))
    assert "int8_t t0[16];  // i8[4, 8, 64] in registers: 1 chunk of 16 per thread" in src
    assert "tk_load<16>(gv, &W[" in src

"""int8 dot products as `__dp4a` (passes/fuse_int8_dot.py, `tile.dot_reduce`, target `cuda`).

`sum(cast(a, i32) * cast(b, i32), last)` over i8 tiles becomes one `tile.dot_reduce` on `cuda`
where the language's f32-defined i32 arithmetic is exact (L * 128 * 128 <= 2^24), and stays
elementwise everywhere else (other targets, longer rows, widths that are not multiples of 4,
intermediates used twice). The fused IR computes in the interpreter what the unfused IR does,
and the generated CUDA, run on the CPU (tests/cuda_emu), matches torch in float64 on full-range
int8 values, with sums of exactly 2^24 at the longest fused row.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen import cuda
from dsl.interpreter import run
from profiles import examples
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "matmul_w8a8.tk")
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
import emulate  # noqa: E402

DOT = """kernel k<BR=2, threads={threads}>(A: i8[R, L], B: i8[{bshape}]) -> (Q: i32[R, 1])
    where R = {r}, L = {l}
{{
    grid (cdiv(R, BR)) as (i) threads(threads)
    Q[i*BR : +BR, :] = sum(cast(A[i*BR : +BR, :], i32) * cast(B[{bslice}], i32), 1)
}}
"""


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "k.tk"
    path.write_text(text)
    return str(path)


def _dot(tmp_path, r=6, l=64, threads=64, bcast=True) -> str:
    bshape, bslice = ("1, L", "0 : +1, :") if bcast else ("R, L", "i*BR : +BR, :")
    return _write(tmp_path, DOT.format(threads=threads, r=r, l=l, bshape=bshape, bslice=bslice))


def _ops(module) -> list[str]:
    return [op.name for op in module.walk()]


def test_the_w8a8_example_fuses_on_cuda_only():
    final = driver.optimize(driver.frontend(EXAMPLE, {"D": 64}), "cuda")
    names = _ops(final)
    assert names.count("tile.dot_reduce") == 1 and "tile.reduce" in names  # the scaled sum over groups stays
    assert not any(op.name == "tile.elementwise" and op.operands[-1].type.dtype == "i32" for op in final.walk())
    src = cuda.emit(final)
    assert src.count("__dp4a(") == 4  # 16-byte chunks: four words of four bytes
    for target in ("tilelang", "tilelang-cpu"):
        assert "tile.dot_reduce" not in _ops(driver.optimize(driver.frontend(EXAMPLE, {"D": 64}), target))


@pytest.mark.parametrize("l, threads, fused", [(1024, 256, True), (2048, 256, False), (1536, 256, False),
                                               (64, 256, True), (4, 256, True), (12, 256, True), (48, 256, True),
                                               (66, 256, False), (6, 256, False), (64, 48, False)])
def test_fused_only_where_f32_is_exact_and_words_are_whole(tmp_path, l, threads, fused):
    """L * 128 * 128 <= 2^24 (1024 fuses; 2048 and 1536, whose 16-byte chunks the register
    reduction would take, do not), chunks of a multiple of 4 bytes (4: one 4-wide chunk; 66 and 6:
    2-wide), and a row the register reduction takes (12 and 48: three chunks, partials in shared
    scratch; 48 threads, not whole warps: staged in shared memory instead)."""
    final = driver.optimize(driver.frontend(_dot(tmp_path, l=l, threads=threads)), "cuda")
    assert ("tile.dot_reduce" in _ops(final)) == fused


def test_not_fused_when_the_products_are_used_again(tmp_path):
    text = """kernel k<threads=64>(A: i8[R, L], B: i8[1, L]) -> (Q: i32[R, 1], P: i32[R, L])
    where R = 4, L = 64
{
    grid (1) as (i) threads(threads)
    p = cast(A[:, :], i32) * cast(B[:, :], i32)
    Q[:, :] = sum(p, 1)
    P[:, :] = p
}
"""
    assert "tile.dot_reduce" not in _ops(driver.optimize(driver.frontend(_write(tmp_path, text)), "cuda"))


def test_not_fused_when_a_cast_is_used_again(tmp_path):
    text = """kernel k<threads=64>(A: i8[R, L], B: i8[1, L]) -> (Q: i32[R, 1], P: i32[R, L])
    where R = 4, L = 64
{
    grid (1) as (i) threads(threads)
    a = cast(A[:, :], i32)
    Q[:, :] = sum(a * cast(B[:, :], i32), 1)
    P[:, :] = a
}
"""
    final = driver.optimize(driver.frontend(_write(tmp_path, text)), "cuda")
    assert "tile.dot_reduce" not in _ops(final)
    got = run(final, {"A": np.full((4, 64), -3, np.int8), "B": np.full((1, 64), 5, np.int8)})
    assert (got["Q"] == -15 * 64).all() and (got["P"] == -3).all()


def test_not_fused_when_the_sum_accumulates(tmp_path):
    text = """kernel k<threads=64>(A: i8[R, L], B: i8[1, L]) -> (Q: i32[R, 1])
    where R = 4, L = 64
{
    grid (1) as (i) threads(threads)
    acc = zeros(i32[R, 1])
    for k in range(2) {
        acc += sum(cast(A[:, :], i32) * cast(B[:, :], i32), 1)
    }
    Q[:, :] = acc
}
"""
    final = driver.optimize(driver.frontend(_write(tmp_path, text)), "cuda")
    assert "tile.dot_reduce" not in _ops(final)


def _extreme_ints(shape, gen) -> np.ndarray:
    """Full-range int8 values, a quarter of them -128 and a tenth 127 (not the oracle's small
    ones): the products' extremes and their sign extension."""
    t = torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)
    u = torch.rand(shape, generator=gen)
    t[u < 0.25] = -128
    t[(u >= 0.25) & (u < 0.35)] = 127
    return t.numpy()


@settings(max_examples=examples(6, 25), deadline=None)
@given(r=st.integers(1, 9), l=st.sampled_from([4, 12, 32, 48, 64, 100, 512, 1024]), bcast=st.booleans(),
       threads=st.sampled_from([32, 64, 128]), seed=st.integers(0, 2**16))
def test_fused_ir_computes_the_unfused_values(tmp_path_factory, r, l, bcast, threads, seed):
    """The interpreter on the `cuda` pipeline's IR (fused where it qualifies) and on TileLang's
    (never fused) gives the same integers, equal to int64 numpy, on full-range int8 inputs."""
    path = _dot(tmp_path_factory.mktemp("dot"), r=r, l=l, threads=threads, bcast=bcast)
    gen = torch.Generator().manual_seed(seed)
    a = _extreme_ints((r, l), gen)
    b = _extreme_ints((1 if bcast else r, l), gen)
    want = (a.astype(np.int64) * b.astype(np.int64)).sum(1, keepdims=True)
    for target in ("cuda", "tilelang"):
        got = run(driver.optimize(driver.frontend(path), target), {"A": a, "B": b})["Q"]
        np.testing.assert_array_equal(got.astype(np.int64), want)


needs_gxx = pytest.mark.skipif(emulate.gxx() is None, reason="no g++ with C++20 <barrier>")


@needs_gxx
@pytest.mark.parametrize("l, bcast, threads", [(1024, True, 256), (64, False, 64), (4, True, 32), (32, True, 128),
                                              (512, True, 32)])
def test_dp4a_kernels_match_int64_on_the_emulation(tmp_path, l, bcast, threads):
    """The generated CUDA (every dot_reduce form: a broadcast row read once per thread or per
    chunk, a same-shape operand in registers, a 4-wide chunk, rows across warps) run on the CPU, with
    rows of -128 * -128 products: at L = 1024 a sum of exactly 2^24."""
    path = _dot(tmp_path, r=5, l=l, threads=threads, bcast=bcast)
    final = driver.optimize(driver.frontend(path), "cuda")
    assert "tile.dot_reduce" in _ops(final)
    kernel = emulate.Emulated(final)
    assert "__dp4a(" in kernel.source
    gen = torch.Generator().manual_seed(l)
    a = _extreme_ints((5, l), gen)
    b = _extreme_ints((1 if bcast else 5, l), gen)
    a[0, :] = -128
    b[0, :] = -128
    q = np.zeros((5, 1), np.int32)
    (got,) = kernel([a, b, q], [2])
    want = (a.astype(np.int64) * b.astype(np.int64)).sum(1, keepdims=True)
    np.testing.assert_array_equal(got.astype(np.int64), want)
    if l == 1024:
        assert want[0, 0] == 2 ** 24

"""Memory access forms of the CUDA backend (codegen/cuda_access.py), run on the CPU emulation
(tests/cuda_emu) against torch in float64 with the oracle's derived tolerance:

* strided loads move the contiguous window around a chunk and keep every step-th element
  (`AccessMixin.strided_window`), for steps 2 to 4, every phase, windows past the end of a row;
* a group of strided stores that together cover the window (`x[o : n : s]`, `x[o + 1 : n : s]`,
  ...) is stored interleaved, as whole windows, by its last member (`store_groups`); a group
  that cannot be (a second store of one phase) goes element by element;
* a tile that a fill gives one value (a runtime scalar, a loop index) is not stored: its readers
  use the value (`const` placement, codegen/cuda_plan.py);
* loads of input windows into register tiles move to the start of their op list, never past an
  op that touches the tile, a loop or another load (`hoist_loads`).

Each case also checks which form the backend chose, so a silent fallback to the element path
fails here. The GPU runs the same code in tests/gpu. Skipped without a g++ with C++20 <barrier>.
"""

from __future__ import annotations

import os
import sys

import pytest

from codegen import cuda
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
import emulate  # noqa: E402

if emulate.gxx() is None:
    pytest.skip("no g++ with C++20 <barrier>", allow_module_level=True)

DISTS = ["normal", "wide", "offset"]


def _cuda(path: str, defines=None) -> str:
    return cuda.emit(driver.optimize(driver.frontend(path, defines or {}), "cuda"))


def _rope_f32(tmp_path) -> str:
    with open(os.path.join(ROOT, "examples", "rope.tk"), encoding="utf-8") as f:
        text = f.read().replace("f16[", "f32[")
    path = tmp_path / "rope32.tk"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("defines", [{"B": 3, "D": 256, "HD": 64}, {"B": 5, "D": 128, "HD": 32, "BR": 2},
                                     {"B": 8, "D": 256, "HD": 128, "BR": 4, "threads": 64}],
                         ids=["seed-one-row", "rows-not-multiple-of-BR", "four-rows"])
@pytest.mark.parametrize("pos", [0, 3])
def test_rope_windows_match_torch(tmp_path, defines, pos):
    """rope.tk in f32 (the emulation has no f16). Small positions only: an f32 angle is off by
    about pos * 2^-24 rad, which an f32 tolerance does not allow at pos 4095 (the f16 kernel's
    tests on the GPU run pos 0 and the largest)."""
    path = _rope_f32(tmp_path)
    src = _cuda(path, defines)
    assert src.count("tk_load<16>(gv_w") == 2  # both halves of the pairs as whole windows
    assert "whole windows, interleaved" in src and "tk_store<16>(&Y[" in src
    assert "__syncthreads" not in src  # `pos * ...` reads pos itself, not a tile behind a barrier
    emulate.check_against_torch(path, defines, DISTS, {"pos": pos})


@pytest.mark.parametrize("defines", [{"B": 3, "N": 72, "BN": 32, "threads": 32}, {"B": 2, "N": 1000, "BN": 256, "threads": 64},
                                     {"B": 5, "N": 4096}], ids=["partial-block", "partial-block-wide", "defaults"])
def test_accum_blocks_in_memory_order_match_torch(defines):
    """examples/accum.tk's one grid index over the rows' column blocks (row i / cdiv(N, BN),
    block i % cdiv(N, BN)): each block's 16-byte windows at the flattened offset, the last block of
    a row partial where BN does not divide N, against torch."""
    path = os.path.join(ROOT, "examples", "accum.tk")
    src = _cuda(path, defines)
    assert "const int i = blockIdx.x;" in src and "blockIdx.y" not in src
    emulate.check_against_torch(path, defines, DISTS)


@pytest.mark.parametrize("defines", [{"B": 3, "H": 72, "BN": 32, "threads": 32}, {"B": 2, "H": 1000, "BN": 256, "threads": 64}],
                         ids=["partial-block", "partial-block-wide"])
def test_silu_mul_blocks_in_memory_order_match_torch(defines):
    """examples/silu_mul.tk's grid in memory order, as accum.tk's: the rows' column blocks under one
    index, the last block of a row partial, against torch."""
    path = os.path.join(ROOT, "examples", "silu_mul.tk")
    src = _cuda(path, defines)
    assert "const int i = blockIdx.x;" in src and "blockIdx.y" not in src
    emulate.check_against_torch(path, defines, DISTS)


STEP3 = """
kernel tri<BC={bc}, threads=32>(X: f32[R, N]) -> (Y: f32[R, N])
    where R = {r}, N = {n}
    requires N % 3 == 0
    reference "(X.reshape(R, N // 3, 3).flip(-1) * torch.tensor([2.0, -1.0, 0.5], dtype=X.dtype)).reshape(R, N)"
{{
    grid (R, cdiv(N / 3, BC)) as (r, c) threads(threads)
    a = X[r : +1, c*BC*3 : +BC : 3]
    b = X[r : +1, c*BC*3 + 1 : +BC : 3]
    d = X[r : +1, c*BC*3 + 2 : +BC : 3]
    Y[r : +1, c*BC*3 + 1 : +BC : 3] = b * -1.0
    Y[r : +1, c*BC*3 : +BC : 3] = d * 2.0
    Y[r : +1, c*BC*3 + 2 : +BC : 3] = a * 0.5
}}
"""


@pytest.mark.parametrize("bc, r, n, windows", [(8, 3, 72, True), (16, 2, 72, True), (8, 2, 60, False)],
                         ids=["whole", "last-window-outside", "row-not-multiple-of-window"])
def test_step3_windows_match_torch(tmp_path, bc, r, n, windows):
    """Three phases loaded as windows and stored interleaved out of order; with BC 16 the last
    block's second chunk lies wholly past the row (guarded); with N 60 windows of 24 would cross
    rows, so the backend goes element by element."""
    path = tmp_path / "tri.tk"
    path.write_text(STEP3.format(bc=bc, r=r, n=n))
    src = _cuda(str(path))
    assert (src.count("gv_w[") >= 3) is windows
    assert ("whole windows, interleaved" in src) is windows
    emulate.check_against_torch(str(path), None, DISTS)


TWICE = """
kernel twice<threads=32>(X: f32[R, N]) -> (Y: f32[R, N])
    where R = 2, N = 64
    reference "torch.stack([X[:, 0::2] * 3.0, X[:, 1::2] - 1.0], -1).reshape(R, N)"
{
    grid (R) as (r) threads(threads)
    e = X[r : +1, 0 : +N / 2 : 2]
    o = X[r : +1, 1 : +N / 2 : 2]
    Y[r : +1, 0 : +N / 2 : 2] = e
    Y[r : +1, 1 : +N / 2 : 2] = o - 1.0
    Y[r : +1, 0 : +N / 2 : 2] = e * 3.0
}
"""


def test_a_phase_stored_twice_is_not_interleaved(tmp_path):
    """Two stores of the even phase: interleaving the first with the odd one would reorder it
    after the second, so every store goes element by element, in program order."""
    path = tmp_path / "twice.tk"
    path.write_text(TWICE)
    src = _cuda(str(path))
    assert "interleaved" not in src
    emulate.check_against_torch(str(path), None, DISTS)


SCALARS = """
kernel sc<threads=32>(X: f32[R, C], n: i32) -> (Y: f32[R, C])
    where R = 3, C = 40
    requires n < 7
    reference "X * (0 + 1 + 2 + 3) + X * n * 4 - n"
{
    grid (R) as (r) threads(threads)
    acc = zeros(f32[1, C])
    for k in range(4) {
        acc += X[r : +1, :] * k + X[r : +1, :] * n
    }
    Y[r : +1, :] = acc - n
}
"""


@pytest.mark.parametrize("n", [0, 6])
def test_single_value_tiles_read_their_value(tmp_path, n):
    """`X * k` (a loop index) and `X * n`, `acc - n` (a runtime scalar): the fills are not stored."""
    path = tmp_path / "sc.tk"
    path.write_text(SCALARS)
    src = _cuda(str(path))
    assert src.count("nothing to do: the ops that read") == 3 and "__syncthreads" not in src
    emulate.check_against_torch(str(path), None, DISTS, {"n": n})


UPDATED = """
kernel upd<threads=32>(X: f32[R, N]) -> (Y: f32[R, N])
    where R = 2, N = 64
    reference "torch.stack([X[:, 0::2], X[:, 0::2] + X[:, 1::2]], -1).reshape(R, N)"
{
    grid (R) as (r) threads(threads)
    acc = X[r : +1, 0 : +N / 2 : 2] * 1.0
    Y[r : +1, 0 : +N / 2 : 2] = acc
    acc += X[r : +1, 1 : +N / 2 : 2]
    Y[r : +1, 1 : +N / 2 : 2] = acc
}
"""


def test_a_source_updated_between_the_stores_is_not_interleaved(tmp_path):
    """The even store's source changes before the odd store: storing both at the odd store
    would write the updated values into the even elements."""
    path = tmp_path / "upd.tk"
    path.write_text(UPDATED)
    assert "interleaved" not in _cuda(str(path))
    emulate.check_against_torch(str(path), None, DISTS)


HOIST = """
kernel hoist<threads=32>(X: f32[R, N]) -> (Y: f32[R, C])
    where R = 3, C = 40, N = 160
    requires N == 4 * C
    reference "X[:, 0:C] * 3.0 + X[:, C:2*C] * 3.0 + X[:, 2*C:3*C] * 4.0 + X[:, 3*C:4*C] * 0.5"
{
    grid (R) as (r) threads(threads)
    acc = X[r : +1, 0 : +C] * 1.0
    prev = X[r : +1, 0 : +C]
    for k in range(1, 4) {
        acc += prev * (k + 1)
        prev = X[r : +1, k*C : +C]
    }
    Y[r : +1, :] = acc + prev * 0.5
}
"""


def _loop_body(module):
    return next(op for op in module.walk() if op.name == "tile.for").body.ops


def load_straight_into_prev(tmp_path, target: str):
    """HOIST optimized for `target`, its IR edited so that the loop's load goes straight into
    `prev` (the copy through a fresh tile removed): `acc += prev * (k + 1)` then reads the tile
    that the load overwrites, so the load must stay after it."""
    path = tmp_path / "hoist.tk"
    path.write_text(HOIST)
    module = driver.optimize(driver.frontend(str(path)), target)
    body = _loop_body(module)
    load = next(op for op in body if op.name == "tile.copy" and op.operands[0].type.space == "global")
    move = next(op for op in body if op.name == "tile.copy" and op.operands[0] is load.operands[1])
    load.operands[1] = move.operands[1]
    body.remove(move)
    return module


def test_loads_move_to_the_start_of_a_trip(tmp_path):
    """The loop's load of the next window is emitted first in the trip, before the multiply-add
    that reads the previous one (a copy into a fresh tile, then into `prev`)."""
    path = tmp_path / "hoist.tk"
    path.write_text(HOIST)
    src = _cuda(str(path))
    trip = src[src.index("for (int k = 1;"):]
    assert trip.index("tile.copy(%X, ") < trip.index("tile.elementwise(%prev, ")
    emulate.check_against_torch(str(path), None, DISTS)


def test_a_load_into_a_tile_read_earlier_stays_after_the_read(tmp_path):
    """The same kernel with the load written straight into `prev` (IR edited: the copy through a
    fresh tile removed): `acc += prev * (k + 1)` must read the previous trip's window, so the
    load cannot move above it."""
    module = load_straight_into_prev(tmp_path, "cuda")
    src = cuda.emit(module)
    trip = src[src.index("for (int k = 1;"):]
    assert trip.index("tile.elementwise(%prev, ") < trip.index("tile.copy(%X, %prev)")
    kernel = emulate.Emulated(module)
    import numpy as np
    import torch

    x = torch.randn(3, 160, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float()
    (y,) = kernel([x.numpy(), np.zeros((3, 40), np.float32)], [1])
    c = 40
    ref = x[:, :c] * 3 + x[:, c:2 * c] * 3 + x[:, 2 * c:3 * c] * 4 + x[:, 3 * c:] * 0.5
    np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-5)

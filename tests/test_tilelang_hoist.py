"""The TileLang backend's load hoisting (codegen/tilelang.py `hoist_loads`): in a serial loop's
body, a copy of an input window into a register tile moves up to the start of the trip, or to
just after the last earlier op that touches that tile, so a trip's loads are in flight together
(decode attention's V rows with its K rows, before the softmax's barriers). The moved loads are
checked on the CPU form (`tilelang-cpu`) against float64 torch, and a load into a tile that the
trip reads earlier stays after that read."""

from __future__ import annotations

import os
import sys

import torch

from codegen.tir import load_prim_func
from tkc import driver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cuda_access_emulated import HOIST, load_straight_into_prev  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_cpu(module, x: torch.Tensor) -> torch.Tensor:
    """The module through TileLang's C target (as tkc/runtime.py builds it) on `x`."""
    import tilelang

    artifact = driver.emit(module, "tilelang-cpu")
    func = load_prim_func(artifact.source_path, f"tkc_test_hoist_{artifact.key[:16]}")
    kernel = tilelang.compile(func, target="c", compile_flags=["-O2"])
    y = torch.full((3, 40), float("nan"))
    kernel(x, y)
    return y


def _reference(x: torch.Tensor) -> torch.Tensor:
    x, c = x.double(), 40
    return x[:, :c] * 3 + x[:, c:2 * c] * 3 + x[:, 2 * c:3 * c] * 4 + x[:, 3 * c:] * 0.5


def _trip(source: str) -> str:
    return source[source.index("for k in T.serial("):]


def _inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(3, 160, generator=g, dtype=torch.float64) * torch.logspace(-2, 2, 160, dtype=torch.float64)).float()


def test_attention_loads_its_k_and_v_rows_together():
    """attention.tk through `tilelang` at 48-wide heads: each trip's KC and VC windows are its
    first two statements, before the row sums, the softmax and the column sums."""
    path = os.path.join(ROOT, "examples", "attention.tk")
    module = driver.optimize(driver.frontend(path, {"H": 6, "HD": 48, "KVD": 288}), "tilelang")
    source = driver.emit(module, "tilelang").source
    trip = source[source.index("for t in T.serial("):].split("\n")
    assert trip[1].strip().startswith("T.copy(KC[") and trip[2].strip().startswith("T.copy(VC["), trip[:4]


def test_a_loop_s_load_moves_to_the_start_of_the_trip(tmp_path):
    """The next window's load (into a fresh tile, then copied into `prev`) is the trip's first
    statement, before the multiply-add that reads the previous window; the result matches."""
    path = tmp_path / "hoist.tk"
    path.write_text(HOIST)
    module = driver.optimize(driver.frontend(str(path)), "tilelang-cpu")
    trip = _trip(driver.emit(module, "tilelang-cpu").source)
    assert trip.index("X[r + i, k * 40 + j]") < trip.index("prev[0, j] * ")
    x = _inputs()
    y = _run_cpu(module, x)
    torch.testing.assert_close(y.double(), _reference(x), rtol=1e-5, atol=1e-5)


def test_a_load_into_a_tile_read_earlier_stays_after_the_read(tmp_path):
    """The same kernel with the load written straight into `prev` (IR edited: the copy through a
    fresh tile removed): `acc += prev * (k + 1)` must read the previous trip's window, so the
    load cannot move above it."""
    module = load_straight_into_prev(tmp_path, "tilelang-cpu")
    trip = _trip(driver.emit(module, "tilelang-cpu").source)
    assert trip.index("prev[0, j] * ") < trip.index("X[r + i, k * 40 + j]")
    x = _inputs()
    y = _run_cpu(module, x)
    torch.testing.assert_close(y.double(), _reference(x), rtol=1e-5, atol=1e-5)

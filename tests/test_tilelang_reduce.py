"""Reductions on the `tilelang` backend (codegen/tilelang.py, passes/smem_tilelang.py
`thread_reduce`): register-tile reductions with power-of-two extents become TileLang's
`T.reduce_*` (threads combine over warp shuffles), others a serial loop over the axis; the
`tir` target and the runtime fall back to the serial form when TileLang finds no layout; the
shared-memory model counts the reduction's workspace. Numerics of `T.reduce_*` need a GPU:
tests/gpu/test_gpu_quick.py runs every example with reductions against torch through it.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from codegen import tilelang
from passes import smem_tilelang
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # test_smem_fit's TileLang lowering


def _module(path: str, **values):
    return driver.optimize(driver.frontend(os.path.join(ROOT, path), values), "tilelang")


def test_rmsnorm_rows_reduce_over_the_threads():
    """rmsnorm's rows (BR = 8 rows of 4096 over 1024 threads): one T.reduce_sum into a fragment
    without the axis, stored into the [8, 1] tile; not a serial loop over 4096 columns."""
    src = tilelang.emit(_module("examples/rmsnorm.tk", BR=8))
    assert "T.reduce_sum(t1, ss_red, dim=1)" in src, src
    assert "ss_red = T.alloc_fragment((8,), T.float32)" in src
    assert "ss[i, 0] = ss_red[i]" in src
    assert "T.serial(4096)" not in src
    serial = tilelang.emit(_module("examples/rmsnorm.tk", BR=8), thread_reduce=False)
    assert "T.reduce_" not in serial and "for j in T.serial(4096):" in serial


@pytest.mark.parametrize("n", [40, 96])
def test_rows_tilelang_cannot_shuffle_are_reduced_in_stages(n):
    """A last axis of 40 or 96 (TileLang's XOR shuffles need powers of two): the rows go to a
    shared tile, 32 lanes per row each combine every 32nd element of it, and T.reduce_* combines
    the lanes; no thread loops over a whole row. A power-of-two axis reduces directly."""
    src = tilelang.emit(_module("tests/programs/reduce.tk", N=n))
    assert f"T.alloc_shared((16, {n}), T.float32)" in src and "t0_red_part = T.alloc_fragment((16, 32)" in src
    assert "T.copy(x, t0_red_sh)" in src and f"if j + k * 32 < {n}:" in src
    assert "T.reduce_max(t0_red_part, t0_red, dim=1)" in src and f"T.serial({n})" not in src
    assert "T.reduce_max(x, t0_red, dim=1)" in tilelang.emit(_module("tests/programs/reduce.tk", N=32))
    serial = tilelang.emit(_module("tests/programs/reduce.tk", N=n), thread_reduce=False)
    assert "T.reduce_" not in serial and f"T.serial({n})" in serial


@pytest.mark.parametrize("n", [288, 768])
def test_rows_reduced_in_stages_keep_their_register_tiles_in_shared_memory(n):
    """rmsnorm at llama2.c's dims with two rows per block of 1024 threads: the [2, 1] result of a
    staged reduction had one row per 32 lanes, and TileLang carried that layout into the
    elementwise loops, so a thread held whole rows (`float x[768]`, 17-56x slower than torch
    on an H100). Every register tile of such a launch is a shared tile, and TileLang's CUDA
    (lowered here without a GPU) splits each loop across the block: no per-thread row arrays,
    no loop over a whole row. One row per block keeps its fragments; so does a launch with a
    thread reduction."""
    from test_smem_fit import _lower

    module = _module("examples/rmsnorm.tk", N=n, B=64)
    launch = next(op for op in module.func.walk() if op.name == "tile.launch")
    assert smem_tilelang.registers_in_shared(launch, 1024)
    src = tilelang.emit(module)
    assert f"T.alloc_fragment((2, {n},)" not in src and "T.alloc_fragment((2, 1,)" not in src
    assert f"x = T.alloc_shared((2, {n},), T.float32)" in src and "ss = T.alloc_shared((2, 1,), T.float32)" in src
    _, cuda = _lower(src)
    assert f"[{n}];" not in cuda and f"< {n // 4}; ++" not in cuda and f"< {n // 2}; ++" not in cuda, cuda
    assert f"if (((int)threadIdx.x) < {n})" in cuda  # the elementwise loops: one thread per pair of elements
    # check-smem-fit's model counts every tile without reuse: an upper bound of what TileLang
    # allocates (it reuses the bytes of dead tiles), and the sum of the tiles and the staged copy
    nbytes = smem_tilelang.plan(launch, module.env).total
    dyn = max(int(f.attrs["dyn_shared_memory_buf"]) for f in _lower(src)[0].functions.values()
              if "dyn_shared_memory_buf" in f.attrs)
    tiles = sum(op.result.type.nbytes({}) for op in launch.walk() if op.name == "tile.alloc")
    assert dyn <= nbytes <= tiles + 2 * n * 4 + 16 * 12 and nbytes >= tiles
    one_row = _module("examples/rmsnorm.tk", N=n, B=64, BR=1)
    assert "x = T.alloc_fragment" in tilelang.emit(one_row)
    pow2 = _module("examples/rmsnorm.tk", N=1024, B=64)
    assert not smem_tilelang.registers_in_shared(next(op for op in pow2.func.walk() if op.name == "tile.launch"), 1024)


def test_a_barrier_tilelang_cannot_place_falls_back_to_fragments():
    """Two rows of 72 over 128 threads: TileLang guards the shared tiles' loops with `tx < 72`
    and cannot put a barrier inside that guard (not whole warps). tkc/runtime.py and codegen/tir.py
    then compile the fragment form, which lowers."""
    from test_smem_fit import _lower

    module = _module("examples/rmsnorm.tk", B=4, N=72, threads=128)
    src = tilelang.emit(module)
    assert tilelang.SHARED_REGISTERS_MARK in src
    with pytest.raises(Exception) as info:
        _lower(src)
    assert tilelang.registers_shared_failed(src, info.value)
    assert tilelang.registers_shared_failed(src, RuntimeError("Index mapping does not form a bijective transform"))
    assert not tilelang.registers_shared_failed(src, RuntimeError("nvcc: out of memory"))
    fallback = tilelang.fallback_source(module, src, info.value)
    assert not tilelang.registers_shared_failed(fallback, info.value)  # no second time
    assert tilelang.SHARED_REGISTERS_MARK not in fallback and "x = T.alloc_fragment((2, 72,)" in fallback
    assert "T.reduce_sum" in fallback  # the staged reduction stays
    _lower(fallback)


def test_the_runtime_compiles_the_next_form_after_each_failure(monkeypatch, tmp_path):
    """tkc/runtime.py's build with a stand-in TileLang that rejects the shared-register form (a
    barrier it cannot place) and then the thread reductions (no layout): the third form, serial
    reductions over fragments, compiles, and the cache entry holds it."""
    import torch

    from codegen import tir
    from tkc import runtime
    from tkc.cache import Cache

    cache = Cache(str(tmp_path))
    artifact = driver.compile_file(os.path.join(ROOT, "examples/rmsnorm.tk"), "tilelang",
                                   {"B": 4, "N": 72, "threads": 128}, cache)
    assert tilelang.SHARED_REGISTERS_MARK in artifact.source
    tried = []

    class StandIn:
        @staticmethod
        def compile(source, target, **_):
            tried.append(source)
            if tilelang.SHARED_REGISTERS_MARK in source:
                raise RuntimeError("[ThreadSync] Cannot lower a required shared-memory sync inside the then branch")
            if "T.reduce_" in source:
                raise RuntimeError("no available layout found")
            return "kernel"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(runtime, "_tilelang", lambda cache: StandIn)
    monkeypatch.setattr(tir, "load_prim_func", lambda path, name: open(path, encoding="utf-8").read())
    assert runtime.build(artifact, cache) == "kernel"
    assert len(tried) == 3 and "T.reduce_sum" in tried[1] and "x = T.alloc_fragment((2, 72,)" in tried[1]
    assert "T.reduce_" not in tried[2] and open(artifact.source_path, encoding="utf-8").read() == tried[2]
    tried.clear()
    monkeypatch.setattr(StandIn, "compile", staticmethod(lambda source, target, **_: (_ for _ in ()).throw(
        RuntimeError("something else"))))
    with pytest.raises(runtime.BackendError, match="something else"):
        runtime.build(artifact, cache)


def test_tir_falls_back_to_the_serial_form(monkeypatch):
    """Forced onto a tile TileLang cannot lay out for `T.reduce_*` (16 x 40 over 128 threads:
    "no available layout found"), `tir` lowers the serial form instead of failing."""
    pytest.importorskip("tilelang")
    from codegen import tir

    module = _module("tests/programs/reduce.tk", N=40)
    monkeypatch.setattr(tilelang, "thread_reduce", lambda op, threads: len(op.operands[0].type.shape) == 2)
    assert "T.reduce_max" in tilelang.emit(module)
    out = tir.emit(module)
    assert "AllReduce" not in out and "kernel `reduce`" in out
    monkeypatch.undo()
    assert "AllReduce" in tir.emit(_module("tests/programs/reduce.tk", N=32))


def test_the_workspace_is_one_element_per_thread():
    """rmsnorm's reduction spans 32 warps: TileLang gives it 1024 floats of shared memory (the
    kernel's only shared buffer, 4096 bytes as tests/test_smem_fit.py measures); attention's
    sum over 128 columns stays in one warp (no workspace), its other three reductions do not
    (3072 bytes: the three live at once, in the loop over the cache), at 64 positions per trip
    over 256 threads."""
    module = _module("examples/rmsnorm.tk")
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    plan = smem_tilelang.plan(launch, module.env)
    assert plan.total == 4096 and [b.workspace for b in plan.buffers] == [True]
    module = _module("examples/attention.tk", BT=64, threads=256)
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    reduces = [op for op in launch.walk() if op.name == "tile.reduce"]
    assert smem_tilelang.reduce_threads(reduces[0], 256) == set(range(32))
    inherited = smem_tilelang.replicated_tiles(launch, 256)
    assert [id(op.operands[0]) in inherited for op in reduces] == [False, True, True, True]
    assert [smem_tilelang.reduce_workspace(op, 256, id(op.operands[0]) in inherited)
            for op in reduces] == [0, 1024, 1024, 1024]
    assert smem_tilelang.plan(launch, module.env).total == 3072


def test_an_over_budget_workspace_is_named_in_the_diagnostic():
    """check-smem-fit's notes name a reduction's workspace and, with no tile to shrink, suggest
    fewer threads (rmsnorm's 4096 bytes against a 1000-byte limit)."""
    from passes.check_smem_fit import _tilelang_diagnostic

    module = _module("examples/rmsnorm.tk")
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    diag = _tilelang_diagnostic(smem_tilelang.plan(launch, module.env), launch, "rmsnorm", 1000, "sm_90")
    assert diag.message == "kernel `rmsnorm` needs 4096 bytes of shared memory per block; limit is 1000 on sm_90"
    assert any("the workspace of `sum` over axis 1 of `%" in n and "4096 bytes" in n for n in diag.notes), diag.notes
    assert diag.notes[-1].startswith("fix: use fewer threads per block"), diag.notes


@pytest.mark.parametrize("dtype, width, axis, pitch", [("f32", 48, 0, 49), ("f16", 48, 0, 50), ("f16", 33, 0, 34),
                                                       ("f32", 33, 0, 33), ("f64", 48, 0, 49), ("f32", 48, 1, 48)])
def test_a_staged_column_sum_pads_its_rows_to_an_odd_word_count(tmp_path, dtype, width, axis, pitch):
    """32 lanes read one column of 32 rows of the shared copy: rows of an even number of 4-byte
    words put those reads in few banks (48 f32: 2 banks, 16-way conflicts; attention at 48-wide
    heads through `tilelang` took 33.8 us at position 1023 on an H100, 22.5 padded to 49)."""
    text = f"""kernel k<threads=128>(X: {dtype}[R, C]) -> (Y: {dtype}[{'1, C' if axis == 0 else 'R, 1'}])
    where R = 64, C = {width}
{{
    grid (1) as (b) threads(threads)
    x = X[0 : +R, 0 : +C] * 1.5
    Y[0 : +{'1' if axis == 0 else 'R'}, 0 : +{'C' if axis == 0 else '1'}] = sum(x, {axis})
}}
"""
    path = tmp_path / "k.tk"
    path.write_text(text)
    module = driver.optimize(driver.frontend(str(path), {}), "tilelang")
    (op,) = [o for o in module.walk() if o.name == "tile.reduce"]
    assert smem_tilelang.staged_pitch(op) == pitch
    assert smem_tilelang.staged_bytes(op) == 64 * pitch * {"f16": 2, "f32": 4, "f64": 8}[dtype]


@settings(max_examples=examples(30, 60), deadline=None)
@given(n=st.integers(0, 600), stride=st.integers(1, 300), vec=st.sampled_from([1, 2, 4, 8, 16]),
       active=st.integers(1, 64))
def test_reduce_lanes_visit_one_period(n, stride, vec, active):
    """check-smem-fit's threads of a reduction (smem_tilelang.reduce_lanes) visit at most one
    period of the round-robin deal, with the brute force's answer, so a reduction over an
    enormous dim is not a loop over it."""
    assert smem_tilelang.reduce_lanes(n, stride, vec, active) == {(k * stride // vec) % active for k in range(n)}


def test_reduce_lanes_of_an_enormous_dim():
    assert smem_tilelang.reduce_lanes(10**15, 3, 4, 96) == set(range(96))

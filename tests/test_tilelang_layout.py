"""Register tiles on the `tilelang` backend whose element count is neither a multiple nor a
divisor of the block's threads. TileLang lays many of them out (rmsnorm's 768- and 288-wide rows
over 1024 threads: the llama2.c dims, which the GPU quick tier checks against torch; and
attention at 48-wide heads, whose rows are reduced in stages); where its
layout inference fails (a [16, 33] tile over 128 threads), the runtime and the `tir` target report a
located error at the tile that cannot be laid out (codegen/tilelang.py `layout_error`), with a
fix, instead of an internal compiler error. TileLang's lowering runs here without a GPU.
"""

from __future__ import annotations

import os

import pytest

from codegen import tilelang
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASYNC_33 = {"M": 33, "N": 33, "BM": 16}  # a [16, 33] f16 tile over 128 threads: no layout


def _module(path: str, **values):
    return driver.optimize(driver.frontend(os.path.join(ROOT, path), values), "tilelang")


@pytest.mark.parametrize("n", [768, 288])
def test_rmsnorm_rows_that_do_not_divide_over_the_threads_lower(n):
    pytest.importorskip("tilelang")
    from codegen import tir

    out = tir.emit(_module("examples/rmsnorm.tk", B=1, N=n))
    assert "kernel `rmsnorm`" in out and f"{n}" in out


def test_a_tile_tilelang_cannot_lay_out_is_a_located_error(capsys):
    pytest.importorskip("tilelang")
    from tkc.cli import main

    path = os.path.join(ROOT, "tests", "programs", "async_copy.tk")
    args = ["compile", path, "--target", "tir"] + [x for k, v in ASYNC_33.items() for x in ("-D", f"{k}={v}")]
    assert main(args) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:") and "error: TileLang cannot lay out register tile" in first, err
    assert "frag<f16[16, 33]> over 128 threads" in first and "internal compiler error" not in err
    assert "TileLang's layout inference failed" in err and "--target cuda" in err


def test_layout_error_needs_a_layout_failure_and_a_suspect_tile():
    """Only TileLang's layout messages, and only with a register tile that neither divides nor is
    a multiple of the threads, become the user error; anything else stays tkc's bug."""
    suspect = _module("tests/programs/async_copy.tk", **ASYNC_33)
    clean = _module("examples/rmsnorm.tk", B=1, N=4096)
    failure = RuntimeError("InternalError: Check failed: (has_best) is false: no available layout found")
    located = tilelang.layout_error(suspect, failure)
    assert located is not None and "cannot lay out register tile" in located.diagnostics[0].message
    # a layout TileLang built but could not check (generated programs through `tilelang` on an H100)
    bijective = RuntimeError('Layout Layout((16, 110, 1) -> (14, 128), ...) has errors: ("The iterations do not '
                             'traverse full iter space", "Index mapping does not form a bijective transform.")')
    assert tilelang.layout_error(suspect, bijective) is not None
    assert located.diagnostics[0].loc.file.endswith("async_copy.tk")
    assert tilelang.layout_error(suspect, RuntimeError("CUDA error: out of memory")) is None
    assert tilelang.layout_error(clean, failure) is None


def test_attention_at_48_wide_heads_lowers():
    """Its [BT, 48] scores row sums are reduced in stages (passes/smem_tilelang.py
    `staged_reduce`); T.reduce_* over the 48-wide rows found no layout."""
    pytest.importorskip("tilelang")
    from codegen import tir

    module = _module("examples/attention.tk", H=8, HD=48, S=64, KVD=384)
    assert "_red_part = T.alloc_fragment(" in tilelang.emit(module)
    assert "kernel `attention`" in tir.emit(module)


@pytest.mark.parametrize("hd, bt, threads", [(48, 256, 512), (48, 64, 256), (40, 128, 256)])
def test_attention_at_heads_that_are_no_power_of_two_keeps_its_tiles_spread(hd, bt, threads):
    """Decode attention at 48-wide heads (stories15M) through `tilelang`: the p-weighted V column
    sums are staged too (`staged_reduce` along axis 0), and the row and column vectors are shared
    tiles (`vectors_in_shared`), so TileLang lowers the form as emitted (before: no layout, and the
    fallback gave every thread the whole [BT, HD] tile, 5.1 ms on an H100 where torch took 21.6
    us), with each thread holding its share of the [BT, HD] tiles, not whole rows of them."""
    pytest.importorskip("tilelang")
    import re

    from test_smem_fit import _lower

    module = _module("examples/attention.tk", H=6, HD=hd, S=1024, KVD=6 * hd, BT=bt, threads=threads)
    source = tilelang.emit(module)
    assert tilelang.SHARED_VECTORS_MARK in source and source.count("_red_part = T.alloc_fragment(") == 2
    # the column sum's shared copy has rows of an odd number of words (smem_tilelang.staged_pitch)
    assert f"_red_sh = T.alloc_shared(({bt}, {hd + 1}), T.float32)" in source
    _, cuda_source = _lower(source)  # the emitted form itself: no fallback
    per_thread = max(int(n) for n in re.findall(r"^\s+(?:float|half_t|bool)\s+\w+\[(\d+)\];", cuda_source, re.M))
    assert per_thread <= 2 * -(-bt * hd // threads), (per_thread, bt * hd // threads)


BOOL_COMPARE = """kernel bools<BM=8>(X0: f32[M, N], X1: bf16[M, 1], K0: bool[M, N]) -> (O0: bf16[M, N], O1: bf16[M, N])
    where M = 14, N = 104
{
    grid (cdiv(M, BM)) as (m)
    x0 = X0[m*BM : +BM, :]
    x1 = X1[m*BM : +BM, :]
    k0 = K0[m*BM : +BM, :]
    O0[m*BM : +BM, :] = cast(where(k0, x1, x0), bf16)
    O1[m*BM : +BM, :] = cast(cast((k0 == (0.0 <= x0)), f32), bf16)
}
"""


def test_a_bool_tile_tilelang_cannot_vectorize_is_a_located_error(tmp_path, capsys):
    """TileLang 0.1.15 gives a thread 8 consecutive bools of `k == (0.0 <= x)` and has no CUDA
    type for them ("Cannot convert type boolx8"; a generated program through `tilelang` on an
    H100, 2026-11-26): a located error at the first bool tile that names `cuda`, not an internal
    compiler error. The same program through `cuda` is checked by the GPU program fuzz."""
    pytest.importorskip("tilelang")
    from tkc.cli import main

    path = tmp_path / "bools.tk"
    path.write_text(BOOL_COMPARE)
    assert main(["compile", str(path), "--target", "tir"]) == 1
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:7:") and "error: TileLang cannot emit the vector accesses of bool tile" in first, err
    assert "Cannot convert type boolx8" in err and "--target cuda" in err and "internal compiler error" not in err
    module = driver.optimize(driver.frontend(str(path), {}), "tilelang")
    assert tilelang.layout_error(module, RuntimeError("CUDA error: out of memory")) is None

"""The TileLang backend's rotating store tiles (passes/smem_tilelang.py `rotating_stores`): a
shared tile that only stages a store in a pipelined loop is written in STORE_BUFFERS copies, each
trip waiting only for the TMA store issued STORE_BUFFERS trips before. The GPU results are the
quick tier's `miss_split`/`peft_miss` edge cases (tests/edge_shapes.py, STAGE_C = 1)."""

from __future__ import annotations

import os
import re

import pytest

from codegen import tilelang as tilelang_gpu
from passes.smem_tilelang import STORE_BUFFERS, STREAM_BYTES, plan, rotating_stores
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISS_SPLIT = os.path.join(ROOT, "examples", "miss_split.tk")
BIG = {"K": 4096, "N": 4096, "R": 64, "BM": 64, "BN": 128, "U": 2}


def _module(**consts):
    return driver.optimize(driver.frontend(MISS_SPLIT, consts, dynamic=("M",)), "tilelang")


def _launch(module):
    return next(op for op in module.func.body.ops if op.name == "tile.launch")


def test_a_staged_store_in_a_pipelined_loop_rotates_over_its_copies():
    source = tilelang_gpu.emit(_module(**BIG, STAGE_C=1))
    assert tilelang_gpu.STORE_BUFFERS_MARK in source
    stage = re.search(r"(\w+) = T\.alloc_shared\(\(2, 64, 128,\), T\.float16\)", source).group(1)
    body = source[source.index("for j in T.Pipelined("):]
    lines = [line.strip() for line in body.splitlines()]
    written = f"T.copy(t7, {stage}[j % 2, :, :])"
    assert written in lines, body
    write = lines.index(written)
    # the trip waits for the store that last read this copy, then every thread may overwrite it
    assert lines[write - 2:write] == [f"T.tma_store_wait({STORE_BUFFERS - 1})", "T.sync_threads()"]
    # C (M x 4096 f16) holds STREAM_BYTES from M = 6400 on: from there its stores are marked
    # L2 evict-first, decided at run time since M is dynamic (streaming_store)
    assert STREAM_BYTES == 50 * 2**20 and -(-STREAM_BYTES // (4096 * 2)) == 6400
    assert lines[write + 1] == "# tkc: C is stored L2 evict-first from 50 MiB on (streaming_store)"
    assert lines[write + 2] == 'if T.Cast("int64", M) >= 6400:'
    store = f"T.tma_copy({stage}[j % 2, :, :], C[m * 64 : (m * 64) + 64, "
    assert lines[write + 3].startswith(store) and lines[write + 3].endswith(', eviction_policy="evict_first")')
    assert lines[write + 4] == "else:"
    assert lines[write + 5].startswith(store) and lines[write + 5].endswith("])")
    # after the loop, every store has read its copy before the bytes are reused or the block exits
    assert lines[write + 6:write + 8] == ["T.tma_store_wait(0)", "T.sync_threads()"]


@pytest.mark.parametrize("consts, why", [
    ({**BIG, "STAGE_C": 0}, "no staged tile: the fragment is stored directly"),
    ({**BIG, "STAGE_C": 1, "N": 4100}, "C's rows of 8200 bytes are not a multiple of 16 (no TMA store)"),
    ({**BIG, "STAGE_C": 1, "BN": 4, "N": 4096}, "a tile row of 8 bytes (TMA boxes move 16-byte rows)"),
])
def test_stores_that_are_not_a_whole_tma_store_stay_plain(consts, why):
    module = _module(**consts)
    assert not rotating_stores(_launch(module)), why
    source = tilelang_gpu.emit(module)
    assert tilelang_gpu.STORE_BUFFERS_MARK not in source and "T.tma_copy" not in source, why


STAGED = """kernel staged<BN=64, threads=128>(X: f32[M, N]) -> (Y: {dtype}[M, N])
    where M = 64, N = 256
{{
    grid (cdiv(M, 16)) as (m) threads(threads)
    for j in pipelined(cdiv(N, BN), 2) {{
        Y[m*16 : +16, j*BN : +BN] = shared(cast(X[m*16 : +16, j*BN : +BN] * 2.0, {dtype}))
    }}
}}
"""


@pytest.mark.parametrize("dtype, rotates", [("f16", True), ("bf16", True), ("f32", True), ("i8", False)])
def test_a_float_store_rotates_and_a_saturating_int_store_does_not(tmp_path, dtype, rotates):
    """A float -> int8 tile is written by an element loop that saturates (TileLang's T.copy wraps),
    which indexes the tile itself: it keeps one copy."""
    path = tmp_path / "staged.tk"
    path.write_text(STAGED.format(dtype=dtype))
    module = driver.optimize(driver.frontend(str(path), {}), "tilelang")
    assert bool(rotating_stores(_launch(module))) is rotates
    assert (tilelang_gpu.STORE_BUFFERS_MARK in tilelang_gpu.emit(module)) is rotates


@pytest.mark.parametrize("m, n, streams", [
    (64, 256, False),  # 64 KiB
    (51200, 256, True),  # 50 MiB of f32: STREAM_BYTES exactly
    (51136, 256, False),  # 64 rows (64 KiB) fewer
])
def test_a_static_output_of_l2_size_or_more_is_stored_evict_first(tmp_path, m, n, streams):
    """With static dims the policy is decided at compile time: no branch in the kernel."""
    path = tmp_path / "staged.tk"
    path.write_text(STAGED.format(dtype="f32"))
    source = tilelang_gpu.emit(driver.optimize(driver.frontend(str(path), {"M": m, "N": n}), "tilelang"))
    stores = [line.strip() for line in source.splitlines() if "T.tma_copy(" in line]
    assert len(stores) == 1 and "if " not in source[source.index("T.Pipelined("):]
    assert ("is stored L2 evict-first" in source) is streams
    assert stores[0].endswith(', eviction_policy="evict_first")' if streams else "])"), stores


def test_the_shared_memory_plan_counts_every_copy():
    module = _module(**BIG, STAGE_C=1)
    launch = _launch(module)
    tile = next(iter(rotating_stores(launch)))
    buf = next(b for b in plan(launch, {}).buffers if id(b.alloc.result) == tile)
    assert buf.versions == STORE_BUFFERS and buf.size == STORE_BUFFERS * 64 * 128 * 2
    # the same kernel without rotation (`store_buffers=False`) keeps one copy: the model must count
    # what the source allocates (tests/test_smem_fit.py compares it with TileLang's bytes)
    assert "T.alloc_shared((64, 128,), T.float16)" in tilelang_gpu.emit(module, store_buffers=False)


def test_a_tilelang_failure_falls_back_to_plain_stores_keeping_the_earlier_fallbacks():
    module = _module(**BIG, STAGE_C=1)
    source = tilelang_gpu.emit(module)
    again = tilelang_gpu.fallback_source(module, source, RuntimeError("T.tma_copy() cannot fall back to normal copy"))
    assert again is not None and tilelang_gpu.STORE_BUFFERS_MARK not in again and "T.tma_copy" not in again
    assert tilelang_gpu.fallback_source(module, again, RuntimeError("anything else")) is None


def test_the_lowered_cuda_waits_inside_the_loop_only_for_older_stores():
    pytest.importorskip("tilelang")
    from test_smem_fit import _lower

    _, cuda = _lower(tilelang_gpu.emit(_module(**BIG, STAGE_C=1)))
    loop = cuda[cuda.index("for (int j = 0;"):]
    loop = loop[:loop.index("\n  }\n")]
    assert f"tl::tma_store_wait<{STORE_BUFFERS - 1}, true>();" in loop
    # the evict-first stores only from M = 6400 on (the int64 test folds to an int comparison)
    streaming = loop[loop.index("if (6400 <= M) {"):]
    assert "tl::tma_store<tl::CacheHintSm90::EVICT_FIRST>(C_desc" in streaming[:streaming.index("} else {")]
    assert "EVICT_FIRST" not in streaming[streaming.index("} else {"):]
    assert "tma_store_wait<0" not in loop  # the plain form waits for each trip's own store here
    assert "tl::tma_store_wait<0, true>();" in cuda[cuda.index("for (int j = 0;"):]

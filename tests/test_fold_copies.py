"""passes/fold_copies.py and the TileLang backend's reshape views (codegen/tilelang.py
`find_views`): what they remove, that they change no value, and where they must not apply."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from dsl.interpreter import run
from passes.manager import parse_pipeline, run_pipeline
from tkc import driver, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (the interpreter takes no bf16 arrays: peft_miss_bf16 is peft_miss in bf16)
WITH_RESHAPE = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "examples", "*.tk"))
                      if "reshape(" in open(p, encoding="utf-8").read() and "bf16" not in os.path.basename(p))


def _module(name: str, pipeline: str, **consts):
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    return run_pipeline(driver.frontend(path, consts), parse_pipeline(pipeline))


def _ops(module, name: str):
    return [op for op in module.walk() if op.name == name]


def test_the_shard_sum_loads_into_the_staged_tile_and_adds_its_sum_from_registers():
    """miss_split's trip: before, the load went global -> registers -> shared and the [BM, 1, R]
    sum registers -> shared -> registers; after, one load into a staged shared tile, and the
    reshapes read the shared tile and the register sum."""
    pipeline = driver.default_pipeline("tilelang")
    after = _module("miss_split", pipeline, BM=64, U=2)
    before = _module("miss_split", pipeline.replace("fold-copies{backend=tilelang},", ""), BM=64, U=2)
    loop = next(op for op in after.walk() if op.name == "tile.for" and op.attrs["var"] == "s")
    copies = [op for op in loop.walk() if op.name == "tile.copy"]
    assert [(a.type.space, b.type.space) for a, b in (c.operands for c in copies)] == [("global", "shared")]
    assert copies[0].attrs.get("async")
    reshapes = [op.operands[0].type.space for op in loop.walk() if op.name == "tile.reshape"]
    assert reshapes == ["shared", "frag"]
    loop_before = next(op for op in before.walk() if op.name == "tile.for" and op.attrs["var"] == "s")
    assert len([op for op in loop_before.walk() if op.name == "tile.copy"]) == 4


def test_the_cuda_pipeline_folds_the_load_but_keeps_reshapes_on_shared_tiles():
    module = _module("miss_split", driver.default_pipeline("cuda"), BM=64, U=2)
    assert all(op.operands[0].type.space == "shared" for op in _ops(module, "tile.reshape"))
    loop = next(op for op in module.walk() if op.name == "tile.for" and op.attrs["var"] == "s")
    assert [op.operands[0].type.space for op in loop.walk() if op.name == "tile.copy"] == ["global", "frag"]


@pytest.mark.parametrize("name", WITH_RESHAPE)
def test_folding_changes_no_value(name):
    """The interpreter gives bit-identical outputs with and without fold-copies on every example
    that reshapes (seeded inputs; an empty list would mean the examples changed)."""
    assert "miss_split" in WITH_RESHAPE and len(WITH_RESHAPE) >= 5
    pipeline = "tile,defer-reduce,fold-copies,software-pipeline,map-dsmem"
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    lowered = driver.frontend(path)
    inputs = oracle.random_inputs(lowered, 3, "cpu", "normal")
    feed = {n: (t.numpy() if hasattr(t, "numpy") else t) for n, t in zip(oracle.input_names(lowered), inputs)}
    with_pass = run(run_pipeline(driver.frontend(path), parse_pipeline(pipeline)), dict(feed))
    without = run(run_pipeline(driver.frontend(path), parse_pipeline(pipeline.replace("fold-copies,", ""))), dict(feed))
    assert with_pass.keys() == without.keys() and with_pass
    for key in with_pass:
        np.testing.assert_array_equal(np.asarray(with_pass[key]), np.asarray(without[key]))


def test_tilelang_reads_the_shard_sum_through_views():
    """The generated trip reads the staged tile inside the reduction and the register sum in the
    add: no reshape loop, no buffer for either view."""
    from codegen import tilelang as tilelang_gpu

    text = tilelang_gpu.emit(_module("miss_split", driver.default_pipeline("tilelang"), BM=64, U=2))
    body = text[text.index("for s in T.Pipelined"):text.index("T.copy(S, Sh)")]
    assert body.count("T.copy(") == 1 and "T.copy(A[" in body  # the load, straight into the stage
    assert "T.Cast(T.float32, t1[" in body  # the reduction indexes the staged shared tile
    assert "S[i, k] = S[i, k] + t3[i, 0, k]" in body  # the add reads the [BM, 1, R] sum as it is
    assert "t2 = T.alloc" not in text and "t5 = T.alloc" not in text


def test_a_view_is_not_taken_when_its_source_changes_before_a_reader():
    """`v` is a reshape of the shared tile `sh`; `sh` is written again before `v`'s reader, so the
    reader must see the old values: the reshape is emitted as a loop into `v`."""
    from codegen import tilelang as tilelang_gpu
    from dsl.ir_parser import parse_module

    text = """tile.func() {consts = {threads = 128}, dims = {}, outputs = [1], reference = "", sym_name = "k", tiled = true} loc("k.tk":1:1) {
^(%X: global<f32[4, 8]>, %Y: global<f32[2, 16]>)
  tile.launch() {grid = ["1"], threads = "128", vars = ["b"]} loc("k.tk":2:1) {
    %sh = tile.alloc() : shared<f32[4, 8]> loc("k.tk":3:1)
    tile.copy(%X, %sh) {checked = [false, false], src_offsets = ["0", "0"]} loc("k.tk":3:1)
    %v = tile.alloc() : frag<f32[2, 16]> loc("k.tk":4:1)
    tile.reshape(%sh, %v) loc("k.tk":4:1)
    tile.fill(%sh) {value = 0.0} loc("k.tk":5:1)
    %c = tile.alloc() : frag<f32[2, 16]> loc("k.tk":6:1)
    tile.elementwise(%v, %c) {fn = "exp"} loc("k.tk":6:1)
    tile.copy(%c, %Y) {checked = [false, false], dst_offsets = ["0", "0"]} loc("k.tk":7:1)
  }
}
"""
    module = parse_module(text, "k.tkir")
    source = tilelang_gpu.emit(module)
    assert "v = T.alloc_fragment" in source and "T.exp(v[" in source
    x = np.arange(32, dtype=np.float32).reshape(4, 8) / 8
    np.testing.assert_allclose(run(module, {"X": x})["Y"], np.exp(x.reshape(2, 16)), rtol=1e-6)
    # without the fill the reader indexes `sh` directly
    viewed = parse_module(text.replace('    tile.fill(%sh) {value = 0.0} loc("k.tk":5:1)\n', ""), "k.tkir")
    source = tilelang_gpu.emit(viewed)
    assert "v = T.alloc_fragment" not in source and "T.exp(sh[" in source


def test_a_register_reshape_that_moves_elements_is_invalid_ir():
    from dsl.diagnostics import TkError
    from dsl.ir_parser import parse_module

    text = """tile.func() {consts = {threads = 128}, dims = {}, outputs = [1], reference = "", sym_name = "k", tiled = true} loc("k.tk":1:1) {
^(%X: global<f32[4, 8]>, %Y: global<f32[2, 16]>)
  tile.launch() {grid = ["1"], threads = "128", vars = ["b"]} loc("k.tk":2:1) {
    %a = tile.alloc() : frag<f32[4, 8]> loc("k.tk":3:1)
    tile.copy(%X, %a) {checked = [false, false], src_offsets = ["0", "0"]} loc("k.tk":3:1)
    %v = tile.alloc() : frag<f32[2, 16]> loc("k.tk":4:1)
    tile.reshape(%a, %v) loc("k.tk":4:1)
    tile.copy(%v, %Y) {checked = [false, false], dst_offsets = ["0", "0"]} loc("k.tk":5:1)
  }
}
"""
    from dsl.verifier import verify

    with pytest.raises(TkError, match="may only insert or remove dims of size 1"):
        verify(parse_module(text, "k.tkir"))

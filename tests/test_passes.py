"""passes/: pipeline specs, pass purity, and properties of tile, software-pipeline, check-smem-fit."""

from __future__ import annotations

import dataclasses
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsl import exprs
from dsl.diagnostics import TkError
from dsl.ir import print_module
from dsl.lower import lower
from dsl.ops import expr_attrs
from dsl.parser import parse
from passes.check_smem_fit import shared_buffers
from passes.manager import PASSES, format_pipeline, parse_pipeline, run_pipeline
from passes.targets import SMEM_LIMITS
from diag_util import check_rendered, position
from profiles import examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lowered(name: str, **overrides):
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    return lower(parse(src, path), src, overrides)


def test_pass_names_follow_their_file_stems():
    for name, cls in PASSES.items():
        stem = name.replace("-", "_")
        assert os.path.exists(os.path.join(ROOT, "passes", f"{stem}.py"))
        assert cls.__name__ == "".join(w.capitalize() for w in name.split("-")) + "Pass"
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        assert os.path.isdir(os.path.join(ROOT, "tests", "golden", stem))


@pytest.mark.parametrize("spec", ["tile", "tile{BM=64,BN=32}", "software-pipeline{stages=3}",
                                  "tile{BM=16},software-pipeline,check-smem-fit{target=sm_89}",
                                  " tile { BM = 8 } , check-smem-fit "])
def test_pipeline_spec_round_trip(spec):
    passes = parse_pipeline(spec)
    text = format_pipeline(passes)
    assert parse_pipeline(text) == passes
    assert format_pipeline(parse_pipeline(text)) == text


def test_empty_pipeline_is_identity():
    module = lowered("miss_v3")
    assert parse_pipeline("") == []
    assert print_module(run_pipeline(module, [])) == print_module(module)


def test_run_pipeline_leaves_its_input_alone_and_passes_keep_no_state():
    module = lowered("miss", M=100, K=200, N=72, R=32)
    before = print_module(module)
    passes = parse_pipeline("tile{BM=32},software-pipeline,check-smem-fit")
    first = print_module(run_pipeline(module, passes))
    assert print_module(module) == before
    assert print_module(run_pipeline(module, passes)) == first  # same instances, same result
    assert print_module(run_pipeline(module, parse_pipeline("tile{BM=32},software-pipeline,check-smem-fit"))) == first


def test_after_tile_everything_is_concrete():
    module = run_pipeline(lowered("miss_v3", M=100, N=200, K=256, R=32), parse_pipeline("tile"))
    assert not [op for op in module.walk() if op.name == "tile.require"]
    for op in module.walk():
        for v in list(op.results) + [a for r in op.regions for a in r.args]:
            assert all(isinstance(d, exprs.Num) for d in v.type.shape), f"{v}: {v.type}"
        for key, e in expr_attrs(op):
            assert exprs.names(e) <= {"m", "n", "s"}, (op.name, key, exprs.to_str(e))
        if op.name == "tile.copy" and any(o.type.space == "global" for o in op.operands):
            assert isinstance(op.attrs.get("checked"), list)


def test_smem_fix_note_prints_the_tile_shape():
    module = lowered("miss_mtile", N=1024, R=64)
    with pytest.raises(TkError) as info:
        run_pipeline(module, parse_pipeline("tile,software-pipeline,check-smem-fit{target=sm_89}"))
    fix = info.value.diagnostics[0].notes[-1]
    assert "[64, 1024]" in fix and "Num(" not in fix


def test_smem_check_before_tile_matches_after():
    """check-smem-fit evaluates symbolic shapes under the kernel's constants: same verdict either way."""
    for n, fits in ((1024, True), (4096, False)):
        module = lowered("miss_row", N=n)
        for spec in ("software-pipeline,check-smem-fit", "tile,software-pipeline,check-smem-fit"):
            try:
                run_pipeline(module, parse_pipeline(spec))
                ok = True
            except TkError as exc:
                ok = False
                assert "needs 524672 bytes" in exc.diagnostics[0].message
            assert ok == fits, spec


def test_a_second_tile_without_sizes_is_a_no_op():
    """passes/tile.py: the function is marked `tiled`; a second `tile` leaves it as it is (it
    neither rebinds the constants to their defaults nor rejects the pipeline)."""
    module = lowered("miss_v3", M=100, N=200, K=256, R=32)
    once = print_module(run_pipeline(module, parse_pipeline("tile{BM=32}")))
    assert once != print_module(run_pipeline(module, parse_pipeline("tile")))  # BM=32 shows in the IR
    assert print_module(run_pipeline(module, parse_pipeline("tile{BM=32},tile"))) == once
    assert print_module(run_pipeline(module, parse_pipeline("tile,tile"))) == \
        print_module(run_pipeline(module, parse_pipeline("tile")))


def test_a_second_tile_does_no_work(monkeypatch):
    """No-op means not run again: nothing is re-bound (re-binding concrete IR could pass
    unnoticed above, since binding twice happens to print the same)."""
    import passes.tile as tile_pass

    tiled = run_pipeline(lowered("miss_v3"), parse_pipeline("tile"))
    assert tiled.func.attrs["tiled"] is True
    before = print_module(tiled)

    def rebind(*args, **kwargs):
        raise AssertionError("the second `tile` bound the IR again")

    monkeypatch.setattr(tile_pass, "_bind", rebind)
    assert tile_pass.TilePass().run(tiled) is tiled
    assert print_module(tiled) == before


@pytest.mark.parametrize("spec", ["tile,tile{BM=32}", "tile{BM=32},tile{BM=32}", "tile{BN=64},tile{stages=2}"])
def test_a_second_tile_with_sizes_is_a_located_error(spec):
    """Sizes go to the first `tile`; a later one that binds any (even the same value) is an error
    at the kernel's declaration with a note saying where sizes go."""
    path = os.path.join(ROOT, "examples", "miss_v3.tk")
    with open(path, encoding="utf-8") as f:
        src = f.read()
    with pytest.raises(TkError) as info:
        run_pipeline(lowered("miss_v3"), parse_pipeline(spec))
    check_rendered(info.value.render(), path, *position(src, "kernel miss_v3"),
                   "`tile` already ran on this module: its tile sizes are bound", source=src,
                   notes=["pass tile sizes to the first `tile` in the pipeline (or with `-D`)"])


# ---- software-pipeline ------------------------------------------------------------------------
@settings(max_examples=examples(15, 80))
@given(st.sampled_from([16, 32, 64]), st.integers(1, 12), st.integers(1, 6), st.sampled_from([0, 1, 2, 5]))
def test_stages_are_clamped_to_the_trip_count(r, trips, stages, option):
    module = lowered("miss_v3", M=64, N=128, K=r * trips, R=r, stages=stages)
    spec = "tile,software-pipeline" + (f"{{stages={option}}}" if option else "")
    out = run_pipeline(module, parse_pipeline(spec))
    want = min(option or stages, trips)
    (loop,) = [op for op in out.walk() if op.name == "tile.for"]
    assert loop.attrs["stages"] == str(want) and loop.attrs["pipelined"] is True
    staged = [op for op in out.walk() if op.name == "tile.alloc" and "stages" in op.attrs]
    assert staged and all(op.attrs["stages"] == want for op in staged)
    assert all(op.result.type.space == "shared" for op in staged)
    assert not any(op is s for op in loop.body.ops for s in staged)  # hoisted out of the loop
    async_copies = [op for op in loop.walk() if op.name == "tile.copy" and op.attrs.get("async")]
    assert async_copies and all(c.operands[0].type.space == "global" and c.operands[1].type.space == "shared"
                                for c in async_copies)


# ---- check-smem-fit ---------------------------------------------------------------------------
@settings(max_examples=examples(20, 100))
@given(st.sampled_from([16, 32, 64, 128]), st.sampled_from([32, 64, 128, 256]), st.sampled_from([16, 32, 64]),
       st.integers(1, 8), st.sampled_from(sorted(SMEM_LIMITS)))
def test_smem_check_agrees_with_the_buffers_and_its_fix_works(bm, bn, r, stages, target):
    module = lowered("miss_v3", M=512, N=512, K=16 * r, R=r)
    staged = run_pipeline(module, parse_pipeline(f"tile{{BM={bm},BN={bn}}},software-pipeline{{stages={stages}}}"))
    (launch,) = [op for op in staged.func.body.ops if op.name == "tile.launch"]
    total = sum(b * s for _, b, s in shared_buffers(launch, staged.env))
    check = parse_pipeline(f"check-smem-fit{{target={target}}}")
    limit = SMEM_LIMITS[target]
    if total <= limit:
        assert print_module(run_pipeline(staged, check)) == print_module(staged)
        return
    with pytest.raises(TkError) as info:
        run_pipeline(staged, check)
    (d,) = info.value.diagnostics
    assert d.message == (f"kernel `miss_v3` needs {total} bytes of shared memory per block; "
                         f"limit is {limit} on {target}")
    assert d.loc == launch.loc
    *buffers, fix = d.notes
    assert len(buffers) == len(shared_buffers(launch, staged.env))
    m = re.fullmatch(r"fix: use at most (\d+) pipeline stages? \(e\.g\. `-D stages=\d+`\)", fix)
    if m:  # fewer stages fit, one more does not
        fits = int(m.group(1))
        assert 1 <= fits < stages
        ok = run_pipeline(module, parse_pipeline(f"tile{{BM={bm},BN={bn}}},software-pipeline{{stages={fits}}},"
                                                 f"check-smem-fit{{target={target}}}"))
        assert ok is not None
        with pytest.raises(TkError):
            run_pipeline(module, parse_pipeline(f"tile{{BM={bm},BN={bn}}},software-pipeline{{stages={fits + 1}}},"
                                                f"check-smem-fit{{target={target}}}"))
    else:
        m = re.match(r"fix: the largest tile `%(\S+)` \[.*?\] must shrink at least (\d+)x to fit", fix)
        assert m, fix
        sizes = {op.result.name: b * s for op, b, s in shared_buffers(launch, staged.env)}
        largest, factor = sizes[m.group(1)], int(m.group(2))
        assert largest == max(sizes.values())
        assert total - largest + largest // factor <= limit  # shrinking as told fits
        assert factor == 2 or total - largest + largest // (factor // 2) > limit  # and is needed


@pytest.mark.parametrize("name", ["miss", "miss_mtile", "miss_row", "miss_v3"])
def test_every_op_keeps_a_source_location_through_every_pass(name):
    module = lowered(name, M=100, K=192, N=72, R=32)
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    with open(path, encoding="utf-8") as f:
        nlines = len(f.read().splitlines())

    def check(pass_name, m):
        for op in m.walk():
            assert op.loc.file == path and 1 <= op.loc.line <= nlines and op.loc.col >= 1, \
                f"{op.name} has loc {op.loc} after `{pass_name}`"

    check("lowering", module)
    run_pipeline(module, parse_pipeline("tile,software-pipeline,check-smem-fit"), check)


@pytest.mark.parametrize("n, partial", [(200, True), (192, False)])
def test_the_interpreter_rejects_an_unguarded_access_past_the_end(n, partial):
    """The interpreter's strict check (what makes the interpreter catch a wrong `checked` mark of
    `tile`): tests/programs/row_sum_loop.tk's column loads, with N = 200 (the last tile, columns
    192..255, reaches past N) and N = 192 (no partial tile). Marking the column dim unchecked must
    be a ProgramError exactly when a tile reaches past the end, and name the tensor and range."""
    import numpy as np
    import torch

    from dsl.interpreter import ProgramError, run
    from tkc import driver, oracle

    path = os.path.join(ROOT, "tests", "programs", "row_sum_loop.tk")
    lowered = driver.frontend(path, {"M": 32, "N": n})
    tiled = run_pipeline(lowered, parse_pipeline("tile"))
    loads = [op for op in tiled.walk() if "checked" in op.attrs and op.operands[0].name in ("X", "H")]
    assert len(loads) == 2 and all(op.attrs["checked"] == [False, partial] for op in loads), \
        [op.attrs.get("checked") for op in loads]
    inputs = oracle.random_inputs(lowered, 3, "cpu")
    feed = {"X": inputs[0].numpy(), "H": inputs[1].numpy()}
    outs = run(tiled, feed)  # as marked: runs, and sums the rows
    for name, ref in zip(("S", "T"), oracle.reference(lowered, inputs)):
        out = torch.from_numpy(np.asarray(outs[name], np.float64))
        assert oracle.rel_error(out, ref) <= oracle.tolerance(lowered, name)
    loads[0].attrs["checked"] = [False, False]
    if partial:
        with pytest.raises(ProgramError, match=r"`X` dim 1: the tile \[192, 256\) reaches outside \[0, 200\)"):
            run(tiled, feed)
    else:
        run(tiled, feed)

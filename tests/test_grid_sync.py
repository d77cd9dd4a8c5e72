"""`sync grid` (a barrier of every block of the grid): the reference interpreter runs every block
in lockstep between grid barriers and reports global-memory races on the outputs; lowering
rejects a barrier that blocks could pass a different number of times; TileLang's targets give a
located error; the CUDA backend emits cooperative groups' grid sync and asks for a cooperative
launch. examples/llama_layer.tk (a whole llama2.c layer in one launch) against torch in float64
is in tests/test_edges.py; here it also runs inside tkc.models.llama against the torch reference.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

import tkc
from codegen.cuda import launch_config
from diag_util import check_rendered, position
from dsl.diagnostics import TkError
from tkc import driver, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Y = 2 X in row chunks over NB persistent blocks; after the barrier every block sums all of Y
# (written by the other blocks) into its chunks of Z
TWO_PHASES = """kernel two_phases<BN=16, NB=3>(X: f32[1, N]) -> (Y: f32[1, N], Z: f32[1, N])
    where N = 100
    reference "(2 * X, 2 * X.sum() + 0 * X)"
{
    grid (NB) as (b)
    for i in range(cdiv(N, BN * NB)) {
        Y[0 : +1, (i*NB + b)*BN : +BN] = X[0 : +1, (i*NB + b)*BN : +BN] * 2.0
    }
    SYNC
    s = zeros(f32[1, 1])
    for k in range(cdiv(N, BN)) {
        s += sum(Y[0 : +1, k*BN : +BN], 1)
    }
    for i in range(cdiv(N, BN * NB)) {
        Z[0 : +1, (i*NB + b)*BN : +BN] = full(f32[1, BN], 0.0) + s
    }
}
"""


def _write(tmp_path, text: str, name: str = "k.tk") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _check(path: str, dims: dict | None = None, dist: str = "offset", target: str = "interp", **consts):
    module = driver.frontend(path, {**(dims or {}), **consts})
    kernel = tkc.compile(path, target=target, **consts)
    inputs = oracle.random_inputs(module, 0, "cpu", dist)
    results = kernel(*inputs)
    results = results if isinstance(results, tuple) else (results,)
    budgets = oracle.error_budgets(module)
    for (name, dtype), out, ref in zip(oracle.outputs(module), results, oracle.reference(module, inputs)):
        err = oracle.rel_error(out, ref)
        assert err <= budgets[name].tol(dtype), f"{name}: {err}"


@pytest.mark.parametrize("nb", [1, 3, 8])
def test_blocks_read_what_other_blocks_stored_before_the_barrier(tmp_path, nb):
    _check(_write(tmp_path, TWO_PHASES.replace("SYNC", "sync grid")), NB=nb)


def test_a_read_of_another_blocks_store_without_the_barrier_is_a_race(tmp_path):
    text = TWO_PHASES.replace("SYNC", "")
    path = _write(tmp_path, text)
    with pytest.raises(TkError) as exc:
        _check(path)
    line, col = position(text, "Y[0 : +1, k*BN")
    check_rendered(exc.value.render(), path, line, col,
                   "race: a block reads `Y` where itself stored in the same phase; put a `sync grid` between the "
                   "store and the read", source=text, notes=["found by the reference interpreter (target `interp`)"])


def test_a_store_where_another_block_reads_in_the_phase_is_a_race(tmp_path):
    # block b reads block b + 1's chunk of Y, then overwrites its own: block 1 stores into what
    # block 0 read in the same phase
    text = """kernel war<BN=16, NB=3>(X: f32[1, N]) -> (Y: f32[1, N])
    where N = 48
    reference "X"
{
    grid (NB) as (b)
    Y[0 : +1, b*BN : +BN] = X[0 : +1, b*BN : +BN]
    sync grid
    t = Y[0 : +1, (b + 1) % NB * BN : +BN]
    Y[0 : +1, b*BN : +BN] = t
}
"""
    path = _write(tmp_path, text)
    with pytest.raises(TkError) as exc:
        _check(path)
    line, col = position(text, "Y[0 : +1, b*BN : +BN] = t")
    check_rendered(exc.value.render(), path, line, col, "race: a block stores into `Y` where another block reads "
                   "in the same phase; put a `sync grid` between the read and the store", source=text,
                   notes=["found by the reference interpreter (target `interp`)"])


def test_two_blocks_storing_the_same_elements_in_a_phase_is_a_race(tmp_path):
    text = TWO_PHASES.replace("SYNC", "sync grid").replace(
        "        Z[0 : +1, (i*NB + b)*BN : +BN] = full(f32[1, BN], 0.0) + s\n    }",
        "        Z[0 : +1, (i*NB + b)*BN : +BN] = full(f32[1, BN], 0.0) + s\n    }\n"
        "    Z[0 : +1, 0 : +BN] = full(f32[1, BN], 0.0) + s")
    with pytest.raises(TkError, match="race: two blocks store into the same elements of `Z` in one phase"):
        _check(_write(tmp_path, text))


def test_blocks_must_pass_the_same_barriers(tmp_path):
    text = TWO_PHASES.replace("SYNC", "for j in range(b) {\n        sync grid\n    }")
    path = _write(tmp_path, text)
    with pytest.raises(TkError) as exc:
        driver.frontend(path, {})
    line, col = position(text, "sync grid")
    check_rendered(exc.value.render(), path, line, col,
                   "`sync grid` in a loop whose trip count depends on `b`, which differs between blocks",
                   source=text, notes=["every block must pass the same grid barriers: give the loop at ..."])


def test_a_loop_over_dims_and_runtime_scalars_may_hold_the_barrier(tmp_path):
    text = TWO_PHASES.replace("SYNC", "for j in range(cdiv(N, 50)) {\n        sync grid\n    }")
    _check(_write(tmp_path, text))


def test_sync_grid_in_a_cluster_grid_is_an_error(tmp_path):
    text = """kernel c(X: f32[B, N]) -> (Y: f32[B, N])
    where B = 4, N = 8
{
    grid (B) as (b) cluster (2) as (r)
    sync grid
    Y[b : +1, :] = X[b : +1, :]
}
"""
    path = _write(tmp_path, text)
    with pytest.raises(TkError) as exc:
        driver.frontend(path, {})
    line, col = position(text, "sync grid")
    check_rendered(exc.value.render(), path, line, col, "`sync grid` in a grid with a `cluster`", source=text,
                   notes=["drop the cluster, or order the blocks of a cluster with `sync cluster`"])


def test_an_unknown_barrier_names_both(tmp_path):
    with pytest.raises(TkError, match="unknown barrier `sync block`") as exc:
        driver.frontend(_write(tmp_path, TWO_PHASES.replace("SYNC", "sync block")), {})
    assert "`sync cluster` or `sync grid`" in exc.value.render()


@pytest.mark.parametrize("target", ["tilelang-cpu", "tilelang"])
def test_tilelang_targets_cannot_express_it(tmp_path, target):
    text = TWO_PHASES.replace("SYNC", "sync grid")
    path = _write(tmp_path, text)
    with pytest.raises(TkError) as exc:
        driver.compile_file(path, target, {})
    line, col = position(text, "sync grid")
    check_rendered(exc.value.render(), path, line, col,
                   f"target `{target}` cannot express `sync grid` (a barrier of every block of the grid)", source=text,
                   notes=["compile with `--target cuda` (a cooperative launch), or run on the CPU with `--target interp`"])


def test_the_cuda_backend_syncs_the_grid_and_launches_cooperatively(tmp_path):
    art = driver.compile_file(_write(tmp_path, TWO_PHASES.replace("SYNC", "sync grid")), "cuda", {})
    src = art.source
    assert launch_config(src)["cooperative"] is True
    assert "#include <cooperative_groups.h>" in src
    body = src[src.index("// ---- kernel"):]
    syncs = [i for i, line in enumerate(body.splitlines()) if line.strip().startswith("cg::this_grid().sync();")]
    assert len(syncs) == 1, "one grid barrier statement (not a comment)"
    # the barrier sits between the loop that stores Y and the one that reads it
    at = sum(len(line) + 1 for line in body.splitlines()[:syncs[0]])
    assert body.index("&Y[(i * 3 + b) * 16") < at < body.index("&Y[k * 16")
    plain = driver.compile_file(_write(tmp_path, TWO_PHASES.replace("SYNC", ""), "p.tk"), "cuda", {}).source
    assert "cooperative" not in json.dumps(launch_config(plain)) and "this_grid" not in plain


def test_ir_text_round_trips(tmp_path):
    from dsl.ir import print_module
    from dsl.ir_parser import parse_module

    module = driver.frontend(_write(tmp_path, TWO_PHASES.replace("SYNC", "sync grid")), {})
    text = print_module(module)
    assert "tile.grid_barrier()" in text
    assert print_module(parse_module(text)) == text


def test_the_layer_kernel_in_the_model_matches_the_reference():
    """tkc.models.llama with examples/llama_layer.tk (target interp: the kernels through the
    reference interpreter) against the torch reference in float64, over 3 positions (the cache
    rows of earlier steps read back), grouped-query heads."""
    from tkc.models import llama_files as lf
    from tkc.models.llama import Llama
    from tkc.models.llama_reference import TorchLlama

    c = lf.Config(32, 40, 2, 4, 2, 24, 8, shared_classifier=True)
    w = lf.random_weights(c, seed=3)
    fused = Llama(c, w, target="interp", dtype="f32", layer_kernel=True, layer_consts={"NB": 3, "BT": 4})
    ref = TorchLlama(c, w, dtype=torch.float64)
    token = 1
    for pos in range(3):
        a, r = fused.step(token, pos), ref.step(token, pos)
        assert ((a.double() - r).abs().max() / r.abs().max()).item() < 1e-4
        token = int(torch.argmax(r))
    with pytest.raises(ValueError, match="layer_kernel needs target `cuda`"):
        Llama(c, w, target="tilelang-cpu", dtype="f32", layer_kernel=True)

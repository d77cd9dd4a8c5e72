"""Thread-block clusters (seed 001): the cluster-reduce examples in the reference interpreter with
simulated ranks against torch, race detection before `map-dsmem` and none after it (translation
validation of the barrier insertion), and the CLI on cluster kernels."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tkc
from dsl.interpreter import RaceError, run
from passes.manager import parse_pipeline, run_pipeline
from profiles import examples
from tkc.check import random_inputs, reference, rel_error
from tkc.driver import frontend, optimize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["cluster_reduce_hbm", "cluster_reduce_dsmem", "cluster_reduce_dsmem_pull"]
DSMEM = ["cluster_reduce_dsmem", "cluster_reduce_dsmem_pull"]


def path_of(name: str) -> str:
    return os.path.join(ROOT, "examples", f"{name}.tk")


def interpret(module, inputs):
    names = [a.name for a in module.func.body.args[: len(inputs)]]
    return run(module, {n: t.numpy() for n, t in zip(names, inputs)})


@pytest.mark.parametrize("name", EXAMPLES)
@settings(max_examples=examples(4, 20), deadline=None)
@given(clusters=st.integers(1, 6), n=st.integers(1, 300), stage=st.sampled_from([0, 1]), seed=st.integers(0, 2**16))
def test_interpreter_matches_torch(name, clusters, n, stage, seed):
    module = optimize(frontend(path_of(name), {"B": 2 * clusters, "N": n, "STAGE": stage}), "tilelang")
    inputs = random_inputs(module, seed, "cpu")
    out = interpret(module, inputs)["Y"]
    (ref,) = reference(module, inputs)
    assert rel_error(torch.from_numpy(out.astype(np.float32)), ref) < 1e-2


@pytest.mark.parametrize("name", DSMEM)
@settings(max_examples=examples(4, 20), deadline=None)
@given(clusters=st.integers(1, 4), n=st.integers(1, 200), seed=st.integers(0, 2**16))
def test_map_dsmem_removes_the_race(name, clusters, n, seed):
    """Without barriers the DSMEM reduces race (the interpreter says so: a remote read, or a
    remote store, unordered with the owner's accesses); after map-dsmem they do not, and they
    compute what the HBM variant computes."""
    dims = {"B": 2 * clusters, "N": n}
    tiled = run_pipeline(frontend(path_of(name), dims), parse_pipeline("tile"))
    inputs = random_inputs(tiled, seed, "cpu")
    with pytest.raises(RaceError):
        interpret(tiled, inputs)
    mapped = run_pipeline(tiled, parse_pipeline("map-dsmem"))
    hbm = optimize(frontend(path_of("cluster_reduce_hbm"), dims), "tilelang")
    np.testing.assert_array_equal(interpret(mapped, inputs)["Y"], interpret(hbm, inputs)["Y"])


def test_the_seeds_overwrite_race_is_caught_and_fixed(tmp_path):
    """Seed 001's DSMEM kernel overwrites its shared tile while the peer may still read it."""
    src = """kernel seed<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 4, N = 64
{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    S = shared(X[b : +1, :])
    sync cluster
    S = S + peer(S, (r + 1) % 2)
    sync cluster
    Y[b : +1, :] = S
}
"""
    path = tmp_path / "seed.tk"
    path.write_text(src)
    module = run_pipeline(frontend(str(path)), parse_pipeline("tile"))
    inputs = random_inputs(module, 1, "cpu")
    with pytest.raises(RaceError, match="while the peer writes it"):
        interpret(module, inputs)
    fixed = run_pipeline(module, parse_pipeline("map-dsmem"))
    x = inputs[0].float().numpy()
    want = x + x.reshape(2, 2, 64)[:, ::-1].reshape(4, 64)
    np.testing.assert_allclose(interpret(fixed, inputs)["Y"].astype(np.float32), want, rtol=1e-2, atol=1e-2)


def test_barrier_mismatch_is_reported(tmp_path):
    src = """kernel k<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 2, N = 8
{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    S = shared(X[b : +1, :])
    for i in range(r) {
        sync cluster
    }
    Y[b : +1, :] = S
}
"""
    path = tmp_path / "k.tk"
    path.write_text(src)
    module = optimize(frontend(str(path)), "tilelang")
    with pytest.raises(ValueError, match="must pass the same barriers"):
        interpret(module, random_inputs(module, 0, "cpu"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_interp_target_runs_cluster_kernels(name):
    kernel = tkc.compile(path_of(name), target="interp", STAGE=1)
    x = torch.randn(4, 96).half()
    y = kernel(x)
    want = torch.relu(x.float() + x.float().view(2, 2, 96).flip(1).reshape(4, 96))
    assert rel_error(y, want) < 1e-2


def test_run_defaults_to_the_interpreter_for_clusters_without_a_gpu(capsys):
    from tkc.cli import main

    if torch.cuda.is_available():
        pytest.skip("with a GPU `tkc run` picks tilelang")
    assert main(["run", path_of("cluster_reduce_dsmem"), "--check", "-D", "N=256", "-D", "B=4"]) == 0
    out = capsys.readouterr().out
    assert "ran on interp" in out and "ok" in out


@pytest.mark.parametrize("name", EXAMPLES)
def test_tilelang_cpu_says_it_cannot_express_clusters(name, capsys):
    from tkc.cli import main

    assert main(["compile", path_of(name), "--target", "tilelang-cpu"]) == 1
    err = capsys.readouterr().err
    assert "error: target `tilelang-cpu` cannot express thread-block clusters" in err.splitlines()[0]
    assert "--target interp" in err


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("stage", [0, 1])
def test_tilelang_gpu_source_uses_cluster_launch(name, stage):
    from tkc import driver
    from tkc.cache import Cache

    art = driver.compile_file(path_of(name), "tilelang", {"STAGE": stage}, Cache(os.environ["TKC_CACHE_DIR"]))
    assert "cluster_dims=2" in art.source and "T.block_rank_in_cluster()" in art.source
    assert ("tkc_peer_ptr" in art.source) == (name in DSMEM)
    assert art.source.count("T.cluster_sync()") == {"cluster_reduce_dsmem": 1, "cluster_reduce_dsmem_pull": 2}.get(name, 0)
    assert art.source.count("T.cluster_arrive_relaxed()") == (name == "cluster_reduce_dsmem")
    assert ("T.max(" in art.source) == (stage == 1)
    assert "T.annotate_restrict_buffers(X)" in art.source  # inputs of cluster kernels: no __restrict__


def test_tir_lowers_the_dsmem_example():
    from tkc import driver
    from tkc.cache import Cache

    art = driver.compile_file(path_of("cluster_reduce_dsmem"), "tir", {}, Cache(os.environ["TKC_CACHE_DIR"]))
    assert '"cluster_dims": [2, 1, 1]' in art.source and "tkc_peer_ptr" in art.source
    # The input is not __restrict__ (as in the CUDA backend: ld.global.nc loads were sunk below
    # the start barrier); the output keeps it.
    assert '"tl.non_restrict_params": [X]' in art.source


def test_tilelang_keeps_restrict_outside_clusters():
    from tkc import driver
    from tkc.cache import Cache

    art = driver.compile_file(os.path.join(ROOT, "examples", "miss.tk"), "tilelang", {},
                              Cache(os.environ["TKC_CACHE_DIR"]))
    assert "annotate_restrict_buffers" not in art.source


ZERO_TRIP = """kernel z<threads=128, Z=1>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 2, N = 64
    reference "X.view(-1, 2, N).flip(1).reshape(B, N).float()"
{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    S = shared(X[b : +1, :])
    for i in range(Z) {
        sync cluster
    }
    Y[b : +1, :] = peer(S, (r + 1) % 2)
}
"""


@pytest.mark.parametrize("z", [0, 1, 2])
def test_map_dsmem_does_not_trust_a_barrier_in_a_loop_that_may_not_run(tmp_path, z):
    path = tmp_path / "z.tk"
    path.write_text(ZERO_TRIP)
    module = optimize(frontend(str(path), {"Z": z}), "tilelang")
    inputs = random_inputs(module, z, "cpu")
    out = interpret(module, inputs)["Y"]
    (ref,) = reference(module, inputs)
    assert rel_error(torch.from_numpy(out.astype(np.float32)), ref) == 0


def test_a_race_found_by_the_interpreter_is_a_located_user_error(tmp_path, capsys):
    from tkc.cli import main

    path = tmp_path / "race.tk"
    path.write_text(ZERO_TRIP)
    # Without map-dsmem the program races: run the IR as lowered through `tkc opt` + interp.
    tiled = run_pipeline(frontend(str(path)), parse_pipeline("tile"))
    with pytest.raises(RaceError) as info:
        interpret(tiled, random_inputs(tiled, 0, "cpu"))
    assert info.value.loc.file == str(path) and info.value.loc.line == 10
    assert main(["run", str(path), "--target", "interp", "--check"]) == 0  # map-dsmem makes it race-free
    capsys.readouterr()


def test_static_if_constants_cannot_be_rebound_by_tile(capsys):
    from tkc.cli import main

    assert main(["opt", path_of("cluster_reduce_dsmem"), "-p", "tile{STAGE=1}"]) == 1
    err = capsys.readouterr().err
    assert "`STAGE` selects code in a static `if`" in err and "-D STAGE=1" in err
    assert main(["opt", path_of("cluster_reduce_dsmem"), "-D", "STAGE=1", "-p", "tile"]) == 0


PUSH = """kernel push<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 2, N = 64
    reference "X.view(-1, 2, N).flip(1).reshape(B, N).float()"
{{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    P = shared(f16[1, N])
{body}
}}
"""


@pytest.mark.parametrize("barriers, message", [
    ("", "before the first cluster barrier; the peer may not have started"),
    ("xy", "while the peer uses it"),  # a barrier before the store, none between it and the read
    ("y", "before the first cluster barrier; the peer may not have started"),  # one after the store only
])
def test_the_interpreter_orders_peer_stores(tmp_path, barriers, message):
    """A remote store needs a barrier before it (the peer must have started) and one between it
    and the owner's read; without either the interpreter reports the race, and map-dsmem adds
    exactly what is missing."""
    lines = ["    sync cluster" if "x" in barriers else None, "    peer(P, (r + 1) % 2) = X[b : +1, :]",
             "    sync cluster" if barriers == "y" else None, "    Y[b : +1, :] = P"]
    if barriers == "xy":
        lines[2] = None
    path = tmp_path / "push.tk"
    path.write_text(PUSH.format(body="\n".join(x for x in lines if x)))
    tiled = run_pipeline(frontend(str(path)), parse_pipeline("tile"))
    inputs = random_inputs(tiled, 0, "cpu")
    with pytest.raises(RaceError, match=message):
        interpret(tiled, inputs)
    mapped = run_pipeline(tiled, parse_pipeline("map-dsmem"))
    assert sum(op.name == "tile.cluster_barrier" for op in mapped.walk()) == 2
    (ref,) = reference(mapped, inputs)
    out = interpret(mapped, inputs)["Y"]
    assert rel_error(torch.from_numpy(out.astype(np.float32)), ref) == 0


def test_two_blocks_storing_into_one_peer_race(tmp_path):
    path = tmp_path / "two.tk"
    path.write_text("""kernel two<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 4, N = 64
{
    grid (B) as (b) cluster (4) as (r) threads(threads)
    P = shared(f16[1, N])
    sync cluster
    peer(P, 0) = X[b : +1, :]
    sync cluster
    Y[b : +1, :] = P
}
""")
    tiled = run_pipeline(frontend(str(path)), parse_pipeline("tile"))
    with pytest.raises(RaceError, match="two blocks access shared tile `P` of the same peer"):
        interpret(tiled, random_inputs(tiled, 0, "cpu"))


def test_a_relaxed_barrier_orders_no_memory(tmp_path):
    """map-dsmem's start barrier is relaxed: the interpreter does not let it order a load of S
    before a peer's read of S (the same program with a full barrier is race-free)."""
    path = tmp_path / "relaxed.tk"
    path.write_text("""kernel rel<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 2, N = 64
    reference "X.view(-1, 2, N).flip(1).reshape(B, N).float()"
{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    S = shared(X[b : +1, :])
    sync cluster
    T = peer(S, (r + 1) % 2)
    sync cluster
    Y[b : +1, :] = T
}
""")
    tiled = run_pipeline(frontend(str(path)), parse_pipeline("tile"))
    inputs = random_inputs(tiled, 0, "cpu")
    (ref,) = reference(tiled, inputs)
    assert rel_error(torch.from_numpy(interpret(tiled, inputs)["Y"].astype(np.float32)), ref) == 0
    first = next(op for op in tiled.walk() if op.name == "tile.cluster_barrier")
    first.attrs["relaxed"] = True
    with pytest.raises(RaceError, match="while the peer writes it"):
        interpret(tiled, inputs)


# Statements over two shared tiles S and P and a register tile A of a 2-block cluster (q is the
# peer's rank): local and remote (DSMEM) reads and writes in every combination.
STATEMENTS = [
    "S = shared(X[b : +1, :])",
    "S = cast(A, f16)",
    "P = S",
    "peer(P, (r + 1) % 2) = X[b : +1, :]",
    "peer(P, (r + 1) % 2) = S",
    "peer(S, (r + 1) % 2) = P",
    "A = A + peer(S, (r + 1) % 2)",
    "A = A + peer(P, (r + 1) % 2)",
    "A = A + P",
    "A = A * 0.5 + S",
]


def _cluster_program(stmts: list[str], loop: tuple[int, int] | None, synced: bool) -> str:
    body = []
    for i, s in enumerate(stmts):
        if loop is not None and i == loop[0]:
            body.append("for k in range(2) {")
        body.append(s)
        if synced:
            body.append("sync cluster")
        if loop is not None and i == loop[1]:
            body.append("}")
            if synced:
                body.append("sync cluster")
    lines = ["kernel prog<threads=64>(X: f16[B, N]) -> (Y: f32[B, N])", "    where B = 4, N = 16", "{",
             "    grid (B) as (b) cluster (2) as (r) threads(threads)",
             "    S = shared(f16[1, N])", "    P = shared(f16[1, N])", "    A = zeros(f32[1, N])"]
    lines += ["    sync cluster"] if synced else []
    lines += [f"    {s}" for s in body] + ["    Y[b : +1, :] = A", "}"]
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(25, 150), deadline=None)
@given(stmts=st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=6), data=st.data(),
       seed=st.integers(0, 2**16))
def test_map_dsmem_orders_every_mix_of_peer_accesses(tmp_path_factory, stmts, data, seed):
    """On any mix of local and remote reads and writes (possibly in a loop), the barriers
    map-dsmem inserts make the program race-free in the interpreter, and it computes what the
    same program computes with a cluster barrier after every statement."""
    loop = None
    if data.draw(st.booleans()):
        lo = data.draw(st.integers(0, len(stmts) - 1))
        loop = (lo, data.draw(st.integers(lo, len(stmts) - 1)))
    folder = tmp_path_factory.mktemp("mix")
    outs = []
    for synced in (False, True):
        path = folder / f"p{int(synced)}.tk"
        path.write_text(_cluster_program(stmts, loop, synced))
        module = optimize(frontend(str(path)), "tilelang")
        inputs = random_inputs(module, seed, "cpu")
        outs.append(interpret(module, inputs)["Y"])
    np.testing.assert_array_equal(outs[0], outs[1])

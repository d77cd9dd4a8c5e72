"""Thread-block clusters (seed 001): the cluster-reduce examples in the reference interpreter with
simulated ranks against torch, race detection before `map-dsmem` and none after it (translation
validation of the barrier insertion), and the CLI on cluster kernels.

Every numeric check is against torch in float64 on the same inputs (tkc/oracle.py), on every input
distribution, within the derived tolerance. Where an f16 output is rounded once (a copy, or the
sum of two f16 values), the interpreter's result is also exactly the float64 reference rounded to
f16: it adds in f32 and rounds to f16, and that double rounding is innocuous for a sum of two f16
values (f32's 24 bits >= 2 * 11 + 2: Figueroa, "When is double rounding innocuous?", 1995); relu
commutes with rounding."""

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
from tkc import oracle
from tkc.driver import frontend, optimize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["cluster_reduce_hbm", "cluster_reduce_dsmem", "cluster_reduce_dsmem_pull"]
DSMEM = ["cluster_reduce_dsmem", "cluster_reduce_dsmem_pull"]


def path_of(name: str) -> str:
    return os.path.join(ROOT, "examples", f"{name}.tk")


def interpret(module, inputs):
    names = [a.name for a in module.func.body.args[: len(inputs)]]
    return run(module, {n: t.numpy() for n, t in zip(names, inputs)})


def check_outputs(module, inputs, outs, exact: bool = False, where: str = "", zeros: bool = False) -> None:
    """Every output of `module` (the kernel as lowered: its reference and error budgets) in `outs`
    (name -> array or tensor) against torch in float64 on `inputs` within the derived tolerance;
    with `exact`, also bit-equal to the reference rounded to the output's dtype (the rounding the
    f16 output defines; see the module docstring for when that is sound). The reference must not
    be all zeros unless `zeros` (relu of all-negative inputs): then the output must be zeros too."""
    from tkc.runtime import TORCH_DTYPES

    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    assert len(refs) == len(oracle.outputs(module)) == len(outs)
    for (name, dtype), ref in zip(oracle.outputs(module), refs):
        out = outs[name]
        out = torch.from_numpy(np.asarray(out, np.float64)) if isinstance(out, np.ndarray) else out.double()
        assert zeros or ref.abs().max().item() > 0, f"{where}: `{name}`: the reference is all zeros"
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        assert err <= tol, f"{where}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"
        if exact:
            rounded = ref.to(getattr(torch, TORCH_DTYPES[dtype]))
            assert oracle.rel_error(out, rounded) == 0, f"{where}: `{name}` is not the reference rounded to {dtype}"


@pytest.mark.parametrize("name", EXAMPLES)
@settings(max_examples=examples(4, 20), deadline=None)
@given(clusters=st.integers(1, 6), n=st.integers(1, 300), stage=st.sampled_from([0, 1]),
       dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**16))
def test_interpreter_matches_torch(name, clusters, n, stage, dist, seed):
    lowered = frontend(path_of(name), {"B": 2 * clusters, "N": n, "STAGE": stage})
    module = optimize(lowered, "tilelang")
    inputs = oracle.random_inputs(lowered, seed, "cpu", dist)
    # At tiny N every sum can be zero (`ints` cancel) or negative (relu): an all-zero reference is
    # no free pass, the interpreter poisons outputs with NaN and rel_error then demands exact zeros.
    check_outputs(lowered, inputs, interpret(module, inputs), exact=True, where=dist, zeros=True)


@pytest.mark.parametrize("name", DSMEM)
@settings(max_examples=examples(4, 20), deadline=None)
# (n >= 16: at n = 1 the pull form's relu of small-integer sums is all zeros about half the time,
# which check_outputs refuses)
@given(clusters=st.integers(1, 4), n=st.integers(16, 200), dist=st.sampled_from(oracle.DISTRIBUTIONS),
       seed=st.integers(0, 2**16))
def test_map_dsmem_removes_the_race(name, clusters, n, dist, seed):
    """Without barriers the DSMEM reduces race (the interpreter says so: a remote read, or a
    remote store, unordered with the owner's accesses); after map-dsmem they do not, they match
    torch, and they compute exactly what the HBM variant computes."""
    dims = {"B": 2 * clusters, "N": n}
    lowered = frontend(path_of(name), dims)
    tiled = run_pipeline(lowered, parse_pipeline("tile"))
    inputs = oracle.random_inputs(lowered, seed, "cpu", dist)
    with pytest.raises(RaceError):
        interpret(tiled, inputs)
    mapped = run_pipeline(tiled, parse_pipeline("map-dsmem"))
    hbm_lowered = frontend(path_of("cluster_reduce_hbm"), dims)
    hbm = optimize(hbm_lowered, "tilelang")
    ours, theirs = interpret(mapped, inputs), interpret(hbm, inputs)
    check_outputs(lowered, inputs, ours, exact=True, where=f"{name} {dist}")
    check_outputs(hbm_lowered, inputs, theirs, exact=True, where=f"cluster_reduce_hbm {dist}")
    np.testing.assert_array_equal(ours["Y"], theirs["Y"])


def test_the_seeds_overwrite_race_is_caught_and_fixed(tmp_path):
    """Seed 001's DSMEM kernel overwrites its shared tile while the peer may still read it."""
    src = """kernel seed<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 4, N = 64
    reference "X + X.view(-1, 2, N).flip(1).reshape(B, N)"
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
    lowered = frontend(str(path))
    module = run_pipeline(lowered, parse_pipeline("tile"))
    inputs = oracle.random_inputs(module, 1, "cpu")
    with pytest.raises(RaceError, match="while the peer writes it"):
        interpret(module, inputs)
    fixed = run_pipeline(module, parse_pipeline("map-dsmem"))
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):
        inputs = oracle.random_inputs(lowered, seed, "cpu", dist)
        check_outputs(lowered, inputs, interpret(fixed, inputs), exact=True, where=dist)


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
        interpret(module, oracle.random_inputs(module, 0, "cpu"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_interp_target_runs_cluster_kernels(name):
    kernel = tkc.compile(path_of(name), target="interp", STAGE=1)
    module = frontend(path_of(name), {"B": 4, "N": 96, "STAGE": 1})
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):
        inputs = oracle.random_inputs(module, seed, "cpu", dist)
        y = kernel(*inputs)
        assert y.shape == (4, 96) and y.dtype == torch.float16
        check_outputs(module, inputs, {"Y": y}, exact=True, where=dist, zeros=dist == "negative")  # relu


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


def test_sixteen_block_clusters_compile_for_cuda_only(capsys):
    """sm_90's non-portable cluster sizes: target `cuda` compiles a 16-block cluster (its runtime
    sets the kernel's attribute; tests/gpu/test_gpu_nonportable_cluster.py launches it), TileLang
    rejects it at the grid statement and points at target `cuda`; 17 blocks are too many for both."""
    from tkc import driver
    from tkc.cache import Cache
    from tkc.cli import main

    path = os.path.join(ROOT, "examples", "attention_split.tk")
    art = driver.compile_file(path, "cuda", {"SPLIT": 16}, Cache(os.environ["TKC_CACHE_DIR"]))
    assert "__cluster_dims__(16, 1, 1)" in art.source
    assert main(["compile", path, "--target", "tilelang", "-D", "SPLIT=16"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{path}:24:5: error: a cluster of 16 blocks exceeds the portable size 8"
    assert "target `cuda` launches" in err[-1] and "use target `cuda` or a smaller cluster" in err[-1]
    assert main(["compile", path, "--target", "cuda", "-D", "SPLIT=17"]) == 1
    assert "a cluster of 17 blocks is too large; sm_90 allows at most 16" in capsys.readouterr().err


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
    reference "X.view(-1, 2, N).flip(1).reshape(B, N)"
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
    lowered = frontend(str(path), {"Z": z})
    module = optimize(lowered, "tilelang")
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):  # a copy: exactly the inputs' f16 values
        inputs = oracle.random_inputs(lowered, seed + z, "cpu", dist)
        check_outputs(lowered, inputs, interpret(module, inputs), exact=True, where=dist)


def test_a_race_found_by_the_interpreter_is_a_located_user_error(tmp_path, capsys):
    from tkc.cli import main

    path = tmp_path / "race.tk"
    path.write_text(ZERO_TRIP)
    # Without map-dsmem the program races: run the IR as lowered through `tkc opt` + interp.
    tiled = run_pipeline(frontend(str(path)), parse_pipeline("tile"))
    with pytest.raises(RaceError) as info:
        interpret(tiled, oracle.random_inputs(tiled, 0, "cpu"))
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
    reference "X.view(-1, 2, N).flip(1).reshape(B, N)"
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
    lowered = frontend(str(path))
    tiled = run_pipeline(lowered, parse_pipeline("tile"))
    inputs = oracle.random_inputs(tiled, 0, "cpu")
    with pytest.raises(RaceError, match=message):
        interpret(tiled, inputs)
    mapped = run_pipeline(tiled, parse_pipeline("map-dsmem"))
    assert sum(op.name == "tile.cluster_barrier" for op in mapped.walk()) == 2
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):  # a copy: exactly the inputs' f16 values
        inputs = oracle.random_inputs(lowered, seed, "cpu", dist)
        check_outputs(lowered, inputs, interpret(mapped, inputs), exact=True, where=dist)


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
        interpret(tiled, oracle.random_inputs(tiled, 0, "cpu"))


def test_a_relaxed_barrier_orders_no_memory(tmp_path):
    """map-dsmem's start barrier is relaxed: the interpreter does not let it order a load of S
    before a peer's read of S (the same program with a full barrier is race-free)."""
    path = tmp_path / "relaxed.tk"
    path.write_text("""kernel rel<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 2, N = 64
    reference "X.view(-1, 2, N).flip(1).reshape(B, N)"
{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    S = shared(X[b : +1, :])
    sync cluster
    T = peer(S, (r + 1) % 2)
    sync cluster
    Y[b : +1, :] = T
}
""")
    lowered = frontend(str(path))
    tiled = run_pipeline(lowered, parse_pipeline("tile"))
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):  # a copy: exactly the inputs' f16 values
        inputs = oracle.random_inputs(lowered, seed, "cpu", dist)
        check_outputs(lowered, inputs, interpret(tiled, inputs), exact=True, where=dist)
    first = next(op for op in tiled.walk() if op.name == "tile.cluster_barrier")
    first.attrs["relaxed"] = True
    with pytest.raises(RaceError, match="while the peer writes it"):
        interpret(tiled, inputs)


# Statements over two shared tiles S and P and a register tile A of a 2-block cluster (q is the
# peer's rank): local and remote (DSMEM) reads and writes in every combination. Each maps to the
# tile it writes and its value in float64 for every block at once (rows of [B, N] tensors; `q` is
# the row of each block's peer, b ^ 1): a peer store `peer(P, q) = v` gives every block's P its
# peer's v. `cast(A, f16)` does not round here: the tolerance allows that rounding (oracle).
STATEMENTS = {
    "S = shared(X[b : +1, :])": ("S", lambda x, S, P, A, q: x),
    "S = cast(A, f16)": ("S", lambda x, S, P, A, q: A),
    "P = S": ("P", lambda x, S, P, A, q: S),
    "peer(P, (r + 1) % 2) = X[b : +1, :]": ("P", lambda x, S, P, A, q: x[q]),
    "peer(P, (r + 1) % 2) = S": ("P", lambda x, S, P, A, q: S[q]),
    "peer(S, (r + 1) % 2) = P": ("S", lambda x, S, P, A, q: P[q]),
    "A = A + peer(S, (r + 1) % 2)": ("A", lambda x, S, P, A, q: A + S[q]),
    "A = A + peer(P, (r + 1) % 2)": ("A", lambda x, S, P, A, q: A + P[q]),
    "A = A + P": ("A", lambda x, S, P, A, q: A + P),
    "A = A * 0.5 + S": ("A", lambda x, S, P, A, q: A * 0.5 + S),
}


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


def _mix_in_torch(stmts: list[str], loop: tuple[int, int] | None, x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Y of the statement mix in float64 from the input X (one statement at a time in every block,
    which is what the program with a cluster barrier after every statement computes), and the
    largest |A| that `cast(A, f16)` rounds. Shared tiles start as NaN, as the interpreter poisons
    them: a block whose A reads a tile before anything wrote it ends with a NaN row in both."""
    x = x.double()
    tiles = {"S": torch.full_like(x, float("nan")), "P": torch.full_like(x, float("nan")), "A": torch.zeros_like(x)}
    q = torch.arange(x.shape[0]) ^ 1  # each block's peer in its 2-block cluster
    order = list(range(len(stmts)))
    if loop is not None:
        order = order[:loop[0]] + order[loop[0]:loop[1] + 1] * 2 + order[loop[1] + 1:]
    peak = 0.0
    for i in order:
        if stmts[i] == "S = cast(A, f16)":
            peak = max(peak, tiles["A"].nan_to_num(0.0).abs().max().item())
        target, fn = STATEMENTS[stmts[i]]
        tiles[target] = fn(x, tiles["S"], tiles["P"], tiles["A"], q)
    return tiles["A"], peak


@settings(max_examples=examples(25, 150), deadline=None)
@given(stmts=st.lists(st.sampled_from(sorted(STATEMENTS)), min_size=1, max_size=6), data=st.data(),
       dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**16))
def test_map_dsmem_orders_every_mix_of_peer_accesses(tmp_path_factory, stmts, data, dist, seed):
    """On any mix of local and remote reads and writes (possibly in a loop), the barriers
    map-dsmem inserts make the program race-free in the interpreter, it matches the mix computed
    by torch in float64 (a NaN row exactly where a block reads a tile nothing wrote), and it
    computes exactly what the same program computes with a cluster barrier after every statement."""
    loop = None
    if data.draw(st.booleans()):
        lo = data.draw(st.integers(0, len(stmts) - 1))
        loop = (lo, data.draw(st.integers(lo, len(stmts) - 1)))
    folder = tmp_path_factory.mktemp("mix")
    lowered = []
    for synced in (False, True):
        path = folder / f"p{int(synced)}.tk"
        path.write_text(_cluster_program(stmts, loop, synced))
        lowered.append(frontend(str(path)))
    (x,) = oracle.random_inputs(lowered[0], seed, "cpu", dist)
    ref, peak = _mix_in_torch(stmts, loop, x)
    for _ in range(40):  # halve X (exactly, as the oracle does) until `cast(A, f16)` cannot overflow
        if peak <= oracle.MAX_FINITE["f16"] / 8:
            break
        x = x * 0.5
        ref, peak = _mix_in_torch(stmts, loop, x)
    outs = [torch.from_numpy(interpret(optimize(m, "tilelang"), [x])["Y"]).double() for m in lowered]
    np.testing.assert_array_equal(outs[0].numpy(), outs[1].numpy())
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(outs[0]), nan), "NaN rows differ from the reads of unwritten tiles"
    tol = oracle.error_budgets(lowered[0])["Y"].tol("f32")
    err = oracle.rel_error(outs[0][~nan], ref[~nan])
    assert err <= tol, f"relative error {err:.3e} > tolerance {tol:.3e}"


@pytest.mark.parametrize("path", ["tests/fuzz_regressions/dsmem_bytes_reused.tk", "examples/cluster_reduce_dsmem.tk",
                                  "examples/cluster_reduce_dsmem_pull.tk"])
def test_cuda_keeps_the_bytes_peers_access_to_itself(path):
    """The cuda backend's shared-memory placement gives no other buffer the bytes of a tile the
    peer block reads or writes through DSMEM: the peer may access them until the kernel's last
    cluster barrier (a register tile placed over them broke a generated program on an H200)."""
    from dsl.ops import peer_tiles
    from passes.cuda_placement import make_plan

    module = optimize(frontend(os.path.join(ROOT, path)), "cuda")
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    plan = make_plan(module, launch, int(launch.attrs["threads"]))
    peers = peer_tiles(launch)
    shared = [b for b in plan.order if id(b.value) in peers]
    assert shared, "no peer tile in shared memory"
    for p in shared:
        for b in plan.order:
            if b is not p:
                assert b.offset + b.nbytes <= p.offset or p.offset + p.nbytes <= b.offset, (
                    f"`{b.value}` [{b.offset}, {b.offset + b.nbytes}) overlaps peer tile `{p.value}` "
                    f"[{p.offset}, {p.offset + p.nbytes})")

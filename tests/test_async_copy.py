"""Top-level global -> shared copies through cp.async, on the CPU: codegen/cuda.py (`wait_copies`,
codegen/cuda_access.py `op_copy`) and codegen/tilelang.py (`async_ok`, `global_copy`) issue a
`S = shared(X[...])` outside loops as cp.async + commit and wait (`cp.async.wait_group 0`) only
before the first op that touches the tile, before a loop, or when the block exits; a reader with
another thread map gets a `__syncthreads()` after the wait. Copies in loops, copies into tiles
that peer blocks read or write through DSMEM, and TileLang copies that are not whole 16-byte
words or need edge checks, stay synchronous. nvcc builds the CUDA output; the
interpreter (which the codegen change does not touch) still agrees with torch in float64 on every
input distribution, within the derived tolerance (tkc/oracle.py). Running the kernels needs a
GPU: tests/gpu/."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen import cuda
from codegen import tilelang as tilelang_gpu
from dsl.interpreter import run
from profiles import examples
from test_cuda import needs_nvcc, nvcc_all  # the nvcc helpers of the CUDA backend tests
from tkc import driver, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A tile copied at top level, then read by a row reduction: each thread sums other threads'
# cp.async chunks, so it needs a barrier after the wait.
ROWSUM = """\
kernel rowsum<BM=16, threads=128>(X: f16[M, N]) -> (Y: f32[M, 1])
    where M = 64, N = 256
    reference "torch.sum(X, 1, keepdim=True)"
{
    grid (cdiv(M, BM)) as (m) threads(threads)
    S = shared(X[m*BM : +BM, :])
    Y[m*BM : +BM, 0 : +1] = sum(S, 1)
}
"""

# The same with a cluster barrier between the copy and the read (S is not accessed remotely, so
# the copy stays in flight across the barrier).
CLUSTER_SUM = """\
kernel clsum<BM=16, threads=128>(X: f16[M, N]) -> (Y: f32[M, 1])
    where M = 64, N = 256
    reference "torch.sum(X, 1, keepdim=True)"
{
    grid (cdiv(M, BM)) as (m) cluster (2) as (r) threads(threads)
    S = shared(X[m*BM : +BM, :])
    sync cluster
    Y[m*BM : +BM, 0 : +1] = sum(S, 1)
}
"""

# The peer stores into P, which was first copied from X: P's copy must not be a cp.async.
PUSH = """\
kernel pushc<threads=128>(X: f16[B, N]) -> (Y: f16[B, N])
    where B = 4, N = 64
    reference "X.view(-1, 2, N).flip(1).reshape(B, N)"
{
    grid (B) as (b) cluster (2) as (r) threads(threads)
    P = shared(X[b : +1, :])
    peer(P, (r + 1) % 2) = X[b : +1, :]
    Y[b : +1, :] = P
}
"""

# An unrelated shared tile U needs a __syncthreads() while S's copy is still in flight.
TWO_SUMS = """\
kernel two<BM=16, threads=128>(X: f16[M, N], W: f16[M, N]) -> (Y: f32[M, 1], Z: f32[M, 1])
    where M = 64, N = 256
    reference "(torch.sum(X, 1, keepdim=True), torch.sum(W, 1, keepdim=True))"
{
    grid (cdiv(M, BM)) as (m) threads(threads)
    S = shared(X[m*BM : +BM, :])
    U = shared(cast(W[m*BM : +BM, :], f32))
    Z[m*BM : +BM, 0 : +1] = sum(U, 1)
    Y[m*BM : +BM, 0 : +1] = sum(S, 1)
}
"""

# A shared tile loaded in a loop (LOOP: `range` or `pipelined`).
LOOP_SUM = """\
kernel loopsum<BM=16, BK=64, threads=128>(X: f16[M, K]) -> (Y: f32[M, 1])
    where M = 64, K = 256
    requires K % BK == 0
{
    grid (cdiv(M, BM)) as (m) threads(threads)
    acc = zeros(f32[BM, 1])
    for k in LOOP {
        S = shared(X[m*BM : +BM, k*BK : +BK])
        acc += sum(S, 1)
    }
    Y[m*BM : +BM, 0 : +1] = acc
}
"""

# A top-level copy whose tile is never read: its wait is at the block's exit.
UNREAD = """\
kernel unread<BM=16, threads=128>(X: f16[M, N]) -> (Y: f32[M, N])
    where M = 64, N = 256
{
    grid (cdiv(M, BM)) as (m) threads(threads)
    S = shared(X[m*BM : +BM, :])
    Y[m*BM : +BM, :] = cast(X[m*BM : +BM, :], f32)
}
"""

# Top-level copies that are not whole 16-byte words, or need edge checks (M = 60 with BM = 16).
NARROW = """\
kernel narrow<BM=16, threads=128>(X: f16[M, N]) -> (Y: f32[M, 1])
    where M = MM, N = NN
{
    grid (cdiv(M, BM)) as (m) threads(threads)
    S = shared(X[m*BM : +BM, COLS])
    Y[m*BM : +BM, 0 : +1] = sum(S, 1)
}
"""
NARROW_CASES = {
    "rows-of-12-bytes": {"MM": "64", "NN": "6", "COLS": ":"},  # f16 width 6
    "offset-of-8-bytes": {"MM": "64", "NN": "256", "COLS": "4 : +64"},  # 4 f16 into the row
    "edge-checks": {"MM": "60", "NN": "256", "COLS": ":"},  # the last block's rows past M
    "fewer-words-than-threads": {"MM": "64", "NN": "8", "COLS": ":"},  # 16 words of 16 bytes, 128 threads
}


def _write(folder, name: str, text: str) -> str:
    path = folder / f"{name}.tk"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("async_copy")
    paths = {"rowsum": ROWSUM, "clsum": CLUSTER_SUM, "two": TWO_SUMS, "unread": UNREAD, "push": PUSH}
    paths = {k: _write(folder, k, v) for k, v in paths.items()}
    for kind in ("range", "pipelined"):
        loop = "range(K / BK)" if kind == "range" else "pipelined(K / BK, 2)"
        paths[f"loop-{kind}"] = _write(folder, f"loop_{kind}", LOOP_SUM.replace("LOOP", loop))
    for case, subs in NARROW_CASES.items():
        text = NARROW
        for key, value in subs.items():
            text = text.replace(key, value)
        paths[case] = _write(folder, case.replace("-", "_"), text)
    return paths


def example(stem: str) -> str:
    return os.path.join(ROOT, "examples", f"{stem}.tk")


def sources(path: str, **overrides: int) -> tuple[str, str]:
    """(CUDA kernel body, TileLang source) of `path` after the default pipeline. The CUDA text
    starts at `extern "C"`: the prelude defines the tk_cp_async helpers."""
    module = driver.optimize(driver.frontend(path, overrides), "cuda")
    src = cuda.emit(module)
    return src[src.index('extern "C"'):], tilelang_gpu.emit(module)


def in_order(text: str, *needles: str) -> list[int]:
    """Where each needle first occurs after the previous one; fails naming the one missing."""
    at, found = 0, []
    for needle in needles:
        i = text.find(needle, at)
        assert i >= 0, f"`{needle}` not found after {found and needles[len(found) - 1]!r}:\n{text}"
        found.append(i)
        at = i + len(needle)
    return found


CUDA_WAIT = "tk_cp_async_wait<0>();  // cp.async into"
TL_WAIT = "T.ptx_wait_group(0)  # cp.async into"
CLUSTER_SYNC = "cg::this_cluster().sync();"


# ---- the cluster-reduce examples --------------------------------------------------------------

def test_dsmem_copy_stays_in_flight_across_the_peer_stores_and_the_barrier():
    """cluster_reduce_dsmem: A (never accessed remotely) is copied with cp.async and waited for
    after the wait for the peer's stores (an mbarrier wait: codegen/cuda_signal.py), right before
    the add reads it; no register staging of A."""
    body, _ = sources(example("cluster_reduce_dsmem"), B=4)
    assert "tk_cp_async<16>(&A[" in body and "tk_store<16>(&A[" not in body
    copy, commit = in_order(body, "tk_cp_async<16>(&A[", "tk_cp_async_commit();")
    assert body.count("tk_cp_async_wait<0>()") == 1  # waited once; nothing left at the exit
    wait = body.index("tk_cp_async_wait<0>()")
    assert body[wait:].startswith(CUDA_WAIT + " A: the copy must have landed")
    add = body.index("// tile.elementwise(%A")
    assert commit < body.index("tk_st_async<16>(peer + ") < body.index("tk_mbar_wait(&tk_recv);") < wait < add
    # every thread reads back only the chunks its own cp.async wrote: no block barrier needed
    assert "__syncthreads" not in body[wait:add]


def test_dsmem_tilelang_waits_after_the_cluster_barrier():
    _, tl = sources(example("cluster_reduce_dsmem"), B=4)
    copy, sync, wait, read = in_order(tl, "T.async_copy(X[b, r * 8192], A)", "T.cluster_sync()",
                                      TL_WAIT + " A:", "A[0, j] + P[0, j]")
    assert tl.count("T.ptx_wait_group") == 1 and tl.index("T.ptx_wait_group") == wait
    assert tl.index("P_peer[i, j] = t0[i, j]") < sync  # the remote stores overlap the copy


@pytest.mark.parametrize("name, tile, copy", [
    ("pull", "S", "T.copy(X[b, 0], S)"),  # the peer reads S (peer_copy source)
    ("push", "P", "T.copy(X[b, 0], P)"),  # the peer writes P (peer_store destination)
])
def test_tiles_peers_access_through_dsmem_are_copied_synchronously(programs, name, tile, copy):
    """A tile another block of the cluster reads or writes through DSMEM is never a cp.async
    destination (codegen/cuda_access.py `op_copy`: racecheck reports the peer's DSMEM reads of
    cp.async-written data): plain loads and stores before the cluster barrier, no wait."""
    path = example("cluster_reduce_dsmem_pull") if name == "pull" else programs["push"]
    body, tl = sources(path, B=4)
    assert "tk_cp_async" not in body and CUDA_WAIT not in body
    in_order(body, f"// tile.copy(%X, %{tile})", "tk_load<16>(gv, &X[", f"tk_store<16>(&{tile}[", CLUSTER_SYNC)
    assert "T.async_copy" not in tl and "T.ptx_wait_group" not in tl
    in_order(tl, copy, "T.cluster_sync()", f"{tile}_peer = ")


def test_a_copy_before_a_loop_is_waited_for_before_the_loop():
    """miss_row: Bs is copied at top level and read after the pipelined loop; the copy overlaps
    the fill of S and is waited for before the loop (whose own cp.async groups it must not
    count)."""
    body, tl = sources(example("miss_row"))
    in_order(body, "tk_cp_async<16>(&Bs[", "tk_cp_async_commit();", "// tile.fill(%S)",
             CUDA_WAIT + " Bs: before the loop", "// for s in")
    in_order(tl, "T.async_copy(B[0, 0], Bs)", "T.clear(S)", TL_WAIT + " Bs: before the loop",
             "for s in T.Pipelined(")


# ---- a reader with another thread map --------------------------------------------------------

def test_reduce_after_the_copy_gets_a_barrier_after_the_wait(programs):
    body, tl = sources(programs["rowsum"])
    copy, commit, wait, bar, reduce = in_order(body, "tk_cp_async<16>(&S[", "tk_cp_async_commit();",
                                               CUDA_WAIT + " S:", "__syncthreads();", "// tile.reduce(%S")
    assert "__syncthreads" not in body[:wait]  # nothing else needs one before
    assert body.count("tk_cp_async_wait<0>()") == 1 and "tk_load<16>" not in body
    in_order(tl, "T.async_copy(X[m * 16, 0], S)", TL_WAIT + " S:", "S[i, j]")
    assert "T.copy(X" not in tl


def test_tilelang_lowering_synchronizes_after_the_wait(programs):
    """The TileLang backend leaves the block barrier to TileLang: its lowered TIR (the `tir`
    target, no GPU needed) has the wait, then a shared-memory sync, then the reads of S."""
    from codegen import tir

    module = driver.optimize(driver.frontend(programs["rowsum"]), "tir")
    lowered = tir.emit(module)
    in_order(lowered, "T.ptx_cp_async(", "T.ptx_commit_group()", "T.ptx_wait_group(0)",
             "T.tvm_storage_sync(", "S_1[")


def test_copy_in_flight_across_a_cluster_barrier_still_gets_a_barrier_after_its_wait(programs):
    """The cluster barrier clears the block's barrier state, but the cp.async lands after it:
    the reduce still needs a __syncthreads() after the wait."""
    body, tl = sources(programs["clsum"])
    in_order(body, "tk_cp_async<16>(&S[", "tk_cp_async_commit();", CLUSTER_SYNC,
             CUDA_WAIT + " S: the copy must have landed", "__syncthreads();", "// tile.reduce(%S")
    in_order(tl, "T.async_copy(X[m * 16, 0], S)", "T.cluster_sync()", TL_WAIT + " S:", "S[i, j]")


def test_copy_in_flight_across_a_block_barrier_still_gets_a_barrier_after_its_wait(programs):
    """A __syncthreads() emitted for another tile while S's copy is in flight does not order
    S's cp.async writes: S's reader still needs one after the wait."""
    body, _ = sources(programs["two"])
    # U needs a barrier (written by chunks, read by rows) while S's copy is in flight
    first_bar = in_order(body, "tk_cp_async_commit();", "__syncthreads();", "// tile.reduce(%U")[1]
    wait, reduce = in_order(body, CUDA_WAIT + " S:", "// tile.reduce(%S")
    assert first_bar < wait
    assert "__syncthreads();" in body[wait:reduce], body[wait - 200:reduce + 200]


def test_tilelang_two_sums_waits_before_the_read_of_s(programs):
    _, tl = sources(programs["two"])
    in_order(tl, "T.async_copy(X[m * 16, 0], S)", "T.copy(t0, U)", "U[i, j]", TL_WAIT + " S:", "S[i, j]")


def test_unread_tile_is_waited_for_before_the_block_exits(programs):
    """CUDA waits at the exit (and before any op touching S's bytes); TileLang copies a tile
    nothing reads afterwards synchronously, since it may hand S's bytes to another buffer right
    after S's last use."""
    body, tl = sources(programs["unread"])
    wait = in_order(body, "tk_cp_async<16>(&S[", "tk_store<", CUDA_WAIT + " S: before the block exits")[2]
    assert body[wait:].splitlines()[1] == "}"
    assert "T.async_copy" not in tl and "T.ptx_wait_group" not in tl
    assert "T.copy(X[m * 16, 0], S)" in tl


# ---- what stays synchronous ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["range", "pipelined"])
def test_copies_in_loops_are_not_top_level_async_copies(programs, kind):
    body, tl = sources(programs[f"loop-{kind}"])
    assert CUDA_WAIT not in body and "T.async_copy" not in tl and "T.ptx_wait_group" not in tl
    in_order(tl, "for k in T.", "            T.copy(X[m * 16, k * 64], S)")  # in the loop
    if kind == "range":
        assert "tk_cp_async" not in body
        in_order(body, "for (int k = 0;", "tk_load<16>(gv, &X[")
    else:  # the software pipeline's own cp.async stages
        in_order(body, "pipelined: 2 stage(s)", "tk_cp_async<16>(&S[", "tk_cp_async_wait<1>();")


@pytest.mark.parametrize("case", list(NARROW_CASES))
def test_copies_that_are_not_whole_16_byte_words_fall_back(programs, case):
    """TileLang's T.async_copy needs 16-byte words, a whole number of them per thread and no
    edge checks, else plain T.copy. The CUDA backend's cp.async takes 4, 8 or 16-byte words of aligned chunks (`can_cp_async`), with
    edge checks as the `ok` predicate (zero fill)."""
    body, tl = sources(programs[case])
    assert "T.async_copy" not in tl and "T.ptx_wait_group" not in tl
    offset = "4" if case == "offset-of-8-bytes" else "0"
    assert f"        T.copy(X[m * 16, {offset}], S)\n" in tl
    if case == "offset-of-8-bytes":  # chunks of 8 f16 that start 8 bytes into a word: not async
        assert "tk_cp_async" not in body and "tk_load<" in body.split("// tile.copy(%X, %S)")[1]
        return
    word = "4" if case == "rows-of-12-bytes" else "16"
    assert body.count("tk_cp_async<") == body.count(f"tk_cp_async<{word}>(&S[") > 0
    if case == "edge-checks":
        in_order(body, "const bool ok = m * 16 + row < 60;", f"tk_cp_async<{word}>(&S[row * 256 + col], ok ? ")
    in_order(body, "tk_cp_async_commit();", CUDA_WAIT + " S:", "__syncthreads();", "// tile.reduce(%S")


# ---- nvcc and the interpreter ----------------------------------------------------------------

@needs_nvcc
def test_nvcc_accepts_the_async_copies(programs, tmp_path):
    names = ["rowsum", "clsum", "rows-of-12-bytes"]
    srcs = {}
    for name in names:
        module = driver.optimize(driver.frontend(programs[name]), "cuda")
        srcs[name] = cuda.emit(module)
    for name, proc in nvcc_all(srcs, str(tmp_path)).items():
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
        assert "warning" not in proc.stderr, f"{name}: {proc.stderr[-3000:]}"


def _interpret(path: str, overrides: dict[str, int], seed: int, dist: str) -> None:
    """The IR after the cuda pipeline in the interpreter against torch in float64 on the same
    inputs (`dist`), every output within its derived tolerance."""
    lowered = driver.frontend(path, overrides)
    module = driver.optimize(lowered, "cuda")
    inputs = oracle.random_inputs(lowered, seed, "cpu", dist)
    names = [a.name for a in module.func.body.args[: len(inputs)]]
    outs = run(module, {n: t.numpy() for n, t in zip(names, inputs)})
    refs = oracle.reference(lowered, inputs)
    budgets = oracle.error_budgets(lowered)
    assert len(outs) == len(refs) == len(oracle.outputs(lowered))
    for (name, dtype), ref in zip(oracle.outputs(lowered), refs):
        out = torch.from_numpy(np.asarray(outs[name], np.float64))
        assert ref.abs().max().item() > 0, f"{dist}: `{name}`: the reference is all zeros"
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        assert err <= tol, f"{dist}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"


@settings(max_examples=examples(3, 8), deadline=None)
@given(m=st.integers(1, 80), dist=st.sampled_from(oracle.DISTRIBUTIONS), seed=st.integers(0, 2**16))
def test_interpreter_matches_torch_on_the_rowsum(programs, m, dist, seed):
    _interpret(programs["rowsum"], {"M": m}, seed, dist)


@pytest.mark.parametrize("name", ["clsum", "two", "push"])
def test_interpreter_matches_torch(programs, name):
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):
        _interpret(programs[name], {}, 7 + seed, dist)

"""Pushed DSMEM stores signalled through an mbarrier (codegen/cuda_signal.py) on the CPU: which
programs the CUDA backend lowers to st.async with an mbarrier wait (and which keep the cluster
barrier), the expected byte count, nvcc on the result, and the very IR the backend lowered run in
the interpreter against torch in float64 on every input distribution, with the bytes each block
receives through the signalled stores counted and compared with the mbarrier's expected count.
The same programs run through `cuda` against torch on the GPU in tests/gpu/test_gpu_cluster.py;
racecheck and memcheck cover the DSMEM example in tests/gpu/test_gpu_sanitizer.py.
"""

from __future__ import annotations

import functools
import os
from collections import Counter

import numpy as np
import pytest
import torch

from codegen import cuda
from dsl import exprs, interpreter
from tkc import cuda_runtime, driver
from tkc.oracle import DISTRIBUTIONS, error_budgets, outputs, random_inputs, reference, rel_error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = cuda_runtime.nvcc_path()

# Four-block clusters, two stores of different dtypes into two tiles, peers one up and one down:
# Y[r] = X[r - 1] + 2 X[r + 1] within each cluster. N picks the st.async word: 256 -> 16 bytes,
# 36 -> 8 (f16) and 16 (f32), 34 -> 4 and 8, 33 -> 2-byte f16 chunks, which st.async cannot store.
PUSH4 = """\
kernel push4<threads=64>(X: f16[B, N]) -> (Y: f32[B, N])
    where B = 8, N = 256
    requires B % 4 == 0
    reference "X.view(-1, 4, N).roll(1, 1).reshape(B, N).float() + 2.0 * X.view(-1, 4, N).roll(-1, 1).reshape(B, N).float()"
{
    grid (B) as (b) cluster (4) as (r) threads(threads)
    P = shared(f16[1, N])
    Q = shared(f32[1, N])
    peer(P, (r + 1) % 4) = X[b : +1, :]
    peer(Q, (r + 3) % 4) = cast(X[b : +1, :], f32) * 2.0
    Y[b : +1, :] = cast(P, f32) + Q
}
"""

# Variants that must keep the cluster barrier: (name, old, new) substitutions of PUSH4.
KEEP = {
    "user-barriers": [("    peer(P, (r + 1) % 4)", "    sync cluster\n    peer(P, (r + 1) % 4)"),
                      ("    Y[b : +1, :] =", "    sync cluster\n    Y[b : +1, :] =")],
    # The user's barrier stands where map-dsmem would insert one (so it inserts none): it may
    # order global memory too, which an mbarrier does not.
    "user-barrier-after-stores": [("    Y[b : +1, :] =", "    sync cluster\n    Y[b : +1, :] =")],
    "rank-from-b": [("peer(P, (r + 1) % 4)", "peer(P, (b + 1) % 4)")],
    "not-one-to-one": [("peer(Q, (r + 3) % 4)", "peer(Q, r / 2 * 2)")],
    "in-a-loop": [("    peer(P, (r + 1) % 4) = X[b : +1, :]\n",
                   "    for k in range(2) {\n        peer(P, (r + 1) % 4) = X[b : +1, :]\n    }\n")],
    "peer-read": [("    Y[b : +1, :] = cast(P, f32) + Q",
                   "    Y[b : +1, :] = cast(P, f32) + Q + cast(peer(P, (r + 2) % 4), f32)"),
                  ("+ 2.0 * X.view", "+ 3.0 * X.view")],  # rank r + 2's P holds X[r + 1] too
}
# Two ranks store into one peer's tile in one phase: no barrier can order that, and the
# interpreter reports the race (the GPU would keep whichever store lands last).
RACY = {"not-one-to-one"}


def _text(case: str) -> str:
    text = PUSH4
    for old, new in KEEP.get(case, []):
        assert old in text, (case, old)
        text = text.replace(old, new)
    return text


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("signal")
    out = {}
    for case in ["push4", *KEEP]:
        path = folder / f"{case.replace('-', '_')}.tk"
        path.write_text(_text(case))
        out[case] = str(path)
    return out


def emit(path: str, **overrides: int):
    """(final IR, CUDA source) as `tkc compile --target cuda` makes them."""
    module, src, _ = lowered(path, **overrides)
    return module, src


def lowered(path: str, **overrides: int):
    """(final IR, CUDA source, the backend's Signal or None): the default cuda pipeline, then the
    backend's own emitter, whose `signal` is the plan it lowered with (its real word sizes)."""
    module = driver.optimize(driver.frontend(path, overrides), "cuda")
    emitter = cuda._Emitter(module)
    src = emitter.run()
    assert src == cuda.emit(module)  # what `cuda.emit` runs: the same plan
    return module, src, emitter.signal


def body(source: str) -> str:
    return source.split('extern "C"')[1]


def launch_of(module):
    return next(op for op in module.func.body.ops if op.name == "tile.launch")


@pytest.mark.parametrize("n, words", [(256, {"16"}), (36, {"8", "16"}), (34, {"4", "8"})])
def test_stores_go_through_st_async_and_the_barrier_becomes_an_mbarrier_wait(paths, n, words):
    module, src, signal = lowered(paths["push4"], N=n)
    text = body(src)
    nbytes = n * 2 + n * 4
    assert f"if (tid == 0) tk_mbar_arrive_expect(&tk_recv, {nbytes});" in text
    assert "cg::this_cluster().sync();" not in text and "map_shared_rank" not in text
    assert text.count("tk_cluster_sync_relaxed();") == 1 and text.count("tk_mbar_wait(&tk_recv);") == 1
    assert {w for w in words if f"tk_st_async<{w}>(" in text} == words
    assert "tk_mapa(tk_smem_addr(P), (r + 1) % 4)" in text and "tk_mapa(tk_smem_addr(Q), (r + 3) % 4)" in text
    init, start = text.index("tk_mbar_init(&tk_recv)"), text.index("tk_cluster_sync_relaxed();")
    wait = text.index("tk_mbar_wait(&tk_recv);")
    assert init < start < text.index("tk_st_async") and text.rindex("tk_st_async") < wait < text.index("&P[")
    assert signal is not None and signal.nbytes == nbytes
    stores = [op for op in launch_of(module).body.ops if op.name == "tile.peer_store"]
    assert len(stores) == 2 and all(a is b for a, b in zip(signal.stores, stores))


def test_two_byte_chunks_keep_the_cluster_barrier(paths):
    _, src = emit(paths["push4"], N=33)
    text = body(src)
    assert "tk_st_async" not in text and "tk_mbar" not in text
    assert text.count("cg::this_cluster().sync();") == 1 and "map_shared_rank(P, (r + 1) % 4)" in text


@pytest.mark.parametrize("case", sorted(KEEP))
def test_other_programs_keep_the_cluster_barrier(paths, case):
    _, src = emit(paths[case])
    text = body(src)
    assert "tk_st_async" not in text and "tk_mbar" not in text and "tk_recv" not in text
    assert "cg::this_cluster().sync();" in text and "map_shared_rank(" in text


# Every program the tests lower: name -> (file, dims, whether the backend must signal it). The
# examples run at B = 4 (two clusters) and N = 256 in the interpreter; the classification is also
# checked at their default dims.
def _cases(paths) -> dict[str, tuple[str, dict[str, int], bool]]:
    out = {f"push4-N{n}": (paths["push4"], {"N": n}, n != 33) for n in (256, 36, 34, 33)}
    out |= {case: (paths[case], {}, False) for case in KEEP}
    for stem, signalled in (("cluster_reduce_dsmem", True), ("cluster_reduce_dsmem_pull", False),
                            ("cluster_reduce_hbm", False)):
        for stage in (0, 1):
            out[f"{stem}-STAGE{stage}"] = (os.path.join(ROOT, "examples", f"{stem}.tk"), {"B": 4, "N": 256, "STAGE": stage}, signalled)
    return out


CASE_NAMES = [f"push4-N{n}" for n in (256, 36, 34, 33)] + sorted(KEEP) + [
    f"{stem}-STAGE{stage}" for stem in ("cluster_reduce_dsmem", "cluster_reduce_dsmem_pull", "cluster_reduce_hbm")
    for stage in (0, 1)]


@functools.cache
def _lowered_case(path: str, dims: tuple) -> tuple:
    return lowered(path, **dict(dims))


@pytest.mark.parametrize("stem, signalled", [("cluster_reduce_dsmem", True), ("cluster_reduce_dsmem_pull", False),
                                             ("cluster_reduce_hbm", False)])
def test_examples(stem, signalled):
    """At the examples' own dims (16384 f16 per block, as in seed 001)."""
    module, src, signal = lowered(os.path.join(ROOT, "examples", f"{stem}.tk"))
    assert (signal is not None) == signalled and ("tk_st_async<16>" in src) == signalled
    if signalled:
        assert signal.nbytes == 16384 and "tk_mbar_arrive_expect(&tk_recv, 16384);" in src


@pytest.mark.parametrize("case", CASE_NAMES)
def test_the_backend_signals_exactly_the_programs_it_may(paths, case):
    """The backend's own plan (its real st.async word sizes, not a stand-in): the programs whose
    stores are one to one, top level, ordered only by map-dsmem's barriers and in whole 4-16 byte
    words are signalled, through every peer store and the inserted barrier; the others keep the
    cluster barrier, and the source says so either way."""
    path, dims, signalled = _cases(paths)[case]
    module, src, signal = _lowered_case(path, tuple(sorted(dims.items())))
    assert (signal is not None) == signalled
    assert ("tk_st_async<" in src) == signalled and ("tk_mbar_wait(&tk_recv);" in src) == signalled
    ops = launch_of(module).body.ops
    peer_access = any(op.name in ("tile.peer_store", "tile.peer_copy") for op in launch_of(module).walk())
    assert ("cg::this_cluster().sync();" in src) == (peer_access and not signalled)
    if signalled:
        barriers = [op for op in ops if op.name == "tile.cluster_barrier"]
        assert signal.barrier is barriers[-1] and signal.barrier.attrs.get("inserted")
        assert [id(op) for op in signal.stores] == [id(op) for op in ops if op.name == "tile.peer_store"]


ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4}


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("case", CASE_NAMES)
def test_the_lowered_ir_matches_torch_and_every_block_receives_the_expected_bytes(paths, monkeypatch, case, dist):
    """The module the backend emitted from, run by the interpreter (clusters simulated rank by
    rank, races reported): every output is within the oracle's tolerance of torch in float64.
    Where it is signalled, every block of every cluster receives exactly `signal.nbytes` bytes,
    and only through the signalled stores: the count the receiver's mbarrier waits for (too few
    and it reads before the data lands; too many and it never wakes)."""
    path, dims, signalled = _cases(paths)[case]
    module, _, signal = _lowered_case(path, tuple(sorted(dims.items())))
    received: Counter = Counter()
    unsignalled = []
    store = interpreter._Block.op_peer_store

    def counting_store(block, op):
        _, peer = block._peer(op)
        src, dst = op.operands
        received[tuple(sorted(peer.scope.items()))] += block.arrays[id(src)].size * ELEMENT_BYTES[dst.type.dtype]
        if signal is not None and not any(op is s for s in signal.stores):
            unsignalled.append(op)
        store(block, op)

    monkeypatch.setattr(interpreter._Block, "op_peer_store", counting_store)
    inputs = random_inputs(module, seed=CASE_NAMES.index(case), device="cpu", dist=dist)
    names = [a.name for i, a in enumerate(module.func.body.args) if i not in set(module.func.attrs["outputs"])]
    feed = {n: t.numpy() for n, t in zip(names, inputs)}
    if case in RACY:
        with pytest.raises(interpreter.RaceError, match="two blocks access shared tile `Q` of the same peer"):
            interpreter.run(module, feed)
        return
    got = interpreter.run(module, feed)
    budgets = error_budgets(module)
    for (name, dtype), ref in zip(outputs(module), reference(module, inputs)):
        err, tol = rel_error(torch.from_numpy(np.asarray(got[name], np.float64)), ref), budgets[name].tol(dtype)
        assert err <= tol, f"{case}, {dist}: {name} max rel error {err:.3g} > tolerance {tol:.3g}"
    if signalled:
        blocks = int(np.prod(_grid(module)))
        assert not unsignalled
        assert len(received) == blocks and set(received.values()) == {signal.nbytes}, received


def _grid(module) -> list[int]:
    return [exprs.evaluate(exprs.parse(g), module.env) for g in launch_of(module).attrs["grid"]]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_nvcc_accepts_every_word_size(paths, tmp_path):
    import subprocess
    for n in (256, 36, 34):
        _, src = emit(paths["push4"], N=n)
        path = tmp_path / f"push4_{n}.cu"
        path.write_text(src)
        proc = subprocess.run([NVCC, "-arch=sm_90a", "-cubin", str(path), "-o", str(path)[:-3] + ".cubin"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]

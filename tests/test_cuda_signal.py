"""Pushed DSMEM stores signalled through an mbarrier (codegen/cuda_signal.py) on the CPU: where
the CUDA backend lowers `tile.peer_store` to st.async and map-dsmem's data barrier to an mbarrier
wait, the expected byte count, every case that keeps the cluster barrier, nvcc on the result, and
the programs' IR in the interpreter against torch. The same programs run through `cuda` against
torch on the GPU in tests/gpu/test_gpu_cluster.py; racecheck and memcheck cover the DSMEM example
in tests/gpu/test_gpu_sanitizer.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen import cuda
from codegen.cuda_signal import plan_signal
from dsl.interpreter import run
from profiles import examples
from tkc import cuda_runtime, driver
from tkc.check import random_inputs, reference, rel_error

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
    "rank-from-b": [("peer(P, (r + 1) % 4)", "peer(P, (b + 1) % 4)")],
    "not-one-to-one": [("peer(Q, (r + 3) % 4)", "peer(Q, r / 2 * 2)")],
    "in-a-loop": [("    peer(P, (r + 1) % 4) = X[b : +1, :]\n",
                   "    for k in range(2) {\n        peer(P, (r + 1) % 4) = X[b : +1, :]\n    }\n")],
    "peer-read": [("    Y[b : +1, :] = cast(P, f32) + Q",
                   "    Y[b : +1, :] = cast(P, f32) + Q + cast(peer(P, (r + 2) % 4), f32)")],
}


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
    module = driver.optimize(driver.frontend(path, overrides), "cuda")
    return module, cuda.emit(module)


def body(source: str) -> str:
    return source.split('extern "C"')[1]


def launch_of(module):
    return next(op for op in module.func.body.ops if op.name == "tile.launch")


@pytest.mark.parametrize("n, words", [(256, {"16"}), (36, {"8", "16"}), (34, {"4", "8"})])
def test_stores_go_through_st_async_and_the_barrier_becomes_an_mbarrier_wait(paths, n, words):
    module, src = emit(paths["push4"], N=n)
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
    signal = plan_signal(launch_of(module), [4, 1, 1], module.env, lambda v, w: 16)
    assert signal is not None and signal.nbytes == nbytes and len(signal.stores) == 2


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


@pytest.mark.parametrize("stem, signalled", [("cluster_reduce_dsmem", True), ("cluster_reduce_dsmem_pull", False),
                                             ("cluster_reduce_hbm", False)])
def test_examples(stem, signalled):
    module, src = emit(os.path.join(ROOT, "examples", f"{stem}.tk"))
    signal = plan_signal(launch_of(module), [2, 1, 1], module.env, lambda v, w: 16)
    assert (signal is not None) == signalled and ("tk_st_async<16>" in src) == signalled
    if signalled:
        assert signal.nbytes == 16384 and "tk_mbar_arrive_expect(&tk_recv, 16384);" in src


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_nvcc_accepts_every_word_size(paths, tmp_path):
    import subprocess
    for n in (256, 36, 34):
        _, src = emit(paths["push4"], N=n)
        path = tmp_path / f"push4_{n}.cu"
        path.write_text(src)
        proc = subprocess.run([NVCC, "-arch=sm_90a", "-c", str(path), "-o", str(path)[:-3] + ".o"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]


@settings(max_examples=examples(4, 20), deadline=None)
@given(n=st.sampled_from([256, 36, 34, 33]), clusters=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_push4_matches_torch_in_the_interpreter(paths, n, clusters, seed):
    module = driver.optimize(driver.frontend(paths["push4"], {"N": n, "B": 4 * clusters}), "cuda")
    inputs = random_inputs(module, seed, "cpu")
    out = run(module, {"X": inputs[0].numpy()})["Y"]
    (ref,) = reference(module, inputs)
    assert rel_error(torch.from_numpy(np.asarray(out, np.float32)), ref) < 1e-3

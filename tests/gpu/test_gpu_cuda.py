"""Every example and test program through the CUDA C++ backend (target `cuda`) on the GPU: against
the torch reference on hypothesis-drawn shapes and schedules, and against the `tilelang` backend
on the same inputs. The MiSS shapes and tolerances are those of tests/gpu/test_gpu_miss.py
(relative error max |out - ref| / max |ref| under 1e-2, no NaN or Inf); the cluster examples run
through both backends in tests/gpu/test_gpu_cluster.py.
Run on the device machine: `python3 -m pytest --hypothesis-profile=gpu tests/gpu`.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import tkc
from profiles import examples
from tkc import check, driver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import test_gpu_miss as miss_gpu  # noqa: E402  (shapes, references and TileLang kernels of the MiSS tests)
from dsl.interpreter import run  # noqa: E402
from test_cuda import DTYPE_MIX  # noqa: E402  (at import time: its @given tests must not nest in ours)

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAMS = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "tests", "programs")) if f.endswith(".tk"))
RTOL = 1e-2
_KERNELS: dict[tuple, object] = {}


def cuda_kernel(path: str, **consts: int):
    key = (path, tuple(sorted(consts.items())))
    if key not in _KERNELS:
        _KERNELS[key] = tkc.compile(path, target="cuda", **consts)
    return _KERNELS[key]


def miss_inputs(dims: dict[str, int], seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(dims["M"], dims["K"], device="cuda", generator=gen).half()
    b = torch.randn(dims["R"], dims["N"], device="cuda", generator=gen).half()
    return a, b


def run_miss(name: str, dims: dict[str, int], seed: int, **consts: int) -> torch.Tensor:
    a, b = miss_inputs(dims, seed)
    out = cuda_kernel(miss_gpu.path_of(name), **consts)(a, b)
    torch.cuda.synchronize()
    assert out.is_cuda and out.dtype == torch.float16 and out.shape == (dims["M"], dims["N"])
    assert torch.isfinite(out).all(), "NaN/Inf in the output"
    ref = miss_gpu.reference(name, dims, a, b)
    err = check.rel_error(out, ref)
    assert err < RTOL, f"relative error {err:.3e}"
    return out


@pytest.mark.parametrize("name", sorted(miss_gpu.SPECS))
@settings(max_examples=examples(4, 20, 6), deadline=None)
@given(data=st.data())
def test_miss_examples_match_torch(name, data):
    dims, seed = data.draw(miss_gpu.problems(name))
    run_miss(name, dims, seed)


@pytest.mark.parametrize("name", ["miss", "miss_v3"])
@settings(max_examples=examples(3, 15, 6), deadline=None)
@given(data=st.data(), bm=st.sampled_from([16, 32, 64, 128]), bn=st.sampled_from([32, 64, 128, 256]),
       stages=st.integers(1, 4), threads=st.sampled_from([64, 128, 256]))
def test_miss_schedules_match_torch(name, data, bm, bn, stages, threads):
    dims, seed = data.draw(miss_gpu.problems(name))
    note(f"BM={bm} BN={bn} stages={stages} threads={threads}")
    run_miss(name, dims, seed, BM=bm, BN=bn, stages=stages, threads=threads)


@pytest.mark.parametrize("name", sorted(miss_gpu.SPECS))
@settings(max_examples=examples(2, 8, 3), deadline=None)
@given(data=st.data())
def test_miss_cuda_agrees_with_tilelang(name, data):
    dims, seed = data.draw(miss_gpu.problems(name))
    a, b = miss_inputs(dims, seed)
    ours = cuda_kernel(miss_gpu.path_of(name))(a, b)
    theirs = miss_gpu.kernel(name)(a, b)
    torch.cuda.synchronize()
    # both round the f32 result to f16 once; the sums differ only in order
    assert check.rel_error(ours, theirs.float()) < 2e-3


def test_padded_k_matches_peft_zero_padding():
    dims = {"M": 1000, "N": 1000, "K": 1000, "R": 64}
    a, b = miss_inputs(dims, 0)
    out = cuda_kernel(miss_gpu.path_of("miss"))(a, b)
    padded = torch.nn.functional.pad(a.float(), (0, (-dims["K"]) % dims["R"]))
    ref = padded.reshape(dims["M"], -1, dims["R"]).sum(1).half().float() @ b.float()
    assert torch.isfinite(out).all() and check.rel_error(out, ref) < RTOL


@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=examples(3, 10, 5), deadline=None)
@given(m=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_programs_match_torch(name, m, seed):
    path = os.path.join(ROOT, "tests", "programs", f"{name}.tk")
    module = driver.frontend(path, {"M": m})
    inputs = check.random_inputs(module, seed, "cuda")
    outs = cuda_kernel(path)(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    refs = check.reference(module, inputs)
    assert len(outs) == len(refs)
    for out, ref in zip(outs, refs):
        assert check.rel_error(out, ref) < RTOL


@settings(max_examples=examples(2, 8, 3), deadline=None)
@given(m=st.integers(1, 300), seed=st.integers(0, 2**16))
def test_dtype_mix_matches_the_interpreter(tmp_path_factory, m, seed):
    """bf16 tensor cores with a shared-memory accumulator, a reduction in a pipelined loop, f64
    and int outputs (tests/test_cuda.py's DTYPE_MIX) against the reference interpreter."""
    path = tmp_path_factory.mktemp("mix") / "dtype_mix.tk"
    path.write_text(DTYPE_MIX)
    module = driver.optimize(driver.frontend(str(path), {"M": m}), "tilelang")
    inputs = check.random_inputs(module, seed, "cuda")
    outs = cuda_kernel(str(path))(*inputs)
    args = module.func.body.args
    want = run(module, {a.name: t.float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()
                        for a, t in zip(args, inputs)})
    for out, name in zip(outs, ["Y", "Z", "D", "J"]):
        ref = torch.from_numpy(want[name].astype("float64")).float()
        assert check.rel_error(out.float(), ref) < RTOL, name

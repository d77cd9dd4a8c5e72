"""Every MiSS example through target `tilelang` on the GPU vs torch, on hypothesis-drawn shapes
and input distributions.

fp16 inputs drawn from every distribution of tkc/oracle.py, f32 accumulation; the reference is the
kernel's own `reference` expression evaluated by torch on the GPU in float64 from the same fp16
inputs (`oracle.reference`). The relative error (max |out - ref| / max |ref|) must stay within the
tolerance derived from the kernel's dtypes and reduction length (`oracle.error_budgets`), and the
output must hold no NaN or Inf. Shapes cover multiples
and non-multiples of the tiles wherever the example allows them: examples/miss.tk takes any K
(zero padding like PEFT's MissLinear), the others require K % R == 0; miss_row and miss_mtile keep
the whole of B in shared memory and a [BM, N] f32 fragment, which bounds and aligns N.
Run on the device machine: `python3 -m pytest --hypothesis-profile=gpu tests/gpu`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import tkc
from profiles import examples
from tkc import driver, oracle

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMEM_FOR_B = 160 * 1024  # bytes of shared memory the whole-B examples may spend on B (sm_90: 227 KiB)


@dataclass(frozen=True)
class Spec:
    k_multiple_of_r: bool
    n_align: int = 1  # N must be a multiple of this (fragment layout over the block's threads)
    whole_b: bool = False  # B lives in shared memory whole: R * N * 2 bytes


SPECS = {
    "miss": Spec(k_multiple_of_r=False),
    "miss_v3": Spec(k_multiple_of_r=True),
    "miss_mtile": Spec(k_multiple_of_r=True, n_align=16, whole_b=True),
    "miss_row": Spec(k_multiple_of_r=True, n_align=128, whole_b=True),
}
_KERNELS: dict[tuple, tkc.Kernel] = {}


def path_of(name: str) -> str:
    return os.path.join(ROOT, "examples", f"{name}.tk")


def kernel(name: str, **consts: int) -> tkc.Kernel:
    key = (name, tuple(sorted(consts.items())))
    if key not in _KERNELS:
        _KERNELS[key] = tkc.compile(path_of(name), target="tilelang", **consts)
    return _KERNELS[key]


def sizes(tile: int, hi: int):
    """Extents up to `hi`: multiples of `tile` and arbitrary values (partial tiles)."""
    return st.one_of(st.integers(1, hi // tile).map(lambda q: q * tile), st.integers(1, hi))


@st.composite
def problems(draw, name: str):
    spec = SPECS[name]
    r = draw(st.sampled_from([16, 32, 64]))
    q = draw(st.integers(1, 4096 // r))
    k = r * q if spec.k_multiple_of_r else draw(st.one_of(st.just(r * q), st.integers(1, 4096)))
    n_max = 4096 if not spec.whole_b else min(4096, SMEM_FOR_B // (2 * r))
    if spec.n_align > 1:
        n = spec.n_align * draw(st.integers(1, n_max // spec.n_align))
    else:
        n = draw(sizes(128, n_max))
    dims = {"M": draw(sizes(64, 4096)), "N": n, "K": k, "R": r}
    dist = draw(st.sampled_from(oracle.DISTRIBUTIONS))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"{name}: {dims} dist={dist} seed={seed}")
    return dims, dist, seed


def inputs(name: str, dims: dict[str, int], dist: str, seed: int, **consts: int):
    """(module, [A, B]): the example as lowered at `dims` and `consts` (its reference and error
    budget), and its fp16 inputs drawn by the oracle from `dist`, on the GPU."""
    module = driver.frontend(path_of(name), {**dims, **consts})
    return module, oracle.random_inputs(module, seed, "cuda", dist)


def check_output(module, ins, out: torch.Tensor, dist: str, where: str = "") -> None:
    """C (fp16) against torch in float64 on the same inputs, within the derived tolerance. An
    all-zero reference (`ints` can cancel exactly at tiny M and N) passes only if every element
    of C is exactly 0 (rel_error: x/0 is Inf)."""
    (ref,) = oracle.reference(module, ins)
    assert ref.is_cuda and ref.dtype == torch.float64
    assert out.is_cuda and out.dtype == torch.float16 and out.shape == ref.shape
    where = f"{where} {dist}".strip()
    assert torch.isfinite(out).all(), f"{where}: NaN/Inf in the output"
    assert ref.abs().max().item() > 0 or dist == "ints", f"{where}: the reference is all zeros"
    err, tol = oracle.rel_error(out, ref), oracle.error_budgets(module)["C"].tol("f16")
    assert err <= tol, f"{where}: relative error {err:.3e} > tolerance {tol:.3e}"


def run_and_compare(name: str, dims: dict[str, int], dist: str, seed: int, **consts: int) -> None:
    module, (a, b) = inputs(name, dims, dist, seed, **consts)
    out = kernel(name, **consts)(a, b)
    torch.cuda.synchronize()
    check_output(module, [a, b], out, dist)


@pytest.mark.parametrize("name", sorted(SPECS))
@settings(max_examples=examples(4, 20, 6))
@given(data=st.data())
def test_example_matches_torch(name, data):
    dims, dist, seed = data.draw(problems(name))
    run_and_compare(name, dims, dist, seed)


@pytest.mark.parametrize("name", ["miss", "miss_v3"])
@settings(max_examples=examples(3, 15, 5))
@given(data=st.data(), bm=st.sampled_from([16, 32, 64, 128]), bn=st.sampled_from([64, 128]),
       stages=st.integers(1, 4))
def test_schedules_match_torch(name, data, bm, bn, stages):
    dims, dist, seed = data.draw(problems(name))
    run_and_compare(name, dims, dist, seed, BM=bm, BN=bn, stages=stages)


PEFT_DIMS = {"M": 1000, "N": 1000, "K": 1000, "R": 64}


def peft_miss(a: torch.Tensor, b: torch.Tensor, r: int) -> torch.Tensor:
    """PEFT's MissLinear in float64: A zero-padded to a multiple of R, shards summed, times B."""
    padded = torch.nn.functional.pad(a.double(), (0, (-a.shape[1]) % r))
    return padded.reshape(a.shape[0], -1, r).sum(1) @ b.double()


def check_peft_padding(k) -> None:
    """`k` (miss.tk at K % R != 0, any backend) equals MiSS on A zero-padded to a multiple of R
    (PEFT's MissLinear) in float64, on every distribution, within miss.tk's derived tolerance;
    the kernel's own reference is the same function."""
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):
        module, (a, b) = inputs("miss", PEFT_DIMS, dist, seed)
        want = peft_miss(a, b, PEFT_DIMS["R"])
        (ref,) = oracle.reference(module, [a, b])
        assert (ref - want).abs().max().item() <= 1e-12 * want.abs().max().item()
        out = k(a, b)
        torch.cuda.synchronize()
        assert out.dtype == torch.float16 and torch.isfinite(out).all(), f"{dist}: NaN/Inf in the output"
        err, tol = oracle.rel_error(out, want), oracle.error_budgets(module)["C"].tol("f16")
        assert err <= tol, f"{dist}: relative error {err:.3e} > tolerance {tol:.3e}"


def test_padded_k_matches_peft_zero_padding():
    """miss.tk with K % R != 0 equals MiSS on A zero-padded to a multiple of R (PEFT's MissLinear)."""
    check_peft_padding(kernel("miss"))

"""Every MiSS example through target `tilelang` on the GPU vs torch, on hypothesis-drawn shapes.

fp16 inputs, f32 accumulation; the reference is the kernel's own `reference` expression evaluated
by torch on the GPU in float32 from the same fp16 inputs. Relative error (max |out - ref| /
max |ref|) must stay under 1e-2 and the output must hold no NaN or Inf. Shapes cover multiples
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
from dsl.lower import lower
from dsl.parser import parse
from profiles import examples
from tkc import check

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTOL = 1e-2
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
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"{name}: {dims} seed={seed}")
    return dims, seed


def reference(name: str, dims: dict[str, int], a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with open(path_of(name), encoding="utf-8") as f:
        src = f.read()
    module = lower(parse(src, path_of(name)), src, dims)
    (ref,) = check.reference(module, [a, b])  # float32 on the GPU from the fp16 inputs
    assert ref.is_cuda and ref.dtype == torch.float32
    return ref


def run_and_compare(name: str, dims: dict[str, int], seed: int, **consts: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(dims["M"], dims["K"], device="cuda", generator=gen).half()
    b = torch.randn(dims["R"], dims["N"], device="cuda", generator=gen).half()
    out = kernel(name, **consts)(a, b)
    torch.cuda.synchronize()
    assert out.is_cuda and out.dtype == torch.float16 and out.shape == (dims["M"], dims["N"])
    assert torch.isfinite(out).all(), "NaN/Inf in the output"
    ref = reference(name, dims, a, b)
    assert ref.abs().max().item() > 0
    err = check.rel_error(out, ref)
    assert err < RTOL, f"relative error {err:.3e}"


@pytest.mark.parametrize("name", sorted(SPECS))
@settings(max_examples=examples(4, 20, 6))
@given(data=st.data())
def test_example_matches_torch(name, data):
    dims, seed = data.draw(problems(name))
    run_and_compare(name, dims, seed)


@pytest.mark.parametrize("name", ["miss", "miss_v3"])
@settings(max_examples=examples(3, 15, 5))
@given(data=st.data(), bm=st.sampled_from([16, 32, 64, 128]), bn=st.sampled_from([64, 128]),
       stages=st.integers(1, 4))
def test_schedules_match_torch(name, data, bm, bn, stages):
    dims, seed = data.draw(problems(name))
    run_and_compare(name, dims, seed, BM=bm, BN=bn, stages=stages)


def test_padded_k_matches_peft_zero_padding():
    """miss.tk with K % R != 0 equals MiSS on A zero-padded to a multiple of R (PEFT's MissLinear)."""
    dims = {"M": 1000, "N": 1000, "K": 1000, "R": 64}
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(dims["M"], dims["K"], device="cuda", generator=gen).half()
    b = torch.randn(dims["R"], dims["N"], device="cuda", generator=gen).half()
    out = kernel("miss")(a, b)
    padded = torch.nn.functional.pad(a.float(), (0, (-dims["K"]) % dims["R"]))
    ref = padded.reshape(dims["M"], -1, dims["R"]).sum(1).half().float() @ b.float()
    assert torch.isfinite(out).all() and check.rel_error(out, ref) < RTOL

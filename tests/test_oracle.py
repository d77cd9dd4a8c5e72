"""The oracle itself (tkc/oracle.py): its distributions are what they claim, its tolerance is
derived as documented and is tight enough that f16 accumulation where f32 is promised fails, and
its error measure never lets NaN, Inf or a shape mismatch pass."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from dsl.interpreter import run
from edge_shapes import ROOT
from tkc import driver, oracle

GEMM = os.path.join(ROOT, "tests", "programs", "gemm_loop.tk")
MISS = os.path.join(ROOT, "examples", "miss.tk")
U16, U32 = 2.0 ** -11, 2.0 ** -24


def test_distributions_are_as_documented():
    module = driver.frontend(GEMM, {"M": 64, "N": 48, "K": 80})
    draws = {d: oracle.random_inputs(module, 3, "cpu", d) for d in oracle.DISTRIBUTIONS}
    for d, (a, b) in draws.items():
        assert a.dtype == b.dtype == torch.float16 and a.shape == (64, 80) and b.shape == (80, 48)
        assert (a != 0).all() and (b != 0).all(), f"`{d}` drew zeros"
    assert (draws["negative"][0] < -0.2).all()
    assert (draws["offset"][0] > 3.9).all() and (draws["offset"][0] < 5.1).all()
    a = draws["ints"][0].double()
    assert (a == a.round()).all() and a.abs().max() <= 4 and (a < 0).any() and (a > 0).any()
    wide = draws["wide"][0].double().abs()
    assert wide.max() / wide.min() > 2.0 ** 12
    normal = draws["normal"][0].double()
    assert abs(normal.mean().item()) < 0.1 and 0.9 < normal.std().item() < 1.1
    assert not torch.equal(oracle.random_inputs(module, 4, "cpu", "normal")[0], draws["normal"][0])


def test_inputs_are_scaled_so_outputs_do_not_overflow():
    # offset inputs around 4: MiSS at K = 4096, R = 64 would reach 64 * 64 * 4.5 * 4.5 * 64 = 5e6 in f16
    module = driver.frontend(MISS, {"M": 8, "K": 4096, "N": 16, "R": 64})
    a, b = oracle.random_inputs(module, 0, "cpu", "offset")
    (ref,) = oracle.reference(module, [a, b])
    assert 65504 / 64 < ref.abs().max().item() <= 65504 / 8
    assert (a > 0).all() and a.max() / a.min() < 1.3  # still an offset distribution, halved exactly


def test_reference_is_float64_from_the_same_inputs():
    module = driver.frontend(MISS, {"M": 4, "K": 40, "N": 8, "R": 16})
    a, b = oracle.random_inputs(module, 1, "cpu", "normal")
    (ref,) = oracle.reference(module, [a, b])
    want = torch.nn.functional.pad(a.double(), (0, 8)).reshape(4, 3, 16).sum(1) @ b.double()
    assert ref.dtype == torch.float64 and torch.equal(ref, want)


def test_rel_error_never_passes_nan_inf_or_a_shape_mismatch():
    ref = torch.tensor([1.0, -2.0], dtype=torch.float64)
    assert oracle.rel_error(torch.tensor([1.0, -2.0]), ref) == 0
    assert oracle.rel_error(torch.tensor([1.0, -1.0]), ref) == 0.5
    for bad in (torch.tensor([float("nan"), -2.0]), torch.tensor([float("inf"), -2.0]), torch.tensor([1.0])):
        assert np.isnan(oracle.rel_error(bad, ref))
    assert oracle.rel_error(torch.tensor([1e-3]), torch.zeros(1, dtype=torch.float64)) == float("inf")


def test_tolerance_terms():
    module = driver.frontend(GEMM, {"M": 64, "N": 48, "K": 100, "BK": 16})
    budgets = oracle.error_budgets(module)
    # C: f32 out, one gemm of BK = 16 accumulated over cdiv(100, 16) = 7 trips, no narrowing
    assert budgets["C"].n == 16 * 7 and budgets["C"].mids == []
    assert oracle.tolerance(module, "C") == pytest.approx(U32 + 4 * 112 * U32 + 64 * U32)
    # H: the same cone, cast to its own output dtype (the output's rounding, not a second one)
    assert oracle.tolerance(module, "H") == pytest.approx(U16 + 4 * 112 * U32 + 64 * U32)
    miss = oracle.error_budgets(driver.frontend(MISS, {"M": 4, "K": 1024, "N": 8, "R": 64}))["C"]
    # cdiv(K, R) shard sums, then the f16 cast of S (a narrowing), then a gemm over R
    assert miss.n == 16 + 64 and miss.mids == ["f16"]


def _gemm_f16_accumulation(a: np.ndarray, b: np.ndarray, bk: int) -> np.ndarray:
    """What an f16 accumulator would give: every partial sum rounded to f16."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float16)
    for k in range(0, a.shape[1], bk):
        prod = a[:, k:k + bk].astype(np.float32) @ b[k:k + bk].astype(np.float32)
        acc = (acc.astype(np.float32) + prod).astype(np.float16)
    return acc


# not `ints`: their partial sums stay under 2048 here, where f16 holds integers exactly
@pytest.mark.parametrize("dist", [d for d in oracle.DISTRIBUTIONS if d != "ints"])
def test_f16_accumulation_where_f32_is_promised_fails(dist):
    module = driver.frontend(GEMM, {"M": 64, "N": 64, "K": 256})
    final = driver.optimize(driver.frontend(GEMM, {"M": 64, "N": 64, "K": 256}), "tilelang")
    a, b = oracle.random_inputs(module, 5, "cpu", dist)
    ref, _ = oracle.reference(module, [a, b])
    tol = oracle.tolerance(module, "C")
    out = run(final, {"A": a.numpy(), "B": b.numpy()})["C"]
    assert oracle.rel_error(torch.from_numpy(out), ref) <= tol
    bad = _gemm_f16_accumulation(a.numpy(), b.numpy(), 16)
    assert oracle.rel_error(torch.from_numpy(bad), ref) > 4 * tol, "f16 accumulation would pass"


def test_cli_check_uses_the_derived_tolerance(capsys):
    from tkc.cli import main

    assert main(["run", GEMM, "--target", "interp", "--check", "--inputs", "ints"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("C: max relative error 0.000e+00 (tolerance 3.06e-05)") and lines[1].endswith("ok")
    # the same kernel checked with a tolerance it cannot meet: exit 1
    assert main(["run", GEMM, "--target", "interp", "--check", "--rtol", "1e-12"]) == 1

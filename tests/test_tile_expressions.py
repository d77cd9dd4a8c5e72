"""Hypothesis property: random tile expressions over the math functions, numbers on either side,
comparisons and `where` (issue 10) agree with torch in float64, at shapes that are not multiples
of the tile, through the reference interpreter and (a smaller budget: each case is a C compile)
TileLang's C target.

Each generated expression carries, beside its .tk and torch texts, a torch expression `mag` that
bounds its magnitude and the magnitude of everything its rounding errors can scale with (a
running error bound: |a| + |b| for a sum, |a| |b| for a product, the bound of a function's value
plus its argument's for tanh and sigmoid, n (|e| + 1) for n / (|e| + 1)). The f32 result `Y`
must be within ERR_ULPS * u32 * max(mag) of torch's float64 value, which stays honest under
cancellation (`(x + 2.0) - x`), where the oracle's tolerance relative to max |Y| would not.
Comparisons only compare inputs (exact values) with each other or with numbers, so no rounding
can flip them; the bool output `Q` must match exactly. Arithmetic runs on f32 tiles (the f16
input enters arithmetic through `cast(h, f32)`: f16 products of the `wide` inputs would overflow
where float64 does not), and is compared in its own f16 as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

import tkc
from dsl.interpreter import run
from profiles import examples
from tkc import driver, oracle

ERR_ULPS = 256  # depth-3 trees have at most ~15 rounded ops; each function is accurate to a few ulps
U32 = oracle.UNIT_ROUNDOFF["f32"]


@dataclass(frozen=True)
class E:
    tk: str  # .tk text over the tiles x (f32), h (f16), k (bool)
    torch: str  # torch text over X, H (float64) and K (bool)
    mag: str  # torch text bounding |value| and the scale of its rounding errors


X_LEAF = E("x", "X", "X.abs()")
H_LEAF = E("cast(h, f32)", "H", "H.abs()")
NUMBERS = ["0.5", "2.0", "1.0", "3.0", "0.25"]
CMP = ["<", "<=", ">", ">=", "==", "!="]


def _leaf():
    return st.sampled_from([X_LEAF, H_LEAF])


def _mask():
    """A bool tile from exact values: the input mask, or a comparison of inputs."""
    raw = st.sampled_from([("x", "X"), ("h", "H")])
    return st.one_of(
        st.just(E("k", "K", "")),
        st.builds(lambda a, op, b: E(f"({a[0]} {op} {b[0]})", f"({a[1]} {op} {b[1]})", ""), raw, st.sampled_from(CMP), raw),
        st.builds(lambda a, op, n: E(f"({a[0]} {op} {n})", f"({a[1]} {op} {n})", ""), raw, st.sampled_from(CMP),
                  st.sampled_from(NUMBERS)),
        st.builds(lambda n, op, a: E(f"({n} {op} {a[0]})", f"({n} {op} {a[1]})", ""), st.sampled_from(NUMBERS),
                  st.sampled_from(CMP), raw),
    )


def _bounded_fn(a: E, fn: str) -> E:
    """Functions of an input whose argument must stay small or in the domain."""
    t = a.torch
    return {
        "sin": E(f"sin({a.tk})", f"torch.sin({t})", "(1.0 + 0.0 * X)"),
        "cos": E(f"cos({a.tk})", f"torch.cos({t})", "(1.0 + 0.0 * X)"),
        "exp2": E(f"exp2(tanh({a.tk}))", f"torch.exp2(torch.tanh({t}))", "(2.0 + 0.0 * X)"),
        "log": E(f"log(abs({a.tk}) + 1.0)", f"torch.log(({t}).abs() + 1.0)", f"(torch.log(({t}).abs() + 1.0) + 1.0)"),
        "pow": E(f"pow(abs({a.tk}) + 1.0, 0.5)", f"((({t}).abs() + 1.0) ** 0.5)", f"((({t}).abs() + 1.0) ** 0.5)"),
    }[fn]


def _expr(depth: int):
    base = st.one_of(_leaf(), st.builds(_bounded_fn, _leaf(), st.sampled_from(["sin", "cos", "exp2", "log", "pow"])))
    if depth == 0:
        return base
    sub = _expr(depth - 1)
    num = st.sampled_from(NUMBERS)
    return st.one_of(
        base,
        st.builds(lambda a, op, b: E(f"({a.tk} {op} {b.tk})", f"({a.torch} {op} {b.torch})",
                                     f"({a.mag} + {b.mag})"), sub, st.sampled_from("+-"), sub),
        st.builds(lambda a, b: E(f"({a.tk} * {b.tk})", f"({a.torch} * {b.torch})", f"({a.mag} * {b.mag})"), sub, sub),
        st.builds(lambda n, op, a: E(f"({n} {op} {a.tk})", f"({n} {op} {a.torch})", f"({n} + {a.mag})"),
                  num, st.sampled_from("+-"), sub),
        st.builds(lambda n, a: E(f"({n} * {a.tk})", f"({n} * {a.torch})", f"({n} * {a.mag})"), num, sub),
        st.builds(lambda n, a: E(f"({n} / (abs({a.tk}) + 1.0))", f"({n} / (({a.torch}).abs() + 1.0))",
                                 f"({n} * ({a.mag} + 1.0))"), num, sub),
        st.builds(lambda a: E(f"tanh({a.tk})", f"torch.tanh({a.torch})", f"({a.mag} + 1.0)"), sub),
        st.builds(lambda a: E(f"sigmoid({a.tk})", f"torch.sigmoid({a.torch})", f"({a.mag} + 1.0)"), sub),
        st.builds(lambda c, a, b: E(f"where({c.tk}, {a.tk}, {b.tk})", f"torch.where({c.torch}, {a.torch}, {b.torch})",
                                    f"torch.where({c.torch}, {a.mag}, {b.mag})"), _mask(), sub, sub),
        st.builds(lambda c, a, n: E(f"where({c.tk}, {a.tk}, {n})", f"torch.where({c.torch}, {a.torch}, {n})",
                                    f"torch.where({c.torch}, {a.mag}, {n})"), _mask(), sub, num),
        st.builds(lambda fn, a, b: E(f"{fn}({a.tk}, {b.tk})", f"torch.{fn}imum({a.torch}, {b.torch})",
                                     f"torch.maximum({a.mag}, {b.mag})"), st.sampled_from(["max", "min"]), sub, sub),
    )


def source(e: E, mask: E) -> str:
    ref = f"({e.torch}, ({mask.torch}) != K, {e.mag})"
    return f"""kernel expr<BM=16, BN=32>(X: f32[M, N], H: f16[M, N], K: bool[M, N]) -> (Y: f32[M, N], Q: bool[M, N])
    where M = 40, N = 72
    reference "{ref}"
{{
    grid (cdiv(M, BM), cdiv(N, BN)) as (m, n)
    x = X[m*BM : +BM, n*BN : +BN]
    h = H[m*BM : +BM, n*BN : +BN]
    k = K[m*BM : +BM, n*BN : +BN]
    Y[m*BM : +BM, n*BN : +BN] = {e.tk}
    Q[m*BM : +BM, n*BN : +BN] = {mask.tk} != k
}}
"""


def _case(data, folder):
    e = data.draw(_expr(3), label="expression")
    mask = data.draw(_mask(), label="mask")
    dims = {"M": data.draw(st.integers(1, 70), label="M"), "N": data.draw(st.integers(1, 100), label="N")}
    dist = data.draw(st.sampled_from(oracle.DISTRIBUTIONS), label="inputs")
    text = source(e, mask)
    note(text)
    path = folder / "expr.tk"
    path.write_text(text)
    return str(path), dims, dist


def _check(module, inputs, y, q, where: str) -> None:
    ref_y, ref_q, mag = oracle.reference(module, inputs)  # the reference's third value is the bound
    bound = ERR_ULPS * U32 * max(mag.abs().max().item(), 1e-30)
    err = (y.double().cpu() - ref_y.cpu()).abs().max().item() if y.numel() else 0.0
    assert torch.isfinite(y).all(), f"{where}: Y has a NaN or Inf"
    assert err <= bound, f"{where}: Y max abs error {err:.3e} > bound {bound:.3e}"
    assert torch.equal(q.cpu().bool(), ref_q.cpu().bool()), f"{where}: Q differs"


@settings(max_examples=examples(30, 150))
@given(data=st.data())
def test_interpreter_matches_torch_on_random_expressions(data, tmp_path_factory):
    path, dims, dist = _case(data, tmp_path_factory.mktemp("expr"))
    module = driver.frontend(path, dims)
    final = driver.optimize(driver.frontend(path, dims), "tilelang")
    inputs = oracle.random_inputs(module, 0, "cpu", dist)
    outs = run(final, {nm: t.numpy() for nm, t in zip(["X", "H", "K"], inputs)})
    y = torch.from_numpy(np.asarray(outs["Y"], np.float64))
    _check(module, inputs, y, torch.from_numpy(np.asarray(outs["Q"])), f"interp {dims} {dist}")


@settings(max_examples=examples(4, 25))
@given(data=st.data())
def test_tilelang_cpu_matches_torch_on_random_expressions(data, tmp_path_factory):
    path, dims, dist = _case(data, tmp_path_factory.mktemp("expr"))
    module = driver.frontend(path, dims)
    kernel = tkc.compile(path, target="tilelang-cpu")
    inputs = oracle.random_inputs(module, 0, "cpu", dist)
    y, q = kernel(*inputs)
    _check(module, inputs, y, q, f"tilelang-cpu {dims} {dist}")


def test_the_bound_catches_a_wrong_function(tmp_path):
    """The check is not vacuous: sin where the reference says cos fails it."""
    e = _bounded_fn(X_LEAF, "sin")
    wrong = E(e.tk, "torch.cos(X)", e.mag)
    path = tmp_path / "expr.tk"
    path.write_text(source(wrong, E("k", "K", "")))
    module = driver.frontend(str(path), {"M": 40, "N": 72})
    final = driver.optimize(driver.frontend(str(path), {"M": 40, "N": 72}), "tilelang")
    inputs = oracle.random_inputs(module, 0, "cpu", "normal")
    outs = run(final, {nm: t.numpy() for nm, t in zip(["X", "H", "K"], inputs)})
    with pytest.raises(AssertionError, match="max abs error"):
        _check(module, inputs, torch.from_numpy(np.asarray(outs["Y"], np.float64)),
               torch.from_numpy(np.asarray(outs["Q"])), "wrong")

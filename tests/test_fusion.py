"""The fused decode kernels (issue 10: "each checked against the unfused chain") give what the
chain of the unfused examples gives on the same inputs: examples/rmsnorm_matmul.tk against
rmsnorm.tk then matmul.tk, examples/ffn_gate.tk against matmul.tk twice then silu_mul.tk,
examples/matmul_residual.tk against matmul.tk then accum.tk, and the int8 twins
(rmsnorm_matmul_q8.tk, matmul_q8_residual.tk, rmsnorm_ffn_gate_q8.tk) against rmsnorm.tk,
matmul_q8.tk, accum.tk and silu_mul.tk as tkc.models.llama ran them before, all
through the reference interpreter at small dims that are not multiples of the tiles. Each side
also matches torch in float64 in tests/test_edges.py; here the bound is the sum of the two sides'
derived tolerances, relative to the largest output.
"""

from __future__ import annotations

import os

import pytest
import torch

import tkc
from tkc import driver, oracle
from tkc.models.llama import example_variant

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _kernel(name: str):
    return tkc.compile(os.path.join(ROOT, "examples", f"{name}.tk"), target="interp")


def _tol(name: str, dims: dict[str, int], output: str = "Y") -> float:
    module = driver.frontend(os.path.join(ROOT, "examples", f"{name}.tk"), dims)
    return oracle.tolerance(module, output)


@pytest.mark.parametrize("dist", ["normal", "wide", "ints"])
def test_rmsnorm_matmul_matches_the_unfused_chain(dist):
    d, k = 40, 100
    module = driver.frontend(os.path.join(ROOT, "examples", "rmsnorm_matmul.tk"), {"D": d, "K": k})
    x, g, w = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("rmsnorm_matmul")(x, g, w)
    normed = _kernel("rmsnorm")(x, g)
    chain = _kernel("matmul")(w, normed)
    tol = _tol("rmsnorm_matmul", {"D": d, "K": k}) + _tol("rmsnorm", {"B": 1, "N": k}) + _tol("matmul", {"D": d, "K": k})
    assert fused.shape == chain.shape == (d, 1)
    assert oracle.rel_error(fused, chain.double()) <= tol


@pytest.mark.parametrize("dist", ["normal", "wide", "ints"])
def test_ffn_gate_matches_the_unfused_chain(dist):
    h, k = 40, 100
    module = driver.frontend(os.path.join(ROOT, "examples", "ffn_gate.tk"), {"H": h, "K": k})
    w1, w3, x = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("ffn_gate")(w1, w3, x)
    hb = _kernel("matmul")(w1, x).reshape(1, h)
    hb2 = _kernel("matmul")(w3, x).reshape(1, h)
    chain = _kernel("silu_mul")(hb, hb2).reshape(h, 1)
    tol = _tol("ffn_gate", {"H": h, "K": k}) + 2 * _tol("matmul", {"D": h, "K": k}) + _tol("silu_mul", {"B": 1, "H": h})
    assert oracle.rel_error(fused, chain.double()) <= tol
    assert not torch.equal(fused, torch.zeros_like(fused))


@pytest.mark.parametrize("dist", ["normal", "wide", "ints"])
def test_matmul_residual_matches_the_unfused_chain(dist):
    d, k = 40, 100
    module = driver.frontend(os.path.join(ROOT, "examples", "matmul_residual.tk"), {"D": d, "K": k})
    w, x, r = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("matmul_residual")(w, x, r)
    chain = _kernel("accum")(r.reshape(1, d), _kernel("matmul")(w, x).reshape(1, d)).reshape(d, 1)
    tol = _tol("matmul_residual", {"D": d, "K": k}) + _tol("matmul", {"D": d, "K": k}) + _tol("accum", {"B": 1, "N": d})
    assert oracle.rel_error(fused, chain.double()) <= tol
    assert oracle.rel_error(fused, _kernel("matmul")(w, x).double()) > tol  # the residual is there


@pytest.mark.parametrize("dist", ["normal", "ints"])
def test_rmsnorm_ffn_gate_matches_the_unfused_chain(dist):
    h, k = 40, 100
    module = driver.frontend(os.path.join(ROOT, "examples", "rmsnorm_ffn_gate.tk"), {"H": h, "K": k})
    x, g, w1, w3 = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("rmsnorm_ffn_gate")(x, g, w1, w3)
    chain = _kernel("ffn_gate")(w1, w3, _kernel("rmsnorm")(x, g))
    tol = _tol("rmsnorm_ffn_gate", {"H": h, "K": k}) + _tol("rmsnorm", {"B": 1, "N": k}) + _tol("ffn_gate", {"H": h, "K": k})
    assert fused.shape == chain.shape == (h, 1)
    assert oracle.rel_error(fused, chain.double()) <= tol
    assert oracle.rel_error(fused, _kernel("ffn_gate")(w1, w3, x).double()) > tol  # the norm is there


@pytest.mark.parametrize("kvd", [64, 32])  # multi-head, grouped-query
@pytest.mark.parametrize("pos", [0, 6])
def test_qkv_rope_matches_the_unfused_chain(kvd, pos, tmp_path):
    """qkv_rope against rmsnorm_matmul over the stacked weights, rope on q and k together and
    kv_store, as tkc.models.llama ran them: the same q and the same caches, every row but pos
    untouched."""
    d, k, s, hd = 64, 100, 7, 16
    dims = {"K": k, "D": d, "KVD": kvd, "S": s}
    module = driver.frontend(os.path.join(ROOT, "examples", "qkv_rope.tk"), {**dims, "HD": hd})
    x, g, wq, wk, wv, _, kc, vc = oracle.random_inputs(module, 0, "cpu", "normal", {"pos": pos})
    kc0, vc0 = kc.clone(), vc.clone()
    q, kc, vc = tkc.compile(os.path.join(ROOT, "examples", "qkv_rope.tk"), target="interp", HD=hd)(
        x, g, wq, wk, wv, pos, kc, vc)
    qkv = _kernel("rmsnorm_matmul")(x, g, torch.cat([wq, wk, wv])).reshape(1, d + 2 * kvd)
    rope = example_variant("rope", str(tmp_path), {"X": "f32", "Y": "f32"})  # as tkc.models.llama
    qk = tkc.compile(rope, target="interp", HD=hd)(
        qkv[:, :d + kvd].contiguous(), pos)
    kc2, vc2 = _kernel("kv_store")(qk[:, d:].contiguous(), qkv[:, d + kvd:].contiguous(), pos, kc0.clone(), vc0.clone())
    tol = (_tol("qkv_rope", {**dims, "HD": hd}, "Q") + _tol("rmsnorm_matmul", {"D": d + 2 * kvd, "K": k})
           + _tol("rmsnorm", {"B": 1, "N": k}))
    assert oracle.rel_error(q.reshape(1, d), qk[:, :d].double()) <= tol
    for new, old, chain in ((kc, kc0, kc2), (vc, vc0, vc2)):
        assert torch.equal(torch.cat([new[:pos], new[pos + 1:]]), torch.cat([old[:pos], old[pos + 1:]]))
        assert oracle.rel_error(new[pos:pos + 1].float(), chain[pos:pos + 1].double()) <= tol + 2 ** -10
    if pos:  # rotated: q differs from the unrotated product
        assert oracle.rel_error(q.reshape(1, d), qkv[:, :d].double()) > tol


Q8 = {"G": 5, "GS": 32}  # K = 160: groups of 32, five of them


@pytest.mark.parametrize("dist", ["normal", "wide", "ints"])
def test_rmsnorm_matmul_q8_matches_the_unfused_chain(dist):
    d, k = 40, Q8["G"] * Q8["GS"]
    module = driver.frontend(os.path.join(ROOT, "examples", "rmsnorm_matmul_q8.tk"), {"D": d, **Q8})
    x, g, w, s = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("rmsnorm_matmul_q8")(x, g, w, s)
    normed = _kernel("rmsnorm")(x.reshape(1, k), g.reshape(1, k))
    chain = _kernel("matmul_q8")(w, s, normed.reshape(Q8["G"], Q8["GS"]))
    tol = (_tol("rmsnorm_matmul_q8", {"D": d, **Q8}) + _tol("rmsnorm", {"B": 1, "N": k})
           + _tol("matmul_q8", {"D": d, **Q8}))
    assert fused.shape == chain.shape == (d, 1)
    assert oracle.rel_error(fused, chain.double()) <= tol
    assert oracle.rel_error(fused, _kernel("matmul_q8")(w, s, x).double()) > tol  # the norm is there


@pytest.mark.parametrize("dist", ["normal", "wide", "ints"])
def test_matmul_q8_residual_matches_the_unfused_chain(dist):
    d = 40
    module = driver.frontend(os.path.join(ROOT, "examples", "matmul_q8_residual.tk"), {"D": d, **Q8})
    w, s, x, r = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("matmul_q8_residual")(w, s, x, r)
    product = _kernel("matmul_q8")(w, s, x)
    chain = _kernel("accum")(r.reshape(1, d), product.reshape(1, d)).reshape(d, 1)
    tol = (_tol("matmul_q8_residual", {"D": d, **Q8}) + _tol("matmul_q8", {"D": d, **Q8})
           + _tol("accum", {"B": 1, "N": d}))
    assert oracle.rel_error(fused, chain.double()) <= tol
    assert oracle.rel_error(fused, product.double()) > tol  # the residual is there


@pytest.mark.parametrize("dist", ["normal", "ints"])
def test_rmsnorm_ffn_gate_q8_matches_the_unfused_chain(dist):
    """Against the chain tkc.models.llama ran before the fusion: rmsnorm, one matmul_q8 over w1
    and w3 stacked by rows, silu_mul of the two halves."""
    h, k = 40, Q8["G"] * Q8["GS"]
    module = driver.frontend(os.path.join(ROOT, "examples", "rmsnorm_ffn_gate_q8.tk"), {"H": h, **Q8})
    x, g, w1, s1, w3, s3 = oracle.random_inputs(module, 0, "cpu", dist)
    fused = _kernel("rmsnorm_ffn_gate_q8")(x, g, w1, s1, w3, s3)
    normed = _kernel("rmsnorm")(x.reshape(1, k), g.reshape(1, k)).reshape(Q8["G"], Q8["GS"])
    h13 = _kernel("matmul_q8")(torch.cat([w1, w3]), torch.cat([s1, s3]), normed).reshape(1, 2 * h)
    chain = _kernel("silu_mul")(h13[:, :h].contiguous(), h13[:, h:].contiguous()).reshape(h, 1)
    tol = (_tol("rmsnorm_ffn_gate_q8", {"H": h, **Q8}) + _tol("rmsnorm", {"B": 1, "N": k})
           + _tol("matmul_q8", {"D": 2 * h, **Q8}) + _tol("silu_mul", {"B": 1, "H": h}))
    assert fused.shape == chain.shape == (h, 1)
    assert oracle.rel_error(fused, chain.double()) <= tol
    ungated = _kernel("matmul_q8")(w3, s3, normed)
    assert oracle.rel_error(fused, ungated.double()) > tol  # the gate is there

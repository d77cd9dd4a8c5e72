"""`mut` outputs (updated in place; docs/LANGUAGE.md "Outputs updated in place"), with
examples/kv_store.tk: the caller passes the tensor after the inputs, the kernel writes some of
its elements and every other element keeps its value (exactly), on the interpreter, tilelang-cpu
and the CUDA backend's emulation; check-coverage exempts them; misuse gets located errors."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import tkc
from dsl.diagnostics import TkError
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KV = os.path.join(ROOT, "examples", "kv_store.tk")


@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
@pytest.mark.parametrize("pos", [0, 17, 39])
def test_kv_store_writes_one_row_in_place(tmp_path, target, pos):
    k = tkc.compile(KV, target=target, cache_dir=str(tmp_path), BN=128)
    g = torch.Generator().manual_seed(pos)
    K, V = torch.randn(1, 300, generator=g), torch.randn(1, 300, generator=g)
    KC = torch.randn(40, 300, generator=g).half()
    VC = torch.randn(40, 300, generator=g).half()
    old_k, old_v = KC.clone(), VC.clone()
    out_k, out_v = k(K, V, pos, KC, VC)
    assert out_k is KC and out_v is VC  # the caller's tensors, updated
    rows = [r for r in range(40) if r != pos]
    assert torch.equal(KC[rows], old_k[rows]) and torch.equal(VC[rows], old_v[rows])
    assert torch.equal(KC[pos], K[0].half()) and torch.equal(VC[pos], V[0].half())


@pytest.mark.parametrize("pos", [0, 6])
def test_kv_store_on_the_cuda_emulation(tmp_path, pos):
    sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
    import emulate

    if emulate.gxx() is None:
        pytest.skip("no g++ with C++20 <barrier>")
    path = tmp_path / "kv32.tk"  # the emulation has no f16
    with open(KV, encoding="utf-8") as f:
        path.write_text(f.read().replace("f16[", "f32["))
    emulate.check_against_torch(str(path), {"S": 7, "KVD": 100, "BN": 32, "threads": 32}, ["normal", "wide"],
                                {"pos": pos})


def _source(tmp_path, text: str) -> str:
    path = tmp_path / "k.tk"
    path.write_text(text)
    return str(path)


STORE = """
kernel row<BN=32>(K: f32[1, N], pos: i32) -> ({mut}C: f32[S, N])
    where S = 8, N = 64
    requires pos < S
{{
    grid (cdiv(N, BN)) as (n)
    C[pos : +1, n*BN : +BN] = K[0 : +1, n*BN : +BN]
}}
"""


def test_a_partial_store_needs_mut(tmp_path):
    """Without `mut` a store of one row of C is a located coverage error (check-coverage; a row
    at a runtime position is beyond what it can decide); with `mut`, the kernel compiles."""
    fixed = STORE.replace("C[pos : +1,", "C[2 : +1,")
    with pytest.raises(TkError, match="not fully written"):
        driver.optimize(driver.frontend(_source(tmp_path, fixed.format(mut=""))), "tilelang")
    driver.optimize(driver.frontend(_source(tmp_path, fixed.format(mut="mut "))), "tilelang")


def test_mut_on_an_input_is_an_error(tmp_path):
    text = STORE.format(mut="").replace("(K: f32[1, N]", "(mut K: f32[1, N]")
    with pytest.raises(TkError) as exc:
        driver.frontend(_source(tmp_path, text))
    assert "only outputs are updated in place" in str(exc.value)
    assert exc.value.diagnostics[0].loc.line == 2


def test_call_errors(tmp_path):
    k = tkc.compile(_source(tmp_path, STORE.format(mut="mut ")), target="interp")
    K = torch.randn(1, 64)
    with pytest.raises(TkError, match=r"takes 3 arguments \(its inputs, then its `mut` outputs\), got 2"):
        k(K, 3)
    with pytest.raises(TkError, match="must be a contiguous tensor"):
        k(K, 3, torch.zeros(64, 8).t())
    with pytest.raises(TkError, match="`C` is f32"):
        k(K, 3, torch.zeros(8, 64, dtype=torch.float16))

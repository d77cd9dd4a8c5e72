"""Runtime scalars passed as one-element int32 tensors (docs/LANGUAGE.md "Runtime scalars"): the
kernel reads the value from memory when it runs (`scalar_refs`), so a CUDA graph that captured
the call replays it at whatever the tensor then holds (tkc.models.llama captures a whole decode
step this way).

Checked against torch in float64 (each kernel's `reference`, the oracle's derived tolerance) on
the interpreter, tilelang-cpu (the same TileLang emitter as the GPU target: the value is a let
binding of the tensor's element) and the CUDA backend's CPU emulation (the kernel loads
`*pos_ref`); the tensor form equals the int form exactly; misuse gets located errors. The GPU
forms and graph capture are in tests/gpu/test_gpu_graphs.py.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import tkc
from dsl.diagnostics import TkError
from dsl.parser import parse
from tkc import driver, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")
CASES = {  # example -> small dims and constants
    "rope": {"B": 3, "D": 96, "HD": 32, "BR": 2},
    "attention": {"H": 4, "HD": 32, "KVD": 64, "S": 80, "BT": 16, "threads": 64},
    "kv_store": {"KVD": 160, "S": 24, "BN": 64},
}


def _as_f32(tmp_path, name: str) -> str:
    """examples/NAME.tk with f16 tensors declared f32 (the CUDA emulation has no f16)."""
    with open(os.path.join(EX, f"{name}.tk"), encoding="utf-8") as f:
        text = f.read().replace("f16[", "f32[")
    path = tmp_path / f"{name}32.tk"
    path.write_text(text)
    return str(path)


def _check(name: str, target: str, tmp_path, pos: int, seed: int = 0):
    """Run examples/NAME.tk with `pos` as an int and as a one-element tensor; both match torch
    in float64 and each other exactly."""
    defines = CASES[name]
    path = os.path.join(EX, f"{name}.tk")
    ast = parse(driver.read_source(path), path)
    consts = {k: v for k, v in defines.items() if k in ast.consts}
    module = driver.frontend(path, defines)
    inputs = oracle.random_inputs(module, seed, "cpu", "wide", {"pos": pos})
    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    k = tkc.compile(path, target=target, cache_dir=str(tmp_path / "cache"), **consts)
    at = oracle.input_names(module).index("pos")
    results = []
    # the tensor form first: a specialization it left behind must not serve the int form
    for form in (torch.tensor([pos], dtype=torch.int32), pos, torch.tensor(pos, dtype=torch.int32)):
        args = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]  # `mut` outputs change
        args[at] = form
        got = k(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        for (out, dtype), g, r in zip(oracle.outputs(module), got, refs):
            err = oracle.rel_error(g, r)
            assert err <= budgets[out].tol(dtype), f"{name} pos={pos} ({type(form).__name__}): {out} error {err:.3e}"
        results.append(got)
    for got in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], got))


@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_tensor_scalars_match_torch(tmp_path, target, name):
    last = CASES[name].get("S", 4096) - 1
    for pos in (0, 7, last):
        _check(name, target, tmp_path, pos, seed=pos)


def test_tilelang_reads_the_scalar_once_from_its_tensor(tmp_path):
    art = driver.compile_file(os.path.join(EX, "attention.tk"), "tilelang", {}, None, ("pos",))
    assert "pos_ref: T.Tensor((1,), T.int32)" in art.source and "pos = pos_ref[0]" in art.source
    assert ", pos: T.int32" not in art.source
    plain = driver.compile_file(os.path.join(EX, "attention.tk"), "tilelang", {}, None)
    assert ", pos: T.int32" in plain.source and plain.key != art.key  # two specializations, two entries


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_reads_the_scalar_from_memory_on_the_emulation(tmp_path, name):
    sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
    import emulate

    if emulate.gxx() is None:
        pytest.skip("no g++ with C++20 <barrier>")
    path = _as_f32(tmp_path, name)
    final = driver.optimize(driver.frontend(path, CASES[name]), "cuda")
    final.func.attrs["scalar_refs"] = ["pos"]
    from codegen import cuda

    src = cuda.emit(final)
    assert "const int* __restrict__ pos_ref" in src and "const int pos = *pos_ref;" in src
    last = CASES[name].get("S", 4096) - 1
    for pos in (0, min(last, 9)):
        emulate.check_against_torch(path, CASES[name], ["normal", "wide"], {"pos": pos}, scalar_refs=True)


def test_int_and_tensor_calls_interleave(tmp_path):
    """The fast path keys on the form: an int call after a tensor call (and back) is right."""
    path = os.path.join(EX, "rope.tk")
    k = tkc.compile(path, target="interp", BR=1, HD=32)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(1)).half()
    a = k(x, 5)
    b = k(x, torch.tensor([5], dtype=torch.int32))
    c = k(x, 6)
    d = k(x, torch.tensor([6], dtype=torch.int32))
    assert torch.equal(a, b) and torch.equal(c, d) and not torch.equal(a, c)


@pytest.mark.parametrize("bad, message", [
    (torch.tensor([3], dtype=torch.int64), "one-element int32 tensor, got a torch.int64 tensor"),
    (torch.tensor([3, 4], dtype=torch.int32), "got a torch.int32 tensor of shape (2,)"),
    (torch.tensor([-1], dtype=torch.int32), "runtime scalar `pos` is -1; it must be in [0, 2^31)"),
    (torch.tensor([5000], dtype=torch.int32), "requirement `pos < 4096` does not hold at this call"),
    (2.0, "takes a Python int or a one-element int32 tensor, got float"),
])
def test_bad_tensor_scalars_are_located_errors(tmp_path, bad, message):
    k = tkc.compile(os.path.join(EX, "rope.tk"), target="tilelang-cpu", cache_dir=str(tmp_path), BR=1, HD=32)
    x = torch.randn(1, 64).half()
    k(x, 3)  # the fast path is warm: errors must still come
    with pytest.raises(TkError) as exc:
        k(x, bad)
    text = str(exc.value)
    assert message in text and "rope.tk:" in text


def test_assume_valid_skips_only_value_checks(tmp_path):
    """Inside tkc.assume_valid the device values are not read (no host sync); an int scalar
    and every shape check still are."""
    k = tkc.compile(os.path.join(EX, "rope.tk"), target="tilelang-cpu", cache_dir=str(tmp_path), BR=1, HD=32)
    x = torch.randn(1, 64, generator=torch.Generator().manual_seed(2)).half()
    want = k(x, 9)
    with tkc.assume_valid():
        assert torch.equal(k(x, torch.tensor([9], dtype=torch.int32)), want)
        with pytest.raises(TkError, match="requirement `pos < 4096`"):
            k(x, 5000)
        with pytest.raises(TkError, match="extent|rank|is f16"):
            k(x.float(), torch.tensor([9], dtype=torch.int32))
    with pytest.raises(TkError, match="requirement `pos < 4096`"):  # the checks are back
        k(x, torch.tensor([5000], dtype=torch.int32))

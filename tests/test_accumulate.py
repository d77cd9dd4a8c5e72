"""`acc += sum(x, axis)`: lowered to one `tile.reduce {accumulate = true, fn = "sum"}` into acc
(dsl/lower.py), only where that means the same as a sum into a temporary plus an elementwise add;
the verifier's rule (accumulate with `sum` only); and the forms, fused and not, through the
interpreter and TileLang's C target against torch in float64, and the generated TileLang and CUDA
(tests/programs/row_sum_loop.tk runs at every tile edge in tests/test_programs.py and
tests/test_edges.py, and through nvcc in tests/test_cuda.py).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

import tkc
from codegen import cuda, tilelang
from dsl.diagnostics import Loc, TkError
from dsl.interpreter import run
from dsl.ir import print_module
from dsl.ir_parser import parse_module
from passes.manager import parse_pipeline, run_pipeline
from tkc import driver, oracle

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW_SUM = os.path.join(ROOT, "tests", "programs", "row_sum_loop.tk")

# Every form of `+=` with a reduction on its right-hand side, in one loop over column tiles (the
# last one partial at N = 72, BN = 32). Only `s` and `e` take the accumulating reduce.
FORMS = """\
kernel forms<BM=16, BN=32>(X: f32[M, N], H: f16[M, N])
    -> (S: f32[M, 1], E: f32[M, 1], W: f32[M, 2], G: f16[M, 1], D: f32[M, 1], Q: f32[M, 1], A: f32[M, 1])
    where M = 40, N = 72
    reference "(X.sum(1, keepdim=True), H.sum(1, keepdim=True), X.sum(1, keepdim=True).repeat(1, 2), H.sum(1, keepdim=True), -X.sum(1, keepdim=True), 2 * X.sum(1, keepdim=True), 2 ** ((N + BN - 1) // BN) + X.sum(1, keepdim=True))"
{
    grid (cdiv(M, BM)) as (m)
    s = zeros(f32[BM, 1])
    e = zeros(f32[BM, 1])
    w = zeros(f32[BM, 2])
    g = zeros(f16[BM, 1])
    d = zeros(f32[BM, 1])
    q = zeros(f32[BM, 1])
    a = full(f32[BM, 1], 1.0)
    for j in range(cdiv(N, BN)) {
        x = X[m*BM : +BM, j*BN : +BN]
        s += sum(x, 1)
        e += sum(H[m*BM : +BM, j*BN : +BN], 1)
        w += sum(x, 1)
        g += sum(H[m*BM : +BM, j*BN : +BN], 1)
        d -= sum(x, 1)
        q += sum(x, 1) * 2.0
        a += sum(a, 1)
    }
    a += s
    S[m*BM : +BM, :] = s
    E[m*BM : +BM, :] = e
    W[m*BM : +BM, :] = w
    G[m*BM : +BM, :] = g
    D[m*BM : +BM, :] = d
    Q[m*BM : +BM, :] = q
    A[m*BM : +BM, :] = a
}
"""
# Why each of the others keeps the temporary: w broadcasts the sum over 2 columns, g is f16 (the
# sum is f32 and rounds once), d subtracts, q's right-hand side is not the sum alone, and a sums
# itself (a + sum(a, 1) = 2a: 2^trips after the loop, plus the row sums from `a += s`).
FUSED = {"s", "e"}
UNFUSED = {"w", "g", "d", "q", "a"}


@pytest.fixture(scope="module")
def forms(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("acc") / "forms.tk"
    path.write_text(FORMS)
    return str(path)


def writers(module, name: str) -> list:
    """The ops inside the loop whose destination (last operand) is the tile variable `name`."""
    (loop,) = [op for op in module.walk() if op.name == "tile.for"]
    return [op for op in loop.walk() if op.operands and op.operands[-1].name == name]


def test_plus_equals_sum_is_one_accumulating_reduce():
    module = driver.frontend(ROW_SUM)
    (loop,) = [op for op in module.walk() if op.name == "tile.for"]
    assert [op.name for op in loop.body.ops] == ["tile.alloc", "tile.copy", "tile.reduce"] * 2
    for name, tile in (("s", "%0"), ("t", "%1")):
        (op,) = writers(module, name)
        assert op.name == "tile.reduce" and op.attrs == {"accumulate": True, "axis": 1, "fn": "sum"}
        assert op.operands[0].name == tile.lstrip("%") and op.operands[1].type.dtype == "f32"
    text = print_module(module)
    assert ('      tile.reduce(%0, %s) {accumulate = true, axis = 1, fn = "sum"} '
            'loc("' + ROW_SUM + '":13:9)\n') in text
    assert "tile.elementwise" not in text


def test_which_forms_accumulate(forms):
    module = driver.frontend(forms)
    for name in FUSED:
        (op,) = writers(module, name)
        assert op.name == "tile.reduce" and op.attrs.get("accumulate") is True, name
    for name in UNFUSED:  # target = target op temporary, the sum taken into a temporary before
        (op,) = writers(module, name)
        assert op.name == "tile.elementwise" and op.operands[0] is op.operands[2], (name, op.name)
    reduces = [op for op in module.walk() if op.name == "tile.reduce"]
    assert len(reduces) == len(FUSED | UNFUSED)  # one per statement
    assert {op.operands[1].name for op in reduces if op.attrs.get("accumulate")} == FUSED


@pytest.mark.parametrize("dist", oracle.DISTRIBUTIONS)
def test_forms_match_torch_in_the_interpreter_and_tilelang_cpu(forms, dist):
    module = driver.frontend(forms)
    final = driver.optimize(driver.frontend(forms), "tilelang-cpu")
    inputs = oracle.random_inputs(module, oracle.DISTRIBUTIONS.index(dist), "cpu", dist)
    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    interp = run(final, {"X": inputs[0].numpy(), "H": inputs[1].numpy()})
    compiled = tkc.compile(forms, target="tilelang-cpu")(*inputs)
    for k, ((name, dtype), ref) in enumerate(zip(oracle.outputs(module), refs)):
        tol = budgets[name].tol(dtype)
        for target, out in (("interp", torch.from_numpy(np.asarray(interp[name], np.float64))),
                            ("tilelang-cpu", compiled[k])):
            err = oracle.rel_error(out, ref)
            assert err <= tol, f"{target}, {dist}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"


def test_the_accumulated_length_is_in_the_error_budget():
    """The oracle counts every term summed into s: BN per reduce times the loop's trips."""
    module = driver.frontend(ROW_SUM)
    budgets = oracle.error_budgets(module)
    assert budgets["S"].n == budgets["T"].n == 64 * 4  # BN = 64, cdiv(200, 64) = 4 trips


@pytest.mark.parametrize("stmt, message, at", [
    ("s += sum(X[m*BM : +BM, j*BN : +BN])", "`sum` takes 2 arguments, got 1", "sum("),
    ("s += sum(X[m*BM : +BM, j*BN : +BN], 2)", "axis 2 out of range for a rank-2 tile", "2)"),
])
def test_malformed_sums_are_located_errors(tmp_path, stmt, message, at):
    """The accumulating form checks the call as a plain `sum(...)` does, at the same places."""
    text = open(ROW_SUM, encoding="utf-8").read().replace("s += sum(X[m*BM : +BM, j*BN : +BN], 1)", stmt)
    path = tmp_path / "bad.tk"
    path.write_text(text)
    with pytest.raises(TkError) as info:
        driver.frontend(str(path))
    (d,) = info.value.diagnostics
    line = text.splitlines()[12]
    assert stmt in line
    assert d.message == message and d.loc == Loc(str(path), 13, line.index(at) + 1), (d.message, d.loc)


IR = '''\
tile.func() {consts = {BM = 16}, dims = {M = 32, N = 64}, outputs = [1], reference = "X.sum(1, keepdim=True)", \
sym_name = "k"} loc("k.tk":1:1) {
^(%X: global<f32[M, N]>, %S: global<f32[M, 1]>)
  tile.launch() {grid = ["cdiv(M, BM)"], threads = "128", vars = ["m"]} loc("k.tk":3:5) {
    %x = tile.alloc() : frag<f32[BM, N]> loc("k.tk":4:9)
    tile.copy(%X, %x) {src_offsets = ["m * BM", "0"]} loc("k.tk":4:9)
    %s = tile.alloc() : frag<f32[BM, 1]> loc("k.tk":5:9)
    tile.fill(%s) {value = 0.0} loc("k.tk":5:9)
    tile.reduce(%x, %s) {ATTRS} loc("k.tk":6:9)
    tile.copy(%s, %S) {dst_offsets = ["m * BM", "0"]} loc("k.tk":7:5)
  }
}
'''


def test_the_verifier_accepts_accumulate_with_sum():
    """The hand-written accumulating reduce runs: each row sum within the bound of recursive f32
    summation, n u32 (|s0| + sum |x|) (Higham, Accuracy and Stability, eq. 4.4), of s0 + the float64
    sum, where s0 = 0.5 is what the accumulator held; on small integers, where every partial sum is
    exact in f32, exactly."""
    ir = IR.replace("ATTRS", 'accumulate = true, axis = 1, fn = "sum"').replace("{value = 0.0}", "{value = 0.5}")
    assert "{value = 0.5}" in ir
    module = parse_module(ir, "k.tkir")
    gen = torch.Generator().manual_seed(9)
    normal = torch.randn(32, 64, generator=gen, dtype=torch.float64).float() * 3.0 - 1.0
    ints = torch.randint(-8, 9, (32, 64), generator=gen).float()
    for x in (normal, ints):
        out = torch.from_numpy(np.asarray(run(module, {"X": x.numpy()})["S"], np.float64))
        ref = 0.5 + x.double().sum(1, keepdim=True)
        bound = 64 * 2.0**-24 * (0.5 + x.double().abs().sum(1, keepdim=True))
        assert out.shape == ref.shape and ((out - ref).abs() <= bound).all()
    assert torch.equal(out, ref)  # the ints: exact


@pytest.mark.parametrize("attrs, message", [
    ('accumulate = true, axis = 1, fn = "max"', "`accumulate = true` takes fn `sum` only, got `max`"),
    ('accumulate = true, axis = 1, fn = "min"', "`accumulate = true` takes fn `sum` only, got `min`"),
    ('accumulate = 1, axis = 1, fn = "sum"', "attribute `accumulate` of `tile.reduce` must be `true` or `false`, got 1"),
])
def test_the_verifier_rejects_other_accumulates(attrs, message):
    with pytest.raises(TkError) as info:
        parse_module(IR.replace("ATTRS", attrs), "k.tkir")
    (d,) = info.value.diagnostics
    assert message in d.message and d.loc == Loc("k.tk", 6, 9), (d.message, d.loc)


def test_backends_add_onto_the_accumulator():
    """TileLang (GPU) and CUDA: s is cleared once before the loop and each reduce adds onto it."""
    module = driver.optimize(driver.frontend(ROW_SUM), "tilelang")
    tl = tilelang.emit(module)
    assert tl.count("T.clear(s)") == 1 and not re.search(r"^\s*s\[i, 0\] = T\.Cast", tl, re.M)
    # TileLang's thread reduction into a fragment of its own, then added onto s
    after = tl[tl.index("T.reduce_sum(part_0, s_red, dim=1)"):]
    assert re.search(r"^\s*s\[(\w+), 0\] = s\[\1, 0\] \+ s_red\[\1\]$", after, re.M), tl
    # the serial form (tkc/runtime.py's fallback when TileLang finds no layout) adds onto s too
    serial = tilelang.emit(module, thread_reduce=False)
    assert "T.reduce_" not in serial
    loop = serial[serial.index("for j in T.serial(4):"):]
    assert re.search(r"^\s*s\[(\w+), 0\] = s\[\1, 0\] \+ \w+\[\1, \w+\]$", loop, re.M), serial
    # the default pipeline defers the sums out of the loop (defer-reduce): per-thread partial
    # sums in the loop, then each register reduction adds onto s and t once
    src = cuda.emit(driver.optimize(driver.frontend(ROW_SUM), "cuda"))
    loop = src[src.index("for (int j = 0; j < 4; ++j)"):src.index("// tile.reduce")]
    after = src[src.index("// tile.reduce"):]
    assert "part_0[e] = part_0[e] + t0[e];" in loop and "__shfl_xor_sync" not in loop
    assert "s[ch / 8] = s[ch / 8] + red;" in after and "t[ch / 8] = t[ch / 8] + red;" in after
    assert not re.search(r"\b[st]\[ch / 8\] = red;", src)
    # without it, every trip's reduction adds onto s and t
    spec = driver.default_pipeline("cuda").replace("defer-reduce,", "")
    src = cuda.emit(run_pipeline(driver.frontend(ROW_SUM), parse_pipeline(spec)))
    body = src[src.index("for (int j = 0; j < 4; ++j)"):]
    assert "s[ch / 8] = s[ch / 8] + red;" in body and "t[ch / 8] = t[ch / 8] + red;" in body
    assert not re.search(r"\b[st]\[ch / 8\] = red;", src)

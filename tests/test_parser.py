"""dsl/parser.py: .tk source -> AST, with the source location of every node."""

from __future__ import annotations

import pytest

from dsl import ast as A
from dsl.diagnostics import Loc, TkError
from dsl.parser import parse

SRC = '''\
# a comment line
kernel k<BM=64, stages=2>(A: f16[M, K], B: f16[K, 8]) -> (C: f32[M, 8])
    where M = 128, K = 32
    requires M % BM == 0
    reference "A.float() @ B"
{
    grid (cdiv(M, BM)) as (m) threads(128)
    S = zeros(f32[BM, 8])
    for s in pipelined(K / 16, stages) {
        S += A[m*BM : +BM, s*16 : +16] @ B[s*16 : +16, :]
    }
    C[m*BM : +BM, :] = S
}
'''


def pos(needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based (line, col) of the `nth` occurrence of `needle` in SRC."""
    at = -1
    for _ in range(nth + 1):
        at = SRC.index(needle, at + 1)
    line = SRC.count("\n", 0, at) + 1
    return line, at - (SRC.rfind("\n", 0, at) + 1) + 1


def at(node) -> tuple[int, int]:
    assert node.loc.file == "k.tk"
    return node.loc.line, node.loc.col


@pytest.fixture(scope="module")
def kernel() -> A.Kernel:
    return parse(SRC, "k.tk")


def test_kernel_header(kernel):
    assert kernel.name == "k"
    assert at(kernel) == pos("kernel")
    assert {n: v for n, (v, _) in kernel.consts.items()} == {"BM": 64, "stages": 2}
    assert (kernel.consts["stages"][1].line, kernel.consts["stages"][1].col) == pos("stages=2")
    assert [p.name for p in kernel.inputs] == ["A", "B"] and [p.name for p in kernel.outputs] == ["C"]
    b = kernel.inputs[1]
    assert at(b) == pos("B: f16")
    assert [d for d, _ in b.dims] == ["K", 8]
    assert (b.dims[1][1].line, b.dims[1][1].col) == pos("8]")
    assert {n: v for n, (v, _) in kernel.dim_defaults.items()} == {"M": 128, "K": 32}
    assert kernel.reference[0] == "A.float() @ B"
    assert (kernel.reference[1].line, kernel.reference[1].col) == pos('"A.float()')


def test_statement_locations(kernel):
    grid, assign, loop, store = kernel.body
    assert isinstance(grid, A.Grid) and at(grid) == pos("grid")
    assert grid.vars == ["m"] and isinstance(grid.threads, A.IntLit) and grid.threads.value == 128
    assert isinstance(assign, A.Assign) and at(assign) == pos("S = zeros")
    assert isinstance(assign.value, A.Call) and at(assign.value) == pos("zeros")
    assert isinstance(loop, A.For) and at(loop) == pos("for s")
    assert loop.var == "s" and loop.kind == "pipelined"
    (aug,) = loop.body
    assert isinstance(aug, A.AugAssign) and at(aug) == pos("S +=") and aug.op == "+"
    assert isinstance(store, A.Store) and at(store) == pos("C[m*BM")
    assert store.op is None and isinstance(store.value, A.Name) and at(store.value) == pos("S\n}")


def test_expression_locations(kernel):
    aug = kernel.body[2].body[0]
    gemm = aug.value
    assert isinstance(gemm, A.BinOp) and gemm.op == "@"
    lhs, rhs = gemm.lhs, gemm.rhs
    assert isinstance(lhs, A.Index) and lhs.base == "A" and at(lhs) == pos("A[m*BM")
    assert isinstance(rhs, A.Index) and rhs.base == "B" and at(rhs) == pos("B[s*16")
    first, second = lhs.subs
    assert first.kind == "len" and at(first) == pos("m*BM : +BM, s")
    assert isinstance(first.lo, A.BinOp) and first.lo.op == "*"
    assert isinstance(first.hi, A.Name) and first.hi.id == "BM" and at(first.hi) == pos("BM, s*16")
    assert second.kind == "len" and at(second) == pos("s*16 : +16] @")
    assert [s.kind for s in rhs.subs] == ["len", "all"]
    loop = kernel.body[2]
    hi, stages = loop.args
    assert isinstance(stages, A.Name) and at(stages) == pos("stages)")
    assert isinstance(hi, A.BinOp) and hi.op == "/"
    assert isinstance(hi.lhs, A.Name) and at(hi.lhs) == pos("K / 16")
    assert isinstance(hi.rhs, A.IntLit) and hi.rhs.value == 16 and at(hi.rhs) == pos("16, stages")


def test_requires_is_an_expression(kernel):
    (cond,) = kernel.requires
    assert isinstance(cond, A.BinOp) and cond.op == "=="
    assert isinstance(cond.lhs, A.BinOp) and cond.lhs.op == "%"
    assert isinstance(cond.rhs, A.IntLit) and cond.rhs.value == 0


def test_requires_condition_location_is_its_first_token(kernel):
    (cond,) = kernel.requires
    assert at(cond) == pos("M % BM")  # so `requires` errors point at the condition, not at `==`


@pytest.mark.parametrize("src,needle,message", [
    ("kernel k(A: f16[M]) -> (C: f16[M]) { grid (M) as (m) $ }", "$", "unexpected character `$`"),
    ("kernel k(A: f16[M]) -> (C: f16[M]) { grid (M) as (m) C[m : +1] = = A }", "= A", "unexpected `=`"),
    ("kernel k<X=1>(A: f16[M]) -> (C: f16[M]) where M = 1, M = 2 { grid (M) as (m) }", "M = 2",
     "dim default `M` is defined twice"),
    ("kernel k<X=1, X=2>(A: f16[M]) -> (C: f16[M]) { grid (M) as (m) }", "X=2",
     "schedule constant `X` is defined twice"),
    ('kernel k<X=1>(A: f16[M]) -> (C: f16[M]) reference "A" reference "A" { grid (M) as (m) }', 'reference "A" {',
     "a kernel has one `reference`"),
])
def test_parse_errors_are_located(src, needle, message):
    with pytest.raises(TkError) as info:
        parse(src, "x.tk")
    (d,) = info.value.diagnostics
    assert message in d.message
    assert d.loc == Loc("x.tk", 1, src.index(needle) + 1)


def test_kernel_without_schedule_constants():
    k = parse("kernel k(A: f16[M]) -> (C: f16[M]) where M = 4 { grid (M) as (m) C[m : +1] = A[m : +1] }", "x.tk")
    assert k.consts == {} and [p.name for p in k.inputs] == ["A"] and len(k.body) == 2

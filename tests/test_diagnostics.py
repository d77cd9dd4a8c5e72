"""Every user-facing diagnostic through the CLI: `FILE:LINE:COL: error: message`, the source line,
a caret, notes, exit status 1 and never a traceback (contract in docs/DESIGN and tkc/cli.py)."""

from __future__ import annotations

import os
import subprocess

import pytest

from diag_util import FILE_LEVEL, HEAD, check_rendered, position
from tkc.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

HEADER = ("kernel k<BM=64>(A: f16[M, K], B: f16[K, M]) -> (C: f16[M, K])\n    where M = 128, K = 32\n{\n"
          "    grid (cdiv(M, BM)) as (m)\n")


def kern(*body: str) -> str:
    return HEADER + "".join(f"    {b}\n" for b in body) + "}\n"


def small(signature: str, *body: str, where: str = "M = 128") -> str:
    return f"kernel k<BM=64>{signature}\n    where {where}\n{{\n" + "".join(f"    {b}\n" for b in body) + "}\n"


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def example(name: str) -> tuple[str, str]:
    path = os.path.join(EXAMPLES, f"{name}.tk")
    with open(path, encoding="utf-8") as f:
        return path, f.read()


# (id, source, needle (or (needle, nth)), message, notes)
LOWERING = [
    ("unexpected-char", kern("X = A[m*BM : +BM, :] $ 2"), "$", "unexpected character `$`",
     ["comments start with `#`; see docs/LANGUAGE.md for the syntax"]),
    ("unexpected-token", "kernel k<BM=64>(A: f16[M, K]) -> C: f16[M, K]\n    where M = 4, K = 4\n{\n}\n", "C:",
     "syntax error: unexpected `C`", ["expected `(`"]),
    ("unknown-name", kern("C[m*BM : +BM, :] = Y"), "Y", "unknown name `Y`",
     ["names in scope: A, B, BM, C, K, M, m"]),
    ("unknown-tensor", kern("X = Q[0 : +1, :]"), "Q[", "unknown name `Q`", ["names in scope: A, B, BM, C, K, M, m"]),
    ("update-unknown", kern("Z += A[m*BM : +BM, :]"), "Z +=", "unknown name `Z`",
     ["define it first, e.g. `Z = zeros(f32[BM, BN])`"]),
    ("shape-elementwise", kern("X = A[m*BM : +BM, :] + B[:, m*BM : +BM]"), "+ B", "shape mismatch in `+`: "
     "f16[64, 32] and f16[32, 64]", ["trailing dims must be equal or 1 (numpy broadcasting)"]),
    ("shape-gemm-inner", kern("C[m*BM : +BM, :] = A[m*BM : +BM, :] @ A[m*BM : +BM, :]"), "@",
     "shape mismatch in `@`: f16[64, 32] @ f16[64, 32]", ["the inner dims must agree (32 vs 64)"]),
    ("shape-gemm-acc", kern("S = zeros(f32[BM, BM])", "S += A[m*BM : +BM, :] @ B[:, 0 : +32]"), "@",
     "shape mismatch: `S` is f32[64, 64], but the product is [64, 32]", []),
    ("gemm-int-acc", kern("S = zeros(i32[BM, BM])", "S += A[m*BM : +BM, :] @ B[:, 0 : +BM]"), "@",
     "gemm accumulator `S` must be a float tile, got i32", []),
    ("shape-store", kern("C[m*BM : +BM, :] = A[m*BM : +32, :]"), "A[m*BM : +32",
     "shape mismatch in store to `C`: expected f16[64, 32], got f16[32, 32]",
     ["symbolically: expected [BM, K], got [32, K]"]),
    ("shape-assign", kern("X = A[m*BM : +BM, :]", "X = A[0 : +32, :]"), "A[0 : +32",
     "shape mismatch in assignment to `X`: expected f16[64, 32], got f16[32, 32]",
     ["symbolically: expected [BM, K], got [32, K]"]),
    ("shape-augassign", kern("X = A[m*BM : +BM, :]", "X += B[:, 0 : +BM]"), "B[:, 0",
     "shape mismatch in `+=` on `X`: expected f16[64, 32], got f16[32, 64]",
     ["symbolically: expected [BM, K], got [K, BM]"]),
    ("rank", kern("X = A[m*BM : +BM]"), "A[m*BM : +BM]", "`A` has rank 2, but 1 subscripts are given", []),
    ("augassign-global", kern("X = A[m*BM : +BM, :]", "C[m*BM : +BM, :] += X"), "C[m*BM",
     "`+=` on a global tensor is not supported", ["accumulate in a tile and store it once with `=`"]),
    ("dup-const", "kernel k<BM=64, BM=32>(A: f16[M]) -> (C: f16[M])\n    where M = 8\n{\n    grid (M) as (m)\n}\n",
     "BM=32", "schedule constant `BM` is defined twice", []),
    ("dup-param", small("(A: f16[M], A: f16[M]) -> (C: f16[M])", "grid (M) as (m)"), ("A: f16", 1),
     "`A` is already defined", []),
    ("dup-where", small("(A: f16[M]) -> (C: f16[M])", "grid (M) as (m)", where="M = 8, M = 9"), "M = 9",
     "dim default `M` is defined twice", []),
    ("dim-no-value", small("(A: f16[M, Q]) -> (C: f16[M, Q])", "grid (M) as (m)"), "Q]", "dim `Q` has no value",
     ["add a default (`where Q = 1024`) or pass `-D Q=...`"]),
    ("where-not-dim", small("(A: f16[M]) -> (C: f16[M])", "grid (M) as (m)", where="M = 8, Z = 3"), "Z = 3",
     "`where` gives a default for `Z`, which is not a tensor dim", []),
    ("const-and-dim", "kernel k<M=64>(A: f16[M]) -> (C: f16[M])\n    where M = 8\n{\n    grid (M) as (m)\n}\n",
     "M=64", "`M` is both a schedule constant and a tensor dim", ["rename one of them"]),
    ("unknown-dtype", small("(A: q8[M]) -> (C: f16[M])", "grid (M) as (m)"), "A: q8", "unknown dtype `q8` for `A`",
     ["use one of f16, bf16, f32, f64, i8, i32, bool"]),
    ("no-grid", small("(A: f16[M]) -> (C: f16[M])", "X = A[0 : +1]"), "kernel", "kernel `k` has no `grid` statement",
     ["start the body with `grid (cdiv(M, BM)) as (m)`"]),
    ("grid-not-first", small("(A: f16[M]) -> (C: f16[M])", "X = A[0 : +1]", "grid (M) as (m)"), "X =",
     "the `grid` statement must come first in the kernel body", []),
    ("two-grids", kern("grid (M) as (q)"), ("grid", 1), "a kernel has one `grid` statement", []),
    ("grid-arity", small("(A: f16[M]) -> (C: f16[M])", "grid (M, M) as (m)"), "grid",
     "the grid has 2 extents and 1 names", ["give 1 to 3 extents and one block-index name per extent"]),
    ("unknown-loop", kern("for i in forever(4) {", "}"), "for", "unknown loop `forever`",
     ["use range(n), range(lo, hi), pipelined(n, stages) or unroll(n)"]),
    ("loop-arity", kern("for i in pipelined(4) {", "}"), "for", "`pipelined` takes 2 arguments, got 1", []),
    ("loop-shadow", kern("for m in range(4) {", "}"), "for", "loop variable `m` shadows another name", []),
    ("assign-index", kern("m = A[m*BM : +BM, :]"), "m = A", "cannot assign to `m`: it is an index or a constant", []),
    ("update-index", kern("m += A[m*BM : +BM, :]"), "m +=", "cannot update `m`: it is an index or a constant", []),
    ("global-as-tile", kern("X = A"), "A\n", "`A` is a global tensor", ["write a slice such as `A[...]`"]),
    ("store-to-tile", kern("X = A[m*BM : +BM, :]", "X[0 : +1, :] = X"), "X[0", "`X` is not a global tensor",
     ["only global tensors can be sliced"]),
    ("slice-a-tile", kern("X = A[m*BM : +BM, :]", "Y = X[0 : +1, :]"), "X[0", "`X` is not a global tensor",
     ["only global tensors can be sliced"]),
    ("tile-as-index", kern("X = A[m*BM : +BM, :]", "Y = A[X : +BM, :]"), "X : +BM", "`X` is a tile, not an integer",
     ["index expressions use dims, constants and grid/loop indices"]),
    ("index-in-extent", kern("X = A[0 : +m, :]"), "m, :]",
     "`m` is a grid or loop index; only dims and constants are allowed here", []),
    ("cdiv-arity", kern("X = A[cdiv(m) : +BM, :]"), ("cdiv", 1), "`cdiv` takes 2 arguments, got 1", []),
    ("float-index", kern("X = A[1.5 : +BM, :]"), "1.5", "expected an integer expression",
     ["index expressions use + - * / % cdiv min max"]),
    ("range-slice-moves", kern("X = A[m : BM, :]"), "m : BM", "a `lo : hi` slice must not depend on grid or loop "
     "indices", ["write `lo : +size` for a tile that moves with an index"]),
    ("empty-slice", kern("X = A[BM : 8, :]"), "BM : 8", "empty slice: `BM : 8` has -56 elements", []),
    ("not-a-dtype", kern("X = cast(A[m*BM : +BM, :], f7)"), "f7", "expected a dtype",
     ["use one of f16, bf16, f32, f64, i8, i32, bool"]),
    ("not-a-type", kern("X = zeros(A)"), "A)", "expected a tile type such as `f32[BM, BN]`", []),
    ("int-as-tile", kern("X = BM"), "BM\n", "`BM` is an integer, not a tile", ["use it inside an index or a slice"]),
    ("bare-number", kern("X = 1.5"), "1.5", "a bare number is not a tile",
     ["use `full(f32[BM, BN], 1.0)` or combine it with a tile"]),
    ("type-as-value", kern("X = f16[BM, K]"), "f16[BM, K]\n", "`f16[...]` is a type, not a value",
     ["use `zeros(...)` or `full(..., value)`"]),
    ("tile-modulo", kern("X = A[m*BM : +BM, :] % A[m*BM : +BM, :]"), "% A", "operator `%` is not defined on tiles", []),
    ("pow-number-base", kern("X = pow(2.0, A[m*BM : +BM, :])"), "2.0", "`pow` takes a tile as its base",
     ["for a number base b write `exp2(x * log2(b))` with log2(b) as a number"]),
    ("number-divided-by-zero", kern("X = A[m*BM : +BM, :] * (1.0 / (BM - 64))"), "/ (BM", "division by zero in `/`", []),
    ("where-not-bool", kern("X = A[m*BM : +BM, :]", "Y = where(X, X, 0.0)"), "X, X", "the condition of `where` must "
     "be a bool tile, got f16", ["compare to make one: `where(x > 0.0, x, 0.0)`"]),
    ("bool-arithmetic", kern("X = A[m*BM : +BM, :] > 0.0", "Y = X + X"), "+ X", "`+` is not defined on bool tiles",
     ["a bool tile takes `where(c, a, b)`, `==`/`!=` and `cast(c, f32)` (0 or 1)"]),
    ("bool-order", kern("X = A[m*BM : +BM, :] > 0.0", "Y = X < X"), "< X", "`<` is not defined on bool tiles",
     ["a bool tile takes `where(c, a, b)`, `==`/`!=` and `cast(c, f32)` (0 or 1)"]),
    ("bool-sum", kern("X = A[m*BM : +BM, :] > 0.0", "Y = sum(X, 1)"), "X, 1", "`sum` is not defined on bool tiles",
     ["count with `sum(cast(c, f32), axis)`"]),
    ("where-shapes", kern("X = A[m*BM : +BM, :]", "Y = where(X > 0.0, X, B[:, 0 : +BM])"), ("where", 1),
     "shape mismatch in `where`: [64, 32] and f16[32, 64]", ["trailing dims must be equal or 1 (numpy broadcasting)"]),
    ("fn-arity", kern("X = zeros(f32[BM, K], 1)"), "zeros", "`zeros` takes 1 argument, got 2", []),
    ("full-value", kern("X = full(f32[BM, K], zeros(f32[1]))"), "zeros(f32[1]))", "`full` takes a number as its fill value",
     ["a literal, a dim or constant, arithmetic on those, or an index (a grid or loop index, a runtime scalar)"]),
    ("axis", kern("X = sum(A[m*BM : +BM, :], 2)"), "2)", "axis 2 out of range for a rank-2 tile", []),
    ("unknown-fn", kern("X = frob(A[m*BM : +BM, :])"), "frob", "unknown function `frob`",
     ["tile functions: zeros, full, cast, ..."]),
    # issue 10: runtime scalars, index tensors, strided slices, iota
    ("scalar-grid", small("(A: f32[M], pos: i32) -> (C: f32[M])", "grid (pos) as (m)", "C[m : +1] = A[m : +1]"),
     "pos)", "`pos` is a runtime scalar: its value is known only when the kernel runs, and this needs a value at "
     "compile time", ["runtime scalars may set slice offsets, loop bounds and numbers in tile expressions; grids, "
                      "tile extents, `if` and `pipelined` stages use dims and constants"]),
    ("scalar-extent", small("(A: f32[M], pos: i32) -> (C: f32[M])", "grid (M) as (m)", "C[0 : +pos] = A[0 : +pos]"),
     "pos]", "`pos` is a runtime scalar: its value is known only when the kernel runs, and this needs a value at "
     "compile time", ["runtime scalars may set slice offsets, loop bounds and numbers in tile expressions; grids, "
                      "tile extents, `if` and `pipelined` stages use dims and constants"]),
    ("scalar-dtype", small("(A: f32[M], s: f32) -> (C: f32[M])", "grid (M) as (m)", "C[m : +1] = A[m : +1]"),
     "s: f32", "runtime scalar `s` has dtype `f32`; runtime scalars are `i32`",
     ["declare it `s: i32`, or pass a tensor (`s: f32[1]`)"]),
    ("scalar-output", small("(A: f32[M]) -> (p: i32)", "grid (M) as (m)"), "p: i32",
     "output `p` is a scalar; outputs are tensors", ["declare it with a shape, e.g. `p: i32[1]`"]),
    ("index-float", small("(A: f32[M], X: f32[M]) -> (C: f32[M])", "grid (M) as (m)", "C[m : +1] = A[X[m] : +1]"),
     "X[m]", "`X` is f32; an index must be an integer tensor (i32)", ["declare it `X: i32[...]`"]),
    ("index-slice", small("(A: f32[M], ids: i32[M]) -> (C: f32[M])", "grid (M) as (m)",
                          "C[m : +1] = A[ids[0 : 2] : +1]"),
     "ids[0", "`ids` has rank 1: index it with 1 single indices (`ids[i]`), not slices", []),
    ("index-grid", small("(A: f32[M], ids: i32[M]) -> (C: f32[M])", "grid (ids[0]) as (m)", "C[m : +1] = A[m : +1]"),
     "ids[0]", "`ids[...]` is read when the kernel runs, and this needs a value at compile time",
     ["a tensor element may set slice offsets and loop bounds"]),
    ("step-runtime", small("(A: f32[M]) -> (C: f32[M])", "grid (M / 2) as (m)", "C[m : +2] = A[0 : +2 : m]"),
     "m]", "the step of a slice must be a positive number known at compile time",
     ["a literal, a dim or a constant: `x[0 : N : 2]` takes every second element"]),
    ("step-moving", small("(A: f32[M]) -> (C: f32[M])", "grid (M / 2) as (m)", "C[m*2 : +2] = A[m : m + 4 : 2]"),
     "m : m + 4", "a `lo : hi : step` slice must not depend on grid or loop indices",
     ["write `lo : +n : step` (n elements) for a tile that moves with an index"]),
    ("reshape-count", small("(A: f32[M]) -> (C: f32[M])", "grid (M / 4) as (m)",
                            "C[m*4 : +4] = reshape(A[m*4 : +4], f32[2, 3])"), "f32[2, 3]",
     "cannot reshape f32[4] (4 elements) into f32[2, 3] (6 elements)", ["the element counts must be equal"]),
    ("iota-axis", small("(A: f32[M]) -> (C: f32[M])", "grid (M / 2) as (m)", "C[m*2 : +2] = iota(f32[2], 1)"),
     "1)", "the axis of `iota` must be a number in [0, 1)",
     ["`iota(f32[BT, 1], 0)`: each element is its index along axis 0"]),

]


@pytest.mark.parametrize("case", LOWERING, ids=[c[0] for c in LOWERING])
def test_source_errors(capsys, tmp_path, case):
    name, src, needle, message, notes = case
    path = tmp_path / f"{name}.tk"
    path.write_text(src)
    rc, out, err = cli(capsys, "opt", str(path))
    assert rc == 1 and out == ""
    line, col = position(src, *(needle if isinstance(needle, tuple) else (needle,)))
    check_rendered(err, str(path), line, col, message, source=src, notes=notes)


def test_missing_brace(capsys, tmp_path):
    src = kern("X = A[m*BM : +BM, :]", "C[m*BM : +BM, :] = X")[:-2]  # drop the closing "}\n"
    path = tmp_path / "brace.tk"
    path.write_text(src)
    rc, _, err = cli(capsys, "opt", str(path))
    assert rc == 1
    lines = src.splitlines()
    check_rendered(err, str(path), len(lines), len(lines[-1]) + 1, "syntax error: unexpected end of file",
                   source=src, notes=None)


def test_missing_brace_note_mentions_the_brace(capsys, tmp_path):
    path = tmp_path / "brace.tk"
    path.write_text(kern("X = A[m*BM : +BM, :]", "C[m*BM : +BM, :] = X")[:-2])
    _, _, err = cli(capsys, "opt", str(path))
    assert "`}`" in "\n".join(x for x in err.splitlines() if x.startswith("note: "))


def test_missing_brace_without_trailing_newline(capsys, tmp_path):
    src = kern("X = A[m*BM : +BM, :]", "C[m*BM : +BM, :] = X")[:-3]  # no "}" and no final newline
    path = tmp_path / "brace.tk"
    path.write_text(src)
    _, _, err = cli(capsys, "opt", str(path))
    assert err.startswith(f"{path}:{len(src.splitlines())}:")


def test_grid_index_shadowing_points_at_the_grid(capsys, tmp_path):
    src = small("(A: f16[M]) -> (C: f16[M])", "grid (M) as (BM)")
    path = tmp_path / "shadow.tk"
    path.write_text(src)
    rc, _, err = cli(capsys, "opt", str(path))
    assert rc == 1
    check_rendered(err, str(path), *position(src, "grid"), "index name `BM` shadows another name", source=src)


# ---- conditions, budgets, command-line input --------------------------------------------------
def test_requires_does_not_hold(capsys):
    path, src = example("miss_v3")
    rc, out, err = cli(capsys, "compile", path, "-D", "K=1000")
    assert rc == 1 and out == ""
    check_rendered(err, path, *position(src, "K % R == 0"), "requirement `K % R == 0` does not hold", source=src,
                   notes=["with K = 1000, R = 64"])


REQUIRES_TILE = """\
kernel blocked<BM=32>(A: f16[M, K]) -> (C: f16[M, K])
    where M = 128, K = 64
    requires M % BM == 0
{
    grid (M / BM) as (m)
    C[m*BM : +BM, :] = A[m*BM : +BM, :]
}
"""


def test_tile_size_breaks_requires(capsys, tmp_path):
    path = tmp_path / "blocked.tk"
    path.write_text(REQUIRES_TILE)
    rc, out, err = cli(capsys, "opt", str(path), "-p", "tile{BM=48}")
    assert rc == 1 and out == ""
    check_rendered(err, str(path), *position(REQUIRES_TILE, "M % BM == 0"), "requirement `M % BM == 0` does not hold",
                   source=REQUIRES_TILE, notes=["with BM = 48, M = 128",
                                                "pick tile sizes that divide the problem dims (e.g. `-D BM=...`)"])
    rc, out, _ = cli(capsys, "opt", str(path), "-p", "tile{BM=64}")  # 64 divides 128: fine
    assert rc == 0 and "frag<f16[64, 64]>" in out


def test_shared_memory_over_budget(capsys):
    path, src = example("miss_row")
    rc, out, err = cli(capsys, "compile", path, "-D", "N=4096")
    assert rc == 1 and out == ""
    m = HEAD.match(err.splitlines()[0])
    assert m and m["file"] == path and (int(m["line"]), int(m["col"])) == position(src, "grid")
    total = int(m["msg"].split(" needs ")[1].split()[0])
    assert m["msg"] == f"kernel `miss_row` needs {total} bytes of shared memory per block; limit is 232448 on sm_90"
    notes = check_rendered(err, path, int(m["line"]), int(m["col"]), m["msg"], source=src)
    *buffers, fix = notes
    assert fix.startswith("fix: ")
    assert any("shared<f16[64, 4096]>: 524288 bytes x 1 stage = 524288 bytes" in n for n in buffers)
    assert sum(int(n.split(" = ")[-1].split()[0]) for n in buffers) == total  # every buffer is listed
    assert all(f"(from {path}:" in n for n in buffers)


def test_unknown_define(capsys):
    path, src = example("miss")
    rc, _, err = cli(capsys, "compile", path, "-D", "FOO=3")
    assert rc == 1
    check_rendered(err, path, *position(src, "kernel miss"),
                   "`-D FOO` names neither a dim nor a schedule constant of `miss`", source=src,
                   notes=["known names: BM, BN, K, M, N, R, ..."])


def test_tile_size_zero_is_reported_where_it_sets_an_extent(capsys):
    path, src = example("miss_v3")
    rc, _, err = cli(capsys, "opt", path, "-D", "BM=0")
    assert rc == 1
    check_rendered(err, path, *position(src, "BM, R]"), "tile extent `BM` is 0; it must be positive",
                   source=src, notes=[])


def test_negative_schedule_constant(capsys):
    path, src = example("miss_v3")
    rc, _, err = cli(capsys, "opt", path, "-D", "stages=-1")
    assert rc == 1
    check_rendered(err, path, *position(src, "stages="), "schedule constant `stages` must not be negative, got -1",
                   source=src, notes=[])


def test_dim_must_be_positive(capsys):
    path, src = example("miss_v3")
    rc, _, err = cli(capsys, "opt", path, "-D", "M=0")
    assert rc == 1
    assert err.startswith(f"{path}:") and "dim `M` must be positive, got 0" in err.splitlines()[0]
    path, _ = example("sddmm")  # a pattern's entry count may be 0, not negative
    rc, _, err = cli(capsys, "opt", path, "-D", "NNZ=-1")
    assert rc == 1 and "dim `NNZ` must be non-negative, got -1" in err.splitlines()[0]
    assert cli(capsys, "opt", path, "-D", "NNZ=0")[0] == 0


@pytest.mark.parametrize("pipeline,col,message,notes", [
    ("tile,frob", 6, "unknown pass `frob`", ["known passes: check-coverage, check-smem-fit, defer-reduce, fold-copies, "
                                              "fuse-int8-dot, map-dsmem, software-pipeline, sparse-dispatch, tile"]),
    ("software-pipeline{foo=1}", 1, "unknown option `foo` for pass `software-pipeline`", ["options: stages"]),
    ("software-pipeline{stages=x}", 1, "option `stages` of `software-pipeline` must be an integer, got `x`", []),
    ("tile{BM=x}", 1, "tile size `BM` must be an integer, got `x`", []),
    ("tile{BM}", 1, "option `BM` of `tile` needs a value", []),
    ("check-smem-fit{target=sm_70}", 1, "unknown target `sm_70` for `check-smem-fit`",
     ["targets: sm_90, sm_90a, sm_80, sm_89, static"]),
    ("tile,,software-pipeline", 6, "malformed pipeline at `,software-pipeline`",
     ["write `pass-name{option=value,...}` items separated by commas"]),
])
def test_bad_pipelines(capsys, pipeline, col, message, notes):
    path, _ = example("miss_v3")
    rc, out, err = cli(capsys, "opt", path, "-p", pipeline)
    assert rc == 1 and out == ""
    check_rendered(err, "<pipeline>", 1, col, message, source=None, notes=notes)


@pytest.mark.parametrize("pipeline", ["tile,software-pipeline{foo=1}", "tile,check-smem-fit{target=sm_70}"])
def test_bad_option_points_at_its_pass(capsys, pipeline):
    path, _ = example("miss_v3")
    _, _, err = cli(capsys, "opt", path, "-p", pipeline)
    assert err.startswith("<pipeline>:1:6: error: ")


@pytest.mark.parametrize("pipeline,message", [
    ("tile{XX=3}", "`tile{XX=...}`: `XX` is not a schedule constant of `miss_v3`"),
    ("tile{BM=0}", "tile size `BM` must be positive, got 0"),
])
def test_bad_tile_bindings(capsys, pipeline, message):
    path, src = example("miss_v3")
    rc, _, err = cli(capsys, "opt", path, "-p", pipeline)
    assert rc == 1
    check_rendered(err, path, *position(src, "kernel miss_v3"), message, source=src)


def test_malformed_ir(capsys, tmp_path):
    text = "tile.func() {\n  garbage here\n}\n"
    path = tmp_path / "bad.tkir"
    path.write_text(text)
    rc, _, err = cli(capsys, "opt", str(path))
    assert rc == 1
    check_rendered(err, str(path), *position(text, "here"), "malformed IR text", source=text,
                   notes=["the IR must be in the generic form that `tkc opt` prints"])


def test_define_on_ir(capsys, tmp_path):
    path, _ = example("miss_v3")
    rc, ir, _ = cli(capsys, "opt", path)
    assert rc == 0
    irpath = tmp_path / "v3.tkir"
    irpath.write_text(ir)
    rc, _, err = cli(capsys, "opt", str(irpath), "-D", "M=3")
    assert rc == 1
    check_rendered(err, str(irpath), 1, 1, "`-D` applies to .tk files only; IR files are already specialized",
                   source=ir, notes=[])


def test_missing_file(capsys, tmp_path):
    path = str(tmp_path / "nothere.tk")
    for argv in (["opt", path], ["compile", path], ["run", path]):
        rc, out, err = cli(capsys, *argv)
        assert rc == 1 and out == ""
        assert "Traceback" not in err
        # a file-level diagnostic (no line to point at, no source line): `FILE: error: ...`
        assert err.strip().splitlines() == [f"{path}: error: cannot read `{path}`: No such file or directory"]


def test_failed_compile_writes_no_output(capsys, tmp_path):
    out = tmp_path / "out.py"
    path, _ = example("miss_v3")
    rc, _, err = cli(capsys, "compile", path, "-D", "K=1000", "-o", str(out))
    assert rc == 1 and "error:" in err
    assert not out.exists() and os.listdir(tmp_path) == []
    bad = tmp_path / "bad.tk"
    bad.write_text(kern("X = A[m*BM : +BM, :] $"))
    rc, _, _ = cli(capsys, "compile", str(bad), "--target", "tir", "-o", str(out))
    assert rc == 1 and not out.exists() and sorted(os.listdir(tmp_path)) == ["bad.tk"]


def test_check_smem_fit_before_tile(capsys):
    """Never an internal error: before `tile` the pass evaluates shapes under the kernel's constants."""
    path, src = example("miss_row")
    rc, out, err = cli(capsys, "opt", path, "-p", "check-smem-fit")
    assert rc == 0 and err == "" and out.startswith("tile.func()")
    rc, out, err = cli(capsys, "opt", path, "-D", "N=4096", "-p", "check-smem-fit")
    assert rc == 1 and out == ""
    m = HEAD.match(err.splitlines()[0])
    assert m and (int(m["line"]), int(m["col"])) == position(src, "grid") and "needs" in m["msg"]


@pytest.mark.parametrize("argv", [["compile", "examples/miss.tk", "-D", "M=x"],
                                  ["compile", "examples/miss.tk", "--target", "cuda-ish"], ["frobnicate"]])
def test_usage_errors_exit_1(argv):
    """Usage errors are user errors (exit 1); exit 2 means an internal compiler error."""
    proc = subprocess.run(["tkc", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 1 and "error:" in proc.stderr and "Traceback" not in proc.stderr


# ---- the real command: a separate process, no traceback ---------------------------------------
@pytest.mark.parametrize("argv,file_needle,message", [
    (["opt", "{bad}"], "$", "unexpected character `$`"),
    (["compile", "examples/miss_row.tk", "-D", "N=4096"], None, "kernel `miss_row` needs "),
    (["opt", "examples/miss_v3.tk", "-p", "tile,frob"], None, "unknown pass `frob`"),
    (["compile", "examples/miss_v3.tk", "-D", "K=1000", "--target", "tir"], None, "requirement `K % R == 0`"),
    (["run", "nothere.tk", "--check"], None, "cannot read `nothere.tk`"),
])
def test_subprocess_errors(tmp_path, argv, file_needle, message):
    argv = list(argv)
    if "{bad}" in argv:
        bad = tmp_path / "bad.tk"
        bad.write_text(kern("X = A[m*BM : +BM, :] $ 2"))
        argv[argv.index("{bad}")] = str(bad)
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run(["tkc", *argv], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    first = proc.stderr.splitlines()[0]
    m = HEAD.match(first) or FILE_LEVEL.match(first)
    assert m and message in m["msg"], proc.stderr
    if file_needle:
        text = (tmp_path / "bad.tk").read_text()
        assert (int(m["line"]), int(m["col"])) == position(text, file_needle)
        assert proc.stderr.splitlines()[2].strip() == "^"


def test_caret_under_the_error_in_tab_indented_source(capsys, tmp_path):
    src = kern("C[m*BM : +BM, :] = Y").replace("\n    ", "\n\t")
    path = tmp_path / "tabs.tk"
    path.write_text(src)
    rc, _, err = cli(capsys, "opt", str(path))
    assert rc == 1
    _, shown, caret = err.splitlines()[:3]
    assert shown[caret.index("^")] == "Y"


def _negations(n: int) -> str:
    return small("(X: f32[M, 8]) -> (Y: f32[M, 8])", "grid (cdiv(M, BM)) as (m)",
                 "Y[m*BM : +BM, :] = " + "-" * n + "X[m*BM : +BM, :]")


def test_deep_expressions_compile_past_pythons_default_recursion_limit(capsys, tmp_path):
    path = tmp_path / "deep.tk"
    path.write_text(_negations(1200))  # about 3 frames per level: past Python's default 1000
    rc, out, err = cli(capsys, "opt", str(path))
    assert rc == 0 and err == "" and out.count('{fn = "neg"}') == 1200


def test_a_statement_nested_too_deeply_is_a_located_error(capsys, tmp_path):
    src = _negations(25_000)
    path = tmp_path / "deeper.tk"
    path.write_text(src)
    rc, out, err = cli(capsys, "opt", str(path))
    assert rc == 1 and out == ""
    line, col = position(src, "Y[m*BM")
    assert err.startswith(f"{path}:{line}:{col}: error: this statement nests too deeply for tkc\n")
    assert err.rstrip().endswith("note: split it: assign parts of a long expression, or the body of a deep block, "
                                 "to separate statements")


@pytest.mark.parametrize("signature, needle, message, notes", [
    ("(A: f32[M, 2 * Q]) -> (C: f32[M, 8])", "2 * Q", "`Q` in the dim expression is neither a dim of a parameter "
     "nor a schedule constant", ["a dim expression uses dims that a parameter binds by name"]),
    ("(A: f32[M, 8]) -> (C: f32[M, M - 128])", "M - 128", "dim `M - 128` is 0; it must be positive", []),
])
def test_dim_expression_errors(capsys, tmp_path, signature, needle, message, notes):
    src = small(signature, "grid (cdiv(M, BM)) as (m)")
    path = tmp_path / "dims.tk"
    path.write_text(src)
    rc, out, err = cli(capsys, "opt", str(path))
    assert rc == 1 and out == ""
    line, col = position(src, needle)
    check_rendered(err, str(path), line, col, message, source=src, notes=notes)

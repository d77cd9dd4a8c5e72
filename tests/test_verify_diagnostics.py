"""`tkc opt --verify-diagnostics` (issue 14, item 3): MLIR-style `# expected-error {{...}}`
annotations. Every file of tests/verify/ must verify; a wrong, missing or extra annotation must
not (each mismatch a located error, exit 1)."""

from __future__ import annotations

import glob
import os
import re

import pytest

from dsl.diagnostics import Diagnostic, Loc, TkError
from tkc.cli import main
from tkc.verify_diagnostics import Run, expectations, marker, parse_run, pieces, verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "tests", "verify", "*.tk*")))


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p) for p in FILES])
def test_annotated_files_verify(path, capsys):
    assert main(["opt", path, "--verify-diagnostics", "--split-input-file"]) == 0, capsys.readouterr().err
    text = open(path, encoding="utf-8").read()
    mark = marker(path)
    for first, piece in pieces(text, True, mark):  # every piece expects something
        assert expectations(piece, 1, mark), f"{path}:{first}: a piece without an `expected-error`"


@pytest.mark.parametrize("path", [p for p in FILES if p.endswith(".tkir")], ids=os.path.basename)
def test_ir_locs_name_their_own_line(path):
    """The verifier reports an op at its `loc`: in tests/verify/*.tkir every loc names its own line, so
    that the annotations next to the op meet its diagnostics."""
    rel = os.path.relpath(path, ROOT)
    for i, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        indent = len(line) - len(line.lstrip()) + 1
        for file, at, col in re.findall(r'loc\("([^"]*)":(\d+):(\d+)\)', line):
            assert (file, int(at), int(col)) == (rel, i, indent), \
                f"{rel}:{i}: loc(\"{file}\":{at}:{col}) should be loc(\"{rel}\":{i}:{indent})"


@pytest.mark.parametrize("edit, message", [
    (("unknown name `Q`}}", "unknown name `P`}}"), 'expected error "unknown name `P`" on line 7 was not produced'),
    (("  # expected-error {{unknown name `Q`}}", ""), "unexpected error: unknown name `Q`"),
    (("with BM = 16, K = 30", "with BM = 16, K = 31"), 'expected note "with BM = 16, K = 31" on line 14'),
    (("expected-error@+2 {{requirement", "expected-error@+1 {{requirement"), "on line 13 was not produced"),
    (("    where M = 64, K = 32\n{\n    grid (cdiv(M, BM)) as (m)\n    C[m*BM : +BM, :] = A[m*BM : +BM, :]\n}",
      "    where M = 64, K = 32\n    # expected-error {{not produced here}}\n{\n    grid (cdiv(M, BM)) as (m)\n"
      "    C[m*BM : +BM, :] = A[m*BM : +BM, :]\n}"), "the piece compiled without errors"),
])
def test_mismatches_are_located_errors(tmp_path, capsys, edit, message):
    text = open(os.path.join(ROOT, "tests", "verify", "lowering.tk"), encoding="utf-8").read()
    if edit[0].startswith("    where M = 64, K = 32\n{"):  # a piece that compiles: append one
        text += "# -----\nkernel fine<BM=16>(A: f32[M, K]) -> (C: f32[M, K])\n" + edit[1] + "\n"
    else:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    path = tmp_path / "case.tk"
    path.write_text(text)
    assert main(["opt", str(path), "--verify-diagnostics", "--split-input-file"]) == 1
    err = capsys.readouterr().err
    assert message in err and f"{path}:" in err


def test_without_split_the_first_error_stops_the_file(tmp_path, capsys):
    """One piece: the later pieces' annotations are unmet (the parse fails at the first `# -----`'s
    next kernel), so the file does not verify."""
    path = os.path.join(ROOT, "tests", "verify", "lowering.tk")
    assert main(["opt", path, "--verify-diagnostics"]) == 1
    assert "was not produced" in capsys.readouterr().err


def test_expectation_syntax():
    got = expectations("a  # expected-error {{x y}}\n# expected-note@+2 {{n}}\n# expected-error@-1 {{e}}\n")
    assert [(e.kind, e.line, e.text) for e in got] == [("error", 1, "x y"), ("note", 4, "n"), ("error", 2, "e")]
    split = pieces("a\n# -----\nb\nc\n# -----\nd", True)  # lines: a, -----, b, c, -----, d
    assert [first for first, _ in split] == [1, 3, 6]
    assert [piece.split("\n").index(piece.strip().split("\n")[0]) + 1 for _, piece in split] == [1, 3, 6]


KERNEL = """kernel k<BM=16>(A: f32[M, K]) -> (C: f32[M, K])
    where M = 64, K = 32
{
    grid (cdiv(M, BM)) as (m)
    C[m*BM : +BM, :] = A[m*BM : +BM, :]
}
"""


def _verify(tmp_path, capsys, text, *args, name="case.tk"):
    path = tmp_path / name
    path.write_text(text)
    rc = main(["opt", str(path), "--verify-diagnostics", "--split-input-file", *args])
    return rc, capsys.readouterr().err


def test_run_line_sets_the_pipeline_of_its_piece_only(tmp_path, capsys):
    """`tile{BM=24}` breaks `requires M % BM == 0` in the piece with that RUN line; the next piece
    compiles with the command line's (default) pipeline and is fine."""
    bad = KERNEL.replace("    where M = 64, K = 32\n", "    where M = 64, K = 32\n    requires M % BM == 0"
                         "  # expected-error {{requirement `M % BM == 0` does not hold}}\n")
    unknown = KERNEL.replace("C[m*BM", "C[m*BM : +BM, :] = A[m*BM : +BM, :] * Q  # expected-error {{unknown name `Q`}}"
                             "\n    C[m*BM", 1)
    text = "# RUN: tile{BM=24}\n" + bad + "# -----\n" + unknown
    assert _verify(tmp_path, capsys, text) == (0, "")
    rc, err = _verify(tmp_path, capsys, text.replace("# RUN: tile{BM=24}\n", "# RUN: tile{BM=32}\n"))
    assert rc == 1 and "expected error \"requirement `M % BM == 0` does not hold\" on line 4 was not produced" in err


def test_run_line_defines_dynamic_and_target(tmp_path, capsys):
    text = ("# RUN: -D BM=-1\n" + KERNEL.replace("kernel k<BM=16>(A: f32[M, K]) -> (C: f32[M, K])",
                                                  "kernel k<BM=16>(A: f32[M, K]) -> (C: f32[M, K])  # expected-error "
                                                  "{{schedule constant `BM` must not be negative, got -1}}")
            + "# -----\n# RUN: -D M=50 --dynamic M --target=cuda\n"  # M dynamic: the `requires` waits for
            + GRID_Y)  # the call; `cuda` checks its grid's y extent
    assert _verify(tmp_path, capsys, text) == (0, "")


GRID_Y = """kernel k<BM=16>(A: f32[M, K]) -> (C: f32[M, K])
    where M = 64, K = 70000
    requires M % BM == 0
{
    grid (cdiv(M, BM), K) as (m, k)  # expected-error {{grid extent 70000 along `k` exceeds CUDA's limit of 65535}}
    C[m*BM : +BM, k : +1] = A[m*BM : +BM, k : +1]
}
"""


def test_target_on_the_command_line_emits_every_piece(tmp_path, capsys):
    text = KERNEL.replace("kernel k<BM=16>(A: f32[M, K]) -> (C: f32[M, K])",
                          "kernel k<BM=16>(A: bf16[M, K]) -> (C: f32[M, K])  # expected-error "
                          "{{target `tilelang-cpu` cannot express bf16 tile `%A`}}")
    assert _verify(tmp_path, capsys, text, "--target", "tilelang-cpu") == (0, "")
    rc, err = _verify(tmp_path, capsys, text)  # no target: no backend runs, so nothing is reported
    assert rc == 1 and "the piece compiled without errors" in err
    path = tmp_path / "case.tk"
    assert main(["opt", str(path), "--target", "cuda"]) == 1
    assert "`tkc opt --target` applies with `--verify-diagnostics` only" in capsys.readouterr().err


def test_pipeline_errors_are_located_on_the_run_line(tmp_path, capsys):
    text = "# RUN: tile,map-dsmem{nonportable=3}\n# expected-error@-1 {{must be 0 or 1, got 3}}\n" + KERNEL
    assert _verify(tmp_path, capsys, text) == (0, "")
    rc, err = _verify(tmp_path, capsys, text.replace("# expected-error@-1 {{must be 0 or 1, got 3}}\n", ""))
    assert rc == 1 and f"{tmp_path / 'case.tk'}:1:13: error: unexpected error: `nonportable` of `map-dsmem` " in err


@pytest.mark.parametrize("run, message", [
    ("tile --target ptx", "malformed RUN line: unknown target `ptx`; targets: tilelang, tilelang-cpu, cuda"),
    ("tile check-coverage", "malformed RUN line: a second pipeline `check-coverage`"),
    ("-D BM", "malformed RUN line: expected `-D NAME=VALUE` with an integer value, got `BM`"),
    ("--dynamic", "malformed RUN line: `--dynamic` needs a value"),
    ("--verbose", "malformed RUN line: unknown option `--verbose`"),
])
def test_malformed_run_lines(tmp_path, capsys, run, message):
    rc, err = _verify(tmp_path, capsys, f"# RUN: {run}\n" + KERNEL)
    assert rc == 1 and f"{tmp_path / 'case.tk'}:1:8: error: {message}" in err


def test_one_run_line_per_piece(tmp_path, capsys):
    rc, err = _verify(tmp_path, capsys, "# RUN: tile\n# RUN: tile,check-coverage\n" + KERNEL)
    assert rc == 1 and f"{tmp_path / 'case.tk'}:2:1: error: a second RUN line in this piece" in err


def test_parse_run():
    assert parse_run("f.tk", 3, 8, "tile{BM=32},check-coverage -D M=5 -DK=7 --dynamic N --target cuda") == Run(
        "tile{BM=32},check-coverage", (("M", 5), ("K", 7)), ("N",), "cuda", 3, 8)
    assert parse_run("f.tk", 1, 8, "  -p tile") == Run("tile", (), (), None, 1, 13)


def test_ir_text_takes_slash_comments(tmp_path, capsys):
    """In a .tkir file annotations, RUN lines and separators start with `//`."""
    func = ('tile.func() {{consts = {{}}, dims = {{}}, outputs = [1], sym_name = "k"}} loc("k.tk":{}:1) {{\n'
            '^(%A: global<f32[16]>, %C: global<f32[16]>)\n}}\n')
    ir = ("// RUN: tile{BM=32}\n// expected-error@+1 {{`tile{BM=...}`: `BM` is not a schedule constant of `k`}}\n"
          + func.format(3) + "// -----\n// expected-error@+1 {{needs a region with global tensor arguments}}\n"
          + func.format(8).replace("^(%A: global<f32[16]>, %C: global<f32[16]>)\n", ""))
    assert _verify(tmp_path, capsys, ir, name="case.tkir") == (0, "")
    rc, err = _verify(tmp_path, capsys, ir.replace("// RUN: tile{BM=32}", "// RUN: tile"), name="case.tkir")
    assert rc == 1 and "expected error \"`tile{BM=...}`" in err


def test_an_internal_error_in_a_piece_is_a_located_mismatch():
    def crash(path, piece, run):
        if "boom" in piece:
            raise KeyError("boom")
        raise TkError(Diagnostic(Loc(path, 5, 1), "fine"))

    text = "# a\n# b\n# -----\n# boom\n# expected-error {{fine}}\n"
    got = verify("t.tk", text, True, Run(), crash)
    assert [(d.loc.line, d.message) for d in got] == [
        (5, "unexpected error: fine"), (4, "internal compiler error in this piece: KeyError: 'boom'")]


FINE = ("kernel fine<BM=16>(A: f32[M, K]) -> (C: f32[M, K])\n    where M = 64, K = 32\n{{\n"
        "    grid (cdiv(M, BM)) as (m)\n    C[m*BM : +BM, :] = A[m*BM : +BM, :]{}\n}}\n")


@pytest.mark.parametrize("annotation, message", [
    ("  # expected-eror {{boom}}", "malformed annotation `expected-eror {{boom}}`"),
    ("  # Expected-Error {{boom}}", "malformed annotation `Expected-Error {{boom}}`"),
    ("  # expected-error@x {{boom}}", "malformed annotation `expected-error@x {{boom}}`"),
    ("  # expected-error {{boom", "malformed annotation `expected-error {{boom`"),
    ("  # expected-error boom", "malformed annotation `expected-error boom`"),
    ("  # expected-error {{}}", "an annotation with an empty message matches any diagnostic"),
    ("  # expected-error@-99 {{boom}}", "the annotation's offset -99 points before line 1"),
])
def test_a_malformed_annotation_fails_the_file(tmp_path, capsys, annotation, message):
    """A misspelled or unreadable annotation is a problem of its own: the file fails instead of
    asserting nothing (MLIR's -verify-diagnostics does the same)."""
    rc, err = _verify(tmp_path, capsys, FINE.format(annotation))
    assert rc == 1 and f"case.tk:5:" in err and message in err


def test_the_same_expectation_twice_needs_two_diagnostics(tmp_path, capsys):
    text = FINE.format(" * Q").replace("    C[m*BM", "    # expected-error@+2 {{unknown name `Q`}}\n"
                                                 "    # expected-error@+1 {{unknown name `Q`}}\n    C[m*BM", 1)
    rc, err = _verify(tmp_path, capsys, text)
    assert rc == 1 and 'expected error "unknown name `Q`" on line 7 was not produced' in err
    once = text.replace("    # expected-error@+2 {{unknown name `Q`}}\n", "    # expected-error@+2 {{unknown name}}\n")
    assert _verify(tmp_path, capsys, once)[0] == 0  # two parts of one message: both met by it

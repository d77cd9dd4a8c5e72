"""`tkc opt --verify-diagnostics` (issue 14, item 3): MLIR-style `# expected-error {{...}}`
annotations. Every file of tests/verify/ must verify; a wrong, missing or extra annotation must
not (each mismatch a located error, exit 1)."""

from __future__ import annotations

import glob
import os

import pytest

from tkc.cli import main
from tkc.verify_diagnostics import expectations, pieces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "tests", "verify", "*.tk")))


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p) for p in FILES])
def test_annotated_files_verify(path, capsys):
    assert main(["opt", path, "--verify-diagnostics", "--split-input-file"]) == 0, capsys.readouterr().err
    text = open(path, encoding="utf-8").read()
    assert len(expectations(text)) >= len(pieces(text, True)) > 1  # every piece expects something


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

"""`tkc opt FILE --verify-diagnostics`: check a file's diagnostics against its annotations.

MLIR's `-verify-diagnostics` for .tk files (issue 14). A comment states what the compiler must
report, and where:

    S = zeros(f32[BM, R]      # expected-error {{syntax error: unexpected `C`}}
    # expected-error@+1 {{requirement `K % R == 0` does not hold}}
    requires K % R == 0
    # expected-note@-2 {{with K = 1000, R = 64}}

* `# expected-error {{TEXT}}` expects an error on the comment's own line whose message contains
  TEXT; `@+N` / `@-N` move the line by N; `# expected-note {{TEXT}}` expects a note containing
  TEXT on an error at that line.
* With `--split-input-file` the file is cut at lines `# -----` and each piece is compiled on
  its own (line numbers stay those of the whole file), so one file tests many errors.
* Each piece goes through the front end and the pass pipeline (`-p`, else the default
  pipeline of target `tilelang`). Every diagnostic must be expected and every expectation met:
  the result is nothing on stdout and exit 0, or one located error per mismatch and exit 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsl.diagnostics import Diagnostic, Loc, TkError

SPLIT = re.compile(r"^#\s*-----[ \t]*(?:\n|$)", re.M)
EXPECT = re.compile(r"#.*?expected-(error|note)(?:@([+-]\d+))?\s*\{\{(.*?)\}\}")


@dataclass
class Expectation:
    kind: str  # "error" or "note"
    line: int  # 1-based, in the whole file
    text: str
    at: int  # the line of the annotation itself
    met: bool = False


def expectations(text: str, first_line: int = 1) -> list[Expectation]:
    """The annotations in `text` (whose first line is line `first_line` of the file)."""
    out = []
    for i, line in enumerate(text.split("\n")):
        for kind, offset, body in EXPECT.findall(line):
            at = first_line + i
            out.append(Expectation(kind, at + int(offset or 0), body, at))
    return out


def pieces(text: str, split: bool) -> list[tuple[int, str]]:
    """(first line, text padded with blank lines so its lines keep their numbers) per piece."""
    if not split:
        return [(1, text)]
    out, start = [], 0
    for m in SPLIT.finditer(text):
        out.append(text[start:m.start()])
        start = m.end()
    out.append(text[start:])
    result, line = [], 1
    for piece in out:
        result.append((line, "\n" * (line - 1) + piece))
        line += piece.count("\n") + 1  # the piece's lines, then the `# -----` line
    return result


def verify(path: str, text: str, compile_piece, split: bool = False) -> list[Diagnostic]:
    """Mismatches between what `compile_piece(text)` reports (TkError) and the annotations of
    `path`; empty when every diagnostic was expected and every expectation met."""
    problems: list[Diagnostic] = []
    for _, piece in pieces(text, split):
        expected = expectations(piece)  # the padding keeps the file's line numbers
        try:
            compile_piece(piece)
            got: list[Diagnostic] = []
        except TkError as exc:
            got = list(exc.diagnostics)
        for d in got:
            same_line = [e for e in expected if e.line == d.loc.line]
            errors = [e for e in same_line if e.kind == "error" and e.text in d.message]
            if not errors:
                problems.append(Diagnostic(Loc(path, d.loc.line, d.loc.col), f"unexpected error: {d.message}",
                                           [f"expect it with `# expected-error {{{{{d.message}}}}}` on line "
                                            f"{d.loc.line}"]))
                continue
            for e in errors:
                e.met = True
            for e in same_line:
                if e.kind == "note" and any(e.text in n for n in d.notes):
                    e.met = True
        for e in expected:
            if not e.met:
                problems.append(Diagnostic(Loc(path, e.at, 1), f"expected {e.kind} \"{e.text}\" on line {e.line} "
                                           "was not produced",
                                           ["got: " + "; ".join(f"line {d.loc.line}: {d.message}" for d in got)
                                            if got else "the piece compiled without errors"]))
    return problems

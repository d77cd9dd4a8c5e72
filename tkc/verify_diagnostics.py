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
  pipeline of the target, `tilelang` unless `--target` names another). With `--target T` the
  backend of T then emits the code (no C/CUDA build), so its rejections can be expected too.
* A `# RUN: [PIPELINE] [-D NAME=VALUE]... [--dynamic DIM]... [--target T]` line sets these for
  the piece it is in (the whole file without `--split-input-file`), in place of the command
  line's `-p`, `-D`, `--dynamic` and `--target`; at most one per piece. Errors of a RUN line's
  pipeline are located on the RUN line, so they can be expected as well
  (`# expected-error@-1 {{unknown pass}}` below it).
* A .tkir file (IR text) takes the same annotations, RUN lines and separators with `//` in
  place of `#`.
* Every diagnostic must be expected and every expectation met: the result is nothing on stdout
  and exit 0, or one located error per mismatch and exit 1. An internal compiler error in a
  piece is one such mismatch, at the piece's first line.
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from typing import Callable

from dsl.diagnostics import Diagnostic, Loc, TkError

# the backends whose `emit(module)` a RUN line's or the command line's `--target` runs
EMITTERS = {"tilelang": "codegen.tilelang", "tilelang-cpu": "codegen.tilelang_cpu", "cuda": "codegen.cuda"}


def marker(path: str) -> str:
    """The comment marker of `path`: `//` in IR text, `#` in .tk source."""
    return "//" if path.endswith(".tkir") else "#"


def _split_re(mark: str) -> re.Pattern:
    return re.compile(rf"^{re.escape(mark)}\s*-----[ \t]*(?:\n|$)", re.M)


ANNOTATION = re.compile(r"expected-(error|note)(?:@([+-]\d+))?\s*\{\{(.*?)\}\}")


def _run_re(mark: str) -> re.Pattern:
    return re.compile(rf"^[ \t]*{re.escape(mark)}[ \t]*RUN:(.*)$", re.M)


SPLIT = _split_re("#")


@dataclass
class Expectation:
    kind: str  # "error" or "note"
    line: int  # 1-based, in the whole file
    text: str
    at: int  # the line of the annotation itself
    met: bool = False


@dataclass(frozen=True)
class Run:
    """How a piece compiles: a pipeline (None: the target's default one), `-D` values, dynamic
    dims, and the target whose backend emits the code (None: no emit). `line` and `col` locate
    the RUN line that gave it (0: the command line)."""

    pipeline: str | None = None
    defines: tuple[tuple[str, int], ...] = ()
    dynamic: tuple[str, ...] = ()
    target: str | None = None
    line: int = 0
    col: int = 0  # the column of the pipeline in the RUN line


def expectations(text: str, first_line: int = 1, mark: str = "#") -> list[Expectation]:
    """The annotations in `text` (whose first line is line `first_line` of the file)."""
    out = []
    for i, line in enumerate(text.split("\n")):
        start = line.find(mark)  # annotations follow the line's comment marker
        if start < 0 or "expected-" not in line:
            continue
        for kind, offset, body in ANNOTATION.findall(line, start):
            at = first_line + i
            out.append(Expectation(kind, at + int(offset or 0), body, at))
    return out


_LOOSE = re.compile(r"expected-\w*", re.I)  # what an annotation starts with, spelled right or not


def malformed(path: str, text: str, mark: str = "#") -> list[Diagnostic]:
    """The annotations of `text` that `expectations` cannot read (a misspelled kind, a missing
    `{{...}}`, an empty message, an offset before line 1): each a problem, so that a test file
    with a typo fails instead of asserting nothing."""
    out = []
    for i, line in enumerate(text.split("\n")):
        start = line.find(mark)
        if start < 0:
            continue
        comment = line[start:]
        good = list(ANNOTATION.finditer(comment))
        for m in _LOOSE.finditer(comment):
            if any(g.start() <= m.start() < g.end() for g in good):  # a good one, or inside one's message
                continue
            out.append(Diagnostic(Loc(path, i + 1, start + m.start() + 1),
                                  f"malformed annotation `{comment[m.start():].strip()[:60]}`",
                                  [f"write `{mark} expected-error {{{{message}}}}` or `{mark} expected-note@+1 "
                                   "{{message}}` (lower case, the message in double braces)"]))
        for g in good:
            if not g.group(3):
                out.append(Diagnostic(Loc(path, i + 1, start + g.start() + 1),
                                      "an annotation with an empty message matches any diagnostic",
                                      ["put the diagnostic's text (or a part of it) in the braces"]))
            if i + 1 + int(g.group(2) or 0) < 1:
                out.append(Diagnostic(Loc(path, i + 1, start + g.start() + 1),
                                      f"the annotation's offset {g.group(2)} points before line 1", []))
    return out


def pieces(text: str, split: bool, mark: str = "#") -> list[tuple[int, str]]:
    """(first line, text padded with blank lines so its lines keep their numbers) per piece."""
    if not split:
        return [(1, text)]
    out, start = [], 0
    for m in _split_re(mark).finditer(text):
        out.append(text[start:m.start()])
        start = m.end()
    out.append(text[start:])
    result, line = [], 1
    for piece in out:
        result.append((line, "\n" * (line - 1) + piece))
        line += piece.count("\n") + 1  # the piece's lines, then the `# -----` line
    return result


def parse_run(path: str, line: int, start: int, args: str) -> Run:
    """The Run of a RUN line's arguments `args` (whose first character is at column `start` of
    line `line`); raises a TkError located at its first word when they are malformed."""
    def bad(message: str) -> TkError:
        at = start + len(args) - len(args.lstrip())
        return TkError(Diagnostic(Loc(path, line, at), f"malformed RUN line: {message}",
                                  ["write `RUN: [PIPELINE] [-D NAME=VALUE]... [--dynamic DIM]... [--target T]`"]))

    try:
        words = shlex.split(args)
    except ValueError as exc:
        raise bad(str(exc)) from None
    pipeline, defines, dynamic, target, i = None, [], [], None, 0
    while i < len(words):
        w = words[i]
        if w.startswith("--"):  # `--target=cuda` or `--target cuda`
            opt, eq, value = w.partition("=")
        else:  # `-DM=5`, `-D M=5`, or a word
            opt, eq, value = (w[:2], "", w[2:]) if w.startswith("-") else (w, "", "")
        if opt in ("-p", "--pipeline", "-D", "--dynamic", "--target"):
            if not value and not eq:
                if i + 1 >= len(words):
                    raise bad(f"`{opt}` needs a value")
                i += 1
                value = words[i]
            if opt in ("-p", "--pipeline"):
                pipeline = value
            elif opt == "-D":
                name, eq, number = value.partition("=")
                if not eq or not name.isidentifier() or not re.fullmatch(r"-?\d+", number.strip()):
                    raise bad(f"expected `-D NAME=VALUE` with an integer value, got `{value}`")
                defines.append((name, int(number)))
            elif opt == "--dynamic":
                dynamic.append(value)
            else:
                if value not in EMITTERS:
                    raise bad(f"unknown target `{value}`; targets: {', '.join(EMITTERS)}")
                target = value
        elif w.startswith("-"):
            raise bad(f"unknown option `{w}`")
        elif pipeline is not None:
            raise bad(f"a second pipeline `{w}`")
        else:
            pipeline = w
        i += 1
    at = re.search(rf"(?<!\S){re.escape(pipeline)}(?!\S)", args) if pipeline else None
    col = start + (at.start() if at else 0)  # errors of the pipeline are located from here
    return Run(pipeline, tuple(defines), tuple(dynamic), target, line, col)


def _runs(path: str, text: str, split: bool, default: Run) -> list[tuple[str, Run]]:
    """(piece, its Run) for each piece of `text`: the piece's RUN line, else `default`."""
    mark = marker(path)
    out = []
    for _, piece in pieces(text, split, mark):
        found = list(_run_re(mark).finditer(piece))
        if len(found) > 1:
            raise TkError(Diagnostic(Loc(path, piece.count("\n", 0, found[1].start()) + 1, 1),
                                     "a second RUN line in this piece", ["give each piece at most one RUN line"]))
        run = default
        if found:
            m = found[0]
            line = piece.count("\n", 0, m.start()) + 1
            col = m.start(1) - (piece.rfind("\n", 0, m.start(1)) + 1) + 1
            body = m.group(1)
            cut = ANNOTATION.search(body)  # an annotation after the RUN line's words, in a comment
            words = body[:cut.start()].rstrip() if cut else body
            if cut and words.endswith(mark):
                words = words[:-len(mark)]
            run = parse_run(path, line, col, words)
        out.append((piece, run))
    return out


def compile_piece(path: str, piece: str, run: Run) -> None:
    """The front end, the pipeline of `run` and, with a target, its backend's emit, on `piece`
    (raises TkError). A pipeline error of a RUN line is located on that line."""
    from passes.manager import parse_pipeline, run_pipeline
    from tkc import driver

    spec = run.pipeline if run.pipeline is not None else driver.default_pipeline(run.target or "tilelang")
    try:
        passes = parse_pipeline(spec)
    except TkError as exc:
        if run.line:
            for d in exc.diagnostics:
                if d.loc.file == "<pipeline>":
                    d.loc = Loc(path, run.line, run.col + d.loc.col - 1)
        raise
    module = run_pipeline(driver.frontend(path, dict(run.defines), piece, run.dynamic), passes)
    if run.target is not None:
        importlib.import_module(EMITTERS[run.target]).emit(module)


def verify(path: str, text: str, split: bool = False, run: Run = Run(),
           compile_piece: Callable[[str, str, Run], None] = compile_piece,
           seen: list[Diagnostic] | None = None) -> list[Diagnostic]:
    """Mismatches between what `compile_piece(path, piece, run)` reports (TkError) and the
    annotations of `path`; empty when every diagnostic was expected and every expectation met.
    `seen` collects the diagnostics that met an `expected-error`."""
    problems: list[Diagnostic] = []
    mark = marker(path)
    try:
        runs = _runs(path, text, split, run)
    except TkError as exc:  # a malformed RUN line
        return list(exc.diagnostics)
    problems += malformed(path, text, mark)
    for piece, piece_run in runs:
        expected = expectations(piece, 1, mark)  # the padding keeps the file's line numbers
        first = len(piece) - len(piece.lstrip("\n")) + 1
        try:
            compile_piece(path, piece, piece_run)
            got: list[Diagnostic] = []
        except TkError as exc:
            got = list(exc.diagnostics)
        except Exception as exc:  # noqa: BLE001 -- an internal error: a mismatch of this piece
            problems.append(Diagnostic(Loc(path, first, 1), f"internal compiler error in this piece: "
                                       f"{type(exc).__name__}: {exc}", ["this is a bug in tkc: every input must "
                                                                        "give located diagnostics or none"]))
            continue
        for d in got:
            same_line = [e for e in expected if e.line == d.loc.line]
            errors = [e for e in same_line if e.kind == "error" and e.text in d.message]
            if not errors:
                problems.append(Diagnostic(Loc(path, d.loc.line, d.loc.col), f"unexpected error: {d.message}",
                                           [f"expect it with `{mark} expected-error {{{{{d.message}}}}}` on line "
                                            f"{d.loc.line}"]))
                continue
            if seen is not None:
                seen.append(d)
            # one diagnostic meets one expectation per text: annotations that check parts of its
            # message are all met, the same annotation twice needs two diagnostics
            for text_ in dict.fromkeys(e.text for e in errors):
                first = next((e for e in errors if e.text == text_ and not e.met), None)
                if first is not None:
                    first.met = True
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


__all__ = ["EMITTERS", "Expectation", "Run", "compile_piece", "expectations", "marker", "parse_run", "pieces",
           "verify"]

"""Every user-facing compile diagnostic has a `--verify-diagnostics` test (issue 14, item 3).

The messages are collected statically: the message argument of every `error(loc, MESSAGE, ...)`,
`Diagnostic(loc, MESSAGE, ...)` and `TkError(...)` call in dsl/, passes/ and codegen/ (Python's
`ast`), the verifier's `fail(MESSAGE)` checks (reported as `invalid IR: MESSAGE`) and the warp
tiling's problem texts (reported as `gemm layout: ...` or `invalid IR: ...`). A message is a
pattern: an f-string's literal parts with `.*` for each placeholder, a module constant resolved.

Every tests/verify/ file is then verified (as tests/test_verify_diagnostics.py does) and every
diagnostic that met an `expected-error` is kept; each message must fullmatch one of them, unless
EXCLUDED lists it with the reason and the test that covers it instead. A new `error(...)` without
an annotated piece fails here, naming the message and its file:line. tkc/ (the runtime's call-time
checks, the CLI, tune, llama, the sparse readers) is not scanned: those are not compile
diagnostics, and NOT_SCANNED names the test of each of its modules that raises them.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import sys
from dataclasses import dataclass

import pytest

from dsl.diagnostics import Diagnostic
from tkc.verify_diagnostics import Run, verify

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("dsl", "passes", "codegen")
# functions whose returned problem texts become messages with a prefix (`gemm layout: `, `invalid IR: `)
FORWARDED = {("dsl/warp_tiling.py", "warp_tiling"), ("dsl/warp_tiling.py", "warp_threads_problem")}
# the modules whose `fail(MESSAGE)` is the verifier's `invalid IR: MESSAGE`
VERIFIER = ("dsl/ops.py", "dsl/verifier.py")

# (file, a fragment of the message as written in the source) -> (why no piece expects it, the test that
# covers it instead or None when no input reaches it, a text that test holds)
EXCLUDED: dict[tuple[str, str], tuple[str, str | None, str]] = {
    ("dsl/lower.py", "has no outputs"): (
        "unreachable: the grammar takes one output at least (`-> (...)` lists one or more); a guard for "
        "hand-built ASTs", None, ""),
    ("dsl/lower_expr.py", "expected a tile expression"): (
        "unreachable: every expression node (name, slice, number, index arithmetic, negation, operator, call) "
        "is lowered before it", None, ""),
    ("dsl/lower_sparse.py", "cannot be `mut`"): (
        "unreachable: lowering rejects a `mut` input (`input ... is marked mut`) and a pattern among the outputs "
        "(`output ... is a sparse pattern`) first (tests/verify/lowering_signature.tk, sparse.tk)", None, ""),
    ("passes/tile.py", "known only at run time"): (
        "unreachable: lowering rejects a tile extent over a dynamic dim (`... is a dynamic dim`), and in IR text "
        "the verifier does before `tile` runs (`invalid IR: unknown name`, tests/verify/ir_parse.tkir)", None, ""),
    ("codegen/cuda.py", "the CUDA backend cannot compile dynamic dim(s)"): (
        "unreachable through the passes: map-dsmem rejects a dynamic cluster grid (`cluster and grid extents must "
        "be known`) and lowering a dynamic dim of a sparse pattern; a guard for IR given to the backend directly",
        "tests/test_cuda_dynamic_emulated.py", "the passes reject both before codegen"),
    ("codegen/tilelang.py", "TileLang cannot lay out register tile"): (
        "raised from TileLang's lowering (the runtime's build and the `tir` target), which `--verify-diagnostics` "
        "does not run: its pieces stop at the backend's emit",
        "tests/test_tilelang_layout.py", "error: TileLang cannot lay out register tile"),
    ("codegen/tilelang.py", "TileLang cannot emit the vector accesses of bool tile"): (
        "raised from TileLang's lowering (the runtime's build and the `tir` target), which `--verify-diagnostics` "
        "does not run: its pieces stop at the backend's emit",
        "tests/test_tilelang_layout.py", "error: TileLang cannot emit the vector accesses of bool tile"),
    ("dsl/verifier.py", "unregistered op"): (
        "internal consistency: the IR parser and lowering build registered ops only; a pass that made another "
        "would be a bug in tkc", "tests/test_ir.py", "invalid IR: unregistered op"),
    ("dsl/verifier.py", "used before it is defined"): (
        "internal consistency: the IR parser resolves values in the same scopes and reports `use of undefined "
        "value` first (tests/verify/ir_parse.tkir); a pass that misordered ops would be a bug in tkc",
        "tests/test_ir.py", "is used before it is defined or outside its scope"),
}

# call sites whose message is text made elsewhere (no pattern of their own): (file, the argument's source) -> what
FORWARDS = {
    ("dsl/verifier.py", "str(exc)"): "an ExprError of dsl/exprs.py (an index expression that does not evaluate) as "
                                     "`invalid IR: ...`; tests/verify/ir.tkir expects one",
}

# tkc/ modules that raise diagnostics, not scanned (no compile diagnostics of .tk input): what they check,
# and the tests that cover them
NOT_SCANNED = {
    "tkc/cli.py": ("command-line usage, output files, `tune`'s options", ["tests/test_cli.py", "tests/test_tune.py"]),
    "tkc/check.py": ("`tkc run`: a GPU target without a GPU, tensors too large for the machine",
                     ["tests/test_cli.py"]),
    "tkc/driver.py": ("unreadable files, unknown targets, `-D` on IR text, the `tir` target's sampled gemm",
                      ["tests/test_cli.py", "tests/test_sddmm.py"]),
    "tkc/limits.py": ("time, memory and size limits of a compile", ["tests/test_limits.py"]),
    "tkc/cache.py": ("an unusable compile-cache folder", ["tests/test_cli.py", "tests/test_runtime.py"]),
    "tkc/runtime.py": ("call-time checks of arguments, shapes, runtime scalars and index tensors",
                       ["tests/test_runtime.py", "tests/test_scalar_refs.py"]),
    "tkc/cuda_runtime.py": ("the `cuda` target's launcher without CuPy", ["tests/test_cuda.py"]),
    "tkc/oracle.py": ("`tkc run --check`: the `reference` and random sparse patterns", ["tests/test_oracle.py"]),
    "tkc/schedule.py": ("`--schedule model`: the cost model's choice", ["tests/test_cost_model.py"]),
    "tkc/tune.py": ("`tkc tune`", ["tests/test_tune.py"]),
    "tkc/tune_search.py": ("`tkc tune`'s search space", ["tests/test_tune.py"]),
    "tkc/torch_op.py": ("torch custom ops of kernels", ["tests/test_torch_op.py"]),
    "tkc/models/llama_files.py": ("llama2.c checkpoints and tokenizers", ["tests/test_llama_files.py"]),
    "tkc/verify_diagnostics.py": ("`--verify-diagnostics` mismatches and RUN lines",
                                  ["tests/test_verify_diagnostics.py"]),
}


@dataclass(frozen=True)
class Message:
    path: str  # relative to the repository root
    line: int
    source: str  # the message as written (an f-string's source)
    pattern: str  # a regex the message fullmatches
    forwarded: bool = False  # a problem text that another call site reports (FORWARDED)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source}"


def _constants(trees: dict[str, ast.Module]) -> dict[str, str]:
    """Module-level string constants of the scanned modules (`TOO_DEEP = "..."`), by name."""
    out = {}
    for tree in trees.values():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                out[node.targets[0].id] = node.value.value
    return out


def _pattern(node: ast.expr, constants: dict[str, str]) -> str | None:
    """A regex for the strings `node` evaluates to; None when it has no literal text to match."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else ".*" for v in node.values)
    if isinstance(node, ast.Name) and node.id in constants:
        return re.escape(constants[node.id])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _pattern(node.left, constants), _pattern(node.right, constants)
        return None if a is None or b is None else a + b
    if isinstance(node, ast.IfExp):
        a, b = _pattern(node.body, constants), _pattern(node.orelse, constants)
        return None if a is None or b is None else f"(?:{a}|{b})"
    return None


def _name(func: ast.expr) -> str | None:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def read_sources() -> dict[str, str]:
    """The text of every module of dsl/, passes/ and codegen/, by path relative to the root."""
    out = {}
    for folder in SCANNED:
        for path in sorted(glob.glob(os.path.join(ROOT, folder, "*.py"))):
            with open(path, encoding="utf-8") as f:
                out[os.path.relpath(path, ROOT).replace(os.sep, "/")] = f.read()
    return out


def _problem_texts(func: ast.FunctionDef):
    """The message strings of a FORWARDED function: its string literals and f-strings that hold
    a space (not attribute keys, names or its docstring)."""
    docstring = ast.get_docstring(func, clean=False)
    parts = {id(v) for j in ast.walk(func) if isinstance(j, ast.JoinedStr) for v in j.values}
    for node in ast.walk(func):
        if id(node) in parts:
            continue
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)
                                               and node.value != docstring and " " in node.value):
            yield node


def collect_messages(sources: dict[str, str] | None = None) -> tuple[list[Message], list[str]]:
    """(the messages of `sources` (default: dsl/, passes/ and codegen/), call sites whose message
    is no pattern)."""
    sources = read_sources() if sources is None else sources
    trees = {rel: ast.parse(text, rel) for rel, text in sources.items()}
    constants = _constants(trees)
    messages, unresolved = [], []

    def add(rel: str, node: ast.AST, arg: ast.expr, prefix: str = "", suffix: str = "", forwarded=False) -> None:
        if (rel, ast.unparse(arg)) in FORWARDS:
            return
        pattern = _pattern(arg, constants)
        if pattern is None or not pattern.replace(".*", "").strip():
            unresolved.append(f"{rel}:{node.lineno}: {ast.unparse(arg)}")
            return
        messages.append(Message(rel, node.lineno, ast.unparse(arg), prefix + pattern + suffix, forwarded))

    for rel, tree in trees.items():
        if rel == "dsl/diagnostics.py":  # defines error/TkError/Diagnostic; raises nothing itself
            continue
        helpers = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "fail"
                   and rel in VERIFIER for n in ast.walk(f)}  # the `fail` helper's own Diagnostic
        for node in ast.walk(tree):
            if id(node) in helpers:
                continue
            if isinstance(node, ast.FunctionDef) and (rel, node.name) in FORWARDED:
                for text in _problem_texts(node):
                    add(rel, text, text, "(?:gemm layout|invalid IR): ", ".*", True)
            if not isinstance(node, ast.Call):
                continue
            name = _name(node.func)
            if name in ("error", "Diagnostic") and len(node.args) >= 2:
                add(rel, node, node.args[1])
            elif name == "TkError" and node.args and not isinstance(node.args[0], (ast.Name, ast.List, ast.Call)):
                add(rel, node, node.args[0])
            elif name == "fail" and rel in VERIFIER and node.args and not isinstance(node.args[0], ast.Name):
                add(rel, node, node.args[0], re.escape("invalid IR: "), ".*")
    return messages, unresolved


def uncovered(messages: list[Message], got: list[tuple[str, int, str]]) -> list[Message]:
    """The messages that no expected diagnostic in `got` ((file, line, message) of each) stands for
    and EXCLUDED does not list: by its call site, or for a FORWARDED text by its pattern."""
    sites = {(path, line) for path, line, _ in got}
    out = []
    for m in messages:
        if any(path == m.path and fragment in m.source for path, fragment in EXCLUDED):
            continue
        if m.forwarded:  # made elsewhere: its text must appear in a message
            rx = re.compile(m.pattern, re.S)
            if not any(rx.fullmatch(text) for _, _, text in got):
                out.append(m)
        elif (m.path, m.line) not in sites:
            out.append(m)
    return out


def _negations(n: int) -> str:
    return ("kernel deep<BM=16>(X: f32[M, 8]) -> (Y: f32[M, 8])\n    where M = 64\n{\n    grid (cdiv(M, BM)) as (m)\n"
            f"    Y[m*BM : +BM, :] = {'-' * n}X[m*BM : +BM, :]  # expected-error {{{{nests too deeply for tkc}}}}\n"
            "    # expected-note@-1 {{split it: assign parts of a long expression}}\n}\n")


# Pieces too large to keep in a file, verified with tests/verify/'s: (name, text)
GENERATED = [
    # 12,000 levels fit the parser's recursion but not lowering's (dsl/lower.py), 25,000 not the parser's
    ("deep_lowering.tk", _negations(12_000)),
    ("deep_parse.tk", _negations(25_000)),
    ("too_large.tk", "# expected-error {{bytes; tkc reads kernels of at most 1048576 bytes}}\n"
     "# expected-note@-1 {{a kernel is a few KB of source: is this the right file?}}\n" + "#" * (1 << 20) + "\n"),
]


def _site(frame) -> tuple[str, int]:
    """Where a Diagnostic is made: the first caller outside dsl/diagnostics.py (`error`), and for
    the verifier's `fail(MESSAGE)` helper the line that calls it."""
    while frame.f_code.co_filename.endswith(os.path.join("dsl", "diagnostics.py")):
        frame = frame.f_back
    if frame.f_code.co_name == "fail" and frame.f_code.co_filename.endswith(os.path.join("dsl", "verifier.py")):
        frame = frame.f_back
    return os.path.relpath(frame.f_code.co_filename, ROOT).replace(os.sep, "/"), frame.f_lineno


_SEEN: list | None = None


def expected_diagnostics() -> list[tuple[str, int, str]]:
    """(file, line, message) of every diagnostic of tests/verify/ that met an `expected-error`:
    where it was made (the `error(...)` call) and its text. Each file is verified once."""
    global _SEEN
    if _SEEN is None:
        seen: list = []
        problems = []
        init = Diagnostic.__init__

        def traced(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.site = _site(sys._getframe(1))

        Diagnostic.__init__ = traced
        try:
            for path in sorted(glob.glob(os.path.join(ROOT, "tests", "verify", "*.tk*"))):
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                problems += verify(os.path.relpath(path, ROOT), text, True, Run(), seen=seen)
            for name, text in GENERATED:
                problems += verify(name, text, False, Run(), seen=seen)
        finally:
            Diagnostic.__init__ = init
        assert not problems, "\n".join(d.render() for d in problems)
        _SEEN = [(*d.site, d.message) for d in seen]
    return _SEEN


def test_every_message_is_expected_somewhere():
    messages, unresolved = collect_messages()
    assert not unresolved, ("messages that are no pattern (write the text at the call, or make it a module "
                            "constant, or list it in FORWARDS):\n" + "\n".join(unresolved))
    missing = uncovered(messages, expected_diagnostics())
    assert not missing, (f"{len(missing)} diagnostic(s) that no `# expected-error` in tests/verify/ meets: "
                         "add a piece that triggers each (docs/LANGUAGE.md, \"Testing diagnostics\"), or list it "
                         "in EXCLUDED with the reason and the test that covers it:\n" + "\n".join(map(str, missing)))


def test_a_new_message_without_a_piece_is_named():
    """An `error(...)` added to a module with no piece that expects it fails the check, at its file:line."""
    sources = read_sources()
    sources["passes/tile.py"] += ("\n\ndef _new(loc, name):\n"
                                  "    raise error(loc, f\"tile size `{name}` is shiny\", \"polish it\")\n")
    line = sources["passes/tile.py"].count("\n")
    messages, _ = collect_messages(sources)
    missing = [str(m) for m in uncovered(messages, expected_diagnostics())]
    assert missing == [f"passes/tile.py:{line}: f'tile size `{{name}}` is shiny'"]


def test_exclusions_are_current_and_covered():
    messages, _ = collect_messages()
    got = {(path, line) for path, line, _ in expected_diagnostics()}
    for (path, fragment), (reason, test, evidence) in EXCLUDED.items():
        sites = [m for m in messages if m.path == path and fragment in m.source]
        assert sites, f"stale exclusion: {path}: {fragment}"
        assert not any((m.path, m.line) in got for m in sites), f"{path}: `{fragment}` is expected in tests/verify/ now"
        assert reason and (test is not None or reason.startswith("unreachable")), (path, fragment)
        if test is not None:
            with open(os.path.join(ROOT, test), encoding="utf-8") as f:
                assert evidence and evidence in f.read(), f"{test} does not test `{evidence}` ({path})"


def test_tkc_modules_with_diagnostics_are_listed():
    """tkc/ is not scanned; every module of it that raises diagnostics names the test covering them."""
    for path in sorted(glob.glob(os.path.join(ROOT, "tkc", "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), rel)
        raises = any(isinstance(n, ast.Call) and _name(n.func) in ("error", "Diagnostic", "TkError")
                     for n in ast.walk(tree))
        if raises:
            assert rel in NOT_SCANNED, f"{rel} raises diagnostics: list it in NOT_SCANNED with its test"
    for rel, (what, tests) in NOT_SCANNED.items():
        assert what and os.path.exists(os.path.join(ROOT, rel)), rel
        for t in tests:
            assert os.path.exists(os.path.join(ROOT, t)), t


@pytest.mark.parametrize("source, text, other", [
    ('error(loc, f"unknown name `{name}`")', "unknown name `Q`", "unknown names"),
    ('error(loc, "a" + f"b{x}")', "abz", "a"),
    ('Diagnostic(loc, f"x {1 if a else 2} y")', "x 1 y", "x 1"),
    ('error(loc, TOO_DEEP)', "deep (x)", "deep"),
])
def test_patterns(source, text, other):
    call = ast.parse(source).body[0].value
    pattern = _pattern(call.args[1], {"TOO_DEEP": "deep (x)"})
    assert re.fullmatch(pattern, text) and not re.fullmatch(pattern, other)


def test_unresolvable_message_is_reported():
    assert _pattern(ast.parse("error(loc, problems[0])").body[0].value.args[1], {}) is None

"""The shell transcripts in README.md, docs/LANGUAGE.md and docs/ARCHITECTURE.md stay true.

House rule: docs and transcripts change in the same commit as the code they describe. This file
runs every transcript command and compares what it prints with what the docs say it prints.

What counts as a transcript. In a fenced code block, a line starting with `$ ` is a command; the
lines after it, up to the next `$ ` line or the end of the block, are its expected output. Each
command is one test case, named `DOC:LINE`.

How a command runs. With bash, cwd = the repository root, `TKC_CACHE_DIR` a fresh temporary
directory, `PYTHONUNBUFFERED=1`, and first on PATH a `tkc` that runs `tkc.cli.main` of this tree
with this interpreter (this tree first on PYTHONPATH: a scratch copy tests its own code, not
whatever `tkc` is installed); stdout and stderr go to one pipe, so they interleave as on a
terminal. A `cd X && ...` inside a command is just bash; a command that is only `cd DIR` sets the
cwd of the later commands of its block (it is itself checked for status 0).

How output is compared. Line by line, exactly, after stripping trailing whitespace and trailing
blank lines. An expected line that is exactly `...` stands for any number of lines (zero
included), for transcripts that show part of a long output. 64-hex-digit hashes (the compile
cache's keys, which depend on the tool versions) are compared as `<sha256>`, with their two-character
shard directory, so a cache listing is compared by shape: the number of lines and the file names.

Exit status. The status checked is that of the first command of the command's last pipeline
(`${PIPESTATUS[0]}`: tkc's, not that of a `| sed` or `| grep -c` after it). The docs imply it:
1 when the expected output shows a user error (`FILE:LINE:COL: error: ...` or `tkc: error: ...`),
2 for `tkc: internal compiler error`, else 0. A command with no expected output lines in a block
where no command shows output is a usage listing: only its status is checked (0). In a block
where other commands show output, no lines means the command prints nothing, and that is checked.

Files the docs name but the repository lacks. A `.tk` file named by a command that exists neither
relative to the command's cwd nor under a leading `cd DIR &&` is materialized, into a scratch
directory that then becomes the command's cwd (the docs name such files by bare relative paths,
so the diagnostics print the same names):
  1. from a `$ cat NAME.tk` transcript in any of the three docs: its output is the file
     (`bad_shape.tk` in LANGUAGE.md, also run from ARCHITECTURE.md; `bad_syntax.tk`);
  2. else from the fenced ```tk block immediately before the transcript's block (only blank lines
     between), e.g. `linear.tk`, the first kernel of LANGUAGE.md.
A missing file with neither source is a failure: the docs would name a file no reader has. (The
`$ cat` command itself then only checks that its listing parses back; the commands that compile
the file are the checks.)

Commands that write outside the repository. `/tmp/` in a command (the compile-cache demo of
ARCHITECTURE.md) is rewritten to the test's scratch directory, and `/tmp/` is written back into
the output, so the docs' paths compare equal. The commands of such a block depend on each other
(compile, list, corrupt, recompile), so each one first replays the block's earlier commands in
the same scratch directory (their output not compared, their status must be 0).

GPU transcripts. A command whose expected output says it ran on a GPU (`ran on tilelang (cuda)`,
`ran on cuda (cuda)`), or that runs with `--target tilelang` / `--target cuda`, is marked `gpu`
(conftest.py skips it where torch sees no CUDA device; the device machine runs it). A command
whose expected output says it ran on the CPU (`(cpu)`) runs with `CUDA_VISIBLE_DEVICES=` so that
`tkc run` picks the same CPU target on the device machine too.
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "docs/LANGUAGE.md", "docs/ARCHITECTURE.md"]
TIMEOUT_S = 300


@dataclasses.dataclass
class Block:
    doc: str
    line: int  # of the opening fence
    info: str  # the fence's info string (``tk``, ``python``, or empty)
    body: list[str]
    prev: "Block | None"  # the block before it, when only blank lines separate the two


@dataclasses.dataclass
class Command:
    doc: str
    line: int
    cmd: str
    expected: list[str]
    block: Block
    index: int  # position among its block's commands
    cwd: str  # relative to ROOT, from earlier `$ cd DIR` commands of the block

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def parse_blocks(doc: str) -> list[Block]:
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks: list[Block] = []
    open_at = None
    info = ""
    body: list[str] = []
    last_close = None  # line number of the last closing fence
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            if open_at is None:
                open_at, info, body = i, line[3:].strip(), []
            else:
                prev = None
                if blocks and last_close is not None and all(
                        not s.strip() for s in lines[last_close:open_at - 1]):
                    prev = blocks[-1]
                blocks.append(Block(doc, open_at, info, body, prev))
                last_close, open_at = i, None
        elif open_at is not None:
            body.append(line)
    assert open_at is None, f"{doc}: unclosed fence at line {open_at}"
    return blocks


def parse_commands(block: Block) -> list[Command]:
    cmds: list[Command] = []
    cwd = "."
    for offset, line in enumerate(block.body, 1):
        if line.startswith("$ "):
            cmd = line[2:].strip()
            cmds.append(Command(block.doc, block.line + offset, cmd, [], block, len(cmds), cwd))
            m = re.fullmatch(r"cd (\S+)", cmd)
            if m:
                cwd = os.path.normpath(os.path.join(cwd, m.group(1)))
        elif cmds:
            cmds[-1].expected.append(line)
    for c in cmds:
        while c.expected and not c.expected[-1].strip():
            c.expected.pop()
    return cmds


BLOCKS = [b for doc in DOCS for b in parse_blocks(doc)]
COMMANDS = [c for b in BLOCKS for c in parse_commands(b)]

# `$ cat NAME.tk` transcripts: the docs' listings of files the repository does not hold.
CAT_SOURCES = {m.group(1): c.expected for c in COMMANDS
               if (m := re.fullmatch(r"cat (\S+\.tk)", c.cmd))}

TK_NAME = re.compile(r"(?<![\w./-])([\w./-]+\.tk)\b")
GPU_OUTPUT = re.compile(r"ran on (tilelang|cuda) \(cuda\)")
GPU_TARGET = re.compile(r"\btkc\b.*\brun\b.*--target[ =](tilelang|cuda)\b")
ERROR_LINE = re.compile(r"^(\S+:\d+:\d+: error: |tkc: error: )")
HASH = re.compile(r"/[0-9a-z]{2}/((?:src-)?)[0-9a-f]{64}(?=/|$)")


def is_usage_listing(block: Block) -> bool:
    return not any(c.expected for c in parse_commands(block))


def expected_status(c: Command) -> int:
    if any(line.startswith("tkc: internal compiler error") for line in c.expected):
        return 2
    if any(ERROR_LINE.match(line) for line in c.expected):
        return 1
    return 0


def materialize(c: Command, scratch: str) -> str | None:
    """Write the `.tk` files `c` names but the repository lacks into `scratch`; return the cwd."""
    cwd = os.path.join(ROOT, c.cwd)
    inner = re.match(r"cd (\S+) && ", c.cmd)
    roots = [cwd] + ([os.path.join(cwd, inner.group(1))] if inner else [])
    missing = sorted({n for n in TK_NAME.findall(c.cmd)
                      if not any(os.path.exists(os.path.join(r, n)) for r in roots)})
    if not missing:
        return None
    for name in missing:
        if name in CAT_SOURCES:
            text = "\n".join(CAT_SOURCES[name]) + "\n"
        elif c.block.prev is not None and c.block.prev.info == "tk" and len(missing) == 1:
            text = "\n".join(c.block.prev.body) + "\n"
        else:
            pytest.fail(f"{c.id}: `{name}` is not in the repository, and the docs neither list it "
                        f"with `$ cat {name}` nor show it in a ```tk block right before the transcript")
        assert os.sep not in name and "/" not in name, name
        with open(os.path.join(scratch, name), "w", encoding="utf-8") as f:
            f.write(text)
    return scratch


def normalize(lines: list[str]) -> list[str]:
    out = [HASH.sub(r"/<shard>/\1<sha256>", line.rstrip()) for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Line-by-line equality, where an expected `...` line matches any run of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def run_bash(cmd: str, cwd: str, scratch: str, env: dict[str, str]) -> tuple[int, list[str]]:
    script = cmd.replace("/tmp/", scratch + "/") + "\nexit ${PIPESTATUS[0]}\n"
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    text = proc.stdout.decode("utf-8", errors="replace").replace(scratch + "/", "/tmp/")
    return proc.returncode, text.split("\n")


@pytest.fixture(scope="module")
def shim_bin(tmp_path_factory) -> str:
    """A directory holding a `tkc` that runs this tree's CLI with this interpreter."""
    path = tmp_path_factory.mktemp("bin")
    tkc = path / "tkc"
    tkc.write_text("#!/bin/sh\n"
                   f'exec "{sys.executable}" -c "import sys; from tkc.cli import main; '
                   f'sys.exit(main())" "$@"\n')
    tkc.chmod(0o755)
    return str(path)


def _param(c: Command):
    marks = []
    text = "\n".join(c.expected)
    if GPU_OUTPUT.search(text) or GPU_TARGET.search(c.cmd):
        marks.append(pytest.mark.gpu)
    return pytest.param(c, id=c.id, marks=marks)


@pytest.mark.parametrize("c", [_param(c) for c in COMMANDS])
def test_transcript(c: Command, tmp_path, shim_bin):
    scratch = str(tmp_path / "scratch")
    os.makedirs(scratch)
    env = dict(os.environ)
    env["PATH"] = shim_bin + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TKC_CACHE_DIR"] = str(tmp_path / "tkc-cache")
    env["PYTHONUNBUFFERED"] = "1"
    if "(cpu)" in "\n".join(c.expected):
        env["CUDA_VISIBLE_DEVICES"] = ""

    cwd = materialize(c, scratch) or os.path.join(ROOT, c.cwd)
    block_cmds = parse_commands(c.block)
    if any("/tmp/" in b.cmd for b in block_cmds):
        for before in block_cmds[:c.index]:
            rc, out = run_bash(before.cmd, materialize(before, scratch) or os.path.join(ROOT, before.cwd),
                               scratch, env)
            assert rc == 0, f"replaying {before.id} `{before.cmd}` exited {rc}:\n" + "\n".join(out)

    rc, out = run_bash(c.cmd, cwd, scratch, env)
    actual = normalize(out)
    shown = "\n".join(actual)
    want = expected_status(c)
    assert rc == want, f"`{c.cmd}` exited {rc}, the docs imply {want}; it printed:\n{shown}"
    if not c.expected and is_usage_listing(c.block):
        return  # a usage listing: the status is the check
    expected = normalize(c.expected)
    if not matches(expected, actual):
        diff = difflib.unified_diff(expected, actual, f"{c.id} (the docs)", "what it prints now",
                                    lineterm="")
        pytest.fail(f"`{c.cmd}` prints something other than the docs say:\n" + "\n".join(diff),
                    pytrace=False)


def test_transcripts_found():
    """The parser sees the docs' transcripts (a fence change would otherwise skip them silently)."""
    per_doc = {doc: sum(c.doc == doc for c in COMMANDS) for doc in DOCS}
    assert all(per_doc.values()), per_doc
    assert {"bad_shape.tk", "bad_syntax.tk"} <= set(CAT_SOURCES)


def test_relative_links_resolve():
    """Every relative markdown link in the project's docs names a file or folder of the tree."""
    docs = DOCS + [os.path.relpath(p, ROOT) for pattern in ("docs/*.md", "benchmarks/*.md", "tests/**/*.md")
                   for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)]
    broken, checked = [], 0
    for doc in sorted(set(docs)):
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            checked += 1
            if not target.startswith(("http://", "https://", "mailto:")) and not os.path.exists(
                    os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), target))):
                broken.append(f"{doc} -> {target}")
    assert checked >= 5 and not broken, (checked, broken)


def _python_examples() -> list[tuple[str, int, str, str]]:
    """(doc, line, code, printed): a ```python block followed only by blank lines and a plain
    ``` block that is not a shell transcript: the code and what the docs say it prints."""
    out = []
    for doc in DOCS:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        blocks = list(re.finditer(r"```(\w*)\n(.*?)```", text, re.S))
        for a, b in zip(blocks, blocks[1:]):
            if (a.group(1) == "python" and b.group(1) == "" and not b.group(2).lstrip().startswith("$")
                    and not text[a.end():b.start()].strip()):
                out.append((doc, text[:a.start()].count("\n") + 1, a.group(2), b.group(2)))
    return out


PYTHON_EXAMPLES = _python_examples()


@pytest.mark.parametrize("doc, line, code, printed", PYTHON_EXAMPLES,
                         ids=[f"{d}:{n}" for d, n, _, _ in PYTHON_EXAMPLES])
def test_python_examples_print_what_the_docs_show(tmp_path, doc, line, code, printed):
    """A Python example with its output shown right after it runs (cwd the repository root, a
    fresh compile cache, this tree first on the path) and prints that output (compared as the
    transcripts are)."""
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "TKC_CACHE_DIR": str(tmp_path / "cache"), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT_S)
    assert r.returncode == 0, f"{doc}:{line}: the example failed:\n{r.stderr[-3000:]}"
    expected, actual = normalize(printed.splitlines()), normalize(r.stdout.splitlines())
    if not matches(expected, actual):
        diff = difflib.unified_diff(expected, actual, f"{doc}:{line} (the docs)", "what it prints now", lineterm="")
        pytest.fail(f"the example at {doc}:{line} prints something other than the docs say:\n" + "\n".join(diff),
                    pytrace=False)


def test_python_examples_found():
    assert len(PYTHON_EXAMPLES) >= 5, PYTHON_EXAMPLES

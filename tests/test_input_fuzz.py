"""Input fuzzing (issue 14, item 2): mutated examples end in a located diagnostic, never a
traceback, an internal error or a hang.

Every example and test program is mutated at the token level (a token deleted, doubled, swapped
with another, replaced by a token of another file, random bytes inserted) or truncated, and
compiled in-process through the front end and the default pipeline: each input must compile or
raise TkError whose diagnostics are located in the input's file, within TIME_LIMIT_S. A failing
input is written under the test's temporary directory and named in the failure. Inputs per run:
`INPUTS` (10,000; `TKC_FUZZ_INPUTS` overrides), from a fixed seed per chunk so a failure repeats.
A sample also goes through the `tkc` command line: exit status 1 and no traceback.
"""

from __future__ import annotations

import glob
import os
import random
import re
import signal
import subprocess
import sys

import pytest

from dsl.diagnostics import TkError
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk")) + glob.glob(os.path.join(ROOT, "tests", "programs", "*.tk")))
TEXTS = {p: open(p, encoding="utf-8").read() for p in FILES}
TOKEN = re.compile(r"\s+|#[^\n]*|\"[^\"\n]*\"|\d+\.\d*|\d+|\w+|==|!=|<=|>=|\+=|-=|\*=|/=|->|.", re.S)
VOCAB = sorted({t for text in TEXTS.values() for t in TOKEN.findall(text) if t.strip()})
INPUTS = int(os.environ.get("TKC_FUZZ_INPUTS", "10000"))
CHUNKS = 8
TIME_LIMIT_S = 10


def mutate(rng: random.Random, text: str) -> str:
    toks = TOKEN.findall(text)
    kind, i = rng.randrange(6), rng.randrange(len(toks))
    if kind == 0:
        del toks[i]
    elif kind == 1:
        toks.insert(i, toks[i])
    elif kind == 2:
        j = rng.randrange(len(toks))
        toks[i], toks[j] = toks[j], toks[i]
    elif kind == 3:
        toks[i] = rng.choice(VOCAB)
    elif kind == 4:
        return text[:rng.randrange(len(text))]
    else:
        toks.insert(i, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8))).decode("latin-1"))
    return "".join(toks)


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_mutated_inputs_end_in_located_diagnostics(chunk, tmp_path):
    rng = random.Random(1000 + chunk)
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for n in range(INPUTS // CHUNKS):
            path = rng.choice(FILES)
            text = mutate(rng, TEXTS[path])
            signal.alarm(TIME_LIMIT_S)
            try:
                driver.optimize(driver.frontend(path, {}, text), "tilelang")
            except TkError as exc:
                bad = [d for d in exc.diagnostics if d.loc.file != path or d.loc.line < 1]
                assert not bad, f"input {n}: unlocated diagnostic {bad[0].loc}: {bad[0].message}"
            except BaseException as exc:
                saved = tmp_path / f"input{n}.tk"
                saved.write_text(text, encoding="utf-8")
                what = "took over the time limit" if isinstance(exc, _Hang) else f"raised {type(exc).__name__}: {exc}"
                raise AssertionError(f"{os.path.relpath(path, ROOT)} mutated ({saved}) {what}") from None
            finally:
                signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, old)


def test_the_command_line_exits_1_without_a_traceback(tmp_path):
    rng = random.Random(7)
    for n in range(6):
        path = rng.choice(FILES)
        text = mutate(rng, TEXTS[path])
        while True:  # a mutation that the compiler rejects (some leave a valid kernel)
            try:
                driver.optimize(driver.frontend(path, {}, text), "tilelang")
            except TkError:
                break
            text = mutate(rng, TEXTS[path])
        bad = tmp_path / f"bad{n}.tk"
        bad.write_text(text, encoding="utf-8")
        proc = subprocess.run([sys.executable, "-m", "tkc.cli", "--cache-dir", str(tmp_path / "c"), "compile", str(bad)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 1, proc.stderr
        assert f"{bad}:" in proc.stderr and "error:" in proc.stderr and "Traceback" not in proc.stderr

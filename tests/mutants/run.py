#!/usr/bin/env python3
"""Mutation testing: apply each mutant of tests/mutants/mutants.py to a scratch copy of the tree and
run a test tier there; report which mutants the tier catches (issue 9, item 6).

    python3 tests/mutants/run.py [--tier cpu|gpu] [--only ID ...] [--all] [--jobs N]
                                 [--json OUT] [--timeout S] [--skip-clean] [--keep] [--list]

Tiers: `cpu` is the CPU suite (`tests/` without `tests/gpu` and without tests/test_mutants.py,
hypothesis profile `ci`); `gpu` is the GPU quick tier (`-m "gpu and not slow" tests/gpu`, profile
`gpu`; on the device machine, after `source .device/env.sh`). Without `--only`, the mutants whose
`tier` is the one run (`--all`: every mutant); mutants recorded as equivalent run only when named.

Each mutant gets a fresh copy of the working tree (`git ls-files -co --exclude-standard`, plus
`.device/` when present) in a temp dir, with its `find` replaced (it must occur exactly once) and
the mutated file checked with py_compile. The project is pip-installed in editable mode from the
original tree, so the copy must shadow it: the tier runs with cwd = the copy and the copy first on
PYTHONPATH, and the runner checks in a subprocess that dsl, passes, codegen and tkc import from
the copy (else it aborts). The mutant's hint test files (`tests`, those of the tier) run first;
if they pass, the rest of the tier runs. Outcomes: `caught` (pytest exit 1: a test failed; the
first failing test is recorded; a test process killed by a signal counts too), `survived` (exit
0), `invalid` (the mutant does not compile or import, or pytest exits 2, 3, 4 or 5: collection or
usage errors), `timeout`. A clean run (no mutant) comes first and must pass. A failing test
counts only if it fails again when re-run alone and passes on the clean tree; otherwise it is
reported as flaky and deselected, and the run goes on (tests with unseeded random inputs exist).

Exit status: 0 when every mutant run was caught (or was equivalent and survived), 1 otherwise,
2 when the runner itself cannot work (clean run fails, the copy does not shadow the install).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from mutants import MUTANTS, Mutant  # noqa: E402

PACKAGES = ("dsl", "passes", "codegen", "tkc")
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
TIERS = {
    "cpu": {"args": ["--hypothesis-profile=ci"], "paths": ["tests"],
            "ignore": ["tests/gpu", "tests/test_mutants.py", "tests/mutants"]},
    "gpu": {"args": ["--hypothesis-profile=gpu", "-m", "gpu and not slow"], "paths": ["tests/gpu"], "ignore": []},
}


class RunnerError(RuntimeError):
    """The runner cannot give a meaningful answer (not a mutant's outcome)."""


@dataclass
class Result:
    id: str
    file: str
    tier: str  # the tier the mutant expects to be caught by
    ran: str  # the tier that ran
    outcome: str = ""  # caught, survived, invalid, timeout
    caught_by: str = ""  # first failing test (caught), or why (invalid, timeout)
    stage: str = ""  # hints or suite: which run decided
    seconds: float = 0.0
    equivalent: str = ""
    what: str = ""
    log_tail: list[str] = field(default_factory=list)


# ---- the scratch copy ------------------------------------------------------------------------
def tree_files(root: str) -> list[str]:
    """Paths (relative to `root`) of the working tree: tracked and untracked-not-ignored files
    that exist, plus everything under .device/ (the GPU machine's environment bundle)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                         check=True, capture_output=True).stdout.decode()
    files = [p for p in out.split("\0") if p and os.path.lexists(os.path.join(root, p))]
    device = os.path.join(root, ".device")
    if os.path.isdir(device):
        for dirpath, _, names in os.walk(device):
            files += [os.path.relpath(os.path.join(dirpath, n), root) for n in names]
    return sorted(set(files))


def make_copy(files: list[str], tag: str) -> str:
    dest = tempfile.mkdtemp(prefix=f"tkc-mutant-{tag}-")
    for rel in files:
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), target, follow_symlinks=False)  # copy2 keeps mtimes
    return dest


def apply(m: Mutant, copy: str) -> str | None:
    """Apply `m` in `copy`; returns why it is invalid, or None."""
    path = os.path.join(copy, m.file)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    n = text.count(m.find)
    if n != 1:
        raise RunnerError(f"mutant `{m.id}`: `find` occurs {n} times in {m.file} (must be exactly once); "
                          "tests/test_mutants.py checks this")
    os.remove(path)  # a fresh file, in case the copy shares an inode with the original
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(m.find, m.replace))
    try:
        py_compile.compile(path, cfile=os.path.join(copy, ".mutant.pyc"), doraise=True)
    except py_compile.PyCompileError as exc:
        return f"does not compile: {exc.msg.strip().splitlines()[-1]}"
    return None


def environment(copy: str) -> dict[str, str]:
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = copy + (os.pathsep + old if old else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_shadowing(copy: str, env: dict[str, str]) -> str | None:
    """None when dsl, passes, codegen and tkc import from `copy`; a reason when the mutated tree
    fails to import (the mutant is invalid); RunnerError when they import from elsewhere."""
    code = f"import {', '.join(PACKAGES)}; print('\\n'.join(m.__file__ for m in ({', '.join(PACKAGES)},)))"
    p = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode:
        return "import fails: " + (p.stderr.strip().splitlines() or ["?"])[-1]
    real = os.path.realpath(copy) + os.sep
    paths = p.stdout.split()
    wrong = [(pkg, f) for pkg, f in zip(PACKAGES, paths) if not os.path.realpath(f).startswith(real)]
    if wrong or len(paths) != len(PACKAGES):
        raise RunnerError("the scratch copy does not shadow the installed tkc: "
                          + ", ".join(f"{pkg} imports from {f}" for pkg, f in wrong)
                          + f" (expected under {copy}); is something ahead of PYTHONPATH on sys.path?")
    return None


# ---- running pytest --------------------------------------------------------------------------
def pytest(args: list[str], copy: str, env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """(exit status or None on timeout, output). The run is its own process group, killed whole
    on timeout (tests start tkc and compiler subprocesses)."""
    proc = subprocess.Popen(PYTEST + args, cwd=copy, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out or ""


def first_failure(output: str) -> str:
    """The node id of the first FAILED/ERROR line of pytest's short summary (`FAILED id - msg`;
    a parametrized id may itself contain ` - `, so its brackets are matched)."""
    for line in output.splitlines():
        for tag in ("FAILED ", "ERROR "):
            if not line.startswith(tag):
                continue
            rest = line[len(tag):]
            head = rest.split(" - ")[0]
            if "[" in head:
                depth = 0
                for i, ch in enumerate(rest):
                    depth += (ch == "[") - (ch == "]")
                    if ch == "]" and depth == 0:
                        return rest[:i + 1]
            return head.strip()
    return ""


def tier_runs(tier: str, hints: tuple[str, ...], select: str = "") -> list[tuple[str, list[str]]]:
    """The pytest runs of a tier: the hint files of that tier first (narrowed by `select`, a
    pytest `-k` expression, on the GPU tier), then the rest of it (after a narrowed hint run,
    the whole tier)."""
    spec = TIERS[tier]
    ignore = [f"--ignore={p}" for p in spec["ignore"]]
    if tier == "gpu":
        hints = tuple(h for h in hints if h.startswith("tests/gpu/"))
    else:
        hints = tuple(h for h in hints if not h.startswith("tests/gpu/"))
    runs = []
    if hints and select and tier == "gpu":
        runs.append(("hints", spec["args"] + list(hints) + ["-k", select]))
        runs.append(("suite", spec["args"] + spec["paths"] + ignore))
    elif hints:
        runs.append(("hints", spec["args"] + list(hints)))
        runs.append(("suite", spec["args"] + spec["paths"] + ignore + [f"--ignore={h}" for h in hints]))
    else:
        runs.append(("suite", spec["args"] + spec["paths"] + ignore))
    return runs


def judge(code: int | None, output: str, r: Result) -> bool:
    """Record the outcome of one pytest run in `r`; True when it decides the mutant."""
    tail = output.strip().splitlines()[-40:]
    r.outcome, r.caught_by, r.log_tail = "", "", []
    if code is None:
        r.outcome, r.caught_by, r.log_tail = "timeout", "pytest ran past the time limit", tail
        return True
    if code == 1 or code < 0:
        r.outcome, r.log_tail = "caught", tail
        r.caught_by = first_failure(output) or (f"killed by signal {-code}" if code < 0 else "exit 1")
        return True
    if code in (2, 3, 4, 5):
        r.outcome, r.log_tail = "invalid", tail
        r.caught_by = f"pytest exit {code}: " + (first_failure(output) or (tail[-1] if tail else ""))
        return True
    if code != 0:
        r.outcome, r.caught_by, r.log_tail = "invalid", f"pytest exit {code}", tail
        return True
    r.outcome = "survived"
    return False


FLAKY: set[str] = set()  # tests that failed and then passed on a re-run, or failed on the clean tree
_FLAKY_LOCK = threading.Lock()
MAX_FLAKY = 5  # per mutant


def reproduces(node: str, m: Mutant | None, tier: str, copy: str, baseline: str, left: float) -> bool:
    """Whether the failure of test `node` is real: it fails again when re-run alone in `copy` and,
    for a mutant, passes in the clean `baseline`. A test that draws unseeded random inputs can
    fail by chance; without this check it would mark any mutant caught."""
    args = TIERS[tier]["args"] + [node]
    code, _ = pytest(args, copy, environment(copy), left)
    if code == 0:
        return False
    if m is None or code is None:
        return True
    code, _ = pytest(args, baseline, environment(baseline), left)
    return code in (0, None)


def run_one(m: Mutant | None, tier: str, files: list[str], timeout: float, keep: bool, baseline: str) -> Result:
    """Run the tier on a fresh copy with mutant `m` applied (on `baseline` itself for m = None)."""
    r = Result(m.id if m else "(clean)", m.file if m else "", m.tier if m else tier, tier,
               equivalent=m.equivalent if m else "", what=m.what if m else "no mutant")
    start = time.monotonic()
    copy = make_copy(files, m.id) if m else baseline
    flaky: list[str] = []
    try:
        env = environment(copy)
        bad = apply(m, copy) if m else None
        bad = bad or check_shadowing(copy, env)
        if bad:
            r.outcome, r.caught_by = "invalid", bad
            return r
        for stage, args in tier_runs(tier, m.tests if m else (), m.select if m else ""):
            while True:
                with _FLAKY_LOCK:
                    skip = [f"--deselect={n}" for n in sorted(FLAKY | set(flaky))]
                code, output = pytest(args + skip, copy, env, timeout - (time.monotonic() - start))
                r.stage = stage
                if stage == "hints" and code == 5:  # no test of the tier in the hint files
                    break
                judge(code, output, r)
                node = first_failure(output) if r.outcome == "caught" else ""
                if (node and len(flaky) < MAX_FLAKY
                        and not reproduces(node, m, tier, copy, baseline, timeout - (time.monotonic() - start))):
                    flaky.append(node)
                    with _FLAKY_LOCK:
                        FLAKY.add(node)
                    print(f"  flaky: {node} (under {r.id}); deselected, re-running", flush=True)
                    continue
                break
            if r.outcome not in ("", "survived"):
                break
        if flaky:
            r.caught_by = (r.caught_by + "; " if r.caught_by else "") + "flaky, deselected: " + ", ".join(flaky)
        return r
    finally:
        r.seconds = round(time.monotonic() - start, 1)
        if m is not None:
            if keep:
                print(f"  kept {copy}", flush=True)
            else:
                shutil.rmtree(copy, ignore_errors=True)


# ---- reporting -------------------------------------------------------------------------------
def table(results: list[Result]) -> str:
    head = ("id", "file", "tier", "outcome", "caught by", "seconds")
    rows = [(r.id, r.file, r.tier, r.outcome + (" (equivalent)" if r.equivalent else ""),
             r.caught_by if len(r.caught_by) <= 70 else r.caught_by[:67] + "...", f"{r.seconds:.0f}")
            for r in results]
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    fmt = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(tuple("-" * w for w in widths))] + [fmt(x) for x in rows])


def device_name(tier: str) -> str:
    if tier != "gpu":
        return "cpu"
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=60)
        return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else "unknown GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown GPU"


def select(args) -> list[Mutant]:
    by_id = {m.id: m for m in MUTANTS}
    if args.only:
        unknown = [i for i in args.only if i not in by_id]
        if unknown:
            raise RunnerError(f"unknown mutant id(s): {', '.join(unknown)} (see --list)")
        return [by_id[i] for i in args.only]
    return [m for m in MUTANTS if (args.all or m.tier == args.tier) and not m.equivalent]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", choices=sorted(TIERS), default="cpu", help="the test tier to run (default cpu)")
    ap.add_argument("--only", nargs="+", metavar="ID", help="run these mutants (whatever their tier)")
    ap.add_argument("--all", action="store_true", help="every non-equivalent mutant, not only the tier's")
    ap.add_argument("--jobs", type=int, default=1, help="mutants run in parallel (default 1)")
    ap.add_argument("--json", metavar="OUT", help="write the results as JSON")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per mutant (default 1200)")
    ap.add_argument("--skip-clean", action="store_true",
                    help="skip the clean run (only right after one passed on the same tree)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = ap.parse_args(argv)
    if args.list:
        for m in MUTANTS:
            print(f"{m.id:40} {m.tier:4} {m.file:28} {m.what}" + (" [equivalent]" if m.equivalent else ""))
        return 0
    baseline = ""
    try:
        chosen = select(args)
        files = tree_files(ROOT)
        baseline = make_copy(files, "clean")  # the clean run's tree; re-runs of failing tests check against it
        report = {"tier": args.tier, "device": device_name(args.tier),
                  "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                           text=True).stdout.strip(),
                  "started": time.strftime("%Y-%m-%d %H:%M:%S"), "clean": None, "results": []}
        print(f"mutation testing: {len(chosen)} mutant(s), tier {args.tier} ({report['device']}), "
              f"{args.jobs} job(s), {len(files)} files per copy", flush=True)
        if not args.skip_clean:
            clean = run_one(None, args.tier, files, args.timeout, args.keep, baseline)
            report["clean"] = asdict(clean)
            print(f"clean run: {'passed' if clean.outcome == 'survived' else clean.outcome} "
                  f"in {clean.seconds:.0f} s", flush=True)
            if clean.outcome != "survived":
                raise RunnerError("the clean tree does not pass the tier (" + (clean.caught_by or clean.outcome)
                                  + "):\n" + "\n".join(clean.log_tail))
        results: list[Result] = []
        lock = threading.Lock()
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(run_one, m, args.tier, files, args.timeout, args.keep, baseline): m for m in chosen}
            for fut in cf.as_completed(futures):
                try:
                    r = fut.result()
                except RunnerError:
                    for other in futures:
                        other.cancel()
                    raise
                with lock:
                    results.append(r)
                    extra = f" ({r.caught_by})" if r.caught_by else ""
                    print(f"[{len(results)}/{len(chosen)}] {r.outcome:8} {r.id}{extra} {r.seconds:.0f} s", flush=True)
    except RunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if baseline and not args.keep:
            shutil.rmtree(baseline, ignore_errors=True)
    order = {m.id: i for i, m in enumerate(MUTANTS)}
    results.sort(key=lambda r: order[r.id])
    report["results"] = [asdict(r) for r in results]
    report["flaky"] = sorted(FLAKY)
    print()
    print(table(results))
    counts = {o: sum(r.outcome == o for r in results) for o in ("caught", "survived", "invalid", "timeout")}
    print("\n" + ", ".join(f"{n} {o}" for o, n in counts.items()))
    if FLAKY:
        print("flaky tests (failed, then passed on a re-run or failed on the clean tree; deselected):\n  "
              + "\n  ".join(sorted(FLAKY)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    bad = [r for r in results if r.outcome != "caught" and not (r.equivalent and r.outcome == "survived")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Wall time of `tkc compile examples/X.tk --target tilelang`, cold and warm, through a subprocess.

    python3 benchmarks/compile_time.py                 # every example, 5 repetitions, table
    python3 benchmarks/compile_time.py --reps 9 --json compile_time.json

Cold: a fresh, empty `--cache-dir`. Warm: the same cache directory, second run (the generated
source comes from tkc's cache). Each repetition uses a new cache directory; the table gives the
median (and min / max) over repetitions. Floors measured the same way: the bare interpreter
(`python -c pass`) and `import tkc.cli`. Targets: under 2 s cold, under 0.2 s warm.

`--target tilelang` emits TileLang source only (TileLang itself is not imported), so this measures
tkc's own front end, passes, code generation and start-up. When the warm median is over the
target, a profile follows (or always, with --profile): `-X importtime` of a warm run, the time of
each stage in one process, and the top of cProfile of `tkc.cli.main`. Runs on the CPU.

    python3 benchmarks/compile_time.py --scaling 1000,2000,4000,8000,16000

Scaling (issue 10: compile time must grow linearly with program size): a generated kernel of N
statements (`y = y + X[m*BM : +BM, :] * 1.5`, each a global load and two elementwise ops) is
compiled in this process, cold (a fresh cache), for `tilelang` and `cuda` (source generation);
the table gives seconds and microseconds per statement. Exit status 1 when the time per statement
at the largest N is over SCALING_SLACK times that at the smallest (not linear).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from miss import git_state  # noqa: E402  (the same tree description as the MiSS benchmark)
COLD_TARGET_S, WARM_TARGET_S = 2.0, 0.2
SCALING_SLACK = 2.0  # allowed growth of the time per statement from the smallest N to the largest


def scaling_source(n: int) -> str:
    """A kernel of `n` statements, each a global load and two elementwise ops on one accumulator."""
    body = "\n".join("    y = y + X[m*BM : +BM, :] * 1.5" for _ in range(n))
    return (f"# {n} statements (benchmarks/compile_time.py --scaling)\n"
            "kernel scaling<BM=16>(X: f32[M, N]) -> (Y: f32[M, N])\n    where M = 64, N = 64\n{\n"
            f"    grid (cdiv(M, BM)) as (m)\n    y = zeros(f32[BM, N])\n{body}\n    Y[m*BM : +BM, :] = y\n}}\n")


def measure_scaling(sizes: list[int], targets: list[str], tmp: str) -> dict:
    """{target: {n: seconds}} for an in-process, cold `driver.compile_file` of scaling_source(n)."""
    sys.path.insert(0, ROOT)
    from tkc import driver
    from tkc.cache import Cache

    out: dict = {t: {} for t in targets}
    for n in sizes:
        path = os.path.join(tmp, f"scaling{n}.tk")
        with open(path, "w", encoding="utf-8") as f:
            f.write(scaling_source(n))
        for target in targets:
            t0 = time.perf_counter()
            driver.compile_file(path, target, {}, Cache(os.path.join(tmp, f"cache-{target}-{n}")))
            out[target][n] = time.perf_counter() - t0
            print(f"  {target} N={n}: {out[target][n]:.2f} s", flush=True)
    return out


def scaling_main(args) -> int:
    sizes = sorted(int(x) for x in args.scaling.split(","))
    tmp = tempfile.mkdtemp(prefix="tkc-compile-scaling-")
    try:
        print(f"# compile time against program size, in process, cold; tree {git_state()}; "
              f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}", flush=True)
        res = measure_scaling(sizes, ["tilelang", "cuda"], tmp)
        print("\n| statements | " + " | ".join(f"{t} s (us/stmt)" for t in res) + " |")
        print("|---|" + "---|" * len(res))
        for n in sizes:
            print(f"| {n} | " + " | ".join(f"{res[t][n]:.2f} ({res[t][n] / n * 1e6:.0f})" for t in res) + " |")
        worst = max(res[t][sizes[-1]] / sizes[-1] / (res[t][sizes[0]] / sizes[0]) for t in res)
        linear = worst <= SCALING_SLACK
        print(f"\ntime per statement grows {worst:.2f}x from N={sizes[0]} to N={sizes[-1]}: "
              f"{'linear' if linear else 'NOT linear'} (allowed {SCALING_SLACK:g}x)")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"scaling": {t: {str(n): v for n, v in r.items()} for t, r in res.items()},
                           "growth": worst, "tree": git_state(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                          f, indent=1)
        return 0 if linear else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def launcher(kind: str) -> list[str]:
    """The command that starts tkc: `script` is the console script installed beside this Python
    (what `tkc` runs, minus any version-manager shim), `path` is `tkc` as found on this process's
    PATH (under pyenv that is the same script: pyenv puts the version's bin directory first),
    `module` is `python -m tkc.cli`."""
    if kind == "script":
        script = os.path.join(os.path.dirname(sys.executable), "tkc")
        if os.path.isfile(script) and os.access(script, os.X_OK):
            return [script]
        kind = "module"
    if kind == "path":
        found = shutil.which("tkc")
        if found:
            return [found]
        kind = "module"
    return [sys.executable, "-m", "tkc.cli"]


def child_env(tmp: str, pyc: str | None, tmpdir: str | None = None) -> dict[str, str]:
    """This checkout first on the path; no inherited tkc cache; TileLang's cache in `tmp`.
    `pyc`: a bytecode cache directory (PYTHONPYCACHEPREFIX) so modules are not recompiled on
    every start, as in a normal install; None keeps this environment's setting (this box sets
    PYTHONDONTWRITEBYTECODE=1, so the checkout's modules are compiled from source every run).
    `tmpdir`: TMPDIR for the child, so libraries' caches in the temporary directory (lark's
    `cache=True` parser tables) start empty on a cold run and are kept for the warm one."""
    env = dict(os.environ)
    env.pop("TKC_CACHE_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["TILELANG_CACHE_DIR"] = os.path.join(tmp, "tilelang")
    if pyc:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pyc
    if tmpdir:
        os.makedirs(tmpdir, exist_ok=True)
        env["TMPDIR"] = tmpdir
    return env


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - t0, proc


def measure_example(path: str, target: str, start: list[str], reps: int, tmp: str, pyc: str | None) -> dict:
    """Cold and warm wall seconds (lists over repetitions), or an error from the first failure.
    Each repetition gets a fresh tkc cache directory and a fresh TMPDIR; warm reuses both."""
    cold, warm = [], []
    for i in range(reps):
        rep = os.path.join(tmp, f"{os.path.basename(path)}-{i}")
        cmd = start + ["--cache-dir", os.path.join(rep, "cache"), "compile", os.path.relpath(path, ROOT),
                       "--target", target]
        env = child_env(tmp, pyc, os.path.join(rep, "tmp"))
        for bucket in (cold, warm):
            secs, proc = timed(cmd, env)
            if proc.returncode != 0 or not proc.stdout.strip():
                return {"error": f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[0]}",
                        "cold_s": cold, "warm_s": warm}
            bucket.append(secs)
        shutil.rmtree(rep, ignore_errors=True)
    return {"cold_s": cold, "warm_s": warm}


def measure_floor(code: str, reps: int, tmp: str, pyc: str | None) -> list[float]:
    env = child_env(tmp, pyc)
    timed([sys.executable, "-c", code], env)  # fill the bytecode cache
    return [timed([sys.executable, "-c", code], env)[0] for _ in range(reps)]


def stat(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)} if xs else {}


# ----------------------------------------------------------------------------- profile

STAGES = r"""
import sys, time
T = [time.perf_counter()]
def lap(name):
    T.append(time.perf_counter())
    print(f"  {name:<34} {1e3 * (T[-1] - T[-2]):7.1f} ms")
import tkc.cli; lap("import tkc.cli")
from tkc import driver
from tkc.cache import Cache
from dsl import exprs, parser
from dsl.lower import lower
from passes import manager
lap("import the rest (dsl, passes, lark)")
path, target, cache = sys.argv[1:4]
text = driver.read_source(path)
try:
    parser._parser(); lap("build the .tk LALR parser (lark)")
    exprs._parser(); lap("build the index-expr parser (lark)")
except AttributeError:
    pass
ast = parser.parse(text, path); lap("parse")
module = lower(ast, text, {}); lap("lower + verify")
final = driver.optimize(module, target); lap("pass pipeline")
art = driver.emit(final, target, Cache(cache)); lap(f"emit (cache hit: {art.cached})")
print(f"  {'total in-process':<34} {1e3 * (T[-1] - T[0]):7.1f} ms")
"""

CPROFILE = r"""
import cProfile, io, pstats, sys
from tkc.cli import main
argv = sys.argv[1:]
prof = cProfile.Profile()
out, sys.stdout = sys.stdout, io.StringIO()
prof.enable()
main(argv)
prof.disable()
sys.stdout = out
pstats.Stats(prof).sort_stats("cumulative").print_stats(%d)
"""


def importtime_report(lines: list[str], top: int) -> list[str]:
    """The `top` imports with the largest cumulative time from `-X importtime` output (the
    indentation of a name shows how deep in the import tree it is)."""
    rows = []
    for line in lines:
        parts = line.removeprefix("import time:").split("|")
        if not line.startswith("import time:") or len(parts) != 3 or not parts[0].strip().isdigit():
            continue  # the header or other stderr
        rows.append((int(parts[0]), int(parts[1]), parts[2].rstrip()))
    out = [f"  {'cumulative':>11} {'self':>8}  module"]
    for self_us, cum_us, name in sorted(rows, key=lambda r: -r[1])[:top]:
        out.append(f"  {cum_us / 1e3:8.1f} ms {self_us / 1e3:5.1f} ms {name}")
    return out


def profile(example: str, target: str, start: list[str], tmp: str, pyc: str | None, top: int) -> str:
    cache = os.path.join(tmp, "profile", "cache")
    env = child_env(tmp, pyc, os.path.join(tmp, "profile", "tmp"))
    rel = os.path.relpath(example, ROOT)
    args = ["--cache-dir", cache, "compile", rel, "--target", target]
    timed(start + args, env)  # fill the cache: the profile is of a warm run
    report = [f"## profile of a warm `tkc compile {rel} --target {target}`", ""]

    secs = statistics.median(timed(start + args, env)[0] for _ in range(3))
    floor = statistics.median(measure_floor("pass", 3, tmp, pyc))
    report += [f"wall {1e3 * secs:.0f} ms; bare interpreter (`python -c pass`) {1e3 * floor:.0f} ms", ""]

    report.append("### -X importtime (largest cumulative)")
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tkc.cli", *args], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    report += importtime_report(proc.stderr.splitlines(), top)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    report += ["", "  interpreter start-up alone (site, .pth files; included above):"]
    report += importtime_report(proc.stderr.splitlines(), 4)[1:]

    # The full pipeline, stage by stage (what a cold run does; a warm CLI run may skip stages).
    # Twice, in a fresh TMPDIR: the first builds lark's parser tables (if lark caches them there).
    stage_env = child_env(tmp, pyc, os.path.join(tmp, "profile", "stages-tmp"))
    for label in ("first run, empty TMPDIR", "second run"):
        report += ["", f"### stages of the full pipeline in one process ({label}; no profiler)"]
        proc = subprocess.run([sys.executable, "-c", STAGES, rel, target, cache], cwd=ROOT, env=stage_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        report += proc.stdout.rstrip().splitlines() or [f"  failed: {proc.stderr.strip()[-300:]}"]

    report += ["", f"### cProfile of tkc.cli.main (top {top} by cumulative; the profiler roughly doubles times)"]
    proc = subprocess.run([sys.executable, "-c", CPROFILE % top, *args], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    text = proc.stdout
    keep = text[text.find("ncalls"):] if "ncalls" in text else text or proc.stderr
    report += ["  " + ln.replace(ROOT + os.sep, "").replace(os.path.dirname(os.__file__), "<stdlib>")
               for ln in keep.rstrip().splitlines()]
    return "\n".join(report)


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", default=None, help="comma-separated example names (default: every examples/*.tk)")
    p.add_argument("--target", default="tilelang")
    p.add_argument("--reps", type=int, default=5, help="repetitions per example (default 5)")
    p.add_argument("--launcher", choices=("script", "path", "module"), default="script",
                   help="how tkc is started (default: the console script beside this Python)")
    p.add_argument("--profile", action="store_true", help="always profile (default: only when warm > 0.2 s)")
    p.add_argument("--no-profile", action="store_true", help="never profile")
    p.add_argument("--profile-example", default="miss", help="example to profile (default miss)")
    p.add_argument("--top", type=int, default=25, help="rows in each profile listing")
    p.add_argument("--no-pyc", action="store_true",
                   help="keep this environment's bytecode setting (default: a fresh PYTHONPYCACHEPREFIX, "
                        "filled before timing, as a normal install has .pyc files)")
    p.add_argument("--json", default=None, help="write the numbers here")
    p.add_argument("--scaling", default=None, metavar="N1,N2,...",
                   help="time generated kernels of N statements instead (linearity check)")
    args = p.parse_args(argv)
    if args.scaling:
        return scaling_main(args)

    paths = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk")))
    if args.examples:
        want = {e.strip() for e in args.examples.split(",")}
        paths = [q for q in paths if os.path.splitext(os.path.basename(q))[0] in want]
    if not paths:
        p.error("no examples selected")
    start = launcher(args.launcher)
    tmp = tempfile.mkdtemp(prefix="tkc-compile-time-")
    pyc = None if args.no_pyc else os.path.join(tmp, "pyc")
    try:
        print(f"# tkc compile --target {args.target}: wall time through a subprocess, median of {args.reps}")
        print(f"# {platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}; launcher: {' '.join(start)}; tree {git_state()}; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
        if pyc:
            print("# bytecode cached (PYTHONPYCACHEPREFIX, filled by an untimed run of each example)", flush=True)
            for path in paths:  # compile every module tkc may import, outside the timed runs
                timed(start + ["--cache-dir", os.path.join(tmp, "prime"), "compile", path, "--target", args.target],
                      child_env(tmp, pyc, os.path.join(tmp, "prime-tmp")))
        else:
            print(f"# bytecode as in this environment (PYTHONDONTWRITEBYTECODE="
                  f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})", flush=True)
        floors = {"python -c pass": measure_floor("pass", args.reps, tmp, pyc),
                  "python -c 'import tkc.cli'": measure_floor("import tkc.cli", args.reps, tmp, pyc)}
        results = {}
        for path in paths:
            name = os.path.splitext(os.path.basename(path))[0]
            results[name] = measure_example(path, args.target, start, args.reps, tmp, pyc)
            r = results[name]
            if "error" in r:
                print(f"  {name}: {r['error']}", flush=True)
            else:
                print(f"  {name}: cold {stat(r['cold_s'])['median']:.3f} s, warm {stat(r['warm_s'])['median']:.3f} s",
                      flush=True)

        print(f"\n| example | cold median (min-max) | warm median (min-max) | cold < {COLD_TARGET_S:g} s "
              f"| warm < {WARM_TARGET_S:g} s |")
        print("|---|---|---|---|---|")
        warm_medians, failed = [], False
        for name, r in results.items():
            if "error" in r:
                failed = True
                print(f"| {name} | {r['error']} | | | |")
                continue
            c, w = stat(r["cold_s"]), stat(r["warm_s"])
            warm_medians.append(w["median"])
            print(f"| {name} | {c['median']:.3f} s ({c['min']:.3f}-{c['max']:.3f}) "
                  f"| {w['median']:.3f} s ({w['min']:.3f}-{w['max']:.3f}) "
                  f"| {'yes' if c['median'] < COLD_TARGET_S else 'NO'} | {'yes' if w['median'] < WARM_TARGET_S else 'NO'} |")
        for label, xs in floors.items():
            f = stat(xs)
            print(f"| floor: `{label}` | {f['median']:.3f} s ({f['min']:.3f}-{f['max']:.3f}) | | | |")

        over = any(m >= WARM_TARGET_S for m in warm_medians)
        report = None
        if args.profile or (over and not args.no_profile):
            example = os.path.join(ROOT, "examples", f"{args.profile_example}.tk")
            if not os.path.exists(example):
                example = paths[0]
            print(f"\nwarm time {'is over' if over else 'is under'} {WARM_TARGET_S:g} s; profiling\n", flush=True)
            report = profile(example, args.target, start, tmp, pyc, args.top)
            print(report)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                           "launcher": start, "target": args.target, "reps": args.reps,
                           "bytecode": "cached" if pyc else "environment", "tree": git_state(),
                           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": [sys.executable, *sys.argv],
                           "floors": {k: stat(v) | {"samples": v} for k, v in floors.items()},
                           "examples": {k: {**v, "cold": stat(v.get("cold_s", [])), "warm": stat(v.get("warm_s", []))}
                                        for k, v in results.items()},
                           "profile": report}, f, indent=1)
            print(f"\nwrote {args.json}")
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

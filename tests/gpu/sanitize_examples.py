"""compute-sanitizer on every example and test program (issue 14, item 6).

One batch is one (tool, backend): `memcheck`, `racecheck` or `synccheck` through `tilelang` or
`cuda`. A batch runs every case in ONE sanitized process (the sanitizer's start and the imports of
torch and TileLang are paid once): each .tk file of tests/edge_shapes.py's SPECS at its default
shapes (the file's `where` dims and constants; `CAPS` shrinks the few whose defaults are
llama-size, keeping the dims multiples of the tiles) and at one shape that is not a multiple of
its tiles (edge_shapes' `all-partial` case: every tiled dim past a tile edge, at SPECS' small
tiles), plus STAGE = 1 of the cluster examples at both shapes (the coverage of the former
per-example test). One input distribution per case (the file's first, seed 0: runtime scalars at
their largest allowed value); results are checked against torch in float64 (tkc/oracle.py),
computed on the CPU so that only tkc's kernels (and a few copies) run on the GPU.

How a batch runs: (1) every kernel is compiled outside the sanitizer, in parallel worker processes
that fill tkc's cache (`TKC_CACHE_DIR`, TileLang's and nvcc's binaries included); (2)
`compute-sanitizer --tool T --error-exitcode 5 --destroy-on-device-error kernel` runs this file
with `--worker`, which loads every kernel from the cache first, then launches the cases one after
another between `@@ BEGIN` / `@@ END` markers; (3) the sanitizer's output is read as it comes and
each report is charged to the case whose markers enclose it, and by the kernel name it names to
the example declaring that kernel. memcheck runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so each
tensor is its own allocation and an access past its end is out of bounds for the tool (inside
torch's cached pool it would land in a neighbour). A (case, backend) whose compile ends in a
located diagnostic (`cuda` rejects dynamic dims; TileLang cannot lay out some register tiles) is
skipped with the reason; any other compile or launch failure fails that case and the batch goes on.

A batch passes when every case passes or is skipped, no report was printed, the tool's summary
says 0 (`ERROR SUMMARY: 0 errors`; racecheck `RACECHECK SUMMARY: 0 hazards`) and the sanitizer
exits 0. Usage (on the GPU machine; `--list` and `--codegen-only` run anywhere):

    python3 tests/gpu/sanitize_examples.py --tool memcheck --target cuda [--only NAME ...] [--shard 1/2]
    python3 tests/gpu/sanitize_examples.py --tool racecheck --target tilelang --list   # cases, time estimate

tests/gpu/test_gpu_sanitizer.py runs the six batches in the full tier. Exit status: 0 clean, 1 a
case failed or the sanitizer reported something, 2 the batch could not run (no CUDA, no
compute-sanitizer).
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import json
import os
import re
import shutil
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
for _p in (TESTS, HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from edge_shapes import ROOT, SPECS, edge_cases  # noqa: E402

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

TOOLS = ("memcheck", "racecheck", "synccheck")
TARGETS = ("tilelang", "cuda")
CLUSTER = ("examples/cluster_reduce_dsmem.tk", "examples/cluster_reduce_dsmem_pull.tk", "examples/cluster_reduce_hbm.tk")

# Default dims too big for a sanitized launch (or for the float64 reference on the CPU): the
# caps keep every dim a multiple of the file's default tiles and the sparse patterns' density.
CAPS: dict[str, dict[str, int]] = {
    "examples/matmul.tk": {"D": 512},  # W 4096 x 4096 f32: 64 MB
    "examples/matmul_f16.tk": {"D": 512},
    "examples/matmul_residual.tk": {"D": 512},
    "examples/rmsnorm_matmul.tk": {"D": 512},
    "examples/matmul_q8.tk": {"D": 512},
    "examples/ffn_gate.tk": {"H": 512},  # W1, W3 11008 x 4096 f32: 360 MB
    "examples/embedding.tk": {"V": 1024},  # E 32000 x 4096 f32: 524 MB, one row read
    "examples/sgemm.tk": {"M": 512, "N": 512, "K": 512},  # 4096^3: 137 GFLOP
    "examples/sddmm.tk": {"M": 1024, "N": 1024, "NNZ": 5800},  # 4000^2 at 0.55%
    "examples/sddmm_wmma_32x8x16.tk": {"M": 1024, "N": 1024, "NNZ": 15700},  # 3000 x 7000 at 1.5%
    "examples/sddmm_wmma_8x32x16.tk": {"M": 1024, "N": 1024, "NNZ": 15700},
}

# Time model for the estimate (seconds; rough guesses until measured, see --timings): the
# sanitizer's start with torch (and TileLang) imported, per case the load of its module under the
# tool and the host work, per MB of the case's tensors the instrumented launch and the CPU
# reference.
START_S = {"memcheck": 40.0, "racecheck": 45.0, "synccheck": 40.0}
CASE_S = {"tilelang": 2.0, "cuda": 1.0}
TOOL_FACTOR = {"memcheck": 1.0, "racecheck": 1.5, "synccheck": 1.0}
PER_MB_S = {"memcheck": 0.05, "racecheck": 0.3, "synccheck": 0.05}
COMPILE_S = 8.0  # one cold compile in a worker process (TileLang or nvcc)

DTYPE_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i8": 1, "i32": 4, "bool": 1}


@dataclass
class Case:
    path: str  # relative to ROOT
    label: str  # default | edge, plus ",STAGE=1" for the cluster examples' second stage
    values: dict[str, int]  # every dim (dynamic ones included) and schedule constant
    dims: list[str]  # which of `values` are problem dims (the rest are constants)
    note: str = ""  # how the shape was chosen
    mbytes: float = 0.0  # the case's tensors (inputs and outputs), MB
    error: str = ""  # the case could not even be set up (the file does not lower at these values)

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]

    @property
    def id(self) -> str:
        dims = ",".join(f"{d}={self.values[d]}" for d in self.dims)
        return f"{self.name}:{self.label}:{dims}"


# ---- the cases ---------------------------------------------------------------------------------


def _tensor_mbytes(module) -> float:
    from tkc import oracle

    env = oracle.dims_env(module)
    total = 0
    for a in module.func.body.args:
        n = 1
        for x in a.type.concrete_shape(env):
            n *= int(x)
        total += n * DTYPE_BYTES.get(a.type.dtype, 4)
    return total / 1e6


def _case(path: str, label: str, overrides: dict[str, int], note: str) -> Case:
    """A case of `path` at `overrides` (dims and constants; the file's defaults for the rest)."""
    from tkc import driver

    try:
        module = driver.frontend(os.path.join(ROOT, path), overrides)
    except Exception as exc:  # noqa: BLE001 (reported as the case's failure)
        return Case(path, label, dict(overrides), sorted(overrides), note, error=_one_line(exc))
    attrs = module.func.attrs
    dims = {**attrs.get("dims", {}), **attrs.get("dynamic", {})}
    values = {**dims, **attrs.get("consts", {})}
    return Case(path, label, values, list(dims), note, round(_tensor_mbytes(module), 3))


def _edge(path: str) -> tuple[str, dict[str, int]]:
    """edge_shapes' case with every tiled dim partial, else the first one past a tile edge."""
    cases = edge_cases(path)
    for case_id, values in cases:
        if case_id.startswith("all-partial:"):
            return case_id, values
    for case_id, values in cases:
        dim, _, n = case_id.partition("=")
        if dim in SPECS[path].tiles and n.isdigit() and "," not in case_id:
            return case_id, values
    return cases[0]


def all_cases(programs: bool = True) -> list[Case]:
    """Every case, in a fixed order (examples, then test programs)."""
    out = []
    for path in sorted(SPECS, key=lambda p: (not p.startswith("examples/"), p)):
        if not programs and not path.startswith("examples/"):
            continue
        caps = CAPS.get(path, {})
        note = "the file's defaults" + (f", capped at {', '.join(f'{k}={v}' for k, v in caps.items())}" if caps else "")
        edge_id, edge_values = _edge(path)
        stages = (0, 1) if path in CLUSTER else (None,)
        for stage in stages:
            extra = {} if stage is None else {"STAGE": stage}
            suffix = "" if not stage else f",STAGE={stage}"
            out.append(_case(path, "default" + suffix, {**caps, **extra}, note))
            out.append(_case(path, "edge" + suffix, {**edge_values, **extra}, f"tests/edge_shapes.py {edge_id}"))
    return out


def select(cases: list[Case], only: list[str] | None = None, shard: str | None = None, tool: str = "memcheck",
           target: str = "tilelang", timings: dict | None = None) -> list[Case]:
    """The cases named by `only` (file stems or case ids, shell patterns) in shard `shard` ("I/N":
    N shards of about equal estimated time)."""
    if only:
        cases = [c for c in cases if any(fnmatch.fnmatch(c.id if ":" in p else c.name, p) for p in only)]
    if shard:
        index, count = (int(x) for x in shard.split("/"))
        if not 1 <= index <= count:
            raise SystemExit(f"--shard {shard}: want I/N with 1 <= I <= N")
        loads = [0.0] * count
        owner = {}
        for c in sorted(cases, key=lambda c: -case_estimate(c, tool, target, timings)):
            k = loads.index(min(loads))
            loads[k] += case_estimate(c, tool, target, timings)
            owner[c.id] = k
        cases = [c for c in cases if owner[c.id] == index - 1]
    return cases


def case_estimate(case: Case, tool: str, target: str, timings: dict | None = None) -> float:
    measured = (timings or {}).get(f"{tool}/{target}", {}).get(case.id)
    if measured is not None:
        return float(measured)
    return CASE_S[target] * TOOL_FACTOR[tool] + PER_MB_S[tool] * case.mbytes


def batch_estimate(cases: list[Case], tool: str, target: str, jobs: int, timings: dict | None = None,
                   precompile: bool = True) -> tuple[float, float, float]:
    """(sanitizer start, the cases, a cold precompile) in seconds."""
    run = sum(case_estimate(c, tool, target, timings) for c in cases)
    cold = COMPILE_S * -(-len(cases) // max(1, jobs)) if precompile else 0.0
    return START_S[tool], run, cold


# ---- compiling and launching one case (the worker) ------------------------------------------------


def _one_line(exc: BaseException) -> str:
    from dsl.diagnostics import TkError

    if isinstance(exc, TkError):
        return exc.render().splitlines()[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".strip()


def _located(exc: BaseException) -> bool:
    """A user-facing rejection at a place in the source (not e.g. `needs a CUDA GPU`)."""
    from dsl.diagnostics import TkError

    return isinstance(exc, TkError) and any(d.loc.line > 0 for d in exc.diagnostics)


def build(case: Case, target: str):
    """(kernel, module, kernel names): compile and load `case` (from the cache when filled);
    raises what the compile raises."""
    import tkc
    from tkc import driver
    from test_gpu_quick import _consts, _dims  # the quick tier's split of a case's values

    full = os.path.join(ROOT, case.path)
    module = driver.frontend(full, case.values)
    kernel = tkc.compile(full, target=target, **_consts(case.path, case.values))
    artifact, jit = kernel.specialize(_dims(case.path, case.values))
    sym = module.func.attrs.get("sym_name", case.name)
    names = {sym, f"{sym}_kernel"}
    for attr in ("name", "dot_kernel", "tc_kernel"):  # a `cuda` launch (tkc/cuda_runtime.py)
        if getattr(jit, attr, None):
            names.add(getattr(jit, attr))
    if getattr(jit, "transpose", None):
        names.add(jit.transpose[0])
    return kernel, module, sorted(names)


def launch(case: Case, kernel, module, device: str = "cuda") -> tuple[bool, str]:
    """Run `case` once on fresh, exactly sized device tensors; (passed, what was measured). The
    inputs and the float64 reference are made on the CPU."""
    import torch

    from tkc import oracle

    dist = SPECS[case.path].dists[0]
    cpu = oracle.random_inputs(module, 0, "cpu", dist)
    refs = oracle.reference(module, cpu)
    dev = [t if isinstance(t, int) else t.to(device) for t in cpu]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    outs = kernel(*dev)
    sync()
    outs = outs if isinstance(outs, tuple) else (outs,)
    if len(outs) != len(refs):
        return False, f"{len(outs)} outputs, the reference has {len(refs)}"
    budgets = oracle.error_budgets(module)
    ok, parts = True, []
    for (name, dtype), out, ref in zip(oracle.outputs(module), outs, refs):
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        good = err <= tol  # False for NaN
        ok = ok and good
        parts.append(f"{name} rel_error {err:.3e} {'<=' if good else '>'} tol {tol:.3e}")
    return ok, f"{dist}: " + "; ".join(parts)


def worker(case_file: str, target: str) -> int:
    """Inside the sanitizer: load every case's kernel, then launch the cases between markers."""
    import torch

    def say(text: str) -> None:
        print(text, flush=True)

    with open(case_file, encoding="utf-8") as f:
        cases = [Case(**c) for c in json.load(f)]
    if not torch.cuda.is_available():
        say("@@ FATAL CUDA is not available (torch.cuda.is_available() is False)")
        return 2
    say(f"@@ WORKER {len(cases)} cases through `{target}` on {torch.cuda.get_device_name()}")
    built, failed = [], 0
    for case in cases:
        t0 = time.time()
        if case.error:
            say(f"@@ RESULT {case.id} FAIL setup: {case.error}")
            failed += 1
            continue
        try:
            kernel, module, names = build(case, target)
        except Exception as exc:  # noqa: BLE001 (one case's failure, the batch goes on)
            if _located(exc):
                say(f"@@ RESULT {case.id} SKIP {target} rejects it: {_one_line(exc)}")
            else:
                say(f"@@ RESULT {case.id} FAIL compile: {_one_line(exc)}")
                failed += 1
            continue
        say(f"@@ BUILT {case.id} kernels={','.join(names)} ({time.time() - t0:.1f} s)")
        built.append((case, kernel, module))
    for case, kernel, module in built:
        say(f"@@ BEGIN {case.id}")
        t0 = time.time()
        try:
            ok, detail = launch(case, kernel, module)
        except Exception as exc:  # noqa: BLE001
            ok, detail = False, f"launch: {_one_line(exc)}"
        failed += not ok
        say(f"@@ END {case.id} {'PASS' if ok else 'FAIL'} {detail} ({time.time() - t0:.1f} s)")
    say("@@ WORKER DONE")
    return 3 if failed else 0


# ---- reading the sanitizer's output -----------------------------------------------------------------

_MARK = re.compile(r"^@@ (BUILT|BEGIN|END|RESULT) (\S+)(?: (.*))?$")
_SUMMARY = re.compile(r"(ERROR|RACECHECK|LEAK) SUMMARY: (\d+)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Finding:
    case: str | None  # the case being launched (or the last one launched) when it was printed
    where: str  # "launch", "after" (printed after the case's end marker), "build" (while loading)
    head: str  # the report's first line
    lines: list[str] = field(default_factory=list)
    examples: set[str] = field(default_factory=set)  # examples declaring a kernel the report names


@dataclass
class Parsed:
    results: dict[str, tuple[str, str]] = field(default_factory=dict)  # case id -> (PASS|FAIL|SKIP, detail)
    findings: list[Finding] = field(default_factory=list)
    summary: dict[str, int] = field(default_factory=dict)  # "ERROR"/"RACECHECK" -> count
    in_progress: str | None = None  # a case begun and never ended (a crash or a timeout)
    done: bool = False  # the worker got to its end


class OutputParser:
    """Feed the sanitizer's combined output line by line; `parsed` says what it found."""

    def __init__(self):
        self.parsed = Parsed()
        self.names: dict[str, str] = {}  # kernel name -> example
        self.current: str | None = None
        self.last: str | None = None
        self.finding: Finding | None = None

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        p = self.parsed
        m = _MARK.match(line)
        if m:
            self.finding = None
            kind, case_id, rest = m.group(1), m.group(2), m.group(3) or ""
            if kind == "BUILT":
                names = rest.split(" ", 1)[0].removeprefix("kernels=")
                for n in filter(None, names.split(",")):
                    self.names[n] = case_id.split(":", 1)[0]
            elif kind == "BEGIN":
                self.current = p.in_progress = case_id
            elif kind == "END":
                status, _, detail = rest.partition(" ")
                p.results[case_id] = (status, detail)
                self.current, self.last, p.in_progress = None, case_id, None
            else:
                status, _, detail = rest.partition(" ")
                p.results[case_id] = (status, detail)
            return
        if line.startswith("@@ WORKER DONE"):
            p.done = True
            return
        if not line.startswith("========="):
            return
        body = line[len("========="):]
        if body.startswith("  ") and self.finding is not None:  # a report's continuation
            text = body.strip()
            self.finding.lines.append(text)
            # the device frames name the kernel; host frames are not read (they could hold torch's
            # `reduce_kernel`, which is not tests/programs/reduce.tk's)
            if text.startswith(("at ", "and ")):
                self.finding.examples |= {self.names[t] for t in _IDENT.findall(text) if t in self.names}
            return
        body = body.strip()
        s = _SUMMARY.search(body)
        if s:
            p.summary[s.group(1)] = int(s.group(2))
            self.finding = None
            return
        if not body or body.startswith("COMPUTE-SANITIZER") or body.startswith("Target application returned"):
            self.finding = None
            return
        case, where = (self.current, "launch") if self.current else (self.last, "after") if self.last else (None, "build")
        self.finding = Finding(case, where, body, [body], {self.names[t] for t in _IDENT.findall(body) if t in self.names})
        p.findings.append(self.finding)


def parse_output(text: str) -> Parsed:
    parser = OutputParser()
    for line in text.splitlines():
        parser.feed(line)
    return parser.parsed


# ---- one batch --------------------------------------------------------------------------------------


class SetupError(RuntimeError):
    """The batch cannot run here (no CUDA, no compute-sanitizer)."""


@dataclass
class Batch:
    tool: str
    target: str
    cases: list[Case]
    parsed: Parsed
    returncode: int | None
    seconds: float
    timed_out: bool = False
    times: dict[str, float] = field(default_factory=dict)  # case id -> seconds between its markers
    tail: list[str] = field(default_factory=list)  # the output's last lines

    @property
    def failed(self) -> list[str]:
        return [c.id for c in self.cases if self.parsed.results.get(c.id, ("",))[0] == "FAIL"]

    @property
    def missing(self) -> list[str]:
        return [c.id for c in self.cases if c.id not in self.parsed.results]

    @property
    def skipped(self) -> list[str]:
        return [c.id for c in self.cases if self.parsed.results.get(c.id, ("",))[0] == "SKIP"]

    @property
    def summary_line(self) -> str:
        return "RACECHECK" if self.tool == "racecheck" else "ERROR"

    @property
    def finding_examples(self) -> list[str]:
        """The examples the reports point at (by position, and by the kernel names they print)."""
        names = set()
        for f in self.parsed.findings:  # the kernel names first: a report printed late still names its kernel
            names |= f.examples or ({f.case.split(":", 1)[0]} if f.case else {"<unknown>"})
        return sorted(names)

    @property
    def ok(self) -> bool:
        return (not self.failed and not self.missing and not self.parsed.findings and not self.timed_out
                and self.parsed.summary.get(self.summary_line) == 0 and self.returncode == 0)

    def report(self) -> str:
        p = self.parsed
        passed = sum(1 for c in self.cases if p.results.get(c.id, ("",))[0] == "PASS")
        count = p.summary.get(self.summary_line)
        what = "hazards" if self.tool == "racecheck" else "errors"
        lines = [f"@@ SUMMARY {self.tool} / {self.target}: {len(self.cases)} cases: {passed} passed, "
                 f"{len(self.skipped)} skipped, {len(self.failed)} failed, {len(self.missing)} without a result; "
                 f"{len(p.findings)} sanitizer reports"
                 + (f" in {', '.join(self.finding_examples)}" if p.findings else "")
                 + f"; {self.summary_line} SUMMARY: {'missing' if count is None else count} {what}; "
                 f"exit {self.returncode}{' (timed out)' if self.timed_out else ''}; {self.seconds:.0f} s; "
                 f"{'CLEAN' if self.ok else 'NOT CLEAN'}"]
        for cid in self.failed:
            lines.append(f"FAIL    {cid}: {p.results[cid][1]}")
        for cid in self.missing:
            why = "in progress when the process ended" if cid == p.in_progress else "not reached"
            lines.append(f"MISSING {cid}: {why}")
        by_case: dict[tuple, list[Finding]] = {}
        for f in p.findings:
            by_case.setdefault((f.case, f.where), []).append(f)
        for (cid, where), fs in by_case.items():
            heads: dict[str, int] = {}
            for f in fs:
                heads[f.head] = heads.get(f.head, 0) + 1
            kernels = sorted(set().union(*(f.examples for f in fs)))
            at = {"launch": "", "after": " (printed after its end marker)", "build": " (while loading the kernels)"}[where]
            lines.append(f"FINDING {cid or '<before any launch>'}{at}; kernels of: {', '.join(kernels) or '?'}: "
                         + "; ".join(f"{h} (x{n})" for h, n in heads.items()))
            lines.extend(f"        {x}" for x in fs[0].lines[1:6])
        for cid in self.skipped:
            lines.append(f"SKIP    {cid}: {p.results[cid][1]}")
        if not self.ok and not self.failed and not p.findings or self.missing:  # say what else went wrong
            lines.append("last lines of the sanitizer's output:")
            lines.extend(f"        {x}" for x in self.tail[-40:])
        return "\n".join(lines)


def _precompile_one(target: str, path: str, values: dict, cache_dir: str | None) -> str:
    """Worker process: compile one case into the shared cache (errors are the batch's to report)."""
    try:
        import tkc
        from test_gpu_quick import _consts, _dims

        kernel = tkc.compile(os.path.join(ROOT, path), target=target, cache_dir=cache_dir, **_consts(path, values))
        kernel.specialize(_dims(path, values))
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return _one_line(exc)


_PRECOMPILED: set[tuple] = set()  # (target, cache root, case id) compiled by this process's pools


def precompile(cases: list[Case], target: str, jobs: int, echo=print) -> None:
    """Fill the cache with every case's kernel, in `jobs` spawned processes (never fork a process
    holding a CUDA context)."""
    import concurrent.futures as cf
    import multiprocessing

    cache_dir = os.environ.get("TKC_CACHE_DIR")
    todo = [c for c in cases if not c.error and (target, cache_dir, c.id) not in _PRECOMPILED]
    if not todo:
        return
    t0 = time.time()
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo))), mp_context=ctx) as pool:
        results = list(pool.map(_precompile_one, [target] * len(todo), [c.path for c in todo],
                                [c.values for c in todo], [cache_dir] * len(todo)))
    bad = sum(r != "ok" for r in results)
    _PRECOMPILED.update((target, cache_dir, c.id) for c in todo)
    echo(f"@@ PRECOMPILED {len(todo)} kernels through `{target}` in {time.time() - t0:.0f} s "
         f"({bad} did not compile; the sanitized run reports them)")


def run_batch(tool: str, target: str, cases: list[Case], sanitizer: str | None = None, jobs: int | None = None,
              precompile_first: bool = True, timeout: float | None = None, extra_args: tuple[str, ...] = (),
              echo=print) -> Batch:
    """Run one batch (see the module docstring); `echo` gets every output line as it comes."""
    import torch

    if tool not in TOOLS or target not in TARGETS:
        raise SetupError(f"unknown tool or target: {tool}, {target}")
    sanitizer = sanitizer or shutil.which("compute-sanitizer")
    if sanitizer is None:
        raise SetupError("compute-sanitizer is not on PATH (it ships with the CUDA toolkit: "
                         "/usr/local/cuda/bin/compute-sanitizer)")
    if not torch.cuda.is_available():
        raise SetupError("CUDA is not available here (torch.cuda.is_available() is False): "
                         "run the batch on the GPU machine")
    jobs = jobs or max(1, min(14, (os.cpu_count() or 2) - 2))
    t_start = time.time()
    if precompile_first:
        precompile(cases, target, jobs, echo)
    fd, case_file = tempfile.mkstemp(prefix="tkc-sanitize-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump([asdict(c) for c in cases], f)
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "5", "--destroy-on-device-error", "kernel", *extra_args,
           sys.executable, os.path.abspath(__file__), "--worker", case_file, "--target", target]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if tool == "memcheck":
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    echo("@@ RUN " + " ".join(cmd))
    parser = OutputParser()
    times, begun = {}, {}
    tail: collections.deque = collections.deque(maxlen=200)
    timed_out = False
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                            cwd=ROOT, start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:  # a thread, so that a silent process cannot hold up the timeout
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            left = None if timeout is None else timeout - (time.time() - t_start)
            if left is not None and left <= 0:
                timed_out = True
                break
            try:
                line = lines.get(timeout=None if left is None else min(left, 5.0))
            except queue.Empty:
                continue
            if line is None:
                break
            line = line.rstrip("\n")
            echo(line)
            tail.append(line)
            parser.feed(line)
            m = _MARK.match(line)
            if m and m.group(1) == "BEGIN":
                begun[m.group(2)] = time.time()
            elif m and m.group(1) == "END" and m.group(2) in begun:
                times[m.group(2)] = round(time.time() - begun[m.group(2)], 2)
    except BaseException:
        os.killpg(proc.pid, 9)  # the sanitizer and the worker it started (their own session)
        raise
    finally:
        if timed_out:
            os.killpg(proc.pid, 9)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.unlink(case_file)
    echo(f"@@ SANITIZED RUN {time.time() - t0:.0f} s")
    return Batch(tool, target, cases, parser.parsed, proc.returncode, time.time() - t_start, timed_out, times, list(tail))


# ---- command line ----------------------------------------------------------------------------------


def _load_timings(path: str | None) -> dict:
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {}


def _codegen_only(cases: list[Case], target: str) -> int:
    """Generate every case's source (no GPU needed): which cases the backend rejects."""
    from tkc import driver
    from tkc.cache import Cache

    cache = Cache(os.environ.get("TKC_CACHE_DIR") or tempfile.mkdtemp(prefix="tkc-sanitize-cache-"))
    bad = 0
    for c in cases:
        if c.error:
            print(f"FAIL {c.id}: setup: {c.error}")
            bad += 1
            continue
        try:
            driver.compile_file(os.path.join(ROOT, c.path), target, c.values, cache)
            print(f"ok   {c.id}")
        except Exception as exc:  # noqa: BLE001
            if _located(exc):
                print(f"SKIP {c.id}: {target} rejects it: {_one_line(exc)}")
            else:
                print(f"FAIL {c.id}: {_one_line(exc)}")
                bad += 1
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", choices=TOOLS, default="memcheck")
    ap.add_argument("--target", choices=TARGETS, default="tilelang")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="file stems (matmul, miss*) or case ids (miss:edge:*), shell patterns")
    ap.add_argument("--shard", metavar="I/N", help="the I-th of N parts of about equal estimated time")
    ap.add_argument("--examples-only", action="store_true", help="leave out tests/programs/*.tk")
    ap.add_argument("--list", action="store_true", help="print the cases and the time estimate, run nothing")
    ap.add_argument("--codegen-only", action="store_true",
                    help="generate every case's source (CPU only): which cases the backend rejects")
    ap.add_argument("--no-precompile", action="store_true", help="compile inside the sanitized process only")
    ap.add_argument("--jobs", type=int, default=None, help="compile processes (default: cores - 2, at most 14)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds for the whole batch (then killed)")
    ap.add_argument("--timings", metavar="FILE",
                    help="JSON of measured seconds per case: read for the estimate, updated after the run")
    ap.add_argument("--sanitizer", default=None, help="compute-sanitizer's path (default: on PATH)")
    ap.add_argument("--sanitizer-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for compute-sanitizer (repeatable)")
    ap.add_argument("--worker", metavar="CASES_JSON", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        return worker(args.worker, args.target)
    timings = _load_timings(args.timings)
    cases = select(all_cases(not args.examples_only), args.only, args.shard, args.tool, args.target, timings)
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2
    jobs = args.jobs or max(1, min(14, (os.cpu_count() or 2) - 2))
    start, run, cold = batch_estimate(cases, args.tool, args.target, jobs, timings, not args.no_precompile)
    estimate = (f"@@ ESTIMATE {args.tool} / {args.target}: {len(cases)} cases, about {start + run:.0f} s sanitized "
                f"({start:.0f} s start, {run:.0f} s of cases), plus up to {cold:.0f} s of compiling when the kernel "
                f"cache is cold ({jobs} processes); rough until --timings holds measured case times")
    if args.list or args.codegen_only:
        for c in cases:
            extra = f"  !! {c.error}" if c.error else ""
            print(f"{c.id}  [{c.note}; {c.mbytes:.2f} MB; ~{case_estimate(c, args.tool, args.target, timings):.1f} s]"
                  f"{extra}")
        print(estimate)
        return _codegen_only(cases, args.target) if args.codegen_only else 0
    print(estimate, flush=True)
    try:
        batch = run_batch(args.tool, args.target, cases, args.sanitizer, jobs, not args.no_precompile, args.timeout,
                          tuple(args.sanitizer_arg), echo=lambda s: print(s, flush=True))
    except SetupError as exc:
        print(f"@@ CANNOT RUN: {exc}", file=sys.stderr)
        return 2
    if args.timings:
        timings.setdefault(f"{args.tool}/{args.target}", {}).update(batch.times)
        with open(args.timings, "w", encoding="utf-8") as f:
            json.dump(timings, f, indent=1, sort_keys=True)
    print(batch.report(), flush=True)
    return 0 if batch.ok else 1


if __name__ == "__main__":
    sys.exit(main())

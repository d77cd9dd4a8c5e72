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

How a batch runs: (1) every kernel is compiled outside the sanitizer, in `--jobs` compile processes
(this file with `--compile-worker`, each in its own process group) that fill tkc's cache
(`TKC_CACHE_DIR`, TileLang's and nvcc's binaries included); one line per kernel as it finishes
(`@@ COMPILED [i/n] CASE ok|SKIP|FAIL SECONDS`), the compile's own warnings as `@@ NOTE CASE: ...`.
A kernel still compiling after `--compile-timeout` seconds (default 120) is killed with its
process group (nvcc, cicc, ptxas included), its case FAILs with the phase it was in and the
generated source, and the batch goes on in a fresh compile process; such a case is not compiled
again under the sanitizer (nor is one whose compile failed or was rejected: its result comes from
the precompile). Known slow compiles go first (`SLOW_COMPILES`, or the measured times of
`--timings`), so that their time overlaps the rest. `--precompile-only` stops here (one device
call warms the cache, the next sanitizes: the cache survives between calls on a warm machine).
(2) `compute-sanitizer --tool T --error-exitcode 5 --destroy-on-device-error kernel` runs this file
with `--worker`, which loads every kernel from the cache first, then launches the cases one after
another between `@@ BEGIN` / `@@ END` markers; (3) the sanitizer's output is read as it comes and
each report is charged to the case whose markers enclose it, and by the kernel name it names to
the example declaring that kernel. A sanitized process that prints nothing for `--stall-timeout`
seconds (default 300) is killed: the case it was loading or launching FAILs and a fresh sanitized
process goes on with the cases after it. memcheck runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so each
tensor is its own allocation and an access past its end is out of bounds for the tool (inside
torch's cached pool it would land in a neighbour). A (case, backend) whose compile ends in a
located diagnostic (TileLang cannot lay out some register tiles) is
skipped with the reason; any other compile or launch failure fails that case and the batch goes on.

Slow TileLang compiles (measured 2026-11-25 with TileLang 0.1.15's nvcc command for sm_90a, one
compile at a time on a loaded 2-core CPU): at their default shapes some examples get register
tiles that TileLang gives every thread whole rows of, e.g. rmsnorm (B=1, N=4096, 1024 threads):
six `float[4096]` arrays per thread behind `#pragma unroll` loops of 1024 float4 steps; nvcc's
cicc then takes 618 s. matmul_q8 (20 K elements a thread) more than 600 s, attention_split and
attention (17 K) 347 and 338 s, ffn_gate (8 K) 94 s, sgemm 21 s, every other case 2-7 s (and
TileLang's lowering before it 0.1-12 s). The quick tier never compiles them (it runs at the tile
edges); the first tilelang batches on the H100 (pool.map over every kernel, no per-kernel limit
or progress) waited on them for over 330 s without a line.

TileLang's `[ThreadSync] Hoisting sync out of an if ... the race remains. Condition: thread_binding
% 4 * 4 + thread_binding // 32 == 0` (while compiling tests/programs/bf16_ops.tk, both shapes, the
only case that prints it) is about the store of the replicated register tile `a` into the shared
copy the gemm reads (`T.copy(a, t0)`: replica 0, 8 threads, writes the 16 x 32 tile). The 8
threads x 8 swizzled 16-byte stores cover the 512 elements exactly once (checked by enumerating
the generated CUDA's indices), and a `__syncthreads()` separates them from the gemm's
`ldmatrix`: no race, the analysis cannot tell the threads' swizzled addresses apart.
`--tool racecheck --target tilelang --only bf16_ops` checks it on the GPU.

A batch passes when every case passes or is skipped, no report was printed, the tool's summary
says 0 (`ERROR SUMMARY: 0 errors`; racecheck `RACECHECK SUMMARY: 0 hazards`) and the sanitizer
exits 0. Usage (on the GPU machine; `--list` and `--codegen-only` run anywhere):

    python3 tests/gpu/sanitize_examples.py --tool memcheck --target cuda [--only NAME ...] [--shard 1/2]
    python3 tests/gpu/sanitize_examples.py --tool racecheck --target tilelang --list   # cases, time estimate
    python3 tests/gpu/sanitize_examples.py --target tilelang --precompile-only          # warm the cache only

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
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace

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
    "examples/matmul_q8_residual.tk": {"D": 512},
    "examples/rmsnorm_matmul_q8.tk": {"D": 512},
    "examples/rmsnorm_ffn_gate_q8.tk": {"H": 512},
    "examples/ffn_gate.tk": {"H": 512},  # W1, W3 11008 x 4096 f32: 360 MB
    "examples/rmsnorm_ffn_gate.tk": {"H": 512},
    "examples/qkv_rope.tk": {"D": 512, "KVD": 512},  # WQ, WK, WV 4096 x 4096 f32: 200 MB
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
COMPILE_S = 8.0  # one cold compile in a worker process (TileLang or nvcc), when --timings has none
COMPILE_TIMEOUT_S = 120.0  # one kernel's precompile, then it is killed and its case fails
STALL_S = 300.0  # a sanitized process silent this long is killed (its case fails, the rest go on)
START_TIMEOUT_S = 180.0  # a compile process's imports (torch, TileLang) before it takes a case
# Cases whose cold compile is known to be slow: seconds of nvcc alone as TileLang 0.1.15 calls it
# for sm_90a, one compile at a time on a loaded 2-core CPU (2026-11-25; the lowering before it takes
# 1-7 s). They are compiled first (--timings' measures take precedence), and the estimate counts
# them. The cause: TileLang gives every thread whole rows of these default-shape register tiles
# (see the module docstring).
SLOW_COMPILES: dict[str, dict[str, float]] = {
    "tilelang": {"rmsnorm:default:*": 618, "matmul_q8:default:*": 600,  # (killed at 600 s)
                 "attention_split:default:*": 347, "attention:default:*": 338, "ffn_gate:default:*": 94,
                 "sgemm:default:*": 21},  # every other case: 2-7 s
    "cuda": {},
}

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
    precompiled: str = ""  # "" (not precompiled), "ok", or "SKIP reason" / "FAIL reason" (then not built again)

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
           target: str = "tilelang", timings: dict | None = None, exclude: list[str] | None = None) -> list[Case]:
    """The cases named by `only` and not by `exclude` (file stems or case ids, shell patterns) in
    shard `shard` ("I/N": N shards of about equal estimated time)."""
    if only:
        cases = [c for c in cases if _matches(c, only)]
    if exclude:
        cases = [c for c in cases if not _matches(c, exclude)]
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


def _matches(case: Case, patterns) -> bool:
    return any(fnmatch.fnmatch(case.id if ":" in p else case.name, p) for p in patterns)


def compile_estimate(case: Case, target: str, timings: dict | None = None) -> float:
    """A cold compile of `case`: measured by an earlier --timings run (a compile killed at the
    timeout: unbounded), else SLOW_COMPILES' measure, else COMPILE_S."""
    timings = timings or {}
    measured = timings.get(f"compile/{target}", {}).get(case.id)
    if measured is not None:
        return float(measured)
    if case.id in timings.get(f"compile-timeout/{target}", {}):
        return float("inf")
    return next((float(t) for p, t in SLOW_COMPILES.get(target, {}).items() if _matches(case, (p,))), COMPILE_S)


def compile_order(cases: list[Case], target: str, timings: dict | None = None) -> list[Case]:
    """The precompile's order: the longest first, so that a slow kernel's compile overlaps the
    others instead of ending the batch (stable: the rest keep their order)."""
    return sorted(cases, key=lambda c: -compile_estimate(c, target, timings))


def batch_estimate(cases: list[Case], tool: str, target: str, jobs: int, timings: dict | None = None,
                   precompile: bool = True, compile_timeout: float = COMPILE_TIMEOUT_S) -> tuple[float, float, float]:
    """(sanitizer start, the cases, a cold precompile) in seconds; the precompile as `jobs`
    processes take the kernels longest first, each at most `compile_timeout`."""
    run = sum(case_estimate(c, tool, target, timings) for c in cases)
    cold = 0.0
    if precompile:
        loads = [0.0] * max(1, jobs)
        for c in compile_order(cases, target, timings):
            k = loads.index(min(loads))
            loads[k] += min(compile_timeout, compile_estimate(c, target, timings))
        cold = max(loads)
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
        if case.precompiled.startswith(("SKIP ", "FAIL ")):  # the precompile's verdict: not compiled again here
            status, _, why = case.precompiled.partition(" ")
            say(f"@@ RESULT {case.id} {status} {why}")
            failed += status == "FAIL"
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
    started: bool = False  # the worker printed its first line (it runs under the sanitizer)
    built: set[str] = field(default_factory=set)  # cases whose kernel the worker loaded


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
                p.built.add(case_id)
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
        if line.startswith(("@@ WORKER ", "@@ FATAL ")):
            p.started = True
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
    # the precompile's measures: (compiles that ended, compiles killed at the timeout), case id -> seconds
    compile_times: tuple = field(default_factory=lambda: ({}, {}))
    restarts: list[str] = field(default_factory=list)  # cases after whose stall a fresh sanitized process went on

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
                 f"exit {self.returncode}{' (timed out)' if self.timed_out else ''}"
                 + (f"; {len(self.restarts)} sanitized processes killed for a stall" if self.restarts else "")
                 + f"; {self.seconds:.0f} s; "
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


# ---- the precompile ----------------------------------------------------------------------------------


def _protocol(obj: dict) -> None:
    """One line of a compile process's answer (anything else it prints is the compile's notes)."""
    sys.stdout.write("@@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def compile_worker(target: str) -> int:
    """A compile process (`--compile-worker`): compile the cases read from stdin, one JSON object
    ({"id", "path", "values", "cache_dir"}) a line, into the cache; answer {"ready"} once imported,
    {"phase": "backend", "source"} when tkc's source is generated and the backend (TileLang's
    lowering and nvcc, or nvcc) starts, and {"done", "status", "detail", "seconds"} per case."""
    import tkc
    from tkc import driver
    from tkc.cache import Cache
    from test_gpu_quick import _consts, _dims

    if target == "tilelang":  # TileLang's import is paid before the first case's clock starts
        from tkc.runtime import _tilelang  # (through tkc: it puts TileLang's cache inside tkc's)

        _tilelang(Cache(os.environ.get("TKC_CACHE_DIR") or None))
    original = driver.compile_file

    def traced(*args, **kwargs):  # the generated source's path, for a compile that never ends
        artifact = original(*args, **kwargs)
        _protocol({"phase": "backend", "source": artifact.source_path})
        return artifact

    driver.compile_file = traced  # tkc/runtime.py calls it as `driver.compile_file`
    _protocol({"ready": os.getpid()})
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        job = json.loads(line)
        t0 = time.time()
        try:
            path = os.path.join(ROOT, job["path"])
            kernel = tkc.compile(path, target=target, cache_dir=job["cache_dir"], **_consts(job["path"], job["values"]))
            kernel.specialize(_dims(job["path"], job["values"]))
            status, detail = "ok", ""
        except Exception as exc:  # noqa: BLE001 (one case's failure, reported by the batch)
            status, detail = ("SKIP", f"{target} rejects it: {_one_line(exc)}") if _located(exc) else \
                ("FAIL", f"compile: {_one_line(exc)}")
        _protocol({"done": job["id"], "status": status, "detail": detail, "seconds": round(time.time() - t0, 2)})


class _Compiler:
    """One compile process, in its own process group (a kill takes nvcc, cicc and ptxas with it);
    its output (stderr too) is read by a thread, so that a silent process cannot hold the caller."""

    def __init__(self, target: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, os.path.abspath(__file__), "--compile-worker", "--target", target]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1, env=env, cwd=ROOT, start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.tail: collections.deque = collections.deque(maxlen=20)  # its last lines, for a death's report
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for text in self.proc.stdout:
            self.lines.put(text.rstrip("\n"))
        self.lines.put(None)

    def next(self, until: float) -> dict | str | None:
        """The next line (a protocol line as a dict), None at the end of its output, TimeoutError
        past `until` (time.time())."""
        left = until - time.time()
        if left <= 0:
            raise TimeoutError
        try:
            line = self.lines.get(timeout=left)
        except queue.Empty:
            raise TimeoutError from None
        if line is None:
            return None
        if line.startswith("@@ {"):
            try:
                return json.loads(line[3:])
            except ValueError:
                pass
        self.tail.append(line)
        return line

    def send(self, job: dict) -> None:
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()  # whatever it left behind in its group


# (target, cache root, case path, case id) -> (status, detail, seconds) of this process's precompiles
_PRECOMPILED: dict[tuple, tuple[str, str, float]] = {}


def precompile(cases: list[Case], target: str, jobs: int, echo=print, compile_timeout: float = COMPILE_TIMEOUT_S,
               deadline: float | None = None, timings: dict | None = None) -> dict[str, tuple[str, str, float]]:
    """Fill the cache with every case's kernel in `jobs` compile processes; case id -> (status
    "ok" | "SKIP" | "FAIL", the reason, seconds). One line per kernel as it ends; a kernel past
    `compile_timeout` seconds (or past `deadline`, time.time()) is killed with its process and
    FAILs, and a fresh process takes the next case. Cases compiled before by this process (an
    earlier batch of the same target and cache) are not compiled again."""
    cache_dir = os.environ.get("TKC_CACHE_DIR")
    key = lambda c: (target, cache_dir, c.path, c.id)  # noqa: E731
    results = {c.id: _PRECOMPILED[key(c)] for c in cases if key(c) in _PRECOMPILED}
    timed_out = (timings or {}).get(f"compile-timeout/{target}", {})
    for c in cases:  # timed out before (--timings) at this limit or above: not tried again
        if not c.error and c.id not in results and timed_out.get(c.id, 0.0) >= compile_timeout:
            results[c.id] = ("FAIL", f"compile: timed out after {timed_out[c.id]:.0f} s in an earlier precompile "
                             f"(--timings); tried again with --compile-timeout above that", 0.0)
            echo(f"@@ COMPILED {c.id} FAIL (not tried): {results[c.id][1]}")
    todo = collections.deque(compile_order([c for c in cases if not c.error and c.id not in results], target, timings))
    if not todo:
        return results
    t_start, total = time.time(), len(todo)
    jobs = max(1, min(jobs, total))
    lock, stop = threading.Lock(), threading.Event()
    live: set[_Compiler] = set()
    count = [0]
    slow = [c.id for c in todo if compile_estimate(c, target, timings) > COMPILE_S]
    echo(f"@@ PRECOMPILE {total} kernels through `{target}` in {jobs} processes, at most {compile_timeout:.0f} s "
         f"each (slow ones first: {', '.join(slow) or 'none known'})")

    def finish(case: Case, status: str, detail: str, seconds: float) -> None:
        with lock:
            results[case.id] = _PRECOMPILED[key(case)] = (status, detail, round(seconds, 2))
            count[0] += 1
            echo(f"@@ COMPILED [{count[0]}/{total}] {case.id} {status} {seconds:.1f} s"
                 + (f": {detail}" if detail else ""))

    def slot() -> None:
        worker: _Compiler | None = None
        try:
            limit = deadline if deadline is not None else float("inf")
            while not stop.is_set() and time.time() < limit:  # (past the deadline the rest stay in `todo`)
                with lock:
                    if not todo:
                        return
                    case = todo.popleft()
                if worker is None:
                    worker = _Compiler(target)
                    with lock:
                        live.add(worker)
                    try:
                        started = min(limit, time.time() + START_TIMEOUT_S)
                        while not isinstance(msg := worker.next(started), dict) or "ready" not in msg:
                            if msg is None:
                                raise EOFError
                    except (TimeoutError, EOFError) as exc:
                        worker.kill()
                        why = "did not start in time" if isinstance(exc, TimeoutError) else \
                            f"exited with {worker.proc.returncode} before its first case"
                        finish(case, "FAIL", f"compile: the compile process {why}: "
                               + " | ".join(list(worker.tail)[-3:]), 0.0)
                        with lock:
                            live.discard(worker)
                        worker = None
                        continue
                t0 = time.time()
                worker.send({"id": case.id, "path": case.path, "values": case.values, "cache_dir": cache_dir})
                phase, source = "tkc's codegen", ""
                until = min(limit, t0 + compile_timeout)
                try:
                    while True:
                        msg = worker.next(until)
                        if msg is None:
                            raise EOFError
                        if isinstance(msg, str):
                            if msg.strip():
                                echo(f"@@ NOTE {case.id}: {msg[:400]}")
                        elif msg.get("phase") == "backend":
                            phase = "TileLang's lowering and nvcc" if target == "tilelang" else "nvcc"
                            source = msg.get("source", "")
                        elif msg.get("done") == case.id:
                            finish(case, msg["status"], msg["detail"], time.time() - t0)
                            break
                except (TimeoutError, EOFError) as exc:
                    worker.kill()
                    seconds = time.time() - t0
                    if isinstance(exc, EOFError):
                        why = f"the compile process died (exit {worker.proc.returncode}) in {phase}: " + \
                            " | ".join(list(worker.tail)[-3:])
                    elif until < t0 + compile_timeout:
                        why = f"not finished at the batch's --timeout, in {phase}"
                    else:
                        why = f"timed out after {compile_timeout:.0f} s in {phase}"
                    finish(case, "FAIL", f"compile: {why}" + (f" (generated source: {source})" if source else ""),
                           seconds)
                    with lock:
                        live.discard(worker)
                    worker = None
        finally:
            if worker is not None:
                worker.close()
                with lock:
                    live.discard(worker)

    threads = [threading.Thread(target=slot, daemon=True) for _ in range(jobs)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except BaseException:
        stop.set()
        with lock:
            for w in list(live):
                w.kill()
        raise
    for c in list(todo):  # left when the deadline passed
        finish(c, "FAIL", "compile: not started before the batch's --timeout", 0.0)
    bad = [r for r in results.values() if r[0] == "FAIL"]
    timed = sum("timed out after" in r[1] for r in bad)
    echo(f"@@ PRECOMPILED {len(results)} cases through `{target}` ({total} compiled now) in "
         f"{time.time() - t_start:.0f} s: "
         f"{sum(r[0] == 'ok' for r in results.values())} ok, {sum(r[0] == 'SKIP' for r in results.values())} skipped, "
         f"{len(bad)} failed ({timed} timed out); failed and skipped cases are not compiled again under the sanitizer")
    return results


def _compile_times(results: dict[str, tuple[str, str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """What a precompile measured, for the next one's estimate, order and skips: (seconds of the
    compiles that ended, ok or rejected; seconds at which the timed out ones were killed)."""
    ended = {cid: r[2] for cid, r in results.items() if r[0] != "FAIL"}
    killed = {cid: r[2] for cid, r in results.items() if r[0] == "FAIL" and "timed out after" in r[1] and r[2] > 0}
    return ended, killed


# ---- the sanitized processes ----------------------------------------------------------------------


@dataclass
class _Run:
    """One sanitized process."""
    parsed: Parsed
    returncode: int | None
    timed_out: bool  # the batch's --timeout
    stalled: str | None  # why it was killed for a stall, or None
    culprit: str | None  # the case it was loading or launching when it stalled
    times: dict[str, float]
    tail: list[str]


def _sanitized_run(cmd: list[str], env: dict, cases: list[Case], echo, deadline: float | None,
                   stall_timeout: float) -> _Run:
    parser = OutputParser()
    times, begun = {}, {}
    tail: collections.deque = collections.deque(maxlen=200)
    timed_out, stalled = False, None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                            cwd=ROOT, start_new_session=True)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:  # a thread, so that a silent process cannot hold up the timeout
        for text in proc.stdout:
            lines.put(text)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    last = time.time()
    try:
        while True:
            now = time.time()
            if deadline is not None and now >= deadline:
                timed_out = True
                break
            if now - last >= stall_timeout:
                stalled = f"no output for {stall_timeout:.0f} s"
                break
            wait = min(5.0, stall_timeout - (now - last), float("inf") if deadline is None else deadline - now)
            try:
                line = lines.get(timeout=max(0.01, wait))
            except queue.Empty:
                continue
            if line is None:
                break
            last = time.time()
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
        os.killpg(proc.pid, signal.SIGKILL)  # the sanitizer and the worker it started (their own session)
        raise
    finally:
        if timed_out or stalled:
            os.killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    p, culprit = parser.parsed, None
    if stalled and p.started and not p.done:
        if p.in_progress:
            culprit, where = p.in_progress, "launching it"
        else:
            culprit = next((c.id for c in cases if c.id not in p.results and c.id not in p.built), None)
            where = "loading its kernel"
        if culprit:
            stalled += f" while {where}"
    return _Run(p, proc.returncode, timed_out, stalled, culprit, times, list(tail))


def run_batch(tool: str, target: str, cases: list[Case], sanitizer: str | None = None, jobs: int | None = None,
              precompile_first: bool = True, timeout: float | None = None, extra_args: tuple[str, ...] = (),
              echo=print, compile_timeout: float = COMPILE_TIMEOUT_S, stall_timeout: float = STALL_S,
              timings: dict | None = None) -> Batch:
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
    deadline = None if timeout is None else t_start + timeout
    compiled = {}
    if precompile_first:
        compiled = precompile(cases, target, jobs, echo, compile_timeout, deadline, timings)
        verdict = {cid: "ok" if status == "ok" else f"{status} {detail}"
                   for cid, (status, detail, _) in compiled.items()}
        cases = [replace(c, precompiled=verdict[c.id]) if c.id in verdict else c for c in cases]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if tool == "memcheck":
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    parsed, times, tail, restarts = Parsed(), {}, [], []
    returncode, timed_out = None, deadline is not None and time.time() >= deadline
    todo = list(cases)
    t0 = time.time()
    while todo and not timed_out:
        fd, case_file = tempfile.mkstemp(prefix="tkc-sanitize-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump([asdict(c) for c in todo], f)
        cmd = [sanitizer, "--tool", tool, "--error-exitcode", "5", "--destroy-on-device-error", "kernel", *extra_args,
               sys.executable, os.path.abspath(__file__), "--worker", case_file, "--target", target]
        echo("@@ RUN " + " ".join(cmd) + (f"  ({len(todo)} cases left)" if restarts else ""))
        try:
            run = _sanitized_run(cmd, env, todo, echo, deadline, stall_timeout)
        finally:
            os.unlink(case_file)
        parsed.results.update(run.parsed.results)
        parsed.findings += run.parsed.findings
        for k, v in run.parsed.summary.items():
            parsed.summary[k] = parsed.summary.get(k, 0) + v
        parsed.in_progress, parsed.done, parsed.started = run.parsed.in_progress, run.parsed.done, run.parsed.started
        parsed.built |= run.parsed.built
        times.update(run.times)
        tail = (tail + run.tail)[-200:]
        returncode = run.returncode  # the last process's (a killed one's case FAILs)
        timed_out = run.timed_out
        if not run.stalled:
            break
        echo(f"@@ STALL {run.stalled}: the sanitized process was killed"
             + (f"; {run.culprit} FAILs and a fresh one goes on with the cases after it" if run.culprit else ""))
        if not run.culprit:  # silent before its first case or after its last: nothing to go on with
            tail.append(f"(killed: {run.stalled})")
            break
        parsed.results[run.culprit] = ("FAIL", f"{run.stalled} under {tool}; the sanitized process was killed")
        parsed.in_progress = None
        restarts.append(run.culprit)
        todo = [c for c in todo if c.id not in parsed.results]
    echo(f"@@ SANITIZED RUN {time.time() - t0:.0f} s")
    return Batch(tool, target, cases, parsed, returncode, time.time() - t_start, timed_out, times, tail,
                 _compile_times(compiled), restarts)


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


def _save_timings(path: str | None, timings: dict, target: str, compiled: tuple[dict, dict],
                  runs: tuple[str, dict[str, float]] | None = None) -> None:
    """Add a batch's measured times to the --timings file: compiles that ended, compiles killed
    at the timeout (until one ends), and the cases' sanitized runs."""
    if not path:
        return
    ended, killed = compiled
    cold = timings.setdefault(f"compile/{target}", {})
    for cid, seconds in ended.items():  # the longest seen: a cold compile's, not a cache hit's
        cold[cid] = max(seconds, cold.get(cid, 0.0))
    timeouts = timings.setdefault(f"compile-timeout/{target}", {})
    timeouts.update(killed)
    for cid in ended:
        timeouts.pop(cid, None)
    if runs:
        timings.setdefault(runs[0], {}).update(runs[1])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(timings, f, indent=1, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", choices=TOOLS, default="memcheck")
    ap.add_argument("--target", choices=TARGETS, default="tilelang")
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="file stems (matmul, miss*) or case ids (miss:edge:*), shell patterns")
    ap.add_argument("--exclude", nargs="+", metavar="NAME", help="leave these out (as --only names them)")
    ap.add_argument("--shard", metavar="I/N", help="the I-th of N parts of about equal estimated time")
    ap.add_argument("--examples-only", action="store_true", help="leave out tests/programs/*.tk")
    ap.add_argument("--list", action="store_true", help="print the cases and the time estimate, run nothing")
    ap.add_argument("--codegen-only", action="store_true",
                    help="generate every case's source (CPU only): which cases the backend rejects")
    ap.add_argument("--precompile-only", action="store_true",
                    help="compile every case into the cache and stop (no sanitizer): warm the cache in one call, "
                         "sanitize in the next; exit 1 when a case failed to compile")
    ap.add_argument("--no-precompile", action="store_true", help="compile inside the sanitized process only")
    ap.add_argument("--jobs", type=int, default=None, help="compile processes (default: cores - 2, at most 14)")
    ap.add_argument("--compile-timeout", type=float, default=COMPILE_TIMEOUT_S, metavar="S",
                    help=f"seconds for one kernel's precompile, then it is killed and its case fails "
                         f"(default {COMPILE_TIMEOUT_S:.0f})")
    ap.add_argument("--stall-timeout", type=float, default=STALL_S, metavar="S",
                    help=f"seconds without output after which a sanitized process is killed, its case fails and a "
                         f"fresh one goes on (default {STALL_S:.0f})")
    ap.add_argument("--timeout", type=float, default=None, help="seconds for the whole batch (then killed)")
    ap.add_argument("--timings", metavar="FILE",
                    help="JSON of measured seconds per case (runs and compiles): read for the estimate and the "
                         "compile order, updated after the run")
    ap.add_argument("--sanitizer", default=None, help="compute-sanitizer's path (default: on PATH)")
    ap.add_argument("--sanitizer-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for compute-sanitizer (repeatable)")
    ap.add_argument("--worker", metavar="CASES_JSON", help=argparse.SUPPRESS)
    ap.add_argument("--compile-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        return worker(args.worker, args.target)
    if args.compile_worker:
        return compile_worker(args.target)
    timings = _load_timings(args.timings)
    cases = select(all_cases(not args.examples_only), args.only, args.shard, args.tool, args.target, timings,
                   args.exclude)
    if not cases:
        print("no case selected", file=sys.stderr)
        return 2
    jobs = args.jobs or max(1, min(14, (os.cpu_count() or 2) - 2))
    start, run, cold = batch_estimate(cases, args.tool, args.target, jobs, timings, not args.no_precompile,
                                      args.compile_timeout)
    estimate = (f"@@ ESTIMATE {args.tool} / {args.target}: {len(cases)} cases, about {start + run:.0f} s sanitized "
                f"({start:.0f} s start, {run:.0f} s of cases), plus up to {cold:.0f} s of compiling when the kernel "
                f"cache is cold ({jobs} processes, at most {args.compile_timeout:.0f} s a kernel); rough until "
                f"--timings holds measured times")
    if args.list or args.codegen_only:
        for c in cases:
            extra = f"  !! {c.error}" if c.error else ""
            cold_s = compile_estimate(c, args.target, timings)
            compile_note = "compile timed out before" if cold_s == float("inf") else f"compile ~{cold_s:.0f} s"
            print(f"{c.id}  [{c.note}; {c.mbytes:.2f} MB; ~{case_estimate(c, args.tool, args.target, timings):.1f} s; "
                  f"{compile_note}]{extra}")
        print(estimate)
        return _codegen_only(cases, args.target) if args.codegen_only else 0
    echo = lambda s: print(s, flush=True)  # noqa: E731
    if args.precompile_only:
        print(estimate.replace("@@ ESTIMATE", "@@ ESTIMATE (precompile only)"), flush=True)
        import torch

        if not torch.cuda.is_available():
            echo("@@ NOTE CUDA is not available here: every compile for a GPU target fails (`needs a CUDA GPU`); "
                 "this run only exercises the compile processes")
        deadline = None if args.timeout is None else time.time() + args.timeout
        results = precompile(cases, args.target, jobs, echo, args.compile_timeout, deadline, timings)
        _save_timings(args.timings, timings, args.target, _compile_times(results))
        failed = [(cid, r[1]) for cid, r in results.items() if r[0] == "FAIL"]
        for cid, why in failed:
            echo(f"FAIL    {cid}: {why}")
        for c in cases:
            if c.error:
                echo(f"FAIL    {c.id}: setup: {c.error}")
        return 1 if failed or any(c.error for c in cases) else 0
    print(estimate, flush=True)
    try:
        batch = run_batch(args.tool, args.target, cases, args.sanitizer, jobs, not args.no_precompile, args.timeout,
                          tuple(args.sanitizer_arg), echo=echo, compile_timeout=args.compile_timeout,
                          stall_timeout=args.stall_timeout, timings=timings)
    except SetupError as exc:
        print(f"@@ CANNOT RUN: {exc}", file=sys.stderr)
        return 2
    _save_timings(args.timings, timings, args.target, batch.compile_times, (f"{args.tool}/{args.target}", batch.times))
    print(batch.report(), flush=True)
    return 0 if batch.ok else 1


if __name__ == "__main__":
    sys.exit(main())

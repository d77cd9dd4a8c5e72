"""`tkc tune`'s search: plan (space and pruning), compile in parallel, time on the GPU, report.

The steps and the results file are described in tkc/tune.py. `search` takes a `measure`
function (configuration -> median milliseconds, raising `Rejected`); the default, `GpuMeasure`,
checks and times on the GPU, and tests inject a deterministic one to exercise ranking, caching
and printing on the CPU.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from dsl import ast as A
from dsl.diagnostics import TkError, error
from tkc.cache import Cache
from tkc.tune import (COMMAND_LINE, Pruner, Record, best, build_space, config_key, configurations, first_line,
                      load_results, results_path, save_results, space_size)


class Rejected(Exception):
    """A configuration that failed to compile, launch or match the reference: `status` is "error"
    or "wrong", `reason` the one line shown for it."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass
class Plan:
    """A kernel at fixed problem dims, its search space and the pruned configurations."""

    path: str
    text: str
    kernel: A.Kernel
    dims: dict[str, int]
    space: dict[str, tuple[int, ...]]
    survivors: list[dict[str, int]]
    rejected: list[Record]
    seconds: float  # pruning time
    # `--model-top K`: the cost model's estimate (us) of every survivor by config_key, and how
    # many survivors it left untimed (rank_by_model)
    model_us: dict[str, float] = field(default_factory=dict)
    model_dropped: int = 0
    # runtime scalars fixed with `-D` (attention's `pos`): every timed call gets these values
    # (else each input set draws its own), and the results file is kept apart from the others
    scalars: dict[str, int] = field(default_factory=dict)

    def key_dims(self) -> dict[str, int]:
        """The dims and fixed runtime scalars that name the results file and the report."""
        return {**self.dims, **self.scalars}


def runtime_scalars(kernel: A.Kernel) -> set[str]:
    """The kernel's runtime scalar parameters (`pos: i32`)."""
    return {p.name for p in kernel.inputs if p.dims is None}


def resolve_dims(kernel: A.Kernel, defines: dict[str, int], scalars_ok: bool = False) -> dict[str, int]:
    """The problem dims: `-D` values, else `where` defaults. Raises TkError (as lowering does) for
    a `-D` name that is neither a dim nor a constant (nor, with `scalars_ok`, a runtime scalar)
    and a dim with no value."""
    from dsl.lower import tensor_dims

    dims_used = tensor_dims(kernel)
    scalars = runtime_scalars(kernel) if scalars_ok else set()
    for name in defines:
        if name not in dims_used and name not in kernel.consts and name not in scalars:
            known = sorted(set(dims_used) | set(kernel.consts) | scalars)
            what = "a dim, a schedule constant nor a runtime scalar" if scalars else "a dim nor a schedule constant"
            raise error(kernel.loc, f"`-D {name}` names neither {what} of `{kernel.name}`",
                        f"known names: {', '.join(known)}")
    dims = {}
    for name, loc in dims_used.items():
        if name in defines:
            dims[name] = defines[name]
        elif name in kernel.dim_defaults:
            dims[name] = kernel.dim_defaults[name][0]
        else:
            raise error(loc, f"dim `{name}` has no value", f"add a default (`where {name} = 1024`) or pass `-D {name}=...`")
    return dict(sorted(dims.items()))


def plan(path: str, defines: dict[str, int], space_args: dict[str, tuple[int, ...]], progress: bool = False) -> Plan:
    """Parse `path`, build the space and prune it (nothing is compiled). Raises TkError for user
    errors in the file or the command line."""
    from dsl.lower import check_tune
    from dsl.parser import parse
    from tkc import driver

    if path.endswith(".tkir"):
        raise error(COMMAND_LINE, "`tkc tune` searches the schedule constants of a .tk file; IR files are specialized")
    text = driver.read_source(path)
    kernel = parse(text, path)
    check_tune(kernel)
    dims = resolve_dims(kernel, defines, scalars_ok=True)
    names = runtime_scalars(kernel)
    scalars = {n: v for n, v in sorted(defines.items()) if n in names}
    if scalars:  # their `requires` (pos < S) checked once here, not as a failure of every configuration
        from tkc.runtime import check_runtime

        check_runtime(driver.frontend(path, dims, text), scalars)
    space = build_space(kernel, {n: v for n, v in defines.items() if n in kernel.consts}, space_args)
    pruner = Pruner(path, text, kernel, dims)
    survivors, rejected = [], []
    t0 = time.perf_counter()
    with _progress(progress) as bar:
        task = bar.add_task("pruning", total=space_size(space))
        for i, config in enumerate(configurations(space)):
            rec = pruner.check(config)
            if rec is None:
                survivors.append(config)
            else:
                rejected.append(rec)
            if i % 256 == 255:
                bar.advance(task, 256)
    return Plan(path, text, kernel, dims, space, survivors, rejected, time.perf_counter() - t0, scalars=scalars)


def rank_by_model(p: Plan, keep: int) -> Plan:
    """`p` with its survivors ordered by the cost model's estimate at the plan's dims
    (passes/cost_model.py, the estimate `schedule="model"` ranks by: HBM and L2 bytes, L2 reuse
    by grid order, occupancy and waves, the chain of dependent trips) and cut to the `keep` best;
    the estimates go into `p.model_us`. A survivor the model cannot lower keeps its place at the
    end (estimate inf), so a model gap never drops a configuration silently before one it ranked."""
    from passes.cost_model import estimate
    from passes.manager import parse_pipeline, run_pipeline
    from tkc import driver
    from tkc.schedule import MODEL_PIPELINE

    passes = parse_pipeline(MODEL_PIPELINE)
    est = {}
    for c in p.survivors:
        try:
            module = run_pipeline(driver.frontend(p.path, {**p.dims, **c}, p.text), passes)
            est[config_key(c)] = estimate(module, {}).time_us
        except TkError:
            est[config_key(c)] = math.inf
    ranked = sorted(p.survivors, key=lambda c: est[config_key(c)])
    p.survivors, p.model_us, p.model_dropped = ranked[:keep], est, max(0, len(ranked) - keep)
    return p


def _model_line(p: Plan) -> list[str]:
    if not p.model_us:
        return []
    return [f"cost model: timing the {len(p.survivors)} best of {len(p.survivors) + p.model_dropped} survivors by its "
            "estimate (passes/cost_model.py; `--model-top` sets how many)"]


def _model_us(p: Plan, config: dict[str, int]) -> str:
    v = p.model_us.get(config_key(config), math.inf)
    return f"{v:.2f}" if math.isfinite(v) else "-"


# ---------------------------------------------------------------------------------- compiling

def _build_one(path: str, target: str, cache_root: str, dims: dict[str, int], config: dict[str, int]) -> str:
    """Worker: compile one configuration into the shared cache; "" or the error's first line."""
    try:
        from tkc.runtime import Kernel

        Kernel(path, target, config, Cache(cache_root)).specialize(dims)
        return ""
    except TkError as exc:
        return first_line(exc)
    except Exception as exc:  # noqa: BLE001 (a backend failure on one configuration is its result)
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def build_all(p: Plan, configs: list[dict[str, int]], target: str, cache: Cache, jobs: int,
              progress: bool = False) -> dict[str, str]:
    """Compile `configs` in `jobs` spawned processes (never forked: the parent may hold a CUDA
    context); returns config_key -> "" (built) or the error's first line."""
    out: dict[str, str] = {}
    with _progress(progress) as bar:
        task = bar.add_task("compiling", total=len(configs))
        if jobs <= 1 or len(configs) <= 1:
            for c in configs:
                out[config_key(c)] = _build_one(p.path, target, cache.root, p.dims, c)
                bar.advance(task)
            return out
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=min(jobs, len(configs)), mp_context=ctx) as pool:
            futures = {pool.submit(_build_one, p.path, target, cache.root, p.dims, c): c for c in configs}
            for f in cf.as_completed(futures):
                try:
                    out[config_key(futures[f])] = f.result()
                except Exception as exc:  # noqa: BLE001 (a crashed worker: that configuration failed)
                    out[config_key(futures[f])] = f"the compile worker failed: {type(exc).__name__}: {exc}"
                bar.advance(task)
    return out


# ---------------------------------------------------------------------------------- timing

class GpuMeasure:
    """Checks one configuration against the kernel's `reference` on one input set, then returns
    its median time in ms over input sets rotated past the L2 (tkc/bench.py). Raises Rejected."""

    def __init__(self, p: Plan, target: str, cache: Cache, warmup_ms: float = 25.0, rep_ms: float = 100.0):
        from tkc.bench import Timer

        self.plan, self.target, self.cache = p, target, cache
        self.timer = Timer(False, warmup_ms, rep_ms)
        self.sets = None
        self.refs = None

    def _inputs(self, module) -> None:
        from tkc import oracle
        from tkc.bench import L2_BYTES

        fixed = self.plan.scalars or None
        first = oracle.random_inputs(module, 0, "cuda", scalars=fixed)
        nbytes = sum(t.numel() * t.element_size() for t in first if hasattr(t, "numel")) or 1  # runtime scalars are ints
        n = max(2, min(16, math.ceil(2 * L2_BYTES / nbytes)))
        self.sets = [first] + [oracle.random_inputs(module, seed, "cuda", scalars=fixed) for seed in range(1, n)]
        self.refs = oracle.reference(module, first)

    def __call__(self, config: dict[str, int]) -> float:
        import torch

        from tkc import oracle
        from tkc.bench import rotating
        from tkc.runtime import Kernel

        try:
            kernel = Kernel(self.plan.path, self.target, config, self.cache)
            artifact, _ = kernel.specialize(self.plan.dims)
            module = artifact.module
            if self.sets is None:
                self._inputs(module)
            outs = kernel(*self.sets[0])
            outs = outs if isinstance(outs, tuple) else (outs,)
            budgets = oracle.error_budgets(module)
            for (name, dtype), out, ref in zip(oracle.outputs(module), outs, self.refs):
                err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
                if not err <= tol:
                    raise Rejected("wrong", f"wrong: `{name}` relative error {err:.3e} > tolerance {tol:.3e}")
            ms = self.timer(rotating(kernel, self.sets))
            torch.cuda.synchronize()
            return ms
        except Rejected:
            raise
        except TkError as exc:
            raise Rejected("error", first_line(exc)) from None
        except Exception as exc:  # noqa: BLE001 (a launch failure is this configuration's result)
            lines = str(exc).strip().splitlines()
            raise Rejected("error", f"{type(exc).__name__}: {lines[0] if lines else ''}") from None


def search(p: Plan, target: str, cache: Cache, device: str, jobs: int = 1, measure=None, retime: bool = False,
           progress: bool = False) -> tuple[list[Record], str]:
    """Compile and time every survivor of `p` (reusing earlier times of the same results file
    unless `retime`), save the results, and return (the records of this search's space, the
    results file's path). `measure(config) -> ms` defaults to GpuMeasure (which needs the GPU),
    and the parallel compile runs only with it."""
    path = results_path(cache.root, p.text, p.key_dims(), device, target)
    earlier = load_results(path) or {}
    records = {config_key(r.config): r for r in p.rejected}
    todo = []
    for c in p.survivors:
        old = earlier.get(config_key(c))
        if old is not None and not retime and old.status in ("ok", "error", "wrong"):
            records[config_key(c)] = old
        else:
            todo.append(c)
    built = {}
    if measure is None:
        built = build_all(p, todo, target, cache, jobs, progress)
        measure = GpuMeasure(p, target, cache)
    with _progress(progress) as bar:
        task = bar.add_task("timing", total=len(todo))
        for c in todo:
            key = config_key(c)
            if built.get(key):
                records[key] = Record(c, "error", reason=built[key], group=f"error: {built[key]}")
            else:
                try:
                    records[key] = Record(c, "ok", time_us=measure(c) * 1e3)
                except Rejected as exc:
                    records[key] = Record(c, exc.status, reason=exc.reason, group=f"{exc.status}: {exc.reason}")
            bar.advance(task)
    merged = {**earlier, **{k: r for k, r in records.items() if r.status not in ("requires", "smem")}}
    save_results(path, merged, {"kernel": p.kernel.name, "dims": p.dims, "device": device, "target": target,
                                **({"scalars": p.scalars} if p.scalars else {})})
    order = [config_key(c) for c in configurations(p.space)]
    return [records[k] for k in order if k in records], path


# ---------------------------------------------------------------------------------- printing

def _header(p: Plan, target: str, device: str | None) -> str:
    on = f" on {device}" if device else ""
    return f"tune `{p.kernel.name}`{on} (target {target}) at {config_key(p.key_dims())}"


def _space_line(p: Plan) -> str:
    parts = [f"{n} = ({', '.join(map(str, v))})" for n, v in p.space.items()]
    return f"space: {'; '.join(parts)}: {space_size(p.space)} configuration{'s' * (space_size(p.space) != 1)}"


def reason_counts(records: list[Record]) -> list[tuple[str, int, Record]]:
    """(reason group, how many records, the first such record), most frequent first."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(r.group or r.reason, []).append(r)
    return [(g, len(rs), rs[0]) for g, rs in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def example(group: str, r: Record) -> str:
    """`e.g. BM=256, BK=128: smem: needs 256 KiB > 227 KiB` (the reason when the group hides it)."""
    return f"e.g. {config_key(r.config)}{f': {r.reason}' if r.reason != group else ''}"


def _grouped(records: list[Record]) -> list[str]:
    return [f"  {n:>6}  {g}  ({example(g, r)})" for g, n, r in reason_counts(records)]


def report_dry_run(p: Plan, target: str, top: int) -> str:
    """The text `tkc tune --dry-run` prints: the space, rejection counts by reason, survivors."""
    lines = [_header(p, target, None), _space_line(p),
             f"pruned: {len(p.survivors) + p.model_dropped} survive, {len(p.rejected)} rejected"]
    lines += _grouped(p.rejected)
    lines += _model_line(p)
    if p.survivors:
        lines.append(f"survivors{' by the model' if p.model_us else ''}{f' (first {top})' if len(p.survivors) > top else ''}:")
        lines += [f"  {config_key(c)}{f'  (model: {_model_us(p, c)} us)' if p.model_us else ''}" for c in p.survivors[:top]]
    return "\n".join(lines) + "\n"


def report(p: Plan, records: list[Record], target: str, device: str, top: int, results_file: str) -> str:
    """The text `tkc tune` prints: the best configuration, a table of the `top` fastest, and the
    rejected ones (pruned ones counted by reason; compile, launch and check failures one a line)."""
    varying = [n for n, v in p.space.items() if len(v) > 1]
    fixed = {n: v[0] for n, v in p.space.items() if len(v) == 1}
    timed = sorted((r for r in records if r.status == "ok"), key=lambda r: r.time_us)
    failed = [r for r in records if r.status in ("error", "wrong")]
    pruned = [r for r in records if r.status in ("requires", "smem")]
    reused = sum(1 for r in records if r.cached)
    lines = [_header(p, target, device), _space_line(p),
             f"{len(pruned)} rejected before compiling, {len(timed) + len(failed)} compiled"
             f"{f' ({reused} measured by an earlier run)' if reused else ''}, {len(timed)} timed"]
    lines += _model_line(p)
    if fixed:
        lines.append(f"fixed: {config_key(fixed)}")
    winner = best(timed)
    if winner is not None:
        lines.append(f"best: {config_key(winner.config)}: {winner.time_us:.2f} us")
    if timed:
        widths = [max(len(n), 5) for n in varying]
        model = "  model (us)" if p.model_us else ""
        lines.append(f"  rank  time (us)  vs best{model}  " + "  ".join(n.rjust(w) for n, w in zip(varying, widths)))
        for i, r in enumerate(timed[:top]):
            cols = "  ".join(str(r.config[n]).rjust(w) for n, w in zip(varying, widths))
            est = f"  {_model_us(p, r.config):>10}" if p.model_us else ""
            lines.append(f"  {i + 1:>4}  {r.time_us:>9.2f}  {r.time_us / winner.time_us:>6.2f}x{est}  {cols}")
        if len(timed) > top:
            lines.append(f"  ... {len(timed) - top} more timed (`--top {len(timed)}` shows all)")
    if failed:
        lines.append("failed:")
        lines += [f"  {config_key(r.config)}: {r.reason}" for r in failed]
    if pruned:
        lines.append("rejected before compiling:")
        lines += _grouped(pruned)
    lines.append(f"results: {results_file}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- progress

class _NoBar:
    def add_task(self, description: str, total: int) -> int:
        return 0

    def advance(self, task: int, n: int = 1) -> None:
        pass


@contextmanager
def _progress(enabled: bool):
    """A rich progress bar on stderr when `enabled` (an interactive terminal), else a no-op."""
    if not enabled:
        yield _NoBar()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(file=sys.stderr), transient=True) as bar:
        yield bar


def default_jobs() -> int:
    """Compile workers: all cores but one (nvcc is single-threaded), at least 1."""
    return max(1, (os.cpu_count() or 2) - 1)

"""The autotuner behind `tkc tune`: search a kernel's schedule constants for the fastest
configuration on this GPU, and remember it for `tkc.compile(..., tune=True)`.

Steps, in order:

1. **space**: per schedule constant, the values of `--space NAME=v1,v2` on the command line, else
   the one value of `-D NAME=v`, else the kernel's `tune NAME = (v1, v2)` clause, else its default;
   the configurations are the cartesian product.
2. **prune** (no compiling): each configuration's `requires` conditions are evaluated first
   (`dsl.lower.requirements`, a few microseconds each), then the shared memory per block of the
   survivors is computed by lowering and running `tile,software-pipeline` and check-smem-fit's
   TileLang model (`passes.check_smem_fit.smem_estimate`) against the sm_90 limit. Lowered IR
   depends on the constants only through static `if` conditions, and its shared-memory bytes
   only through the constants in tile shapes, loop bounds and stage counts (and the thread
   count, through the alignment of wgmma operands only); configurations that agree on those
   share one computation, so the seed-002 SGEMM space (36864 configurations)
   prunes in seconds.
3. **compile** the survivors in `jobs` spawned processes into the shared cache (tkc's generated
   source and TileLang's or nvcc's binaries), as benchmarks/miss.py prewarms.
4. **time** each in this process: checked once against the kernel's `reference` (a wrong result
   is rejected, never ranked), then the median of `triton.testing.do_bench` over input sets
   rotated past the L2 (tkc/bench.py).
5. **results** go to `<cache root>/tune/<key>.json`, keyed by the SHA-256 of the kernel's source
   text, the problem dims, the GPU name and the target; written to a temporary file and renamed
   into place. A later `tkc tune` of the same key reuses the times of configurations it already
   measured (`--retime` measures again); `tkc.compile(..., tune=True)` uses the best one.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tempfile
import warnings
from dataclasses import dataclass, field

from dsl import ast as A
from dsl import exprs
from dsl.lower import ast_names
from dsl.diagnostics import Loc, TkError, error

TUNE_TARGETS = ("tilelang", "cuda")
RESULTS_VERSION = 1
COMMAND_LINE = Loc("<command line>", 1, 1)


class TuneWarning(UserWarning):
    """A tune results file that cannot be used (corrupted, or written by another version)."""


@dataclass
class Record:
    """The outcome for one configuration. `status`: "ok" (timed), "requires" or "smem" (pruned
    before compiling), "error" (a compile or launch error), "wrong" (failed the reference check).
    `time_us` is the median time in microseconds (status "ok" only); `reason` says why a
    configuration was rejected; `group` is the reason without per-configuration numbers (what
    `--dry-run` counts)."""

    config: dict[str, int]
    status: str
    time_us: float | None = None
    reason: str = ""
    group: str = ""
    cached: bool = False

    def to_json(self) -> dict:
        return {"config": self.config, "status": self.status, "time_us": self.time_us, "reason": self.reason,
                "group": self.group}


def config_key(config: dict[str, int]) -> str:
    """A configuration as text, names sorted: `BM=64, BN=128`."""
    return ", ".join(f"{n}={v}" for n, v in sorted(config.items()))


# ---------------------------------------------------------------------------------- the space

def parse_space_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=v1,v2,...` (from `--space`) -> (NAME, values); raises ValueError with the message for
    the user on malformed text, a value that is not an integer, or a negative value."""
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier() or not rest.strip():
        raise ValueError(f"expected NAME=v1,v2,..., got `{text}`")
    values = []
    for part in rest.split(","):
        try:
            v = int(part.strip())
        except ValueError:
            raise ValueError(f"`{name}`: `{part.strip()}` is not an integer (in `{text}`)") from None
        if v < 0:
            raise ValueError(f"`{name}`: schedule constants are not negative, got {v}")
        if v not in values:
            values.append(v)
    return name, tuple(values)


def build_space(kernel: A.Kernel, defines: dict[str, int], space: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """The values searched per schedule constant of `kernel` (see the module docstring).

    `defines` are the `-D` values (dims or constants), `space` the `--space` lists. Raises
    TkError for a `--space` name that is not a schedule constant, or a constant given by both."""
    from dsl.lower import tensor_dims

    dims = tensor_dims(kernel)
    known = ", ".join(sorted(kernel.consts)) or "none"
    for name in space:
        if name in dims:
            raise error(kernel.loc, f"`--space {name}`: `{name}` is a problem dim of `{kernel.name}`, not a schedule "
                        "constant", f"set dims with `-D {name}=...`; search schedule constants: {known}")
        if name not in kernel.consts:
            raise error(kernel.loc, f"`--space {name}` names no schedule constant of `{kernel.name}`",
                        f"schedule constants: {known}")
        if name in defines:
            raise error(kernel.loc, f"`{name}` is given by both `-D` and `--space`", "keep one of them")
    out = {}
    for name, (default, _) in sorted(kernel.consts.items()):
        if name in space:
            out[name] = space[name]
        elif name in defines:
            out[name] = (defines[name],)
        elif name in kernel.tune:
            out[name] = kernel.tune[name][0]
        else:
            out[name] = (default,)
    return out


def configurations(space: dict[str, tuple[int, ...]]):
    """Every configuration of `space` (dicts, in a fixed order)."""
    names = list(space)
    for values in itertools.product(*(space[n] for n in names)):
        yield dict(zip(names, values))


def space_size(space: dict[str, tuple[int, ...]]) -> int:
    n = 1
    for values in space.values():
        n *= len(values)
    return n


# ---------------------------------------------------------------------------------- pruning

def first_line(exc: TkError) -> str:
    """The message of a user error's first diagnostic."""
    return exc.diagnostics[0].message if exc.diagnostics else str(exc)


def _if_names(stmts: list) -> set[str]:
    """Names in the conditions of every static `if` (taken or not) in `stmts`, nested included."""
    out: set[str] = set()
    for s in stmts:
        if isinstance(s, A.If):
            out |= ast_names(s.cond)
            out |= _if_names(s.then) | _if_names(s.orelse)
        elif isinstance(s, A.For):
            out |= _if_names(s.body)
    return out



def _smem_names(module) -> set[str]:
    """Names that the shared memory of lowered (untiled) `module` can depend on: those in tile
    shapes (a register tile loaded in a pipelined loop becomes a shared staging buffer), in the
    bounds and stage counts of loops (stages are clamped to the trip count; a loop of one trip
    is inlined by TileLang, passes/smem_tilelang.py)."""
    out: set[str] = set()
    for op in module.walk():
        for r in op.results:
            for d in getattr(r.type, "shape", ()):
                out |= exprs.names(d)
        if op.name == "tile.for" and op.attrs.get("kind") == "pipelined":
            for key in ("lo", "hi", "stages"):
                if key in op.attrs:
                    out |= exprs.names(exprs.parse(str(op.attrs[key])))
        elif op.name == "tile.for":  # a loop of one trip is no loop to TileLang's liveness
            for key in ("lo", "hi"):
                out |= exprs.names(exprs.parse(str(op.attrs[key])))
    return out


@dataclass
class Pruner:
    """Prunes configurations of one kernel at fixed dims (see the module docstring)."""

    path: str
    text: str
    kernel: A.Kernel
    dims: dict[str, int]
    limit: int = 0
    _requires: list = field(default_factory=list)
    _static: tuple = ()
    _groups: dict = field(default_factory=dict)  # static-if values -> sorted smem names
    _memo: dict = field(default_factory=dict)  # (static values, smem-name values) -> bytes

    def __post_init__(self):
        from dsl.lower import requirements
        from passes.targets import DEFAULT_SM, SMEM_LIMITS

        self.limit = self.limit or SMEM_LIMITS[DEFAULT_SM]
        self._requires = [(e, exprs.to_str(e)) for e, _ in requirements(self.kernel)]
        self._static = tuple(sorted(_if_names(self.kernel.body) & set(self.kernel.consts)))

    def check(self, config: dict[str, int]) -> Record | None:
        """None when `config` survives, else the Record of its rejection."""
        env = {**self.dims, **config}
        for cond, text in self._requires:
            try:
                holds = exprs.evaluate(cond, env)
            except exprs.ExprError as exc:
                return Record(config, "requires", reason=f"requires `{text}`: {exc}", group=f"requires `{text}`")
            if not holds:
                return Record(config, "requires", reason=f"requires `{text}`", group=f"requires `{text}`")
        group = tuple(config[n] for n in self._static)
        names = self._groups.get(group)
        key = (group, tuple(config[n] for n in names)) if names is not None else None
        nbytes = self._memo.get(key) if key is not None else None
        if nbytes is None:
            nbytes, names = self._shared_bytes(config)
            if names is not None:
                names = self._groups.setdefault(group, names)
                if not isinstance(nbytes, str):
                    self._memo[(group, tuple(config[n] for n in names))] = nbytes
        if isinstance(nbytes, str):
            return Record(config, "error", reason=nbytes, group=f"error: {nbytes}")
        if nbytes > self.limit:
            return Record(config, "smem", reason=f"smem: needs {_kib(nbytes)} KiB > {_kib(self.limit)} KiB",
                          group=f"smem: over {_kib(self.limit)} KiB")
        return None

    def _shared_bytes(self, config: dict[str, int]):
        """(shared bytes per block, or the first line of the user error that stopped it; the
        sorted constants those bytes depend on, or None when lowering failed)."""
        from passes.check_smem_fit import smem_estimate
        from passes.software_pipeline import SoftwarePipelinePass
        from passes.tile import TilePass
        from tkc import driver

        try:
            module = driver.frontend(self.path, {**self.dims, **config}, self.text)
        except TkError as exc:
            return first_line(exc), None
        names = tuple(sorted(_smem_names(module) & set(self.kernel.consts)))
        try:
            module = SoftwarePipelinePass().run(TilePass().run(module))
        except TkError as exc:
            return first_line(exc), None
        launches = [op for op in module.func.body.ops if op.name == "tile.launch"]
        return max((smem_estimate(module, op, "tilelang") for op in launches), default=0), names


def _kib(nbytes: int) -> str:
    return f"{nbytes / 1024:.1f}".rstrip("0").rstrip(".")


# ---------------------------------------------------------------------------------- results file

def device_name() -> str | None:
    """The name of CUDA device 0 (`NVIDIA H100 80GB HBM3`), or None without a CUDA GPU."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def results_path(cache_root: str, text: str, dims: dict[str, int], device: str, target: str) -> str:
    """`<cache_root>/tune/<sha256>.json` for the kernel source `text`, problem `dims`, GPU
    `device` and `target` (a change to any of them is another file)."""
    h = hashlib.sha256()
    for part in (text, json.dumps(sorted(dims.items())), device, target):
        h.update(part.encode())
        h.update(b"\0")
    return os.path.join(cache_root, "tune", h.hexdigest() + ".json")


def load_results(path: str) -> dict[str, Record] | None:
    """The records in the results file at `path` by `config_key`, or None when there is none. A
    file that cannot be read or parsed is ignored with a TuneWarning (never an exception)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        warnings.warn(f"ignoring unreadable tune results {path}: {exc}", TuneWarning, stacklevel=2)
        return None
    try:
        if data.get("version") != RESULTS_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {RESULTS_VERSION}")
        out = {}
        for r in data["results"]:
            config = {str(k): int(v) for k, v in r["config"].items()}
            t = r.get("time_us")
            rec = Record(config, str(r["status"]), float(t) if t is not None else None, str(r.get("reason", "")),
                         str(r.get("group", "")), cached=True)
            if rec.status == "ok" and rec.time_us is None:
                raise ValueError(f"a timed configuration without a time: {config_key(config)}")
            out[config_key(config)] = rec
        return out
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        warnings.warn(f"ignoring corrupted tune results {path}: {exc}", TuneWarning, stacklevel=2)
        return None


def save_results(path: str, records: dict[str, Record], meta: dict) -> None:
    """Write `records` (and `meta`: kernel, dims, device, target) to `path` atomically: a
    temporary file in the same folder renamed over it, so a crash leaves the old file or none."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    data = {"version": RESULTS_VERSION, **meta, "results": [r.to_json() for r in records.values()]}
    fd, tmp = tempfile.mkstemp(prefix=".tune-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def best(records) -> Record | None:
    """The fastest timed record (ties: the first in `records`), or None."""
    timed = [r for r in records if r.status == "ok"]
    return min(timed, key=lambda r: r.time_us) if timed else None


def tuned_config(cache_root: str, path: str, text: str, dims: dict[str, int], target: str,
                 device: str | None = None) -> dict[str, int]:
    """The best configuration `tkc tune` measured for kernel `path` (source `text`) at `dims` on
    this GPU (or `device`) for `target`. Raises TkError when there is no GPU or no results, with
    the `tkc tune` command that produces them."""
    from dsl.parser import parse

    kernel = parse(text, path)
    device = device or device_name()
    if device is None:
        raise error(kernel.loc, "`tune=True` needs the CUDA GPU that `tkc tune` measured on; there is none here",
                    "pass schedule constants explicitly instead")
    found = load_results(results_path(cache_root, text, dims, device, target))
    choice = best(found.values()) if found else None
    if choice is None:
        from tkc.cache import default_root

        defines = "".join(f" -D {n}={v}" for n, v in sorted(dims.items()))
        where = "" if os.path.abspath(cache_root) == os.path.abspath(default_root()) else f" --cache-dir {cache_root}"
        raise error(kernel.loc, f"no `tkc tune` results for `{kernel.name}` with {config_key(dims)} on {device} "
                    f"(target {target})", f"run: tkc{where} tune {path}{defines} --target {target}")
    return choice.config


__all__ = ["Record", "Pruner", "build_space", "configurations", "parse_space_arg", "results_path", "load_results",
           "save_results", "tuned_config", "best", "device_name", "TUNE_TARGETS", "TuneWarning"]

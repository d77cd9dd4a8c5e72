"""Benchmark SDDMM (seed 003, issue 12): tkc's examples against cuSPARSE, seed 003's tensor-core
kernel and dense-then-mask torch.

    P[e] = dot(A[row_e, :], B[:, col_e]) at each entry e = (row_e, col_e) of a sparse M x N pattern S
    A f16[M, K], B f16[K, N]; P f32[nnz] in S's (CSR) order, as
    torch.sparse.sampled_addmm(S, A, B, beta=0.0).values(); examples/sddmm_wmma_16x16x16.tk
    writes a dense f32[M, N] P instead (0 off the pattern).

On the device machine (one run does everything, prints a markdown table last):

    source .device/env.sh && python3 benchmarks/sddmm.py --out $OUT/sddmm.json

On a CPU box (tiny shapes, tkc's reference interpreter, the seed kernel emulated in torch and only
compiled with nvcc, a wall-clock timer; checks the script end to end):

    python3 benchmarks/sddmm.py --cpu

Per shape (M, N, K, nnz) and pattern (uniform; R-MAT with the same nnz, from tkc.sparse), every
variant is checked against a float64 reference at the entries (from the same f16 inputs) on fresh
inputs and on a timed set, then timed (`triton.testing.do_bench` median; L2 flushed before every
call; A and B rotate among sets holding >= 200 MiB together):
- `cusparse`: torch.sparse.sampled_addmm on f32 copies of A, B and a CSR S with f32 values (the form
  ANCHORS.md measured; cuSPARSE's SDDMM), made outside the timed region.
- `dense`: dense-then-mask, `torch.mm(A, B).view(-1)[row * N + col].float()` (f16 product with
  f32 accumulation, rounded to f16, gathered); skipped where M * N f16 does not fit `--dense-max-gib`.
- `seed_16x16`, `seed_32x8`, `seed_8x32`: seed 003's WMMA kernel as the seed describes it (one warp
  per tile over every tile of the matrix; benchmarks/seed_sddmm.py), on zero-padded inputs made
  outside the timed region.
- every `examples/sddmm*.tk` through `tkc.compile(path, target="cuda")` (`--target`).
The patterns are made in worker processes while the kernels build, and all of them are ready
before the first timing (the host's time is part of a call's, and small shapes are host-bound).
The pattern is one reused tkc.sparse.SparsePattern object, so the main time is the steady state
with the pattern's preprocessing (tile lists, the seed's per-tile index, cuSPARSE's CSR tensor, the
dense gather's linear index) cached on it. For tkc and the seed, the cost of a first call with a
new pattern object is measured apart (wall clock, median of `--first-reps`): `check_us` (tkc's input
checks of an unchecked pattern), `preprocess_us` (first call minus a steady call timed the same
way). Compile time never lands in a timing (`compile_s` in the JSON). Rows faster than
`--graph-below-us` (baselines: ten times that, so that cuSPARSE has a graph time wherever the tkc
rows do) are also timed as CUDA-graph replays (`graph_us`: no Python launch overhead), and the tkc
rows' host time to enqueue a call (`host_us`, tkc.bench.host_ms): where it exceeds what do_bench's
256 MB L2 clear hides (about 60-70 us on an H200), the row's per-call time is the host's.

Bytes floor per variant (the fewest bytes its interface must move, at the copy bandwidth measured
in the same run): A's rows and B's columns that hold an entry, f16, read once; int32 indices (CSR:
a column per entry and M + 1 row pointers; COO: a row and a column per entry); the f32 output
written once (nnz values, or M x N for a dense P). GFLOP/s count 2 * nnz * K.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import glob
import json
import math
import multiprocessing
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, HERE):  # run from anywhere without installing; `miss`, `seed_sddmm` live beside us
    if _p not in sys.path:
        sys.path.insert(0, _p)

import miss  # noqa: E402  (copy bandwidth, prewarm, notes, run metadata)
import seed_sddmm  # noqa: E402
from sddmm_report import fmt, full_table, print_row, summary, targets  # noqa: E402
from tkc.bench import Timer, graph_ms, host_ms, rotating  # noqa: E402

# The seed's table at K = 256 (its nnz), 8000^2 at 1%, 3% and 10%, ANCHORS' 10000^2 shapes (5M
# is the issue's 40%-of-floor target) and K = 32 and 512 at 10000^2 with 5M.
GPU_SHAPES = ["M1504N1504K256nnz746316", "M8000N8000K256nnz640000", "M8000N8000K256nnz1920000",
              "M8000N8000K256nnz6400000", "M3000N7000K256nnz313110", "M2000N12000K256nnz746000",
              "M4000N4000K256nnz88000", "M10000N10000K256nnz1000000", "M10000N10000K256nnz5000000",
              "M10000N10000K32nnz5000000", "M10000N10000K512nnz5000000", "M35000N35000K256nnz422000",
              "M36000N36000K256nnz4000000", "M37000N37000K256nnz368000", "M106000N106000K256nnz3000000",
              "M916000N916000K256nnz5000000"]
CPU_SHAPES = ["M96N80K32nnz700", "M50N70K48nnz400"]
PATTERNS = ("uniform", "rmat")
EXAMPLES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "examples", "sddmm*.tk")))
SEEDS = [f"seed_{t}" for t in seed_sddmm.TILES]
BASELINES = ["cusparse", "dense", *SEEDS]
RTOL = 1e-3
BASELINE_GRAPH_FACTOR = 10  # baselines are timed as graphs below this many times --graph-below-us
L2_BYTES = 50 * 2**20


# ----------------------------------------------------------------------------- shapes, patterns, bytes

def parse_shape(text: str) -> dict[str, int]:
    """`M10000N10000K256nnz5M` -> {"M": 10000, "N": 10000, "K": 256, "nnz": 5000000} (k/M suffixes)."""
    m = re.fullmatch(r"M(\d+)N(\d+)K(\d+)nnz(\d+)([kM]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"shape `{text}` is not of the form M<int>N<int>K<int>nnz<int>[k|M]")
    M, N, K, nnz = (int(g) for g in m.groups()[:4])
    nnz *= {"": 1, "k": 10**3, "M": 10**6}[m.group(5)]
    if K % 16 or nnz > M * N:
        raise argparse.ArgumentTypeError(f"shape `{text}`: K must be a multiple of 16 and nnz at most M * N")
    return {"M": M, "N": N, "K": K, "nnz": nnz}


def shape_name(s: dict) -> str:
    return f"M{s['M']}N{s['N']}K{s['K']}nnz{s['nnz']}"


def make_pattern(kind: str, M: int, N: int, nnz: int, seed: int, threads: int = 0) -> dict:
    """{"rows", "cols": numpy int32 in CSR order, "seconds"} or {"error": note}: tkc.sparse.uniform
    or tkc.sparse.rmat (its defaults: a = 0.57, b = c = 0.19, noise 0.1). Runs in worker processes."""
    import torch

    import tkc.sparse as sp

    if threads:
        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        p = (sp.uniform if kind == "uniform" else sp.rmat)(M, N, nnz, seed=seed)
    except Exception as exc:  # R-MAT that cannot place nnz distinct entries, say
        return {"error": miss.exc_note(exc)}
    return {"rows": p.rows.numpy(), "cols": p.cols.numpy(), "seconds": time.perf_counter() - t0}


def floor_bytes(s: dict, stats: dict, index: str, output: str) -> int:
    """Fewest bytes a variant with this interface must move (see the module docstring)."""
    ab = 2 * s["K"] * (stats["rows_used"] + stats["cols_used"])
    idx = 4 * (s["nnz"] + s["M"] + 1) if index == "csr" else 8 * s["nnz"]
    out = 4 * (s["nnz"] if output == "values" else s["M"] * s["N"])
    return ab + idx + out


def reference(A, B, rows, cols):
    """float64 P at the entries from the f16 inputs, in chunks of <= 128 MiB per operand."""
    import torch

    K = A.shape[1]
    Bt = B.t().contiguous()
    out = torch.empty(rows.numel(), dtype=torch.float64, device=A.device)
    step = max(1, 2**27 // (8 * K))
    for i in range(0, rows.numel(), step):
        r, c = rows[i:i + step].long(), cols[i:i + step].long()
        out[i:i + step] = (A[r].double() * Bt[c].double()).sum(1)
    return out


def rel_error(vals, ref) -> float:
    """max|out - ref| / max|ref|; NaN for a wrong shape or a non-finite value."""
    import torch

    if tuple(vals.shape) != tuple(ref.shape) or not bool(torch.isfinite(vals).all()):
        return float("nan")
    return (vals.double() - ref).abs().max().item() / (ref.abs().max().item() or 1.0) if ref.numel() else 0.0


# ----------------------------------------------------------------------------- variants

_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pattern -> {key: derived data}


def cached(pattern, key, build):
    """Per-pattern derived data of a baseline (cuSPARSE's CSR tensor, the dense gather's index)."""
    per = _CACHE.setdefault(pattern, {})
    if key not in per:
        per[key] = build()
    return per[key]


@dataclass
class Variant:
    """One way to compute P: `call(X, Y, pattern)` on the inputs as `convert(A, B)` lays them out
    (outside the timed region; sets with the same `convert_key` are shared); `prepare(pattern,
    shape)` runs first and raises to skip (DoesNotFit, SeedTooLarge, TkError). `kind` is "tkc",
    "seed" or "baseline"; `index` ("csr", "coo") and `output` ("values", "dense") name the
    interface, for the bytes floor and the check (`values_of`)."""

    name: str
    kind: str
    index: str = "csr"
    output: str = "values"
    convert: Callable = field(default=lambda A, B: (A, B))
    convert_key: str = "f16"
    call: Callable | None = None
    prepare: Callable | None = None  # (pattern, shape) -> None; raises to skip
    extra: dict = field(default_factory=dict)


def flat_index(p):
    return cached(p, "flat", lambda: p.rows.long() * p.N + p.cols.long())


def cusparse_variant() -> Variant:
    import torch

    def call(X, Y, p):
        S = cached(p, "csr32", lambda: p.to_torch(torch.ones(p.nnz, dtype=torch.float32, device=p.rows.device)))
        return torch.sparse.sampled_addmm(S, X, Y, beta=0.0)

    return Variant("cusparse", "baseline", convert=lambda A, B: (A.float(), B.float()), convert_key="f32", call=call)


def dense_variant(max_bytes: int) -> Variant:
    import torch

    def prepare(p, s):
        if 2 * s["M"] * s["N"] > max_bytes:
            raise DoesNotFit(f"A @ B is {2 * s['M'] * s['N'] / 2**30:.1f} GiB of f16 (--dense-max-gib "
                             f"{max_bytes / 2**30:g})")
        flat_index(p)

    return Variant("dense", "baseline", call=lambda X, Y, p: torch.mm(X, Y).view(-1)[flat_index(p)].float(),
                   prepare=prepare)


def seed_variant(name: str, device: str, args) -> Variant:
    tile = name.removeprefix("seed_")
    holder: dict = {}

    def prepare(p, s):
        if "fn" not in holder:
            holder["fn"] = seed_sddmm.SeedSDDMM(tile, device, args.seed_compiler, args.nvcc, args.seed_max_tiles)
        holder["fn"].plan(p)  # SeedTooLarge here, before any input is padded

    return Variant(name, "seed", index="coo", convert=seed_sddmm.pad_inputs, convert_key="pad",
                   call=lambda X, Y, p: holder["fn"](X, Y, p), prepare=prepare, extra={"holder": holder})


def tkc_variant(spec: str, args) -> Variant:
    """examples/<stem>.tk with `[NAME=V;...]` schedule constants and `dot_below=N` (Kernel.dot_below)."""
    import tkc

    stem, consts = miss.split_variant(spec)
    dot_below = consts.pop("dot_below", None)
    k = tkc.compile(os.path.join(ROOT, "examples", f"{stem}.tk"), target=args.target, cache_dir=args.cache_dir,
                    **consts)
    if dot_below is not None:
        k.dot_below = dot_below
    S = next(p for p in k.inputs if p.dtype in ("csr", "coo"))
    output = "values" if len(k.outputs[0].dims) == 1 else "dense"

    def prepare(p, s):
        if output == "dense" and 4 * s["M"] * s["N"] > args.dense_out_max_gib * 2**30:
            raise DoesNotFit(f"the dense P is {4 * s['M'] * s['N'] / 2**30:.1f} GiB of f32 (--dense-out-max-gib "
                             f"{args.dense_out_max_gib:g})")
        import torch

        A = torch.empty(s["M"], s["K"], dtype=torch.float16, device="meta")  # shapes only, for the dims
        B = torch.empty(s["K"], s["N"], dtype=torch.float16, device="meta")
        t0 = time.perf_counter()
        k.specialize(k.bind_dims((A, B, p)))  # TkError here: a compile error row
        holder["compile_s"] = time.perf_counter() - t0  # a build at this shape (after prewarm: the cache's)

    holder: dict = {}
    return Variant(spec, "tkc", index=S.dtype, output=output, call=lambda X, Y, p: k(X, Y, p), prepare=prepare,
                   extra={"holder": holder})


class DoesNotFit(Exception):
    """A variant that needs more memory at this shape than its limit allows."""


def values_of(v: Variant, out, p):
    """(P[nnz] in S's order, note): a dense P is gathered at the entries and must be 0 elsewhere."""
    if v.name == "cusparse":
        return out.values(), ""
    if v.output == "values":
        return out, ""
    vals = out.view(-1)[flat_index(p)].clone()
    out.view(-1)[flat_index(p)] = 0
    stray = int((out != 0).sum())
    return vals, (f"{stray} elements off the pattern are not 0" if stray else "")


# ----------------------------------------------------------------------------- one variant

def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def poison(nbytes: int, device: str) -> None:
    """Best effort: leave NaNs in a free block of the output's size, so unwritten outputs show."""
    import torch

    t = torch.full((max(1, nbytes // 4),), float("nan"), dtype=torch.float32, device=device)
    del t


def wall_us(fn, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e6


def check(v: Variant, g: "Group") -> tuple[float, str]:
    """Worst relative error on the fresh inputs and on timed set 0, and a note for a stray write."""
    worst, notes = 0.0, []
    for (A, B), ref in ((g.fresh, g.ref_fresh), (g.sets[0], g.ref_set0)):
        X = v.convert(A, B)
        if v.output == "values":  # (a dense P is zero-filled by tkc's runtime; checked off the pattern)
            poison(4 * g.s["nnz"], g.device)
        vals, note = values_of(v, v.call(*X, g.p), g.p)
        err = rel_error(vals, ref)
        worst = err if math.isnan(err) or math.isnan(worst) else max(worst, err)
        notes += [note] if note else []
    return worst, "; ".join(notes)


def first_calls(v: Variant, g: "Group", X, reps: int) -> dict:
    """Wall-clock cost of calls with a new pattern object (same rows and cols): the input checks
    (tkc's as_pattern on an unchecked pattern) and the call itself, against a steady call."""
    from tkc.sparse import SparsePattern, as_pattern

    p = g.p
    checks, calls, steady = [], [], []
    for _ in range(reps):
        fresh = SparsePattern(p.M, p.N, p.fmt, p.rows.clone(), p.cols.clone())
        if v.kind == "tkc":
            checks.append(wall_us(lambda: as_pattern(fresh, v.index), g.device))
        calls.append(wall_us(lambda: v.call(*X, fresh), g.device))
        steady.append(wall_us(lambda: v.call(*X, p), g.device))
    out = {"first_call_us": statistics.median(calls), "steady_wall_us": statistics.median(steady)}
    out["preprocess_us"] = out["first_call_us"] - out["steady_wall_us"]
    if checks:
        out["check_us"] = statistics.median(checks)
        out["first_call_us"] += out["check_us"]
    return out


def bench(v: Variant, g: "Group", args, timer: Timer) -> dict:
    """Prepare, check, time one variant; never raises (failures become a status and a note)."""
    import torch

    from dsl.diagnostics import TkError

    s = g.s
    row = {"shape": shape_name(s), **s, "pattern": g.kind, "variant": v.name, "kind": v.kind, "index": v.index,
           "output": v.output, "status": "error", "time_us": None, "note": ""}
    fb = floor_bytes(s, g.stats, v.index, v.output)
    row.update(floor_bytes=fb, floor_us=fb / g.copy_Bps * 1e6)
    try:
        if v.prepare:
            v.prepare(g.p, s)
        row["compile_s"] = v.extra.get("holder", {}).get("compile_s")
        err, note = check(v, g)
        row["rel_err"] = err
        sets = g.converted(v)
        fn = lambda X, Y: v.call(X, Y, g.p)  # noqa: E731
        ms = timer(rotating(fn, sets))
        sync(g.device)
        row.update(time_us=ms * 1e3, gflops=2 * s["nnz"] * s["K"] / (ms * 1e-3) / 1e9, n_sets=len(sets))
        row["frac_floor"] = row["floor_us"] / row["time_us"]
        below = args.graph_below_us * (BASELINE_GRAPH_FACTOR if v.kind == "baseline" else 1)
        if g.device == "cuda" and row["time_us"] < below:
            row["graph_us"] = graph_us(fn, sets, timer, row)
            if v.kind == "tkc":
                row["host_us"] = host_us(fn, sets, row)
        if v.kind in ("tkc", "seed"):
            row.update(first_calls(v, g, sets[0], args.first_reps))
        wrong = math.isnan(err) or err > RTOL or bool(note)
        row["status"] = "WRONG" if wrong else "ok"
        row["note"] = (note or f"rel err {err:.3e} > {RTOL:g}") if wrong else ""
    except TkError as exc:
        msg = miss.first_line_of_tkerror(exc)
        row.update(status="does not fit" if "shared memory" in msg else "compile error", note=msg,
                   diagnostic=exc.render())
    except DoesNotFit as exc:
        row.update(status="does not fit", note=str(exc))
    except seed_sddmm.SeedTooLarge as exc:
        tiles = math.prod(seed_sddmm.tile_grid(s["M"], s["N"], v.name.removeprefix("seed_")))
        row.update(status="skipped", note=f"visits every tile: {exc}",
                   est_min_us=4 * (tiles + 1) / g.copy_Bps * 1e6)  # its tile pointers, read once
    except torch.cuda.OutOfMemoryError as exc:
        row.update(status="out of memory", note=miss.exc_note(exc))
    except Exception as exc:
        row.update(miss.error_fields(exc))
    return row


def host_us(fn, sets, row: dict) -> float | None:
    """The host's time to enqueue one call (tkc.bench.host_ms), or None with a note."""
    try:
        return host_ms(fn, sets) * 1e3
    except Exception as exc:
        row["host_note"] = miss.exc_note(exc)
        return None


def graph_us(fn, sets, timer: Timer, row: dict) -> float | None:
    """Kernel time without launch gaps (CUDA-graph replay, tkc.bench.graph_ms), or None with a note."""
    import tkc

    try:
        with tkc.assume_valid():
            return graph_ms(timer, fn, sets) * 1e3
    except Exception as exc:
        row["graph_note"] = miss.exc_note(exc)
        return None


# ----------------------------------------------------------------------------- one (shape, pattern)

@dataclass
class Group:
    s: dict
    kind: str
    device: str
    p: object  # the reused tkc.sparse.SparsePattern
    stats: dict
    sets: list
    fresh: tuple
    ref_fresh: object
    ref_set0: object
    copy_Bps: float
    _conv: dict = field(default_factory=dict)

    def converted(self, v: Variant) -> list:
        """The timed sets in v's layout, made once per layout (f16, f32 copies, padded copies)."""
        if v.convert_key not in self._conv:
            self._conv[v.convert_key] = [v.convert(A, B) for A, B in self.sets]
        return self._conv[v.convert_key]


def make_group(s: dict, kind: str, made: dict, device: str, args, copy_Bps: float) -> Group:
    import torch

    from tkc.sparse import SparsePattern, as_pattern

    rows = torch.from_numpy(made["rows"]).to(device)
    cols = torch.from_numpy(made["cols"]).to(device)
    p = as_pattern(SparsePattern(s["M"], s["N"], "csr", rows, cols), "csr")  # checked once, here
    degree = torch.bincount(p.rows, minlength=s["M"])
    stats = {"nnz": p.nnz, "density": p.nnz / (s["M"] * s["N"]), "rows_used": int((degree > 0).sum()),
             "cols_used": int(torch.unique(p.cols).numel()), "max_row": int(degree.max()) if p.nnz else 0,
             "pattern_s": made["seconds"]}
    input_bytes = 2 * s["K"] * (s["M"] + s["N"])
    n = max(2, min(args.max_sets, math.ceil(args.rotate_bytes / input_bytes)))
    gen = torch.Generator(device=device).manual_seed(args.seed)
    new = lambda: (torch.randn(s["M"], s["K"], device=device, dtype=torch.float16, generator=gen),  # noqa: E731
                   torch.randn(s["K"], s["N"], device=device, dtype=torch.float16, generator=gen))
    sets = [new() for _ in range(n)]
    fresh = new()
    return Group(s, kind, device, p, stats, sets, fresh, reference(*fresh, p.rows, p.cols),
                 reference(*sets[0], p.rows, p.cols), copy_Bps)


def relate(rows: list[dict]) -> dict | None:
    """Speedups of every timed row over cuSPARSE, the fastest seed kernel and dense-then-mask
    (baseline time / row time); returns the fastest tkc row that checked out."""
    ok = [r for r in rows if r["status"] == "ok" and r["time_us"]]
    base = {"cusparse": [r for r in ok if r["variant"] == "cusparse"],
            "seed": [r for r in ok if r["kind"] == "seed"], "dense": [r for r in ok if r["variant"] == "dense"]}
    best = {k: min(v, key=lambda r: r["time_us"]) if v else None for k, v in base.items()}
    for r in rows:
        for k, b in best.items():
            r[f"x_{k}"] = b["time_us"] / r["time_us"] if b and r["time_us"] else None
        cu = best["cusparse"]
        r["x_cusparse_graph"] = (cu["graph_us"] / r["graph_us"] if cu and cu.get("graph_us") and r.get("graph_us")
                                 else None)
        r["best_seed"] = best["seed"]["variant"] if best["seed"] else None
    tkc_rows = [r for r in ok if r["kind"] == "tkc"]
    return min(tkc_rows, key=lambda r: r["time_us"]) if tkc_rows else None


def run_group(g: Group, variants: list[Variant], failed: list, args, timer: Timer) -> dict:
    """Every variant at one (shape, pattern), printed as it goes; returns the group."""
    s, st = g.s, g.stats
    t0 = time.perf_counter()
    fb = floor_bytes(s, st, "csr", "values")
    print(f"\n## {shape_name(s)} {g.kind}: nnz {st['nnz']} ({100 * st['density']:.3g}%), rows used {st['rows_used']}, "
          f"columns used {st['cols_used']}, longest row {st['max_row']}; floor (csr, values) {fb / 1e6:.1f} MB = "
          f"{fb / g.copy_Bps * 1e6:.1f} us; {len(g.sets)} input sets; pattern made in {st['pattern_s']:.1f} s",
          flush=True)
    rows = [bench(v, g, args, timer) for v in variants]
    rows += [{"shape": shape_name(s), **s, "pattern": g.kind, "variant": e, "kind": "tkc", "time_us": None,
              **({"status": "compile error", "note": miss.first_line_of_tkerror(exc)}
                 if hasattr(exc, "diagnostics") else miss.error_fields(exc))} for e, exc in failed]
    best = relate(rows)
    for r in rows:
        r.update({k: v for k, v in st.items() if k != "nnz"})
        print_row(r)
    if best:
        print(f"  best tkc: {best['variant']}: x{fmt(best['x_cusparse'], '.1f')} cuSPARSE, "
              f"x{fmt(best['x_seed'], '.2f')} {best['best_seed'] or 'seed'}, x{fmt(best['x_dense'], '.2f')} dense, "
              f"{100 * best['frac_floor']:.0f}% of its floor", flush=True)
    print(f"  [{time.perf_counter() - t0:.1f} s]", flush=True)
    return {"shape": s, "pattern": g.kind, "rows": rows, "best": best}


# ----------------------------------------------------------------------------- work ahead of the timing

class Ahead:
    """The patterns (R-MAT takes seconds on the CPU), made in worker processes while the tkc
    kernels build and the GPU measures; or in this process, on demand, with jobs <= 1."""

    def __init__(self, args, keys: list[tuple]):
        self.args, self.pool, self.made = args, None, {}
        self.left = {k: keys.count(k) for k in keys}
        if args.jobs <= 1:
            return
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
        self.pool = cf.ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx)
        threads = max(1, (os.cpu_count() or 1) // args.jobs)
        for key in dict.fromkeys(keys):  # in the order they are used
            self.made[key] = self.pool.submit(make_pattern, *key, args.seed, threads)

    def wait(self) -> float:
        """Wait for every pattern (seconds waited): the timings of small shapes are host-bound, and
        R-MAT patterns made in other processes during them slowed their calls up to 2.6x (H100,
        2026-11-27: 1504^2 at 53.2 us against 20-23 us in runs where the patterns were ready)."""
        t0 = time.perf_counter()
        if self.pool is not None:
            cf.wait([f for f in self.made.values() if isinstance(f, cf.Future)])
        return time.perf_counter() - t0

    def pattern(self, key: tuple) -> dict:
        """The pattern of key = (kind, M, N, nnz); dropped after its last use."""
        if key not in self.made:
            self.made[key] = make_pattern(*key, self.args.seed)
        made = self.made[key]
        if isinstance(made, cf.Future):
            try:
                made = made.result()
            except Exception as exc:  # a crashed worker
                made = {"error": miss.exc_note(exc)}
            self.made[key] = made
        self.left[key] -= 1
        if not self.left[key]:
            del self.made[key]
        return made

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


# ----------------------------------------------------------------------------- the run

def default_out() -> str:
    return os.path.join(os.environ["OUT"], "sddmm.json") if os.environ.get("OUT") else "sddmm.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="CPU dry run: tiny shapes, target interp, seed emulated, "
                                                      "perf_counter timing")
    p.add_argument("--shapes", default=None, help="comma-separated M<int>N<int>K<int>nnz<int>[k|M] (default: the "
                                                  "seed's table, see GPU_SHAPES; --cpu: " + ",".join(CPU_SHAPES) + ")")
    p.add_argument("--patterns", default="uniform,rmat", help="uniform and/or rmat (default both)")
    p.add_argument("--examples", default=None, help=f"subset of {','.join(EXAMPLES)} (default all; 'none' for none); "
                                                    "constants in brackets, e.g. 'sddmm[BM=64;BN=64;dot_below=0]'")
    p.add_argument("--baselines", default=",".join(BASELINES), help=f"subset of {','.join(BASELINES)} (default all)")
    p.add_argument("--target", default=None, help="tkc target for the examples (default cuda; --cpu interp)")
    p.add_argument("--out", default=default_out(), help="JSON results (default $OUT/sddmm.json or ./sddmm.json); "
                                                        "the per-variant table goes beside it as .md")
    p.add_argument("--warmup", type=float, default=None, help="do_bench warm-up in ms (default 25; --cpu 2)")
    p.add_argument("--rep", type=float, default=None, help="do_bench repetitions in ms (default 100; --cpu 10)")
    p.add_argument("--rotate-mib", type=float, default=None, help="total size of the rotated A, B sets (default 200)")
    p.add_argument("--max-sets", type=int, default=32, help="at most this many rotated input sets")
    p.add_argument("--copy-mib", type=float, default=None, help="bytes copied to measure bandwidth (default 1024)")
    p.add_argument("--graph-below-us", type=float, default=200.0,
                   help="also time rows faster than this as CUDA-graph replays (0: never)")
    p.add_argument("--first-reps", type=int, default=3, help="calls with a new pattern object per variant")
    p.add_argument("--dense-max-gib", type=float, default=24.0, help="largest f16 A @ B for dense-then-mask")
    p.add_argument("--dense-out-max-gib", type=float, default=8.0, help="largest dense f32 P of a tkc example")
    p.add_argument("--seed-max-tiles", type=float, default=seed_sddmm.DEFAULT_MAX_TILES,
                   help="largest tile grid the seed kernel visits (its per-tile index holds one int32 per tile)")
    p.add_argument("--seed-compiler", default="auto", choices=("auto", "nvcc", "nvrtc"))
    p.add_argument("--nvcc", default=None)
    p.add_argument("--jobs", type=int, default=None, help="worker processes for patterns and tkc builds "
                                                          "(default min(8, CPUs); --cpu 1)")
    p.add_argument("--cache-dir", default=None, help="tkc cache (default: a fresh temporary directory)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.target = args.target or ("interp" if args.cpu else "cuda")
    try:
        texts = (args.shapes or ",".join(CPU_SHAPES if args.cpu else GPU_SHAPES)).split(",")
        args.shapes = [parse_shape(t) for t in texts]
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    args.patterns = [k.strip() for k in args.patterns.split(",") if k.strip()]
    args.baselines = [b.strip() for b in args.baselines.split(",") if b.strip() and b.strip() != "none"]
    ex = args.examples or ",".join(EXAMPLES)
    args.examples = [] if ex == "none" else [e.strip() for e in ex.split(",") if e.strip()]
    for what, got, known in (("pattern", args.patterns, PATTERNS), ("baseline", args.baselines, BASELINES),
                             ("example", [miss.split_variant(e)[0] for e in args.examples], EXAMPLES)):
        bad = [x for x in got if x not in known]
        if bad:
            p.error(f"unknown {what}(s) {', '.join(bad)}; known: {', '.join(known)}")
    args.warmup = args.warmup if args.warmup is not None else (2 if args.cpu else 25)
    args.rep = args.rep if args.rep is not None else (10 if args.cpu else 100)
    args.rotate_bytes = int((args.rotate_mib if args.rotate_mib is not None else 4 * 50) * 2**20)
    args.copy_bytes = int((args.copy_mib if args.copy_mib is not None else (16 if args.cpu else 1024)) * 2**20)
    args.jobs = args.jobs if args.jobs is not None else (1 if args.cpu else min(8, os.cpu_count() or 1))
    args.seed_max_tiles = int(args.seed_max_tiles)
    return args


def seed_build_check(args, meta: dict) -> dict | None:
    """CPU dry run: compile the seed kernel's CUDA source with nvcc (no launch). An error row if it fails."""
    if not seed_sddmm.seed_kernels.find_nvcc(args.nvcc):
        meta["seed_build"] = "no nvcc here: not compiled"
        return None
    try:
        b = seed_sddmm.compile_cubin(tempfile.mkdtemp(prefix="tkc-seed003-"), args.nvcc)
    except Exception as exc:
        return {"shape": "-", "pattern": "-", "variant": "seed build", "kind": "seed", "time_us": None,
                **miss.error_fields(exc)}
    meta["seed_build"] = {"command": " ".join(b.command), "seconds": b.seconds,
                          "ptxas": seed_sddmm.seed_kernels.ptxas_report(b.log)}
    print(f"seed 003 reconstruction: nvcc -cubin ok in {b.seconds:.1f} s", flush=True)
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    args.cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="tkc-bench-sddmm-")
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(args.cache_dir, "tilelang"))
    import torch

    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run on the device machine, or pass --cpu for the CPU dry run", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 stays f32
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False  # dense: f32 sums, one rounding
    start = time.perf_counter()
    timer = Timer(args.cpu, args.warmup, args.rep)
    meta = {
        "device_name": torch.cuda.get_device_name() if device == "cuda" else
        f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "device": device, "target": args.target, **miss.versions(), "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "host": platform.node(), "tree": miss.git_state(),
        "timer": "triton.testing.do_bench" if device == "cuda" else "time.perf_counter",
        "warmup_ms": args.warmup, "rep_ms": args.rep, "rotate_bytes": args.rotate_bytes, "l2_bytes": L2_BYTES,
        "rtol": RTOL, "cache_dir": args.cache_dir, "shapes": [shape_name(s) for s in args.shapes],
        "patterns": args.patterns, "examples": args.examples, "baselines": args.baselines,
        "bytes": "A rows and B columns holding an entry (f16) + int32 indices (csr: nnz + M + 1; coo: 2 nnz) "
                 "+ f32 output (nnz values or M x N)",
        "preprocessing": "cached per pattern object in time_us; first call with a new object in first_call_us",
    }
    print(f"# SDDMM benchmark on {meta['device_name']}; torch {meta['torch']}; target {args.target}; "
          f"tree {meta['tree']}", flush=True)
    results: list[dict] = []
    if args.cpu and any(b in SEEDS for b in args.baselines):
        bad = seed_build_check(args, meta)
        results += [bad] if bad else []

    variants: list[Variant] = []
    for b in args.baselines:
        variants.append(cusparse_variant() if b == "cusparse" else dense_variant(int(args.dense_max_gib * 2**30))
                        if b == "dense" else seed_variant(b, device, args))
    failed = []
    for e in args.examples:
        try:
            variants.append(tkc_variant(e, args))
        except Exception as exc:  # a TkError for an unknown constant, say: a row per group below
            failed.append((e, exc))

    ahead = Ahead(args, [(kind, s["M"], s["N"], s["nnz"]) for s in args.shapes for kind in args.patterns])
    # Build every (example, shape) in worker processes first (nvcc is the slow part) while the
    # patterns are made; the main process then finds the cubins in the shared tkc cache.
    builds = [(os.path.join(ROOT, "examples", f"{miss.split_variant(v.name)[0]}.tk"),
               {"M": s["M"], "N": s["N"], "K": s["K"], "NNZ": s["nnz"]},
               {k: c for k, c in miss.split_variant(v.name)[1].items() if k != "dot_below"})
              for s in args.shapes for v in variants if v.kind == "tkc"
              and (v.output == "values" or 4 * s["M"] * s["N"] <= args.dense_out_max_gib * 2**30)]
    if args.target in ("cuda", "tilelang"):
        meta["prewarm_s"] = miss.prewarm(builds, args.target, args.cache_dir, args.jobs)
        print(f"pre-built {len(builds)} tkc kernels in {meta['prewarm_s']:.1f} s", flush=True)
    meta["pattern_wait_s"] = ahead.wait()
    print(f"patterns ready after {meta['pattern_wait_s']:.1f} s more", flush=True)
    meta["copy"] = miss.copy_bandwidth(timer, device, args.copy_bytes)
    print(f"copy bandwidth: {meta['copy']['tbps']:.3f} TB/s", flush=True)

    groups = []
    try:
        for s in args.shapes:
            for kind in args.patterns:
                made = ahead.pattern((kind, s["M"], s["N"], s["nnz"]))
                if "error" in made:
                    row = {"shape": shape_name(s), **s, "pattern": kind, "variant": "pattern", "kind": "-",
                           "status": "skipped", "time_us": None, "note": f"no {kind} pattern: {made['error']}"}
                    results.append(row)
                    print(f"\n## {shape_name(s)} {kind}: {row['note']}", flush=True)
                    continue
                g = make_group(s, kind, made, device, args, meta["copy"]["tbps"] * 1e12)
                groups.append(run_group(g, variants, failed, args, timer))
                results += groups[-1]["rows"]
                print(f"  [{time.perf_counter() - start:.0f} s so far]", flush=True)
                del g
                if device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        ahead.close()
    meta["seed_kernels"] = next((v.extra["holder"]["fn"].info for v in variants
                                 if v.kind == "seed" and "fn" in v.extra["holder"]), None)
    meta["total_s"] = time.perf_counter() - start

    folder = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(folder, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    with open(os.path.splitext(args.out)[0] + ".md", "w", encoding="utf-8") as f:
        f.write(full_table([r for r in results if r["shape"] != "-"]) + "\n")
    print(f"\nwrote {args.out} and {os.path.splitext(args.out)[0]}.md ({meta['total_s']:.0f} s)\n")
    print(summary(groups, meta))
    print()
    for line in targets(groups):
        print(line)
    bad = [r for r in results if r["status"] in ("WRONG", "error")]
    for r in bad:
        print(f"{r['status']}: {r['shape']} {r['pattern']} {r['variant']}: {r['note']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

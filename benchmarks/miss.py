"""Benchmark MiSS shard-sum-then-gemm: tkc examples vs torch eager vs torch.compile.

    C = sum(A.reshape(M, K/R, R), -2) @ B      A f16[M, K], B f16[R, N] -> C f16[M, N]
    (MiSS, arXiv 2409.15371; seed 000)

On the device machine (one run does everything, prints a markdown table last):

    source .device/env.sh && python3 benchmarks/miss.py --out $OUT/miss.json

On a CPU box (tiny shapes, target tilelang-cpu, wall-clock timer; checks the script end to end):

    python3 benchmarks/miss.py --cpu

Method (see benchmarks/README.md and /work/.library/device/METHOD.md): the device-to-device copy
bandwidth is measured once (bytes read + written); every variant is checked against a float32
reference from the same fp16 inputs before it is timed (max|out-ref|/max|ref| > 1e-2 is WRONG);
times are `triton.testing.do_bench` medians over a rotation of input sets whose total size exceeds
the 50 MiB L2; tkc kernels are compiled (and TileLang's nvcc builds pre-warmed in parallel worker
processes) before any timing. Bytes moved = A + B read once + C written once.
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
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from anywhere without installing
    sys.path.insert(0, ROOT)

GPU_SHAPES = ["M1024K1024N1024R64", "M4096K4096N4096R64", "M16384K4096N4096R64", "M8192K4096N11008R64"]
CPU_SHAPES = ["M64K256N128R32", "M128K512N256R64"]
# Every examples/miss*.tk (seed 000's three variants and tkc's own form), by stem.
EXAMPLES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "examples", "miss*.tk")))
TORCH_VARIANTS = ["eager", "compile"]
DYNAMIC_SUFFIX = "~dyn"  # `miss~dyn`: examples/miss.tk with M dynamic (one compile serves every M)
# `miss_split~model`: the file's `tune` space searched by the cost model per M bucket
# (`tkc.compile(..., schedule="model")`; M dynamic, one compile per bucket), as tkc.integrations.peft uses it
MODEL_SUFFIX = "~model"
RTOL = 1e-2
L2_BYTES = 50 * 2**20


# ----------------------------------------------------------------------------- shapes, bytes

def parse_shape(text: str) -> dict[str, int]:
    """`M4096K4096N4096R64` -> {"M": 4096, "K": 4096, "N": 4096, "R": 64}; K must be a multiple of R."""
    m = re.fullmatch(r"M(\d+)K(\d+)N(\d+)R(\d+)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"shape `{text}` is not of the form M<int>K<int>N<int>R<int>")
    s = dict(zip("MKNR", map(int, m.groups())))
    if s["K"] % s["R"]:
        raise argparse.ArgumentTypeError(f"shape `{text}`: K={s['K']} is not a multiple of R={s['R']}")
    return s


def shape_name(s: dict[str, int]) -> str:
    return f"M{s['M']}K{s['K']}N{s['N']}R{s['R']}"


def input_bytes(s: dict[str, int]) -> int:
    return 2 * (s["M"] * s["K"] + s["R"] * s["N"])


def moved_bytes(s: dict[str, int]) -> int:
    """Fewest bytes through device memory: A and B read once, C written once (all f16)."""
    return input_bytes(s) + 2 * s["M"] * s["N"]


# ----------------------------------------------------------------------------- torch variants

def miss_torch(A, B):
    """The torch form users would write (sum of the K/R shards of width R, then the product)."""
    import torch

    M, K = A.shape
    R = B.shape[0]
    return torch.sum(A.reshape(M, K // R, R), dim=-2) @ B


def reference(A, B):
    """float32 reference from the same fp16 inputs (no TF32: see main)."""
    import torch

    M, K = A.shape
    R = B.shape[0]
    return torch.sum(A.float().reshape(M, K // R, R), dim=-2) @ B.float()


def rel_error(out, ref) -> float:
    """max|out - ref| / max|ref|; NaN if shapes differ or out has non-finite values."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return float("nan")
    out = out.float()
    if not bool(torch.isfinite(out).all()):
        return float("nan")
    scale = ref.abs().max().item() or 1.0
    return (out - ref).abs().max().item() / scale


# ----------------------------------------------------------------------------- timing

# Timer (do_bench median on the GPU, perf_counter on the CPU) and rotating (input sets that
# defeat the L2) live in tkc/bench.py, shared with `tkc tune`; cluster_reduce.py uses them as miss.*.
from tkc.bench import Timer, graph_ms, rotating  # noqa: E402,F401


def copy_bandwidth(timer: Timer, device: str, nbytes: int, graph: bool = False) -> dict:
    """Device-to-device copy of `nbytes`: bytes read + written over the median time, in TB/s.
    With `graph`: CUDA-graph replays of 8 back-to-back copies (`graph_ms`), each a kernel
    (`torch.mul(src, 1, out=dst)`): captured, `dst.copy_(src)` becomes a memcpy node that the copy
    engine runs at 2.44 TB/s on an H100 where the copy kernel moves 3.03 (and do_bench's 3.00;
    2026-11-26)."""
    import torch

    n = nbytes // 2
    src = torch.randn(n, device=device, dtype=torch.float16)
    dst = torch.empty_like(src)
    if graph:
        ms = graph_ms(timer, lambda a, b: torch.mul(a, 1, out=b), [(src, dst)], calls=8)
    else:
        ms = timer(lambda: dst.copy_(src))
    return {"bytes": 2 * nbytes, "time_us": ms * 1e3, "tbps": 2 * nbytes / (ms * 1e-3) / 1e12}


def add_graph(row: dict, fn, s: dict[str, int], sets, timer: Timer, copy_graph_tbps: float) -> None:
    """`row` plus its CUDA-graph time (`--graph`): back-to-back calls over the rotated sets, each
    paying the dirty L2 lines its predecessor left instead of those of do_bench's cache flush
    (a 256 MB write before every timed call); the copy it is compared with is timed the same way."""
    if row["status"] != "ok":
        return
    try:
        ms = graph_ms(timer, fn, sets)
    except Exception as exc:  # a variant that cannot be captured (a host sync inside it)
        row["graph_status"] = exc_note(exc)
        return
    row["graph_us"] = ms * 1e3
    row["graph_frac_copy"] = moved_bytes(s) / (ms * 1e-3) / 1e12 / copy_graph_tbps


# ----------------------------------------------------------------------------- tkc variants

def _prewarm_one(path: str, target: str, cache_dir: str, dims: dict[str, int], consts=None) -> str:
    """Worker: compile one (example, shape) so TileLang's disk cache holds the binary."""
    try:
        import tkc

        tkc.compile(path, target=target, cache_dir=cache_dir, **(consts or {})).specialize(dims)
        return "ok"
    except Exception as exc:  # reported properly by the main process, which compiles again
        return exc_note(exc)


def prewarm(jobs: list[tuple[str, dict[str, int], dict[str, int]]], target: str, cache_dir: str, workers: int) -> float:
    """Compile every job in `workers` spawned processes (nvcc builds are slow and serial in one
    process); the main process then finds the binaries in the shared cache. Returns seconds."""
    t0 = time.perf_counter()
    if workers <= 1 or not jobs:
        return 0.0
    ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
    with cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx) as pool:
        futures = [pool.submit(_prewarm_one, p, target, cache_dir, d, c) for p, d, c in jobs]
        for f in futures:
            try:
                f.result()
            except Exception:  # a crashed worker: the main process will report the error
                pass
    return time.perf_counter() - t0


def first_line_of_tkerror(exc) -> str:
    d = exc.diagnostics[0] if getattr(exc, "diagnostics", None) else None
    return d.message if d else (str(exc).splitlines() or [""])[0]


# ----------------------------------------------------------------------------- the run

def make_sets(s: dict[str, int], device: str, rotate_bytes: int, max_sets: int, seed: int):
    import torch

    n = max(2, min(max_sets, math.ceil(rotate_bytes / input_bytes(s))))
    gen = torch.Generator(device=device).manual_seed(seed)
    sets = []
    for _ in range(n):
        A = torch.randn(s["M"], s["K"], device=device, dtype=torch.float16, generator=gen)
        B = torch.randn(s["R"], s["N"], device=device, dtype=torch.float16, generator=gen)
        sets.append((A, B))
    return sets


def poison_next_output(shape, device):
    """Best effort: leave a NaN-filled block of the output's size in the caching allocator, so a
    kernel that misses elements of its freshly allocated output shows NaN, not stale values."""
    import torch

    t = torch.full(shape, float("nan"), device=device, dtype=torch.float16)
    del t


def check(fn, sets, s, device) -> float:
    """Relative error of fn against the float32 reference on a fresh input set (not a timed one)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(12345)
    A = torch.randn(s["M"], s["K"], device=device, dtype=torch.float16, generator=gen)
    B = torch.randn(s["R"], s["N"], device=device, dtype=torch.float16, generator=gen)
    ref = reference(A, B)
    poison_next_output((s["M"], s["N"]), device)
    out = fn(A, B)
    err = rel_error(out, ref)
    err0 = rel_error(fn(*sets[0]), reference(*sets[0]))  # and on one timed set
    if device == "cuda":
        torch.cuda.synchronize()
    return max(err, err0) if not (math.isnan(err) or math.isnan(err0)) else float("nan")


def bench_variant(name, fn, s, sets, timer, device, copy_tbps, eager_ms, extra=None) -> dict:
    """Check then time one variant; never raises (errors become a status and a note)."""
    import torch

    row = {"shape": shape_name(s), **s, "variant": name, "status": "error", "time_us": None,
           "ratio_to_eager": None, "tbps": None, "frac_copy": None, "rel_err": None, "note": "",
           "n_sets": len(sets), **(extra or {})}
    try:
        err = check(fn, sets, s, device)
        row["rel_err"] = err
        wrong = math.isnan(err) or err > RTOL
        ms = timer(rotating(fn, sets))
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        row["note"] = exc_note(exc)
        row["traceback"] = traceback.format_exc()
        return row
    row["status"] = "WRONG" if wrong else "ok"
    row["time_us"] = ms * 1e3
    row["tbps"] = moved_bytes(s) / (ms * 1e-3) / 1e12
    row["frac_copy"] = row["tbps"] / copy_tbps if copy_tbps else None
    row["ratio_to_eager"] = ms / eager_ms if eager_ms else None
    if wrong:
        row["note"] = f"rel err {err:.3e} > {RTOL:g}"
    return row


def split_variant(variant: str) -> tuple[str, dict[str, int]]:
    """`miss_v3[BM=128;BN=256]` -> ("miss_v3", {"BM": 128, "BN": 256}); a bare name has no overrides.
    A `~dyn` suffix (`miss~dyn`: the kernel compiled once with M dynamic) is not part of either."""
    variant = variant.removesuffix(DYNAMIC_SUFFIX).removesuffix(MODEL_SUFFIX)
    if "[" not in variant:
        return variant, {}
    name, _, body = variant.partition("[")
    consts = {}
    for item in body.rstrip("]").split(";"):
        if item.strip():
            key, _, value = item.partition("=")
            consts[key.strip()] = int(value)
    return name, consts


def tkc_variant(variant, s, args, device):
    """(callable, extra info) for one example at one shape, or (None, row fields) if it does
    not compile. Compilation happens here, outside the timed region."""
    import tkc
    from dsl.diagnostics import TkError

    example, consts = split_variant(variant)
    path = os.path.join(ROOT, "examples", f"{example}.tk")
    dynamic = ("M",) if variant.endswith(DYNAMIC_SUFFIX) else ()
    extra = {"schedule": "model"} if variant.endswith(MODEL_SUFFIX) else {}
    t0 = time.perf_counter()
    try:
        k = tkc.compile(path, target=args.target, cache_dir=args.cache_dir, dynamic=dynamic, **extra, **consts)
        k.specialize({d: s[d] for d in "MKNR"})
    except TkError as exc:
        msg = first_line_of_tkerror(exc)
        status = "does not fit" if "shared memory" in msg else "compile error"
        return None, {"status": status, "note": msg, "diagnostic": exc.render()}
    except Exception as exc:
        return None, error_fields(exc)
    return k, {"compile_s": time.perf_counter() - t0}


def exc_note(exc) -> str:
    """One line for an unexpected exception in a result row: `Type: first line of the message`,
    or the bare type name when the message is empty."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def error_fields(exc) -> dict:
    """Row fields for an unexpected exception (call inside the `except`: keeps the traceback)."""
    return {"status": "error", "note": exc_note(exc), "traceback": traceback.format_exc()}


def fmt(v, spec, empty="-"):
    return empty if v is None else format(v, spec)


def print_row(r):
    if r["time_us"] is None:
        print(f"  {r['variant']:<12} {r['status']}: {r['note']}", flush=True)
        return
    line = (f"  {r['variant']:<12} {r['time_us']:10.1f} us  x{fmt(r['ratio_to_eager'], '.2f'):>6} eager"
            f"  {r['tbps']:7.3g} TB/s  {fmt(r['frac_copy'] and 100 * r['frac_copy'], '5.1f')}% of copy"
            f"  err {fmt(r['rel_err'], '.1e')}")
    if r.get("graph_us"):
        line += f"  graph {r['graph_us']:.1f} us, {100 * r['graph_frac_copy']:.1f}% of the graph copy"
    if r["status"] != "ok":
        line += f"  {r['status']} ({r['note']})"
    print(line, flush=True)


def markdown(results, meta) -> str:
    lines = [f"MiSS on {meta['device_name']} ({meta['date']}); copy {meta['copy']['tbps']:.2f} TB/s; "
             f"median of {meta['timer']}",
             "",
             "| shape | variant | time (us) | x eager | TB/s | % copy | status |",
             "|---|---|---|---|---|---|---|"]
    graph = "copy_graph" in meta
    if graph:
        lines[0] += f"; as CUDA graphs (--graph) copy {meta['copy_graph']['tbps']:.2f} TB/s"
        lines[2] = lines[2].replace(" status |", " graph (us) | graph % copy | status |")
        lines[3] += "---|---|"
    for r in results:
        cells = [r["shape"], r["variant"]]
        if r["time_us"] is None:
            cells += ["-"] * (6 if graph else 4) + [f"{r['status']}: {r['note'][:70]}"]
        else:
            cells += [f"{r['time_us']:.1f}", fmt(r["ratio_to_eager"], ".2f"), f"{r['tbps']:.3g}",
                      fmt(r["frac_copy"] and 100 * r["frac_copy"], ".0f")]
            if graph:
                cells += [fmt(r.get("graph_us"), ".1f"), fmt(r.get("graph_frac_copy") and 100 * r["graph_frac_copy"], ".0f")]
            cells.append(r["status"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("torch", "triton", "tilelang"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def git_state() -> str:
    """The commit measured, with `+dirty` when the working tree differs from it."""
    import subprocess

    try:
        out = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty=+dirty"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def default_out() -> str:
    return os.path.join(os.environ["OUT"], "miss.json") if os.environ.get("OUT") else "miss.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true",
                   help="CPU dry run: tiny shapes, target tilelang-cpu, perf_counter timing, no torch.compile")
    p.add_argument("--shapes", default=None,
                   help=f"comma-separated shapes like M4096K4096N4096R64 (default: {','.join(GPU_SHAPES)}; "
                        f"with --cpu: {','.join(CPU_SHAPES)})")
    p.add_argument("--variants", default=None,
                   help=f"comma-separated subset of {','.join(TORCH_VARIANTS + EXAMPLES)} (default: all; "
                        "with --cpu all but compile); an example may carry schedule constants, "
                        "e.g. 'miss_v3[BM=128;BN=256;threads=256]'")
    p.add_argument("--out", default=default_out(), help="JSON results (default: $OUT/miss.json or ./miss.json)")
    p.add_argument("--warmup", type=float, default=None, help="warm-up per variant in ms (default 100; --cpu 20)")
    p.add_argument("--rep", type=float, default=None, help="timed repetitions per variant in ms (default 300; --cpu 200)")
    p.add_argument("--rotate-mib", type=float, default=None,
                   help="total size of the rotated input sets in MiB (default 4 x the 50 MiB L2; --cpu 64)")
    p.add_argument("--max-sets", type=int, default=100, help="at most this many rotated input sets")
    p.add_argument("--copy-mib", type=float, default=None, help="bytes copied to measure bandwidth (default 1024; --cpu 64)")
    p.add_argument("--graph", action="store_true",
                   help="also time the copy and every variant as CUDA-graph replays of back-to-back calls over "
                        "the rotated sets (each call then pays its predecessor's dirty L2 lines, not those of "
                        "do_bench's 256 MB cache flush before every timed call); ignored with --cpu")
    p.add_argument("--cache-dir", default=None, help="tkc cache (default: a fresh temporary directory)")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes that pre-build the tkc kernels in parallel (default: min(8, CPUs); 1 = none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default=None, choices=("tilelang", "tilelang-cpu", "cuda"),
                   help="tkc backend for the examples (default tilelang; --cpu tilelang-cpu)")
    args = p.parse_args(argv)
    args.target = args.target or ("tilelang-cpu" if args.cpu else "tilelang")
    args.shapes = [parse_shape(t) for t in (args.shapes or ",".join(CPU_SHAPES if args.cpu else GPU_SHAPES)).split(",")]
    known = TORCH_VARIANTS + EXAMPLES
    if args.variants:
        args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        bad = [v for v in args.variants if split_variant(v)[0] not in known]
        if bad:
            p.error(f"unknown variant(s) {', '.join(bad)}; known: {', '.join(known)}")
    else:
        args.variants = [v for v in known if not (args.cpu and v == "compile")]
    args.warmup = args.warmup if args.warmup is not None else (20 if args.cpu else 100)
    args.rep = args.rep if args.rep is not None else (200 if args.cpu else 300)
    args.rotate_bytes = int((args.rotate_mib if args.rotate_mib is not None else (64 if args.cpu else 4 * 50)) * 2**20)
    args.copy_bytes = int((args.copy_mib if args.copy_mib is not None else (64 if args.cpu else 1024)) * 2**20)
    args.jobs = args.jobs if args.jobs is not None else min(8, os.cpu_count() or 1)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cache_dir is None:
        args.cache_dir = tempfile.mkdtemp(prefix="tkc-bench-miss-")
    # TileLang's cache goes inside tkc's; set before anything imports tilelang (worker processes
    # inherit the environment).
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(args.cache_dir, "tilelang"))
    import torch

    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run on the device machine, or pass --cpu for the CPU dry run", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference must be float32
    torch.backends.cudnn.allow_tf32 = False
    timer = Timer(args.cpu, args.warmup, args.rep)
    examples = [v for v in args.variants if split_variant(v)[0] in EXAMPLES]
    meta = {
        "device_name": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "device": device, "target": args.target, **versions(),
        "cuda": torch.version.cuda, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "host": platform.node(), "tree": git_state(),
        "timer": "triton.testing.do_bench" if device == "cuda" else "time.perf_counter",
        "warmup_ms": args.warmup, "rep_ms": args.rep, "rotate_bytes": args.rotate_bytes, "l2_bytes": L2_BYTES,
        "rtol": RTOL, "cache_dir": args.cache_dir,
    }
    print(f"# MiSS benchmark on {meta['device_name']}; torch {meta['torch']}, triton {meta['triton']}, "
          f"tilelang {meta['tilelang']}; target {args.target}; tree {meta['tree']}", flush=True)

    # Pre-build every tkc kernel in parallel (nvcc is the slow part); errors are re-raised and
    # reported by the main process's own compile below.
    jobs = [(os.path.join(ROOT, "examples", f"{split_variant(e)[0]}.tk"), {d: s[d] for d in "MKNR"},
             {**split_variant(e)[1], **({"schedule": "model"} if e.endswith(MODEL_SUFFIX) else {})})
            for s in args.shapes for e in examples if not e.endswith(DYNAMIC_SUFFIX)]
    meta["prewarm_s"] = prewarm(jobs, args.target, args.cache_dir, args.jobs)
    if meta["prewarm_s"]:
        print(f"pre-built {len(jobs)} tkc kernels in {meta['prewarm_s']:.1f} s with {min(args.jobs, len(jobs))} processes",
              flush=True)

    meta["copy"] = copy_bandwidth(timer, device, args.copy_bytes)
    copy_tbps = meta["copy"]["tbps"]
    print(f"copy bandwidth: {copy_tbps:.3f} TB/s ({meta['copy']['bytes'] / 2**20:.0f} MiB read + written "
          f"in {meta['copy']['time_us']:.1f} us)", flush=True)
    graph = args.graph and device == "cuda"
    if graph:
        meta["copy_graph"] = copy_bandwidth(timer, device, args.copy_bytes, graph=True)
        print(f"copy bandwidth as CUDA graphs: {meta['copy_graph']['tbps']:.3f} TB/s", flush=True)

    compiled = torch.compile(miss_torch, dynamic=False) if "compile" in args.variants else None
    results = []
    for s in args.shapes:
        name = shape_name(s)
        sets = make_sets(s, device, args.rotate_bytes, args.max_sets, args.seed)
        print(f"\n## {name}: {moved_bytes(s) / 2**20:.1f} MiB moved, floor {moved_bytes(s) / (copy_tbps * 1e12) * 1e6:.1f} us "
              f"at copy bandwidth; {len(sets)} rotated input sets ({len(sets) * input_bytes(s) / 2**20:.0f} MiB)",
              flush=True)
        eager = bench_variant("eager", miss_torch, s, sets, timer, device, copy_tbps, None)
        if graph:
            add_graph(eager, miss_torch, s, sets, timer, meta["copy_graph"]["tbps"])
        eager_ms = eager["time_us"] / 1e3 if eager["time_us"] else None
        if eager_ms:
            eager["ratio_to_eager"] = 1.0
        if "eager" in args.variants:
            results.append(eager)
            print_row(eager)
        for v in args.variants:
            if v == "eager":
                continue
            if v == "compile":
                t0 = time.perf_counter()
                try:
                    compiled(*sets[0])  # compiles for this shape, outside the timed region
                    if device == "cuda":
                        torch.cuda.synchronize()
                    extra = {"compile_s": time.perf_counter() - t0}
                except Exception as exc:
                    row = {"shape": name, **s, "variant": v, "status": "error", "time_us": None,
                           "note": exc_note(exc)}
                    results.append(row)
                    print_row(row)
                    continue
                row = bench_variant(v, compiled, s, sets, timer, device, copy_tbps, eager_ms, extra)
                if graph:
                    add_graph(row, compiled, s, sets, timer, meta["copy_graph"]["tbps"])
            else:
                k, extra = tkc_variant(v, s, args, device)
                if k is None:
                    row = {"shape": name, **s, "variant": v, "time_us": None, **extra}
                else:
                    row = bench_variant(v, k, s, sets, timer, device, copy_tbps, eager_ms, extra)
                    if graph:
                        add_graph(row, k, s, sets, timer, meta["copy_graph"]["tbps"])
            results.append(row)
            print_row(row)
        # Time eager again: the spread between the two runs is the noise floor of this shape.
        again = bench_variant("eager", miss_torch, s, sets, timer, device, copy_tbps, eager_ms)
        if eager_ms and again["time_us"]:
            spread = abs(again["time_us"] / 1e3 - eager_ms) / eager_ms
            eager["eager_again_us"] = again["time_us"]
            print(f"  (eager again: {again['time_us']:.1f} us, {100 * spread:.1f}% from the first run)", flush=True)
        del sets
        if device == "cuda":
            torch.cuda.empty_cache()

    out = {"meta": meta, "results": results}
    folder = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(folder, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"\nwrote {args.out}\n")
    print(markdown(results, meta))
    bad = [r for r in results if r["status"] in ("WRONG", "error")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

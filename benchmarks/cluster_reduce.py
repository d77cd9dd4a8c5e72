"""Benchmark the 2-block cluster reduce: seed 001's kernels, tkc's examples and torch.

    Y[b] = stage(X[b] + X[b ^ 1])     X, Y f16[B, N], B = 2 x clusters, N = 16384
    stage: LINEAR = identity, FFN = relu                      (seed 001; issue 3, item 6)

On the device machine (one run does everything, prints a markdown table last; the seed file must
travel with the tree, see benchmarks/README.md):

    source .device/env.sh && python3 benchmarks/cluster_reduce.py --out $OUT/cluster_reduce.json

On a CPU box (tiny sizes, no CUDA kernels, wall-clock timer; still extracts the seed kernels and
compiles them with `nvcc -arch=sm_90a -c` and `-cubin`):

    python3 benchmarks/cluster_reduce.py --cpu

Variants, per cluster count and stage:
- seed_baseline, seed_dsmem: seed 001's kernels compiled as-is (benchmarks/seed_kernels.py). As the
  seed wrote them they index by cluster rank only, so every cluster reads input rows 0-1 and writes
  output rows 0-1; they are checked against exactly that (row r = stage(x[r] + x[(r + 1) % 2])),
  several times on fresh inputs, and marked WRONG (k of n runs) when an output differs.
- eager, compile: `X + X.view(-1, 2, N).flip(1).reshape(B, N)` (then relu), and torch.compile of it.
- hbm:<target>, dsmem:<target>, dsmem_pull:<target>: examples/cluster_reduce_{hbm,dsmem,dsmem_pull}.tk through
  `tkc.compile(path, target=<target>, STAGE=0|1)`, targets cuda and tilelang; a missing file or a
  TkError skips the row with a note.

Bytes: every row's TB/s counts B x N x 2 bytes read plus B x N x 2 bytes written (each block's
16384 f16 read once and its result written once: the floor ANCHORS.md uses, 33 us at 1056
clusters on an H200). The seed kernels touch only two rows' worth of distinct data, so for them
this is the "effective" traffic of the seed's intent, one 2-block problem per cluster.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, HERE):  # run from anywhere without installing; `miss` and `seed_kernels` live beside us
    if p not in sys.path:
        sys.path.insert(0, p)

import miss  # noqa: E402  (Timer, rotating, copy bandwidth, prewarm, run metadata)
import seed_kernels  # noqa: E402

GPU_CLUSTERS = [1, 132, 1056]
CPU_CLUSTERS = [1, 2, 3]
STAGE_NAMES = ["LINEAR", "FFN"]  # STAGE = 0, 1 (the seed's enum order)
SEED_VARIANTS = ["seed_baseline", "seed_dsmem"]
TORCH_VARIANTS = ["eager", "compile"]
EXAMPLES = {"hbm": "cluster_reduce_hbm", "dsmem": "cluster_reduce_dsmem", "dsmem_pull": "cluster_reduce_dsmem_pull"}  # variant -> examples/<stem>.tk
GPU_TARGETS = ["cuda", "tilelang"]
CPU_TARGETS = ["tilelang-cpu", "interp"]  # interp: tkc's reference interpreter (clusters simulated)
CPU_SIZE = 256
SEED_KERNEL = {"seed_baseline": "cluster_reduce_baseline", "seed_dsmem": "cluster_reduce_dsmem"}
# Bytes each variant issues to global memory per element of a row, for the JSON (not for TB/s):
# the baseline reads its own half and the peer's half and writes; the DSMEM kernel gets the peer's
# half from the peer's shared memory.
SEED_ISSUED_PER_ELEMENT = {"seed_baseline": 3, "seed_dsmem": 2}
BYTES_DEFINITION = ("bytes = B x N x 2 (X read once) + B x N x 2 (Y written once), B = 2 x clusters, f16; "
                    "for the seed kernels the 'effective' traffic of one 2-block problem per cluster "
                    "(as written, they read and write only rows 0-1, which stay in L2)")


# ----------------------------------------------------------------------------- sizes, bytes

def rows(clusters: int) -> int:
    return 2 * clusters


def moved_bytes(clusters: int, n: int) -> int:
    """X read once + Y written once, f16: 1056 clusters x 2 blocks x 16384 x 2 B x 2 = 138 MB."""
    return rows(clusters) * n * 2 * 2


# ----------------------------------------------------------------------------- torch forms

def cluster_reduce_torch(X, stage: int):
    """The torch form users would write: add the peer row (b ^ 1), then relu for FFN."""
    import torch

    B, N = X.shape
    Y = X + X.view(B // 2, 2, N).flip(1).reshape(B, N)
    return torch.relu(Y) if stage == 1 else Y


def torch_linear(X):
    return cluster_reduce_torch(X, 0)


def torch_ffn(X):
    return cluster_reduce_torch(X, 1)


def reference(X, stage: int):
    """float32 from the same f16 inputs. The sum of two f16 values rounded once to f16 is what every
    correct kernel returns (f32 holds it exactly enough: 24 >= 2 x 11 + 2 bits), so outputs are
    compared with reference(...).half() bit for bit, up to --atol."""
    import torch

    Xf = X.float()
    B, N = X.shape
    Y = Xf + Xf.view(B // 2, 2, N).flip(1).reshape(B, N)
    return torch.relu(Y) if stage == 1 else Y


def seed_reference(X, stage: int, n: int):
    """What the seed kernels compute as written: rows 0 and 1 only, row r + row (r + 1) % 2."""
    return reference(X.reshape(-1)[: 2 * n].view(2, n), stage)


def compare(out, ref32, atol: float) -> dict:
    """Mismatching elements (|out - f16(ref)| > atol, NaN counts) and max |out - ref| / max |ref|."""
    import torch

    if tuple(out.shape) != tuple(ref32.shape):
        return {"mismatches": -1, "rel_err": float("nan"), "note": f"shape {tuple(out.shape)} != {tuple(ref32.shape)}"}
    o = out.float()
    diff = (o - ref32.half().float()).abs()
    bad = int((~(diff <= atol)).sum().item())
    finite = bool(torch.isfinite(o).all())
    scale = ref32.abs().max().item() or 1.0
    rel = (o - ref32).abs().max().item() / scale if finite else float("nan")
    return {"mismatches": bad, "rel_err": rel}


def self_test(atol: float) -> None:
    """The checker flags the seed's race (the peer read its own sum: a + 2b) and passes the truth."""
    import torch

    g = torch.Generator().manual_seed(7)
    X = torch.randn(4, 64, generator=g).half()
    ref = reference(X, 0)
    assert compare(ref.half(), ref, atol)["mismatches"] == 0
    racy = ref.half().clone()
    racy[1, 5:9] = (X[1, 5:9].float() + 2 * X[0, 5:9].float()).half()
    assert compare(racy, ref, atol)["mismatches"] >= 1
    nan = ref.half().clone()
    nan[3, 0] = float("nan")
    assert compare(nan, ref, atol)["mismatches"] == 1
    assert torch.equal(cluster_reduce_torch(X, 1).float(), reference(X, 1).half().float())


# ----------------------------------------------------------------------------- one row

def new_row(clusters, stage, variant, n, **extra) -> dict:
    return {"clusters": clusters, "blocks": rows(clusters), "N": n, "stage": STAGE_NAMES[stage], "variant": variant,
            "status": "error", "time_us": None, "tbps": None, "frac_copy": None, "ratio_to_seed_baseline": None,
            "speedup_vs_seed_baseline": None,
            "bytes": moved_bytes(clusters, n), "check_runs": 0, "wrong_runs": None, "mismatches_max": None,
            "rel_err_max": None, "floor_us": None, "note": "", **extra}


def run_checks(fn, make_input, ref_of, runs: int, device: str, atol: float, poison) -> dict:
    """Run `fn` on `runs` fresh inputs (output poisoned with NaN first) and compare each result."""
    import torch

    wrong, worst_bad, worst_rel, notes = 0, 0, 0.0, []
    for i in range(runs):
        X = make_input(1000 + i)
        ref = ref_of(X)
        poison()
        out = fn(X)
        if device == "cuda":
            torch.cuda.synchronize()  # raises on a kernel fault
        c = compare(out, ref, atol)
        if c.get("note"):
            notes.append(c["note"])
        if c["mismatches"] != 0:
            wrong += 1
        worst_bad = max(worst_bad, c["mismatches"] if c["mismatches"] >= 0 else out.numel())
        worst_rel = float("nan") if math.isnan(c["rel_err"]) or math.isnan(worst_rel) else max(worst_rel, c["rel_err"])
    return {"check_runs": runs, "wrong_runs": wrong, "mismatches_max": worst_bad, "rel_err_max": worst_rel,
            "check_note": "; ".join(sorted(set(notes)))}


def finish_row(row, ms, copy_tbps) -> dict:
    row["time_us"] = ms * 1e3
    row["tbps"] = row["bytes"] / (ms * 1e-3) / 1e12
    row["frac_copy"] = row["tbps"] / copy_tbps if copy_tbps else None
    if row["wrong_runs"]:
        row["status"] = f"WRONG ({row['wrong_runs']} of {row['check_runs']} runs)"
        row["note"] = (row["note"] + "; " if row["note"] else "") + \
            f"up to {row['mismatches_max']} elements differ, max rel err {row['rel_err_max']:.3g}"
    else:
        row["status"] = "ok"
    return row


def bench(row, fn, make_input, ref_of, sets, args, device, timer, copy_tbps, poison) -> dict:
    """Check `fn` (X -> Y) then time it over the rotated input sets; never raises."""
    import torch

    try:
        row.update(run_checks(fn, make_input, ref_of, args.check_runs, device, args.atol, poison))
        ms = timer(miss.rotating(fn, [(X,) for X in sets]))
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        row.update(miss.error_fields(exc))
        return row
    return finish_row(row, ms, copy_tbps)


# ----------------------------------------------------------------------------- tkc examples

def load_examples(args):
    """{(variant, target, stage): Kernel or {"status", "note", ...}} for every example asked for.
    Only parses here (tkc.compile is lazy); shapes are built in prewarm and in the main loop."""
    import tkc
    from dsl.diagnostics import TkError

    out = {}
    for v in args.variants:
        base, consts = miss.split_variant(v)
        if base not in EXAMPLES:
            continue
        path = os.path.join(ROOT, "examples", f"{EXAMPLES[base]}.tk")
        for t in args.targets:
            for s in args.stages:
                if not os.path.exists(path):
                    out[(v, t, s)] = {"status": "skipped", "note": f"examples/{EXAMPLES[base]}.tk does not exist yet"}
                    continue
                try:
                    out[(v, t, s)] = tkc.compile(path, target=t, cache_dir=args.cache_dir, **{**consts, "STAGE": s})
                except TkError as exc:
                    out[(v, t, s)] = {"status": "skipped", "note": miss.first_line_of_tkerror(exc),
                                      "diagnostic": exc.render()}
                except Exception as exc:
                    out[(v, t, s)] = miss.error_fields(exc)
    return out


def example_dims(kernel, clusters, n):
    """The kernel's problem dims for X f16[2 x clusters, n], from its own input declaration."""
    import torch

    return kernel.bind_dims((torch.empty(rows(clusters), n, dtype=torch.float16, device="meta"),))


def specialize(kernel, clusters, n):
    """Build for this shape (outside any timing); (None, fields) when it does not compile."""
    from dsl.diagnostics import TkError

    t0 = time.perf_counter()
    try:
        kernel.specialize(example_dims(kernel, clusters, n))
    except TkError as exc:
        return None, {"status": "skipped", "note": miss.first_line_of_tkerror(exc), "diagnostic": exc.render()}
    except Exception as exc:
        return None, miss.error_fields(exc)
    return kernel, {"compile_s": time.perf_counter() - t0}


# ----------------------------------------------------------------------------- output

fmt = miss.fmt


def relate(row, base_ms):
    """Set the row's time relative to the seed baseline's (`ratio_to_seed_baseline`: time /
    baseline time; `speedup_vs_seed_baseline`: its inverse), once the baseline was timed."""
    if base_ms and row["time_us"]:
        row["ratio_to_seed_baseline"] = row["time_us"] / 1e3 / base_ms
        row["speedup_vs_seed_baseline"] = base_ms / (row["time_us"] / 1e3)


def print_row(r):
    name = r["variant"]
    if r["time_us"] is None:
        print(f"  {name:<15} {r['status']}: {r['note']}", flush=True)
        return
    line = (f"  {name:<15} {r['time_us']:9.1f} us  {r['tbps']:6.3f} TB/s  {fmt(r['frac_copy'] and 100 * r['frac_copy'], '5.1f')}% copy"
            f"  {fmt(r['speedup_vs_seed_baseline'], '.2f')}x faster than the seed baseline  {r['status']}")
    if r["status"] != "ok" and r["note"]:
        line += f" ({r['note']})"
    print(line, flush=True)


def markdown(results, meta) -> str:
    lines = [f"Cluster reduce on {meta['device_name']} ({meta['date']}); copy {fmt(meta['copy'] and meta['copy']['tbps'], '.2f')} TB/s; "
             f"N = {meta['N']} f16 per block; seed kernels at {meta['seed_threads']} threads; median of {meta['timer']}; "
             f"TB/s on X read + Y written once; checks: {meta['check_runs']} runs each",
             "",
             "| clusters | stage | variant | time (us) | TB/s | % copy | % same-size copy | speedup vs seed baseline | status |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["time_us"] is None:
            lines.append(f"| {r['clusters']} | {r['stage']} | {r['variant']} | - | - | - | - | - | {r['status']}: {r['note'][:70]} |")
            continue
        lines.append(f"| {r['clusters']} | {r['stage']} | {r['variant']} | {r['time_us']:.1f} | {r['tbps']:.3g} "
                     f"| {fmt(r['frac_copy'] and 100 * r['frac_copy'], '.0f')} "
                     f"| {fmt(r.get('frac_same_size_copy') and 100 * r['frac_same_size_copy'], '.0f')} "
                     f"| {fmt(r['speedup_vs_seed_baseline'], '.2f')} "
                     f"| {r['status']} |")
    return "\n".join(lines)


def default_out() -> str:
    return os.path.join(os.environ["OUT"], "cluster_reduce.json") if os.environ.get("OUT") else "cluster_reduce.json"


def parse_list(text, known, what, p, overridable=()):
    """Comma-separated names from `known`; names in `overridable` may carry schedule constants,
    `dsmem[threads=1024]` (as in benchmarks/miss.py)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = []
    for t in items:
        try:
            base, consts = miss.split_variant(t)
        except ValueError:
            base, consts = None, {}
        if base not in known or (consts and base not in overridable) or ("[" in t and not consts):
            bad.append(t)
    if bad:
        p.error(f"unknown {what} {', '.join(bad)}; known: {', '.join(known)}")
    return items


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true",
                   help=f"CPU dry run: N={CPU_SIZE}, clusters {','.join(map(str, CPU_CLUSTERS))}, no CUDA kernels, "
                        "target tilelang-cpu, perf_counter timing, no torch.compile; still extracts the seed "
                        "kernels and compiles them with nvcc -arch=sm_90a (-c and -cubin)")
    p.add_argument("--clusters", default=None,
                   help=f"comma-separated cluster counts (default {','.join(map(str, GPU_CLUSTERS))}; "
                        f"--cpu {','.join(map(str, CPU_CLUSTERS))})")
    p.add_argument("--stages", default="LINEAR,FFN", help="comma-separated subset of LINEAR,FFN (default both)")
    all_variants = SEED_VARIANTS + TORCH_VARIANTS + list(EXAMPLES)
    p.add_argument("--variants", default=None,
                   help=f"comma-separated subset of {','.join(all_variants)} (default: all; --cpu all but compile); "
                        "an example may carry schedule constants, e.g. 'dsmem[threads=1024]'")
    p.add_argument("--targets", default=None,
                   help=f"tkc targets for the examples (default {','.join(GPU_TARGETS)}; --cpu {','.join(CPU_TARGETS)})")
    p.add_argument("--size", type=int, default=None,
                   help=f"f16 elements per block, N (default: the seed's 'Elements per Block', 16384; --cpu {CPU_SIZE})")
    p.add_argument("--seed-file", default=None,
                   help="seed 001 (a path or glob; default ../shared/seeds/001_*.txt from the repo root, then "
                        "shared/seeds/ and .device/seeds/ inside it)")
    p.add_argument("--seed-threads", type=int, default=seed_kernels.DEFAULT_THREADS,
                   help="threads per block for the seed kernels (the seed names none; default 512)")
    p.add_argument("--seed-compiler", choices=["nvcc", "nvrtc"], default="nvcc",
                   help="build the seed unit with nvcc -arch=sm_90a -cubin (default) or NVRTC through CuPy")
    p.add_argument("--nvcc", default=None, help="nvcc to use (default: PATH, CUDA_HOME, /usr/local/cuda)")
    p.add_argument("--check-runs", type=int, default=None,
                   help="fresh-input correctness runs per row before timing (default 10; --cpu 2)")
    p.add_argument("--atol", type=float, default=0.0,
                   help="allowed |out - f16(ref)| per element (default 0: bit for bit, see reference())")
    p.add_argument("--out", default=default_out(), help="JSON results (default: $OUT/cluster_reduce.json or ./cluster_reduce.json)")
    p.add_argument("--warmup", type=float, default=None, help="warm-up per variant in ms (default 100; --cpu 20)")
    p.add_argument("--rep", type=float, default=None, help="timed repetitions per variant in ms (default 300; --cpu 100)")
    p.add_argument("--rotate-mib", type=float, default=None,
                   help="total size of the rotated input sets in MiB (default 4 x the 50 MiB L2; --cpu 8)")
    p.add_argument("--max-sets", type=int, default=100, help="at most this many rotated input sets")
    p.add_argument("--copy-mib", type=float, default=None, help="bytes copied to measure bandwidth (default 1024; --cpu 64)")
    p.add_argument("--cache-dir", default=None, help="tkc cache (default: a fresh temporary directory)")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes that pre-build the tkc kernels in parallel (default: min(8, CPUs); 1 = none)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the timed input sets")
    args = p.parse_args(argv)
    args.clusters = [int(c) for c in (args.clusters or ",".join(map(str, CPU_CLUSTERS if args.cpu else GPU_CLUSTERS))).split(",")]
    if any(c < 1 for c in args.clusters):
        p.error("cluster counts must be >= 1")
    args.stages = [STAGE_NAMES.index(s) for s in parse_list(args.stages.upper(), STAGE_NAMES, "stage(s)", p)]
    if args.variants:
        args.variants = parse_list(args.variants, all_variants, "variant(s)", p, overridable=EXAMPLES)
    else:
        args.variants = [v for v in all_variants if not (args.cpu and v == "compile")]
    # Any target name goes: one tkc cannot launch is reported as a skipped row with tkc's diagnostic.
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else \
        (CPU_TARGETS if args.cpu else GPU_TARGETS)
    if not 1 <= args.seed_threads <= 1024:
        p.error("--seed-threads must be in 1..1024")
    args.check_runs = args.check_runs if args.check_runs is not None else (2 if args.cpu else 10)
    args.warmup = args.warmup if args.warmup is not None else (20 if args.cpu else 100)
    args.rep = args.rep if args.rep is not None else (100 if args.cpu else 300)
    args.rotate_bytes = int((args.rotate_mib if args.rotate_mib is not None else (8 if args.cpu else 4 * 50)) * 2**20)
    args.copy_bytes = int((args.copy_mib if args.copy_mib is not None else (64 if args.cpu else 1024)) * 2**20)
    args.jobs = args.jobs if args.jobs is not None else min(8, os.cpu_count() or 1)
    return args


# ----------------------------------------------------------------------------- the run

def read_seed(args):
    """(Seed, None) or (None, why not)."""
    try:
        return seed_kernels.load_seed(seed_kernels.find_seed_file(args.seed_file)), None
    except (seed_kernels.SeedError, OSError) as exc:
        return None, str(exc)


def prepare_seed(seed, args, device, meta, work_dir):
    """Build the seed kernels. On the GPU: a loaded SeedModule. With --cpu: compile checks only
    (nvcc -c and -cubin of the generated unit, kernel names found in the cubin). Returns
    (module or None, status and note for the seed rows when there is no module)."""
    info = {"file": seed.path, "sha256": seed.sha256, "cluster_dims": seed.cluster_dims,
            "elements_per_block": seed.elements_per_block, "threads": args.seed_threads,
            "dynamic_smem_bytes": args.size * 2, "grid": "cluster_size x clusters blocks"}
    meta["seed"] = info
    print(f"seed {os.path.basename(seed.path)}: {', '.join(seed_kernels.KERNELS)}; cluster dims {seed.cluster_dims}; "
          f"{args.seed_threads} threads, {args.size * 2} B dynamic smem per block", flush=True)
    if device == "cpu":
        tu = seed_kernels.translation_unit(seed)
        try:
            for kind in ("obj", "cubin"):
                b = seed_kernels.compile_nvcc(tu, work_dir, kind, args.nvcc)
                info[f"nvcc_{kind}"] = {"command": " ".join(b.command), "seconds": b.seconds}
                print(f"seed unit: nvcc {kind} ok in {b.seconds:.1f} s: {' '.join(b.command[:-3])} ...", flush=True)
                if kind == "cubin":
                    info["kernels"] = seed_kernels.check_cubin_symbols(b.path)
                    info["ptxas"] = seed_kernels.ptxas_report(b.log)
                    print(f"seed cubin holds {', '.join(info['kernels'])}", flush=True)
        except seed_kernels.SeedError as exc:
            info["error"] = str(exc)
            print(f"seed unit FAILED to compile:\n{exc}", flush=True)
            return None, "error", f"seed unit does not compile: {str(exc).splitlines()[0]}"
        return None, "skipped", "needs CUDA (seed unit built here: nvcc -c, -cubin ok)"
    compiler = args.seed_compiler
    if compiler == "nvcc" and not seed_kernels.find_nvcc(args.nvcc):
        compiler = "nvrtc"
        info["compiler_note"] = "nvcc not found: NVRTC through CuPy"
    try:
        mod = seed_kernels.SeedModule(seed, compiler, work_dir, args.nvcc)
    except Exception as exc:
        info["error"] = traceback.format_exc()
        print(f"seed kernels could not be built or loaded: {type(exc).__name__}: {exc}", flush=True)
        return None, "error", f"seed kernels not built: {miss.exc_note(exc)}"
    info.update(mod.info)
    print(f"seed kernels built with {compiler} and loaded in {mod.info['build_s']:.1f} s", flush=True)
    return mod, "ok", ""


def make_sets(clusters, n, device, rotate_bytes, max_sets, seed):
    import torch

    nbytes = rows(clusters) * n * 2
    count = max(2, min(max_sets, math.ceil(rotate_bytes / nbytes)))
    gen = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(rows(clusters), n, device=device, dtype=torch.float16, generator=gen) for _ in range(count)]


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cache_dir is None:
        args.cache_dir = tempfile.mkdtemp(prefix="tkc-bench-cluster-")
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(args.cache_dir, "tilelang"))
    import torch

    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run on the device machine, or pass --cpu for the CPU dry run", file=sys.stderr)
        return 2
    self_test(args.atol)
    # N: the seed's "Elements per Block" (16384) unless --size or --cpu says otherwise.
    seed, seed_error = read_seed(args)
    args.size = args.size or (CPU_SIZE if args.cpu else ((seed and seed.elements_per_block) or 16384))
    n = args.size
    timer = miss.Timer(args.cpu, args.warmup, args.rep)
    vers = miss.versions()
    try:
        from importlib import metadata

        vers["cupy"] = metadata.version("cupy-cuda13x")
    except Exception:
        vers["cupy"] = None
    meta = {
        "device_name": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "device": device, "targets": args.targets, **vers, "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]), "host": platform.node(), "tree": miss.git_state(),
        "timer": "triton.testing.do_bench" if device == "cuda" else "time.perf_counter",
        "warmup_ms": args.warmup, "rep_ms": args.rep, "rotate_bytes": args.rotate_bytes, "l2_bytes": miss.L2_BYTES,
        "N": n, "clusters": args.clusters, "stages": [STAGE_NAMES[s] for s in args.stages],
        "seed_threads": args.seed_threads, "check_runs": args.check_runs, "atol": args.atol,
        "bytes_definition": BYTES_DEFINITION, "seed_issued_bytes_per_element": SEED_ISSUED_PER_ELEMENT,
        "cache_dir": args.cache_dir, "copy": None, "seed": None,
    }
    print(f"# cluster reduce benchmark on {meta['device_name']}; torch {meta['torch']}, triton {meta['triton']}, "
          f"cupy {meta['cupy']}, tilelang {meta['tilelang']}; N={n}; tree {meta['tree']}", flush=True)

    work_dir = tempfile.mkdtemp(prefix="tkc-seed-")
    seed_mod, seed_status, seed_note = None, "skipped", "not asked for"
    if any(v in SEED_VARIANTS for v in args.variants):
        if seed is None:
            meta["seed"] = {"error": seed_error}
            seed_note = f"seed not available: {seed_error.splitlines()[0]}"
            print(seed_note, flush=True)
        else:
            seed_mod, seed_status, seed_note = prepare_seed(seed, args, device, meta, work_dir)

    # tkc examples: parse now, pre-build every (example, target, stage, clusters) in parallel.
    examples = load_examples(args)
    jobs = []
    for (v, t, s), k in examples.items():
        if not isinstance(k, dict):
            for c in args.clusters:
                try:
                    jobs.append((k.path, example_dims(k, c, n), {**miss.split_variant(v)[1], "STAGE": s}, t))
                except Exception:  # reported by the main loop's own specialize
                    pass
    jobs = [j for j in jobs if j[3] != "interp"]  # interp builds in memory: nothing to share through the cache
    meta["prewarm_s"] = sum(miss.prewarm([(p, d, c) for p, d, c, tt in jobs if tt == t], t, args.cache_dir, args.jobs)
                            for t in args.targets)
    if meta["prewarm_s"]:
        print(f"pre-built {len(jobs)} tkc kernels in {meta['prewarm_s']:.1f} s", flush=True)

    meta["copy"] = miss.copy_bandwidth(timer, device, args.copy_bytes)
    copy_tbps = meta["copy"]["tbps"]
    print(f"copy bandwidth: {copy_tbps:.3f} TB/s ({meta['copy']['bytes'] / 2**20:.0f} MiB read + written "
          f"in {meta['copy']['time_us']:.1f} us)", flush=True)

    compiled = {s: torch.compile(torch_ffn if s else torch_linear, dynamic=False) for s in args.stages} \
        if "compile" in args.variants else {}
    results = []
    for c in args.clusters:
        B = rows(c)
        sets = make_sets(c, n, device, args.rotate_bytes, args.max_sets, args.seed)
        gen_dev = device

        def make_input(i, B=B):
            g = torch.Generator(device=gen_dev).manual_seed(i)
            return torch.randn(B, n, device=gen_dev, dtype=torch.float16, generator=g)

        def poison_full(B=B):
            miss.poison_next_output((B, n), device)

        # The same bytes as one torch device-to-device copy (X -> a [B, N] buffer, rotated like the
        # variants): what this size can reach; a short kernel does not reach the large copy's rate.
        y_copy = torch.empty(B, n, device=device, dtype=torch.float16)
        same_copy_us = timer(miss.rotating(lambda X, y=y_copy: y.copy_(X), [(X,) for X in sets])) * 1e3
        del y_copy
        print(f"\n# {c} clusters: torch copy of the same bytes {same_copy_us:.1f} us "
              f"({moved_bytes(c, n) / (same_copy_us * 1e-6) / 1e12:.3f} TB/s)", flush=True)
        for s in args.stages:
            floor_us = moved_bytes(c, n) / (copy_tbps * 1e12) * 1e6
            print(f"\n## {c} clusters ({B} blocks x {n} f16), {STAGE_NAMES[s]}: {moved_bytes(c, n) / 1e6:.2f} MB moved, "
                  f"floor {floor_us:.1f} us at copy bandwidth; {len(sets)} rotated input sets", flush=True)
            ref_ours = (lambda X, s=s: reference(X, s))
            base_ms = None
            group = []
            for v in args.variants:
                if v in SEED_VARIANTS:
                    row = new_row(c, s, v, n, threads=args.seed_threads,
                                  issued_bytes=SEED_ISSUED_PER_ELEMENT[v] * B * n * 2)
                    if seed_mod is None:
                        row.update(status=seed_status, note=seed_note)
                        group.append(row)
                        print_row(row)
                        continue
                    y_seed = torch.empty(2, n, device=device, dtype=torch.float16)

                    def run_seed(X, v=v, s=s, y=y_seed):
                        seed_mod.launch(SEED_KERNEL[v], s, X, y, c, n, args.seed_threads)
                        return y

                    def poison_seed(y=y_seed):
                        y.fill_(float("nan"))

                    row = bench(row, run_seed, make_input, lambda X, s=s: seed_reference(X, s, n), sets, args,
                                device, timer, copy_tbps, poison_seed)
                    if v == "seed_baseline" and row["time_us"]:
                        base_ms = row["time_us"] / 1e3
                elif v in TORCH_VARIANTS:
                    row = new_row(c, s, v, n)
                    fn = (torch_ffn if s else torch_linear) if v == "eager" else compiled[s]
                    if v == "compile":
                        t0 = time.perf_counter()
                        try:
                            fn(sets[0])  # compiles for this shape, outside the timed region
                            if device == "cuda":
                                torch.cuda.synchronize()
                            row["compile_s"] = time.perf_counter() - t0
                        except Exception as exc:
                            row["note"] = miss.exc_note(exc)
                            row["traceback"] = traceback.format_exc()
                            group.append(row)
                            print_row(row)
                            continue
                    row = bench(row, fn, make_input, ref_ours, sets, args, device, timer, copy_tbps, poison_full)
                else:
                    for t in args.targets:
                        row = new_row(c, s, f"{v}:{t}", n, example=f"examples/{EXAMPLES[miss.split_variant(v)[0]]}.tk",
                                      target=t)
                        k = examples[(v, t, s)]
                        if isinstance(k, dict):
                            row.update(k)
                        else:
                            k, extra = specialize(k, c, n)
                            row.update(extra)
                            if k is not None:
                                row = bench(row, k, make_input, ref_ours, sets, args, device, timer, copy_tbps,
                                            poison_full)
                        relate(row, base_ms)
                        group.append(row)
                        print_row(row)
                    continue
                relate(row, base_ms)
                group.append(row)
                print_row(row)
            # Time the seed baseline again: the spread between the two runs is this group's noise.
            if seed_mod is not None and base_ms and "seed_baseline" in args.variants:
                y_seed = torch.empty(2, n, device=device, dtype=torch.float16)
                again = timer(miss.rotating(lambda X: seed_mod.launch(SEED_KERNEL["seed_baseline"], s, X, y_seed, c, n,
                                                                      args.seed_threads), [(X,) for X in sets]))
                spread = abs(again - base_ms) / base_ms
                for r in group:
                    if r["variant"] == "seed_baseline":
                        r["seed_baseline_again_us"] = again * 1e3
                print(f"  (seed baseline again: {again * 1e3:.1f} us, {100 * spread:.1f}% from the first run)", flush=True)
            for r in group:
                r["floor_us"] = floor_us
                r["same_size_copy_us"] = same_copy_us
                r["frac_same_size_copy"] = same_copy_us / r["time_us"] if r["time_us"] else None
                relate(r, base_ms)
            results += group
        del sets
        if device == "cuda":
            torch.cuda.empty_cache()

    out = {"meta": meta, "results": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, default=str)
    print(f"\nwrote {args.out}\n")
    print(markdown(results, meta))
    # The seed kernels are measured as written: their WRONG is a finding, not a failure of this run;
    # an error (a seed unit that does not build, a launch that fails) is one.
    bad = [r for r in results if r["status"] == "error"
           or (r["status"].startswith("WRONG") and r["variant"] not in SEED_VARIANTS)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

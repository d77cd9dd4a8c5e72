#!/usr/bin/env python3
"""Time examples/sgemm.tk (fp32 C = A @ B, seed 002's warp-tiled SGEMM) against cuBLAS fp32.

On the device machine (one call; see benchmarks/README.md):

    python3 benchmarks/sgemm.py --out $OUT/sgemm.json
    python3 benchmarks/sgemm.py --sweep --out $OUT/sweep.json        # the tilings in SWEEP too

Every row is a set of schedule constants (`-D` values of examples/sgemm.tk; `default` is the
file's own), compiled with `tkc.compile(..., target="cuda")` and specialized before timing. cuBLAS
is `torch.mm` on f32 tensors with TF32 off (`torch.backends.cuda.matmul.allow_tf32 = False`,
`torch.backends.cudnn.allow_tf32 = False`, float32 matmul precision "highest"), so both compute
in fp32. Each kernel's output is checked first against torch in float64 on the same inputs:
max|out - ref| / max|ref| above 1e-4 (or NaN) marks the row WRONG and the script exits 1.
Times are the median of triton's do_bench (ms); TFLOP/s = 2 M N K / time. The last lines are a
markdown table (the device tool returns the tail of the output).

`--cpu` is a dry run of the script on a CPU box: a 64^3 problem through the reference
interpreter, a perf_counter timer, no cuBLAS row. Its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
EXAMPLE = os.path.join(ROOT, "examples", "sgemm.tk")

# Tilings for --sweep: seed 002's autotune lists (BK, BM, BN, WM, WN, WNITER, TM, TN), cut to
# combinations that satisfy examples/sgemm.tk's `requires`, keep 128 or 256 threads, and hold at
# most 128 accumulators per thread (more spills on 255 registers).
SWEEP = [
    {},
    {"BK": 8, "stages": 3},
    {"stages": 3},
    {"BK": 32},
    {"TN": 8, "WNITER": 2},
    {"TM": 4, "TN": 8, "WNITER": 2},
    {"BN": 256, "threads": 256},
    {"BN": 256, "threads": 256, "BK": 8, "stages": 3},
    {"BM": 256, "WM": 128, "WN": 32, "TM": 8, "TN": 4, "WNITER": 2, "threads": 256},
    {"BM": 64, "WM": 32, "TM": 4, "TN": 4, "WNITER": 4},
    {"BM": 128, "BN": 64, "WM": 32, "WN": 64, "TM": 4, "TN": 4, "WNITER": 4},
]


def name_of(consts: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(consts.items())) or "default"


def parse_consts(text: str) -> dict[str, int]:
    if text == "default":
        return {}
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}


def timer(cpu: bool, warmup: float, rep: float):
    def wall(fn) -> float:
        fn()
        t0 = time.perf_counter()
        n = 0
        while n < 3 or (time.perf_counter() - t0) * 1e3 < rep:
            fn()
            n += 1
        return (time.perf_counter() - t0) * 1e3 / n

    if cpu:
        return wall
    from triton.testing import do_bench

    def bench(fn) -> float:
        try:
            return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))
        except TypeError:  # older Triton: no return_mode
            return float(do_bench(fn, warmup=warmup, rep=rep, quantiles=[0.5])[0])

    return bench


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=4096, help="M = N = K (default 4096)")
    ap.add_argument("--configs", default="default",
                    help="`;`-separated sets of constants, e.g. `default;BK=8,stages=3` (default: default)")
    ap.add_argument("--sweep", action="store_true", help="also time the tilings in SWEEP")
    ap.add_argument("--warmup", type=float, default=100.0)
    ap.add_argument("--rep", type=float, default=500.0)
    ap.add_argument("--cpu", action="store_true", help="dry run on the CPU (interpreter, 64^3)")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)

    import torch

    import tkc

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    cpu = args.cpu
    size = 64 if cpu else args.size
    device = "cpu" if cpu else "cuda"
    target = "interp" if cpu else "cuda"
    configs = [parse_consts(c) for c in args.configs.split(";")]
    if args.sweep:
        configs += [c for c in SWEEP if c not in configs]
    gen = torch.Generator(device=device).manual_seed(0)
    A = torch.randn(size, size, device=device, generator=gen)
    B = torch.randn(size, size, device=device, generator=gen)
    ref = (A.double() @ B.double())
    flops = 2.0 * size ** 3
    bench = timer(cpu, args.warmup, args.rep)
    rows = []
    if not cpu:
        ms = bench(lambda: torch.mm(A, B))
        err = ((torch.mm(A, B).double() - ref).abs().max() / ref.abs().max()).item()
        rows.append({"variant": "cublas (torch.mm, fp32, TF32 off)", "ms": ms, "tflops": flops / ms / 1e9,
                     "rel_err": err, "status": "ok"})
    failed = False
    for consts in configs:
        row = {"variant": f"tkc cuda {name_of(consts)}" if not cpu else f"tkc interp {name_of(consts)}"}
        try:
            dims = {"M": size, "N": size, "K": size}
            kernel = tkc.compile(EXAMPLE, target=target, cache_dir=args.cache_dir, **consts)
            kernel.specialize(dims)
            C = kernel(A, B)
            err = ((C.double() - ref).abs().max() / ref.abs().max()).item()
            ms = bench(lambda: kernel(A, B))
            ok = err == err and err <= 1e-4
            failed |= not ok
            row.update(ms=ms, tflops=flops / ms / 1e9, rel_err=err, status="ok" if ok else "WRONG")
        except Exception as exc:  # noqa: BLE001 (a row per failure; the others still run)
            row.update(status="error: " + (str(exc).splitlines() or [type(exc).__name__])[0],
                       traceback=traceback.format_exc())
            failed |= "does not hold" not in str(exc)
        rows.append(row)
    gpu = "cpu" if cpu else torch.cuda.get_device_name()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"device": gpu, "date": time.strftime("%Y-%m-%d"), "size": size, "rows": rows}, f, indent=1)
    base = rows[0].get("tflops") if not cpu else None
    print(f"\nSGEMM {size}^3 fp32 on {gpu}\n")
    print("| variant | ms | TFLOP/s | % cuBLAS | rel err | status |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "ms" not in r:
            print(f"| {r['variant']} | | | | | {r['status']} |")
            continue
        pct = f"{100 * r['tflops'] / base:.1f}" if base else ""
        print(f"| {r['variant']} | {r['ms']:.3f} | {r['tflops']:.2f} | {pct} | {r['rel_err']:.1e} | {r['status']} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

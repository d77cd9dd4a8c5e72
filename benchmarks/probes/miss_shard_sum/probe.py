"""Probe: what the shard sum's trip costs as tkc's TileLang backend emits it, against the same
kernel with the trip written as one loop over the staged tile (issue 13), and against a
baseline: the sources an earlier tree generated (`--baseline DIR`, written there by
`--write-baseline DIR` run at that tree).

`examples/miss_split.tk` sums U shards per pipelined trip with
`reshape(sum(reshape(A[...], f16[BM, U, R]), 1), f32[BM, R])`. The TileLang backend emits that
as staged tile -> fragment -> shared -> fragment (the reshape) -> reduce -> shared -> fragment
(the second reshape) -> add: three shared-memory round trips per trip. The "fused" form reads
the staged tile once: S[i, k] += sum over u of A_stage[i, u * R + k]. Both kernels are the
generated source of one configuration (M dynamic), the fused one edited by this script; each is
checked against torch eager before it is timed (do_bench medians over rotated inputs, as
benchmarks/miss.py).

    source .device/env.sh && python3 benchmarks/probes/miss_shard_sum/probe.py [--baseline DIR]
"""

from __future__ import annotations

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
KERNEL = os.path.join(ROOT, "examples", "miss_split.tk")
SHAPES = [(1024, 4096, 4096, 64), (4096, 4096, 4096, 64), (16384, 4096, 4096, 64), (8192, 4096, 11008, 64)]


def sources(k, n, r, consts):
    from codegen import tilelang as tilelang_gpu
    from tkc import driver

    module = driver.optimize(driver.frontend(KERNEL, {"K": k, "N": n, "R": r, **consts}, dynamic=("M",)), "tilelang")
    return tilelang_gpu.emit(module)


def fuse(text, r, consts):  # the hand edit of the first run (docs/PERFORMANCE.md)
    """`text` (a source of the backend before fold-copies) with the shard sum's trip as one loop."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if "T.copy(A[" in l)
    end = next(i for i, l in enumerate(lines) if re.search(r"S\[(\w+), (\w+)\] = S\[\1, \2\] \+ t\d+\[\1, \2\]", l))
    stage = re.search(r"T\.copy\(A\[.*\], (\w+)\)", lines[start]).group(1)
    ind = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    fused = [lines[start],
             f"{ind}for i, k in T.Parallel({consts['BM']}, {r}):",
             f"{ind}    for u in T.serial({consts['U']}):",
             f"{ind}        S[i, k] = S[i, k] + T.Cast(T.float32, {stage}[i, u * {r} + k])"]
    return "\n".join(lines[:start] + fused + lines[end + 1:]) + "\n"


def key_name(k, n, r, consts) -> str:
    return f"K{k}N{n}R{r}_" + "_".join(f"{a}{b}" for a, b in sorted(consts.items())) + ".py"


def chosen(m, k, n, r) -> dict:
    from dsl.parser import parse
    from tkc.schedule import Chooser

    text = open(KERNEL, encoding="utf-8").read()
    return Chooser(KERNEL, text, parse(text, KERNEL), {"K": k, "N": n, "R": r}, {}).choose({"M": m}).consts


def load(text, name):
    import tilelang

    from codegen import tilelang as tilelang_gpu

    import importlib.util
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="tkc-shard-sum-"), f"{name}.py")  # TileLang reads the source
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tilelang.compile(mod.build(), target="cuda", pass_configs=tilelang_gpu.PASS_CONFIGS)


def main() -> int:
    args = sys.argv[1:]
    if "--write-baseline" in args:
        folder = args[args.index("--write-baseline") + 1]
        os.makedirs(folder, exist_ok=True)
        for m, k, n, r in SHAPES:
            consts = chosen(m, k, n, r)
            with open(os.path.join(folder, key_name(k, n, r, consts)), "w", encoding="utf-8") as f:
                f.write(sources(k, n, r, consts))
        return 0
    baseline = args[args.index("--baseline") + 1] if "--baseline" in args else None
    import torch

    import miss as bench

    timer = bench.Timer(False, 50, 200)
    copy = bench.copy_bandwidth(timer, "cuda", 1 << 30)["tbps"]
    print(f"# {torch.cuda.get_device_name()}, copy {copy:.3f} TB/s", flush=True)
    built = {}
    for m, k, n, r in SHAPES:
        consts = chosen(m, k, n, r)
        key = (k, n, r, tuple(sorted(consts.items())))
        if key not in built:
            # U as the cost model now picks it, and every other U the baseline folder holds for
            # this shape's BM and NS (the baseline tree's own pick among them)
            us = {consts["U"]}
            if baseline:
                stem = key_name(k, n, r, consts).split("_U")[0] + "_U"
                us |= {int(re.match(r"(\d+)", f[len(stem):]).group(1)) for f in os.listdir(baseline) if f.startswith(stem)}
            built[key] = {}
            for u in sorted(us):
                c = {**consts, "U": u}
                if baseline:
                    with open(os.path.join(baseline, key_name(k, n, r, c)), encoding="utf-8") as f:
                        old = f.read()
                    built[key][f"baseline U{u}"] = load(old, "baseline")
                    built[key][f"hand-fused U{u}"] = load(fuse(old, r, c), "fused")
                built[key][f"generated U{u}"] = load(sources(k, n, r, c), "generated")
        s = {"M": m, "K": k, "N": n, "R": r}
        sets = bench.make_sets(s, "cuda", 200 << 20, 100, 0)
        eager = bench.bench_variant("eager", bench.miss_torch, s, sets, timer, "cuda", copy, None)
        line = [f"{bench.shape_name(s)} {consts}: eager {eager['time_us']:.1f}"]
        for name, kern in built[key].items():
            def call(A, B, kern=kern):
                C = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
                kern(A, B, C)
                return C
            row = bench.bench_variant(name, call, s, sets, timer, "cuda", copy, eager["time_us"] / 1e3)
            line.append(f"{name} {row['time_us'] or float('nan'):.1f} ({100 * (row['frac_copy'] or 0):.0f}%)"
                        f"{'' if row['status'] == 'ok' else ' ' + row['status']}")
        print(" | ".join(line), flush=True)
        del sets
    return 0


if __name__ == "__main__":
    sys.exit(main())

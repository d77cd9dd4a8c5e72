"""Probe: which MiSS decomposition is fastest at which M (issue 13's cost model), and what the
cost model's own choice (`schedule="model"`, row `model`) reaches.

Times examples/miss_split.tk (M dynamic: one compile per
configuration and K/N/R) at every configuration of CONFIGS and every shape of SHAPES, beside
torch eager, with benchmarks/miss.py's method (checked against the float32 reference first,
do_bench medians over rotated input sets larger than L2, copy bandwidth in the same run).

    source .device/env.sh && python3 benchmarks/probes/miss_decomposition/probe.py --out $OUT/probe.json
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
KERNEL = os.path.join(ROOT, "examples", "miss_split.tk")
# configurations named `c<CS>_...` time benchmarks/probes/miss_cluster/miss_cluster.tk (K split over
# a cluster of CS blocks) instead
CLUSTER_KERNEL = os.path.join(ROOT, "benchmarks", "probes", "miss_cluster", "miss_cluster.tk")
# configurations with a `P` time benchmarks/probes/miss_stream/miss_stream.tk (P persistent blocks,
# each trip writing the current M tile's C and reading the next tile's A)
STREAM_KERNEL = os.path.join(ROOT, "benchmarks", "probes", "miss_stream", "miss_stream.tk")

CONFIGS = {  # name -> schedule constants of miss_split.tk
    "m16": {"BM": 16, "BN": 128},
    "m64s": {"BM": 64, "BN": 128, "STAGE_C": 1},
    "m64s_n4": {"BM": 64, "BN": 128, "NS": 4, "STAGE_C": 1},
    "m64s_n2_t256": {"BM": 64, "BN": 256, "NS": 2, "STAGE_C": 1, "threads": 256},
    "m32s_n4": {"BM": 32, "BN": 128, "NS": 4, "STAGE_C": 1},
    "m16_n32_b64": {"BM": 16, "BN": 64, "NS": 32},
    "m16_n8": {"BM": 16, "BN": 128, "NS": 8},
    "m32s_n2": {"BM": 32, "BN": 128, "NS": 2, "STAGE_C": 1},
    # U shards per pipelined trip (the file's default is U = 4, which the names above take)
    "m64s_u1": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 1},
    "m64s_u2": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 2},
    "m64s_t256_u2": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 2, "threads": 256},
    # more blocks at M8192 N11008 (128 tiles of 64 rows leave SMs idle, one block each)
    "m32s_u2": {"BM": 32, "BN": 128, "STAGE_C": 1, "U": 2},
    "m16s_u2": {"BM": 16, "BN": 128, "STAGE_C": 1, "U": 2},
    "m32s_n2_u2": {"BM": 32, "BN": 128, "NS": 2, "STAGE_C": 1, "U": 2},
    "m64s_n2_u2": {"BM": 64, "BN": 128, "NS": 2, "STAGE_C": 1, "U": 2},
    # after fold-copies (the shard sum reads the staged tile directly): U, BN, threads, stages at large M
    "m64s_u4": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 4},
    "m64s_u8_st2": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 8, "stages": 2},
    "m64s_u4_st4": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 4, "stages": 4},
    "m64s_u4_t256": {"BM": 64, "BN": 128, "STAGE_C": 1, "U": 4, "threads": 256},
    "m64s_u4_b256": {"BM": 64, "BN": 256, "STAGE_C": 1, "U": 4},
    "m64s_u4_b256_t256": {"BM": 64, "BN": 256, "STAGE_C": 1, "U": 4, "threads": 256},
    "m128s_u2_t256": {"BM": 128, "BN": 128, "STAGE_C": 1, "U": 2, "threads": 256},
    "m64_u4": {"BM": 64, "BN": 128, "STAGE_C": 0, "U": 4},
    # longer contiguous runs of each A row per trip (U x R columns), fewer rows per block
    "m32s_u8": {"BM": 32, "BN": 128, "STAGE_C": 1, "U": 8},
    "m16s_u8": {"BM": 16, "BN": 128, "STAGE_C": 1, "U": 8},
    "m32s_u8_st4": {"BM": 32, "BN": 128, "STAGE_C": 1, "U": 8, "stages": 4},
    # K split over a cluster of CS blocks, the partial shard sums added through DSMEM
    "c2_m64s_u2": {"BM": 64, "BN": 128, "CS": 2, "STAGE_C": 1, "U": 2},
    "c4_m64s_u2": {"BM": 64, "BN": 128, "CS": 4, "STAGE_C": 1, "U": 2},
    "c8_m64s_u2": {"BM": 64, "BN": 128, "CS": 8, "STAGE_C": 1, "U": 2},
    "c4_m64s_u1": {"BM": 64, "BN": 128, "CS": 4, "STAGE_C": 1, "U": 1},
    "c4_m32s_u2": {"BM": 32, "BN": 128, "CS": 4, "STAGE_C": 1, "U": 2},
    "c8_m32s_u2": {"BM": 32, "BN": 128, "CS": 8, "STAGE_C": 1, "U": 2},
    "c4_m64s_t256_u2": {"BM": 64, "BN": 128, "CS": 4, "STAGE_C": 1, "U": 2, "threads": 256},
    # persistent blocks that read the next M tile's A while writing the current tile's C
    "st_p264": {"BM": 64, "BN": 128, "U": 2, "P": 264},
    "st_p132": {"BM": 64, "BN": 128, "U": 2, "P": 132},
    "st_m32_p396": {"BM": 32, "BN": 128, "U": 2, "P": 396},
    "st_p264_st3": {"BM": 64, "BN": 128, "U": 2, "P": 264, "stages": 3},
}


def kernel_of(name: str) -> str:
    consts = CONFIGS.get(name, {})
    return CLUSTER_KERNEL if "CS" in consts else STREAM_KERNEL if "P" in consts else KERNEL
KNR = [(4096, 4096, 64), (4096, 11008, 64), (3072, 3072, 64), (3072, 8192, 16)]
MS = {(4096, 4096, 64): [1024, 4096, 16384], (4096, 11008, 64): [8192],
      (3072, 3072, 64): [1, 16, 128, 1024, 4096, 16384], (3072, 8192, 16): [1, 128, 4096, 16384]}


def _build(consts, k, n, r, cache, kernel=KERNEL):
    import tkc

    try:
        tkc.compile(kernel, target="tilelang", cache_dir=cache, dynamic=("M",), **consts).specialize(
            {"M": 1, "K": k, "N": n, "R": r})
        return "ok"
    except Exception as exc:  # reported by the main process
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="probe.json")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--knr", default="", help="only these K/N/R, e.g. `4096/11008/64` (comma-separated)")
    p.add_argument("--ms", default="", help="these M at every K/N/R instead of the table's, e.g. `16384`")
    args = p.parse_args()
    global KNR
    if args.knr:
        KNR = [tuple(int(x) for x in t.split("/")) for t in args.knr.split(",")]
    if args.ms:
        MS.update({knr: [int(m) for m in args.ms.split(",")] for knr in KNR})
    cache = tempfile.mkdtemp(prefix="tkc-probe-")
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(cache, "tilelang"))
    names = args.configs.split(",")
    from dsl.parser import parse
    from tkc.schedule import Chooser

    text = open(KERNEL, encoding="utf-8").read()
    chosen = set()  # the cost model's choices (schedule="model"), built beside the fixed configurations
    for k, n, r in KNR:
        chooser = Chooser(KERNEL, text, parse(text, KERNEL), {"K": k, "N": n, "R": r}, {})
        chosen |= {(tuple(sorted(c.consts.items())), (k, n, r)) for _, c in chooser.buckets()}
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=15, mp_context=ctx) as pool:
        builds = {(c, knr): pool.submit(_build, CONFIGS[c], *knr, cache, kernel_of(c)) for c in names for knr in KNR}
        builds.update({(c, knr): pool.submit(_build, dict(c), *knr, cache) for c, knr in chosen})
        status = {key: f.result() for key, f in builds.items()}
    import torch

    import miss as bench
    import tkc

    timer = bench.Timer(False, 50, 200)
    copy = bench.copy_bandwidth(timer, "cuda", 1 << 30)["tbps"]
    print(f"# {torch.cuda.get_device_name()}, copy {copy:.3f} TB/s", flush=True)
    rows = []
    for knr in KNR:
        k, n, r = knr
        kernels = {}
        for c in names:
            if status[(c, knr)] != "ok":
                print(f"{c} K{k} N{n} R{r}: {status[(c, knr)]}", flush=True)
                continue
            kernels[c] = tkc.compile(kernel_of(c), target="tilelang", cache_dir=cache, dynamic=("M",), **CONFIGS[c])
        kernels["model"] = tkc.compile(KERNEL, target="tilelang", cache_dir=cache, schedule="model")
        for m in MS[knr]:
            s = {"M": m, "K": k, "N": n, "R": r}
            sets = bench.make_sets(s, "cuda", 200 << 20, 100, 0)
            eager = bench.bench_variant("eager", bench.miss_torch, s, sets, timer, "cuda", copy, None)
            eager_ms = eager["time_us"] / 1e3
            line = [f"{bench.shape_name(s)}: eager {eager['time_us']:.1f}"]
            rows.append(eager)
            for c, kern in kernels.items():
                row = bench.bench_variant(c, kern, s, sets, timer, "cuda", copy, eager_ms)
                rows.append(row)
                line.append(f"{c} {row['time_us'] or float('nan'):.1f}{'' if row['status'] == 'ok' else ' ' + row['status']}")
            print(" | ".join(line), flush=True)
            del sets
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "copy_tbps": copy, "configs": CONFIGS, "rows": rows}, f,
                  indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

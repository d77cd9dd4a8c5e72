"""Probe: can the bandwidth-bound MiSS shape reach 89% of copy (issue 13)?

At M16384 K4096 N4096 R64 `examples/miss_split.tk` reads A (134 MB) at about 2.24 TB/s and writes
C at about 2.5 TB/s on an H100, against 3.0 TB/s for a copy (docs/PERFORMANCE.md, "89% of copy at
M16384"). Each configuration (BASE plus CONFIGS[name]) is the backend's generated TileLang source,
optionally edited by hand (`NSTAGES`: stages of the loop over N's tiles; `DBUF_C`: copies of the
staged C tile, each trip waiting only for the older stores; `EVICT`: those stores' L2 policy;
`NOTMA`: C stored by every thread; `PLAIN`: the backend's store before `rotating_stores`),
compiled with each of PASSES (tkc's cp.async pipeline; TileLang's warp-specialized one, a
producer warpgroup issuing one TMA load per stage), checked against torch at M, M - 37 (a partial
M tile) and 1, then timed with benchmarks/miss.py's method (do_bench medians over rotated inputs
larger than L2), beside torch eager and the copy, fill and column-sum rates of the run.

    source .device/env.sh && python3 benchmarks/probes/miss_bandwidth/probe.py [--configs u4,u4_plain]
        [--passes cp.async] [--shapes M16384K4096N4096R64] [--rounds 2] [--graph] [--once CONFIG/PASSES]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import multiprocessing
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
KERNEL = os.path.join(ROOT, "examples", "miss_split.tk")
BASE = {"BM": 64, "BN": 128, "STAGE_C": 1}
CONFIGS = {  # name -> schedule constants of miss_split.tk over BASE
    "u4": {"U": 4},
    "u2": {"U": 2},
    "u8_st2": {"U": 8, "stages": 2},
    "u2_st4": {"U": 2, "stages": 4},
    "u4_st4": {"U": 4, "stages": 4},
    "u1_st6": {"U": 1, "stages": 6},
    "u2_b256": {"U": 2, "BN": 256},
    "u2_t256": {"U": 2, "threads": 256},
    "u2_c0": {"U": 2, "STAGE_C": 0},
    "u2_b256_t256": {"U": 2, "BN": 256, "threads": 256},
    # NSTAGES: stages of the loop over N's tiles (the file pipelines it over 2), by a source edit
    "u2_ns3": {"U": 2, "NSTAGES": 3},
    "u2_ns4": {"U": 2, "NSTAGES": 4},
    "u4_ns3": {"U": 4, "NSTAGES": 3},
    "u2_b256_ns3": {"U": 2, "BN": 256, "NSTAGES": 3},
    "u2_b64_ns4": {"U": 2, "BN": 64, "NSTAGES": 4},
    # DBUF_C: C's staged tile double-buffered, its TMA store not awaited in the trip that issues it
    "u2_db": {"U": 2, "DBUF_C": 2},
    "u4_db": {"U": 4, "DBUF_C": 2},
    # PLAIN: the backend's store before rotating_stores (one copy, each trip waiting for its store)
    "u4_plain": {"U": 4, "PLAIN": 1},
    "u2_plain": {"U": 2, "PLAIN": 1},
    "u4_db3": {"U": 4, "DBUF_C": 3},
    "u4_db_ef": {"U": 4, "DBUF_C": 2, "EVICT": "evict_first"},
    "u4_db3_ef": {"U": 4, "DBUF_C": 3, "EVICT": "evict_first"},
    "u2_b256_db": {"U": 2, "BN": 256, "DBUF_C": 2},
    "u2_db3": {"U": 2, "DBUF_C": 3},
    "u2_db4": {"U": 2, "DBUF_C": 4},
    "u2_db_ef": {"U": 2, "DBUF_C": 2, "EVICT": "evict_first"},
    "u2_db_st4": {"U": 2, "DBUF_C": 2, "stages": 4},
    "u2_db3_st4": {"U": 2, "DBUF_C": 3, "stages": 4},
    "u1_db3_st6": {"U": 1, "DBUF_C": 3, "stages": 6},
    "u2_b64_db4": {"U": 2, "BN": 64, "DBUF_C": 4},
    # BM = 128 (two warpgroups): B re-read from L2 half as often (one block per SM at M = 16384)
    "m128_u2_db_t256": {"BM": 128, "U": 2, "DBUF_C": 2, "threads": 256},
    "m128_u1_db_t256_st4": {"BM": 128, "U": 1, "DBUF_C": 2, "threads": 256, "stages": 4},
    "m128_u2_db3_t256_st4": {"BM": 128, "U": 2, "DBUF_C": 3, "threads": 256, "stages": 4},
    "m128_u2_t256": {"BM": 128, "U": 2, "threads": 256},
    # NOTMA: C's staged tile stored by every thread (16-byte st.global) instead of one TMA store
    "u2_notma": {"U": 2, "NOTMA": 1},
    "u4_notma": {"U": 4, "NOTMA": 1},
    "u2_b256_notma": {"U": 2, "BN": 256, "NOTMA": 1},
    "u2_notma_t256": {"U": 2, "NOTMA": 1, "threads": 256},
}
PASSES = {"cp.async": {"tl.disable_warp_specialized": True}, "ws": {}}
SHAPES = ["M16384K4096N4096R64", "M8192K4096N11008R64", "M16384K3072N3072R64", "M16384K3072N8192R16"]


def source(k, n, r, consts) -> str:
    from codegen import tilelang as tilelang_gpu
    from tkc import driver

    consts = dict(consts)
    nstages = consts.pop("NSTAGES", None)
    dbuf = consts.pop("DBUF_C", None)
    notma = consts.pop("NOTMA", None)
    evict = consts.pop("EVICT", "")
    plain = consts.pop("PLAIN", None)
    module = driver.optimize(driver.frontend(KERNEL, {"K": k, "N": n, "R": r, **consts}, dynamic=("M",)), "tilelang")
    # the hand edits start from the plain store (the backend's form before rotating_stores)
    text = tilelang_gpu.emit(module, store_buffers=not (plain or dbuf or notma))
    if dbuf:
        text = double_buffer_c(text, dbuf, evict)
    if notma:
        text, n = re.subn(r"(T\.copy\(\w+, C\[.*\])\)", r"\1, disable_tma=True)", text)
        assert n, "no store of C"
    if nstages:
        head, sep, tail = text.rpartition("num_stages=2)")  # the loop over N's tiles is the last one
        assert sep, "no loop over N pipelined over 2 stages"
        text = f"{head}num_stages={nstages}){tail}"
    return text


def double_buffer_c(text: str, nb: int = 2, evict: str = "") -> str:
    """The generated epilogue `T.copy(frag, stage); T.copy(stage, C[r, c])` with `stage` in `nb`
    buffers: the trip waits only for the store issued `nb` trips before (`cp.async.bulk.wait_group.read
    nb - 1`), and the loop's end for all of them; `evict`: the stores' L2 eviction policy."""
    lines = text.splitlines()
    at = next(i for i, l in enumerate(lines) if re.match(r"\s*T\.copy\((\w+), C\[", l))
    stage = re.match(r"\s*T\.copy\((\w+), C\[(.*), (.*)\]\)", lines[at])
    name, row, col = stage.groups()
    frag = re.match(rf"\s*T\.copy\((\w+), {name}\)", lines[at - 1]).group(1)
    alloc = next(i for i, l in enumerate(lines) if re.match(rf"\s*{name} = T\.alloc_shared\(\(", l))
    shape = re.search(r"\(\((\d+), (\d+),\)", lines[alloc]).groups()
    lines[alloc] = lines[alloc].replace(f"(({shape[0]}, {shape[1]},)", f"(({nb}, {shape[0]}, {shape[1]},)")
    loop = max(i for i in range(at) if "T.Pipelined(" in lines[i])
    var = re.search(r"for (\w+) in", lines[loop]).group(1)
    ind = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    policy = f", eviction_policy={evict!r}" if evict else ""
    body = [f"{ind}T.tma_store_wait({nb - 1})",
            f"{ind}T.sync_threads()",
            f"{ind}T.copy({frag}, {name}[{var} % {nb}, :, :])",
            f"{ind}T.tma_copy({name}[{var} % {nb}, :, :], C[{row} : {row} + {shape[0]}, {col} : {col} + {shape[1]}]{policy})"]
    end = at + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith(ind)):
        end += 1
    loop_ind = lines[loop][: len(lines[loop]) - len(lines[loop].lstrip())]
    return "\n".join(lines[:at - 1] + body + lines[at + 1:end] + [f"{loop_ind}T.tma_store_wait(0)"] + lines[end:]) + "\n"


def build(text: str, passes: dict, cache: str):
    import tilelang

    os.environ["TILELANG_CACHE_DIR"] = cache
    path = os.path.join(tempfile.mkdtemp(prefix="tkc-miss-bw-"), "kernel.py")  # TileLang reads the source
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    spec = importlib.util.spec_from_file_location("kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return tilelang.compile(mod.build(), target="cuda", pass_configs=passes)


def _prewarm(text, passes, cache):
    try:
        build(text, passes, cache)
        return "ok"
    except Exception as exc:
        return (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:200]


def graph_text(row) -> str:
    """` / graph 99.9 (89.0%)` for a row timed as a graph, else nothing."""
    if "graph_us" not in row:
        return ""
    return f" / graph {row['graph_us']:.2f} ({100 * row['graph_frac_copy']:.2f}%)"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--passes", default=",".join(PASSES))
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--out", default="probe.json")
    p.add_argument("--rounds", type=int, default=1, help="time every shape and configuration this many times")
    p.add_argument("--graph", action="store_true", help="also time every row as CUDA-graph replays "
                   "(benchmarks/miss.py --graph's method and copy kernel)")
    p.add_argument("--once", default="", help="CONFIG/PASSES: run that kernel 3 times at the first shape "
                   "and exit (for `ncu --clock-control none`)")
    args = p.parse_args()
    import miss as bench

    shapes = [bench.parse_shape(s) for s in args.shapes.split(",")]
    cache = tempfile.mkdtemp(prefix="tkc-miss-bw-cache-")
    jobs = {}
    for s in ([] if args.once else shapes):
        for c in args.configs.split(","):
            text = source(s["K"], s["N"], s["R"], {**BASE, **CONFIGS[c]})
            for pname in args.passes.split(","):
                jobs[(bench.shape_name(s), c, pname)] = text
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(max_workers=15, mp_context=ctx) as pool:
        futs = {key: pool.submit(_prewarm, text, PASSES[key[2]], cache) for key, text in jobs.items()}
        status = {key: f.result() for key, f in futs.items()}
    import torch

    if args.once:
        c, pname = args.once.split("/")
        s = shapes[0]
        kern = build(source(s["K"], s["N"], s["R"], {**BASE, **CONFIGS[c]}), PASSES[pname], cache)
        A = torch.randn(s["M"], s["K"], device="cuda").half()
        B = torch.randn(s["R"], s["N"], device="cuda").half()
        C = torch.empty(s["M"], s["N"], device="cuda").half()
        for _ in range(3):
            kern(A, B, C)
        torch.cuda.synchronize()
        return 0
    timer = bench.Timer(False, 50, 200)
    copy = bench.copy_bandwidth(timer, "cuda", 1 << 30)["tbps"]
    copy_graph = bench.copy_bandwidth(timer, "cuda", 1 << 30, graph=True)["tbps"] if args.graph else None
    print(f"# {torch.cuda.get_device_name()}, copy {copy:.3f} TB/s"
          + (f", as a graph {copy_graph:.3f}" if args.graph else ""), flush=True)
    for mb in (134, 268):  # the ceilings at this probe's sizes: copy, write-only (fill_), read-only (sum)
        x = torch.randn(mb << 19, device="cuda").half()
        y = torch.empty_like(x)
        t_copy = timer(lambda: y.copy_(x))
        t_fill = timer(lambda: y.fill_(1.0))
        t_sum = timer(lambda: x.view(-1, 4096).sum(0, dtype=torch.float32))
        print(f"# {mb} MiB: copy {2 * x.nbytes / t_copy / 1e9:.3f} TB/s, fill {x.nbytes / t_fill / 1e9:.3f}, "
              f"column sum {x.nbytes / t_sum / 1e9:.3f}", flush=True)
        del x, y
    rows = []
    kernels = {}
    for s in [s for _ in range(args.rounds) for s in shapes]:
        name = bench.shape_name(s)
        sets = bench.make_sets(s, "cuda", 200 << 20, 100, 0)
        eager = bench.bench_variant("eager", bench.miss_torch, s, sets, timer, "cuda", copy, None)
        if args.graph:
            bench.add_graph(eager, bench.miss_torch, s, sets, timer, copy_graph)
        rows.append(eager)
        line = [f"{name}: eager {eager['time_us']:.1f}" + graph_text(eager)]
        for (shape, c, pname), text in jobs.items():
            if shape != name:
                continue
            label = f"{c}/{pname}"
            if status[(shape, c, pname)] != "ok":
                line.append(f"{label} build failed: {status[(shape, c, pname)]}")
                continue
            kern = kernels.get((shape, c, pname)) or build(text, PASSES[pname], cache)
            kernels[(shape, c, pname)] = kern

            def call(A, B, kern=kern):
                C = torch.empty(A.shape[0], B.shape[1], dtype=A.dtype, device=A.device)
                kern(A, B, C)
                return C

            errs = []
            for m in (s["M"] - 37, 1):  # partial M tiles
                g = torch.Generator(device="cuda").manual_seed(m)
                A = torch.randn(m, s["K"], device="cuda", generator=g).half()
                B = (torch.randn(s["R"], s["N"], device="cuda", generator=g) / s["K"] ** 0.5).half()
                errs.append(bench.rel_error(call(A, B), bench.reference(A, B)))
            row = bench.bench_variant(label, call, s, sets, timer, "cuda", copy, eager["time_us"] / 1e3,
                                      {"tail_rel_err": errs})
            if max(errs) > bench.RTOL:
                row["status"] = "WRONG"
            if args.graph:
                bench.add_graph(row, call, s, sets, timer, copy_graph)
            rows.append(row)
            line.append(f"{label} {row['time_us'] or float('nan'):.1f} ({100 * (row['frac_copy'] or 0):.1f}%)"
                        + graph_text(row) + f"{'' if row['status'] == 'ok' else ' ' + row['status']}")
        print(" | ".join(line), flush=True)
        del sets
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "copy_tbps": copy, "copy_graph_tbps": copy_graph,
                   "rows": rows}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

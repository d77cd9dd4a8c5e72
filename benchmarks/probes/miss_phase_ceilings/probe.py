"""Probe: the ceilings of MiSS's read and write phases, and how their access patterns move them (issue 13).

`examples/miss_split.tk` reads A (M x K f16) a BM x U*R tile per pipelined trip: every trip
touches BM rows, U*R*2 bytes of each (512 B at U = 4). Its read phase ran at 2.24 TB/s on an
H100 (docs/PERFORMANCE.md, "89% of copy at M16384"), a copy at 3.0. This probe times pure-read
kernels that compute the shard sum S = sum(A.reshape(M, K/R, R), -2) (M x R f16, 1/64 of A's
bytes at K/R = 64) in hand-written TileLang, in two patterns:

* `tile` (the generated form): block m, trip s loads A[m*BM : +BM, s*U*R : +U*R];
* `rows`: block m, trip s loads RB whole rows, A[m*BM + s*RB : +RB, 0 : K] (RB*K*2 contiguous
  bytes), and sums each row's shards into a shared S tile, stored once at the end;

and pure-write kernels that write C = M x K f16 the ways miss_split.tk's loop over N's tiles can
(WRITE_* below), beside torch's contiguous `x.sum()`, column sum, fill and copy over the same
bytes, each checked first (the reads against torch in float64), timed by triton's do_bench (L2
flushed before every call).

    source .device/env.sh && python3 benchmarks/probes/miss_phase_ceilings/probe.py [--m 16384 --k 4096]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import multiprocessing
import os
import tempfile

TILE = '''
import tilelang.language as T
M, K, R, BM, U, stages = {M}, {K}, {R}, {BM}, {U}, {stages}

@T.prim_func
def read(A: T.Tensor((M, K), T.float16), S: T.Tensor((M, R), T.float16)):
    with T.Kernel(T.ceildiv(M, BM), threads={threads}) as m:
        t1 = T.alloc_shared((BM, U * R), T.float16)
        acc = T.alloc_fragment((BM, R), T.float32)
        part = T.alloc_fragment((BM, R), T.float32)
        T.clear(acc)
        for s in T.Pipelined(K // (U * R), num_stages=stages):
            T.copy(A[m * BM, s * U * R], t1)
            for i, k in T.Parallel(BM, R):
                part[i, k] = T.Cast(T.float32, 0)
                for l in T.serial(U):
                    part[i, k] = part[i, k] + T.Cast(T.float32, t1[i, l * R + k])
            for i, k in T.Parallel(BM, R):
                acc[i, k] = acc[i, k] + part[i, k]
        T.copy(acc, S[m * BM, 0])

def build():
    return read
'''

ROWS = '''
import tilelang.language as T
M, K, R, BM, RB, stages = {M}, {K}, {R}, {BM}, {RB}, {stages}

@T.prim_func
def read(A: T.Tensor((M, K), T.float16), S: T.Tensor((M, R), T.float16)):
    with T.Kernel(T.ceildiv(M, BM), threads={threads}) as m:
        t1 = T.alloc_shared((RB, K), T.float16)
        Sh = T.alloc_shared((BM, R), T.float16)
        part = T.alloc_fragment((RB, R), T.float32)
        for s in T.Pipelined(BM // RB, num_stages=stages):
            T.copy(A[m * BM + s * RB, 0], t1)
            for i, k in T.Parallel(RB, R):
                part[i, k] = T.Cast(T.float32, 0)
                for l in T.serial(K // R):
                    part[i, k] = part[i, k] + T.Cast(T.float32, t1[i, l * R + k])
            for i, k in T.Parallel(RB, R):
                Sh[s * RB + i, k] = T.Cast(T.float16, part[i, k])
        T.copy(Sh, S[m * BM, 0])

def build():
    return read
'''

# Write phase: every block writes C[m*BM : +BM, :] (C: M x N f16) a BM x BN tile per trip from a
# register tile (values cheap to compute and exact in f16), as miss_split.tk's loop over N's
# tiles does after its gemm, in three ways: `tma` (staged in shared memory, NB copies, one TMA
# store each, waiting only for the store NB trips back: the backend's rotating_stores at NB = 2),
# `st` (staged, then 16-byte stores by every thread), `frag` (straight from the registers).
WRITE_TMA = '''
import tilelang.language as T
M, N, BM, BN, NB = {M}, {N}, {BM}, {BN}, {NB}

@T.prim_func
def write(C: T.Tensor((M, N), T.float16)):
    with T.Kernel(T.ceildiv(M, BM), threads={threads}) as m:
        frag = T.alloc_fragment((BM, BN), T.float32)
        st = T.alloc_shared((NB, BM, BN), T.float16)
        for j in T.serial(N // BN):
            for i, k in T.Parallel(BM, BN):
                frag[i, k] = T.Cast(T.float32, (i + k + j) % 8)
            T.tma_store_wait(NB - 1)
            T.sync_threads()
            T.copy(frag, st[j % NB, :, :])
            T.tma_copy(st[j % NB, :, :], C[m * BM : m * BM + BM, j * BN : j * BN + BN]{policy})
        T.tma_store_wait(0)
        T.sync_threads()

def build():
    return write
'''

WRITE_ST = '''
import tilelang.language as T
M, N, BM, BN = {M}, {N}, {BM}, {BN}

@T.prim_func
def write(C: T.Tensor((M, N), T.float16)):
    with T.Kernel(T.ceildiv(M, BM), threads={threads}) as m:
        frag = T.alloc_fragment((BM, BN), T.float32)
        st = T.alloc_shared((BM, BN), T.float16)
        for j in T.serial(N // BN):
            for i, k in T.Parallel(BM, BN):
                frag[i, k] = T.Cast(T.float32, (i + k + j) % 8)
            T.copy(frag, st)
            T.copy(st, C[m * BM, j * BN], disable_tma=True)

def build():
    return write
'''

WRITE_FRAG = '''
import tilelang.language as T
M, N, BM, BN = {M}, {N}, {BM}, {BN}

@T.prim_func
def write(C: T.Tensor((M, N), T.float16)):
    with T.Kernel(T.ceildiv(M, BM), threads={threads}) as m:
        frag = T.alloc_fragment((BM, BN), T.float16)
        for j in T.serial(N // BN):
            for i, k in T.Parallel(BM, BN):
                frag[i, k] = T.Cast(T.float16, (i + k + j) % 8)
            T.copy(frag, C[m * BM, j * BN])

def build():
    return write
'''

CONFIGS = {  # name -> (template, constants)
    "tile_bm64_u4_st3": (TILE, {"BM": 64, "U": 4, "stages": 3, "threads": 128}),
    "tile_bm64_u8_st2": (TILE, {"BM": 64, "U": 8, "stages": 2, "threads": 128}),
    "tile_bm16_u16_st3": (TILE, {"BM": 16, "U": 16, "stages": 3, "threads": 128}),
    "rows_bm64_rb4_st3": (ROWS, {"BM": 64, "RB": 4, "stages": 3, "threads": 128}),
    "rows_bm64_rb2_st4": (ROWS, {"BM": 64, "RB": 2, "stages": 4, "threads": 128}),
    "rows_bm64_rb8_st2": (ROWS, {"BM": 64, "RB": 8, "stages": 2, "threads": 256}),
    "rows_bm64_rb4_st3_t256": (ROWS, {"BM": 64, "RB": 4, "stages": 3, "threads": 256}),
    "w_tma_bm64_bn128_nb2": (WRITE_TMA, {"BM": 64, "BN": 128, "NB": 2, "threads": 128, "policy": ""}),
    "w_tma_bm64_bn128_nb4": (WRITE_TMA, {"BM": 64, "BN": 128, "NB": 4, "threads": 128, "policy": ""}),
    "w_tma_bm64_bn128_nb2_ef": (WRITE_TMA, {"BM": 64, "BN": 128, "NB": 2, "threads": 128,
                                            "policy": ", eviction_policy='evict_first'"}),
    "w_tma_bm64_bn256_nb2": (WRITE_TMA, {"BM": 64, "BN": 256, "NB": 2, "threads": 128, "policy": ""}),
    "w_tma_bm16_bn128_nb2": (WRITE_TMA, {"BM": 16, "BN": 128, "NB": 2, "threads": 128, "policy": ""}),
    "w_st_bm64_bn128": (WRITE_ST, {"BM": 64, "BN": 128, "threads": 128}),
    "w_frag_bm64_bn128": (WRITE_FRAG, {"BM": 64, "BN": 128, "threads": 128}),
    "w_frag_bm16_bn128": (WRITE_FRAG, {"BM": 16, "BN": 128, "threads": 128}),
}
READS = [n for n, (t, _) in CONFIGS.items() if t in (TILE, ROWS)]
# the kernels build as benchmarks/probes/miss_bandwidth/probe.py builds its sources (tkc's cp.async pipeline)
_spec = importlib.util.spec_from_file_location(
    "miss_bandwidth_probe", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "miss_bandwidth", "probe.py"))
bandwidth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bandwidth)
PASSES = bandwidth.PASSES["cp.async"]


def build(text: str, cache: str):
    return bandwidth.build(text, PASSES, cache)


def _prewarm(text, cache):
    return bandwidth._prewarm(text, PASSES, cache)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--m", type=int, default=16384)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--r", type=int, default=64)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "phase_ceilings.json"))
    a = p.parse_args()
    names = a.configs.split(",")
    texts = {n: CONFIGS[n][0].format(M=a.m, K=a.k, R=a.r, N=a.k, **CONFIGS[n][1]) for n in names}
    cache = tempfile.mkdtemp(prefix="tkc-phase-ceilings-cache-")
    with cf.ProcessPoolExecutor(max_workers=8, mp_context=multiprocessing.get_context("spawn")) as pool:
        status = dict(zip(names, pool.map(_prewarm, [texts[n] for n in names], [cache] * len(names))))
    import torch
    from triton.testing import do_bench

    torch.manual_seed(0)
    A = torch.randn(a.m, a.k, device="cuda").half()
    ref = A.double().reshape(a.m, a.k // a.r, a.r).sum(1)
    nbytes = A.numel() * 2
    rows = []

    def timed(name, fn, extra_bytes=0):
        ms = do_bench(fn, warmup=50, rep=300)
        row = {"name": name, "us": ms * 1e3, "tbps": (nbytes + extra_bytes) / ms / 1e9}
        rows.append(row)
        print(f"{name:28s} {row['us']:8.1f} us {row['tbps']:6.3f} TB/s", flush=True)

    x = A.view(-1)
    y = torch.empty_like(x)
    print(f"# {torch.cuda.get_device_name()}, A {a.m}x{a.k} f16 ({nbytes / 1e6:.0f} MB)")
    timed("torch copy (mul, r+w)", lambda: torch.mul(x, 1, out=y), nbytes)
    timed("torch sum (contiguous)", lambda: x.sum())
    timed("torch shard sum (dim=-2)", lambda: A.view(a.m, a.k // a.r, a.r).sum(1))
    S = torch.empty(a.m, a.r, device="cuda", dtype=torch.float16)
    timed("torch fill (writes only)", lambda: y.fill_(1.0))
    C = torch.empty(a.m, a.k, device="cuda", dtype=torch.float16)
    for n in names:
        if status[n] != "ok":
            print(f"{n:28s} build failed: {status[n]}")
            rows.append({"name": n, "error": status[n]})
            continue
        kern = build(texts[n], cache)
        if n in READS:
            S.fill_(float("nan"))
            kern(A, S)
            err = ((S.double() - ref).abs().max() / ref.abs().max()).item()
            run = lambda: kern(A, S)  # noqa: E731
        else:  # C[r, c] = (r % BM + c % BN + c // BN) % 8
            C.fill_(float("nan"))
            kern(C)
            r = torch.arange(a.m, device="cuda")[:, None]
            c = torch.arange(a.k, device="cuda")[None, :]
            bm, bn = CONFIGS[n][1]["BM"], CONFIGS[n][1]["BN"]
            err = (C.double() - ((r % bm + c % bn + c // bn) % 8).double()).abs().max().item()
            run = lambda: kern(C)  # noqa: E731
        if not err < 2e-3:
            print(f"{n:28s} WRONG: err {err:.3g}")
            rows.append({"name": n, "error": f"err {err:.3g}"})
            continue
        timed(n, run)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"device": torch.cuda.get_device_name(), "M": a.m, "K": a.k, "R": a.r, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

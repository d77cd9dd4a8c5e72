"""Probe: the SDDMM kernel of examples/sddmm.tk on the CUDA backend with the sparse-dispatch split
forced to all tensor-core tiles, all dot products, and the cost model's choice, against
torch.sparse.sampled_addmm (cuSPARSE, f32) at a few issue-12 shapes (uniform and R-MAT, K = 256 or
`K=NN`; `M:nnz:pattern` arguments pick shapes; `lane_vectors=N` sets the dot kernel's
DOT_LANE_VECTORS in codegen/cuda_sddmm.py, with a fresh cache).
Times: triton.testing.do_bench medians (ms), preprocessing cached per pattern. Prints a table.

    source .device/env.sh && python3 benchmarks/probes/sddmm_split.py
"""

from __future__ import annotations

import sys
import tempfile
import time

import torch
from triton.testing import do_bench

import tkc
from tkc import sparse as sp

SHAPES = [(10000, 10000, 5_000_000, "uniform"), (10000, 10000, 5_000_000, "rmat"), (10000, 10000, 1_000_000, "uniform"),
          (36692, 36692, 368_000, "uniform"), (916428, 916428, 5_100_000, "uniform"),
          (8000, 8000, 1_920_000, "uniform"), (2000, 12000, 746_000, "uniform"),  # (3% dense: near the split)
          (8000, 8000, 1_600_000, "uniform"), (8000, 8000, 1_152_000, "uniform"), (8000, 8000, 960_000, "uniform"),
          (4000, 4000, 88_000, "uniform")]
K = 256  # `K=NN` on the command line sets it


def main() -> int:
    global K
    K = next((int(a[2:]) for a in sys.argv[1:] if a.startswith("K=")), K)
    args = [a for a in sys.argv[1:] if not a.startswith(("tiles=", "K=", "lane_vectors="))]
    tiles = next((a[6:] for a in sys.argv[1:] if a.startswith("tiles=")), "32x32x128")
    lane_vectors = next((int(a[13:]) for a in sys.argv[1:] if a.startswith("lane_vectors=")), None)
    cache_dir = None
    if lane_vectors is not None:  # the dot kernel's vectors per lane (codegen/cuda_sddmm.py), a fresh cache
        from codegen import cuda_sddmm
        cuda_sddmm.DOT_LANE_VECTORS = lane_vectors
        cache_dir = tempfile.mkdtemp()
        print(f"dot products with at least {lane_vectors} vectors of K per lane")
    shapes = SHAPES if not args else [s for s in SHAPES if f"{s[0]}:{s[2]}:{s[3]}" in args]
    for tile in tiles.split(","):
        bm, bn, threads = map(int, tile.split("x"))
        print(f"tiles {bm} x {bn}, {threads} threads")
        kernel = tkc.compile("examples/sddmm.tk", target="cuda", cache_dir=cache_dir, BM=bm, BN=bn, threads=threads)
        run(kernel, shapes, bm, bn)
    return 0


_INPUTS: dict = {}


def _inputs(M, N, nnz, kind):
    """Pattern, operands and the cuSPARSE time of one shape, shared by the tile configurations."""
    if (M, N, nnz, kind) not in _INPUTS:
        t0 = time.perf_counter()
        p = (sp.rmat if kind == "rmat" else sp.uniform)(M, N, nnz, seed=1).to("cuda")
        gen_s = time.perf_counter() - t0
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        S = p.to_torch(layout="csr")
        try:
            cus = do_bench(lambda: torch.sparse.sampled_addmm(S, A.float(), B.float(), beta=0.0), warmup=50, rep=200)
        except RuntimeError as exc:
            cus = float("nan")
            print(f"cuSPARSE failed: {exc}".splitlines()[0])
        _INPUTS[(M, N, nnz, kind)] = (p, A, B, cus, gen_s)
    return _INPUTS[(M, N, nnz, kind)]


def run(kernel, shapes, bm, bn) -> None:
    print("| shape | pattern | split | tkc ms | cuSPARSE ms | speedup | n_tc tiles | dot entries | prep s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for M, N, nnz, kind in shapes:
        p, A, B, cus, gen_s = _inputs(M, N, nnz, kind)
        artifact, jit = kernel.specialize(kernel.bind_dims([A, B, p]))  # compile outside the timings
        model = kernel._sampled(artifact.module)[4]
        ref = None
        for split, below in (("model", None), ("tensor-cores", 0), ("dots", 10**9)):
            if split == "tensor-cores" and nnz < M * N // 10**4:  # one entry per tile: minutes of waste
                continue
            kernel.dot_below = below
            kernel(A, B, p)
            torch.cuda.synchronize()
            fresh = sp.SparsePattern(M, N, "csr", p.rows.clone(), p.cols.clone())
            t0 = time.perf_counter()
            P = kernel(A, B, fresh)  # checks and tile lists of a new pattern object
            torch.cuda.synchronize()
            prep = time.perf_counter() - t0
            if ref is None:
                rows, cols = p.rows.long(), p.cols.long()
                ref = torch.cat([(A[rows[i:i + (1 << 20)]].float() * B[:, cols[i:i + (1 << 20)]].t().float()).sum(1)
                                 for i in range(0, nnz, 1 << 20)])
            err = ((P - ref).abs().max() / ref.abs().max()).item()
            ms = do_bench(lambda: kernel(A, B, p), warmup=50, rep=200)
            plan = sp.dispatch_plan(p, bm, bn, below if below is not None else model)
            bt = B.t().contiguous()
            args = [A, B, p.rows, p.cols, torch.empty_like(P), bt, *plan.cuda_tensors()]
            kms = do_bench(lambda: jit(*args), warmup=50, rep=200)  # the launch alone: no call overhead
            print(f"| {M}x{N} nnz {nnz} | {kind} | {split} | {ms:.3f} | {cus:.3f} | {cus / ms:.1f}x | kernel {kms:.3f} | {plan.n_tc} | "
                  f"{plan.n_dot} | {prep:.3f} (gen {gen_s:.1f}) | err {err:.1e} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())

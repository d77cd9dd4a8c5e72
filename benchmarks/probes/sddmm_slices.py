"""Probe (issue 12): the SDDMM kernel of examples/sddmm.tk through `cuda` with its dot products
by rows (`<kernel>_dots`: each entry reads its row of B transposed from L2) and in shared-memory
slices of B (`<kernel>_slices`), every entry forced onto the dot products, against the split of
the `sparse-dispatch` cost model and every tile on tensor cores, and cuSPARSE
(torch.sparse.sampled_addmm, f32) at issue-12 shapes.

Each variant is checked against float64 torch at the entries (relative error over the largest
|P|), then timed as whole calls (triton.testing.do_bench medians, ms, preprocessing cached per
pattern, B's transpose included) and as CUDA-graph replays of 20 calls (ms per call). Prints a
markdown table; `K=NN` and `M:N:nnz:pattern[:K]` arguments pick the shapes.

    source .device/env.sh && python3 benchmarks/probes/sddmm_slices.py
"""

from __future__ import annotations

import sys

import torch
from triton.testing import do_bench

import tkc
from tkc import sparse as sp

SHAPES = [(10000, 10000, 5_000_000, "uniform", 32), (10000, 10000, 5_000_000, "rmat", 32),
          (10000, 10000, 5_000_000, "uniform", 256), (10000, 10000, 5_000_000, "rmat", 256),
          (8000, 8000, 1_920_000, "uniform", 256), (4000, 4000, 88_000, "uniform", 256),
          (4000, 4000, 88_000, "rmat", 256), (1504, 1504, 746_000, "uniform", 256),
          (10000, 10000, 5_000_000, "uniform", 512), (36000, 36000, 4_000_000, "uniform", 256)]
VARIANTS = (("model", None, None), ("rows", 10**9, "rows"), ("slices", 10**9, "slices"), ("tiles", 0, None))


def graph_ms(fn, calls: int = 20) -> float:
    """ms per call of `calls` calls of `fn` captured in one CUDA graph (median of 10 replays)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / calls)
    return sorted(times)[len(times) // 2]


def main() -> int:
    picks = [a for a in sys.argv[1:] if ":" in a]
    shapes = SHAPES
    if picks:
        shapes = []
        for a in picks:
            f = a.split(":")
            shapes.append((int(f[0]), int(f[1]), int(f[2]), f[3], int(f[4]) if len(f) > 4 else 256))
    print(f"{torch.cuda.get_device_name()}")
    print("| shape | pattern | K | variant | dot path | ms per call | graph ms | cuSPARSE ms | x cuSPARSE | n_tc | n_dot | err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for M, N, nnz, kind, K in shapes:
        p = (sp.rmat if kind == "rmat" else sp.uniform)(M, N, nnz, seed=1).to("cuda")
        g = torch.Generator(device="cuda").manual_seed(0)
        A = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16, generator=g)
        S = p.to_torch(layout="csr")
        try:
            cus = do_bench(lambda: torch.sparse.sampled_addmm(S, A.float(), B.float(), beta=0.0), warmup=20, rep=100)
        except RuntimeError:
            cus = float("nan")
        rows, cols = p.rows.long(), p.cols.long()
        ref = torch.cat([(A[rows[i:i + (1 << 20)]].double() * B[:, cols[i:i + (1 << 20)]].t().double()).sum(1)
                         for i in range(0, p.nnz, 1 << 20)])
        kernel = tkc.compile("examples/sddmm.tk", target="cuda")  # (dims from the call)
        for name, below, path in VARIANTS:
            if name == "tiles" and nnz < M * N // 10**4:
                continue
            kernel.dot_below, kernel.dot_path = below, path
            P = kernel(A, B, p)
            torch.cuda.synchronize()
            err = ((P.double() - ref).abs().max() / ref.abs().max()).item()
            ms = do_bench(lambda: kernel(A, B, p), warmup=20, rep=100)
            gms = graph_ms(lambda: kernel(A, B, p))
            artifact, jit = kernel.specialize(kernel.bind_dims([A, B, p]))
            model_below, model_path = kernel._sampled(artifact.module)[4], jit.dot_path
            plan = sp.dispatch_plan(p, 128, 128, below if below is not None else model_below)
            print(f"| {M}x{N} nnz {p.nnz} | {kind} | {K} | {name} | {path or model_path} | {ms:.4f} | {gms:.4f} | "
                  f"{cus:.3f} | {cus / ms:.1f}x | {plan.n_tc} | {plan.n_dot} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

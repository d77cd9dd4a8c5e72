"""Probe: host time of one `Kernel.__call__` of examples/sddmm.tk on the CUDA backend at a small
shape (4000^2, 88k entries, K = 256), where the kernels take about 14 us: the call's wall time
(back-to-back calls, one synchronize at the end, so max(host, device) per call), the kernels'
own time as a CUDA-graph replay, and a cProfile of 300 calls (top functions by own time).

    source .device/env.sh && python3 benchmarks/probes/sddmm_overhead.py
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import tkc
from tkc import sparse as sp


def graph_us(fn, calls: int = 20, replays: int = 50) -> float:
    """us per call of `fn` as replays of a CUDA graph of `calls` calls (wall time of `replays`)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (calls * replays) * 1e6


def main() -> None:
    kernel = tkc.compile("examples/sddmm.tk", target="cuda")
    p = sp.uniform(4000, 4000, 88000, seed=1).to("cuda")
    A = torch.randn(4000, 256, device="cuda", dtype=torch.float16)
    B = torch.randn(256, 4000, device="cuda", dtype=torch.float16)
    ref = (A.double() @ B.double())[p.rows.long(), p.cols.long()]
    got = kernel(A, B, p)
    assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-5
    for _ in range(50):
        kernel(A, B, p)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(300):
            kernel(A, B, p)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 300 * 1e6)
    print(f"{torch.cuda.get_device_name()}: call {best:.1f} us per call (wall, best of 5 x 300 calls)")
    print(f"kernels alone: {graph_us(lambda: kernel(A, B, p)):.1f} us per call (graph of 20 calls, 50 replays)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        kernel(A, B, p)
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()

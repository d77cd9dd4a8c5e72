"""Probe: host time of one `Kernel.__call__` of examples/sddmm.tk on the CUDA backend at a small
shape (4000^2, 88k entries, K = 256), where the kernel takes about 15 us: the call's wall time,
the launch alone, and a cProfile of 300 calls (top functions by own time).

    source .device/env.sh && python3 benchmarks/probes/sddmm_overhead.py
"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch

import tkc
from tkc import sparse as sp


def main() -> None:
    kernel = tkc.compile("examples/sddmm.tk", target="cuda")
    p = sp.uniform(4000, 4000, 88000, seed=1).to("cuda")
    A = torch.randn(4000, 256, device="cuda", dtype=torch.float16)
    B = torch.randn(256, 4000, device="cuda", dtype=torch.float16)
    for _ in range(20):
        kernel(A, B, p)
    torch.cuda.synchronize()
    for n in (300,):
        t0 = time.perf_counter()
        for _ in range(n):
            kernel(A, B, p)
        torch.cuda.synchronize()
        print(f"call: {(time.perf_counter() - t0) / n * 1e6:.1f} us per call (wall, {n} calls)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        kernel(A, B, p)
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()

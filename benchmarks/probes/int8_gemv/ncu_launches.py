"""Probe (issue 10): one GEMV at 11008 x 4096 launched alone, five times, for Nsight Compute.

`KERNEL` is `w8a8` (examples/matmul_w8a8.tk at its defaults), `f16` (examples/matmul_f16.tk at the
tuned BD = 2, BK = 2048, 256 threads) or `read` (w8a8.py's `rd`: W's and S's bytes read once,
nothing computed). Profile the third launch with cold caches:

    source .device/env.sh
    ncu --clock-control none --cache-control all -k 'regex:^(rd|matmul_w8a8|matmul_f16)$' \\
        --launch-skip 2 --launch-count 1 --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,... \\
        python3 benchmarks/probes/int8_gemv/ncu_launches.py KERNEL

Outcome (H200, 2026-11-29): docs/PERFORMANCE.md, "The int8 GEMV with programmatic launch between calls".
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, HERE]

D, K, GS = 11008, 4096, 64
G = K // GS


def main() -> int:
    import torch

    import tkc
    from tkc.cuda_runtime import CudaLaunch
    from w8a8 import read_only_source

    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in ("w8a8", "f16", "read"):
        print("usage: ncu_launches.py w8a8|f16|read", file=sys.stderr)
        return 2
    g = torch.Generator(device="cuda").manual_seed(0)
    W = torch.randint(-127, 128, (D, G, GS), device="cuda", dtype=torch.int8, generator=g)
    S = torch.rand((D, G, 1), device="cuda", generator=g) * 0.02 + 0.001
    X = torch.randint(-127, 128, (G, GS), device="cuda", dtype=torch.int8, generator=g)
    SX = torch.rand((G, 1), device="cuda", generator=g) * 0.02 + 0.001
    if which == "w8a8":
        kernel = tkc.compile(os.path.join(ROOT, "examples", "matmul_w8a8.tk"), target="cuda")
        run = lambda: kernel(W, S, X, SX)  # noqa: E731
    elif which == "f16":
        kernel = tkc.compile(os.path.join(ROOT, "examples", "matmul_f16.tk"), target="cuda", BD=2, BK=2048, threads=256)
        Wf = torch.randn((D, K), device="cuda", generator=g).half()
        Xf = torch.randn((1, K), device="cuda", generator=g)
        run = lambda: kernel(Wf, Xf)  # noqa: E731
    else:
        src = read_only_source(D * K // 16, D * G * 4 // 16)
        path = os.path.join(tempfile.mkdtemp(prefix="tkc-rd-"), "read_only.cu")
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)
        rd = CudaLaunch(path, src)
        flag = torch.zeros(4, dtype=torch.int32, device="cuda")
        run = lambda: rd(W, S, flag)  # noqa: E731
    for _ in range(5):
        run()
    torch.cuda.synchronize()
    print(which, "launched 5 times")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

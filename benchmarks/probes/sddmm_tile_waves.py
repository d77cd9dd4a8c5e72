"""Probe (issue 12): the SDDMM's tensor-core tiles against the number of SMs, at K = 256.

Question: `benchmarks/sddmm.py`'s 1504^2 shape (746k entries, 33% of S) is among the table's
closest passes of 10x cuSPARSE per call. examples/sddmm.tk tiles it into 12 x 12 = 144 tiles of
128 x 128, one block each, on 132 SMs. Does the 133rd tile cost a second wave?

Per M = N from 1280 (100 tiles) to 2048 (256 tiles), a uniform pattern of 33% density, f16 A and
B at K = 256: the tkc call (target `cuda`) by `triton.testing.do_bench` and as a CUDA-graph replay
(benchmarks/probes/sddmm_overhead.py `graph_us`), and torch.sparse.sampled_addmm (cuSPARSE, f32
operands and CSR values, as benchmarks/sddmm.py) by do_bench. us.

    source .device/env.sh && python3 benchmarks/probes/sddmm_tile_waves.py

Outcome (H200, 2026-11-30): docs/PERFORMANCE.md, "K = 32 R-MAT: a smaller plan, single-batch
blocks, items cut at P's sectors ...; the tiles' waves at K = 256".
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from triton.testing import do_bench

import tkc
from tkc import sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sddmm_overhead import graph_us  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    warnings.filterwarnings("ignore", message="Sparse")
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")
    print(f"{torch.cuda.get_device_name()}; examples/sddmm.tk, K = 256, 33% uniform density; us")
    for M in (1280, 1408, 1472, 1504, 1536, 1664, 2048):
        p = sp.uniform(M, M, int(M * M * 0.33), seed=1).to("cuda")
        A = torch.randn(M, 256, device="cuda", dtype=torch.float16)
        B = torch.randn(256, M, device="cuda", dtype=torch.float16)
        kernel(A, B, p)
        call = do_bench(lambda: kernel(A, B, p), warmup=50, rep=300) * 1e3
        graph = graph_us(lambda: kernel(A, B, p))
        S = torch.sparse_csr_tensor(p.crow().long(), p.cols.long(), torch.ones(p.nnz, device="cuda"), (M, M))
        Af, Bf = A.float(), B.float()
        cusparse = do_bench(lambda: torch.sparse.sampled_addmm(S, Af, Bf, beta=0.0), warmup=20, rep=200) * 1e3
        print(f"M = N = {M:5d}  tiles {(-(-M // 128)) ** 2:4d}  call {call:6.1f}  graph {graph:6.1f}  "
              f"cuSPARSE {cusparse:7.1f}  x{cusparse / call:5.2f}", flush=True)


if __name__ == "__main__":
    main()

"""Probe: the tensor-core rate that bounds an SDDMM of tiles at 10000^2, 5M uniform entries, K = 256.

At that density (5%) every 128 x 128 tile holds about 819 entries, and a 16 x 8 mma tile is empty
with probability 0.95^128 < 0.2%, so a kernel that computes S's entries on tensor cores computes
the whole dense product: 2 * 10000^2 * 256 = 51.2 GFLOP of f16 mma with f32 accumulation. This
probe times cuBLAS (torch.matmul, f16 operands, f32 accumulation) on that many FLOPs in a shape
whose output is small (4096 x 4096 x 1536: the FLOPs, not the output's bytes, decide), and on
the dense product itself (f16 output: 200 MB written), and prints the time each rate gives
51.2 GFLOP; docs/PERFORMANCE.md compares it with the issue's 40%-of-the-bytes-floor target.

    source .device/env.sh && python3 benchmarks/probes/sddmm_tensor_rate.py
"""

from __future__ import annotations

import torch
from triton.testing import do_bench

FLOP = 2 * 10000 * 10000 * 256  # the dense product of the 10000^2 K = 256 case


def main() -> None:
    print(torch.cuda.get_device_name())
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False  # f32 accumulation
    for M, N, K in [(4096, 4096, 1536), (10000, 10000, 256)]:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        us = do_bench(lambda: a @ b, warmup=50, rep=300, return_mode="median") * 1e3
        rate = 2 * M * N * K / us * 1e-6  # TFLOP/s
        print(f"{M} x {N} x {K}: {us:.1f} us, {rate:.0f} TFLOP/s; 51.2 GFLOP at this rate: {FLOP / rate * 1e-6:.1f} us")


if __name__ == "__main__":
    main()

"""Probe: the host path of a sampled gemm's launches on the CUDA backend (tkc/cuda_runtime.py
`CudaLaunch._sampled`), three ways on one GPU and host: CuPy's launch of each kernel ("cupy"),
cuLaunchKernelEx through ctypes without attributes ("ex"), and the same with every kernel after
the call's first launched programmatically ("ex+pdl", the default on sm_90). Per form and shape:
the wall time per call of back-to-back calls (one synchronize at the end: max(host, device)),
do_bench's time per call with its 256 MB clear before each (the device's time where the host
keeps up), and a CUDA-graph replay of 20 calls.

    source .device/env.sh && python3 benchmarks/probes/sddmm_launch_path.py
"""

from __future__ import annotations

import threading
import time

import torch
import triton.testing

import tkc
from tkc import cuda_runtime
from tkc import sparse as sp

from sddmm_overhead import graph_us  # (this folder: the probes run as scripts)

SHAPES = [(4000, 4000, 256, 88000, "uniform"), (1504, 1504, 256, 746000, "rmat"), (10000, 10000, 32, 5000000, "rmat")]
FORMS = {"cupy": (False, False), "ex": (True, False), "ex+pdl": (True, True)}


def _wall(fn) -> float:
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 200 * 1e6)
    return best


def main() -> None:
    kernel = tkc.compile("examples/sddmm.tk", target="cuda")
    print(torch.cuda.get_device_name())
    for M, N, K, nnz, kind in SHAPES:
        p = (sp.rmat if kind == "rmat" else sp.uniform)(M, N, nnz, seed=1).to("cuda")
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        ref = (A.double() @ B.double())[p.rows.long(), p.cols.long()]
        for form, (ex, pdl) in FORMS.items():
            cuda_runtime._launch_ex_supported = lambda ex=ex: ex
            cuda_runtime._pdl_supported = lambda index, pdl=pdl: pdl
            for _, jit in kernel._built.values():  # the launches each kept for the form before
                jit._sampled_state = threading.local()
            got = kernel(A, B, p)
            assert ((got.double() - ref).norm() / ref.norm()).item() < 1e-5
            fn = lambda: kernel(A, B, p)  # noqa: E731
            for _ in range(20):
                fn()
            per_call = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3
            print(f"{M}x{N} K{K} {nnz} {kind} {form:7s}: wall {_wall(fn):6.1f} us, do_bench {per_call:6.1f} us, "
                  f"graph {graph_us(fn):6.1f} us")


if __name__ == "__main__":
    main()

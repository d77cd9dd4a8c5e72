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
    # the pieces of a launch, each timed alone (us per call, 2000 calls)
    import cupy
    import numpy

    def per_call(fn, n=2000):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n * 1e6

    artifact, jit = kernel.specialize(kernel.bind_dims([A, B, p]))
    plan = sp.dispatch_plan(p, 128, 128, kernel._sampled(artifact.module)[4])
    P = torch.empty(p.nnz, device="cuda")
    args = [A, B, p.rows, p.cols, P, B.t().contiguous(), *plan.tensors()]
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream, 0)
    fn = jit.function(0, jit.dot_kernel)
    ptrs = tuple(numpy.uint64(t.data_ptr()) for t in args) + (numpy.int32(plan.n_tc), numpy.int32(plan.n_dot))
    grid = (-(-plan.n_dot // jit.dot_per_block), 1, 1)
    print(f"jit(...) alone: {per_call(lambda: jit(*args)):.1f} us")
    print(f"torch.cuda.current_stream().cuda_stream: {per_call(lambda: torch.cuda.current_stream(0).cuda_stream):.1f} us")
    print(f"data_ptr -> numpy.uint64 for 11 tensors: {per_call(lambda: tuple(numpy.uint64(t.data_ptr()) for t in args)):.1f} us")

    def with_ctx():
        with cupy.cuda.Device(0), stream:
            fn(grid, jit.block, ptrs, shared_mem=0)

    print(f"launch in `with Device, stream`: {per_call(with_ctx):.1f} us")
    try:
        print(f"launch with stream=: {per_call(lambda: fn(grid, jit.block, ptrs, shared_mem=0, stream=stream)):.1f} us")
    except TypeError as exc:
        print(f"launch with stream=: not accepted ({exc})")
    torch.cuda.synchronize()
    print(f"torch.empty(nnz): {per_call(lambda: torch.empty(p.nnz, device='cuda')):.1f} us")
    print(f"dispatch_plan (memoized): {per_call(lambda: sp.dispatch_plan(p, 128, 128, 577)):.1f} us")
    print(f"Kernel._as_tensor(pattern): {per_call(lambda: kernel._as_tensor(p, 2)):.1f} us")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        kernel(A, B, p)
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()

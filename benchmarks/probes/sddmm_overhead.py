"""Probe: host time of one `Kernel.__call__` of examples/sddmm.tk on the CUDA backend at a small
shape (4000^2, 88k entries, K = 256), where the kernels take about 14 us: the call's wall time
(back-to-back calls, one synchronize at the end, so max(host, device) per call), the kernels'
own time as a CUDA-graph replay, and a cProfile of 300 calls (top functions by own time).
With `--parts`, the host time of the call's parts, each timed alone (enqueue only: 150 calls
between synchronizes, best of 7): the whole call, `Kernel._sampled_call` on the pattern's kept
record, the `CudaLaunch` call alone, one `new_empty`, one `torch.add` (the host's speed), one bare
cuLaunchKernelEx of the dot products with kept arguments, and the Python-side conversions.

    source .device/env.sh && python3 benchmarks/probes/sddmm_overhead.py [--parts]
"""

from __future__ import annotations

import cProfile
import ctypes
import pstats
import sys
import time

import torch

import tkc
from tkc import sparse as sp
from tkc.bench import host_ms


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


def host_us(fn, n: int = 150, rounds: int = 7) -> float:
    """us of host time per call of `fn`: n calls enqueued between synchronizes, best of `rounds`
    (tkc.bench.host_ms)."""
    return host_ms(fn, [()], n, rounds) * 1e3


def parts(kernel, A, B, p) -> None:
    """The host time of a call's parts, each alone (module docstring)."""
    import numpy

    from tkc import cuda_runtime as cr

    record = next(v for k, v in p._memo.items() if isinstance(k, tuple) and len(k) == 3 and isinstance(v, tuple)
                  and len(v) == 6)  # Kernel.__call__'s kept record for this signature
    jit, _, pattern, plan, _, _ = record  # (the pattern on the kernel's device; the last: the bound launch)
    pattern_tensors = (pattern.rows, pattern.cols)
    P = torch.empty(p.nnz, device="cuda")
    bt = B.new_empty((B.shape[1], B.shape[0]))
    launch_data = plan.launch_tensors("cuda")
    tensors = (A, B, *pattern_tensors, P, bt, *launch_data)
    rows = [("whole call", lambda: kernel(A, B, p)),
            ("Kernel._sampled_call", lambda: kernel._sampled_call(record, (A, B, p))),
            ("CudaLaunch call (launches)", lambda: jit(*tensors, fill_bt=True)),
            ("new_empty", lambda: A.new_empty((88000,), dtype=torch.float32)),
            ("torch.add (the host's speed)", lambda: torch.add(A, A))]
    if plan.n_dot and cr._launch_ex_supported():
        args = [t.data_ptr() for t in tensors] + [plan.n_tc, plan.n_dot]
        values = (ctypes.c_uint64 * len(args))(*args)
        params = cr._params(values)
        config, _ = cr._launch_config((-(-plan.n_dot // jit.dot_per_block), 1, 1), jit.dot_block, 0,
                                      cr._raw_stream(torch, 0), False, False)
        function, launch = jit.function(0, jit.dot_kernel).kernel.ptr, cr._cu_launch_kernel_ex()
        rows += [("one bare cuLaunchKernelEx (dot products)", lambda: launch(ctypes.byref(config), function, params, None)),
                 (f"{len(tensors)} data_ptr", lambda: [t.data_ptr() for t in tensors]),
                 (f"{len(tensors)} numpy.uint64(data_ptr)", lambda: [numpy.uint64(t.data_ptr()) for t in tensors]),
                 (f"{len(args)} slots filled", lambda: values.__setitem__(slice(0, len(args)), args))]
    print(f"plan: {plan.n_tc} tiles, {plan.n_dot} dot products; host us per call, each part alone:")
    for name, fn in rows:
        print(f"  {name}: {host_us(fn):.1f}")


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
    if "--parts" in sys.argv:
        parts(kernel, A, B, p)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        kernel(A, B, p)
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()

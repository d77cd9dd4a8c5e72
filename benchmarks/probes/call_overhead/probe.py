"""Probe (issues 10 and 13): host time of one kernel call, tkc against torch eager.

Small decode kernels and the PEFT layer at small M are bound by the host: the GPU finishes a
64 x 4096 residual add in about 2 us, but each call spends its time in Python before the launch.
This probe times, per call, a loop of back-to-back calls on the same inputs (wall time over N
calls, one synchronize at the end, so it is max(host, device) per call), for torch eager, tkc's
`Kernel.__call__` through `cuda` and `tilelang`, and the pieces of the `cuda` path (the CuPy
launch, the stream lookup, the device context, the output allocation), plus cProfile of the tkc
calls. Run on the device machine: `python3 benchmarks/probes/call_overhead/probe.py`.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT]

import torch  # noqa: E402

import tkc  # noqa: E402

N_CALLS = 3000


def per_call_us(fn, n: int = N_CALLS) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


def profile(fn, label: str, n: int = 2000) -> None:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    print(f"--- cProfile {label} ({n} calls)")
    print("\n".join(s.getvalue().splitlines()[:34]))


def main() -> None:
    rows = []
    x = torch.randn(64, 4096, device="cuda")
    d = torch.randn(64, 4096, device="cuda")
    path = os.path.join(ROOT, "examples", "accum.tk")
    rows.append(("torch eager x + d", per_call_us(lambda: x + d)))
    rows.append(("torch.empty_like", per_call_us(lambda: torch.empty_like(x))))
    rows.append(("torch.empty(shape, dtype, device)", per_call_us(lambda: torch.empty((64, 4096), dtype=torch.float32, device=x.device))))
    rows.append(("torch.cuda.current_stream().cuda_stream", per_call_us(lambda: torch.cuda.current_stream(0).cuda_stream)))
    kernels = {}
    for target in ("cuda", "tilelang"):
        k = tkc.compile(path, target=target)
        y = k(x, d)
        torch.testing.assert_close(y, x + d)
        kernels[target] = k
        rows.append((f"tkc {target} Kernel(x, d)", per_call_us(lambda: k(x, d))))
    kc = kernels["cuda"]
    jit = next(iter(kc._plain.values()))[0]
    out = torch.empty_like(x)
    rows.append(("tkc cuda CudaLaunch(x, d, out)", per_call_us(lambda: jit(x, d, out))))
    kt = kernels["tilelang"]
    tl = next(iter(kt._plain.values()))[0]
    rows.append(("tilelang JIT kernel(x, d, out)", per_call_us(lambda: tl(x, d, out))))
    import cupy
    import numpy

    fn = jit.function(0)
    args = (numpy.uint64(x.data_ptr()), numpy.uint64(d.data_ptr()), numpy.uint64(out.data_ptr()))
    stream = cupy.cuda.ExternalStream(torch.cuda.current_stream(0).cuda_stream, 0)
    with stream:
        rows.append(("cupy RawKernel(grid, block, prebuilt args)", per_call_us(lambda: fn(jit.grid, jit.block, args))))
        rows.append(("cupy RawKernel, args built per call", per_call_us(
            lambda: fn(jit.grid, jit.block, (numpy.uint64(x.data_ptr()), numpy.uint64(d.data_ptr()), numpy.uint64(out.data_ptr()))))))
    dev = cupy.cuda.Device(0)

    def ctx():
        with dev, stream:
            pass

    rows.append(("with cupy Device(0), stream: pass", per_call_us(ctx)))
    raw = torch.cuda.current_stream(0).cuda_stream
    rows.append(("torch._C._cuda_getCurrentRawStream(0)", per_call_us(lambda: torch._C._cuda_getCurrentRawStream(0))))
    rows.append(("x.new_empty(shape, dtype=)", per_call_us(lambda: x.new_empty((64, 4096), dtype=torch.float32))))
    dv = x.device
    rows.append(("torch.empty(shape, dtype=, device=cached)", per_call_us(lambda: torch.empty((64, 4096), dtype=torch.float32, device=dv))))
    rows.append(("signature key (shape, dtype, device) x2", per_call_us(lambda: tuple((t.shape, t.dtype, t.device) for t in (x, d)))))
    rows.append(("signature key (shape, dtype, get_device) x2", per_call_us(lambda: tuple((t.shape, t.dtype, t.get_device()) for t in (x, d)))))
    func = fn.kernel
    print("cupy Function attrs:", [a for a in dir(func) if not a.startswith("__")][:30])
    rows.append(("cupy Function(grid, block, args, smem, stream)", per_call_us(lambda: func(jit.grid, jit.block, args, 0, stream))))
    import ctypes

    params = (ctypes.c_uint64 * 3)()
    ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(params) + 8 * i for i in range(3)])
    gx, gy, gz = jit.grid
    bx, by, bz = jit.block

    def fill():
        params[0], params[1], params[2] = x.data_ptr(), d.data_ptr(), out.data_ptr()

    rows.append(("fill 3 ctypes params from data_ptr", per_call_us(fill)))
    try:
        from cuda.bindings import driver as cu

        cf = cu.CUfunction(func.ptr)
        st = cu.CUstream(raw)
        pa = ctypes.addressof(ptrs)

        def launch_cp():
            params[0], params[1], params[2] = x.data_ptr(), d.data_ptr(), out.data_ptr()
            cu.cuLaunchKernel(cf, gx, gy, gz, bx, by, bz, 0, st, pa, 0)

        launch_cp()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + d)
        rows.append(("cuda-python cuLaunchKernel, ctypes params", per_call_us(launch_cp)))
        rows.append(("cuda-python cuLaunchKernel, raw stream int", per_call_us(
            lambda: cu.cuLaunchKernel(cf, gx, gy, gz, bx, by, bz, 0, torch._C._cuda_getCurrentRawStream(0), pa, 0))))
    except Exception as exc:  # noqa: BLE001
        print("cuda-python launch failed:", type(exc).__name__, exc)
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        launch = lib.cuLaunchKernel
        launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6 + [ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        launch.restype = ctypes.c_int
        fptr = func.ptr

        def launch_ct():
            params[0], params[1], params[2] = x.data_ptr(), d.data_ptr(), out.data_ptr()
            rc = launch(fptr, gx, gy, gz, bx, by, bz, 0, torch._C._cuda_getCurrentRawStream(0), ptrs, None)
            if rc:
                raise RuntimeError(rc)

        out.zero_()
        launch_ct()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + d)
        rows.append(("ctypes libcuda cuLaunchKernel", per_call_us(launch_ct)))
    except Exception as exc:  # noqa: BLE001
        print("ctypes launch failed:", type(exc).__name__, exc)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            jit(x, d, out)
    rows.append(("device time of the cuda kernel (graph of 20)", per_call_us(graph.replay, 300) / 20))
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, cupy {cupy.__version__}")
    for name, us in rows:
        print(f"{name:55s} {us:8.2f} us")
    profile(lambda: kc(x, d), "tkc cuda Kernel(x, d)")
    profile(lambda: kt(x, d), "tkc tilelang Kernel(x, d)")


if __name__ == "__main__":
    main()

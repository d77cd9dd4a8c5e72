"""Programmatic dependent launch on the CPU side: every kernel the CUDA backend emits waits for
its predecessor before its first memory access (`tk_pdl_enter()` first in the body, `griddepcontrol`
in the prelude), the sampled-gemm kernels (several launches) are never launched programmatically,
and the ctypes mirrors of cuda.h's launch structs have the driver's layout. The launches
themselves: tests/gpu/test_gpu_programmatic.py."""

from __future__ import annotations

import ctypes
import glob
import os

import pytest

from codegen import cuda
from tkc import cuda_runtime, driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk")))
SMALL = {"sgemm": {"M": 256, "N": 256, "K": 64}}


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_every_kernel_waits_before_its_first_memory_access(path):
    name = os.path.basename(path)[:-3]
    source = cuda.emit(driver.optimize(driver.frontend(path, SMALL.get(name, {})), "cuda"))
    launch = cuda_runtime.CudaLaunch(path, source)
    if name.startswith("sddmm"):  # sampled gemm: a transpose and two kernels per call
        assert not launch.pdl
        return
    assert "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");" in source
    lines = source.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith('extern "C" __global__')]
    assert len(heads) == 1 and lines[heads[0] + 1].strip().startswith("tk_pdl_enter();"), lines[heads[0]:heads[0] + 3]
    assert launch.pdl


def test_launch_structs_have_the_driver_layout():
    # cuda.h: CUlaunchAttribute {id; pad[4]; union value (64 bytes)}; CUlaunchConfig {7 unsigned,
    # CUstream, CUlaunchAttribute*, unsigned numAttrs}
    assert ctypes.sizeof(cuda_runtime._LaunchAttribute) == 72
    assert cuda_runtime._LaunchConfig.hStream.offset == 32
    assert cuda_runtime._LaunchConfig.attrs.offset == 40
    assert ctypes.sizeof(cuda_runtime._LaunchConfig) == 56
    assert cuda_runtime._PROGRAMMATIC_STREAM_SERIALIZATION == 6


def test_programmatic_launch_only_where_the_gpu_and_driver_have_it(monkeypatch):
    import torch

    def missing():
        raise OSError("libcuda.so.1: cannot open shared object file")

    for capability, lookup, want in [((8, 0), lambda: None, False), ((9, 0), missing, False), ((9, 0), lambda: None, True)]:
        cuda_runtime._pdl_supported.cache_clear()
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index, c=capability: c)
        monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lookup)
        assert cuda_runtime._pdl_supported(0) is want, capability
    cuda_runtime._pdl_supported.cache_clear()

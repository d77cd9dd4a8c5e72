"""Programmatic dependent launch on the CPU side: every kernel the CUDA backend emits waits for
its predecessor before its first memory access (`tk_pdl_enter()` first in the body, `griddepcontrol`
in the prelude), the sampled-gemm kernels (several launches) are never launched programmatically,
and the ctypes mirrors of cuda.h's launch structs have the driver's layout. The launches
themselves: tests/gpu/test_gpu_programmatic.py."""

from __future__ import annotations

import ctypes
import glob
import os
import re

import pytest

from codegen import cuda
from dsl import exprs
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
    assert len(heads) == 1
    body = lines[heads[0] + 1:]
    wait = next(i for i, line in enumerate(body) if line.strip().startswith("tk_pdl_enter();"))
    for line in body[:wait]:  # before the wait: block indices and L2 prefetches only, no access
        t = line.strip()
        assert (t.startswith(("//", "{", "}", "for (int pf", "tk_prefetch_l2(")) or
                re.fullmatch(r"const int \w+ = (blockIdx\.[xyz]|\w+ % \d+);.*", t)), t
    assert launch.pdl


def test_launch_structs_have_the_driver_layout():
    # cuda.h: CUlaunchAttribute {id; pad[4]; union value (64 bytes)}; CUlaunchConfig {7 unsigned,
    # CUstream, CUlaunchAttribute*, unsigned numAttrs}
    assert ctypes.sizeof(cuda_runtime._LaunchAttribute) == 72
    assert cuda_runtime._LaunchConfig.hStream.offset == 32
    assert cuda_runtime._LaunchConfig.attrs.offset == 40
    assert ctypes.sizeof(cuda_runtime._LaunchConfig) == 56
    assert cuda_runtime._PROGRAMMATIC_STREAM_SERIALIZATION == 6


def _boxes(name, defines=None):
    from codegen import cuda_prefetch

    module = driver.optimize(driver.frontend(os.path.join(ROOT, "examples", f"{name}.tk"), defines or {}), "cuda")
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    return {b.tensor.name: (tuple(exprs.to_str(s) for s in b.starts), b.extents)
            for b in cuda_prefetch.boxes(module.func, launch, module.env)}


def test_prefetch_boxes_cover_what_a_block_reads():
    # the GEMV's k loop sweeps whole rows: BD rows of W from d * BD, all of X
    assert _boxes("matmul_f16", {"D": 2304, "K": 768}) == {"W": (("d * 4", "0"), (4, 768)),
                                                          "X": (("0", "0"), (1, 768))}
    # an int8 GEMV: W [D, G, GS] and its scales S over every group of the block's rows
    assert _boxes("matmul_q8")["S"] == (("d * 4", "0", "0"), (4, 64, 1))
    # a read at a runtime position (attention's cache rows) or at an index-tensor element
    # (embedding) is read after the wait only
    assert set(_boxes("attention")) == {"Q"}
    assert _boxes("embedding") == {}
    # a GEMM block's operands over all of K exceed PER_COPY: nothing
    assert _boxes("sgemm") == {}


def test_prefetch_runs_in_the_generated_code_clamp_to_the_tensor():
    source = cuda.emit(driver.optimize(driver.frontend(os.path.join(ROOT, "examples", "matmul_f16.tk"),
                                                       {"D": 2302, "K": 768}), "cuda"))
    assert "tk_prefetch_l2(W + (d * 4) * 768, static_cast<long long>((min(d * 4 + 4, 2302) - (d * 4)) * 768) * 2);" \
        in source

"""Programmatic dependent launch on the CPU side: every kernel the CUDA backend emits waits for
its predecessor before its first memory access (`tk_pdl_enter(tk_pdl)` first in the body,
`griddepcontrol` in the prelude), triggers its successor's launch only when its last argument says
it was launched programmatically, a sampled gemm's kernels after the first of a call are
launched programmatically and wait before they read what the kernel before them writes, and the ctypes mirrors of cuda.h's launch structs have the driver's layout. The launches
themselves: tests/gpu/test_gpu_programmatic.py."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import re

import numpy
import pytest

import tkc
from codegen import cuda
from tkc import cuda_runtime, driver
from tkc import sparse as sp

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
        _sampled_kernels_wait_before_reading_bt(source)
        # at K = 32 the tile kernel's persistent twin too (`<kernel>_walk`)
        walk = cuda.emit(driver.optimize(driver.frontend(path, {"K": 32}), "cuda"))
        assert (cuda_runtime.CudaLaunch(path, walk).walk_kernel is not None) == (name == "sddmm")
        _sampled_kernels_wait_before_reading_bt(walk)
        return
    assert "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");" in source
    lines = source.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith('extern "C" __global__')]
    assert len(heads) == 1 and lines[heads[0] + 1].strip().startswith("tk_pdl_enter(tk_pdl);"), lines[heads[0]:heads[0] + 3]
    assert lines[heads[0]].endswith(", const int tk_pdl) {")  # the last argument, which the runtime appends
    assert launch.pdl


def _kernel_bodies(source: str) -> dict[str, list[str]]:
    lines, bodies, name = source.splitlines(), {}, None
    for line in lines:
        if line.startswith('extern "C" __global__'):
            name = re.match(r'extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(', line).group(1)
            bodies[name] = []
        elif name is not None:
            bodies[name].append(line.strip())
            if line == "}":
                name = None
    return bodies


def _sampled_kernels_wait_before_reading_bt(source: str) -> None:
    """Each kernel of a sampled gemm after the first of a call may start while the one before it
    runs (cuda_runtime.CudaLaunch._sampled): B's transpose waits, then triggers its successor,
    first after its shared array; the tiles wait before their first copy of A and B (and trigger the dot
    products only when there are any); the dot products wait before their first read of Bt, and
    those by column panels (`<kernel>_panels`) before their first read of A or B, and the row
    groups (`<kernel>_groups`, K = 32) before their first read of A, Bt or P."""
    bodies = _kernel_bodies(source)
    (transpose,) = [b for n, b in bodies.items() if n.endswith("_transpose_b")]
    assert transpose[1:3] == ["tk_pdl_wait();  // (launched programmatically only inside tkc.programmatic_launch)",
                             "tk_pdl_trigger();  // a kernel of the call always follows: it may launch now and wait for Bt"]
    (dots,) = [b for n, b in bodies.items() if n.endswith("_dots")]
    wait = dots.index("if (it == 0) tk_pdl_wait();")
    assert all("Bt +" not in line and "Bt[" not in line and "P[" not in line for line in dots[:wait])
    assert any("Bt + " in line for line in dots[wait:])
    (panels,) = [b for n, b in bodies.items() if n.endswith("_panels")]
    wait = panels.index("tk_pdl_wait();")
    assert all(not re.search(r"\b[ABP](\[| \+)", line) for line in panels[:wait]), panels[:wait]
    assert any("B + " in line for line in panels[wait:]) and any("A + " in line for line in panels[wait:])
    for name, groups in bodies.items():  # every entry by row groups (K = 32): waits before Bt's (or B's) panel
        if name.endswith(("_groups", "_groups_b")):
            wait = groups.index("tk_pdl_wait();  // (launched programmatically only inside tkc.programmatic_launch)")
            assert all(not re.search(r"\b(A|B|Bt|P)(\[| \+)", line) for line in groups[:wait]), groups[:wait]
            panel = "B + " if name.endswith("_b") else "Bt + "
            assert any(panel in line for line in groups[wait:]) and any(re.search(r"\bP(\[| \+)", line)
                                                                         for line in groups[wait:])
    tiles = [b for n, b in bodies.items()
             if not n.endswith(("_dots", "_transpose_b", "_panels", "_groups", "_groups_b"))]
    for tile in tiles:
        wait = tile.index("tk_pdl_wait();")
        assert tile[wait + 1] == "if (n_dot > 0) tk_pdl_trigger();"
        # (the copies are lambdas defined before it: `auto load = [&](...)`; none is called before it)
        calls = [line for line in tile[:wait] if re.search(r"\b(load|places)\(", line) and not line.startswith("auto ")]
        assert not calls and any(line.startswith("auto load = ") for line in tile[:wait]), calls


def test_the_trigger_only_in_programmatic_launches():
    """`griddepcontrol.launch_dependents` costs an ordinary launch about 0.1 us in a small grid
    (docs/PERFORMANCE.md "Nineteenth pass"): tk_pdl_enter gives it only when its argument says
    the launch was programmatic."""
    source = cuda.emit(driver.optimize(driver.frontend(os.path.join(ROOT, "examples", "accum.tk")), "cuda"))
    body = source.split("void tk_pdl_enter(const int programmatic) {", 1)[1].split("\n}\n", 1)[0]
    trigger = [line for line in body.splitlines() if "tk_pdl_trigger()" in line]
    assert len(trigger) == 1 and trigger[0].strip().startswith("if (programmatic && "), trigger
    helper = source.split("void tk_pdl_trigger() {", 1)[1].split("\n}\n", 1)[0]
    assert 'asm volatile("griddepcontrol.launch_dependents;" ::: "memory");' in helper


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
        cuda_runtime._launch_ex_supported.cache_clear()
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index, c=capability: c)
        monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lookup)
        assert cuda_runtime._pdl_supported(0) is want, capability
        assert cuda_runtime._launch_ex_supported() is (lookup is not missing)
    cuda_runtime._pdl_supported.cache_clear()
    cuda_runtime._launch_ex_supported.cache_clear()


def test_launch_ex_packs_arguments_into_slots(monkeypatch):
    """_launch_ex's argument slots: each argument's 8-byte slot holds a pointer whole and an int32
    (negative ones too) in its low 4 bytes; the config keeps the grid, block, shared memory,
    stream and attributes; a second launch with other values reuses the slots."""
    seen = []

    def driver_call(config_ref, function, params, extra):
        config = config_ref._obj
        words = [ctypes.c_uint64.from_address(params[i]).value for i in range(4)]
        low = [ctypes.c_int32.from_address(params[i]).value for i in (2, 3)]
        attrs = [config.attrs[i].id for i in range(config.numAttrs)]
        seen.append((function, (config.gridDimX, config.gridDimY, config.gridDimZ),
                     (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes,
                     config.hStream, attrs, words[:2], low))
        return 0

    monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lambda: driver_call)
    ptrs = [numpy.uint64(0x7F00_0000_1000), numpy.uint64(0x7F00_0000_2000)]
    cuda_runtime._launch_ex(11, (5, 2, 1), (256, 1, 1), ptrs + [numpy.int32(-3), numpy.int32(88000)], 4096, 77,
                            programmatic=True)
    cuda_runtime._launch_ex(12, (7, 1, 1), (128, 1, 1), ptrs[::-1] + [numpy.int32(9), numpy.int32(-1)], 0, 78,
                            cooperative=True)
    assert seen == [
        (11, (5, 2, 1), (256, 1, 1), 4096, 77, [cuda_runtime._PROGRAMMATIC_STREAM_SERIALIZATION],
         [0x7F00_0000_1000, 0x7F00_0000_2000], [-3, 88000]),
        (12, (7, 1, 1), (128, 1, 1), 0, 78, [cuda_runtime._COOPERATIVE], [0x7F00_0000_2000, 0x7F00_0000_1000], [9, -1])]


class _FakeTensor:
    """What CudaLaunch reads of a CUDA tensor: device, pointer, element count, shape."""

    is_cuda = True

    def __init__(self, ptr, shape):
        self.ptr, self.shape = ptr, shape

    def get_device(self):
        return 0

    def data_ptr(self):
        return self.ptr

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n


@pytest.mark.parametrize("ex, pdl, context, other_device", [
    (False, False, False, False), (True, False, False, False), (True, True, False, False), (True, True, True, False),
    (True, True, False, True)])
@pytest.mark.parametrize("n_tc, n_dot, fill_bt, K", [(3, 5, True, 256), (3, 0, False, 256), (0, 5, False, 256),
                                                    (3, 0, True, 256), (3, 5, True, 32), (1, 0, True, 32),
                                                    (3, 48, False, 32), (3, 49, False, 32)])
def test_a_sampled_gemm_launches_its_kernels_with_their_parameters(monkeypatch, n_tc, n_dot, fill_bt, K, ex, pdl,
                                                                   context, other_device):
    """The sampled gemm's launches from one call: B's transpose first (with `fill_bt`: the
    runtime asks for it when the dot products or sddmm.tk's wgmma tiles read Bt), the tensor-core
    tiles (when there are any), the dot products; every kernel takes the tensors' pointers then
    n_tc and n_dot, the transpose B and Bt only, and the grids follow the plan. They go through
    cuLaunchKernelEx where the driver has it (`ex`, else CuPy's launch); where the GPU takes
    programmatic launches (`pdl`), every kernel after the first is one, and the first too inside
    tkc.programmatic_launch (`context`). With the tensors on another device than the current one
    (`other_device`) the kernels launch in that device's context. A second call with other
    pointers launches with those, and a third on another stream launches on it: the launches kept
    per thread refill their argument slots and are kept per stream. A fourth with
    `dot_sequential` (no tiles) passes dot_order as a null pointer, and a fifth with `dot_panels`
    (tkc.sparse.DotPanels) launches `<kernel>_panels` over its work items, with its block and
    shared memory, its data in dot_order's place, instead of the dot products. At K = 32 the tiles are
    launched persistent (passes/smem_sddmm.py `persistent_fits`: `<kernel>_walk`, with its own
    shared memory) on what is resident at once (here 2 blocks) or n_tc when that is fewer; where
    the dot products are more than PERSISTENT_DOTS_PER_TILE (16) per tile, the one-tile kernel
    on n_tc blocks. A sixth call at K = 32 with `row_groups` (tkc.sparse.RowGroups) launches
    `<kernel>_groups` alone after the transpose: its blocks, 1024 threads, 180224 bytes of shared
    memory, its data in dot_order's place and its work items and slots as n_tc and n_dot."""
    path = os.path.join(ROOT, "examples", "sddmm.tk")
    source = cuda.emit(driver.optimize(driver.frontend(path, {"K": K}), "cuda"))
    launch = cuda_runtime.CudaLaunch(path, source)
    assert (launch.walk_kernel is not None) == (K == 32)
    launched, contexts = [], []
    programmatic_at = []  # the launches' indices that went through cuLaunchKernelEx with the attribute

    class Runtime:
        @staticmethod
        def getDevice():
            return 1 if other_device else 0

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            contexts.append(self.index)

        def __exit__(self, *exc):
            contexts.append(None)

    class Function:  # what CudaLaunch.function(index, name).kernel is: CuPy's launchable function
        def __init__(self, name):
            self.name = self.ptr = name

        def __call__(self, grid, block, args, smem, stream):
            launched.append((self.name, grid, block, [int(a) for a in args], smem))

    def driver_call(config_ref, function, params, extra):  # the driver's cuLaunchKernelEx
        assert ex and extra is None
        config = config_ref._obj
        assert config.hStream == stream[0]
        n = 2 if function == launch.transpose[0] else len(shapes) + 2
        args = [ctypes.c_uint64.from_address(params[i]).value for i in range(n)]
        attrs = [config.attrs[i].id for i in range(config.numAttrs)]
        assert attrs in ([], [cuda_runtime._PROGRAMMATIC_STREAM_SERIALIZATION])
        if attrs:
            programmatic_at.append(len(launched))
        launched.append((function, (config.gridDimX, config.gridDimY, config.gridDimZ),
                         (config.blockDimX, config.blockDimY, config.blockDimZ), args, config.sharedMemBytes))
        return 0

    cuda_ns = type("cuda", (), {"runtime": Runtime, "Device": Device,
                                "ExternalStream": staticmethod(lambda handle, index: None)})
    fake_cupy = type("cupy", (), {"cuda": cuda_ns})
    stream = [77]  # torch's current stream
    fake_torch = type("torch", (), {"_C": type("C", (), {"_cuda_getCurrentRawStream": staticmethod(lambda i: stream[0])})})
    monkeypatch.setattr(cuda_runtime, "_cupy_available", lambda: True)
    monkeypatch.setattr(cuda_runtime, "_modules", lambda: (fake_cupy, numpy, fake_torch))
    monkeypatch.setattr(launch, "function", lambda index, name=None: type("F", (), {"kernel": Function(name)}))
    monkeypatch.setattr(cuda_runtime, "_pdl_supported", lambda index: pdl)
    monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lambda: driver_call)
    monkeypatch.setattr(cuda_runtime, "_launch_ex_supported", lambda: ex)
    resident = []
    monkeypatch.setattr(launch, "resident",
                        lambda index, function, smem: resident.append((index, function, smem)) or (1, 2))
    N = 1000
    # A, B, rows, cols, P, Bt, then the plan's cuda_tensors: tc_ptr, tc_m, tc_n, tc_order, dot_order,
    # tc_pos, tc_rbase
    shapes = [(64, K), (K, N), (9,), (9,), (9,), (N, K), (n_tc + 1,), (n_tc,), (n_tc,), (9,), (n_dot,), (16,),
              (128 * n_tc,)]
    assert launch.tc_reads_bt  # sddmm.tk's tiles are wgmma tiles over Bt
    # the later calls' A, B, P and Bt elsewhere; the third on another stream; the fourth, where every entry is a
    # dot product, with the plan's dot_sequential: dot_order is passed as a null pointer
    assert launch.panel_kernel == "sddmm_panels" and launch.panel_smem == 16 * (K + 8) * 2
    assert (launch.group_kernel == "sddmm_groups") == (K == 32) and launch.group_smem == (180224 if K == 32 else 0)
    assert launch.group_b_kernel == ("sddmm_groups_b" if K == 32 else None)  # (N = 1000: whole 16-byte vectors)
    for call in range(7 if K == 32 else 5):
        stream[0] = 78 if call == 2 else 77
        seq = call == 3 and n_tc == 0
        # (7 work items of 32 slots: the launches take the slots as n_dot)
        panels = sp.DotPanels(_FakeTensor(1 << 30, (2 * 7 + 2 * 7 * 32,)), 7, 3.0, 7 * 32) if call == 4 else None
        nd = panels.slots if panels and n_dot else n_dot
        # (the sixth at K = 32: every entry by row groups, 11 work items of 176 slots on 3 blocks)
        # (the seventh: the same with the panels transposed from B by `<kernel>_groups_b`, refused with fill_bt)
        groups = sp.RowGroups(_FakeTensor(2 << 30, (100,)), 3, 11, 176, 2560) if call in (5, 6) else None
        from_b = {"groups_from_b": True} if call == 6 else {}
        tensors = [_FakeTensor(4096 * (i + 1) + (1 << 20) * call * (i in (0, 1, 4, 5)), s) for i, s in enumerate(shapes)]
        launched.clear()
        programmatic_at.clear()
        contexts.clear()
        if from_b and fill_bt:
            with pytest.raises(cuda_runtime.BackendError, match="groups_from_b"):
                launch(*tensors, fill_bt=fill_bt, row_groups=groups, **from_b)
            continue
        with tkc.programmatic_launch() if context else contextlib.nullcontext():
            launch(*tensors, fill_bt=fill_bt, **({"dot_sequential": True} if seq else {}),
                   **({"dot_panels": panels} if panels else {}), **({"row_groups": groups} if groups else {}), **from_b)
        ptrs = [t.ptr for t in tensors]
        if seq:
            ptrs[10] = 0
        if panels:
            ptrs[10] = 1 << 30
        if groups:
            ptrs[10] = 2 << 30
        want = []
        if fill_bt:
            name, tile, threads = launch.transpose
            want.append((name, (-(-N // tile), -(-K // tile), 1), (threads, 1, 1), [ptrs[1], ptrs[5]], 0))
        if groups:  # instead of the tiles and the dot products: the plan's work items and slots as n_tc, n_dot
            want.append(("sddmm_groups_b" if from_b else "sddmm_groups", (3, 1, 1), (1024, 1, 1), ptrs + [11, 176],
                         180224))
        elif n_tc:
            if K == 32 and nd <= 16 * n_tc:
                assert launch.walk_kernel == launch.tc_kernel + "_walk" and launch.walk_smem > 0
                want.append((launch.walk_kernel, (min(n_tc, 2), 1, 1), launch.block, ptrs + [n_tc, nd],
                             launch.walk_smem))
            else:
                want.append((launch.tc_kernel, (n_tc, 1, 1), launch.block, ptrs + [n_tc, nd], launch.smem))
        if groups:
            pass
        elif n_dot and panels:  # by column panels: the generated source's block and shared memory
            threads = int(re.search(r"PANEL_THREADS = (\d+)", launch.source).group(1))
            want.append(("sddmm_panels", (7, 1, 1), (threads, 1, 1), ptrs + [n_tc, nd], 16 * (K + 8) * 2))
        elif n_dot:
            # the dot kernel's own block: the DOT_THREADS of the generated source
            dot_threads = int(re.search(r"DOT_THREADS = (\d+)", launch.source).group(1))
            want.append((launch.dot_kernel, (-(-n_dot // launch.dot_per_block), 1, 1), (dot_threads, 1, 1),
                         ptrs + [n_tc, nd], 0))
        assert launched == want
        assert programmatic_at == (list(range(0 if context else 1, len(want))) if pdl else [])
        assert contexts == ([0, None] if other_device or not ex else [])
        # the occupancy asked of the persistent tile kernel (on the tensors' device)
        assert set(resident) == ({(0, launch.walk_kernel, launch.walk_smem)} if K == 32 and n_tc and n_dot <= 16 * n_tc
                                 else set())  # (asked by the earlier calls; the row groups ask for none)


def test_sampled_gemm_calls_on_two_threads_keep_their_own_arguments(monkeypatch):
    """Two threads calling one sampled-gemm kernel: each keeps its own launches and argument
    slots (CudaLaunch._sampled), so a call on another thread between this call's launches (here:
    run from inside this call's first driver call) does not change the pointers of its later
    launches."""
    import threading

    path = os.path.join(ROOT, "examples", "sddmm.tk")
    launch = cuda_runtime.CudaLaunch(path, cuda.emit(driver.optimize(driver.frontend(path, {}), "cuda")))
    K, N, n_tc, n_dot = 256, 1000, 3, 5
    shapes = [(64, K), (K, N), (9,), (9,), (9,), (N, K), (n_tc + 1,), (n_tc,), (n_tc,), (9,), (n_dot,), (16,),
              (128 * n_tc,)]
    seen = {}  # thread name -> the pointer arguments of its launches

    def driver_call(config_ref, function, params, extra):
        n = 2 if function == launch.transpose[0] else len(shapes) + 2
        seen.setdefault(threading.current_thread().name, []).append(
            [ctypes.c_uint64.from_address(params[i]).value for i in range(n)])
        if threading.current_thread().name == "first" and len(seen["first"]) == 1:
            other = threading.Thread(target=call, args=(1,), name="second")  # between the first call's launches
            other.start()
            other.join()
        return 0

    def call(which):
        tensors = [_FakeTensor(4096 * (i + 1) + (1 << 20) * which, s) for i, s in enumerate(shapes)]
        launch(*tensors, fill_bt=True)

    Runtime = type("Runtime", (), {"getDevice": staticmethod(lambda: 0)})
    fake_cupy = type("cupy", (), {"cuda": type("cuda", (), {"runtime": Runtime})})
    fake_torch = type("torch", (), {"_C": type("C", (), {"_cuda_getCurrentRawStream": staticmethod(lambda i: 77)})})
    monkeypatch.setattr(cuda_runtime, "_cupy_available", lambda: True)
    monkeypatch.setattr(cuda_runtime, "_modules", lambda: (fake_cupy, numpy, fake_torch))
    monkeypatch.setattr(launch, "function", lambda index, name=None: type("F", (), {"kernel": type("K", (), {"ptr": name})}))
    monkeypatch.setattr(cuda_runtime, "_pdl_supported", lambda index: True)
    monkeypatch.setattr(cuda_runtime, "_launch_ex_supported", lambda: True)
    monkeypatch.setattr(cuda_runtime, "_cu_launch_kernel_ex", lambda: driver_call)
    first = threading.Thread(target=call, args=(0,), name="first")
    first.start()
    first.join()
    for name, which in (("first", 0), ("second", 1)):
        ptrs = [4096 * (i + 1) + (1 << 20) * which for i in range(len(shapes))]
        assert seen[name] == [[ptrs[1], ptrs[5]], ptrs + [n_tc, n_dot], ptrs + [n_tc, n_dot]], name

"""Building and launching CUDA-backend kernels (target `cuda`) on torch tensors.

`build(artifact, cache)` compiles the generated translation unit (codegen/cuda.py) with nvcc
(`-arch=sm_90a -cubin -O3`; sm_XY for other GPUs) into the artifact's cache entry directory,
next to the source, and reuses the cubin on later builds (the file name carries the arch and a
hash of the source and of `nvcc --version`; it is written atomically). Without nvcc it falls back to NVRTC
through CuPy. The cubin is loaded with CuPy (`cupy.RawModule`), the dynamic shared memory limit
is raised when the kernel needs more than 48 KiB, and the returned callable launches on the
current torch CUDA stream with the tensors' data pointers: it takes every argument tensor
(inputs, then outputs), like the TileLang path of tkc/runtime.py. Thread-block clusters are
compiled into the kernel (`__cluster_dims__`), so a plain launch forms them.

CuPy (`cupy-cuda13x`) and torch are imported lazily: this module imports on machines without
either.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import hashlib
import math
import os
import shutil
import subprocess
import tempfile
import threading
import warnings

from codegen import cuda as cuda_codegen
from dsl import exprs
from tkc import driver
from tkc.cache import Cache
from tkc.runtime import BackendError

TARGET = "cuda"
SOURCE = "kernel.cu"
NVCC_FLAGS = ("-cubin", "-O3")
DEFAULT_SMEM = 48 * 1024  # bytes a kernel may use without the opt-in attribute


def nvcc_path() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME / $CUDA_PATH or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return None


@functools.lru_cache(maxsize=4)
def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    return hashlib.sha256(out.stdout.encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=16)
def device_arch(index: int) -> str:
    """`sm_90a` on Hopper (the backend's reference target), else `sm_XY` of the device."""
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


def compile_cubin(source_path: str, arch: str) -> str:
    """The cubin of `source_path` for `arch`, compiled once into the same directory."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc")
    folder = os.path.dirname(source_path)
    with open(source_path, "rb") as f:
        digest = hashlib.sha256(f.read() + nvcc_version(nvcc).encode()).hexdigest()[:16]
    cubin = os.path.join(folder, f"{os.path.basename(source_path).rsplit('.', 1)[0]}.{arch}.{digest}.cubin")
    if os.path.isfile(cubin):
        return cubin
    fd, tmp = tempfile.mkstemp(prefix=".kernel-", suffix=".cubin", dir=folder)
    os.close(fd)
    try:
        cmd = [nvcc, f"-arch={arch}", *NVCC_FLAGS, "-o", tmp, source_path]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            log = (proc.stderr or proc.stdout).strip().splitlines()
            raise BackendError(f"nvcc failed on generated CUDA ({source_path}): " + " | ".join(log[-6:]))
        os.replace(tmp, cubin)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return cubin


@functools.lru_cache(maxsize=1)
def _cupy_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("cupy") is not None


# a sampled gemm's persistent tile kernel walks its tiles with the resident blocks only while the dot
# products are at most this many per tile (CudaLaunch.tile_launch)
PERSISTENT_DOTS_PER_TILE = 16


class CudaLaunch:
    """A compiled CUDA-backend kernel: call it with every argument tensor (inputs then outputs)."""

    def __init__(self, source_path: str, source: str, loc=None):
        self.source_path, self.source = source_path, source
        self.loc = loc  # the kernel's location in its .tk file, for user errors at launch
        config = cuda_codegen.launch_config(source)
        self.name = config["kernel"]
        self.grid = tuple(config["grid"])
        # dynamic dims (`dynamic M`): (name, argument, axis) of the first tensor that names each;
        # they follow the runtime scalars as int arguments, and grid extents that are expressions
        # of them are evaluated at each launch
        self.dynamic = [tuple(x) for x in config.get("dynamic", [])]
        self._grid_exprs = [None if isinstance(g, int) else exprs.parse(g) for g in self.grid]
        self.block = tuple(config["block"])
        self.cluster = tuple(config.get("cluster", (1, 1, 1)))
        self.smem = int(config["smem_bytes"])
        # a sampled gemm (codegen/cuda_sddmm.py): two kernels, tensor-core tiles (this launch's
        # kernel, when the operands have that path) and dot products, with grids from the pattern's
        # DispatchPlan (the last seven tensors, `cuda_tensors`: tc_ptr, tc_m, tc_n, tc_order, dot_order,
        # tc_pos, tc_rbase); both take n_tc and n_dot after the tensors. `tc_reads_bt`: the tile kernel reads B transposed
        # (wgmma tiles), so the runtime provides Bt when there are tiles too
        sddmm = config.get("sddmm", {})
        self.tc_reads_bt = bool(sddmm.get("tc_reads_bt"))
        self.dot_per_block, self.dot_kernel = sddmm.get("dot_per_block"), sddmm.get("dot_kernel")
        self.dot_block = (sddmm["dot_threads"], 1, 1) if sddmm else None  # the dot products' own block
        self.tc_kernel = sddmm.get("tc_kernel")
        # the tile kernel's persistent twin (K <= 32): its blocks walk the tiles, the grid what is resident
        self.walk_kernel, self.walk_smem = sddmm.get("walk_kernel"), int(sddmm.get("walk_smem", 0))
        self.transpose = (sddmm["transpose_kernel"], sddmm["transpose_tile"], sddmm["transpose_threads"]) if sddmm else None
        # the dot products by column panels of B (no transpose; tkc.sparse.DotPanels), where codegen emitted them
        self.panel_kernel = sddmm.get("panel_kernel")
        self.panel_width, self.panel_entries = sddmm.get("panel_width"), sddmm.get("panel_entries")
        self.panel_block = (sddmm["panel_threads"], 1, 1) if self.panel_kernel else None
        self.panel_smem = int(sddmm.get("panel_smem", 0))  # dynamic shared memory: B's panel
        # every entry by row groups on mma.sync (K = 32; tkc.sparse.RowGroups), where codegen emitted it
        self.group_kernel = sddmm.get("group_kernel")
        self.group_block = (sddmm["group_threads"], 1, 1) if self.group_kernel else None
        self.group_smem = int(sddmm.get("group_smem", 0))  # dynamic shared memory: Bt's panel and the stages
        self.group_dense = bool(sddmm.get("group_dense"))  # P dense: the plan indexes it by row * N + column
        self.group_b_kernel = sddmm.get("group_b_kernel")  # the same, its panel transposed from B itself (N % 8 == 0)
        self._functions: dict[tuple, object] = {}  # (device index, kernel name) -> cupy RawKernel
        self._modules: dict[int, object] = {}  # device index -> cupy RawModule
        self._streams: dict[tuple, object] = {}  # (device index, torch stream handle) -> cupy stream
        # the kernel waits for its predecessor before touching memory (codegen's tk_pdl_enter), so
        # it may be launched programmatically (tkc.programmatic_launch); its last argument says
        # whether it was (the trigger for its successor costs an ordinary launch time)
        self.pdl = bool(config.get("pdl")) and not sddmm
        # `sync grid` (codegen: cg::this_grid().sync()): launched with the cooperative attribute
        self.cooperative = bool(config.get("cooperative"))
        self._resident: dict[tuple, tuple[int, int]] = {}  # (device index, CUfunction) -> (blocks per SM, SMs)
        self._sampled_state = threading.local()  # per thread: a sampled gemm's launches (_sampled)

    def function(self, index: int, name: str | None = None):
        """The kernel `name` (default: the launch's kernel) loaded on device `index`."""
        name = name or self.name
        if (index, name) not in self._functions:
            import cupy

            arch = device_arch(index)
            with cupy.cuda.Device(index):
                if index not in self._modules:
                    try:
                        self._modules[index] = cupy.RawModule(path=compile_cubin(self.source_path, arch))
                    except FileNotFoundError:  # no nvcc on this machine: NVRTC through CuPy
                        self._modules[index] = cupy.RawModule(code=self.source, backend="nvrtc",
                                                              options=(f"--gpu-architecture={arch}", "--std=c++17"))
                fn = self._modules[index].get_function(name)
                smem = (self.smem if name == self.name else self.walk_smem if name == self.walk_kernel
                        else self.group_smem if name in (self.group_kernel, self.group_b_kernel) else 0)
                if smem > DEFAULT_SMEM:
                    fn.max_dynamic_shared_size_bytes = smem
                if name == self.name and math.prod(self.cluster) > PORTABLE_CLUSTER:
                    _allow_nonportable_cluster(fn.kernel.ptr)
            self._functions[(index, name)] = fn
        return self._functions[(index, name)]

    def __call__(self, *tensors, fill_bt: bool = False, dot_sequential: bool = False, dot_panels=None,
                 row_groups=None, groups_from_b: bool = False) -> None:
        """Launch on `tensors`. Raises TkError (a user error) when CuPy, which loads and launches
        the kernel, is not installed. `fill_bt` (a sampled gemm): write B transposed into the Bt
        argument first (the kernel's own transpose), for the dot products. `dot_sequential` (a
        sampled gemm whose DispatchPlan says so): dot_order is 0, 1, ..., so it is passed as a
        null pointer and the dot products read entry i as the i-th. `dot_panels` (a sampled gemm
        with `panel_kernel`): the plan's tkc.sparse.DotPanels at this kernel's `panel_width`; its
        data goes in dot_order's place and its slots in n_dot's (the kernel finds its items'
        stride by them), and `<kernel>_panels` computes the dot products from B itself (no
        transpose) instead of `<kernel>_dots`. `row_groups` (a sampled gemm with `group_kernel`):
        the pattern's tkc.sparse.RowGroups; `<kernel>_groups` computes every entry (after B's
        transpose with `fill_bt`), its data in dot_order's place, its work items and slots as n_tc
        and n_dot, no tiles and no dot products; with `groups_from_b` (and no `fill_bt`),
        `<kernel>_groups_b`, which transposes its panels from B itself.

        Decoding launches small kernels back to back, so the host time of a launch counts: the
        stream comes from torch's current raw stream (no Stream object per call), the kernel is
        launched through CuPy's function object with that stream (no device or stream context
        manager unless the tensors are on another device than the current one)
        (benchmarks/probes/call_overhead: 12.6 -> 8.3 us per launch on an H100 machine's host)."""
        if not _cupy_available():
            from dsl.diagnostics import Loc, error

            raise error(self.loc or Loc(self.source_path, 0, 0),
                        "target `cuda` launches kernels through CuPy, which is not installed",
                        "install tkc's GPU extra: `pip install -e \".[gpu]\"` (cupy-cuda13x), or use `--target tilelang`")
        if self.dot_kernel is not None:  # a sampled gemm: its own launches (self.pdl is false for them)
            self._sampled(tensors, fill_bt, dot_sequential, dot_panels, row_groups, groups_from_b)
            return
        cupy, numpy, torch = _modules()
        index = tensors[0].get_device()
        if index < 0:  # a CPU tensor (the loop below reports it)
            index = torch.cuda.current_device()
        args, keep = [], []
        uint64 = numpy.uint64
        for t in tensors:
            if type(t) is int:  # a runtime scalar (`pos: i32`), after the tensors
                args.append(numpy.int32(t))
                continue
            args.append(uint64(_pointer(t, keep)))
        handle = _raw_stream(torch, index)
        stream = self._stream(cupy, index, handle)
        grid = self.grid
        if self.dynamic:
            values = {n: int(tensors[i].shape[k]) for n, i, k in self.dynamic}
            args += [numpy.int32(values[n]) for n, _, _ in self.dynamic]
            grid = tuple(g if e is None else exprs.evaluate(e, values) for g, e in zip(self.grid, self._grid_exprs))
            for axis, (n, limit) in enumerate(zip(grid, cuda_codegen.MAX_GRID)):
                if n > limit:
                    from dsl.diagnostics import Loc, error

                    raise error(self.loc or Loc(self.source_path, 0, 0),
                                f"at {', '.join(f'{k} = {v}' for k, v in values.items())} the grid has {n} blocks along "
                                f"{'xyz'[axis]}, over CUDA's limit of {limit}",
                                "put the grid index that grows with the dynamic dim first (it maps to blockIdx.x)")
            if 0 in grid:  # an empty dynamic extent: nothing to compute
                return
        programmatic = bool(_programmatic.get() and self.pdl and _pdl_supported(index))
        # the last argument (codegen/cuda.py PDL_ARG): whether this launch is programmatic
        fn_args = args + [numpy.int32(programmatic)] if self.pdl else args
        # the kernel's module lives in its device's context: switch only when that is not the current one
        if index == cupy.cuda.runtime.getDevice():
            self._launch(index, grid, fn_args, handle, stream, programmatic)
        else:
            with cupy.cuda.Device(index):
                self._launch(index, grid, fn_args, handle, stream, programmatic)

    def _launch(self, index: int, grid, fn_args: list, handle: int, stream, programmatic: bool) -> None:
        """One launch of the kernel on device `index` (the current one) with its arguments."""
        if programmatic or self.cooperative:  # launch attributes: through cuLaunchKernelEx
            function = self.function(index).kernel.ptr
            if self.cooperative:
                self.check_resident(index, function, grid)
            _launch_ex(function, grid, self.block, fn_args, self.smem, handle, programmatic=programmatic,
                       cooperative=self.cooperative)
        else:
            self.function(index).kernel(grid, self.block, tuple(fn_args), self.smem, stream)

    def _sampled(self, tensors, fill_bt: bool, dot_sequential: bool = False, panels=None, groups=None,
                 from_b: bool = False) -> None:
        """A sampled gemm's launches (codegen/cuda_sddmm.py): B's transpose when `fill_bt`, the
        tensor-core tiles when the plan has any, the dot products when it has any. Each kernel
        after the first is launched programmatically where the GPU takes it (sm_90): it starts
        launching while the one before it runs, reads the plan's indices, and waits
        (tk_pdl_wait) before it reads Bt or writes P; the first kernel is programmatic only
        inside tkc.programmatic_launch.

        `tensors`: A, B, the pattern's rows and cols, P, Bt, then the plan's `cuda_tensors`. A
        call at a small shape takes less time on the GPU than on the host, so the host path is
        short: the launches of one (device, stream, plan size, B shape, `fill_bt`, context) are
        kept per thread with their functions, configs and argument slots, the slots are filled
        once per call (the transpose's two apart), and each launch is one cuLaunchKernelEx
        (benchmarks/probes/sddmm_overhead.py). Without cuLaunchKernelEx, or with the tensors on
        another device than the current one, the kernels launch through CuPy / in that
        device's context."""
        keep = []
        prepared = self._sampled_args([_pointer(t, keep) for t in tensors], tensors, fill_bt, dot_sequential, panels,
                                      groups, from_b, keep)
        self._sampled_go(*prepared)

    def _sampled_args(self, ptrs: list, tensors, fill_bt: bool, dot_sequential: bool, panels, groups, from_b: bool,
                      keep: list):
        """(device index, argument values, the launches' key less the stream and context) of a
        sampled gemm call on `tensors` (their pointers `ptrs`, which it edits): the plan's form
        checked, its data in dot_order's place, n_tc and n_dot after the pointers."""
        n_items = group_blocks = 0
        if groups is not None:  # every entry by row groups: their data in dot_order's place
            if self.group_kernel is None:
                raise BackendError("row_groups given to a sampled gemm without a row-group kernel")
            if from_b and (self.group_b_kernel is None or fill_bt):
                raise BackendError("groups_from_b given to a sampled gemm without `<kernel>_groups_b`, or with fill_bt")
            ptrs[-3], group_blocks = _pointer(groups.data, keep), groups.n_blocks
        elif panels is not None:  # the dot products by column panels: their data in dot_order's place
            if self.panel_kernel is None:
                raise BackendError("dot_panels given to a sampled gemm without a panel kernel")
            ptrs[-3], n_items = _pointer(panels.data, keep), panels.n_items
        elif dot_sequential:  # dot_order is 0, 1, ...: the kernel reads entry i for a null dot_order
            ptrs[-3] = 0
        index = tensors[0].get_device()
        n_tc, n_dot = tensors[-6].numel(), tensors[-3].numel()  # tc_m, dot_order
        if n_items and n_dot:
            n_dot = panels.slots  # `<kernel>_panels` finds its items' stride and order by it (the tiles test n_dot > 0)
        if group_blocks:  # `<kernel>_groups` finds its arrays by its work items and slots
            n_tc, n_dot = groups.n_items, groups.slots
        from_b = bool(from_b and group_blocks)
        base = (index, n_tc, n_dot, fill_bt, tuple(tensors[1].shape), n_items, group_blocks, from_b)
        return index, ptrs + [n_tc, n_dot], base

    def _sampled_go(self, index: int, args: list, base: tuple) -> None:
        """Launch a sampled gemm call's kernels with `args` (pointers, then n_tc and n_dot) and
        the launches' key `base` (_sampled_args): the launches kept per thread and per (`base`,
        stream, `programmatic_launch`), their slots filled, one cuLaunchKernelEx each."""
        cupy, _, torch = _modules()
        handle = _raw_stream(torch, index)
        first_programmatic = _programmatic.get()
        state = self._sampled_state.__dict__
        key = (base, handle, first_programmatic)
        held = state.get(key)
        if held is None:
            held = self._sampled_launches(handle, len(args), first_programmatic, *base)
            if len(state) >= _CONFIGS_KEPT:
                state.clear()
            state[key] = held
        launches, values, pair = held
        if index != cupy.cuda.runtime.getDevice() or launches is None:  # another device's context, or no cuLaunchKernelEx
            _, n_tc, n_dot, fill_bt, shape_b, n_items, group_blocks, from_b = base
            self._sampled_cupy(index, handle, args[:-2], n_tc, n_dot, fill_bt, shape_b, first_programmatic, n_items,
                               group_blocks, from_b)
            return
        values[:] = args  # (the driver copies the arguments at each launch)
        pair[0], pair[1] = args[1], args[5]  # the transpose's B and Bt
        call = _cu_launch_kernel_ex()
        for config, function, params, _ in launches:
            status = call(config, function, params, None)
            if status:
                raise BackendError(f"cuLaunchKernelEx failed with CUDA driver error {status}")

    def bind_sampled(self, tensors, per_call, fill_bt: bool = False, dot_sequential: bool = False, dot_panels=None,
                     row_groups=None, groups_from_b: bool = False) -> "SampledBinding | None":
        """This sampled gemm's call on `tensors` (as `__call__` takes them) with its launch
        keywords, bound: the tensors at the positions `per_call` (the dense operands, the
        outputs, Bt) are given at each call, the others (the pattern's indices, the plan's
        arrays), their pointers and the plan's sizes are taken once (SampledBinding). None where
        a bound tensor is not 16-byte aligned (its pointer would be a copy's). Raises what
        `__call__` raises for the keywords."""
        keep = []
        ptrs = [0 if i in per_call else _pointer(t, keep) for i, t in enumerate(tensors)]
        index, args, base = self._sampled_args(ptrs, tensors, fill_bt, dot_sequential, dot_panels, row_groups,
                                               groups_from_b, keep)
        if keep:  # a bound array that needed an aligned copy: its pointer would not outlive this call
            return None
        # the bound tensors (and the plan's data) are kept alive with the binding: their pointers stay valid
        held = [None if i in per_call else t for i, t in enumerate(tensors)] + [dot_panels, row_groups]
        return SampledBinding(self, held, tuple(per_call), index, args, base)

    def _sampled_plan(self, index: int, n_tc: int, n_dot: int, fill_bt: bool, shape_b, n_items: int = 0,
                      group_blocks: int = 0, from_b: bool = False) -> list:
        """A sampled gemm call's kernels in launch order: (name, grid, block, shared memory bytes,
        whether it takes the transpose's two arguments). `n_items`: the dot products by column
        panels, over that many work items (0: `<kernel>_dots`). `group_blocks`: every entry by
        row groups, over that many blocks (n_tc and n_dot are then its items and slots)."""
        kernels = []
        if fill_bt:  # B [K, N] -> Bt [N, K], before the kernels that read it
            (K, N), (name, tile, threads) = shape_b, self.transpose
            kernels.append((name, (-(-N // tile), -(-K // tile), 1), (threads, 1, 1), 0, True))
        if group_blocks:
            kernels.append((self.group_b_kernel if from_b else self.group_kernel, (group_blocks, 1, 1), self.group_block,
                            self.group_smem, False))
            return kernels
        if self.tc_kernel and n_tc:
            name, grid, smem = self.tile_launch(index, n_tc, n_dot)
            kernels.append((name, (grid, 1, 1), self.block, smem, False))
        if n_dot and n_items:
            kernels.append((self.panel_kernel, (n_items, 1, 1), self.panel_block, self.panel_smem, False))
        elif n_dot:
            kernels.append((self.dot_kernel, (-(-n_dot // self.dot_per_block), 1, 1), self.dot_block, 0, False))
        return kernels

    def _sampled_launches(self, handle: int, n_args: int, first_programmatic: bool, index: int, n_tc: int, n_dot: int,
                          fill_bt: bool, shape_b, n_items: int = 0, group_blocks: int = 0, from_b: bool = False):
        """(launches, argument slots, the transpose's slots) for _sampled: each launch a
        (config reference, CUfunction, parameter array, the config's attributes) for
        cuLaunchKernelEx, programmatic after
        the first where the GPU takes it (the first too with `first_programmatic`); launches is
        None without cuLaunchKernelEx."""
        if not _launch_ex_supported():
            return None, None, None
        pdl = _pdl_supported(index)
        values, pair = (ctypes.c_uint64 * n_args)(), (ctypes.c_uint64 * 2)()
        params, pair_params = _params(values), _params(pair)
        launches = []
        for i, (name, grid, block, smem, two) in enumerate(self._sampled_plan(index, n_tc, n_dot, fill_bt, shape_b,
                                                                              n_items, group_blocks, from_b)):
            config, attrs = _launch_config(grid, block, smem, handle, pdl and (i > 0 or first_programmatic), False)
            launches.append((ctypes.byref(config), self.function(index, name).kernel.ptr, pair_params if two else params,
                             attrs))  # (the config points at its attributes: kept alive with it)
        return launches, values, pair

    def _sampled_cupy(self, index: int, handle: int, ptrs: list, n_tc: int, n_dot: int, fill_bt: bool, shape_b,
                      first_programmatic: bool, n_items: int = 0, group_blocks: int = 0, from_b: bool = False) -> None:
        """_sampled's launches through CuPy (a driver without cuLaunchKernelEx), or through
        _launch_ex in device `index`'s context (the tensors on another device than the current)."""
        cupy, numpy, _ = _modules()
        args = [numpy.uint64(p) for p in ptrs] + [numpy.int32(n_tc), numpy.int32(n_dot)]
        stream = self._stream(cupy, index, handle)
        pdl, ex = _pdl_supported(index), _launch_ex_supported()
        with cupy.cuda.Device(index):
            for i, (name, grid, block, smem, two) in enumerate(self._sampled_plan(index, n_tc, n_dot, fill_bt, shape_b,
                                                                                  n_items, group_blocks, from_b)):
                fn_args = (args[1], args[5]) if two else args
                if ex:
                    _launch_ex(self.function(index, name).kernel.ptr, grid, block, fn_args, smem, handle,
                               programmatic=pdl and (i > 0 or first_programmatic))
                else:
                    self.function(index, name).kernel(grid, block, tuple(fn_args), smem, stream)

    def _stream(self, cupy, index: int, handle: int):
        """CuPy's view of torch's stream `handle` on device `index`, kept per (device, handle)."""
        stream = self._streams.get((index, handle))
        if stream is None:
            with warnings.catch_warnings():  # CuPy 14 deprecates ExternalStream for Stream.from_external
                warnings.simplefilter("ignore", DeprecationWarning)
                stream = self._streams[(index, handle)] = cupy.cuda.ExternalStream(handle, index)
        return stream

    def resident(self, index: int, function: int, smem: int | None = None, block=None) -> tuple[int, int]:
        """(blocks of CUfunction `function` resident per SM at once, SMs) on device `index`, from the
        driver's occupancy calculator (`block`, default the launch's; `smem` bytes, default the
        launch's)."""
        key = (index, function)
        if key not in self._resident:
            import torch

            count = ctypes.c_int(0)
            occupancy = _libcuda().cuOccupancyMaxActiveBlocksPerMultiprocessor
            occupancy.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
            status = occupancy(ctypes.byref(count), ctypes.c_void_p(function), int(math.prod(block or self.block)),
                               self.smem if smem is None else smem)
            if status:
                raise BackendError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed with CUDA driver error {status}")
            sms = torch.cuda.get_device_properties(index).multi_processor_count
            self._resident[key] = (count.value, sms)
        return self._resident[key]

    @staticmethod
    def l2_bytes(index: int) -> int:
        """The L2 cache of device `index`, bytes (the runtime takes the column panels only where
        B fits a share of it: tkc/runtime.py PANEL_B_L2_SHARE); 0 where torch does not report it
        (then no call takes the panels)."""
        if index not in _L2_BYTES:
            import torch

            _L2_BYTES[index] = int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0))
        return _L2_BYTES[index]

    def panel_slots(self, index: int) -> int:
        """How many blocks of `<kernel>_panels` are resident at once on device `index` (the
        runtime sizes the work items of tkc.sparse.DotPanels by it: tkc/runtime.py
        `_b_transposed`)."""
        per_sm, sms = self.resident(index, self.function(index, self.panel_kernel).kernel.ptr, self.panel_smem,
                                    self.panel_block)
        return per_sm * sms

    def group_blocks(self, index: int) -> int:
        """How many blocks of `<kernel>_groups` are resident at once on device `index` (one per SM:
        its panel of Bt takes most of an SM's shared memory); the runtime plans the row groups over
        that many (tkc.sparse.row_groups, tkc/runtime.py `_groups_for`)."""
        per_sm, sms = self.resident(index, self.function(index, self.group_kernel).kernel.ptr, self.group_smem,
                                    self.group_block)
        return max(per_sm, 1) * sms

    def tile_launch(self, index: int, n_tc: int, n_dot: int) -> tuple[str, int, int]:
        """(kernel, grid, shared memory bytes) of the tensor-core tiles of a call with `n_tc` tiles
        and `n_dot` dot-product entries on device `index`: a block per tile, or the persistent
        twin (`walk_kernel`, codegen/cuda_sddmm.py) with what is resident at once, where the dot
        products are few (at most PERSISTENT_DOTS_PER_TILE per tile). Resident blocks hold every
        SM until their last tile, so the dot products launched after them cannot run beside them,
        and uneven tiles are not balanced as the hardware balances short blocks. At 10000^2 with
        5M entries, K = 32 (H200, 2026-11-29, docs/PERFORMANCE.md, graph replays): uniform
        entries (6084 tiles, 16k dot products) took 55.3 us against 66.7 for a block per tile in
        one call; R-MAT ones (2433 tiles of 670 to 11958 entries, 611k dot products) took 65.2
        with the persistent grid in one call, where a block per tile takes 46.3-46.5 in others."""
        if self.walk_kernel is None or n_dot > PERSISTENT_DOTS_PER_TILE * n_tc:
            return self.tc_kernel, n_tc, self.smem
        per_sm, sms = self.resident(index, self.function(index, self.walk_kernel).kernel.ptr, self.walk_smem)
        return self.walk_kernel, max(1, min(n_tc, per_sm * sms)), self.walk_smem

    def check_resident(self, index: int, function: int, grid) -> None:
        """A cooperative launch (`sync grid`) needs every block of the grid resident at once:
        a TkError (a user error) naming the most this GPU holds, before CUDA refuses the launch."""
        import torch

        per_sm, sms = self.resident(index, function)
        blocks = math.prod(grid)
        if blocks > per_sm * sms:
            from dsl.diagnostics import Loc, error

            raise error(self.loc or Loc(self.source_path, 0, 0),
                        f"`sync grid` needs every block of the grid resident at once: the grid has {blocks} blocks, "
                        f"and this {torch.cuda.get_device_name(index)} holds at most {per_sm * sms} of this kernel "
                        f"({per_sm} per SM x {sms} SMs)",
                        f"choose a grid of at most {per_sm * sms} blocks (a persistent grid that loops over the work), "
                        "or fewer threads, registers or shared memory per block")


class SampledBinding:
    """A sampled gemm's call on one pattern and plan with its pointers bound (CudaLaunch.bind_sampled):
    call it with the tensors at the positions `per_call`, in order; the kernels launch as
    `CudaLaunch.__call__` launches them on the full argument list. The host path of a call is the
    per-call tensors' pointers and the launches: the pattern's and the plan's pointers (rows,
    cols, the plan's arrays, the row groups' or panels' data) are taken once, and those tensors
    are kept alive by the binding (tkc.runtime keeps it in the pattern's memo with the plan)."""

    __slots__ = ("launch", "held", "per_call", "index", "args", "base")

    def __init__(self, launch: CudaLaunch, held: list, per_call: tuple, index: int, args: list, base: tuple):
        self.launch, self.held, self.per_call, self.index, self.args, self.base = (launch, held, per_call, index,
                                                                                  args, base)

    def __call__(self, *given) -> None:
        if len(given) != len(self.per_call):
            raise TypeError(f"a bound sampled gemm takes {len(self.per_call)} tensors, got {len(given)}")
        keep = []
        args = self.args.copy()
        for i, t in zip(self.per_call, given):
            args[i] = _pointer(t, keep)
        self.launch._sampled_go(self.index, args, self.base)


_programmatic = contextvars.ContextVar("tkc_programmatic_launch", default=False)


_L2_BYTES: dict[int, int] = {}  # device index -> L2 cache bytes (CudaLaunch.l2_bytes)


@contextlib.contextmanager
def programmatic_launch():
    """Inside this block, `cuda` kernels are launched with CUDA's programmatic-stream-serialization
    attribute (programmatic dependent launch, sm_90): each may start launching while the kernel
    before it in the stream still runs, and waits at its first instruction (tk_pdl_enter) until
    that one has finished and its writes are visible. Results are the same; the gap between
    dependent kernels shrinks. On a GPU before sm_90, or a driver without cuLaunchKernelEx, the
    kernels launch as usual. Captured into a CUDA graph, the edges stay programmatic (CUDA 12.3
    and later). Used by tkc.models.llama around the capture of a decode step."""
    token = _programmatic.set(True)
    try:
        yield
    finally:
        _programmatic.reset(token)


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute (cuda.h)
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig (cuda.h)
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_COOPERATIVE = 2  # CU_LAUNCH_ATTRIBUTE_COOPERATIVE


@functools.lru_cache(maxsize=None)
def _pdl_supported(index: int) -> bool:
    """Whether device `index` takes programmatic launches: sm_90 or later (`griddepcontrol`), and a
    driver with cuLaunchKernelEx (CUDA 12.0); elsewhere tkc.programmatic_launch launches as usual."""
    import torch

    return torch.cuda.get_device_capability(index)[0] >= 9 and _launch_ex_supported()


@functools.lru_cache(maxsize=1)
def _launch_ex_supported() -> bool:
    """Whether the driver has cuLaunchKernelEx (CUDA 12.0 and later)."""
    try:
        _cu_launch_kernel_ex()
    except (OSError, AttributeError):
        return False
    return True


@functools.lru_cache(maxsize=1)
def _libcuda() -> ctypes.CDLL:
    """The CUDA driver library, for the calls CuPy does not expose."""
    return ctypes.CDLL("libcuda.so.1")


@functools.lru_cache(maxsize=1)
def _cu_launch_kernel_ex():
    """The driver's cuLaunchKernelEx (CUDA 12.0 and later), through ctypes: CuPy launches without
    launch attributes."""
    fn = _libcuda().cuLaunchKernelEx
    fn.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


PORTABLE_CLUSTER = 8  # blocks; sm_90 runs up to 16 once the kernel allows non-portable sizes
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED (cuda.h)


def _allow_nonportable_cluster(function: int) -> None:
    """Let CUfunction `function` launch in clusters of 9-16 blocks (sm_90's non-portable sizes;
    map-dsmem accepts them for target `cuda`). Raises BackendError on a driver error."""
    set_attribute = _libcuda().cuFuncSetAttribute
    set_attribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    status = set_attribute(ctypes.c_void_p(function), _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    if status:
        raise BackendError(f"cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) failed with CUDA driver error {status}")


_launch_state = threading.local()  # per thread: argument slots by count, launch configs by shape (_launch_ex)
_CONFIGS_KEPT = 256  # launch configs cached per thread before the cache starts over


def _launch_ex(function: int, grid, block, args, smem: int, stream: int, programmatic: bool = False,
               cooperative: bool = False) -> None:
    """Launch CUfunction `function` through cuLaunchKernelEx, with the programmatic-stream-
    serialization attribute (`programmatic`) and/or the cooperative one (`cooperative`: every
    block resident at once, for cg::this_grid().sync()), or none; `args` are pointers and int32
    scalars (Python or numpy integers), in order. Raises BackendError on a driver error.

    The host time of a launch counts where kernels are short (a sampled gemm's call launches up
    to three): the arguments go into 8-byte slots that the thread keeps per argument count (an
    int32 is read from its slot's low 4 bytes: little-endian hosts), and the launch config with
    its attributes is kept per (grid, block, shared memory, stream, attributes); the driver
    copies both at the launch."""
    state = _launch_state.__dict__
    slots = state.setdefault("slots", {})
    n = len(args)
    held = slots.get(n)
    if held is None:
        values = (ctypes.c_uint64 * max(n, 1))()
        held = slots[n] = (values, _params(values))
    values, params = held
    values[:n] = args  # (ctypes wraps a negative int32 to its two's complement: its low word is the int32)
    config, _ = _launch_config(grid, block, smem, stream, programmatic, cooperative)
    status = _cu_launch_kernel_ex()(ctypes.byref(config), function, params, None)
    if status:
        raise BackendError(f"cuLaunchKernelEx failed with CUDA driver error {status}")


def _params(values) -> ctypes.Array:
    """cuLaunchKernelEx's kernelParams for the 8-byte argument slots `values`: a pointer to each."""
    base = ctypes.addressof(values)
    return (ctypes.c_void_p * len(values))(*[base + 8 * i for i in range(len(values))])


def _pointer(t, keep: list) -> int:
    """The device address of CUDA tensor `t` for a kernel argument; a sliced view that is not
    16-byte aligned (the kernels' vector accesses need it) is copied first, the copy appended to
    `keep` so it lives until the launch is queued (tensors tkc.runtime.Kernel allocates are always
    aligned). Raises ValueError for a tensor that is not on a CUDA device."""
    if not t.is_cuda:
        raise ValueError(f"target `cuda` needs CUDA tensors, got one on {t.device}")
    ptr = t.data_ptr()
    if ptr % 16:
        t = t.clone()
        keep.append(t)
        ptr = t.data_ptr()
    return ptr


def _launch_config(grid, block, smem: int, stream: int, programmatic: bool, cooperative: bool):
    """(CUlaunchConfig, its attribute array) for cuLaunchKernelEx, kept per thread and per (grid,
    block, shared memory, stream, attributes); a cache of _CONFIGS_KEPT starts over when full."""
    configs = _launch_state.__dict__.setdefault("configs", {})
    key = (*grid, *block, smem, stream, programmatic, cooperative)
    held = configs.get(key)
    if held is None:
        ids = ([_PROGRAMMATIC_STREAM_SERIALIZATION] if programmatic else []) + ([_COOPERATIVE] if cooperative else [])
        attrs = (_LaunchAttribute * max(1, len(ids)))()
        for attr, attr_id in zip(attrs, ids):
            attr.id = attr_id
            attr.value = (1).to_bytes(4, "little") + bytes(60)  # programmaticStreamSerializationAllowed / cooperative = 1
        if len(configs) >= _CONFIGS_KEPT:
            configs.clear()
        held = configs[key] = (_LaunchConfig(*grid, *block, smem, stream, attrs, len(ids)), attrs)
    return held


@functools.lru_cache(maxsize=1)
def _modules():
    """(cupy, numpy, torch), imported at the first launch."""
    import cupy
    import numpy
    import torch

    return cupy, numpy, torch


def _raw_stream(torch, index: int) -> int:
    """The handle of torch's current CUDA stream on device `index`: torch's own raw-stream query
    (what torch.compile's generated launchers call; 0.1 us) where this torch has it, else the
    public Stream object's (1.6-3.3 us). The query is looked up once (a lookup on torch._C takes
    about 1 us)."""
    if _RAW_STREAM and _RAW_STREAM[1] is torch:
        return _RAW_STREAM[0](index)
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (lambda i: torch.cuda.current_stream(i).cuda_stream)
    _RAW_STREAM[:] = [raw, torch]
    return raw(index)


_RAW_STREAM: list = []  # [query, the torch module it came from] (_raw_stream)


def build(artifact: driver.Artifact, cache: Cache | None = None) -> CudaLaunch:
    """A launchable kernel for a `cuda` artifact. With nvcc and a CUDA device here, the cubin for
    the current device is compiled now (so a build in a worker process fills the cache for the
    launching one); otherwise on the first launch on each device."""
    path = os.path.join(artifact.entry, SOURCE)
    if not os.path.isfile(path):  # the cache entry lost its file: write the source back
        with open(path, "w", encoding="utf-8") as f:
            f.write(artifact.source)
    if nvcc_path() is not None:
        import torch

        if torch.cuda.is_available():
            compile_cubin(path, device_arch(torch.cuda.current_device()))
    return CudaLaunch(path, artifact.source, artifact.module.func.loc)

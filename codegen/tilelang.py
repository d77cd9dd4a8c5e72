"""TileLang backend: final tile IR -> a readable TileLang (Python) module.

The generated file defines one `@T.prim_func` named after the kernel, with the problem dims and
schedule constants as named module constants and one statement (or one loop nest) per tile op.
GPU form (`tilelang`): shared tiles are `T.alloc_shared`, register tiles `T.alloc_fragment`
(`T.alloc_shared` in a launch that `registers_in_shared` picks, passes/smem_tilelang.py),
pipelined loops `T.Pipelined(n, num_stages=...)`, elementwise ops `T.Parallel` loops, and
`tile.gemm` is `T.gemm` on tensor cores when the tile allows it, otherwise a SIMT loop nest.
CPU form (`tilelang-cpu`, TileLang's "c" target): every tile is `T.alloc_local`, loops are
`T.serial`/`T.grid`, and partial tiles are guarded by explicit bounds checks.
A grid over the tiles of a sparse pattern (SDDMM's sampled gemm) is codegen/tilelang_sddmm.py.
Unsupported constructs raise a located TkError. Input: IR after `tile` (concrete shapes).
"""

from __future__ import annotations

import json
import keyword
import math

from dsl import exprs
from dsl.diagnostics import TkError, error
from dsl.ir import Module, Op, Value
from dsl.ops import (COMPARE, compare_dtype, device_checks, dynamic_dims, hoist_input_loads, index_bound_exprs,
                     peer_tiles, scalar_refs, scalars, shared_accesses)
from dsl.types import DTYPES
from codegen.cuda_plan import known_multiple
from codegen.cuda_prelude import CHECK_PRELUDE
from passes.smem_tilelang import (MMA_MIN, STAGED_LANES, STORE_BUFFERS, async_copy_ok,  # noqa: F401
                                  STREAM_BYTES, gemm_instruction, mma_fits, registers_in_shared, rotating_stores,
                                  row_extent, shared_vector, staged_pitch, staged_reduce, streaming_store,
                                  thread_reduce, vectors_in_shared)

TL_DTYPES = {"f16": "T.float16", "bf16": "T.bfloat16", "f32": "T.float32", "f64": "T.float64",
             "i8": "T.int8", "i32": "T.int32", "bool": "T.bool"}
# TileLang 0.1.15's automatic warp specialization (a TMA producer warpgroup added to pipelined
# kernels on sm_90) miscompiles some partial tiles: seed 000 variant 2 at M=1, N=48, K=16, R=16
# stored the same register for every column on an H200 (relative error 0.84; correct with it off,
# 2026-11-21). Correctness first: it stays off until the backend can prove a tile is safe.
PASS_CONFIGS = {"tl.disable_warp_specialized": True}
# bytes of tiles one `tilelang-cpu` launch may declare (C arrays on the stack): three quarters of
# Linux's default 8 MiB thread stack (16 MiB segfaulted); the examples' defaults take at most 1.3 MB
CPU_STACK_BYTES = 6 << 20
# Device code placed before the kernel when it reads peer tiles: a generic pointer to the same
# shared-memory object in block `rank` of the cluster (cooperative groups lowers it to `mapa`).
PEER_PRELUDE = '''PEER_PRELUDE = r"""
#include <cooperative_groups.h>
__device__ __forceinline__ void* tkc_peer_ptr(void* p, int rank) {
  return cooperative_groups::this_cluster().map_shared_rank(p, (unsigned)rank);
}
__device__ __forceinline__ int tkc_peer_live(void* p) { return 0; }
"""
'''
_IDX = "ijkl"
_TRANSCENDENTAL = ("exp", "exp2", "log", "sin", "cos", "tanh", "sigmoid", "pow", "sqrt", "rsqrt", "silu")


def tl_expr(text: str, tensors: dict[str, str] | None = None, check=None) -> str:
    """An IR index expression in TileLang syntax: floor division, T.min/T.max/T.ceildiv; an
    element of an index tensor (`ids[b]`) reads the buffer named by `tensors`, through
    `check(tensor, load_text)` when given (the GPU form's device-side range check)."""
    return _tl(exprs.parse(text), tensors or {}, check=check)


def _saturates(src, dst) -> bool:
    """Whether copying `src` into `dst` converts floats to integers (`_Emitter.cast` saturates)."""
    return dst.type.dtype in ("i8", "i32") and src.type.dtype in ("f16", "bf16", "f32", "f64")


def has_load(text: str) -> bool:
    """Whether an index expression reads an index tensor (its value is known only at run time)."""
    return "[" in text


def _tl(e: exprs.Expr, tensors: dict[str, str], parent: int = 0, right: bool = False, check=None) -> str:
    if isinstance(e, (exprs.Num, exprs.Sym)):
        return exprs.to_str(e)
    if isinstance(e, exprs.Load):
        text = f"{tensors.get(e.tensor, e.tensor)}[{', '.join(_tl(a, tensors, check=check) for a in e.args)}]"
        return text if check is None else check(e.tensor, text)
    if isinstance(e, exprs.Call):
        fn = {"cdiv": "T.ceildiv", "min": "T.min", "max": "T.max"}[e.fn]
        return f"{fn}({', '.join(_tl(a, tensors, check=check) for a in e.args)})"
    prec = exprs.PREC[e.op]
    op = "//" if e.op == "/" else e.op
    text = f"{_tl(e.a, tensors, prec, check=check)} {op} {_tl(e.b, tensors, prec, True, check=check)}"
    return f"({text})" if prec < parent or (prec == parent and right) else text


def tilelang_sddmm():
    """codegen/tilelang_sddmm.py, the lowering of a `tiles` grid (imported here on use: it
    imports this module)."""
    from codegen import tilelang_sddmm as sddmm

    return sddmm


def emit(module: Module, thread_reduce: bool = True, shared_registers: bool = True, store_buffers: bool = True) -> str:
    """TileLang source for the GPU (`tilelang.compile(..., target="cuda")`). `thread_reduce=False`
    keeps every reduction a serial loop (tkc/runtime.py falls back to it when TileLang finds no
    layout for a `T.reduce_*`); `shared_registers=False` keeps register tiles fragments where
    `registers_in_shared` would declare them shared (the fallback when TileLang cannot place a
    barrier between their loops); `store_buffers=False` stores staged tiles with T.copy where
    `rotating_stores` would rotate them over STORE_BUFFERS copies (the fallback when TileLang
    cannot make their `T.tma_copy` a TMA store)."""
    return _Emitter(module, cpu=False, thread_reduce=thread_reduce, shared_registers=shared_registers,
                    store_buffers=store_buffers).run()


SHARED_REGISTERS_MARK = "# tkc: this launch's register tiles are shared tiles (registers_in_shared)"
SHARED_VECTORS_MARK = "# tkc: this launch's row and column vectors are shared tiles (vectors_in_shared)"
# TileLang 0.1.15's failure to place a barrier between loops guarded by a thread count that is not
# a multiple of 32 (rmsnorm at N = 72 with two rows per block: "Condition: tx < 72")
SHARED_REGISTERS_FAILURES = ("[ThreadSync] Cannot lower a required shared-memory sync",)


def registers_shared_failed(source: str, exc: BaseException) -> bool:
    """Whether TileLang failed on `source` because of the register tiles it declares shared, a
    barrier it cannot place or a layout it cannot find for the fragments left (softmax over 33
    columns: its [16, 33, 1] reduction tile); then `emit(module, shared_registers=False)` is the
    form to compile."""
    return ((SHARED_REGISTERS_MARK in source or SHARED_VECTORS_MARK in source)
            and any(m in str(exc) for m in SHARED_REGISTERS_FAILURES + LAYOUT_FAILURES))


STORE_BUFFERS_MARK = "# tkc: staged stores rotate over their copies (rotating_stores)"
# the forms a kernel is tried in (tkc/runtime.py, codegen/tir.py): as emitted, then each
# `fallback_source` step at most once (plain stores, fragment registers, serial reductions)
SOURCE_FORMS = 4


def fallback_source(module: Module, source: str, exc: BaseException) -> str | None:
    """The source to compile after TileLang rejected `source` with `exc`: the fragment form for a
    barrier it could not place, the serial reductions for a reduction it found no layout for,
    the plain stores for anything else when `source` rotates staged stores (a form it could not
    lower to TMA stores); None when none applies. Each fallback keeps the ones before it."""
    buffers = STORE_BUFFERS_MARK in source
    if registers_shared_failed(source, exc):
        return emit(module, shared_registers=False, store_buffers=buffers)
    if reduce_layout_failed(source, exc):
        return emit(module, thread_reduce=False, shared_registers=False, store_buffers=buffers)
    if buffers:
        return emit(module, thread_reduce="T.reduce_" in source or SHARED_REGISTERS_MARK in source,
                    shared_registers=SHARED_REGISTERS_MARK in source, store_buffers=False)
    return None


# TileLang's messages when its layout inference or reduce lowering cannot place a `T.reduce_*`
# (tkc/runtime.py then compiles the serial form).
REDUCE_LAYOUT_FAILURES = ("no available layout found", "is_const_power_of_two_integer")


# TileLang's messages when its layout inference finds no thread layout for a register tile
LAYOUT_FAILURES = REDUCE_LAYOUT_FAILURES + ("Inconsistent layouts", "does not form a bijective transform")
# TileLang 0.1.15 vectorizes a bool tile's accesses 8 at a time and has no CUDA type for them
BOOL_VECTOR_FAILURE = "Cannot convert type boolx"


def layout_error(module: Module, exc: BaseException) -> TkError | None:
    """The located user error for TileLang's failure `exc` to lay out a register tile of
    `module` over its block's threads, or None when `exc` is no layout failure or no tile is a
    likely cause (then the failure is tkc's bug). TileLang lays out a fragment whose element
    count is a multiple or a divisor of the thread count, and many others (rmsnorm's 768-wide
    row over 1024 threads); the error names the first register tile that is neither, the one
    its layout inference can fail on."""
    if BOOL_VECTOR_FAILURE in str(exc):
        return _bool_vector_error(module, exc)
    if not any(m in str(exc) for m in LAYOUT_FAILURES):
        return None
    env = module.env
    for launch in module.func.walk():
        if launch.name != "tile.launch" or "tiles" in launch.attrs:
            continue
        try:
            threads = exprs.evaluate(exprs.parse(launch.attrs["threads"]), env)
        except exprs.ExprError:
            continue
        for a in launch.walk():
            t = a.result.type if a.name == "tile.alloc" else None
            if t is None or t.space not in ("frag", "local"):
                continue
            n = math.prod(t.concrete_shape({}))
            if n % threads and threads % n:
                first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
                return error(a.loc, f"TileLang cannot lay out register tile `{a.result}` {t} over {threads} threads",
                             f"its {n} elements are neither a multiple nor a divisor of the thread count, and "
                             f"TileLang's layout inference failed: {first[:200]}",
                             "pick tile sizes (or a problem size) whose tile has a multiple of `threads` elements, "
                             "or compile with `--target cuda`, which lays out tiles of any size")
    return None


def _bool_vector_error(module: Module, exc: BaseException) -> TkError | None:
    """The located error for TileLang 0.1.15's failure to emit vector accesses of a bool tile (its
    layout gives a thread 8 consecutive bools, a type it has no CUDA name for): at the first bool
    tile of the kernel, or None when there is none (then it is tkc's bug)."""
    for a in module.func.walk():
        if a.name == "tile.alloc" and a.result.type.dtype == "bool" and a.result.type.space != "global":
            first = str(exc).strip().splitlines()[-1]
            return error(a.loc, f"TileLang cannot emit the vector accesses of bool tile `{a.result}` {a.result.type}",
                         f"TileLang 0.1.15 failed: {first[:200]}",
                         "compile with `--target cuda`, which takes bool tiles of any layout, or keep the "
                         "condition as a float tile (`cast(c, f32)`) and compare it where it is used")
    return None


def reduce_layout_failed(source: str, exc: BaseException) -> bool:
    """Whether TileLang failed on `source` because it found no thread layout for one of its
    `T.reduce_*` (then `emit(module, thread_reduce=False)` is the form that compiles)."""
    return "T.reduce_" in source and any(m in str(exc) for m in REDUCE_LAYOUT_FAILURES)


class _Emitter:
    def __init__(self, module: Module, cpu: bool, thread_reduce: bool = True, shared_registers: bool = True,
                 store_buffers: bool = True):
        self.m, self.cpu, self.use_thread_reduce = module, cpu, thread_reduce
        self.use_shared_registers, self.use_store_buffers = shared_registers, store_buffers
        self.rotating: dict = {}  # id(shared tile) -> the pipelined loop it rotates over (rotating_stores)
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.tensors: dict[str, str] = {}  # IR name of a global tensor -> its Python name
        self.used: set[str] = set()
        self.env = module.env
        self.threads = 128
        self.registers_shared = False  # the launch's register tiles are declared shared (registers_in_shared)
        self.shared_tiles: set[int] = set()  # ids of register tiles declared shared (either rule)
        self.refs: dict[str, str] = {}  # runtime scalars read from a device tensor -> its parameter
        self.in_flight: dict[int, Value] = {}  # shared tiles a top-level T.async_copy has not been waited for
        self.remote: set[int] = set()  # shared tiles another block of the cluster reads or writes (DSMEM):
        # never copied into by T.async_copy
        self.top_ops: list[Op] = []  # the ops of the kernel body, in order
        self.top_index: dict[int, int] = {}  # id(top-level op) -> its position in top_ops
        self.last_read: dict[int, int] = {}  # id(tile) -> position of the last top-level op reading it
        self.reduce_tmp: dict[int, str] = {}  # id(tile.reduce op) -> its T.reduce_* fragment (thread_reduce)
        self.views: dict[int, Op] = {}  # id(register tile) -> the reshape its readers index through (find_views)
        self.sddmm_names: dict[str, str] = {}  # a `tiles` grid's launch data -> its Python names (tilelang_sddmm)
        self.index_rooms = index_bound_exprs(module.func)  # index tensor -> bounds its values are checked against
        self.index_fns: dict[tuple[str, str], str] = {}  # (index tensor, .tk location) -> its checking function
        self.require_fns: list[tuple[str, str, str, str]] = []  # (function, location, message, scalar)

    # ---- naming -----------------------------------------------------------------------------
    def name(self, v: Value) -> str:
        if id(v) not in self.names:
            base = v.name.replace(".", "_")
            if base[0].isdigit():
                base = "t" + base
            if keyword.iskeyword(base) or base in ("T", "tilelang"):
                base += "_"
            name, i = base, 0
            while name in self.used:
                i += 1
                name = f"{base}_{i}"
            self.used.add(name)
            self.names[id(v)] = name
        return self.names[id(v)]

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def index_expr(self, text: str, op: Op) -> str:
        """An index expression of `op` in TileLang syntax; on the GPU an element of an index
        tensor is checked on the device, as the CUDA backend's `tk_index` does."""
        return tl_expr(text, self.tensors, None if self.cpu else lambda t, load: self.checked_load(t, load, op))

    def checked_load(self, tensor: str, load: str, op: Op) -> str:
        """`load` (an element of index tensor `tensor`) through a device function of the prelude
        that checks it against [0, bound) (dsl.ops.index_bound_exprs) and reports `op`'s location."""
        where = f"{op.loc.file}:{op.loc.line}:{op.loc.col}"
        fn = self.index_fns.setdefault((tensor, where), f"tk_index_{len(self.index_fns)}")
        rooms = [tl_expr(r) for r in self.index_rooms.get(tensor, [])] or ["2147483647"]
        bound = rooms[0] if len(rooms) == 1 else f"T.min({', '.join(rooms)})"
        return f'T.call_extern("int32", "{fn}", {load}, {bound})'

    def check_prelude(self) -> str:
        """The CUDA of the device checks (codegen/cuda_prelude.py CHECK_PRELUDE): one function per
        index tensor and location `checked_load` used, one per check of a runtime scalar read from
        device memory (codegen/cuda.py device_checks)."""
        fns = "".join(f"__device__ __forceinline__ int {fn}(int v, int hi) {{ return tk_index(v, hi, "
                      f"{json.dumps(where)}, {json.dumps(tensor)}); }}\n"
                      for (tensor, where), fn in self.index_fns.items())
        fns += "".join(f"__device__ __forceinline__ int {fn}(int ok, int v) {{ return tk_require(ok != 0, "
                       f"{json.dumps(where)}, {json.dumps(what)}, {json.dumps(n)}, v); }}\n"
                       for fn, where, what, n in self.require_fns)
        return f'CHECK_PRELUDE = r"""{CHECK_PRELUDE}{fns}"""\n'

    # ---- module -----------------------------------------------------------------------------
    def run(self) -> str:
        func = self.m.func
        kname = func.attrs.get("sym_name", "kernel")
        if self.cpu:
            self.check_cpu_dtypes()
            self.check_cpu_stack()
        self.used |= {kname, *func.attrs.get("dims", {}), *func.attrs.get("consts", {}), "main", *dynamic_dims(func),
                      *(n for n, _, _ in scalars(func))}
        for op in self.m.walk():
            if op.name == "tile.launch":
                self.used |= set(op.attrs["vars"])
            if op.name == "tile.for":
                self.used.add(op.attrs["var"])
        form = "CPU (TileLang target \"c\")" if self.cpu else "GPU (TileLang target \"cuda\")"
        self.line(0, f"# Generated by tkc from {func.loc.file}: kernel `{kname}`, {form}.")
        self.line(0, "# Do not edit: regenerate with `tkc compile --target "
                  + ("tilelang-cpu" if self.cpu else "tilelang") + "`.")
        how = ('tilelang.compile(build(), target="c", compile_flags=["-O2"])' if self.cpu else
               f'tilelang.compile(build(), target="cuda", pass_configs={PASS_CONFIGS!r})')
        self.line(0, f"# Build: {how}")
        self.line(0, "import tilelang.language as T")
        self.line(0, "")
        self.prelude_at = len(self.lines)
        dims, consts = func.attrs.get("dims", {}), func.attrs.get("consts", {})
        self.line(0, "# problem dims (the kernel is specialized on them)")
        for k in sorted(dims):
            self.line(0, f"{k} = {dims[k]}")
        dynamic = sorted(dynamic_dims(func))
        if dynamic:  # read from the tensors' shapes at every call: one compile serves every value
            self.line(0, "# dynamic dims (bound from the tensors' shapes at every call)")
            self.line(0, f"{', '.join(dynamic)} = T.dynamic(\"{', '.join(dynamic)}\")")
        if consts:
            self.line(0, "# schedule constants")
            for k in sorted(consts):
                self.line(0, f"{k} = {consts[k]}")
        self.line(0, "")
        args = func.body.args
        # a bool tensor is a uint8 buffer (0 or 1): TVM's C host code takes int8_t* for bool ones;
        # tkc/runtime.py passes torch bool tensors as uint8 views
        params = ", ".join(f"{self.name(a)}: T.Tensor(({', '.join(self.dims(a))},), "
                           f"{'T.uint8' if a.type.dtype == 'bool' else TL_DTYPES[a.type.dtype]})"
                           for a in args)
        # runtime scalars come last (tkc/runtime.py passes them after the outputs)
        # (a scalar in `scalar_refs` is a one-element int32 tensor, read at the kernel's start)
        refs = scalar_refs(func)
        self.refs = {}
        for n, _, _ in scalars(func):
            if n in refs:
                ref, i = f"{n}_ref", 0
                while ref in self.used:
                    i += 1
                    ref = f"{n}_ref_{i}"
                self.used.add(ref)
                self.refs[n] = ref
        params += "".join(f", {self.refs[n]}: T.Tensor((1,), T.int32)" if n in refs else f", {n}: {TL_DTYPES[d]}"
                          for n, d, _ in scalars(func))
        self.tensors = {a.name: self.name(a) for a in args}
        launches = [op for op in func.body.ops if op.name == "tile.launch"]
        if len(launches) != 1:
            raise error(func.loc, "the TileLang backend needs exactly one `grid`")
        if "tiles" in launches[0].attrs:  # SDDMM: the pattern's launch data follows the outputs
            params += tilelang_sddmm().declare(self, launches[0])
        self.line(0, "")
        self.line(0, "@T.prim_func")
        self.line(0, f"def {kname}({params}):")
        self.launch(launches[0])
        self.line(0, "")
        self.line(0, "")
        self.line(0, "def build():")
        self.line(1, f'"""The prim_func of `{kname}`; outputs are arguments {func.attrs.get("outputs")}."""')
        self.line(1, f"return {kname}")
        return "\n".join(self.lines) + "\n"

    def dims(self, v: Value) -> list[str]:
        return [exprs.to_str(d) for d in v.type.shape]

    def launch(self, op: Op) -> None:
        if "tiles" in op.attrs:  # a grid over the tiles of a sparse pattern (SDDMM)
            tilelang_sddmm().emit_launch(self, op)
            return
        grid = ", ".join(tl_expr(g) for g in op.attrs["grid"])
        try:
            threads = self.threads = exprs.evaluate(exprs.parse(op.attrs["threads"]), self.env)
            for a in op.walk():
                if a.name == "tile.alloc":
                    a.result.type.concrete_shape({})
        except exprs.ExprError:
            raise error(op.loc, "the TileLang backend needs concrete tile shapes and a thread count",
                        "run the `tile` pass first (`tkc compile` does)") from None
        vars_ = ", ".join(op.attrs["vars"])
        extra = "" if self.cpu else f", threads={threads}"
        if "cluster" in op.attrs:
            extra += self.cluster(op)
        kernel_line = len(self.lines)
        self.line(1, f"with T.Kernel({grid}{extra}) as ({vars_},):")
        for n, ref in self.refs.items():  # a let binding: one load, replayed at new values by a CUDA graph
            self.line(2, f"{n} = {ref}[0]")
        if not self.cpu:  # its range and `requires`, checked in the kernel (no host sync)
            for n, cond, what, at in device_checks(self.m.func):
                fn = f"tk_require_{len(self.require_fns)}"
                self.require_fns.append((fn, f"{at.loc.file}:{at.loc.line}:{at.loc.col}", what, n))
                self.line(2, f'T.evaluate(T.call_extern("int32", "{fn}", T.Cast("int32", {tl_expr(cond)}), {n}))')
        if "cluster" in op.attrs and not self.cpu:
            # As in the CUDA backend (codegen/cuda.py): a cluster kernel's inputs are not
            # `__restrict__`, or nvcc loads them with ld.global.nc, which ptxas sinks below the
            # cluster barrier (seen in the SASS). `annotate_restrict_buffers` lists the
            # parameters that do NOT get `__restrict__`.
            outs = set(self.m.func.attrs.get("outputs", []))
            ins = [self.name(a) for i, a in enumerate(self.m.func.body.args) if i not in outs]
            if ins:
                self.line(2, f"T.annotate_restrict_buffers({', '.join(ins)})")
        for rank in op.attrs.get("ranks", []):
            self.line(2, f"{rank} = T.block_rank_in_cluster()")
        allocs = [o for o in op.walk() if o.name == "tile.alloc"]
        alloc_lines = {}
        # register tiles whose TileLang layout would give a thread whole rows go to shared memory
        # (passes/smem_tilelang.py `registers_in_shared`)
        self.registers_shared = (not self.cpu and self.use_shared_registers and self.use_thread_reduce
                                 and registers_in_shared(op, self.threads))
        registers = "shared" if self.registers_shared else "fragment"
        if self.registers_shared:
            self.line(2, SHARED_REGISTERS_MARK)
        # or only its row and column vectors (passes/smem_tilelang.py `vectors_in_shared`)
        vectors = (not self.cpu and self.use_shared_registers and self.use_thread_reduce and not self.registers_shared
                   and vectors_in_shared(op, self.threads))
        if vectors:
            self.line(2, SHARED_VECTORS_MARK)
        self.rotating = (rotating_stores(op) if not self.cpu and self.use_store_buffers and not self.registers_shared
                         else {})
        if self.rotating:
            self.line(2, STORE_BUFFERS_MARK)
        for a in allocs:  # TileLang declares every buffer at the top of the kernel
            alloc_lines[id(a.result)] = len(self.lines)
            t = a.result.type
            # The C target runs one thread: every tile is local. On the GPU, `frag` and `local`
            # tiles are both register tiles that TileLang lays out over the block's threads.
            kind = "local" if self.cpu else {"shared": "shared", "frag": registers, "local": registers}[t.space]
            if vectors and shared_vector(t):
                kind = "shared"
            if kind == "shared" and t.space in ("frag", "local"):
                self.shared_tiles.add(id(a.result))
            copies = [str(STORE_BUFFERS)] if id(a.result) in self.rotating else []
            self.line(2, f"{self.name(a.result)} = T.alloc_{kind}(({', '.join(copies + self.dims(a.result))},), "
                      f"{TL_DTYPES[t.dtype]})")
        for r in op.walk():
            if r.name == "tile.reduce" and (self.thread_reduce(r) or self.staged_reduce(r)):
                src, dst = r.operands
                tmp = self.reduce_tmp[id(r)] = self.indices_named(f"{self.name(dst)}_red")
                keep = [s for i, s in enumerate(self.dims(src)) if i != r.attrs["axis"]]
                self.line(2, f"{tmp} = T.alloc_fragment(({', '.join(keep)},), {TL_DTYPES[dst.type.dtype]})")
                if self.staged_reduce(r):  # the rows in shared memory, then one partial per lane
                    rows, width = self.dims(src)
                    kept = rows if r.attrs["axis"] == 1 else width
                    pitch = staged_pitch(r)  # a column sum's rows padded: its lanes read 32 banks
                    self.line(2, f"{tmp}_sh = T.alloc_shared(({rows}, {pitch}), {TL_DTYPES[src.type.dtype]})")
                    self.line(2, f"{tmp}_part = T.alloc_fragment(({kept}, {STAGED_LANES}), "
                              f"{TL_DTYPES[dst.type.dtype]})")
        self.find_views(op)
        for at in sorted((alloc_lines[v] for v in self.views), reverse=True):  # a view has no buffer
            del self.lines[at]
        self.remote = peer_tiles(op)
        self.top_ops = list(op.body.ops)
        self.top_index = {id(top): i for i, top in enumerate(self.top_ops)}
        self.last_read = {}  # one pass over the body: read_later is then O(1) (was a scan per copy)
        for i, top in enumerate(self.top_ops):
            for o in top.walk():
                for v in shared_accesses(o)[0]:
                    self.last_read[id(v)] = i
        self.region(op.body.ops, 2)
        self.wait_copies(2, "before the block exits")
        self.keep_peer_tiles(op)
        if self.index_fns or self.require_fns:  # device-side checks: their functions join the kernel's prelude
            text = self.lines[kernel_line]
            self.lines[kernel_line] = (text.replace("prelude=PEER_PRELUDE", "prelude=PEER_PRELUDE + CHECK_PRELUDE")
                                       if "prelude=" in text else text.replace(") as (", ", prelude=CHECK_PRELUDE) as (", 1))
            self.lines.insert(self.prelude_at, self.check_prelude())

    def find_views(self, launch: Op) -> None:
        """Reshapes emitted as index maps in their readers instead of loops (`views`): a reshape
        into a register tile that elementwise ops and serial reductions read (they index every
        element through `at`), later in the same region, with no op in between writing its
        source. MiSS's shard sum then reads the staged shared tile of A directly and adds its
        [BM, 1, R] sum into S as it is (passes/fold_copies.py folds the copies around them),
        where each trip went through shared memory three times."""
        readers: dict[int, list[Op]] = {}
        for o in launch.walk():
            for v in o.operands:
                readers.setdefault(id(v), []).append(o)
        for holder in launch.walk():
            for region in holder.regions:
                ops = region.ops
                at = {id(o): j for j, o in enumerate(ops)}
                for k, r in enumerate(ops):
                    if r.name != "tile.reshape" or r.operands[1].type.space == "shared":
                        continue
                    src, dst = r.operands
                    users = [o for o in readers.get(id(dst), []) if o is not r]
                    if not users or any(id(o) not in at or at[id(o)] <= k or not self.reads_by_index(o, dst)
                                        for o in users):
                        continue
                    last = max(at[id(o)] for o in users)
                    if any(self.writes(inner, src) for o in ops[k + 1:last + 1] for inner in o.walk()):
                        continue
                    self.views[id(dst)] = r

    def reads_by_index(self, op: Op, v: Value) -> bool:
        """Whether `op` reads `v` only element by element through `at` (and does not write it)."""
        if op.operands[-1] is v:
            return False
        if op.name == "tile.elementwise":
            return True
        return op.name == "tile.reduce" and id(op) not in self.reduce_tmp

    @staticmethod
    def writes(op: Op, v: Value) -> bool:
        """Whether `op` writes the block's own instance of tile `v` (every writing op writes its
        last operand; a peer store writes the peer's)."""
        return (bool(op.operands) and op.operands[-1] is v
                and op.name not in ("tile.peer_store", "tile.launch", "tile.for", "tile.alloc"))

    def view_ref(self, dst: Value, parts: list[str]) -> str:
        """The element `parts` of the view `dst` as an element of its reshape's source."""
        src = self.views[id(dst)].operands[0]
        sshape, dshape = src.type.concrete_shape({}), dst.type.concrete_shape({})
        if [n for n in sshape if n != 1] == [n for n in dshape if n != 1]:  # unit dims only
            inner = iter([p for p, n in zip(parts, dshape) if n != 1])
            idx = ["0" if n == 1 else next(inner) for n in sshape]
        else:
            idx = _unravel(parts, dshape, sshape)
        value = f"{self.name(src)}[{', '.join(idx)}]"
        return self.cast(value, src.type.dtype, dst.type.dtype)

    def staged_reduce(self, op: Op) -> bool:
        """Whether reduce `op` goes through shared memory and lanes (passes/smem_tilelang.py
        `staged_reduce`): a row too wide for one thread and not a power of two for T.reduce_*."""
        return (not self.cpu and self.use_thread_reduce and not self.thread_reduce(op)
                and staged_reduce(op, self.threads))

    def thread_reduce(self, op: Op) -> bool:
        """Whether reduce `op` becomes `T.reduce_*` (passes/smem_tilelang.py `thread_reduce`). A
        serial loop over the axis makes layout inference give every thread whole rows (rmsnorm at
        N = 4096: six float[4096] per thread, 1.1 s per call on an H100, ten minutes in nvcc)."""
        return not self.cpu and self.use_thread_reduce and thread_reduce(op, self.threads)

    def cluster(self, op: Op) -> str:
        """`T.Kernel` arguments for a thread-block cluster (TileLang 0.1.15: 1-d clusters, peer
        tiles read through a `mapa` pointer from cooperative groups' `map_shared_rank`)."""
        if self.cpu:
            raise error(op.loc, "target `tilelang-cpu` cannot express thread-block clusters",
                        "run the kernel with `--target interp` (the reference interpreter simulates the "
                        "ranks) or on a GPU with `--target tilelang`")
        if len(op.attrs["cluster"]) != 1:
            raise error(op.loc, "the TileLang backend expresses 1-d clusters only",
                        "use a 1-d grid and cluster, e.g. `grid (B) as (b) cluster (2) as (r)`")
        dims = f", cluster_dims={tl_expr(op.attrs['cluster'][0])}"
        if not any(o.name in ("tile.peer_copy", "tile.peer_store") for o in op.walk()):
            return dims
        self.lines.insert(self.prelude_at, PEER_PRELUDE)
        return dims + ", prelude=PEER_PRELUDE"

    def keep_peer_tiles(self, launch: Op) -> None:
        """Mention every shared tile the cluster's peers read or write once more, after the
        kernel's last cluster barrier. TileLang merges shared buffers by liveness, and a tile's
        life ends at the block's own last use of it: without this, a later buffer (the f16 copy
        of a pulled sum, a pipelined load) took the bytes the peers were still reading
        (benchmarks/probes/miss_cluster on an H100: wrong results at CS = 4). The cuda backend
        keeps them the same way (passes/cuda_placement.py `_lifetimes`); passes/smem_tilelang.py
        plans them to the end of the kernel."""
        allocs = [a for a in launch.walk() if a.name == "tile.alloc" and id(a.result) in self.remote]
        for a in allocs:
            zero = ", ".join("0" for _ in a.result.type.shape)
            self.line(2, f"T.evaluate(T.call_extern(\"int32\", \"tkc_peer_live\", "
                      f"T.access_ptr({self.name(a.result)}[{zero}], \"r\")))")

    def op_grid_barrier(self, op: Op, depth: int) -> None:
        target = "tilelang-cpu" if self.cpu else "tilelang"
        raise error(op.loc, f"target `{target}` cannot express `sync grid` (a barrier of every block of the grid)",
                    "compile with `--target cuda` (a cooperative launch), or run on the CPU with `--target interp`")

    def op_cluster_barrier(self, op: Op, depth: int) -> None:
        if op.attrs.get("relaxed"):  # every block has started; orders no memory
            self.line(depth, "T.cluster_arrive_relaxed()")
            self.line(depth, "T.cluster_wait()")
            return
        self.line(depth, "T.cluster_sync()")

    def peer_view(self, op: Op, tile: Value, mode: str, depth: int) -> str:
        """Bind a tensor over the peer block's instance of shared `tile` (a `mapa` pointer from
        the prelude's `tkc_peer_ptr`); returns its name."""
        peer = self.indices_named(f"{self.name(tile)}_peer")
        zero = ", ".join("0" for _ in tile.type.shape)
        self.line(depth, f"{peer} = T.make_tensor_from_addr(T.call_extern(\"handle\", \"tkc_peer_ptr\", "
                  f"T.access_ptr({self.name(tile)}[{zero}], \"{mode}\"), {tl_expr(op.attrs['rank'][0])}), "
                  f"({', '.join(self.dims(tile))},), {TL_DTYPES[tile.type.dtype]})")
        return peer

    def op_peer_copy(self, op: Op, depth: int) -> None:
        src, dst = op.operands
        peer = self.peer_view(op, src, "r", depth)
        idx, d = self.loop_nest(self.dims(dst), depth)
        value = self.cast(f"{peer}[{', '.join(idx)}]", src.type.dtype, dst.type.dtype)
        self.line(d, f"{self.at(dst, idx)} = {value}")

    def op_peer_store(self, op: Op, depth: int) -> None:
        src, dst = op.operands
        peer = self.peer_view(op, dst, "w", depth)
        idx, d = self.loop_nest(self.dims(src), depth)
        value = self.cast(self.at(src, idx), src.type.dtype, dst.type.dtype)
        self.line(d, f"{peer}[{', '.join(idx)}] = {value}")

    def indices_named(self, base: str) -> str:
        name, i = base, 0
        while name in self.used:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name

    def check_cpu_stack(self) -> None:
        """TileLang's C target declares a kernel's tiles as arrays on the C stack, where a large one
        crashes the process (a 16 MiB tile segfaulted): a launch whose tiles need more than
        CPU_STACK_BYTES is an error at its largest tile."""
        env = self.env
        for launch in (op for op in self.m.func.walk() if op.name == "tile.launch"):
            tiles = []
            for op in launch.walk():
                if op.name != "tile.alloc":
                    continue
                try:
                    tiles.append((op.result.type.nbytes(env) * op.attrs.get("stages", 1), op))
                except exprs.ExprError:  # a dynamic extent: known at the call only
                    continue
            total = sum(n for n, _ in tiles)
            if total > CPU_STACK_BYTES:
                n, op = max(tiles, key=lambda t: t[0])
                raise error(op.loc, f"target `tilelang-cpu` keeps a launch's tiles on the C stack: these need "
                            f"{total:,} bytes, over the {CPU_STACK_BYTES:,} it allows (the largest, "
                            f"`{op.result}` {op.result.type}, {n:,} bytes)",
                            "use smaller tile extents (the schedule constants that set them), or `--target interp` "
                            "for the reference interpreter")

    def check_cpu_dtypes(self) -> None:
        """TileLang's C target has no bf16 arithmetic: reject it at the first tile that uses it."""
        func = self.m.func
        for v, loc in [(a, func.loc) for a in func.body.args] + [(op.result, op.loc) for op in self.m.walk()
                                                                 if op.name == "tile.alloc"]:
            if v.type.dtype == "bf16":
                raise error(loc, f"target `tilelang-cpu` cannot express bf16 tile `{v}` {v.type}",
                            "use f16 or f32 on the CPU target, or compile with `--target tilelang` for the GPU")

    def region(self, ops: list[Op], depth: int) -> None:
        for op in ops:
            if op.name == "tile.alloc":
                continue
            if self.in_flight:
                reads, write = shared_accesses(op)
                if op.name == "tile.for":
                    self.wait_copies(depth, "before the loop")
                elif any(id(v) in self.in_flight for v in [*reads, write]):
                    self.wait_copies(depth, "the copy must have landed before the tile is touched")
            getattr(self, "op_" + op.name.split(".")[1])(op, depth)

    def wait_copies(self, depth: int, why: str) -> None:
        """Wait for this thread's top-level cp.async copies (T.async_copy issues no wait)."""
        if self.in_flight:
            names = ", ".join(self.name(v) for v in self.in_flight.values())
            self.line(depth, f"T.ptx_wait_group(0)  # cp.async into {names}: {why}")
            self.in_flight.clear()

    # ---- ops --------------------------------------------------------------------------------
    def op_for(self, op: Op, depth: int) -> None:
        if op.attrs["kind"] == "pipelined" and not self.cpu:
            for inner in op.walk():
                if inner.name in ("tile.peer_copy", "tile.peer_store"):
                    raise error(inner.loc, "the TileLang backend cannot access a peer tile inside a pipelined loop",
                                "use `range(...)` for this loop, or `--target cuda`")
        lo, hi, var = self.index_expr(op.attrs["lo"], op), self.index_expr(op.attrs["hi"], op), op.attrs["var"]
        rng = hi if lo == "0" else f"{lo}, {hi}"
        kind = op.attrs["kind"]
        if kind == "pipelined" and not self.cpu:
            stages = op.attrs["stages"]
            if stages and not async_copy_ok(op):
                self.line(depth, "# num_stages=0: a global row here is not 4-byte aligned, and TileLang "
                          "0.1.15 would emit a 2-byte cp.async (no such PTX) for a pipelined copy")
                stages = 0
            self.line(depth, f"for {var} in T.Pipelined({rng}, num_stages={stages}):")
        elif kind == "unroll" and not self.cpu:
            self.line(depth, f"for {var} in T.unroll({rng}):")
        else:
            self.line(depth, f"for {var} in T.serial({rng}):")
        before = len(self.lines)
        self.region(op.body.ops if kind == "pipelined" else self.hoist_loads(op.body.ops), depth + 1)
        if len(self.lines) == before:
            self.line(depth + 1, "T.evaluate(0)")
        if any(loop is op for loop in self.rotating.values()):
            # the last trips' stores must have read their copies before the bytes are reused or the block exits
            self.line(depth, "T.tma_store_wait(0)")
            self.line(depth, "T.sync_threads()")

    def hoist_loads(self, ops: list[Op]) -> list[Op]:
        """`ops` (the body of a serial or unrolled loop) with its input loads into fragments moved
        up (dsl/ops.py `hoist_input_loads`): TileLang issues a fragment's T.copy where it stands,
        and the barriers of the reductions in between keep nvcc from moving it (decode attention:
        the V rows then load with the K rows). A fragment's elements are its own threads', so no
        barrier is needed; pipelined loops keep their order, which T.Pipelined's stages follow."""
        return hoist_input_loads(self.m.func, ops, lambda tile: tile.type.space in ("frag", "local")
                                 and id(tile) not in self.shared_tiles and not self.registers_shared)

    def op_fill(self, op: Op, depth: int) -> None:
        v = op.operands[0]
        value = op.attrs["value"]
        dtype = "T.uint8" if v.type.dtype == "bool" else TL_DTYPES[v.type.dtype]
        if "axis" in op.attrs:  # iota: each element's index along the axis (+ `index`)
            idx, d = self.loop_nest(self.dims(v), depth)
            pos = idx[op.attrs["axis"]]
            if "index" in op.attrs:
                pos = f"{pos} + ({self.index_expr(op.attrs['index'], op)})"
            self.line(d, f"{self.at(v, idx)} = T.Cast({dtype}, {pos})")
            return
        if "index" in op.attrs:  # a runtime integer (scalar, grid or loop index) as a number
            self.line(depth, f"T.fill({self.name(v)}, T.Cast({dtype}, {self.index_expr(op.attrs['index'], op)}))")
            return
        if value == 0.0:
            self.line(depth, f"T.clear({self.name(v)})")
        else:
            self.line(depth, f"T.fill({self.name(v)}, {value!r})")

    def loop_nest(self, shape: list[str], depth: int) -> tuple[list[str], int]:
        """Open a parallel (GPU) or serial (CPU) loop nest over `shape`; returns (indices, depth)."""
        idx = self.indices(len(shape))
        if self.cpu:
            self.line(depth, f"for {', '.join(idx)} in T.grid({', '.join(shape)}):")
        else:
            self.line(depth, f"for {', '.join(idx)} in T.Parallel({', '.join(shape)}):")
        return idx, depth + 1

    def indices(self, n: int) -> list[str]:
        """`n` loop index names that no tensor, tile, grid or loop variable uses."""
        pool = list(_IDX) + [f"i{k}" for k in range(8)] + [f"ii{k}" for k in range(64)]
        return [x for x in pool if x not in self.used][:n]

    def at(self, v: Value, idx: list[str], broadcast: bool = False) -> str:
        """`v[idx]`; with `broadcast`, dims of size 1 are indexed by 0."""
        shape = v.type.concrete_shape({})
        if broadcast:  # numpy broadcasting: a lower-rank tile is indexed by the trailing indices
            idx = idx[len(idx) - len(shape):]
        parts = ["0" if broadcast and n == 1 else i for i, n in zip(idx, shape)]
        if id(v) in self.views:
            return self.view_ref(v, parts)
        return f"{self.name(v)}[{', '.join(parts)}]"

    def cast(self, text: str, src: str, dst: str) -> str:
        """`text` of dtype `src` converted to `dst`; floats to integers saturate like the
        interpreter and the CUDA backend (a plain cast of 300.0 to int8 wraps in C)."""
        if src == dst:
            return text
        if dst in ("i8", "i32") and src in ("f16", "bf16", "f32", "f64"):
            wide = "T.float64" if src == "f64" else "T.float32"
            lo, hi = (-128.0, 127.0) if dst == "i8" else (-2147483648.0, 2147483520.0 if src != "f64" else 2147483647.0)
            x = text if src in ("f32", "f64") else f"T.Cast(T.float32, {text})"
            return f"T.Cast({TL_DTYPES[dst]}, T.max(T.min({x}, {wide}({hi})), {wide}({lo})))"
        return f"T.Cast({TL_DTYPES[dst]}, {text})"

    def read_later(self, copy: Op, tile: Value) -> bool:
        """Whether an op after the top-level `copy` reads `tile` (in the block's own instance)."""
        return self.last_read.get(id(tile), -1) > self.top_index[id(copy)]

    def async_ok(self, op: Op) -> bool:
        """Whether the global -> shared copy `op` can be one T.async_copy: same dtype, no edge
        checks, 16-byte words (the tensor's row, the tile's row and the column offset all
        multiples of 16 bytes), and whole words for every thread. TileLang 0.1.15 fails to
        compile a T.async_copy it cannot vectorize to at least 4 bytes per thread ("no eligible
        global->shared store was rewritten": miss_mtile.tk at N=16, R=16 with 256 threads)."""
        src, dst = op.operands
        if src.type.dtype != dst.type.dtype or dst.type.space != "shared" or any(op.attrs.get("checked", [True])):
            return False
        size = DTYPES[src.type.dtype][0]
        rows = [(row_extent(v) or 1) * size for v in (src, dst) if v.type.rank]
        col = known_multiple(exprs.parse(op.attrs["src_offsets"][-1])) * size if op.attrs["src_offsets"] else 0
        nbytes = size
        for n in dst.type.concrete_shape({}):
            nbytes *= n
        return all(r % 16 == 0 for r in rows) and col % 16 == 0 and nbytes % (16 * self.threads) == 0

    def op_copy(self, op: Op, depth: int) -> None:
        src, dst = op.operands
        if src.type.space == "global" or dst.type.space == "global":
            return self.global_copy(op, depth)
        if src.type.dtype == dst.type.dtype or (not self.cpu and not _saturates(src, dst)):
            if id(dst) in self.rotating:  # this trip's copy; the store that last read it has read it
                self.line(depth, f"T.tma_store_wait({STORE_BUFFERS - 1})")
                self.line(depth, "T.sync_threads()")
            self.line(depth, f"T.copy({self.name(src)}, {self.copy_ref(dst)})")
            return
        idx, d = self.loop_nest(self.dims(dst), depth)
        self.line(d, f"{self.at(dst, idx)} = {self.cast(self.at(src, idx), src.type.dtype, dst.type.dtype)}")

    def copy_ref(self, tile: Value) -> str:
        """The tile as a copy's operand: the current trip's copy of a rotating store tile."""
        if id(tile) not in self.rotating:
            return self.name(tile)
        var = self.rotating[id(tile)].attrs["var"]
        return f"{self.name(tile)}[{var} % {STORE_BUFFERS}, {', '.join(':' for _ in self.dims(tile))}]"

    def global_copy(self, op: Op, depth: int) -> None:
        src, dst = op.operands
        load = src.type.space == "global"
        tensor, tile = (src, dst) if load else (dst, src)
        offsets = [self.index_expr(o, op) for o in op.attrs["src_offsets" if load else "dst_offsets"]]
        checked = op.attrs.get("checked", [True] * tensor.type.rank)
        steps = op.attrs.get("src_steps" if load else "dst_steps") or [1] * tensor.type.rank
        # A strided access, or one at an offset read from an index tensor, is an element loop
        # (T.copy takes dense regions at offsets it can analyze).
        # So is a float -> int conversion: T.copy's C cast wraps where tkc saturates (`cast`).
        elementwise = (any(st != 1 for st in steps) or _saturates(src, dst)
                       or any(has_load(o) for o in op.attrs["src_offsets" if load else "dst_offsets"])
                       # a register tile declared shared (registers_in_shared) at a tensor's edge:
                       # TileLang 0.1.15 moves a shared tile's rows with one bulk (TMA) copy that
                       # does not stop at the edge (rmsnorm's last block of 2 rows at B = 3)
                       or (id(tile) in self.shared_tiles and any(checked)))
        if not self.cpu and not elementwise:
            # On the GPU, T.copy converts dtypes and guards accesses past the tensor's edge.
            if not load and id(tile) in self.rotating:  # a TMA store the trip does not wait for
                box = ", ".join(f"{o} : {o} + {n}" if o == "0" or o.isidentifier() else f"{o} : ({o}) + {n}"
                                for o, n in zip(offsets, self.dims(tile)))
                store = f"T.tma_copy({self.copy_ref(tile)}, {self.name(tensor)}[{box}]"
                streaming = streaming_store(tensor, self.env)
                if streaming:  # the lines cannot all stay in L2 for the next kernel (streaming_store)
                    self.line(depth, f"# tkc: {self.name(tensor)} is stored L2 evict-first from {STREAM_BYTES >> 20} MiB on"
                                     " (streaming_store)")
                evict_first, plain = store + ', eviction_policy="evict_first")', store + ")"
                if isinstance(streaming, bool):
                    self.line(depth, evict_first if streaming else plain)
                else:  # the dynamic dims decide at run time
                    dims, at_least = streaming
                    size = " * ".join([f'T.Cast("int64", {dims[0]})'] + [f"({d})" for d in dims[1:]])
                    self.line(depth, f"if {size} >= {at_least}:")
                    self.line(depth + 1, evict_first)
                    self.line(depth, "else:")
                    self.line(depth + 1, plain)
                return
            region = f"{self.name(tensor)}[{', '.join(offsets)}]"
            args = (region, self.name(tile)) if load else (self.name(tile), region)
            if (load and depth == 2 and id(tile) not in self.remote and self.read_later(op, tile)
                    and self.async_ok(op)):  # depth 2: not in a loop
                # cp.async + commit, no wait: the thread goes on; `region` waits before the first
                # op that touches the tile (TileLang only makes T.copy async in pipelined loops).
                # Not for tiles peers access (see codegen/cuda_access.py, op_copy), nor for a tile
                # nothing reads afterwards: TileLang may give its bytes to another buffer right
                # after its last use, while the cp.async would still be landing there.
                self.line(depth, f"T.async_copy({args[0]}, {args[1]})")
                self.in_flight[id(tile)] = tile
                return
            self.line(depth, f"T.copy({args[0]}, {args[1]})")
            return
        idx, d = self.loop_nest(self.dims(tile), depth)
        gidx = [(i if st == 1 else f"{i} * {st}") if o == "0" else (f"{o} + {i}" if st == 1 else f"{o} + {i} * {st}")
                for o, i, st in zip(offsets, idx, steps)]
        conds = [f"{g} < {exprs.to_str(n)}" for g, n, c in zip(gidx, tensor.type.shape, checked) if c]
        gref = f"{self.name(tensor)}[{', '.join(gidx)}]"
        tref = self.at(tile, idx)
        if load:
            value = self.cast(f"({gref} != T.uint8(0))" if tensor.type.dtype == "bool" else gref,
                              tensor.type.dtype, tile.type.dtype)
            if conds:
                zero = f"T.Cast({TL_DTYPES[tile.type.dtype]}, 0)"
                value = f"T.if_then_else({' and '.join(conds)}, {value}, {zero})"
            self.line(d, f"{tref} = {value}")
            return
        value = self.cast(tref, tile.type.dtype, tensor.type.dtype)
        if tensor.type.dtype == "bool":
            value = f"T.Cast(T.uint8, {value})"
        if conds:
            self.line(d, f"if {' and '.join(conds)}:")
            d += 1
        self.line(d, f"{gref} = {value}")

    def op_reshape(self, op: Op, depth: int) -> None:
        """dst[idx] = src[unravel(ravel(idx))]: src is shared, so any thread may read any element (or a
        register tile when the reshape only inserts or removes dims of size 1: each element stays
        where it is)."""
        src, dst = op.operands
        if id(dst) in self.views:  # its readers index `src` (find_views)
            return
        sshape, dshape = src.type.concrete_shape({}), dst.type.concrete_shape({})
        idx, d = self.loop_nest(self.dims(dst), depth)
        value = self.cast(f"{self.name(src)}[{', '.join(_unravel(idx, dshape, sshape))}]", src.type.dtype, dst.type.dtype)
        self.line(d, f"{self.at(dst, idx)} = {value}")

    def op_elementwise(self, op: Op, depth: int) -> None:
        out, ins = op.operands[-1], op.operands[:-1]
        # Mixed dtypes and transcendental functions compute in f32 (f64 for f64), like the
        # interpreter; a single add/sub/mul/div in f16 rounds the same either way.
        # Comparisons compute in their inputs' f32 (f64); `where` selects in the output dtype.
        fn = op.attrs["fn"]
        wide = any(v.type.dtype != out.type.dtype for v in ins) or fn in _TRANSCENDENTAL
        compute = ("f64" if out.type.dtype == "f64" else "f32") if wide else out.type.dtype
        if fn in COMPARE:
            compute = compare_dtype(ins)
        elif fn == "where":
            compute = out.type.dtype
        idx, d = self.loop_nest(self.dims(out), depth)
        args = [self.cast(self.at(v, idx, broadcast=True), v.type.dtype, "bool" if fn == "where" and k == 0 else compute)
                for k, v in enumerate(ins)]
        if "scalar" in op.attrs:
            args.append(f"{TL_DTYPES[compute]}({op.attrs['scalar']!r})")
        text = _apply(fn, args, TL_DTYPES[compute])
        self.line(d, f"{self.at(out, idx)} = {self.cast(text, 'bool' if fn in COMPARE else compute, out.type.dtype)}")

    def op_reduce(self, op: Op, depth: int) -> None:
        src, dst = op.operands
        axis, fn = op.attrs["axis"], op.attrs["fn"]
        if id(op) in self.reduce_tmp:
            # TileLang's reduce into a fragment without the axis (its lowering takes no keepdim
            # shape), then copied into the tile (added to it for `accumulate`).
            tmp = self.reduce_tmp[id(op)]
            if self.staged_reduce(op):  # lane l of row (column) i combines its elements l, l + 32, ...
                rows, width = self.dims(src)
                kept, length = (rows, width) if axis == 1 else (width, rows)
                i, lane, j = self.indices(3)
                init = {"sum": f"T.Cast({TL_DTYPES[dst.type.dtype]}, 0)", "max": "-T.infinity({})",
                        "min": "T.infinity({})"}[fn].format(TL_DTYPES[dst.type.dtype])
                along = f"{lane} + {j} * {STAGED_LANES}"
                at = f"{tmp}_sh[{i}, {along}]" if axis == 1 else f"{tmp}_sh[{along}, {i}]"
                elem = self.cast(at, src.type.dtype, dst.type.dtype)
                part = f"{tmp}_part[{i}, {lane}]"
                combine = {"sum": f"{part} + {elem}", "max": f"T.max({part}, {elem})",
                           "min": f"T.min({part}, {elem})"}[fn]
                padded = staged_pitch(op) != int(width)
                self.line(depth, f"T.copy({self.name(src)}, {tmp}_sh" + (f"[0:{rows}, 0:{width}])" if padded else ")"))
                self.line(depth, f"for {i}, {lane} in T.Parallel({kept}, {STAGED_LANES}):")
                self.line(depth + 1, f"{part} = {init}")
                self.line(depth + 1, f"for {j} in T.serial({-(-int(length) // STAGED_LANES)}):")
                self.line(depth + 2, f"if {along} < {length}:")
                self.line(depth + 3, f"{part} = {combine}")
                self.line(depth, f"T.reduce_{fn}({tmp}_part, {tmp}, dim=1)")
            else:
                self.line(depth, f"T.reduce_{fn}({self.name(src)}, {tmp}, dim={axis})")
            keep = [s for i, s in enumerate(self.dims(dst)) if i != axis]
            idx, d = self.loop_nest(keep, depth)
            full = list(idx)
            full.insert(axis, "0")
            target = f"{self.name(dst)}[{', '.join(full)}]"
            value = f"{tmp}[{', '.join(idx)}]"
            self.line(d, f"{target} = {target} + {value}" if op.attrs.get("accumulate") else f"{target} = {value}")
            return
        shape = self.dims(dst)
        keep = [s for i, s in enumerate(shape) if i != axis]
        idx, d = self.loop_nest(keep or ["1"], depth)
        if not keep:
            idx = []
        full = list(idx)
        full.insert(axis, "0")
        target = f"{self.name(dst)}[{', '.join(full)}]"
        red = self.indices(len(idx) + 1)[-1] if keep else self.indices(1)[0]
        src_idx = list(idx)
        src_idx.insert(axis, red)
        elem = self.cast(self.at(src, src_idx), src.type.dtype, dst.type.dtype)
        if not op.attrs.get("accumulate"):  # accumulate (sum only, ReduceOp.verify) adds onto dst as it is
            init = {"sum": "0", "max": "-T.infinity({})", "min": "T.infinity({})"}[fn].format(TL_DTYPES[dst.type.dtype])
            self.line(d, f"{target} = {init if fn != 'sum' else f'T.Cast({TL_DTYPES[dst.type.dtype]}, 0)'}")
        self.line(d, f"for {red} in T.serial({exprs.to_str(src.type.shape[axis])}):")
        combine = {"sum": f"{target} + {elem}", "max": f"T.max({target}, {elem})", "min": f"T.min({target}, {elem})"}[fn]
        self.line(d + 1, f"{target} = {combine}")

    def op_gemm(self, op: Op, depth: int) -> None:
        a, b, acc = op.operands
        m, k = a.type.concrete_shape({})
        n = b.type.concrete_shape({})[1]
        if self.cpu or gemm_instruction(op, self.threads) != "simt":  # passes/smem_tilelang.py
            self.line(depth, f"T.gemm({self.name(a)}, {self.name(b)}, {self.name(acc)})")
            return
        # Too small or odd for tensor cores (e.g. one row per block, seed 000 variant 1): SIMT.
        i, j, kk = self.indices(3)
        self.line(depth, f"for {i}, {j} in T.Parallel({m}, {n}):")
        self.line(depth + 1, f"for {kk} in T.serial({k}):")
        prod = (f"{self.cast(f'{self.name(a)}[{i}, {kk}]', a.type.dtype, acc.type.dtype)} * "
                f"{self.cast(f'{self.name(b)}[{kk}, {j}]', b.type.dtype, acc.type.dtype)}")
        self.line(depth + 2, f"{self.name(acc)}[{i}, {j}] = {self.name(acc)}[{i}, {j}] + {prod}")


def _unravel(idx: list[str], dshape: list[int], sshape: list[int]) -> list[str]:
    """The index into a tile of shape `sshape` of element `idx` of its reshape to `dshape`
    (row-major: the linear position of `idx` in `dshape`, unravelled over `sshape`)."""
    flat, stride = [], 1
    for k in range(len(dshape) - 1, -1, -1):
        flat.append(idx[k] if stride == 1 else f"{idx[k]} * {stride}")
        stride *= dshape[k]
    lin = " + ".join(reversed(flat))
    parts, stride = [], 1
    for k in range(len(sshape) - 1, -1, -1):
        term = f"({lin})" if stride == 1 else f"({lin}) // {stride}"
        parts.append(f"{term} % {sshape[k]}" if k else term)
        stride *= sshape[k]
    return list(reversed(parts))


def _apply(fn: str, args: list[str], dtype: str) -> str:
    """TileLang expression of elementwise `fn` on argument expressions of TileLang dtype `dtype`."""
    x = args[0]
    binary = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    if fn in binary:
        return f"{x} {binary[fn]} {args[1]}"
    if fn in ("rsub", "rdiv"):  # the scalar on the left
        return f"{args[1]} {binary[fn[1:]]} {x}"
    if fn in COMPARE:
        if x == args[1] and "float" in dtype:
            # TVM's simplifier folds `x != x` to False and `x == x`, `x <= x` to True, which a
            # NaN contradicts: say what IEEE says (x < x and x > x are False either way)
            return {"ne": f"T.isnan({x})", "eq": f"not T.isnan({x})", "le": f"not T.isnan({x})",
                    "ge": f"not T.isnan({x})"}.get(fn, "False")
        return f"{x} {COMPARE[fn]} {args[1]}"
    if fn == "where":
        return f"T.if_then_else({x}, {args[1]}, {args[2]})"
    if fn in ("max", "min", "pow"):
        return f"T.{fn}({x}, {args[1]})"
    if fn == "sigmoid":
        return f"{dtype}(1) / ({dtype}(1) + T.exp(-{x}))"
    if fn == "neg":
        return f"-{x}"
    if fn == "abs":  # TileLang's C target has no fabs lowering
        return f"T.max({x}, -{x})"
    if fn == "relu":
        return f"T.max({x}, {dtype}(0))"
    if fn == "silu":
        return f"{x} / ({dtype}(1) + T.exp(-{x}))"
    return f"T.{fn}({x})"  # exp exp2 log sin cos tanh sqrt rsqrt

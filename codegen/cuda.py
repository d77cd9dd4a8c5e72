"""CUDA C++ backend: final tile IR -> one readable, self-contained CUDA translation unit.

The generated file holds one `extern "C" __global__` kernel named after the tkc kernel, for
`nvcc -arch=sm_90a` (it uses sm_80 features: cp.async, ldmatrix, mma.sync with f16/bf16). Its header comment
gives the source file, the launch shape (grid, block, cluster, dynamic shared memory bytes) and a
`tkc-launch:` JSON line that tkc/cuda_runtime.py reads; the problem dims and schedule constants
are `constexpr int`s; the kernel body has one statement or loop nest per tile op, each under a
comment with the op and its source location.

How tiles map to the machine (details in codegen/cuda_plan.py, cuda_access.py, cuda_gemm.py):
shared tiles and register tiles that ops share across threads live in dynamic shared memory
(laid out here, offsets in the header); other register tiles are spread over the threads in
chunks of consecutive elements; gemm accumulators are mma.sync fragments when the gemm runs on
tensor cores; shared buffers with disjoint lifetimes share bytes. `__syncthreads()` goes exactly where a shared tile written by some threads is
next touched by others. Pipelined loops issue their global -> shared loads `stages - 1`
iterations ahead through cp.async into `stages` copies of each staging tile.

Unsupported constructs raise a located TkError. Input: IR after the default pipeline
(`tile,defer-reduce,fold-copies{backend=cuda},software-pipeline,map-dsmem,...`).
"""

from __future__ import annotations

import functools
import json
import math
import re

from dsl import exprs
from dsl.diagnostics import TkError, error
from dsl.ir import Module, Op, Value, format_attr_dict
from dsl.ops import (COMPARE, compare_dtype, device_checks, dynamic_dims, has_grid_barrier, index_bound_exprs, peer_tiles,
                     scalar_ranges, scalar_refs, scalars)
from passes.cuda_placement import merge_lanes, shuffle_width, smem_diagnostic
from passes.fold_copies import squeezed
from passes.targets import SMEM_LIMITS
from codegen.cuda_access import AccessMixin, Chunk
from codegen.cuda_gemm import GemmMixin
from codegen.cuda_loops import LoopMixin
from codegen.cuda_signal import Signal, plan_signal
from codegen.cuda_plan import (Access, OTHER, SyncState, chunk_map, make_plan, numel, times_text,
                               shape_of)
from codegen.cuda_prelude import C_TYPES, CLUSTER_PRELUDE, CHECK_PRELUDE, GRID_PRELUDE, PRELUDE, SIGNAL_PRELUDE, SIZES, apply, combine, compute_dtype, convert, identity, literal

ARCH = "sm_90a"
SMEM_LIMIT = SMEM_LIMITS["sm_90"]
MAX_GRID = (2**31 - 1, 65535, 65535)
DYNAMIC_MAX = 2**31 - 1  # a dynamic dim's largest value (int kernel arguments); index ranges assume it
# Streaming multiprocessors of the GPUs tkc targets (H100 SXM, H200: 132) and the most threads per
# SM whose blocks get a register hint (min_blocks_hint): 512, so the cap it sets is >= 128 registers.
SM_COUNT = 132
HINT_THREADS_PER_SM = 512
PDL_ARG = "tk_pdl"  # the kernel's last argument: launched programmatically (codegen/cuda_prelude.py tk_pdl_enter)

# Names the generated code uses itself; kernel names that collide get a trailing underscore.
RESERVED = set("""
alignas alignof asm auto bool break case catch char class const constexpr continue default delete do double
else enum explicit extern false float for friend goto if inline int long namespace new noexcept nullptr operator
private protected public register return short signed sizeof static struct switch template this throw true try
typedef typename union unsigned using virtual void volatile while half nvcuda wmma min max threadIdx blockIdx
blockDim gridDim warpSize int8_t int32_t int64_t uint4 uint2 INFINITY std
tid warp lane grp tig it ch e row col r0 r1 r2 r3 r4 r5 kk fi fj fa fb cf gv ov sv in0 in1 sum av bv ok
stage smem THREADS wm wn part red oi o_base sh main cg peer pv
wtr wtc ltr ltc rm rn wi wj ti tj tk_pdl
""".split())


def c_expr(e: exprs.Expr, name, parent: int = 0, right: bool = False, load=None) -> str:
    """An IR index expression in C (`name` maps identifiers, `load(tensor, [C indices])` reads
    an index tensor's element); `/` stays C division, which is floor division on the
    non-negative values tile indices take."""
    if isinstance(e, exprs.Num):
        return str(e.value) if e.value >= 0 else f"({e.value})"
    if isinstance(e, exprs.Sym):
        return name(e.name)
    if isinstance(e, exprs.Load):
        if load is None:
            raise ValueError(f"no index tensor reads here: `{exprs.to_str(e)}`")
        return load(e.tensor, [c_expr(a, name, load=load) for a in e.args])
    if isinstance(e, exprs.Call):
        a, b = (c_expr(x, name, load=load) for x in e.args)
        if e.fn == "cdiv":
            return f"(({a}) + ({b}) - 1) / ({b})"
        return f"{e.fn}({a}, {b})"
    prec = exprs.PREC[e.op]
    text = f"{c_expr(e.a, name, prec, load=load)} {e.op} {c_expr(e.b, name, prec, True, load=load)}"
    return f"({text})" if prec < parent or (prec == parent and (right or prec == 1)) else text


def emit(module: Module) -> str:
    """CUDA C++ source of `module` (final IR); raises TkError for what the backend cannot express."""
    from codegen import cuda_sddmm

    if cuda_sddmm.sampled_launch(module) is not None:  # a sampled gemm (SDDMM): its own kernel form
        return cuda_sddmm.emit(module)
    return _Emitter(module).run()


def launch_config(source: str) -> dict:
    """The launch shape recorded in generated source: kernel, grid, block, cluster, smem_bytes."""
    for line in source.splitlines():
        if line.startswith("// tkc-launch: "):
            return json.loads(line[len("// tkc-launch: "):])
    raise ValueError("no `tkc-launch:` line in the CUDA source")


SCRATCH = -1  # the buffer id of the register reductions' shared scratch in barrier tracking


def min_blocks_hint(grid: list, threads: int) -> int | None:
    """The minimum-blocks-per-SM argument of `__launch_bounds__` for a static grid of `grid` blocks
    of `threads` threads that fits on the GPU at once: ceil(blocks / SM_COUNT), when that is one
    block or that many blocks take at most HINT_THREADS_PER_SM threads (a cap of at least 128
    registers); else None (larger or dynamic grids keep ptxas's own choice). Without it ptxas caps
    the registers for an occupancy that such a grid never uses, and to stay under the cap it issues
    a thread's global loads a few at a time, each group waiting for the one before (matmul.tk at 768 x 2048, BK = 2048: 40 registers and about
    eight load round trips in series; with the hint 158 registers and all 32 loads issued first;
    docs/PERFORMANCE.md "Eighteenth pass")."""
    if not all(isinstance(n, int) for n in grid):
        return None
    per_sm = -(-math.prod(grid) // SM_COUNT)
    return per_sm if per_sm == 1 or per_sm * threads <= HINT_THREADS_PER_SM else None


def _loc(op: Op) -> str:
    return f"{op.loc.file}:{op.loc.line}:{op.loc.col}"


class _Emitter(AccessMixin, GemmMixin, LoopMixin):
    def __init__(self, module: Module):
        self.m = module
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.cnames: dict[str, str] = {}
        self.used: set[str] = set(RESERVED)
        self.ranges: dict[str, tuple[int, int]] = {}
        self.slot: dict[int, str] = {}  # id(staged shared tile) -> C expression of the current stage
        self.staged: set[int] = set()  # staged tiles of the pipelined loops being emitted
        self.hoisted: dict[int, str] = {}  # id(mma tile.gemm) -> array of its A fragments loaded before a loop
        self.min_blocks: int | None = None  # __launch_bounds__'s blocks per SM (min_blocks_hint)
        self.override: dict[str, str] = {}  # index names -> C expressions (prefetch iterations)
        self.opnames: dict[int, tuple[str, ...]] = {}
        self.index_bounds = index_bound_exprs(module.func)  # index tensor -> bounds its values are checked against
        self.cur_op: Op | None = None  # the op being emitted (the location an index check reports)
        self.threads = 128
        self.store_group: dict[int, tuple] = {}  # id(copy) -> (its store group by phase, the member that stores it)
        self.in_flight: dict[int, Value] = {}  # shared tiles a top-level cp.async copy has not been waited for
        self.signal: Signal | None = None  # pushed stores signalled through an mbarrier (cuda_signal.py)
        self.recv = ""  # with a signal: the C name of that mbarrier
        self.recv_tiles = ""  # and of the tiles whose stores it counts
        self.remote: set[int] = set()  # shared tiles another block of the cluster reads or writes (DSMEM):
        # never copied into by cp.async, so a copy in flight at a cluster barrier is the block's own

    # ---- naming -----------------------------------------------------------------------------
    def _unique(self, base: str) -> str:
        if base[0].isdigit():
            base = "t" + base
        name = base
        while name in self.used:
            name += "_"
        self.used.add(name)
        return name

    def cname(self, ident: str) -> str:
        """The C name of a dim, constant, grid index or loop variable."""
        if ident in self.override:
            return self.override[ident]
        if ident not in self.cnames:
            self.cnames[ident] = self._unique(ident)
        return self.cnames[ident]

    def name(self, v: Value) -> str:
        if id(v) not in self.names:
            self.names[id(v)] = self._unique(v.name.replace(".", "_"))
        return self.names[id(v)]

    def op_names(self, op: Op, *bases: str) -> tuple[str, ...]:
        """Fresh C names for `op`'s own variables, the same on every emission of `op`."""
        if id(op) not in self.opnames:
            self.opnames[id(op)] = tuple(self._unique(b) for b in bases)
        return self.opnames[id(op)]

    def cexpr(self, text: str) -> str:
        return c_expr(exprs.parse(text), self.cname, load=self.c_load)

    def c_load(self, tensor: str, idx: list[str]) -> str:
        """`ids[b]` in an index expression: the element of global tensor `tensor`, as int,
        checked on the device against [0, bound) of dsl.ops.index_bound_exprs (`tk_index`)."""
        arg = next(a for a in self.m.func.body.args if a.name == tensor)
        dims, terms, stride = self.tensor_dims(arg), [], "1"
        for k in range(len(dims) - 1, -1, -1):
            terms.append(f"({idx[k]})" if stride == "1" else f"({idx[k]}) * {stride}")
            stride = times_text(stride, dims[k])
        value = f"static_cast<int>({self.name(arg)}[{' + '.join(reversed(terms))}])"
        rooms = [self.cexpr(r) for r in self.index_bounds.get(tensor, [])] or ["2147483647"]
        bound = functools.reduce(lambda a, r: f"min({a}, {r})", rooms)
        where = json.dumps(_loc(self.cur_op if self.cur_op is not None else self.m.func))
        return f"tk_index({value}, {bound}, {where}, {json.dumps(tensor)})"

    def tensor_dims(self, v: Value) -> tuple:
        """The extents of global tensor `v`: ints, and for a dynamic dim its C name (a kernel
        argument)."""
        return tuple(d.value if isinstance(d, exprs.Num) else self.cname(d.name) if isinstance(d, exprs.Sym)
                     else self.cexpr(exprs.to_str(d)) for d in v.type.shape)

    def grid_extent(self, text: str):
        """A grid extent: its value, or with a dynamic dim in it the expression as text (the launch
        evaluates it; tkc/cuda_runtime.py), whose grid index then ranges up to the extent's bound."""
        try:
            return self.value(text)
        except exprs.ExprError:
            e = exprs.parse(text)
            if not exprs.names(e) <= set(self.dynamic):
                raise
            return exprs.to_str(e)

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def value(self, text: str) -> int:
        return exprs.evaluate(exprs.parse(text), {})

    # ---- module -----------------------------------------------------------------------------
    def run(self) -> str:
        func = self.m.func
        kname = func.attrs.get("sym_name", "kernel")
        launches = [op for op in func.body.ops if op.name == "tile.launch"]
        if len(launches) != 1:
            raise error(func.loc, "the CUDA backend needs exactly one `grid`")
        launch = launches[0]
        dims, consts = func.attrs.get("dims", {}), func.attrs.get("consts", {})
        # Dynamic dims (`dynamic M`) are kernel arguments after the runtime scalars: one kernel
        # serves every value; tkc/cuda_runtime.py reads each from the first tensor that names it
        # and sizes the grid from it at launch.
        self.dynamic = sorted(dynamic_dims(func))
        self.used.add(kname)
        for k in list(dims) + list(consts) + [n for n, _, _ in scalars(func)] + self.dynamic:
            self.cname(k)
        self.ranges.update({n: (1, DYNAMIC_MAX) for n in self.dynamic})
        try:
            self.threads = self.value(launch.attrs["threads"])
            grid = [self.grid_extent(g) for g in launch.attrs["grid"]]
        except exprs.ExprError:
            raise error(launch.loc, "the CUDA backend needs a concrete grid and thread count",
                        "run the `tile` pass first (`tkc compile` does)") from None
        self.ranges.update(scalar_ranges(func, self.m.env))  # runtime scalars: [0, their `requires` bound]
        self.check_launch(launch, grid)
        cluster = self.cluster = self.cluster_dims(launch)
        if self.dynamic and (cluster != [1, 1, 1] or any(o.name == "tile.sampled_gemm" for o in func.walk())):
            raise error(func.loc, f"the CUDA backend cannot compile dynamic dim(s) "
                        f"{', '.join(f'`{n}`' for n in self.dynamic)} in a "
                        f"{'cluster kernel' if cluster != [1, 1, 1] else 'sampled gemm'}",
                        "use `--target tilelang` (or `tilelang-cpu`, `interp`), or drop the `dynamic` clause "
                        "to compile one kernel per value")
        self.plan = make_plan(self.m, launch, self.threads)
        self.check_smem(launch)
        if cluster != [1, 1, 1]:
            self.signal = plan_signal(launch, cluster, self.m.env, self.smem_word)
        grid3 = grid + [1] * (3 - len(grid))
        smem = self.plan.total_smem
        config = {"kernel": kname, "grid": grid3, "block": [self.threads, 1, 1], "cluster": cluster,
                  "smem_bytes": smem, "pdl": True}
        grid_sync = has_grid_barrier(launch)
        if grid_sync:  # `sync grid`: launched cooperatively (tkc/cuda_runtime.py), every block resident
            config["cooperative"] = True
        if self.dynamic:  # where the launch finds each dynamic dim: (argument, axis) of the first tensor naming it
            config["dynamic"] = [[n, *next((i, k) for i, a in enumerate(func.body.args)
                                           for k, dim in enumerate(a.type.shape) if dim == exprs.Sym(n))]
                                 for n in self.dynamic]
        self.line(0, f"// Generated by tkc from {func.loc.file}: kernel `{kname}`, CUDA C++ for {ARCH}.")
        self.line(0, "// Do not edit: regenerate with `tkc compile --target cuda`.")
        self.line(0, f"// Launch: grid ({', '.join(map(str, grid3))}), block ({self.threads}, 1, 1) = {self.threads} "
                  f"threads, cluster ({', '.join(map(str, cluster))}), dynamic shared memory {smem} bytes.")
        self.line(0, f"// Build: nvcc -arch={ARCH} -cubin -O3 kernel.cu (tkc.compile(..., target=\"cuda\") does it)")
        args = func.body.args
        outs = set(func.attrs.get("outputs", []))
        for i, a in enumerate(args):
            role = "output" if i in outs else "input"
            self.line(0, f"// {role} {a.name}: {a.type.dtype}[{', '.join(map(str, self.tensor_dims(a)))}]")
        refs = scalar_refs(func)
        for n, dtype, _ in scalars(func):
            how = "read from a one-element device tensor" if n in refs else "by value"
            self.line(0, f"// runtime scalar {n}: {dtype} (a kernel argument after the tensors, {how})")
        for n in self.dynamic:
            self.line(0, f"// dynamic dim {n}: an int kernel argument after the runtime scalars (the launch passes "
                      "the tensors' extent; one kernel serves every value)")
        self.line(0, f"// {PDL_ARG}: the last int kernel argument, 1 when the launch is programmatic (tkc.programmatic_launch), "
                  "else 0")
        for op in func.body.ops:
            if op.name == "tile.require" and op.attrs.get("runtime"):
                self.line(0, f"// requires {op.attrs['cond']}: checked at every call, in the kernel where it reads a "
                          f"runtime scalar from device memory ({_loc(op)})")
        self.line(0, f"// tkc-launch: {json.dumps(config)}")
        self.lines.extend(PRELUDE.rstrip("\n").split("\n"))
        if self.index_bounds or scalar_refs(func):
            self.lines.extend(CHECK_PRELUDE.rstrip("\n").split("\n"))
        if "cluster" in launch.attrs:
            self.lines.extend(CLUSTER_PRELUDE.rstrip("\n").split("\n"))
        elif grid_sync:
            self.lines.extend(GRID_PRELUDE.rstrip("\n").split("\n"))
        if self.signal is not None:
            self.lines.extend(SIGNAL_PRELUDE.rstrip("\n").split("\n"))
        self.line(0, "")
        self.line(0, "// ---- kernel --------------------------------------------------------------------------------")
        self.line(0, "")
        if dims:
            self.line(0, "// problem dims (the kernel is specialized on them)")
            for k in sorted(dims):
                self.line(0, f"constexpr int {self.cname(k)} = {dims[k]};")
        if consts:
            self.line(0, "// schedule constants")
            for k in sorted(consts):
                self.line(0, f"constexpr int {self.cname(k)} = {consts[k]};")
        self.line(0, f"constexpr int THREADS = {self.threads};  // threads per block")
        self.line(0, "")
        params = []
        # In a cluster kernel the inputs are not `__restrict__`: nvcc loads through a const
        # __restrict__ pointer with ld.global.nc, which ptxas sinks below a cluster barrier, so
        # the loads issued before map-dsmem's start barrier would wait for it instead of overlapping
        # it (H200, pushed reduce FFN: 42 us with, 39.5 us without; docs/PERFORMANCE.md).
        # The same in a `sync grid` kernel, whose weight loads written before a grid barrier are
        # meant to be in flight while the grid waits.
        restrict = "" if cluster != [1, 1, 1] or grid_sync else " __restrict__"
        for i, a in enumerate(args):
            const = "" if i in outs else "const "
            params.append(f"{const}{C_TYPES[a.type.dtype]}*{restrict} {self.name(a)}")
        # runtime scalars come last (tkc/cuda_runtime.py passes them after the outputs)
        ref_names = {n: self._unique(f"{n}_ref") for n, _, _ in scalars(func) if n in refs}
        params.extend(f"const int*{restrict} {ref_names[n]}" if n in refs else f"const int {self.cname(n)}"
                      for n, _, _ in scalars(func))
        params.extend(f"const int {self.cname(n)}" for n in self.dynamic)
        params.append(f"const int {PDL_ARG}")  # last: 1 when launched programmatically (tk_pdl_enter)
        # (not in a `sync grid` kernel, whose blocks must all be resident on a GPU of fewer SMs
        # too, nor in a gemm kernel, whose register tiles are sized to its own occupancy)
        gemm = any(o.name in ("tile.gemm", "tile.sampled_gemm") for o in func.walk())
        hint = self.min_blocks = None if grid_sync or gemm else min_blocks_hint(grid, self.threads)
        attrs = f"__launch_bounds__({self.threads}{'' if hint is None else f', {hint}'})"
        if hint is not None:
            self.line(0, f"// {hint} block(s) per SM hold the whole grid: ptxas may spend registers on loads in "
                         "flight (min_blocks_hint)")
        if cluster != [1, 1, 1]:
            attrs = f"__cluster_dims__({', '.join(map(str, cluster))}) " + attrs
        self.line(0, f"extern \"C\" __global__ void {attrs} {kname}({', '.join(params)}) {{")
        self.line(1, f"tk_pdl_enter({PDL_ARG});  // before any memory access (programmatic dependent launch)")
        for n, ref in ref_names.items():  # one load per thread; a CUDA graph replays at new values
            self.line(1, f"const int {self.cname(n)} = *{ref};  // runtime scalar `{n}` from device memory")
        for n, cond, what, op in device_checks(func):  # its range and `requires`, checked here (no host sync)
            self.line(1, f"tk_require({self.cexpr(cond)}, {json.dumps(_loc(op))}, {json.dumps(what)}, "
                         f"{json.dumps(n)}, {self.cname(n)});")
        self.launch(launch, grid)
        self.line(0, "}")
        return "\n".join(self.lines) + "\n"

    def check_launch(self, launch: Op, grid: list[int]) -> None:
        if not 1 <= self.threads <= 1024:
            raise error(launch.loc, f"the CUDA backend cannot launch {self.threads} threads per block",
                        "CUDA blocks have 1 to 1024 threads; set `threads(...)` in that range")
        for axis, (n, limit) in enumerate(zip(grid, MAX_GRID)):
            if isinstance(n, int) and n > limit:  # (an extent of a dynamic dim: checked at launch)
                raise error(launch.loc, f"grid extent {n} along `{launch.attrs['vars'][axis]}` exceeds CUDA's limit "
                            f"of {limit} for grid dimension {'xyz'[axis]}",
                            "put the largest extent first (it maps to blockIdx.x) or use larger tiles")

    def cluster_dims(self, launch: Op) -> list[int]:
        """Thread-block cluster shape (x, y, z); (1, 1, 1) when the grid has no clusters."""
        shape = [self.value(c) if isinstance(c, str) else int(c) for c in launch.attrs.get("cluster", [])]
        return shape + [1] * (3 - len(shape))

    def check_smem(self, launch: Op) -> None:
        """The plan's bytes against sm_90's limit: check-smem-fit{backend=cuda} runs the same
        check on the same plan (passes/cuda_placement.py), this one covers IR given directly."""
        d = smem_diagnostic(self.plan, launch, self.m.func.attrs.get("sym_name"), SMEM_LIMIT, "sm_90")
        if d is not None:
            raise TkError([d])

    # ---- launch and declarations ------------------------------------------------------------
    def launch(self, op: Op, grid: list[int]) -> None:
        self.line(1, f"// grid ({', '.join(op.attrs['grid'])}) as ({', '.join(op.attrs['vars'])}) ({_loc(op)})")
        for axis, (var, n) in enumerate(zip(op.attrs["vars"], grid)):
            self.ranges[var] = (0, (n if isinstance(n, int) else exprs.bounds(exprs.parse(n), self.ranges)[1]) - 1)
            self.line(1, f"const int {self.cname(var)} = blockIdx.{'xyz'[axis]};")
        for var, rank, c in zip(op.attrs["vars"], op.attrs.get("ranks", []), self.cluster):
            self.ranges[rank] = (0, c - 1)
            self.line(1, f"const int {self.cname(rank)} = {self.cname(var)} % {c};  // rank in the cluster")
        self.line(1, "const int tid = threadIdx.x;")
        if any(g.kind in ("mma", "wtile") for g in self.plan.gemms.values()):
            self.line(1, "const int warp = tid / 32, lane = tid % 32;")
        if self.plan.total_smem:
            self.line(1, "extern __shared__ __align__(128) unsigned char smem[];")
        for buf in self.plan.order:
            v = buf.value
            ctype = C_TYPES[v.type.dtype]
            what = f"{v.type.dtype}[{', '.join(map(str, shape_of(v)))}]"
            extra = f", {buf.slots} stages of {buf.slot_elems} elements" if buf.slots > 1 else ""
            if buf.transposed:
                if buf.swizzle:
                    w, c, r = buf.swizzle
                    extra += f", stored transposed and swizzled: [i, k] at k * pitch + (i ^ (k / {w} % {c} * {r}))"
                else:
                    extra += ", stored transposed: [i, k] at k * pitch + i"
            kind = "" if v.type.space == "shared" else f" ({v.type.space} tile kept in shared memory)"
            self.line(1, f"{ctype}* const {self.name(v)} = reinterpret_cast<{ctype}*>(smem + {buf.offset});  "
                      f"// {what}{kind}, row pitch {buf.pitch}{extra}")
        for a in op.walk():
            if a.name != "tile.alloc" or a.result.type.space == "shared":
                continue
            v = a.result
            where = self.plan.where(v)
            what = f"{v.type.dtype}[{', '.join(map(str, shape_of(v)))}]"
            if where == "regs":
                shape = shape_of(v)
                width = self.plan.width(shape)
                per = -(-(numel(shape) // width) // self.threads)
                self.line(1, f"{C_TYPES[v.type.dtype]} {self.name(v)}[{per * width}];  // {what} in registers: "
                          f"{per} chunk{'s' * (per > 1)} of {width} per thread")
            elif where == "wtile":
                t = self.plan.acc_split[id(v)].tiling
                self.line(1, f"{C_TYPES[v.type.dtype]} {self.name(v)}[{t.wmiter * t.tm}][{t.wniter * t.tn}];  "
                          f"// {what} warp-tiled: warps {t.bm // t.wm} x {t.bn // t.wn} of {t.wm} x {t.wn}, "
                          f"sub-tiles {t.wmiter} x {t.wniter} of {t.wsubm} x {t.wsubn}, this thread's "
                          f"{t.tm} x {t.tn} of each in registers")
            elif where == "mma":
                gp = self.plan.acc_split[id(v)]
                self.line(1, f"float {self.name(v)}[{gp.fm}][{gp.fn}][8];  // {what} as mma.sync accumulators: "
                          f"warps {gp.wm} x {gp.wn}, {gp.fm} x {gp.fn} blocks of 16x16 each")
        if self.signal is not None:
            self.recv = self._unique("tk_recv")
            self.recv_tiles = ", ".join(sorted({self.name(s.operands[1]) for s in self.signal.stores}))
            self.line(1, f"__shared__ __align__(8) unsigned long long {self.recv};  // mbarrier: the "
                      f"{self.signal.nbytes} bytes peers store into {self.recv_tiles} (st.async) have landed")
            self.line(1, f"if (tid == 0) tk_mbar_init(&{self.recv});")
            self.line(1, "__syncwarp();")
            self.line(1, f"if (tid == 0) tk_mbar_arrive_expect(&{self.recv}, {self.signal.nbytes});")
        self.line(1, "")
        self.remote = peer_tiles(op)
        self.region(op.body.ops, 1, SyncState())
        self.wait_copies(1, "before the block exits")

    # ---- regions and barriers ---------------------------------------------------------------
    def region(self, ops: list[Op], d: int, st: SyncState) -> SyncState:
        if d > 1:  # a loop body (at the top level a load moved up only lengthens live ranges)
            ops = self.hoist_loads(ops)
        self.store_groups(ops)
        for op in ops:
            if op.name == "tile.alloc":
                continue
            if op.name == "tile.for":
                self.wait_copies(d, "before the loop")
                st = self.op_for(op, d, st)
                continue
            if op.name == "tile.cluster_barrier" and op.attrs.get("relaxed"):  # orders no memory
                self.line(d, f"// {self.describe(op)}: every block of the cluster has started ({_loc(op)})")
                self.line(d, "tk_cluster_sync_relaxed();")
                continue
            if self.signal is not None and op is self.signal.barrier:  # not a barrier of the block's threads
                self.line(d, f"// {self.describe(op)}: as an mbarrier wait ({_loc(op)})")
                self.line(d, f"tk_mbar_wait(&{self.recv});  // the peers' stores into {self.recv_tiles} have landed")
                continue
            if op.name == "tile.cluster_barrier":  # also a barrier of the block's own threads
                self.line(d, f"// {self.describe(op)} ({_loc(op)})")
                self.line(d, "cg::this_cluster().sync();")
                st.clear()
                # A copy still in flight lands after the barrier: its writes still need a
                # __syncthreads() (after the wait) before other threads touch the tile.
                st.add(self.in_flight_writes())
                continue
            if op.name == "tile.grid_barrier":  # also a barrier of the block's own threads
                self.wait_copies(d, "a copy in flight would read past the grid barrier")
                self.line(d, f"// {self.describe(op)} ({_loc(op)})")
                self.line(d, "cg::this_grid().sync();  // global writes before it are visible to every block after it")
                st.clear()
                continue
            handler = getattr(self, "op_" + op.name.split(".")[1], None)
            if handler is None or op.name in ("tile.func", "tile.launch", "tile.require"):
                raise error(op.loc, f"the CUDA backend cannot express `{op.name}` here",
                            "supported inside a grid: tile.fill, tile.copy, tile.elementwise, tile.reduce, "
                            "tile.gemm, tile.for, tile.peer_copy, tile.peer_store, tile.cluster_barrier, tile.grid_barrier")
            accesses = self.accesses(op)
            if any(self.overlaps_in_flight(a) for a in accesses):
                self.wait_copies(d, "the copy must have landed before these bytes are touched")
            self.sync(accesses, d, st)
            self.line(d, f"// {self.describe(op)} ({_loc(op)})")
            self.cur_op = op
            handler(op, d)
        return st

    def wait_copies(self, d: int, why: str) -> None:
        """Wait for this thread's top-level cp.async copies (`cp.async.wait_group 0`)."""
        if self.in_flight:
            names = ", ".join(self.name(v) for v in self.in_flight.values())
            self.line(d, f"tk_cp_async_wait<0>();  // cp.async into {names}: {why}")
            self.in_flight.clear()

    def in_flight_writes(self) -> list[Access]:
        """The write accesses of the copies still in flight, as `accesses` gave them."""
        return [self.access(v, True, chunk_map(shape_of(v))) for v in self.in_flight.values()]

    def overlaps_in_flight(self, a: Access) -> bool:
        """Whether access `a` touches bytes a cp.async still in flight writes (the tile itself, or
        a tile that shares its bytes after its lifetime ends)."""
        return any(a.lo < w.hi and w.lo < a.hi for w in self.in_flight_writes())

    def sync(self, accesses: list[Access], d: int, st: SyncState) -> None:
        accesses = [a for a in accesses if a.buf not in self.staged]
        if st.conflicts(accesses):
            self.line(d, "__syncthreads();")
            st.clear()
            st.add(self.in_flight_writes())  # a copy still in flight is not ordered by this barrier
        st.add(accesses)

    def accesses(self, op: Op) -> list[Access]:
        """The shared-memory accesses of `op`, with the thread map each is made under."""
        out: list[Access] = []

        def add(v: Value, write: bool, tmap) -> None:
            if self.plan.where(v) == "shared":
                out.append(self.access(v, write, tmap))

        if op.name == "tile.fill":
            add(op.operands[0], True, chunk_map(shape_of(op.operands[0])))
        elif op.name == "tile.copy":
            src, dst = op.operands
            if self.plan.where(src) in ("mma", "wtile"):
                add(dst, True, OTHER)
            else:
                tile = dst if src.type.space == "global" else src
                add(src, False, chunk_map(shape_of(tile)))
                add(dst, True, chunk_map(shape_of(tile)))
        elif op.name == "tile.elementwise":
            out_v = op.operands[-1]
            for v in op.operands[:-1]:
                add(v, False, chunk_map(shape_of(v)) if shape_of(v) == shape_of(out_v) else OTHER)
            add(out_v, True, chunk_map(shape_of(out_v)))
        elif op.name == "tile.peer_copy":  # the local instance of the source is not touched
            add(op.operands[1], True, chunk_map(shape_of(op.operands[1])))
        elif op.name == "tile.peer_store":  # nor the local instance of the destination
            add(op.operands[0], False, chunk_map(shape_of(op.operands[0])))
        elif op.name in ("tile.reduce", "tile.dot_reduce"):
            for v in op.operands[:-1]:
                add(v, False, OTHER)
            add(op.operands[-1], True, OTHER)
            add(op.operands[-1], False, OTHER)
            rr = self.plan.reductions.get(id(op))
            if rr is not None and rr.scratch:  # written before the op's own barrier, read after it
                out.append(Access(SCRATCH, True, OTHER, self.plan.scratch_offset, self.plan.total_smem))
                out.append(Access(SCRATCH, False, OTHER, self.plan.scratch_offset, self.plan.total_smem))
        elif op.name == "tile.reshape":
            # read in the destination's chunk loop: where the two shapes differ only by unit dims
            # and have one chunk width, a thread reads the very elements the source's own chunk
            # map gives it (the same flat order in the same chunks), else any element
            src, dst = op.operands
            ss, ds = shape_of(src), shape_of(dst)
            same = squeezed(ss) == squeezed(ds) and self.plan.width(ss) == self.plan.width(ds)
            add(src, False, chunk_map(ss) if same else OTHER)
            add(dst, True, chunk_map(ds))
        elif op.name == "tile.gemm":
            a, b, acc = op.operands
            add(a, False, OTHER)
            add(b, False, OTHER)
            mma = self.plan.gemms[id(op)].kind == "mma"
            add(acc, True, OTHER if mma else chunk_map(shape_of(acc)))
            add(acc, False, OTHER if mma else chunk_map(shape_of(acc)))
        return out

    def access(self, v: Value, write: bool, tmap) -> Access:
        buf = self.plan.smem[id(v)]
        return Access(id(v), write, tmap, buf.offset, buf.offset + buf.nbytes)

    def describe(self, op: Op) -> str:
        ops = ", ".join(str(v) for v in op.operands)
        attrs = {k: v for k, v in op.attrs.items() if k in ("fn", "axis", "value", "scalar", "accumulate", "async")}
        text = f"{op.name}({ops})"
        return text + (" " + format_attr_dict(attrs) if attrs else "")

    # ---- clusters ---------------------------------------------------------------------------
    def peer_rank(self, op: Op) -> str:
        """The linear cluster rank (x fastest) of `op`'s peer, as a C expression."""
        linear, scale = [], 1
        for r, c in zip((self.cexpr(r) for r in op.attrs["rank"]), self.cluster):
            linear.append(r if scale == 1 else f"({r}) * {scale}")
            scale *= c
        return " + ".join(linear)

    def open_peer(self, op: Op, tile: Value, d: int, const: bool) -> None:
        """Open a scope with `peer`, a generic pointer to the peer block's instance of `tile`."""
        ctype = ("const " if const else "") + C_TYPES[tile.type.dtype]
        self.line(d, "{")
        self.line(d + 1, f"{ctype}* const peer = cg::this_cluster().map_shared_rank({self.name(tile)}, "
                  f"{self.peer_rank(op)});")

    def op_peer_copy(self, op: Op, d: int) -> None:
        """Read the peer block's instance of a shared tile through distributed shared memory
        (`map_shared_rank` is `mapa`; the loads are ordinary loads through a generic address)."""
        src, dst = op.operands
        ctype = C_TYPES[src.type.dtype]
        self.open_peer(op, src, d, const=True)

        def body(ch, dd):
            self.line(dd, f"alignas(16) {ctype} pv[{ch.width}];")
            self.line(dd, f"tk_load<{self.smem_word(src, ch.width)}>(pv, &peer[{self.smem_offset(src, ch.idx)}]);")
            self.write(dst, ch, dd, lambda e: convert(f"pv[{e}]", src.type.dtype, dst.type.dtype), "ov")

        self.chunk_loop(shape_of(dst), d + 1, body)
        self.line(d, "}")

    def op_peer_store(self, op: Op, d: int) -> None:
        """Write a tile into the peer block's instance of a shared tile through distributed shared
        memory: vectorized stores through the generic address `map_shared_rank` gives, which need
        no reply (pushing is cheaper than the peer pulling: docs/PERFORMANCE.md)."""
        src, dst = op.operands
        ctype = C_TYPES[dst.type.dtype]
        signalled = self.signal is not None and any(op is s for s in self.signal.stores)
        if signalled:  # st.async, counted on the peer's mbarrier (codegen/cuda_signal.py)
            self.line(d, "{")
            self.line(d + 1, f"const unsigned peer = tk_mapa(tk_smem_addr({self.name(dst)}), {self.peer_rank(op)});")
            self.line(d + 1, f"const unsigned peer_recv = tk_mapa(tk_smem_addr(&{self.recv}), {self.peer_rank(op)});")
        else:
            self.open_peer(op, dst, d, const=False)

        def body(ch, dd):
            x = self.read(src, ch, dd, "sv")
            self.line(dd, f"alignas(16) {ctype} pv[{ch.width}];")
            self.elem_loop(dd, f"pv[e] = {convert(x('e'), src.type.dtype, dst.type.dtype)};", ch.width)
            word, off = self.smem_word(dst, ch.width), self.smem_offset(dst, ch.idx)
            if signalled:
                self.line(dd, f"tk_st_async<{word}>(peer + ({off}) * {SIZES[dst.type.dtype]}, pv, peer_recv);")
            else:
                self.line(dd, f"tk_store<{word}>(&peer[{off}], pv);")

        self.chunk_loop(shape_of(src), d + 1, body)
        self.line(d, "}")

    # ---- elementwise ops --------------------------------------------------------------------
    def op_fill(self, op: Op, d: int) -> None:
        v = op.operands[0]
        if self.plan.where(v) == "mma" and ("index" in op.attrs or "axis" in op.attrs):
            raise error(op.loc, "the CUDA backend cannot fill a tensor-core accumulator with `iota` or a runtime value",
                        "fill a separate tile and add it after the gemm")
        if self.plan.where(v) == "mma":
            self.mma_fill(v, op.attrs["value"], d)
            return
        if self.plan.where(v) == "wtile":
            self.wtile_fill(v, op.attrs["value"], d)
            return
        if self.plan.where(v) == "const":
            self.line(d, f"// nothing to do: the ops that read {self.name(v)} use {self.fill_value(op)}")
            return
        ct = compute_dtype(v.type.dtype)
        if "axis" not in op.attrs:
            value = self.fill_value(op)
            self.chunk_loop(shape_of(v), d, lambda ch, dd: self.write(v, ch, dd, lambda e: value, "ov"))
            return
        axis, shape = op.attrs["axis"], shape_of(v)
        base = self.cexpr(op.attrs["index"]) if "index" in op.attrs else "0"

        def iota(ch, dd):
            def at(e):
                pos = f"({ch.idx[axis]}) + {e}" if axis == len(shape) - 1 else f"({ch.idx[axis]})"
                return convert(f"static_cast<{C_TYPES[ct]}>({base} + {pos})", ct, v.type.dtype)

            self.write(v, ch, dd, at, "ov")

        self.chunk_loop(shape, d, iota)

    def fill_value(self, op: Op) -> str:
        """The C expression (in the tile's dtype) of the value a fill without `axis` writes."""
        v = op.operands[0]
        ct = compute_dtype(v.type.dtype)
        if "index" in op.attrs:  # a runtime integer as a number
            return convert(f"static_cast<{C_TYPES[ct]}>({self.cexpr(op.attrs['index'])})", ct, v.type.dtype)
        return convert(literal(op.attrs["value"], ct), ct, v.type.dtype)

    def op_reshape(self, op: Op, d: int) -> None:
        """dst = src's elements in row-major order; src is a shared tile (any element, any thread)."""
        src, dst = op.operands
        sshape, dshape = shape_of(src), shape_of(dst)

        def body(ch, dd):
            flat, stride = [], 1
            for k in range(len(dshape) - 1, -1, -1):
                flat.append(f"({ch.idx[k]})" if stride == 1 else f"({ch.idx[k]}) * {stride}")
                stride *= dshape[k]
            self.line(dd, f"const int flat = {' + '.join(reversed(flat))};")
            idx, stride = [], 1
            for k in range(len(sshape) - 1, -1, -1):
                term = "(flat + e)" if stride == 1 else f"(flat + e) / {stride}"
                idx.append(f"({term} % {sshape[k]})" if k else f"({term})")
                stride *= sshape[k]
            at = f"{self.name(src)}[{self.smem_offset(src, list(reversed(idx)))}]"
            self.write(dst, ch, dd, lambda e: convert(at.replace("(flat + e)", f"(flat + {e})"), src.type.dtype,
                                                      dst.type.dtype), "ov")

        self.chunk_loop(dshape, d, body)

    def op_elementwise(self, op: Op, d: int) -> None:
        out, ins = op.operands[-1], op.operands[:-1]
        fn = op.attrs["fn"]
        # comparisons compute in their inputs' f32 (f64) and give a bool; `where` selects in the
        # output dtype, its condition a bool
        ct = compute_dtype(out.type.dtype)
        rt = ct  # the dtype of apply's result
        if fn in COMPARE:
            ct = compare_dtype(ins)
            rt = "bool"
        elif fn == "where":
            ct = rt = out.type.dtype
        arg_types = ["bool" if fn == "where" and k == 0 else ct for k in range(len(ins))]

        shape = shape_of(out)
        hoisted = self.invariant_inputs(ins, shape)
        pre: dict[int, object] = {}
        if hoisted:  # read once, before the chunk loop, with the thread's first chunk's index
            self.line(d, "{")
            width = self.plan.width(shape)
            decls, idx = self._chunk_indices(shape, width)
            saved, self.lines = self.lines, []
            for k in hoisted:
                pre[k] = self.read(ins[k], Chunk(tuple(shape), width, idx, ""), d + 1, f"in{k}")
            text, self.lines = self.lines, saved
            self.line(d + 1, "const int ch = tid;  // the same elements of "
                      + ", ".join(self.name(ins[k]) for k in hoisted) + " in each of this thread's chunks")
            joined = "\n".join(text)
            for name, expr in decls:
                if re.search(rf"\b{name}\b", joined):
                    self.line(d + 1, f"const int {name} = {expr};")
            self.lines.extend(text)
            d += 1

        def body(ch, dd):
            readers = [pre[k] if k in pre else self.read(v, ch, dd, f"in{k}") for k, v in enumerate(ins)]
            args = lambda e: [convert(r(e), v.type.dtype, t) for r, v, t in zip(readers, ins, arg_types)]  # noqa: E731
            extra = [literal(op.attrs["scalar"], ct)] if "scalar" in op.attrs else []
            self.write(out, ch, dd, lambda e: convert(apply(fn, args(e) + extra, ct), rt, out.type.dtype), "ov")

        self.chunk_loop(shape, d, body)
        if hoisted:
            self.line(d - 1, "}")

    def invariant_inputs(self, ins: list[Value], shape) -> list[int]:
        """Positions of the broadcast inputs (in shared memory or global views) whose elements are
        the same in every chunk a thread handles over an output of `shape`: chunk c + THREADS
        starts THREADS * V elements after chunk c, which moves no index of a dim the input
        does not broadcast along when that step is a multiple of the dim's extent times its
        stride (a GEMV's activation row over several rows of W). Only when every thread has
        the same number of chunks, more than one."""
        width = self.plan.width(shape)
        n = numel(shape) // width
        if n % self.threads or n // self.threads < 2:
            return []
        step = self.threads * width
        out = []
        for k, v in enumerate(ins):
            if self.plan.where(v) not in ("gview", "shared") or shape_of(v) == tuple(shape):
                continue
            vshape = shape_of(v)
            lead = len(shape) - len(vshape)
            ok = True
            for j, extent in enumerate(vshape):
                if extent == 1:
                    continue
                stride = numel(shape[lead + j + 1:])
                ok &= step % (stride * shape[lead + j]) == 0
            if ok:
                out.append(k)
        return out

    def op_reduce(self, op: Op, d: int) -> None:
        """Each output element is reduced by a group of `lanes` threads (a power of two that fits
        in a warp): strided partial results, then xor shuffles inside the group. A source in
        registers is reduced where it lives (`reg_reduce`)."""
        if id(op) in self.plan.reductions:
            self.reg_reduce(op, d)
            return
        src, dst = op.operands
        axis, fn = op.attrs["axis"], op.attrs["fn"]
        ct = compute_dtype(dst.type.dtype)
        ctype = C_TYPES[ct]
        sshape, dshape = shape_of(src), shape_of(dst)
        n_out, length = numel(dshape), sshape[axis]
        lanes = 1
        if self.threads % 32 == 0:
            while lanes < 32 and lanes * 2 <= length and n_out * lanes * 2 <= self.threads:
                lanes *= 2
        groups = self.threads // lanes
        self.line(d, "{")
        self.line(d + 1, f"// {n_out} output(s), {lanes} thread(s) each, {length} elements along axis {axis}")
        self.line(d + 1, f"for (int o_base = 0; o_base < {n_out}; o_base += {groups}) {{")
        b = d + 2
        self.line(b, f"const int oi = o_base + tid / {lanes}, part = tid % {lanes};" if lanes > 1 else
                  "const int oi = o_base + tid, part = 0;")
        self.line(b, f"{ctype} red = {identity(fn, ct)};")
        self.line(b, f"if (oi < {n_out}) {{")
        idx, rest = [], "oi"
        for k in range(len(dshape) - 1, -1, -1):  # output index, innermost dim first
            if k == axis or dshape[k] == 1:
                idx.append("0")
                continue
            idx.append(f"{rest} % {dshape[k]}" if k else rest)
            rest = f"{rest} / {dshape[k]}"
        idx = idx[::-1]
        src_idx = [("kk" if k == axis else i) for k, i in enumerate(idx)]
        elem = convert(f"{self.name(src)}[{self.smem_offset(src, src_idx)}]", src.type.dtype, ct)
        self.line(b + 1, f"for (int kk = part; kk < {length}; kk += {lanes}) red = {combine(fn, 'red', elem, ct)};")
        self.line(b, "}")
        if lanes > 1:
            self.line(b, "#pragma unroll")
            self.line(b, f"for (int sh = {lanes // 2}; sh > 0; sh /= 2) "
                      f"red = {combine(fn, 'red', '__shfl_xor_sync(0xffffffffu, red, sh)', ct)};")
        target = f"{self.name(dst)}[{self.smem_offset(dst, idx)}]"
        value = "red"
        if op.attrs.get("accumulate"):  # sum only (ReduceOp.verify): dst + the group's sum
            value = f"{convert(target, dst.type.dtype, ct)} + red"
        self.line(b, f"if (oi < {n_out} && part == 0) {target} = {convert(value, ct, dst.type.dtype)};")
        self.line(d + 1, "}")
        self.line(d, "}")

    def op_dot_reduce(self, op: Op, d: int) -> None:
        """int8 dot products (`tile.dot_reduce`, passes/fuse_int8_dot.py): a reduction of the
        register tile a whose fold takes four bytes of a and of b per `__dp4a`, b read for each
        chunk as an elementwise input (once, before the chunk loop, when every chunk of the thread
        reads the same elements of it: a GEMV's activation row); the integer sums, exact in f32
        (the pass's bound), then combine as any register reduction's."""
        a, b, dst = op.operands
        if id(op) not in self.plan.reductions:
            raise error(op.loc, f"the CUDA backend reduces `tile.dot_reduce` in registers, and `{a}` is kept in "
                        "shared memory", "run the default pipeline: `fuse-int8-dot` fuses only what stays in registers")
        shape = shape_of(a)
        v = self.plan.width(shape)
        hoisted = self.invariant_inputs([b], shape)
        pre = None
        if hoisted:
            self.line(d, "{")
            self.line(d + 1, f"const int ch = tid;  // the same elements of {self.name(b)} in each of this thread's chunks")
            pre = self.read_at_chunk(b, shape, "", d + 1, "inb")
            d += 1

        def fold(var: str, live: str, dd: int) -> None:
            if live:
                self.line(dd, f"if ({live}) {{")
                dd += 1
            reader = pre or self.read_at_chunk(b, shape, f"it * {v} + ", dd, "inb")  # b's elements of this chunk
            word = lambda get, e: "tk_pack_i8x4(" + ", ".join(get(str(e + k)) for k in range(4)) + ")"  # noqa: E731
            mine = lambda e: f"{self.name(a)}[it * {v} + {e}]"  # noqa: E731
            self.line(dd, "int dot = 0;")
            for e in range(0, v, 4):
                self.line(dd, f"dot = __dp4a({word(mine, e)}, {word(reader, e)}, dot);")
            self.line(dd, f"{var} = {var} + static_cast<float>(dot);")
            if live:
                self.line(dd - 1, "}")

        self.reg_reduce(op, d, fold)
        if hoisted:
            self.line(d - 1, "}")

    def read_at_chunk(self, v: Value, shape, reg_base: str, d: int, tmp: str):
        """Make tile `v` readable at chunk `ch` (a C name in scope) of a tile of `shape`, declaring
        the chunk's indices that the read uses; returns e -> C expression of element e."""
        width = self.plan.width(shape)
        decls, idx = self._chunk_indices(shape, width)
        saved, self.lines = self.lines, []
        reader = self.read(v, Chunk(tuple(shape), width, idx, reg_base), d, tmp)
        text, self.lines = self.lines, saved
        joined = "\n".join(text)
        for name, expr in decls:
            if re.search(rf"\b{name}\b", joined):
                self.line(d, f"const int {name} = {expr};")
        self.lines.extend(text)
        return reader

    def reg_reduce(self, op: Op, d: int, dot_fold=None) -> None:
        """A reduction of a register tile (cuda_plan.RegReduce): each thread folds its own chunks,
        threads holding parts of the same outputs combine by xor shuffles, and when several
        warps hold parts, their partials meet in shared scratch behind one barrier. `dot_fold`
        (op_dot_reduce) replaces the rows form's fold of a chunk."""
        src, dst = op.operands[0], op.operands[-1]
        rr = self.plan.reductions[id(op)]
        fn = op.attrs.get("fn", "sum")
        ct = compute_dtype(dst.type.dtype)
        ctype = C_TYPES[ct]
        shape, dshape = shape_of(src), shape_of(dst)
        v = self.plan.width(shape)
        n_ch = numel(shape) // v
        per = -(-n_ch // self.threads)
        guard = n_ch % self.threads != 0
        sname = self.name(src)
        scratch = f"reinterpret_cast<{ctype}*>(smem + {self.plan.scratch_offset})"

        def combine_into(var: str, other: str) -> str:
            return f"{var} = {combine(fn, var, other, ct)};"

        def store(idx: list[str], value: str, dd: int, cond: str = "") -> None:
            target = f"{self.name(dst)}[{self.smem_offset(dst, idx)}]"
            if op.attrs.get("accumulate"):  # sum only (ReduceOp.verify): dst + the sum
                value = f"{convert(target, dst.type.dtype, ct)} + {value}"
            stmt = f"{target} = {convert(value, ct, dst.type.dtype)};"
            self.line(dd, f"if ({cond}) {stmt}" if cond else stmt)

        def merge_scratch(n_out: int, at: str, idx: list[str]) -> None:
            """After a barrier, output o (0 <= o < n_out) combines its rr.slots partials in the
            scratch, slot s at `at` (a C expression of o and s), and is stored at tile index `idx`;
            `merge_lanes` threads per output take every lanes-th slot and meet by xor shuffles."""
            lanes = merge_lanes(n_out, rr.slots, self.threads)
            self.line(b, "__syncthreads();")
            if lanes == 1:
                self.line(b, f"for (int o = tid; o < {n_out}; o += THREADS) {{")
                self.line(b + 1, f"{ctype} red = {identity(fn, ct)};")
                self.line(b + 1, "#pragma unroll")
                self.line(b + 1, f"for (int s = 0; s < {rr.slots}; ++s) " + combine_into("red", f"{scratch}[{at}]"))
                store(idx, "red", b + 1)
                self.line(b, "}")
                return
            self.line(b, f"for (int o_base = 0; o_base < {n_out}; o_base += THREADS / {lanes}) {{  // {lanes} threads "
                         "per output")
            self.line(b + 1, f"const int o = o_base + tid / {lanes}, part = tid % {lanes};")
            self.line(b + 1, f"{ctype} red = {identity(fn, ct)};")
            self.line(b + 1, f"if (o < {n_out}) {{")
            self.line(b + 2, f"for (int s = part; s < {rr.slots}; s += {lanes}) "
                      + combine_into("red", f"{scratch}[{at}]"))
            self.line(b + 1, "}")
            self.line(b + 1, "#pragma unroll")
            self.line(b + 1, f"for (int step = {lanes // 2}; step > 0; step /= 2) "
                      + combine_into("red", "__shfl_xor_sync(0xffffffffu, red, step)"))
            store(idx, "red", b + 1, f"o < {n_out} && part == 0")
            self.line(b, "}")

        def fold(var: str, live: str, dd: int) -> None:
            """var = combine(var, this thread's chunk `it`), element by element when `var` is an
            array (`red[e]`); only where `live` holds (a C condition, "" for always)."""
            elem = convert(f"{sname}[it * {v} + e]", src.type.dtype, ct)
            if live:
                self.line(dd, f"if ({live}) {{")
                dd += 1
            self.line(dd, "#pragma unroll")
            self.line(dd, f"for (int e = 0; e < {v}; ++e) {combine_into(var, elem)}")
            if live:
                self.line(dd - 1, "}")

        def out_index(flat: str, dims) -> list[str]:
            """Tile index of element `flat` (row-major) of a tile of shape `dims`."""
            idx, rest = [], flat
            for k in range(len(dims) - 1, -1, -1):
                if dims[k] == 1:
                    idx.append("0")
                    continue
                idx.append(f"({rest}) % {dims[k]}" if any(dims[j] != 1 for j in range(k)) else rest)
                rest = f"({rest}) / {dims[k]}"
            return idx[::-1]

        self.line(d, "{")
        b = d + 1
        if rr.kind == "rows":
            g = rr.group
            self.line(b, f"// in registers: {g} chunk(s) of {v} per output along the last axis"
                      + (f", {rr.slots} partials per output in shared scratch" if rr.slots > 1 else ""))
            self.line(b, "#pragma unroll")
            self.line(b, f"for (int it = 0; it < {per}; ++it) {{")
            self.line(b + 1, "const int ch = it * THREADS + tid;")
            self.line(b + 1, f"{ctype} red = {identity(fn, ct)};")
            (dot_fold or fold)("red", f"ch < {n_ch}" if guard else "", b + 1)
            width = shuffle_width(g)
            if width > 1:
                self.line(b + 1, "#pragma unroll")
                self.line(b + 1, f"for (int sh = {width // 2}; sh > 0; sh /= 2) "
                          + combine_into("red", "__shfl_xor_sync(0xffffffffu, red, sh)"))
            live = [f"ch < {n_ch}"] if guard else []
            if rr.slots == 1:
                store(out_index(f"ch / {g}", dshape[:-1]) + ["0"], "red", b + 1,
                      " && ".join(live + ([f"ch % {g} == 0"] if g > 1 else [])))
            else:  # output ch / g's partial ch % g / width sits at slot ch / width
                lead = [f"ch % {width} == 0"] if width > 1 else []
                self.line(b + 1, f"if ({' && '.join(live + lead) or 'true'}) {scratch}[ch / {width}] = red;")
            self.line(b, "}")
            if rr.slots > 1:
                merge_scratch(n_ch // g, f"o * {rr.slots} + s", out_index("o", dshape[:-1]) + ["0"])
        else:  # cols: reduce along axis 0
            g, inner = rr.group, numel(shape[1:])
            self.line(b, f"// in registers: {g} chunk(s) of {v} per row, reduced along axis 0"
                      + (f"; {rr.slots} partials per column in shared scratch" if rr.slots > 1 else ""))
            self.line(b, f"{ctype} red[{v}];")
            self.line(b, "#pragma unroll")
            self.line(b, f"for (int e = 0; e < {v}; ++e) red[e] = {identity(fn, ct)};")
            self.line(b, "#pragma unroll")
            self.line(b, f"for (int it = 0; it < {per}; ++it) {{")
            fold("red[e]", f"it * THREADS + tid < {n_ch}" if guard else "", b + 1)
            self.line(b, "}")
            if g < 32 and g & (g - 1) == 0:
                self.line(b, "#pragma unroll")
                self.line(b, f"for (int sh = {g}; sh < 32; sh *= 2) {{")
                self.line(b + 1, "#pragma unroll")
                self.line(b + 1, f"for (int e = 0; e < {v}; ++e) "
                          + combine_into("red[e]", "__shfl_xor_sync(0xffffffffu, red[e], sh)"))
                self.line(b, "}")
                holder, slot = f"tid % 32 < {g}", "tid / 32"
            else:
                holder, slot = "true", f"tid / {g}"
            col = f"tid % {g}" + (f" * {v}" if v > 1 else "")
            dims = dshape[1:]
            if rr.slots == 1:
                self.line(b, f"if ({holder} && {slot} == 0) {{")
                self.line(b + 1, f"const int col = {col};")
                for e in range(v):
                    flat = "col" if e == 0 else f"col + {e}"
                    store(["0"] + out_index(flat, dims), f"red[{e}]", b + 1)
                self.line(b, "}")
            else:
                self.line(b, f"if ({holder} && {slot} < {rr.slots}) {{")
                self.line(b + 1, "#pragma unroll")
                self.line(b + 1, f"for (int e = 0; e < {v}; ++e) {scratch}[({slot}) * {inner} + {col} + e] = red[e];")
                self.line(b, "}")
                merge_scratch(inner, f"s * {inner} + o", ["0"] + out_index("o", dims))
        self.line(d, "}")

"""Where the CUDA backend keeps each tile, and its shared-memory layout (the `cuda` target).

The CUDA backend (codegen/cuda.py) emits what this plan says; `check-smem-fit{backend=cuda}`
reads its `total_smem`, so the estimate and the bytes the kernel asks for at launch are one
computation. Input: a launch of the final tile IR (concrete shapes, after `tile`).

Placement of register tiles (`frag`/`local`), decided from every op that touches the tile:

* `regs`: distributed over the block's threads in *chunks* (V consecutive elements of the last
  dim; chunk c belongs to thread c % threads). Every op that iterates over a tile of the same
  shape uses the same chunk -> thread map, so a tile can live in registers exactly when every
  op touching it iterates over its own shape: fill, copies, elementwise outputs and same-shape
  inputs, the accumulator of a SIMT gemm.
* `mma`: the accumulator of tensor-core gemms, held in the registers of `mma.sync` accumulator
  fragments split over the warps; allowed when the tile is only filled, accumulated into by
  tensor-core gemms and copied out to a global tensor or a shared tile.
* `wtile`: the accumulator of SIMT gemms with a warp tiling (`with warp(...) thread(...)`,
  dsl/warp_tiling.py), held in each thread's registers as its WMITER*TM x WNITER*TN outputs;
  allowed when the tile is f32 or f64, only filled, accumulated into by gemms of one tiling and
  copied out to a global tensor or a shared tile (otherwise a located error: the tiling asks for
  registers the backend cannot give).
* `gview`: a *global view*, a window of an input tensor copied by one `tile.copy` and only read
  by elementwise ops after it in the same op list, at least one broadcasting it: nothing is
  staged, the readers load the tensor's elements where they need them (`_gview_ok`).
* `const`: a tile that one fill gives a single value (a number, or a runtime scalar) and that
  only elementwise ops after the fill, in the same op list, read: nothing is stored, the readers
  use the value (`pos * t` with a runtime `pos`; `_const_ok`).
* `shared`: everything else (broadcast inputs, gemm operands, reduction sources whose layout
  `register_reduce` cannot handle) is kept in shared memory, which any thread can read.

A reduction may read a register tile in place (`RegReduce`): its source's chunks are combined by
the threads that hold them, with xor shuffles and, across warps, a shared scratch placed after
the buffers (`Plan.scratch_offset`).

The A operand of a warp-tiled gemm is stored transposed (`SmemBuffer.transposed`: element [i, k]
at k * pitch + i), so that a thread's TM consecutive rows at one k are one vector load (seed 002,
after Boehm's SGEMM worklog), when it is only written by copies and fills and read by such gemms.
Its copies write one element per lane, a column apart: a warp's lanes take R = 32 / C rows of C
chunks of W columns each, and with a pitch that is a multiple of 32 words the C lanes of a row hit
one bank. Such a tile is XOR-swizzled (`SmemBuffer.swizzle`, `_swizzle`): row i of column k is
stored at i ^ ((k / W % C) * R), which gives the warp's 32 stores 32 banks and keeps every run of
R rows (a thread's TM <= R rows, TM a power of two) contiguous, so the gemm's vector loads stay
whole and their bank pattern unchanged (the XOR is the same for every lane at one k). Measured on
an H100 (benchmarks/probes/sgemm `swz`, 2026-11-26): 4096^3 SGEMM 3099.3 -> 2958.5 us, 85.9% ->
90.0% of cuBLAS.

Shared memory: buffers whose lifetimes do not overlap share bytes (a buffer used inside a loop
lives through the whole loop); each gets the lowest 128-byte aligned offset free for its
lifetime, biggest first; a staged buffer's copies are each rounded up to 128 bytes; the
register reductions' scratch follows the buffers. `smem_diagnostic` is the over-budget error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dsl.diagnostics import Diagnostic, error
from dsl.ir import Module, Op, Value
from dsl.ops import peer_tiles
from dsl.types import DTYPES
from dsl.warp_tiling import WarpTiling, warp_tiling

MMA_DTYPES = ("f16", "bf16")  # operand dtypes of mma.sync m16n8k16 with an f32 accumulator (sm_80+)
SIZES = {d: info[0] for d, info in DTYPES.items()}  # bytes per element


def compute_dtype(out: str) -> str:
    """The dtype elementwise arithmetic runs in for an output of dtype `out` (interpreter rule)."""
    return "f64" if out == "f64" else "f32"


SMEM_ALIGN = 128  # bytes; ldmatrix and cp.async need 16


def shape_of(v: Value) -> tuple[int, ...]:
    return v.type.concrete_shape({})


def numel(shape) -> int:
    return math.prod(shape)


def chunk_width(shape, wide: bool = False) -> int:
    """V: elements per chunk for tiles of `shape`: the largest of 8, 4, 2, 1 dividing the last dim,
    or 16 for a `wide` shape (one whose tiles include int8 ones: 16 int8 elements are one 16-byte
    access, where 8 would take an 8-byte one) when 16 divides it."""
    last = shape[-1]
    return next(v for v in ((16,) if wide else ()) + (8, 4, 2, 1) if last % v == 0)


def wide_shapes(launch: Op) -> frozenset:
    """The tile shapes of `launch` that get 16-element chunks (chunk_width): those of its i8 tiles."""
    return frozenset(shape_of(op.result) for op in launch.walk()
                     if op.name == "tile.alloc" and op.result.type.dtype == "i8" and op.result.type.space != "shared")



@dataclass
class GemmPlan:
    """How one tile.gemm runs: `mma` (tensor cores, 16x16 output blocks) and its warp split,
    `wtile` (SIMT, warp-tiled: `tiling`) or `simt`."""

    kind: str
    mb: int = 0  # 16-row blocks of the output
    nb: int = 0  # 16-column blocks
    wm: int = 1  # warps along M
    wn: int = 1  # warps along N
    fm: int = 0  # fragments per warp along M
    fn: int = 0  # fragments per warp along N
    tiling: WarpTiling | None = None  # wtile: the warp tiling


def warp_split(mb: int, nb: int, warps: int) -> tuple[int, int, int, int]:
    """(wm, wn, fm, fn): warps as wm x wn, each owning fm x fn output fragments; fewest fragments
    per warp first, then fewest operand fragments loaded per k step (fm + fn)."""
    best = None
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        fm, fn = -(-mb // wm), -(-nb // wn)
        key = (fm * fn, fm + fn, abs(wm - wn))
        if best is None or key < best[0]:
            best = (key, (wm, wn, fm, fn))
    return best[1]


@dataclass
class SmemBuffer:
    value: Value
    pitch: int  # elements per row (last dim plus padding)
    slots: int  # pipeline stages
    offset: int = 0  # bytes from the start of dynamic shared memory
    transposed: bool = False  # 2-d, stored column by column: [i, k] at k * pitch + i
    swizzle: tuple[int, int, int] | None = None  # transposed: (W, C, R), row i of column k at i ^ (k / W % C * R)

    @property
    def slot_elems(self) -> int:
        """Elements from one pipeline stage's copy to the next (a multiple of 128 bytes)."""
        shape = shape_of(self.value)
        n = (shape[1] if self.transposed else numel(shape[:-1])) * self.pitch
        if self.slots == 1:
            return n
        unit = max(1, SMEM_ALIGN // SIZES[self.value.type.dtype])
        return -(-n // unit) * unit

    @property
    def nbytes(self) -> int:
        return self.slot_elems * SIZES[self.value.type.dtype] * self.slots


@dataclass
class Plan:
    threads: int
    placement: dict[int, str] = field(default_factory=dict)  # id(value) -> regs | mma | shared
    gemms: dict[int, GemmPlan] = field(default_factory=dict)  # id(op) -> plan
    acc_split: dict[int, GemmPlan] = field(default_factory=dict)  # id(mma/wtile tile) -> its gemm's plan
    smem: dict[int, SmemBuffer] = field(default_factory=dict)  # id(value) -> buffer
    order: list[SmemBuffer] = field(default_factory=list)
    total_smem: int = 0
    moved_to_shared: list[Op] = field(default_factory=list)  # register tiles the plan keeps in smem
    gview: dict[int, Op] = field(default_factory=dict)  # id(gview tile) -> the global copy that defines it
    const: dict[int, Op] = field(default_factory=dict)  # id(const tile) -> the fill that defines it
    reductions: dict[int, RegReduce] = field(default_factory=dict)  # id(tile.reduce) -> its register form
    scratch_offset: int = 0  # bytes: shared scratch of the register reductions (after the buffers)
    wide: frozenset = frozenset()  # shapes whose chunks are 16 wide (wide_shapes)

    @property
    def warps(self) -> int:
        return self.threads // 32

    def width(self, shape) -> int:
        """V of the chunk loops over tiles of `shape` in this kernel (chunk_width)."""
        return chunk_width(shape, tuple(shape) in self.wide)

    def where(self, v: Value) -> str:
        if v.type.space == "global":
            return "global"
        if v.type.space == "shared":
            return "shared"
        return self.placement[id(v)]


def plan_gemm(op: Op, threads: int) -> GemmPlan:
    tiling = warp_tiling(op, {})[0]
    if tiling is not None:  # the kernel asked for this warp tiling: SIMT, as it says
        return GemmPlan("wtile", tiling=tiling)
    a, b, acc = op.operands
    (m, k), n = shape_of(a), shape_of(b)[1]
    ok = (a.type.dtype in MMA_DTYPES and b.type.dtype == a.type.dtype and acc.type.dtype == "f32"
          and m % 16 == 0 and n % 16 == 0 and k % 16 == 0 and threads % 32 == 0)
    if not ok:
        return GemmPlan("simt")
    wm, wn, fm, fn = warp_split(m // 16, n // 16, threads // 32)
    return GemmPlan("mma", m // 16, n // 16, wm, wn, fm, fn)


def make_plan(module: Module, launch: Op, threads: int) -> Plan:
    plan = Plan(threads, wide=wide_shapes(launch))
    allocs = [op for op in launch.walk() if op.name == "tile.alloc"]
    parents = _parents(launch)
    uses: dict[int, list[tuple[Op, str]]] = {id(a.result): [] for a in allocs}
    for op in launch.walk():
        if op.name == "tile.gemm":
            plan.gemms[id(op)] = plan_gemm(op, threads)
        for role, v in operand_roles(op):
            if id(v) in uses:
                uses[id(v)].append((op, role))
    for a in allocs:
        v = a.result
        if v.type.space == "shared":
            continue
        roles = uses[id(v)]
        wtile = [op for op, role in roles if role == "acc" and plan.gemms[id(op)].kind == "wtile"]
        if wtile:
            _check_wtile(plan, v, roles, wtile[0])
            plan.placement[id(v)] = "wtile"
            plan.acc_split[id(v)] = plan.gemms[id(wtile[0])]
        elif _const_ok(v, roles, parents):
            plan.placement[id(v)] = "const"
            plan.const[id(v)] = next(op for op, role in roles if role == "fill")
        elif _gview_ok(module, v, roles, parents):
            plan.placement[id(v)] = "gview"
            plan.gview[id(v)] = next(op for op, role in roles if role == "dst")
        elif _mma_ok(plan, v, roles):
            plan.placement[id(v)] = "mma"
            gemm = next(op for op, role in roles if role == "acc")
            plan.acc_split[id(v)] = plan.gemms[id(gemm)]
        elif all(_register_ok(v, op, role, plan) for op, role in roles):
            plan.placement[id(v)] = "regs"
        else:
            plan.placement[id(v)] = "shared"
            plan.moved_to_shared.append(a)
    scratch = 0
    for op in launch.walk():
        if op.name in ("tile.reduce", "tile.dot_reduce") and plan.where(op.operands[0]) == "regs":
            rr = register_reduce(shape_of(op.operands[0]), op.attrs["axis"], threads, plan.width(shape_of(op.operands[0])))
            plan.reductions[id(op)] = rr
            scratch = max(scratch, rr.scratch * SIZES[compute_dtype(op.operands[-1].type.dtype)])
    _layout(plan, launch, allocs, uses)
    if scratch:
        plan.scratch_offset = -(-plan.total_smem // SMEM_ALIGN) * SMEM_ALIGN
        plan.total_smem = plan.scratch_offset + scratch
    return plan


def _parents(launch: Op) -> dict[int, tuple[list[Op], int]]:
    """id(op) -> (the op list that holds it, its position there), for every op in `launch`."""
    out: dict[int, tuple[list[Op], int]] = {}
    for op in launch.walk():
        for region in op.regions:
            for i, inner in enumerate(region.ops):
                out[id(inner)] = (region.ops, i)
    return out


def _gview_ok(module: Module, v: Value, roles, parents) -> bool:
    """Whether register tile `v` is a *global view*: defined by one copy of a window of an input
    tensor (which the kernel never writes) and only read, by elementwise ops after that copy in
    the same op list, at least one of them broadcasting it. Those ops then read the tensor
    where they need an element (L1 and L2 serve the repeats) instead of staging the window in
    shared memory behind a barrier (a GEMV's activation row, a scale column)."""
    if v.type.space == "shared":
        return False
    defs = [op for op, role in roles if role == "dst"]
    if len(defs) != 1 or defs[0].name != "tile.copy":
        return False
    copy = defs[0]
    src = copy.operands[0]
    args = module.func.body.args
    outputs = {id(args[i]) for i in module.func.attrs.get("outputs", [])}
    if src.type.space != "global" or id(src) in outputs or set(copy.attrs) - {"src_offsets", "checked", "src_steps"}:
        return False
    readers = [op for op, role in roles if op is not copy]
    if not readers or any(role not in ("in", "bcast") or op.name not in ("tile.elementwise", "tile.dot_reduce")
                          for op, role in roles if op is not copy):
        return False
    if not any(role == "bcast" for _, role in roles):
        return False
    ops, at = parents[id(copy)]
    return all(parents[id(r)][0] is ops and parents[id(r)][1] > at for r in readers)


def _const_ok(v: Value, roles, parents) -> bool:
    """Whether register tile `v` holds one value: defined by a single fill without `axis` (not an
    iota) and only read, by elementwise ops after the fill in the same op list (so the fill's
    value, a number or a runtime integer, is in scope wherever it is read)."""
    fills = [op for op, role in roles if role == "fill"]
    if len(fills) != 1 or "axis" in fills[0].attrs:
        return False
    readers = [op for op, role in roles if op is not fills[0]]
    if not readers or any(role not in ("in", "bcast") or op.name != "tile.elementwise"
                          for op, role in roles if op is not fills[0]):
        return False
    ops, at = parents[id(fills[0])]
    return all(parents[id(r)][0] is ops and parents[id(r)][1] > at for r in readers)


def operand_roles(op: Op):
    """(role, value) for every tile operand of `op`."""
    if op.name == "tile.fill":
        yield "fill", op.operands[0]
    elif op.name == "tile.copy":
        yield "src", op.operands[0]
        yield "dst", op.operands[1]
    elif op.name == "tile.elementwise":
        out = op.operands[-1]
        for v in op.operands[:-1]:
            yield ("in" if shape_of(v) == shape_of(out) else "bcast"), v
        yield "out", out
    elif op.name == "tile.reduce":
        yield "rsrc", op.operands[0]
        yield "rdst", op.operands[1]
    elif op.name == "tile.dot_reduce":  # a's chunks folded in place; b read per chunk as an elementwise input
        a, b, dst = op.operands
        yield "rsrc", a
        yield ("in" if shape_of(b) == shape_of(a) else "bcast"), b
        yield "rdst", dst
    elif op.name == "tile.reshape":  # a thread reads elements other threads wrote: src in shared
        yield "rshape", op.operands[0]
        yield "out", op.operands[1]
    elif op.name == "tile.peer_copy":  # reads the peer's instance: no constraint on the local tile
        yield "peer", op.operands[0]
        yield "dst", op.operands[1]
    elif op.name == "tile.peer_store":  # writes the peer's instance
        yield "in", op.operands[0]
        yield "peer", op.operands[1]
    elif op.name == "tile.gemm":
        yield "a", op.operands[0]
        yield "b", op.operands[1]
        yield "acc", op.operands[2]
    else:
        for v in op.operands:
            yield "other", v


def _mma_ok(plan: Plan, v: Value, roles) -> bool:
    accs = [op for op, role in roles if role == "acc"]
    if not accs or any(plan.gemms[id(op)].kind != "mma" for op in accs):
        return False
    for op, role in roles:
        if role == "fill" or role == "acc":
            continue
        if role == "src" and op.operands[1].type.space in ("global", "shared"):
            continue
        return False
    return True


def _check_wtile(plan: Plan, v: Value, roles, gemm: Op) -> None:
    """Raise a located TkError unless accumulator `v` of warp-tiled gemm `gemm` can stay in the
    threads' registers (module docstring, `wtile`)."""
    fix = ("store it (`C[...] = acc`) or copy it to shared memory (`s = shared(acc)`) and compute on that, or "
           "drop the `with` clause")
    if v.type.dtype not in ("f32", "f64"):
        raise error(gemm.loc, f"the CUDA backend's warp-tiled gemm needs an f32 or f64 accumulator; `{v}` is "
                    f"{v.type.dtype}", "accumulate in f32 and cast after the loop")
    tiling = plan.gemms[id(gemm)].tiling
    for op, role in roles:
        if role == "fill" or (role == "src" and op.operands[1].type.space in ("global", "shared")):
            continue
        if role == "acc" and plan.gemms[id(op)].kind == "wtile" and plan.gemms[id(op)].tiling == tiling:
            continue
        raise error(gemm.loc, f"the warp tiling keeps `{v}` in the registers of the threads that computed it, "
                    f"but `{op.name}` at {op.loc.file}:{op.loc.line}:{op.loc.col} uses it another way",
                    f"a warp-tiled accumulator is only filled, accumulated into by gemms with the same tiling and "
                    f"copied out: {fix}")


def _transposed_ok(plan: Plan, v: Value, uses) -> bool:
    """Whether shared tile `v` is stored transposed: the A operand of a warp-tiled gemm, written
    only by copies (a tile.copy or tile.peer_copy destination) and fills."""
    if len(shape_of(v)) != 2:
        return False
    wtile_a = [op for op, role in uses if role == "a" and op.name == "tile.gemm" and plan.gemms[id(op)].kind == "wtile"]
    others = [(op, role) for op, role in uses if not (role == "a" and any(op is g for g in wtile_a))]
    return bool(wtile_a) and all(role in ("dst", "fill") for _, role in others)


def _swizzle(plan: Plan, v: Value, uses) -> tuple[int, int, int] | None:
    """(W, C, R) of transposed tile `v`'s XOR swizzle (module docstring), or None where it does
    not apply: 4-byte elements, a row count (the pitch) that is a multiple of 32, C = columns / W
    chunks per row a power of two from 2 to 16, and every reading gemm's TM a power of two no
    larger than R = 32 / C."""
    rows, cols = shape_of(v)
    width = plan.width(shape_of(v))
    if SIZES[v.type.dtype] != 4 or rows % 32 or cols % width:
        return None
    chunks = cols // width
    if chunks not in (2, 4, 8, 16):
        return None
    run = 32 // chunks
    tms = [plan.gemms[id(op)].tiling.tm for op, role in uses if role == "a" and op.name == "tile.gemm"]
    if any(tm & (tm - 1) or tm > run for tm in tms):
        return None
    return width, chunks, run


def _register_ok(v: Value, op: Op, role: str, plan: Plan) -> bool:
    if role in ("fill", "src", "dst", "in", "out"):
        return True
    if role == "rsrc":
        return register_reduce(shape_of(v), op.attrs["axis"], plan.threads, plan.width(shape_of(v))) is not None
    return role == "acc" and plan.gemms[id(op)].kind == "simt"


MAX_REDUCE_REGS = 128  # elements per thread of a register tile that a reduction reads in place


@dataclass(frozen=True)
class RegReduce:
    """How a reduction reads its source where it lives, in the threads' registers (chunk layout,
    module docstring): `rows` along the last axis (`group` consecutive chunks per output: xor
    shuffles over the largest power of two up to 32 that divides the group, then, where that
    leaves several partials per output (a group that spans warps or is not a power of two, as a
    48-wide row in chunks of 8), `slots` of them per output in shared scratch), or `cols` along
    axis 0 (each thread keeps one chunk's columns: `group` chunks per row divides the thread
    count; threads with the same columns combine by xor shuffles over the lanes `group` apart
    where the group is a power of two below 32, then `slots` partials per column meet in shared
    scratch when more than one warp, or group of threads, holds them). The partials in scratch
    are combined by up to 32 threads per output (`merge_lanes`)."""

    kind: str  # rows | cols
    group: int  # chunks per reduced row (rows) or per row of the source (cols)
    slots: int  # partial results per output in shared scratch (1: none)
    scratch: int  # scratch elements


def shuffle_width(group: int) -> int:
    """Lanes that combine a `rows` reduction's partials by xor shuffles: the largest power of two
    that divides `group`, at most 32 (a warp)."""
    return min(group & -group, 32)


def merge_lanes(n_out: int, slots: int, threads: int) -> int:
    """Threads per output that combine `slots` scratch partials of each of `n_out` outputs: a power
    of two, at most 32, at most the slots, and no more than `threads` spread over the outputs."""
    lanes = 1
    while lanes < 32 and lanes * 2 <= slots and n_out * lanes * 2 <= threads:
        lanes *= 2
    return lanes


def register_reduce(shape, axis: int, threads: int, v: int | None = None) -> RegReduce | None:
    """The register form of a reduction of a `shape` register tile along `axis` (chunks of `v`,
    default chunk_width(shape)), or None when the source must be staged in shared memory."""
    shape = tuple(shape)
    v = v or chunk_width(shape)
    n = numel(shape)
    if threads % 32 or -(-n // threads) > MAX_REDUCE_REGS:
        return None
    if axis == len(shape) - 1:
        g = shape[-1] // v
        n_out = n // shape[-1]
        slots = g // shuffle_width(g)
        return RegReduce("rows", g, slots, n_out * slots if slots > 1 else 0)
    if axis != 0:
        return None
    inner = n // shape[0]
    g = inner // v
    if threads % g:
        return None
    n_ch = n // v
    if g < 32 and g & (g - 1) == 0:  # lanes g apart share columns: after the shuffles, one partial per warp
        slots = min(threads // 32, -(-n_ch // 32))
    else:  # no lanes combine by shuffles: one partial per group of g threads with chunks
        slots = min(threads // g, -(-n_ch // g))
    return RegReduce("cols", g, slots, inner * slots if slots > 1 else 0)


def _pitch(v: Value, uses) -> int:
    """Row pitch in elements: rows of tensor-core operand tiles that are an even number of 16-byte
    units long get 16 bytes of padding, so that the 8 rows an ldmatrix reads fall in different
    banks."""
    shape, size = shape_of(v), SIZES[v.type.dtype]
    last = shape[-1]
    mma_operand = any(role in ("a", "b") and plan_kind == "mma" for role, plan_kind in uses)
    if mma_operand and len(shape) >= 2 and (last * size) % 32 == 0:
        return last + 16 // size
    return last


def _lifetimes(launch: Op) -> dict[int, tuple[int, int]]:
    """id(value) -> (first, last) position of the ops that use it in program order; a value used
    inside a loop lives from the loop's start to its end (it may carry data between iterations)."""
    spans: dict[int, list[int]] = {}
    pos = 0

    def visit(ops: list[Op], loops: list[tuple[int, list[int]]]) -> None:
        nonlocal pos
        for op in ops:
            pos += 1
            if op.name == "tile.for":
                here = (pos, [])
                visit(op.body.ops, loops + [here])
                for vid in here[1]:
                    spans[vid] = [min(spans[vid][0], here[0]), max(spans[vid][1], pos)]
                continue
            for v in op.operands:
                span = spans.setdefault(id(v), [pos, pos])
                span[1] = pos
                for _, members in loops:
                    members.append(id(v))

    visit(launch.body.ops, [])
    # A tile the cluster's other blocks read or write through DSMEM is in use until the last
    # cluster barrier, not only until this block's last op on it: reusing its bytes earlier
    # (a register tile kept in shared memory, placed over it) let the peer read the new data
    # (a generated program through `cuda` on an H200, tests/fuzz_regressions/dsmem_bytes_reused.tk).
    for vid in peer_tiles(launch):
        if vid in spans:
            spans[vid][1] = pos
    return {k: (a, b) for k, (a, b) in spans.items()}


def _layout(plan: Plan, launch: Op, allocs: list[Op], uses) -> None:
    """Offsets of the shared buffers: biggest first, each at the lowest 128-byte aligned offset
    whose bytes no buffer with an overlapping lifetime holds."""
    life = _lifetimes(launch)
    bufs = []
    for a in allocs:
        v = a.result
        if plan.where(v) != "shared":
            continue
        kinds = [(role, plan.gemms[id(op)].kind if op.name == "tile.gemm" else "") for op, role in uses[id(v)]]
        if _transposed_ok(plan, v, uses[id(v)]):
            bufs.append(SmemBuffer(v, shape_of(v)[0], int(a.attrs.get("stages", 1)), transposed=True,
                                   swizzle=_swizzle(plan, v, uses[id(v)])))
            continue
        bufs.append(SmemBuffer(v, _pitch(v, kinds), int(a.attrs.get("stages", 1))))
    order = sorted(range(len(bufs)), key=lambda i: (-bufs[i].nbytes, i))
    placed: list[SmemBuffer] = []
    for i in order:
        buf = bufs[i]
        lo, hi = life.get(id(buf.value), (0, 0))
        size = -(-buf.nbytes // SMEM_ALIGN) * SMEM_ALIGN
        taken = sorted((p.offset, p.offset + p.nbytes) for p in placed
                       if not (life.get(id(p.value), (0, 0))[1] < lo or hi < life.get(id(p.value), (0, 0))[0]))
        offset = 0
        for start, end in taken:
            if offset + size <= start:
                break
            offset = max(offset, -(-end // SMEM_ALIGN) * SMEM_ALIGN)
        buf.offset = offset
        placed.append(buf)
    for buf in bufs:  # declaration order: program order
        plan.smem[id(buf.value)] = buf
        plan.order.append(buf)
    plan.total_smem = max((b.offset + b.nbytes for b in bufs), default=0)


def smem_diagnostic(plan: Plan, launch: Op, kernel: str, limit: int, target: str) -> Diagnostic | None:
    """The located error for a plan over `limit` bytes per block (None when it fits): every
    shared buffer with its bytes, row pitch and stages, the register tiles kept in shared
    memory, and a fix. Raised by check-smem-fit{backend=cuda} and by the backend itself."""
    if plan.total_smem <= limit:
        return None
    notes = [f"`{b.value}` {b.value.type}: {b.nbytes} bytes (row pitch {b.pitch}, {b.slots} stage"
             f"{'s' * (b.slots != 1)})" for b in sorted(plan.order, key=lambda b: -b.nbytes)]
    if any(r.scratch for r in plan.reductions.values()):
        notes.append(f"reductions' scratch: {plan.total_smem - plan.scratch_offset} bytes after the buffers")
    moved = ", ".join(f"`{a.result}`" for a in plan.moved_to_shared)
    if moved:
        notes.append(f"the CUDA backend keeps register tiles {moved} in shared memory because reductions, "
                     "broadcasts or gemm operands read them across threads")
    notes.append("fix: use smaller tiles (e.g. `-D BM=...`) or fewer pipeline stages")
    return Diagnostic(launch.loc, f"kernel `{kernel}` needs {plan.total_smem} bytes of shared memory per block on the "
                      f"CUDA backend; limit is {limit} on {target}", notes)

"""The shared memory that TileLang 0.1.15 gives a kernel of the `tilelang` backend, per block.

codegen/tilelang.py declares every shared tile with `T.alloc_shared` (scope `shared.dyn`) at the
top of the kernel; TileLang then merges them into one dynamic buffer whose size is passed at
launch. This module computes that size from the final tile IR, step by step as TileLang does
(its `src/transform/merge_shared_memory_allocations.cc`, shipped in the wheel):

1. **versions**: a tile staged in a pipelined loop (`stages` on its alloc, set by
   `software-pipeline`) gets one copy per stage from `T.Pipelined(..., num_stages)`; the backend
   emits `num_stages=0` (one copy) when a global row in the loop is not 4-byte aligned
   (`async_copy_ok`).
2. **lifetimes**: TileLang's liveness runs over the kernel body's statements; a tile used inside
   a loop is live through that whole top-level statement. So a tile lives from the first to the
   last top-level op that touches it, as the half-open interval [first, last + 1) (a tile the
   cluster's peers access lives to the kernel's end: the backend mentions it after the last
   cluster barrier, so that no later buffer takes the bytes the peers use); the body of a
   loop of one trip counts as top-level ops (TileLang inlines it; a pipelined one issues its
   global -> shared copies first). A tile nothing touches gets no bytes.
3. **alignment**: 16 bytes, and 1024 for the shared operands of a gemm TileLang lowers to
   Hopper's wgmma (their descriptors need the 128-byte swizzle's alignment): `T.gemm` on f16/bf16
   tiles with f32 accumulation, M >= 64 and a multiple of 4 warps (`gemm_instruction`).
4. **packing** (`LinearScanPack`): tiles in order of their first use (larger first on ties) take
   the best-fitting free block of bytes that earlier tiles no longer need, else grow the arena
   at its end; the total is the arena rounded up to 16 bytes. One shared tile alone is not
   merged: its bytes are the total.

The result (`plan`) lists each tile's bytes, offset and lifetime; check-smem-fit reports it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from dsl import exprs
from dsl.ir import Op, Value
from dsl.ops import peer_tiles
from dsl.types import DTYPES

ALIGN = 16  # bytes: TileLang's default alignment of merged shared buffers
WGMMA_ALIGN = 1024  # bytes: shared operands of wgmma (descriptor, 128-byte swizzle)
MMA_MIN = (16, 16, 16)  # smallest tile T.gemm takes on tensor cores (per dim M, N, K), TileLang 0.1.15


def row_extent(v: Value) -> int | None:
    """The last extent of `v`, None when it is a dynamic dim (its alignment is unknown)."""
    last = v.type.shape[-1]
    return None if exprs.names(last) else exprs.evaluate(last, {})


def async_copy_ok(loop: Op) -> bool:
    """Whether every global->shared copy in `loop` moves 4-byte-aligned rows: the tensor's row
    and the tile's row a multiple of 4 bytes. TileLang 0.1.15 lowers copies in a pipelined loop
    to cp.async whatever `tl.enable_async_copy` says, and fails in its CUDA codegen on a 2-byte
    one (miss.tk at K=17 on an H200, 2026-11-21)."""
    for inner in loop.walk():
        if inner.name != "tile.copy" or inner.operands[0].type.space != "global":
            continue
        for v in inner.operands:
            if v.type.rank and (row_extent(v) or 1) * DTYPES[v.type.dtype][0] % 4:
                return False
    return True


def mma_fits(m: int, n: int, k: int, threads: int) -> bool:
    """Whether T.gemm takes an m x n x k tile on tensor cores with `threads` threads (TileLang
    0.1.15, sm_80/sm_90): k % 16 == 0 and a split of the block's warps in which every warp owns
    a multiple of 16 rows and 8 columns (16 columns when wgmma is chosen: m >= 64)."""
    if k % 16:
        return False
    warps = max(1, threads // 32)
    col = 16 if m >= 64 else 8
    return any(warps % wm == 0 and m % (16 * wm) == 0 and n % (col * (warps // wm)) == 0
               for wm in range(1, warps + 1))


def gemm_instruction(op: Op, threads: int) -> str:
    """How codegen/tilelang.py and TileLang run `tile.gemm` `op` on sm_90: `simt` (a loop nest
    the backend writes: operands that are not f16/bf16 tiles in shared memory with an f32
    accumulator, or a shape `mma_fits` rejects), `wgmma` (T.gemm with M >= 64 and whole warp
    groups: TileLang's `AllowWgmma`) or `mma` (T.gemm on mma.sync)."""
    a, b, acc = op.operands
    if a.type.dtype not in ("f16", "bf16") or b.type.dtype != a.type.dtype or acc.type.dtype != "f32":
        return "simt"
    if a.type.space != "shared" or b.type.space != "shared":
        return "simt"
    (m, k), n = a.type.concrete_shape({}), b.type.concrete_shape({})[1]  # after `tile`
    return tensor_core_instruction(m, n, k, threads)


def tensor_core_instruction(m: int, n: int, k: int, threads: int) -> str:
    """How T.gemm runs an m x n x k tile of f16/bf16 shared operands with an f32 accumulator and
    `threads` threads: `wgmma`, `mma`, or `simt` where `mma_fits` rejects the shape."""
    if not mma_fits(m, n, k, threads):
        return "simt"
    return "wgmma" if m >= 64 and (threads // 32) % 4 == 0 else "mma"


def thread_reduce(op: Op, threads: int) -> bool:
    """Whether codegen/tilelang.py lowers reduce `op` to TileLang's `T.reduce_*` (each thread
    combines the elements it holds, then the threads that share an output element combine over
    warp shuffles) rather than a serial loop over the axis: register tiles of one float dtype,
    at least 2-d, power-of-two extents and thread count. TileLang 0.1.15 combines threads with
    XOR shuffles over power-of-two groups; its lowering fails (no layout, or a non-power-of-two
    shuffle width) for 96 threads, a last axis of 24, 40, 48 or 96 elements, or 96 columns
    summed over rows by 32 threads (swept on the CPU: 1-64 rows, 1-4096 columns, 32-1024
    threads, f16 and f32, both axes). A layout TileLang still cannot find (a small accumulated
    tile whose replicas do not match the reduction's) falls back to the serial form at compile
    time (tkc/runtime.py)."""
    src, dst = op.operands
    if (len(src.type.shape) < 2 or src.type.dtype != dst.type.dtype or dst.type.dtype not in ("f16", "bf16", "f32", "f64")
            or src.type.space not in ("frag", "local") or dst.type.space not in ("frag", "local")):
        return False
    try:
        shape = src.type.concrete_shape({})
    except exprs.ExprError:  # not tiled yet
        return False
    return _pow2(threads) and all(_pow2(n) for n in shape)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


STAGED_LANES = 32  # lanes per row of a staged reduction: one warp's XOR shuffles
REGISTERS_SHARED_MAX = 64 * 1024  # bytes: the largest launch `registers_in_shared` moves to shared memory


def staged_reduce(op: Op, threads: int) -> bool:
    """Whether codegen/tilelang.py lowers reduce `op` in stages through a shared copy of its
    source ([R, E]): along the last axis, where the row's width is not a power of two, STAGED_LANES
    lanes per row each combine the elements l, l + 32, l + 64, ... of it into a [R, 32] register
    tile, which `T.reduce_*` combines over the lanes; along axis 0, where the kept columns are not
    a power of two, 32 lanes per column each combine the rows l, l + 32, ... into an [E, 32]
    register tile, reduced the same way. For the rows and columns `thread_reduce` cannot take:
    rmsnorm at N = 768 (a serial loop per row made the kernel 40x slower than torch on an H100),
    attention's p-weighted V at 48-wide heads (TileLang found no layout for the serial form's
    48 columns over 512 threads, and its fallback gave every thread the whole [256, 48] tile:
    5.1 ms against torch's 21.6 us at position 1023 on an H100). A 2-d register tile of one float
    dtype: reduced along its last axis, at least 32 wide, with power-of-two rows; or along axis
    0, at least 32 rows; power-of-two threads."""
    src, dst = op.operands
    if (len(src.type.shape) != 2 or op.attrs.get("axis") not in (0, 1) or src.type.dtype != dst.type.dtype
            or dst.type.dtype not in ("f16", "bf16", "f32", "f64")
            or src.type.space not in ("frag", "local") or dst.type.space not in ("frag", "local")):
        return False
    try:
        rows, width = src.type.concrete_shape({})
    except exprs.ExprError:
        return False
    if op.attrs["axis"] == 0:
        return _pow2(threads) and rows >= STAGED_LANES and not _pow2(width)
    return _pow2(threads) and _pow2(rows) and width >= STAGED_LANES and not _pow2(width)


def shared_vector(t) -> bool:
    """Whether a register tile of type `t` is a row or column vector (2-d, one extent 1, more than
    one element): what `vectors_in_shared` declares shared."""
    try:
        shape = t.concrete_shape({})
    except exprs.ExprError:
        return False
    return t.space in ("frag", "local") and len(shape) == 2 and 1 in shape and shape[0] * shape[1] > 1


def vectors_in_shared(launch: Op, threads: int) -> bool:
    """Whether codegen/tilelang.py declares the row and column vectors among `launch`'s register
    tiles (`shared_vector`) with `T.alloc_shared`, where `registers_in_shared` does not take the
    whole launch: a staged reduction of a tile of more than one row and column, and no gemm,
    reshape or cluster. TileLang 0.1.15 found no layout for decode attention at 48-wide heads
    (the [1, 48] query and accumulator rows over 512 threads) and, once those were shared, carried
    the [256, 1] score column's layout (one row per 32 lanes, from its staged reduction) into the
    [256, 48] tiles that broadcast it, 768 elements per thread where 24 suffice; with both kinds of
    vector shared, the [256, 48] tiles take 24 per thread (lowered on the CPU)."""
    if launch.attrs.get("cluster") or "tiles" in launch.attrs or registers_in_shared(launch, threads):
        return False
    staged = False
    for op in launch.walk():
        if op.name in ("tile.gemm", "tile.sampled_gemm", "tile.reshape", "tile.peer_copy", "tile.peer_store"):
            return False
        if op.name == "tile.reduce" and not thread_reduce(op, threads) and staged_reduce(op, threads):
            staged = staged or min(op.operands[0].type.concrete_shape({})) > 1
    return staged


def registers_in_shared(launch: Op, threads: int) -> bool:
    """Whether codegen/tilelang.py declares every register tile of `launch` with `T.alloc_shared`:
    a launch with a staged reduction over more than one row (and no gemm, thread reduction,
    reshape or cluster). The staged reduction's [R, 1] result has one row per 32 lanes, and
    TileLang 0.1.15 carried that layout into every elementwise loop that broadcasts it, so one
    or two threads computed a whole row (rmsnorm at N = 768 with two rows per block: each of the
    1024 threads held `float x[768]`, 90-103 us on an H100 where torch took 2.8-3.4). Shared tiles
    have no thread layout: every loop over them is split across the block. Only while all of the
    launch's tiles together take at most REGISTERS_SHARED_MAX bytes: `plan` counts them without
    reuse (TileLang merges adjacent loops under equal thread guards into one statement and the
    lifetimes of their tiles with them; modeling lifetimes per statement undercounted rmsnorm at
    N = 768 by 3 KiB), an upper bound (1.6x rmsnorm's bytes at N = 768, 4.4x softmax's 16 rows of 72)
    that stays under REGISTERS_SHARED_MAX, so it never rejects a kernel the fragments would run."""
    if launch.attrs.get("cluster") or "tiles" in launch.attrs:
        return False
    staged, nbytes = False, 0
    for op in launch.walk():
        if op.name in ("tile.gemm", "tile.sampled_gemm", "tile.reshape", "tile.peer_copy", "tile.peer_store"):
            return False
        if op.name == "tile.alloc":
            nbytes += op.result.type.nbytes({}) * int(op.attrs.get("stages", 1))
        if op.name == "tile.reduce":
            if thread_reduce(op, threads):
                return False
            if staged_reduce(op, threads):
                nbytes += staged_bytes(op)
                staged = staged or (op.attrs["axis"] == 1 and op.operands[0].type.concrete_shape({})[0] > 1)
    return staged and nbytes <= REGISTERS_SHARED_MAX


STORE_BUFFERS = 2  # copies of a rotating store tile (`rotating_stores`)


def rotating_stores(launch: Op) -> dict[int, Op]:
    """id(shared tile) -> the pipelined loop whose trips codegen/tilelang.py rotates it over: a shared tile that only stages a
    store (`C[...] = shared(...)`, examples/miss_split.tk's STAGE_C = 1) in the body of a
    pipelined loop, written from a register tile and then stored whole to a global tensor of
    f16, bf16 or f32 with 16-byte rows. TileLang 0.1.15 lowers that store to one TMA store followed by a wait for its
    read of the tile (`cp.async.bulk.wait_group.read 0`) in every trip; with STORE_BUFFERS copies
    trip j writes copy j % STORE_BUFFERS after waiting only for the store issued STORE_BUFFERS
    trips before, so each store's read overlaps the next trip's gemm. On an H100, MiSS at M16384
    K4096 N4096 R64 went from 102.2-102.8 to 101.0-101.6 us, M8192 N11008 with U = 2 from 131 to
    110 (benchmarks/probes/miss_bandwidth/probe.py, docs/PERFORMANCE.md)."""
    if launch.attrs.get("cluster") or "tiles" in launch.attrs:
        return {}
    peers = peer_tiles(launch)
    uses: dict[int, int] = {}
    for op in launch.walk():
        if op.name != "tile.alloc":
            for v in op.operands:
                uses[id(v)] = uses.get(id(v), 0) + 1
    out: dict[int, Op] = {}
    for loop in launch.walk():
        if loop.name != "tile.for" or loop.attrs.get("kind") != "pipelined" or not async_copy_ok(loop):
            continue
        body = loop.body.ops
        for i, store in enumerate(body):
            if store.name != "tile.copy":
                continue
            tile, tensor = store.operands
            if (tile.type.space != "shared" or tensor.type.space != "global" or id(tile) in peers
                    or uses.get(id(tile)) != 2 or tile.type.dtype != tensor.type.dtype
                    or tile.type.dtype not in ("f16", "bf16", "f32")  # a float -> int store saturates elementwise
                    or any(st != 1 for st in store.attrs.get("dst_steps") or [])
                    or any("[" in str(o) for o in store.attrs.get("dst_offsets", []))):
                continue
            try:
                shape = tile.type.concrete_shape({})
            except exprs.ExprError:
                continue
            size = DTYPES[tile.type.dtype][0]
            row = row_extent(tensor)
            if row is None or row * size % 16 or shape[-1] * size % 16 or len(shape) != tensor.type.rank:
                continue
            if any(w.name == "tile.copy" and w.operands[1] is tile and w.operands[0].type.space in ("frag", "local")
                   for w in body[:i]):  # written from a register tile earlier in the trip
                out[id(tile)] = loop
    return out


STREAM_BYTES = 50 * 2**20  # L2 of an H100 or H200 (sm_90): a larger output cannot stay there


def streaming_store(tensor: Value, env: dict) -> bool | tuple[list[str], int]:
    """Whether the rotating stores (`rotating_stores`) into global `tensor` go out marked L2
    evict-first: True when the tensor holds STREAM_BYTES or more (its lines cannot all stay in L2
    for the kernel that reads it next anyway), False when it holds fewer; for a tensor with
    dynamic dims, (their expressions, n): the kernel tests at run time whether their product is
    at least n (codegen/tilelang.py, in int64). On an H100, MiSS at M16384 K4096 N4096 R64 (C 134 MB) went from
    100.0-100.1 to 99.2-99.4 us as CUDA graphs, M16384 K = N = 3072 from 77.5-77.8 to 77.0-77.2
    (benchmarks/probes/miss_bandwidth/probe.py --graph, docs/PERFORMANCE.md)."""
    fixed, dynamic = DTYPES[tensor.type.dtype][0], []
    for d in tensor.type.shape:
        try:
            fixed *= exprs.evaluate(d, env)
        except exprs.ExprError:
            dynamic.append(exprs.to_str(d))
    if not dynamic:
        return fixed >= STREAM_BYTES
    at_least = -(-STREAM_BYTES // max(fixed, 1))
    return dynamic, at_least


def staged_pitch(op: Op) -> int:
    """The row length (elements) of staged reduce `op`'s shared copy of its [R, E] source: E for a
    row sum; for a column sum, where each of 32 lanes reads its own row at one column, E padded
    until a row is an odd number of 4-byte words (48 f32 -> 49, 48 f16 -> 50; one element for
    8-byte dtypes), so the lanes' reads fall in 32 banks (48 f32 put them in 2: 16-way conflicts)."""
    rows, width = op.operands[0].type.concrete_shape({})
    if op.attrs.get("axis") != 0:
        return width
    size = DTYPES[op.operands[0].type.dtype][0]
    if size > 4:  # rows of 8-byte words are an even number of 4-byte words: one element of padding
        return width + 1
    pitch = width
    while (pitch * size) % 4 or (pitch * size // 4) % 2 == 0:
        pitch += 1
    return pitch


def staged_bytes(op: Op) -> int:
    """The shared bytes of staged reduce `op`'s [R, E] copy of its source (`staged_pitch` per row)."""
    rows, _ = op.operands[0].type.concrete_shape({})
    return rows * staged_pitch(op) * DTYPES[op.operands[0].type.dtype][0]


def reduce_threads(op: Op, threads: int, inherited: bool = False) -> set[int]:
    """The threads that hold elements of the first output element of thread reduce `op`, under
    TileLang's partition of the source tile: row-major vectors of up to 16 bytes along the last
    axis, dealt round-robin to the block's threads. A tile with fewer vectors than threads
    takes the first threads, one vector each, unless its layout is `inherited` from an earlier
    reduction's replicated result (`replicated_tiles`): TileLang then combines over the whole
    block."""
    src = op.operands[0]
    shape = src.type.concrete_shape({})
    size = DTYPES[src.type.dtype][0]
    total = 1
    for n in shape:
        total *= n
    vec = max(1, min(16 // size, shape[-1], total // threads))  # powers of two (thread_reduce)
    if total // vec < threads and inherited:
        return set(range(threads))
    active = min(threads, total // vec)
    axis = op.attrs["axis"]
    stride = 1
    for n in shape[axis + 1:]:
        stride *= n
    return reduce_lanes(shape[axis], stride, vec, active)


def reduce_lanes(n: int, stride: int, vec: int, active: int) -> set[int]:
    """{(k * stride // vec) % active for k in range(n)}: the threads holding the elements k *
    stride of a reduced axis of n, vectors of `vec` dealt to `active` threads. The set repeats
    after k = active * vec (k * stride // vec grows by active * stride there), so at most that
    many are visited: a reduction over a dim of 10^12 is not a loop of 10^12."""
    return {(k * stride // vec) % active for k in range(min(n, active * vec))}


def replicated_tiles(launch: Op, threads: int) -> set[int]:
    """ids of the register tiles whose TileLang layout comes from a thread reduction's result
    (its replicas), directly or through elementwise ops."""
    out: set[int] = set()
    for op in launch.walk():
        if op.name == "tile.reduce" and thread_reduce(op, threads):
            out.add(id(op.operands[1]))
        elif op.name == "tile.elementwise" and any(id(v) in out for v in op.operands[:-1]):
            out.add(id(op.operands[-1]))
    return out


def reduce_workspace(op: Op, threads: int, inherited: bool = False) -> int:
    """Shared bytes TileLang gives thread reduce `op`: when the threads that combine lie in more
    than one warp, they exchange partial results through one element per thread of the block."""
    if len({t // 32 for t in reduce_threads(op, threads, inherited)}) <= 1:
        return 0
    return threads * DTYPES[op.operands[1].type.dtype][0]


@dataclass
class TlBuffer:
    """One shared tile in TileLang's merged buffer (or a reduction's workspace: `alloc` is then
    the `tile.reduce` op)."""

    alloc: Op
    nbytes: int  # one copy
    versions: int  # copies (pipeline stages)
    align: int
    start: int  # first top-level op that touches it
    end: int  # one past the last
    offset: int = 0

    @property
    def workspace(self) -> bool:
        return self.alloc.name == "tile.reduce"

    @property
    def size(self) -> int:
        return self.nbytes * self.versions


@dataclass
class TlPlan:
    buffers: list[TlBuffer]  # program order
    total: int  # bytes of dynamic shared memory per block


def plan(launch: Op, env: dict[str, int]) -> TlPlan:
    """TileLang's shared-memory layout of `launch` (see the module docstring); shapes are
    evaluated under `env`."""
    threads = exprs.evaluate(exprs.parse(str(launch.attrs.get("threads", "128"))), env)
    everything = registers_in_shared(launch, threads)  # then every tile lives through the kernel
    spaces = ("shared", "frag", "local") if everything else ("shared",)
    vectors = not everything and vectors_in_shared(launch, threads)
    allocs = [op for op in launch.walk() if op.name == "tile.alloc"
              and (op.result.type.space in spaces or (vectors and shared_vector(op.result.type)))]
    inherited = replicated_tiles(launch, threads)
    work = {}  # id(thread reduce) -> (the op, its workspace bytes), for those that need one
    for op in launch.walk():
        if op.name == "tile.reduce" and thread_reduce(op, threads):
            nbytes = reduce_workspace(op, threads, id(op.operands[0]) in inherited)
            if nbytes:
                work[id(op)] = (op, nbytes)
        elif op.name == "tile.reduce" and staged_reduce(op, threads):  # its shared copy of the rows
            work[id(op)] = (op, staged_bytes(op))
    if not allocs and not work:
        return TlPlan([], 0)
    ids = {id(a.result): a for a in allocs}
    spans: dict[int, list[int]] = {}
    versions: dict[int, int] = {}
    align: dict[int, int] = {}
    pos = -1
    for pos, top in enumerate(_statements(launch.body.ops, env)):
        for op in top.walk():
            if op.name == "tile.for" and op.attrs.get("kind") == "pipelined" and not async_copy_ok(op):
                for inner in op.walk():  # num_stages=0: one copy of each staged tile
                    versions.update({id(v): 1 for v in inner.operands if id(v) in ids})
            if op.name == "tile.gemm" and gemm_instruction(op, threads) == "wgmma":
                align.update({id(v): WGMMA_ALIGN for v in op.operands[:2]})
            for v in op.operands:
                if id(v) in ids:
                    span = spans.setdefault(id(v), [pos, pos + 1])
                    span[1] = pos + 1
            if id(op) in work:  # live through the top-level statement that holds the reduction
                spans[id(op)] = [pos, pos + 1]
    # A tile the cluster's peers access through DSMEM lives to the end of the kernel: the
    # backend mentions it after the last cluster barrier (codegen/tilelang.py `keep_peer_tiles`).
    end = pos + 2  # the statement after the last one
    for vid in peer_tiles(launch):
        if vid in spans:
            spans[vid][1] = end
    if everything:  # TileLang merges their loops, and the tiles' lifetimes with them: a bound
        spans = {k: [0, end] for k in spans}
    else:  # codegen/tilelang.py rotates these (not in a launch of shared register tiles)
        versions.update({vid: STORE_BUFFERS for vid in rotating_stores(launch)})
        if vectors:  # shared row and column vectors: counted through the whole kernel, a bound
            for a in allocs:
                if shared_vector(a.result.type) and id(a.result) in spans:
                    spans[id(a.result)] = [0, end]
    bufs = [TlBuffer(a, a.result.type.nbytes(env), versions.get(id(a.result), int(a.attrs.get("stages", 1))),
                     align.get(id(a.result), ALIGN), *spans[id(a.result)])
            for a in allocs if id(a.result) in spans]
    bufs += [TlBuffer(op, n, 1, ALIGN, *spans[k]) for k, (op, n) in work.items()]
    return TlPlan(bufs, pack(bufs, len(allocs) + len(work)))


def _statements(ops: list[Op], env: dict[str, int]):
    """The kernel body's top-level statements as TileLang sees them: a loop of one trip is no
    loop (TileLang's simplification inlines its body), so its ops are statements themselves."""
    for op in ops:
        if op.name == "tile.alloc":
            continue
        if op.name != "tile.for" or _trips(op, env) != 1:
            yield op
        elif op.attrs.get("kind") == "pipelined":  # its loads are issued first (stage 0 of the pipeline)
            body = list(_statements(op.body.ops, env))
            yield from [o for o in body if _load(o)] + [o for o in body if not _load(o)]
        else:
            yield from _statements(op.body.ops, env)


def _load(op: Op) -> bool:
    """A global -> shared copy (a load a pipelined loop issues ahead)."""
    return op.name == "tile.copy" and op.operands[0].type.space == "global" and op.operands[1].type.space == "shared"


def _trips(loop: Op, env: dict[str, int]) -> int | None:
    try:
        return exprs.evaluate(exprs.parse(f"({loop.attrs['hi']}) - ({loop.attrs['lo']})"), env)
    except exprs.ExprError:  # a dynamic bound
        return None


def pack(bufs: list[TlBuffer], n_allocs: int) -> int:
    """Bytes of the merged buffer of `bufs` (of `n_allocs` shared allocations in all); sets
    every buffer's offset. One allocation alone is not merged: its bytes, unaligned."""
    if n_allocs == 1:
        return bufs[0].size if bufs else 0
    return _up(_linear_scan(bufs), ALIGN)


def _linear_scan(bufs: list[TlBuffer]) -> int:
    """TileLang's LinearScanPack: sets every buffer's offset; returns the arena's size."""
    order = sorted(range(len(bufs)), key=lambda i: (bufs[i].start, -bufs[i].size, i))
    active: list[tuple[int, int, int]] = []  # (end, offset, size)
    free: list[list[int]] = []  # sorted, coalesced [offset, size] blocks
    top = 0
    for i in order:
        buf = bufs[i]
        while active and active[0][0] <= buf.start:
            _, off, size = heapq.heappop(active)
            _free(free, off, size)
        off = _best_fit(free, buf.size, buf.align)
        if off is None and free and sum(free[-1]) == top and _up(free[-1][0], buf.align) < top:
            off = _up(free[-1][0], buf.align)  # grow the free block at the arena's end
            head = off - free[-1][0]
            del free[-1]
            _free(free, off - head, head)
            top = off + buf.size
        elif off is None:
            off = _up(top, buf.align)
            _free(free, top, off - top)
            top = off + buf.size
        buf.offset = off
        heapq.heappush(active, (buf.end, off, buf.size))
    return max((b.offset + b.size for b in bufs), default=0)


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


def _free(free: list[list[int]], off: int, size: int) -> None:
    """Return [off, off + size) to the sorted free list, merging neighbours."""
    if size <= 0:
        return
    free.append([off, size])
    free.sort()
    merged: list[list[int]] = []
    for blk in free:
        if merged and sum(merged[-1]) >= blk[0]:
            merged[-1][1] = max(sum(merged[-1]), sum(blk)) - merged[-1][0]
        else:
            merged.append(blk)
    free[:] = merged


def _best_fit(free: list[list[int]], need: int, align: int) -> int | None:
    """The aligned offset in the free block that wastes least (TileLang's FreeList.Allocate)."""
    best = None
    for i, (off, size) in enumerate(free):
        head = _up(off, align) - off
        if head > size or size - head < need:
            continue
        if best is None or size - need < free[best][1] - need:
            best = i
    if best is None:
        return None
    off, size = free.pop(best)
    at = _up(off, align)
    _free(free, at + need, size - (at - off) - need)
    _free(free, off, at - off)
    return at

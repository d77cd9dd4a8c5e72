"""The tile IR's ops, registered in one explicit table (`OPS`).

Semantics are buffer-based: `tile.alloc` defines a buffer; `tile.fill`, `tile.copy`,
`tile.elementwise`, `tile.reduce` and `tile.gemm` write their last operand in place. Index
expressions (offsets, bounds, grid sizes) are strings in the syntax of dsl/expr.lark over the
problem dims, schedule constants, grid variables and loop variables in scope. The reference
interpreter (dsl/interpreter.py) is the executable definition of each op.
"""

from __future__ import annotations

import math

from dsl import exprs
from dsl.ir import Op, format_attr
from dsl.types import FLOAT_DTYPES
from dsl.warp_tiling import warp_tiling

UNARY = ("neg", "exp", "exp2", "log", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "abs", "sqrt", "rsqrt")
# rsub(x, y) = y - x and rdiv(x, y) = y / x: a number on the left of `-` or `/` (`1.0 - t`)
BINARY = ("add", "sub", "mul", "div", "rsub", "rdiv", "pow", "max", "min")
# comparisons -> their operator in C, Python and the .tk source: binary, the output is a bool tile
# (with a `scalar`, the number is the right side)
COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
# where(cond, a, b): cond a bool tile; a select, so the branch not taken never leaks (NaN)
TERNARY = ("where",)
REDUCE = ("sum", "max", "min")
LOOP_KINDS = ("serial", "pipelined", "unroll")


def compare_dtype(ins) -> str:
    """The dtype a comparison of tiles `ins` compares in: f64 if one is f64, else f32 (both sides
    converted first; every backend and the interpreter follow it)."""
    return "f64" if any(v.type.dtype == "f64" for v in ins) else "f32"


def _shape(v, env):
    return v.type.concrete_shape(env)


def _broadcasts(shape, out) -> bool:
    """Whether `shape` broadcasts to `out` as numpy does: trailing dims align, a dim is equal or
    1, and `shape` may have a lower rank."""
    return len(shape) <= len(out) and all(a == b or a == 1 for a, b in zip(shape, out[len(out) - len(shape):]))


class FuncOp(Op):
    """A kernel. Region 0 has one block argument per global tensor (inputs, then outputs).

    Attributes: `sym_name` (kernel name), `dims` (problem dims -> int, the compile is
    specialized on them), `consts` (schedule constants -> int), `outputs` (indices of the
    arguments the kernel writes), `reference` (the torch expression that defines the result),
    optional `static` (constants that chose a branch of a static `if` during lowering), optional
    `scalars` (runtime scalars `[[name, dtype, input position], ...]`: kernel parameters passed at
    call time, usable in index expressions, never specialized on), optional `scalar_refs` (the
    names of runtime scalars the backend reads from a one-element i32 device tensor instead of
    taking by value: set by tkc/driver.py when a caller passes a tensor, so a CUDA graph can
    replay the kernel at new values).

    Example: `tile.func() {consts = {BM = 64}, dims = {M = 128}, outputs = [1], reference = "A",
    sym_name = "k"} loc("k.tk":1:1) { ^(%A: global<f16[M]>, %C: global<f16[M]>) ... }`
    """

    name = "tile.func"

    def verify(self, fail, env):
        if not self.regions or not self.regions[0].args:
            fail("`tile.func` needs a region with global tensor arguments")
            return
        n = len(self.regions[0].args)
        outputs = self.attrs.get("outputs", [])
        if not outputs:  # the language's kernels have `-> (...)` with at least one output
            fail("`tile.func` lists no `outputs`: a kernel writes at least one of its arguments",
                 "list the output arguments' indices, e.g. `outputs = [2]`")
        for i in outputs:
            if not 0 <= i < n:
                fail(f"output index {i} out of range for {n} arguments")
        for a in self.regions[0].args:
            if a.type.space != "global":
                fail(f"argument `{a}` must be in space `global`, not `{a.type.space}`")
        for kind in ("dims", "dynamic"):  # 0 is a value (a sparse pattern's NNZ when it is empty)
            for name, value in (self.attrs.get(kind) or {}).items():
                if isinstance(value, int) and value < 0:
                    fail(f"dim `{name}` must not be negative, got {value} (in `{kind}`)")


class RequireOp(Op):
    """A precondition on dims and constants, checked when the kernel is specialized; with
    `runtime = true` it also names runtime scalars and is checked at every call (and a bound on a
    scalar, `pos < S`, bounds the scalar's range for the `tile` pass).

    Attribute `cond`: an index expression that must be nonzero. Example:
    `tile.require() {cond = "K % R == 0"} loc("miss_v3.tk":4:14)`
    """

    name = "tile.require"


class LaunchOp(Op):
    """The launch grid: one instance of the region per tile program (thread block).

    Attributes: `grid` (list of extents), `vars` (the block index names, one per extent),
    `threads` (threads per block). Optional `cluster` (extents of a thread-block cluster, one per
    grid dim) and `ranks` (names bound to the block's rank in its cluster per dim: var % extent);
    blocks of a cluster can read each other's shared tiles (`tile.peer_copy`) and wait for each
    other (`tile.cluster_barrier`). Example:
    `tile.launch() {cluster = ["2"], grid = ["B"], ranks = ["r"], threads = "512", vars = ["b"]}`

    With `tiles` (the name of a sparse operand) and `tile_shape = [BM, BN]`, the grid is the list
    of the BM x BN tiles of that pattern that hold at least one entry (built when the kernel
    runs; `grid` is then the bound cdiv(M, BM) * cdiv(N, BN)), and `vars = [m, n]` are the
    tile's row and column tile indices; tiles without an entry are never visited. Example:
    `tile.launch() {grid = ["cdiv(M, 16) * cdiv(N, 16)"], threads = "128", tile_shape = ["16", "16"],
    tiles = "S", vars = ["m", "n"]}`
    """

    name = "tile.launch"

    def verify(self, fail, env):
        grid = self.attrs["grid"]
        threads = self.attrs.get("threads", "128")
        if isinstance(threads, str):  # (the upper bound is each backend's, with its own diagnostic)
            try:
                count = exprs.evaluate(exprs.parse(threads), env)
            except exprs.ExprError:  # an unknown name is reported by the verifier's name check
                count = None
            if isinstance(count, int) and count < 1:
                fail(f"a block has at least one thread; `threads` is {count}", "set `threads` to e.g. \"128\"")
        if "tiles" in self.attrs:  # a grid over the tiles of a sparse pattern: one extent, vars m, n
            if len(grid) != 1 or len(self.attrs.get("vars", [])) != 2 or len(self.attrs.get("tile_shape", [])) != 2:
                fail("a `tiles` grid has one extent, two vars and a 2-entry `tile_shape`")
            if "cluster" in self.attrs:
                fail("a `tiles` grid has no cluster")
            return
        if len(grid) != len(self.attrs.get("vars", [])):
            fail("`grid` and `vars` must have the same length")
        if not 1 <= len(grid) <= 3:
            fail("the grid must have 1 to 3 dimensions")
        if "cluster" in self.attrs or "ranks" in self.attrs:
            if not len(self.attrs.get("cluster", [])) == len(self.attrs.get("ranks", [])) == len(grid):
                fail("`cluster` and `ranks` need one entry per grid dimension")


class AllocOp(Op):
    """Allocate a tile buffer in the result type's space (`shared`, `frag` or `local`).

    Attribute `stages` (optional, default 1): copies of the buffer for a pipelined loop,
    set by `software-pipeline`; shared-memory use is bytes x stages. Contents start undefined.
    Example: `%S = tile.alloc() : frag<f32[64, 64]> loc(...)`
    """

    name = "tile.alloc"

    def verify(self, fail, env):
        if len(self.results) != 1 or self.operands:
            fail("`tile.alloc` has no operands and one result")
            return
        if self.result.type.space == "global":
            fail("`tile.alloc` cannot allocate in space `global`")
        if any(d <= 0 for d in _shape(self.result, env)):
            fail(f"tile `{self.result}` has a non-positive dim: {self.result.type}")


class FillOp(Op):
    """Set every element of a buffer to the float attribute `value`; or, with `index` (an index
    expression: a runtime scalar, a grid or loop index), to its value converted to the tile's
    dtype; with `axis` (an int), each element's position along that axis is added (`iota`).

    Example: `tile.fill(%S) {value = 0.0} loc(...)`, `tile.fill(%P) {axis = 0, index = "t * 64",
    value = 0.0} loc(...)`
    """

    name = "tile.fill"

    def verify(self, fail, env):
        if len(self.operands) != 1 or self.operands[0].type.space == "global":
            fail("`tile.fill` takes one tile buffer")
            return
        if not 0 <= self.attrs.get("axis", 0) < max(self.operands[0].type.rank, 1):
            fail(f"`iota` axis {self.attrs['axis']} out of range for rank {self.operands[0].type.rank}")


class CopyOp(Op):
    """Copy (and convert the dtype of) a tile: global->buffer, buffer->global or buffer->buffer.

    The global side is addressed by `src_offsets` / `dst_offsets` (one index expression per dim);
    the tile's shape is the buffer side's. Elements of a global read outside the tensor read as
    0; elements written outside it are dropped (this is how partial tiles and PEFT's zero padding
    of K behave). `checked` (set by `tile`) lists, per dim of the global side, whether the access
    may leave the tensor; `async` (set by `software-pipeline`) marks a global->shared copy that
    may be issued ahead (cp.async). `src_steps` / `dst_steps` (positive ints per dim, absent when
    all are 1) make the global side strided: tile element i of a dim is tensor element
    offset + i * step (`x[0 : N : 2]`). Example:
    `tile.copy(%A, %a) {src_offsets = ["m * 64", "s * 64"]} loc(...)`
    """

    name = "tile.copy"

    def verify(self, fail, env):
        if len(self.operands) != 2:
            fail("`tile.copy` takes a source and a destination")
            return
        src, dst = self.operands
        if src.type.space == "global" and dst.type.space == "global":
            fail("`tile.copy` between two global tensors is not supported; stage through a tile")
            return
        for side, v in (("src", src), ("dst", dst)):
            offs = self.attrs.get(f"{side}_offsets")
            if v.type.space == "global":
                if offs is None or len(offs) != v.type.rank:
                    fail(f"`{side}_offsets` needs {v.type.rank} entries for `{v}`")
            elif offs is not None:
                fail(f"`{side}_offsets` given for tile buffer `{v}`")
            steps = self.attrs.get(f"{side}_steps")
            if steps is not None and (v.type.space != "global" or len(steps) != v.type.rank
                                      or any(not isinstance(x, int) or x <= 0 for x in steps)):
                fail(f"`{side}_steps` needs {v.type.rank} positive ints, on the global side")
        tile = dst if src.type.space == "global" else src
        other = src if tile is dst else dst
        if other.type.space == "global":
            if other.type.rank != tile.type.rank:
                fail(f"rank mismatch: `{other}` is rank {other.type.rank}, tile is rank {tile.type.rank}")
        elif _shape(src, env) != _shape(dst, env):
            fail(f"shape mismatch: `{src}` is {src.type}, `{dst}` is {dst.type}")


class ReshapeOp(Op):
    """dst = src's elements in row-major order, laid out in dst's shape (same element count),
    converted to dst's dtype (numpy's `reshape`). src is a shared tile: a thread reads elements
    other threads wrote; or, for a reshape that only inserts or removes dims of size 1 (the same
    elements in the same order), a register tile (passes/fold_copies.py). Example:
    `tile.reshape(%s, %r) loc(...)`
    """

    name = "tile.reshape"

    def verify(self, fail, env):
        if len(self.operands) != 2:
            fail("`tile.reshape` takes a source and a destination")
            return
        src, dst = self.operands
        if src.type.space == "global" or dst.type.space == "global":
            fail("`tile.reshape` reads a shared tile into a tile")
            return
        a, b = _shape(src, env), _shape(dst, env)
        if a is not None and b is not None and math.prod(a) != math.prod(b):
            fail(f"`tile.reshape` of {list(a)} into {list(b)}: the element counts differ")
        elif src.type.space != "shared" and (a is None or b is None
                                             or [n for n in a if n != 1] != [n for n in b if n != 1]):
            fail("`tile.reshape` of a register tile may only insert or remove dims of size 1 "
                 "(any other reshape reads a shared tile)")


class ElementwiseOp(Op):
    """out = fn(inputs...) elementwise; last operand is the output (it may also be an input).

    `fn` is unary (neg exp exp2 log sin cos tanh sigmoid relu silu abs sqrt rsqrt) or binary
    (add sub mul div rsub rdiv pow max min; rsub(x, y) = y - x, rdiv(x, y) = y / x); a binary fn
    with one input uses the float attribute `scalar` as its second operand; comparisons (lt le
    gt ge eq ne) are binary and write a bool tile; `where` takes (cond, a, b), cond a bool tile.
    Bool tiles take no other fn (arithmetic on them is an error; `eq`/`ne` compare them). Inputs may
    broadcast dims of size 1 and may have a lower rank (numpy broadcasting: trailing dims align).
    Computation is in f32 (f64 for f64), rounded to the output dtype.
    Example: `tile.elementwise(%S, %a, %S) {fn = "add"} loc(...)`
    """

    name = "tile.elementwise"

    def verify(self, fail, env):
        fn = self.attrs.get("fn")
        if fn not in UNARY + BINARY + tuple(COMPARE) + TERNARY:
            fail(f"unknown elementwise fn `{fn}`")
            return
        ins = self.operands[:-1]
        want = 3 if fn in TERNARY else 1 if fn in UNARY or "scalar" in self.attrs else 2
        if len(ins) != want:
            fail(f"`{fn}` takes {want} input(s), got {len(ins)}")
            return
        out_bool = self.operands[-1].type.dtype == "bool"
        if (fn in COMPARE) != out_bool and not (fn == "where" and out_bool):
            fail(f"`{fn}` {'must' if fn in COMPARE else 'cannot'} write a bool tile")
        if fn == "where" and ins[0].type.dtype != "bool":
            fail(f"the condition of `where` must be a bool tile, got {ins[0].type.dtype}")
        bools = [v for v in ins[1 if fn == "where" else 0:] if v.type.dtype == "bool"]
        if bools and fn not in ("eq", "ne", "where"):
            fail(f"`{fn}` on bool tile `{bools[0]}`")
        out = _shape(self.operands[-1], env)
        for v in self.operands:
            if v.type.space == "global":
                fail(f"`tile.elementwise` operand `{v}` must be a tile buffer, not a global tensor")
                return
        for v in ins:
            if not _broadcasts(_shape(v, env), out):
                fail(f"shape mismatch: input `{v}` is {v.type}, output is {self.operands[-1].type}")


class ReduceOp(Op):
    """dst = fn(src) along `axis` (the reduced dim has size 1 in dst); fn is sum, max or min.

    With `accumulate = true` (fn `sum` only: what `acc += sum(x, axis)` lowers to) the sum is
    added to dst's old value instead: dst = dst + sum(src), in dst's dtype.
    Example: `tile.reduce(%x, %s) {axis = 1, fn = "sum"} loc(...)`
    """

    name = "tile.reduce"

    def verify(self, fail, env):
        if self.attrs.get("fn") not in REDUCE or len(self.operands) != 2:
            fail("`tile.reduce` takes fn in sum/max/min, a source and a destination")
            return
        if "bool" in (self.operands[0].type.dtype, self.operands[1].type.dtype):
            fail("`tile.reduce` on a bool tile")
        accumulate = self.attrs.get("accumulate", False)  # a bool (check_attrs)
        # No syntax makes a max/min accumulate (`acc += amax(x, 1)` adds the maximum), so no
        # backend implements one.
        if accumulate and self.attrs["fn"] != "sum":
            fail(f"`accumulate = true` takes fn `sum` only, got `{self.attrs['fn']}`")
            return
        src, dst = (_shape(v, env) for v in self.operands)
        axis = self.attrs.get("axis", -1)
        if not 0 <= axis < len(src):
            fail(f"axis {axis} out of range for rank {len(src)}")
            return
        want = src[:axis] + (1,) + src[axis + 1:]
        if dst != want:
            fail(f"reduce result must have shape {list(want)}, got {list(dst)}")


class DotReduceOp(Op):
    """dst = sum(a * b) along the last axis, for i8 tiles a and b (b broadcasts against a as an
    elementwise input does) and an i32 dst: the int8 dot products of a GEMV with int8 weights
    and activations (llama2.c's runq.c). Made by the `fuse-int8-dot` pass from
    `sum(cast(a, i32) * cast(b, i32), last)` on the `cuda` target, which lowers it to `__dp4a`
    (four byte products and their sum per instruction); the pass fuses only where the f32
    arithmetic the language defines for i32 is exact (reduced length L with L * 128 * 128 <=
    2^24), so both compute the same integers.
    Example: `tile.dot_reduce(%w, %x, %q) {axis = 2} loc(...)`
    """

    name = "tile.dot_reduce"

    def verify(self, fail, env):
        if len(self.operands) != 3:
            fail("`tile.dot_reduce` takes two i8 sources and an i32 destination")
            return
        a, b, dst = self.operands
        if a.type.dtype != "i8" or b.type.dtype != "i8" or dst.type.dtype != "i32":
            fail(f"`tile.dot_reduce` takes i8 sources and an i32 destination, got {a.type.dtype}, {b.type.dtype} "
                 f"and {dst.type.dtype}")
            return
        sa, sb, sd = (_shape(v, env) for v in self.operands)
        axis = self.attrs.get("axis", -1)
        if axis != len(sa) - 1:
            fail(f"`tile.dot_reduce` reduces the last axis ({len(sa) - 1}), got axis {axis}")
            return
        if not _broadcasts(sb, sa):
            fail(f"`tile.dot_reduce` source `{b}` {b.type} does not broadcast against `{a}` {a.type}")
        if sd != sa[:-1] + (1,):
            fail(f"dot_reduce result must have shape {list(sa[:-1] + (1,))}, got {list(sd)}")


class GemmOp(Op):
    """acc += a @ b with a: [M, K], b: [K, N], acc: [M, N]; products accumulate in acc's dtype.

    Operands are tiles (shared, frag or local); acc is frag or local and a float dtype.
    Backends use tensor cores (mma/wgmma through T.gemm) when the tile allows it. Optional
    attributes `warp = [WM, WN, WNITER]` and `thread = [TM, TN]` (index expressions over dims and
    constants, both or neither) give the warp tiling of a SIMT gemm (dsl/warp_tiling.py); they do not
    change what the op computes. Examples: `tile.gemm(%a, %b, %acc) loc(...)`,
    `tile.gemm(%a, %b, %acc) {thread = ["TM", "TN"], warp = ["WM", "WN", "WNITER"]} loc(...)`
    """

    name = "tile.gemm"

    def verify(self, fail, env):
        if len(self.operands) != 3:
            fail("`tile.gemm` takes a, b and acc")
            return
        a, b, acc = self.operands
        if any(v.type.space == "global" for v in (a, b, acc)):
            fail("`tile.gemm` operands must be tiles; copy global slices into shared first")
            return
        if acc.type.space not in ("frag", "local") or acc.type.dtype not in FLOAT_DTYPES:
            fail(f"gemm accumulator `{acc}` must be a float frag/local tile, got {acc.type}")
        sa, sb, sc = (_shape(v, env) for v in (a, b, acc))
        if len(sa) != 2 or len(sb) != 2 or len(sc) != 2:
            fail("`tile.gemm` operands must be 2-d")
            return
        if sa[1] != sb[0] or sa[0] != sc[0] or sb[1] != sc[1]:
            fail(f"gemm shapes do not agree: {a.type} @ {b.type} -> {acc.type}")
            return
        for problem in warp_tiling(self, env)[1]:
            fail(problem)


class SampledGemmOp(Op):
    """The masked (sampled) tile gemm of SDDMM (seed 003; `torch.sparse.sampled_addmm` with
    beta 0, alpha 1): for every entry e = (i, j) of the sparse pattern that falls in the current
    tile of a `tiles` grid (rows `a_offsets[0]` + [0, BM), columns `b_offsets[1]` + [0, BN)),
    out[e] = sum over k of a[i, k] * b[k, j], accumulated in f32 and rounded to out's dtype.

    Operands: a (global, [M, K]), b (global, [K, N]), rows and cols (global i32 [NNZ]: the
    pattern's entries in its order), out (global): rank 1 [NNZ] takes the values in the
    pattern's order; rank 2 [M, N] takes them at their positions (the rest of out is 0: the
    runtime zeroes it, as tiles without an entry are never visited). Attributes: `a_offsets`,
    `b_offsets` (index expressions: the tile's corner; the K offsets are 0, the whole of K is
    reduced), `tile` ([BM, BN]), `pattern` (the sparse operand's name), optional `dot_below`
    (set by `sparse-dispatch`: a tile with fewer entries than this computes them as CUDA-core dot
    products instead of one tensor-core tile product; 0 = always tensor cores) and `mma` (the
    tensor-core shape [m, n, k]). Example:
    `tile.sampled_gemm(%A, %B, %S_rows, %S_cols, %P) {a_offsets = ["m * 16", "0"],
    b_offsets = ["0", "n * 16"], pattern = "S", tile = ["16", "16"]} loc(...)`
    """

    name = "tile.sampled_gemm"

    def verify(self, fail, env):
        if len(self.operands) != 5:
            fail("`tile.sampled_gemm` takes a, b, rows, cols and out")
            return
        a, b, rows, cols, out = self.operands
        if any(v.type.space != "global" for v in self.operands):
            fail("`tile.sampled_gemm` operands are global tensors")
            return
        if a.type.rank != 2 or b.type.rank != 2:
            fail("`tile.sampled_gemm` needs 2-d a and b")
            return
        if rows.type.dtype != "i32" or cols.type.dtype != "i32" or rows.type.rank != 1 or cols.type.rank != 1:
            fail("the pattern's rows and cols are 1-d i32 tensors")
        if out.type.dtype not in FLOAT_DTYPES or out.type.rank not in (1, 2):
            fail(f"the output `{out}` must be a 1-d or 2-d float tensor, got {out.type}")
        for key in ("a_offsets", "b_offsets", "tile"):
            if len(self.attrs.get(key, [])) != 2:
                fail(f"`{key}` needs 2 entries")
        if env is not None and _shape(a, env)[1] != _shape(b, env)[0]:
            fail(f"the reduction dims differ: {a.type} @ {b.type}")


class PeerCopyOp(Op):
    """Copy the instance of shared tile `src` owned by the block of cluster rank `rank` into `dst`.

    `rank` is an index expression (one per cluster dim, as a list) over the names in scope.
    The peer's tile is read as it is at that moment: a cluster barrier must separate the read
    from the peer's writes of the tile before it and after it (`map-dsmem` inserts them and sets
    `dsmem = true`: the access goes through distributed shared memory). Example:
    `tile.peer_copy(%S, %p) {rank = ["(r + 1) % 2"]} loc(...)`
    """

    name = "tile.peer_copy"

    def verify(self, fail, env):
        if len(self.operands) != 2:
            fail("`tile.peer_copy` takes a shared source and a destination")
            return
        src, dst = self.operands
        if src.type.space != "shared":
            fail(f"`tile.peer_copy` reads a peer's shared tile; `{src}` is {src.type}")
        if dst.type.space == "global":
            fail("`tile.peer_copy` writes a tile buffer, not a global tensor")
        if src.type.concrete_shape(env) != dst.type.concrete_shape(env):
            fail(f"shape mismatch: `{src}` is {src.type}, `{dst}` is {dst.type}")


class PeerStoreOp(Op):
    """Write tile `src` into the instance of shared tile `dst` owned by the block of cluster rank
    `rank` (a store through distributed shared memory; the block's own `dst` is not touched).

    `rank` is an index expression per cluster dim, as for `tile.peer_copy`. A cluster barrier
    must separate the store from the owner's uses of its `dst` before it and after it, and from the
    owner's exit (`map-dsmem` inserts them and sets `dsmem = true`). A remote store does not wait
    for a reply, which makes pushing a tile to the peer cheaper than the peer pulling it (seed 001's
    cluster reduce on an H200: docs/PERFORMANCE.md). Example:
    `tile.peer_store(%x, %P) {rank = ["(r + 1) % 2"]} loc(...)`
    """

    name = "tile.peer_store"

    def verify(self, fail, env):
        if len(self.operands) != 2:
            fail("`tile.peer_store` takes a source tile and a shared destination")
            return
        src, dst = self.operands
        if dst.type.space != "shared":
            fail(f"`tile.peer_store` writes a peer's shared tile; `{dst}` is {dst.type}")
        if src.type.space == "global":
            fail("`tile.peer_store` reads a tile buffer, not a global tensor")
        if src.type.concrete_shape(env) != dst.type.concrete_shape(env):
            fail(f"shape mismatch: `{src}` is {src.type}, `{dst}` is {dst.type}")


class ClusterBarrierOp(Op):
    """Every thread of every block of the cluster arrives and waits (barrier.cluster).

    Orders shared-memory writes before it with peer reads after it, and peer reads before it
    with writes after it. `map-dsmem` inserts the barriers a program needs (`inserted = true`).
    With `relaxed = true` (map-dsmem's barrier before a block's first DSMEM access) it orders no
    memory: it only tells that every block of the cluster has started (barrier.cluster.arrive
    .relaxed); the reference interpreter steps the blocks past it together but keeps the
    accesses on both sides of it in one phase.
    Example: `tile.cluster_barrier() loc(...)`
    """

    name = "tile.cluster_barrier"


class GridBarrierOp(Op):
    """Every thread of every block of the grid arrives and waits (`sync grid`; CUDA cooperative
    groups' `this_grid().sync()` under a cooperative launch, which needs every block resident at
    once). Global-memory writes before it are visible to every block after it: the kernel may
    read an output that other blocks stored before the barrier. Every block passes the same
    barriers (lowering rejects one in a loop whose trip count depends on a grid index).
    Example: `tile.grid_barrier() loc(...)`
    """

    name = "tile.grid_barrier"


def has_grid_barrier(op: Op) -> bool:
    """Whether `op` (a launch, a function or a module's func) holds a `tile.grid_barrier`."""
    return any(o.name == "tile.grid_barrier" for o in op.walk())


class ForOp(Op):
    """A loop `for var in [lo, hi)`; `kind` is serial, unroll or pipelined.

    A pipelined loop carries `stages` (an index expression): how many iterations' global loads
    may be in flight (TileLang `T.Pipelined(n, num_stages)`, CUDA multi-buffered cp.async).
    Example: `tile.for() {hi = "K / 64", kind = "pipelined", lo = "0", stages = "3", var = "s"}`
    """

    name = "tile.for"

    def verify(self, fail, env):
        if self.attrs.get("kind") not in LOOP_KINDS:
            fail(f"unknown loop kind `{self.attrs.get('kind')}`")
        if self.attrs.get("kind") == "pipelined" and "stages" not in self.attrs:
            fail("a pipelined loop needs `stages`")
        if len(self.regions) != 1:
            fail("`tile.for` has one region")


OPS: dict[str, type[Op]] = {
    cls.name: cls
    for cls in (FuncOp, RequireOp, LaunchOp, AllocOp, FillOp, CopyOp, ReshapeOp, ElementwiseOp, ReduceOp, DotReduceOp,
                GemmOp, SampledGemmOp, ForOp, PeerCopyOp, PeerStoreOp, ClusterBarrierOp, GridBarrierOp)
}

# Attributes that hold index expressions (strings), checked for names in scope by the verifier.
# The attributes of each op, as IR text may give them: name -> (kind, required). Kinds: expr (an
# index expression, a string), exprs (a list of them), name / names (identifiers), int / ints,
# number (int or float), bool / bools, str / strs, int_dict (name -> int), scalars ([name, dtype,
# position] each), sparse ([name, format, position, M, N] each). The verifier checks them before
# each op's own `verify`, so that passes and backends can rely on the types.
ATTRS: dict[str, dict[str, tuple[str, bool]]] = {
    "tile.func": {"sym_name": ("str", False), "dims": ("int_dict", False), "consts": ("int_dict", False),
                  "outputs": ("ints", True), "reference": ("str", False), "static": ("strs", False),
                  "scalars": ("scalars", False), "scalar_refs": ("strs", False), "dynamic": ("int_dict", False),
                  "mutable": ("ints", False), "sparse": ("sparse", False), "tiled": ("bool", False)},
    "tile.require": {"cond": ("expr", True), "runtime": ("bool", False)},
    "tile.launch": {"grid": ("exprs", True), "vars": ("names", True), "threads": ("expr", True),
                    "cluster": ("exprs", False), "ranks": ("names", False), "tiles": ("name", False),
                    "tile_shape": ("exprs", False)},
    "tile.alloc": {"stages": ("int", False), "dsmem": ("bool", False)},
    "tile.fill": {"value": ("number", True), "index": ("expr", False), "axis": ("int", False)},
    "tile.copy": {"src_offsets": ("exprs", False), "dst_offsets": ("exprs", False), "src_steps": ("ints", False),
                  "dst_steps": ("ints", False), "checked": ("bools", False), "async": ("bool", False)},
    "tile.elementwise": {"fn": ("str", True), "scalar": ("number", False)},
    "tile.reduce": {"fn": ("str", True), "axis": ("int", True), "accumulate": ("bool", False)},
    "tile.dot_reduce": {"axis": ("int", True)},
    "tile.gemm": {"warp": ("exprs", False), "thread": ("exprs", False)},
    "tile.sampled_gemm": {"a_offsets": ("exprs", True), "b_offsets": ("exprs", True), "tile": ("exprs", True),
                          "pattern": ("name", True), "dot_below": ("int", False), "mma": ("ints", False)},
    "tile.for": {"var": ("name", True), "kind": ("str", True), "lo": ("expr", True), "hi": ("expr", True),
                 "stages": ("expr", False), "pipelined": ("bool", False)},
    "tile.peer_copy": {"rank": ("exprs", True), "dsmem": ("bool", False)},
    "tile.peer_store": {"rank": ("exprs", True), "dsmem": ("bool", False)},
    "tile.cluster_barrier": {"inserted": ("bool", False), "reason": ("str", False), "relaxed": ("bool", False)},
    "tile.grid_barrier": {},
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_name(v) -> bool:
    return isinstance(v, str) and v.isidentifier()


def _list_of(test):
    return lambda v: isinstance(v, list) and all(test(x) for x in v)


_ATTR_KINDS = {  # kind -> (test, what it must be)
    "expr": (lambda v: isinstance(v, str), "an index expression (a string)"),
    "exprs": (_list_of(lambda x: isinstance(x, str)), "a list of index expressions (strings)"),
    "name": (_is_name, "a name"),
    "names": (_list_of(_is_name), "a list of names"),
    "int": (_is_int, "an integer"),
    "ints": (_list_of(_is_int), "a list of integers"),
    "number": (lambda v: _is_int(v) or isinstance(v, float), "a number"),
    "bool": (lambda v: isinstance(v, bool), "`true` or `false`"),
    "bools": (_list_of(lambda x: isinstance(x, bool)), "a list of `true`/`false`"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "strs": (_list_of(lambda x: isinstance(x, str)), "a list of strings"),
    "int_dict": (lambda v: isinstance(v, dict) and all(_is_name(k) and _is_int(x) for k, x in v.items()),
                 "a dict of names to integers"),
    "scalars": (_list_of(lambda x: isinstance(x, list) and len(x) == 3 and _is_name(x[0])
                         and isinstance(x[1], str) and _is_int(x[2])), "a list of [name, dtype, position]"),
    "sparse": (_list_of(lambda x: isinstance(x, list) and len(x) == 5 and _is_name(x[0])
                        and isinstance(x[1], str) and _is_int(x[2]) and all(isinstance(y, str) for y in x[3:])),
               "a list of [name, format, position, rows, columns]"),
}


def check_attrs(op: Op, fail) -> bool:
    """Whether `op`'s attributes have the kinds of ATTRS (`fail` for each one that does not)."""
    ok = True
    for key, (kind, required) in ATTRS.get(op.name, {}).items():
        if key not in op.attrs:
            if required:
                fail(f"`{op.name}` needs attribute `{key}`")
                ok = False
            continue
        test, what = _ATTR_KINDS[kind]
        if not test(op.attrs[key]):
            fail(f"attribute `{key}` of `{op.name}` must be {what}, got {format_attr(op.attrs[key])}")
            ok = False
    return ok


EXPR_ATTRS = ("cond", "grid", "threads", "src_offsets", "dst_offsets", "lo", "hi", "stages", "cluster", "rank",
              "index", "warp", "thread", "a_offsets", "b_offsets", "tile", "tile_shape")


def scalars(func: Op) -> list[tuple[str, str, int]]:
    """The kernel's runtime scalars: (name, dtype, position among the inputs)."""
    return [(n, d, int(i)) for n, d, i in func.attrs.get("scalars", [])]


def dynamic_dims(func: Op) -> dict[str, int]:
    """The kernel's dynamic dims (`dynamic M`): name -> the value compile-time checks use (the
    `where` default or `-D`); the kernel reads the actual value from the tensors' shapes."""
    return dict(func.attrs.get("dynamic", {}))


def dynamic_values(func: Op, shapes: dict) -> dict[str, int]:
    """Each dynamic dim's value at a call: the extent of the first argument (name -> shape in
    `shapes`) whose type names it; dims no given argument names are left out."""
    out = {}
    for name in dynamic_dims(func):
        for a in func.body.args:
            at = [k for k, d in enumerate(a.type.shape) if d == exprs.Sym(name)]
            if at and shapes.get(a.name) is not None:
                out[name] = int(shapes[a.name][at[0]])
                break
    return out


def scalar_refs(func: Op) -> set[str]:
    """The runtime scalars read through a one-element device tensor (`scalar_refs`)."""
    return set(func.attrs.get("scalar_refs", []))


def index_tensors(func: Op) -> set[str]:
    """Names of the global tensors whose elements index expressions read (`ids[b]`)."""
    return set().union(*(exprs.loads(e) for op in func.walk() for _, e in expr_attrs(op)))


def index_bound_exprs(func: Op) -> dict[str, list[str]]:
    """For each index tensor, the exclusive upper bounds its values must stay under, one per
    tensor dim whose offset reads it, as index expressions over the dims: the tensor's extent
    there minus (the tile's extent - 1) x the step (`E[ids[b] : +1, :]` with E [V, N]: `V`).
    A dynamic extent stays a name (the CUDA backend checks against its kernel argument)."""
    out: dict[str, list[str]] = {name: [] for name in index_tensors(func)}
    for op in func.walk():
        if op.name != "tile.copy":
            continue
        src, dst = op.operands
        tensor, tile, key = (src, dst, "src_offsets") if src.type.space == "global" else (dst, src, "dst_offsets")
        if tensor.type.space != "global":
            continue
        steps = op.attrs.get(key.replace("offsets", "steps")) or [1] * tensor.type.rank
        for off, size, extent, st in zip(op.attrs[key], tile.type.shape, tensor.type.shape, steps):
            names = exprs.loads(exprs.parse(off))
            if names:
                room = exprs.to_str(extent)
                if not (isinstance(size, exprs.Num) and size.value == 1):
                    room = f"({room}) - ({exprs.to_str(size)} - 1) * {st}"
                for n in names:
                    out[n].append(room)
    return out


def index_bounds(func: Op, env: dict[str, int]) -> dict[str, int]:
    """For each index tensor, the exclusive upper bound its values must stay under: the least
    of index_bound_exprs at `env` (2^31 - 1 with none), at least 1. Values must also be >= 0."""
    return {name: max(1, min([exprs.evaluate(exprs.parse(r), env) for r in rooms] + [2**31 - 1]))
            for name, rooms in index_bound_exprs(func).items()}


def device_checks(func: Op) -> list[tuple[str, str, str, Op]]:
    """The checks a GPU backend makes in the kernel on each runtime scalar read from device memory
    (`scalar_refs`: the host cannot see its value without a sync): (scalar, condition that must
    hold, message, op of the location): the scalar is non-negative, and every runtime `requires`
    that mentions it holds."""
    out = []
    refs = scalar_refs(func)
    for n, _, _ in scalars(func):
        if n in refs:
            out.append((n, f"{n} >= 0", f"runtime scalar `{n}` is negative; it must be in [0, 2^31)", func))
    for op in func.body.ops:
        if op.name == "tile.require" and op.attrs.get("runtime"):
            names = sorted(exprs.names(exprs.parse(op.attrs["cond"])) & refs)
            if names:
                out.append((names[0], op.attrs["cond"], f"requirement `{op.attrs['cond']}` does not hold at this call",
                            op))
    return out


def scalar_ranges(func: Op, env: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Inclusive [lo, hi] of each runtime scalar: [0, 2^31 - 1], and of each dynamic dim:
    [1, 2^31 - 1], narrowed by the runtime `requires` clauses of the form `pos < E`, `pos <= E`
    (E over dims and constants)."""
    out = {n: exprs.UNKNOWN for n, _, _ in scalars(func)}
    out.update({n: (1, exprs.UNKNOWN[1]) for n in dynamic_dims(func)})
    for op in func.body.ops:
        if op.name != "tile.require" or not op.attrs.get("runtime"):
            continue
        e = exprs.parse(op.attrs["cond"])
        if not isinstance(e, exprs.Bin):
            continue
        a, b, rel = e.a, e.b, e.op
        if isinstance(b, exprs.Sym) and b.name in out and rel in (">", ">="):
            a, b, rel = b, a, {">": "<", ">=": "<="}[rel]
        if isinstance(a, exprs.Sym) and a.name in out and rel in ("<", "<="):
            try:
                hi = exprs.evaluate(b, env) - (1 if rel == "<" else 0)
            except exprs.ExprError:
                continue
            lo, old = out[a.name]
            out[a.name] = (lo, max(lo, min(old, hi)))
    return out


def hoist_input_loads(func, ops: list, eligible) -> list:
    """`ops` (a loop body) in emission order, with every copy of a window of an input tensor (one
    the kernel never writes: not an output, and offsets that read no output) into a tile that
    `eligible(tile)` accepts moved up to the start of the list, or to just after the last earlier
    op that touches that tile, a loop (its trips may read the tile) or another global load (their
    order stays): a trip's loads are then in flight together before its first barrier. The
    offsets name only grid, loop and runtime scalar indices, defined before the body. The load
    hoisting of both GPU backends (codegen/cuda_access.py and codegen/tilelang.py `hoist_loads`);
    an op before its tile's `tile.alloc` is fine (the backends declare tiles up front)."""
    args = func.body.args
    outs = func.attrs.get("outputs", [])
    outputs = {id(args[i]) for i in outs}
    written = {args[i].name for i in outs}
    out: list = []
    for op in ops:
        src = op.operands[0] if op.name == "tile.copy" else None
        if (src is None or src.type.space != "global" or id(src) in outputs or not eligible(op.operands[1])
                or any(exprs.loads(exprs.parse(t)) & written for t in op.attrs.get("src_offsets", []))):
            out.append(op)
            continue
        tile = op.operands[1]
        at = len(out)
        while at > 0 and not any(v is tile for o in out[at - 1].walk() for v in o.operands) \
                and out[at - 1].name != "tile.for" \
                and not (out[at - 1].name == "tile.copy" and out[at - 1].operands[0].type.space == "global"):
            at -= 1
        out.insert(at, op)
    return out


def shared_accesses(op: Op) -> tuple[list, object]:
    """(shared tiles `op` reads, shared tile it writes or None), in the block's own instances:
    every writing op writes its last operand and reads the others (and the last one too when it
    accumulates into it); `tile.peer_copy` reads the peer's instance of its source and
    `tile.peer_store` writes the peer's instance of its destination, so those do not count.
    Shared by map-dsmem's barrier analysis and the interpreter's race checks."""
    if op.name in ("tile.alloc", "tile.launch", "tile.for", "tile.cluster_barrier") or not op.operands:
        return [], None
    *ins, out = op.operands
    if op.name == "tile.peer_copy":
        ins = []
    if op.name == "tile.peer_store":
        out = None
    elif op.name == "tile.gemm" or op.attrs.get("accumulate"):
        ins = [*ins, out]
    return ([v for v in ins if v.type.space == "shared"],
            out if out is not None and out.type.space == "shared" else None)


def peer_tiles(launch: Op) -> set[int]:
    """ids of the shared tiles some block of the cluster accesses in a peer's instance (the
    source of a `tile.peer_copy`, the destination of a `tile.peer_store`), anywhere in `launch`.
    map-dsmem marks their allocs `dsmem`; the GPU backends keep cp.async away from them."""
    return {id(op.operands[0 if op.name == "tile.peer_copy" else 1]) for op in launch.walk()
            if op.name in ("tile.peer_copy", "tile.peer_store")}


def expr_attrs(op: Op):
    """(attribute name, parsed expression) for every index expression `op` carries."""
    for key in EXPR_ATTRS:
        v = op.attrs.get(key)
        if v is None:
            continue
        for text in (v if isinstance(v, list) else [v]):
            if isinstance(text, str):
                yield key, exprs.parse(text)

"""CUDA backend: chunk loops and element access to global, shared and register tiles; tile.copy.

A *chunk loop* walks a tile in chunks of V consecutive elements of its last dim (V from
codegen/cuda_plan.chunk_width, Plan.width); chunk c goes to thread c % threads, so every chunk loop over the
same shape gives each thread the same elements (this is what lets register tiles live in
registers). Global accesses move whole chunks in 16-byte (or narrower) words when the tensor's
row length and the tile's column offset are multiples of V; guards on `checked` dims read zeros
and drop writes outside the tensor, per chunk when the chunk is all in or all out, else per
element. Global -> shared copies in pipelined loops use cp.async with zero-fill.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dsl import exprs
from dsl.ops import hoist_input_loads
from codegen.cuda_plan import known_multiple, numel, operand_roles, shape_of, times_text
from codegen.cuda_prelude import C_TYPES, SIZES, convert


@dataclass
class Chunk:
    """The chunk a thread handles in one trip of a chunk loop."""

    shape: tuple[int, ...]
    width: int  # V
    idx: list[str]  # tile index of the chunk's first element, per dim (C expressions)
    reg_base: str  # register-array index of element 0: "" or "it * V + "

    def reg(self, name: str, e: str = "e") -> str:
        return f"{name}[{self.reg_base}{e}]"


@dataclass
class GlobalChunk:
    """Where a chunk of a tile falls in a global tensor, and how to move it."""

    ptr: str  # C expression: address of the chunk's first element
    base: str  # the tensor's pointer (a valid address for zero-fill cp.async)
    cond: str  # whole-chunk guard ("" when none)
    elem_cond: object  # None, or e -> per-element guard
    word: int  # bytes per access
    step: int = 1  # elements between consecutive chunk elements in the tensor (a strided slice)
    span: int = 0  # strided loads: elements of the contiguous window at `ptr` that holds the chunk
    phase: int = 0  # strided loads: chunk element e is window element e * step + phase

    def at(self, e: str) -> str:
        """The tensor element of chunk element `e` (with elem_cond: one access per element)."""
        return f"({self.ptr})[{e if self.step == 1 else f'({e}) * {self.step}'}]"


def split_constant(e: exprs.Expr, sign: int = 1) -> tuple[tuple, int]:
    """(the non-constant terms of the sum `e`, each with its sign, sorted; the constant term)."""
    if isinstance(e, exprs.Num):
        return (), sign * e.value
    if isinstance(e, exprs.Bin) and e.op in ("+", "-"):
        ta, ca = split_constant(e.a, sign)
        tb, cb = split_constant(e.b, sign if e.op == "+" else -sign)
        return tuple(sorted(ta + tb, key=repr)), ca + cb
    return ((sign, e),), 0


def offset_residue(e: exprs.Expr) -> tuple[int, int]:
    """(g, c) such that `e` is always c plus a multiple of g (g 0: `e` is the constant c)."""
    terms, c = split_constant(e)
    return math.gcd(0, *(known_multiple(t) for _, t in terms)), c


MAX_SPAN_STEP = 4  # strided loads of a larger step go element by element (a window would waste bandwidth)


def _written(op):
    """(role, value) for the tiles `op` writes."""
    return [(role, v) for role, v in operand_roles(op) if role in ("fill", "dst", "out", "rdst", "acc")]


def _add(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    return f"{a} + {b}"


class AccessMixin:
    """Chunk loops, element access and tile.copy; mixed into codegen/cuda._Emitter."""

    # ---- chunk loops ------------------------------------------------------------------------
    def chunk_loop(self, shape, d: int, body) -> None:
        """Emit a loop over the chunks of a tile of `shape`; `body(chunk, depth)` emits one chunk."""
        v = self.plan.width(shape)
        n = numel(shape) // v
        per = -(-n // self.threads)
        reg_base = "" if per == 1 else f"it * {v} + "
        inner = d + 1 + (1 if n % self.threads else 0)
        decls, idx = self._chunk_indices(shape, v)
        saved, self.lines = self.lines, []
        body(Chunk(tuple(shape), v, idx, reg_base), inner)
        body_lines, self.lines = self.lines, saved
        text = "\n".join(body_lines)
        used = [(name, expr) for name, expr in decls if re.search(rf"\b{name}\b", text)]
        if per == 1:
            self.line(d, "{")
            if used or n % self.threads:
                self.line(d + 1, "const int ch = tid;")
        else:
            self.line(d, "#pragma unroll")
            self.line(d, f"for (int it = 0; it < {per}; ++it) {{")
            if used or n % self.threads:
                self.line(d + 1, "const int ch = it * THREADS + tid;")
        if n % self.threads:
            self.line(d + 1, f"if (ch < {n}) {{")
        for name, expr in used:  # declare only the indices the body uses
            self.line(inner, f"const int {name} = {expr};")
        self.lines.extend(body_lines)
        for depth in range(inner - 1, d - 1, -1):
            self.line(depth, "}")

    def _chunk_indices(self, shape, v: int) -> tuple[list[tuple[str, str]], list[str]]:
        """(declarations, tile index per dim) of the first element of chunk `ch`."""
        rank = len(shape)
        per_row = shape[-1] // v
        if rank == 1:
            return [("col", "ch" + (f" * {v}" if v > 1 else ""))], ["col"]
        decls = []
        col = "0"
        if per_row > 1:
            decls.append(("col", f"ch % {per_row}" + (f" * {v}" if v > 1 else "")))
            col = "col"
        rest = "ch" if per_row == 1 else f"ch / {per_row}"
        names = ["row"] if rank == 2 else [f"r{k}" for k in range(rank - 1)]
        idx = []
        for k in range(rank - 2, -1, -1):  # innermost row dim first
            n = shape[k]
            if n == 1:
                idx.append("0")
                continue
            expr = rest if all(m == 1 for m in shape[:k]) else f"{'(' + rest + ')' if ' ' in rest else rest} % {n}"
            decls.append((names[k], expr))
            idx.append(names[k])
            rest = f"{rest} / {n}"
        return decls[::-1], idx[::-1] + [col]

    # ---- shared tiles -----------------------------------------------------------------------
    def smem_offset(self, v, idx: list[str]) -> str:
        """Element offset in shared tile `v` of tile index `idx` (dims of size 1 read index 0)."""
        buf = self.plan.smem[id(v)]
        shape = shape_of(v)
        if buf.transposed:  # [i, k] at k * pitch + i (cuda_plan.SmemBuffer)
            shape, idx = shape[::-1], idx[::-1]
            if buf.swizzle:  # row i of column k at i ^ (k / W % C * R): conflict-free transposed stores
                w, c, r = buf.swizzle
                k = idx[0] if shape[0] != 1 else "0"
                # terms that are multiples of 32 stay outside the XOR (it changes bits below 32 only), so
                # the gemm's sub-tile offsets fold into its load addresses (H100: 4096^3 SGEMM at the
                # tuned tiling 3110 us with the whole row index XORed, 2958 with these terms outside)
                outer, inner = _split_multiples(idx[1], 32)
                xor = f"(({inner or '0'}) ^ ((({k}) >> {w.bit_length() - 1} & {c - 1}) << {r.bit_length() - 1}))"
                idx = [idx[0], " + ".join(outer + [xor])]
        strides, s = [], 1
        for k in range(len(shape) - 1, -1, -1):
            strides.append(s)
            s *= buf.pitch if k == len(shape) - 1 else shape[k]
        strides = strides[::-1]
        terms = []
        slot = self.slot.get(id(v))
        if slot is not None:
            terms.append(f"{slot} * {buf.slot_elems}")
        for i, n, st in zip(idx, shape, strides):
            if n == 1 or i == "0":
                continue
            if st != 1 and re.search(r"[-+%/]", i):
                i = f"({i})"
            terms.append(i if st == 1 else f"{i} * {st}")
        return " + ".join(terms) or "0"

    def smem_word(self, v, width: int) -> int:
        """Bytes per access for a chunk of `width` elements of shared tile `v` (alignment-safe)."""
        size = SIZES[v.type.dtype]
        if self.plan.smem[id(v)].transposed:  # a chunk's elements are a column apart
            return size
        word = min(16, width * size)
        pitch_bytes = self.plan.smem[id(v)].pitch * size
        while word > size and pitch_bytes % word:
            word //= 2
        return word

    def read(self, v, ch: Chunk, d: int, tmp: str):
        """Make the chunk of tile `v` (registers or shared, possibly broadcast) readable;
        returns e -> C expression of element e in v's dtype."""
        where = self.plan.where(v)
        shape = shape_of(v)
        if where == "regs":
            return lambda e: ch.reg(self.name(v), e)
        if where == "const":
            value = self.fill_value(self.plan.const[id(v)])
            return lambda e: value
        trailing = ch.idx[len(ch.idx) - len(shape):]  # a lower-rank tile broadcasts along leading dims
        idx = [("0" if n == 1 else i) for i, n in zip(trailing, shape)]
        if where == "gview":
            return self.read_global_view(v, idx, ch.width if shape[-1] != 1 else 1, d, tmp)
        off = self.smem_offset(v, idx)
        ctype = C_TYPES[v.type.dtype]
        if shape[-1] == 1 and ch.width > 1:  # broadcast along the last dim: one element
            self.line(d, f"const {ctype} {tmp} = {self.name(v)}[{off}];")
            return lambda e: tmp
        word = self.smem_word(v, ch.width)
        self.line(d, f"alignas(16) {ctype} {tmp}[{ch.width}];")
        self.line(d, f"tk_load<{word}>({tmp}, &{self.name(v)}[{off}]);")
        return lambda e: f"{tmp}[{e}]"

    def read_global_view(self, v, idx: list[str], width: int, d: int, tmp: str):
        """Load the `width` elements at tile index `idx` of global-view tile `v` (cuda_plan:
        `gview`) from its tensor, zeros outside it; returns e -> element e in v's dtype."""
        copy = self.plan.gview[id(v)]
        src = copy.operands[0]
        self.line(d, f"// {self.name(v)}: read in place")
        self.load_global(self.global_chunk(copy, src, "src", idx, width), src, width, tmp, d)
        if width == 1:
            return lambda e: convert(f"{tmp}[0]", src.type.dtype, v.type.dtype)
        return lambda e: convert(f"{tmp}[{e}]", src.type.dtype, v.type.dtype)

    def write(self, v, ch: Chunk, d: int, value, tmp: str) -> None:
        """Store e -> `value(e)` (C expressions in v's dtype) into the chunk of tile `v`."""
        if self.plan.where(v) == "regs":
            self.elem_loop(d, f"{ch.reg(self.name(v))} = {value('e')};", ch.width)
            return
        ctype = C_TYPES[v.type.dtype]
        if self.plan.smem[id(v)].transposed:  # one element at a time, a column apart
            at = self.smem_offset(v, ch.idx[:-1] + [_add(ch.idx[-1], "e")])
            self.elem_loop(d, f"{self.name(v)}[{at}] = {value('e')};", ch.width)
            return
        self.line(d, f"alignas(16) {ctype} {tmp}[{ch.width}];")
        self.elem_loop(d, f"{tmp}[e] = {value('e')};", ch.width)
        word = self.smem_word(v, ch.width)
        self.line(d, f"tk_store<{word}>(&{self.name(v)}[{self.smem_offset(v, ch.idx)}], {tmp});")

    def elem_loop(self, d: int, stmt: str, width: int) -> None:
        """`stmt` for every element e of a chunk of `width` elements."""
        if width == 1:
            self.line(d, f"{{ const int e = 0; {stmt} }}")
            return
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int e = 0; e < {width}; ++e) {stmt}")

    # ---- global tensors ---------------------------------------------------------------------
    def global_chunk(self, op, tensor, side: str, idx: list[str], width: int, interleave: bool = False) -> GlobalChunk:
        """The chunk at tile index `idx` of the tile `op` copies to/from `tensor` (`side` is
        "src" or "dst": which offsets apply). Strided loads (and, with `interleave`, a group of
        stores that together cover the window: `store_groups`) move the contiguous window
        around the chunk (`strided_window`)."""
        texts = op.attrs[f"{side}_offsets"]
        dims = self.tensor_dims(tensor)  # ints, or a dynamic dim's C name
        checked = op.attrs.get("checked", [True] * len(dims))
        size = SIZES[tensor.type.dtype]
        steps = op.attrs.get(f"{side}_steps") or [1] * len(dims)  # tile element i -> offset + i * step
        g = [_add(self.cexpr(t), i if st == 1 else f"({i}) * {st}") for t, i, st in zip(texts, idx, steps)]
        last = steps[-1]
        vec = (last == 1 and isinstance(dims[-1], int) and dims[-1] % width == 0
               and known_multiple(exprs.parse(texts[-1])) % width == 0)
        conds = []
        for k, (gk, n, chk) in enumerate(zip(g, dims, checked)):
            if not chk or (k == len(dims) - 1 and not vec):
                continue
            if self.may_be_negative(texts[k]):
                conds.append(f"{gk} >= 0")
            conds.append(f"{gk} < {n}")
        elem_cond = None
        if not vec and checked[-1]:
            at, n, neg = g[-1], dims[-1], self.may_be_negative(texts[-1])
            de = (lambda e: e) if last == 1 else (lambda e: f"{e} * {last}")  # noqa: E731
            elem_cond = lambda e: (f"{at} + {de(e)} >= 0 && " if neg else "") + f"{at} + {de(e)} < {n}"  # noqa: E731
        elif last != 1:  # strided along the last dim: element by element, always in bounds here
            elem_cond = lambda e: "true"  # noqa: E731
        terms, stride = [], "1"
        dynamic = not all(isinstance(n, int) for n in dims)
        for k in range(len(dims) - 1, -1, -1):
            gk = g[k]
            if k == 0 and (dynamic or numel(dims) >= 2**31):  # a dynamic dim may make the tensor that large
                gk = f"static_cast<int64_t>({gk})"
            elif stride != "1" and " " in gk:
                gk = f"({gk})"
            if gk != "0":
                terms.append(gk if stride == "1" else f"{gk} * {stride}")
            stride = times_text(stride, dims[k])
        lin = " + ".join(reversed(terms)) or "0"
        word = min(16, width * size) if vec else size
        name = self.name(tensor)
        window = self.strided_window(texts[-1], last, dims[-1], width, size) if side == "src" or interleave else None
        if window is not None:  # load the contiguous window that holds the chunk, keep every step-th
            span, phase, word = window
            if checked[-1]:  # the window is all in the row or all out (strided_window)
                conds = conds + ([f"{g[-1]} >= 0"] if self.may_be_negative(texts[-1]) else []) + [f"{g[-1]} < {dims[-1]}"]
            return GlobalChunk(f"&{name}[{lin}]" + (f" - {phase}" if phase else ""), name, " && ".join(conds), None,
                               word, last, span, phase)
        return GlobalChunk(f"&{name}[{lin}]", name, " && ".join(conds), elem_cond, word, last)

    def strided_window(self, text: str, step: int, extent: int, width: int, size: int):
        """(span, phase, word) for loading a chunk of `width` elements `step` apart along the last
        dim (extent `extent`, element `size` bytes) from offset `text` as the contiguous window of
        width * step elements around it, or None. The window must be aligned to its own length
        (so it lies inside the row whenever its first element does: all in or all out, like a
        vector chunk) and the offset's residue modulo `step` known (the phase of the chunk's
        first element in the window): the even and odd elements of RoPE's pairs."""
        if not 1 < step <= MAX_SPAN_STEP or not isinstance(extent, int):
            return None
        span = width * step
        try:
            g, c = offset_residue(exprs.parse(text))
        except exprs.ExprError:
            return None
        phase = c % step
        if g % span or (c - phase) % span or extent % span:
            return None
        word = size
        while word * 2 <= min(16, span * size) and (span * size) % (word * 2) == 0:
            word *= 2
        return span, phase, word

    def may_be_negative(self, text: str) -> bool:
        try:
            return exprs.bounds(exprs.parse(text), self.ranges)[0] < 0
        except exprs.ExprError:
            return True

    # ---- tile.copy --------------------------------------------------------------------------
    def op_copy(self, op, d: int) -> None:
        src, dst = op.operands
        ws, wd = self.plan.where(src), self.plan.where(dst)
        if wd == "gview":
            self.line(d, f"// nothing to do: the ops that read {self.name(dst)} read {self.name(src)} in place")
        elif ws == "mma":
            self.mma_copy_out(op, d)
        elif ws == "wtile":
            self.wtile_copy_out(op, d)
        elif (ws == "global" and d == 1 and wd == "shared" and id(dst) not in self.remote
              and self.can_cp_async(op)):  # d == 1: not in a loop
            # A copy into a shared tile outside loops goes through cp.async: no registers, and the
            # thread goes on to its next op; the first access to the tile waits for it
            # (codegen/cuda.py, `wait_copies`). Not for a tile peer blocks access: compute-sanitizer
            # racecheck reports the peer's DSMEM reads of cp.async-written data as hazards even
            # after wait_group and a cluster barrier (cluster_reduce_dsmem_pull.tk, H200,
            # 2026-11-21), and waiting before the barrier would leave nothing to overlap.
            self.chunk_loop(shape_of(dst), d, lambda ch, dd: self.load_chunk(op, ch, dd, async_=True))
            self.line(d, "tk_cp_async_commit();")
            self.in_flight[id(dst)] = dst
        elif ws == "global":
            self.chunk_loop(shape_of(dst), d, lambda ch, dd: self.load_chunk(op, ch, dd, async_=False))
        elif wd == "global" and id(op) in self.store_group:
            group, last = self.store_group[id(op)]
            if op is last:
                self.line(d, "// with " + ", ".join(f"{self.name(m.operands[0])}" for m in group if m is not op)
                          + ": whole windows, interleaved")
                self.store_interleaved(group, d)
            else:
                self.line(d, f"// stored with {self.name(last.operands[0])} below, interleaved")
        elif wd == "global":
            self.chunk_loop(shape_of(src), d, lambda ch, dd: self.store_chunk(op, ch, dd))
        else:
            def body(ch, dd):
                x = self.read(src, ch, dd, "sv")
                self.write(dst, ch, dd, lambda e: convert(x(e), src.type.dtype, dst.type.dtype), "ov")

            self.chunk_loop(shape_of(dst), d, body)

    def can_cp_async(self, op) -> bool:
        """Whether the global -> shared copy `op` can go through cp.async: same dtype, whole
        chunks of 4, 8 or 16-byte words."""
        src, dst = op.operands
        if src.type.dtype != dst.type.dtype or self.plan.where(dst) != "shared" or op.attrs.get("src_steps"):
            return False
        shape = shape_of(dst)
        width = self.plan.width(shape)
        texts = op.attrs["src_offsets"]
        size = SIZES[src.type.dtype]
        n = self.tensor_dims(src)[-1]
        vec = isinstance(n, int) and n % width == 0 and known_multiple(exprs.parse(texts[-1])) % width == 0
        if self.plan.smem[id(dst)].transposed:  # one element per cp.async (4 or 8 bytes)
            return vec and size >= 4
        return vec and width * size >= 4 and self.smem_word(dst, width) == min(16, width * size)

    def load_chunk(self, op, ch: Chunk, d: int, async_: bool) -> None:
        src, dst = op.operands
        gc = self.global_chunk(op, src, "src", ch.idx, ch.width)
        size = SIZES[src.type.dtype]
        if async_ and self.plan.smem[id(dst)].transposed:  # an element per copy, each to its column
            if gc.cond:
                self.line(d, f"const bool ok = {gc.cond};")
            for k in range(ch.width):
                s_at = f"&{self.name(dst)}[{self.smem_offset(dst, ch.idx[:-1] + [_add(ch.idx[-1], str(k))])}]"
                g_at = gc.ptr if not k else f"{gc.ptr} + {k}"
                self.line(d, f"tk_cp_async<{size}>({s_at}, ok ? {g_at} : {gc.base}, ok);" if gc.cond
                          else f"tk_cp_async<{size}>({s_at}, {g_at});")
            return
        if async_:
            soff = self.smem_offset(dst, ch.idx)
            per = gc.word // size
            if gc.cond:
                self.line(d, f"const bool ok = {gc.cond};")
            for k in range(ch.width * size // gc.word):
                s_at = f"&{self.name(dst)}[{soff}{f' + {k * per}' if k else ''}]"
                g_at = gc.ptr if not k else f"{gc.ptr} + {k * per}"
                if gc.cond:
                    self.line(d, f"tk_cp_async<{gc.word}>({s_at}, ok ? {g_at} : {gc.base}, ok);")
                else:
                    self.line(d, f"tk_cp_async<{gc.word}>({s_at}, {g_at});")
            return
        self.load_global(gc, src, ch.width, "gv", d)
        self.write(dst, ch, d, lambda e: convert(f"gv[{e}]", src.type.dtype, dst.type.dtype), "ov")

    def load_global(self, gc: GlobalChunk, tensor, width: int, tmp: str, d: int) -> None:
        """Declare `tmp[width]` and load the chunk `gc` of global `tensor` into it: one vector
        access, or guarded element by element; elements outside the tensor read 0."""
        zero = " = {}" if (gc.cond or gc.elem_cond) else ""
        ctype = C_TYPES[tensor.type.dtype]
        if gc.span:  # a strided chunk: the window that holds it, then every step-th element
            self.line(d, f"alignas(16) {ctype} {tmp}_w[{gc.span}]{zero};")
            load = f"tk_load<{gc.word}>({tmp}_w, {gc.ptr});"
            self.line(d, f"if ({gc.cond}) {load}" if gc.cond else load)
            self.line(d, f"{ctype} {tmp}[{width}];")
            phase = f" + {gc.phase}" if gc.phase else ""
            self.elem_loop(d, f"{tmp}[e] = {tmp}_w[e * {gc.step}{phase}];", width)
            return
        self.line(d, f"alignas(16) {ctype} {tmp}[{width}]{zero};")
        if gc.elem_cond:
            pre = f"if ({gc.cond}) " if gc.cond else ""
            self.line(d, f"{pre}{{")
            self.elem_loop(d + 1, f"if ({gc.elem_cond('e')}) {tmp}[e] = {gc.at('e')};", width)
            self.line(d, "}")
        else:
            load = f"tk_load<{gc.word}>({tmp}, {gc.ptr});"
            self.line(d, f"if ({gc.cond}) {load}" if gc.cond else load)

    def hoist_loads(self, ops: list) -> list:
        """`ops` (a loop body) in emission order: every copy of a window of an input tensor (one
        the kernel never writes) into a register tile moves up to the start of the op list, or to just after
        the last earlier op that touches that tile, loop or global load, so the loads of one trip are all in flight
        before its first barrier (decode attention: the V rows load with the K rows, not after
        the softmax). The offsets name only grid, loop and runtime scalar indices, all defined
        before the list starts; a tile's chunks are its own thread's, so no barrier is needed.
        Only in loop bodies: at the top level a load runs once, and holding it across barriers
        costs registers (rmsnorm's W row, hoisted above its reduction, took 1024-thread blocks
        from 32 to 40 registers per thread, one block per SM instead of two: 201.7 -> 301.2 us
        at 16384 x 4096 f32, H100, 2026-11-25)."""
        return hoist_input_loads(self.m.func, ops, lambda tile: self.plan.where(tile) == "regs")

    def store_groups(self, ops: list) -> None:
        """Find, in op list `ops`, groups of `step` copies of register tiles of one shape into
        the same tensor with the same strided last dim (`x[o : n : step]`), whose last-dim offsets
        differ by the constants 0 .. step - 1 and whose other offsets agree (the even and odd
        halves of RoPE's pairs): the last copy of a group stores every member interleaved, as
        whole windows (`strided_window`), instead of element by element; the others emit
        nothing. Only when no op between the first and the last member touches the tensor or
        writes a member's source."""
        def key(op):
            if op.name != "tile.copy" or op.operands[1].type.space != "global":
                return None
            src, dst = op.operands
            steps = op.attrs.get("dst_steps")
            if not steps or not 1 < steps[-1] <= MAX_SPAN_STEP or self.plan.where(src) != "regs":
                return None
            try:
                terms, c = split_constant(exprs.parse(op.attrs["dst_offsets"][-1]))
            except exprs.ExprError:
                return None
            return (id(dst), shape_of(src), tuple(op.attrs["dst_offsets"][:-1]), tuple(steps),
                    tuple(op.attrs.get("checked", ())), terms, c - c % steps[-1]), c % steps[-1]

        found: dict = {}  # group key -> {phase: position}, or None once a phase repeats
        for i, op in enumerate(ops):
            k = key(op)
            if k is None or (k[0] in found and found[k[0]] is None):
                continue
            members = found.setdefault(k[0], {})
            if k[1] in members:  # a second store of the same phase: no group
                found[k[0]] = None
                continue
            members[k[1]] = i
        for k, members in found.items():
            step = k[3][-1]
            if members is None or set(members) != set(range(step)):
                continue
            first, last = min(members.values()), max(members.values())
            group = [ops[members[p]] for p in range(step)]  # by phase
            tensor = group[0].operands[1]
            between = [o for j in range(first, last + 1) if j not in members.values() for o in ops[j].walk()]
            if any(any(v is tensor for v in o.operands) for o in between):
                continue
            if any(v is ops[j].operands[0] for j in members.values() for i in range(j + 1, last)
                   for o in ops[i].walk() for _, v in _written(o)):  # a source changes before the store
                continue
            head = group[0]
            if self.strided_window(head.attrs["dst_offsets"][-1], step, shape_of(tensor)[-1],
                                   self.plan.width(k[1]), SIZES[tensor.type.dtype]) is None:
                continue
            for m in group:
                self.store_group[id(m)] = (group, ops[last])

    def store_interleaved(self, group: list, d: int) -> None:
        """Store the members of a store group (`store_groups`, by phase) as whole windows."""
        head = group[0]
        dst = head.operands[1]
        shape = shape_of(head.operands[0])

        def body(ch, dd):
            gc = self.global_chunk(head, dst, "dst", ch.idx, ch.width, interleave=True)
            ttype = C_TYPES[dst.type.dtype]
            self.line(dd, f"alignas(16) {ttype} ov[{gc.span}];")
            for p, m in enumerate(group):
                src = m.operands[0]
                x = self.read(src, ch, dd, f"sv{p}")
                self.elem_loop(dd, f"ov[e * {gc.step} + {p}] = {convert(x('e'), src.type.dtype, dst.type.dtype)};",
                               ch.width)
            store = f"tk_store<{gc.word}>({gc.ptr}, ov);"
            self.line(dd, f"if ({gc.cond}) {store}" if gc.cond else store)

        self.chunk_loop(shape, d, body)

    def store_chunk(self, op, ch: Chunk, d: int) -> None:
        src, dst = op.operands
        x = self.read(src, ch, d, "sv")
        self.store_global(op, dst, ch.idx, ch.width, lambda e: convert(x(e), src.type.dtype, dst.type.dtype), d)

    def store_global(self, op, tensor, idx: list[str], width: int, value, d: int) -> None:
        """Write e -> `value(e)` (in the tensor's dtype) to the chunk of `tensor` at tile index
        `idx` of `op`'s tile, dropping elements outside the tensor."""
        gc = self.global_chunk(op, tensor, "dst", idx, width)
        ttype = C_TYPES[tensor.type.dtype]
        self.line(d, f"alignas(16) {ttype} ov[{width}];")
        self.elem_loop(d, f"ov[e] = {value('e')};", width)
        if gc.elem_cond:
            pre = f"if ({gc.cond}) " if gc.cond else ""
            self.line(d, f"{pre}{{")
            self.elem_loop(d + 1, f"if ({gc.elem_cond('e')}) {gc.at('e')} = ov[e];", width)
            self.line(d, "}")
            return
        store = f"tk_store<{gc.word}>({gc.ptr}, ov);"
        self.line(d, f"if ({gc.cond}) {store}" if gc.cond else store)


def _split_multiples(expr: str, n: int) -> tuple[list[str], str]:
    """The top-level terms of the sum `expr` that are multiples of `n` (`x * 64`, `128`), and the
    sum of the rest; `expr` itself in the second place when it is not a plain sum of terms."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and expr.startswith(" + ", i):
            terms.append(expr[start:i])
            start = i + 3
    terms.append(expr[start:])
    outer, inner = [], []
    for t in (t.strip() for t in terms):
        if t == "0":
            continue
        m = re.fullmatch(r"(?:\w+ \* )?(\d+)", t)
        (outer if m and int(m.group(1)) % n == 0 else inner).append(t)
    return outer, " + ".join(inner)

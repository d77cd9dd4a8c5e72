"""CUDA backend: tile.gemm on tensor cores (`mma.sync` m16n8k16) or as a SIMT loop; mma tiles.

Tensor cores take the gemm when M, N and K are multiples of 16, a and b are f16 (or both bf16)
shared tiles and the accumulator is f32. The output's 16x16 blocks are split over the warps as a
wm x wn grid (codegen/cuda_plan.warp_split); per 16-wide k step each warp loads its A blocks with
`ldmatrix.x4` and its B blocks with `ldmatrix.x4.trans` from shared memory and issues two
m16n8k16 mma.sync per output block. A block's 8 accumulator floats per lane sit at (g = lane / 4,
t = lane % 4): [0, 1] row g, columns 2t, 2t + 1; [2, 3] row g + 8; [4, 5] row g, columns 8 + 2t,
9 + 2t; [6, 7] row g + 8 (PTX ISA, "Matrix fragments for mma.m16n8k16"). An accumulator placed
`mma` stays in those registers across ops and is stored straight from them (16 bytes per lane
after a transpose within each quad of lanes, where the tile allows); one placed in shared
memory is read into them and written back around each gemm. Everything else runs as a SIMT loop:
each thread computes the products of its chunks of the accumulator, summing K in f32 (f64 for
f64), then adds the sum to the accumulator and rounds once, like the interpreter.

A gemm with a warp tiling (`with warp(WM, WN, WNITER) thread(TM, TN)`, dsl/warp_tiling.py) runs
as the register-tiled SIMT gemm of seed 002's SGEMM section (the "warptiling" kernel of Simon
Boehm's CUDA SGEMM worklog): warp w owns rows (w / (BN / WN)) * WM and columns (w % (BN / WN)) * WN
of the tile; lane l owns, in each of the warp's WMITER x WNITER sub-tiles, the TM x TN piece at
row (l / (WSUBN / TN)) * TM, column (l % (WSUBN / TN)) * TN. Per k the thread loads its WMITER * TM
values of A's column k (A is stored transposed: TM consecutive floats, vector loads) and its
WNITER * TN values of B's row k, then does the outer product's WMITER * TM * WNITER * TN FMAs into
accumulators that stay in its registers across the whole K loop (`wtile` placement) and are
stored from there, TN consecutive elements at a time.
"""

from __future__ import annotations

from dsl import exprs
from dsl.warp_tiling import WarpTiling
from codegen.cuda_plan import OTHER, GemmPlan, known_multiple, shape_of
from codegen.cuda_prelude import C_TYPES, SIZES, compute_dtype, convert, literal

# (row offset, column offset) of accumulator floats [2h, 2h + 1] of a 16x16 block, h = 0..3
PAIRS = [(0, 0), (8, 0), (0, 8), (8, 8)]


def _times16(x: str) -> str:
    return f"({x}) * 16" if " " in x else f"{x} * 16"


class GemmMixin:
    """tile.gemm and the ops on mma-placed tiles; mixed into codegen/cuda._Emitter."""

    def op_gemm(self, op, d: int) -> None:
        gp = self.plan.gemms[id(op)]
        if gp.kind == "mma":
            self.mma_gemm(op, gp, d)
        elif gp.kind == "wtile":
            self.wtile_gemm(op, gp.tiling, d)
        else:
            self.simt_gemm(op, d)

    # ---- warps and fragments ----------------------------------------------------------------
    def warp_coords(self, gp: GemmPlan, d: int):
        """Declare this warp's position in the wm x wn grid; returns x -> row block, y -> col block."""
        if gp.wm > 1 and gp.wn > 1:
            self.line(d, f"const int wm = warp / {gp.wn}, wn = warp % {gp.wn};")
        elif gp.wm > 1:
            self.line(d, "const int wm = warp;")
        elif gp.wn > 1:
            self.line(d, "const int wn = warp;")
        row = (lambda x: x) if gp.wm == 1 else (lambda x: f"wm * {gp.fm} + {x}" if gp.fm > 1 else "wm")
        col = (lambda y: y) if gp.wn == 1 else (lambda y: f"wn * {gp.fn} + {y}" if gp.fn > 1 else "wn")
        return row, col

    def frag_guard(self, gp: GemmPlan, row, col, x: str = "fi", y: str | None = "fj") -> str:
        """Condition that block (x, y) of this warp lies inside the output ("" when always)."""
        conds = []
        if x is not None and gp.wm * gp.fm > gp.mb:
            conds.append(f"{row(x)} < {gp.mb}")
        if y is not None and gp.wn * gp.fn > gp.nb:
            conds.append(f"{col(y)} < {gp.nb}")
        return f"if ({' && '.join(conds)}) " if conds else ""

    def for_frags(self, gp: GemmPlan, d: int) -> int:
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int fi = 0; fi < {gp.fm}; ++fi)")
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int fj = 0; fj < {gp.fn}; ++fj)")
        return d + 2

    def mma_fill(self, v, value: float, d: int) -> None:
        gp = self.plan.acc_split[id(v)]
        dd = self.for_frags(gp, d)
        self.line(dd, "#pragma unroll")
        self.line(dd, f"for (int e = 0; e < 8; ++e) {self.name(v)}[fi][fj][e] = {float(value)!r}f;")

    def lane_pairs(self, gp: GemmPlan, d: int, row, col, body) -> None:
        """For each 16x16 block of this warp and each of the lane's 4 accumulator pairs:
        `body(depth, h)` with `row`, `col` (tile indices of the pair's first element) declared.
        `lane` and `warp` must be declared."""
        self.line(d, "{")
        d += 1
        self.line(d, "const int grp = lane / 4, tig = lane % 4;  // mma.m16n8k16 accumulator layout")
        dd = self.for_frags(gp, d)
        self.line(dd, f"{self.frag_guard(gp, row, col)}{{")
        for h, (dr, dc) in enumerate(PAIRS):
            r = f"{_times16(row('fi'))} + grp" + (f" + {dr}" if dr else "")
            c = f"{_times16(col('fj'))} + 2 * tig" + (f" + {dc}" if dc else "")
            self.line(dd + 1, "{")
            self.line(dd + 2, f"const int row = {r}, col = {c};")
            body(dd + 2, h)
            self.line(dd + 1, "}")
        self.line(dd, "}")
        self.line(d - 1, "}")

    # ---- tensor cores -----------------------------------------------------------------------
    # A fragments kept in registers across a loop: at most this many registers per thread.
    HOIST_REGS = 16

    def hoist_a_fragments(self, loop, d: int, st) -> None:
        """Load once, before `loop`, the A fragments of each tensor-core gemm in it whose A tile
        is not written inside the loop (loop-invariant: miss.tk's f16 shard sums against every N
        tile of B), when they fit HOIST_REGS registers. H200, miss.tk M16384 K4096 N4096 R64:
        179.2 us instead of 186.6 (docs/PERFORMANCE.md)."""
        written = {id(o.operands[-1]) for o in loop.walk() if o.operands and o.name != "tile.for"}
        allocated = {id(o.result) for o in loop.walk() if o.name == "tile.alloc"}
        for g in loop.walk():
            if g.name != "tile.gemm" or id(g) in self.hoisted:
                continue
            gp = self.plan.gemms[id(g)]
            a = g.operands[0]
            if gp.kind != "mma" or id(a) in written or id(a) in allocated or self.plan.where(a) != "shared":
                continue
            k = shape_of(a)[1]
            if (k // 16) * gp.fm * 4 > self.HOIST_REGS:
                continue
            self.sync([self.access(a, False, OTHER)], d, st)
            name = self._unique(f"fa_{self.name(a)}")
            self.line(d, f"// the A fragments of {self.describe(g)}: the same in every iteration of the loop below")
            self.line(d, f"unsigned {name}[{k // 16}][{gp.fm}][4];")
            self.line(d, "{")
            row, col = self.warp_coords(gp, d + 1)
            at = self.smem_offset(a, [f"{_times16(row('fi'))} + lane % 16", "kk + lane / 16 * 8"])
            self.line(d + 1, "#pragma unroll")
            self.line(d + 1, f"for (int kk = 0; kk < {k}; kk += 16)")
            self.line(d + 2, "#pragma unroll")
            self.line(d + 2, f"for (int fi = 0; fi < {gp.fm}; ++fi) {self.frag_guard(gp, row, col, y=None)}"
                      f"tk_ldmatrix_x4({name}[kk / 16][fi], &{self.name(a)}[{at}]);")
            self.line(d, "}")
            self.hoisted[id(g)] = name

    def mma_gemm(self, op, gp: GemmPlan, d: int) -> None:
        a, b, acc = op.operands
        k = shape_of(a)[1]
        ctype = C_TYPES[a.type.dtype]
        self.line(d, "{")
        d += 1
        row, col = self.warp_coords(gp, d)
        in_smem = self.plan.where(acc) == "shared"
        c = self.name(acc)
        if in_smem:  # the accumulator lives in shared memory: bring this warp's blocks in
            c = "cf"
            self.line(d, f"float cf[{gp.fm}][{gp.fn}][8];")
            self.lane_pairs(gp, d, row, col, lambda dd, h: self.line(
                dd, f"cf[fi][fj][{2 * h}] = {self.name(acc)}[{self.smem_offset(acc, ['row', 'col'])}], "
                    f"cf[fi][fj][{2 * h + 1}] = {self.name(acc)}[{self.smem_offset(acc, ['row', 'col'])} + 1];"))
        steps = k // 16
        self.line(d, "#pragma unroll" if steps <= 8 else "#pragma unroll 2")
        self.line(d, f"for (int kk = 0; kk < {k}; kk += 16) {{")
        hoisted = self.hoisted.get(id(op))
        fa = f"{hoisted}[kk / 16][fi]" if hoisted else "fa[fi]"
        if hoisted:
            self.line(d + 1, f"unsigned fb[{gp.fn}][4];  // A fragments: {hoisted}, loaded before the loop")
        else:
            self.line(d + 1, f"unsigned fa[{gp.fm}][4], fb[{gp.fn}][4];")
            self.line(d + 1, "#pragma unroll")
            at = self.smem_offset(a, [f"{_times16(row('fi'))} + lane % 16", "kk + lane / 16 * 8"])
            self.line(d + 1, f"for (int fi = 0; fi < {gp.fm}; ++fi) {self.frag_guard(gp, row, col, y=None)}"
                      f"tk_ldmatrix_x4(fa[fi], &{self.name(a)}[{at}]);")
        self.line(d + 1, "#pragma unroll")
        bt = self.smem_offset(b, ["kk + lane % 16", f"{_times16(col('fj'))} + lane / 16 * 8"])
        self.line(d + 1, f"for (int fj = 0; fj < {gp.fn}; ++fj) {self.frag_guard(gp, row, col, x=None)}"
                  f"tk_ldmatrix_x4_trans(fb[fj], &{self.name(b)}[{bt}]);")
        dd = self.for_frags(gp, d + 1)
        self.line(dd, f"{self.frag_guard(gp, row, col)}{{")
        self.line(dd + 1, f"tk_mma_16816<{ctype}>(&{c}[fi][fj][0], {fa}, fb[fj][0], fb[fj][1]);")
        self.line(dd + 1, f"tk_mma_16816<{ctype}>(&{c}[fi][fj][4], {fa}, fb[fj][2], fb[fj][3]);")
        self.line(dd, "}")
        self.line(d, "}")
        if in_smem:
            self.lane_pairs(gp, d, row, col, lambda dd, h: self.line(
                dd, f"{self.name(acc)}[{self.smem_offset(acc, ['row', 'col'])}] = cf[fi][fj][{2 * h}], "
                    f"{self.name(acc)}[{self.smem_offset(acc, ['row', 'col'])} + 1] = cf[fi][fj][{2 * h + 1}];"))
        self.line(d - 1, "}")

    def mma_copy_out(self, op, d: int) -> None:
        """Copy an mma-placed tile to a global tensor or a shared tile, straight from the
        registers: two consecutive elements per store, or eight (see `wide_store_out`)."""
        src, dst = op.operands
        gp = self.plan.acc_split[id(src)]
        self.line(d, "{")
        row, col = self.warp_coords(gp, d + 1)
        if self.can_store_wide(op, gp):
            self.wide_store_out(op, gp, d + 1, row, col)
            self.line(d, "}")
            return

        def body(dd: int, h: int) -> None:
            value = lambda e: convert(f"{self.name(src)}[fi][fj][{2 * h} + {e}]", "f32", dst.type.dtype)  # noqa: E731
            if dst.type.space == "global":
                self.store_global(op, dst, ["row", "col"], 2, value, dd)
                return
            self.line(dd, f"alignas(16) {C_TYPES[dst.type.dtype]} ov[2];")
            self.elem_loop(dd, f"ov[e] = {value('e')};", 2)
            self.line(dd, f"tk_store<{self.smem_word(dst, 2)}>(&{self.name(dst)}"
                      f"[{self.smem_offset(dst, ['row', 'col'])}], ov);")

        self.lane_pairs(gp, d + 1, row, col, body)
        self.line(d, "}")

    def can_store_wide(self, op, gp: GemmPlan) -> bool:
        """Whether `wide_store_out` can store this copy: a 16-bit global destination, an even number
        of 16x16 blocks per warp along N (all inside the tile), 16-byte aligned rows and columns."""
        src, dst = op.operands
        if dst.type.space != "global" or SIZES[dst.type.dtype] != 2 or gp.fn % 2 or gp.wn * gp.fn > gp.nb:
            return False
        offset = exprs.parse(op.attrs["dst_offsets"][-1])
        n = self.tensor_dims(dst)[-1]
        return isinstance(n, int) and n % 8 == 0 and known_multiple(offset) % 8 == 0

    def wide_store_out(self, op, gp: GemmPlan, d: int, row, col) -> None:
        """Store an mma-placed tile to global memory 16 bytes per lane: the four lanes of a quad
        hold, for each row, the pairs of four adjacent 16x8 blocks (64 bytes); a 4x4 transpose in
        the quad (`tk_quad_transpose`) gives each lane 8 consecutive elements of one block. A warp
        writes 64 contiguous bytes of each of 8 rows per store (whole 32-byte sectors) instead
        of 16 bytes per row, so a tile takes a quarter of the stores and L2 requests."""
        src, dst = op.operands
        ctype = C_TYPES[dst.type.dtype]
        self.line(d, "{")
        d += 1
        self.line(d, "const int grp = lane / 4, tig = lane % 4;  // mma.m16n8k16 accumulator layout")
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int fi = 0; fi < {gp.fm}; ++fi) {self.frag_guard(gp, row, col, y=None)}{{")
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int fq = 0; fq < {gp.fn // 2}; ++fq)  // blocks fj = 2 fq, 2 fq + 1: four 16x8 blocks")
        self.line(d + 2, "#pragma unroll")
        self.line(d + 2, "for (int rh = 0; rh < 2; ++rh) {  // rows grp, grp + 8")
        dd = d + 3
        self.line(dd, f"alignas(16) {ctype} pv[8];")
        self.line(dd, "#pragma unroll")
        self.line(dd, "for (int b = 0; b < 4; ++b) {  // 16x8 block b: the pair at columns 2 tig, 2 tig + 1")
        acc = f"{self.name(src)}[fi][2 * fq + b / 2][4 * (b % 2) + 2 * rh"
        self.line(dd + 1, f"pv[2 * b] = {convert(acc + ']', 'f32', dst.type.dtype)};")
        self.line(dd + 1, f"pv[2 * b + 1] = {convert(acc + ' + 1]', 'f32', dst.type.dtype)};")
        self.line(dd, "}")
        self.line(dd, "tk_quad_transpose(pv, tig);  // now columns 8 tig .. 8 tig + 7 of the four blocks")
        self.line(dd, f"const int row = {_times16(row('fi'))} + grp + 8 * rh, "
                      f"col = {_times16(col('2 * fq'))} + 8 * tig;")
        self.store_global(op, dst, ["row", "col"], 8, lambda e: f"pv[{e}]", dd)
        self.line(d + 2, "}")
        self.line(d, "}")
        self.line(d - 1, "}")

    # ---- SIMT -------------------------------------------------------------------------------
    def simt_gemm(self, op, d: int) -> None:
        a, b, acc = op.operands
        k = shape_of(a)[1]
        ct = compute_dtype(acc.type.dtype)
        ctype = C_TYPES[ct]

        def body(ch, dd):
            row, col = ch.idx[0], ch.idx[1]
            self.line(dd, f"{ctype} sum[{ch.width}] = {{}};")
            self.line(dd, "#pragma unroll 4")
            self.line(dd, f"for (int kk = 0; kk < {k}; ++kk) {{")
            av = convert(f"{self.name(a)}[{self.smem_offset(a, [row, 'kk'])}]", a.type.dtype, ct)
            self.line(dd + 1, f"const {ctype} av = {av};")
            self.line(dd + 1, f"alignas(16) {C_TYPES[b.type.dtype]} bv[{ch.width}];")
            self.line(dd + 1, f"tk_load<{self.smem_word(b, ch.width)}>(bv, &{self.name(b)}"
                      f"[{self.smem_offset(b, ['kk', col])}]);")
            self.elem_loop(dd + 1, f"sum[e] += av * {convert('bv[e]', b.type.dtype, ct)};", ch.width)
            self.line(dd, "}")
            x = self.read(acc, ch, dd, "sv")
            self.write(acc, ch, dd, lambda e: convert(f"{convert(x(e), acc.type.dtype, ct)} + sum[{e}]", ct,
                                                       acc.type.dtype), "ov")

        self.chunk_loop(shape_of(acc), d, body)

    # ---- SIMT, warp-tiled -------------------------------------------------------------------
    def wtile_coords(self, t: WarpTiling, d: int) -> tuple:
        """Declare this thread's warp tile (wtr, wtc) and its place in a sub-tile (ltr, ltc);
        returns (row(wi, i), col(wj, j)): C expressions of the tile row of accumulator row
        wi * TM + i and the tile column of accumulator column wj * TN + j. `warp`, `lane` declared."""
        self.line(d, f"const int wtr = warp / {t.bn // t.wn}, wtc = warp % {t.bn // t.wn};  "
                     f"// this warp's {t.wm} x {t.wn} tile")
        self.line(d, f"const int ltr = lane / {t.lanes_n}, ltc = lane % {t.lanes_n};  "
                     f"// this thread's {t.tm} x {t.tn} piece of each {t.wsubm} x {t.wsubn} sub-tile")

        def row(wi: str, i: str) -> str:
            return f"wtr * {t.wm} + {wi} * {t.wsubm} + ltr * {t.tm} + {i}"

        def col(wj: str, j: str) -> str:
            return f"wtc * {t.wn} + {wj} * {t.wsubn} + ltc * {t.tn} + {j}"

        return row, col

    def wtile_word(self, v, count: int) -> int:
        """Bytes per shared load of `count` consecutive elements of tile `v` whose offsets are
        multiples of `count` (a power of two up to 16 that divides `count` and the row pitch)."""
        size = SIZES[v.type.dtype]
        per = 1
        while per * 2 * size <= 16 and count % (per * 2) == 0 and self.plan.smem[id(v)].pitch % (per * 2) == 0:
            per *= 2
        return per * size

    def wtile_fill(self, v, value: float, d: int) -> None:
        t = self.plan.acc_split[id(v)].tiling
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int ti = 0; ti < {t.wmiter * t.tm}; ++ti)")
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int tj = 0; tj < {t.wniter * t.tn}; ++tj) {self.name(v)}[ti][tj] = "
                         f"{literal(value, v.type.dtype)};")

    def wtile_gemm(self, op, t: WarpTiling, d: int) -> None:
        """acc += a @ b, warp-tiled (module docstring): a is a transposed shared tile, b a shared
        tile, acc a `wtile` register tile (codegen/cuda_plan.py)."""
        a, b, acc = op.operands
        k = shape_of(a)[1]
        ct = compute_dtype(acc.type.dtype)
        at, bt = C_TYPES[a.type.dtype], C_TYPES[b.type.dtype]
        self.line(d, "{")
        d += 1
        row, col = self.wtile_coords(t, d)
        fmas = t.wmiter * t.tm * t.wniter * t.tn
        # Fully unrolled the k loop is k * fmas FMAs of straight-line code; past that, unroll 4.
        self.line(d, "#pragma unroll" if k * fmas <= 16384 else "#pragma unroll 4")
        self.line(d, f"for (int kk = 0; kk < {k}; ++kk) {{")
        self.line(d + 1, f"alignas(16) {at} rm[{t.wmiter}][{t.tm}];  // A[rows, kk] of this thread's pieces")
        self.line(d + 1, f"alignas(16) {bt} rn[{t.wniter}][{t.tn}];  // B[kk, columns] of this thread's pieces")
        a_at = self.smem_offset(a, [row("wi", "0"), "kk"])
        b_at = self.smem_offset(b, ["kk", col("wj", "0")])
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int wi = 0; wi < {t.wmiter}; ++wi) "
                         f"tk_load<{self.wtile_word(a, t.tm)}>(rm[wi], &{self.name(a)}[{a_at}]);")
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int wj = 0; wj < {t.wniter}; ++wj) "
                         f"tk_load<{self.wtile_word(b, t.tn)}>(rn[wj], &{self.name(b)}[{b_at}]);")
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int ti = 0; ti < {t.wmiter * t.tm}; ++ti)")
        self.line(d + 2, "#pragma unroll")
        self.line(d + 2, f"for (int tj = 0; tj < {t.wniter * t.tn}; ++tj)")
        prod = (f"{convert(f'rm[ti / {t.tm}][ti % {t.tm}]', a.type.dtype, ct)} * "
                f"{convert(f'rn[tj / {t.tn}][tj % {t.tn}]', b.type.dtype, ct)}")
        self.line(d + 3, f"{self.name(acc)}[ti][tj] += {prod};")
        self.line(d, "}")
        self.line(d - 1, "}")

    def wtile_copy_out(self, op, d: int) -> None:
        """Copy a `wtile` register tile to a global tensor (TN consecutive elements per thread and
        row, in vector stores where the tensor allows, guarded at its edges) or a shared tile."""
        src, dst = op.operands
        t = self.plan.acc_split[id(src)].tiling
        self.line(d, "{")
        row, col = self.wtile_coords(t, d + 1)
        piece = next(w for w in (8, 4, 2, 1) if t.tn % w == 0)  # a power of two: whole vector stores
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int ti = 0; ti < {t.wmiter * t.tm}; ++ti)")
        self.line(d + 2, "#pragma unroll")
        self.line(d + 2, f"for (int tj = 0; tj < {t.wniter * t.tn}; tj += {piece}) {{")
        dd = d + 3
        self.line(dd, f"const int row = {row(f'(ti / {t.tm})', f'ti % {t.tm}')}, "
                      f"col = {col(f'(tj / {t.tn})', f'tj % {t.tn}')};")
        value = lambda e: convert(f"{self.name(src)}[ti][tj + {e}]", src.type.dtype, dst.type.dtype)  # noqa: E731
        if dst.type.space == "global":
            self.store_global(op, dst, ["row", "col"], piece, value, dd)
        else:
            self.elem_loop(dd, f"{self.name(dst)}[{self.smem_offset(dst, ['row', 'col + e'])}] = {value('e')};", piece)
        self.line(d + 2, "}")
        self.line(d, "}")

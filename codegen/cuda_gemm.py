"""CUDA backend: tile.gemm on tensor cores (WMMA 16x16x16) or as a SIMT loop, and WMMA tiles.

Tensor cores (`nvcuda::wmma`, sm_70+; bf16 sm_80+) take the gemm when M, N and K are multiples of
16, a and b are f16 (or both bf16) shared tiles and the accumulator is f32. The output's 16x16
fragments are split over the warps as a wm x wn grid (codegen/cuda_plan.warp_split); each warp
loads its A and B fragments from shared memory per 16-wide k step. An accumulator placed `wmma`
stays in registers across ops (fill -> gemm ... -> copy out through a per-warp staging tile);
one placed in shared memory is loaded and stored around each gemm. Everything else runs as a
SIMT loop: each thread computes the products of its chunks of the accumulator, summing K in f32
(f64 for f64), then adds the sum to the accumulator and rounds once, like the interpreter.
"""

from __future__ import annotations

from codegen.cuda_plan import WMMA_SCRATCH_PITCH, GemmPlan, shape_of
from codegen.cuda_prelude import C_TYPES, compute_dtype, convert

ACC_FRAGMENT = "wmma::fragment<wmma::accumulator, 16, 16, 16, float>"


def _frag(kind: str, dtype: str) -> str:
    return f"wmma::fragment<wmma::{kind}, 16, 16, 16, {C_TYPES[dtype]}, wmma::row_major>"


class GemmMixin:
    """tile.gemm and the ops on WMMA-placed tiles; mixed into codegen/cuda._Emitter."""

    def op_gemm(self, op, d: int) -> None:
        gp = self.plan.gemms[id(op)]
        if gp.kind == "wmma":
            self.wmma_gemm(op, gp, d)
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
        """Condition that fragment (x, y) of this warp lies inside the output ("" when always)."""
        conds = []
        if gp.wm * gp.fm > gp.mb:
            conds.append(f"{row(x)} < {gp.mb}")
        if y is not None and gp.wn * gp.fn > gp.nb:
            conds.append(f"{col(y)} < {gp.nb}")
        return f"if ({' && '.join(conds)}) " if conds else ""

    def for_frags(self, gp: GemmPlan, d: int, both: bool = True) -> int:
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int fi = 0; fi < {gp.fm}; ++fi)")
        if not both:
            return d + 1
        self.line(d + 1, "#pragma unroll")
        self.line(d + 1, f"for (int fj = 0; fj < {gp.fn}; ++fj)")
        return d + 2

    def wmma_fill(self, v, value: float, d: int) -> None:
        gp = self.plan.acc_split[id(v)]
        dd = self.for_frags(gp, d)
        self.line(dd, f"wmma::fill_fragment({self.name(v)}[fi][fj], {float(value)!r}f);")

    # ---- tensor cores -----------------------------------------------------------------------
    def wmma_gemm(self, op, gp: GemmPlan, d: int) -> None:
        a, b, acc = op.operands
        k = shape_of(a)[1]
        lda, ldb = self.plan.smem[id(a)].pitch, self.plan.smem[id(b)].pitch
        self.line(d, "{")
        d += 1
        row, col = self.warp_coords(gp, d)
        in_smem = self.plan.where(acc) == "shared"
        c = self.name(acc)
        if in_smem:  # the accumulator lives in shared memory: bring this warp's fragments in
            ldc = self.plan.smem[id(acc)].pitch
            c = "cf"
            self.line(d, f"{ACC_FRAGMENT} cf[{gp.fm}][{gp.fn}];")
            dd = self.for_frags(gp, d)
            at = self.smem_offset(acc, [f"({row('fi')}) * 16", f"({col('fj')}) * 16"])
            self.line(dd, f"{self.frag_guard(gp, row, col)}wmma::load_matrix_sync(cf[fi][fj], &{self.name(acc)}[{at}], "
                      f"{ldc}, wmma::mem_row_major);")
        steps = k // 16
        self.line(d, "#pragma unroll" if steps <= 8 else "#pragma unroll 2")
        self.line(d, f"for (int kk = 0; kk < {k}; kk += 16) {{")
        self.line(d + 1, f"{_frag('matrix_a', a.type.dtype)} fa[{gp.fm}];")
        self.line(d + 1, f"{_frag('matrix_b', b.type.dtype)} fb[{gp.fn}];")
        self.line(d + 1, "#pragma unroll")
        at = self.smem_offset(a, [f"({row('fi')}) * 16", "kk"])
        self.line(d + 1, f"for (int fi = 0; fi < {gp.fm}; ++fi) {self.frag_guard(gp, row, col, y=None)}"
                  f"wmma::load_matrix_sync(fa[fi], &{self.name(a)}[{at}], {lda});")
        self.line(d + 1, "#pragma unroll")
        bt = self.smem_offset(b, ["kk", f"({col('fj')}) * 16"])
        guard_b = f"if ({col('fj')} < {gp.nb}) " if gp.wn * gp.fn > gp.nb else ""
        self.line(d + 1, f"for (int fj = 0; fj < {gp.fn}; ++fj) {guard_b}"
                  f"wmma::load_matrix_sync(fb[fj], &{self.name(b)}[{bt}], {ldb});")
        dd = self.for_frags(gp, d + 1)
        self.line(dd, f"{self.frag_guard(gp, row, col)}wmma::mma_sync({c}[fi][fj], fa[fi], fb[fj], {c}[fi][fj]);")
        self.line(d, "}")
        if in_smem:
            dd = self.for_frags(gp, d)
            at = self.smem_offset(acc, [f"({row('fi')}) * 16", f"({col('fj')}) * 16"])
            self.line(dd, f"{self.frag_guard(gp, row, col)}wmma::store_matrix_sync(&{self.name(acc)}[{at}], cf[fi][fj], "
                      f"{self.plan.smem[id(acc)].pitch}, wmma::mem_row_major);")
        self.line(d - 1, "}")

    def wmma_copy_out(self, op, d: int) -> None:
        """Copy a WMMA-placed tile to a global tensor or a shared tile: each warp stores a fragment
        to its 16x16 staging tile, then each lane converts and writes 8 consecutive elements."""
        src, dst = op.operands
        gp = self.plan.acc_split[id(src)]
        p = WMMA_SCRATCH_PITCH
        self.line(d, "{")
        d += 1
        row, col = self.warp_coords(gp, d)
        self.line(d, f"float* const stage = tk_scratch + warp * {16 * p};  // this warp's 16x16 staging tile")
        self.line(d, "const int fr = lane / 2, fc = lane % 2 * 8;  // this lane moves row fr, columns fc + [0, 8)")
        dd = self.for_frags(gp, d)
        self.line(dd, f"{self.frag_guard(gp, row, col)}{{")
        b = dd + 1
        self.line(b, f"wmma::store_matrix_sync(stage, {self.name(src)}[fi][fj], {p}, wmma::mem_row_major);")
        self.line(b, "__syncwarp();")
        self.line(b, "alignas(16) float fv[8];")
        self.line(b, f"tk_load<16>(fv, &stage[fr * {p} + fc]);")
        self.line(b, f"const int row = ({row('fi')}) * 16 + fr, col = ({col('fj')}) * 16 + fc;")
        value = lambda e: convert(f"fv[{e}]", "f32", dst.type.dtype)  # noqa: E731
        if dst.type.space == "global":
            self.store_global(op, dst, ["row", "col"], 8, value, b)
        else:
            self.line(b, f"alignas(16) {C_TYPES[dst.type.dtype]} ov[8];")
            self.elem_loop(b, f"ov[e] = {value('e')};", 8)
            self.line(b, f"tk_store<{self.smem_word(dst, 8)}>(&{self.name(dst)}[{self.smem_offset(dst, ['row', 'col'])}], ov);")
        self.line(b, "__syncwarp();")
        self.line(dd, "}")
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

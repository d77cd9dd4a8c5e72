"""TileLang lowering of the sampled gemm (SDDMM, seed 003): a `tiles` grid holding one `tile.sampled_gemm`.

Called by codegen/tilelang.py's emitter (both forms) for a `tile.launch` with `tiles`. The prim_func
runs over the launch data of tkc.sparse.DispatchPlan, which the runtime passes after the outputs:
Bt [N, K] (B transposed, B's dtype), tc_ptr i32[n_tc + 1], tc_m i32[n_tc], tc_n i32[n_tc],
tc_order i32[tc_ptr[-1]], dot_order i32[n_dot], tc_rc i32[tc_ptr[-1]] (read by the `cuda`
backend only). Their lengths change with the pattern, so they are
TileLang dynamic dims (`T.dynamic`: the compiled kernel reads them from the tensors' shapes) and
one compile serves every pattern of the same M, N, K, NNZ. It holds two kernels, each launched by
the host code only when its grid is not empty (`if n_tc > 0:`), so the dot products reserve none
of the tiles' shared memory:

- the tile kernel, n_tc blocks: block b computes the tile at rows m*BM + [0, BM) and columns
  n*BN + [0, BN), (m, n) = (tc_m[b], tc_n[b]) bound to the grid's index names. GPU: K in chunks
  of BK through shared memory (`T.copy` zero-fills past M, N and K; two pipeline stages when the
  rows allow cp.async), `T.gemm` on tensor cores into an f32 fragment padded up to a shape T.gemm
  takes (f32 operands: a SIMT loop nest; the shapes, BK and the stages are passes/smem_sddmm.py's
  `tilelang_tiles`, which check-smem-fit reads), the fragment copied to shared memory; then
  thread tx writes entries tc_order[tc_ptr[b] + tx + j * threads]: P[e] = C[row_e - m*BM,
  col_e - n*BN]. CPU: the same tile as f32 loops, then its entries one after another. Padding
  rows and columns hold products of neighbouring rows (or zeros) that no entry reads.
- the dot kernel: an f32 dot product over K of A's row and Bt's row per entry of dot_order
  (guarded at the end). GPU: G lanes per entry (`dot_group`: up to a warp, at least 8 of K's
  elements per lane), threads / G entries per block, each lane K's elements l, l + G, ..., then a
  `T.shfl_xor` reduction over the group. CPU: `threads` entries per block, one after another.

P is f32[NNZ] (P[e]) or dense [M, N] (P[row_e, col_e]; the runtime zero-fills it). Which tiles go
where (`dot_below`, passes/sparse_dispatch.py) is the plan's business: the kernel computes any split.
Unsupported forms (anything else in the grid, runtime scalars) are located TkErrors.
"""

from __future__ import annotations

from dsl import exprs
from dsl.diagnostics import TkError, error
from dsl.ir import Op
from dsl.ops import scalars
from passes import smem_sddmm
from passes.targets import DEFAULT_SM, SMEM_LIMITS

# The launch data after the outputs, in the runtime's order (tkc/runtime.py, Kernel.__call__), and
# the dynamic dim of each one's length (tc_ptr has its own: n_tc + 1 is not a bindable shape).
EXTRAS = (("Bt", None), ("tc_ptr", "n_tc_ptr"), ("tc_m", "n_tc"), ("tc_n", "n_tc"), ("tc_order", "n_tc_entries"),
          ("dot_order", "n_dot"), ("tc_rc", "n_tc_entries"))
LENGTHS = ("n_tc", "n_tc_ptr", "n_tc_entries", "n_dot")


def sampled_gemm(em, launch: Op) -> Op:
    """The one `tile.sampled_gemm` of `launch` (a `tiles` grid); a located TkError when the grid
    holds anything else or the kernel takes runtime scalars (neither is lowered)."""
    target = "tilelang-cpu" if em.cpu else "tilelang"
    ops = launch.body.ops
    if len(ops) != 1 or ops[0].name != "tile.sampled_gemm":
        other = next((op for op in ops if op.name != "tile.sampled_gemm"), launch)
        raise error(other.loc, f"target `{target}` lowers a `tiles` grid that holds one sampled gemm "
                    f"(`P[S] = A[...] @ B[...]`), got {len(ops)} ops",
                    "move other work into its own kernel, or run it with `--target interp`")
    if scalars(em.m.func):
        raise error(em.m.func.loc, f"target `{target}` lowers a sampled-gemm kernel without runtime scalars; "
                    f"this one takes {', '.join(f'`{n}`' for n, _, _ in scalars(em.m.func))}",
                    "make the scalar a problem dim or a schedule constant")
    return ops[0]


def declare(em, launch: Op) -> str:
    """Emit the module-level dynamic dims of the launch data; returns its parameters (text after
    the kernel's own parameters, with a leading comma). Names are made unique in `em`."""
    gemm = sampled_gemm(em, launch)
    b = gemm.operands[1]
    em.sddmm_names = {n: em.indices_named(n) for n in (*LENGTHS, *(x for x, _ in EXTRAS))}
    lengths = [em.sddmm_names[n] for n in LENGTHS]
    em.line(0, "# the SDDMM launch data (tkc.sparse.DispatchPlan) varies in length with the pattern: dynamic dims")
    em.line(0, f"{', '.join(lengths)} = T.dynamic(\"{', '.join(lengths)}\")")
    em.line(0, "")
    from codegen.tilelang import TL_DTYPES

    n, k = em.dims(b)[1], em.dims(b)[0]
    names = em.sddmm_names
    params = [f"{names['Bt']}: T.Tensor(({n}, {k}), {TL_DTYPES[b.type.dtype]})"]
    params += [f"{names[x]}: T.Tensor(({names[length]},), T.int32)" for x, length in EXTRAS[1:]]
    return "".join(", " + p for p in params)


def emit_launch(em, launch: Op) -> None:
    """The kernel body of a `tiles` grid (see the module docstring), at depth 1 of the prim_func."""
    gemm = sampled_gemm(em, launch)
    if gemm.attrs["a_offsets"][1] != "0" or gemm.attrs["b_offsets"][0] != "0":
        raise error(gemm.loc, "the sampled gemm reduces all of K: its K offsets must be 0, got "
                    f"{gemm.attrs['a_offsets'][1]!r} and {gemm.attrs['b_offsets'][0]!r}")
    _SddmmBody(em, launch, gemm).run()


class _SddmmBody:
    """Writes one sampled-gemm kernel body through emitter `em` (names, lines, casts)."""

    def __init__(self, em, launch: Op, gemm: Op):
        from codegen.tilelang import TL_DTYPES

        self.em, self.launch, self.gemm, self.tl = em, launch, gemm, TL_DTYPES
        self.x = em.sddmm_names
        self.a, self.b, self.rows, self.cols, self.out = gemm.operands
        self.bm, self.bn = (exprs.evaluate(exprs.parse(t), em.env) for t in gemm.attrs["tile"])
        self.threads = em.threads = exprs.evaluate(exprs.parse(launch.attrs["threads"]), em.env)
        self.M, self.K = em.dims(self.a)
        self.N = em.dims(self.b)[1]
        self.k, self.n = (exprs.evaluate(exprs.parse(d), em.env) for d in (self.K, self.N))

    def name(self, base: str) -> str:
        return self.em.indices_named(base)

    def line(self, depth: int, text: str) -> None:
        self.em.line(depth, text)

    def f32(self, text: str, dtype: str) -> str:
        return text if dtype == "f32" else f"T.Cast(T.float32, {text})"

    def store(self, depth: int, e: str, row: str, col: str, value: str) -> None:
        """P at entry `e` (values) or at (`row`, `col`) (dense) = f32 `value` in P's dtype."""
        out = self.em.name(self.out)
        at = f"{out}[{e}]" if self.out.type.rank == 1 else f"{out}[{row}, {col}]"
        self.line(depth, f"{at} = {self.em.cast(value, 'f32', self.out.type.dtype)}")

    def run(self) -> None:
        em, x = self.em, self.x
        threads = "" if em.cpu else f", threads={self.threads}"
        self.blk = self.name("b")
        self.e, self.row, self.col = self.name("e"), self.name("row"), self.name("col")
        self.lo, self.hi, self.acc = self.name("lo"), self.name("hi"), self.name("acc")
        self.tx = None if em.cpu else self.name("tx")
        self.line(1, f"# the tiles holding at least `dot_below` entries ({x['tc_m']}, {x['tc_n']}): one block each")
        self.line(1, f"if {x['n_tc']} > 0:")
        self.line(2, f"with T.Kernel({x['n_tc']}{threads}) as ({self.blk},):")
        m, n = self.launch.attrs["vars"]
        self.tile_buffers()
        self.registers(m, n, self.lo, self.hi)
        self.line(3, f"{m} = {x['tc_m']}[{self.blk}]")
        self.line(3, f"{n} = {x['tc_n']}[{self.blk}]")
        self.line(3, f"{self.lo} = {x['tc_ptr']}[{self.blk}]")
        self.line(3, f"{self.hi} = {x['tc_ptr']}[{self.blk} + 1]")
        (self.cpu_tile if em.cpu else self.gpu_tile)(3)
        per_block = self.threads // self.dot_group()
        self.line(1, f"# every other entry ({x['dot_order']}): one f32 dot product each, {per_block} per block")
        self.line(1, f"if {x['n_dot']} > 0:")
        self.line(2, f"with T.Kernel(T.ceildiv({x['n_dot']}, {per_block}){threads}) as ({self.blk},):")
        self.line(3, f"{self.acc} = T.alloc_var(T.float32)")
        self.registers()
        self.dots(3)

    def registers(self, *names: str) -> None:
        """Declare the kernel's int32 scalars (the entry and its row and column, then `names`)
        as registers, so each index is loaded once, and bind the GPU thread index."""
        for v in (self.e, self.row, self.col, *names):
            self.line(3, f"{v} = T.alloc_var(T.int32)")
        if self.tx is not None:
            self.line(3, f"{self.tx} = T.get_thread_binding()")

    # ---- the tile path ----------------------------------------------------------------------
    def tile_buffers(self) -> None:
        """The tile kernel's buffers: the f32 tile (CPU); the shared A and B chunks, the f32
        fragment and its shared copy, padded to [TM, TN] (GPU)."""
        em, a = self.em, self.a
        dt = self.tl[a.type.dtype]
        if em.cpu:
            self.c_tile = self.name("C_tile")
            self.line(3, f"{self.c_tile} = T.alloc_local(({self.bm}, {self.bn}), T.float32)")
            return
        if self.threads % 32:
            raise error(self.launch.loc, f"target `tilelang` runs a sampled gemm with whole warps; `threads` is "
                        f"{self.threads}", "use a multiple of 32")
        # sized by passes/smem_sddmm.py (check-smem-fit{backend=tilelang} reports one over budget first)
        sizes = smem_sddmm.dims(self.launch, self.gemm, em.env)
        fit = smem_sddmm.smem("tilelang", sizes, em.m.func.attrs.get("sym_name", "kernel"))
        over = fit.diagnostic(self.launch, SMEM_LIMITS[DEFAULT_SM], DEFAULT_SM)
        if over is not None:
            raise TkError([over])
        self.tiles = fit.tiles
        self.mma, self.tm, self.tn, self.bk = self.tiles.mma, self.tiles.tm, self.tiles.tn, self.tiles.bk
        self.a_tile, self.b_tile = self.name("A_tile"), self.name("B_tile")
        self.c_frag, self.c_tile = self.name("C_frag"), self.name("C_tile")
        self.line(3, f"{self.a_tile} = T.alloc_shared(({self.tm}, {self.bk}), {dt})")
        self.line(3, f"{self.b_tile} = T.alloc_shared(({self.bk}, {self.tn}), {self.tl[self.b.type.dtype]})")
        self.line(3, f"{self.c_frag} = T.alloc_fragment(({self.tm}, {self.tn}), T.float32)")
        self.line(3, f"{self.c_tile} = T.alloc_shared(({self.tm}, {self.tn}), T.float32)")

    def corner(self) -> tuple[str, str]:
        from codegen.tilelang import tl_expr

        return tl_expr(self.gemm.attrs["a_offsets"][0]), tl_expr(self.gemm.attrs["b_offsets"][1])

    def gpu_tile(self, depth: int) -> None:
        em = self.em
        m0, n0 = self.corner()
        A, B = em.name(self.a), em.name(self.b)
        ko = self.name("ko")
        self.line(depth, f"T.clear({self.c_frag})")
        self.line(depth, f"for {ko} in T.Pipelined({-(-self.k // self.bk)}, num_stages={self.tiles.stages}):")
        self.line(depth + 1, f"T.copy({A}[{m0}, {ko} * {self.bk}], {self.a_tile})")
        self.line(depth + 1, f"T.copy({B}[{ko} * {self.bk}, {n0}], {self.b_tile})")
        if self.mma:
            self.line(depth + 1, f"T.gemm({self.a_tile}, {self.b_tile}, {self.c_frag})")
        else:  # no tensor-core path (f32 operands, or no tile shape T.gemm takes): SIMT
            i, j, kk = em.indices(3)
            self.line(depth + 1, f"for {i}, {j} in T.Parallel({self.tm}, {self.tn}):")
            self.line(depth + 2, f"for {kk} in T.serial({self.bk}):")
            prod = (f"{self.f32(f'{self.a_tile}[{i}, {kk}]', self.a.type.dtype)} * "
                    f"{self.f32(f'{self.b_tile}[{kk}, {j}]', self.b.type.dtype)}")
            self.line(depth + 3, f"{self.c_frag}[{i}, {j}] = {self.c_frag}[{i}, {j}] + {prod}")
        self.line(depth, f"T.copy({self.c_frag}, {self.c_tile})  # entries sit anywhere in the tile")
        s = self.name("s")
        self.line(depth, f"for {s} in T.serial(T.ceildiv({self.hi} - {self.lo}, {self.threads})):")
        self.line(depth + 1, f"if {self.lo} + {s} * {self.threads} + {self.tx} < {self.hi}:")
        self.entry(depth + 2, f"{self.x['tc_order']}[{self.lo} + {s} * {self.threads} + {self.tx}]", m0, n0)

    def product(self, k: str) -> str:
        """The f32 product of A's row and Bt's row (the entry's `row`, `col`) at index `k`."""
        A, Bt = self.em.name(self.a), self.x["Bt"]
        return (f"{self.f32(f'{A}[{self.row}, {k}]', self.a.type.dtype)} * "
                f"{self.f32(f'{Bt}[{self.col}, {k}]', self.b.type.dtype)}")

    def group_dots(self, depth: int, g: int) -> None:
        """GPU dot products with G lanes per entry: lane l of a group takes K's elements l, l + G, ...
        (a group reads G consecutive elements of A's row and of Bt's row at once), then a shuffle
        reduction over the group. Every lane runs the loop and the shuffles (an entry past the end
        reads row 0 and column 0 and is not stored), so whole warps reach them."""
        em, x = self.em, self.x
        per_block = self.threads // g
        q = f"{self.blk} * {per_block} + {self.tx} // {g}"
        gl = f"{self.tx} % {g}"
        self.line(depth, f"{self.e} = T.if_then_else({q} < {x['n_dot']}, {x['dot_order']}[T.min({q}, {x['n_dot']} - 1)], -1)")
        self.line(depth, f"{self.row} = T.if_then_else({self.e} >= 0, {em.name(self.rows)}[T.max({self.e}, 0)], 0)")
        self.line(depth, f"{self.col} = T.if_then_else({self.e} >= 0, {em.name(self.cols)}[T.max({self.e}, 0)], 0)")
        self.line(depth, f"{self.acc} = T.float32(0)")
        kk = em.indices(1)[0]
        k = f"{kk} * {g} + {gl}"
        self.line(depth, f"for {kk} in T.serial({-(-self.k // g)}):")
        self.line(depth + 1, f"if {k} < {self.K}:")
        self.line(depth + 2, f"{self.acc} = {self.acc} + {self.product(k)}")
        o = g // 2
        while o:
            self.line(depth, f"{self.acc} = {self.acc} + T.shfl_xor({self.acc}, {o})")
            o //= 2
        self.line(depth, f"if {self.e} >= 0 and {gl} == 0:")
        self.store(depth + 1, self.e, self.row, self.col, self.acc)

    def cpu_tile(self, depth: int) -> None:
        em = self.em
        m0, n0 = self.corner()
        A, B = em.name(self.a), em.name(self.b)
        i, j, kk = em.indices(3)
        self.line(depth, f"for {i}, {j} in T.grid({self.bm}, {self.bn}):")
        self.line(depth + 1, f"{self.c_tile}[{i}, {j}] = T.float32(0)")
        self.line(depth + 1, f"if {m0} + {i} < {self.M} and {n0} + {j} < {self.N}:")
        self.line(depth + 2, f"for {kk} in T.serial({self.K}):")
        prod = (f"{self.f32(f'{A}[{m0} + {i}, {kk}]', self.a.type.dtype)} * "
                f"{self.f32(f'{B}[{kk}, {n0} + {j}]', self.b.type.dtype)}")
        self.line(depth + 3, f"{self.c_tile}[{i}, {j}] = {self.c_tile}[{i}, {j}] + {prod}")
        s = self.name("s")
        self.line(depth, f"for {s} in T.serial({self.lo}, {self.hi}):")
        self.entry(depth + 1, f"{self.x['tc_order']}[{s}]", m0, n0)

    def entry(self, depth: int, slot: str, m0: str, n0: str) -> None:
        """Write the tile's entry at `slot` (an expression reading tc_order) from C_tile."""
        em = self.em
        self.line(depth, f"{self.e} = {slot}")
        self.line(depth, f"{self.row} = {em.name(self.rows)}[{self.e}]")
        self.line(depth, f"{self.col} = {em.name(self.cols)}[{self.e}]")
        self.store(depth, self.e, self.row, self.col, f"{self.c_tile}[{self.row} - {m0}, {self.col} - {n0}]")

    # ---- the dot-product path ---------------------------------------------------------------
    def dot_group(self) -> int:
        """Lanes per entry on the GPU: a power of two up to a warp, each lane at least 8 of K's
        elements (the group reads a row's consecutive elements together; the CPU form: 1)."""
        if self.em.cpu:
            return 1
        g = 1
        while g < 32 and self.k >= 16 * g:
            g *= 2
        return g

    def dots(self, depth: int) -> None:
        em, x = self.em, self.x
        g = self.dot_group()
        if g > 1:
            self.group_dots(depth, g)
            return
        first = f"{self.blk} * {self.threads}"
        if em.cpu:
            t = self.name("t")
            self.line(depth, f"for {t} in T.serial({self.threads}):")
            depth += 1
            d = f"{first} + {t}"
        else:
            d = f"{first} + {self.tx}"
        self.line(depth, f"if {d} < {x['n_dot']}:")
        depth += 1
        self.line(depth, f"{self.e} = {x['dot_order']}[{d}]")
        self.line(depth, f"{self.row} = {em.name(self.rows)}[{self.e}]")
        self.line(depth, f"{self.col} = {em.name(self.cols)}[{self.e}]")
        self.line(depth, f"{self.acc} = T.float32(0)")
        kk = em.indices(1)[0]
        self.line(depth, f"for {kk} in T.serial({self.K}):")
        self.line(depth + 1, f"{self.acc} = {self.acc} + {self.product(kk)}")
        self.store(depth, self.e, self.row, self.col, self.acc)

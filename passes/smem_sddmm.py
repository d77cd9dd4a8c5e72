"""Shared memory of the sampled gemm's kernels (SDDMM), per backend: one computation for the backends and check-smem-fit.

A `tiles` grid holding one `tile.sampled_gemm` has no `tile.alloc`: its kernels stage tiles of
the operands through shared memory that the backends size from BM, BN, K, the operands' dtype
and the thread count. codegen/cuda_sddmm.py and codegen/tilelang_sddmm.py emit exactly what
`cuda_tiles` and `tilelang_tiles` say, and check-smem-fit reads the same objects (`model`), so
the estimate is what the kernels declare (tests/test_smem_fit.py: ptxas and TileLang's lowering).

* `cuda` (`cuda_tiles`), three kernels, each within the limit on its own:
  - `<kernel>` (the tensor-core tiles), one tile per block, K in chunks of BK through STAGES
    stages of dynamic shared memory, in one of two forms (BMP x BNP: BM x BN padded to the
    instruction's tile); after the K loop the f32 products [BMP][BNP + 8] take the stages' bytes:
    max(stages, products).
    - `wgmma` (sm_90 warpgroup mma, `wgmma_fits`: f16/bf16, K a multiple of 8, BM a multiple of
      64 with one warpgroup of 128 threads per 64 rows, BNP at most 256): WGMMA_STAGES stages of A's rows [BMP][64]
      and B's chunk, 128-byte rows in the 128-byte swizzle wgmma's descriptors name, no padding,
      BK = 64, the base aligned to 1024 bytes (1024 bytes of slack counted). B's chunk is read from
      B itself (`reads_b`: N-major descriptors, `n_major_fits`: N a multiple of 8, BNP of 64, one
      wave of tiles) as
      BNP / 64 groups of [64 K rows][64 columns], else from Bt (B transposed by the runtime) as
      [BNP][64]: the same bytes either way.
    - `mma.sync` m16n8k16 otherwise: A's rows [BMP][BK + 8] and B's columns [BK][BNP + 8] (8
      elements of row padding keep ldmatrix rows on distinct banks), BK K rounded up to 16, at
      most 64, halved while the stages exceed SMEM_BUDGET.
    No such kernel when no tile goes to tensor cores (f32/f64 operands, or `dot_below` over
    BM x BN).
  - `<kernel>_walk`, the wgmma tiles' persistent twin at K <= 32 reading Bt (`persistent_fits`,
    `CudaTiles.walk`): the products [BMP][BNP + 8] at the 1024-aligned base, then
    PERSISTENT_STAGES stages of A's rows [BMP] and Bt's rows [BNP] (64-byte rows), then per stage
    the tile rows' first entries [BMP] i32 and up to PERSISTENT_POS places (as many as keep the
    blocks per SM that PERSISTENT_POS_MIN allows); none where that is over the limit.
  - `<kernel>_transpose_b` (B -> Bt): a static [64][64 + one 16-byte vector] tile of B's dtype.
  - `<kernel>_dots`: none.
* `tilelang` (`tilelang_tiles`), the tile kernel: `A_tile` [TM, BK] and `B_tile` [BK, TN], two
  pipeline copies each (one when a row of A or B is not a 4-byte multiple: `num_stages=0`), and
  the f32 `C_tile` [TM, TN] after the K loop; TM x TN is BM x BN padded to a shape T.gemm takes
  on tensor cores (`mma_tile`), else (f32 operands) to one TileLang lays out over the threads
  (`simt_tile`). TileLang merges them (passes/smem_tilelang.py: C_tile reuses the chunks'
  bytes; 1024-byte alignment for wgmma operands); BK is the largest of 64, 32, 16 (at most K
  rounded up to 16) whose total fits sm_90. The dot kernel has none.
* `sum` (check-smem-fit's default option): the TileLang tiles' bytes x copies, no reuse.

Over budget (`SddmmSmem.diagnostic`) is one error at the `grid` statement, the same as a tile
kernel's (passes/check_smem_fit.py, passes/cuda_placement.py): a note per staged operand and the
products' tile, and a fix: the first smaller BM x BN (halving the larger extent) that fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dsl import exprs
from dsl.diagnostics import Diagnostic
from dsl.ir import Module, Op
from dsl.types import DTYPES
from passes.smem_tilelang import ALIGN, MMA_MIN, WGMMA_ALIGN, TlBuffer, mma_fits, pack, tensor_core_instruction
from passes.sparse_dispatch import MMA_DTYPES, MMA_SHAPE
from passes.targets import DEFAULT_SM, SMEM_LIMITS

# cuda
SMEM_BUDGET = 96 * 1024  # bytes of the two K stages; larger tiles take a smaller BK
CUDA_STAGES = 2
WGMMA_ROWS = 64  # rows of A per warpgroup (wgmma m64nNk16)
WGMMA_BK = 64  # f16 elements of a 128-byte swizzled row
WGMMA_SLACK = 1024  # bytes to align the stages to 1024 (the 128-byte swizzle's atom)
WGMMA_STAGES = 3  # chunk kt's wgmma overlap the refill of chunk kt - 1's stage
ROW_PAD = 8  # elements after each staged row (16 bytes of f16: ldmatrix rows on distinct banks)
# f32 elements after each row of the products: stored as float2 pairs, rows of BNP + 8 floats put
# the 4 rows of a half-warp's 8-byte stores on distinct banks (BNP + 4 had them 2-way conflicted:
# the wgmma tile 7-14% slower on an H100, benchmarks/probes/sddmm_tile_variants.py, 2026-11-27)
PRODUCT_PAD = 8
TRANSPOSE_TILE = 64  # B -> Bt tiles (elements per side)
# tile entries' places (tc_pos) the tile kernel stages in shared memory at least, after the products
# (the rest of the stages' bytes when they are larger): a tile with more takes several chunks
POS_MIN = 1024
# a tile's first entries' places, loaded during the K loop into bytes of their own (as many as keep
# the blocks per SM that the rest of the kernel's bytes allow): 6144 hold the mean tile of 1504^2 with
# 746k entries (5181)
POS_PRE = 6144
SM_SMEM = 233472  # shared bytes per SM of sm_90 (228 KB), 1 KB of it reserved per resident block
BLOCK_RESERVED = 1024
# the persistent wgmma form (K of one chunk): two stages of A's and Bt's rows, each tile row's first entry and up
# to PERSISTENT_POS places per stage, the products in bytes of their own
PERSISTENT_STAGES = 2
PERSISTENT_K = 32  # K up to which a tile is persistent (rows of 64 bytes; at 64 the form has 1 block per SM)
PERSISTENT_POS = 2048
PERSISTENT_POS_MIN = 512
N_MAJOR_MAX_TILES = 264  # S's tiles up to which wgmma tiles read B N-major: one wave (132 SMs x 2 blocks of 128 x 128)
# tilelang
BK_MAX = 64  # K chunk of the GPU tile path: f16 rows of 128 bytes; K <= 64 is one chunk (rounded up to 16)
STAGES = 2


@dataclass(frozen=True)
class Staged:
    """A tile a sampled-gemm kernel keeps in shared memory (what the over-budget notes name)."""

    what: str  # e.g. "A's rows in K chunks"
    rows: int
    cols: int  # elements per row, padding included
    pad: int  # of which padding
    dtype: str
    copies: int
    extra: str = ""  # how it shares bytes with the others

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * DTYPES[self.dtype][0]

    def note(self) -> str:
        cols = f"{self.cols - self.pad} + {self.pad}" if self.pad else str(self.cols)
        copies = f"{self.copies} stage{'s' * (self.copies != 1)} of " if self.copies != 1 else ""
        return (f"{self.what}: {copies}[{self.rows}][{cols}] {self.dtype} = {self.nbytes * self.copies} bytes"
                f"{self.extra}")


# ---- cuda ----------------------------------------------------------------------------------------

def cuda_tensor_cores(dtype: str, dot_below: int, bm: int, bn: int) -> bool:
    """Whether the CUDA backend emits the tensor-core tile kernel: f16/bf16 operands and tiles
    that reach `dot_below` entries (sparse-dispatch's threshold; 0 before it runs)."""
    return dtype in MMA_DTYPES and dot_below <= bm * bn


@dataclass(frozen=True)
class CudaTiles:
    """The shared tiles codegen/cuda_sddmm.py emits for BM x BN tiles over K (`cuda_tiles`)."""

    tc: bool  # the tensor-core tile kernel exists
    dtype: str  # A's and B's
    bmp: int  # BM, BN, K padded to the mma atom
    bnp: int
    kp: int
    bk: int  # K chunk
    apitch: int  # elements per staged row of A, B and the products
    bpitch: int
    cpitch: int
    stage_elems: int  # elements of one K stage (A's rows then B's)
    smem: int  # dynamic bytes of the tile kernel (0 without it)
    transpose: int  # static bytes of the transposition kernel
    wgmma: bool = False  # the wgmma form (see the module docstring)
    stages: int = CUDA_STAGES  # K stages
    reads_b: bool = False  # the wgmma form reads B [K, N] itself (N-major descriptors), not Bt
    pos_pre: int = 0  # entries' places loaded during the K loop, after the stages' bytes (`_pos_pre`)
    persistent: bool = False  # these are the persistent wgmma form's tiles (`persistent_fits`): each block walks tiles
    walk: "CudaTiles | None" = None  # the one-tile form's persistent twin, `<kernel>_walk`, where it fits
    row_bytes: int = 128  # bytes of a staged row of A and Bt (wgmma: 64 in the persistent form at K <= 32)
    pos_stage: int = 0  # persistent form: entries' places per stage (the rest read from tc_pos)

    @property
    def operand_bytes(self) -> int:
        """Persistent form: bytes of one stage's A rows and Bt rows."""
        return (self.bmp + self.bnp) * self.row_bytes

    @property
    def side_bytes(self) -> int:
        """Persistent form: bytes of one stage's row bases (tc_rbase, i32 [BMP]) and places."""
        return self.bmp * 4 + self.pos_stage * self.pos_bytes

    @property
    def pos_bytes(self) -> int:
        """Bytes of a tile entry's place in tc_pos (`pos_bytes`; BMP and BNP are at most 256
        exactly where BM and BN are)."""
        return pos_bytes(self.bmp, self.bnp)

    @property
    def epilogue_bytes(self) -> int:
        """Bytes after the K loop before the entries' places: the f32 products [BMP][CPITCH] and
        each tile row's first entry index [BMP] (i32)."""
        return (self.bmp * self.cpitch + self.bmp) * 4

    @property
    def pos_cap(self) -> int:
        """Tile entries' places that shared memory holds at once after the products: the rest of
        the kernel's bytes, whole 16-byte vectors (>= POS_MIN + pos_pre)."""
        free = self.smem - (WGMMA_SLACK if self.wgmma else 0) - self.epilogue_bytes
        return free // 16 * 16 // self.pos_bytes

    @property
    def vec(self) -> int:
        """Elements per 16-byte vector."""
        return 16 // DTYPES[self.dtype][0]

    def kernels(self, kname: str) -> dict[str, int]:
        """Shared bytes per block of each kernel of the module."""
        out = {kname: self.smem} if self.tc else {}
        if self.walk is not None:
            out[f"{kname}_walk"] = self.walk.smem
        out.update({f"{kname}_transpose_b": self.transpose, f"{kname}_dots": 0})
        return out

    def staged(self, a: str = "A", b: str = "B") -> list[Staged]:
        """The staged tiles (`a`, `b`: the operands' names)."""
        if not self.tc:
            return []
        products = self.epilogue_bytes + POS_MIN * self.pos_bytes
        rows = Staged("each tile row's first entry (tc_rbase)", 1, self.bmp, 0, "i32", 1, ", after the products")
        places = Staged(f"the tile's entries' places (tc_pos, {self.pos_bytes} bytes each), a chunk at a time", 1,
                        self.pos_cap * self.pos_bytes // 4, 0, "i32", 1,
                        f", after those ({self.pos_cap} entries" + (f"; the first {self.pos_pre} in bytes of their "
                                                                     "own, copied as the K loop ends)" if self.pos_pre
                                                                     else ")"))
        if self.wgmma:
            return [Staged(f"`{a}`'s rows in K chunks", self.bmp, self.apitch, 0, self.dtype, self.stages),
                    (Staged(f"`{b}`'s rows in K chunks (groups of 64 columns)", self.bk, self.bnp, 0, self.dtype,
                            self.stages) if self.reads_b else
                     Staged(f"`{b}`'s columns in K chunks (B transposed)", self.bnp, self.bpitch, 0, self.dtype,
                            self.stages)),
                    Staged("the f32 products", self.bmp, self.cpitch, PRODUCT_PAD, "f32", 1,
                           f", in the stages' bytes after the K loop; {WGMMA_SLACK} bytes to align them"), rows,
                    places]
        stages = self.stages * self.stage_elems * DTYPES[self.dtype][0]
        reuse = (", in the stages' bytes after the K loop" if products <= stages else
                 f", the stages' {stages} bytes reused after the K loop")
        return [Staged(f"`{a}`'s rows in K chunks", self.bmp, self.apitch, ROW_PAD, self.dtype, self.stages),
                Staged(f"`{b}`'s columns in K chunks", self.bk, self.bpitch, ROW_PAD, self.dtype, CUDA_STAGES),
                Staged("the f32 products", self.bmp, self.cpitch, PRODUCT_PAD, "f32", 1, reuse), rows, places]


def wgmma_fits(bm: int, bn: int, k: int, dtype: str, threads: int) -> bool:
    """Whether the tile kernel takes the wgmma form: f16/bf16 operands, K a multiple of 8 (16-byte
    rows for cp.async), BM a multiple of 64 with one warpgroup (128 threads) per 64 rows, BN
    rounded up to 8 at most 256 (wgmma's largest N). (Smaller BM would pad the tile's rows to 64:
    not measured, so those tiles stay on mma.sync.)"""
    return (dtype in MMA_DTYPES and k % 8 == 0 and bm % WGMMA_ROWS == 0 and threads == 128 * (bm // WGMMA_ROWS)
            and -(-bn // 8) * 8 <= 256)


def persistent_fits(k: int, reads_b: bool) -> bool:
    """Whether the wgmma tile kernel has a persistent twin, `<kernel>_walk`: K in one 64-byte row
    of f16/bf16 (K <= 32) and B read transposed. Each of its blocks walks tiles blockIdx.x,
    + gridDim.x, ... (the grid is what is resident at once), loading the next tile's rows while it
    multiplies and writes this one's (the runtime launches it where the dot products are few,
    tkc/cuda_runtime.py `CudaLaunch.tile_launch`):
    at K = 32 a tile's loads, wgmma and entries are each short, so a block per tile spent its
    time in its chain of round trips and its launch (benchmarks/probes/sddmm_tile_variants.py,
    docs/PERFORMANCE.md, H200, 2026-11-29: 48.5-51.5 us of a 66 us tile kernel at 10000^2 with 5M
    entries without any product written). The N-major form reads B in one wave of tiles, where
    nothing is left to overlap."""
    return k <= PERSISTENT_K and not reads_b


def n_major_fits(bn: int, n: int, tiles: int) -> bool:
    """Whether a wgmma tile reads B [K, N] itself through N-major descriptors (no transposed
    copy for the tiles): N a multiple of 8 (16-byte vectors along B's rows, each wholly in or past
    N), BN padded to 8 a multiple of 64 (whole 128-byte swizzled rows of 64 columns, the canonical
    N-major layout; narrower groups were not tried), and at most N_MAJOR_MAX_TILES tiles in S's
    grid (`tiles`: cdiv(M, BM) x cdiv(N, BN)). Where every tile's block is resident at once the
    launch is latency-bound and the transpose's launch is what reading B saves; over more waves the
    tiles reading Bt were faster (H100, 2026-11-27, docs/PERFORMANCE.md: 10000^2 with 5M entries,
    K = 256, 139.7 against 154.2 us as graph replays; 1504^2 with 746k, 144 tiles, 11.4 against 8.8)."""
    return n > 0 and n % 8 == 0 and -(-bn // 8) * 8 % WGMMA_BK == 0 and 0 < tiles <= N_MAJOR_MAX_TILES


def _epilogue(bm: int, bn: int, bmp: int, cpitch: int) -> int:
    """Shared bytes the tile kernel's epilogue needs at least: the products, each tile row's first
    entry index, POS_MIN entries' places (CudaTiles.epilogue_bytes, pos_cap)."""
    return (bmp * cpitch + bmp) * 4 + POS_MIN * pos_bytes(bm, bn)


def _pos_pre(smem: int, bm: int, bn: int) -> int:
    """Entries' places (up to POS_PRE, whole 16-byte vectors) whose own bytes after a kernel of
    `smem` bytes leave its blocks per SM (by shared memory: SM_SMEM, BLOCK_RESERVED each) as they
    are; 0 where none fit or the kernel is over one SM's bytes anyway."""
    blocks = SM_SMEM // (smem + BLOCK_RESERVED)
    if blocks == 0:
        return 0
    room = min(SM_SMEM // blocks - BLOCK_RESERVED - smem, SMEM_LIMITS[DEFAULT_SM] - smem)
    size = pos_bytes(bm, bn)
    return max(0, min(POS_PRE * size, room) // 16 * 16 // size)


def rc_packed16(bm: int, bn: int) -> bool:
    """Whether a tile entry's (row, col) in its BM x BN tile packs into 16 bits, (row << 8) | col:
    the form of tkc.sparse.DispatchPlan.tc_pos that the `cuda` tile kernel reads (else int32,
    (row << 16) | col)."""
    return bm <= 256 and bn <= 256


def pos_bytes(bm: int, bn: int) -> int:
    """Bytes of a tile entry's place in tc_pos for BM x BN tiles: 2 where `rc_packed16`, else 4."""
    return 2 if rc_packed16(bm, bn) else 4


def cuda_tiles(bm: int, bn: int, k: int, dtype: str, tc: bool, threads: int = 0, n: int = 0,
               m: int = 0) -> CudaTiles:
    """codegen/cuda_sddmm.py's tiles for BM x BN tiles over K of `dtype` operands (`tc`: with the
    tensor-core kernel, `cuda_tensor_cores`), `threads` per block and S's M x N (0: unknown, so
    the wgmma form reads Bt); see the module docstring."""
    esize = DTYPES[dtype][0]
    transpose = TRANSPOSE_TILE * (TRANSPOSE_TILE + 16 // esize) * esize
    if tc and wgmma_fits(bm, bn, k, dtype, threads):
        bmp, bnp = -(-bm // WGMMA_ROWS) * WGMMA_ROWS, -(-bn // 8) * 8
        kp, bk = -(-k // WGMMA_BK) * WGMMA_BK, WGMMA_BK
        stage_elems = (bmp + bnp) * bk
        cpitch = bnp + PRODUCT_PAD
        reads_b = n_major_fits(bn, n, -(-m // bm) * -(-n // bn))
        walk = _persistent(bm, bn, k, dtype, bmp, bnp, cpitch, transpose) if persistent_fits(k, reads_b) else None
        if walk is not None and walk.smem > SMEM_LIMITS[DEFAULT_SM]:
            walk = None
        smem = max(WGMMA_STAGES * stage_elems * esize, _epilogue(bm, bn, bmp, cpitch)) + WGMMA_SLACK
        pre = _pos_pre(smem, bm, bn)
        smem += pre * pos_bytes(bm, bn)
        return CudaTiles(tc, dtype, bmp, bnp, kp, bk, bk, bk, cpitch, stage_elems, smem, transpose, True, WGMMA_STAGES,
                         reads_b, pre, walk=walk)
    mm, mn, mk = MMA_SHAPE
    bmp, bnp = -(-bm // mm) * mm, -(-bn // mn) * mn
    kp = -(-k // mk) * mk
    bk = min(kp, 64)
    bpitch = bnp + ROW_PAD
    while bk > mk and CUDA_STAGES * (bmp * (bk + ROW_PAD) + bk * bpitch) * esize > SMEM_BUDGET:
        bk //= 2
    apitch = bk + ROW_PAD
    stage_elems = bmp * apitch + bk * bpitch
    cpitch = bnp + PRODUCT_PAD
    smem = max(CUDA_STAGES * stage_elems * esize, _epilogue(bm, bn, bmp, cpitch)) if tc else 0
    pre = _pos_pre(smem, bm, bn) if tc else 0
    smem += pre * pos_bytes(bm, bn)
    return CudaTiles(tc, dtype, bmp, bnp, kp, bk, apitch, bpitch, cpitch, stage_elems, smem, transpose, pos_pre=pre)


def _persistent(bm: int, bn: int, k: int, dtype: str, bmp: int, bnp: int, cpitch: int, transpose: int) -> CudaTiles:
    """The persistent wgmma form's tiles (`persistent_fits`): the products [BMP][CPITCH] f32 at the
    1024-aligned base, then PERSISTENT_STAGES stages of A's rows [BMP] and Bt's rows [BNP] (rows of
    64 bytes in the 64-byte swizzle), then per stage
    the tile rows' first entries [BMP] i32 and up to PERSISTENT_POS places: as many as keep the
    blocks per SM that PERSISTENT_POS_MIN allows (whole 16-byte vectors)."""
    esize = DTYPES[dtype][0]
    row_bytes = 64
    size = pos_bytes(bm, bn)
    fixed = WGMMA_SLACK + bmp * cpitch * 4 + PERSISTENT_STAGES * ((bmp + bnp) * row_bytes + bmp * 4)
    blocks = max(SM_SMEM // (fixed + PERSISTENT_STAGES * PERSISTENT_POS_MIN * size + BLOCK_RESERVED), 1)
    room = min(SM_SMEM // blocks - BLOCK_RESERVED, SMEM_LIMITS[DEFAULT_SM]) - fixed
    per = max(min(PERSISTENT_POS * size, room // PERSISTENT_STAGES) // 16 * 16 // size, 16 // size)
    smem = fixed + PERSISTENT_STAGES * per * size
    elems = row_bytes // esize
    return CudaTiles(True, dtype, bmp, bnp, -(-k // WGMMA_BK) * WGMMA_BK, WGMMA_BK, elems, elems, cpitch,
                     (bmp + bnp) * elems, smem, transpose, True, PERSISTENT_STAGES, persistent=True,
                     row_bytes=row_bytes, pos_stage=per)


# ---- tilelang ------------------------------------------------------------------------------------

def mma_tile(bm: int, bn: int, k: int, threads: int) -> tuple[int, int] | None:
    """The smallest [TM, TN] >= [BM, BN] that T.gemm takes on tensor cores with `threads` threads
    and K chunk `k` (passes/smem_tilelang.py `mma_fits`), or None."""
    warps = max(1, threads // 32)
    tm0 = -(-bm // MMA_MIN[0]) * MMA_MIN[0]
    tn0 = -(-bn // 8) * 8
    shapes = [(tm, tn) for tm in range(tm0, tm0 + MMA_MIN[0] * warps + 1, MMA_MIN[0])
              for tn in range(tn0, tn0 + 16 * warps + 1, 8) if mma_fits(tm, tn, k, threads)]
    return min(shapes, key=lambda s: (s[0] * s[1], s[0])) if shapes else None


def simt_tile(bm: int, bn: int, threads: int) -> tuple[int, int]:
    """[BM, TN], TN >= BN the smallest whose element count TileLang can lay out over `threads`
    threads (a multiple or a divisor of the thread count; codegen/tilelang.py `check_fragment`)."""
    tn = bn
    while (bm * tn) % threads and threads % (bm * tn):
        tn += 1
    return bm, tn


@dataclass(frozen=True)
class TlTiles:
    """The shared tiles codegen/tilelang_sddmm.py emits on the GPU (`tilelang_tiles`)."""

    mma: bool  # T.gemm on tensor cores (else a SIMT loop nest)
    tm: int
    tn: int
    bk: int
    stages: int  # `num_stages` of the K loop: STAGES, or 0 (one copy of each chunk)
    a_dtype: str
    b_dtype: str
    buffers: tuple[TlBuffer, ...] = field(compare=False)  # A_tile, B_tile, C_tile as TileLang merges them
    total: int = 0  # bytes of dynamic shared memory of the tile kernel

    def kernels(self, kname: str) -> dict[str, int]:
        return {kname: self.total, f"{kname}_dots": 0}

    def staged(self, a: str = "A", b: str = "B") -> list[Staged]:
        """The staged tiles (`a`, `b`: the operands' names)."""
        abuf, bbuf, c = self.buffers
        chunks = max(abuf.offset + abuf.size, bbuf.offset + bbuf.size)
        reuse = (", in the K chunks' bytes after the loop" if c.offset + c.size <= chunks else
                 ", partly in the K chunks' bytes after the loop" if c.offset < chunks else "")
        return [Staged(f"`{a}`'s rows in K chunks (`A_tile`)", self.tm, self.bk, 0, self.a_dtype, abuf.versions),
                Staged(f"`{b}`'s columns in K chunks (`B_tile`)", self.bk, self.tn, 0, self.b_dtype, bbuf.versions),
                Staged("the f32 products (`C_tile`)", self.tm, self.tn, 0, "f32", 1, reuse)]


def tilelang_tiles(bm: int, bn: int, k: int, n: int, a_dtype: str, b_dtype: str, threads: int) -> TlTiles:
    """codegen/tilelang_sddmm.py's GPU tiles for BM x BN tiles over K (N: B's columns); see the
    module docstring. Over sm_90's budget even at BK = 16, the BK = 16 tiles (the caller reports)."""
    tc = a_dtype in MMA_DTYPES and b_dtype == a_dtype
    shape = mma_tile(bm, bn, 16, threads) if tc else None
    tm, tn = shape or simt_tile(bm, bn, threads)
    size = DTYPES[a_dtype][0]
    # TileLang 0.1.15 makes every copy in a pipelined loop a cp.async and fails on a 2-byte one
    # (codegen/tilelang.py `async_copy_ok`): rows of A and B must be 4-byte multiples
    stages = STAGES if (k * size) % 4 == 0 and (n * size) % 4 == 0 else 0
    wgmma = shape is not None and tensor_core_instruction(tm, tn, 16, threads) == "wgmma"
    align = WGMMA_ALIGN if wgmma else ALIGN
    k16 = -(-k // 16) * 16
    tiles = None
    for bk in (BK_MAX, 32, 16):
        bk = min(bk, k16)
        bufs = (TlBuffer(None, tm * bk * size, max(stages, 1), align, 1, 2),  # used in the K loop
                TlBuffer(None, bk * tn * DTYPES[b_dtype][0], max(stages, 1), align, 1, 2),
                TlBuffer(None, tm * tn * 4, 1, ALIGN, 2, 4))  # the fragment's copy, then the entries
        tiles = TlTiles(shape is not None, tm, tn, bk, stages, a_dtype, b_dtype, bufs, pack(list(bufs), len(bufs)))
        if tiles.total <= SMEM_LIMITS[DEFAULT_SM]:
            break
    return tiles


# ---- check-smem-fit ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Dims:
    """What sizes a sampled gemm's tiles: BM, BN, K, N, the dtypes, threads, `dot_below`."""

    bm: int
    bn: int
    k: int
    n: int
    a_dtype: str
    b_dtype: str
    threads: int
    dot_below: int
    names: tuple[str, str] = ("A", "B")  # the operands', for the notes
    m: int = 0  # A's rows (S's M)

    def cuda(self) -> CudaTiles:
        return cuda_tiles(self.bm, self.bn, self.k, self.a_dtype,
                          cuda_tensor_cores(self.a_dtype, self.dot_below, self.bm, self.bn), self.threads, self.n,
                          self.m)

    def tilelang(self) -> TlTiles:
        return tilelang_tiles(self.bm, self.bn, self.k, self.n, self.a_dtype, self.b_dtype, self.threads)


def sampled_gemm(launch: Op) -> Op | None:
    """The `tile.sampled_gemm` of a `tiles` grid, or None."""
    if "tiles" not in launch.attrs:
        return None
    return next((op for op in launch.body.ops if op.name == "tile.sampled_gemm"), None)


def dims(launch: Op, op: Op, env: dict[str, int]) -> Dims:
    """The sizes of `op` (in `launch`) under `env` (the kernel's dims and constants)."""
    def value(d) -> int:
        return d if isinstance(d, int) else exprs.evaluate(exprs.parse(d) if isinstance(d, str) else d, env)

    a, b = op.operands[:2]
    bm, bn = (value(t) for t in op.attrs["tile"])
    return Dims(bm, bn, value(a.type.shape[1]), value(b.type.shape[1]), a.type.dtype, b.type.dtype,
                value(str(launch.attrs.get("threads", "128"))), int(op.attrs.get("dot_below", 0)), (str(a), str(b)),
                value(a.type.shape[0]))


@dataclass(frozen=True)
class SddmmSmem:
    """A sampled gemm's shared memory on one backend: `total`, its largest kernel's bytes, is
    check-smem-fit's estimate; each kernel must fit the limit."""

    backend: str  # cuda, tilelang, sum
    dims: Dims
    tiles: CudaTiles | TlTiles  # what the backend emits (`sum`: TileLang's)
    kernels: dict[str, int]  # shared bytes per block of each kernel of the module
    staged: list[Staged]

    @property
    def total(self) -> int:
        return max(self.kernels.values(), default=0)

    def diagnostic(self, launch: Op, limit: int, target: str) -> Diagnostic | None:
        """The located error when a kernel exceeds `limit` (None when all fit): the staged
        tiles and the first smaller BM x BN that fits."""
        over = [(name, n) for name, n in self.kernels.items() if n > limit]
        if not over:
            return None
        name, nbytes = max(over, key=lambda t: t[1])
        on = " on the CUDA backend" if self.backend == "cuda" else ""
        notes = [s.note() for s in self.staged] + [self._fix(limit)]
        return Diagnostic(launch.loc, f"kernel `{name}` needs {nbytes} bytes of shared memory per block{on}; "
                          f"limit is {limit} on {target}", notes)

    def _fix(self, limit: int) -> str:
        """The first BM x BN that fits, halving the larger extent (both when equal)."""
        bm, bn = self.dims.bm, self.dims.bn
        while bm > 1 or bn > 1:
            bm, bn = (max(bm // 2, 1) if bm >= bn else bm), (max(bn // 2, 1) if bn >= bm else bn)
            smaller = smem(self.backend, replace(self.dims, bm=bm, bn=bn, dot_below=0))
            if smaller.total <= limit:
                return (f"fix: use smaller tiles of the pattern: BM x BN = {bm} x {bn} needs {smaller.total} bytes "
                        f"(the extents of `tiles(...)`: e.g. `-D BM={bm} -D BN={bn}` where schedule constants "
                        "set them)")
        return "fix: use smaller tiles of the pattern (the extents of `tiles(...)`)"


def smem(backend: str, d: Dims, kname: str = "kernel") -> SddmmSmem:
    """The sampled gemm's shared memory on `backend` (`cuda`, `tilelang`, `sum`), its kernels
    named after `kname`."""
    tiles = d.cuda() if backend == "cuda" else d.tilelang()
    kernels, staged = tiles.kernels(kname), tiles.staged(*d.names)
    if backend == "sum":  # the TileLang tiles, no reuse
        kernels, staged = {kname: sum(b.size for b in tiles.buffers)}, [replace(t, extra="") for t in staged]
    return SddmmSmem(backend, d, tiles, kernels, staged)


def model(module: Module, launch: Op, backend: str) -> SddmmSmem | None:
    """The shared memory of the sampled gemm in `launch` on `backend`; None when it holds none."""
    op = sampled_gemm(launch)
    if op is None:
        return None
    return smem(backend, dims(launch, op, module.env), module.func.attrs.get("sym_name", "kernel"))

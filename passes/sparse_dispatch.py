"""`sparse-dispatch`: per tile, tensor cores or CUDA-core dot products for a sampled gemm (SDDMM).

A `tile.sampled_gemm` in a `tiles` grid computes, for each BM x BN tile of the pattern S that
holds an entry, the products at the tile's entries. Two ways to do it:

- **tensor-core tile**: stage A's BM x K rows and B's K x BN columns in shared memory and multiply
  the whole tile (wgmma or mma.sync), then pick the entries out of the accumulator. Its cost does not
  depend on how many entries the tile holds: (BM + BN) * K operand elements come from L2 and
  2 * BM * BN * K flops go through the tensor cores, and at small K a fixed cost per position
  (the pipeline's fill, the accumulators through shared memory) is the larger.
- **dot products**: one f32 dot product of length K per entry, reading A's row and B's column
  (a row of B transposed): 2 * K CUDA-core flops, and K elements of B from L2 (entries come row
  by row, so A's row is reused from L1), plus a fixed cost per entry (its indices, its output,
  the shuffle reduction) that decides at small K.

A tile with c entries costs c * t_dot on the second path and t_tile on the first, so a tile with
fewer than `dot_below` = ceil(t_tile / t_dot) entries is cheaper as dot products. This pass
estimates both from the target's rates (RATES below, measured on an H100 with
benchmarks/probes/sddmm_split.py) and sets on the op `dot_below` (an entry count; 0 = every
tile on tensor cores) and `mma` (the tensor-core instruction shape [m, n, k]). The runtime splits
each pattern's tiles by that threshold (tkc.sparse.dispatch_plan) and the backends compute the two
lists. Uniform random patterns at density d put d * BM * BN entries in a tile, so the choice
follows the density; power-law (R-MAT) patterns mix dense and sparse tiles, which is where a
per-tile choice pays.

The dot products have two forms (`dot_path`, set on the op for the `cuda` backend):

- **rows** (`<kernel>_dots`): each entry reads its row of B transposed (K elements) from L2, so
  at small K the caches' request rate, not the bytes, sets the time;
- **slices** (`<kernel>_slices`): B's columns are split into slices of SLICE_BYTES in shared memory
  (`slice_cols`), the entries grouped per slice in batches of up to 32 consecutive entries of one
  row (tkc.sparse.SliceLists), each block loading one slice and computing a share of its batches.
  An entry then costs its index and output bytes and K elements from shared memory, and each
  block pays for loading its slice once.

The pass picks slices where they are feasible (K in whole 16-byte vectors, a slice of at least
SLICE_MIN_COLS columns) and the estimate (per entry, with the slice loads spread over S's
entries) is the lower; the tile threshold then uses that path's cost per entry.

Option `dot_below=N` fixes the threshold (0: tensor cores only; a large N: dot products only);
`dot_path=rows|slices` fixes the form (slices only where feasible); `target=sm_90` picks the rates. `explain(module)` describes the choice (`tkc compile --explain`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import error
from dsl.ir import Module, Op
from dsl.types import DTYPES
from passes.options import PIPELINE_LOC, options_from

MMA_SHAPE = [16, 8, 16]  # mma.sync.aligned.m16n8k16 (f16/bf16 inputs, f32 accumulators), sm_80+
MMA_DTYPES = ("f16", "bf16")  # operand dtypes with a tensor-core path
SLICE_THREADS = 512  # threads of a slice block
SLICE_BLOCKS_PER_SM = 2  # slice blocks resident per SM (their shared memory allows it on sm_90)
SLICE_BYTES = 112 * 1024  # a slice block's shared memory at most: two blocks within sm_90's 228 KB per SM
SLICE_DEPTH = 4  # batches a warp of the slice kernel has in flight (its ring of cp.async slots)
SLICE_MIN_COLS = 16  # fewer columns per slice than this: the slice path is not offered
SMS = 132  # SMs the estimates assume (H100 SXM, H200)


def slice_slot_bytes(k: int, elem: int) -> int:
    """Bytes of one slot of a slice-kernel warp's ring: a batch's row of A (K elements), its 32
    columns (int32) and its descriptor (row, e0, count, 4 int32)."""
    return k * elem + 32 * 4 + 16


def slice_ring_bytes(k: int, elem: int) -> int:
    """Shared memory of a slice block's rings: SLICE_DEPTH slots per warp."""
    return (SLICE_THREADS // 32) * SLICE_DEPTH * slice_slot_bytes(k, elem)


def slice_cols(n: int, k: int, elem: int) -> int:
    """Columns of B per shared-memory slice for the `slices` dot path, balanced over the slices
    (ceil(N / ceil(N / cap)) where cap = (SLICE_BYTES - the warps' rings) // (K * elem)); 0 when
    that path is not feasible: K * elem not a whole number of 16-byte vectors, or fewer than
    SLICE_MIN_COLS columns fit."""
    if n <= 0 or k <= 0 or (k * elem) % 16:
        return 0
    cap = (SLICE_BYTES - slice_ring_bytes(k, elem)) // (k * elem)
    if cap < min(SLICE_MIN_COLS, n):
        return 0
    return -(-n // -(-n // cap))


@dataclass(frozen=True)
class Rates:
    """Whole-GPU throughputs the estimates use (per second)."""

    l2_bytes: float  # L2 -> shared memory bandwidth of a tile's operands (mma.sync form), bytes/s
    mma_flops: float  # the tile kernel's f16 mma.sync rate with f32 accumulation, flop/s
    wgmma_flops: float  # the same in its wgmma form (passes/smem_sddmm.py `wgmma_fits`), flop/s
    wgmma_l2_bytes: float  # the operands' L2 -> shared memory bandwidth of the wgmma form, bytes/s
    fma_flops: float  # f32 CUDA-core fma, flop/s
    dot_bytes: float  # L2 -> register bandwidth of the dot products' rows of B, bytes/s
    dot_floor: float  # seconds per dot-product entry however small K: its indices, output, reduction
    tile_floor: float  # seconds per position of a tile (BM x BN) however small K: its fixed work
    wgmma_tile_floor: float  # the same in the wgmma form
    slice_floor: float  # seconds per entry of the slice path however small K: its indices and output
    slice_smem_bytes: float  # the slice path's reads of B from shared memory, bytes/s (whole GPU)
    slice_load_bytes: float  # one SM's rate loading its slice from L2, bytes/s
    source: str

    def tile_flops(self, wgmma: bool) -> float:
        """The tile kernel's tensor-core rate in its wgmma or mma.sync form."""
        return self.wgmma_flops if wgmma else self.mma_flops

    def floor(self, wgmma: bool) -> float:
        """The tile kernel's fixed work per position in its wgmma or mma.sync form, seconds."""
        return self.wgmma_tile_floor if wgmma else self.tile_floor

    def tile_l2(self, wgmma: bool) -> float:
        """The tile kernel's operand bandwidth from L2 in its wgmma or mma.sync form."""
        return self.wgmma_l2_bytes if wgmma else self.l2_bytes


# H100, measured with benchmarks/probes/sddmm_split.py (2026-11-25, 10000^2 with 5M uniform entries,
# K = 256, each path forced): a tensor-core tile of codegen/cuda_sddmm.py moves its operands at about
# 4 TB/s from L2 (32 x 32 and 64 x 64 tiles) and multiplies at about 180 TFLOP/s (128 x 128 tiles);
# a dot-product entry costs 0.075 ns, B's row at 7 TB/s (A's row is reused: entries come by row).
# 67 TFLOP/s f32 is NVIDIA's datasheet peak. At K = 32 (benchmarks/probes/sddmm_dot_order.py,
# 2026-11-26, the same shape) a 128 x 128 tile took 25.7 ns where operands and mma account for
# 5.8: its fixed work (the pipeline's fill, the accumulators through shared memory, picking the
# entries) is about 21 ns beyond its entries' index and output bytes, 1.3 ps per position, so a
# tile costs at least that. Without it the pass put 5% dense tiles at K = 32 on tensor cores,
# 1.9x slower than dot products. The wgmma form of the tile (2026-11-27): 6084 tiles of 128 x 128
# at K = 256 in about 215 us on an H100 (benchmarks/sddmm.py, 10000^2 with 5M uniform entries),
# 35 ns a tile; 33 ns on an H200 (sddmm_split.py, every tile forced). With each thread's copy
# addresses computed once per tile (2026-11-27, H100, the same shape, every tile forced):
# benchmarks/probes/sddmm_tile_variants.py 133.6 us at K = 256 (21.4 ns a tile: 392 TFLOP/s) and
# 217.6 us at K = 512 (34.9 ns: 262 KB of operands, 7.5 TB/s); sddmm_split.py `K=32` 0.084 ms at
# K = 32 (13.5 ns a tile, 0.82 ps per position: the wgmma form's fixed work), as fast as dot
# products there, and at 8000^2 tiles against dot products 0.085 / 0.082 ms with 246 entries per
# tile, 0.085 / 0.096 with 295, 0.086 / 0.130 with 410 (the model's threshold: 265). With the
# products stored as conflict-free float2 pairs and no k16 steps past K (2026-11-27, H100,
# sddmm_split.py, every tile or every entry forced, kernel launches alone): a 128 x 128 tile 20.2 ns
# at K = 256 (10000^2 and 8000^2: 415 TFLOP/s), 33.7 ns at K = 512 (sddmm_tile_variants.py: 7.8
# TB/s of operands), 11.1 ns at K = 32 (0.68 ps per position); a dot-product entry 17 ps at K = 32
# (10000^2, 5M uniform) and 75-85 ps at K = 256 (1M to 5M entries), so 8 ps of fixed work per
# entry and B's rows at 8 TB/s. At K = 32 tiles of 819 entries (5% density) now go to tensor
# cores (0.069 ms against 0.085 as dot products); the K = 256 threshold is 254 entries.
RATES = {"sm_90": Rates(l2_bytes=4.0e12, mma_flops=180e12, wgmma_flops=415e12, wgmma_l2_bytes=7.8e12,
                        fma_flops=67e12, dot_bytes=8.0e12, dot_floor=8.0e-12, tile_floor=1.3e-12,
                        wgmma_tile_floor=0.68e-12, slice_floor=2.5e-12, slice_smem_bytes=20e12,
                        slice_load_bytes=100e9,
                        source="H100, measured by benchmarks/probes/sddmm_split.py, sddmm_dot_order.py and "
                        "sddmm_tile_variants.py (docs/PERFORMANCE.md)")}
RATES["sm_90a"] = RATES["sm_90"]


@dataclass(frozen=True)
class Estimate:
    bm: int
    bn: int
    k: int
    elem: int  # bytes per A/B element
    t_tile: float  # seconds per tensor-core tile
    t_dot: float  # seconds per dot-product entry
    tile_bytes: int
    tile_flops: int
    dot_below: int
    rates: Rates
    wgmma: bool = False  # the tile kernel's wgmma form
    t_rows: float = 0.0  # seconds per entry of the rows dot path
    t_slices: float = 0.0  # seconds per entry of the slices dot path, its loads spread (inf: not feasible)
    slice_cols: int = 0  # columns per slice (0: not feasible)
    dot_path: str = "rows"  # the cheaper dot path


def instruction(bm: int, bn: int, wgmma: bool) -> list[int]:
    """The tile's tensor-core instruction shape [m, n, k]: wgmma m64nNk16 (N: BN rounded up to 8)
    or mma.sync m16n8k16."""
    return [64, -(-bn // 8) * 8, 16] if wgmma else list(MMA_SHAPE)


def estimate(bm: int, bn: int, k: int, elem: int, rates: Rates, wgmma: bool = False, n: int = 0, nnz: int = 0,
             dot_path: str = "auto") -> Estimate:
    """Costs of one tile on each path and the entry count where they cross (see the module doc);
    `wgmma`: the tile kernel's wgmma form (K in chunks of 64); `n`, `nnz`: S's columns and entries
    (for the slices dot path; 0: unknown, rows only); `dot_path`: auto, rows or slices."""
    mm, mn, mk = instruction(bm, bn, wgmma)
    pm, pn = -(-bm // mm) * mm, -(-bn // mn) * mn  # padded to the instruction
    pk = -(-k // mk) * mk  # (the wgmma form copies and multiplies no k16 step past K either)
    tile_bytes = (bm + bn) * k * elem
    tile_flops = 2 * pm * pn * pk
    t_tile = max(tile_bytes / rates.tile_l2(wgmma), tile_flops / rates.tile_flops(wgmma), bm * bn * rates.floor(wgmma))
    # A's row comes from L1 (entries by row)
    t_rows = rates.dot_floor + k * elem / rates.dot_bytes + 2 * k / rates.fma_flops
    nc = slice_cols(n, k, elem) if nnz > 0 else 0
    t_slices = math.inf
    if nc:  # each SM loads its blocks' slices once per call (more slices than resident blocks: in waves)
        waves = max(1, -(-(-(-n // nc)) // (SMS * SLICE_BLOCKS_PER_SM)))
        t_load = waves * nc * k * elem / rates.slice_load_bytes
        t_slices = (rates.slice_floor + k * elem / rates.slice_smem_bytes + 2 * k / rates.fma_flops) + t_load / nnz
    path = ("slices" if nc and (dot_path == "slices" or (dot_path == "auto" and t_slices < t_rows)) else "rows")
    t_dot = t_slices if path == "slices" else t_rows
    return Estimate(bm, bn, k, elem, t_tile, t_dot, tile_bytes, tile_flops, max(1, math.ceil(t_tile / t_dot)), rates,
                    wgmma, t_rows, t_slices, nc, path)


@dataclass(frozen=True)
class SparseDispatchPass:
    name = "sparse-dispatch"
    dot_below: int = -1  # -1: from the cost model
    target: str = "sm_90"
    dot_path: str = "auto"  # rows, slices (where feasible) or auto (the cost model)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "SparseDispatchPass":
        p = cls(**options_from(cls, cls.name, options))
        if p.target not in RATES:
            raise error(PIPELINE_LOC, f"`sparse-dispatch` has no rates for target `{p.target}`",
                        f"targets: {', '.join(sorted(RATES))}")
        if p.dot_path not in ("auto", "rows", "slices"):
            raise error(PIPELINE_LOC, f"`dot_path` of `sparse-dispatch` is `{p.dot_path}`",
                        "use auto (the cost model), rows or slices")
        if p.dot_below < -1:
            raise error(PIPELINE_LOC, "`dot_below` of `sparse-dispatch` is an entry count (>= 0), or -1 for the "
                        "cost model")
        return p

    def spec(self) -> str:
        opts = ([f"target={self.target}"] + ([f"dot_below={self.dot_below}"] if self.dot_below >= 0 else [])
                + ([f"dot_path={self.dot_path}"] if self.dot_path != "auto" else []))
        return f"{self.name}{{{','.join(opts)}}}"

    def run(self, module: Module) -> Module:
        for op in module.func.walk():
            if op.name == "tile.sampled_gemm":
                est = op_estimate(module, op, self.target, self.dot_path)
                op.attrs["dot_path"] = est.dot_path
                if op.operands[0].type.dtype not in MMA_DTYPES:  # no tensor-core path: every tile on dots
                    op.attrs["dot_below"] = est.bm * est.bn + 1
                    continue
                op.attrs["dot_below"] = est.dot_below if self.dot_below < 0 else self.dot_below
                op.attrs["mma"] = instruction(est.bm, est.bn, est.wgmma)
        return module


def op_estimate(module: Module, op: Op, target: str = "sm_90", dot_path: str = "auto") -> Estimate:
    """`op`'s estimate; the wgmma form where the tile kernel takes it (its launch's threads)."""
    from passes import smem_sddmm  # (it imports this module)

    env = module.env
    bm, bn = (exprs.evaluate(exprs.parse(t), env) for t in op.attrs["tile"])
    a = op.operands[0]
    k = a.type.shape[1] if isinstance(a.type.shape[1], int) else exprs.evaluate(a.type.shape[1], env)
    launch = next((l for l in module.func.walk() if l.name == "tile.launch" and op in l.body.ops), None)
    threads = smem_sddmm.dims(launch, op, env).threads if launch is not None else 0
    wgmma = smem_sddmm.wgmma_fits(bm, bn, k, a.type.dtype, threads)
    b, rows = op.operands[1], op.operands[2]
    n, nnz = (d if isinstance(d, int) else exprs.evaluate(d, env) for d in (b.type.shape[1], rows.type.shape[0]))
    return estimate(bm, bn, k, DTYPES[a.type.dtype][0], RATES[target], wgmma, n, nnz, dot_path)


def explain(module: Module, target: str = "sm_90") -> list[str]:
    """One paragraph per sampled gemm: the tile, the estimates of both dot paths and the tile, the
    dot path and the threshold in use."""
    out = []
    for op in module.func.walk():
        if op.name != "tile.sampled_gemm":
            continue
        path = op.attrs.get("dot_path", "auto")
        e = op_estimate(module, op, target, path)
        model = op_estimate(module, op, target)
        used = op.attrs.get("dot_below", e.dot_below)
        area = e.bm * e.bn
        rows = (f"  dot products by rows:   {e.t_rows * 1e9:.3f} ns per entry (fixed work of "
                f"{e.rates.dot_floor * 1e12:.1f} ps, {e.k * e.elem} bytes of B from L2 at "
                f"{e.rates.dot_bytes / 1e12:.1f} TB/s, {2 * e.k} f32 flops at {e.rates.fma_flops / 1e12:.0f} TFLOP/s)\n")
        slices = (f"  dot products in slices: {e.t_slices * 1e9:.3f} ns per entry ({e.slice_cols} columns of B per "
                  f"shared-memory slice, {e.slice_cols * e.k * e.elem} bytes loaded per block at "
                  f"{e.rates.slice_load_bytes / 1e9:.0f} GB/s and spread over the entries; fixed work of "
                  f"{e.rates.slice_floor * 1e12:.1f} ps, {e.k * e.elem} bytes of B from shared memory at "
                  f"{e.rates.slice_smem_bytes / 1e12:.0f} TB/s)\n" if e.slice_cols else
                  "  dot products in slices: not feasible (K is not whole 16-byte vectors, or a slice would hold "
                  f"fewer than {SLICE_MIN_COLS} columns)\n")
        way = (f"  dot path: {e.dot_path}"
               + ("" if e.dot_path == model.dot_path else f" (fixed by the pass option; the cost model says "
                  f"{model.dot_path})") + "\n")
        head = (f"{op.loc.file}:{op.loc.line}:{op.loc.col}: sparse-dispatch for `{op.attrs['pattern']}` "
                f"({e.bm} x {e.bn} tiles, K = {e.k}")
        if op.operands[0].type.dtype not in MMA_DTYPES:
            out.append(f"{head}): {op.operands[0].type.dtype} operands have no tensor-core path; every entry is a "
                       f"CUDA-core dot product\n" + rows + slices + way.rstrip("\n"))
            continue
        out.append(
            f"{head}):\n"
            f"  tensor-core tile: {e.t_tile * 1e9:.2f} ns per tile = max({e.tile_bytes} bytes of A and B from L2 "
            f"at {e.rates.tile_l2(e.wgmma) / 1e12:.1f} TB/s, {e.tile_flops} flops of "
            f"{'wgmma m%dn%dk%d' % tuple(instruction(e.bm, e.bn, True)) if e.wgmma else 'mma 16x8x16'} at "
            f"{e.rates.tile_flops(e.wgmma) / 1e12:.0f} TFLOP/s, fixed work of {area} positions at "
            f"{e.rates.floor(e.wgmma) * 1e12:.2f} ps)\n"
            + rows + slices + way
            + (f"  choice: a tile with fewer than {used} entries ({100 * used / area:.1f}% of its {area} positions) is "
               f"computed as dot products, the others on tensor cores" if used <= area else
               f"  choice: every entry is computed as a dot product (a tile of {area} position"
               f"{'s' * (area != 1)} never reaches the {used} entries that tensor cores need)")
            + ("" if used == e.dot_below else f" (fixed by the pass option; the cost model says {e.dot_below})")
            + f"\n  rates: {e.rates.source}")
    return out

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

Option `dot_below=N` fixes the threshold (0: tensor cores only; a large N: dot products only);
`target=sm_90` picks the rates. `explain(module)` describes the choice (`tkc compile --explain`).
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
                        wgmma_tile_floor=0.68e-12,
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


def instruction(bm: int, bn: int, wgmma: bool) -> list[int]:
    """The tile's tensor-core instruction shape [m, n, k]: wgmma m64nNk16 (N: BN rounded up to 8)
    or mma.sync m16n8k16."""
    return [64, -(-bn // 8) * 8, 16] if wgmma else list(MMA_SHAPE)


def estimate(bm: int, bn: int, k: int, elem: int, rates: Rates, wgmma: bool = False) -> Estimate:
    """Costs of one tile on each path and the entry count where they cross (see the module doc);
    `wgmma`: the tile kernel's wgmma form (K in chunks of 64)."""
    mm, mn, mk = instruction(bm, bn, wgmma)
    pm, pn = -(-bm // mm) * mm, -(-bn // mn) * mn  # padded to the instruction
    pk = -(-k // mk) * mk  # (the wgmma form copies and multiplies no k16 step past K either)
    tile_bytes = (bm + bn) * k * elem
    tile_flops = 2 * pm * pn * pk
    t_tile = max(tile_bytes / rates.tile_l2(wgmma), tile_flops / rates.tile_flops(wgmma), bm * bn * rates.floor(wgmma))
    # A's row comes from L1 (entries by row)
    t_dot = rates.dot_floor + k * elem / rates.dot_bytes + 2 * k / rates.fma_flops
    return Estimate(bm, bn, k, elem, t_tile, t_dot, tile_bytes, tile_flops, max(1, math.ceil(t_tile / t_dot)), rates,
                    wgmma)


@dataclass(frozen=True)
class SparseDispatchPass:
    name = "sparse-dispatch"
    dot_below: int = -1  # -1: from the cost model
    target: str = "sm_90"

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "SparseDispatchPass":
        p = cls(**options_from(cls, cls.name, options))
        if p.target not in RATES:
            raise error(PIPELINE_LOC, f"`sparse-dispatch` has no rates for target `{p.target}`",
                        f"targets: {', '.join(sorted(RATES))}")
        if p.dot_below < -1:
            raise error(PIPELINE_LOC, "`dot_below` of `sparse-dispatch` is an entry count (>= 0), or -1 for the "
                        "cost model")
        return p

    def spec(self) -> str:
        opts = [f"target={self.target}"] + ([f"dot_below={self.dot_below}"] if self.dot_below >= 0 else [])
        return f"{self.name}{{{','.join(opts)}}}"

    def run(self, module: Module) -> Module:
        for op in module.func.walk():
            if op.name == "tile.sampled_gemm":
                est = op_estimate(module, op, self.target)
                if op.operands[0].type.dtype not in MMA_DTYPES:  # no tensor-core path: every tile on dots
                    op.attrs["dot_below"] = est.bm * est.bn + 1
                    continue
                op.attrs["dot_below"] = est.dot_below if self.dot_below < 0 else self.dot_below
                op.attrs["mma"] = instruction(est.bm, est.bn, est.wgmma)
        return module


def op_estimate(module: Module, op: Op, target: str = "sm_90") -> Estimate:
    """`op`'s estimate; the wgmma form where the tile kernel takes it (its launch's threads)."""
    from passes import smem_sddmm  # (it imports this module)

    env = module.env
    bm, bn = (exprs.evaluate(exprs.parse(t), env) for t in op.attrs["tile"])
    a = op.operands[0]
    k = a.type.shape[1] if isinstance(a.type.shape[1], int) else exprs.evaluate(a.type.shape[1], env)
    launch = next((l for l in module.func.walk() if l.name == "tile.launch" and op in l.body.ops), None)
    threads = smem_sddmm.dims(launch, op, env).threads if launch is not None else 0
    wgmma = smem_sddmm.wgmma_fits(bm, bn, k, a.type.dtype, threads)
    return estimate(bm, bn, k, DTYPES[a.type.dtype][0], RATES[target], wgmma)


def explain(module: Module, target: str = "sm_90") -> list[str]:
    """One paragraph per sampled gemm: the tile, both estimates and the threshold in use."""
    out = []
    for op in module.func.walk():
        if op.name != "tile.sampled_gemm":
            continue
        e = op_estimate(module, op, target)
        used = op.attrs.get("dot_below", e.dot_below)
        area = e.bm * e.bn
        if op.operands[0].type.dtype not in MMA_DTYPES:
            out.append(f"{op.loc.file}:{op.loc.line}:{op.loc.col}: sparse-dispatch for `{op.attrs['pattern']}` "
                       f"({e.bm} x {e.bn} tiles, K = {e.k}): {op.operands[0].type.dtype} operands have no tensor-core "
                       f"path; every entry is a CUDA-core dot product ({e.t_dot * 1e9:.3f} ns per entry)")
            continue
        out.append(
            f"{op.loc.file}:{op.loc.line}:{op.loc.col}: sparse-dispatch for `{op.attrs['pattern']}` "
            f"({e.bm} x {e.bn} tiles, K = {e.k}):\n"
            f"  tensor-core tile: {e.t_tile * 1e9:.2f} ns per tile = max({e.tile_bytes} bytes of A and B from L2 "
            f"at {e.rates.tile_l2(e.wgmma) / 1e12:.1f} TB/s, {e.tile_flops} flops of "
            f"{'wgmma m%dn%dk%d' % tuple(instruction(e.bm, e.bn, True)) if e.wgmma else 'mma 16x8x16'} at "
            f"{e.rates.tile_flops(e.wgmma) / 1e12:.0f} TFLOP/s, fixed work of {area} positions at "
            f"{e.rates.floor(e.wgmma) * 1e12:.2f} ps)\n"
            f"  dot product:      {e.t_dot * 1e9:.3f} ns per entry (fixed work of {e.rates.dot_floor * 1e12:.1f} ps, "
            f"{e.k * e.elem} bytes of B from L2 at "
            f"{e.rates.dot_bytes / 1e12:.1f} TB/s, {2 * e.k} f32 flops at {e.rates.fma_flops / 1e12:.0f} TFLOP/s)\n"
            + (f"  choice: a tile with fewer than {used} entries ({100 * used / area:.1f}% of its {area} positions) is "
               f"computed as dot products, the others on tensor cores" if used <= area else
               f"  choice: every entry is computed as a dot product (a tile of {area} position"
               f"{'s' * (area != 1)} never reaches the {used} entries that tensor cores need)")
            + ("" if used == e.dot_below else f" (fixed by the pass option; the cost model says {e.dot_below})")
            + f"\n  rates: {e.rates.source}")
    return out

"""A cost model of a tiled kernel: estimated time from bytes moved, L2 reuse and occupancy.

`estimate(module, values, hw)` reads a module after `tile` (every tile extent concrete; dynamic
dims are evaluated at `values`) and models one launch (issue 13: "the decomposition chosen by a
cost model"):

* **blocks and occupancy**: the grid's block count; blocks per SM limited by shared memory
  (the bytes TileLang allocates: check-smem-fit's TileLang model, `smem_estimate`; buffers
  packed by lifetime), threads (2048 per SM) and 32 blocks; waves. With the sum of buffers x
  stages, MiSS with two shards per trip (BM = 64, BN = 128) looked like one block per SM where
  the GPU ran two, and the model ranked it below a slower form (docs/PERFORMANCE.md, "U shards
  per pipelined trip").
* **HBM bytes**: every input read once and every output written once (clipped to the tensor),
  plus re-reads that miss L2: a tensor whose tile offsets do not depend on some grid index is
  read again by every block along that index; the re-read hits L2 when the tensor fits in a
  quarter of L2, or when the only index it is independent of is the fastest one (blockIdx.x:
  the blocks that share its rows run together).
* **L2 traffic**: every block's loads and stores; a store straight from a register fragment is
  counted twice (its rows are written in 4-byte pieces, half-used sectors), one staged through
  shared memory once.
* **the dependent chain** of one block: each trip of a loop holding global copies or a gemm
  costs a latency plus its bytes at one block's bandwidth; a wave takes the chain of its block.

time = launch + the largest of HBM bytes / HBM bandwidth, L2 bytes / L2 bandwidth and waves x
chain, + OVERLAP x the other two (they do not overlap it perfectly). The
rates (`Hardware`) are H100 numbers: copy bandwidth and launch cost from ANCHORS.md and
benchmarks/miss.py, the trip latency and per-block bandwidth fitted to
benchmarks/probes/miss_decomposition (docs/PERFORMANCE.md). It ranks decompositions; it does
not predict times to better than a factor of about 1.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dsl import exprs
from dsl.ir import Module, Op
from dsl.types import DTYPES
from passes.check_smem_fit import smem_estimate


OVERLAP = 0.25  # fraction of the smaller bounds that the largest does not hide (fitted, see above)


@dataclass(frozen=True)
class Hardware:
    """Rates of one GPU (defaults: an H100 SXM, measured as the module docstring says)."""

    sms: int = 132
    hbm_tbps: float = 3.0  # device-to-device copy, bytes read + written
    l2_tbps: float = 7.0
    l2_bytes: int = 50 * 2**20
    smem_per_sm: int = 228 * 1024
    threads_per_sm: int = 2048
    launch_us: float = 4.0
    trip_us: float = 0.12  # latency of one loop trip that waits on global memory
    block_gbps: float = 48.0  # what one block's loads and stores reach on their own


@dataclass
class Estimate:
    """The model's numbers for one launch; `time_us` ranks configurations."""

    time_us: float
    blocks: int
    blocks_per_sm: int
    waves: int
    hbm_bytes: int
    l2_bytes: int
    chain_us: float
    terms: dict = field(default_factory=dict)  # the three bounds, in microseconds

    def line(self) -> str:
        t = self.terms
        return (f"{self.time_us:.1f} us (HBM {t['hbm_us']:.1f}, L2 {t['l2_us']:.1f}, chain {t['chain_us']:.1f} x "
                f"{self.waves} wave{'s' * (self.waves != 1)}; {self.blocks} blocks, {self.blocks_per_sm}/SM)")


def _value(text: str, env: dict[str, int]) -> int:
    return exprs.evaluate(exprs.parse(text), env)


def estimate(module: Module, values: dict[str, int] | None = None, hw: Hardware = Hardware()) -> Estimate:
    """The estimate of `module` (after `tile`) at its dims plus `values` (its dynamic dims)."""
    env = {**module.env, **(values or {})}
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    grid = [_value(g, env) for g in launch.attrs["grid"]] if "grid" in launch.attrs else [1]
    blocks = max(1, math.prod(grid))
    threads = _value(launch.attrs.get("threads", "128"), env)
    smem = smem_estimate(module, launch, "tilelang")  # TileLang's plan where it applies, else the sum
    per_sm = max(1, min(32, hw.threads_per_sm // max(threads, 1), hw.smem_per_sm // smem if smem else 32))
    waves = math.ceil(blocks / (hw.sms * per_sm))
    loads: dict[int, tuple] = {}  # tensor id -> (value, bytes per block, grid vars its offsets use)
    l2 = 0.0
    stored: dict[int, int] = {}
    chain = [0.0]

    def walk(ops: list[Op], trips: int) -> float:
        """Bytes the ops move per trip of their loop (and add nested loops to the chain)."""
        nonlocal l2
        moved = 0.0
        for op in ops:
            if op.name == "tile.for":
                n = max(0, _value(op.attrs["hi"], env) - _value(op.attrs["lo"], env))
                inner = walk(op.body.ops, trips * n)
                if inner:
                    chain[0] += trips * n * (hw.trip_us + inner / (hw.block_gbps * 1e3))
            elif op.name == "tile.copy":
                src, dst = op.operands
                if src.type.space == "global":
                    nbytes = _bytes(dst, src.type.dtype, env)  # the tile's elements at the tensor's dtype
                    used = set().union(*(exprs.names(exprs.parse(o)) for o in op.attrs.get("src_offsets", [])))
                    _, before, _ = loads.get(id(src), (src, 0, set()))
                    loads[id(src)] = (src, before + nbytes * trips, used)
                    moved += nbytes
                    l2 += nbytes * trips * blocks
                elif dst.type.space == "global":
                    nbytes = _bytes(src, dst.type.dtype, env)
                    stored[id(dst)] = dst.type.nbytes(env)
                    staged = src.type.space == "shared"
                    # a staged store waits for the tile in shared memory first: one more latency
                    moved += nbytes + (hw.trip_us * hw.block_gbps * 1e3 if staged else 0)
                    l2 += nbytes * trips * blocks * (1 if staged else 2)
            elif op.name == "tile.gemm":
                moved += 1  # a dependent step even when its operands are on chip
            for region in op.regions if op.name != "tile.for" else ():
                moved += walk(region.ops, trips)
        return moved

    top = walk(launch.body.ops, 1)
    if top:
        chain[0] += hw.trip_us + top / (hw.block_gbps * 1e3)
    vars_ = launch.attrs.get("vars", [])
    hbm = float(sum(stored.values()))
    for value, per_block, used in loads.values():
        size = value.type.nbytes(env)
        total = per_block * blocks
        hbm += min(size, total)
        free = [v for v in vars_ if v not in used]  # grid indices along which blocks re-read it
        if total > size and not (size <= hw.l2_bytes // 4 or free == vars_[:1]):
            hbm += total - size
    terms = {"hbm_us": hbm / (hw.hbm_tbps * 1e6), "l2_us": l2 / (hw.l2_tbps * 1e6), "chain_us": chain[0]}
    # the largest bound, plus a part of the others (they overlap it imperfectly): it breaks the
    # ties between configurations that all reach the HBM bound
    bounds = sorted((terms["hbm_us"], terms["l2_us"], waves * chain[0]))
    time_us = hw.launch_us + bounds[2] + OVERLAP * (bounds[0] + bounds[1])
    return Estimate(time_us, blocks, per_sm, waves, int(hbm), int(l2), chain[0], terms)


def _bytes(tile, dtype: str, env) -> int:
    """Bytes of global memory a copy of `tile` moves: its elements at the tensor's `dtype`."""
    n = DTYPES[dtype][0]
    for d in tile.type.shape:
        n *= exprs.evaluate(d, env)
    return n

"""CUDA lowering of the sampled gemm (SDDMM, seed 003): a `tiles` grid holding one `tile.sampled_gemm`.

Two kernels in one translation unit (and B's transposition, at K <= 32 the tile kernel's
persistent twin, and the dot products by column panels), launched one after the other by
tkc/cuda_runtime.py over the launch data of tkc.sparse.DispatchPlan (passed after the outputs: B
transposed as Bt [N, K], then tc_ptr, tc_m, tc_n, tc_order, dot_order, tc_pos, tc_rbase
(`DispatchPlan.cuda_tensors`), then the counts n_tc and n_dot as ints):

- `<kernel>`: one block per tensor-core tile (tiles with at least `dot_below` entries,
  passes/sparse_dispatch.py), grid n_tc, in one of two forms (passes/smem_sddmm.py `cuda_tiles`,
  which check-smem-fit{backend=cuda} reads):
  - wgmma (`wgmma_fits`: f16/bf16, K % 8 == 0, one warpgroup of 128 threads per 64 rows, BN up to
    256): A's rows [BMP][64] and B's K chunk of 64 through WGMMA_STAGES cp.async stages in the
    128-byte swizzle (16-byte vector v of row r at v ^ r % 8), zero-filled past M, N and K; each
    warpgroup issues wgmma m64n{BNP}k16 on its 64 rows of A (K-major) and all of B's chunk, chunk
    kt's wgmma in flight while chunk kt - 1's stage is refilled (`wgmma.wait_group 1`). B's chunk
    is read from B itself where N % 8 == 0, BNP % 64 == 0 and S has at most one wave of tiles
    (passes/smem_sddmm.py `n_major_fits`: BNP / 64 groups of [64 K rows][64 columns], N-major
    descriptors, so a launch whose entries all go to tiles transposes nothing), else from Bt's rows
    (B's columns) [BNP][64]
    (K-major descriptors; the runtime provides Bt: `tc_reads_bt` in the launch line). The last
    chunk's k16 steps wholly past K are neither copied nor multiplied (KLAST: at K = 32 half the
    chunk). The f32 accumulators have mma.sync's m16n8 C fragment layout per 8-column atom, so the
    epilogue is shared.
  - mma.sync: A's BM rows [BMP][BK] and B's BN columns [BK][BNP] through two stages, each warp a
    block of 16x8 mma.sync m16n8k16 atoms (ldmatrix fragments, B's transposed).
  The accumulators go to shared memory (float2 pairs into rows of BNP + 8 floats: a half-warp's
  rows on distinct banks) and the block writes the tile's entries: P[e] = C[row][col] for slot s,
  (row, col) from tc_pos[s] ((row << 8) | col in 16 bits where BM and BN are at most 256, else
  (row << 16) | col in 32), e = rbase[row] + s (tc_rbase's rows of the tile, kept in shared memory
  after the products) where the plan has tc_rbase, else tc_order[s]. The tile's tc_pos range is
  prefetched into L2 at the block's start (one cp.async.bulk.prefetch) and copied into shared
  memory by cp.async in chunks from a 16-byte boundary: the first PRE entries into bytes of their
  own after the stages (passes/smem_sddmm.py `_pos_pre`: as many as keep the blocks per SM, up to
  POS_PRE), copied as the K loop ends, while the last chunk's wgmma run; the next PCAP - PRE
  into the stages' bytes after the products, copied while the first chunk's entries are written;
  then PCAP at a time (from the products' end through the first chunk's bytes: 20224 entries for
  128 x 128 wgmma tiles). Writing a chunk's entries waits on no global load. (Against reading
  tc_order and an int32 tc_rc per entry, four at a time per thread: 12 bytes of index and output
  per entry become 6, and a chain of dependent loads per round becomes one copy per chunk.)
- `<kernel>_walk` (wgmma tiles at K <= 32 reading Bt, passes/smem_sddmm.py `persistent_fits`):
  the same tiles, persistent. Its grid is what is resident at once, and block b walks tiles b,
  b + G, ... through two stages of its own shared memory (`CudaTiles.walk`): the products at the
  base, then per stage A's and Bt's rows (64-byte rows in the 64-byte swizzle), the tile rows'
  first entries and up to PS places. The next tile's copies and the indices of the one after it
  are in flight while a tile is multiplied and its entries written; places past PS are read from
  tc_pos. The runtime launches it instead of `<kernel>` where the dot products are few
  (tkc/cuda_runtime.py `CudaLaunch.tile_launch`): at 10000^2 with 5M uniform entries, K = 32, the
  tiles took 52.0 us against 67.3 for a block per tile (H200, 2026-11-29, docs/PERFORMANCE.md).
- `<kernel>_dots`: DOT_PER_BLOCK entries of dot_order per block of DOT_THREADS (a warp), grid
  cdiv(n_dot, DOT_PER_BLOCK), no shared memory (so the tile kernel's shared memory does not limit its
  occupancy). G lanes per entry (each a strided share of K in 16-byte vectors of A's row and
  Bt's row, f32 fma), E entries per group at once so their loads overlap, a shuffle reduction
  over the G lanes. dot_order is sorted by row, so consecutive entries reuse A's row in L1. A
  null dot_order (the runtime's `dot_sequential`: every entry a dot product, S in (row, column)
  order) means entry i is the i-th: one dependent load fewer per round (4000^2 with 88k uniform
  entries: 16.8 -> 15.9 us per call, H200, docs/PERFORMANCE.md).
- `<kernel>_panels` (where N and K are whole 16-byte vectors, B's panel fits 48 KB and a lane's
  share of a row of A is at most PANEL_LANE_VECTORS_MAX vectors): the same
  dot products by column panels of B (`_panel_products`), launched instead of B's transpose and
  `<kernel>_dots` where the runtime's rule takes them (tkc/runtime.py `_panels_for`): one block
  of PANEL_THREADS per work item of tkc.sparse.DotPanels, whose data is passed in dot_order's
  place; no Bt (H200: 37000^2 with 368k uniform entries 54.4 -> 46.8 us per call, 4000^2 with
  88k 15.9 -> 15.0-15.3).

f16 and bf16 operands use both paths; f32 and f64 operands have no tensor-core path (the pass
puts every tile on dot products, and only `<kernel>_dots` is generated). P is f32[NNZ] (P[e]) or
dense [M, N] (P[(m0 + row) * N + n0 + col] from tc_rc on tiles, P[row_e * N + col_e] on dot
products; zero-filled by the runtime). The `tkc-launch` line records the
first kernel with the largest grid the dims allow (for the CPU emulation), and under `sddmm` both
kernels' names and DOT_PER_BLOCK.
"""

from __future__ import annotations

import json

from dsl import exprs
from dsl.diagnostics import TkError, error
from dsl.ir import Module, Op
from codegen.cuda_prelude import C_TYPES, PRELUDE
from passes import smem_sddmm
from passes.smem_sddmm import TRANSPOSE_TILE
from passes.sparse_dispatch import MMA_SHAPE
from passes.targets import DEFAULT_SM, SMEM_LIMITS
from tkc.sparse import GROUP_BATCH, GROUP_ENTRIES, GROUP_PANEL_BYTES, GROUP_ROWS

ARCH = "sm_90a"
DOT_ENTRIES = 4  # entries a group of lanes computes at once (their loads overlap)
DOT_ITERS = 2  # rounds of those per block
# the dot-product kernel's block, a warp: 5500 blocks of 16 entries at 4000^2 with 88k entries fill the SMs
# evenly where 688 blocks of 256 threads (4 per SM at 67 registers) made 1.3 waves: 18.6 -> 16.4 us per call,
# 10000^2 with 1M entries 89.6 -> 80.5 (H200, benchmarks/probes/sddmm_dot_block.py, docs/PERFORMANCE.md)
DOT_THREADS = 32
# a tile's first PRE entries' places: copied while its last K chunk's wgmma run (after the K loop, so
# its cp.async waits count the chunks' groups alone: before the first chunks' loads it delayed them;
# inside the loop it cost 8-22 registers)
PRE_LOAD = "        if (PRE > 0) places(ps, c0, PRE);  // the first chunk of places, while the last K chunk's wgmma run"
DOT_LANE_VECTORS = 2  # at least this many 16-byte vectors of K per lane (G, the lanes per entry, doubles while K allows)
TRANSPOSE_THREADS = 256
# `<kernel>_panels`: the dot products by panels of B's columns, one 32-byte sector of each row of B per panel
# (PANEL_BYTES / element size columns), read from B itself into shared memory (transposed), so the call has no
# transpose of B; each block one work item of at most PANEL_ENTRIES entries (tkc.sparse.DotPanels). At 4000^2 with
# 88k uniform entries, K = 256: 15.1 against 15.8 us per call for the transpose and `<kernel>_dots`; 37000^2 with
# 368k: 51.8 against 54.5 (H200, benchmarks/probes/sddmm_col_panels.py, docs/PERFORMANCE.md)
PANEL_BYTES = 32
PANEL_ENTRIES = 128
PANEL_THREADS = 128
# entries a group of lanes computes at once in `<kernel>_panels`: 8 measured faster in the probe
# (benchmarks/probes/sddmm_col_panels.py) but slower in benchmarks/sddmm.py (H200, docs/PERFORMANCE.md)
PANEL_ENTRIES_AT_ONCE = 4
PANEL_SMEM_MAX = 48 * 1024  # static shared memory: K up to 1528 for f16
# a lane of `<kernel>_panels` holds a round's rows of A in registers, PE x this many 16-byte vectors at most (K up to
# 1024 for f16, 512 for f32)
PANEL_LANE_VECTORS_MAX = 4
# `<kernel>_groups` (K = 32, f16 or bf16): every entry by row groups on mma.sync against a panel of Bt held in
# shared memory, one block of GROUP_THREADS per SM (tkc.sparse.RowGroups). At 10000^2 with 5M entries: 36.2 us
# uniform and 38.7 R-MAT against the tile walk's 52.2 and the one-tile kernel's 45.0 (H200, graph replays,
# benchmarks/probes/sddmm_row_groups.py `1024-128`, docs/PERFORMANCE.md "K = 32 by row groups"); 32.4-32.7 and
# 33.0-33.2 with the phases' classes spread, vector loads and blocks by cost ("K = 32 row groups: the phases' bank
# classes"); 31.9-32.0 and 32.0-32.2 with the panel's shares loaded at once ("K = 32 row groups: blocks to the panels
# by D'Hondt"). The runtime takes it by tkc/runtime.py `_groups_for`.
GROUP_K = 32
GROUP_THREADS = 1024
PANEL_DEPTH = 3  # `<kernel>_groups_b`: a thread's shares of its panel loaded at once (64 registers)


def sampled_launch(module: Module) -> tuple[Op, Op] | None:
    """(launch, sampled gemm) when `module` is a sampled-gemm kernel; a located TkError when a
    `tiles` grid holds anything else (what the GPU backends can lower)."""
    launch = next((op for op in module.func.body.ops if op.name == "tile.launch" and "tiles" in op.attrs), None)
    if launch is None:
        return None
    ops = [op for op in launch.body.ops]
    sampled = [op for op in ops if op.name == "tile.sampled_gemm"]
    if len(ops) != 1 or len(sampled) != 1:
        other = next((op for op in ops if op.name != "tile.sampled_gemm"), launch)
        raise error(other.loc, "the GPU backends lower a `tiles` grid that holds exactly one sampled gemm "
                    "(`P[S] = A[...] @ B[...]`)", "move other work into its own kernel, or run on `--target interp`")
    if module.func.attrs.get("scalars"):
        raise error(launch.loc, "a kernel with a `tiles` grid takes no runtime scalars on the GPU backends",
                    "make the scalar a problem dim or a schedule constant")
    if sum(1 for op in module.func.body.ops if op.name == "tile.launch") != 1:
        raise error(launch.loc, "a sampled-gemm kernel has exactly one `grid`")
    return launch, sampled[0]


def _c(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)


def emit(module: Module) -> str:
    launch, op = sampled_launch(module)
    func, env = module.func, module.env
    kname = func.attrs.get("sym_name", "kernel")
    a, b, rows, cols, out = op.operands
    M, K = (exprs.evaluate(d, env) if not isinstance(d, int) else d for d in a.type.shape)
    N = b.type.shape[1] if isinstance(b.type.shape[1], int) else exprs.evaluate(b.type.shape[1], env)
    nnz = rows.type.shape[0] if isinstance(rows.type.shape[0], int) else exprs.evaluate(rows.type.shape[0], env)
    sizes = smem_sddmm.dims(launch, op, env)
    bm, bn, threads = sizes.bm, sizes.bn, sizes.threads
    if not 32 <= threads <= 1024 or threads % 32:
        raise error(launch.loc, f"the CUDA backend runs a sampled gemm with whole warps; `threads` is {threads}",
                    "use a multiple of 32 from 32 to 1024")
    dt, odt = a.type.dtype, out.type.dtype
    if b.type.dtype != dt:
        raise error(op.loc, f"the sampled gemm's operands are {dt} and {b.type.dtype} on the CUDA backend; "
                    "they must have one dtype", "cast one of them in the caller")
    # tensor-core tiles: padded to the mma atom, K in chunks of BK through two shared-memory stages,
    # sized by passes/smem_sddmm.py (check-smem-fit{backend=cuda} reports one over budget first)
    fit = smem_sddmm.smem("cuda", sizes, kname)
    over = fit.diagnostic(launch, SMEM_LIMITS[DEFAULT_SM], DEFAULT_SM)
    if over is not None:
        raise TkError([over])
    tiles = fit.tiles
    tc = tiles.tc
    dense = out.type.rank == 2
    esize = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}[dt]
    vec = 16 // esize  # elements per 16-byte vector
    kvec = K % vec == 0  # rows of A and Bt start 16-byte aligned: vector loads
    # the dot path: G lanes per entry (each lane a strided share of K), E entries per group at once
    g = 1
    while g < 32 and K >= (g * 2) * vec * DOT_LANE_VECTORS:
        g *= 2
    e_per, iters = DOT_ENTRIES, DOT_ITERS
    dot_threads = DOT_THREADS
    dot_per_block = (dot_threads // g) * e_per * iters
    mm, mn, _ = MMA_SHAPE
    bmp, bnp, kp, bk = tiles.bmp, tiles.bnp, tiles.kp, tiles.bk
    apitch, bpitch, cpitch, stage_elems = tiles.apitch, tiles.bpitch, tiles.cpitch, tiles.stage_elems
    asyncs = kvec and N % vec == 0 and bn % vec == 0  # 16-byte cp.async for A's and B's rows
    smem = tiles.smem
    warps = threads // 32
    am, an = bmp // mm, bnp // mn
    wgm = min(am, warps)  # warps along M first (a balanced grid measured no faster on the H100, 2026-11-25)
    while warps % wgm:
        wgm -= 1
    wgn = warps // wgm
    fm, fn = -(-am // wgm), -(-an // wgn)  # atoms per warp (some warps idle when the tile is small)
    tiles_bound = max(-(-M // bm), 1) * max(-(-N // bn), 1)
    T, OT = C_TYPES[dt], C_TYPES[odt]
    pos_t = "unsigned short" if tiles.pos_bytes == 2 else "int"  # a tile entry's place: (row << 8) | col, else << 16
    dots = f"{kname}_dots"
    # the dot products by column panels of B: B's rows split into whole 16-byte vectors (N % vec == 0, K too)
    panel_w = PANEL_BYTES // esize
    panels = (f"{kname}_panels" if kvec and N % vec == 0 and panel_w * (K + vec) * esize <= PANEL_SMEM_MAX
              and -(-K // (g * vec)) <= PANEL_LANE_VECTORS_MAX and (M - 1) * panel_w < 2**31 else None)
    # every entry by row groups on mma.sync (tkc.sparse.RowGroups): K = 32, 16-bit operands, int32 indices of P
    group_w = GROUP_PANEL_BYTES // (2 * K) if K == GROUP_K else 0
    group_smem = GROUP_PANEL_BYTES + (GROUP_THREADS // 32) * GROUP_ENTRIES * 4
    groups = (f"{kname}_groups" if K == GROUP_K and dt in ("f16", "bf16") and (not dense or M * N < 2**31)
              and nnz < 2**31 else None)
    # `kernel`/`grid` name what one launch runs when there is one kernel (the CPU emulation runs it)
    config = {"kernel": kname if tc else dots, "grid": [max(tiles_bound if tc else -(-nnz // dot_per_block), 1), 1, 1],
              "block": [threads if tc else dot_threads, 1, 1], "cluster": [1, 1, 1], "smem_bytes": smem,
              "sddmm": {"dot_per_block": dot_per_block, "dot_threads": dot_threads, "dot_kernel": dots,
                        "tc_kernel": kname if tc else None,
                        "transpose_kernel": f"{kname}_transpose_b", "transpose_tile": TRANSPOSE_TILE,
                        "transpose_threads": TRANSPOSE_THREADS, "tc_reads_bt": tiles.wgmma and not tiles.reads_b,
                        "walk_kernel": f"{kname}_walk" if tc and tiles.walk else None,
                        "walk_smem": tiles.walk.smem if tc and tiles.walk else 0,
                        "panel_kernel": panels, "panel_width": panel_w, "panel_entries": PANEL_ENTRIES,
                        "panel_threads": PANEL_THREADS, "panel_smem": panel_w * (K + vec) * esize if panels else 0,
                        "group_kernel": groups, "group_threads": GROUP_THREADS, "group_smem": group_smem if groups else 0,
                        "group_dense": dense, "group_b_kernel": f"{groups}_b" if groups and N % 8 == 0 else None}}
    L = []
    w = L.append
    w(f"// Generated by tkc from {func.loc.file}: kernel `{kname}`, CUDA C++ for {ARCH}.")
    w("// Do not edit: regenerate with `tkc compile --target cuda`.")
    w(f"// Sampled gemm (SDDMM) at {op.loc.file}:{op.loc.line}:{op.loc.col}: P[e] = A[row_e, :] . B[:, col_e] over the "
      f"entries of `{op.attrs['pattern']}`, {bm} x {bn} tiles, K = {K}.")
    form = ("wgmma m64n%dk16 per warpgroup, reading %s" % (bnp, "B" if tiles.reads_b else "Bt") if tc and tiles.wgmma
            else "mma.sync m16n8k16")
    w(f"// Launch: `{kname}` over the n_tc tensor-core tiles ({form}; grid n_tc, dynamic shared memory {smem} bytes), then "
      f"`{dots}` over the dot-product entries (grid cdiv(n_dot, {dot_per_block}), block ({dot_threads}, 1, 1), no shared "
      f"memory); tile block ({threads}, 1, 1); the counts come from the pattern's DispatchPlan." if tc else
      f"// Launch: `{dots}` over every entry as a dot product (grid cdiv(n_dot, {dot_per_block}), block ({dot_threads}, 1, 1)).")
    if tc and tiles.walk is not None:
        w(f"// Also `{kname}_walk`: the same tiles, persistent (grid: the blocks resident at once, dynamic shared memory "
          f"{tiles.walk.smem} bytes), launched instead of `{kname}` where the dot products are few.")
    if panels:
        w(f"// Or `{panels}` instead of B's transpose and `{dots}` (the runtime's choice per pattern): the dot products by "
          f"panels of {panel_w} columns of B (grid: the pattern's work items, block ({PANEL_THREADS}, 1, 1), dynamic shared memory "
          f"{panel_w * (K + vec) * esize} bytes).")
    if groups:
        w(f"// And `{groups}`: every entry by row groups on mma.sync against panels of {group_w} rows of Bt in shared "
          f"memory (tkc.sparse.RowGroups; grid: one block per SM, block ({GROUP_THREADS}, 1, 1), dynamic shared memory "
          f"{group_smem} bytes; in place of the others where the runtime's rule per pattern says so).")
    w(f"// Tiles with fewer than {op.attrs.get('dot_below', 0)} entries are dot products "
      f"(sparse-dispatch){'' if tc else '; this kernel has no tensor-core path (' + dt + ' operands)'}.")
    w(f"// Build: nvcc -arch={ARCH} -cubin -O3 kernel.cu (tkc.compile(..., target=\"cuda\") does it)")
    for i, v in enumerate(func.body.args):
        role = "output" if i in func.attrs.get("outputs", []) else "input"
        shape = ", ".join(str(d if isinstance(d, int) else exprs.evaluate(d, env)) for d in v.type.shape)
        w(f"// {role} {v.name}: {v.type.dtype}[{shape}]")
    w(f"// launch data (tkc.sparse.DispatchPlan): Bt {dt}[N, K] (read by the dot products"
      f"{' and the wgmma tiles' if tc and tiles.wgmma and not tiles.reads_b else ''}), tc_ptr i32[n_tc + 1], "
      f"tc_m i32[n_tc], tc_n i32[n_tc], tc_order i32[..], dot_order i32[n_dot] (null: 0, 1, ...), tc_pos {'u16' if tiles.pos_bytes == 2 else 'i32'}[..], "
      "tc_rbase i32[n_tc * BM or 0], then n_tc and n_dot by value")
    w(f"// tkc-launch: {json.dumps(config)}")
    L.extend(PRELUDE.rstrip("\n").split("\n"))
    w("")
    w("// ---- kernel --------------------------------------------------------------------------------")
    w("")
    w(f"constexpr int M = {M}, N = {N}, K = {K}, BM = {bm}, BN = {bn};")
    w(f"constexpr int THREADS = {threads}, DOT_THREADS = {dot_threads}, G = {g}, E = {e_per}, ITERS = {iters}, "
      f"DOT_PER_BLOCK = {dot_per_block};")
    if panels:
        w(f"constexpr int PW = {panel_w}, PANEL_THREADS = {PANEL_THREADS}, PE = {PANEL_ENTRIES_AT_ONCE}, VEC = {vec};  "
          "// columns per panel, its block, entries per group at once, elements per 16-byte vector")
    if tc:
        w(f"constexpr int BMP = {bmp}, BNP = {bnp}, BK = {bk}, APITCH = {apitch}, BPITCH = {bpitch}, CPITCH = {cpitch}, "
          f"STAGES = {tiles.stages}, STAGE = {stage_elems};")
        w(f"constexpr int KT = {-(-kp // bk)};  // K chunks")
        w(f"constexpr int FM = {fm}, FN = {fn}, WGN = {wgn};  // mma atoms per warp, warps along N")
        w(f"constexpr int RB = {-(-bm // threads)};  // tile rows per thread (their first entries' indices)")
        w(f"constexpr int PCAP = {tiles.pos_cap}, PRE = {tiles.pos_pre}, PV = {16 // tiles.pos_bytes};  // entries' "
          "places in shared memory at once, loaded during the K loop, per 16-byte vector")
    w("")
    w(f"__device__ __forceinline__ float tk_f(const {T} x) {{ return {_to_f32(dt, 'x')}; }}")
    w(f"__device__ __forceinline__ {OT} tk_o(const float x) {{ return {_from_f32(odt, 'x')}; }}")
    w(f"__device__ __forceinline__ void tk_o_stream({OT}* p, const float x) {{  // an output written once: evict-first")
    w(f"    {'__stcs(p, x);' if odt == 'f32' else '*p = tk_o(x);'}")
    w("}")
    if tc:
        w("// two 8x8 b16 matrices, transposed: the k-major B fragment of one 16x8 mma atom (lanes 0-15 give rows)")
        w("__device__ __forceinline__ void tk_ldmatrix_x2_trans(unsigned& r0, unsigned& r1, const void* smem_row) {")
        w("    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));")
        w('    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\\n" : "=r"(r0), "=r"(r1) '
          ': "r"(a));')
        w("}")
    if tc and tiles.wgmma:
        _wgmma_helpers(w, dt, bnp, tiles.reads_b, tiles.walk is not None)
    w("")
    sparse_args = (f"const {T}* __restrict__ Bt, const int* __restrict__ tc_ptr, const int* __restrict__ tc_m, "
                   "const int* __restrict__ tc_n, const int* __restrict__ tc_order, const int* __restrict__ dot_order, "
                   f"const {pos_t}* __restrict__ tc_pos, "
                   "const int* __restrict__ tc_rbase, const int n_tc, const int n_dot")
    head = (f"(const {T}* __restrict__ A, const {T}* __restrict__ B, const int* __restrict__ rows, "
            f"const int* __restrict__ cols, {OT}* __restrict__ P, {sparse_args})")
    # P's index of the entry at slot q, at row `row` and column `col` of its tile
    index = "(size_t)(m0 + row) * N + n0 + col" if dense else "(ordered ? rbase[row] + q : tc_order[q])"
    if tc:
        w("// one block per tensor-core tile")
        w(f"extern \"C\" __global__ void __launch_bounds__({threads}) {kname}{head} {{")
        w("    const int tid = threadIdx.x;")
        w("    const int blk = blockIdx.x;")
        _tensor_core_tile(w, T, index, asyncs, vec, tiles, dense)
        w("}")
        w("")
    if tc and tiles.walk is not None:
        w("// the same tiles, persistent: tiles blockIdx.x, + gridDim.x, ... (the grid is what is resident at once)")
        w(f"extern \"C\" __global__ void __launch_bounds__({threads}) {kname}_walk{head} {{")
        w("    const int tid = threadIdx.x;")
        _persistent_tile(w, index, tiles.walk)
        w("}")
        w("")
    _transpose(w, f"{kname}_transpose_b", T, N % vec == 0 and K % vec == 0, vec)
    w("// DOT_PER_BLOCK dot-product entries per block")
    w(f"extern \"C\" __global__ void __launch_bounds__({dot_threads}) {dots}{head} {{")
    w("    const int tid = threadIdx.x;")
    _dot_products(w, T, dense, kvec, vec)
    w("}")
    if groups:
        w("")
        _row_groups(w, groups, head, T, group_w, dense)
        if N % 8 == 0:  # B's rows are whole 16-byte vectors: the panels can come from B itself
            w("")
            _row_groups(w, f"{groups}_b", head, T, group_w, dense, from_b=True)
    if panels:
        w("")
        w("// the dot products by panels of PW columns of B: one work item of tkc.sparse.DotPanels per block")
        w(f"extern \"C\" __global__ void __launch_bounds__({PANEL_THREADS}) {panels}{head} {{")
        _panel_products(w, T, dense)
        w("}")
    return "\n".join(L) + "\n"


def _tensor_core_tile(w, T: str, index: str, asyncs: bool, vec: int, tiles, dense: bool) -> None:
    """One block per tensor-core tile (module docstring): K in chunks of BK through STAGES stages,
    STAGES - 1 chunks loading ahead of the one multiplied; wgmma m64nNk16 per warpgroup (the wgmma
    form) or mma.sync m16n8k16 per warp atom; then the tile's entries out of the products."""
    wg = tiles.wgmma
    w("    {  // ---- a tensor-core tile ----")
    w("        extern __shared__ __align__(128) unsigned char smem_raw[];")
    if wg:
        w("        // the stages start at a multiple of 1024 bytes (the 128-byte swizzle's atom; the slack is allocated)")
        w("        unsigned char* const smem = smem_raw + ((1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024);")
        w(f"        {T}* const st = reinterpret_cast<{T}*>(smem);  // STAGES x (A [BMP][64] then "
          f"{'B [BNP / 64][64][64]' if tiles.reads_b else 'Bt [BNP][64]'}, swizzled)")
    else:
        w("        unsigned char* const smem = smem_raw;")
        w(f"        {T}* const st = reinterpret_cast<{T}*>(smem);  // STAGES x (A [BMP][APITCH] then B [BK][BPITCH])")
    w("        float* const cs = reinterpret_cast<float*>(smem);  // the products [BMP][CPITCH], after the K loop")
    w("        const int m0 = tc_m[blk] * BM, n0 = tc_n[blk] * BN;")
    w("        const int warp = tid / 32, lane = tid % 32;")
    w("        const int wm = warp / WGN, wn = warp % WGN;")
    if wg:
        _wgmma_load(w, T, tiles)
    else:
        _mma_load(w, T, asyncs, vec)
    w("        // the tile's entries' places (tc_pos) prefetched into L2 whole during the K loop"
      + ("" if dense else "; its rows' first entries (tc_rbase, where S's order keeps each tile row's entries "
                          "together) loaded"))
    w("        const int first = tc_ptr[blk], end = tc_ptr[blk + 1];")
    w("        if (tid == 0 && first < end) {  // tc_pos is zero-padded to 16 bytes: the rounded range is in it")
    w("            const size_t lo = reinterpret_cast<size_t>(tc_pos + first) & ~size_t(15);")
    w("            const size_t hi = (reinterpret_cast<size_t>(tc_pos + end) + 15) & ~size_t(15);")
    w('            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\\n" :: "l"(lo), "r"(static_cast<unsigned>(hi - lo)) '
      ': "memory");')
    w("        }")
    pt = "unsigned short" if tiles.pos_bytes == 2 else "int"
    w("        // the tile's entries' places, a chunk at a time from a 16-byte boundary, into shared memory: the first")
    w("        // PRE in bytes of their own after the stages (copied as the K loop ends), the next")
    w("        // PCAP at a time after the products (from the products' end through those bytes)")
    pre_at = tiles.smem - (smem_sddmm.WGMMA_SLACK if wg else 0) - tiles.pos_pre * tiles.pos_bytes  # after the stages
    w(f"        {pt}* const ps = reinterpret_cast<{pt}*>(smem + {pre_at});")
    w(f"        {pt}* const pall = reinterpret_cast<{pt}*>(smem + {tiles.epilogue_bytes});")
    w("        const int pend = (end + PV - 1) / PV * PV;  // (tc_pos is zero-padded to it)")
    w("        int c0 = first / PV * PV;")
    w(f"        auto places = [&]({pt}* const to, const int from, const int cap) {{")
    w("            const int n = min(cap, pend - from) / PV;")
    w("            for (int v = tid; v < n; v += THREADS) tk_cp_async<16>(to + v * PV, tc_pos + from + v * PV);")
    w("            tk_cp_async_commit();")
    w("        };")
    w("        // launched programmatically after B's transpose: the tile's indices above were written before the")
    w("        // call; A, B and Bt are read after the transpose has finished. The dot products may launch now.")
    w("        tk_pdl_wait();")
    w("        if (n_dot > 0) tk_pdl_trigger();")
    w("        #pragma unroll 1")
    if wg:  # one cp.async group per chunk slot, empty past K's chunks: the loop's waits count groups
        w("        for (int kt = 0; kt < STAGES - 1; ++kt) if (kt < KT) load(kt); else tk_cp_async_commit();")
    else:
        w("        for (int kt = 0; kt < STAGES - 1 && kt < KT; ++kt) load(kt);  // the first chunks in flight")
    if not dense:
        w("        const bool ordered = tc_rbase != nullptr;  // else each entry's index is read from tc_order")
        w("        int rb[RB] = {};")
        w("        #pragma unroll")
        w("        for (int i = 0; i < RB; ++i)")
        w("            if (ordered && tid + i * THREADS < BM) rb[i] = tc_rbase[(size_t)blk * BM + tid + i * THREADS];")
    w("        float acc[FM][FN][4];")
    w("        #pragma unroll")
    w("        for (int i = 0; i < FM; ++i)")
    w("            #pragma unroll")
    w("            for (int j = 0; j < FN; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.0f;")
    w("        #pragma unroll 1")
    w("        for (int kt = 0; kt < KT; ++kt) {")
    if wg:  # chunk kt's wgmma run while chunk kt - 1's stage is refilled
        w("            tk_cp_async_wait<STAGES - 2>();  // chunk kt is in (one group per iteration, empty at the end)")
        w('            asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");  // cp.async data -> wgmma\'s proxy')
        w("            __syncthreads();")
        w("            const " + T + "* const sa = st + (kt % STAGES) * STAGE;")
        w("            const " + T + "* const sb = sa + BMP * 64;")
        w("            // warpgroup g multiplies A's rows 64g..64g+63 by all of B's chunk: 4 wgmma of k16 per chunk")
        w("            const unsigned long long da = tk_wgmma_desc(sa + (warp / 4) * 64 * 64), "
          f"db = tk_wgmma_desc{'_n' if tiles.reads_b else ''}(sb);")
        w('            asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");')
        w("            #pragma unroll")
        if tiles.reads_b:
            w("            for (int kk = 0; kk < 4; ++kk)  // A: 32 bytes along its swizzled rows (address + 2); B: 16 rows "
              "of 128 bytes (address + 128)")
            w("                if (kt < KT - 1 || kk < KLAST) tk_wgmma(acc, da + 2 * kk, db + 128 * kk);  // (none past K)")
        else:
            w("            for (int kk = 0; kk < 4; ++kk)  // 32 bytes along the swizzled rows: the descriptors' address + 2")
            w("                if (kt < KT - 1 || kk < KLAST) tk_wgmma(acc, da + 2 * kk, db + 2 * kk);  // (none past K)")
        w('            asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");')
        w('            asm volatile("wgmma.wait_group.sync.aligned 1;\\n" ::: "memory");  // chunk kt - 1\'s are done')
        w("            __syncthreads();  // so its stage, (kt + STAGES - 1) % STAGES, is free")
        w("            if (kt + STAGES - 1 < KT) load(kt + STAGES - 1); else tk_cp_async_commit();")
        w("        }")
        w(PRE_LOAD)
        w('        asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");')
        w("        __syncthreads();  // every warpgroup's wgmma have read the stages that the products overwrite")
    else:
        _mma_loop(w, T, asyncs)
        w(PRE_LOAD)
    w(f"        const {pt}* at = PRE > 0 ? ps : pall;")
    w("        int cap = PRE > 0 ? PRE : PCAP;")
    w("        const bool second = PRE > 0 && c0 + PRE < end;")
    w("        if (PRE == 0) places(pall, c0, PCAP);  // in flight while the products are stored")
    w("        else if (second) places(pall, c0 + PRE, PCAP - PRE);  // the second chunk (before the first's bytes), in "
      "flight while the first is written")
    w("        // the products to shared memory (the stages' bytes), then the tile's entries out of them")
    _store_products(w)
    if not dense:
        w("        int* const rbase = reinterpret_cast<int*>(cs + BMP * CPITCH);  // [BM], after the products")
        w("        #pragma unroll")
        w("        for (int i = 0; i < RB; ++i)")
        w("            if (tid + i * THREADS < BM) rbase[tid + i * THREADS] = rb[i];")
    w("        for (;;) {  // each chunk: its places in, then its entries written, THREADS at a time")
    w("            if (at == ps && second) tk_cp_async_wait<1>();  // the first chunk in (its group is older)")
    w("            else tk_cp_async_wait<0>();")
    w("            __syncthreads();")
    w("            const int c1 = min(c0 + cap, end);")
    w("            #pragma unroll 4")
    w("            for (int q = max(c0, first) + tid; q < c1; q += THREADS) {")
    _entry(w, "                ", "at[q - c0]", index, tiles)
    w("            }")
    w("            c0 += cap;")
    w("            if (c0 >= end) break;")
    w("            if (at == ps) {  // the second chunk is in flight")
    w("                at = pall;")
    w("                cap = PCAP - PRE;")
    w("                continue;")
    w("            }")
    w("            __syncthreads();  // every thread is done with the chunk's places")
    w("            places(pall, c0, PCAP);")
    w("            cap = PCAP;")
    w("        }")
    w("    }")


def _persistent_tile(w, index: str, tiles) -> None:
    """The persistent wgmma form (passes/smem_sddmm.py `persistent_fits`: K <= 32, B read as Bt):
    block b walks tiles t = b, b + G, ... (G = gridDim.x) through STAGES = 2 stages. While tile t
    is multiplied and its entries written, tile t + G's rows of A and Bt (64-byte rows in the
    64-byte swizzle, zero-filled past M, N and K), its rows' first entries (tc_rbase) and its first
    PS places (tc_pos from a 16-byte boundary) are in flight into the other stage, and tile
    t + 2G's indices (tc_m, tc_n, tc_ptr) into registers. A tile: its stage's copies waited for,
    wgmma m64nBNPk16 per warpgroup over K's k16 steps (the first with accumulate 0, so the
    accumulators need no zeroing), the products to shared memory of their own [BMP][CPITCH] (the
    float2 pairs of the one-tile form), then its entries: P[index] = C[row][col] from the places
    in the stage, and from tc_pos itself past PS."""
    pt = "unsigned short" if tiles.pos_bytes == 2 else "int"
    prod = tiles.bmp * tiles.cpitch * 4
    ops = tiles.operand_bytes
    side = tiles.side_bytes
    w("    extern __shared__ __align__(128) unsigned char smem_raw[];")
    w("    // the products at a multiple of 1024 bytes (the slack is allocated), then the stages' rows (multiples of 4096")
    w("    // bytes: the 64-byte swizzle's 512-byte atoms stay aligned), then each stage's row bases and places")
    w("    unsigned char* const smem = smem_raw + ((1024 - static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) % 1024) % 1024);")
    w("    float* const cs = reinterpret_cast<float*>(smem);  // the products [BMP][CPITCH]")
    w(f"    constexpr int OPS = {ops}, SIDE = {side}, ROWS_AT = {prod}, SIDE_AT = {prod + tiles.stages * ops};  // bytes")
    w(f"    constexpr int PS = {tiles.pos_stage};  // entries' places per stage (PV per 16-byte vector)")
    w("    constexpr int KLAST = (K + 15) / 16;  // k16 steps (1 or 2)")
    w("    constexpr int RPT = THREADS / 4;  // rows per trip: thread tid copies 16-byte vector lv = tid % 4 of rows lrow + RPT * j")
    w("    const int warp = tid / 32, lane = tid % 32;")
    w("    const int wm = warp / WGN, wn = warp % WGN;")
    w("    const int lrow = tid / 4, lv = tid % 4;")
    w("    const bool kok = lv * 8 < K, kin = lv / 2 < KLAST;  // vector lv holds K columns; is read by a k16 step")
    w("    // the thread's vector of its first row in stage 0 (RPT is a multiple of 8: the swizzle is the same for every trip)")
    w("    const unsigned sdst = static_cast<unsigned>(__cvta_generic_to_shared(smem)) + ROWS_AT + lrow * 64 + "
      "((lv ^ ((lrow / 2) % 4)) * 16);")
    w("    const bool ordered = tc_rbase != nullptr;  // else each entry's index is read from tc_order")
    w("    const int G = gridDim.x;")
    w("    // tile t into stage s: A's and Bt's rows, then its rows' first entries and its first PS places")
    w("    auto load = [&](const int s, const int t, const int mt, const int nt, const int first, const int end) {")
    w("        const int m0 = mt * BM, n0 = nt * BN;")
    w("        const unsigned sa = sdst + s * OPS;")
    w("        if (kin) {")
    w("            #pragma unroll")
    w("            for (int j = 0; j < BMP / RPT; ++j) {")
    w("                const bool ok = kok && (M % BM == 0 || m0 + lrow + RPT * j < M);")
    w("                tk_cp_async<16>(sa + RPT * j * 64, ok ? A + (size_t)(m0 + lrow + RPT * j) * K + lv * 8 : A, ok);")
    w("            }")
    w("            #pragma unroll")
    w("            for (int j = 0; j < (BNP + RPT - 1) / RPT; ++j) {")
    w("                if (BNP % RPT == 0 || lrow + RPT * j < BNP) {")
    w("                    const bool ok = kok && ((N % BN == 0 && BNP == BN) || n0 + lrow + RPT * j < N);")
    w("                    tk_cp_async<16>(sa + (BMP + RPT * j) * 64, ok ? Bt + (size_t)(n0 + lrow + RPT * j) * K + lv * 8 : Bt, ok);")
    w("                }")
    w("            }")
    w("        }")
    w("        unsigned char* const side = smem + SIDE_AT + s * SIDE;")
    w("        #pragma unroll")
    w("        for (int i = 0; i < (BMP / 4 + THREADS - 1) / THREADS; ++i) {  // (a constant trip count: no loop)")
    w("            const int v = tid + i * THREADS;")
    w("            if (ordered && v < BMP / 4) tk_cp_async<16>(side + v * 16, tc_rbase + (size_t)t * BM + v * 4);")
    w("        }")
    w(f"        {pt}* const ps = reinterpret_cast<{pt}*>(side + BMP * 4);")
    w("        const int c0 = first / PV * PV, n = min(PS, (end + PV - 1) / PV * PV - c0) / PV;  // (tc_pos is zero-padded to 16 bytes)")
    w("        #pragma unroll")
    w("        for (int i = 0; i < (PS / PV + THREADS - 1) / THREADS; ++i) {")
    w("            const int v = tid + i * THREADS;")
    w("            if (v < n) tk_cp_async<16>(ps + v * PV, tc_pos + c0 + v * PV);")
    w("        }")
    w("        tk_cp_async_commit();")
    w("    };")
    w("    int t = blockIdx.x;")
    w("    int mc = tc_m[t], nc = tc_n[t], fc = tc_ptr[t], ec = tc_ptr[t + 1];  // this tile's indices")
    w("    int mn = 0, nn = 0, fn = 0, en = 0;  // the next one's")
    w("    if (t + G < n_tc) mn = tc_m[t + G], nn = tc_n[t + G], fn = tc_ptr[t + G], en = tc_ptr[t + G + 1];")
    w("    // launched programmatically after B's transpose: the indices above were written before the call; A and")
    w("    // Bt are read after the transpose has finished. The dot products may launch now.")
    w("    tk_pdl_wait();")
    w("    if (n_dot > 0) tk_pdl_trigger();")
    w("    load(0, t, mc, nc, fc, ec);")
    w("    float acc[FM][FN][4];")
    w("    #pragma unroll 1")
    w("    for (int s = 0; t < n_tc; t += G, s ^= 1) {")
    w("        // the next tile into the other stage (its last readers passed the previous tile's final barrier)")
    w("        if (t + G < n_tc) load(s ^ 1, t + G, mn, nn, fn, en); else tk_cp_async_commit();")
    w("        int m2 = 0, n2 = 0, f2 = 0, e2 = 0;  // the indices of the tile after it, in flight through this one")
    w("        if (t + 2 * G < n_tc) m2 = tc_m[t + 2 * G], n2 = tc_n[t + 2 * G], f2 = tc_ptr[t + 2 * G], e2 = tc_ptr[t + 2 * G + 1];")
    w("        tk_cp_async_wait<1>();  // this tile's copies are in (the next tile's group is younger)")
    w('        asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");  // cp.async data -> wgmma\'s proxy')
    w("        __syncthreads();")
    w("        const unsigned char* const sa = smem + ROWS_AT + s * OPS;")
    w("        const unsigned long long da = tk_wgmma_desc64(sa + (warp / 4) * 64 * 64), db = tk_wgmma_desc64(sa + BMP * 64);")
    w('        asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");')
    w("        #pragma unroll")
    w("        for (int kk = 0; kk < KLAST; ++kk)  // 32 bytes along the swizzled rows: the descriptors' address + 2")
    w("            tk_wgmma(acc, da + 2 * kk, db + 2 * kk, kk);  // (the first k16 step overwrites the accumulators)")
    w('        asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");')
    w('        asm volatile("wgmma.wait_group.sync.aligned 0;\\n" ::: "memory");')
    w("        const int m0 = mc * BM, n0 = nc * BN;")
    _store_products(w)
    w("        __syncthreads();")
    w("        const unsigned char* const side = smem + SIDE_AT + s * SIDE;")
    w("        const int* const rbase = reinterpret_cast<const int*>(side);")
    w(f"        const {pt}* const ps = reinterpret_cast<const {pt}*>(side + BMP * 4);")
    w("        const int c0 = fc / PV * PV;")
    w("        #pragma unroll 4")
    w("        for (int q = fc + tid; q < ec; q += THREADS) {")
    _entry(w, "            ", "q - c0 < PS ? ps[q - c0] : tc_pos[q]", index, tiles)
    w("        }")
    w("        __syncthreads();  // the products and this stage are free")
    w("        mc = mn, nc = nn, fc = fn, ec = en;")
    w("        mn = m2, nn = n2, fn = f2, en = e2;")
    w("    }")


def _store_products(w) -> None:
    """A tile's f32 accumulators (mma.sync's m16n8 C fragment per 8-column atom, which wgmma's
    have too) to the products cs [BMP][CPITCH] in shared memory."""
    w("        #pragma unroll")
    w("        for (int i = 0; i < FM; ++i)")
    w("            #pragma unroll")
    w("            for (int j = 0; j < FN; ++j) {")
    w("                const int r = (wm * FM + i) * 16 + lane / 4, c = (wn * FN + j) * 8 + (lane % 4) * 2;")
    w("                if (r < BMP && c < BNP) {  // float2 pairs: CPITCH = BNP + 8 puts a half-warp's 4 rows on distinct banks")
    w("                    *reinterpret_cast<float2*>(&cs[r * CPITCH + c]) = make_float2(acc[i][j][0], acc[i][j][1]);")
    w("                    *reinterpret_cast<float2*>(&cs[(r + 8) * CPITCH + c]) = make_float2(acc[i][j][2], acc[i][j][3]);")
    w("                }")
    w("            }")


def _entry(w, pad: str, place: str, index: str, tiles) -> None:
    """Entry slot q of a tile: its place `place` (tc_pos's (row << 8) | col, or << 16) decoded, its
    product from cs written to P[index]."""
    shift, mask = (8, "0xff") if tiles.pos_bytes == 2 else (16, "0xffff")
    w(f"{pad}const int rc = {place}, row = rc >> {shift}, col = rc & {mask};")
    w(f"{pad}P[{index}] = tk_o(cs[row * CPITCH + col]);")


def _mma_load(w, T: str, asyncs: bool, vec: int) -> None:
    """The mma.sync form's `load(kt)`: K chunk kt into stage kt % STAGES (A's rows [BMP][BK] and
    B's rows [BK][BNP], padded pitches), 16-byte cp.async where rows allow, else element copies."""
    w("        auto load = [&](const int kt) {  // K chunk kt into stage kt % STAGES, zero-filled past M, N and K")
    w("            " + T + "* const sa = st + (kt % STAGES) * STAGE;")
    w("            " + T + "* const sb = sa + BMP * APITCH;")
    w("            const int k0 = kt * BK;")
    if asyncs:
        w(f"            for (int i = tid; i < BMP * (BK / {vec}); i += THREADS) {{  // A: 16-byte vectors along K")
        w(f"                const int row = i / (BK / {vec}), k = k0 + (i % (BK / {vec})) * {vec};")
        w("                const bool ok = k < K && m0 + row < M;")
        w(f"                tk_cp_async<16>(sa + row * APITCH + (i % (BK / {vec})) * {vec}, "
          "ok ? A + (size_t)(m0 + row) * K + k : A, ok);")
        w("            }")
        w(f"            for (int i = tid; i < BK * (BNP / {vec}); i += THREADS) {{  // B: 16-byte vectors along N")
        w(f"                const int kr = i / (BNP / {vec}), n = n0 + (i % (BNP / {vec})) * {vec};")
        w("                const bool ok = k0 + kr < K && n < N;")
        w(f"                tk_cp_async<16>(sb + kr * BPITCH + (i % (BNP / {vec})) * {vec}, "
          "ok ? B + (size_t)(k0 + kr) * N + n : B, ok);")
        w("            }")
        w("            tk_cp_async_commit();")
    else:
        w("            for (int i = tid; i < BMP * BK; i += THREADS) {")
        w("                const int row = i / BK, k = k0 + i % BK;")
        w(f"                sa[row * APITCH + i % BK] = k < K && m0 + row < M ? A[(size_t)(m0 + row) * K + k] : {T}(0.0f);")
        w("            }")
        w("            for (int i = tid; i < BK * BNP; i += THREADS) {")
        w("                const int kr = i / BNP, n = n0 + i % BNP;")
        w(f"                sb[kr * BPITCH + i % BNP] = k0 + kr < K && n < N ? B[(size_t)(k0 + kr) * N + n] : {T}(0.0f);")
        w("            }")
    w("        };")


def _wgmma_load(w, T: str, tiles) -> None:
    """The wgmma form's `load(kt)`: K chunk kt into stage kt % STAGES. Thread t copies the 16-byte
    vector v = t % 8 of the rows t / 8 + RPT * j (RPT = THREADS / 8 rows per trip; BMP / RPT = 4
    trips over A's rows, then B's chunk), so its global row pointers, its place in the 128-byte
    swizzle (v ^ row % 8: RPT is a multiple of 8) and its bounds are computed once per tile and a
    chunk's copy is a pointer offset per vector (ncu on the H100, 2026-11-27: the per-vector index
    arithmetic had the ALU and FMA pipes at 42% and 35% and the tile kernel issue-bound). B's chunk
    is Bt's BNP rows of 64 K (K-major), or with `reads_b` B's 64 K rows of each group of 64
    columns (N-major: 64 / RPT trips per group, group g 8192 bytes after group g - 1). Each bounds
    check is guarded by a constant condition (M, N, K, BM, BN, BNP are constexpr), so nvcc drops
    the ones the dims make always true; rows past M or N and columns past K (with `reads_b`: rows
    past K and columns past N) are zero-filled, and what the last chunk's k16 steps never read
    (past KLAST; Bt's rows past BNP) is not copied."""
    bmp, bnp = tiles.bmp, tiles.bnp
    rpt = bmp // 4  # THREADS / 8: wgmma_fits has one warpgroup of 128 threads per 64 rows
    w(f"        // thread tid copies 16-byte vector lv of rows lrow + {rpt} * j (A's for j < 4, then B's chunk) of each chunk")
    w(f"        constexpr int RPT = {rpt};")
    w("        constexpr int KLAST = (K - (KT - 1) * BK + 15) / 16;  // k16 steps of the last chunk (the rest is past K)")
    w("        const int lrow = tid / 8, lv = tid % 8;")
    w(f"        const {T}* const ga = A + (size_t)(m0 + lrow) * K + lv * 8;")
    if tiles.reads_b:
        w(f"        const {T}* const gb = B + (size_t)lrow * N + n0 + lv * 8;  // B's row lrow of the chunk, from column n0")
    else:
        w(f"        const {T}* const gb = Bt + (size_t)(n0 + lrow) * K + lv * 8;")
    w("        const unsigned sdst = static_cast<unsigned>(__cvta_generic_to_shared(st)) + lrow * 128 + ((lv ^ (lrow % 8)) * 16);")
    w("        auto load = [&](const int kt) {  // K chunk kt into stage kt % STAGES, zero-filled past M, N and K")
    w(f"            const unsigned sa = sdst + (kt % STAGES) * (STAGE * sizeof({T}));")
    w("            const int k0 = kt * BK;")
    w("            const bool kok = K % BK == 0 || k0 + lv * 8 < K;  // (every column is in when BK divides K)")
    # A's rows (and Bt's) hold K along the vector: a thread's vectors past the last chunk's k16 steps
    # are never read; B's own rows (`reads_b`) hold K along the rows, skipped row by row below
    w("            if (kt < KT - 1 || lv / 2 < KLAST) {  // (past the last chunk's k16 steps: never read)")
    w("                #pragma unroll")
    w("                for (int j = 0; j < 4; ++j) {")
    w("                    const bool ok = kok && (M % BM == 0 || m0 + lrow + RPT * j < M);")
    w("                    tk_cp_async<16>(sa + RPT * j * 128, ok ? ga + (size_t)RPT * j * K + k0 : A, ok);")
    w("                }")
    if not tiles.reads_b:
        w("                #pragma unroll")
        w(f"                for (int j = 0; j < {-(-bnp // rpt)}; ++j) {{")
        w("                    if (BNP % RPT == 0 || lrow + RPT * j < BNP) {")
        w("                        const bool ok = kok && ((N % BN == 0 && BNP == BN) || n0 + lrow + RPT * j < N);")
        w("                        tk_cp_async<16>(sa + (BMP + RPT * j) * 128, ok ? gb + (size_t)RPT * j * K + k0 : Bt, ok);")
        w("                    }")
        w("                }")
    w("            }")
    if tiles.reads_b:
        w("            // B's chunk: rows r = lrow + RPT * (j % JK) of column group j / JK (JK trips cover 64 rows)")
        w("            constexpr int JK = (64 + RPT - 1) / RPT;")
        w("            #pragma unroll")
        w(f"            for (int j = 0; j < {bnp // 64} * JK; ++j) {{")
        w("                const int g = j / JK, r = lrow + RPT * (j % JK);  // group, row in the chunk")
        w("                if (64 % RPT != 0 && r >= 64) continue;  // (a last partial trip: 3 warpgroups)")
        w("                if (kt == KT - 1 && r >= KLAST * 16) continue;  // past the last chunk's k16 steps: never read")
        w("                const bool ok = (K % BK == 0 || k0 + r < K) && ((N % BN == 0 && BNP == BN) || n0 + g * 64 + lv * 8 < N);")
        w("                tk_cp_async<16>(sa + BMP * 128 + g * 8192 + (r - lrow) * 128, "
          "ok ? gb + (size_t)(k0 + r - lrow) * N + g * 64 : B, ok);")
        w("            }")
    w("            tk_cp_async_commit();")
    w("        };")


def _mma_loop(w, T: str, asyncs: bool) -> None:
    """The mma.sync form's K loop body (after its `for`): the chunk STAGES - 1 ahead loads, this
    chunk's fragments by ldmatrix, mma.sync m16n8k16 per warp atom."""
    if asyncs:
        w("            if (kt + STAGES - 1 < KT) {  // the chunk STAGES - 1 ahead flies while this one is multiplied")
        w("                load(kt + STAGES - 1);")
        w("                tk_cp_async_wait<STAGES - 1>();")
        w("            } else {")
        w("                tk_cp_async_wait<0>();")
        w("            }")
    else:
        w("            if (kt + STAGES - 1 < KT) load(kt + STAGES - 1);")
    w("            __syncthreads();")
    w("            const " + T + "* const sa = st + (kt % STAGES) * STAGE;")
    w("            const " + T + "* const sb = sa + BMP * APITCH;")
    w("            #pragma unroll")
    w("            for (int kk = 0; kk < BK; kk += 16) {")
    w("                unsigned af[FM][4], bf[FN][2];")
    w("                #pragma unroll")
    w("                for (int i = 0; i < FM; ++i) {")
    w("                    const int ar = (wm * FM + i) * 16;")
    w("                    if (ar < BMP) tk_ldmatrix_x4(af[i], sa + (ar + lane % 16) * APITCH + kk + (lane / 16) * 8);")
    w("                }")
    w("                #pragma unroll")
    w("                for (int j = 0; j < FN; ++j) {")
    w("                    const int bc = (wn * FN + j) * 8;")
    w("                    if (bc < BNP) tk_ldmatrix_x2_trans(bf[j][0], bf[j][1], sb + (kk + lane % 16) * BPITCH + bc);")
    w("                }")
    w("                #pragma unroll")
    w("                for (int i = 0; i < FM; ++i)")
    w("                    #pragma unroll")
    w("                    for (int j = 0; j < FN; ++j)")
    w("                        if ((wm * FM + i) * 16 < BMP && (wn * FN + j) * 8 < BNP)")
    w(f"                            tk_mma_16816<{T}>(acc[i][j], af[i], bf[j][0], bf[j][1]);")
    w("            }")
    w("            __syncthreads();  // (the chunk's stage is reloaded next)")
    w("        }")


def _wgmma_helpers(w, dt: str, bnp: int, reads_b: bool = False, rows64: bool = False) -> None:
    """tk_wgmma_desc (a shared-memory matrix descriptor: K-major rows of 128 bytes in the 128-byte
    swizzle, 8-row atoms 1024 bytes apart), with `reads_b` tk_wgmma_desc_n (B N-major: rows of 64
    columns along K, 8-row atoms 1024 bytes apart, groups of 64 columns 8192 bytes apart; CUTLASS's
    canonical MN-major SW128 layout, ((8, 8, n), (8, k)) : ((1, 8, LBO), (64, SBO)) in elements), and
    tk_wgmma (wgmma m64n{BNP}k16, f32 accumulators in acc[0][j][q]: the m16n8 C fragment of each
    8-column atom j, the layout mma.sync's acc has; B transposed, imm-trans-b = 1, with `reads_b`)."""
    regs = bnp // 2
    w("// shared-memory matrix descriptor: start >> 4 (bits 0-13), leading byte offset 16 >> 4 (unused by the")
    w("// swizzled K-major layout), stride byte offset 1024 >> 4 (bits 32-45), 128-byte swizzle (bits 62-63 = 1)")
    w("__device__ __forceinline__ unsigned long long tk_wgmma_desc(const void* smem) {")
    w("    const unsigned long long a = static_cast<unsigned long long>(__cvta_generic_to_shared(smem));")
    w("    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);")
    w("}")
    if rows64:
        w("// K-major rows of 64 bytes in the 64-byte swizzle (16-byte vector v of row r at v ^ (r / 2) % 4): stride")
        w("// byte offset 512 >> 4 (8-row atoms), swizzle mode 2 (bits 62-63)")
        w("__device__ __forceinline__ unsigned long long tk_wgmma_desc64(const void* smem) {")
        w("    const unsigned long long a = static_cast<unsigned long long>(__cvta_generic_to_shared(smem));")
        w("    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((512ull >> 4) << 32) | (2ull << 62);")
        w("}")
    if reads_b:
        w("// N-major (B [K][N] rows in shared memory): leading byte offset 8192 >> 4 (between groups of 64 columns),")
        w("// stride byte offset 1024 >> 4 (between 8-row atoms along K), 128-byte swizzle")
        w("__device__ __forceinline__ unsigned long long tk_wgmma_desc_n(const void* smem) {")
        w("    const unsigned long long a = static_cast<unsigned long long>(__cvta_generic_to_shared(smem));")
        w("    return ((a & 0x3FFFF) >> 4) | ((8192ull >> 4) << 16) | ((1024ull >> 4) << 32) | (1ull << 62);")
        w("}")
    w(f"// D[64 x {bnp}] += A[64 x 16] . B[16 x {bnp}] (A K-major, B {'N' if reads_b else 'K'}-major in shared memory), "
      "per warpgroup")
    w("// (accumulate 0: D = A . B, the accumulators' old values ignored)")
    w(f"__device__ __forceinline__ void tk_wgmma(float (&acc)[1][{bnp // 8}][4], unsigned long long da, unsigned long long db, "
      "const int accumulate = 1) {")
    outs = ", ".join(f"%{i}" for i in range(regs))
    w(f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"')
    w(f'                 "wgmma.mma_async.sync.aligned.m64n{bnp}k16.f32.{dt}.{dt} {{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, {int(reads_b)};\\n}}\\n"')
    cons = ", ".join(f'"+f"(acc[0][{i // 4}][{i % 4}])' for i in range(regs))
    w(f"        : {cons}")
    w('        : "l"(da), "l"(db), "r"(accumulate));')
    w("}")
    w("")


def _transpose(w, name: str, T: str, vectors: bool, vec: int) -> None:
    """Bt [N, K] = B [K, N] transposed, for the dot products (a row of Bt is a column of B): one
    block per TRANSPOSE_TILE^2 tile through shared memory, 16-byte vectors on both sides when N
    and K allow them. Grid (cdiv(N, TILE), cdiv(K, TILE)); the runtime launches it only when the
    pattern has dot-product entries and B is not already a transposed view."""
    t = TRANSPOSE_TILE
    w(f"// Bt = B transposed, one {t} x {t} tile per block (grid (cdiv(N, {t}), cdiv(K, {t})))")
    w(f"extern \"C\" __global__ void __launch_bounds__({TRANSPOSE_THREADS}) {name}(const {T}* __restrict__ B, "
      f"{T}* __restrict__ Bt) {{")
    w(f"    __shared__ __align__(16) {T} s[{t}][{t} + {vec}];  // [k][n]")
    w("    tk_pdl_wait();  // (launched programmatically only inside tkc.programmatic_launch)")
    w("    tk_pdl_trigger();  // a kernel of the call always follows: it may launch now and wait for Bt")
    w(f"    const int n0 = blockIdx.x * {t}, k0 = blockIdx.y * {t};")
    if vectors:
        w(f"    for (int v = threadIdx.x; v < {t} * {t // vec}; v += {TRANSPOSE_THREADS}) {{")
        w(f"        const int kr = v / {t // vec}, n = n0 + (v % {t // vec}) * {vec};")
        w(f"        if (k0 + kr < K && n < N) tk_load<16>(*reinterpret_cast<{T}(*)[{vec}]>(&s[kr][(v % {t // vec}) * {vec}]), "
          "B + (size_t)(k0 + kr) * N + n);")
        w("    }")
        w("    __syncthreads();")
        w(f"    for (int v = threadIdx.x; v < {t} * {t // vec}; v += {TRANSPOSE_THREADS}) {{")
        w(f"        const int nr = v / {t // vec}, kc = (v % {t // vec}) * {vec};")
        w("        if (n0 + nr < N && k0 + kc < K) {")
        w(f"            alignas(16) {T} x[{vec}];")
        w("            #pragma unroll")
        w(f"            for (int u = 0; u < {vec}; ++u) x[u] = s[kc + u][nr];")
        w("            tk_store<16>(Bt + (size_t)(n0 + nr) * K + k0 + kc, x);")
        w("        }")
        w("    }")
    else:
        w(f"    for (int i = threadIdx.x; i < {t} * {t}; i += {TRANSPOSE_THREADS}) {{")
        w(f"        const int kr = i / {t}, n = n0 + i % {t};")
        w(f"        if (k0 + kr < K && n < N) s[kr][i % {t}] = B[(size_t)(k0 + kr) * N + n];")
        w("    }")
        w("    __syncthreads();")
        w(f"    for (int i = threadIdx.x; i < {t} * {t}; i += {TRANSPOSE_THREADS}) {{")
        w(f"        const int nr = i / {t}, k = k0 + i % {t};")
        w(f"        if (n0 + nr < N && k < K) Bt[(size_t)(n0 + nr) * K + k] = s[i % {t}][nr];")
        w("    }")
    w("}")
    w("")


def _dot_products(w, T: str, dense: bool, kvec: bool, vec: int) -> None:
    """Blocks from n_tc on: DOT_PER_BLOCK entries of dot_order, E at a time per group of G lanes
    (all their loads in flight together), a shuffle reduction over the group. Every lane runs the
    same trip counts, so whole warps reach the shuffles."""
    index = "(size_t)r[u] * N + c[u]" if dense else "e[u]"
    w("    // ---- dot products: G lanes per entry, E entries per group at once ----")
    w("    const int first = blockIdx.x * DOT_PER_BLOCK;")
    w("    if (first >= n_dot) return;")
    w("    const int grp = tid / G, gl = tid % G;")
    w("    const bool seq = dot_order == nullptr;  // the runtime's dot_sequential: entry i is the i-th")
    w("    #pragma unroll 1")
    w("    for (int it = 0; it < ITERS; ++it) {")
    w("        const int base = first + (it * (DOT_THREADS / G) + grp) * E;")
    w("        int e[E], r[E], c[E];")
    w("        #pragma unroll")
    w("        for (int u = 0; u < E; ++u) e[u] = base + u >= n_dot ? -1 : seq ? base + u : dot_order[base + u];")
    w("        #pragma unroll")
    w("        for (int u = 0; u < E; ++u) {")
    w("            r[u] = e[u] >= 0 ? rows[e[u]] : 0;")
    w("            c[u] = e[u] >= 0 ? cols[e[u]] : 0;")
    w("        }")
    w("        // launched programmatically after the kernel before it (B's transpose, or the tiles): the indices")
    w("        // were written before the call, Bt and P only after that kernel has finished")
    w("        if (it == 0) tk_pdl_wait();")
    w("        float sum[E];")
    w("        #pragma unroll")
    w("        for (int u = 0; u < E; ++u) sum[u] = 0.0f;")
    if kvec:
        w(f"        for (int k = gl * {vec}; k < K; k += G * {vec}) {{")
        w(f"            alignas(16) {T} av[E][{vec}], bv[E][{vec}];")
        w("            #pragma unroll")
        w("            for (int u = 0; u < E; ++u) {  // (an entry past the end reads row 0: in bounds, unused)")
        w("                tk_load<16>(av[u], A + (size_t)r[u] * K + k);")
        w("                tk_load<16>(bv[u], Bt + (size_t)c[u] * K + k);")
        w("            }")
        w("            #pragma unroll")
        w("            for (int u = 0; u < E; ++u)")
        w("                #pragma unroll")
        w(f"                for (int t = 0; t < {vec}; ++t) sum[u] = fmaf(tk_f(av[u][t]), tk_f(bv[u][t]), sum[u]);")
        w("        }")
    else:
        w("        for (int k = gl; k < K; k += G)")
        w("            #pragma unroll")
        w("            for (int u = 0; u < E; ++u)")
        w("                sum[u] = fmaf(tk_f(A[(size_t)r[u] * K + k]), tk_f(Bt[(size_t)c[u] * K + k]), sum[u]);")
    w("        #pragma unroll")
    w("        for (int u = 0; u < E; ++u) {")
    w("            #pragma unroll")
    w("            for (int o = G / 2; o > 0; o /= 2) sum[u] += __shfl_xor_sync(0xffffffffu, sum[u], o);")
    w(f"            if (e[u] >= 0 && gl == 0) P[{index}] = tk_o(sum[u]);")
    w("        }")
    w("    }")


def _panel_products(w, T: str, dense: bool) -> None:
    """Block b: work item b of the DotPanels data passed as dot_order (items [gridDim.x][2]
    (panel, count), then rc [n_dot] (row * PW + column % PW, entries by column; item b's in slots
    [b * W, b * W + count), W = n_dot / gridDim.x), then order [n_dot] (their indices into P, -1
    in the slots past count)). The first round's slots load beside the item, and its rows of A
    while B's K x PW panel loads from B itself (two 16-byte vectors per row) and is stored
    transposed in shared memory, [PW][K + VEC], so a lane reads its share of a column as 16-byte
    vectors. Each group of G lanes computes PE entries at once from the rows of A in its
    registers (KC vectors per lane) and the panel, as `<kernel>_dots` does from Bt; the next
    round's indices and rows of A load while a round's sums reduce. The groups of a warp run the
    same trip count (the warp's first entry decides), so whole warps reach the shuffles."""
    index = "(size_t)rn[u] * N + j0 + cn[u]" if dense else "en[u]"  # P's index of this round's entry u
    w("    extern __shared__ __align__(128) unsigned char smem_raw[];")
    w(f"    {T} (*Bs)[K + VEC] = reinterpret_cast<{T} (*)[K + VEC]>(smem_raw);  // B's panel, transposed: Bs[column][k]")
    w("    const int tid = threadIdx.x;")
    w("    constexpr int KC = (K + G * VEC - 1) / (G * VEC);  // a lane's 16-byte vectors of a row: (q * G + gl) * VEC")
    w("    const int W = n_dot / gridDim.x;  // each item's slots (n_dot is the slots of every item)")
    w("    const int* __restrict__ rc = dot_order + 2 * (size_t)gridDim.x;  // (after the items)")
    w("    const int* __restrict__ order = rc + n_dot;")
    w("    const int panel = dot_order[2 * blockIdx.x], first = blockIdx.x * W, end = first + dot_order[2 * blockIdx.x + 1];")
    w("    const int j0 = panel * PW;")
    w("    const int grp = tid / G, gl = tid % G;")
    w("    int base = first + grp * PE;")
    w("    int wb = first + (tid / 32) * (32 / G) * PE;  // the warp's first entry of the round")
    w("    int e[PE], r[PE], c[PE];")
    _panel_entries(w, "    ", "first + W", "the first round's, beside the item: its slots past count read order -1 and "
                   "rc 0 (row 0, column j0: in bounds, unused)")
    w("    // launched programmatically after the tiles (if any): the plan's indices above were written before the")
    w("    // call, A and B are read and P written only after that kernel has finished")
    w("    tk_pdl_wait();")
    w(f"    alignas(16) {T} av[PE][KC][VEC];  // the round's rows of A: lane gl's vectors")
    _panel_rows(w, "    ", T, "the first round's, in flight with the panel")
    w("    for (int v = tid; v < K * 2; v += PANEL_THREADS) {  // the panel: row k's two 16-byte vectors")
    w("        const int k = v >> 1, h = v & 1;")
    w("        if (j0 + h * VEC < N) {")
    w(f"            alignas(16) {T} x[VEC];")
    w("            tk_load<16>(x, B + (size_t)k * N + j0 + h * VEC);")
    w("            #pragma unroll")
    w("            for (int u = 0; u < VEC; ++u) Bs[h * VEC + u][k] = x[u];")
    w("        }")
    w("    }")
    w("    __syncthreads();")
    w("    #pragma unroll 1")
    w("    do {  // (every item has an entry: the first round runs unconditionally)")
    w("        float sum[PE];")
    w("        #pragma unroll")
    w("        for (int u = 0; u < PE; ++u) {")
    w("            sum[u] = 0.0f;")
    w("            #pragma unroll")
    w("            for (int q = 0; q < KC; ++q) {")
    w("                const int k = (q * G + gl) * VEC;")
    w("                if (K % (G * VEC) == 0 || k < K) {")
    w(f"                    alignas(16) {T} bv[VEC];")
    w("                    tk_load<16>(bv, &Bs[c[u]][k]);")
    w("                    #pragma unroll")
    w("                    for (int t = 0; t < VEC; ++t) sum[u] = fmaf(tk_f(av[u][q][t]), tk_f(bv[t]), sum[u]);")
    w("                }")
    w("            }")
    w("        }")
    if dense:  # this round's entries (dense P: their rows and columns), while the next round's load
        w("        int en[PE], rn[PE], cn[PE];")
        w("        #pragma unroll")
        w("        for (int u = 0; u < PE; ++u) en[u] = e[u], rn[u] = r[u], cn[u] = c[u];")
    else:
        w("        int en[PE];")
        w("        #pragma unroll")
        w("        for (int u = 0; u < PE; ++u) en[u] = e[u];")
    w("        base += (PANEL_THREADS / G) * PE;")
    w("        wb += (PANEL_THREADS / G) * PE;")
    w("        if (wb < end) {")
    _panel_entries(w, "            ", "end", "the next round's, loading while this round's sums reduce")
    _panel_rows(w, "            ", T, "and its rows of A")
    w("        }")
    w("        #pragma unroll")
    w("        for (int u = 0; u < PE; ++u) {")
    w("            #pragma unroll")
    w("            for (int o = G / 2; o > 0; o /= 2) sum[u] += __shfl_xor_sync(0xffffffffu, sum[u], o);")
    w(f"            if (en[u] >= 0 && gl == 0) P[{index}] = tk_o(sum[u]);")
    w("        }")
    w("    } while (wb < end);")


def _panel_entries(w, pad: str, bound: str, note: str) -> None:
    """The panel kernel's loads of a round's PE entries from `base` (their indices into P, rows
    and columns in the panel), -1 from `bound` on; `pad` indents, `note` comments the loop."""
    w(f"{pad}#pragma unroll")
    w(f"{pad}for (int u = 0; u < PE; ++u) {{  // {note}")
    w(f"{pad}    const bool in = base + u < {bound};")
    w(f"{pad}    e[u] = in ? order[base + u] : -1;")
    w(f"{pad}    const int x = in ? rc[base + u] : 0;")
    w(f"{pad}    r[u] = x / PW;")
    w(f"{pad}    c[u] = x % PW;")
    w(f"{pad}}}")


def _panel_rows(w, pad: str, T: str, note: str) -> None:
    """The panel kernel's loads of a round's rows of A into av: lane gl's KC vectors of row r[u]."""
    w(f"{pad}#pragma unroll")
    w(f"{pad}for (int u = 0; u < PE; ++u)  // {note}")
    w(f"{pad}    #pragma unroll")
    w(f"{pad}    for (int q = 0; q < KC; ++q)")
    w(f"{pad}        if (K % (G * VEC) == 0 || (q * G + gl) * VEC < K) "
      "tk_load<16>(av[u][q], A + (size_t)r[u] * K + (q * G + gl) * VEC);")


def _row_groups(w, name: str, head: str, T: str, width: int, dense: bool, from_b: bool = False) -> None:
    """`name`: every entry by row groups on mma.sync (tkc.sparse.RowGroups, K = 32). A block holds
    a panel of `width` rows of Bt in shared memory; a warp takes work items: the group's 8 rows of
    A are the B operand of m16n8k16 (held in registers for the item), 16 entries at a time the A
    operand (their rows of Bt gathered by ldmatrix, one row address per lane); entry m's product
    is D[m][n], n its row in the group. Results go to a per-warp stage in shared memory by slot
    and leave in P's order. The hand-written original: benchmarks/probes/sddmm_row_groups.py.
    K is permuted alike on both sides so that a lane's share of its row of A is one 16-byte load:
    word t of the panel row's chunk c holds k = 8 t + 2 c, + 1 (mma k16 step s reads chunks 2 s
    and 2 s + 1, and lane l the words l % 4, so it needs A's words 4 (l % 4) .. + 3). An item's
    words are vector loads too: its 8 slot offsets per lane as two of 16 bytes, its P indices as
    one, its slots by rank as one word of 4 bytes (RowGroups' layout).
    With `from_b` (`<kernel>_groups_b`, N % 8 == 0) the block transposes its panel from B itself
    (no transpose kernel before it): a thread loads 4 columns of 8 rows of B (8 loads of 8 bytes),
    transposes the 8 x 4 halves in registers and stores 4 chunks of 16 bytes; PANEL_DEPTH such
    shares at once (all their loads before any store)."""
    E, B, R, warps = GROUP_ENTRIES, GROUP_BATCH, GROUP_ROWS, GROUP_THREADS // 32
    w(f"// every entry by row groups on mma.sync (K = 32): a block per span of tkc.sparse.RowGroups' work items, its "
      f"panel of {width} rows of Bt in shared memory")
    w(f"// ({width * 64} bytes: chunk c of row j at (j / 2) * 128 + ((c ^ class(j)) << 4), its word t holding k = 8 t + 2 c, "
      f"+ 1), then {warps} warps' stages of {E} results. Plan data in dot_order's place, n_tc = its work items.")
    if not from_b:  # (the helpers, once: `<kernel>_groups` comes first)
        w(f"__device__ __forceinline__ int tk_group_base(const int j) {{  // tkc.sparse.slot_base: (j / 2) * 128 + class(j) * 16")
        w("    const int m = j >> 1;")
        w("    return m * 128 + (((((j & 1) << 2) | (m & 3)) ^ (((m >> 2) ^ (m >> 5) ^ (m >> 8)) & 7)) << 4);")
        w("}")
    w(f"extern \"C\" __global__ void __launch_bounds__({GROUP_THREADS}, 1) {name}{head} {{")
    w("    extern __shared__ __align__(128) unsigned char smem[];")
    w("    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;")
    w("    const int* blocks = dot_order;  // [gridDim.x][3]: (panel, first item, end item)")
    w("    const int at_items = (3 * gridDim.x + 1) & ~1;  // (8-byte aligned; the rest 128-byte aligned)")
    w("    const int2* items = reinterpret_cast<const int2*>(blocks + at_items);  // [n_tc]: (group, count)")
    w("    const int* jn = blocks + ((at_items + 2 * n_tc + 31) & ~31);  // [n_tc][2][16][4]: lane e's word t: slot 16 t + "
      "e's row of Bt, as its byte offset in the panel")
    w(f"    const int* pr = jn + {E} * n_tc;  // [n_tc][32][4]: lane l's word u: rank 32 u + l's index in P")
    w(f"    const unsigned* owner = reinterpret_cast<const unsigned*>(pr + {E} * n_tc);  // [n_tc][32]: 8 nibbles per lane")
    w("    const unsigned* si = owner + 32 * n_tc;  // [n_tc][32]: lane l's byte u: rank 32 u + l's slot")
    w("    const int panel = blocks[3 * blockIdx.x], lo = blocks[3 * blockIdx.x + 1], hi = blocks[3 * blockIdx.x + 2];")
    w(f"    const int c0 = panel * {width}, ncols = min({width}, N - c0);")
    w(f"    float* stage = reinterpret_cast<float*>(smem + {width * 64}) + warp * {E};")
    w("    tk_pdl_wait();  // (launched programmatically only inside tkc.programmatic_launch)")
    if from_b:
        w("    // the panel from B: thread v takes columns c0 + 4 c .. + 3 at rows 8 t + 2 q, + 1 (t = 0..3) of B (consecutive")
        w("    // threads, consecutive columns), and stores chunk q of each of those 4 rows of Bt (two-way bank conflicts; with")
        w("    // none, q = v % 4 and c = v / 4 read B in 64-byte pieces: 1 us slower per call at 10000^2 with 5M entries, H200)")
        D = PANEL_DEPTH
        w(f"    // {D} shares per thread in flight, all their loads before any store (one pass over a panel of 2560 columns;")
        w("    // the panel takes longer, 3.6 us against 3.2, but the blocks end sooner: 32.0-32.2 us against 32.9-33.4 as")
        w("    // graphs at 10000^2 with 5M R-MAT entries, H200)")
        w("    #pragma unroll 1")
        w(f"    for (int v0 = tid; v0 < ncols; v0 += {D * GROUP_THREADS}) {{  // (ncols / 4 shares of 4 columns x 4 chunks of K)")
        w(f"        uint2 x[{D}][8];")
        w("        #pragma unroll")
        w(f"        for (int h = 0; h < {D}; ++h) {{")
        w(f"            const int v = v0 + h * {GROUP_THREADS}, c = v % (ncols >> 2), q = v / (ncols >> 2);")
        w("            #pragma unroll")
        w("            for (int i = 0; i < 8; ++i)")
        w("                x[h][i] = v < ncols ? *reinterpret_cast<const uint2*>(B + (size_t)(8 * (i >> 1) + 2 * q + (i & 1)) * N + c0 + 4 * c)")
        w("                                    : make_uint2(0u, 0u);")
        w("        }")
        w("        #pragma unroll")
        w(f"        for (int h = 0; h < {D}; ++h) {{")
        w(f"            const int v = v0 + h * {GROUP_THREADS}, c = v % (ncols >> 2), q = v / (ncols >> 2);")
        w("            if (v >= ncols) break;")
        w("            #pragma unroll")
        w("            for (int jj = 0; jj < 4; ++jj) {  // column 4 c + jj: half jj of each x[h][i], two rows per word")
        w("                const unsigned sel = (jj & 1) ? 0x7632u : 0x5410u;")
        w("                uint4 y;")
        w("                y.x = __byte_perm(jj < 2 ? x[h][0].x : x[h][0].y, jj < 2 ? x[h][1].x : x[h][1].y, sel);")
        w("                y.y = __byte_perm(jj < 2 ? x[h][2].x : x[h][2].y, jj < 2 ? x[h][3].x : x[h][3].y, sel);")
        w("                y.z = __byte_perm(jj < 2 ? x[h][4].x : x[h][4].y, jj < 2 ? x[h][5].x : x[h][5].y, sel);")
        w("                y.w = __byte_perm(jj < 2 ? x[h][6].x : x[h][6].y, jj < 2 ? x[h][7].x : x[h][7].y, sel);")
        w("                *reinterpret_cast<uint4*>(smem + (tk_group_base(4 * c + jj) ^ (q << 4))) = y;")
        w("            }")
        w("        }")
        w("    }")
    else:
        w(f"    for (int v = tid; v < ncols * 4; v += {GROUP_THREADS}) {{  // the panel: rows c0 + j of Bt, 4 chunks of 16 bytes")
        w("        const int j = v >> 2, p = v & 3;  // Bt's words 4 p .. + 3: word p of chunks 0..3")
        w("        const uint4 x = *reinterpret_cast<const uint4*>(Bt + (size_t)(c0 + j) * K + 8 * p);")
        w("        const int at = tk_group_base(j) + 4 * p;  // word p of chunk c (at ^ (c << 4)) holds Bt's word 4 p + c")
        w("        *reinterpret_cast<unsigned*>(smem + at) = x.x;")
        w("        *reinterpret_cast<unsigned*>(smem + (at ^ 16)) = x.y;")
        w("        *reinterpret_cast<unsigned*>(smem + (at ^ 32)) = x.z;")
        w("        *reinterpret_cast<unsigned*>(smem + (at ^ 48)) = x.w;")
        w("    }")
    w("    __syncthreads();")
    w("    const int hi16 = lane >> 4;")
    w("    // a work item's words (this lane's 8 slot offsets, 4 P indices, 4 slots by rank, its owner word) and the")
    w("    // group's rows of A (lane: row lane / 4, k = 8 (lane % 4) .. + 7: words c = 0..3 of chunks c), an item ahead")
    w(f"    auto load = [&](int it_, int count_, int g_, int (&wj_)[{E // B}], int (&wr_)[{E // 32}], unsigned& ws_,")
    w("                    unsigned& own_, uint4& bf_) {")
    w(f"        const int arow = {R} * g_ + (lane >> 2);")
    w("        bf_ = arow < M && count_ > 0 ? *reinterpret_cast<const uint4*>(A + (size_t)arow * K + 8 * (lane & 3))")
    w("                                     : make_uint4(0u, 0u, 0u, 0u);")
    w("        if (count_ > 0) {")
    w(f"            const int4* j4 = reinterpret_cast<const int4*>(jn + (size_t){E} * it_ + 4 * (lane & 15));")
    w("            const int4 j0 = __ldcs(j4), j1 = __ldcs(j4 + 16);")
    w("            wj_[0] = j0.x, wj_[1] = j0.y, wj_[2] = j0.z, wj_[3] = j0.w, wj_[4] = j1.x, wj_[5] = j1.y, wj_[6] = j1.z, wj_[7] = j1.w;")
    w(f"            const int4 r4 = __ldcs(reinterpret_cast<const int4*>(pr + (size_t){E} * it_ + 4 * lane));")
    w("            wr_[0] = r4.x, wr_[1] = r4.y, wr_[2] = r4.z, wr_[3] = r4.w;")
    w("            ws_ = __ldcs(si + 32 * it_ + lane);")
    w("            own_ = __ldcs(owner + 32 * it_ + lane);")
    w("        } else {")
    w("            #pragma unroll")
    w(f"            for (int t = 0; t < {E // B}; ++t) wj_[t] = 0;")
    w("            wr_[0] = wr_[1] = wr_[2] = wr_[3] = 0, ws_ = 0u, own_ = 0u;")
    w("        }")
    w("    };")
    w("    int it = lo + warp, g = 0, count = 0;")
    w("    if (it < hi) { const int2 gc = __ldcs(items + it); g = gc.x; count = gc.y; }")
    w(f"    int wj[{E // B}], wr[{E // 32}];")
    w("    unsigned ws, own;")
    w("    uint4 bf;")
    w("    load(it, count, g, wj, wr, ws, own, bf);")
    w("    while (it < hi) {")
    w("        const int nit = it + " + str(warps) + ";")
    w("        int ng = 0, ncount = 0;")
    w("        if (nit < hi) { const int2 gc = __ldcs(items + nit); ng = gc.x; ncount = gc.y; }")
    w(f"        int nwj[{E // B}], nwr[{E // 32}];")
    w("        unsigned nws, nown;")
    w("        uint4 nbf;")
    w("        load(nit, ncount, ng, nwj, nwr, nws, nown, nbf);")
    w("        #pragma unroll")
    w(f"        for (int t = 0; t < {E // B}; ++t) {{")
    w(f"            if ({B} * t < count) {{  // (uniform in the warp: ldmatrix and mma need all 32 lanes)")
    w("                const int base = wj[t] ^ (hi16 << 4);  // this lane's row: entry lane % 16, chunk 2 s + lane / 16")
    w("                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};")
    w("                unsigned a[4];")
    w("                tk_ldmatrix_x4(a, smem + base);")
    w(f"                tk_mma_16816<{T}>(d, a, bf.x, bf.y);")
    w("                tk_ldmatrix_x4(a, smem + (base ^ 32));")
    w(f"                tk_mma_16816<{T}>(d, a, bf.z, bf.w);")
    w("                // entry lane / 4 (+ 8) of the batch is D[m][n]: this lane's when its owner nibble says so")
    w(f"                if (own & (1u << (4 * t))) stage[{B} * t + (lane >> 2)] = (own & (2u << (4 * t))) ? d[1] : d[0];")
    w(f"                if (own & (4u << (4 * t))) stage[{B} * t + (lane >> 2) + 8] = (own & (8u << (4 * t))) ? d[3] : d[2];")
    w("            }")
    w("        }")
    w("        __syncwarp();")
    w("        #pragma unroll")
    w(f"        for (int u = 0; u < {E // 32}; ++u)  // by rank: a row's entries leave to consecutive indices of P")
    w("            if (32 * u + lane < count) tk_o_stream(P + wr[u], stage[(ws >> (8 * u)) & 255u]);")
    w("        __syncwarp();")
    w("        it = nit, g = ng, count = ncount, own = nown, ws = nws, bf = nbf;")
    w("        #pragma unroll")
    w(f"        for (int t = 0; t < {E // B}; ++t) wj[t] = nwj[t];")
    w("        #pragma unroll")
    w(f"        for (int u = 0; u < {E // 32}; ++u) wr[u] = nwr[u];")
    w("    }")
    w("}")


def _to_f32(dt: str, x: str) -> str:
    return {"f16": f"__half2float({x})", "bf16": f"__bfloat162float({x})", "f32": x, "f64": f"(float){x}"}[dt]


def _from_f32(dt: str, x: str) -> str:
    return {"f16": f"__float2half({x})", "bf16": f"__float2bfloat16({x})", "f32": x, "f64": f"(double){x}"}[dt]

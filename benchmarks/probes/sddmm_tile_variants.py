"""Probe: where the time of the `cuda` SDDMM tile kernel goes (examples/sddmm.tk, wgmma form).

Every tile of the pattern goes to the tensor-core kernel (dot_below = 0), and the kernel's
generated CUDA is edited by text into variants, each launched alone on the same launch data and
timed with triton.testing.do_bench (median, us):
- `base`: the generated kernel (checked against a float64 reference at the entries);
- diagnostic variants (wrong results, timing only): `no-entries` (the products reach shared memory,
  no entry is written), `no-products` (neither), `no-wgmma` (no tensor-core instruction),
  `no-loads` (no cp.async after the first chunks);
- candidate variants (checked like `base`): `stages2` (two cp.async stages: 68 KB of shared
  memory), `stages4`, `products-f1` (the products as before 2026-11-27: scalar stores into rows
  of BNP + 4 floats), and the tilings `64x128` (128 threads: 3 blocks per SM), `64x128-lb4`
  (registers capped for 4 blocks per SM by `__launch_bounds__`), `128x64` (256 threads, 58
  registers; `-st2`: two stages, 4 blocks per SM), `64x64-st2`, `128x256` (256 threads) and
  `256x128` (512 threads). (A cap for 3 blocks of the 128 x 128 tile does not compile: ptxas
  needs 90 registers for the wgmma accumulators.)
- modifiers, `<variant>+<modifier>...`: `bare` (timing only: no products or entries, the floor
  of the variant's occupancy with no epilogue), `early` (the first chunk of places copied with the
  first K chunks instead of after the K loop), `noidx` (timing only: the tile's place from blockIdx,
  without reading tc_m and tc_n), `empty` (timing only: every block returns at once); at K <= 32,
  where the runtime launches the persistent twin `<kernel>_walk` (each block walks tiles), `onetile`
  launches the one-tile kernel instead (the modifiers above edit it), and `pnoentries`,
  `pnoproducts`, `pnowgmma` (timing only) drop the twin's entries, products and wgmma, and `regs`
  writes the twin's entries from the accumulators' registers, by a mask per tile and thread
  (`register_plan`), with no products in shared memory (refuted on the H200: 128.8 against 52.8 us
  uniform; docs/PERFORMANCE.md).

    source .device/env.sh && python3 benchmarks/probes/sddmm_tile_variants.py [--launch-only] [--k32 | --all] [VARIANT ...]

`--launch-only`: each variant launched 3 times at the first shape, not timed (for a profiler:
`ncu --kernel-name regex:'^sddmm$' --launch-skip 1 --launch-count 1 ... python3 <this> --launch-only base`).

Shapes: 10000^2 with 5M uniform entries and 8000^2 with 1.92M (K = 256), 10000^2 5M at K = 512;
with `--k32` only 10000^2 5M at K = 32 (uniform and R-MAT), with `--all` that and the others; with `--small` 1504^2
with 746k entries (K = 256, one wave of 144 tiles), uniform and R-MAT.
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import tkc  # noqa: E402
from codegen import cuda_sddmm  # noqa: E402
from passes import smem_sddmm  # noqa: E402
from tkc import sparse as sp  # noqa: E402
from tkc.cuda_runtime import CudaLaunch  # noqa: E402

T = (128, 128, 256)  # the file's tiling
SHAPES = [(10000, 10000, 256, 5_000_000), (8000, 8000, 256, 1_920_000), (10000, 10000, 512, 5_000_000)]
# one wave of tiles (144), every tile on tensor cores: uniform and R-MAT (`--small`)
SMALL = [(1504, 1504, 256, 746_000), (1504, 1504, 256, -746_000)]

# name -> (stages, [(find, replace)], checked, tiling (BM, BN, threads))
VARIANTS = {
    "base": (3, [], True, T),
    "no-entries": (3, [("q < c1; q += THREADS", "q < 0; q += THREADS")], False, T),
    "no-products": (3, [("q < c1; q += THREADS", "q < 0; q += THREADS"),
                        ("if (r < BMP && c < BNP) {", "if (r < 0) {")], False, T),
    "no-wgmma": (3, [("tk_wgmma(acc, da + 2 * kk, db + 2 * kk);", "acc[0][kk][0] += (float)(da + db);")], False, T),
    "no-loads": (3, [("if (kt + STAGES - 1 < KT) load(kt + STAGES - 1); else tk_cp_async_commit();",
                      "tk_cp_async_commit();")], False, T),
    "stages2": (2, [], True, T),
    "stages4": (4, [], True, T),
    "64x128": (3, [], True, (64, 128, 128)),
    "128x256": (3, [], True, (128, 256, 256)),
    "256x128": (3, [], True, (256, 128, 512)),
    # more blocks per SM: 64 x 128 tiles of one warpgroup with registers capped for 4 blocks
    "64x128-lb4": (2, [("__launch_bounds__(128) sddmm(", "__launch_bounds__(128, 4) sddmm(")], True, (64, 128, 128)),
    # narrower tiles: 58 registers, 3 (4 with two stages) blocks of 256 threads per SM
    "128x64": (3, [], True, (128, 64, 256)),
    "128x64-st2": (2, [], True, (128, 64, 256)),
    "64x64-st2": (2, [], True, (64, 64, 128)),
    # the products as before 2026-11-27: scalar stores into rows of BNP + 4 floats (2-way bank conflicts)
    "products-f1": (3, [("*reinterpret_cast<float2*>(&cs[r * CPITCH + c]) = make_float2(acc[i][j][0], acc[i][j][1]);",
                         "cs[r * CPITCH + c] = acc[i][j][0]; cs[r * CPITCH + c + 1] = acc[i][j][1];"),
                        ("*reinterpret_cast<float2*>(&cs[(r + 8) * CPITCH + c]) = make_float2(acc[i][j][2], acc[i][j][3]);",
                         "cs[(r + 8) * CPITCH + c] = acc[i][j][2]; cs[(r + 8) * CPITCH + c + 1] = acc[i][j][3];")],
                    True, T),
}
# modifiers, `<variant>+<modifier>...`: name -> (edits, still checked); an edit's text is found in the
# one-tile kernel, or with this prefix in the persistent twin `<kernel>_walk`
WALK = "@walk "
PROLOGUE = "        for (int kt = 0; kt < STAGES - 1; ++kt) if (kt < KT) load(kt); else tk_cp_async_commit();"
# `regs`: from the products' stores to the end of the entries' loop in the walk, replaced by the entries written
# from the accumulators (bit j * 4 + q of a thread's mask: acc[0][j][q])
REGS_FROM = """        #pragma unroll
        for (int i = 0; i < FM; ++i)
            #pragma unroll
            for (int j = 0; j < FN; ++j) {
                const int r = (wm * FM + i) * 16 + lane / 4, c = (wn * FN + j) * 8 + (lane % 4) * 2;
                if (r < BMP && c < BNP) {  // float2 pairs: CPITCH = BNP + 8 puts a half-warp's 4 rows on distinct banks
                    *reinterpret_cast<float2*>(&cs[r * CPITCH + c]) = make_float2(acc[i][j][0], acc[i][j][1]);
                    *reinterpret_cast<float2*>(&cs[(r + 8) * CPITCH + c]) = make_float2(acc[i][j][2], acc[i][j][3]);
                }
            }
        __syncthreads();"""
REGS_TO = """        (void)m0, (void)n0;
        #pragma unroll
        for (int j = 0; j < FN; ++j)
            #pragma unroll
            for (int q = 0; q < 4; ++q)
                if ((msk >> (j * 4 + q)) & 1ull) P[tc_order[slot++]] = tk_o(acc[0][j][q]);"""
MODIFIERS = {
    # neither products nor entries (timing only: the floor of the variant's occupancy with no epilogue)
    "bare": (VARIANTS["no-products"][1], False),
    # the first chunk of places copied right after the first K chunks, not after the K loop (one
    # memory round trip fewer in a K = 32 tile's chain; the K loop's waits then also wait for it)
    "early": ([(cuda_sddmm.PRE_LOAD + "\n", ""), (PROLOGUE, PROLOGUE + "\n" + cuda_sddmm.PRE_LOAD)], True),
    # every block returns at once (timing only: the grid's launch and block turnover)
    "empty": ([("    const int blk = blockIdx.x;\n    {  // ---- a tensor-core tile ----",
                "    const int blk = blockIdx.x;\n    if (blk >= 0) return;\n    {  // ---- a tensor-core tile ----")], False),
    # the tile's place from blockIdx alone, as if every tile of the grid were present (timing only: the
    # cost of the round trip for tc_m and tc_n before the first copy)
    # K <= 32: the one-tile kernel, not its persistent twin `<kernel>_walk` (which the runtime launches without dots)
    "onetile": ([], True),
    # the persistent twin (K <= 32), timing only: no entries written / nor products / no wgmma
    "pnoentries": ([(WALK + "for (int q = fc + tid; q < ec; q += THREADS)", "for (int q = fc + tid; q < 0; q += THREADS)")],
                   False),
    "pnoproducts": ([(WALK + "if (r < BMP && c < BNP) {", "if (r < 0) {")], False),
    "pnowgmma": ([(WALK + "tk_wgmma(acc, da + 2 * kk, db + 2 * kk, kk);", "acc[0][kk][0] += (float)(da + db);")], False),
    # the persistent twin (K <= 32) writing each entry from its accumulator's register, with no products in
    # shared memory: per tile and thread a 64-bit mask of its fragment positions that are entries and its first
    # slot in their P indices in fragment order (`register_plan`, passed in tc_pos', tc_rbase's and tc_order's
    # places); no places or row bases copied, one barrier per tile fewer
    "regs": ([(WALK + "        int m2 = 0, n2 = 0, f2 = 0, e2 = 0;",
               "        const unsigned long long msk = reinterpret_cast<const unsigned long long*>(tc_pos)"
               "[(size_t)t * THREADS + tid];  // (regs)\n"
               "        int slot = tc_rbase[(size_t)t * THREADS + tid];\n"
               "        int m2 = 0, n2 = 0, f2 = 0, e2 = 0;"),
              (WALK + "if (v < n) tk_cp_async<16>(ps + v * PV, tc_pos + c0 + v * PV);", "(void)n;"),
              (WALK + "if (ordered && v < BMP / 4) tk_cp_async<16>(side + v * 16, tc_rbase + (size_t)t * BM + v * 4);",
               "(void)v;"),
              (WALK + REGS_FROM, REGS_TO),
              (WALK + "for (int q = fc + tid; q < ec; q += THREADS)", "for (int q = fc + tid; q < 0; q += THREADS)")],
             True),
    "noidx": ([("const int m0 = tc_m[blk] * BM, n0 = tc_n[blk] * BN;",
                "const int m0 = (blk / ((N + BN - 1) / BN)) * BM, n0 = (blk % ((N + BN - 1) / BN)) * BN;")], False),
}


def variant(name: str):
    """VARIANTS[name], or a variant with modifiers: (stages, edits, checked, tiling)."""
    head, *mods = name.split("+")
    stages, edits, checked, tiling = VARIANTS[head]
    for m in mods:
        more, ok = MODIFIERS[m]
        edits, checked = edits + more, checked and ok
    return stages, edits, checked, tiling


# passes/smem_sddmm.py settings per variant
SETTINGS = {"products-f1": {"PRODUCT_PAD": 4}}


def source(module, stages: int, edits, settings=None) -> str:
    settings = {"WGMMA_STAGES": stages, **(settings or {})}
    saved = {k: getattr(smem_sddmm, k) for k in settings}
    for k, v in settings.items():
        setattr(smem_sddmm, k, v)
    try:
        text = cuda_sddmm.emit(module)
    finally:
        for k, v in saved.items():
            setattr(smem_sddmm, k, v)
    for find, repl in edits:
        kernel = "sddmm_walk(" if find.startswith(WALK) else "sddmm("
        find = find.removeprefix(WALK)
        lines = text.split("\n")
        start = next(i for i, line in enumerate(lines) if line.startswith('extern "C" __global__') and kernel in line)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith('extern "C" __global__')), len(lines))
        body = "\n".join(lines[start:end])
        if body.count(find) != 1:
            raise SystemExit(f"edit `{find}` occurs {body.count(find)} times in {kernel[:-1]}")
        text = "\n".join(lines[:start] + [body.replace(find, repl)] + lines[end:])
    return text


def register_plan(plan, p, BM: int, BN: int, threads: int):
    """`regs`' launch data for the persistent twin's 128 x 128 wgmma tiles (8 warps of 16 rows each;
    thread w * 32 + l holds acc[0][j][q] = C[16w + l / 4 + 8 (q / 2)][8j + 2 (l % 4) + q % 2]):
    (rout int32 [tile entries]: their P indices ordered by (tile, thread, j * 4 + q); masks int64
    [n_tc * threads]: bit j * 4 + q set where that position is an entry; roff int32 [n_tc *
    threads]: each thread's first slot in rout)."""
    if (BM, BN, threads) != (128, 128, 256):
        raise SystemExit("regs: the 128 x 128 tiles of 256 threads only")
    dev = plan.tc_ptr.device
    ptr = plan.tc_ptr.long()
    t = torch.repeat_interleave(torch.arange(plan.n_tc, device=dev), ptr[1:] - ptr[:-1])
    e = plan.tc_order.long()[:t.numel()]
    r = p.rows.long()[e] - plan.tc_m.long()[t] * BM
    c = p.cols.long()[e] - plan.tc_n.long()[t] * BN
    lane = (r % 8) * 4 + (c % 8) // 2
    thread = t * threads + (r // 16) * 32 + lane
    bit = (c // 8) * 4 + ((r % 16) // 8) * 2 + c % 2
    order = torch.sort(thread * 64 + bit).indices
    rout = e[order].int().contiguous()
    masks = torch.zeros(plan.n_tc * threads, dtype=torch.int64, device=dev)
    masks.index_add_(0, thread, torch.bitwise_left_shift(torch.ones_like(bit), bit))
    counts = torch.bincount(thread, minlength=plan.n_tc * threads)
    roff = (counts.cumsum(0) - counts).int().contiguous()
    return rout, masks, roff


def main() -> int:
    launch_only = "--launch-only" in sys.argv
    k32 = [(10000, 10000, 32, 5_000_000), (10000, 10000, 32, -5_000_000)]
    shapes = (k32 if "--k32" in sys.argv else SMALL if "--small" in sys.argv else k32 + SHAPES if "--all" in sys.argv
              else SHAPES)
    names = [a for a in sys.argv[1:] if a not in ("--launch-only", "--k32", "--all", "--small")] or list(VARIANTS)
    tmp = tempfile.mkdtemp()
    print(f"GPU: {torch.cuda.get_device_name()}")
    print("| M x N, K, nnz | variant | us | vs base | n_tc | max rel err |")
    print("|---|---|---|---|---|---|")
    for M, N, K, nnz in shapes[:1] if launch_only else shapes:
        # a negative count: an R-MAT pattern of that many entries
        p = (sp.uniform(M, N, nnz, seed=1) if nnz > 0 else sp.rmat(M, N, -nnz, seed=1)).to("cuda")
        kind, nnz = (" R-MAT" if nnz < 0 else ""), abs(nnz)
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        rows, cols = p.rows.long(), p.cols.long()
        ref = torch.cat([(A[rows[i:i + (1 << 20)]].double() * B[:, cols[i:i + (1 << 20)]].t().double()).sum(1)
                         for i in range(0, nnz, 1 << 20)])
        bt = B.t().contiguous()
        base = None
        for name in names:
            stages, edits, checked, (bm, bn, threads) = variant(name)
            kernel = tkc.compile(os.path.join(ROOT, "examples/sddmm.tk"), target="cuda", BM=bm, BN=bn, threads=threads)
            artifact, _ = kernel.specialize(kernel.bind_dims([A, B, p]))
            plan = sp.dispatch_plan(p, bm, bn, 0)
            text = source(artifact.module, stages, edits, SETTINGS.get(name.split("+")[0]))
            path = os.path.join(tmp, f"{name}-{M}-{K}.cu")
            with open(path, "w") as f:
                f.write(text)
            launch = CudaLaunch(path, text)
            if "onetile" in name.split("+"):
                launch.walk_kernel = None
            P = torch.full((nnz,), float("nan"), device="cuda")
            args = [A, B, p.rows, p.cols, P, bt, *plan.cuda_tensors()]
            if "regs" in name.split("+"):  # in tc_order's, tc_pos' and tc_rbase's places
                args[9], args[11], args[12] = register_plan(plan, p, bm, bn, threads)
            launch(*args)
            torch.cuda.synchronize()
            if launch_only:
                launch(*args)
                launch(*args)
                torch.cuda.synchronize()
                continue
            err = ((P.double() - ref).abs().max() / ref.abs().max()).item() if checked else float("nan")
            if checked and not err < 1e-5:
                print(f"| {M}x{N}, {K}, {nnz}{kind} | {name} | WRONG | | | {err:.1e} |", flush=True)
                continue
            us = do_bench(lambda: launch(*args), warmup=50, rep=300) * 1e3
            base = us if name == "base" else base
            rel = f"{us / base:.3f}" if base else ""
            print(f"| {M}x{N}, {K}, {nnz}{kind} | {name} | {us:.1f} | {rel} | {plan.n_tc} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

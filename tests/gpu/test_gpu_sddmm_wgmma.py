"""The `cuda` backend's wgmma tile form of the SDDMM tile kernel (codegen/cuda_sddmm.py,
passes/smem_sddmm.py `wgmma_fits`) on the GPU, in the quick tier (not `slow`: `cuda` builds take
seconds): every tile forced onto tensor cores, at tilings that pad BN to 8 and use 1 to 3
warpgroups, M and N cutting the tiles, K of one mostly zero-filled chunk, a partial second chunk
and four chunks, B read transposed (Bt, K-major) and read itself (N-major, N % 8 == 0); values
and dense P; at K <= 32 the persistent twin `<kernel>_walk` (which the runtime launches without
dot products) walked by 1, 5 and the resident blocks, and the one-tile kernel at the same K;
against torch in float64 with tests/gpu/test_gpu_sddmm.py's fenced check (a store outside P or an
entry left unwritten fails).

Run on the device machine: `python3 -m pytest -q -m gpu tests/gpu/test_gpu_sddmm_wgmma.py`.
"""

from __future__ import annotations

import os

import pytest
import torch

import tkc
from tkc import sparse as sp

from test_gpu_sddmm import ROOT, _check, _operands, _pattern  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tkc-cache"))


@pytest.mark.parametrize("example", ["sddmm", "sddmm_wmma_16x16x16"])  # values P, dense P
@pytest.mark.parametrize("tiling", [(64, 40, 128), (128, 128, 256), (192, 64, 384), (64, 256, 128)])
def test_wgmma_tiles_at_tile_edges(example, tiling, cache_dir):
    """One warpgroup per 64 rows, 128-byte swizzled stages: BN = 40 (padded to 8), 1 to 3
    warpgroups, K = 8 (one chunk mostly zero-filled), 72 (a partial second chunk) and 256 (four
    chunks: every stage refilled while wgmma run). N odd: B read transposed (K-major); N a
    multiple of 8 with BN one of 64 (every tiling but 64 x 40): B read itself (N-major), its
    columns past N zero-filled (N below BN, and a last tile of 24 columns)."""
    from passes.smem_sddmm import n_major_fits, wgmma_fits

    bm, bn, threads = tiling
    assert wgmma_fits(bm, bn, 72, "f16", threads)
    kernel = tkc.compile(os.path.join(ROOT, "examples", f"{example}.tk"), target="cuda", cache_dir=cache_dir,
                         BM=bm, BN=bn, threads=threads)
    kernel.dot_below = 0
    fmt = kernel.inputs[2].dtype
    cases = [(bm + 37, 2 * bn + 5, 72, 6000, "rmat"), (2 * bm - 3, bn - 8, 8, 3000, "uniform"),
             (3 * bm + 1, 3 * bn + 24, 256, 20000, "rmat")]
    assert [n_major_fits(bn, N, -(-M // bm) * -(-N // bn)) for M, N, _, _, _ in cases] == [False] + [bn % 64 == 0] * 2
    for seed, (M, N, K, nnz, kind) in enumerate(cases):
        A, B = _operands(M, N, K, torch.float16, 30 + seed)
        _check(kernel, A, B, _pattern(kind, M, N, min(nnz, M * N // 3), seed, fmt))


@pytest.mark.parametrize("example", ["sddmm", "sddmm_wmma_16x16x16", "sddmm_wmma_32x8x16"])  # csr values, dense, coo values
@pytest.mark.parametrize("threads", [256, 128])  # 128 x 128 tiles: wgmma, mma.sync
def test_tile_entries_in_several_chunks(example, threads, cache_dir):
    """A tile with more entries than the first chunk of places loaded during the K loop
    (CudaTiles.pos_pre: 6144 for the wgmma tile, 2304 for mma.sync) writes the rest a chunk of
    pos_cap at a time after its products (20224 and 3328): a full pattern (tiles of 16384 and 16256 entries) and a 90% dense one (tiles starting
    off a 16-byte boundary of tc_pos); csr values (tc_rbase), dense P, and a shuffled coo pattern
    (values through tc_order)."""
    from passes.smem_sddmm import cuda_tiles

    kernel = tkc.compile(os.path.join(ROOT, "examples", f"{example}.tk"), target="cuda", cache_dir=cache_dir,
                         BM=128, BN=128, threads=threads)
    kernel.dot_below = 0
    fmt = kernel.inputs[2].dtype
    tiles = cuda_tiles(128, 128, 72, "f16", True, threads, 300, 260)
    assert (tiles.pos_pre, tiles.pos_cap) == ((6144, 20224) if threads == 256 else (2304, 3328))
    for seed, (M, N, nnz) in enumerate([(255, 131, 255 * 131), (300, 260, 70200)]):
        A, B = _operands(M, N, 72, torch.float16, 40 + seed)
        p = _pattern("uniform", M, N, nnz, seed, fmt)
        plan = sp.dispatch_plan(sp.as_pattern(p, fmt).to("cuda"), 128, 128, 0)
        counts = (plan.tc_ptr[1:] - plan.tc_ptr[:-1]).tolist()
        assert max(counts) > tiles.pos_pre + (tiles.pos_cap if threads == 128 else 0)  # two chunks, or more
        assert any(start % 8 for start in plan.tc_ptr.tolist())
        assert (plan.tc_rbase.numel() > 0) == (fmt == "csr")  # shuffled coo: each entry's index from tc_order
        _check(kernel, A, B, p)


@pytest.mark.parametrize("example", ["sddmm", "sddmm_wmma_16x16x16", "sddmm_wmma_32x8x16"])  # csr values, dense, coo values
@pytest.mark.parametrize("blocks", [1, 5, None, "one-tile"])  # None: what is resident at once
def test_persistent_tiles_walked_by_fewer_blocks(example, blocks, monkeypatch, cache_dir):
    """The persistent twin of the wgmma tile kernel (K <= 32, passes/smem_sddmm.py
    `persistent_fits`, `<kernel>_walk`): each block walks tiles blockIdx.x, + gridDim.x, ...
    through two stages, so 1 and 5 blocks walk all 24 tiles of a 421 x 645 pattern (each block's
    next tile loaded while it writes this one's entries; its accumulators overwritten by each
    tile's first k16 step); "one-tile": the one-tile kernel at the same K, which the runtime
    launches where dot products follow. K = 32 and K = 24 (the last 16-byte vector of each row
    zero-filled); a 30% dense uniform pattern (tiles of up to about 4900 entries: past the PS
    places a stage holds, the rest read from tc_pos) and an R-MAT one (tiles from a few entries to
    dense)."""
    from tkc.cuda_runtime import CudaLaunch

    kernel = tkc.compile(os.path.join(ROOT, "examples", f"{example}.tk"), target="cuda", cache_dir=cache_dir,
                         BM=128, BN=128, threads=256)
    kernel.dot_below = 0
    fmt = kernel.inputs[2].dtype
    grids = []
    tile_launch = CudaLaunch.tile_launch

    def forced(self, index, n_tc, n_dot):
        name, grid, smem = tile_launch(self, index, n_tc, n_dot)
        assert name == self.walk_kernel == self.tc_kernel + "_walk" and n_dot == 0 and smem == self.walk_smem
        if blocks == "one-tile":
            name, grid, smem = self.tc_kernel, n_tc, self.smem
        elif blocks:
            grid = min(n_tc, blocks)
        grids.append((name, grid))
        return name, grid, smem

    monkeypatch.setattr(CudaLaunch, "tile_launch", forced)
    M, N = 3 * 128 + 37, 5 * 128 + 5
    for seed, (K, nnz, kind) in enumerate([(32, M * N * 3 // 10, "uniform"), (24, 20000, "rmat")]):
        A, B = _operands(M, N, K, torch.float16, 50 + seed)
        p = _pattern(kind, M, N, nnz, seed, fmt)
        plan = sp.dispatch_plan(sp.as_pattern(p, fmt).to("cuda"), 128, 128, 0)
        assert plan.n_tc == 24 and (seed or int((plan.tc_ptr[1:] - plan.tc_ptr[:-1]).max()) > 2048)
        _check(kernel, A, B, p)
    want = (example, 24) if blocks == "one-tile" else (example + "_walk", min(24, blocks) if blocks else 24)
    assert grids and set(grids) == {want}  # (an H100/H200 holds 264 of them)

"""The `cuda` backend's wgmma tile form of the SDDMM tile kernel (codegen/cuda_sddmm.py,
passes/smem_sddmm.py `wgmma_fits`) on the GPU, in the quick tier (not `slow`: `cuda` builds take
seconds): every tile forced onto tensor cores, at tilings that pad BN to 8 and use 1 to 3
warpgroups, M and N cutting the tiles, K of one mostly zero-filled chunk, a partial second chunk
and four chunks, B read transposed (Bt, K-major) and read itself (N-major, N % 8 == 0); values
and dense P; against torch in float64 with tests/gpu/test_gpu_sddmm.py's
fenced check (a store outside P or an entry left unwritten fails).

Run on the device machine: `python3 -m pytest -q -m gpu tests/gpu/test_gpu_sddmm_wgmma.py`.
"""

from __future__ import annotations

import os

import pytest
import torch

import tkc

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

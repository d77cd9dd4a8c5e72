"""Seed 003's tensor-core SDDMM, reconstructed from its description, for benchmarks/sddmm.py.

Seed 003 (an SDDMM optimization log) holds fragments of its author's code, not a complete kernel,
so nothing here is copied from it: this module is our own CUDA C++ written after the algorithm the
seed describes, section by section (titles as in the seed, with a translation):

- "加入 Tensor core" (adding tensor cores): each warp multiplies one WMMA tile of P = A @ B over the
  whole K with `wmma::mma_sync` (f16 A and B row-major, f32 accumulator): 16x16x16, and in later
  sections 32x8x16 and 8x32x16 ("测试结果 行主序储存 32×8×16", "... 8×32×16").
- "在上个版本的基础上将 blockDIm 的尺寸改变成 128×4" (block shape 128 x 4): blocks of 128 x 4
  threads, so one block holds 4 x 4 warps, one per tile, over a grid that covers every tile of the
  cdiv(M, WM) x cdiv(N, WN) tile grid (its log: "grid : [579 579 1] block : [128 4 1]" at 37008^2
  with 16 x 16 tiles). Very sparse matrices cost their whole area.
- "使计算支持各个尺寸的矩阵(Matrix::openTensorCoreMode())" (any matrix size): A and B are padded
  with zeros to whole tiles ("matrixA : row = 37008" for M = 37000), so fragment loads never leave
  the matrix. Here `pad_inputs` pads M and N to multiples of 32 (every tile shape's edge), once
  per input set, outside the timed region: the padded copies are the seed's input layout, as the
  f32 copies are cuSPARSE's in benchmarks/sddmm.py.
- "使用COO格式储存稀疏矩阵进行运算(第二版)" (COO, second version): entries grouped by tile, and
  the warp of tile t writes the entries `matrixTileIndex[t] .. matrixTileIndex[t + 1]` of its
  tile into P in entry order (`matrixP[matrixPIdx]`): a values output, not a dense P. `plan`
  builds that per-tile entry index (the seed's `openTensorCoreModeForSampled()`, its "other" time)
  with torch: the entries' tile ids, a stable sort, and the pointers of *every* tile (empty ones
  included). It is cached per pattern object, like tkc's tile lists.
- The same section's 5000^2 table (kernel time falls from 0.30 ms at 1.25M entries to 0.04 ms at
  2500) shows that the warp of an empty tile skips its product: here too, a warp whose tile holds
  no entry returns before the MMA (it still reads its two tile pointers).

Two departures, both in the seed's favour or neutral:
- The seed maps an entry to the register that holds it (`positionCalculator`, after its measured
  fragment layout in "TensorCore 测试 warp 中数据储存格式"), and every lane of the warp walks every
  entry of the tile. The accumulator layout is unspecified by CUDA (the seed's own 32 x 8 table
  lists columns 8 and 9 of an 8-wide tile), so each warp here stores its accumulator to shared
  memory (`wmma::store_matrix_sync`) and its 32 lanes split the tile's entries between them.
- The seed writes P in tile order (its entries were re-sorted by tile). Here P comes out in S's
  order, like every other variant: entry i of the tile-sorted list is written to P[perm[i]].

The kernels (`seed003_sddmm_16x16x16`, `..._32x8x16`, `..._8x32x16`, extern "C") take
(A, B, tile_ptr, srow, scol, perm, P, K, lda, ldb, tiles_m, tiles_n). Built with nvcc
(`-arch=sm_90a -cubin -O3`, default) or NVRTC through CuPy, loaded with `cupy.RawModule` and
launched on torch's current stream. On the CPU, `SeedSDDMM` runs `emulate`: the same plan and the
same per-tile arithmetic in torch (f32 accumulation), so the dry run checks the plan and indexing.

A small command line prints or compiles the CUDA source without a GPU:

    python3 benchmarks/seed_sddmm.py [--emit out.cu|-] [--compile]
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import tempfile
import time
import warnings
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _p in (ROOT, HERE):  # run from anywhere without installing; seed_kernels lives beside us
    if _p not in sys.path:
        sys.path.insert(0, _p)

import seed_kernels  # noqa: E402  (nvcc discovery, ptxas report, CUDA include dir)

TILES = {"16x16": (16, 16), "32x8": (32, 8), "8x32": (8, 32)}  # WMMA m x n; k = 16 for all
WK = 16
PAD = 32  # M and N padded to a multiple of every tile's edge
BLOCK = (128, 4)  # the seed's block: 4 x 4 warps, one tile each
WARPS_PER_BLOCK = BLOCK[0] * BLOCK[1] // 32
GRID_Y_MAX = 65535
DEFAULT_MAX_TILES = 200_000_000  # tile pointers: 0.8 GB of int32 (and 1.6 GB of int64 counts while built)

SOURCE = r"""// Seed 003's WMMA SDDMM, reconstructed by benchmarks/seed_sddmm.py (see its docstring).
// One warp per WM x WN tile of P over every tile of the padded matrices; a block of 128 x 4
// threads holds 4 x 4 warps. A warp whose tile holds no entry returns; the others multiply
// A[tile rows, :] @ B[:, tile columns] with wmma (f16 in, f32 accumulation), stage the
// accumulator in shared memory and write their tile's entries to P in S's order.
#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

template <int WM, int WN>
__device__ __forceinline__ void seed003_tile(const half* __restrict__ A, const half* __restrict__ B,
                                             const int* __restrict__ tile_ptr, const int* __restrict__ srow,
                                             const int* __restrict__ scol, const int* __restrict__ perm,
                                             float* __restrict__ P, int K, int lda, int ldb, int tiles_m,
                                             int tiles_n) {
    constexpr int WK = 16;
    __shared__ __align__(32) float stage[16 * WM * WN];  // one WM x WN f32 tile per warp of the block
    const int lane = threadIdx.x & 31;
    const int tn = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;  // tile column: 4 warps along x
    const int tm = blockIdx.y * blockDim.y + threadIdx.y;         // tile row: 4 warps along y
    if (tm >= tiles_m || tn >= tiles_n) return;  // whole warps: blockDim.x is a multiple of 32
    const long long t = (long long)tm * tiles_n + tn;
    const int begin = tile_ptr[t], end = tile_ptr[t + 1];
    if (begin == end) return;  // an empty tile: no product
    const long long row0 = (long long)tm * WM, col0 = (long long)tn * WN;

    wmma::fragment<wmma::matrix_a, WM, WN, WK, half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, WM, WN, WK, half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, WM, WN, WK, float> c;
    wmma::fill_fragment(c, 0.0f);
    // The fragment loads compile to 32-bit LDGs on sm_90a (cuobjdump -sass), so the B pointer of a
    // 32 x 8 tile, 16-byte aligned only, is fine (CUDA documents 32-byte alignment).
    for (int k = 0; k < K; k += WK) {
        wmma::load_matrix_sync(a, A + row0 * lda + k, lda);
        wmma::load_matrix_sync(b, B + (long long)k * ldb + col0, ldb);
        wmma::mma_sync(c, a, b, c);
    }
    float* tile = stage + ((threadIdx.y * blockDim.x + threadIdx.x) >> 5) * (WM * WN);
    wmma::store_matrix_sync(tile, c, WN, wmma::mem_row_major);
    __syncwarp();
    for (int i = begin + lane; i < end; i += 32)
        P[perm[i]] = tile[(srow[i] - (int)row0) * WN + (scol[i] - (int)col0)];
}

#define SEED003_KERNEL(WM, WN)                                                                          \
    extern "C" __global__ void __launch_bounds__(512) seed003_sddmm_##WM##x##WN##x16(                 \
        const half* A, const half* B, const int* tile_ptr, const int* srow, const int* scol,             \
        const int* perm, float* P, int K, int lda, int ldb, int tiles_m, int tiles_n) {                  \
        seed003_tile<WM, WN>(A, B, tile_ptr, srow, scol, perm, P, K, lda, ldb, tiles_m, tiles_n);       \
    }

SEED003_KERNEL(16, 16)
SEED003_KERNEL(32, 8)
SEED003_KERNEL(8, 32)
"""


class SeedTooLarge(ValueError):
    """The tile grid is too large for the seed's per-tile index (or its launch grid)."""


def kernel_name(tile: str) -> str:
    wm, wn = TILES[tile]
    return f"seed003_sddmm_{wm}x{wn}x{WK}"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_grid(M: int, N: int, tile: str) -> tuple[int, int]:
    """(tiles_m, tiles_n): the WM x WN tiles covering M x N, every one of which the seed visits."""
    wm, wn = TILES[tile]
    return cdiv(M, wm), cdiv(N, wn)


# ----------------------------------------------------------------------------- the per-tile entry index

@dataclasses.dataclass(frozen=True)
class SeedPlan:
    """The seed's per-tile entry index for one pattern and tile shape, int32 tensors on the
    pattern's device: the entries of tile t = tm * tiles_n + tn (row-major over *all* tiles) are
    i in [tile_ptr[t], tile_ptr[t + 1]) with position (srow[i], scol[i]), written to P[perm[i]]."""

    tile: str
    tiles_m: int
    tiles_n: int
    tile_ptr: object  # [tiles_m * tiles_n + 1]
    srow: object  # [nnz]
    scol: object  # [nnz]
    perm: object  # [nnz]

    @property
    def n_tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def nbytes(self) -> int:
        return 4 * (self.n_tiles + 1 + 3 * self.srow.numel())


def build_plan(pattern, tile: str, max_tiles: int = DEFAULT_MAX_TILES) -> SeedPlan:
    """The per-tile entry index of `pattern` (a tkc.sparse.SparsePattern) for `tile`: a stable
    sort of the entries on their tile id, and the pointers of every tile. SeedTooLarge when the
    tile grid has more than `max_tiles` tiles or more tile rows than a launch grid holds."""
    import torch

    wm, wn = TILES[tile]
    tiles_m, tiles_n = tile_grid(pattern.M, pattern.N, tile)
    n_tiles = tiles_m * tiles_n
    if n_tiles > max_tiles:
        raise SeedTooLarge(f"{n_tiles:.3g} tiles of {wm} x {wn} (more than {max_tiles:.3g}); their index alone is "
                           f"{4 * (n_tiles + 1) / 2**30:.1f} GiB of int32")
    if cdiv(tiles_m, BLOCK[1]) > GRID_Y_MAX:
        raise SeedTooLarge(f"{tiles_m} tile rows need {cdiv(tiles_m, BLOCK[1])} blocks along y (limit {GRID_Y_MAX})")
    rows, cols = pattern.rows, pattern.cols
    tile_id = (rows.long() // wm) * tiles_n + cols.long() // wn
    tile_id, perm = torch.sort(tile_id, stable=True)
    ptr = torch.zeros(n_tiles + 1, dtype=torch.int32, device=rows.device)
    ptr[1:] = torch.bincount(tile_id, minlength=n_tiles).cumsum(0)
    return SeedPlan(tile, tiles_m, tiles_n, ptr, rows[perm].contiguous(), cols[perm].contiguous(), perm.int())


def pad_inputs(A, B, mult: int = PAD):
    """A f16[M, K] and B f16[K, N] zero-padded to Mp = ceil(M / mult) * mult rows and Np columns:
    the seed's input layout (its `openTensorCoreMode`). Returns (Ap, Bp), contiguous."""
    import torch

    M, K = A.shape
    N = B.shape[1]
    Mp, Np = cdiv(M, mult) * mult, cdiv(N, mult) * mult
    Ap = torch.zeros(Mp, K, dtype=A.dtype, device=A.device)
    Ap[:M] = A
    Bp = torch.zeros(K, Np, dtype=B.dtype, device=B.device)
    Bp[:, :N] = B
    return Ap, Bp


def emulate(plan: SeedPlan, Ap, Bp, nnz: int):
    """The kernel's arithmetic in torch, tile by tile over every tile (CPU dry run only): each
    non-empty tile's product in f32 from the f16 inputs, then its entries written to P[perm]."""
    import torch

    wm, wn = TILES[plan.tile]
    P = torch.full((nnz,), float("nan"), dtype=torch.float32, device=Ap.device)
    ptr = plan.tile_ptr.tolist()
    for tm in range(plan.tiles_m):
        for tn in range(plan.tiles_n):
            t = tm * plan.tiles_n + tn
            begin, end = ptr[t], ptr[t + 1]
            if begin == end:
                continue
            r0, c0 = tm * wm, tn * wn
            acc = Ap[r0:r0 + wm].float() @ Bp[:, c0:c0 + wn].float()
            sr, sc = plan.srow[begin:end].long() - r0, plan.scol[begin:end].long() - c0
            P[plan.perm[begin:end].long()] = acc[sr, sc]
    return P


# ----------------------------------------------------------------------------- building, launching

def compile_cubin(work_dir: str, nvcc: str | None = None, arch: str = seed_kernels.DEFAULT_ARCH) -> seed_kernels.Build:
    """nvcc -cubin of SOURCE into `work_dir` (raises seed_kernels.SeedError with nvcc's output)."""
    return seed_kernels.compile_nvcc(SOURCE, work_dir, "cubin", nvcc, arch)


class SeedSDDMM:
    """Seed 003's WMMA SDDMM for one tile shape ("16x16", "32x8" or "8x32"): call it with the
    padded inputs (`pad_inputs`) and a SparsePattern to get P f32[nnz] in S's order. The per-tile
    entry index is built on the first call with a pattern object and cached for that object.

    device "cuda": the kernel, compiled once per process for all three shapes (nvcc, else NVRTC
    through CuPy); device "cpu": `emulate`. `info` holds the build's command, seconds and ptxas
    report."""

    _modules: dict[tuple, tuple] = {}  # (compiler, arch) -> (cupy module, info): one build per process

    def __init__(self, tile: str, device: str, compiler: str = "auto", nvcc: str | None = None,
                 max_tiles: int = DEFAULT_MAX_TILES):
        if tile not in TILES:
            raise ValueError(f"unknown seed tile `{tile}`; expected one of {', '.join(TILES)}")
        self.tile, self.device, self.max_tiles = tile, device, max_tiles
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.info: dict = {}
        self._fn = None
        if device == "cuda":
            self._fn, self.info = self._load(compiler, nvcc)

    def _load(self, compiler: str, nvcc: str | None):
        import cupy
        import torch

        from tkc.cuda_runtime import device_arch

        arch = device_arch(torch.cuda.current_device())
        nvcc = seed_kernels.find_nvcc(nvcc)
        if compiler == "auto":
            compiler = "nvcc" if nvcc else "nvrtc"
        key = (compiler, arch)
        if key not in SeedSDDMM._modules:
            t0 = time.perf_counter()
            info: dict = {"compiler": compiler, "arch": arch,
                          "source_sha256": hashlib.sha256(SOURCE.encode()).hexdigest()}
            with cupy.cuda.Device(torch.cuda.current_device()):
                if compiler == "nvcc":
                    build = compile_cubin(tempfile.mkdtemp(prefix="tkc-seed003-"), nvcc, arch)
                    info.update(command=" ".join(build.command), nvcc=seed_kernels.nvcc_version(build.command[0]),
                                ptxas=seed_kernels.ptxas_report(build.log))
                    module = cupy.RawModule(path=build.path)
                elif compiler == "nvrtc":
                    inc = seed_kernels.cuda_include_dir(nvcc)
                    options = (f"--gpu-architecture={arch}", "--std=c++17") + ((f"-I{inc}",) if inc else ())
                    module = cupy.RawModule(code=SOURCE, backend="nvrtc", options=options)
                    info["options"] = list(options)
                else:
                    raise ValueError(f"unknown seed compiler `{compiler}` (auto, nvcc or nvrtc)")
                for t in TILES:  # load (NVRTC: compile) now, outside any timing
                    fn = module.get_function(kernel_name(t))
                    getattr(fn, "kernel", None)
                    try:
                        info.setdefault("attributes", {})[kernel_name(t)] = dict(fn.attributes)
                    except Exception:  # informative only
                        pass
            info["build_s"] = time.perf_counter() - t0
            SeedSDDMM._modules[key] = (module, info)
        module, info = SeedSDDMM._modules[key]
        return module.get_function(kernel_name(self.tile)), info

    def plan(self, pattern) -> SeedPlan:
        """The cached plan of `pattern` (built on first use with this object)."""
        plan = self._plans.get(pattern)
        if plan is None:
            plan = self._plans[pattern] = build_plan(pattern, self.tile, self.max_tiles)
        return plan

    def __call__(self, Ap, Bp, pattern):
        plan = self.plan(pattern)
        if self.device != "cuda":
            return emulate(plan, Ap, Bp, pattern.nnz)
        return self._launch(plan, Ap, Bp, pattern.nnz)

    def _launch(self, plan: SeedPlan, Ap, Bp, nnz: int):
        import numpy as np
        import torch

        P = torch.empty(nnz, dtype=torch.float32, device=Ap.device)
        if nnz == 0:
            return P
        K = Ap.shape[1]
        if K % WK or Bp.shape[0] != K or Ap.shape[0] < plan.tiles_m * TILES[self.tile][0] \
                or Bp.shape[1] < plan.tiles_n * TILES[self.tile][1]:
            raise ValueError(f"seed inputs {tuple(Ap.shape)} x {tuple(Bp.shape)} do not cover the {self.tile} "
                             f"tile grid {plan.tiles_m} x {plan.tiles_n} with K a multiple of {WK}")
        grid = (cdiv(plan.tiles_n * 32, BLOCK[0]), cdiv(plan.tiles_m, BLOCK[1]), 1)
        args = tuple(np.uint64(t.data_ptr()) for t in (Ap, Bp, plan.tile_ptr, plan.srow, plan.scol, plan.perm, P))
        args += (np.int32(K), np.int32(Ap.shape[1]), np.int32(Bp.shape[1]), np.int32(plan.tiles_m),
                 np.int32(plan.tiles_n))
        with _cupy_stream():  # torch's current stream, as tkc.cuda_runtime launches
            self._fn(grid, (*BLOCK, 1), args)
        return P


_STREAMS: dict[int, object] = {}


def _cupy_stream():
    """CuPy's view of torch's current CUDA stream (cached per stream)."""
    import cupy
    import torch

    ptr = torch.cuda.current_stream().cuda_stream
    s = _STREAMS.get(ptr)
    if s is None:
        with warnings.catch_warnings():  # deprecated in CuPy 14 for Stream.from_external, still there
            warnings.simplefilter("ignore", DeprecationWarning)
            s = _STREAMS[ptr] = cupy.cuda.ExternalStream(ptr)
    return s


# ----------------------------------------------------------------------------- command line

def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Print or compile the reconstruction of seed 003's WMMA SDDMM "
                                            "(no GPU needed).")
    p.add_argument("--emit", default=None, help="write the CUDA source here ('-' for stdout)")
    p.add_argument("--compile", action="store_true", help="nvcc -cubin it and print ptxas' report")
    p.add_argument("--nvcc", default=None)
    p.add_argument("--arch", default=seed_kernels.DEFAULT_ARCH)
    args = p.parse_args(argv)
    if args.emit == "-":
        sys.stdout.write(SOURCE)
    elif args.emit:
        with open(args.emit, "w", encoding="utf-8") as f:
            f.write(SOURCE)
    if args.compile:
        with tempfile.TemporaryDirectory(prefix="tkc-seed003-") as d:
            b = compile_cubin(d, args.nvcc, args.arch)
            print(f"nvcc: ok in {b.seconds:.1f} s ({' '.join(b.command)})")
            symbols = set(seed_kernels.elf_function_symbols(b.path))
            for t in TILES:
                report = seed_kernels.ptxas_report(b.log).get(kernel_name(t), {})
                found = "found" if kernel_name(t) in symbols else "MISSING"
                print(f"  {kernel_name(t)}: {found}; {report}")
                if found != "found":
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

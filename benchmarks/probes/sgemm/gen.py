"""Write the SGEMM probe's kernels (benchmarks/probes/sgemm/probe.py) into a folder.

`tkc compile examples/sgemm.tk --target cuda` at M = N = K = 4096 and the tuned tiling (BM=128,
BN=256, BK=32, WNITER=2, 256 threads): `tuned`, `st3` (3 stages), `bk16_st3` (BK = 16, 3
stages). Since 2026-11-26 the compiler XOR-swizzles A's transposed tile (passes/cuda_placement.py
`_swizzle`); `noswz` is `tuned` with the swizzle taken out (the layout the variants below and the
first runs of this probe measured), and `noswz` edited by hand: `unroll8` (the k loop unrolled
by 8, not fully), `dbuf` (the fragments of k + 1 loaded from shared memory before k's FMAs),
`amap` (A's loader maps consecutive lanes to consecutive rows: no bank conflicts on its
transposed 4-byte stores).

    python3 benchmarks/probes/sgemm/gen.py DIR
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [ROOT, os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]

from variants import write_sources  # noqa: E402

TUNED = {"BN": 256, "BK": 32, "WNITER": 2, "threads": 256}
GENERATED = {"tuned": TUNED, "st3": {**TUNED, "stages": 3}, "bk16_st3": {**TUNED, "BK": 16, "stages": 3}}
K_LOOP = '''                #pragma unroll
                for (int kk = 0; kk < 32; ++kk) {'''
DBUF = '''                alignas(16) float rm[2][2][8];  // A fragments of kk (slot kk % 2) and kk + 1
                alignas(16) float rn[2][2][4];
                #pragma unroll
                for (int wi = 0; wi < 2; ++wi) tk_load<16>(rm[0][wi], &t0[stage_k * 4096 + 0 * 128 + wtr * 64 + wi * 32 + ltr * 8 + 0]);
                #pragma unroll
                for (int wj = 0; wj < 2; ++wj) tk_load<16>(rn[0][wj], &t1[stage_k * 8192 + 0 * 256 + wtc * 64 + wj * 32 + ltc * 4 + 0]);
                #pragma unroll
                for (int kk = 0; kk < 32; ++kk) {
                    if (kk + 1 < 32) {
                        #pragma unroll
                        for (int wi = 0; wi < 2; ++wi) tk_load<16>(rm[(kk + 1) % 2][wi], &t0[stage_k * 4096 + (kk + 1) * 128 + wtr * 64 + wi * 32 + ltr * 8 + 0]);
                        #pragma unroll
                        for (int wj = 0; wj < 2; ++wj) tk_load<16>(rn[(kk + 1) % 2][wj], &t1[stage_k * 8192 + (kk + 1) * 256 + wtc * 64 + wj * 32 + ltc * 4 + 0]);
                    }
                    #pragma unroll
                    for (int ti = 0; ti < 16; ++ti)
                        #pragma unroll
                        for (int tj = 0; tj < 8; ++tj)
                            acc[ti][tj] += rm[kk % 2][ti / 8][ti % 8] * rn[kk % 2][tj / 4][tj % 4];
                }
            }
'''


def generate(folder: str) -> list[str]:
    """Write every variant into `folder`; returns their names."""
    from codegen import cuda
    from tkc import driver

    path = os.path.relpath(os.path.join(ROOT, "examples", "sgemm.tk"))  # as the header names it from the root
    sources = {name: cuda.emit(driver.optimize(driver.frontend(path, dict(d)), "cuda")) for name, d in GENERATED.items()}
    from passes import cuda_placement

    swizzle = cuda_placement._swizzle
    cuda_placement._swizzle = lambda *args: None  # the compiler as it was before the swizzle
    try:
        base = cuda.emit(driver.optimize(driver.frontend(path, dict(TUNED)), "cuda"))
    finally:
        cuda_placement._swizzle = swizzle
    assert base != sources["tuned"]
    sources["noswz"] = base
    assert K_LOOP in base
    sources["unroll8"] = base.replace(K_LOOP, K_LOOP.replace("#pragma unroll", "#pragma unroll 8"))
    body = base[base.index(K_LOOP):]
    sources["dbuf"] = base.replace(body[:body.index("            __syncthreads();  // every thread is done")], DBUF)
    amap = base.replace('''                    const int row = ch / 4;
                    const int col = ch % 4 * 8;
                    tk_cp_async<4>(&t0''', '''                    const int row = ch % 128;
                    const int col = ch / 128 * 8;
                    tk_cp_async<4>(&t0''')
    assert amap.count("ch % 128") == 2
    sources["amap"] = amap
    return write_sources(folder, sources)


if __name__ == "__main__":
    print("\n".join(generate(sys.argv[1])))

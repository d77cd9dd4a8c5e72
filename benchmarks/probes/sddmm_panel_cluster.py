"""Probe (issue 12): would a cluster of blocks sharing one panel load it sooner at K = 32?

Question: at 10000^2 with 5M entries, K = 32, each of the 132 blocks of `<kernel>_groups_b`
(codegen/cuda_sddmm.py) first loads a 160 KB panel of B transposed into its shared memory (2560
columns x 64 bytes). That takes about 3.6 us of the kernel's 32 (docs/PERFORMANCE.md, "the panel
loaded at once"). 132 x 160 KB = 21 MB read from L2 in 3.6 us is about 5.9 TB/s, which looks like
L2's own bandwidth. With a thread-block cluster of CL blocks on one panel, each block would read
1/CL of it from L2 and store what it transposed into every block of the cluster (distributed
shared memory). L2 would serve 21 / CL MB. How long does the panel then take?

The kernels here do only the panel phase of `<kernel>_groups_b`, written as in the generated
source: 1024 threads, thread v takes 4 columns x 8 rows of B as eight 8-byte loads, all of them
issued before its stores; then a byte-permute transpose into four 16-byte chunks at
`tk_group_base`'s swizzled places. Then a barrier: the block's own, or the cluster's. Each block
then folds its whole panel into a checksum. Blocks of one panel must agree across variants: a
store that missed a block's memory would show. The variants:
- `CL=1`: the kernel's own form (three shares per thread);
- `CL=2` and `CL=4`: `__cluster_dims__(CL)`; the blocks of a cluster share a panel, each loads
  1/CL of its shares (2 or 1 per thread), and stores each chunk into all CL blocks' memory.

The grid is 132 blocks, one per SM, with the group kernel's 180224 bytes of dynamic shared memory;
B is [32, 10000] f16. Timed as CUDA-graph replays of 20 launches (B stays in L2) and by do_bench
(its L2 clear before each call: B from DRAM).

    source .device/env.sh && python3 benchmarks/probes/sddmm_panel_cluster.py
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from sddmm_overhead import graph_us  # noqa: E402

N, K, WIDTH, BLOCKS, SMEM = 10000, 32, 2560, 132, 180224
PANELS = -(-N // WIDTH)

SOURCE = r"""// tkc-launch: {"kernel": "panel_cl@CL@", "grid": [@BLOCKS@, 1, 1], "block": [1024, 1, 1], "cluster": [@CL@, 1, 1], "smem_bytes": @SMEM@}
#include <cstdint>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ __forceinline__ int tk_group_base(const int j) {  // codegen/cuda_sddmm.py: (j / 2) * 128 + class(j) * 16
    const int m = j >> 1;
    return m * 128 + (((((j & 1) << 2) | (m & 3)) ^ (((m >> 2) ^ (m >> 5) ^ (m >> 8)) & 7)) << 4);
}
extern "C" __global__ void @CLUSTER@ __launch_bounds__(1024, 1) panel_cl@CL@(const unsigned short* __restrict__ B,
                                                                          unsigned* __restrict__ out) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int CL = @CL@, D = @D@, N = @N@;
    const int tid = threadIdx.x;
    const int panel = (blockIdx.x / CL) % @PANELS@;
    const int c0 = panel * @WIDTH@, ncols = min(@WIDTH@, N - c0);
    int rank = 0;
    unsigned char* dst[CL];
#if @CL@ > 1
    cg::cluster_group cluster = cg::this_cluster();
    rank = static_cast<int>(cluster.block_rank());
    #pragma unroll
    for (int r = 0; r < CL; ++r) dst[r] = static_cast<unsigned char*>(cluster.map_shared_rank(static_cast<void*>(smem), r));
#else
    dst[0] = smem;
#endif
    const int per = ncols / CL, first = rank * per, end = rank == CL - 1 ? ncols : first + per;
    #pragma unroll 1
    for (int v0 = first + tid; v0 < end; v0 += D * 1024) {
        uint2 x[D][8];
        #pragma unroll
        for (int h = 0; h < D; ++h) {
            const int v = v0 + h * 1024, c = v % (ncols >> 2), q = v / (ncols >> 2);
            #pragma unroll
            for (int i = 0; i < 8; ++i)
                x[h][i] = v < end ? *reinterpret_cast<const uint2*>(B + (size_t)(8 * (i >> 1) + 2 * q + (i & 1)) * N + c0 + 4 * c)
                                  : make_uint2(0u, 0u);
        }
        #pragma unroll
        for (int h = 0; h < D; ++h) {
            const int v = v0 + h * 1024, c = v % (ncols >> 2), q = v / (ncols >> 2);
            if (v >= end) break;
            #pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const unsigned sel = (jj & 1) ? 0x7632u : 0x5410u;
                uint4 y;
                y.x = __byte_perm(jj < 2 ? x[h][0].x : x[h][0].y, jj < 2 ? x[h][1].x : x[h][1].y, sel);
                y.y = __byte_perm(jj < 2 ? x[h][2].x : x[h][2].y, jj < 2 ? x[h][3].x : x[h][3].y, sel);
                y.z = __byte_perm(jj < 2 ? x[h][4].x : x[h][4].y, jj < 2 ? x[h][5].x : x[h][5].y, sel);
                y.w = __byte_perm(jj < 2 ? x[h][6].x : x[h][6].y, jj < 2 ? x[h][7].x : x[h][7].y, sel);
                const int at = tk_group_base(4 * c + jj) ^ (q << 4);
                #pragma unroll
                for (int r = 0; r < CL; ++r) *reinterpret_cast<uint4*>(dst[r] + at) = y;
            }
        }
    }
#if @CL@ > 1
    cluster.sync();
#else
    __syncthreads();
#endif
    unsigned s = 0;  // the block's panel folded (rows past ncols are not written: left out)
    for (int j = tid; j < ncols; j += 1024) {
        const int b = tk_group_base(j);
        #pragma unroll
        for (int q = 0; q < 4; ++q) {
            const uint4 y = *reinterpret_cast<const uint4*>(smem + (b ^ (q << 4)));
            s = s * 31u + (y.x ^ (y.y * 3u) ^ (y.z * 5u) ^ (y.w * 7u)) + 11u * j + q;
        }
    }
    atomicAdd(out + blockIdx.x, s);
}
"""


def main() -> int:
    from triton.testing import do_bench

    from tkc.cuda_runtime import CudaLaunch

    cache = tempfile.mkdtemp(prefix="tkc-panel-")
    B = torch.randn(K, N, device="cuda").half()
    print(f"{torch.cuda.get_device_name()}: B [{K}, {N}] f16, {BLOCKS} blocks of 1024 threads, {PANELS} panels of "
          f"{WIDTH} columns; us per launch")
    sums, rows = {}, []
    for cl in (1, 2, 4):
        per = WIDTH // cl
        src = (SOURCE.replace("@CLUSTER@", f"__cluster_dims__({cl}, 1, 1)" if cl > 1 else "")
               .replace("@CL@", str(cl)).replace("@D@", str(-(-per // 1024))).replace("@N@", str(N))
               .replace("@PANELS@", str(PANELS)).replace("@WIDTH@", str(WIDTH)).replace("@BLOCKS@", str(BLOCKS))
               .replace("@SMEM@", str(SMEM)))
        path = os.path.join(cache, f"panel_cl{cl}.cu")
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)
        launch = CudaLaunch(path, src)
        out = torch.zeros(BLOCKS, dtype=torch.int32, device="cuda")

        def run(launch=launch, out=out):
            launch(B, out)

        out.zero_()
        run()
        torch.cuda.synchronize()
        sums[cl] = out.clone()
        rows.append((cl, graph_us(run), do_bench(run, warmup=25, rep=200) * 1e3))
    # blocks of one panel agree within and across the variants
    panel_of = {cl: [(b // cl) % PANELS for b in range(BLOCKS)] for cl in sums}
    ref = {}
    for b, q in enumerate(panel_of[1]):
        ref.setdefault(q, int(sums[1][b]))
    bad = [(cl, b) for cl in sums for b, q in enumerate(panel_of[cl]) if int(sums[cl][b]) != ref[q]]
    print("| cluster | graph us | do_bench us |")
    print("|---|---|---|")
    for cl, g, d in rows:
        print(f"| {cl} | {g:.2f} | {d:.2f} |")
    print("panels agree" if not bad else f"MISMATCH at {bad[:8]}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

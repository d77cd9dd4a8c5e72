// Hand-written reference point (not generated): an int8 GEMV with int8 activations quantized per
// group as llama2.c's runq.c does (X [G, GS] int8 with one f32 scale per group, SX [G, 1]), in the
// layout of the generated matmul_q8 (a thread holds the same 16 columns of BD rows: group tid / 4,
// columns tid % 4 * 16), the products as 4 __dp4a per row instead of 16 conversions and FMAs.
// Without -DPERSIST: one row group per block. With it: a persistent loop over row groups, the next
// group's W and S loaded before the current one is reduced. D = 11008, G = GS = 64.
// tkc-launch: {"kernel": "w8a8", "grid": [2752, 1, 1], "block": [256, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}
#include <cstdint>
constexpr int D = 11008, K = 4096, GS = 64, G = K / GS, BD = 4;
extern "C" __global__ void __launch_bounds__(256) w8a8(const int8_t* __restrict__ W, const float* __restrict__ S,
                                                       const int8_t* __restrict__ X, const float* __restrict__ SX,
                                                       float* __restrict__ Y) {
    __shared__ float red[BD][8];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int grp = tid / 4, col = tid % 4 * 16;
    const uint4 x = *reinterpret_cast<const uint4*>(X + grp * GS + col);
    const float sx = SX[grp];
    uint4 w[BD];
    float s[BD];
    int rg = blockIdx.x;
    #pragma unroll
    for (int r = 0; r < BD; ++r) {
        w[r] = *reinterpret_cast<const uint4*>(W + (size_t)(rg * BD + r) * K + grp * GS + col);
        s[r] = S[(rg * BD + r) * G + grp];
    }
#ifdef PERSIST
    for (; rg < D / BD; rg += gridDim.x) {
        const int nx = rg + gridDim.x;
        uint4 wn[BD];
        float sn[BD];
        if (nx < D / BD) {
            #pragma unroll
            for (int r = 0; r < BD; ++r) {
                wn[r] = *reinterpret_cast<const uint4*>(W + (size_t)(nx * BD + r) * K + grp * GS + col);
                sn[r] = S[(nx * BD + r) * G + grp];
            }
        }
#endif
        float acc[BD];
        #pragma unroll
        for (int r = 0; r < BD; ++r) {
            int q = __dp4a(static_cast<int>(w[r].x), static_cast<int>(x.x), 0);
            q = __dp4a(static_cast<int>(w[r].y), static_cast<int>(x.y), q);
            q = __dp4a(static_cast<int>(w[r].z), static_cast<int>(x.z), q);
            q = __dp4a(static_cast<int>(w[r].w), static_cast<int>(x.w), q);
            acc[r] = static_cast<float>(q) * (s[r] * sx);
            #pragma unroll
            for (int sh = 16; sh > 0; sh /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], sh);
        }
        if (lane == 0) {
            #pragma unroll
            for (int r = 0; r < BD; ++r) red[r][warp] = acc[r];
        }
        __syncthreads();
        if (warp < (BD * 8 + 31) / 32) {  // whole warps: every lane takes part in the shuffles
            float v = tid < BD * 8 ? red[tid / 8][tid % 8] : 0.0f;
            #pragma unroll
            for (int sh = 4; sh > 0; sh /= 2) v += __shfl_xor_sync(0xffffffffu, v, sh);
            if (tid < BD * 8 && tid % 8 == 0) Y[rg * BD + tid / 8] = v;
        }
#ifdef PERSIST
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < BD; ++r) { w[r] = wn[r]; s[r] = sn[r]; }
    }
#endif
}

// Hand-written reference point (not generated): the layout of the generated matmul_q8 (a thread
// holds the same 16 columns of 4 rows: group tid / 4, columns tid % 4 * 16) in a persistent loop
// over row groups: X stays in registers for the whole kernel, and the next row group's W and S
// are loaded before the current one is reduced (register double buffering). D = 11008, G = GS = 64.
// tkc-launch: {"kernel": "matmul_q8", "grid": [396, 1, 1], "block": [256, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}
#include <cstdint>
constexpr int D = 11008, K = 4096, GS = 64, BD = 4;
__device__ __forceinline__ float i8f(unsigned w, int b) {
    return __int_as_float(__byte_perm(w, 0x4B000000u, 0x7440 + b)) - 8388736.0f;
}
extern "C" __global__ void __launch_bounds__(256) matmul_q8(const int8_t* __restrict__ W, const float* __restrict__ S,
                                                            const float* __restrict__ X, float* __restrict__ Y) {
    __shared__ float red[BD][8];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int grp = tid / 4, col = tid % 4 * 16;
    float x[16];
    #pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(X + grp * GS + col + q * 4);
        x[q * 4] = v.x; x[q * 4 + 1] = v.y; x[q * 4 + 2] = v.z; x[q * 4 + 3] = v.w;
    }
    uint4 w[BD];
    float s[BD];
    int rg = blockIdx.x;
    #pragma unroll
    for (int r = 0; r < BD; ++r) {
        w[r] = *reinterpret_cast<const uint4*>(W + (size_t)(rg * BD + r) * K + grp * GS + col);
        s[r] = S[(rg * BD + r) * (K / GS) + grp];
    }
    for (; rg < D / BD; rg += gridDim.x) {
        const int nx = rg + gridDim.x;
        uint4 wn[BD];
        float sn[BD];
        if (nx < D / BD) {
            #pragma unroll
            for (int r = 0; r < BD; ++r) {
                wn[r] = *reinterpret_cast<const uint4*>(W + (size_t)(nx * BD + r) * K + grp * GS + col);
                sn[r] = S[(nx * BD + r) * (K / GS) + grp];
            }
        }
        float acc[BD];
        #pragma unroll
        for (int r = 0; r < BD; ++r) {
            const unsigned ws[4] = {w[r].x ^ 0x80808080u, w[r].y ^ 0x80808080u, w[r].z ^ 0x80808080u, w[r].w ^ 0x80808080u};
            float p = 0.0f;
            #pragma unroll
            for (int q = 0; q < 4; ++q) {
                #pragma unroll
                for (int b = 0; b < 4; ++b) p = fmaf(i8f(ws[q], b), x[q * 4 + b], p);
            }
            acc[r] = p * s[r];
            #pragma unroll
            for (int sh = 16; sh > 0; sh /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], sh);
        }
        if (lane == 0) {
            #pragma unroll
            for (int r = 0; r < BD; ++r) red[r][warp] = acc[r];
        }
        __syncthreads();
        if (tid < BD * 8) {
            float v = red[tid / 8][tid % 8];
            #pragma unroll
            for (int sh = 4; sh > 0; sh /= 2) v += __shfl_xor_sync(0xffffffffu, v, sh);
            if (tid % 8 == 0) Y[rg * BD + tid / 8] = v;
        }
        __syncthreads();
        #pragma unroll
        for (int r = 0; r < BD; ++r) { w[r] = wn[r]; s[r] = sn[r]; }
    }
}

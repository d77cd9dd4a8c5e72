// Hand-written reference point (not generated): decode attention at one position over an f16 KV
// cache, split over the positions (flash-decoding) into NS blocks per head, the partial results
// merged by the head's last block to finish (an atomic counter per head, reset by that block).
// Block (h, s) takes the positions [s * CH, s * CH + CH) with CH = cdiv(cdiv(pos + 1, NS), 64) * 64;
// its 4 warps read two KV rows per load (16 lanes x 16 bytes = one 128-wide f16 row), U row pairs
// per warp issued before any arithmetic (K and V). H = 32, HD = 128, KVD = 4096.
// tkc-launch: {"kernel": "attn_split_last", "grid": [512, 1, 1], "block": [128, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}
#include <cuda_fp16.h>
#ifndef NS
#define NS 16
#endif
#ifndef U
#define U 8
#endif
constexpr int H = 32, HD = 128, KVD = 4096, GQ = H * HD / KVD, ROWS = 8 * U;  // rows per block trip

extern "C" __global__ void __launch_bounds__(128) attn_split_last(
        const float* __restrict__ Q, const __half* __restrict__ KC, const __half* __restrict__ VC,
        float* __restrict__ Wm, float* __restrict__ Wl, float* __restrict__ Wacc, int* __restrict__ count,
        float* __restrict__ O, const int pos) {
    __shared__ float sm[4], sl[4], sacc[4][HD];
    __shared__ int last;
    const int h = blockIdx.x / NS, s = blockIdx.x % NS;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, half = lane / 16, c8 = lane % 16 * 8;
    const int kvcol = h / GQ * HD + c8;
    const int n = pos + 1;
    const int CH = ((n + NS - 1) / NS + ROWS - 1) / ROWS * ROWS;
    const int t0 = s * CH, t1 = min(n, t0 + CH);
    float q[8];
    {
        const float4 a = *reinterpret_cast<const float4*>(Q + h * HD + c8);
        const float4 b = *reinterpret_cast<const float4*>(Q + h * HD + c8 + 4);
        const float sc = rsqrtf(static_cast<float>(HD));
        q[0] = a.x * sc; q[1] = a.y * sc; q[2] = a.z * sc; q[3] = a.w * sc;
        q[4] = b.x * sc; q[5] = b.y * sc; q[6] = b.z * sc; q[7] = b.w * sc;
    }
    float m = -1e30f, l = 0.0f, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int base = t0; base < t1; base += ROWS) {
        uint4 k[U], v[U];
        #pragma unroll
        for (int j = 0; j < U; ++j) {
            const int t = base + (j * 4 + warp) * 2 + half;
            if (t < t1) {
                k[j] = *reinterpret_cast<const uint4*>(KC + (size_t)t * KVD + kvcol);
                v[j] = *reinterpret_cast<const uint4*>(VC + (size_t)t * KVD + kvcol);
            } else {
                k[j] = make_uint4(0, 0, 0, 0);
                v[j] = make_uint4(0, 0, 0, 0);
            }
        }
        float sc[U];
        float mx = m;
        #pragma unroll
        for (int j = 0; j < U; ++j) {
            const __half2* kh = reinterpret_cast<const __half2*>(&k[j]);
            float d = 0.0f;
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 f = __half22float2(kh[e]);
                d = fmaf(q[2 * e], f.x, d);
                d = fmaf(q[2 * e + 1], f.y, d);
            }
            #pragma unroll
            for (int sh = 8; sh > 0; sh /= 2) d += __shfl_xor_sync(0xffffffffu, d, sh);
            const int t = base + (j * 4 + warp) * 2 + half;
            sc[j] = t < t1 ? d : -1e30f;
            mx = fmaxf(mx, sc[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));  // both halves' rows
        const float corr = __expf(m - mx);
        l *= corr;
        #pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= corr;
        #pragma unroll
        for (int j = 0; j < U; ++j) {
            const float p = __expf(sc[j] - mx);
            l += p;  // this half's rows; the halves are summed below
            const __half2* vh = reinterpret_cast<const __half2*>(&v[j]);
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float2 f = __half22float2(vh[e]);
                acc[2 * e] = fmaf(p, f.x, acc[2 * e]);
                acc[2 * e + 1] = fmaf(p, f.y, acc[2 * e + 1]);
            }
        }
        m = mx;
    }
    // the two halves of the warp hold different rows with the same m: sum them
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    #pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 16);
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
    if (half == 0) {
        #pragma unroll
        for (int e = 0; e < 8; ++e) sacc[warp][c8 + e] = acc[e];
    }
    __syncthreads();
    {  // the block's partial: thread tid owns column tid
        float M = fmaxf(fmaxf(sm[0], sm[1]), fmaxf(sm[2], sm[3]));
        float den = 0.0f, num = 0.0f;
        #pragma unroll
        for (int w = 0; w < 4; ++w) {
            const float a = __expf(sm[w] - M);
            den += sl[w] * a;
            num += sacc[w][tid] * a;
        }
        Wacc[blockIdx.x * HD + tid] = num;
        if (tid == 0) { Wm[blockIdx.x] = M; Wl[blockIdx.x] = den; }
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&count[h], 1) == NS - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    float M = -1e30f;
    #pragma unroll
    for (int k2 = 0; k2 < NS; ++k2) M = fmaxf(M, __ldcg(&Wm[h * NS + k2]));
    float den = 0.0f, num = 0.0f;
    #pragma unroll
    for (int k2 = 0; k2 < NS; ++k2) {
        const float a = __expf(__ldcg(&Wm[h * NS + k2]) - M);
        den += __ldcg(&Wl[h * NS + k2]) * a;
        num += __ldcg(&Wacc[(h * NS + k2) * HD + tid]) * a;
    }
    O[h * HD + tid] = num / den;
    if (tid == 0) count[h] = 0;
}

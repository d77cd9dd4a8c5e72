// Hand-written reference point (not generated): the bandwidth ceiling of decode attention's bytes
// at this size in one launch: every block reads its share of the K and V rows 0..pos (16 bytes
// per thread per load, U loads in flight) and writes one sum per block, nothing else.
// tkc-launch: {"kernel": "kv_read", "grid": [512, 1, 1], "block": [128, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}
#include <cuda_fp16.h>
#ifndef U
#define U 8
#endif
constexpr int KVD = 4096;
extern "C" __global__ void __launch_bounds__(128) kv_read(const __half* __restrict__ KC, const __half* __restrict__ VC,
                                                          float* __restrict__ out, const int pos) {
    const size_t words = (size_t)(pos + 1) * KVD / 8;  // 16-byte words per cache
    const uint4* k = reinterpret_cast<const uint4*>(KC);
    const uint4* v = reinterpret_cast<const uint4*>(VC);
    unsigned x = 0;
    for (size_t i = (size_t)blockIdx.x * 128 * U + threadIdx.x; i < words; i += (size_t)gridDim.x * 128 * U) {
        uint4 a[U], b[U];
        #pragma unroll
        for (int j = 0; j < U; ++j) {
            const size_t w = i + j * 128;
            a[j] = w < words ? k[w] : make_uint4(0, 0, 0, 0);
            b[j] = w < words ? v[w] : make_uint4(0, 0, 0, 0);
        }
        #pragma unroll
        for (int j = 0; j < U; ++j) x ^= a[j].x ^ a[j].y ^ a[j].z ^ a[j].w ^ b[j].x ^ b[j].y ^ b[j].z ^ b[j].w;
    }
    if (x == 0x12345678u) out[blockIdx.x] = static_cast<float>(x);  // keeps the loads
}

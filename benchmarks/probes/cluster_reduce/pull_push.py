"""Handwritten cluster-reduce variants (experiment, not shipped): writes v_*.cu with tkc-launch headers."""
import json
B, N = 2112, 16384

HEAD = r'''#include <cuda_fp16.h>
#include <cstdint>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wait_() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ uint4 add8(uint4 a, uint4 b) {
  uint4 o; const __half2* x = (const __half2*)&a; const __half2* y = (const __half2*)&b; __half2* z = (__half2*)&o;
  #pragma unroll
  for (int i = 0; i < 4; ++i) { float2 fx = __half22float2(x[i]), fy = __half22float2(y[i]); z[i] = __floats2half2_rn(fx.x + fy.x, fx.y + fy.y); }
  return o;
}
'''

def kernel(name, T, body, smem):
    it = N // (8 * T)
    launch = {"kernel": name, "grid": [B, 1, 1], "block": [T, 1, 1], "cluster": [2, 1, 1], "smem_bytes": smem}
    src = f"// tkc-launch: {json.dumps(launch)}\n" + HEAD + f'''
constexpr int T = {T}, IT = {it}, N = {N};
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__({T}) {name}(const __half* __restrict__ X, __half* __restrict__ Y) {{
  const int b = blockIdx.x, r = b % 2, tid = threadIdx.x;
  extern __shared__ __align__(128) unsigned char smem[];
  uint4* S = reinterpret_cast<uint4*>(smem);
  const uint4* Xv = reinterpret_cast<const uint4*>(X + (size_t)b * N);
  uint4* Yv = reinterpret_cast<uint4*>(Y + (size_t)b * N);
  uint4* Yp = reinterpret_cast<uint4*>(Y + (size_t)(b ^ 1) * N);
  uint4 v[IT];
  #pragma unroll
  for (int i = 0; i < IT; ++i) v[i] = {"__ldcs(&Xv[i * T + tid])" if "_cs_" in name else "Xv[i * T + tid]"};
{body}
}}
'''
    open(f"v_{name}.cu", "w").write(src)

for T in (256, 512):
    it = N // (8 * T)
    # pull, split exit barrier, own data from registers
    kernel(f"pull_split_{T}", T, '''
  #pragma unroll
  for (int i = 0; i < IT; ++i) S[i * T + tid] = v[i];
  cg::this_cluster().sync();
  const uint4* P = reinterpret_cast<const uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  uint4 p[IT];
  #pragma unroll
  for (int i = 0; i < IT; ++i) p[i] = P[i * T + tid];
  arrive();
  #pragma unroll
  for (int i = 0; i < IT; ++i) Yv[i * T + tid] = add8(v[i], p[i]);
  wait_();''', N * 2)
    # pull, full exit barrier (like tkc today, registers kept)
    kernel(f"pull_sync_{T}", T, '''
  #pragma unroll
  for (int i = 0; i < IT; ++i) S[i * T + tid] = v[i];
  cg::this_cluster().sync();
  const uint4* P = reinterpret_cast<const uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  uint4 p[IT];
  #pragma unroll
  for (int i = 0; i < IT; ++i) p[i] = P[i * T + tid];
  #pragma unroll
  for (int i = 0; i < IT; ++i) Yv[i * T + tid] = add8(v[i], p[i]);
  cg::this_cluster().sync();''', N * 2)
    # push: write own row into the peer's buffer, one barrier
    kernel(f"push_{T}", T, '''
  uint4* P = reinterpret_cast<uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  #pragma unroll
  for (int i = 0; i < IT; ++i) P[i * T + tid] = v[i];
  cg::this_cluster().sync();
  #pragma unroll
  for (int i = 0; i < IT; ++i) Yv[i * T + tid] = add8(v[i], S[i * T + tid]);''', N * 2)
    # push half: peer computes half (1-r); send it those chunks; write both rows for own half
    kernel(f"push_half_{T}", T, '''
  uint4* P = reinterpret_cast<uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  #pragma unroll
  for (int i = 0; i < IT / 2; ++i) P[i * T + tid] = r ? v[i] : v[IT / 2 + i];
  cg::this_cluster().sync();
  #pragma unroll
  for (int i = 0; i < IT / 2; ++i) {
    const int c = (r * (IT / 2) + i) * T + tid;
    const uint4 o = add8(r ? v[IT / 2 + i] : v[i], S[i * T + tid]);
    Yv[c] = o; Yp[c] = o;
  }''', N)
    # pull half with split barrier
    kernel(f"pull_half_{T}", T, '''
  #pragma unroll
  for (int i = 0; i < IT; ++i) S[i * T + tid] = v[i];
  cg::this_cluster().sync();
  const uint4* P = reinterpret_cast<const uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  uint4 p[IT / 2];
  #pragma unroll
  for (int i = 0; i < IT / 2; ++i) p[i] = P[(r * (IT / 2) + i) * T + tid];
  arrive();
  #pragma unroll
  for (int i = 0; i < IT / 2; ++i) {
    const int c = (r * (IT / 2) + i) * T + tid;
    const uint4 o = add8(r ? v[IT / 2 + i] : v[i], p[i]);
    Yv[c] = o; Yp[c] = o;
  }
  wait_();''', N * 2)
for T in (256, 512):
    it = N // (8 * T)
    kernel(f"push_half_cs_{T}", T, '''
  uint4* P = reinterpret_cast<uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  #pragma unroll
  for (int i = 0; i < IT / 2; ++i) P[i * T + tid] = r ? v[i] : v[IT / 2 + i];
  cg::this_cluster().sync();
  #pragma unroll
  for (int i = 0; i < IT / 2; ++i) {
    const int c = (r * (IT / 2) + i) * T + tid;
    const uint4 o = add8(r ? v[IT / 2 + i] : v[i], S[i * T + tid]);
    __stcs(&Yv[c], o); __stcs(&Yp[c], o);
  }''', N)
# a plain copy with the same shape (no cluster work): Y = X
launch = {"kernel": "copy_512", "grid": [B, 1, 1], "block": [512, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}
open("v_copy_512.cu", "w").write(f"// tkc-launch: {json.dumps(launch)}\n" + HEAD + '''
extern "C" __global__ void __launch_bounds__(512) copy_512(const __half* __restrict__ X, __half* __restrict__ Y) {
  const uint4* Xv = reinterpret_cast<const uint4*>(X + (size_t)blockIdx.x * 16384);
  uint4* Yv = reinterpret_cast<uint4*>(Y + (size_t)blockIdx.x * 16384);
  uint4 v[4];
  #pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = Xv[i * 512 + threadIdx.x];
  #pragma unroll
  for (int i = 0; i < 4; ++i) Yv[i * 512 + threadIdx.x] = v[i];
}
''')

open("v_copy_cs_512.cu", "w").write(f"// tkc-launch: {json.dumps(dict(launch, kernel='copy_cs_512'))}\n" + HEAD + '''
extern "C" __global__ void __launch_bounds__(512) copy_cs_512(const __half* __restrict__ X, __half* __restrict__ Y) {
  const uint4* Xv = reinterpret_cast<const uint4*>(X + (size_t)blockIdx.x * 16384);
  uint4* Yv = reinterpret_cast<uint4*>(Y + (size_t)blockIdx.x * 16384);
  uint4 v[4];
  #pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __ldcs(&Xv[i * 512 + threadIdx.x]);
  #pragma unroll
  for (int i = 0; i < 4; ++i) __stcs(&Yv[i * 512 + threadIdx.x], v[i]);
}
''')

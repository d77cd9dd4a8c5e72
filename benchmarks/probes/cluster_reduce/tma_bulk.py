"""TMA bulk-copy variants (experiment): copy, multicast full, split half."""
import json
B, N = 2112, 16384
ROW = N * 2  # bytes per row

HEAD = r'''#include <cuda_fp16.h>
#include <cstdint>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ __forceinline__ unsigned sa(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned mapa(unsigned a, unsigned rank) { unsigned r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank)); return r; }
__device__ __forceinline__ void mbar_init(unsigned a, unsigned n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(a), "r"(n) : "memory"); }
__device__ __forceinline__ void mbar_expect(unsigned a, unsigned tx) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(a), "r"(tx) : "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned a, unsigned parity) {
  asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra W;\n}" :: "r"(a), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned mbar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" :: "r"(dst), "l"(src), "r"(bytes), "r"(mbar) : "memory");
}
__device__ __forceinline__ void bulk_load_mc(unsigned dst, const void* src, unsigned bytes, unsigned mbar, unsigned short mask) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" :: "r"(dst), "l"(src), "r"(bytes), "r"(mbar), "h"(mask) : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, unsigned src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wait_() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ uint4 add8(uint4 a, uint4 b) {
  uint4 o; const __half2* x = (const __half2*)&a; const __half2* y = (const __half2*)&b; __half2* z = (__half2*)&o;
  #pragma unroll
  for (int i = 0; i < 4; ++i) { float2 fx = __half22float2(x[i]), fy = __half22float2(y[i]); z[i] = __floats2half2_rn(fx.x + fy.x, fx.y + fy.y); }
  return o;
}
'''

def write(name, T, cluster, smem, body):
    launch = {"kernel": name, "grid": [B, 1, 1], "block": [T, 1, 1], "cluster": [cluster, 1, 1], "smem_bytes": smem}
    cd = f"__cluster_dims__({cluster}, 1, 1) " if cluster > 1 else ""
    open(f"w_{name}.cu", "w").write(f"// tkc-launch: {json.dumps(launch)}\n" + HEAD + f'''
constexpr int T = {T}, N = {N}, ROW = {ROW};
extern "C" __global__ void {cd}__launch_bounds__({T}) {name}(const __half* __restrict__ X, __half* __restrict__ Y) {{
  const int b = blockIdx.x, tid = threadIdx.x;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long mbar[8];
{body}
}}
''')

for T in (256, 512):
  for C in (1, 4):
    CH = ROW // C
    # TMA copy: bulk load row -> smem (C chunks), bulk store back
    write(f"copy_tma_{T}_c{C}", T, 1, ROW, f'''
  if (tid == 0) {{
    for (int c = 0; c < {C}; ++c) {{ mbar_init(sa(&mbar[c]), 1); }}
    fence_init();
    for (int c = 0; c < {C}; ++c) {{ mbar_expect(sa(&mbar[c]), {CH}); bulk_load(sa(smem + c * {CH}), (const char*)X + (size_t)b * ROW + c * {CH}, {CH}, sa(&mbar[c])); }}
  }}
  if (tid == 0) {{
    for (int c = 0; c < {C}; ++c) {{ mbar_wait(sa(&mbar[c]), 0); bulk_store((char*)Y + (size_t)b * ROW + c * {CH}, sa(smem + c * {CH}), {CH}); bulk_commit(); }}
    bulk_wait_read();
  }}''')
    # multicast full: both rows in both blocks (2 x ROW smem), sum own row, st.global
    IT = N // (8 * T)
    write(f"mc_{T}_c{C}", T, 2, 2 * ROW, f'''
  const unsigned r = b % 2;
  if (tid == 0) {{
    for (int c = 0; c < {C}; ++c) mbar_init(sa(&mbar[c]), 1);
    fence_init();
  }}
  cg::this_cluster().sync();
  if (tid == 0) {{
    for (int c = 0; c < {C}; ++c) {{
      mbar_expect(sa(&mbar[c]), 2 * {CH});
      bulk_load_mc(sa(smem + r * ROW + c * {CH}), (const char*)X + (size_t)b * ROW + c * {CH}, {CH}, sa(&mbar[c]), 3);
    }}
  }}
  const uint4* S0 = reinterpret_cast<const uint4*>(smem);
  const uint4* S1 = reinterpret_cast<const uint4*>(smem + ROW);
  uint4* Yv = reinterpret_cast<uint4*>(Y + (size_t)b * N);
  #pragma unroll
  for (int c = 0; c < {C}; ++c) {{
    mbar_wait(sa(&mbar[c]), 0);
    #pragma unroll
    for (int i = c * {IT // C}; i < (c + 1) * {IT // C}; ++i) Yv[i * T + tid] = add8(S0[i * T + tid], S1[i * T + tid]);
  }}
  arrive_relaxed(); wait_();''')
    # split half: own half r -> own smem, half 1-r -> peer smem; both get the two copies of half r
    if (IT // 2) % C:
        continue
    HALF = ROW // 2
    CH2 = HALF // C
    write(f"half_{T}_c{C}", T, 2, ROW, f'''
  const unsigned r = b % 2;
  if (tid == 0) {{
    for (int c = 0; c < {C}; ++c) mbar_init(sa(&mbar[c]), 1);
    fence_init();
  }}
  cg::this_cluster().sync();
  if (tid == 0) {{
    for (int c = 0; c < {C}; ++c) {{
      mbar_expect(sa(&mbar[c]), 2 * {CH2});
      // my half r -> my slot r; my half 1-r -> peer's slot r (slot = which block it came from)
      bulk_load(sa(smem + r * {HALF} + c * {CH2}), (const char*)X + (size_t)b * ROW + r * {HALF} + c * {CH2}, {CH2}, sa(&mbar[c]));
      bulk_load(mapa(sa(smem + r * {HALF} + c * {CH2}), r ^ 1), (const char*)X + (size_t)b * ROW + (r ^ 1) * {HALF} + c * {CH2}, {CH2}, mapa(sa(&mbar[c]), r ^ 1));
    }}
  }}
  const uint4* S0 = reinterpret_cast<const uint4*>(smem);
  const uint4* S1 = reinterpret_cast<const uint4*>(smem + {HALF});
  uint4* Ya = reinterpret_cast<uint4*>(Y + (size_t)b * N + r * (N / 2));
  uint4* Yb = reinterpret_cast<uint4*>(Y + (size_t)(b ^ 1) * N + r * (N / 2));
  #pragma unroll
  for (int c = 0; c < {C}; ++c) {{
    mbar_wait(sa(&mbar[c]), 0);
    #pragma unroll
    for (int i = c * {IT // 2 // C}; i < (c + 1) * {IT // 2 // C}; ++i) {{ const uint4 o = add8(S0[i * T + tid], S1[i * T + tid]); Ya[i * T + tid] = o; Yb[i * T + tid] = o; }}
  }}
  arrive_relaxed(); wait_();''')

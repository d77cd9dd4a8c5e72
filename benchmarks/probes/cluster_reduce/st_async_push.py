"""Push-half with st.async + mbarrier (no data cluster barrier), experiment."""
import json
import os
B, N = 2112, 16384
H = N // 2
HEAD = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tma_bulk.py")).read().split("HEAD = r'''")[1].split("'''")[0]
# "half": X loaded through const __restrict__ (ld.global.nc, which ptxas sinks below the barrier
# wait); "plain": a plain pointer, so the loads stay ahead of the barrier (see README.md).
FORMS = {"half": ("const __half* __restrict__ X", "wait_();"),
         "plain": ("const __half* X", 'asm volatile("barrier.cluster.wait.aligned;" ::: "memory");')}
for (form, (x_param, wait)), T in [(f, T) for f in FORMS.items() for T in (256, 512, 1024)]:
    IT = H // (8 * T)  # 16-byte chunks per thread per half
    name = f"async_{form}_{T}"
    launch = {"kernel": name, "grid": [B, 1, 1], "block": [T, 1, 1], "cluster": [2, 1, 1], "smem_bytes": H * 2}
    src = f"// tkc-launch: {json.dumps(launch)}\n" + HEAD + f'''
__device__ __forceinline__ void st_async(unsigned addr, uint4 v, unsigned mbar) {{
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {{%1, %2, %3, %4}}, [%5];"
               :: "r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(mbar) : "memory");
}}
constexpr int T = {T}, IT = {IT}, N = {N}, H = {H};
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__({T}) {name}({x_param}, __half* __restrict__ Y) {{
  const int b = blockIdx.x, tid = threadIdx.x;
  const unsigned r = b % 2;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) unsigned long long mbar;
  if (tid == 0) {{ mbar_init(sa(&mbar), 1); fence_init(); mbar_expect(sa(&mbar), H * 2); }}
  arrive();  // the peer may signal our mbarrier only after it is initialized
  const uint4* Xv = reinterpret_cast<const uint4*>(X + (size_t)b * N);
  uint4 mine[IT], theirs[IT];
  #pragma unroll
  for (int i = 0; i < IT; ++i) {{ mine[i] = Xv[r * (H / 8) + i * T + tid]; theirs[i] = Xv[(r ^ 1) * (H / 8) + i * T + tid]; }}
  {wait}
  const unsigned peer_p = mapa(sa(smem), r ^ 1), peer_bar = mapa(sa(&mbar), r ^ 1);
  #pragma unroll
  for (int i = 0; i < IT; ++i) st_async(peer_p + (i * T + tid) * 16, theirs[i], peer_bar);
  mbar_wait(sa(&mbar), 0);
  const uint4* P = reinterpret_cast<const uint4*>(smem);
  uint4* Ya = reinterpret_cast<uint4*>(Y + (size_t)b * N + r * H);
  uint4* Yb = reinterpret_cast<uint4*>(Y + (size_t)(b ^ 1) * N + r * H);
  #pragma unroll
  for (int i = 0; i < IT; ++i) {{ const uint4 o = add8(mine[i], P[i * T + tid]); Ya[i * T + tid] = o; Yb[i * T + tid] = o; }}
}}
'''
    open(f"y_{name}.cu", "w").write(src)

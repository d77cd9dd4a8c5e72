"""Push-half with a split cluster barrier: arrive after the remote stores, own-half loads, wait."""
import json
import os
B, N = 2112, 16384
H = N // 2
HEAD = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tma_bulk.py")).read().split("HEAD = r'''")[1].split("'''")[0]
for T in (256, 512, 1024):
  for order in ("split", "splitfirst"):
    IT = H // (8 * T)
    name = f"{order}_half_{T}"
    launch = {"kernel": name, "grid": [B, 1, 1], "block": [T, 1, 1], "cluster": [2, 1, 1], "smem_bytes": H * 2}
    first = "mine[i] = Xv[r * (H / 8) + i * T + tid];" if order == "splitfirst" else ""
    later = "" if order == "splitfirst" else "mine[i] = Xv[r * (H / 8) + i * T + tid];"
    src = f"// tkc-launch: {json.dumps(launch)}\n" + HEAD + f'''
constexpr int T = {T}, IT = {IT}, N = {N}, H = {H};
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__({T}) {name}(const __half* __restrict__ X, __half* __restrict__ Y) {{
  const int b = blockIdx.x, tid = threadIdx.x;
  const unsigned r = b % 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint4* Xv = reinterpret_cast<const uint4*>(X + (size_t)b * N);
  uint4 mine[IT], theirs[IT];
  #pragma unroll
  for (int i = 0; i < IT; ++i) {{ theirs[i] = Xv[(r ^ 1) * (H / 8) + i * T + tid]; {first} }}
  uint4* peer = reinterpret_cast<uint4*>(cg::this_cluster().map_shared_rank((void*)smem, r ^ 1));
  #pragma unroll
  for (int i = 0; i < IT; ++i) peer[i * T + tid] = theirs[i];
  arrive();
  #pragma unroll
  for (int i = 0; i < IT; ++i) {{ {later} }}
  wait_();
  const uint4* P = reinterpret_cast<const uint4*>(smem);
  uint4* Ya = reinterpret_cast<uint4*>(Y + (size_t)b * N + r * H);
  uint4* Yb = reinterpret_cast<uint4*>(Y + (size_t)(b ^ 1) * N + r * H);
  #pragma unroll
  for (int i = 0; i < IT; ++i) {{ const uint4 o = add8(mine[i], P[i * T + tid]); Ya[i * T + tid] = o; Yb[i * T + tid] = o; }}
}}
'''
    open(f"y_{name}.cu", "w").write(src)

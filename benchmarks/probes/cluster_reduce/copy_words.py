"""Copy-kernel configuration sweep (experiment): threads T, 16-byte words per thread W."""
import json
import os
TOTAL = 2112 * 16384 * 2  # bytes per direction
HEAD = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tma_bulk.py")).read().split("HEAD = r'''")[1].split("'''")[0]
for T in (128, 256, 512, 1024):
    for W in (1, 2, 4, 8):
        grid = TOTAL // (T * W * 16)
        name = f"cp_{T}_{W}"
        launch = {"kernel": name, "grid": [grid, 1, 1], "block": [T, 1, 1], "cluster": [1, 1, 1], "smem_bytes": 0}
        open(f"c_{name}.cu", "w").write(f"// tkc-launch: {json.dumps(launch)}\n" + HEAD + f'''
extern "C" __global__ void __launch_bounds__({T}) {name}(const __half* __restrict__ X, __half* __restrict__ Y) {{
  const uint4* Xv = reinterpret_cast<const uint4*>(X) + (size_t)blockIdx.x * {T * W};
  uint4* Yv = reinterpret_cast<uint4*>(Y) + (size_t)blockIdx.x * {T * W};
  uint4 v[{W}];
  #pragma unroll
  for (int i = 0; i < {W}; ++i) v[i] = Xv[i * {T} + threadIdx.x];
  #pragma unroll
  for (int i = 0; i < {W}; ++i) Yv[i * {T} + threadIdx.x] = v[i];
}}
''')

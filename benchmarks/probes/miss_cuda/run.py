"""Time hand-edited variants of miss.tk's generated CUDA (probes, not shipped). On the device
machine, from the repository root: `python3 benchmarks/probes/miss_cuda/run.py DIR` times every
DIR/m16384_u*.cu (K=4096, N=4096, R=64; `tkc compile --target cuda -D M=16384 ... -o` then edit)
against torch eager, with the relative error of each."""
import glob, os, sys, statistics
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import torch
import miss
from tkc.cuda_runtime import CudaLaunch
timer = miss.Timer(False, 25, 200)
K, N, R = 4096, 4096, 64
print(f"{'variant':16s} {'us':>8s} {'relerr':>9s}")
for M in (16384,):
    nsets = 2 if M == 16384 else 4
    sets = [(torch.randn(M, K, device="cuda").half(), torch.randn(R, N, device="cuda").half() / 8,
             torch.empty(M, N, device="cuda", dtype=torch.half)) for _ in range(nsets)]
    ref = (torch.sum(sets[0][0].float().reshape(M, -1, R), dim=-2).half().float() @ sets[0][1].float())
    tt = timer(miss.rotating(lambda a, b, c: torch.matmul(torch.sum(a.reshape(M, -1, R), dim=-2), b, out=c), sets))
    print(f"eager M{M:<6d}  {tt * 1e3:8.1f}")
    for path in sorted(glob.glob(os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".device/exp2", f"m{M}_u*.cu"))):
        k = CudaLaunch(path, open(path).read())
        a, b, c = sets[0]
        c.fill_(float("nan")); k(a, b, c); torch.cuda.synchronize()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        ts = [timer(miss.rotating(k, sets)) for _ in range(3)]
        print(f"{os.path.basename(path)[:-3]:16s} {statistics.median(ts) * 1e3:8.1f} {err:9.2e}  ({min(ts)*1e3:.1f}-{max(ts)*1e3:.1f})")

"""Time hand-written cluster-reduce kernels (probes, not shipped). On the device machine, from the
repository root: `python3 benchmarks/probes/cluster_reduce/run.py DIR [NAME-FILTER ...]` times every
DIR/[cvwxy]*.cu (each with a `// tkc-launch:` header, launched through tkc.cuda_runtime) on
2112 blocks x 16384 f16 (1056 2-block clusters), checks it against torch, and prints a table.
The generator scripts (every other .py here but ab.py, sweep.py and ncu_launch.py) write the .cu files into the current directory; see README.md."""
import glob, os, sys, statistics
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import torch
import miss
from tkc.cuda_runtime import CudaLaunch

B, N = 2112, 16384
timer = miss.Timer(False, 25, 200)
dev = "cuda"
cb = miss.copy_bandwidth(timer, dev, 2 * B * N * 2)
print("copy", cb)
for mib in (66, 132, 1024):
    print("torch copy", mib, "MiB each way:", miss.copy_bandwidth(timer, dev, mib * 2**20))
sets = [(torch.randn(B, N, device=dev).half(), torch.empty(B, N, device=dev, dtype=torch.half)) for _ in range(4)]
nbytes = 2 * B * N * 2
for rep in range(2):
    t = timer(miss.rotating(lambda X, Y: Y.copy_(X), sets))
    print(f"torch copy rotated over {len(sets)} sets: {t * 1e3:.1f} us ({nbytes / t / 1e9:.2f} TB/s)")
rows = []
folder = sys.argv[1] if len(sys.argv) > 1 else ".device/exp"
only = sys.argv[2:]
for path in sorted(glob.glob(os.path.join(folder, "[cvwxy]*.cu"))):
    name = os.path.basename(path)[:-3]
    if only and not any(o in name for o in only):
        continue
    k = CudaLaunch(path, open(path).read())
    if "_cv" in name:
        fn = k.function(0)
        fn.preferred_shared_memory_carveout = int(name.split("_cv")[1])
    err = 0.0
    for X, Y in sets[:2]:
        Y.fill_(float("nan")); k(X, Y); torch.cuda.synchronize()
        ref = X if ("copy" in name or name.startswith("c_"))  else (X.float() + X.view(-1, 2, N).flip(1).reshape(B, N).float()).half()
        if "_S1" in name:
            ref = torch.relu(ref.float()).half()
        err = max(err, (Y.float() - ref.float()).abs().max().item())
    ts = []
    for rep in range(3):
        ts.append(timer(miss.rotating(k, sets)))
    t = statistics.median(ts)
    rows.append((name, t * 1e3, nbytes / t / 1e9, err, min(ts) * 1e3, max(ts) * 1e3))
print(f"{'variant':24s} {'us':>8s} {'TB/s':>6s} {'%copy':>6s} {'maxerr':>8s} {'min':>7s} {'max':>7s}")
for n, us, tb, err, lo, hi in rows:
    print(f"{n:24s} {us:8.1f} {tb:6.2f} {100 * tb / cb['tbps']:6.1f} {err:8.3g} {lo:7.1f} {hi:7.1f}")

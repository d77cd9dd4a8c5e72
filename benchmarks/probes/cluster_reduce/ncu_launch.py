"""Launch the cluster-reduce examples (CUDA backend, LINEAR, 1056 clusters) a few times each, for
Nsight Compute. On the device machine, from the repository root:
  ncu --clock-control none --kernel-name regex:cluster_reduce --launch-skip 2 --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      python3 benchmarks/probes/cluster_reduce/ncu_launch.py hbm dsmem
(`--clock-control none`: leave the GPU's clocks as they are.)"""
import sys
sys.path.insert(0, ".")
import torch
import tkc

B, N = 2112, 16384
for spec in sys.argv[1:] or ["hbm", "dsmem"]:
    stem, _, consts = spec.partition(":")
    kw = {k: int(v) for k, v in (c.split("=") for c in consts.split(";") if c)}
    k = tkc.compile(f"examples/cluster_reduce_{stem}.tk", target="cuda", STAGE=0, **kw)
    for i in range(4):
        X = torch.randn(B, N, device="cuda").half()
        k(X)
    torch.cuda.synchronize()
    print(spec, "done", flush=True)

"""Time the cluster-reduce examples (CUDA backend, LINEAR) at cluster counts around 1056, to see
whether the time per cluster steps at a wave boundary. On the device machine, from the repository
root: `python3 benchmarks/probes/cluster_reduce/sweep.py [STEM[:CONSTS][@TARGET] ...]`, e.g.
`dsmem hbm dsmem:threads=128 dsmem@tilelang` (default target cuda; COUNTS=... sets the counts)."""
import os, statistics, sys
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import torch
import miss
import tkc

N = 16384
COUNTS = [int(c) for c in os.environ.get("COUNTS", "960,1008,1040,1056,1072,1104,1152").split(",")]
timer = miss.Timer(False, 25, 150)
names = sys.argv[1:] or ["hbm", "dsmem"]
kernels = {}
for spec in names:
    body, _, target = spec.partition("@")
    stem, _, consts = body.partition(":")
    kw = {k: int(v) for k, v in (c.split("=") for c in consts.split(";") if c)}
    kernels[spec] = tkc.compile(f"examples/cluster_reduce_{stem}.tk", target=target or "cuda", STAGE=0, **kw)
fits = {}
print(f"{'clusters':>8s} " + " ".join(f"{n:>22s}" for n in names))
for c in COUNTS:
    B = 2 * c
    sets = [(torch.randn(B, N, device="cuda").half(),) for _ in range(max(2, (200 << 20) // (B * N * 2)))]
    cols = []
    for spec, k in kernels.items():
        ts = [timer(miss.rotating(k, sets)) for _ in range(3)]
        us = statistics.median(ts) * 1e3
        cols.append(f"{us:8.1f} us {us / c * 1000:7.1f} ns/cl")
    print(f"{c:8d} " + " ".join(f"{x:>22s}" for x in cols), flush=True)
    for spec, col in zip(kernels, cols):
        fits.setdefault(spec, []).append((c, float(col.split()[0])))
print("least-squares fit, time = intercept + slope x clusters:")
for spec, pts in fits.items():
    n = len(pts)
    mx = sum(c for c, _ in pts) / n
    my = sum(t for _, t in pts) / n
    slope = sum((c - mx) * (t - my) for c, t in pts) / sum((c - mx) ** 2 for c, _ in pts)
    resid = max(abs(t - (my + slope * (c - mx))) for c, t in pts)
    print(f"  {spec:22s} intercept {my - slope * mx:6.2f} us  slope {slope * 1e3:6.2f} ns/cluster  max residual {resid:.2f} us")

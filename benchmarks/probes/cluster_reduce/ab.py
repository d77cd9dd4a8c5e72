"""Interleaved A/B timing of hand-written or compiled cluster-reduce kernels (probe, not shipped).
On the device machine, from the repository root:
`python3 benchmarks/probes/cluster_reduce/ab.py DIR BASELINE [ROUNDS]` times every DIR/[xy]*.cu
(each with a `// tkc-launch:` header) on 2112 blocks x 16384 f16 (1056 two-block clusters), after
checking it against torch. Each round times every kernel once, in a fresh random order, two ways:
do_bench (events around each launch, L2 flushed, median of 100 ms of launches) and a CUDA graph of
40 back-to-back launches over 4 rotating input sets (time per launch, launch gaps hidden). It then
prints, per kernel, the median over rounds and the paired difference to BASELINE (mean and a 95%
interval over rounds), so a difference can be told from run-to-run noise. Session 4, 2026-11-21."""
import glob, os, random, statistics, sys
sys.path.insert(0, "benchmarks"); sys.path.insert(0, ".")
import torch
import miss
from tkc.cuda_runtime import CudaLaunch

B, N = 2112, 16384
folder, base = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 12
timer = miss.Timer(False, 25, 100)
sets = [(torch.randn(B, N, device="cuda").half(), torch.empty(B, N, device="cuda", dtype=torch.half)) for _ in range(4)]
kernels = {}
for path in sorted(glob.glob(os.path.join(folder, "[xy]*.cu"))):
    name = os.path.basename(path)[:-3]
    k = CudaLaunch(path, open(path).read())
    wrong = 0
    for X, Y in sets * 3:
        Y.fill_(float("nan")); k(X, Y); torch.cuda.synchronize()
        ref = (X.float() + X.view(-1, 2, N).flip(1).reshape(B, N).float()).half()
        wrong += not torch.equal(Y, ref)
    if wrong:  # reported, not timed
        print(f"{name}: WRONG in {wrong} of {len(sets) * 3} runs")
        continue
    kernels[name] = k
kernels["torch_copy"] = lambda X, Y: Y.copy_(X)


def graph_time(fn, n=40):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(4):
            fn(*sets[i % 4])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            fn(*sets[i % 4])
    g.replay(); torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(5):
        e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / n)
    return statistics.median(ts)


res = {n: {"bench": [], "graph": []} for n in kernels}
for r in range(rounds):
    order = list(kernels)
    random.Random(r).shuffle(order)
    for n in order:
        res[n]["bench"].append(timer(miss.rotating(kernels[n], sets)) * 1e3)
        res[n]["graph"].append(graph_time(kernels[n]) * 1e3)


def ci(d):
    m = statistics.mean(d)
    h = 2.0 * statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else float("nan")
    return f"{m:+6.2f} [{m - h:+6.2f}, {m + h:+6.2f}]"


print(f"{rounds} rounds; times in us; diff = kernel - {base} (mean, ~95% interval)")
print(f"{'kernel':16s} {'bench med':>9s} {'diff':>25s} {'graph med':>9s} {'diff':>25s}")
for n in kernels:
    b, g = res[n]["bench"], res[n]["graph"]
    db = [x - y for x, y in zip(b, res[base]["bench"])]
    dg = [x - y for x, y in zip(g, res[base]["graph"])]
    print(f"{n:16s} {statistics.median(b):9.2f} {ci(db):>25s} {statistics.median(g):9.2f} {ci(dg):>25s}")

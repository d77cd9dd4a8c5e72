"""Probe (issue 11): what one `sync grid` (cg::this_grid().sync() under a cooperative launch)
costs on the GPU, against the grid's size.

A kernel of NB blocks of 128 threads that passes R grid barriers and then copies a 4 KiB row;
R = 0 and R = 64, CUDA-graph replays (20 launches per replay, median of 50), programmatic launch
off; (t(64) - t(0)) / 64 is one barrier.
Run on the device machine: `python3 benchmarks/probes/grid_sync/probe.py [--nb 132,264,396]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

KERNEL = """kernel gsync<NB=132, R=0, threads=128>(X: f32[1, N]) -> (Y: f32[1, N])
    where N = 1024
{
    grid (NB) as (b) threads(threads)
    for r in range(R) {
        sync grid
    }
    Y[0 : +1, b * 8 : +8] = X[0 : +1, b * 8 : +8]
}
"""


def graph_us(fn, reps: int = 50, per: int = 20) -> float:
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(per):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nb", default="132,264,396")
    args = p.parse_args(argv)
    import torch

    import tkc

    work = tempfile.mkdtemp()
    path = os.path.join(work, "gsync.tk")
    with open(path, "w", encoding="utf-8") as f:
        f.write(KERNEL)
    x = torch.randn(1, 8 * 1024, device="cuda")
    print(torch.cuda.get_device_name())
    print("| blocks | R = 0 us | R = 64 us | us per barrier |")
    print("|---|---|---|---|")
    for nb in map(int, args.nb.split(",")):
        t = {}
        for r in (0, 64):
            k = tkc.compile(path, target="cuda", cache_dir=work, NB=nb, R=r)
            y = k(x[:, :8 * nb].contiguous())
            assert torch.equal(y, x[:, :8 * nb]), "copy mismatch"
            xs = x[:, :8 * nb].contiguous()
            t[r] = graph_us(lambda: k(xs))
        print(f"| {nb} | {t[0]:.2f} | {t[64]:.2f} | {(t[64] - t[0]) / 64:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Probe (issue 12): where each block of `<kernel>_groups_b` (SDDMM at K = 32 by row groups) spends its time.

Question: at 10000^2 with 5M entries the kernel takes about 33 us as a graph replay, and ncu
shows the SMs active for 86-90% of the elapsed cycles. Is the rest the blocks' imbalance, and
does the plan's cost model (tkc.sparse.row_groups splits a panel's items among its blocks by
16 x (batches + 1) per item) explain it? How long does a block's panel of 160 KB take to load?

The kernel is codegen/cuda_sddmm.py's, as tkc compiles examples/sddmm.tk at K = 32, with three
`%globaltimer` reads added to its source: at the block's start (thread 0), after the panel's
barrier (thread 0) and at each warp's end (atomicMax). It is launched through
tkc.cuda_runtime.CudaLaunch with the plan's RowGroups, 3 warm-up launches, then 5 timed ones
(medians per block). Per block the plan gives its items, batches (16 entries begun), entries
and predicted ldmatrix wavefronts (4 per phase and class multiplicity); per shape it prints the
block durations, the panel loads and the start offsets, then least-squares fits of the
durations on those features (over all shapes, and within each shape).

Per shape it also reports the warps: how far a block's last warp ends behind its warps' mean end,
the SM's idle warp time after the panel, and how much of a warp's end its items' cost explains.
`--out FILE.npz` saves every launch's per-block start, end, panel time, SM (`%smid`) and warp ends
with the plan's spans and features, for analysis off the device.

    source .device/env.sh && python3 benchmarks/probes/sddmm_block_times.py [--out FILE.npz]

Outcome (H200, 2026-11-29): docs/PERFORMANCE.md, "K = 32 row groups: the phases' bank classes"
and "K = 32 row groups: blocks to the panels by D'Hondt; what a timed call adds".
"""

from __future__ import annotations

import os
import sys
import tempfile

import cupy
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from codegen import cuda  # noqa: E402
from tkc import cuda_runtime, driver  # noqa: E402
from tkc import sparse as sp  # noqa: E402

SHAPES = [(10000, 5_000_000, "uniform"), (10000, 5_000_000, "rmat"), (10000, 1_000_000, "rmat"),
          (10000, 1_000_000, "uniform"), (8000, 640_000, "uniform")]
HEAD = 'extern "C" __global__ void __launch_bounds__(1024, 1) sddmm_groups_b'
TIMER = 'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));'


def timed_source(M: int, nnz: int) -> str:
    """The module's source with `<kernel>_groups_b` writing tk_times[2 b], [2 b + 1] (start, end)
    and tk_times[2048 + b] (panel loaded) for block b, in ns."""
    src = cuda.emit(driver.optimize(driver.frontend(os.path.join(ROOT, "examples", "sddmm.tk"),
                                                    {"M": M, "N": M, "K": 32, "NNZ": nnz}), "cuda"))
    i = src.index(HEAD)
    j = src.index("\n    }\n}\n", i) + len("\n    }\n")
    body = src[i:j]
    start = "    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
    ready = "    __syncthreads();\n    const int hi16 = lane >> 4;\n"
    assert start in body and ready in body, "the kernel's source changed: update the probe's anchors"
    body = body.replace(start, start + f"    if (tid == 0) {{ unsigned long long t; {TIMER} tk_times[2 * blockIdx.x] = t; unsigned s; "
                        'asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); tk_times[12288 + blockIdx.x] = s; }\n', 1)
    body = body.replace(ready, "    __syncthreads();\n" + f"    if (tid == 0) {{ unsigned long long t; {TIMER} "
                        "tk_times[2048 + blockIdx.x] = t; }\n    const int hi16 = lane >> 4;\n", 1)
    body += (f"    {{ unsigned long long t; {TIMER} if (lane == 0) {{ atomicMax(&tk_times[2 * blockIdx.x + 1], t); "
             "tk_times[4096 + 32 * blockIdx.x + warp] = t; }}\n")
    return src[:i] + "__device__ unsigned long long tk_times[16384];\n" + body + src[j:]


def plan_arrays(g: sp.RowGroups):
    """(data as int64, blocks [n_blocks, 3], items' counts, where jn starts) of a RowGroups plan."""
    d = g.data.cpu().numpy().astype(np.int64)
    nb, ni = g.n_blocks, g.n_items
    at_items = (3 * nb + 1) & ~1
    return d, d[:3 * nb].reshape(nb, 3), d[at_items:at_items + 2 * ni].reshape(ni, 2)[:, 1], (at_items + 2 * ni + 31) & ~31


def block_features(g: sp.RowGroups) -> np.ndarray:
    """[blocks, 4]: items, batches, entries and predicted ldmatrix wavefronts per block."""
    d, blocks, count, at = plan_arrays(g)
    ni = g.n_items
    jn = d[at:at + 128 * ni].reshape(ni, 2, 16, 4).transpose(0, 1, 3, 2).reshape(ni, 16, 8)
    batches = -(-count // 16)
    group = (jn >> 4) & 7
    waves = np.zeros((ni, 16), dtype=np.int64)
    for c in range(8):  # per phase: the most distinct rows of one bank group
        m = np.sort(np.where(group == c, jn, -1), axis=2)
        distinct = ((m[:, :, 1:] != m[:, :, :-1]) & (m[:, :, 1:] >= 0)).sum(2) + (m[:, :, 0] >= 0)
        waves = np.maximum(waves, distinct)
    live = np.arange(16)[None, :] < 2 * batches[:, None]
    wf = (np.maximum(waves, 1) * live).sum(1) * 4
    return np.array([[hi - lo, batches[lo:hi].sum(), count[lo:hi].sum(), wf[lo:hi].sum()] for _, lo, hi in blocks],
                    dtype=float)


def warps_report(g: sp.RowGroups, wend: np.ndarray, each) -> None:
    """Per block, its warps' ends after the panel (us): how far the last warp is behind the mean,
    the SM's idle warp time, and how much of a warp's end its items' cost (as the plan splits
    blocks: 16 per batch begun, 16 GROUP_ITEM_COST per item) explains."""
    _, blocks, count, _ = plan_arrays(g)
    nb = g.n_blocks
    cost = sp.GROUP_BATCH * (-(-count // sp.GROUP_BATCH) + sp.GROUP_ITEM_COST)
    wcost = np.array([[cost[lo + w:hi:32].sum() for w in range(32)] for _, lo, hi in blocks], dtype=float)
    last = wend.max(1)
    idle = (last[:, None] - wend).sum() / (32 * last).sum()
    r_in = np.mean([np.corrcoef(wcost[b], wend[b])[0, 1] for b in range(nb) if wcost[b].std() > 0])
    rep = np.corrcoef(each[0].ravel(), each[-1].ravel())[0, 1]
    cv = (wcost.std(1) / wcost.mean(1)).mean()
    print(f"  warps: last warp behind the block's mean warp end by {np.mean(last - wend.mean(1)):.2f} us (max "
          f"{np.max(last - wend.mean(1)):.2f}); idle warp time after the panel {100 * idle:.1f}%; warp cost CV {cv:.3f}; "
          f"corr(warp cost, end) within blocks {r_in:.2f}; warp ends run 1 vs 5 corr {rep:.2f}", flush=True)


def fit(X: np.ndarray, y: np.ndarray, cols, names) -> str:
    A = np.c_[X[:, cols], np.ones(len(y))]
    c, *_ = np.linalg.lstsq(A, y, rcond=None)
    r = y - A @ c
    terms = ", ".join(f"{names[k]} {v:.1f} ns" for k, v in zip(cols, c)) + f", constant {c[-1] / 1e3:.2f} us"
    return f"{terms}; R^2 {1 - r.var() / max(y.var(), 1e-9):.2f}"


def main() -> int:
    names = ["items", "batches", "entries", "ldmatrix wavefronts"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"GPU: {torch.cuda.get_device_name()}, {sms} SMs; K = 32, f16; us")
    print("| shape | blocks | kernel span | block durations min / mean / max | panel loaded after min / mean / max "
          "| latest start |")
    print("|---|---|---|---|---|---|")
    allX, ally = [], []
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    dumps = {}
    for M, nnz, kind in SHAPES:
        p = (sp.uniform(M, M, nnz, seed=1) if kind == "uniform" else sp.rmat(M, M, nnz, seed=1)).to("cuda")
        A = torch.randn(M, 32, device="cuda", dtype=torch.float16)
        B = torch.randn(32, M, device="cuda", dtype=torch.float16)
        src = timed_source(M, p.nnz)
        cu = os.path.join(tempfile.mkdtemp(), "groups_timed.cu")
        with open(cu, "w") as f:
            f.write(src)
        launch = cuda_runtime.CudaLaunch(cu, src)
        plan = sp.dispatch_plan(p, 128, 128, 0)
        g = sp.row_groups(p, 32, sms)
        P = torch.empty(p.nnz, device="cuda")
        args = [A, B, p.rows, p.cols, P, B.reshape(M, 32), *plan.cuda_tensors()]
        for _ in range(3):
            launch(*args, row_groups=g, groups_from_b=True)
        torch.cuda.synchronize()
        times = cupy.ndarray((16384,), dtype=cupy.uint64, memptr=launch._modules[torch.cuda.current_device()].get_global("tk_times"))
        runs, wends, smids = [], [], []
        for _ in range(5):
            times[:] = 0
            launch(*args, row_groups=g, groups_from_b=True)
            torch.cuda.synchronize()
            t = cupy.asnumpy(times).astype(np.int64)
            runs.append((t[:2 * g.n_blocks:2], t[1:2 * g.n_blocks:2], t[2048:2048 + g.n_blocks]))
            smids.append(t[12288:12288 + g.n_blocks])
            wends.append(t[4096:4096 + 32 * g.n_blocks].reshape(g.n_blocks, 32) - t[2048:2048 + g.n_blocks, None])
        dur = np.median([e - s for s, e, _ in runs], 0) / 1e3
        panel = np.median([r - s for s, _, r in runs], 0) / 1e3
        late = np.median([(s - s.min()).max() for s, _, _ in runs]) / 1e3
        span = np.median([e.max() - s.min() for s, e, _ in runs]) / 1e3
        print(f"| {M}^2 {nnz} {kind} | {g.n_blocks} | {span:.1f} | {dur.min():.1f} / {dur.mean():.1f} / {dur.max():.1f} | "
              f"{panel.min():.2f} / {panel.mean():.2f} / {panel.max():.2f} | {late:.2f} |", flush=True)
        X = block_features(g)
        if out:
            dumps[f"{kind}{nnz}"] = dict(start=np.array([r[0] for r in runs]), end=np.array([r[1] for r in runs]),
                                         ready=np.array([r[2] for r in runs]), smid=np.array(smids), wend=np.array(wends),
                                         blocks=g.data[:3 * g.n_blocks].cpu().numpy().reshape(-1, 3), X=X)
        warps_report(g, np.median(wends, 0) / 1e3, [w / 1e3 for w in wends])
        print(f"  within: {fit(X, dur * 1e3, [0, 1], names)}; {fit(X, dur * 1e3, [3], names)}", flush=True)
        allX.append(X)
        ally.append(dur * 1e3)
    X, y = np.concatenate(allX), np.concatenate(ally)
    print(f"all shapes: {fit(X, y, [0, 1], names)}")
    if out:
        np.savez(out, **{f"{k}_{f}": v for k, d in dumps.items() for f, v in d.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

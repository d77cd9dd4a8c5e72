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

    source .device/env.sh && python3 benchmarks/probes/sddmm_block_times.py

Outcome (H200, 2026-11-29): docs/PERFORMANCE.md, "K = 32 row groups: the phases' bank classes".
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
    body = body.replace(start, start + f"    if (tid == 0) {{ unsigned long long t; {TIMER} tk_times[2 * blockIdx.x] = t; }}\n", 1)
    body = body.replace(ready, "    __syncthreads();\n" + f"    if (tid == 0) {{ unsigned long long t; {TIMER} "
                        "tk_times[2048 + blockIdx.x] = t; }\n    const int hi16 = lane >> 4;\n", 1)
    body += f"    {{ unsigned long long t; {TIMER} if (lane == 0) atomicMax(&tk_times[2 * blockIdx.x + 1], t); }}\n"
    return src[:i] + "__device__ unsigned long long tk_times[4096];\n" + body + src[j:]


def block_features(g: sp.RowGroups) -> np.ndarray:
    """[blocks, 4]: items, batches, entries and predicted ldmatrix wavefronts per block."""
    d = g.data.cpu().numpy().astype(np.int64)
    nb, ni = g.n_blocks, g.n_items
    blocks = d[:3 * nb].reshape(nb, 3)
    at_items = (3 * nb + 1) & ~1
    items = d[at_items:at_items + 2 * ni].reshape(ni, 2)
    at = (at_items + 2 * ni + 31) & ~31
    jn = d[at:at + 128 * ni].reshape(ni, 2, 16, 4).transpose(0, 1, 3, 2).reshape(ni, 16, 8)
    count = items[:, 1]
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
        times = cupy.ndarray((4096,), dtype=cupy.uint64, memptr=launch._modules[torch.cuda.current_device()].get_global("tk_times"))
        runs = []
        for _ in range(5):
            times[:] = 0
            launch(*args, row_groups=g, groups_from_b=True)
            torch.cuda.synchronize()
            t = cupy.asnumpy(times).astype(np.int64)
            runs.append((t[:2 * g.n_blocks:2], t[1:2 * g.n_blocks:2], t[2048:2048 + g.n_blocks]))
        dur = np.median([e - s for s, e, _ in runs], 0) / 1e3
        panel = np.median([r - s for s, _, r in runs], 0) / 1e3
        late = np.median([(s - s.min()).max() for s, _, _ in runs]) / 1e3
        span = np.median([e.max() - s.min() for s, e, _ in runs]) / 1e3
        print(f"| {M}^2 {nnz} {kind} | {g.n_blocks} | {span:.1f} | {dur.min():.1f} / {dur.mean():.1f} / {dur.max():.1f} | "
              f"{panel.min():.2f} / {panel.mean():.2f} / {panel.max():.2f} | {late:.2f} |", flush=True)
        X = block_features(g)
        print(f"  within: {fit(X, dur * 1e3, [0, 1], names)}; {fit(X, dur * 1e3, [3], names)}", flush=True)
        allX.append(X)
        ally.append(dur * 1e3)
    X, y = np.concatenate(allX), np.concatenate(ally)
    print(f"all shapes: {fit(X, y, [0, 1], names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

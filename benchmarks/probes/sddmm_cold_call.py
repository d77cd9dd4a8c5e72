"""Probe (issue 12): what a timed call of the SDDMM at K = 32 adds over its CUDA-graph replay.

Question: at 10000^2 with 5M entries, K = 32, `benchmarks/sddmm.py` times the tkc call at about
38 us per call (`triton.testing.do_bench`: a 256 MB clear of the L2 before every call, CUDA
events around it) against about 33 us as a graph replay. Where do the 5 us go, and does
cuSPARSE pay the same?

Per shape, the tkc call (examples/sddmm.tk on target `cuda`, which takes the row groups here) and
torch.sparse.sampled_addmm (cuSPARSE, f32 operands and CSR values, as benchmarks/sddmm.py), each
timed as the median of CUDA-event spans around one call:
- `dobench`: triton.testing.do_bench itself;
- `zero`: the same by hand (a 256 MB `zero_` before each call: the L2 left full of dirty lines);
- `read`: a 256 MB read (`torch.sum`) before each call instead: the L2 left full of clean lines;
- `sync`: a synchronize before each call (the host's launch time counts);
- `graph`: a CUDA graph of 20 calls, replayed (benchmarks/probes/sddmm_overhead.py `graph_us`).
A one-element `add_` timed the same ways first gives the events' own span.

    source .device/env.sh && python3 benchmarks/probes/sddmm_cold_call.py

Outcome (H200, 2026-11-29): docs/PERFORMANCE.md, "K = 32 row groups: blocks to the panels by
D'Hondt; what a timed call adds".
"""

from __future__ import annotations

import os
import sys

import torch
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import tkc  # noqa: E402
from sddmm_overhead import graph_us  # noqa: E402
from tkc import sparse as sp  # noqa: E402

SHAPES = [(10000, 5_000_000, "rmat"), (10000, 5_000_000, "uniform"), (10000, 1_000_000, "rmat")]
CLEAR_BYTES = 256 * 2**20


def event_us(fn, before, n: int = 200, warm: int = 10) -> float:
    """Median us of CUDA-event spans around `fn()`, each after `before()`."""
    spans = []
    for i in range(n + warm):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        if i >= warm:
            spans.append((start, end))
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in spans)
    return times[len(times) // 2]


def graph_or_nan(fn, calls: int = 20, replays: int = 50) -> float:
    try:
        return graph_us(fn, calls, replays)
    except Exception:  # noqa: BLE001 (a call that cannot be captured)
        return float("nan")


def main() -> int:
    dirty = torch.empty(CLEAR_BYTES // 4, dtype=torch.int32, device="cuda")
    clean = torch.ones(CLEAR_BYTES // 4, dtype=torch.int32, device="cuda")
    total = torch.empty((), dtype=torch.int64, device="cuda")
    zero, read, sync = (lambda: dirty.zero_()), (lambda: torch.sum(clean, 0, out=total)), torch.cuda.synchronize
    one = torch.zeros(1, device="cuda")
    print(f"GPU: {torch.cuda.get_device_name()}; us, medians")
    print(f"one-element add_: zero {event_us(lambda: one.add_(1), zero):.1f}, read {event_us(lambda: one.add_(1), read):.1f}, "
          f"sync {event_us(lambda: one.add_(1), sync):.1f}")
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")
    print("| shape | call | do_bench | zero | read | sync | graph |")
    print("|---|---|---|---|---|---|---|")
    for M, nnz, kind in SHAPES:
        p = (sp.uniform(M, M, nnz, seed=1) if kind == "uniform" else sp.rmat(M, M, nnz, seed=1)).to("cuda")
        A = torch.randn(M, 32, device="cuda", dtype=torch.float16)
        B = torch.randn(32, M, device="cuda", dtype=torch.float16)
        S = p.to_torch(torch.ones(p.nnz, device="cuda", dtype=torch.float32))
        Af, Bf = A.float(), B.float()
        calls = [("tkc", lambda: kernel(A, B, p), 200), ("cuSPARSE", lambda: torch.sparse.sampled_addmm(S, Af, Bf, beta=0.0), 50)]
        for name, fn, n in calls:
            fn()
            row = [do_bench(fn, warmup=50, rep=300) * 1e3, event_us(fn, zero, n), event_us(fn, read, n), event_us(fn, sync, n),
                   graph_or_nan(fn, 20 if name == "tkc" else 5, 50 if name == "tkc" else 10)]
            print(f"| {M}^2 {nnz} {kind} | {name} | " + " | ".join(f"{v:.1f}" for v in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

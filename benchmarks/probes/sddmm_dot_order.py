"""Probe (issue 12): the order of the dot-product entries of the SDDMM kernel (examples/sddmm.tk
through `cuda`, every entry forced onto the dot-product path, and the cost model's split).
tkc.sparse.dispatch_plan sorts them by (row, column): consecutive entries share A's row, and
every entry reads its own row of B (K f16) from L2. Sorted by T x T tiles instead (tile-major,
then row, then column), the entries of a tile share its T rows of A and T rows of Bt, which stay
in L1 while one block works through them. Prediction: at 5% density a 128 x 128 tile holds 819
entries on 256 rows of operands, so L2 traffic per entry falls from ~K*2 bytes to ~K*2*256/819,
and the L2-bound dot kernel (10000^2, 5M entries) gets up to ~2x faster; at low density (4000^2,
88k) the tiles hold ~1 entry and nothing changes.

With `seq`: also each order with the entries' rows and columns stored in it and P written in it
(dot_order the identity), and the scatter into S's order timed apart; `k32`: only the 10000^2
shapes. Each order is checked against float32 torch on the same inputs, then timed as the kernel launch
alone (do_bench median, ms), in one run. `source .device/env.sh && python3
benchmarks/probes/sddmm_dot_order.py`
"""

from __future__ import annotations

import sys

import torch
from triton.testing import do_bench

import tkc
from tkc import sparse as sp

SHAPES = [(10000, 10000, 5_000_000, "uniform", 32), (10000, 10000, 5_000_000, "rmat", 32),
          (10000, 10000, 5_000_000, "uniform", 256), (10000, 10000, 5_000_000, "rmat", 256),
          (4000, 4000, 88_000, "uniform", 256), (1504, 1504, 746_000, "uniform", 256)]


def order(p, dot: torch.Tensor, how: str) -> torch.Tensor:
    r, c = p.rows[dot].long(), p.cols[dot].long()
    if how == "row":
        key = r * p.N + c
    elif how.startswith("tile"):
        t = int(how[4:])
        nt = -(-p.N // t)
        key = (((r // t) * nt + c // t) * t + r % t) * t + c % t
    elif how.startswith("panel"):  # row panels of T rows, by column inside a panel
        t = int(how[5:])
        key = ((r // t) * p.N + c) * t + r % t
    else:
        raise ValueError(how)
    return dot[torch.sort(key).indices.to(dot.device)].int().contiguous()


def main() -> int:
    hows = [a for a in sys.argv[1:] if a not in ("seq", "k32")] or ["row", "tile32", "tile64", "tile128", "tile256",
                                                                     "panel128"]
    shapes = [s for s in SHAPES if "k32" not in sys.argv[1:] or s[4] == 32 or s[:3] == (10000, 10000, 5_000_000)]
    kernels = {K: tkc.compile("examples/sddmm.tk", target="cuda") for K in (32, 256)}
    print("| shape | pattern | K | split | order | kernel ms | n_dot | err |")
    print("|---|---|---|---|---|---|---|---|")
    for M, N, nnz, kind, K in shapes:
        p = (sp.rmat if kind == "rmat" else sp.uniform)(M, N, nnz, seed=1).to("cuda")
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        kernel = kernels[K]
        artifact, jit = kernel.specialize(kernel.bind_dims([A, B, p]))
        _, _, bm, bn, model = kernel._sampled(artifact.module)
        rows, cols = p.rows.long(), p.cols.long()
        ref = torch.cat([(A[rows[i:i + (1 << 20)]].float() * B[:, cols[i:i + (1 << 20)]].t().float()).sum(1)
                         for i in range(0, nnz, 1 << 20)])
        bt = B.t().contiguous()
        for split, below in (("model", model), ("dots", 10**9)):
            plan = sp.dispatch_plan(p, bm, bn, below)
            for how in hows:
                dot = order(p, plan.dot_order.long(), how) if plan.n_dot else plan.dot_order
                tensors = (plan.tc_ptr, plan.tc_m, plan.tc_n, plan.tc_order, dot, plan.tc_pos, plan.tc_rbase)
                P = torch.full((nnz,), float("nan"), device="cuda")
                args = [A, B, p.rows, p.cols, P, bt, *tensors]
                jit(*args)
                torch.cuda.synchronize()
                err = ((P - ref).abs().max() / ref.abs().max()).item()
                if not err < 1e-3:
                    raise SystemExit(f"{M}x{N} {kind} K{K} {split} {how}: error {err}")
                ms = do_bench(lambda: jit(*args), warmup=50, rep=200)
                print(f"| {M}x{N} nnz {nnz} | {kind} | {K} | {split} | {how} | {ms:.4f} | {plan.n_dot} | {err:.1e} |",
                      flush=True)
                if split != "dots" or "seq" not in sys.argv[1:]:
                    continue
                # the same order with the entries' rows and columns stored in it (no gather through
                # dot_order) and P written in that order (sequential stores); the scatter into S's
                # order timed apart
                d = dot.long()
                r2, c2 = p.rows[d].contiguous(), p.cols[d].contiguous()
                ident = torch.arange(nnz, device="cuda", dtype=torch.int32)
                P2 = torch.full((nnz,), float("nan"), device="cuda")
                args2 = [A, B, r2, c2, P2, bt, plan.tc_ptr, plan.tc_m, plan.tc_n, plan.tc_order, ident, plan.tc_pos,
                         plan.tc_rbase]
                jit(*args2)
                torch.cuda.synchronize()
                err = ((P2 - ref[d]).abs().max() / ref.abs().max()).item()
                if not err < 1e-3:
                    raise SystemExit(f"{M}x{N} {kind} K{K} {how} seq: error {err}")
                ms2 = do_bench(lambda: jit(*args2), warmup=50, rep=200)
                sc = do_bench(lambda: P.index_copy_(0, d, P2), warmup=50, rep=200)
                print(f"| {M}x{N} nnz {nnz} | {kind} | {K} | {split} | {how}, stored in order | {ms2:.4f} "
                      f"(+ scatter {sc:.4f}) | {plan.n_dot} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

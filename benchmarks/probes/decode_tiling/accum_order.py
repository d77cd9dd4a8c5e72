"""Probe (issue 10): does the order of accum's blocks matter? examples/accum.tk (one grid index over
the rows' column blocks, in memory order) against the same kernel with a grid of (rows, column
blocks), rows fastest (its form before 2026-11-30), at the defaults and whole-row tilings, f16 and
f32, at 16384 x 4096, 64 x 4096 and 1 x 4096; torch eager (`X + D`) in the same run. Each result is
checked against torch, then timed as CUDA-graph replays over rotated inputs (tkc.bench.graph_ms),
two rounds. Outcome (NVIDIA H200, 2026-11-30, docs/PERFORMANCE.md "accum's grid order"; first run
as a scratch script with the grid swapped instead, the same block order as the file's).

    source .device/env.sh && python3 benchmarks/probes/decode_tiling/accum_order.py
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

ROWS_FIRST = """kernel accum<BN=1024, threads=256>(X: f32[B, N], D: f32[B, N]) -> (Y: f32[B, N])
    where B = 1, N = 4096
    reference "X + D"
{
    grid (B, cdiv(N, BN)) as (b, n) threads(threads)
    Y[b : +1, n*BN : +BN] = X[b : +1, n*BN : +BN] + D[b : +1, n*BN : +BN]
}
"""


def main() -> None:
    import torch

    import tkc
    from miss import Timer
    from tkc.bench import graph_ms

    with open(os.path.join(ROOT, "examples", "accum.tk"), encoding="utf-8") as f:
        memory_order = f.read()
    tmp = tempfile.mkdtemp()
    timer = Timer(False, 25, 100)
    print(torch.cuda.get_device_name(), "(graph us)")
    for dt, tdt in (("f16", torch.float16), ("f32", torch.float32)):
        files = {}
        for tag, text in (("memory order", memory_order), ("rows first", ROWS_FIRST)):
            path = os.path.join(tmp, f"accum_{tag.replace(' ', '_')}_{dt}.tk")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace("f32[", dt + "["))
            files[tag] = path
        for B, N in ((16384, 4096), (64, 4096), (1, 4096)):
            sets = [(torch.randn(B, N, device="cuda").to(tdt), torch.randn(B, N, device="cuda").to(tdt))
                    for _ in range(2 if B > 1024 else 8)]
            rows = [("eager", lambda x, d: x + d)]
            for tag, path in files.items():
                for consts in ({}, {"BN": 4096, "threads": 512}, {"BN": 4096, "threads": 1024}):
                    rows.append((f"{tag} {consts or 'defaults'}", tkc.compile(path, target="cuda", cache_dir=tmp, **consts)))
            for name, fn in rows:
                for x, d in sets[:2]:
                    want = x.double() + d.double()
                    err = ((fn(x, d).double() - want).norm() / want.norm()).item()
                    if not err < (1e-3 if dt == "f16" else 1e-6):
                        raise SystemExit(f"{name} at {B} x {N} {dt}: relative error {err}")
            for r in range(2):
                print(f"{dt} {B} x {N}, round {r + 1}: "
                      + " | ".join(f"{name} {graph_ms(timer, fn, sets) * 1e3:.1f}" for name, fn in rows), flush=True)


if __name__ == "__main__":
    main()

"""Probe (issue 10): where the int8 GEMV's time goes, by hand-edited variants of generated CUDA.

The kernels are gen.py's (generated at D = 11008, K = 4096, some edited by hand, `q8_persist*`
written by hand; gen.py says which), written into a temporary folder first (or taken from
`--dir DIR`). Every variant is checked against float64 torch, then timed (do_bench median over
4 rotated input sets, and as CUDA-graph replays: the kernel without the launch's host time).
Run on the device machine: `python3 benchmarks/probes/int8_gemv/probe.py [VARIANT ...] [--dir DIR]
[--check-only]` (`--check-only`: launch and check only, to run under `ncu`).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks"), HERE, os.path.dirname(HERE)]

D, K, GS = 11008, 4096, 64


def main() -> None:
    import torch

    import gen
    import variants
    from miss import copy_bandwidth
    from tkc.bench import Timer, graph_ms, rotating
    from tkc.cuda_runtime import CudaLaunch

    timer = Timer(cpu=False, warmup_ms=25, rep_ms=200)
    copy = {"tbps": 1.0} if "--check-only" in sys.argv else copy_bandwidth(timer, "cuda", 1 << 30)
    print(f"{torch.cuda.get_device_name()}: copy {copy['tbps']:.2f} TB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    q8_sets, f16_sets = [], []
    for _ in range(4):
        W = torch.randint(-127, 128, (D, K // GS, GS), device="cuda", dtype=torch.int8, generator=g)
        S = torch.rand((D, K // GS, 1), device="cuda", generator=g) * 0.02 + 0.001
        X = torch.randn((K // GS, GS), device="cuda", generator=g)
        q8_sets.append((W, S, X, torch.empty((D, 1), device="cuda")))
    for _ in range(3):
        W = torch.randn((D, K), device="cuda", generator=g).half()
        X = torch.randn((1, K), device="cuda", generator=g)
        f16_sets.append((W, X, torch.empty((D, 1), device="cuda")))
    q8_bytes = D * K + D * (K // GS) * 4 + K * 4 + D * 4
    f16_bytes = D * K * 2 + K * 4 + D * 4
    rows = []
    for name, path in variants.chosen_kernels(sys.argv[1:], "tkc-int8-gemv-", gen.generate):
        with open(path) as f:
            kernel = CudaLaunch(path, f.read())
        q8 = name.startswith("q8")
        sets = q8_sets if q8 else f16_sets
        for s in sets[:2]:
            s[-1].fill_(float("nan"))
            kernel(*s)
            if q8:
                ref = (s[0].double() * s[1].double()).reshape(D, K) @ s[2].double().reshape(K, 1)
            else:
                ref = s[0].double() @ s[1].double().T
            err = ((s[-1].double() - ref).norm() / ref.norm()).item()
            if not err < 1e-5:
                raise SystemExit(f"{name}: relative error {err}")
        if "--check-only" in sys.argv:  # one launch per set for a profiler (ncu)
            continue
        us = timer(rotating(kernel, sets)) * 1e3
        gus = graph_ms(timer, kernel, sets) * 1e3
        nbytes = q8_bytes if q8 else f16_bytes
        rows.append((name, us, gus, nbytes / (gus * 1e-6) / 1e12 / copy["tbps"] * 100))
    print(f"{'variant':<18} {'us':>8} {'graph us':>9} {'% copy':>7}")
    for name, us, gus, pct in rows:
        print(f"{name:<18} {us:8.1f} {gus:9.1f} {pct:6.0f}%")


if __name__ == "__main__":
    main()

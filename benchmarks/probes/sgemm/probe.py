"""Probe (issue 10): where the tuned SGEMM's time goes, by hand-edited variants of generated CUDA.

The kernels are gen.py's (examples/sgemm.tk at the tuned tiling, M = N = K = 4096, some edited
by hand; gen.py says which), written into a temporary folder first (or taken from `--dir DIR`).
Every variant is checked against float64 torch, then timed (do_bench median over rotated input
sets) next to cuBLAS fp32 (TF32 off) in the same run.
Run on the device machine: `python3 benchmarks/probes/sgemm/probe.py [VARIANT ...] [--dir DIR] [--check-only]`.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks"), HERE, os.path.dirname(HERE)]

N = 4096


def main() -> None:
    import torch

    import gen
    import variants
    from tkc.bench import Timer, rotating
    from tkc.cuda_runtime import CudaLaunch

    torch.backends.cuda.matmul.allow_tf32 = False
    timer = Timer(cpu=False, warmup_ms=100, rep_ms=1000)
    g = torch.Generator(device="cuda").manual_seed(0)
    sets = [(torch.randn((N, N), device="cuda", generator=g), torch.randn((N, N), device="cuda", generator=g),
             torch.empty((N, N), device="cuda")) for _ in range(2)]
    ref = sets[0][0].double() @ sets[0][1].double()
    check_only = "--check-only" in sys.argv
    rows = [] if check_only else [("cuBLAS", timer(rotating(lambda a, b, c: torch.mm(a, b, out=c), sets)) * 1e3)]
    for name, path in variants.chosen_kernels(sys.argv[1:], "tkc-sgemm-", gen.generate):
        with open(path) as f:
            kernel = CudaLaunch(path, f.read())
        s = sets[0]
        s[-1].fill_(float("nan"))
        kernel(*s)
        err = ((s[-1].double() - ref).norm() / ref.norm()).item()
        if not err < 1e-5:
            raise SystemExit(f"{name}: relative error {err}")
        if not check_only:
            rows.append((name, timer(rotating(kernel, sets)) * 1e3))
    print(torch.cuda.get_device_name())
    for name, us in rows:
        print(f"{name:<24} {us:9.1f} us  {rows[0][1] / us * 100:5.1f}% of cuBLAS")


if __name__ == "__main__":
    main()

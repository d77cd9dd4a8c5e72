"""Probe (issue 13): U shards of A per pipelined trip in the PEFT MiSS kernel, through `tilelang`.

At R = 16 and K = 3072 a block's shard sum is a chain of 192 dependent trips of BM x 16 loads;
`peft_miss_u.tk` loads BM x U*R per trip and adds its U shards in registers (a chain of
cdiv(K, U * R) trips). Each case uses the cost model's constants for its M bucket (`tkc compile
examples/peft_miss.tk --schedule model --explain --dynamic M`); every variant is checked against
float64 torch, then timed (do_bench median over rotated input sets, and as CUDA-graph replays)
next to PEFT's own adapter-plus-add (benchmarks/peft_miss.py `peft_adapter`) in the same run.
Run on the device machine: `python3 benchmarks/probes/miss_shards_per_trip/probe.py [--target T]`.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]
PATH = os.path.join(HERE, "peft_miss_u.tk")

CASES = [  # (M, K, N, R, the model's constants for M's bucket)
    (128, 3072, 8192, 16, {"BM": 16, "BN": 128, "NS": 32, "STAGE_C": 0}),
    (4096, 3072, 8192, 16, {"BM": 32, "BN": 128, "NS": 4, "STAGE_C": 1}),
    (16384, 3072, 8192, 16, {"BM": 32, "BN": 128, "NS": 1, "STAGE_C": 1}),
    (128, 3072, 3072, 64, {"BM": 16, "BN": 128, "NS": 8, "STAGE_C": 0}),
    (4096, 3072, 3072, 64, {"BM": 32, "BN": 128, "NS": 2, "STAGE_C": 1}),
]
US = (1, 2, 4, 8)


def _build(target, m, k, n, r, consts, u, cache):
    import tkc

    try:
        tkc.compile(PATH, target=target, cache_dir=cache, U=u, **consts).specialize({"M": m, "K": k, "N": n, "R": r})
        return "ok"
    except Exception as exc:  # reported when the main process compiles again
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def main() -> None:
    import torch

    import tkc
    from peft_miss import peft_adapter
    from tkc.bench import Timer, graph_ms, rotating

    target = sys.argv[sys.argv.index("--target") + 1] if "--target" in sys.argv else "tilelang"
    cache = tempfile.mkdtemp(prefix="tkc-probe-shards-")
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(cache, "tilelang"))
    jobs = [(target, m, k, n, r, c, u, cache) for m, k, n, r, c in CASES for u in US]
    with cf.ProcessPoolExecutor(max_workers=14, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_build, *zip(*jobs)))
    timer = Timer(cpu=False, warmup_ms=25, rep_ms=200)
    print(f"{torch.cuda.get_device_name()}, target {target}")
    print(f"{'case':<26} {'variant':<8} {'us':>8} {'graph us':>9}")
    for m, k, n, r, consts in CASES:
        n_sets = max(2, min(20, (200 << 20) // (m * (k + 2 * n) * 2)))
        sets = [((torch.randn(m, k, device="cuda") * 2 + 0.5).half(), (torch.randn(r, n, device="cuda") * 0.1).half(),
                 torch.randn(m, n, device="cuda").half()) for _ in range(n_sets)]
        name = f"M{m} K{k} N{n} R{r}"
        with torch.inference_mode():
            pad = lambda x: torch.nn.functional.pad(x.double(), (0, (-k) % r))  # noqa: E731
            for u in US:
                kernel = tkc.compile(PATH, target=target, cache_dir=cache, U=u, **consts)
                a, b, y = sets[0]
                ref = y.double() + pad(a).reshape(m, -1, r).sum(-2) @ b.double()
                out = kernel(a, b, y)
                err = ((out.double() - ref).norm() / ref.norm()).item()
                if not err < 5e-3:
                    raise SystemExit(f"{name} U={u}: relative error {err}")
                us = timer(rotating(kernel, sets)) * 1e3
                gus = graph_ms(timer, kernel, sets) * 1e3
                print(f"{name:<26} {'U=' + str(u):<8} {us:8.1f} {gus:9.1f}", flush=True)
            fn = lambda a, b, y: peft_adapter(y, a, b, r)  # noqa: E731
            print(f"{name:<26} {'PEFT':<8} {timer(rotating(fn, sets)) * 1e3:8.1f} {graph_ms(timer, fn, sets) * 1e3:9.1f}",
                  flush=True)


if __name__ == "__main__":
    main()

"""Probe (issue 10): schedule constants of the decode examples on the GPU, target `cuda`.

Times each (example, constants) at the issue's target shape with benchmarks/miss.py's Timer
(do_bench median, rotated inputs), after checking the output against the float64 reference.
Run on the device machine: `python3 benchmarks/probes/decode_tiling/probe.py`.
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

from miss import Timer, rotating  # noqa: E402

CASES = [
    ("matmul_f16", {"D": 11008, "K": 4096}, {}, [{}, {"BD": 8}, {"BD": 16}, {"BD": 16, "threads": 256},
                                                 {"BD": 8, "BK": 1024}, {"BD": 16, "BK": 256}, {"BD": 32, "threads": 256}]),
    ("matmul", {"D": 11008, "K": 4096}, {}, [{}, {"BD": 8}, {"BD": 16}, {"BD": 16, "threads": 256}, {"BD": 8, "BK": 256}]),
    ("matmul_q8", {"D": 11008, "K": 4096}, {}, [{}, {"BD": 8}, {"BD": 16}, {"BD": 32}, {"BD": 16, "threads": 256},
                                                {"BD": 32, "threads": 256}]),
    ("rope", {"B": 16384, "D": 4096}, {"pos": 1023}, [{}, {"threads": 32}, {"threads": 128}]),
    ("attention", {"H": 32, "HD": 128, "S": 1024}, {"pos": 1023}, [{}, {"BT": 64}, {"BT": 16}, {"BT": 64, "threads": 256}]),
]


def build(name, consts, dims, cache):
    try:
        import tkc

        tkc.compile(os.path.join(ROOT, "examples", f"{name}.tk"), target="cuda", cache_dir=cache, **consts).specialize(dims)
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return str(exc).splitlines()[0]


def main() -> None:
    import torch

    import tkc
    from tkc import driver, oracle

    cache = tempfile.mkdtemp()
    jobs = [(n, c, d, cache) for n, d, _, vs in CASES for c in vs]
    with cf.ProcessPoolExecutor(14, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(build, *zip(*jobs)))
    timer = Timer(False, 25, 100)
    print("| example | constants | us | rel err |\n|---|---|---|---|")
    for name, dims, scalars, variants in CASES:
        path = os.path.join(ROOT, "examples", f"{name}.tk")
        for consts in variants:
            try:
                module = driver.frontend(path, {**dims, **consts})
                sets = [oracle.random_inputs(module, s, "cuda", "normal", scalars) for s in range(3)]
                k = tkc.compile(path, target="cuda", cache_dir=cache, **consts)
                out = k(*sets[0])
                err = oracle.rel_error(out, oracle.reference(module, sets[0])[0])
                us = timer(rotating(k, sets)) * 1e3
                print(f"| {name} | {consts or 'default'} | {us:.1f} | {err:.1e} |", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"| {name} | {consts} | - | {str(exc).splitlines()[0][:80]} |", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

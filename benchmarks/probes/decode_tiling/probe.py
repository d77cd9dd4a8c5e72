"""Probe (issue 10): schedule constants of the decode examples on the GPU, target `cuda`.

Times each (example, constants) at the issue's target shape with benchmarks/miss.py's Timer
(do_bench median, rotated inputs) and replayed from a CUDA graph (tkc.bench.graph_ms: the kernel
without the host's per-call work), after checking the output against the float64 reference;
torch eager (benchmarks/transformer.py's functions) on the same inputs first, in the same run.
Run on the device machine: `python3 benchmarks/probes/decode_tiling/probe.py [NAME ...]
[--target=tilelang]` (default `cuda`), or
`... probe.py llama110m` for the kernels of a stories110M decode step at its shapes, `... probe.py
attdecode` for attention.tk's tilings at the decode benchmark's shapes, `... probe.py trigger` for
grids of many small blocks (the programmatic-launch trigger's cost).
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

CASES = [  # (example, dims, runtime scalars, constant variants, tensor dtype)
    ("matmul_f16", {"D": 11008, "K": 4096}, {}, [{}, {"BD": 8}, {"BD": 16, "threads": 256}, {"BD": 2, "BK": 1024},
                                                 {"BD": 8, "BK": 256}, {"threads": 256}, {"threads": 64},
                                                 {"BD": 2, "BK": 2048, "threads": 256}, {"BD": 1, "BK": 2048},
                                                 {"BD": 4, "BK": 1024, "threads": 128}, {"BD": 8, "BK": 1024, "threads": 128},
                                                 {"BD": 4, "BK": 2048, "threads": 256}], ""),
    ("matmul", {"D": 11008, "K": 4096}, {}, [{}, {"BD": 8}, {"BD": 2}, {"BK": 256}, {"threads": 256}, {"threads": 64},
                                             {"BD": 1, "threads": 64}], ""),
    ("matmul_q8", {"D": 11008, "G": 64, "GS": 64}, {}, [{}, {"NG": 16}, {"BD": 8}, {"BD": 2, "NG": 16}, {"threads": 64},
                                                        {"NG": 16, "threads": 256}, {"BD": 8, "NG": 16, "threads": 256},
                                                        {"BD": 2, "NG": 32}, {"BD": 4, "NG": 16}, {"BD": 1, "NG": 32},
                                                        {"BD": 4, "NG": 32}, {"BD": 8, "NG": 32},
                                                        {"BD": 4, "NG": 16, "threads": 64},
                                                        {"BD": 8, "NG": 16, "threads": 64},
                                                        {"BD": 4, "NG": 64, "threads": 256},
                                                        {"BD": 8, "NG": 64, "threads": 256},
                                                        {"BD": 2, "NG": 64, "threads": 256},
                                                        {"BD": 8, "NG": 64, "threads": 512},
                                                        {"BD": 16, "NG": 64, "threads": 512},
                                                        {"BD": 4, "NG": 32, "threads": 128}],
     ""),
    ("rmsnorm", {"B": 16384, "N": 4096}, {}, [{}, {"threads": 512}, {"threads": 256}, {"threads": 128}, {"BR": 2},
                                              {"BR": 4}, {"BR": 8}, {"BR": 4, "threads": 512}], "f16"),
    ("rmsnorm", {"B": 1, "N": 4096}, {}, [{}, {"BR": 4}, {"threads": 256}], "f16"),
    ("rmsnorm", {"B": 64, "N": 4096}, {}, [{}, {"BR": 1}, {"BR": 2}, {"BR": 4}, {"BR": 1, "threads": 256},
                                           {"BR": 2, "threads": 512}], ""),
    ("rmsnorm", {"B": 16384, "N": 4096}, {}, [{}, {"BR": 1}, {"BR": 2}, {"BR": 4}, {"BR": 2, "threads": 512}], ""),
    ("rope", {"B": 16384, "D": 4096}, {"pos": 1023}, [{}, {"BR": 4, "threads": 32}, {"BR": 8, "threads": 64},
                                                      {"BR": 16, "threads": 128}, {"BR": 32, "threads": 256},
                                                      {"BR": 16, "threads": 256}], ""),
    ("accum", {"B": 16384, "N": 4096}, {}, [{}, {"BN": 2048}, {"BN": 4096, "threads": 512}, {"BN": 4096, "threads": 256},
                                            {"BN": 4096, "threads": 128}, {"BN": 2048, "threads": 128},
                                            {"BN": 1024, "threads": 128}, {"BN": 2048, "threads": 256}], "f16"),
    ("accum", {"B": 16384, "N": 4096}, {}, [{}, {"BN": 4096, "threads": 512}, {"BN": 4096, "threads": 256},
                                            {"BN": 4096, "threads": 1024}, {"BN": 1024, "threads": 128},
                                            {"BN": 2048, "threads": 256}, {"BN": 2048, "threads": 128}], ""),
    *[("accum", {"B": b, "N": n}, {}, [{}, {"BN": 2048}, {"BN": 512}, {"BN": 4096, "threads": 1024}], "")
      for b in (1, 64) for n in (288, 768, 4096)],
    ("silu_mul", {"B": 16384, "H": 4096}, {}, [{}, {"BN": 2048}, {"BN": 4096, "threads": 256},
                                                                {"BN": 4096, "threads": 512}, {"BN": 1024, "threads": 128}],
     "f16"),
    ("sgemm", {"M": 4096, "N": 4096, "K": 4096}, {}, [{"BN": 256, "BK": 32, "WNITER": 2, "threads": 256},
                                                      {"BN": 256, "BK": 32, "WNITER": 2, "threads": 256, "stages": 3},
                                                      {"BN": 256, "BK": 16, "WNITER": 2, "threads": 256, "stages": 3},
                                                      {"BN": 256, "BK": 16, "WNITER": 2, "threads": 256, "stages": 4}],
     ""),
    ("attention", {"H": 32, "HD": 128, "S": 1024, "KVD": 4096}, {"pos": 1023}, [{}, {"BT": 32}, {"BT": 128, "threads": 512}], ""),
    ("attention_split", {"H": 32, "HD": 128, "S": 1024, "KVD": 4096}, {"pos": 1023},
     [{}, {"SPLIT": 4}, {"BT": 32}, {"BT": 32, "threads": 128}, {"SPLIT": 4, "BT": 128, "threads": 512},
      {"BT": 128}, {"BT": 128, "threads": 512}, {"threads": 512}, {"threads": 128}], ""),
]

# stories110M's per-layer kernels at their shapes in tkc.models.llama (dim 768, hidden 2048, 12
# heads of 64), selected with the argument `llama110m`; "f16" retypes every f32 tensor
_ATT = {"H": 12, "HD": 64, "S": 1024, "KVD": 768}
LLAMA110M = [
    ("attention", _ATT, {"pos": 63}, [{}, {"BT": 64, "threads": 128}, {"BT": 32, "threads": 128},
                                      {"BT": 32, "threads": 64}, {"BT": 16, "threads": 64}, {"BT": 32, "threads": 32},
                                      {"BT": 128, "threads": 256}], ""),
    ("attention", _ATT, {"pos": 511}, [{}, {"BT": 64, "threads": 128}, {"BT": 32, "threads": 128},
                                       {"BT": 32, "threads": 64}, {"BT": 128, "threads": 256}], ""),
    ("attention_split", _ATT, {"pos": 63}, [{}, {"SPLIT": 2}, {"SPLIT": 2, "BT": 32, "threads": 128},
                                            {"SPLIT": 4, "BT": 16, "threads": 64}, {"SPLIT": 2, "BT": 32, "threads": 64}], ""),
    ("attention_split", _ATT, {"pos": 511}, [{}, {"SPLIT": 2}, {"SPLIT": 8, "BT": 64, "threads": 256},
                                             {"SPLIT": 4, "BT": 32, "threads": 128}], ""),
    ("rope", {"B": 1, "D": 1536}, {"pos": 63}, [{"HD": 64}, {"HD": 64, "BR": 1}, {"HD": 64, "BR": 1, "threads": 64}], ""),
    ("rmsnorm", {"B": 1, "N": 768}, {}, [{"BR": 1}, {"BR": 1, "threads": 256}, {"BR": 1, "threads": 128}], ""),
    ("rmsnorm_matmul", {"D": 2304, "K": 768}, {}, [{}, {"BD": 2}, {"BD": 8}, {"BK": 256}, {"BD": 2, "BK": 256},
                                                   {"BD": 8, "BK": 1024, "threads": 256}, {"threads": 64}], "f16"),
    ("matmul_residual", {"D": 768, "K": 768}, {}, [{}, {"BD": 2}, {"BD": 1}, {"BK": 256}, {"BD": 2, "BK": 256},
                                                   {"BD": 1, "BK": 256, "threads": 32}, {"threads": 64}], "f16"),
    ("matmul_residual", {"D": 768, "K": 2048}, {}, [{}, {"BD": 2}, {"BD": 1}, {"BK": 1024}, {"BD": 2, "BK": 1024},
                                                    {"BD": 2, "BK": 2048, "threads": 256}, {"threads": 256}], "f16"),
    ("ffn_gate", {"H": 2048, "K": 768}, {}, [{}, {"BD": 2}, {"BD": 8}, {"BK": 256}, {"BD": 2, "BK": 256},
                                             {"BD": 8, "BK": 1024, "threads": 256}, {"threads": 64}], "f16"),
]

# attention.tk at benchmarks/transformer.py's decode shapes (multi-head, S = 1024), positions 1
# and 1023, selected with the argument `attdecode`
_ATT_TILES = [{}, {"BT": 128, "threads": 256}, {"BT": 128, "threads": 384}, {"BT": 256, "threads": 512},
              {"BT": 256, "threads": 384}, {"BT": 256, "threads": 768}, {"BT": 256, "threads": 1024},
              {"BT": 512, "threads": 768}, {"BT": 512, "threads": 1024}]
ATT_DECODE = [("attention", {"H": h, "HD": hd, "S": 1024, "KVD": h * hd}, {"pos": pos}, _ATT_TILES, "")
              for h, hd in ((6, 48), (8, 64), (12, 64), (32, 128)) for pos in (1, 1023)]


# grids of many small blocks, selected with the argument `trigger`: the cost of PTX
# `griddepcontrol.launch_dependents` (codegen/cuda_prelude.py `tk_pdl_enter`) is measured by
# running this list in trees whose prelude has the trigger, the wait or neither
# (docs/PERFORMANCE.md "launch_dependents")
TRIGGER = [
    ("rope", {"B": 16384, "D": 4096}, {"pos": 1023}, [{"BR": 4, "threads": 32}, {"BR": 8, "threads": 64},
                                                      {"BR": 16, "threads": 128}, {"BR": 32, "threads": 256}], ""),
    ("accum", {"B": 16384, "N": 4096}, {}, [{}, {"BN": 512, "threads": 128}, {"BN": 4096, "threads": 1024}], "f16"),
    ("accum", {"B": 16384, "N": 4096}, {}, [{}, {"BN": 2048, "threads": 512}, {"BN": 4096, "threads": 1024}], ""),
]


def path_of(name: str, dtype: str, workdir: str) -> str:
    from transformer import source

    return source({"kernel": name, "dtype": dtype}, workdir)


def build(path, consts, dims, cache, target="cuda"):
    try:
        import tkc

        tkc.compile(path, target=target, cache_dir=cache, **consts).specialize(dims)
        return "ok"
    except Exception as exc:  # noqa: BLE001
        return str(exc).splitlines()[0]


def main() -> None:
    import torch

    import tkc
    from tkc import driver, oracle

    from tkc.bench import graph_ms

    cache = tempfile.mkdtemp()
    args = [a for a in sys.argv[1:] if not a.startswith("--target=")]
    target = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--target=")), "cuda")
    if args == ["llama110m"]:
        todo = LLAMA110M
    elif args == ["attdecode"]:
        todo = ATT_DECODE
    elif args == ["trigger"]:
        todo = TRIGGER
    else:
        todo = [c for c in CASES if not args or c[0] in args]
    jobs = [(path_of(n, dt, cache), c, d, cache, target) for n, d, _, vs, dt in todo for c in vs]
    with cf.ProcessPoolExecutor(14, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(build, *zip(*jobs)))
    timer = Timer(False, 25, 100)
    print("| example | constants | us (calls) | us (graph) | rel err |\n|---|---|---|---|---|")
    from transformer import eager_fns

    fns = eager_fns()
    for name, dims, scalars, variants, dtype in todo:
        path = path_of(name, dtype, cache)
        try:  # torch eager on the same inputs, in the same run
            module = driver.frontend(path, dims)
            sets = [oracle.random_inputs(module, s, "cuda", "normal", scalars) for s in range(3)]
            hd = variants[0].get("HD", 128)
            fn = fns[name] if name != "rope" else (lambda x, pos: fns["_rope"](x, pos, hd))
            us = timer(rotating(fn, sets)) * 1e3
            gus = graph_ms(timer, fn, sets) * 1e3
            print(f"| {name}{' ' + dtype if dtype else ''} | torch eager | {us:.1f} | {gus:.1f} | |", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(f"| {name} | torch eager | - | - | {str(exc).splitlines()[0][:80]} |", flush=True)
        for consts in variants:
            try:
                module = driver.frontend(path, {**dims, **consts})
                sets = [oracle.random_inputs(module, s, "cuda", "normal", scalars) for s in range(3)]
                k = tkc.compile(path, target=target, cache_dir=cache, **consts)
                out = k(*sets[0])
                err = oracle.rel_error(out, oracle.reference(module, sets[0])[0])
                us = timer(rotating(k, sets)) * 1e3
                gus = graph_ms(timer, k, sets) * 1e3
                print(f"| {name}{' ' + dtype if dtype else ''} | {consts or 'default'} | {us:.1f} | {gus:.1f} "
                      f"| {err:.1e} |", flush=True)
            except Exception as exc:  # noqa: BLE001
                print(f"| {name} | {consts} | - | - | {str(exc).splitlines()[0][:80]} |", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

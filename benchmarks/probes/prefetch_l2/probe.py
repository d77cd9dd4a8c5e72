"""Probe (issue 11): what the L2 prefetch before the programmatic-launch wait (codegen/cuda_prefetch.py)
buys in the llama graph, and what it costs kernels launched the ordinary way.

In one process, each pair compiled twice into separate caches: as generated, and with the
prefetch left out (`cuda_prefetch.boxes` patched to find nothing):
* llama decode tok/s (benchmarks/llama.py's decode_rate, random weights, 64 positions) at
  stories110M f16 and stories15M f32: programmatic launch with and without the prefetch, and
  without programmatic launch (with the prefetch);
* CUDA-graph times of bandwidth-bound examples at issue 10's shapes (ordinary launches), checked
  against float64 torch.
Run on the device machine: `python3 benchmarks/probes/prefetch_l2/probe.py`.
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

KERNELS = [  # (example, dims, consts, dtype of the tensors)
    ("accum", {"B": 16384, "N": 4096}, {"BN": 2048}, "f16"),
    ("silu_mul", {"B": 16384, "H": 4096}, {}, "f16"),
    ("rmsnorm", {"B": 16384, "N": 4096}, {}, "f16"),
    ("matmul_f16", {"D": 11008, "K": 4096}, {"BD": 2, "BK": 2048, "threads": 256}, ""),
    ("matmul_q8", {"D": 11008, "G": 64, "GS": 64}, {}, ""),
    ("matmul_f16", {"D": 2304, "K": 768}, {}, ""),
]


def main() -> None:
    import torch

    import tkc
    from codegen import cuda_prefetch
    from llama import MODELS, decode_rate
    from tkc import driver, oracle
    from tkc.bench import Timer, graph_ms
    from tkc.models import llama_files as lf
    from tkc.models.llama import Llama
    from transformer import source

    real = cuda_prefetch.boxes
    forms = {"prefetch": real, "no prefetch": lambda *a: []}
    caches = {name: tempfile.mkdtemp() for name in forms}
    print(torch.cuda.get_device_name())
    print("| model | dtype | variant | tok/s |\n|---|---|---|---|")
    for label, dtype in (("110M", "f16"), ("15M", "f32")):
        dim, hidden, layers, heads, kv_heads, vocab, seq = MODELS[label]
        config = lf.Config(dim, hidden, layers, heads, kv_heads, vocab, seq, shared_classifier=True)
        weights = lf.random_weights(config, seed=0)
        for name, programmatic in (("prefetch", True), ("no prefetch", True), ("prefetch", False)):
            cuda_prefetch.boxes = forms[name]
            model = Llama(config, weights, target="cuda", cache_dir=caches[name], dtype=dtype, programmatic=programmatic)
            rate = decode_rate(model.step, 64, "cuda")
            print(f"| {label} | {dtype} | {name}, {'pdl' if programmatic else 'no pdl'} | {rate:.0f} |", flush=True)
            del model
            torch.cuda.empty_cache()
    cuda_prefetch.boxes = real
    timer = Timer(False, 25, 100)
    work = tempfile.mkdtemp()
    print("\n| example | dims | prefetch (graph us) | no prefetch (graph us) |\n|---|---|---|---|")
    for ex, dims, consts, dt in KERNELS:
        path = source({"kernel": ex, "dtype": dt}, work)
        module = driver.frontend(path, {**dims, **consts})
        sets = [oracle.random_inputs(module, s, "cuda", "normal", {}) for s in range(3)]
        times = []
        for name, fn in forms.items():
            cuda_prefetch.boxes = fn
            k = tkc.compile(path, target="cuda", cache_dir=caches[name], **consts)
            err = oracle.rel_error(k(*sets[0]), oracle.reference(module, sets[0])[0])
            assert err < 1e-2, (ex, name, err)
            times.append(graph_ms(timer, k, sets) * 1e3)
        cuda_prefetch.boxes = real
        print(f"| {ex}{' ' + dt if dt else ''} | {dims} {consts or ''} | {times[0]:.1f} | {times[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()

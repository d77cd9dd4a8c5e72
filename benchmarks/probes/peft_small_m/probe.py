"""Probe (issue 13): a PEFT MiSS layer at a few tokens, where its time is launches and host work.

Per dtype (f16, bf16), shape (K x N, R: the q/v projection 3072 x 3072, 64 and the MLP
up-projection 3072 x 8192, 16) and token count M, every variant checked against float64 first:
* `peft`: PEFT's own forward of the layer (benchmarks/peft_miss.py's layer);
* `split`: what tkc.integrations.peft ran before examples/peft_miss_linear.tk: torch's base
  layer, then add_miss (examples/peft_miss.tk, M dynamic, the cost model's schedule);
* `fused T [consts]`: examples/peft_miss_linear.tk (or its bf16 twin) on target T: the base GEMV,
  its bias and the adapter in one launch, M dynamic.
Times in us: do_bench medians with the host's work included (a layer call from Python), and the
kernels alone as CUDA-graph replays (`graph`).

    source .device/env.sh && python3 benchmarks/probes/peft_small_m/probe.py [--ms 1,4,16] [--configs "BD=4;BD=8,BK=512"]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,2,4,8,16,32")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--targets", default="tilelang,cuda")
    ap.add_argument("--configs", default="", help="`;`-separated constant sets of the fused kernel, e.g. BD=8,BK=512")
    args = ap.parse_args()
    import torch

    import tkc
    import tkc.integrations.peft as tp
    from peft_miss import DTYPES, GPU_SHAPES, layer, prewarm, reference
    from tkc import oracle
    from tkc.bench import Timer, graph_ms

    timer = Timer(cpu=False, warmup_ms=25, rep_ms=150)
    cache = tempfile.mkdtemp(prefix="tkc-probe-peft-small-")
    configs = [dict((kv.split("=")[0], int(kv.split("=")[1])) for kv in c.split(",") if kv) for c in
               ([""] + [c for c in args.configs.split(";") if c])]
    print(torch.cuda.get_device_name())
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(cache, "tilelang"))
    prewarm(GPU_SHAPES, args.dtypes.split(","), cache, 14)  # the `split` variant's bucket kernels
    for dt in args.dtypes.split(","):
        dtype = getattr(torch, DTYPES[dt])
        path = os.path.join(ROOT, "examples", "peft_miss_linear.tk" if dt == "f16" else "peft_miss_linear_bf16.tk")
        fused = {(t, tuple(sorted(c.items()))): tkc.compile(path, target=t, cache_dir=cache, **c)
                 for t in args.targets.split(",") for c in configs}
        for k, n, r in GPU_SHAPES:
            model, miss = layer(k, n, r, dtype, "cuda")
            block, weight, bias = miss.miss_block["default"], miss.base_layer.weight, miss.base_layer.bias
            for m in (int(v) for v in args.ms.split(",")):
                xs = [torch.randn(m, k, device="cuda").to(dtype) for _ in range(8)]
                want = reference(xs[0], miss, r)
                tol = 4 * ((1 + oracle.C_MID) * oracle.UNIT_ROUNDOFF[dt] + oracle.C_ACC * (k + r) * oracle.UNIT_ROUNDOFF["f32"])
                variants = {"peft": lambda x: model(x),
                            "split": lambda x: tp.add_miss(miss.base_layer(x), x, block, "tilelang", cache)}
                for (t, c), kern in fused.items():
                    name = f"fused {t}" + (" " + ",".join(f"{a}={b}" for a, b in c) if c else "")
                    variants[name] = (lambda kern: lambda x: kern(x, weight, bias.view(1, n), block))(kern)
                cells = []
                with torch.inference_mode():
                    for name, fn in variants.items():
                        err = oracle.rel_error(fn(xs[0]), want)
                        it = iter(range(10**9))
                        us = timer(lambda: fn(xs[next(it) % 8])) * 1e3
                        try:
                            g = graph_ms(timer, fn, [(x,) for x in xs]) * 1e3
                        except Exception:  # PEFT's forward may not capture
                            g = float("nan")
                        cells.append(f"{name} {us:.1f}/{g:.1f}" + ("" if err <= tol else f" WRONG {err:.1e}"))
                print(f"{dt} K{k} N{n} R{r} M{m}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()

"""Benchmark (issue 11): llama2.c decoding on tkc kernels (tkc.models.llama) against torch eager
(tkc.models.llama_reference, run.c's forward in torch), tokens per second at the shapes of
stories15M, stories42M and stories110M with random weights, f32, f16 and int8.

Each variant decodes STEPS positions greedily from BOS (the argmax feeds the next step) after a
warm-up of the same length; tokens/s is STEPS over the wall time (CUDA synchronized). "% floor"
is that rate over the weight-bytes floor: one read of every weight matrix (in the variant's
dtype; int8 with its f32 scales) per token at the device-to-device copy bandwidth measured in the
same run. Variants: "tkc" (the step in one CUDA graph, launched programmatically; greedy
decoding queues the steps ahead of the host, tkc.models.llama.Llama.greedy), "tkc one by one"
(the same graph, the host waiting for each token before the next step), "tkc no pdl"
(the same graph without programmatic dependent launch), "tkc no graph" (one Python call per
kernel), "torch eager" (tkc.models.llama_reference.TorchLlama, run.c's forward), "torch graph"
and "torch.compile" (StaticTorchLlama: the same forward with position-independent shapes,
replayed from a CUDA graph, or compiled with `mode="reduce-overhead"`; its first-call compile
is not timed). The torch variants run in f16 for f16 and in f32 on the dequantized weights for
int8. Rows are written to --out as they finish.

Run on the device machine: `python3 benchmarks/llama.py [--models 15M,42M] [--dtypes f32,int8]
[--steps 64] [--out FILE]`; `--cpu` is a dry run on a tiny model through tilelang-cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len): llama2.c's model table
MODELS = {"15M": (288, 768, 6, 6, 6, 32000, 256), "42M": (512, 1376, 8, 8, 8, 32000, 1024),
          "110M": (768, 2048, 12, 12, 12, 32000, 1024)}
CPU_MODEL = {"tiny": (64, 96, 2, 4, 2, 300, 32)}
MATRICES = ("wq", "wk", "wv", "wo", "w1", "w2", "w3", "wcls")


def weight_bytes(config, dtype: str) -> int:
    """Bytes of the weight matrices one token reads (norms and the embedding row are negligible)."""
    n = 0
    for name, shape in config.shapes().items():
        if name not in MATRICES:
            continue
        count = 1
        for s in shape:
            count *= s
        n += {"f32": 4 * count, "f16": 2 * count, "int8": count + 4 * (count // 32)}[dtype]
    return n


def copy_rate(device: str) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + written), 256 MiB."""
    import torch

    if device != "cuda":
        return 0.0
    a = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        b.copy_(a)
    torch.cuda.synchronize()
    return 2 * a.numel() * 10 / (time.perf_counter() - t)


class _OneByOne:
    """A tkc model decoded one token at a time (`next_token`: the host waits for each token
    before it queues the next step), without `greedy`'s queue."""

    def __init__(self, model):
        self.next_token = model.next_token


def decode_rate(model, steps: int, device: str) -> float:
    """Tokens/s of `steps` greedy positions from BOS, after one warm-up pass: the model's
    `greedy` (tkc.models.llama.Llama.greedy: the steps queued ahead of the host, as `tkc llama`
    decodes greedily) where it has one, else its `step` and torch.argmax, one token at a time."""
    import torch

    nxt = getattr(model, "next_token", None) or (lambda token, pos: int(torch.argmax(model.step(token, pos))))
    greedy = getattr(model, "greedy", None)

    def run():
        if greedy is not None:  # the steps queued ahead of the host, as `tkc llama` decodes greedily
            for _ in greedy(1, 0, steps):
                pass
            return
        token = 1
        for pos in range(steps):
            token = nxt(token, pos)

    run()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    run()
    if device == "cuda":
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - t)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated of {', '.join(MODELS)}")
    p.add_argument("--dtypes", default="f32,f16,int8")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--variants", default="", help="comma-separated subset of the variants (default: all)")
    p.add_argument("--cpu", action="store_true", help="dry run: a tiny model through tilelang-cpu")
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    args = p.parse_args(argv)

    import torch

    from tkc.models import llama_files as lf
    from tkc.models.llama import Llama
    from tkc.models.llama_reference import StaticTorchLlama, TorchLlama

    device = "cpu" if args.cpu else "cuda"
    target = "tilelang-cpu" if args.cpu else "cuda"
    models = CPU_MODEL if args.cpu else {m: MODELS[m] for m in args.models.split(",")}
    steps = min(args.steps, 4) if args.cpu else args.steps
    rate = copy_rate(device)
    rows = []
    print("| model | dtype | variant | tok/s | % floor | status |\n|---|---|---|---|---|---|", flush=True)
    for label, (dim, hidden, layers, heads, kv_heads, vocab, seq) in models.items():
        config = lf.Config(dim, hidden, layers, heads, kv_heads, vocab, seq, shared_classifier=True)
        weights = lf.random_weights(config, seed=0)
        for dtype in args.dtypes.split(","):
            floor = rate / weight_bytes(config, dtype) if rate else 0.0
            if dtype == "int8":  # the model and the reference read the same dequantized values
                with tempfile.TemporaryDirectory() as d:
                    lf.write_v2(os.path.join(d, "m.bin"), config, weights, group_size=32)
                    cfg, w = lf.load_checkpoint(os.path.join(d, "m.bin"))
            else:
                cfg, w = config, weights
            tdt = torch.float16 if dtype == "f16" else torch.float32
            variants = [("tkc", lambda: Llama(cfg, w, target=target, cache_dir=args.cache_dir, dtype=dtype)),
                        ("torch eager", lambda: TorchLlama(cfg, w, device=device, dtype=tdt))]
            if device == "cuda":  # (on the CPU "tkc" is already one call per kernel)
                variants += [("tkc one by one", lambda: _OneByOne(Llama(cfg, w, target=target,
                                                                       cache_dir=args.cache_dir, dtype=dtype))),
                             ("tkc no pdl", lambda: Llama(cfg, w, target=target, cache_dir=args.cache_dir, dtype=dtype,
                                                          programmatic=False)),
                             ("tkc no graph", lambda: Llama(cfg, w, target=target, cache_dir=args.cache_dir,
                                                            dtype=dtype, graph=False)),
                             ("torch graph", lambda: StaticTorchLlama(cfg, w, device=device, dtype=tdt, mode="graph")),
                             ("torch.compile", lambda: StaticTorchLlama(cfg, w, device=device, dtype=tdt,
                                                                        mode="compile"))]
            for name, make in variants:
                if args.variants and name not in args.variants.split(","):
                    continue
                row = {"model": label, "dtype": dtype, "variant": name, "steps": steps}
                try:
                    tok_s = decode_rate(make(), steps, device)
                    row.update(tok_s=tok_s, floor_fraction=tok_s / floor if floor else None, status="ok")
                except Exception as exc:  # noqa: BLE001 (a row, not the end of the run)
                    row.update(status="error", note=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                rows.append(row)
                pct = f"{100 * row['floor_fraction']:.0f}" if row.get("floor_fraction") else "-"
                print(f"| {label} | {dtype} | {name} | {row.get('tok_s', 0):.1f} | {pct} | {row['status']} |", flush=True)
                if args.out:
                    with open(args.out, "w", encoding="utf-8") as f:
                        json.dump({"copy_bytes_per_s": rate, "rows": rows}, f, indent=1)
            if device == "cuda":
                torch.cuda.empty_cache()
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

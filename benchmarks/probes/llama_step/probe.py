"""Probe (issue 11): where one decode step of tkc.models.llama goes on the GPU.

For each model and dtype: the captured step's graph replay time (CUDA events over batches of 20
replays from position POS, each replay the next position, no host work between them); the sum of its kernels' own durations from
torch.profiler (CUPTI) over the same replays, per kernel name, so that replay - sum is the time
between kernels; and the same step with every layer reading layer 0's weights ("l2": each
layer's weight matrices, a few MB, stay in L2 between layers, so the GEMVs read L2 instead of
DRAM; the classifier still reads DRAM). With programmatic dependent launch a kernel's profiled
duration includes its wait for the one before it; the "-nopdl" forms capture the step with
ordinary launches, where the durations are the kernels' own. Random weights, greedy positions 0..POS-1 run first so
the caches hold something.

Run on the device machine: `python3 benchmarks/probes/llama_step/probe.py [--models 110M]
[--dtypes f16] [--pos 64] [--reps 200]`.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def replay_us(model, reps: int, pos: int, batch: int = 20) -> float:
    """Median us per replay over batches of `batch` replays. The step's graph advances the
    position it reads (greedy decoding's queue), so each batch starts again at `pos` (the copy
    that sets it runs before the batch's first event): positions pos .. pos + batch - 1."""
    import torch

    g = model._graph
    token = int(model._ids[0])
    for _ in range(10):
        g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(max(1, reps // batch)):
        model._set_inputs(token, pos)
        start.record()
        for _ in range(batch):
            g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / batch)
    times.sort()
    return times[len(times) // 2]


def kernel_table(model, reps: int, pos: int):
    """{kernel name: (calls per step, us per step)} from torch.profiler over `reps` replays
    (positions pos .. pos + reps - 1)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    g = model._graph
    model._set_inputs(int(model._ids[0]), pos)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    acc = collections.defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and ev.device_time > 0:
            a = acc[ev.name[:60]]
            a[0] += 1
            a[1] += ev.device_time
    return {k: (c / reps, t / reps) for k, (c, t) in acc.items()}


def argmax_forms(vocab: int = 32000) -> None:
    """Time of ways to take the argmax of the logits [vocab] f32 (the step's last op in greedy
    decoding), replayed from a CUDA graph (tkc.bench.graph_ms)."""
    import torch

    import tkc
    from tkc.bench import Timer, graph_ms

    x = torch.randn(1, vocab, device="cuda")
    out = torch.zeros(1, 1, dtype=torch.int32, device="cuda")
    k = tkc.compile(os.path.join(ROOT, "examples", "argmax.tk"), target="cuda")
    forms = {"torch.argmax": lambda x: torch.argmax(x), "max(dim=1)": lambda x: torch.max(x, 1)[1],
             "examples/argmax.tk (cuda)": lambda x: k(x, out)}
    for name, fn in forms.items():
        assert int(fn(x).reshape(())) == int(torch.argmax(x)), name
        print(f"argmax {name}: {graph_ms(Timer(False, 25, 100), fn, [(x,)], 20) * 1e3:.2f} us per call")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="110M")
    p.add_argument("--dtypes", default="f16")
    p.add_argument("--pos", type=int, default=64)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--argmax", action="store_true", help="first time forms of the logits' argmax")
    p.add_argument("--forms", default="dram,l2,dram-nopdl,l2-nopdl",
                   help="dram / l2 (every layer reads layer 0's weights), -nopdl: ordinary launches, -layer: one "
                        "llama_layer.tk launch per layer instead of five kernels, `:NAME=V` its constants; -grid / -attn: "
                        "attention_grid.tk / attention.tk for the attention at every position (default: the model's)")
    args = p.parse_args(argv)

    from llama import MODELS, copy_rate, weight_bytes

    from tkc.models import llama_files as lf
    from tkc.models.llama import Llama

    if args.argmax:
        argmax_forms()
    rate = copy_rate("cuda")
    print(f"copy {rate / 1e12:.2f} TB/s")
    rows = []
    for label in args.models.split(","):
        dim, hidden, layers, heads, kv_heads, vocab, seq = MODELS[label]
        config = lf.Config(dim, hidden, layers, heads, kv_heads, vocab, seq, shared_classifier=True)
        weights = lf.random_weights(config, seed=0)
        for dtype in args.dtypes.split(","):
            floor_us = weight_bytes(config, dtype) / rate * 1e6
            for form in args.forms.split(","):
                base, *consts = form.split(":")  # `dram:NB=528:BD=2`: llama_layer.tk's constants
                consts = {k: int(v) for k, v in (c.split("=") for c in consts)}
                model = Llama(config, weights, target="cuda", dtype=dtype, programmatic=not base.endswith("nopdl"),
                              layer_kernel="layer" in base, layer_consts=consts or None,
                              attention="attention_grid" if "grid" in base else "attention" if "attn" in base
                              else None)
                form = base
                if form.startswith("l2"):
                    for name, t in list(model.w.items()):
                        if name in ("wqkv", "wo", "w1", "w3", "w2"):
                            model.w[name] = t[0:1].expand_as(t)
                    for name, (q, s) in list(getattr(model, "q", {}).items()):
                        if name != "wcls":
                            model.q[name] = (q[0:1].expand_as(q), s[0:1].expand_as(s))
                token = 1
                try:
                    for pos in range(args.pos):
                        token = model.next_token(token, pos)
                except Exception as exc:  # noqa: BLE001 - a form that cannot launch here (residency)
                    print(f"\n{label} {dtype} {form}: {str(exc).splitlines()[0]}")
                    continue
                model._set_inputs(token, args.pos)
                us = replay_us(model, args.reps, args.pos)
                table = kernel_table(model, 20, args.pos)
                busy = sum(t for _, t in table.values())
                calls = sum(c for c, _ in table.values())
                form = form + "".join(f":{k}={v}" for k, v in consts.items())
                rows.append((label, dtype, form, us, busy, calls, floor_us))
                print(f"\n{label} {dtype} {form}: replay {us:.1f} us per step, kernels {busy:.1f} us in "
                      f"{calls:.0f} launches, between kernels {us - busy:.1f} us; floor {floor_us:.1f} us")
                for name, (c, t) in sorted(table.items(), key=lambda kv: -kv[1][1]):
                    print(f"  {t:7.1f} us  {c:5.1f} x {t / c:6.2f}  {name}")
                del model
    print("\n| model | dtype | weights | replay us | kernels us | launches | gaps us | floor us | % floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, dtype, form, us, busy, calls, floor_us in rows:
        print(f"| {label} | {dtype} | {form} | {us:.1f} | {busy:.1f} | {calls:.0f} | {us - busy:.1f} | "
              f"{floor_us:.1f} | {100 * floor_us / us:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

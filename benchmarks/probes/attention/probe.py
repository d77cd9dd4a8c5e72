"""Probe (issue 10): how close can decode attention at pos 1023, 32 heads of 128, f16 KV come to
the copy rate on the KV bytes (the target: 80%), and which structure gets there?

Variants, checked against float64 torch, then timed (do_bench median over 3 rotated input sets,
and as CUDA-graph replays) in one run:
* `eager`: benchmarks/transformer.py's torch function;
* `attention`, `attention_split`, `attention_grid`: the examples through `cuda`, at their defaults
  and tuned forms;
* `split_last_NS_U`: hand/split_last.cu: NS blocks per head, the head's last block merges;
* `kv_read_B_U`: hand/kv_read.cu: only the loads of the KV rows (the ceiling at this size).
Run on the device machine: `python3 benchmarks/probes/attention/probe.py [PREFIX ...]` (the variants
whose names start with a PREFIX; default all).
"""

from __future__ import annotations

import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

H, HD, S, KVD, POS = 32, 128, 1024, 4096, 1023


def main() -> None:
    import torch

    import tkc
    from miss import copy_bandwidth
    from tkc.bench import Timer, graph_ms, rotating
    from tkc.cuda_runtime import CudaLaunch
    from transformer import eager_fns

    timer = Timer(cpu=False, warmup_ms=25, rep_ms=200)
    copy = copy_bandwidth(timer, "cuda", 1 << 30)
    print(f"{torch.cuda.get_device_name()}: copy {copy['tbps']:.2f} TB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    sets = [(torch.randn((H, HD), device="cuda", generator=g),
             torch.randn((S, KVD), device="cuda", generator=g).half(),
             torch.randn((S, KVD), device="cuda", generator=g).half(), POS) for _ in range(3)]
    nbytes = 2 * (POS + 1) * KVD * 2

    def ref(q, kc, vc, pos):
        k = kc[:pos + 1].double().reshape(pos + 1, H, HD)
        v = vc[:pos + 1].double().reshape(pos + 1, H, HD)
        p = torch.softmax(torch.einsum("hd,thd->ht", q.double(), k) / HD ** 0.5, 1)
        return torch.einsum("ht,thd->hd", p, v)

    cache = tempfile.mkdtemp()
    variants = [("eager", eager_fns()["attention"])]
    for name, consts in [("attention", {}), ("attention", {"BT": 128, "threads": 512}), ("attention_split", {}),
                         ("attention_split", {"SPLIT": 8, "threads": 128}), ("attention_split", {"SPLIT": 16}),
                         ("attention_split", {"SPLIT": 16, "threads": 128}),
                         ("attention_split", {"SPLIT": 16, "BT": 32, "threads": 128})]:
        k = tkc.compile(os.path.join(ROOT, "examples", name + ".tk"), target="cuda", cache_dir=cache, **consts)
        variants.append((f"{name} {consts or ''}", k))
    for consts in ({}, {"SPLIT": 8}):  # a cooperative launch; O is its first output
        k = tkc.compile(os.path.join(ROOT, "examples", "attention_grid.tk"), target="cuda", cache_dir=cache, **consts)
        variants.append((f"attention_grid {consts or ''}", lambda q, kc, vc, pos, k=k: k(q, kc, vc, pos)[0]))

    def load(file, defines, grid):
        with open(os.path.join(HERE, "hand", file), encoding="utf-8") as f:
            text = f.read()
        text = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + text.replace('"grid": [512', f'"grid": [{grid}')
        path = os.path.join(cache, "_".join([file[:-3]] + [f"{k}{v}" for k, v in defines.items()]) + f"_{grid}.cu")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return CudaLaunch(path, text)

    for ns in (8, 16, 32):
        for u in (4, 8):
            launch = load("split_last.cu", {"NS": ns, "U": u}, H * ns)
            wm = torch.empty(H * ns, device="cuda")
            wl = torch.empty(H * ns, device="cuda")
            wacc = torch.empty(H * ns * HD, device="cuda")
            count = torch.zeros(H, device="cuda", dtype=torch.int32)

            def fn(q, kc, vc, pos, launch=launch, wm=wm, wl=wl, wacc=wacc, count=count):
                o = torch.empty((H, HD), device="cuda")
                launch(q, kc, vc, wm, wl, wacc, count, o, pos)
                return o

            variants.append((f"split_last NS={ns} U={u}", fn))
    reads = []
    for blocks in (264, 528, 1056):
        for u in (4, 8):
            launch = load("kv_read.cu", {"U": u}, blocks)
            sink = torch.empty(blocks, device="cuda")
            reads.append((f"kv_read {blocks} blocks U={u}",
                          lambda q, kc, vc, pos, launch=launch, sink=sink: launch(kc, vc, sink, pos)))
    rows = []
    keep = sys.argv[1:]  # name prefixes to run (default: all)
    for name, fn in [v for v in variants + reads if not keep or any(v[0].startswith(k) for k in keep)]:
        if not name.startswith("kv_read"):
            for s in sets[:2]:
                for _ in range(2):  # twice: the per-head counters must be reset by the launch
                    out = fn(*s)
                r = ref(*s)
                err = ((out.double() - r).norm() / r.norm()).item()
                if not err < 1e-4:
                    raise SystemExit(f"{name}: relative error {err}")
        us = timer(rotating(fn, sets)) * 1e3
        gus = graph_ms(timer, fn, sets) * 1e3
        rows.append((name, us, gus, nbytes / (gus * 1e-6) / 1e12 / copy["tbps"] * 100))
        print(f"{name:<44} {us:8.1f} {gus:9.1f} {rows[-1][3]:6.0f}%", flush=True)
    print(f"\n{'variant':<44} {'us':>8} {'graph us':>9} {'% copy':>7}")
    for name, us, gus, pct in rows:
        print(f"{name:<44} {us:8.1f} {gus:9.1f} {pct:6.0f}%")


if __name__ == "__main__":
    main()

"""Benchmark a PEFT MiSS layer with and without tkc (issue 13, item 5).

A `torch.nn.Linear(K, N)` wrapped by PEFT 0.21.2 with a MiSS adapter (balance form, rank R, its
`miss_block` random: PEFT starts it at zero), in f16 or bf16, inference. Per token count M:

* `peft`: PEFT's own forward of the layer (base GEMM + shard sum + product + add);
* `tkc`: the same layer after `tkc.integrations.peft.enable` (base GEMM from torch, then
  examples/peft_miss.tk: shard sum, product and add in one kernel, M dynamic, the decomposition
  chosen per M bucket by the cost model; at M = 1 on `tilelang` the whole layer in one kernel,
  examples/peft_miss_linear.tk);
* `peft adapter` / `tkc adapter`: the adapter branch alone, its add into the base output
  included: PEFT's ops (pad, reshape, sum, matmul, add) on a given base output vs `add_miss`.

Every variant is checked against a float64 computation of the layer first (relative error within
the f16/bf16 budget of tkc/oracle.py), then timed with `triton.testing.do_bench` (median) over
rotated inputs larger than L2 (benchmarks/miss.py's method). Shapes default to a 3B-class
model's q/v projection (K = N = 3072, R = 64) and MLP up-projection (K = 3072, N = 8192, R = 16).

    source .device/env.sh && python3 benchmarks/peft_miss.py --out $OUT/peft_miss.json
    python3 benchmarks/peft_miss.py --cpu        # end to end on the CPU (interp, tiny shapes)
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is built here, nothing comes from the hub
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for p in (ROOT, os.path.join(ROOT, "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

GPU_SHAPES = [(3072, 3072, 64), (3072, 8192, 16)]  # (K, N, R)
GPU_MS = [1, 16, 128, 1024, 4096, 16384]
CPU_SHAPES, CPU_MS = [(100, 72, 16)], [3, 40]
DTYPES = {"f16": "float16", "bf16": "bfloat16"}


class _One:
    """A module with one Linear named `proj` (what the MissConfig targets)."""

    @staticmethod
    def build(k: int, n: int):
        import torch

        class One(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(k, n)

            def forward(self, x):
                return self.proj(x)

        return One()


def layer(k: int, n: int, r: int, dtype, device: str):
    """(model, PEFT MissLinear) with a random miss_block, in `dtype` on `device`, eval mode."""
    import peft
    import torch

    torch.manual_seed(0)
    model = peft.get_peft_model(_One.build(k, n), peft.MissConfig(r=r, target_modules=["proj"]))
    model = model.to(device, dtype).eval()
    miss = model.base_model.model.proj
    with torch.no_grad():
        block = miss.miss_block["default"]
        block.copy_(torch.randn(block.shape, device=device, dtype=torch.float32).to(dtype) / math.sqrt(k))
    return model, miss


def peft_adapter(y, x, block, r: int):
    """PEFT's adapter branch and its add (peft/tuners/miss/layer.py, balance form, inference)."""
    import torch.nn.functional as F

    k = x.shape[-1]
    xp = F.pad(x, (0, (-k) % r))
    return y + xp.reshape(*x.shape[:-1], -1, r).sum(dim=-2) @ block


def reference(x, miss, r: int):
    import torch.nn.functional as F

    base, block = miss.base_layer, miss.miss_block["default"].double()
    xd = x.double()
    shards = F.pad(xd, (0, (-x.shape[-1]) % r)).reshape(*x.shape[:-1], -1, r).sum(-2)
    return xd @ base.weight.double().T + base.bias.double() + shards @ block


def _prewarm(k: int, n: int, r: int, dtype: str, cache: str, consts: dict, target: str = "tilelang") -> str:
    """Worker: build one of the cost model's choices into the shared cache."""
    try:
        import tkc
        from tkc.integrations.peft import KERNEL_FILES

        path = os.path.join(ROOT, "examples", KERNEL_FILES[dtype])
        tkc.compile(path, target=target, cache_dir=cache, dynamic=("M",), **consts).specialize(
            {"M": 1, "K": k, "N": n, "R": r})
        return "ok"
    except Exception as exc:  # the main process compiles again and reports it
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def prewarm(shapes, dtypes, cache: str, workers: int, target: str = "tilelang") -> None:
    """Build every bucket's choice of the cost model in parallel processes (TileLang's builds
    take seconds each; the layer's first call then finds them in the cache)."""
    from dsl.parser import parse
    from tkc.integrations.peft import KERNEL_FILES
    from tkc.schedule import Chooser

    jobs = []
    for dt in dtypes:
        path = os.path.join(ROOT, "examples", KERNEL_FILES[DTYPES[dt]])
        text = open(path, encoding="utf-8").read()
        for k, n, r in shapes:
            chooser = Chooser(path, text, parse(text, path), {"K": k, "N": n, "R": r}, {}, ("M",))
            for consts in {tuple(sorted(c.consts.items())) for _, c in chooser.buckets()}:
                jobs.append((k, n, r, DTYPES[dt], cache, dict(consts), target))
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_prewarm, *zip(*jobs)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", action="store_true", help="tiny shapes on the CPU through target interp")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--ms", default=None, help="comma-separated token counts")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "peft_miss.json"))
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per variant (median kept)")
    ap.add_argument("--target", default="tilelang", choices=("tilelang", "cuda"),
                    help="tkc's GPU target for the layer and the adapter (default tilelang)")
    args = ap.parse_args(argv)
    import torch

    import miss as bench
    from tkc import oracle
    from tkc.integrations import peft as tkc_peft

    device = "cpu" if args.cpu else "cuda"
    target = "interp" if args.cpu else args.target
    shapes, ms = (CPU_SHAPES, CPU_MS) if args.cpu else (GPU_SHAPES, GPU_MS)
    ms = [int(m) for m in args.ms.split(",")] if args.ms else ms
    dtypes = args.dtypes.split(",")
    cache = tempfile.mkdtemp(prefix="tkc-bench-peft-")
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(cache, "tilelang"))
    if not args.cpu:
        prewarm(shapes, dtypes, cache, args.jobs, target)
    timer = bench.Timer(args.cpu, 50 if not args.cpu else 5, 200 if not args.cpu else 20)
    rows = []
    print(f"# PEFT MiSS layer on {torch.cuda.get_device_name() if not args.cpu else 'CPU'}, target {target}")
    for dt in dtypes:
        dtype = getattr(torch, DTYPES[dt])
        for k, n, r in shapes:
            model, miss = layer(k, n, r, dtype, device)
            block = miss.miss_block["default"]
            tol = 2 * ((1 + oracle.C_MID) * oracle.UNIT_ROUNDOFF[dt] + oracle.C_ACC * (k + r) * oracle.UNIT_ROUNDOFF["f32"])
            for m in ms:
                n_sets = max(2, min(50, math.ceil((200 << 20) / (m * (k + 2 * n) * 2))))
                xs = [torch.randn(m, k, device=device).to(dtype) for _ in range(n_sets)]
                ys = [miss.base_layer(x) for x in xs]
                def timed(fn):
                    it = iter(range(10**9))
                    return timer(lambda: fn(next(it) % n_sets)) * 1e3

                with torch.inference_mode():
                    want = reference(xs[0], miss, r)
                    errs = {"peft": oracle.rel_error(model(xs[0]), want),
                            "peft adapter": oracle.rel_error(peft_adapter(ys[0], xs[0], block, r), want)}
                    rounds: dict[str, list] = {}
                    # the variants alternate over `--rounds` rounds and each keeps the median of its
                    # rounds: the small-M rows are the host's time, which drifts within a run
                    for _ in range(args.rounds):
                        rounds.setdefault("peft", []).append(timed(lambda i: model(xs[i])))
                        rounds.setdefault("peft adapter", []).append(timed(lambda i: peft_adapter(ys[i], xs[i], block, r)))
                        tkc_peft.enable(model, target=target, cache_dir=cache)
                        try:  # the first call compiles every bucket's choice (prewarmed on the GPU)
                            if "tkc" not in errs:
                                errs["tkc"] = oracle.rel_error(model(xs[0]), want)
                                errs["tkc adapter"] = oracle.rel_error(
                                    tkc_peft.add_miss(ys[0], xs[0], block, target, cache), want)
                            rounds.setdefault("tkc", []).append(timed(lambda i: model(xs[i])))
                            rounds.setdefault("tkc adapter", []).append(
                                timed(lambda i: tkc_peft.add_miss(ys[i], xs[i], block, target, cache)))
                        finally:
                            tkc_peft.disable(model)
                    times = {name: statistics.median(ts) for name, ts in rounds.items()}
                row = {"dtype": dt, "M": m, "K": k, "N": n, "R": r, "times_us": times, "rounds_us": rounds,
                       "rel_err": errs, "tol": tol,
                       "ok": all(e <= tol for e in errs.values()),
                       "layer_speedup": times["peft"] / times["tkc"],
                       "adapter_speedup": times["peft adapter"] / times["tkc adapter"]}
                rows.append(row)
                print(f"{dt} M{m} K{k} N{n} R{r}: peft {times['peft']:.1f} tkc {times['tkc']:.1f} "
                      f"(x{row['layer_speedup']:.2f}) | adapter peft {times['peft adapter']:.1f} "
                      f"tkc {times['tkc adapter']:.1f} (x{row['adapter_speedup']:.2f})"
                      f"{'' if row['ok'] else '  WRONG ' + str(errs)}", flush=True)
                del xs, ys
    meta = {"device": torch.cuda.get_device_name() if not args.cpu else "cpu", "target": target,
            "torch": torch.__version__}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

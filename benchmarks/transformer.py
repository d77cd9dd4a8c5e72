"""Seed 002's transformer decode kernels (examples/*.tk) against torch eager and torch.compile.

Every example of issue 10 runs at llama2.c model shapes (dim 288/512/768/4096 with hidden
768/1376/2048/11008 and 6/8/12/32 heads: stories15M, 42M, 110M and a 7B-sized layer), one token
(B = 1) and a batch of 64 rows where the kernel has rows, attention and RoPE at positions 1 and
1023 of a 1024-position KV cache (`--group decode`); and at the issue's target shapes
(`--group targets`): the elementwise kernels at 16384 x 4096, the GEMVs on a 11008 x 4096
weight, attention at position 1023 with 32 heads of 128, SGEMM at 1024^3 and 4096^3 against
cuBLAS fp32 with TF32 off.

Method (benchmarks/README.md, /work/.library/device/METHOD.md): a device-to-device copy of 1 GiB
is timed once (bytes read + written: the bandwidth ceiling); every kernel's inputs come from
tkc/oracle.py (random normal values, valid token ids, the runtime `pos`), its outputs are checked
against the kernel's own float64 `reference` within the tolerance tkc derives from its dtypes
(WRONG otherwise, and the script exits 1), then each variant is timed with
`triton.testing.do_bench` (median) over input sets rotated to defeat the L2 when one set is
smaller than 256 MiB. "% copy" counts the bytes each kernel must move (inputs read once, outputs
written once; attention: the KV rows 0..pos) over the copy rate. Kernels are prebuilt in parallel
worker processes into one cache before anything is timed.

torch baselines are what a user would write: `F.rms_norm`, `W @ x` (cuBLAS GEMV), the int8
weights (matmul_w8a8: and activations) dequantized then multiplied, `F.silu(a) * g`, `x + d`,
the pairwise RoPE of llama2.c in torch, `einsum` + `softmax` attention, `F.embedding`;
torch.compile of the same functions (default mode; it recompiles for new shapes).

`--cpu` is a dry run of the whole script on tiny shapes (target tilelang-cpu, perf_counter, no
torch.compile). The table is printed last; `--out` writes the JSON (GPU, date, commit, rows).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from miss import Timer, copy_bandwidth, rotating  # noqa: E402  (the shared timing method)
from tkc.bench import graph_ms  # noqa: E402

# llama2.c model shapes: (name, dim, hidden, heads)
MODELS = [("15M", 288, 768, 6), ("42M", 512, 1376, 8), ("110M", 768, 2048, 12), ("7B", 4096, 11008, 32)]
SEQ = 1024  # KV cache positions
POSITIONS = (1, SEQ - 1)
BATCHES = (1, 64)


def _F():
    import torch.nn.functional as F

    return F


def eager_fns():
    """name -> the torch function a user would write, on the kernel's own inputs (call order)."""
    import torch

    F = _F()

    def rope(x, pos, hd):
        b, d = x.shape
        xf = x.float().view(b, d // hd, hd // 2, 2)
        freq = 10000.0 ** (-2.0 * torch.arange(hd // 2, device=x.device, dtype=torch.float32) / hd)
        a = pos * freq
        c, s = a.cos(), a.sin()
        out = torch.stack([xf[..., 0] * c - xf[..., 1] * s, xf[..., 0] * s + xf[..., 1] * c], -1)
        return out.view(b, d).to(x.dtype)

    def attention(q, kc, vc, pos):
        h, hd = q.shape
        group = h * hd // kc.shape[1]  # query heads per key/value head
        k = kc[:pos + 1].view(pos + 1, -1, hd).repeat_interleave(group, 1).float()
        v = vc[:pos + 1].view(pos + 1, -1, hd).repeat_interleave(group, 1).float()
        att = torch.softmax(torch.einsum("hd,thd->ht", q, k) / hd ** 0.5, 1)
        return torch.einsum("ht,thd->hd", att, v)

    def qkv_rope(x, g, wq, wk, wv, pos, kc, vc, hd):
        xn = F.rms_norm(x, (x.shape[1],), g[0], 1e-5).to(wq.dtype)
        q = rope((xn @ wq.T).float(), pos, hd)
        kc[pos] = rope((xn @ wk.T).float(), pos, hd)[0]
        vc[pos] = (xn @ wv.T)[0]
        return q.T, kc, vc

    return {
        "rmsnorm": lambda x, w: F.rms_norm(x, (x.shape[1],), w[0], 1e-5),
        "matmul": lambda w, x: w @ x.T,
        "matmul_f16": lambda w, x: (w @ x.to(w.dtype).T).float(),
        "matmul_q8": lambda w, s, x: (w.float() * s).view(w.shape[0], -1) @ x.view(-1, 1),
        "matmul_w8a8": lambda w, s, x, sx: (w.float() * s).view(w.shape[0], -1) @ (x.float() * sx).view(-1, 1),
        "silu_mul": lambda a, g: F.silu(a) * g,
        "accum": lambda x, d: x + d,
        "rope": None,  # needs HD: bound per shape below
        "attention": attention,
        "attention_split": attention,
        "attention_grid": attention,
        "embedding": lambda e, ids: F.embedding(ids, e),
        "rmsnorm_matmul": lambda x, g, w: w @ F.rms_norm(x, (x.shape[1],), g[0], 1e-5).T,
        "matmul_residual": lambda w, x, r: r + w @ x.T,
        "ffn_gate": lambda w1, w3, x: F.silu(w1 @ x.T) * (w3 @ x.T),
        "rmsnorm_ffn_gate": lambda x, g, w1, w3: (lambda xn: F.silu(w1 @ xn) * (w3 @ xn))(
            F.rms_norm(x, (x.shape[1],), g[0], 1e-5).T),
        "qkv_rope": qkv_rope,
        "sgemm": lambda a, b: a @ b,
        "_rope": rope,
    }


def cases(group: str, cpu: bool) -> list[dict]:
    """The (kernel, dims, consts, runtime scalars) to run."""
    out = []

    def add(kernel, dims, consts=None, scalars=None, label="", dtype=""):
        if kernel.startswith("attention") and "KVD" not in dims:  # multi-head: a kv head per query head
            dims = {**dims, "KVD": dims["H"] * dims["HD"]}
        label = label or ",".join(f"{k}={v}" for k, v in {**dims, **(scalars or {})}.items())
        out.append({"kernel": kernel, "dims": dims, "consts": consts or {}, "scalars": scalars or {},
                    "label": label + (f" {dtype}" if dtype else ""), "dtype": dtype})

    if cpu:  # tiny shapes for the dry run
        add("rmsnorm", {"B": 2, "N": 64}, {"threads": 64})
        add("rmsnorm", {"B": 2, "N": 64}, {"threads": 64}, dtype="f16")
        add("matmul_f16", {"D": 8, "K": 64}, {"BK": 32})
        add("matmul_q8", {"D": 8, "G": 4, "GS": 32})
        add("matmul_w8a8", {"D": 8, "G": 4, "GS": 32})
        add("silu_mul", {"B": 2, "H": 96}, {"BN": 32, "threads": 32})
        add("rope", {"B": 2, "D": 64}, {"HD": 16}, {"pos": 5})
        add("attention", {"H": 2, "HD": 32, "S": 40}, {"BT": 16}, {"pos": 39})
        add("embedding", {"V": 50, "N": 64, "B": 2}, {"BN": 32})
        add("qkv_rope", {"K": 64, "D": 64, "KVD": 32, "S": 8}, {"HD": 16, "BK": 32}, {"pos": 7})
        add("sgemm", {"M": 64, "N": 64, "K": 32}, {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "TM": 4, "TN": 4,
                                                   "WNITER": 2, "BK": 8})
        return out
    if group == "decode":
        for name, dim, hidden, heads in MODELS:
            hd = dim // heads
            for b in BATCHES:
                add("rmsnorm", {"B": b, "N": dim})
                add("silu_mul", {"B": b, "H": hidden})
                add("accum", {"B": b, "N": dim})
                add("embedding", {"V": 32000, "N": dim, "B": b})
                for pos in POSITIONS:
                    add("rope", {"B": b, "D": dim}, {"HD": hd}, {"pos": pos})
            for pos in POSITIONS:
                add("attention", {"H": heads, "HD": hd, "S": SEQ}, {}, {"pos": pos})
                add("attention_split", {"H": heads, "HD": hd, "S": SEQ}, {}, {"pos": pos})
                add("attention_grid", {"H": heads, "HD": hd, "S": SEQ}, {}, {"pos": pos})
            for kern in ("matmul", "matmul_f16", "matmul_q8", "matmul_w8a8"):
                for d, k in ((dim, dim), (hidden, dim), (dim, hidden)):
                    if kern in ("matmul_q8", "matmul_w8a8"):  # groups of 64 (32 where 64 does not divide K), as runq.c
                        gs = 64 if k % 64 == 0 else 32
                        add(kern, {"D": d, "G": k // gs, "GS": gs}, label=f"D={d},K={k}")
                    else:
                        add(kern, {"D": d, "K": k})
            add("rmsnorm_matmul", {"D": dim, "K": dim})
            add("matmul_residual", {"D": dim, "K": hidden})
            add("ffn_gate", {"H": hidden, "K": dim})
            add("rmsnorm_ffn_gate", {"H": hidden, "K": dim})
            for pos in POSITIONS:
                add("qkv_rope", {"K": dim, "D": dim, "KVD": dim, "S": SEQ}, {"HD": hd}, {"pos": pos})
        return out
    # targets: the target shapes (its elementwise targets are f16: the examples with
    # f16 tensors, `source`; and as the seed's f32)
    # "tuned": other schedule constants than the file's (the seed's launch shapes), the fastest of
    # benchmarks/probes/decode_tiling on an H100 (2026-11-25)
    for dtype in ("f16", ""):
        add("rmsnorm", {"B": 16384, "N": 4096}, dtype=dtype)
        add("rmsnorm", {"B": 16384, "N": 4096}, {"threads": 256}, label="B=16384,N=4096 tuned", dtype=dtype)
        add("silu_mul", {"B": 16384, "H": 4096}, dtype=dtype)
        add("silu_mul", {"B": 16384, "H": 4096}, {"BN": 4096, "threads": 512}, label="B=16384,H=4096 tuned",
            dtype=dtype)
        add("accum", {"B": 16384, "N": 4096}, dtype=dtype)
        # (accum: whole rows in 1024 threads tie eager on an H200 in f16 and f32, where 512 threads lose 1-3%;
        # docs/PERFORMANCE.md "accum's grid order")
        add("accum", {"B": 16384, "N": 4096}, {"BN": 4096, "threads": 1024}, label="B=16384,N=4096 tuned",
            dtype=dtype)
    add("rope", {"B": 16384, "D": 4096}, {"HD": 128}, {"pos": 1023})
    add("rope", {"B": 16384, "D": 4096}, {"HD": 128, "BR": 32, "threads": 256}, {"pos": 1023},
        label="B=16384,D=4096,pos=1023 tuned")
    add("matmul_f16", {"D": 11008, "K": 4096})
    add("matmul_f16", {"D": 11008, "K": 4096}, {"BD": 2, "BK": 2048, "threads": 256}, label="D=11008,K=4096 tuned")
    add("matmul_q8", {"D": 11008, "G": 64, "GS": 64}, label="D=11008,K=4096")
    add("matmul_w8a8", {"D": 11008, "G": 64, "GS": 64}, label="D=11008,K=4096")
    add("matmul", {"D": 11008, "K": 4096})
    add("matmul", {"D": 11008, "K": 4096}, {"BD": 8}, label="D=11008,K=4096 tuned")
    add("attention", {"H": 32, "HD": 128, "S": SEQ}, {}, {"pos": SEQ - 1})
    add("attention", {"H": 32, "HD": 128, "S": SEQ}, {"BT": 128, "threads": 512}, {"pos": SEQ - 1},
        label=f"H=32,HD=128,S={SEQ},pos={SEQ - 1} tuned")
    add("attention_split", {"H": 32, "HD": 128, "S": SEQ}, {}, {"pos": SEQ - 1})
    add("attention_split", {"H": 32, "HD": 128, "S": SEQ}, {"SPLIT": 8, "threads": 128}, {"pos": SEQ - 1},
        label=f"H=32,HD=128,S={SEQ},pos={SEQ - 1} SPLIT=8")
    add("attention_grid", {"H": 32, "HD": 128, "S": SEQ}, {}, {"pos": SEQ - 1})
    add("attention_grid", {"H": 32, "HD": 128, "S": SEQ}, {"SPLIT": 8}, {"pos": SEQ - 1},
        label=f"H=32,HD=128,S={SEQ},pos={SEQ - 1} SPLIT=8")
    tuned = {"BN": 256, "BK": 32, "WNITER": 4, "threads": 256}  # `tkc tune`'s best at 4096^3 (H100, 2026-11-26)
    for n in (1024, 4096):
        add("sgemm", {"M": n, "N": n, "K": n})
        add("sgemm", {"M": n, "N": n, "K": n}, tuned, label=f"M=N=K={n} tuned")
    return out


def example(kernel: str) -> str:
    return os.path.join(ROOT, "examples", f"{kernel}.tk")


def source(case: dict, workdir: str) -> str:
    """The .tk file of `case`: the example, or with `dtype` a copy whose signature's f32 tensors
    have that dtype instead (the kernels compute in f32 whatever their tensors hold)."""
    path = example(case["kernel"])
    if not case.get("dtype"):
        return path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index("kernel ")
    end = text.index("\n    where", start)
    text = text[:start] + text[start:end].replace("f32[", case["dtype"] + "[") + text[end:]
    os.makedirs(workdir, exist_ok=True)
    out = os.path.join(workdir, f"{case['kernel']}_{case['dtype']}.tk")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return out


def _build_one(path, target, consts, dims, cache_dir) -> str:
    """Worker: compile one (.tk file, target, shape) into the shared cache."""
    try:
        import tkc

        tkc.compile(path, target=target, cache_dir=cache_dir, **consts).specialize(dims)
        return "ok"
    except Exception as exc:  # noqa: BLE001 (the main process compiles again and reports it)
        return f"{type(exc).__name__}: {exc}"


def moved_bytes(case: dict, module) -> int:
    """Bytes a kernel must move: every tensor once (attention: the KV rows 0..pos only)."""
    env = module.env
    total = sum(a.type.nbytes(env) for a in module.func.body.args)
    if case["kernel"] in ("attention", "attention_split", "attention_grid"):
        kv = [a for a in module.func.body.args if a.name in ("KC", "VC")]
        rows = case["scalars"]["pos"] + 1
        total -= sum(a.type.nbytes(env) for a in kv)
        total += sum(a.type.nbytes(env) // a.type.concrete_shape(env)[0] * rows for a in kv)
    if case["kernel"] == "qkv_rope":  # one row of each cache is written
        kv = [a for a in module.func.body.args if a.name in ("KC", "VC")]
        total -= sum(a.type.nbytes(env) for a in kv)
        total += sum(a.type.nbytes(env) // a.type.concrete_shape(env)[0] for a in kv)
    if case["kernel"] == "embedding":  # only the B rows of the table are read
        e = module.func.body.args[0]
        total -= e.type.nbytes(env)
        total += e.type.nbytes(env) // e.type.concrete_shape(env)[0] * env["B"]
    return total


def run(args) -> int:
    import torch

    from dsl.diagnostics import TkError
    from tkc import driver, oracle
    import tkc

    device = "cpu" if args.cpu else "cuda"
    target_list = ["tilelang-cpu"] if args.cpu else args.targets.split(",")
    timer = Timer(args.cpu, args.warmup, args.rep)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    todo = cases(args.group, args.cpu)
    if args.kernels:
        todo = [c for c in todo if c["kernel"] in args.kernels.split(",")]
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="tkc-bench-")
    meta = {"device_name": "cpu" if args.cpu else torch.cuda.get_device_name(0),
            "date": datetime.date.today().isoformat(), "group": args.group, "targets": target_list,
            "torch": torch.__version__, "command": " ".join(sys.argv)}
    try:
        meta["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                        text=True).stdout.strip()
    except OSError:
        meta["commit"] = ""
    for c in todo:
        c["path"] = source(c, cache_dir)
    jobs = [(c["path"], t, c["consts"], c["dims"], cache_dir) for c in todo for t in target_list]
    if not args.cpu:
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(max_workers=max(1, min(14, (os.cpu_count() or 2) - 2)), mp_context=ctx) as pool:
            list(pool.map(_build_one, *zip(*jobs)))
    meta["copy"] = copy_bandwidth(timer, device, (1 << 20) if args.cpu else (1 << 30))
    copy_tbps = meta["copy"]["tbps"]
    fns = eager_fns()
    compiled: dict[str, object] = {}
    rows, failed = [], False
    for case in todo:
        name = case["kernel"]
        module = driver.frontend(case["path"], {**case["dims"], **case["consts"]})
        nbytes = moved_bytes(case, module)
        flops = 2 * case["dims"]["M"] * case["dims"]["N"] * case["dims"]["K"] if name == "sgemm" else 0
        base = oracle.random_inputs(module, 0, device, "normal", case["scalars"])
        tensors = [t for t in base if not isinstance(t, int)]
        per_set = sum(t.numel() * t.element_size() for t in tensors)
        nsets = 1 if args.cpu or per_set >= (256 << 20) else min(8, max(2, (256 << 20) // max(per_set, 1)))
        sets = [base] + [oracle.random_inputs(module, s, device, "normal", case["scalars"]) for s in range(1, nsets)]
        refs = oracle.reference(module, base)
        budgets = oracle.error_budgets(module)
        outs = oracle.outputs(module)
        fn = fns[name]
        if name == "rope":
            fn = (lambda x, pos, hd=case["consts"]["HD"]: fns["_rope"](x, pos, hd))
        elif name == "qkv_rope":
            fn = (lambda *a, hd=case["consts"]["HD"]: fns["qkv_rope"](*a, hd))
        variants = [("torch eager", fn)]
        if args.compile and not args.cpu:
            if name not in compiled:
                compiled[name] = torch.compile(fn)
            variants.append(("torch.compile", compiled[name]))  # recompiles per shape and dtype
        for t in target_list:
            try:
                k = tkc.compile(case["path"], target=t, cache_dir=cache_dir, **case["consts"])
                k.specialize(case["dims"])
                variants.append((f"tkc {t}", k))
            except TkError as exc:
                rows.append(_row(case, f"tkc {t}", None, None, nbytes, flops, copy_tbps,
                                 "rejected: " + exc.render().splitlines()[0]))
            except Exception as exc:  # noqa: BLE001
                rows.append(_row(case, f"tkc {t}", None, None, nbytes, flops, copy_tbps, f"error: {exc}",
                                 traceback.format_exc()))
        eager_ms = eager_graph = None
        for vname, v in variants:
            try:
                res = v(*base)
                res = list(res) if isinstance(res, tuple) else [res]
                err = max(oracle.rel_error(r.reshape(ref.shape), ref) for r, ref in zip(res, refs))
                tol = max(budgets[n].tol(d) for n, d in outs)
                # the torch baselines compute in their own dtypes (f16 GEMV outputs): a wider bound
                ok = err <= tol if vname.startswith("tkc") else err <= max(tol, 2e-2)
                ms = timer(rotating(v, sets))
                gms = None
                if args.graph and not args.cpu:
                    try:
                        gms = graph_ms(timer, v, sets)
                    except Exception as exc:  # noqa: BLE001 (not capturable: the row says so)
                        gms = f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"
            except Exception as exc:  # noqa: BLE001
                rows.append(_row(case, vname, None, None, nbytes, flops, copy_tbps, f"error: {type(exc).__name__}: {exc}",
                                 traceback.format_exc()))
                failed |= vname.startswith("tkc")
                continue
            if vname == "torch eager":
                eager_ms = ms
            status = "ok" if ok else "WRONG"
            failed |= not ok and vname.startswith("tkc")
            row = _row(case, vname, ms, err, nbytes, flops, copy_tbps, status)
            row["x_eager"] = eager_ms / ms if eager_ms else None
            if isinstance(gms, float):
                row["graph_us"] = gms * 1e3
                row["graph_frac_copy"] = nbytes / (gms * 1e-3) / 1e12 / copy_tbps if copy_tbps else None
                if vname == "torch eager":
                    eager_graph = gms
                row["graph_x_eager"] = eager_graph / gms if eager_graph else None
            elif gms is not None:
                row["graph_us"] = None
                row["graph_status"] = gms
            rows.append(row)
        if args.out:  # after every case: a run cut short keeps what it measured
            with open(args.out, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"{name} {case['label']}: " + ", ".join(f"{r['variant']} {r['time_us']:.1f} us" for r in rows
                                                     if r["case"] == case["label"] and r["kernel"] == name
                                                     and r["time_us"] is not None), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(table(meta, rows))
    return 1 if failed else 0


def _row(case, variant, ms, err, nbytes, flops, copy_tbps, status, trace="") -> dict:
    row = {"kernel": case["kernel"], "case": case["label"], "dims": case["dims"], "consts": case["consts"],
           "scalars": case["scalars"], "variant": variant, "time_us": ms * 1e3 if ms is not None else None,
           "rel_err": err, "bytes": nbytes, "status": status, "trace": trace, "x_eager": None}
    if ms is not None:
        row["tbps"] = nbytes / (ms * 1e-3) / 1e12
        row["frac_copy"] = row["tbps"] / copy_tbps if copy_tbps else None
        row["tflops"] = flops / (ms * 1e-3) / 1e12 if flops else None
    return row


def table(meta: dict, rows: list[dict]) -> str:
    lines = [f"Transformer decode kernels on {meta['device_name']} ({meta['date']}, commit {meta.get('commit', '')}); "
             f"copy {meta['copy']['tbps']:.2f} TB/s", "",
             "| kernel | shape | variant | time (us) | x eager | % copy | graph (us) | graph x eager | graph % copy "
             "| TFLOP/s | status |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = f"{r['time_us']:.1f}" if r["time_us"] is not None else "-"
        x = f"{r['x_eager']:.2f}" if r.get("x_eager") else "-"
        frac = f"{100 * r['frac_copy']:.0f}" if r.get("frac_copy") is not None and not r.get("tflops") else "-"
        g = f"{r['graph_us']:.1f}" if r.get("graph_us") else "-"
        gx = f"{r['graph_x_eager']:.2f}" if r.get("graph_x_eager") else "-"
        gfrac = (f"{100 * r['graph_frac_copy']:.0f}" if r.get("graph_frac_copy") is not None and not r.get("tflops")
                 else "-")
        tf = f"{r['tflops']:.1f}" if r.get("tflops") else "-"
        status = r["status"] + (f" (graph: {r['graph_status']})" if r.get("graph_status") else "")
        lines.append(f"| {r['kernel']} | {r['case']} | {r['variant']} | {t} | {x} | {frac} | {g} | {gx} | {gfrac} "
                     f"| {tf} | {status[:90]} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--group", choices=("decode", "targets"), default="targets")
    p.add_argument("--kernels", default="", help="comma-separated example names (default: all)")
    p.add_argument("--targets", default="tilelang,cuda")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="also time torch.compile (default on; --no-compile skips it)")
    p.add_argument("--graph", action="store_true",
                   help="also time each variant replayed from a CUDA graph (kernel time without launch gaps)")
    p.add_argument("--cpu", action="store_true", help="dry run on tiny shapes on the CPU")
    p.add_argument("--warmup", type=float, default=25.0)
    p.add_argument("--rep", type=float, default=100.0)
    p.add_argument("--cache-dir", default="")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    if args.cpu:
        args.warmup, args.rep = min(args.warmup, 2.0), min(args.rep, 5.0)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

"""Probe (issue 11): how fast can one stories110M f16 decode step go as one persistent launch?

The 70% target at stories110M f16 asks for a step within 1 / 0.7 of the weight-bytes floor (219 MB
per token at the copy rate: about 74 us on an H200). tkc's step is about 250 us. A step is a
chain of 60 grid-wide exchanges (every GEMV needs the whole previous output), so the question is
what that chain costs at its best, with and without the weights streaming behind it.
chain.cu (hand-written, not generated; its header says what it computes) runs the whole step in one
cooperative launch, one block per SM, each block owning fixed rows of every matrix:

* exchanges: `ll`: 8-byte (value, epoch) words polled by the readers (the data is its own flag);
  `llsleep`: the same with a 32 ns sleep between polls; `bar`: plain stores and a grid barrier
  (fence, one atomic counter, poll); `flag`: plain stores and a barrier of per-block flags
  (every block's flag polled at once); `barred`: `bar` with the arrival a release reduction (no
  fence); `ll3` (with `bare` only): `ll` with three f16 values and a 16-bit epoch per word;
* weights: `stream`: rows streamed through a ring of S cp.async slots up to S chunks ahead of use
  (across the exchanges); `smem`: read from a ring filled once (no weight traffic: the chain's
  own time; the numbers are then wrong and not checked); `bare`: no weights, no products, no
  classifier (the 60 exchanges alone);
* the threads per block (`-256`, `-512`), ring slots (`-s8`, `-s16`) and optionally the blocks
  (`-nb66`; default one per SM).

The `stream` variants are checked against float64 torch (logits and the argmax token). Each
variant is timed as CUDA-graph replays of 20 launches (each launch a token: the argmax is the next
launch's token); one launch is stamped with %globaltimer at each phase's input arrival (block 0),
giving the median phase times over layers 1-11. First, pingpong.cu times a value's round trip
between block 0 and block PEER through L2 (one block per SM), the latency every exchange pays.
Run on the device machine: `python3 benchmarks/probes/llama_chain/probe.py [--variants ...]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

D, HID, L, V = 768, 2048, 12, 32000
QKV = 3 * D
SLOT, MAXTAB = 12288, 512
LAYER = QKV * D + D * D + 2 * HID * D + D * HID
OFF_O, OFF_13, OFF_2 = QKV * D, QKV * D + D * D, QKV * D + D * D + 2 * HID * D
OFF_CLS = L * LAYER
B_LAYER = QKV + D + D + HID + D
SMEM_EXTRA = (HID + D + 32) * 4


def lo(rows: int, b: int, nb: int) -> int:
    return b * rows // nb


def chunk_table(nb: int):
    """[nb, MAXTAB, 2] int32 (16-byte offset into W, 16-byte words) per block in the order the
    kernel consumes them, and [nb] counts: the same row split and chunking as chain.cu's gemv."""
    import numpy as np

    tab = np.zeros((nb, MAXTAB, 2), dtype=np.int32)
    counts = np.zeros(nb, dtype=np.int32)
    for b in range(nb):
        items = []

        def rows(off, k, r0, r1):
            rpc = SLOT // (2 * k)
            for j in range(r0, r1, rpc):
                items.append(((off + j * k) // 8, (min(r1, j + rpc) - j) * k // 8))

        for layer in range(L):
            base = layer * LAYER
            rows(base, D, lo(QKV, b, nb), lo(QKV, b + 1, nb))
            rows(base + OFF_O, D, lo(D, b, nb), lo(D, b + 1, nb))
            rows(base + OFF_13, D, 2 * lo(HID, b, nb), 2 * lo(HID, b + 1, nb))
            rows(base + OFF_2, HID, lo(D, b, nb), lo(D, b + 1, nb))
        rows(OFF_CLS, D, lo(V, b, nb), lo(V, b + 1, nb))
        assert len(items) <= MAXTAB
        tab[b, :len(items)] = items
        counts[b] = len(items)
    return tab, counts


def reference(W, G, token: int):
    """float64 logits of chain.cu's step from `token`."""
    import torch

    def rms(x, g):
        return x / torch.sqrt((x * x).mean() + 1e-5) * g

    Wd = W.double()
    Gd = G.double().view(2 * L + 1, D)
    x = Wd[OFF_CLS + token * D:OFF_CLS + (token + 1) * D]
    for layer in range(L):
        base = layer * LAYER
        qkv = Wd[base:base + OFF_O].view(QKV, D) @ rms(x, Gd[2 * layer])
        x = x + Wd[base + OFF_O:base + OFF_13].view(D, D) @ qkv[2 * D:]
        w13 = Wd[base + OFF_13:base + OFF_2].view(HID, 2, D)
        xn = rms(x, Gd[2 * layer + 1])
        a, c = w13[:, 0] @ xn, w13[:, 1] @ xn
        x = x + Wd[base + OFF_2:base + LAYER].view(D, HID) @ (a * torch.sigmoid(a) * c)
    return Wd[OFF_CLS:].view(V, D) @ rms(x, Gd[2 * L])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", default="bar-bare-512-s8,barred-bare-512-s8,ll-bare-512-s8,ll3-bare-512-s8,"
                                         "ll3-bare-256-s8,barred-bare-512-s8-nb66,bar-smem-512-s16,barred-smem-512-s16,"
                                         "ll-stream-512-s16,barred-stream-512-s16")
    p.add_argument("--peers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 33, 66, 131])
    args = p.parse_args(argv)
    import torch

    from llama import copy_rate
    from tkc.bench import Timer, graph_ms
    from tkc.cuda_runtime import CudaLaunch

    dev = torch.cuda.get_device_properties(0)
    nb = dev.multi_processor_count
    rate = copy_rate("cuda")
    nbytes = 2 * (OFF_CLS + V * D)
    floor_us = nbytes / rate * 1e6
    print(f"{torch.cuda.get_device_name()}, {nb} SMs: copy {rate / 1e12:.2f} TB/s; weights {nbytes / 1e6:.1f} MB: "
          f"floor {floor_us:.1f} us, 70% of it {floor_us / 0.7:.1f} us per step", flush=True)
    g = torch.Generator(device="cuda").manual_seed(0)
    W = torch.empty(OFF_CLS + V * D, dtype=torch.float16, device="cuda")
    for layer in range(L):
        base = layer * LAYER
        for a, b, k in ((base, base + OFF_2, D), (base + OFF_2, base + LAYER, HID)):
            W[a:b] = (torch.randn(b - a, device="cuda", generator=g) / k ** 0.5).half()
    W[OFF_CLS:] = (torch.randn(V * D, device="cuda", generator=g) / D ** 0.5).half()
    G = torch.rand((2 * L + 1) * D, device="cuda", generator=g) + 0.5
    ll = torch.zeros(L * B_LAYER * 2, dtype=torch.int32, device="cuda")
    plain = torch.zeros(L * B_LAYER, device="cuda")
    logits = torch.zeros(V, device="cuda")
    tok = torch.zeros(1, dtype=torch.int32, device="cuda")
    ctl = torch.zeros(128 + 64 * 256, dtype=torch.int32, device="cuda")
    stamps = torch.zeros(64, dtype=torch.int64, device="cuda")
    ref = reference(W, G, 1)
    timer = Timer(cpu=False, warmup_ms=25, rep_ms=200)
    cache = tempfile.mkdtemp()
    with open(os.path.join(HERE, "chain.cu"), encoding="utf-8") as f:
        body = f.read()
    with open(os.path.join(HERE, "pingpong.cu"), encoding="utf-8") as f:
        text = (f'// tkc-launch: {{"kernel": "pingpong", "grid": [{nb}, 1, 1], "block": [32, 1, 1], '
                f'"cluster": [1, 1, 1], "smem_bytes": 200000, "cooperative": true}}\n') + f.read()
    path = os.path.join(cache, "pingpong.cu")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    pingpong = CudaLaunch(path, text)
    words, times = torch.zeros(32, dtype=torch.int64, device="cuda"), torch.zeros(1, dtype=torch.int64, device="cuda")
    trips = []
    for peer in args.peers:
        for _ in range(3):
            words.zero_()
            pingpong(words, times, peer, 2000)
            torch.cuda.synchronize()
            trips.append((peer, int(times[0]) / 2000 / 1e3))
    print("round trip between block 0 and block PEER, us: " + ", ".join(f"{p}: {t:.3f}" for p, t in trips), flush=True)
    print("| variant | check | graph us per step | % of floor | in-kernel us | qkv+att | wo | ffn | w2 | classifier |")
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for name in args.variants.split(","):
        exch, weights, threads, slots, *more = name.split("-")
        blocks = int(more[0][2:]) if more else nb
        defines = {"CH_NB": blocks, "CH_T": int(threads), "CH_S": int(slots[1:]),
                   "EXCH": ["ll", "bar", "flag", "llsleep", "barred", "ll3"].index(exch), "STREAM": int(weights == "stream"),
                   "BARE": int(weights == "bare")}
        smem = defines["CH_S"] * SLOT + SMEM_EXTRA
        header = (f'// tkc-launch: {{"kernel": "chain", "grid": [{blocks}, 1, 1], "block": [{threads}, 1, 1], '
                  f'"cluster": [1, 1, 1], "smem_bytes": {smem}, "cooperative": true}}\n')
        text = header + "".join(f"#define {k} {v}\n" for k, v in defines.items()) + body
        path = os.path.join(cache, name + ".cu")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            tab_np, counts_np = chunk_table(blocks)
            tab, counts = torch.from_numpy(tab_np).cuda(), torch.from_numpy(counts_np).cuda()
            launch = CudaLaunch(path, text)
            tensors = (W, G, tab, counts, ll, plain, logits, tok, ctl, stamps)
            ll.zero_(), ctl.zero_(), ctl[0].fill_(1), tok.fill_(1), stamps.zero_()
            launch(*tensors)
            torch.cuda.synchronize()
            check = "not checked"
            if int(ctl[2]):
                check = "TIMED OUT"
            elif defines["STREAM"]:
                err = float((logits.double() - ref).abs().max() / ref.abs().max())
                top = int(ref.argmax())
                check = f"rel err {err:.1e}, token {'ok' if int(tok) == top else f'{int(tok)} != {top}'}"
            ms = graph_ms(timer, lambda: launch(*tensors), [()], calls=20)
            stamps.zero_()
            launch(*tensors)
            torch.cuda.synchronize()
            s = [int(v) for v in stamps.tolist()]
            seg = {k: statistics.median((s[i + 5 * layer] - s[i - 1 + 5 * layer]) / 1e3 for layer in range(1, L))
                   for k, i in (("wo", 2), ("ffn", 3), ("w2", 4))}
            seg["qkv"] = statistics.median((s[1 + 5 * layer] - s[5 * layer - 1]) / 1e3 for layer in range(1, L))
            inside = (s[62] - s[0]) / 1e3
            us = ms * 1e3
            print(f"| {name} | {check} | {us:.1f} | {100 * floor_us / us:.0f} | {inside:.1f} | {seg['qkv']:.2f} | "
                  f"{seg['wo']:.2f} | {seg['ffn']:.2f} | {seg['w2']:.2f} | {(s[61] - s[59]) / 1e3:.2f} |", flush=True)
        except Exception as e:  # noqa: BLE001 - a probe: report and go on
            print(f"| {name} | {type(e).__name__}: {str(e)[:300]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

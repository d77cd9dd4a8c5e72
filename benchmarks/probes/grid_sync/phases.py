"""Probe (issue 11): where one launch of examples/llama_layer.tk spends its time, phase by phase.

The generated CUDA (stories110M's shapes, f16 weights, the model's constants) is instrumented by
hand (not generated): every block's thread 0 records, with %globaltimer, its entry (atomicMin),
the end of each phase before the grid barrier (atomicMax over blocks, after a __syncthreads), and
block 0 the moment it leaves each barrier. Phase p's time is its last block's arrival minus the
previous barrier's release (the entry for phase 1); a barrier's time is block 0's release minus
the last arrival. Medians over 50 launches at position P, with the result checked against the
uninstrumented kernel.
Run on the device machine: `python3 benchmarks/probes/grid_sync/phases.py [--pos 64] [--nb 192]`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)

CLOCK = r"""
__device__ __forceinline__ unsigned long long tk_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
"""


def instrument(src: str, kernel: str) -> str:
    """`src` with the timestamps described above; the kernel takes one more argument, the
    record (12 u64: entry, 5 arrivals, 5 releases)."""
    head = re.search(rf'extern "C" __global__ void __launch_bounds__\(\d+\) {kernel}\((.*)\) {{', src)
    # the record goes before the last argument (tk_pdl, which the runtime appends after all others)
    src = src[:head.start()] + CLOCK + src[head.start():head.end()].replace(
        ", const int tk_pdl) {", ", unsigned long long* tk_t, const int tk_pdl) {") + src[head.end():]
    src = src.replace("    tk_pdl_enter(tk_pdl);  // before any memory access (programmatic dependent launch)\n",
                      "    tk_pdl_enter(tk_pdl);\n    if (threadIdx.x == 0) atomicMin(&tk_t[0], tk_now());\n", 1)
    parts = src.split("    cg::this_grid().sync();")
    out = parts[0]
    for p, rest in enumerate(parts[1:]):
        out += (f"    __syncthreads(); if (threadIdx.x == 0) atomicMax(&tk_t[{1 + p}], tk_now());\n"
                "    cg::this_grid().sync();"
                f"\n    if (blockIdx.x == 0 && threadIdx.x == 0) tk_t[{6 + p}] = tk_now();\n") + rest
    end = out.rstrip().rfind("}")
    n = len(parts) - 1
    return out[:end] + f"    __syncthreads(); if (threadIdx.x == 0) atomicMax(&tk_t[{1 + n}], tk_now());\n}}\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pos", type=int, default=64)
    p.add_argument("--nb", type=int, default=192)
    p.add_argument("--threads", type=int, default=256)
    args = p.parse_args(argv)
    import torch

    from tkc import driver
    from tkc.cuda_runtime import CudaLaunch
    from tkc.models.llama import example_variant

    work = tempfile.mkdtemp()
    dim, hidden, hd, seq = 768, 2048, 64, 1024
    f16 = {n: "f16" for n in ("WQ", "WK", "WV", "WO", "W1", "W3", "W2")}
    path = example_variant("llama_layer", work, f16)
    dims = {"K": dim, "D": dim, "KVD": dim, "HID": hidden, "S": seq, "HD": hd, "BT": 128, "NB": args.nb,
            "threads": args.threads}
    art = driver.compile_file(path, "cuda", dims)
    plain = CudaLaunch(art.source_path, art.source)
    text = instrument(art.source, plain.name)
    timed_path = os.path.join(work, "timed.cu")
    with open(timed_path, "w", encoding="utf-8") as f:
        f.write(text)
    timed = CudaLaunch(timed_path, text)
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape, dtype=torch.float32, scale=0.05):
        return (torch.randn(shape, device="cuda", generator=g) * scale).to(dtype)

    h = torch.float16
    ins = [r(1, dim, scale=1.0), r(1, dim, scale=1.0), r(dim, dim, dtype=h), r(dim, dim, dtype=h), r(dim, dim, dtype=h),
           r(dim, dim, dtype=h), r(1, dim, scale=1.0), r(hidden, dim, dtype=h), r(hidden, dim, dtype=h),
           r(dim, hidden, dtype=h)]
    cache = [r(seq, dim, dtype=h, scale=1.0), r(seq, dim, dtype=h, scale=1.0)]

    def outs():
        return [torch.empty(1, dim, device="cuda"), cache[0].clone(), cache[1].clone(), torch.empty(dim, 1, device="cuda"),
                torch.empty(1, dim, device="cuda"), torch.empty(1, dim, device="cuda"),
                torch.empty(1, hidden, device="cuda")]

    a, b = outs(), outs()
    record = torch.zeros(12, dtype=torch.int64, device="cuda")
    plain(*ins, *a, args.pos)
    record[0] = 2**62
    timed(*ins, *b, args.pos, record)
    torch.cuda.synchronize()
    for x, y in zip(a, b):
        assert torch.equal(x, y), "the instrumented kernel's results differ"
    rows = []
    for _ in range(50):
        record.zero_()
        record[0] = 2**62
        timed(*ins, *outs(), args.pos, record)
        torch.cuda.synchronize()
        t = record.tolist()
        start, arrive, release = t[0], t[1:6], t[6:11]
        phase = [arrive[0] - start] + [arrive[k] - release[k - 1] for k in range(1, 5)]
        barrier = [release[k] - arrive[k] for k in range(4)]
        rows.append((phase, barrier, arrive[4] - start))
    med = lambda xs: sorted(xs)[len(xs) // 2] / 1e3  # noqa: E731 (ns -> us)
    print(f"{torch.cuda.get_device_name()}: llama_layer at stories110M f16, pos {args.pos}, NB {args.nb}, "
          f"{args.threads} threads (us, median of 50)")
    names = ["1 rmsnorm+qkv+rope", "2 attention", "3 wo+residual", "4 rmsnorm+w1/w3", "5 w2+residual"]
    print("| phase | phase us | barrier after it us |")
    print("|---|---|---|")
    for k in range(5):
        bar = f"{med([r[1][k] for r in rows]):.2f}" if k < 4 else ""
        print(f"| {names[k]} | {med([r[0][k] for r in rows]):.2f} | {bar} |")
    print(f"| whole launch (entry to last exit) | {med([r[2] for r in rows]):.2f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

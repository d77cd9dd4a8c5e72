"""Probe (issue 12): the block of the SDDMM dot-product kernel (`<kernel>_dots`, examples/sddmm.tk
through `cuda`, the cost model's split). Each variant sets codegen/cuda_sddmm.py's DOT_THREADS
(threads per block), DOT_ITERS (rounds per block) and DOT_ENTRIES (entries a group of lanes
computes at once) and times the whole call's kernels (B's transpose, the tiles, the dot products)
on the same launch data, checked against float64 torch at the entries:
- `cold`: triton.testing.do_bench's median, which clears 256 MB before each call (what
  benchmarks/sddmm.py reports per call, where the host keeps up);
- `graph`: a CUDA graph of 20 calls replayed (L2 warm; benchmarks/sddmm.py's graph column).

Question: at 4000^2 with 88k uniform entries every entry is a dot product, and 688 blocks of
256 threads fill 1.3 waves at 4 blocks per SM (67 registers), while examples/sddmm_wmma_8x32x16.tk,
whose blocks are one warp, took 16.5 us per call against sddmm.tk's 18.7 (H200, 2026-11-29).

    source .device/env.sh && python3 benchmarks/probes/sddmm_dot_block.py [VARIANT ...]

VARIANT is `T-I-E[-lvV][-lb][-pfa][-seq][-unroll][-given]`, e.g. 128-2-4 (the default list is
below):
- `-lvV` sets DOT_LANE_VECTORS (the lanes per entry G halve as it doubles);
- `-lb` caps the registers for 2048 threads per SM (`__launch_bounds__(T, min(2048 / T, 32))`:
  32 blocks per SM at most);
- `-pfa` prefetches the first round's rows of A into L2 before the PDL wait (f16, K a multiple
  of 8);
- `-seq` passes dot_order as a null pointer, as the runtime does for a plan with
  `dot_sequential` (the kernel reads entry i as the i-th; only where the plan has it);
- `-unroll` unrolls the rounds' loop (a later round's index loads may be issued before an earlier
  round's sums);
- `-given`: the timed calls are given Bt and launch no transpose (the transpose's share).
Two more forms were measured at commit f26d5b2 (its DOT_REUSE_A and DOT_A_EARLY, `-reuse` and
`-early` there) and not kept. Results: docs/PERFORMANCE.md, "The dot products in blocks of one
warp".
"""

from __future__ import annotations

import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import torch
from triton.testing import do_bench

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

import tkc  # noqa: E402
from codegen import cuda_sddmm  # noqa: E402
from sddmm_overhead import graph_us  # noqa: E402
from tkc import cuda_runtime  # noqa: E402
from tkc import sparse as sp  # noqa: E402

# (M, N, K, nnz, pattern)
SHAPES = [(4000, 4000, 256, 88_000, "uniform"), (4000, 4000, 256, 88_000, "rmat"),
          (2000, 12000, 256, 746_000, "rmat"), (3000, 7000, 256, 313_000, "uniform"),
          (8000, 8000, 256, 640_000, "uniform"), (10000, 10000, 256, 1_000_000, "uniform"),
          (37000, 37000, 256, 368_000, "uniform"), (10000, 10000, 32, 5_000_000, "rmat")]
VARIANTS = ["256-2-4", "32-2-4", "32-2-4-given", "32-2-4-seq", "32-2-4-lb-seq", "32-2-4-lv1-seq", "32-2-4-lv4-seq",
            "32-2-4-pfa-seq", "32-2-4-unroll"]


SETTINGS = ("DOT_THREADS", "DOT_ITERS", "DOT_ENTRIES", "DOT_LANE_VECTORS")


def source(module, name: str) -> str:
    """The generated CUDA with the settings of variant `name`."""
    t, i, e = (int(x) for x in name.split("-")[:3])
    lanes = next((int(x[2:]) for x in name.split("-") if x.startswith("lv")), cuda_sddmm.DOT_LANE_VECTORS)
    values = (t, i, e, lanes)
    saved = [getattr(cuda_sddmm, k) for k in SETTINGS]
    for k, v in zip(SETTINGS, values):
        setattr(cuda_sddmm, k, v)
    try:
        text = cuda_sddmm.emit(module)
        if "-lb" in name:  # registers capped for 32 one-warp blocks per SM (64 per thread)
            find = f"__launch_bounds__({t}) sddmm_dots("
            assert text.count(find) == 1
            text = text.replace(find, f"__launch_bounds__({t}, {min(2048 // t, 32)}) sddmm_dots(")
        if "-pfa" in name:  # the first round's rows of A prefetched into L2 before the wait (while the transpose runs)
            find = "        if (it == 0) tk_pdl_wait();"
            assert text.count(find) == 1
            text = text.replace(find, "        if (it == 0) {\n"
                                "            #pragma unroll\n"
                                "            for (int u = 0; u < E; ++u)\n"
                                "                for (int k = gl * 8; k < K; k += G * 8)\n"
                                "                    asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(A + (size_t)r[u] * K + k));\n"
                                "            tk_pdl_wait();\n"
                                "        }")
        if "-unroll" in name:  # the rounds unrolled: a later round's index loads may be issued before an earlier round's sums
            find = "    #pragma unroll 1\n    for (int it = 0; it < ITERS; ++it) {"
            assert text.count(find) == 1
            text = text.replace(find, "    #pragma unroll\n    for (int it = 0; it < ITERS; ++it) {")
        return text
    finally:
        for k, v in zip(SETTINGS, saved):
            setattr(cuda_sddmm, k, v)


def main() -> int:
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or VARIANTS
    tmp = tempfile.mkdtemp()
    print(f"GPU: {torch.cuda.get_device_name()}")
    cases = []
    for M, N, K, nnz, kind in SHAPES:
        p = (sp.uniform(M, N, nnz, seed=1) if kind == "uniform" else sp.rmat(M, N, nnz, seed=1)).to("cuda")
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        kernel = tkc.compile(os.path.join(ROOT, "examples/sddmm.tk"), target="cuda")
        artifact, _ = kernel.specialize(kernel.bind_dims([A, B, p]))
        _, op = cuda_sddmm.sampled_launch(artifact.module)
        plan = sp.dispatch_plan(p, 128, 128, op.attrs.get("dot_below", 0))
        for name in names:
            if "-seq" in name and not plan.dot_sequential:
                continue
            path = os.path.join(tmp, f"{M}x{N}-{K}-{nnz}-{kind}-{name}.cu")
            with open(path, "w") as f:
                f.write(source(artifact.module, name))
            cases.append(((M, N, K, p.nnz, kind), name, path, (A, B, p, plan)))
    with ThreadPoolExecutor(16) as pool:  # nvcc, in parallel
        list(pool.map(lambda c: cuda_runtime.compile_cubin(c[2], cuda_sddmm.ARCH), cases))
    print("| shape | variant | n_tc | n_dot | cold us | graph us | max rel err |")
    print("|---|---|---|---|---|---|---|")
    ref_of = {}
    for shape, name, path, (A, B, p, plan) in cases:
        M, N, K, nnz, kind = shape
        if shape not in ref_of:
            rows, cols = p.rows.long(), p.cols.long()
            ref_of[shape] = torch.cat([(A[rows[i:i + (1 << 20)]].double() * B[:, cols[i:i + (1 << 20)]].t().double()).sum(1)
                                       for i in range(0, nnz, 1 << 20)])
        ref = ref_of[shape]
        with open(path) as f:
            launch = cuda_runtime.CudaLaunch(path, f.read())
        P = torch.full((nnz,), float("nan"), device="cuda")
        bt = torch.empty(N, K, device="cuda", dtype=A.dtype)
        args = [A, B, p.rows, p.cols, P, bt, *plan.cuda_tensors()]
        launch(*args, fill_bt=True, dot_sequential="-seq" in name)
        torch.cuda.synchronize()
        err = ((P.double() - ref).abs().max() / ref.abs().max()).item()
        label = f"{M}x{N} K{K} {nnz} {kind}"
        if not err < 1e-5:
            print(f"| {label} | {name} | | | WRONG | | {err:.1e} |", flush=True)
            continue
        fill = not name.endswith("-given")  # `-given`: Bt filled by the first call, not transposed in the timed ones
        seq = "-seq" in name  # dot_order passed as a null pointer (the runtime's dot_sequential)
        cold = do_bench(lambda: launch(*args, fill_bt=fill, dot_sequential=seq), warmup=50, rep=300) * 1e3
        warm = graph_us(lambda: launch(*args, fill_bt=fill, dot_sequential=seq))
        print(f"| {label} | {name} | {plan.n_tc} | {plan.n_dot} | {cold:.1f} | {warm:.1f} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

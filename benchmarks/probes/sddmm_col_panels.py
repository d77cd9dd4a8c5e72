"""Probe (issue 12): SDDMM dot products by column panels of B, with no transpose of B.

Question: where every entry is a dot product (4000^2 with 88k uniform entries, K = 256), the call
is B's transpose (3.2 us cold) and then `<kernel>_dots` (12.6 us cold), which reads each entry's
row of Bt (H200, 2026-11-29). A panel of PW = 16 consecutive columns of B is one 32-byte sector
per row of B, so a block can load it from B itself (K x 32 bytes) into shared memory, stored
transposed ([PW][K + pad]), and compute the dot products of that panel's entries (in column
order, from a per-pattern plan) against it: no transpose kernel, and half the global reads per
entry. Expected: the call near the dot products' time alone.

Plan (host, per pattern, cached like DispatchPlan): the entries sorted by (column, row); per
entry `rc` = row * PW + column % PW and `order` (its index in S); work items (panel, first,
end) of at most W entries each.

    source .device/env.sh && python3 benchmarks/probes/sddmm_col_panels.py [--first] [W-T-E[-gN][-pre|-pad[-pf]] ...]

Each variant: W entries per item at most, T threads per block, E entries per group of G = 16
lanes (`-gN`: N lanes); `-pre` loads the first round's rows of A before the panel; `-pad` also stores item b's
entries at b * W (padded), so they load beside its (panel, count) and not after it; `-pad-pf` also
prefetches the item's slots into L2 at the block's start (a cold call's later rounds; gained nothing: 14.9 against 14.7 us, H200). The tkc call in its rows
form (examples/sddmm.tk through `cuda`: B's transpose and `<kernel>_dots`, with a null dot_order
where the plan allows it) is timed on the same data, in the same process. The kernel here
is the hand-written original of codegen/cuda_sddmm.py `<kernel>_panels`. Results, and where the
probe's pick (E = 8) disagreed with benchmarks/sddmm.py: docs/PERFORMANCE.md, "The dot products
by column panels of B".
"""

from __future__ import annotations

import os
import sys
import tempfile

import cupy
import numpy
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

SHAPES = [(4000, 4000, 256, 88_000, "uniform"), (37000, 37000, 256, 368_000, "uniform"),
          (35000, 35000, 256, 422_000, "uniform")]
VARIANTS = ["128-128-4", "128-128-8", "128-128-6", "256-128-4", "256-128-8", "256-128-6"]
PW = 16

SOURCE = r"""
#include <cuda_fp16.h>
constexpr int N = @N@, K = @K@, PW = 16, KP = K + 8, T = @T@, G = @G@, E = @E@;
__device__ __forceinline__ void ld16(void* d, const void* s) { *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(s); }
extern "C" __global__ void __launch_bounds__(T) panel_dots(const __half* __restrict__ A, const __half* __restrict__ B,
        const int* __restrict__ rc, const int* __restrict__ order, const int* __restrict__ items, float* __restrict__ P) {
    __shared__ __align__(16) __half Bs[PW][KP];
    const int tid = threadIdx.x;
    const int panel = items[3 * blockIdx.x], first = items[3 * blockIdx.x + 1], end = items[3 * blockIdx.x + 2];
    const int j0 = panel * PW;
    // B's K x PW panel: two 16-byte vectors per row, stored transposed
    for (int v = tid; v < K * 2; v += T) {
        const int k = v >> 1, h = v & 1;
        if (j0 + h * 8 < N) {
            alignas(16) __half x[8];
            ld16(x, B + (size_t)k * N + j0 + h * 8);
            #pragma unroll
            for (int u = 0; u < 8; ++u) Bs[h * 8 + u][k] = x[u];
        }
    }
    const int grp = tid / G, gl = tid % G;
    int base = first + grp * E;
    int wb = first + (tid / 32) * (32 / G) * E;  // the warp's first entry: whole warps run each round
    int e[E], r[E], c[E];
    #pragma unroll
    for (int u = 0; u < E; ++u) {
        const bool in = base + u < end;
        e[u] = in ? order[base + u] : -1;
        const int x = in ? rc[base + u] : 0;
        r[u] = x >> 4; c[u] = x & 15;
    }
    __syncthreads();
    while (wb < end) {
        float sum[E];
        #pragma unroll
        for (int u = 0; u < E; ++u) sum[u] = 0.0f;
        #pragma unroll
        for (int k = gl * 8; k < K; k += G * 8) {
            alignas(16) __half av[E][8], bv[E][8];
            #pragma unroll
            for (int u = 0; u < E; ++u) { ld16(av[u], A + (size_t)r[u] * K + k); ld16(bv[u], &Bs[c[u]][k]); }
            #pragma unroll
            for (int u = 0; u < E; ++u)
                #pragma unroll
                for (int t = 0; t < 8; ++t) sum[u] = fmaf(__half2float(av[u][t]), __half2float(bv[u][t]), sum[u]);
        }
        int en[E];
        #pragma unroll
        for (int u = 0; u < E; ++u) en[u] = e[u];
        base += (T / G) * E;
        wb += (T / G) * E;
        #pragma unroll
        for (int u = 0; u < E; ++u) {  // the next round's indices
            const bool in = base + u < end;
            e[u] = in ? order[base + u] : -1;
            const int x = in ? rc[base + u] : 0;
            r[u] = x >> 4; c[u] = x & 15;
        }
        #pragma unroll
        for (int u = 0; u < E; ++u) {
            #pragma unroll
            for (int o = G / 2; o > 0; o /= 2) sum[u] += __shfl_xor_sync(0xffffffffu, sum[u], o);
            if (en[u] >= 0 && gl == 0) P[en[u]] = sum[u];
        }
    }
}
"""

SOURCE_PRE = r"""
#include <cuda_fp16.h>
constexpr int N = @N@, K = @K@, PW = 16, KP = K + 8, T = @T@, G = @G@, E = @E@, KC = K / (G * 8);
static_assert(K % (G * 8) == 0, "probe: K a multiple of G * 8");
__device__ __forceinline__ uint4 ld16(const void* s) { return *reinterpret_cast<const uint4*>(s); }
__device__ __forceinline__ float dot8(uint4 a, uint4 b, float s) {
    const __half2* x = reinterpret_cast<const __half2*>(&a);
    const __half2* y = reinterpret_cast<const __half2*>(&b);
    #pragma unroll
    for (int t = 0; t < 4; ++t) {
        const float2 u = __half22float2(x[t]), v = __half22float2(y[t]);
        s = fmaf(u.x, v.x, s); s = fmaf(u.y, v.y, s);
    }
    return s;
}
extern "C" __global__ void __launch_bounds__(T) panel_dots(const __half* __restrict__ A, const __half* __restrict__ B,
        const int* __restrict__ rc, const int* __restrict__ order, const int* __restrict__ items, float* __restrict__ P) {
    __shared__ __align__(16) __half Bs[PW][KP];
    const int tid = threadIdx.x;
    const int panel = items[3 * blockIdx.x], first = items[3 * blockIdx.x + 1], end = items[3 * blockIdx.x + 2];
    const int j0 = panel * PW;
    const int grp = tid / G, gl = tid % G;
    int base = first + grp * E;
    int wb = first + (tid / 32) * (32 / G) * E;  // the warp's first entry: whole warps run each round
    int e[E], c[E];
    uint4 av[E][KC];
    #pragma unroll
    for (int u = 0; u < E; ++u) {
        const bool in = base + u < end;
        e[u] = in ? order[base + u] : -1;
        const int x = in ? rc[base + u] : 0;
        c[u] = x & 15;
        #pragma unroll
        for (int q = 0; q < KC; ++q) av[u][q] = ld16(A + (size_t)(x >> 4) * K + (q * G + gl) * 8);
    }
    // B's K x PW panel: two 16-byte vectors per row, stored transposed
    #pragma unroll
    for (int v = tid; v < K * 2; v += T) {
        const int k = v >> 1, h = v & 1;
        if (j0 + h * 8 < N) {
            const uint4 x = ld16(B + (size_t)k * N + j0 + h * 8);
            const __half* xs = reinterpret_cast<const __half*>(&x);
            #pragma unroll
            for (int u = 0; u < 8; ++u) Bs[h * 8 + u][k] = xs[u];
        }
    }
    __syncthreads();
    while (wb < end) {
        float sum[E];
        #pragma unroll
        for (int u = 0; u < E; ++u) {
            sum[u] = 0.0f;
            #pragma unroll
            for (int q = 0; q < KC; ++q) sum[u] = dot8(av[u][q], ld16(&Bs[c[u]][(q * G + gl) * 8]), sum[u]);
        }
        int en[E];
        #pragma unroll
        for (int u = 0; u < E; ++u) en[u] = e[u];
        base += (T / G) * E;
        wb += (T / G) * E;
        if (wb < end) {
            #pragma unroll
            for (int u = 0; u < E; ++u) {  // the next round's indices and rows of A
                const bool in = base + u < end;
                e[u] = in ? order[base + u] : -1;
                const int x = in ? rc[base + u] : 0;
                c[u] = x & 15;
                #pragma unroll
                for (int q = 0; q < KC; ++q) av[u][q] = ld16(A + (size_t)(x >> 4) * K + (q * G + gl) * 8);
            }
        }
        #pragma unroll
        for (int u = 0; u < E; ++u) {
            #pragma unroll
            for (int o = G / 2; o > 0; o /= 2) sum[u] += __shfl_xor_sync(0xffffffffu, sum[u], o);
            if (en[u] >= 0 && gl == 0) P[en[u]] = sum[u];
        }
    }
}
"""

# `-pad`: SOURCE_PRE with the items at a fixed stride of W slots (first round unconditional: W >= its entries)
PAD_EDITS = [
    ("E = @E@, KC = K / (G * 8);", "E = @E@, KC = K / (G * 8), W = @W@;"),
    ("    const int panel = items[3 * blockIdx.x], first = items[3 * blockIdx.x + 1], end = items[3 * blockIdx.x + 2];\n",
     "    // padded items: item b's entries at b * W (pads: rc 0, order -1), so they load beside (panel, count)\n"
     "    const int panel = items[2 * blockIdx.x], first = blockIdx.x * W, end = first + items[2 * blockIdx.x + 1];\n"),
    ("    const int j0 = panel * PW;\n",
     "    const int j0 = panel * PW;\n"
     "#ifdef PF\n"
     "    // the item's later rounds' slots into L2 now (rc and order: W / 32 lines of 128 bytes each), so a cold\n"
     "    // call's rounds after the first find them there\n"
     "    if (tid < 2 * (W / 32)) {\n"
     "        const int* line = (tid < W / 32 ? rc : order) + first + (tid % (W / 32)) * 32;\n"
     '        asm volatile("prefetch.global.L2 [%0];" :: "l"(line));\n'
     "    }\n"
     "#endif\n"),
    ("    for (int u = 0; u < E; ++u) {\n        const bool in = base + u < end;\n        e[u] = in ? order[base + u] : -1;\n"
     "        const int x = in ? rc[base + u] : 0;\n        c[u] = x & 15;\n        #pragma unroll\n"
     "        for (int q = 0; q < KC; ++q) av[u][q] = ld16(A + (size_t)(x >> 4) * K + (q * G + gl) * 8);\n    }\n    // B's",
     "    for (int u = 0; u < E; ++u) {  // the first round: W >= a round's entries, pads in bounds\n"
     "        e[u] = order[base + u];\n        const int x = rc[base + u];\n        c[u] = x & 15;\n        #pragma unroll\n"
     "        for (int q = 0; q < KC; ++q) av[u][q] = ld16(A + (size_t)(x >> 4) * K + (q * G + gl) * 8);\n    }\n    // B's"),
    ("    while (wb < end) {\n", "    do {  // (the first round unconditionally)\n"),
    ("    }\n}\n", "    } while (wb < end);\n}\n"),
]
SOURCE_PAD = SOURCE_PRE
for _find, _repl in PAD_EDITS:
    assert SOURCE_PAD.count(_find) == 1, _find
    SOURCE_PAD = SOURCE_PAD.replace(_find, _repl)


def source(pre: bool = False, pad: bool = False, pf: bool = False, **values) -> str:
    text = ("#define PF\n" if pf else "") + (SOURCE_PAD if pad else SOURCE_PRE if pre else SOURCE)
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    return text


def plan(p, N: int, W: int):
    """(rc, order, items, n_items) on the GPU: entries by (column, row), work items of <= W."""
    rows, cols = p.rows.long(), p.cols.long()
    key = cols * (rows.max().item() + 1) + rows
    order = torch.argsort(key, stable=True)
    rs, cs = rows[order], cols[order]
    rc = (rs * PW + cs % PW).int()
    panels = -(-N // PW)
    counts = torch.bincount(cs // PW, minlength=panels)
    starts = torch.cumsum(counts, 0) - counts
    chunks = -(-counts // W)
    pid = torch.repeat_interleave(torch.arange(panels, device=counts.device), chunks)
    within = torch.arange(pid.numel(), device=counts.device) - torch.repeat_interleave(torch.cumsum(chunks, 0) - chunks, chunks)
    first = starts[pid] + within * W
    end = torch.minimum(first + W, starts[pid] + counts[pid])
    items = torch.stack([pid, first, end], 1).int().contiguous()
    return rc.contiguous(), order.int().contiguous(), items, pid.numel()


def padded(p, N: int, W: int):
    """plan's items at a stride of W entries: rc [n_items * W] (pads 0), order (pads -1), items
    [n_items, 2] (panel, count)."""
    rc, order, items, n_items = plan(p, N, W)
    first, end = items[:, 1].long(), items[:, 2].long()
    count = end - first
    slot = torch.arange(n_items * W, device=rc.device)
    item, within = slot // W, slot % W
    inside = within < count[item]
    src = (first[item] + within).clamp(max=max(rc.numel() - 1, 0))
    rc_pad = torch.where(inside, rc.long()[src], 0).int().contiguous()
    order_pad = torch.where(inside, order.long()[src], -1).int().contiguous()
    return rc_pad, order_pad, torch.stack([items[:, 0].long(), count], 1).int().contiguous(), n_items


def time_tkc_rows(A, B, p, ref, tmp: str, tag: str):
    """The tkc call by tiles, B's transpose and the dot products by rows (examples/sddmm.tk through
    `cuda`, launched directly: no panels, no row groups) on A [M, K], B [K, N] and pattern `p`, all
    on the GPU, checked against `ref` (the entries' float64 values): (its DispatchPlan, its Bt, us
    per call (do_bench), us per call as graph replays, max relative error). Also used by
    sddmm_row_groups.py."""
    kernel = tkc.compile(os.path.join(ROOT, "examples/sddmm.tk"), target="cuda")
    artifact, _ = kernel.specialize(kernel.bind_dims([A, B, p]))
    _, op = cuda_sddmm.sampled_launch(artifact.module)
    dplan = sp.dispatch_plan(p, 128, 128, op.attrs.get("dot_below", 0))
    path = os.path.join(tmp, f"tkc-{tag}.cu")
    with open(path, "w") as f:
        f.write(cuda_sddmm.emit(artifact.module))
    with open(path) as f:
        launch = cuda_runtime.CudaLaunch(path, f.read())
    P = torch.full((p.nnz,), float("nan"), device="cuda")
    bt = torch.empty(B.shape[1], B.shape[0], device="cuda", dtype=A.dtype)
    args = [A, B, p.rows, p.cols, P, bt, *dplan.cuda_tensors()]
    seq = dplan.dot_sequential
    launch(*args, fill_bt=True, dot_sequential=seq)
    torch.cuda.synchronize()
    err = ((P.double() - ref).abs().max() / ref.abs().max()).item()
    cold = do_bench(lambda: launch(*args, fill_bt=True, dot_sequential=seq), warmup=50, rep=300) * 1e3
    warm = graph_us(lambda: launch(*args, fill_bt=True, dot_sequential=seq))
    return dplan, bt, cold, warm, err


def main() -> int:
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or VARIANTS
    tmp = tempfile.mkdtemp()
    print(f"GPU: {torch.cuda.get_device_name()}")
    print("| shape | variant | items | cold us | graph us | max rel err |")
    print("|---|---|---|---|---|---|")
    for M, N, K, nnz, kind in SHAPES[:1] if "--first" in sys.argv else SHAPES:
        p = (sp.uniform(M, N, nnz, seed=1) if kind == "uniform" else sp.rmat(M, N, nnz, seed=1)).to("cuda")
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        rows, cols = p.rows.long(), p.cols.long()
        ref = torch.cat([(A[rows[i:i + (1 << 20)]].double() * B[:, cols[i:i + (1 << 20)]].t().double()).sum(1)
                         for i in range(0, p.nnz, 1 << 20)])
        label = f"{M}x{N} K{K} {p.nnz} {kind}"
        dplan, _, cold, warm, err = time_tkc_rows(A, B, p, ref, tmp, f"{M}-{N}-{kind}")
        print(f"| {label} | tkc (n_tc {dplan.n_tc}, n_dot {dplan.n_dot}) | | {cold:.1f} | {warm:.1f} | {err:.1e} |",
              flush=True)
        for name in names:
            W, T, E = (int(x) for x in name.split("-")[:3])
            G = int(name.split("-g")[1].split("-")[0]) if "-g" in name else 16
            rc, order, items, n_items = (padded if "-pad" in name else plan)(p, N, W)
            src = os.path.join(tmp, f"panel-{M}-{N}-{K}-{name}.cu")
            with open(src, "w") as f:
                f.write(source("-pre" in name, "-pad" in name, "-pf" in name, N=N, K=K, T=T, G=G, E=E, W=W))
            fn = cupy.RawModule(path=cuda_runtime.compile_cubin(src, cuda_sddmm.ARCH)).get_function("panel_dots")
            P2 = torch.full((p.nnz,), float("nan"), device="cuda")

            def call():
                stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream())
                with stream:
                    fn((n_items,), (T,), tuple(numpy.uint64(t.data_ptr()) for t in (A, B, rc, order, items, P2)))
            call()
            torch.cuda.synchronize()
            err = ((P2.double() - ref).abs().max() / ref.abs().max()).item()
            if not err < 1e-5:
                print(f"| {label} | {name} | {n_items} | WRONG | | {err:.1e} |", flush=True)
                continue
            cold = do_bench(call, warmup=50, rep=300) * 1e3
            warm = graph_us(call)
            print(f"| {label} | {name} | {n_items} | {cold:.1f} | {warm:.1f} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Probe (issue 12): SDDMM at small K by row groups on mma.sync against a panel of Bt in shared memory.

Question: at 10000^2 with 5M entries and K = 32 the call takes 52 us in its tile kernel
(`<kernel>_walk`, every 128 x 128 tile on wgmma; docs/PERFORMANCE.md "Persistent tiles at
K = 32"), 6.3x cuSPARSE against the 10x target. At K = 32 a row of Bt is 64 bytes, so a panel of
PWC = 2560 columns of B is 160 KB: it fits in one block's shared memory, and 4 panels cover N.
A warp takes a group of 8 consecutive rows of A as the B operand of `mma.sync.m16n8k16` (column
n = row 8g + n, held in registers for the whole group) and 16 entries of those rows at a time as
the A operand, their rows of Bt gathered from shared memory by `ldmatrix` (one row address per
lane). Entry m's product is D[m][n_m]; the other 7 columns are discarded. Per entry that is 64
bytes of shared memory and no global read but its two index words, so the bound is shared memory's
128 bytes per clock per SM: about 10 us for 5M entries on 132 SMs, if ldmatrix has no bank
conflicts. The panel is stored so that chunk q of row j sits in 16-byte slot q ^ h(j) of its
128-byte line (h: `swz_class`, 8 classes), and the plan orders each item's entries so that 8
consecutive ones have distinct classes where it can: such 8 rows are then conflict-free.

    source .device/env.sh && python3 benchmarks/probes/sddmm_row_groups.py [--shapes=uniform,rmat,k64] [VARIANT ...]
    source .device/env.sh && python3 benchmarks/probes/sddmm_row_groups.py --compiled

VARIANT is T-W[-noswz][-fromb][-nopf]: T threads per block, W entries per work item at most (a
multiple of 32, at most 256), `-noswz` keeps an item's entries in S's order (no conflict-free
grouping), `-fromb` loads the panel from B itself, transposed in the kernel (no Bt, no transpose
kernel), `-nopf` loads an item's words when it starts (not one item ahead), `-runs` reads 2-byte
slot words and 8 P offsets per item instead of a P index per entry (S's entries of a row consecutive
in P), `-nobranch` runs all W / 16 batches of every item, with no test per batch (so the compiler
may overlap them). Timing only (wrong
results): `-panelonly` loads the panel and stops, `-nomma` / `-noldsm` leave out the mma / the
ldmatrix, `-nobatch` every batch, `-nowrite` the writes of P.

Plan (host, per pattern; here on the GPU with torch): see `plan`. A warp keeps its item's results
in shared memory by their rank in P and then writes them in that order, so the stores of a run of
a row's entries are consecutive (first form of this probe: each result stored from its register,
66 us against 30 us with no stores at all; H200, 2026-11-29).
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
from sddmm_col_panels import time_tkc_rows  # noqa: E402
from sddmm_overhead import graph_us  # noqa: E402
from tkc import cuda_runtime  # noqa: E402
from tkc import sparse as sp  # noqa: E402

SHAPES = {"uniform": (10000, 10000, 32, 5_000_000, "uniform"), "rmat": (10000, 10000, 32, 5_000_000, "rmat"),
          "k64": (10000, 10000, 64, 5_000_000, "uniform")}
VARIANTS = ["512-128", "512-128-noswz", "1024-128", "512-256", "512-128-fromb"]
PANEL = 160 * 1024  # bytes of Bt's panel in shared memory

SOURCE = r"""
#include <cuda_fp16.h>
#include <cstdint>
constexpr int M = @M@, N = @N@, K = @K@, T = @T@, W = @W@, PWC = @PWC@, KS = K / 16, CH = K / 8, WARPS = T / 32;
constexpr int RB = K * 2;           // bytes per row of the panel
constexpr int LINE_ROWS = 128 / RB;  // rows per 128-byte line (2 at K = 32, 1 at K = 64)
static_assert(K == 32 || K == 64, "probe: K 32 or 64");
static_assert(W % 32 == 0 && W <= 128, "probe: W a multiple of 32, at most 128 (one owner word of 8 nibbles per lane)");
// the class h(j) in 0..7 of panel row j: chunk q of row j sits in 16-byte slot q ^ h(j) of its 128-byte line,
// so 8 rows of distinct classes read at one q are conflict-free. At K = 32 the two rows of a line take
// opposite halves (bit 2); the higher bits of j are mixed in so that skewed columns (R-MAT) still spread.
__device__ __forceinline__ int swz_class(int j) {
    if (K == 32) {
        const int m = j >> 1;
        return (((j & 1) << 2) | (m & 3)) ^ ((m >> 2) ^ (m >> 5) ^ (m >> 8)) & 7;
    }
    return (j ^ (j >> 3) ^ (j >> 6) ^ (j >> 9)) & 7;
}
// the 16-byte slot of chunk q of panel row j
__device__ __forceinline__ uint32_t slot_of(int j, int q) {
#ifdef NOSWZ
    return (uint32_t)j * RB + q * 16;
#else
    return (uint32_t)(j / LINE_ROWS) * 128 + ((q ^ swz_class(j)) << 4);  // the plan's jn: slot_of(j, 0)
#endif
}
__device__ __forceinline__ void cp16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src));
}
extern "C" __global__ void __launch_bounds__(T, 1) group_dots(const __half* __restrict__ A, const __half* __restrict__ Bt,
        const __half* __restrict__ B, const int* __restrict__ jn, const int* __restrict__ pr, const unsigned char* __restrict__ si, const uint32_t* __restrict__ owner, const int* __restrict__ items,
        const int* __restrict__ blocks, float* __restrict__ P) {
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
    if (sbase & 0x7f) __trap();  // the slots' XOR with (q << 4) needs a 128-byte aligned base
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#ifdef RUNS
    // 2-byte words: jn16 = slot base / 16, si16 = slot | n << 8; pr holds 8 offsets per item
    const unsigned short* jn16 = reinterpret_cast<const unsigned short*>(jn);
    const unsigned short* si16 = reinterpret_cast<const unsigned short*>(si);
#endif
    const int panel = blocks[3 * blockIdx.x], lo = blocks[3 * blockIdx.x + 1], hi = blocks[3 * blockIdx.x + 2];
    const int c0 = panel * PWC, ncols = min(PWC, N - c0);
    float* stage = reinterpret_cast<float*>(smem + PWC * RB) + warp * W;  // the warp's item results, by rank in P
#ifndef FROMB
    for (int v = tid; v < ncols * CH; v += T) {
        const int j = v / CH, q = v % CH;
        cp16(sbase + slot_of(j, q), Bt + (size_t)(c0 + j) * K + q * 8);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
#else
    // B's rows k, k + 1 at 8 columns -> 8 half2 (k, k + 1) words of the transposed panel
    for (int v = tid; v < (K / 2) * (PWC / 8); v += T) {
        const int kp = v % (K / 2), c = (v / (K / 2)) * 8;
        if (c < ncols) {
            uint4 x0 = *reinterpret_cast<const uint4*>(B + (size_t)(2 * kp) * N + c0 + c);
            uint4 x1 = *reinterpret_cast<const uint4*>(B + (size_t)(2 * kp + 1) * N + c0 + c);
            const __half* h0 = reinterpret_cast<const __half*>(&x0);
            const __half* h1 = reinterpret_cast<const __half*>(&x1);
            #pragma unroll
            for (int u = 0; u < 8; ++u) {
                if (c + u < ncols) {
                    const int k = 2 * kp;
                    __half2 w = __halves2half2(h0[u], h1[u]);
                    *reinterpret_cast<__half2*>(smem + slot_of(c + u, k / 8) + (k % 8) * 2) = w;
                }
            }
        }
    }
#endif
    __syncthreads();
    const int hi16 = lane >> 4;
    // the warp's items it, it + WARPS, ...: item words (jn in slot order; pr and si in rank order) and the group's
    // rows of A are loaded one item ahead (PF), so their latency hides behind the item before
#ifdef PANELONLY
    int it = hi;
#else
    int it = lo + warp;
#endif
    int g = 0, first = 0, count = 0;
    if (it < hi) { g = items[3 * it]; first = items[3 * it + 1]; count = items[3 * it + 2]; }
    int wj[W / 16], wr[W / 32], ws[W / 32];
    uint32_t own = 0u, bf[KS][2];
    auto load = [&](int it_, int g_, int first_, int count_, int (&wj_)[W / 16], int (&wr_)[W / 32], int (&ws_)[W / 32],
                    uint32_t& own_, uint32_t (&bf_)[KS][2]) {
        const int arow = 8 * g_ + (lane >> 2);
        #pragma unroll
        for (int s = 0; s < KS; ++s) {
            const bool ok = arow < M && count_ > 0;
            bf_[s][0] = ok ? *reinterpret_cast<const uint32_t*>(A + (size_t)arow * K + 16 * s + 2 * (lane & 3)) : 0u;
            bf_[s][1] = ok ? *reinterpret_cast<const uint32_t*>(A + (size_t)arow * K + 16 * s + 8 + 2 * (lane & 3)) : 0u;
        }
        #pragma unroll
#ifdef RUNS
        for (int t = 0; t < W / 16; ++t) wj_[t] = 16 * t < count_ ? (int)jn16[first_ + 16 * t + (lane & 15)] << 4 : 0;
        #pragma unroll
        for (int u = 0; u < W / 32; ++u) ws_[u] = 32 * u < count_ ? si16[first_ + 32 * u + lane] : 0;
        wr_[0] = lane < 8 && count_ > 0 ? pr[8 * it_ + lane] : 0;  // row n's P index minus its first rank
#else
        for (int t = 0; t < W / 16; ++t) wj_[t] = 16 * t < count_ ? jn[first_ + 16 * t + (lane & 15)] : 0;
        #pragma unroll
        for (int u = 0; u < W / 32; ++u) {
            const bool in = 32 * u < count_;
            wr_[u] = in ? pr[first_ + 32 * u + lane] : 0;
            ws_[u] = in ? si[first_ + 32 * u + lane] : 0;
        }
#endif
        own_ = count_ > 0 ? owner[32 * it_ + lane] : 0u;
    };
    load(it, g, first, count, wj, wr, ws, own, bf);
    while (it < hi) {
        const int nit = it + WARPS;
        int ng = 0, nfirst = 0, ncount = 0;
        if (nit < hi) { ng = items[3 * nit]; nfirst = items[3 * nit + 1]; ncount = items[3 * nit + 2]; }
#ifndef NOPF
        int nwj[W / 16], nwr[W / 32], nws[W / 32];
        uint32_t nown, nbf[KS][2];
        load(nit, ng, nfirst, ncount, nwj, nwr, nws, nown, nbf);
#endif
        #pragma unroll
        for (int t = 0; t < W / 16; ++t) {
#ifdef NOBATCH
            if (false) {
#elif defined(NOBRANCH)
            {  // every batch of W, a short item's last ones with no owner (their results are dropped)
#else
            if (16 * t < count) {
#endif
                // this lane's ldmatrix row: entry lane % 16's smem base (line * 128 + class * 16), chunk 2 s + hi16
                const uint32_t base = (sbase + wj[t]) ^ (hi16 << 4);
                float d[4];
                #pragma unroll
                for (int s = 0; s < KS; ++s) {
                    uint32_t a0, a1, a2, a3;
                    const uint32_t addr = base ^ ((2 * s) << 4);
#ifdef NOLDSM
                    a0 = addr; a1 = addr + 1; a2 = addr + 2; a3 = addr + 3;
#else
                    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr));
#endif
#ifdef NOMMA
                    if (s == 0) { d[0] = d[1] = d[2] = d[3] = 0.f; }
                    d[0] += __int_as_float(a0); d[1] += __int_as_float(a1); d[2] += __int_as_float(a2 ^ bf[s][0]); d[3] += __int_as_float(a3 ^ bf[s][1]);
#else
                    if (s == 0)
                        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
                            : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(bf[s][0]), "r"(bf[s][1]), "f"(0.0f));
                    else
                        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(bf[s][0]), "r"(bf[s][1]));
#endif
                }
                // entry m = lane / 4 (+ 8) of the batch is D[m][n]: held by this lane when n / 2 == lane % 4, which
                // the owner word's nibble t says (bit 0: m, bit 1: its n & 1; bits 2, 3: the same for m + 8)
                if (own & (1u << (4 * t))) stage[16 * t + (lane >> 2)] = (own & (2u << (4 * t))) ? d[1] : d[0];
                if (own & (4u << (4 * t))) stage[16 * t + (lane >> 2) + 8] = (own & (8u << (4 * t))) ? d[3] : d[2];
            }
        }
        __syncwarp();
#ifndef NOWRITE
        #pragma unroll
        for (int u = 0; u < W / 32; ++u)  // by rank: the P indices of a run of one row are consecutive
        {
#ifdef RUNS
            const int off = __shfl_sync(0xffffffffu, wr[0], ws[u] >> 8);  // rank r of row n is P[offset[n] + r]
            if (32 * u + lane < count) P[off + 32 * u + lane] = stage[ws[u] & 255];
#else
            if (32 * u + lane < count) P[wr[u]] = stage[ws[u]];
#endif
        }
#endif
        __syncwarp();
        it = nit; g = ng; first = nfirst; count = ncount;
#ifndef NOPF
        #pragma unroll
        for (int u = 0; u < W / 32; ++u) { wr[u] = nwr[u]; ws[u] = nws[u]; }
        #pragma unroll
        for (int t = 0; t < W / 16; ++t) wj[t] = nwj[t];
        own = nown;
        #pragma unroll
        for (int s = 0; s < KS; ++s) { bf[s][0] = nbf[s][0]; bf[s][1] = nbf[s][1]; }
#else
        load(it, g, first, count, wj, wr, ws, own, bf);
#endif
    }
}
"""


def source(**values) -> str:
    text = SOURCE
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    return text


def swz_class(j, K: int):
    """The kernel's swz_class: the bank class 0..7 of panel row j."""
    if K == 32:
        return sp.group_class(j)
    return (j ^ (j >> 3) ^ (j >> 6) ^ (j >> 9)) & 7


def slot_base(j, K: int):
    """The kernel's slot_of(j, 0): line * 128 + class * 16; chunk q of row j is at slot_base ^ (q << 4)."""
    return (j // (128 // (2 * K))) * 128 + (swz_class(j, K) << 4)


def plan(p, N: int, K: int, W: int, n_blocks: int, swz: bool = True, runs: bool = False):
    """(jn, pr, si, owner, items, blocks, n_blocks, PWC) on the GPU.

    Entries by (panel, row group of 8, row, column); items are runs of <= W of them within one
    (panel, group), so an item's entries are at most a few runs of consecutive indices of P.
    Within an item the slots are ordered by rank within their bank class, then the class
    (8 consecutive slots of distinct bank class `swz_class` while every class lasts), or kept in order with
    `swz` False. jn[slot] = slot_base(local column) (pads: 0); by rank r in the item (P order),
    pr[item first + r] = the entry's index in P and si[item first + r] its slot in the item;
    owner[32 item + lane]: per batch t a nibble saying which of the lane's accumulators hold entries
    (see the kernel). Items are padded to 16 slots."""
    assert W <= 128, "one owner word (8 nibbles) per lane and item"
    PWC = PANEL // (2 * K)
    dev = p.rows.device
    rows, cols = p.rows.long(), p.cols.long()
    e = torch.arange(rows.numel(), device=dev)
    panel, jl = cols // PWC, cols % PWC
    g, n = rows // 8, rows % 8
    G = -(-p.M // 8)
    seg = panel * G + g
    o = torch.argsort((seg * 8 + n) * (1 << 24) + jl, stable=True)  # P order within (panel, group)
    seg_s = seg[o]
    segs, counts = torch.unique_consecutive(seg_s, return_counts=True)
    chunks = -(-counts // W)
    item_seg = torch.repeat_interleave(segs, chunks)
    n_items = item_seg.numel()
    within = torch.arange(n_items, device=dev) - torch.repeat_interleave(torch.cumsum(chunks, 0) - chunks, chunks)
    seg_first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, chunks)
    seg_count = torch.repeat_interleave(counts, chunks)
    item_first = seg_first + within * W
    item_count = torch.minimum(seg_count - within * W, torch.full_like(within, W))
    item_of = torch.repeat_interleave(torch.arange(n_items, device=dev), item_count)  # per sorted position
    r = torch.arange(o.numel(), device=dev) - torch.repeat_interleave(item_first, item_count)
    if swz:
        res = swz_class(jl[o], K)
        o1 = torch.argsort((item_of * 8 + res) * 1024 + r, stable=True)
        bucket = (item_of * 8 + res)[o1]
        start = torch.ones_like(bucket, dtype=torch.bool)
        start[1:] = bucket[1:] != bucket[:-1]
        idx = torch.arange(bucket.numel(), device=dev)
        rank = torch.empty_like(idx)
        rank[o1] = idx - torch.cummax(torch.where(start, idx, 0), 0).values
        o2 = torch.argsort((item_of * 1024 + rank) * 8 + res, stable=True)  # slot order, as sorted positions
    else:
        o2 = torch.arange(o.numel(), device=dev)
    padded = -(-item_count // 16) * 16
    slot_first = torch.cumsum(padded, 0) - padded
    n_slots = int(padded.sum().item())
    # 32 slots past the end: a warp loads whole lines of 32 slots and uses those within its item
    jn = torch.zeros(n_slots + 32, dtype=torch.int64, device=dev)  # pads: address 0
    pr = torch.zeros(n_slots + 32, dtype=torch.int64, device=dev)
    si = torch.zeros(n_slots + 32, dtype=torch.uint8, device=dev)
    k = o2  # sorted positions, in slot order
    within_item = torch.arange(k.numel(), device=dev) - torch.repeat_interleave(item_first, item_count)
    slot = slot_first[item_of[k]] + within_item
    src = o[k]
    jn[slot] = slot_base(jl[src], K)
    # owner words: entry m of batch t (slot 16 t + m), row n, is D[m % 8 (+ 8)][n] of lane 4 (m % 8) + n / 2
    m, t = within_item % 16, within_item // 16
    lane = 4 * (m % 8) + n[src] // 2
    bits = (1 | ((n[src] & 1) << 1)) << (4 * t + 2 * (m // 8))
    owner = torch.zeros(n_items * 32, dtype=torch.int64, device=dev)
    owner.index_add_(0, item_of[k] * 32 + lane, bits)
    pr[slot_first[item_of] + r] = e[o]
    si[slot_first[item_of[k]] + r[k]] = within_item.to(torch.uint8)
    items = torch.stack([item_seg % G, slot_first, item_count], 1).int().contiguous()
    # blocks over panels by entries; items of a panel split among its blocks by entries (as the compiler's plan)
    blocks = sp.group_spans((item_seg // G).cpu().numpy(), item_count.cpu().numpy(), -(-N // PWC), n_blocks)
    blocks_t = torch.tensor(blocks, dtype=torch.int32, device=dev).contiguous()
    owner = torch.where(owner >= 1 << 31, owner - (1 << 32), owner)  # as int32 bits
    if runs:  # 2-byte jn and si (with n), pr as 8 offsets per item: rank r of row n is P[offset[n] + r]
        off = e[o] - r
        offsets = torch.zeros(n_items * 8, dtype=torch.int64, device=dev)
        offsets[item_of * 8 + n[o]] = off
        assert torch.equal(offsets[item_of * 8 + n[o]], off), "runs: S's entries of a row are not consecutive in P"
        si16 = torch.zeros(n_slots + 32, dtype=torch.int64, device=dev)
        si16[slot_first[item_of[k]] + r[k]] = within_item | (n[src] << 8)
        jn, pr, si = jn >> 4, offsets, si16
        assert int(jn.max()) < 1 << 15
        return (jn.to(torch.int16).contiguous(), pr.int().contiguous(), si.to(torch.int16).contiguous(),
                owner.int().contiguous(), items, blocks_t, len(blocks), PWC)
    return jn.int().contiguous(), pr.int().contiguous(), si.contiguous(), owner.int().contiguous(), items, blocks_t, len(blocks), PWC


COMPILED_SHAPES = [(4000, 4000, 88_000, "uniform"), (8000, 8000, 640_000, "uniform"), (10000, 10000, 1_000_000, "uniform"),
                   (10000, 10000, 5_000_000, "uniform"), (10000, 10000, 5_000_000, "rmat"),
                   (37000, 37000, 368_000, "uniform"), (1504, 1504, 746_000, "rmat")]


def compiled() -> int:
    """`--compiled`: the compiler's form, codegen/cuda_sddmm.py `<kernel>_groups` (examples/sddmm.tk
    at K = 32, launched through CudaLaunch with tkc.sparse.row_groups after the kernel's own
    transpose of B), against the tkc call as the runtime makes it (tiles, walk or dot products),
    at K = 32 over COMPILED_SHAPES: us per call (do_bench) and as graph replays, each checked
    against float64 torch; and `<kernel>_groups_b`, its panels transposed from B itself (no
    transpose kernel). For the runtime's rules (tkc/runtime.py `_groups_for`, GROUP_PANELS_FROM_B)."""
    from codegen import cuda
    from tkc import driver

    tmp = tempfile.mkdtemp()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"GPU: {torch.cuda.get_device_name()}, {sms} SMs; K = 32, f16")
    print("| shape | tkc call us / graph | row groups us / graph | the same, panels from B (`_groups_b`) | items | "
          "max rel err (call, groups, _b) |")
    print("|---|---|---|---|---|---|")
    path = os.path.join(ROOT, "examples", "sddmm.tk")
    kernel = tkc.compile(path, target="cuda")
    for M, N, nnz, kind in COMPILED_SHAPES:
        p = (sp.uniform(M, N, nnz, seed=1) if kind == "uniform" else sp.rmat(M, N, nnz, seed=1)).to("cuda")
        A = torch.randn(M, 32, device="cuda", dtype=torch.float16)
        B = torch.randn(32, N, device="cuda", dtype=torch.float16)
        rows, cols = p.rows.long(), p.cols.long()
        ref = torch.cat([(A[rows[i:i + (1 << 20)]].double() * B[:, cols[i:i + (1 << 20)]].t().double()).sum(1)
                         for i in range(0, p.nnz, 1 << 20)])
        P = kernel(A, B, p)
        err_call = ((P.double() - ref).abs().max() / ref.abs().max()).item()
        call_cold = do_bench(lambda: kernel(A, B, p), warmup=50, rep=300) * 1e3
        call_graph = graph_us(lambda: kernel(A, B, p))
        source = cuda.emit(driver.optimize(driver.frontend(path, {"M": M, "N": N, "K": 32, "NNZ": p.nnz}), "cuda"))
        cu = os.path.join(tmp, f"groups-{M}-{N}-{p.nnz}.cu")
        with open(cu, "w") as f:
            f.write(source)
        launch = cuda_runtime.CudaLaunch(cu, source)
        plan = sp.dispatch_plan(p, 128, 128, 0)
        groups = sp.row_groups(p, 32, sms)
        P2 = torch.full((p.nnz,), float("nan"), device="cuda")
        bt = torch.empty(N, 32, device="cuda", dtype=A.dtype)
        args = [A, B, p.rows, p.cols, P2, bt, *plan.cuda_tensors()]
        launch(*args, fill_bt=True, row_groups=groups)
        torch.cuda.synchronize()
        err = ((P2.double() - ref).abs().max() / ref.abs().max()).item()
        cold = do_bench(lambda: launch(*args, fill_bt=True, row_groups=groups), warmup=50, rep=300) * 1e3
        graph = graph_us(lambda: launch(*args, fill_bt=True, row_groups=groups))
        P2.fill_(float("nan"))
        launch(*args, row_groups=groups, groups_from_b=True)
        torch.cuda.synchronize()
        err_b = ((P2.double() - ref).abs().max() / ref.abs().max()).item()
        cold_b = do_bench(lambda: launch(*args, row_groups=groups, groups_from_b=True), warmup=50, rep=300) * 1e3
        graph_b = graph_us(lambda: launch(*args, row_groups=groups, groups_from_b=True))
        print(f"| {M}x{N} {p.nnz} {kind} | {call_cold:.1f} / {call_graph:.1f} | {cold:.1f} / {graph:.1f} | "
              f"{cold_b:.1f} / {graph_b:.1f} | {groups.n_items} | {err_call:.1e}, {err:.1e}, {err_b:.1e} |", flush=True)
    return 0


def main() -> int:
    if "--compiled" in sys.argv:
        return compiled()
    shapes = ["uniform", "rmat"]
    for a in sys.argv[1:]:
        if a.startswith("--shapes="):
            shapes = a.split("=", 1)[1].split(",")
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or VARIANTS
    tmp = tempfile.mkdtemp()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"GPU: {torch.cuda.get_device_name()}, {sms} SMs")
    print("| shape | variant | blocks | slots | kernel cold us | kernel graph us | +transpose graph us | max rel err |")
    print("|---|---|---|---|---|---|---|---|")
    for key in shapes:
        M, N, K, nnz, kind = SHAPES[key]
        p = (sp.uniform(M, N, nnz, seed=1) if kind == "uniform" else sp.rmat(M, N, nnz, seed=1)).to("cuda")
        A = torch.randn(M, K, device="cuda", dtype=torch.float16)
        B = torch.randn(K, N, device="cuda", dtype=torch.float16)
        rows, cols = p.rows.long(), p.cols.long()
        ref = torch.cat([(A[rows[i:i + (1 << 20)]].double() * B[:, cols[i:i + (1 << 20)]].t().double()).sum(1)
                         for i in range(0, p.nnz, 1 << 20)])
        label = f"{M}x{N} K{K} {p.nnz} {kind}"
        dplan, bt, cold, warm, err = time_tkc_rows(A, B, p, ref, tmp, f"{M}-{N}-{K}-{kind}")
        print(f"| {label} | tkc call (n_tc {dplan.n_tc}, n_dot {dplan.n_dot}) | | | {cold:.1f} | {warm:.1f} | | {err:.1e} |",
              flush=True)
        tr = graph_us(lambda: bt.copy_(B.t()))
        print(f"| {label} | torch B.t() copy alone | | | | {tr:.1f} | | |", flush=True)
        for name in names:
            parts = name.split("-")
            T, W = int(parts[0]), int(parts[1])
            swz, fromb, nopf = "noswz" not in parts, "fromb" in parts, "nopf" in parts
            timing_only = [x for x in ("panelonly", "nomma", "noldsm", "nobatch", "nowrite") if x in parts]
            nobranch = "nobranch" in parts
            runs = "runs" in parts
            jn, px, si, owner, items, blocks, n_blocks, PWC = plan(p, N, K, W, sms, swz, runs)
            SMEM = PANEL + (T // 32) * W * 4
            src = os.path.join(tmp, f"groups-{M}-{N}-{K}-{kind}-{name}.cu")
            with open(src, "w") as f:
                f.write(("#define NOSWZ\n" if not swz else "") + ("#define FROMB\n" if fromb else "")
                        + ("#define NOPF\n" if nopf else "") + ("#define RUNS\n" if runs else "") + ("#define NOBRANCH\n" if nobranch else "") + "".join(f"#define {x.upper()}\n" for x in timing_only)
                        + source(M=M, N=N, K=K, T=T, W=W, PWC=PWC))
            mod = cupy.RawModule(path=cuda_runtime.compile_cubin(src, cuda_sddmm.ARCH))
            fn = mod.get_function("group_dots")
            fn.max_dynamic_shared_size_bytes = SMEM
            P2 = torch.full((p.nnz,), float("nan"), device="cuda")
            bt2 = B.t().contiguous()

            def call():
                stream = cupy.cuda.Stream.from_external(torch.cuda.current_stream())
                with stream:
                    fn((n_blocks,), (T,), tuple(numpy.uint64(t.data_ptr()) for t in (A, bt2, B, jn, px, si, owner, items, blocks, P2)),
                       shared_mem=SMEM)

            def with_transpose():
                if not fromb:
                    bt2.copy_(B.t())
                call()
            call()
            torch.cuda.synchronize()
            err = ((P2.double() - ref).abs().max() / ref.abs().max()).item()
            if not err < 1e-5 and not timing_only:
                print(f"| {label} | {name} | {n_blocks} | {jn.numel()} | WRONG | | | {err:.1e} |", flush=True)
                continue
            cold = do_bench(call, warmup=50, rep=300) * 1e3
            warm = graph_us(call)
            both = graph_us(with_transpose)
            print(f"| {label} | {name} | {n_blocks} | {jn.numel()} | {cold:.1f} | {warm:.1f} | {both:.1f} | {err:.1e} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

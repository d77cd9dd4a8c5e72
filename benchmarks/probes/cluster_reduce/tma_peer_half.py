"""The peer's half loaded by TMA straight into the peer's shared memory (session 4, probe).
Run from the repository root after compiling the example:
`tkc compile --target cuda -D B=2112 examples/cluster_reduce_dsmem.tk -o DIR/x_new_128.cu`, then
`python3 benchmarks/probes/cluster_reduce/tma_peer_half.py DIR [T ...]` (x_new_T.cu for each T). From that file it writes
- x_tma_128.cu: thread 0 issues `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`
  of the other half (16 KiB) into the peer's P, counted on the peer's mbarrier, after the start
  barrier; no registers, no st.async: DRAM -> the peer's shared memory, the same one hop as the
  HBM example's loads;
- x_tma4_128.cu: the same in 4 bulk copies of 4 KiB;
- x_tmaA_128.cu: the own half also by TMA (into A, on the block's own mbarrier, before the start
  barrier; 32 KiB expected) instead of cp.async."""
import os, sys

d = sys.argv[1] if len(sys.argv) > 1 else ".device/exp11"
THREADS = [int(t) for t in sys.argv[2:]] or [128]  # x_new_T.cu must exist for each
BULK = r'''
__device__ __forceinline__ void tk_bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
'''


def cut(s, start, end):
    i, j = s.index(start), s.index(end)
    return s[:i], s[i:j], s[j:]


def make(src: str, pieces: int, own_tma: bool) -> str:
    s = src.replace("// ---- kernel ---", BULK + "// ---- kernel ---", 1)
    head, loads, tail = cut(s, "    // tile.copy(%X, %0)", "    // tile.cluster_barrier(): every block")
    s = head + tail  # no register loads of the other half
    head, store, tail = cut(s, "    // tile.peer_store(%0, %P)", "    // tile.cluster_barrier(): as an mbarrier wait")
    chunk = 16384 // pieces
    issue = ("    if (tid == 0) {\n"
             "        const unsigned peer = tk_mapa(tk_smem_addr(P), (r + 1) % 2);\n"
             "        const unsigned peer_recv = tk_mapa(tk_smem_addr(&tk_recv), (r + 1) % 2);\n"
             f"        for (int c = 0; c < {pieces}; ++c)\n"
             f"            tk_bulk_load(peer + c * {chunk}, &X[b * 16384 + (r + 1) % 2 * 8192 + c * {chunk // 2}], {chunk}, peer_recv);\n"
             "    }\n")
    s = head + issue + tail
    if own_tma:
        head, cp, tail = cut(s, "    // tile.copy(%X, %A)", "    // tile.cluster_barrier(): every block")
        own = ("    if (tid == 0) tk_bulk_load(tk_smem_addr(A), &X[b * 16384 + r * 8192], 16384, tk_smem_addr(&tk_recv));\n")
        s = head + own + tail
        s = s.replace("tk_mbar_arrive_expect(&tk_recv, 16384)", "tk_mbar_arrive_expect(&tk_recv, 32768)")
        s = s.replace("    tk_cp_async_wait<0>();  // cp.async into A: the copy must have landed before these bytes are touched\n", "")
    return s


for T in THREADS:
    src = open(os.path.join(d, f"x_new_{T}.cu")).read()
    for name, pieces, own in (("tma", 1, False), ("tma4", 4, False), ("tmaA", 1, True)):
        open(os.path.join(d, f"x_{name}_{T}.cu"), "w").write(make(src, pieces, own))

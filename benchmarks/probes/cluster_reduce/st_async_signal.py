"""The compiler's DSMEM example (cp.async own half, pushed peer half) with the data cluster barrier
replaced by `st.async` + an mbarrier in the receiving block: the receiver waits for the 16 KiB its
peer stores (complete_tx bytes), the sender does not wait at all, and no MEMBAR.ALL.GPU is issued.
Run from the repository root: `python3 benchmarks/probes/cluster_reduce/st_async_signal.py DIR`. Writes
x_now_T.cu (the example as compiled), x_sta_T.cu (the st.async form) for T in 128/256, and
x_hbm_1024.cu. Session 4 (2026-11-21). It patches the compiler's output as of ca80002, before the
compiler emitted this form itself (codegen/cuda_signal.py): run it in a checkout of that commit
(`git worktree add /tmp/tkc-ca80002 ca80002`); on later trees x_now_T is already the st.async form
and the patching asserts fail."""
import os, subprocess, sys

out = sys.argv[1] if len(sys.argv) > 1 else ".device/exp10"
os.makedirs(out, exist_ok=True)

HELPERS = r'''
__device__ __forceinline__ unsigned tk_sa(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned tk_mapa(unsigned a, unsigned rank) { unsigned r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank)); return r; }
__device__ __forceinline__ void tk_mbar_init(unsigned a, unsigned n) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(a), "r"(n) : "memory"); }
__device__ __forceinline__ void tk_mbar_expect(unsigned a, unsigned tx) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(a), "r"(tx) : "memory"); }
__device__ __forceinline__ void tk_mbar_wait(unsigned a, unsigned parity) {
  asm volatile("{\n .reg .pred p;\n TK_W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra TK_W;\n}" :: "r"(a), "r"(parity) : "memory");
}
__device__ __forceinline__ void tk_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void tk_st_async(unsigned addr, const __half* v, unsigned mbar) {
  const uint4 w = *reinterpret_cast<const uint4*>(v);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
               :: "r"(addr), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w), "r"(mbar) : "memory");
}
'''


def tkc(path, dst, *defs):
    cmd = [sys.executable, "-m", "tkc.cli", "compile", "--target", "cuda", "-D", "B=2112",
           *sum((["-D", d] for d in defs), []), path, "-o", dst]
    subprocess.run(cmd, check=True)
    return open(dst).read()


def sub(code, old, new):
    assert code.count(old) == 1, old
    return code.replace(old, new)


for T in (128, 256):
    code = tkc("examples/cluster_reduce_dsmem.tk", os.path.join(out, f"x_now_{T}.cu"), f"threads={T}")
    code = sub(code, "// ---- kernel ---", HELPERS + "// ---- kernel ---")
    code = sub(code, "    __half* const A = reinterpret_cast<__half*>(smem + 16384);  // f16[1, 8192], row pitch 8192\n",
               "    __half* const A = reinterpret_cast<__half*>(smem + 16384);  // f16[1, 8192], row pitch 8192\n"
               "    __shared__ __align__(8) unsigned long long tk_mbar;\n"
               "    if (tid == 0) { tk_mbar_init(tk_sa(&tk_mbar), 1); tk_fence_init(); tk_mbar_expect(tk_sa(&tk_mbar), 16384); }\n")
    code = sub(code, "        __half* const peer = cg::this_cluster().map_shared_rank(P, (r + 1) % 2);\n",
               "        const unsigned peer = tk_mapa(tk_sa(P), (r + 1) % 2), peer_bar = tk_mapa(tk_sa(&tk_mbar), (r + 1) % 2);\n")
    code = sub(code, "            tk_store<16>(&peer[col], pv);", "            tk_st_async(peer + col * 2, pv, peer_bar);")
    code = sub(code, "    cg::this_cluster().sync();\n", "    tk_mbar_wait(tk_sa(&tk_mbar), 0);\n")
    code = code.replace('"kernel": "cluster_reduce_dsmem"', '"kernel": "cluster_reduce_dsmem"')
    open(os.path.join(out, f"x_sta_{T}.cu"), "w").write(code)
tkc("examples/cluster_reduce_hbm.tk", os.path.join(out, "x_hbm_1024.cu"))

# x_stc_T_C: the st.async form in C chunks, each with its own mbarrier and cp.async group, so a
# block adds and writes its first columns while later ones are still arriving (a shorter tail).
KERNEL = r'''
template <int G> __device__ __forceinline__ void tk_wait_groups(int n) {
    if constexpr (G >= 0) { if (n == G) { tk_cp_async_wait<G>(); return; } tk_wait_groups<G - 1>(n); }
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(THREADS) cluster_reduce_dsmem(const __half* X, __half* Y) {
    constexpr int C = CHUNKS, IT = 8192 / 8 / THREADS, PER = IT / C;
    const int b = blockIdx.x, r = b % 2, q = (r + 1) % 2, tid = threadIdx.x;
    extern __shared__ __align__(128) unsigned char smem[];
    __half* const P = reinterpret_cast<__half*>(smem + 0);
    __half* const A = reinterpret_cast<__half*>(smem + 16384);
    __shared__ __align__(8) unsigned long long tk_mbar[C];
    if (tid == 0) {
        for (int c = 0; c < C; ++c) tk_mbar_init(tk_sa(&tk_mbar[c]), 1);
        tk_fence_init();
        for (int c = 0; c < C; ++c) tk_mbar_expect(tk_sa(&tk_mbar[c]), 16384 / C);
    }
    #pragma unroll
    for (int c = 0; c < C; ++c) {
        #pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int col = ((c * PER + j) * THREADS + tid) * 8;
            tk_cp_async<16>(&A[col], &X[b * 16384 + r * 8192 + col]);
        }
        tk_cp_async_commit();
    }
    uint4 t0[IT];
    #pragma unroll
    for (int it = 0; it < IT; ++it) t0[it] = *reinterpret_cast<const uint4*>(&X[b * 16384 + q * 8192 + (it * THREADS + tid) * 8]);
    tk_cluster_sync_relaxed();
    const unsigned peer = tk_mapa(tk_sa(P), q);
    #pragma unroll
    for (int c = 0; c < C; ++c) {
        const unsigned bar = tk_mapa(tk_sa(&tk_mbar[c]), q);
        #pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int it = c * PER + j;
            tk_st_async(peer + (it * THREADS + tid) * 16, reinterpret_cast<const __half*>(&t0[it]), bar);
        }
    }
    #pragma unroll
    for (int c = 0; c < C; ++c) {
        tk_mbar_wait(tk_sa(&tk_mbar[c]), 0);
        tk_wait_groups<C - 1>(C - 1 - c);
        #pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int col = ((c * PER + j) * THREADS + tid) * 8;
            alignas(16) __half a[8], p[8], o[8];
            tk_load<16>(a, &A[col]);
            tk_load<16>(p, &P[col]);
            #pragma unroll
            for (int e = 0; e < 8; ++e) o[e] = __float2half_rn(__half2float(a[e]) + __half2float(p[e]));
            tk_store<16>(&Y[b * 16384 + r * 8192 + col], o);
            tk_store<16>(&Y[(b - r + q) * 16384 + r * 8192 + col], o);
        }
    }
}
'''
for T, C in ((128, 2), (128, 4), (128, 8), (256, 2), (256, 4)):
    code = open(os.path.join(out, f"x_sta_{T}.cu")).read()
    head = code.split("extern \"C\" __global__")[0]
    open(os.path.join(out, f"x_stc_{T}_{C}.cu"), "w").write(
        head + KERNEL.replace("THREADS)", f"{T})").replace("CHUNKS", str(C)))

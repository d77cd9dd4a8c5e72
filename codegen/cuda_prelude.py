"""CUDA backend support: C++ dtypes, value conversions, elementwise math, and the prelude.

The prelude is the part of every generated translation unit that does not depend on the kernel:
CUDA toolkit headers, sized memory words for vectorized accesses, `cp.async`, `ldmatrix` and `mma.sync`
wrappers (sm_80+, PTX ISA), and the C-like float -> int conversions of the interpreter (truncate toward
zero, saturate). Conversions and math are emitted as explicit intrinsics so that the generated
code reads like hand-written CUDA; arithmetic is in f32 (f64 for f64 outputs), rounded to the
output dtype, exactly as dsl/interpreter.py defines it.
"""

from __future__ import annotations

from dsl.ops import COMPARE

C_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float", "f64": "double", "i8": "int8_t",
           "i32": "int32_t", "bool": "bool"}
SIZES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i8": 1, "i32": 4, "bool": 1}
# dtypes mma.sync m16n8k16 takes as operands with an f32 accumulator (sm_80+: f16 and bf16).
MMA_DTYPES = ("f16", "bf16")


def compute_dtype(out: str) -> str:
    """The dtype elementwise arithmetic runs in for an output of dtype `out` (interpreter rule)."""
    return "f64" if out == "f64" else "f32"


def convert(x: str, src: str, dst: str) -> str:
    """C expression converting `x` of dtype `src` to dtype `dst`, rounding like the interpreter
    (`round_to`): floats round to nearest even, ints truncate toward zero and saturate."""
    if src == dst:
        return x
    if dst == "bool":  # like C and the interpreter: nonzero (NaN included) is true
        return f"({convert(x, src, 'f64' if src == 'f64' else 'f32')} != 0)"
    if src == "bool":
        x, src = f"static_cast<float>({x})", "f32"
        if dst == "f32":
            return x
    if src == "i8" and dst == "f32":
        return f"tk_i8_to_f32({x})"
    if dst in ("f32", "f64"):
        if src == "f16":
            x = f"__half2float({x})"
        elif src == "bf16":
            x = f"__bfloat162float({x})"
        ctype = C_TYPES[dst]
        return x if (src in ("f16", "bf16") and dst == "f32") else f"static_cast<{ctype}>({x})"
    if dst == "f16":
        if src == "f64":
            return f"__double2half({x})"
        return f"__float2half_rn({convert(x, src, 'f32')})"
    if dst == "bf16":  # the interpreter rounds f64 to f32 first, then to bf16
        return f"__float2bfloat16_rn({convert(x, src, 'f32')})"
    wide = "f64" if src == "f64" else "f32"
    fn = {"i32": "tk_to_i32", "i8": "tk_to_i8"}[dst]
    return f"{fn}({convert(x, src, wide)})"


def literal(value: float, dtype: str) -> str:
    """A C literal of `value` in compute dtype `dtype` (f32 or f64)."""
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + ("f" if dtype == "f32" else "")


def apply(fn: str, args: list[str], ct: str) -> str:
    """C expression of elementwise `fn` on argument expressions already in compute dtype `ct`."""
    f = "f" if ct == "f32" else ""
    one, zero = literal(1.0, ct), literal(0.0, ct)
    x = args[0]
    binary = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    if fn in binary:
        return f"{x} {binary[fn]} {args[1]}"
    if fn in ("rsub", "rdiv"):  # the scalar on the left
        return f"{args[1]} {binary[fn[1:]]} {x}"
    if fn in COMPARE:
        return f"({x} {COMPARE[fn]} {args[1]})"
    if fn == "where":
        return f"({x} ? {args[1]} : {args[2]})"
    if fn in ("max", "min"):
        return f"f{fn}{f}({x}, {args[1]})"
    if fn == "pow":
        return f"pow{f}({x}, {args[1]})"
    return {
        "neg": f"-{x}",
        "exp": f"exp{f}({x})",
        "exp2": f"exp2{f}({x})",
        "log": f"log{f}({x})",
        "sin": f"sin{f}({x})",
        "cos": f"cos{f}({x})",
        "tanh": f"tanh{f}({x})",
        "sigmoid": f"{one} / ({one} + exp{f}(-{x}))",
        "relu": f"fmax{f}({x}, {zero})",
        "silu": f"{x} / ({one} + exp{f}(-{x}))",
        "abs": f"fabs{f}({x})",
        "sqrt": f"sqrt{f}({x})",
        "rsqrt": f"rsqrt{f}({x})" if ct == "f32" else f"{one} / sqrt({x})",
    }[fn]


def combine(fn: str, acc: str, x: str, ct: str) -> str:
    """C expression folding `x` into the running reduction `acc` (sum, max or min)."""
    f = "f" if ct == "f32" else ""
    return {"sum": f"{acc} + {x}", "max": f"fmax{f}({acc}, {x})", "min": f"fmin{f}({acc}, {x})"}[fn]


def identity(fn: str, ct: str) -> str:
    return {"sum": literal(0.0, ct), "max": "-INFINITY", "min": "INFINITY"}[fn]


PRELUDE = r"""#pragma nv_diag_suppress 177  // unused constants and indices are fine in generated code
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

// ---- tkc prelude: the same in every kernel -------------------------------------------------

// Programmatic dependent launch (sm_90, PTX `griddepcontrol`): a kernel launched with the
// programmatic-stream-serialization attribute (tkc.programmatic_launch) may start while its
// predecessor in the stream still runs; every kernel first waits until that predecessor has
// finished and its memory is visible (without the attribute the wait returns at once, at no
// measurable cost), then, when it was itself launched so (`programmatic`, the kernel's last
// argument, set by tkc/cuda_runtime.py), lets its own successor start launching. The trigger is
// not free: an ordinary launch that executes it takes about 0.1 us longer in a small grid (accum
// at 64 x 4096 f32 on an H200: 3.08 against 3.20 us as graph replays) and twice as long in a grid
// of 131072 blocks (RoPE; docs/PERFORMANCE.md "launch_dependents"). So only programmatic launches
// of grids of at most TK_PDL_TRIGGER_BLOCKS blocks give it; a larger grid's successor launches
// when the grid ends, which costs a launch's latency against a kernel of many waves.
#define TK_PDL_TRIGGER_BLOCKS 32768
__device__ __forceinline__ void tk_pdl_wait() {  // until the predecessor has finished and its writes are visible
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void tk_pdl_trigger() {  // the successor may start launching
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void tk_pdl_enter(const int programmatic) {
    tk_pdl_wait();
    if (programmatic && static_cast<unsigned long long>(gridDim.x) * gridDim.y * gridDim.z <= TK_PDL_TRIGGER_BLOCKS) tk_pdl_trigger();
}

// Four int8 values as the one 32-bit word `__dp4a` multiplies bytewise (tile.dot_reduce).
__device__ __forceinline__ int tk_pack_i8x4(int8_t a, int8_t b, int8_t c, int8_t d) {
    return static_cast<int>(static_cast<uint32_t>(static_cast<uint8_t>(a)) | (static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8) |
                            (static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16) | (static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24));
}

// A memory word of BYTES bytes: vectorized global and shared accesses move one per instruction.
template <int BYTES> struct tk_word;
template <> struct tk_word<16> { using type = uint4; };
template <> struct tk_word<8> { using type = uint2; };
template <> struct tk_word<4> { using type = unsigned int; };
template <> struct tk_word<2> { using type = unsigned short; };
template <> struct tk_word<1> { using type = unsigned char; };

// dst[0, N) = src[0, N) in BYTES-wide accesses; src is BYTES-aligned, dst a local alignas(16) array.
template <int BYTES, typename T, int N>
__device__ __forceinline__ void tk_load(T (&dst)[N], const T* src) {
    using W = typename tk_word<BYTES>::type;
    constexpr int PER = BYTES / static_cast<int>(sizeof(T));
    #pragma unroll
    for (int k = 0; k < N; k += PER) *reinterpret_cast<W*>(&dst[k]) = *reinterpret_cast<const W*>(src + k);
}

// dst[0, N) = src[0, N) in BYTES-wide accesses; dst is BYTES-aligned.
template <int BYTES, typename T, int N>
__device__ __forceinline__ void tk_store(T* dst, const T (&src)[N]) {
    using W = typename tk_word<BYTES>::type;
    constexpr int PER = BYTES / static_cast<int>(sizeof(T));
    #pragma unroll
    for (int k = 0; k < N; k += PER) *reinterpret_cast<W*>(dst + k) = *reinterpret_cast<const W*>(&src[k]);
}

// Asynchronous global -> shared copy of BYTES (4, 8 or 16) bytes; when `valid` is false nothing
// is read and the destination is zero-filled (src-size 0). 16-byte copies bypass L1 (.cg). `dst`
// is a shared-window address (__cvta_generic_to_shared), which a caller can keep and offset.
template <int BYTES>
__device__ __forceinline__ void tk_cp_async(const unsigned dst, const void* gmem_src, bool valid) {
    const int src_bytes = valid ? BYTES : 0;
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(gmem_src), "r"(src_bytes)
                     : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(dst), "l"(gmem_src), "n"(BYTES),
                     "r"(src_bytes) : "memory");
    }
}

template <int BYTES>
__device__ __forceinline__ void tk_cp_async(void* smem_dst, const void* gmem_src, bool valid) {
    tk_cp_async<BYTES>(static_cast<unsigned>(__cvta_generic_to_shared(smem_dst)), gmem_src, valid);
}

// The same without a bounds check (the whole word is always inside the tensor).
template <int BYTES>
__device__ __forceinline__ void tk_cp_async(void* smem_dst, const void* gmem_src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(dst), "l"(gmem_src) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" :: "r"(dst), "l"(gmem_src), "n"(BYTES) : "memory");
    }
}

__device__ __forceinline__ void tk_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void tk_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// Tensor cores (sm_80+, PTX ISA "Warp-level matrix instructions"): ldmatrix loads four 8x8 b16
// matrices, each lane giving one 16-byte row address (lanes 8i..8i+7: matrix i); mma.sync
// m16n8k16 multiplies a 16x16 A fragment (row-major) by a 16x8 B fragment into 16x8 f32.
// Accumulator lane layout (g = lane / 4, t = lane % 4): d0, d1 at row g, columns 2t, 2t + 1;
// d2, d3 at row g + 8, the same columns.
__device__ __forceinline__ void tk_ldmatrix_x4(unsigned (&r)[4], const void* smem_row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// The same, each 8x8 matrix transposed (B stored [k][n] -> the k-major B fragment).
__device__ __forceinline__ void tk_ldmatrix_x4_trans(unsigned (&r)[4], const void* smem_row) {
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// d += a (16x16, f16 or bf16) * b (16x8), f32 accumulation.
template <typename T>
__device__ __forceinline__ void tk_mma_16816(float* d, const unsigned (&a)[4], unsigned b0, unsigned b1) {
    if constexpr (std::is_same<T, __half>::value) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Transpose 4x4 32-bit words within each quad of lanes (tig = lane % 4): afterwards word i of
// lane tig is what word tig of lane i (of the same quad) held. Two butterfly steps (lane ^ 2,
// lane ^ 1), each exchanging the two words whose index differs from tig in that bit. Turns the
// 2-element accumulator pairs of four adjacent 16x8 mma blocks into 8 consecutive elements per lane
// (one 16-byte store instead of four 4-byte ones). Every lane of the warp must call it.
template <typename T>
__device__ __forceinline__ void tk_quad_transpose(T (&v)[8], int tig) {
    static_assert(sizeof(T) == 2, "pairs of 16-bit elements");
    unsigned* w = reinterpret_cast<unsigned*>(v);
    const bool hi = tig & 2, odd = tig & 1;
    #pragma unroll
    for (int c = 0; c < 2; ++c) {
        const unsigned r = __shfl_xor_sync(0xffffffffu, hi ? w[c] : w[2 + c], 2);
        if (hi) w[c] = r; else w[2 + c] = r;
    }
    #pragma unroll
    for (int c = 0; c < 2; ++c) {
        const unsigned r = __shfl_xor_sync(0xffffffffu, odd ? w[2 * c] : w[2 * c + 1], 1);
        if (odd) w[2 * c] = r; else w[2 * c + 1] = r;
    }
}

// Float -> int like C and the tkc interpreter: truncate toward zero, saturate (NaN -> 0).
__device__ __forceinline__ int32_t tk_to_i32(float x) { return __float2int_rz(x); }
__device__ __forceinline__ int32_t tk_to_i32(double x) { return __double2int_rz(x); }
__device__ __forceinline__ int8_t tk_to_i8(float x) { return static_cast<int8_t>(max(-128, min(127, __float2int_rz(x)))); }
__device__ __forceinline__ int8_t tk_to_i8(double x) { return static_cast<int8_t>(max(-128, min(127, __double2int_rz(x)))); }
// int8 -> f32 exactly without I2F (16 conversions per clock per SM on sm_90, a quarter of the
// rate of an add: the bound of an int8 GEMV): the integer added to the bits of 1.5 * 2^23, whose
// ulp is 1, then 1.5 * 2^23 subtracted; exact for |x| < 2^22.
__device__ __forceinline__ float tk_i8_to_f32(int8_t x) { return __int_as_float(0x4B400000 + x) - 12582912.0f; }
"""

# Values known only when the kernel runs, checked on the device (no host sync per call, as torch's
# own indexing checks on the device): index-tensor elements (`ids[b]`; codegen/cuda.py c_load,
# codegen/tilelang.py) and runtime scalars read from device memory with their `requires`.
CHECK_PRELUDE = r"""
// A failed check: the first thread to fail prints where (once per loaded module) and every
// failing thread stops the kernel (a trap), so the launch fails at the next synchronize and
// nothing outside a tensor is read or written. The others wait for the print before they trap
// (a trap first would lose the message).
__device__ int tk_error_reported;
__device__ __noinline__ void tk_fail(const char* where, const char* what, const char* name, int v, int hi) {
    if (atomicCAS(&tk_error_reported, 0, 1) == 0) {
        if (hi >= 0)
            printf("%s: error: index tensor `%s` holds %d, outside [0, %d) of what it indexes\n"
                   "  note: index values select rows (or columns) of a tensor and must lie inside it; the kernel "
                   "stopped, and CUDA reports the failed launch at the next synchronize\n", where, name, v, hi);
        else
            printf("%s: error: %s\n  note: with %s = %d (read from device memory); the kernel stopped, and CUDA "
                   "reports the failed launch at the next synchronize\n", where, what, name, v);
        __threadfence_system();
        atomicExch(&tk_error_reported, 2);
    } else {
        while (atomicAdd(&tk_error_reported, 0) != 2) {}
    }
    __trap();
}
// An element of an index tensor, checked against [0, hi).
__device__ __forceinline__ int tk_index(int v, int hi, const char* where, const char* name) {
    if (static_cast<unsigned>(v) >= static_cast<unsigned>(hi)) tk_fail(where, "", name, v, hi);
    return v;
}
// A condition on a runtime scalar `name` = v read from device memory (its range, a `requires`).
__device__ __forceinline__ int tk_require(bool ok, const char* where, const char* what, const char* name, int v) {
    if (!ok) tk_fail(where, what, name, v, -1);
    return 0;
}
"""

GRID_PRELUDE = r"""
// `sync grid`: a barrier of every block of the grid, through cooperative groups (`grid.sync()`,
// an arrive with release and a poll with acquire at GPU scope on the launch's barrier word). The
// kernel is launched cooperatively (tkc/cuda_runtime.py: cuLaunchKernelEx with the cooperative
// attribute), which fails unless every block of the grid can be resident at once.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
"""

CLUSTER_PRELUDE = r"""
// Thread-block clusters: cluster barriers and peer shared memory (DSMEM) through cooperative groups.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// A cluster barrier that orders no memory (map-dsmem's `relaxed` barrier: every block of the
// cluster has started). Unlike cg's sync (barrier.cluster.arrive.release), it emits no
// MEMBAR.ALL.GPU, which would wait for the loads in flight before arriving.
__device__ __forceinline__ void tk_cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
}
"""

# Pushed stores signalled through an mbarrier (codegen/cuda_signal.py): the receiver's mbarrier
# expects the bytes its peers store with st.async (PTX ISA: "st.async", "mbarrier").
SIGNAL_PRELUDE = r"""
__device__ __forceinline__ unsigned tk_smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// The address of the same shared-memory byte in the block of cluster rank `rank`.
__device__ __forceinline__ unsigned tk_mapa(unsigned addr, unsigned rank) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(rank));
    return out;
}
// One thread: an mbarrier for one arrival; the fence makes the initialized barrier visible to the
// cluster (before a cluster barrier).
__device__ __forceinline__ void tk_mbar_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(tk_smem_addr(bar)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// The same thread, after a __syncwarp() (without it compute-sanitizer racecheck reports the init, a
// uniform-datapath instruction in SASS, and this arrive as an intra-warp hazard; a __syncwarp(1)
// inside the thread's branch cost 0.25 us at 1056 clusters on an H200): arrive, and expect `bytes`
// more to land before the phase completes.
__device__ __forceinline__ void tk_mbar_arrive_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(tk_smem_addr(bar)), "r"(bytes) : "memory");
}
// Wait until phase 0 of the mbarrier completed: every expected byte has landed and is visible.
__device__ __forceinline__ void tk_mbar_wait(unsigned long long* bar) {
    unsigned done;
    do {
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(tk_smem_addr(bar)) : "memory");
    } while (!done);
}
// src[0, N) into the shared::cluster address `addr` in BYTES-wide st.async stores (4, 8 or 16),
// each counted on the receiver's mbarrier `bar` (a shared::cluster address too).
template <int BYTES, typename T, int N>
__device__ __forceinline__ void tk_st_async(unsigned addr, const T (&src)[N], unsigned bar) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "st.async stores 4, 8 or 16 bytes");
    const unsigned* w = reinterpret_cast<const unsigned*>(src);
    #pragma unroll
    for (int i = 0; i < int(sizeof(T)) * N / BYTES; ++i, addr += BYTES, w += BYTES / 4) {
        if constexpr (BYTES == 16)
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
                         :: "r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]), "r"(bar) : "memory");
        else if constexpr (BYTES == 8)
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%0], {%1, %2}, [%3];"
                         :: "r"(addr), "r"(w[0]), "r"(w[1]), "r"(bar) : "memory");
        else
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];"
                         :: "r"(addr), "r"(w[0]), "r"(bar) : "memory");
    }
}
"""

"""CUDA backend support: C++ dtypes, value conversions, elementwise math, and the prelude.

The prelude is the part of every generated translation unit that does not depend on the kernel:
CUDA toolkit headers, sized memory words for vectorized accesses, `cp.async` wrappers (sm_80+,
PTX ISA "cp.async"), and the C-like float -> int conversions of the interpreter (truncate toward
zero, saturate). Conversions and math are emitted as explicit intrinsics so that the generated
code reads like hand-written CUDA; arithmetic is in f32 (f64 for f64 outputs), rounded to the
output dtype, exactly as dsl/interpreter.py defines it.
"""

from __future__ import annotations

C_TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float", "f64": "double", "i8": "int8_t",
           "i32": "int32_t"}
SIZES = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i8": 1, "i32": 4}
# dtypes WMMA 16x16x16 takes as operands with an f32 accumulator (sm_80+: f16 and bf16).
WMMA_DTYPES = ("f16", "bf16")


def compute_dtype(out: str) -> str:
    """The dtype elementwise arithmetic runs in for an output of dtype `out` (interpreter rule)."""
    return "f64" if out == "f64" else "f32"


def convert(x: str, src: str, dst: str) -> str:
    """C expression converting `x` of dtype `src` to dtype `dst`, rounding like the interpreter
    (`round_to`): floats round to nearest even, ints truncate toward zero and saturate."""
    if src == dst:
        return x
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
    if fn in ("max", "min"):
        return f"f{fn}{f}({x}, {args[1]})"
    return {
        "neg": f"-{x}",
        "exp": f"exp{f}({x})",
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
#include <mma.h>
#include <cstdint>

using namespace nvcuda;

// ---- tkc prelude: the same in every kernel -------------------------------------------------

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
// is read and the destination is zero-filled (src-size 0). 16-byte copies bypass L1 (.cg).
template <int BYTES>
__device__ __forceinline__ void tk_cp_async(void* smem_dst, const void* gmem_src, bool valid) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
    const int src_bytes = valid ? BYTES : 0;
    if constexpr (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(gmem_src), "r"(src_bytes)
                     : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" :: "r"(dst), "l"(gmem_src), "n"(BYTES),
                     "r"(src_bytes) : "memory");
    }
}

__device__ __forceinline__ void tk_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void tk_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// Float -> int like C and the tkc interpreter: truncate toward zero, saturate (NaN -> 0).
__device__ __forceinline__ int32_t tk_to_i32(float x) { return __float2int_rz(x); }
__device__ __forceinline__ int32_t tk_to_i32(double x) { return __double2int_rz(x); }
__device__ __forceinline__ int8_t tk_to_i8(float x) { return static_cast<int8_t>(max(-128, min(127, __float2int_rz(x)))); }
__device__ __forceinline__ int8_t tk_to_i8(double x) { return static_cast<int8_t>(max(-128, min(127, __double2int_rz(x)))); }
"""

CLUSTER_PRELUDE = r"""
// Thread-block clusters: cluster barriers and peer shared memory (DSMEM) through cooperative groups.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
"""

// A CPU stand-in for the CUDA the tkc backend emits for f32 kernels without clusters or wgmma
// (examples/sgemm.tk), and for the SDDMM's `<kernel>_groups` (16-bit operands, ldmatrix, mma.sync): it replaces the generated file's prelude (everything before
// "// ---- kernel"), so g++ -std=c++20 compiles the kernel itself unchanged. One std::thread per
// CUDA thread of a block, blocks one after another, std::barrier for __syncthreads, one shared
// memory array; cp.async copies are queued and land only at the cp.async.wait_group that retires
// their group (zero-filled when invalid), so a read before the wait sees stale bytes; misaligned
// vector accesses abort; __shfl_xor_sync exchanges through a per-warp slot array between two
// std::barrier waits of the warp's 32 threads (every lane must call it, as on the GPU). Used by
// tests/test_sgemm_emulated.py and tests/cuda_emu/emulate.py. Not a model of the memory system:
// races between threads are not detected.
#include <barrier>
#include <cmath>
#include <memory>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <thread>
#include <vector>
#include <type_traits>
struct dim3_ { int x = 0, y = 0, z = 0; };
thread_local dim3_ threadIdx, blockIdx, gridDim;
std::barrier<>* g_bar;
alignas(128) unsigned char smem[232448];
#define smem_raw smem  // a kernel's dynamic shared memory (`extern __shared__ unsigned char smem_raw[]`)
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n)
#define __shared__
inline void __syncthreads() { g_bar->arrive_and_wait(); }
struct tk_warp { std::barrier<> bar{32}; unsigned long long slot[32]; unsigned frag[32][6]; };
std::vector<std::unique_ptr<tk_warp>> g_warps;  // one per warp of the running block
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
    static_assert(sizeof(T) <= 8, "one word per lane");
    tk_warp& w = *g_warps[threadIdx.x / 32];
    const int lane = threadIdx.x % 32;
    std::memcpy(&w.slot[lane], &v, sizeof(T));
    w.bar.arrive_and_wait();
    T r;
    std::memcpy(&r, &w.slot[lane ^ mask], sizeof(T));
    w.bar.arrive_and_wait();
    return r;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int tk_pack_i8x4(int8_t a, int8_t b, int8_t c, int8_t d) {
    return static_cast<int>(static_cast<uint32_t>(static_cast<uint8_t>(a)) | (static_cast<uint32_t>(static_cast<uint8_t>(b)) << 8) |
                            (static_cast<uint32_t>(static_cast<uint8_t>(c)) << 16) | (static_cast<uint32_t>(static_cast<uint8_t>(d)) << 24));
}
// __dp4a(a, b, c): c plus the products of a's and b's four signed bytes (CUDA's integer intrinsic)
inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; ++k) c += static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
    return c;
}
inline int __float2int_rz(float x) { return std::isnan(x) ? 0 : x >= 2147483647.0f ? 2147483647 : x <= -2147483648.0f ? (-2147483647 - 1) : static_cast<int>(x); }
inline int __double2int_rz(double x) { return std::isnan(x) ? 0 : x >= 2147483647.0 ? 2147483647 : x <= -2147483648.0 ? (-2147483647 - 1) : static_cast<int>(x); }
inline int32_t tk_to_i32(float x) { return __float2int_rz(x); }
inline int32_t tk_to_i32(double x) { return __double2int_rz(x); }
inline int8_t tk_to_i8(float x) { return static_cast<int8_t>(std::max(-128, std::min(127, __float2int_rz(x)))); }
inline int8_t tk_to_i8(double x) { return static_cast<int8_t>(std::max(-128, std::min(127, __double2int_rz(x)))); }
inline float tk_i8_to_f32(int8_t x) { int32_t b = 0x4B400000 + x; float f; std::memcpy(&f, &b, 4); return f - 12582912.0f; }
using std::max;
using std::min;
inline void tk_pdl_enter(int) {}  // one grid at a time: nothing runs before it
inline void tk_pdl_wait() {}
inline void tk_pdl_trigger() {}
// An index tensor's element outside [0, hi): the message the GPU prints, then the process stops
// (the GPU's trap).
// A runtime scalar read from memory that fails its check: the GPU's message, then the process stops.
inline int tk_require(bool ok, const char* where, const char* what, const char* name, int v) {
    if (!ok) {
        fprintf(stderr, "%s: error: %s\n  note: with %s = %d (read from device memory)\n", where, what, name, v);
        abort();
    }
    return 0;
}
inline int tk_index(int v, int hi, const char* where, const char* name) {
    if (static_cast<unsigned>(v) >= static_cast<unsigned>(hi)) {
        fprintf(stderr, "%s: error: index tensor `%s` holds %d, outside [0, %d) of what it indexes\n", where, name, v, hi);
        abort();
    }
    return v;
}
template <int BYTES> struct tk_word;
template <> struct tk_word<16> { struct type { unsigned a[4]; }; };
template <> struct tk_word<8> { struct type { unsigned a[2]; }; };
template <> struct tk_word<4> { using type = unsigned int; };
template <int BYTES, typename T, int N>
inline void tk_load(T (&dst)[N], const T* src) {
    static_assert(N * sizeof(T) % BYTES == 0, "whole words");
    if (reinterpret_cast<uintptr_t>(src) % BYTES) { fprintf(stderr, "misaligned tk_load<%d>\n", BYTES); abort(); }
    std::memcpy(dst, src, sizeof(T) * N);
}
template <int BYTES, typename T, int N>
inline void tk_store(T* dst, const T (&src)[N]) {
    if (reinterpret_cast<uintptr_t>(dst) % BYTES) { fprintf(stderr, "misaligned tk_store<%d>\n", BYTES); abort(); }
    std::memcpy(dst, src, sizeof(T) * N);
}
struct Copy { void* dst; const void* src; int bytes; bool valid; };
thread_local std::deque<std::vector<Copy>> g_groups;  // committed groups, oldest first
thread_local std::vector<Copy> g_open;
template <int BYTES>
inline void tk_cp_async(void* d, const void* s, bool valid) {
    if (reinterpret_cast<uintptr_t>(d) % BYTES || (valid && reinterpret_cast<uintptr_t>(s) % BYTES)) { fprintf(stderr, "misaligned cp.async\n"); abort(); }
    g_open.push_back({d, s, BYTES, valid});
}
template <int BYTES>
inline void tk_cp_async(void* d, const void* s) { tk_cp_async<BYTES>(d, s, true); }
inline void tk_cp_async_commit() { g_groups.push_back(g_open); g_open.clear(); }
template <int N>
inline void tk_cp_async_wait() {
    while ((int)g_groups.size() > N) {
        for (auto& c : g_groups.front()) {
            if (c.valid) std::memcpy(c.dst, c.src, c.bytes); else std::memset(c.dst, 0, c.bytes);
        }
        g_groups.pop_front();
    }
}

// ---- 16-bit operands and the warp's tensor-core instructions (SDDMM `<kernel>_groups`) ----------
// __half and __nv_bfloat16 as their bits; ldmatrix and mma.sync exchange the lanes' registers
// through the warp's slots between two barriers of its 32 threads, as the GPU's warp-wide
// instructions do (every lane must call them). mma's products and sums in float, in k order.
struct alignas(8) uint2 { unsigned x, y; };  // CUDA's vector types (`<kernel>_groups_b` loads B by them)
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) int2 { int x, y; };  // (`<kernel>_groups` reads its items, slots and P indices by them)
struct alignas(16) int4 { int x, y, z, w; };
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
template <typename T> inline T __ldcs(const T* p) { return *p; }  // cache hints: plain accesses here
template <typename T> inline void __stcs(T* p, T v) { *p = v; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
// __byte_perm(x, y, s): byte i of the result is byte (s >> 4 i) & 7 of the 8 bytes y:x (CUDA's intrinsic)
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
inline float tk_h2f(unsigned short h) {
    const unsigned s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                  : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(static_cast<float>(m | 1024), static_cast<int>(e) - 25);
    return s ? -v : v;
}
inline float tk_bf2f(unsigned short b) { const unsigned u = static_cast<unsigned>(b) << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline float __half2float(__half h) { return tk_h2f(h.x); }
inline float __bfloat162float(__nv_bfloat16 b) { return tk_bf2f(b.x); }
inline size_t __cvta_generic_to_shared(const void* p) { return static_cast<size_t>(static_cast<const unsigned char*>(p) - smem); }
inline void __syncwarp(unsigned = 0xffffffffu) { g_warps[threadIdx.x / 32]->bar.arrive_and_wait(); }
inline void tk_ldmatrix_x4(unsigned (&r)[4], const void* smem_row) {  // lanes 8i..8i+7 give matrix i's rows
    tk_warp& w = *g_warps[threadIdx.x / 32];
    const int lane = threadIdx.x % 32;
    w.slot[lane] = reinterpret_cast<uintptr_t>(smem_row);
    w.bar.arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        const auto* row = reinterpret_cast<const unsigned char*>(static_cast<uintptr_t>(w.slot[8 * i + lane / 4]));
        if (reinterpret_cast<uintptr_t>(row) % 16) { fprintf(stderr, "misaligned ldmatrix row\n"); abort(); }
        std::memcpy(&r[i], row + 4 * (lane % 4), 4);
    }
    w.bar.arrive_and_wait();
}
template <typename T>
inline void tk_mma_16816(float* d, const unsigned (&a)[4], unsigned b0, unsigned b1) {  // d += A (16x16) B (16x8)
    tk_warp& w = *g_warps[threadIdx.x / 32];
    const int lane = threadIdx.x % 32;
    for (int i = 0; i < 4; ++i) w.frag[lane][i] = a[i];
    w.frag[lane][4] = b0, w.frag[lane][5] = b1;
    w.bar.arrive_and_wait();
    auto val = [](unsigned word, int hi) {
        const unsigned short b = static_cast<unsigned short>(hi ? word >> 16 : word & 0xffff);
        return std::is_same<T, __half>::value ? tk_h2f(b) : tk_bf2f(b);
    };
    // A[r][k]: lane 4 (r % 8) + (k % 8) / 2, register (r >= 8) + 2 (k >= 8); B[k][c]: lane 4 c + (k % 8) / 2,
    // register b0 or b1 (k >= 8); the low half holds the even k (PTX ISA, mma.m16n8k16 fragments)
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
        const int r = g + 8 * (i / 2), c = 2 * t + i % 2;
        float s = 0.0f;
        for (int k = 0; k < 16; ++k)
            s += val(w.frag[4 * (r % 8) + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)], k % 2)
                 * val(w.frag[4 * c + (k % 8) / 2][4 + (k >= 8)], k % 2);
        d[i] += s;
    }
    w.bar.arrive_and_wait();
}

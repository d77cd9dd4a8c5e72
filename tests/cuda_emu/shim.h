// A CPU stand-in for the CUDA the tkc backend emits for f32 kernels without clusters or tensor
// cores (examples/sgemm.tk): it replaces the generated file's prelude (everything before
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
struct tk_warp { std::barrier<> bar{32}; unsigned long long slot[32]; };
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

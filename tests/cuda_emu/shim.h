// A CPU stand-in for the CUDA the tkc backend emits for f32 kernels without clusters or tensor
// cores (examples/sgemm.tk): it replaces the generated file's prelude (everything before
// "// ---- kernel"), so g++ -std=c++20 compiles the kernel itself unchanged. One std::thread per
// CUDA thread of a block, blocks one after another, std::barrier for __syncthreads, one shared
// memory array; cp.async copies are queued and land only at the cp.async.wait_group that retires
// their group (zero-filled when invalid), so a read before the wait sees stale bytes; misaligned
// vector accesses abort. Used by tests/test_sgemm_emulated.py. Not a model of the memory system:
// races between threads are not detected.
#include <barrier>
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
thread_local dim3_ threadIdx, blockIdx;
std::barrier<>* g_bar;
alignas(128) unsigned char smem[232448];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(n)
#define __shared__
inline void __syncthreads() { g_bar->arrive_and_wait(); }
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

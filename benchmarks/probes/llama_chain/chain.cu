// Hand-written reference point (not generated): one decode step of a stories110M-shaped model
// (dim 768, hidden 2048, 12 layers, vocab 32000, f16 weights) as ONE persistent launch, to measure
// how fast the step's chain of dependent exchanges can go on this GPU.
//
// The step is the llama step at position 0 (attention over one position is that head's v, so the
// attention phase is an exchange and a copy) without RoPE (elementwise, no exchange):
//   x = emb[tok]; per layer: qkv = Wqkv (rms(x) g_att); att = v; x += Wo att;
//   h = silu(W1 xn) * (W3 xn) with xn = rms(x) g_ffn; x += W2 h;
//   logits = Wcls (rms(x) g_fin); tok = argmax(logits)  (written back: the next launch reads it).
// Each block owns fixed rows of every matrix. Between the phases every block needs the whole
// previous output (a GEMV's input), so a step is 60 grid-wide exchanges (5 per layer; the last
// one is the classifier's input), plus the argmax's last-block merge.
//
// Compile-time switches (the probe writes them as #defines):
//   CH_NB   blocks (one per SM), CH_T threads per block, CH_S ring slots of SLOT bytes
//   EXCH 0  each output value is stored with the step's epoch in one 8-byte word
//           (value, epoch) and read by polling the word until its epoch is this step's:
//           the data is its own flag (no barrier, no fence)
//   EXCH 1  plain stores, then a grid barrier (fence, one atomic counter per exchange, poll)
//   EXCH 2  plain stores, then a grid barrier of flags: each block stores the epoch into its own
//           flag (release), NB threads of every block poll the NB flags at once (acquire)
//   EXCH 3  as 0, with a 32 ns __nanosleep between polls (fewer loads while waiting)
//   EXCH 4  as 1, the arrival a release reduction (red.release.gpu: no fence, no reply awaited)
//   EXCH 5  (BARE only) as 0 with three f16 values per word and a 16-bit epoch: a third of the
//           words to poll
//   BARE 1  no weights and no products: each output is one input value times the scale, and no
//           classifier (the exchanges' own time)
//   STREAM 1  the block's weight rows stream through a ring of S slots with cp.async, issued in
//           consumption order up to S chunks ahead (weights do not depend on activations, so the
//           loads run ahead across the exchanges); STREAM 0: the ring is filled once and every
//           phase reads it again (no weight traffic at all: the chain's own time; wrong numbers)
// tkc-launch header: written by probe.py
#include <cuda_fp16.h>

#ifndef CH_NB
#define CH_NB 132
#endif
#ifndef CH_T
#define CH_T 512
#endif
#ifndef CH_S
#define CH_S 16
#endif
#ifndef EXCH
#define EXCH 0
#endif
#ifndef BARE
#define BARE 0
#endif
#ifndef STREAM
#define STREAM 1
#endif
#define LL (EXCH == 0 || EXCH == 3)  // the data is its own flag
#if EXCH == 5 && !BARE
#error "EXCH 5 is for BARE 1 only"
#endif
#ifndef WINC
#define WINC 4
#endif

constexpr int NB = CH_NB, T = CH_T, S = CH_S;
constexpr int D = 768, HID = 2048, L = 12, V = 32000, QKV = 3 * D;
constexpr int SLOT = 12288;  // bytes: 8 rows of 768 or 3 rows of 2048 f16
constexpr int NW = T / 32;
constexpr long LAYER = (long)QKV * D + (long)D * D + 2L * HID * D + (long)D * HID;
constexpr long OFF_CLS = L * LAYER;
// exchange buffers (words), per layer: qkv, att, x after wo, h, x after w2
constexpr int B_QKV = 0, B_ATT = QKV, B_XO = B_ATT + D, B_H = B_XO + D, B_XF = B_H + HID, B_LAYER = B_XF + D;
constexpr int MAXTAB = 512;  // chunk-table entries per block

__device__ __forceinline__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void cp16(void* s, const void* g) {
    unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(s));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void waitg() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void wait_pending(int n) {  // at most n groups still in flight
    switch (n) {
        case 0: waitg<0>(); break;   case 1: waitg<1>(); break;   case 2: waitg<2>(); break;
        case 3: waitg<3>(); break;   case 4: waitg<4>(); break;   case 5: waitg<5>(); break;
        case 6: waitg<6>(); break;   case 7: waitg<7>(); break;   case 8: waitg<8>(); break;
        case 9: waitg<9>(); break;   case 10: waitg<10>(); break; case 11: waitg<11>(); break;
        case 12: waitg<12>(); break; case 13: waitg<13>(); break; case 14: waitg<14>(); break;
        default: waitg<15>(); break;
    }
}

struct Ctx {
    char* ring;
    const int2* tab;  // this block's chunks: (16-byte offset into W, 16-byte words)
    int nc;           // chunks in the table
    const __half* W;
    int c, issued;    // next chunk to consume; chunk groups committed
    uint2* ll;
    float* plain;
    unsigned ep;
    unsigned* ctl;
    int p;            // exchanges passed
};

__device__ __forceinline__ void issue(Ctx& x, int c) {
    if (!BARE && c < x.nc && (STREAM || c < S)) {
        const int2 e = x.tab[c];
        const char* src = reinterpret_cast<const char*>(x.W) + (size_t)e.x * 16;
        char* dst = x.ring + (c % S) * SLOT;
        for (int i = threadIdx.x; i < e.y; i += T) cp16(dst + i * 16, src + (size_t)i * 16);
    }
    commit();
}

__device__ __forceinline__ void put(Ctx& x, int i, float v) {
#if LL
    const unsigned long long w = ((unsigned long long)x.ep << 32) | __float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(x.ll + i), "l"(w) : "memory");
#else
    __stcg(x.plain + i, v);
#endif
}

#if LL
__device__ __forceinline__ unsigned long long load_word(const uint2* p) {
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    return w;
}
// poll word w (already loaded once) until it carries this step's epoch; give up after about a
// million polls or once another thread has (ctl[2]: reported by the probe)
__device__ __forceinline__ float settle(Ctx& x, int i, unsigned long long w) {
    int n = 0;
    while ((unsigned)(w >> 32) != x.ep) {
        if ((++n & 1023) == 0 && (n >= (1 << 20) || *reinterpret_cast<volatile unsigned*>(x.ctl + 2))) {
            atomicExch(x.ctl + 2, 1u);
            break;
        }
#if EXCH == 3
        __nanosleep(32);
#endif
        w = load_word(x.ll + i);
    }
    return __uint_as_float((unsigned)w);
}
#endif

__device__ __forceinline__ float get(Ctx& x, int i) {
#if LL
    return settle(x, i, load_word(x.ll + i));
#else
    return __ldcg(x.plain + i);
#endif
}

#if EXCH == 5
__device__ __forceinline__ unsigned long long load_word(const uint2* p) {
    unsigned long long w;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(p) : "memory");
    return w;
}
__device__ __forceinline__ unsigned long long settle3(Ctx& x, int k, unsigned long long w) {
    int n = 0;
    while ((unsigned)(w >> 48) != (x.ep & 0xffffu)) {
        if ((++n & 1023) == 0 && (n >= (1 << 20) || *reinterpret_cast<volatile unsigned*>(x.ctl + 2))) {
            atomicExch(x.ctl + 2, 1u);
            break;
        }
        w = load_word(x.ll + k);
    }
    return w;
}
__device__ __forceinline__ void put3(Ctx& x, int k, unsigned long long w) {
    w = (w & 0xffffffffffffull) | ((unsigned long long)(x.ep & 0xffffu) << 48);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(x.ll + k), "l"(w) : "memory");
}
__device__ __forceinline__ unsigned long long pack3(float a, float b, float c) {
    return (unsigned long long)__half_as_ushort(__float2half(a)) | ((unsigned long long)__half_as_ushort(__float2half(b)) << 16) |
           ((unsigned long long)__half_as_ushort(__float2half(c)) << 32);
}
#endif

// the end of a phase: EXCH 1 passes a grid barrier (counter p counts arrivals over all launches)
__device__ __forceinline__ void exchange(Ctx& x) {
#if EXCH == 1 || EXCH == 4
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned* cnt = x.ctl + 8 + x.p;
#if EXCH == 1
        __threadfence();
        atomicAdd(cnt, 1u);
#else
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt) : "memory");
#endif
        unsigned v;
        int n = 0;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(cnt) : "memory");
        } while (v < x.ep * NB && ++n < (1 << 20));
        if (v < x.ep * NB) atomicExch(x.ctl + 2, 1u);
    }
    __syncthreads();
#elif EXCH == 2
    __syncthreads();
    unsigned* flags = x.ctl + 128 + x.p * NB;
    if (threadIdx.x == 0) {
        __threadfence();
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flags + blockIdx.x), "r"(x.ep) : "memory");
    }
    if (threadIdx.x < NB) {  // every block's flag polled at once
        unsigned v;
        int n = 0;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(flags + threadIdx.x) : "memory");
        } while (v != x.ep && ++n < (1 << 20));
        if (v != x.ep) atomicExch(x.ctl + 2, 1u);
    }
    __syncthreads();
#endif
    x.p++;
}

__device__ __forceinline__ int lo(int R, int b) { return (int)((long)b * R / NB); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int K>
__device__ __forceinline__ float dot_row(const char* w, const float* xs, int lane) {
    float acc = 0.f;
#pragma unroll
    for (int q = lane; q < K / 8; q += 32) {
        const uint4 u = reinterpret_cast<const uint4*>(w)[q];
        const __half2* h = reinterpret_cast<const __half2*>(&u);
        const float4 a = reinterpret_cast<const float4*>(xs)[2 * q], b = reinterpret_cast<const float4*>(xs)[2 * q + 1];
        const float2 f0 = __half22float2(h[0]), f1 = __half22float2(h[1]), f2 = __half22float2(h[2]),
                     f3 = __half22float2(h[3]);
        acc += f0.x * a.x + f0.y * a.y + f1.x * a.z + f1.y * a.w + f2.x * b.x + f2.y * b.y + f3.x * b.z + f3.y * b.w;
    }
    return warp_sum(acc);
}

// MODE 0: out[r] = dot * scale; 1: out[r] = res[r] + dot; 2: rows are (w1, w3) pairs,
// out[r / 2] = silu(d1 * scale) * d3 * scale; 3: the classifier (logits, running argmax)
template <int K, int MODE>
__device__ void gemv(Ctx& x, int r0, int r1, const float* xs, float scale, const float* res, int out, int win,
                     float* logits, float& best, int& best_i) {
    constexpr int RPC = SLOT / (2 * K);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n = r1 - r0, nch = (n + RPC - 1) / RPC, c0 = x.c;
    if (BARE) {  // the exchange alone: each output is one input value (no weights, no products)
#if EXCH == 5
        if (MODE != 3) {  // this block's words of the output (three values each)
            const int total = MODE == 2 ? HID : MODE == 0 ? QKV : D, words = (total + 2) / 3;
            for (int k = lo(words, blockIdx.x) + threadIdx.x; k < lo(words, blockIdx.x + 1); k += T)
                put3(x, out + k, pack3(xs[(3 * k) % D] * scale, xs[(3 * k + 1) % D] * scale, xs[(3 * k + 2) % D] * scale));
        }
        __syncthreads();
        x.c = c0 + nch;
        return;
#endif
        if (MODE != 3)
            for (int j = threadIdx.x; j < (MODE == 2 ? n / 2 : n); j += T)
                put(x, out + (MODE == 2 ? r0 / 2 : r0) + j, xs[(r0 + j) % D] * scale);
        __syncthreads();
        x.c = c0 + nch;
        return;
    }
    for (int w0 = 0; w0 < nch; w0 += win) {
        const int w = min(win, nch - w0);
        if (STREAM) wait_pending(x.issued - (c0 + w0 + w));
        __syncthreads();
        const int j0 = w0 * RPC, j1 = min(n, (w0 + w) * RPC);
        if (MODE == 2) {
            for (int q = j0 / 2 + warp; q < j1 / 2; q += NW) {
                const int j = 2 * q;
                const char* p1 = x.ring + ((c0 + j / RPC) % S) * SLOT + (j % RPC) * K * 2;
                const float d1 = dot_row<K>(p1, xs, lane) * scale, d3 = dot_row<K>(p1 + K * 2, xs, lane) * scale;
                if (lane == 0) put(x, out + (r0 + j) / 2, d1 / (1.f + __expf(-d1)) * d3);
            }
        } else {
            for (int j = j0 + warp; j < j1; j += NW) {
                const char* p = x.ring + ((c0 + j / RPC) % S) * SLOT + (j % RPC) * K * 2;
                const float d = dot_row<K>(p, xs, lane);
                if (lane == 0) {
                    if (MODE == 0) put(x, out + r0 + j, d * scale);
                    if (MODE == 1) put(x, out + r0 + j, res[r0 + j] + d);
                    if (MODE == 3) {
                        const float v = d * scale;
                        logits[r0 + j] = v;
                        if (v > best) best = v, best_i = r0 + j;  // rows ascend per warp: first index on ties
                    }
                }
            }
        }
        __syncthreads();  // the slots (and xs, the residual) are read: they may be refilled
        if (STREAM) {
            for (int k = 0; k < w; ++k) issue(x, c0 + w0 + k + S);
            x.issued += w;
        }
    }
    x.c = c0 + nch;
}

// the whole input vector: xs[i] = v * g[i] (g null: v), xl[i] = v when xl; returns sum v^2.
// Every word's first load is issued before any is waited on (one round trip, not one per word).
__device__ float gather(Ctx& x, int src, int n, float* xs, float* xl, const float* g, float* red) {
    constexpr int MAXW = (HID + T - 1) / T;
    float v[MAXW];
#if LL
    unsigned long long w[MAXW];
#pragma unroll
    for (int k = 0; k < MAXW; ++k)
        if (threadIdx.x + k * T < n) w[k] = load_word(x.ll + src + threadIdx.x + k * T);
#pragma unroll
    for (int k = 0; k < MAXW; ++k)
        if (threadIdx.x + k * T < n) v[k] = settle(x, src + threadIdx.x + k * T, w[k]);
#elif EXCH == 5
    {
        const int words = (n + 2) / 3;
        for (int k = threadIdx.x; k < words; k += T) {
            const unsigned long long w = settle3(x, src + k, load_word(x.ll + src + k));
            for (int m = 0; m < 3 && 3 * k + m < n; ++m) {
                const float u = __half2float(__ushort_as_half((unsigned short)(w >> (16 * m))));
                if (xl) xl[3 * k + m] = u;
                xs[3 * k + m] = g ? u * g[3 * k + m] : u;
            }
        }
    }
#else
#pragma unroll
    for (int k = 0; k < MAXW; ++k)
        if (threadIdx.x + k * T < n) v[k] = __ldcg(x.plain + src + threadIdx.x + k * T);
#endif
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < MAXW; ++k) {
        const int i = threadIdx.x + k * T;
        if (i < n && EXCH != 5) {
            if (xl) xl[i] = v[k];
            xs[i] = g ? v[k] * g[i] : v[k];
            ss += v[k] * v[k];
        }
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < NW; ++i) t += red[i];
    return t;
}

__device__ __forceinline__ unsigned long long key(float v, int i) {
    unsigned u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (0xffffffffu - (unsigned)i);
}

extern "C" __global__ void __launch_bounds__(T, 1) chain(const __half* __restrict__ W, const float* __restrict__ G,
                                                       const int2* __restrict__ tab, const int* __restrict__ nchunks,
                                                       uint2* ll, float* plain, float* logits, int* tok, unsigned* ctl,
                                                       unsigned long long* stamps) {
    extern __shared__ __align__(16) char smem[];
    float* xs = reinterpret_cast<float*>(smem + S * SLOT);  // the phase's input (2048)
    float* xl = xs + HID;                                    // the residual stream x (768)
    float* red = xl + D;                                     // per-warp partial sums (32)
    __shared__ unsigned long long s_key[NW];
    __shared__ int s_last;
    const int b = blockIdx.x, tid = threadIdx.x;
    const bool stamp = b == 0 && tid == 0;
    if (stamp) stamps[0] = now();
    Ctx x;
    x.ring = smem;
    x.tab = tab + b * MAXTAB;
    x.nc = nchunks[b];
    x.W = W;
    x.c = 0;
    x.issued = S;
    x.ll = ll;
    x.plain = plain;
    x.ctl = ctl;
    x.p = 0;
    x.ep = *reinterpret_cast<volatile unsigned*>(ctl);
    for (int c = 0; c < S; ++c) issue(x, c);
    if (!STREAM) {
        wait_pending(0);
        __syncthreads();
    }
    const float eps = 1e-5f;
    // the embedding row: every block reads it itself (no exchange)
    const int t0 = *reinterpret_cast<volatile int*>(tok);
    float ss = 0.f;
    for (int i = tid; i < D; i += T) {
        const float v = __half2float(W[OFF_CLS + (long)t0 * D + i]);
        xl[i] = v;
        xs[i] = v * G[i];
        ss += v * v;
    }
    ss = warp_sum(ss);
    if ((tid & 31) == 0) red[tid >> 5] = ss;
    __syncthreads();
    ss = 0.f;
    for (int i = 0; i < NW; ++i) ss += red[i];
    float best = -INFINITY;
    int best_i = 0x7fffffff;
    for (int l = 0; l < L; ++l) {
        const int base = l * B_LAYER;
        // 1: q, k, v
        gemv<D, 0>(x, lo(QKV, b), lo(QKV, b + 1), xs, rsqrtf(ss / D + eps), nullptr, base + B_QKV, S, nullptr, best, best_i);
        exchange(x);
        // 2: attention at position 0: each head's output is its v
#if EXCH == 5
        for (int k = lo(D / 3, b) + tid; k < lo(D / 3, b + 1); k += T)
            put3(x, base + B_ATT + k, settle3(x, base + B_QKV + 2 * D / 3 + k, load_word(x.ll + base + B_QKV + 2 * D / 3 + k)));
#else
        for (int i = lo(D, b) + tid; i < lo(D, b + 1); i += T) put(x, base + B_ATT + i, get(x, base + B_QKV + 2 * D + i));
#endif
        exchange(x);
        // 3: x += Wo att
        gather(x, base + B_ATT, D, xs, nullptr, nullptr, red);
        if (stamp) stamps[1 + 5 * l] = now();
        gemv<D, 1>(x, lo(D, b), lo(D, b + 1), xs, 1.f, xl, base + B_XO, S, nullptr, best, best_i);
        exchange(x);
        // 4: h = silu(W1 xn) * (W3 xn)
        ss = gather(x, base + B_XO, D, xs, xl, G + (2 * l + 1) * D, red);
        if (stamp) stamps[2 + 5 * l] = now();
        gemv<D, 2>(x, 2 * lo(HID, b), 2 * lo(HID, b + 1), xs, rsqrtf(ss / D + eps), nullptr, base + B_H, S, nullptr,
                   best, best_i);
        exchange(x);
        // 5: x += W2 h
        gather(x, base + B_H, HID, xs, nullptr, nullptr, red);
        if (stamp) stamps[3 + 5 * l] = now();
        gemv<HID, 1>(x, lo(D, b), lo(D, b + 1), xs, 1.f, xl, base + B_XF, S, nullptr, best, best_i);
        exchange(x);
        ss = gather(x, base + B_XF, D, xs, xl, l + 1 < L ? G + (2 * l + 2) * D : G + 2 * L * D, red);
        if (stamp) stamps[4 + 5 * l] = now();
    }
    // the classifier over this block's rows, WINC chunks at a time, and the argmax
    gemv<D, 3>(x, lo(V, b), lo(V, b + 1), xs, rsqrtf(ss / D + eps), nullptr, 0, WINC, logits, best, best_i);
    if (stamp) stamps[61] = now();
    if ((tid & 31) == 0) s_key[tid >> 5] = best_i == 0x7fffffff ? 0ull : key(best, best_i);
    __syncthreads();
    if (tid == 0) {
        unsigned long long k = 0;
        for (int i = 0; i < NW; ++i) k = s_key[i] > k ? s_key[i] : k;
        unsigned long long* gbest = reinterpret_cast<unsigned long long*>(ctl + 4);
        atomicMax(gbest, k);
        __threadfence();
        s_last = atomicAdd(ctl + 1, 1u) == NB - 1;
        if (s_last) {
            __threadfence();
            const unsigned long long k2 = atomicMax(gbest, 0ull);
            *tok = (int)(0xffffffffu - (unsigned)(k2 & 0xffffffffu));
            *gbest = 0ull;
            ctl[1] = 0;
            __threadfence();
            ctl[0] = x.ep + 1;  // the next launch's epoch
        }
        atomicMax(stamps + 62, now());  // the last block's exit
    }
}

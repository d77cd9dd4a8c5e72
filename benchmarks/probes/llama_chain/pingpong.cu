// Hand-written reference point (not generated): the round trip of one value between two SMs
// through L2. Block 0 and block PEER (one block per SM: the probe asks for most of the shared
// memory) pass a counter back and forth N times: block 0's thread 0 stores i with the value in
// one 8-byte word, PEER's thread 0 polls the word until it carries i and stores i back into a
// second word, which block 0 polls. times[0] is the time of the N round trips (%globaltimer).
// The other blocks return at once.
// tkc-launch header: written by probe.py
extern "C" __global__ void pingpong(unsigned long long* words, unsigned long long* times, const int peer, const int n) {
    if (threadIdx.x != 0 || (blockIdx.x != 0 && blockIdx.x != peer)) return;
    unsigned long long* ping = words;
    unsigned long long* pong = words + 16;  // another 128-byte line
    unsigned long long t0, t1, w;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (unsigned long long i = 1; i <= (unsigned long long)n; ++i) {
        if (blockIdx.x == 0) {
            asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(ping), "l"(i) : "memory");
            do asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(pong) : "memory");
            while (w != i);
        } else {
            do asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(w) : "l"(ping) : "memory");
            while (w != i);
            asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(pong), "l"(i) : "memory");
        }
    }
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    if (blockIdx.x == 0) times[0] = t1 - t0;
}

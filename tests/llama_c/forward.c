// An independent statement of llama2.c's run.c forward pass (fp32, legacy checkpoint), for
// tests/test_llama_reference.py: reads a checkpoint, runs the tokens given on the command line at
// positions 0, 1, ... and prints the last position's logits, one per line. Written for the tests
// from run.c's documented behaviour (rmsnorm eps 1e-5, RoPE over pairs with
// 10000^(-(i % head_size) / head_size), grouped-query attention h / (n_heads / n_kv_heads),
// SwiGLU), not copied from it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rmsnorm(float* o, const float* x, const float* w, int n) {
    float ss = 0.0f;
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
    ss = 1.0f / sqrtf(ss / n + 1e-5f);
    for (int j = 0; j < n; j++) o[j] = w[j] * (ss * x[j]);
}

static void matvec(float* y, const float* x, const float* w, int n, int d) {  // w: [d, n]
    for (int i = 0; i < d; i++) {
        float v = 0.0f;
        for (int j = 0; j < n; j++) v += w[i * n + j] * x[j];
        y[i] = v;
    }
}

static void softmax(float* x, int n) {
    float mx = x[0], s = 0.0f;
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); s += x[i]; }
    for (int i = 0; i < n; i++) x[i] /= s;
}

int main(int argc, char** argv) {
    FILE* f = fopen(argv[1], "rb");
    int h[7];
    if (!f || fread(h, sizeof(int), 7, f) != 7) return 1;
    int dim = h[0], hidden = h[1], L = h[2], nh = h[3], nkv = h[4], vocab = abs(h[5]), seq = h[6];
    int shared = h[5] > 0, hs = dim / nh, kv_dim = nkv * hs, kv_mul = nh / nkv;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 7 * sizeof(int), SEEK_SET);
    float* data = malloc(size);
    size_t n = fread(data, 1, size - 7 * sizeof(int), f);
    (void)n;
    float* p = data;
    float *emb = p; p += (long)vocab * dim;
    float *rms_att = p; p += L * dim;
    float *wq = p; p += (long)L * dim * dim;
    float *wk = p; p += (long)L * dim * kv_dim;
    float *wv = p; p += (long)L * dim * kv_dim;
    float *wo = p; p += (long)L * dim * dim;
    float *rms_ffn = p; p += L * dim;
    float *w1 = p; p += (long)L * dim * hidden;
    float *w2 = p; p += (long)L * hidden * dim;
    float *w3 = p; p += (long)L * dim * hidden;
    float *rms_final = p; p += dim;
    p += seq * hs / 2; p += seq * hs / 2;  // freq_cis_real, freq_cis_imag: unused
    float *wcls = shared ? emb : p;
    float *x = calloc(dim, 4), *xb = calloc(dim, 4), *xb2 = calloc(dim, 4), *hb = calloc(hidden, 4),
          *hb2 = calloc(hidden, 4), *q = calloc(dim, 4), *att = calloc(seq, 4), *logits = calloc(vocab, 4);
    float *kc = calloc((long)L * seq * kv_dim, 4), *vc = calloc((long)L * seq * kv_dim, 4);
    int steps = argc - 2;
    for (int pos = 0; pos < steps; pos++) {
        int token = atoi(argv[2 + pos]);
        memcpy(x, emb + (long)token * dim, dim * 4);
        for (int l = 0; l < L; l++) {
            rmsnorm(xb, x, rms_att + l * dim, dim);
            float* k = kc + ((long)l * seq + pos) * kv_dim;
            float* v = vc + ((long)l * seq + pos) * kv_dim;
            matvec(q, xb, wq + (long)l * dim * dim, dim, dim);
            matvec(k, xb, wk + (long)l * dim * kv_dim, dim, kv_dim);
            matvec(v, xb, wv + (long)l * dim * kv_dim, dim, kv_dim);
            for (int i = 0; i < dim; i += 2) {
                float freq = 1.0f / powf(10000.0f, (i % hs) / (float)hs);
                float val = pos * freq, fcr = cosf(val), fci = sinf(val);
                for (int r = 0; r < (i < kv_dim ? 2 : 1); r++) {
                    float* vec = r == 0 ? q : k;
                    float v0 = vec[i], v1 = vec[i + 1];
                    vec[i] = v0 * fcr - v1 * fci;
                    vec[i + 1] = v0 * fci + v1 * fcr;
                }
            }
            for (int hh = 0; hh < nh; hh++) {
                float* qh = q + hh * hs;
                for (int t = 0; t <= pos; t++) {
                    float* kt = kc + ((long)l * seq + t) * kv_dim + (hh / kv_mul) * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; i++) s += qh[i] * kt[i];
                    att[t] = s / sqrtf(hs);
                }
                softmax(att, pos + 1);
                float* o = xb + hh * hs;
                memset(o, 0, hs * 4);
                for (int t = 0; t <= pos; t++) {
                    float* vt = vc + ((long)l * seq + t) * kv_dim + (hh / kv_mul) * hs;
                    for (int i = 0; i < hs; i++) o[i] += att[t] * vt[i];
                }
            }
            matvec(xb2, xb, wo + (long)l * dim * dim, dim, dim);
            for (int i = 0; i < dim; i++) x[i] += xb2[i];
            rmsnorm(xb, x, rms_ffn + l * dim, dim);
            matvec(hb, xb, w1 + (long)l * dim * hidden, dim, hidden);
            matvec(hb2, xb, w3 + (long)l * dim * hidden, dim, hidden);
            for (int i = 0; i < hidden; i++) hb[i] = hb[i] * (1.0f / (1.0f + expf(-hb[i]))) * hb2[i];
            matvec(xb, hb, w2 + (long)l * dim * hidden, hidden, dim);
            for (int i = 0; i < dim; i++) x[i] += xb[i];
        }
        rmsnorm(x, x, rms_final, dim);
        matvec(logits, x, wcls, dim, vocab);
    }
    for (int i = 0; i < vocab; i++) printf("%.9g\n", logits[i]);
    return 0;
}

"""tkc.models.sampler against llama2.c's sampling, re-stated in C and compiled here: the
xorshift coins, multinomial and top-p sampling, token by token, for seeded distributions
(sharp and flat) and several top-p values. Skipped without a C compiler."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from tkc.models.sampler import Sampler

CC = shutil.which("gcc") or shutil.which("cc")

# run.c's sampling functions, as the C program does them (the facts of run.c, written anew):
# xorshift64* coins; softmax of logits / temperature in f32; sample_mult; sample_topp with the
# candidates at or above (1 - topp) / (n - 1) sorted by probability, descending.
C_SOURCE = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
typedef struct { float prob; int index; } P;
static unsigned long long state;
static unsigned int random_u32(void) {
    state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
    return (state * 0x2545F4914F6CDD1Dull) >> 32;
}
static float random_f32(void) { return (random_u32() >> 8) / 16777216.0f; }
static int cmp(const void* a, const void* b) {
    float x = ((const P*)a)->prob, y = ((const P*)b)->prob;
    if (x > y) return -1;
    if (x < y) return 1;
    return ((const P*)a)->index - ((const P*)b)->index;
}
int main(int argc, char** argv) {
    int n = atoi(argv[1]);
    float temp = atof(argv[2]), topp = atof(argv[3]);
    state = strtoull(argv[4], 0, 10);
    int draws = atoi(argv[5]);
    float* logits = malloc(n * sizeof(float));
    float* probs = malloc(n * sizeof(float));
    P* cand = malloc(n * sizeof(P));
    for (int i = 0; i < n; i++) if (scanf("%f", &logits[i]) != 1) return 1;
    for (int d = 0; d < draws; d++) {
        float mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) { probs[i] = logits[i] / temp; if (probs[i] > mx) mx = probs[i]; }
        for (int i = 0; i < n; i++) { probs[i] = expf(probs[i] - mx); sum += probs[i]; }
        for (int i = 0; i < n; i++) probs[i] /= sum;
        float coin = random_f32();
        int pick = n - 1;
        if (topp <= 0 || topp >= 1) {
            float cdf = 0;
            for (int i = 0; i < n; i++) { cdf += probs[i]; if (coin < cdf) { pick = i; break; } }
        } else {
            float cutoff = (1.0f - topp) / (n - 1);
            int n0 = 0;
            for (int i = 0; i < n; i++) if (probs[i] >= cutoff) { cand[n0].index = i; cand[n0].prob = probs[i]; n0++; }
            qsort(cand, n0, sizeof(P), cmp);
            float cum = 0; int last = n0 - 1;
            for (int i = 0; i < n0; i++) { cum += cand[i].prob; if (cum > topp) { last = i; break; } }
            float r = coin * cum, cdf = 0;
            pick = cand[last].index;
            for (int i = 0; i <= last; i++) { cdf += cand[i].prob; if (r < cdf) { pick = cand[i].index; break; } }
        }
        printf("%d\n", pick);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_sampler(tmp_path_factory):
    if CC is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("csampler")
    (d / "s.c").write_text(C_SOURCE)
    subprocess.run([CC, "-O2", "-o", str(d / "s"), str(d / "s.c"), "-lm"], check=True)
    return str(d / "s")


@pytest.mark.parametrize("n, spread, temp, topp, seed", [(50, 1.0, 1.0, 0.9, 42), (50, 4.0, 0.8, 0.9, 7),
                                                         (300, 2.0, 1.0, 0.5, 123456789), (20, 1.0, 1.0, 1.0, 3),
                                                         (20, 3.0, 1.5, 0.0, 99), (1000, 0.5, 1.0, 0.95, 2024)])
def test_sampling_matches_run_c(c_sampler, n, spread, temp, topp, seed):
    logits = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * spread
    draws = 200
    text = " ".join(f"{v:.9g}" for v in logits.tolist())
    out = subprocess.run([c_sampler, str(n), str(temp), str(topp), str(seed), str(draws)], input=text,
                         capture_output=True, text=True, check=True).stdout.split()
    want = [int(v) for v in out]
    s = Sampler(n, temp, topp, seed)
    got = [s(logits) for _ in range(draws)]
    # f32 softmax and prefix sums may round differently from the C loop: a coin within a rounding
    # error of a bucket edge may land in the neighbour; allow at most 1% of draws to differ
    mismatches = sum(a != b for a, b in zip(got, want))
    assert mismatches <= draws // 100, f"{mismatches} of {draws} draws differ from run.c's"
    if spread <= 2.0:
        assert len(set(got)) > 1  # a flat enough distribution: the draws really vary


def test_greedy_is_argmax_and_consumes_no_coins():
    logits = torch.tensor([0.1, 3.0, -2.0, 2.9])
    s = Sampler(4, 0.0, 0.9, 5)
    assert [s(logits) for _ in range(3)] == [1, 1, 1]
    assert s.state == 5


def test_xorshift_coins_are_run_c_s():
    """run.c's random_u32 from seed 42 (the C program of this file's fixture gave these)."""
    s = Sampler(2, 1.0, 0.9, 42)
    assert [s.random_u32() for _ in range(5)] == [1456360119, 3359763283, 3393612768, 4054632243, 3283045847]
    assert s.random_f32() == pytest.approx(0.835739851, abs=1e-9)


@pytest.mark.parametrize("topp", [0.9, 1.0])
@pytest.mark.parametrize("temperature", [1e-40, 1e-320, 1e-30])
def test_a_tiny_temperature_samples_the_argmax(temperature, topp):
    """logits / temperature overflows to inf (inf - inf is NaN in the softmax): the sampler
    shifts by the max first, so a tiny temperature picks the argmax, as temperature 0 does."""
    gen = torch.Generator().manual_seed(3)
    for seed in range(1, 6):
        logits = torch.randn(50, generator=gen) * 4
        s = Sampler(50, temperature, topp, seed)
        assert [s(logits) for _ in range(3)] == [int(logits.argmax())] * 3


@pytest.mark.parametrize("kwargs, message", [({"temperature": -1.0}, "temperature"), ({"seed": 0}, "seed"),
                                             ({"temperature": float("nan")}, "temperature"),
                                             ({"temperature": float("inf")}, "temperature")])
def test_bad_sampler_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampler(10, **{"temperature": 1.0, "topp": 0.9, "seed": 1, **kwargs})

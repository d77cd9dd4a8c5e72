"""Token sampling as llama2.c's run.c does it (`Sampler`, `sample`, `sample_mult`, `sample_topp`,
`random_u32`, `random_f32`): greedy at temperature 0, otherwise the logits divided by the
temperature, softmax, one coin from a xorshift generator, and either multinomial sampling or
top-p (nucleus) sampling. With the same seed the coins are run.c's, so a run can be compared
token by token with the C program.

One departure: run.c sorts the top-p candidates with `qsort`, which orders equal probabilities
arbitrarily; here ties keep the lower token id first (a stable sort).
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1


class Sampler:
    """Picks the next token from a logits vector.

    Args:
        vocab_size: number of logits.
        temperature: 0 for greedy (argmax); > 0 divides the logits before the softmax.
        topp: top-p threshold in (0, 1); <= 0 or >= 1 samples from the whole distribution.
        seed: the xorshift state's start (run.c: `--seed`, default the time); must be > 0.

    Raises:
        ValueError: a negative, infinite or NaN temperature, or a seed of 0 (xorshift would stay at 0).
    """

    def __init__(self, vocab_size: int, temperature: float = 1.0, topp: float = 0.9, seed: int = 1):
        if not 0 <= temperature < float("inf"):  # (NaN fails too)
            raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
        if seed <= 0:
            raise ValueError(f"the seed must be a positive integer, got {seed}")
        self.vocab_size = vocab_size
        self.temperature = float(temperature)
        self.topp = float(topp)
        self.state = seed & _MASK64

    def random_u32(self) -> int:
        """run.c's `random_u32`: xorshift64*, the high 32 bits."""
        s = self.state
        s ^= s >> 12
        s ^= (s << 25) & _MASK64
        s ^= s >> 27
        self.state = s
        return ((s * 0x2545F4914F6CDD1D) & _MASK64) >> 32

    def random_f32(self) -> float:
        """run.c's `random_f32`: a float32 in [0, 1) from the top 24 bits of `random_u32`."""
        return (self.random_u32() >> 8) / 16777216.0

    def __call__(self, logits: torch.Tensor) -> int:
        """The next token id for `logits` (a 1-D tensor of vocab_size floats, any device)."""
        logits = logits.detach().float().cpu()
        if self.temperature == 0.0:
            return int(torch.argmax(logits).item())
        scaled = logits / self.temperature
        if not bool(torch.isfinite(scaled).all()):  # a tiny temperature overflows: the same softmax, shifted
            # first (no inf - inf = NaN in it), in float64 (a temperature below float32's range is not 0 there)
            d = logits.double()
            scaled = ((d - d.max()) / self.temperature).float()
        probs = torch.softmax(scaled, dim=0)
        coin = self.random_f32()
        if self.topp <= 0 or self.topp >= 1:
            return _sample_mult(probs, coin)
        return _sample_topp(probs, self.topp, coin)


def _sample_mult(probs: torch.Tensor, coin: float) -> int:
    """The first index whose cumulative probability exceeds `coin` (run.c's `sample_mult`)."""
    cdf = torch.cumsum(probs, 0)
    idx = int(torch.searchsorted(cdf, torch.tensor([coin], dtype=cdf.dtype), right=True).item())
    return min(idx, probs.numel() - 1)


def _sample_topp(probs: torch.Tensor, topp: float, coin: float) -> int:
    """run.c's `sample_topp`: candidates with probability >= (1 - topp) / (n - 1), sorted by
    probability (descending), cut after the cumulative probability first exceeds topp, then
    sampled with `coin` scaled to the kept mass."""
    n = probs.numel()
    cutoff = (1.0 - topp) / (n - 1)
    ids = torch.nonzero(probs >= cutoff).flatten()
    kept = probs[ids]
    order = torch.sort(kept, descending=True, stable=True).indices
    ids, kept = ids[order], kept[order]
    cum = torch.cumsum(kept, 0)
    over = torch.nonzero(cum > topp).flatten()
    last = int(over[0].item()) if over.numel() else ids.numel() - 1
    r = coin * float(cum[last].item())
    cdf = torch.cumsum(kept[:last + 1], 0)
    pick = int(torch.searchsorted(cdf, torch.tensor([r], dtype=cdf.dtype), right=True).item())
    return int(ids[min(pick, last)].item())

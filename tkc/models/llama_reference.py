"""A pure torch llama2.c decoder: run.c's `forward`, one token at a time, with a KV cache.

The reference that `tkc.models.llama` is tested against: the same operations in the same order
as llama2.c's run.c (rmsnorm with eps 1e-5, q/k/v projections, RoPE with frequencies
10000^(-(i % head_size) / head_size) over pairs (i, i + 1), attention over positions 0..pos with
grouped-query heads (query head h reads key/value head h // (n_heads // n_kv_heads)), the output
projection and residual, rmsnorm, SwiGLU (w2(silu(w1 x) * w3 x)) and residual, the final
rmsnorm and the classifier), in float32 (or float64 with `dtype=torch.float64`).

For int8 checkpoints (runq.c) the weights are the dequantized q * s; runq.c also quantizes the
activations before each matmul, which this reference (like tkc's int8 GEMV) does not.
"""

from __future__ import annotations

import torch

from tkc.models.llama_files import Config, Weights


class TorchLlama:
    """run.c's transformer in torch.

    Args:
        config: the model's dims (tkc.models.llama_files.Config).
        weights: its tensors (tkc.models.llama_files.Weights), moved to `device` as `dtype`.
        device: a torch device ("cpu", "cuda").
        dtype: torch.float32 (run.c) or torch.float64.

    `step(token, pos)` runs one position and returns the logits [vocab_size]; the KV cache holds
    every position written so far (positions must be fed in order from 0).
    """

    def __init__(self, config: Config, weights: Weights, device="cpu", dtype=torch.float32):
        self.c = config
        self.dtype = dtype
        names = ("token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final",
                 "wcls")
        self.w = {n: getattr(weights, n).to(device=device, dtype=dtype) for n in names}
        c = config
        self.key_cache = torch.zeros(c.n_layers, c.seq_len, c.kv_dim, device=device, dtype=dtype)
        self.value_cache = torch.zeros_like(self.key_cache)
        hs = c.head_size
        i = torch.arange(0, c.dim, 2, device=device)
        # run.c: freq = 1 / powf(10000, head_dim / head_size) with head_dim = i % head_size, in f32
        self.freq = 1.0 / torch.pow(torch.tensor(10000.0, dtype=torch.float32, device=device),
                                    (i % hs).float() / hs)

    @staticmethod
    def rmsnorm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """run.c's rmsnorm: weight * x / sqrt(mean(x^2) + 1e-5)."""
        return weight * (x * torch.rsqrt((x * x).mean() + 1e-5))

    def feed_forward(self, x: torch.Tensor, xb: torch.Tensor, layer: int) -> torch.Tensor:
        """The rest of a layer after attention output `xb`: x += wo @ xb, then run.c's SwiGLU
        FFN on rmsnorm(x) added back (x += w2 @ (silu(w1 @ xb) * (w3 @ xb)))."""
        w = self.w
        x = x + w["wo"][layer] @ xb
        xb = self.rmsnorm(x, w["rms_ffn"][layer])
        hb = torch.nn.functional.silu(w["w1"][layer] @ xb) * (w["w3"][layer] @ xb)
        return x + w["w2"][layer] @ hb

    def rope(self, v: torch.Tensor, pos: int) -> torch.Tensor:
        """Rotate the pairs (v[i], v[i + 1]) of `v` (its first len(v) elements of the model's
        dim-long frequency table) by pos * freq[i / 2]; angles in f32 as run.c."""
        n = v.numel() // 2
        angle = (pos * self.freq[:n]).float()
        cos, sin = torch.cos(angle).to(v.dtype), torch.sin(angle).to(v.dtype)
        v0, v1 = v[0::2], v[1::2]
        return torch.stack([v0 * cos - v1 * sin, v0 * sin + v1 * cos], -1).reshape(-1)

    @torch.no_grad()
    def step(self, token: int, pos: int) -> torch.Tensor:
        """The logits [vocab_size] after token `token` at position `pos` (0 <= pos < seq_len)."""
        c, w = self.c, self.w
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"position {pos} outside the model's context of {c.seq_len}")
        hs, kv_mul = c.head_size, c.n_heads // c.n_kv_heads
        x = w["token_embedding"][token].clone()
        for layer in range(c.n_layers):
            xb = self.rmsnorm(x, w["rms_att"][layer])
            q = self.rope(w["wq"][layer] @ xb, pos)
            k = self.rope(w["wk"][layer] @ xb, pos)
            self.key_cache[layer, pos] = k
            self.value_cache[layer, pos] = w["wv"][layer] @ xb
            keys = self.key_cache[layer, :pos + 1].view(pos + 1, c.n_kv_heads, hs)
            values = self.value_cache[layer, :pos + 1].view(pos + 1, c.n_kv_heads, hs)
            keys = keys.repeat_interleave(kv_mul, dim=1)  # query head h reads kv head h // kv_mul
            values = values.repeat_interleave(kv_mul, dim=1)
            att = torch.einsum("hd,thd->ht", q.view(c.n_heads, hs), keys) / (hs ** 0.5)
            att = torch.softmax(att, dim=1)
            xb = torch.einsum("ht,thd->hd", att, values).reshape(c.dim)
            x = self.feed_forward(x, xb, layer)
        x = self.rmsnorm(x, w["rms_final"])
        return w["wcls"] @ x


class StaticTorchLlama(TorchLlama):
    """The reference's forward with shapes that do not depend on the position, the form torch
    needs to capture a decode step in a CUDA graph or to compile it once (as gpt-fast writes it):
    the token and the position are int64 device tensors, each layer's key and value rows are
    written with `index_copy_`, and attention runs over the whole cache with the positions after
    `pos` masked to -inf before the softmax.

    Args:
        config, weights, device, dtype: as TorchLlama.
        mode: "eager" (one call per torch op), "graph" (the step captured in a CUDA graph at the
            first step and replayed; warm-up on a side stream as torch's docs ask) or "compile"
            (`torch.compile(mode="reduce-overhead", fullgraph=True)`, which adds CUDA graphs
            itself; the caches are marked static addresses).

    `step(token, pos)` as TorchLlama's (the logits are a fresh tensor). Used by
    benchmarks/llama.py as the torch baselines that replay a step without Python.
    """

    MODES = ("eager", "graph", "compile")

    def __init__(self, config: Config, weights: Weights, device="cpu", dtype=torch.float32, mode: str = "eager"):
        super().__init__(config, weights, device=device, dtype=dtype)
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {', '.join(self.MODES)}, got {mode!r}")
        if mode != "eager" and torch.device(device).type != "cuda":
            raise ValueError(f"mode {mode!r} needs a CUDA device")
        self.mode = mode
        self._token = torch.zeros(1, dtype=torch.long, device=device)
        self._pos = torch.zeros(1, dtype=torch.long, device=device)
        self._positions = torch.arange(config.seq_len, device=device)
        self._graph = None
        self._out = None
        self._fn = self.forward
        if mode == "compile":
            torch._dynamo.mark_static_address(self.key_cache)
            torch._dynamo.mark_static_address(self.value_cache)
            self._fn = torch.compile(self.forward, mode="reduce-overhead", fullgraph=True)

    def _rope(self, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        n = v.numel() // 2
        c, s = cos[:n], sin[:n]
        v0, v1 = v[0::2], v[1::2]
        return torch.stack([v0 * c - v1 * s, v0 * s + v1 * c], -1).reshape(-1)

    def forward(self, token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """The logits after the token in `token` ([1] int64) at the position in `pos` ([1] int64)."""
        c, w = self.c, self.w
        hs, kv_mul = c.head_size, c.n_heads // c.n_kv_heads
        x = w["token_embedding"].index_select(0, token)[0]
        angle = pos.float() * self.freq  # f32, as run.c
        cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        hidden = (self._positions > pos)[None, :]  # [1, seq_len]: positions not yet written
        for layer in range(c.n_layers):
            xb = self.rmsnorm(x, w["rms_att"][layer])
            q = self._rope(w["wq"][layer] @ xb, cos, sin)
            k = self._rope(w["wk"][layer] @ xb, cos, sin)
            self.key_cache[layer].index_copy_(0, pos, k[None])
            self.value_cache[layer].index_copy_(0, pos, (w["wv"][layer] @ xb)[None])
            keys = self.key_cache[layer].view(c.seq_len, c.n_kv_heads, hs).repeat_interleave(kv_mul, dim=1)
            values = self.value_cache[layer].view(c.seq_len, c.n_kv_heads, hs).repeat_interleave(kv_mul, dim=1)
            att = torch.einsum("hd,thd->ht", q.view(c.n_heads, hs), keys) / (hs ** 0.5)
            att = torch.softmax(att.masked_fill(hidden, float("-inf")), dim=1)
            xb = torch.einsum("ht,thd->hd", att, values).reshape(c.dim)
            x = self.feed_forward(x, xb, layer)
        x = self.rmsnorm(x, w["rms_final"])
        return w["wcls"] @ x

    @torch.no_grad()
    def step(self, token: int, pos: int) -> torch.Tensor:
        c = self.c
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"position {pos} outside the model's context of {c.seq_len}")
        self._token.fill_(token)
        self._pos.fill_(pos)
        if self.mode != "graph":
            return self._fn(self._token, self._pos).clone()
        if self._graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (writes this position's rows: the same values again)
                for _ in range(2):
                    logits = self.forward(self._token, self._pos)
            torch.cuda.current_stream().wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._out = self.forward(self._token, self._pos)
            return logits.clone()
        self._graph.replay()
        return self._out.clone()

"""llama2.c's transformer on tkc kernels (issue 11): every operation of a decode step is a kernel
compiled from `examples/`.

One step (run.c's `forward`) for token `token` at position `pos`, per layer: `rmsnorm.tk`, the
q/k/v GEMVs (`matmul.tk`), RoPE on q and k (`rope.tk`, head size HD), the key/value rows written
into the layer's caches (`kv_store.tk`, `mut` outputs), attention over positions 0..pos with
grouped-query heads (`attention.tk`, KVD = n_kv_heads * head_size), the output GEMV and the
residual (`accum.tk`), `rmsnorm.tk`, the SwiGLU up-projections and gate fused (`ffn_gate.tk`),
the down GEMV and the residual; then the final `rmsnorm.tk` and the classifier GEMV; the token's
row comes from `embedding.tk`. Between kernels only views of the same memory change shape ([D, 1]
GEMV outputs read as [1, D] rows).

This first version runs in f32 (the checkpoint's float weights; an int8 checkpoint's dequantized
ones), one Python call per kernel; the CUDA-graph capture of a whole step, f16 and int8 kernels,
`tkc llama` and its benchmark are still to come (issue 11).
"""

from __future__ import annotations

import os
import tempfile

import torch

import tkc
from tkc.models.llama_files import Config, Weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# examples whose tensors are f16 in the file; the f32 model runs a copy with f32 tensors
F16_EXAMPLES = ("rope", "attention", "kv_store")


def example_as_f32(name: str, workdir: str) -> str:
    """The path of examples/NAME.tk, or for an example with f16 tensors a copy in `workdir` whose
    signature declares them f32 (the kernels compute in f32 whatever their tensors hold)."""
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    if name not in F16_EXAMPLES:
        return path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index("kernel ")
    end = text.index("\n    where", start)
    text = text[:start] + text[start:end].replace("f16[", "f32[") + text[end:]
    out = os.path.join(workdir, f"{name}_f32.tk")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return out


class Llama:
    """A llama2.c model whose decode step runs on tkc kernels.

    Args:
        config, weights: from tkc.models.llama_files.load_checkpoint (or random_weights).
        target: a tkc launch target; default `cuda` when torch sees a GPU, else `tilelang-cpu`.
        cache_dir: tkc's compile cache (default: tkc's).

    `step(token, pos)` returns the logits [vocab_size] (f32) after token `token` at position
    `pos`; positions are fed in order from 0 (the KV caches hold what earlier steps wrote).
    Raises ValueError for a position outside the context or a token outside the vocabulary.
    """

    def __init__(self, config: Config, weights: Weights, target: str | None = None, cache_dir: str | None = None):
        self.c = c = config
        self.target = target or ("cuda" if torch.cuda.is_available() else "tilelang-cpu")
        device = "cuda" if self.target in ("cuda", "tilelang") else "cpu"
        self._workdir = tempfile.TemporaryDirectory(prefix="tkc-llama-")
        k = {name: tkc.compile(example_as_f32(name, self._workdir.name), target=self.target, cache_dir=cache_dir,
                               **consts)
             for name, consts in (("embedding", {}), ("rmsnorm", {}), ("matmul", {}), ("rope", {"HD": c.head_size}),
                                  ("kv_store", {}), ("attention", {}), ("accum", {}), ("ffn_gate", {}))}
        self.k = k
        names = ("token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final", "wcls")
        self.w = {n: getattr(weights, n).to(device=device, dtype=torch.float32).contiguous() for n in names}
        self.key_cache = torch.zeros(c.n_layers, c.seq_len, c.kv_dim, device=device)
        self.value_cache = torch.zeros_like(self.key_cache)
        self._ids = torch.zeros(1, dtype=torch.int32, device=device)

    @torch.no_grad()
    def step(self, token: int, pos: int) -> torch.Tensor:
        c, k, w = self.c, self.k, self.w
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"position {pos} outside the model's context of {c.seq_len}")
        if not 0 <= token < c.vocab_size:
            raise ValueError(f"token {token} outside the vocabulary of {c.vocab_size}")
        self._ids.fill_(token)
        x = k["embedding"](w["token_embedding"], self._ids)  # [1, dim]
        for layer in range(c.n_layers):
            xb = k["rmsnorm"](x, w["rms_att"][layer].view(1, c.dim))
            q = k["rope"](k["matmul"](w["wq"][layer], xb).view(1, c.dim), pos)
            key = k["rope"](k["matmul"](w["wk"][layer], xb).view(1, c.kv_dim), pos)
            value = k["matmul"](w["wv"][layer], xb).view(1, c.kv_dim)
            k["kv_store"](key, value, pos, self.key_cache[layer], self.value_cache[layer])
            o = k["attention"](q.view(c.n_heads, c.head_size), self.key_cache[layer], self.value_cache[layer], pos)
            x = k["accum"](x, k["matmul"](w["wo"][layer], o.view(1, c.dim)).view(1, c.dim))
            xb = k["rmsnorm"](x, w["rms_ffn"][layer].view(1, c.dim))
            hb = k["ffn_gate"](w["w1"][layer], w["w3"][layer], xb).view(1, c.hidden_dim)
            x = k["accum"](x, k["matmul"](w["w2"][layer], hb).view(1, c.dim))
        x = k["rmsnorm"](x, w["rms_final"].view(1, c.dim))
        return k["matmul"](w["wcls"], x).view(c.vocab_size)

"""llama2.c's transformer on tkc kernels (issue 11): every operation of a decode step is a kernel
compiled from `examples/`.

One step (run.c's `forward`) for token `token` at position `pos`: the token's row from
`embedding.tk`; per layer, with f32 or f16 weights, `qkv_rope.tk` (the attention rmsnorm, the
q/k/v GEMVs, RoPE on q and k with head size HD, and the key/value rows written into the layer's
caches, `mut` outputs), attention over positions 0..pos with grouped-query heads
(`attention.tk`, KVD = n_kv_heads * head_size), `matmul_residual.tk` (wo and the residual add),
`rmsnorm_ffn_gate.tk` (the FFN's rmsnorm, the SwiGLU up-projections and gate),
`matmul_residual.tk` (w2 and the residual); then `rmsnorm_matmul.tk` for the final norm and the
classifier. With int8 weights (runq.c's group-wise format) the same chain runs on the int8 twins:
`rmsnorm_matmul_q8.tk` (the attention rmsnorm and the q/k/v GEMV over their stacked weights),
`rope.tk` (q and k together), `kv_store.tk`, attention, `matmul_q8_residual.tk` (wo),
`rmsnorm_ffn_gate_q8.tk`, `matmul_q8_residual.tk` (w2), then `rmsnorm_matmul_q8.tk` for the
classifier. Between kernels only views of the same memory change shape ([D, 1] GEMV outputs read
as [1, D] rows, activation rows as [G, GS] groups).

On the GPU the whole step is one CUDA graph, ending with `argmax.tk` (the logits' argmax written
where the next step reads its token id, for greedy decoding): the token id and the position live in one-element
int32 device tensors that the kernels read when they run (runtime scalars passed as tensors,
docs/LANGUAGE.md), so the graph captured at the first step replays at every later one after two
host-to-device writes; the Python and launch cost of each kernel is paid once, at capture. On
the `cuda` target the step is captured under tkc.programmatic_launch (programmatic dependent
launch): each kernel may start launching while the one before it finishes. On the CPU targets
each kernel is one Python call.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

import torch

import tkc
from tkc import cuda_runtime
from tkc.models.llama_files import Config, Weights

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DTYPES = ("f32", "f16", "int8")
# attention="auto": the first position decoded with attention_grid.tk (16 blocks per head, merged
# after `sync grid`) instead of attention.tk (one block per head). H100, 2026-11-27, stories110M
# f16, us per step, attention.tk / attention_grid.tk: 255.0 / 279.6 at position 64, 276.7 / 282.2
# at 128, 297.9 / 285.2 at 256, 318.8 / 285.5 at 384, 360.0 / 289.6 at 700 (even near 160).
GRID_FROM = 160


def example_variant(name: str, workdir: str, retype: dict[str, str] | None = None) -> str:
    """The path of examples/NAME.tk, or of a copy in `workdir` whose signature declares the
    tensors named in `retype` (name -> dtype) with those dtypes (the kernels compute in f32
    whatever their tensors hold)."""
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    if not retype:
        return path
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index("kernel ")
    end = text.index("\n    where", start)
    sig = text[start:end]
    for tensor, dtype in retype.items():
        sig = re.sub(rf"\b{tensor}: \w+\[", f"{tensor}: {dtype}[", sig)
    out = os.path.join(workdir, f"{name}_{'_'.join(f'{k}{v}' for k, v in sorted(retype.items()))}.tk")
    with open(out, "w", encoding="utf-8") as f:
        f.write(text[:start] + sig + text[end:])
    return out


def _group_size(cols: int, preferred: int) -> int:
    """The group size for int8 weights with `cols` columns: `preferred` (the file's), else the
    largest of 64, 32, 16, 8 dividing cols (export.py starts at 64)."""
    if preferred and cols % preferred == 0:
        return preferred
    return next(g for g in (64, 32, 16, 8, 4, 2, 1) if cols % g == 0)


class Llama:
    """A llama2.c model whose decode step runs on tkc kernels.

    Args:
        config, weights: from tkc.models.llama_files.load_checkpoint (or random_weights).
        target: a tkc launch target; default `cuda` when torch sees a GPU, else `tilelang-cpu`.
        cache_dir: tkc's compile cache (default: tkc's).
        dtype: the kernels' weights: "f32" (every tensor f32: `matmul.tk`, `ffn_gate.tk`, f32
            copies of the f16 examples); "f16" (f16 weight matrices through `matmul_f16.tk` and
            an f16 `ffn_gate.tk`, f16 KV caches; activations f32); "int8" (runq.c's Q8_0 weights,
            the file's or quantized here, through the `_q8` examples; f16 KV caches; activations
            f32, not quantized as runq.c does).

        layer_kernel: run each layer as one `llama_layer.tk` launch (a persistent grid, its phases
            separated by `sync grid`; target `cuda`, or `interp`) instead of five kernels; off by
            default (slower on an H100). `layer_consts` sets its schedule constants (NB, BD, BDF,
            BT, threads).
        attention: the decode attention kernel, `attention` (attention.tk, one block per head),
            `attention_grid` (attention_grid.tk: up to 16 blocks per head merged after `sync grid`;
            target `cuda` or `interp`), or `auto` (attention.tk below position GRID_FROM,
            attention_grid.tk from there: two graphs on the GPU). Default: `auto` on target
            `cuda`, `attention` elsewhere.
        graph: capture the step in one CUDA graph (default: on the GPU targets). The first step
            runs the kernels one by one and captures them; later steps replay the graph.
        programmatic: capture the graph's kernels with programmatic dependent launch
            (tkc.programmatic_launch; default: on with the `cuda` target, which alone has it).

    `step(token, pos)` returns the logits [vocab_size] (f32) after token `token` at position
    `pos`; positions are fed in order from 0 (the KV caches hold what earlier steps wrote).
    Raises ValueError for an unknown dtype, a position outside the context or a token outside
    the vocabulary.
    """

    def __init__(self, config: Config, weights: Weights, target: str | None = None, cache_dir: str | None = None,
                 dtype: str = "f32", graph: bool | None = None, programmatic: bool | None = None,
                 layer_kernel: bool = False, layer_consts: dict[str, int] | None = None,
                 attention: str | None = None):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.c = c = config
        self.dtype = dtype
        self.target = target or ("cuda" if torch.cuda.is_available() else "tilelang-cpu")
        # the graph's kernels launched programmatically (tkc.programmatic_launch; `cuda` only):
        # on by default there (H100, 2026-11-26: 2881 -> 3119 tok/s at stories110M f16)
        self.programmatic = (self.target == "cuda") if programmatic is None else programmatic
        # one `llama_layer.tk` launch per layer (its five phases separated by grid barriers)
        # instead of five kernels: target `cuda` (a cooperative launch; `interp` for tests), f32
        # and f16 weights. Off by default: slower than the five kernels (H100, 2026-11-27,
        # stories110M f16 at position 64: 287-318 against 256 us per step; docs/PERFORMANCE.md)
        self.layer_kernel = layer_kernel
        if self.layer_kernel and (self.target not in ("cuda", "interp") or dtype == "int8"):
            raise ValueError(f"layer_kernel needs target `cuda` (or `interp`) and f32 or f16 weights, "
                             f"got {self.target!r}, {dtype}")
        device = "cuda" if self.target in ("cuda", "tilelang") else "cpu"
        self._workdir = tempfile.TemporaryDirectory(prefix="tkc-llama-")
        work = self._workdir.name
        caches = {"KC": "f32", "VC": "f32"} if dtype == "f32" else None  # the files' caches are f16
        # (llama_layer.tk computes its own attention)
        attention = attention or ("auto" if self.target == "cuda" and not self.layer_kernel else "attention")
        if self.layer_kernel and attention != "attention":
            raise ValueError("layer_kernel computes the attention inside llama_layer.tk: leave `attention` out")
        if attention not in ("attention", "attention_grid", "auto"):
            raise ValueError(f"attention must be `attention`, `attention_grid` or `auto`, got {attention!r}")
        if attention != "attention" and self.target not in ("cuda", "interp"):
            raise ValueError(f"attention_grid needs target `cuda` (or `interp`), got {self.target!r}")
        self.attention = attention
        # `auto`: positions from GRID_FROM on replay a second graph with attention_grid
        self._att = "attention" if attention == "auto" else attention  # the kernel forward() launches
        split = next(n for n in (16, 8, 4, 2, 1) if c.head_size % n == 0)  # each block merges HD / SPLIT columns
        common = [("embedding", None, {})]
        if attention != "attention_grid":  # over 128 positions per trip with 256 threads: at stories110M's
            # shape on an H100 8.6 against 13.4 us at position 511, 3.8 against 3.6 at 63 (docs/PERFORMANCE.md)
            common.append(("attention", caches, {"BT": 128, "threads": 256}))
        if attention != "attention":
            common.append(("attention_grid", caches, {"BT": 64, "SPLIT": split}))
        if dtype == "int8":
            # a loop trip takes NG groups of BD rows: every group of the row in one trip (NG the
            # group count rounded up to a power of two) instead of the files' NG = 64, which at
            # K = 768 (12 groups of 64) leaves most of the tile's threads masked (H200, 2026-11-30,
            # benchmarks/llama.py int8: stories110M 2795 -> 3509 tok/s, 42M 4153 -> 5508)
            def trip(cols: int) -> dict:
                groups = cols // _group_size(cols, c.group_size)
                return {"NG": min(64, 1 << (groups - 1).bit_length())}

            plan = common + [("rope", {"X": "f32", "Y": "f32"}, {"HD": c.head_size}), ("kv_store", caches, {}),
                             ("rmsnorm_matmul_q8", None, trip(c.dim)), ("matmul_q8_residual", None, trip(c.dim)),
                             ("matmul_q8_residual:w2", None, trip(c.hidden_dim)),
                             ("rmsnorm_ffn_gate_q8", None, trip(c.dim))]
        else:
            f16 = dtype == "f16"
            qkv = {**(caches or {}), **({"WQ": "f16", "WK": "f16", "WV": "f16"} if f16 else {})}
            # (rows of q/k/v per block: 4, or 2 where a head has 4k + 2 columns)
            plan = common + [("qkv_rope", qkv, {"HD": c.head_size, "BD": 4 if c.head_size % 4 == 0 else 2}),
                             ("rmsnorm_matmul", {"W": "f16"} if f16 else None, {}),
                             ("matmul_residual", {"W": "f16"} if f16 else None, {}),
                             ("rmsnorm_ffn_gate", {"W1": "f16", "W3": "f16"} if f16 else None, {}),
                             # w2 (K = hidden_dim): two rows per block, 256 threads over K in one
                             # trip (stories110M's 768 x 2048 f16 on an H100: 3.4 against 4.1 us)
                             ("matmul_residual:w2", {"W": "f16"} if f16 else None,
                              {"BD": 2, "BK": 2048, "threads": 256})]
        if self.layer_kernel:
            f16 = dtype == "f16"
            retype = {**(caches or {}), **({n: "f16" for n in ("WQ", "WK", "WV", "WO", "W1", "W3", "W2")} if f16 else {})}
            # one work item per block in every phase where the GPU holds that many blocks (rows of
            # 4 for q/k/v, wo and w2, of 8 for w1/w3; a head for attention)
            items = max(c.dim // 4, c.n_heads, -(-c.hidden_dim // 8))
            consts = {"HD": c.head_size, "BT": 128, "NB": min(items, 264), **({} if c.head_size % 4 == 0 else {"BD": 2}),
                      **(layer_consts or {})}
            keep = {"embedding", "rmsnorm_matmul"}
            plan = [p for p in plan if p[0] in keep] + [("llama_layer", retype or None, consts)]
        self.k = {key: tkc.compile(example_variant(key.split(":")[0], work, retype), target=self.target,
                                   cache_dir=cache_dir, **consts) for key, retype, consts in plan}
        self.w = {n: getattr(weights, n).to(device=device, dtype=torch.float32).contiguous()
                  for n in ("token_embedding", "rms_att", "rms_ffn", "rms_final")}
        # q, k and v come from one GEMV over their weights stacked by rows (wqkv)
        stacked = {"wqkv": ("wq", "wk", "wv"), "wo": ("wo",), "w2": ("w2",), "wcls": ("wcls",), "w1": ("w1",),
                   "w3": ("w3",)}
        if dtype == "int8":
            self.q = {}
            for name, parts in stacked.items():
                qs = [weights.quantized.get(n) or self._quantize(getattr(weights, n)) for n in parts]
                q = torch.cat([a for a, _ in qs], dim=-2)
                scales = torch.cat([b.reshape(*a.shape[:-1], -1) for a, b in qs], dim=-2)
                self.q[name] = (q.to(device).contiguous(), scales.to(device=device, dtype=torch.float32).contiguous())
        else:
            wdt = torch.float32 if dtype == "f32" else torch.float16
            self.w.update({name: torch.cat([getattr(weights, n) for n in parts], dim=-2).to(device=device, dtype=wdt)
                           .contiguous() for name, parts in stacked.items()})
        cache_dtype = torch.float32 if dtype == "f32" else torch.float16
        self.key_cache = torch.zeros(c.n_layers, c.seq_len, c.kv_dim, device=device, dtype=cache_dtype)
        self.value_cache = torch.zeros_like(self.key_cache)
        # the token id and the position, read by the kernels: two 16-byte-aligned views of one
        # buffer, so that a step sets both with one host-to-device copy from pinned memory
        # instead of two fill kernels (H100, 2026-11-26: 17 us of host time per step)
        self._step_in = torch.zeros(8, dtype=torch.int32, device=device)
        self._ids, self._pos = self._step_in[0:1], self._step_in[4:5]
        pinned = device == "cuda"
        self._step_host = torch.zeros(8, dtype=torch.int32, pin_memory=pinned)
        self._copied = torch.cuda.Event() if pinned else None  # the last copy out of _step_host
        self._next = None  # the graph's argmax of the logits (greedy decoding)
        self._next_host = torch.zeros(1, dtype=torch.int32, pin_memory=pinned)
        self.graph = device == "cuda" if graph is None else bool(graph)
        if self.graph and device != "cuda":
            raise ValueError(f"graph=True needs a GPU target (cuda or tilelang), got {self.target!r}")
        # the graph's argmax of the logits: one block holding the row (H100, 2026-11-26: 8.5 us
        # for torch.argmax over 32000 logits in a graph, plus a copy into the token id)
        bv = max(1024, 1 << (c.vocab_size - 1).bit_length())
        self._argmax = tkc.compile(example_variant("argmax", work), target=self.target, cache_dir=cache_dir, BV=bv,
                                   threads=min(1024, bv // 8)) if self.graph else None
        self._graph = None  # torch.cuda.CUDAGraph of one step, captured at the first step
        self._logits = None  # the graph's output
        # attention="auto": the step's graph with attention_grid.tk, and its output, replayed from
        # position GRID_FROM on
        self._graph_long = self._logits_long = None

    @classmethod
    def load(cls, path: str, target: str | None = None, cache_dir: str | None = None, dtype: str = "f32") -> "Llama":
        """The model of a llama2.c checkpoint (legacy, version 1 or 2; TkError for a bad file)."""
        from tkc.models.llama_files import load_checkpoint

        config, weights = load_checkpoint(path)
        return cls(config, weights, target=target, cache_dir=cache_dir, dtype=dtype)

    def reset(self) -> None:
        """Forget every position (zero the KV caches): the next step starts a new sequence at 0."""
        self.key_cache.zero_()
        self.value_cache.zero_()

    def generate(self, tokenizer, prompt: str = "", steps: int = 256, temperature: float = 0.0, topp: float = 0.9,
                 seed: int = 1, emit=None):
        """run.c's generation from `prompt` (tkc.models.generate.generate) with a fresh cache;
        returns its Generation (tokens, text bytes, tokens/s)."""
        from tkc.models.generate import generate
        from tkc.models.sampler import Sampler

        self.reset()
        return generate(self.step, tokenizer, Sampler(self.c.vocab_size, temperature, topp, seed), prompt, steps,
                        self.c.seq_len, emit, next_token=self.next_token, greedy=self.greedy)

    def _quantize(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from tkc.models.llama_files import quantize_q80

        return quantize_q80(w.float(), _group_size(w.shape[-1], self.c.group_size))

    def q8(self, name: str, layer: int | None = None) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
        """int8 weight `name` (of `layer`) as the `_q8` examples take it: its group-wise views
        W [D, G, GS] and S [D, G, 1], and (G, GS), the view of an activation row it multiplies."""
        q, s = self.q[name]
        if layer is not None:
            q, s = q[layer], s[layer]
        d, k = q.shape
        groups = s.shape[-1]
        gs = k // groups
        return q.view(d, groups, gs), s.view(d, groups, 1), (groups, gs)

    @torch.no_grad()
    def step(self, token: int, pos: int) -> torch.Tensor:
        self._set_inputs(token, pos)
        if not self.graph:
            if self.attention == "auto":
                self._att = "attention_grid" if pos >= GRID_FROM else "attention"
            return self.forward(pos)
        if self._graph is not None:
            return self._replay(pos).clone()
        return self._capture()

    def _replay(self, pos: int) -> torch.Tensor:
        """Replay the step's graph for position `pos` (with attention="auto", the attention_grid
        one from GRID_FROM on); its logits tensor."""
        if self._graph_long is not None and pos >= GRID_FROM:
            self._graph_long.replay()
            return self._logits_long
        self._graph.replay()
        return self._logits

    @torch.no_grad()
    def next_token(self, token: int, pos: int) -> int:
        """Greedy decoding: the step of `token` at `pos`, then the id of its largest logit (the
        first one on ties, as run.c's argmax). On the GPU the argmax runs inside the step's CUDA
        graph and only its result comes back (no copy of the logits); the same as
        `int(torch.argmax(step(token, pos)))`."""
        if not self.graph or self._graph is None:
            return int(torch.argmax(self.step(token, pos)))
        self._set_inputs(token, pos)
        self._replay(pos)
        self._next_host.copy_(self._next, non_blocking=True)
        torch.cuda.current_stream().synchronize()
        return int(self._next_host[0])

    def greedy(self, token: int, pos: int, count: int, ahead: int = 8):
        """Greedy decoding from `token` at `pos`: yields the tokens of positions pos + 1 ..
        pos + count, each the argmax of the step before (the same tokens as `next_token` in a
        loop). On the GPU the step's graph ends by writing its argmax where the next step reads
        its token and advancing the position, so the replays queue back to back, up to `ahead`
        steps in advance of the host, and each token comes back by its own copy: the GPU does
        not wait for the host between tokens. Stopping early (closing the generator) waits for
        the queued steps; their positions' cache rows are written, as any later step rewrites
        them. Raises ValueError for a position outside the context, a token outside the
        vocabulary or positions past the context (pos + count > seq_len)."""
        if pos + count > self.c.seq_len:
            raise ValueError(f"positions {pos} .. {pos + count - 1} pass the model's context of {self.c.seq_len}")
        if not self.graph:  # the CPU targets: one step at a time
            for p in range(pos, pos + count):
                token = self.next_token(token, p)
                yield token
            return
        if self._graph is None and count > 0:  # the first GPU step captures the graph
            token = self.next_token(token, pos)
            yield token
            pos, count = pos + 1, count - 1
        if count <= 0:
            return
        ahead = max(1, min(ahead, count))
        ring = torch.zeros(ahead, dtype=torch.int32, pin_memory=True)
        done = [torch.cuda.Event() for _ in range(ahead)]
        queued = taken = 0

        def queue():
            nonlocal queued
            slot = queued % ahead
            self._replay(pos + queued)
            ring[slot:slot + 1].copy_(self._ids, non_blocking=True)
            done[slot].record()
            queued += 1

        try:
            self._set_inputs(token, pos)
            while taken < count:
                while queued < count and queued - taken < ahead:
                    queue()
                slot = taken % ahead
                done[slot].synchronize()
                taken += 1
                yield int(ring[slot])
        finally:
            if queued:
                done[(queued - 1) % ahead].synchronize()  # nothing still copies into `ring`

    def _set_inputs(self, token: int, pos: int) -> None:
        """Put the token id and the position where the kernels read them; ValueError for a
        position outside the context or a token outside the vocabulary."""
        c = self.c
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"position {pos} outside the model's context of {c.seq_len}")
        if not 0 <= token < c.vocab_size:
            raise ValueError(f"token {token} outside the vocabulary of {c.vocab_size}")
        if self._copied is None:  # CPU targets
            self._ids.fill_(token)
            self._pos.fill_(pos)
            return
        self._copied.synchronize()  # the previous copy has left the pinned buffer
        self._step_host[0], self._step_host[4] = token, pos
        self._step_in.copy_(self._step_host, non_blocking=True)
        self._copied.record()

    def _capture(self) -> torch.Tensor:
        """The first GPU step: run the kernels (compiling and loading them), then capture them
        and the logits' argmax in one CUDA graph; the logits of the run."""
        logits = self.forward(self._pos)  # compiles the kernels (tensor-scalar forms) and loads them
        self._argmax(logits.view(1, -1), torch.zeros(1, 1, dtype=torch.int32, device=logits.device))
        if self.attention == "auto":  # compile and load attention_grid (it only reads the caches)
            c = self.c
            self.k["attention_grid"](torch.zeros(c.n_heads, c.head_size, device=logits.device), self.key_cache[0],
                                     self.value_cache[0], self._pos)
        torch.cuda.synchronize()
        self._graph, self._logits = self._capture_graph()
        if self.attention == "auto":
            self._att = "attention_grid"
            try:
                self._graph_long, self._logits_long = self._capture_graph()
            finally:
                self._att = "attention"
        return logits

    def _capture_graph(self):
        """(graph, logits) of one step captured with the kernels of forward()."""
        graph = torch.cuda.CUDAGraph()
        launch = cuda_runtime.programmatic_launch() if self.programmatic else contextlib.nullcontext()
        with torch.cuda.graph(graph), launch:  # the kernels check token and position themselves
            out = self.forward(self._pos)  # captured, not run
            # the next step's inputs, for `greedy`'s chained replays: its token is the logits'
            # argmax (examples/argmax.tk writes it where the embedding reads the token id), its
            # position one more (`step` and `next_token` set both before each replay)
            self._argmax(out.view(1, -1), self._ids.view(1, 1))
            self._next = self._ids
            self._pos.add_(1)
        return graph, out

    def forward(self, pos) -> torch.Tensor:
        """One step's kernels for the token in `self._ids` at position `pos` (an int, or the
        one-element device tensor `self._pos`); the logits.

        Per layer with f32 and f16 weights, 5 kernels: qkv_rope (the attention rmsnorm, the
        q/k/v GEMVs over three row views of the stacked weights, RoPE on q and k, k and v into
        the caches' row pos), attention, matmul_residual (wo and the residual),
        rmsnorm_ffn_gate (the FFN's rmsnorm, w1, w3 and SwiGLU's gate), matmul_residual (w2 and
        the residual); 8 before those fusions (H100, 2026-11-26: stories110M f16 309.5 -> 280.5
        us per step as a graph replay, benchmarks/probes/llama_step). With int8 weights, 7:
        rmsnorm_matmul_q8 (the attention rmsnorm and q/k/v), rope, kv_store, attention,
        matmul_q8_residual (wo), rmsnorm_ffn_gate_q8, matmul_q8_residual (w2); 12 before those
        fusions (the norms, the q/k/v and w1/w3 GEMVs, silu_mul and the residual adds apart)."""
        c, k, w = self.c, self.k, self.w
        dim, kv = c.dim, c.kv_dim
        x = k["embedding"](w["token_embedding"], self._ids)  # [1, dim]
        for layer in range(c.n_layers):
            kc, vc = self.key_cache[layer], self.value_cache[layer]
            if self.layer_kernel:  # the whole layer in one launch (examples/llama_layer.tk)
                wqkv = w["wqkv"][layer]
                x = k["llama_layer"](x, w["rms_att"][layer].view(1, dim), wqkv[:dim], wqkv[dim:dim + kv],
                                     wqkv[dim + kv:], w["wo"][layer], w["rms_ffn"][layer].view(1, dim), w["w1"][layer],
                                     w["w3"][layer], w["w2"][layer], pos, kc, vc)[0]
                continue
            if self.dtype == "int8":
                wq, sq, rows = self.q8("wqkv", layer)
                qkv = k["rmsnorm_matmul_q8"](x.view(rows), w["rms_att"][layer].view(rows), wq, sq).view(1, dim + 2 * kv)
                qk = k["rope"](qkv[:, :dim + kv], pos)  # [1, dim + kv]: q's heads, then k's
                k["kv_store"](qk[:, dim:], qkv[:, dim + kv:], pos, kc, vc)
                q = qk[0, :dim]
            else:  # q, and k and v into the caches' row pos
                wqkv = w["wqkv"][layer]
                q = k["qkv_rope"](x, w["rms_att"][layer].view(1, dim), wqkv[:dim], wqkv[dim:dim + kv],
                                  wqkv[dim + kv:], pos, kc, vc)[0]
            o = k[self._att](q.view(c.n_heads, c.head_size), kc, vc, pos)
            o = o[0] if isinstance(o, tuple) else o  # attention_grid: (O, its scratch partials)
            if self.dtype == "int8":
                wo, so, rows = self.q8("wo", layer)
                x = k["matmul_q8_residual"](wo, so, o.reshape(rows), x.view(dim, 1)).view(1, dim)
                w1, s1, rows = self.q8("w1", layer)
                w3, s3, _ = self.q8("w3", layer)
                hb = k["rmsnorm_ffn_gate_q8"](x.view(rows), w["rms_ffn"][layer].view(rows), w1, s1, w3, s3)
                w2, s2, rows = self.q8("w2", layer)
                x = k["matmul_q8_residual:w2"](w2, s2, hb.view(rows), x.view(dim, 1)).view(1, dim)
            else:
                x = k["matmul_residual"](w["wo"][layer], o.view(1, dim), x.view(dim, 1)).view(1, dim)
                hb = k["rmsnorm_ffn_gate"](x, w["rms_ffn"][layer].view(1, dim), w["w1"][layer],
                                           w["w3"][layer]).view(1, c.hidden_dim)
                x = k["matmul_residual:w2"](w["w2"][layer], hb, x.view(dim, 1)).view(1, dim)
        if self.dtype == "int8":
            wc, sc, rows = self.q8("wcls")
            return k["rmsnorm_matmul_q8"](x.view(rows), w["rms_final"].view(rows), wc, sc).view(c.vocab_size)
        return k["rmsnorm_matmul"](x, w["rms_final"].view(1, dim), w["wcls"]).view(c.vocab_size)

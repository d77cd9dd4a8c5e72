"""Readers and writers of llama2.c's files (model checkpoints, tokenizer.bin), plus its BPE.

The formats are llama2.c's (github.com/karpathy/llama2.c, read at commit 350e04f):

* **legacy** ("version 0"), read by run.c (`read_checkpoint`, `memory_map_weights`), written by
  export.py's `legacy_export` and by train.py: seven int32 (dim, hidden_dim, n_layers, n_heads,
  n_kv_heads, vocab_size, seq_len; a *negative* vocab_size flags an unshared classifier), then
  f32 token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3 (each stacked over the
  layers), rms_final, two unused RoPE tables (freq_cis_real, freq_cis_imag: seq_len * head_size / 2
  floats each, which run.c skips), then wcls when unshared.
* **version 1** (export.py `version1_export`; no C reader in llama2.c): a 256-byte header (uint32
  magic 0x616b3432 "ak42", int32 version = 1, the seven int32, a uint8 shared-classifier flag at
  byte 36, zero padding), then f32 rms_att, rms_ffn, rms_final, token_embedding, wq, wk, wv, wo,
  w1, w2, w3, then wcls when unshared. No RoPE tables.
* **version 2** (export.py `version2_export` / `quantize_q80`, read by runq.c's `read_checkpoint`,
  `memory_map_weights`, `init_quantized_tensors`): the version 1 header with version = 2 and an
  int32 group size at byte 37 (unaligned), then f32 rms_att, rms_ffn, rms_final, then Q8_0
  tensors, each as int8 values followed by f32 per-group scales (value = q * scale, groups of
  `group_size` consecutive weights): token_embedding, then per layer wq, then per layer wk, wv,
  wo, w1, w2, w3, then wcls when unshared.
* **tokenizer.bin** (llama2.c's tokenizer.py `export`, read by run.c's `build_tokenizer`): int32
  max_token_length, then per token f32 score, int32 length, the token's bytes. The number of tokens
  is not stored: it is the model's vocab_size.

All multi-byte values are little-endian. Every problem with a file raises
:class:`dsl.diagnostics.TkError` located at the file (never a traceback); misuse of the Python API
(wrong tensor shapes handed to a writer) raises ValueError.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass, field

import numpy as np
import torch

from dsl.diagnostics import Loc, TkError, error

MAGIC = 0x616B3432  # "ak42" read as a little-endian uint32 (export.py, runq.c)
LEGACY_HEADER_BYTES = 28  # 7 x int32 (run.c's Config)
VERSIONED_HEADER_BYTES = 256  # export.py pads versions 1 and 2 to 256 bytes
BOS, EOS = 1, 2  # run.c's encode: BOS = 1, EOS = 2; byte-fallback ids start at 3

# Weights' float tensors in a fixed order, and the names kept quantized in version 2 files.
FLOAT_NAMES = ("token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3",
               "rms_final", "wcls")
QUANTIZED_NAMES = ("token_embedding", "wq", "wk", "wv", "wo", "w1", "w2", "w3", "wcls")

_REEXPORT = ("re-export the model with llama2.c's export.py (`python export.py model.bin "
             "--version 1 --checkpoint ckpt.pt`; --version 0 for run.c's legacy format, 2 for "
             "runq.c's int8)")


# ---------------------------------------------------------------------------------------------
# Config and weights


@dataclass(frozen=True)
class Config:
    """A llama2.c model's hyperparameters (run.c's `Config` plus the file's flags).

    `vocab_size` is always positive here (a legacy file's negative value becomes
    `shared_classifier=False`). `group_size` is the Q8_0 group of a version 2 file, 0 otherwise.
    """

    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    seq_len: int
    shared_classifier: bool
    group_size: int = 0

    @property
    def head_size(self) -> int:
        """dim // n_heads (elements per attention head)."""
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        """n_kv_heads * head_size (the width of wk's and wv's outputs; < dim under GQA)."""
        return self.n_kv_heads * self.head_size

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The shape of each float tensor of :class:`Weights`, by name (FLOAT_NAMES order)."""
        d, h, n, v, kv = self.dim, self.hidden_dim, self.n_layers, self.vocab_size, self.kv_dim
        return {"token_embedding": (v, d), "rms_att": (n, d), "wq": (n, d, d), "wk": (n, kv, d),
                "wv": (n, kv, d), "wo": (n, d, d), "rms_ffn": (n, d), "w1": (n, h, d),
                "w2": (n, d, h), "w3": (n, h, d), "rms_final": (d,), "wcls": (v, d)}


@dataclass
class Weights:
    """A llama2.c model's weights: torch.float32 CPU tensors in run.c's layout (row-major, a
    matrix multiplies as `out = W @ x`, W [out_features, in_features]), per-layer tensors stacked
    along a leading n_layers dim L:

    token_embedding [vocab, dim]; rms_att [L, dim]; wq [L, dim, dim] (rows = n_heads * head_size);
    wk, wv [L, kv_dim, dim]; wo [L, dim, dim]; rms_ffn [L, dim]; w1, w3 [L, hidden, dim];
    w2 [L, dim, hidden]; rms_final [dim]; wcls [vocab, dim] (the same tensor object as
    token_embedding when the classifier is shared).

    `quantized` is filled for version 2 (int8) files only: name -> (q int8, scales f32) for
    QUANTIZED_NAMES, q shaped like the float tensor and scales [..., rows, cols // group_size];
    the float tensors are then the dequantized q * scale (exactly as runq.c dequantizes), so a
    model may use either form. A shared wcls maps to the same pair as token_embedding.
    """

    token_embedding: torch.Tensor
    rms_att: torch.Tensor
    wq: torch.Tensor
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    rms_ffn: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    w3: torch.Tensor
    rms_final: torch.Tensor
    wcls: torch.Tensor
    quantized: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def named(self) -> dict[str, torch.Tensor]:
        """The float tensors by name, in FLOAT_NAMES order."""
        return {name: getattr(self, name) for name in FLOAT_NAMES}


def random_weights(config: Config, seed: int, scale: float = 0.02) -> Weights:
    """Random weights for `config` (tests, random-weight benchmarks): matrices N(0, 1) * `scale`,
    RMSNorm weights 1 + N(0, 1) * 0.1, all float32 from a torch.Generator seeded with `seed`
    (deterministic). wcls is token_embedding itself when `config.shared_classifier`."""
    _check_config_values(config)
    gen = torch.Generator().manual_seed(seed)
    shapes = config.shapes()
    made: dict[str, torch.Tensor] = {}
    for name in FLOAT_NAMES:
        if name == "wcls" and config.shared_classifier:
            made[name] = made["token_embedding"]
            continue
        noise = torch.randn(shapes[name], generator=gen, dtype=torch.float32)
        made[name] = 1.0 + 0.1 * noise if name.startswith("rms") else noise * scale
    return Weights(**made)


# ---------------------------------------------------------------------------------------------
# Reading checkpoints


@dataclass(frozen=True)
class _Seg:
    """One contiguous tensor of a checkpoint file: `key` (name, part, layer) says where it goes."""

    name: str
    what: str
    shape: tuple[int, ...]
    dtype: str  # "f32" or "i8"
    part: str = "f"  # "f" float tensor, "q" int8 values, "s" scales
    layer: int = -1  # -1: the whole (stacked) tensor

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * (4 if self.dtype == "f32" else 1)

    def describe(self) -> str:
        dims = " x ".join(str(x) for x in self.shape)
        return f"`{self.name}` ({self.what}, {dims} {self.dtype})"


def load_checkpoint(path: str | os.PathLike, *, mmap: bool = False) -> tuple[Config, Weights]:
    """Read a llama2.c checkpoint: legacy (run.c), version 1 (fp32) or version 2 (int8 Q8_0,
    runq.c), told apart by the uint32 magic 0x616b3432 at byte 0 (absent in legacy files, whose
    first int32 is dim). Returns the :class:`Config` and the :class:`Weights` (float32 CPU tensors;
    version 2 also fills `Weights.quantized`).

    The file is memory-mapped (np.memmap) and each tensor copied out of it; with `mmap=True` the
    float tensors of legacy and version 1 files instead share the file's pages copy-on-write (no
    copy; the file must not change while they live).

    Raises TkError (located at the file, with notes on the fix) when the file cannot be read, is
    shorter than its header, has a header value that is not positive, dim not a multiple of
    n_heads, n_heads not a multiple of n_kv_heads, an unknown version after the magic, a group
    size that is not positive or does not divide every quantized tensor's rows, is too short for
    its tensors (the message names the first tensor that does not fit), or has bytes after its
    last tensor (its header does not match its weights).
    """
    fname = os.fspath(path)
    loc = Loc(str(fname), 0, 0)
    try:
        with open(fname, "rb") as f:
            head = f.read(VERSIONED_HEADER_BYTES)
            size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise error(loc, f"cannot read the checkpoint: {e.strerror or e}",
                    "pass the path of a llama2.c model file (e.g. stories15M.bin), written by "
                    "llama2.c's export.py or train.py") from None

    if len(head) >= 4 and struct.unpack_from("<I", head, 0)[0] == MAGIC:
        config, segs, start = _versioned_header(loc, head, size)
        version = struct.unpack_from("<i", head, 4)[0]
    else:
        config, segs, start = _legacy_header(loc, head, size)
        version = 0
    _check_extent(loc, config, version, segs, start, size)

    data = np.memmap(fname, dtype=np.uint8, mode="c" if mmap else "r") if size else None
    arrays: dict[tuple[str, str], list[np.ndarray]] = {}
    per_layer = {(seg.name, seg.part) for seg in segs if seg.layer >= 0}
    off = start
    for seg in segs:
        if seg.part == "skip":  # run.c skips the legacy RoPE tables
            off += seg.nbytes
            continue
        raw = data[off:off + seg.nbytes].view("<f4" if seg.dtype == "f32" else np.int8)
        raw = raw.reshape(seg.shape)
        share = mmap and version in (0, 1)
        arrays.setdefault((seg.name, seg.part), []).append(raw if share else np.array(raw))
        off += seg.nbytes

    def tensor(name: str, part: str = "f") -> torch.Tensor:
        got = arrays[(name, part)]
        arr = np.stack(got) if (name, part) in per_layer else got[0]  # version 2: per layer
        if arr.dtype.byteorder not in ("=", "|"):
            arr = arr.astype(arr.dtype.newbyteorder("="))
        return torch.from_numpy(arr)

    made: dict[str, torch.Tensor] = {}
    quantized: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in FLOAT_NAMES:
        if name == "wcls" and config.shared_classifier:
            made[name] = made["token_embedding"]
            if version == 2:
                quantized[name] = quantized["token_embedding"]
            continue
        if version == 2 and name in QUANTIZED_NAMES:
            q, s = tensor(name, "q"), tensor(name, "s")
            quantized[name] = (q, s)
            made[name] = _dequantize(q, s)
        else:
            made[name] = tensor(name)
    return config, Weights(**made, quantized=quantized)


def _dequantize(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """q * scale per group (runq.c's `dequantize`: one f32 multiply per weight)."""
    groups = s.shape[-1]
    grouped = q.reshape(*q.shape[:-1], groups, q.shape[-1] // groups).to(torch.float32)
    return (grouped * s.unsqueeze(-1)).reshape(q.shape)


def _header_summary(c: Config) -> str:
    return (f"dim={c.dim}, hidden_dim={c.hidden_dim}, n_layers={c.n_layers}, n_heads={c.n_heads}, "
            f"n_kv_heads={c.n_kv_heads}, vocab_size={c.vocab_size}, seq_len={c.seq_len}, "
            f"{'shared' if c.shared_classifier else 'unshared'} classifier"
            + (f", group_size={c.group_size}" if c.group_size else ""))


def _check_header_values(loc: Loc, names_values: list[tuple[str, int]], legacy: bool) -> None:
    # a legacy file flags an unshared classifier by a negative vocab_size: there |vocab_size| counts
    bad = [f"{n}={v}" for n, v in names_values
           if (v == 0 if legacy and n == "vocab_size" else v <= 0)]
    if bad:
        what = "a legacy llama2.c checkpoint" if legacy else "a versioned llama2.c export"
        notes = [f"the file is not {what}, or its header is damaged"]
        if not legacy and any(b.startswith("vocab_size=-") for b in bad):
            notes.append("only legacy files flag an unshared classifier by a negative vocab_size; "
                         "versioned ones use the byte at offset 36")
        plural = "s" if len(bad) > 1 else ""
        raise error(loc, f"header value{plural} not positive: {', '.join(bad)}", *notes, _REEXPORT)
    vals = dict(names_values)
    if vals["dim"] % vals["n_heads"]:
        raise error(loc, f"dim={vals['dim']} is not a multiple of n_heads={vals['n_heads']} "
                         "(head_size = dim / n_heads must be whole)",
                    "the header is damaged or not a llama2.c checkpoint; " + _REEXPORT)
    if vals["dim"] // vals["n_heads"] % 2:
        raise error(loc, f"head_size = dim / n_heads = {vals['dim']} / {vals['n_heads']} = "
                         f"{vals['dim'] // vals['n_heads']} is odd; tkc's RoPE kernels rotate pairs of columns "
                         "within a head, so it must be even",
                    "export the model with an even head size (every llama2.c model is: 48, 64, 128)")
    if vals["n_heads"] % vals["n_kv_heads"]:
        raise error(loc, f"n_heads={vals['n_heads']} is not a multiple of "
                         f"n_kv_heads={vals['n_kv_heads']} (each key/value head serves "
                         "n_heads / n_kv_heads query heads)",
                    "the header is damaged or not a llama2.c checkpoint; " + _REEXPORT)


_FIELDS = ("dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len")


def _legacy_header(loc: Loc, head: bytes, size: int) -> tuple[Config, list[_Seg], int]:
    if size < LEGACY_HEADER_BYTES:
        raise error(loc, f"the file has {size} bytes, shorter than the {LEGACY_HEADER_BYTES}-byte "
                         "header of a legacy llama2.c checkpoint (7 int32: dim, hidden_dim, "
                         "n_layers, n_heads, n_kv_heads, vocab_size, seq_len)",
                    "the file is truncated or not a llama2.c checkpoint; " + _REEXPORT)
    values = struct.unpack_from("<7i", head, 0)
    _check_header_values(loc, list(zip(_FIELDS, values)), legacy=True)
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = values
    config = Config(dim, hidden, n_layers, n_heads, n_kv, abs(vocab), seq_len,
                    shared_classifier=vocab > 0)
    c = config
    L, d, kv, h = c.n_layers, c.dim, c.kv_dim, c.hidden_dim
    rope = (c.seq_len * c.head_size) // 2  # run.c: p->seq_len * head_size / 2, in int
    segs = [_Seg("token_embedding", "embedding", (c.vocab_size, d), "f32"),
            _Seg("rms_att", "layer norms", (L, d), "f32"),
            _Seg("wq", "layer weights", (L, d, d), "f32"),
            _Seg("wk", "layer weights", (L, kv, d), "f32"),
            _Seg("wv", "layer weights", (L, kv, d), "f32"),
            _Seg("wo", "layer weights", (L, d, d), "f32"),
            _Seg("rms_ffn", "layer norms", (L, d), "f32"),
            _Seg("w1", "layer weights", (L, h, d), "f32"),
            _Seg("w2", "layer weights", (L, d, h), "f32"),
            _Seg("w3", "layer weights", (L, h, d), "f32"),
            _Seg("rms_final", "final norm", (d,), "f32"),
            _Seg("freq_cis_real", "unused RoPE table", (rope,), "f32", part="skip"),
            _Seg("freq_cis_imag", "unused RoPE table", (rope,), "f32", part="skip")]
    if not c.shared_classifier:
        segs.append(_Seg("wcls", "classifier", (c.vocab_size, d), "f32"))
    return config, segs, LEGACY_HEADER_BYTES


def _versioned_header(loc: Loc, head: bytes, size: int) -> tuple[Config, list[_Seg], int]:
    if size < 8:
        raise error(loc, f"the file has {size} bytes, shorter than the "
                         f"{VERSIONED_HEADER_BYTES}-byte header of a versioned llama2.c export "
                         "(it starts with the `ak42` magic)",
                    "the file is truncated; " + _REEXPORT)
    version = struct.unpack_from("<i", head, 4)[0]
    if version not in (1, 2):
        raise error(loc, f"unknown checkpoint version {version} after the `ak42` magic; tkc reads "
                         "legacy files (run.c), version 1 (fp32) and version 2 (int8 Q8_0, runq.c)",
                    _REEXPORT)
    if size < VERSIONED_HEADER_BYTES:
        raise error(loc, f"the file has {size} bytes, shorter than the "
                         f"{VERSIONED_HEADER_BYTES}-byte header of a version {version} llama2.c "
                         "export",
                    "the file is truncated; " + _REEXPORT)
    values = struct.unpack_from("<7i", head, 8)
    _check_header_values(loc, list(zip(_FIELDS, values)), legacy=False)
    flag = head[36]
    if flag not in (0, 1):
        raise error(loc, f"the shared-classifier byte at offset 36 is {flag}, not 0 or 1",
                    "the header is damaged; " + _REEXPORT)
    group_size = struct.unpack_from("<i", head, 37)[0] if version == 2 else 0
    config = Config(*values, shared_classifier=bool(flag), group_size=group_size)
    c = config
    L, d, kv, h, v = c.n_layers, c.dim, c.kv_dim, c.hidden_dim, c.vocab_size
    mats = [("wq", (d, d)), ("wk", (kv, d)), ("wv", (kv, d)), ("wo", (d, d)),
            ("w1", (h, d)), ("w2", (d, h)), ("w3", (h, d))]
    segs = [_Seg("rms_att", "layer norms", (L, d), "f32"),
            _Seg("rms_ffn", "layer norms", (L, d), "f32"),
            _Seg("rms_final", "final norm", (d,), "f32")]
    if version == 1:
        segs.append(_Seg("token_embedding", "embedding", (v, d), "f32"))
        segs += [_Seg(name, "layer weights", (L, *shape), "f32") for name, shape in mats]
        if not c.shared_classifier:
            segs.append(_Seg("wcls", "classifier", (v, d), "f32"))
        return config, segs, VERSIONED_HEADER_BYTES

    gs = group_size
    if gs <= 0:
        raise error(loc, f"the group size at byte 37 of the version 2 header is {gs}, not positive",
                    "the header is damaged; " + _REEXPORT)
    quantized = [("token_embedding", (v, d))] + mats
    if not c.shared_classifier:
        quantized.append(("wcls", (v, d)))
    for name, (rows, cols) in quantized:
        if cols % gs:
            raise error(loc, f"the group size {gs} does not divide the {cols} columns of `{name}` "
                             f"({rows} x {cols}): tkc keeps each Q8_0 group within one row",
                        "runq.c only needs the group size to divide each tensor's element count "
                        "(its groups may run across rows); export.py halves its group size (64) "
                        "until it divides dim but does not check hidden_dim",
                        "re-export with a group size that divides both dim and hidden_dim "
                        "(export.py's version2_export(model, path, group_size=...))")

    def q80(name: str, what: str, rows: int, cols: int, layer: int) -> list[_Seg]:
        return [_Seg(name, f"{what}int8 values", (rows, cols), "i8", part="q", layer=layer),
                _Seg(name, f"{what}group scales", (rows, cols // gs), "f32", part="s", layer=layer)]

    segs += q80("token_embedding", "", v, d, -1)
    for name, (rows, cols) in mats:
        for layer in range(L):
            segs += q80(name, f"layer {layer} of {L}, ", rows, cols, layer)
    if not c.shared_classifier:
        segs += q80("wcls", "", v, d, -1)
    return config, segs, VERSIONED_HEADER_BYTES


def _check_extent(loc: Loc, config: Config, version: int, segs: list[_Seg], start: int,
                  size: int) -> None:
    """The tensors must fill the file exactly: name the first one that does not fit, or report
    trailing bytes."""
    kind = {0: "legacy checkpoint", 1: "version 1 export", 2: "version 2 (int8) export"}[version]
    total = start + sum(s.nbytes for s in segs)
    off = start
    for seg in segs:
        left = size - off
        if seg.nbytes > left:
            raise error(loc, f"{seg.describe()} needs {seg.nbytes} bytes at offset {off}, "
                             f"the file has {max(left, 0)} left",
                        f"the header of this {kind} ({_header_summary(config)}) asks for {total} "
                        f"bytes in all, the file has {size}: it is truncated, or its header does "
                        "not match its weights", _REEXPORT)
        off += seg.nbytes
    if size > total:
        extra = size - total
        notes = [f"the header ({_header_summary(config)}) accounts for {total} bytes, the file "
                 f"has {size}: the header does not match the weights"]
        v, d = config.vocab_size, config.dim
        cls_bytes = v * d * 4 if version < 2 else v * d + (v * d // config.group_size) * 4
        if config.shared_classifier and extra == cls_bytes:
            flag = "a negative vocab_size" if version == 0 else "a 0 in the byte at offset 36"
            notes.append(f"{extra} bytes is exactly an unshared `wcls` ({v} x {d}): the file "
                         "seems to hold its own classifier, which its header should flag by "
                         f"{flag}")
        notes.append(_REEXPORT)
        raise error(loc, f"{extra} trailing bytes after the last tensor "
                         f"{segs[-1].describe()}, which ends at offset {total}", *notes)


# ---------------------------------------------------------------------------------------------
# Writing checkpoints


def _check_config_values(config: Config) -> None:
    values = [getattr(config, n) for n in _FIELDS]
    if any(v <= 0 for v in values) or config.dim % config.n_heads or \
            config.n_heads % config.n_kv_heads:
        raise ValueError(f"invalid llama2.c config {config}: all sizes must be positive, dim a "
                         "multiple of n_heads and n_heads a multiple of n_kv_heads")
    if any(v >= 2**31 for v in values):
        raise ValueError(f"config {config} does not fit the int32 header fields")


def _f32(config: Config, weights: Weights, name: str) -> np.ndarray:
    t = getattr(weights, name)
    want = config.shapes()[name]
    if tuple(t.shape) != want:
        raise ValueError(f"weights.{name} has shape {tuple(t.shape)}, the config needs {want}")
    return t.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4", copy=False)


def _rope_tables(config: Config) -> tuple[np.ndarray, np.ndarray]:
    """export.py's freqs_cos / freqs_sin [:seq_len] (theta 10000), flattened and zero-padded to
    the seq_len * head_size / 2 floats each that run.c skips."""
    hs, n = config.head_size, (config.seq_len * config.head_size) // 2
    inv = 1.0 / (10000.0 ** (torch.arange(0, hs, 2)[: hs // 2].float() / hs))
    freqs = torch.outer(torch.arange(config.seq_len).float(), inv).flatten()
    out = []
    for table in (torch.cos(freqs), torch.sin(freqs)):
        flat = np.zeros(n, dtype="<f4")
        flat[: table.numel()] = table.numpy()
        out.append(flat)
    return out[0], out[1]


def _header7(config: Config, vocab_size: int) -> bytes:
    return struct.pack("<7i", config.dim, config.hidden_dim, config.n_layers, config.n_heads,
                       config.n_kv_heads, vocab_size, config.seq_len)


def write_legacy(path: str | os.PathLike, config: Config, weights: Weights) -> None:
    """Write `weights` as a legacy checkpoint (export.py `legacy_export`, run.c's reader): the
    7-int32 header with vocab_size negated when `config.shared_classifier` is False, the f32
    tensors in run.c's order, export.py's RoPE tables (which run.c skips), then wcls if unshared.
    Raises ValueError for a tensor whose shape does not match `config`."""
    _check_config_values(config)
    arrays = [_f32(config, weights, n) for n in FLOAT_NAMES[:-1]]
    arrays += list(_rope_tables(config))
    if not config.shared_classifier:
        arrays.append(_f32(config, weights, "wcls"))
    vocab = config.vocab_size if config.shared_classifier else -config.vocab_size
    with open(path, "wb") as f:
        f.write(_header7(config, vocab))
        for a in arrays:
            f.write(a.tobytes())


def _versioned_header_bytes(config: Config, version: int, group_size: int = 0) -> bytes:
    head = struct.pack("<Ii", MAGIC, version) + _header7(config, config.vocab_size)
    head += struct.pack("<B", int(config.shared_classifier))
    if version == 2:
        head += struct.pack("<i", group_size)
    return head + b"\0" * (VERSIONED_HEADER_BYTES - len(head))


def write_v1(path: str | os.PathLike, config: Config, weights: Weights) -> None:
    """Write `weights` as a version 1 export (export.py `version1_export`): the 256-byte header,
    f32 rms_att, rms_ffn, rms_final, token_embedding, wq, wk, wv, wo, w1, w2, w3, then wcls when
    `config.shared_classifier` is False. Raises ValueError for a mismatched tensor shape."""
    _check_config_values(config)
    order = ["rms_att", "rms_ffn", "rms_final", "token_embedding", "wq", "wk", "wv", "wo",
             "w1", "w2", "w3"] + ([] if config.shared_classifier else ["wcls"])
    arrays = [_f32(config, weights, n) for n in order]
    with open(path, "wb") as f:
        f.write(_versioned_header_bytes(config, 1))
        for a in arrays:
            f.write(a.tobytes())


def quantize_q80(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 quantization in groups of `group_size` along the last dim (export.py's
    `quantize_q80`): scale = max|w| / 127 per group (f32), q = round(w / scale) (half to even, as
    torch.round) as int8 in [-127, 127]. Returns (q shaped like w, scales
    [..., cols // group_size]).
    An all-zero group gets scale 0 and q 0 (export.py would divide 0 by 0 there)."""
    cols = w.shape[-1]
    if group_size <= 0 or cols % group_size:
        raise ValueError(f"group size {group_size} does not divide the last dim {cols}")
    g = w.detach().to("cpu", torch.float32).reshape(-1, group_size)
    scale = g.abs().amax(dim=1) / 127.0
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    q = torch.round(g / safe[:, None]).to(torch.int8)
    return q.reshape(w.shape), scale.reshape(*w.shape[:-1], cols // group_size)


def write_v2(path: str | os.PathLike, config: Config, weights: Weights, group_size: int) -> None:
    """Write `weights` as a version 2 export (export.py `version2_export`, runq.c's reader): the
    256-byte header with `group_size` at byte 37, f32 rms_att, rms_ffn, rms_final, then each
    quantized tensor (token_embedding, wq, wk, wv, wo, w1, w2, w3 per layer, wcls if unshared) as
    int8 values followed by f32 group scales. A tensor of `weights.quantized` whose group size is
    `group_size` is written as is; the others are quantized with :func:`quantize_q80`.
    Raises ValueError for a mismatched shape or a group size that does not divide every row."""
    _check_config_values(config)
    shapes = config.shapes()
    names = [n for n in QUANTIZED_NAMES if not (n == "wcls" and config.shared_classifier)]
    for n in names:
        if group_size <= 0 or shapes[n][-1] % group_size:
            raise ValueError(f"group size {group_size} does not divide the {shapes[n][-1]} "
                             f"columns of {n} {shapes[n]}")
    norms = [_f32(config, weights, n) for n in ("rms_att", "rms_ffn", "rms_final")]
    with open(path, "wb") as f:
        f.write(_versioned_header_bytes(config, 2, group_size))
        for a in norms:
            f.write(a.tobytes())
        for n in names:
            given = weights.quantized.get(n)
            if given is not None and tuple(given[0].shape) == shapes[n] and \
                    given[1].shape[-1] * group_size == shapes[n][-1]:
                q, s = given
            else:
                _f32(config, weights, n)  # shape check
                q, s = quantize_q80(getattr(weights, n), group_size)
            q_np = q.detach().cpu().to(torch.int8).contiguous().numpy()
            s_np = s.detach().to("cpu", torch.float32).contiguous().numpy()
            s_np = s_np.astype("<f4", copy=False)
            layers = [(q_np, s_np)] if len(shapes[n]) == 2 else list(zip(q_np, s_np))
            for ql, sl in layers:  # runq.c: per layer, the int8 values then the scales
                f.write(ql.tobytes())
                f.write(sl.tobytes())


# ---------------------------------------------------------------------------------------------
# Tokenizer


def _cstr(piece: bytes) -> bytes:
    """What C's string functions see of `piece`: the bytes before the first NUL."""
    cut = piece.find(b"\0")
    return piece if cut < 0 else piece[:cut]


_C_SPACE = b" \t\n\v\f\r"
_HEX = b"0123456789abcdefABCDEF"


def _scan_byte_token(piece: bytes) -> int | None:
    """sscanf(piece, "<0x%02hhX>", &b) == 1 as glibc does it: the literal `<0x`, optional
    whitespace, then at most 2 characters of an optionally signed hex number. The closing `>`
    is not checked (sscanf's count does not include it)."""
    if not piece.startswith(b"<0x"):
        return None
    i = 3
    while i < len(piece) and piece[i] in _C_SPACE:
        i += 1
    width, sign = 2, 1
    if i < len(piece) and piece[i] in b"+-":
        sign = -1 if piece[i] == ord("-") else 1
        i, width = i + 1, width - 1
    digits = bytearray()
    while width and i < len(piece) and piece[i] in _HEX:
        digits.append(piece[i])
        i, width = i + 1, width - 1
    if not digits:
        return None
    return (sign * int(digits.decode(), 16)) & 0xFF


class Tokenizer:
    """llama2.c's BPE tokenizer (run.c: `build_tokenizer`, `encode`, `decode`, `safe_printf`).

    `vocab` (list[bytes], token id -> piece), `scores` (list[float], the merge priority of each
    piece, stored as f32), `max_token_length` (the longest piece, in bytes). Pieces are compared
    as C strings (up to a NUL byte), as run.c does; when two ids have the same piece, lookups find
    the lower id (run.c's bsearch finds either). `path` names the file in errors.
    """

    def __init__(self, vocab: list[bytes], scores: list[float], max_token_length: int | None = None,
                 path: str = "<tokenizer>"):
        if len(vocab) != len(scores):
            raise ValueError(f"{len(vocab)} pieces but {len(scores)} scores")
        self.vocab = [bytes(p) for p in vocab]
        self.scores = [float(np.float32(s)) for s in scores]
        self.max_token_length = max((len(p) for p in self.vocab), default=0) \
            if max_token_length is None else max_token_length
        self.path = path
        self._c = [_cstr(p) for p in self.vocab]
        self._ids: dict[bytes, int] = {}
        for i, p in enumerate(self._c):
            self._ids.setdefault(p, i)
        # a pair's merge score; NaN never wins run.c's `score > best` so it counts as -inf
        self._merge_score = [(-math.inf if math.isnan(s) else s) for s in self.scores]

    @classmethod
    def load(cls, path: str | os.PathLike, vocab_size: int) -> "Tokenizer":
        """Read llama2.c's tokenizer.bin (run.c `build_tokenizer`): int32 max_token_length, then
        `vocab_size` times f32 score, int32 length, the piece's bytes. `vocab_size` is the model's
        (the file does not store it); tokens after the first `vocab_size` are ignored, as in run.c.

        Raises TkError when the file cannot be read, is shorter than its 4-byte header, has a
        negative max_token_length, ends inside a token (the message names the token id), or has
        a token length < 0 or > max_token_length."""
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        fname = str(os.fspath(path))
        loc = Loc(fname, 0, 0)
        try:
            with open(fname, "rb") as f:
                data = f.read()
        except OSError as e:
            raise error(loc, f"cannot read the tokenizer: {e.strerror or e}",
                        "pass llama2.c's tokenizer.bin (or one written by its tokenizer.py "
                        "export for a custom sentencepiece model)") from None
        redo = ("re-export it with llama2.c's tokenizer.py "
                "(`python tokenizer.py -t tokenizer.model`)")
        if len(data) < 4:
            raise error(loc, f"the file has {len(data)} bytes, shorter than the 4-byte header "
                             "(int32 max_token_length) of a llama2.c tokenizer", redo)
        max_len = struct.unpack_from("<i", data, 0)[0]
        if max_len < 0:
            raise error(loc, f"max_token_length {max_len} in the header is negative",
                        "the file is not a llama2.c tokenizer, or is damaged; " + redo)
        vocab, scores, off = [], [], 4
        short = ("the checkpoint says vocab_size={v}: the tokenizer has fewer tokens (a tokenizer "
                 "of another model?) or is truncated")
        for i in range(vocab_size):
            if len(data) - off < 8:
                raise error(loc, f"token {i}: its f32 score and int32 length need 8 bytes at "
                                 f"offset {off}, the file has {len(data) - off} left",
                            short.format(v=vocab_size), redo)
            score, n = struct.unpack_from("<fi", data, off)
            if n < 0 or n > max_len:
                raise error(loc, f"token {i}: length {n} at offset {off + 4} is "
                                 + ("negative" if n < 0 else f"over max_token_length {max_len}"),
                            "the file is damaged or not a llama2.c tokenizer; " + redo)
            off += 8
            if len(data) - off < n:
                raise error(loc, f"token {i}: its {n} bytes at offset {off} run past the end, the "
                                 f"file has {len(data) - off} left",
                            short.format(v=vocab_size), redo)
            vocab.append(data[off:off + n])
            scores.append(score)
            off += n
        return cls(vocab, scores, max_len, path=fname)

    def _lookup(self, piece: bytes) -> int:
        return self._ids.get(piece, -1)

    def encode(self, text: str | bytes, bos: bool, eos: bool) -> list[int]:
        """Token ids of `text` exactly as run.c's `encode`: BOS (1) when `bos`; the id of the " "
        piece (the dummy prefix) when the text is not empty; each UTF-8 codepoint looked up whole,
        or else its bytes as byte-fallback ids (byte + 3); then, repeatedly, the adjacent pair
        whose concatenation is a piece with the highest score (the leftmost on ties, scores above
        -1e10 only; BOS takes part) is merged, until no pair merges; EOS (2) when `eos`.

        `text` is encoded as UTF-8 (bytes are taken as they are) and, like the C string run.c
        gets, ends at its first NUL. Raises TkError when the text needs a piece the vocabulary
        lacks (" " for the prefix, or a byte-fallback id past the vocabulary); UnicodeEncodeError
        for a str with lone surrogates."""
        raw = _cstr(text.encode("utf-8") if isinstance(text, str) else bytes(text))
        tokens: list[int] = [BOS] if bos else []
        if raw:
            prefix = self._lookup(b" ")
            if prefix < 0:
                raise error(Loc(self.path, 0, 0), "the vocabulary has no \" \" piece, which "
                            "run.c's encode puts in front of any non-empty text (the dummy prefix)",
                            "use a llama2.c tokenizer.bin exported from a sentencepiece model")
            tokens.append(prefix)
        buf = bytearray()
        for i, c in enumerate(raw):
            if c & 0xC0 != 0x80:  # an ASCII or leading byte starts a new codepoint
                buf.clear()
            buf.append(c)
            nxt = raw[i + 1] if i + 1 < len(raw) else 0
            if nxt & 0xC0 == 0x80 and len(buf) < 4:  # continuation bytes follow (at most 4 in all)
                continue
            found = self._lookup(bytes(buf))
            if found >= 0:
                tokens.append(found)
            else:
                for b in buf:
                    if b + 3 >= len(self.vocab):
                        raise error(Loc(self.path, 0, 0), f"byte 0x{b:02X} needs the byte-fallback "
                                    f"token {b + 3}, past the vocabulary of {len(self.vocab)}",
                                    "llama2.c tokenizers have the 256 byte pieces <0x00>..<0xFF> "
                                    "at ids 3..258")
                    tokens.append(b + 3)
            buf.clear()

        # pair_score[i]: the score of merging tokens[i], tokens[i+1] (-inf: not a piece)
        def pair(i: int) -> tuple[float, int]:
            found = self._lookup(self._c[tokens[i]] + self._c[tokens[i + 1]])
            return (self._merge_score[found], found) if found >= 0 else (-math.inf, -1)

        pairs = [pair(i) for i in range(len(tokens) - 1)]
        floor = float(np.float32(-1e10))  # run.c: best_score starts at -1e10, merges need `>`
        while pairs:
            best = max(range(len(pairs)), key=lambda i: pairs[i][0])  # first of the maxima
            score, merged = pairs[best]
            if not score > floor:
                break
            tokens[best] = merged
            del tokens[best + 1]
            del pairs[best]
            if best < len(pairs):
                pairs[best] = pair(best)
            if best > 0:
                pairs[best - 1] = pair(best - 1)
        if eos:
            tokens.append(EOS)
        return tokens

    def decode(self, prev_token: int, token: int) -> bytes:
        """The bytes `token` stands for after `prev_token`, as run.c's `decode`: its piece (up to a
        NUL), without the leading space when `prev_token` is BOS (1) (sentencepiece strips it);
        a raw-byte piece "<0xAB>" becomes the byte 0xAB (byte 0 gives b"\\x00", where run.c's C
        string is empty; :meth:`safe_piece` drops it either way). Raises ValueError for an id
        outside the vocabulary."""
        if not 0 <= token < len(self.vocab):
            raise ValueError(f"token {token} is outside the vocabulary of {len(self.vocab)}")
        piece = self._c[token]
        if prev_token == BOS and piece[:1] == b" ":
            piece = piece[1:]
        byte = _scan_byte_token(piece)
        return bytes([byte]) if byte is not None else piece

    @staticmethod
    def safe_piece(piece: bytes) -> bytes:
        """What run.c's `safe_printf` prints of `piece`: nothing for an empty piece or a single
        byte that is neither printable nor whitespace in the C locale (control codes, and every
        single byte >= 0x80, so byte-fallback pieces of non-ASCII text print nothing); else the
        piece up to its first NUL."""
        piece = _cstr(piece)
        if len(piece) == 1 and not (0x20 <= piece[0] <= 0x7E or piece[0] in _C_SPACE):
            return b""
        return piece


def write_tokenizer(path: str | os.PathLike, vocab: list[bytes], scores: list[float],
                    max_token_length: int | None = None) -> None:
    """Write a llama2.c tokenizer.bin (the format of tokenizer.py's `export`): int32
    max_token_length (default: the longest piece), then per token f32 score, int32 length, bytes."""
    if len(vocab) != len(scores):
        raise ValueError(f"{len(vocab)} pieces but {len(scores)} scores")
    longest = max((len(p) for p in vocab), default=0)
    with open(path, "wb") as f:
        f.write(struct.pack("<i", longest if max_token_length is None else max_token_length))
        for piece, score in zip(vocab, scores):
            f.write(struct.pack("<fi", score, len(piece)))
            f.write(bytes(piece))


def byte_level_vocab(extra_merges: list[bytes]) -> tuple[list[bytes], list[float]]:
    """A small llama2.c-style vocabulary for tests: ids 0..2 = b"<unk>", b"\\n<s>\\n",
    b"\\n</s>\\n" (score 0); ids 3..258 = b"<0x00>".."<0xFF>" (byte fallback, score 0); then the
    95 printable ASCII characters b" ".."~" and then `extra_merges`, with increasing scores
    1.0, 2.0, ... (so a later merge has the higher priority). Returns (vocab, scores).
    Raises ValueError for an empty or NUL-holding merge or one already in the vocabulary."""
    vocab = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % i for i in range(256)]
    vocab += [bytes([c]) for c in range(0x20, 0x7F)]
    seen = set(vocab)
    for m in extra_merges:
        m = bytes(m)
        if not m or b"\0" in m or m in seen:
            raise ValueError(f"merge {m!r} is empty, holds a NUL or is already in the vocabulary")
        seen.add(m)
        vocab.append(m)
    scores = [0.0] * 259 + [float(k + 1) for k in range(len(vocab) - 259)]
    return vocab, scores


__all__ = ["BOS", "EOS", "FLOAT_NAMES", "MAGIC", "QUANTIZED_NAMES", "Config", "TkError",
           "Tokenizer", "Weights", "byte_level_vocab", "load_checkpoint", "quantize_q80",
           "random_weights", "write_legacy", "write_tokenizer", "write_v1", "write_v2"]

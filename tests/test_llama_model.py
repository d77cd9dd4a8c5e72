"""tkc.models.llama (the decode step on tkc kernels) against tkc.models.llama_reference
(run.c's forward in torch, itself checked against a C statement of run.c), on the CPU through
`tilelang-cpu`, at tiny random-weight shapes written and read in llama2.c's formats: per-step
logits within 1e-4 (relative, f32) for multi-head and grouped-query attention, shared and
unshared classifiers, from legacy and int8 (version 2) files; 1e-2 for the f16 and int8 kernels;
32 greedy tokens identical to the reference's. The GPU runs the same model through `cuda` (tests/gpu)."""

from __future__ import annotations

import pytest
import torch

from tkc.models import llama_files as lf
from tkc.models.generate import generate
from tkc.models.llama import Llama
from tkc.models.llama_reference import TorchLlama
from tkc.models.sampler import Sampler

TARGET = "tilelang-cpu"


def _config(n_kv_heads: int, shared: bool, vocab: int = 300, seq_len: int = 40) -> lf.Config:
    return lf.Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, vocab_size=vocab,
                     seq_len=seq_len, shared_classifier=shared)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "int8": 1e-2}


@pytest.mark.parametrize("fmt, dtype", [("legacy", "f32"), ("v2", "f32"), ("legacy", "f16"), ("v2", "int8")])
@pytest.mark.parametrize("n_kv_heads, shared", [(4, True), (2, False)], ids=["mha-shared", "gqa-unshared"])
def test_step_logits_match_the_reference(tmp_path, fmt, dtype, n_kv_heads, shared):
    """The reference runs the checkpoint's float weights (an int8 file's dequantized ones) in f32;
    the f16 model rounds the weight matrices and the KV caches to f16, the int8 one reads the
    file's int8 weights and scales and keeps f16 caches."""
    config = _config(n_kv_heads, shared)
    path = tmp_path / "model.bin"
    weights = lf.random_weights(config, seed=n_kv_heads, scale=0.1)
    if fmt == "legacy":
        lf.write_legacy(path, config, weights)
    else:
        lf.write_v2(path, config, weights, group_size=32)
    config, weights = lf.load_checkpoint(path)
    model, ref = Llama(config, weights, target=TARGET, dtype=dtype), TorchLlama(config, weights)
    for pos, token in enumerate([1, 17, 250, 3, 99, 42, 42, 7]):
        err = _rel(model.step(token, pos), ref.step(token, pos))
        assert err < TOLERANCE[dtype], f"{dtype} position {pos}: relative error {err:.2e} against the reference"


@pytest.mark.parametrize("dim, n_heads, n_kv_heads", [(24, 4, 2), (8, 4, 4)], ids=["head-size-6", "head-size-2"])
def test_head_sizes_of_4k_plus_2_match_the_reference(tmp_path, dim, n_heads, n_kv_heads):
    """A head of 4k + 2 columns (qkv_rope.tk's default BD = 4 rows per block does not divide it):
    the model takes 2 rows per block, and the logits match the reference."""
    config = lf.Config(dim=dim, hidden_dim=32, n_layers=2, n_heads=n_heads, n_kv_heads=n_kv_heads, vocab_size=50,
                       seq_len=16, shared_classifier=True)
    path = tmp_path / "model.bin"
    lf.write_legacy(path, config, lf.random_weights(config, seed=dim, scale=0.3))
    config, weights = lf.load_checkpoint(path)
    model, ref = Llama(config, weights, target=TARGET), TorchLlama(config, weights)
    for pos, token in enumerate([1, 17, 40, 3, 9]):
        err = _rel(model.step(token, pos), ref.step(token, pos))
        assert err < TOLERANCE["f32"], f"position {pos}: relative error {err:.2e} against the reference"


def test_greedy_tokens_match_the_reference():
    vocab, scores = lf.byte_level_vocab([b" t", b"he", b"in", b"ing", b"th"])
    tok = lf.Tokenizer(vocab, scores)
    config = _config(2, False, vocab=len(vocab), seq_len=40)
    weights = lf.random_weights(config, seed=11, scale=0.3)
    model, ref = Llama(config, weights, target=TARGET), TorchLlama(config, weights)
    got = generate(model.step, tok, Sampler(config.vocab_size, 0.0), "the thing", 33, config.seq_len)
    want = generate(ref.step, tok, Sampler(config.vocab_size, 0.0), "the thing", 33, config.seq_len)
    assert got.tokens == want.tokens and len(got.tokens) == 34  # BOS, then 33 positions' tokens
    assert got.text == want.text


def test_positions_and_tokens_outside_the_model_are_refused():
    config = _config(4, True, seq_len=8)
    model = Llama(config, lf.random_weights(config, seed=0), target=TARGET)
    with pytest.raises(ValueError, match="context"):
        model.step(1, 8)
    with pytest.raises(ValueError, match="vocabulary"):
        model.step(300, 0)


def test_an_unknown_dtype_is_refused():
    config = _config(4, True, seq_len=8)
    with pytest.raises(ValueError, match="dtype"):
        Llama(config, lf.random_weights(config, seed=0), target=TARGET, dtype="bf16")


def test_load_and_generate_twice(tmp_path):
    """`Llama.load` reads a file; `generate` starts each sequence from a clean cache, so two
    greedy runs from one model agree with each other and with the reference."""
    vocab, scores = lf.byte_level_vocab([b"th", b"he"])
    tok = lf.Tokenizer(vocab, scores)
    config = _config(2, True, vocab=len(vocab), seq_len=16)
    weights = lf.random_weights(config, seed=4, scale=0.3)
    lf.write_v1(tmp_path / "m.bin", config, weights)
    model = Llama.load(str(tmp_path / "m.bin"), target=TARGET)
    first, second = model.generate(tok, "the", 12), model.generate(tok, "the", 12)
    want = generate(TorchLlama(config, weights).step, tok, Sampler(config.vocab_size, 0.0), "the", 12, config.seq_len)
    assert first.tokens == second.tokens == want.tokens


def test_graph_capture_needs_a_gpu_target():
    config = _config(4, True)
    with pytest.raises(ValueError, match="graph=True needs a GPU target"):
        Llama(config, lf.random_weights(config, seed=0), target=TARGET, graph=True)

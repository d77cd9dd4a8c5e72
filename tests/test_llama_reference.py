"""tkc.models.llama_reference (the torch model the tkc model is tested against) and
tkc.models.generate, checked against tests/llama_c/forward.c, an independent C statement of
llama2.c's run.c forward pass, on small random-weight checkpoints written in run.c's legacy
format: shared and unshared classifiers, multi-head and grouped-query attention, several
positions. Skipped without a C compiler."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import torch

from tkc.models import llama_files as lf
from tkc.models.generate import generate
from tkc.models.llama_reference import TorchLlama
from tkc.models.sampler import Sampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = shutil.which("gcc") or shutil.which("cc")


@pytest.fixture(scope="module")
def c_forward(tmp_path_factory):
    if CC is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("cfwd") / "forward"
    subprocess.run([CC, "-O2", "-o", str(exe), os.path.join(ROOT, "tests", "llama_c", "forward.c"), "-lm"],
                   check=True)
    return str(exe)


def _config(n_kv_heads: int, shared: bool) -> lf.Config:
    return lf.Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, vocab_size=300,
                     seq_len=32, shared_classifier=shared)


@pytest.mark.parametrize("n_kv_heads, shared", [(4, True), (2, False), (1, True)],
                         ids=["mha-shared", "gqa-unshared", "mqa-shared"])
def test_reference_matches_run_c(tmp_path, c_forward, n_kv_heads, shared):
    config = _config(n_kv_heads, shared)
    weights = lf.random_weights(config, seed=n_kv_heads, scale=0.1)
    path = tmp_path / "model.bin"
    lf.write_legacy(path, config, weights)
    loaded_config, loaded = lf.load_checkpoint(path)
    tokens = [1, 17, 250, 3, 99, 42, 42, 7, 288, 5, 61]
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-5)):
        model = TorchLlama(loaded_config, loaded, dtype=dtype)
        for pos, tok in enumerate(tokens):
            logits = model.step(tok, pos)
        out = subprocess.run([c_forward, str(path), *map(str, tokens)], capture_output=True, text=True, check=True)
        want = torch.tensor([float(v) for v in out.stdout.split()], dtype=torch.float64)
        err = ((logits.double() - want).norm() / want.norm()).item()
        assert err < tol, f"{dtype}: relative error {err:.2e} against run.c's forward"


def test_positions_past_the_context_are_refused():
    config = _config(4, True)
    model = TorchLlama(config, lf.random_weights(config, seed=0))
    with pytest.raises(ValueError, match="context"):
        model.step(1, config.seq_len)


def _tokenizer() -> lf.Tokenizer:
    vocab, scores = lf.byte_level_vocab([b" t", b"he", b" the", b"in", b"ing", b"th"])
    return lf.Tokenizer(vocab, scores)


def _gen_config(n_kv_heads: int, shared: bool) -> lf.Config:
    c = _config(n_kv_heads, shared)
    return lf.Config(c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, len(_tokenizer().vocab), c.seq_len,
                     c.shared_classifier)


def test_greedy_generation_follows_the_prompt_then_the_argmax():
    config = _gen_config(2, False)
    model = TorchLlama(config, lf.random_weights(config, seed=3, scale=0.3))
    tok = _tokenizer()
    prompt = "the thing"
    pieces = []
    gen = generate(model.step, tok, Sampler(config.vocab_size, 0.0), prompt, 20, config.seq_len, pieces.append)
    want = tok.encode(prompt, bos=True, eos=False)
    # run.c's greedy merges, the best-scoring pair first: "th" outranks " t" and "he", so " the"
    # (reachable only through " t" + "he") is never formed
    assert [tok.vocab[i] for i in want] == [b"\n<s>\n", b" ", b"th", b"e", b" ", b"th", b"ing"]
    assert gen.tokens[:len(want)] == want
    assert len(gen.tokens) == 21 or 1 in gen.tokens  # BOS + a token per position, unless BOS was sampled
    assert b"".join(pieces) == gen.text
    assert gen.text.startswith(prompt.encode())  # the prompt's pieces come back (the BOS space stripped)
    # the tokens after the prompt are the argmax of a fresh model fed the same sequence
    fresh = TorchLlama(config, lf.random_weights(config, seed=3, scale=0.3))
    for pos in range(len(gen.tokens) - 1):
        logits = fresh.step(gen.tokens[pos], pos)
        if pos >= len(want) - 1:
            assert int(torch.argmax(logits)) == gen.tokens[pos + 1]


def test_greedy_generation_takes_next_token_and_sampling_ignores_it():
    """`next_token` (the step and its argmax in one call, tkc.models.llama.Llama.next_token)
    replaces the step and the sampler only when the sampler is greedy: the same tokens as the
    step's argmax, and a temperature above 0 never calls it."""
    config = _gen_config(2, False)
    tok = _tokenizer()
    model = TorchLlama(config, lf.random_weights(config, seed=3, scale=0.3))
    want = generate(model.step, tok, Sampler(config.vocab_size, 0.0), "the", 12, config.seq_len)
    calls = []

    def next_token(token, pos):
        calls.append((token, pos))
        return int(torch.argmax(model.step(token, pos)))

    got = generate(model.step, tok, Sampler(config.vocab_size, 0.0), "the", 12, config.seq_len, next_token=next_token)
    assert got.tokens == want.tokens and got.text == want.text
    assert [t for t, _ in calls] == got.tokens[:len(calls)] and [p for _, p in calls] == list(range(len(calls)))

    def wrong(token, pos):
        raise AssertionError("next_token called while sampling")

    generate(model.step, tok, Sampler(config.vocab_size, 1.0, 0.9, 7), "the", 12, config.seq_len, next_token=wrong)


def test_generation_stops_at_the_context():
    config = _gen_config(4, True)
    model = TorchLlama(config, lf.random_weights(config, seed=1))
    gen = generate(model.step, _tokenizer(), Sampler(config.vocab_size, 1.0, 0.9, 7), "", 1000, config.seq_len)
    assert len(gen.tokens) <= config.seq_len + 1


@pytest.mark.parametrize("n_kv_heads", [4, 2], ids=["mha", "gqa"])
def test_the_static_shape_form_matches_the_reference(n_kv_heads):
    """StaticTorchLlama (benchmarks/llama.py's torch-in-a-graph and torch.compile baselines):
    masked attention over the whole cache equals attention over positions 0..pos, in float64."""
    from tkc.models.llama_reference import StaticTorchLlama

    config = lf.Config(64, 96, 2, 4, n_kv_heads, 300, 24, shared_classifier=n_kv_heads == 4)
    weights = lf.random_weights(config, seed=n_kv_heads, scale=0.3)
    ref, static = TorchLlama(config, weights, dtype=torch.float64), StaticTorchLlama(config, weights,
                                                                                     dtype=torch.float64)
    for pos, token in enumerate([1, 299, 5, 5, 17, 0, 42, 8, 9, 100, 3, 2]):
        want, got = ref.step(token, pos), static.step(token, pos)
        assert ((got - want).norm() / want.norm()).item() < 1e-12, f"position {pos}"


def test_the_static_form_refuses_bad_modes():
    from tkc.models.llama_reference import StaticTorchLlama

    config = lf.Config(64, 96, 1, 4, 4, 50, 8, shared_classifier=True)
    weights = lf.random_weights(config, seed=0)
    with pytest.raises(ValueError, match="mode must be one of eager, graph, compile"):
        StaticTorchLlama(config, weights, mode="jit")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        StaticTorchLlama(config, weights, device="cpu", mode="graph")
    with pytest.raises(ValueError, match="outside the model's context"):
        StaticTorchLlama(config, weights).step(1, 8)

"""`tkc llama`: greedy text from a small random-weight llama2.c checkpoint and tokenizer written
in run.c's formats, on the CPU (`tilelang-cpu`), equal to the torch reference's generation; the
f16 and int8 kernels run; bad input (a missing model or tokenizer, a truncated checkpoint, bad
sampling options) is a clear error with exit status 1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tkc.models import llama_files as lf
from tkc.models.generate import generate
from tkc.models.llama_reference import TorchLlama
from tkc.models.sampler import Sampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    vocab, scores = lf.byte_level_vocab([b" t", b"he", b"in", b"ing", b"th", b"ng"])
    config = lf.Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=len(vocab),
                       seq_len=40, shared_classifier=True)
    weights = lf.random_weights(config, seed=5, scale=0.3)
    lf.write_legacy(d / "model.bin", config, weights)
    lf.write_tokenizer(d / "tokenizer.bin", vocab, scores)
    return d, config, weights, lf.Tokenizer(vocab, scores)


def _tkc(*args):
    return subprocess.run([sys.executable, "-m", "tkc.cli", "llama", *map(str, args)], cwd=ROOT,
                          capture_output=True, timeout=600)


def test_greedy_text_matches_the_reference(model_dir):
    d, config, weights, tok = model_dir
    r = _tkc(d / "model.bin", "--prompt", "the thing", "-n", 24, "--temperature", 0, "--target", "tilelang-cpu")
    assert r.returncode == 0, r.stderr.decode()
    want = generate(TorchLlama(config, weights).step, tok, Sampler(config.vocab_size, 0.0), "the thing", 24,
                    config.seq_len)
    assert r.stdout == want.text + b"\n"
    assert b"achieved tok/s:" in r.stderr


@pytest.mark.parametrize("dtype", ["f16", "int8"])
def test_other_dtypes_run(model_dir, dtype):
    r = _tkc(model_dir[0] / "model.bin", "--prompt", "the", "-n", 8, "--temperature", 0, "--dtype", dtype,
             "--target", "tilelang-cpu")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.startswith(b"the") and f"tilelang-cpu, {dtype})".encode() in r.stderr


def test_sampling_with_a_seed_is_reproducible(model_dir):
    d = model_dir[0]
    runs = [_tkc(d / "model.bin", "-n", 16, "--seed", 42, "--target", "tilelang-cpu") for _ in range(2)]
    assert runs[0].returncode == 0 and runs[0].stdout == runs[1].stdout


@pytest.mark.parametrize("extra, message", [
    (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
    (["--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
    (["--target", "cuda"] if not torch.cuda.is_available() else ["--temperature", "inf"],
     "needs a CUDA GPU" if not torch.cuda.is_available() else "--temperature must be a finite number"),
    (["--topp", "1.5"], "--topp must be in (0, 1]"),
    (["--seed", "0"], "--seed must be a positive int"),
    (["--tokenizer", "missing.bin"], "missing.bin"),
])
def test_bad_options_are_user_errors(model_dir, extra, message):
    r = _tkc(model_dir[0] / "model.bin", *extra)
    assert r.returncode == 1 and message in r.stderr.decode()
    assert "Traceback" not in r.stderr.decode()


def test_bad_checkpoints_are_user_errors(model_dir, tmp_path):
    d = model_dir[0]
    r = _tkc(tmp_path / "none.bin")
    assert r.returncode == 1 and "cannot read the checkpoint" in r.stderr.decode()
    short = tmp_path / "short.bin"
    short.write_bytes((d / "model.bin").read_bytes()[:5000])
    r = _tkc(short, "--tokenizer", d / "tokenizer.bin")
    assert r.returncode == 1 and "needs" in r.stderr.decode() and "Traceback" not in r.stderr.decode()
    alone = tmp_path / "alone.bin"  # no tokenizer.bin beside it (nor in the repository's root, the cwd)
    alone.write_bytes((d / "model.bin").read_bytes())
    r = _tkc(alone)
    err = r.stderr.decode()
    assert r.returncode == 1 and f"no tokenizer.bin next to the model ({tmp_path / 'tokenizer.bin'}) or in this folder" in err
    assert "--tokenizer FILE" in err

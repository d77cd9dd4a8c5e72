"""tkc.models.llama on the GPU (issue 11), and runtime scalars passed as device tensors inside
CUDA graphs.

* stories15M shapes (dim 288, hidden 768, 6 layers, 6 heads, seq 256, vocab 32000), random
  weights: per-step logits of the captured step (one CUDA graph) against the torch reference in
  float64 (relative error below 1e-4 in f32, 1e-2 in f16 and int8), grouped-query attention
  included; 32 greedy tokens identical to the reference's.
* rope, kv_store, attention and attention_split called with `pos` as a one-element device tensor
  on `cuda` and `tilelang`, captured in a CUDA graph (the kernels check `pos` themselves: no
  host sync, no tkc.assume_valid) and replayed at new positions: each replay matches torch in
  float64 (tests/gpu/test_gpu_device_checks.py replays one at a position out of range).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import tkc
from tkc import driver, oracle
from tkc.models import llama_files as lf
from tkc.models.generate import generate
from tkc.models.llama import Llama
from tkc.models.llama_reference import TorchLlama
from tkc.models.sampler import Sampler

# The full tier (`slow`; serial TileLang builds of 10-40 s each; tests/gpu/test_gpu_quick.py covers
# the examples) but for one case: the f32 captured step of stories15M shapes (`cuda` only, nvcc
# builds), the quick tier's one check of Llama.step's CUDA-graph replay (mutant
# llama-graph-position-frozen, tests/mutants/mutants.py)
pytestmark = pytest.mark.gpu
slow = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = {"f32": 1e-4, "f16": 1e-2, "int8": 1e-2}


def _stories15m(n_kv_heads: int = 6) -> lf.Config:
    return lf.Config(dim=288, hidden_dim=768, n_layers=6, n_heads=6, n_kv_heads=n_kv_heads, vocab_size=32000,
                     seq_len=256, shared_classifier=True)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tkc-cache"))


@pytest.mark.parametrize("dtype, n_kv_heads, programmatic", [("f32", 6, False), ("f32", 6, True),
                                                             pytest.param("f32", 2, False, marks=slow),
                                                             pytest.param("f16", 6, True, marks=slow),
                                                             pytest.param("int8", 3, False, marks=slow)])
def test_graph_step_logits_match_the_reference(tmp_path, cache_dir, dtype, n_kv_heads, programmatic):
    """int8 reads a version 2 file, so the reference runs its dequantized weights. `programmatic`:
    the step captured with programmatic dependent launch (tkc.programmatic_launch)."""
    config = _stories15m(n_kv_heads)
    weights = lf.random_weights(config, seed=n_kv_heads, scale=0.1)
    if dtype == "int8":
        lf.write_v2(tmp_path / "model.bin", config, weights, group_size=32)
        config, weights = lf.load_checkpoint(tmp_path / "model.bin")
    model = Llama(config, weights, target="cuda", cache_dir=cache_dir, dtype=dtype, programmatic=programmatic)
    assert model.graph
    ref = TorchLlama(config, weights, device="cuda", dtype=torch.float64)
    tokens = torch.randint(0, config.vocab_size, (70,), generator=torch.Generator().manual_seed(7)).tolist()
    for pos, token in enumerate(tokens):  # 70 positions: past attention's first 64-position tile
        logits = model.step(token, pos)
        err = _rel(logits, ref.step(token, pos))
        assert err < TOLERANCE[dtype], f"{dtype} position {pos}: relative error {err:.2e} (graph replay {pos > 0})"
        if pos % 7 == 1:  # greedy decoding's argmax inside the graph: the same step again
            assert model.next_token(token, pos) == int(torch.argmax(logits)), f"position {pos}"
    assert model._graph is not None


@pytest.mark.parametrize("dtype, n_kv_heads", [("f32", 2), ("f16", 6)])
def test_layer_kernel_step_logits_match_the_reference(cache_dir, dtype, n_kv_heads):
    """One examples/llama_layer.tk launch per layer (a persistent grid with `sync grid`, launched
    cooperatively and captured in the step's graph with programmatic launch), 70 positions."""
    config = _stories15m(n_kv_heads)
    weights = lf.random_weights(config, seed=n_kv_heads + 1, scale=0.1)
    model = Llama(config, weights, target="cuda", cache_dir=cache_dir, dtype=dtype, layer_kernel=True)
    ref = TorchLlama(config, weights, device="cuda", dtype=torch.float64)
    tokens = torch.randint(0, config.vocab_size, (70,), generator=torch.Generator().manual_seed(8)).tolist()
    for pos, token in enumerate(tokens):
        err = _rel(model.step(token, pos), ref.step(token, pos))
        assert err < TOLERANCE[dtype], f"{dtype} position {pos}: relative error {err:.2e}"


def test_auto_attention_switches_graphs_at_grid_from(cache_dir):
    """attention="auto": attention.tk's graph below GRID_FROM, attention_grid.tk's from there on;
    logits against float64 torch on both sides, and greedy decoding across the switch gives the
    tokens of next_token one by one."""
    from tkc.models.llama import GRID_FROM

    config = dataclasses.replace(_stories15m(2), seq_len=GRID_FROM + 16)
    weights = lf.random_weights(config, seed=5, scale=0.3)
    model = Llama(config, weights, target="cuda", cache_dir=cache_dir, attention="auto")
    ref = TorchLlama(config, weights, device="cuda", dtype=torch.float64)
    tokens = torch.randint(0, config.vocab_size, (GRID_FROM + 8,), generator=torch.Generator().manual_seed(9)).tolist()
    for pos, token in enumerate(tokens):
        logits, want = model.step(token, pos), ref.step(token, pos)
        if pos < 4 or pos >= GRID_FROM - 4:
            err = _rel(logits, want)
            assert err < TOLERANCE["f32"], f"position {pos}: relative error {err:.2e}"
    assert model._graph_long is not None
    model.reset()
    want, token = [], 1
    for pos in range(GRID_FROM + 8):
        token = model.next_token(token, pos)
        want.append(token)
    model.reset()
    assert list(model.greedy(1, 0, GRID_FROM + 8)) == want


def test_a_grid_too_large_to_be_resident_is_a_user_error(tmp_path):
    """`sync grid` needs every block resident: a grid past what the GPU holds is a located TkError
    before the launch (not a CUDA error, not a hang)."""
    from dsl.diagnostics import TkError

    path = tmp_path / "big.tk"
    path.write_text("kernel big<NB=100000>(X: f32[1, N]) -> (Y: f32[1, N])\n    where N = 8\n{\n"
                    "    grid (NB) as (b) threads(1024)\n    sync grid\n    Y[0 : +1, b : +1] = X[0 : +1, b : +1]\n}\n")
    k = tkc.compile(str(path), target="cuda", cache_dir=str(tmp_path))
    with pytest.raises(TkError, match="`sync grid` needs every block of the grid resident at once: the grid has "
                                      "100000 blocks"):
        k(torch.randn(1, 8, device="cuda"))


def test_greedy_queues_the_steps_ahead(cache_dir):
    """Llama.greedy (the steps' graphs replayed back to back, each one's argmax the next one's
    token) gives the tokens of next_token in a loop at any look-ahead; after an early stop the
    model decodes on from where it stopped."""
    config = _stories15m(6)
    model = Llama(config, lf.random_weights(config, seed=3, scale=0.3), target="cuda", cache_dir=cache_dir)
    want, token = [], 1
    for pos in range(40):
        token = model.next_token(token, pos)
        want.append(token)
    assert len(set(want)) > 5  # a sequence that can tell orders apart
    for ahead in (1, 3, 8):
        assert list(model.greedy(1, 0, 40, ahead=ahead)) == want, ahead
    chain = model.greedy(1, 0, 40)
    first = [next(chain) for _ in range(5)]
    chain.close()  # steps queued past position 4 have run
    assert first == want[:5]
    assert list(model.greedy(want[4], 5, 35)) == want[5:]
    with pytest.raises(ValueError, match="context"):
        list(model.greedy(1, config.seq_len - 2, 3))


@slow
def test_greedy_32_tokens_match_the_reference(cache_dir):
    vocab, scores = lf.byte_level_vocab([b" t", b"he", b"in", b"ing", b"th", b" a", b"on"])
    tok = lf.Tokenizer(vocab, scores)
    config = _stories15m(6)
    config = dataclasses.replace(config, vocab_size=len(vocab))
    weights = lf.random_weights(config, seed=5, scale=0.3)
    model = Llama(config, weights, target="cuda", cache_dir=cache_dir)
    ref = TorchLlama(config, weights, device="cuda", dtype=torch.float64)
    sampler = Sampler(config.vocab_size, 0.0)
    got = generate(model.step, tok, sampler, "the", 33, config.seq_len)
    want = generate(ref.step, tok, Sampler(config.vocab_size, 0.0), "the", 33, config.seq_len)
    assert len(got.tokens) >= 33 or got.tokens[-1] == 1
    assert got.tokens == want.tokens
    again = model.generate(tok, "the", 33)  # reset() and replay of the captured graph
    assert again.tokens == want.tokens


@slow
def test_graph_on_the_tilelang_target(cache_dir):
    config = lf.Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300, seq_len=40,
                       shared_classifier=False)
    weights = lf.random_weights(config, seed=3, scale=0.1)
    model = Llama(config, weights, target="tilelang", cache_dir=cache_dir, graph=True)
    ref = TorchLlama(config, weights, device="cuda", dtype=torch.float64)
    for pos, token in enumerate([1, 17, 250, 3, 99]):
        err = _rel(model.step(token, pos), ref.step(token, pos))
        assert err < 1e-4, f"position {pos}: relative error {err:.2e}"


@slow
@pytest.mark.parametrize("target", ["cuda", "tilelang"])
@pytest.mark.parametrize("name", ["attention", "attention_split", "kv_store", "rope"])
def test_device_scalars_replay_in_a_graph(cache_dir, target, name):
    defines = {"rope": {"B": 2, "D": 768, "HD": 64}, "kv_store": {"S": 256, "KVD": 288},
               # HD 32: TileLang lays a [1, HD] register tile over 256 threads (48 it cannot), and
               # compiles it in seconds (HD 128 took minutes on an H100 machine, 2026-11-25)
               "attention": {"H": 4, "HD": 32, "KVD": 64, "S": 256},
               "attention_split": {"H": 4, "HD": 32, "KVD": 64, "S": 256}}[name]
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    module = driver.frontend(path, defines)
    consts = {k: v for k, v in defines.items() if k == "HD" and name == "rope"}
    k = tkc.compile(path, target=target, cache_dir=cache_dir, **consts)
    budgets = oracle.error_budgets(module)
    names = oracle.input_names(module)
    at = names.index("pos")
    inputs = oracle.random_inputs(module, 1, "cuda", "wide", {"pos": 0})
    pos_t = torch.zeros(1, dtype=torch.int32, device="cuda")
    static = [pos_t if i == at else t.clone() for i, t in enumerate(inputs)]
    k(*static)  # loads the kernel
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # no host check to forbid: the kernel checks `pos` itself
        out = k(*static)
    outs = list(out) if isinstance(out, tuple) else [out]
    for pos in (0, 5, 130, 255 if name != "rope" else 4095):
        for s, t in zip(static, inputs):  # `mut` caches start from the same old values each time
            if s is not pos_t:
                s.copy_(t)
        pos_t.fill_(pos)
        g.replay()
        torch.cuda.synchronize()
        refs = oracle.reference(module, [pos if i == at else t for i, t in enumerate(inputs)])
        for (o, dtype), got, ref in zip(oracle.outputs(module), outs, refs):
            err = oracle.rel_error(got, ref)
            assert err <= budgets[o].tol(dtype), f"{name} {target} pos {pos}: `{o}` relative error {err:.3e}"

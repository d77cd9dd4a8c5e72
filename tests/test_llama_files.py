"""tkc.models.llama_files: llama2.c's checkpoint formats (legacy, version 1, version 2 int8) and
its tokenizer.bin / BPE encode / decode (run.c, runq.c, export.py). CPU only, no downloads."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dsl.diagnostics import TkError
from profiles import examples
from tkc.models.llama_files import (BOS, EOS, FLOAT_NAMES, MAGIC, QUANTIZED_NAMES, Config,
                                    Tokenizer, Weights, byte_level_vocab, load_checkpoint,
                                    quantize_q80, random_weights, write_legacy, write_tokenizer,
                                    write_v1, write_v2)


def tiny(shared: bool, hidden: int = 96) -> Config:
    # GQA: 4 query heads share 2 key/value heads; head_size 16, kv_dim 32
    return Config(dim=64, hidden_dim=hidden, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300,
                  seq_len=32, shared_classifier=shared)


WRITERS = {"legacy": write_legacy, "v1": write_v1}


def assert_same_floats(got: Weights, want: Weights, shared: bool) -> None:
    for name in FLOAT_NAMES:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == torch.float32 and a.device.type == "cpu", name
        assert torch.equal(a, b), name
    assert (got.wcls is got.token_embedding) == shared


# ---------------------------------------------------------------------------------------------
# checkpoints: round trips


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("fmt", ["legacy", "v1"])
def test_fp32_round_trip(tmp_path, fmt, shared):
    config = tiny(shared)
    weights = random_weights(config, seed=3)
    path = tmp_path / f"{fmt}.bin"
    WRITERS[fmt](path, config, weights)
    got_config, got = load_checkpoint(path)
    assert got_config == config
    assert got_config.head_size == 16 and got_config.kv_dim == 32
    assert got.quantized == {}
    assert {n: tuple(t.shape) for n, t in got.named().items()} == config.shapes()
    assert_same_floats(got, weights, shared)
    # legacy: 28-byte header, the RoPE tables (2 x seq_len * head_size / 2 f32); v1: 256-byte header
    n_floats = sum(int(np.prod(s)) for n, s in config.shapes().items() if n != "wcls" or not shared)
    extra = 28 + 2 * 4 * (32 * 16 // 2) if fmt == "legacy" else 256
    assert path.stat().st_size == extra + 4 * n_floats


def test_legacy_header_bytes(tmp_path):
    for shared, vocab in ((True, 300), (False, -300)):
        path = tmp_path / "m.bin"
        write_legacy(path, tiny(shared), random_weights(tiny(shared), seed=0))
        assert struct.unpack_from("<7i", path.read_bytes(), 0) == (64, 96, 2, 4, 2, vocab, 32)


def test_v1_mmap(tmp_path):
    config = tiny(False)
    weights = random_weights(config, seed=4)
    write_v1(tmp_path / "m.bin", config, weights)
    _, got = load_checkpoint(tmp_path / "m.bin", mmap=True)
    assert_same_floats(got, weights, False)
    got.wq.add_(1.0)  # copy-on-write: the file does not change
    _, again = load_checkpoint(tmp_path / "m.bin")
    assert torch.equal(again.wq, weights.wq)


def reference_q80(w: torch.Tensor, gs: int) -> tuple[torch.Tensor, torch.Tensor]:
    """export.py quantize_q80, per group of gs along the rows."""
    groups = w.reshape(*w.shape[:-1], w.shape[-1] // gs, gs)
    scale = groups.abs().amax(dim=-1) / 127.0
    return torch.round(groups / scale.unsqueeze(-1)).to(torch.int8).reshape(w.shape), scale


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("gs,hidden", [(32, 96), (64, 128)])
def test_v2_round_trip(tmp_path, gs, hidden, shared):
    config = tiny(shared, hidden)
    weights = random_weights(config, seed=5)
    path = tmp_path / "q.bin"
    write_v2(path, config, weights, gs)
    head = path.read_bytes()[:256]
    assert struct.unpack_from("<Ii", head) == (MAGIC, 2) and head[36] == int(shared)
    assert struct.unpack_from("<i", head, 37)[0] == gs and head[41:] == bytes(256 - 41)
    got_config, got = load_checkpoint(path)
    assert got_config == Config(64, hidden, 2, 4, 2, 300, 32, shared, group_size=gs)
    for name in ("rms_att", "rms_ffn", "rms_final"):  # kept in f32
        assert torch.equal(getattr(got, name), getattr(weights, name))
    assert set(got.quantized) == set(QUANTIZED_NAMES)
    assert (got.quantized["wcls"] is got.quantized["token_embedding"]) == shared
    assert (got.wcls is got.token_embedding) == shared
    for name in QUANTIZED_NAMES:
        q, s = got.quantized[name]
        w = getattr(weights, name)
        want_q, want_s = reference_q80(w, gs)
        assert q.dtype == torch.int8 and s.dtype == torch.float32
        assert q.shape == w.shape and s.shape == (*w.shape[:-1], w.shape[-1] // gs)
        assert torch.equal(q, want_q) and torch.equal(s, want_s), name
        deq = getattr(got, name)
        assert deq.dtype == torch.float32 and deq.shape == w.shape
        assert torch.equal(deq, q.float() * s.repeat_interleave(gs, dim=-1)), name
        bound = (s / 2).repeat_interleave(gs, dim=-1)  # max|w| / 127 / 2 per group
        assert bool(((deq - w).abs() <= bound * (1 + 1e-5) + 1e-12).all()), name
    # quantized tensors are written back verbatim: the same bytes
    write_v2(tmp_path / "again.bin", got_config, got, gs)
    assert (tmp_path / "again.bin").read_bytes() == path.read_bytes()


def test_v2_scales_unaligned(tmp_path):
    # one layer; the 5 x 30 int8 token_embedding (150 bytes) puts every later tensor off 4-byte
    # alignment (the scales are f32)
    config = Config(30, 42, 1, 3, 3, 5, 8, shared_classifier=False)
    weights = random_weights(config, seed=6)
    write_v2(tmp_path / "q.bin", config, weights, 6)
    got_config, got = load_checkpoint(tmp_path / "q.bin")
    assert got_config.group_size == 6
    for name in QUANTIZED_NAMES:
        q, s = quantize_q80(getattr(weights, name), 6)
        assert got.quantized[name][0].shape == getattr(weights, name).shape
        assert torch.equal(got.quantized[name][0], q) and torch.equal(got.quantized[name][1], s)
        assert torch.equal(getattr(got, name), q.float() * s.repeat_interleave(6, dim=-1))


def test_quantize_zero_group():
    q, s = quantize_q80(torch.zeros(2, 8), 4)
    assert torch.equal(q, torch.zeros(2, 8, dtype=torch.int8)) and torch.equal(s, torch.zeros(2, 2))


def test_random_weights():
    config = tiny(False)
    a, b, c = (random_weights(config, seed=s) for s in (1, 1, 2))
    for name in FLOAT_NAMES:
        assert torch.equal(getattr(a, name), getattr(b, name))
        assert not torch.equal(getattr(a, name), getattr(c, name))
    assert 0.015 < float(a.wq.std()) < 0.025 and abs(float(a.rms_att.mean()) - 1) < 0.05
    shared = random_weights(tiny(True), seed=1)
    assert shared.wcls is shared.token_embedding


def test_writer_rejects_bad_weights(tmp_path):
    config = tiny(True)
    weights = random_weights(config, seed=0)
    weights.wk = torch.zeros(2, 64, 64)
    with pytest.raises(ValueError, match="weights.wk has shape"):
        write_v1(tmp_path / "m.bin", config, weights)
    with pytest.raises(ValueError, match="group size 64 does not divide the 96 columns of w2"):
        write_v2(tmp_path / "m.bin", tiny(True), random_weights(tiny(True), seed=0), 64)


# ---------------------------------------------------------------------------------------------
# checkpoints: errors


def load_error(path) -> str:
    with pytest.raises(TkError) as info:
        load_checkpoint(path)
    (diag,) = info.value.diagnostics
    assert diag.loc.file == str(path) and diag.loc.line == 0
    assert diag.notes and "Traceback" not in info.value.render()
    return diag.message + "\n" + "\n".join(diag.notes)


def written(tmp_path, fmt="legacy", shared=True, gs=32, hidden=96) -> tuple:
    config = tiny(shared, hidden)
    path = tmp_path / f"{fmt}.bin"
    if fmt == "v2":
        write_v2(path, config, random_weights(config, seed=1), gs)
    else:
        WRITERS[fmt](path, config, random_weights(config, seed=1))
    return path, bytearray(path.read_bytes())


def patched(path, data: bytearray, offset: int, fmt: str, *values) -> None:
    struct.pack_into(fmt, data, offset, *values)
    path.write_bytes(bytes(data))


def test_error_missing_and_directory(tmp_path):
    assert "cannot read the checkpoint: No such file" in load_error(tmp_path / "nope.bin")
    assert "cannot read the checkpoint" in load_error(tmp_path)


def test_error_short_header(tmp_path):
    path = tmp_path / "m.bin"
    path.write_bytes(b"")
    assert "the file has 0 bytes, shorter than the 28-byte header" in load_error(path)
    path.write_bytes(struct.pack("<5i", 64, 96, 2, 4, 2))
    assert "the file has 20 bytes, shorter than the 28-byte header of a legacy" in load_error(path)
    path.write_bytes(struct.pack("<I", MAGIC) + b"\1")
    assert "the file has 5 bytes, shorter than the 256-byte header" in load_error(path)
    path.write_bytes(struct.pack("<Ii7i", MAGIC, 1, 64, 96, 2, 4, 2, 300, 32))
    assert "the file has 36 bytes, shorter than the 256-byte header of a version 1" \
        in load_error(path)


def test_error_header_values(tmp_path):
    path, data = written(tmp_path)
    patched(path, data, 0, "<i", -64)
    assert "header value not positive: dim=-64" in load_error(path)
    path, data = written(tmp_path)
    patched(path, data, 4, "<ii", 0, -2)
    assert "header values not positive: hidden_dim=0, n_layers=-2" in load_error(path)
    path, data = written(tmp_path)
    patched(path, data, 20, "<i", 0)
    assert "header value not positive: vocab_size=0" in load_error(path)
    path, data = written(tmp_path, "v1")
    patched(path, data, 28, "<i", -300)
    msg = load_error(path)
    assert "header value not positive: vocab_size=-300" in msg and "offset 36" in msg


def test_error_head_divisibility(tmp_path):
    path, data = written(tmp_path)
    patched(path, data, 12, "<i", 5)
    assert "dim=64 is not a multiple of n_heads=5" in load_error(path)
    path, data = written(tmp_path, "v1")
    patched(path, data, 24, "<i", 3)
    assert "n_heads=4 is not a multiple of n_kv_heads=3" in load_error(path)
    path, data = written(tmp_path)
    patched(path, data, 12, "<i", 64)  # head_size 1: RoPE's pairs would straddle heads
    assert "head_size = dim / n_heads = 64 / 64 = 1 is odd" in load_error(path)


def test_error_unknown_version(tmp_path):
    path, data = written(tmp_path, "v1")
    patched(path, data, 4, "<i", 3)
    msg = load_error(path)
    assert "unknown checkpoint version 3 after the `ak42` magic" in msg and "export.py" in msg


def test_error_header_flags(tmp_path):
    path, data = written(tmp_path, "v1")
    patched(path, data, 36, "<B", 7)
    assert "shared-classifier byte at offset 36 is 7" in load_error(path)
    path, data = written(tmp_path, "v2")
    patched(path, data, 37, "<i", 0)
    assert "group size at byte 37 of the version 2 header is 0, not positive" in load_error(path)
    path, data = written(tmp_path, "v2")
    patched(path, data, 37, "<i", 64)  # 64 divides dim 64 but not hidden_dim 96
    assert "group size 64 does not divide the 96 columns of `w2` (64 x 96)" in load_error(path)


def test_error_short_legacy(tmp_path):
    path, data = written(tmp_path)
    wq_at = 28 + 4 * (300 * 64 + 2 * 64)  # after token_embedding and rms_att
    path.write_bytes(bytes(data[: wq_at + 1000]))
    assert load_error(path).startswith(
        f"`wq` (layer weights, 2 x 64 x 64 f32) needs 32768 bytes at offset {wq_at}, "
        "the file has 1000 left")
    path, data = written(tmp_path, shared=False)
    path.write_bytes(bytes(data[:-3]))
    assert "`wcls` (classifier, 300 x 64 f32) needs 76800 bytes" in load_error(path)
    path, data = written(tmp_path, shared=True)
    path.write_bytes(bytes(data[:-3]))
    assert "`freq_cis_imag` (unused RoPE table, 256 f32) needs 1024 bytes" in load_error(path)


def test_error_short_v1_v2(tmp_path):
    path, data = written(tmp_path, "v1")
    path.write_bytes(bytes(data[:300]))
    assert load_error(path).startswith("`rms_att` (layer norms, 2 x 64 f32) needs 512 bytes at "
                                       "offset 256, the file has 44 left")
    path, data = written(tmp_path, "v2", shared=False)
    path.write_bytes(bytes(data[:-1]))
    assert "`wcls` (group scales, 300 x 2 f32) needs 2400 bytes" in load_error(path)
    # inside wk's layer 1: after the norms, token_embedding, wq (2 layers), wk layer 0
    q80 = lambda rows, cols: rows * cols + 4 * rows * cols // 32  # noqa: E731
    at = 256 + 4 * (2 * 64 + 2 * 64 + 64) + q80(300, 64) + 2 * q80(64, 64) + q80(32, 64)
    path.write_bytes(bytes(data[: at + 10]))
    assert load_error(path).startswith(
        f"`wk` (layer 1 of 2, int8 values, 32 x 64 i8) needs 2048 bytes at offset {at}, "
        "the file has 10 left")


def test_error_trailing(tmp_path):
    for fmt in ("legacy", "v1", "v2"):
        path, data = written(tmp_path, fmt, shared=False)
        path.write_bytes(bytes(data) + b"\0" * 8)
        msg = load_error(path)
        assert msg.startswith("8 trailing bytes after the last tensor `wcls`"), msg
        assert "the header does not match the weights" in msg
    # an unshared file whose header says shared: the trailing bytes are exactly wcls
    path, data = written(tmp_path, "legacy", shared=False)
    patched(path, data, 20, "<i", 300)
    msg = load_error(path)
    assert "76800 trailing bytes" in msg and "exactly an unshared `wcls` (300 x 64)" in msg
    path, data = written(tmp_path, "v2", shared=False)
    patched(path, data, 36, "<B", 1)
    assert "exactly an unshared `wcls`" in load_error(path)


# ---------------------------------------------------------------------------------------------
# tokenizer


MERGES = [b"he", b"ll", b"llo", b"hello", b" w", b"or", b"ld", b"orld", b" world", b"th", b" th",
          b" the", "é".encode(), "☃".encode(), b"\n\n"]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(*byte_level_vocab(MERGES))


def ids(t: Tokenizer, *pieces: bytes) -> list[int]:
    return [t.vocab.index(p) for p in pieces]


def decode_all(t: Tokenizer, tokens: list[int], prev: int) -> bytes:
    out = []
    for tk in tokens:
        out.append(t.decode(prev, tk))
        prev = tk
    return b"".join(out)


def reference_encode(t: Tokenizer, text: bytes, bos: bool, eos: bool) -> list[int]:
    """run.c's encode spelled out plainly (no incremental pair scores): the oracle of `encode`."""
    text = text.split(b"\0")[0]
    lookup = {}
    for i, p in enumerate(t.vocab):
        lookup.setdefault(p, i)
    toks = ([1] if bos else []) + ([lookup[b" "]] if text else [])
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and text[j] & 0xC0 == 0x80 and j - i < 4:
            j += 1
        cp = text[i:j]
        toks += [lookup[cp]] if cp in lookup else [b + 3 for b in cp]
        i = j
    while True:
        best, best_id, best_i = -1e10, -1, -1
        for k in range(len(toks) - 1):
            m = lookup.get(t.vocab[toks[k]] + t.vocab[toks[k + 1]], -1)
            if m >= 0 and t.scores[m] > best:
                best, best_id, best_i = t.scores[m], m, k
        if best_i < 0:
            break
        toks[best_i: best_i + 2] = [best_id]
    return toks + ([2] if eos else [])


def test_byte_level_vocab():
    vocab, scores = byte_level_vocab([b"ab"])
    assert vocab[:3] == [b"<unk>", b"\n<s>\n", b"\n</s>\n"]
    assert vocab[3] == b"<0x00>" and vocab[3 + 0x0A] == b"<0x0A>" and vocab[258] == b"<0xFF>"
    assert vocab[259] == b" " and vocab[259 + 94] == b"~" and vocab[-1] == b"ab"
    assert scores[:259] == [0.0] * 259 and scores[259:] == [float(k) for k in range(1, 97)]
    with pytest.raises(ValueError):
        byte_level_vocab([b"a"])


def test_encode_ascii(tok):
    got = tok.encode("hello world", bos=True, eos=False)
    assert got == [BOS] + ids(tok, b" ", b"hello", b" world")
    assert decode_all(tok, got[1:], BOS) == b"hello world"
    assert tok.encode("hello world", bos=False, eos=True) == \
        ids(tok, b" ", b"hello", b" world") + [EOS]
    assert tok.encode("the", bos=False, eos=False) == ids(tok, b" the")


def test_encode_empty(tok):
    assert tok.encode("", bos=True, eos=False) == [BOS]
    assert tok.encode("", bos=True, eos=True) == [BOS, EOS]
    assert tok.encode("", bos=False, eos=False) == []
    assert tok.encode("\0abc", bos=False, eos=False) == []  # run.c's C string ends at NUL


def test_encode_utf8_and_byte_fallback(tok):
    text = "héllo wörld ☃ 😀"
    got = tok.encode(text, bos=True, eos=False)
    fb = lambda s: [b + 3 for b in s.encode()]  # noqa: E731  (byte fallback: byte + 3)
    assert got == ([BOS] + ids(tok, b" ", b"h", "é".encode(), b"llo", b" w") + fb("ö")
                   + ids(tok, b"r", b"ld", b" ", "☃".encode(), b" ") + fb("😀"))
    assert decode_all(tok, got[1:], BOS) == text.encode()
    # control bytes have no piece either: byte fallback, decoded from <0xAB> pieces
    assert tok.encode("a\tb", bos=False, eos=False) == \
        ids(tok, b" ", b"a") + [3 + 9] + ids(tok, b"b")
    assert tok.decode(0, 3 + 0x0A) == b"\n" and tok.vocab[3 + 0x0A] == b"<0x0A>"


def test_merges_in_score_order():
    # scores increase along the list: ab < cd < bc < abcd. run.c merges the best pair first:
    # " a b c d" -> "bc" (best of ab, bc, cd) -> " a bc d"; no more pairs ("abc", "bcd" unknown),
    # although "ab" + "cd" would have made "abcd"
    t = Tokenizer(*byte_level_vocab([b"ab", b"cd", b"bc", b"abcd"]))
    assert t.encode("abcd", bos=False, eos=False) == ids(t, b" ", b"a", b"bc", b"d")
    # bc < ab < cd < abcd: " a b cd" -> " ab cd" -> " abcd"
    t = Tokenizer(*byte_level_vocab([b"bc", b"ab", b"cd", b"abcd"]))
    assert t.encode("abcd", bos=False, eos=False) == ids(t, b" ", b"abcd")


def test_merge_ties_and_floor():
    vocab, scores = byte_level_vocab([b"ab", b"bc"])
    scores[-2:] = [5.0, 5.0]  # a tie: the leftmost pair wins
    t = Tokenizer(vocab, scores)
    assert t.encode("abc", bos=False, eos=False) == ids(t, b" ", b"ab", b"c")
    scores[-2:] = [-2e10, -1e10]  # run.c's best score starts at -1e10 and needs `>`: no merge
    t = Tokenizer(vocab, scores)
    assert t.encode("abc", bos=False, eos=False) == ids(t, b" ", b"a", b"b", b"c")


def test_bos_takes_part_in_merges():
    t = Tokenizer(*byte_level_vocab([b"\n<s>\n "]))
    assert t.encode("a", bos=True, eos=False) == ids(t, b"\n<s>\n ", b"a")
    assert t.encode("a", bos=False, eos=False) == ids(t, b" ", b"a")


def test_decode(tok):
    (world,) = ids(tok, b" world")
    assert tok.decode(BOS, world) == b"world"  # sentencepiece strips the space after BOS
    assert tok.decode(5, world) == b" world"
    assert tok.decode(BOS, 3 + 0x20) == b" "  # a raw byte piece has no leading space to strip
    assert tok.decode(0, 3 + 0xAB) == b"\xab" and tok.decode(0, EOS) == b"\n</s>\n"
    with pytest.raises(ValueError):
        tok.decode(0, len(tok.vocab))


def test_safe_piece():
    assert Tokenizer.safe_piece(b"") == b""
    assert Tokenizer.safe_piece(b"\x01") == b"" and Tokenizer.safe_piece(b"\x7f") == b""
    assert Tokenizer.safe_piece(b"\xe2") == b""  # a lone byte >= 0x80 is not printable in C
    assert Tokenizer.safe_piece(b"\n") == b"\n" and Tokenizer.safe_piece(b"a") == b"a"
    assert Tokenizer.safe_piece(b"\x01\x02") == b"\x01\x02"
    assert Tokenizer.safe_piece(b"ab\0c") == b"ab"


def test_tokenizer_file_round_trip(tmp_path):
    vocab, scores = byte_level_vocab(MERGES)
    scores[300] = -123.456  # not an f32: stored rounded, as the file does
    write_tokenizer(tmp_path / "tok.bin", vocab, scores)
    t = Tokenizer.load(tmp_path / "tok.bin", len(vocab))
    assert t.vocab == vocab and t.max_token_length == 6
    assert t.scores == [float(np.float32(s)) for s in scores] == Tokenizer(vocab, scores).scores
    in_memory = Tokenizer(vocab, scores)
    assert t.encode("hello world", True, True) == in_memory.encode("hello world", True, True)
    assert Tokenizer.load(tmp_path / "tok.bin", 10).vocab == vocab[:10]  # the rest is ignored


def tokenizer_error(path, vocab_size) -> str:
    with pytest.raises(TkError) as info:
        Tokenizer.load(path, vocab_size)
    (diag,) = info.value.diagnostics
    assert diag.loc.file == str(path) and diag.notes
    return diag.message + "\n" + "\n".join(diag.notes)


def test_tokenizer_errors(tmp_path):
    vocab, scores = byte_level_vocab([])
    path = tmp_path / "tok.bin"
    assert "cannot read the tokenizer" in tokenizer_error(path, 10)
    path.write_bytes(b"\6\0")
    assert "shorter than the 4-byte header" in tokenizer_error(path, 10)
    write_tokenizer(path, vocab, scores)
    data = bytearray(path.read_bytes())
    n = len(vocab)
    assert "the checkpoint says vocab_size=400" in tokenizer_error(path, 400)
    assert f"token {n}: its f32 score and int32 length need 8 bytes" in tokenizer_error(path, n + 1)
    path.write_bytes(bytes(data[:-1]))  # inside the last piece
    assert f"token {n - 1}: its 1 bytes at offset {len(data) - 1} run past the end" \
        in tokenizer_error(path, n)
    struct.pack_into("<i", data, 8, 7)  # token 0 (<unk>): length 7 > max_token_length 6
    path.write_bytes(bytes(data))
    assert "token 0: length 7 at offset 8 is over max_token_length 6" in tokenizer_error(path, n)
    struct.pack_into("<i", data, 8, -1)
    path.write_bytes(bytes(data))
    assert "token 0: length -1 at offset 8 is negative" in tokenizer_error(path, n)
    struct.pack_into("<i", data, 0, -6)
    path.write_bytes(bytes(data))
    assert "max_token_length -6 in the header is negative" in tokenizer_error(path, n)


def test_encode_needs_prefix_piece():
    t = Tokenizer([b"<unk>", b"\n<s>\n", b"\n</s>\n", b"a"], [0.0] * 4)
    with pytest.raises(TkError, match="no \" \" piece"):
        t.encode("a", True, False)


@settings(max_examples=examples(10, 100))
@given(text=st.text())
def test_round_trip_property(tok, text):
    raw = text.encode("utf-8").split(b"\0")[0]  # run.c sees a C string
    got = tok.encode(text, bos=True, eos=True)
    assert got == reference_encode(tok, text.encode("utf-8"), True, True)
    assert got[0] == BOS and got[-1] == EOS and all(0 <= i < len(tok.vocab) for i in got)
    # what run.c prints: the decoded pieces after BOS give the text back (the dummy-prefix space
    # is stripped after BOS)
    assert decode_all(tok, got[1:-1], BOS) == raw
    # without BOS the dummy prefix stays
    plain = tok.encode(text, bos=False, eos=False)
    assert plain == got[1:-1]
    assert decode_all(tok, plain, 0) == (b" " + raw if raw else b"")

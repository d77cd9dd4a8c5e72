"""llama2.c's generation loop (run.c's `generate`), for any model with a `step(token, pos)`.

The prompt is encoded with BOS; position 0 runs the BOS token; while a position still lies
inside the prompt, the next token is the prompt's, afterwards the sampler's; a sampled BOS ends
the sequence; each new token's piece is decoded against the previous token and handed to `emit`
as it is produced (run.c prints it with `safe_printf`). At most `steps` positions run, and no
more than the model's context.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator

from tkc.models.llama_files import Tokenizer
from tkc.models.sampler import Sampler

BOS = 1


@dataclass
class Generation:
    """What `generate` produced: every token fed or sampled (the prompt's included, BOS first),
    the decoded bytes of the tokens after the prompt's first, and tokens/s after the first
    position (run.c's "achieved tok/s": the first step warms up)."""

    tokens: list[int]
    text: bytes
    tokens_per_s: float


def generate(step: Callable[[int, int], object], tokenizer: Tokenizer, sampler: Sampler, prompt: str,
             steps: int, seq_len: int, emit: Callable[[bytes], None] | None = None,
             next_token: Callable[[int, int], int] | None = None,
             greedy: Callable[[int, int, int], Iterator[int]] | None = None) -> Generation:
    """Run run.c's loop.

    Args:
        step: `step(token, pos) -> logits` (a 1-D tensor of vocab_size floats).
        tokenizer: the model's tokenizer (tkc.models.llama_files.Tokenizer).
        sampler: picks a token from logits (tkc.models.sampler.Sampler).
        prompt: text to start from ("" starts from BOS alone).
        steps: positions to run (BOS's included); clamped to 1 .. seq_len.
        seq_len: the model's context length.
        emit: called with each new piece (bytes, after run.c's `safe_printf` filter).
        next_token: `next_token(token, pos) -> id`, the step and its argmax in one call
            (tkc.models.llama.Llama.next_token); used instead of `step` and the sampler when the
            sampler is greedy (temperature 0), with the same tokens.
        greedy: `greedy(token, pos, count)` yielding the greedy tokens of positions pos + 1 ..
            pos + count (tkc.models.llama.Llama.greedy, which queues the steps ahead of the
            host); used after the prompt when the sampler is greedy, with the same tokens.

    Returns:
        a Generation.
    """
    steps = max(1, min(steps, seq_len))
    prompt_tokens = tokenizer.encode(prompt, bos=True, eos=False)
    token, pos = prompt_tokens[0], 0
    tokens = [token]
    pieces: list[bytes] = []
    start = None
    argmax = sampler.temperature == 0.0

    def successors():
        """The token after each position in turn: the prompt's, then the sampler's."""
        tok = token
        for p in range(steps):
            if argmax and greedy is not None and p >= len(prompt_tokens) - 1:
                yield from greedy(tok, p, steps - p)
                return
            if argmax and next_token is not None:
                best = next_token(tok, p)
                tok = prompt_tokens[p + 1] if p < len(prompt_tokens) - 1 else best
            else:
                logits = step(tok, p)
                tok = prompt_tokens[p + 1] if p < len(prompt_tokens) - 1 else sampler(logits)
            yield tok

    chain = successors()
    for nxt in chain:
        pos += 1
        if nxt == BOS:
            chain.close()
            break
        piece = tokenizer.safe_piece(tokenizer.decode(token, nxt))
        pieces.append(piece)
        if emit is not None:
            emit(piece)
        tokens.append(nxt)
        token = nxt
        if start is None:
            start = time.perf_counter()
    elapsed = time.perf_counter() - start if start is not None else 0.0
    rate = (pos - 1) / elapsed if pos > 1 and elapsed > 0 else 0.0
    return Generation(tokens, b"".join(pieces), rate)

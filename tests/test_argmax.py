"""examples/argmax.tk (greedy decoding's argmax, tkc.models.llama) on the CPU targets against
torch.argmax: the first index on ties, a NaN as the largest value (its first index wins), rows
of -inf and +inf, and a row shorter than the tile; the `mut` output is the only element written."""

from __future__ import annotations

import math
import os

import pytest
import torch

import tkc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "examples", "argmax.tk")
V = 300


def _rows():
    g = torch.Generator().manual_seed(3)
    rnd = torch.randn(V, generator=g)
    ties = torch.randint(-3, 4, (V,), generator=g).float()  # many equal maxima
    nan = rnd.clone()
    nan[[17, 40]] = math.nan
    late_max = rnd.clone()
    late_max[V - 1] = 50.0  # the last element of the row, in the tile's partial end
    return {"normal": rnd, "ties": ties, "nan": nan, "all -inf": torch.full((V,), -math.inf),
            "+inf twice": torch.where(torch.arange(V) % 97 == 5, math.inf, rnd), "late max": late_max,
            "negative": -rnd.abs() - 1.0}


@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
def test_argmax_is_torchs(target, tmp_path):
    kernel = tkc.compile(PATH, target=target, cache_dir=str(tmp_path), BV=512, threads=64)
    for name, row in _rows().items():
        want = int(torch.argmax(row))
        if name == "nan":
            assert want == 17
        out = torch.full((1, 1), -7, dtype=torch.int32)
        got = kernel(row.view(1, V), out)
        assert got is out or got.data_ptr() == out.data_ptr()
        assert int(out[0, 0]) == want, name

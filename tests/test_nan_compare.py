"""A tile compared with itself where it holds NaN (and Inf): every target gives IEEE's answer.
TVM's simplifier folds `x != x` to False and `x == x`, `x <= x`, `x >= x` to True, so the
TileLang backends emit those through `T.isnan` (codegen/tilelang.py `_apply`); examples/argmax.tk
finds NaNs without it. tests/gpu/test_gpu_nan_compare.py runs the same check on the GPU
targets."""

from __future__ import annotations

import math
import os

import pytest
import torch

import tkc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "tests", "programs", "self_compare.tk")


def check(target: str, cache_dir: str, device: str = "cpu") -> None:
    x = torch.randn(1, 72)
    x[0, [3, 40, 71]] = math.nan
    x[0, 9], x[0, 50] = math.inf, -math.inf
    want = torch.stack([(x != x)[0], (x == x)[0], (x <= x)[0], (x >= x)[0], (x < x)[0], (x > x)[0]]).float()
    got = tkc.compile(PATH, target=target, cache_dir=cache_dir)(x.to(device)).cpu()
    assert torch.equal(got, want), (got != want).nonzero().tolist()


@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
def test_self_comparison_at_nan(target, tmp_path):
    check(target, str(tmp_path))

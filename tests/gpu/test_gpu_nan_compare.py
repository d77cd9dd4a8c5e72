"""tests/test_nan_compare.py's check on the GPU targets: a tile compared with itself gives IEEE's
answer where it holds NaN."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from test_nan_compare import check  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("target", ["cuda", "tilelang"])
def test_self_comparison_at_nan_on_the_gpu(target, tmp_path):
    check(target, str(tmp_path), "cuda")

"""Session setup: hypothesis profiles, private TileLang/tkc caches, the `gpu` marker.

Nothing here imports TileLang (or tkc, which could): TileLang creates its cache directory when it
is imported, so TILELANG_CACHE_DIR must be set first, in pytest_configure.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # tests/profiles.py, tests/diag_util.py

import profiles  # noqa: E402  (registers the hypothesis profiles)

_TMP: list[str] = []


def pytest_configure(config):
    name = config.getoption("--hypothesis-profile", default=None) or "dev"
    profiles.activate(name)
    tmp = tempfile.mkdtemp(prefix="tkc-tests-")
    _TMP.append(tmp)
    os.environ["TKC_CACHE_DIR"] = os.path.join(tmp, "tkc")
    os.environ["TILELANG_CACHE_DIR"] = os.path.join(tmp, "tilelang")
    os.environ["TILELANG_PRINT_ON_COMPILATION"] = "0"


def pytest_unconfigure(config):
    for tmp in _TMP:
        shutil.rmtree(tmp, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

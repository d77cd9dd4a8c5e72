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


# The CPU suite runs under pytest-xdist with `--dist loadfile` (README): a file's tests go to one
# worker, in collection order. The longest files (minutes each on the 2-core CI machine) go first,
# longest first, so that no long file starts last and leaves the other worker idle.
LONG_FILES = ("test_program_fuzz_compiled.py", "test_cuda.py", "test_docs.py", "test_program_fuzz.py",
              "test_smem_fit.py", "test_edges.py", "test_programs.py", "test_properties.py", "test_llama_model.py",
              "test_benchmarks.py", "test_llama_cli.py", "test_sgemm_emulated.py", "test_sgemm.py",
              "test_input_fuzz.py", "test_sddmm.py", "test_tile_expressions.py")


def _long_first(item) -> int:
    name = os.path.basename(str(item.fspath))
    return LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_long_first)  # stable: the order within a file and among the rest stays
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

"""The GPU quick tier: every example and test program through both GPU backends (`tilelang`,
`cuda`) at its all-partial shape, other stage counts and schedule variants of
tests/edge_shapes.py, plus the one-dim edges that a mutant needs (KEEP; the full tier, `-m gpu`,
adds every other one-dim tile edge: 880 cases against 187), on every input distribution of
tkc/oracle.py, against torch in float64 on the same inputs, within the tolerance derived from the
kernel's dtypes and reduction length. The one allowed outcome besides a match is TileLang's
located diagnostic for a register tile it cannot lay out over the block's threads (reported as
xfail). Inputs and outputs are fenced in by NaN and outputs start all NaN (tests/fenced.py): a
load past a tensor's end, a store past it and an element the kernel never writes all fail.

All kernels are compiled first, in parallel worker processes that fill a shared cache (a
TileLang or nvcc build takes seconds; serially the tier would not fit its 3 minutes). Run on the
device machine: `python3 -m pytest -q -m "gpu and not slow" --hypothesis-profile=gpu -n 4 --dist loadfile tests/gpu`
(4 processes: 1m38s-2m20s on an H100, 2026-11-27).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys

import pytest
import torch

import tkc
from dsl.diagnostics import TkError
from tkc import driver, oracle

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from edge_shapes import ROOT, all_cases, dists, grid_sync  # noqa: E402
from fenced import launch_fenced  # noqa: E402

pytestmark = pytest.mark.gpu

TARGETS = ("tilelang", "cuda")
# One-dim edges the quick tier keeps: (target, file, case) that catch a mutant of
# tests/mutants/mutants.py no other quick case catches
KEEP = {
    # K below one R tile: the K loop's one trip loads a chunk mostly past K by guarded cp.async
    # (cuda-cp-async-always-valid and cuda-cp-async-no-zero-fill; the all-partial K = 33 and the
    # base K = 100 pass under the first, H200, 2026-11-26)
    ("cuda", "examples/miss.tk", "K=8"),
}


def _quick(target: str, path: str, case: str, cases: list) -> bool:
    """The quick tier's cases of a file: its all-partial shape, other stage counts and schedule
    variants (one compile each per backend) and the KEEP cases; the other one-dim-at-a-time
    edges are the full tier's (marked `slow`). A file with none of these keeps its first case."""
    from edge_shapes import SPECS

    if (target, path, case) in KEEP:
        return True
    one_dim = case.count("=") == 1 and case.split("=")[0] in SPECS[path].tiles
    if not one_dim:
        return True
    return all(c.count("=") == 1 and c.split("=")[0] in SPECS[path].tiles for _, c, _ in cases) and case == cases[0][1]


def _cases() -> list:
    out = []
    every = all_cases()
    for t in TARGETS:
        for p, c, v in every:
            if t == "tilelang" and grid_sync(p):  # TileLang has no grid barrier (a located error)
                continue
            mine = [x for x in every if x[0] == p]
            marks = () if _quick(t, p, c, mine) else (pytest.mark.slow,)
            out.append(pytest.param(t, p, c, v, marks=marks, id=f"{t}:{os.path.basename(p)}:{c}"))
    return out


CASES = _cases()
# The quick tier's case ids (not `slow`): tests/test_mutants.py checks each GPU mutant's `select`
# (a pytest -k expression, tests/mutants/mutants.py) against these
IDS = [p.id for p in CASES if not any(m.name == "slow" for m in p.marks)]


def _consts(path: str, values: dict[str, int]) -> dict[str, int]:
    module = driver.frontend(os.path.join(ROOT, path), values)
    return {k: v for k, v in values.items() if k in module.func.attrs["consts"]}


def _dims(path: str, values: dict[str, int]) -> dict[str, int]:
    module = driver.frontend(os.path.join(ROOT, path), values)
    return {k: v for k, v in values.items() if k in module.func.attrs["dims"]}


def _build_one(target: str, path: str, values: dict[str, int], cache_dir: str) -> str:
    """Worker: compile one case into the shared cache (errors are reported by the test itself)."""
    try:
        kernel = tkc.compile(os.path.join(ROOT, path), target=target, cache_dir=cache_dir, **_consts(path, values))
        kernel.specialize(_dims(path, values))
        return "ok"
    except Exception as exc:  # noqa: BLE001 (the test compiles again and reports it properly)
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="session")
def cache_dir(request):
    """One cache for the whole tier, filled by parallel workers before the first test with the
    kernels of the selected tests (`-k` selects fewer)."""
    root = os.environ.get("TKC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tkc")
    params = [item.callspec.params for item in request.session.items
              if item.originalname == "test_gpu_backend_at_tile_edges" and hasattr(item, "callspec")]
    jobs = [(p["target"], p["path"], p["values"], root) for p in params]
    if torch.cuda.is_available() and jobs:
        ctx = multiprocessing.get_context("spawn")  # never fork a process that holds a CUDA context
        workers = max(1, min(14, (os.cpu_count() or 2) - 2, len(jobs)))
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            list(pool.map(_build_one, *zip(*jobs)))
    return root


@pytest.mark.parametrize("target, path, case, values", CASES)
def test_gpu_backend_at_tile_edges(target, path, case, values, cache_dir):
    full = os.path.join(ROOT, path)
    module = driver.frontend(full, values)
    kernel = tkc.compile(full, target=target, cache_dir=cache_dir, **_consts(path, values))
    try:
        kernel.specialize(_dims(path, values))
    except TkError as exc:
        # The one rejection allowed: TileLang's GPU layouts need register tiles that divide over
        # the threads, and the backend says so at the tile's location (any other error fails).
        first = exc.render().splitlines()[0]
        if target != "tilelang" or "cannot lay out register tile" not in first:
            raise
        pytest.xfail(f"{target} rejects {case}: {first}")
    budgets = oracle.error_budgets(module)
    for seed, dist in enumerate(dists(path)):
        inputs = oracle.random_inputs(module, seed, "cuda", dist)
        results = launch_fenced(kernel, inputs)
        refs = oracle.reference(module, inputs)
        assert len(refs) == len(results)
        for (name, dtype), out, ref in zip(oracle.outputs(module), results, refs):
            assert ref.abs().max().item() > 0, f"{name}: the reference is all zeros"
            err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
            assert err <= tol, f"{target} {case} {dist}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"

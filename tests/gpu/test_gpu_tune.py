"""`tkc tune` end to end on the GPU: a small space of real examples is pruned, compiled in parallel
worker processes, checked against the kernel's reference and timed with do_bench; the best
configuration is then what `tkc.compile(..., tune=True)` runs, and it computes the right result.
A second `tkc tune` reuses the stored times. Ranking and printing are also tested on the CPU with
an injected timer (tests/test_tune.py).

Run on the device machine (quick tier): `python3 -m pytest -q -m "gpu and not slow" tests/gpu/test_gpu_tune.py`.
"""

from __future__ import annotations

import importlib.util
import os
import re

import pytest
import torch

import tkc
from tkc import oracle
from tkc.cli import main

pytestmark = [pytest.mark.gpu]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = [
    ("tilelang", "examples/matmul.tk", ["-D", "D=2048", "-D", "K=2048", "--space", "BD=4,8", "--space", "BK=256,512"]),
    ("cuda", "examples/matmul.tk", ["-D", "D=2048", "-D", "K=2048", "--space", "BD=4,8", "--space", "BK=256,512"]),
    ("tilelang", "examples/miss.tk", ["--space", "BM=16,32", "--space", "stages=2,3"]),
]


@pytest.mark.parametrize("target, path, args", CASES, ids=[f"{t}-{os.path.basename(p)}" for t, p, _ in CASES])
def test_tune_then_compile_with_tune(target, path, args, tmp_path, capsys):
    if target == "cuda" and importlib.util.find_spec("cupy") is None:
        pytest.skip("the cuda target needs CuPy (pip install -e '.[gpu]')")
    full = os.path.join(ROOT, path)
    cache = str(tmp_path / "cache")
    rc = main(["--cache-dir", cache, "tune", full, "--target", target, "--jobs", "4", *args])
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    m = re.search(r"^best: (.*): ([0-9.]+) us$", out, re.M)
    assert m, out
    best = dict(kv.split("=") for kv in m.group(1).split(", "))
    assert float(m.group(2)) > 0
    assert re.search(r"^0 rejected before compiling, 4 compiled, [1-4] timed$", out, re.M), out

    rc = main(["--cache-dir", cache, "tune", full, "--target", target, "--jobs", "4", *args])
    again, err = capsys.readouterr()
    assert rc == 0 and "(4 measured by an earlier run)" in again, again + err
    assert f"best: {m.group(1)}: {m.group(2)} us" in again

    kernel = tkc.compile(full, target=target, cache_dir=cache, tune=True)
    artifact, _ = kernel.specialize(_dims(full, args))
    assert {k: str(v) for k, v in artifact.module.func.attrs["consts"].items() if k in best} == best
    module = artifact.module
    inputs = oracle.random_inputs(module, 7, "cuda")
    outs = kernel(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    budgets = oracle.error_budgets(module)
    for (name, dtype), got, ref in zip(oracle.outputs(module), outs, oracle.reference(module, inputs)):
        assert oracle.rel_error(got, ref) <= budgets[name].tol(dtype), name


def _dims(path: str, args: list[str]) -> dict[str, int]:
    """The dims `tkc tune` used: the `-D` values over the kernel's `where` defaults."""
    from tkc import driver

    defines = {a.split("=")[0]: int(a.split("=")[1]) for a, prev in zip(args[1:], args) if prev == "-D"}
    return dict(driver.frontend(path, defines).func.attrs["dims"])

"""Every example and test program at every tile edge (tests/edge_shapes.py), on every input
distribution of tkc/oracle.py, against torch in float64: the reference interpreter on the IR
after the default pipeline (strict: an access outside a tensor in a dim `tile` left unguarded is
an error), and TileLang's C target (`tilelang-cpu`, compiled and run on tensors fenced in by NaN,
tests/fenced.py). The GPU backends run the
same cases in tests/gpu/test_gpu_quick.py.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

import tkc
from dsl.diagnostics import TkError
from dsl.interpreter import run
from edge_shapes import ROOT, SPECS, all_cases, dists, files_without_spec, grid_sync
from fenced import launch_fenced
from tkc import driver, oracle

CASES = all_cases()
IDS = [f"{os.path.basename(p)}:{c}" for p, c, _ in CASES]


def has_cluster(module) -> bool:
    return any("cluster" in op.attrs for op in module.walk() if op.name == "tile.launch")


def check_outputs(module, inputs, results, where: str) -> None:
    """Each output against torch in float64 within its derived tolerance; never all zeros."""
    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    assert len(refs) == len(results) == len(oracle.outputs(module))
    for (name, dtype), out, ref in zip(oracle.outputs(module), results, refs):
        assert ref.abs().max().item() > 0, f"{name}: the reference is all zeros"
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        assert err <= tol, f"{where}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"


def test_every_file_has_edge_shapes():
    assert files_without_spec() == []


@pytest.mark.parametrize("path, case, values", CASES, ids=IDS)
def test_interpreter_at_tile_edges(path, case, values):
    module = driver.frontend(os.path.join(ROOT, path), values)
    final = driver.optimize(driver.frontend(os.path.join(ROOT, path), values), "tilelang")
    for seed, dist in enumerate(dists(path)):
        inputs = oracle.random_inputs(module, seed, "cpu", dist)
        names = oracle.input_names(final)
        outs = run(final, oracle.interp_inputs(names, inputs))
        results = [torch.from_numpy(np.asarray(o, np.float64)) for o in outs.values()]
        check_outputs(module, inputs, results, f"interp {case} {dist}")


def _clustered(path: str) -> bool:
    """Whether the kernel's grid has thread-block clusters (tilelang-cpu has none)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return re.search(r"\bcluster\s*\(", f.read()) is not None


def _on_cpu(path: str, case: str) -> bool:
    """Whether tilelang-cpu runs this case: not with clusters (it has none); for a sampled gemm
    (SDDMM: about 2 s of TileLang C compile per shape, 37 shapes) and peft_miss.tk only the cases
    that cut several dims and the tile variants; the interpreter runs every case, and tests/test_sddmm.py runs the
    C kernel's every split at shapes that cut the tiles."""
    if _clustered(path) or grid_sync(path):  # tilelang-cpu: test_no_grid_barrier_on_tilelang_cpu
        return False
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        sampled = "tiles(" in f.read()
    one_dim = case.split("=")[0] in SPECS[path].tiles  # `M=33`: one dim at an edge
    # peft_miss.tk is miss_split.tk's body plus an added input: the C target runs miss_split's
    # every edge, and peft_miss's cases that cut several dims at once and its variants
    return not (sampled or path == "examples/peft_miss.tk") or not one_dim


@pytest.mark.parametrize("path, case, values", [c for c in CASES if _on_cpu(c[0], c[1])],
                         ids=[i for i, c in zip(IDS, CASES) if _on_cpu(c[0], c[1])])
def test_tilelang_cpu_at_tile_edges(path, case, values):
    full = os.path.join(ROOT, path)
    module = driver.frontend(full, values)
    assert not has_cluster(module)
    consts = {k: v for k, v in values.items() if k in module.func.attrs["consts"]}
    kernel = tkc.compile(full, target="tilelang-cpu", **consts)
    if any(a.type.dtype == "bf16" for a in module.func.body.args):  # TVM's C target has no bf16
        with pytest.raises(TkError, match="target `tilelang-cpu` cannot express bf16"):
            kernel.specialize({k: v for k, v in values.items() if k in module.func.attrs["dims"]})
        return
    for seed, dist in enumerate(dists(path)):
        inputs = oracle.random_inputs(module, seed, "cpu", dist)
        results = launch_fenced(kernel, inputs)
        check_outputs(module, inputs, results, f"tilelang-cpu {case} {dist}")

"""compute-sanitizer racecheck and memcheck on the cluster examples (seed 001) through every GPU
backend (`tilelang`, `cuda`): both tools must report no hazards and no errors, and the result
must match torch in float64 on the same inputs (tkc/oracle.py), on every input distribution,
within the derived tolerance."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The reference runs on the CPU, so that few kernels besides tkc's run under the tool.
PROGRAM = """
import sys, torch
sys.path.insert(0, {root!r})
import tkc
from tkc import driver, oracle
k = tkc.compile({path!r}, target={target!r}, STAGE={stage})
module = driver.frontend({path!r}, {{"B": 8, "N": 4096, "STAGE": {stage}}})
tol = oracle.error_budgets(module)["Y"].tol("f16")
ok = True
for seed, dist in enumerate(oracle.DISTRIBUTIONS):
    (x,) = oracle.random_inputs(module, seed, "cpu", dist)
    y = k(x.cuda())
    torch.cuda.synchronize()
    (ref,) = oracle.reference(module, [x])
    err = oracle.rel_error(y.cpu(), ref)
    print(dist, "relative error", err, "tolerance", tol)
    ok = ok and y.dtype == torch.float16 and err <= tol
sys.exit(0 if ok else 3)
"""


@pytest.mark.parametrize("target", ["tilelang", "cuda"])
@pytest.mark.parametrize("tool", ["racecheck", "memcheck"])
@pytest.mark.parametrize("name", ["cluster_reduce_dsmem", "cluster_reduce_dsmem_pull", "cluster_reduce_hbm"])
@pytest.mark.parametrize("stage", [0, 1])
def test_sanitizer_is_clean(target, tool, name, stage):
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    code = PROGRAM.format(root=ROOT, path=os.path.join(ROOT, "examples", f"{name}.tk"), stage=stage, target=target)
    proc = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "5", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    summary = "RACECHECK SUMMARY: 0 hazards" if tool == "racecheck" else "ERROR SUMMARY: 0 errors"
    assert summary in out, out[-3000:]

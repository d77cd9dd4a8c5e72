"""`tkc run`: random inputs of a kernel's default shapes, launch, and compare with its reference.

The reference is the kernel's `reference` string: a torch expression over the input names
(as float64 tensors, on the kernel's device), the dims (ints), `torch` and `F`
(torch.nn.functional). The error reported is max |out - ref| / max |ref| per output; the
tolerance is derived from the kernel's dtypes and reduction length (tkc/oracle.py) unless
`--rtol` sets one.
"""

from __future__ import annotations

import sys

from dsl.diagnostics import error
from tkc import driver
from tkc.cache import Cache
from tkc.oracle import error_budget, output_dtypes, random_inputs, reference, rel_error  # noqa: F401 (re-exported)
from tkc.runtime import Kernel


def run_file(path: str, target: str | None, defines: dict[str, int], seed: int, check: bool,
             rtol: float | None, cache: Cache, dist: str = "normal") -> int:
    import torch

    module = driver.frontend(path, defines)
    if target is None:  # TileLang's C target has no clusters: the interpreter simulates them
        clusters = any("cluster" in op.attrs for op in module.walk() if op.name == "tile.launch")
        target = "tilelang" if torch.cuda.is_available() else ("interp" if clusters else "tilelang-cpu")
    device = "cuda" if target in ("tilelang", "cuda") else "cpu"
    inputs = random_inputs(module, seed, device, dist)
    kernel = Kernel(path, target, defines, cache)
    outputs = kernel(*inputs)
    outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
    shapes = ", ".join(f"{n}={v}" for n, v in sorted(module.env.items()))
    print(f"{module.func.attrs['sym_name']}: ran on {target} ({device}) with {shapes}")
    if not check:
        return 0
    refs = reference(module, inputs)
    ok = True
    names = [module.func.body.args[i].name for i in module.func.attrs["outputs"]]
    budget = error_budget(module)
    for name, dtype, out, ref in zip(names, output_dtypes(module), outputs, refs):
        err = rel_error(out, ref)
        tol = budget.tol(dtype) if rtol is None else rtol
        passed = err <= tol
        ok &= passed
        print(f"{name}: max relative error {err:.3e} (tolerance {tol:.3g}): {'ok' if passed else 'MISMATCH'}")
    if len(refs) != len(outputs):
        print(f"reference gives {len(refs)} results for {len(outputs)} outputs: MISMATCH", file=sys.stderr)
        ok = False
    return 0 if ok else 1

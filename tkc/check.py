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
from tkc.oracle import error_budgets, outputs, random_inputs, reference, rel_error  # noqa: F401 (re-exported)
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
    results = kernel(*inputs)
    results = list(results) if isinstance(results, tuple) else [results]
    shapes = ", ".join(f"{n}={v}" for n, v in sorted(module.env.items()))
    print(f"{module.func.attrs['sym_name']}: ran on {target} ({device}) with {shapes}")
    if not check:
        return 0
    refs = reference(module, inputs)
    ok = True
    budgets = error_budgets(module)
    for (name, dtype), out, ref in zip(outputs(module), results, refs):
        err = rel_error(out, ref)
        tol = budgets[name].tol(dtype) if rtol is None else rtol
        passed = err <= tol
        ok &= passed
        print(f"{name}: max relative error {err:.3e} (tolerance {tol:.3g}): {'ok' if passed else 'MISMATCH'}")
    if len(refs) != len(results):
        print(f"reference gives {len(refs)} results for {len(results)} outputs: MISMATCH", file=sys.stderr)
        ok = False
    return 0 if ok else 1

"""`tkc run`: random inputs of a kernel's default shapes, launch, and compare with its reference.

The reference is the kernel's `reference` string: a torch expression over the input names
(as float64 tensors, on the kernel's device), the dims (ints), `torch` and `F`
(torch.nn.functional). The error reported is max |out - ref| / max |ref| per output; the
tolerance is derived from the kernel's dtypes and reduction length (tkc/oracle.py) unless
`--rtol` sets one.
"""

from __future__ import annotations

import os
import sys

from dsl.diagnostics import error
from dsl.ops import has_grid_barrier
from tkc import driver
from tkc.cache import Cache
from tkc.oracle import dims_env, error_budgets, outputs, random_inputs, reference, rel_error  # noqa: F401 (re-exported)
from tkc.runtime import Kernel


def _memory_bytes(device: str) -> int | None:
    """Total memory of `device` ("cpu": physical RAM, "cuda": the current GPU's), None if unknown."""
    import torch

    try:
        if device == "cuda":
            return torch.cuda.mem_get_info()[1]
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def run_file(path: str, target: str | None, defines: dict[str, int], seed: int, check: bool,
             rtol: float | None, cache: Cache, dist: str = "normal") -> int:
    import torch

    module = driver.frontend(path, defines)
    if target is None:  # TileLang's C target has no clusters: the interpreter simulates them
        clusters = any("cluster" in op.attrs for op in module.walk() if op.name == "tile.launch")
        grid_sync = has_grid_barrier(module.func)  # `sync grid`: cuda and interp only
        if torch.cuda.is_available():
            target = "cuda" if grid_sync else "tilelang"
        else:
            target = "interp" if clusters or grid_sync else "tilelang-cpu"
    device = "cuda" if target in ("tilelang", "cuda") else "cpu"
    if device == "cuda" and not torch.cuda.is_available():  # the user's machine, not a tkc bug
        raise error(module.func.loc, f"target `{target}` needs a CUDA GPU, and torch sees none",
                    "run on the CPU with `--target tilelang-cpu` (or `--target interp`), or leave `--target` out")
    nbytes = sum(a.type.nbytes(dims_env(module)) for a in module.func.body.args)
    total = _memory_bytes(device)
    if total is not None and nbytes > total:  # refuse before allocating (no OOM kill midway)
        raise error(module.func.loc, f"the kernel's tensors need {nbytes:,} bytes; this machine's {device} "
                    f"memory is {total:,} bytes", "choose smaller dims with -D")
    try:
        inputs = random_inputs(module, seed, device, dist, defines)
    except (MemoryError, RuntimeError) as exc:  # torch's allocation failures are RuntimeErrors
        if isinstance(exc, RuntimeError) and "memory" not in str(exc).lower():
            raise
        raise error(module.func.loc, f"cannot allocate the kernel's tensors: {nbytes:,} bytes on {device}",
                    "choose smaller dims with -D") from None
    consts = {k: v for k, v in defines.items() if k in module.func.attrs["consts"]}  # dims: from the tensors
    kernel = Kernel(path, target, consts, cache)
    from tkc.oracle import input_names

    args = module.func.body.args
    mut = {args[i].name for i in module.func.attrs.get("mutable", [])}  # updated in place: the
    # reference needs their old values, so the kernel gets copies
    results = kernel(*[t.clone() if n in mut else t for n, t in zip(input_names(module), inputs)])
    results = list(results) if isinstance(results, tuple) else [results]

    scalar_args = {n: v for n, v in zip(input_names(module), inputs) if isinstance(v, int)}
    shapes = ", ".join(f"{n}={v}" for n, v in sorted({**dims_env(module), **scalar_args}.items()))
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
        shapes = "" if tuple(ref.shape) == tuple(out.shape) else \
            f" (the reference gives shape {list(ref.shape)}, the kernel {list(out.shape)})"
        print(f"{name}: max relative error {err:.3e} (tolerance {tol:.3g}): {'ok' if passed else 'MISMATCH'}{shapes}")
    if len(refs) != len(results):
        print(f"reference gives {len(refs)} results for {len(results)} outputs: MISMATCH", file=sys.stderr)
        ok = False
    return 0 if ok else 1

"""`tkc run`: random inputs of a kernel's default shapes, launch, and compare with its reference.

The reference is the kernel's `reference` string: a torch expression over the input names
(as float32 tensors, on the kernel's device), the dims (ints), `torch` and `F`
(torch.nn.functional). The error reported is max |out - ref| / max |ref| per output.
"""

from __future__ import annotations

import sys

from dsl.diagnostics import error
from tkc import driver
from tkc.cache import Cache
from tkc.runtime import TORCH_DTYPES, Kernel


def random_inputs(module, seed: int, device: str):
    """Seeded random tensors for every input of `module` (normal for floats, small ints else)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    env = module.env
    outs = set(module.func.attrs["outputs"])
    tensors = []
    for i, a in enumerate(module.func.body.args):
        if i in outs:
            continue
        shape = a.type.concrete_shape(env)
        dtype = getattr(torch, TORCH_DTYPES[a.type.dtype])
        if a.type.dtype in ("i8", "i32"):
            t = torch.randint(-8, 8, shape, generator=gen, dtype=dtype)
        else:
            t = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        tensors.append(t.to(device))
    return tensors


def reference(module, inputs):
    """Evaluate the kernel's reference expression; returns a list of float32 tensors."""
    import torch
    import torch.nn.functional as F

    func = module.func
    text = func.attrs.get("reference", "")
    if not text:
        raise error(func.loc, f"kernel `{func.attrs.get('sym_name')}` has no `reference`",
                    'add `reference "<torch expression>"` after the signature to use --check')
    names = [a.name for i, a in enumerate(func.body.args) if i not in set(func.attrs["outputs"])]
    scope = {"torch": torch, "F": F, **module.env, **{n: t.float() for n, t in zip(names, inputs)}}
    try:
        result = eval(text, scope)  # the kernel author's own expression, like a script (one scope: lambdas see it)
    except Exception as exc:
        raise error(func.loc, f"the reference expression failed: {type(exc).__name__}: {exc}",
                    f"reference: {text}") from None
    return [r.float() for r in (result if isinstance(result, (tuple, list)) else [result])]


def rel_error(out, ref) -> float:
    """max |out - ref| / max |ref| (NaN when out has NaNs or shapes differ)."""
    import torch

    out, ref = out.float().cpu(), ref.float().cpu()
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return float("nan")
    scale = ref.abs().max().item() or 1.0
    return (out - ref).abs().max().item() / scale


def run_file(path: str, target: str | None, defines: dict[str, int], seed: int, check: bool,
             rtol: float, cache: Cache) -> int:
    import torch

    module = driver.frontend(path, defines)
    if target is None:  # TileLang's C target has no clusters: the interpreter simulates them
        clusters = any("cluster" in op.attrs for op in module.walk() if op.name == "tile.launch")
        target = "tilelang" if torch.cuda.is_available() else ("interp" if clusters else "tilelang-cpu")
    device = "cuda" if target in ("tilelang", "cuda") else "cpu"
    inputs = random_inputs(module, seed, device)
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
    for name, out, ref in zip(names, outputs, refs):
        err = rel_error(out, ref)
        passed = err <= rtol
        ok &= passed
        print(f"{name}: max relative error {err:.3e} (tolerance {rtol:g}): {'ok' if passed else 'MISMATCH'}")
    if len(refs) != len(outputs):
        print(f"reference gives {len(refs)} results for {len(outputs)} outputs: MISMATCH", file=sys.stderr)
        ok = False
    return 0 if ok else 1

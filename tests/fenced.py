"""Launch a compiled kernel on tensors fenced in by poison, so that an access past a tensor's end
shows in the results.

Every input and output is a view into a larger buffer whose `FENCE` elements before and after the
tensor hold NaN (integer tensors: their dtype's most negative value; bool tensors: the byte 0xAA,
which is neither false nor true); outputs start all poison too.
A load one element past a tensor's end then reads NaN into the tile (a reduction or a gemm over
the padding turns its result into NaN, where a zero-filled neighbour in a fresh allocation would
have hidden it); a store past the end changes a fence, which `launch_fenced` reports; an output
element the kernel never writes stays NaN (a bool one stays 0xAA, which `launch_fenced` reports). Used by tests/test_edges.py (`tilelang-cpu`) and
tests/gpu/test_gpu_quick.py (`tilelang`, `cuda`).
"""

from __future__ import annotations

import torch

FENCE = 4096  # elements on each side: more than a row of any tile-edge case; keeps 16-byte alignment


BOOL_POISON = 0xAA


def _poison(dtype: torch.dtype):
    if dtype == torch.bool:
        return BOOL_POISON
    return float("nan") if dtype.is_floating_point else torch.iinfo(dtype).min


def fenced(shape, dtype: torch.dtype, device, values: torch.Tensor | None = None):
    """(view, buffer): a contiguous tensor of `shape` in the middle of a poisoned buffer, holding
    `values` (else poison)."""
    numel = 1
    for n in shape:
        numel *= int(n)
    storage = torch.uint8 if dtype == torch.bool else dtype  # bool: the poison byte is no bool value
    buf = torch.full((FENCE + numel + FENCE,), _poison(dtype), dtype=storage, device=device)
    view = buf[FENCE:FENCE + numel].view(dtype).view(tuple(shape))
    if values is not None:
        view.copy_(values)
    return view, buf


def _fences_intact(view: torch.Tensor, buf: torch.Tensor) -> bool:
    for part in (buf[:FENCE].cpu(), buf[FENCE + view.numel():].cpu()):
        if view.dtype.is_floating_point:  # NaN != NaN
            if not bool(torch.isnan(part).all()):
                return False
        elif not bool((part.to(torch.int64) == _poison(view.dtype)).all()):
            return False
    return True


def launch_fenced(kernel, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run `kernel` (a tkc Kernel) on fenced copies of `inputs` (runtime scalars, ints, are
    passed as they are, after the tensors) into fenced, all-poison outputs (a `mut` output: a
    fenced copy of its old value, the last of `inputs`); returns the outputs.
    Raises AssertionError when the kernel wrote into any fence (a store past a tensor's end or
    before its start)."""
    from tkc.runtime import TORCH_DTYPES, check_indices, check_runtime

    from tkc.sparse import SparsePattern

    dims = kernel.bind_dims(inputs)
    artifact, jit = kernel.specialize(dims)
    env = {**artifact.module.env, **{k: v for k, v in dims.items() if k in kernel.dynamic}}  # dynamic dims: this call's
    args = artifact.module.func.body.args
    sampled = kernel._sampled(artifact.module)
    extras, fill = [], {}
    if sampled is not None:  # a sampled gemm (SDDMM): the runtime's launch data (B transposed, DispatchPlan)
        device = inputs[sampled[1]].device
        on_device = [t.to(device) if isinstance(t, SparsePattern) else t for t in inputs]
        plan, bt, fill = kernel._sampled_launch_data(sampled, on_device, jit)
        extras = [bt, *plan.launch_tensors(kernel.target)]
    values = [t for t in inputs if isinstance(t, int)]
    inputs = [x for t in inputs if not isinstance(t, int)
              for x in ((t.rows, t.cols) if isinstance(t, SparsePattern) else (t,))]
    zeroed = {op.operands[4].name for op in artifact.module.func.walk()  # a dense sampled output: the
              if op.name == "tile.sampled_gemm" and op.operands[4].type.rank == 2}  # runtime zero-fills it
    names = [p.name for p in kernel.inputs if p.dims is None]
    check_runtime(artifact.module, {**env, **dict(zip(names, values))})
    check_indices(artifact.module, {a.name: t for a, t in zip(args, inputs)})
    device = inputs[0].device
    mutable = artifact.module.func.attrs.get("mutable", [])
    old = iter(inputs[len(inputs) - len(mutable):])  # `mut` outputs' old values come last
    inputs = inputs[:len(inputs) - len(mutable)]
    ins = [fenced(t.shape, t.dtype, device, t) for t in inputs]
    outs = []
    for i in artifact.module.func.attrs["outputs"]:
        dtype = getattr(torch, TORCH_DTYPES[args[i].type.dtype])
        shape = args[i].type.concrete_shape(env)
        init = next(old) if i in mutable else torch.zeros(shape, dtype=dtype) if args[i].name in zeroed else None
        outs.append(fenced(shape, dtype, device, init))
    ins_extra = [fenced(t.shape, t.dtype, device, t) for t in extras]
    if fill.get("fill_bt") or fill.get("dot_panels"):  # the CUDA kernel's own transpose writes Bt, or no kernel
        # reads it (the dot products by column panels read B itself): start it as poison
        ins_extra[0] = fenced(extras[0].shape, extras[0].dtype, device)
    if sampled is None or plan.n_tc + plan.n_dot:  # an empty pattern launches nothing
        jit(*[v for v, _ in ins], *[v for v, _ in outs], *values, *[v for v, _ in ins_extra], **fill)
    ins += ins_extra
    if device.type == "cuda":
        torch.cuda.synchronize()
    for kind, pairs in (("input", ins), ("output", outs)):
        for n, (view, buf) in enumerate(pairs):
            assert _fences_intact(view, buf), f"the kernel wrote outside {kind} {n} (shape {tuple(view.shape)})"
            if kind == "output" and view.dtype == torch.bool:
                unwritten = int((view.view(torch.uint8) > 1).sum())
                assert unwritten == 0, f"the kernel left {unwritten} elements of bool output {n} unwritten"
    return [v for v, _ in outs]

"""L2 prefetch of a block's input reads before its programmatic-launch wait (CUDA backend).

A kernel launched programmatically (tkc.programmatic_launch) starts while its predecessor still
runs and waits in `tk_pdl_enter()` until that one has finished. Before the wait, each block asks
L2 for the input bytes it will read (`tk_prefetch_l2`: PTX `prefetch.global.L2`, one 128-byte
line per instruction, the block's threads sharing the lines), so a decode GEMV's weight rows
stream in while the previous kernel finishes. L2 is the GPU's point of coherence, so a line the
predecessor still writes is never read stale from it (the prefetch does not fill L1), and a
prefetch is only a hint: it changes no result.

The regions: for each copy from an input tensor, the box its offsets sweep over the enclosing
loops: per dim an offset over grid indices, dims and constants, plus at most one loop variable
in which it is affine with a step no larger than the tile's extent there (so the trips leave no
gaps); loop bounds of dims and constants. No runtime scalar read from memory and no index-tensor
element (both are read after the wait). A box whose size is not a compile-time constant, over
PER_COPY bytes or more than MAX_RUNS contiguous runs is left out (a GEMM block's operands over
all of K would thrash L2), and so is everything past PER_BLOCK bytes in total.
"""

from __future__ import annotations

from dataclasses import dataclass

from codegen.cuda_plan import times_text
from codegen.cuda_prelude import SIZES
from dsl import exprs
from dsl.ir import Op, Value

PER_COPY = 64 * 1024  # bytes
PER_BLOCK = 128 * 1024
MAX_RUNS = 64  # contiguous runs (one tk_prefetch_l2 call each) per box


@dataclass(frozen=True)
class Box:
    """What one block reads of `tensor`: per dim a start (an index expression) and an extent."""

    tensor: Value
    starts: tuple[exprs.Expr, ...]
    extents: tuple[int, ...]


def _replace(e: exprs.Expr, var: str, by: exprs.Expr) -> exprs.Expr:
    if isinstance(e, exprs.Sym):
        return by if e.name == var else e
    if isinstance(e, exprs.Bin):
        return exprs.Bin(e.op, _replace(e.a, var, by), _replace(e.b, var, by))
    if isinstance(e, exprs.Call):
        return exprs.Call(e.fn, tuple(_replace(a, var, by) for a in e.args))
    return e


def _slope(e: exprs.Expr, var: str, env: dict[str, int]) -> int | None:
    """The constant c >= 0 with e(var + 1) - e(var) = c wherever checked (two settings of the
    other names, three values of var), or None: not affine in `var` as far as seen."""
    others = sorted(exprs.names(e) - {var} - set(env))
    slopes = set()
    for base in (3, 11):
        point = {**env, **{n: base + 2 * i for i, n in enumerate(others)}}
        try:
            vals = [exprs.evaluate(e, {**point, var: v}) for v in (1, 2, 3)]
        except exprs.ExprError:
            return None
        if vals[2] - vals[1] != vals[1] - vals[0]:
            return None
        slopes.add(vals[1] - vals[0])
    return slopes.pop() if len(slopes) == 1 and min(slopes) >= 0 else None


def _box(op: Op, loops: dict, env: dict[str, int], refs: set[str]) -> Box | None:
    src, dst = op.operands
    steps = op.attrs.get("src_steps") or [1] * src.type.rank
    starts, extents = [], []
    for off, size, st, extent in zip(op.attrs["src_offsets"], dst.type.shape, steps, src.type.shape):
        e = exprs.parse(off)
        names = exprs.names(e)
        if exprs.loads(e) or names & refs:
            return None
        try:
            span = (exprs.evaluate(size, env) - 1) * st + 1
        except exprs.ExprError:
            return None
        swept = [n for n in names if n in loops]
        if len(swept) > 1:
            return None
        if swept:
            v = swept[0]
            lo, hi = loops[v]
            c = _slope(e, v, env)
            try:
                trips = exprs.evaluate(exprs.Bin("-", hi, lo), env)
            except exprs.ExprError:
                return None
            if c is None or c > span:
                return None
            e, span = _replace(e, v, lo), c * max(trips - 1, 0) + span
        e = exprs.substitute(e, env)  # constants folded: `0 * BK` is 0
        if e == exprs.Num(0) and isinstance(extent, exprs.Num):  # trips past the edge: a whole dim
            span = min(span, extent.value)
        starts.append(e)
        extents.append(span)
    return Box(src, tuple(starts), tuple(extents))


def boxes(func: Op, launch: Op, env: dict[str, int]) -> list[Box]:
    """The boxes of the launch's reads of input tensors that one block prefetches (see above)."""
    args = func.body.args
    outs = {args[i].name for i in func.attrs.get("outputs", [])}
    refs = set(func.attrs.get("scalar_refs", []))
    found: list[Box] = []
    total = 0

    def visit(ops: list[Op], loops: dict) -> None:
        nonlocal total
        for op in ops:
            if op.name == "tile.for":
                lo, hi = exprs.parse(op.attrs["lo"]), exprs.parse(op.attrs["hi"])
                if not (exprs.names(lo) | exprs.names(hi)) & (refs | set(loops)):
                    visit(op.body.ops, {**loops, op.attrs["var"]: (lo, hi)})
                continue
            if (op.name != "tile.copy" or op.regions or op.operands[0].type.space != "global"
                    or op.operands[0].name in outs):
                continue
            box = _box(op, loops, env, refs)
            if box is None or box in found:
                continue
            nbytes = SIZES[box.tensor.type.dtype]
            for n in box.extents:
                nbytes *= n
            if nbytes > PER_COPY or total + nbytes > PER_BLOCK or _runs(box) > MAX_RUNS:
                continue
            total += nbytes
            found.append(box)

    visit(launch.body.ops, {})
    return found


def _inner(box: Box) -> int:
    """The first dim from which the box is contiguous in memory: every later dim is read whole
    (start 0, extent the tensor's)."""
    k = len(box.extents) - 1
    while k > 0 and box.starts[k] == exprs.Num(0) and exprs.Num(box.extents[k]) == box.tensor.type.shape[k]:
        k -= 1
    return k


def _runs(box: Box) -> int:
    n = 1
    for e in box.extents[:_inner(box)]:
        n *= e
    return n


def emit(emitter, box: Box, d: int) -> None:
    """C statements at depth `d` that prefetch `box` into L2, clamped to the tensor: one
    `tk_prefetch_l2` per contiguous run, in loops over the dims before the contiguous part."""
    t = box.tensor
    dims = emitter.tensor_dims(t)
    strides, s = [], "1"
    for dim in reversed(dims):
        strides.insert(0, s)
        s = times_text(s, dim)
    k = _inner(box)
    terms = []
    for i in range(k):
        v, start = emitter._unique(f"pf{i}"), emitter.cexpr(exprs.to_str(box.starts[i]))
        emitter.line(d, f"for (int {v} = {start}; {v} < min({start} + {box.extents[i]}, {dims[i]}); ++{v})")
        d += 1
        terms.append(v if strides[i] == "1" else f"{v} * {strides[i]}")
    start = emitter.cexpr(exprs.to_str(box.starts[k]))
    terms.append(f"({start})" if strides[k] == "1" else f"({start}) * {strides[k]}")
    count = f"(min({start} + {box.extents[k]}, {dims[k]}) - ({start}))"
    if strides[k] != "1":
        count = f"{count} * {strides[k]}"
    emitter.line(d, f"tk_prefetch_l2({emitter.name(t)} + {' + '.join(terms)}, "
                    f"static_cast<long long>({count}) * {SIZES[t.type.dtype]});")

"""`check-coverage`: every element of every output is written by some block.

A grid or a loop whose bound rounds down (`for k in range(K / BK)` without `requires K % BK ==
0`, `grid (M / BM)`) leaves part of an output unwritten: the kernel then returns whatever the
allocation held, a mismatch only `--check` would find. This pass evaluates, at the kernel's dims
and constants, the region every store into a global output (`tile.copy` to a `global` tensor)
writes for every block of the grid (cluster ranks included) and every iteration of the loops
around it, clipped to the tensor (partial tiles are guarded), and marks it in a bitmap of the
output. An output with unwritten elements is a located error at its first store (at the kernel
when nothing stores to it), naming how many elements are missing and the first of them. A
kernel with dynamic dims (`dynamic M`) is checked at several values of them (`_envs`).

The check is skipped (the module passes) when the enumeration would exceed MAX_STORES store
executions, an output exceeds MAX_ELEMENTS elements, or a store's region or a loop bound depends
on a value known only when the kernel runs (a runtime scalar, an element of an index tensor); it
costs one offset evaluation per store execution. The module is returned unchanged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from dsl import exprs
from dsl.diagnostics import Diagnostic, TkError
from dsl.ir import Module, Op
from dsl.ops import dynamic_dims
from passes.options import options_from

MAX_STORES = 200_000  # store executions and loop trips enumerated per kernel before the check gives up
MAX_ELEMENTS = 1 << 28  # elements of one output's bitmap


class _TooLarge(Exception):
    pass


@dataclass(frozen=True)
class CheckCoveragePass:
    name = "check-coverage"

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "CheckCoveragePass":
        return cls(**options_from(cls, cls.name, options))

    def spec(self) -> str:
        return self.name

    def run(self, module: Module) -> Module:
        for env, note in _envs(module):
            diags = _check(module, env)
            if diags:
                for d in diags:
                    d.notes.extend([note] if note else [])
                raise TkError(diags)
        return module


def _envs(module: Module):
    """The dims to check at: the kernel's own, and with dynamic dims (`dynamic M`) at several
    values that its runtime `requires` admit (its `where` value, 1, 17, and one past the
    `where` value: a partial tile at the edge), each with a note naming the values."""
    dynamic = dynamic_dims(module.func)
    if not dynamic:
        yield module.env, ""
        return
    conds = [exprs.parse(op.attrs["cond"]) for op in module.func.body.ops
             if op.name == "tile.require" and op.attrs.get("runtime")]
    names = sorted(dynamic)
    candidates = [sorted({dynamic[n], 1, 17, dynamic[n] + 1}) for n in names]
    for values in itertools.islice(itertools.product(*candidates), 64):
        env = {**module.env, **dict(zip(names, values))}
        try:
            if not all(exprs.evaluate(c, env) for c in conds):
                continue
        except exprs.ExprError:  # a condition on a runtime scalar: it does not restrict the dims
            pass
        yield env, "at dynamic " + ", ".join(f"{n} = {v}" for n, v in zip(names, values))


def _check(module: Module, env: dict[str, int]) -> list[Diagnostic]:
    """The coverage diagnostics of `module` at `env` (empty when the outputs are covered or the
    check cannot decide)."""
    func = module.func
    args = func.body.args
    # `mut` outputs are updated in place: the elements a kernel does not store keep their values
    outs = [args[i] for i in func.attrs.get("outputs", []) if i not in func.attrs.get("mutable", [])]
    # a sampled gemm writes every entry of its pattern (its values output) or every entry and
    # 0 elsewhere (a dense output): which block writes what is decided by the pattern at run time
    sampled = {id(op.operands[4]) for op in func.walk() if op.name == "tile.sampled_gemm"}
    outs = [a for a in outs if id(a) not in sampled]
    shapes = {id(a): a.type.concrete_shape(env) for a in outs}
    if any(int(np.prod(s)) > MAX_ELEMENTS for s in shapes.values()):
        return []
    written = {id(a): np.zeros(shapes[id(a)], dtype=bool) for a in outs}
    stores: dict[int, list[Op]] = {id(a): [] for a in outs}
    budget = [MAX_STORES]
    try:
        for launch in func.body.ops:
            if launch.name == "tile.launch":
                _launch(launch, env, written, stores, budget)
    except (_TooLarge, exprs.ExprError):  # too many stores, or a runtime value decides
        return []
    diags = []
    for a in outs:
        missing = ~written[id(a)]
        count = int(missing.sum())
        if not count:
            continue
        first = [int(i) for i in np.argwhere(missing)[0]]
        total = missing.size
        static = [op for op in func.walk() if op.name == "tile.copy" and op.operands[1] is a]
        where = stores[id(a)][0].loc if stores[id(a)] else static[0].loc if static else func.loc
        if not static:
            notes = [f"nothing stores to it: write it, e.g. `{a.name}[...] = ...`"]
        elif not stores[id(a)]:  # its stores are in an empty grid or loop at these dims
            notes = ["no block runs its store at these dims: a grid or loop bound that rounds down to 0 "
                     "(e.g. `M / BM` with M < BM) runs nothing: use `cdiv(...)` for it, or state the "
                     "smallest value with `requires` (e.g. `requires M >= BM`)"]
        else:
            notes = [f"stored at {', '.join(str(op.loc) for op in stores[id(a)])}"] if len(stores[id(a)]) > 1 else []
            notes.append("a grid or loop bound that rounds down leaves the rest: use `cdiv(...)` for it, or "
                         "state the divisibility with `requires` (e.g. `requires K % BK == 0`)")
        diags.append(Diagnostic(where, f"output `{a.name}` is not fully written: {count} of {total} elements "
                                f"(the first at {first}) are stored by no block", notes))
    return diags


def _launch(op: Op, env: dict[str, int], written, stores, budget) -> None:
    if "tiles" in op.attrs:  # a grid over a sparse pattern's tiles: the pattern decides (skipped above)
        return
    extents = [exprs.evaluate(exprs.parse(g), env) for g in op.attrs["grid"]]
    csize = [exprs.evaluate(exprs.parse(c), env) for c in op.attrs.get("cluster", ["1"] * len(extents))]
    ranks = op.attrs.get("ranks", [])
    loops = {id(inner) for inner in op.walk() if inner.name == "tile.for" and _stores_into(inner, written)}
    for point in itertools.product(*(range(n) for n in extents)):
        budget[0] -= 1  # blocks count too
        if budget[0] < 0:
            raise _TooLarge
        scope = {**env, **dict(zip(op.attrs["vars"], point))}
        scope.update(zip(ranks, (p % c for p, c in zip(point, csize))))
        _region(op.body.ops, scope, written, stores, budget, loops)


def _stores_into(op: Op, written) -> bool:
    """Whether `op` (a loop) holds a store into one of the outputs being checked."""
    return any(inner.name == "tile.copy" and id(inner.operands[1]) in written for inner in op.walk())


def _region(ops: list[Op], env: dict[str, int], written, stores, budget, loops: set[int]) -> None:
    for op in ops:
        if op.name == "tile.for":
            if id(op) not in loops:  # no store inside (a reduction over K, say): nothing to enumerate
                continue
            lo = exprs.evaluate(exprs.parse(op.attrs["lo"]), env)
            hi = exprs.evaluate(exprs.parse(op.attrs["hi"]), env)
            for i in range(lo, hi):
                budget[0] -= 1  # every trip counts, stores or not: the enumeration stays bounded
                if budget[0] < 0:
                    raise _TooLarge
                _region(op.body.ops, {**env, op.attrs["var"]: i}, written, stores, budget, loops)
        elif op.name == "tile.copy" and op.operands[1].type.space == "global" and id(op.operands[1]) in written:
            budget[0] -= 1
            if budget[0] < 0:
                raise _TooLarge
            src, dst = op.operands
            if all(op is not seen for seen in stores[id(dst)]):
                stores[id(dst)].append(op)
            offsets = [exprs.evaluate(exprs.parse(o), env) for o in op.attrs["dst_offsets"]]
            sizes = src.type.concrete_shape(env)  # the verifier makes tile and tensor ranks equal
            bitmap = written[id(dst)]
            steps = op.attrs.get("dst_steps") or [1] * len(offsets)
            window = []
            for o, n, extent, st in zip(offsets, sizes, bitmap.shape, steps):
                lo = max(0, -(o // st) if o < 0 else 0)
                hi = min(n, -(-(extent - o) // st)) if extent > o else 0
                window.append(slice(o + lo * st, o + (hi - 1) * st + 1, st) if hi > lo else slice(0, 0))
            bitmap[tuple(window)] = True
        else:
            for region in op.regions:
                _region(region.ops, env, written, stores, budget, loops)

"""`defer-reduce`: move a loop's accumulated sum out of the loop (privatized accumulation).

`acc += sum(P, axis)` inside a loop reduces P on every trip: a cross-thread reduction (shuffles,
shared memory, barriers) per trip, when only the total is used. This pass rewrites

    for k { ...; tile.reduce(%P, %acc) {accumulate = true, fn = "sum", axis = a} }

into

    %part_P = tile.alloc() : frag<DT[shape of P]>      (DT: acc's dtype)
    tile.fill(%part_P) {value = 0.0}
    for k { ...; tile.elementwise(%part_P, %P, %part_P) {fn = "add"} }
    tile.reduce(%part_P, %acc) {accumulate = true, fn = "sum", axis = a}

so each thread adds its own elements of P into its own partial sums and the threads combine them
once, after the loop (the row-per-warp GEMV of seed 002 keeps such per-lane partial sums in
registers; llama2.c's matmul does the same with one row per thread). The result differs only
in the order of the float additions.

A reduce is rewritten when it sits directly in a `tile.for` body, accumulates (`fn = "sum"`),
`acc` is an f32 or f64 tile defined outside the loop and no other op in the loop touches it, P
is a `frag` or `local` tile, and P holds at most MAX_PER_THREAD elements per thread of the
launch (the partial sums must fit in registers). Inner loops are rewritten first, so a nest
defers to the innermost loop around the reduce and again outward when the rewritten reduce
qualifies there. Must run after `tile` (concrete shapes and thread counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import error
from dsl.ir import Module, Op, Region, Value, unique_name, value_names
from dsl.ops import AllocOp, ElementwiseOp, FillOp, ReduceOp
from passes.options import options_from

MAX_PER_THREAD = 64  # elements of the privatized partial sums per thread


@dataclass(frozen=True)
class DeferReducePass:
    name = "defer-reduce"

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "DeferReducePass":
        return cls(**options_from(cls, cls.name, options))

    def spec(self) -> str:
        return self.name

    def run(self, module: Module) -> Module:
        env = module.env
        if not module.func.attrs.get("tiled"):
            raise error(module.func.loc, "`defer-reduce` needs concrete tile shapes and thread counts",
                        "run `tile` before it (`tile,defer-reduce`, as the default pipeline does)")
        names = value_names(module)
        for launch in module.func.body.ops:
            if launch.name != "tile.launch":
                continue
            threads = exprs.evaluate(exprs.parse(launch.attrs["threads"]), env)
            self._region(launch.body, env, threads, names)
        return module

    def _region(self, region: Region, env, threads: int, names: set[str]) -> None:
        out: list[Op] = []
        for op in region.ops:
            for inner in op.regions:
                self._region(inner, env, threads, names)
            if op.name != "tile.for":
                out.append(op)
                continue
            before, after = self._defer(op, env, threads, names)
            out.extend(before)
            out.append(op)
            out.extend(after)
        region.ops[:] = out

    def _defer(self, loop: Op, env, threads: int, names: set[str]) -> tuple[list[Op], list[Op]]:
        """Rewrite the qualifying reduces of `loop`'s body; return the ops to put before and after it."""
        before: list[Op] = []
        after: list[Op] = []
        local = {id(op.result) for op in loop.body.ops if op.name == "tile.alloc"}
        for i, op in enumerate(loop.body.ops):
            if not self._qualifies(op, loop, local, env, threads):
                continue
            src, acc = op.operands
            part = Value(unique_name(f"part_{src.name}", names), src.type.with_space("frag").with_dtype(acc.type.dtype))
            before.append(AllocOp(results=[part], loc=op.loc))
            before.append(FillOp(operands=[part], attrs={"value": 0.0}, loc=op.loc))
            loop.body.ops[i] = ElementwiseOp(operands=[part, src, part], attrs={"fn": "add"}, loc=op.loc)
            after.append(ReduceOp(operands=[part, acc], attrs=dict(op.attrs), loc=op.loc))
        return before, after

    @staticmethod
    def _qualifies(op: Op, loop: Op, local: set[int], env, threads: int) -> bool:
        if op.name != "tile.reduce" or not op.attrs.get("accumulate") or op.attrs.get("fn") != "sum":
            return False
        src, acc = op.operands
        if acc.type.dtype not in ("f32", "f64") or id(acc) in local:
            return False
        if src.type.space not in ("frag", "local"):
            return False
        try:
            n = math.prod(src.type.concrete_shape(env))
        except exprs.ExprError:
            return False
        if n > MAX_PER_THREAD * threads:
            return False
        users = [o for o in loop.walk() if o is not loop and any(v is acc for v in o.operands)]
        return users == [op]


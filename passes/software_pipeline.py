"""`software-pipeline`: multi-buffer the global loads of pipelined loops through shared memory.

For each `tile.for` of kind `pipelined` the pass binds the stage count (option `stages`
overrides the loop's own; it is clamped to the trip count) and rewrites every global load in
the loop body so that it can be issued `stages - 1` iterations ahead:

* a load into a register tile (`frag`/`local`) becomes an async copy into a new shared staging
  buffer with `stages` copies, followed by a shared->register copy;
* a load into a shared tile gets its buffer hoisted out of the loop with `stages` copies and
  its copy marked `async`.

Each iteration still overwrites the whole staged tile before reading it, so the meaning is
unchanged (checked by interpreting before and after). Backends realize the stages as TileLang
`T.Pipelined(n, num_stages=stages)` or as multi-buffered `cp.async` in CUDA. Must run after `tile`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import Loc, error
from dsl.ir import Module, Op, Region, Value, unique_name, value_names
from dsl.ops import AllocOp, CopyOp
from passes.options import options_from


@dataclass(frozen=True)
class SoftwarePipelinePass:
    name = "software-pipeline"
    stages: int = 0  # 0: keep each loop's own stage count

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "SoftwarePipelinePass":
        made = cls(**options_from(cls, cls.name, options))
        if "stages" in options and made.stages < 1:  # (0 is the default's "each loop's own count", not an option)
            raise error(Loc("<pipeline>", 1, 1), f"`software-pipeline{{stages=...}}` takes at least 1 stage, got "
                        f"{made.stages}", "leave `stages` out to keep each loop's own stage count")
        return made

    def spec(self) -> str:
        return f"{self.name}{{stages={self.stages}}}" if self.stages else self.name

    def run(self, module: Module) -> Module:
        env = module.env
        names = value_names(module)
        for op in module.walk():
            for region in op.regions:
                self._region(region, env, names)
        return module

    def _region(self, region: Region, env: dict[str, int], names: set[str]) -> None:
        out: list[Op] = []
        for op in region.ops:
            if op.name == "tile.for" and op.attrs.get("kind") == "pipelined" and not op.attrs.get("pipelined"):
                out.extend(self._pipeline(op, env, names))
            out.append(op)
        region.ops[:] = out

    def _pipeline(self, loop: Op, env: dict[str, int], names: set[str]) -> list[Op]:
        """Rewrite `loop` in place; return the allocations hoisted in front of it."""
        try:
            stages = self.stages or exprs.evaluate(exprs.parse(loop.attrs["stages"]), env)
            trip = exprs.evaluate(exprs.parse(f"{loop.attrs['hi']} - {loop.attrs['lo']}"), env)
        except exprs.ExprError:
            raise error(loop.loc, "`software-pipeline` needs concrete stage counts and trip counts",
                        "run `tile` first, and keep pipelined loop bounds free of other loop indices") from None
        if stages < 1:
            raise error(loop.loc, f"a pipelined loop needs at least 1 stage, got {stages}")
        stages = max(1, min(stages, trip))
        loop.attrs["stages"] = str(stages)
        loop.attrs["pipelined"] = True
        local_allocs = {id(op.result): op for op in loop.body.ops if op.name == "tile.alloc"}
        hoisted: list[Op] = []
        body: list[Op] = []
        for op in loop.body.ops:
            if op.name == "tile.alloc" and any(h is op for h in hoisted):
                continue
            src = op.operands[0] if op.name == "tile.copy" else None
            if src is None or src.type.space != "global":
                body.append(op)
                continue
            dst = op.operands[1]
            if dst.type.space == "shared" and id(dst) in local_allocs:
                alloc = local_allocs[id(dst)]
                alloc.attrs["stages"] = stages
                hoisted.append(alloc)
                body = [o for o in body if o is not alloc]
                op.attrs["async"] = True
                body.append(op)
                continue
            if dst.type.space == "shared":
                body.append(op)
                continue
            staged = Value(unique_name(f"{dst.name}_smem", names),
                           dst.type.with_space("shared").with_dtype(src.type.dtype))
            hoisted.append(AllocOp(results=[staged], attrs={"stages": stages}, loc=op.loc))
            body.append(CopyOp(operands=[src, staged], attrs={**op.attrs, "async": True}, loc=op.loc))
            body.append(CopyOp(operands=[staged, dst], loc=op.loc))
        loop.body.ops[:] = body
        return hoisted


"""`fold-copies`: take register round trips out of loads and reshapes.

`reshape` reads a shared tile, so the front end stages its operand through shared memory:
`reshape(A[...], ...)` loads A's window into a register tile and copies that into a shared
one, and a reshape that only drops or adds dims of size 1 (`reshape(sum(T, 1), f32[BM, R])` of a
[BM, 1, R] sum) copies a register tile into shared memory to read it straight back. MiSS's shard
sum of U shards per trip (examples/miss_split.tk) did both on every trip. This pass rewrites

* a global load into a register tile whose only use is a copy into a shared tile of the same
  dtype, right after it,

      tile.copy(%G, %f) {src_offsets = ...}        tile.copy(%G, %Y) {src_offsets = ...}
      tile.copy(%f, %Y)                      into

  (the load lands in shared memory; `software-pipeline` then stages and issues it asynchronously
  like any shared load);
* with `backend=tilelang`, a copy of a register tile into a shared tile whose only use is a
  reshape right after it that only inserts or removes dims of size 1,

      tile.copy(%f, %sh)                           tile.reshape(%f, %d)
      tile.reshape(%sh, %d)                  into

  (a relabeling of the same elements, which each thread holds already; the TileLang backend
  emits it as an index map in the reshape's readers where it can, codegen/tilelang.py `views`).

Values and rounding are unchanged: the copies removed convert nothing (same dtype). Must run after
`tile` and before `software-pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl.diagnostics import error
from dsl.ir import Module, Op, Region
from dsl.ops import CopyOp, ReshapeOp
from passes.options import PIPELINE_LOC, options_from

REGISTER = ("frag", "local")


def squeezed(shape) -> list:
    """`shape` without its dims of size 1."""
    return [n for n in shape if n != 1]


@dataclass(frozen=True)
class FoldCopiesPass:
    name = "fold-copies"
    backend: str = "tilelang"  # `tilelang` also folds unit-dim reshapes of register tiles; `cuda` does not

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "FoldCopiesPass":
        p = cls(**options_from(cls, cls.name, options))
        if p.backend not in ("tilelang", "cuda"):
            raise error(PIPELINE_LOC, f"`backend` of `fold-copies` must be `tilelang` or `cuda`, got `{p.backend}`")
        return p

    def spec(self) -> str:
        return f"{self.name}{{backend={self.backend}}}"

    def run(self, module: Module) -> Module:
        if not module.func.attrs.get("tiled"):
            raise error(module.func.loc, "`fold-copies` needs concrete tile shapes",
                        "run `tile` before it, as the default pipeline does")
        for launch in module.func.body.ops:
            if launch.name != "tile.launch":
                continue
            uses: dict[int, int] = {}
            for op in launch.walk():
                for v in op.operands:
                    uses[id(v)] = uses.get(id(v), 0) + 1
            self._regions(launch, uses, module.env)
        return module

    def _regions(self, op: Op, uses: dict[int, int], env: dict[str, int]) -> None:
        for region in op.regions:
            self._region(region, uses, env)
            for child in region.ops:
                self._regions(child, uses, env)

    def _region(self, region: Region, uses: dict[int, int], env: dict[str, int]) -> None:
        ops = region.ops
        dead: set[int] = set()  # ids of the values whose allocs go
        k = 0
        while k < len(ops):
            first = ops[k]
            nxt = next((j for j in range(k + 1, len(ops)) if ops[j].name != "tile.alloc"), None)
            if nxt is None:
                break
            second = ops[nxt]
            folded = (self._load_into_shared(first, second, uses, env)
                      or self._unit_reshape(first, second, uses, env))
            if folded is None:
                k += 1
                continue
            via, new = folded
            dead.add(id(via))
            ops[nxt] = new  # where the second op was: after the allocs between them
            del ops[k]
        if dead:
            region.ops[:] = [o for o in ops if not (o.name == "tile.alloc" and id(o.result) in dead)]

    @staticmethod
    def _load_into_shared(first: Op, second: Op, uses: dict[int, int], env: dict[str, int]):
        if first.name != "tile.copy" or second.name != "tile.copy":
            return None
        g, f = first.operands
        f2, y = second.operands
        if (f2 is not f or g.type.space != "global" or f.type.space not in REGISTER or y.type.space != "shared"
                or f.type.dtype != y.type.dtype or uses.get(id(f)) != 2
                or f.type.concrete_shape(env) != y.type.concrete_shape(env)):
            return None
        return f, CopyOp(operands=[g, y], attrs=dict(first.attrs), loc=first.loc)

    def _unit_reshape(self, first: Op, second: Op, uses: dict[int, int], env: dict[str, int]):
        if self.backend != "tilelang" or first.name != "tile.copy" or second.name != "tile.reshape":
            return None
        f, sh = first.operands
        sh2, d = second.operands
        if (sh2 is not sh or f.type.space not in REGISTER or sh.type.space != "shared" or d.type.space not in REGISTER
                or f.type.dtype != sh.type.dtype or uses.get(id(sh)) != 2 or first.attrs
                or squeezed(f.type.concrete_shape(env)) != squeezed(d.type.concrete_shape(env))):
            return None
        return sh, ReshapeOp(operands=[f, d], attrs=dict(second.attrs), loc=second.loc)


"""`fuse-int8-dot`: int8 dot products as one op for the CUDA backend's `__dp4a` (target `cuda`).

A GEMV with int8 weights and int8 activations (llama2.c's runq.c: each group's products summed
as integers, then scaled) is written `q = sum(cast(W, i32) * cast(X, i32), last)`, which lowers to

    tile.copy(%W8, %W32)                          (i8 -> i32)
    tile.copy(%X8, %X32)                          (i8 -> i32; X may broadcast against W)
    tile.elementwise(%W32, %X32, %P) {fn = "mul"}
    tile.reduce(%P, %q) {axis = last, fn = "sum"}

and would convert every byte to i32 (through f32: the language defines i32 arithmetic in f32)
before a multiply and an add per element. This pass rewrites the four ops into

    tile.dot_reduce(%W8, %X8, %q) {axis = last}

which the CUDA backend emits as one `__dp4a` per four bytes (four products and their sum in one
instruction, sm_61 and later), folded by the threads that hold W8's chunks in registers.

The rewrite keeps the program's values: it applies only where the integers are exact in f32, a
reduced length L with L * 128 * 128 <= 2^24 (every partial sum of i8 products is then an integer
of at most 2^24), so the f32 arithmetic of the language and the integer arithmetic of `__dp4a`
give the same sums. It also needs: the reduce without `accumulate`, over the last axis of a
`frag`/`local` tile; the four ops in one op list in that order; the i32 tiles used by nothing
else; W8 a `frag`/`local` tile whose last dim is a multiple of 4 that is only written by plain
copies from global tensors (so the backend keeps it in registers) and that the backend's
register reduction takes (passes/cuda_placement.register_reduce); X8 an i8 tile. Anything else
stays as written. Must run after `tile` (concrete shapes and thread counts).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import error
from dsl.ir import Module, Op, Region, Value
from dsl.ops import DotReduceOp
from passes.cuda_placement import chunk_width, register_reduce, wide_shapes
from passes.options import options_from

EXACT = 2 ** 24  # integers up to this magnitude are exact in f32


@dataclass(frozen=True)
class FuseInt8DotPass:
    name = "fuse-int8-dot"

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "FuseInt8DotPass":
        return cls(**options_from(cls, cls.name, options))

    def spec(self) -> str:
        return self.name

    def run(self, module: Module) -> Module:
        if not module.func.attrs.get("tiled"):
            raise error(module.func.loc, "`fuse-int8-dot` needs concrete tile shapes and thread counts",
                        "run `tile` before it (as the default pipeline does)")
        env = module.env
        for launch in module.func.body.ops:
            if launch.name != "tile.launch":
                continue
            threads = exprs.evaluate(exprs.parse(launch.attrs["threads"]), env)
            wide = wide_shapes(launch)
            uses: dict[int, list[Op]] = {}
            for op in launch.walk():
                for v in op.operands:
                    uses.setdefault(id(v), []).append(op)
            self._region(launch.body, threads, wide, uses)
        return module

    def _region(self, region: Region, threads: int, wide, uses) -> None:
        for op in region.ops:
            for inner in op.regions:
                self._region(inner, threads, wide, uses)
        for reduce in [op for op in region.ops if op.name == "tile.reduce"]:
            chain = self._chain(region.ops, reduce, threads, wide, uses)
            if chain is None:
                continue
            w8, x8, dead_ops, dead_values = chain
            q = reduce.operands[1]
            fused = DotReduceOp(operands=[w8, x8, q], attrs={"axis": reduce.attrs["axis"]}, loc=reduce.loc)
            region.ops[region.ops.index(reduce)] = fused
            for v in {id(w8): w8, id(x8): x8, id(q): q}.values():
                uses[id(v)] = [u for u in uses[id(v)] if all(u is not d for d in dead_ops)] + [fused]
            region.ops[:] = [op for op in region.ops if all(op is not d for d in dead_ops) and
                             not (op.name == "tile.alloc" and any(op.result is v for v in dead_values))]

    @staticmethod
    def _chain(ops: list[Op], reduce: Op, threads: int, wide, uses):
        """(W8, X8, the ops to drop, the values whose allocs to drop) of the chain ending at
        `reduce`, or None when it does not qualify (module docstring)."""
        if reduce.attrs.get("fn") != "sum" or reduce.attrs.get("accumulate"):
            return None
        p, q = reduce.operands
        shape = p.type.concrete_shape({})
        if (p.type.dtype != "i32" or q.type.dtype != "i32" or p.type.space not in ("frag", "local")
                or reduce.attrs["axis"] != len(shape) - 1):
            return None
        if shape[-1] * 128 * 128 > EXACT or shape[-1] % 4:
            return None
        at = {id(op): i for i, op in enumerate(ops)}
        mul = [u for u in uses.get(id(p), []) if u is not reduce]
        if len(mul) != 1 or mul[0].name != "tile.elementwise" or mul[0].attrs.get("fn") != "mul" or \
                "scalar" in mul[0].attrs or mul[0].operands[-1] is not p or id(mul[0]) not in at:
            return None
        mul = mul[0]
        if not at[id(mul)] < at[id(reduce)]:
            return None
        sources = []
        for v in mul.operands[:2]:
            if v is p or v.type.dtype != "i32" or v.type.space not in ("frag", "local"):
                return None
            users = uses.get(id(v), [])
            defs = [u for u in users if u is not mul]
            if len(defs) != 1 or defs[0].name != "tile.copy" or defs[0].attrs or \
                    defs[0].operands[1] is not v or id(defs[0]) not in at or not at[id(defs[0])] < at[id(mul)]:
                return None
            src = defs[0].operands[0]
            if src.type.dtype != "i8" or src.type.space == "global" or \
                    src.type.concrete_shape({}) != v.type.concrete_shape({}):
                return None
            sources.append((src, v, defs[0]))
        same = [s for s in sources if s[1].type.concrete_shape({}) == shape]
        if not same:
            return None
        w8, w32, w_copy = same[0]
        x8, x32, x_copy = sources[1] if sources[0] is same[0] else sources[0]
        if w8.type.space not in ("frag", "local"):
            return None
        for u in uses.get(id(w8), []):  # only written by plain loads from global tensors, read by the chain
            if u is w_copy or (u is x_copy and x8 is w8):
                continue
            if u.name != "tile.copy" or u.operands[1] is not w8 or u.operands[0].type.space != "global" or \
                    u.attrs.get("async"):
                return None
        width = chunk_width(shape, tuple(shape) in wide)
        if width % 4 or register_reduce(shape, len(shape) - 1, threads, width) is None:
            return None
        return w8, x8, [w_copy, x_copy, mul, reduce], [w32, x32, p]

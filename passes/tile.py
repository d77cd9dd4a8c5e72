"""`tile`: bind tile sizes (schedule constants) and problem dims, and mark partial tiles.

After this pass every type and index expression is concrete except for grid and loop indices:
`frag<f32[BM, R]>` becomes `frag<f32[64, 64]>`, `"m * BM"` becomes `"m * 64"`. Options override
schedule constants (`tile{BM=32,BN=64}`); the kernel's `requires` conditions are re-checked with
the new values (a tile size that must divide a dim and does not is a located error) and then
dropped. The function is marked `tiled`: a second `tile` is a no-op, and an error when it
tries to bind sizes again. Each global
access gets `checked`: per dim, whether some block's tile reaches past the tensor (a partial tile
at the edge, or the zero-padded last shard when K % R != 0); backends guard only those dims.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dsl import exprs
from dsl.diagnostics import error
from dsl.ir import Module, Op
from dsl.ops import EXPR_ATTRS, scalar_ranges
from passes.options import PIPELINE_LOC


@dataclass(frozen=True)
class TilePass:
    name = "tile"
    bindings: tuple[tuple[str, int], ...] = field(default=())

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "TilePass":
        out = []
        for key, value in options.items():
            try:
                out.append((key, int(value)))
            except ValueError:
                raise error(PIPELINE_LOC, f"tile size `{key}` must be an integer, got `{value}`") from None
        return cls(tuple(out))

    def spec(self) -> str:
        body = ",".join(f"{k}={v}" for k, v in self.bindings)
        return f"{self.name}{{{body}}}" if body else self.name

    def run(self, module: Module) -> Module:
        func = module.func
        if func.attrs.get("tiled"):
            if self.bindings:
                raise error(func.loc, "`tile` already ran on this module: its tile sizes are bound",
                            "pass tile sizes to the first `tile` in the pipeline (or with `-D`)")
            return module
        consts = dict(func.attrs.get("consts", {}))
        for key, value in self.bindings:
            if key not in consts:
                raise error(func.loc, f"`tile{{{key}=...}}`: `{key}` is not a schedule constant of "
                            f"`{func.attrs.get('sym_name')}`",
                            f"schedule constants: {', '.join(sorted(consts)) or 'none'}")
            if value <= 0:
                raise error(func.loc, f"tile size `{key}` must be positive, got {value}")
            if key in func.attrs.get("static", []):
                raise error(func.loc, f"`{key}` selects code in a static `if`, which lowering already resolved",
                            f"set it before lowering: `-D {key}={value}`")
            consts[key] = value
        func.attrs["consts"] = consts
        func.attrs["tiled"] = True
        env = module.env
        ranges: dict[str, tuple[int, int]] = scalar_ranges(func, env)
        for op in func.body.ops:
            if op.name == "tile.require" and op.attrs.get("runtime"):  # checked at every call
                op.attrs["cond"] = exprs.to_str(exprs.substitute(exprs.parse(op.attrs["cond"]), env))
            elif op.name == "tile.require":
                cond = exprs.parse(op.attrs["cond"])
                if not exprs.evaluate(cond, env):
                    vals = ", ".join(f"{n} = {env[n]}" for n in sorted(exprs.names(cond)))
                    raise error(op.loc, f"requirement `{op.attrs['cond']}` does not hold", f"with {vals}",
                                "pick tile sizes that divide the problem dims (e.g. `-D BM=...`)")
        # Checked with concrete values: nothing later depends on them.
        func.body.ops[:] = [op for op in func.body.ops if op.name != "tile.require" or op.attrs.get("runtime")]
        for arg in func.body.args:
            arg.type = arg.type.substitute(env)
        for op in func.body.ops:
            _bind(op, env, ranges)
        return module


def _bind(op: Op, env: dict[str, int], ranges: dict[str, tuple[int, int]]) -> None:
    """Substitute `env` into `op` (and nested ops); `ranges` bounds the indices in scope. An
    expression that cannot be evaluated (a division by a constant that is 0) is a located error."""
    try:
        _bind_one(op, env, ranges)
    except exprs.ExprError as exc:
        raise error(op.loc, f"cannot evaluate this statement's index expressions with the kernel's values: {exc}",
                    "a dim or schedule constant it divides by is 0; give it another value (`-D`)") from None


def _bind_one(op: Op, env: dict[str, int], ranges: dict[str, tuple[int, int]]) -> None:
    for key in EXPR_ATTRS:
        value = op.attrs.get(key)
        if isinstance(value, list):
            op.attrs[key] = [exprs.to_str(exprs.substitute(exprs.parse(v), env)) for v in value]
        elif isinstance(value, str):
            op.attrs[key] = exprs.to_str(exprs.substitute(exprs.parse(value), env))
    for r in op.results:
        r.type = r.type.substitute(env)
        try:
            extents = [exprs.evaluate(d, {}) for d in r.type.shape]
        except exprs.ExprError:  # lowering rejects tile extents over dynamic dims; IR text may not
            raise error(op.loc, f"tile `{r}` has an extent known only at run time: {r.type}",
                        "tile extents are static dims and constants") from None
        if any(n <= 0 for n in extents):
            raise error(op.loc, f"tile `{r}` has a non-positive extent: {r.type}")
    inner = dict(ranges)
    if op.name == "tile.launch":
        for var, extent in zip(op.attrs["vars"], op.attrs["grid"]):
            lo, hi = exprs.bounds(exprs.parse(extent), ranges)  # a dynamic dim's extent: a range
            if hi <= 0:
                raise error(op.loc, f"grid extent `{extent}` for `{var}` is {hi}; it must be positive")
            inner[var] = (0, hi - 1)
        for rank, extent in zip(op.attrs.get("ranks", []), op.attrs.get("cluster", [])):
            inner[rank] = (0, exprs.evaluate(exprs.parse(extent), {}) - 1)
    if op.name == "tile.for":
        lo = exprs.bounds(exprs.parse(op.attrs["lo"]), ranges)[0]
        hi = exprs.bounds(exprs.parse(op.attrs["hi"]), ranges)[1]
        inner[op.attrs["var"]] = (lo, max(lo, hi - 1))
    if op.name == "tile.copy":
        _mark_partial(op, ranges)
    for region in op.regions:
        for child in region.ops:
            _bind(child, env, inner)


def _mark_partial(op: Op, ranges: dict[str, tuple[int, int]]) -> None:
    src, dst = op.operands
    if src.type.space == "global":
        tensor, tile, key = src, dst, "src_offsets"
    elif dst.type.space == "global":
        tensor, tile, key = dst, src, "dst_offsets"
    else:
        return
    checked = []
    steps = op.attrs.get(key.replace("offsets", "steps")) or [1] * tensor.type.rank
    for off, size, dim, step in zip(op.attrs[key], tile.type.shape, tensor.type.shape, steps):
        lo, hi = exprs.bounds(exprs.parse(off), ranges)
        n, extent = exprs.evaluate(size, {}), exprs.bounds(dim, ranges)[0]  # a dynamic dim: its least value
        checked.append(lo < 0 or hi + (n - 1) * step + 1 > extent)
    op.attrs["checked"] = checked

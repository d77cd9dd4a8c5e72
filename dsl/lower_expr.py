"""Lowering of .tk expressions: integer index expressions and tile-valued expressions.

Mixed into the statement lowerer of dsl/lower.py; each method emits IR ops into the current
region and returns an index expression or the tile buffer holding the value. Errors raise
:class:`dsl.diagnostics.TkError` at the expression's location.
"""

from __future__ import annotations

import math

from dsl import ast as A
from dsl import exprs
from dsl import ops as O
from dsl.diagnostics import Loc, error
from dsl.ir import Value
from dsl.types import DTYPES, FLOAT_DTYPES, TileType, promote

UNARY_CALLS = {f: f for f in ("exp", "exp2", "log", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "abs",
                                "sqrt", "rsqrt")}
BIN_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
CMP_OPS = {sym: fn for fn, sym in O.COMPARE.items()}  # `<` -> lt, ...
# a comparison with the number on the left, turned around: `0.0 < x` is `x > 0.0`
CMP_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_BOOL_HINT = "a bool tile takes `where(c, a, b)`, `==`/`!=` and `cast(c, f32)` (0 or 1)"
SPACE_CALLS = ("shared", "frag", "local")
# Reductions along an axis (the reduced dim is kept with extent 1), named as in torch.
REDUCE_CALLS = {"sum": "sum", "amax": "max", "amin": "min"}


def _number(e: A.Expr, env: dict[str, int] | None = None, memo: dict | None = None) -> float | None:
    """The value of a number in a tile expression, None if `e` is not one: a literal, a dim or
    schedule constant of `env`, or `+ - * / %` and unary `-` over those (`ss / N`, `1.0 / BN`).
    Integers combine as in index expressions (`/` is floor division, `N / 2` is 3 for N = 7);
    once a float literal takes part, `/` is true division (`1.0 / N`). `memo` (node id -> value)
    keeps repeated questions about one expression tree linear in its size."""
    v = _fold(e, env or {}, {} if memo is None else memo)
    return None if v is None else float(v)


def _fold(e: A.Expr, env: dict[str, int], memo: dict) -> int | float | None:
    key = id(e)
    if key not in memo:
        memo[key] = _fold_node(e, env, memo)
    return memo[key]


def _fold_node(e: A.Expr, env: dict[str, int], memo: dict) -> int | float | None:
    if isinstance(e, A.IntLit):
        return int(e.value)
    if isinstance(e, A.FloatLit):
        return float(e.value)
    if isinstance(e, A.Name):
        return env.get(e.id)
    if isinstance(e, A.Neg):
        v = _fold(e.operand, env, memo)
        return None if v is None else -v
    if isinstance(e, A.BinOp) and e.op in ("+", "-", "*", "/", "%"):
        a, b = _fold(e.lhs, env, memo), _fold(e.rhs, env, memo)
        if a is None or b is None:
            return None
        if e.op in ("/", "%") and b == 0:
            raise error(e.loc, f"division by zero in `{e.op}`")
        if e.op == "/":
            return a // b if isinstance(a, int) and isinstance(b, int) else a / b
        return {"+": a + b, "-": a - b, "*": a * b, "%": a % b if isinstance(a, int) and isinstance(b, int)
                else None}[e.op]
    if isinstance(e, A.Call) and e.fn in ("cdiv", "min", "max") and len(e.args) == 2:
        a, b = _fold(e.args[0], env, memo), _fold(e.args[1], env, memo)
        if not (isinstance(a, int) and isinstance(b, int)) or (e.fn == "cdiv" and b == 0):
            return None
        return -(-a // b) if e.fn == "cdiv" else min(a, b) if e.fn == "min" else max(a, b)
    return None


def _zero_divisor(e: exprs.Expr, env: dict[str, int]) -> str | None:
    """The operator (`/`, `%`, `cdiv`) of a division in `e` whose divisor is 0 under `env`."""
    if isinstance(e, exprs.Bin) or (isinstance(e, exprs.Call) and e.fn == "cdiv"):
        a, b = (e.a, e.b) if isinstance(e, exprs.Bin) else e.args
        op = e.op if isinstance(e, exprs.Bin) else "cdiv"
        if op in ("/", "%", "cdiv") and exprs.names(b) <= set(env) and exprs.evaluate(b, env) == 0:
            return op
        return _zero_divisor(a, env) or _zero_divisor(b, env)
    if isinstance(e, (exprs.Call, exprs.Load)):
        return next(filter(None, (_zero_divisor(x, env) for x in e.args)), None)
    return None


def fold_int(e: A.Expr, env: dict[str, int]) -> int | None:
    """The integer value of `e` over `env` (index-expression rules), None if it has none."""
    v = _fold(e, env, {})
    return v if isinstance(v, int) else None


DYNAMIC_NOTE = ("dynamic dims may set grid extents, loop bounds, slice offsets and numbers in tile expressions; "
                "tile extents, `if`, threads and stages need static dims and constants (or drop it from `dynamic`)")


class ExprLowerer:
    """Expression lowering; the host class provides env, lookup, temp, emit, tile_var, scopes,
    number_memo."""

    # ---- index expressions ------------------------------------------------------------------
    def index(self, e: A.Expr, allow_vars: bool = True) -> exprs.Expr:
        """An integer expression over dims, constants and (if allowed) grid/loop indices."""
        if isinstance(e, A.IntLit):
            return exprs.Num(e.value)
        if isinstance(e, A.Name):
            v = self.lookup(e.id)
            if v is None:
                raise error(e.loc, f"unknown name `{e.id}`", self.known_names())
            if isinstance(v, Value):
                raise error(e.loc, f"`{e.id}` is a tile, not an integer", "index expressions use dims, constants and grid/loop indices")
            if not allow_vars and e.id not in self.env:
                if e.id in self.dynamic:
                    if self.allow_dynamic:  # a grid extent (`cdiv(M, BM)`): computed at launch
                        return exprs.Sym(e.id)
                    raise error(e.loc, f"`{e.id}` is a dynamic dim: its value is known only when the kernel runs, "
                                "and this needs a value at compile time", DYNAMIC_NOTE)
                if e.id in self.scalars:
                    raise error(e.loc, f"`{e.id}` is a runtime scalar: its value is known only when the kernel runs, "
                                "and this needs a value at compile time",
                                "runtime scalars may set slice offsets, loop bounds and numbers in tile expressions; "
                                "grids, tile extents, `if` and `pipelined` stages use dims and constants")
                raise error(e.loc, f"`{e.id}` is a grid or loop index; only dims and constants are allowed here")
            return exprs.Sym(e.id)
        if isinstance(e, A.Index):
            return self.index_load(e, allow_vars)
        if isinstance(e, A.Neg):
            return exprs.substitute(exprs.Bin("-", exprs.Num(0), self.index(e.operand, allow_vars)), {})
        if isinstance(e, A.BinOp) and e.op != "@":
            return exprs.Bin(e.op, self.index(e.lhs, allow_vars), self.index(e.rhs, allow_vars))
        if isinstance(e, A.Call) and e.fn in exprs.FUNCS:
            if len(e.args) != exprs.FUNCS[e.fn]:
                raise error(e.loc, f"`{e.fn}` takes {exprs.FUNCS[e.fn]} arguments, got {len(e.args)}")
            return exprs.Call(e.fn, tuple(self.index(a, allow_vars) for a in e.args))
        raise error(e.loc, "expected an integer expression", "index expressions use + - * / % cdiv min max")

    def index_load(self, e: A.Index, allow_vars: bool) -> exprs.Expr:
        """`ids[b]` in an index expression: one element of an integer global tensor, read when
        the kernel runs (a gather: `E[ids[b] : +1, :]`)."""
        t = self.lookup(e.base)
        if not isinstance(t, Value) or t.type.space != "global":
            raise error(e.loc, f"`{e.base}` is not a global tensor", "an index expression reads elements of integer tensors: `ids[b]`")
        if t.type.dtype not in ("i32", "i8"):
            raise error(e.loc, f"`{e.base}` is {t.type.dtype}; an index must be an integer tensor (i32)",
                        f"declare it `{e.base}: i32[...]`")
        if not allow_vars:
            raise error(e.loc, f"`{e.base}[...]` is read when the kernel runs, and this needs a value at compile time",
                        "a tensor element may set slice offsets and loop bounds")
        if len(e.subs) != t.type.rank or any(s.kind != "one" for s in e.subs):
            raise error(e.loc, f"`{e.base}` has rank {t.type.rank}: index it with {t.type.rank} single indices "
                        f"(`{e.base}[{', '.join('i' * 1 for _ in range(t.type.rank))}]`), not slices")
        return exprs.Load(t.name, tuple(self.index(s.lo, allow_vars) for s in e.subs))

    def known_names(self) -> str:
        names = set(self.env)
        for scope in self.scopes:
            names |= set(scope)
        return "names in scope: " + ", ".join(sorted(names))

    def size(self, e: A.Expr) -> exprs.Expr:
        """A tile extent: constant once dims and constants are bound, and positive."""
        size = self.index(e, allow_vars=False)
        n = exprs.evaluate(size, self.env)
        if n <= 0:
            raise error(e.loc, f"tile extent `{exprs.to_str(size)}` is {n}; it must be positive")
        return size

    def slices(self, tensor: Value, subs: list[A.Slice], loc: Loc):
        """(offsets, sizes, steps) of a slice of a global tensor: index expressions, tile extents
        and the step of each dim (1, or the `step` of `lo : hi : step`, a positive number known
        at compile time)."""
        if len(subs) != tensor.type.rank:
            raise error(loc, f"`{tensor.name}` has rank {tensor.type.rank}, but {len(subs)} subscripts are given")
        offsets, sizes, steps = [], [], []
        for sub, dim in zip(subs, tensor.type.shape):
            if sub.kind in ("all", "from") and exprs.names(dim) & set(self.dynamic):
                raise error(sub.loc, f"this slice spans dynamic dim `{sorted(exprs.names(dim) & set(self.dynamic))[0]}` "
                            f"of `{tensor.name}`: a tile's extent must be known at compile time", DYNAMIC_NOTE)
            step = 1
            if sub.step is not None:
                step = fold_int(sub.step, self.env)
                if step is None or step <= 0:
                    raise error(sub.step.loc, "the step of a slice must be a positive number known at compile time",
                                "a literal, a dim or a constant: `x[0 : N : 2]` takes every second element")
            steps.append(step)
            if step != 1:
                if sub.kind == "len":  # `lo : +n : step`: n elements
                    offsets.append(self.index(sub.lo))
                    sizes.append(self.size(sub.hi))
                    continue
                lo, hi = self.index(sub.lo), self.index(sub.hi)
                self.static_extent(lo, hi, sub.loc)
                if (exprs.names(lo) | exprs.names(hi)) - set(self.env):
                    raise error(sub.loc, "a `lo : hi : step` slice must not depend on grid or loop indices",
                                "write `lo : +n : step` (n elements) for a tile that moves with an index")
                n = -(-(exprs.evaluate(hi, self.env) - exprs.evaluate(lo, self.env)) // step)
                if n <= 0:
                    raise error(sub.loc, f"empty slice: `{exprs.to_str(lo)} : {exprs.to_str(hi)} : {step}` has no elements")
                offsets.append(lo)
                sizes.append(exprs.Num(n))
                continue
            if sub.kind == "all":
                offsets.append(exprs.Num(0))
                sizes.append(dim)
            elif sub.kind == "from":
                lo = self.index(sub.lo, allow_vars=False)
                n = exprs.evaluate(dim, self.env) - exprs.evaluate(lo, self.env)
                if n <= 0:
                    raise error(sub.loc, f"empty slice: `{exprs.to_str(lo)} :` has {n} elements")
                offsets.append(lo)
                sizes.append(exprs.substitute(exprs.Bin("-", dim, lo), {}))
            elif sub.kind == "one":
                offsets.append(self.index(sub.lo))
                sizes.append(exprs.Num(1))
            elif sub.kind == "len":
                offsets.append(self.index(sub.lo))
                sizes.append(self.size(sub.hi))
            else:
                lo, hi = self.index(sub.lo), self.index(sub.hi)
                self.static_extent(lo, hi, sub.loc)
                if (exprs.names(lo) | exprs.names(hi)) - set(self.env):
                    raise error(sub.loc, "a `lo : hi` slice must not depend on grid or loop indices",
                                "write `lo : +size` for a tile that moves with an index")
                n = exprs.evaluate(hi, self.env) - exprs.evaluate(lo, self.env)
                if n <= 0:
                    raise error(sub.loc, f"empty slice: `{exprs.to_str(lo)} : {exprs.to_str(hi)}` has {n} elements")
                offsets.append(lo)
                sizes.append(exprs.substitute(exprs.Bin("-", hi, lo), {}))
        return offsets, sizes, steps

    def static_extent(self, lo: exprs.Expr, hi: exprs.Expr, loc: Loc) -> None:
        """A `lo : hi` slice's extent must not depend on a dynamic dim."""
        dyn = (exprs.names(lo) | exprs.names(hi)) & set(self.dynamic)
        if dyn:
            raise error(loc, f"this slice's extent depends on dynamic dim `{sorted(dyn)[0]}`: a tile's extent must "
                        "be known at compile time", DYNAMIC_NOTE)

    def dtype_arg(self, e: A.Expr) -> str:
        if isinstance(e, A.Name) and e.id in DTYPES:
            return e.id
        raise error(e.loc, "expected a dtype", f"use one of {', '.join(DTYPES)}")

    def type_arg(self, e: A.Expr) -> TileType:
        if isinstance(e, A.Index) and e.base in DTYPES and all(s.kind == "one" for s in e.subs):
            return TileType("frag", e.base, tuple(self.size(s.lo) for s in e.subs))
        raise error(e.loc, "expected a tile type such as `f32[BM, BN]`")

    # ---- tile expressions -------------------------------------------------------------------
    def tile(self, e: A.Expr) -> Value:
        """Lower a tile-valued expression to a buffer (a fresh frag tile unless it is a variable)."""
        if isinstance(e, A.Name):
            v = self.lookup(e.id)
            if v is None:
                raise error(e.loc, f"unknown name `{e.id}`", self.known_names())
            if not isinstance(v, Value):
                if v in self.env:
                    raise error(e.loc, f"`{e.id}` is an integer, not a tile", "use it inside an index or a slice")
                return self.index_number(e)
            return self.tile_var(e.id, e.loc)
        if isinstance(e, A.Index):
            if self.is_index(e):
                return self.index_number(e)
            return self.load(e, "frag")
        if self.number(e) is not None:
            raise error(e.loc, "a bare number is not a tile", "use `full(f32[BM, BN], 1.0)` or combine it with a tile")
        if self.is_index(e):
            return self.index_number(e)
        if isinstance(e, A.Neg):
            x = self.tile(e.operand)
            return self.unary("neg", x, e.loc)
        if isinstance(e, A.BinOp):
            return self.binop(e)
        if isinstance(e, A.Call):
            return self.call(e)
        raise error(e.loc, "expected a tile expression")

    def is_index(self, e: A.Expr) -> bool:
        """Whether `e` is integer index arithmetic (no tiles, no float literals); memoized per node."""
        key = ("idx", id(e))
        if key not in self.number_memo:
            self.number_memo[key] = self._is_index(e)
        return self.number_memo[key]

    def _is_index(self, e: A.Expr) -> bool:
        if isinstance(e, A.IntLit):
            return True
        if isinstance(e, A.Name):
            v = self.lookup(e.id)
            return isinstance(v, str)
        if isinstance(e, A.Neg):
            return self.is_index(e.operand)
        if isinstance(e, A.BinOp):
            return e.op in ("+", "-", "*", "/", "%") and self.is_index(e.lhs) and self.is_index(e.rhs)
        if isinstance(e, A.Call):
            return e.fn in exprs.FUNCS and all(self.is_index(a) for a in e.args)
        if isinstance(e, A.Index):
            t = self.lookup(e.base)
            return (isinstance(t, Value) and t.type.space == "global" and t.type.dtype in ("i32", "i8")
                    and all(s.kind == "one" for s in e.subs) and all(self.is_index(s.lo) for s in e.subs))
        return False

    def index_number(self, e: A.Expr) -> Value:
        """An integer index expression that is known only when the kernel runs (a grid or loop
        index, a runtime scalar, a tensor element) used as a number in a tile expression: a
        one-element f32 tile holding its value, which broadcasts (`x * (pos + b)`)."""
        v = self.temp(TileType("frag", "f32", (exprs.Num(1),)), e.loc)
        self.emit(O.FillOp(operands=[v], attrs={"value": 0.0, "index": exprs.to_str(self.runtime_index(e))},
                           loc=e.loc))
        return v

    def runtime_index(self, e: A.Expr) -> exprs.Expr:
        """`e` as an index expression whose value a tile takes when the kernel runs (no pass
        bounds it): a located error when it divides by a divisor that is 0 at these dims."""
        expr = self.index(e)
        op = _zero_divisor(expr, self.env)
        if op is not None:
            raise error(e.loc, f"division by zero in `{op}` of a number known only when the kernel runs",
                        "its divisor is 0 with these dims and constants")
        return expr

    def load(self, e: A.Index, space: str) -> Value:
        tensor = self.lookup(e.base)
        if e.base in DTYPES:
            raise error(e.loc, f"`{e.base}[...]` is a type, not a value", "use `zeros(...)` or `full(..., value)`")
        if tensor is None:
            raise error(e.loc, f"unknown name `{e.base}`", self.known_names())
        if not isinstance(tensor, Value) or tensor.type.space != "global":
            raise error(e.loc, f"`{e.base}` is not a global tensor", "only global tensors can be sliced")
        offsets, sizes, steps = self.slices(tensor, e.subs, e.loc)
        v = self.temp(TileType(space, tensor.type.dtype, tuple(sizes)), e.loc)
        attrs = {"src_offsets": [exprs.to_str(o) for o in offsets]}
        if any(st != 1 for st in steps):
            attrs["src_steps"] = steps
        self.emit(O.CopyOp(operands=[tensor, v], attrs=attrs, loc=e.loc))
        return v

    def unary(self, fn: str, x: Value, loc: Loc, scalar: float | None = None) -> Value:
        if x.type.dtype == "bool" and fn not in ("eq", "ne"):
            raise error(loc, f"`{fn}` is not defined on bool tiles", _BOOL_HINT)
        dtype = "bool" if fn in CMP_SWAPPED else x.type.dtype
        out = self.temp(TileType("frag", dtype, x.type.shape), loc)
        attrs = {"fn": fn} if scalar is None else {"fn": fn, "scalar": scalar}
        self.emit(O.ElementwiseOp(operands=[x, out], attrs=attrs, loc=loc))
        return out

    def binop(self, e: A.BinOp) -> Value:
        if e.op == "@":
            a, b = self.gemm_operands(e)
            acc_shape = (a.type.shape[0], b.type.shape[-1]) if a.type.rank == 2 and b.type.rank == 2 else ()
            acc = self.temp(TileType("frag", "f32", acc_shape), e.loc) if acc_shape else None
            self.check_gemm(a, b, acc, e.loc)
            self.emit(O.FillOp(operands=[acc], attrs={"value": 0.0}, loc=e.loc))
            self.emit(O.GemmOp(operands=[a, b, acc], loc=e.loc))
            return acc
        if e.op in CMP_OPS:
            return self.compare(e)
        if e.op not in BIN_OPS:
            raise error(e.loc, f"operator `{e.op}` is not defined on tiles")
        for lit, other, swap in ((e.rhs, e.lhs, False), (e.lhs, e.rhs, True)):
            value = self.number(lit)
            if value is not None:
                fn = BIN_OPS[e.op]
                if swap and e.op in ("-", "/"):  # `1.0 - t`, `1.0 / t`
                    fn = "r" + fn
                return self.unary(fn, self.tile(other), e.loc, scalar=value)
        return self.elementwise(BIN_OPS[e.op], self.tile(e.lhs), self.tile(e.rhs), e.loc, f"`{e.op}`")

    def compare(self, e: A.BinOp) -> Value:
        """`x < y` and the other comparisons: a bool tile (a number on either side)."""
        fn = CMP_OPS[e.op]
        for lit, other, swap in ((e.rhs, e.lhs, False), (e.lhs, e.rhs, True)):
            value = self.number(lit)
            if value is not None:
                return self.unary(CMP_SWAPPED[fn] if swap else fn, self.tile(other), e.loc, scalar=value)
        return self.elementwise(fn, self.tile(e.lhs), self.tile(e.rhs), e.loc, f"`{e.op}`", dtype="bool")

    def where(self, e: A.Call) -> Value:
        """`where(c, a, b)`: a where c is true, else b; c a bool tile, a and b tiles or numbers
        (a number becomes a tile of the other branch's dtype, f32 if both are numbers)."""
        c = self.tile(e.args[0])
        if c.type.dtype != "bool":
            raise error(e.args[0].loc, f"the condition of `where` must be a bool tile, got {c.type.dtype}",
                        "compare to make one: `where(x > 0.0, x, 0.0)`")
        values = [self.number(a) for a in e.args[1:]]
        tiles = [None if v is not None else self.tile(a) for a, v in zip(e.args[1:], values)]
        dtype = promote(*[t.type.dtype for t in tiles]) if all(tiles) else next(
            (t.type.dtype for t in tiles if t is not None), "f32")
        shape = c.type.shape
        for t in tiles:
            if t is not None:
                shape = self.broadcast(shape, t, e.loc, "`where`")
        ins = [c]
        for t, v in zip(tiles, values):
            if t is None:  # a number: a filled tile of c's shape
                t = self.temp(TileType("frag", dtype, c.type.shape), e.loc)
                self.emit(O.FillOp(operands=[t], attrs={"value": v}, loc=e.loc))
            ins.append(t)
        out = self.temp(TileType("frag", dtype, shape), e.loc)
        self.emit(O.ElementwiseOp(operands=[*ins, out], attrs={"fn": "where"}, loc=e.loc))
        return out

    def broadcast(self, shape, b: Value, loc: Loc, what: str, dtype: str | None = None):
        """The symbolic shape `shape` broadcast against b's, as numpy does: trailing dims align, the
        shorter shape takes leading 1s, and a dim of size 1 stretches; raises on a mismatch."""
        sb_sym = b.type.shape
        rank = max(len(shape), len(sb_sym))
        shape = (exprs.Num(1),) * (rank - len(shape)) + tuple(shape)
        sb_sym = (exprs.Num(1),) * (rank - len(sb_sym)) + tuple(sb_sym)
        sa = tuple(exprs.evaluate(d, self.env) for d in shape)
        sb = tuple(exprs.evaluate(d, self.env) for d in sb_sym)
        if any(x != y and 1 not in (x, y) for x, y in zip(sa, sb)):
            left = f"{dtype}{list(sa)}" if dtype else str(list(sa))
            raise error(loc, f"shape mismatch in {what}: {left} and {b.type.dtype}{list(b.type.concrete_shape(self.env))}",
                        "trailing dims must be equal or 1 (numpy broadcasting)")
        return tuple(da if x >= y else db for x, y, da, db in zip(sa, sb, shape, sb_sym))

    def number(self, e: A.Expr) -> float | None:
        """`e`'s value if it is a number (a literal, dims and constants; see `_number`); a located
        error when it is not finite (IR attributes, and so every target, hold finite numbers)."""
        v = _number(e, self.env, self.number_memo)
        if v is not None and not math.isfinite(v):
            raise error(e.loc, f"this number is {v}: numbers in tile expressions must be finite",
                        "a float overflows past 1.8e308; for a value below every other write a large finite "
                        "one, e.g. `-1e30` (as examples/attention.tk does)")
        return v

    def elementwise(self, fn: str, a: Value, b: Value, loc: Loc, what: str, dtype: str | None = None) -> Value:
        """A fresh frag tile holding fn(a, b) (of `dtype`, else the promoted dtype); dims of size 1
        broadcast on either side."""
        bools = [t for t in (a, b) if t.type.dtype == "bool"]
        if bools and fn not in ("eq", "ne"):
            raise error(loc, f"{what} is not defined on bool tiles", _BOOL_HINT)
        shape = self.broadcast(a.type.shape, b, loc, what, a.type.dtype)
        out = self.temp(TileType("frag", dtype or promote(a.type.dtype, b.type.dtype), shape), loc)
        self.emit(O.ElementwiseOp(operands=[a, b, out], attrs={"fn": fn}, loc=loc))
        return out

    def gemm_operands(self, e: A.BinOp) -> tuple[Value, Value]:
        """Both operands as shared tiles: tensor cores read A and B from shared memory, so global
        slices load straight into shared and register tiles are staged through it."""
        out = []
        for x in (e.lhs, e.rhs):
            if isinstance(x, A.Index):
                out.append(self.load(x, "shared"))
                continue
            v = self.tile(x)
            if v.type.space != "shared":
                staged = self.temp(v.type.with_space("shared"), x.loc)
                self.emit(O.CopyOp(operands=[v, staged], loc=x.loc))
                v = staged
            out.append(v)
        return tuple(out)

    def check_gemm(self, a: Value, b: Value, acc: Value | None, loc: Loc) -> None:
        sa, sb = (t.type.concrete_shape(self.env) for t in (a, b))
        if len(sa) != 2 or len(sb) != 2:
            raise error(loc, f"`@` needs 2-d tiles, got {a.type.dtype}{list(sa)} and {b.type.dtype}{list(sb)}")
        if "bool" in (a.type.dtype, b.type.dtype):
            raise error(loc, "`@` is not defined on bool tiles", _BOOL_HINT)
        if sa[1] != sb[0]:
            raise error(loc, f"shape mismatch in `@`: {a.type.dtype}{list(sa)} @ {b.type.dtype}{list(sb)}",
                        f"the inner dims must agree ({sa[1]} vs {sb[0]})")
        if acc is not None:
            sc = acc.type.concrete_shape(self.env)
            if len(sc) != 2 or (sc[0], sc[1]) != (sa[0], sb[1]):
                raise error(loc, f"shape mismatch: `{acc.name}` is {acc.type.dtype}{list(sc)}, "
                            f"but the product is [{sa[0]}, {sb[1]}]")
            if acc.type.dtype not in FLOAT_DTYPES:
                raise error(loc, f"gemm accumulator `{acc.name}` must be a float tile, got {acc.type.dtype}")

    def call(self, e: A.Call) -> Value:
        fn, args = e.fn, e.args

        def want(n: int) -> None:
            if len(args) != n:
                raise error(e.loc, f"`{fn}` takes {n} argument{'s' * (n != 1)}, got {len(args)}")

        if fn == "reshape":
            want(2)
            x, t = self.tile(args[0]), self.type_arg(args[1])
            a, b = x.type.concrete_shape(self.env), t.concrete_shape(self.env)
            if math.prod(a) != math.prod(b):
                raise error(args[1].loc, f"cannot reshape {x.type.dtype}{list(a)} ({math.prod(a)} elements) into "
                            f"{t.dtype}{list(b)} ({math.prod(b)} elements)", "the element counts must be equal")
            if x.type.dtype == "bool" or t.dtype == "bool":
                if x.type.dtype != t.dtype:
                    raise error(e.loc, "`reshape` keeps a bool tile bool", _BOOL_HINT)
            if x.type.space != "shared":  # every thread reads elements other threads hold
                staged = self.temp(x.type.with_space("shared"), e.loc)
                self.emit(O.CopyOp(operands=[x, staged], loc=e.loc))
                x = staged
            v = self.temp(t, e.loc)
            self.emit(O.ReshapeOp(operands=[x, v], loc=e.loc))
            return v
        if fn == "iota":
            want(2)
            t = self.type_arg(args[0])
            axis = fold_int(args[1], self.env)
            if axis is None or not 0 <= axis < t.rank:
                raise error(args[1].loc, f"the axis of `iota` must be a number in [0, {t.rank})",
                            "`iota(f32[BT, 1], 0)`: each element is its index along axis 0")
            if t.dtype == "bool":
                raise error(args[0].loc, "`iota` makes a number tile, not a bool one")
            v = self.temp(t, e.loc)
            self.emit(O.FillOp(operands=[v], attrs={"value": 0.0, "axis": axis}, loc=e.loc))
            return v
        if fn in ("zeros", "full"):
            want(1 if fn == "zeros" else 2)
            t = self.type_arg(args[0])
            value = 0.0
            if fn == "full":
                value = self.number(args[1])
                if value is None and self.is_index(args[1]):  # a runtime value: `full(f32[1, N], pos)`
                    v = self.temp(t, e.loc)
                    self.emit(O.FillOp(operands=[v], attrs={"value": 0.0,
                                                            "index": exprs.to_str(self.runtime_index(args[1]))},
                                       loc=e.loc))
                    return v
                if value is None:
                    raise error(args[1].loc, "`full` takes a number as its fill value",
                                "a literal, a dim or constant, arithmetic on those, or an index (a grid or loop index, "
                                "a runtime scalar)")
            v = self.temp(t, e.loc)
            self.emit(O.FillOp(operands=[v], attrs={"value": value}, loc=e.loc))
            return v
        if fn in SPACE_CALLS:
            want(1)
            if isinstance(args[0], A.Index) and args[0].base in DTYPES:  # `shared(f16[1, N])`: uninitialized
                return self.temp(self.type_arg(args[0]).with_space(fn), e.loc)
            if isinstance(args[0], A.Index):
                return self.load(args[0], fn)
            if isinstance(args[0], A.Call) and args[0].fn == "cast" and len(args[0].args) == 2:
                return self.cast(args[0], fn)  # convert straight into the requested space
            x = self.tile(args[0])
            v = self.temp(x.type.with_space(fn), e.loc)
            self.emit(O.CopyOp(operands=[x, v], loc=e.loc))
            return v
        if fn == "cast":
            want(2)
            return self.cast(e, "frag")
        if fn == "peer":
            return self.peer(e)
        if fn in UNARY_CALLS:
            want(1)
            return self.unary(UNARY_CALLS[fn], self.tile(args[0]), e.loc)
        if fn in ("max", "min"):
            want(2)
            for i in (1, 0):  # max(x, 0.0) and max(0.0, x): elementwise with a scalar
                value = self.number(args[i])
                if value is not None:
                    return self.unary(fn, self.tile(args[1 - i]), e.loc, scalar=value)
            return self.elementwise(fn, self.tile(args[0]), self.tile(args[1]), e.loc, f"`{fn}`")
        if fn == "where":
            want(3)
            return self.where(e)
        if fn == "pow":
            want(2)
            if self.number(args[0]) is not None:
                raise error(args[0].loc, "`pow` takes a tile as its base",
                            "for a number base b write `exp2(x * log2(b))` with log2(b) as a number")
            value = self.number(args[1])
            if value is not None:
                return self.unary("pow", self.tile(args[0]), e.loc, scalar=value)
            return self.elementwise("pow", self.tile(args[0]), self.tile(args[1]), e.loc, "`pow`")
        if fn in REDUCE_CALLS:
            x, axis, result = self.reduction(e)
            out = self.temp(result, e.loc)
            self.emit(O.ReduceOp(operands=[x, out], attrs={"fn": REDUCE_CALLS[fn], "axis": axis}, loc=e.loc))
            return out
        known = ["zeros", "full", "cast", *SPACE_CALLS, *UNARY_CALLS, "max", "min", "pow", "where", *REDUCE_CALLS,
                 "peer"]
        raise error(e.loc, f"unknown function `{fn}`", f"tile functions: {', '.join(known)}")

    def reduction(self, e: A.Call) -> tuple[Value, int, TileType]:
        """For `sum/amax/amin(x, axis)`: the tile `x` (lowered), the axis (checked against x's
        rank) and the type of the result: x's shape with the axis kept at size 1, in a `frag`,
        f32 for f16/bf16 x and x's dtype otherwise. Emits nothing for the reduction itself."""
        if len(e.args) != 2:
            raise error(e.loc, f"`{e.fn}` takes 2 arguments, got {len(e.args)}")
        x = self.tile(e.args[0])
        if x.type.dtype == "bool":
            raise error(e.args[0].loc, f"`{e.fn}` is not defined on bool tiles",
                        "count with `sum(cast(c, f32), axis)`")
        axis = exprs.evaluate(self.index(e.args[1], allow_vars=False), self.env)
        if not 0 <= axis < x.type.rank:
            raise error(e.args[1].loc, f"axis {axis} out of range for a rank-{x.type.rank} tile")
        shape = x.type.shape[:axis] + (exprs.Num(1),) + x.type.shape[axis + 1:]
        dtype = "f32" if x.type.dtype in ("f16", "bf16") else x.type.dtype
        return x, axis, TileType("frag", dtype, shape)

    def peer(self, e: A.Call) -> Value:
        """`peer(S, rank...)`: the cluster peer of rank `rank` (one per cluster dim) holds its own
        instance of shared tile `S`; read it into a fresh register tile."""
        src, ranks = self.peer_target(e, "reads")
        out = self.temp(src.type.with_space("frag"), e.loc)
        self.emit(O.PeerCopyOp(operands=[src, out], attrs={"rank": ranks}, loc=e.loc))
        return out

    def peer_target(self, e: A.Call, verb: str) -> tuple[Value, list[str]]:
        """The shared tile and the rank expressions of `peer(S, rank...)` (read or written)."""
        if not self.cluster:
            raise error(e.loc, "`peer` needs a grid with a `cluster`",
                        "declare one: `grid (B) as (b) cluster (2) as (r)`")
        if len(e.args) < 2 or not isinstance(e.args[0], A.Name):
            raise error(e.loc, "`peer` takes a shared tile variable and a rank per cluster dimension",
                        "e.g. `peer(S, (r + 1) % 2)`")
        tile = self.tile(e.args[0])
        if tile.type.space != "shared":
            raise error(e.args[0].loc, f"`peer` {verb} a shared tile; `{e.args[0].id}` is {tile.type}",
                        f"make it shared: `{e.args[0].id} = shared(...)`")
        if len(e.args) - 1 != self.cluster:
            raise error(e.loc, f"`peer` needs {self.cluster} rank{'s' * (self.cluster != 1)} (one per cluster "
                        f"dimension), got {len(e.args) - 1}")
        return tile, [exprs.to_str(self.index(a)) for a in e.args[1:]]

    def cast(self, e: A.Call, space: str) -> Value:
        x, dtype = self.tile(e.args[0]), self.dtype_arg(e.args[1])
        v = self.temp(TileType(space, dtype, x.type.shape), e.loc)
        self.emit(O.CopyOp(operands=[x, v], loc=e.loc))
        return v

    def check_shape(self, want: TileType, got: TileType, loc: Loc, what: str, broadcast: bool = False) -> None:
        sw, sg = want.concrete_shape(self.env), got.concrete_shape(self.env)
        ok = sw == sg or (broadcast and len(sw) == len(sg) and all(g in (w, 1) for w, g in zip(sw, sg)))
        if not ok:
            raise error(loc, f"shape mismatch in {what}: expected {want.dtype}{list(sw)}, got {got.dtype}{list(sg)}",
                        f"symbolically: expected [{', '.join(map(exprs.to_str, want.shape))}], "
                        f"got [{', '.join(map(exprs.to_str, got.shape))}]")

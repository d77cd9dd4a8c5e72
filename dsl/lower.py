"""Lower the .tk AST to the tile IR, checking names, dtypes and shapes.

The result is specialized on the problem dims (each from `-D`/the caller's tensors, else the
kernel's `where` defaults) and records the schedule constants in `consts`; tile shapes stay
symbolic in the constants (`frag<f32[BM, R]>`) until the `tile` pass binds them. Every user
error raises :class:`dsl.diagnostics.TkError` at the offending source location.
"""

from __future__ import annotations

from dsl import ast as A
from dsl import exprs
from dsl import ops as O
from dsl.diagnostics import Loc, error
from dsl.ir import Module, Region, Value
from dsl.types import DTYPES, FLOAT_DTYPES, TileType, promote
from dsl.verifier import verify

_UNARY_CALLS = {"exp": "exp", "relu": "relu", "silu": "silu", "abs": "abs", "sqrt": "sqrt", "rsqrt": "rsqrt"}
_BIN_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
_SPACE_CALLS = ("shared", "frag", "local")
_LOOPS = {"range": "serial", "pipelined": "pipelined", "unroll": "unroll"}


def lower(kernel: A.Kernel, source: str = "", overrides: dict[str, int] | None = None) -> Module:
    """Lower `kernel` with `overrides` (dims or constants, e.g. from `-D BM=128`) applied.

    Raises TkError for unknown names, dtype and shape errors, unmet `requires`, and overrides
    that name neither a dim nor a constant.
    """
    return _Lowerer(kernel, source, dict(overrides or {})).run()


class _Lowerer:
    def __init__(self, kernel: A.Kernel, source: str, overrides: dict[str, int]):
        self.k, self.source, self.overrides = kernel, source, overrides
        self.scopes: list[dict[str, Value | str]] = [{}]
        self.taken: set[str] = set()
        self.fresh: set[int] = set()  # ids of values created by the expression being lowered
        self.counter = 0
        self.region: Region | None = None

    # ---- environment ------------------------------------------------------------------------
    def run(self) -> Module:
        k = self.k
        dims_used: dict[str, Loc] = {}
        for p in k.inputs + k.outputs:
            for d, loc in p.dims:
                if isinstance(d, str):
                    dims_used.setdefault(d, loc)
        for name, (_, loc) in k.consts.items():
            if name in dims_used:
                raise error(loc, f"`{name}` is both a schedule constant and a tensor dim",
                            "rename one of them")
        for name, (_, loc) in k.dim_defaults.items():
            if name not in dims_used:
                raise error(loc, f"`where` gives a default for `{name}`, which is not a tensor dim")
        for name in self.overrides:
            if name not in dims_used and name not in k.consts:
                known = sorted(set(dims_used) | set(k.consts))
                raise error(k.loc, f"`-D {name}` names neither a dim nor a schedule constant of `{k.name}`",
                            f"known names: {', '.join(known)}")
        self.dims = {}
        for name, loc in dims_used.items():
            if name in self.overrides:
                self.dims[name] = self.overrides[name]
            elif name in k.dim_defaults:
                self.dims[name] = k.dim_defaults[name][0]
            else:
                raise error(loc, f"dim `{name}` has no value",
                            f"add a default (`where {name} = 1024`) or pass `-D {name}=...`")
        self.consts = {n: self.overrides.get(n, v) for n, (v, _) in k.consts.items()}
        for name, v in {**self.dims, **self.consts}.items():
            if v <= 0:
                loc = k.consts[name][1] if name in k.consts else dims_used[name]
                raise error(loc, f"`{name}` must be positive, got {v}")
        self.env = {**self.dims, **self.consts}

        body = Region()
        func = O.FuncOp(regions=[body], loc=k.loc, attrs={
            "sym_name": k.name, "dims": self.dims, "consts": self.consts,
            "outputs": list(range(len(k.inputs), len(k.inputs) + len(k.outputs))),
            "reference": k.reference[0] if k.reference else ""})
        if not k.outputs:
            raise error(k.loc, f"kernel `{k.name}` has no outputs")
        for p in k.inputs + k.outputs:
            if p.dtype not in DTYPES:
                raise error(p.loc, f"unknown dtype `{p.dtype}` for `{p.name}`", f"use one of {', '.join(DTYPES)}")
            shape = tuple(exprs.Num(d) if isinstance(d, int) else exprs.Sym(d) for d, _ in p.dims)
            v = self.define(p.name, TileType("global", p.dtype, shape), p.loc)
            body.args.append(v)
        for cond in k.requires:
            e = self.index(cond, allow_vars=False)
            body.ops.append(O.RequireOp(attrs={"cond": exprs.to_str(e)}, loc=cond.loc))
            if not exprs.evaluate(e, self.env):
                vals = ", ".join(f"{n} = {self.env[n]}" for n in sorted(exprs.names(e)))
                raise error(cond.loc, f"requirement `{exprs.to_str(e)}` does not hold", f"with {vals}")
        self.region = body
        self.lower_body(k.body)
        module = Module(func, source=self.source)
        verify(module, "after lowering")
        return module

    def define(self, name: str, type_: TileType, loc: Loc) -> Value:
        if self.lookup(name) is not None:
            raise error(loc, f"`{name}` is already defined")
        v = Value(self.unique(name), type_)
        self.scopes[-1][name] = v
        return v

    def unique(self, hint: str) -> str:
        name, i = hint, 0
        while name in self.taken:
            i += 1
            name = f"{hint}_{i}"
        self.taken.add(name)
        return name

    def temp(self, type_: TileType, loc: Loc) -> Value:
        while str(self.counter) in self.taken:
            self.counter += 1
        v = Value(self.unique(str(self.counter)), type_)
        self.emit(O.AllocOp(results=[v], loc=loc))
        self.fresh.add(id(v))
        return v

    def lookup(self, name: str):
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if name in self.env:
            return name
        return None

    def emit(self, op) -> None:
        self.region.ops.append(op)

    # ---- statements -------------------------------------------------------------------------
    def lower_body(self, stmts: list[A.Stmt]) -> None:
        grid = [s for s in stmts if isinstance(s, A.Grid)]
        if not grid:
            raise error(self.k.loc, f"kernel `{self.k.name}` has no `grid` statement",
                        "start the body with `grid (cdiv(M, BM)) as (m)`")
        if stmts[0] is not grid[0]:
            raise error(stmts[0].loc, "the `grid` statement must come first in the kernel body")
        if len(grid) > 1:
            raise error(grid[1].loc, "a kernel has one `grid` statement")
        g = grid[0]
        if len(g.vars) != len(g.extents) or not 1 <= len(g.vars) <= 3:
            raise error(g.loc, f"the grid has {len(g.extents)} extents and {len(g.vars)} names",
                        "give 1 to 3 extents and one block-index name per extent")
        extents = [exprs.to_str(self.index(e, allow_vars=False)) for e in g.extents]
        if g.threads is not None:
            threads = self.index(g.threads, allow_vars=False)
        else:
            threads = exprs.Sym("threads") if "threads" in self.consts else exprs.Num(128)
        launch = O.LaunchOp(regions=[Region()], loc=g.loc,
                            attrs={"grid": extents, "vars": list(g.vars), "threads": exprs.to_str(threads)})
        self.emit(launch)
        self.in_region(launch.body, g.vars, stmts[1:])

    def in_region(self, region: Region, index_vars, stmts) -> None:
        outer = self.region
        self.region = region
        self.scopes.append({v: v for v in index_vars})
        for v in index_vars:
            if v in self.env or any(v in s for s in self.scopes[:-1]):
                raise error(self.k.loc, f"index name `{v}` shadows another name")
        for s in stmts:
            self.stmt(s)
        self.scopes.pop()
        self.region = outer

    def stmt(self, s: A.Stmt) -> None:
        self.fresh = set()
        if isinstance(s, A.Grid):
            raise error(s.loc, "a kernel has one `grid` statement")
        if isinstance(s, A.For):
            return self.for_stmt(s)
        if isinstance(s, A.Assign):
            return self.assign(s)
        if isinstance(s, A.AugAssign):
            return self.augassign(s)
        return self.store(s)

    def for_stmt(self, s: A.For) -> None:
        kind = _LOOPS.get(s.kind)
        if kind is None:
            raise error(s.loc, f"unknown loop `{s.kind}`", "use range(n), range(lo, hi), pipelined(n, stages) or unroll(n)")
        nargs = {"serial": (1, 2), "pipelined": (2, 2), "unroll": (1, 1)}[kind]
        if not nargs[0] <= len(s.args) <= nargs[1]:
            raise error(s.loc, f"`{s.kind}` takes {' or '.join(map(str, sorted(set(nargs))))} arguments, got {len(s.args)}")
        attrs = {"var": s.var, "kind": kind, "lo": "0"}
        if kind == "serial" and len(s.args) == 2:
            attrs["lo"] = exprs.to_str(self.index(s.args[0]))
            attrs["hi"] = exprs.to_str(self.index(s.args[1]))
        else:
            attrs["hi"] = exprs.to_str(self.index(s.args[0]))
        if kind == "pipelined":
            attrs["stages"] = exprs.to_str(self.index(s.args[1], allow_vars=False))
        if self.lookup(s.var) is not None:
            raise error(s.loc, f"loop variable `{s.var}` shadows another name")
        loop = O.ForOp(regions=[Region()], attrs=attrs, loc=s.loc)
        self.emit(loop)
        self.in_region(loop.body, [s.var], s.body)

    def tile_var(self, name: str, loc: Loc) -> Value | None:
        v = self.lookup(name)
        if isinstance(v, Value) and v.type.space == "global":
            raise error(loc, f"`{name}` is a global tensor", f"write a slice such as `{name}[...]`")
        return v if isinstance(v, Value) else None

    def assign(self, s: A.Assign) -> None:
        existing = self.lookup(s.target)
        if isinstance(existing, str):
            raise error(s.loc, f"cannot assign to `{s.target}`: it is an index or a constant")
        if existing is not None:
            target = self.tile_var(s.target, s.loc)
            value = self.tile(s.value)
            self.check_shape(target.type, value.type, s.value.loc, f"assignment to `{s.target}`")
            self.emit(O.CopyOp(operands=[value, target], loc=s.loc))
            return
        value = self.tile(s.value)
        if id(value) in self.fresh:  # name the temporary after the variable
            self.taken.discard(value.name)
            value.name = self.unique(s.target)
        else:
            copy = Value(self.unique(s.target), value.type)
            self.emit(O.AllocOp(results=[copy], loc=s.loc))
            self.emit(O.CopyOp(operands=[value, copy], loc=s.loc))
            value = copy
        self.scopes[-1][s.target] = value

    def augassign(self, s: A.AugAssign) -> None:
        target = self.lookup(s.target)
        if target is None:
            raise error(s.loc, f"unknown name `{s.target}`", f"define it first, e.g. `{s.target} = zeros(f32[BM, BN])`")
        if not isinstance(target, Value):
            raise error(s.loc, f"cannot update `{s.target}`: it is an index or a constant")
        target = self.tile_var(s.target, s.loc)
        if s.op == "+" and isinstance(s.value, A.BinOp) and s.value.op == "@":
            a, b = self.gemm_operands(s.value)
            self.check_gemm(a, b, target, s.value.loc)
            self.emit(O.GemmOp(operands=[a, b, target], loc=s.loc))
            return
        value = self.tile(s.value)
        self.check_shape(target.type, value.type, s.value.loc, f"`{s.op}=` on `{s.target}`", broadcast=True)
        self.emit(O.ElementwiseOp(operands=[target, value, target], attrs={"fn": _BIN_OPS[s.op]}, loc=s.loc))

    def store(self, s: A.Store) -> None:
        target = self.lookup(s.target)
        if not isinstance(target, Value) or target.type.space != "global":
            raise error(s.loc, f"`{s.target}` is not a global tensor", "only global tensors can be sliced")
        if s.op is not None:
            raise error(s.loc, f"`{s.op}=` on a global tensor is not supported",
                        "accumulate in a tile and store it once with `=`")
        offsets, sizes = self.slices(target, s.subs, s.loc)
        value = self.tile(s.value)
        want = TileType("frag", target.type.dtype, tuple(sizes))
        self.check_shape(want, value.type, s.value.loc, f"store to `{s.target}`")
        self.emit(O.CopyOp(operands=[value, target], attrs={"dst_offsets": [exprs.to_str(o) for o in offsets]}, loc=s.loc))

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
                raise error(e.loc, f"`{e.id}` is a grid or loop index; only dims and constants are allowed here")
            return exprs.Sym(e.id)
        if isinstance(e, A.Neg):
            return exprs.substitute(exprs.Bin("-", exprs.Num(0), self.index(e.operand, allow_vars)), {})
        if isinstance(e, A.BinOp) and e.op != "@":
            return exprs.Bin(e.op, self.index(e.lhs, allow_vars), self.index(e.rhs, allow_vars))
        if isinstance(e, A.Call) and e.fn in exprs.FUNCS:
            if len(e.args) != exprs.FUNCS[e.fn]:
                raise error(e.loc, f"`{e.fn}` takes {exprs.FUNCS[e.fn]} arguments, got {len(e.args)}")
            return exprs.Call(e.fn, tuple(self.index(a, allow_vars) for a in e.args))
        raise error(e.loc, "expected an integer expression", "index expressions use + - * / % cdiv min max")

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
        if len(subs) != tensor.type.rank:
            raise error(loc, f"`{tensor.name}` has rank {tensor.type.rank}, but {len(subs)} subscripts are given")
        offsets, sizes = [], []
        for sub, dim in zip(subs, tensor.type.shape):
            if sub.kind == "all":
                offsets.append(exprs.Num(0))
                sizes.append(dim)
            elif sub.kind == "one":
                offsets.append(self.index(sub.lo))
                sizes.append(exprs.Num(1))
            elif sub.kind == "len":
                offsets.append(self.index(sub.lo))
                sizes.append(self.size(sub.hi))
            else:
                lo, hi = self.index(sub.lo), self.index(sub.hi)
                if (exprs.names(lo) | exprs.names(hi)) - set(self.env):
                    raise error(sub.loc, "a `lo : hi` slice must not depend on grid or loop indices",
                                "write `lo : +size` for a tile that moves with an index")
                n = exprs.evaluate(hi, self.env) - exprs.evaluate(lo, self.env)
                if n <= 0:
                    raise error(sub.loc, f"empty slice: `{exprs.to_str(lo)} : {exprs.to_str(hi)}` has {n} elements")
                offsets.append(lo)
                sizes.append(exprs.substitute(exprs.Bin("-", hi, lo), {}))
        return offsets, sizes

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
                raise error(e.loc, f"`{e.id}` is an integer, not a tile", "use it inside an index or a slice")
            return self.tile_var(e.id, e.loc)
        if isinstance(e, A.Index):
            return self.load(e, "frag")
        if isinstance(e, (A.IntLit, A.FloatLit)):
            raise error(e.loc, "a bare number is not a tile", "use `full(f32[BM, BN], 1.0)` or combine it with a tile")
        if isinstance(e, A.Neg):
            x = self.tile(e.operand)
            return self.unary("neg", x, e.loc)
        if isinstance(e, A.BinOp):
            return self.binop(e)
        if isinstance(e, A.Call):
            return self.call(e)
        raise error(e.loc, "expected a tile expression")

    def load(self, e: A.Index, space: str) -> Value:
        tensor = self.lookup(e.base)
        if e.base in DTYPES:
            raise error(e.loc, f"`{e.base}[...]` is a type, not a value", "use `zeros(...)` or `full(..., value)`")
        if tensor is None:
            raise error(e.loc, f"unknown name `{e.base}`", self.known_names())
        if not isinstance(tensor, Value) or tensor.type.space != "global":
            raise error(e.loc, f"`{e.base}` is not a global tensor", "only global tensors can be sliced")
        offsets, sizes = self.slices(tensor, e.subs, e.loc)
        v = self.temp(TileType(space, tensor.type.dtype, tuple(sizes)), e.loc)
        self.emit(O.CopyOp(operands=[tensor, v], attrs={"src_offsets": [exprs.to_str(o) for o in offsets]}, loc=e.loc))
        return v

    def unary(self, fn: str, x: Value, loc: Loc, scalar: float | None = None) -> Value:
        out = self.temp(x.type.with_space("frag"), loc)
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
        if e.op not in _BIN_OPS:
            raise error(e.loc, f"operator `{e.op}` is not defined on tiles")
        for lit, other, swap in ((e.rhs, e.lhs, False), (e.lhs, e.rhs, True)):
            if isinstance(lit, (A.IntLit, A.FloatLit)):
                if swap and e.op in ("-", "/"):
                    raise error(e.loc, f"`number {e.op} tile` is not supported", f"write `tile {e.op} number` or use a tile on both sides")
                x = self.tile(other)
                return self.unary(_BIN_OPS[e.op], x, e.loc, scalar=float(lit.value))
        a, b = self.tile(e.lhs), self.tile(e.rhs)
        sa, sb = (t.type.concrete_shape(self.env) for t in (a, b))
        if len(sa) != len(sb) or any(x != y and 1 not in (x, y) for x, y in zip(sa, sb)):
            raise error(e.loc, f"shape mismatch in `{e.op}`: {a.type.dtype}{list(sa)} and {b.type.dtype}{list(sb)}",
                        "operands must have equal shapes (dims of size 1 broadcast)")
        shape = tuple(da if x >= y else db for x, y, da, db in zip(sa, sb, a.type.shape, b.type.shape))
        out = self.temp(TileType("frag", promote(a.type.dtype, b.type.dtype), shape), e.loc)
        self.emit(O.ElementwiseOp(operands=[a, b, out], attrs={"fn": _BIN_OPS[e.op]}, loc=e.loc))
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

        if fn in ("zeros", "full"):
            want(1 if fn == "zeros" else 2)
            t = self.type_arg(args[0])
            value = 0.0
            if fn == "full":
                if not isinstance(args[1], (A.IntLit, A.FloatLit)):
                    raise error(args[1].loc, "`full` takes a number as its fill value")
                value = float(args[1].value)
            v = self.temp(t, e.loc)
            self.emit(O.FillOp(operands=[v], attrs={"value": value}, loc=e.loc))
            return v
        if fn in _SPACE_CALLS:
            want(1)
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
        if fn in _UNARY_CALLS:
            want(1)
            return self.unary(_UNARY_CALLS[fn], self.tile(args[0]), e.loc)
        if fn in ("max", "min") and len(args) == 2:
            a, b = self.tile(args[0]), self.tile(args[1])
            out = self.temp(TileType("frag", promote(a.type.dtype, b.type.dtype), a.type.shape), e.loc)
            self.check_shape(a.type, b.type, e.loc, f"`{fn}`")
            self.emit(O.ElementwiseOp(operands=[a, b, out], attrs={"fn": fn}, loc=e.loc))
            return out
        if fn in ("sum", "max", "min"):
            want(2)
            x = self.tile(args[0])
            axis = exprs.evaluate(self.index(args[1], allow_vars=False), self.env)
            if not 0 <= axis < x.type.rank:
                raise error(args[1].loc, f"axis {axis} out of range for a rank-{x.type.rank} tile")
            shape = x.type.shape[:axis] + (exprs.Num(1),) + x.type.shape[axis + 1:]
            dtype = "f32" if x.type.dtype in ("f16", "bf16") else x.type.dtype
            out = self.temp(TileType("frag", dtype, shape), e.loc)
            self.emit(O.ReduceOp(operands=[x, out], attrs={"fn": fn, "axis": axis}, loc=e.loc))
            return out
        known = ["zeros", "full", "cast", *_SPACE_CALLS, *_UNARY_CALLS, "sum", "max", "min"]
        raise error(e.loc, f"unknown function `{fn}`", f"tile functions: {', '.join(known)}")

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

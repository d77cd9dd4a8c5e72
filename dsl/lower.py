"""Lower the .tk AST to the tile IR, checking names, dtypes and shapes.

The result is specialized on the problem dims (each from `-D`/the caller's tensors, else the
kernel's `where` defaults) and records the schedule constants in `consts`; tile shapes stay
symbolic in the constants (`frag<f32[BM, R]>`) until the `tile` pass binds them. Every user
error raises :class:`dsl.diagnostics.TkError` at the offending source location.
"""

from __future__ import annotations

from dsl import ast as A
from dsl import exprs
from dsl import lower_sparse as S
from dsl import ops as O
from dsl.diagnostics import Loc, error
from dsl.ir import Module, Region, Value
from dsl.types import DTYPES, TileType
from dsl.lower_expr import _BOOL_HINT, BIN_OPS, ExprLowerer
from dsl.verifier import verify
from dsl.warp_tiling import warp_threads_problem, warp_tiling
from dsl.parser import TOO_DEEP, TOO_DEEP_NOTE

_LOOPS = {"range": "serial", "pipelined": "pipelined", "unroll": "unroll"}


def lower(kernel: A.Kernel, source: str = "", overrides: dict[str, int] | None = None,
          dynamic: tuple[str, ...] = ()) -> Module:
    """Lower `kernel` with `overrides` (dims or constants, e.g. from `-D BM=128`) applied, and
    the dims in `dynamic` (`--dynamic M`) left symbolic as if the file said `dynamic M`.

    Raises TkError for unknown names, dtype and shape errors, unmet `requires`, and overrides
    that name neither a dim nor a constant.
    """
    for name in dynamic:
        kernel.dynamic.setdefault(name, kernel.loc)
    try:
        return _Lowerer(kernel, source, dict(overrides or {})).run()
    except exprs.ExprError as exc:  # outside any statement (the signature, a grid): at the kernel
        raise error(kernel.loc, f"cannot evaluate an index expression of `{kernel.name}`: {exc}", _ZERO_NOTE) from None


_ZERO_NOTE = "a dim or schedule constant it divides by is 0 here; give it another value (`-D`)"


def tensor_dims(kernel: A.Kernel) -> dict[str, Loc]:
    """Every problem dim that some tensor of `kernel` names bare, with its first location."""
    dims: dict[str, Loc] = {}
    for p in kernel.inputs + kernel.outputs:
        for d, loc in p.dims or []:  # a runtime scalar has none
            if isinstance(d, str):
                dims.setdefault(d, loc)
    return dims


def check_tune(kernel: A.Kernel) -> None:
    """Raise TkError when the `tune` clause names something that is not a schedule constant."""
    for name, (_, loc) in kernel.tune.items():
        if name not in kernel.consts:
            raise error(loc, f"`tune` lists values for `{name}`, which is not a schedule constant of `{kernel.name}`",
                        f"schedule constants: {', '.join(sorted(kernel.consts)) or 'none'}")


def requirements(kernel: A.Kernel) -> list[tuple[exprs.Expr, Loc]]:
    """Each `requires` condition of `kernel` as an index expression over its dims and schedule
    constants (true when nonzero), with the location of the condition, without lowering the body:
    `tkc tune` evaluates them for thousands of configurations. Raises TkError for a condition
    that is not an integer expression over those names (as lowering would). A condition on a
    runtime scalar (`requires pos < S`) is left out: it holds or not per call, not per
    configuration."""
    lowerer = _Lowerer(kernel, "", {})
    scalars = {p.name for p in kernel.inputs if p.dims is None}
    lowerer.env = {name: 0 for name in (*tensor_dims(kernel), *kernel.consts, *scalars)}  # names only
    conds = [(lowerer.index(cond, allow_vars=False), cond.loc) for cond in kernel.requires]
    return [(e, loc) for e, loc in conds if not exprs.names(e) & scalars]


class _Lowerer(ExprLowerer):
    def __init__(self, kernel: A.Kernel, source: str, overrides: dict[str, int]):
        self.k, self.source, self.overrides = kernel, source, overrides
        self.scopes: list[dict[str, Value | str]] = [{}]
        self.taken: set[str] = set()
        self.fresh: set[int] = set()  # ids of values created by the expression being lowered
        self.counter = 0
        self.number_memo: dict = {}  # AST node id -> its value as a number (ExprLowerer.number)
        self.region: Region | None = None
        self.cluster = 0
        self.grid_vars: list[str] = []  # the grid's block indices and cluster ranks
        self.loops: list = []  # the tile.for ops enclosing the statement being lowered
        self.sparse: dict = {}  # sparse pattern name -> (param, M, N, NNZ, [rows, cols]) (dsl/lower_sparse.py)
        self.tiles = None  # (pattern, BM, BN, m, n) inside `grid (tiles(S, BM, BN)) as (m, n)`
        self.tiles_stored = False  # its one sampled gemm store is lowered
        self.scalars: dict[str, A.Param] = {}
        self.dynamic: dict[str, Loc] = {}  # dims left symbolic (`dynamic M`)
        self.allow_dynamic = False  # whether a compile-time index may name them (grid extents)

    # ---- environment ------------------------------------------------------------------------
    def run(self) -> Module:
        k = self.k
        dims_used: dict[str, Loc] = {}
        self.scalars: dict[str, A.Param] = {}
        for p in k.outputs:
            if p.dims is None:
                raise error(p.loc, f"output `{p.name}` is a scalar; outputs are tensors",
                            f"declare it with a shape, e.g. `{p.name}: {p.dtype}[1]`")
        for p in k.inputs:
            if p.mutable:
                raise error(p.loc, f"input `{p.name}` is marked `mut`; only outputs are updated in place",
                            f"move it to the outputs (`-> (mut {p.name}: ...)`): the caller then passes it "
                            "after the inputs and the kernel stores into it")
        for p in k.inputs:
            if p.dims is None and not S.is_sparse(p):  # a pattern without dims: define_pattern says so
                if p.dtype != "i32":
                    raise error(p.loc, f"runtime scalar `{p.name}` has dtype `{p.dtype}`; runtime scalars are `i32`",
                                f"declare it `{p.name}: i32`, or pass a tensor (`{p.name}: {p.dtype}[1]`)")
                if p.name in self.scalars:
                    raise error(p.loc, f"`{p.name}` is already defined")
                self.scalars[p.name] = p
        dims_used.update(tensor_dims(k))
        for name, (_, loc) in k.consts.items():
            if name in dims_used:
                raise error(loc, f"`{name}` is both a schedule constant and a tensor dim",
                            "rename one of them")
        for name, p in self.scalars.items():
            if name in dims_used or name in k.consts:
                raise error(p.loc, f"`{name}` is both a runtime scalar and a {'dim' if name in dims_used else 'schedule constant'}",
                            "rename one of them")
        check_tune(k)
        for name, (_, loc) in k.dim_defaults.items():
            if name not in dims_used:
                raise error(loc, f"`where` gives a default for `{name}`, which is not a tensor dim")
        for name in self.overrides:  # a runtime scalar's value (`-D pos=5`) is for the run, not the compile
            if name not in dims_used and name not in k.consts and name not in self.scalars:
                known = sorted(set(dims_used) | set(k.consts) | set(self.scalars))
                raise error(k.loc, f"`-D {name}` names neither a dim nor a schedule constant of `{k.name}`",
                            f"known names: {', '.join(known)}")
        sparse_dims = {d for p in k.inputs if S.is_sparse(p) for d, _ in p.dims or [] if isinstance(d, str)}
        for name, loc in k.dynamic.items():
            if name not in dims_used:
                raise error(loc, f"`dynamic` names `{name}`, which is not a tensor dim of `{k.name}`",
                            f"tensor dims: {', '.join(sorted(dims_used)) or 'none'}")
            if name in sparse_dims:
                raise error(loc, f"`{name}` is a dim of a sparse pattern, which cannot be dynamic",
                            "the pattern's launch data is built per pattern already")
        # dynamic dims stay symbolic: bound from the tensors at every call; their value here (the
        # `where` default or `-D`) is what the compile-time checks and estimates use
        self.dynamic = dict(k.dynamic)
        self.allow_dynamic = False
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
        entries = {p.dims[2][0] for p in k.inputs if S.is_sparse(p) and p.dims and len(p.dims) == 3}
        for name, v in self.dims.items():
            if v < 0 or v == 0 and name not in entries:  # a pattern may be empty (0 entries)
                raise error(dims_used[name], f"dim `{name}` must be {'non-negative' if name in entries else 'positive'}"
                                             f", got {v}")
        for name, v in self.consts.items():
            if v < 0:  # 0 is a valid switch value (STAGE=0); tile extents are checked where used
                raise error(k.consts[name][1], f"schedule constant `{name}` must not be negative, got {v}")
        dynamic = {name: self.dims.pop(name) for name in self.dynamic}
        self.env = {**self.dims, **self.consts}

        body = Region()
        n_sparse = sum(S.is_sparse(p) for p in k.inputs)  # a pattern is two arguments (rows, cols)
        first = len(k.inputs) - len(self.scalars) + n_sparse  # the first output's argument index
        func = self.func = O.FuncOp(regions=[body], loc=k.loc, attrs={
            "sym_name": k.name, "dims": self.dims, "consts": self.consts,
            "outputs": list(range(first, first + len(k.outputs))),
            "reference": k.reference[0] if k.reference else ""})
        if dynamic:
            func.attrs["dynamic"] = dynamic
        if self.scalars:
            func.attrs["scalars"] = [[p.name, p.dtype, k.inputs.index(p)] for p in self.scalars.values()]
        if any(p.mutable for p in k.outputs):  # updated in place: arg indices (dsl/ast.py Param.mutable)
            func.attrs["mutable"] = [first + i for i, p in enumerate(k.outputs) if p.mutable]
        self.scopes[0].update({name: name for name in (*self.scalars, *self.dynamic)})
        if not k.outputs:
            raise error(k.loc, f"kernel `{k.name}` has no outputs")
        for p in k.inputs + k.outputs:
            if p.dims is None and not S.is_sparse(p):
                continue
            if S.is_sparse(p):
                if p in k.outputs:
                    raise error(p.loc, f"output `{p.name}` is a sparse pattern; patterns are inputs",
                                "declare the values as a dense output, e.g. `P: f32[NNZ]`")
                body.args.extend(S.define_pattern(self, p, self.shape_expr))
                _, m, n, _, _ = self.sparse[p.name]
                func.attrs.setdefault("sparse", []).append([p.name, p.dtype, k.inputs.index(p),
                                                            exprs.to_str(m), exprs.to_str(n)])
                continue
            if p.dtype not in DTYPES:
                raise error(p.loc, f"unknown dtype `{p.dtype}` for `{p.name}`", f"use one of {', '.join(DTYPES)}")
            shape = tuple(self.shape_expr(d, loc) for d, loc in p.dims)
            v = self.define(p.name, TileType("global", p.dtype, shape), p.loc)
            body.args.append(v)
        for cond in k.requires:
            if ast_names(cond) & (set(self.scalars) | set(self.dynamic)):  # checked at every call
                e = self.index(cond, allow_vars=True)
                extra = exprs.names(e) - set(self.env) - set(self.scalars) - set(self.dynamic)
                if extra:
                    raise error(cond.loc, f"`requires` may use dims, constants and runtime scalars, not `{sorted(extra)[0]}`")
                body.ops.append(O.RequireOp(attrs={"cond": exprs.to_str(e), "runtime": True}, loc=cond.loc))
                continue
            e = self.index(cond, allow_vars=False)
            body.ops.append(O.RequireOp(attrs={"cond": exprs.to_str(e)}, loc=cond.loc))
            try:
                holds = exprs.evaluate(e, self.env)
            except exprs.ExprError as exc:
                raise error(cond.loc, f"cannot evaluate `{exprs.to_str(e)}`: {exc}", _ZERO_NOTE) from None
            if not holds:
                vals = ", ".join(f"{n} = {self.env[n]}" for n in sorted(exprs.names(e)))
                raise error(cond.loc, f"requirement `{exprs.to_str(e)}` does not hold", f"with {vals}")
        self.region = body
        self.lower_body(k.body)
        module = Module(func, source=self.source)
        verify(module, "after lowering")
        return module

    def shape_expr(self, d, loc: Loc) -> exprs.Expr:
        """A tensor dim as an index expression: a number, a dim name or an expression."""
        if isinstance(d, int):
            return exprs.Num(d)
        return exprs.Sym(d) if isinstance(d, str) else self.dim_expr(d, loc)

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
        tiles = S.tiles_grid(self, g)  # `grid (tiles(S, BM, BN)) as (m, n)`: one extent, two names (checked there)
        if tiles is None and (len(g.vars) != len(g.extents) or not 1 <= len(g.vars) <= 3):
            raise error(g.loc, f"the grid has {len(g.extents)} extents and {len(g.vars)} names",
                        "give 1 to 3 extents and one block-index name per extent")
        self.allow_dynamic = True  # `grid (cdiv(M, BM))` with M dynamic: the launch computes it
        try:
            extents = [] if tiles else [exprs.to_str(self.index(e, allow_vars=False)) for e in g.extents]
        finally:
            self.allow_dynamic = False
        if g.threads is not None:
            threads = self.index(g.threads, allow_vars=False)
        else:
            threads = exprs.Sym("threads") if "threads" in self.consts else exprs.Num(128)
        n = exprs.evaluate(threads, self.env)
        if not 1 <= n <= 1024:
            raise error(g.threads.loc if g.threads is not None else g.loc,
                        f"a block has 1 to 1024 threads, got {n}", "set `threads` to e.g. 128 or 256")
        names = list(g.vars) + list(g.ranks)
        for i, v in enumerate(names):
            if v in names[:i]:
                raise error(g.loc, f"`{v}` names two grid or rank indices", "give every block index and rank its own name")
        launch = O.LaunchOp(regions=[Region()], loc=g.loc, attrs={
            **(tiles or {"grid": extents, "vars": list(g.vars)}), "threads": exprs.to_str(threads)})
        if g.cluster or g.ranks:
            if len(g.cluster) != len(g.extents) or len(g.ranks) != len(g.cluster):
                raise error(g.loc, f"the cluster has {len(g.cluster)} extent(s) and {len(g.ranks)} rank name(s) "
                            f"for a {len(g.extents)}-d grid",
                            "give one cluster extent and one rank name per grid dimension, e.g. "
                            "`grid (B) as (b) cluster (2) as (r)`")
            for e in g.cluster:
                if exprs.evaluate(self.index(e, allow_vars=False), self.env) <= 0:
                    raise error(e.loc, "a cluster extent must be positive")
            launch.attrs["cluster"] = [exprs.to_str(self.index(e, allow_vars=False)) for e in g.cluster]
            launch.attrs["ranks"] = list(g.ranks)
        self.emit(launch)
        self.cluster = len(g.cluster)  # number of cluster dims (0: no cluster)
        self.grid_vars = list(g.vars) + list(g.ranks)
        self.in_region(launch.body, list(g.vars) + list(g.ranks), stmts[1:], g.loc)

    def in_region(self, region: Region, index_vars, stmts, loc: Loc) -> None:
        outer = self.region
        self.region = region
        for v in index_vars:
            if self.lookup(v) is not None:
                raise error(loc, f"index name `{v}` shadows another name", "rename the grid or loop index")
        self.scopes.append({v: v for v in index_vars})
        for s in stmts:
            self.stmt(s)
        self.scopes.pop()
        self.region = outer

    def dim_expr(self, e: A.Expr, loc: Loc) -> exprs.Expr:
        """A signature dim written as an expression (`N / 2`): over dims that some parameter
        binds by name and schedule constants; its value must be positive."""
        for name in ast_names(e):
            if name in self.dynamic:
                raise error(loc, f"dynamic dim `{name}` cannot be used in a dim expression",
                            "name the dim itself in the signature, or drop it from `dynamic`")
            if name not in self.env:
                raise error(loc, f"`{name}` in the dim expression is neither a dim of a parameter nor a "
                            "schedule constant", "a dim expression uses dims that a parameter binds by name")
        size = self.index(e, allow_vars=False)
        n = exprs.evaluate(size, self.env)
        if n <= 0:
            raise error(loc, f"dim `{exprs.to_str(size)}` is {n}; it must be positive")
        return size

    def stmt(self, s: A.Stmt) -> None:
        try:
            self._stmt(s)
        except RecursionError:  # the innermost statement that overflowed reports it
            raise error(s.loc, TOO_DEEP, TOO_DEEP_NOTE) from None
        except exprs.ExprError as exc:  # an index expression the values make undefined (x / 0)
            raise error(s.loc, f"cannot evaluate an index expression of this statement: {exc}", _ZERO_NOTE) from None

    def _stmt(self, s: A.Stmt) -> None:
        self.fresh = set()
        if self.tiles is not None:  # every target runs what the GPU backends lower: one store
            if not S.is_sampled_store(self, s):
                raise error(s.loc, "the body of a `tiles` grid is one sampled gemm store",
                            f"write `P[{self.tiles[0]}] = A[{self.tiles[3]}*BM : +BM, :] @ B[:, {self.tiles[4]}*BN : +BN]`")
            if self.tiles_stored:
                raise error(s.loc, "the body of a `tiles` grid is one sampled gemm store; this is a second statement",
                            "compute each sampled gemm in its own kernel")
            self.tiles_stored = True
        if isinstance(s, A.Grid):
            raise error(s.loc, "a kernel has one `grid` statement")
        if isinstance(s, A.For):
            return self.for_stmt(s)
        if isinstance(s, A.Sync):
            if s.scope == "grid":
                return self.grid_sync(s)
            if s.scope != "cluster":
                raise error(s.loc, f"unknown barrier `sync {s.scope}`", "write `sync cluster` or `sync grid`")
            if not self.cluster:
                raise error(s.loc, "`sync cluster` needs a grid with a `cluster`",
                            "declare one: `grid (B) as (b) cluster (2) as (r)`")
            return self.emit(O.ClusterBarrierOp(loc=s.loc))
        if isinstance(s, A.If):
            cond = self.index(s.cond, allow_vars=False)
            fixed = self.func.attrs.setdefault("static", [])
            fixed.extend(sorted(n for n in exprs.names(cond) if n in self.consts and n not in fixed))
            branch = s.then if exprs.evaluate(cond, self.env) else s.orelse
            self.scopes.append({})  # names bound in a branch stay in it
            for inner in branch:
                self.stmt(inner)
            self.scopes.pop()
            return None
        if isinstance(s, A.Assign):
            return self.assign(s)
        if isinstance(s, A.AugAssign):
            return self.augassign(s)
        if isinstance(s, A.CallStore):
            return self.peer_store(s)
        if S.is_sampled_store(self, s):
            return S.sampled_store(self, s)
        return self.store(s)

    def grid_sync(self, s: A.Sync) -> None:
        """`sync grid`: a barrier of every block of the grid (tile.grid_barrier). Every block must
        pass the same barriers: not in a cluster grid, not in a loop whose trip count depends on a
        grid index (a `tiles` grid's body is one sampled gemm store: `_stmt` rejects it first)."""
        if self.cluster:
            raise error(s.loc, "`sync grid` in a grid with a `cluster`",
                        "drop the cluster, or order the blocks of a cluster with `sync cluster`")
        grid_vars = set(self.grid_vars)
        for loop in self.loops:
            names = exprs.names(exprs.parse(loop.attrs["lo"])) | exprs.names(exprs.parse(loop.attrs["hi"]))
            names &= grid_vars  # (a bound over an enclosing loop's index: that loop is checked too)
            if names:
                raise error(s.loc, f"`sync grid` in a loop whose trip count depends on `{sorted(names)[0]}`, "
                            "which differs between blocks",
                            f"every block must pass the same grid barriers: give the loop at {loop.loc} bounds "
                            "over dims, constants and runtime scalars only")
        return self.emit(O.GridBarrierOp(loc=s.loc))

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
        self.loops.append(loop)  # for `sync grid` inside it (grid_sync)
        try:
            self.in_region(loop.body, [s.var], s.body, s.loc)
        finally:
            self.loops.pop()

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
        if s.layout and not (s.op == "+" and isinstance(s.value, A.BinOp) and s.value.op == "@"):
            raise error(s.layout[0].loc, "a `with` layout applies only to a gemm update `acc += a @ b`")
        if s.op == "+" and isinstance(s.value, A.BinOp) and s.value.op == "@":
            a, b = self.gemm_operands(s.value)
            self.check_gemm(a, b, target, s.value.loc)
            gemm = O.GemmOp(operands=[a, b, target], loc=s.loc)
            if s.layout:
                self.gemm_layout(gemm, s.layout)
            self.emit(gemm)
            return
        if s.op == "+" and isinstance(s.value, A.Call) and s.value.fn == "sum":
            x, axis, result = self.reduction(s.value)
            # `acc += sum(x, axis)` onto a tile of the sum's own shape and dtype: one reduce that
            # adds into acc (no temporary, no second pass over acc). Another dtype keeps the
            # temporary, so the sum is still taken in f32 and rounded once; x being acc itself
            # keeps it too (one op would read and write the same tile).
            if (result.dtype == target.type.dtype and x is not target
                    and result.concrete_shape(self.env) == target.type.concrete_shape(self.env)):
                self.emit(O.ReduceOp(operands=[x, target], attrs={"fn": "sum", "axis": axis, "accumulate": True},
                                     loc=s.loc))
                return
            value = self.temp(result, s.value.loc)
            self.emit(O.ReduceOp(operands=[x, value], attrs={"fn": "sum", "axis": axis}, loc=s.value.loc))
        else:
            value = self.tile(s.value)
            if "bool" in (target.type.dtype, value.type.dtype):
                raise error(s.loc, f"`{s.op}=` is not defined on bool tiles", _BOOL_HINT)
        self.check_shape(target.type, value.type, s.value.loc, f"`{s.op}=` on `{s.target}`", broadcast=True)
        self.emit(O.ElementwiseOp(operands=[target, value, target], attrs={"fn": BIN_OPS[s.op]}, loc=s.loc))

    def gemm_layout(self, gemm: O.GemmOp, parts: list[A.LayoutPart]) -> None:
        """`with warp(WM, WN, WNITER) thread(TM, TN)`: the gemm's warp tiling (dsl/warp_tiling.py)
        as its `warp` and `thread` attributes; raises TkError at the clause when a part is
        unknown or repeated (the grammar takes exactly two), or the tiling does not fit the tile and
        the block's threads."""
        want = {"warp": ("WM", "WN", "WNITER"), "thread": ("TM", "TN")}
        for p in parts:
            if p.name not in want:
                raise error(p.loc, f"unknown gemm layout `{p.name}`", "write `with warp(WM, WN, WNITER) thread(TM, TN)`")
            if p.name in gemm.attrs:
                raise error(p.loc, f"`{p.name}` is given twice")
            if len(p.args) != len(want[p.name]):
                raise error(p.loc, f"`{p.name}` takes {len(want[p.name])} values ({', '.join(want[p.name])}), "
                            f"got {len(p.args)}")
            gemm.attrs[p.name] = [exprs.to_str(self.index(a, allow_vars=False)) for a in p.args]
        tiling, problems = warp_tiling(gemm, self.env)
        threads = next(op for op in self.func.body.ops if op.name == "tile.launch").attrs["threads"]
        if tiling is not None:
            problem = warp_threads_problem(tiling, exprs.evaluate(exprs.parse(threads), self.env))
            problems = [problem] if problem else []
        if problems:
            raise error(parts[0].loc, f"gemm layout: {problems[0]}",
                        "see docs/LANGUAGE.md, \"Warp tiling of a gemm\", for the constraints")

    def peer_store(self, s: A.CallStore) -> None:
        """`peer(P, rank...) = value`: write `value` into the instance of shared tile `P` that
        belongs to the cluster peer of rank `rank` (a DSMEM store; seed 001, pushed instead of
        pulled). `map-dsmem` orders it after the peer's earlier uses of its `P` and before the
        peer's next ones."""
        if s.fn != "peer":
            raise error(s.loc, f"cannot assign to a call of `{s.fn}`",
                        "only `peer(P, rank) = ...` (a store into a cluster peer's shared tile) is allowed")
        dst, ranks = self.peer_target(A.Call(s.loc, s.fn, s.args), "writes")
        value = self.tile(s.value)
        self.check_shape(dst.type, value.type, s.value.loc, f"store to `peer({s.args[0].id}, ...)`")
        self.emit(O.PeerStoreOp(operands=[value, dst], attrs={"rank": ranks}, loc=s.loc))

    def store(self, s: A.Store) -> None:
        target = self.lookup(s.target)
        if not isinstance(target, Value) or target.type.space != "global":
            raise error(s.loc, f"`{s.target}` is not a global tensor", "only global tensors can be sliced")
        if s.op is not None:
            raise error(s.loc, f"`{s.op}=` on a global tensor is not supported",
                        "accumulate in a tile and store it once with `=`")
        offsets, sizes, steps = self.slices(target, s.subs, s.loc)
        value = self.tile(s.value)
        want = TileType("frag", target.type.dtype, tuple(sizes))
        self.check_shape(want, value.type, s.value.loc, f"store to `{s.target}`")
        attrs = {"dst_offsets": [exprs.to_str(o) for o in offsets]}
        if any(st != 1 for st in steps):
            attrs["dst_steps"] = steps
        self.emit(O.CopyOp(operands=[value, target], attrs=attrs, loc=s.loc))


def ast_names(e: A.Expr) -> set[str]:
    """The names an expression mentions."""
    if isinstance(e, A.Name):
        return {e.id}
    if isinstance(e, A.BinOp):
        return ast_names(e.lhs) | ast_names(e.rhs)
    if isinstance(e, A.Neg):
        return ast_names(e.operand)
    if isinstance(e, A.Call):
        return set().union(*(ast_names(a) for a in e.args)) if e.args else set()
    return set()

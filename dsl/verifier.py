"""IR verifier: structure, SSA scoping, names in index expressions, and each op's own checks.

Runs after parsing IR text, after lowering a .tk file, and after every pass. Raises
:class:`dsl.diagnostics.TkError` listing every violation with the op's location.
"""

from __future__ import annotations

from dsl import exprs
from dsl.diagnostics import Diagnostic, TkError
from dsl.ir import Module, Op
from dsl.ops import EXPR_ATTRS, OPS, check_attrs
from dsl.warp_tiling import warp_threads_problem, warp_tiling

# Where each op may appear: the kind of its parent (None = top level).
_PARENTS = {
    "tile.func": {None},
    "tile.require": {"tile.func"},
    "tile.launch": {"tile.func"},
}
_IN_KERNEL = {"tile.launch", "tile.for"}


def verify(module: Module, stage: str = "") -> None:
    """Check `module`; `stage` (e.g. "after pass `tile`") is added to each message."""
    diags: list[Diagnostic] = []
    suffix = f" ({stage})" if stage else ""
    def fail_func(msg: str) -> None:  # the dims, constants and scalars every other check reads
        diags.append(Diagnostic(module.func.loc, f"invalid IR: {msg}{suffix}"))

    if not check_attrs(module.func, fail_func):
        raise TkError(diags)
    env = module.env

    def check(op: Op, parent: str | None, values: set, names: set[str], cluster: bool = False,
              threads: int | None = None) -> None:
        def fail(msg: str, *notes: str) -> None:
            diags.append(Diagnostic(op.loc, f"invalid IR: {msg}{suffix}", list(notes)))

        if type(op) is not OPS.get(op.name):
            fail(f"unregistered op `{op.name}`")
            return
        allowed = _PARENTS.get(op.name, _IN_KERNEL)
        if parent not in allowed:
            fail(f"`{op.name}` cannot appear inside `{parent or 'the top level'}`")
        if op.name in ("tile.peer_copy", "tile.peer_store", "tile.cluster_barrier") and not cluster:
            fail(f"`{op.name}` needs a grid with a `cluster`")
        if op.name == "tile.launch":
            cluster = "cluster" in op.attrs
            try:
                text = op.attrs.get("threads", "128")
                threads = exprs.evaluate(exprs.parse(text), env) if isinstance(text, str) else None
            except exprs.ExprError:  # `_expressions` reports it
                threads = None
        for v in op.operands:
            if id(v) not in values:
                fail(f"operand `{v}` is used before it is defined or outside its scope")
        for key, e in _expressions(op, fail):
            unknown = exprs.names(e) - names
            if unknown:
                fail(f"unknown name `{sorted(unknown)[0]}` in `{key}`")
        try:
            if not check_attrs(op, fail):  # the op's own checks rely on its attributes' kinds
                raise _Skip
            op.verify(fail, env)
            if op.name == "tile.gemm" and threads is not None:  # the warp tiling against the launch
                tiling = warp_tiling(op, env)[0]
                problem = tiling and warp_threads_problem(tiling, threads)
                if problem:
                    fail(problem)
        except exprs.ExprError as exc:
            fail(str(exc))
        except _Skip:
            pass
        for r in op.results:
            values.add(id(r))
        inner_names = set(names)
        if op.name == "tile.launch":
            inner_names |= set(op.attrs.get("vars", [])) | set(op.attrs.get("ranks", []))
        if op.name == "tile.for":
            inner_names.add(op.attrs.get("var", ""))
        for region in op.regions:
            inner = set(values) | {id(a) for a in region.args}
            for child in region.ops:
                check(child, op.name, inner, inner_names, cluster, threads)

    from dsl.ops import dynamic_dims, scalars

    names = set(env) | {n for n, _, _ in scalars(module.func)} | set(dynamic_dims(module.func))
    if module.func.regions:
        names |= {a.name for a in module.func.regions[0].args if a.type.dtype in ("i32", "i8")}
    check(module.func, None, set(), names)
    _check_unique_names(module, diags, suffix)
    if diags:
        raise TkError(diags)


class _Skip(Exception):
    """An op whose attributes are of the wrong kinds: its own checks are skipped."""


def _expressions(op: Op, fail):
    """(attribute, parsed expression) for each index expression of `op`; `fail` for text that does
    not parse (check_attrs reports attributes of the wrong kind, which are skipped here)."""
    for key in EXPR_ATTRS:
        v = op.attrs.get(key)
        for text in v if isinstance(v, list) else [v]:
            if not isinstance(text, str) or (key == "stages" and op.name == "tile.alloc"):
                continue
            try:
                yield key, exprs.parse(text)
            except exprs.ExprError:
                fail(f"`{key}` holds a malformed index expression `{text}`")


def _check_unique_names(module: Module, diags: list[Diagnostic], suffix: str) -> None:
    seen: dict[str, Op] = {}
    for op in module.walk():
        defined = list(op.results) + [a for r in op.regions for a in r.args]
        for v in defined:
            if v.name in seen:
                diags.append(Diagnostic(op.loc, f"invalid IR: value `{v}` is defined twice{suffix}"))
            seen[v.name] = op

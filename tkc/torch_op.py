"""A compiled kernel as a torch custom op, so that `torch.compile` traces through a model that
calls it without a graph break.

`register(kernel)` wraps a `tkc.runtime.Kernel` in `torch.library.custom_op` with an explicit
schema (one argument per entry of `Kernel.inputs`: the declared inputs, then the `mut` outputs)
and a fake implementation that gives the outputs' shapes, dtypes and device from the inputs'
metadata alone. Under `torch.compile(dynamic=True)` those shapes are SymInts: the fake
implementation binds dims to them and evaluates dim expressions (`f32[M, N / 2]`) with SymInt
arithmetic, never turning one into a Python int (which would specialize the graph to one size).
The real implementation is the Kernel's own call, with all its checks.
"""

from __future__ import annotations

import hashlib
import re

from dsl import ast as A
from dsl.diagnostics import error
from dsl.lower_sparse import SPARSE_FORMATS
from tkc.runtime import TORCH_DTYPES, Kernel

SCALAR_KINDS = ("int", "tensor")
# The ops this process registered: qualified name -> (what the op runs, the op). An equivalent
# kernel (same source text, target, constants, dynamic dims, scalar kind) gets the op already
# registered.
_REGISTERED: dict[str, tuple[tuple, object]] = {}


def register(kernel: Kernel, name: str | None = None, namespace: str = "tkc", scalars: str = "int"):
    """Register `kernel` as the torch custom op `namespace::name` and return it (a
    `torch._library.custom_ops.CustomOpDef`: call it like the kernel, or as
    `torch.ops.<namespace>.<name>`).

    Arguments, in `kernel.inputs` order: a Tensor per tensor input (its declared dtype, any
    device the kernel's target runs on); a runtime scalar as `SymInt` (`scalars="int"`: a Python
    int in [0, 2^31), which torch.compile makes symbolic from its second value on) or as a
    one-element int32 Tensor (`scalars="tensor"`: a new value never recompiles); then the `mut`
    outputs as Tensors that the op updates in place (declared in `mutates_args`). Returns the
    other outputs, freshly allocated on the first tensor argument's device with their declared
    dtypes and extents: one Tensor, a tuple for several, None when every output is `mut`. The op
    has no autograd formula.

    `name` defaults to the kernel's name plus 8 hex digits of a hash of the source text, the
    target, the schedule constants, the `dynamic` dims, `tune` and `scalars` (`kv_store_1f0c93ab`),
    stable across processes, so Kernels of one file with other constants or targets get distinct
    ops. Registering
    an equivalent Kernel again under the same name returns the op already registered (which calls
    the first Kernel).

    Raises TkError for a sparse input (a pattern is not a tensor argument: call the Kernel
    itself), a kernel without tensor arguments, an unknown `scalars`, a `name` or `namespace`
    that is not an identifier, and a name that another kernel (or any other op) already holds.
    Under torch.compile, the fake implementation raises TkError for a wrong rank or dtype and
    adds a runtime check (torch._check) for an extent that disagrees with a dim bound elsewhere,
    a literal or a dim expression; the real call checks everything the Kernel checks.
    """
    import torch

    ast = kernel.ast
    for p in kernel.inputs:
        if p.dtype in SPARSE_FORMATS:
            raise error(p.loc, f"sparse input `{p.name}` ({p.dtype}) cannot be an argument of a torch custom op "
                        f"(`{ast.name}`)", "call the compiled kernel itself (it takes torch or scipy sparse "
                        "matrices); inside a `torch.compile`d model, make that call from a function decorated "
                        "with `@torch.compiler.disable` (one graph break)")
    if all(p.dims is None for p in kernel.inputs):
        raise error(ast.loc, f"`{ast.name}` has no tensor argument, so its torch op has no device for its outputs",
                    "call the compiled kernel itself")
    if scalars not in SCALAR_KINDS:
        raise error(ast.loc, f"`scalars` must be one of {', '.join(map(repr, SCALAR_KINDS))}, got {scalars!r}")
    key = (kernel.text, kernel.target, tuple(sorted(kernel.consts.items())), tuple(sorted(kernel.extra_dynamic)),
           kernel.tune, scalars)
    name = name or f"{ast.name}_{hashlib.sha256(repr(key).encode()).hexdigest()[:8]}"
    for what, ident in (("name", name), ("namespace", namespace)):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident):
            raise error(ast.loc, f"torch op {what} `{ident}` is not an identifier", "use letters, digits and `_`")
    qualname = f"{namespace}::{name}"
    if qualname in _REGISTERED:
        known, op = _REGISTERED[qualname]
        if known == key:
            return op
        raise error(ast.loc, f"torch op `{qualname}` is already registered for another kernel (other source, "
                    "target, constants or scalar kind)", "pass another `name`, or leave it out for a name with a hash")
    if torch._C._jit_get_schemas_for_operator(qualname):  # an op of torch's, or one registered elsewhere
        raise error(ast.loc, f"torch op `{qualname}` already exists", "pass another `name` or `namespace`")

    mut = [p.name for p in kernel.inputs if p.mutable]
    op = torch.library.custom_op(qualname, _real(kernel), mutates_args=mut, schema=schema(kernel, scalars))
    op.register_fake(_fake(kernel))
    _REGISTERED[qualname] = (key, op)
    return op


def schema(kernel: Kernel, scalars: str = "int") -> str:
    """The op's schema: `(Tensor K, Tensor V, SymInt pos, Tensor(a3!) KC, Tensor(a4!) VC) -> ()`
    for examples/kv_store.tk (a runtime scalar is a `Tensor` with `scalars="tensor"`)."""
    args = []
    for p in kernel.inputs:
        if p.dims is None:
            # SymInt, not int: torch.compile specializes an `int` argument to each value it sees
            args.append(f"{'SymInt' if scalars == 'int' else 'Tensor'} {p.name}")
        elif p.mutable:
            args.append(f"Tensor(a{len(args)}!) {p.name}")
        else:
            args.append(f"Tensor {p.name}")
    n = sum(not p.mutable for p in kernel.outputs)
    result = "Tensor" if n == 1 else f"({', '.join(['Tensor'] * n)})"
    return f"({', '.join(args)}) -> {result}"


def _real(kernel: Kernel):
    """The op's implementation: the Kernel's call, returning only the outputs that are not `mut`."""
    def run(*args):
        outs = kernel(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return _returned([t for p, t in zip(kernel.outputs, outs) if not p.mutable])

    return run


def _fake(kernel: Kernel):
    """The op's fake implementation: empty outputs whose extents are SymInt expressions of the
    inputs' extents (see `symbolic_dims`)."""
    def fake(*args):
        import torch

        env = symbolic_dims(kernel, args)
        device = next(t.device for p, t in zip(kernel.inputs, args) if p.dims is not None)
        return _returned([torch.empty([_extent(d, loc, env) for d, loc in p.dims],
                                      dtype=getattr(torch, TORCH_DTYPES[p.dtype]), device=device)
                          for p in kernel.outputs if not p.mutable])

    return fake


def _returned(fresh: list):
    """What the op returns for its outputs that are not `mut`, as its schema says."""
    return None if not fresh else fresh[0] if len(fresh) == 1 else tuple(fresh)


def symbolic_dims(kernel: Kernel, args) -> dict:
    """Names -> values for evaluating extents: the `where` defaults, the schedule constants, then
    the dims bound by the tensor arguments' extents (ints or SymInts, kept as they are). Raises
    TkError for a wrong rank or dtype; an extent that disagrees with a dim bound elsewhere, a
    literal or a dim expression becomes a torch._check (a runtime assertion under torch.compile
    when the extents are symbolic)."""
    import torch

    ast = kernel.ast
    env = {**{n: v for n, (v, _) in ast.dim_defaults.items()}, **{n: v for n, (v, _) in ast.consts.items()},
           **kernel.consts}
    bound: dict = {}
    tensors = [(p, t) for p, t in zip(kernel.inputs, args) if p.dims is not None]
    for p, t in tensors:
        if t.dim() != len(p.dims):
            raise error(p.loc, f"`{p.name}` has rank {len(p.dims)}, but the tensor has rank {t.dim()}")
        if t.dtype != getattr(torch, TORCH_DTYPES[p.dtype]):
            raise error(p.loc, f"`{p.name}` is {p.dtype}, but the tensor is {t.dtype}")
        for (d, _), n in zip(p.dims, t.shape):
            if isinstance(d, str):
                bound.setdefault(d, n)
    env.update(bound)
    for p, t in tensors:  # every extent agrees with its bound dim, literal or expression
        for (d, loc), n in zip(p.dims, t.shape):
            want = _extent(d, loc, env)
            message = f"`{p.name}` needs extent {want} here, got {n}"
            if isinstance(n, int) and isinstance(want, int) and n != want:
                raise error(loc, message)
            torch._check(n == want, lambda message=message: message)
    return env


def _extent(d, loc, env: dict):
    """The value of one declared extent: an int, a name of `env` or an expression over them."""
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        if d not in env:
            raise error(loc, f"dim `{d}` has no value", f"bind it through an input's shape or give a `where {d} = ...`")
        return env[d]
    return evaluate(d, env)


def evaluate(e: A.Expr, env: dict):
    """The value of a dim expression (dsl/ast.py) over `env`, whose values may be SymInts:
    `+ - * / %` (`/` is floor division, as in index expressions), unary `-`, `cdiv`, `min`,
    `max`. Raises TkError for any other expression or an unknown name."""
    import torch

    if isinstance(e, A.IntLit):
        return int(e.value)
    if isinstance(e, A.Name):
        return _extent(e.id, e.loc, env)
    if isinstance(e, A.Neg):
        return -evaluate(e.operand, env)
    if isinstance(e, A.BinOp) and e.op in ("+", "-", "*", "/", "%"):
        a, b = evaluate(e.lhs, env), evaluate(e.rhs, env)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a // b,
                "%": lambda: a % b}[e.op]()
    if isinstance(e, A.Call) and e.fn in ("cdiv", "min", "max") and len(e.args) == 2:
        a, b = (evaluate(x, env) for x in e.args)
        return -(-a // b) if e.fn == "cdiv" else torch.sym_min(a, b) if e.fn == "min" else torch.sym_max(a, b)
    raise error(e.loc, "expected a dim expression", "dims use + - * / % cdiv min max over dims and constants")

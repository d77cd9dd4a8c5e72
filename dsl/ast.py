"""The .tk abstract syntax tree. Every node carries the source location of its first token."""

from __future__ import annotations

from dataclasses import dataclass, field

from dsl.diagnostics import Loc


@dataclass
class Node:
    loc: Loc


# ---- expressions ----------------------------------------------------------------------------
@dataclass
class IntLit(Node):
    value: int


@dataclass
class FloatLit(Node):
    value: float


@dataclass
class Name(Node):
    id: str


@dataclass
class Call(Node):
    fn: str
    args: list["Expr"]


@dataclass
class BinOp(Node):
    op: str  # + - * / % @ == != < <= > >=
    lhs: "Expr"
    rhs: "Expr"


@dataclass
class Neg(Node):
    operand: "Expr"


@dataclass
class Slice(Node):
    """One subscript: `lo : +size` (kind "len"), `lo : hi` and `: hi` ("range"), `lo :` ("from"),
    `:` ("all"), `i` ("one"); `lo : hi : step` and `lo : +size : step` are "range" and "len" with
    a `step` (global tensors only: every step-th element)."""

    kind: str
    lo: "Expr | None" = None
    hi: "Expr | None" = None
    step: "Expr | None" = None


@dataclass
class Index(Node):
    """`base[subscripts]`: a slice of a global tensor, or a type such as `f32[BM, R]`."""

    base: str
    subs: list[Slice]


Expr = IntLit | FloatLit | Name | Call | BinOp | Neg | Index


# ---- statements -----------------------------------------------------------------------------
@dataclass
class Grid(Node):
    """`grid (extents) as (vars) [cluster (extents) as (ranks)] [threads(n)]`."""

    extents: list[Expr]
    vars: list[str]
    threads: Expr | None
    cluster: list[Expr] = field(default_factory=list)
    ranks: list[str] = field(default_factory=list)


@dataclass
class Sync(Node):
    """`sync cluster`: a barrier of every block of the cluster."""

    scope: str


@dataclass
class If(Node):
    """`if cond { ... } else { ... }` on dims and schedule constants, resolved at compile time."""

    cond: Expr
    then: list["Stmt"]
    orelse: list["Stmt"]


@dataclass
class Assign(Node):
    target: str
    value: Expr


@dataclass
class LayoutPart(Node):
    """One part of a gemm's `with` clause: `warp(WM, WN, WNITER)` or `thread(TM, TN)`."""

    name: str
    args: list[Expr]


@dataclass
class AugAssign(Node):
    target: str
    op: str  # + - * /
    value: Expr
    layout: list[LayoutPart] = field(default_factory=list)  # `with ...` after `acc += a @ b`


@dataclass
class Store(Node):
    """`T[subscripts] = value` (or `op=` when `op` is set, which is rejected for globals)."""

    target: str
    subs: list[Slice]
    value: Expr
    op: str | None = None


@dataclass
class CallStore(Node):
    """`fn(args) = value`: so far only `peer(P, rank, ...) = value`, a store into the peer's
    instance of shared tile `P` (distributed shared memory)."""

    fn: str
    args: list[Expr]
    value: Expr


@dataclass
class For(Node):
    var: str
    kind: str  # range, pipelined, unroll
    args: list[Expr]
    body: list["Stmt"]


Stmt = Grid | Assign | AugAssign | Store | CallStore | For | Sync | If


# ---- kernel ---------------------------------------------------------------------------------
@dataclass
class Param(Node):
    """A tensor parameter, or with `dims` None a runtime scalar (`pos: i32`: an input passed at
    call time that does not specialize the kernel)."""
    name: str
    dtype: str
    # each dim: a name (bound by the tensor's extent), an integer, or an expression over dims
    # bound elsewhere and schedule constants (`f32[N / 2]`), checked against the extent
    dims: "list[tuple[str | int | Expr, Loc]] | None"
    # an output marked `mut`: the caller passes the tensor and the kernel updates it in place
    # (the elements it does not store keep their values)
    mutable: bool = False


@dataclass
class Kernel(Node):
    name: str
    consts: dict[str, tuple[int, Loc]]
    inputs: list[Param]
    outputs: list[Param]
    dim_defaults: dict[str, tuple[int, Loc]]
    requires: list[Expr]
    reference: tuple[str, Loc] | None
    body: list[Stmt] = field(default_factory=list)
    # `tune BM = (64, 128), ...`: the values `tkc tune` searches per schedule constant
    tune: dict[str, tuple[tuple[int, ...], Loc]] = field(default_factory=dict)
    # `dynamic M`: dims left symbolic through the compile (one kernel serves every value; the
    # `where` default stays the value the compile-time checks and estimates use)
    dynamic: dict[str, Loc] = field(default_factory=dict)

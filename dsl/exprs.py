"""Integer index expressions: grid sizes, tile offsets, loop bounds, `requires` conditions.

Expressions are small immutable trees over integers and names (problem dims such as `M`,
schedule constants such as `BM`, grid and loop variables such as `m`, `s`, runtime scalars such
as `pos`) and elements of integer tensors (`ids[b]`, read when the kernel runs). `/` is integer
division that rounds toward zero on non-negative operands (all index values are non-negative),
`cdiv(a, b)` is ceiling division, comparisons yield 0 or 1. The textual form is what
:func:`to_str` prints and :func:`parse` reads back (a fixed point).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

import lark


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Sym:
    name: str


@dataclass(frozen=True)
class Bin:
    op: str  # one of + - * / % == != < <= > >=
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Call:
    fn: str  # cdiv, min, max
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Load:
    """`ids[b]`: an element of an integer global tensor, read when the kernel runs (a token id,
    a cache position): the one kind of expression whose value the compiler cannot know."""

    tensor: str
    args: tuple["Expr", ...]


Expr = Num | Sym | Bin | Call | Load
# The range a value read from an index tensor, or a runtime scalar without a `requires` bound,
# may take (i32): accesses indexed by one are guarded in every dim it reaches.
UNKNOWN = (0, 2**31 - 1)
FUNCS = {"cdiv": 2, "min": 2, "max": 2}
PREC = {"==": 1, "!=": 1, "<": 1, "<=": 1, ">": 1, ">=": 1, "+": 2, "-": 2, "*": 3, "/": 3, "%": 3}


class ExprError(ValueError):
    """A malformed or unevaluable index expression (unknown name, division by zero)."""


def to_str(e: Expr, parent: int = 0, right: bool = False) -> str:
    """Canonical text of `e` with minimal parentheses."""
    if isinstance(e, Num):
        return str(e.value) if e.value >= 0 else f"({e.value})"
    if isinstance(e, Sym):
        return e.name
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(to_str(a) for a in e.args)})"
    if isinstance(e, Load):
        return f"{e.tensor}[{', '.join(to_str(a) for a in e.args)}]"
    p = PREC[e.op]
    text = f"{to_str(e.a, p)} {e.op} {to_str(e.b, p, True)}"
    if p < parent or (p == parent and (right or p == PREC["=="])):
        return f"({text})"
    return text


class _Build(lark.Transformer):
    def num(self, c):
        return Num(int(c[0]))

    def sym(self, c):
        return Sym(str(c[0]))

    def neg(self, c):
        return Bin("-", Num(0), c[0]) if not isinstance(c[0], Num) else Num(-c[0].value)

    def bin(self, c):
        return Bin(str(c[1]), c[0], c[2])

    def cmp(self, c):
        return Bin(str(c[1]), c[0], c[2])

    def call(self, c):
        fn = str(c[0])
        if fn not in FUNCS or FUNCS[fn] != len(c) - 1:
            raise ExprError(f"unknown function `{fn}` with {len(c) - 1} arguments")
        return Call(fn, tuple(c[1:]))

    def load(self, c):
        return Load(str(c[0]), tuple(c[1:]))


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    path = os.path.join(os.path.dirname(__file__), "expr.lark")
    return lark.Lark.open(path, parser="lalr", cache=True)


@lru_cache(maxsize=4096)
def parse(text: str) -> Expr:
    """Parse the textual form; raises ExprError on malformed text."""
    try:
        return _Build().transform(_parser().parse(text))
    except lark.exceptions.VisitError as exc:
        raise ExprError(str(exc.orig_exc)) from None
    except lark.LarkError as exc:
        raise ExprError(f"malformed index expression `{text}`: {exc}") from None


def _apply(op: str, a: int, b: int) -> int:
    if op in ("/", "%", "cdiv") and b == 0:
        raise ExprError("division by zero in index expression")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a // b
    if op == "%":
        return a % b
    if op == "cdiv":
        return -(-a // b)
    if op == "min":
        return min(a, b)
    if op == "max":
        return max(a, b)
    return int({"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op])


def evaluate(e: Expr, env: dict) -> int:
    """Value of `e` with names bound by `env` (an index tensor's name to an array for `Load`);
    raises ExprError for an unbound name or an element outside the tensor."""
    if isinstance(e, Num):
        return e.value
    if isinstance(e, Load):
        if e.tensor not in env:
            raise ExprError(f"unknown index tensor `{e.tensor}`")
        arr, idx = env[e.tensor], tuple(evaluate(a, env) for a in e.args)
        if any(not 0 <= i < n for i, n in zip(idx, arr.shape)):
            raise ExprError(f"`{to_str(e)}` reads element {list(idx)} outside `{e.tensor}` of shape {list(arr.shape)}")
        return int(arr[idx])
    if isinstance(e, Sym):
        if e.name not in env:
            raise ExprError(f"unknown name `{e.name}`")
        return env[e.name]
    if isinstance(e, Call):
        return _apply(e.fn, evaluate(e.args[0], env), evaluate(e.args[1], env))
    return _apply(e.op, evaluate(e.a, env), evaluate(e.b, env))


def substitute(e: Expr, env: dict[str, int]) -> Expr:
    """Replace bound names by their values and fold constant subtrees (x*1, x+0 too)."""
    if isinstance(e, Num):
        return e
    if isinstance(e, Sym):
        return Num(env[e.name]) if e.name in env else e
    if isinstance(e, Load):
        return Load(e.tensor, tuple(substitute(a, env) for a in e.args))
    if isinstance(e, Call):
        args = tuple(substitute(a, env) for a in e.args)
        if all(isinstance(a, Num) for a in args):
            return Num(_apply(e.fn, args[0].value, args[1].value))
        return Call(e.fn, args)
    a, b = substitute(e.a, env), substitute(e.b, env)
    if isinstance(a, Num) and isinstance(b, Num):
        return Num(_apply(e.op, a.value, b.value))
    if e.op == "*" and Num(1) in (a, b):
        return b if a == Num(1) else a
    if e.op == "*" and Num(0) in (a, b):
        return Num(0)
    if e.op == "+" and Num(0) in (a, b):
        return b if a == Num(0) else a
    if e.op in ("-", "/") and b == Num(0 if e.op == "-" else 1):
        return a
    return Bin(e.op, a, b)


def names(e: Expr) -> set[str]:
    """Every name `e` mentions (an index tensor's name included)."""
    if isinstance(e, Num):
        return set()
    if isinstance(e, Sym):
        return {e.name}
    if isinstance(e, Load):
        return {e.tensor}.union(*(names(a) for a in e.args))
    if isinstance(e, Call):
        return set().union(*(names(a) for a in e.args))
    return names(e.a) | names(e.b)


def loads(e: Expr) -> set[str]:
    """The index tensors `e` reads (`ids` in `ids[b] * 4`)."""
    if isinstance(e, Load):
        return {e.tensor}.union(*(loads(a) for a in e.args))
    if isinstance(e, Call):
        return set().union(*(loads(a) for a in e.args))
    if isinstance(e, Bin):
        return loads(e.a) | loads(e.b)
    return set()


def _divisors(lo: int, hi: int) -> list[int]:
    """The divisors whose quotients bound x / y for y in [lo, hi] \\ {0}: the ends, and -1 and 1
    when the range reaches past 0 (they give the largest magnitudes)."""
    return [y for y in {lo, hi, -1, 1} if y != 0 and lo <= y <= hi]


def bounds(e: Expr, ranges: dict[str, tuple[int, int]]) -> tuple[int, int]:
    """Inclusive [lo, hi] of `e` when each name ranges over `ranges` (interval arithmetic).

    Sound for the monotone index arithmetic tiles use; raises ExprError for a name with no range.
    A value read from an index tensor ranges over UNKNOWN.
    """
    if isinstance(e, Num):
        return e.value, e.value
    if isinstance(e, Load):
        return UNKNOWN
    if isinstance(e, Sym):
        if e.name not in ranges:
            raise ExprError(f"unknown name `{e.name}`")
        return ranges[e.name]
    if isinstance(e, Call):
        (al, ah), (bl, bh) = bounds(e.args[0], ranges), bounds(e.args[1], ranges)
        ys = _divisors(bl, bh) if e.fn == "cdiv" else (bl, bh)
        cands = [_apply(e.fn, x, y) for x in (al, ah) for y in ys]
        if not cands:
            raise ExprError("division by zero in index expression")
        return min(cands), max(cands)
    (al, ah), (bl, bh) = bounds(e.a, ranges), bounds(e.b, ranges)
    if e.op in ("==", "!=", "<", "<=", ">", ">="):
        return 0, 1
    if e.op == "%":
        return (0, bh - 1) if bl > 0 else (min(al, 0), max(ah, 0))
    ys = _divisors(bl, bh) if e.op == "/" else (bl, bh)
    cands = [_apply(e.op, x, y) for x in (al, ah) for y in ys]
    if not cands:
        raise ExprError("division by zero in index expression")
    return min(cands), max(cands)

"""Random valid .tk programs with a sound per-element error bound (issue 14, program fuzzing).

`programs()` is a hypothesis strategy of `Program`s. A program is a kernel template (an
elementwise 2-d grid, whole-row blocks with reductions, a row reduction over a loop of column
tiles, a gemm over a `range` or `pipelined` K loop with a prologue and an epilogue, an embedding
gather, a 2-block cluster that pulls its peer's shared tile or has it pushed, a sampled gemm over
a CSR or COO pattern) filled with random expression trees:
every tile operator, math function, comparison, `where`, `cast` between f32/f16/bf16, `max`/`min`,
numpy broadcasting of rows ([N]) and columns ([M, 1]), reductions, runtime scalars and dims used
as numbers. Dims are drawn independently of the tiles, so most are not multiples of them.

Every node of a tree evaluates, in torch float64 on the whole tensors, to its exact value `v`
and a first-order bound `e` on how far a correct kernel's value can be from it (Wilkinson's
running error analysis: each rounding to a dtype adds u(dtype)|v|, each math function a few f32
ulps, each sum of n terms n u(f32) times the sum of magnitudes, and errors of operands propagate
through the operator's Lipschitz constant on the interval they span). `Program.check(outputs,
inputs)` requires |out - v| <= 2 e + u(out)|v| element by element, so a kernel that is off by a
rounding passes and one that reads a wrong element, drops a term or applies a wrong operator
fails. The generator keeps the bound sound: math functions only see arguments in their domain
(`log(abs(x) + 1.0)`, `x / (abs(y) + 1.0)`), `exp` only bounded arguments, comparisons only exact
values (inputs and numbers), and narrowing casts only values far from overflow.

A program renders to a self-contained .tk file (`Program.source()`): its `reference` clause is
the plain torch math (no rounding), and its first comment line holds `repr(program)`, which
`Program.from_source` reads back, so a shrunk failing case saved under tests/fuzz_regressions/
replays with the same checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

U = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8, "bool": 0.0, "f64": 0.0}
# half the spacing of the subnormals: a rounding's absolute error near zero (f16 subnormals are
# common: 1e-6 is one)
U_ABS = {"f32": 2.0 ** -150, "f16": 2.0 ** -25, "bf16": 2.0 ** -134, "bool": 0.0, "f64": 0.0}
FN_REL = 64 * 2.0 ** -24  # a math function in f32 (fast-math intrinsics included), relative
FN_ABS = 2.0 ** -19  # and absolute (sin/cos/tanh near zero)
INPUT_HI = 600.0  # |x| of any input drawn by tkc/oracle.py (`wide`: normal x 2^6)
F16_SAFE = 3.0e4  # a value cast to f16 stays below this (65504 is f16's largest)
HUGE = 1.0e12  # no intermediate grows past this
FLOATS = ("f32", "f16", "bf16")
NUMBERS = (0.5, 1.5, 2.0, 3.0, 0.25, -1.0, -0.75)
HEADER = "# fuzz-program: "


def promote(a: str | None, b: str | None) -> str:
    """docs/LANGUAGE.md's promotion of two tile dtypes (a number, None, takes the other's)."""
    if a is None or b is None:
        return a or b or "f32"
    if a == b:
        return a
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    order = ("i8", "i32", "f16", "bf16", "f32", "f64")
    return max(a, b, key=order.index)


def _round(v, dtype):
    """The rounding bound of one op that writes `dtype` (computed in f32, then rounded)."""
    d = dtype if dtype in ("f16", "bf16") else "f32"
    return v.abs() * U[d] + U_ABS[d]


# ---------------------------------------------------------------------------------------------
# Expression trees. Each node: dtype (None for a number), kind ("full", "row", "col", "scalar":
# how it broadcasts), hi (a bound on |value|), tk() (.tk text), ref() (torch text), ev(env) -> (v, e) in float64.

@dataclass(frozen=True)
class Leaf:
    """A tile of input `name` (the template loads it as a variable of the same lower-case name)."""
    name: str
    dtype: str
    kind: str  # "full" [BM, BN], "row" [BN] (a 1-d input), "col" [BM, 1]

    hi = INPUT_HI
    exact = True

    def tk(self):
        return self.name.lower()

    def ref(self):
        return self.name

    def ev(self, env):
        v = env[self.name]
        return v, torch.zeros_like(v)


@dataclass(frozen=True)
class Acc:
    """An f32 accumulator of the template (`acc`, `s0`): its value and bound come from `env`."""
    name: str
    kind: str
    hi: float

    dtype = "f32"
    exact = False

    def tk(self):
        return self.name

    def ref(self):
        return self.name

    def ev(self, env):
        return env[self.name], env["err:" + self.name]


@dataclass(frozen=True)
class Num:
    """A number: a literal, or a dim/constant (`sym`) whose value is `value`."""
    value: float
    sym: str = ""

    dtype = None
    kind = "scalar"
    exact = True

    @property
    def hi(self):
        return abs(self.value)

    def tk(self):
        return self.sym or repr(float(self.value))

    def ref(self):
        return self.sym or repr(float(self.value))

    def ev(self, env):
        v = torch.tensor(float(self.value), dtype=torch.float64)
        return v, torch.zeros_like(v)


@dataclass(frozen=True)
class Scalar:
    """A runtime scalar (`p: i32`) used as a number: a one-element f32 tile."""
    name: str
    hi: float

    dtype = "f32"
    kind = "scalar"
    exact = True

    def tk(self):
        return self.name

    def ref(self):
        return f"float({self.name})"

    def ev(self, env):
        v = torch.tensor(float(env[self.name]), dtype=torch.float64)
        return v, torch.zeros_like(v)


def _kind(*xs):
    kinds = {x.kind for x in xs} - {"scalar"}
    if not kinds:
        return "scalar"
    if len(kinds) == 1:
        return kinds.pop()
    return "full"  # row with col, or either with full


class _Infix:
    """`(a OP b)` in both renderings, broadcasting as its operands do."""

    @property
    def kind(self):
        return _kind(self.a, self.b)

    def tk(self):
        return f"({self.a.tk()} {self.op} {self.b.tk()})"

    def ref(self):
        return f"({self.a.ref()} {self.op} {self.b.ref()})"


@dataclass(frozen=True)
class Bin(_Infix):
    """`a OP b` for + - * /; a divisor is always `abs(y) + c` with c >= 1."""
    op: str
    a: object
    b: object

    @property
    def dtype(self):
        return promote(self.a.dtype, self.b.dtype)

    @property
    def hi(self):
        a, b = self.a.hi, self.b.hi
        return {"+": a + b, "-": a + b, "*": a * b, "/": a}[self.op]

    exact = False

    def ev(self, env):
        (a, ea), (b, eb) = self.a.ev(env), self.b.ev(env)
        if self.op in "+-":
            v = a + b if self.op == "+" else a - b
            e = ea + eb
        elif self.op == "*":
            v = a * b
            e = ea * b.abs() + a.abs() * eb + ea * eb
        else:
            v = a / b
            e = (ea + v.abs() * eb) / torch.clamp(b.abs() - eb, min=1.0)
        return v, e + _round(v, self.dtype)


@dataclass(frozen=True)
class Abs:
    """`abs(x)`: exact, non-negative."""
    a: object

    exact = False

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def kind(self):
        return self.a.kind

    @property
    def hi(self):
        return self.a.hi

    def tk(self):
        return f"abs({self.a.tk()})"

    def ref(self):
        return f"{self.a.ref()}.abs()"

    def ev(self, env):
        a, ea = self.a.ev(env)
        return a.abs(), ea


_TORCH_FN = {"exp": "torch.exp", "exp2": "torch.exp2", "log": "torch.log", "sin": "torch.sin", "cos": "torch.cos",
             "tanh": "torch.tanh", "sigmoid": "torch.sigmoid", "relu": "torch.relu", "silu": "F.silu",
             "sqrt": "torch.sqrt", "rsqrt": "torch.rsqrt", "neg": "torch.neg"}


@dataclass(frozen=True)
class Fn:
    """A math function of one tile (`pow(x, y)` with a number exponent `y`); the generator keeps
    `log`, `rsqrt` and `pow` on arguments >= 1, `sqrt` on arguments >= 0 and `exp`/`exp2` on
    bounded ones."""
    fn: str
    a: object
    y: float = 0.0

    exact = False

    @property
    def dtype(self):
        return self.a.dtype

    @property
    def kind(self):
        return self.a.kind

    @property
    def hi(self):
        h = self.a.hi
        return {"exp": math.exp(min(h, 700)), "exp2": 2.0 ** min(h, 1000), "log": math.log(h + 1.0), "sin": 1.0,
                "cos": 1.0, "tanh": 1.0, "sigmoid": 1.0, "relu": h, "silu": h, "sqrt": math.sqrt(h), "rsqrt": 1.0,
                "neg": h, "pow": h ** self.y if h < 1e100 else math.inf}[self.fn]

    def tk(self):
        if self.fn == "neg":
            return f"(-{self.a.tk()})"
        if self.fn == "pow":
            return f"pow({self.a.tk()}, {self.y!r})"
        return f"{self.fn}({self.a.tk()})"

    def ref(self):
        if self.fn == "pow":
            return f"torch.pow({self.a.ref()}, {self.y!r})"
        return f"{_TORCH_FN[self.fn]}({self.a.ref()})"

    def ev(self, env):
        a, ea = self.a.ev(env)
        fn = self.fn
        if fn == "pow":
            v = torch.pow(a, self.y)
            top = a.abs() + ea
            bot = torch.clamp(a - ea, min=1.0)
            lip = self.y * (top ** (self.y - 1) if self.y >= 1 else bot ** (self.y - 1))
            e = lip * ea
        elif fn == "sqrt":
            v = torch.sqrt(a)
            e = torch.minimum(ea.sqrt(), ea / torch.clamp(v, min=1e-300))
        elif fn == "rsqrt":
            v = torch.rsqrt(a)
            e = 0.5 * torch.clamp(a - ea, min=1.0) ** -1.5 * ea
        elif fn == "log":
            v = torch.log(a)
            e = ea / torch.clamp(a - ea, min=1.0)
        elif fn in ("exp", "exp2"):
            v = torch.exp(a) if fn == "exp" else torch.exp2(a)
            e = (torch.exp(a + ea) if fn == "exp" else math.log(2) * torch.exp2(a + ea)) * ea
        else:
            import torch.nn.functional as F

            v = {"sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
                 "silu": F.silu, "neg": torch.neg}[fn](a)
            e = ea * {"sigmoid": 0.25, "silu": 1.1}.get(fn, 1.0)
        if fn not in ("relu", "neg"):
            e = e + FN_REL * v.abs() + FN_ABS
        return v, e + _round(v, self.dtype)


@dataclass(frozen=True)
class MaxMin:
    """`max(a, b)` / `min(a, b)`, b a tile or a number: exact."""
    fn: str
    a: object
    b: object

    exact = False

    @property
    def dtype(self):
        return promote(self.a.dtype, self.b.dtype)

    @property
    def kind(self):
        return _kind(self.a, self.b)

    @property
    def hi(self):
        return max(self.a.hi, self.b.hi)

    def tk(self):
        return f"{self.fn}({self.a.tk()}, {self.b.tk()})"

    def ref(self):
        if isinstance(self.b, Num):
            return f"{self.a.ref()}.clamp({'min' if self.fn == 'max' else 'max'}={self.b.ref()})"
        return f"torch.{'maximum' if self.fn == 'max' else 'minimum'}({self.a.ref()}, {self.b.ref()})"

    def ev(self, env):
        (a, ea), (b, eb) = self.a.ev(env), self.b.ev(env)
        v = torch.maximum(a, b) if self.fn == "max" else torch.minimum(a, b)
        return v, torch.maximum(ea, eb)


@dataclass(frozen=True)
class Cast:
    """`cast(a, dtype)` between floats (rounds when it narrows)."""
    a: object
    to: str

    exact = False

    @property
    def dtype(self):
        return self.to

    @property
    def kind(self):
        return self.a.kind

    @property
    def hi(self):
        return self.a.hi

    def tk(self):
        return f"cast({self.a.tk()}, {self.to})"

    def ref(self):
        return self.a.ref()

    def ev(self, env):
        a, ea = self.a.ev(env)
        narrows = self.to != self.a.dtype and (self.to in ("f16", "bf16") or self.a.dtype == "f64")
        return a, ea + (a.abs() * U[self.to] + U_ABS[self.to] if narrows else 0.0)


@dataclass(frozen=True)
class Cmp(_Infix):
    """A comparison of exact operands (input tiles, numbers, scalars) → a bool tile."""
    op: str
    a: object
    b: object

    dtype = "bool"

    def value(self, env):
        a, b = self.a.ev(env)[0], self.b.ev(env)[0]
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[self.op]


@dataclass(frozen=True)
class BoolLeaf:
    """A tile of a bool input."""
    name: str
    kind: str = "full"

    dtype = "bool"

    def tk(self):
        return self.name.lower()

    def ref(self):
        return self.name

    def value(self, env):
        return env[self.name]


@dataclass(frozen=True)
class BoolCmp(_Infix):
    """`==` / `!=` of two bool tiles."""
    op: str
    a: object
    b: object

    dtype = "bool"

    def value(self, env):
        a, b = self.a.value(env), self.b.value(env)
        return a == b if self.op == "==" else a != b


@dataclass(frozen=True)
class Where:
    """`where(c, a, b)`: a select (exact)."""
    c: object
    a: object
    b: object

    exact = False

    @property
    def dtype(self):
        return promote(self.a.dtype, self.b.dtype)

    @property
    def kind(self):
        return _kind(self.c, self.a, self.b)

    @property
    def hi(self):
        return max(self.a.hi, self.b.hi)

    def tk(self):
        return f"where({self.c.tk()}, {self.a.tk()}, {self.b.tk()})"

    def ref(self):
        return f"torch.where({self.c.ref()}, {self.a.ref()}, {self.b.ref()})"

    def ev(self, env):
        c = self.c.value(env)
        (a, ea), (b, eb) = self.a.ev(env), self.b.ev(env)
        v = torch.where(c, a, b)
        return v, torch.where(c, ea, eb) + torch.zeros_like(v)


@dataclass(frozen=True)
class BoolNum:
    """`cast(c, f32)`: 0 or 1."""
    c: object

    dtype = "f32"
    hi = 1.0
    exact = True

    @property
    def kind(self):
        return self.c.kind

    def tk(self):
        return f"cast({self.c.tk()}, f32)"

    def ref(self):
        return f"{self.c.ref()}.double()"

    def ev(self, env):
        v = self.c.value(env).double()
        return v, torch.zeros_like(v)


@dataclass(frozen=True)
class Reduce:
    """`sum(a, 1)`, `amax(a, 1)`, `amin(a, 1)` over a whole-row tile → [rows, 1] (f16/bf16 → f32)."""
    fn: str
    a: object
    n: int  # the row length (terms of a sum)

    kind = "col"
    exact = False

    @property
    def dtype(self):
        return "f32" if self.a.dtype in ("f16", "bf16") else self.a.dtype

    @property
    def hi(self):
        return self.a.hi * (self.n if self.fn == "sum" else 1)

    def tk(self):
        return f"{self.fn}({self.a.tk()}, 1)"

    def ref(self):
        return f"{self.a.ref()}.{self.fn}(1, keepdim=True)"

    def ev(self, env):
        a, ea = self.a.ev(env)
        if self.fn == "sum":
            return a.sum(1, keepdim=True), ea.sum(1, keepdim=True) + 2 * self.n * U["f32"] * a.abs().sum(1, keepdim=True)
        v = a.amax(1, keepdim=True) if self.fn == "amax" else a.amin(1, keepdim=True)
        return v, ea.amax(1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# Expression strategy

@st.composite
def expr(draw, leaves, depth: int, *, bools=(), numbers=(), reduce_n: int = 0, hi_cap: float = HUGE, floats=FLOATS):
    """A float tile expression over `leaves` (Leaf/Acc/Scalar), `bools` (bool leaves) and
    `numbers` (Num) of at most `depth` levels, every intermediate bounded by `hi_cap`, every f16
    one by F16_SAFE (an f16 product of two inputs can pass 65504); `reduce_n` > 0 allows row
    reductions over rows of that many elements."""
    node = draw(_expr(leaves, depth, bools=bools, numbers=numbers, reduce_n=reduce_n, hi_cap=hi_cap, floats=floats))
    if node.dtype == "f16" and node.hi > F16_SAFE:
        return draw(st.sampled_from([x for x in leaves if x.kind != "scalar"]))
    return node


@st.composite
def _expr(draw, leaves, depth: int, *, bools, numbers, reduce_n, hi_cap, floats):
    tiles = [x for x in leaves if x.kind != "scalar"]

    def leaf():
        return draw(st.sampled_from(tiles))

    def number():
        return draw(st.sampled_from(list(numbers) + [Num(v) for v in NUMBERS]))

    def sub(d):
        return draw(expr(leaves, d, bools=bools, numbers=numbers, reduce_n=reduce_n, hi_cap=hi_cap, floats=floats))

    if depth <= 0:
        return leaf()
    choice = draw(st.sampled_from(["leaf", "bin", "bin_num", "div", "fn", "fn", "maxmin", "cast", "where", "reduce",
                                   "scalar", "boolnum"] + ["reduce"] * (2 if reduce_n else 0)))
    if choice == "leaf":
        return leaf()
    if choice == "boolnum" and (bools or any(isinstance(x, Leaf) for x in leaves)):
        return BoolNum(draw(cond(leaves, bools, numbers)))
    if choice == "scalar":
        scalars = [x for x in leaves if x.kind == "scalar"]
        if not scalars:
            return leaf()
        x = sub(depth - 1)
        node = Bin(draw(st.sampled_from("+*")), x, draw(st.sampled_from(scalars)))
        return node if node.hi <= hi_cap else x
    if choice == "bin":
        a, b = sub(depth - 1), sub(depth - 1)
        node = Bin(draw(st.sampled_from("+-*")), a, b)
        return node if node.hi <= hi_cap else Bin("+", a, b) if a.hi + b.hi <= hi_cap else a
    if choice == "bin_num":
        a, n = sub(depth - 1), number()
        op = draw(st.sampled_from("+-*"))
        node = Bin(op, n, a) if draw(st.booleans()) else Bin(op, a, n)
        return node if node.hi <= hi_cap else a
    if choice == "div":
        a = sub(depth - 1) if draw(st.booleans()) else Num(draw(st.sampled_from([1.0, 2.0, -1.5])))
        d = Bin("+", Abs(sub(depth - 1)), Num(draw(st.sampled_from([1.0, 2.0]))))
        if a.dtype is None and d.dtype is None:
            return leaf()
        return Bin("/", a, d)
    if choice == "fn":
        fn = draw(st.sampled_from(["exp", "exp2", "log", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "sqrt",
                                   "rsqrt", "neg", "pow", "abs"]))
        a = sub(depth - 1)
        if fn == "abs":
            return Abs(a)
        if fn in ("log", "rsqrt", "pow"):
            a = Bin("+", Abs(a), Num(1.0))
        elif fn == "sqrt":
            a = Abs(a)
        elif fn in ("exp", "exp2", "sin", "cos") and a.hi > 8.0:
            a = Fn(draw(st.sampled_from(["tanh", "sigmoid", "sin"])), a)
        node = Fn(fn, a, draw(st.sampled_from([0.5, 1.5, 2.0])) if fn == "pow" else 0.0)
        return node if node.hi <= hi_cap else a
    if choice == "maxmin":
        a = sub(depth - 1)
        b = number() if draw(st.booleans()) else sub(depth - 1)
        return MaxMin(draw(st.sampled_from(["max", "min"])), a, b)
    if choice == "cast":
        a = sub(depth - 1)
        to = draw(st.sampled_from(floats))
        if to == "f16" and a.hi > F16_SAFE:
            to = "f32"
        return Cast(a, to)
    if choice == "where" and (bools or any(isinstance(x, Leaf) for x in leaves)):
        c = draw(cond(leaves, bools, numbers))
        a = sub(depth - 1)
        b = number() if draw(st.booleans()) else sub(depth - 1)
        if draw(st.booleans()):
            a, b = b, a
        if a.dtype is None and b.dtype is None:
            return leaf()
        return Where(c, a, b)
    if choice == "reduce" and reduce_n:
        a = sub(depth - 1)
        if a.kind != "full":
            return a
        node = Reduce(draw(st.sampled_from(["sum", "amax", "amin"])), a, reduce_n)
        return node if node.hi <= hi_cap else a
    return leaf()


@st.composite
def cond(draw, leaves, bools, numbers):
    """A bool tile from exact operands."""
    exact = [x for x in leaves if isinstance(x, Leaf)]
    options = (["num"] if exact else []) + (["pair"] if len(exact) > 1 else []) + (["bool", "boolcmp"] if bools else [])
    kind = draw(st.sampled_from(options))
    if kind == "bool":
        return draw(st.sampled_from(bools))
    if kind == "boolcmp":
        other = draw(cond(leaves, (), numbers)) if exact else draw(st.sampled_from(bools))
        return BoolCmp(draw(st.sampled_from(["==", "!="])), draw(st.sampled_from(bools)), other)
    op = draw(st.sampled_from(["<", "<=", ">", ">=", "==", "!="]))
    a = draw(st.sampled_from(exact))
    if kind == "pair":
        b = draw(st.sampled_from(exact))
        return Cmp(op, a, b)
    b = draw(st.sampled_from([Num(v) for v in (0.0, 0.5, -1.0, 2.0, 4.0)]))
    return Cmp(op, b, a) if draw(st.booleans()) else Cmp(op, a, b)


# ---------------------------------------------------------------------------------------------
# Programs

@dataclass(frozen=True)
class Program:
    """One generated kernel: a template, its dims and constants, inputs and output trees.

    template: "map2d" | "rows" | "rowloop" | "gemm" | "gather" | "cluster" | "sddmm"
    dims, consts: (name, value) pairs (the kernel's `where` defaults and `<...>` constants)
    inputs: (name, dtype, shape) in call order; shape "MN" [M, N], "N" [N], "M1" [M, 1],
        "MK", "KN", "VN" (gather table), "B" (i32 index tensor), "scalar" (a runtime `i32`),
        "pattern" (dtype csr or coo)
    outputs: (name, dtype, expression tree)
    accs: `rowloop`'s (name, "sum" | "amax" | "amin", tree) accumulators; `gemm`'s
        ("acc", operand dtype, prologue tree)
    loop: "range" | "pipelined" (rowloop, gemm), "pull" | "push" (cluster: how the peer's row
        arrives), "values" | "dense" (sddmm: P in S's order or dense)
    """
    template: str
    dims: tuple
    consts: tuple
    inputs: tuple
    outputs: tuple
    accs: tuple = ()
    loop: str = "range"

    # -- rendering -----------------------------------------------------------------------------
    def d(self, name):
        return dict(self.dims + self.consts)[name]

    def _shape(self, s):
        return {"MN": "[M, N]", "N": "[N]", "M1": "[M, 1]", "MK": "[M, K]", "KN": "[K, N]", "VN": "[V, N]",
                "B": "[M]"}[s]

    def _out_shape(self, expr_kind):
        return "[M, 1]" if expr_kind == "col" and self.template in ("rows", "rowloop", "gather") else "[M, N]"

    def _rows(self) -> str:
        """The slice of a block's rows: BM rows, or one for the one-row-per-block templates."""
        return "m : +1" if self.template in ("gather", "cluster") else "m*BM : +BM"

    def _load(self, name, dtype, shape):
        """The statement that loads input `name`'s tile (None for a scalar or index tensor)."""
        t = self.template
        if shape in ("scalar", "B", "MK", "KN"):
            return None
        if shape == "VN":
            return f"{name.lower()} = {name}[ids[m] : +1, :]"
        rows, cols = self._rows(), {"map2d": "n*BN : +BN", "gemm": "n*BN : +BN", "rowloop": "j*BN : +BN"}.get(t, ":")
        if shape == "N":
            return f"{name.lower()} = {name}[{cols}]"
        if shape == "M1":
            return f"{name.lower()} = {name}[{rows}, :]"
        return f"{name.lower()} = {name}[{rows}, {cols}]"

    def source(self) -> str:
        t = self.template
        consts = ", ".join(f"{k}={v}" for k, v in self.consts)
        if t == "sddmm":
            (_, pdt, _), = self.outputs
            dense = self.loop == "dense"
            ins = ", ".join(f"{n}: {dt}[M, K]" if n == "A" else f"{n}: {dt}[K, N]" if n == "B" else f"{n}: {dt}[M, N, NNZ]"
                            for n, dt, _ in self.inputs)
            return "\n".join([
                HEADER + repr(self),
                f"kernel fuzz<{consts}>({ins}) -> (P: f32{'[M, N]' if dense else '[NNZ]'})",
                "    where " + ", ".join(f"{k} = {v}" for k, v in self.dims),
                f'    reference "{self.reference()}"',
                "{",
                f"    grid (tiles(S, BM, BN)) as (m, n){' threads(threads)' if 'threads' in dict(self.consts) else ''}",
                "    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]",
                "}"]) + "\n"
        ins = []
        for name, dtype, shape in self.inputs:
            ins.append(f"{name}: i32" if shape == "scalar" else f"{name}: {dtype}{self._shape(shape)}")
        outs = ", ".join(f"{name}: {dtype}{self._out_shape(e.kind)}" for name, dtype, e in self.outputs)
        scalars = [n for n, _, s in self.inputs if s == "scalar"]
        lines = [HEADER + repr(self), f"kernel fuzz{f'<{consts}>' if consts else ''}({', '.join(ins)}) -> ({outs})",
                 "    where " + ", ".join(f"{k} = {v}" for k, v in self.dims)]
        for s in scalars:
            lines.append(f"    requires {s} < 8")
        if t == "cluster":
            lines.append("    requires M % 2 == 0")
        lines.append(f'    reference "{self.reference()}"')
        lines.append("{")
        body = []
        threads = f" threads({self.d('threads')})" if "threads" in dict(self.consts) else ""
        if t in ("map2d", "gemm"):
            body.append(f"grid (cdiv(M, BM), cdiv(N, BN)) as (m, n){threads}")
        elif t in ("rows", "rowloop"):
            body.append(f"grid (cdiv(M, BM)) as (m){threads}")
        elif t == "gather":
            body.append(f"grid (M) as (m){threads}")
        elif t == "cluster":
            body.append(f"grid (M) as (m) cluster (2) as (r){threads}")
        loads = [self._load(n, dt, s) for n, dt, s in self.inputs]
        loop_inputs = {n for n, _, s in self.inputs if s in ("MN", "N")} if t == "rowloop" else set()
        for ld, (n, _, s) in zip(loads, self.inputs):
            if ld and n not in loop_inputs:
                body.append(ld)
        if t == "rowloop":
            for name, fn, _ in self.accs:
                init = "zeros(f32[BM, 1])" if fn == "sum" else f"full(f32[BM, 1], {'-' if fn == 'amax' else ''}3.0e38)"
                body.append(f"{name} = {init}")
            head = "range(cdiv(N, BN))" if self.loop == "range" else "pipelined(cdiv(N, BN), stages)"
            body.append(f"for j in {head} {{")
            for ld, (n, _, s) in zip(loads, self.inputs):
                if ld and n in loop_inputs:
                    body.append("    " + ld)
            for name, fn, e in self.accs:
                if fn == "sum":
                    body.append(f"    {name} += sum({e.tk()}, 1)")
                else:
                    body.append(f"    {name} = {'max' if fn == 'amax' else 'min'}({name}, {fn}({e.tk()}, 1))")
            body.append("}")
        if t == "gemm":
            (_, opdt, pro), = self.accs
            head = "range(cdiv(K, BK))" if self.loop == "range" else "pipelined(cdiv(K, BK), stages)"
            body.append("acc = zeros(f32[BM, BN])")
            body.append(f"for k in {head} {{")
            body.append("    a = A[m*BM : +BM, k*BK : +BK]")
            body.append(f"    acc += cast({pro.tk()}, {opdt}) @ B[k*BK : +BK, n*BN : +BN]")
            body.append("}")
        if t == "cluster" and self.loop == "pull":
            body.append("sh = shared(x)")
            body.append("x = peer(sh, (r + 1) % 2)")
        elif t == "cluster":
            dt = dict((n, d) for n, d, _ in self.inputs)["X"]
            body.append(f"sh = shared({dt}[1, N])")
            body.append("peer(sh, (r + 1) % 2) = x")
            body.append("x = sh")
        for name, dtype, e in self.outputs:
            rows, cols = self._rows(), "n*BN : +BN" if t in ("map2d", "gemm") else ":"
            value = e.tk()
            if e.dtype != dtype:
                value = f"cast({value}, {dtype})"
            body.append(f"{name}[{rows}, {cols}] = {value}")
        lines += ["    " + b for b in body]
        lines.append("}")
        return "\n".join(lines) + "\n"

    # -- the reference and the bound -------------------------------------------------------------
    def _env_names(self):
        return [n for n, _, s in self.inputs if s not in ("scalar",)]

    def reference(self) -> str:
        """The plain torch float64 math of the outputs, over whole tensors (the tiles' padding
        with zeros made explicit where the kernel reads past the end inside a loop)."""
        t = self.template
        if t == "sddmm":
            if self.loop == "dense":
                return "torch.zeros(M, N, dtype=torch.float64).index_put((S_rows, S_cols), (A @ B)[S_rows, S_cols])"
            return "(A @ B)[S_rows, S_cols]"
        outs = [e.ref() for _, _, e in self.outputs]
        if t == "rowloop":
            pad = self.d("BN") * -(-self.d("N") // self.d("BN")) - self.d("N")
            padded = [n for n, _, s in self.inputs if s in ("MN", "N")]
            accs = []
            for name, fn, e in self.accs:
                accs.append(f"{e.ref()}.{fn}(1, keepdim=True)")
            inner = f"(lambda {', '.join(padded)}: ({', '.join(accs)},))({', '.join(f'F.pad({n}, (0, {pad}))' for n in padded)})"
            names = [a for a, _, _ in self.accs]
            return f"(lambda {', '.join(names)}: ({', '.join(outs)},))(*{inner})"
        if t == "gemm":
            (_, _, pro), = self.accs
            return f"(lambda acc: ({', '.join(outs)},))((lambda a: {pro.ref()})(A) @ B)"
        if t == "gather":
            tables = [n for n, _, s in self.inputs if s == "VN"]
            return f"(lambda {', '.join(tables)}: ({', '.join(outs)},))({', '.join(f'{n}[ids.long()]' for n in tables)})"
        if t == "cluster":
            return f"(lambda X: ({', '.join(outs)},))(X.view(-1, 2, X.shape[1]).flip(1).reshape(X.shape))"
        return f"({', '.join(outs)},)"

    def expected(self, named: dict):
        """(value, bound) per output in float64, from the inputs by name (tensors as the kernel
        received them, runtime scalars as ints)."""
        import torch.nn.functional as F

        env = {}
        for n, t in named.items():
            if hasattr(t, "rows") and hasattr(t, "cols"):  # a sparse pattern
                env[n + "_rows"], env[n + "_cols"] = t.rows.long().cpu(), t.cols.long().cpu()
                continue
            env[n] = t if isinstance(t, int) else t.cpu() if t.dtype == torch.bool else t.double().cpu()
        t = self.template
        if t == "sddmm":
            a, b = env["A"], env["B"]
            rows, cols = env["S_rows"], env["S_cols"]
            v = (a @ b)[rows, cols]
            e = 2 * self.d("K") * U["f32"] * (a.abs() @ b.abs())[rows, cols]
            if self.loop == "dense":
                m, n = self.d("M"), self.d("N")
                v = torch.zeros(m, n, dtype=torch.float64).index_put((rows, cols), v)
                e = torch.zeros(m, n, dtype=torch.float64).index_put((rows, cols), e)
            return [("P", "f32", v, e)]
        if t == "rowloop":
            pad = self.d("BN") * -(-self.d("N") // self.d("BN")) - self.d("N")
            for n, _, s in self.inputs:
                if s in ("MN", "N"):
                    env[n] = F.pad(env[n], (0, pad))
            ncols = self.d("N") + pad
            for name, fn, e in self.accs:
                v, err = e.ev(env)
                v = v.expand(self.d("M"), ncols)  # a full-kind tree; a row or number broadcasts
                err = err.expand_as(v)
                if fn == "sum":
                    env[name] = v.sum(1, keepdim=True)
                    env["err:" + name] = err.sum(1, keepdim=True) + 2 * ncols * U["f32"] * v.abs().sum(1, keepdim=True)
                else:
                    env[name] = v.amax(1, keepdim=True) if fn == "amax" else v.amin(1, keepdim=True)
                    env["err:" + name] = err.amax(1, keepdim=True)
        elif t == "gemm":
            (_, opdt, pro), = self.accs
            env["a"] = env["A"]
            a, ea = pro.ev(env)
            a = a.expand(env["A"].shape)
            ea = (ea + a.abs() * U[opdt] + U_ABS[opdt]).expand(env["A"].shape)
            b = env["B"]
            kk = self.d("K")
            env["acc"] = a @ b
            env["err:acc"] = ea @ b.abs() + 2 * kk * U["f32"] * (a.abs() @ b.abs())
        elif t == "gather":
            for n, _, s in self.inputs:
                if s == "VN":
                    env[n] = env[n][env["ids"].long()]
        elif t == "cluster":
            x = env["X"]
            env["X"] = x.view(-1, 2, x.shape[1]).flip(1).reshape(x.shape)
        out = []
        for name, dtype, e in self.outputs:
            v, err = e.ev(env)
            shape = (self.d("M"), 1) if self._out_shape(e.kind) == "[M, 1]" else (self.d("M"), self.d("N"))
            v, err = v.expand(shape), err.expand(shape)
            if e.dtype != dtype and dtype in ("f16", "bf16"):
                err = err + v.abs() * U[dtype] + U_ABS[dtype]
            out.append((name, dtype, v, err))
        return out

    def check(self, results, named: dict) -> str | None:
        """None when every output is within its bound, else a message naming the first element
        that is not."""
        for (name, dtype, v, err), r in zip(self.expected(named), results):
            r = r.double().cpu() if isinstance(r, torch.Tensor) else torch.as_tensor(r, dtype=torch.float64)
            if tuple(r.shape) != tuple(v.shape):
                return f"`{name}`: shape {tuple(r.shape)}, expected {tuple(v.shape)}"
            allowed = 2 * err + U.get(dtype, 0.0) * v.abs() + U_ABS.get(dtype, 0.0) + 1e-300
            bad = ~((r - v).abs() <= allowed)
            if bad.any():
                idx = tuple(int(i) for i in bad.nonzero()[0])
                return (f"`{name}`{list(idx)}: got {r[idx].item()!r}, expected {v[idx].item()!r} "
                        f"± {allowed[idx].item():.3g} ({int(bad.sum())} of {bad.numel()} elements off)")
        return None

    @staticmethod
    def from_source(text: str) -> "Program":
        first = text.splitlines()[0]
        if not first.startswith(HEADER):
            raise ValueError("not a generated program (no `# fuzz-program:` first line)")
        scope = {c.__name__: c for c in (Program, Leaf, Acc, Num, Scalar, Bin, Abs, Fn, MaxMin, Cast, Cmp, BoolLeaf,
                                         BoolCmp, Where, BoolNum, Reduce)}
        return eval(first[len(HEADER):], scope)  # our own repr (tests/fuzz_regressions)


# ---------------------------------------------------------------------------------------------
# Templates

@st.composite
def _inputs(draw, shapes: list[str], floats, prefix: str = "X"):
    out = []
    for i, s in enumerate(shapes):
        out.append((f"{prefix}{i}", draw(st.sampled_from(floats)), s))
    return out


def _leaf(name, dtype, shape):
    return Leaf(name, dtype, {"MN": "full", "N": "row", "M1": "col", "VN": "full"}[shape])


@st.composite
def _outputs(draw, leaves, depth, floats, bools=(), numbers=(), reduce_n=0, kinds=("full",), n_max=2):
    outs = []
    for i in range(draw(st.integers(1, n_max))):
        e = draw(expr(leaves, depth, bools=bools, numbers=numbers, reduce_n=reduce_n, floats=floats))
        if e.kind not in kinds or e.dtype is None:
            e = Bin("+", e, next(x for x in leaves if x.kind == "full"))
        dtype = draw(st.sampled_from(floats))
        if dtype == "f16" and e.hi > F16_SAFE:
            dtype = "f32"
        outs.append((f"O{i}", dtype, e))
    return outs


@st.composite
def _sddmm(draw, floats):
    """The sampled gemm: a CSR or COO pattern (empty, full, or in between) of an M x N matrix that
    is rarely a multiple of the tiles, values in S's order or a dense P."""
    consts = {"BM": draw(st.sampled_from([16, 32, 64])), "BN": draw(st.sampled_from([16, 32, 64]))}
    if draw(st.booleans()):
        consts["threads"] = draw(st.sampled_from([128, 256]))
    m, n, k = draw(st.integers(1, 100)), draw(st.integers(1, 100)), draw(st.integers(1, 64))
    nnz = draw(st.one_of(st.just(0), st.just(min(m * n, 1200)), st.integers(0, min(m * n, 400))))
    dt = draw(st.sampled_from(floats))
    inputs = (("A", dt, "MK"), ("B", dt, "KN"), ("S", draw(st.sampled_from(["csr", "coo"])), "pattern"))
    return Program("sddmm", (("M", m), ("N", n), ("K", k), ("NNZ", nnz)), tuple(consts.items()), inputs,
                   (("P", "f32", None),), (), draw(st.sampled_from(["values", "dense"])))


@st.composite
def programs(draw, templates=("map2d", "rows", "rowloop", "gemm", "gather", "cluster", "sddmm"), max_depth: int = 4,
             floats=FLOATS):
    """A random valid program (see the module docstring) of one of `templates`, with float
    dtypes from `floats` (`tilelang-cpu` has no bf16)."""
    t = draw(st.sampled_from(templates))
    if t == "sddmm":
        return draw(_sddmm(floats))
    depth = draw(st.integers(1, max_depth))
    scalar = draw(st.booleans())
    consts = {}
    if t == "gemm":
        consts.update(BM=draw(st.sampled_from([16, 32, 64])), BN=draw(st.sampled_from([16, 32, 64])),
                      BK=draw(st.sampled_from([16, 32])))
    elif t in ("map2d", "rowloop"):
        consts.update(BM=draw(st.sampled_from([8, 16, 32])), BN=draw(st.sampled_from([16, 32, 64])))
    elif t == "rows":
        consts.update(BM=draw(st.sampled_from([4, 8, 16])))
    loop = "range"
    if t in ("rowloop", "gemm") and draw(st.booleans()):
        loop = "pipelined"
        consts["stages"] = draw(st.integers(2, 3))
    if draw(st.booleans()):
        consts["threads"] = draw(st.sampled_from([64, 128, 256]))
    if t == "cluster":
        consts["threads"] = 128
        loop = draw(st.sampled_from(["pull", "push"]))
    if t == "cluster":
        dims = {"M": 2 * draw(st.integers(1, 3)), "N": draw(st.integers(1, 300))}
    elif t == "gather":
        dims = {"M": draw(st.integers(1, 12)), "V": draw(st.integers(1, 20)), "N": draw(st.integers(1, 160))}
    else:
        bm, bn = consts.get("BM", 8), consts.get("BN", 32)
        dims = {"M": draw(st.integers(1, 3 * bm + 1)), "N": draw(st.integers(1, 3 * bn + 1 if t != "rows" else 130))}
        if t == "gemm":
            dims["K"] = draw(st.integers(1, 3 * consts["BK"] + 1))
    numbers = [Num(float(dims["N"]), "N")] + ([Num(float(consts["BN"]), "BN")] if "BN" in consts else [])
    inputs, outputs, accs = [], [], []
    bools = []
    if t in ("map2d", "rows", "gather", "rowloop"):
        shapes = draw(st.lists(st.sampled_from(["MN", "MN", "N", "M1"]), min_size=1, max_size=3))
        if "MN" not in shapes:
            shapes[0] = "MN"
        inputs = draw(_inputs(shapes, floats))
        if t == "gather":
            inputs = [("ids", "i32", "B"), ("E", draw(st.sampled_from(floats)), "VN")] + inputs
        if draw(st.booleans()) and t != "rowloop":
            inputs.append(("K0", "bool", "MN"))
            bools = [BoolLeaf("K0")]
    elif t == "gemm":
        inputs = [("A", draw(st.sampled_from(floats)), "MK")]
        opdt = draw(st.sampled_from([f for f in ("f16", "bf16") if f in floats]))
        inputs.append(("B", opdt, "KN"))
        extra = draw(st.lists(st.sampled_from(["MN", "N", "M1"]), max_size=2))
        inputs += draw(_inputs(extra, floats))
    elif t == "cluster":
        inputs = [("X", draw(st.sampled_from(floats)), "MN")] + draw(_inputs(draw(st.lists(st.sampled_from(["MN", "N"]), max_size=1)), floats, "Y"))
    if scalar:
        inputs.append(("p", "i32", "scalar"))
    leaves = [_leaf(n, dt, s) for n, dt, s in inputs if s in ("MN", "N", "M1", "VN") and dt != "bool"]
    if scalar:
        leaves.append(Scalar("p", 7.0))
    if t == "map2d":
        outputs = draw(_outputs(leaves, depth, floats, bools, numbers))
    elif t in ("rows", "gather"):
        outputs = draw(_outputs(leaves, depth, floats, bools, numbers, reduce_n=dims["N"], kinds=("full", "col")))
    elif t == "cluster":
        outputs = draw(_outputs(leaves, depth, floats, bools, numbers, reduce_n=dims["N"], kinds=("full",), n_max=1))
    elif t == "rowloop":
        for i in range(draw(st.integers(1, 2))):
            fn = draw(st.sampled_from(["sum", "sum", "amax", "amin"]))
            e = draw(expr(leaves, depth - 1, numbers=numbers, hi_cap=1e6, floats=floats))
            if e.kind != "full":
                e = Bin("*", e, next(x for x in leaves if x.kind == "full"))
            accs.append((f"s{i}", fn, e))
        acc_leaves = [Acc(n, "col", e.hi * (dims["N"] + consts["BN"] if fn == "sum" else 1)) for n, fn, e in accs]
        cols = [x for x in leaves if x.kind in ("col", "scalar")]
        outs = []
        for i in range(draw(st.integers(1, 2))):
            e = draw(expr(acc_leaves + cols, draw(st.integers(0, 2)), numbers=numbers, floats=floats))
            if e.dtype is None:
                e = acc_leaves[0]
            dtype = draw(st.sampled_from(floats))
            if dtype == "f16" and e.hi > F16_SAFE:
                dtype = "f32"
            outs.append((f"O{i}", dtype, e))
        outputs = outs
    elif t == "gemm":
        a_leaf = Leaf("a", inputs[0][1], "full")
        pro = draw(expr([a_leaf], draw(st.integers(0, 2)), numbers=numbers, hi_cap=F16_SAFE, floats=floats))
        if not isinstance(pro, Leaf) and pro.kind != "full" or pro.dtype is None:
            pro = a_leaf
        if pro.hi > F16_SAFE:
            pro = Fn("tanh", pro)
        accs = [("acc", inputs[1][1], pro)]
        acc_leaf = Acc("acc", "full", pro.hi * INPUT_HI * (dims["K"] + consts["BK"]))
        extra_leaves = [x for x in leaves if x.name not in ("A", "B")]
        outputs = []
        for i in range(draw(st.integers(1, 2))):
            e = draw(expr([acc_leaf] + extra_leaves, draw(st.integers(0, 2)), numbers=numbers, floats=floats))
            if e.kind != "full" or e.dtype is None:
                e = Bin("+", acc_leaf, e) if e.dtype is not None else acc_leaf
            dtype = draw(st.sampled_from(floats))
            if dtype == "f16" and e.hi > F16_SAFE:
                dtype = "f32"
            outputs.append((f"O{i}", dtype, e))
    return Program(t, tuple(dims.items()), tuple(consts.items()), tuple(inputs), tuple(outputs), tuple(accs), loop)

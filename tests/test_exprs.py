"""dsl/exprs.py: the index-expression language (print/parse, evaluate, substitute, bounds)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dsl import exprs
from dsl.exprs import Bin, Call, Num, Sym
from profiles import examples

NAMES = ("M", "K", "BM", "m", "s")
ARITH = ("+", "-", "*", "/", "%")
CMPS = ("==", "!=", "<", "<=", ">", ">=")


def _leaves(min_value: int):
    return st.one_of(st.integers(min_value, 40).map(Num), st.sampled_from(NAMES).map(Sym))


def _trees(leaves, ops, positive_divisors: bool):
    """Expression trees over `leaves`; with `positive_divisors`, every divisor (of / % cdiv) is
    `x + c` with c >= 1 (positive whenever x is non-negative)."""

    def extend(children):
        divisor = st.builds(lambda x, c: Bin("+", x, Num(c)), children, st.integers(1, 9)) \
            if positive_divisors else children
        return st.one_of(
            st.builds(Bin, st.sampled_from([o for o in ops if o not in ("/", "%")]), children, children),
            st.builds(Bin, st.sampled_from([o for o in ops if o in ("/", "%")]), children, divisor),
            st.builds(lambda a, b: Call("cdiv", (a, b)), children, divisor),
            st.builds(lambda f, a, b: Call(f, (a, b)), st.sampled_from(["min", "max"]), children, children),
        )

    return st.recursive(leaves, extend, max_leaves=12)


# Any tree (negative numbers, comparisons nested anywhere): for printing and parsing.
any_exprs = _trees(st.one_of(st.integers(-50, 50).map(Num), st.sampled_from(NAMES).map(Sym)),
                   ARITH + CMPS, positive_divisors=False)
# Non-negative index arithmetic with positive divisors: the domain bounds() promises soundness on.
index_exprs = _trees(_leaves(0), ("+", "*", "/", "%"), positive_divisors=True)
envs = st.fixed_dictionaries({n: st.integers(0, 100) for n in NAMES})


def py_value(e, env):
    """Python's own arithmetic on the printed text (`/` is floor division on indices)."""
    text = exprs.to_str(e).replace("/", "//")
    funcs = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}
    return int(eval(text, {"__builtins__": {}}, {**funcs, **env}))


# ---- printing and parsing ---------------------------------------------------------------------
@pytest.mark.parametrize("text", ["m * 64 + s", "cdiv(M, BM)", "K % R == 0", "(a + b) * c", "a - (b - c)",
                                  "a / b / c", "a / (b / c)", "min(a, max(b, 3))", "(-3) * x", "(a < b) + 1"])
def test_canonical_text_is_a_fixed_point(text):
    assert exprs.to_str(exprs.parse(text)) == text


@pytest.mark.parametrize("text,tree", [
    ("a - b - c", Bin("-", Bin("-", Sym("a"), Sym("b")), Sym("c"))),
    ("a - (b - c)", Bin("-", Sym("a"), Bin("-", Sym("b"), Sym("c")))),
    ("a + b * c", Bin("+", Sym("a"), Bin("*", Sym("b"), Sym("c")))),
    ("K % R == 0", Bin("==", Bin("%", Sym("K"), Sym("R")), Num(0))),
    ("-4", Num(-4)),
    ("cdiv(M, 64)", Call("cdiv", (Sym("M"), Num(64)))),
])
def test_parse_builds_the_tree(text, tree):
    assert exprs.parse(text) == tree


@pytest.mark.parametrize("text", ["cdiv(M)", "foo(1, 2)", "1 +", "a b", "(a", ""])
def test_parse_rejects_malformed_text(text):
    with pytest.raises(exprs.ExprError):
        exprs.parse(text)


def _no_left_nested_comparison(e) -> bool:
    if isinstance(e, Bin):
        if e.op in CMPS and isinstance(e.a, Bin) and e.a.op in CMPS:
            return False
        return _no_left_nested_comparison(e.a) and _no_left_nested_comparison(e.b)
    if isinstance(e, Call):
        return all(_no_left_nested_comparison(a) for a in e.args)
    return True


@settings(max_examples=examples(200, 1000))
@given(any_exprs)
def test_print_parse_fixed_point(e):
    assume(_no_left_nested_comparison(e))  # see test_comparison_of_a_comparison_round_trips
    text = exprs.to_str(e)
    assert exprs.parse(text) == e
    assert exprs.to_str(exprs.parse(text)) == text


def test_comparison_of_a_comparison_round_trips():
    e = Bin("<", Bin("<", Sym("a"), Sym("b")), Sym("c"))
    assert exprs.parse(exprs.to_str(e)) == e


# ---- evaluation -------------------------------------------------------------------------------
@settings(max_examples=examples(200, 1000))
@given(any_exprs, envs)
def test_evaluate_agrees_with_python(e, env):
    assume(_no_left_nested_comparison(e))  # Python would chain `a < b < c`
    try:
        want = py_value(e, env)
    except ZeroDivisionError:
        with pytest.raises(exprs.ExprError):
            exprs.evaluate(e, env)
        return
    assert exprs.evaluate(e, env) == want


def test_evaluate_unknown_name_and_division_by_zero():
    with pytest.raises(exprs.ExprError, match="unknown name `Q`"):
        exprs.evaluate(exprs.parse("Q + 1"), {})
    with pytest.raises(exprs.ExprError, match="division by zero"):
        exprs.evaluate(exprs.parse("M / (K - K)"), {"M": 3, "K": 5})


@settings(max_examples=examples(200, 1000))
@given(any_exprs, envs, st.sets(st.sampled_from(NAMES)))
def test_substitute_preserves_value(e, env, bound):
    try:
        want = exprs.evaluate(e, env)
    except exprs.ExprError:
        return
    partial = {n: env[n] for n in bound}
    try:
        folded = exprs.substitute(e, partial)
    except exprs.ExprError:
        pytest.fail(f"substitute raised on {exprs.to_str(e)} although it evaluates to {want}")
    assert exprs.names(folded) <= set(NAMES) - bound
    assert exprs.evaluate(folded, env) == want


@settings(max_examples=examples(100, 500))
@given(any_exprs, envs)
def test_substitute_everything_gives_a_number(e, env):
    try:
        want = exprs.evaluate(e, env)
    except exprs.ExprError:
        return
    assert exprs.substitute(e, env) == Num(want)


def test_substitute_folds_identities():
    assert exprs.substitute(exprs.parse("m * BM + 0"), {"BM": 1}) == Sym("m")
    assert exprs.substitute(exprs.parse("m * BM"), {"BM": 0}) == Num(0)
    assert exprs.to_str(exprs.substitute(exprs.parse("cdiv(M, BM) * s"), {"M": 100, "BM": 32})) == "4 * s"


# ---- bounds -----------------------------------------------------------------------------------
@st.composite
def ranges_and_points(draw):
    ranges = {}
    for n in NAMES:
        lo = draw(st.integers(0, 60))
        ranges[n] = (lo, lo + draw(st.integers(0, 60)))
    points = draw(st.lists(st.fixed_dictionaries({n: st.integers(*ranges[n]) for n in NAMES}),
                           min_size=1, max_size=8))
    corners = [{n: ranges[n][i] for n in NAMES} for i in (0, 1)]
    return ranges, points + corners


@settings(max_examples=examples(200, 1000))
@given(index_exprs, ranges_and_points())
def test_bounds_is_sound(e, rp):
    ranges, points = rp
    lo, hi = exprs.bounds(e, ranges)
    assert lo <= hi
    for env in points:
        v = exprs.evaluate(e, env)
        assert lo <= v <= hi, f"{exprs.to_str(e)} = {v} at {env}, outside [{lo}, {hi}]"


def test_bounds_of_tile_offsets_are_tight():
    assert exprs.bounds(exprs.parse("m * 64 + 64"), {"m": (0, 3)}) == (64, 256)
    assert exprs.bounds(exprs.parse("s * 32"), {"s": (0, 7)}) == (0, 224)
    assert exprs.bounds(exprs.parse("m % 4"), {"m": (0, 100)}) == (0, 3)


def test_bounds_unknown_name():
    with pytest.raises(exprs.ExprError, match="unknown name `q`"):
        exprs.bounds(exprs.parse("q + 1"), {})


@pytest.mark.parametrize("text", ["x / y", "cdiv(x, y)"])
def test_bounds_with_divisor_range_through_zero(text):
    e = exprs.parse(text)
    ranges = {"x": (10, 10), "y": (0, 2)}
    try:
        lo, hi = exprs.bounds(e, ranges)
    except exprs.ExprError:
        return  # refusing is sound too
    for y in (1, 2):
        assert lo <= exprs.evaluate(e, {"x": 10, "y": y}) <= hi

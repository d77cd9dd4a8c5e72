"""dsl/ir.py printer, dsl/ir_parser.py parser and dsl/verifier.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsl import exprs
from dsl import ops as O
from dsl.diagnostics import Loc, TkError
from dsl.ops import EXPR_ATTRS
from dsl.ir import Module, Region, Value, format_attr, print_module
from dsl.ir_parser import parse_module
from dsl.types import DTYPES, SPACES, TileType
from dsl.verifier import verify
from profiles import examples

HEADER = ('tile.func() {consts = {BM = 32}, dims = {K = 64, M = 100}, outputs = [1], reference = "A", '
          'sym_name = "k"} loc("k.tk":1:1) {\n^(%A: global<f16[M, K]>, %C: global<f16[M, K]>)\n')
GOOD = HEADER + '''\
  tile.launch() {grid = ["cdiv(M, BM)"], threads = "128", vars = ["m"]} loc("k.tk":3:5) {
    %x = tile.alloc() : frag<f16[BM, K]> loc("k.tk":4:9)
    tile.copy(%A, %x) {src_offsets = ["m * BM", "0"]} loc("k.tk":4:13)
    tile.elementwise(%x, %x) {fn = "relu"} loc("k.tk":5:9)
    tile.copy(%x, %C) {dst_offsets = ["m * BM", "0"]} loc("k.tk":6:9)
  }
}
'''


def body(*lines: str) -> str:
    """IR text of a kernel whose launch region holds `lines` (each one op, without indentation)."""
    ops = "".join(f"    {line}\n" for line in lines)
    return HEADER + ('  tile.launch() {grid = ["cdiv(M, BM)"], threads = "128", vars = ["m"]} loc("k.tk":3:5) {\n'
                     + ops + "  }\n}\n")


def diagnostics(text: str) -> list:
    with pytest.raises(TkError) as info:
        parse_module(text, "t.tkir")
    return info.value.diagnostics


def test_parse_print_exact():
    m = parse_module(GOOD, "t.tkir")
    assert print_module(m) == GOOD
    launch = m.func.body.ops[0]
    alloc, load, relu, store = launch.body.ops
    assert isinstance(alloc, O.AllocOp) and alloc.result.type == TileType("frag", "f16", (exprs.Sym("BM"), exprs.Sym("K")))
    assert load.operands == [m.func.body.args[0], alloc.result]  # uses resolve to the defining values
    assert store.operands[1] is m.func.body.args[1]
    assert relu.loc == Loc("k.tk", 5, 9)
    assert m.env == {"BM": 32, "K": 64, "M": 100}


def test_comments_are_ignored():
    text = "// RUN: tile\n" + GOOD.replace("  tile.launch", "  // a comment\n  tile.launch")
    assert print_module(parse_module(text, "t.tkir")) == GOOD


# ---- attributes -------------------------------------------------------------------------------
# Attribute names the verifier reads as index expressions hold expression text, not arbitrary values.
keys = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(lambda k: k not in EXPR_ATTRS)
scalars = st.one_of(st.integers(-2**62, 2**62), st.booleans(), st.text(max_size=12),
                    st.floats(allow_nan=False, allow_infinity=False))
attr_values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3),
                                                        st.dictionaries(keys, c, max_size=3)), max_leaves=8)


def _same(a, b) -> bool:
    if isinstance(a, float):
        return isinstance(b, float) and a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=examples(100, 500))
@given(st.dictionaries(keys, attr_values, min_size=1, max_size=4))
def test_attributes_round_trip(attrs):
    attrs.pop("fn", None)
    attrs.pop("axis", None)
    attrs["value"] = 0.5  # tile.fill's own attribute (required); the others ride along
    text = body("%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)",
                f"tile.fill(%x) {format_attr(attrs)} loc(\"k.tk\":5:9)")
    m = parse_module(text, "t.tkir")
    fill = m.func.body.ops[0].body.ops[1]
    assert _same(attrs, fill.attrs)
    assert print_module(m) == text


dims = st.recursive(
    st.one_of(st.integers(1, 4096).map(exprs.Num), st.sampled_from(["M", "K", "BM"]).map(exprs.Sym)),
    lambda c: st.one_of(st.builds(exprs.Bin, st.sampled_from(["+", "*"]), c, c),
                        st.builds(lambda a, b: exprs.Call("cdiv", (a, b)), c, st.integers(1, 64).map(exprs.Num))),
    max_leaves=5)


@settings(max_examples=examples(50, 300))
@given(st.sampled_from([s for s in SPACES if s != "global"]), st.sampled_from(sorted(DTYPES)),
       st.lists(dims, min_size=1, max_size=3),
       st.from_regex(r"[A-Za-z0-9_.]{1,8}", fullmatch=True).filter(lambda n: n not in ("A", "C")))
def test_types_and_value_names_round_trip(space, dtype, shape, name):
    t = TileType(space, dtype, tuple(shape))
    text = body(f"%{name} = tile.alloc() : {t} loc(\"k.tk\":4:9)")
    m = parse_module(text, "t.tkir")
    v = m.func.body.ops[0].body.ops[0].result
    assert v.name == name and v.type == t
    assert print_module(m) == text


def test_negative_constant_in_a_type_dim_round_trips():
    t = TileType("frag", "f16", (exprs.Bin("+", exprs.Sym("BM"), exprs.Num(-16)), exprs.Sym("K")))
    text = body(f"%x = tile.alloc() : {t} loc(\"k.tk\":4:9)")
    assert print_module(parse_module(text, "t.tkir")) == text


# ---- errors located in the IR text ------------------------------------------------------------
def _line_col(text: str, needle: str) -> tuple[int, int]:
    at = text.index(needle)
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


@pytest.mark.parametrize("line,needle,message", [
    ("tile.copy(%A, %nope) {src_offsets = [\"0\", \"0\"]} loc(\"k.tk\":4:9)", "%nope", "use of undefined value `%nope`"),
    ("tile.frob() loc(\"k.tk\":4:9)", "tile.frob", "unknown op `tile.frob`"),
    ("%x = tile.alloc() : frag<q7[4]> loc(\"k.tk\":4:9)", "frag<q7", "unknown dtype `q7`"),
    ("%x = tile.alloc() : vram<f16[4]> loc(\"k.tk\":4:9)", "vram<", "unknown memory space `vram`"),
    ("%x, %y = tile.alloc() : frag<f16[4]> loc(\"k.tk\":4:9)", "tile.alloc", "declares 2 results but 1 types"),
    ("%x = tile.alloc() : frag<f16[4]> loc(\"k.tk\":4:9) junk", "junk", "malformed IR text"),
])
def test_parse_errors_point_into_the_ir_text(line, needle, message):
    text = body(line)
    (d,) = diagnostics(text)
    assert message in d.message
    assert (d.loc.file, d.loc.line, d.loc.col) == ("t.tkir", *_line_col(text, needle))


def test_use_before_definition_in_text():
    text = body("tile.copy(%A, %x) {src_offsets = [\"0\", \"0\"]} loc(\"k.tk\":4:9)",
                "%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":5:9)")
    (d,) = diagnostics(text)
    assert "use of undefined value `%x`" in d.message
    assert (d.loc.line, d.loc.col) == _line_col(text, "%x)")


def test_value_out_of_scope_after_its_loop():
    text = body('tile.for() {hi = "2", kind = "serial", lo = "0", var = "i"} loc("k.tk":4:5) {',
                '  %t = tile.alloc() : frag<f16[BM, K]> loc("k.tk":5:9)',
                "}",
                'tile.fill(%t) {value = 1.0} loc("k.tk":7:9)')
    (d,) = diagnostics(text)
    assert "use of undefined value `%t`" in d.message and d.loc.line == _line_col(text, "tile.fill")[0]


# ---- verifier: violations located at the op's source location ---------------------------------
@pytest.mark.parametrize("lines,loc,message", [
    (["%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)", "%y = tile.alloc() : frag<f32[BM, 8]> loc(\"k.tk\":5:9)",
      "tile.copy(%x, %y) loc(\"k.tk\":7:2)"], (7, 2), "shape mismatch: `%x` is frag<f16[BM, K]>, `%y` is frag<f32[BM, 8]>"),
    (["%x = tile.alloc() : shared<f16[BM, K]> loc(\"k.tk\":4:9)", "%y = tile.alloc() : frag<f32[BM, 8]> loc(\"k.tk\":5:9)",
      "tile.gemm(%x, %x, %y) loc(\"k.tk\":8:3)"], (8, 3), "gemm shapes do not agree"),
    (["%a = tile.alloc() : shared<f16[BM, K]> loc(\"k.tk\":4:9)", "%b = tile.alloc() : shared<f16[32, 16]> loc(\"k.tk\":5:9)",
      "%c = tile.alloc() : frag<f32[BM, 16]> loc(\"k.tk\":6:9)",
      "tile.gemm(%a, %b, %c) loc(\"k.tk\":8:4)"], (8, 4), "gemm shapes do not agree"),  # only K differs
    (["%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)", "%y = tile.alloc() : frag<f16[BM, 8]> loc(\"k.tk\":5:9)",
      "tile.elementwise(%x, %y, %y) {fn = \"add\"} loc(\"k.tk\":9:4)"], (9, 4), "shape mismatch: input `%x`"),
    (["%v = tile.alloc() : frag<f16[BM]> loc(\"k.tk\":4:9)", "%y = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":5:9)",
      "tile.elementwise(%y, %v, %y) {fn = \"add\"} loc(\"k.tk\":9:5)"], (9, 5), "shape mismatch: input `%v`"),  # BM vs K
    (["%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)",
      "tile.copy(%x, %C) {dst_offsets = [\"m * BM\"]} loc(\"k.tk\":6:1)"], (6, 1), "`dst_offsets` needs 2 entries"),
    (["%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)",
      "tile.copy(%x, %C) {dst_offsets = [\"q * BM\", \"0\"]} loc(\"k.tk\":6:2)"], (6, 2), "unknown name `q` in `dst_offsets`"),
    (["%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)",
      "tile.elementwise(%x, %x) {fn = \"cube\"} loc(\"k.tk\":6:3)"], (6, 3), "unknown elementwise fn `cube`"),
    (["%x = tile.alloc() : frag<f16[BM, K - 64]> loc(\"k.tk\":4:7)"], (4, 7), "non-positive dim"),
    (["%x = tile.alloc() : frag<f32[BM, 1]> loc(\"k.tk\":4:9)", "%y = tile.alloc() : frag<f32[BM, K]> loc(\"k.tk\":4:9)",
      "tile.reduce(%y, %x) {axis = 0, fn = \"sum\"} loc(\"k.tk\":5:5)"], (5, 5), "reduce result must have shape [1, 64]"),
    (['tile.for() {hi = "2", kind = "pipelined", lo = "0", var = "i"} loc("k.tk":5:6) {', "}"], (5, 6),
     "a pipelined loop needs `stages`"),
    (['tile.launch() {grid = ["1"], threads = "1", vars = ["z"]} loc("k.tk":5:7) {', "}"], (5, 7),
     "`tile.launch` cannot appear inside `tile.launch`"),
])
def test_verifier_rejects_malformed_ir(lines, loc, message):
    ds = diagnostics(body(*lines))
    assert any(message in d.message and (d.loc.file, d.loc.line, d.loc.col) == ("k.tk", *loc) for d in ds), \
        "\n".join(f"{d.loc}: {d.message}" for d in ds)
    assert all(d.message.startswith("invalid IR: ") and d.message.endswith("(after parsing)") for d in ds)


def test_verifier_reports_every_violation():
    ds = diagnostics(body("%x = tile.alloc() : frag<f16[BM, K]> loc(\"k.tk\":4:9)",
                          "tile.elementwise(%x, %x) {fn = \"cube\"} loc(\"k.tk\":5:1)",
                          "tile.copy(%x, %C) {dst_offsets = [\"q\", \"0\"]} loc(\"k.tk\":6:1)"))
    assert [d.loc.line for d in ds] == [5, 6]


def _module_with(ops_of_launch) -> Module:
    a = Value("A", TileType("global", "f16", (exprs.Num(8),)))
    launch = O.LaunchOp(attrs={"grid": ["1"], "vars": ["m"], "threads": "32"}, regions=[Region(ops_of_launch)],
                        loc=Loc("p.tk", 2, 1))
    func = O.FuncOp(attrs={"sym_name": "p", "dims": {}, "consts": {}, "outputs": [0]},
                    regions=[Region([launch], [a])], loc=Loc("p.tk", 1, 1))
    return Module(func)


def test_verifier_use_before_def_in_a_built_module():
    t = Value("t", TileType("frag", "f16", (exprs.Num(8),)))
    fill = O.FillOp(operands=[t], attrs={"value": 1.0}, loc=Loc("p.tk", 3, 5))
    alloc = O.AllocOp(results=[t], loc=Loc("p.tk", 4, 5))
    with pytest.raises(TkError) as info:
        verify(_module_with([fill, alloc]), "after pass `x`")
    (d,) = info.value.diagnostics
    assert d.loc == Loc("p.tk", 3, 5)
    assert d.message == "invalid IR: operand `%t` is used before it is defined or outside its scope (after pass `x`)"
    verify(_module_with([alloc, fill]))  # the right order verifies


def test_verifier_value_of_a_loop_body_is_out_of_scope_after_the_loop():
    t = Value("t", TileType("frag", "f16", (exprs.Num(8),)))
    loop = O.ForOp(attrs={"var": "i", "lo": "0", "hi": "2", "kind": "serial"},
                   regions=[Region([O.AllocOp(results=[t], loc=Loc("p.tk", 3, 5))])], loc=Loc("p.tk", 2, 5))
    fill = O.FillOp(operands=[t], attrs={"value": 1.0}, loc=Loc("p.tk", 5, 5))
    with pytest.raises(TkError) as info:
        verify(_module_with([loop, fill]))
    (d,) = info.value.diagnostics
    assert d.loc == Loc("p.tk", 5, 5) and "outside its scope" in d.message
    loop.regions[0].ops.append(O.FillOp(operands=[t], attrs={"value": 1.0}, loc=Loc("p.tk", 4, 5)))
    verify(_module_with([loop]))  # used inside the loop it verifies


def test_verifier_unregistered_op_and_duplicate_names():
    class Bogus(O.FillOp):
        name = "tile.bogus"

    t = Value("t", TileType("frag", "f16", (exprs.Num(8),)))
    t2 = Value("t", TileType("frag", "f16", (exprs.Num(8),)))
    ops = [O.AllocOp(results=[t], loc=Loc("p.tk", 3, 1)), Bogus(operands=[t], loc=Loc("p.tk", 4, 1)),
           O.AllocOp(results=[t2], loc=Loc("p.tk", 5, 1))]
    with pytest.raises(TkError) as info:
        verify(_module_with(ops))
    got = {(d.loc.line, d.message) for d in info.value.diagnostics}
    assert got == {(4, "invalid IR: unregistered op `tile.bogus`"), (5, "invalid IR: value `%t` is defined twice")}

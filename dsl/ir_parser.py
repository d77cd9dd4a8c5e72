"""Parser for the generic textual IR form (grammar: dsl/ir.lark); inverse of dsl/ir.print_module.

`parse_module(text, filename)` returns a verified :class:`dsl.ir.Module`. Malformed text and
unknown ops or values raise :class:`dsl.diagnostics.TkError` located in the IR text itself.
"""

from __future__ import annotations

import json
import math
import os
from functools import lru_cache

import lark

from dsl import exprs
from dsl.diagnostics import Loc, error
from dsl.ir import Module, Region, Value
from dsl.ops import OPS
from dsl.types import DTYPES, SPACES, TileType
from dsl.verifier import verify


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    path = os.path.join(os.path.dirname(__file__), "ir.lark")
    return lark.Lark.open(path, parser="lalr", propagate_positions=True, cache=True)


class _Reader:
    def __init__(self, filename: str):
        self.filename = filename
        self.scopes: list[dict[str, Value]] = [{}]

    def here(self, tree) -> Loc:
        meta = getattr(tree, "meta", None)
        line = getattr(meta, "line", 0) if meta is not None and not meta.empty else 0
        col = getattr(meta, "column", 0) if meta is not None and not meta.empty else 0
        if isinstance(tree, lark.Token):
            line, col = tree.line, tree.column
        return Loc(self.filename, line, col)

    def lookup(self, tok: lark.Token) -> Value:
        name = str(tok)[1:]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise error(self.here(tok), f"use of undefined value `{tok}`",
                    "values must be defined (by `tile.alloc` or as a block argument) before use")

    def define(self, tok: lark.Token, type_: TileType) -> Value:
        v = Value(str(tok)[1:], type_)
        self.scopes[-1][v.name] = v
        return v

    def type(self, tree) -> TileType:
        space, dtype = str(tree.children[0]), str(tree.children[1])
        if space not in SPACES:
            raise error(self.here(tree), f"unknown memory space `{space}`", f"expected one of {', '.join(SPACES)}")
        if dtype not in DTYPES:
            raise error(self.here(tree), f"unknown dtype `{dtype}`", f"expected one of {', '.join(DTYPES)}")
        dims = tuple(self.dim(d.children[0]) for d in tree.children[2:] if d is not None)
        return TileType(space, dtype, dims)

    def dim(self, t) -> exprs.Expr:
        if isinstance(t, lark.Token):
            return exprs.Num(int(t)) if t.type == "INT" else exprs.Sym(str(t))
        kids = t.children
        if t.data == "num":
            return exprs.Num(int(kids[0]))
        if t.data == "sym":
            return exprs.Sym(str(kids[0]))
        if t.data == "call":
            return exprs.Call(str(kids[0]), tuple(self.dim(k) for k in kids[1:]))
        if t.data == "neg":
            inner = self.dim(kids[0])
            return exprs.Num(-inner.value) if isinstance(inner, exprs.Num) else exprs.Bin("-", exprs.Num(0), inner)
        return exprs.Bin(str(kids[1]), self.dim(kids[0]), self.dim(kids[2]))

    def attr(self, t):
        if isinstance(t, lark.Tree) and t.data == "attrdict":
            return {str(a.children[0]): self.attr(a.children[1]) for a in t.children if a is not None}
        kind, kids = t.data, t.children
        if kind == "int":
            return int(kids[0])
        if kind == "float":
            value = float(kids[0])
            if not math.isfinite(value):  # the printer writes finite numbers only
                raise error(self.here(kids[0]), f"attribute value `{kids[0]}` is not a finite number",
                            "IR attributes hold finite numbers")
            return value
        if kind == "string":
            return json.loads(kids[0])
        if kind in ("true", "false"):
            return kind == "true"
        return [self.attr(k) for k in kids if k is not None]

    def op(self, tree):
        kids = list(tree.children)
        result_toks = []
        if isinstance(kids[0], lark.Tree) and kids[0].data == "results":
            result_toks = list(kids.pop(0).children)
        name_tok = kids.pop(0)
        cls = OPS.get(str(name_tok))
        if cls is None:
            raise error(self.here(name_tok), f"unknown op `{name_tok}`", f"known ops: {', '.join(sorted(OPS))}")
        operands = []
        while kids and (kids[0] is None or (isinstance(kids[0], lark.Token) and kids[0].type == "VALUE")):
            tok = kids.pop(0)
            if tok is not None:
                operands.append(self.lookup(tok))
        attrs, types = {}, []
        if kids and isinstance(kids[0], lark.Tree) and kids[0].data == "attrdict":
            attrs = self.attr(kids.pop(0))
        while kids and isinstance(kids[0], lark.Tree) and kids[0].data == "type":
            types.append(self.type(kids.pop(0)))
        loc_tree = kids.pop(0)
        loc = Loc(json.loads(loc_tree.children[0]), int(loc_tree.children[1]), int(loc_tree.children[2]))
        if len(types) != len(result_toks):
            raise error(self.here(name_tok), f"`{name_tok}` declares {len(result_toks)} results but {len(types)} types")
        results = [self.define(t, ty) for t, ty in zip(result_toks, types)]
        regions = [self.region(r) for r in kids]
        return cls(operands=operands, results=results, attrs=attrs, regions=regions, loc=loc)

    def region(self, tree) -> Region:
        self.scopes.append({})
        region = Region()
        for kid in tree.children:
            if isinstance(kid, lark.Tree) and kid.data == "blockargs":
                for a in kid.children:
                    if a is not None:
                        region.args.append(self.define(a.children[0], self.type(a.children[1])))
            elif kid is not None:
                region.ops.append(self.op(kid))
        self.scopes.pop()
        return region


def parse_module(text: str, filename: str = "<ir>", source: str = "") -> Module:
    """Parse and verify IR text. Raises TkError on malformed or invalid IR."""
    try:
        try:
            tree = _parser().parse(text)
        except lark.exceptions.UnexpectedInput as exc:
            raise error(Loc(filename, exc.line, exc.column), "malformed IR text",
                        "the IR must be in the generic form that `tkc opt` prints") from None
        func = _Reader(filename).op(tree.children[0])
        module = Module(func, source=source)
        verify(module, "after parsing")
    except RecursionError:
        line, col = _deepest(text)
        raise error(Loc(filename, line, col), "IR nested too deeply for tkc",
                    "the IR `tkc opt` prints nests as deeply as its kernel's source: regenerate it from the "
                    ".tk file") from None
    return module


def _deepest(text: str) -> tuple[int, int]:
    """(line, column), 1-based, of the first bracket at the deepest nesting of `text` (strings
    skipped): where an IR that nests too deeply is reported."""
    depth = best = 0
    at, line, col, in_string, escaped = (1, 1), 1, 0, False, False
    for ch in text:
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        elif in_string:
            in_string = (escaped or ch != '"')
            escaped = not escaped and ch == "\\"
        elif ch == '"':
            in_string, escaped = True, False
        elif ch in "[{(":
            depth += 1
            if depth > best:
                best, at = depth, (line, col)
        elif ch in "]})":
            depth -= 1
    return at

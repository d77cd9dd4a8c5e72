"""Parse .tk source into the AST of dsl/ast.py (grammar: dsl/grammar.lark).

Syntax errors raise :class:`dsl.diagnostics.TkError` at the offending token with what was
expected; every AST node keeps the line and column of its first token.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache

import lark

from dsl import ast as A
from dsl.diagnostics import Loc, TkError, error

_TOKEN_NAMES = {
    "LPAR": "`(`", "RPAR": "`)`", "LBRACE": "`{`", "RBRACE": "`}`", "LSQB": "`[`", "RSQB": "`]`",
    "COMMA": "`,`", "COLON": "`:`", "EQUAL": "`=`", "NAME": "a name", "INT": "an integer",
    "FLOAT": "a number", "STRING": "a string", "MORETHAN": "`>`", "LESSTHAN": "`<`",
    "MINUS": "`-`", "PLUS": "`+`", "ADD": "`+` or `-`", "MULOP": "an operator", "AUGOP": "`+=`",
    "CMP": "a comparison", "$END": "end of file", "__ANON_0": "`->`",
}


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    path = os.path.join(os.path.dirname(__file__), "grammar.lark")
    return lark.Lark.open(path, parser="lalr", propagate_positions=True, maybe_placeholders=True, cache=True)


# Expressions and blocks nested deeper than Python's recursion allows (tkc/driver.py raises the
# limit to DEPTH_LIMIT for the frontend): a user error at the statement, not a crash.
DEPTH_LIMIT = 20_000
TOO_DEEP = "this statement nests too deeply for tkc"
TOO_DEEP_NOTE = "split it: assign parts of a long expression, or the body of a deep block, to separate statements"


# A kernel is a few KB of source; a file many times that (a generated or wrong file) would take
# minutes and gigabytes to parse, so it is rejected up front (TKC_MAX_SOURCE_BYTES overrides).
MAX_SOURCE_BYTES = 1 << 20


def check_source_size(source: str, filename: str) -> None:
    """Raise TkError (located at the file) when `source` is over the size limit."""
    limit = MAX_SOURCE_BYTES
    text = os.environ.get("TKC_MAX_SOURCE_BYTES", "").strip()
    if text.isdigit():
        limit = int(text)
    size = len(source.encode("utf-8", "surrogatepass"))
    if limit and size > limit:
        raise error(Loc(filename, 1, 1), f"`{filename}` is {size} bytes; tkc reads kernels of at most {limit} bytes",
                    "a kernel is a few KB of source: is this the right file? (TKC_MAX_SOURCE_BYTES raises the "
                    "limit; 0 turns it off)")


def parse(source: str, filename: str = "<input>") -> A.Kernel:
    """Parse one kernel. Raises TkError for syntax errors (with expected tokens as a note) and
    for a source over MAX_SOURCE_BYTES."""
    check_source_size(source, filename)
    try:
        tree = _parser().parse(source)
    except lark.exceptions.UnexpectedCharacters as exc:
        raise error(Loc(filename, exc.line, exc.column),
                    f"unexpected character `{source[exc.pos_in_stream]}`",
                    "comments start with `#`; see docs/LANGUAGE.md for the syntax") from None
    except lark.exceptions.UnexpectedToken as exc:
        tok = exc.token
        # Closing brackets first (the usual culprit), then the rest alphabetically.
        names = sorted(exc.expected, key=lambda t: (t not in ("RBRACE", "RPAR", "RSQB"), _TOKEN_NAMES.get(t, t)))
        expected = [_TOKEN_NAMES.get(t, f"`{t.lower()}`") for t in names][:8]
        if tok.type == "$END":
            raise _eof(source, filename, expected) from None
        raise error(Loc(filename, tok.line, tok.column), f"syntax error: unexpected `{tok}`",
                    f"expected {', '.join(expected)}") from None
    except lark.exceptions.UnexpectedEOF:
        raise _eof(source, filename, []) from None
    return _Builder(filename).kernel(tree.children[0])


def _eof(source: str, filename: str, expected: list[str]) -> TkError:
    """A syntax error at the end of the last line (with or without a final newline)."""
    lines = source.splitlines() or [""]
    notes = [f"expected {', '.join(expected)}"] if expected else []
    if not expected or "`}`" in expected:
        notes.append("is a `}` missing?")
    return error(Loc(filename, len(lines), len(lines[-1]) + 1), "syntax error: unexpected end of file", *notes)


class _Builder:
    def __init__(self, filename: str):
        self.filename = filename

    def loc(self, node) -> Loc:
        if isinstance(node, lark.Token):
            return Loc(self.filename, node.line, node.column)
        return Loc(self.filename, node.meta.line, node.meta.column)

    def kernel(self, t) -> A.Kernel:
        kids = t.children
        name = str(kids[0])
        consts: dict[str, tuple[int, Loc]] = {}
        if kids[1] is not None:
            for c in kids[1].children:
                self._unique(consts, c.children[0], "schedule constant")
                consts[str(c.children[0])] = (int(c.children[1]), self.loc(c))
        inputs = [self.param(p) for p in kids[2].children]
        outputs = [self.param(p) for p in kids[3].children]
        k = A.Kernel(self.loc(t), name, consts, inputs, outputs, {}, [], None)
        for c in kids[4:-1]:
            if c.data == "where_clause":
                for d in c.children:
                    self._unique(k.dim_defaults, d.children[0], "dim default")
                    k.dim_defaults[str(d.children[0])] = (int(d.children[1]), self.loc(d))
            elif c.data == "requires_clause":
                cond = self.expr(c.children[0])
                cond.loc = self.loc(c.children[0])  # the whole condition, not its operator
                k.requires.append(cond)
            elif c.data == "tune_clause":
                for d in c.children:
                    self._unique(k.tune, d.children[0], "tune space of")
                    values = tuple(int(v) for v in d.children[1:] if v is not None)
                    k.tune[str(d.children[0])] = (values, self.loc(d))
            elif c.data == "dynamic_clause":
                for d in c.children:
                    self._unique(k.dynamic, d.children[0], "dynamic dim")
                    k.dynamic[str(d.children[0])] = self.loc(d)
            elif k.reference is not None:
                raise error(self.loc(c), "a kernel has one `reference`")
            else:
                k.reference = (json.loads(c.children[0]), self.loc(c.children[0]))
        k.body = [self.stmt(s) for s in kids[-1].children]
        return k

    def _unique(self, table: dict, tok, what: str) -> None:
        if str(tok) in table:
            raise error(self.loc(tok), f"{what} `{tok}` is defined twice")

    def param(self, t) -> A.Param:
        mut, name, dtype, *dims = t.children
        if dims == [None]:  # no brackets: a runtime scalar
            return A.Param(self.loc(t), str(name), str(dtype), None, mut is not None)
        out = []
        for d in dims:  # a dim name (bound by the tensor's extent), an integer, or an expression
            e = self.expr(d)
            loc = self.loc(d) if isinstance(d, lark.Tree) else e.loc  # an expression: where it starts
            out.append((e.id if isinstance(e, A.Name) else e.value if isinstance(e, A.IntLit) else e, loc))
        return A.Param(self.loc(t), str(name), str(dtype), out, mut is not None)

    def stmt(self, t) -> A.Stmt:
        try:
            return self._stmt(t)
        except RecursionError:  # the innermost statement that overflowed reports it
            raise error(self.loc(t), TOO_DEEP, TOO_DEEP_NOTE) from None

    def _stmt(self, t) -> A.Stmt:
        kind, kids, loc = t.data, t.children, self.loc(t)
        if kind == "grid_stmt":
            extents, names, cluster, threads = kids
            grid = A.Grid(loc, [self.expr(e) for e in extents.children], [str(n) for n in names.children],
                          self.expr(threads.children[0]) if threads is not None else None)
            if cluster is not None:
                grid.cluster = [self.expr(e) for e in cluster.children[0].children]
                grid.ranks = [str(n) for n in cluster.children[1].children]
            return grid
        if kind == "sync_stmt":
            return A.Sync(loc, str(kids[0]))
        if kind == "if_stmt":
            cond, then, orelse = kids
            return A.If(loc, self.expr(cond), [self.stmt(s) for s in then.children],
                        [self.stmt(s) for s in orelse.children] if orelse is not None else [])
        if kind == "assign":
            return A.Assign(loc, str(kids[0]), self.expr(kids[1]))
        if kind == "augassign":
            layout = []
            if kids[3] is not None:  # `with warp(...) thread(...)`
                layout = [A.LayoutPart(self.loc(p), str(p.children[0]), [self.expr(a) for a in p.children[1:]])
                          for p in kids[3].children]
            return A.AugAssign(loc, str(kids[0]), str(kids[1])[0], self.expr(kids[2]), layout)
        if kind in ("store", "store_aug"):
            op = str(kids[2])[0] if kind == "store_aug" else None
            return A.Store(loc, str(kids[0]), self.subs(kids[1]), self.expr(kids[-1]), op)
        if kind == "call_store":
            return A.CallStore(loc, str(kids[0]), [self.expr(a) for a in kids[1:-1]], self.expr(kids[-1]))
        if kind == "for_stmt":
            var, fn, *rest = kids
            body = rest[-1]
            return A.For(loc, str(var), str(fn), [self.expr(a) for a in rest[:-1]],
                         [self.stmt(s) for s in body.children])
        raise AssertionError(f"unhandled statement {kind}")

    def subs(self, t) -> list[A.Slice]:
        out = []
        for s in t.children:
            loc = self.loc(s) if not (isinstance(s, lark.Tree) and s.data == "slice_all" and s.meta.empty) else None
            if s.data == "slice_all":
                out.append(A.Slice(loc or Loc(self.filename, 0, 0), "all"))
            elif s.data == "slice_upto":
                out.append(A.Slice(self.loc(s), "range", A.IntLit(self.loc(s), 0), self.expr(s.children[0])))
            elif s.data == "slice_from":
                out.append(A.Slice(self.loc(s), "from", self.expr(s.children[0])))
            elif s.data == "slice_one":
                out.append(A.Slice(self.loc(s), "one", self.expr(s.children[0])))
            else:
                kind = "len" if s.data.startswith("slice_len") else "range"
                step = self.expr(s.children[2]) if s.data.endswith("_step") else None
                out.append(A.Slice(self.loc(s), kind, self.expr(s.children[0]), self.expr(s.children[1]), step))
        return out

    def expr(self, t) -> A.Expr:
        if isinstance(t, lark.Token):  # a bare NAME/INT that the grammar inlined
            return A.Name(self.loc(t), str(t)) if t.type == "NAME" else A.IntLit(self.loc(t), int(t))
        kind, kids, loc = t.data, t.children, self.loc(t)
        if kind == "int_lit":
            return A.IntLit(loc, int(kids[0]))
        if kind == "float_lit":
            return A.FloatLit(loc, float(kids[0]))
        if kind == "name":
            return A.Name(loc, str(kids[0]))
        if kind == "call":
            args = [self.expr(a) for a in kids[1:] if a is not None]
            return A.Call(loc, str(kids[0]), args)
        if kind == "index":
            return A.Index(loc, str(kids[0]), self.subs(kids[1]))
        if kind == "neg":
            return A.Neg(loc, self.expr(kids[0]))
        if kind == "binop":
            lhs, op, rhs = kids
            return A.BinOp(self.loc(op), str(op), self.expr(lhs), self.expr(rhs))
        raise AssertionError(f"unhandled expression {kind}")


__all__ = ["parse", "TkError"]

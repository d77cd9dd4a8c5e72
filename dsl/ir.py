"""Core IR structures (values, regions, ops, the module) and the generic textual printer.

The IR is buffer-based, like TileLang's: `tile.alloc` defines a tile buffer value, other ops
read and write buffers and global tensors in place. Every op prints in one generic form::

    [%r = ]OPNAME(%a, %b) {key = value, ...} [: RESULT-TYPES] loc("file":line:col)[ {REGION}]*

A region prints as `{`, optional block arguments `^(%A: global<f16[M, K]>, ...)`, its ops, `}`.
`print -> parse -> print` is a fixed point (see dsl/ir_parser.py). Op classes live in dsl/ops.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsl.diagnostics import Loc
from dsl.types import TileType


@dataclass(eq=False)
class Value:
    """An SSA value: a global tensor (function argument) or a tile buffer (`tile.alloc` result)."""

    name: str
    type: TileType

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(eq=False)
class Region:
    """An ordered list of ops, optionally with block arguments (only `tile.func` has them)."""

    ops: list["Op"] = field(default_factory=list)
    args: list[Value] = field(default_factory=list)


@dataclass(eq=False)
class Op:
    """Base of every op. Subclasses set `name` and `verify`, and document their semantics."""

    name: ClassVar[str] = "<op>"
    operands: list[Value] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    regions: list[Region] = field(default_factory=list)
    loc: Loc = field(default_factory=lambda: Loc("<unknown>", 0, 0))

    @property
    def result(self) -> Value:
        return self.results[0]

    @property
    def body(self) -> Region:
        return self.regions[0]

    def verify(self, fail, env) -> None:
        """Check this op's own constraints under `env` (dims and constants); report with `fail(msg)`."""

    def walk(self):
        """This op and every op nested in its regions, in pre-order."""
        yield self
        for region in self.regions:
            for op in region.ops:
                yield from op.walk()


@dataclass(eq=False)
class Module:
    """One kernel: the `tile.func` op at the top of the IR."""

    func: Op
    source: str = ""  # the .tk text the module came from, for diagnostics with source lines

    @property
    def env(self) -> dict[str, int]:
        """Problem dims and schedule constants bound in the function's attributes."""
        return {**self.func.attrs.get("dims", {}), **self.func.attrs.get("consts", {})}

    def walk(self):
        return self.func.walk()


def value_names(module: Module) -> set[str]:
    """Every value name in `module` (op results and the function's arguments)."""
    return {v.name for op in module.walk() for v in op.results} | {a.name for a in module.func.body.args}


def unique_name(hint: str, names: set[str]) -> str:
    """`hint`, or `hint_1`, `hint_2`, ... : the first not in `names`, which it is added to."""
    name, i = hint, 0
    while name in names:
        i += 1
        name = f"{hint}_{i}"
    names.add(name)
    return name


def format_attr(v: Any) -> str:
    """Textual form of an attribute value: int, float, string, bool, list, or dict."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = repr(v)
        if text in ("inf", "-inf", "nan"):
            raise ValueError(f"non-finite attribute {text}")
        return text if ("." in text or "e" in text) else text + ".0"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, dict):
        return format_attr_dict(v)
    raise TypeError(f"unprintable attribute {v!r}")


def format_attr_dict(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {format_attr(d[k])}" for k in sorted(d)) + "}"


def format_loc(loc: Loc) -> str:
    return f"loc({json.dumps(loc.file)}:{loc.line}:{loc.col})"


def print_op(op: Op, indent: int = 0) -> str:
    pad = "  " * indent
    head = ""
    if op.results:
        head = ", ".join(str(r) for r in op.results) + " = "
    text = f"{pad}{head}{op.name}({', '.join(str(o) for o in op.operands)})"
    if op.attrs:
        text += " " + format_attr_dict(op.attrs)
    if op.results:
        text += " : " + ", ".join(str(r.type) for r in op.results)
    text += " " + format_loc(op.loc)
    for region in op.regions:
        text += " {\n"
        if region.args:
            text += pad + "^(" + ", ".join(f"{a}: {a.type}" for a in region.args) + ")\n"
        for inner in region.ops:
            text += print_op(inner, indent + 1) + "\n"
        text += pad + "}"
    return text


def print_module(module: Module) -> str:
    """The generic textual form of `module`, newline-terminated."""
    return print_op(module.func) + "\n"

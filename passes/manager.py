"""Pass manager: pipelines as spec strings, verify after every pass, IR printing between passes.

A spec is a comma-separated list of `name` or `name{key=value,...}`, e.g.
`tile{BM=64},software-pipeline{stages=3},check-smem-fit{target=sm_90}`. The CLI (`tkc opt -p`)
and the library (`tkc.compile`) run the same specs. Unknown passes and options are user errors.
"""

from __future__ import annotations

import copy
import re
from typing import Callable

from dsl import exprs
from dsl.diagnostics import Loc, TkError, error
from dsl.ir import Module
from dsl.verifier import verify
from passes.check_coverage import CheckCoveragePass
from passes.check_smem_fit import CheckSmemFitPass
from passes.defer_reduce import DeferReducePass
from passes.fold_copies import FoldCopiesPass
from passes.fuse_int8_dot import FuseInt8DotPass
from passes.map_dsmem import MapDsmemPass
from passes.software_pipeline import SoftwarePipelinePass
from passes.sparse_dispatch import SparseDispatchPass
from passes.tile import TilePass

PASSES = {cls.name: cls for cls in (TilePass, DeferReducePass, FoldCopiesPass, SoftwarePipelinePass, MapDsmemPass, CheckSmemFitPass,
                                    CheckCoveragePass, SparseDispatchPass, FuseInt8DotPass)}
_ITEM = re.compile(r"\s*([a-z][a-z0-9-]*)\s*(\{([^{}]*)\})?\s*(,|$)")


def parse_pipeline(spec: str) -> list:
    """Parse a spec string into pass instances; raises TkError on unknown passes/options."""
    passes, pos = [], 0
    spec = spec.strip()
    while pos < len(spec):
        m = _ITEM.match(spec, pos)
        if not m or m.end() == pos:
            word = re.match(r"\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(\{[^{}]*\})?\s*(,|$)", spec[pos:])
            if word and word.group(1).lower().replace("_", "-") in PASSES:  # `TILE`, `check_smem_fit`
                raise error(Loc("<pipeline>", 1, pos + 1), f"unknown pass `{word.group(1)}`",
                            f"pass names are lower case with hyphens: "
                            f"`{word.group(1).lower().replace('_', '-')}`")
            raise error(Loc("<pipeline>", 1, pos + 1), f"malformed pipeline at `{spec[pos:]}`",
                        "write `pass-name{option=value,...}` items separated by commas")
        name, body = m.group(1), m.group(3)
        if name not in PASSES:
            raise error(Loc("<pipeline>", 1, pos + 1), f"unknown pass `{name}`",
                        f"known passes: {', '.join(sorted(PASSES))}")
        options = {}
        for item in filter(None, (s.strip() for s in (body or "").split(","))):
            key, eq, value = item.partition("=")
            if not eq:
                raise error(Loc("<pipeline>", 1, pos + 1), f"option `{item}` of `{name}` needs a value")
            if key.strip() in options:
                raise error(Loc("<pipeline>", 1, pos + 1), f"option `{key.strip()}` of `{name}` is given twice",
                            "give each option once")
            options[key.strip()] = value.strip()
        try:
            passes.append(PASSES[name].from_options(options))
        except TkError as exc:  # locate option errors at their pass in the spec
            for d in exc.diagnostics:
                if d.loc.file == "<pipeline>":
                    d.loc = Loc("<pipeline>", 1, pos + 1 + (len(m.group(0)) - len(m.group(0).lstrip())))
            raise
        pos = m.end()
    return passes


def format_pipeline(passes: list) -> str:
    """The spec string of `passes` (inverse of parse_pipeline)."""
    return ",".join(p.spec() for p in passes)


def run_pipeline(module: Module, passes: list, after_pass: Callable[[str, Module], None] | None = None) -> Module:
    """Run `passes` on a copy of `module`, verifying after each; `after_pass(name, module)` is
    called after every pass (how `--print-ir-after-all` prints)."""
    module = copy.deepcopy(module)
    for p in passes:
        try:
            module = p.run(module)
        except exprs.ExprError as exc:  # an index expression a pass cannot evaluate: the user's values
            raise error(module.func.loc, f"pass `{p.name}` cannot evaluate an index expression: {exc}",
                        "a dim or schedule constant is 0 where it divides, or too large; check the `-D` values") from None
        verify(module, f"after pass `{p.name}`")
        if after_pass is not None:
            after_pass(p.name, module)
    return module

"""`check-smem-fit`: shared memory per block (bytes x stages of every shared tile) vs the target.

Limits per block come from passes/targets.py (sm_90 232448 bytes with opt-in, sm_80 166912,
sm_89 101376, `static` 49152 without opt-in). Over budget is a located error at the `grid`
statement with one note per shared buffer (its bytes x stages and where it comes from) and a
concrete fix: the largest stage count that fits, or how far the largest tile must shrink.
Shapes are evaluated under the kernel's dims and constants, so it also runs before `tile`.
The module is returned unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import Diagnostic, TkError, error
from dsl.ir import Module, Op
from passes.options import PIPELINE_LOC, options_from
from passes.targets import DEFAULT_SM, SMEM_LIMITS


def shared_buffers(launch: Op, env: dict[str, int]) -> list[tuple[Op, int, int]]:
    """(alloc op, bytes of one copy, stages) of every shared tile in `launch`; shapes are
    evaluated under `env` (the kernel's dims and constants), so this works before `tile` too."""
    out = []
    for op in launch.walk():
        if op.name == "tile.alloc" and op.result.type.space == "shared":
            out.append((op, op.result.type.nbytes(env), int(op.attrs.get("stages", 1))))
    return out


@dataclass(frozen=True)
class CheckSmemFitPass:
    name = "check-smem-fit"
    target: str = DEFAULT_SM

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "CheckSmemFitPass":
        p = cls(**options_from(cls, cls.name, options))
        if p.target not in SMEM_LIMITS:
            raise error(PIPELINE_LOC, f"unknown target `{p.target}` for `check-smem-fit`",
                        f"targets: {', '.join(SMEM_LIMITS)}")
        return p

    def spec(self) -> str:
        return f"{self.name}{{target={self.target}}}"

    def run(self, module: Module) -> Module:
        limit = SMEM_LIMITS[self.target]
        diags = []
        for launch in module.func.body.ops:
            if launch.name != "tile.launch":
                continue
            bufs = shared_buffers(launch, module.env)
            total = sum(b * s for _, b, s in bufs)
            if total <= limit:
                continue
            notes = [f"`{op.result}` {op.result.type}: {b} bytes x {s} stage{'s' * (s != 1)} = {b * s} bytes "
                     f"{'(read by peers through DSMEM) ' if op.attrs.get('dsmem') else ''}(from {op.loc})"
                     for op, b, s in sorted(bufs, key=lambda t: -t[1] * t[2])]
            notes.append(_fix(bufs, limit, module.env))
            diags.append(Diagnostic(launch.loc, f"kernel `{module.func.attrs.get('sym_name')}` needs {total} bytes "
                                    f"of shared memory per block; limit is {limit} on {self.target}", notes))
        if diags:
            raise TkError(diags)
        return module


def _fix(bufs: list[tuple[Op, int, int]], limit: int, env: dict[str, int]) -> str:
    staged = [(op, b, s) for op, b, s in bufs if s > 1]
    fixed = sum(b * s for _, b, s in bufs if s == 1)
    per_stage = sum(b for _, b, _ in staged)
    if staged and per_stage and fixed + per_stage <= limit:
        fits = (limit - fixed) // per_stage
        return f"fix: use at most {fits} pipeline stage{'s' * (fits != 1)} (e.g. `-D stages={fits}`)"
    op, b, s = max(bufs, key=lambda t: t[1] * t[2])
    total = sum(x * y for _, x, y in bufs)
    factor = 2
    while total - b * s + (b * s) // factor > limit and factor < 1 << 20:
        factor *= 2
    dims = ", ".join(exprs.to_str(d) for d in op.result.type.shape)
    values = ", ".join(str(n) for n in op.result.type.concrete_shape(env))
    if values != dims:
        dims = f"{dims}] = [{values}"
    more = "; fewer pipeline stages also help" if staged else ""
    return (f"fix: the largest tile `{op.result}` [{dims}] must shrink at least {factor}x to fit: use "
            f"smaller tile extents for it (the schedule constants or dims that set them){more}")

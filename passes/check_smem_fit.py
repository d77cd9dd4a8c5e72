"""`check-smem-fit`: shared memory per block, as the backend will allocate it, vs the target.

Options: `target` (passes/targets.py: sm_90 232448 bytes with opt-in, sm_80 166912, sm_89
101376, `static` 49152 without opt-in) and `backend`, the allocation model:

* `tilelang` (the default pipeline of targets `tilelang`, `tir` and `tilelang-cpu`, whose IR
  also runs on the GPU): the dynamic shared memory TileLang 0.1.15 gives the kernel
  (passes/smem_tilelang.py): every shared tile x its pipeline copies, packed by lifetime (a tile
  reuses the bytes of tiles no longer used), offsets 16-byte aligned (1024 for wgmma operands).
* `cuda` (the default pipeline of target `cuda`): the CUDA backend's own plan
  (passes/cuda_placement.py `make_plan`, the code codegen/cuda.py emits from): shared tiles
  with padded rows and 128-byte aligned stage copies, register tiles the backend keeps in
  shared memory, the reductions' scratch, bytes shared by tiles with disjoint lifetimes. The
  estimate is the `dynamic shared memory` the generated kernel is launched with.
* `sum` (the default option, for `tkc opt -p`): bytes x stages of every shared tile, no reuse;
  the TileLang model exceeds it by alignment at most; what the autotuner prunes with.

The backend models need concrete tile shapes (after `tile`); before it the pass falls back to
`sum` (evaluated under the kernel's dims and constants). A dynamic dim never sizes a tile, so
both backend models apply to dynamic kernels too.
A sampled gemm (a `tiles` grid, SDDMM) has no `tile.alloc`: its kernels' tiles are those the
backend's SDDMM lowering stages (passes/smem_sddmm.py, the code codegen/cuda_sddmm.py and
codegen/tilelang_sddmm.py emit from), the estimate is its largest kernel's (on `cuda` the tile
kernel's dynamic bytes or the transposition kernel's static tile) and `sum` adds the TileLang
tiles up. tests/test_smem_fit.py checks the models against ptxas and TileLang's lowering for every
example.

Over budget is a located error at the `grid` statement with one note per shared buffer (its
bytes x stages and where it comes from; with `tilelang`, the bytes it adds to the total, 0 when
it reuses another tile's) and a concrete fix: the largest stage count that fits, or how far the
largest tile must shrink (a sampled gemm: a note per staged operand and the first smaller BM x BN
that fits). The module is returned unchanged.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import Diagnostic, TkError, error
from dsl.ir import Module, Op
from passes import smem_sddmm, smem_tilelang
from passes.cuda_placement import make_plan, smem_diagnostic
from passes.options import PIPELINE_LOC, options_from
from passes.targets import DEFAULT_SM, SMEM_LIMITS

BACKENDS = ("sum", "tilelang", "cuda")


def shared_buffers(launch: Op, env: dict[str, int]) -> list[tuple[Op, int, int]]:
    """(alloc op, bytes of one copy, stages) of every shared tile in `launch`; shapes are
    evaluated under `env` (the kernel's dims and constants), so this works before `tile` too."""
    out = []
    for op in launch.walk():
        if op.name == "tile.alloc" and op.result.type.space == "shared":
            out.append((op, op.result.type.nbytes(env), int(op.attrs.get("stages", 1))))
    return out


def concrete(launch: Op) -> bool:
    """Whether every tile of `launch` has integer extents (after `tile`)."""
    try:
        for op in launch.walk():
            if op.name == "tile.alloc":
                op.result.type.concrete_shape({})
        exprs.evaluate(exprs.parse(str(launch.attrs.get("threads", "128"))), {})
    except exprs.ExprError:
        return False
    return True


def smem_estimate(module: Module, launch: Op, backend: str) -> int:
    """Bytes of shared memory per block of `launch` on `backend` (`sum`, `tilelang`, `cuda`),
    the number check-smem-fit compares with the limit."""
    return _model(module, launch, backend)[0]


def _model(module: Module, launch: Op, backend: str):
    """(bytes, the model's own plan or None) of `launch` under `backend`, falling back to `sum`
    where the backend model does not apply (see the module docstring)."""
    sampled = smem_sddmm.model(module, launch, backend)
    if sampled is not None:  # a sampled gemm's kernels: the backend's own tiles
        return sampled.total, sampled
    if backend != "sum" and concrete(launch):
        if backend == "cuda":
            threads = exprs.evaluate(exprs.parse(str(launch.attrs.get("threads", "128"))), {})
            plan = make_plan(module, launch, threads)
            return plan.total_smem, plan
        plan = smem_tilelang.plan(launch, module.env)
        return plan.total, plan
    return _sum_model(launch, module.env)


def _sum_model(launch: Op, env: dict[str, int]) -> tuple[int, None]:
    bufs = shared_buffers(launch, env)
    total = sum(b * s for _, b, s in bufs)
    return total, None


@dataclass(frozen=True)
class CheckSmemFitPass:
    name = "check-smem-fit"
    target: str = DEFAULT_SM
    backend: str = "sum"

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "CheckSmemFitPass":
        p = cls(**options_from(cls, cls.name, options))
        if p.target not in SMEM_LIMITS:
            raise error(PIPELINE_LOC, f"unknown target `{p.target}` for `check-smem-fit`",
                        f"targets: {', '.join(SMEM_LIMITS)}")
        if p.backend not in BACKENDS:
            raise error(PIPELINE_LOC, f"unknown backend `{p.backend}` for `check-smem-fit`",
                        f"backends: {', '.join(BACKENDS)}")
        return p

    def spec(self) -> str:
        backend = f",backend={self.backend}" if self.backend != "sum" else ""
        return f"{self.name}{{target={self.target}{backend}}}"

    def run(self, module: Module) -> Module:
        limit = SMEM_LIMITS[self.target]
        diags = []
        for launch in module.func.body.ops:
            if launch.name != "tile.launch":
                continue
            total, plan = _model(module, launch, self.backend)
            if total <= limit:
                continue
            kernel = module.func.attrs.get("sym_name")
            if isinstance(plan, smem_sddmm.SddmmSmem):
                diags.append(plan.diagnostic(launch, limit, self.target))
            elif isinstance(plan, smem_tilelang.TlPlan):
                diags.append(_tilelang_diagnostic(plan, launch, kernel, limit, self.target))
            elif plan is not None:
                diags.append(smem_diagnostic(plan, launch, kernel, limit, self.target))
            else:
                diags.append(_sum_diagnostic(launch, module.env, kernel, limit, self.target))
        if diags:
            raise TkError(diags)
        return module


def _sum_diagnostic(launch: Op, env: dict[str, int], kernel: str, limit: int, target: str) -> Diagnostic:
    bufs = shared_buffers(launch, env)
    total = _sum_model(launch, env)[0]
    notes = [f"`{op.result}` {op.result.type}: {b} bytes x {s} stage{'s' * (s != 1)} = {b * s} bytes "
             f"{'(read by peers through DSMEM) ' if op.attrs.get('dsmem') else ''}(from {op.loc})"
             for op, b, s in sorted(bufs, key=lambda t: -t[1] * t[2])]
    notes.append(_fix(bufs, limit, env))
    return Diagnostic(launch.loc, f"kernel `{kernel}` needs {total} bytes of shared memory per block; "
                      f"limit is {limit} on {target}", notes)


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
    return _shrink(op, factor, bool(staged), env)


def _shrink(op: Op, factor: int, staged: bool, env: dict[str, int]) -> str:
    dims = ", ".join(exprs.to_str(d) for d in op.result.type.shape)
    values = ", ".join(str(n) for n in op.result.type.concrete_shape(env))
    if values != dims:
        dims = f"{dims}] = [{values}"
    more = "; fewer pipeline stages also help" if staged else ""
    return (f"fix: the largest tile `{op.result}` [{dims}] must shrink at least {factor}x to fit: use "
            f"smaller tile extents for it (the schedule constants or dims that set them){more}")


def _tilelang_diagnostic(plan, launch: Op, kernel: str, limit: int, target: str) -> Diagnostic:
    """Notes, largest first, with the bytes each buffer adds to the arena in TileLang's packing
    order (a buffer placed in bytes an earlier one no longer uses adds 0): they sum to the total."""
    reach, padding, notes, placed = 0, 0, [], []
    for buf in sorted(plan.buffers, key=lambda b: (b.start, -b.size)):
        gap = max(0, buf.offset - reach)
        adds = max(0, buf.offset + buf.size - reach) - gap
        padding, reach = padding + gap, max(reach, buf.offset + buf.size)
        s = buf.versions
        if buf.workspace:
            head = f"{_name(buf)} (one element per thread): {buf.nbytes} bytes"
        else:
            v = buf.alloc.result
            head = f"`{v}` {v.type}: {buf.nbytes} bytes x {s} stage{'s' * (s != 1)}"
        dsmem = "(read by peers through DSMEM) " if buf.alloc.attrs.get("dsmem") else ""
        if adds < buf.size:  # placed in bytes of tiles whose lifetimes ended before it starts
            shared = next(_name(b) for b in placed if b.offset < buf.offset + buf.size
                          and buf.offset < b.offset + b.size)
            head += f", {'in' if adds == 0 else 'partly in'} the bytes of {shared} after its last use"
        placed.append(buf)
        notes.append((adds, buf.size, f"{head} = {adds} bytes {dsmem}(from {buf.alloc.loc})"))
    notes = [text for _, _, text in sorted(notes, key=lambda t: (-t[0], -t[1]))]
    padding += plan.total - reach
    if padding:
        notes.append(f"alignment of the buffers (16 bytes, 1024 for wgmma operands) = {padding} bytes")
    notes.append(_tilelang_fix(plan, limit, launch))
    return Diagnostic(launch.loc, f"kernel `{kernel}` needs {plan.total} bytes of shared memory per block; "
                      f"limit is {limit} on {target}", notes)


def _name(buf) -> str:
    """How a note names a buffer of TileLang's plan: a tile, or a reduction's workspace."""
    if buf.workspace:
        return f"the workspace of `{buf.alloc.attrs['fn']}` over axis {buf.alloc.attrs['axis']} of `{buf.alloc.operands[0]}`"
    return f"`{buf.alloc.result}`"


def _tilelang_fix(plan, limit: int, launch: Op) -> str:
    """The most pipeline stages that fit, else how far the largest tile must shrink."""
    stages = max((b.versions for b in plan.buffers), default=1)
    for fits in range(stages - 1, 0, -1):
        if _replan(plan, lambda b: (b.nbytes, min(b.versions, fits))) <= limit:
            return f"fix: use at most {fits} pipeline stage{'s' * (fits != 1)} (e.g. `-D stages={fits}`)"
    tiles = [b for b in plan.buffers if not b.workspace]
    if not tiles:
        return "fix: use fewer threads per block (each reduction's workspace holds one element per thread)"
    largest = max(tiles, key=lambda b: b.size)
    factor = 2
    while factor < 1 << 20 and _replan(plan, lambda b: (b.nbytes // factor if b is largest else b.nbytes,
                                                        b.versions)) > limit:
        factor *= 2
    return _shrink(largest.alloc, factor, stages > 1, {})


def _replan(plan, size) -> int:
    """The total of `plan` with each buffer's (bytes, versions) given by `size`."""
    bufs = [copy.copy(b) for b in plan.buffers]
    for new, old in zip(bufs, plan.buffers):
        new.nbytes, new.versions = size(old)
    return smem_tilelang.pack(bufs, len(plan.buffers))

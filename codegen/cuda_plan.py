"""CUDA backend planning: barriers and index arithmetic; placement and layout are passes/cuda_placement.py.

Where each tile lives and the shared-memory layout (`make_plan`, `Plan`, `SmemBuffer`,
`RegReduce`, ...) are computed in passes/cuda_placement.py, which check-smem-fit shares: the
bytes the pass checks are the bytes the kernel declares. They are re-exported here for the
backend's modules.

Barriers: `SyncState` records the shared-memory accesses since the last `__syncthreads()`, each
with its byte range and the thread map that made it; an access to overlapping bytes (at least
one of the two a write) needs a barrier first, unless both touch the same buffer under the same
chunk map (then every thread touches only its own elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsl import exprs
from passes.cuda_placement import (MAX_REDUCE_REGS, SMEM_ALIGN, GemmPlan, Plan, RegReduce, SmemBuffer,  # noqa: F401
                                   chunk_width, make_plan, numel, operand_roles, plan_gemm, register_reduce,
                                   shape_of, warp_split, wide_shapes)

OTHER = "other"  # a thread map that matches no other: always needs a barrier against writes


def chunk_map(shape) -> tuple:
    """The thread map of a chunk loop over `shape` (equal maps touch the same elements per thread)."""
    return ("chunk", tuple(shape))


# ---- barriers --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Access:
    buf: int  # id of the shared buffer's value
    write: bool
    tmap: object  # chunk_map(shape) or OTHER
    lo: int = 0  # bytes of shared memory the buffer occupies: [lo, hi)
    hi: int = 1 << 30


class SyncState:
    """Shared-memory accesses since the last `__syncthreads()` (see module docstring)."""

    def __init__(self, pending: frozenset = frozenset()):
        self.pending = set(pending)

    def copy(self) -> "SyncState":
        return SyncState(frozenset(self.pending))

    def conflicts(self, accesses: list[Access]) -> bool:
        for new in accesses:
            for old in self.pending:
                if old.hi <= new.lo or new.hi <= old.lo or not (old.write or new.write):
                    continue
                if old.buf != new.buf or old.tmap == OTHER or old.tmap != new.tmap:
                    return True
        return False

    def add(self, accesses: list[Access]) -> None:
        self.pending.update(accesses)

    def clear(self) -> None:
        self.pending.clear()

    def merge(self, other: "SyncState") -> None:
        self.pending |= other.pending

    def key(self) -> frozenset:
        return frozenset(self.pending)


# ---- index expressions -----------------------------------------------------------------------

def known_multiple(e: exprs.Expr) -> int:
    """A number the value of `e` is always a multiple of (0: `e` is always 0)."""
    if isinstance(e, exprs.Num):
        return abs(e.value)
    if isinstance(e, exprs.Sym):
        return 1
    if isinstance(e, exprs.Call):
        if e.fn in ("min", "max"):
            return math.gcd(known_multiple(e.args[0]), known_multiple(e.args[1]))
        return 1
    if e.op == "*":
        return known_multiple(e.a) * known_multiple(e.b)
    if e.op in ("+", "-"):
        return math.gcd(known_multiple(e.a), known_multiple(e.b))
    return 1


def times_text(stride: str, dim) -> str:
    """C text of `stride` * `dim`: ints folded, a dynamic dim's C name kept (a tensor's stride)."""
    if stride.isdigit() and isinstance(dim, int):
        return str(int(stride) * dim)
    return f"{stride} * {dim}" if stride != "1" else str(dim)

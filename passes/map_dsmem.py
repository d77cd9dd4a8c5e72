"""`map-dsmem`: peer accesses inside a thread-block cluster -> distributed shared memory.

For every grid with a `cluster` the pass
* checks the cluster against the target: clusters need sm_90; at most 8 blocks (the portable
  size), up to 16 with `nonportable=1` (sm_90's non-portable maximum); every grid extent must
  divide into cluster extents; every peer rank must stay inside the cluster;
* marks each `tile.peer_copy` / `tile.peer_store` and the shared tile it reads / writes with
  `dsmem = true` (the access goes through distributed shared memory: `mapa` +
  `ld/st.shared::cluster`, or cooperative groups' `map_shared_rank`);
* inserts the cluster barriers (`tile.cluster_barrier {inserted = true}`) that order every
  remote read after the peer's last write of the tile (read-after-write), every write of a
  tile after the peers' reads of it (write-after-read: the barrier seed 001's DSMEM kernel
  lacks, which gives wrong sums on an H200 at 132+ clusters), every remote write after the
  owner's earlier uses of the tile and before its later ones, and every block's exit after the
  peers' remote accesses to its shared memory. Two accesses of one tile conflict when at least
  one is remote and at least one writes; accesses by the block itself are ordered by the block's
  own barriers; and a barrier before a block's first remote access, when none precedes it (the
  peer block may not have started: CUDA C++ Programming Guide, "Distributed Shared Memory").
  That one is `relaxed = true`: it orders no memory (no fence, so loads in flight are not
  waited for), and the analysis does not count it as ordering the accesses around it.
  Loops are analysed twice so that an access in one iteration and a conflicting one in the
  next are ordered too.
All blocks of a cluster run the same program, so a block's own write of a tile stands for the
peer's write of its instance. Kernels without clusters pass through unchanged; barriers the
program already has are kept and counted. Source: CUDA C++ Programming Guide, "Distributed
Shared Memory" (cluster.sync() before and after remote accesses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsl import exprs
from dsl.diagnostics import error
from dsl.ir import Module, Op
from dsl.ops import ClusterBarrierOp, peer_tiles, scalar_ranges, shared_accesses
from passes.options import PIPELINE_LOC, options_from
from passes.targets import DEFAULT_SM

CLUSTER_TARGETS = ("sm_90", "sm_90a")
PORTABLE_CLUSTER, MAX_CLUSTER = 8, 16


@dataclass(frozen=True)
class MapDsmemPass:
    name = "map-dsmem"
    target: str = DEFAULT_SM
    nonportable: int = 0  # 1: allow clusters of 9-16 blocks (sm_90 non-portable sizes)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "MapDsmemPass":
        p = cls(**options_from(cls, cls.name, options))
        if p.nonportable not in (0, 1):
            raise error(PIPELINE_LOC, f"`nonportable` of `map-dsmem` must be 0 or 1, got {p.nonportable}")
        return p

    def spec(self) -> str:
        extra = ",nonportable=1" if self.nonportable else ""
        return f"{self.name}{{target={self.target}{extra}}}"

    def run(self, module: Module) -> Module:
        env = module.env
        for launch in module.func.body.ops:
            if launch.name == "tile.launch" and "cluster" in launch.attrs:
                self._check(launch, env, scalar_ranges(module.func, env))
                _mark(launch)
                state = _State()
                launch.body.ops[:] = _tidy(_order(launch.body.ops, state))
                if state.reads:  # peers may still read this block's tiles: no exit before they finish
                    launch.body.ops.append(_barrier(launch.body.ops[-1], "peers read "
                                                    + _names(state.reads) + " until the end of the kernel"))
                elif state.remote_writes:  # peers' stores into this block's tiles may be in flight
                    launch.body.ops.append(_barrier(launch.body.ops[-1], "peers write "
                                                    + _names(state.remote_writes) + " until the end of the kernel"))
        return module

    def _check(self, launch: Op, env: dict[str, int], scalar_bounds: dict) -> None:
        if self.target not in CLUSTER_TARGETS:
            raise error(launch.loc, f"thread-block clusters need sm_90; the target is {self.target}",
                        "compile for sm_90 (H100/H200), or remove the `cluster` from the grid")
        try:
            sizes = [exprs.evaluate(exprs.parse(c), env) for c in launch.attrs["cluster"]]
        except exprs.ExprError as exc:
            raise error(launch.loc, f"cluster extents must be known at compile time: {exc}",
                        "cluster extents are expressions over static dims and constants") from None
        # A grid extent over a dynamic dim (`dynamic M`) is known at launch only: it is a range.
        grid = [exprs.substitute(exprs.parse(g), env) for g in launch.attrs["grid"]]
        total = math.prod(sizes)
        if any(s <= 0 for s in sizes):
            raise error(launch.loc, f"cluster extents must be positive, got {sizes}")
        if total > MAX_CLUSTER:
            raise error(launch.loc, f"a cluster of {total} blocks is too large; sm_90 allows at most {MAX_CLUSTER}",
                        f"use at most {PORTABLE_CLUSTER} blocks (portable) or {MAX_CLUSTER} with "
                        "`map-dsmem{nonportable=1}`")
        if total > PORTABLE_CLUSTER and not self.nonportable:
            raise error(launch.loc, f"a cluster of {total} blocks exceeds the portable size {PORTABLE_CLUSTER}",
                        f"sm_90 allows up to {MAX_CLUSTER} as a non-portable size, which target `cuda` "
                        "launches (`map-dsmem{nonportable=1}` in its pipeline); TileLang's launches do not: "
                        "use target `cuda` or a smaller cluster")
        for var, n, c in zip(launch.attrs["vars"], grid, sizes):
            if not _multiple_of(n, c):
                shown = exprs.to_str(n)
                if exprs.names(n):  # a dynamic dim: divisible for every value, or not known to be
                    raise error(launch.loc, f"the grid extent {shown} of `{var}` is not a multiple of the cluster "
                                f"extent {c} for every value of its dynamic dims",
                                f"write it as a product with a multiple of {c}, e.g. `cdiv(M, BM) * {c}`")
                raise error(launch.loc, f"the grid extent {shown} of `{var}` does not divide into clusters of {c}",
                            f"make it a multiple of {c} (e.g. a `requires` on the dims)")
        ranges = dict(scalar_bounds)  # runtime scalars: [0, their `requires` bound]
        ranges.update({r: (0, c - 1) for r, c in zip(launch.attrs["ranks"], sizes)})
        ranges.update({v: (0, exprs.bounds(n, scalar_bounds)[1] - 1) for v, n in zip(launch.attrs["vars"], grid)})
        for op in launch.walk():
            if op.name == "tile.for":
                lo = exprs.bounds(exprs.substitute(exprs.parse(op.attrs["lo"]), env), ranges)[0]
                hi = exprs.bounds(exprs.substitute(exprs.parse(op.attrs["hi"]), env), ranges)[1]
                ranges[op.attrs["var"]] = (lo, max(lo, hi - 1))
            if op.name not in ("tile.peer_copy", "tile.peer_store"):
                continue
            for text, c in zip(op.attrs["rank"], sizes):
                lo, hi = exprs.bounds(exprs.substitute(exprs.parse(text), env), ranges)
                if lo < 0 or hi >= c:
                    raise error(op.loc, f"peer rank `{text}` can be {lo if lo < 0 else hi}, outside the cluster "
                                f"(ranks 0 to {c - 1})", "wrap it, e.g. `(r + 1) % 2`")


def _multiple_of(e: exprs.Expr, c: int) -> bool:
    """Whether `e` (dims and constants substituted; dynamic dims left as names) is a multiple of
    `c` for every value of its names: a number that is, a product with such a factor, or a sum
    or difference of such terms."""
    if isinstance(e, exprs.Num):
        return e.value % c == 0
    if isinstance(e, exprs.Bin) and e.op == "*":
        return _multiple_of(e.a, c) or _multiple_of(e.b, c)
    if isinstance(e, exprs.Bin) and e.op in ("+", "-"):
        return _multiple_of(e.a, c) and _multiple_of(e.b, c)
    return c == 1


class _State:
    """Shared tiles written and read locally, and read and written remotely (by peers, through
    DSMEM), since the last cluster barrier."""

    FIELDS = ("writes", "reads", "local_reads", "remote_writes")

    def __init__(self, *tables, started: bool = False):
        self.started = started  # a cluster barrier surely passed: every peer has started
        self.writes: dict[str, Op] = {}  # written by the block itself
        self.reads: dict[str, Op] = {}  # read remotely (`tile.peer_copy`)
        self.local_reads: dict[str, Op] = {}  # read by the block itself
        self.remote_writes: dict[str, Op] = {}  # written remotely (`tile.peer_store`)
        for field, table in zip(self.FIELDS, tables):
            getattr(self, field).update(table)

    def copy(self) -> "_State":
        return _State(*(getattr(self, f) for f in self.FIELDS), started=self.started)

    def update(self, other: "_State") -> None:
        for f in self.FIELDS:
            getattr(self, f).update(getattr(other, f))

    def replace(self, other: "_State") -> None:
        for f in self.FIELDS:
            setattr(self, f, getattr(other, f))
        self.started = other.started

    def clear(self) -> None:
        """What a cluster barrier does: nothing is pending, and every peer has started."""
        for f in self.FIELDS:
            getattr(self, f).clear()
        self.started = True


def _mark(launch: Op) -> None:
    remote = peer_tiles(launch)
    for op in launch.walk():
        if op.name in ("tile.peer_copy", "tile.peer_store"):
            op.attrs["dsmem"] = True
        if op.name == "tile.alloc" and id(op.result) in remote:
            op.attrs["dsmem"] = True


def _runs(loop: Op) -> bool:
    """Whether `loop` surely runs at least once (its bounds are integers after `tile`)."""
    try:
        return exprs.evaluate(exprs.parse(loop.attrs["hi"]), {}) > exprs.evaluate(exprs.parse(loop.attrs["lo"]), {})
    except exprs.ExprError:  # bounds depend on other indices: assume it may not run
        return False


def _barrier(at: Op, reason: str, relaxed: bool = False) -> Op:
    attrs = {"inserted": True, "reason": reason}
    if relaxed:
        attrs["relaxed"] = True
    return ClusterBarrierOp(attrs=attrs, loc=at.loc)


def _names(table: dict[str, Op]) -> str:
    return ", ".join(f"`%{n}`" for n in sorted(table))


def _order(ops: list[Op], state: _State) -> list[Op]:
    """`ops` with the cluster barriers they need inserted; `state` is updated in place."""
    out: list[Op] = []
    for op in ops:
        if op.name == "tile.cluster_barrier":
            if op.attrs.get("relaxed"):
                state.started = True
            else:
                state.clear()
            out.append(op)
            continue
        if op.name == "tile.for":
            reason = _entry_conflict(op, state)
            if reason is not None:  # one barrier before the loop instead of one in every trip
                out.append(_barrier(op, reason))
                state.clear()
            entry = state.copy()
            first = state.copy()
            body = _order(op.body.ops, first)
            again = first.copy()  # a second iteration sees what the first left behind
            op.body.ops[:] = _tidy(_order(body, again))
            state.replace(again)
            if not _runs(op):  # zero iterations: whatever was pending before the loop still is
                state.update(entry)
                state.started = entry.started
            out.append(op)
            continue
        read = op.operands[0].name if op.name == "tile.peer_copy" else None
        pushed = op.operands[1].name if op.name == "tile.peer_store" else None
        local_reads, local_write = shared_accesses(op)
        wrote = local_write.name if local_write is not None else None
        used = [v.name for v in local_reads]
        reason = _conflict(state, read, pushed, wrote, used)
        if reason is not None:
            out.append(_barrier(op, reason))
            state.clear()
        elif not state.started and (read or pushed):
            out.append(_barrier(op, "peers access DSMEM only after a cluster barrier: the peer may not have "
                                "started", relaxed=True))
            state.started = True
        if read is not None:
            state.reads[read] = op
        if pushed is not None:
            state.remote_writes[pushed] = op
        if wrote is not None:
            state.writes[wrote] = op
        for name in used:
            state.local_reads[name] = op
        out.append(op)
    return out


def _entry_conflict(loop: Op, state: _State) -> str | None:
    """Why some op of `loop` conflicts with the accesses pending before the loop (a barrier
    before it then serves every trip), or None."""
    for op in loop.walk():
        if op is loop or op.name in ("tile.for", "tile.cluster_barrier"):
            continue
        read = op.operands[0].name if op.name == "tile.peer_copy" else None
        pushed = op.operands[1].name if op.name == "tile.peer_store" else None
        local_reads, local_write = shared_accesses(op)
        reason = _conflict(state, read, pushed, local_write.name if local_write is not None else None,
                           [v.name for v in local_reads])
        if reason is not None:
            return reason
    return None


def _tidy(ops: list[Op]) -> list[Op]:
    """`ops` without a relaxed barrier that another cluster barrier directly follows."""
    return [op for i, op in enumerate(ops)
            if not (op.name == "tile.cluster_barrier" and op.attrs.get("relaxed") and i + 1 < len(ops)
                    and ops[i + 1].name == "tile.cluster_barrier")]


def _conflict(state: _State, read: str | None, pushed: str | None, wrote: str | None,
              used: list[str]) -> str | None:
    """Why the op with these accesses needs a cluster barrier before it, or None."""
    if read is not None and read in state.writes:
        return f"peers read `%{read}` after it is written"
    if read is not None and read in state.remote_writes:
        return f"peers read `%{read}` after a peer writes it"
    if wrote is not None and wrote in state.reads:
        return f"`%{wrote}` is overwritten after peers read it"
    if wrote is not None and wrote in state.remote_writes:
        return f"`%{wrote}` is overwritten after a peer writes it"
    for name in used:
        if name in state.remote_writes:
            return f"`%{name}` is read after a peer writes it"
    if pushed is not None and (pushed in state.writes or pushed in state.local_reads):
        return f"peers write `%{pushed}` after it is used"
    if pushed is not None and (pushed in state.reads or pushed in state.remote_writes):
        return f"peers write `%{pushed}` after other peers access it"
    return None

"""Pushed DSMEM stores signalled through an mbarrier instead of a cluster barrier (CUDA backend).

When a cluster kernel's only peer accesses are remote stores (`tile.peer_store`) and one
map-dsmem barrier after them orders those stores before the owner's reads, the CUDA backend
lowers the stores to `st.async.shared::cluster.mbarrier::complete_tx::bytes` and that barrier to
a wait on an mbarrier in the receiving block, which expects exactly the bytes its peers store
(PTX ISA, "st.async" and "mbarrier": the complete-tx mechanism TMA loads use). The sender does
not wait at all, the receiver waits only for its own bytes, and the cluster barrier's release
(a `MEMBAR.ALL.GPU` in SASS, which waits for every memory access in flight) is gone.

Measured on an H200 (benchmarks/probes/cluster_reduce/ab.py, 1056 two-block clusters, 12
interleaved rounds, time per launch in a CUDA graph of 40 launches; docs/PERFORMANCE.md): the DSMEM
example took 35.77 us this way vs 36.24 us with the cluster barrier (-1.3%, 95% intervals of the
paired differences +-0.03 us); the HBM example took 35.08 us in the same rounds.

The lowering applies only where it is exact; otherwise the cluster barrier stays:
* every peer access in the launch is a `tile.peer_store`, at the top level (not in a loop: the
  mbarrier is used for one phase);
* the launch's cluster barriers are exactly map-dsmem's relaxed start barrier before the first
  store and one inserted (not user-written) barrier after the last one; a user's `sync cluster`
  may order global memory too, which an mbarrier does not;
* no op before that barrier touches a stored-to tile in the block's own instance;
* each store's peer rank depends only on the cluster ranks and maps the ranks one to one, so
  every block receives each store's bytes exactly once and knows how many to expect;
* each store moves whole 4-, 8- or 16-byte words (st.async's sizes).
The receiver cannot exit before its bytes land (it waits for them), and the sender's stores
carry their data in registers, so no barrier is needed at exit.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from dsl import exprs
from dsl.ir import Op
from dsl.ops import shared_accesses

from codegen.cuda_plan import chunk_width, numel, shape_of, wide_shapes
from codegen.cuda_prelude import SIZES


@dataclass
class Signal:
    """The cluster barrier an mbarrier wait replaces, the stores that signal it, and the bytes
    every block receives (the mbarrier's expected transaction count)."""

    barrier: Op
    stores: list[Op]
    nbytes: int


def plan_signal(launch: Op, cluster: list[int], env: dict[str, int], word) -> Signal | None:
    """The signalled form of `launch`'s pushed stores, or None where it does not apply (see the
    module docstring). `word(tile, width)` is the bytes per shared-memory access the backend uses
    for a chunk of `width` elements of `tile`."""
    ops = launch.body.ops
    nested = [op for top in ops if top.name == "tile.for" for op in top.walk()]
    if any(op.name in ("tile.peer_copy", "tile.peer_store", "tile.cluster_barrier") for op in nested):
        return None
    if any(op.name == "tile.peer_copy" for op in ops):
        return None
    stores = [i for i, op in enumerate(ops) if op.name == "tile.peer_store"]
    barriers = [i for i, op in enumerate(ops) if op.name == "tile.cluster_barrier"]
    if not stores or len(barriers) != 2:
        return None
    start, data = (ops[i] for i in barriers)
    if not (start.attrs.get("relaxed") and data.attrs.get("inserted") and not data.attrs.get("relaxed")):
        return None
    if not (barriers[0] < stores[0] and stores[-1] < barriers[1]):
        return None
    dsts = {id(ops[i].operands[1]) for i in stores}
    for top in ops[:barriers[1]]:
        for op in top.walk():
            reads, write = shared_accesses(op)
            if any(id(v) in dsts for v in [*reads, write] if v is not None):
                return None
    ranks = launch.attrs.get("ranks", [])
    nbytes = 0
    for i in stores:
        op = ops[i]
        if not _one_to_one(op.attrs["rank"], ranks, cluster, env):
            return None
        src, dst = op.operands
        shape = shape_of(src)
        if word(dst, chunk_width(shape, shape in wide_shapes(launch))) < 4:
            return None
        nbytes += numel(shape) * SIZES[dst.type.dtype]
    if nbytes >= 1 << 20:  # an mbarrier's transaction count is below 2^20
        return None
    return Signal(data, [ops[i] for i in stores], nbytes)


def _one_to_one(texts: list[str], ranks: list[str], cluster: list[int], env: dict[str, int]) -> bool:
    """Whether the peer rank `texts` (one expression per cluster dim) maps the cluster's ranks
    one to one, with nothing but the ranks and the module's constants in it."""
    sizes = cluster[:len(ranks)]
    seen = set()
    for own in itertools.product(*(range(c) for c in sizes)):
        scope = {**env, **dict(zip(ranks, own))}
        try:
            peer = tuple(exprs.evaluate(exprs.parse(t), scope) for t in texts)
        except exprs.ExprError:
            return False
        if any(not 0 <= p < c for p, c in zip(peer, sizes)):
            return False
        seen.add(peer)
    return len(seen) == math.prod(sizes)

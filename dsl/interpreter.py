"""Reference interpreter: the executable meaning of every tile IR op, in numpy.

Runs a module at any level (before or after any pass): blocks of the grid run one after another,
tiles are numpy arrays in their dtype (f16 rounding is real; bf16 is rounded to nearest-even and
held in f32). Arithmetic is f32 (f64 for f64 tiles) and rounds to the output dtype, like the GPU
backends; gemm accumulates in the accumulator's dtype. Reads outside a global tensor give 0,
writes outside it are dropped; once `tile` has marked an access's dims (`checked`), an access
that reaches outside the tensor in a dim marked false is an error (ProgramError): backends guard
only the marked dims, so a wrong mark would read or write out of bounds on the GPU. Fresh tiles and outputs start as NaN (ints: a poison pattern) so
that unwritten elements show up in comparisons.
"""

from __future__ import annotations

import itertools

import numpy as np

from dsl import exprs
from dsl.ir import Module, Op, Value
from dsl.ops import compare_dtype, has_grid_barrier, shared_accesses
from dsl.types import DTYPES

_POISON_INT = -0x5A5A5A5A


def np_dtype(dtype: str):
    return np.dtype(DTYPES[dtype][1])


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype` and held in that dtype's numpy storage type."""
    if dtype == "bf16":
        bits = np.asarray(x, np.float32).view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)
    if dtype == "bool":  # like C: nonzero (NaN included) is true
        return np.asarray(x) != 0
    if dtype in ("i8", "i32"):  # like C: truncate toward zero (saturate where C is undefined)
        info = np.iinfo(np_dtype(dtype))
        return np.clip(np.trunc(x), info.min, info.max).astype(np_dtype(dtype))
    return np.asarray(x).astype(np_dtype(dtype))


def _compute_dtype(dtype: str):
    return np.float64 if dtype == "f64" else np.float32


def _poison(shape, dtype: str) -> np.ndarray:
    if dtype in ("i8", "i32"):
        return np.full(shape, _POISON_INT if dtype == "i32" else -90, np_dtype(dtype))
    return np.full(shape, np.nan, np_dtype(dtype))


_UNARY = {
    "neg": np.negative, "exp": np.exp, "exp2": np.exp2, "log": np.log, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs, "sqrt": np.sqrt,
    "relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x)),
    "rsqrt": lambda x: 1 / np.sqrt(x),
}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "rsub": lambda x, y: y - x, "rdiv": lambda x, y: y / x, "pow": np.power,
           "max": np.maximum, "min": np.minimum}
_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def run(module: Module, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Execute `module` on `inputs` (argument name -> array, runtime scalar name -> int); returns
    output name -> array.

    Raises ValueError when an input is missing or has the wrong shape, or a requirement fails.
    """
    from dsl.ops import dynamic_dims, dynamic_values, index_tensors, scalars

    env = dict(module.env)
    for name, _, _ in scalars(module.func):
        if name not in inputs:
            raise ValueError(f"missing runtime scalar `{name}`")
        env[name] = int(inputs[name])
    args = module.func.body.args
    env.update(dynamic_values(module.func, {n: np.shape(x) for n, x in inputs.items()}))  # `dynamic M`
    for name in dynamic_dims(module.func):
        if name not in env:
            raise ValueError(f"no input binds dynamic dim `{name}`")
    outs = set(module.func.attrs.get("outputs", []))
    arrays: dict[int, np.ndarray] = {}
    # a dense sampled-gemm output is 0 off the pattern (tiles without an entry are never visited)
    zeroed = {id(op.operands[4]) for op in module.func.walk()
              if op.name == "tile.sampled_gemm" and op.operands[4].type.rank == 2}
    for i, a in enumerate(args):
        shape = a.type.concrete_shape(env)
        if id(a) in zeroed:
            arrays[id(a)] = np.zeros(shape, np_dtype(a.type.dtype))
            continue
        if i in outs and (i not in module.func.attrs.get("mutable", []) or a.name not in inputs):
            arrays[id(a)] = _poison(shape, a.type.dtype)  # a `mut` output without its old value: all poison
            continue
        if a.name not in inputs:
            raise ValueError(f"missing input `{a.name}`")
        x = np.asarray(inputs[a.name])
        if x.shape != shape:
            raise ValueError(f"input `{a.name}` has shape {x.shape}, expected {shape}")
        arrays[id(a)] = round_to(x, a.type.dtype)
    indexed = index_tensors(module.func)
    env.update({a.name: arrays[id(a)] for a in args if a.name in indexed})  # read by `ids[b]` in indices
    for op in module.func.body.ops:
        if op.name == "tile.require":
            if not exprs.evaluate(exprs.parse(op.attrs["cond"]), env):
                raise ValueError(f"requirement `{op.attrs['cond']}` does not hold")
        elif op.name == "tile.launch":
            _launch(op, env, arrays, {id(a) for i, a in enumerate(args) if i in outs})
    return {a.name: arrays[id(a)] for i, a in enumerate(args) if i in outs}


class ProgramError(ValueError):
    """The program itself is wrong at run time (not the interpreter): `loc` is where."""

    def __init__(self, loc, message: str):
        super().__init__(f"{loc}: {message}")
        self.loc, self.message = loc, message


class RaceError(ProgramError):
    """Blocks of a cluster touch a shared tile in an order no barrier fixes (a data race)."""


def _launch(op: Op, env: dict[str, int], arrays: dict[int, np.ndarray], outputs: frozenset = frozenset()) -> None:
    """Run every block; the blocks of a cluster run in lockstep between cluster barriers, in
    rank order within a phase, and peer accesses that race are reported (RaceError); with a
    `sync grid`, every block of the grid does (_run_grid), and accesses to `outputs` (ids of
    the output tensors) that race are reported."""
    if "tiles" in op.attrs:
        return _launch_tiles(op, env, arrays)
    extents = [exprs.evaluate(exprs.parse(g), env) for g in op.attrs["grid"]]
    csize = [exprs.evaluate(exprs.parse(c), env) for c in op.attrs.get("cluster", ["1"] * len(extents))]
    ranks = op.attrs.get("ranks", [])
    if any(n % c for n, c in zip(extents, csize)):
        raise ProgramError(op.loc, f"the grid {extents} does not divide into clusters of {csize}")
    reads_output = any(o.name == "tile.copy" and id(o.operands[0]) in outputs for o in op.walk())
    if has_grid_barrier(op) or (reads_output and "cluster" not in op.attrs):
        return _run_grid(op, [_Block(arrays, {**env, **dict(zip(op.attrs["vars"], point))})
                              for point in itertools.product(*(range(n) for n in extents))], arrays, outputs)
    for cluster in itertools.product(*(range(n // c) for n, c in zip(extents, csize))):
        blocks = {}
        for rank in itertools.product(*(range(c) for c in csize)):
            point = [k * c + q for k, c, q in zip(cluster, csize, rank)]
            scope = {**env, **dict(zip(op.attrs["vars"], point)), **dict(zip(ranks, rank))}
            blocks[rank] = _Block(arrays, scope)
        _run_cluster(op, blocks)


def _launch_tiles(op: Op, env: dict[str, int], arrays: dict[int, np.ndarray]) -> None:
    """A grid over the tiles of a sparse pattern that hold an entry, in row-major tile order."""
    gemm = next((o for o in op.body.ops if o.name == "tile.sampled_gemm"), None)
    if gemm is None:
        raise ProgramError(op.loc, f"the grid over the tiles of `{op.attrs['tiles']}` samples no gemm")
    rows, cols = (arrays[id(v)].astype(np.int64) for v in gemm.operands[2:4])
    bm, bn = (exprs.evaluate(exprs.parse(t), env) for t in op.attrs["tile_shape"])
    ids = (rows // bm) * (-(-int(cols.max(initial=0) + 1) // bn)) + cols // bn
    order = np.argsort(ids, kind="stable")
    starts = np.flatnonzero(np.r_[True, ids[order][1:] != ids[order][:-1]]) if ids.size else np.zeros(0, np.int64)
    for lo, hi in zip(starts, np.r_[starts[1:], ids.size]):
        e = order[lo]
        scope = {**env, **dict(zip(op.attrs["vars"], (int(rows[e] // bm), int(cols[e] // bn))))}
        block = _Block(arrays, scope)
        block.entries = order[lo:hi]  # the tile's entries, found once for the grid (op_sampled_gemm)
        for _ in block.region(op.body.ops):
            pass


def _run_cluster(op: Op, blocks: dict[tuple, "_Block"]) -> None:
    """Step the blocks' generators from barrier to barrier; check every phase for races.

    A phase ends at a full cluster barrier. A relaxed one (`relaxed = true`, map-dsmem's start
    barrier) only tells that every block has started: the blocks step past it together, but
    accesses on both sides of it stay in one phase, since it orders no memory."""
    for b in blocks.values():
        b.cluster = blocks
    running = {rank: b.region(op.body.ops) for rank, b in blocks.items()}
    phase = 0
    while running:
        arrived, done, kinds = [], [], set()
        for rank, gen in running.items():
            blocks[rank].phase = phase
            try:
                kinds.add(next(gen))
                arrived.append(rank)
            except StopIteration:
                done.append(rank)
        if arrived and done or len(kinds) > 1:
            raise ProgramError(op.loc, f"a cluster barrier is reached by ranks {arrived} but not by {done}: "
                               "the blocks of a cluster must pass the same barriers")
        for b in blocks.values():
            b.started = b.started or bool(arrived)
        running = {r: running[r] for r in arrived}
        if kinds == {"relaxed"}:
            continue
        _check_races(blocks, phase, final=not arrived)
        phase += 1


def _run_grid(op: Op, blocks: list["_Block"], arrays: dict[int, np.ndarray], outputs) -> None:
    """A grid with `sync grid`, or one that reads its outputs: every block steps from grid
    barrier to grid barrier in lockstep (within a phase one block after another), and the
    phase's accesses to `outputs` are checked for races (_GlobalRaces)."""
    races = _GlobalRaces(arrays, outputs)
    for i, b in enumerate(blocks):
        b.races, b.index = races, i
    running = [b.region(op.body.ops) for b in blocks]
    while running:
        arrived, done = [], 0
        for gen in running:
            try:
                next(gen)
                arrived.append(gen)
            except StopIteration:
                done += 1
        if arrived and done:
            raise ProgramError(op.loc, f"a grid barrier is reached by {len(arrived)} blocks but not by {done}: "
                               "every block of a grid with `sync grid` must pass the same barriers")
        running = arrived
        races.next_phase()


class _GlobalRaces:
    """Race checks on the outputs of a grid with `sync grid`, per phase (between grid barriers):
    which block wrote and which read each element. Within a phase, another block's store to an
    element a block reads or writes, or a block's read of an element it stored itself (its
    threads are not ordered through global memory), is a race (RaceError); a block may overwrite
    what it read itself."""

    def __init__(self, arrays: dict[int, np.ndarray], outputs):
        self.arrays = arrays
        self.outputs = outputs
        self.writer: dict[int, np.ndarray] = {}
        self.reader: dict[int, np.ndarray] = {}

    def next_phase(self) -> None:
        for t in (*self.writer.values(), *self.reader.values()):
            t.fill(-1)

    def _maps(self, tensor: Value):
        key = id(tensor)
        if key not in self.writer:
            shape = self.arrays[key].shape
            self.writer[key] = np.full(shape, -1, np.int64)
            self.reader[key] = np.full(shape, -1, np.int64)
        return self.writer[key], self.reader[key]

    def read(self, block: int, loc, tensor: Value, win) -> None:
        writer, reader = self._maps(tensor)
        w = writer[win]
        if (w >= 0).any():
            who = int(w[w >= 0].flat[0])
            whom = "itself" if who == block else f"block {who}"
            raise RaceError(loc, f"race: a block reads `{tensor.name}` where {whom} stored in the same phase; "
                            "put a `sync grid` between the store and the read")
        r = reader[win]
        reader[win] = np.where((r == -1) | (r == block), block, -2)

    def write(self, block: int, loc, tensor: Value, win) -> None:
        writer, reader = self._maps(tensor)
        w, r = writer[win], reader[win]
        if ((w >= 0) & (w != block)).any():
            raise RaceError(loc, f"race: two blocks store into the same elements of `{tensor.name}` in one phase "
                            "(between grid barriers)")
        if ((r == -2) | ((r >= 0) & (r != block))).any():
            raise RaceError(loc, f"race: a block stores into `{tensor.name}` where another block reads in the same "
                            "phase; put a `sync grid` between the read and the store")
        writer[win] = block


def _check_races(blocks: dict[tuple, "_Block"], phase: int, final: bool) -> None:
    for reader in blocks.values():
        for (owner, buf), loc in reader.remote_reads.get(phase, {}).items():
            wrote = blocks[owner].local_writes.get(phase, {}).get(buf)
            if wrote is not None:
                raise RaceError(loc, f"race: a block reads its peer's shared tile `{buf}` while the peer "
                                f"writes it at {wrote} with no cluster barrier in between")
            if final:
                raise RaceError(loc, f"race: a block reads its peer's shared tile `{buf}` after the last "
                                "cluster barrier; the peer may exit and free its shared memory first")
    for writer_rank, writer in blocks.items():
        for (owner, buf), loc in writer.remote_writes.get(phase, {}).items():
            used = (blocks[owner].local_writes.get(phase, {}).get(buf)
                    or blocks[owner].local_reads.get(phase, {}).get(buf))
            if used is not None:
                raise RaceError(loc, f"race: a block writes its peer's shared tile `{buf}` while the peer "
                                f"uses it at {used} with no cluster barrier in between")
            for other_rank, other in blocks.items():
                if other_rank == writer_rank:
                    continue
                for table, verb in ((other.remote_writes, "writes"), (other.remote_reads, "reads")):
                    clash = table.get(phase, {}).get((owner, buf))
                    if clash is not None:
                        raise RaceError(loc, f"race: two blocks access shared tile `{buf}` of the same peer in "
                                        f"one phase (another block {verb} it at {clash})")
            if final:
                raise RaceError(loc, f"race: a block writes its peer's shared tile `{buf}` after the last "
                                "cluster barrier; the peer may exit and free its shared memory first")


class _Block:
    """One tile program's execution state: tile arrays and the index names in scope."""

    def __init__(self, globals_: dict[int, np.ndarray], scope: dict[str, int]):
        self.arrays = dict(globals_)
        self.scope = scope
        self.cluster: dict[tuple, "_Block"] = {}
        self.phase = 0
        # per phase: shared tiles written / read by this block (name -> loc), and peers' shared
        # tiles it reads / writes through DSMEM ((owner rank, name) -> loc)
        self.local_writes: dict[int, dict[str, str]] = {}
        self.local_reads: dict[int, dict[str, str]] = {}
        self.remote_reads: dict[int, dict[tuple, str]] = {}
        self.remote_writes: dict[int, dict[tuple, str]] = {}
        self.allocated: set[int] = set()  # ids of the tiles this block has allocated
        self.started = False  # every block of the cluster has passed a barrier (so has started)
        self.races: _GlobalRaces | None = None  # in a grid with `sync grid` (_run_grid)
        self.index = 0  # the block's rank in such a grid
        self.op: Op | None = None  # the op being executed (for race reports)

    def val(self, text: str) -> int:
        return exprs.evaluate(exprs.parse(text), self.scope)

    def region(self, ops: list[Op]):
        """Execute `ops`; a generator that yields at every cluster barrier."""
        for op in ops:
            kind = op.name.split(".")[1]
            if kind == "for":
                yield from self.op_for(op)
            elif kind == "cluster_barrier":
                yield "relaxed" if op.attrs.get("relaxed") else "full"
            elif kind == "grid_barrier":
                yield "grid"
            else:
                self.op = op
                getattr(self, "op_" + kind)(op)
                self._note_local(op)

    def _note_local(self, op: Op) -> None:
        """Record the shared tiles `op` reads and writes in this block (not a peer's instance)."""
        ins, out = shared_accesses(op)
        for v in ins:
            self.local_reads.setdefault(self.phase, {}).setdefault(v.name, str(op.loc))
        if out is not None:
            self.local_writes.setdefault(self.phase, {}).setdefault(out.name, str(op.loc))

    def _peer(self, op: Op) -> tuple[tuple, "_Block"]:
        """The rank and the block of `op`'s cluster peer."""
        rank = tuple(self.val(r) for r in op.attrs["rank"])
        peer = self.cluster.get(rank)
        if peer is None:
            raise ProgramError(op.loc, f"peer rank {list(rank)} is outside the cluster")
        return rank, peer

    def op_peer_store(self, op: Op) -> None:
        src, dst = op.operands
        rank, peer = self._peer(op)
        if not self.started:
            raise RaceError(op.loc, f"race: a block writes its peer's shared tile `{dst.name}` before the first "
                            "cluster barrier; the peer may not have started")
        self.remote_writes.setdefault(self.phase, {}).setdefault((rank, dst.name), op.loc)
        if id(dst) not in peer.arrays:  # shared memory exists for the block's whole life
            peer.arrays[id(dst)] = _poison(dst.type.concrete_shape(peer.scope), dst.type.dtype)
        peer.arrays[id(dst)][...] = round_to(self.arrays[id(src)], dst.type.dtype)

    def op_peer_copy(self, op: Op) -> None:
        src, dst = op.operands
        rank, peer = self._peer(op)
        self.remote_reads.setdefault(self.phase, {}).setdefault((rank, src.name), op.loc)
        if id(src) not in peer.arrays:  # the peer has not even allocated it in this phase
            raise RaceError(op.loc, f"race: a block reads its peer's shared tile `{src.name}` before the "
                            "peer writes it, with no cluster barrier in between")
        self.arrays[id(dst)][...] = round_to(peer.arrays[id(src)], dst.type.dtype)

    def op_alloc(self, op: Op) -> None:
        v = op.result
        first = id(v) not in self.allocated
        self.allocated.add(id(v))
        if first and id(v) in self.arrays:
            return  # a peer stored into it (`tile.peer_store`) before this block reached the alloc
        self.arrays[id(v)] = _poison(v.type.concrete_shape(self.scope), v.type.dtype)

    def op_reshape(self, op: Op) -> None:
        src, dst = op.operands
        self.arrays[id(dst)][...] = round_to(self.arrays[id(src)].reshape(self.arrays[id(dst)].shape), dst.type.dtype)

    def op_fill(self, op: Op) -> None:
        v = op.operands[0]
        value = np.float64(self.val(op.attrs["index"]) if "index" in op.attrs else op.attrs["value"])
        if "axis" in op.attrs:
            shape = self.arrays[id(v)].shape
            axis = op.attrs["axis"]
            pos = np.arange(shape[axis], dtype=np.float64).reshape([-1 if k == axis else 1 for k in range(len(shape))])
            value = np.broadcast_to(value + pos, shape)
        self.arrays[id(v)][...] = round_to(value, v.type.dtype)

    def op_copy(self, op: Op) -> None:
        src, dst = op.operands
        if src.type.space == "global":
            shape = dst.type.concrete_shape(self.scope)
            offsets = [self.val(o) for o in op.attrs["src_offsets"]]
            steps = op.attrs.get("src_steps") or [1] * len(offsets)
            self._check_bounds(op, src, offsets, shape, steps)
            self.arrays[id(dst)][...] = round_to(self._read(src, offsets, shape, steps), dst.type.dtype)
        elif dst.type.space == "global":
            offsets = [self.val(o) for o in op.attrs["dst_offsets"]]
            steps = op.attrs.get("dst_steps") or [1] * len(offsets)
            self._check_bounds(op, dst, offsets, self.arrays[id(src)].shape, steps)
            self._write(dst, offsets, self.arrays[id(src)], steps)
        else:
            self.arrays[id(dst)][...] = round_to(self.arrays[id(src)], dst.type.dtype)

    def _check_bounds(self, op: Op, tensor: Value, offsets, shape, steps) -> None:
        """After `tile`, an access may leave the tensor only in the dims it marked `checked`."""
        checked = op.attrs.get("checked")
        if checked is None:
            return
        full = self.arrays[id(tensor)].shape
        for k, (off, n, size, chk, st) in enumerate(zip(offsets, shape, full, checked, steps)):
            end = off + (n - 1) * st + 1
            if not chk and (off < 0 or end > size):
                raise ProgramError(op.loc, f"`{tensor.name}` dim {k}: the tile [{off}, {end}) reaches outside "
                                   f"[0, {size}) but `tile` marked the dim unchecked (backends do not guard it)")

    def _window(self, tensor: Value, offsets, shape, steps):
        """Per-dim (tile slice, tensor slice) of the in-bounds part, or None if empty; tile element
        i of a dim is tensor element offset + i * step."""
        full = self.arrays[id(tensor)].shape
        tile_idx, tensor_idx = [], []
        for off, n, size, st in zip(offsets, shape, full, steps):
            lo = max(0, -(off // st) if off < 0 else 0)  # first i with off + i * st >= 0
            hi = min(n, -(-(size - off) // st)) if size > off else 0  # past the last i with off + i * st < size
            if hi <= lo:
                return None
            tile_idx.append(slice(lo, hi))
            tensor_idx.append(slice(off + lo * st, off + (hi - 1) * st + 1, st))
        return tuple(tile_idx), tuple(tensor_idx)

    def _read(self, tensor: Value, offsets, shape, steps) -> np.ndarray:
        out = np.zeros(shape, self.arrays[id(tensor)].dtype)
        win = self._window(tensor, offsets, shape, steps)
        if win is not None:
            if self.races is not None and id(tensor) in self.races.outputs:
                self.races.read(self.index, self.op.loc, tensor, win[1])
            out[win[0]] = self.arrays[id(tensor)][win[1]]
        return out

    def _write(self, tensor: Value, offsets, data: np.ndarray, steps) -> None:
        win = self._window(tensor, offsets, data.shape, steps)
        if win is not None:
            if self.races is not None and id(tensor) in self.races.outputs:
                self.races.write(self.index, self.op.loc, tensor, win[1])
            self.arrays[id(tensor)][win[1]] = round_to(data[win[0]], tensor.type.dtype)

    def op_elementwise(self, op: Op) -> None:
        out = op.operands[-1]
        fn = op.attrs["fn"]
        # comparisons run in compare_dtype; `where` selects (exactly) in the output's storage
        # type; everything else computes in the output's compute dtype
        if fn in _COMPARE:
            ct = _compute_dtype(compare_dtype(op.operands[:-1]))
        elif fn == "where":
            ct = np_dtype(out.type.dtype).type
        else:
            ct = _compute_dtype(out.type.dtype)
        ins = [self.arrays[id(v)].astype(ct) for v in op.operands[:-1]]
        with np.errstate(all="ignore"):
            if fn == "where":  # a select: the branch not taken cannot leak (NaN stays out)
                res = np.where(ins[0] != 0, ins[1], ins[2])
            elif fn in _COMPARE:
                rhs = ins[1] if len(ins) == 2 else ct(op.attrs["scalar"])
                res = _COMPARE[fn](ins[0], rhs)
            elif fn in _UNARY:
                res = _UNARY[fn](ins[0])
            else:
                rhs = ins[1] if len(ins) == 2 else ct(op.attrs["scalar"])
                res = _BINARY[fn](ins[0], rhs)
        shape = out.type.concrete_shape(self.scope)
        self.arrays[id(out)][...] = round_to(np.broadcast_to(res, shape), out.type.dtype)

    def op_reduce(self, op: Op) -> None:
        src, dst = op.operands
        ct = _compute_dtype(dst.type.dtype)
        res = _REDUCE[op.attrs["fn"]](self.arrays[id(src)].astype(ct), axis=op.attrs["axis"], keepdims=True)
        if op.attrs.get("accumulate"):  # sum only (ReduceOp.verify)
            res = self.arrays[id(dst)].astype(ct) + res
        self.arrays[id(dst)][...] = round_to(res, dst.type.dtype)

    def op_dot_reduce(self, op: Op) -> None:
        """The integer dot products of i8 tiles (`fuse-int8-dot`), exact in int64."""
        a, b, dst = op.operands
        res = (self.arrays[id(a)].astype(np.int64) * self.arrays[id(b)].astype(np.int64)).sum(axis=-1, keepdims=True)
        self.arrays[id(dst)][...] = round_to(res, dst.type.dtype)

    def op_gemm(self, op: Op) -> None:
        a, b, acc = op.operands
        ct = _compute_dtype(acc.type.dtype) if acc.type.dtype != "f16" else np.float32
        prod = self.arrays[id(a)].astype(ct) @ self.arrays[id(b)].astype(ct)
        self.arrays[id(acc)][...] = round_to(self.arrays[id(acc)].astype(ct) + prod, acc.type.dtype)

    def op_sampled_gemm(self, op: Op) -> None:
        """out at each entry (i, j) of the pattern in this tile = dot(a[i, :], b[:, j]) in f32."""
        a, b, rows, cols, out = op.operands
        r0, c0 = self.val(op.attrs["a_offsets"][0]), self.val(op.attrs["b_offsets"][1])
        bm, bn = (self.val(t) for t in op.attrs["tile"])
        r, c = self.arrays[id(rows)].astype(np.int64), self.arrays[id(cols)].astype(np.int64)
        (m, _), (_, n) = self.arrays[id(a)].shape, self.arrays[id(b)].shape
        if r.size and (r.min() < 0 or r.max() >= m or c.min() < 0 or c.max() >= n):
            raise ProgramError(op.loc, f"an entry of `{op.attrs['pattern']}` lies outside its {m} x {n} shape")
        e = getattr(self, "entries", None)
        if e is None:
            e = np.nonzero((r >= r0) & (r < r0 + bm) & (c >= c0) & (c < c0 + bn))[0]
        elif e.size and not ((r[e] >= r0) & (r[e] < r0 + bm) & (c[e] >= c0) & (c[e] < c0 + bn)).all():
            raise ProgramError(op.loc, "the sampled gemm is not at its tile's corner")
        ct = _compute_dtype(out.type.dtype)
        va, vb = self.arrays[id(a)][r[e]].astype(ct), self.arrays[id(b)][:, c[e]].astype(ct)
        dots = np.einsum("ek,ke->e", va, vb)
        dst = self.arrays[id(out)]
        if out.type.rank == 1:
            dst[e] = round_to(dots, out.type.dtype)
        else:
            dst[r[e], c[e]] = round_to(dots, out.type.dtype)

    def op_for(self, op: Op):
        var = op.attrs["var"]
        lo, hi = self.val(op.attrs["lo"]), self.val(op.attrs["hi"])
        for i in range(lo, hi):
            self.scope[var] = i
            yield from self.region(op.body.ops)
        self.scope.pop(var, None)

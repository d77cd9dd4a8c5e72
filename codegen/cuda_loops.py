"""CUDA backend: loops (`tile.for`), and pipelined loops as multi-stage cp.async pipelines.

A serial or unrolled loop is a C `for` loop. A pipelined loop whose body loads global tiles into
staging tiles (the `async` copies `software-pipeline` made) keeps `stages` loads in flight: the
prologue issues the loads of the first `stages` iterations, iteration s waits for its own
(`cp.async.wait_group stages - 1`), computes on stage (s - lo) % stages, and refills that stage
with the loads of iteration s + stages. Barriers: none when every thread reads back only the
chunks its own cp.async wrote (same chunk map); otherwise one after the wait and one before the
refill. Loop bodies are emitted after iterating the barrier analysis (codegen/cuda_plan.SyncState)
to the fixed point of the state one iteration leaves for the next.
"""

from __future__ import annotations

from dsl import exprs
from dsl.diagnostics import error
from dsl.ir import Op, Value
from codegen.cuda_plan import OTHER, SyncState, chunk_map, shape_of

# The most trips of a barrier-free loop unrolled whole in a kernel with the register hint
# (codegen/cuda.py min_blocks_hint): matmul.tk at K = 2048, BK = 512 takes 4.
FULL_UNROLL_TRIPS = 8


def _loc(op: Op) -> str:
    return f"{op.loc.file}:{op.loc.line}:{op.loc.col}"


class LoopMixin:
    """tile.for; mixed into codegen/cuda._Emitter."""

    def op_for(self, op: Op, d: int, st: SyncState) -> SyncState:
        var = op.attrs["var"]
        try:
            lo_b = exprs.bounds(exprs.parse(op.attrs["lo"]), self.ranges)
            hi_b = exprs.bounds(exprs.parse(op.attrs["hi"]), self.ranges)
        except exprs.ExprError:
            raise error(op.loc, "the CUDA backend cannot bound this loop's index",
                        "loop bounds may use dims, constants, grid indices and enclosing loop indices") from None
        lo, hi = lo_b[0], hi_b[1]
        exact = lo_b[0] == lo_b[1] and hi_b[0] == hi_b[1]  # the same trips whatever the grid and enclosing indices
        # one exact trip (as a GEMV's `range(cdiv(G, NG))` with NG >= G): the body has no previous
        # trip to guard against
        one_trip = exact and hi - lo == 1
        self.ranges[var] = (lo, max(lo, hi - 1))
        kind = op.attrs["kind"]
        self.hoist_a_fragments(op, d, st)
        copies = self.async_copies(op) if kind == "pipelined" else []
        if copies:
            return self.pipelined(op, d, st, copies)
        v, lo_c, hi_c = self.cname(var), self.cexpr(op.attrs["lo"]), self.cexpr(op.attrs["hi"])
        self.line(d, f"// for {var} in [{op.attrs['lo']}, {op.attrs['hi']}), {kind} ({_loc(op)})")
        saved, self.lines = self.lines, []
        if one_trip:  # the body starts from the state before the loop
            st.merge(self.region(op.body.ops, d + 1, st.copy()))
        else:
            self.loop_body(op.body.ops, d + 1, st)
        body, self.lines = self.lines, saved
        barrier_free = not any("__syncthreads" in b or "this_cluster" in b or "tk_mbar" in b for b in body)
        if kind == "unroll":
            self.line(d, "#pragma unroll")
        elif barrier_free and exact and 2 <= hi - lo <= FULL_UNROLL_TRIPS and self.min_blocks:
            # the grid fits on the GPU at once and ptxas may spend registers (min_blocks_hint): every
            # trip's loads issue before the first trip's arithmetic, one memory round trip in all
            self.line(d, "#pragma unroll  // a few trips, no barrier, registers to spare: every trip's loads first")
        elif hi - lo >= 4 and barrier_free:
            # a trip with no barrier (a GEMV's loads and multiply-adds after defer-reduce): two trips
            # per loop iteration let the next trip's loads issue before this trip's arithmetic
            self.line(d, "#pragma unroll 2  // no barrier in the body: overlap the loads of two trips")
        self.line(d, f"for (int {v} = {lo_c}; {v} < {hi_c}; ++{v}) {{")
        self.lines.extend(body)
        self.line(d, "}")
        return st

    def loop_body(self, ops: list[Op], d: int, st: SyncState, top=None, bottom=None, split: int | None = None) -> None:
        """Emit a loop body whose entry state is `st` joined with its own exit state (the previous
        iteration's accesses); `st` becomes the state after the loop. `top(d, state)` emits the
        start of every iteration, `bottom(d, state)` what follows `ops[:split]` (default: all)."""
        entry = st.copy()
        state = entry.copy()
        split = len(ops) if split is None else split

        def one(s: SyncState) -> SyncState:
            if top is not None:
                top(d, s)
            out = self.region(ops[:split], d, s)
            if bottom is not None:
                bottom(d, out)
            return self.region(ops[split:], d, out)

        for _ in range(4):  # iterate to the fixed point of the loop-carried state
            saved, self.lines = self.lines, []
            out = one(state.copy())
            self.lines = saved
            nxt = entry.copy()
            nxt.merge(out)
            if nxt.key() == state.key():
                break
            state = nxt
        st.merge(one(state))

    def async_copies(self, loop: Op) -> list[Op]:
        return [o for o in loop.body.ops if o.name == "tile.copy" and o.attrs.get("async")
                and o.operands[0].type.space == "global" and self.plan.where(o.operands[1]) == "shared"]

    def pipelined(self, op: Op, d: int, st: SyncState, copies: list[Op]) -> SyncState:
        """A pipelined loop with `stages` copies of each staging tile: the loads of the first
        `stages` iterations are issued (cp.async) before the loop; iteration s waits for its own,
        computes, and refills the stage it used with the loads of iteration s + stages. When other threads read a staging tile, barriers go after the
        wait (its data is every thread's) and before the refill (every thread is done with it)."""
        var = op.attrs["var"]
        stages = self.value(op.attrs["stages"])
        bufs = [c.operands[1] for c in copies]
        for b in bufs:
            slots = self.plan.smem[id(b)].slots
            if slots < stages:
                raise error(op.loc, f"staging tile `{b}` has {slots} stage(s) for a {stages}-stage loop",
                            "run `software-pipeline` on the IR (it sizes the staging tiles)")
        barrier = self.staged_barrier(op, bufs)
        v, lo, hi = self.cname(var), self.cexpr(op.attrs["lo"]), self.cexpr(op.attrs["hi"])
        self.line(d, f"// for {var} in [{op.attrs['lo']}, {op.attrs['hi']}), pipelined: {stages} stage(s) of loads "
                  f"in flight through cp.async ({_loc(op)})")
        self.sync([self.access(b, True, chunk_map(shape_of(b))) for b in bufs], d, st)
        self.line(d, "{")
        d += 1
        rel = lambda x: x if lo == "0" else f"({x} - {lo})"  # noqa: E731
        first = f"{lo} + " if lo != "0" else ""
        self.line(d, f"// prologue: the loads of the first {stages} iteration(s)")
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int {v} = {lo}; {v} < {first}{stages}; ++{v}) {{")
        self.line(d + 1, f"if ({v} < {hi}) {{")
        self.issue(copies, d + 2, rel(v))
        self.line(d + 1, "}")
        self.line(d + 1, "tk_cp_async_commit();")
        self.line(d, "}")
        nxt, stage = self.op_names(op, f"{var}_next", f"stage_{var}")

        def top(dd: int, state: SyncState) -> None:
            self.line(dd, f"tk_cp_async_wait<{stages - 1}>();  // this thread's loads for iteration {v} have landed")
            if barrier:
                self.line(dd, "__syncthreads();  // ... and every thread's")
                state.clear()
            self.line(dd, f"const int {stage} = {rel(v)} % {stages};" if stages > 1 else f"const int {stage} = 0;")

        def bottom(dd: int, state: SyncState) -> None:
            if barrier:
                self.line(dd, f"__syncthreads();  // every thread is done with stage {stage}")
                state.clear()
            self.line(dd, f"if (const int {nxt} = {v} + {stages}; {nxt} < {hi}) {{  // refill the stage")
            self.override[var] = nxt
            self.issue(copies, dd + 1, stage)
            del self.override[var]
            self.line(dd, "}")
            self.line(dd, "tk_cp_async_commit();")

        self.line(d, "#pragma unroll 1  // one pipeline step per trip keeps registers for occupancy")
        self.line(d, f"for (int {v} = {lo}; {v} < {hi}; ++{v}) {{")
        body = [o for o in op.body.ops if not any(o is c for c in copies)]
        # The refill goes at the end of the iteration: on an H200, refilling right after the last
        # reader of the staging tile (before miss.tk's C stores) took 234 instead of 216 us.
        saved = set(self.staged)
        self.staged |= {id(b) for b in bufs}
        for b in bufs:
            self.slot[id(b)] = stage
        self.loop_body(body, d + 1, st, top, bottom)
        self.staged = saved
        for b in bufs:
            del self.slot[id(b)]
        self.line(d, "}")
        self.line(d, "tk_cp_async_wait<0>();")
        # The staging tiles are read after the loop only by its next run (inside an outer loop).
        st.add([self.access(b, False, OTHER if barrier else chunk_map(shape_of(b))) for b in bufs])
        self.line(d - 1, "}")
        return st

    def staged_barrier(self, loop: Op, bufs: list[Value]) -> bool:
        """Whether some op of the loop reads a staging tile under another thread map than the
        cp.async that fills it (then each iteration starts with a barrier)."""
        ids = {id(b): chunk_map(shape_of(b)) for b in bufs}
        for o in loop.walk():
            if o is loop or o.name in ("tile.for", "tile.alloc") or (o.name == "tile.copy" and o.attrs.get("async")):
                continue
            for a in self.accesses(o):
                if a.buf in ids and a.tmap != ids[a.buf]:
                    return True
        return False

    def issue(self, copies: list[Op], d: int, slot: str) -> None:
        """The global -> staging-tile loads of `copies` into stage `slot`."""
        for c in copies:
            dst = c.operands[1]
            saved = self.slot.get(id(dst))
            self.slot[id(dst)] = slot
            async_ = self.can_cp_async(c)
            how = "cp.async" if async_ else "synchronous loads (cp.async cannot take this tile)"
            self.line(d, f"// {self.describe(c)} via {how} ({_loc(c)})")
            self.chunk_loop(shape_of(dst), d, lambda ch, dd, c=c, a=async_: self.load_chunk(c, ch, dd, a))
            if saved is None:
                del self.slot[id(dst)]
            else:
                self.slot[id(dst)] = saved


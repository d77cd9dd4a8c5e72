"""The warp tiling of a SIMT gemm: `acc += a @ b with warp(WM, WN, WNITER) thread(TM, TN)`, carried
as tile.gemm's `warp` and `thread` attributes (dsl/ops.GemmOp), and its constraints.

Checked at lowering (a located error at the clause), by the verifier after every pass (with the
launch's thread count) and used by the CUDA backend (codegen/cuda_gemm.py). Source: seed 002's
SGEMM section and its "Parameter check"; the "warptiling" kernel of Simon Boehm's CUDA SGEMM
worklog (2022).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl import exprs
from dsl.ir import Op


@dataclass(frozen=True)
class WarpTiling:
    """The warp tiling of a SIMT gemm whose output tile is [bm, bn] (seed 002's SGEMM section;
    the "warptiling" kernel of Simon Boehm's CUDA SGEMM worklog, 2022).

    The block's (bm / wm) x (bn / wn) warps each own a wm x wn tile of the output; a warp splits
    its tile into wmiter x wniter sub-tiles of wsubm x wsubn (wsubm = wm / wmiter, wsubn = wn /
    wniter), and each of its 32 threads owns a tm x tn piece of every sub-tile: thread `lane` of
    the warp sits at row lane / (wsubn / tn), column lane % (wsubn / tn) of the sub-tile's grid of
    (wsubm / tm) x (wsubn / tn) pieces. A thread thus holds wmiter * wniter * tm * tn outputs.
    wmiter is not given: it is what makes 32 threads cover the warp tile,
    wm * wn / (32 * tm * tn * wniter).
    """

    bm: int
    bn: int
    wm: int
    wn: int
    wniter: int
    tm: int
    tn: int

    @property
    def wmiter(self) -> int:
        return self.wm * self.wn // (32 * self.tm * self.tn * self.wniter)

    @property
    def wsubm(self) -> int:
        return self.wm // self.wmiter

    @property
    def wsubn(self) -> int:
        return self.wn // self.wniter

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def lanes_n(self) -> int:
        """Threads of a warp along N in a sub-tile (wsubn / tn); wsubm / tm along M."""
        return self.wsubn // self.tn


def warp_tiling(op: Op, env: dict[str, int]) -> tuple[WarpTiling | None, list[str]]:
    """The `WarpTiling` of tile.gemm `op` (None when it has no `warp`/`thread` attributes) and the
    constraints it violates, as messages naming the expressions (seed 002's "Parameter check"):
    WM | M, WN | N, WNITER | WN, 32 * TM * TN * WNITER | WM * WN, WMITER | WM, TM | WM / WMITER,
    TN | WN / WNITER. The thread count (warps * 32) is checked by `warp_threads_problem`."""
    warp, thread = op.attrs.get("warp"), op.attrs.get("thread")
    if warp is None and thread is None:
        return None, []
    if not (isinstance(warp, list) and len(warp) == 3 and isinstance(thread, list) and len(thread) == 2):
        return None, ["a gemm's warp tiling needs `warp = [WM, WN, WNITER]` and `thread = [TM, TN]`"]
    texts = [*warp, *thread]
    vals = [exprs.evaluate(exprs.parse(t), env) for t in texts]
    names = ["WM", "WN", "WNITER", "TM", "TN"]
    bad = [f"`{n}` (`{t}`) must be positive, got {v}" for n, t, v in zip(names, texts, vals) if v <= 0]
    if bad:
        return None, bad
    a, b = op.operands[0], op.operands[1]
    m, n = a.type.concrete_shape(env)[0], b.type.concrete_shape(env)[1]
    wm, wn, wniter, tm, tn = vals
    if m % wm:
        return None, [f"warp tile `WM` = {wm} (`{texts[0]}`) does not divide the gemm's M extent {m}"]
    if n % wn:
        return None, [f"warp tile `WN` = {wn} (`{texts[1]}`) does not divide the gemm's N extent {n}"]
    if wn % wniter:
        return None, [f"`WNITER` = {wniter} (`{texts[2]}`) does not divide `WN` = {wn}"]
    per_warp = 32 * tm * tn * wniter
    if (wm * wn) % per_warp:
        return None, [f"a warp tile of WM x WN = {wm} x {wn} outputs does not split into 32 threads x WNITER x TM x "
                      f"TN = {per_warp} (WMITER = WM * WN / (32 * TM * TN * WNITER) must be a whole number)"]
    t = WarpTiling(m, n, wm, wn, wniter, tm, tn)
    if wm % t.wmiter:
        return None, [f"`WMITER` = {t.wmiter} (WM * WN / (32 * TM * TN * WNITER)) does not divide `WM` = {wm}"]
    if t.wsubm % tm:
        return None, [f"`TM` = {tm} (`{texts[3]}`) does not divide the warp sub-tile's rows WM / WMITER = {t.wsubm}"]
    if t.wsubn % tn:
        return None, [f"`TN` = {tn} (`{texts[4]}`) does not divide the warp sub-tile's columns WN / WNITER = {t.wsubn}"]
    return t, []


def warp_threads_problem(t: WarpTiling, threads: int) -> str | None:
    """The message when `threads` is not the warp tiling's (bm / wm) * (bn / wn) warps of 32."""
    if threads == 32 * t.warps:
        return None
    return (f"the warp tiling has (M / WM) * (N / WN) = ({t.bm} / {t.wm}) * ({t.bn} / {t.wn}) = {t.warps} warps, "
            f"which need {32 * t.warps} threads; the block has {threads}")

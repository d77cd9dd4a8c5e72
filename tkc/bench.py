"""Kernel timing shared by `tkc tune` and the benchmark scripts (benchmarks/*.py).

Method (/work/.library/device/METHOD.md, benchmarks/README.md): warm up, then take the median of
many timed runs with `triton.testing.do_bench` (CUDA events) on the GPU, or of `perf_counter`
wall times on the CPU (a dry run whose numbers mean nothing); rotate among several input sets
whose total size exceeds the L2 cache, so repeated runs do not time the cache.
"""

from __future__ import annotations

import statistics
import time

L2_BYTES = 50 * 2**20  # H100/H200 L2 (50 MiB); rotated input sets should exceed it


class Timer:
    """Median time in ms of `fn()` after warm-up: do_bench on the GPU, perf_counter on the CPU.
    `warmup_ms` and `rep_ms` are do_bench's warm-up and repeat budgets in milliseconds."""

    def __init__(self, cpu: bool, warmup_ms: float, rep_ms: float):
        self.cpu, self.warmup_ms, self.rep_ms = cpu, warmup_ms, rep_ms

    def __call__(self, fn) -> float:
        if self.cpu:
            return self._wall(fn)
        from triton.testing import do_bench

        try:
            return float(do_bench(fn, warmup=self.warmup_ms, rep=self.rep_ms, return_mode="median"))
        except TypeError:  # older Triton: no return_mode
            return float(do_bench(fn, warmup=self.warmup_ms, rep=self.rep_ms, quantiles=[0.5])[0])

    def _wall(self, fn) -> float:
        fn()
        t0 = time.perf_counter()
        n_warm = 0
        while (time.perf_counter() - t0) * 1e3 < self.warmup_ms or n_warm < 2:
            fn()
            n_warm += 1
        times = []
        t_end = time.perf_counter() + self.rep_ms / 1e3
        while time.perf_counter() < t_end or len(times) < 5:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)


def rotating(fn, sets):
    """A no-argument callable that runs `fn(*sets[i])` on the next input set each call (defeats
    the L2 cache when the sets together exceed it)."""
    state = {"i": 0}

    def run():
        i = state["i"]
        state["i"] = (i + 1) % len(sets)
        return fn(*sets[i])

    return run


def graph_ms(timer: Timer, fn, sets, calls: int = 0) -> float:
    """Median time in ms of one `fn(*set)` call replayed from a CUDA graph that holds `calls`
    calls rotating over `sets` (default: max(8, len(sets))): the kernels' own time, without the
    host's launch and argument-checking work between them (METHOD.md: "for many small launches,
    capture a graph and time its replays"). Raises whatever capture raises when `fn` cannot be
    captured (a host synchronization inside it, say)."""
    import torch

    calls = calls or max(8, len(sets))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: compiles, caches, allocator pools
        for i in range(len(sets)):
            fn(*sets[i])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(*sets[i % len(sets)])
    return timer(graph.replay) / calls


def host_ms(fn, sets, calls: int = 64, rounds: int = 5, sync=None) -> float:
    """The host's time in ms to enqueue one `fn(*set)` call (rotating over `sets`): `calls` calls
    between two synchronizes, best of `rounds`. Where it exceeds the time do_bench's L2 clear
    gives the host (about 60-70 us on an H200), the call's do_bench time is the host's, not the
    GPU's (docs/PERFORMANCE.md, "what a timed call adds"). `sync` defaults to
    torch.cuda.synchronize."""
    if sync is None:
        import torch

        sync = torch.cuda.synchronize
    best = float("inf")
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for i in range(calls):
            fn(*sets[i % len(sets)])
        best = min(best, (time.perf_counter() - t0) / calls)
    sync()
    return best * 1e3

"""The tables and target lines of benchmarks/sddmm.py, from its result rows (plain dicts).

A row has the shape (M, N, K, nnz), `pattern`, `variant`, `kind` ("tkc", "seed", "baseline"),
`status`, `time_us` (None when not timed), `gflops`, `frac_floor`, the speedups `x_cusparse`,
`x_seed`, `x_dense` (baseline time / row time), and optionally `graph_us`, `x_cusparse_graph`, `host_us`
(the host's time to enqueue a call), `preprocess_us`. A group
is {"shape", "pattern", "rows", "best"}: one (shape, pattern) and its fastest tkc row (or None).
"""

from __future__ import annotations

TARGET_SHAPE = (10000, 10000, 256, 5_000_000)  # (M, N, K, nnz): >= 40% of the bytes floor here
X_CUSPARSE_TARGET, FLOOR_TARGET = 10.0, 0.4


def fmt(v, spec: str, empty: str = "-") -> str:
    return empty if v is None else format(v, spec)


def short_shape(s: dict) -> str:
    """`10000^2 K256 5.00M`, `3000x7000 K256 313k`."""
    dims = f"{s['M']}^2" if s["M"] == s["N"] else f"{s['M']}x{s['N']}"
    n = s["nnz"]
    return f"{dims} K{s['K']} " + (f"{n / 1e6:.2f}M" if n >= 10**6 else f"{n / 1e3:.0f}k" if n >= 10**3 else str(n))


def print_row(r: dict) -> None:
    """One variant's line while the run goes."""
    if r["time_us"] is None:
        print(f"  {r['variant']:<22} {r['status']}: {r['note']}", flush=True)
        return
    line = (f"  {r['variant']:<22} {r['time_us']:10.1f} us {r['gflops']:8.0f} GFLOP/s {100 * r['frac_floor']:5.1f}% "
            f"floor  x{fmt(r.get('x_cusparse'), '.2f')} cuSPARSE  err {fmt(r.get('rel_err'), '.1e')}")
    if r.get("graph_us") is not None:
        line += f"  graph {r['graph_us']:.1f} us"
    if r.get("host_us") is not None:
        line += f"  host {r['host_us']:.1f} us"
    if r.get("preprocess_us") is not None:
        line += f"  prep {r['preprocess_us']:.0f} us"
    if r["status"] != "ok":
        line += f"  {r['status']} ({r['note']})"
    print(line, flush=True)


def _time(r: dict | None) -> str:
    return f"{r['time_us']:.1f}" if r and r["time_us"] else (r["status"] if r else "-")


def summary(groups: list[dict], meta: dict) -> str:
    """One line per (shape, pattern): the baselines, the fastest tkc example and its ratios."""
    lines = [f"SDDMM on {meta['device_name']} ({meta['date']}); copy {meta['copy']['tbps']:.2f} TB/s; median of "
             f"{meta['timer']}; target {meta['target']}; times in us",
             "", "| shape | pattern | cuSPARSE | dense | seed (best) | tkc (best) | graph | host | GFLOP/s | % floor "
             "| x cuSPARSE | x cuSPARSE (graphs) | x seed | x dense | prep |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in groups:
        by = {r["variant"]: r for r in g["rows"]}
        t = g["best"]
        seeds = [r for r in g["rows"] if r["kind"] == "seed"]
        seed = min((r for r in seeds if r["time_us"]), key=lambda r: r["time_us"], default=seeds[0] if seeds else None)
        tkc = f"{t['time_us']:.1f} {t['variant']}" if t else next(
            (f"{r['status']}: {r['note'][:40]}" for r in g["rows"] if r["kind"] == "tkc"), "-")
        lines.append(f"| {short_shape(g['shape'])} | {g['pattern']} | {_time(by.get('cusparse'))} "
                     f"| {_time(by.get('dense'))} | {_time(seed)} | {tkc} | {fmt(t and t.get('graph_us'), '.1f')} "
                     f"| {fmt(t and t.get('host_us'), '.1f')} "
                     f"| {fmt(t and t['gflops'], '.0f')} | {fmt(t and 100 * t['frac_floor'], '.0f')} "
                     f"| {fmt(t and t['x_cusparse'], '.1f')} | {fmt(t and t.get('x_cusparse_graph'), '.1f')} "
                     f"| {fmt(t and t['x_seed'], '.2f')} "
                     f"| {fmt(t and t['x_dense'], '.2f')} | {fmt(t and t.get('preprocess_us'), '.0f')} |")
    return "\n".join(lines)


def full_table(results: list[dict]) -> str:
    """Every row, as markdown (written beside the JSON)."""
    lines = ["| shape | pattern | variant | time (us) | GFLOP/s | % floor | x cuSPARSE | x seed | x dense | graph (us) "
             "| x cuSPARSE (graphs) | host (us) | prep (us) | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r["time_us"] is None:
            lines.append(f"| {short_shape(r)} | {r['pattern']} | {r['variant']} | - | - | - | - | - | - | - | - | - | - "
                         f"| {r['status']}: {r['note'][:80]} |")
            continue
        lines.append(f"| {short_shape(r)} | {r['pattern']} | {r['variant']} | {r['time_us']:.1f} | {r['gflops']:.0f} "
                     f"| {100 * r['frac_floor']:.1f} | {fmt(r.get('x_cusparse'), '.2f')} "
                     f"| {fmt(r.get('x_seed'), '.2f')} | {fmt(r.get('x_dense'), '.2f')} "
                     f"| {fmt(r.get('graph_us'), '.1f')} | {fmt(r.get('x_cusparse_graph'), '.2f')} "
                     f"| {fmt(r.get('host_us'), '.1f')} "
                     f"| {fmt(r.get('preprocess_us'), '.0f')} | {r['status']} |")
    return "\n".join(lines)


def targets(groups: list[dict]) -> list[str]:
    """The issue's targets, judged on each group's fastest tkc row: met where measured, the misses named."""
    out = []
    for key, what, ok in (("x_cusparse", f">= {X_CUSPARSE_TARGET:g}x cuSPARSE", lambda x: x >= X_CUSPARSE_TARGET),
                          ("x_cusparse_graph", f">= {X_CUSPARSE_TARGET:g}x cuSPARSE, both as CUDA-graph replays",
                           lambda x: x >= X_CUSPARSE_TARGET),
                          ("x_seed", "faster than the seed's kernel", lambda x: x > 1.0),
                          ("x_dense", "faster than dense-then-mask", lambda x: x > 1.0)):
        seen = [(g, g["best"][key]) for g in groups if g["best"] and g["best"].get(key) is not None]
        missed = [f"{short_shape(g['shape'])} {g['pattern']} ({x:.2f})" for g, x in seen if not ok(x)]
        out.append(f"target {what}: met at {len(seen) - len(missed)} of {len(seen)} measured"
                   + (f"; missed at {', '.join(missed)}" if missed else ""))
    for g in groups:
        s = g["shape"]
        if (s["M"], s["N"], s["K"], s["nnz"]) == TARGET_SHAPE and g["best"]:
            f = g["best"]["frac_floor"]
            out.append(f"target >= {100 * FLOOR_TARGET:.0f}% of the bytes floor at {short_shape(s)} {g['pattern']}: "
                       f"{100 * f:.0f}% ({'met' if f >= FLOOR_TARGET else 'missed'})")
    return out

"""Probe (issue 10): does the order of a decode example's blocks matter? Each elementwise or
row-wise example whose grid is (rows, column blocks) is timed in two forms, the same work per
block: "rows first" (grid (E0, E1) as (v0, v1): v0 on blockIdx.x, the fastest, so the blocks that
run together read pieces of many rows) and "memory order" (one index i over both, v0 = i / E1 and
v1 = i % E1: blocks that run together read consecutive bytes of a row-major tensor). `memory_order`
writes the second form from the first; examples/accum.tk and silu_mul.tk are written in memory
order since 2026-11-30, so their "rows first" forms are in ROWS_FIRST (the files before). torch
eager (the function a user would write, benchmarks/transformer.py `eager_fns`) runs in the same
process. Each form is checked against the file's float64 reference, then timed as CUDA-graph
replays over three input sets (tkc.bench.graph_ms), two rounds.

Prediction: memory order wins where a block reads a small piece of a long row (accum, silu_mul at
16384 rows) and changes nothing where one block holds a whole row or one row is all there is.
Outcome (NVIDIA H200, 2026-11-30, docs/PERFORMANCE.md "Grid order of the elementwise examples"):
memory order wins for accum (16384 x 4096 f16 93.8 us against 97.1, f32 191.2 against 198.4) and
silu_mul (f32 186.2 against 192.0); rope lost 0.8-1.6 us at 16384 x 4096, and embedding tied.

    source .device/env.sh && python3 benchmarks/probes/decode_tiling/grid_order.py [NAME ...]
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

ROWS_FIRST = {"accum": """kernel accum<BN=1024, threads=256>(X: f32[B, N], D: f32[B, N]) -> (Y: f32[B, N])
    where B = 1, N = 4096
    reference "X + D"
{
    grid (B, cdiv(N, BN)) as (b, n) threads(threads)
    Y[b : +1, n*BN : +BN] = X[b : +1, n*BN : +BN] + D[b : +1, n*BN : +BN]
}
""", "silu_mul": """kernel silu_mul<BN=1024, threads=256>(A: f32[B, H], G: f32[B, H]) -> (Y: f32[B, H])
    where B = 1, H = 11008
    reference "F.silu(A) * G"
{
    grid (B, cdiv(H, BN)) as (b, n) threads(threads)
    Y[b : +1, n*BN : +BN] = silu(A[b : +1, n*BN : +BN]) * G[b : +1, n*BN : +BN]
}
"""}

# (example, dims, runtime scalars, constant variants, tensor dtype); silu_mul's and accum's
# 16384 x 4096 are issue 10's target shapes, the others decode shapes of benchmarks/transformer.py
CASES = [
    ("accum", {"B": 16384, "N": 4096}, {}, [{}, {"BN": 4096, "threads": 1024}], "f16"),
    ("accum", {"B": 16384, "N": 4096}, {}, [{}, {"BN": 4096, "threads": 1024}], ""),
    ("accum", {"B": 64, "N": 4096}, {}, [{}], ""),
    ("accum", {"B": 1, "N": 4096}, {}, [{}], ""),
    ("silu_mul", {"B": 16384, "H": 4096}, {}, [{}, {"BN": 4096, "threads": 512}], "f16"),
    ("silu_mul", {"B": 16384, "H": 4096}, {}, [{}, {"BN": 4096, "threads": 512}], ""),
    ("silu_mul", {"B": 64, "H": 11008}, {}, [{}], ""),
    ("silu_mul", {"B": 1, "H": 11008}, {}, [{}], ""),
    ("rope", {"B": 16384, "D": 4096}, {"pos": 1023}, [{}], ""),
    ("rope", {"B": 64, "D": 4096}, {"pos": 1023}, [{}], ""),
    ("embedding", {"V": 32000, "N": 4096, "B": 64}, {}, [{}], ""),
    ("embedding", {"V": 32000, "N": 4096, "B": 1}, {}, [{}], ""),
]


def _split_top(s: str) -> list[str]:
    """`s` split at its commas outside parentheses, each part stripped."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    return parts + [cur.strip()]


def memory_order(text: str) -> str:
    """The kernel `text` with its 2-D grid `grid (E0, E1) as (v0, v1)` written as one index over
    both, v1 the fastest: `grid (E0 * (E1)) as (i)`, v0 -> (i / (E1)) and v1 -> (i % (E1)) in the
    body. ValueError where the grid is not 2-D."""
    at = text.index("grid (") + len("grid (")
    depth, j = 1, at
    while depth:
        depth += (text[j] == "(") - (text[j] == ")")
        j += 1
    extents = _split_top(text[at:j - 1])
    m = re.compile(r"\s*as \((\w+), (\w+)\)").match(text, j)
    if len(extents) != 2 or m is None:
        raise ValueError(f"not a 2-D grid: {text[at - 6:j + 20]!r}")
    (e0, e1), (v0, v1) = extents, m.groups()
    body = re.sub(rf"\b{v0}\b", f"(i / ({e1}))", text[m.end():])
    body = re.sub(rf"\b{v1}\b", f"(i % ({e1}))", body)
    return text[:at - len("grid (")] + f"grid ({e0} * ({e1})) as (i)" + body


def forms(name: str, dtype: str, workdir: str) -> dict[str, str]:
    """{"rows first": path, "memory order": path} of example `name` with its f32 tensors in
    `dtype` (benchmarks/transformer.py `source`)."""
    from transformer import source

    with open(source({"kernel": name, "dtype": dtype}, workdir), encoding="utf-8") as f:
        text = f.read()
    if name in ROWS_FIRST:
        texts = {"rows first": ROWS_FIRST[name].replace("f32[", (dtype or "f32") + "["), "memory order": text}
    else:
        texts = {"rows first": text, "memory order": memory_order(text)}
    paths = {}
    for tag, t in texts.items():
        paths[tag] = os.path.join(workdir, f"{name}_{dtype or 'f32'}_{tag.replace(' ', '_')}.tk")
        with open(paths[tag], "w", encoding="utf-8") as f:
            f.write(t)
    return paths


def main() -> None:
    import torch

    import tkc
    from miss import Timer
    from tkc import driver, oracle
    from tkc.bench import graph_ms
    from transformer import eager_fns

    names = sys.argv[1:]
    workdir = tempfile.mkdtemp()
    timer = Timer(False, 25, 100)
    fns = eager_fns()
    print(torch.cuda.get_device_name(), "(graph us, two rounds)")
    for name, dims, scalars, variants, dtype in CASES:
        if names and name not in names:
            continue
        paths = forms(name, dtype, workdir)
        module = driver.frontend(paths["rows first"], dims)
        sets = [oracle.random_inputs(module, s, "cuda", "normal", scalars) for s in range(3)]
        eager = fns[name] if name != "rope" else (lambda x, pos: fns["_rope"](x, pos, 128))
        rows = [("eager", eager)]
        for tag, path in paths.items():
            for consts in variants:
                k = tkc.compile(path, target="cuda", cache_dir=workdir, **consts)
                ref_module = driver.frontend(path, {**dims, **consts})
                for s in sets[:2]:
                    err = oracle.rel_error(k(*s), oracle.reference(ref_module, s)[0])
                    tol = oracle.error_budgets(ref_module)["Y"].tol(oracle.outputs(ref_module)[0][1])
                    if not err <= tol:
                        raise SystemExit(f"{name} {tag} {consts}: relative error {err:.2e} > {tol:.2e}")
                rows.append((f"{tag} {consts or 'defaults'}", k))
        label = f"{name} {dtype or '(the file\'s dtypes)'} {' x '.join(str(v) for v in dims.values())}"
        for r in range(2):
            print(f"{label}, round {r + 1}: " + " | ".join(f"{n} {graph_ms(timer, fn, sets) * 1e3:.1f}" for n, fn in rows),
                  flush=True)
        del sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

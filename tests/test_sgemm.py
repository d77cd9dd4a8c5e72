"""The warp tiling of a gemm (`acc += a @ b with warp(WM, WN, WNITER) thread(TM, TN)`) and
examples/sgemm.tk (seed 002's SGEMM): syntax, IR round trip, located diagnostics for layouts that
do not fit, the interpreter ignoring the layout, the CUDA backend's plan and the index maps of its
generated code, nvcc on several tilings, and the TileLang target keeping fp32 (no TF32).

The numbers themselves are checked at every tile edge by tests/test_edges.py (interpreter,
tilelang-cpu) and tests/gpu/test_gpu_quick.py (`cuda`, `tilelang` on the GPU).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from codegen import cuda
from codegen.cuda_plan import make_plan
from diag_util import check_rendered, position
from dsl import ast as A
from dsl.diagnostics import TkError
from dsl.interpreter import run
from dsl.ir import print_module
from dsl.ir_parser import parse_module
from dsl.warp_tiling import warp_tiling
from dsl.parser import parse
from test_cuda import NVCC, needs_nvcc, nvcc_all
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SGEMM = os.path.join(ROOT, "examples", "sgemm.tk")

KERNEL = """\
kernel wt<BM=32, BN=32, BK=8, WM=16, WN=16, WNITER=1, TM=4, TN=2, threads=128>(A: f32[M, K], B: f32[K, N])
    -> (C: f32[M, N])
    where M = 40, N = 72, K = 20
{
    grid (cdiv(M, BM), cdiv(N, BN)) as (m, n) threads(threads)
    acc = zeros(f32[BM, BN])
    for k in range(cdiv(K, BK)) {
        acc += A[m*BM : +BM, k*BK : +BK] @ B[k*BK : +BK, n*BN : +BN] LAYOUT
    }
    C[m*BM : +BM, n*BN : +BN] = acc
}
"""
GOOD = "with warp(WM, WN, WNITER) thread(TM, TN)"


def write(tmp_path, layout: str = GOOD, body: str | None = None) -> tuple[str, str]:
    text = KERNEL.replace("LAYOUT", layout)
    if body is not None:
        text = text.replace("    C[m*BM : +BM, n*BN : +BN] = acc\n", body)
    path = tmp_path / "wt.tk"
    path.write_text(text)
    return str(path), text


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tkc.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT})


# ---- syntax and IR ---------------------------------------------------------------------------

def test_the_with_clause_parses_into_layout_parts():
    kernel = parse(KERNEL.replace("LAYOUT", GOOD), "wt.tk")
    loop = next(s for s in kernel.body if isinstance(s, A.For))
    (update,) = loop.body
    assert [p.name for p in update.layout] == ["warp", "thread"]
    assert [[a.id for a in p.args] for p in update.layout] == [["WM", "WN", "WNITER"], ["TM", "TN"]]
    line, col = position(KERNEL.replace("LAYOUT", GOOD), "warp(")
    assert (update.layout[0].loc.line, update.layout[0].loc.col) == (line, col)


def test_the_layout_is_a_pair_of_gemm_attributes_and_round_trips(tmp_path):
    path, _ = write(tmp_path)
    module = driver.frontend(path, {})
    text = print_module(module)
    assert 'tile.gemm(%0, %1, %acc) {thread = ["TM", "TN"], warp = ["WM", "WN", "WNITER"]}' in text
    assert print_module(parse_module(text)) == text
    tiled = driver.optimize(driver.frontend(path, {"TM": 2, "TN": 2}), "tilelang")
    text = print_module(tiled)
    assert '{thread = ["2", "2"], warp = ["16", "16", "1"]}' in text
    assert print_module(parse_module(text)) == text


def test_the_interpreter_ignores_the_layout(tmp_path):
    with_layout, _ = write(tmp_path)
    plain = tmp_path / "plain.tk"
    plain.write_text(KERNEL.replace("LAYOUT", ""))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((40, 20)).astype(np.float32), rng.standard_normal((20, 72)).astype(np.float32)
    outs = [run(driver.optimize(driver.frontend(p, {}), "tilelang"), {"A": a, "B": b})["C"]
            for p in (with_layout, str(plain))]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


# ---- diagnostics -----------------------------------------------------------------------------

BAD_LAYOUTS = [
    # (layout, -D overrides, the text the caret points at, message)
    ("with warp(WM, WN, WNITER) thread(TM, TN)", {"TM": 3},
     "warp(", "gemm layout: a warp tile of WM x WN = 16 x 16 outputs does not split into 32 threads x WNITER x TM x "
     "TN = 192 (WMITER = WM * WN / (32 * TM * TN * WNITER) must be a whole number)"),
    ("with warp(WM, WN, WNITER) thread(TM, TN)", {"WM": 12},
     "warp(", "gemm layout: warp tile `WM` = 12 (`WM`) does not divide the gemm's M extent 32"),
    ("with warp(WM, WN, WNITER) thread(TM, TN)", {"WN": 24},
     "warp(", "gemm layout: warp tile `WN` = 24 (`WN`) does not divide the gemm's N extent 32"),
    ("with warp(WM, WN, WNITER) thread(TM, TN)", {"WNITER": 3},
     "warp(", "gemm layout: `WNITER` = 3 (`WNITER`) does not divide `WN` = 16"),
    ("with warp(WM, WN, WNITER) thread(TM, TN)", {"BN": 64, "WM": 8, "WN": 64, "TM": 16, "TN": 1},
     "warp(", "gemm layout: `TM` = 16 (`TM`) does not divide the warp sub-tile's rows WM / WMITER = 8"),
    ("with warp(WM, 8, 1) thread(1, 2 * 8)", {"BM": 64, "WM": 64},
     "warp(", "gemm layout: `TN` = 16 (`2 * 8`) does not divide the warp sub-tile's columns WN / WNITER = 8"),
    ("with warp(WM, WN, WNITER) thread(TM, TN)", {"threads": 256},
     "warp(", "gemm layout: the warp tiling has (M / WM) * (N / WN) = (32 / 16) * (32 / 16) = 4 warps, which need "
     "128 threads; the block has 256"),
    ("with warp(WM, WN, WNITER) thread(TM, 0)", {},
     "warp(", "gemm layout: `TN` (`0`) must be positive, got 0"),
    ("with warp(WM, WN) thread(TM, TN)", {}, "warp(", "`warp` takes 3 values (WM, WN, WNITER), got 2"),
    ("with warp(WM, WN, WNITER) warp(WM, WN, WNITER)", {}, "warp(WM, WN, WNITER)\n", "`warp` is given twice"),
    ("with warp(WM, WN, WNITER) lanes(TM, TN)", {}, "lanes(", "unknown gemm layout `lanes`"),
]


@pytest.mark.parametrize("layout, overrides, at, message", BAD_LAYOUTS, ids=[m[:40] for *_, m in BAD_LAYOUTS])
def test_a_layout_that_does_not_fit_is_a_located_error(tmp_path, layout, overrides, at, message):
    path, text = write(tmp_path, layout)
    with pytest.raises(TkError) as info:
        driver.frontend(path, overrides)
    line, col = position(text, at)
    d = info.value.diagnostics[0]
    assert (d.loc.line, d.loc.col, d.message) == (line, col, message)


def test_a_layout_on_anything_but_a_gemm_update_is_an_error(tmp_path):
    path, text = write(tmp_path, "", body="    acc += acc with warp(WM, WN, WNITER) thread(TM, TN)\n"
                                           "    C[m*BM : +BM, n*BN : +BN] = acc\n")
    r = cli("compile", path)
    line, col = position(text, "warp(WM, WN, WNITER) thread(TM, TN)\n")
    check_rendered(r.stderr, path, line, col, "a `with` layout applies only to a gemm update `acc += a @ b`",
                   source=text)
    assert r.returncode == 1


def test_a_layout_has_exactly_two_parts_and_a_statement_may_follow_it(tmp_path):
    path, text = write(tmp_path, "with warp(WM, WN, WNITER)\n        acc += acc")
    r = cli("compile", path)
    line, col = position(text, "+= acc")
    check_rendered(r.stderr, path, line, col, "syntax error: unexpected `+=`", source=text,
                   notes=["expected `(`"])
    # the statement after a complete layout is not taken for a third part
    path, _ = write(tmp_path, GOOD + "\n        acc += acc")
    assert cli("compile", path).returncode == 0


def test_sgemm_requires_name_the_violated_clause():
    text = open(SGEMM).read()
    r = cli("compile", "examples/sgemm.tk", "-D", "BM=100")
    line, col = position(text, "BM % WM == 0")
    check_rendered(r.stderr, "examples/sgemm.tk", line, col, "requirement `BM % WM == 0` does not hold",
                   source=text, notes=["with BM = 100, WM = 64"])
    assert r.returncode == 1
    r = cli("compile", "examples/sgemm.tk", "--target", "cuda", "-D", "threads=256")
    line, col = position(text, "(BM / WM) * (BN / WN) == threads / 32")
    check_rendered(r.stderr, "examples/sgemm.tk", line, col,
                   "requirement `BM / WM * (BN / WN) == threads / 32` does not hold", source=text,
                   notes=["with BM = 128, BN = 128, WM = 64, WN = 64, threads = 256"])
    for bad in ("TM=3", "WNITER=8", "TN=64"):
        r = cli("compile", "examples/sgemm.tk", "-D", bad)
        assert r.returncode == 1 and ": error: requirement `" in r.stderr.splitlines()[0], (bad, r.stderr)


def test_the_cuda_backend_rejects_a_warp_tiled_accumulator_it_cannot_keep_in_registers(tmp_path):
    path, text = write(tmp_path, body="    C[m*BM : +BM, n*BN : +BN] = relu(acc)\n")
    r = cli("compile", path, "--target", "cuda")
    line, col = position(text, "acc += A")
    assert r.returncode == 1
    at = ":".join(map(str, position(text, "relu(acc)")))
    notes = check_rendered(r.stderr, path, line, col, "the warp tiling keeps `%acc` in the registers of the threads "
                           f"that computed it, but `tile.elementwise` at {path}:{at} uses it another way",
                           source=text)
    assert notes[0].startswith("a warp-tiled accumulator is only filled")
    assert cli("compile", path).returncode == 0  # TileLang ignores the layout


# ---- the CUDA backend ------------------------------------------------------------------------

def generate(path: str, **overrides: int):
    module = driver.optimize(driver.frontend(path, overrides), "tilelang")
    return module, cuda.emit(module)


def test_sgemm_plan_keeps_the_accumulator_in_registers_and_a_transposed():
    module, source = generate(SGEMM)
    launch = module.func.body.ops[0]
    plan = make_plan(module, launch, 128)
    allocs = {op.result.name: op.result for op in launch.walk() if op.name == "tile.alloc"}
    assert plan.where(allocs["acc"]) == "wtile" and [g.kind for g in plan.gemms.values()] == ["wtile"]
    a, b = plan.smem[id(allocs["0"])], plan.smem[id(allocs["1"])]
    assert a.transposed and a.pitch == 128 and not b.transposed and b.pitch == 128
    assert a.swizzle == (8, 2, 16) and b.swizzle is None  # BK = 16: 2 chunks of 8 per row, 16-row runs
    assert plan.total_smem == 2 * (128 * 16 + 16 * 128) * 4  # two stages of A and B
    # 128 accumulators per thread; per k: TM = 8 rows of A in two 16-byte loads, WNITER = 4
    # pieces of TN = 4 columns of B, one 16-byte load each; 8 x 16 FMAs
    assert "float acc[8][16];" in source
    assert ("tk_load<16>(rm[wi], &t0[stage_k * 2048 + kk * 128 + wtr * 64 + wi * 64 + ((ltr * 8) ^ "
            "(((kk) >> 3 & 1) << 4))]);") in source
    assert "tk_load<16>(rn[wj], &t1[stage_k * 2048 + kk * 128 + wtc * 64 + wj * 16 + ltc * 4 + 0]);" in source
    assert "acc[ti][tj] += rm[ti / 8][ti % 8] * rn[tj / 4][tj % 4];" in source
    # A through per-element cp.async into its transposed tile, B 16 bytes at a time; C 16 bytes
    assert "tk_cp_async<4>(&t0[stage_k * 2048 + (col + 7) * 128 + ((row) ^ (((col + 7) >> 3 & 1) << 4))]" in source
    assert "tk_cp_async<16>(&t1[" in source and "tk_store<16>(&C[" in source
    assert "tk_mma" not in source.split("// ---- kernel")[1]


TUNED = {"BN": 256, "BK": 32, "WNITER": 2, "threads": 256}  # benchmarks/sgemm.py's tuned tiling


def _transposed_maps(source: str):
    """The refill loop's per-element cp.async stores of A into its transposed tile t0 (stage 0,
    block row m = 0) as {shared offset: (row, column of A's tile)} with the bank of each store per
    (statement, warp 0 lane), and the gemm's fragment loads {(wtr, wi, ltr, kk): first offset}."""
    body = source.split("if (const int k_next")[1]
    stores = re.findall(r"tk_cp_async<4>\(&t0\[(.*?)\], &A\[\(m \* 128 \+ row\) \* \d+ \+ k_next \* 32 \+ col\]"
                        r"(?: \+ (\d))?\);", body)
    assert len(stores) == 8, stores
    where, banks = {}, []
    for expr, j in stores:
        lanes = []
        for ch in range(512):  # 2 chunks of 8 per thread, 256 threads
            row, col = ch // 4, ch % 4 * 8
            off = eval(expr, {"stage_k": 0, "row": row, "col": col})
            assert off not in where, "two elements stored at one offset"
            where[off] = (row, col + int(j or 0))
            if ch < 32:
                lanes.append(off % 32)
        banks.append(lanes)
    load = re.search(r"tk_load<16>\(rm\[wi\], &t0\[(.*?)\]\);", source).group(1)
    loads = {(wtr, wi, ltr, kk): eval(load, {"stage_k": 0, "wtr": wtr, "wi": wi, "ltr": ltr, "kk": kk})
             for wtr in range(2) for wi in range(2) for ltr in range(4) for kk in range(32)}
    return where, banks, loads


def test_the_transposed_tile_is_swizzled_so_a_warps_stores_hit_32_banks_and_the_loads_read_them_back():
    """A's transposed tile at the tuned tiling (BK = 32: a warp's 32 lanes store 8 rows x 4
    chunks of 8 columns): unswizzled, the 4 lanes of a row hit one bank (pitch 128 words);
    swizzled, 32 banks; either way every element lands once and the gemm's 8-float fragment
    loads find rows wtr * 64 + wi * 32 + ltr * 8 + e of column kk where the stores put them."""
    from passes import cuda_placement

    _, source = generate(SGEMM, **TUNED)
    swizzle = cuda_placement._swizzle
    cuda_placement._swizzle = lambda *args: None
    try:
        _, plain = generate(SGEMM, **TUNED)
    finally:
        cuda_placement._swizzle = swizzle
    for text, distinct in ((source, 32), (plain, 8)):
        where, banks, loads = _transposed_maps(text)
        assert sorted(where) == list(range(128 * 32))
        assert all(len(set(lanes)) == distinct for lanes in banks), banks
        for (wtr, wi, ltr, kk), off in loads.items():
            assert off % 4 == 0  # 16-byte aligned vector loads
            assert [where[off + e] for e in range(8)] == [(wtr * 64 + wi * 32 + ltr * 8 + e, kk) for e in range(8)]


def test_no_swizzle_where_it_would_split_a_threads_rows():
    """BK = 64: 8 chunks of 8 columns per row leave 4-row runs, fewer than TM = 8 rows per thread
    (one vector load); BK = 8 has one chunk per row (no conflict to remove)."""
    from codegen.cuda_plan import make_plan

    for overrides, tm in (({"BK": 64}, 8), ({"BK": 8}, 8), ({"BK": 32, "TM": 4, "TN": 8}, 4)):
        module, _ = generate(SGEMM, **overrides)
        launch = module.func.body.ops[0]
        plan = make_plan(module, launch, 128)
        allocs = {op.result.name: op.result for op in launch.walk() if op.name == "tile.alloc"}
        a = plan.smem[id(allocs["0"])]
        assert a.transposed
        assert (a.swizzle is not None) == (overrides["BK"] == 32), (overrides, a.swizzle)
        if a.swizzle:
            assert a.swizzle == (8, 4, 8) and tm <= 8


def _index_maps(source: str, t: dict[str, int]) -> tuple[dict, dict]:
    """Evaluate the generated code's maps, per (warp, lane): accumulator (ti, tj) -> the tile
    element the gemm accumulates there (from its A and B loads) and the one the store writes."""
    body = source.split("// ---- kernel")[1]
    coords = re.search(r"const int wtr = (.*), wtc = (.*);  //.*\n.*const int ltr = (.*), ltc = (.*);  //", body)
    a_load = re.search(r"tk_load<\d+>\(rm\[wi\], &t0\[(.*)\]\);", body).group(1)
    b_load = re.search(r"tk_load<\d+>\(rn\[wj\], &t1\[(.*)\]\);", body).group(1)
    fma = re.search(r"acc\[ti\]\[tj\] \+= rm\[(.*)\]\[(.*)\] \* rn\[(.*)\]\[(.*)\];", body)
    store = re.search(r"const int row = (.*), col = (.*);\n", body)

    def ev(expr: str, env: dict) -> int:
        return eval(expr.replace("/", "//"), {}, dict(env))  # noqa: S307 (C integer expressions of the test's own output)

    gemm, out = {}, {}
    for warp, lane in itertools.product(range(t["warps"]), range(32)):
        env = {"warp": warp, "lane": lane, "stage_k": 0}
        env.update(wtr=ev(coords.group(1), env), wtc=ev(coords.group(2), env))
        env.update(ltr=ev(coords.group(3), env), ltc=ev(coords.group(4), env))
        for ti, tj in itertools.product(range(t["rows"]), range(t["cols"])):
            e = {**env, "ti": ti, "tj": tj, "kk": 0}
            wi, i = ev(fma.group(1), e), ev(fma.group(2), e)
            wj, j = ev(fma.group(3), e), ev(fma.group(4), e)
            a_row = ev(a_load, {**e, "wi": wi}) + i  # transposed A at k = 0: the offset is the row
            b_col = ev(b_load, {**e, "wj": wj}) + j  # B's row k = 0: the offset is the column
            gemm[(warp, lane, ti, tj)] = (a_row, b_col)
        for ti, tj0 in itertools.product(range(t["rows"]), range(0, t["cols"], t["piece"])):
            e = {**env, "ti": ti, "tj": tj0}
            for d in range(t["piece"]):
                out[(warp, lane, ti, tj0 + d)] = (ev(store.group(1), e), ev(store.group(2), e) + d)
    return gemm, out


TILINGS = [  # overrides of examples/sgemm.tk's tiling; the store piece is TN's largest power of 2 up to 8
    {},
    {"TN": 8, "WNITER": 2},
    {"TM": 4, "TN": 4, "WNITER": 2},  # WMITER = 2
    {"BN": 256, "threads": 256},
    {"BM": 64, "WM": 32, "TM": 4, "TN": 4, "WNITER": 4},
    {"WM": 32, "WN": 128, "TM": 4, "TN": 8, "WNITER": 4},
    {"BM": 32, "BN": 32, "WM": 16, "WN": 16, "TM": 1, "TN": 8, "WNITER": 1},  # WMITER = 1, 16 x 2 lanes
    {"BM": 64, "BN": 32, "WM": 32, "WN": 16, "TM": 2, "TN": 2, "WNITER": 2, "threads": 128},  # WMITER = 2
]


@pytest.mark.parametrize("overrides", TILINGS, ids=[str(t) for t in TILINGS])
def test_generated_gemm_and_store_cover_the_tile_once_and_agree(overrides):
    """Every element of the BM x BN tile is accumulated by exactly one (thread, register), and the
    store writes each register to the element the gemm accumulated there."""
    module, source = generate(SGEMM, **overrides)
    consts = module.func.attrs["consts"]
    t = warp_tiling(next(op for op in module.walk() if op.name == "tile.gemm"), {})[0]
    piece = next(w for w in (8, 4, 2, 1) if t.tn % w == 0)
    gemm, out = _index_maps(source, {"warps": t.warps, "rows": t.wmiter * t.tm, "cols": t.wniter * t.tn,
                                     "piece": piece})
    assert gemm == out
    assert sorted(gemm.values()) == sorted(itertools.product(range(consts["BM"]), range(consts["BN"])))


@needs_nvcc
def test_nvcc_compiles_sgemm_tilings_without_spills(tmp_path):
    """Default and other tilings (WMITER 2, 256 threads, TN = 8, scalar TM, an edge shape): no
    errors, no warnings, no register spills (ptxas -v)."""
    configs = {"default": {}, "wmiter2": {"TM": 4, "TN": 4, "WNITER": 2},
               "threads256": {"BN": 256, "threads": 256}, "tn8": {"TN": 8, "WNITER": 2},
               "bk8-stages3": {"BK": 8, "stages": 3}, "edges": {"M": 1000, "N": 999, "K": 97}}
    sources = {k: generate(SGEMM, **v)[1] for k, v in configs.items()}
    folder = str(tmp_path)
    for name, src in sources.items():
        with open(os.path.join(folder, f"{name}.cu"), "w", encoding="utf-8") as f:
            f.write(src)
    procs = nvcc_all(sources, folder)
    for name, proc in procs.items():
        assert proc.returncode == 0 and "warning" not in proc.stderr, (name, proc.stderr[-3000:])
    ptxas = subprocess.run([NVCC, "-arch=sm_90a", "-cubin", "-O3", "-Xptxas", "-v", os.path.join(folder, "default.cu"),
                            "-o", os.path.join(folder, "default.cubin")], capture_output=True, text=True, timeout=300)
    assert ptxas.returncode == 0, ptxas.stderr[-3000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in ptxas.stderr, ptxas.stderr


# ---- TileLang: true fp32 --------------------------------------------------------------------

def test_tilelang_keeps_fp32_without_tf32_tensor_cores():
    """TileLang 0.1.15's T.gemm on float32 operands with a float32 accumulator picks TF32 mma
    (tilelang/cuda/intrinsics/macro/mma_macro_generator.py, `_should_use_tf32_mma_operand`), so the
    `tilelang` backend emits no T.gemm for f32 operands: a SIMT loop, exact fp32 FMAs."""
    module = driver.optimize(driver.frontend(SGEMM, {}), "tilelang")
    from codegen import tilelang as tl_backend  # noqa: PLC0415

    source = tl_backend.emit(module)
    assert "T.gemm" not in source and "T.Parallel(128, 128)" in source

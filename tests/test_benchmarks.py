"""The benchmark scripts' CPU dry runs, so a benchmark cannot rot unnoticed between device runs.

Every script under benchmarks/ that is a benchmark runs here as a subprocess, the way
benchmarks/README.md says to run it on a CPU box, with the smallest options that still take every
branch its dry run has (a schedule-constant override, a variant tkc rejects, both stages, both CPU
targets, the seed unit when the seed file is here, the profile). Each writes its JSON into a
temporary folder with a temporary tkc cache; the tests check the exit status, that every expected
row is there, and that no row is an error (or WRONG).

benchmarks/seed_kernels.py is a library of cluster_reduce.py with a small command line of its own
(no `--cpu` mode: it never launches anything); its command line runs here when the seed file is
found. compile_time.py has no `--cpu` mode either: it only ever runs on the CPU.

The whole file takes about 25 s on two cores.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")
MISS_EXAMPLES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "examples", "miss*.tk")))
# Timer and copy settings that make a dry run fast; its numbers mean nothing, the run is the test.
FAST = ["--warmup", "1", "--rep", "1", "--rotate-mib", "0", "--copy-mib", "1"]


@functools.cache
def load(name: str):
    """benchmarks/<name>.py as a module named `bench_<name>` (benchmarks/ is not a package).
    cluster_reduce.py imports its siblings by their plain names, as when run as a script."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(BENCH, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is made
    spec.loader.exec_module(mod)
    return mod


def run_script(script: str, args: list[str], tmp_path, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run benchmarks/<script> as its README says, with TileLang's cache inside the benchmark's
    own `--cache-dir` (the script puts it there when the environment names none)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TILELANG_CACHE_DIR", "OUT")}
    proc = subprocess.run([sys.executable, os.path.join(BENCH, script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc


def no_errors(rows: list[dict]) -> None:
    bad = [(r["variant"], r["status"], r.get("note"), r.get("traceback")) for r in rows
           if r["status"] == "error" or r["status"].startswith("WRONG") or "traceback" in r]
    assert not bad, bad


# ----------------------------------------------------------------------------- miss.py

def test_miss_cpu_dry_run(tmp_path):
    """Every examples/miss*.tk and eager check out and are timed on tilelang-cpu; a constant
    override is applied; a constant the kernel does not have is a compile-error row, not a crash;
    the kernels are pre-built in worker processes."""
    miss = load("miss")
    shape = miss.CPU_SHAPES[0]
    variants = ["eager", *MISS_EXAMPLES, "miss_v3[BM=32]", "miss[NOPE=1]"]
    out = tmp_path / "miss.json"
    proc = run_script("miss.py", ["--cpu", "--shapes", shape, "--variants", ",".join(variants), "--jobs", "2",
                                  "--out", str(out), "--cache-dir", str(tmp_path / "cache"), *FAST], tmp_path)
    data = json.loads(out.read_text())
    rows = {r["variant"]: r for r in data["results"]}
    assert sorted(rows) == sorted(variants)
    assert all(r["shape"] == shape for r in rows.values())
    rejected = rows.pop("miss[NOPE=1]")
    assert rejected["status"] == "compile error" and "NOPE" in rejected["note"], rejected
    no_errors(list(rows.values()))
    for name, r in rows.items():
        assert r["status"] == "ok" and r["rel_err"] <= miss.RTOL and r["time_us"] > 0, (name, r)
    assert data["meta"]["target"] == "tilelang-cpu" and data["meta"]["prewarm_s"] > 0
    assert data["meta"]["cache_dir"] == str(tmp_path / "cache")
    assert "| shape | variant |" in proc.stdout


def test_miss_markdown_adds_the_graph_columns_with_their_copy():
    """`--graph` rows: the graph time and its fraction of the copy timed as a graph, beside the
    do_bench ones (a row without a graph time, e.g. one that could not be captured, shows `-`)."""
    miss = load("miss")
    meta = {"device_name": "GPU", "date": "today", "timer": "do_bench", "copy": {"tbps": 3.0},
            "copy_graph": {"tbps": 3.025}}
    base = {"shape": "M16384K4096N4096R64", "status": "ok", "ratio_to_eager": 0.91, "tbps": 2.64, "frac_copy": 0.88}
    rows = [{**base, "variant": "miss_split~model", "time_us": 101.8, "graph_us": 99.7, "graph_frac_copy": 0.892},
            {**base, "variant": "compile", "time_us": 120.0}]
    text = miss.markdown(rows, meta)
    assert "copy_graph" not in text and "as CUDA graphs (--graph) copy 3.02 TB/s" in text
    assert "| graph (us) | graph % copy | status |" in text
    assert "| miss_split~model | 101.8 | 0.91 | 2.64 | 88 | 99.7 | 89 | ok |" in text
    assert "| compile | 120.0 | 0.91 | 2.64 | 88 | - | - | ok |" in text
    assert "graph" not in miss.markdown(rows[1:], {k: v for k, v in meta.items() if k != "copy_graph"})


def test_exc_note_is_type_and_first_line():
    miss = load("miss")
    assert miss.exc_note(ValueError("bad value\nsecond line")) == "ValueError: bad value"
    assert miss.exc_note(KeyError()) == "KeyError"
    fields = miss.error_fields(RuntimeError("boom"))
    assert fields["status"] == "error" and fields["note"] == "RuntimeError: boom"


def test_miss_unexpected_errors_become_error_rows(tmp_path, monkeypatch, capsys):
    """An exception that is not a TkError, while a variant is checked or timed (bench_variant) or
    while a tkc kernel compiles (tkc_variant), is an error row with its type and first line; the
    run goes on, writes its JSON and exits 1."""
    import tkc

    miss = load("miss")

    def eager_fails(A, B):
        raise ZeroDivisionError("injected eager failure\nsecond line")

    def compile_fails(*args, **kwargs):
        raise RuntimeError("injected compile failure")

    monkeypatch.setattr(miss, "miss_torch", eager_fails)
    monkeypatch.setattr(tkc, "compile", compile_fails)
    out = tmp_path / "miss.json"
    rc = miss.main(["--cpu", "--shapes", miss.CPU_SHAPES[0], "--variants", "eager,miss", "--jobs", "1",
                    "--out", str(out), "--cache-dir", str(tmp_path / "cache"), *FAST])
    assert rc == 1
    rows = {r["variant"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["eager"]["status"] == "error"
    assert rows["eager"]["note"] == "ZeroDivisionError: injected eager failure"
    assert "ZeroDivisionError" in rows["eager"]["traceback"]
    assert rows["miss"]["status"] == "error"
    assert rows["miss"]["note"] == "RuntimeError: injected compile failure"
    assert "RuntimeError" in rows["miss"]["traceback"]
    assert "error: RuntimeError: injected compile failure" in capsys.readouterr().out


# ----------------------------------------------------------------------------- cluster_reduce.py

def seed_available() -> bool:
    seed_kernels = load("seed_kernels")
    try:
        seed_kernels.find_seed_file()
    except seed_kernels.SeedError:
        return False
    return True


def test_cluster_reduce_cpu_dry_run(tmp_path):
    """Both stages, every example on both CPU targets (tilelang-cpu cannot express clusters: a
    skipped row; the interpreter runs them), eager, and the seed rows: the seed unit built by nvcc
    when the seed file and nvcc are here, else skipped as not available."""
    cr = load("cluster_reduce")
    seed_kernels = load("seed_kernels")
    args = ["--cpu", "--clusters", "2", "--jobs", "1", "--out", str(tmp_path / "cr.json"),
            "--cache-dir", str(tmp_path / "cache"), *FAST]
    build_seed = seed_available() and seed_kernels.find_nvcc() is not None
    if not build_seed:  # a seed without nvcc would be an error row: take the "no seed" branch instead
        args += ["--seed-file", str(tmp_path / "no-seed-here.txt")]
    run_script("cluster_reduce.py", args, tmp_path)
    data = json.loads((tmp_path / "cr.json").read_text())
    rows = data["results"]
    no_errors(rows)
    want = {(stage, v) for stage in cr.STAGE_NAMES for v in [*cr.SEED_VARIANTS, "eager"]}
    want |= {(stage, f"{v}:{t}") for stage in cr.STAGE_NAMES for v in cr.EXAMPLES for t in cr.CPU_TARGETS}
    assert sorted((r["stage"], r["variant"]) for r in rows) == sorted(want)
    for r in rows:
        assert r["clusters"] == 2 and r["N"] == cr.CPU_SIZE, r
        if r["variant"] in cr.SEED_VARIANTS:
            assert r["status"] == "skipped", r
            assert ("seed unit built here" in r["note"]) if build_seed else r["note"].startswith("seed not available"), r
        elif r["variant"].endswith(":tilelang-cpu"):
            assert r["status"] == "skipped" and "cluster" in r["note"], r
        else:
            assert r["status"] == "ok" and r["wrong_runs"] == 0 and r["check_runs"] == 2 and r["time_us"] > 0, r
    if build_seed:
        assert set(data["meta"]["seed"]["kernels"]) == {
            seed_kernels.name_expression(k, s) for k in seed_kernels.KERNELS for s in range(2)}


@pytest.mark.skipif(not seed_available(), reason="seed 001 is not here (../shared/seeds/001_*.txt)")
def test_seed_kernels_command_line(tmp_path):
    """seed_kernels.py's own command line writes the translation unit (nvcc runs in the
    cluster_reduce dry run above)."""
    seed_kernels = load("seed_kernels")
    unit = tmp_path / "seed_tu.cu"
    run_script("seed_kernels.py", ["--emit", str(unit), "--compile", "none"], tmp_path)
    text = unit.read_text()
    for k in seed_kernels.KERNELS:
        for s in seed_kernels.STAGES:
            assert f"template __global__ void {k}<Stage::{s}>(half*, half*, int);" in text


# ----------------------------------------------------------------------------- sddmm.py

def test_sddmm_cpu_dry_run(tmp_path):
    """Every examples/sddmm*.tk on the interpreter, a tiling override, cuSPARSE (torch's CPU
    sampled_addmm), dense-then-mask and the seed kernel's three tile shapes (emulated in torch;
    its CUDA source compiled when nvcc is here), on uniform and R-MAT patterns made in a worker
    process: all checked against float64 and timed, with the first-call cost of tkc and the seed;
    a constant the kernel does not have is a compile-error row, not a crash."""
    bench = load("sddmm")
    examples = [*bench.EXAMPLES, "sddmm[BM=16;BN=64]", "sddmm[NOPE=1]"]
    out = tmp_path / "sddmm.json"
    proc = run_script("sddmm.py", ["--cpu", "--shapes", bench.CPU_SHAPES[1], "--examples", ",".join(examples),
                                   "--jobs", "2", "--first-reps", "1", "--out", str(out),
                                   "--cache-dir", str(tmp_path / "cache"), *FAST], tmp_path)
    data = json.loads(out.read_text())
    rows = data["results"]
    assert sorted((r["pattern"], r["variant"]) for r in rows) == sorted(
        (p, v) for p in bench.PATTERNS for v in bench.BASELINES + examples)
    rejected = [r for r in rows if r["variant"] == "sddmm[NOPE=1]"]
    assert all(r["status"] == "compile error" and "NOPE" in r["note"] for r in rejected), rejected
    rows = [r for r in rows if r not in rejected]
    no_errors(rows)
    for r in rows:
        assert r["status"] == "ok" and r["rel_err"] <= bench.RTOL and r["time_us"] > 0 and r["nnz"] == 400, r
        assert (r.get("preprocess_us") is not None) == (r["kind"] in ("tkc", "seed")), r
    dense_out = next(r for r in rows if r["variant"] == "sddmm_wmma_16x16x16")
    s = {d: dense_out[d] for d in ("M", "N", "K", "nnz")}
    assert dense_out["floor_bytes"] == bench.floor_bytes(s, dense_out, "coo", "dense") == (
        2 * s["K"] * (dense_out["rows_used"] + dense_out["cols_used"]) + 8 * s["nnz"] + 4 * s["M"] * s["N"])
    assert "| shape | pattern | cuSPARSE |" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("target")
    assert (tmp_path / "sddmm.md").read_text().startswith("| shape | pattern | variant |")


def test_host_ms_times_the_enqueue_rotating_over_the_sets():
    """tkc.bench.host_ms: `calls` calls per round over the sets in turn, a synchronize before each
    round and after the last, the best round's time per call (ms)."""
    from tkc.bench import host_ms

    seen, syncs = [], []
    sets = [("a",), ("b",), ("c",)]
    ms = host_ms(lambda x: seen.append(x), sets, calls=7, rounds=3, sync=lambda: syncs.append(len(seen)))
    assert seen == ["a", "b", "c", "a", "b", "c", "a"] * 3
    assert syncs == [0, 7, 14, 21]
    assert 0 < ms < 1.0


def test_sddmm_tables_show_the_graph_ratio_and_the_host():
    """The sddmm tables carry each tkc row's host time to enqueue a call and its speedup over
    cuSPARSE as graph replays (where both were timed so); '-' where not measured."""
    report = load("sddmm_report")
    s = {"M": 10000, "N": 10000, "K": 32, "nnz": 5_000_000}
    tkc_row = {**s, "pattern": "rmat", "variant": "sddmm", "kind": "tkc", "status": "ok", "time_us": 52.0,
               "gflops": 6154.0, "frac_floor": 0.188, "x_cusparse": 6.8, "x_seed": None, "x_dense": None,
               "graph_us": 32.2, "x_cusparse_graph": 10.66, "host_us": 48.7}
    cu = {**s, "pattern": "rmat", "variant": "cusparse", "kind": "baseline", "status": "ok", "time_us": 353.6,
          "gflops": 905.0, "frac_floor": 0.028, "x_cusparse": 1.0, "graph_us": 343.2}
    full = report.full_table([cu, tkc_row]).splitlines()
    assert full[0].split(" | ")[9:12] == ["graph (us)", "x cuSPARSE (graphs)", "host (us)"]
    assert full[3].split(" | ")[9:12] == ["32.2", "10.66", "48.7"] and full[2].split(" | ")[10:12] == ["-", "-"]
    meta = {"device_name": "H200", "date": "2026-11-29", "copy": {"tbps": 4.2}, "timer": "do_bench", "target": "cuda"}
    text = report.summary([{"shape": s, "pattern": "rmat", "rows": [cu, tkc_row], "best": tkc_row}], meta)
    head, row = text.splitlines()[2], text.splitlines()[4]
    assert "| graph | host |" in head and "| x cuSPARSE | x cuSPARSE (graphs) |" in head
    assert "| 32.2 | 48.7 |" in row and "| 6.8 | 10.7 |" in row


def test_seed_sddmm_plan_and_source(tmp_path):
    """The seed kernel's per-tile index covers every tile of the grid and every entry once, in
    tile order; too many tiles is SeedTooLarge; the CUDA source compiles for sm_90a where nvcc is."""
    import torch

    import tkc.sparse as sp

    seed = load("seed_sddmm")
    p = sp.rmat(70, 50, 300, seed=1)
    plan = seed.build_plan(p, "32x8")
    assert (plan.tiles_m, plan.tiles_n) == (3, 7) and plan.tile_ptr.numel() == 3 * 7 + 1
    assert sorted(plan.perm.tolist()) == list(range(p.nnz))
    tile = (plan.srow.long() // 32) * 7 + plan.scol.long() // 8
    assert bool((tile[1:] >= tile[:-1]).all()) and torch.equal(plan.srow, p.rows[plan.perm.long()])
    assert torch.equal(torch.bincount(tile, minlength=21).cumsum(0).int(), plan.tile_ptr[1:])
    with pytest.raises(seed.SeedTooLarge):
        seed.build_plan(p, "16x16", max_tiles=10)
    if seed.seed_kernels.find_nvcc() is not None:
        proc = run_script("seed_sddmm.py", ["--compile", "--emit", str(tmp_path / "seed003.cu")], tmp_path)
        assert proc.stdout.count(": found;") == len(seed.TILES), proc.stdout
        assert "wmma::mma_sync" in (tmp_path / "seed003.cu").read_text()


# ----------------------------------------------------------------------------- compile_time.py

def test_compile_time_dry_run(tmp_path):
    """One repetition of one example, with the profile (importtime, stages, cProfile)."""
    out = tmp_path / "ct.json"
    proc = run_script("compile_time.py", ["--reps", "1", "--examples", "miss", "--profile", "--top", "3",
                                          "--json", str(out)], tmp_path)
    data = json.loads(out.read_text())
    assert list(data["examples"]) == ["miss"]
    r = data["examples"]["miss"]
    assert "error" not in r, r
    assert len(r["cold_s"]) == len(r["warm_s"]) == 1 and r["cold_s"][0] > 0 and r["warm_s"][0] > 0
    assert set(data["floors"]) == {"python -c pass", "python -c 'import tkc.cli'"}
    assert "cProfile of tkc.cli.main" in data["profile"] and "| miss |" in proc.stdout


def test_compile_time_scaling_dry_run(tmp_path):
    """The linearity check on small programs: both targets, a table row per size, exit 0."""
    out = tmp_path / "scaling.json"
    proc = run_script("compile_time.py", ["--scaling", "100,400", "--json", str(out)], tmp_path)
    data = json.loads(out.read_text())
    assert set(data["scaling"]) == {"tilelang", "cuda"}
    assert all(set(r) == {"100", "400"} and min(r.values()) > 0 for r in data["scaling"].values())
    assert "| 100 |" in proc.stdout and "| 400 |" in proc.stdout and ": linear" in proc.stdout


# ----------------------------------------------------------------------------- sgemm.py

def test_sgemm_cpu_dry_run(tmp_path):
    """examples/sgemm.tk with its own tiling and another one checks out (interpreter, 64^3); a
    tiling that breaks a `requires` is an error row, not a crash, and not a failure; the sweep's
    tilings all satisfy the example's `requires` (they are only timed on a GPU)."""
    from tkc import driver

    out = tmp_path / "sgemm.json"
    proc = run_script("sgemm.py", ["--cpu", "--rep", "1", "--configs", "default;TN=8,WNITER=2;BM=100",
                                   "--out", str(out), "--cache-dir", str(tmp_path / "cache")], tmp_path)
    rows = {r["variant"]: r for r in json.loads(out.read_text())["rows"]}
    assert sorted(rows) == ["tkc interp BM=100", "tkc interp TN=8,WNITER=2", "tkc interp default"]
    assert rows.pop("tkc interp BM=100")["status"].endswith("requirement `BM % WM == 0` does not hold")
    for name, r in rows.items():
        assert r["status"] == "ok" and r["rel_err"] <= 1e-6 and r["ms"] > 0, (name, r)
    assert "| variant | ms | TFLOP/s |" in proc.stdout
    for consts in load("sgemm").SWEEP:
        driver.frontend(os.path.join(ROOT, "examples", "sgemm.tk"), consts)  # raises on a broken `requires`


def test_transformer_cpu_dry_run(tmp_path):
    """benchmarks/transformer.py on tiny shapes: every kernel of the dry run is checked against its
    float64 reference and timed through torch eager and tkc's tilelang-cpu, and the decode and
    target groups list every issue-10 example at valid shapes (their `requires` hold)."""
    from tkc import driver

    out = tmp_path / "transformer.json"
    proc = run_script("transformer.py", ["--cpu", "--out", str(out), "--cache-dir", str(tmp_path / "cache")], tmp_path)
    rows = json.loads(out.read_text())["rows"]
    kernels = {r["kernel"] for r in rows}
    assert {"rmsnorm", "rope", "attention", "embedding", "sgemm", "matmul_q8", "matmul_w8a8"} <= kernels
    for r in rows:
        assert r["status"] == "ok" and r["time_us"] > 0, r
    assert proc.stdout.rstrip().splitlines()[-1].startswith("| ")
    bench = load("transformer")
    names = set()
    for group in ("decode", "targets"):
        for case in bench.cases(group, cpu=False):
            names.add(case["kernel"])
            driver.frontend(bench.example(case["kernel"]), {**case["dims"], **case["consts"]})
    assert names >= {"rmsnorm", "matmul", "matmul_f16", "matmul_q8", "matmul_w8a8", "silu_mul", "accum", "rope", "attention",
                     "embedding", "rmsnorm_matmul", "ffn_gate", "sgemm"}


def test_llama_cpu_dry_run(tmp_path):
    """benchmarks/llama.py on a tiny model through tilelang-cpu: tkc and torch eager decode in
    every dtype, and the weight bytes per token are the matrices' (stories15M, f32: its 15M
    parameters, the classifier shared with the embedding)."""
    out = tmp_path / "llama.json"
    run_script("llama.py", ["--cpu", "--out", str(out), "--cache-dir", str(tmp_path / "cache")], tmp_path)
    rows = json.loads(out.read_text())["rows"]
    assert {(r["dtype"], r["variant"]) for r in rows} == {(d, v) for d in ("f32", "f16", "int8")
                                                         for v in ("tkc", "torch eager")}
    assert all(r["status"] == "ok" and r["tok_s"] > 0 for r in rows), rows
    bench = load("llama")
    from tkc.models.llama_files import Config

    c = Config(*bench.MODELS["15M"], shared_classifier=True)
    assert bench.weight_bytes(c, "f32") == 4 * (6 * (4 * 288 * 288 + 3 * 288 * 768) + 32000 * 288)

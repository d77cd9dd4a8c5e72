"""`tkc tune` on the CPU: the space, pruning (requires, then shared memory), the results file,
the command line (`--dry-run`, errors), `tkc.compile(tune=True)`, and the search's ranking and
printing with an injected, deterministic timer. The GPU run is tests/gpu/test_gpu_tune.py.

Expected pruning is computed here from the kernels' own rules (the `requires` text and the bytes
of the shared tiles written out by hand), and cross-checked against the real `check-smem-fit`.
"""

from __future__ import annotations

import itertools
import json
import os
import time

import pytest

import tkc
from dsl.diagnostics import TkError
from passes.targets import SMEM_LIMITS
from tkc import driver, tune, tune_search
from tkc.cache import Cache
from tkc.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = SMEM_LIMITS["sm_90"]

# The pipelined load of A into a register tile is staged through a shared buffer of
# f16[BM, BK] x min(stages, trip count); with EXTRA=1 a static `if` adds a shared f16[BM, BK]
# after the loop, in the staging buffer's bytes.
STAGED = """\
kernel staged<BM=64, BK=16, stages=2, EXTRA=0>(A: f16[M, K]) -> (C: f32[M, 1])
    where M = 256, K = 4096
    requires BM % BK == 0
    tune BM = (64, 256, 512, 1024), BK = (16, 64, 128, 48), stages = (1, 2, 3, 4), EXTRA = (0, 1)
{
    grid (cdiv(M, BM)) as (m)
    S = zeros(f32[BM, BK])
    for k in pipelined(cdiv(K, BK), stages) {
        S += A[m*BM : +BM, k*BK : +BK]
    }
    if EXTRA == 1 {
        T = shared(cast(S, f16))
        S += T
    }
    C[m*BM : +BM, :] = sum(S, 1)
}
"""

# Seed 002's SGEMM autotune lists (36864 configurations) on a kernel with its kind of rules.
SGEMM = """\
kernel sg<BM=128, BN=128, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=8>(A: f16[M, K], B: f16[K, N]) -> (C: f32[M, N])
    where M = 4096, K = 4096, N = 4096
    requires BM % WM == 0
    requires BN % WN == 0
    requires (BM / WM) * (BN / WN) * 32 <= 1024
    requires (WM * WN) % (32 * TM * TN * WNITER) == 0
    tune BK = (8, 16, 32, 64), BM = (64, 128, 256), BN = (64, 128, 256), WM = (32, 64, 128, 256),
         WN = (32, 64, 128, 256), WNITER = (1, 2, 4, 8), TM = (4, 8, 16, 32), TN = (4, 8, 16, 32)
{
    grid (cdiv(M, BM), cdiv(N, BN)) as (m, n) threads((BM / WM) * (BN / WN) * 32)
    acc = zeros(f32[BM, BN])
    for k in pipelined(cdiv(K, BK), 3) {
        acc += A[m*BM : +BM, k*BK : +BK] @ B[k*BK : +BK, n*BN : +BN]
    }
    C[m*BM : +BM, n*BN : +BN] = acc
}
"""


@pytest.fixture
def staged(tmp_path) -> str:
    path = tmp_path / "staged.tk"
    path.write_text(STAGED)
    return str(path)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def expected_staged(config: dict[str, int], K: int) -> tuple[str, int]:
    """("requires" | "smem" | "ok", shared bytes) from the kernel's rules written out by hand."""
    bm, bk, stages, extra = config["BM"], config["BK"], config["stages"], config["EXTRA"]
    if bm % bk:
        return "requires", 0
    trip = -(-K // bk)
    # TileLang gives the tile after the loop (EXTRA) the staging buffer's bytes (its lifetime
    # starts after theirs ends): check-smem-fit's TileLang model, what the pruner computes
    nbytes = 2 * bm * bk * max(1, min(stages, trip)) + extra * 0
    return ("smem" if nbytes > LIMIT else "ok"), nbytes


# ---------------------------------------------------------------------------------- pruning

@pytest.mark.parametrize("K", [4096, 128])  # K = 128: stages clamp to the trip count
def test_pruning_rejects_exactly_what_the_rules_reject(staged, K):
    p = tune_search.plan(staged, {"K": K}, {})
    assert len(p.survivors) + len(p.rejected) == 4 * 4 * 4 * 2
    got = {tune.config_key(r.config): r for r in p.rejected}
    kinds = set()
    for config in tune.configurations(p.space):
        want, nbytes = expected_staged(config, K)
        kinds.add(want)
        rec = got.get(tune.config_key(config))
        if want == "ok":
            assert rec is None and config in p.survivors, config
        elif want == "requires":
            assert (rec.status, rec.reason) == ("requires", "requires `BM % BK == 0`"), config
        else:
            assert rec.status == "smem", config
            assert rec.reason == f"smem: needs {tune._kib(nbytes)} KiB > 227 KiB", config
    assert kinds == {"ok", "requires", "smem"}, "the space exercises every outcome"


def test_smem_pruning_agrees_with_check_smem_fit(staged):
    p = tune_search.plan(staged, {"K": 128}, {})
    for config in tune.configurations(p.space):
        if config["BM"] % config["BK"]:
            continue
        try:
            driver.optimize(driver.frontend(staged, {**config, "K": 128}), "tilelang")
            fits = True
        except TkError as exc:
            assert "shared memory" in tune.first_line(exc), tune.first_line(exc)
            fits = False
        assert fits == (config in p.survivors), config


def test_pruning_the_full_seed_space_is_fast(tmp_path):
    path = tmp_path / "sg.tk"
    path.write_text(SGEMM)
    t0 = time.perf_counter()
    p = tune_search.plan(str(path), {}, {})
    seconds = time.perf_counter() - t0
    values = p.space
    assert len(p.survivors) + len(p.rejected) == 36864
    want = 0
    for bk, bm, bn, tm, tn, wm, wn, wi in itertools.product(*values.values()):
        want += (bm % wm == 0 and bn % wn == 0 and (bm // wm) * (bn // wn) * 32 <= 1024
                 and (wm * wn) % (32 * tm * tn * wi) == 0)
    assert len(p.survivors) == want
    assert seconds < 10, f"pruning took {seconds:.1f} s"


def test_space_sources_and_their_precedence(staged):
    from dsl.parser import parse

    k = parse(STAGED, staged)
    assert tune.build_space(k, {}, {})["BM"] == (64, 256, 512, 1024)
    assert tune.build_space(k, {"BM": 32}, {})["BM"] == (32,)
    assert tune.build_space(k, {}, {"BM": (8, 16)})["BM"] == (8, 16)
    no_clause = parse(STAGED.replace("    tune BM", "    # tune BM"), staged)
    assert tune.build_space(no_clause, {}, {}) == {"BK": (16,), "BM": (64,), "EXTRA": (0,), "stages": (2,)}
    with pytest.raises(TkError, match="both `-D` and `--space`"):
        tune.build_space(k, {"BM": 32}, {"BM": (8,)})


def test_parse_space_arg():
    assert tune.parse_space_arg("BM=64,128, 256") == ("BM", (64, 128, 256))
    assert tune.parse_space_arg("BM=64,64") == ("BM", (64,))
    for bad, msg in [("BM", "expected NAME=v1,v2"), ("BM=", "expected NAME=v1,v2"), ("=4", "expected NAME"),
                     ("BM=4,x", "`x` is not an integer"), ("BM=-4", "not negative"), ("BM=4,,8", "`` is not")]:
        with pytest.raises(ValueError, match=msg):
            tune.parse_space_arg(bad)


# ---------------------------------------------------------------------------------- results file

def test_results_round_trip_and_key(tmp_path):
    root = str(tmp_path)
    path = tune.results_path(root, "src", {"M": 1}, "GPU", "tilelang")
    recs = {tune.config_key(c): tune.Record(c, s, t) for c, s, t in
            [({"BM": 1}, "ok", 5.0), ({"BM": 2}, "ok", 3.0), ({"BM": 3}, "wrong", None)]}
    tune.save_results(path, recs, {"kernel": "k"})
    back = tune.load_results(path)
    assert {k: (r.config, r.status, r.time_us) for k, r in back.items()} == \
        {k: (r.config, r.status, r.time_us) for k, r in recs.items()}
    assert tune.best(back.values()).config == {"BM": 2}
    others = {tune.results_path(root, *args) for args in [
        ("src2", {"M": 1}, "GPU", "tilelang"), ("src", {"M": 2}, "GPU", "tilelang"),
        ("src", {"M": 1}, "GPU2", "tilelang"), ("src", {"M": 1}, "GPU", "cuda")]}
    assert path not in others and len(others) == 4
    assert [n for n in os.listdir(os.path.dirname(path)) if n.startswith(".")] == [], "no temporary file left"


@pytest.mark.parametrize("text", ["{\"version\": 1, \"results\": [", "not json", "[]", "{\"version\": 99, \"results\": []}",
                                  "{\"version\": 1, \"results\": [{\"config\": {\"BM\": \"x\"}, \"status\": \"ok\"}]}",
                                  "{\"version\": 1, \"results\": [{\"config\": {\"BM\": 1}, \"status\": \"ok\"}]}"])
def test_corrupted_results_are_ignored_with_a_warning(tmp_path, text):
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.warns(tune.TuneWarning, match="ignoring"):
        assert tune.load_results(str(path)) is None
    assert tune.load_results(str(tmp_path / "absent.json")) is None


# ---------------------------------------------------------------------------------- search with a fake timer

def fake_ms(config: dict[str, int]) -> float:
    """Deterministic: smaller BM and larger BK are faster; BM=256, BK=64 fails its check."""
    if (config["BM"], config["BK"]) == (256, 64):
        raise tune_search.Rejected("wrong", "wrong: `C` relative error 1.000e+00 > tolerance 1.000e-03")
    return (config["BM"] / config["BK"]) * 1e-3 + config["stages"] * 1e-4 + config["EXTRA"] * 1e-5


def test_search_ranks_saves_and_reuses(staged, tmp_path):
    cache = Cache(str(tmp_path / "cache"))
    p = tune_search.plan(staged, {}, {"BM": (64, 256), "BK": (16, 64, 48), "stages": (1, 2), "EXTRA": (0,)})
    records, path = tune_search.search(p, "tilelang", cache, "Fake GPU", measure=fake_ms)
    timed = sorted((r for r in records if r.status == "ok"), key=lambda r: r.time_us)
    assert timed[0].config == {"BK": 64, "BM": 64, "EXTRA": 0, "stages": 1}
    assert timed[0].time_us == pytest.approx(fake_ms(timed[0].config) * 1e3)
    assert [r.status for r in records].count("wrong") == 2
    assert [r.status for r in records].count("requires") == 4  # BK=48
    text = tune_search.report(p, records, "tilelang", "Fake GPU", 3, path)
    assert "best: BK=64, BM=64, EXTRA=0, stages=1: 1.10 us" in text
    assert "BK=64, BM=256, EXTRA=0, stages=1: wrong: `C` relative error" in text
    assert "rejected before compiling:\n       4  requires `BM % BK == 0`  (e.g. BK=48, BM=64, EXTRA=0, stages=1)" in text
    assert "  ... 3 more timed" in text and text.endswith(f"results: {path}\n")
    assert tune.tuned_config(cache.root, staged, p.text, p.dims, "tilelang", "Fake GPU") == timed[0].config

    def never(config):
        raise AssertionError(f"timed again: {config}")

    again, _ = tune_search.search(p, "tilelang", cache, "Fake GPU", measure=never)
    assert [(r.config, r.status, r.time_us) for r in again] == [(r.config, r.status, r.time_us) for r in records]
    assert "measured by an earlier run" in tune_search.report(p, again, "tilelang", "Fake GPU", 3, path)
    calls = []
    tune_search.search(p, "tilelang", cache, "Fake GPU", measure=lambda c: calls.append(c) or 1.0, retime=True)
    assert len(calls) == 8


def test_compile_error_of_one_configuration_is_its_row(tmp_path):
    # threads does not change shared memory, so threads=2048 shares the pruning of threads=128
    # (lowering is not repeated) and fails when it is compiled: a row with the error's first line.
    path = tmp_path / "threads.tk"
    path.write_text(STAGED.replace("EXTRA=0>", "EXTRA=0, threads=128>").replace("grid (cdiv(M, BM)) as (m)",
                                                                                "grid (cdiv(M, BM)) as (m) threads(threads)"))
    cache = Cache(str(tmp_path / "cache"))
    p = tune_search.plan(str(path), {}, {"BM": (64,), "BK": (16,), "stages": (1,), "EXTRA": (0,), "threads": (128, 2048)})
    assert len(p.survivors) == 2
    built = tune_search.build_all(p, p.survivors[1:], "tilelang-cpu", cache, jobs=1)
    assert built == {"BK=16, BM=64, EXTRA=0, stages=1, threads=2048": "a block has 1 to 1024 threads, got 2048"}
    records, results = tune_search.search(p, "tilelang", cache, "Fake GPU", measure=lambda c: 0.001)
    assert [r.status for r in records] == ["ok", "ok"]  # an injected measure replaces compiling too


# ---------------------------------------------------------------------------------- tkc.compile(tune=True)

def test_compile_tune_uses_the_best_measured(staged, tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    monkeypatch.setattr(tune, "device_name", lambda: "Fake GPU")
    dims = {"K": 4096, "M": 256}
    path = tune.results_path(cache, STAGED, dims, "Fake GPU", "tilelang")
    tune.save_results(path, {"a": tune.Record({"BM": 256, "BK": 64, "stages": 3, "EXTRA": 0}, "ok", 9.0),
                             "b": tune.Record({"BM": 64, "BK": 16, "stages": 1, "EXTRA": 1}, "ok", 4.0),
                             "c": tune.Record({"BM": 64, "BK": 64, "stages": 1, "EXTRA": 0}, "wrong")}, {})
    kernel = tkc.compile(staged, target="tilelang", cache_dir=cache, tune=True)
    assert kernel.consts_for(dims) == {"BM": 64, "BK": 16, "stages": 1, "EXTRA": 1}
    with pytest.raises(TkError) as info:
        kernel.consts_for({"K": 1024, "M": 256})
    text = info.value.render()
    assert "no `tkc tune` results for `staged` with K=1024, M=256 on Fake GPU (target tilelang)" in text
    assert f"run: tkc --cache-dir {cache} tune {staged} -D K=1024 -D M=256 --target tilelang" in text
    with pytest.raises(TkError, match="do not also pass BM"):
        tkc.compile(staged, target="tilelang", cache_dir=cache, tune=True, BM=64)
    with pytest.raises(TkError, match="needs a GPU target"):
        tkc.compile(staged, target="tilelang-cpu", cache_dir=cache, tune=True)
    monkeypatch.setattr(tune, "device_name", lambda: None)
    with pytest.raises(TkError, match="there is none here"):
        tkc.compile(staged, target="cuda", cache_dir=cache, tune=True).consts_for(dims)


# ---------------------------------------------------------------------------------- the command line

def test_cli_dry_run(capsys, staged):
    rc, out, err = cli(capsys, "tune", staged, "--dry-run", "-D", "K=128", "--top", "2")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "tune `staged` (target tilelang) at K=128, M=256"
    assert lines[1] == "space: BK = (16, 64, 128, 48); BM = (64, 256, 512, 1024); EXTRA = (0, 1); " \
                       "stages = (1, 2, 3, 4): 128 configurations"
    survive = sum(expected_staged(c, 128)[0] == "ok" for c in tune.configurations(
        {"BK": (16, 64, 128, 48), "BM": (64, 256, 512, 1024), "EXTRA": (0, 1), "stages": (1, 2, 3, 4)}))
    assert lines[2].startswith("pruned: ") and lines[2].endswith(f"{survive} survive, {128 - survive} rejected")
    assert any("requires `BM % BK == 0`" in line for line in lines)
    assert any("smem: over 227 KiB" in line for line in lines)
    assert "survivors (first 2):" in out


def test_cli_dry_run_on_examples(capsys):
    for name in ("miss.tk", "matmul.tk"):
        rc, out, err = cli(capsys, "tune", os.path.join(ROOT, "examples", name), "--dry-run")
        assert rc == 0 and "1 configuration\n" in out and "1 survive, 0 rejected" in out, (out, err)
    rc, out, err = cli(capsys, "tune", os.path.join(ROOT, "examples", "miss.tk"), "--dry-run",
                       "--space", "BM=16,32,64", "--space", "stages=1,2,3,4")
    assert rc == 0 and "12 configurations" in out, err


@pytest.mark.parametrize("args, msg", [
    (["--space", "BM=8,x"], "argument --space: `BM`: `x` is not an integer"),
    (["--space", "BM"], "argument --space: expected NAME=v1,v2,..., got `BM`"),
    (["--space", "BQ=8"], "`--space BQ` names no schedule constant of `staged`"),
    (["--space", "M=8"], "`--space M`: `M` is a problem dim of `staged`"),
    (["--space", "BM=8", "--space", "BM=16"], "`--space BM` is given twice"),
    (["-D", "BQ=1"], "`-D BQ` names neither a dim nor a schedule constant"),
    (["--space", "BM=8", "--space", "BK=16,32"], "every one of the 16 configurations of `staged` is rejected"),
    (["--top", "0"], "`--top` must be at least 1, got 0"),
    (["--model-top", "0"], "`--model-top` must be at least 1, got 0"),
])
def test_cli_errors_exit_1(capsys, staged, args, msg):
    rc, out, err = cli(capsys, "tune", staged, "--dry-run", *args)
    assert rc == 1 and msg in err, err
    assert "Traceback" not in err


def test_cli_without_a_gpu_is_a_user_error(capsys, staged, monkeypatch):
    monkeypatch.setattr(tune, "device_name", lambda: None)
    rc, out, err = cli(capsys, "tune", staged)
    assert rc == 1
    assert "error: `tkc tune` times kernels on a CUDA GPU, and there is none here" in err
    assert "--dry-run" in err and "Traceback" not in err


def test_tune_clause_errors(capsys, tmp_path):
    bad = tmp_path / "bad.tk"
    bad.write_text(STAGED.replace("EXTRA = (0, 1)", "M = (1, 2)"))
    rc, out, err = cli(capsys, "opt", str(bad))
    assert rc == 1 and "`tune` lists values for `M`, which is not a schedule constant of `staged`" in err, err
    rc, out, err = cli(capsys, "tune", str(bad), "--dry-run")
    assert rc == 1 and "which is not a schedule constant" in err
    bad.write_text(STAGED.replace("EXTRA = (0, 1)", "BM = (1, 2)"))
    rc, out, err = cli(capsys, "opt", str(bad))
    assert rc == 1 and "tune space of `BM` is defined twice" in err, err
    bad.write_text(STAGED.replace("EXTRA = (0, 1)", "EXTRA = ()"))
    rc, out, err = cli(capsys, "opt", str(bad))
    assert rc == 1 and "syntax error" in err, err


def test_results_file_is_json_with_metadata(staged, tmp_path):
    cache = Cache(str(tmp_path / "cache"))
    p = tune_search.plan(staged, {}, {"BM": (64,), "BK": (16,), "stages": (1,), "EXTRA": (0,)})
    _, path = tune_search.search(p, "cuda", cache, "Fake GPU", measure=lambda c: 0.002)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert data["kernel"] == "staged" and data["device"] == "Fake GPU" and data["target"] == "cuda"
    assert data["dims"] == {"K": 4096, "M": 256}
    assert data["results"] == [{"config": {"BK": 16, "BM": 64, "EXTRA": 0, "stages": 1}, "status": "ok",
                                "time_us": 2.0, "reason": "", "group": ""}]


# ---------------------------------------------------------------------------------- the cost model

MISS_SPACE = {"BM": (16, 32, 64), "BN": (64, 128, 256), "stages": (2, 3)}


def _estimates(p) -> dict[str, float]:
    """Every survivor's estimate, computed here from the model directly (not through rank_by_model)."""
    from passes.cost_model import estimate
    from passes.manager import parse_pipeline, run_pipeline
    from tkc.schedule import MODEL_PIPELINE

    return {tune.config_key(c): estimate(run_pipeline(driver.frontend(p.path, {**p.dims, **c}, p.text),
                                                      parse_pipeline(MODEL_PIPELINE)), {}).time_us
            for c in p.survivors}


def test_model_top_times_only_the_models_best(tmp_path):
    """`tkc tune --model-top K` (issue 13: the cost model inside `tkc tune`): the K survivors
    with the lowest estimates, best first, are the only ones compiled and timed, and the report
    shows each one's estimate next to its time."""
    path = os.path.join(ROOT, "examples", "miss.tk")
    p = tune_search.plan(path, {}, MISS_SPACE)
    est = _estimates(p)
    assert len(set(est.values())) > 2  # the model tells the configurations apart
    p = tune_search.rank_by_model(p, 3)
    assert len(p.survivors) == 3 and p.model_dropped == len(est) - 3
    kept = [est[tune.config_key(c)] for c in p.survivors]
    assert kept == sorted(kept) and kept[-1] <= min(v for k, v in est.items()
                                                    if k not in {tune.config_key(c) for c in p.survivors})
    calls = []

    def ms(c):
        return 0.001 * c["BM"] + 1e-5 * c["BN"] + 1e-6 * c["stages"]

    records, results = tune_search.search(p, "tilelang", Cache(str(tmp_path / "cache")), "Fake GPU",
                                          measure=lambda c: calls.append(dict(c)) or ms(c))
    assert sorted(map(tune.config_key, calls)) == sorted(map(tune.config_key, p.survivors))
    text = tune_search.report(p, records, "tilelang", "Fake GPU", 5, results)
    assert f"cost model: timing the 3 best of {len(est)} survivors" in text
    assert "  rank  time (us)  vs best  model (us)" in text
    best = min(p.survivors, key=ms)
    assert f"{est[tune.config_key(best)]:.2f}" in text.split("model (us)")[1].splitlines()[1]


def test_cli_dry_run_with_the_model(capsys):
    path = os.path.join(ROOT, "examples", "miss.tk")
    rc, out, err = cli(capsys, "tune", path, "--dry-run", "--space", "BM=16,32,64", "--space", "BN=64,128,256",
                       "--space", "stages=2,3", "--model-top", "4")
    assert rc == 0, err
    assert "pruned: 18 survive, 0 rejected" in out and "cost model: timing the 4 best of 18 survivors" in out
    shown = [float(line.split("(model: ")[1].split(" us)")[0]) for line in out.splitlines() if "(model: " in line]
    assert len(shown) == 4 and shown == sorted(shown)
    est = _estimates(tune_search.plan(path, {}, MISS_SPACE))
    assert shown == [round(v, 2) for v in sorted(est.values())[:4]]


def test_a_runtime_scalar_is_fixed_with_d_and_keys_its_own_results(capsys, tmp_path, monkeypatch):
    """attention.tk's `requires pos < S` holds per call, not per configuration: the pruner leaves
    it out (it said "unknown name `pos`" for every kernel with a runtime scalar before), `-D pos=`
    fixes the position every timed call gets (the header shows it), the results file is another
    than the one at drawn positions (which `tune=True` uses), and a position its `requires`
    refuses is a located error before anything is compiled."""
    path = os.path.join(ROOT, "examples", "attention.tk")
    space = {"BT": (64, 128)}
    plain = tune_search.plan(path, {"H": 6, "HD": 48, "KVD": 288}, space)
    fixed = tune_search.plan(path, {"H": 6, "HD": 48, "KVD": 288, "pos": 1023}, space)
    assert plain.scalars == {} and fixed.scalars == {"pos": 1023} and fixed.dims == plain.dims
    assert len(fixed.survivors) == 2 and not fixed.rejected
    cache = Cache(str(tmp_path / "cache"))
    _, at_plain = tune_search.search(plain, "cuda", cache, "Fake GPU", measure=lambda c: 1.0)
    _, at_fixed = tune_search.search(fixed, "cuda", cache, "Fake GPU", measure=lambda c: 2.0)
    assert at_plain != at_fixed
    with open(at_fixed, encoding="utf-8") as f:
        assert json.load(f)["scalars"] == {"pos": 1023}
    assert tune.tuned_config(cache.root, path, plain.text, plain.dims, "cuda", "Fake GPU") == {"BT": 64, "threads": 512}
    # the GPU measure draws its inputs with the fixed value
    from tkc import oracle

    import torch

    seen = []  # a tensor and the scalar's int, as oracle.random_inputs returns them
    monkeypatch.setattr(oracle, "random_inputs", lambda module, seed, device, dist="normal", scalars=None:
                        seen.append(scalars) or [torch.zeros(4), scalars["pos"]])
    monkeypatch.setattr(oracle, "reference", lambda module, inputs: [])
    tune_search.GpuMeasure(fixed, "cuda", cache)._inputs(None)
    assert seen and all(s == {"pos": 1023} for s in seen)
    rc, out, err = cli(capsys, "tune", path, "--dry-run", "-D", "pos=1023", "-D", "S=2048", "--space", "BT=64")
    assert rc == 0 and out.splitlines()[0] == "tune `attention` (target tilelang) at H=32, HD=128, KVD=4096, " \
                                              "S=2048, pos=1023", err
    rc, out, err = cli(capsys, "tune", path, "--dry-run", "-D", "pos=1024")
    assert rc == 1 and "attention.tk:19:14: error: requirement `pos < S` does not hold at this call" in err, err
    assert "with S = 1024, pos = 1024" in err and "Traceback" not in err
    rc, out, err = cli(capsys, "tune", path, "--dry-run", "-D", "BQ=1")
    assert rc == 1 and "`-D BQ` names neither a dim, a schedule constant nor a runtime scalar" in err, err

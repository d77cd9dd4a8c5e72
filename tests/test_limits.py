"""Bounded compiles (issue 14, item 2): an input too large, too slow or too big in memory to
compile ends in a located error with exit status 1 within the bound, never a run of minutes
(tkc/limits.py, dsl/parser.py's source size limit)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "rmsnorm.tk")


def _tkc(*args, env=None, timeout=120):
    full = {**os.environ, **(env or {})}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tkc.cli", *args], capture_output=True, text=True, env=full,
                          timeout=timeout, cwd=ROOT)
    return proc, time.monotonic() - start


def _chain(path, statements: int) -> str:
    lines = ["kernel chain<BM=16>(X: f32[M, N]) -> (Y: f32[M, N])", "    where M = 64, N = 64", "{",
             "    grid (cdiv(M, BM)) as (m)", "    x = X[m*BM : +BM, :]"]
    lines += ["    x = x + x * 0.5"] * statements
    lines += ["    Y[m*BM : +BM, :] = x", "}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _user_error(proc, *needles):
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal compiler error" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_a_source_over_the_size_limit_is_rejected_at_once(tmp_path):
    big = tmp_path / "big.tk"
    big.write_text("# padding\n" * 120_000 + open(EXAMPLE).read())  # 1.2 MB, over the default 1 MiB
    proc, took = _tkc("compile", str(big))
    _user_error(proc, "big.tk:1:1: error:", "tkc reads kernels of at most 1048576 bytes", "TKC_MAX_SOURCE_BYTES")
    assert took < 30
    proc, _ = _tkc("compile", EXAMPLE, env={"TKC_MAX_SOURCE_BYTES": "500"})
    _user_error(proc, "rmsnorm.tk:1:1: error:", "at most 500 bytes")


def test_a_compile_over_the_time_limit_stops_with_a_located_error(tmp_path):
    path = _chain(tmp_path / "chain.tk", 3000)  # takes well over a second to compile
    proc, took = _tkc("compile", path, "--target", "tilelang-cpu", env={"TKC_TIME_LIMIT": "1"})
    _user_error(proc, "chain.tk:1:1: error: compiling `chain.tk` exceeded the time limit of 1 s", "TKC_TIME_LIMIT")
    assert took < 20, took  # interpreter start and imports, then one second


def test_a_compile_over_the_memory_limit_stops_with_a_located_error(tmp_path):
    path = _chain(tmp_path / "chain.tk", 3000)
    proc, _ = _tkc("opt", path, "-p", "tile", env={"TKC_MEMORY_LIMIT_MB": "40"})  # below the interpreter's own
    _user_error(proc, "chain.tk:1:1: error: optimizing `chain.tk` exceeded the memory limit of 40 MB", "TKC_MEMORY_LIMIT_MB")


@pytest.mark.parametrize("var, value", [("TKC_TIME_LIMIT", "soon"), ("TKC_MEMORY_LIMIT_MB", "-5")])
def test_bad_limit_settings_are_user_errors(var, value):
    proc, _ = _tkc("compile", EXAMPLE, env={var: value})
    _user_error(proc, f"error: {var} must be")


def test_limits_off_and_off_the_main_thread_do_not_interrupt():
    import threading

    from tkc.limits import bounded

    os.environ["TKC_TIME_LIMIT"] = "0.01"
    try:
        box = []

        def work():
            with bounded("compiling", EXAMPLE):
                time.sleep(0.2)
            box.append("done")

        t = threading.Thread(target=work)
        t.start()
        t.join()
        assert box == ["done"]  # a watchdog interrupts the main thread only; none runs elsewhere
        os.environ["TKC_TIME_LIMIT"] = "0"
        with bounded("compiling", EXAMPLE):
            time.sleep(0.1)
    finally:
        os.environ.pop("TKC_TIME_LIMIT", None)


def test_a_normal_compile_is_not_interrupted():
    proc, _ = _tkc("compile", EXAMPLE, "--target", "tilelang-cpu", env={"TKC_TIME_LIMIT": "300"})
    assert proc.returncode == 0, proc.stderr

"""tkc/cache.py: the on-disk cache of generated code, and driver.emit's use of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsl.lower import lower
from dsl.parser import parse
from passes.manager import parse_pipeline, run_pipeline
from profiles import examples
from tkc import driver
from tkc.cache import Cache, cache_key, default_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_default_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TKC_CACHE_DIR", str(tmp_path))
    assert default_root() == str(tmp_path) and Cache().root == str(tmp_path)


@settings(max_examples=examples(20, 100))
@given(st.dictionaries(st.from_regex(r"[a-z]{1,8}\.(py|txt)", fullmatch=True), st.text(max_size=200),
                       min_size=1, max_size=3), st.text(min_size=1, max_size=40))
def test_put_then_get_returns_the_files(tmp_path_factory, files, ir):
    cache = Cache(str(tmp_path_factory.mktemp("c")))
    key = cache_key(ir, "tilelang")
    assert cache.get(key) is None
    entry = cache.put(key, files, "tilelang")
    assert entry == cache.path(key) and os.path.isdir(entry)
    assert cache.get(key) == files
    with open(os.path.join(entry, "meta.json"), encoding="utf-8") as f:
        assert json.load(f)["target"] == "tilelang"
    assert [n for n in os.listdir(os.path.dirname(entry)) if n.startswith(".")] == []  # no temp dirs left


def test_put_replaces_an_entry(tmp_path):
    cache = Cache(str(tmp_path))
    key = cache_key("ir", "tir")
    cache.put(key, {"a.py": "one"}, "tir")
    cache.put(key, {"b.py": "two"}, "tir")
    assert cache.get(key) == {"b.py": "two"}


@pytest.mark.parametrize("damage", ["edit", "truncate", "delete", "meta", "meta-key"])
def test_corrupt_entry_is_removed(tmp_path, damage):
    cache = Cache(str(tmp_path))
    key = cache_key("some ir", "tilelang")
    entry = cache.put(key, {"kernel.py": "print('hello')\n", "kernel.tkir": "ir\n"}, "tilelang")
    path = os.path.join(entry, "kernel.py")
    if damage == "edit":
        with open(path, "w") as f:
            f.write("print('HELLO')\n")
    elif damage == "truncate":
        open(path, "w").close()
    elif damage == "delete":
        os.unlink(path)
    elif damage == "meta":
        with open(os.path.join(entry, "meta.json"), "w") as f:
            f.write("{not json")
    else:
        meta_path = os.path.join(entry, "meta.json")
        with open(meta_path) as f:
            meta = json.load(f)
        meta["key"] = "0" * 64
        with open(meta_path, "w") as f:
            json.dump(meta, f)
    assert cache.get(key) is None
    assert not os.path.exists(entry)


def test_key_depends_on_ir_and_target():
    keys = {cache_key(ir, t) for ir in ("a", "b") for t in ("tilelang", "tilelang-cpu", "tir")}
    assert len(keys) == 6
    assert cache_key("a", "tir") == cache_key("a", "tir")


def _final_module(name: str, **overrides):
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    src = open(path).read()
    module = lower(parse(src, path), src, overrides)
    return run_pipeline(module, parse_pipeline(driver.default_pipeline("tilelang")))


def test_emit_serves_from_cache_and_rebuilds_corrupt_entries(tmp_path):
    cache = Cache(str(tmp_path))
    module = _final_module("miss_v3", M=128, N=128, K=128, R=32)
    first = driver.emit(module, "tilelang", cache)
    assert not first.cached and "T.prim_func" in first.source
    second = driver.emit(module, "tilelang", cache)
    assert second.cached and second.source == first.source and second.key == first.key
    with open(second.source_path, "a", encoding="utf-8") as f:
        f.write("# tampered\n")
    third = driver.emit(module, "tilelang", cache)
    assert not third.cached and third.source == first.source
    with open(third.source_path, encoding="utf-8") as f:
        assert f.read() == first.source
    assert driver.emit(module, "tilelang", cache).cached


def test_emit_keys_by_target_and_ir(tmp_path):
    cache = Cache(str(tmp_path))
    module = _final_module("miss_v3", M=128, N=128, K=128, R=32)
    gpu = driver.emit(module, "tilelang", cache)
    cpu = driver.emit(module, "tilelang-cpu", cache)
    assert gpu.key != cpu.key and not cpu.cached
    assert "T.alloc_local" in cpu.source and "T.alloc_fragment" in gpu.source
    other = driver.emit(_final_module("miss_v3", M=256, N=128, K=128, R=32), "tilelang", cache)
    assert other.key != gpu.key and not other.cached


def _compile_cmd(cache_dir: str) -> list[str]:
    return [sys.executable, "-m", "tkc.cli", "--cache-dir", cache_dir, "compile",
            os.path.join(ROOT, "examples", "miss_v3.tk"), "--target", "tilelang", "-D", "M=256"]


def _entries_all_valid(root: str) -> int:
    """Every entry directory under `root` reads back whole (Cache.get re-hashes its files)."""
    cache, n = Cache(root), 0
    for shard in os.listdir(root):
        folder = os.path.join(root, shard)
        if len(shard) != 2 or not os.path.isdir(folder):
            continue
        for key in os.listdir(folder):
            if len(key) == 64 or key.startswith("src-"):  # not a writer's temporary directory
                assert cache.get(key) is not None, f"entry {key} does not read back"
                n += 1
    return n


def test_concurrent_compiles_of_one_kernel_leave_a_correct_cache(tmp_path):
    """Issue 14, item 7: four processes compile the same kernel into one cache at once; each
    prints the same code, and every entry they leave reads back whole."""
    root = str(tmp_path / "cache")
    procs = [subprocess.Popen(_compile_cmd(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
             for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert len({out for out, _ in outs}) == 1 and "T.prim_func" in outs[0][0]
    assert _entries_all_valid(root) >= 2  # the source index and the code
    again = subprocess.run(_compile_cmd(root), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0 and again.stdout == outs[0][0]


@pytest.mark.parametrize("after_s", [0.3, 0.9, 1.5])
def test_a_compile_killed_half_way_leaves_a_correct_cache(tmp_path, after_s):
    """A compile killed at some point (SIGKILL: no cleanup runs) leaves at most a writer's
    temporary directory, never a partial entry: the next compile succeeds with the right code."""
    root = str(tmp_path / "cache")
    clean = subprocess.run(_compile_cmd(str(tmp_path / "clean")), capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
    victim = subprocess.Popen(_compile_cmd(root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    time.sleep(after_s)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=60)
    if os.path.isdir(root):
        _entries_all_valid(root)
    after = subprocess.run(_compile_cmd(root), capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert after.returncode == 0 and after.stdout == clean.stdout
    _entries_all_valid(root)

"""Index tensors (`E[ids[b] : +1, :]`) and runtime scalars read from device memory (`scalar_refs`)
are checked inside the kernel on the GPU targets: the CUDA
backend reads every element through `tk_index` (codegen/cuda_prelude.py INDEX_PRELUDE), the
TileLang backend through a `T.call_extern` of a prelude function per index tensor and location.
An element outside [0, bound) prints the .tk location and stops the kernel; the CPU targets
check on the host (tkc/runtime.py check_indices). Here: the bounds and locations in the
generated code, nvcc on it, and the CUDA kernel on the CPU emulation (tests/cuda_emu): in-range
ids against torch in float64, an out-of-range id (V, -1, 2^31 - 1) stopping with the message.
The GPU runs the same code in tests/gpu/test_gpu_device_checks.py.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from codegen import cuda, tilelang, tilelang_cpu
from dsl import exprs
from dsl.ops import index_bound_exprs, index_bounds
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBEDDING = os.path.join(ROOT, "examples", "embedding.tk")
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
import emulate  # noqa: E402

# two reads of `ids`: a 2-row window (ids must stay under V - 1) and a single row of F (under W)
TWO_READS = """\
kernel pairs<BN=32, threads=32>(E: f32[V, N], F: f32[W, N], ids: i32[B]) -> (Y: f32[B, N])
    where V = 40, W = 50, N = 64, B = 3
    reference "E[ids.long()] + E[ids.long() + 1] + F[ids.long()]"
{
    grid (B, cdiv(N, BN)) as (b, n) threads(threads)
    e = E[ids[b] : +2, n*BN : +BN]
    f = F[ids[b] : +1, n*BN : +BN]
    Y[b : +1, n*BN : +BN] = sum(e, 0) + f
}
"""


def _final(path, defines=None):
    return driver.optimize(driver.frontend(path, defines or {}), "cuda")


def test_bounds_are_the_least_room_over_every_read(tmp_path):
    path = tmp_path / "pairs.tk"
    path.write_text(TWO_READS)
    module = _final(str(path))
    rooms = index_bound_exprs(module.func)["ids"]
    assert sorted(exprs.evaluate(exprs.parse(r), module.env) for r in rooms) == [39, 50]
    assert index_bounds(module.func, module.env) == {"ids": 39}
    source = cuda.emit(module)
    calls = re.findall(r'tk_index\(static_cast<int>\(ids\[\(b\)\]\), (.*?), "([^"]+)", "ids"\)', source)
    assert calls, source
    for bound, where in calls:  # every read checks against both rooms, at the copy's location
        assert "min(" in bound and exprs.evaluate(exprs.parse(bound), {}) == 39, bound
        assert where.startswith(str(path) + ":"), where
    assert {w.rsplit(":", 2)[1] for _, w in calls} == {"6", "7"}  # the two copies' lines


def test_cuda_source_checks_every_index_read():
    source = cuda.emit(_final(EMBEDDING))
    loads = re.findall(r"ids\[\(b\)\]", source)
    checked = re.findall(r"tk_index\(static_cast<int>\(ids\[\(b\)\]\), 32000, \"[^\"]*embedding\.tk:9:29\", \"ids\"\)", source)
    assert loads and len(loads) == len(checked), source
    assert "__trap();" in source and "tk_error_reported" in source


def test_index_prelude_only_where_an_index_is_read():
    source = cuda.emit(_final(os.path.join(ROOT, "examples", "accum.tk")))
    assert "tk_index" not in source


def test_tilelang_gpu_source_checks_through_its_prelude():
    module = driver.optimize(driver.frontend(EMBEDDING, {}), "tilelang")
    source = tilelang.emit(module)
    assert 'T.call_extern("int32", "tk_index_0", ids[b], 32000)' in source, source
    assert "prelude=CHECK_PRELUDE" in source
    assert re.search(r'int tk_index_0\(int v, int hi\) \{ return tk_index\(v, hi, "[^"]*embedding\.tk:9:29", "ids"\); \}',
                     source), source
    assert "ids[b]" not in source.replace('"tk_index_0", ids[b]', "")  # no unchecked read
    compile(source, "embedding_tilelang.py", "exec")  # valid Python
    cpu = driver.optimize(driver.frontend(EMBEDDING, {}), "tilelang-cpu")
    assert "tk_index" not in tilelang_cpu.emit(cpu)  # the CPU targets check on the host


@pytest.mark.skipif(emulate.gxx() is None, reason="no g++ with C++20 <barrier>")
def test_emulated_embedding_in_range_matches_torch():
    # V, N, B off the tile: a partial last tile of BN along N, several rows
    emulate.check_against_torch(EMBEDDING, {"V": 37, "N": 1100, "B": 5, "BN": 256})


@pytest.mark.skipif(emulate.gxx() is None, reason="no g++ with C++20 <barrier>")
@pytest.mark.parametrize("bad", [37, -1, 2**31 - 1])
def test_emulated_embedding_out_of_range_stops_with_the_location(bad):
    kernel = emulate.Emulated(_final(EMBEDDING, {"V": 37, "N": 300, "B": 3, "BN": 256}))
    rng = np.random.default_rng(0)
    E = rng.standard_normal((37, 300)).astype(np.float32)
    ids = np.array([3, bad, 36], np.int32)
    Y = np.zeros((3, 300), np.float32)
    with pytest.raises(RuntimeError) as info:
        kernel([E, ids, Y], [2])
    assert re.search(rf"embedding\.tk:9:29: error: index tensor `ids` holds {bad}, outside \[0, 37\)", str(info.value))
    ok = kernel([E, np.array([3, 0, 36], np.int32), Y], [2])[0]
    assert np.array_equal(ok, E[[3, 0, 36]])


ATTENTION = os.path.join(ROOT, "examples", "attention.tk")


def _with_refs(target, defines=None):
    module = driver.optimize(driver.frontend(ATTENTION, defines or {}), target)
    module.func.attrs["scalar_refs"] = ["pos"]  # what a call with `pos` as a device tensor compiles
    return module


def test_scalar_read_from_memory_is_checked_where_it_is_read():
    source = cuda.emit(_with_refs("cuda"))
    lines = [line.strip() for line in source.splitlines()]
    at = lines.index("const int pos = *pos_ref;  // runtime scalar `pos` from device memory")
    assert lines[at + 1].startswith('tk_require(pos >= 0, "') and '"pos", pos);' in lines[at + 1]
    assert lines[at + 2].startswith('tk_require(pos < 1024, "') and "attention.tk:19:14" in lines[at + 2]
    by_value = cuda.emit(driver.optimize(driver.frontend(ATTENTION, {}), "cuda"))
    assert "tk_require(" not in by_value.split("// ---- kernel")[1]  # an int scalar: checked on the host
    tl = tilelang.emit(_with_refs("tilelang"))
    assert 'T.evaluate(T.call_extern("int32", "tk_require_1", T.Cast("int32", pos < 1024), pos))' in tl
    assert "prelude=CHECK_PRELUDE" in tl
    compile(tl, "attention_tilelang.py", "exec")


@pytest.mark.skipif(emulate.gxx() is None, reason="no g++ with C++20 <barrier>")
def test_emulated_scalar_from_memory_in_and_out_of_range(tmp_path):
    path = tmp_path / "attention_f32.tk"  # f32 caches: the emulation has no 16-bit floats
    path.write_text(open(ATTENTION).read().replace("KC: f16[S, KVD], VC: f16[S, KVD]", "KC: f32[S, KVD], VC: f32[S, KVD]"))
    defines = {"H": 2, "HD": 32, "S": 80, "KVD": 64}
    emulate.check_against_torch(str(path), defines, dists=["wide"], scalars={"pos": 79}, scalar_refs=True)
    module = driver.optimize(driver.frontend(str(path), defines), "cuda")
    module.func.attrs["scalar_refs"] = ["pos"]
    kernel = emulate.Emulated(module)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 32)).astype(np.float32), rng.standard_normal((80, 64)).astype(np.float32),
              rng.standard_normal((80, 64)).astype(np.float32), np.zeros((2, 32), np.float32)]
    for bad, message in ((80, "requirement `pos < 80` does not hold at this call"),
                         (-3, "runtime scalar `pos` is negative")):
        with pytest.raises(RuntimeError) as info:
            kernel(arrays, [3], [bad])
        assert message in str(info.value) and f"with pos = {bad}" in str(info.value), str(info.value)

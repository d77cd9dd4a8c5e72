"""Index tensors (`E[ids[b] : +1, :]`) are checked inside the kernel on the GPU targets: the CUDA
backend reads every element through `tk_index` (codegen/cuda_prelude.py INDEX_PRELUDE), the
TileLang backend through a `T.call_extern` of a prelude function per index tensor and location.
An element outside [0, bound) prints the .tk location and stops the kernel; the CPU targets
check on the host (tkc/runtime.py check_indices). Here: the bounds and locations in the
generated code, nvcc on it, and the CUDA kernel on the CPU emulation (tests/cuda_emu): in-range
ids against torch in float64, an out-of-range id (V, -1, 2^31 - 1) stopping with the message.
The GPU runs the same code in tests/gpu/test_gpu_index_check.py.
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
    assert "__trap();" in source and "tk_index_reported" in source


def test_index_prelude_only_where_an_index_is_read():
    source = cuda.emit(_final(os.path.join(ROOT, "examples", "accum.tk")))
    assert "tk_index" not in source


def test_tilelang_gpu_source_checks_through_its_prelude():
    module = driver.optimize(driver.frontend(EMBEDDING, {}), "tilelang")
    source = tilelang.emit(module)
    assert 'T.call_extern("int32", "tk_index_0", ids[b], 32000)' in source, source
    assert "prelude=INDEX_PRELUDE" in source
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

"""Dynamic dims through the CUDA backend (issue 13, item 1), run on the CPU emulation
(tests/cuda_emu) against torch in float64 with the oracle's derived tolerance.

A dim marked dynamic is an int kernel argument after the runtime scalars: one generated kernel
serves every value. Its tensors' strides, the edge checks along it and the grid extents that
depend on it (evaluated at launch: tkc/cuda_runtime.py) use the argument, never a value seen at
compile time. Each case compiles once and runs that one source at extents below, at and around
the tile size (1, a partial tile, whole tiles, several tiles plus a remainder), then checks that
the source is what a compile at another value of the dim gives. Skipped without a g++ with C++20
<barrier>; tests/gpu/test_gpu_dynamic.py runs the same through CuPy on the GPU.
"""

from __future__ import annotations

import os
import sys

import pytest

from codegen import cuda
from dsl.diagnostics import TkError
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_emu"))
import emulate  # noqa: E402

DISTS = ["normal", "offset"]
CASES = [  # (file, dynamic dim -> extents, other defines)
    ("tests/programs/softmax.tk", {"M": [1, 15, 16, 17, 41]}, {}),  # BM = 16: row reductions and `where`
    ("tests/programs/dim_exprs.tk", {"M": [3, 16, 29]}, {}),  # dims in expressions of a signature
    ("tests/programs/reduce.tk", {"M": [1, 18]}, {}),  # sum, max and min rows and an update
    ("examples/matmul.tk", {"D": [1, 5, 130]}, {"K": 96, "BK": 32}),  # GEMV: BD = 4 rows per block
    ("examples/rmsnorm.tk", {"B": [1, 9, 20]}, {"N": 256, "threads": 128}),  # BR = 2 rows per block
]


@pytest.mark.skipif(emulate.gxx() is None, reason="no g++ with C++20 <barrier>")
@pytest.mark.parametrize("path,values,defines", CASES, ids=[os.path.basename(c[0]) for c in CASES])
def test_one_kernel_serves_every_extent(path, values, defines):
    path = os.path.join(ROOT, path)
    source = emulate.check_dynamic_against_torch(path, values, defines, DISTS)
    (name,) = values
    assert f"const int {name})" in source or f"const int {name}," in source, "the dim is not a kernel argument"
    assert f"constexpr int {name} =" not in source
    other = {**defines, name: values[name][-1] * 3 + 1}  # a compile at another test value: the same kernel
    again = cuda.emit(driver.optimize(driver.frontend(path, other, dynamic=(name,)), "cuda"))
    assert again.split("// ---- kernel ----")[1] == source.split("// ---- kernel ----")[1]


def test_launch_config_names_where_each_dim_comes_from():
    path = os.path.join(ROOT, "examples", "miss_split.tk")  # `dynamic M`: grid (NS, cdiv(M, BM))
    source = cuda.emit(driver.optimize(driver.frontend(path, {}), "cuda"))
    config = cuda.launch_config(source)
    assert config["dynamic"] == [["M", 0, 0]]  # A: f16[M, K], argument 0, axis 0
    assert config["grid"][1] == "cdiv(M, 16)" and config["grid"][0] == 1
    assert "< M" in source  # the edge checks along M read the argument


@pytest.mark.parametrize("path,dim", [("examples/cluster_reduce_dsmem.tk", "B"), ("examples/sddmm.tk", "M")])
def test_what_cuda_cannot_take_dynamic_is_a_located_error(path, dim):
    path = os.path.join(ROOT, path)
    with pytest.raises(TkError) as info:
        cuda.emit(driver.optimize(driver.frontend(path, {}, dynamic=(dim,)), "cuda"))
    d = info.value.diagnostics[0]
    # the passes reject both before codegen (map-dsmem: `grid (B)` over a dynamic B need not divide
    # into clusters of 2)
    assert d.loc.line > 0 and (f"`{dim}`" in d.message or f"extent {dim} " in d.message), d.message

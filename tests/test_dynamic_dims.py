"""Dynamic dims (`dynamic M`, `tkc.compile(..., dynamic=("M",))`, `--dynamic M`; issue 13): one
compiled kernel serves every value of the dim.

Checked against torch in float64 from the same inputs over M at and around the tile edges
(interp and tilelang-cpu, each compiled once for the whole property), against the static
(specialized) form of the same kernel, and for what the compiler must do differently: the tile
pass keeps the dim symbolic and guards the edge, `requires` on the dim is checked at every call,
coverage is checked at several values, and every construct that needs the value at compile time
is a located error.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tkc
from dsl.diagnostics import TkError
from dsl.ir import print_module
from dsl.ir_parser import parse_module
from profiles import examples
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISS = os.path.join(ROOT, "examples", "miss.tk")
K, N, R, BM = 200, 96, 64, 16  # K not a multiple of R: the last shard is zero-padded

ROWSUM = """\
kernel rowsum<BM=32>(X: f32[M, K]) -> (Y: f32[M, 1])
    where M = 100, K = 64
    dynamic M
    reference "X.sum(1, keepdim=True)"
{
    grid (cdiv(M, BM)) as (m)
    Y[m*BM : +BM, :] = sum(X[m*BM : +BM, :], 1)
}
"""


def _write(tmp_path, text: str, name: str = "k.tk") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _miss_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a64 = F.pad(a.double(), (0, (-a.shape[1]) % R))
    return torch.sum(a64.reshape(a.shape[0], -1, R), dim=-2) @ b.double()


def _inputs(m: int, seed: int):
    """A with a wide range and an offset (no cancellation hides a dropped shard), B normal."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, K, generator=g) * 4 + 1).half()
    b = torch.randn(R, N, generator=g).half()
    return a, b


def _tolerance(ref: torch.Tensor) -> float:
    # f16 output rounding (2^-11), the f16 shard sum fed to the gemm (2^-11 relative to the sum's
    # magnitude), f32 accumulation over K / R + R terms: a few f16 ulps of the largest value
    return 4 * 2.0 ** -10 * float(ref.abs().max()) + 1e-3


@pytest.fixture(scope="module")
def dynamic_kernels(tmp_path_factory):
    cache = str(tmp_path_factory.mktemp("cache"))
    return {t: tkc.compile(MISS, target=t, cache_dir=cache, dynamic=("M",), BM=BM) for t in ("interp", "tilelang-cpu")}


@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
@settings(max_examples=examples(6, 20))
@given(m=st.one_of(st.sampled_from([1, BM - 1, BM, BM + 1, 3 * BM + 5]), st.integers(1, 200)), seed=st.integers(0, 99))
def test_one_compile_serves_every_m(dynamic_kernels, target, m, seed):
    kernel = dynamic_kernels[target]
    a, b = _inputs(m, seed)
    c = kernel(a, b)
    ref = _miss_ref(a, b)
    assert c.shape == (m, N) and c.dtype == torch.float16
    assert float((c.double() - ref).abs().max()) <= _tolerance(ref)
    assert kernel.specializations == 1  # every M so far went through the one specialization


def test_dynamic_equals_static(tmp_path):
    """The dynamic kernel computes exactly what the kernel specialized at that M computes."""
    cache = str(tmp_path / "cache")
    dyn = tkc.compile(MISS, target="tilelang-cpu", cache_dir=cache, dynamic=("M",), BM=BM)
    static = tkc.compile(MISS, target="tilelang-cpu", cache_dir=cache, BM=BM)
    for m in (BM + 3, 2 * BM):
        a, b = _inputs(m, m)
        assert torch.equal(dyn(a, b), static(a, b))
    assert dyn.specializations == 1 and static.specializations == 2


def test_the_tile_pass_keeps_the_dim_and_guards_its_edge():
    module = driver.optimize(driver.frontend(MISS, {"BM": BM}, dynamic=("M",)), "tilelang")
    args = module.func.body.args
    assert str(args[0].type) == "global<f16[M, 1024]>" and str(args[2].type) == "global<f16[M, 1024]>"
    launch = next(op for op in module.walk() if op.name == "tile.launch")
    assert launch.attrs["grid"] == [f"cdiv(M, {BM})"]
    copies = [op for op in module.walk() if op.name == "tile.copy" and "checked" in op.attrs]
    a_load = next(op for op in copies if op.operands[0] is args[0])
    c_store = next(op for op in copies if op.operands[1] is args[2])
    b_load = next(op for op in copies if op.operands[0] is args[1])
    assert a_load.attrs["checked"] == [True, False] and c_store.attrs["checked"] == [True, False]
    assert b_load.attrs["checked"] == [False, False]
    assert module.func.attrs["dynamic"] == {"M": 1024} and "M" not in module.func.attrs["dims"]
    text = print_module(module)
    assert print_module(parse_module(text, "x.tkir")) == text  # the IR text form round-trips


def test_tilelang_source_declares_the_dim_dynamic(tmp_path):
    from tkc.cache import Cache

    src = driver.compile_file(MISS, "tilelang", {}, Cache(str(tmp_path)), dynamic=("M",)).source
    assert 'M = T.dynamic("M")' in src and "T.Kernel(T.ceildiv(M, 16)" in src
    assert "A: T.Tensor((M, 1024,)" in src and "\nM = 1024" not in src


def test_dynamic_clause_in_the_file(tmp_path):
    """The `dynamic` clause; `tkc run` binds the dim from `-D` for its random inputs."""
    kernel = tkc.compile(_write(tmp_path, ROWSUM), target="tilelang-cpu", cache_dir=str(tmp_path / "c"))
    for m in (1, 31, 33, 70):
        x = torch.randn(m, 64, dtype=torch.float32) + 0.5
        y = kernel(x)
        torch.testing.assert_close(y.double(), x.double().sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    assert kernel.specializations == 1


def test_runtime_requires_on_a_dynamic_dim(tmp_path):
    text = ROWSUM.replace("    dynamic M\n", "    dynamic M\n    requires M % BM == 0\n")
    path = _write(tmp_path, text)
    kernel = tkc.compile(path, target="interp")
    x = torch.randn(64, 64)
    torch.testing.assert_close(kernel(x).double(), x.double().sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
    with pytest.raises(TkError) as info:
        kernel(torch.randn(40, 64))
    d = info.value.diagnostics[0]
    assert d.loc.line == 4 and "does not hold at this call" in d.message and "M = 40" in d.notes[0]


def test_coverage_is_checked_at_several_values(tmp_path):
    """`grid (M / BM)` rounds down: fine at the `where` value 96, wrong at others."""
    text = ROWSUM.replace("where M = 100", "where M = 96").replace("cdiv(M, BM)", "M / BM")
    with pytest.raises(TkError) as info:
        driver.optimize(driver.frontend(_write(tmp_path, text)), "tilelang")
    d = info.value.diagnostics[0]
    # M = 1: no block at all (at the kernel); at M = 17 and 97 the rows past the last whole tile
    assert "output `Y` is not fully written" in d.message and d.notes[-1] == "at dynamic M = 1"
    text = text.replace("    dynamic M\n", "    dynamic M\n    requires M >= 32\n")
    with pytest.raises(TkError) as info:
        driver.optimize(driver.frontend(_write(tmp_path, text)), "tilelang")
    d = info.value.diagnostics[0]
    assert "1 of 97 elements (the first at [96, 0])" in d.message and d.notes[-1] == "at dynamic M = 97"
    assert d.loc.line == 8  # the store


@pytest.mark.parametrize("edit, line, col, message", [
    (("dynamic M", "dynamic Q"), 3, 13, "`dynamic` names `Q`, which is not a tensor dim"),
    (("dynamic M", "dynamic M, M"), 3, 16, "dynamic dim `M` is defined twice"),
    (("X[m*BM : +BM, :], 1)", "X[:, 0 : BM], 1)"), 7, 30, "this slice spans dynamic dim `M`"),
    (("X[m*BM : +BM, :], 1)", "X[0 : M, :], 1)"), 7, 30, "this slice's extent depends on dynamic dim `M`"),
    (("sum(X[m*BM : +BM, :], 1)", "sum(X[m*BM : +BM, :], 1) * zeros(f32[M, 1])"), 7, 61,
     "`M` is a dynamic dim: its value is known only when the kernel runs"),
    (("(X: f32[M, K])", "(X: f32[M, K], Z: f32[M / 2])"), 1, 43, "dynamic dim `M` cannot be used in a dim expression"),
])
def test_compile_time_uses_are_located_errors(tmp_path, edit, line, col, message):
    text = ROWSUM.replace(*edit)
    assert text != ROWSUM
    with pytest.raises(TkError) as info:
        driver.optimize(driver.frontend(_write(tmp_path, text)), "tilelang")
    d = info.value.diagnostics[0]
    assert message in d.message, d.message
    assert (d.loc.line, d.loc.col) == (line, col), d.render()


def test_cuda_compiles_one_kernel_for_every_m(tmp_path):
    """Through `cuda` a dynamic dim is a kernel argument (tests/test_cuda_dynamic_emulated.py runs
    such kernels): compiles at two test values of M give one source, with no constant M in it."""
    from tkc.cache import Cache

    cache = Cache(str(tmp_path))
    a = driver.compile_file(MISS, "cuda", {}, cache, dynamic=("M",))
    b = driver.compile_file(MISS, "cuda", {"M": 333}, cache, dynamic=("M",))
    body = lambda s: s.split("// ---- kernel ----")[1]  # noqa: E731
    assert body(a.source) == body(b.source)
    assert "constexpr int M" not in a.source and ", const int M, const int tk_pdl)" in a.source


def test_bad_dynamic_keyword(tmp_path):
    with pytest.raises(TkError, match="names `Q`, which is not a tensor dim"):
        tkc.compile(MISS, target="interp", dynamic=("Q",))

"""tkc.compile / tkc.runtime.Kernel: binding dims from tensors, specialization, launch errors.
Results are checked against torch in float64 on the same inputs, on every input distribution,
within the derived tolerance (tkc/oracle.py)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

import tkc
from dsl.diagnostics import TkError
from tkc import oracle
from tkc.driver import frontend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISS_V3 = os.path.join(ROOT, "examples", "miss_v3.tk")

SHARED_DIM = """\
kernel addk<BM=16>(A: f16[M, K], B: f16[M, K]) -> (C: f32[M, K])
    where M = 32, K = 8
    reference "A + B"
{
    grid (cdiv(M, BM)) as (m)
    C[m*BM : +BM, :] = cast(A[m*BM : +BM, :], f32) + cast(B[m*BM : +BM, :], f32)
}
"""


def rand(*shape, dtype=torch.float16, seed=0):
    """A tensor for the tests of argument errors (its values never matter)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def check_outputs(module, inputs, results, where: str) -> None:
    """Each output against torch in float64 on `inputs` within its derived tolerance."""
    refs = oracle.reference(module, inputs)
    budgets = oracle.error_budgets(module)
    assert len(refs) == len(results) == len(oracle.outputs(module))
    for (name, dtype), out, ref in zip(oracle.outputs(module), results, refs):
        assert out.shape == ref.shape and ref.abs().max().item() > 0
        err, tol = oracle.rel_error(out, ref), budgets[name].tol(dtype)
        assert err <= tol, f"{where}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"


def test_kernel_binds_dims_and_specializes_per_shape(tmp_path):
    k = tkc.compile(MISS_V3, target="tilelang-cpu", cache_dir=str(tmp_path), BM=16, BN=32)
    assert [p.name for p in k.inputs] == ["A", "B"] and [p.name for p in k.outputs] == ["C"]
    for m, kk, n, r in ((40, 64, 48, 16), (17, 96, 33, 32)):
        module = frontend(MISS_V3, {"M": m, "K": kk, "N": n, "R": r, "BM": 16, "BN": 32})
        for seed, dist in enumerate(oracle.DISTRIBUTIONS):
            a, b = oracle.random_inputs(module, m + seed, "cpu", dist)
            assert k.bind_dims([a, b]) == {"M": m, "K": kk, "R": r, "N": n}
            out = k(a, b)
            assert out.shape == (m, n) and out.dtype == torch.float16
            check_outputs(module, [a, b], [out], f"M={m} K={kk} N={n} R={r} {dist}")
    assert len(k._built) == 2


@pytest.mark.parametrize("args,message", [
    (lambda: [rand(32, 64)], "`miss_v3` takes 2 inputs, got 1"),
    (lambda: [rand(32, 64, dtype=torch.float32), rand(16, 8)], "`A` is f16, but the tensor is torch.float32"),
    (lambda: [rand(32, 64, 1), rand(16, 8)], "`A` has rank 2, but the tensor has shape (32, 64, 1)"),
])
def test_bad_arguments_are_user_errors(tmp_path, args, message):
    k = tkc.compile(MISS_V3, target="tilelang-cpu", cache_dir=str(tmp_path))
    with pytest.raises(TkError) as info:
        k(*args())
    (d,) = info.value.diagnostics
    assert d.message == message and d.loc.file == MISS_V3 and d.loc.line > 0


def test_conflicting_dims(tmp_path):
    path = tmp_path / "addk.tk"
    path.write_text(SHARED_DIM)
    k = tkc.compile(str(path), target="tilelang-cpu", cache_dir=str(tmp_path / "c"))
    with pytest.raises(TkError) as info:
        k(rand(32, 8), rand(32, 9))
    assert info.value.diagnostics[0].message == "dim `K` is 8 in one input and 9 in `B`"
    module = frontend(str(path), {"M": 20, "K": 8})
    for seed, dist in enumerate(oracle.DISTRIBUTIONS):
        a, b = oracle.random_inputs(module, seed, "cpu", dist)
        out = k(a, b)
        assert out.dtype == torch.float32 and out.shape == (20, 8)
        check_outputs(module, [a, b], [out], dist)


def test_requires_checked_on_the_tensors_shapes(tmp_path):
    k = tkc.compile(MISS_V3, target="tilelang-cpu", cache_dir=str(tmp_path))
    with pytest.raises(TkError) as info:
        k(rand(32, 100), rand(64, 16))
    assert info.value.diagnostics[0].message == "requirement `K % R == 0` does not hold"


@pytest.mark.parametrize("target", ["tir", "cuda-ish"])
def test_only_launchable_targets(target):
    with pytest.raises(TkError) as info:
        tkc.compile(MISS_V3, target=target)
    assert f"target `{target}` cannot be launched" in info.value.diagnostics[0].message


@pytest.mark.parametrize("consts, message, note", [
    ({"M": 64}, "`M` is a problem dim of `miss_v3`, not a schedule constant",
     "dims come from the input tensors' shapes; pass tensors of the size you want"),
    ({"QQ": 3}, "`miss_v3` has no schedule constant `QQ`", "its schedule constants: BM, BN, stages, threads"),
    ({"BM": "32"}, "schedule constant `BM` must be an int, got str '32'", None),
    ({"BM": True}, "schedule constant `BM` must be an int, got bool True", None),
    ({"BM": np.float64(32)}, "schedule constant `BM` must be an int, got float64 np.float64(32.0)", None),
])
def test_compile_checks_its_keywords_when_called(consts, message, note):
    with pytest.raises(TkError) as info:
        tkc.compile(MISS_V3, target="interp", **consts)
    (d,) = info.value.diagnostics
    assert d.message == message and d.loc.file == MISS_V3
    assert d.notes == ([note] if note else [])


def test_a_numpy_integer_constant_is_an_int(tmp_path):
    """A schedule constant given as a numpy integer (from a sweep over np.arange) compiles as the
    Python int: the same kernel, the same cache entry."""
    k = tkc.compile(MISS_V3, target="interp", BM=np.int64(16), BN=np.int32(32))
    assert k.consts == {"BM": 16, "BN": 32} and all(type(v) is int for v in k.consts.values())
    a, b = torch.randn(20, 48).half(), torch.randn(16, 40).half()
    assert torch.equal(k(a, b), tkc.compile(MISS_V3, target="interp", BM=16, BN=32)(a, b))


def test_numpy_arrays_are_converted_and_other_arguments_refused(tmp_path):
    k = tkc.compile(MISS_V3, target="tilelang-cpu", cache_dir=str(tmp_path), BM=16, BN=32)
    gen = np.random.default_rng(0)
    a = gen.standard_normal((20, 48)).astype(np.float16)
    b = gen.standard_normal((16, 40)).astype(np.float16)
    out = k(a, b)
    ref = k(torch.from_numpy(a), torch.from_numpy(b))
    assert isinstance(out, torch.Tensor) and torch.equal(out, ref)
    with pytest.raises(TypeError, match=r"argument 1 of `miss_v3` is a list; pass a torch tensor or a numpy array"):
        k(a, [[1.0]])


def test_the_cuda_target_without_cupy_is_a_user_error(tmp_path, monkeypatch, request):
    import importlib.util

    from tkc import cuda_runtime, driver
    from tkc.cache import Cache

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    from tkc import cuda_runtime

    cuda_runtime._cupy_available.cache_clear()  # looked up once per process
    request.addfinalizer(cuda_runtime._cupy_available.cache_clear)
    artifact = driver.compile_file(MISS_V3, "cuda", {}, Cache(str(tmp_path)))
    launch = cuda_runtime.build(artifact)  # builds without CuPy; launching needs it
    with pytest.raises(TkError) as info:
        launch()
    (d,) = info.value.diagnostics
    assert d.loc.file == MISS_V3 and d.loc.line == 6
    assert d.message == "target `cuda` launches kernels through CuPy, which is not installed"
    assert d.notes == ['install tkc\'s GPU extra: `pip install -e ".[gpu]"` (cupy-cuda13x), or use `--target tilelang`']


def test_the_cuda_launch_takes_torchs_raw_stream_or_the_public_one():
    """tkc/cuda_runtime.py asks torch for the current stream's raw handle where torch has the query
    (no Stream object per launch), else for the public Stream object's handle."""
    import types

    from tkc.cuda_runtime import _raw_stream

    calls = []
    public = types.SimpleNamespace(current_stream=lambda i: calls.append(("public", i)) or types.SimpleNamespace(cuda_stream=77))
    raw = types.SimpleNamespace(_C=types.SimpleNamespace(_cuda_getCurrentRawStream=lambda i: calls.append(("raw", i)) or 55),
                                cuda=public)
    assert _raw_stream(raw, 1) == 55 and calls == [("raw", 1)]
    calls.clear()
    old = types.SimpleNamespace(_C=types.SimpleNamespace(), cuda=public)
    assert _raw_stream(old, 2) == 77 and calls == [("public", 2)]


def test_swizzle_keeps_terms_that_are_multiples_of_32_outside_the_xor():
    """codegen/cuda_access.py: a multiple of 32 added to a row index commutes with an XOR below 32,
    so such terms move out; anything else (other multiples, products of sums) stays inside."""
    from codegen.cuda_access import _split_multiples

    assert _split_multiples("wtr * 64 + wi * 32 + ltr * 8 + 0", 32) == (["wtr * 64", "wi * 32"], "ltr * 8")
    assert _split_multiples("wtr * 64 + wi * 16 + ltr * 4", 32) == (["wtr * 64"], "wi * 16 + ltr * 4")
    assert _split_multiples("(a + b) * 64 + c", 32) == ([], "(a + b) * 64 + c")
    assert _split_multiples("row", 32) == ([], "row")
    assert _split_multiples("128 + x", 32) == (["128"], "x")
    for i in range(256):  # the identity the split relies on
        for s in range(32):
            for a in range(4):
                assert (i + 32 * a) ^ s == (i ^ s) + 32 * a


def test_dim_expressions_bind_and_check_extents():
    path = os.path.join(ROOT, "tests", "programs", "dim_exprs.tk")
    k = tkc.compile(path, target="interp")
    x, s = torch.randn(20, 30), torch.randn(20, 15)  # H = 15 from S: X needs 2 * 15 columns
    y, z = k(x, s)
    assert z.shape == (20, 15 // 2 + 1)
    torch.testing.assert_close(y, x[:, :15] + x[:, 15:] * s, rtol=1e-6, atol=1e-6)
    with pytest.raises(TkError) as info:
        k(torch.randn(20, 31), s)
    (d,) = info.value.diagnostics
    assert d.message == "`X` needs extent 30 here (from its dim expression), got 31"
    assert (d.loc.file, d.loc.line) == (path, 3)


ATTENTION = os.path.join(ROOT, "examples", "attention.tk")
EMBEDDING = os.path.join(ROOT, "examples", "embedding.tk")


@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
def test_runtime_scalar_one_compile_serves_every_position(tmp_path, target):
    """`pos: i32` is passed per call and never specialized: positions 0, a middle one and the
    largest `requires pos < S` allows run on one compiled kernel, each matching torch."""
    kernel = tkc.compile(ATTENTION, target=target, cache_dir=str(tmp_path), BT=16)
    module = frontend(ATTENTION, {"H": 2, "HD": 32, "S": 40, "KVD": 64})
    for pos in (0, 17, 39):
        inputs = oracle.random_inputs(module, 3, "cpu", "normal", {"pos": pos})
        assert inputs[-1] == pos
        check_outputs(module, inputs, [kernel(*inputs)], f"{target} pos={pos}")
    assert len(kernel._built) == 1


@pytest.mark.parametrize("pos, message", [
    (40, "requirement `pos < 40` does not hold at this call"),
    (-1, "runtime scalar `pos` is -1; it must be in [0, 2^31)"),
    (1.5, "runtime scalar `pos` takes a Python int or a one-element int32 tensor, got float 1.5"),
    (True, "runtime scalar `pos` takes a Python int or a one-element int32 tensor, got bool True"),
])
@pytest.mark.parametrize("target", ["interp", "tilelang-cpu"])
def test_runtime_scalar_errors_at_the_call(tmp_path, pos, message, target):
    """A bad position is a located error, also after a good call made the signature take the
    int-scalar path (Kernel._scalar, tilelang-cpu)."""
    kernel = tkc.compile(ATTENTION, target=target, cache_dir=str(tmp_path), BT=16)
    q, kc = rand(2, 32, dtype=torch.float32), rand(40, 64)
    kernel(q, kc, kc, 39)
    with pytest.raises(TkError) as info:
        kernel(q, kc, kc, pos)
    assert message in info.value.render()
    assert info.value.render().startswith(ATTENTION + ":")


def test_int_scalar_calls_take_the_short_path_and_keep_their_checks(tmp_path):
    """A kernel with a runtime scalar, called again with a Python int at a seen signature, takes
    the int-scalar path (Kernel._scalar): each position's result matches float64 torch, the
    `requires pos < S` and the scalar's range are still checked per call (a bad one never
    launches), and a position passed as a tensor is its own specialization."""
    kernel = tkc.compile(ATTENTION, target="tilelang-cpu", cache_dir=str(tmp_path), BT=16)
    module = frontend(ATTENTION, {"H": 2, "HD": 32, "S": 40, "KVD": 64})
    inputs = oracle.random_inputs(module, 5, "cpu", "normal", {"pos": 7})
    check_outputs(module, inputs, [kernel(*inputs)], "first call")
    assert len(kernel._scalar) == 1
    key = next(iter(kernel._scalar))
    jit, *rest = kernel._scalar[key]
    launched = []
    kernel._scalar[key] = (lambda *a: launched.append(a[-1]) or jit(*a), *rest)
    for pos in (0, 23, 39):
        check_outputs(module, [*inputs[:-1], pos], [kernel(*inputs[:-1], pos)], f"pos={pos}")
    assert launched == [0, 23, 39]
    for bad, message in ((40, "requirement `pos < 40` does not hold"), (-3, "it must be in [0, 2^31)"),
                         (2**31, "it must be in [0, 2^31)")):
        with pytest.raises(TkError, match=re.escape(message)):
            kernel(*inputs[:-1], bad)
    assert launched == [0, 23, 39]
    check_outputs(module, [*inputs[:-1], 11], [kernel(*inputs[:-1], torch.tensor([11], dtype=torch.int32))],
                  "pos as a tensor")
    assert launched == [0, 23, 39] and len(kernel._scalar) == 1


_NAMES = ("pos", "n")


def _exprs_strategy():
    from hypothesis import strategies as st

    from dsl import exprs

    leaves = st.one_of(st.integers(0, 40).map(exprs.Num), st.sampled_from(_NAMES).map(exprs.Sym))
    ops = ("+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=")
    return st.recursive(leaves, lambda kids: st.one_of(
        st.builds(exprs.Bin, st.sampled_from(ops), kids, kids),
        st.builds(lambda f, a, b: exprs.Call(f, (a, b)), st.sampled_from(("cdiv", "min", "max")), kids, kids)),
        max_leaves=8)


def test_int_scalar_checks_agree_with_the_expression_evaluator():
    """runtime._holds (the `requires` clauses written once as Python) is true exactly where
    dsl.exprs.evaluate finds every clause nonzero, and false where a clause divides by zero."""
    from hypothesis import given
    from hypothesis import strategies as st

    from dsl import exprs
    from tkc.runtime import _holds

    @given(st.lists(_exprs_strategy(), min_size=1, max_size=3), st.integers(0, 50), st.integers(0, 50))
    def check(conds, pos, n):
        try:
            want = all(exprs.evaluate(c, {"pos": pos, "n": n}) for c in conds)
        except exprs.ExprError:  # division by zero: the full path reports it
            want = False
        assert _holds(conds, list(_NAMES))(pos, n) == want

    check()


def test_index_tensor_values_are_checked_at_launch(tmp_path):
    """A token id outside the embedding table is a user error, never a guarded (zero) row."""
    kernel = tkc.compile(EMBEDDING, target="tilelang-cpu", cache_dir=str(tmp_path), BN=32)
    table = rand(50, 72, dtype=torch.float32)
    ok = kernel(table, torch.tensor([0, 49, 7], dtype=torch.int32))
    assert torch.equal(ok, table[[0, 49, 7]])
    for bad in (50, -1):
        with pytest.raises(TkError) as info:
            kernel(table, torch.tensor([0, bad, 7], dtype=torch.int32))
        assert f"index tensor `ids` holds {bad}, outside [0, 50)" in info.value.render()
        # located at the gather that reads it, as the GPU targets' in-kernel check
        assert info.value.render().startswith(f"{EMBEDDING}:9:29: error:")


def test_plain_kernels_take_the_short_path_and_keep_their_checks(tmp_path):
    """A kernel of dense tensors only, called again at a seen signature, skips the per-call
    bookkeeping (Kernel._plain) and still computes the right values; a call at another dtype,
    rank or a numpy array goes through the full path and its checks."""
    path = tmp_path / "addk.tk"
    path.write_text(SHARED_DIM)
    kernel = tkc.compile(str(path), target="tilelang-cpu", cache_dir=str(tmp_path / "c"))
    a, b = rand(32, 8, seed=1), rand(32, 8, seed=2)
    want = a.double() + b.double()
    first = kernel(a, b)
    assert len(kernel._plain) == 1
    calls = []
    jit, outs, device = next(iter(kernel._plain.values()))
    kernel._plain[next(iter(kernel._plain))] = (lambda *t: calls.append(t) or jit(*t), outs, device)
    again = kernel(a, b.t().contiguous().t())  # non-contiguous: copied before the launch
    assert len(calls) == 1 and torch.equal(first, again)
    torch.testing.assert_close(again.double(), want, rtol=1e-3, atol=1e-3)
    with pytest.raises(TkError, match="is f16, but the tensor is torch.float32"):
        kernel(a.float(), b)
    with pytest.raises(TkError, match="has rank 2"):
        kernel(a[0], b)
    assert torch.equal(kernel(a.numpy(), b), first) and len(calls) == 1


def test_compile_takes_a_path_like_and_refuses_an_unusable_cache(tmp_path):
    """tkc.compile accepts an os.PathLike (it failed at the first call before), and a cache_dir
    that is a file or cannot be created is a TkError at compile time, not an OSError later."""
    import pathlib

    kernel = tkc.compile(pathlib.Path(EMBEDDING), target="interp", cache_dir=str(tmp_path / "c"), BN=32)
    table = rand(50, 72, dtype=torch.float32)
    assert torch.equal(kernel(table, torch.tensor([3, 1], dtype=torch.int32)), table[[3, 1]])
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for cache_dir, message in ((a_file, "it is a file, not a folder"), (a_file / "below", "as the compile cache")):
        with pytest.raises(TkError) as info:
            tkc.compile(EMBEDDING, target="tilelang-cpu", cache_dir=str(cache_dir))
        assert message in info.value.render()
    with pytest.raises(TkError, match="must be a str or os.PathLike, got int"):
        tkc.compile(3, target="interp")

"""The masked (sampled) tile gemm of SDDMM (issue 12, seed 003): a sparse pattern operand
(`S: csr[M, N, NNZ]` / `coo[...]`), a grid over the tiles of S that hold an entry, and
`P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]` (dsl/lower_sparse.py, `tile.sampled_gemm`).

Checked on the reference interpreter against torch in float64 (`torch.sparse.sampled_addmm` for
CSR, a dense gather for COO order, the dense output against the masked dense product) over
hypothesis-drawn M, N, K, entry counts (empty and full patterns included), tile shapes that do
not divide M and N, both formats and both output forms; the runtime takes the pattern from torch,
scipy and Matrix Market; misuse gets located errors. The GPU lowerings do not exist yet: the
backends say so at the op.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.io
import scipy.sparse
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tkc
from dsl.diagnostics import TkError
from dsl.parser import parse
from dsl.lower import lower
from profiles import examples
from tkc import oracle
from tkc.sparse import uniform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL = """kernel k<BM={bm}, BN={bn}>(A: {dt}[M, K], B: {dt}[K, N], S: {fmt}[M, N, NNZ]) -> (P: f32[{out}])
    where M = 40, N = 40, K = 16, NNZ = 10
{{
    grid (tiles(S, BM, BN)) as (m, n)
    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]
}}
"""


def _write(tmp_path, text: str, name: str = "k.tk") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@settings(max_examples=examples(12, 60), deadline=None)
@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 48), fill=st.floats(0.0, 1.0),
       bm=st.sampled_from([8, 16, 32]), bn=st.sampled_from([8, 16, 32]), fmt=st.sampled_from(["csr", "coo"]),
       dense=st.booleans(), dt=st.sampled_from(["f16", "bf16", "f32"]), seed=st.integers(0, 2**16))
def test_interpreter_matches_torch(tmp_path_factory, m, n, k, fill, bm, bn, fmt, dense, dt, seed):
    nnz = round(fill * m * n)
    path = _write(tmp_path_factory.mktemp("k"), KERNEL.format(bm=bm, bn=bn, fmt=fmt, dt=dt,
                                                               out="M, N" if dense else "NNZ"))
    kernel = tkc.compile(path, target="interp")
    g = torch.Generator().manual_seed(seed)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[dt]
    a = (torch.randn(m, k, generator=g) + 0.5).to(tdt)  # an offset: no cancellation to zero
    b = torch.randn(k, n, generator=g).to(tdt)
    p = uniform(m, n, nnz, seed=seed)
    if fmt == "coo":  # the values come out in the pattern's own (here shuffled) order
        perm = torch.randperm(nnz, generator=g)
        p = type(p)(m, n, "coo", p.rows[perm], p.cols[perm])
    out = kernel(a, b, p)
    full = a.double() @ b.double()
    r, c = p.rows.long(), p.cols.long()
    if dense:
        ref = torch.zeros(m, n, dtype=torch.float64)
        ref[r, c] = full[r, c]
        assert out.shape == (m, n)
    else:
        ref = full[r, c]
        assert out.shape == (nnz,)
    # products of inputs exact in f32; an f32 sum of K terms: K * 2^-24 relative to the sum of |terms|
    scale = (a.double().abs() @ b.double().abs()).max().item()
    err = (out.double() - ref).abs().max().item() if out.numel() else 0.0
    assert err <= 2 * (k + 1) * 2.0 ** -24 * scale


def test_csr_values_follow_sampled_addmm(tmp_path):
    path = _write(tmp_path, KERNEL.format(bm=16, bn=8, fmt="csr", dt="f16", out="NNZ"))
    a, b = torch.randn(37, 20).half(), torch.randn(20, 29).half()
    s = uniform(37, 29, 200, seed=3).to_torch(layout="csr")
    out = tkc.compile(path, target="interp")(a, b, s)
    ref = torch.sparse.sampled_addmm(s.double(), a.double(), b.double(), beta=0.0).values()
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-6)


def test_every_input_form_gives_the_same_values(tmp_path):
    path = _write(tmp_path, KERNEL.format(bm=8, bn=8, fmt="csr", dt="f32", out="NNZ"))
    kernel = tkc.compile(path, target="interp")
    a, b = torch.randn(30, 12), torch.randn(12, 25)
    p = uniform(30, 25, 120, seed=1)
    dense = np.zeros((30, 25))
    dense[p.rows.numpy(), p.cols.numpy()] = 1.0
    mtx = str(tmp_path / "s.mtx")
    scipy.io.mmwrite(mtx, scipy.sparse.coo_matrix(dense))
    forms = [p, p.to_torch(layout="csr"), scipy.sparse.csr_matrix(dense), mtx]
    outs = [kernel(a, b, f) for f in forms]
    for o in outs[1:]:
        assert torch.equal(o, outs[0])
    assert outs[0].abs().sum() > 0


def test_empty_pattern_gives_empty_values(tmp_path):
    path = _write(tmp_path, KERNEL.format(bm=8, bn=8, fmt="coo", dt="f32", out="NNZ"))
    out = tkc.compile(path, target="interp")(torch.randn(9, 4), torch.randn(4, 9), uniform(9, 9, 0))
    assert out.shape == (0,)


def test_tiles_without_entries_are_never_visited(tmp_path):
    """One entry in a 64 x 64 pattern of 8 x 8 tiles: one block runs (the grid is the tile list)."""
    from dsl import interpreter

    path = _write(tmp_path, KERNEL.format(bm=8, bn=8, fmt="csr", dt="f32", out="NNZ"))
    kernel = tkc.compile(path, target="interp")
    visited = []
    real = interpreter._Block.op_sampled_gemm

    def spy(self, op):
        visited.append((self.scope["m"], self.scope["n"]))
        return real(self, op)

    interpreter._Block.op_sampled_gemm = spy
    try:
        p = type(uniform(1, 1, 1))(64, 64, "csr", torch.tensor([50], dtype=torch.int32),
                                   torch.tensor([13], dtype=torch.int32))
        out = kernel(torch.randn(64, 4), torch.randn(4, 64), p)
    finally:
        interpreter._Block.op_sampled_gemm = real
    assert visited == [(6, 1)]
    assert out.shape == (1,)


@pytest.mark.parametrize("name", ["sddmm", "sddmm_wmma_16x16x16", "sddmm_wmma_32x8x16", "sddmm_wmma_8x32x16"])
def test_examples_match_their_reference(name):
    """Each example's own `reference` (sampled_addmm, the dense gather) at small dims."""
    path = os.path.join(ROOT, "examples", f"{name}.tk")
    dims = {"M": 45, "N": 70, "K": 32, "NNZ": 400}
    from tkc import driver

    module = driver.frontend(path, dims)
    inputs = oracle.random_inputs(module, 0, "cpu", "offset")
    out = tkc.compile(path, target="interp")(*inputs)
    ref, = oracle.reference(module, inputs)
    tol = oracle.error_budgets(module)["P"].tol("f32")
    assert oracle.rel_error(out, ref) <= tol
    assert ref.abs().max() > 0


def _lower_error(tmp_path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(TkError) as exc:
        lower(parse(text, path), text)
    return exc.value.render()


HEAD = "kernel k<BM=16, BN=16>(A: f16[M, K], B: f16[K, N], S: csr[M, N, NNZ]{extra}) -> (P: f32[{out}])\n" \
       "    where M = 40, N = 40, K = 16, NNZ = 10\n{{\n"


@pytest.mark.parametrize("body, out, extra, message", [
    ("    grid (cdiv(M, BM), cdiv(N, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "NNZ", "", "`P[S] = ...` needs a grid over the tiles of `S`"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, 0 : 8] @ B[0 : 8, n*BN : +BN]\n",
     "NNZ", "", "the left operand is [16, 8]; it must be the tile's rows and all of K: [16, 16]"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[n*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "NNZ", "", "`A` must be sliced at the tile's rows: `m*BM`"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :] @ B[:, m*BN : +BN]\n",
     "NNZ", "", "`B` must be sliced at the tile's columns: `n*BN`"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :]\n",
     "NNZ", "", "a store into `P[S]` takes a product of two global slices"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "M", "", "`P` is f32[40]; a sampled gemm writes a float tensor of the pattern's entries [10] or of its shape [40, 40]"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    x = zeros(f32[BM, BN])\n    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "NNZ", "", "the body of a `tiles` grid is one sampled gemm store"),
    ("    grid (tiles(S, BM, BN)) as (t)\n    P[S] = A[t*BM : +BM, :] @ B[:, t*BN : +BN]\n",
     "NNZ", "", "a `tiles` grid names 2 indices (the tile's row and column), got 1"),
    ("    grid (tiles(A, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "NNZ", "", "`A` is not a sparse pattern"),
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "NNZ", ", T: csr[M, N]", "sparse pattern `T` has 2 dims; a `csr` pattern has 3"),
])
def test_misuse_is_a_located_error(tmp_path, body, out, extra, message):
    text = HEAD.format(out=out, extra=extra) + body + "}\n"
    rendered = _lower_error(tmp_path, text)
    assert "Traceback" not in rendered
    head = rendered.splitlines()[0]
    assert f"error: {message}" in head, rendered
    assert head.startswith(str(tmp_path / "k.tk") + ":"), rendered
    assert head.split(":")[1] != "0"


def test_a_pattern_cannot_be_an_output(tmp_path):
    text = ("kernel k(A: f16[M, K]) -> (S: csr[M, K, NNZ])\n    where M = 4, K = 4, NNZ = 2\n{\n"
            "    grid (M) as (m)\n}\n")
    assert "output `S` is a sparse pattern; patterns are inputs" in _lower_error(tmp_path, text)


def test_tir_target_says_it_cannot(tmp_path):
    from tkc import driver

    path = _write(tmp_path, KERNEL.format(bm=16, bn=16, fmt="csr", dt="f16", out="NNZ"))
    module = driver.optimize(driver.frontend(path), "tilelang")
    with pytest.raises(TkError) as exc:
        driver.emit(module, "tir")
    head = exc.value.render().splitlines()[0]
    assert head.startswith(f"{path}:5:5: error: target `tir` cannot express the sampled gemm"), head


@pytest.mark.parametrize("bad, message", [
    (lambda p: type(p)(p.M, p.N, "csr", p.rows, p.cols.flip(0)), "not sorted"),
    (lambda p: type(p)(p.M + 3, p.N, "csr", p.rows, p.cols), "dim `M` is"),
    (lambda p: torch.zeros(3, 3), "sparse input `S`"),
])
def test_bad_patterns_are_located_at_the_parameter(tmp_path, bad, message):
    path = _write(tmp_path, KERNEL.format(bm=8, bn=8, fmt="csr", dt="f32", out="NNZ"))
    kernel = tkc.compile(path, target="interp")
    p = uniform(20, 20, 30, seed=2)
    with pytest.raises(TkError) as exc:
        kernel(torch.randn(20, 4), torch.randn(4, 20), bad(p))
    rendered = exc.value.render()
    assert message in rendered, rendered
    assert rendered.startswith(f"{path}:1:"), rendered


def test_cli_runs_and_checks_the_example(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "tkc.cli", "run", os.path.join(ROOT, "examples", "sddmm.tk"), "--check",
                        "-D", "M=300", "-D", "N=200", "-D", "NNZ=900", "-D", "K=64"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "sddmm: ran on interp (cpu)" in r.stdout and "P: max relative error" in r.stdout and ": ok" in r.stdout

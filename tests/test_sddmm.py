"""The masked (sampled) tile gemm of SDDMM (issue 12, seed 003): a sparse pattern operand
(`S: csr[M, N, NNZ]` / `coo[...]`), a grid over the tiles of S that hold an entry, and
`P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]` (dsl/lower_sparse.py, `tile.sampled_gemm`).

Checked on the reference interpreter against torch in float64 (`torch.sparse.sampled_addmm` for
CSR, a dense gather for COO order, the dense output against the masked dense product) over
hypothesis-drawn M, N, K, entry counts (empty and full patterns included), tile shapes that do
not divide M and N, both formats and both output forms; the runtime takes the pattern from torch,
scipy and Matrix Market; misuse gets located errors; the `tir` target says it cannot express it.

TileLang (codegen/tilelang_sddmm.py): the `tilelang-cpu` kernel called with the launch contract
(B transposed, tkc.sparse.DispatchPlan) at every split between tile products and dot products,
both output forms, M and N cutting the tiles and K not a multiple of 8, and through the runtime
(an empty pattern launches nothing); the GPU form of every example through TileLang's lowering
for sm_90a (no GPU needed: it runs on one in tests/gpu); what it does not lower is a located error.
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
from test_cuda import needs_nvcc
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
    ("    grid (tiles(S, BM, BN)) as (m, n)\n    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n"
     "    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]\n",
     "NNZ", "", "the body of a `tiles` grid is one sampled gemm store; this is a second statement"),
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
    assert "sddmm: ran on tilelang-cpu (cpu)" in r.stdout and "P: max relative error" in r.stdout and ": ok" in r.stdout


# ---- `tkc run --pattern NAME=SOURCE`: a Matrix Market file, R-MAT or uniform --------------------
def _run_cli(tmp_path, capsys, *argv):
    from tkc import cli

    try:
        rc = cli.main(["--cache-dir", str(tmp_path / "cache"), "run", *argv])
    except SystemExit as exc:  # argparse's usage errors (exit status 1 by tkc's parser)
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _mtx(tmp_path, M=37, N=29, density=0.09, seed=3, name="s.mtx"):
    """A Matrix Market file of a random M x N pattern whose entries are listed out of order."""
    m = scipy.sparse.random(M, N, density=density, format="coo", random_state=seed)
    perm = np.random.default_rng(seed).permutation(m.nnz)
    path = tmp_path / name
    scipy.io.mmwrite(str(path), scipy.sparse.coo_matrix((m.data[perm] + 1, (m.row[perm], m.col[perm])), shape=m.shape))
    return str(path), m


def test_cli_takes_the_pattern_from_a_matrix_market_file(tmp_path, capsys):
    """The file's shape and entry count set M, N and NNZ, and its entries are the pattern the kernel
    and the reference see (interp and tilelang-cpu, csr values and a coo kernel's dense P)."""
    path, m = _mtx(tmp_path)
    example = os.path.join(ROOT, "examples", "sddmm.tk")
    for target in ("interp", "tilelang-cpu"):
        rc, out, err = _run_cli(tmp_path, capsys, example, "--target", target, "--check", "--pattern", f"S={path}",
                                "-D", "K=24", "-D", "BM=16", "-D", "BN=16")
        assert rc == 0, err
        assert f"K=24, M=37, N=29, NNZ={m.nnz}," in out and f"S: 37 x 29 pattern, {m.nnz} entries (from {path})" in out
        assert "P: max relative error" in out and ": ok" in out
    coo = tmp_path / "coo.tk"
    coo.write_text('''kernel sd<BM=8, BN=16>(A: f32[M, K], B: f32[K, N], S: coo[M, N, NNZ]) -> (P: f32[M, N])
    where M = 5, N = 5, K = 8, NNZ = 3
    reference "torch.sparse.sampled_addmm(S.to_sparse_csr(), A, B, beta=0.0).to_dense()"
{
    grid (tiles(S, BM, BN)) as (m, n)
    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]
}
''')
    rc, out, err = _run_cli(tmp_path, capsys, str(coo), "--target", "interp", "--check", "--pattern", f"S={path}")
    assert rc == 0, err
    assert f"M=37, N=29, NNZ={m.nnz}" in out and ": ok" in out


def test_pattern_sources_give_the_file_s_entries_and_skewed_rmat(tmp_path):
    """random_inputs uses the file's entries themselves (not a random pattern of its size), and
    `rmat` a power-law pattern: its busiest row holds far more entries than a uniform one's."""
    from tkc import check, driver

    path, m = _mtx(tmp_path)
    example = os.path.join(ROOT, "examples", "sddmm.tk")
    module = driver.frontend(example, {})
    sources, bound = check.pattern_sources(module, {"S": path}, {})
    assert bound == {"M": 37, "N": 29, "NNZ": m.nnz}
    module = driver.frontend(example, bound)
    _, _, pattern = oracle.random_inputs(module, 0, "cpu", "normal", {}, sources)
    want = sorted(zip(m.row.tolist(), m.col.tolist()))
    assert list(zip(pattern.rows.tolist(), pattern.cols.tolist())) == want
    dims = {"M": 512, "N": 512, "NNZ": 4000, "K": 8}
    module = driver.frontend(example, dims)
    busiest = {}
    for kind in ("uniform", "rmat"):
        _, _, p = oracle.random_inputs(module, 0, "cpu", "normal", {}, {"S": kind})
        assert (p.M, p.N, p.nnz) == (512, 512, 4000)
        busiest[kind] = int(torch.bincount(p.rows.long(), minlength=512).max())
    assert busiest["rmat"] > 3 * busiest["uniform"], busiest


def test_a_pattern_file_must_fit_dims_it_does_not_set(tmp_path, capsys):
    """A literal dim (30 columns) is checked against the file, located at the file."""
    path, _ = _mtx(tmp_path, N=29)
    k = tmp_path / "lit.tk"
    k.write_text('''kernel sd<BM=16, BN=16>(A: f16[M, K], B: f16[K, 30], S: csr[M, 30, NNZ]) -> (P: f32[NNZ])
    where M = 40, K = 16, NNZ = 50
    reference "torch.sparse.sampled_addmm(S, A, B, beta=0.0).values()"
{
    grid (tiles(S, BM, BN)) as (m, n)
    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]
}
''')
    rc, _, err = _run_cli(tmp_path, capsys, str(k), "--target", "interp", "--pattern", f"S={path}")
    assert rc == 1 and err.startswith(f"{path}: error: `S` needs 30 columns (`30`), and the file has 29"), err
    path30, _ = _mtx(tmp_path, N=30, name="s30.mtx")
    rc, out, err = _run_cli(tmp_path, capsys, str(k), "--target", "interp", "--check", "--pattern", f"S={path30}")
    assert rc == 0 and ": ok" in out, err


@pytest.mark.parametrize("argv, message", [
    (["--pattern", "X=rmat"], "<command line>:1:1: error: `--pattern X=...`: `sddmm` has no sparse input `X`"),
    (["--pattern", "S=bogus"], "error: `--pattern S=bogus`: not `uniform`, `rmat` or an existing file"),
    (["--pattern", "S=missing.mtx"], "missing.mtx: error: pattern of `S`: cannot open"),
    (["--pattern", "S=BAD"], "BAD: error: pattern of `S`: `BAD` is not a valid Matrix Market file"),
    (["--pattern", "S=FILE", "-D", "M=38"], "error: `-D M=38` disagrees with `FILE`, which has 37 rows"),
    (["--pattern", "S=rmat", "--pattern", "S=uniform"], "error: `--pattern S=...` is given more than once"),
    (["--pattern", "S"], "error: argument --pattern: expected NAME=SOURCE"),
    (["--pattern", "S=rmat", "-D", "M=8", "-D", "N=8", "-D", "NNZ=40"],
     "error: cannot draw an R-MAT pattern for `S`: `nnz` = 40 is 62% of the 8 x 8 positions"),
])
def test_bad_pattern_sources_are_user_errors(tmp_path, capsys, argv, message):
    path, _ = _mtx(tmp_path)
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n")
    subst = {"FILE": path, "BAD": str(bad)}
    argv = [a.replace("S=FILE", f"S={path}").replace("S=BAD", f"S={bad}") for a in argv]
    message = message.replace("FILE", subst["FILE"]).replace("BAD", subst["BAD"])
    rc, _, err = _run_cli(tmp_path, capsys, os.path.join(ROOT, "examples", "sddmm.tk"), "--target", "interp", *argv)
    assert rc == 1 and message in err, err
    assert "internal compiler error" not in err and "Traceback" not in err


# ---- TileLang (codegen/tilelang_sddmm.py): the kernel on the C target, the GPU form lowered -------

# (format, output, dtype, BM, BN, dims): M and N cut the tiles; K is not a multiple of 8
TL_CASES = {"values": ("csr", "NNZ", "f16", 16, 8, {"M": 45, "N": 37, "K": 37, "NNZ": 300}),
            "dense": ("coo", "M, N", "f32", 8, 16, {"M": 37, "N": 45, "K": 21, "NNZ": 250})}


@pytest.fixture(scope="module")
def c_kernels(tmp_path_factory):
    """(final IR, TileLang C-target kernel) per TL_CASES form, compiled once for the module as
    tkc/runtime.py `build` does (a TileLang C compile takes seconds)."""
    import tilelang

    from codegen.tir import load_prim_func
    from tkc import driver

    built = {}

    def get(form: str):
        if form not in built:
            fmt, out, dt, bm, bn, dims = TL_CASES[form]
            path = _write(tmp_path_factory.mktemp("tl"), KERNEL.format(bm=bm, bn=bn, fmt=fmt, dt=dt, out=out))
            module = driver.optimize(driver.frontend(path, dims), "tilelang-cpu")
            artifact = driver.emit(module, "tilelang-cpu")
            func = load_prim_func(artifact.source_path, f"tkc_test_sddmm_{artifact.key[:16]}")
            built[form] = (module, tilelang.compile(func, target="c", compile_flags=["-O2"]))
        return built[form]

    return get


@pytest.mark.parametrize("split", ["tiles", "mixed", "dots"])
@pytest.mark.parametrize("form", ["values", "dense"])
def test_tilelang_cpu_kernel_computes_every_entry(c_kernels, form, split):
    """The generated kernel called with the launch contract (B transposed and the DispatchPlan
    after P) at three splits: every tile on the tile path (dot_below 0), every entry a dot
    product, and both. The path a split leaves unused gets NaN operands (Bt or B): it must not
    be read. Values start as NaN, so an entry left unwritten fails; dense P starts as zeros."""
    from tkc.sparse import dispatch_plan, tile_lists

    fmt, _, dt, bm, bn, dims = TL_CASES[form]
    module, kernel = c_kernels(form)
    m, n, k, nnz = dims["M"], dims["N"], dims["K"], dims["NNZ"]
    g = torch.Generator().manual_seed(7)
    tdt = {"f16": torch.float16, "f32": torch.float32}[dt]
    a = (torch.randn(m, k, generator=g) + 0.5).to(tdt)  # an offset: no entry's product cancels to zero
    b = (torch.randn(k, n, generator=g) + 0.5).to(tdt)
    p = uniform(m, n, nnz, seed=11)
    if fmt == "coo":  # values in the pattern's own (shuffled) order
        perm = torch.randperm(nnz, generator=g)
        p = type(p)(m, n, "coo", p.rows[perm], p.cols[perm])
    tl = tile_lists(p, bm, bn)
    counts = tl.tile_ptr[1:] - tl.tile_ptr[:-1]
    dot_below = {"tiles": 0, "mixed": int(counts.max()), "dots": 10**9}[split]
    plan = dispatch_plan(p, bm, bn, dot_below)
    assert (plan.n_tc > 0) == (split != "dots") and (plan.n_dot > 0) == (split != "tiles")
    bt = b.t().contiguous()
    if split == "tiles":
        bt = torch.full_like(bt, float("nan"))
    if split == "dots":
        b = torch.full_like(b, float("nan"))
    r, c = p.rows.long(), p.cols.long()
    full = a.double() @ bt.double().t() if split == "dots" else a.double() @ b.double()
    if form == "values":
        out, ref = torch.full((nnz,), float("nan")), full[r, c]
    else:
        out, ref = torch.zeros(m, n), torch.zeros(m, n, dtype=torch.float64)
        ref[r, c] = full[r, c]
    kernel(a, b, p.rows, p.cols, out, bt, *plan.tensors())
    tol = oracle.error_budgets(module)["P"].tol("f32")
    assert oracle.rel_error(out, ref) <= tol


def test_tilelang_cpu_runs_through_the_runtime(tmp_path):
    """tkc.compile's kernel passes the launch data itself (tkc/runtime.py): the pass's split, every
    tile on the tile path and every entry a dot product agree with torch; an empty pattern
    launches nothing and gives empty values."""
    path = _write(tmp_path, KERNEL.format(bm=16, bn=16, fmt="csr", dt="f16", out="NNZ"))
    kernel = tkc.compile(path, target="tilelang-cpu")
    a, b = torch.randn(50, 19).half() + 0.5, torch.randn(19, 41).half()
    p = uniform(50, 41, 400, seed=5)
    ref = (a.double() @ b.double())[p.rows.long(), p.cols.long()]
    for dot_below in (None, 0, 10**9):
        kernel.dot_below = dot_below
        out = kernel(a, b, p)
        assert (out.double() - ref).abs().max() <= 2 * 20 * 2.0 ** -24 * (a.double().abs() @ b.double().abs()).max()
    assert kernel(a, b, uniform(50, 41, 0)).shape == (0,)
    for bad, error in ((-1, ValueError), (2.5, TypeError), ("0", TypeError), (True, TypeError)):
        with pytest.raises(error, match="`dot_below` is"):
            kernel.dot_below = bad
    assert kernel.dot_below == 10**9  # unchanged by the refused values
    kernel.dot_below = np.int64(0)
    assert kernel.dot_below == 0 and type(kernel.dot_below) is int


@pytest.mark.parametrize("out", ["NNZ", "M, N"])
def test_calls_on_a_seen_pattern_take_the_short_path_and_stay_right(tmp_path, monkeypatch, out):
    """A second call with the same pattern object and dense signature skips the checks and the
    plan lookup (Kernel._sampled_call, its record in the pattern's memo); it must still compute
    each call's own A and B, take B as a transposed view, follow a changed `dot_below`, and not
    serve another pattern object of the same shape (a dense P zero off the pattern each time)."""
    path = _write(tmp_path, KERNEL.format(bm=16, bn=16, fmt="csr", dt="f16", out=out))
    kernel = tkc.compile(path, target="tilelang-cpu")
    short = []
    real = type(kernel)._sampled_call
    monkeypatch.setattr(type(kernel), "_sampled_call", lambda self, *a: short.append(1) or real(self, *a))
    g = torch.Generator().manual_seed(3)

    def check(p, a, b):
        got = kernel(a, b, p)
        full = a.double() @ b.double()
        r, c = p.rows.long(), p.cols.long()
        if out == "NNZ":
            want = full[r, c]
        else:
            want = torch.zeros(50, 41, dtype=torch.float64)
            want[r, c] = full[r, c]
        bound = 2 * 20 * 2.0 ** -24 * (a.double().abs() @ b.double().abs()).max()
        assert (got.double() - want).abs().max() <= bound

    p, q = uniform(50, 41, 400, seed=5), uniform(50, 41, 400, seed=6)
    operands = lambda: (torch.randn(50, 19, generator=g).half() + 0.5, torch.randn(19, 41, generator=g).half())  # noqa: E731
    check(p, *operands())
    assert short == []
    check(p, *operands())  # new values, the same pattern object: the short path
    assert short == [1]
    a, b = operands()
    check(p, a, b.t().contiguous().t())  # B as a transposed view: read in place
    check(q, *operands())  # another pattern object of the same shape: the full path first
    assert len(short) == 2
    check(q, *operands())
    for dot_below in (0, 10**9, 0):  # each split is its own record
        kernel.dot_below = dot_below
        check(p, *operands())
    assert len(short) == 4


@pytest.mark.parametrize("name", ["sddmm", "sddmm_wmma_16x16x16", "sddmm_wmma_32x8x16", "sddmm_wmma_8x32x16"])
def test_tilelang_gpu_form_lowers_to_tensor_cores(name):
    """No GPU here: the GPU form of each example goes through TileLang's lowering for sm_90a
    (layout inference, pipelining, CUDA codegen) and uses mma instructions; 8 x 32 is padded to
    the 16 x 32 tile T.gemm takes. The host code launches each of the two kernels only when its
    grid is not empty."""
    from tkc import driver

    module = driver.optimize(driver.frontend(os.path.join(ROOT, "examples", f"{name}.tk"),
                                             {"M": 45, "N": 70, "K": 40, "NNZ": 400}), "tilelang")
    source, cuda, host = _lower_gpu(module)
    assert "T.gemm(A_tile, B_tile, C_frag)" in source and "num_stages=2" in source
    if name == "sddmm_wmma_8x32x16":
        assert "C_frag = T.alloc_fragment((16, 32), T.float32)" in source
    assert "mma" in cuda and "dot_order" in cuda
    launches = [line.strip() for line in host.splitlines() if "call_packed(\"sddmm" in line or "if 0 <" in line]
    assert [line.split("(")[0].split(",")[0] for line in launches] == [
        "if 0 < n_tc:", "T.call_packed", "if 0 < n_dot:", "T.call_packed"], launches


@needs_nvcc
def test_tilelang_gpu_form_builds_with_nvcc(tmp_path):
    """The whole TileLang build for sm_90a (nvcc included, no GPU needed) of the padded 8 x 32
    example, as tkc/runtime.py `build` compiles it on a GPU."""
    import tilelang

    from codegen import tilelang as tilelang_gpu
    from codegen.tir import ARCH, load_prim_func
    from tkc import driver

    module = driver.optimize(driver.frontend(os.path.join(ROOT, "examples", "sddmm_wmma_8x32x16.tk"),
                                             {"M": 45, "N": 70, "K": 40, "NNZ": 400}), "tilelang")
    artifact = driver.emit(module, "tilelang")
    func = load_prim_func(artifact.source_path, f"tkc_test_sddmm_nvcc_{artifact.key[:16]}")
    kernel = tilelang.compile(func, target=ARCH, pass_configs=tilelang_gpu.PASS_CONFIGS)
    assert "mma" in kernel.get_kernel_source()


def test_tilelang_gpu_form_without_tensor_cores_lowers(tmp_path):
    """f32 operands take a SIMT tile; an odd K (2-byte f16 rows would be a 2-byte cp.async in a
    pipelined loop) turns the pipelining off; the dense output is written at (row, col)."""
    from tkc import driver

    for dt, k, stages, gemm in (("f32", 21, 2, False), ("f16", 21, 0, True)):
        path = _write(tmp_path, KERNEL.format(bm=16, bn=16, fmt="coo", dt=dt, out="M, N"), f"k_{dt}.tk")
        module = driver.optimize(driver.frontend(path, {"M": 40, "N": 33, "K": k, "NNZ": 60}), "tilelang")
        source, _, _ = _lower_gpu(module)
        assert f"num_stages={stages}" in source and ("T.gemm(" in source) == gemm
        assert "P[row, col] = " in source


def _lower_gpu(module) -> tuple[str, str, str]:
    """(TileLang GPU source, CUDA device source and host TIR script of TileLang's lowering for
    sm_90a) of a final-IR module."""
    import tempfile

    import tilelang
    import tvm

    from codegen import tilelang as tilelang_gpu
    from codegen.tir import ARCH, load_prim_func

    source = tilelang_gpu.emit(module)
    with tempfile.TemporaryDirectory(prefix="tkc-sddmm-") as tmp:
        path = os.path.join(tmp, "kernel.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        func = load_prim_func(path, f"tkc_test_sddmm_gpu_{abs(hash(source))}")
        with tvm.transform.PassContext(config=tilelang_gpu.PASS_CONFIGS), tvm.target.Target(ARCH):
            artifact = tilelang.lower(func, target=ARCH)
    return source, artifact.kernel_source, artifact.host_mod.script()


def _emit_error(module, target: str) -> str:
    from tkc import driver

    with pytest.raises(TkError) as exc:
        driver.emit(module, target)
    rendered = exc.value.render()
    assert "Traceback" not in rendered
    return rendered


@pytest.mark.parametrize("target", ["tilelang", "tilelang-cpu"])
def test_tilelang_rejects_what_it_does_not_lower(tmp_path, target):
    """Other ops in a `tiles` grid (only IR text can write them), runtime scalars, and (GPU) a
    tile whose shared memory is over sm_90's budget are located errors."""
    from dsl.ir import print_module
    from dsl.ir_parser import parse_module
    from tkc import driver

    path = _write(tmp_path, KERNEL.format(bm=16, bn=16, fmt="csr", dt="f16", out="NNZ"))
    text = print_module(driver.optimize(driver.frontend(path), target))
    at = text.index("    tile.sampled_gemm")
    extra = f'    %x = tile.alloc() : frag<f32[4, 4]> loc("{path}":4:9)\n'
    module = parse_module(text[:at] + extra + text[at:], str(tmp_path / "k.tkir"))
    head = _emit_error(module, target).splitlines()[0]
    assert head.startswith(f"{path}:4:9: error: target `{target}` lowers a `tiles` grid that holds one sampled gemm")

    scalar = KERNEL.format(bm=16, bn=16, fmt="csr", dt="f16", out="NNZ").replace(
        "S: csr[M, N, NNZ])", "S: csr[M, N, NNZ], pos: i32)")
    path = _write(tmp_path, scalar, "scalar.tk")
    rendered = _emit_error(driver.optimize(driver.frontend(path), target), target)
    assert rendered.startswith(f"{path}:1:1: error: target `{target}` lowers a sampled-gemm kernel without "
                               "runtime scalars; this one takes `pos`"), rendered

    if target == "tilelang":  # check-smem-fit's diagnostic (passes/smem_sddmm.py), raised by the backend too
        from passes.manager import parse_pipeline, run_pipeline

        path = _write(tmp_path, KERNEL.format(bm=256, bn=256, fmt="csr", dt="f16", out="NNZ"), "big.tk")
        module = run_pipeline(driver.frontend(path, {"M": 300, "N": 300}), parse_pipeline("tile,sparse-dispatch"))
        rendered = _emit_error(module, target)
        assert rendered.startswith(f"{path}:4:5: error: kernel `k` needs 262144 bytes of shared memory per block; "
                                   "limit is 232448 on sm_90"), rendered
        with pytest.raises(TkError) as exc:
            driver.optimize(driver.frontend(path, {"M": 300, "N": 300}), target)
        assert exc.value.render() == rendered


@pytest.mark.parametrize("k, path", [(32, "dots"), (256, "tiles")])
def test_dispatch_puts_a_five_percent_tile_where_the_h100_ran_it_faster(k, path):
    """10000^2 with 5M uniform entries: 819 entries per 128 x 128 tile. On an H100
    (benchmarks/probes/sddmm_dot_order.py, 2026-11-26) dot products took 0.085 ms against the
    tiles' 0.161 at K = 32; tiles 0.296 against 0.377 at K = 256. The tile's fixed work per
    position decides at small K, its mma work at large K."""
    from passes.sparse_dispatch import RATES, estimate

    e = estimate(128, 128, k, 2, RATES["sm_90"])
    assert (819 < e.dot_below) == (path == "dots"), e
    if path == "dots":
        assert e.t_tile == 128 * 128 * RATES["sm_90"].tile_floor
    # a 33% dense tile (1504^2 with 746k entries) is a tensor-core tile at every K
    assert 5400 >= e.dot_below



def test_wgmma_form_where_it_fits():
    """The `cuda` tile kernel's form (passes/smem_sddmm.py): wgmma for f16/bf16 operands with K a
    multiple of 8, one warpgroup per 64 rows of BM and BN up to 256; mma.sync otherwise. The wgmma
    stages are unpadded 128-byte rows (BK = 64) with 1024 bytes of slack to align them."""
    from passes.smem_sddmm import (BLOCK_RESERVED, POS_MIN, POS_PRE, PRODUCT_PAD, SM_SMEM, WGMMA_SLACK, WGMMA_STAGES,
                                   cuda_tiles)

    for args, wgmma in (((128, 128, 256, "f16", True, 256), True), ((64, 40, 40, "bf16", True, 128), True),
                        ((128, 128, 13, "f16", True, 256), False), ((128, 128, 256, "f16", True, 128), False),
                        ((16, 16, 256, "f16", True, 32), False), ((64, 264, 256, "f16", True, 128), False),
                        ((128, 128, 256, "f32", False, 256), False)):
        t = cuda_tiles(*args)
        assert t.wgmma == wgmma, args
        assert t.walk is None  # (K > 32)
        if wgmma:
            bmp, bnp = -(-args[0] // 64) * 64, -(-args[1] // 8) * 8
            assert (t.bmp, t.bnp, t.bk, t.apitch, t.bpitch) == (bmp, bnp, 64, 64, 64)
            # the stages or the epilogue's bytes (the products, each tile row's first entry, POS_MIN
            # entries' 16-bit places), then up to POS_PRE places of their own that keep the blocks per SM
            base = max(WGMMA_STAGES * (bmp + bnp) * 64 * 2, (bmp * (bnp + PRODUCT_PAD) + bmp) * 4 + 2 * POS_MIN)
            base += WGMMA_SLACK
            assert 0 < t.pos_pre <= POS_PRE and t.smem == base + 2 * t.pos_pre
            blocks = SM_SMEM // (base + BLOCK_RESERVED)
            assert SM_SMEM // (t.smem + BLOCK_RESERVED) == blocks
            assert t.pos_pre == POS_PRE or SM_SMEM // (t.smem + 16 + BLOCK_RESERVED) < blocks
            assert t.pos_cap == (t.smem - WGMMA_SLACK - (bmp * (bnp + PRODUCT_PAD) + bmp) * 4) // 2
        assert not t.reads_b  # B's N columns unknown: the tiles read Bt
    # with M and N known: B itself (N-major) where N % 8 == 0, BN padded to 8 is a multiple of 64
    # and S has at most one wave of tiles (N_MAJOR_MAX_TILES), in the same bytes as Bt's rows
    for (bm, bn, threads), (m, n), reads_b in (
            ((128, 128, 256), (1504, 1504), True), ((128, 128, 256), (1504, 1508), False),
            ((128, 128, 256), (2048, 2048), True), ((128, 128, 256), (2048, 2056), False),
            ((128, 128, 256), (4000, 4000), False), ((64, 40, 128), (100, 400), False),
            ((192, 64, 384), (600, 136), True), ((64, 60, 128), (70, 72), True), ((64, 256, 128), (5, 8), True)):
        t, bt = cuda_tiles(bm, bn, 256, "f16", True, threads, n, m), cuda_tiles(bm, bn, 256, "f16", True, threads)
        assert t.wgmma and t.reads_b == reads_b, (bm, bn, m, n)
        assert (t.smem, t.stage_elems) == (bt.smem, bt.stage_elems)
    assert not cuda_tiles(128, 128, 256, "f16", True, 128, 1504, 1504).reads_b  # (mma.sync: 128 threads, BM = 128)


@pytest.mark.parametrize("bm, bn, threads, k, blocks", [(128, 128, 256, 32, 2), (128, 128, 256, 8, 2), (64, 128, 128, 24, 3),
                                                       (64, 40, 128, 32, 7), (192, 64, 384, 16, 2)])
def test_persistent_wgmma_form_at_k_of_one_row(bm, bn, threads, k, blocks):
    """K <= 32 with B read transposed: the wgmma tile kernel has a persistent twin,
    `<kernel>_walk` (passes/smem_sddmm.py `persistent_fits`). Its bytes: the products at the
    1024-aligned base, then two stages of 64-byte rows of A and Bt, then per stage the rows' first
    entries and the places: PERSISTENT_POS of them, or as many as keep the blocks per SM that
    PERSISTENT_POS_MIN allows. Where the tiles read B itself (one wave of tiles) or K > 32 there
    is none."""
    from passes.smem_sddmm import (BLOCK_RESERVED, PERSISTENT_POS, PERSISTENT_POS_MIN, PRODUCT_PAD, SM_SMEM,
                                   WGMMA_SLACK, cuda_tiles)

    one = cuda_tiles(bm, bn, k, "f16", True, threads, 10000, 10000)
    t = one.walk
    bmp, bnp = bm, -(-bn // 8) * 8
    assert one.wgmma and not one.persistent and t.wgmma and t.persistent and not t.reads_b
    assert (t.row_bytes, t.stages, t.apitch) == (64, 2, 32) and t.walk is None
    assert one.kernels("k") == {"k": one.smem, "k_walk": t.smem, "k_transpose_b": one.transpose, "k_dots": 0}
    fixed = WGMMA_SLACK + bmp * (bnp + PRODUCT_PAD) * 4 + 2 * ((bmp + bnp) * 64 + bmp * 4)
    assert t.smem == fixed + 2 * 2 * t.pos_stage and t.pos_stage % 8 == 0
    assert SM_SMEM // (t.smem + BLOCK_RESERVED) == blocks == SM_SMEM // (fixed + 4 * PERSISTENT_POS_MIN + BLOCK_RESERVED)
    assert t.pos_stage == PERSISTENT_POS or SM_SMEM // (t.smem + 32 + BLOCK_RESERVED) < blocks
    assert cuda_tiles(bm, bn, 40, "f16", True, threads, 10000, 10000).walk is None
    if bn % 64 == 0:  # one wave of tiles: B read N-major by the one-tile form
        assert cuda_tiles(bm, bn, k, "f16", True, threads, 2 * bn, bm).reads_b
        assert cuda_tiles(bm, bn, k, "f16", True, threads, 2 * bn, bm).walk is None


@pytest.mark.parametrize("k, per_tile, path", [(256, 484, "tiles"), (256, 290, "tiles"), (256, 242, "dots"),
                                               (32, 819, "tiles"), (32, 164, "dots")])
def test_dispatch_puts_wgmma_tiles_on_tensor_cores_where_measured_faster(k, per_tile, path):
    """The wgmma form of a 128 x 128 tile (256 threads) against dot products, as measured with
    benchmarks/probes/sddmm_split.py (H100, 2026-11-27, every tile on tensor cores against every
    entry a dot product, kernel launches in ms): K = 256, uniform 8000^2: 0.080 / 0.153 at 484
    entries per tile, 0.080 / 0.097 at 290, 0.079 / 0.082 at 242 (the crossing); K = 32, uniform
    10000^2: 0.069 / 0.085 at 819 entries per tile, 0.060 / 0.024 at 164. The mma.sync form's
    rates put K = 256 tiles of 484 entries on dot products."""
    from passes.sparse_dispatch import RATES, estimate

    wg = estimate(128, 128, k, 2, RATES["sm_90"], wgmma=True)
    assert (per_tile >= wg.dot_below) == (path == "tiles"), wg
    assert estimate(128, 128, 256, 2, RATES["sm_90"]).dot_below > 484  # the mma.sync form's threshold


@pytest.mark.parametrize("tile, choice", [
    ({}, "choice: a tile with fewer than 254 entries (1.6% of its 16384 positions) is computed as dot products"),
    ({"BM": 1, "BN": 1}, "choice: every entry is computed as a dot product (a tile of 1 position never reaches the"),
    ({"BM": 2, "BN": 2}, "choice: every entry is computed as a dot product (a tile of 4 positions never reaches the"),
])
def test_explain_states_the_split_it_makes(tile, choice):
    """`tkc compile --explain`'s choice line: the threshold as a share of the tile, or, where a
    tile cannot hold as many entries as the threshold, that every entry is a dot product (never a
    share over 100%)."""
    from passes.sparse_dispatch import explain
    from tkc import driver

    module = driver.optimize(driver.frontend(os.path.join(ROOT, "examples", "sddmm.tk"), tile), "cuda")
    text = "\n".join(explain(module))
    assert choice in text
    if tile:
        assert "% of its" not in text


@pytest.mark.parametrize("k, target, walk", [(32, "cuda", True), (256, "cuda", False), (32, "tilelang-cpu", False)])
def test_explain_states_when_the_tiles_walk(k, target, walk, tmp_path):
    """`tkc compile --explain` through `cuda` at K <= 32 adds the launch choice each call makes
    (tkc/cuda_runtime.py `CudaLaunch.tile_launch`): the persistent `sddmm_walk` where the dot
    products are at most PERSISTENT_DOTS_PER_TILE per tile, else `sddmm` a block per tile."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "tkc.cli", "--cache-dir", str(tmp_path), "compile",
                          os.path.join(ROOT, "examples", "sddmm.tk"), "--target", target, "--explain", "-D", f"K={k}"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = ("  launch (cuda): a call whose dot products are at most 16 per tensor-core tile runs the tiles on "
            "`sddmm_walk`, the blocks resident at once each walking tiles (")
    assert (line in out.stdout) == walk, out.stdout
    assert "sparse-dispatch for `S`" in out.stdout
    # ... and at K = 32 with f16 operands, the row groups' choice per pattern (tkc/runtime.py `_groups_for`)
    groups = ("  launch (cuda): every entry runs by row groups on `sddmm_groups` (a block per SM holding a 160 KB panel "
              "of B transposed, mma.sync on 8 rows of A against 16 entries; no tiles and no dot products) where the "
              "pattern has at least 500000 entries, at most 20% of S and at least 48 per group of 8 rows and panel "
              "holding any; else the tiles and dot products above (decided per pattern at its first call)")
    assert (groups in out.stdout) == walk, out.stdout
    assert ("; a B given as [K, N] is transposed panel by panel in `sddmm_groups_b` itself" in out.stdout) == walk


@pytest.mark.parametrize("defines, target, panels", [(("K=256",), "cuda", True), (("N=1500",), "cuda", False),
                                                     (("K=256",), "tilelang-cpu", False)])
def test_explain_states_when_the_dot_products_go_by_panels(defines, target, panels, tmp_path):
    """`tkc compile --explain` through `cuda` adds the dot products' choice per pattern
    (tkc/runtime.py `_panels_for`) where the module has the column-panel kernel: not where N is
    not a whole number of 16-byte vectors (N = 1500 f16), nor through another target."""
    import subprocess
    import sys

    args = [a for d in defines for a in ("-D", d)]
    out = subprocess.run([sys.executable, "-m", "tkc.cli", "--cache-dir", str(tmp_path), "compile",
                          os.path.join(ROOT, "examples", "sddmm.tk"), "--target", target, "--explain", *args],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    line = ("  launch (cuda): the dot products run by column panels of B itself (`sddmm_panels`, 16 columns per "
            "panel, no transpose of B) where the panels holding entries average at most 512, B takes at most 50% of "
            "the GPU's L2")
    assert (line in out.stdout) == panels, out.stdout
    assert ("and the work items' slots are at most 2 per entry; else B is transposed" in out.stdout) == panels
    # ... and, through `cuda`, the tensor-core tiles' launch order per pattern (tkc.sparse.tile_order)
    order = ("  launch (cuda): where the tensor-core tiles outnumber the GPU's SMs by at most twice, the X tiles past "
             "one per SM run beside others, so the 2 X lightest go to both ends of the launch")
    assert (order in out.stdout) == (target == "cuda"), out.stdout


def test_cuda_dot_products_go_by_column_panels_where_panels_are_sparse():
    """The `cuda` runtime's choice per pattern (tkc/runtime.py `_b_transposed`): the dot products
    by column panels of B itself (`dot_panels`, no Bt filled) where the panels holding entries
    have at most PANEL_MEAN_MAX on average, B takes at most half the L2, no tile reads Bt and
    work items of 32 to 256 entries keep their slots to at most twice the entries; else B's
    transpose and the dot
    products by rows (`fill_bt`, with `dot_sequential` where every entry is one in S's order).
    Other targets never take panels."""
    from tkc import sparse as sp
    from tkc.runtime import PANEL_MEAN_MAX

    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")

    class Launch:  # what _b_transposed reads of a CudaLaunch
        panel_kernel, panel_width, panel_entries, tc_reads_bt = "sddmm_panels", 16, 128, True
        slots = 1056  # the panel kernel's blocks resident at once (132 SMs x 8 on an H200)
        l2 = 50 * 2**20  # an H200's L2

        @classmethod
        def panel_slots(cls, index):
            return cls.slots

        @classmethod
        def l2_bytes(cls, index):
            return cls.l2

    B = torch.randn(256, 2000, dtype=torch.float16)
    sparse = sp.uniform(2000, 2000, 40_000, seed=1)  # 20 per column: 320 per panel of 16
    dense = sp.uniform(2000, 2000, 1_200_000, seed=1)  # 600 per column
    for p, panels_expected in ((sparse, True), (dense, False)):
        plan = sp.dispatch_plan(p, 128, 128, 128 * 128 + 1)  # every entry a dot product
        bt, kw = kernel._b_transposed(plan, B, Launch, p)
        assert tuple(bt.shape) == (2000, 256)
        if panels_expected:  # 250 items of 256 entries would leave resident blocks idle: items of 128
            assert set(kw) == {"dot_panels"} and kw["dot_panels"] is plan.dot_panels(p.rows, p.cols, 2000, 16, 128)
            assert 0 < kw["dot_panels"].per_panel <= PANEL_MEAN_MAX
            assert kernel._b_transposed(plan, B, Launch, p)[1] == kw  # the choice is kept per plan
            for slots, entries in ((250, 256), (251, 128)):  # 250 items of 256 entries fill 250 resident blocks
                Launch.slots = slots
                for k in [k for k in plan._memo if k[0] == "panel_choice"]:  # (another GPU)
                    del plan._memo[k]
                assert kernel._b_transposed(plan, B, Launch, p)[1]["dot_panels"] is plan.dot_panels(
                    p.rows, p.cols, 2000, 16, entries)
        else:
            assert plan.dot_panels(p.rows, p.cols, 2000, 16, 128).per_panel > PANEL_MEAN_MAX
            assert kw == {"fill_bt": True, "dot_sequential": True}
    # panels of few entries: the items halve (down to 32) while their slots are over twice the entries, else rows
    Launch.slots = 1056
    for nnz, entries in ((4000, 64), (2000, 32), (600, None)):  # 32, 16 and 4.8 entries per panel on average
        p = sp.uniform(2000, 2000, nnz, seed=2)
        plan = sp.dispatch_plan(p, 128, 128, 128 * 128 + 1)
        per_panel = [sum(1 for c in p.cols.tolist() if c // 16 == q) for q in range(125)]
        slots = {size: sum(-(-n // size) for n in per_panel) * size for size in (128, 64, 32)}
        want = next((size for size in (128, 64, 32) if slots[size] <= 2 * nnz), None)
        assert want == entries, slots
        kw = kernel._b_transposed(plan, B, Launch, p)[1]
        if entries:
            assert kw == {"dot_panels": plan.dot_panels(p.rows, p.cols, 2000, 16, entries)}
            assert kw["dot_panels"].slots == slots[entries]
        else:
            assert kw == {"fill_bt": True, "dot_sequential": True}
    # tiles that read Bt: the transpose is paid anyway, so the dot products read it
    plan = sp.dispatch_plan(sparse, 128, 128, 157)  # about half the tiles (156 entries each on average)
    assert plan.n_tc and plan.n_dot
    assert kernel._b_transposed(plan, B, Launch, sparse)[1] == {"fill_bt": True}
    Launch.tc_reads_bt = False
    assert set(kernel._b_transposed(plan, B, Launch, sparse)[1]) == {"dot_panels"}
    Launch.l2 = 2 * B.numel() * B.element_size() - 2  # B over half the L2: each panel's pieces from DRAM
    assert kernel._b_transposed(plan, B, Launch, sparse)[1] == {"fill_bt": True}
    Launch.l2 += 2
    assert set(kernel._b_transposed(plan, B, Launch, sparse)[1]) == {"dot_panels"}
    Launch.panel_kernel = None  # no panel kernel (B's rows not in 16-byte vectors)
    assert kernel._b_transposed(plan, B, Launch, sparse)[1] == {"fill_bt": True}
    tl = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="tilelang")
    Launch.panel_kernel = "sddmm_panels"
    assert "dot_panels" not in tl._b_transposed(plan, B, Launch, sparse)[1]


def test_cuda_k32_takes_row_groups_where_groups_are_dense_enough():
    """The `cuda` runtime's choice per pattern at K = 32 (tkc/runtime.py `_groups_for`): every
    entry by row groups (`row_groups`, tkc.sparse.RowGroups over the group kernel's resident
    blocks) where the pattern has at least GROUP_NNZ_MIN entries, at most GROUP_DENSITY_MAX of S
    and at least GROUP_CELL_MEAN_MIN per (8 rows, panel) cell holding any; B transposed by the
    kernel itself (`fill_bt`), or read as it is where it is a transposed view. Else the tiles and
    dot products as before; never without a group kernel (K != 32, f32) or on another target."""
    from tkc import runtime
    from tkc import sparse as sp

    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda")

    class Launch:  # what _b_transposed reads of a CudaLaunch
        group_kernel, group_dense, group_b_kernel = "sddmm_groups", False, None
        panel_kernel, tc_reads_bt = None, True
        asked = []

        @classmethod
        def group_blocks(cls, index):
            cls.asked.append(index)
            return 7

    B = torch.randn(32, 4000, dtype=torch.float16)
    p = sp.uniform(4000, 4000, 600_000, seed=1)  # 3.75% of S; 1000 cells of 600 entries
    plan = sp.dispatch_plan(p, 128, 128, 0)
    bt, kw = kernel._b_transposed(plan, B, Launch, p)
    assert set(kw) == {"fill_bt", "row_groups"} and tuple(bt.shape) == (4000, 32)
    groups = kw["row_groups"]
    assert groups is sp.row_groups(p, 32, 7) and groups.n_blocks == 7 and Launch.asked == [-1]
    assert kernel._b_transposed(plan, B, Launch, p)[1]["row_groups"] is groups and Launch.asked == [-1]  # kept
    view = B.t().contiguous().t()  # B as a transposed view: read as it is
    bt, kw = kernel._b_transposed(plan, view, Launch, p)
    assert kw == {"row_groups": groups} and bt.data_ptr() == view.data_ptr()
    Launch.group_b_kernel = "sddmm_groups_b"  # (N % 8 == 0): the panels transposed from B itself, no Bt filled
    bt, kw = kernel._b_transposed(plan, B, Launch, p)
    assert kw == {"row_groups": groups, "groups_from_b": True} and bt.data_ptr() == B.data_ptr()
    assert kernel._b_transposed(plan, view, Launch, p)[1] == {"row_groups": groups}  # a transposed view: as before
    saved = runtime.GROUP_PANELS_FROM_B
    runtime.GROUP_PANELS_FROM_B = False
    try:
        assert set(kernel._b_transposed(plan, B, Launch, p)[1]) == {"fill_bt", "row_groups"}
    finally:
        runtime.GROUP_PANELS_FROM_B = saved
    Launch.group_b_kernel = None
    Launch.group_dense = True  # a dense P: the plan indexes it by row * N + column
    assert kernel._b_transposed(plan, B, Launch, p)[1]["row_groups"] is sp.row_groups(p, 32, 7, True)
    Launch.group_dense = False
    # the thresholds, each at its edge
    for name, edge in (("GROUP_NNZ_MIN", 600_000), ("GROUP_DENSITY_MAX", 600_000 / 4000**2),
                       ("GROUP_CELL_MEAN_MIN", 600)):
        for value, taken in ((edge, True), (edge * 1.01 if name != "GROUP_DENSITY_MAX" else edge * 0.99, False)):
            saved = getattr(runtime, name)
            setattr(runtime, name, value)
            try:
                kw = kernel._b_transposed(plan, B, Launch, p)[1]
            finally:
                setattr(runtime, name, saved)
            assert ("row_groups" in kw) == taken, (name, value, kw)
            if not taken:
                assert "fill_bt" in kw
    for q in (sp.uniform(40_000, 40_000, 600_000, seed=2),  # 7.5 per cell
              sp.uniform(2000, 1000, 500_000, seed=2),  # 25% of S
              sp.uniform(10_000, 10_000, 400_000, seed=2)):  # too few entries
        assert "row_groups" not in kernel._b_transposed(sp.dispatch_plan(q, 128, 128, 0), B, Launch, q)[1]
    Launch.group_kernel = None  # K != 32 or f32 operands: no group kernel
    assert "row_groups" not in kernel._b_transposed(sp.dispatch_plan(p, 128, 128, 0), B, Launch, p)[1]
    Launch.group_kernel = "sddmm_groups"
    tl = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="tilelang")
    assert "row_groups" not in tl._b_transposed(sp.dispatch_plan(p, 128, 128, 0), B, Launch, p)[1]

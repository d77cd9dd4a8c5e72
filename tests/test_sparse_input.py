"""tkc/sparse.py: sparse patterns from torch, scipy and Matrix Market files, their checks, the
uniform and R-MAT generators, and the per-tile entry lists (CPU only)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from tkc.sparse import (SparseInputError, SparsePattern, TileLists, as_pattern, read_mtx, rmat, tile_lists,
                        uniform)

pytestmark = pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread while these tests run: they are many small torch ops, which on a loaded
    two-core machine spend most of their time waiting in OpenMP barriers (R-MAT with 40k entries:
    0.02 s on one thread, 1.8 s on two seen under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

# A 4 x 6 pattern in CSR order; row 2 is empty.
SHAPE = (4, 6)
ROWS = [0, 0, 1, 3, 3, 3]
COLS = [1, 4, 0, 0, 2, 5]
CROW = [0, 2, 3, 3, 6]


def _torch_csr(crow=CROW, cols=COLS, shape=SHAPE, dtype=torch.int64):
    return torch.sparse_csr_tensor(torch.tensor(crow, dtype=dtype), torch.tensor(cols, dtype=dtype),
                                   torch.ones(len(cols)), shape, check_invariants=False)


def _torch_coo(rows=ROWS, cols=COLS, shape=SHAPE):
    return torch.sparse_coo_tensor(torch.tensor([rows, cols]), torch.ones(len(rows)), shape, check_invariants=False)


def _scipy_csr(crow=CROW, cols=COLS, shape=SHAPE):
    return sp.csr_matrix((np.ones(len(cols)), np.array(cols), np.array(crow)), shape=shape)


def _mtx(tmp_path, text: str, name: str = "s.mtx") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _entries(p: SparsePattern) -> tuple[list[int], list[int]]:
    return p.rows.tolist(), p.cols.tolist()


def _dense(p: SparsePattern) -> np.ndarray:
    out = np.zeros((p.M, p.N), dtype=bool)
    out[p.rows.numpy(), p.cols.numpy()] = True
    return out


def _check_generated(p: SparsePattern, M: int, N: int, nnz: int) -> None:
    """Exactly nnz distinct in-range entries, in CSR order, as a csr pattern."""
    assert (p.M, p.N, p.fmt, p.nnz) == (M, N, "csr", nnz)
    assert p.rows.dtype == torch.int32 and p.cols.dtype == torch.int32
    keys = p.rows.long() * N + p.cols.long()
    assert bool((keys[1:] > keys[:-1]).all())  # strictly increasing: sorted and distinct
    if nnz:
        assert 0 <= int(p.rows.min()) and int(p.rows.max()) < M
        assert 0 <= int(p.cols.min()) and int(p.cols.max()) < N


# ---- round trips --------------------------------------------------------------------------


def _sources(tmp_path):
    dense = np.zeros(SHAPE)
    dense[ROWS, COLS] = np.arange(1, len(ROWS) + 1)
    dok = sp.dok_array(SHAPE)
    for r, c in reversed(list(zip(ROWS, COLS))):  # its .tocsr() has unsorted column indices
        dok[r, c] = 1.0
    path = tmp_path / "s.mtx"
    scipy.io.mmwrite(str(path), sp.coo_array(dense))
    return {
        "torch csr int64": _torch_csr(),
        "torch csr int32": _torch_csr(dtype=torch.int32),
        "torch coo": _torch_coo().coalesce(),
        "scipy csr_matrix": _scipy_csr(),
        "scipy csr_array": sp.csr_array(dense),
        "scipy coo_array": sp.coo_array(dense),
        "scipy csc (converted)": sp.csc_matrix(dense),
        "scipy dok (converted)": dok,
        "mtx path": path,
        "mtx str": str(path),
        "pattern": SparsePattern(*SHAPE, "csr", torch.tensor(ROWS, dtype=torch.int32),
                                 torch.tensor(COLS, dtype=torch.int32)),
    }


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_every_source_gives_the_same_entries(tmp_path, fmt):
    for name, src in _sources(tmp_path).items():
        p = as_pattern(src, fmt, M=SHAPE[0], N=SHAPE[1])
        assert (p.M, p.N, p.fmt) == (*SHAPE, fmt), name
        assert p.rows.dtype == torch.int32 and p.cols.dtype == torch.int32, name
        if fmt == "coo" and "converted" in name:  # the order of scipy's `.tocoo()` (csc: by column)
            assert sorted(zip(*_entries(p))) == list(zip(ROWS, COLS)), name
            continue
        assert _entries(p) == (ROWS, COLS), name
        assert p.crow().tolist() == CROW, name


def test_coo_order_is_kept():
    order = [4, 0, 5, 2, 1, 3]
    rows, cols = [ROWS[i] for i in order], [COLS[i] for i in order]
    from_torch = as_pattern(_torch_coo(rows, cols), "coo")  # not coalesced: indices as given
    from_scipy = as_pattern(sp.coo_array((np.ones(6), (rows, cols)), shape=SHAPE), "coo")
    assert _entries(from_torch) == _entries(from_scipy) == (rows, cols)
    with pytest.raises(SparseInputError, match="row-major order.*entry 1 has row 0 after row 3"):
        as_pattern(from_torch, "csr")
    csr = as_pattern(_torch_csr(), "csr")
    assert as_pattern(csr, "csr") is csr
    assert as_pattern(csr, "coo") is as_pattern(csr, "coo")  # relabelled once, memoized
    assert as_pattern(as_pattern(csr, "coo"), "csr").fmt == "csr"  # sorted coo serves as csr


@st.composite
def _patterns(draw, max_dim=24):
    M, N = draw(st.integers(0, max_dim)), draw(st.integers(0, max_dim))
    nnz = draw(st.integers(0, M * N))
    seed = draw(st.integers(0, 2**31 - 1))
    keys = np.random.default_rng(seed).permutation(M * N)[:nnz]  # distinct, in random order
    return M, N, (keys // max(N, 1)).tolist(), (keys % max(N, 1)).tolist()


@settings(max_examples=examples(10, 25), deadline=None)
@given(_patterns())
def test_round_trips_keep_entries(pattern):
    M, N, rows, cols = pattern
    coo = as_pattern(_torch_coo(rows, cols, (M, N)), "coo")
    assert _entries(coo) == (rows, cols)
    assert _entries(as_pattern(sp.coo_array((np.ones(len(rows)), (rows, cols)), shape=(M, N)), "coo")) == (rows, cols)
    ref = sp.csr_array((np.ones(len(rows)), (rows, cols)), shape=(M, N))
    ref.sort_indices()
    csr = as_pattern(ref, "csr")
    assert csr.crow().tolist() == ref.indptr.tolist() and csr.cols.tolist() == ref.indices.tolist()
    for layout in ("csr", "coo"):
        assert _entries(as_pattern(csr.to_torch(layout=layout), "csr")) == _entries(csr)
    assert _entries(as_pattern(coo.to_torch(layout="coo"), "coo")) == (rows, cols)
    values = torch.arange(len(rows), dtype=torch.float32)  # values follow S's order into any layout
    assert coo.to_torch(values, "csr").to_dense()[coo.rows.long(), coo.cols.long()].tolist() == values.tolist()


def test_to_torch_is_an_sddmm_reference():
    p = as_pattern(_torch_csr(), "csr")
    A, B = torch.randn(SHAPE[0], 5), torch.randn(5, SHAPE[1])
    out = torch.sparse.sampled_addmm(p.to_torch(), A, B, beta=0.0)
    want = (A[p.rows.long()] * B[:, p.cols.long()].T).sum(1)
    torch.testing.assert_close(out.values(), want)


def test_to_device_is_itself_there_and_memoized_elsewhere():
    p = uniform(5, 7, 9)
    assert p.to("cpu") is p and p.to(torch.device("cpu")) is p  # no copy (nor a second plan cache)
    moved = p.to("meta")
    assert moved is not p and p.to("meta") is moved and moved.rows.device.type == "meta"
    assert (moved.M, moved.N, moved.nnz) == (p.M, p.N, p.nnz)


# ---- validation ---------------------------------------------------------------------------


def _float_indices():
    m = _scipy_csr()
    m.indices = m.indices.astype(np.float64)  # scipy does not check on assignment
    return m


def _pattern(M, N, fmt, rows, cols, dtype=torch.int32):
    return SparsePattern(M, N, fmt, torch.tensor(rows, dtype=dtype), torch.tensor(cols, dtype=torch.int32))


def _coo_3d():
    return torch.sparse_coo_tensor(torch.zeros(3, 1, dtype=torch.long), torch.ones(1), (2, 2, 2),
                                   check_invariants=False)


BAD_INPUTS = [  # (case, the input, the format asked for, what the message must say)
    ("row out of range", lambda: _torch_coo([0, 7], [1, 2]), "coo",
     r"row index of entry 1 is 7; expected it in \[0, 4\)"),
    ("col out of range", lambda: _torch_csr([0, 1, 2, 2, 2], [1, 9]), "csr",
     r"column index of entry 1 is 9; expected it in \[0, 6\)"),
    ("negative col", lambda: _pattern(4, 6, "coo", [0, 1], [0, -1]), "coo", r"column index of entry 1 is -1"),
    ("unsorted csr row", lambda: _scipy_csr([0, 0, 0, 0, 3], [1, 4, 2]), "csr",
     r"column indices of row 3 are not sorted: 2 comes after 4"),
    ("duplicate csr entry", lambda: _torch_csr([0, 0, 3, 3, 3], [1, 2, 2]), "csr",
     r"duplicate entry \(1, 2\): entries 1 and 2"),
    ("duplicate coo pair", lambda: _torch_coo([0, 2, 1, 3, 2], [0, 3, 1, 1, 3]), "coo",
     r"duplicate entry \(2, 3\): entries 1 and 4"),
    ("duplicate sorted coo pair", lambda: _torch_coo([0, 1, 1], [5, 2, 2]), "coo",
     r"duplicate entry \(1, 2\): entries 1 and 2"),
    ("float indices", _float_indices, "csr", r"`col_indices` has dtype float64"),
    ("float pattern", lambda: _pattern(4, 6, "coo", [0.0], [0], dtype=torch.float32), "coo",
     r"`rows` is torch.float32"),
    ("3-D torch", _coo_3d, "coo", r"3 dimensions \(shape \(2, 2, 2\)\)"),
    ("3-D scipy", lambda: sp.coo_array(np.ones((2, 2, 2))), "coo", r"3 dimensions"),
    ("crow length", lambda: _torch_csr([0, 1, 2], [1, 2]), "csr",
     r"`crow_indices` has 3 elements; expected M \+ 1 = 5"),
    ("crow start", lambda: _torch_csr([1, 1, 2, 2, 2], [1, 2]), "csr", r"`crow_indices` runs from 1 to 2; expected 0"),
    ("crow end", lambda: _torch_csr([0, 1, 1, 1, 1], [1, 2]), "csr", r"runs from 0 to 1; expected 0 to nnz = 2"),
    ("crow decreasing", lambda: _torch_csr([0, 2, 1, 2, 2], [1, 2]), "csr",
     r"`crow_indices` decreases at row 1: 2 then 1"),
    ("unsorted coo as csr", lambda: _torch_coo([2, 0], [0, 1]), "csr", r"entry 1 has row 0 after row 2"),
    ("dense tensor", lambda: torch.eye(3), "csr", r"layout `torch.strided`"),
    ("not a matrix", lambda: [[0, 1]], "csr", r"from a `list`"),
]


@pytest.mark.parametrize("make, fmt, message", [pytest.param(*case[1:], id=case[0]) for case in BAD_INPUTS])
def test_bad_inputs_are_named(make, fmt, message):
    with pytest.raises(SparseInputError, match=message) as info:
        as_pattern(make(), fmt)
    assert info.value.message[0].islower() or info.value.message[0] == "`"  # house style


@pytest.mark.parametrize("M, N, message", [(5, None, "`S` has 4 rows .*expected M = 5"),
                                           (None, 7, "`S` has 6 columns .*expected N = 7")])
def test_shape_mismatch(tmp_path, M, N, message):
    for src in _sources(tmp_path).values():
        with pytest.raises(SparseInputError, match=message):
            as_pattern(src, "csr", M=M, N=N)


def test_unsorted_coo_pattern_rejected_as_csr_everywhere():
    p = _pattern(3, 3, "coo", [0, 0], [2, 1])
    with pytest.raises(SparseInputError, match="column indices of row 0 are not sorted: 1 comes after 2"):
        as_pattern(p, "csr")
    with pytest.raises(SparseInputError, match="not sorted"):
        p.crow()
    assert as_pattern(p, "coo") is p


# ---- Matrix Market ------------------------------------------------------------------------

HEADER = "%%MatrixMarket matrix coordinate real general\n"


def test_mtx_errors_name_the_file(tmp_path):
    missing = str(tmp_path / "missing.mtx")
    with pytest.raises(SparseInputError, match=r"cannot open `.*missing\.mtx`: no such file"):
        read_mtx(missing)
    truncated = _mtx(tmp_path, HEADER + "3 3 5\n1 1 1.0\n2 1 2.0\n3 3 3.0\n", "truncated.mtx")
    with pytest.raises(SparseInputError, match=r"`.*truncated\.mtx` is not a valid Matrix Market file") as info:
        as_pattern(truncated, "csr")
    assert "Truncated" in info.value.note  # scipy's reason
    malformed = {"banner.mtx": "hello\n", "empty.mtx": "", "garbage.mtx": HEADER + "3 3 2\n1 1 1.0\n2 x 2\n",
                 "outside.mtx": HEADER + "3 3 1\n4 1 1.0\n", "zero.mtx": HEADER + "3 3 1\n0 1 1.0\n",
                 "overflow.mtx": HEADER + "3 3 1\n99999999999999999999 1 1.0\n"}
    for name, text in malformed.items():
        with pytest.raises(SparseInputError, match=rf"`.*{name}` is not a valid Matrix Market file"):
            read_mtx(_mtx(tmp_path, text, name))
    dense = str(tmp_path / "dense.mtx")
    scipy.io.mmwrite(dense, np.eye(3))
    with pytest.raises(SparseInputError, match=r"dense\.mtx` is a dense \(`array`\) .*expected `coordinate`"):
        read_mtx(dense)


def test_mtx_files_that_break_the_format_or_tkc_s_limits_name_the_file(tmp_path):
    """A folder, sizes past int32 (refused from the size line, before the entries are read), a
    symmetric matrix that is not square, a skew-symmetric file that lists its (zero) diagonal."""
    with pytest.raises(SparseInputError, match=rf"`{tmp_path}` is a folder, not a Matrix Market file"):
        read_mtx(tmp_path)
    huge = _mtx(tmp_path, HEADER + "3000000000 3 1\n1 1 1.0\n", "huge.mtx")
    with pytest.raises(SparseInputError, match=r"huge\.mtx` declares 3000000000 rows; tkc takes 0 to 2147483647"):
        read_mtx(huge)
    for symmetry in ("symmetric", "skew-symmetric", "hermitian"):
        field = "complex" if symmetry == "hermitian" else "real"
        path = _mtx(tmp_path, f"%%MatrixMarket matrix coordinate {field} {symmetry}\n3 4 1\n2 1 1.0"
                    + (" 0.0" if field == "complex" else "") + "\n", f"{symmetry}.mtx")
        with pytest.raises(SparseInputError, match=rf"is a {symmetry} Matrix Market file of 3 x 4; a {symmetry} matrix is square"):
            read_mtx(path)
    skew = _mtx(tmp_path, "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1.0\n3 3 2.0\n", "skew.mtx")
    with pytest.raises(SparseInputError, match=r"skew\.mtx` is skew-symmetric but lists the diagonal entry \(row 3, column 3\)"):
        read_mtx(skew)


def test_mtx_duplicates(tmp_path):
    dup = _mtx(tmp_path, HEADER + "3 3 3\n1 1 1.0\n2 1 2.0\n1 1 3.0\n")
    with pytest.raises(SparseInputError, match=r"lists entry \(row 1, column 1\) more than once"):
        read_mtx(dup)
    both = _mtx(tmp_path, "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n1 2\n2 1\n", "both.mtx")
    with pytest.raises(SparseInputError, match=r"\(row 1, column 2\) more than once \(a symmetric file"):
        read_mtx(both)


def test_mtx_symmetric_files_expand(tmp_path):
    rng = np.random.default_rng(0)
    base = sp.random(7, 7, density=0.3, random_state=rng, format="csr")
    cases = {"symmetric": base + base.T + sp.eye(7), "skew-symmetric": base - base.T,
             "hermitian": base * (1 + 2j) + (base * (1 + 2j)).conj().T + sp.eye(7)}
    for symmetry, S in cases.items():
        path = str(tmp_path / f"{symmetry}.mtx")
        scipy.io.mmwrite(path, sp.coo_array(S), symmetry=symmetry)
        assert scipy.io.mminfo(path)[5] == symmetry
        p = read_mtx(path)
        assert p.fmt == "csr" and p.nnz == S.count_nonzero()  # the diagonal once
        np.testing.assert_array_equal(_dense(p), S.toarray() != 0)
        keys = p.rows.long() * p.N + p.cols
        assert bool((keys[1:] > keys[:-1]).all())
    pattern = _mtx(tmp_path, "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n3 1\n3 2\n")
    assert _entries(read_mtx(pattern)) == ([0, 0, 1, 2, 2], [0, 2, 2, 0, 1])


def test_mtx_explicit_zeros_are_entries(tmp_path):
    path = _mtx(tmp_path, HEADER + "2 3 2\n2 3 0.0\n1 2 5.0\n")
    assert _entries(read_mtx(path)) == ([0, 1], [1, 2])


# ---- generators ---------------------------------------------------------------------------

GEN_CASES = [(1, 1, 0), (1, 1, 1), (3, 5, 15), (3, 5, 7), (37, 1, 20), (1, 1000, 500), (100, 37, 1850),
             (64, 64, 2048), (5000, 5000, 1000), (20000, 3, 1000)]


@pytest.mark.parametrize("gen", [uniform, rmat])
@pytest.mark.parametrize("M, N, nnz", GEN_CASES)
def test_generators_give_exactly_nnz_sorted_entries(gen, M, N, nnz):
    if gen is rmat and 2 * nnz > M * N:
        with pytest.raises(SparseInputError, match=r"R-MAT reaches at most 50%") as info:
            gen(M, N, nnz)
        assert "uniform(" in info.value.note
        return
    p = gen(M, N, nnz, seed=7)
    _check_generated(p, M, N, nnz)
    assert _entries(gen(M, N, nnz, seed=7)) == _entries(p)  # deterministic per seed
    if 0 < nnz <= M * N // 4:
        assert _entries(gen(M, N, nnz, seed=8)) != _entries(p)


@settings(max_examples=examples(10, 25), deadline=None)
@given(st.integers(1, 60), st.integers(1, 60), st.floats(0, 1), st.integers(0, 2**31 - 1))
def test_generators_property(M, N, density, seed):
    nnz = int(density * M * N)
    _check_generated(uniform(M, N, nnz, seed=seed), M, N, nnz)
    _check_generated(rmat(M, N, nnz // 2, seed=seed), M, N, nnz // 2)


@pytest.mark.parametrize("gen", [uniform, rmat])
def test_generator_requests_checked(gen):
    for nnz in (-1, 16):
        with pytest.raises(SparseInputError, match=rf"`nnz` = {nnz} does not fit a 3 x 5 matrix"):
            gen(3, 5, nnz)


def test_rmat_parameters_checked():
    with pytest.raises(SparseInputError, match=r"d = 1 - a - b - c = -0.28"):
        rmat(8, 8, 4, a=0.9)
    with pytest.raises(SparseInputError, match=r"noise = 2"):
        rmat(8, 8, 4, noise=2)


def test_rmat_degrees_are_skewed():
    M = N = 4096
    nnz = 40_000
    max_degree = {gen.__name__: int(torch.bincount(gen(M, N, nnz, seed=1).rows).max()) for gen in (uniform, rmat)}
    assert max_degree["uniform"] < 40  # mean degree ~10
    assert max_degree["rmat"] > 10 * max_degree["uniform"], max_degree
    flat = rmat(M, N, nnz, a=0.25, b=0.25, c=0.25, seed=1, noise=0.0)  # a = b = c = d: uniform again
    assert int(torch.bincount(flat.rows).max()) < 40


def test_rmat_quadrants_follow_a_b_c_d():
    for noise in (0.0, 0.1):
        p = rmat(4096, 4096, 40_000, seed=1, noise=noise)
        bottom, right = p.rows >= 2048, p.cols >= 2048
        share = [float(((bottom == i) & (right == j)).float().mean()) for i in (0, 1) for j in (0, 1)]
        assert 0.45 < share[0] < 0.65 and all(0.14 < s < 0.26 for s in share[1:3]) and share[3] < 0.1, share
        assert int(torch.bincount(p.cols).max()) > 400  # columns are skewed too


def test_uniform_is_unbiased():
    M = N = 20_000  # the sampling path: draws with replacement, then a random subset
    p = uniform(M, N, 100_000, seed=5)
    sigma = M / (12 * p.nnz) ** 0.5  # the standard error of a mean index
    for idx in (p.rows, p.cols):
        assert abs(float(idx.double().mean()) - (M - 1) / 2) < 5 * sigma
    for M, N, nnz in ((4, 4, 4), (40, 10, 4)):  # the permutation and the sampling path
        hits = np.zeros((M, N))
        for seed in range(400):
            hits += _dense(uniform(M, N, nnz, seed=seed))
        per_row, expected = hits.sum(1), hits.sum() / M
        assert np.abs(per_row - expected).max() < 5 * expected**0.5, per_row


def test_large_generators():
    """916000^2 with 5M entries (~ the SNAP graphs SDDMM papers use): about 1 s (uniform) and
    2 s (rmat) on one CPU core."""
    M = N = 916_000
    for gen in (uniform, rmat):
        p = gen(M, N, 5_000_000, seed=3)
        _check_generated(p, M, N, 5_000_000)


# ---- tile lists ---------------------------------------------------------------------------


def _brute_tiles(M, N, rows, cols, BM, BN):
    groups: dict[tuple[int, int], list[int]] = {}
    for e, (r, c) in enumerate(zip(rows, cols)):
        groups.setdefault((r // BM, c // BN), []).append(e)
    tiles = sorted(groups)
    ptr = np.cumsum([0] + [len(groups[t]) for t in tiles]).tolist()
    return ptr, [t[0] for t in tiles], [t[1] for t in tiles], [e for t in tiles for e in groups[t]]


def _as_lists(t: TileLists):
    assert all(x.dtype == torch.int32 for x in (t.tile_ptr, t.tile_m, t.tile_n, t.order))
    return t.tile_ptr.tolist(), t.tile_m.tolist(), t.tile_n.tolist(), t.order.tolist()


@settings(max_examples=examples(10, 25), deadline=None)
@given(_patterns(), st.integers(1, 9), st.integers(1, 9), st.sampled_from(["csr", "coo"]))
def test_tile_lists_match_brute_force(pattern, BM, BN, fmt):
    M, N, rows, cols = pattern
    p = as_pattern(_torch_coo(rows, cols, (M, N)), "coo")
    if fmt == "csr":
        p = as_pattern(sp.coo_array((np.ones(len(rows)), (rows, cols)), shape=(M, N)).tocsr(), "csr")
    lists = tile_lists(p, BM, BN)
    assert _as_lists(lists) == _brute_tiles(M, N, p.rows.tolist(), p.cols.tolist(), BM, BN)
    assert lists.T == len(lists.tile_m)


@settings(max_examples=examples(10, 25), deadline=None)
@given(_patterns(), st.integers(1, 9), st.integers(1, 9), st.integers(0, 12))
def test_dispatch_plan_splits_every_entry_once(pattern, BM, BN, dot_below):
    """dispatch_plan against brute force: the tiles with >= dot_below entries in row-major order
    with their entries (tc_ptr, tc_m, tc_n, tc_order), each entry's place in its tile packed in
    tc_rc, the other entries in (row, column) order, every entry exactly once."""
    from tkc.sparse import dispatch_plan

    M, N, rows, cols = pattern
    p = as_pattern(_torch_coo(rows, cols, (M, N)), "coo")
    plan = dispatch_plan(p, BM, BN, dot_below)
    ptr, tm, tn, order = _brute_tiles(M, N, p.rows.tolist(), p.cols.tolist(), BM, BN)
    keep = [t for t in range(len(tm)) if ptr[t + 1] - ptr[t] >= dot_below]
    assert plan.tc_m.tolist() == [tm[t] for t in keep] and plan.tc_n.tolist() == [tn[t] for t in keep]
    assert plan.tc_ptr.tolist() == np.cumsum([0] + [ptr[t + 1] - ptr[t] for t in keep]).tolist()
    assert plan.tc_order.tolist() == [e for t in keep for e in order[ptr[t]:ptr[t + 1]]]
    r, c = p.rows.tolist(), p.cols.tolist()
    want_rc = [((r[e] - tm[t] * BM) << 16) | (c[e] - tn[t] * BN) for t in keep for e in order[ptr[t]:ptr[t + 1]]]
    assert plan.tc_rc.tolist() == want_rc
    dots = sorted((set(range(len(r))) - set(plan.tc_order.tolist())), key=lambda e: (r[e], c[e]))
    assert [(r[e], c[e]) for e in plan.dot_order.tolist()] == [(r[e], c[e]) for e in dots]
    assert len(plan.tensors()) == 6 and all(t.dtype == torch.int32 for t in plan.tensors())
    _check_cuda_launch_data(plan, r, c, BM, BN)
    _check_sequential(plan)
    csr = as_pattern(_torch_coo(rows, cols, (M, N)).coalesce(), "csr")  # the same entries in S's row-major order
    plan = dispatch_plan(csr, BM, BN, dot_below)
    _check_cuda_launch_data(plan, csr.rows.tolist(), csr.cols.tolist(), BM, BN)
    _check_sequential(plan)
    assert plan.tc_rbase.numel() == (plan.n_tc * BM if plan.tc_order.numel() else 0)  # row-major: always ordered
    # every entry a dot product, in S's (row, column) order: dot_order is 0, 1, ... and the plan says so
    dots = dispatch_plan(csr, BM, BN, BM * BN + 1)
    assert dots.dot_sequential == (csr.nnz > 0) and dots.dot_order.tolist() == list(range(csr.nnz))


@settings(max_examples=examples(10, 25), deadline=None)
@given(_patterns(), st.integers(1, 9), st.integers(0, 12), st.sampled_from([1, 4, 16]), st.integers(1, 7))
def test_dot_panels_group_the_dot_entries_by_column_panels(pattern, BM, dot_below, width, entries):
    """DispatchPlan.dot_panels against brute force: the dot-product entries (and no tile entry)
    sorted by (column, row), each once, as row * width + column % width with its index; work
    items (panel, count) in panel order covering them, each of 1 to `entries` entries of its own
    panel in its own `entries` slots (rc 0 and order -1 past count), a panel's entries split into
    as few items as `entries` allows; per_panel the mean entries of the panels that have any;
    panel_counts each panel's entries."""
    from tkc.sparse import dispatch_plan

    M, N, rows, cols = pattern
    p = as_pattern(_torch_coo(rows, cols, (M, N)), "coo")
    plan = dispatch_plan(p, BM, BM, dot_below)
    panels = plan.dot_panels(p.rows, p.cols, N, width, entries)
    assert panels is plan.dot_panels(p.rows, p.cols, N, width, entries)  # memoized
    r, c = p.rows.tolist(), p.cols.tolist()
    dots = sorted(plan.dot_order.tolist(), key=lambda e: (c[e], r[e]))
    n, k, W = len(dots), panels.n_items, entries
    data = panels.data.tolist()
    assert panels.slots == k * W and panels.data.dtype == torch.int32 and len(data) == 2 * k + 2 * k * W
    items, rc, order = [data[2 * i:2 * i + 2] for i in range(k)], data[2 * k:2 * k + k * W], data[2 * k + k * W:]
    got = []  # the items' entries, in item order
    for i, (_, count) in enumerate(items):
        assert 1 <= count <= W
        assert rc[i * W + count:(i + 1) * W] == [0] * (W - count) and order[i * W + count:(i + 1) * W] == [-1] * (W - count)
        got += [(rc[i * W + s], order[i * W + s]) for s in range(count)]
    assert [e for _, e in got] == dots  # (column, row) order, stable: the plan's order among equals
    assert [x for x, _ in got] == [r[e] * width + c[e] % width for e in dots]
    want = []
    for panel in sorted({c[e] // width for e in dots}):
        size = sum(1 for e in dots if c[e] // width == panel)
        want += [[panel, min(entries, size - f)] for f in range(0, size, entries)]
    assert items == want
    used = len({c[e] // width for e in dots})
    assert panels.per_panel == (n / used if used else 0.0)
    counts = plan.panel_counts(p.rows, p.cols, N, width).tolist()
    assert counts == [sum(1 for e in dots if c[e] // width == q) for q in range(max(-(-N // width), 1))]


def _check_sequential(plan):
    """dot_sequential exactly when every entry is a dot product and dot_order is 0, 1, ... (the
    `cuda` runtime then passes no dot_order: a plan that claimed it wrongly computes other entries)."""
    n = plan.n_dot
    assert plan.dot_sequential == (plan.n_tc == 0 and n > 0 and plan.dot_order.tolist() == list(range(n)))


def _check_cuda_launch_data(plan, r, c, BM, BN):
    """The `cuda` tile kernel's forms of the plan: tc_pos packs each tile entry's (row, col) in 16
    bits, zero-padded to 16 bytes; tc_rbase, where given, gives every tile entry's index from its
    slot and its row."""
    order, n = plan.tc_order.tolist(), plan.tc_order.numel()
    assert plan.cuda_tensors()[:5] == plan.tensors()[:5] and len(plan.cuda_tensors()) == 7
    assert plan.tc_pos.dtype == torch.int16 and plan.tc_pos.numel() % 8 == 0 and n <= plan.tc_pos.numel() < n + 8
    assert (plan.tc_pos[:n].int() & 0xffff).tolist() == [((r[e] % BM) << 8) | (c[e] % BN) for e in order]
    assert not plan.tc_pos[n:].any()
    if plan.tc_rbase.numel():
        assert plan.tc_rbase.dtype == torch.int32 and plan.tc_rbase.numel() == plan.n_tc * BM
        ptr, base = plan.tc_ptr.tolist(), plan.tc_rbase.tolist()
        assert all(order[s] == base[t * BM + r[order[s]] % BM] + s
                   for t in range(plan.n_tc) for s in range(ptr[t], ptr[t + 1]))


@settings(max_examples=examples(10, 25), deadline=None)
@given(_patterns(), st.integers(1, 5), st.integers(1, 5), st.integers(0, 3), st.integers(0, 40),
       st.sampled_from(["csr", "coo"]))
def test_dispatch_plan_orders_the_tiles_past_one_per_sm(pattern, BM, BN, dot_below, sms, fmt):
    """With `sms` SMs and more tensor-core tiles than SMs, at most twice as many, the plan's tiles
    are the row-major plan's in tile_order's order, each with its own entries in its own order
    (tc_rc, tc_pos and tc_rbase follow); with fewer tiles, more, or no SMs, the row-major plan
    itself. A tile whose entries moved with another tile's place computes wrong entries."""
    from tkc.sparse import dispatch_plan, tile_order

    M, N, rows, cols = pattern
    p = as_pattern(_torch_coo(rows, cols, (M, N)), "coo")
    if fmt == "csr":
        p = as_pattern(_torch_coo(rows, cols, (M, N)).coalesce(), "csr")
    base, plan = dispatch_plan(p, BM, BN, dot_below), dispatch_plan(p, BM, BN, dot_below, sms)
    T = base.n_tc
    perm = tile_order(base.tc_ptr[1:] - base.tc_ptr[:-1], sms).tolist() if 0 < sms < T <= 2 * sms else list(range(T))
    assert plan.tc_m.tolist() == [base.tc_m[t] for t in perm] and plan.tc_n.tolist() == [base.tc_n[t] for t in perm]
    bp, pp = base.tc_ptr.tolist(), plan.tc_ptr.tolist()
    for i, t in enumerate(perm):  # tile t's entries, in the same order, at its new place
        assert plan.tc_order[pp[i]:pp[i + 1]].tolist() == base.tc_order[bp[t]:bp[t + 1]].tolist()
        assert plan.tc_rc[pp[i]:pp[i + 1]].tolist() == base.tc_rc[bp[t]:bp[t + 1]].tolist()
    assert plan.dot_order.tolist() == base.dot_order.tolist()
    _check_cuda_launch_data(plan, p.rows.tolist(), p.cols.tolist(), BM, BN)
    _check_sequential(plan)
    assert plan.tc_rbase.numel() == base.tc_rbase.numel()


@settings(max_examples=examples(20, 60), deadline=None)
@given(st.lists(st.integers(1, 100), min_size=2, max_size=60), st.data())
def test_tile_order_puts_the_lightest_at_both_ends(counts, data):
    """tkc.sparse.tile_order for T tiles on sms < T <= 2 sms SMs: a permutation whose last X =
    T - sms tiles (each beside tile i < X while it runs) are the X lightest, whose first X are
    the next X lightest, and whose middle goes heaviest first."""
    from tkc.sparse import tile_order

    T = len(counts)
    sms = data.draw(st.integers(-(-T // 2), T - 1))
    X = T - sms
    perm = tile_order(torch.tensor(counts), sms).tolist()
    assert sorted(perm) == list(range(T))
    got = [counts[t] for t in perm]
    ranked = sorted(counts)
    assert sorted(got[T - X:]) == ranked[:X] and sorted(got[:X]) == ranked[X:2 * X]
    assert got[X:T - X] == sorted(got[X:T - X], reverse=True)
    for bad in (0, T, 2 * T):  # no SMs, as many SMs as tiles or more
        with pytest.raises(ValueError, match="expected more tiles than SMs"):
            tile_order(torch.tensor(counts), bad)


def test_dispatch_plan_row_bases_only_for_rows_in_order():
    """A coo pattern whose tile row has another tile's entry between two of its own in S's order
    has no tc_rbase (the kernel reads tc_order); one whose rows are merely interleaved has it;
    257-row tiles keep tc_pos in int32 form."""
    from tkc.sparse import dispatch_plan

    def coo(rows, cols):
        return SparsePattern(4, 8, "coo", torch.tensor(rows, dtype=torch.int32), torch.tensor(cols, dtype=torch.int32))

    p = coo([0, 0, 0], [0, 5, 1])  # row 0 of tile (0, 0): entries 0 and 2, at slots 0 and 1
    plan = dispatch_plan(p, 4, 4, 0)
    assert plan.tc_order.tolist() == [0, 2, 1] and plan.tc_rbase.numel() == 0
    interleaved = dispatch_plan(coo([0, 1, 0, 2], [0, 0, 1, 7]), 4, 4, 0)  # slot s of tile 0 holds entry s
    assert interleaved.tc_order.tolist() == [0, 1, 2, 3] and interleaved.tc_rbase.tolist() == [0] * 8
    wide = dispatch_plan(p, 257, 4, 0)
    assert wide.tc_pos.dtype == torch.int32 and wide.tc_pos[:3].tolist() == [0, 1, 1] and wide.tc_pos.numel() == 4


def test_tile_lists_edges():
    empty = uniform(10, 10, 0)
    assert _as_lists(tile_lists(empty, 4, 4)) == ([0], [], [], [])
    full = uniform(7, 9, 63)  # every tile, partial ones at the right and bottom
    lists = tile_lists(full, 4, 4)
    assert lists.T == 2 * 3 and lists.tile_ptr.tolist() == [0, 16, 32, 36, 48, 60, 63]
    assert lists.tile_m.tolist() == [0, 0, 0, 1, 1, 1] and lists.tile_n.tolist() == [0, 1, 2, 0, 1, 2]
    assert _as_lists(lists) == _brute_tiles(7, 9, full.rows.tolist(), full.cols.tolist(), 4, 4)
    with pytest.raises(SparseInputError, match="tile shape 0 x 4"):
        tile_lists(full, 0, 4)


def test_tile_lists_memoized_per_pattern_object():
    p = uniform(50, 60, 300, seed=2)
    first = tile_lists(p, 16, 32)
    assert tile_lists(p, 16, 32) is first
    assert tile_lists(p, 32, 16) is not first
    twin = SparsePattern(p.M, p.N, p.fmt, p.rows, p.cols)  # equal, but another object
    again = tile_lists(twin, 16, 32)
    assert again is not first and _as_lists(again) == _as_lists(first)

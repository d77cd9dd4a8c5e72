"""The CUDA backend's SDDMM kernel (codegen/cuda_sddmm.py) on the CPU emulation
(tests/cuda_emu): its dot-product path and its launch data (tkc.sparse.DispatchPlan, B transposed,
a grid sized per pattern), with f32 operands (the emulation has no f16 and no tensor cores; the
tensor-core path runs in tests/gpu/test_gpu_sddmm.py). Against torch in float64 at the entries,
values output (starting as NaN: an entry left unwritten fails) and dense output (zero-filled, as
the runtime does), K with and without 16-byte vectors, tiles cut by M and N, empty rows."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen import cuda
from profiles import examples
from passes.smem_sddmm import rc_packed16
from tkc import driver, oracle
from tkc import sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_emu"))
import emulate  # noqa: E402

if emulate.gxx() is None:
    pytest.skip("no g++ with C++20 <barrier> for the CUDA emulation", allow_module_level=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL = """kernel sddmm<BM={bm}, BN={bn}, threads={threads}>(A: f32[M, K], B: f32[K, N], S: {fmt}[M, N, NNZ]) -> (P: f32[{out}])
    where M = {M}, N = {N}, K = {K}, NNZ = {nnz}
{{
    grid (tiles(S, BM, BN)) as (m, n) threads(threads)
    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]
}}
"""
_BUILT: dict[str, tuple] = {}


def _kernel(tmp_path, nulls=(), panels=False, **kw):
    """(executable, work dir, dot_below, module, source) of the f32 SDDMM kernel `KERNEL` with
    `kw` emulated: the launch line's kernel (the dot products), or with `panels` the dot
    products by column panels (`<kernel>_panels`, grid read after the scalars, its blocks run
    from the last: a block that computes the next item's entries with its own panel is seen)."""
    text = KERNEL.format(**kw)
    if (text, nulls, panels) not in _BUILT:
        path = tmp_path / "sddmm_f32.tk"
        path.write_text(text)
        module = driver.optimize(driver.frontend(str(path)), "cuda")
        source = cuda.emit(module)
        work = tmp_path / f"emu{len(_BUILT)}"
        work.mkdir()
        pos = "u16" if rc_packed16(kw["bm"], kw["bn"]) else "i32"  # tc_pos, then tc_rbase
        dtypes = ["f32", "f32", "i32", "i32", "f32", "f32", "i32", "i32", "i32", "i32", "i32", pos, "i32"]
        sddmm = cuda.launch_config(source)["sddmm"]
        if panels:
            assert sddmm["panel_kernel"] == "sddmm_panels" and sddmm["panel_smem"] > 0
        exe = emulate.build(source, dtypes, 2, str(work), nulls=nulls,
                            kernel=(sddmm["panel_kernel"], sddmm["panel_threads"]) if panels else None,
                            reverse=panels)
        op = next(o for o in module.func.walk() if o.name == "tile.sampled_gemm")
        _BUILT[(text, nulls, panels)] = (exe, str(work), int(op.attrs["dot_below"]), module, source)
    return _BUILT[(text, nulls, panels)]


def _run(exe: str, work: str, arrays: list[np.ndarray], ints: list[int], out_at: int, zero_out: bool) -> np.ndarray:
    import subprocess

    bufs = [np.ascontiguousarray(a) for a in arrays]
    if not zero_out:  # NaN bytes: an entry the kernel never writes stays NaN
        bufs[out_at] = np.full(bufs[out_at].shape, np.nan, np.float32)
    with open(os.path.join(work, "in.bin"), "wb") as f:
        f.write(b"".join(b.tobytes() for b in bufs))
    r = subprocess.run([exe, os.path.join(work, "in.bin"), os.path.join(work, "out.bin"), *map(str, ints),
                        *[str(b.nbytes) for b in bufs]], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    data = np.fromfile(os.path.join(work, "out.bin"), dtype=np.uint8)
    pos = sum(b.nbytes for b in bufs[:out_at])
    return data[pos:pos + bufs[out_at].nbytes].view(np.float32).reshape(bufs[out_at].shape).copy()


def _operands(M: int, N: int, K: int, seed: int):
    """A [M, K] and B [K, N], f32, rows of A and columns of B scaled by powers of two from 1/16 to 8
    (so that a wrong pairing of rows and columns shows)."""
    g = torch.Generator().manual_seed(seed)
    A = (torch.randn(M, K, generator=g) * torch.exp2(torch.randint(-4, 4, (M, 1), generator=g).float()))
    B = (torch.randn(K, N, generator=g) * torch.exp2(torch.randint(-4, 4, (1, N), generator=g).float()))
    return A, B


def _assert_matches(module, got, A, B, p, dense: bool) -> None:
    """`got` (P at p's entries, or dense with zeros elsewhere) against A @ B in float64 within the
    oracle's tolerance for `module`."""
    vals = (A.double() @ B.double())[p.rows.long(), p.cols.long()]
    if dense:
        ref = torch.zeros(A.shape[0], B.shape[1], dtype=torch.float64)
        ref[p.rows.long(), p.cols.long()] = vals
    else:
        ref = vals
    tol = oracle.error_budgets(module)["P"].tol("f32")
    err = oracle.rel_error(got, ref)
    assert err <= tol, f"relative error {err:.3e} > {tol:.3e}"


def _check(tmp_path, M, N, K, nnz, bm, bn, dense, empty_every, seed, sequential=False):
    """`sequential`: dot_order passed as a null pointer, as the runtime does for a plan whose
    dot_order is 0, 1, ... (`dot_sequential`)."""
    fmt = "coo" if dense else "csr"
    exe, work, dot_below, module, _ = _kernel(tmp_path, (10,) if sequential else (), bm=bm, bn=bn, threads=64, fmt=fmt,
                                              out="M, N" if dense else "NNZ", M=M, N=N, K=K, nnz=nnz)
    p = sp.uniform(M, N, nnz, seed=seed)
    A, B = _operands(M, N, K, seed)
    plan = sp.dispatch_plan(p, bm, bn, dot_below)
    assert plan.n_tc == 0 and plan.n_dot == nnz  # f32: every entry a dot product
    assert plan.dot_sequential  # S in (row, column) order
    out = np.zeros((M, N) if dense else (nnz,), np.float32)
    arrays = [A.numpy(), B.numpy(), p.rows.numpy(), p.cols.numpy(), out, B.t().contiguous().numpy(),
              *[t.numpy() for t in plan.cuda_tensors()]]
    got = torch.from_numpy(_run(exe, work, arrays, [plan.n_tc, plan.n_dot], 4, dense))
    _assert_matches(module, got, A, B, p, dense)


def _check_panels(tmp_path, M, N, K, nnz, dense, seed, rmat=False, entries=None):
    """The dot products by column panels of B (`<kernel>_panels` over tkc.sparse.DotPanels, in
    dot_order's place, its slots as n_dot), with Bt passed as NaN: the kernel reads B itself.
    Work items of `entries` slots (default: the launch line's `panel_entries`)."""
    fmt = "coo" if dense else "csr"
    exe, work, dot_below, module, source = _kernel(tmp_path, panels=True, bm=16, bn=8, threads=64, fmt=fmt,
                                                   out="M, N" if dense else "NNZ", M=M, N=N, K=K, nnz=nnz)
    sddmm = cuda.launch_config(source)["sddmm"]
    p = (sp.rmat if rmat else sp.uniform)(M, N, nnz, seed=seed)
    A, B = _operands(M, N, K, seed)
    plan = sp.dispatch_plan(p, 16, 8, dot_below)
    assert plan.n_tc == 0 and plan.n_dot == nnz
    panels = plan.dot_panels(p.rows, p.cols, N, sddmm["panel_width"], entries or sddmm["panel_entries"])
    out = np.zeros((M, N) if dense else (nnz,), np.float32)
    launch = [t.numpy() for t in plan.cuda_tensors()]
    launch[4] = panels.data.numpy()  # dot_order's place
    arrays = [A.numpy(), B.numpy(), p.rows.numpy(), p.cols.numpy(), out, np.full((N, K), np.nan, np.float32), *launch]
    got = torch.from_numpy(_run(exe, work, arrays, [plan.n_tc, panels.slots, panels.n_items], 4, dense))
    _assert_matches(module, got, A, B, p, dense)


@pytest.mark.parametrize("dense, entries", [(False, None), (True, None), (False, 5), (True, 48)])
def test_panel_path_against_torch(tmp_path, dense, entries):
    """Panels of 8 f32 columns, the last one cut by N = 44; a work item of at most 128 entries
    (the launch line's), 48 or 5, so a dense panel's entries span several blocks; at K = 256, 32
    lanes per entry and 4 entries per group: rounds of 16 entries, a short item's last ending
    mid-warp, and with 5 a first round wider than the item's slots (the next item's entries are
    not its own)."""
    _check_panels(tmp_path, 300, 44, 256, 1500, dense, 3, entries=entries)


def test_panel_path_rmat_against_torch(tmp_path):
    """Power-law columns: panels from empty to hundreds of entries; K = 276, 16 lanes per entry
    (two rounds of 64 entries per full item), K not a multiple of the lanes' stride (64)."""
    _check_panels(tmp_path, 200, 64, 276, 2000, False, 4, rmat=True)


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("K", [64, 13])
def test_dot_path_against_torch(tmp_path, dense, K):
    _check(tmp_path, 45, 38, K, 300, 16, 8, dense, 0, 1)


@pytest.mark.parametrize("dense", [False, True])
def test_dot_path_sequential_against_torch(tmp_path, dense):
    """dot_order as a null pointer (the runtime's `dot_sequential`): entry i is the i-th."""
    _check(tmp_path, 45, 38, 64, 300, 16, 8, dense, 0, 2, sequential=True)


@settings(max_examples=4, deadline=None)
@given(M=st.integers(1, 40), N=st.integers(1, 40), K=st.sampled_from([4, 7, 32]), fill=st.floats(0.05, 1.0),
       seed=st.integers(0, 2**16))
def test_dot_path_property(tmp_path_factory, M, N, K, fill, seed):
    nnz = max(1, int(M * N * fill))
    _check(tmp_path_factory.mktemp("sddmm"), M, N, K, nnz, 16, 16, False, 0, seed)


GROUPS_KERNEL = """kernel sddmm<BM=128, BN=128, threads=256>(A: {dt}[M, K], B: {dt}[K, N], S: {fmt}[M, N, NNZ]) -> (P: f32[{out}])
    where M = {M}, N = {N}, K = 32, NNZ = {nnz}
{{
    grid (tiles(S, BM, BN)) as (m, n) threads(threads)
    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]
}}
"""


def _check_groups(tmp_path, M, N, nnz, dense, seed, dt="f16", kind="uniform", blocks=3, pattern=None, from_b=False):
    """`<kernel>_groups` (K = 32, 16-bit A and B) over tkc.sparse.RowGroups, in dot_order's place
    (its work items as n_tc, its slots as n_dot), its blocks run from the last; B passed as NaN
    (the kernel reads Bt). With `from_b`, `<kernel>_groups_b` with Bt passed as NaN (it transposes
    its panels from B). Against float64 torch on the 16-bit operands' values."""
    name = "sddmm_groups_b" if from_b else "sddmm_groups"
    text = GROUPS_KERNEL.format(dt=dt, fmt="coo" if dense else "csr", out="M, N" if dense else "NNZ", M=M, N=N, nnz=nnz)
    if (text, name) not in _BUILT:
        path = tmp_path / "sddmm_groups.tk"
        path.write_text(text)
        module = driver.optimize(driver.frontend(str(path)), "cuda")
        source = cuda.emit(module)
        sddmm = cuda.launch_config(source)["sddmm"]
        assert sddmm["group_kernel"] == "sddmm_groups" and sddmm["group_threads"] == 1024
        assert sddmm["group_b_kernel"] == ("sddmm_groups_b" if N % 8 == 0 else None)
        work = tmp_path / f"emu{len(_BUILT)}"
        work.mkdir()
        dtypes = [dt, dt, "i32", "i32", "f32", dt, "i32", "i32", "i32", "i32", "i32", "u16", "i32"]
        exe = emulate.build(source, dtypes, 2, str(work), kernel=(name, 1024), reverse=True)
        _BUILT[(text, name)] = (exe, str(work), module)
    exe, work, module = _BUILT[(text, name)]
    p = pattern or (sp.rmat if kind == "rmat" else sp.uniform)(M, N, nnz, seed=seed)
    A, B = _operands(M, N, 32, seed)
    tdt = torch.float16 if dt == "f16" else torch.bfloat16
    A, B = A.to(tdt), B.to(tdt)
    g = sp.row_groups(p, 32, blocks, dense)
    bits = (lambda t: t.view(torch.int16).numpy())
    out = np.zeros((M, N) if dense else (p.nnz,), np.float32)  # (the kernel's NNZ is not in its code)
    empty = np.zeros(1, np.int32)
    nan_b, nan_bt = np.full((32, N), -1, np.int16), np.full((N, 32), -1, np.int16)
    arrays = [bits(A), bits(B) if from_b else nan_b, p.rows.numpy(), p.cols.numpy(), out,
              nan_bt if from_b else bits(B.t().contiguous()),
              empty, empty, empty, empty, g.data.numpy(), np.zeros(1, np.int16), empty]
    got = torch.from_numpy(_run(exe, work, arrays, [g.n_items, g.slots, g.n_blocks], 4, dense))
    _assert_matches(module, got, A.float(), B.float(), p, dense)
    return g


@pytest.mark.parametrize("dense, dt, kind, from_b", [(False, "f16", "uniform", False), (True, "f16", "uniform", False),
                                                     (False, "bf16", "rmat", False), (False, "f16", "rmat", True),
                                                     (True, "bf16", "uniform", True)])
def test_groups_path_against_torch(tmp_path, dense, dt, kind, from_b):
    """Two panels of 2560 columns (the second cut at N = 3000), row groups cut by M = 90, items
    up to 128 entries (8 batches of 16) and short ones, a block per panel span; f16 and bf16; the
    panels from Bt and (`<kernel>_groups_b`) from B itself, the second panel's 440 columns not a
    multiple of the 1024 threads' 4-column shares."""
    g = _check_groups(tmp_path, 90, 3000, 6000, dense, 5, dt, kind, from_b=from_b)
    assert g.n_blocks >= 2 and g.n_items > 8


def test_groups_path_one_block_many_items(tmp_path):
    """Rows of many entries (a full one) and rows of none: items of 128 entries and short last
    ones, 48 in one block's span, so its first 16 warps take two items each (the second's words
    loaded while the first's batches run)."""
    rng = np.random.default_rng(7)
    cols = np.concatenate([np.arange(2560), np.sort(rng.permutation(2560)[:2000]), np.sort(rng.permutation(2560)[:1500])])
    rows = np.repeat([3, 5, 10], [2560, 2000, 1500])
    p = sp.SparsePattern(17, 2560, "csr", torch.tensor(rows, dtype=torch.int32), torch.tensor(cols, dtype=torch.int32))
    g = _check_groups(tmp_path, 17, 2560, 6060, False, 7, blocks=1, pattern=p)
    assert g.n_blocks == 1 and g.n_items == 48


@settings(max_examples=examples(3, 10), deadline=None)
@given(nnz=st.integers(1, 20000), kind=st.sampled_from(["uniform", "rmat"]), blocks=st.integers(1, 4),
       seed=st.integers(0, 2**16), from_b=st.booleans())
def test_groups_path_property(tmp_path_factory, nnz, kind, blocks, seed, from_b):
    """Any pattern of a 70 x 2600 matrix (two panels, the second of 40 columns; one build per
    kernel: its constants do not depend on the pattern), 1 to 4 blocks, panels from Bt or B."""
    M, N = 70, 2600
    nnz = min(nnz, M * N // 2 if kind == "rmat" else M * N)
    _check_groups(tmp_path_factory.mktemp("groups"), M, N, 1000, False, seed, kind=kind, blocks=blocks,
                  pattern=(sp.rmat if kind == "rmat" else sp.uniform)(M, N, nnz, seed=seed), from_b=from_b)

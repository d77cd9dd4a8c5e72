"""SDDMM (issue 12) on the GPU: every example through both GPU backends, on both paths of the
`sparse-dispatch` split (all tiles on tensor cores, all entries as dot products, and the cost
model's mix), at tile-edge shapes (M, N not multiples of the tile, K not a multiple of 16 or of
8), uniform and R-MAT patterns, empty rows, an empty and a full pattern, f16, bf16 and f32
operands; against torch in float64 on the same inputs (tolerance from tkc/oracle.py's budget for
the kernel's dtypes and K). Inputs and outputs are fenced by NaN (tests/fenced.py): a store
outside P or an entry left unwritten fails.

Run on the device machine: `python3 -m pytest -q -m gpu -n 8 tests/gpu/test_gpu_sddmm.py
tests/gpu/test_gpu_sddmm_wgmma.py` (the issue's GPU tests). Each case builds one kernel (one
shape, every split), so the TileLang builds (10-40 s each) spread over the workers.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import tkc
from tkc import oracle
from tkc import sparse as sp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fenced import launch_fenced  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier: serial TileLang builds of 10-40 s each; tests/gpu/test_gpu_quick.py covers its examples
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = ["sddmm", "sddmm_wmma_16x16x16", "sddmm_wmma_32x8x16", "sddmm_wmma_8x32x16"]
TARGETS = ("cuda", "tilelang")
SPLITS = {"model": None, "tensor-cores": 0, "dots": 10**9}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tkc-cache"))


def _pattern(kind: str, M: int, N: int, nnz: int, seed: int, fmt: str) -> sp.SparsePattern:
    p = sp.rmat(M, N, nnz, seed=seed) if kind == "rmat" else sp.uniform(M, N, nnz, seed=seed)
    if fmt == "coo" and p.nnz:  # a COO pattern in a shuffled order: P follows it
        perm = torch.randperm(p.nnz, generator=torch.Generator().manual_seed(seed))
        p = sp.SparsePattern(M, N, "coo", p.rows[perm].contiguous(), p.cols[perm].contiguous())
    return p


def _check(kernel, A, B, p, dtype=torch.float32):
    """Run fenced, compare with float64 torch at the entries (dense P: zero elsewhere)."""
    inputs = [A, B, p]
    artifact, _ = kernel.specialize(kernel.bind_dims([A, B, sp.as_pattern(p, kernel.inputs[2].dtype)]))
    module = artifact.module
    (out,) = launch_fenced(kernel, inputs)
    torch.cuda.synchronize()
    rows, cols = p.rows.long().cuda(), p.cols.long().cuda()
    full = A.double() @ B.double()
    vals = full[rows, cols]
    if out.dim() == 2:
        ref = torch.zeros_like(full)
        ref[rows, cols] = vals
    else:
        ref = vals
    assert not torch.isnan(out).any(), f"{int(torch.isnan(out).sum())} entries of P left unwritten"
    if p.nnz == 0:
        assert out.numel() == 0 or bool((out == 0).all())
        return
    (name, odt), = oracle.outputs(module)
    tol = oracle.error_budgets(module)[name].tol(odt)
    err = oracle.rel_error(out, ref)
    assert err <= tol, f"relative error {err:.3e} > tolerance {tol:.3e}"


def _operands(M: int, N: int, K: int, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    # a mix of magnitudes (and signs) so that a wrong pairing of rows and columns shows
    A = (torch.randn(M, K, generator=g) * torch.exp2(torch.randint(-3, 3, (M, 1), generator=g).float())).to(dtype)
    B = (torch.randn(K, N, generator=g) * torch.exp2(torch.randint(-3, 3, (1, N), generator=g).float())).to(dtype)
    return A.cuda(), B.cuda()


SHAPES = [(157, 200, 40, 3000, "uniform"),  # partial tiles, K % 16 != 0; on `cuda` dot products by column panels
          (300, 260, 256, 30000, "rmat"),  # dense and sparse tiles
          (64, 48, 24, 64 * 48, "uniform")]  # every position


@pytest.mark.parametrize("target, example, shape", [(t, e, i) for t in TARGETS for e in EXAMPLES
                                                    for i in range(len(SHAPES))])
def test_examples_on_both_paths(target, example, shape, cache_dir):
    """Each case builds one kernel (one shape; TileLang builds take 10-40 s) and runs it on the
    three splits, so the cases spread over the workers one build each."""
    kernel = tkc.compile(os.path.join(ROOT, "examples", f"{example}.tk"), target=target, cache_dir=cache_dir)
    fmt = kernel.inputs[2].dtype
    M, N, K, nnz, kind = SHAPES[shape]
    A, B = _operands(M, N, K, torch.float16, shape)
    p = _pattern(kind, M, N, nnz, shape, fmt)
    for split in SPLITS.values():
        kernel.dot_below = split
        _check(kernel, A, B, p)


@pytest.mark.parametrize("example", EXAMPLES)
def test_cuda_dot_products_by_panels_and_by_rows(example, cache_dir, monkeypatch):
    """Both forms of the `cuda` dot products on one kernel and pattern: by column panels of B
    (`<kernel>_panels`) and by rows after B's transpose (`<kernel>_dots`), forced by the
    runtime's threshold (tkc.runtime.PANEL_MEAN_MAX); N = 328, so the last panel is half past N.
    R-MAT columns, so panels hold from none to hundreds of entries and split into several items of
    128; and uniform patterns of 1000 and 600 entries, whose items the runtime halves to 64 and 32
    (tkc.runtime.PANEL_SLOTS_PER_ENTRY_MAX: their slots padded, a round wider than an item of 32)."""
    from tkc import runtime

    kernel = tkc.compile(os.path.join(ROOT, "examples", f"{example}.tk"), target="cuda", cache_dir=cache_dir)
    A, B = _operands(400, 328, 136, torch.float16, 21)
    kernel.dot_below = SPLITS["dots"]
    chosen = []  # the launch keywords of each call
    given = kernel._b_transposed
    monkeypatch.setattr(kernel, "_b_transposed", lambda *a: chosen.append(given(*a)[1]) or given(*a))
    sizes = set()
    for kind, nnz in (("rmat", 12000), ("uniform", 1000), ("uniform", 600)):
        p = _pattern(kind, 400, 328, nnz, 21, kernel.inputs[2].dtype)
        counts = torch.bincount(p.cols.long() // 16, minlength=21)
        want = next(size for size in (128, 64, 32) if int((-(-counts // size)).sum()) * size <= 2 * nnz)
        for most in (10**9, 0):  # panels, then rows
            monkeypatch.setattr(runtime, "PANEL_MEAN_MAX", most)
            _check(kernel, A, B, p)
            assert ("dot_panels" in chosen[-1]) == (most > 0) and ("fill_bt" in chosen[-1]) == (most == 0), chosen[-1]
            if most:
                panels = chosen[-1]["dot_panels"]
                assert panels.slots == panels.n_items * want
                sizes.add(want)
    assert sizes == {128, 64, 32}


@pytest.mark.parametrize("kind", ["rmat", "uniform"])
def test_cuda_tiles_past_one_per_sm(kind, cache_dir):
    """More tensor-core tiles than the GPU has SMs, at most twice as many (t x t tiles of
    128 x 128, the last row and column 88 wide): the call's plan launches them in
    tkc.sparse.tile_order's order (the lightest at both ends), and every entry matches float64
    torch. R-MAT tiles of uneven weights, and uniform ones whose edge tiles are the light ones."""
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda", cache_dir=cache_dir)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    t = next(t for t in range(1, 64) if t * t > sms)
    assert t * t <= 2 * sms
    M = N = 128 * t - 40
    A, B = _operands(M, N, 72, torch.float16, 31)
    p = _pattern(kind, M, N, M * N // 4, 31, "csr").to("cuda")
    kernel.dot_below = SPLITS["tensor-cores"]
    _check(kernel, A, B, p)
    plan = p._memo[("dispatch", 128, 128, 0, sms)]  # (the call's plan, on the pattern it was given)
    base = sp.dispatch_plan(p, 128, 128, 0)
    counts = base.tc_ptr[1:] - base.tc_ptr[:-1]
    assert plan.n_tc == t * t and plan.tc_m.tolist() == base.tc_m[sp.tile_order(counts, sms)].tolist()
    assert plan.tc_n.tolist() == base.tc_n[sp.tile_order(counts, sms)].tolist()


@pytest.mark.parametrize("target", TARGETS)
def test_odd_k_empty_rows_and_empty_pattern(target, cache_dir):
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target=target, cache_dir=cache_dir)
    A, B = _operands(90, 70, 13, torch.float16, 7)  # K = 13: no 16-byte vectors
    p = sp.uniform(90, 70, 400, seed=3)
    keep = p.rows % 3 != 0  # every third row empty
    p = sp.SparsePattern(90, 70, "csr", p.rows[keep].contiguous(), p.cols[keep].contiguous())
    for split in SPLITS.values():
        kernel.dot_below = split
        _check(kernel, A, B, p)
        # the public call: the runtime's launch data (B transposed by the kernel itself on `cuda`)
        P = kernel(A, B, p)
        ref = (A.double() @ B.double())[p.rows.long().cuda(), p.cols.long().cuda()]
        assert oracle.rel_error(P, ref) < 1e-5
    _check(kernel, A, B, sp.uniform(90, 70, 0))
    assert kernel(A, B, sp.uniform(90, 70, 0)).numel() == 0


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("target", TARGETS)
def test_other_operand_dtypes(target, dtype, tmp_path, cache_dir):
    src = open(os.path.join(ROOT, "examples", "sddmm.tk")).read().replace("f16[", f"{dtype}[")
    path = tmp_path / f"sddmm_{dtype}.tk"
    path.write_text(src)
    kernel = tkc.compile(str(path), target=target, cache_dir=cache_dir)
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype]
    for split in SPLITS.values():
        kernel.dot_below = split
        A, B = _operands(130, 100, 72, tdt, 11)
        _check(kernel, A, B, sp.rmat(130, 100, 2500, seed=5))


def test_api_with_torch_sparse_and_transposed_b(cache_dir):
    """The public call: a torch CSR tensor in, values in its order out; B given as a transposed
    view (the common `X.T` of attention and GNNs) is read without a copy."""
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda", cache_dir=cache_dir)
    A, X = _operands(500, 400, 64, torch.float16, 3)
    Bt = X.t().contiguous().t()  # [K, N] view of an [N, K] tensor
    p = sp.uniform(500, 400, 9000, seed=9)
    S = p.to_torch(layout="csr").cuda()
    P = kernel(A, Bt, S)
    ref = torch.sparse.sampled_addmm(S.to(torch.float64), A.double(), Bt.double(), beta=0.0).values()
    assert oracle.rel_error(P, ref) < 1e-5


@pytest.mark.parametrize("kind, dense, dtype", [("uniform", False, torch.float16), ("rmat", False, torch.float16),
                                                ("uniform", True, torch.bfloat16)])
def test_cuda_row_groups_kernel(kind, dense, dtype, tmp_path):
    """`<kernel>_groups` (K = 32: every entry by row groups on mma.sync against a panel of Bt in
    shared memory; tkc.sparse.RowGroups) launched through CudaLaunch with `row_groups`, after the
    kernel's own transpose of B, one block per SM; P starts as NaN (an entry left unwritten
    fails). Three panels (N = 6000), rows of no entries, R-MAT's dense rows. The runtime's choice of it:
    test_public_call_takes_row_groups_at_k32 (docs/PERFORMANCE.md "K = 32 by row groups")."""
    from codegen import cuda
    from tkc import cuda_runtime, driver

    M, N = 3000, 6000
    path = os.path.join(ROOT, "examples", "sddmm.tk")
    text = open(path).read()
    if dense:
        text = text.replace("-> (P: f32[NNZ])", "-> (P: f32[M, N])").replace("csr[M, N, NNZ]", "coo[M, N, NNZ]")
    text = text.replace("A: f16[M, K], B: f16[K, N]", "A: bf16[M, K], B: bf16[K, N]") if dtype == torch.bfloat16 else text
    src = tmp_path / "sddmm32.tk"
    src.write_text(text)
    source = cuda.emit(driver.optimize(driver.frontend(str(src), {"M": M, "N": N, "K": 32, "NNZ": 400_000}), "cuda"))
    cu = tmp_path / "sddmm32.cu"
    cu.write_text(source)
    launch = cuda_runtime.CudaLaunch(str(cu), source)
    assert launch.group_kernel == "sddmm_groups" and launch.group_dense == dense
    p = _pattern(kind, M, N, 400_000, 3, "csr").to("cuda")
    g = torch.Generator(device="cuda").manual_seed(3)
    A = torch.randn(M, 32, device="cuda", generator=g).to(dtype)
    B = torch.randn(32, N, device="cuda", generator=g).to(dtype)
    P = torch.full((M, N) if dense else (p.nnz,), float("nan"), device="cuda")
    if dense:
        P.zero_()
    plan = sp.dispatch_plan(p, 128, 128, 0)
    groups = sp.row_groups(p, 32, torch.cuda.get_device_properties(0).multi_processor_count, dense)
    bt = torch.empty(N, 32, device="cuda", dtype=dtype)
    vals = (A.double() @ B.double())[p.rows.long(), p.cols.long()]
    for from_b in (False, True):  # Bt by the transpose kernel, then the panels from B itself (`<kernel>_groups_b`)
        if from_b:
            P.fill_(float("nan"))
            if dense:
                P.zero_()
            bt.fill_(float("nan"))
        launch(A, B, p.rows, p.cols, P, bt, *plan.cuda_tensors(), **({"groups_from_b": True} if from_b else
                                                                       {"fill_bt": True}), row_groups=groups)
        torch.cuda.synchronize()
        got = P[p.rows.long(), p.cols.long()] if dense else P
        assert not got.isnan().any()
        err = ((got.double() - vals).abs().max() / vals.abs().max()).item()
        assert err < 1e-5, (from_b, err)
    if dense:
        mask = torch.ones(M, N, dtype=torch.bool, device="cuda")
        mask[p.rows.long(), p.cols.long()] = False
        assert (P[mask] == 0).all()


@pytest.mark.parametrize("kind, transposed", [("uniform", False), ("rmat", True)])
def test_public_call_takes_row_groups_at_k32(kind, transposed, cache_dir, monkeypatch):
    """The public call on `cuda` at K = 32 (examples/sddmm.tk, f16) takes the row groups where the
    runtime's rule says so (tkc/runtime.py `_groups_for`: 600k entries over 3000 x 6000, 3.3% of S,
    hundreds per cell), through the full path and then the pattern's kept record; B contiguous
    (`<kernel>_groups_b` transposes its panels from B) or a transposed view (read as it is).
    Against float64 torch; P never holds NaN."""
    kernel = tkc.compile(os.path.join(ROOT, "examples", "sddmm.tk"), target="cuda", cache_dir=cache_dir)
    chosen = []
    given = kernel._b_transposed
    monkeypatch.setattr(kernel, "_b_transposed", lambda *a: chosen.append(given(*a)[1]) or given(*a))
    M, N = 3000, 6000
    p = _pattern(kind, M, N, 600_000, 4, "csr")
    g = torch.Generator(device="cuda").manual_seed(4)
    A = torch.randn(M, 32, device="cuda", generator=g).half()
    B = torch.randn(32, N, device="cuda", generator=g).half()
    if transposed:
        B = B.t().contiguous().t()
    ref = (A.double() @ B.double())[p.rows.long().cuda(), p.cols.long().cuda()]
    for call in range(2):  # the full path, then the record kept in the pattern's memo
        P = kernel(A, B, p)
        torch.cuda.synchronize()
        assert "row_groups" in chosen[-1] and "fill_bt" not in chosen[-1], chosen[-1]
        assert chosen[-1].get("groups_from_b", False) != transposed, chosen[-1]  # (N % 8 == 0: from B itself)
        assert not P.isnan().any()
        assert oracle.rel_error(P, ref) < 1e-5
    assert len(chosen) == 2

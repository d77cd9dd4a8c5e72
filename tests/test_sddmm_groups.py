"""tkc.sparse.row_groups (the launch data of codegen/cuda_sddmm.py `<kernel>_groups`, K = 32):
decoded back as the kernel reads it, every entry of the pattern is computed exactly once, at its
row and column, and written to its own index of P; the owner nibbles name the accumulator that
holds it; the blocks cover every item of their panel once; each phase of 8 slots holds a bank
class no more often than the counts force. The kernel itself runs on the CPU
emulation in tests/test_sddmm_cuda_emulated.py and on the GPU in tests/gpu/test_gpu_sddmm.py."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles import examples
from tkc import sparse as sp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def decode(g: sp.RowGroups, M: int, N: int):
    """(rows, cols, P indices) of every entry the kernel computes, read from g.data as the kernel
    reads it (codegen/cuda_sddmm.py `<kernel>_groups`), and per item the panel rows its phases'
    slots read ([phases, 8]; -1 for a pad slot, which reads its phase's first row)."""
    d = g.data.cpu().numpy().astype(np.int64)
    nb, ni, width, W = g.n_blocks, g.n_items, g.width, sp.GROUP_ENTRIES
    assert g.slots == W * ni
    blocks = d[:3 * nb].reshape(nb, 3)
    at_items = (3 * nb + 1) & ~1  # the kernel's offsets: items 8-byte aligned, the rest 16-byte aligned
    items = d[at_items:at_items + 2 * ni].reshape(ni, 2)
    at = (at_items + 2 * ni + 31) & ~31
    jn = d[at:at + W * ni].reshape(ni, 2, 16, 4).transpose(0, 1, 3, 2).reshape(ni, W)  # lane e's word t -> slot 16 t + e
    pr = d[at + W * ni:at + 2 * W * ni].reshape(ni, 32, 4).transpose(0, 2, 1).reshape(ni, W)  # lane l's u -> rank 32 u + l
    owner = d[at + 2 * W * ni:at + 2 * W * ni + 32 * ni].reshape(ni, 32) & 0xFFFFFFFF
    si = d[at + 2 * W * ni + 32 * ni:].reshape(ni, 32) & 0xFFFFFFFF
    assert len(d) == at + 2 * W * ni + 64 * ni
    si = np.stack([(si >> (8 * u)) & 255 for u in range(4)], 1).reshape(ni, W)  # byte u of lane l's word: rank 32 u + l
    base = sp.slot_base(torch.arange(width)).numpy()
    row_of_base = np.full(base.max() + 1, -1)
    row_of_base[base] = np.arange(width)
    assert (np.bincount(base) <= 1).all(), "two panel rows at one offset"
    panel_of = np.full(ni, -1)
    for panel, lo, hi in blocks:
        assert lo < hi and (panel_of[lo:hi] == -1).all(), "an item in two blocks"
        panel_of[lo:hi] = panel
    assert (panel_of >= 0).all(), "an item in no block"
    assert (np.diff(panel_of) >= 0).all(), "items not in panel order"
    group, count = items.T
    assert (count > 0).all() and (count <= W).all()
    # the owner nibbles: which lane and accumulator hold slot 16 t + m, and so its row n in the group
    n_of = np.full((ni, sp.GROUP_ENTRIES), -1)
    lane = np.arange(32)
    for t in range(sp.GROUP_ENTRIES // sp.GROUP_BATCH):
        nib = (owner >> (4 * t)) & 15
        for half in (0, 1):
            held = (nib >> (2 * half)) & 1 == 1
            slot = 16 * t + lane // 4 + 8 * half
            n = 2 * (lane % 4) + ((nib >> (2 * half + 1)) & 1)
            it, ln = np.nonzero(held)
            assert (n_of[it, slot[ln]] == -1).all(), "an accumulator owned twice"
            n_of[it, slot[ln]] = n[it, ln]
    rows, cols, idx, classes = [], [], [], []
    for i in range(ni):
        used = 8 * -(-count[i] // 8)  # the item's phases of 8 slots
        ranks = si[i, :count[i]]
        assert len(set(ranks.tolist())) == count[i] and (ranks < used).all(), "si sends two ranks to one slot, or past the phases"
        assert np.array_equal(np.sort(ranks), np.nonzero(n_of[i] >= 0)[0]), "an owned slot no rank reads, or the reverse"
        j = row_of_base[jn[i, ranks]]
        assert (j >= 0).all(), "a slot offset of no panel row"
        rows.append(sp.GROUP_ROWS * group[i] + n_of[i, ranks])
        cols.append(panel_of[i] * width + j)
        idx.append(pr[i, :count[i]])
        # per slot of the item's phases: its row of the panel; a pad reads its phase's first slot's row
        phases = jn[i, :used].reshape(-1, 8)
        assert (phases[n_of[i, :used].reshape(-1, 8) < 0] == np.repeat(phases[:, :1], 8, 1)[n_of[i, :used].reshape(-1, 8) < 0]).all(), \
            "a pad slot reads another row than its phase's first"
        classes.append(np.where(n_of[i, :used].reshape(-1, 8) >= 0, row_of_base[phases], -1))
    cat = (lambda x: np.concatenate(x) if x else np.zeros(0, dtype=np.int64))
    return cat(rows), cat(cols), cat(idx), classes


def check(p: sp.SparsePattern, blocks: int, dense: bool):
    g = sp.row_groups(p, 32, blocks, dense)
    panels = len(set((p.cols.long() // 2560).tolist()))
    assert g.n_blocks <= max(blocks, panels) and g.width == 2560
    rows, cols, idx, _ = decode(g, p.M, p.N)
    assert len(idx) == p.nnz
    want_r, want_c = p.rows.long().numpy(), p.cols.long().numpy()
    if dense:
        assert sorted(idx.tolist()) == sorted((want_r * p.N + want_c).tolist())
        assert (idx == rows * p.N + cols).all()
    else:
        assert sorted(idx.tolist()) == list(range(p.nnz)), "an entry written twice or never"
        assert (want_r[idx] == rows).all() and (want_c[idx] == cols).all(), "an entry at the wrong row or column"
    return g


@settings(max_examples=examples(15, 60), deadline=None)
@given(M=st.integers(1, 200), N=st.integers(1, 6000), fill=st.floats(0.0, 0.03), kind=st.sampled_from(["uniform", "rmat"]),
       blocks=st.integers(1, 9), dense=st.booleans(), seed=st.integers(0, 3))
def test_row_groups_decode_to_the_pattern(M, N, fill, kind, blocks, dense, seed):
    nnz = min(int(M * N * fill), M * N)
    p = (sp.uniform(M, N, nnz, seed=seed) if kind == "uniform" or nnz == 0 or nnz > M * N // 2
         else sp.rmat(M, N, nnz, seed=seed))
    check(p, blocks, dense)


def test_row_groups_shuffled_coo_and_empty_rows():
    """A coo pattern in no particular order (P's indices are then its positions), rows with no
    entries between full ones, and a panel boundary (2560 columns) inside the matrix."""
    rng = np.random.default_rng(3)
    rows = np.concatenate([np.full(900, 5), np.full(40, 77), rng.integers(100, 140, 300)])
    cols = np.concatenate([rng.permutation(5000)[:900], rng.permutation(5000)[:40], rng.integers(0, 5000, 300)])
    keys = np.unique(rows * 5000 + cols)
    perm = rng.permutation(keys.size)
    p = sp.SparsePattern(150, 5000, "coo", torch.tensor(keys[perm] // 5000, dtype=torch.int32),
                         torch.tensor(keys[perm] % 5000, dtype=torch.int32))
    g = check(p, 4, False)
    assert g.n_items > 8  # row 5's 900 entries over two panels: items of 128


@pytest.mark.parametrize("kind", ["uniform", "rmat"])
def test_row_groups_phases_spread_each_bank_class(kind):
    """An item of c entries takes P = ceil(c / 8) phases of 8 slots. A phase's ldmatrix takes as
    many wavefronts as the most distinct rows of one bank class in it, so an item takes at least
    max(P, its largest class) wavefronts. The slot order comes within 5% of that bound in all
    (slots by rank within their class, the earlier order, whose last phases gathered one class,
    came 10-12% above it here; ncu at 10000^2 with 5M entries measured 1.53 wavefronts per phase);
    uniform entries take under 1.45 wavefronts per phase."""
    p = sp.uniform(400, 10000, 200_000, seed=1) if kind == "uniform" else sp.rmat(400, 10000, 200_000, seed=1)
    g = sp.row_groups(p, 32, 16)
    _, _, _, phase_rows = decode(g, p.M, p.N)
    waves = bound = phases = 0
    for j in phase_rows:
        cls = np.where(j >= 0, sp.group_class(torch.tensor(np.maximum(j, 0))).numpy(), -1)
        waves += sum(max(len(set(j[ph][cls[ph] == c].tolist())) for c in range(8)) for ph in range(len(j)))
        bound += max(len(j), np.bincount(cls[cls >= 0], minlength=8).max())
        phases += len(j)
    assert bound <= waves <= 1.05 * bound, (waves, bound)
    if kind == "uniform":
        assert waves < 1.45 * phases, (waves, phases)


def test_row_groups_blocks_follow_the_entries():
    """Blocks go to the panels by their entries: a panel with 3x the entries gets about 3x the
    blocks, and no block is empty."""
    M, N = 256, 5120  # two panels
    rows = torch.arange(M).repeat_interleave(40)
    cols = torch.stack([torch.cat([torch.randperm(2560)[:30], 2560 + torch.randperm(2560)[:10]]) for _ in range(M)]).reshape(-1)
    keys = torch.unique(rows * N + cols)
    p = sp.SparsePattern(M, N, "csr", (keys // N).int(), (keys % N).int())
    g = sp.row_groups(p, 32, 8)
    d = g.data[:3 * g.n_blocks].reshape(-1, 3)
    per_panel = torch.bincount(d[:, 0].long(), minlength=2)
    assert per_panel.tolist() == [6, 2], per_panel
    assert (d[:, 2] > d[:, 1]).all()


def test_row_groups_blocks_follow_the_items_cost():
    """Blocks go to the panels by cost (a batch of 16 slots per 16 entries begun, two more per
    item), not by entries alone: 2048 entries as 256 items of 8 in one panel take 6 of 8 blocks,
    2048 as 16 full items in the other 2 (R-MAT at 10000^2 with 1M entries: 12.9 against 16.5 us
    as graph replays, H200); over 20 blocks, 16 and 4 (an item costs two batches besides its
    own)."""
    M, N = 2048, 5120
    rows0 = torch.arange(2048)
    cols0 = (rows0 * 7) % 2560
    rows1 = torch.arange(128).repeat_interleave(16)
    cols1 = 2560 + torch.stack([torch.randperm(2560, generator=torch.Generator().manual_seed(int(r)))[:16] for r in range(128)]).reshape(-1)
    keys = torch.unique(torch.cat([rows0 * N + cols0, rows1 * N + cols1]))
    p = sp.SparsePattern(M, N, "csr", (keys // N).int(), (keys % N).int())
    g = check(p, 8, False)
    d = g.data[:3 * g.n_blocks].reshape(-1, 3)
    assert torch.bincount(d[:, 0].long(), minlength=2).tolist() == [6, 2]
    # over 20 blocks the item's own cost decides: [15, 5] at one batch per item, [17, 3] at three
    g = sp.row_groups(p, 32, 20)
    assert torch.bincount(g.data[:3 * g.n_blocks].reshape(-1, 3)[:, 0].long(), minlength=2).tolist() == [16, 4]


def test_row_groups_blocks_follow_the_panels_load():
    """A block's panel load counts in its cost (GROUP_COLUMN_COST per column): two panels of equal
    items, 2560 and 1280 columns wide, take 5 and 3 of 8 blocks (4 and 4 without it)."""
    M, N = 512, 3840
    gen = torch.Generator().manual_seed(3)
    rows = torch.arange(M).repeat_interleave(32)
    cols = torch.cat([torch.stack([torch.randperm(2560, generator=gen)[:16], 2560 + torch.randperm(1280, generator=gen)[:16]])
                      .reshape(-1).sort().values for _ in range(M)])
    p = sp.SparsePattern(M, N, "csr", rows.int(), cols.int())
    g = check(p, 8, False)
    counts = g.data[(3 * g.n_blocks + 1) & ~1:][:2 * g.n_items].reshape(-1, 2)[:, 1]
    assert g.n_items == 128 and bool((counts == 128).all())
    assert torch.bincount(g.data[:3 * g.n_blocks].reshape(-1, 3)[:, 0].long(), minlength=2).tolist() == [5, 3]


@settings(max_examples=examples(60, 200), deadline=None)
@given(sizes=st.lists(st.integers(0, 1000), min_size=1, max_size=4), extra=st.integers(0, 9), data=st.data())
def test_group_spans_least_largest_block(sizes, extra, data):
    """`group_spans` gives every panel holding items a block, all `n_blocks`, and the blocks to the
    panels so that the largest block (its panel's fixed cost plus its share of the panel's items)
    is the least any split into whole blocks allows (every allocation tried); each panel's items
    are covered once, in order."""
    items = [data.draw(st.lists(st.integers(1, 300), min_size=1, max_size=8)) if s else [] for s in sizes]
    item_panel = np.array([pn for pn, it in enumerate(items) for _ in it], dtype=np.int64)
    cost = np.array([c for it in items for c in it], dtype=np.float64)
    holding = sum(1 for it in items if it)
    if holding == 0:
        return
    n_blocks = holding + extra
    base = np.array(data.draw(st.lists(st.integers(0, 500), min_size=len(items), max_size=len(items))), dtype=np.float64)
    spans = sp.group_spans(item_panel, cost, len(items), n_blocks, base)
    share = np.bincount([pn for pn, _, _ in spans], minlength=len(items))
    per_panel = np.bincount(item_panel, weights=cost, minlength=len(items))
    for pn, it in enumerate(items):  # the panel's spans cover its items once, in order
        got = [(lo, hi) for q, lo, hi in spans if q == pn]
        at = np.nonzero(item_panel == pn)[0]
        assert (not it and not got) or (got[0][0] == at[0] and got[-1][1] == at[-1] + 1
                                        and all(a[1] == b[0] for a, b in zip(got, got[1:])))
    # (a panel may take fewer spans than blocks when its items are fewer: the blocks it was given)
    live = [pn for pn, it in enumerate(items) if it]
    best = min(max(base[pn] + per_panel[pn] / n for pn, n in zip(live, alloc))
               for alloc in itertools.product(range(1, n_blocks + 1), repeat=len(live)) if sum(alloc) == n_blocks)
    alloc = _allocation(item_panel, cost, len(items), n_blocks, base)
    assert sum(alloc) == n_blocks and all(alloc[pn] >= 1 for pn in live)
    assert max(base[pn] + per_panel[pn] / alloc[pn] for pn in live) == pytest.approx(best)
    assert all(share[pn] <= alloc[pn] for pn in live)


def _allocation(item_panel, cost, n_panels, n_blocks, base):
    """The blocks group_spans gives each panel, read back from a panel whose items outnumber them
    (one item of each size per block at most would hide it): the panels' items split finely."""
    fine_panel = np.repeat(item_panel, 1000)
    fine_cost = np.repeat(cost / 1000, 1000)
    return np.bincount([pn for pn, _, _ in sp.group_spans(fine_panel, fine_cost, n_panels, n_blocks, base)],
                       minlength=n_panels)


@pytest.mark.parametrize("K, blocks, dense, M, N", [(64, 4, False, 8, 8), (32, 0, False, 8, 8), (32, 4, True, 50000, 50000)])
def test_row_groups_refuses(K, blocks, dense, M, N):
    p = sp.uniform(M, N, 10, seed=0)
    with pytest.raises(ValueError):
        sp.row_groups(p, K, blocks, dense)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_group_kernels_stream_the_plan_and_p(dtype, tmp_path):
    """The row-group kernels read each plan word once and write each entry of P once: their loads
    of the plan and their stores of P carry the evict-first hint (`__ldcs`, `__stcs`), so they do
    not push other data out of L2. At 10000^2 with 5M entries, K = 32 (H200, graph us), 31.8-32.1
    -> 30.8-31.1 with R-MAT entries (docs/PERFORMANCE.md, fourteenth session). A's rows, read again
    by the items of other panels, keep plain loads. An f32 P takes `__stcs`; another output dtype a
    plain store (no evict-first store of that type)."""
    from codegen import cuda
    from tkc import driver

    path = tmp_path / f"sddmm_{dtype}.tk"
    text = open(os.path.join(ROOT, "examples", "sddmm.tk"), encoding="utf-8").read().replace("f16[", f"{dtype}[")
    path.write_text(text)
    source = cuda.emit(driver.optimize(driver.frontend(str(path), {"K": 32}), "cuda"))
    helper = source.split("void tk_o_stream(", 1)[1].split("\n}\n", 1)[0]
    assert "__stcs(p, x);" in helper
    for name in ("_groups", "_groups_b"):
        body = source.split(f"{name}(", 1)[1].split('\nextern "C"', 1)[0]
        assert "__ldcs(j4), j1 = __ldcs(j4 + 16)" in body and "__ldcs(reinterpret_cast<const int4*>(pr + " in body
        assert "ws_ = __ldcs(si + " in body and "own_ = __ldcs(owner + " in body
        assert body.count("__ldcs(items + ") == 2
        assert "tk_o_stream(P + wr[u], " in body and "P[wr[u]]" not in body
        assert "__ldcs(reinterpret_cast<const uint4*>(A + " not in body  # A's rows: plain loads

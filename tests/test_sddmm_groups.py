"""tkc.sparse.row_groups (the launch data of codegen/cuda_sddmm.py `<kernel>_groups`, K = 32):
decoded back as the kernel reads it, every entry of the pattern is computed exactly once, at its
row and column, and written to its own index of P; each slot is a distinct column of its item and
holds at least one entry; the blocks cover every item of their panel once; the slot order keeps 8
consecutive slots of distinct bank classes where the counts allow. The kernel itself runs on the
CPU emulation in tests/test_sddmm_cuda_emulated.py and on the GPU in tests/gpu/test_gpu_sddmm.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from profiles import examples
from tkc import sparse as sp


def decode(g: sp.RowGroups, M: int, N: int):
    """(rows, cols, P indices) of every entry the kernel computes, read from g.data as the kernel
    reads it (codegen/cuda_sddmm.py `<kernel>_groups`), and per item its slots' bank classes."""
    d = g.data.cpu().numpy().astype(np.int64)
    nb, ni, slots, width = g.n_blocks, g.n_items, g.slots, g.width
    nnz = int(d[0])
    blocks = d[1:1 + 3 * nb].reshape(nb, 3)
    items = d[1 + 3 * nb:1 + 3 * nb + 4 * ni].reshape(ni, 4)
    at = 1 + 3 * nb + 4 * ni
    jn, pr = d[at:at + slots + 32], d[at + slots + 32:at + slots + nnz + 64]
    si = (d[at + slots + nnz + 64:] & 0xFFFFFFFF).astype("<u4").view("<u2").astype(np.int64)
    assert si.size >= nnz + 32
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
    group, sfirst, efirst, packed = items.T
    ns, count = packed & 255, packed >> 8
    assert (ns > 0).all() and (ns <= sp.GROUP_SLOTS).all() and (sfirst % sp.GROUP_BATCH == 0).all()
    assert (count >= ns).all() and (count <= sp.GROUP_ROWS * ns).all()
    assert np.array_equal(efirst, np.cumsum(count) - count) and count.sum() == nnz
    rows, cols, idx, classes = [], [], [], []
    for i in range(ni):
        prod = si[efirst[i]:efirst[i] + count[i]]
        slot, n = prod >> 3, prod & 7
        assert (slot < ns[i]).all(), "an entry's product past the item's slots"
        assert np.unique(prod).size == prod.size, "two entries at one product"
        assert np.array_equal(np.unique(slot), np.arange(ns[i])), "a slot holding no entry"
        j_slots = row_of_base[jn[sfirst[i]:sfirst[i] + ns[i]]]
        assert (j_slots >= 0).all(), "a slot offset of no panel row"
        assert np.unique(j_slots).size == ns[i], "a column in two slots of an item"
        p_i = pr[efirst[i]:efirst[i] + count[i]]
        assert (np.diff(p_i) > 0).all(), "an item's entries not in P's order"
        rows.append(sp.GROUP_ROWS * group[i] + n)
        cols.append(panel_of[i] * width + j_slots[slot])
        idx.append(p_i)
        classes.append(sp.group_class(torch.tensor(j_slots)).numpy())
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
    assert g.n_items > 8  # row 5's 900 entries over two panels: items of 64 slots


def test_row_groups_slots_by_rank_within_their_bank_class():
    """Within an item the slots go by rank within their bank class, then the class: each slot's
    rank (how many earlier slots share its class) never decreases, so 8 consecutive slots hold
    distinct classes while every class lasts (conflict-free ldmatrix). Uniform entries: about 2/3
    of the groups of 8 are then whole (the rest come after the item's smallest class ran out)."""
    p = sp.uniform(400, 10000, 200_000, seed=1)
    g = sp.row_groups(p, 32, 16)
    _, _, _, classes = decode(g, p.M, p.N)
    for c in classes:
        seen = np.zeros(8, dtype=np.int64)
        rank = []
        for x in c:
            rank.append(seen[x])
            seen[x] += 1
        assert (np.diff(rank) >= 0).all(), c
    groups = [c[i:i + 8] for c in classes for i in range(0, len(c) - 7, 8)]
    assert np.mean([len(set(x.tolist())) == 8 for x in groups]) > 0.6


def test_row_groups_blocks_follow_the_entries():
    """Blocks go to the panels by their slots and entries: a panel with 3x of both gets about 3x
    the blocks, and no block is empty."""
    M, N = 256, 5120  # two panels
    rows = torch.arange(M).repeat_interleave(40)
    cols = torch.stack([torch.cat([torch.randperm(2560)[:30], 2560 + torch.randperm(2560)[:10]]) for _ in range(M)]).reshape(-1)
    keys = torch.unique(rows * N + cols)
    p = sp.SparsePattern(M, N, "csr", (keys // N).int(), (keys % N).int())
    g = sp.row_groups(p, 32, 8)
    d = g.data[1:1 + 3 * g.n_blocks].reshape(-1, 3)
    per_panel = torch.bincount(d[:, 0].long(), minlength=2)
    assert per_panel.tolist() == [6, 2], per_panel
    assert (d[:, 2] > d[:, 1]).all()


@pytest.mark.parametrize("K, blocks, dense, M, N", [(64, 4, False, 8, 8), (32, 0, False, 8, 8), (32, 4, True, 50000, 50000)])
def test_row_groups_refuses(K, blocks, dense, M, N):
    p = sp.uniform(M, N, 10, seed=0)
    with pytest.raises(ValueError):
        sp.row_groups(p, K, blocks, dense)


def test_row_groups_share_a_column_among_the_rows_of_a_group():
    """A column held by several rows of a group is one slot: the 8 rows of group 0 holding the
    same 100 columns make 100 slots of 8 entries each (items of 64 and 36 slots), and group 1's
    single row one slot per entry."""
    cols0 = torch.randperm(2560, generator=torch.Generator().manual_seed(1))[:100].sort().values  # one panel
    rows = torch.cat([torch.arange(8).repeat_interleave(100), torch.full((50,), 12)])
    cols = torch.cat([cols0.repeat(8), torch.arange(50) * 7])
    keys = rows * 3000 + cols
    order = torch.argsort(keys)
    p = sp.SparsePattern(16, 3000, "csr", rows[order].int(), cols[order].int())
    g = check(p, 2, False)
    items = g.data[1 + 3 * g.n_blocks:1 + 3 * g.n_blocks + 4 * g.n_items].reshape(-1, 4)
    assert sorted(((items[:, 3] & 255).tolist(), (items[:, 3] >> 8).tolist())[0]) == [36, 50, 64]
    by_slots = dict(zip((items[:, 3] & 255).tolist(), (items[:, 3] >> 8).tolist()))
    assert by_slots == {64: 512, 36: 288, 50: 50}

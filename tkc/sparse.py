"""Sparse patterns: the input side of SDDMM (sampled dense-dense matmul).

SDDMM computes P[e] = dot(A[row_e, :], B[:, col_e]) at the entries e of a sparse M x N pattern S,
as `torch.sparse.sampled_addmm(S, A, B, beta=0, alpha=1)` does (its values: S's, in CSR order).
A checked :class:`SparsePattern` comes from a torch sparse CSR/COO tensor, a scipy.sparse matrix,
a Matrix Market file (`read_mtx` via `scipy.io.mmread`; Boisvert, Pozo, Remington, "The Matrix
Market Exchange Formats: Initial Design", NIST 1996) or a generator (`uniform`; `rmat`: Chakrabarti,
Zhan, Faloutsos, "R-MAT: A Recursive Model for Graph Mining", SDM 2004). `tile_lists` groups the
entries by BM x BN output tile, for a grid over the non-empty tiles.

A pattern is two int32 vectors `rows`, `cols`, one element per entry, in S's order (P's order):
`csr`: row by row, columns strictly increasing within a row (the order of `col_indices`); `coo`:
as given, never re-sorted, each (row, col) once. A csr pattern is a valid coo one; a coo pattern
is a csr one only in that order. Bad input raises :class:`SparseInputError`; the checks are
vectorized torch ops on the input's device, one host sync each (5M entries: about 0.2 s, 0.5 s
unsorted COO, on one CPU core). Patterns are immutable: derived data (row pointers, tile lists,
device copies) is cached on the pattern object, so never write into `rows`/`cols`.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field

import numpy
import torch

from passes.smem_sddmm import rc_packed16

FORMATS = ("csr", "coo")
_INT32_MAX = 2**31 - 1
_RMAT_ROUNDS = 32
_SORT_NOTE = ("sort each row's column indices (scipy: `S.sort_indices()`; torch: build the CSR tensor "
              "from a coalesced COO tensor)")
_DUP_NOTE = "list each position once (scipy: `S.sum_duplicates()`; torch: `t.coalesce()`)"


class SparseInputError(ValueError):
    """A sparse input tkc cannot use: `message` says what is wrong, `note` how to fix it."""

    def __init__(self, message: str, note: str = ""):
        super().__init__(f"{message}\nnote: {note}" if note else message)
        self.message, self.note = message, note


@dataclass(frozen=True, eq=False)
class SparsePattern:
    """The entries of an M x N sparse matrix: `rows`, `cols` int32 [nnz] on one device, in S's
    order for `fmt` ("csr" or "coo"). `as_pattern`, `read_mtx` and the generators check what
    they build; a pattern constructed directly is checked when it goes through `as_pattern`."""

    M: int
    N: int
    fmt: str
    rows: torch.Tensor
    cols: torch.Tensor
    _memo: dict = field(default_factory=dict, init=False, repr=False)  # per object: derived data

    def __post_init__(self):
        if self.fmt not in FORMATS:
            raise SparseInputError(f"unknown sparse format `{self.fmt}`; expected `csr` or `coo`")
        _check_shape((self.M, self.N), None, None)
        for name, t in (("rows", self.rows), ("cols", self.cols)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.dtype != torch.int32:
                got = f"{t.dtype} of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                raise SparseInputError(f"`{name}` is {got}; expected a 1-D torch.int32 tensor",
                                       "use `.to(torch.int32)`")
        if self.rows.shape != self.cols.shape or self.rows.device != self.cols.device or self.nnz > _INT32_MAX:
            raise SparseInputError(f"`rows` ({self.rows.numel()} on {self.rows.device}) and `cols` "
                                   f"({self.cols.numel()} on {self.cols.device}): expected one of each per entry "
                                   "(< 2^31), on one device")

    @property
    def nnz(self) -> int:
        return self.rows.numel()

    def to(self, device) -> SparsePattern:
        """This pattern on `device`: itself where it is there already, else one copy per device
        (memoized), keeping its own caches."""
        want = torch.device(device)
        if want.type == "cuda" and want.index is None and torch.cuda.is_available():  # ("cuda" and "cuda:0": one copy)
            want = torch.device("cuda", torch.cuda.current_device())
        if self.rows.device == want:
            return self
        key = ("to", str(want))
        if key not in self._memo:
            moved = SparsePattern(self.M, self.N, self.fmt, self.rows.to(want), self.cols.to(want))
            moved._memo["checked"] = self._memo.get("checked", False)
            self._memo[key] = moved
        return self._memo[key]

    def crow(self) -> torch.Tensor:
        """CSR row pointers, int32 [M + 1] on the pattern's device: row i's entries are
        `crow[i]:crow[i + 1]`. A coo pattern must be in CSR order (else SparseInputError)."""
        if self.fmt == "coo":
            return _as_format(self, "csr").crow()
        if "crow" not in self._memo:
            self._memo["crow"] = _row_pointers(self.rows, self.M)
        return self._memo["crow"]

    def to_torch(self, values: torch.Tensor | None = None, layout: str = "csr") -> torch.Tensor:
        """A torch sparse M x N tensor with `values` [nnz] in S's order (float32 ones if None), for
        references such as `torch.sparse.sampled_addmm` (which needs csr). "csr": int32 indices,
        values permuted into CSR order for an unsorted coo pattern; "coo": int64 indices in S's
        order (marked coalesced for a csr pattern). SparseInputError on a bad layout or shape."""
        if values is None:
            values = torch.ones(self.nnz, dtype=torch.float32, device=self.rows.device)
        if tuple(values.shape) != (self.nnz,) or layout not in FORMATS:
            raise SparseInputError(f"`values` of shape {tuple(values.shape)} as `{layout}`; expected ({self.nnz},) "
                                   "as `csr` or `coo`")
        if layout == "coo":
            return torch.sparse_coo_tensor(torch.stack([self.rows, self.cols]).long(), values, (self.M, self.N),
                                           is_coalesced=self.fmt == "csr", check_invariants=False)
        rows, cols = self.rows, self.cols
        if self.fmt == "coo":
            perm = torch.sort(rows.long() * self.N + cols).indices
            rows, cols, values = rows[perm], cols[perm], values[perm]
        with warnings.catch_warnings():  # torch warns that sparse CSR is in beta on every build
            warnings.simplefilter("ignore", UserWarning)
            return torch.sparse_csr_tensor(_row_pointers(rows, self.M), cols, values, (self.M, self.N),
                                           check_invariants=False)


@dataclass(frozen=True, eq=False)
class TileLists:
    """A pattern's entries grouped by BM x BN output tile; int32 tensors on its device. Tile t
    covers rows tile_m[t]*BM.. and columns tile_n[t]*BN..; its entries are
    `order[tile_ptr[t]:tile_ptr[t + 1]]` (entry indices, in S's order). Tiles are in row-major
    tile order; only tiles holding at least one entry appear."""

    tile_ptr: torch.Tensor  # [T + 1]
    tile_m: torch.Tensor  # [T]
    tile_n: torch.Tensor  # [T]
    order: torch.Tensor  # [nnz]

    @property
    def T(self) -> int:
        return self.tile_m.numel()


def as_pattern(obj, fmt: str, M: int | None = None, N: int | None = None) -> SparsePattern:
    """A checked SparsePattern of format `fmt` ("csr" or "coo") from `obj`: a SparsePattern, a
    torch sparse CSR or COO tensor (device kept; a COO tensor's `_indices()` order kept), a
    scipy.sparse matrix or array (on the CPU; csr and coo as stored, other formats through
    `.tocsr()` / `.tocoo()`) or a path to a `.mtx` file (`read_mtx`). `M`, `N`: the expected
    shape, if given. A csr input serves as coo; a coo input serves as csr only in CSR order.
    SparseInputError: not 2-D, wrong shape, non-integer indices, indices out of range, bad
    `crow_indices`, unsorted or duplicate entries, an unsupported object."""
    if fmt not in FORMATS:
        raise SparseInputError(f"unknown sparse format `{fmt}`; expected `csr` or `coo`")
    if isinstance(obj, SparsePattern):
        _check_shape((obj.M, obj.N), M, N)
        return _as_format(_checked(obj), fmt)
    if isinstance(obj, torch.Tensor):
        return _as_format(_from_torch(obj, M, N), fmt)
    if isinstance(obj, (str, os.PathLike)):
        return as_pattern(read_mtx(obj), fmt, M, N)
    import scipy.sparse

    if not scipy.sparse.issparse(obj):
        raise SparseInputError(f"cannot read a sparse pattern from a `{type(obj).__name__}`", "pass a torch sparse "
                               "CSR/COO tensor, a scipy.sparse matrix, a .mtx path or a tkc.sparse.SparsePattern")
    return _as_format(_from_scipy(obj, fmt, M, N), fmt)


def read_mtx(path) -> SparsePattern:
    """The csr pattern of a Matrix Market `coordinate` file (any field; values ignored, explicit
    zeros are entries). Symmetric, skew-symmetric and hermitian files come expanded to both
    triangles (scipy does it, the diagonal once). SparseInputError naming the file when it is
    missing, not Matrix Market, truncated or malformed (scipy's reason in the note), dense
    (`array`), or lists an entry twice (naming it, 1-based)."""
    import scipy.io

    name = os.fspath(path)
    if os.path.isdir(name):
        raise SparseInputError(f"`{name}` is a folder, not a Matrix Market file", "give the path of a .mtx file")
    rows, cols, _, layout, _, symmetry = _mm_call(scipy.io.mminfo, name)
    if layout != "coordinate":
        raise SparseInputError(f"`{name}` is a dense (`{layout}`) Matrix Market file; expected `coordinate`",
                               "write sparse matrices with `scipy.io.mmwrite(path, scipy.sparse.coo_array(S))`")
    for n, what in ((rows, "rows"), (cols, "columns")):  # before reading the entries
        if not 0 <= n <= _INT32_MAX:
            raise SparseInputError(f"`{name}` declares {n} {what}; tkc takes 0 to {_INT32_MAX} (int32 indices)")
    if symmetry != "general" and rows != cols:
        raise SparseInputError(f"`{name}` is a {symmetry} Matrix Market file of {rows} x {cols}; a {symmetry} "
                               "matrix is square", "write it as `general`, or fix the size line")
    m = _mm_call(scipy.io.mmread, name)
    M, N = _check_shape(m.shape, None, None)
    if symmetry == "skew-symmetric":
        diag = _first(torch.from_numpy(m.row == m.col))
        if diag is not None:
            i = int(m.row[diag])
            raise SparseInputError(f"`{name}` is skew-symmetric but lists the diagonal entry (row {i + 1}, column "
                                   f"{i + 1}); a skew-symmetric file lists entries below the diagonal only",
                                   "write it as `general`, or drop the diagonal entries")
    keys = torch.sort(torch.from_numpy(m.row).long() * N + torch.from_numpy(m.col).long()).values
    k = _first(keys[1:] == keys[:-1])
    if k is not None:
        i, j = divmod(int(keys[k]), N)
        mirror = "" if symmetry == "general" else f" (a {symmetry} file: (i, j) also stands for (j, i))"
        raise SparseInputError(f"`{name}` lists entry (row {i + 1}, column {j + 1}) more than once{mirror}",
                               "list each position once; `scipy.sparse.coo_array(...).sum_duplicates()` merges them")
    return _from_sorted_keys(keys, M, N)


def uniform(M: int, N: int, nnz: int, seed: int = 0) -> SparsePattern:
    """A csr pattern of exactly `nnz` distinct uniformly random positions, deterministic per
    `seed`. Dense requests (nnz >= M*N / 4) permute all M*N positions; otherwise int64 positions
    are drawn with replacement, deduplicated and topped up, and a random nnz of them kept.
    SparseInputError if nnz is negative or more than M*N."""
    _check_request(M, N, nnz)
    g = torch.Generator().manual_seed(seed)
    total = M * N
    if 4 * nnz >= total:  # at most 4 nnz positions to permute
        return _from_sorted_keys(torch.randperm(total, generator=g)[:nnz].sort().values, M, N)
    keys = torch.empty(0, dtype=torch.int64)
    while keys.numel() < nnz:  # density < 1/4: few draws collide
        need = nnz - keys.numel()
        keys = torch.unique(torch.cat([keys, torch.randint(0, total, (need + need // 16 + 16,), generator=g)]))
    return _from_sorted_keys(_subset(keys, nnz, g), M, N)


def rmat(M: int, N: int, nnz: int, a: float = 0.57, b: float = 0.19, c: float = 0.19, seed: int = 0,
         noise: float = 0.1) -> SparsePattern:
    """A csr pattern of exactly `nnz` distinct R-MAT positions (power-law degrees like the SNAP
    graphs), deterministic per `seed`. A candidate picks a quadrant per level (top-left a,
    top-right b, bottom-left c, bottom-right d = 1 - a - b - c) over L = ceil(log2(max(M, N)))
    levels of a 2^L square; each side keeps the bits of its own first ceil(log2) levels (a short
    side stops splitting early). Per-level noise as in NSKG (Seshadhri, Pinar, Kolda, J. ACM
    2013) smooths the degree distribution: mu = U(-1, 1) * noise * min(b, c, (a + d) / 2),
    a -= 2 mu a / (a + d), d -= 2 mu d / (a + d), b += mu, c += mu. Out-of-range positions and
    duplicates are dropped, rounds repeat until there are nnz, then a random nnz are kept.
    SparseInputError: bad a, b, c, noise; nnz < 0 or > M*N; nnz > M*N / 2 (use `uniform` then)."""
    _check_request(M, N, nnz)
    d = 1.0 - a - b - c
    if min(a, b, c, d) < -1e-12 or not 0.0 <= noise <= 1.0:
        raise SparseInputError(f"bad R-MAT parameters a = {a}, b = {b}, c = {c}, d = 1 - a - b - c = {d:.6g}, "
                               f"noise = {noise}; expected a, b, c, d >= 0 and noise in [0, 1]")
    if 2 * nnz > M * N:
        raise SparseInputError(f"`nnz` = {nnz} is {100 * nnz / (M * N):.0f}% of the {M} x {N} positions; R-MAT "
                               "reaches at most 50%", f"use `uniform({M}, {N}, {nnz})` for dense patterns")
    g = torch.Generator().manual_seed(seed)
    bits = (math.ceil(math.log2(M)) if M > 1 else 0, math.ceil(math.log2(N)) if N > 1 else 0)
    cuts = _rmat_cuts(a, b, c, max(d, 0.0), noise, max(bits), g)
    keys, rate, rounds = torch.empty(0, dtype=torch.int64), 1.0, 0
    while keys.numel() < nnz:
        if rounds == _RMAT_ROUNDS:
            raise SparseInputError(f"R-MAT found only {keys.numel()} of {nnz} distinct positions of {M} x {N} in "
                                   f"{rounds} rounds", "ask for fewer entries, a less skewed `a`, or use `uniform`")
        k = min(int((nnz - keys.numel()) * 1.1 / rate) + 64, 2 * nnz + 2**16)
        before, rounds = keys.numel(), rounds + 1
        keys = torch.unique(torch.cat([keys, _rmat_draw(k, cuts, bits, M, N, g)]))
        rate = max((keys.numel() - before) / k, 0.01)  # the share of new distinct positions
    return _from_sorted_keys(_subset(keys, nnz, g), M, N)


def tile_lists(p: SparsePattern, BM: int, BN: int) -> TileLists:
    """The entries of `p` grouped by BM x BN tile (see TileLists): a stable sort on the tile id
    (row // BM) * cdiv(N, BN) + col // BN, in int64. Memoized per (pattern object, BM, BN): a
    second call with the same object returns the same TileLists; an equal pattern recomputes."""
    if not (isinstance(BM, int) and isinstance(BN, int) and BM > 0 and BN > 0):
        raise SparseInputError(f"tile shape {BM} x {BN}; expected positive integers")
    key = ("tiles", BM, BN)
    if key not in p._memo:
        tiles_n = max(-(-p.N // BN), 1)
        tile_id, order = torch.sort((p.rows.long() // BM) * tiles_n + p.cols.long() // BN, stable=True)
        ids, counts = torch.unique_consecutive(tile_id, return_counts=True)
        ptr = torch.zeros(ids.numel() + 1, dtype=torch.int32, device=p.rows.device)
        ptr[1:] = counts.cumsum(0)
        p._memo[key] = TileLists(ptr, (ids // tiles_n).int(), (ids % tiles_n).int(), order.int())
    return p._memo[key]


@dataclass(frozen=True, eq=False)
class DispatchPlan:
    """The launch data of a sampled gemm (SDDMM) over a pattern's BM x BN tiles, split by the
    `sparse-dispatch` pass's threshold `dot_below` (entries per tile): int32 tensors on the
    pattern's device, passed to the kernel after its outputs (codegen/cuda_sddmm.py and
    codegen/tilelang.py read them in this order).

    - tc_ptr [n_tc + 1], tc_m [n_tc], tc_n [n_tc], tc_order [tc_ptr[-1]]: the tensor-core tiles
      (at least `dot_below` entries): tile t covers rows tc_m[t]*BM + [0, BM) and columns
      tc_n[t]*BN + [0, BN); its entries are tc_order[tc_ptr[t]:tc_ptr[t + 1]] (entry indices into
      rows/cols/P, in S's order within the tile). Tiles in row-major tile order, or in
      `tile_order`'s where dispatch_plan was given the SMs and there are more tiles than SMs, at
      most twice as many.
    - dot_order [n_dot]: the entries of the other tiles, computed as one dot product each, in
      (row, column) order so that consecutive entries share A's row.
    - tc_rc [tc_ptr[-1]]: the position of each tc_order entry in its tile, (row - tc_m*BM) << 16
      | (col - tc_n*BN) (read by no kernel; `tilelang` takes it in its signature). -1 when BM >
      32768 or BN > 65536 (no backend's tensor-core tile is that large).

    The `cuda` tile kernel reads two smaller forms instead (`cuda_tensors`):
    - tc_pos: the same positions in 16 bits where BM and BN are at most 256 (`rc_packed16`: int16
      holding the bits of (row << 8) | col), else tc_rc's int32 form; zero-padded to a multiple of
      16 bytes, so the kernel can prefetch a tile's whole range into L2;
    - tc_rbase [n_tc * BM] int32: where each tile row's entries are consecutive in S's order (a
      csr pattern, or a coo one in that order), entry tc_order[s] = tc_rbase[t * BM + row] + s for
      slot s of tile t, so the kernel reads no tc_order; empty otherwise (an unsorted coo pattern,
      or more tile rows than 4 x the entries: the kernel reads tc_order).

    `dot_sequential`: dot_order is 0, 1, ..., n_dot - 1 (every entry a dot product, S in (row,
    column) order): the `cuda` runtime then passes no dot_order and the dot products read entry i
    as the i-th (one dependent load fewer per round).

    Every entry is in exactly one of tc_order and dot_order."""

    tc_ptr: torch.Tensor
    tc_m: torch.Tensor
    tc_n: torch.Tensor
    tc_order: torch.Tensor
    dot_order: torch.Tensor
    tc_rc: torch.Tensor
    tc_pos: torch.Tensor
    tc_rbase: torch.Tensor
    dot_sequential: bool = False
    _memo: dict = field(default_factory=dict, init=False, repr=False)  # derived launch data (dot_panels)

    @property
    def n_tc(self) -> int:
        return self.tc_m.numel()

    @property
    def n_dot(self) -> int:
        return self.dot_order.numel()

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The launch data in the kernels' argument order (after B transposed)."""
        return (self.tc_ptr, self.tc_m, self.tc_n, self.tc_order, self.dot_order, self.tc_rc)

    def cuda_tensors(self) -> tuple[torch.Tensor, ...]:
        """The `cuda` kernels' launch data (codegen/cuda_sddmm.py), after B transposed: tc_ptr,
        tc_m, tc_n, tc_order, dot_order, tc_pos, tc_rbase."""
        return (self.tc_ptr, self.tc_m, self.tc_n, self.tc_order, self.dot_order, self.tc_pos, self.tc_rbase)

    def panel_counts(self, rows: torch.Tensor, cols: torch.Tensor, N: int, width: int) -> torch.Tensor:
        """int64 [cdiv(N, width)] (at least 1): how many dot-product entries each panel of `width`
        consecutive columns of B holds (`rows`, `cols`: the pattern's indices on the plan's
        device). Memoized per width, with the entries' sort that dot_panels builds on."""
        return self._panel_sort(rows, cols, N, width)[3]

    def dot_panels(self, rows: torch.Tensor, cols: torch.Tensor, N: int, width: int, entries: int) -> "DotPanels":
        """The dot-product entries by column panels, for the `cuda` kernel that reads B's
        columns itself (codegen/cuda_sddmm.py `<kernel>_panels`), as DotPanels. `rows`, `cols`:
        the pattern's indices (int32, on the plan's device); panel p is B's columns [p * width,
        (p + 1) * width) (`width` a power of two); a work item holds at most `entries` entries
        of one panel, in `entries` slots. Memoized per (width, entries). ValueError if a row
        times `width`, or the slots, do not fit int32."""
        key = ("panels", width, entries)
        if key not in self._memo:
            if entries <= 0:
                raise ValueError(f"{entries} entries per work item: expected a positive int")
            self._memo[key] = _dot_panels(*self._panel_sort(rows, cols, N, width), width, entries)
        return self._memo[key]

    def _panel_sort(self, rows: torch.Tensor, cols: torch.Tensor, N: int, width: int):
        """(rows, columns, indices into P, counts per panel) of the dot-product entries sorted by
        (column, row), memoized per width (panel_counts, dot_panels)."""
        key = ("panel_sort", width)
        if key not in self._memo:
            self._memo[key] = _panel_sort(self.dot_order, rows, cols, N, width)
        return self._memo[key]

    def launch_tensors(self, target: str) -> tuple[torch.Tensor, ...]:
        """The launch data a `target`'s sampled-gemm kernels take after B transposed."""
        return self.cuda_tensors() if target == "cuda" else self.tensors()


@dataclass(frozen=True, eq=False)
class DotPanels:
    """A plan's dot-product entries grouped by panels of `width` consecutive columns of B
    (DispatchPlan.dot_panels), for `<kernel>_panels` (codegen/cuda_sddmm.py), which loads a
    panel of B into shared memory once per work item and reads no transposed B.

    - data: int32 [2 * n_items + 2 * slots], passed in dot_order's place:
      - items [n_items, 2]: (panel, count), each at most `entries` entries of one panel, in
        panel order;
      - rc [slots]: item i's entries in slots [i * entries, i * entries + count), sorted by
        (column, row), each as row * width + column % width; 0 in the slots past count;
      - order [slots]: each slot's index into rows/cols/P, -1 past count.

      An item's entries sit at a fixed stride, so the kernel reads them beside their item and
      not after it: one dependent global load fewer before a block's first rows of A (H200,
      benchmarks/probes/sddmm_col_panels.py `-pad`, docs/PERFORMANCE.md).
    - n_items: the kernel's grid.
    - slots: n_items * entries, passed to the kernel as n_dot (it finds order at rc + slots and
      its stride as slots / n_items).
    - per_panel: the mean entries per panel that has any (the runtime takes this path where it
      is small: tkc/runtime.py `PANEL_MEAN_MAX`)."""

    data: torch.Tensor
    n_items: int
    per_panel: float
    slots: int


def _panel_sort(dot: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, N: int, width: int):
    if width <= 0 or width & (width - 1):
        raise ValueError(f"panel width {width}: expected a power of two")
    e = dot.long()
    r, c = rows[e].long(), cols[e].long()
    rows_used = int(r.max()) + 1 if e.numel() else 1
    if rows_used > (_INT32_MAX + 1) // width:
        raise ValueError(f"row {rows_used - 1} times the panel width {width} does not fit int32")
    sort = torch.sort(c * rows_used + r, stable=True).indices
    r, c, e = r[sort], c[sort], e[sort]
    counts = torch.bincount(c // width, minlength=max(-(-N // width), 1))
    return r, c, e, counts


def _dot_panels(r: torch.Tensor, c: torch.Tensor, e: torch.Tensor, counts: torch.Tensor, width: int,
                entries: int) -> DotPanels:
    dev = e.device
    starts = counts.cumsum(0) - counts
    chunks = -(-counts // entries)
    n_items = int(chunks.sum())
    if n_items * entries > _INT32_MAX:
        raise ValueError(f"{n_items} work items of {entries} slots do not fit int32")
    pid = torch.repeat_interleave(torch.arange(counts.numel(), device=dev), chunks)
    within = torch.arange(n_items, device=dev) - torch.repeat_interleave(chunks.cumsum(0) - chunks, chunks)
    first = starts[pid] + within * entries
    count = torch.minimum(first + entries, starts[pid] + counts[pid]) - first
    # slot s of item i holds sorted entry first[i] + s where s < count[i]
    slot = torch.arange(entries, device=dev)
    inside = slot[None, :] < count[:, None]
    src = torch.where(inside, first[:, None] + slot[None, :], 0).reshape(-1)
    inside = inside.reshape(-1)
    rc = torch.where(inside, r[src] * width + c[src] % width, 0)
    order = torch.where(inside, e[src], -1)
    data = torch.cat([torch.stack([pid, count], 1).reshape(-1), rc, order]).int().contiguous()
    used = int((counts > 0).sum())
    return DotPanels(data, n_items, e.numel() / used if used else 0.0, n_items * entries)


GROUP_ROWS = 8  # rows of A per group: the N of mma.sync's m16n8k16
GROUP_BATCH = 16  # entries per mma (its M)
GROUP_ENTRIES = 128  # entries per work item at most: 8 batches, one owner nibble each in a 32-bit word per lane
GROUP_PANEL_BYTES = 160 * 1024  # a block's panel of Bt in shared memory
GROUP_ITEM_COST = 2  # an item's own cost in batches, for splitting the panels' items among blocks
GROUP_COLUMN_COST = 2  # a block's cost to load a column of its panel (16 per batch; 3.1 us per 2560 columns, H200)


@dataclass(frozen=True, eq=False)
class RowGroups:
    """A pattern's entries for `<kernel>_groups` (codegen/cuda_sddmm.py, K = 32): each block holds
    a panel of `width` consecutive rows of Bt in shared memory; a warp takes work items of at most
    GROUP_ENTRIES entries of one group of GROUP_ROWS consecutive rows within one panel, 16 at a
    time as mma.sync's A operand (their rows of Bt gathered by ldmatrix) against the group's rows
    of A as its B operand. Source: benchmarks/probes/sddmm_row_groups.py (H200, 2026-11-29:
    36.2 us against the tile walk's 52.2 at 10000^2 with 5M uniform entries; docs/PERFORMANCE.md
    "K = 32 by row groups").

    - data: int32, passed in dot_order's place (the vector loads' arrays aligned: items at word
      3 n_blocks rounded up to even, jn after them at a multiple of 32 words):
      - blocks [n_blocks, 3]: (panel, first item, end item): a panel's items are split among
        its blocks by cost (16 per batch of 16 entries begun and 32 per item), and the blocks go
        to the panels so that the costliest block, its panel's load counted (`group_spans`), is
        the least a split into whole blocks allows;
      - items [n_items, 2]: (group, count), in panel order;
      - jn [n_items, 2, 16, 4]: [h, e, i] the byte offset in the panel (`slot_base`) of the row
        of Bt of the item's slot 16 (4 h + i) + e (lane e's two 16-byte loads, each of the
        warp's 256 contiguous bytes). An item of c entries fills P = ceil(c / 8)
        phases of 8 slots (one ldmatrix phase each), spreading each bank class over them
        (`_phase_counts`: as few ldmatrix wavefronts as the class counts allow, about); a pad
        slot repeats its phase's first offset (no extra wavefront), slots past the phases 0;
      - pr [n_items, 32, 4]: lane l's 4 words, word u the index into P (S's order, or row * N +
        column for a dense P) of the item's entry of rank 32 u + l (ranks in P's order);
      - owner [n_items, 32]: per item and lane, 8 nibbles (one per batch t): bit 0 the lane
        holds entry lane / 4 of the batch (in accumulator d1 if bit 1, else d0), bit 2 entry
        lane / 4 + 8 (d3 if bit 3, else d2);
      - si [n_items, 32]: lane l's word, byte u (little-endian) the slot of rank 32 u + l.
    - n_blocks: the kernel's grid: the `blocks` asked for (one per SM) at most, or one per panel
      holding entries where there are more such panels.
    - n_items, slots: passed as n_tc and n_dot; slots = GROUP_ENTRIES * n_items.
    - width: columns of B per panel (GROUP_PANEL_BYTES / (2 K))."""

    data: torch.Tensor
    n_blocks: int
    n_items: int
    slots: int
    width: int


def group_class(j: torch.Tensor) -> torch.Tensor:
    """The bank class (0..7) of row j of a K = 32 panel (codegen/cuda_sddmm.py `tk_group_class`):
    chunk q of row j sits in 16-byte slot q ^ class of its 128-byte line (two rows per line, in
    opposite halves: bit 2), so 8 rows of distinct classes read at one q are conflict-free. The
    column's higher bits are mixed in, because R-MAT's low column bits are skewed."""
    m = j >> 1
    return (((j & 1) << 2) | (m & 3)) ^ (((m >> 2) ^ (m >> 5) ^ (m >> 8)) & 7)


def slot_base(j: torch.Tensor) -> torch.Tensor:
    """The byte offset of chunk 0 of row j of a K = 32 panel: line * 128 + class * 16 (chunk q
    is at slot_base ^ (q << 4))."""
    return (j >> 1) * 128 + (group_class(j) << 4)


def group_spans(item_panel, sizes, n_panels: int, n_blocks: int, base=None) -> list[tuple[int, int, int]]:
    """The blocks of `<kernel>_groups` as (panel, first item, end item): `n_blocks` spread over the
    panels (each panel holding entries gets at least one) so that the largest of a block's
    `base[panel]` (a block's fixed cost in its panel: loading it; default 0) plus its share of the
    panel's `sizes` is least; a panel's items (numpy `item_panel`, in panel order, of `sizes`:
    entries, or a cost per item) split among its blocks by sizes."""
    per_panel = numpy.bincount(item_panel, weights=sizes, minlength=n_panels) if len(sizes) else numpy.zeros(n_panels)
    base = numpy.zeros(n_panels) if base is None else numpy.asarray(base, dtype=numpy.float64)
    # each panel holding entries gets one block, then every further block goes to the panel whose
    # blocks carry the most each (D'Hondt's apportionment, with the fixed cost: the least largest
    # block; the share rounded to the nearest left panels of 17 blocks 2.4% above the mean, H200)
    share = (per_panel > 0).astype(int)
    for _ in range(n_blocks - int(share.sum())):
        share[numpy.argmax(numpy.where(share > 0, base + per_panel / numpy.maximum(share, 1), -numpy.inf))] += 1
    spans = []
    for pn in range(n_panels):
        at = numpy.nonzero(item_panel == pn)[0]
        if at.size == 0:
            continue
        cum = numpy.cumsum(sizes[at])
        cuts = numpy.searchsorted(cum, numpy.arange(1, share[pn]) * cum[-1] / share[pn])
        bounds = sorted({0, *cuts.tolist(), at.size})
        spans += [(pn, int(at[a]), int(at[b - 1]) + 1) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return spans


def row_groups(p: SparsePattern, K: int, blocks: int, dense: bool = False) -> RowGroups:
    """`p`'s entries as RowGroups for `<kernel>_groups` at K (32 only), over `blocks` blocks
    (one per SM; more where more panels hold entries); P's indices are S's order, or row * N + column with `dense`. Memoized
    per (pattern object, K, blocks, dense). ValueError for another K, fewer than 1 block, or a
    dense P of 2^31 elements or more."""
    if K != 32:
        raise ValueError(f"row groups at K = {K}: only K = 32 (a 64-byte row of Bt)")
    if blocks < 1:
        raise ValueError(f"{blocks} blocks: expected at least 1")
    if dense and p.M * p.N > _INT32_MAX:
        raise ValueError(f"a dense P of {p.M} x {p.N} has more elements than int32 indexes")
    key = ("groups", K, blocks, dense)
    if key not in p._memo:
        p._memo[key] = _row_groups(p, K, blocks, dense)
    return p._memo[key]


def group_cells(p: SparsePattern, K: int) -> torch.Tensor:
    """Per entry of `p`, its cell of `<kernel>_groups` at K: panel * groups + row // GROUP_ROWS
    (int64), a panel being GROUP_PANEL_BYTES / (2 K) consecutive columns (the rows of Bt a block
    holds). The runtime counts the cells holding entries (tkc/runtime.py `_groups_for`)."""
    width = GROUP_PANEL_BYTES // (2 * K)
    n_groups = max(-(-p.M // GROUP_ROWS), 1)
    return (p.cols.long() // width) * n_groups + p.rows.long() // GROUP_ROWS


def _row_groups(p: SparsePattern, K: int, n_blocks: int, dense: bool) -> RowGroups:
    W, R = GROUP_ENTRIES, GROUP_ROWS
    width = GROUP_PANEL_BYTES // (2 * K)
    dev = p.rows.device
    rows, cols = p.rows.long(), p.cols.long()
    nnz = rows.numel()
    e = rows * p.N + cols if dense else torch.arange(nnz, device=dev)
    jl = cols % width
    n_groups = max(-(-p.M // R), 1)
    seg = group_cells(p, K)
    n = rows % R
    # P's order within each (panel, group): by row, then column
    o = torch.sort((seg * R + n) * width + jl, stable=True).indices
    segs, counts = torch.unique_consecutive(seg[o], return_counts=True)
    chunks = -(-counts // W)
    item_seg = torch.repeat_interleave(segs, chunks)
    n_items = item_seg.numel()
    within = torch.arange(n_items, device=dev) - torch.repeat_interleave(chunks.cumsum(0) - chunks, chunks)
    item_first = torch.repeat_interleave(counts.cumsum(0) - counts, chunks) + within * W
    item_count = torch.minimum(torch.repeat_interleave(counts, chunks) - within * W, torch.full_like(within, W))
    item_of = torch.repeat_interleave(torch.arange(n_items, device=dev), item_count)  # per sorted position
    r = torch.arange(nnz, device=dev) - torch.repeat_interleave(item_first, item_count)  # rank in the item
    # blocks by cost: a batch of 16 slots each, and two more for the item's own loads and stores (its
    # words, its rows of A, the stage read back and P written: about 2 batches' L1 wavefronts; block
    # times fit 13-17 ns per item and 6-9 per batch, H200. By entries alone, R-MAT at 10000^2 with 1M
    # entries took 16.5-17.1 us against 12.9-13.0; items placed so that each block's warps got equal
    # costs lost 4 us at 5M uniform)
    cost = (GROUP_BATCH * (-(-item_count // GROUP_BATCH) + GROUP_ITEM_COST)).cpu().numpy()
    n_panels = max(-(-p.N // width), 1)
    load = GROUP_COLUMN_COST * numpy.minimum(width, p.N - width * numpy.arange(n_panels))  # a block's panel load
    spans = group_spans((item_seg // n_groups).cpu().numpy(), cost, n_panels, n_blocks, load)
    # slots: an item's entries go to its P = ceil(count / 8) phases of 8 slots (one ldmatrix
    # phase each), a bank class's entries to the phases in rank order (_phase_counts), and within
    # a phase by class
    cls = group_class(jl[o])
    C = torch.zeros(n_items * 8, dtype=torch.int64, device=dev)
    C.index_add_(0, item_of * 8 + cls, torch.ones_like(cls))
    x = _phase_counts(C.view(n_items, 8), item_count)  # [items, 16 phases, 8 classes]
    o1 = torch.sort((item_of * 8 + cls) * W + r, stable=True).indices  # sorted positions by (item, class, rank)
    phase = torch.empty_like(r)
    phase[o1] = torch.arange(16, device=dev).repeat(n_items * 8).repeat_interleave(x.transpose(1, 2).reshape(-1))
    o2 = torch.sort((item_of * 16 + phase) * 8 + cls, stable=True).indices  # by (item, phase, class)
    key2 = (item_of * 16 + phase)[o2]
    start = torch.ones_like(key2, dtype=torch.bool)
    start[1:] = key2[1:] != key2[:-1]
    idx = torch.arange(nnz, device=dev)
    in_item = torch.empty_like(r)  # per sorted position: its slot in the item
    in_item[o2] = 8 * phase[o2] + idx - torch.cummax(torch.where(start, idx, 0), 0).values
    slots = n_items * W
    at_items = -(-3 * len(spans) // 2) * 2  # items 8-byte aligned, the rest 128-byte aligned (vector loads)
    head = -(-(at_items + 2 * n_items) // 32) * 32  # (jn, pr, owner and si 128-byte aligned)
    if head + 2 * slots + 64 * n_items > _INT32_MAX:
        raise ValueError(f"{n_items} work items of row groups do not fit int32")
    jn = torch.zeros(n_items, W, dtype=torch.int64, device=dev)  # by slot
    jn[item_of, in_item] = slot_base(jl[o])
    per_phase = x.sum(2)  # a phase's pads read its first slot's row (the same address: no extra wavefront)
    jn = jn.view(n_items, 16, 8)
    pad = (torch.arange(8, device=dev)[None, None, :] >= per_phase[:, :, None]) & (per_phase[:, :, None] > 0)
    jn = torch.where(pad, jn[:, :, :1], jn)
    # slot 16 t + e at 64 (t // 4) + 4 e + t % 4: lane e's two 16-byte loads, each warp's 256 contiguous bytes
    jn = jn.view(n_items, 2, 4, GROUP_BATCH).transpose(2, 3).reshape(-1)
    lane_r, u_r = r % 32, r // 32
    pr = torch.zeros(n_items * W, dtype=torch.int64, device=dev)
    pr[item_of * W + 4 * lane_r + u_r] = e[o]
    si = torch.zeros(n_items * 32, dtype=torch.int64, device=dev)
    si.index_add_(0, item_of * 32 + lane_r, in_item << (8 * u_r))
    si = torch.where(si >= 1 << 31, si - (1 << 32), si)
    m, t = in_item % GROUP_BATCH, in_item // GROUP_BATCH
    lane = 4 * (m % 8) + n[o] // 2
    bits = (1 | ((n[o] & 1) << 1)) << (4 * t + 2 * (m // 8))
    owner = torch.zeros(n_items * 32, dtype=torch.int64, device=dev)
    owner.index_add_(0, item_of * 32 + lane, bits)  # (distinct bits: the sum is their or)
    owner = torch.where(owner >= 1 << 31, owner - (1 << 32), owner)
    items = torch.stack([item_seg % n_groups, item_count], 1).reshape(-1)
    block_data = torch.tensor(spans, dtype=torch.int64, device=dev).reshape(-1)
    gaps = [torch.zeros(k, dtype=torch.int64, device=dev) for k in (at_items - 3 * len(spans), head - at_items - 2 * n_items)]
    data = torch.cat([block_data, gaps[0], items, gaps[1], jn, pr, owner, si]).int().contiguous()
    return RowGroups(data, len(spans), n_items, slots, width)


def _phase_counts(C: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """[items, 16, 8] int64: how many of its entries of bank class c item i puts in its phase p
    (8 slots, one ldmatrix phase) of P = ceil(count / 8), given C [items, 8], the entries per
    class. A phase's ldmatrix takes as many wavefronts as its most frequent class, so the sum over
    phases is at least D = max(P, max_c C): the phases' budgets spread D over the P phases, and
    each phase's 8 slots go, least slack first, to the units (class c's k-th entry in the phase,
    k below the budget) of highest urgency R_c - k - F (R_c: the class's entries left, F: the
    later phases' budgets). A phase takes at least what the later ones cannot hold (its budget
    raised where needed), so every entry is placed. At 10000^2 with 5M entries (K = 32) this
    takes 1.40 (uniform) and 1.30 (R-MAT) wavefronts per phase, against lower bounds of 1.36 and
    1.27; slots by rank within their class, the earlier order, took 1.53 and 1.39 (ncu on an
    H200: the kernel's ldmatrix wavefronts 3.85M -> 3.52M uniform)."""
    n, dev = C.shape[0], C.device
    R = C.clone()
    P = torch.clamp(-(-count // 8), min=1)
    D = torch.maximum(P, C.max(1).values if n else P)
    base, rem = D // P, D % P
    k = torch.arange(8, device=dev)
    raise_by = torch.arange(9, device=dev)[None, :]
    rows = torch.arange(n, device=dev)[:, None] * 8
    out = torch.zeros(n, 16, 8, dtype=torch.int64, device=dev)
    for s in range(16):
        d = base + (rem > s).long()
        need = R.sum(1) - 8 * torch.clamp(P - s - 1, min=0)  # what the later phases cannot hold
        # the budget raised to the least d + j (j <= 8) whose units reach `need`
        units = torch.minimum(R[:, :, None], (d[:, None] + raise_by)[:, None, :]).sum(1)  # [items, 9]
        d = d + torch.where(units >= need[:, None], raise_by, 8).min(1).values
        later = D - (s + 1) * base - torch.clamp(rem, max=s + 1)
        ok = k[None, None, :] < torch.minimum(R, d[:, None])[:, :, None]
        key = torch.where(ok, R[:, :, None] - k[None, None, :] - later[:, None, None], -(1 << 40)).reshape(n, 64)
        top = torch.sort(key, dim=1, descending=True, stable=True).indices[:, :8]
        take = (torch.gather(key, 1, top) > -(1 << 40)) & (s < P)[:, None]
        x = torch.zeros(n * 8, dtype=torch.int64, device=dev)
        x.index_add_(0, (rows + top // 8)[take], torch.ones(int(take.sum()), dtype=torch.int64, device=dev))
        R -= x.view(n, 8)
        out[:, s] = x.view(n, 8)
    if bool((R != 0).any()):
        raise AssertionError("row groups: a work item's entries left over after its phases")
    return out


def tile_order(counts: torch.Tensor, sms: int) -> torch.Tensor:
    """The launch order (a permutation of the tiles, int64) of T tensor-core tiles of `counts`
    entries on a GPU of `sms` SMs, sms < T <= 2 sms: the X = T - sms tiles past one per SM share
    an SM with another while they run (two tile blocks are resident per SM). As measured (not
    documented), the hardware places blocks 0 .. sms - 1 one per SM and block sms + i beside block
    i, so the 2 X lightest tiles go to both ends (the heavier X of them first, the lightest X
    last) and the rest, heaviest first, between. Measured (H200, 2026-11-30, docs/PERFORMANCE.md
    "the tiles' waves at K = 256"): 1504^2 with 746k R-MAT entries (144 tiles of 529 to 13787
    entries) took 7.4 us as a graph against 8.5-8.7 in row-major or heaviest-first order.
    `counts`: int tensor [T]; ValueError unless sms < T <= 2 sms."""
    T = counts.numel()
    if not 0 < sms < T <= 2 * sms:
        raise ValueError(f"tile_order of {T} tiles on {sms} SMs: expected more tiles than SMs, at most twice as many")
    X = T - sms
    by = torch.sort(counts, descending=True, stable=True).indices
    light = by[T - 2 * X:]
    return torch.cat([light[:X], by[:T - 2 * X], light[X:]])


def dispatch_plan(p: SparsePattern, BM: int, BN: int, dot_below: int, sms: int = 0) -> DispatchPlan:
    """`p`'s entries split between tensor-core tiles (BM x BN tiles with >= `dot_below` entries)
    and dot products (the rest), as DispatchPlan. The tiles are in row-major order, except where
    there are more than `sms` (the GPU's SMs; 0: no GPU) and at most twice as many: then in
    `tile_order`'s. Memoized per (pattern object, BM, BN, dot_below, sms), like tile_lists (which
    it builds on): the cost of a first call with a new pattern object is the pattern's
    preprocessing."""
    key = ("dispatch", BM, BN, int(dot_below), int(sms))
    if key not in p._memo:
        tl = tile_lists(p, BM, BN)
        counts = tl.tile_ptr[1:] - tl.tile_ptr[:-1]
        tc = counts >= dot_below
        dev = p.rows.device
        tc_counts = counts[tc]
        tile_m, tile_n = tl.tile_m[tc], tl.tile_n[tc]
        slot_tc = torch.repeat_interleave(tc, counts.long()) if p.nnz else torch.zeros(0, dtype=torch.bool, device=dev)
        tc_order = tl.order[slot_tc]
        if 0 < sms < tc_counts.numel() <= 2 * sms:  # the tiles past one per SM: lightest at both ends
            perm = tile_order(tc_counts, sms)
            first = (torch.cumsum(tc_counts, 0) - tc_counts)[perm].long()
            n = tc_counts[perm].long()
            at = torch.repeat_interleave(first - torch.cumsum(n, 0) + n, n) + torch.arange(int(n.sum()), device=dev)
            tc_order, tc_counts, tile_m, tile_n = tc_order[at], tc_counts[perm], tile_m[perm], tile_n[perm]
        tc_ptr = torch.zeros(tc_counts.numel() + 1, dtype=torch.int32, device=dev)
        tc_ptr[1:] = tc_counts.cumsum(0)
        dot = tl.order[~slot_tc].long()
        if dot.numel():  # (row, column) order: consecutive entries share A's row (and B's columns nearby)
            dot = dot[torch.sort(p.rows[dot].long() * max(p.N, 1) + p.cols[dot].long()).indices]
        e = tc_order.long()  # each tile entry's (row, column) in its tile, packed
        r, c = (p.rows[e] % BM).long(), (p.cols[e] % BN).long()
        tc_rc = torch.full_like(tc_order, -1) if BM > 32768 or BN > 65536 else ((r << 16) | c).int()
        if rc_packed16(BM, BN):  # the bits of (r << 8) | c as int16 (torch has no uint16 arithmetic)
            pos, width = (r << 8) | c, 8
            pos = torch.where(pos >= 32768, pos - 65536, pos).to(torch.int16)
        else:
            pos, width = tc_rc, 4
        tc_pos = torch.zeros(-(-pos.numel() // width) * width, dtype=pos.dtype, device=dev)
        tc_pos[:pos.numel()] = pos
        tc_rbase = _row_bases(e, r, tc_counts, BM, dev)
        sequential = tc_counts.numel() == 0 and dot.numel() > 0 and bool(
            (dot == torch.arange(dot.numel(), device=dev)).all())
        p._memo[key] = DispatchPlan(tc_ptr, tile_m.contiguous(), tile_n.contiguous(),
                                    tc_order.contiguous(), dot.int().contiguous(), tc_rc.contiguous(), tc_pos,
                                    tc_rbase, sequential)
    return p._memo[key]


def _row_bases(e: torch.Tensor, r: torch.Tensor, tc_counts: torch.Tensor, BM: int, dev) -> torch.Tensor:
    """DispatchPlan.tc_rbase for the tile entries `e` (in slot order) at rows `r` of their tiles
    (tc_counts entries per tile): e - slot per (tile, row), int32 [n_tc * BM], when that is one
    value for every slot of each tile row; else empty."""
    n_tc, n = tc_counts.numel(), e.numel()
    if n == 0 or n_tc * BM > max(4 * n, 1 << 16) or n_tc * BM + n >= 2**31:
        return torch.zeros(0, dtype=torch.int32, device=dev)
    tile = torch.repeat_interleave(torch.arange(n_tc, device=dev), tc_counts.long())
    key = tile * BM + r
    d = e - torch.arange(n, device=dev)
    base = torch.zeros(n_tc * BM, dtype=torch.int64, device=dev)
    base[key] = d
    if not bool((base[key] == d).all()):
        return torch.zeros(0, dtype=torch.int32, device=dev)
    return base.int()


def _first(mask: torch.Tensor) -> int | None:  # the index of the first True, None if none
    return int(mask.nonzero()[0, 0]) if bool(mask.any()) else None


def _check_shape(shape, M: int | None, N: int | None) -> tuple[int, int]:
    """(M, N) of a 2-D `shape` that matches the expected M, N (if given) and fits int32."""
    shape = tuple(int(s) for s in shape)
    if len(shape) != 2:
        raise SparseInputError(f"`S` has {len(shape)} dimensions (shape {shape}); expected a 2-D matrix")
    for name, want, got, what in (("M", M, shape[0], "rows"), ("N", N, shape[1], "columns")):
        if want is not None and want != got:
            raise SparseInputError(f"`S` has {got} {what} (shape {shape}); expected {name} = {want}")
        if not 0 <= got <= _INT32_MAX:
            raise SparseInputError(f"`S` has {got} {what}; expected 0 to {_INT32_MAX} (int32 indices)")
    return shape


def _index_tensor(x, what: str, device) -> torch.Tensor:
    """A torch or numpy index array as an int64 tensor on `device`; its dtype must be integer."""
    t = torch.as_tensor(x)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise SparseInputError(f"`{what}` has dtype {x.dtype}; expected an integer index type (int32 or int64)",
                               "convert the indices with `.astype(np.int32)` / `.to(torch.int32)`")
    return t.to(device=device, dtype=torch.int64)


def _check_range(idx: torch.Tensor, bound: int, what: str) -> None:
    k = _first((idx < 0) | (idx >= bound))
    if k is not None:
        raise SparseInputError(f"{what} index of entry {k} is {int(idx[k])}; expected it in [0, {bound})",
                               "the indices and the matrix shape must describe the same matrix")


def _check_crow(crow: torch.Tensor, M: int, nnz: int) -> None:
    if crow.numel() != M + 1:
        raise SparseInputError(f"`crow_indices` has {crow.numel()} elements; expected M + 1 = {M + 1}")
    if int(crow[0]) != 0 or int(crow[-1]) != nnz:
        raise SparseInputError(f"`crow_indices` runs from {int(crow[0])} to {int(crow[-1])}; expected 0 to nnz = "
                               f"{nnz} (the number of column indices)")
    k = _first(crow[1:] < crow[:-1])
    if k is not None:
        raise SparseInputError(f"`crow_indices` decreases at row {k}: {int(crow[k])} then {int(crow[k + 1])}",
                               "row pointers count the entries before each row: non-decreasing")


def _check_row_major(rows: torch.Tensor, cols: torch.Tensor, fmt: str) -> None:
    """Rows non-decreasing, columns strictly increasing within a row (CSR order)."""
    k = _first(rows[1:] < rows[:-1])
    if k is not None:
        raise SparseInputError(f"a `{fmt}` pattern used as `csr` must be in row-major order, but entry {k + 1} has "
                               f"row {int(rows[k + 1])} after row {int(rows[k])}", "sort the entries by (row, column) "
                               "(scipy: `S.tocsr()`; torch: `t.coalesce()`), or ask for `coo`")
    k = _first((rows[1:] == rows[:-1]) & (cols[1:] <= cols[:-1]))
    if k is None:
        return
    row, before, after = int(rows[k]), int(cols[k]), int(cols[k + 1])
    if before == after:
        raise SparseInputError(f"duplicate entry ({row}, {after}): entries {k} and {k + 1}", _DUP_NOTE)
    raise SparseInputError(f"column indices of row {row} are not sorted: {after} comes after {before}", _SORT_NOTE)


def _check_unique(rows: torch.Tensor, cols: torch.Tensor, N: int) -> None:
    """No (row, col) twice; names the first entry that repeats an earlier one."""
    keys = rows.long() * N + cols.long()
    if bool((keys[1:] > keys[:-1]).all()):  # CSR order: unique without a sort
        return
    sorted_keys, perm = torch.sort(keys, stable=True)
    dup = sorted_keys[1:] == sorted_keys[:-1]
    if not bool(dup.any()):
        return
    pos = int(torch.argmin(perm[1:][dup]))
    first, second = int(perm[:-1][dup][pos]), int(perm[1:][dup][pos])
    raise SparseInputError(f"duplicate entry ({int(rows[second])}, {int(cols[second])}): entries {first} and "
                           f"{second}", _DUP_NOTE)


def _trusted(M: int, N: int, fmt: str, rows: torch.Tensor, cols: torch.Tensor) -> SparsePattern:
    p = SparsePattern(M, N, fmt, rows.to(torch.int32), cols.to(torch.int32))
    p._memo["checked"] = True
    return p


def _checked(p: SparsePattern) -> SparsePattern:
    """`p`, checked for its own format once (patterns built here are checked already)."""
    if p._memo.get("checked"):
        return p
    _check_range(p.rows, p.M, "row")
    _check_range(p.cols, p.N, "column")
    if p.fmt == "csr":
        _check_row_major(p.rows, p.cols, "csr")
    else:
        _check_unique(p.rows, p.cols, p.N)
    p._memo["checked"] = True
    return p


def _as_format(p: SparsePattern, fmt: str) -> SparsePattern:
    """Checked `p` relabelled as `fmt` (memoized on `p`): csr -> coo always, coo -> csr in CSR order."""
    if p.fmt == fmt:
        return p
    if ("as", fmt) not in p._memo:
        if fmt == "csr":
            _check_row_major(p.rows, p.cols, p.fmt)
        p._memo[("as", fmt)] = _trusted(p.M, p.N, fmt, p.rows, p.cols)
    return p._memo[("as", fmt)]


def _from_csr(crow, cols, shape, M, N, device) -> SparsePattern:
    M, N = _check_shape(shape, M, N)
    crow, cols = _index_tensor(crow, "crow_indices", device), _index_tensor(cols, "col_indices", device)
    _check_crow(crow, M, cols.numel())
    _check_range(cols, N, "column")
    rows = torch.repeat_interleave(torch.arange(M, device=device), crow.diff(), output_size=cols.numel())
    _check_row_major(rows, cols, "csr")
    return _trusted(M, N, "csr", rows, cols)


def _from_coo(rows, cols, shape, M, N, device) -> SparsePattern:
    M, N = _check_shape(shape, M, N)
    rows, cols = _index_tensor(rows, "row", device), _index_tensor(cols, "col", device)
    _check_range(rows, M, "row")
    _check_range(cols, N, "column")
    _check_unique(rows, cols, N)
    return _trusted(M, N, "coo", rows, cols)


def _from_torch(t: torch.Tensor, M, N) -> SparsePattern:
    if t.layout not in (torch.sparse_csr, torch.sparse_coo):
        raise SparseInputError(f"a torch tensor of layout `{t.layout}` is not a sparse pattern; expected "
                               "`torch.sparse_csr` or `torch.sparse_coo`", "convert it with `t.to_sparse_csr()`")
    _check_shape(t.shape, M, N)  # before reading indices: batched CSR, hybrid or 1-D COO tensors fail here
    if t.layout == torch.sparse_csr:
        return _from_csr(t.crow_indices(), t.col_indices(), t.shape, M, N, t.device)
    idx = t._indices()  # the given order (`indices()` insists on a coalesced tensor)
    return _from_coo(idx[0], idx[1], t.shape, M, N, t.device)


def _from_scipy(m, fmt: str, M, N) -> SparsePattern:
    _check_shape(m.shape, M, N)
    if m.format not in FORMATS:  # csc, bsr, lil, dok, dia: the order is ours to choose
        m = m.tocsr() if fmt == "csr" else m.tocoo()
        m = m.sorted_indices() if m.format == "csr" and not m.has_sorted_indices else m
    if m.format == "csr":
        return _from_csr(m.indptr, m.indices, m.shape, M, N, "cpu")
    return _from_coo(m.row, m.col, m.shape, M, N, "cpu")


def _mm_call(fn, name: str):
    """scipy.io.mminfo / mmread on `name`, its errors as SparseInputError naming the file."""
    try:
        return fn(name)
    except FileNotFoundError as exc:
        raise SparseInputError(f"cannot open `{name}`: no such file", "check the path") from exc
    except (OSError, ValueError, OverflowError) as exc:
        raise SparseInputError(f"`{name}` is not a valid Matrix Market file", f"scipy.io.{fn.__name__}: {exc}") from exc


def _row_pointers(rows: torch.Tensor, M: int) -> torch.Tensor:
    crow = torch.zeros(M + 1, dtype=torch.int32, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=M).cumsum(0)
    return crow


def _from_sorted_keys(keys: torch.Tensor, M: int, N: int) -> SparsePattern:
    """The csr pattern of strictly increasing int64 linear positions row * N + col."""
    return _trusted(M, N, "csr", keys // max(N, 1), keys % max(N, 1))


def _check_request(M: int, N: int, nnz: int) -> None:
    _check_shape((M, N), None, None)
    if not 0 <= nnz <= M * N:
        raise SparseInputError(f"`nnz` = {nnz} does not fit a {M} x {N} matrix; expected 0 to {M * N} entries")


def _subset(keys: torch.Tensor, nnz: int, g: torch.Generator) -> torch.Tensor:
    """A uniformly random `nnz` of the sorted distinct `keys`, sorted: drops a random set of the
    excess (drawn by rejection when it is at most half), else keeps a random permutation's head."""
    n = keys.numel()
    if 2 * (n - nnz) > n:
        return keys[torch.randperm(n, generator=g)[:nnz]].sort().values
    drop = torch.empty(0, dtype=torch.int64)
    while drop.numel() < n - nnz:
        drop = torch.unique(torch.cat([drop, torch.randint(0, n, (n - nnz - drop.numel(),), generator=g)]))
    keep = torch.ones(n, dtype=torch.bool)
    keep[drop] = False
    return keys[keep]


def _rmat_cuts(a, b, c, d, noise, levels, g) -> torch.Tensor:
    """float32 [levels, 3]: the cumulative quadrant probabilities (a, a + b, a + b + c) per level."""
    mu = (torch.rand(levels, generator=g, dtype=torch.float64) * 2 - 1) * noise * min(b, c, (a + d) / 2)
    pa = a - 2 * mu * a / (a + d) if a + d > 0 else torch.full_like(mu, a)
    return torch.stack([pa, pa + b + mu, pa + b + c + 2 * mu], dim=1).float()


def _rmat_draw(k: int, cuts: torch.Tensor, bits: tuple[int, int], M: int, N: int, g) -> torch.Tensor:
    """Linear positions row * N + col (int64) of the `k` R-MAT candidates that fall inside M x N:
    quadrants over all levels of a 2^L x 2^L square, then each side keeps its first `bits` levels."""
    rows = torch.zeros(k, dtype=torch.int32)
    cols = torch.zeros(k, dtype=torch.int32)
    u = torch.empty(k)
    for ta, tab, tabc in cuts.tolist():
        u.uniform_(generator=g)
        down = u >= tab  # quadrants c, d: the bottom half
        rows.mul_(2).add_(down)
        cols.mul_(2).add_((u >= ta) ^ down ^ (u >= tabc))  # quadrants b, d: the right half
    rows >>= cuts.shape[0] - bits[0]
    cols >>= cuts.shape[0] - bits[1]
    inside = (rows < M) & (cols < N)
    return rows[inside].long() * N + cols[inside]

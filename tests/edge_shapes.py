"""Shapes at every tile edge, for every example and test program (issue 9, item 3).

`SPECS` names, per `.tk` file, small base dims and schedule constants (small enough for the
interpreter, large enough for several blocks), the tile that cuts each dim (a schedule constant, a
dim, or a number such as a vector width or the cluster's half), and dims that must stay a multiple
of something (`requires K % R == 0`). `edge_cases(path)` varies one tiled dim at a time over
k*tile - 1, k*tile, k*tile + 1 (k = 2; k = 1 for a dim the kernel covers with one tile) and
below one tile, and adds one case where every tiled dim
is partial at once, other stage counts at the base dims, and the file's other schedule constants (`variants`) at
the base dims. The CPU suite (tests/test_edges.py) and the GPU quick tier
(tests/gpu/test_gpu_quick.py) run them all.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Spec:
    base: dict[str, int]  # dims
    consts: dict[str, int] = field(default_factory=dict)  # schedule constants (tile sizes, stages)
    tiles: dict[str, str | int] = field(default_factory=dict)  # dim -> the tile that cuts it
    multiple_of: dict[str, str] = field(default_factory=dict)  # dim -> dim it must be a multiple of
    at_most_one_tile: tuple[str, ...] = ()  # dims the kernel covers with a single tile
    even: tuple[str, ...] = ()  # dims that must stay even (2-block clusters)
    # other schedule constants, each run once at the base dims (a tile width whose last dim
    # gives the CUDA backend's 2- or 4-wide chunks instead of 8-wide, say)
    variants: tuple[dict[str, int], ...] = ()
    # input distributions the kernel's math is defined on (tkc/oracle.py DISTRIBUTIONS)
    dists: tuple[str, ...] = ("normal", "negative", "offset", "wide", "ints")
    # a sparse pattern's (entries, rows, cols) dims: the entries are capped at rows x cols
    entries: tuple[str, str, str] | None = None


_MISS = {"M": "BM", "N": "BN"}
SPECS: dict[str, Spec] = {
    "examples/miss.tk": Spec({"M": 40, "N": 72, "K": 100, "R": 16}, {"BM": 16, "BN": 32, "stages": 3},
                             {**_MISS, "K": "R"},
                             # the file's own BN: two mma blocks per warp along N, stored 16 bytes
                             # per lane after a quad transpose (codegen/cuda_gemm.py wide_store_out)
                             variants=({"BN": 128},)),
    # PEFT's MiSS adapter plus the base output (tkc.integrations.peft): miss.tk's tiling, any K
    # (miss_split.tk's decompositions: the variants split N and stage the stores)
    "examples/peft_miss.tk": Spec({"M": 40, "N": 72, "K": 100, "R": 16}, {"BM": 16, "BN": 32, "stages": 3},
                                  {**_MISS, "K": "R"}, variants=({"NS": 2, "STAGE_C": 1},)),
    "examples/peft_miss_bf16.tk": Spec({"M": 40, "N": 72, "K": 100, "R": 16}, {"BM": 16, "BN": 32, "stages": 3},
                                       {**_MISS, "K": "R"}, variants=({"NS": 3, "STAGE_C": 1},)),
    # the whole PEFT MiSS layer at a few tokens: a GEMV over W's rows (BD) and K (BK), then the
    # shard sum U shards per trip (K = 100 leaves a partial trip in both loops); U = 1, BD = 2 are
    # the other layouts
    "examples/peft_miss_linear.tk": Spec({"M": 3, "N": 70, "K": 100, "R": 16}, {"BD": 4, "BK": 32, "U": 2},
                                         {"N": "BD", "K": "BK"}, variants=({"U": 1, "BD": 2},)),
    "examples/peft_miss_linear_bf16.tk": Spec({"M": 3, "N": 70, "K": 100, "R": 16}, {"BD": 4, "BK": 32, "U": 2},
                                              {"N": "BD", "K": "BK"}, variants=({"U": 1, "BD": 2},)),
    # M dynamic (one compile for every M); NS = 2 leaves the second slice's last N tile wholly
    # past N (guarded), threads = 256 and STAGE_C = 0 are the other layouts; U = 1 one shard per
    # trip (the file's U = 4 takes K = 100 in two trips of 64, the second partial); BM = 64 with
    # NS = 1: wgmma, and staged stores rotating over two copies (TMA stores) past M's edge
    "examples/miss_split.tk": Spec({"M": 40, "N": 72, "K": 100, "R": 16},
                                   {"BM": 16, "BN": 32, "NS": 2, "STAGE_C": 1, "stages": 3},
                                   {**_MISS, "K": "R"},
                                   variants=({"NS": 1, "STAGE_C": 0}, {"NS": 3, "threads": 256}, {"U": 1},
                                             {"NS": 1, "BM": 64, "BN": 64})),
    "examples/miss_v3.tk": Spec({"M": 40, "N": 72, "K": 48, "R": 16}, {"BM": 16, "BN": 32, "stages": 3},
                                _MISS, multiple_of={"K": "R"}),
    "examples/miss_mtile.tk": Spec({"M": 40, "N": 40, "K": 48, "R": 16}, {"BM": 16, "stages": 2},
                                   {"M": "BM", "N": 16}, multiple_of={"K": "R"}),
    "examples/miss_row.tk": Spec({"M": 5, "N": 40, "K": 48, "R": 16}, {"stages": 2},
                                 {"N": 16}, multiple_of={"K": "R"}),
    "examples/cluster_reduce_dsmem.tk": Spec({"B": 4, "N": 72}, {}, {"B": 2, "N": 16}, even=("B",)),
    "examples/cluster_reduce_dsmem_pull.tk": Spec({"B": 4, "N": 72}, {}, {"B": 2, "N": 16}, even=("B",)),
    "examples/cluster_reduce_hbm.tk": Spec({"B": 4, "N": 72}, {}, {"B": 2, "N": 16}, even=("B",)),
    "examples/rmsnorm.tk": Spec({"B": 3, "N": 72}, {"threads": 128, "BR": 2}, {"B": "BR", "N": 16},  # N: whole rows
                                variants=({"BR": 1},)),
    "examples/matmul.tk": Spec({"D": 40, "K": 100}, {"BD": 4, "BK": 32}, {"D": "BD", "K": "BK"}),
    "examples/matmul_f16.tk": Spec({"D": 40, "K": 100}, {"BD": 4, "BK": 32}, {"D": "BD", "K": "BK"}),
    # GS: whole groups of 8-wide chunks (and 2- or 1-wide at the edges)
    "examples/matmul_q8.tk": Spec({"D": 40, "G": 5, "GS": 32}, {"BD": 4, "NG": 2}, {"D": "BD", "G": "NG", "GS": 8},
                                  variants=({"NG": 8, "threads": 64},)),
    # GS: 4-wide chunks and wider go to __dp4a on `cuda` (fuse-int8-dot); 31 and 33 stay elementwise
    "examples/matmul_w8a8.tk": Spec({"D": 40, "G": 5, "GS": 32}, {"BD": 4, "NG": 2}, {"D": "BD", "G": "NG", "GS": 16},
                                    variants=({"NG": 8, "threads": 64},)),
    "examples/matmul_residual.tk": Spec({"D": 40, "K": 100}, {"BD": 4, "BK": 32}, {"D": "BD", "K": "BK"}),
    # the int8 twins of the fused decode kernels: matmul_q8's tiles
    "examples/matmul_q8_residual.tk": Spec({"D": 40, "G": 5, "GS": 32}, {"BD": 4, "NG": 2},
                                           {"D": "BD", "G": "NG", "GS": 8}, variants=({"NG": 8, "threads": 64},)),
    "examples/rmsnorm_matmul_q8.tk": Spec({"D": 40, "G": 5, "GS": 32}, {"BD": 4, "NG": 2},
                                          {"D": "BD", "G": "NG", "GS": 8}, variants=({"NG": 8, "threads": 64},)),
    # as rmsnorm_ffn_gate.tk, and `offset` too: its int8 weights put W1 @ xn far below 0 on whole
    # rows, where silu underflows the reference to 0
    "examples/rmsnorm_ffn_gate_q8.tk": Spec({"H": 40, "G": 5, "GS": 32}, {"BD": 4, "NG": 2},
                                            {"H": "BD", "G": "NG", "GS": 8}, variants=({"NG": 8, "threads": 64},),
                                            dists=("normal", "ints")),
    "examples/rmsnorm_matmul.tk": Spec({"D": 40, "K": 100}, {"BD": 4, "BK": 32}, {"D": "BD", "K": "BK"}),
    "examples/ffn_gate.tk": Spec({"H": 40, "K": 100}, {"BD": 4, "BK": 32}, {"H": "BD", "K": "BK"},
                                 # `wide` puts W1 @ X near -1e3 on whole rows: silu underflows to 0 there
                                 dists=("normal", "negative", "offset", "ints")),
    "examples/rmsnorm_ffn_gate.tk": Spec({"H": 40, "K": 100}, {"BD": 4, "BK": 32}, {"H": "BD", "K": "BK"},
                                         # as ffn_gate; `negative` too: a negative X times a negative
                                         # G normalizes to a positive row, W1 @ xn near -1e2 everywhere
                                         dists=("normal", "offset", "ints")),
    # runtime scalar `pos` (alternating S - 1 and 0); D, KVD: whole heads of HD; the variant is
    # grouped-query attention (KVD < D: blocks past KVD read zeros and store outside the caches)
    "examples/qkv_rope.tk": Spec({"K": 100, "D": 64, "KVD": 64, "S": 5}, {"HD": 16, "BD": 4, "BK": 32},
                                 {"K": "BK"}, multiple_of={"D": "HD", "KVD": "HD"},
                                 variants=({"BD": 8, "threads": 32}, {"KVD": 32}, {"BD": 2, "BK": 128})),
    # one block holds the row (V <= BV): `ints` gives ties (the first index must win)
    "examples/argmax.tk": Spec({"V": 300}, {"BV": 512, "threads": 64}, {"V": 128}, at_most_one_tile=("V",),
                               variants=({"BV": 300},)),
    "examples/silu_mul.tk": Spec({"B": 3, "H": 72}, {"BN": 32, "threads": 32}, {"B": 1, "H": "BN"}),
    # runtime scalar `pos`: the inputs alternate between its largest allowed value and 0
    "examples/rope.tk": Spec({"B": 3, "D": 64}, {"HD": 16}, {"B": 1, "D": "HD"}, multiple_of={"D": "HD"},
                             variants=({"BR": 2}, {"BR": 4, "threads": 64})),  # rows per block, B % BR != 0
    # KVD = HD: one key/value head for every query head (multi-query); the KVD variant gives each
    # query head its own (multi-head) at H = 3
    "examples/attention.tk": Spec({"H": 3, "HD": 32, "S": 40, "KVD": 32}, {"BT": 16}, {"H": 1, "S": "BT"},
                                  # + 2 kv heads of 2; 48-wide heads (stories15M): `tilelang` stages both
                                  # sums and shares the vectors (smem_tilelang.vectors_in_shared)
                                  variants=({"KVD": 96}, {"H": 4, "KVD": 64},
                                            {"HD": 48, "KVD": 144, "BT": 32, "threads": 128})),
    "examples/attention_split.tk": Spec({"H": 3, "HD": 32, "S": 40, "KVD": 32}, {"BT": 8, "SPLIT": 2},
                                        {"H": 1, "S": "BT"},
                                        variants=({"SPLIT": 4, "BT": 4}, {"SPLIT": 1}, {"KVD": 96}, {"H": 4, "KVD": 64})),
    # the split merged across `sync grid` (cuda and the interpreter only): SPLIT = 1 one block per
    # head; SPLIT = 8 with 5 tiles at pos 39: blocks without a tile pass the barrier and add nothing
    "examples/attention_grid.tk": Spec({"H": 3, "HD": 32, "S": 40, "KVD": 32}, {"BT": 8, "SPLIT": 2},
                                       {"H": 1, "S": "BT"},
                                       variants=({"SPLIT": 4, "BT": 4}, {"SPLIT": 1}, {"SPLIT": 8}, {"KVD": 96},
                                                 {"H": 4, "KVD": 64})),
    # `mut` caches: one row written at pos (the inputs alternate between pos S - 1 and 0)
    "examples/kv_store.tk": Spec({"S": 5, "KVD": 72}, {"BN": 32, "threads": 32}, {"KVD": "BN"}),
    "examples/embedding.tk": Spec({"V": 50, "N": 72, "B": 3}, {"BN": 32}, {"B": 1, "N": "BN"}),
    "examples/accum.tk": Spec({"B": 3, "N": 72}, {"BN": 32, "threads": 32}, {"B": 1, "N": "BN"}),
    # a whole layer in one persistent grid of NB blocks with `sync grid` between its phases (cuda and
    # the interpreter only): K and HID cut by the GEMVs' rows per item (BD, BDF); grouped-query heads (KVD < D);
    # variants: multi-head, more blocks than any phase has items (idle blocks pass the barriers),
    # one block doing every item, two rows per item over 64 threads
    "examples/llama_layer.tk": Spec({"K": 40, "D": 32, "KVD": 16, "HID": 40, "S": 6},
                                    {"HD": 8, "BD": 4, "BDF": 8, "BT": 4, "NB": 3},
                                    {"K": "BD", "HID": "BDF"}, multiple_of={"D": "HD", "KVD": "HD"},
                                    variants=({"KVD": 32}, {"NB": 24}, {"NB": 1}, {"BD": 2, "threads": 64})),
    "tests/programs/bf16_ops.tk": Spec({"M": 40, "N": 64, "K": 32}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"}),
    "tests/programs/cluster_pulled_sum.tk": Spec({"M": 40, "K": 256, "N": 96, "R": 32}, {"BM": 16, "BN": 32},
                                                 {"M": "BM", "N": "BN"}, variants=({"CS": 2},)),
    "tests/programs/reshape.tk": Spec({"M": 20, "N": 16}, {"BM": 8}, {"M": "BM"}),
    "tests/programs/async_copy.tk": Spec({"M": 40, "N": 72}, {"BM": 16}, {"M": "BM", "N": 16}),
    "tests/programs/elementwise.tk": Spec({"M": 40, "N": 64}, {"BM": 16, "BN": 64}, {"M": "BM", "N": "BN"},
                                          at_most_one_tile=("N",),
                                          # exp of an f16 tile overflows past 11.1: `wide` reaches 190
                                          dists=("normal", "negative", "offset", "ints")),
    "tests/programs/reduce.tk": Spec({"M": 40, "N": 40}, {"BM": 16}, {"M": "BM", "N": 16}),
    "tests/programs/row_sum_loop.tk": Spec({"M": 40, "N": 72}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"}),
    "tests/programs/self_compare.tk": Spec({"N": 72}, {"BN": 32}, {"N": "BN"}),
    "tests/programs/compare_where.tk": Spec({"M": 40, "N": 72}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"}),
    "tests/programs/dim_exprs.tk": Spec({"M": 40, "H": 24}, {"BM": 16}, {"M": "BM"}),
    "tests/programs/rank_broadcast.tk": Spec({"M": 40, "N": 72}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"}),
    "tests/programs/softmax.tk": Spec({"M": 40, "N": 72}, {"BM": 16}, {"M": "BM", "N": 16}),  # N: whole rows
    "tests/programs/int8_cast.tk": Spec({"M": 3, "N": 300}, {"BN": 256}, {"M": 1, "N": "BN"},
                                        variants=({"BN": 32},)),
    "tests/programs/math_fns.tk": Spec({"M": 40, "N": 72}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"}),
    "tests/programs/floor_div.tk": Spec({"M": 40, "N": 67}, {"BM": 16}, {"M": "BM"}),
    "tests/programs/update_ops.tk": Spec({"M": 40, "N": 72}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"},
                                         variants=({"BN": 6}, {"BN": 4})),  # 2- and 4-wide CUDA chunks
    "tests/programs/gemm_loop.tk": Spec({"M": 72, "N": 40, "K": 100}, {"BM": 32, "BN": 32, "BK": 16, "stages": 3},
                                        {"M": "BM", "N": "BN", "K": "BK"},
                                        variants=({"BK": 8},)),  # BK % 16 != 0: the CUDA SIMT gemm, in a loop
    # 4 warps of 16 x 16, each thread 4 x 2 (WMITER = WNITER = 1); variants: WMITER = 2, WNITER = 2,
    # TM = 1 (scalar A loads), BK = 16 (K = 40 ends in a half tile loaded by guarded cp.async),
    # and the file's own tiling (one partial 128 x 128 block)
    # SDDMM: tiles of S cut M and N; NNZ entries drawn uniformly (fewer than M x N at every case)
    # (variants: 8 x 8 tiles; one warpgroup's wgmma tiles of 64 x 40 on `cuda`)
    "examples/sddmm.tk": Spec({"M": 40, "N": 72, "K": 24, "NNZ": 300}, {"BM": 16, "BN": 32}, {"M": "BM", "N": "BN"},
                              variants=({"BM": 8, "BN": 8}, {"BM": 64, "BN": 40, "threads": 128}),
                              entries=("NNZ", "M", "N")),
    "examples/sddmm_wmma_16x16x16.tk": Spec({"M": 40, "N": 40, "K": 24, "NNZ": 200}, {"BM": 16, "BN": 16},
                                            {"M": "BM", "N": "BN"}, entries=("NNZ", "M", "N")),
    "examples/sddmm_wmma_32x8x16.tk": Spec({"M": 72, "N": 20, "K": 24, "NNZ": 200}, {"BM": 32, "BN": 8},
                                           {"M": "BM", "N": "BN"}, entries=("NNZ", "M", "N")),
    "examples/sddmm_wmma_8x32x16.tk": Spec({"M": 20, "N": 72, "K": 24, "NNZ": 200}, {"BM": 8, "BN": 32},
                                           {"M": "BM", "N": "BN"}, entries=("NNZ", "M", "N")),
    "examples/sgemm.tk": Spec({"M": 40, "N": 72, "K": 40},
                              {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 2, "WM": 16, "WN": 16, "WNITER": 1,
                               "stages": 2, "threads": 128},
                              {"M": "BM", "N": "BN", "K": "BK"},
                              variants=({"TM": 2, "TN": 2}, {"WNITER": 2, "TN": 1}, {"TM": 1, "TN": 8}, {"BK": 16},
                                        {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 4, "WM": 64, "WN": 64,
                                         "WNITER": 4})),
}


def grid_sync(path: str) -> bool:
    """Whether the kernel has a `sync grid` (a cooperative launch: target cuda and the interpreter
    only; TileLang has no grid barrier)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return re.search(r"^\s*sync\s+grid\b", f.read(), re.M) is not None


def tile_of(spec: Spec, tile: str | int, dims: dict[str, int]) -> int:
    if isinstance(tile, int):
        return tile
    return spec.consts.get(tile, dims.get(tile, spec.base.get(tile, 0)))


def fix(spec: Spec, dims: dict[str, int]) -> dict[str, int] | None:
    """`dims` made valid for the kernel's requirements (None if it cannot be)."""
    out = dict(dims)
    for d, m in spec.multiple_of.items():  # m: a dim or a schedule constant
        unit = out.get(m, spec.consts.get(m))
        out[d] = max(unit, out[d] // unit * unit)
    for d in spec.even:
        out[d] += out[d] % 2
    if spec.entries:
        nnz, m, n = spec.entries
        out[nnz] = min(out[nnz], out[m] * out[n])
    for d in spec.at_most_one_tile:
        if out[d] > tile_of(spec, spec.tiles[d], out):
            return None
    return out if all(v > 0 for v in out.values()) else None


def edge_cases(path: str) -> list[tuple[str, dict[str, int]]]:
    """(case id, dims and constants) at every tile edge of `path` (relative to the repo root)."""
    spec = SPECS[path]
    cases: dict[str, dict[str, int]] = {}
    for dim, tile in spec.tiles.items():
        t = tile_of(spec, tile, spec.base)
        k = 1 if dim in spec.at_most_one_tile else 2
        for value in (max(1, t // 2), k * t - 1, k * t, k * t + 1):
            dims = fix(spec, {**spec.base, dim: value})
            if dims is not None:
                cases.setdefault(f"{dim}={dims[dim]}", {**dims, **spec.consts})
    for stages in (1, 2, 4):  # stage counts against the trip counts above
        if "stages" in spec.consts and stages != spec.consts["stages"]:
            cases[f"stages={stages}"] = {**spec.base, **spec.consts, "stages": stages}
    for v in spec.variants:
        cases[",".join(f"{k}={n}" for k, n in sorted(v.items()))] = {**spec.base, **spec.consts, **v}
    partial = {**spec.base}
    for dim, tile in spec.tiles.items():
        t = tile_of(spec, tile, spec.base)
        partial[dim] = t - 1 if dim in spec.at_most_one_tile else 2 * t + 1
    dims = fix(spec, partial)
    if dims is not None:
        cases.setdefault("all-partial:" + ",".join(f"{d}={dims[d]}" for d in spec.tiles), {**dims, **spec.consts})
    return sorted(cases.items())


def dists(path: str) -> tuple[str, ...]:
    return SPECS[path].dists


def all_cases() -> list[tuple[str, str, dict[str, int]]]:
    """(path, case id, dims and constants) for every file in SPECS."""
    return [(path, case, values) for path in sorted(SPECS) for case, values in edge_cases(path)]


def files_without_spec() -> list[str]:
    """Examples and test programs that SPECS does not cover (a test asserts there are none)."""
    found = [f"examples/{f}" for f in os.listdir(os.path.join(ROOT, "examples")) if f.endswith(".tk")]
    found += [f"tests/programs/{f}" for f in os.listdir(os.path.join(ROOT, "tests", "programs")) if f.endswith(".tk")]
    return sorted(set(found) - set(SPECS))

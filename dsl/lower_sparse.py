"""Lowering of sparse operands and the masked (sampled) tile gemm of SDDMM (seed 003).

A parameter `S: csr[M, N, NNZ]` (or `coo[...]`) is a sparsity pattern: M x N with NNZ entries.
It lowers to two i32 global arguments `S_rows` and `S_cols` [NNZ] (each entry's row and column,
in the pattern's order: row by row for CSR, as given for COO); the runtime fills them from a
torch or scipy sparse matrix, a Matrix Market file or a generator (tkc/sparse.py).

`grid (tiles(S, BM, BN)) as (m, n)` is a grid over the BM x BN tiles of S that hold an entry
(`tile.launch {tiles = "S"}`), and in it `P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]` is the
masked gemm (`tile.sampled_gemm`): P at each entry of the tile gets its dot product. P is
f32[NNZ] (values in S's order) or f32[M, N] (dense, 0 off the pattern).
"""

from __future__ import annotations

from dsl import ast as A
from dsl import exprs
from dsl import ops as O
from dsl.diagnostics import error
from dsl.types import FLOAT_DTYPES, TileType

SPARSE_FORMATS = ("csr", "coo")
SHAPE_NOTE = "declare the pattern's rows, columns and number of entries: `S: csr[M, N, NNZ]`"


def is_sparse(p: A.Param) -> bool:
    return p.dtype in SPARSE_FORMATS


def define_pattern(lw, p: A.Param, shape_of) -> list:
    """Define the global arguments of sparse input `p` (rows, cols); returns them."""
    if p.dims is None or len(p.dims) != 3:
        n = 0 if p.dims is None else len(p.dims)
        raise error(p.loc, f"sparse pattern `{p.name}` has {n} dims; a `{p.dtype}` pattern has 3", SHAPE_NOTE)
    if p.mutable:
        raise error(p.loc, f"sparse pattern `{p.name}` cannot be `mut`")
    m, n, nnz = (shape_of(d, loc) for d, loc in p.dims)
    args = [lw.define(f"{p.name}_{part}", TileType("global", "i32", (nnz,)), p.loc) for part in ("rows", "cols")]
    lw.sparse[p.name] = (p, m, n, nnz, args)
    return args


def tiles_grid(lw, g: A.Grid):
    """The `tile.launch` of `grid (tiles(S, BM, BN)) as (m, n)`, or None for another grid."""
    if len(g.extents) != 1 or not isinstance(g.extents[0], A.Call) or g.extents[0].fn != "tiles":
        return None
    call = g.extents[0]
    if len(call.args) != 3 or not isinstance(call.args[0], A.Name):
        raise error(call.loc, "`tiles` takes a sparse pattern and the tile's rows and columns",
                    "write `grid (tiles(S, BM, BN)) as (m, n)`")
    name = call.args[0].id
    if name not in lw.sparse:
        raise error(call.args[0].loc, f"`{name}` is not a sparse pattern",
                    "declare it among the inputs as `S: csr[M, N, NNZ]` (or `coo[...]`)")
    if len(g.vars) != 2:
        raise error(g.loc, f"a `tiles` grid names 2 indices (the tile's row and column), got {len(g.vars)}",
                    "write `as (m, n)`")
    if g.cluster or g.ranks:
        raise error(g.loc, "a `tiles` grid cannot form clusters")
    _, m, n, _, _ = lw.sparse[name]
    bm, bn = (lw.index(e, allow_vars=False) for e in call.args[1:])
    for e, v in zip(call.args[1:], (bm, bn)):
        if exprs.evaluate(v, lw.env) <= 0:
            raise error(e.loc, "a tile extent must be positive")
    bound = exprs.Bin("*", exprs.Call("cdiv", (m, bm)), exprs.Call("cdiv", (n, bn)))
    lw.tiles = (name, bm, bn, g.vars[0], g.vars[1])
    return {"grid": [exprs.to_str(bound)], "vars": list(g.vars), "tiles": name,
            "tile_shape": [exprs.to_str(bm), exprs.to_str(bn)]}


def is_sampled_store(lw, s) -> bool:
    return (isinstance(s, A.Store) and len(s.subs) == 1 and s.subs[0].kind == "one"
            and isinstance(s.subs[0].lo, A.Name) and s.subs[0].lo.id in lw.sparse)


def sampled_store(lw, s: A.Store) -> None:
    """`P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]` inside `grid (tiles(S, BM, BN)) as (m, n)`."""
    name = s.subs[0].lo.id
    p, m_dim, n_dim, nnz, (rows, cols) = lw.sparse[name]
    if lw.tiles is None or lw.tiles[0] != name:
        raise error(s.loc, f"`{s.target}[{name}] = ...` needs a grid over the tiles of `{name}`",
                    f"start the body with `grid (tiles({name}, BM, BN)) as (m, n)`")
    if s.op is not None:
        raise error(s.loc, f"`{s.op}=` into a sparse pattern is not supported", "write `=`")
    _, bm, bn, mv, nv = lw.tiles
    out = lw.lookup(s.target)
    if not hasattr(out, "type") or out.type.space != "global" or lw.func.body.args.index(out) not in lw.func.attrs["outputs"]:
        raise error(s.loc, f"`{s.target}` is not an output tensor", "store the sampled product into an output")
    env = lw.env
    shape = tuple(exprs.evaluate(d, env) for d in out.type.shape)
    want = [(exprs.evaluate(nnz, env),), (exprs.evaluate(m_dim, env), exprs.evaluate(n_dim, env))]
    if out.type.dtype not in FLOAT_DTYPES or shape not in want:
        raise error(s.loc, f"`{s.target}` is {out.type.dtype}{list(shape)}; a sampled gemm writes a float tensor of "
                    f"the pattern's entries {list(want[0])} or of its shape {list(want[1])}",
                    f"declare it `{s.target}: f32[NNZ]` (values in `{name}`'s order) or `f32[M, N]` (dense)")
    v = s.value
    if not (isinstance(v, A.BinOp) and v.op == "@" and isinstance(v.lhs, A.Index) and isinstance(v.rhs, A.Index)):
        raise error(v.loc, f"a store into `{s.target}[{name}]` takes a product of two global slices",
                    f"write `{s.target}[{name}] = A[{mv}*BM : +BM, :] @ B[:, {nv}*BN : +BN]`")
    a, b = (_operand(lw, x) for x in (v.lhs, v.rhs))
    (a_val, a_off, a_size), (b_val, b_off, b_size) = a, b
    sizes = [[exprs.evaluate(x, env) for x in a_size], [exprs.evaluate(x, env) for x in b_size]]
    tile = [exprs.evaluate(bm, env), exprs.evaluate(bn, env)]
    k = exprs.evaluate(a_val.type.shape[1], env)
    if sizes[0] != [tile[0], k] or exprs.to_str(a_off[1]) != "0":
        raise error(v.lhs.loc, f"the left operand is {sizes[0]}; it must be the tile's rows and all of K: {[tile[0], k]}",
                    f"write `{v.lhs.base}[{mv}*BM : +BM, :]`")
    if sizes[1] != [k, tile[1]] or exprs.to_str(b_off[0]) != "0":
        raise error(v.rhs.loc, f"the right operand is {sizes[1]}; it must be all of K and the tile's columns: "
                    f"{[k, tile[1]]}", f"write `{v.rhs.base}[:, {nv}*BN : +BN]`")
    for (val, off, _), axis, var, ext, x in ((a, 0, mv, bm, v.lhs), (b, 1, nv, bn, v.rhs)):
        for t in (0, 1, 5):  # the tile's corner: row m*BM, column n*BN
            point = {**env, mv: t, nv: t + 3}
            if exprs.evaluate(off[axis], point) != point[var] * exprs.evaluate(ext, env):
                raise error(x.loc, f"`{x.base}` must be sliced at the tile's {'rows' if axis == 0 else 'columns'}: "
                            f"`{var}*{exprs.to_str(ext)}`", "the product is sampled at the entries of the tile")
    if exprs.evaluate(a_val.type.shape[0], env) != want[1][0] or exprs.evaluate(b_val.type.shape[1], env) != want[1][1]:
        raise error(v.loc, f"`{v.lhs.base} @ {v.rhs.base}` is not the shape of `{name}` {list(want[1])}",
                    "A is [M, K] and B is [K, N] for an M x N pattern")
    attrs = {"a_offsets": [exprs.to_str(x) for x in a_off], "b_offsets": [exprs.to_str(x) for x in b_off],
             "tile": [exprs.to_str(bm), exprs.to_str(bn)], "pattern": name}
    lw.emit(O.SampledGemmOp(operands=[a_val, b_val, rows, cols, out], attrs=attrs, loc=s.loc))


def _operand(lw, x: A.Index):
    val = lw.lookup(x.base)
    if not hasattr(val, "type") or val.type.space != "global" or val.type.rank != 2:
        raise error(x.loc, f"`{x.base}` is not a 2-d global tensor", "the sampled gemm multiplies global tensors")
    if val.type.dtype not in FLOAT_DTYPES:
        raise error(x.loc, f"`{x.base}` is {val.type.dtype}; the sampled gemm multiplies float tensors")
    offsets, sizes, steps = lw.slices(val, x.subs, x.loc)
    if any(st != 1 for st in steps):
        raise error(x.loc, "a strided slice cannot feed the sampled gemm")
    return val, offsets, sizes

"""Reference interpreter: the executable meaning of every tile IR op, in numpy.

Runs a module at any level (before or after any pass): blocks of the grid run one after another,
tiles are numpy arrays in their dtype (f16 rounding is real; bf16 is rounded to nearest-even and
held in f32). Arithmetic is f32 (f64 for f64 tiles) and rounds to the output dtype, like the GPU
backends; gemm accumulates in the accumulator's dtype. Reads outside a global tensor give 0,
writes outside it are dropped. Fresh tiles and outputs start as NaN (ints: a poison pattern) so
that unwritten elements show up in comparisons.
"""

from __future__ import annotations

import itertools

import numpy as np

from dsl import exprs
from dsl.ir import Module, Op, Value
from dsl.types import DTYPES

_POISON_INT = -0x5A5A5A5A


def np_dtype(dtype: str):
    return np.dtype(DTYPES[dtype][1])


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` rounded to `dtype` and held in that dtype's numpy storage type."""
    if dtype == "bf16":
        bits = np.asarray(x, np.float32).view(np.uint32)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32)
    if dtype in ("i8", "i32"):  # like C: truncate toward zero (saturate where C is undefined)
        info = np.iinfo(np_dtype(dtype))
        return np.clip(np.trunc(x), info.min, info.max).astype(np_dtype(dtype))
    return np.asarray(x).astype(np_dtype(dtype))


def _compute_dtype(dtype: str):
    return np.float64 if dtype == "f64" else np.float32


def _poison(shape, dtype: str) -> np.ndarray:
    if dtype in ("i8", "i32"):
        return np.full(shape, _POISON_INT if dtype == "i32" else -90, np_dtype(dtype))
    return np.full(shape, np.nan, np_dtype(dtype))


_UNARY = {
    "neg": np.negative, "exp": np.exp, "abs": np.abs, "sqrt": np.sqrt,
    "relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x)),
    "rsqrt": lambda x: 1 / np.sqrt(x),
}
_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
           "max": np.maximum, "min": np.minimum}
_REDUCE = {"sum": np.sum, "max": np.max, "min": np.min}


def run(module: Module, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Execute `module` on `inputs` (argument name -> array); returns output name -> array.

    Raises ValueError when an input is missing or has the wrong shape.
    """
    env = module.env
    args = module.func.body.args
    outs = set(module.func.attrs.get("outputs", []))
    arrays: dict[int, np.ndarray] = {}
    for i, a in enumerate(args):
        shape = a.type.concrete_shape(env)
        if i in outs:
            arrays[id(a)] = _poison(shape, a.type.dtype)
            continue
        if a.name not in inputs:
            raise ValueError(f"missing input `{a.name}`")
        x = np.asarray(inputs[a.name])
        if x.shape != shape:
            raise ValueError(f"input `{a.name}` has shape {x.shape}, expected {shape}")
        arrays[id(a)] = round_to(x, a.type.dtype)
    for op in module.func.body.ops:
        if op.name == "tile.require":
            if not exprs.evaluate(exprs.parse(op.attrs["cond"]), env):
                raise ValueError(f"requirement `{op.attrs['cond']}` does not hold")
        elif op.name == "tile.launch":
            _launch(op, env, arrays)
    return {a.name: arrays[id(a)] for i, a in enumerate(args) if i in outs}


def _launch(op: Op, env: dict[str, int], arrays: dict[int, np.ndarray]) -> None:
    extents = [exprs.evaluate(exprs.parse(g), env) for g in op.attrs["grid"]]
    for point in itertools.product(*(range(n) for n in extents)):
        scope = {**env, **dict(zip(op.attrs["vars"], point))}
        _Block(arrays, scope).region(op.body.ops)


class _Block:
    """One tile program's execution state: tile arrays and the index names in scope."""

    def __init__(self, globals_: dict[int, np.ndarray], scope: dict[str, int]):
        self.arrays = dict(globals_)
        self.scope = scope

    def val(self, text: str) -> int:
        return exprs.evaluate(exprs.parse(text), self.scope)

    def region(self, ops: list[Op]) -> None:
        for op in ops:
            getattr(self, "op_" + op.name.split(".")[1])(op)

    def op_alloc(self, op: Op) -> None:
        v = op.result
        self.arrays[id(v)] = _poison(v.type.concrete_shape(self.scope), v.type.dtype)

    def op_fill(self, op: Op) -> None:
        v = op.operands[0]
        self.arrays[id(v)][...] = round_to(np.float64(op.attrs["value"]), v.type.dtype)

    def op_copy(self, op: Op) -> None:
        src, dst = op.operands
        if src.type.space == "global":
            shape = dst.type.concrete_shape(self.scope)
            data = self._read(src, [self.val(o) for o in op.attrs["src_offsets"]], shape)
            self.arrays[id(dst)][...] = round_to(data, dst.type.dtype)
        elif dst.type.space == "global":
            self._write(dst, [self.val(o) for o in op.attrs["dst_offsets"]], self.arrays[id(src)])
        else:
            self.arrays[id(dst)][...] = round_to(self.arrays[id(src)], dst.type.dtype)

    def _window(self, tensor: Value, offsets, shape):
        """Per-dim (tile slice, tensor slice) of the in-bounds part, or None if empty."""
        full = self.arrays[id(tensor)].shape
        tile_idx, tensor_idx = [], []
        for off, n, size in zip(offsets, shape, full):
            lo, hi = max(off, 0), min(off + n, size)
            if hi <= lo:
                return None
            tile_idx.append(slice(lo - off, hi - off))
            tensor_idx.append(slice(lo, hi))
        return tuple(tile_idx), tuple(tensor_idx)

    def _read(self, tensor: Value, offsets, shape) -> np.ndarray:
        out = np.zeros(shape, self.arrays[id(tensor)].dtype)
        win = self._window(tensor, offsets, shape)
        if win is not None:
            out[win[0]] = self.arrays[id(tensor)][win[1]]
        return out

    def _write(self, tensor: Value, offsets, data: np.ndarray) -> None:
        win = self._window(tensor, offsets, data.shape)
        if win is not None:
            self.arrays[id(tensor)][win[1]] = round_to(data[win[0]], tensor.type.dtype)

    def op_elementwise(self, op: Op) -> None:
        out = op.operands[-1]
        ct = _compute_dtype(out.type.dtype)
        ins = [self.arrays[id(v)].astype(ct) for v in op.operands[:-1]]
        fn = op.attrs["fn"]
        with np.errstate(all="ignore"):
            if fn in _UNARY:
                res = _UNARY[fn](ins[0])
            else:
                rhs = ins[1] if len(ins) == 2 else ct(op.attrs["scalar"])
                res = _BINARY[fn](ins[0], rhs)
        shape = out.type.concrete_shape(self.scope)
        self.arrays[id(out)][...] = round_to(np.broadcast_to(res, shape), out.type.dtype)

    def op_reduce(self, op: Op) -> None:
        src, dst = op.operands
        ct = _compute_dtype(dst.type.dtype)
        res = _REDUCE[op.attrs["fn"]](self.arrays[id(src)].astype(ct), axis=op.attrs["axis"], keepdims=True)
        if op.attrs.get("accumulate"):
            old = self.arrays[id(dst)].astype(ct)
            res = old + res if op.attrs["fn"] == "sum" else _BINARY[op.attrs["fn"]](old, res)
        self.arrays[id(dst)][...] = round_to(res, dst.type.dtype)

    def op_gemm(self, op: Op) -> None:
        a, b, acc = op.operands
        ct = _compute_dtype(acc.type.dtype) if acc.type.dtype != "f16" else np.float32
        prod = self.arrays[id(a)].astype(ct) @ self.arrays[id(b)].astype(ct)
        self.arrays[id(acc)][...] = round_to(self.arrays[id(acc)].astype(ct) + prod, acc.type.dtype)

    def op_for(self, op: Op) -> None:
        var = op.attrs["var"]
        lo, hi = self.val(op.attrs["lo"]), self.val(op.attrs["hi"])
        for i in range(lo, hi):
            self.scope[var] = i
            self.region(op.body.ops)
        self.scope.pop(var, None)

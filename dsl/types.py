"""IR types: element dtypes and tile/tensor types with a memory space.

A type prints as its textual form: `global<f16[M, K]>` (a kernel argument in device memory),
`shared<f16[64, 128]>` (shared memory of one block), `frag<f32[64, 64]>` (registers: TileLang lays
the tile out over the block's threads), `local<f32[1, 64]>` (registers; TileLang's GPU backend
treats it like `frag`, the C target holds every tile this way). Dims are index
expressions: integers after the `tile` pass, names of problem dims and schedule constants before.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsl import exprs

# dtype name -> (bytes per element, numpy dtype name, torch dtype name)
DTYPES: dict[str, tuple[int, str, str]] = {
    "f16": (2, "float16", "float16"),
    "bf16": (2, "float32", "bfloat16"),  # numpy has no bf16: the interpreter rounds f32 bits
    "f32": (4, "float32", "float32"),
    "f64": (8, "float64", "float64"),
    "i8": (1, "int8", "int8"),
    "i32": (4, "int32", "int32"),
    "bool": (1, "bool", "bool"),  # comparisons' results and masks: 1 byte, true or false
}
FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")
SPACES = ("global", "shared", "frag", "local")


@dataclass(frozen=True)
class TileType:
    """A tensor (space `global`) or on-chip tile buffer of `dtype` with `shape` in `space`."""

    space: str
    dtype: str
    shape: tuple[exprs.Expr, ...]

    def __str__(self) -> str:
        dims = ", ".join(exprs.to_str(d) for d in self.shape)
        return f"{self.space}<{self.dtype}[{dims}]>"

    @property
    def rank(self) -> int:
        return len(self.shape)

    def with_space(self, space: str) -> "TileType":
        return TileType(space, self.dtype, self.shape)

    def with_dtype(self, dtype: str) -> "TileType":
        return TileType(self.space, dtype, self.shape)

    def concrete_shape(self, env: dict[str, int]) -> tuple[int, ...]:
        """Integer shape under `env` (raises exprs.ExprError for an unbound name)."""
        return tuple(exprs.evaluate(d, env) for d in self.shape)

    def nbytes(self, env: dict[str, int]) -> int:
        n = DTYPES[self.dtype][0]
        for d in self.concrete_shape(env):
            n *= d
        return n

    def substitute(self, env: dict[str, int]) -> "TileType":
        return TileType(self.space, self.dtype, tuple(exprs.substitute(d, env) for d in self.shape))


def promote(a: str, b: str) -> str:
    """Result dtype of an elementwise op on `a` and `b`: the wider float, else the wider int."""
    if a == b:
        return a
    order = ["bool", "i8", "i32", "f16", "bf16", "f32", "f64"]
    if {a, b} == {"f16", "bf16"}:
        return "f32"
    return max(a, b, key=order.index)


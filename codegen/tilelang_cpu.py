"""TileLang CPU backend (`tilelang-cpu`): the TileLang C target, which CI can execute.

Same emitter as codegen/tilelang.py in its CPU form: every tile is `T.alloc_local`, loops are
`T.serial`/`T.grid`, pipelined loops run serially, and partial tiles are guarded explicitly.
"""

from __future__ import annotations

from codegen.tilelang import _Emitter
from dsl.ir import Module


def emit(module: Module) -> str:
    """TileLang source for `tilelang.compile(..., target="c")`."""
    return _Emitter(module, cpu=True).run()

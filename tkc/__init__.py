"""tkc: a compiler for a small tile-level GPU kernel language (see README.md, docs/).

`tkc.compile(path, target="tilelang", **consts)` compiles a .tk kernel and returns a callable on
torch tensors (tkc/runtime.py); the CLI is tkc/cli.py.
"""


def compile(path: str, target: str = "tilelang", cache_dir: str | None = None, **consts: int):
    """See tkc.runtime.compile (imported lazily so that the CLI starts fast)."""
    from tkc import runtime

    return runtime.compile(path, target=target, cache_dir=cache_dir, **consts)


__all__ = ["compile"]

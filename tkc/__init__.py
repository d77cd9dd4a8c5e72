"""tkc: a compiler for a small tile-level GPU kernel language (see README.md, docs/).

`tkc.compile(path, target="tilelang", **consts)` compiles a .tk kernel and returns a callable on
torch tensors (tkc/runtime.py); the CLI is tkc/cli.py, its autotuner tkc/tune.py.
"""


def compile(path: str, target: str = "tilelang", cache_dir: str | None = None, tune: bool = False, **consts: int):
    """See tkc.runtime.compile (imported lazily so that the CLI starts fast); `tune=True` uses
    the best configuration `tkc tune` measured (tkc/tune.py)."""
    from tkc import runtime

    return runtime.compile(path, target=target, cache_dir=cache_dir, tune=tune, **consts)


__all__ = ["compile"]

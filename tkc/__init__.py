"""tkc: a compiler for a small tile-level GPU kernel language (see README.md, docs/).

`tkc.compile(path, target="tilelang", **consts)` compiles a .tk kernel and returns a callable on
torch tensors (tkc/runtime.py); the CLI is tkc/cli.py, its autotuner tkc/tune.py.
"""


def compile(path: str, target: str = "tilelang", cache_dir: str | None = None, tune: bool = False,
            dynamic: tuple[str, ...] = (), schedule: str = "file", **consts: int):
    """See tkc.runtime.compile (imported lazily so that the CLI starts fast); `tune=True` uses
    the best configuration `tkc tune` measured (tkc/tune.py)."""
    from tkc import runtime

    return runtime.compile(path, target=target, cache_dir=cache_dir, tune=tune, dynamic=dynamic, schedule=schedule,
                           **consts)


def assume_valid():
    """See tkc.runtime.assume_valid: calls inside skip the host-side checks of runtime scalars
    passed as tensors and of index tensors (the CPU targets'; the GPU targets check both inside
    the kernel)."""
    from tkc import runtime

    return runtime.assume_valid()


def programmatic_launch():
    """See tkc.cuda_runtime.programmatic_launch: `cuda` kernels called inside are launched with
    programmatic dependent launch (each may start while the one before it finishes)."""
    from tkc import cuda_runtime

    return cuda_runtime.programmatic_launch()


__all__ = ["assume_valid", "compile", "programmatic_launch"]

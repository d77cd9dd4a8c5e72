"""`tkc run`: random inputs of a kernel's default shapes, launch, and compare with its reference.

The reference is the kernel's `reference` string: a torch expression over the input names
(as float64 tensors, on the kernel's device), the dims (ints), `torch` and `F`
(torch.nn.functional). The error reported is max |out - ref| / max |ref| per output; the
tolerance is derived from the kernel's dtypes and reduction length (tkc/oracle.py) unless
`--rtol` sets one.
"""

from __future__ import annotations

import os
import sys

from dsl.diagnostics import error
from dsl.ops import has_grid_barrier
from tkc import driver
from tkc.cache import Cache
from tkc.oracle import dims_env, error_budgets, input_names, outputs, random_inputs, reference, rel_error  # noqa: F401 (re-exported)
from tkc.runtime import Kernel


class PatternFile:
    """A sparse input's pattern read from a Matrix Market file (`tkc run --pattern S=FILE.mtx`)."""

    def __init__(self, path: str, pattern):
        self.path, self.pattern = path, pattern


def _sparse_inputs(module) -> dict[str, tuple[str, str, str, str]]:
    """Sparse input name -> (format, M, N, NNZ) of `module`, the dims as expression text."""
    from dsl import exprs

    args = {a.name: a for a in module.func.body.args}
    return {name: (fmt, m, n, exprs.to_str(args[f"{name}_rows"].type.shape[0]))
            for name, fmt, _, m, n in module.func.attrs.get("sparse", [])}


def pattern_sources(module, patterns: dict[str, str], defines: dict[str, int]):
    """(sources, bound dims) for `tkc run --pattern NAME=SOURCE`: each source is "uniform",
    "rmat" or a PatternFile; a file's rows, columns and entry count bind the pattern's dims where
    they are bare dim names. TkError at the command line for an unknown input or source, at the
    file for one tkc cannot read, and where `-D` gives a dim another value than the file."""
    from dsl.diagnostics import Loc
    from tkc.sparse import SparseInputError, read_mtx

    where = Loc("<command line>", 1, 1)
    sparse = _sparse_inputs(module)
    kernel = module.func.attrs["sym_name"]
    sources, bound = {}, {}
    for name, source in patterns.items():
        if name not in sparse:
            has = f"its sparse inputs: {', '.join(sorted(sparse))}" if sparse else f"`{kernel}` has none"
            raise error(where, f"`--pattern {name}=...`: `{kernel}` has no sparse input `{name}`",
                        f"{has}; a sparse input is declared `{name}: csr[M, N, NNZ]` or `coo[...]`")
        if source in ("uniform", "rmat"):
            sources[name] = source
            continue
        if not os.path.exists(source) and "." not in os.path.basename(source):
            raise error(where, f"`--pattern {name}={source}`: not `uniform`, `rmat` or an existing file",
                        "give `uniform`, `rmat` or the path of a Matrix Market (.mtx) file")
        try:
            pattern = read_mtx(source)
        except SparseInputError as exc:
            raise error(Loc(source, 0, 0), f"pattern of `{name}`: {exc.message}",
                        *([exc.note] if exc.note else [])) from None
        sources[name] = PatternFile(source, pattern)
        _, m, n, nnz = sparse[name]
        for dim, value, what in ((m, pattern.M, "rows"), (n, pattern.N, "columns"), (nnz, pattern.nnz, "entries")):
            if dim not in module.func.attrs["dims"]:
                continue  # a literal or an expression: checked once the dims are bound (check_pattern_dims)
            if dim in defines and defines[dim] != value:
                raise error(where, f"`-D {dim}={defines[dim]}` disagrees with `{source}`, which has {value} {what}",
                            f"leave `-D {dim}` out: the file sets it")
            bound[dim] = value
    return sources, bound


def check_pattern_dims(module, sources) -> None:
    """Each pattern file's shape and entry count equal the pattern's dims as `module` binds them
    (a dim that is a literal or an expression is not bound by the file); TkError at the file."""
    from dsl import exprs
    from dsl.diagnostics import Loc

    env = dims_env(module)
    for name, (_, m, n, nnz) in _sparse_inputs(module).items():
        source = sources.get(name)
        if not isinstance(source, PatternFile):
            continue
        for text, value, what in ((m, source.pattern.M, "rows"), (n, source.pattern.N, "columns"),
                                  (nnz, source.pattern.nnz, "entries")):
            want = exprs.evaluate(exprs.parse(text), env)
            if want != value:
                raise error(Loc(source.path, 0, 0), f"`{name}` needs {want} {what} (`{text}`), and the file has {value}",
                            "choose the dims with -D so that the pattern's shape matches the file")


def _memory_bytes(device: str) -> int | None:
    """Total memory of `device` ("cpu": physical RAM, "cuda": the current GPU's), None if unknown."""
    import torch

    try:
        if device == "cuda":
            return torch.cuda.mem_get_info()[1]
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError):
        return None


def run_file(path: str, target: str | None, defines: dict[str, int], seed: int, check: bool,
             rtol: float | None, cache: Cache, dist: str = "normal", patterns: dict[str, str] | None = None) -> int:
    import torch

    module = driver.frontend(path, defines)
    sources = {}
    if patterns:
        sources, bound = pattern_sources(module, patterns, defines)
        if bound:
            defines = {**defines, **bound}
            module = driver.frontend(path, defines)
            check_pattern_dims(module, sources)
    if target is None:  # TileLang's C target has no clusters: the interpreter simulates them
        clusters = any("cluster" in op.attrs for op in module.walk() if op.name == "tile.launch")
        grid_sync = has_grid_barrier(module.func)  # `sync grid`: cuda and interp only
        if torch.cuda.is_available():
            target = "cuda" if grid_sync else "tilelang"
        else:
            target = "interp" if clusters or grid_sync else "tilelang-cpu"
    device = "cuda" if target in ("tilelang", "cuda") else "cpu"
    if device == "cuda" and not torch.cuda.is_available():  # the user's machine, not a tkc bug
        raise error(module.func.loc, f"target `{target}` needs a CUDA GPU, and torch sees none",
                    "run on the CPU with `--target tilelang-cpu` (or `--target interp`), or leave `--target` out")
    nbytes = sum(a.type.nbytes(dims_env(module)) for a in module.func.body.args)
    total = _memory_bytes(device)
    if total is not None and nbytes > total:  # refuse before allocating (no OOM kill midway)
        raise error(module.func.loc, f"the kernel's tensors need {nbytes:,} bytes; this machine's {device} "
                    f"memory is {total:,} bytes", "choose smaller dims with -D")
    try:
        inputs = random_inputs(module, seed, device, dist, defines, sources)
    except (MemoryError, RuntimeError) as exc:  # torch's allocation failures are RuntimeErrors
        if isinstance(exc, RuntimeError) and "memory" not in str(exc).lower():
            raise
        raise error(module.func.loc, f"cannot allocate the kernel's tensors: {nbytes:,} bytes on {device}",
                    "choose smaller dims with -D") from None
    consts = {k: v for k, v in defines.items() if k in module.func.attrs["consts"]}  # dims: from the tensors
    kernel = Kernel(path, target, consts, cache)

    args = module.func.body.args
    mut = {args[i].name for i in module.func.attrs.get("mutable", [])}  # updated in place: the
    # reference needs their old values, so the kernel gets copies
    results = kernel(*[t.clone() if n in mut else t for n, t in zip(input_names(module), inputs)])
    results = list(results) if isinstance(results, tuple) else [results]

    scalar_args = {n: v for n, v in zip(input_names(module), inputs) if isinstance(v, int)}
    shapes = ", ".join(f"{n}={v}" for n, v in sorted({**dims_env(module), **scalar_args}.items()))
    print(f"{module.func.attrs['sym_name']}: ran on {target} ({device}) with {shapes}")
    for name, source in sources.items():
        arg = input_names(module).index(name)
        nnz = inputs[arg].nnz
        what = f"from {source.path}" if isinstance(source, PatternFile) else source
        print(f"{name}: {inputs[arg].M} x {inputs[arg].N} pattern, {nnz} entr{'y' if nnz == 1 else 'ies'} ({what})")
    if not check:
        return 0
    refs = reference(module, inputs)
    ok = True
    budgets = error_budgets(module)
    for (name, dtype), out, ref in zip(outputs(module), results, refs):
        err = rel_error(out, ref)
        tol = budgets[name].tol(dtype) if rtol is None else rtol
        passed = err <= tol
        ok &= passed
        shapes = "" if tuple(ref.shape) == tuple(out.shape) else \
            f" (the reference gives shape {list(ref.shape)}, the kernel {list(out.shape)})"
        print(f"{name}: max relative error {err:.3e} (tolerance {tol:.3g}): {'ok' if passed else 'MISMATCH'}{shapes}")
    if len(refs) != len(results):
        print(f"reference gives {len(refs)} results for {len(results)} outputs: MISMATCH", file=sys.stderr)
        ok = False
    return 0 if ok else 1

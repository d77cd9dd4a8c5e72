"""The compile pipeline: .tk source -> AST -> tile IR -> passes -> backend source (cached).

Stages, in order: `dsl.parser.parse`, `dsl.lower.lower` (with `-D` overrides), the target's
default pass pipeline (`tile,defer-reduce,fold-copies,software-pipeline,map-dsmem,check-smem-fit,check-coverage,
sparse-dispatch`, for sm_90, with `fuse-int8-dot` after map-dsmem for `cuda`; check-smem-fit with the
target's backend model), then the backend's
`emit` (codegen/). Generated source is cached on disk by the hash of the final IR, the target
and tool versions (tkc/cache.py). A second index maps the hash of the source text, overrides
and target to that key, so a warm `tkc compile` neither parses nor lowers (it stays well under
0.2 s); the final IR is stored with the code and parsed back only when a caller needs it.
Heavy modules (lark, the backends, TileLang) are imported only when used.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field

from dsl.diagnostics import Loc, error
from dsl.parser import DEPTH_LIMIT
from tkc.cache import Cache, cache_key, tool_versions

TARGETS = ("tilelang", "tilelang-cpu", "tir", "cuda")
SOURCE_FILE = {"tilelang": "kernel.py", "tilelang-cpu": "kernel.py", "tir": "kernel_tir.py", "cuda": "kernel.cu"}
IR_FILE = "kernel.tkir"


def read_source(path: str) -> str:
    """The text of `path` (UTF-8; a leading byte-order mark is dropped, as editors write one); a
    missing or unreadable file is a located user error, a byte that is not UTF-8 one at its line
    and column."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise error(Loc(path, 0, 0), f"cannot read `{path}`: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[:exc.start]
        line, col = before.count(b"\n") + 1, exc.start - (before.rfind(b"\n") + 1) + 1
        raise error(Loc(path, line, col), f"byte 0x{data[exc.start]:02x} is not UTF-8",
                    "save the file as UTF-8 (tkc reads .tk and .tkir files as UTF-8)") from None


def frontend(path: str, overrides: dict[str, int] | None = None, text: str | None = None,
             dynamic: tuple[str, ...] = ()):
    """Parse and lower a .tk file, or parse a .tkir file (overrides then must be empty);
    `dynamic` dims are left symbolic (`--dynamic M`, as the file's `dynamic` clause)."""
    from dsl.ir_parser import parse_module
    from dsl.lower import lower
    from dsl.parser import parse

    text = read_source(path) if text is None else text
    if path.endswith(".tkir"):
        if overrides or dynamic:
            raise error(Loc(path, 1, 1), f"`{'-D' if overrides else '--dynamic'}` applies to .tk files only; "
                        "IR files are already specialized")
        return parse_module(text, path)
    # Parsing and lowering recurse once per nesting level (a chain of 3,000 `+` is 3,000 levels);
    # Python 3.11+ keeps pure-Python recursion off the C stack, so a higher limit is safe here.
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, DEPTH_LIMIT))
    try:
        return lower(parse(text, path), text, overrides, tuple(dynamic))
    finally:
        sys.setrecursionlimit(old)


def default_pipeline(target: str, sm: str = "sm_90") -> str:
    """The pass pipeline of every target. check-smem-fit models the shared memory of the backend
    that runs the kernel: the CUDA backend's plan for `cuda`, TileLang's for the others (the CPU
    target runs the same checks: the same IR runs on the GPU through TileLang, so an over-budget
    kernel is rejected everywhere)."""
    if target not in TARGETS:
        raise error(Loc("<command line>", 1, 1), f"unknown target `{target}`", f"targets: {', '.join(TARGETS)}")
    backend = "cuda" if target == "cuda" else "tilelang"
    # clusters of 9-16 blocks (sm_90's non-portable sizes): the CUDA runtime sets the kernel's
    # attribute that allows them; TileLang's launches do not
    nonportable = ",nonportable=1" if backend == "cuda" else ""
    # int8 dot products as __dp4a: the CUDA backend's (TileLang keeps the elementwise form)
    fuse = ",fuse-int8-dot" if backend == "cuda" else ""
    return (f"tile,defer-reduce,fold-copies{{backend={backend}}},software-pipeline,map-dsmem{{target={sm}{nonportable}}}{fuse},"
            f"check-smem-fit{{target={sm},backend={backend}}},check-coverage,sparse-dispatch{{target={sm}}}")


def optimize(module, target: str):
    """`module` after the default pipeline of `target`."""
    from passes.manager import parse_pipeline, run_pipeline

    return run_pipeline(module, parse_pipeline(default_pipeline(target)))


@dataclass
class Artifact:
    """The result of compiling one kernel for one target."""

    target: str
    source: str  # generated code
    key: str  # cache key (hash of the final IR, target, versions)
    entry: str  # cache entry directory (holds the source file and the final IR)
    cached: bool  # whether the source came from the cache
    ir_text: str = ""
    _module: object = field(default=None, repr=False)

    @property
    def module(self):
        """The final IR (parsed back from the cache entry when the artifact was cached)."""
        if self._module is None:
            from dsl.ir_parser import parse_module

            self._module = parse_module(self.ir_text, os.path.join(self.entry, IR_FILE))
        return self._module

    @property
    def source_path(self) -> str:
        return os.path.join(self.entry, SOURCE_FILE[self.target])


def _source_key(path: str, text: str, overrides: dict[str, int], target: str, scalar_refs=(), dynamic=()) -> str:
    h = hashlib.sha256()
    for part in (os.path.abspath(path), path, text, repr(sorted(overrides.items())), target,
                 default_pipeline(target), tool_versions(), repr(sorted(scalar_refs)), repr(sorted(dynamic))):
        h.update(part.encode())
        h.update(b"\0")
    return "src-" + h.hexdigest()


def compile_file(path: str, target: str, overrides: dict[str, int] | None = None,
                 cache: Cache | None = None, scalar_refs=(), dynamic: tuple[str, ...] = ()) -> Artifact:
    """Compile `path` for `target`; raises TkError for any user error. `scalar_refs`: runtime
    scalars the kernel reads from a one-element i32 tensor argument (in the scalar's place)
    instead of taking by value (`tkc.compile`'s kernels do this when called with a tensor).
    `dynamic`: dims left symbolic besides those of the file's `dynamic` clause."""
    cache = cache or Cache()
    overrides = dict(overrides or {})
    text = read_source(path)
    src_key = _source_key(path, text, overrides, target, scalar_refs, dynamic)
    index = cache.get(src_key)
    if index is not None:
        key = index.get("key", "")
        files = cache.get(key) if len(key) == 64 else None
        if files is not None and SOURCE_FILE[target] in files and IR_FILE in files:
            return Artifact(target, files[SOURCE_FILE[target]], key, cache.path(key), True, files[IR_FILE])
    module = optimize(frontend(path, overrides, text, dynamic), target)
    if scalar_refs:
        module.func.attrs["scalar_refs"] = sorted(scalar_refs)
    artifact = emit(module, target, cache)
    cache.put(src_key, {"key": artifact.key}, target)
    return artifact


def emit(module, target: str, cache: Cache | None = None) -> Artifact:
    """Generate (or fetch from the cache) the backend source of a final-IR module."""
    from dsl.ir import print_module

    cache = cache or Cache()
    sampled = next((op for op in module.walk() if op.name == "tile.sampled_gemm"), None)
    if sampled is not None and target == "tir":  # the plain TIR target has no lowering of the masked gemm
        raise error(sampled.loc, f"target `{target}` cannot express the sampled gemm (SDDMM)",
                    "use `--target cuda`, `tilelang`, `tilelang-cpu` or `interp`")
    ir_text = print_module(module)
    key = cache_key(ir_text, target)
    files = cache.get(key)
    if files is not None and SOURCE_FILE[target] in files:
        return Artifact(target, files[SOURCE_FILE[target]], key, cache.path(key), True, ir_text, module)
    if target == "tir":
        from codegen import tir

        source = tir.emit(module)
    elif target == "tilelang":
        from codegen import tilelang

        source = tilelang.emit(module)
    elif target == "cuda":
        from codegen import cuda

        source = cuda.emit(module)
    else:
        from codegen import tilelang_cpu

        source = tilelang_cpu.emit(module)
    entry = cache.put(key, {SOURCE_FILE[target]: source, IR_FILE: ir_text}, target)
    return Artifact(target, source, key, entry, False, ir_text, module)

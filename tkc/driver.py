"""The compile pipeline: .tk source -> AST -> tile IR -> passes -> backend source (cached).

Stages, in order: `dsl.parser.parse`, `dsl.lower.lower` (with `-D` overrides), the target's
default pass pipeline (`tile,software-pipeline,check-smem-fit{target=sm_90}`), then the backend's
`emit` (codegen/). Generated source is cached on disk by the hash of the final IR, the target
and tool versions (tkc/cache.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from codegen import tilelang as tilelang_gpu
from codegen import tilelang_cpu
from dsl.diagnostics import Loc, error
from dsl.ir import Module, print_module
from dsl.ir_parser import parse_module
from dsl.lower import lower
from dsl.parser import parse
from passes.manager import parse_pipeline, run_pipeline
from tkc.cache import Cache, cache_key

TARGETS = ("tilelang", "tilelang-cpu", "tir")
# Backend source emitters; `tir` is produced from the TileLang source by TileLang itself.
EMITTERS = {"tilelang": tilelang_gpu.emit, "tilelang-cpu": tilelang_cpu.emit, "tir": tilelang_gpu.emit}
SOURCE_FILE = {"tilelang": "kernel.py", "tilelang-cpu": "kernel.py", "tir": "kernel_tir.py"}


def read_source(path: str) -> str:
    """The text of `path`; a missing or unreadable file is a located user error."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise error(Loc(path, 0, 0), f"cannot read `{path}`: {getattr(exc, 'strerror', None) or exc}") from None


def frontend(path: str, overrides: dict[str, int] | None = None) -> Module:
    """Parse and lower a .tk file, or parse a .tkir file (overrides then must be empty)."""
    text = read_source(path)
    if path.endswith(".tkir"):
        if overrides:
            raise error(Loc(path, 1, 1), "`-D` applies to .tk files only; IR files are already specialized")
        return parse_module(text, path)
    return lower(parse(text, path), text, overrides)


def default_pipeline(target: str, sm: str = "sm_90") -> str:
    """The pass pipeline every target runs (the CPU target skips no checks: the same IR runs on
    the GPU, so an over-budget kernel is rejected everywhere)."""
    if target not in TARGETS:
        raise error(Loc("<command line>", 1, 1), f"unknown target `{target}`", f"targets: {', '.join(TARGETS)}")
    return f"tile,software-pipeline,check-smem-fit{{target={sm}}}"


def optimize(module: Module, target: str) -> Module:
    return run_pipeline(module, parse_pipeline(default_pipeline(target)))


@dataclass
class Artifact:
    """The result of compiling one kernel for one target."""

    module: Module  # final IR
    target: str
    source: str  # generated code
    key: str  # cache key
    entry: str  # cache entry directory (holds the source file)
    cached: bool  # whether the source came from the cache

    @property
    def source_path(self) -> str:
        return os.path.join(self.entry, SOURCE_FILE[self.target])


def compile_file(path: str, target: str, overrides: dict[str, int] | None = None,
                 cache: Cache | None = None) -> Artifact:
    """Compile `path` for `target`; raises TkError for any user error."""
    pipeline = default_pipeline(target)
    module = run_pipeline(frontend(path, overrides), parse_pipeline(pipeline))
    return emit(module, target, cache)


def emit(module: Module, target: str, cache: Cache | None = None) -> Artifact:
    """Generate (or fetch from the cache) the backend source of a final-IR module."""
    cache = cache or Cache()
    ir_text = print_module(module)
    key = cache_key(ir_text, target)
    files = cache.get(key)
    if files is not None and SOURCE_FILE[target] in files:
        return Artifact(module, target, files[SOURCE_FILE[target]], key, cache.path(key), True)
    if target == "tir":
        from codegen import tir  # imports TileLang: only when asked for

        source = tir.emit(module)
    else:
        source = EMITTERS[target](module)
    entry = cache.put(key, {SOURCE_FILE[target]: source, "kernel.tkir": ir_text}, target)
    return Artifact(module, target, source, key, entry, False)

"""Seed 001's two cluster-reduce kernels, built as the seed wrote them, for benchmarks/cluster_reduce.py.

The seed's code is never copied into this repository. At run time this module reads the seed file
(default: `../shared/seeds/001_*.txt` from the repository root), takes its two ```cpp blocks that
define `cluster_reduce_baseline` and `cluster_reduce_dsmem` (templates on `Stage`), and wraps them,
unchanged, in a translation unit of our own:

    #include <cuda_fp16.h>, <cooperative_groups.h>
    namespace cg = cooperative_groups;
    enum class Stage { LINEAR, FFN };
    <the two seed blocks, verbatim, under #line directives that point back into the seed file>
    explicit instantiations of both templates for Stage::LINEAR and Stage::FFN

That unit is compiled with nvcc (`-arch=sm_90a -cubin`; default) or NVRTC (through CuPy), loaded with
`cupy.RawModule` and launched with the seed's launch shape: 2 blocks per cluster (the cluster shape
comes from the kernels' own `__cluster_dims__(2, 1, 1)`, so a plain launch of 2 x clusters blocks
forms the clusters), `threads` threads per block (the seed does not say how many: 512 by default),
`size` x 2 bytes of dynamic shared memory and `size` = 16384 (the seed's "Elements per Block"),
on the current torch stream with torch tensors' data pointers.

As written, the kernels index input and output by the block's rank in its cluster only
(`input[my_rank * size + i]`), so every cluster reads the same 2 x size inputs and writes the same
2 x size outputs: output row r = stage(input row r + input row (r + 1) % 2), r in {0, 1}.

Also a small command line, to look at or compile the generated unit without a GPU:

    python3 benchmarks/seed_kernels.py [--seed-file F] [--emit out.cu] [--compile obj|cubin|both]
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED_GLOB = "001_*.txt"
# Where to look for the seed, in order, when --seed-file is not given. `../shared` sits beside a
# developer's checkout but does not travel to the device machine: there, copy the seed into
# `.device/seeds/` (git-ignored, carried with `.device`) or into a `shared/` inside the checkout.
SEED_SEARCH = [
    os.path.join(ROOT, "..", "shared", "seeds", SEED_GLOB),
    os.path.join(ROOT, "shared", "seeds", SEED_GLOB),
    os.path.join(ROOT, ".device", "seeds", SEED_GLOB),
]
KERNELS = ("cluster_reduce_baseline", "cluster_reduce_dsmem")
STAGES = ("LINEAR", "FFN")  # enum values 0 and 1, in this order
DEFAULT_THREADS = 512  # the seed names no block size; 16384 elements / 512 threads = 32 per thread
DEFAULT_ARCH = "sm_90a"
# The seed's kernels take (half* input, half* output, int size); the instantiations below rely on it.
SIGNATURE = re.compile(r"\(\s*half\s*\*\s*\w+\s*,\s*half\s*\*\s*\w+\s*,\s*int\s+\w+\s*\)")


class SeedError(RuntimeError):
    """The seed file is missing or does not hold what this module expects."""


@dataclasses.dataclass
class SeedBlock:
    kernel: str
    code: str  # the ```cpp block's text, verbatim
    first_line: int  # 1-based line of the block's first code line in the seed file
    cluster_dims: tuple[int, int, int]


@dataclasses.dataclass
class Seed:
    path: str
    sha256: str
    blocks: dict[str, SeedBlock]  # by kernel name, in KERNELS order
    elements_per_block: int | None  # from the seed's "Elements per Block: N" line, if present

    @property
    def cluster_dims(self) -> tuple[int, int, int]:
        return self.blocks[KERNELS[0]].cluster_dims

    @property
    def cluster_size(self) -> int:
        x, y, z = self.cluster_dims
        return x * y * z


# ----------------------------------------------------------------------------- reading the seed

def find_seed_file(explicit: str | None = None) -> str:
    """The seed file: `explicit` (a path or a glob) or the first match of SEED_SEARCH."""
    patterns = [explicit] if explicit else SEED_SEARCH
    for pattern in patterns:
        hits = sorted(glob.glob(os.path.expanduser(pattern)))
        if hits:
            return os.path.abspath(hits[0])
    where = explicit or ", ".join(os.path.normpath(p) for p in SEED_SEARCH)
    raise SeedError(f"seed 001 not found (looked for {where}); pass --seed-file, and on the device machine "
                    "copy the seed into .device/seeds/ (carried with .device)")


def load_seed(path: str) -> Seed:
    """Read the seed file and pick out the two kernel blocks (the third ```cpp block is a log)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found: dict[str, list[SeedBlock]] = {k: [] for k in KERNELS}
    for m in re.finditer(r"^```cpp[ \t]*\n(.*?)^```", text, re.S | re.M):
        code = m.group(1)
        first_line = text.count("\n", 0, m.start(1)) + 1
        for k in KERNELS:
            if re.search(rf"__global__[^;{{]*\b{k}\s*\(", code):
                dims = re.search(r"__cluster_dims__\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)", code)
                if not dims:
                    raise SeedError(f"{path}:{first_line}: `{k}` has no __cluster_dims__(x, y, z)")
                if not re.search(r"template\s*<\s*Stage\s+\w+\s*>", code):
                    raise SeedError(f"{path}:{first_line}: `{k}` is not a template on `Stage`")
                sig = re.search(rf"\b{k}\s*(\([^)]*\))", code)
                if not sig or not SIGNATURE.fullmatch(sig.group(1)):
                    raise SeedError(f"{path}:{first_line}: `{k}` does not take (half*, half*, int)")
                found[k].append(SeedBlock(k, code, first_line, tuple(int(g) for g in dims.groups())))
    for k, blocks in found.items():
        if len(blocks) != 1:
            raise SeedError(f"{path}: expected one ```cpp block defining `{k}`, found {len(blocks)}")
    if found[KERNELS[0]][0].cluster_dims != found[KERNELS[1]][0].cluster_dims:
        raise SeedError(f"{path}: the two kernels have different __cluster_dims__")
    m = re.search(r"Elements per Block:\s*(\d+)", text)
    return Seed(path=path, sha256=hashlib.sha256(text.encode()).hexdigest(),
                blocks={k: found[k][0] for k in KERNELS}, elements_per_block=int(m.group(1)) if m else None)


def translation_unit(seed: Seed) -> str:
    """Our wrapper around the seed's two blocks: headers, the names they assume, instantiations."""
    name = os.path.basename(seed.path)
    out = [
        f"// Generated by benchmarks/seed_kernels.py from {name} (sha256 {seed.sha256[:16]}).",
        "// The two kernel templates below come from that file at run time, unchanged; the rest is ours.",
        "#include <cuda_fp16.h>",
        "#include <cooperative_groups.h>",
        "namespace cg = cooperative_groups;",
        "enum class Stage { LINEAR, FFN };",
        "",
    ]
    for k in KERNELS:
        b = seed.blocks[k]
        # Diagnostics inside a block point into the seed file; after it, back into the unit.
        out += [f'#line {b.first_line} "{name}"', *b.code.rstrip("\n").split("\n"), None, ""]
    for k in KERNELS:
        for s in STAGES:
            out.append(f"template __global__ void {k}<Stage::{s}>(half*, half*, int);")
    # `#line N` numbers the line after it N: index i + 1, so line i + 2 counted from 1.
    return "\n".join(f'#line {i + 2} "seed_tu.cu"' if line is None else line for i, line in enumerate(out)) + "\n"


def name_expression(kernel: str, stage: int) -> str:
    return f"{kernel}<Stage::{STAGES[stage]}>"


def mangled_name(kernel: str, stage: int) -> str:
    """Itanium name of `kernel<Stage::X>(half*, half*, int)`: what nvcc puts in the cubin."""
    return f"_Z{len(kernel)}{kernel}IL5Stage{stage}EEvP6__halfS2_i"


# ----------------------------------------------------------------------------- compiling

def find_nvcc(explicit: str | None = None) -> str | None:
    """`explicit`, else the nvcc tkc's CUDA runtime would use (tkc.cuda_runtime.nvcc_path)."""
    if explicit:
        return explicit
    from tkc.cuda_runtime import nvcc_path

    return nvcc_path()


def cuda_include_dir(nvcc: str | None = None) -> str | None:
    """The CUDA toolkit's include folder (for NVRTC, which does not know where the headers are)."""
    cands = []
    if nvcc:
        cands.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include"))
    cands += [os.path.join(h, "include") for h in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                                                   "/usr/local/cuda") if h]
    for c in cands:
        if os.path.exists(os.path.join(c, "cooperative_groups.h")):
            return c
    return None


@dataclasses.dataclass
class Build:
    path: str  # the cubin / object written
    command: list[str]
    seconds: float
    log: str  # nvcc's stderr (the -Xptxas -v resource report)


def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return m.group(2) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"


def compile_nvcc(tu: str, out_dir: str, kind: str = "cubin", nvcc: str | None = None, arch: str = DEFAULT_ARCH,
                 extra: tuple[str, ...] = ()) -> Build:
    """Compile the unit with nvcc: kind "cubin" (`-cubin`, what is launched) or "obj" (`-c`, a full
    host + device compile, the check the CPU dry run does). Raises SeedError with nvcc's output."""
    nvcc = find_nvcc(nvcc)
    if not nvcc:
        raise SeedError("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda); pass --nvcc or use NVRTC")
    os.makedirs(out_dir, exist_ok=True)
    src = os.path.join(out_dir, "seed_tu.cu")
    with open(src, "w", encoding="utf-8") as f:
        f.write(tu)
    out = os.path.join(out_dir, "seed_tu.cubin" if kind == "cubin" else "seed_tu.o")
    cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-O3", "-Xptxas", "-v", *extra,
           "-cubin" if kind == "cubin" else "-c", "-o", out, src]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SeedError(f"nvcc failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return Build(out, cmd, seconds, proc.stderr + proc.stdout)


def elf_function_symbols(path: str) -> list[str]:
    """Names of the FUNC symbols of a 64-bit little-endian ELF file (a cubin), without pyelftools."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise SeedError(f"{path} is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _name, sh_type, _fl, _addr, off, size, link, _info, _al, entsize in sections:
        if sh_type != 2:  # SHT_SYMTAB
            continue
        str_off = sections[link][4]
        for j in range(size // (entsize or 24)):
            st_name, st_info, _other, _shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, off + j * 24)
            if st_info & 0xF == 2:  # STT_FUNC
                end = data.index(b"\0", str_off + st_name)
                names.append(data[str_off + st_name:end].decode())
    return names


def check_cubin_symbols(cubin: str) -> dict[str, str]:
    """{name expression: mangled name} for the four kernels; raises if one is missing."""
    syms = set(elf_function_symbols(cubin))
    out = {}
    for k in KERNELS:
        for s in range(len(STAGES)):
            m = mangled_name(k, s)
            if m not in syms:
                raise SeedError(f"{cubin}: no kernel `{m}` ({name_expression(k, s)}); functions: {sorted(syms)}")
            out[name_expression(k, s)] = m
    return out


def ptxas_report(log: str) -> dict[str, dict]:
    """Registers, spills and shared memory per kernel from nvcc's -Xptxas -v output."""
    report: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line) or re.search(r"Function properties for (\w+)", line)
        if m:
            current = m.group(1)
            report.setdefault(current, {})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            report[current].update(spill_stores=int(m.group(1)), spill_loads=int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            report[current]["registers"] = int(m.group(1))
        m = re.search(r"(\d+) bytes smem", line)
        if m:
            report[current]["static_smem"] = int(m.group(1))
    return report


# ----------------------------------------------------------------------------- loading, launching

class SeedModule:
    """The four seed kernels loaded with CuPy; `launch` runs one on the current torch stream."""

    def __init__(self, seed: Seed, compiler: str = "nvcc", work_dir: str | None = None, nvcc: str | None = None,
                 arch: str = DEFAULT_ARCH):
        import cupy  # lazily: only the GPU path needs it
        import torch

        self.seed, self.compiler = seed, compiler
        self.tu = translation_unit(seed)
        self.info: dict = {"compiler": compiler, "tu_sha256": hashlib.sha256(self.tu.encode()).hexdigest()}
        cupy.cuda.Device(torch.cuda.current_device()).use()
        t0 = time.perf_counter()
        if compiler == "nvcc":
            build = compile_nvcc(self.tu, work_dir or tempfile.mkdtemp(prefix="tkc-seed-"), "cubin", nvcc, arch)
            names = check_cubin_symbols(build.path)
            self.info.update(command=" ".join(build.command), nvcc=nvcc_version(build.command[0]),
                             ptxas=ptxas_report(build.log))
            module = cupy.RawModule(path=build.path)
            lookup = names  # name expression -> mangled name in the cubin
        elif compiler == "nvrtc":
            inc = cuda_include_dir(find_nvcc(nvcc))
            options = ("-std=c++17",) + ((f"-I{inc}",) if inc else ())
            exprs = [name_expression(k, s) for k in KERNELS for s in range(len(STAGES))]
            module = cupy.RawModule(code=self.tu, options=options, name_expressions=exprs)
            self.info.update(options=list(options))
            lookup = {e: e for e in exprs}  # CuPy resolves name expressions itself
        else:
            raise SeedError(f"unknown seed compiler `{compiler}` (nvcc or nvrtc)")
        self.kernels = {}
        for k in KERNELS:
            for s in range(len(STAGES)):
                fn = self.kernels[(k, s)] = module.get_function(lookup[name_expression(k, s)])
                getattr(fn, "kernel", None)  # CuPy loads (NVRTC: compiles) lazily: do it now, untimed
                try:
                    self.info.setdefault("attributes", {})[name_expression(k, s)] = dict(fn.attributes)
                except Exception:  # informative only
                    pass
        self.info["build_s"] = time.perf_counter() - t0
        self._cupy, self._torch = cupy, torch
        self._streams: dict[int, object] = {}

    def _stream(self):
        """CuPy's view of torch's current stream (cached per stream)."""
        ts = self._torch.cuda.current_stream()
        ptr = ts.cuda_stream
        s = self._streams.get(ptr)
        if s is None:
            cs = self._cupy.cuda.Stream
            if hasattr(cs, "from_external") and hasattr(ts, "__cuda_stream__"):  # CuPy >= 14
                try:
                    s = cs.from_external(ts)
                except Exception:
                    s = None
            if s is None or s.ptr != ptr:
                with warnings.catch_warnings():  # deprecated in CuPy 14, still there
                    warnings.simplefilter("ignore", DeprecationWarning)
                    s = self._cupy.cuda.ExternalStream(ptr)
            self._streams[ptr] = s
        return s

    def launch(self, kernel: str, stage: int, x, y, clusters: int, size: int, threads: int = DEFAULT_THREADS):
        """One launch: 2 x clusters blocks of `threads`, size x 2 bytes of dynamic shared memory.
        x and y are f16 torch tensors of at least 2 x size elements (rows 0 and 1 are used)."""
        import numpy as np

        if x.numel() < self.seed.cluster_size * size or y.numel() < self.seed.cluster_size * size:
            raise ValueError(f"seed kernels need >= {self.seed.cluster_size * size} elements in and out")
        self.kernels[(kernel, stage)](
            (self.seed.cluster_size * clusters, 1, 1), (threads, 1, 1),
            (np.uint64(x.data_ptr()), np.uint64(y.data_ptr()), np.int32(size)),
            shared_mem=size * 2, stream=self._stream())


# ----------------------------------------------------------------------------- command line

def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Extract seed 001's kernels and compile them as-is (no GPU needed).")
    p.add_argument("--seed-file", default=None, help="the seed file, a path or glob (default: ../shared/seeds/001_*.txt)")
    p.add_argument("--emit", default=None, help="write the generated translation unit here ('-' for stdout)")
    p.add_argument("--compile", choices=["none", "obj", "cubin", "both"], default="both",
                   help="nvcc -c and/or -cubin of the unit (default both)")
    p.add_argument("--nvcc", default=None)
    p.add_argument("--arch", default=DEFAULT_ARCH)
    args = p.parse_args(argv)
    seed = load_seed(find_seed_file(args.seed_file))
    tu = translation_unit(seed)
    print(f"seed {seed.path}: kernels {', '.join(KERNELS)}; cluster dims {seed.cluster_dims}; "
          f"elements per block {seed.elements_per_block}")
    if args.emit == "-":
        sys.stdout.write(tu)
    elif args.emit:
        with open(args.emit, "w", encoding="utf-8") as f:
            f.write(tu)
    with tempfile.TemporaryDirectory(prefix="tkc-seed-") as d:
        for kind in {"none": [], "obj": ["obj"], "cubin": ["cubin"], "both": ["obj", "cubin"]}[args.compile]:
            b = compile_nvcc(tu, d, kind, args.nvcc, args.arch)
            print(f"nvcc {kind}: ok in {b.seconds:.1f} s ({' '.join(b.command)})")
            if kind == "cubin":
                for expr, mangled in check_cubin_symbols(b.path).items():
                    print(f"  {expr}: {mangled}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run a kernel of the CUDA backend on the CPU: the generated translation unit with its prelude
replaced by tests/cuda_emu/shim.h (one std::thread per CUDA thread, blocks one after another,
__syncthreads and warp shuffles through std::barrier), compiled with g++ -std=c++20.

For kernels without clusters, tensor cores or 16-bit floats (the shim has no __half). Outputs
start as NaN bytes, shared memory as 0xff bytes, so an element left unwritten or read before it
was written shows. `gxx()` is None when no g++ with C++20 <barrier> is installed (tests skip).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np

from codegen import cuda
from dsl import exprs
from codegen.cuda_prelude import C_TYPES as _C_TYPES

C_TYPES = {**_C_TYPES, "u16": "unsigned short"}  # and launch data in 16 bits (an SDDMM's tc_pos)

HERE = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def gxx() -> str | None:
    """Path of a g++ that compiles C++20 <barrier>, or None."""
    path = shutil.which("g++")
    if path is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "p.cpp")
        with open(src, "w") as f:
            f.write("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n")
        r = subprocess.run([path, "-std=c++20", "-pthread", src, "-o", os.path.join(tmp, "p")], capture_output=True)
    return None if r.returncode else path


def build(source: str, dtypes: list[str], n_scalars: int, workdir: str, refs=(), nulls=(), kernel=None,
          reverse: bool = False) -> str:
    """Compile CUDA `source` (tensor arguments of `dtypes`, then `n_scalars` int scalars) into an
    executable `workdir/k` that reads the tensors' bytes from argv[1], the scalars from argv[3:],
    runs the grid and writes the tensors' bytes to argv[2]; returns its path. Scalars at the
    positions `refs` are passed by address (the kernel reads them from memory: `scalar_refs`); the
    tensors at the positions `nulls` are passed as null pointers (their bytes are still read and
    written back). `kernel`: (name, block x) of another kernel of the source than the launch
    line's (an SDDMM's `<kernel>_panels`), run over a grid of one row whose length is read from
    argv after the scalars (before the tensors' sizes). The blocks run one at a time, in
    blockIdx order, or with `reverse` from the last (so a block that writes another's outputs
    wrongly is seen when that one ran first)."""
    config = cuda.launch_config(source)
    if kernel is not None:
        config = {**config, "kernel": kernel[0], "grid": ["tk_grid_x", 1, 1], "block": [kernel[1], 1, 1],
                  "pdl": False, "dynamic": []}
    if config["cluster"] != [1, 1, 1]:
        raise ValueError("the CPU emulation runs no thread-block clusters")
    body = source.split("// ---- kernel ----")[1].split("\n", 1)[1]
    if kernel is not None:  # only that kernel: the others may hold PTX the CPU cannot assemble (wgmma tiles)
        body = _only_kernel(body, kernel[0])
    body = body.replace('extern "C" ', "")
    # dynamic dims are int arguments after the scalars (read from argv after them); a grid extent
    # that depends on them is computed from them
    names = [n for n, _, _ in config.get("dynamic", [])]
    n_dyn = len(names)
    gx, gy, gz = (g if isinstance(g, int) or g == "tk_grid_x"
                  else cuda.c_expr(exprs.parse(g), lambda n: f"s{n_scalars + names.index(n)}") for g in config["grid"])
    threads = config["block"][0]
    n_scalars += n_dyn
    extra = int(kernel is not None)  # the grid's length, after the scalars
    decl = "\n".join(f"    std::vector<unsigned char> b{i}(std::stoul(argv[{3 + n_scalars + extra + i}]));"
                     for i in range(len(dtypes)))
    reads = "\n".join(f"    if (fread(b{i}.data(), 1, b{i}.size(), f) != b{i}.size()) return 3;" for i in range(len(dtypes)))
    writes = "\n".join(f"    fwrite(b{i}.data(), 1, b{i}.size(), f);" for i in range(len(dtypes)))
    args = [f"static_cast<{C_TYPES[dt]}*>(nullptr)" if i in nulls else f"reinterpret_cast<{C_TYPES[dt]}*>(b{i}.data())"
            for i, dt in enumerate(dtypes)]
    args += [f"&s{j}" if j in refs and j < n_scalars - n_dyn else f"s{j}" for j in range(n_scalars)]
    if config.get("pdl"):  # the last argument: launched programmatically (never, here)
        args.append("0")
    scalars = "\n".join(f"    const int s{j} = std::stoi(argv[{3 + j}]);" for j in range(n_scalars))
    if extra:
        scalars += f"\n    const int tk_grid_x = std::stoi(argv[{3 + n_scalars}]);"
    main = f"""
#include <string>
int main(int, char** argv) {{
{scalars}
{decl}
    FILE* f = fopen(argv[1], "rb");
{reads}
    fclose(f);
    for (int bz = 0; bz < {gz}; ++bz)
    for (int by = 0; by < {gy}; ++by)
    for (int ix = 0; ix < {gx}; ++ix) {{
        const int bx = {"(" + str(gx) + ") - 1 - ix" if reverse else "ix"};
        std::memset(smem, 0xff, sizeof(smem));
        std::barrier<> bar({threads});
        g_bar = &bar;
        g_warps.clear();
        for (int w = 0; w < {max(1, threads // 32)}; ++w) g_warps.push_back(std::make_unique<tk_warp>());
        std::vector<std::thread> ts;
        for (int t = 0; t < {threads}; ++t)
            ts.emplace_back([&, t] {{
                threadIdx.x = t, blockIdx.x = bx, blockIdx.y = by, blockIdx.z = bz;
                gridDim.x = {gx}, gridDim.y = {gy}, gridDim.z = {gz};
                g_groups.clear(), g_open.clear();
                {config["kernel"]}({", ".join(args)});
            }});
        for (auto& t : ts) t.join();
    }}
    f = fopen(argv[2], "wb");
{writes}
    fclose(f);
}}
"""
    path = os.path.join(workdir, "k.cpp")
    with open(path, "w") as f:
        f.write('#include "shim.h"\n' + body + main)
    exe = os.path.join(workdir, "k")
    r = subprocess.run([gxx(), "-std=c++20", "-O1", "-pthread", f"-I{HERE}", path, "-o", exe],
                       capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise RuntimeError("g++ failed:\n" + r.stderr[-4000:])
    return exe


def _only_kernel(body: str, name: str) -> str:
    """`body` without the `extern "C" __global__` definitions of kernels other than `name` (each
    runs from its first line to the next line that is a lone `}`). Uncalled inline helpers stay:
    g++ emits no code for them."""
    out, skip = [], False
    for line in body.split("\n"):
        if line.startswith('extern "C" __global__'):
            m = re.search(r"(\w+)\(", line.split(")", 1)[1] if "__launch_bounds__" in line else line)
            skip = m is None or m.group(1) != name
        if not skip:
            out.append(line)
        elif line == "}":
            skip = False
    return "\n".join(out)


class Emulated:
    """`module` (final IR) emitted as CUDA and compiled for the CPU emulation once; call it as
    `kernel(arrays, outputs, scalars)`: one array per tensor argument, in order (those at
    positions `outputs` are overwritten; they start as NaN bytes); returns the outputs."""

    def __init__(self, module):
        self.dtypes = [a.type.dtype for a in module.func.body.args]
        scalars = module.func.attrs.get("scalars", [])
        self.n_scalars = len(scalars)
        refs = [j for j, (n, _, _) in enumerate(scalars) if n in module.func.attrs.get("scalar_refs", [])]
        self._dir = tempfile.TemporaryDirectory()
        source = self.source = cuda.emit(module)
        self.dynamic = cuda.launch_config(source).get("dynamic", [])  # (name, argument, axis)
        self.exe = build(source, self.dtypes, self.n_scalars, self._dir.name, refs)

    def __call__(self, arrays: list[np.ndarray], outputs: list[int], scalars=(), keep=()) -> list[np.ndarray]:
        """`keep`: positions of outputs updated in place (`mut`): they start as given, not NaN,
        and are returned with the `outputs`, in argument order."""
        tmp = self._dir.name
        bufs = [np.full(a.nbytes, 0xff, np.uint8) if i in outputs else np.ascontiguousarray(a)
                for i, a in enumerate(arrays)]
        with open(os.path.join(tmp, "in.bin"), "wb") as f:
            f.write(b"".join(b.tobytes() for b in bufs))
        sizes = [str(b.nbytes) for b in bufs]
        dims = [arrays[i].shape[k] for _, i, k in self.dynamic]  # dynamic dims follow the scalars
        r = subprocess.run([self.exe, os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin"),
                            *map(str, scalars), *map(str, dims), *sizes], capture_output=True, text=True, timeout=600)
        if r.returncode:
            raise RuntimeError(f"the emulated kernel failed ({r.returncode}):\n{r.stderr[-4000:]}")
        data = np.fromfile(os.path.join(tmp, "out.bin"), dtype=np.uint8)
        out, pos = [], 0
        for i, a in enumerate(arrays):
            if i in outputs or i in keep:
                out.append(data[pos:pos + a.nbytes].view(a.dtype).reshape(a.shape).copy())
            pos += a.nbytes
        return out


def check_against_torch(path: str, defines=None, dists=None, scalars=None, scalar_refs: bool = False) -> None:
    """Compile the kernel at `path` (with `defines`) once for the emulation and compare every
    output with torch in float64 (the kernel's `reference`) on seeded inputs of each
    distribution in `dists` (default: all of tkc.oracle's), within the oracle's derived
    tolerance; runtime scalars as tkc.oracle.scalar_values gives them (or `scalars`), read from
    memory by the kernel with `scalar_refs` (as when a caller passes device tensors). Raises
    AssertionError on a mismatch or an element left unwritten."""
    from tkc import driver

    final = driver.optimize(driver.frontend(path, defines or {}), "cuda")
    if scalar_refs:
        final.func.attrs["scalar_refs"] = [n for n, _, _ in final.func.attrs.get("scalars", [])]
    _check(Emulated(final), driver.frontend(path, defines or {}), dists, scalars)


def check_dynamic_against_torch(path: str, values: dict[str, list[int]], defines=None, dists=None) -> str:
    """Compile the kernel at `path` once with the dims of `values` dynamic, then run that one
    emulated kernel at each set of values (the i-th value of every dim together) against torch
    in float64, as `check_against_torch` does at static dims. Returns the CUDA source."""
    from tkc import driver

    final = driver.optimize(driver.frontend(path, defines or {}, dynamic=tuple(values)), "cuda")
    kernel = Emulated(final)
    assert [n for n, _, _ in kernel.dynamic] == sorted(values), kernel.dynamic
    for at in zip(*values.values()):
        _check(kernel, driver.frontend(path, {**(defines or {}), **dict(zip(values, at))}), dists, None)
    return kernel.source


def _check(kernel: "Emulated", module, dists, scalars) -> None:
    """Run emulated `kernel` on seeded inputs of `module` (the same kernel at static dims: its
    shapes, reference and error budgets) and compare with torch in float64."""
    import torch

    from tkc import oracle

    budgets = oracle.error_budgets(module)
    outs = oracle.outputs(module)
    mutable = module.func.attrs.get("mutable", [])
    n_out = len(module.func.attrs["outputs"])
    for seed, dist in enumerate(dists or oracle.DISTRIBUTIONS):
        inputs = oracle.random_inputs(module, seed, "cpu", dist, scalars)
        refs = oracle.reference(module, inputs)
        tensors = [t.numpy() for t in inputs if not isinstance(t, int)]
        ints = [t for t in inputs if isinstance(t, int)]
        old = tensors[len(tensors) - len(mutable):]  # `mut` outputs' old values come last
        tensors = tensors[:len(tensors) - len(mutable)]
        first = len(tensors)
        arrays = tensors + [old[mutable.index(first + k)] if first + k in mutable
                            else np.zeros(r.shape, np.float64 if dt == "f64" else np.float32)
                            for k, ((_, dt), r) in enumerate(zip(outs, refs))][:n_out]
        got = kernel(arrays, [i for i in range(len(tensors), len(arrays)) if i not in mutable], ints, keep=mutable)
        for (name, dtype), out, ref in zip(outs, got, refs):
            assert np.isfinite(out).all(), f"{dist}: `{name}` has elements left unwritten (NaN)"
            err = oracle.rel_error(torch.from_numpy(out.astype(np.float64)), ref)
            tol = budgets[name].tol(dtype)
            assert err <= tol, f"{dist}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"

"""check-smem-fit agrees with the hardware (issue 14, item 5), on the CPU.

For every example and test program at its default dims, and a few configurations of each `tune`
space (drawn with a fixed seed from those `tkc tune` would time: `requires` holds and the
shared tiles fit), the pass's estimate (`smem_estimate`, the largest over the kernel's launches)
equals, within 1 KiB:

* `cuda`: the shared memory of the generated kernel: what ptxas reports for its static
  `__shared__` arrays (`nvcc -cubin -Xptxas -v`) plus the dynamic shared memory it is launched
  with (`smem_bytes` of the `tkc-launch:` line), for its largest kernel (a sampled gemm's module
  has three: the tensor-core tiles', launched with dynamic shared memory, the transposition of
  B with a static tile, and the dot products');
* `tilelang`: what TileLang 0.1.15's lowering for sm_90a gives the kernel (no GPU needed): the
  merged dynamic buffer (`dyn_shared_memory_buf` of the device function, what the launch passes)
  plus any static `__shared__` array its CUDA source declares.

A program a backend rejects (a located diagnostic: dynamic dims on `cuda`, register tiles
TileLang cannot lay out) is skipped with that diagnostic as the reason. A sampled gemm (SDDMM)
over the budget is check-smem-fit's located error at its `grid` on both backends, and the fix it
names fits (`test_sampled_gemm_over_budget_*`).

Fast enough for CI's two cores: everything is compiled once, in a session fixture; the CUDA
sources go through nvcc in two translation units (each kernel wrapped in a namespace of its
own, so that one cudafe/cicc pass covers many kernels), while two worker processes run
TileLang's lowering. tests/gpu/test_gpu_smem_fit.py checks the same estimates against kernels
loaded on a GPU.
"""

from __future__ import annotations

import concurrent.futures as cf
import glob
import multiprocessing
import os
import random
import re
import subprocess
import tempfile

import pytest

from dsl.diagnostics import TkError
from tkc import cuda_runtime, driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TUNED = ("examples/miss_split.tk", "examples/peft_miss.tk", "examples/peft_miss_bf16.tk", "examples/sgemm.tk")
PER_SPACE = 3  # configurations drawn from each tune space
TOLERANCE = 1024  # bytes
NVCC = cuda_runtime.nvcc_path()


def _cases() -> list[tuple[str, dict[str, int]]]:
    from dsl.parser import parse
    from tkc import tune

    files = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk"))) + sorted(
        glob.glob(os.path.join(ROOT, "tests", "programs", "*.tk")))
    cases = [(os.path.relpath(f, ROOT), {}) for f in files]
    rng = random.Random(14)
    for path in TUNED:
        text = driver.read_source(os.path.join(ROOT, path))
        kernel = parse(text, path)
        configs = list(tune.configurations(tune.build_space(kernel, {}, {})))
        rng.shuffle(configs)
        pruner = tune.Pruner(os.path.join(ROOT, path), text, kernel, {})
        cases += [(path, c) for c in configs if pruner.check(c) is None][:PER_SPACE]
    # a staged store that rotates over two copies (passes/smem_tilelang.py rotating_stores) at
    # the cost model's large-M shape
    cases.append(("examples/miss_split.tk", {"K": 4096, "N": 4096, "BM": 64, "BN": 128, "STAGE_C": 1, "U": 2}))
    # decode attention at stories15M's 48-wide heads: staged row and column sums, shared vectors
    # (passes/smem_tilelang.py staged_reduce, vectors_in_shared)
    cases.append(("examples/attention.tk", {"H": 6, "HD": 48, "KVD": 288}))
    return cases


CASES = _cases()
IDS = [path + "".join(f" {k}={v}" for k, v in sorted(c.items())) for path, c in CASES]


def estimate(path: str, config: dict[str, int], target: str) -> tuple[int, object]:
    """(check-smem-fit's bytes for `target`'s default pipeline, the final IR)."""
    from passes.check_smem_fit import smem_estimate

    backend = "cuda" if target == "cuda" else "tilelang"
    module = driver.optimize(driver.frontend(os.path.join(ROOT, path), dict(config)), target)
    launches = [op for op in module.func.body.ops if op.name == "tile.launch"]
    return max(smem_estimate(module, op, backend) for op in launches), module


def _tilelang_case(path: str, config: dict[str, int]) -> tuple:
    """Worker: (estimate, TileLang's bytes), ("skip", the diagnostic), ("error", TileLang's
    message) or ("fallback", TileLang's message) when it found no layout for a `T.reduce_*`."""
    from codegen import tilelang as tilelang_gpu

    try:
        nbytes, module = estimate(path, config, "tilelang")
        source = tilelang_gpu.emit(module)
    except TkError as exc:
        return "skip", exc.diagnostics[0].message
    try:
        device, cuda_source = _lower(source)
    except Exception as exc:  # noqa: BLE001 (TVM's errors do not pickle: the message goes back)
        located = tilelang_gpu.layout_error(module, exc)  # the runtime's located error for it
        if located is not None:
            return "skip", located.diagnostics[0].message
        if not tilelang_gpu.reduce_layout_failed(source, exc):
            return "error", str(exc).strip().splitlines()[-1]
        return "fallback", str(exc).strip().splitlines()[-1]
    dynamic = max((int(f.attrs["dyn_shared_memory_buf"]) if "dyn_shared_memory_buf" in f.attrs else 0)
                  for f in device.functions.values())
    sizes = {"half_t": 2, "bfloat16_t": 2, "float": 4, "double": 8, "int": 4, "signed char": 1, "uchar": 1}
    static = sum(sizes.get(t, 8) * int(n) for t, n in
                 re.findall(r"(?<!extern )__shared__ (?:__align__\(\d+\) )?([\w ]+?) \w+\[(\d+)\]", cuda_source))
    if tilelang_gpu.SHARED_REGISTERS_MARK in source:  # the model's bound (smem_tilelang.registers_in_shared)
        return nbytes, dynamic + static, "bound"
    if tilelang_gpu.SHARED_VECTORS_MARK in source:  # its vectors through the whole kernel (vectors_in_shared)
        return nbytes, dynamic + static, "vectors"
    return nbytes, dynamic + static


def _lower(source: str):
    """TileLang's device IR and CUDA source of a generated TileLang file (no GPU needed)."""
    import hashlib
    import importlib

    import tilelang  # noqa: F401  (before tvm: TileLang brings its own TVM)
    import tvm

    from codegen import tilelang as tilelang_gpu
    from codegen.tir import ARCH, load_prim_func

    lower = importlib.import_module("tilelang.engine.lower")  # the module (`tilelang.engine.lower` is a function)
    with tempfile.TemporaryDirectory(prefix="tkc-smem-") as tmp:
        file = os.path.join(tmp, "kernel.py")
        with open(file, "w", encoding="utf-8") as f:
            f.write(source)
        func = load_prim_func(file, "tkc_smem_" + hashlib.sha256(source.encode()).hexdigest()[:16])
        with tvm.transform.PassContext(config=tilelang_gpu.PASS_CONFIGS), tvm.target.Target(ARCH):
            context = lower.create_backend_context(ARCH, None, "auto")
            _, device, *_ = lower.lower_to_host_device_ir(func, context)
            return device, lower.device_codegen_without_compile(device, context).inspect_source()


def _cuda_sources() -> dict[int, tuple]:
    """case index -> (estimate, launch config, source) or ("skip", the diagnostic)."""
    from codegen import cuda

    out = {}
    for i, (path, config) in enumerate(CASES):
        try:
            nbytes, module = estimate(path, config, "cuda")
            source = cuda.emit(module)
        except TkError as exc:
            out[i] = ("skip", exc.diagnostics[0].message)
            continue
        out[i] = (nbytes, cuda.launch_config(source), source)
    return out


def _batch(sources: dict[int, str]) -> str:
    """One translation unit holding every source, each in `namespace tkc_case_<i>` (their
    kernels lose `extern "C"`, so equal names do not clash)."""
    includes, bodies = [], []
    for i, source in sources.items():
        body = []
        for line in source.splitlines():
            if line.startswith(("#include", "#pragma nv_diag")):
                if line not in includes:
                    includes.append(line)
            else:
                body.append(line.replace('extern "C" __global__', "__global__"))
        bodies.append(f"namespace tkc_case_{i} {{\n" + "\n".join(body) + f"\n}}  // namespace tkc_case_{i}\n")
    return "\n".join(includes) + "\n" + "\n".join(bodies)


def _ptxas(sources: dict[int, str], folder: str, stem: str) -> dict[int, dict[str, int]]:
    """case index -> {kernel name: static shared bytes ptxas reports}."""
    path = os.path.join(folder, f"{stem}.cu")
    with open(path, "w", encoding="utf-8") as f:
        f.write(_batch(sources))
    proc = subprocess.run([NVCC, "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "-o", path[:-3] + ".cubin", path],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[int, dict[str, int]] = {i: {} for i in sources}
    case, name = None, None
    for line in proc.stderr.splitlines():
        m = re.search(r"Compiling entry function '(_ZN\w+)'", line)
        if m:
            case, name = _demangle(m.group(1))
            out[case][name] = 0
            continue
        m = re.search(r"(\d+) bytes smem", line)
        if m and case is not None:
            out[case][name] = int(m.group(1))
    return out


def _demangle(symbol: str) -> tuple[int, str]:
    """(case, kernel name) of `_ZN<n>tkc_case_<i><m><name>E...`."""
    rest = symbol[3:]
    n = int(re.match(r"\d+", rest).group(0))
    rest = rest[len(str(n)):]
    case = int(rest[:n][len("tkc_case_"):])
    rest = rest[n:]
    m = int(re.match(r"\d+", rest).group(0))
    return case, rest[len(str(m)):len(str(m)) + m]


@pytest.fixture(scope="session")
def measured(tmp_path_factory):
    """{"cuda": {case: (estimate, bytes) | ("skip", why)}, "tilelang": {...}}, or a skip reason."""
    try:
        import tilelang  # noqa: F401
        tilelang_ok = True
    except ImportError:
        tilelang_ok = False
    folder = str(tmp_path_factory.mktemp("smem"))
    results: dict[str, dict[int, tuple]] = {"cuda": {}, "tilelang": {}}
    ctx = multiprocessing.get_context("spawn")  # TileLang (TVM) in fresh processes, not forked ones
    with cf.ProcessPoolExecutor(2, mp_context=ctx) as pool, cf.ThreadPoolExecutor(2) as threads:
        lowered = {i: pool.submit(_tilelang_case, *case) for i, case in enumerate(CASES)} if tilelang_ok else {}
        generated = _cuda_sources()
        built = {i: v for i, v in generated.items() if v[0] != "skip"}
        halves = [dict(list(built.items())[k::2]) for k in range(2)] if NVCC else []
        ptxas = [threads.submit(_ptxas, {i: v[2] for i, v in half.items()}, folder, f"batch{k}")
                 for k, half in enumerate(halves) if half]
        static = {}
        for future in ptxas:
            static.update(future.result())
        for i, value in generated.items():
            if value[0] == "skip":
                results["cuda"][i] = value
            elif NVCC:
                nbytes, config, _ = value
                launched = {config["kernel"]: config["smem_bytes"]}
                results["cuda"][i] = (nbytes, max(s + launched.get(k, 0) for k, s in static[i].items()))
        for i, future in lowered.items():
            results["tilelang"][i] = future.result()
    return results


def _check(measured, target: str, index: int) -> None:
    if target == "cuda" and NVCC is None:
        pytest.skip("nvcc is not installed")
    if index not in measured[target]:
        pytest.skip("TileLang is not installed")
    nbytes, actual, *bound = measured[target][index]
    if nbytes == "skip":
        pytest.skip(f"target `{target}` rejects it: {actual}")
    assert nbytes not in ("error", "fallback"), f"TileLang could not lower the generated kernel: {actual}"
    if bound == ["vectors"]:  # shared row and column vectors counted through the kernel: a bound, by their bytes at most
        assert actual <= nbytes, (f"check-smem-fit bounds the shared memory per block on `{target}` by {nbytes} "
                                  f"bytes; the kernel has {actual}")
        return
    if bound:  # register tiles declared shared: the model counts them without reuse, an upper bound
        # that stays under REGISTERS_SHARED_MAX (so it never rejects a kernel that would fit)
        from passes.smem_tilelang import REGISTERS_SHARED_MAX

        assert actual <= nbytes <= REGISTERS_SHARED_MAX + TOLERANCE, (
            f"check-smem-fit bounds the shared memory per block on `{target}` by {nbytes} bytes; the kernel has {actual}")
        return
    assert abs(nbytes - actual) <= TOLERANCE, (f"check-smem-fit estimates {nbytes} bytes of shared memory per block "
                                               f"on `{target}`; the kernel has {actual}")


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_cuda_estimate_is_what_ptxas_and_the_launch_declare(measured, index):
    _check(measured, "cuda", index)


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_tilelang_estimate_is_what_tilelang_allocates(measured, index):
    _check(measured, "tilelang", index)


def test_batch_names_round_trip():
    """The batch's namespaces keep kernels apart and map back to their cases."""
    assert _demangle("_ZN11tkc_case_127miss_v3EPK6__halfS2_PS0_") == (12, "miss_v3")
    assert _demangle("_ZN12tkc_case_10310sddmm_dotsEv") == (103, "sddmm_dots")
    text = _batch({0: '#include <x.h>\nextern "C" __global__ void k() {}', 1: '#include <x.h>\nextern "C" __global__ void k() {}'})
    assert text.count("#include <x.h>") == 1 and text.count("__global__ void k()") == 2 and 'extern "C"' not in text


# BM = 1024 rows of A staged per tile: over sm_90's budget on both backends (the f32 products alone)
WIDE = """kernel wide<BM=1024, BN=64, threads=256>(A: f16[M, K], B: f16[K, N], S: csr[M, N, NNZ]) -> (P: f32[NNZ])
    where M = 4096, N = 4096, K = 256, NNZ = 1000
{
    grid (tiles(S, BM, BN)) as (m, n) threads(threads)
    P[S] = A[m*BM : +BM, :] @ B[:, n*BN : +BN]
}
"""


@pytest.mark.parametrize("target, nbytes, fits, notes", [
    ("cuda", 303104, 178176, ["`%A`'s rows in K chunks: 2 stages of [1024][16 + 8] f16 = 98304 bytes",
                              "`%B`'s columns in K chunks: 2 stages of [16][64 + 8] f16 = 4608 bytes",
                              "the f32 products: [1024][64 + 8] f32 = 294912 bytes, the stages' 102912 bytes "
                              "reused after the K loop",
                              "each tile row's first entry (tc_rbase): [1][1024] i32 = 4096 bytes, after the products",
                              "the tile's entries' places (tc_pos, 4 bytes each), a chunk at a time: [1][1024] i32 = "
                              "4096 bytes, after those (1024 entries)"]),
    ("tilelang", 262144, 147456, ["`%A`'s rows in K chunks (`A_tile`): 2 stages of [1024][16] f16 = 65536 bytes",
                                  "`%B`'s columns in K chunks (`B_tile`): 2 stages of [16][64] f16 = 4096 bytes",
                                  "the f32 products (`C_tile`): [1024][64] f32 = 262144 bytes, partly in the K "
                                  "chunks' bytes after the loop"])])
def test_sampled_gemm_over_budget_is_located_at_the_grid(tmp_path, target, nbytes, fits, notes):
    """The sampled gemm's staged tiles over the budget: check-smem-fit's error at the `grid`, a note
    per staged operand and the products, and a fix that fits with the bytes it names; the backend
    (IR that skipped check-smem-fit) raises the same diagnostic."""
    from codegen import cuda, tilelang
    from passes.manager import parse_pipeline, run_pipeline

    path = str(tmp_path / "wide.tk")
    with open(path, "w", encoding="utf-8") as f:
        f.write(WIDE)
    with pytest.raises(TkError) as exc:
        driver.optimize(driver.frontend(path), target)
    (d,) = exc.value.diagnostics
    on = " on the CUDA backend" if target == "cuda" else ""
    assert (d.loc.line, d.loc.col) == (4, 5)
    assert d.message == f"kernel `wide` needs {nbytes} bytes of shared memory per block{on}; limit is 232448 on sm_90"
    assert d.notes == notes + [f"fix: use smaller tiles of the pattern: BM x BN = 512 x 64 needs {fits} bytes (the "
                               "extents of `tiles(...)`: e.g. `-D BM=512 -D BN=64` where schedule constants set them)"]
    unchecked = run_pipeline(driver.frontend(path), parse_pipeline("tile,sparse-dispatch"))
    with pytest.raises(TkError) as emitted:
        (cuda if target == "cuda" else tilelang).emit(unchecked)
    assert emitted.value.diagnostics == [d]
    rel = os.path.relpath(path, ROOT)
    assert estimate(rel, {"BM": 512}, target)[0] == fits  # the fix compiles, with the bytes it names

"""The CUDA C++ backend (codegen/cuda.py) on the CPU: nvcc accepts the generated translation unit
of every example and test program (and of hypothesis-drawn MiSS schedules), the header carries the
launch shape, every op is commented with its location, the plan (register / shared / mma
placement, barriers, cp.async pipelining) is the intended one, and what the backend cannot
express is a located TkError. Running the kernels needs a GPU: tests/gpu/test_gpu_cuda.py.

nvcc compiles run two at a time (the CI box has two cores; one `nvcc -c` takes about 3 s).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from codegen import cuda
from codegen.cuda_plan import (OTHER, Access, SyncState, chunk_map, chunk_width, known_multiple, make_plan,
                               warp_split)
from dsl import exprs
from dsl.diagnostics import TkError
from dsl.ir import Op
from dsl.ops import has_grid_barrier
from passes.check_smem_fit import shared_buffers
from profiles import examples
from tkc import cuda_runtime, driver
from tkc.cache import Cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk"))) + sorted(
    glob.glob(os.path.join(ROOT, "tests", "programs", "*.tk")))
# the sampled gemm (SDDMM, issue 12) has its own kernel form (codegen/cuda_sddmm.py: several
# kernels, a grid per pattern): nvcc checks it below, at the defaults and without 16-byte vectors
SDDMM = [(p, {}) for p in FILES if "tiles(" in open(p, encoding="utf-8").read()]
SDDMM.append((os.path.join(ROOT, "examples", "sddmm.tk"), {"K": 13, "N": 91}))
SDDMM.append((os.path.join(ROOT, "examples", "sddmm.tk"), {"M": 1504, "N": 1504}))  # one wave of tiles: over B
FILES = [p for p in FILES if "tiles(" not in open(p, encoding="utf-8").read()]
# a kernel with dynamic dims (issue 13): through `cuda` each is an int kernel argument (checked
# below); it and its static form (the `dynamic` clause dropped) go through nvcc with the others
DYNAMIC = [p for p in FILES if re.search(r"^\s*dynamic\s", open(p, encoding="utf-8").read(), re.M)]
FILES = [p for p in FILES if p not in DYNAMIC]
IDS = [os.path.relpath(p, ROOT) for p in FILES]
NVCC = cuda_runtime.nvcc_path()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
TOOLKIT_HEADERS = {"cuda_fp16.h", "cuda_bf16.h", "cstdint", "type_traits", "cooperative_groups.h"}
LAUNCH = re.compile(r"^// Launch: grid \((\d+), (\d+), (\d+)\), block \((\d+), 1, 1\) = (\d+) threads, "
                    r"cluster \((\d+), (\d+), (\d+)\), dynamic shared memory (\d+) bytes\.$", re.M)


def generate(path: str, **overrides: int):
    module = driver.optimize(driver.frontend(path, overrides), "tilelang")
    return module, cuda.emit(module)


def nvcc(source: str, folder: str, stem: str) -> subprocess.CompletedProcess:
    """nvcc on a generated translation unit as tkc/cuda_runtime.py builds it: device code only
    (`-cubin`; `-c` also compiled the host side, 2.5-3.5x the time, and the runtime never does)."""
    path = os.path.join(folder, f"{stem}.cu")
    with open(path, "w", encoding="utf-8") as f:
        f.write(source)
    return subprocess.run([NVCC, "-arch=sm_90a", "-cubin", path, "-o", path[:-3] + ".cubin"], capture_output=True,
                          text=True, timeout=300)


def nvcc_all(sources: dict[str, str], folder: str) -> dict[str, subprocess.CompletedProcess]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(nvcc, src, folder, re.sub(r"\W", "_", k)) for k, src in sources.items()}
        return {k: f.result() for k, f in futures.items()}


# Beyond the examples: bf16 tensor cores with the accumulator in shared memory (it feeds an
# elementwise op), a reduction inside a pipelined loop, a broadcast row, f64 and int outputs.
DTYPE_MIX = """\
kernel dtype_mix<BM=32, BK=32, stages=2>(X: bf16[M, K], W: bf16[K, P], b: f32[1, P], I: i8[M, P])
    -> (Y: f32[M, P], Z: bf16[M, 1], D: f64[M, P], J: i32[M, P])
    where M = 100, K = 128, P = 64
    requires K % BK == 0
{
    grid (cdiv(M, BM)) as (m) threads(128)
    acc = zeros(f32[BM, P])
    s = zeros(f32[BM, 1])
    for k in pipelined(K / BK, stages) {
        x = X[m*BM : +BM, k*BK : +BK]
        acc += x @ W[k*BK : +BK, :]
        s += sum(x, 1)
    }
    Y[m*BM : +BM, :] = relu(acc + b[0, :])
    Z[m*BM : +BM, 0 : 1] = cast(s, bf16)
    D[m*BM : +BM, :] = cast(acc, f64) * 2.0
    J[m*BM : +BM, :] = cast(I[m*BM : +BM, :], i32) + cast(acc, i32)
}
"""


@pytest.fixture(scope="module")
def dtype_mix(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("mix") / "dtype_mix.tk"
    path.write_text(DTYPE_MIX)
    return str(path)


@pytest.fixture(scope="module")
def static_forms(tmp_path_factory) -> list[str]:
    """The DYNAMIC examples with their `dynamic` clause dropped (every dim specialized)."""
    folder = tmp_path_factory.mktemp("static")
    out = []
    for path in DYNAMIC:
        static = folder / os.path.basename(path)
        static.write_text(re.sub(r"^\s*dynamic\s[^\n]*\n", "", open(path, encoding="utf-8").read(), flags=re.M))
        out.append(str(static))
    return out


@pytest.fixture(scope="module")
def generated(dtype_mix, static_forms):
    gen = {path: generate(path) for path in FILES + [dtype_mix] + static_forms + DYNAMIC}
    gen.update({_sddmm_key(path, d): generate(path, **d) for path, d in SDDMM})
    return gen


def _sddmm_key(path: str, defines: dict[str, int]) -> str:
    return os.path.relpath(path, ROOT) + "".join(f" {k}={v}" for k, v in sorted(defines.items()))


@pytest.fixture(scope="module")
def compiled(generated, tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    folder = str(tmp_path_factory.mktemp("cuda"))
    return nvcc_all({path: src for path, (_, src) in generated.items()}, folder)


@needs_nvcc
def test_dynamic_dims_are_kernel_arguments_and_both_forms_compile(compiled, generated, static_forms):
    assert DYNAMIC, "examples/miss_split.tk has a `dynamic` clause"
    for path in DYNAMIC:
        module, src = generated[path]
        for name in module.func.attrs["dynamic"]:
            assert f"const int {name}, const int tk_pdl)" in src and f"constexpr int {name} " not in src, path
    for path in static_forms + DYNAMIC:
        proc = compiled[path]
        assert proc.returncode == 0 and "warning" not in proc.stderr, (path, proc.stderr[-3000:])


@needs_nvcc
def test_nvcc_accepts_bf16_mma_shared_accumulators_and_mixed_dtypes(compiled, generated, dtype_mix):
    proc = compiled[dtype_mix]
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]
    module, source = generated[dtype_mix]
    plan = make_plan(module, module.func.body.ops[0], 128)
    allocs = {op.result.name: op.result for op in module.walk() if op.name == "tile.alloc"}
    assert plan.where(allocs["acc"]) == "shared" and [g.kind for g in plan.gemms.values()] == ["mma"]
    assert "tk_mma_16816<__nv_bfloat16>" in source and "__shfl_xor_sync" in source


@needs_nvcc
@pytest.mark.parametrize("path, defines", SDDMM, ids=[_sddmm_key(p, d) for p, d in SDDMM])
def test_nvcc_accepts_the_sddmm_kernels(compiled, generated, path, defines):
    key = _sddmm_key(path, defines)
    proc = compiled[key]
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]
    _, source = generated[key]
    config = cuda.launch_config(source)
    names = [config["sddmm"]["dot_kernel"], config["sddmm"]["transpose_kernel"]] + \
        ([config["sddmm"]["tc_kernel"]] if config["sddmm"]["tc_kernel"] else [])
    for name in names:  # every kernel the runtime launches is defined, extern "C"
        assert f'extern "C" __global__ void __launch_bounds__' in source and f" {name}(" in source, name
    # the tile kernel's form: wgmma where passes/smem_sddmm.wgmma_fits (sddmm.tk at K = 256), else
    # mma.sync; its tiles read B itself (N-major descriptors) at 1504^2 (144 tiles), else Bt
    # (4000^2: 1024 tiles, more than one wave)
    wgmma, mma = "wgmma.mma_async" in source, "tk_mma_16816<__half>" in source
    assert (wgmma or mma) == bool(config["sddmm"]["tc_kernel"]) and not (wgmma and mma)
    assert wgmma == (os.path.basename(path) == "sddmm.tk" and "K" not in defines)
    n_major = wgmma and defines.get("N") == 1504
    assert bool(config["sddmm"].get("tc_reads_bt")) == (wgmma and not n_major)
    assert ("tk_wgmma_desc_n(sb)" in source) == n_major == ("p, 1, 1, 0, 1;" in source)  # the descriptor, imm-trans-b = 1


# ---- every example and program --------------------------------------------------------------

@needs_nvcc
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_nvcc_accepts_the_generated_code(compiled, path):
    proc = compiled[path]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning" not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_header_carries_the_launch_shape(generated, path):
    module, source = generated[path]
    launch = next(op for op in module.func.body.ops if op.name == "tile.launch")
    grid = [exprs.evaluate(exprs.parse(g), {}) for g in launch.attrs["grid"]]
    grid += [1] * (3 - len(grid))
    threads = exprs.evaluate(exprs.parse(launch.attrs["threads"]), {})
    cluster = [exprs.evaluate(exprs.parse(c), {}) for c in launch.attrs.get("cluster", [])]
    cluster += [1] * (3 - len(cluster))
    m = LAUNCH.search(source)
    assert m, source[:800]
    got = [int(x) for x in m.groups()]
    assert got[:3] == grid and got[3] == got[4] == threads and got[5:8] == cluster
    config = cuda.launch_config(source)
    cooperative = {"cooperative": True} if has_grid_barrier(launch) else {}
    assert config == {"kernel": module.func.attrs["sym_name"], "grid": grid, "block": [threads, 1, 1],
                      "cluster": cluster, "smem_bytes": got[8], "pdl": True, **cooperative}
    # the layout holds every shared tile the budget check counted (those alive together share no bytes)
    counted = [b * s for _, b, s in shared_buffers(launch, module.env)]
    # (plus register tiles the plan keeps in shared memory: attention.tk's two [64, 128] f32
    # products take 64 KiB)
    assert max(counted, default=0) <= got[8] <= sum(counted) + 2**17
    assert f"// Generated by tkc from {module.func.loc.file}" in source


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_one_self_contained_kernel_with_located_ops(generated, path):
    module, source = generated[path]
    name = module.func.attrs["sym_name"]
    assert len(re.findall(r'extern "C" __global__', source)) == 1
    assert re.search(rf'extern "C" __global__ void (__cluster_dims__\([^)]*\) )?__launch_bounds__\(\d+(, \d+)?\) {name}\(',
                     source)
    assert set(re.findall(r"#include <([^>]+)>", source)) <= TOOLKIT_HEADERS
    for const in {**module.func.attrs["dims"], **module.func.attrs["consts"]}:
        assert re.search(rf"^constexpr int {const}_* = \d+;$", source, re.M)
    for op in module.walk():
        if op.name in ("tile.func", "tile.launch", "tile.alloc"):
            continue
        assert f"({op.loc.file}:{op.loc.line}:{op.loc.col})" in source, op.name
    assert cuda.emit(module) == source  # deterministic


# ---- the plan: placement, pipelining, barriers ----------------------------------------------

def _path(stem: str) -> str:
    return os.path.join(ROOT, "examples", f"{stem}.tk")


def test_miss_places_tiles_and_pipelines_as_intended(generated):
    module, source = generated[_path("miss")]
    launch = module.func.body.ops[0]
    plan = make_plan(module, launch, 128)
    allocs = {op.result.name: op.result for op in launch.walk() if op.name == "tile.alloc"}
    assert plan.where(allocs["S"]) == "regs" and plan.where(allocs["0"]) == "regs"
    assert plan.where(allocs["2"]) == "mma" and plan.where(allocs["Sh"]) == "shared"
    assert [g.kind for g in plan.gemms.values()] == ["mma"]
    # A's staging tile is dead once B's is in use: they share bytes
    assert plan.smem[id(allocs["0_smem"])].offset == plan.smem[id(allocs["1"])].offset == 0
    assert plan.total_smem == 2 * 64 * 136 * 2 + 16 * 72 * 2
    # A's shards: every thread reads back only what its own cp.async wrote, so no barrier in the
    # loop; B's tile is read by the tensor cores of every warp: a barrier after the wait and one
    # before the refill. All `stages` loads are in flight while an iteration waits.
    first, second = source.split("// for j in")
    loop_a, after_a = first.split("// for s in")[1].split("tk_cp_async_wait<0>();")
    assert "tk_cp_async<16>" in loop_a and "tk_cp_async_wait<2>()" in loop_a and "__syncthreads" not in loop_a
    between, hoist = after_a.split("// the A fragments of")
    prologue, body = second.split("for (int j = 0; j < 8; ++j)")
    # one barrier between the loops: Sh is written, then read by every warp (and B's staging tile
    # reuses the bytes of A's)
    assert between.count("__syncthreads();") + hoist.count("__syncthreads();") + prologue.count("__syncthreads();") == 1
    assert body.count("__syncthreads();") == 2 and "tk_cp_async_wait<1>();  // this thread's" in body
    # Sh is not written in the N loop: its A fragments are loaded once, before it
    assert "tk_ldmatrix_x4(fa_Sh[kk / 16][fi]" in hoist and "tk_ldmatrix_x4(fa[" not in body
    assert "tk_ldmatrix_x4_trans" in second and "tk_mma_16816<__half>" in second


def test_barrier_between_cross_thread_ops(generated):
    _, source = generated[os.path.join(ROOT, "tests", "programs", "elementwise.tk")]
    before_reduce, reduce = source.split("// tile.reduce")
    # the reduced tile r lives in registers, each row's 8 chunks in 8 lanes of one warp: the
    # reduction reads them where they are (xor shuffles, no barrier before it) ...
    assert not before_reduce.rstrip().endswith("__syncthreads();")
    assert "in registers: 8 chunk(s) of 8 per output" in reduce and "__shfl_xor_sync" in reduce
    # ... and writes its result to shared memory, which the store to S reads with other threads
    after = reduce.split("// tile.copy", 1)[0]
    assert after.rstrip().endswith("__syncthreads();")


def test_one_trip_loop_has_no_barrier_against_a_previous_trip():
    """matmul_w8a8's loop over groups: at G = NG it runs once, and its body's writes of the group
    sums q need no barrier against a previous trip's reads of q (codegen/cuda_loops.py
    `op_for`'s one-trip case); at G = 2 NG (two trips) the barrier stays, and so does the one after the sums."""
    path = os.path.join(ROOT, "examples", "matmul_w8a8.tk")

    def loop_barriers(source: str) -> tuple[int, int]:
        body = source.split("// for g in", 1)[1].split("    __syncthreads();\n    // tile.reduce", 1)[0]
        before, after = body.split("// tile.dot_reduce", 1)
        return before.count("__syncthreads();"), after.count("__syncthreads();")

    one, two = (cuda.emit(driver.optimize(driver.frontend(path, {"D": 64, "G": g, "NG": 64}), "cuda")) for g in (64, 128))
    assert "for (int g = 0; g < 1; ++g)" in one and "for (int g = 0; g < 2; ++g)" in two
    assert loop_barriers(one) == (0, 1)
    assert loop_barriers(two) == (1, 1)


@pytest.mark.parametrize("grid, threads, hint", [
    ([192], 128, 2), ([264], 256, 2), ([265], 256, None), ([1024], 128, None), ([32], 512, 1), ([1, 1], 1024, 1),
    ([132, 2], 64, 2), (["M / 64"], 128, None)])
def test_min_blocks_hint(grid, threads, hint):
    """`__launch_bounds__`'s blocks per SM: ceil(blocks / 132) for a static grid that fits on the
    GPU at once with a register cap of at least 128 (or one block per SM); larger or dynamic grids
    get none."""
    assert cuda.min_blocks_hint(grid, threads) == hint


def test_a_grid_that_fits_at_once_gets_the_register_hint_and_its_short_loops_unrolled():
    """matmul.tk at 768 x 2048: 192 blocks of 128 threads, two per SM; `__launch_bounds__(128, 2)`
    lets ptxas issue every load before the arithmetic (without it: 40 registers and the loads a
    few at a time), and the barrier-free loop of K / BK = 4 trips is unrolled whole. At 4096 x 4096
    (1024 blocks) neither: plain `__launch_bounds__(128)` and two trips per iteration. A `sync grid`
    kernel (llama_layer) and a gemm kernel (sgemm, whose register tiles size its occupancy) never
    get the hint."""
    def emit(name: str, **dims) -> str:
        return cuda.emit(driver.optimize(driver.frontend(os.path.join(ROOT, "examples", f"{name}.tk"), dims), "cuda"))

    small, large = emit("matmul", D=768, K=2048), emit("matmul", D=4096, K=4096)
    assert "__launch_bounds__(128, 2) matmul(" in small and "__launch_bounds__(128) matmul(" in large
    loop = re.compile(r"#pragma unroll(?P<n> 2)?[^\n]*\n\s*for \(int k = 0; k < 4; \+\+k\)")
    assert loop.search(small).group("n") is None
    loop8 = re.compile(r"#pragma unroll(?P<n> 2)?[^\n]*\n\s*for \(int k = 0; k < 8; \+\+k\)")
    assert loop8.search(large).group("n") == " 2"
    assert re.search(r"__launch_bounds__\(\d+\) llama_layer\(", emit("llama_layer"))
    sgemm = emit("sgemm", M=128, N=128, K=128)
    assert re.search(r"__launch_bounds__\(\d+\) sgemm\(", sgemm) and "Launch: grid (1, 1, 1)" in sgemm
    # a short exact loop with a barrier in a hinted kernel (matmul_w8a8's two trips over groups,
    # 32 blocks) stays a plain loop
    w8 = emit("matmul_w8a8", D=64, G=128, NG=64)
    assert "__launch_bounds__(256, 1) matmul_w8a8(" in w8
    assert re.search(r"\)\n\s*for \(int g = 0; g < 2; \+\+g\)", w8)


def test_reshape_reads_without_a_barrier_only_where_each_thread_reads_its_own_elements():
    """A reshape that only drops or adds unit dims, at one chunk width, reads in each thread the
    elements the source's own chunk map gave that thread (matmul_w8a8's [BD, 1, 1] -> [BD, 1] after
    a copy by the same threads: no barrier between them). One that changes the chunk width
    (qkv_rope's [2, 1] -> [1, 2]: one thread reads what two wrote) keeps its barrier."""
    def emit(name: str) -> str:
        return cuda.emit(driver.optimize(driver.frontend(os.path.join(ROOT, "examples", f"{name}.tk")), "cuda"))

    w8 = emit("matmul_w8a8")
    last_copy = w8.rsplit("// tile.reshape(", 1)[0].rsplit("// tile.copy(", 1)[1]
    assert "__syncthreads" not in last_copy
    qk = emit("qkv_rope")
    assert re.search(r"__syncthreads\(\);\s*// tile\.reshape\(", qk)


def test_cluster_examples_use_cluster_barriers_and_dsmem(generated):
    _, pull = generated[_path("cluster_reduce_dsmem_pull")]
    _, dsmem = generated[_path("cluster_reduce_dsmem")]
    _, hbm = generated[_path("cluster_reduce_hbm")]
    assert "__cluster_dims__(2, 1, 1)" in dsmem and "__cluster_dims__(2, 1, 1)" in hbm
    assert pull.count("cg::this_cluster().sync();") == 2 and "map_shared_rank(S, (r + 1) % 2)" in pull
    # the pushed form: the mbarrier set up, a barrier after the loads (the peer must have started
    # before its shared memory is written), the remote st.async stores, a wait for the peer's
    # bytes on the mbarrier (codegen/cuda_signal.py), the local reads of P
    assert "cg::this_cluster().sync();" not in dsmem and "tk_mapa(tk_smem_addr(P), (r + 1) % 2)" in dsmem
    assert dsmem.count("tk_cluster_sync_relaxed();") == 1 and "__restrict__" not in dsmem.split("extern \"C\"")[1]
    body = dsmem.split("extern \"C\"")[1]
    init, first = body.index("if (tid == 0) tk_mbar_arrive_expect(&tk_recv, 16384);"), body.index("tk_cluster_sync_relaxed();")
    second = body.index("tk_mbar_wait(&tk_recv);")
    assert init < body.rindex("tk_load<16>(gv, &X[") < first < body.index("tk_st_async<16>(peer + (col) * 2, pv, peer_recv);")
    assert body.rindex("tk_st_async") < second < body.index("&P[") and body.count("tk_st_async") == 1
    assert "map_shared_rank" not in hbm and "const int r = b % 2;" in hbm


def test_plan_helpers():
    assert warp_split(1, 8, 4) == (1, 4, 1, 2)
    assert warp_split(4, 8, 4) == (2, 2, 2, 4)
    assert warp_split(1, 3, 4)[2:] == (1, 1)
    assert [chunk_width(s) for s in [(16, 64), (16, 1), (3, 12), (5,)]] == [8, 1, 4, 1]
    assert known_multiple(exprs.parse("m * 16 + s * 64")) == 16
    assert known_multiple(exprs.parse("b - r + (r + 1) % 2")) == 1
    assert known_multiple(exprs.parse("0")) == 0
    st_ = SyncState()
    st_.add([Access(1, True, chunk_map((16, 64)), 0, 2048)])
    assert not st_.conflicts([Access(1, False, chunk_map((16, 64)), 0, 2048)])  # same thread map
    assert st_.conflicts([Access(1, False, OTHER, 0, 2048)])
    assert not st_.conflicts([Access(2, False, OTHER, 2048, 4096)])  # other bytes
    assert st_.conflicts([Access(3, False, chunk_map((16, 64)), 1024, 4096)])  # other buffer on the same bytes
    st_.clear()
    st_.add([Access(1, False, OTHER, 0, 2048)])
    assert not st_.conflicts([Access(1, False, OTHER, 0, 2048)])  # reads never conflict


# ---- located errors -------------------------------------------------------------------------

def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _error(path: str, **overrides: int):
    with pytest.raises(TkError) as info:
        generate(path, **overrides)
    (d,) = info.value.diagnostics
    return d


REDUCE_ROWS = """\
kernel rowmax<BM=16>(X: f32[M, N]) -> (Y: f32[M, 1])
    where M = 64, N = 4096
{
    grid (cdiv(M, BM)) as (m) threads(THREADS)
    x = X[m*BM : +BM, :]
    Y[m*BM : +BM, :1] = amax(x, 1)
}
"""


def test_too_many_threads_is_a_located_error(tmp_path):
    path = _write(tmp_path, "threads.tk", REDUCE_ROWS.replace("THREADS", "2048"))
    d = _error(path)  # the frontend may reject it first (at `threads`); the backend checks it too
    assert (d.loc.file, d.loc.line) == (path, 4) and d.loc.col in (5, 39) and "2048" in d.message


def test_register_tiles_over_the_smem_budget_are_a_located_error(tmp_path):
    path = _write(tmp_path, "rowmax.tk", REDUCE_ROWS.replace("THREADS", "128"))
    generate(path, BM=8)  # 128 KiB fits
    d = _error(path)  # the [16, 4096] f32 tile the reduction reads: 256 KiB of shared memory
    assert (d.loc.line, d.loc.col) == (4, 5)
    assert d.message.startswith("kernel `rowmax` needs 262208 bytes of shared memory per block on the CUDA backend")
    assert d.notes[0] == "`%x` frag<f32[16, 4096]>: 262144 bytes (row pitch 4096, 1 stage)"
    assert any(n.startswith("the CUDA backend keeps register tiles `%x`") for n in d.notes)
    assert d.notes[-1].startswith("fix:")


def test_grid_limit_is_a_located_error(tmp_path):
    text = REDUCE_ROWS.replace("grid (cdiv(M, BM)) as (m) threads(THREADS)", "grid (1, cdiv(M, BM)) as (z, m)")
    d = _error(_write(tmp_path, "grid.tk", text), M=70000 * 16, N=64)
    assert (d.loc.line, d.loc.col) == (4, 5) and "exceeds CUDA's limit of 65535" in d.message


class _FutureOp(Op):
    name = "tile.future"


def test_an_op_the_backend_does_not_know_is_a_located_error():
    module = driver.optimize(driver.frontend(_path("miss_v3")), "tilelang")
    launch = module.func.body.ops[0]
    anchor = launch.body.ops[3]
    launch.body.ops.insert(4, _FutureOp(loc=anchor.loc))
    with pytest.raises(TkError) as info:
        cuda.emit(module)
    (d,) = info.value.diagnostics
    assert d.loc == anchor.loc and d.message == "the CUDA backend cannot express `tile.future` here"


# ---- hypothesis: MiSS schedules and shapes --------------------------------------------------

@st.composite
def miss_problems(draw, name: str):
    r = draw(st.sampled_from([16, 32, 64]))
    k = r * draw(st.integers(1, 64))
    if name == "miss" and draw(st.booleans()):
        k = draw(st.integers(1, 4096))  # zero-padded last shard; odd K takes the scalar path
    dims = {"M": draw(st.integers(1, 4096)), "N": draw(st.integers(1, 4096)), "K": k, "R": r}
    consts = {"BM": draw(st.sampled_from([16, 32, 64, 128])), "BN": draw(st.sampled_from([32, 64, 128, 256])),
              "stages": draw(st.integers(1, 4)), "threads": draw(st.sampled_from([64, 128, 256]))}
    return {**dims, **consts}


@needs_nvcc
@pytest.mark.parametrize("name", ["miss", "miss_v3"])
@settings(max_examples=examples(2, 6), deadline=None)
@given(data=st.data())
def test_miss_schedules_compile(tmp_path_factory, name, data):
    overrides = data.draw(miss_problems(name))
    note(f"{name}: {overrides}")
    try:
        _, source = generate(_path(name), **overrides)
    except TkError as exc:  # a schedule over the shared-memory budget is a located user error
        assert all(d.loc.line > 0 for d in exc.diagnostics)
        assert "shared memory" in str(exc)
        return
    folder = str(tmp_path_factory.mktemp("hyp"))
    proc = nvcc_all({name: source}, folder)[name]
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]


# ---- runtime on the CPU: cached source and cubin --------------------------------------------

@needs_nvcc
def test_runtime_compiles_the_cubin_once(tmp_path):
    cache = Cache(str(tmp_path))
    art = driver.compile_file(_path("miss"), "cuda", {"M": 256}, cache)
    assert art.target == "cuda" and not art.cached
    again = driver.compile_file(_path("miss"), "cuda", {"M": 256}, cache)
    assert again.cached and again.source == art.source and again.entry == art.entry
    launch = cuda_runtime.build(art, cache)
    assert (launch.name, launch.grid, launch.block) == ("miss", (16, 1, 1), (128, 1, 1))
    cubin = cuda_runtime.compile_cubin(launch.source_path, "sm_90a")
    assert os.path.dirname(cubin) == art.entry and os.path.getsize(cubin) > 0
    stamp = os.stat(cubin).st_mtime_ns
    assert cuda_runtime.compile_cubin(launch.source_path, "sm_90a") == cubin
    assert os.stat(cubin).st_mtime_ns == stamp
    with open(os.path.join(art.entry, "meta.json"), encoding="utf-8") as f:
        assert json.load(f)["target"] == "cuda"

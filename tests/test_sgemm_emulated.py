"""examples/sgemm.tk's CUDA (codegen/cuda_gemm.py, the warp-tiled SIMT gemm) run on the CPU: the
generated kernel, with its prelude replaced by tests/cuda_emu/shim.h (threads as std::threads,
__syncthreads as a std::barrier, cp.async landing only at its wait), compiled by g++ and compared
with numpy in float64, at tile edges and for several tilings. The GPU runs the same code in
tests/gpu/test_gpu_quick.py; this catches index, guard and pipelining mistakes without one.
Skipped without a g++ that has C++20's <barrier>.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from codegen import cuda
from tkc import driver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM = os.path.join(ROOT, "tests", "cuda_emu")
GXX = shutil.which("g++")

MAIN = r"""
#include <cmath>
int main(int, char** argv) {
    const long M_ = %(m)d, N_ = %(n)d, K_ = %(k)d;
    std::vector<float> a(M_ * K_), b(K_ * N_), c(M_ * N_, NAN);
    FILE* f = fopen(argv[1], "rb");
    if (fread(a.data(), 4, a.size(), f) != a.size() || fread(b.data(), 4, b.size(), f) != b.size()) return 3;
    fclose(f);
    for (int by = 0; by < %(gy)d; ++by)
        for (int bx = 0; bx < %(gx)d; ++bx) {
            std::memset(smem, 0xff, sizeof(smem));  // NaN: shared memory starts as garbage
            std::barrier<> bar(%(threads)d);
            g_bar = &bar;
            std::vector<std::thread> ts;
            for (int t = 0; t < %(threads)d; ++t)
                ts.emplace_back([&, t] {
                    threadIdx.x = t, blockIdx.x = bx, blockIdx.y = by;
                    g_groups.clear(), g_open.clear();
                    sgemm(a.data(), b.data(), c.data(), 0);  // tk_pdl: not a programmatic launch
                });
            for (auto& t : ts) t.join();
        }
    f = fopen(argv[2], "wb");
    fwrite(c.data(), 4, c.size(), f);
    fclose(f);
}
"""


@pytest.fixture(scope="module")
def gxx(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ is not installed")
    probe = tmp_path_factory.mktemp("probe") / "p.cpp"
    probe.write_text("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n")
    r = subprocess.run([GXX, "-std=c++20", "-pthread", str(probe), "-o", str(probe)[:-4]], capture_output=True)
    if r.returncode:
        pytest.skip("g++ has no C++20 <barrier>")
    return GXX


CASES = [  # (schedule constants, M, N, K)
    ({}, 256, 256, 64),  # whole tiles, every load through cp.async
    ({}, 200, 130, 40),  # partial tiles in M and N, K a multiple of 8 but not of BK: guarded cp.async
    ({}, 129, 257, 37),  # K not a multiple of 4: synchronous guarded loads
    ({}, 1, 1, 1),
    ({"TM": 4, "TN": 4, "WNITER": 2}, 300, 140, 50),  # WMITER = 2
    ({"BN": 256, "threads": 256}, 150, 300, 33),
    ({"BK": 8, "stages": 3}, 140, 140, 100),
    ({"stages": 1}, 140, 140, 40),
    ({"stages": 4}, 140, 140, 40),
    ({"BM": 32, "BN": 32, "BK": 8, "TM": 1, "TN": 8, "WM": 16, "WN": 16, "WNITER": 1}, 65, 65, 17),
    ({"BM": 32, "BN": 32, "BK": 8, "TM": 2, "TN": 2, "WM": 16, "WN": 16, "WNITER": 1}, 65, 71, 23),
    ({"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 1, "WM": 16, "WN": 16, "WNITER": 2}, 64, 64, 16),
    ({"BN": 256, "BK": 32, "WNITER": 2, "threads": 256}, 200, 260, 70),  # the tuned tiling: A swizzled
    ({"BK": 64}, 140, 130, 100),  # 4-row runs under TM = 8: A not swizzled
]


@pytest.mark.parametrize("consts, m, n, k", CASES, ids=[f"{c or 'default'}-{m}x{n}x{k}" for c, m, n, k in CASES])
def test_generated_sgemm_runs_correctly_on_the_cpu_emulation(gxx, tmp_path, consts, m, n, k):
    module = driver.optimize(driver.frontend(os.path.join(ROOT, "examples", "sgemm.tk"),
                                             {**consts, "M": m, "N": n, "K": k}), "tilelang")
    source = cuda.emit(module)
    config = cuda.launch_config(source)
    kernel = source.split("// ---- kernel ----")[1].split("\n", 1)[1].replace('extern "C" ', "")
    code = '#include "shim.h"\n' + kernel + MAIN % {"m": m, "n": n, "k": k, "gx": config["grid"][0],
                                                   "gy": config["grid"][1], "threads": config["block"][0]}
    (tmp_path / "k.cpp").write_text(code)
    r = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", f"-I{SHIM}", str(tmp_path / "k.cpp"), "-o",
                        str(tmp_path / "k")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    (tmp_path / "in.bin").write_bytes(a.tobytes() + b.tobytes())
    r = subprocess.run([str(tmp_path / "k"), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    c = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(m, n)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isfinite(c).all(), "elements left unwritten (NaN)"
    assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-5

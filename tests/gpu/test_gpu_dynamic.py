"""Dynamic dims on the GPU (issue 13): examples/miss.tk with `dynamic=("M",)` through targets
`tilelang` and `cuda` (M an int kernel argument, the grid sized at launch) serves every M from one
compile, and matches torch in float64 from the same fp16
inputs (tolerance from the output's f16 rounding and the f16 shard sum), at M on and off the
tile edges, including 1 and a partial last tile; and it equals the kernel specialized at that M.
Run on the device machine: `python3 -m pytest --hypothesis-profile=gpu tests/gpu`.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

import tkc

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MISS = os.path.join(ROOT, "examples", "miss.tk")
K, N, R = 1000, 256, 64  # K not a multiple of R: PEFT's zero padding of the last shard


def _ref(a, b):
    a64 = F.pad(a.double(), (0, (-a.shape[1]) % R))
    return torch.sum(a64.reshape(a.shape[0], -1, R), dim=-2) @ b.double()


@pytest.mark.parametrize("target", ["tilelang", "cuda"])
def test_one_compile_serves_every_m(tmp_path, target):
    kernel = tkc.compile(MISS, target=target, cache_dir=str(tmp_path), dynamic=("M",))
    static = tkc.compile(MISS, target=target, cache_dir=str(tmp_path))
    g = torch.Generator(device="cuda").manual_seed(0)
    b = torch.randn(R, N, device="cuda", generator=g).half()
    for m in (1, 15, 16, 17, 333, 4099):
        a = (torch.randn(m, K, device="cuda", generator=g) * 3 + 0.5).half()
        c = kernel(a, b)
        ref = _ref(a, b)
        assert c.shape == (m, N) and torch.isfinite(c).all()
        err = float((c.double() - ref).abs().max())
        assert err <= 4 * 2.0 ** -10 * float(ref.abs().max()) + 1e-3, (m, err)
        if m in (17, 333):
            assert torch.equal(c, static(a, b)), m
    assert kernel.specializations == 1 and static.specializations == 2


def test_cuda_grid_past_the_y_limit_is_a_user_error(tmp_path):
    """miss_split's grid is (NS, cdiv(M, BM)): M along y. At an M whose grid passes CUDA's 65535
    blocks along y the call is a located TkError, not a launch failure."""
    from dsl.diagnostics import TkError

    kernel = tkc.compile(os.path.join(ROOT, "examples", "miss_split.tk"), target="cuda", cache_dir=str(tmp_path))
    b = torch.randn(R, N, device="cuda").half()
    a = torch.randn(16 * 65535 + 1, 64, device="cuda").half()
    with pytest.raises(TkError, match="over CUDA's limit of 65535"):
        kernel(a, b)


def test_outputs_of_l2_size_or_more_take_the_evict_first_stores(tmp_path):
    """miss_split with STAGE_C = 1 stages C through rotating store tiles; from C's size of
    STREAM_BYTES on (M >= 6400 at N = 4096 f16) the kernel takes the branch whose TMA stores are
    marked L2 evict-first (passes/smem_tilelang.py `streaming_store`). Both branches, one compile,
    against float64 torch, at M just below the switch, at it, and past it with a partial tile."""
    from codegen import tilelang as tilelang_gpu
    from passes.smem_tilelang import STREAM_BYTES
    from tkc import driver

    n, path = 4096, os.path.join(ROOT, "examples", "miss_split.tk")
    consts = {"BM": 64, "BN": 128, "NS": 1, "STAGE_C": 1, "U": 4}
    source = tilelang_gpu.emit(driver.optimize(driver.frontend(path, {"K": K, "N": n, "R": R, **consts},
                                                               dynamic=("M",)), "tilelang"))
    assert 'if T.Cast("int64", M) >= 6400:' in source and STREAM_BYTES // (n * 2) == 6400
    kernel = tkc.compile(path, target="tilelang", cache_dir=str(tmp_path), **consts)
    g = torch.Generator(device="cuda").manual_seed(1)
    b = torch.randn(R, n, device="cuda", generator=g).half()
    for m in (6399, 6400, 6437):
        a = (torch.randn(m, K, device="cuda", generator=g) * 3 - 0.5).half()
        c = kernel(a, b)
        ref = _ref(a, b)
        err = float((c.double() - ref).abs().max())
        assert c.shape == (m, n) and err <= 4 * 2.0 ** -10 * float(ref.abs().max()) + 1e-3, (m, err)
    assert kernel.specializations == 1

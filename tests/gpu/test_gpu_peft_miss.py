"""tkc.integrations.peft on the GPU: a PEFT MiSS layer (balance and mini, f16 and bf16, K = 1000
not a multiple of r = 64) through targets `tilelang` and `cuda`, against PEFT's own forward and a
float64 computation of the MiSS formula (tests/test_peft_miss.py does the same on the CPU with the
interpreter). The device image has peft; each (target, dtype) compiles once (mini expands its
block to the balance shape). Run on the device machine:
`python3 -m pytest -q -m gpu tests/gpu/test_gpu_peft_miss.py`.
"""

from __future__ import annotations

import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # the model is built here, nothing comes from the hub

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from tkc import oracle  # noqa: E402

peft = pytest.importorskip("peft")
from tkc.integrations import peft as tkc_peft  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier: serial TileLang builds of 10-40 s each; tests/gpu/test_gpu_quick.py covers its examples

K, N, R, MINI_R = 1000, 1024, 64, 128
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


class One(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(K, N)

    def forward(self, x):
        return self.proj(x)


def layer_model(dtype, form: str):
    torch.manual_seed(0)
    config = peft.MissConfig(r=R, mini_r=MINI_R, init_weights={"balance": True, "mini": "mini"}[form],
                             target_modules=["proj"])
    model = peft.get_peft_model(One(), config).to("cuda", dtype).eval()
    layer = model.base_model.model.proj
    block = layer.miss_block["default"]
    with torch.no_grad():  # PEFT starts from zeros, which no comparison could tell from a wrong kernel
        block.copy_(torch.randn(block.shape) / math.sqrt(K))
    return model, layer


@pytest.mark.parametrize("lead", [(2, 33), (1,)], ids=["M66", "M1"])  # M1: the whole layer in one kernel on tilelang
@pytest.mark.parametrize("form", ["balance", "mini"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("target", ["tilelang", "cuda"])
def test_gpu_layer_matches_peft_and_float64(target, dtype, form, lead):
    dt = DTYPES[dtype]
    model, layer = layer_model(dt, form)
    x = torch.randn(*lead, K, device="cuda").to(dt)
    with torch.inference_mode():
        want = model(x)
    tkc_peft.enable(model, target=target)
    try:
        with torch.inference_mode():
            got = model(x)
    finally:
        tkc_peft.disable(model)
    base, block = layer.base_layer, layer.miss_block["default"].double()
    if form == "mini":
        block = block.repeat(1, N // MINI_R)
    shards = F.pad(x.double(), (0, (-K) % R)).reshape(*lead, -1, R).sum(-2)
    ref = x.double() @ base.weight.double().T + base.bias.double() + shards @ block
    u, u32 = oracle.UNIT_ROUNDOFF[dtype], oracle.UNIT_ROUNDOFF["f32"]
    tol = 2 * ((1 + oracle.C_MID) * u + oracle.C_ACC * (K + R) * u32 + oracle.C_FN * u32)
    assert got.dtype == dt and got.shape == (*lead, N) and torch.isfinite(got).all()
    assert oracle.rel_error(want, ref) <= tol, "PEFT itself is outside the tolerance"
    assert oracle.rel_error(got, ref) <= tol
    assert oracle.rel_error(got, want) <= tol

"""tkc.integrations.peft against PEFT's own MiSS forward and torch in float64 (issue 13).

A tiny two-layer model (K = 40 and 48 into layers of 48 and 24 outputs, r = 16, so the first
layer's K is not a multiple of r and gets PEFT's zero padding) is wrapped with a real PEFT MiSS
adapter, built locally (nothing comes from the Hugging Face hub: HF_HUB_OFFLINE=1), in the
balance and mini forms, f16 and bf16. PEFT initializes `miss_block` to zeros, which would make
the adapter vanish and the comparisons unable to fail, so the tests fill it with random values
of the size of the base output's. The tkc path must run (a spy counts its calls) and match
PEFT's output and a float64 computation of the MiSS formula within a tolerance from the dtype
and the reduction lengths; calls that are not eligible (training, merged or disabled adapters,
several active adapters, f32 blocks) must run PEFT's own forward, bit for bit. The kernels run
in the reference interpreter (target `interp`), and one f16 layer on TileLang's C target.
The whole file takes about 15 s on two cores (most of it `import peft`).
"""

from __future__ import annotations

import math
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before peft imports huggingface_hub: the tests build models locally

import peft  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from tkc import oracle  # noqa: E402
from tkc.integrations import peft as tkc_peft  # noqa: E402

R, MINI_R = 16, 8
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


class Tiny(nn.Module):
    """x [..., 40] -> up (48) -> relu -> down (24)."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(40, 48)
        self.down = nn.Linear(48, 24)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def miss_model(dtype, form: str = "balance", seed: int = 0, module=Tiny):
    """`module` wrapped by peft.get_peft_model with a MiSS adapter on every Linear, cast to
    `dtype`, in eval mode, with random `miss_block`s scaled so that the adapter's term is about
    as large as the base layer's output."""
    torch.manual_seed(seed)
    init = {"balance": True, "mini": "mini"}[form]
    config = peft.MissConfig(r=R, mini_r=MINI_R, init_weights=init, target_modules=["up", "down"])
    model = peft.get_peft_model(module(), config).to(dtype).eval()
    for layer in miss_layers(model).values():
        block = layer.miss_block["default"]
        k = layer.in_features
        with torch.no_grad():
            block.copy_(torch.randn(block.shape) / math.sqrt(k))
    return model


def miss_layers(model) -> dict:
    return {n: m for n, m in model.named_modules() if isinstance(m, peft.tuners.miss.layer.MissLinear)}


def reference64(model, x):
    """The model's output in float64 from the same (rounded) weights and input: MiSS formula (1)
    of tkc/integrations/peft.py written out here, with the mini block repeated along out (and no
    bias where a base Linear has none)."""
    y = x.double()
    for name in ("up", "down"):
        layer = miss_layers(model)[f"base_model.model.{name}"]
        w = layer.base_layer.weight.double()
        b = layer.base_layer.bias.double() if layer.base_layer.bias is not None else 0.0
        block = layer.miss_block["default"].double()
        if layer.miss_fn == "mini":
            block = block.repeat(1, layer.out_features // block.shape[1])
        k = y.shape[-1]
        shards = F.pad(y, (0, (-k) % R)).reshape(*y.shape[:-1], -1, R).sum(-2)
        y = y @ w.T + b + shards @ block
        if name == "up":
            y = torch.relu(y)
    return y


def tolerance(dtype) -> float:
    """Relative (to max |ref|) error allowed for the two-layer model: per layer the output's and
    the shard sum's roundings (tkc/oracle.py's constants) and f32 accumulation over K + r; twice
    that for the first layer's error carried through the second. (Seen: 1 to 2.2 units of
    roundoff, PEFT's own forward included; the budget is about 10.)"""
    u = oracle.UNIT_ROUNDOFF[{torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]]
    u32 = oracle.UNIT_ROUNDOFF["f32"]
    per_layer = (1 + oracle.C_MID) * u + oracle.C_ACC * (48 + R) * u32 + oracle.C_FN * u32
    return 2 * per_layer


def _counting(monkeypatch, name: str, arg: int) -> list:
    """Replaces tkc_peft.`name` with a wrapper that records the shape of its argument `arg`."""
    calls = []
    real = getattr(tkc_peft, name)

    def counted(*args, **kwargs):
        calls.append(args[arg].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(tkc_peft, name, counted)
    return calls


@pytest.fixture
def spy(monkeypatch):
    """Counts the calls that ran on the tkc kernel (tkc_peft.add_miss; records x's shape)."""
    return _counting(monkeypatch, "add_miss", 1)


@pytest.fixture
def spy_linear(monkeypatch):
    """Counts the calls that ran the whole layer on one tkc kernel (tkc_peft.miss_linear)."""
    return _counting(monkeypatch, "miss_linear", 0)


def run(model, x):
    with torch.inference_mode():
        return model(x)


@pytest.mark.parametrize("form", ["balance", "mini"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_matches_peft_and_float64(spy, form, dtype):
    dt = DTYPES[dtype]
    model = miss_model(dt, form)
    x = torch.randn(2, 3, 40).to(dt)  # (batch, seq, features): M = 6
    want = run(model, x)
    names = tkc_peft.enable(model, target="interp")
    assert names == ["base_model.model.up", "base_model.model.down"]
    got = run(model, x)
    assert len(spy) == 2 and spy[0] == (2, 3, 40) and spy[1] == (2, 3, 48)
    assert got.dtype == dt and got.shape == (2, 3, 24)
    ref = reference64(model, x)
    tol = tolerance(dt)
    assert oracle.rel_error(want, ref) <= tol, "PEFT itself is outside the tolerance: the test's formula is off"
    assert oracle.rel_error(got, ref) <= tol
    assert oracle.rel_error(got, want) <= tol
    # the adapter matters: without it the output is far off (the comparisons can fail)
    with model.disable_adapter():
        assert oracle.rel_error(run(model, x), ref) > 0.5
    assert tkc_peft.disable(model) == names
    assert all("forward" not in m.__dict__ for m in miss_layers(model).values())
    assert torch.equal(run(model, x), want)
    assert len(spy) == 2


def test_bf16_layers_on_tilelang_cpu_are_refused_at_enable():
    """TileLang's C target has no bf16 arithmetic: `enable` says so (and leaves the model as it
    was) instead of every later forward failing to compile."""
    model = miss_model(torch.bfloat16, "balance")
    with pytest.raises(ValueError, match=r"target `tilelang-cpu` has no bf16 arithmetic, and 2 MissLinear layers "
                                         r"\(`base_model.model.up`, \.\.\.\) are bf16: pass target=\"interp\""):
        tkc_peft.enable(model, target="tilelang-cpu")
    assert all("_tkc_miss" not in m.__dict__ for m in miss_layers(model).values())


class TinyNoBias(Tiny):
    """Tiny with a base Linear without bias (the fused kernel then adds zeros)."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(40, 48, bias=False)


@pytest.mark.parametrize("form", ["balance", "mini"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_one_token_runs_the_whole_layer_in_one_kernel(spy, spy_linear, form, dtype):
    """At M = 1 both layers run examples/peft_miss_linear.tk (base GEMV + bias + adapter): the
    result must match PEFT's forward and float64; a missing bias or adapter term, or a GEMV that
    drops a part of K (40 and 48 are not multiples of BK), lands far outside the tolerance."""
    dt = DTYPES[dtype]
    model = miss_model(dt, form)
    x = torch.randn(1, 1, 40).to(dt)  # (batch, seq, features): one token
    want = run(model, x)
    tkc_peft.enable(model, target="interp")
    got = run(model, x)
    assert len(spy_linear) == 2 and spy_linear[0] == (1, 1, 40) and spy_linear[1] == (1, 1, 48) and not spy
    assert got.dtype == dt and got.shape == (1, 1, 24)
    ref = reference64(model, x)
    assert oracle.rel_error(want, ref) <= tolerance(dt), "PEFT itself is outside the tolerance"
    assert oracle.rel_error(got, ref) <= tolerance(dt)
    assert oracle.rel_error(got, want) <= tolerance(dt)
    with model.disable_adapter():  # the adapter counts (so does the bias: nn.Linear's init, 0.1-0.2)
        assert oracle.rel_error(run(model, x), ref) > 0.5
    run(model, x[0])  # a 2-D input [1, 40]: one token too
    assert len(spy_linear) == 4 and not spy
    run(model, torch.randn(2, 40).to(dt))  # two tokens: torch's base product, then the adapter kernel
    assert len(spy_linear) == 4 and len(spy) == 2
    tkc_peft.disable(model)


def test_one_token_without_a_bias(spy_linear):
    model = miss_model(torch.float16, module=TinyNoBias)
    x = torch.randn(1, 40).half()
    want = run(model, x)
    tkc_peft.enable(model, target="interp")
    got = run(model, x)
    assert len(spy_linear) == 2
    layer = miss_layers(model)["base_model.model.up"]
    assert layer._tkc_miss.zero_bias is not None and not layer._tkc_miss.zero_bias.any()
    assert oracle.rel_error(got, want) <= tolerance(torch.float16)
    assert oracle.rel_error(got, reference64(model, x)) <= tolerance(torch.float16)
    tkc_peft.disable(model)


def test_the_mini_block_is_expanded_once_and_again_after_a_change(spy):
    model = miss_model(torch.float16, "mini")
    tkc_peft.enable(model, target="interp")
    x = torch.randn(5, 40).half()  # 2-D input: M = 5
    run(model, x)
    layer = miss_layers(model)["base_model.model.up"]
    first = layer._tkc_miss.expanded[1]
    assert first.shape == (R, 48)
    run(model, x)
    assert layer._tkc_miss.expanded[1] is first
    with torch.no_grad():
        layer.miss_block["default"].mul_(-1)  # in place: PEFT's forward sees the new values
    got = run(model, x)
    tkc_peft.disable(model)
    want = run(model, x)
    assert layer.__dict__.get("_tkc_miss") is None
    assert oracle.rel_error(got, want) <= tolerance(torch.float16)
    assert len(spy) == 6


def test_tilelang_cpu_target(spy):
    """One f16 layer through TileLang's C target (one compile, a few seconds)."""

    class One(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(40, 48)

        def forward(self, x):
            return self.up(x)

    torch.manual_seed(0)
    model = peft.get_peft_model(One(), peft.MissConfig(r=R, target_modules=["up"])).half().eval()
    layer = miss_layers(model)["base_model.model.up"]
    with torch.no_grad():
        layer.miss_block["default"].copy_(torch.randn(R, 48) / math.sqrt(40))
    x = torch.randn(3, 7, 40).half()
    want = run(model, x)
    tkc_peft.enable(model, target="tilelang-cpu")
    got = run(model, x)
    assert len(spy) == 1
    assert oracle.rel_error(got, want) <= tolerance(torch.float16) / 2
    assert oracle.rel_error(want, run(model.base_model.model.up.base_layer, x)) > 0.1  # the adapter counts


def _same_as_peft(model, x, forward=run):
    """The model's output with tkc enabled equals PEFT's own, bit for bit."""
    want = forward(model, x)
    tkc_peft.enable(model, target="interp")
    try:
        got = forward(model, x)
    finally:
        tkc_peft.disable(model)
    assert torch.equal(got, want)


def test_training_mode_runs_peft_forward(spy):
    model = miss_model(torch.float16).train()
    x = torch.randn(4, 40).half()
    _same_as_peft(model, x)
    tkc_peft.enable(model, target="interp")
    model(x).float().sum().backward()  # PEFT's forward: the block gets a gradient
    assert miss_layers(model)["base_model.model.up"].miss_block["default"].grad is not None
    assert spy == []


def test_gradient_needed_runs_peft_forward(spy):
    """Eval mode, but autograd on and the block trainable: the kernel has no backward."""
    model = miss_model(torch.float16)
    _same_as_peft(model, torch.randn(4, 40).half(), forward=lambda m, x: m(x))
    assert spy == []


def test_merged_disabled_and_several_adapters_run_peft_forward(spy):
    x = torch.randn(4, 40).half()
    model = miss_model(torch.float16)
    model.add_adapter("other", peft.MissConfig(r=8, target_modules=["up", "down"]))
    model.to(torch.float16)
    model.base_model.set_adapter(["default", "other"])
    _same_as_peft(model, x)
    model.base_model.set_adapter("default")
    tkc_peft.enable(model, target="interp")
    with model.disable_adapter():
        assert torch.equal(run(model, x), run(model.base_model.model, x))
    assert spy == []
    tkc_peft.disable(model)
    model.merge_adapter()
    _same_as_peft(model, x)
    assert spy == []


def test_f32_blocks_run_peft_forward_with_a_warning(spy):
    """PEFT keeps adapter weights in f32 unless told otherwise (autocast_adapter_dtype)."""
    torch.manual_seed(0)
    model = peft.get_peft_model(Tiny().half(), peft.MissConfig(r=R, target_modules=["up", "down"])).eval()
    assert miss_layers(model)["base_model.model.up"].miss_block["default"].dtype == torch.float32
    with pytest.warns(UserWarning, match="autocast_adapter_dtype=False"):
        _same_as_peft(model, torch.randn(4, 40).half())
    assert spy == []


def test_enable_twice_changes_target_and_disable_restores_a_patched_forward():
    model = miss_model(torch.float16)
    layer = miss_layers(model)["base_model.model.up"]
    patched = layer.forward  # another library's instance-level forward (accelerate's hooks do this)
    layer.forward = patched
    tkc_peft.enable(model, target="interp")
    tkc_peft.enable(model, target="tilelang-cpu")
    assert layer._tkc_miss.target == "tilelang-cpu" and layer._tkc_miss.previous is patched
    assert tkc_peft.disable(model) == ["base_model.model.up", "base_model.model.down"]
    assert layer.__dict__["forward"] is patched
    assert tkc_peft.disable(model) == []


def test_user_errors():
    with pytest.raises(ValueError, match="no PEFT MissLinear"):
        tkc_peft.enable(Tiny(), target="interp")
    with pytest.raises(ValueError, match="the kernels are f16 and bf16"):
        tkc_peft.kernel_for(torch.float32, "interp")
    x, block = torch.zeros(3, 40, dtype=torch.float16), torch.zeros(R, 24, dtype=torch.float16)
    with pytest.raises(ValueError, match="do not fit"):
        tkc_peft.add_miss(torch.zeros(3, 25, dtype=torch.float16), x, block, "interp")
    with pytest.raises(ValueError, match="one dtype"):
        tkc_peft.add_miss(torch.zeros(3, 24), x, block, "interp")
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        tkc_peft.add_miss(torch.zeros(3, 24, dtype=torch.float16), x, block, "tilelang")
    w, b = torch.zeros(24, 40, dtype=torch.float16), torch.zeros(24, dtype=torch.float16)
    with pytest.raises(ValueError, match="do not fit"):
        tkc_peft.miss_linear(x, w[:, :39], b, block, "interp")
    with pytest.raises(ValueError, match="do not fit"):
        tkc_peft.miss_linear(x, w, b[:23], block, "interp")
    with pytest.raises(ValueError, match="one dtype"):
        tkc_peft.miss_linear(x, w.float(), b, block, "interp")
    with pytest.raises(ValueError, match="runs on CUDA tensors"):
        tkc_peft.miss_linear(x, w, b, block, "cuda")
    with pytest.raises(ValueError, match="the kernels are f16 and bf16"):
        tkc_peft.linear_kernel_for(torch.float32, "interp")
    assert tkc_peft.default_target() == ("tilelang" if torch.cuda.is_available() else "interp")


def test_missing_peft_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "peft.tuners.miss.layer", None)
    with pytest.raises(ModuleNotFoundError, match="pip install peft"):
        tkc_peft.enable(Tiny(), target="interp")

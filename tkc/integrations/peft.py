"""PEFT's MiSS adapters on a tkc kernel, for inference (issue 13).

`enable(model)` switches every PEFT `MissLinear` layer of `model` so that, in inference, its
adapter branch and the add into the base layer's output run as one tkc kernel
(examples/peft_miss.tk, or examples/peft_miss_bf16.tk); `disable(model)` switches them back.

What PEFT computes (PEFT 0.21.2, peft/tuners/miss/layer.py; MiSS, arXiv 2409.15371). A
`MissLinear` wraps a base layer y = x @ W.T + bias (W: [out, K]) and holds a `miss_block` per
adapter. With its adapters enabled and unmerged, the output for an input x [..., K] is, for one
active adapter of rank r,

    out = base(x) + sum(pad(dropout(x)).reshape(..., Kp / r, r), -2) @ B            (1)

where `pad` appends zeros to K up to Kp = r * cdiv(K, r), the sum runs over the Kp / r shards of
each row, and B: [r, out] depends on the form (`MissConfig.init_weights`):

  * balance (`True`, the default; `False` is the same form with a random init): B is
    `miss_block` [r, out] itself;
  * mini (`"mini"`): `miss_block` is [r, mini_r] and B repeats it along out,
    B[:, j] = miss_block[:, j % mini_r] (PEFT requires out % mini_r == 0);
  * bat (`"bat"`): not of form (1): `miss_block` [out / r, r, r] changes the weight, each
    r x r block W[i, j] (rows i*r.., columns j*r..) becoming W[i, j] + W[i, j] @ Bi + Bi with
    Bi = miss_block[i], and out = x @ W'.T + bias.

x is cast to the block's dtype first; with several active adapters PEFT adds each adapter's
term in turn (padding and casting x cumulatively); a merged adapter is already in W; with the
adapters disabled the output is base(x).

At one token (M = 1, decoding) on `tilelang` and the CPU targets the whole layer is one tkc
kernel instead: the base GEMV, its bias and the adapter (examples/peft_miss_linear.tk, or its
bf16 twin, with the file's constants), where torch's path takes two cuBLAS kernels and tkc's
adapter kernel behind them, each called from Python (H100, 2026-11-26, as CUDA-graph replays:
7.8 against 14.0 us at 3072 x 3072, 23.8 against 27.4 at 3072 x 8192; docs/PERFORMANCE.md,
"The whole layer at one token"). From M = 2 it reads W once per token, and the base product
stays torch's.

When the tkc kernel runs (else the layer runs PEFT's own forward, unchanged): the layer is in
eval mode (`not layer.training`, so dropout is the identity) and no gradient is needed (autograd
is off, or none of x, `miss_block`, W and bias requires grad: the kernel has no backward);
adapters enabled, none merged; exactly one active adapter with a `miss_block`, in the balance or
mini form; the base layer is exactly a `torch.nn.Linear` and not quantized; x, `miss_block` and
W (and bias) are all f16 or all bf16; x is non-empty; the forward gets no argument besides x.
The leading dims of x are flattened (M = prod(x.shape[:-1])); K need not be a multiple of r (the
kernel reads zeros past K). The kernel rounds the shard sum to the block's dtype, as PEFT does,
and adds the base output in f32 before its one rounding (PEFT rounds the adapter's product, then
the sum), so the two differ by about one unit in the last place.

PEFT keeps adapter weights in f32 by default (`get_peft_model(..., autocast_adapter_dtype=True)`),
so an f16 model's layers stay on PEFT's forward until the model is cast after wrapping
(`model.half()`); `enable` warns about such layers.

The kernel is compiled per (dtype, target, cache dir), process-wide. On `tilelang` M is a
dynamic dim and the cost model picks the decomposition per M bucket (`schedule="model"`,
tkc/schedule.py): the first call compiles every bucket's choice (seconds each, then tkc's
on-disk cache has them) and later calls at any token count compile nothing; `cuda` specializes
per shape; the CPU targets keep the file's constants with M dynamic. A switched layer can be
captured in a CUDA graph; torch.compile does not trace through it. Speed: docs/PERFORMANCE.md
("PEFT MiSS layer"), measured with benchmarks/peft_miss.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the example that computes (1) plus the base output, per dtype of the layer
KERNEL_FILES = {"float16": "peft_miss.tk", "bfloat16": "peft_miss_bf16.tk"}
# the whole layer (base GEMV + bias + adapter) at M <= FUSED_MAX_M tokens, per dtype
LINEAR_FILES = {"float16": "peft_miss_linear.tk", "bfloat16": "peft_miss_linear_bf16.tk"}
FUSED_MAX_M = 1  # from M = 2 it reads W once per token: slower than cuBLAS (docs/PERFORMANCE.md)
# targets that run it: through `cuda` its per-block shard sum made it slower than torch's base
# product plus the adapter kernel (H100: 38-72 us against 27 at 3072 x 8192)
FUSED_TARGETS = ("tilelang", "tilelang-cpu", "interp")
GPU_TARGETS = ("tilelang", "cuda")
CPU_TARGETS = ("tilelang-cpu",)  # `interp` copies through the CPU and takes tensors anywhere
_KERNELS: dict[tuple, object] = {}  # (example file, target, cache_dir) -> tkc Kernel


@dataclass
class _State:
    """What `enable` left on one layer: the kernel target and cache, the instance `forward` the
    layer had before (None: its class's), and the mini form's expanded block with its key."""

    target: str
    cache_dir: str | None
    previous: object = None
    expanded: tuple | None = None
    zero_bias: object = None  # the fused kernel's bias for a base Linear without one


def _miss_linear():
    """PEFT's MissLinear class; ModuleNotFoundError naming the install command without PEFT."""
    try:
        from peft.tuners.miss.layer import MissLinear
    except ImportError as exc:
        raise ModuleNotFoundError("tkc.integrations.peft needs PEFT's MiSS layers (peft >= 0.17): "
                                  "pip install peft") from exc
    return MissLinear


def default_target() -> str:
    """"tilelang" where torch sees a CUDA device, else "interp" (the reference interpreter: exact,
    slow, for small CPU runs; "tilelang-cpu" compiles each shape for seconds and has no bf16)."""
    import torch

    return "tilelang" if torch.cuda.is_available() else "interp"


def _compiled(files: dict[str, str], dtype, target: str, cache_dir: str | None, **options):
    """The tkc Kernel of `files`' example for `dtype` on `target`, compiled once per process (M
    dynamic; `options` go to tkc.compile). Raises ValueError for a dtype without a file."""
    import tkc

    name = str(dtype).removeprefix("torch.")
    if name not in files:
        raise ValueError(f"no tkc MiSS kernel for {dtype}; the kernels are f16 and bf16")
    key = (files[name], target, cache_dir)
    if key not in _KERNELS:
        _KERNELS[key] = tkc.compile(os.path.join(ROOT, "examples", files[name]), target=target,
                                    cache_dir=cache_dir, dynamic=("M",), **options)
    return _KERNELS[key]


def kernel_for(dtype, target: str, cache_dir: str | None = None):
    """The tkc Kernel of (1) plus the base output for `dtype` (torch.float16 or torch.bfloat16) on
    `target`, compiled once per process. Raises ValueError for another dtype, TkError (from
    tkc.compile) for a target tkc cannot launch."""
    # Token counts change at nearly every call: M is dynamic (one compile for every M), and on the
    # GPU the cost model picks the decomposition per M bucket (tkc/schedule.py; every bucket
    # compiles at the first call); the CPU targets keep the file's constants (fewer C compiles).
    return _compiled(KERNEL_FILES, dtype, target, cache_dir, schedule="model" if target in GPU_TARGETS else "file")


def _check_device(x, target: str) -> None:
    """ValueError when `target` cannot run on x's device."""
    on_gpu = x.device.type == "cuda"
    if (target in GPU_TARGETS and not on_gpu) or (target in CPU_TARGETS and on_gpu):
        where = "CUDA" if target in GPU_TARGETS else "CPU"
        raise ValueError(f"tkc target `{target}` runs on {where} tensors, but x is on {x.device}: pass "
                         "target=\"tilelang\" (GPU) or \"interp\" / \"tilelang-cpu\" (CPU) to "
                         "tkc.integrations.peft.enable")


def linear_kernel_for(dtype, target: str, cache_dir: str | None = None):
    """The tkc Kernel of the whole layer at a few tokens (x @ W.T + bias + form (1)) for `dtype`
    on `target`, compiled once per process (M dynamic, the file's constants). Raises as
    `kernel_for`."""
    return _compiled(LINEAR_FILES, dtype, target, cache_dir)


def miss_linear(x, weight, bias, block, target: str | None = None, cache_dir: str | None = None):
    """x @ weight.T + bias + sum(pad(x).reshape(..., -1, r), -2) @ block in one tkc kernel: a
    whole MissLinear layer (form (1) with its base Linear), meant for a few tokens.

    Shapes: x [..., K], weight [N, K], bias [N], block [r, N]; any K >= 1. Dtypes: all f16 or all
    bf16. Device and targets as `add_miss`. Returns [..., N]. Raises ValueError for mismatched
    shapes or dtypes; TkError (tkc) for what the kernel itself rejects."""
    target = target or default_target()
    lead, k, n = tuple(x.shape[:-1]), x.shape[-1], weight.shape[0]
    if (weight.dim() != 2 or weight.shape[1] != k or tuple(bias.shape) != (n,) or block.dim() != 2
            or block.shape[1] != n):
        raise ValueError(f"miss_linear: x {tuple(x.shape)}, weight {tuple(weight.shape)}, bias {tuple(bias.shape)} "
                         f"and block {tuple(block.shape)} do not fit x [..., K], weight [N, K], bias [N], block [r, N]")
    if not x.dtype == weight.dtype == bias.dtype == block.dtype:
        raise ValueError(f"miss_linear: x, weight, bias and block must have one dtype, got {x.dtype}, "
                         f"{weight.dtype}, {bias.dtype}, {block.dtype}")
    _check_device(x, target)
    m = x.numel() // k if k else 0
    out = linear_kernel_for(x.dtype, target, cache_dir)(x.reshape(m, k), weight, bias.view(1, n), block)
    return out.reshape(*lead, n)


def add_miss(y, x, block, target: str | None = None, cache_dir: str | None = None):
    """y + sum(pad(x).reshape(..., -1, r), -2) @ block on the tkc kernel: form (1) with its base
    output `y` (a new tensor; `y` is not changed).

    Shapes: x [..., K], block [r, N], y [..., N] with the same leading dims as x (flattened to
    M = their product), any K >= 1 (zeros pad it to a multiple of r). Dtypes: all three f16, or
    all three bf16. Device: CUDA for targets tilelang and cuda, the CPU for tilelang-cpu, either
    for interp (it copies through the CPU). No autograd. Raises ValueError for mismatched
    shapes, dtypes or devices; TkError (tkc) for what the kernel itself rejects."""
    target = target or default_target()
    lead, k, n = tuple(x.shape[:-1]), x.shape[-1], block.shape[-1]
    if block.dim() != 2 or tuple(y.shape) != (*lead, n):
        raise ValueError(f"add_miss: x {tuple(x.shape)}, block {tuple(block.shape)} and y {tuple(y.shape)} do not "
                         f"fit x [..., K], block [r, N], y [..., N]")
    if not x.dtype == y.dtype == block.dtype:
        raise ValueError(f"add_miss: x, block and y must have one dtype, got {x.dtype}, {block.dtype}, {y.dtype}")
    _check_device(x, target)
    m = x.numel() // k if k else 0
    kernel = kernel_for(x.dtype, target, cache_dir)
    out = kernel(x.reshape(m, k), block, y.reshape(m, n))
    return out.reshape(*lead, n)


def _active_block(layer):
    """(adapter name, B for form (1)'s kernel) when exactly one active adapter has a
    `miss_block` and the layer's form is balance or mini, else None."""
    names = [a for a in layer.active_adapters if a in layer.miss_block]
    if len(names) != 1 or layer.miss_fn not in (True, False, "mini"):  # "bat" changes W itself
        return None
    return names[0], layer.miss_block[names[0]]


def _eligible(layer, x, args, kwargs):
    """The balance/mini block when this call may run on the tkc kernel (module docstring), else None."""
    import torch

    if layer.training or layer.disable_adapters or layer.merged or args or kwargs:
        return None
    base = layer.base_layer
    if type(base) is not torch.nn.Linear or getattr(layer, "quantization_backend", None) is not None:
        return None
    active = _active_block(layer)
    if active is None:
        return None
    _, block = active
    tensors = [x, block, base.weight] + ([base.bias] if base.bias is not None else [])
    if x.dtype not in (torch.float16, torch.bfloat16) or any(t.dtype != x.dtype for t in tensors):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None
    if x.dim() == 0 or x.numel() == 0 or x.shape[-1] != base.in_features:
        return None
    return active


def _expanded(layer, state: _State, name: str, block):
    """B for `block` in `layer`'s form: the block itself (balance), or the mini block repeated
    along out (kept until the block's data changes)."""
    if layer.miss_fn != "mini":
        return block
    out = layer.base_layer.out_features
    key = (name, block.data_ptr(), block._version, tuple(block.shape), block.device, out)
    if state.expanded is None or state.expanded[0] != key:
        state.expanded = (key, block.detach().repeat(1, out // block.shape[1]))
    return state.expanded[1]


def _forward(layer, x, *args, **kwargs):
    """The switched `MissLinear.forward`: the tkc kernel when the call is eligible, else PEFT's."""
    state: _State = layer._tkc_miss
    active = _eligible(layer, x, args, kwargs)
    if active is None:
        if state.previous is not None:
            return state.previous(x, *args, **kwargs)
        return type(layer).forward(layer, x, *args, **kwargs)
    name, block = active
    block = _expanded(layer, state, name, block)
    base = layer.base_layer
    if x.numel() <= FUSED_MAX_M * x.shape[-1] and state.target in FUSED_TARGETS:  # the whole layer in one kernel
        bias = base.bias
        if bias is None:
            if state.zero_bias is None or state.zero_bias.device != x.device or state.zero_bias.dtype != x.dtype:
                state.zero_bias = x.new_zeros(base.out_features)
            bias = state.zero_bias
        return miss_linear(x, base.weight, bias, block, state.target, state.cache_dir)
    return add_miss(base(x), x, block, state.target, state.cache_dir)


def enable(model, target: str | None = None, cache_dir: str | None = None) -> list[str]:
    """Switch every PEFT `MissLinear` in `model` (the model itself included) to the tkc kernel
    for its eligible calls (module docstring); calls that are not eligible, training among
    them, run PEFT's own forward. Enabling again only changes the target and cache.

    `target`: a tkc launch target ("tilelang" or "cuda" on the GPU, "tilelang-cpu" or "interp"
    on the CPU); default `default_target()`. `cache_dir`: tkc's compile cache (default: tkc's).
    Returns the qualified names of the switched layers; warns (UserWarning) about layers whose
    `miss_block` dtype is not their base weight's (they keep PEFT's forward). Raises
    ModuleNotFoundError without PEFT, ValueError when `model` has no MissLinear or has bf16 layers
    and `target` is "tilelang-cpu" (TileLang's C target has no bf16), TkError (tkc) for a target
    tkc cannot launch.
    """
    import types
    import warnings

    import torch

    miss_linear = _miss_linear()
    target = target or default_target()
    kernel_for(torch.float16, target, cache_dir)  # an unknown target fails here, not at a later call
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, miss_linear)]
    if not layers:
        raise ValueError(f"{type(model).__name__} has no PEFT MissLinear layer "
                         "(build it with peft.get_peft_model(model, peft.MissConfig(...)))")
    bf16 = [n for n, m in layers if m.base_layer.weight.dtype == torch.bfloat16]
    if target == "tilelang-cpu" and bf16:  # TileLang's C target has no bf16 arithmetic (each call would fail)
        raise ValueError(f"target `tilelang-cpu` has no bf16 arithmetic, and {len(bf16)} MissLinear layers "
                         f"(`{bf16[0]}`, ...) are bf16: pass target=\"interp\" on the CPU, \"tilelang\" or "
                         "\"cuda\" on the GPU")
    mixed = [n for n, m in layers if any(b.dtype != m.base_layer.weight.dtype for b in m.miss_block.values())]
    if mixed:  # PEFT keeps adapter weights in f32 by default (get_peft_model's autocast_adapter_dtype)
        warnings.warn(f"{len(mixed)} MissLinear layers (`{mixed[0]}`, ...) have a `miss_block` dtype other than "
                      "their base weight's, so they run PEFT's own forward; cast the model after wrapping it "
                      "(`model.half()`, `model.to(torch.bfloat16)`) or pass autocast_adapter_dtype=False to "
                      "peft.get_peft_model", stacklevel=2)
    for _, layer in layers:
        state = layer.__dict__.get("_tkc_miss")
        if state is not None:
            state.target, state.cache_dir = target, cache_dir
            continue
        layer._tkc_miss = _State(target, cache_dir, layer.__dict__.get("forward"))
        layer.forward = types.MethodType(_forward, layer)
    return [n for n, _ in layers]


def disable(model) -> list[str]:
    """Undo `enable` on every layer of `model` it switched: each gets back the forward it had.
    Returns the qualified names of the layers switched back (none is not an error)."""
    restored = []
    for name, layer in model.named_modules():
        state = layer.__dict__.get("_tkc_miss")
        if state is None:
            continue
        del layer._tkc_miss
        if state.previous is not None:
            layer.forward = state.previous
        else:
            del layer.forward
        restored.append(name)
    return restored

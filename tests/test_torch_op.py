"""A compiled kernel as a torch custom op (tkc/torch_op.py, `Kernel.as_torch_op`): the op passes
`torch.library.opcheck` (schema and mutation declarations, fake vs real outputs' metadata, AOT
dispatch with dynamic shapes), a model calling it compiles under `torch.compile(fullgraph=True)`
(any graph break is an error there) with static and symbolic shapes and matches torch in float64
within the derived tolerance (tkc/oracle.py), `mut` outputs are updated in place through the
compiled graph, and what the op form cannot take is a located TkError. The interpreter runs the
kernels (fast on small shapes); one test goes through a TileLang C-target build."""

from __future__ import annotations

import os

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import tkc
from dsl.diagnostics import TkError
from tkc import oracle, torch_op
from tkc.driver import frontend

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RMSNORM = os.path.join(ROOT, "examples", "rmsnorm.tk")
ACCUM = os.path.join(ROOT, "examples", "accum.tk")
KV = os.path.join(ROOT, "examples", "kv_store.tk")
SDDMM = os.path.join(ROOT, "examples", "sddmm.tk")
DIM_EXPRS = os.path.join(ROOT, "tests", "programs", "dim_exprs.tk")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo keeps compiled code per code object across tests (one `step` serves two
    parametrizations): each test counts its own compiles."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def assert_close(module, inputs, results, where: str) -> None:
    """Each of `results` against the kernel's reference in float64 on `inputs`, within the
    tolerance derived from its dtype and reduction length."""
    refs = oracle.reference(module, inputs)
    assert len(refs) == len(results)
    for (name, _), out, ref in zip(oracle.outputs(module), results, refs):
        assert out.shape == ref.shape, f"{where}: `{name}` has shape {tuple(out.shape)}, want {tuple(ref.shape)}"
        err, tol = oracle.rel_error(out, ref), oracle.tolerance(module, name)
        assert err <= tol, f"{where}: `{name}` relative error {err:.3e} > tolerance {tol:.3e}"


def test_opcheck_and_schema():
    """opcheck compares the fake implementation's outputs (shape, dtype, strides) with the real
    ones, also under AOT dispatch with dynamic shapes, and checks that the schema declares what
    the op mutates: a wrong fake extent or an undeclared mutation fails here."""
    k = tkc.compile(RMSNORM, target="interp", BR=4)
    op = k.as_torch_op()
    assert op is k.as_torch_op()  # an equivalent kernel keeps its op
    assert torch_op.schema(k) == "(Tensor X, Tensor W) -> Tensor"
    assert op._qualname.startswith("tkc::rmsnorm_")
    torch.library.opcheck(op, (randn(6, 40), randn(1, 40, seed=1)))

    kv = tkc.compile(KV, target="interp", BN=64).as_torch_op()
    assert kv._schema == "(Tensor K, Tensor V, SymInt pos, Tensor(a3!) KC, Tensor(a4!) VC) -> ()"
    caches = randn(8, 100, seed=2).half(), randn(8, 100, seed=3).half()
    torch.library.opcheck(kv, (randn(1, 100), randn(1, 100, seed=1), 5, *caches))

    z = tkc.compile(DIM_EXPRS, target="interp").as_torch_op()  # outputs [M, H] and [M, H / 2 + 1]
    torch.library.opcheck(z, (randn(20, 2 * 7), randn(20, 7, seed=1)))


def test_names_are_stable_per_source_target_and_constants():
    a = tkc.compile(ACCUM, target="interp", BN=64).as_torch_op()
    assert tkc.compile(ACCUM, target="interp", BN=64).as_torch_op() is a
    b = tkc.compile(ACCUM, target="interp", BN=32).as_torch_op()
    c = tkc.compile(ACCUM, target="tilelang-cpu", BN=64).as_torch_op()
    d = tkc.compile(ACCUM, target="interp", BN=64, dynamic=("B",)).as_torch_op()
    assert len({a._qualname, b._qualname, c._qualname, d._qualname}) == 4
    assert torch.equal(a(randn(2, 70), randn(2, 70, seed=1)), randn(2, 70) + randn(2, 70, seed=1))


SHAPES = """\
kernel shapes<BN=4>(X: f32[M, N]) -> (Y: f32[cdiv(N, BN), N % 3 + M / 2, min(M, N) - max(1, -N + 2 * M)])
{
    grid (1) as (b)
}
"""


def test_dim_expressions_evaluate_on_symints_without_guards():
    """Every operator of a dim expression on SymInts gives a SymInt with the right value and adds
    no guard (nothing specialized), and the same value on ints; an unknown name is a TkError."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    from dsl.parser import parse

    dims = [d for d, _ in parse(SHAPES, "shapes.tk").outputs[0].dims]
    want = [3, 10 % 3 + 7 // 2, min(7, 10) - max(1, -10 + 2 * 7)]  # cdiv(10, 4) = 3
    assert [torch_op.evaluate(d, {"BN": 4, "M": 7, "N": 10}) for d in dims] == want
    shape_env = ShapeEnv()
    x = FakeTensorMode(shape_env=shape_env).from_tensor(
        torch.empty(7, 10), symbolic_context=StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2))
    got = [torch_op.evaluate(d, {"BN": 4, "M": x.shape[0], "N": x.shape[1]}) for d in dims]
    assert all(isinstance(v, torch.SymInt) for v in got)
    assert [v.node.hint for v in got] == want and not shape_env.guards
    with pytest.raises(TkError, match="dim `N` has no value"):
        torch_op.evaluate(dims[0], {"BN": 4})


class Norm(torch.nn.Module):
    """Torch ops around the kernel, so that the graph has something on each side of the op."""

    def __init__(self, op, n: int):
        super().__init__()
        self.op = op
        self.weight = torch.nn.Parameter(randn(1, n, seed=7), requires_grad=False)

    def forward(self, x):
        return self.op(x * 2.0, self.weight).t()  # exact in f32: the reference sees x * 2


@pytest.mark.parametrize("dynamic", [False, True])
def test_model_compiles_with_fullgraph(dynamic):
    """fullgraph=True raises on any graph break; two batch sizes under dynamic=True compile once,
    with the op's output extent a SymInt in the traced graph (the fake implementation did not
    specialize it)."""
    k = tkc.compile(RMSNORM, target="interp", BR=4)
    model = Norm(k.as_torch_op(), 48)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter, dynamic=dynamic)
    for b in (5, 9):
        x = randn(b, 48, seed=b)
        y = compiled(x)
        module = frontend(RMSNORM, {"B": b, "N": 48, "BR": 4})
        assert_close(module, [x * 2.0, model.weight.detach()], [y.t()], f"B={b} dynamic={dynamic}")
    assert counter.frame_count == (1 if dynamic else 2)
    if dynamic:
        node = next(n for n in counter.graphs[0].graph.nodes if n.op == "call_function" and "rmsnorm" in str(n.target))
        assert isinstance(node.meta["example_value"].shape[0], torch.SymInt)


def test_dim_expressions_stay_symbolic():
    """X: f32[M, 2 * H] and Z: f32[M, H / 2 + 1]: H is bound from S, checked against X's extent
    and floor-divided in Z's, all on SymInts; odd and even H in one compiled graph."""
    op = tkc.compile(DIM_EXPRS, target="interp").as_torch_op()
    counter = CompileCounterWithBackend("aot_eager")

    def f(x, s):
        y, z = op(x, s)
        return y, z

    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    for m, h in ((20, 7), (33, 12)):
        x, s = randn(m, 2 * h, seed=h), randn(m, h, seed=m)
        y, z = compiled(x, s)
        assert z.shape == (m, h // 2 + 1)
        assert_close(frontend(DIM_EXPRS, {"M": m, "H": h}), [x, s], [y, z], f"M={m} H={h}")
    assert counter.frame_count == 1
    node = next(n for n in counter.graphs[0].graph.nodes if n.op == "call_function" and "dim_exprs" in str(n.target))
    z_fake = node.meta["example_value"][1]
    assert all(isinstance(n, torch.SymInt) for n in z_fake.shape)


def _kv_step(op):
    def step(k, v, pos, kc, vc):
        op(k * 2.0, v, pos, kc, vc)  # writes row `pos` of both caches in place
        return kc.float().sum(1)  # reads the updated cache inside the same graph

    return step


@pytest.mark.parametrize("target,scalars", [("interp", "tensor"), ("tilelang-cpu", "int")])
def test_mut_outputs_update_in_place_under_compile(tmp_path, target, scalars):
    """kv_store's caches are `mut`: the compiled graph updates the caller's tensors (every other
    row keeps its value exactly) and reads them back after the op; `pos` is an int (symbolic from
    its second value on: one recompile, not one per position) or a one-element int32 tensor (no
    recompile)."""
    kernel = tkc.compile(KV, target=target, cache_dir=str(tmp_path), BN=64)
    op = kernel.as_torch_op(scalars=scalars)
    counter = CompileCounterWithBackend("aot_eager")
    step = torch.compile(_kv_step(op), fullgraph=True, backend=counter)
    kc, vc = randn(10, 96, seed=1).half(), randn(10, 96, seed=2).half()
    for pos in (3, 7, 5):  # (not 0 or 1: dynamo specializes an int argument of 0 or 1)
        k, v = randn(1, 96, seed=10 + pos), randn(1, 96, seed=20 + pos)
        old_k, old_v = kc.clone(), vc.clone()
        sums = step(k, v, torch.tensor([pos], dtype=torch.int32) if scalars == "tensor" else pos, kc, vc)
        rows = [r for r in range(10) if r != pos]
        assert torch.equal(kc[rows], old_k[rows]) and torch.equal(vc[rows], old_v[rows])
        assert torch.equal(kc[pos], (k[0] * 2.0).half()) and torch.equal(vc[pos], v[0].half())
        assert torch.equal(sums, kc.float().sum(1))
    assert counter.frame_count == (1 if scalars == "tensor" else 2)  # an int becomes dynamic at its 2nd value


def test_sparse_inputs_are_a_located_error():
    k = tkc.compile(SDDMM, target="interp")
    with pytest.raises(TkError) as info:
        k.as_torch_op()
    (d,) = info.value.diagnostics
    assert "sparse input `S` (csr) cannot be an argument of a torch custom op" in d.message
    assert (os.path.basename(d.loc.file), d.loc.line) == ("sddmm.tk", 7)
    assert "torch.compiler.disable" in d.notes[0]


def test_name_clashes_and_bad_options_are_errors():
    tkc.compile(ACCUM, target="interp").as_torch_op("torch_op_test_clash")
    with pytest.raises(TkError, match="`tkc::torch_op_test_clash` is already registered for another kernel"):
        tkc.compile(ACCUM, target="interp", BN=32).as_torch_op("torch_op_test_clash")
    with pytest.raises(TkError, match="`aten::add` already exists"):
        tkc.compile(ACCUM, target="interp").as_torch_op("add", namespace="aten")
    with pytest.raises(TkError, match="not an identifier"):
        tkc.compile(ACCUM, target="interp").as_torch_op("my.op")
    with pytest.raises(TkError, match="`scalars` must be one of"):
        tkc.compile(KV, target="interp").as_torch_op(scalars="float")


def test_fake_implementation_checks_rank_and_dtype():
    """Under tracing the fake implementation sees only metadata: a wrong dtype, or an extent that
    disagrees with a dim bound by another input, is a TkError at the parameter before any kernel
    runs."""
    op = tkc.compile(ACCUM, target="interp").as_torch_op()
    f = torch.compile(lambda x, d: op(x, d), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="`D` is f32, but the tensor is torch.float64"):
        f(randn(2, 8), randn(2, 8).double())
    with pytest.raises(Exception, match=r"`D` needs extent 2 here, got (3|s\d+)"):  # (symbolic after a recompile)
        f(randn(2, 8), randn(3, 8))

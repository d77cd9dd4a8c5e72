"""The test oracle: inputs that expose bugs, torch in float64 on them, and an honest tolerance.

Every numeric check in tkc (`tkc run --check`, the CPU suite, the GPU tiers) compares a kernel's
outputs with its `reference` expression evaluated by torch in float64 on the *same* input
tensors (the inputs as the kernel sees them, i.e. already rounded to their dtypes). The reference
states the math only: it never copies a rounding that the kernel does internally (no
`.half().float()` of an intermediate); only the outputs' dtypes round, and those roundings, the
accumulation in f32 and the kernel's own narrower intermediates are what the tolerance allows.

Error measure (`rel_error`): max |out - ref| / max |ref| over an output, in float64; NaN (never
passes) when the output has a NaN or Inf or the shapes differ.

Tolerance (`tolerance(module, output)`, from `error_budgets(module)[output].tol(dtype)`), with u(d) the unit roundoff of dtype d (f16 2^-11,
bf16 2^-8, f32 2^-24, f64 2^-53; integers 0):

    tol = u(out) + C_MID * sum over narrowing roundings r of u(dtype of r)
                 + C_ACC * n * u(f32)
                 + C_FN * u(f32)

* u(out): the output's own rounding (at most u |ref| per element).
* narrowing roundings: every op that writes a floating tile narrower than f32 computed from
  wider data (`cast(S, f16)`, f16 elementwise results, f16 gemm accumulators); each is a
  relative error u per element, which a later reduction can amplify by the ratio of the sum of
  magnitudes to the magnitude of the sum. C_MID = 4 covers that for the programs here: over
  every edge case of tests/edge_shapes.py, every distribution and three seeds each, the
  interpreter's largest error on the MiSS examples (one f16 cast of S feeding a gemm over R)
  was 0.30 of their tolerance (2026-11-24). An output whose only rounding is its own (a
  correctly rounded f16 sum) can reach u(out) itself: 0.98 of the tolerance was seen there.
* n: the total reduction length, summed over every accumulation in the kernel: a gemm's K
  times the trip counts of the loops it accumulates over, a `sum` reduction's extent, a `+=`
  inside loops (the trip counts). An f32 sum of n terms has a relative error of at most n u
  in the worst case, about sqrt(n) u typically (Higham, Accuracy and Stability of Numerical
  Algorithms, ch. 4; Higham & Mary 2019 for the probabilistic bound); C_ACC = 4 with n, not
  sqrt(n), leaves room for the cancellation of sign-mixed data. An f16 accumulator where f32
  is promised errs by about sqrt(n) u(f16) = sqrt(n) 8192 u(f32): 2000x more at n = 64.
* C_FN u(f32): elementwise math in f32 (exp, sqrt, division), a few ulps each.

Input distributions (`DISTRIBUTIONS`): `normal` (standard normal), `negative` (every element
below -0.25), `offset` (positive around 4 with spread 1: sums do not cancel), `wide` (normal times
2^U(-6, 6): a wide dynamic range), `ints` (nonzero integers in [-4, 4]: products and f32 sums of
them are exact, so any error shows). Floats are scaled down by powers of two (exact) until the
reference fits the output dtype with room. Integer tensors are always small integers. Zeros
never occur unless a test asks for them.
"""

from __future__ import annotations

import warnings

import math
from dataclasses import dataclass, field

from dsl import exprs
from dsl.ir import Module, Op
from dsl.diagnostics import TkError

DISTRIBUTIONS = ("normal", "negative", "offset", "wide", "ints")

UNIT_ROUNDOFF = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -24, "f64": 2.0 ** -53, "i8": 0.0, "i32": 0.0,
                 "bool": 0.0}
MAX_FINITE = {"f16": 65504.0, "bf16": 3.0e38, "f32": 3.0e38, "f64": 1.0e300, "i8": 127.0, "i32": 2.0 ** 31 - 1,
              "bool": 1.0}
C_MID, C_ACC, C_FN = 4.0, 4.0, 64.0
_NARROW = ("f16", "bf16")


@dataclass
class ErrorBudget:
    """The terms of one output's tolerance (see the module docstring); `tol(out_dtype)` adds them."""

    n: int = 0  # total reduction length (elements summed, over all accumulations)
    mids: list[str] = field(default_factory=list)  # dtypes of the narrowing intermediate roundings

    def tol(self, out_dtype: str) -> float:
        if out_dtype in ("i8", "i32", "bool"):
            return 0.0
        u32 = UNIT_ROUNDOFF["f32"]
        return (UNIT_ROUNDOFF[out_dtype] + C_MID * sum(UNIT_ROUNDOFF[d] for d in self.mids)
                + C_ACC * self.n * u32 + C_FN * u32)


def error_budgets(module: Module) -> dict[str, ErrorBudget]:
    """Per output name, the budget of the ops that feed it: the kernel's IR (lowered, at its
    bound dims and constants) is walked for each op's reduction length and narrowing rounding,
    then each output's cone (the ops its stores depend on) adds them up. A narrowing whose
    result only goes to outputs of its own dtype is that output's rounding, not a second one."""
    records: list[tuple[Op, int, str | None]] = []
    depth: dict[int, int] = {id(a): 0 for a in module.func.body.args}
    for op in module.func.body.ops:
        if op.name == "tile.launch":
            _walk(op.body.ops, dims_env(module), [], depth, records)
    writers: dict[int, list[int]] = {}
    consumers: dict[int, list[Op]] = {}
    for i, (op, _, _) in enumerate(records):
        if op.operands:
            writers.setdefault(id(op.operands[-1]), []).append(i)
        for r in op.results:
            writers.setdefault(id(r), []).append(i)
        for v in _inputs(op):
            consumers.setdefault(id(v), []).append(op)
    out: dict[str, ErrorBudget] = {}
    args = module.func.body.args
    for k in module.func.attrs["outputs"]:
        budget, seen, todo = ErrorBudget(), set(), list(writers.get(id(args[k]), []))
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            op, n, mid = records[i]
            budget.n += n
            if mid is not None and not all(
                    c.name == "tile.copy" and c.operands[-1].type.space == "global"
                    and c.operands[-1].type.dtype == mid for c in consumers.get(id(op.operands[-1]), [])):
                budget.mids.append(mid)
            for v in _inputs(op):
                todo.extend(writers.get(id(v), []))
        out[args[k].name] = budget
    return out


def _inputs(op: Op) -> list:
    """The values `op` reads (a gemm and an accumulating reduce also read their destination)."""
    if op.name in ("tile.gemm",) or op.attrs.get("accumulate"):
        return list(op.operands)
    return list(op.operands[:-1])


def _trips(op: Op, env: dict[str, int]) -> int:
    try:
        lo = exprs.evaluate(exprs.parse(op.attrs["lo"]), env)
        hi = exprs.evaluate(exprs.parse(op.attrs["hi"]), env)
    except Exception:  # bounds on an outer loop's index: count the widest case
        return 1
    return max(hi - lo, 1)


def _walk(ops: list[Op], env: dict[str, int], loops: list[int], depth: dict[int, int],
          records: list[tuple[Op, int, str | None]]) -> None:
    """Append (op, reduction length it adds, dtype of the narrowing rounding it does or None)."""
    for op in ops:
        for r in op.results:
            depth[id(r)] = len(loops)
        if op.name == "tile.for":
            _walk(op.body.ops, {**env, op.attrs["var"]: 0}, loops + [_trips(op, env)], depth, records)
            continue

        def over(v) -> int:  # trip counts of the loops between `v`'s definition and `op`
            return math.prod(loops[depth.get(id(v), 0):])

        out = op.operands[-1] if op.operands else None
        n = 0
        if op.name == "tile.gemm":
            a, _, acc = op.operands
            n = exprs.evaluate(a.type.shape[1], env) * over(acc)
        elif op.name == "tile.reduce" and op.attrs.get("fn") == "sum":
            src, dst = op.operands
            n = exprs.evaluate(src.type.shape[op.attrs.get("axis", 0)], env) * (
                over(dst) if op.attrs.get("accumulate") else 1)
        elif op.name == "tile.sampled_gemm":  # a dot product over all of K
            n = exprs.evaluate(op.operands[0].type.shape[1], env)
        elif (op.name == "tile.elementwise" and op.attrs.get("fn") in ("add", "sub")
              and len(op.operands) == 3 and op.operands[0] is out):
            n = over(out)
        mid = None
        if out is not None and out.type.space != "global" and out.type.dtype in _NARROW:
            if op.name in ("tile.gemm", "tile.elementwise", "tile.reduce") or any(
                    v.type.dtype not in _NARROW and v.type.dtype not in ("i8", "i32", "bool") for v in op.operands[:-1]):
                mid = out.type.dtype
        records.append((op, n, mid))


def tolerance(module: Module, output: str) -> float:
    """The tolerance of output `output` of `module` (see the module docstring)."""
    dtype = next(module.func.body.args[i].type.dtype for i in module.func.attrs["outputs"]
                 if module.func.body.args[i].name == output)
    return error_budgets(module)[output].tol(dtype)


def _float_tensor(shape, dist: str, gen, dtype):
    import torch

    if dist == "normal":
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
    elif dist == "negative":
        t = -(torch.randn(shape, generator=gen, dtype=torch.float64).abs() + 0.25)
    elif dist == "offset":
        t = 4.0 + torch.rand(shape, generator=gen, dtype=torch.float64)
    elif dist == "wide":
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
        t = t * torch.exp2(torch.randint(-6, 7, shape, generator=gen).to(torch.float64))
    elif dist == "ints":
        t = torch.randint(1, 5, shape, generator=gen).to(torch.float64)
        t = t * (torch.randint(0, 2, shape, generator=gen) * 2 - 1)
    else:
        raise ValueError(f"unknown input distribution `{dist}`; one of {', '.join(DISTRIBUTIONS)}")
    return t.to(dtype)


def dims_env(module: Module, inputs: dict | None = None) -> dict[str, int]:
    """The module's dims and constants, with its dynamic dims (`dynamic M`) at their compile-time
    values, or bound from the shapes of `inputs` (input name -> tensor) when given."""
    from dsl.ops import dynamic_dims, dynamic_values

    shapes = {n: t.shape for n, t in (inputs or {}).items() if hasattr(t, "shape")}
    return {**module.env, **dynamic_dims(module.func), **dynamic_values(module.func, shapes)}


def input_names(module: Module) -> list[str]:
    """The kernel's inputs in call order: tensor arguments and runtime scalars (`pos: i32`), then
    the `mut` outputs (whose old values the reference reads under their names)."""
    from dsl.ops import scalars

    outs = set(module.func.attrs["outputs"])
    args = module.func.body.args
    names = [a.name for i, a in enumerate(args) if i not in outs]
    for name, *_ in module.func.attrs.get("sparse", []):  # a pattern is one argument (rows, cols)
        names[names.index(f"{name}_rows")] = name
        names.remove(f"{name}_cols")
    for name, _, pos in sorted(scalars(module.func), key=lambda s: s[2]):
        names.insert(pos, name)
    return names + [args[i].name for i in module.func.attrs.get("mutable", [])]


def scalar_values(module: Module, seed: int, given: dict[str, int] | None = None) -> dict[str, int]:
    """A value for every runtime scalar: `given`, else the largest its `requires` bound allows
    when the seed is even and 0 when odd (the two ends a position takes), 0 when unbounded."""
    from dsl import exprs
    from dsl.ops import scalar_ranges

    out = {}
    for name, (lo, hi) in scalar_ranges(module.func, dims_env(module)).items():
        if given and name in given:
            out[name] = int(given[name])
        else:
            out[name] = hi if seed % 2 == 0 and hi < exprs.UNKNOWN[1] else lo
    return out


def random_inputs(module: Module, seed: int, device: str, dist: str = "normal", scalars: dict[str, int] | None = None,
                  patterns: dict | None = None):
    """Seeded random inputs for `module`, in call order (input_names): tensors drawn from `dist`
    (one of DISTRIBUTIONS), small integers for integer tensors (index tensors: values in the
    range dsl.ops.index_bounds allows), ints for runtime scalars (scalar_values, `scalars`
    first). Float inputs are then halved (exactly) until the float64 reference stays under 1/8 of
    each output dtype's largest finite value, so no output overflows (at most 40 halvings;
    `ints` are never scaled). `patterns` maps a sparse input to "uniform" (the default), "rmat" or an
    object with a `pattern` (tkc.check.PatternFile: a pattern read from a file)."""
    import torch

    from dsl.ops import index_bounds
    from tkc.runtime import TORCH_DTYPES

    gen = torch.Generator().manual_seed(seed)
    env = dims_env(module)
    outs = set(module.func.attrs["outputs"])
    bounds = index_bounds(module.func, env)
    tensors = []
    mutable = module.func.attrs.get("mutable", [])
    sparse = {f"{name}_rows": (name, fmt, m, n) for name, fmt, _, m, n in module.func.attrs.get("sparse", [])}
    for i, a in enumerate(module.func.body.args):
        if i in outs and i not in mutable:  # a `mut` output's old value is an input (input_names)
            continue
        if a.name in sparse:
            source = (patterns or {}).get(sparse[a.name][0], "uniform")
            tensors.append(random_pattern(module, *sparse[a.name], a.type.concrete_shape(env)[0], gen, source))
            continue
        if any(a.name == f"{p}_cols" for p, *_ in sparse.values()):
            continue
        shape = a.type.concrete_shape(env)
        dtype = getattr(torch, TORCH_DTYPES[a.type.dtype])
        if a.type.dtype == "bool":  # a mask: about half true
            t = torch.rand(shape, generator=gen) < 0.5
        elif a.name in bounds:  # an index tensor: values it may take
            t = torch.randint(0, bounds[a.name], shape, generator=gen, dtype=dtype)
        elif a.type.dtype in ("i8", "i32"):
            t = torch.randint(-8, 8, shape, generator=gen, dtype=dtype)
        else:
            t = _float_tensor(shape, dist, gen, dtype)
        tensors.append(t)
    values = scalar_values(module, seed, scalars)
    names = input_names(module)

    def ordered(ts):
        it = iter(ts)
        return [values[n] if n in values else next(it) for n in names]

    if dist != "ints" and module.func.attrs.get("reference"):
        limits = [MAX_FINITE[module.func.body.args[i].type.dtype] / 8 if module.func.body.args[i].type.dtype != "bool"
                  else float("inf") for i in sorted(outs)]  # a mask cannot overflow
        for _ in range(40):
            try:
                refs = reference(module, ordered(tensors))
            except TkError:  # (e.g. a runtime scalar past a `requires`: the call reports that, located)
                break
            # (an empty output, e.g. a sampled gemm's values at NNZ = 0, cannot overflow)
            if all(r.numel() == 0 or r.abs().max().item() <= lim for r, lim in zip(refs, limits)):
                break
            tensors = [t * 0.5 if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in tensors]
    return ordered([t.to(device) for t in tensors])


def random_pattern(module: Module, name: str, fmt: str, m: str, n: str, nnz: int, gen, source="uniform"):
    """A pattern of `nnz` distinct entries at the kernel's M x N (tkc/sparse.py): uniformly random
    (`source` "uniform"), R-MAT ("rmat") or `source.pattern` (read from a file, its shape checked
    by the caller); in CSR order, or for a COO pattern in a shuffled order (the values come out in
    that order). Raises TkError when nnz does not fit."""
    import torch

    from dsl import exprs
    from dsl.diagnostics import error
    from tkc.sparse import SparseInputError, SparsePattern, as_pattern, rmat, uniform

    if not isinstance(source, str):
        return as_pattern(source.pattern, fmt)
    rows, cols = (exprs.evaluate(exprs.parse(e), dims_env(module)) for e in (m, n))
    try:
        draw = rmat if source == "rmat" else uniform
        p = draw(rows, cols, nnz, seed=int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    except SparseInputError as exc:
        kind = "an R-MAT" if source == "rmat" else "a random"
        note = (f"draw a uniform one (`tkc run --pattern {name}=uniform`) or fewer entries" if exc.note
                else "choose dims with `-D` where the number of entries fits M x N")
        raise error(module.func.loc, f"cannot draw {kind} pattern for `{name}`: {exc.message}", note) from None
    if fmt == "coo":
        perm = torch.randperm(nnz, generator=gen)
        p = SparsePattern(rows, cols, "coo", p.rows[perm], p.cols[perm])
    return p


def _reference_value(name: str, t, scope: dict) -> None:
    """Put input `t` into the reference's scope: float64 tensors (bool masks and ints as they
    are); a sparse pattern `S` as a float64 torch sparse tensor of ones (CSR or COO, in its
    order) plus its entries' `S_rows` and `S_cols` (int64)."""
    import torch

    if isinstance(t, int) or isinstance(t, torch.Tensor) and t.dtype == torch.bool:
        scope[name] = t
    elif isinstance(t, torch.Tensor):
        scope[name] = t.double()
    else:
        scope[name] = t.to_torch(torch.ones(t.nnz, dtype=torch.float64, device=t.rows.device), layout=t.fmt)
        scope[f"{name}_rows"], scope[f"{name}_cols"] = t.rows.long(), t.cols.long()


def interp_inputs(names: list[str], inputs) -> dict:
    """`inputs` (in call order, named `names`) as the reference interpreter takes them: numpy
    arrays (bf16 as f32), ints for runtime scalars, a sparse pattern `S` as `S_rows`, `S_cols`."""
    import torch

    out = {}
    for n, t in zip(names, inputs):
        if isinstance(t, int):
            out[n] = t
        elif isinstance(t, torch.Tensor):
            out[n] = (t.float() if t.dtype == torch.bfloat16 else t).cpu().numpy()
        else:
            out[f"{n}_rows"], out[f"{n}_cols"] = t.rows.cpu().numpy(), t.cols.cpu().numpy()
    return out


def reference(module: Module, inputs):
    """The kernel's `reference` expression evaluated by torch in float64 on `inputs` (cast to
    float64 on their own device; bool masks stay bool); a list of float64 tensors. Raises TkError (located at the
    kernel) when the kernel has none or the expression fails."""
    import torch
    import torch.nn.functional as F

    from dsl.diagnostics import error

    func = module.func
    text = func.attrs.get("reference", "")
    if not text:
        raise error(func.loc, f"kernel `{func.attrs.get('sym_name')}` has no `reference`",
                    'add `reference "<torch expression>"` after the signature to use --check')
    names = input_names(module)
    scope = {"torch": torch, "F": F, **dims_env(module, dict(zip(names, inputs)))}
    for n, t in zip(names, inputs):
        _reference_value(n, t, scope)
    try:
        with warnings.catch_warnings():  # torch warns that sparse CSR is in beta on every conversion
            warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta", UserWarning)
            result = eval(text, scope)  # the kernel author's own expression, like a script (one scope: lambdas see it)
    except Exception as exc:
        raise error(func.loc, f"the reference expression failed: {type(exc).__name__}: {exc}",
                    f"reference: {text}") from None
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    for r in results:
        if not isinstance(r, torch.Tensor):
            raise error(func.loc, f"the reference expression gave {type(r).__name__} "
                        f"{r!r:.60}; it must give a torch tensor per output (a tuple of them for several)",
                        f"reference: {text}")
    return [r.double() for r in results]


def rel_error(out, ref, magnitude=None) -> float:
    """max |out - ref| / max |ref| in float64 (NaN when `out` has a NaN or Inf, or the shapes
    differ; 0/0 counts as 0 and x/0 as Inf).

    `magnitude` (optional, ref's shape) is the size of the terms each element of ref sums (for a
    sum of products, the root sum of their squares); the error is then relative to
    max(max |ref|, max magnitude). Rounding errors scale with the terms, not with their sum: an
    output whose terms cancel (one element, M = N = 1) is otherwise held to a tolerance its
    rounding cannot meet."""
    import torch

    out, ref = out.double().cpu(), ref.double().cpu()
    if out.shape != ref.shape or not torch.isfinite(out).all():
        return float("nan")
    err = (out - ref).abs().max().item() if out.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    if magnitude is not None and magnitude.numel():
        scale = max(scale, magnitude.double().abs().max().item())
    if scale == 0.0:
        return 0.0 if err == 0.0 else float("inf")
    return err / scale


def outputs(module: Module) -> list[tuple[str, str]]:
    """(name, dtype) of every output of `module`, in order."""
    return [(module.func.body.args[i].name, module.func.body.args[i].type.dtype) for i in module.func.attrs["outputs"]]

"""Launching compiled kernels on torch tensors.

`Kernel` (returned by `tkc.compile`) binds the problem dims from its input tensors' shapes,
specializes and compiles once per distinct shape (in memory, and through the on-disk cache of
generated source plus TileLang's own cache of binaries), allocates the outputs and runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import numbers
import os

from codegen import tilelang as tilelang_gpu
from dsl import exprs
from dsl.diagnostics import Loc, error
from dsl.lower_sparse import SPARSE_FORMATS
from dsl.parser import parse
from tkc import driver
from tkc.cache import Cache

TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8", "i32": "int32",
                "bool": "bool"}


def _tilelang(cache: Cache):
    """Import TileLang with its cache inside ours (it creates its cache directory on import)."""
    os.environ.setdefault("TILELANG_CACHE_DIR", os.path.join(cache.root, "tilelang"))
    os.environ.setdefault("TILELANG_PRINT_ON_COMPILATION", "0")
    import logging

    import tilelang

    # TileLang's own notices (e.g. "Found kernel ... in memory cache" when a model compiles one
    # kernel at two shapes) are not the user's business: only its errors get through
    # (its modules set their own loggers' levels, so the level goes on its handlers too)
    base = logging.getLogger("tilelang")
    base.setLevel(logging.ERROR)
    for handler in base.handlers:
        handler.setLevel(logging.ERROR)
    return tilelang


def build(artifact: driver.Artifact, cache: Cache):
    """A launchable kernel for a `tilelang`, `tilelang-cpu` or `cuda` artifact (TileLang's JIT
    kernel, or tkc/cuda_runtime.py's CuPy launch); call it with every argument tensor (inputs
    then outputs). Raises TkError when the target needs a GPU that is not there."""
    from codegen.tir import load_prim_func

    if artifact.target in ("tilelang", "cuda"):
        import torch

        if not torch.cuda.is_available():
            raise error(Loc(artifact.module.func.loc.file, 0, 0), f"target `{artifact.target}` needs a CUDA GPU",
                        "run on the CPU with `--target tilelang-cpu` or `--target interp`")
    if artifact.target == "cuda":
        from tkc import cuda_runtime

        return cuda_runtime.build(artifact, cache)
    tilelang = _tilelang(cache)
    if artifact.target not in ("tilelang", "tilelang-cpu"):
        raise error(Loc(artifact.module.func.loc.file, 0, 0), f"target `{artifact.target}` cannot be launched",
                "launchable targets: tilelang, tilelang-cpu")
    try:
        source = artifact.source
        for attempt in range(tilelang_gpu.SOURCE_FORMS):
            try:
                func = load_prim_func(artifact.source_path, f"tkc_kernel_{artifact.key[:16]}_{attempt}")
                if artifact.target == "tilelang-cpu":
                    kernel = tilelang.compile(func, target="c", compile_flags=["-O2"])
                else:
                    kernel = tilelang.compile(func, target="cuda", pass_configs=tilelang_gpu.PASS_CONFIGS)
                break
            except Exception as exc:
                # TileLang found no barrier or layout for register tiles declared shared, or no
                # thread layout for a `T.reduce_*` (codegen/tilelang.py `fallback_source`): the
                # cache entry gets the next form (the serial reductions always lay out).
                source = tilelang_gpu.fallback_source(artifact.module, source, exc) if (
                    artifact.target == "tilelang") else None
                if source is None:
                    raise
                cache.put(artifact.key, {driver.SOURCE_FILE["tilelang"]: source, driver.IR_FILE: artifact.ir_text},
                          "tilelang")
    except Exception as exc:  # TileLang rejected code we generated: a tkc bug, not a user error,
        located = tilelang_gpu.layout_error(artifact.module, exc)  # unless it found no thread layout
        if located is not None:  # for a register tile that does not divide over the threads
            raise located from None
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise BackendError(f"TileLang failed to compile `{artifact.module.func.attrs.get('sym_name')}` "
                           f"(generated source: {artifact.source_path}): {first}") from exc
    if not any(a.type.dtype == "bool" for a in artifact.module.func.body.args):
        return kernel

    def launch(*tensors):
        # bool tensors cross into TileLang as uint8 (codegen/tilelang.py declares them so: TVM's
        # C host code takes int8_t* for a bool buffer); same bytes, 0 or 1. Runtime scalars (ints)
        # pass as they are.
        import torch

        return kernel(*[t.view(torch.uint8) if isinstance(t, torch.Tensor) and t.dtype == torch.bool else t
                        for t in tensors])

    return launch


class BackendError(RuntimeError):
    """The backend toolchain failed on generated code: an internal compiler error."""


INTERP = "interp"  # the reference interpreter (dsl/interpreter.py): slow, exact, any program
LAUNCH_TARGETS = ("tilelang", "tilelang-cpu", "cuda", INTERP)


class _Interpreted:
    """Stands in for a driver.Artifact when the final IR runs in the reference interpreter."""

    def __init__(self, module):
        self.module = module


def _interpreter(module):
    """A callable like a TileLang kernel (every argument tensor, outputs written in place) that
    runs the final IR in the reference interpreter; clusters are simulated rank by rank."""
    from dsl.diagnostics import Diagnostic, TkError
    from dsl.interpreter import ProgramError, run

    def launch(*tensors):
        import torch

        from dsl.ops import scalars

        args = module.func.body.args
        outs = module.func.attrs["outputs"]
        names = scalars(module.func)
        values = tensors[len(args):]  # runtime scalars come after the tensors
        tensors = tensors[:len(args)]
        mutable = module.func.attrs.get("mutable", [])  # outputs updated in place: their old values count
        inputs = {a.name: t.detach().cpu().float().numpy() if t.is_floating_point() else t.detach().cpu().numpy()
                  for i, (a, t) in enumerate(zip(args, tensors)) if i not in outs or i in mutable}
        inputs.update({n: int(v) for (n, _, _), v in zip(names, values)})
        try:
            results = run(module, inputs)
        except ProgramError as exc:  # a race or barrier mismatch in the user's program
            raise TkError(Diagnostic(exc.loc, exc.message, ["found by the reference interpreter (target `interp`)"]))

        for i in outs:
            out = tensors[i]
            out.copy_(torch.from_numpy(results[args[i].name].astype("float32")).to(out.dtype))

    return launch


class Kernel:
    """A .tk kernel compiled for one target; call it with the input tensors (in declaration
    order) to get the outputs (one tensor, or a tuple for several)."""

    def __init__(self, path: str, target: str, consts: dict[str, int], cache: Cache | None = None,
                 tune: bool = False, dynamic: tuple[str, ...] = (), schedule: str = "file"):
        self.path, self.target, self.consts, self.tune = path, target, dict(consts), tune
        self.schedule = schedule  # "file": the constants' defaults; "model": tkc/schedule.py's choice
        self._choices: dict[tuple, dict[int, dict[str, int]]] = {}  # static dims -> bucket -> constants
        self.extra_dynamic = tuple(dynamic)  # dims made dynamic by the caller (`tkc.compile(dynamic=)`)
        self.cache = cache or Cache()
        self.text = driver.read_source(path)
        self.ast = parse(self.text, path)
        if tune and consts:
            raise error(self.ast.loc, f"`tune=True` takes the schedule constants from `tkc tune`'s results; "
                        f"do not also pass {', '.join(sorted(consts))}",
                        "drop the keyword arguments, or drop `tune=True` to use them")
        if schedule not in ("file", "model"):
            raise error(self.ast.loc, f"unknown schedule `{schedule}`", "use \"file\" (the constants' defaults) or "
                        "\"model\" (chosen by the cost model from the `tune` space)")
        if tune and schedule == "model":
            raise error(self.ast.loc, "`tune=True` and `schedule=\"model\"` both choose the constants", "keep one")
        if tune and target not in ("tilelang", "cuda"):
            raise error(self.ast.loc, f"`tune=True` needs a GPU target (tilelang or cuda), got `{target}`",
                        "`tkc tune` measures on the GPU only")
        self._built: dict[tuple, tuple] = {}
        self._fast: dict[tuple, tuple] = {}  # input signature -> what a call needs (see __call__)
        # Kernels whose inputs are all dense tensors (no runtime scalar, sparse pattern or `mut`
        # output) take a shorter path once a signature was seen: nothing is checked per call
        # unless the kernel has runtime `requires` or host-checked index tensors (those stay on
        # the full path; the GPU targets check index tensors in the kernel).
        self._plain: dict[tuple, tuple] = {}
        self._plain_ok = all(p.dims is not None and p.dtype not in SPARSE_FORMATS for p in self.ast.inputs) and not any(
            p.mutable for p in self.ast.outputs)
        # Kernels with runtime scalars passed as Python ints (`pos` of a decode kernel) and dense
        # tensors otherwise take a shorter path too: per call, each scalar's range and the
        # `requires` over the scalars (folded once at the signature's dims) are checked, then the
        # kernel launches; a failed check goes the full path, which reports it.
        self._scalar: dict[tuple, tuple] = {}
        self._scalar_ok = (any(p.dims is None for p in self.ast.inputs) and any(p.dims is not None for p in self.ast.inputs)
                           and all(p.dtype not in SPARSE_FORMATS for p in self.ast.inputs)
                           and not any(p.mutable for p in self.ast.outputs))
        # A sampled gemm (SDDMM) whose inputs are dense tensors and one checked pattern object
        # takes a shorter path too once that pattern object was seen with the same dense
        # signature: what the call needs (its split, the pattern's tensors, the outputs) is kept
        # in the pattern's own memo under this kernel's token, so it lives as long as the pattern.
        sparse = [i for i, p in enumerate(self.ast.inputs) if p.dtype in SPARSE_FORMATS]
        self._sampled_at = sparse[0] if len(sparse) == 1 and not any(p.mutable for p in self.ast.outputs) and all(
            p.dims is not None for p in self.ast.inputs) else None
        self._token = object()
        self._inputs = self.ast.inputs + [p for p in self.ast.outputs if p.mutable]
        self._dot_below: int | None = None  # the `dot_below` property
        dims = {d for p in self.ast.inputs + self.ast.outputs for d, _ in p.dims or [] if isinstance(d, str)}
        for name in self.extra_dynamic:
            if name not in dims:
                raise error(self.ast.loc, f"`dynamic={self.extra_dynamic!r}` names `{name}`, which is not a tensor "
                            f"dim of `{self.ast.name}`", f"tensor dims: {', '.join(sorted(dims)) or 'none'}")
        # dims every call binds from the tensors without compiling again (`dynamic M`)
        self.dynamic = set(self.ast.dynamic) | set(self.extra_dynamic)
        for name, value in self.consts.items():
            if name in dims:
                raise error(self.ast.loc, f"`{name}` is a problem dim of `{self.ast.name}`, not a schedule constant",
                            "dims come from the input tensors' shapes; pass tensors of the size you want")
            if name not in self.ast.consts:
                known = ", ".join(sorted(self.ast.consts)) or "none"
                raise error(self.ast.loc, f"`{self.ast.name}` has no schedule constant `{name}`",
                            f"its schedule constants: {known}")
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise error(self.ast.loc, f"schedule constant `{name}` must be an int, got {type(value).__name__} "
                            f"{value!r}")
            self.consts[name] = int(value)  # a numpy integer too, as a Python int (the cache key, the IR)

    @property
    def inputs(self):
        """What a call passes, in order: the declared inputs, then the `mut` outputs (the tensors
        the kernel updates in place)."""
        return self._inputs

    @property
    def outputs(self):
        return self.ast.outputs

    def _as_tensor(self, t, i: int):
        import numpy as np
        import torch

        if i < len(self.inputs) and self.inputs[i].dims is None:  # a runtime scalar
            p = self.inputs[i]
            if isinstance(t, torch.Tensor):  # read by the kernel from device memory (CUDA graphs)
                if t.dtype != torch.int32 or t.numel() != 1:
                    raise error(p.loc, f"runtime scalar `{p.name}` takes a Python int or a one-element int32 tensor, "
                                f"got a {t.dtype} tensor of shape {tuple(t.shape)}")
                return t
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise error(p.loc, f"runtime scalar `{p.name}` takes a Python int or a one-element int32 tensor, "
                            f"got {type(t).__name__} {t!r}")
            if not 0 <= int(t) < 2**31:
                raise error(p.loc, f"runtime scalar `{p.name}` is {int(t)}; it must be in [0, 2^31)",
                            "index values are non-negative i32")
            return int(t)
        if i < len(self.inputs) and self.inputs[i].dtype in SPARSE_FORMATS:  # a sparsity pattern
            return self._pattern(t, self.inputs[i])
        if isinstance(t, torch.Tensor):
            return t
        if isinstance(t, np.ndarray):
            t = torch.from_numpy(np.ascontiguousarray(t))
            return t.cuda() if self.target in ("tilelang", "cuda") else t
        raise TypeError(f"argument {i} of `{self.ast.name}` is a {type(t).__name__}; pass a torch tensor or a numpy array")

    def _pattern(self, obj, p):
        """Sparse input `p` (`S: csr[M, N, NNZ]`) from a torch or scipy sparse matrix, a
        tkc.sparse.SparsePattern or a Matrix Market path; checked (tkc/sparse.py), on the
        kernel's device. A bad pattern is a TkError at the parameter."""
        from tkc.sparse import SparseInputError, as_pattern

        try:
            pattern = as_pattern(obj, p.dtype)
        except SparseInputError as exc:
            raise error(p.loc, f"sparse input `{p.name}`: {exc.message}", *([exc.note] if exc.note else [])) from None
        if self.target in ("tilelang", "cuda") and pattern.rows.device.type != "cuda":
            pattern = pattern.to("cuda")
        return pattern

    def bind_dims(self, tensors) -> dict[str, int]:
        """Problem dims from the input shapes; raises TkError on count, rank or dim mismatches."""
        if len(tensors) != len(self.inputs):
            mut = f" (its inputs, then its `mut` outputs)" if self.n_mutable else ""
            raise error(self.ast.loc, f"`{self.ast.name}` takes {len(self.inputs)} arguments{mut}, got {len(tensors)}"
                        if mut else f"`{self.ast.name}` takes {len(self.inputs)} inputs, got {len(tensors)}")
        dims: dict[str, int] = {}
        for p, t in zip(self.inputs, tensors):
            if p.dims is None:  # a runtime scalar (checked by _as_tensor)
                continue
            if p.dtype in SPARSE_FORMATS:  # rows, columns, entries
                for (d, loc), n in zip(p.dims, (t.M, t.N, t.nnz)):
                    if isinstance(d, int) and d != n:
                        raise error(loc, f"`{p.name}` needs extent {d} here, got {n}")
                    if isinstance(d, str) and dims.setdefault(d, int(n)) != n:
                        raise error(loc, f"dim `{d}` is {dims[d]} elsewhere and {n} in `{p.name}`")
                continue
            if t.dim() != len(p.dims):
                raise error(p.loc, f"`{p.name}` has rank {len(p.dims)}, but the tensor has shape {tuple(t.shape)}")
            if str(t.dtype) != f"torch.{TORCH_DTYPES[p.dtype]}":
                raise error(p.loc, f"`{p.name}` is {p.dtype}, but the tensor is {t.dtype}")
            for (d, loc), n in zip(p.dims, t.shape):
                if isinstance(d, int):
                    if d != n:
                        raise error(loc, f"`{p.name}` needs extent {d} here, got {n}")
                elif isinstance(d, str) and dims.setdefault(d, int(n)) != n:
                    raise error(loc, f"dim `{d}` is {dims[d]} in one input and {n} in `{p.name}`")
        from dsl.lower_expr import fold_int

        env = {**{k: v for k, (v, _) in self.ast.consts.items()}, **self.consts, **dims}
        for p, t in zip(self.inputs, tensors):  # dims written as expressions (`f32[N / 2]`)
            if p.dims is None or p.dtype in SPARSE_FORMATS:
                continue
            for (d, loc), n in zip(p.dims, t.shape):
                if not isinstance(d, (int, str)):
                    want = fold_int(d, env)
                    if want is not None and want != n:
                        raise error(loc, f"`{p.name}` needs extent {want} here (from its dim expression), got {n}")
        return dims

    def consts_for(self, dims: dict[str, int]) -> dict[str, int]:
        """The schedule constants used at `dims`: the keyword arguments, or with `tune=True` the
        best configuration `tkc tune` measured at these dims on this GPU (tkc/tune.py; TkError
        when there is none, with the command that measures it)."""
        if not self.tune:
            return dict(self.consts)
        from tkc.tune import tuned_config

        return tuned_config(self.cache.root, self.path, self.text, dict(sorted(dims.items())), self.target)

    def specialize(self, dims: dict[str, int], scalar_refs: tuple[str, ...] = ()):
        """The compiled kernel at `dims` whose runtime scalars `scalar_refs` are read from a
        one-element device tensor (the reference interpreter takes their values instead)."""
        if self.target == INTERP:
            scalar_refs = ()
        values = {k: v for k, v in dims.items() if k in self.dynamic}
        dims = {k: v for k, v in dims.items() if k not in self.dynamic}  # one compile serves every value of those
        if self.schedule == "model":
            consts = self._model_consts(dims, values, scalar_refs)
        else:
            consts = self.consts_for(dims)
        self._compile_choice(dims, consts, scalar_refs)
        return self._built[_built_key(dims, scalar_refs, consts)]

    def _model_consts(self, dims: dict[str, int], values: dict[str, int], scalar_refs) -> dict[str, int]:
        """The constants the cost model picks at static `dims` for dynamic dims `values`
        (tkc/schedule.py). The first call at some static dims chooses for every bucket of the
        dynamic dims and compiles each distinct choice, so later calls at any value compile
        nothing; the bucket is that of the first dynamic dim (sorted by name)."""
        from tkc import schedule

        key = tuple(sorted(dims.items()))
        if key not in self._choices:
            chooser = schedule.Chooser(self.path, self.text, self.ast, dims, self.consts, self.extra_dynamic)
            self._choices[key] = {index: choice.consts for index, choice in chooser.buckets()}
            for consts in {tuple(sorted(c.items())) for c in self._choices[key].values()}:
                self._compile_choice(dims, dict(consts), scalar_refs)
        names = sorted(self.dynamic)
        return self._choices[key][schedule.bucket_of(values[names[0]]) if names and values else -1]

    def _compile_choice(self, dims, consts, scalar_refs) -> None:
        """Build one chosen configuration into `_built` (what `specialize` then finds)."""
        key = _built_key(dims, scalar_refs, consts)
        if key in self._built:
            return
        overrides = {**consts, **dims}
        if self.target == INTERP:
            module = driver.optimize(driver.frontend(self.path, overrides, dynamic=self.extra_dynamic), "tilelang")
            self._built[key] = (_Interpreted(module), _interpreter(module))
        else:
            artifact = driver.compile_file(self.path, self.target, overrides, self.cache, scalar_refs, self.extra_dynamic)
            self._built[key] = (artifact, build(artifact, self.cache))

    def __call__(self, *tensors):
        """Run on `tensors` (torch tensors, or numpy arrays, which are converted: to the GPU for the
        GPU targets); returns torch tensors. Raises TkError for a wrong count, rank, dtype or dim,
        TypeError for an argument that is neither.

        A runtime scalar is a Python int, or a one-element int32 tensor on the inputs' device that
        the kernel reads when it runs: a CUDA graph that captured the call replays it at whatever
        value the tensor then holds (one compile serves both forms' values; each form is its own
        specialization).

        Decoding calls small kernels at a high rate, so a call whose tensor inputs have the
        shapes, dtypes and device of an earlier call skips the argument checks and the
        specialization lookup (a per-signature fast path); runtime scalars, their `requires` and
        index-tensor values (token ids) are still checked on every call: on the GPU targets
        inside the kernel where it reads a value from device memory (a failed check prints its
        .tk location and stops the kernel: the launch fails at the next synchronize, as torch's
        own indexing does on the device; no host sync, so calls capture into CUDA graphs), on
        the host otherwise (see `assume_valid`)."""
        import torch

        try:  # (a Python int, a runtime scalar's value, is None in the signature)
            sig = tuple([None if type(t) is int else (t.shape, t.dtype, t.device) for t in tensors])
        except AttributeError:  # not a torch tensor: the full path converts it or reports it
            sig = None
        plain = self._plain.get(sig) if self._plain and sig is not None else None
        if plain is not None:  # dense tensors only, nothing to check per call: allocate and launch
            jit, outs, _ = plain
            first = tensors[0]  # on the signature's device (new_empty: 0.5 us less than torch.empty)
            outputs = [first.new_empty(shape, dtype=dtype) for shape, dtype in outs]
            jit(*[t if t.is_contiguous() else t.contiguous() for t in tensors], *outputs)
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        scalar = self._scalar.get(sig) if self._scalar and sig is not None else None
        if scalar is not None:  # dense tensors and int scalars: check the scalars, allocate, launch
            jit, outs, at, checks = scalar
            values = [tensors[i] for i in at]
            if all(0 <= v < 2147483648 for v in values) and checks(*values):
                arrays = [t if t.is_contiguous() else t.contiguous() for t in tensors if type(t) is not int]
                first = arrays[0]
                outputs = [first.new_empty(shape, dtype=dtype) for shape, dtype in outs]
                jit(*arrays, *outputs, *values)
                return outputs[0] if len(outputs) == 1 else tuple(outputs)
        if self._sampled_at is not None and len(tensors) == len(self._inputs):
            memo = getattr(tensors[self._sampled_at], "_memo", None)  # a SparsePattern seen before
            if memo is not None:
                try:
                    record = memo.get((self._token, self.dot_below, tuple([
                        None if i == self._sampled_at else (t.shape, t.dtype, t.device) for i, t in enumerate(tensors)])))
                except AttributeError:  # not a tensor: the full path reports it
                    record = None
                if record is not None:
                    return self._sampled_call(record, tensors)

        from tkc.sparse import SparsePattern

        original = tensors
        key = None
        if len(tensors) == len(self.inputs):
            try:  # a sparse input joins the fast path as a checked SparsePattern (its shape is the key)
                key = tuple((t.M, t.N, t.nnz, t.fmt, t.rows.device) if p.dtype in SPARSE_FORMATS and
                            isinstance(t, SparsePattern) and t._memo.get("checked") else
                            None if p.dtype in SPARSE_FORMATS else
                            (t.shape, t.dtype, t.device) if p.dims is not None or isinstance(t, torch.Tensor)
                            else (type(t) is int) for p, t in zip(self.inputs, tensors))
                key = None if None in key else key
            except AttributeError:  # a numpy array or a bad argument: the slow path reports it
                key = None
        fast = self._fast.get(key) if key is not None else None
        if fast is None:
            tensors = tuple(self._as_tensor(t, i) for i, t in enumerate(tensors))
            refs = tuple(p.name for p, t in zip(self.inputs, tensors) if p.dims is None and not isinstance(t, int))
            dims = self.bind_dims(tensors)
            artifact, jit = self.specialize(dims, refs)
            module = artifact.module
            args = module.func.body.args
            dynamic = {k: v for k, v in dims.items() if k in self.dynamic}  # this signature's values
            outs = [(a.type.concrete_shape({**module.env, **dynamic}), getattr(torch, TORCH_DTYPES[a.type.dtype]))
                    for a in (args[i] for i in module.func.attrs["outputs"])]
            from dsl.ops import index_bounds

            scalar_names = [p.name for p in self.inputs if p.dims is None]
            runtime = any(op.name == "tile.require" and op.attrs.get("runtime") for op in module.func.body.ops)
            bounds = index_bounds(module.func, module.env)
            n_in = sum((2 if p.dtype in SPARSE_FORMATS else 1) for p in self.inputs if p.dims is not None)
            # The GPU targets check index tensors and runtime scalars read from device memory in
            # the kernel (codegen/cuda.py c_load and device_checks, the TileLang prelude's
            # tk_index_* and tk_require_*): no host sync; the CPU targets check them here.
            device_checked = self.target in ("cuda", "tilelang") and self._sampled(module) is None
            indexed = [] if device_checked else [(k, a.name, bounds[a.name]) for k, a in enumerate(args[:n_in])
                                                 if a.name in bounds]
            zeroed = {op.operands[4].name for op in module.func.walk()  # a dense sampled-gemm output: 0
                      if op.name == "tile.sampled_gemm" and op.operands[4].type.rank == 2}  # off the pattern
            outs = [(shape, dtype, a.name in zeroed) for (shape, dtype), a in
                    zip(outs, (args[i] for i in module.func.attrs["outputs"]))]
            fast = (module, jit, outs, scalar_names, runtime, indexed, self._sampled(module), dynamic, device_checked)
            if key is not None:
                self._fast[key] = fast
                if (self._plain_ok and not runtime and not indexed and fast[6] is None and not any(z for _, _, z in outs)
                        and self.target != INTERP):
                    self._plain[tuple((t.shape, t.dtype, t.device) for t in tensors)] = (
                        jit, [(shape, dtype) for shape, dtype, _ in outs], tensors[0].device)
                elif (self._scalar_ok and sig is not None and not indexed and fast[6] is None
                        and not any(z for _, _, z in outs) and self.target != INTERP):
                    entry = _scalar_entry(module, self.inputs, original, dynamic, scalar_names)
                    if entry is not None:
                        self._scalar[sig] = (jit, [(shape, dtype) for shape, dtype, _ in outs], *entry)
        else:
            tensors = tuple(self._as_tensor(t, i) if p.dims is None or p.dtype in SPARSE_FORMATS else t
                            for i, (p, t) in enumerate(zip(self.inputs, tensors)))
        module, jit, outs, scalar_names, runtime, indexed, sampled, dynamic, device_checked = fast
        values = [t for p, t in zip(self.inputs, tensors) if p.dims is None]
        arrays = [x for p, t in zip(self.inputs, tensors) if p.dims is not None
                  for x in ((t.rows, t.cols) if p.dtype in SPARSE_FORMATS else (t,))]
        mut = arrays[len(arrays) - self.n_mutable:]  # the `mut` outputs' tensors, in order
        arrays = arrays[:len(arrays) - self.n_mutable]
        given = iter(mut)
        device = (arrays or mut)[0].device
        refs = [(n, t) for n, t in zip(scalar_names, values) if not isinstance(t, int)]
        for n, t in refs:
            if t.device != device:
                raise error(self.ast.loc, f"runtime scalar `{n}` is a tensor on {t.device}, but the kernel runs on "
                            f"{device}", f"put `{n}` on {device}")
        if refs and device_checked:  # in the kernel; the `requires` over host values are checked here
            if runtime:
                check_runtime(module, {**dynamic, **{n: t for n, t in zip(scalar_names, values) if isinstance(t, int)}},
                              skip={n for n, _ in refs})
        elif refs or indexed:
            if _assumed.get():
                pass  # the caller vouches for the values (assume_valid): no host sync
            elif device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                what = f"runtime scalar `{refs[0][0]}`" if refs else f"index tensor `{indexed[0][1]}`"
                raise error(self.ast.loc, f"`{self.ast.name}` checks the value of {what} before it launches, which "
                            "needs a host sync that CUDA-graph capture forbids",
                            "check the values yourself and capture inside `with tkc.assume_valid():`")
            else:
                for n, t in refs:
                    v = int(t.reshape(()).item())  # one host sync
                    if not 0 <= v < 2**31:
                        p = next(p for p in self.inputs if p.name == n)
                        raise error(p.loc, f"runtime scalar `{n}` is {v}; it must be in [0, 2^31)",
                                    "index values are non-negative i32")
                if runtime:
                    check_runtime(module, {**dynamic, **{n: t if isinstance(t, int) else int(t.reshape(()).item())
                                                         for n, t in zip(scalar_names, values)}})
                if indexed:
                    check_indices(module, {name: arrays[k] for k, name, _ in indexed},
                                  {name: hi for _, name, hi in indexed})
        elif runtime:
            check_runtime(module, {**dynamic, **dict(zip(scalar_names, values))})
        if self.target == INTERP:  # the interpreter takes values
            values = [t if isinstance(t, int) else int(t.reshape(()).item()) for t in values]
        else:
            values = [t if isinstance(t, int) else t.reshape(1) for t in values]
        outputs = []
        for p, (shape, dtype, zeroed) in zip(self.ast.outputs, outs):
            if p.mutable:
                t = next(given)
                if not t.is_contiguous() or t.device != device:
                    raise error(p.loc, f"`mut` output `{p.name}` must be a contiguous tensor on the inputs' device "
                                f"(it is updated in place); got {'a non-contiguous' if not t.is_contiguous() else 'a'} "
                                f"tensor on {t.device}", f"pass `{p.name}.contiguous()` and keep that tensor")
                outputs.append(t)
            else:
                outputs.append((torch.zeros if zeroed else torch.empty)(shape, dtype=dtype, device=device))
        extras, fill = [], {}
        if sampled is not None and self.target != INTERP:  # the tile lists of a sampled gemm (SDDMM)
            plan, bt, fill = self._sampled_launch_data(sampled, tensors, jit)
            if (key is not None and self._sampled_at is not None and not values and not runtime and not indexed
                    and all(isinstance(t, torch.Tensor) for i, t in enumerate(original) if i != self._sampled_at)):
                given_pattern = original[self._sampled_at]
                if isinstance(given_pattern, SparsePattern):  # keep what its next calls need in its memo
                    pattern = tensors[self._sampled_at]
                    given_pattern._memo[(self._token, self.dot_below, tuple([
                        None if i == self._sampled_at else (t.shape, t.dtype, t.device)
                        for i, t in enumerate(original)]))] = (
                        jit, [(shape, dtype, zeroed) for shape, dtype, zeroed in outs], pattern, plan, sampled[1], {})
            if plan.n_tc + plan.n_dot == 0:  # no entries: nothing to launch (P is empty or zeros)
                return outputs[0] if len(outputs) == 1 else tuple(outputs)
            extras = [bt, *plan.launch_tensors(self.target)]
        jit(*[t if t.is_contiguous() else t.contiguous() for t in arrays], *outputs, *values, *extras, **fill)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _sampled_call(self, record, tensors):
        """A sampled gemm's call on a pattern object seen before with this dense signature
        (`record`, kept in the pattern's memo by the full path): allocate the outputs, pick B's
        transposed form, launch. On `cuda` with B contiguous, the launch is bound to the pattern
        and plan after the first such call (`_bound`): only the dense operands', the outputs' and
        Bt's pointers are taken per call."""
        jit, outs, pattern, plan, b_at, bindings = record
        first = pattern.rows  # on the kernel's device
        outputs = [first.new_zeros(shape, dtype=dtype) if zeroed else first.new_empty(shape, dtype=dtype)
                   for shape, dtype, zeroed in outs]
        b = tensors[b_at]
        bound = bindings.get("cuda")
        if bound is not None and b.is_contiguous():  # per call: the dense operands, the outputs, Bt
            at = self._sampled_at
            bt = b.new_empty((b.shape[1], b.shape[0])) if bound[1] else b  # (a view of B has B's pointer)
            bound[0](*[t if t.is_contiguous() else t.contiguous() for i, t in enumerate(tensors) if i != at],
                     *outputs, bt)
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        if plan.n_tc + plan.n_dot == 0:
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        arrays = []
        for i, t in enumerate(tensors):
            if i == self._sampled_at:
                arrays += [pattern.rows, pattern.cols]
            else:
                arrays.append(t if t.is_contiguous() else t.contiguous())
        bt, fill = self._b_transposed(plan, b, jit, pattern)
        launch_tensors = plan.launch_tensors(self.target)
        jit(*arrays, *outputs, bt, *launch_tensors, **fill)
        if self.target == "cuda" and b.is_contiguous() and "cuda" not in bindings:
            bindings["cuda"] = self._bound(jit, arrays, outputs, b, bt, launch_tensors, fill)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _bound(self, jit, arrays, outputs, b, bt, launch_tensors, fill):
        """(SampledBinding, whether Bt is allocated per call) for a `cuda` sampled gemm's calls
        with B contiguous (and a plan with entries), or None where
        the call cannot be bound: a CudaLaunch without `bind_sampled`, a Bt that is neither B's
        memory (a view of B) nor the kernel's own transpose (`fill_bt`), a bound array that is
        not 16-byte aligned."""
        fresh = bool(fill.get("fill_bt"))
        bind = getattr(jit, "bind_sampled", None)
        if bind is None or (not fresh and bt.data_ptr() != b.data_ptr()):
            return None
        at = self._sampled_at  # (the pattern's rows and cols sit at at and at + 1 of `arrays`)
        static = (at, at + 1)
        tensors = [*arrays, *outputs, bt, *launch_tensors]
        per_call = [i for i in range(len(arrays) + len(outputs) + 1) if i not in static]
        binding = bind(tensors, per_call, **fill)
        return None if binding is None else (binding, fresh)

    def _b_transposed(self, plan, b, jit, pattern):
        """(Bt, launch keywords) for the dot products of `plan` (and the tensor-core tiles of a
        `cuda` kernel whose tiles read it, `jit.tc_reads_bt`): free for a transposed view of B,
        left to the kernel's own transpose on `cuda` (`fill_bt`: faster than torch's), unread (a
        free [N, K] view of B, the shape TileLang checks) when no kernel of the launch reads it.
        On `cuda` the keywords also carry `dot_sequential` when the plan's dot_order is the
        identity (the kernel then reads no dot_order), or `dot_panels` (tkc.sparse.DotPanels) where
        the dot products go by column panels of B itself (`_panels_preferred`), and then no
        kernel reads Bt unless the tiles do. Before all that, on `cuda` at K = 32 with 16-bit
        operands, `row_groups` (tkc.sparse.RowGroups) where the pattern is large and dense enough
        per group of rows (`_groups_for`): `<kernel>_groups` then computes every entry from Bt, no
        tiles and no dot products (B transposed by `<kernel>_groups_b` itself where it has one:
        `groups_from_b`). `pattern`: the call's tkc.sparse.SparsePattern, on B's device."""
        if self.target == "cuda" and getattr(jit, "group_kernel", None):
            groups = _groups_for(plan, jit, pattern, b.get_device())
            if groups is not None:
                if b.t().is_contiguous():
                    return b.t(), {"row_groups": groups}
                if GROUP_PANELS_FROM_B and getattr(jit, "group_b_kernel", None) and b.is_contiguous():
                    return b.reshape(b.shape[1], b.shape[0]), {"row_groups": groups, "groups_from_b": True}
                return b.new_empty((b.shape[1], b.shape[0])), {"fill_bt": True, "row_groups": groups}
        pattern_tensors = (pattern.rows, pattern.cols)
        seq = {"dot_sequential": True} if self.target == "cuda" and plan.dot_sequential else {}
        tiles_read_bt = bool(plan.n_tc and getattr(jit, "tc_reads_bt", False))
        if (self.target == "cuda" and plan.n_dot and not tiles_read_bt and getattr(jit, "panel_kernel", None)
                and b.numel() * b.element_size() <= jit.l2_bytes(b.get_device()) * PANEL_B_L2_SHARE):
            panels = _panels_for(plan, jit, pattern_tensors, b.shape[1], b.get_device())
            if panels is not None:
                return b.reshape(b.shape[1], b.shape[0]), {"dot_panels": panels}
        if plan.n_dot == 0 and not tiles_read_bt:
            return b.reshape(b.shape[1], b.shape[0]), seq
        if b.t().is_contiguous():
            return b.t(), seq
        if self.target == "cuda":
            return b.new_empty((b.shape[1], b.shape[0])), {"fill_bt": True, **seq}
        return b.t().contiguous(), seq

    def _sampled_launch_data(self, sampled, tensors, jit):
        """(plan, Bt, launch keywords) of a sampled gemm for `tensors` (the call's inputs, the
        pattern on the kernel's device): the pattern's tkc.sparse.DispatchPlan at the pass's
        threshold (or `self.dot_below`), and B transposed for the dot products (`_b_transposed`)."""
        from tkc.sparse import dispatch_plan

        pattern_at, b_at, bm, bn, dot_below = sampled
        if self.dot_below is not None and dot_below <= bm * bn:  # (no override without a tensor-core path)
            dot_below = int(self.dot_below)
        pattern = tensors[pattern_at]
        sms = 0  # (on `cuda`: the tiles past one per SM launched lightest at both ends, tkc.sparse.tile_order)
        if self.target == "cuda" and getattr(jit, "tc_kernel", None) and pattern.rows.is_cuda:
            index = pattern.rows.get_device()
            sms = jit.resident(index, jit.function(index, jit.tc_kernel).kernel.ptr)[1]
        plan = dispatch_plan(pattern, bm, bn, dot_below, sms)
        return (plan, *self._b_transposed(plan, tensors[b_at], jit, pattern))

    def _sampled(self, module):
        """(pattern input position, B input position, BM, BN, dot_below) of the kernel's sampled
        gemm, or None: the runtime passes its launch data (tkc.sparse.DispatchPlan and B
        transposed) after the outputs."""
        from dsl import exprs

        op = next((op for op in module.func.walk() if op.name == "tile.sampled_gemm"), None)
        if op is None:
            return None
        name = op.attrs["pattern"]
        b_name = op.operands[1].name
        pattern_at = next(i for i, p in enumerate(self.inputs) if p.name == name)
        b_at = next(i for i, p in enumerate(self.inputs) if p.name == b_name)
        bm, bn = (exprs.evaluate(exprs.parse(x), module.env) for x in op.attrs["tile"])
        return pattern_at, b_at, bm, bn, int(op.attrs.get("dot_below", 0))

    @property
    def dot_below(self) -> int | None:
        """A sampled gemm's split (SDDMM): tiles with fewer entries than this are dot products, the
        rest tensor-core tiles. None (the default) is the `sparse-dispatch` pass's choice (`tkc
        compile --explain`); 0 forces tensor cores everywhere, a number above BM * BN dot products
        everywhere (for measurements and tests; f32 operands have dot products only). Setting
        anything but None or an int >= 0 raises TypeError or ValueError."""
        return self._dot_below

    @dot_below.setter
    def dot_below(self, value) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise TypeError(f"`dot_below` is a {type(value).__name__}; expected None (the sparse-dispatch pass's "
                            "split) or an int, the entries per tile below which a tile's entries are dot products")
        if value is not None and value < 0:
            raise ValueError(f"`dot_below` is {value}; expected None or an int >= 0 (0: every tile on tensor cores)")
        self._dot_below = None if value is None else int(value)

    @property
    def specializations(self) -> int:
        """How many kernels this Kernel has compiled (one per distinct set of static dims and
        constants: dynamic dims add none; `schedule="model"` one per distinct bucket choice)."""
        return len(self._built)

    @property
    def n_mutable(self) -> int:
        return sum(p.mutable for p in self.ast.outputs)

    def as_torch_op(self, name: str | None = None, **options):
        """This kernel as a torch custom op (tkc/torch_op.py `register`: schema, fake impl, errors)."""
        from tkc import torch_op

        return torch_op.register(self, name, **options)


# The `cuda` SDDMM's dot products go by column panels of B (tkc.sparse.DotPanels, `<kernel>_panels`: no transpose
# of B, each entry's row of A from global memory) where a panel holding entries has at most this many on average;
# denser panels keep B's transpose and `<kernel>_dots` (entries by rows, consecutive entries sharing A's row in L1).
# H200, us per call, panels / transpose and dots (benchmarks/probes/sddmm_col_panels.py, docs/PERFORMANCE.md):
# 4000^2 88k uniform (352 per panel) 15.1 / 15.8, R-MAT 16.3 / 19.9; 37000^2 368k (160) 51.8 / 54.5; 35000^2 422k
# (193) 53.3 / 56.1; 10000^2 1M (1600) 87.0 / 75.6 (work items of 128 entries). Items of 256 entries where they
# still fill the resident blocks: 37000^2 48.3, 35000^2 51.5 (in one call where items of 128 took 52.6 and 52.9; at
# 4000^2, 500 items of 256 took 20.4 against 16.2 for 760 of 128).
PANEL_MEAN_MAX = 512
# ... and where B takes at most this share of the GPU's L2: each work item reads its panel as one 32-byte piece of
# each of K rows of B, cheap from L2. Where B was larger (106000^2 with 3M uniform entries, 54 MB; 916000^2 with 5M,
# 469 MB) the panels' first form (8 entries per group) took 442.7 and 1304.9 us per call against 303.1 and 1158.0 for
# the rows in an earlier table (H200, 50 MB L2; docs/PERFORMANCE.md); below it, 37000^2 (19 MB) gained 14%.
PANEL_B_L2_SHARE = 0.5


# ... and where an item size keeps the padding of the work items' slots (tkc.sparse.DotPanels: each item's entries
# at a fixed stride of its size) to at most this many slots per entry; else B's transpose and the dot products by rows.
PANEL_SLOTS_PER_ENTRY_MAX = 2.0
PANEL_ROUND = 32  # the smallest work item taken: a round of `<kernel>_panels` (128 threads, 16 lanes x 4 entries) at K = 256


def _panels_preferred(per_panel: float) -> bool:
    """Whether a `cuda` SDDMM call computes its dot products by column panels (PANEL_MEAN_MAX)."""
    return 0 < per_panel <= PANEL_MEAN_MAX


# The `cuda` SDDMM at K = 32 with f16 or bf16 operands computes every entry by row groups (tkc.sparse.RowGroups,
# `<kernel>_groups`: a warp's 8 rows of A against 16 entries' rows of Bt gathered from a panel in shared memory, on
# mma.sync) in place of the tiles and dot products, where the pattern has at least GROUP_NNZ_MIN entries, at most
# GROUP_DENSITY_MAX of S, and at least GROUP_CELL_MEAN_MIN on average per (group of 8 rows, panel of Bt) holding
# any: every block loads a 160 KB panel, and each work item loads its 8 rows of A and runs whole batches of 16.
# H200, 2026-11-29, us per call (do_bench) / graph replay, the tkc call before this rule against `<kernel>_groups`
# (benchmarks/probes/sddmm_row_groups.py --compiled, one run): 10000^2 5M uniform 58.5 / 53.2 against 42.6 / 37.9,
# R-MAT 58.3 / 45.0 against 44.2 / 39.5; 10000^2 1M 51.0 / 17.6 against 18.3 / 12.5; 8000^2 640k 18.5 / 12.8
# against 17.6 / 12.1. Not taken: 4000^2 88k (85 per item) 8.1 / 5.1 against 10.5 / 5.6; 37000^2 368k (5 per
# item) 17.2 / 11.9 against 53.6 / 44.7; 1504^2 746k R-MAT (33% of S, dense tensor-core tiles) 22.4 / 7.0 against
# 14.5 / 8.8.
GROUP_NNZ_MIN = 500_000
GROUP_DENSITY_MAX = 0.2
GROUP_CELL_MEAN_MIN = 48
# ... B given as [K, N] (not a transposed view): `<kernel>_groups_b` transposes each block's panel from B itself
# where N % 8 == 0, instead of B's transpose kernel before `<kernel>_groups`.
GROUP_PANELS_FROM_B = True


def _groups_for(plan, jit, pattern, index: int):
    """The tkc.sparse.RowGroups a `cuda` SDDMM call at K = 32 takes (None: the tiles and dot
    products), kept in the plan per (device, thresholds): where the pattern meets GROUP_NNZ_MIN,
    GROUP_DENSITY_MAX and GROUP_CELL_MEAN_MIN (its cells counted only past the first two), planned
    over the blocks of `<kernel>_groups` resident at once (jit.group_blocks)."""
    import torch

    from tkc import sparse as sp

    key = ("group_choice", index, jit.group_dense, GROUP_NNZ_MIN, GROUP_DENSITY_MAX, GROUP_CELL_MEAN_MIN)
    if key not in plan._memo:
        chosen = None
        nnz = pattern.nnz
        if (GROUP_NNZ_MIN <= nnz <= GROUP_DENSITY_MAX * pattern.M * pattern.N
                and nnz >= GROUP_CELL_MEAN_MIN * torch.unique(sp.group_cells(pattern, 32)).numel()):
            chosen = sp.row_groups(pattern, 32, jit.group_blocks(index), jit.group_dense)
        plan._memo[key] = chosen
    return plan._memo[key]


def _panels_for(plan, jit, pattern_tensors, N: int, index: int):
    """The tkc.sparse.DotPanels a `cuda` SDDMM call takes (None: B's transpose and the dot products
    by rows), kept in the plan per (N, launch, device, thresholds). Work items of twice the launch
    line's `panel_entries` where they still fill the panel kernel's resident blocks (`panel_slots`:
    fewer loads of each panel), else of `panel_entries`, halved (down to PANEL_ROUND) while their
    slots exceed PANEL_SLOTS_PER_ENTRY_MAX per entry; None where no size keeps to that."""
    key = ("panel_choice", N, jit.panel_width, jit.panel_entries, index, PANEL_MEAN_MAX, PANEL_SLOTS_PER_ENTRY_MAX)
    if key not in plan._memo:
        counts = plan.panel_counts(*pattern_tensors, N, jit.panel_width)
        used = int((counts > 0).sum())
        chosen = None
        if used and _panels_preferred(plan.n_dot / used):
            def items(size):  # work items of at most `size` entries
                return int((-(-counts // size)).sum())

            sizes = [jit.panel_entries]
            if items(2 * jit.panel_entries) >= jit.panel_slots(index):
                sizes.insert(0, 2 * jit.panel_entries)
            while sizes[-1] // 2 >= PANEL_ROUND:
                sizes.append(sizes[-1] // 2)
            for size in sizes:
                slots = items(size) * size
                if slots <= PANEL_SLOTS_PER_ENTRY_MAX * plan.n_dot and slots <= 2**31 - 1:
                    chosen = plan.dot_panels(*pattern_tensors, N, jit.panel_width, size)
                    break
        plan._memo[key] = chosen
    return plan._memo[key]


def _built_key(dims: dict[str, int], scalar_refs, consts: dict[str, int]) -> tuple:
    """A compiled kernel's key in Kernel._built: its static dims, the runtime scalars it reads
    from device tensors (another form of the kernel) and its schedule constants."""
    return (tuple(sorted(dims.items())), tuple(sorted(scalar_refs)), tuple(sorted(consts.items())))


_assumed = contextvars.ContextVar("tkc_assume_valid", default=False)


@contextlib.contextmanager
def assume_valid():
    """Inside this block, kernel calls on the CPU targets do not check the values of runtime
    scalars passed as tensors (their range and `requires` clauses) or of index tensors on the
    host; the caller guarantees them, and an out-of-range one reads or writes outside the
    tensors. The GPU targets check both inside the kernel whatever this block says (no host
    sync, so their calls capture into CUDA graphs without it). Calls with Python-int scalars
    are always checked (on the host, no sync)."""
    token = _assumed.set(True)
    try:
        yield
    finally:
        _assumed.reset(token)


def _scalar_entry(module, inputs, call, dynamic: dict[str, int], scalar_names: list[str]):
    """(the runtime scalars' positions in a call, the `requires` clauses over them folded at the
    module's dims and `dynamic` as one test, _holds) for Kernel's int-scalar path, or None where a call
    `call` whose scalars are all Python ints cannot take it (a clause that reads anything else)."""
    at = [i for i, p in enumerate(inputs) if p.dims is None]  # (the positions of `scalar_names`)
    if not all(type(call[i]) is int for i in at):  # a scalar passed as a tensor
        return None
    env = {**module.env, **dynamic}
    checks = []
    for op in module.func.body.ops:
        if op.name == "tile.require" and op.attrs.get("runtime"):
            cond = exprs.substitute(exprs.parse(op.attrs["cond"]), env)
            if exprs.loads(cond) or not exprs.names(cond) <= set(scalar_names):
                return None
            checks.append(cond)
    return at, _holds(checks, scalar_names)


def _holds(conds: list, names: list[str]):
    """A function of the runtime scalars `names` (Python ints, in order) that is true where every
    condition of `conds` (dsl.exprs trees over those names) holds, false where one fails or
    divides by zero (the full path then reports it): the trees written once as one Python
    expression, so a call pays no tree walk."""
    def py(e) -> str:
        if isinstance(e, exprs.Num):
            return str(int(e.value))
        if isinstance(e, exprs.Sym):
            return "s_" + e.name
        if isinstance(e, exprs.Call):
            a, b = (py(x) for x in e.args)
            return {"cdiv": f"(-(-{a} // {b}))", "min": f"min({a}, {b})", "max": f"max({a}, {b})"}[e.fn]
        op = {"/": "//"}.get(e.op, e.op)
        return f"({py(e.a)} {op} {py(e.b)})"

    body = " and ".join(f"bool({py(c)})" for c in conds) or "True"
    params = ", ".join("s_" + n for n in names)
    test = eval(f"lambda {params}: {body}", {"__builtins__": {"bool": bool, "min": min, "max": max}})  # noqa: S307

    def holds(*values):
        try:
            return test(*values)
        except ZeroDivisionError:
            return False

    return holds


def check_runtime(module, values: dict[str, int], skip: set[str] = frozenset()) -> None:
    """Check the `requires` clauses on runtime scalars with the call's `values` (name -> int),
    except those that mention a name in `skip` (scalars the kernel checks itself); raises
    TkError at the clause that fails."""
    from dsl import exprs

    env = {**module.env, **values}
    for op in module.func.body.ops:
        if op.name == "tile.require" and op.attrs.get("runtime"):
            cond = exprs.parse(op.attrs["cond"])
            if exprs.names(cond) & skip:
                continue
            if not exprs.evaluate(cond, env):
                vals = ", ".join(f"{n} = {env[n]}" for n in sorted(exprs.names(cond)))
                raise error(op.loc, f"requirement `{op.attrs['cond']}` does not hold at this call", f"with {vals}")


def check_indices(module, tensors: dict, bounds: dict | None = None) -> None:
    """Index tensors (read by `ids[b]` in index expressions) must hold values in [0, bound) of
    dsl.ops.index_bounds: an out-of-range token id is a user error, never a silently guarded
    (zero) row. The CPU targets' check (the GPU targets check in the kernel): one min-max
    reduction per index tensor."""
    import torch

    from dsl.ops import index_bounds

    if bounds is None:
        bounds = index_bounds(module.func, module.env)
    for name, hi in bounds.items():
        t = tensors.get(name)
        if t is None or t.numel() == 0:
            continue
        lo_v, hi_v = (int(x) for x in torch.stack(torch.aminmax(t)).tolist())  # one host sync
        if lo_v < 0 or hi_v >= hi:
            bad = lo_v if lo_v < 0 else hi_v
            raise error(_index_site(module.func, name), f"index tensor `{name}` holds {bad}, outside [0, {hi}) of "
                        "what it indexes", "index values select rows (or columns) of a tensor and must lie inside it")


def _index_site(func, name: str):
    """The location of the first copy whose offsets read index tensor `name` (where the GPU
    targets' in-kernel check reports too), else the kernel's."""
    from dsl import exprs

    for op in func.walk():
        if op.name == "tile.copy" and any(name in exprs.loads(exprs.parse(off)) for key in ("src_offsets", "dst_offsets")
                                          for off in op.attrs.get(key) or ()):
            return op.loc
    return func.loc


def compile(path: str, target: str = "tilelang", cache_dir: str | None = None, tune: bool = False,
            dynamic: tuple[str, ...] = (), schedule: str = "file", **consts: int) -> Kernel:
    """Compile the .tk kernel at `path` for `target` ("tilelang" on a GPU, "tilelang-cpu" on the
    CPU, "interp" for the reference interpreter) with schedule constants `consts` (e.g. BM=128)
    overriding the file's defaults. With `tune=True` (GPU targets only, no `consts`) the
    constants are, per set of dims, the best configuration `tkc tune` measured for this source,
    these dims, this GPU and target; dims never tuned raise TkError at the first call, with the
    `tkc tune` command to run (no silent fallback to the defaults).

    `dynamic` names problem dims to leave symbolic besides those of the kernel's `dynamic`
    clause (e.g. `dynamic=("M",)`): calls at any value of them share one compiled kernel (on
    `target="cuda"` each is an int kernel argument; a grid extent that grows past CUDA's limit
    along y or z at some value is a TkError at that call).

    `schedule="model"` picks the schedule constants that `consts` leave open from the kernel's
    `tune` space with the cost model (tkc/schedule.py, passes/cost_model.py), per shape, or per
    bucket of the dynamic dims (every bucket's choice is compiled at the first call).

    Returns a callable on torch tensors (numpy arrays are converted) that allocates and returns
    the outputs. Raises dsl.diagnostics.TkError for user errors, here already for an unknown
    target, a keyword that is not a schedule constant of the kernel (a problem dim given as a
    keyword included: dims come from the tensors) and a non-int value; at the first call for
    syntax, types, shapes and the shared-memory budget.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise error(Loc("<tkc.compile>", 0, 0), f"the kernel's path must be a str or os.PathLike, got "
                    f"{type(path).__name__}", "pass the .tk file's path")
    path = os.fspath(path)
    if path.endswith(".tkir"):  # (`tkc compile` and `tkc opt` read IR; a kernel to call is its .tk source)
        raise error(Loc(path, 0, 0), "tkc.compile takes a .tk kernel; this is IR text (.tkir)",
                    "run the .tk file the IR came from; `tkc compile FILE.tkir --target ...` and `tkc opt "
                    "FILE.tkir` read IR")
    if target not in LAUNCH_TARGETS:
        raise error(Loc(path, 0, 0), f"target `{target}` cannot be launched", f"use one of {', '.join(LAUNCH_TARGETS)}")
    from tkc.cache import usable

    return Kernel(path, target, consts, usable(cache_dir) if cache_dir else None, tune, tuple(dynamic), schedule)

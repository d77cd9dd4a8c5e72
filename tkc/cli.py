"""The `tkc` command line: compile, run, opt, tune (contract in DESIGN.md, usage in README.md).

Exit status: 0 on success, 1 for user errors (rendered `FILE:LINE:COL: error: ...` with the
source line, a caret and notes) and failed `--check`s, 2 for internal compiler errors.
"""

from __future__ import annotations

import argparse
import os
import sys
import shutil
import tempfile
import traceback

from dsl.diagnostics import Loc, TkError, error
from tkc.oracle import DISTRIBUTIONS

TARGETS = ("tilelang", "tilelang-cpu", "tir", "cuda")


def _define(text: str) -> tuple[str, int]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got `{text}`")
    try:
        return name.strip(), int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"`{name}` must be an integer, got `{value}`") from None


def _pattern(text: str) -> tuple[str, str]:
    name, eq, source = text.partition("=")
    if not eq or not name.strip().isidentifier() or not source:
        raise argparse.ArgumentTypeError(f"expected NAME=SOURCE (`S=uniform`, `S=rmat` or `S=FILE.mtx`), got `{text}`")
    return name.strip(), source


class _ArgParser(argparse.ArgumentParser):
    """Usage errors are user errors: exit status 1 (2 is reserved for internal errors)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _ArgParser(prog="tkc", description="Compiler for the tkc tile kernel language.")
    p.add_argument("--cache-dir", help="cache directory (default: $TKC_CACHE_DIR or ~/.cache/tkc)")
    p.add_argument("--debug", action="store_true", help="print tracebacks of internal errors")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_ArgParser)

    c = sub.add_parser("compile", help="print or write the generated code")
    c.add_argument("file")
    c.add_argument("--target", default="tilelang", choices=TARGETS)
    c.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE",
                   help="set a schedule constant or problem dim")
    c.add_argument("--dynamic", action="append", default=[], metavar="DIM",
                   help="leave this problem dim symbolic, as the kernel's `dynamic` clause does: one "
                   "compiled kernel serves every value (repeat for several)")
    c.add_argument("--schedule", default="file", choices=("file", "model"),
                   help="model: choose the schedule constants that -D leaves open from the kernel's `tune` "
                   "space with the cost model (per bucket of the dynamic dims; --explain prints the choice)")
    c.add_argument("-o", dest="output", help="write the code here instead of stdout")
    c.add_argument("--explain", action="store_true",
                   help="print the passes' decisions and the estimates behind them (the sampled gemm's "
                   "tensor-core / dot-product split) instead of the code")

    r = sub.add_parser("run", help="run on random inputs; --check compares with the torch reference")
    r.add_argument("file")
    r.add_argument("--target", default=None, choices=("tilelang", "tilelang-cpu", "cuda", "interp"),
                   help="default: tilelang on a CUDA GPU (cuda for `sync grid` kernels), else tilelang-cpu (interp for cluster and `sync grid` kernels); interp: the reference interpreter")
    r.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE")
    r.add_argument("--check", action="store_true", help="compare with the reference; exit 1 on mismatch")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--rtol", type=float, default=None,
                   help="max relative error for --check (default: derived from the kernel's dtypes and reduction length)")
    r.add_argument("--pattern", dest="patterns", action="append", type=_pattern, default=[], metavar="NAME=SOURCE",
                   help="the pattern of sparse input NAME: `uniform` (the default: NNZ random entries), `rmat` "
                        "(power-law R-MAT entries) or the path of a Matrix Market file, whose shape and entry count "
                        "then set the pattern's dims")
    r.add_argument("--inputs", default="normal", choices=DISTRIBUTIONS,
                   help="input distribution (default normal): negative, offset (positive, no cancellation), "
                        "wide (wide dynamic range), ints (small integers: f32 results exact)")

    o = sub.add_parser("opt", help="run a pass pipeline and print the IR")
    o.add_argument("file", help=".tk source or .tkir IR")
    o.add_argument("-p", "--pipeline", default="", help="e.g. tile{BM=64},software-pipeline,check-smem-fit")
    o.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE")
    o.add_argument("--dynamic", action="append", default=[], metavar="DIM",
                   help="leave this problem dim symbolic (as the kernel's `dynamic` clause)")
    o.add_argument("--print-ir-after-all", action="store_true")
    o.add_argument("--verify-diagnostics", action="store_true",
                   help="check the diagnostics against the file's `# expected-error {{...}}` annotations "
                   "(exit 0 when they match; docs/LANGUAGE.md, Diagnostics)")
    o.add_argument("--split-input-file", action="store_true",
                   help="with --verify-diagnostics: compile each piece between `# -----` lines on its own")
    o.add_argument("--target", default=None, choices=("tilelang", "tilelang-cpu", "cuda"),
                   help="with --verify-diagnostics: the default pipeline of this target (unless -p), then its "
                   "backend emits the code (no C/CUDA build), so the backend's rejections can be expected")

    t = sub.add_parser("tune", help="search the schedule constants for the fastest configuration on this GPU")
    t.add_argument("file")
    t.add_argument("-D", dest="defines", action="append", type=_define, default=[], metavar="NAME=VALUE",
                   help="set a problem dim, or fix a schedule constant")
    t.add_argument("--space", action="append", type=_space, default=[], metavar="NAME=v1,v2,...",
                   help="values to search for a schedule constant (default: the kernel's `tune` clause, else its default)")
    t.add_argument("--target", default="tilelang", choices=("tilelang", "cuda"))
    t.add_argument("--jobs", type=int, default=None, help="parallel compile processes (default: cores - 1)")
    t.add_argument("--top", type=int, default=10, help="rows of the timed table (default 10)")
    t.add_argument("--dry-run", action="store_true", help="print the pruned space only (no GPU needed)")
    t.add_argument("--retime", action="store_true", help="time again configurations an earlier run measured")
    t.add_argument("--model-top", type=int, default=None, metavar="K",
                   help="compile and time only the K survivors the cost model ranks best (passes/cost_model.py); "
                   "the table shows its estimate next to each time")

    g = sub.add_parser("llama", help="generate text with a llama2.c model whose every decode op is a tkc kernel")
    g.add_argument("model", help="a llama2.c checkpoint: legacy (run.c) or export.py's version 1 / 2")
    g.add_argument("--tokenizer", default=None,
                   help="llama2.c's tokenizer.bin (default: tokenizer.bin next to the model, else in this folder)")
    g.add_argument("--prompt", default="", help="text to start from (default: none, BOS alone)")
    g.add_argument("-n", dest="steps", type=int, default=256,
                   help="positions to run, the prompt's included (default 256; 0 or more than the context: the context)")
    g.add_argument("--temperature", type=float, default=1.0, help="0: greedy (default 1.0)")
    g.add_argument("--topp", type=float, default=0.9, help="top-p sampling threshold in (0, 1] (default 0.9; 1: off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed, a positive int (default: the time)")
    g.add_argument("--dtype", default="f32", choices=("f32", "f16", "int8"),
                   help="weights in the kernels: f32 (default), f16, int8 (runq.c's Q8_0; an f32 file is quantized)")
    g.add_argument("--target", default=None, choices=("cuda", "tilelang", "tilelang-cpu", "interp"),
                   help="default: cuda on a CUDA GPU, else tilelang-cpu")
    return p


def _space(text: str) -> tuple[str, tuple[int, ...]]:
    from tkc.tune import parse_space_arg

    try:
        return parse_space_arg(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# the commands whose time and memory tkc/limits.py bounds, and what they do
BOUNDED = {"compile": "compiling", "opt": "optimizing", "run": "compiling and running"}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cmd = {"compile": cmd_compile, "run": cmd_run, "opt": cmd_opt, "tune": cmd_tune, "llama": cmd_llama}[args.cmd]
    try:
        names = [n for n, _ in getattr(args, "defines", [])]
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:  # (the last would win silently)
            raise error(Loc("<command line>", 1, 1), f"`-D {twice}` is given twice", "give each name once")
        if args.cmd in BOUNDED:  # `tune` and `llama` run long by design (progress, tokens/s)
            from tkc.limits import bounded

            with bounded(BOUNDED[args.cmd], args.file):
                return cmd(args)
        return cmd(args)
    except TkError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except MemoryError as exc:  # the user's machine: a tile or tensor larger than its memory
        print(f"tkc: error: out of memory{f' ({exc})' if str(exc) else ''}", file=sys.stderr)
        print("note: choose smaller dims or tile sizes with -D", file=sys.stderr)
        return 1
    except Exception as exc:  # an internal bug: say so, distinct from user errors
        print(f"tkc: internal compiler error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if args.debug:
            traceback.print_exc()
        else:
            print("note: this is a bug in tkc, not in your program; rerun with --debug for a traceback",
                  file=sys.stderr)
        folder = _reproducer(argv if argv is not None else sys.argv[1:], getattr(args, "file", None)
                             or getattr(args, "model", None))
        if folder:
            kept = "the command, the input and the traceback" if any(
                f.endswith((".tk", ".tkir")) for f in os.listdir(folder)) else \
                "the command and the traceback; attach the input file too"
            print(f"note: a reproducer is in {folder} ({kept}): attach it to a bug report for tkc", file=sys.stderr)
        return 2


def _reproducer(argv: list[str], path: str | None) -> str | None:
    """Write an internal error's reproducer: the command line, a copy of the input file (a .tk or
    .tkir up to 1 MiB) and the traceback, into a new folder under the temporary directory; None
    when it cannot be written."""
    import shlex

    try:
        folder = tempfile.mkdtemp(prefix="tkc-crash-")
        with open(os.path.join(folder, "command.txt"), "w", encoding="utf-8") as f:
            f.write("tkc " + shlex.join(argv) + "\n")
        with open(os.path.join(folder, "traceback.txt"), "w", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        if path and path.endswith((".tk", ".tkir")) and os.path.isfile(path) and os.path.getsize(path) <= 1 << 20:
            shutil.copy(path, os.path.join(folder, os.path.basename(path)))
        return folder
    except OSError:
        return None


def _cache(args):
    """The cache under --cache-dir (or the default root); a located user error when that path
    cannot hold one (tkc.cache.usable)."""
    from tkc.cache import usable

    return usable(args.cache_dir)


def cmd_compile(args) -> int:
    from tkc import driver

    defines = dict(args.defines)
    model_lines = []
    if args.schedule == "model":
        defines, model_lines = _model_schedule(args.file, defines, tuple(args.dynamic))
    artifact = driver.compile_file(args.file, args.target, defines, _cache(args), dynamic=tuple(args.dynamic))
    if args.explain:  # the code is still written with -o
        from passes.sparse_dispatch import explain

        lines = (model_lines + explain(artifact.module) + _explain_tile_order(artifact) + _explain_walk(artifact)
                 + _explain_panels(artifact) + _explain_groups(artifact))
        print("\n".join(lines) if lines else f"{args.file}: no pass decisions to explain (no sampled gemm; "
              "`--schedule model` explains the cost model's choice of constants)")
        if not args.output:
            return 0
    if not args.output:
        sys.stdout.write(artifact.source)
        return 0
    _write_atomic(args.output, artifact.source)
    return 0


def _sddmm_launch(artifact) -> dict:
    """The `sddmm` part of a `cuda` module's launch line (codegen/cuda_sddmm.py: which kernels it
    holds); empty for another target or a module without a sampled gemm."""
    if artifact.target != "cuda":
        return {}
    from codegen.cuda import launch_config

    return launch_config(artifact.source).get("sddmm", {})


def _explain_tile_order(artifact) -> list[str]:
    """The `cuda` sampled gemm's launch order of its tensor-core tiles per pattern
    (tkc.sparse.tile_order, given the GPU's SM count by tkc/runtime.py)."""
    sddmm = _sddmm_launch(artifact)
    if not sddmm.get("tc_kernel"):
        return []
    return ["  launch (cuda): where the tensor-core tiles outnumber the GPU's SMs by at most twice, the X tiles "
            "past one per SM run beside others, so the 2 X lightest go to both ends of the launch (the lightest X "
            "last) and the rest heaviest first between; else in row-major order (decided per pattern at its first "
            "call)"]


def _explain_walk(artifact) -> list[str]:
    """The `cuda` sampled gemm's choice at each call (tkc/cuda_runtime.py `CudaLaunch.tile_launch`)
    where its tile kernel has a persistent twin (K <= 32, codegen/cuda_sddmm.py)."""
    sddmm = _sddmm_launch(artifact)
    if not sddmm.get("walk_kernel"):
        return []
    from tkc.cuda_runtime import PERSISTENT_DOTS_PER_TILE

    return [f"  launch (cuda): a call whose dot products are at most {PERSISTENT_DOTS_PER_TILE} per tensor-core tile "
            f"runs the tiles on `{sddmm['walk_kernel']}`, the blocks resident at once each walking tiles "
            f"({sddmm['walk_smem']} bytes of shared memory per block); other calls run `{sddmm['tc_kernel']}`, "
            "a block per tile, beside the dot products"]


def _explain_panels(artifact) -> list[str]:
    """The `cuda` sampled gemm's choice per pattern for its dot products (tkc/runtime.py
    `_panels_for`) where the module has the column-panel kernel (codegen/cuda_sddmm.py)."""
    sddmm = _sddmm_launch(artifact)
    if not sddmm.get("panel_kernel"):
        return []
    from tkc.runtime import PANEL_B_L2_SHARE, PANEL_MEAN_MAX, PANEL_SLOTS_PER_ENTRY_MAX

    tiles = ", no tensor-core tile reads B transposed" if sddmm.get("tc_reads_bt") else ""
    return [f"  launch (cuda): the dot products run by column panels of B itself (`{sddmm['panel_kernel']}`, "
            f"{sddmm['panel_width']} columns per panel, no transpose of B) where the panels holding entries average "
            f"at most {PANEL_MEAN_MAX}, B takes at most {PANEL_B_L2_SHARE:.0%} of the GPU's L2{tiles} and the work "
            f"items' slots are at most {PANEL_SLOTS_PER_ENTRY_MAX:g} per entry; else B is transposed and "
            f"`{sddmm['dot_kernel']}` runs them by rows (decided per pattern at its first call)"]


def _explain_groups(artifact) -> list[str]:
    """The `cuda` sampled gemm's choice per pattern at K = 32 with 16-bit operands (tkc/runtime.py
    `_groups_for`) where the module has the row-group kernel (codegen/cuda_sddmm.py)."""
    sddmm = _sddmm_launch(artifact)
    if not sddmm.get("group_kernel"):
        return []
    from tkc.runtime import GROUP_CELL_MEAN_MIN, GROUP_DENSITY_MAX, GROUP_NNZ_MIN
    from tkc.sparse import GROUP_PANEL_BYTES

    return [f"  launch (cuda): every entry runs by row groups on `{sddmm['group_kernel']}` (a block per SM holding "
            f"a {GROUP_PANEL_BYTES // 1024} KB panel of B transposed, mma.sync on 8 rows of A against 16 entries; "
            f"no tiles and no dot products) where the pattern has at least {GROUP_NNZ_MIN} entries, at most "
            f"{GROUP_DENSITY_MAX:.0%} of S and at least {GROUP_CELL_MEAN_MIN} per group of 8 rows and panel holding "
            "any; else the tiles and dot products above (decided per pattern at its first call)"
            + (f"; a B given as [K, N] is transposed panel by panel in `{sddmm['group_b_kernel']}` itself"
               if sddmm.get("group_b_kernel") else "")]


def _model_schedule(path: str, defines: dict[str, int], dynamic: tuple[str, ...]):
    """(-D values plus the cost model's constants, --explain lines): tkc/schedule.py at the dims
    of -D and `where`, at the bucket of a dynamic dim's `where` (or -D) value."""
    from dsl.parser import parse
    from tkc import driver, schedule
    from tkc.tune_search import resolve_dims

    text = driver.read_source(path)
    kernel = parse(text, path)
    dims = resolve_dims(kernel, defines)
    names = sorted(set(kernel.dynamic) | set(dynamic))
    fixed = {k: v for k, v in defines.items() if k in kernel.consts}
    chooser = schedule.Chooser(path, text, kernel, {k: v for k, v in dims.items() if k not in names}, fixed, dynamic)
    choice = chooser.choose({n: dims[n] for n in names})
    return {**defines, **choice.consts}, schedule.explain(chooser)


def _write_atomic(path: str, text: str) -> None:
    """Write `path` whole or not at all (no partial output file on failure); a located user
    error when it cannot be written (a folder, a missing or read-only folder)."""
    if os.path.isdir(path):
        raise error(Loc(path, 0, 0), f"cannot write `{path}`: it is a folder", "give a file name with -o")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tkc-", dir=folder)
    except OSError as exc:
        raise error(Loc(path, 0, 0), f"cannot write `{path}`: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise error(Loc(path, 0, 0), f"cannot write `{path}`: {exc.strerror or type(exc).__name__}") from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def cmd_opt(args) -> int:
    from dsl.ir import print_module
    from passes.manager import parse_pipeline, run_pipeline
    from tkc import driver

    # --print-ir-after-all or --verify-diagnostics without -p: the default pipeline (the one
    # `compile` runs)
    whole = args.print_ir_after_all or args.verify_diagnostics
    spec = args.pipeline or (driver.default_pipeline(args.target or "tilelang") if whole else "")
    passes = parse_pipeline(spec)  # a malformed -p is a usage error, also with --verify-diagnostics
    if args.target is not None and not args.verify_diagnostics:
        raise error(Loc("<command line>", 1, 1), "`tkc opt --target` applies with `--verify-diagnostics` only",
                    "`tkc compile --target T` prints the code of a target")
    if args.verify_diagnostics:
        from tkc.verify_diagnostics import Run, verify

        text = driver.read_source(args.file)
        run = Run(args.pipeline or None, tuple(args.defines), tuple(args.dynamic), args.target)
        problems = verify(args.file, text, args.split_input_file, run)
        for d in problems:
            print(d.render({args.file: text}), file=sys.stderr)
        return 1 if problems else 0
    module = driver.frontend(args.file, dict(args.defines), dynamic=tuple(args.dynamic))

    def show(name, m):
        sys.stdout.write(f"// -----// IR after `{name}` //----- //\n{print_module(m)}")

    final = run_pipeline(module, passes, show if args.print_ir_after_all else None)
    if not args.print_ir_after_all:
        sys.stdout.write(print_module(final))
    return 0


def cmd_tune(args) -> int:
    import warnings

    from tkc import tune, tune_search

    warnings.formatwarning = lambda message, *rest, **kw: f"tkc: warning: {message}\n"
    space: dict[str, tuple[int, ...]] = {}
    for name, values in args.space:
        if name in space:
            raise error(tune.COMMAND_LINE, f"`--space {name}` is given twice", "list every value in one `--space`")
        space[name] = values
    for flag, value in (("--top", args.top), ("--jobs", args.jobs), ("--model-top", args.model_top)):
        if value is not None and value < 1:
            raise error(tune.COMMAND_LINE, f"`{flag}` must be at least 1, got {value}")
    progress = sys.stderr.isatty()
    p = tune_search.plan(args.file, dict(args.defines), space, progress)
    if args.model_top is not None and p.survivors:
        p = tune_search.rank_by_model(p, args.model_top)
    if args.dry_run:
        sys.stdout.write(tune_search.report_dry_run(p, args.target, args.top))
    if not p.survivors:
        raise error(p.kernel.loc, f"every one of the {len(p.rejected)} configurations of `{p.kernel.name}` is rejected "
                    "before compiling", *[f"{n} by {g} ({tune_search.example(g, r)})"
                                           for g, n, r in tune_search.reason_counts(p.rejected)][:8],
                    "widen the space (`--space NAME=v1,v2`) or change the dims (`-D`)")
    if args.dry_run:
        return 0
    device = tune.device_name()
    if device is None:
        raise error(tune.COMMAND_LINE, "`tkc tune` times kernels on a CUDA GPU, and there is none here",
                    "`tkc tune --dry-run` prints the pruned space without a GPU")
    cache = _cache(args)
    records, path = tune_search.search(p, args.target, cache, device, args.jobs or tune_search.default_jobs(),
                                       retime=args.retime, progress=progress)
    sys.stdout.write(tune_search.report(p, records, args.target, device, args.top, path))
    if tune.best(records) is None:
        raise error(p.kernel.loc, f"no configuration of `{p.kernel.name}` compiled, ran and matched its reference",
                    "see the failures above")
    return 0


def cmd_run(args) -> int:
    from tkc import check

    where = Loc("<command line>", 1, 1)
    if not -2**63 <= args.seed < 2**64:  # what torch.Generator.manual_seed takes
        raise error(where, f"--seed must be an integer in [-2^63, 2^64), got {args.seed}")
    if args.rtol is not None and not 0 <= args.rtol < float("inf"):  # (NaN fails too)
        raise error(where, f"--rtol must be a finite number >= 0, got {args.rtol}",
                    "leave it out for the tolerance derived from the kernel's dtypes and reduction length")
    if args.file.endswith(".tkir"):
        raise error(Loc(args.file, 0, 0), "`tkc run` takes a .tk kernel; this is IR text (.tkir)",
                    "run the .tk file the IR came from; `tkc compile FILE.tkir --target ...` and `tkc opt "
                    "FILE.tkir` read IR")
    names = [n for n, _ in args.patterns]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise error(where, f"`--pattern {twice}=...` is given more than once", "give each sparse input one source")
    return check.run_file(args.file, args.target, dict(args.defines), args.seed, args.check, args.rtol,
                          _cache(args), args.inputs, dict(args.patterns))


def cmd_llama(args) -> int:
    """`tkc llama`: run.c's generate loop over tkc.models.llama; the text goes to stdout as it
    is produced, then the tokens/s to stderr (as run.c prints them)."""
    import os
    import time

    from dsl.diagnostics import Loc, error
    from tkc.models import llama_files
    from tkc.models.llama import Llama

    model_loc = Loc(args.model, 0, 0)
    if not args.temperature >= 0 or args.temperature == float("inf"):  # (NaN fails both)
        raise error(model_loc, f"--temperature must be a finite number >= 0, got {args.temperature}",
                    "0 is greedy decoding")
    if not 0 < args.topp <= 1:
        raise error(model_loc, f"--topp must be in (0, 1], got {args.topp}", "1 turns top-p sampling off")
    seed = args.seed if args.seed is not None else int(time.time())
    if seed <= 0:
        raise error(model_loc, f"--seed must be a positive int, got {seed}")
    if args.target in ("cuda", "tilelang"):
        import torch

        if not torch.cuda.is_available():  # the user's machine, not a tkc bug
            raise error(model_loc, f"target `{args.target}` needs a CUDA GPU, and torch sees none",
                        "run on the CPU with `--target tilelang-cpu` (or `--target interp`), or leave `--target` out")
    config, weights = llama_files.load_checkpoint(args.model)
    tok_path = args.tokenizer
    if tok_path is None:
        beside = os.path.join(os.path.dirname(os.path.abspath(args.model)), "tokenizer.bin")
        tok_path = beside if os.path.exists(beside) else "tokenizer.bin"
        if not os.path.exists(tok_path):
            raise error(model_loc, f"no tokenizer.bin next to the model ({beside}) or in this folder",
                        "give llama2.c's tokenizer with --tokenizer FILE")
    tokenizer = llama_files.Tokenizer.load(tok_path, config.vocab_size)
    model = Llama(config, weights, target=args.target, cache_dir=args.cache_dir, dtype=args.dtype)
    steps = args.steps if 0 < args.steps <= config.seq_len else config.seq_len

    def emit(piece: bytes) -> None:
        sys.stdout.buffer.write(piece)
        sys.stdout.flush()

    gen = model.generate(tokenizer, args.prompt, steps, args.temperature, args.topp, seed, emit)
    sys.stdout.write("\n")
    print(f"achieved tok/s: {gen.tokens_per_s:.1f} ({model.target}, {model.dtype})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

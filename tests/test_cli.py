"""The `tkc` command line (compile, run, opt) and the compile cache, on every example."""

from __future__ import annotations

import glob
import os
import re
import tempfile

import pytest

import tkc
from dsl.diagnostics import TkError
from dsl.ir_parser import parse_module
from passes.manager import parse_pipeline
from tkc import driver
from tkc.cache import Cache
from tkc.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.tk")))
MISS = [p for p in EXAMPLES if os.path.basename(p).startswith("miss")]


def _id(path: str) -> str:
    return os.path.basename(path)


def kernel_name(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return re.search(r"^kernel (\w+)", f.read(), re.M).group(1)


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def cache_dir(tmp_path) -> str:
    return str(tmp_path / "cache")


@pytest.mark.parametrize("path", MISS, ids=_id)
@pytest.mark.parametrize("target", ["tilelang", "tilelang-cpu", "tir"])
def test_compile_every_example(capsys, cache_dir, path, target):
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "compile", path, "--target", target)
    assert rc == 0, err
    name = kernel_name(path)
    if target == "tir":
        assert "@I.ir_module" in out and "class Module:" in out and "@T.prim_func" in out
        assert re.search(rf"def {name}\w*\(", out), "the device function is named after the kernel"
        assert "T.launch_thread(\"blockIdx.x\"" in out
    else:
        assert "@T.prim_func" in out and f"def {name}(" in out and "def build():" in out
        compile(out, path, "exec")  # the generated module is valid Python
        if target == "tilelang-cpu":
            assert "T.alloc_fragment" not in out and "T.alloc_shared" not in out and "T.Pipelined" not in out
        else:
            assert "T.Pipelined(" in out and "threads=" in out


def test_tir_lowers_rows_that_are_not_4_byte_aligned(capsys, cache_dir):
    """f16 rows of odd length (K=17): TileLang 0.1.15 would emit a 2-byte cp.async and fail in its
    CUDA codegen; tkc turns cp.async off for such kernels (found on an H200, 2026-11-21)."""
    path = os.path.join(ROOT, "examples", "miss.tk")
    argv = ["compile", path, "--target", "tir", "-D", "M=1", "-D", "N=128", "-D", "R=16"]
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, *argv, "-D", "K=17")
    assert rc == 0, err

    def async_reads_of_a(tir: str) -> int:
        return sum('"float16"), A,' in line for line in tir.splitlines() if "ptx_cp_async" in line)

    assert async_reads_of_a(out) == 0
    assert "ptx_cp_async" in out, "B's rows (N=128) stay on cp.async"
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, *argv, "-D", "K=64")
    assert rc == 0, err
    assert async_reads_of_a(out) > 0, "aligned rows keep their cp.async pipeline"


@pytest.mark.parametrize("target", ["tilelang", "tilelang-cpu"])
def test_compile_output_file(capsys, tmp_path, target):
    path = os.path.join(ROOT, "examples", "miss_v3.tk")
    rc, printed, _ = cli(capsys, "--cache-dir", str(tmp_path / "c"), "compile", path, "--target", target)
    assert rc == 0
    out = tmp_path / "kernel.py"
    rc, stdout, err = cli(capsys, "--cache-dir", str(tmp_path / "c"), "compile", path, "--target", target,
                          "-D", "M=512", "-o", str(out))
    assert rc == 0 and stdout == "" and err == ""
    written = out.read_text()
    assert "M = 512" in written and written != printed
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_defines_reach_the_generated_code(capsys, cache_dir):
    path = os.path.join(ROOT, "examples", "miss_v3.tk")
    rc, out, _ = cli(capsys, "--cache-dir", cache_dir, "compile", path, "--target", "tilelang-cpu",
                     "-D", "BM=32", "-D", "N=96", "-D", "stages=2")
    assert rc == 0
    assert re.search(r"^BM = 32$", out, re.M) and re.search(r"^N = 96$", out, re.M)
    assert "T.alloc_local((32, " in out


def test_run_check_on_the_cpu(capsys, cache_dir):
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", os.path.join(ROOT, "examples", "miss.tk"), "--check")
    assert rc == 0, out + err
    assert "ran on tilelang-cpu (cpu)" in out
    m = re.search(r"C: max relative error (\S+) \(tolerance (\S+)\): ok", out)
    assert m and 0 < float(m.group(1)) <= float(m.group(2))
    # the tolerance derived for miss.tk (f16 out, one f16 cast of S, 16 shards + R = 64 summed)
    assert float(m.group(2)) == float(f"{2**-11 + 4 * 2**-11 + 4 * 80 * 2**-24 + 64 * 2**-24:.3g}")


WRONG = """\
kernel twice<BM=16>(A: f16[M, K]) -> (C: f16[M, K])
    where M = 32, K = 16
    reference "A * 3"
{
    grid (cdiv(M, BM)) as (m)
    C[m*BM : +BM, :] = A[m*BM : +BM, :] * 2.0
}
"""


def test_run_check_reports_a_mismatch(capsys, tmp_path):
    path = tmp_path / "twice.tk"
    path.write_text(WRONG)
    rc, out, _ = cli(capsys, "--cache-dir", str(tmp_path / "c"), "run", str(path), "--check", "--seed", "3")
    assert rc == 1 and "MISMATCH" in out
    path.write_text(WRONG.replace('"A * 3"', '"A * 2"'))
    rc, out, _ = cli(capsys, "--cache-dir", str(tmp_path / "c"), "run", str(path), "--check", "--seed", "3")
    assert rc == 0 and ": ok" in out


def test_opt_print_ir_after_all(capsys):
    path = os.path.join(ROOT, "examples", "miss.tk")
    pipeline = "tile{BM=32},software-pipeline{stages=2},check-smem-fit{target=sm_80}"
    rc, out, _ = cli(capsys, "opt", path, "-p", pipeline, "--print-ir-after-all")
    assert rc == 0
    heads = re.findall(r"^// -----// IR after `([a-z-]+)` //----- //$", out, re.M)
    assert heads == [p.name for p in parse_pipeline(pipeline)]
    sections = re.split(r"^// -----// IR after `[a-z-]+` //----- //\n", out, flags=re.M)[1:]
    modules = [parse_module(s, "<section>") for s in sections]
    assert modules[0].env["BM"] == 32
    assert "async = true" not in sections[0] and "async = true" in sections[1]
    assert sections[2] == sections[1]  # check-smem-fit changes nothing
    rc, final, _ = cli(capsys, "opt", path, "-p", pipeline)
    assert rc == 0 and final == sections[-1]


def test_opt_without_pipeline_prints_the_lowered_ir(capsys, tmp_path):
    path = os.path.join(ROOT, "examples", "miss_v3.tk")
    rc, out, _ = cli(capsys, "opt", path)
    assert rc == 0 and out.startswith("tile.func()") and "tile.require()" in out
    ir = tmp_path / "v3.tkir"
    ir.write_text(out)
    rc, again, _ = cli(capsys, "opt", str(ir))
    assert rc == 0 and again == out


def test_print_ir_after_all_without_pipeline_runs_the_default_pipeline(capsys):
    path = os.path.join(ROOT, "examples", "miss.tk")
    rc, out, _ = cli(capsys, "opt", path, "--print-ir-after-all")
    assert rc == 0
    heads = re.findall(r"^// -----// IR after `([a-z-]+)` //----- //$", out, re.M)
    assert heads == [p.name for p in parse_pipeline(driver.default_pipeline("tilelang"))]
    sections = re.split(r"^// -----// IR after `[a-z-]+` //----- //\n", out, flags=re.M)[1:]
    final = driver.optimize(driver.frontend(path, {}), "tilelang")
    from dsl.ir import print_module
    assert sections[-1] == print_module(final)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without a GPU")
@pytest.mark.parametrize("target", ["tilelang", "cuda"])
def test_run_on_a_gpu_target_without_a_gpu_is_a_user_error(capsys, cache_dir, target):
    path = os.path.join(ROOT, "examples", "miss.tk")
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", path, "--target", target)
    assert rc == 1 and out == ""
    assert err.startswith(f"{path}:8:1: error: target `{target}` needs a CUDA GPU, and torch sees none\n")
    assert "note: run on the CPU with `--target tilelang-cpu`" in err and "internal" not in err


def test_run_with_tensors_too_large_to_allocate_is_a_user_error(capsys, cache_dir):
    path = os.path.join(ROOT, "examples", "miss.tk")
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", path, "--target", "interp", "-D", "M=9999999999")
    assert rc == 1 and out == ""
    assert err.startswith(f"{path}:8:1: error: the kernel's tensors need 40,960,000,126,976 bytes; this machine's cpu memory is ")
    assert "note: choose smaller dims with -D" in err and "internal" not in err


@pytest.mark.parametrize("argv, message", [
    (("--seed", str(2**64)), "<command line>:1:1: error: --seed must be an integer in [-2^63, 2^64), got 18446744073709551616"),
    (("--check", "--rtol", "nan"), "<command line>:1:1: error: --rtol must be a finite number >= 0, got nan"),
    (("--check", "--rtol", "-1"), "<command line>:1:1: error: --rtol must be a finite number >= 0, got -1.0"),
])
def test_run_options_out_of_range_are_user_errors(capsys, cache_dir, argv, message):
    path = os.path.join(ROOT, "examples", "rmsnorm.tk")
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", path, "--target", "interp", "-D", "B=2", "-D", "N=64",
                       *argv)
    assert rc == 1 and out == "" and err.startswith(message + "\n") and "internal" not in err


def test_run_of_ir_text_says_to_run_its_source(capsys, cache_dir, tmp_path):
    """`tkc run` and tkc.compile take a .tk kernel: IR text from `tkc opt` is a user error that
    says which commands read IR (it was the .tk parser's `expected kernel` on the IR's first line),
    while `tkc compile` still compiles it."""
    src = os.path.join(ROOT, "examples", "rmsnorm.tk")
    rc, ir, _ = cli(capsys, "opt", src, "-D", "B=2", "-D", "N=64", "-p", "tile")
    path = tmp_path / "rmsnorm.tkir"
    path.write_text(ir)
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", str(path), "--target", "interp", "--check")
    assert rc == 1 and out == ""
    assert err.startswith(f"{path}: error: `tkc run` takes a .tk kernel; this is IR text (.tkir)\n")
    assert "`tkc compile FILE.tkir --target ...` and `tkc opt FILE.tkir` read IR" in err
    with pytest.raises(TkError, match=r"tkc.compile takes a .tk kernel; this is IR text"):
        tkc.compile(str(path), target="interp")
    rc, out, _ = cli(capsys, "compile", str(path), "--target", "tilelang-cpu")
    assert rc == 0 and "def " in out


@pytest.mark.parametrize("pos, message", [
    ("100", "examples/attention.tk:19:14: error: requirement `pos < 100` does not hold at this call"),
    ("2147483648", "examples/attention.tk:14:88: error: runtime scalar `pos` is 2147483648; it must be in [0, 2^31)"),
])
def test_run_with_a_runtime_scalar_out_of_range_reports_the_kernel_s_check(capsys, cache_dir, pos, message):
    """The random inputs are scaled by the reference (so no output overflows); a reference that
    fails on a scalar past a `requires` must not hide the call's own located error."""
    path = os.path.join(ROOT, "examples", "attention.tk")
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", path, "--target", "interp", "--check",
                       "-D", "H=4", "-D", "KVD=256", "-D", "S=100", "-D", f"pos={pos}")
    assert rc == 1 and out == "" and message in err and "reference expression failed" not in err


@pytest.mark.parametrize("ref, message", [
    ("0.0", "error: the reference expression gave float 0.0; it must give a torch tensor per output"),
    ("None", "error: the reference expression gave NoneType None; it must give a torch tensor per output"),
    ("A[:1, :]", "C: max relative error nan (tolerance 3.87e-06): MISMATCH (the reference gives shape [1, 32], "
                 "the kernel [4, 32])"),
])
def test_a_reference_of_the_wrong_kind_or_shape_is_reported(capsys, tmp_path, ref, message):
    path = tmp_path / "copy.tk"
    path.write_text('kernel copy<BN=32>(A: f32[M, N]) -> (C: f32[M, N])\n    where M = 4, N = 32\n'
                    f'    reference "{ref}"\n{{\n    grid (M) as (m)\n    C[m : +1, :] = A[m : +1, :]\n}}\n')
    rc, out, err = cli(capsys, "--cache-dir", str(tmp_path / "c"), "run", str(path), "--target", "interp", "--check")
    assert rc == 1 and message in out + err and "internal" not in err


def test_source_encodings(capsys, tmp_path):
    """A UTF-8 file with a byte-order mark runs; a byte that is not UTF-8 is located, with a fix."""
    text = ('kernel copy<BN=32>(A: f32[M, N]) -> (C: f32[M, N])\n    where M = 4, N = 32\n    reference "A"\n'
            '{\n    grid (M) as (m)\n    C[m : +1, :] = A[m : +1, :]\n}\n')
    bom, latin1 = tmp_path / "bom.tk", tmp_path / "latin1.tk"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    latin1.write_bytes(text.encode() + b"# caf\xe9\n")
    rc, out, err = cli(capsys, "--cache-dir", str(tmp_path / "c"), "run", str(bom), "--target", "interp", "--check")
    assert rc == 0 and "C: max relative error 0.000e+00" in out
    rc, out, err = cli(capsys, "--cache-dir", str(tmp_path / "c"), "run", str(latin1), "--target", "interp")
    assert rc == 1 and err.startswith(f"{latin1}:8:6: error: byte 0xe9 is not UTF-8\n")
    assert "note: save the file as UTF-8" in err


def test_a_tile_larger_than_memory_is_a_user_error(capsys, cache_dir):
    path = os.path.join(ROOT, "examples", "rmsnorm.tk")
    rc, out, err = cli(capsys, "--cache-dir", cache_dir, "run", path, "--target", "interp", "-D", "BR=1099511627776",
                       "-D", "N=64")
    assert rc == 1 and err.startswith("tkc: error: out of memory") and "internal" not in err
    assert "note: choose smaller dims or tile sizes with -D" in err


def test_unwritable_outputs_and_caches_are_user_errors(capsys, tmp_path):
    path = os.path.join(ROOT, "examples", "rmsnorm.tk")
    folder, a_file = tmp_path / "out", tmp_path / "a_file"
    folder.mkdir()
    a_file.write_text("")
    rc, out, err = cli(capsys, "--cache-dir", str(tmp_path / "c"), "compile", path, "-o", str(folder))
    assert rc == 1 and err.startswith(f"{folder}: error: cannot write `{folder}`: it is a folder\n")
    assert os.listdir(folder) == [] and os.listdir(tmp_path / "c")  # no temporary file left behind
    rc, out, err = cli(capsys, "--cache-dir", str(a_file), "compile", path)
    assert rc == 1 and out == "" and "it is a file, not a folder" in err and "internal" not in err
    rc, out, err = cli(capsys, "--cache-dir", str(a_file / "below"), "compile", path)
    assert rc == 1 and out == "" and "as the compile cache" in err and "internal" not in err


# ---- the cache -------------------------------------------------------------------------------
def test_second_compile_is_served_from_the_cache(tmp_path):
    cache = Cache(str(tmp_path))
    path = os.path.join(ROOT, "examples", "miss_mtile.tk")
    first = driver.compile_file(path, "tilelang", {"M": 256}, cache)
    second = driver.compile_file(path, "tilelang", {"M": 256}, cache)
    assert not first.cached and second.cached
    assert second.source == first.source and second.key == first.key
    assert second.module.env == first.module.env
    other = driver.compile_file(path, "tilelang", {"M": 128}, cache)
    assert not other.cached and other.key != first.key


def _corrupt_every_file_named(root: str, name: str) -> int:
    n = 0
    for dirpath, _, files in os.walk(root):
        if name in files:
            with open(os.path.join(dirpath, name), "a", encoding="utf-8") as f:
                f.write("\n# corrupted\n")
            n += 1
    return n


@pytest.mark.parametrize("victim", ["kernel.py", "kernel.tkir", "key"])
def test_corrupted_cache_entry_is_rebuilt(tmp_path, victim):
    cache = Cache(str(tmp_path))
    path = os.path.join(ROOT, "examples", "miss.tk")
    first = driver.compile_file(path, "tilelang-cpu", {"M": 100}, cache)
    if victim == "key":  # the source-level index entry, if the driver keeps one
        n = _corrupt_every_file_named(str(tmp_path), "key")
        if n == 0:
            pytest.skip("the driver keeps no source-level index")
    else:
        assert _corrupt_every_file_named(str(tmp_path), victim) == 1
    again = driver.compile_file(path, "tilelang-cpu", {"M": 100}, cache)
    assert again.source == first.source and again.key == first.key
    if victim != "key":
        assert not again.cached
    with open(again.source_path, encoding="utf-8") as f:
        assert f.read() == first.source
    assert driver.compile_file(path, "tilelang-cpu", {"M": 100}, cache).cached


def test_cli_cache_dir(capsys, tmp_path):
    path = os.path.join(ROOT, "examples", "miss_row.tk")
    args = ("--cache-dir", str(tmp_path), "compile", path, "--target", "tilelang-cpu")
    rc, first, _ = cli(capsys, *args)
    assert rc == 0 and os.listdir(tmp_path)
    assert _corrupt_every_file_named(str(tmp_path), "kernel.py") == 1
    rc, second, _ = cli(capsys, *args)
    assert rc == 0 and second == first


def test_an_internal_error_exits_2_and_writes_a_reproducer(tmp_path, monkeypatch, capsys):
    """Issue 14, item 2: an internal error (here a backend that raises) says it is tkc's bug, how
    to report it, and leaves a reproducer: the command, the input file and the traceback."""
    from codegen import tilelang

    def broken(module):
        raise RuntimeError("simulated backend bug")

    monkeypatch.setattr(tilelang, "emit", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = os.path.join(ROOT, "examples", "miss.tk")
    assert main(["--cache-dir", str(tmp_path / "c"), "compile", path, "-D", "N=256"]) == 2
    err = capsys.readouterr().err
    assert "tkc: internal compiler error: RuntimeError: simulated backend bug" in err
    folder = re.search(r"a reproducer is in (\S+) ", err).group(1)
    assert folder.startswith(str(tmp_path))
    assert open(os.path.join(folder, "command.txt")).read() == f"tkc --cache-dir {tmp_path / 'c'} compile {path} -D N=256\n"
    assert open(os.path.join(folder, "miss.tk")).read() == open(path).read()
    assert "simulated backend bug" in open(os.path.join(folder, "traceback.txt")).read()
    assert "(the command, the input and the traceback)" in err


def test_a_reproducer_without_the_input_says_so(tmp_path, monkeypatch, capsys):
    """A model file is not copied into the reproducer (it may be gigabytes): the note says to
    attach it."""
    from tkc.models import llama_files

    def broken(path):
        raise RuntimeError("simulated reader bug")

    monkeypatch.setattr(llama_files, "load_checkpoint", broken)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["llama", str(tmp_path / "model.bin"), "--temperature", "0"]) == 2
    err = capsys.readouterr().err
    assert "(the command and the traceback; attach the input file too)" in err

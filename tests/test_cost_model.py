"""The cost model (passes/cost_model.py) and the schedule it chooses (tkc/schedule.py; issue 13).

The estimate's byte counts are checked against counts done by hand for examples/miss_split.tk;
its choices against what benchmarks/probes/miss_decomposition measured on an H100 (many N slices
at small M, whole-N sweeps with staged stores at large M); `schedule="model"` compiles every
bucket's choice at the first call and nothing afterwards, and matches torch in float64.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import tkc
from dsl.diagnostics import TkError
from dsl.parser import parse
from passes.cost_model import Hardware, estimate
from passes.manager import parse_pipeline, run_pipeline
from tkc import driver, schedule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPLIT = os.path.join(ROOT, "examples", "miss_split.tk")
MODEL_PASSES = parse_pipeline(schedule.MODEL_PIPELINE)


def _tiled(consts: dict[str, int], **dims: int):
    return run_pipeline(driver.frontend(SPLIT, {**consts, **dims}), MODEL_PASSES)


def test_bytes_and_blocks_of_a_split():
    k, n, r, m = 4096, 4096, 64, 1000
    est = estimate(_tiled({"BM": 64, "BN": 128, "NS": 4, "STAGE_C": 1}, K=k, N=n, R=r), {"M": m})
    m_tiles = -(-m // 64)
    assert est.blocks == 4 * m_tiles
    a_tiles, b_trips = k // r, n // 128 // 4
    per_block = a_tiles * 64 * r * 2 + b_trips * (r * 128 * 2 + 64 * 128 * 2)  # A tiles, B tiles, staged C
    assert est.l2_bytes == per_block * est.blocks
    # A, B and C once (the edge tile's rows past M are guarded): A's re-reads by the 4 blocks of
    # an M tile are blockIdx.x neighbours (L2 hits) and B fits in L2
    assert est.hbm_bytes == m * k * 2 + r * n * 2 + m * n * 2
    unstaged = estimate(_tiled({"BM": 64, "BN": 128, "NS": 4, "STAGE_C": 0}, K=k, N=n, R=r), {"M": m})
    assert unstaged.l2_bytes - est.l2_bytes == est.blocks * b_trips * 64 * 128 * 2  # fragment stores count twice


def test_re_reads_along_a_slow_grid_index_miss_l2(tmp_path):
    """The same split with the grid indices swapped: the NS blocks of an M tile are far apart in
    launch order, so A's re-reads come from HBM."""
    text = open(SPLIT, encoding="utf-8").read().replace("grid (NS, cdiv(M, BM)) as (q, m)",
                                                       "grid (cdiv(M, BM), NS) as (m, q)")
    path = tmp_path / "swapped.tk"
    path.write_text(text)
    consts = {"BM": 64, "BN": 128, "NS": 4, "STAGE_C": 1, "K": 4096, "N": 4096, "R": 64}
    fast = estimate(_tiled(consts), {"M": 16384})
    slow = estimate(run_pipeline(driver.frontend(str(path), consts), MODEL_PASSES), {"M": 16384})
    assert slow.hbm_bytes - fast.hbm_bytes == 3 * 16384 * 4096 * 2
    assert slow.time_us > fast.time_us


def test_occupancy_and_waves():
    hw = Hardware()
    est = estimate(_tiled({"BM": 16, "BN": 64, "NS": 32}, K=3072, N=3072, R=64), {"M": 16384}, hw)
    assert est.blocks == 32 * 1024
    assert est.waves == -(-est.blocks // (hw.sms * est.blocks_per_sm)) and est.waves > 1
    small = estimate(_tiled({"BM": 16, "BN": 64, "NS": 32}, K=3072, N=3072, R=64), {"M": 1}, hw)
    assert small.waves == 1 and small.terms["chain_us"] > small.terms["hbm_us"]  # latency-bound


def _chooser(**dims):
    text = open(SPLIT, encoding="utf-8").read()
    return schedule.Chooser(SPLIT, text, parse(text, SPLIT), dims, {})


def test_choices_follow_the_measured_trends():
    """H100 (benchmarks/probes/miss_decomposition, docs/PERFORMANCE.md): at M <= 128 the fastest
    forms split N over many blocks; at M = 16384 one block per M tile sweeps all of N with
    staged stores."""
    chooser = _chooser(K=3072, N=3072, R=64)
    small = chooser.choose({"M": 16}).consts
    large = chooser.choose({"M": 16384}).consts
    assert small["NS"] >= 8 and small["BM"] == 16
    assert large["NS"] == 1 and large["STAGE_C"] == 1 and large["BM"] >= 32
    ranking = chooser.choose({"M": 16384}).ranking
    assert [e.time_us for _, e in ranking] == sorted(e.time_us for _, e in ranking)
    # 480 configurations; those whose three stages of a 64 x 512 f16 A tile (U = 8 shards of 64,
    # 192 KiB) leave too little shared memory for 128-wide B and C tiles do not fit and are never
    # estimated (40 before fold-copies took the shard sum's own shared copies out)
    fits = {tuple(sorted(c.items())) for c, _ in chooser.modules()}
    dropped = [c for c in chooser.configs if tuple(sorted(c.items())) not in fits]
    assert len(chooser.configs) == 480 and {(c["U"], c["BM"], c["BN"]) for c in dropped} == {(8, 64, 128)}
    assert len(dropped) == 18


def test_model_schedule_compiles_every_bucket_once():
    kernel = tkc.compile(SPLIT, target="interp", schedule="model")
    g = torch.Generator().manual_seed(0)
    b = torch.randn(64, 200, generator=g).half()
    built = None
    for m in (3, 70, 300, 1100, 5000):
        a = (torch.randn(m, 300, generator=g) * 2 + 0.5).half()
        c = kernel(a, b)
        ref = torch.sum(F.pad(a.double(), (0, (-300) % 64)).reshape(m, -1, 64), dim=-2) @ b.double()
        err = float((c.double() - ref).abs().max())
        assert err <= 4 * 2.0 ** -10 * float(ref.abs().max()) + 1e-3, (m, err)
        built = built or kernel.specializations
        assert kernel.specializations == built  # the first call compiled every bucket's choice
    choices = kernel._choices[(("K", 300), ("N", 200), ("R", 64))]
    assert built == len({tuple(sorted(c.items())) for c in choices.values()}) > 1


def test_model_schedule_errors(tmp_path):
    with pytest.raises(TkError, match="has none"):
        tkc.compile(os.path.join(ROOT, "examples", "miss.tk"), target="interp", schedule="model")(
            torch.randn(16, 64).half(), torch.randn(64, 64).half())
    with pytest.raises(TkError, match="unknown schedule `fast`"):
        tkc.compile(SPLIT, target="interp", schedule="fast")
    with pytest.raises(TkError, match="both choose the constants"):
        tkc.compile(SPLIT, target="tilelang", schedule="model", tune=True)


def test_explain_prints_every_bucket():
    out = subprocess.run([sys.executable, "-m", "tkc.cli", "compile", SPLIT, "--schedule", "model", "--explain",
                          "-D", "K=3072", "-D", "N=3072"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("schedule chosen by the cost model") and "462 of 480" in lines[0]
    heads = [line for line in lines if line.startswith("at M in")]
    assert len(heads) == len(schedule.BUCKET_ENDS) + 1 and "at M in 1..16 (estimated at 16)" in heads[0]
    assert any("HBM" in line and "chain" in line for line in lines)

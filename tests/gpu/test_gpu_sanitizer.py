"""compute-sanitizer memcheck, racecheck and synccheck on every example and test program, through
every GPU backend (`tilelang`, `cuda`), at the default shapes and at one shape that is not a
multiple of the tiles (issue 14, item 6; the cluster examples at STAGE 0 and 1). One test is one
batch of tests/gpu/sanitize_examples.py: every case in one sanitized process, after the kernels were
compiled outside it. A batch is clean when the tool prints no report and a zero summary, and every
case matches torch in float64 within the derived tolerance (tkc/oracle.py) or is rejected by the
backend with a located diagnostic (skipped). A failure names the examples the reports point at.

One batch alone, e.g. across several device calls:
`python3 tests/gpu/sanitize_examples.py --tool memcheck --target cuda [--only NAME ...] [--shard 1/2]`.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sanitize_examples as sanitize  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]  # the full tier; tests/gpu/test_gpu_quick.py is the quick one


@pytest.mark.parametrize("target", sanitize.TARGETS)
@pytest.mark.parametrize("tool", sanitize.TOOLS)
def test_sanitizer_is_clean(tool, target):
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    batch = sanitize.run_batch(tool, target, sanitize.all_cases(), sanitizer, timeout=3600, echo=lambda line: None)
    report = batch.report()
    print(report)
    assert not batch.parsed.findings, f"{tool} reports in {', '.join(batch.finding_examples)}\n{report}"
    assert not batch.failed and not batch.missing, report
    assert batch.ok, report  # the tool's summary says 0 and it exited 0

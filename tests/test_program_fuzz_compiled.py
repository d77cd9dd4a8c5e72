"""Program fuzzing through `tilelang-cpu` (issue 14): TKC_FUZZ_COMPILED generated programs (100
under the `ci` profile) compiled by TileLang's C target and run on NaN-fenced inputs, each
checked element by element against torch in float64 within its own error bound, after the
checks of tests/test_program_fuzz.py (which shares its helpers; its own file so that
pytest-xdist runs the two side by side). bf16 is left out: the C target has none."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from program_gen import programs
from test_program_fuzz import _FAST, COMPILED, check_program
from tkc import oracle


@settings(max_examples=COMPILED, deadline=None, suppress_health_check=_FAST)
@given(case=st.tuples(programs(templates=("map2d", "rows", "rowloop", "gemm", "gather"), floats=("f32", "f16")),
                      st.integers(0, 2**31 - 1),
                      st.sampled_from(oracle.DISTRIBUTIONS)))
def test_generated_programs_through_tilelang_cpu(case):
    program, seed, dist = case
    check_program(program, seed, dist, compiled=True, test="tilelang_cpu")

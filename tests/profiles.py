"""Hypothesis profiles of the test suite and the per-test example budget.

Profiles: `ci` (derandomized, few examples: the whole suite must stay under ~10 minutes on two
cores), `dev` (the default: more examples), `gpu` (tests/gpu on the device machine: every
TileLang CUDA compile takes seconds). `examples(n_ci, n_dev)` is what a costly test passes to
`@settings(max_examples=...)`; it reads the profile that conftest.py activated, so the budget
follows `--hypothesis-profile`.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=10, print_blob=True,
                          suppress_health_check=_SLOW)
settings.register_profile("dev", deadline=None, max_examples=60, suppress_health_check=_SLOW)
settings.register_profile("gpu", deadline=None, max_examples=6, print_blob=True,
                          suppress_health_check=_SLOW)

ACTIVE = "dev"  # set by conftest.pytest_configure before any test module is imported


def activate(name: str) -> None:
    global ACTIVE
    ACTIVE = name
    settings.load_profile(name)


def examples(n_ci: int, n_dev: int, n_gpu: int | None = None) -> int:
    """The example budget of one test under the active profile."""
    if ACTIVE == "ci":
        return n_ci
    if ACTIVE == "gpu":
        return n_gpu if n_gpu is not None else n_ci
    return n_dev

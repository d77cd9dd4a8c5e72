"""The test session's own setup (conftest.py): private caches and the active hypothesis profile."""

from __future__ import annotations

import os
import tempfile

from hypothesis import settings

import profiles


def test_caches_are_private_to_the_session():
    tmp = os.path.realpath(tempfile.gettempdir())
    for var in ("TKC_CACHE_DIR", "TILELANG_CACHE_DIR"):
        path = os.path.realpath(os.environ[var])
        assert path.startswith(tmp + os.sep) and "tkc-tests-" in path, (var, path)
    assert os.environ["TILELANG_PRINT_ON_COMPILATION"] == "0"


def test_tilelang_uses_the_session_cache():
    import tilelang  # noqa: F401  (TileLang creates its cache directory on import)

    assert os.path.isdir(os.environ["TILELANG_CACHE_DIR"])


def test_profile_budget_follows_the_active_profile():
    assert profiles.ACTIVE in ("ci", "dev", "gpu")
    assert settings.get_current_profile_name().startswith(profiles.ACTIVE)
    assert settings.default.deadline is None
    if profiles.ACTIVE == "ci":
        assert settings.default.derandomize and settings.default.max_examples == 10
        assert profiles.examples(3, 50) == 3
    elif profiles.ACTIVE == "dev":
        assert profiles.examples(3, 50) == 50

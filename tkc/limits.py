"""Bounds on the time and memory of one `tkc compile`, `tkc opt` or `tkc run` (issue 14).

A kernel compiles in seconds and a few hundred MB; an input that would take far more (a 5 MB
file of nested operators, a chain of thousands of statements) ends in a located error within the
bound instead of running for minutes. `bounded(...)` runs its body under a watchdog thread that
samples the wall time and the process's resident memory (`/proc/self/statm`) every 50 ms and,
past either limit, interrupts the main thread (`_thread.interrupt_main`: a blocked
`subprocess.run` of gcc or nvcc is interrupted too, and its child killed); the interrupt
becomes a TkError located at the input file, which the CLI reports with exit status 1.

Limits: TKC_TIME_LIMIT (seconds, default 600) and TKC_MEMORY_LIMIT_MB (default: 16384, or 3/4 of
the machine's memory if less); `0` turns a limit off. The source itself is bounded by the
front end (dsl/parser.py, TKC_MAX_SOURCE_BYTES).
"""

from __future__ import annotations

import _thread
import os
import threading
import time
from contextlib import contextmanager

from dsl.diagnostics import Loc, error

DEFAULT_TIME_S = 600.0
DEFAULT_MEMORY_MB = 16384
_PERIOD_S = 0.05


def _env_float(name: str, default: float) -> float:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise error(Loc("<environment>", 1, 1), f"{name} must be a number, not `{text}`",
                    f"unset it for the default ({default:g}), or 0 for no limit") from None
    if value < 0:
        raise error(Loc("<environment>", 1, 1), f"{name} must be >= 0, not `{text}`", "0 turns the limit off")
    return value


def _physical_mb() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def resident_mb() -> float | None:
    """This process's resident memory in MB (None where /proc is not there)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def limits() -> tuple[float, float]:
    """(seconds, MB) from the environment; 0 means no limit."""
    phys = _physical_mb()
    default_mb = min(DEFAULT_MEMORY_MB, 0.75 * phys) if phys else DEFAULT_MEMORY_MB
    return _env_float("TKC_TIME_LIMIT", DEFAULT_TIME_S), _env_float("TKC_MEMORY_LIMIT_MB", default_mb)


@contextmanager
def bounded(what: str, path: str):
    """Run the body (in the main thread) within the limits; past one, raise TkError located at
    `path` saying which limit, what it was, and how to raise it. `what` names the work
    ("compiling", "running")."""
    seconds, mb = limits()
    if (not seconds and not mb) or threading.current_thread() is not threading.main_thread():
        yield
        return
    start = time.monotonic()
    done = threading.Event()
    breach: list[str] = []

    def watch():
        while not done.wait(_PERIOD_S):
            if seconds and time.monotonic() - start > seconds:
                breach.append(f"the time limit of {seconds:g} s")
            elif mb and (rss := resident_mb()) is not None and rss > mb:
                breach.append(f"the memory limit of {mb:g} MB (resident: {rss:.0f} MB)")
            if breach:
                _thread.interrupt_main()
                return

    watchdog = threading.Thread(target=watch, name="tkc-limits", daemon=True)
    watchdog.start()
    try:
        yield
    except KeyboardInterrupt:
        if not breach:
            raise
        var = "TKC_TIME_LIMIT" if "time" in breach[0] else "TKC_MEMORY_LIMIT_MB"
        raise error(Loc(path, 1, 1), f"{what} `{os.path.basename(path)}` exceeded {breach[0]}",
                    f"a kernel compiles in seconds: is the input unusually large or deeply nested? "
                    f"Set {var} to raise the limit (0: none)") from None
    finally:
        done.set()
        watchdog.join()

"""Helpers for checking rendered diagnostics (`FILE:LINE:COL: error: ...`, source, caret, notes)."""

from __future__ import annotations

import re

HEAD = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error: (?P<msg>.*)$")
FILE_LEVEL = re.compile(r"^(?P<file>[^:]+): error: (?P<msg>.*)$")  # a whole file (it cannot be read)


def position(text: str, needle: str, nth: int = 0) -> tuple[int, int]:
    """1-based (line, col) of the `nth` occurrence of `needle` in `text`."""
    at = -1
    for _ in range(nth + 1):
        at = text.index(needle, at + 1)
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


def check_rendered(err: str, file: str, line: int, col: int, message: str, *, source: str | None,
                   notes: list[str] | None = None) -> list[str]:
    """Assert `err` is one rendered error at file:line:col with `message`; with `source` (the file's
    text) also the source line and a caret under `col`. `notes` are exact, or prefixes when they end
    in `...`. Returns the note texts."""
    assert "Traceback" not in err
    lines = err.rstrip("\n").split("\n")
    assert lines[0] == f"{file}:{line}:{col}: error: {message}", err
    rest = lines[1:]
    if source is not None:
        text = source.splitlines()[line - 1].expandtabs(4)
        assert rest[:2] == ["    " + text, "    " + " " * (col - 1) + "^"], err
        rest = rest[2:]
    got = [x[len("note: "):] for x in rest if x.startswith("note: ")]
    assert len(got) == len(rest), f"unexpected lines after the error: {rest}"
    if notes is not None:
        assert len(got) == len(notes), err
        for g, want in zip(got, notes):
            assert g.startswith(want[:-3]) if want.endswith("...") else g == want, f"note {g!r} != {want!r}"
    return got

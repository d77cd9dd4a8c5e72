"""Source locations and user-facing diagnostics.

Every user error in tkc (syntax, names, types, shapes, shared memory over budget, a construct a
target cannot express) is raised as :class:`TkError` carrying one or more :class:`Diagnostic`.
The CLI renders them as::

    examples/miss.tk:16:14: error: shape mismatch in `+=` on `S`: expected f32[16, 64], got f16[16, 32]
            S += A[m*BM : +BM, s*R : +32]
                 ^
    note: symbolically: expected [BM, R], got [BM, 32]

Internal compiler bugs are ordinary Python exceptions and are reported differently by the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Loc:
    """A 1-based line/column position in a named source file."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        if self.line <= 0:  # the file as a whole (e.g. it cannot be read)
            return self.file
        return f"{self.file}:{self.line}:{self.col}"


UNKNOWN = Loc("<unknown>", 0, 0)


@dataclass
class Diagnostic:
    """One located message; `notes` hold fixes and explanations (rendered as `note: ...`)."""

    loc: Loc
    message: str
    notes: list[str] = field(default_factory=list)
    severity: str = "error"

    def render(self, sources: dict[str, str] | None = None) -> str:
        head = f"{self.loc}: {self.severity}: {self.message}"
        lines = [head]
        text = _source_line(self.loc, sources or {})
        if text is not None:
            # Keep the line's tabs in front of the caret so both expand to the same columns.
            pad = "".join(c if c == "\t" else " " for c in text[: max(self.loc.col - 1, 0)])
            lines.append("    " + text.expandtabs(4))
            lines.append("    " + (pad + "^").expandtabs(4))
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _source_line(loc: Loc, sources: dict[str, str]) -> str | None:
    """The source line of `loc`, read from `sources` or from disk; None when unavailable."""
    if loc.line <= 0:
        return None
    text = sources.get(loc.file)
    if text is None:
        try:
            with open(loc.file, encoding="utf-8-sig", errors="replace") as f:  # (a bad byte shows as U+FFFD)
                text = f.read()
        except OSError:
            return None
    lines = text.splitlines()
    if loc.line > len(lines):
        return None
    return lines[loc.line - 1]


class TkError(Exception):
    """A user error: one or more located diagnostics. Never an internal bug."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = diagnostics
        super().__init__("\n".join(f"{d.loc}: {d.severity}: {d.message}" for d in diagnostics))

    def render(self, sources: dict[str, str] | None = None) -> str:
        return "\n".join(d.render(sources) for d in self.diagnostics)


def error(loc: Loc, message: str, *notes: str) -> TkError:
    """Build a single-diagnostic :class:`TkError` (raise the result)."""
    return TkError(Diagnostic(loc, message, list(notes)))

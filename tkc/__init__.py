"""tkc: a compiler for a small tile-level GPU kernel language (see README.md, docs/)."""

from tkc.runtime import Kernel, compile

__all__ = ["compile", "Kernel"]

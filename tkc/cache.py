"""On-disk cache of generated code, keyed by the final IR, the target and tool versions.

Layout: `<root>/<key[:2]>/<key>/` holding the artifact files and `meta.json` (key, target, the
SHA-256 of every file). Entries are written to a temporary directory and renamed into place, so
a reader sees a whole entry or none; an entry whose files do not match their recorded hashes is
deleted and rebuilt, never trusted. The root is `--cache-dir`, else `$TKC_CACHE_DIR`, else
`~/.cache/tkc`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from functools import lru_cache
import importlib.util

TKC_VERSION = "0.1.0"


def default_root() -> str:
    return os.environ.get("TKC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tkc")


@lru_cache(maxsize=1)
def tool_versions() -> str:
    """Versions that change generated or compiled code: tkc (its version and a hash of the
    compiler's own sources and grammars, so an edited compiler never reads stale entries),
    TileLang, Python."""
    tl = _installed_version("tilelang")
    h = hashlib.sha256()
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for pkg in ("dsl", "passes", "codegen", "tkc"):
        folder = os.path.join(top, pkg)
        for name in sorted(os.listdir(folder)):
            if name.endswith((".py", ".lark")):
                with open(os.path.join(folder, name), "rb") as f:
                    h.update(f"{pkg}/{name}".encode() + b"\0" + f.read())
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return f"tkc={TKC_VERSION}+{h.hexdigest()[:12]};tilelang={tl};python={py}"


def _installed_version(package: str) -> str:
    """The version in `package`'s dist-info folder name (cheaper than importlib.metadata, which
    costs a tenth of the warm-compile budget to import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return "none"
    site = os.path.dirname(os.path.dirname(spec.origin))
    prefix = package + "-"
    for name in os.listdir(site):
        if name.startswith(prefix) and name.endswith(".dist-info"):
            return name[len(prefix):-len(".dist-info")]
    return "unknown"


def cache_key(ir_text: str, target: str) -> str:
    h = hashlib.sha256()
    for part in (ir_text, target, tool_versions()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Cache:
    """A directory of cache entries (see module docstring)."""

    def __init__(self, root: str | None = None):
        self.root = root or default_root()

    def path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key)

    def get(self, key: str) -> dict[str, str] | None:
        """The entry's files (name -> text), or None if absent; corrupt entries are removed."""
        entry = self.path(key)
        try:
            with open(os.path.join(entry, "meta.json"), encoding="utf-8") as f:
                meta = json.load(f)
            files = {}
            for name, digest in meta["files"].items():
                with open(os.path.join(entry, name), "rb") as f:
                    data = f.read()
                if _sha(data) != digest:
                    raise ValueError(f"hash mismatch for {name}")
                files[name] = data.decode("utf-8")
            if meta.get("key") != key:
                raise ValueError("key mismatch")
            return files
        except FileNotFoundError:
            if os.path.isdir(entry):
                shutil.rmtree(entry, ignore_errors=True)
            return None
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
            shutil.rmtree(entry, ignore_errors=True)
            return None

    def put(self, key: str, files: dict[str, str], target: str) -> str:
        """Store `files` atomically under `key`; returns the entry's directory."""
        entry = self.path(key)
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{key[:8]}-", dir=os.path.dirname(entry))
        try:
            digests = {}
            for name, text in files.items():
                data = text.encode("utf-8")
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
                digests[name] = _sha(data)
            with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
                json.dump({"key": key, "target": target, "versions": tool_versions(), "files": digests}, f)
            if os.path.isdir(entry):
                shutil.rmtree(entry, ignore_errors=True)
            try:
                os.replace(tmp, entry)
            except OSError:  # another process stored the same entry first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return entry


def usable(root: str | None = None) -> "Cache":
    """A Cache under `root` (None: the default root) whose folder exists and is writable; a
    located user error (TkError at the folder) when that path cannot hold one: a regular file, a
    folder that cannot be created or written."""
    from dsl.diagnostics import Loc, error

    cache = Cache(os.fspath(root) if root is not None else None)
    if os.path.exists(cache.root) and not os.path.isdir(cache.root):
        raise error(Loc(cache.root, 0, 0), f"cannot use `{cache.root}` as the compile cache: it is a file, not a folder",
                    "pass a writable folder (--cache-dir, or tkc.compile's cache_dir)")
    try:
        os.makedirs(cache.root, exist_ok=True)
        ok, reason = os.access(cache.root, os.W_OK | os.X_OK), "it is not writable"
    except OSError as exc:
        ok, reason = False, exc.strerror or type(exc).__name__
    if not ok:
        raise error(Loc(cache.root, 0, 0), f"cannot use `{cache.root}` as the compile cache: {reason}",
                    "pass a writable folder (--cache-dir, or tkc.compile's cache_dir)")
    return cache

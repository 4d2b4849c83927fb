"""The precompiled form of a spec library, cached on disk.

Compiling a library parses with lark and reasons with sympy (about half a second);
its result is plain data (`CompiledFamily.to_json`). The cache keys that data by a
hash of every spec file and of layoutalg's own compiler sources, so an edit to
either recompiles, and a fresh process can derive mappings without importing lark
or sympy. Set LAYOUTALG_CACHE to choose the folder, or to "off" to disable it.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

_COMPILER = ("syntax.py", "sizes.py", "itersum.py", "library.py", "family.py", "compile.py", "compiled.py",
             "params.py")


def cache_dir() -> Path | None:
    where = os.environ.get("LAYOUTALG_CACHE", "")
    if where.lower() == "off":
        return None
    return Path(where) if where else Path.home() / ".cache" / "layoutalg"


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def compiler_fingerprint() -> str:
    """A hash of the code that turns specs into compiled families (and of the grammar)."""
    from ._resources import grammar_path
    here = Path(__file__).parent
    return _digest(*(here.joinpath(n).read_bytes() for n in _COMPILER), grammar_path().read_bytes())


def _files_digest(files) -> str:
    return _digest(*(str(f).encode() + b"\0" + Path(f).read_bytes() for f in sorted(map(str, files))))


def _path(kind: str, key: str) -> Path | None:
    d = cache_dir()
    return d / f"{kind}-{key[:32]}.json" if d else None


def load(kind: str, spec_dir: Path):
    """Cached data for a spec folder, or None. Checks every file the entry depends on."""
    key = _digest(compiler_fingerprint().encode(), _files_digest(spec_dir.glob("*.lal")).encode())
    p = _path(kind, key)
    if p is None or not p.is_file():
        return key, None
    try:
        entry = json.loads(p.read_text())
        if entry.get("files_digest") != _files_digest(entry["files"]):
            return key, None  # an imported file outside the folder changed
        return key, entry["data"]
    except (OSError, ValueError, KeyError):
        return key, None


def store(kind: str, key: str, files, data) -> None:
    """Write an entry atomically; a cache that cannot be written is silently skipped."""
    p = _path(kind, key)
    if p is None:
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        entry = {"files": sorted(map(str, files)), "files_digest": _files_digest(files), "data": data}
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, p)
    except OSError:
        pass

"""The precompiled form of a spec library, cached on disk.

Compiling a library parses with lark and reasons with sympy (about half a second);
its result is plain data (`CompiledFamily.to_json`). The cache keys that data by a
hash of every spec file and of layoutalg's own compiler sources, so an edit to
either recompiles, and a fresh process can derive mappings without importing lark
or sympy. Set LAYOUTALG_CACHE to choose the folder, or to "off" to disable it.

The entry holds Python source the runtime executes, so it is trusted no further than
it is checked: the folder and file must be this user's and writable by no one else, a
digest must match the entry's content, and `compiled.check_source` admits the source.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


MAX_ENTRY_BYTES = 64 << 20
"""An entry larger than this is not read (the shipped library's is about 50 KB)."""

_warned: set[str] = set()


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
    """A hash of the code that turns specs into compiled families (and of the grammar).

    Every module of the package counts (the prover's aside): a compiled form depends on
    more of them than a hand-kept list would remember, and recompiling costs half a second.
    """
    from ._resources import grammar_path
    here = Path(__file__).parent
    return _digest(*(p.read_bytes() for p in sorted(here.glob("*.py"))), grammar_path().read_bytes())


def _files_digest(files) -> str:
    return _digest(*(str(f).encode() + b"\0" + Path(f).read_bytes() for f in sorted(map(str, files))))


def _entry_digest(key: str, files: list[str], files_digest: str, text: str) -> str:
    return _digest(key.encode(), "\0".join(files).encode(), files_digest.encode(), text.encode())


def _path(kind: str, key: str) -> Path | None:
    d = cache_dir()
    return d / f"{kind}-{key[:32]}.json" if d else None


def private(path: Path) -> bool:
    """True when `path` is owned by this user and writable by no one else.

    The cache holds code the runtime executes (after `compiled.check_source`); a folder
    or file that another user can write is not trusted, read or written. The refusal is
    logged once per path.
    """
    if os.name != "posix":
        return True  # ownership and mode bits mean nothing reliable here
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_uid != os.getuid():
        why = f"it is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    elif st.st_mode & 0o022:
        why = f"it is writable by group or others (mode {st.st_mode & 0o777:o})"
    else:
        return True
    if str(path) not in _warned:
        import logging  # only here: importing it costs the runtime's start-up a few ms
        _warned.add(str(path))
        logging.getLogger(__name__).warning("layoutalg: not using the cache at %s: %s; working uncached", path, why)
    return False


def _valid_library(data) -> bool:
    from .compiled import valid_entry
    return isinstance(data, list) and all(valid_entry(d) for d in data)


_VALID = {"library": _valid_library}
"""What each kind of entry must look like to be returned at all."""


def load(kind: str, spec_dir: Path):
    """Cached data for a spec folder, or None. Checks every file the entry depends on.

    An entry is used only when its folder and file are private (`private`), its
    digest matches its content (a truncated or edited entry is ignored, never half
    used) and its data has the shape its kind requires.
    """
    key = _digest(compiler_fingerprint().encode(), _files_digest(spec_dir.glob("*.lal")).encode())
    p = _path(kind, key)
    if p is None or not p.is_file() or not (private(p.parent) and private(p)):
        return key, None
    data = _read_entry(p, key)
    valid = _VALID.get(kind)
    if data is not None and valid is not None and not valid(data):
        return key, None
    return key, data


def _read_entry(p: Path, key: str):
    try:
        if p.stat().st_size > MAX_ENTRY_BYTES:
            return None
        entry = json.loads(p.read_bytes())
        if not isinstance(entry, dict):
            return None
        files, files_digest, text = entry.get("files"), entry.get("files_digest"), entry.get("data")
        if not (entry.get("key") == key and isinstance(files, list) and all(isinstance(f, str) for f in files)
                and isinstance(files_digest, str) and isinstance(text, str)
                and entry.get("digest") == _entry_digest(key, files, files_digest, text)):
            return None
        if not all(Path(f).is_file() for f in files) or files_digest != _files_digest(files):
            return None  # an imported file outside the folder changed
        return json.loads(text)
    except (OSError, ValueError, RecursionError):
        return None


def store(kind: str, key: str, files, data) -> None:
    """Write an entry atomically; a cache that cannot be written, or is not private, is skipped."""
    p = _path(kind, key)
    if p is None:
        return
    try:
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(p.parent):
            return
        names = sorted(map(str, files))
        text = json.dumps(data, separators=(",", ":"))
        files_digest = _files_digest(names)
        entry = {"key": key, "files": names, "files_digest": files_digest, "data": text,
                 "digest": _entry_digest(key, names, files_digest, text)}
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, p)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass

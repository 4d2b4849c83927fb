"""The precompiled form of a spec library, cached on disk.

Compiling a library parses with lark and reasons with sympy (about half a second);
its result is plain data (`CompiledFamily.to_json`). The cache keys that data by a
hash of every spec file and of layoutalg's own compiler sources, so an edit to
either recompiles, and a fresh process can derive mappings without importing lark
or sympy. Set LAYOUTALG_CACHE to choose the folder, or to "off" to disable it.

The entry holds bytecode the runtime executes. The trust boundary is the folder: it and
the entry must be this user's and writable by no one else, and a digest must match the
entry's content (a truncated, damaged or half-written entry is ignored, never half used).
What enters it is checked there: `store` writes a library only when every family's source
passes `compiled.check_source`, the whitelist of what the compiler prints. An entry read
back is then run as Python runs its own `__pycache__`, without parsing its source again
(the key holds the interpreter's bytecode version, so another Python recompiles).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path

from .errors import LayoutalgError, SpecError


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
    return _digest(*(p.read_bytes() for p in sorted(here.glob("*.py"))), grammar_path().read_bytes(),
                   importlib.util.MAGIC_NUMBER)


def _files_digest(files) -> str:
    return _digest(*(str(f).encode() + b"\0" + _bytes_of(f) for f in sorted(map(str, files))))


def _bytes_of(f) -> bytes:
    """A spec file's bytes; a pipe or a device named like one is refused (its read may never end)."""
    p = Path(f)
    if p.exists() and not p.is_file():
        raise SpecError(f"cannot read spec file {p}: it is not a regular file")
    return p.read_bytes()


def snapshot(files) -> tuple[str | None, tuple]:
    """(the files' digest as an entry records it, ((path, sha256), ...)) from one read of each
    file, or (None, ()) where one cannot be read: what the read data was made from, without
    the race of reading twice."""
    try:
        data = {f: _bytes_of(f) for f in map(str, files)}
    except (OSError, LayoutalgError):
        return None, ()
    return (_digest(*(f.encode() + b"\0" + data[f] for f in sorted(map(str, files)))),
            tuple(sorted((f, hashlib.sha256(b).hexdigest()) for f, b in data.items())))


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


def _library_shape(data) -> bool:
    """The outline of an entry read back (no source parsed): the digest says the entry is what
    `store` admitted, and a reader that finds it otherwise all the same recompiles."""
    from .compiled import valid_entry
    return isinstance(data, list) and all(valid_entry(d, check=False) for d in data)


def _admit_library(data):
    """The library as the cache may hold it (`compiled.admitted`: each family's source checked and
    its bytecode compiled from that source), or None."""
    from .compiled import admitted
    if not isinstance(data, list):
        return None
    out = [admitted(d) for d in data]
    return None if any(d is None for d in out) else out


_VALID = {"library": _library_shape}
"""What each kind of entry must look like to be returned at all."""

_ADMIT = {"library": _admit_library}
"""What each kind of entry is made into to be written, or None where it is refused: the check
at the boundary."""


def unchanged(sources: tuple, folder: Path, listing: tuple) -> bool:
    """Whether every source still holds the bytes it was read with and the folder still holds
    the same spec files (`listing`): a library memoised from them may be served."""
    if listing != folder_listing(folder):
        return False
    for path, digest in sources:
        try:
            if hashlib.sha256(Path(path).read_bytes()).hexdigest() != digest:
                return False
        except OSError:
            return False
    return True


def folder_listing(folder: Path) -> tuple[str, ...]:
    return tuple(sorted(str(p) for p in folder.glob("*.lal")))


def key_of(spec_dir: Path) -> str:
    """The key of a spec folder's entries: the compiler and the folder's spec files."""
    return _digest(compiler_fingerprint().encode(), _files_digest(spec_dir.glob("*.lal")).encode())


def load(kind: str, spec_dir: Path, with_files: bool = False):
    """Cached data for a spec folder, or None (and with `with_files`, (the files it was made
    from, their digest as it records it), or None). Checks every file the entry depends on.

    An entry is used only when its folder and file are private (`private`), its
    digest matches its content (a truncated or edited entry is ignored, never half
    used) and its data has the shape its kind requires.
    """
    key = key_of(spec_dir)
    p = _path(kind, key)
    data, files = None, None
    if p is not None and p.is_file() and private(p.parent) and private(p):
        data, files = _read_entry(p, key)
        valid = _VALID.get(kind)
        if data is not None and valid is not None and not valid(data):
            data, files = None, None
    return (key, data, files) if with_files else (key, data)


def _read_entry(p: Path, key: str):
    """(the entry's data, the files it was made from), or (None, None)."""
    try:
        if p.stat().st_size > MAX_ENTRY_BYTES:
            return None, None
        entry = json.loads(p.read_bytes())
        if not isinstance(entry, dict):
            return None, None
        files, fdigest, text = entry.get("files"), entry.get("files_digest"), entry.get("data")
        if not (entry.get("key") == key and isinstance(files, list) and all(isinstance(f, str) for f in files)
                and isinstance(fdigest, str) and isinstance(text, str)
                and entry.get("digest") == _entry_digest(key, files, fdigest, text)):
            return None, None
        if not all(Path(f).is_file() for f in files) or fdigest != _files_digest(files):
            return None, None  # an imported file outside the folder changed
        return json.loads(text), (files, fdigest)
    except (OSError, ValueError, RecursionError):
        return None, None


def store(kind: str, key: str, files, data, made_from: tuple | None = None, spec_dir: Path | None = None) -> None:
    """Write an entry atomically; a cache that cannot be written, or is not private, is skipped.
    With `made_from` ((path, sha256) of the bytes the data was made from, `library.sources`)
    and `spec_dir`, an entry is written only where the files still hold those bytes and the
    folder still has `key`: a spec edited while it compiled is never recorded as its source."""
    p = _path(kind, key)
    if p is None:
        return
    names = sorted(map(str, files))
    fdigest, read = snapshot(names)  # one read: the digest recorded is of the bytes compared
    if fdigest is None or made_from is not None and (read != tuple(sorted(made_from)) or key_of(spec_dir) != key):
        return
    text = json.dumps(data, separators=(",", ":"))
    admit = _ADMIT.get(kind)
    if admit is not None:
        data = admit(json.loads(text))  # as it will be read back
        if data is None:
            return
        text = json.dumps(data, separators=(",", ":"))
    try:
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not private(p.parent):
            return
        entry = {"key": key, "files": names, "files_digest": fdigest, "data": text,
                 "digest": _entry_digest(key, names, fdigest, text)}
        import tempfile  # only here: a read never needs it
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

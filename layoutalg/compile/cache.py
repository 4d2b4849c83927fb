"""The precompiled form of a spec library, cached on disk.

Compiling a library parses with lark and reasons with sympy (about half a second); its
result is plain data (`CompiledFamily.to_json`). The cache keys that data by a hash of every
spec file and of layoutalg's own compiler sources, so an edit to either recompiles, and a
fresh process derives mappings without importing lark or sympy. Set LAYOUTALG_CACHE to choose
the folder, or to "off" to disable it.

A fresh process finds its entry without hashing anything: an index per spec folder
(`recall`) records the size and modification time of every file the entry was made from
(the spec files, the package's own sources, the grammar), as Python's `__pycache__` records
a module's. Where all of them match, the index names the entry. A file modified within
`RACY_NS` of the moment its times were recorded is not vouched for by them (a second edit in
the same clock tick leaves them as they were): such a file, or any mismatch, sends the load
the long way (`load`), which hashes every file to find the entry's key.

The trust boundary is the folder. It and each file in it must be this user's and writable by
no one else (`private`), and each file carries a CRC-32 of its content, so a damaged,
truncated or half-written file is ignored, never half used (a checksum, not a signature:
whoever can write your private folder can already run code as you). What enters the boundary
is checked there: `store` writes a library only when every family's source passes
`whitelist.check_source`, the whitelist of what the compiler prints, with bytecode compiled
here from that source. An entry read back runs its bytecode as Python runs its `__pycache__`
(the key holds the interpreter's bytecode version, the index its version, so another Python
recompiles).
"""
from __future__ import annotations

import marshal
import os
import sys
import time
import zlib

from ..record import named_tuple
from ..dsl.sources import bytes_of, sha256_hex, files_digest, folder_listing, settled, snapshot, stats
from ..errors import LayoutalgError


clock = time.time_ns
"""The wall clock an index's time is read from (its files must be older than it by
`sources.RACY_NS`); a test that needs an index written whatever the files' age injects one."""

MAX_ENTRY_BYTES = 64 << 20
"""A file larger than this is not read (the shipped library's entry is about 1 MB)."""


_MAGIC = b"layoutalg cache 3\n"
"""The first bytes of every file the cache writes; another layout of the file is not read."""

_warned: set[str] = set()


def _folder() -> str | None:
    where = os.environ.get("LAYOUTALG_CACHE", "")
    if where.lower() == "off":
        return None
    return where or os.path.join(os.path.expanduser("~"), ".cache", "layoutalg")


def cache_dir():
    """The cache folder (a `pathlib.Path`), or None where the cache is off."""
    from pathlib import Path
    where = _folder()
    return Path(where) if where else None


def _package_files() -> list[str]:
    """The files a compiled form depends on: every module of the package's top level and of the
    pipeline's folders up to compilation (a compiled form depends on more of them than a
    hand-kept list of modules would remember, and recompiling costs half a second), then the
    grammar."""
    from ..resources import grammar_file
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for folder in ("", "algebra", "dsl", "ir", "compile"):
        here = os.path.join(top, folder)
        out += sorted(os.path.join(here, n) for n in os.listdir(here) if n.endswith(".py"))
    return out + [grammar_file()]


def compiler_fingerprint() -> str:
    """A hash of the code that turns specs into compiled families, of the grammar, and of the
    interpreter's bytecode version."""
    import importlib.util
    return sha256_hex(*(bytes_of(p) for p in _package_files()), importlib.util.MAGIC_NUMBER)


def private(path) -> bool:
    """True when `path` is owned by this user and writable by no one else.

    The cache holds code the runtime executes (after `whitelist.check_source`); a folder
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


def read_file(path) -> object | None:
    """What `write_file` wrote at `path`, or None: no such file, a file or folder that is not
    private, too large, not of this cache's layout, or whose checksum does not match."""
    path = os.fspath(path)
    try:
        if not (os.path.isfile(path) and private(os.path.dirname(path)) and private(path)):
            return None
        with open(path, "rb") as f:
            raw = f.read(MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    n = len(_MAGIC)
    if len(raw) > MAX_ENTRY_BYTES or raw[:n] != _MAGIC:
        return None
    body = memoryview(raw)[n + 4:]
    if int.from_bytes(raw[n:n + 4], "little") != zlib.crc32(body):
        return None
    try:
        return marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None


def write_file(path, payload) -> None:
    """Write `payload` (data `marshal` holds) atomically: a reader finds the old file or the
    whole new one. A folder that is not private is not written."""
    path = os.fspath(path)
    blob = marshal.dumps(payload)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if not private(os.path.dirname(path)):
        return
    import tempfile  # only here: a read never needs it
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + zlib.crc32(blob).to_bytes(4, "little") + blob)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _path(kind: str, key: str) -> str | None:
    d = _folder()
    return os.path.join(d, f"{kind}-{key[:32]}.bin") if d else None


def _index_path(kind: str, folder: str) -> str | None:
    d = _folder()
    return os.path.join(d, f"index-{kind}-{zlib.crc32(folder.encode()):08x}.bin") if d else None


def _library_shape(data) -> bool:
    """The outline of an entry read back (no source parsed): the checksum says the entry is what
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


def key_of(spec_dir, listing: tuple | None = None) -> str:
    """The key of a spec folder's entries: the compiler and the folder's spec files (`listing`,
    where the caller has read it)."""
    listing = folder_listing(spec_dir) if listing is None else listing
    return sha256_hex(compiler_fingerprint().encode(), files_digest(listing).encode())


class Recalled:
    """An entry found through its folder's index: its data, and the times (`stats`) of the
    files it was made from, recorded `at` (ns), which still vouch for them."""

    __slots__ = ("data", "sig", "at")

    def __init__(self, data, sig: tuple, at: int):
        self.data, self.sig, self.at = data, sig, at


def recall(kind: str, folder: str) -> Recalled | None:
    """The entry of `kind` for spec folder `folder` (a real path) by its index alone, or None:
    the index must be this folder's, of this Python, list the folder's spec files as they are,
    and record, for every file the entry was made from, the size and modification time it has
    now, well before the index was written (`settled`). Nothing is hashed."""
    p = _index_path(kind, folder)
    index = read_file(p) if p else None
    if not (isinstance(index, dict) and index.get("folder") == folder and index.get("python") == sys.version
            and index.get("listing") == folder_listing(folder) and type(index.get("at")) is int
            and isinstance(index.get("key"), str) and isinstance(index.get("specs"), tuple)):
        return None
    sig = stats(_package_files() + list(index["specs"]))
    if sig is None or sig != index.get("sig") or not settled(sig, index["at"]):
        return None
    entry = read_file(_path(kind, index["key"]))
    if not (isinstance(entry, dict) and entry.get("key") == index["key"] and entry.get("data") is not None):
        return None
    # the entry's shape is not walked again: this layoutalg wrote it (the key names its sources)
    # and its checksum holds; a field missing makes the library compile afresh, and one edited
    # with the checksum made to match is an edit of the private folder, past the boundary
    return Recalled(entry["data"], sig, index["at"])


def remember(kind: str, folder: str, key: str, files) -> None:
    """Write `folder`'s index for its entry `key` (made from the spec files `files`): the
    times of every file it depends on, read before their bytes are hashed again and found to
    be those of `key`. Nothing is written while a file's times do not yet vouch for it."""
    p = _index_path(kind, folder)
    if p is None:
        return
    specs = tuple(sorted(map(str, files)))
    at = clock()
    sig = stats(_package_files() + list(specs))
    if sig is None or not settled(sig, at):
        return
    listing = folder_listing(folder)  # one reading of the folder: the key and the index both of it
    entry = read_file(_path(kind, key))  # the bytes now are those the entry was made from
    if not (isinstance(entry, dict) and entry.get("key") == key == key_of(folder, listing)
            and entry.get("files_digest") == files_digest(specs) and list(specs) == entry.get("files")):
        return
    write_file(p, {"folder": folder, "python": sys.version, "listing": listing, "key": key,
                   "specs": specs, "sig": sig, "at": at})


@named_tuple
class Loaded:
    """What `load` found for a spec folder: its `key`, the entry's `data` (None where there is
    none to use), and the files it was made from with their digest as the entry records them
    (`made_from`: (files, digest), or None)."""

    key: str
    data: object
    made_from: object


def load(kind: str, spec_dir) -> Loaded:
    """Cached data for a spec folder (`Loaded`: its key, the data or None, and the files it was
    made from with their digest, or None), the long way: the folder's key hashed, and every
    file the entry depends on checked.

    An entry is used only when its folder and file are private (`private`), its
    checksum matches its content (a truncated or edited entry is ignored, never half
    used) and its data has the shape its kind requires.
    """
    key = key_of(spec_dir)
    p = _path(kind, key)
    data, files = None, None
    if p is not None:
        data, files = _read_entry(p, key)
        valid = _VALID.get(kind)
        if data is not None and valid is not None and not valid(data):
            data, files = None, None
    return Loaded(key, data, files)


def _read_entry(p: str, key: str):
    """(the entry's data, the files it was made from), or (None, None)."""
    entry = read_file(p)
    if not isinstance(entry, dict):
        return None, None
    files, fdigest, data = entry.get("files"), entry.get("files_digest"), entry.get("data")
    if not (entry.get("key") == key and isinstance(files, list) and all(isinstance(f, str) for f in files)
            and isinstance(fdigest, str) and data is not None):
        return None, None
    try:
        if not all(os.path.isfile(f) for f in files) or fdigest != files_digest(files):
            return None, None  # an imported file outside the folder changed
    except (OSError, LayoutalgError):
        return None, None
    return data, (files, fdigest)


def _plain(x):
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return {k: _plain(v) for k, v in x.items()} if isinstance(x, dict) else x


def store(kind: str, key: str, files, data, made_from: tuple | None = None, spec_dir=None) -> None:
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
    data = _plain(data)  # lists, not tuples: what every reader of an entry expects
    admit = _ADMIT.get(kind)
    if admit is not None:
        data = admit(data)
        if data is None:
            return
    write_file(p, {"key": key, "files": names, "files_digest": fdigest, "data": data})

"""The files a library is read from: their bytes, digests and times, and whether a library
read from them may still be served (`unchanged`). What the in-process memos and the on-disk
cache (`compile.cache`) both ask; no parsing, hashing only where asked.
"""
from __future__ import annotations

import os
import stat

from ..errors import LayoutalgError, SpecError


ABSENT = "absent"
"""The digest `library.sources` records for a path that must still not exist (an import the
shipped library answered because the importing folder had no such file)."""

RACY_NS = 2_000_000_000
"""A file modified this close to when its times were recorded is hashed, not trusted by them
(coarse file-system clocks tick in milliseconds, some in seconds)."""


def sha256_hex(*parts: bytes) -> str:
    import hashlib  # only here: a load through the index hashes nothing
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def files_digest(files) -> str:
    return sha256_hex(*(str(f).encode() + b"\0" + bytes_of(f) for f in sorted(map(str, files))))


def bytes_of(f) -> bytes:
    """A file's bytes; a pipe or a device named like a spec is refused (its read may never end)."""
    f = os.fspath(f)
    if os.path.exists(f) and not os.path.isfile(f):
        raise SpecError(f"cannot read spec file {f}: it is not a regular file")
    if os.path.islink(f) and not os.path.exists(f):
        raise SpecError(f"cannot read spec file {f}: it is a link to {os.readlink(f)}, which does not exist")
    with open(f, "rb") as fh:
        return fh.read()


def snapshot(files) -> tuple[str | None, tuple]:
    """(the files' digest as an entry records it, ((path, sha256), ...)) from one read of each
    file, or (None, ()) where one cannot be read: what the read data was made from, without
    the race of reading twice."""
    import hashlib
    try:
        data = {f: bytes_of(f) for f in map(str, files)}
    except (OSError, LayoutalgError):
        return None, ()
    return (sha256_hex(*(f.encode() + b"\0" + data[f] for f in sorted(data))),
            tuple(sorted((f, hashlib.sha256(b).hexdigest()) for f, b in data.items())))


def stats(paths) -> tuple | None:
    """((path, size, modification time in ns, inode), ...) of each file (through links), or None
    where one is not a regular file. The inode tells a file replaced whole, or a link
    pointed at another file, from the one recorded, whatever their sizes and times."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        out.append((p, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def settled(sig: tuple, at_ns: int) -> bool:
    """Whether every file of `sig` (`stats`) was last modified well before `at_ns`, so that its
    size and time vouch for its bytes."""
    return all(mtime < at_ns - RACY_NS for _, _, mtime, _ in sig)


def unchanged(sources: tuple, folder, listing: tuple) -> bool:
    """Whether every source still holds the bytes it was read with and the folder still holds
    the same spec files (`listing`): a library memoised from them may be served."""
    import hashlib
    if listing != folder_listing(folder):
        return False
    for path, digest in sources:
        if digest == ABSENT:
            if os.path.lexists(path):
                return False
            continue
        try:
            if hashlib.sha256(bytes_of(path)).hexdigest() != digest:
                return False
        except (OSError, LayoutalgError):
            return False
    return True


def folder_listing(folder) -> tuple[str, ...]:
    """The spec files of a folder (its `*.lal` names, as paths), sorted."""
    folder = os.fspath(folder)
    try:
        names = os.listdir(folder)
    except OSError:
        return ()
    return tuple(sorted(os.path.join(folder, n) for n in names if n.endswith(".lal")))

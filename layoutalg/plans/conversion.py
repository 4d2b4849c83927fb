"""Page conversions on the engine's path: built from the compiled family, resting on proofs
looked up as data. Imports no parser, sympy or Z3, and nothing of `verify`.

A conversion joins pages of two configurations of another cp (or block size) along the
family's `sequence` index (`pageformat`). It is sound where three rows of the family's proof
hold for all sizes, for every data region: `sequence-order` (canonical t is the token's place
in the sequence: joining along t keeps the order), `one-format` (each canonical index names
one engine element at every configuration) and `digits-match-spec` (the digit tables the
runtime executes compute the spec's offsets). `verify.conversions.record` proves them
(offline, cached as the library's proofs are, and written by `layoutalg prove`) and keeps a
record of them in the proof cache, with what it needs that the compiled form does not hold
(the `sequence` index and each part's canonical index names) and what the proofs were made
from: the bytes of every spec file the family reads, and the prover's and the compiler's
sources. `facts` reads that record and believes it only while all of those are as they were;
otherwise, or where it was never written, a conversion is refused naming the command that
proves it.
"""
from __future__ import annotations

import hashlib
import os

from ..errors import LayoutalgError

REQUIRED = ("sequence-order", "one-format", "digits-match-spec")
"""The rows a conversion rests on, each proved for all sizes in every data region."""

ALL_SIZES = "symbolic: all sizes"
"""How a row proved for all sizes says so (`Row.method`'s start)."""

VERSION = 1
"""The layout of a record; another is not read."""


class ConversionFacts:
    """What a family's conversions rest on, as proved: the `sequence` index `token`, each part's
    canonical index names (`names`: '' for a family of one box, else the region), and the rows
    (`rows`: (obligation, part, method) each proved for all sizes)."""

    __slots__ = ("family", "token", "names", "rows")

    def __init__(self, family: str, token: str, names: dict, rows: tuple):
        self.family, self.token, self.names, self.rows = family, token, names, rows


def conversion(family: str, big: dict, small: dict, spec_dir=None):
    """The `PageConversion` from canonical pages of `big` sizes to those of `small` sizes (fewer
    tokens a page) of `family` in the compiled library of `spec_dir` (default: the shipped
    specs). Raises `LayoutalgError` where its proofs are not on record for the family as it is
    now (`facts`), or where the two pages are not parts of one another."""
    from ..runtime.derive import compiled_library
    from .pageformat import page_conversion
    library = compiled_library(spec_dir)
    if family not in library:
        raise LayoutalgError(f"{family}: no family of that name in the compiled library")
    cf = library[family]
    fx = facts(cf)
    return page_conversion(cf, big, small, fx.token, fx.names)


def facts(cf) -> ConversionFacts:
    """The proved facts of compiled family `cf`'s conversions, from the proof cache. Raises
    `LayoutalgError` saying how to prove them where there is no record, or the record is of
    other spec bytes, another prover or compiler, or another canonical format."""
    how = f"prove it first: `layoutalg prove --family {cf.name}`"
    spec = _spec_file(cf)
    data = _read(record_path(cf.name, spec))
    if data is None:
        raise LayoutalgError(f"{cf.name}: its page conversions are not on record as proved for all sizes "
                             f"(no record in the proof cache for {spec}); {how}")
    stale = _stale(data, cf)
    if stale:
        raise LayoutalgError(f"{cf.name}: the proofs its page conversions rest on are of {stale}; {how}")
    return ConversionFacts(cf.name, data["token"], dict(data["names"]), tuple(tuple(r) for r in data["rows"]))


def record_path(family: str, spec: str) -> str | None:
    """Where the record of `family` (defined in spec file `spec`) lies, or None without a cache."""
    from ..compile.cache import cache_dir
    d = cache_dir()
    if d is None:
        return None
    key = hashlib.sha256(f"{family}\0{os.path.realpath(spec)}".encode()).hexdigest()
    return os.path.join(os.fspath(d), f"conversion-{key[:32]}.bin")


def write(family: str, spec: str, layout_id: str, token: str, names: dict, rows: list, files) -> None:
    """Keep the record (`verify.conversions.record` calls this once every row is proved for all
    sizes): the facts, and the digest of every file they were proved from (`files`: the spec
    files the family reads, as their bytes were when proved)."""
    from ..compile.cache import write_file
    path = record_path(family, spec)
    if path is None:
        return
    write_file(path, {"version": VERSION, "family": family, "spec": os.path.realpath(spec), "layout_id": layout_id,
                      "token": token, "names": {k: tuple(v) for k, v in names.items()},
                      "rows": tuple(tuple(r) for r in rows), "files": tuple(sorted(files)),
                      "made_by": made_by()})


def digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def made_by() -> str:
    """A hash of the sources of what made the facts: the prover (`verify`), the runtime and the
    compiler (`compile.cache.compiler_fingerprint`, which holds the grammar and the parser)."""
    from ..compile.cache import compiler_fingerprint
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256(compiler_fingerprint().encode())
    for folder in ("verify", "runtime", "plans"):
        for root, dirs, names in sorted(os.walk(os.path.join(package, folder))):
            dirs.sort()
            for n in sorted(names):
                if n.endswith(".py"):
                    with open(os.path.join(root, n), "rb") as f:
                        h.update(f.read())
    return h.hexdigest()


def _spec_file(cf) -> str:
    return cf.where.rsplit(":", 2)[0]


def _read(path):
    from ..compile.cache import read_file
    data = read_file(path) if path is not None else None
    keys = {"version", "family", "spec", "layout_id", "token", "names", "rows", "files", "made_by"}
    if not (isinstance(data, dict) and set(data) == keys and data["version"] == VERSION):
        return None
    return data


def _stale(data: dict, cf) -> str:
    """'' where the record is of `cf` as it is now, else what it is of."""
    if data["family"] != cf.name or data["spec"] != os.path.realpath(_spec_file(cf)):
        return "another family"
    if data["layout_id"] != cf.layout_id:
        return f"another canonical format ({data['layout_id']}, now {cf.layout_id})"
    changed = [p for p, d in data["files"] if digest(p) != d]
    if changed:
        return f"other bytes of {', '.join(changed)}"
    if data["made_by"] != made_by():
        return "another version of layoutalg's prover, runtime or compiler"
    parts = [region for region, _ in cf.parts] if hasattr(cf, "parts") else [""]
    proved = {(obligation, part) for obligation, part, method in data["rows"] if method.startswith(ALL_SIZES)}
    missing = [f"{o}{f' ({p})' if p else ''}" for p in parts for o in REQUIRED if (o, p) not in proved]
    if missing or sorted(data["names"]) != sorted(parts):
        return "a family whose rows are not all proved for all sizes: " + ", ".join(missing or ["its parts"])
    return ""

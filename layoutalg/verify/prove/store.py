"""Cached proof results, keyed by what they depend on. Imports no Z3."""
from __future__ import annotations

import hashlib
import re
import json
import os
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from ...verdicts import Verdict
from ...compile import cache
from . import PROVER_VERSION
from . import RLIMIT
from .registry import ENTRIES, LIBRARY_MODES, RESHARD_MODES, in_mode

OBLIGATIONS = {o.name: o.meaning for o in ENTRIES if o.mode in LIBRARY_MODES}
"""A library proof's obligations and what they mean (a view of `registry.ENTRIES`). In a
family of pages each row but `structure` and `page-size` is asked of every data region
(`family.region`), with 'page' the whole page the region lies in."""

RESHARD_OBLIGATIONS = {o.name: o.meaning for o in ENTRIES if o.mode in RESHARD_MODES}
"""The rows of `prove --reshard` (a view of `registry.ENTRIES`): a plan between two
configurations against the spec's reading of both (`reshard` at the given sizes, `all_sizes`
for all sizes)."""
RESHARD = in_mode("reshard")


def describe(names=None) -> str:
    """Each obligation (of `names`, default: a library proof's) and what it means."""
    meant = {**OBLIGATIONS, **RESHARD_OBLIGATIONS}
    return "\n".join(f"  {k:<22} {meant[k]}" for k in (OBLIGATIONS if names is None else names))


@dataclass
class Row:
    spec: str
    family: str
    obligation: str
    status: Verdict  # proved | refuted | unknown: a plain word (a cached row's) is read as its Verdict
    method: str
    seconds: float
    detail: str = ""
    configurations: list = field(default_factory=list)  # proved configurations, where not all sizes
    final: bool = True  # False when the wall-clock guard decided part of it: never cached
    witness: dict = field(default_factory=dict)  # a refutation's configuration (name -> int), to draw it

    def __post_init__(self):
        self.status = Verdict.of(self.status)  # a word outside the three is refused here, once


def proof_key(lib, family: str, rlimit: int = RLIMIT) -> str:
    """What a cached proof depends on: the family's spec files, the prover, Z3, the budget.

    Only definite results reached within Z3's deterministic budget are cached, so the
    same key gives the same table on any machine; the wall-clock guard is not part of it.
    """
    texts = sorted((p, Path(p).read_bytes().hex()) for p in dependencies(lib, family))
    parts = [PROVER_VERSION, cache.compiler_fingerprint(), metadata.version("z3-solver"), family,
             repr(texts), _prover_fingerprint(), str(rlimit)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cacheable(rows: list[dict]) -> bool:
    """Only definite, deterministic results are kept: never an unknown, never a guard's verdict."""
    return bool(rows) and all(r["status"] != Verdict.UNKNOWN and r.get("final", True) for r in rows)


def row(lib, family: str, obligation: str, rlimit: int, prove) -> Row:
    """The `obligation` row of `family` from the cache, else `prove()` (a Row), kept where it is
    definite and reached within Z3's budget alone. Keyed as a family's proof is (`proof_key`) and
    by the obligation, so a direct plan asking the family's `one-format` or `sequence-order` row
    asks Z3 once per spec text, prover and budget, not once per plan."""
    key = hashlib.sha256(f"{proof_key(lib, family, rlimit)}\0{obligation}".encode()).hexdigest()
    hit = read(key)
    if hit and len(hit) == 1 and hit[0]["family"] == family and hit[0]["obligation"] == obligation:
        return Row(**hit[0])
    out = prove()
    data = [asdict(out)]
    if cacheable(data):
        write(key, data)
    return out


def dependencies(lib, family: str) -> set[str]:
    """Every file the family's meaning comes from: its own, those it imports (transitively),
    and those that define its grid, its layouts, any shared `let` or `fn`, and the `param`s
    its files read: files loaded together share one namespace, so a family may use a grid
    from a file it never names (a param it never mentions changes nothing, so loading the
    family alone or with the whole folder keys its proof alike)."""
    by_path = {m.path: m for m in lib.modules}
    f = lib.family_def(family)
    used = [lib.grids.get(f.grid.id) if f.grid else None,
            *(lib.layouts.get(u.call.fn) for u in (f.local, f.canonical) if u is not None),
            *lib.lets.values(), *lib.fns.values()]
    seen: set[str] = set()
    todo = [f.span.file] + [d.span.file for d in used if d is not None and d.span is not None]
    if used[0] is not None:  # a grid's `use`d rules may come from a file that is not imported
        todo += _statement_files(used[0].body)
    params = dict(lib.params)
    while todo:
        while todo:
            p = todo.pop()
            if p in seen or p not in by_path:
                continue
            seen.add(p)
            todo += [str((Path(p).parent / i.path).resolve()) for i in by_path[p].imports]
        text = "".join(_text(p) for p in sorted(seen))
        for name in [n for n in params if re.search(rf"\b{n}\b", text)]:
            todo.append(params.pop(name).span.file)
    return seen


def _statement_files(body) -> list[str]:
    from ...dsl.tree import Case
    out = []
    for s in body:
        out.append(s.span.file)
        if isinstance(s, Case):
            out += _statement_files(s.body)
    return out


def _text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _prover_fingerprint() -> str:
    """Every module a proof may read beyond the compiler's: the verifier's (the prover, the
    element oracle `one-format` names elements by, the samples) and the runtime's (the runs
    `runs-*` check)."""
    package = Path(__file__).parents[2]
    files = sorted(p for folder in ("verify", "runtime") for p in (package / folder).rglob("*.py"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def _cache_file(key: str) -> Path | None:
    d = cache.cache_dir()
    return d / f"proof-{key[:32]}.json" if d else None


def read(key: str):
    """The cached rows for `key`, or None: only from a private folder, only an entry made for
    this very key, and only rows of the right shape (a forged "proved" is not believed)."""
    p = _cache_file(key)
    try:
        if not (p and p.is_file() and cache.private(p.parent) and cache.private(p)) or \
                p.stat().st_size > cache.MAX_ENTRY_BYTES:
            return None
        entry = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError):  # a damaged entry is a miss, never an error of the spec's
        return None
    rows = entry.get("rows") if isinstance(entry, dict) and entry.get("key") == key else None
    return rows if isinstance(rows, list) and rows and all(_valid_row(r) for r in rows) else None


def _valid_row(r) -> bool:
    fields = {f.name for f in Row.__dataclass_fields__.values()}
    return isinstance(r, dict) and set(r) == fields and r["status"] in tuple(Verdict) \
        and isinstance(r["configurations"], list) and isinstance(r["witness"], dict) \
        and all(isinstance(k, str) and type(v) is int for k, v in r["witness"].items()) and all(isinstance(r[k], str) for k in
                                                            ("spec", "family", "obligation", "method", "detail"))


def write(key: str, data) -> None:
    p = _cache_file(key)
    if p is None:
        return
    try:
        p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not cache.private(p.parent):
            return
        tmp = p.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "rows": data}, f)
        os.replace(tmp, p)
    except OSError:
        pass

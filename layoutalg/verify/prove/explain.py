"""Counterexamples in words: a refuted row's detail names the family (or its region), the
obligation's violation at the configuration Z3 found (the ranks, the indices, the bytes), and
the sizes; where the runtime could still lower that configuration, what its runs do there.
"""
from __future__ import annotations

import os
import re

import z3

from ... import params
from ...compile.codegen import compile_family
from ...dsl.library import Library
from ...ir.family import resolve
from ...runtime.lower import lower_uncertified
from . import meaning
from .obligations import Model, holding, value
from .registry import ENTRIES, REGISTRY, check_table
from .witness import Witness


def where_in_spec(lib: Library, family: str, name: str) -> str:
    """The spec line a counterexample of row `name` names (`Obligation.points_at`; the shard
    map's for a name the registry does not hold)."""
    f = lib.family_def(family)
    span = f.shard.span if f.shard else f.span
    role, _, layout = (REGISTRY[name].points_at if name in REGISTRY else "shard").partition(" ")
    if layout:  # the layout's own definition
        use = f.local if role == "local" else f.canonical
        span = lib.layouts[use.call.fn].span if use.call.fn in lib.layouts else span
    elif role != "shard":  # where the family uses it as its local or canonical page
        use = f.local if role == "local" else f.canonical
        span = use.span if use else span
    return f"{os.path.relpath(span.file)}:{span.line}"


def sizes_text(m: Model, model) -> str:
    used = names_used(m.lib, m.family)
    return ", ".join(f"{n}={value(model, m.sizes[n])}" for n in m.sizes if n in used)


def witness_config(m: Model, model) -> dict:
    """The counterexample's configuration, every runtime name as an int (empty if it cannot be read)."""
    try:
        return {n: value(model, v) for n, v in m.sizes.items()}
    except Exception:  # noqa: BLE001 - the refutation stands without its picture
        return {}


def explain(lib: Library, family: str, name: str, m: Model, model, w: Witness) -> str:
    """A counterexample a person can act on, in the spec's own names (never raises)."""
    where = where_in_spec(lib, family, name)
    try:
        return _explain(lib, family, name, m, model, w, where, sizes_text(m, model))
    except Exception as e:  # noqa: BLE001 - the refutation stands even if its text cannot be made
        return f"{where}: counterexample found (its description failed: {type(e).__name__}: {e})"


class _Shown:
    """A counterexample being put in words: the family, the model Z3 found, the witness terms
    (`w`), where (`where`) and at what sizes (`sizes`)."""

    def __init__(self, lib, family, m, model, w, where, sizes):
        self.lib, self.family, self.m, self.model, self.w, self.where, self.sizes = \
            lib, family, m, model, w, where, sizes

    def value(self, x):
        return value(self.model, x)

    def idx(self, x) -> str:
        return ", ".join(f"{n}={self.value(v)}" for n, v in x.items())

    def rank(self, d):
        return self.value(self.m.rank_of(d))

    def holds(self, x) -> bool:
        return z3.is_true(self.model.eval(x, model_completion=True))


def _bijective_text(s: _Shown) -> str:
    m, w = s.m, s.w
    ldef, bound = m.r.layout(w.role)
    i, j = w.i, w.j
    oi = s.value(m.r.expr(ldef.offset, {**bound, **i}))
    if s.holds(w.clash):
        return (f"{s.where}: the {w.role} layout sends ({s.idx(i)}) and ({s.idx(j)}) both to element {oi}, "
                f"with {s.sizes}")
    unit = "bytes of the page" if m.part else "elements"
    return (f"{s.where}: the {w.role} layout sends ({s.idx(i)}) to element {oi}, outside its "
            f"{s.value(w.size)} {unit}, with {s.sizes}")


def _disjoint_text(s: _Shown) -> str:
    m, w = s.m, s.w
    d, e = w.d, w.e
    c = m.r.shard(w.i, d)
    byte = s.value(m.r.offset("canonical", c))
    return (f"{s.where}: ranks {s.rank(d)} and {s.rank(e)} both write canonical byte {byte} of block "
            f"{_block(m, s.model, d)} ({s.idx(c)}) with {s.sizes}")


def _identity_text(s: _Shown) -> str:
    m = s.m
    pages = (s.value(m.r.page("local")), s.value(m.r.page("canonical")))
    if not m.part and pages[0] != pages[1]:
        return (f"{s.where}: on a single rank the local page is {pages[0]} bytes but the canonical page is "
                f"{pages[1]}, with {s.sizes}")
    return f"{s.where}: on a single rank local ({s.idx(s.w.i)}) moves to another canonical byte, with {s.sizes}"


def _runs_match_text(s: _Shown) -> str:
    w = s.w
    spec_byte = s.value(s.m.canonical_byte(w.i, w.d) + w.b)
    return (f"{s.where}: rank {s.rank(w.d)} copies local byte {s.value(w.x)} to canonical byte "
            f"{s.value(w.claimed)}, but the spec puts it (local {s.idx(w.i)}) at canonical byte "
            f"{spec_byte}, with {s.sizes}")


def _sequence_text(s: _Shown) -> str:
    w = s.w
    q = w.seq
    part = holding(s.model, w)
    if part == "count":
        return (f"{s.where}: `sequence {q}` claims the page's tokens, but the local index {q} runs over "
                f"{s.value(w.local)} place(s) where a block holds block_size = {s.value(w.tokens)} tokens "
                f"(two tokens share a place, or a token has none), with {s.sizes}")
    if part == "pages":
        return (f"{s.where}: `sequence {q}` claims the page's tokens, but the canonical index {q} runs over "
                f"{s.value(w.canonical)} place(s) where a canonical page holds block_size * cp = "
                f"{s.value(w.tokens)} * {s.value(w.cp)} tokens, with {s.sizes}")
    if part == "one-to-one":
        return (f"{s.where}: rank {s.rank(w.d)} sends local {q}={s.value(w.i[q])} and {q}={s.value(w.j[q])} "
                f"to one place in the sequence, token(...) = {s.value(w.want)}: two tokens, one place, with "
                f"{s.sizes}")
    return (f"{s.where}: rank {s.rank(w.d)} puts local {q}={s.value(w.i[q])} at canonical "
            f"{q}={s.value(w.c[q])}, but token({s.value(w.i[q])}) = "
            f"{s.value(w.want)} is its place in the sequence, with {s.sizes}")


def _digits_text(s: _Shown) -> str:
    w = s.w
    vals = {"local": s.value(w.local), "want_local": s.value(w.want_local), "canon": s.value(w.canon),
            "want_canon": s.value(w.want_canon)}
    return (f"{s.where}: on rank {s.rank(w.d)}, local ({s.idx(w.i)}) is at local byte {vals['local']} and "
            f"canonical byte {vals['canon']} by the digit table, but at {vals['want_local']} and "
            f"{vals['want_canon']} by the spec, with {s.sizes}")


EXPLAIN = {
    "local-bijective": _bijective_text,
    "canonical-bijective": _bijective_text,
    "shard-in-range": lambda s: (f"{s.where}: rank {s.rank(s.w.d)} sends local ({s.idx(s.w.i)}) to canonical "
                                 f"({s.idx(s.w.c)}), outside the canonical box, with {s.sizes}"),
    "shard-injective": lambda s: (f"{s.where}: rank {s.rank(s.w.d)} sends local ({s.idx(s.w.i)}) and "
                                  f"({s.idx(s.w.j)}) to the same canonical index, with {s.sizes}"),
    "writers-disjoint": _disjoint_text,
    "writers-cover": lambda s: (f"{s.where}: {_cover_text(s.m, s.model, s.w, s.idx, s.rank, s.holds)}, with "
                                f"{s.sizes}" + _gap_text(s.lib, s.family, s.m, s.model)),
    "single-rank-identity": _identity_text,
    "runs-match-spec": _runs_match_text,
    "runs-cover-local": lambda s: f"{s.where}: the runs cover some local byte twice or not at all, with {s.sizes}",
    "sequence-order": _sequence_text,
    "regions-tile-local": lambda s: _tiling_text(s.model, s.w, s.where, s.sizes, s.idx),
    "regions-tile-canonical": lambda s: _tiling_text(s.model, s.w, s.where, s.sizes, s.idx),
    "one-format": lambda s: meaning.explain(s.m, s.model, s.w, s.where, s.sizes),
    "digits-match-spec": _digits_text,
}
"""Obligation name -> its counterexample in words, from the model Z3 found (`_Shown`): every row
the registry gives a Z3 query."""
check_table("explain.EXPLAIN", EXPLAIN, [o.name for o in ENTRIES if o.query is not None])


def _explain(lib, family, name, m, model, w, where, sizes) -> str:
    shown = _Shown(lib, family, m, model, w, where, sizes)
    text = EXPLAIN.get(name)
    return text(shown) if text is not None else f"{where}: counterexample with {sizes}"


def _tiling_text(model, w, where, sizes, idx) -> str:
    hit = holding(model, w)
    if hit is not None:
        kind, a, c = hit
        at = (c or a).ldef.span  # the region (of two, the one defined later) whose bytes land on another's
        where = f"{os.path.relpath(at.file)}:{at.line}" if at is not None else where
        if kind == "overlap":
            return (f"{where}: regions '{a.ldef.name}' ({idx(a.idx)}) and '{c.ldef.name}' ({idx(c.idx)}) both hold "
                    f"{w.role} byte {value(model, a.pos)}, with {sizes}")
        return (f"{where}: pad '{a.ldef.name}' ({idx(a.idx)}) is at {w.role} byte {value(model, a.pos)}: shared "
                f"with another of its bytes or outside the {value(model, w.page)}-byte page, with {sizes}")
    return f"{where}: the regions of the {w.role} page do not tile it, with {sizes}"


def _block(m: Model, model, d: dict) -> int:
    """The block a writer class stores first: the mixed radix of its replica digits."""
    rext = dict((n, value(model, x)) for n, x in m.r.rank_extents())
    block = 0
    for n in m.r.replicas:
        block = block * rext[n] + value(model, d[n])
    return block


def _cover_text(m, model, w, idx, rank, holds) -> str:
    if holds(w.count):
        world, writers = value(model, w.world), value(model, w.writers)
        return (f"{world} ranks in {writers} writer class(es) store {world // max(1, writers)} x "
                f"{value(model, w.local)} bytes into a {value(model, w.canon_page)}-byte canonical page")
    if holds(w.collide):
        return (f"ranks {rank(w.d)} and {rank(w.e)} of the writers of block {_block(m, model, w.d)} "
                f"both store canonical ({idx(w.a)}) (from local ({idx(w.i)}) and ({idx(w.j)})), so "
                f"the writers hold fewer canonical bytes than the page has and some are never written")
    if holds(w.outside):
        return (f"rank {rank(w.d)} stores local ({idx(w.i)}) at canonical ({idx(w.a)}), outside the "
                f"canonical box, so the page is not what its writers hold")
    return (f"the canonical layout sends ({idx(w.k)}) to an element that is shared or outside its page, "
            f"so some canonical byte belongs to no canonical index")


def _gap_text(lib, family, m, model) -> str:
    """Name the first canonical bytes no writer stores, at the counterexample's sizes."""
    try:
        sizes = {n: value(model, m.sizes[n]) for n in m.sizes}
        inst = compile_family(resolve(lib, family)).evaluate(sizes)
        if max(inst.local_page, inst.canonical_page) * max(1, inst.world) > params.CHECK_PAGE_LIMIT:
            return ""
        from ...runtime.lower import tiling_errors
        errs = tiling_errors(lower_uncertified(inst))
    except Exception:  # noqa: BLE001 - the gap is a courtesy; the refutation stands without it
        return ""
    return f" ({errs[0]})" if errs else ""


def names_used(lib: Library, family: str) -> set:
    """The runtime names the family's own files (and what they import) mention."""
    from .store import dependencies
    text = ""
    for path in sorted(dependencies(lib, family)):
        try:
            text += open(path, encoding="utf-8", errors="replace").read()
        except OSError:
            pass
    return {n for n in lib.vocabulary() if re.search(rf"\b{n}\b", text)}

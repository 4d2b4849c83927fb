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
from .obligations import PAGE, Model, holding, value


def _where(lib: Library, family: str, name: str) -> str:
    f = lib.family_def(family)
    span = f.shard.span if f.shard else f.span
    if name in ("local-bijective", "canonical-bijective"):
        use = f.local if name.startswith("local") else f.canonical
        span = lib.layouts[use.call.fn].span if use.call.fn in lib.layouts else span
    if name == "writers-cover" and f.canonical:
        span = f.canonical.span
    if name == "page-size" and f.local:
        span = f.local.span
    return f"{os.path.relpath(span.file)}:{span.line}"


def _sizes_text(m: Model, model) -> str:
    used = _used(m.lib, m.family)
    return ", ".join(f"{n}={value(model, m.sizes[n])}" for n in m.sizes if n in used)


def _witness(m: Model, model) -> dict:
    """The counterexample's configuration, every runtime name as an int (empty if it cannot be read)."""
    try:
        return {n: value(model, v) for n, v in m.sizes.items()}
    except Exception:  # noqa: BLE001 - the refutation stands without its picture
        return {}


def explain(lib: Library, family: str, name: str, m: Model, model, w: dict) -> str:
    """A counterexample a person can act on, in the spec's own names (never raises)."""
    where = _where(lib, family, name)
    try:
        return _explain(lib, family, name, m, model, w, where, _sizes_text(m, model))
    except Exception as e:  # noqa: BLE001 - the refutation stands even if its text cannot be made
        return f"{where}: counterexample found (its description failed: {type(e).__name__}: {e})"


def _explain(lib, family, name, m, model, w, where, sizes) -> str:
    def idx(x):
        return ", ".join(f"{n}={value(model, v)}" for n, v in x.items())

    def rank(d):
        return value(model, m.rank_of(d))

    def holds(x):
        return z3.is_true(model.eval(x, model_completion=True))

    if name in ("local-bijective", "canonical-bijective"):
        ldef, bound = m.r.layout(w["role"])
        i, j = w["i"], w["j"]
        oi = value(model, m.r.expr(ldef.offset, {**bound, **i}))
        if holds(w["clash"]):
            return (f"{where}: the {w['role']} layout sends ({idx(i)}) and ({idx(j)}) both to element {oi}, "
                    f"with {sizes}")
        unit = "bytes of the page" if m.part else "elements"
        return (f"{where}: the {w['role']} layout sends ({idx(i)}) to element {oi}, outside its "
                f"{value(model, w['size'])} {unit}, with {sizes}")
    if name == "shard-in-range":
        return (f"{where}: rank {rank(w['d'])} sends local ({idx(w['i'])}) to canonical ({idx(w['c'])}), "
                f"outside the canonical box, with {sizes}")
    if name == "shard-injective":
        return (f"{where}: rank {rank(w['d'])} sends local ({idx(w['i'])}) and ({idx(w['j'])}) to the same "
                f"canonical index, with {sizes}")
    if name == "writers-disjoint":
        d, e = w["d"], w["e"]
        c = m.r.shard(w["i"], d)
        byte = value(model, m.r.offset("canonical", c))
        return (f"{where}: ranks {rank(d)} and {rank(e)} both write canonical byte {byte} of block "
                f"{_block(m, model, d)} ({idx(c)}) with {sizes}")
    if name == "writers-cover":
        return f"{where}: {_cover_text(m, model, w, idx, rank, holds)}, with {sizes}" + _gap_text(lib, family, m, model)
    if name == "single-rank-identity":
        pages = (value(model, m.r.page("local")), value(model, m.r.page("canonical")))
        if not m.part and pages[0] != pages[1]:
            return (f"{where}: on a single rank the local page is {pages[0]} bytes but the canonical page is "
                    f"{pages[1]}, with {sizes}")
        return f"{where}: on a single rank local ({idx(w['i'])}) moves to another canonical byte, with {sizes}"
    if name == "runs-match-spec":
        spec_byte = value(model, m.canonical_byte(w["i"], w["d"]) + w["b"])
        return (f"{where}: rank {rank(w['d'])} copies local byte {value(model, w['x'])} to canonical byte "
                f"{value(model, w['claimed'])}, but the spec puts it (local {idx(w['i'])}) at canonical byte "
                f"{spec_byte}, with {sizes}")
    if name == "runs-cover-local":
        return f"{where}: the runs cover some local byte twice or not at all, with {sizes}"
    if name == "sequence-order":
        s = w["seq"]
        return (f"{where}: rank {rank(w['d'])} puts local {s}={value(model, w['i'][s])} at canonical "
                f"{s}={value(model, w['c'][s])}, but token({value(model, w['i'][s])}) = "
                f"{value(model, w['want'])} is its place in the sequence, with {sizes}")
    if name in PAGE:
        return _tiling_text(model, w, where, sizes, idx)
    if name == "one-format":
        return meaning.explain(m, model, w, where, sizes)
    if name == "digits-match-spec":
        vals = {k: value(model, w[k]) for k in ("local", "want_local", "canon", "want_canon")}
        return (f"{where}: on rank {rank(w['d'])}, local ({idx(w['i'])}) is at local byte {vals['local']} and "
                f"canonical byte {vals['canon']} by the digit table, but at {vals['want_local']} and "
                f"{vals['want_canon']} by the spec, with {sizes}")
    return f"{where}: counterexample with {sizes}"


def _tiling_text(model, w, where, sizes, idx) -> str:
    hit = holding(model, w)
    if hit is not None:
        kind, a, c = hit
        if kind == "overlap":
            return (f"{where}: regions '{a[1].name}' ({idx(a[3])}) and '{c[1].name}' ({idx(c[3])}) both hold "
                    f"{w['role']} byte {value(model, a[5])}, with {sizes}")
        return (f"{where}: pad '{a[1].name}' ({idx(a[3])}) is at {w['role']} byte {value(model, a[5])}: shared "
                f"with another of its bytes or outside the {value(model, w['page'])}-byte page, with {sizes}")
    return f"{where}: the regions of the {w['role']} page do not tile it, with {sizes}"


def _block(m: Model, model, d: dict) -> int:
    """The block a writer class stores first: the mixed radix of its replica digits."""
    rext = dict((n, value(model, x)) for n, x in m.r.rank_extents())
    block = 0
    for n in m.r.replicas:
        block = block * rext[n] + value(model, d[n])
    return block


def _cover_text(m, model, w, idx, rank, holds) -> str:
    if holds(w["count"]):
        world, writers = value(model, w["world"]), value(model, w["writers"])
        return (f"{world} ranks in {writers} writer class(es) store {world // max(1, writers)} x "
                f"{value(model, w['local'])} bytes into a {value(model, w['canon_page'])}-byte canonical page")
    if holds(w["collide"]):
        return (f"ranks {rank(w['d'])} and {rank(w['e'])} of the writers of block {_block(m, model, w['d'])} "
                f"both store canonical ({idx(w['a'])}) (from local ({idx(w['i'])}) and ({idx(w['j'])})), so "
                f"the writers hold fewer canonical bytes than the page has and some are never written")
    if holds(w["outside"]):
        return (f"rank {rank(w['d'])} stores local ({idx(w['i'])}) at canonical ({idx(w['a'])}), outside the "
                f"canonical box, so the page is not what its writers hold")
    return (f"the canonical layout sends ({idx(w['k'])}) to an element that is shared or outside its page, "
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


def _used(lib: Library, family: str) -> set:
    """The runtime names the family's own files (and what they import) mention."""
    from .store import dependencies
    text = ""
    for path in sorted(dependencies(lib, family)):
        try:
            text += open(path, encoding="utf-8", errors="replace").read()
        except OSError:
            pass
    return {n for n in lib.vocabulary() if re.search(rf"\b{n}\b", text)}

"""The tiling row of a page of regions as one Z3 query (`regions-tile-local`,
`regions-tile-canonical`): two regions (or pads) of the page that share a byte, or a pad
that is not one-to-one inside the page. Each part of the query is said by what it is about
(`w["meaning"]`: `("overlap", Box, Box)` or `("pad", Box, None)`), which the counterexample's
words (`explain`) and the certificate's cuts (`certificates`) read.
"""
from __future__ import annotations

from typing import NamedTuple

import z3

from .witness import Tiling


class Box(NamedTuple):
    """A region or pad of the page as the query reads it: at indices `idx` (bounded, with its
    byte, by `cons`) its byte `pos` of the page; `element` its element's bytes."""

    name: str
    ldef: object      # its layout definition
    bound: dict       # its layout's parameters, bound
    idx: dict
    cons: list
    pos: object
    element: object


def distinct(a: dict, b: dict):
    """Two points of one box (name -> term) that differ somewhere."""
    return z3.Or(*[a[n] != b[n] for n in a]) if a else z3.BoolVal(False)


def tiling_query(m, role: str):
    """Two regions (or pads) of the `role` page that share a byte, or a pad that is not
    one-to-one inside the page."""
    page, boxes = m.r.page(role), []
    for name in m.r.regions(role):
        ldef, bound = m.r.region(role, name)
        e = m.r.element(ldef, bound)
        idx = {d.name: m.fresh(f"{d.name}@{ldef.name}") for d in ldef.indices}
        b = m.fresh(f"byte@{ldef.name}")
        cons = [z3.And(v >= 0, v < m.r.expr(d.extent, bound)) for d, v in zip(ldef.indices, idx.values())]
        cons += [b >= 0, b < e]
        off = m.r.expr(ldef.offset, {**bound, **idx})
        boxes.append(Box(name, ldef, bound, idx, cons, e * off + b, e))
    parts, meaning = [], []
    for a in range(len(boxes)):
        for c in range(a + 1, len(boxes)):
            A, C = boxes[a], boxes[c]
            parts.append(z3.And(*A.cons, *C.cons, A.pos == C.pos))
            meaning.append(("overlap", A, C))
    for box in boxes:
        name, ldef, bound, idx, cons, pos, e = box
        if not ldef.pad:
            continue  # a data region's own rows show it one-to-one inside the page
        j = {n: m.fresh(f"{n}'@{ldef.name}") for n in idx}
        cj = [z3.And(v >= 0, v < m.r.expr(d.extent, bound)) for d, v in zip(ldef.indices, j.values())]
        off_j = m.r.expr(ldef.offset, {**bound, **j})
        off_i = m.r.expr(ldef.offset, {**bound, **idx})
        parts.append(z3.Or(z3.And(*cons, *cj, distinct(idx, j), off_i == off_j),
                           z3.And(*cons, z3.Or(pos < 0, pos >= page))))
        meaning.append(("pad", box, None))
    if not parts:
        return z3.BoolVal(False), Tiling(role=role)
    return z3.Or(*parts), Tiling(parts=tuple(parts), meaning=tuple(meaning), role=role, page=page)

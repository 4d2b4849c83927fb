"""The identity of a canonical page format, derived from the layout itself.

It names a family's format for all sizes: two families whose canonical pages put the
same bytes in the same places, in every case of their grids, share it; any difference in an index, an extent, a stride,
the element size or the base gives another. It is computed from the family IR, not
from file text or a hand-kept version string, so comments, names of layouts and
parameters, `let`s and the local layout do not change it. At one configuration a mapping
adds the sizes (`CanonicalPageMapping.format_id`, `runtime.formats.format_id`): key stored pages
by that, since one family at other sizes (8 heads of 4 or 4 of 8) puts bytes elsewhere.

    layout_id(resolve(lib, "split_nhd"))   # 'lal3-...' (16 hex digits)
"""
from __future__ import annotations

import hashlib

import sympy

from .family import Family, guarded_equality

FORMAT = "lal3"  # lal2: the rank digits and pages of regions are part of the form; lal3: index order is not
"""Bumped whenever what the identifier covers changes, so old and new ids never collide."""


def canonical_form(family: Family) -> list[tuple]:
    """Per grid case, in the order the runtime tries them: its conditions, the canonical layout
    and the shard map's targets.

    Sizes are sympy expressions over runtime names, with the case's equality guards
    substituted and divisions unfolded to what they divide (`guarded_equality`), printed
    with `srepr` so the text does not depend on how the spec wrote them. The conditions
    are kept as written (unfolded, not rewritten by their own equalities), so two cases
    that swap their layouts do not share an id; the targets say which local data each
    canonical index holds (which global head, which token).
    """
    out = []
    for v in family.variants:
        norm, _ = guarded_equality(family, v)

        def text(x, rewrite=True):
            return _text(_definitions(norm(x) if rewrite else x, family.atoms))

        c = v.canonical
        conds = sorted(text(g.cond, rewrite=False) for g in v.cases)
        layout = tuple((name, text(e), text(k)) for name, e, k in sorted(zip(c.indices, c.extents, c.coefficients)))
        # by index name, as the layout: the order an `index` clause lists them in places no byte
        targets = tuple(sorted((t.index, text(t.sum.base),
                                tuple(sorted((sp.source, text(sp.lower), text(sp.extent), text(k))
                                             for sp, k in t.sum.terms)))
                               for t in v.targets))
        # how the rank number is made of its digits: which rank holds which shard
        ranks = tuple((d.name, text(d.extent), text(d.rank)) for d in v.digits if d.is_rank)
        out.append((tuple(conds), layout, text(c.element), text(c.base), targets, ranks))
    return out  # in order: the first case that holds is taken, so two overlapping cases swapped are another format


_OPS = {"//": sympy.Function("floordiv"), "%": sympy.Function("mod")}


def _definitions(x, atoms):
    """`x` with every division atom replaced by what it stands for: atoms are numbered in the
    order a spec happens to create them, so their names must not reach the identifier."""
    for _ in range(64):  # atoms nest (`(tp // 2) // 2`); each pass unfolds one level
        subs = {sym: (a.num / a.den if a.op == "/" else _OPS[a.op](a.num, a.den))
                for sym, a in atoms.by_symbol.items() if sym in getattr(x, "free_symbols", ())}
        if not subs:
            return x
        x = x.xreplace(subs)
    raise ValueError("division atoms nest too deeply")


def layout_id(family: Family) -> str:
    """`lal3-` and 16 hex digits of a hash of `canonical_form`."""
    digest = hashlib.sha256(repr((FORMAT, canonical_form(family))).encode()).hexdigest()
    return f"{FORMAT}-{digest[:16]}"


def _text(x) -> str:
    """`srepr` of an expanded size, or of a condition as it stands (and/or/not do not expand)."""
    return sympy.srepr(sympy.expand(x) if isinstance(x, sympy.Expr) else x)


def page_id(lib, family: str) -> str:
    """`layout_id` of a family of pages: the canonical forms of all its data regions (each with
    the name of the local region it holds) and of the canonical page's pads."""
    from .family import resolve
    parts = lib.parts_of(family) + [p for p in lib.parts_of(family, pads=True) if p.endswith("'")]
    # each form with its region's local name: which local data a canonical region holds (K or V,
    # B or C) is part of the format, and the targets alone name only index names
    forms = sorted((lib.family_def(p).shard.region or "", canonical_form(resolve(lib, p))) for p in parts)
    digest = hashlib.sha256(repr((FORMAT, "page", forms)).encode()).hexdigest()
    return f"{FORMAT}-{digest[:16]}"

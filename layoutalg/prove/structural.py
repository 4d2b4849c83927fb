"""The structural certificate: stride chains on the symbolic digit table, for all sizes.

A layout with non-negative strides is a bijection onto [0, size) iff, walked from
stride 1, each next stride is the product of the extents so far (`right_inverse`).
With the guards as rewrite rules (`heads == total_heads / shards` replaces `heads`),
three chains cover what the reference enumerates: the local page, the rank grid and
the canonical page over every digit but the replicas. Only equalities are used, so
sympy settles them for all sizes at once. A chain that cannot be shown is reported
as "not established" (unknown), never as refuted: a counterexample is Z3's job.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import prod

import sympy

from ..algebra import NotCompact, right_inverse
from ..family import Family, Guard, Variant, guarded_equality
from ..layout import Layout


@dataclass
class Certificate:
    status: str  # proved | unknown
    detail: str


def certify(family: Family, v: Variant) -> Certificate:
    norm, eq = guarded_equality(family, v)

    local = [d for d in v.digits if not d.is_rank]
    ranks = [d for d in v.digits if d.is_rank]
    owners = local + [d for d in ranks if not d.replica]
    checks = [
        ("local page", Layout(tuple(d.extent for d in local), tuple(d.local for d in local)),
         v.local.size_bytes()),
        ("rank grid", Layout(tuple(d.extent for d in ranks), tuple(d.rank for d in ranks)), v.world),
        ("canonical page", Layout(tuple(d.extent for d in owners), tuple(d.canonical for d in owners)),
         v.canonical.size_bytes()),
    ]
    for what, lay, size in checks:
        try:
            right_inverse(lay, eq)
        except NotCompact as e:
            return Certificate("unknown", f"{what}: chain not established ({e})")
        if not eq(prod(lay.shape), size):
            return Certificate("unknown", f"{what}: digits cover {prod(lay.shape)}, not {size}")
    for t in v.targets:
        top = t.sum.base + sum(c * (sp.extent - 1) for sp, c in t.sum.terms)
        if not eq(top, t.extent - 1) or not _nonneg(norm(t.sum.base)) or \
                any(not _nonneg(norm(c)) for _, c in t.sum.terms):
            return Certificate("unknown", f"canonical index {t.index}: range [base, {top}] not shown "
                                          f"to be [0, {t.extent})")
    return Certificate("proved", "local, rank and canonical stride chains hold for all sizes")


def _nonneg(x) -> bool:
    return bool(x.is_nonnegative) or all(c > 0 for c in sympy.Poly(sympy.numer(x)).coeffs()) \
        if x.free_symbols else x >= 0



MOVES_WITH_THE_GROUP = ("tp", "pcp", "dcp", "interleave", "heads")
"""Runtime names that change with the parallel configuration for one and the same model."""


def agnostic_family(family: Family) -> Certificate | None:
    """`agnostic` for every case that claims it, and across them: where the claim holds in
    two cases, which case applies may itself depend on tp, so their canonical layouts must
    be one and the same. None when no case claims anything (there is nothing to show)."""
    claims = [v for v in family.variants if v.agnostic not in (False, sympy.false)]
    if not claims:
        return None
    for v in claims:
        c = agnostic(family, v)
        if c.status != "proved":
            return c
    forms = {_claimed_form(family, v): v for v in claims}
    if len(forms) > 1:
        a, b = list(forms.values())[:2]
        text = lambda v: " and ".join(g.text.removeprefix("case ") for g in v.cases) or "always"  # noqa: E731
        return Certificate("unknown", f"agnostic is claimed both when {text(a)} and when {text(b)}, but the "
                                      f"canonical layouts of those cases differ")
    return Certificate("proved", f"the canonical page is built from no parallel quantity, and is the same "
                                 f"in all {len(claims)} case(s) that claim it")


def _claimed_form(family: Family, v: Variant) -> tuple:
    claimed = dataclasses.replace(v, guards=v.guards + (Guard(v.agnostic, "agnostic", None),))
    norm, _ = guarded_equality(family, claimed)
    c = v.canonical
    return tuple(sympy.srepr(sympy.expand(family.atoms.expand(norm(x))))
                 for x in (*c.extents, *c.coefficients, c.element, c.base)) + tuple(c.indices)


def agnostic(family: Family, v: Variant) -> Certificate:
    """Where `agnostic when ...` holds, the canonical page may not depend on the parallel
    configuration: its layout (extents, strides, base, element) must be built, after the
    case's rewrites, from no name that moves with the group, nor a rank digit.

    Shown for all sizes with sympy; a dependence that is only not shown to cancel is
    reported as not established (unknown), never as refuted.
    """
    if v.agnostic in (False, sympy.false):
        return Certificate("proved", "not claimed in this case")
    # reason where the claim holds: its equalities rewrite like the case's own (cp == 1
    # makes dcp and pcp 1), so a claim that contradicts the case leaves nothing to show
    claimed = dataclasses.replace(v, guards=v.guards + (Guard(v.agnostic, "agnostic", None),))
    norm, _ = guarded_equality(family, claimed)
    c = v.canonical
    moving = {sympy.Symbol(n, integer=True) for n in MOVES_WITH_THE_GROUP} | \
        {sympy.Symbol(n) for n in v.rank_digits} | {sympy.Symbol(n, integer=True) for n in v.rank_digits}
    for what, x in [*((f"extent of '{i}'", e) for i, e in zip(c.indices, c.extents)),
                    *((f"stride of '{i}'", k) for i, k in zip(c.indices, c.coefficients)),
                    ("element size", c.element), ("base", c.base)]:
        free = family.atoms.expand(norm(x)).free_symbols
        free |= {s for a in _atoms_in(family, norm(x)) for s in a}
        hit = sorted(str(s) for s in free & moving)
        if hit:
            cases = " and ".join(g.text.removeprefix("case ") for g in v.cases)
            where = f" (when {cases})" if cases else ""
            return Certificate("unknown", f"agnostic is claimed{where} but the canonical {what} is "
                                          f"{norm(x)}, which depends on {', '.join(hit)}")
    return Certificate("proved", "the canonical page is built from no parallel quantity")


def _atoms_in(family: Family, x) -> list[set]:
    """The free symbols of every division atom in `x`, unfolded to any depth."""
    out, todo, seen = [], list(getattr(x, "free_symbols", ())), set()
    while todo:
        s = todo.pop()
        if s in seen or s not in family.atoms.by_symbol:
            continue
        seen.add(s)
        a = family.atoms.by_symbol[s]
        syms = a.num.free_symbols | a.den.free_symbols
        out.append(syms)
        todo.extend(syms)
    return out

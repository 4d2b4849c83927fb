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

from dataclasses import dataclass
from math import prod

import sympy

from ..algebra import NotCompact, right_inverse
from ..family import Family, Variant, guarded_equality
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


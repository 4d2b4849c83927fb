"""Byte intervals that should tile a page: the one sweep that finds where they do not.

A page of regions, a configuration's runs, the big and small canonical pages of a
conversion: each is a handful of (offset, bytes) pieces that must cover [0, size) once
(or, where a page may keep unnamed bytes, at most once). Sorted by offset, one pass
finds the first place that breaks it. (A mapping's expanded fragments, millions of them,
are swept vectorised: `runtime.runs.shared_byte`.)

Examples:
    >>> flaw([(0, 4, "k"), (4, 4, "v")], 8) is None
    True
    >>> flaw([(0, 4, "k"), (6, 2, "v")], 8)
    Flaw(kind='gap', start=4, end=6, before='k', after='v')
    >>> flaw([(0, 4, "k"), (6, 2, "v")], 8, gaps=True) is None
    True
    >>> flaw([(0, 4, "k"), (2, 4, "v")], 8)
    Flaw(kind='overlap', start=2, end=4, before='k', after='v')
    >>> flaw([(0, 4, "k"), (4, 6, "v")], 8)
    Flaw(kind='end', start=10, end=8, before='v', after=None)
    >>> union([(4, 4), (0, 2), (2, 1)])
    [(0, 3), (4, 8)]
"""
from __future__ import annotations

from ..record import named_tuple


@named_tuple
class Flaw:
    """Where pieces fail to tile a page (`flaw`): `kind` 'gap' (bytes [start, end) covered by
    no piece, between the pieces `before` and `after`), 'overlap' (bytes [start, end) covered by
    `before` and `after` both) or 'end' (the pieces end at byte `start`, not at the page's
    `end`; `before` the last piece)."""

    kind: str
    start: int
    end: int
    before: object
    after: object


def flaw(pieces, size: int, gaps: bool = False):
    """The first place `pieces` ((offset, bytes, name), ...) fail to tile [0, size), or None.

    A `Flaw`: 'gap' where no piece covers bytes [start, end), 'overlap' where two cover them,
    'end' where the pieces end (at `start`) anywhere but at `size`. With `gaps`, uncovered bytes are allowed: only overlaps and pieces that
    reach past `size` are flaws.

    Pre-conditions: offsets and sizes are non-negative integers.
    Post-conditions: None exactly when every byte of [0, size) is covered once (at most
    once with `gaps`) and no piece reaches past `size`.
    """
    at, last = 0, None
    for lo, n, name in sorted(pieces, key=lambda p: (p[0], p[1])):
        if lo > at and not gaps:
            return Flaw("gap", at, lo, last, name)
        if lo < at:
            return Flaw("overlap", lo, min(at, lo + n), last, name)
        at, last = lo + n, name
    if at > size or (at < size and not gaps):
        return Flaw("end", at, size, last, None)
    return None


def union(pieces) -> list[tuple[int, int]]:
    """The bytes (offset, size) `pieces` cover, as sorted, disjoint [start, end) spans, each
    as long as it can be (touching or overlapping pieces merge; empty ones cover nothing).

    Post-conditions: a byte lies in a span exactly when it lies in a piece; the spans are
    non-empty and apart.
    """
    out: list[list[int]] = []
    for lo, n in sorted(p for p in pieces if p[1] > 0):
        if out and out[-1][1] >= lo:
            out[-1][1] = max(out[-1][1], lo + n)
        else:
            out.append([lo, lo + n])
    return [(a, b) for a, b in out]

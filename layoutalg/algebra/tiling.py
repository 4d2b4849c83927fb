"""The tiling certificate: the stride chains that make a digit table an exact tiling.

One certificate, read two ways. The lowering checks it on a numeric instance (ints,
plain `==`); the structural prover checks it on the symbolic digit table (sympy sizes,
equality under the guards' rewrites), where it holds for all sizes at once.

A layout with non-negative strides is a bijection onto [0, size) iff, walked from
stride 1, each next stride is the product of the extents so far (`right_inverse`).
Three chains say what the reference enumerates byte by byte:

    local page      the local digits by local stride: every local byte once;
    rank grid       the rank digits by rank stride: every rank once;
    canonical page  the local digits and the non-replica rank digits by canonical
                    stride: with the replicas factored out, every canonical byte has
                    exactly one owner.

Each chain's digits must also cover exactly its size (page bytes, ranks).

Examples:
    >>> from collections import namedtuple
    >>> L, R = namedtuple("L", "extent local canonical"), namedtuple("R", "extent rank canonical replica")
    >>> local = [L(4, 1, 1), L(2, 4, 8)]                  # 2 heads of 4 bytes, head-major
    >>> ranks = [R(2, 1, 4, False)]                       # tp=2: a rank holds heads 2r, 2r+1
    >>> broken(chains(local, ranks, 8, 2, 16)) is None
    True
    >>> broken(chains(local, [R(2, 1, 8, False)], 8, 2, 16))
    Reason('tiling', 'the canonical page is not tiled exactly: layout (4,2,2):(1,8,8) is not compact: no mode has stride 4')
"""
from __future__ import annotations

import operator
from math import prod

from .ops import NotCompact, right_inverse
from .layout import Layout
from ..record import named_tuple
from ..verdicts import Check, Reason


@named_tuple
class Chain:
    what: str        # "local page", "rank grid" or "canonical page"
    layout: Layout   # digit extents : the strides the chain walks
    size: object     # what the digits must cover (int or sympy)
    names: tuple = ()  # each digit's name, where the digits have names (a message says which broke the chain)


def chains(local, ranks, local_page, world, canonical_page) -> list[Chain]:
    """The three chains of a digit table.

    `local`: digits with `.extent`, `.local`, `.canonical`; `ranks`: digits with `.extent`,
    `.rank`, `.canonical`, `.replica` (a compiled instance's or a symbolic variant's).
    """
    owners = [d for d in local] + [r for r in ranks if not r.replica]
    return [Chain("local page", Layout(tuple(d.extent for d in local), tuple(d.local for d in local)), local_page,
                  _names(local)),
            Chain("rank grid", Layout(tuple(r.extent for r in ranks), tuple(r.rank for r in ranks)), world,
                  _names(ranks)),
            Chain("canonical page", Layout(tuple(d.extent for d in owners), tuple(d.canonical for d in owners)),
                  canonical_page, _names(owners))]


def _names(digits) -> tuple:
    names = tuple(getattr(d, "name", None) for d in digits)
    return names if all(isinstance(n, str) for n in names) else ()


def broken(chains: list[Chain], eq=operator.eq) -> Reason | None:
    """None when every chain holds, else what the first one that does not says (`expected`: the
    slots a chain must cover, `actual`: what its digits cover, where those differ).

    Pre-conditions: `eq` is sound: it answers True only for sizes equal everywhere it is
    used (a symbolic `eq` that cannot decide answers False, so "not shown" reads as broken;
    the prover reports that as unknown, never as refuted).
    """
    for what, lay, size, names in chains:
        try:
            right_inverse(lay, eq)
        except NotCompact as e:
            return Reason(Check.TILING, f"the {what} is not tiled exactly: "
                          f"{_stuck(what, lay, names, e) if names and e.run is not None else e}")
        if not eq(prod(lay.shape), size):
            return Reason(Check.TILING, f"the {what} has {size} slots but its digits cover {prod(lay.shape)}",
                          expected=size, actual=prod(lay.shape))
    return None


def _stuck(what: str, lay: Layout, names: tuple, e: NotCompact) -> str:
    """Where `right_inverse`'s walk from stride 1 stopped (`e`), by the digits' names: those that
    chained, the stride no other digit has, and the digits left with their extents and strides."""
    side = "rank" if what == "rank grid" else what.split()[0]
    walked = f"the digits {', '.join(names[k] for k in e.taken)} reach stride {e.run}, and " if e.taken else ""
    rest = "; ".join(f"{names[k]} (extent {lay.shape[k]}, stride {lay.stride[k]})" for k in e.left)
    return f"{walked}no digit has {side} stride {e.run} (left: {rest})"

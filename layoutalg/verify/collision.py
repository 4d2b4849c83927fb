"""A tiling that breaks at one configuration, said in the spec's words.

The lowering and the structural certificate say *that* a page is not tiled ("no digit has
canonical stride 1"): a stride chain broke. This module says *where*, by reading the spec
directly at that configuration (ints, every element): two ranks that write one canonical
byte, a canonical byte no rank writes, a byte sent outside the page, or two local indices
that share a byte. Each names the ranks, the indices and the byte, and the clause to look
at, as `layoutalg prove` names its counterexamples.

Only the writers of block 0 are read: ranks whose replica digits are all 0 (replicas hold
identical bytes and take turns by block id).

Examples:
    >>> from layoutalg.dsl.library import load
    >>> import tempfile, pathlib, textwrap
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "f.lal").write_text(textwrap.dedent('''
    ...     import "grids.lal"
    ...     layout f(H, D):
    ...         index h < H, d < D
    ...     family f serves attention:
    ...         grid private
    ...         local f(2, 2)
    ...         canonical f(2 * tp, 2)
    ...         shard (h, d) -> (h, d)
    ... '''))
    >>> lib = load([d / "f.lal"])
    >>> print(tiling_counterexample(lib, "f", {"tp": 2, "pcp": 1})[1])
    ranks 0 and 1 both write canonical byte 0 of block 0 (h=0, d=0) (from local (h=0, d=0) and (h=0, d=0))
"""
from __future__ import annotations

import os
from math import prod

from ..dsl.interpret import Reading, index_box, rank_digits
from ..errors import printable

CLAUSE = {"local": "local layout (its index extents and offset)",
          "canonical layout": "canonical layout (its index extents and offset)",
          "shard": "shard map (each canonical index a rank's local index goes to) and the grid's placements"}
"""The statement each finding points at, in words."""

SEARCHES = 3
"""Failing configurations a family's tiling failure is searched at, element by element, before
`check` and `prove` say it in the digit table's words alone."""

LIMIT = 1 << 20
"""Most elements (ranks' local elements plus the canonical box) one search reads."""


def spec_line(lib, family: str, what: str) -> str:
    """`file:line` of the statement a finding is about: the local layout, the grid, the shard map."""
    f = lib.family_def(family)
    span = f.span
    if what == "sequence" and getattr(f, "sequence", None) is not None:
        span = f.sequence.span
    elif "local" in what and f.local is not None:
        span = f.local.span
    elif what == "canonical layout" and f.canonical is not None:
        span = f.canonical.span
    elif "rank" in what and f.grid is not None and f.grid.id in lib.grids:
        span = lib.grids[f.grid.id].span
    elif ("canonical" in what or "shard" in what) and f.shard is not None:
        span = f.shard.span
    return f"{printable(os.path.relpath(span.file))}:{span.line}"


def _shown(index: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in index.items())


def tiling_counterexample(lib, family: str, sizes: dict) -> tuple[str, str] | None:
    """(clause, why) of the first place the family's pages do not tile at `sizes`: `clause` is
    'local', 'canonical layout' or 'shard' (the statement to look at, a key of `CLAUSE`), `why`
    names the ranks, indices and bytes. `family` is a family of one box or one region's part.
    None where the spec, read element by element, tiles there, cannot be read there, or is
    too large to read (more than `LIMIT` elements).

    Post-condition: a non-None answer is a fact of the spec at `sizes` (every claim in it was
    read from the spec's own arithmetic), never a guess from the digit table."""
    try:
        r = Reading(lib, family, sizes)
        if not all(ok for ok, _ in r.guards):
            return None  # the family does not apply here: nothing it writes to find
        local, canon = r.extents("local"), r.extents("canonical")
        rext = r.rank_extents()
    except (ArithmeticError, LookupError, ValueError):
        return None
    world = prod(n for _, n in rext) if rext else 1
    if world * prod(local.values()) + prod(canon.values()) > LIMIT or world < 1:
        return None
    try:
        return _overlap(r, "local", local) or _overlap(r, "canonical", canon) or _writers(r, local, canon, rext, world)
    except (ArithmeticError, LookupError, ValueError):
        return None


def _overlap(r: Reading, role: str, extents: dict) -> tuple[str, str] | None:
    """Two indices of the local (or canonical) layout that share a byte: it is not one-to-one."""
    seen: dict = {}
    for index in index_box(extents):
        at = r.offset(role, index)
        prior = seen.setdefault(at, index)
        if prior is not index:
            return ("local" if role == "local" else "canonical layout"), (
                f"{role} ({_shown(prior)}) and ({_shown(index)}) share {role} byte {at}: the {role} layout is "
                f"not one-to-one")
    return None


def _writers(r: Reading, local: dict, canon: dict, rext: list, world: int) -> tuple[str, str] | None:
    page = {r.offset("canonical", index): index for index in index_box(canon)}
    written: dict = {}  # canonical byte -> (rank, local index)
    for rank in range(world):
        digits = rank_digits(rext, rank)
        if any(digits.get(n, 0) for n in r.replicas):
            continue  # a replica: the same bytes as the writer of block 0
        for index in index_box(local):
            target = r.shard(index, digits)
            outside = [k for k, v in target.items() if not 0 <= v < canon[k]]
            if outside:
                k = outside[0]
                return "shard", (f"rank {rank} sends local ({_shown(index)}) to canonical ({_shown(target)}): "
                                 f"{k}={target[k]} is outside the canonical page's {k} < {canon[k]}")
            at = r.offset("canonical", target)
            prior = written.setdefault(at, (rank, index))
            if prior[1] is not index:
                who = f"rank {rank} writes" if prior[0] == rank else f"ranks {prior[0]} and {rank} both write"
                return "shard", (f"{who} canonical byte {at} of block 0 ({_shown(target)}) (from local "
                                 f"({_shown(prior[1])}) and ({_shown(index)}))")
    missing = sorted(set(page) - set(written))
    if missing:
        at = missing[0]
        return "shard", (f"no rank writes canonical byte {at} of block 0 ({_shown(page[at])}): the ranks' pages "
                         f"hold {len(written)} of the canonical page's {len(page)} elements")
    return None

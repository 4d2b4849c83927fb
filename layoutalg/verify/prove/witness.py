"""What the terms of a violation mean: one record a kind of query, the only shape a
counterexample's terms have between the modules that ask (`obligations`, `meaning`,
`sequence`, `page_tiling`, `reshard.plan_queries`, `reshard.at_sizes`) and those that read them (`explain`,
`certificates`, `runner`, `reshard.all_sizes`). Imports no Z3: a record holds terms, it makes
none.

Every kind has `parts` (the violation's disjuncts, asked one by one where given: each is easier
alone, and all must be unsat) and `meaning` (what each part says, where a counterexample names
the part it satisfies: `obligations.holding`). A term is read by attribute; the registry's
witness names (`Obligation.shard_points`, `layout_points`) are fields, checked when the registry
loads (`term`).

    >>> Shard(i={"h": 0}, d={"tp": 1}).term("d")
    {'tp': 1}
    >>> Shard(i={}, d={}).term("k")
    Traceback (most recent call last):
    ...
    AttributeError: a Shard witness has no term 'k' (its terms: i, d, c, j, e)
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Witness:
    parts: tuple = ()
    meaning: tuple = ()

    def term(self, name: str):
        """The term named `name` (a registry's witness name), or an error naming the kind's terms."""
        if name not in self.terms():
            raise AttributeError(f"a {type(self).__name__} witness has no term {name!r} (its terms: "
                                 f"{', '.join(self.terms())})")
        return getattr(self, name)

    @classmethod
    def terms(cls) -> tuple:
        return tuple(f.name for f in fields(cls) if f.name not in ("parts", "meaning"))


@dataclass(frozen=True)
class Layout(Witness):
    """`local-bijective`, `canonical-bijective`: two indices `i`, `j` of the `role` layout, whether
    they `clash` (one element), and the `size` its offsets must stay below."""
    i: dict = None
    j: dict = None
    role: str = ""
    clash: object = None
    size: object = None


@dataclass(frozen=True)
class Shard(Witness):
    """The shard map's rows: a local index `i` on the rank of digits `d`, its canonical index `c`
    (`shard-in-range`), a second index `j` (`shard-injective`, `writers-disjoint`) and a second
    rank's digits `e` (`writers-disjoint`); `single-rank-identity` reads `i` alone. A layout's
    byte outside its page (`reshard.plan_queries.outside_page`) is `i` alone too."""
    i: dict = None
    d: dict = None
    c: dict = None
    j: dict = None
    e: dict = None


@dataclass(frozen=True)
class Cover(Witness):
    """`writers-cover`: ranks `d`, `e`, local indices `i`, `j` and the canonical index `a` the
    first reads, canonical indices `k`, `l`; the pigeonhole's parts (`count`: the world and the
    writers' bytes, `collide`, `outside`, `canon`: the canonical layout one-to-one), the world
    the digits number and the `writers` of a block, and both pages' sizes."""
    d: dict = None
    e: dict = None
    i: dict = None
    j: dict = None
    a: dict = None
    k: dict = None
    l: dict = None  # noqa: E741 - the second canonical index, beside k
    count: object = None
    collide: object = None
    outside: object = None
    canon: object = None
    world: object = None
    writers: object = None
    local: object = None
    canon_page: object = None


@dataclass(frozen=True)
class Digits(Witness):
    """`digits-match-spec`: a local index `i` on ranks `d`, the bytes the digit table gives
    (`local`, `canon`) and the spec's (`want_local`, `want_canon`); `sides`: the two ways it can
    fail, each a certificate's part (the query is asked whole)."""
    i: dict = None
    d: dict = None
    local: object = None
    canon: object = None
    want_local: object = None
    want_canon: object = None
    sides: tuple = ()


@dataclass(frozen=True)
class Runs(Witness):
    """`runs-match-spec`: the run's byte `x` of local index `i` (byte `b` of its element) on ranks
    `d`, and the canonical byte the run `claimed`; `runs-cover-local`: `x` and the runs' `total`
    bytes (`i`, `d` unread)."""
    x: object = None
    i: dict = None
    d: dict = None
    claimed: object = None
    b: object = None
    total: int = 0


@dataclass(frozen=True)
class Meaning(Witness):
    """`one-format`: local index `i` on ranks `d`, its canonical index `c`, the engine element it
    holds (`mine`), the single rank's sizes, and the arithmetics its divisions are tied across."""
    i: dict = None
    d: dict = None
    c: dict = None
    mine: object = None
    sizes: dict = None
    arithmetics: tuple = ()


@dataclass(frozen=True)
class Sequence(Witness):
    """`sequence-order`: local indices `i`, `j` on ranks `d`, canonical index `c`, the sequence
    index `seq`, the place `want` = token(...) and another's (`other`), the index's `local` and
    `canonical` extents against the page's `tokens` and the grid's `cp`."""
    i: dict = None
    j: dict = None
    d: dict = None
    c: dict = None
    seq: str = ""
    want: object = None
    other: object = None
    local: object = None
    canonical: object = None
    tokens: object = None
    cp: object = None


@dataclass(frozen=True)
class Tiling(Witness):
    """`regions-tile-*`: the `role` page (its size `page`) and the parts' meanings (which regions or
    pads overlap, or leave the page)."""
    role: str = ""
    page: object = None


@dataclass(frozen=True)
class Plan(Witness):
    """A direct plan at given sizes (`reshard.at_sizes`): one byte of a run, read from producer
    `p`'s byte `src` into local byte `dst`. `reshard-cover`: whether a byte is written `twice` or
    `outside` a page, and the plan's `total` bytes; `reshard-match`: the consumer's and the
    producer's spec indices (`iy`, `ix`) and what they hold (`cy`, `cx`), and across a cp the
    `small` side, its sequence index `token` and the `shift` of its part."""
    dst: object = None
    src: object = None
    p: object = None
    twice: object = None
    outside: object = None
    total: int = 0
    iy: dict = None
    ix: dict = None
    cy: object = None
    cx: object = None
    shift: object = None
    small: str = ""
    token: str = ""

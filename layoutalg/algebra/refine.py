"""Direct reshard plans in the algebra: the common refinement of two groups' tilings.

Each group tiles the canonical page with its owner digits (local digits and rank digits, not
the replicas), each a mode `(extent, canonical byte stride)`. `algebra.refine` cuts both
tilings into common pieces: offset by offset through the canonical page, a piece is a digit
of a producer digit and of a consumer digit at once. For consumer rank `s`

- a piece of a consumer rank digit is fixed by `s`: where it is also a producer rank digit
  it picks part of the producer's rank, else a fixed offset into the producer's page;
- a piece of a producer rank digit that is a consumer local digit picks the producer, each
  of its values a run of its own, at a fixed offset into the consumer's page;
- every other piece is a mode of the run, stepping both local pages together.

Where replicas hold a byte, consumer `s` reads the `s`-th of them (modulo their number, in
rank order), so the reads spread over the replicas.

The same construction serves both callers: the runtime at one configuration pair (ints,
`reshard.direct_plans`, certified by `reshard.check_plan`) and the prover for every size
(sympy expressions, `prove.reshard.all_sizes`, checked by Z3). Nothing here trusts itself: it says which
pieces go where, and the callers check the bytes.
"""
from __future__ import annotations

from itertools import product
from math import prod
from typing import NamedTuple

from .ops import NotCompact, Piece, refine
from .layout import Layout


class Owner(NamedTuple):
    """An owner digit of one group: its extent, its canonical byte stride, and its local byte
    stride (a local digit) or its stride in the rank number (a rank digit)."""

    extent: object
    canonical: object
    local: object
    rank: object
    is_rank: bool


class Transpose(NamedTuple):
    """Three consecutive pieces `(k, n / k, k)` of a refinement where `k` divides `n` only at
    some sizes: over the block's offsets `z` in `[0, k * n)` one side reads the digits
    `(z mod n, z // n)` (its N side), the other `(z mod k, z // k)` (its K side), a k-by-n
    grid and its transpose. With `n = k * q + rho` (one case per residue `rho`, `q` a size)
    every pair of values of the two short digits `(z mod k, z // n)` is one strided piece
    of `q` or `q + 1` steps (`transposed`): what dealing tokens to `cp` ranks in chunks makes
    of pages of another cp where the chunks do not divide evenly among them.

    `n_side_is_a`: side A (the producers) is the N side; `low`, `mid`, `high` the refined
    pieces as the divisible case cuts them (`mid.extent == n / k`)."""

    low: Piece
    mid: Piece
    high: Piece
    n_side_is_a: bool
    rho: int
    q: object


class PieceRun(NamedTuple):
    """A run of consumer rank `s`'s plan as pieces: its producer; the source and destination
    offsets as `(coefficient, digit)` terms (offset = sum coefficient * digit.local, digits of
    the producer's and the consumer's owners); its modes, pieces of two local digits."""

    producer: object
    src: tuple
    dst: tuple
    modes: tuple


def owners(tiling) -> list[Owner]:
    """A group's owner digits from its tiling at one configuration (`mapping.Tiling`): its
    local digits, then its rank digits but the replicas.

    Examples:
        >>> from layoutalg.mapping import Tiling
        >>> owners(Tiling(((4, 1, 1),), ((2, 1, 4, False), (2, 2, 0, True)), 0))
        [Owner(extent=4, canonical=1, local=1, rank=0, is_rank=False), Owner(extent=2, canonical=4, local=0, rank=1, is_rank=True)]
    """
    return [Owner(n, c, lo, 0, False) for n, lo, c in tiling.local] + \
        [Owner(n, c, 0, r, True) for n, r, c, replica in tiling.ranks if not replica]


def pieces(ox: list, oy: list, quotient=None) -> list[Piece]:
    """The common refinement of the producers' owners `ox` and the consumers' `oy` (each a
    list of `Owner`) on the canonical page. Two tilings of one set of canonical bytes with
    holes in it (a region of a page, rows of data between other regions) are refined as the
    compact tilings they are of that set: with ints (no `quotient`) always, with symbolic
    sizes where the tilings are not compact and an order of their strides is shown for every
    size (`_compact_symbolic`). Raises `algebra.ops.NotCompact` where they have no common
    refinement or are not shown to cover the same canonical bytes.

    Examples:
        >>> rows = lambda n: [Owner(4, 1, 1, 0, False), Owner(n, 8, 4, 0, False)]   # 4 bytes of every 8
        >>> [tuple(p) for p in pieces(rows(2), [Owner(4, 1, 1, 0, False), Owner(2, 8, 0, 1, True)])]
        [(4, (0, 1), (0, 1)), (2, (1, 1), (1, 1))]
        >>> pieces(rows(2), [Owner(8, 1, 1, 0, False)])
        Traceback (most recent call last):
        ...
        layoutalg.algebra.ops.NotCompact: the two tilings cover other canonical bytes: [(4, 1), (2, 8)] against [(8, 1)]
    """
    if quotient is None:
        ox, oy = _compact(ox), _compact(oy)
        if ox[1] != oy[1]:
            raise NotCompact(f"the two tilings cover other canonical bytes: {ox[1]} against {oy[1]}")
        return refine(_layout(ox[0]), _layout(oy[0]))
    try:
        return refine(_layout(ox), _layout(oy), quotient)
    except NotCompact:  # symbolic sizes: a region with holes, refined as the compact tilings it is
        (ox, rx), (oy, ry) = _compact_symbolic(ox, quotient), _compact_symbolic(oy, quotient)
        if len(rx) != len(ry) or any(quotient(a, b) != 1 for u, v in zip(rx, ry) for a, b in zip(u, v)):
            raise NotCompact(f"the two tilings are not shown to cover the same canonical bytes: {rx} "
                             f"against {ry}") from None
        return refine(Layout(*zip(*ox)), Layout(*zip(*oy)), quotient)


def _layout(owners: list) -> Layout:
    return Layout(tuple(d.extent for d in owners), tuple(d.canonical for d in owners))


def _compact(owners: list) -> tuple[list, list]:
    """Owners (int strides) with each canonical stride replaced by its place in the set of
    bytes they cover (the product of the extents below it), and that set as its runs
    `(extent, stride)`, merged where one continues another. Raises `NotCompact` where two
    owners overlap (a stride inside the reach of the smaller ones)."""
    out, runs, reach, place = list(owners), [], 1, 1
    for k in sorted((k for k, d in enumerate(owners) if d.extent != 1), key=lambda k: owners[k].canonical):
        d = owners[k]
        if d.canonical < reach:
            raise NotCompact(f"an owner of stride {d.canonical} lands inside the {reach} bytes below it")
        out[k] = d._replace(canonical=place)
        if runs and runs[-1][0] * runs[-1][1] == d.canonical:
            runs[-1] = (runs[-1][0] * d.extent, runs[-1][1])
        else:
            runs.append((d.extent, d.canonical))
        reach, place = d.canonical * d.extent, place * d.extent
    return out, runs


def _compact_symbolic(owners: list, quotient) -> tuple[list, list]:
    """`_compact` where sizes are symbolic and `quotient(n, d)` is `n / d` where it is shown
    whole (else None), the owners given back as `(extent, place)` pairs: the owners by
    stride, each next one the one at the reach of those below it, or else (a hole) the one
    every other left is a whole multiple of (or of one that is). Raises `NotCompact` where
    no such order is shown. The order is a construction only: the plan built from it is
    checked for every size by whoever calls (`prove.reshard.all_sizes`).

    Examples:
        >>> whole = lambda n, d: n // d if n % d == 0 else None
        >>> _compact_symbolic([Owner(4, 1, 1, 0, False), Owner(2, 8, 4, 0, False)], whole)   # 4 bytes of every 8
        ([(4, 1), (2, 4)], [(4, 1), (2, 8)])
    """
    out, runs, reach, place = [(d.extent, d.canonical) for d in owners], [], 1, 1
    left = [k for k, d in enumerate(owners) if quotient(d.extent, 1) != 1]
    while left:
        k = next((k for k in left if quotient(owners[k].canonical, reach) == 1), None)
        if k is not None and runs:
            runs[-1] = (runs[-1][0] * owners[k].extent, runs[-1][1])
        else:
            below = [k for k in left if _above(owners, left, k, quotient) == set(left)] if k is None else [k]
            if len(below) != 1:
                raise NotCompact(f"the owners above the {reach} bytes compacted so far have no order shown for every "
                                 f"size: strides {[owners[o].canonical for o in left]}")
            k = below[0]
            runs.append((owners[k].extent, owners[k].canonical))
        left.remove(k)
        d = owners[k]
        out[k] = (d.extent, place)
        reach, place = d.canonical * d.extent, place * d.extent
    return out, runs


def _above(owners: list, left: list, k: int, quotient) -> set:
    """The owners of `left` whose strides are shown at or above owner `k`'s: whole multiples
    of it, or of one that is."""
    out, todo = {k}, [k]
    while todo:
        j = todo.pop()
        for o in left:
            if o not in out and quotient(owners[o].canonical, owners[j].canonical) is not None:
                out.add(o)
                todo.append(o)
    return out


def transposed(k: int, rho: int, q) -> list[tuple]:
    """A `Transpose` block of `n = k * q + rho` as `k * k` strided pieces, one for each value
    `kl` of the K side's low digit (`z mod k`) and `nh` of the N side's high digit
    (`z // n`): `(kl, nh, steps, n_low, k_high)`, the piece's offsets being
    `z = kl + k * (k_high + j)` for `0 <= j < steps`, which the N side reads as low digit
    `n_low + k * j` and the K side as high digit `k_high + j`. `q` may be a size (sympy).

    Pre-conditions: `0 <= rho < k`, `q >= 0`.
    Post-conditions: the pieces' offsets are `[0, k * n)`, each once, and offset `z` of piece
    `(kl, nh)` has `z mod k == kl`, `z // n == nh`, `z mod n == n_low + k * j` and
    `z // k == k_high + j` (`tests/test_transpose.py` enumerates it).

    Examples:
        >>> transposed(2, 1, 1)     # n = 3 chunks a rank, dealt to 2
        [(0, 0, 2, 0, 0), (0, 1, 1, 1, 2), (1, 0, 1, 1, 0), (1, 1, 2, 0, 1)]
        >>> transposed(2, 0, 2) == [(0, 0, 2, 0, 0), (0, 1, 2, 0, 2), (1, 0, 2, 1, 0), (1, 1, 2, 1, 2)]
        True
    """
    def up(x):  # ceil(x / k) of an int
        return -(-x // k)
    return [(kl, nh, q + up((nh + 1) * rho - kl) - up(nh * rho - kl), kl + k * up(nh * rho - kl) - nh * rho,
             nh * q + up(nh * rho - kl)) for kl in range(k) for nh in range(k)]


def consumer_runs(cut: list[Piece], ox: list, oy: list, replicas: list, s: int, num=int,
                  spread: int | None = None) -> list[PieceRun]:
    """Consumer rank `s`'s runs. `replicas`: the producers' replica digits as (extent, rank
    stride), ascending by rank stride; `num(x)` makes a size that must be a number one
    (ints: itself; symbolic: raises where it is not); `spread`, the number that picks among
    replicas where it is not `s` (a virtual consumer: its rank's own).

    Examples:
        >>> whole = [Owner(8, 1, 1, 0, False)]
        >>> halves = [Owner(4, 1, 1, 0, False), Owner(2, 4, 0, 1, True)]
        >>> [r.producer for r in consumer_runs(pieces(halves, whole), halves, whole, [], 0)]
        [0, 1]
    """
    producer, src, picks, modes, blocks = 0, [], [], [], []
    for p in cut:
        if isinstance(p, Transpose):  # k * k pieces, those of this consumer's rank digits kept
            blocks.append(_block_runs(p, ox, oy, s, num))
            continue
        x, y = ox[p.a[0]], oy[p.b[0]]
        if y.is_rank:  # this consumer's digit: a number
            c = ((s // num(y.rank)) % num(y.extent)) // num(p.b[1]) % num(p.extent)
            if x.is_rank:
                producer += c * num(p.a[1] * x.rank)
            else:
                src.append((c * p.a[1], p.a[0]))
        elif x.is_rank:  # which producer: each value a run of its own
            picks.append(p)
        else:
            modes.append(p)
    k = (s if spread is None else spread) % prod(num(e) for e, _ in replicas)
    for e, r in replicas:  # the k-th holder, in rank order
        producer += (k % num(e)) * num(r)
        k //= num(e)
    out = []
    for cs in product(*(range(num(p.extent)) for p in picks)):
        rank = producer + sum(c * num(p.a[1] * ox[p.a[0]].rank) for c, p in zip(cs, picks))
        dst = tuple((c * p.b[1], p.b[0]) for c, p in zip(cs, picks))
        for bs in product(*blocks):
            out.append(PieceRun(rank + sum(b[0] for b in bs), tuple(src) + sum((b[1] for b in bs), ()),
                                dst + sum((b[2] for b in bs), ()), tuple(modes) + tuple(b[3] for b in bs)))
    return out


def _block_runs(t: Transpose, ox: list, oy: list, s: int, num) -> list[tuple]:
    """Consumer `s`'s share of a `Transpose` block: for each of its pieces whose consumer
    rank digits hold `s`'s values, (producer rank added, src terms, dst terms, its mode). The
    N side's low digit and the K side's high digit step with the mode, so they are local
    digits (`prove.reshard.symplan` builds no block otherwise)."""
    k = num(t.low.extent)
    out = []
    for kl, nh, steps, n_low, k_high in transposed(k, t.rho, t.q):
        n_side, k_side = ("a", "b") if t.n_side_is_a else ("b", "a")
        said = ((n_side, getattr(t.low, n_side), n_low), (n_side, getattr(t.high, n_side), nh),
                (k_side, getattr(t.low, k_side), kl), (k_side, getattr(t.mid, k_side), k_high))
        producer, src, dst, mine = 0, [], [], True
        for side, (idx, unit), value in said:
            d = ox[idx] if side == "a" else oy[idx]
            if side == "a" and d.is_rank:
                producer += num(value * unit * d.rank)
            elif side == "a":
                src.append((value * unit, idx))
            elif d.is_rank:  # this consumer's digit: a number, which this piece must have
                mine = mine and ((s // num(d.rank)) % num(d.extent)) // num(unit) % k == value
            else:
                dst.append((value * unit, idx))
        if mine:
            out.append((producer, tuple(src), tuple(dst), Piece(steps, t.mid.a, t.mid.b)))
    return out

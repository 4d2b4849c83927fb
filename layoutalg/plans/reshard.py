"""Direct reshard plans: a consumer rank's local page straight from producer ranks' local pages.

For a producer configuration X and a consumer configuration Y of one layer, a consumer
byte at local offset `b` of rank `s` holds canonical byte `Y_s(b)`; a producer rank `p`
that holds that canonical byte has it at `X_p^-1(Y_s(b))`. The plan is that composition,

    D_s = X^-1 . Y_s        (consumer local -> (producer rank, producer local))

computed once per configuration pair, without a canonical buffer in between: what
disaggregated prefill and decode at different parallelism need.

Where the lowering made both groups' mappings, they carry the group's tiling of the
canonical page (`CanonicalPageMapping.tilings`, one per region of a page), and the composition is the
algebra's (`layoutalg.algebra.refine`: the common refinement of the two tilings, the same pieces
`prove.reshard.all_sizes` checks for every size), lowered to strided runs. Otherwise (mappings from
outside) it works on the runs' canonical fragments: the producers'
fragments cut the canonical page into segments, each with the ranks that hold it (several
where replicas hold the same bytes); every consumer fragment is cut at those segments.
Either way a consumer byte held by several replicas comes from the `s`-th of them modulo
their number, so consumer ranks spread their reads. The plan is built only where both
groups read the same canonical page format (same size and layout id); otherwise the
canonical byte of one is not that of the other.

A plan is checked where it is built: every consumer byte written exactly once, from a
producer byte inside its page that holds the same canonical byte (each holder's own
runs say so). `prove.reshard` proves the same with Z3 against the spec, reading the
spec directly rather than the runs.

Examples:
    >>> from layoutalg.mapping import CanonicalPageMapping, CopyRun
    >>> whole = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True)
    >>> halves = [CanonicalPageMapping(8, 4, (CopyRun(0, 4 * r, 4, 1, 4, 4),), 1, 0, True) for r in (0, 1)]
    >>> [tuple(r) for r in direct_plans(halves, [whole])[0].runs]
    [(0, 0, 0, 4, 1, 4, 4), (1, 0, 4, 4, 1, 4, 4)]
"""
from __future__ import annotations

from bisect import bisect_right
from math import prod
from typing import NamedTuple, Sequence


from ..algebra import intervals
from ..algebra.ops import NotCompact
from ..algebra.refine import consumer_runs, owners, pieces
from ..errors import ConfigError, LayoutalgError
from ..runtime.lower import strided_fragments, strided_runs
from ..mapping import CanonicalPageMapping, CopyRun, DirectRun, PageConversion, TensorView, rank_and_part
from ..runtime.runs import check_runs, shared_byte

MAX_FRAGMENTS = 1 << 20  # fragments of one group's runs a plan composes; beyond, it refuses


class ReshardError(LayoutalgError):
    """The two configurations cannot be resharded directly: the reason names what differs."""


class _PlanFields(NamedTuple):
    """How consumer rank `consumer` fills its whole local page from producer local pages."""

    consumer: int
    runs: tuple[DirectRun, ...]
    local_page_size_bytes: int      # the consumer's
    producer_page_size_bytes: int
    # the tensors the two groups' mappings were derived for (`CanonicalPageMapping.tensors`):
    # gather and scatter check the tensors they are given against them, as copy plans do
    producer_tensors: tuple = ()
    consumer_tensors: tuple = ()
    # derived from sizes alone, for a family whose spec names no tensor dims: the page format
    # and the box its family reads (`CanonicalPageMapping.format_id`, `.reads`), so a tensor of
    # more dims is taken only as the runtime would have taken it
    producer_format: str = ""
    consumer_format: str = ""
    producer_reads: tuple = ()
    consumer_reads: tuple = ()

    def producers(self) -> tuple[int, ...]:
        """The producer ranks this consumer reads, in order."""
        return tuple(sorted({r.producer for r in self.runs}))

    def runs_from(self, producer: int) -> tuple[DirectRun, ...]:
        return tuple(r for r in self.runs if r.producer == producer)

    def bytes_from(self, producer: int) -> int:
        return sum(r.fragment_size * r.num_fragments for r in self.runs_from(producer))


class DirectPlan(_PlanFields):
    """How consumer rank `consumer` fills its whole local page from producer local pages
    (its `DirectRun`s, each from one producer rank).

    Checked where built (`validate`, here and in `_replace`): a plan that passes is built sound
    (`sound` True, which only the checking constructor gives); one that fails is still built,
    refused, and every executor refuses it before a byte moves, saying why (`admit`), as it
    does a plan that reached it another way (an unpickled one made before plans were checked
    where built). `direct_plans` builds certified plans (`check_plan`)."""

    __slots__ = ()
    sound = False

    def __new__(cls, *args, **kwargs):
        return _checked_plan(_PlanFields.__new__(DirectPlan, *args, **kwargs))

    @classmethod
    def _make(cls, values):
        return _checked_plan(_PlanFields._make.__func__(DirectPlan, values))

    def __reduce__(self):  # every pickle protocol rebuilds through the checking constructor
        return DirectPlan, tuple(self)


class _SoundPlan(DirectPlan):
    """A `DirectPlan` that passed `validate` where it was built (its runs a tuple, which cannot
    change after): executors take it as it is."""

    __slots__ = ()
    sound = True


_SoundPlan.__name__ = "DirectPlan"


def _checked_plan(plan: DirectPlan) -> DirectPlan:
    try:
        validate(plan)
        ok = type(plan.runs) is tuple
    except Exception:  # noqa: BLE001 - whatever it is, `admit` raises it again before a byte moves
        ok = False
    return tuple.__new__(_SoundPlan, plan) if ok else plan


def admit(plan) -> None:
    """Raises unless `plan` is a sound `DirectPlan` (checked where built): what every executor of
    direct plans calls first; a refused one is validated again, which says why."""
    if not isinstance(plan, DirectPlan) or not plan.sound:
        validate(plan)


def direct_plans(producers: Sequence[CanonicalPageMapping],
                 consumers: Sequence[CanonicalPageMapping]) -> tuple[DirectPlan, ...]:
    """One `DirectPlan` per consumer rank, from every rank's mapping of both groups.

    Pre-conditions: both groups map the same canonical page format (size and layout id);
    every canonical byte a consumer reads has a producer rank.
    Post-conditions: each consumer byte is written once, from a producer byte that holds
    the same canonical byte (`check_plan`).
    Raises `ReshardError` naming what differs or the canonical bytes no producer holds.
    """
    for role, group in (("producers", producers), ("consumers", consumers)):
        if isinstance(group, CanonicalPageMapping) or not isinstance(group, Sequence):
            raise ConfigError(f"direct reshard: {role} must be a list of every rank's CanonicalPageMapping, "
                              f"got {type(group).__name__}")
    _compatible(producers, consumers)
    composed = _composed(producers, consumers)
    if composed is not None:
        try:  # a tiling only proposes the plan: one the runs do not certify is not used
            return tuple(_certified(s, composed(s), producers, y) for s, y in enumerate(consumers))
        except (ReshardError, _TooMany):
            pass  # a tiling that is not these runs' (from outside, or ranks listed in another order)
    cuts, holders = _segments(producers)
    plans = []
    for s, y in enumerate(consumers):
        pieces = []
        for lo, co, n in _fragments(y, "consumer", s):
            pieces += _pieces(lo, co, n, cuts, holders, s)
        plans.append(_certified(s, pieces, producers, y))
    return tuple(plans)


def _views(tensors) -> tuple:
    """A mapping's tensor views as a plan carries them: () where they are not TensorViews (from outside)."""
    ok = isinstance(tensors, tuple) and all(isinstance(v, TensorView) for v in tensors)
    return tensors if ok else ()


class _TooMany(Exception):
    """A tiling proposes more fragments than a plan composes (it is not these runs')."""


def _certified(s: int, pieces, producers, y) -> DirectPlan:
    """Consumer `s`'s plan from its `(producer, src, dst, size)` pieces, in the one normal form
    of its byte map (merged where contiguous, regrouped into strided runs): however the pieces
    were found, a byte map has one plan, so a producer's `gather` and a consumer's `scatter`
    built apart agree on the order of the bytes. Certified by `check_plan`."""
    views = [m.tensors for m in producers]
    x = producers[0]
    same = all((m.format_id, m.reads) == (x.format_id, x.reads) for m in producers)
    fields = (s, _strided(_merged(pieces)), y.local_page_size_bytes, x.local_page_size_bytes,
              _views(views[0]) if all(v == views[0] for v in views) else (), _views(y.tensors),
              x.format_id if same else "", y.format_id, x.reads if same else (), y.reads)
    plan = tuple.__new__(DirectPlan, fields)
    check_plan(plan, producers, y)  # (validated there, against the producers' pages: built unchecked)
    return tuple.__new__(_SoundPlan, plan)


def _composed(producers, consumers):
    """Consumer rank s's runs (a function of s) composed in the algebra from the two groups'
    tilings (`direct`), region by region, or None where a group has none (mappings from
    outside), they are not tilings of these pages, or they have no common refinement: then
    the runs' fragments are composed."""
    try:
        tilings = [{m.tilings for m in group} for group in (producers, consumers)]
    except TypeError:  # not a tuple of numbers (from outside)
        return None
    if any(len(t) != 1 for t in tilings):
        return None
    (tx,), (ty,) = tilings
    if not (_fits(tx, producers[0], len(producers)) and _fits(ty, consumers[0], len(consumers))) \
            or len(tx) != len(ty):
        return None
    regions = []
    for x, y in zip(tx, ty):
        if x.canonical_base != y.canonical_base:
            return None  # one canonical format: each region where the other group has it
        ox, oy = owners(x), owners(y)
        try:
            cut = pieces(ox, oy)
        except (NotCompact, ArithmeticError):
            return None
        replicas = sorted(((n, r) for n, r, _, replica in x.ranks if replica and n != 1), key=lambda t: t[1])
        regions.append((x.local_base, y.local_base, ox, oy, cut, replicas))

    def runs(s: int) -> list[tuple[int, int, int, int]]:
        """Consumer `s`'s `(producer, src, dst, size)` pieces, one per fragment."""
        out, budget = [], MAX_FRAGMENTS
        for src_base, dst_base, ox, oy, cut, replicas in regions:
            for r in consumer_runs(cut, ox, oy, replicas, s):
                src = src_base + sum(k * ox[i].local for k, i in r.src)
                dst = dst_base + sum(k * oy[j].local for k, j in r.dst)
                modes = [(p.extent, p.b[1] * oy[p.b[0]].local, p.a[1] * ox[p.a[0]].local) for p in r.modes]
                n = strided_fragments(modes)
                budget -= n
                if budget < 0:
                    raise _TooMany()
                if not n:
                    continue  # a region of no bytes
                offsets, size, count, dst_stride, src_stride = strided_runs(modes)
                out += [(r.producer, src + so + i * src_stride, dst + do + i * dst_stride, size)
                        for do, so in offsets for i in range(count)]
        return out
    return runs


def _fits(tilings, m: CanonicalPageMapping, world: int) -> bool:
    """Whether `tilings` are ones the algebra may compose for a group of `world` ranks of
    mapping `m`'s pages: ints (no bools), positive extents, rank digits numbering exactly the
    group, each region's local digits inside the local page and its owners inside the
    canonical page, the regions no more than the pages (so whatever they enumerate is bounded
    by those). The plan is still certified."""
    if not isinstance(tilings, tuple) or not tilings:
        return False
    local_bytes = canonical_bytes = 0
    for t in tilings:
        try:
            local = [(n, lo, c) for n, lo, c in t.local]
            ranks = [(n, r, c, replica) for n, r, c, replica in t.ranks]
            bases = (t.canonical_base, t.local_base)
        except (TypeError, ValueError, AttributeError):
            return False
        ints = all(type(x) is int for x in (*bases, *(x for d in local for x in d),
                                            *(x for n, r, c, _ in ranks for x in (n, r, c))))
        if not (ints and all(n >= 1 and lo >= 0 and c >= 0 for n, lo, c in local)
                and all(type(replica) is bool and n >= 1 and r >= 1 and c >= 0 for n, r, c, replica in ranks)):
            return False
        size = prod(n for n, *_ in local)
        owners = size * prod(n for n, _, _, replica in ranks if not replica)
        local_bytes, canonical_bytes = local_bytes + size, canonical_bytes + owners
        if prod(n for n, *_ in ranks) != world or min(bases) < 0 or t.local_base + size > m.local_page_size_bytes \
                or t.canonical_base + owners > m.canonical_page_size_bytes:
            return False
    return local_bytes <= m.local_page_size_bytes and canonical_bytes <= m.canonical_page_size_bytes


def _compatible(producers, consumers) -> None:
    if not producers or not consumers:
        raise ReshardError(f"direct reshard: {len(producers)} producer and {len(consumers)} consumer mappings; "
                           f"each group needs one mapping per rank")
    for role, group in (("producer", producers), ("consumer", consumers)):
        for r, m in enumerate(group):
            if not isinstance(m, CanonicalPageMapping):
                raise ConfigError(f"direct reshard: {role} rank {r} is a {type(m).__name__}, "
                                  f"expected a CanonicalPageMapping")
            check_runs(m, f"direct reshard ({role} rank {r})")
    first = producers[0]
    for role, group in (("producer", producers), ("consumer", consumers)):
        for r, m in enumerate(group):
            for what, a, b in (("canonical page size", m.canonical_page_size_bytes, first.canonical_page_size_bytes),
                               ("layout id", m.layout_id, first.layout_id),
                               ("page format", m.format_id, first.format_id)):
                if a != b:
                    raise ReshardError(f"direct reshard: {role} rank {r} has {what} {a!r}, producer rank 0 has "
                                       f"{b!r}: the two read different canonical page formats, so a canonical "
                                       f"byte of one is not that of the other")
        if role == "producer" and any(m.local_page_size_bytes != first.local_page_size_bytes for m in group):
            raise ReshardError("direct reshard: the producer ranks have local pages of different sizes")


def _fragments(m: CanonicalPageMapping, role: str, rank: int) -> list[tuple[int, int, int]]:
    total = sum(r.num_fragments for r in m.runs)
    if total > MAX_FRAGMENTS:
        raise ReshardError(f"direct reshard: {role} rank {rank} has {total} fragments, more than the "
                           f"{MAX_FRAGMENTS} a plan composes")
    return [t for r in m.runs for t in r.triples() if t[2]]


def _segments(producers) -> tuple[list[int], list[list[tuple[int, int]]]]:
    """The canonical page cut at every producer fragment's ends; for each segment
    [cuts[k], cuts[k+1]), its holders as (producer rank, local offset of the segment's start)."""
    frags = [(co, co + n, p, lo) for p, x in enumerate(producers) for lo, co, n in _fragments(x, "producer", p)]
    cuts = sorted({c for a, b, _, _ in frags for c in (a, b)})
    holders: list[list[tuple[int, int]]] = [[] for _ in cuts]
    for a, b, p, lo in frags:
        k = bisect_right(cuts, a) - 1
        while cuts[k] < b:
            holders[k].append((p, lo + cuts[k] - a))
            k += 1
    for h in holders:
        h.sort()
    return cuts, holders


def _pieces(lo: int, co: int, n: int, cuts, holders, s: int) -> list[tuple[int, int, int, int]]:
    """A consumer fragment (local lo, canonical co, n bytes) as (producer, src, dst, size) pieces."""
    out, end = [], co + n
    k = bisect_right(cuts, co) - 1
    while co < end:
        if k < 0 or k + 1 >= len(cuts) or not holders[k]:
            raise ReshardError(f"direct reshard: canonical byte {co} of the page, read by consumer rank {s}, "
                               f"is held by no producer rank")
        step = min(end, cuts[k + 1]) - co
        p, base = holders[k][s % len(holders[k])]   # replicas: consumer s reads the s-th holder
        out.append((p, base + co - cuts[k], lo, step))
        lo, co, k = lo + step, co + step, k + 1
    return out


def _merged(pieces) -> list[tuple[int, int, int, int]]:
    """Pieces sorted by destination, merged where contiguous in both pages and from one producer."""
    out: list[list[int]] = []
    for p, src, dst, n in sorted(pieces, key=lambda t: t[2]):
        last = out[-1] if out else None
        if last and last[0] == p and last[1] + last[3] == src and last[2] + last[3] == dst:
            last[3] += n
        else:
            out.append([p, src, dst, n])
    return [tuple(t) for t in out]


def _strided(pieces) -> tuple[DirectRun, ...]:
    """Consecutive pieces of one producer and size, at constant steps on both sides, as one run."""
    runs: list[list[int]] = []
    for p, src, dst, n in sorted(pieces):
        r = runs[-1] if runs else None
        if r and r[0] == p and r[3] == n:
            if r[4] == 1 and src > r[1] and dst > r[2]:  # strides positive on both sides
                r[5], r[6], r[4] = src - r[1], dst - r[2], 2
                continue
            if r[4] > 1 and src == r[1] + r[4] * r[5] and dst == r[2] + r[4] * r[6]:
                r[4] += 1
                continue
        runs.append([p, src, dst, n, 1, n, n])
    return tuple(DirectRun(*r) for r in runs)


def check_plan(plan: DirectPlan, producers: Sequence[CanonicalPageMapping], consumer: CanonicalPageMapping) -> None:
    """The plan's certificate, by the runs of both groups: every byte the consumer's mapping
    holds (its whole page, but for a page's padding) written once and nothing else, each
    from a producer byte inside its page holding the same canonical byte.

    Raises `ReshardError` naming the first consumer byte that breaks it.
    """
    here = f"direct reshard, consumer rank {plan.consumer}"
    validate(plan, [m.local_page_size_bytes for m in producers], here)
    if plan.local_page_size_bytes != consumer.local_page_size_bytes:
        raise ReshardError(f"{here}: the plan is for a {plan.local_page_size_bytes}-byte local page, the consumer's "
                           f"mapping has {consumer.local_page_size_bytes}")
    triples = sorted((d, s, n, r.producer) for r in plan.runs for s, d, n in r.triples() if n)
    end = -1
    for dst, src, n, p in triples:
        if dst < end:
            raise ReshardError(f"{here}: local byte {dst} is written twice")
        if not 0 <= p < len(producers) or src < 0 or src + n > producers[p].local_page_size_bytes:
            raise ReshardError(f"{here}: reads producer rank {p} bytes [{src}, {src + n}), outside its page")
        end = dst + n
    # exactly the bytes the consumer's own runs hold: its whole page, but for a page's padding
    written = intervals.union((d, n) for d, _, n, _ in triples)
    held = intervals.union((lo, n) for r in consumer.runs for lo, _, n in r.triples() if n)
    if written != held:
        first = _first_unlike(written, held)
        raise ReshardError(f"{here}: the plan writes local bytes {_shown_spans(written)} but the consumer's "
                           f"mapping holds {_shown_spans(held)} (from byte {first} on they differ)")
    want = _table(consumer)
    have = {p: _table(producers[p]) for p in {t[3] for t in triples}}
    for dst, src, n, p in triples:
        a, b = _canonical(want, dst, n), _canonical(have[p], src, n)
        if a is None or a != b:
            raise ReshardError(f"{here}: local bytes [{dst}, {dst + n}) hold canonical {a}, but producer rank {p}'s "
                               f"bytes [{src}, {src + n}) hold canonical {b}")


def _first_unlike(a: list, b: list) -> int:
    """The first byte in one list of spans and not the other (they differ)."""
    for (x0, x1), (y0, y1) in zip(a, b):
        if x0 != y0:
            return min(x0, y0)
        if x1 != y1:
            return min(x1, y1)
    return (a if len(a) > len(b) else b)[min(len(a), len(b))][0]


def _shown_spans(spans) -> str:
    text = ", ".join(f"[{a}, {b})" for a, b in spans[:4])
    return text + (f" and {len(spans) - 4} more" if len(spans) > 4 else "") if spans else "none"


def validate(plan: DirectPlan, producer_pages: Sequence[int] | None = None, here: str = "") -> None:
    """The plan's shape, before anything reads it: every field a non-negative integer, every
    producer one of the group (of `producer_pages`' length, when given), every run inside both
    pages and no consumer byte written twice (the executors' precondition)."""
    here = here or f"direct reshard, consumer rank {getattr(plan, 'consumer', '?')}"
    if not isinstance(plan, DirectPlan):
        raise ConfigError(f"{here}: expected a DirectPlan, got {type(plan).__name__}")
    if producer_pages is None:
        producer_pages = [plan.producer_page_size_bytes] * (1 + max((r.producer for r in plan.runs
                                                                     if isinstance(r, DirectRun)), default=0))
    for side, views in (("producer", plan.producer_tensors), ("consumer", plan.consumer_tensors)):
        if not isinstance(views, tuple) or not all(isinstance(v, TensorView) for v in views):
            raise ReshardError(f"{here}: the {side} tensors must be a tuple of TensorViews, got {views!r}")
    for k, r in enumerate(plan.runs):
        if not isinstance(r, DirectRun) or r.why_refused() is not None:  # (its values, not how it was built)
            raise ReshardError(f"{here}: run {k} {tuple(r)} must be a DirectRun of non-negative integers")
        if r.producer >= len(producer_pages):
            raise ReshardError(f"{here}: run {k} reads producer rank {r.producer} of a {len(producer_pages)}-rank group")
        last = r.num_fragments - 1
        for side, off, stride, page in (("producer", r.src_offset, r.src_stride, producer_pages[r.producer]),
                                        ("consumer", r.dst_offset, r.dst_stride, plan.local_page_size_bytes)):
            if r.num_fragments and r.fragment_size and off + last * stride + r.fragment_size > page:
                raise ReshardError(f"{here}: run {k} {tuple(r)} reaches past the {page}-byte {side} page")
    twice = shared_byte([(r.dst_offset, r.dst_stride, r.num_fragments, r.fragment_size) for r in plan.runs])
    if twice is not None:
        raise ReshardError(f"{here}: local byte {twice} is written twice")


def _table(m: CanonicalPageMapping) -> tuple[list[int], list[tuple[int, int, int]]]:
    frags = sorted((lo, co, n) for r in m.runs for lo, co, n in r.triples() if n)
    return [f[0] for f in frags], frags


def _canonical(table, lo: int, n: int):
    """The canonical bytes of local bytes [lo, lo + n) as merged (start, size) intervals,
    or None where some of them are in no fragment."""
    starts, frags = table
    out: list[list[int]] = []
    k = bisect_right(starts, lo) - 1
    while n > 0:
        if k < 0 or k >= len(frags) or not frags[k][0] <= lo < frags[k][0] + frags[k][2]:
            return None
        flo, fco, fn = frags[k]
        step = min(n, flo + fn - lo)
        c = fco + lo - flo
        if out and out[-1][0] + out[-1][1] == c:
            out[-1][1] += step
        else:
            out.append([c, step])
        lo, n, k = lo + step, n - step, k + 1
    return [tuple(x) for x in out]




# ---- across another cp: pages of two formats --------------------------------------------------

def in_pages_of(m: CanonicalPageMapping, conversion: CanonicalPageMapping, k: int, part: int,
                format_id: str = "") -> CanonicalPageMapping:
    """`m`, a mapping onto small canonical pages, as a mapping onto the big page whose part
    `part` (of `k`) its page is: `conversion⁻¹ ∘ shift(part)`, composed as a direct plan with
    the conversion (`conversions.conversion(...).mapping`: big page -> group of k small pages)
    as the one producer.

    Examples:
        >>> from layoutalg.mapping import CopyRun
        >>> swap = CanonicalPageMapping(8, 8, (CopyRun(0, 4, 4, 1, 4, 4), CopyRun(4, 0, 4, 1, 4, 4)), 1, 0, False)
        >>> m = CanonicalPageMapping(4, 4, (CopyRun(0, 0, 4, 1, 4, 4),), 1, 0, True)
        >>> [tuple(r) for r in in_pages_of(m, swap, 2, 1).runs]
        [(0, 0, 4, 1, 4, 4)]
    """
    small = m.canonical_page_size_bytes
    if conversion.canonical_page_size_bytes != k * small or not 0 <= part < k:
        raise ReshardError(f"direct reshard: a conversion onto {conversion.canonical_page_size_bytes} bytes is not "
                           f"{k} pages of {small} bytes, or part {part} is not one of them")
    shifted = CanonicalPageMapping(k * small, m.local_page_size_bytes,
                                   tuple(r._replace(canonical_offset=r.canonical_offset + part * small) for r in m.runs),
                                   1, 0, m.parallelism_agnostic, conversion.layout_id)
    plan, = direct_plans([conversion], [shifted])
    runs = tuple(CopyRun(r.dst_offset, r.src_offset, r.fragment_size, r.num_fragments, r.dst_stride, r.src_stride)
                 for r in plan.runs)
    return CanonicalPageMapping(conversion.local_page_size_bytes, m.local_page_size_bytes, runs, m.num_writers,
                                m.writer_index, m.parallelism_agnostic, m.layout_id,
                                format_id=format_id,  # the big page's format (`conversion` reads it)
                                tensors=m.tensors, reads=m.reads)  # the local page is m's: viewed as before


class Transfer(NamedTuple):
    """One producer's bytes a consumer's plan reads, over a batch of big pages."""

    plan: DirectPlan
    producer: int             # as the plan numbers it: virtual where producers read small pages
    rank: int                 # the producer rank that holds those bytes
    producer_pages: list      # the producer's pages read, as sequence numbers
    consumer_pages: list      # the consumer's pages written


class CrossPlans(NamedTuple):
    """Direct plans between groups that read pages of another cp (`k` small pages a big one).

    `small` is "consumer" or "producer": which group reads the small pages. With small
    consumers, `parts[j]` are the plans for consumer pages `k*P + j`, reading producer page P.
    With small producers, `parts[0]` are the plans over virtual producers `v = j*world + p`:
    producer `p`'s page `k*P + j` into consumer page P."""

    k: int
    small: str
    world: int                      # producer ranks
    parts: tuple

    def transfers(self, pages: int) -> list[Transfer]:
        """Every transfer of the plans, over `pages` big pages."""
        out = []
        for j, plans in enumerate(self.parts):
            for plan in plans:
                for v in plan.producers():
                    if self.small == "consumer":
                        src, dst = list(range(pages)), [self.k * P + j for P in range(pages)]
                        out.append(Transfer(plan, v, v, src, dst))
                    else:
                        p, part = rank_and_part(v, self.world)
                        out.append(Transfer(plan, v, p, [self.k * P + part for P in range(pages)], list(range(pages))))
        return out


def cross_plans(producers: Sequence[CanonicalPageMapping], consumers: Sequence[CanonicalPageMapping],
                conversion) -> CrossPlans:
    """Direct plans across another cp: the small group's mappings expressed onto the big pages
    (`in_pages_of`, one per part), then composed as for one format (`direct_plans`).

    `conversion` is the `PageConversion` between the two groups' page formats:
    one made for other sizes (another head size, another family), or groups of other element
    types, are refused (`ReshardError`), as `direct_plans` refuses two formats of one cp."""
    if not isinstance(conversion, PageConversion):
        raise ReshardError(f"cross_plans: conversion must be a PageConversion (it names the formats it "
                           f"converts between), got {type(conversion).__name__}")
    if not producers or not consumers:
        raise ReshardError(f"direct reshard: {len(producers)} producer and {len(consumers)} consumer mappings")
    k = conversion.k
    a, b = producers[0].canonical_page_size_bytes, consumers[0].canonical_page_size_bytes
    if a * k == b or b * k == a:
        _same_formats(producers, consumers, conversion, a > b)
        conversion = conversion.mapping
        if a > b:
            big = producers[0].format_id
            parts = tuple(direct_plans(producers, [in_pages_of(y, conversion, k, j, big) for y in consumers])
                          for j in range(k))
            return CrossPlans(k, "consumer", len(producers), parts)
        big = consumers[0].format_id
        virtual = [in_pages_of(x, conversion, k, j, big) for j in range(k) for x in producers]
        return CrossPlans(k, "producer", len(producers), (direct_plans(virtual, consumers),))
    raise ReshardError(f"direct reshard: pages of {a} and {b} bytes are not {k} small pages a big one")


def _same_formats(producers, consumers, conversion, producers_big: bool) -> None:
    from ..runtime.formats import element_part, form_part
    groups = (("producer", producers), ("consumer", consumers))
    for role, group in groups:
        odd = next((m for m in group if m.format_id != group[0].format_id), None)
        if odd is not None:
            raise ReshardError(f"direct reshard: the {role} mappings are of other page formats "
                               f"({group[0].format_id} and {odd.format_id})")
    big, small = conversion.big_format, conversion.small_format
    for (role, group), want in zip(groups, (big, small) if producers_big else (small, big)):
        if form_part(group[0].format_id) != want:
            raise ReshardError(f"direct reshard: the conversion is between pages of format {conversion.big_format} "
                               f"and {conversion.small_format}, but the {role}s' pages are "
                               f"{form_part(group[0].format_id)}: it was made for other sizes or another family")
    if element_part(producers[0].format_id) != element_part(consumers[0].format_id):
        raise ReshardError(f"direct reshard: producer and consumer pages hold other element types "
                           f"({producers[0].format_id} vs {consumers[0].format_id}): one size, another encoding")

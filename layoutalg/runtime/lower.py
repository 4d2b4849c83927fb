"""Lowering: a numeric digit table (`compile.instance.Instance`) -> every rank's copy runs.

    copy map  C = coalesce(invert_and_compose(canonical, local))

C's modes come in order of increasing local stride. Its first mode, when it has
canonical stride 1, is the contiguous fragment; the largest remaining mode becomes
the run's stride; the rest are enumerated, one run per combination. The runs do not
depend on the rank: a rank only shifts every canonical offset by its base.

Before any run is emitted, `certify` checks the stride chains that make the result an
exact tiling (each a handful of integer comparisons, never an enumeration of bytes).
"""
from __future__ import annotations

from itertools import product
from math import lcm, prod

from ..algebra import intervals
from ..algebra.ops import coalesce, invert_and_compose
from ..compile.compiled import Instance, Page, region_of
from ..errors import LayoutalgError
from ..algebra.layout import Layout
from ..mapping import CanonicalPageMapping, CopyRun, Tiling
from ..record import named_tuple
from ..verdicts import Check, Reason
from ..algebra.tiling import broken, chains


class TilingError(LayoutalgError):
    """A family's instance is not an exact tiling: the spec is wrong for this configuration.
    `reason`: why, as a `Reason` of check `tiling` (with a broken chain's fields, where one broke),
    said by `family` where one is named (`family: why`)."""

    def __init__(self, why, family: str | None = None):
        reason = why if isinstance(why, Reason) else Reason(Check.TILING, str(why))
        self.reason = reason.by(family) if family is not None else reason
        super().__init__(str(self.reason))


def certify(inst: Instance) -> Layout:
    """Check that the instance tiles exactly and return its copy map (see `copy_map`).

    The tiling certificate (`tiling.chains`: the local page, the rank grid and, with the
    replicas factored out, the canonical page, each walked as a stride chain), plus every
    canonical index inside its extent. Raises `TilingError` naming the violated condition.
    """
    why = broken(chains(inst.local, inst.ranks, inst.local_page, inst.world, inst.canonical_page)) or \
        _target_out_of_range(inst)
    if why:
        raise TilingError(why, inst.family)
    return copy_map(inst)


def _target_out_of_range(inst: Instance) -> Reason | None:
    """None when every canonical index stays inside its extent, else which one leaves it."""
    for k, (extent, base, terms) in enumerate(inst.targets):
        lo = hi = base
        for s, n in terms:
            if s > 0:
                hi += s * (n - 1)
            else:
                lo += s * (n - 1)
        if lo < 0 or hi >= extent:
            return Reason(Check.TILING, f"canonical index {k} ranges over [{lo}, {hi}] outside [0, {extent})",
                          dim=k, expected=(0, extent - 1), actual=(lo, hi))
    return None


def copy_map(inst: Instance) -> Layout:
    """`C`: local byte offset -> canonical byte offset (relative to the rank's base)."""
    local = Layout(tuple(d.extent for d in inst.local), tuple(d.local for d in inst.local))
    canon = Layout(local.shape, tuple(d.canonical for d in inst.local))
    return coalesce(invert_and_compose(canon, local))


@named_tuple
class StridedRuns:
    """The runs of a one-to-one map between two sides (a copy map: local, then canonical; a
    direct plan's: the consumer, then the producer), in the order its modes list the sides: at
    each of `offsets` (a byte on each side), `count` fragments of `fragment` bytes, `stride_a`
    bytes apart on the first side and `stride_b` on the second."""

    offsets: list     # [(first side's start, second side's start)], sorted by the first
    fragment: int
    count: int
    stride_a: int
    stride_b: int


def run_plan(C: Layout) -> StridedRuns:
    """The runs of the copy map `C` (local, then canonical): `offsets` lists each run's
    (local, canonical) start, sorted by local offset."""
    modes = [(n, ls, cs) for (n, cs), ls in zip(C.modes(), C.index_strides()) if n != 1]
    fragment = 1
    if modes and modes[0][1] == 1 and modes[0][2] == 1:
        fragment = modes.pop(0)[0]
    if not modes:
        return StridedRuns([(0, 0)], fragment, 1, fragment, fragment)
    k = max(range(len(modes)), key=lambda j: (modes[j][0], -j))
    count, ls, cs = modes.pop(k)
    offsets = sorted((sum(i * m[1] for i, m in zip(idx, modes)), sum(i * m[2] for i, m in zip(idx, modes)))
                     for idx in product(*(range(m[0]) for m in modes)))
    return StridedRuns(offsets, fragment, count, ls, cs)


def fast_copy_map(inst: Instance) -> list[tuple[int, int]]:
    """`copy_map` and `certify` in one pass over integer tuples: C's modes as (extent, canonical stride).

    The same certificate (`tiling`) and algebra as `coalesce(invert_and_compose(...))` plus the checks of `certify`,
    specialised to ints for the runtime's hot path (the tests hold the two to each other).
    """
    modes = sorted((ls, n, cs) for n, ls, cs in inst.local if n != 1)
    run, out = 1, []
    for ls, n, cs in modes:
        if ls != run:
            raise TilingError(f"the local page is not tiled exactly: "
                              f"no digit has local stride {run}", inst.family)
        run *= n
        if out and out[-1][1] * out[-1][0] == cs:
            out[-1] = (out[-1][0] * n, out[-1][1])
        else:
            out.append((n, cs))
    owners = sorted([(cs, n) for n, _, cs in inst.local if n != 1]
                    + [(cs, n) for n, _, cs, replica in inst.ranks if n != 1 and not replica])
    size = 1
    for cs, n in owners:
        if cs != size:
            raise TilingError(f"the canonical page is not tiled exactly: "
                              f"no digit has canonical stride {size}", inst.family)
        size *= n
    world = 1
    for rs, n in sorted((r.rank, r.extent) for r in inst.ranks if r.extent != 1):
        if rs != world:
            return None  # the rank grid's chain breaks: let `certify` name it
        world *= n
    if run != inst.local_page or size != inst.canonical_page or world != inst.world \
            or _target_out_of_range(inst):
        return None  # let `certify` name the mismatch
    return out or [(1, 0)]


def lower(inst: Instance | Page, layout_id: str = "") -> tuple[CanonicalPageMapping, ...]:
    """Every rank's mapping, rank = mixed radix of the grid's rank digits (certified first)."""
    if isinstance(inst, Page):
        return lower_page(inst, layout_id)
    modes = fast_copy_map(inst)
    C = Layout(tuple(n for n, _ in modes), tuple(c for _, c in modes)) if modes else certify(inst)
    return emit(inst, C, layout_id)


def lower_uncertified(inst: Instance) -> tuple[CanonicalPageMapping, ...]:
    """The runs of an instance that may not tile: for diagnosing a broken spec, never for copying."""
    return emit(inst, copy_map(inst))


def emit(inst: Instance, C: Layout, layout_id: str = "") -> tuple[CanonicalPageMapping, ...]:
    """Every rank's runs from the copy map `C`."""
    offsets, fs, nf, ls, cs = run_plan(C)
    num_writers = prod(r.extent for r in inst.ranks if r.replica)
    ranks = _rank_bases(inst)
    make = CopyRun._make
    tilings = (Tiling(tuple(inst.local), tuple(inst.ranks), inst.canonical_base),)
    return tuple(CanonicalPageMapping(inst.canonical_page, inst.local_page,
                                      tuple([make((lo, co + base, fs, nf, ls, cs)) for lo, co in offsets]),
                                      num_writers, writer, inst.agnostic, layout_id, tilings=tilings)
                 for base, writer in ranks)


# ---- pages of several regions --------------------------------------------------------

MAX_PAGE_FRAGMENTS = 1 << 20
"""Most fragments a page's tiling sweep looks at (every region, pad and writing rank)."""


def check_injective(modes, what: str, family: str) -> None:
    """Raise unless the modes `(extent, stride)` are one-to-one: walked by increasing stride,
    each stride passes the highest offset the smaller ones reach (a sufficient condition)."""
    reach = 0
    for s, n in sorted((s, n) for n, s in modes if n != 1):
        if s <= reach:
            raise TilingError(f"the {what} is not shown one-to-one: a digit of stride {s} "
                              f"lands inside the {reach + 1} offsets the smaller digits reach", family)
        reach += (n - 1) * s


def region_plan(inst: Instance, region: str) -> StridedRuns:
    """The runs of one region (local, then canonical), certified one-to-one on both sides (the
    page sweep shows the regions tile)."""
    where = f"region '{region}'"
    if any(n == 0 for n, _, _ in inst.local):
        return StridedRuns([], 1, 0, 0, 0)  # an empty region: nothing to copy, nothing to certify
    check_injective([(n, ls) for n, ls, _ in inst.local], f"local layout of {where}", inst.family)
    owners = [(n, cs) for n, _, cs in inst.local] + [(n, cs) for n, _, cs, rep in inst.ranks if not rep]
    check_injective(owners, f"canonical image of {where} (its writers)", inst.family)
    for n, _, cs, rep in inst.ranks:
        if rep and n != 1 and cs != 0:
            raise TilingError(f"in {where} a replica rank digit moves the canonical offset "
                              f"(stride {cs}): replicas must hold the same bytes", inst.family)
    if prod(r.extent for r in inst.ranks) != inst.world:
        raise TilingError(f"the rank grid has {inst.world} slots but its digits cover "
                          f"{prod(r.extent for r in inst.ranks)}", inst.family)
    why = _target_out_of_range(inst)
    if why:
        raise TilingError(why.said(f"{where}: "), inst.family)
    return strided_runs(inst.local, inst.local_base)


def strided_fragments(modes) -> int:
    """How many fragments `strided_runs(modes)` gives, without making them."""
    if any(n == 0 for n, _, _ in modes):
        return 0
    merged = _merged_modes(modes)
    if merged and merged[0][1] == 1 and merged[0][2] == 1:
        merged.pop(0)
    return prod(n for n, _, _ in merged)


def _merged_modes(modes) -> list:
    """The modes of extent other than 1 by local stride, merged where one continues another on both sides."""
    merged = []
    for n, ls, cs in sorted(((n, ls, cs) for n, ls, cs in modes if n != 1), key=lambda m: m[1]):
        if merged and merged[-1][1] * merged[-1][0] == ls and merged[-1][2] * merged[-1][0] == cs:
            merged[-1] = (merged[-1][0] * n, merged[-1][1], merged[-1][2])
        else:
            merged.append((n, ls, cs))
    return merged


def strided_runs(modes, base_a: int = 0) -> StridedRuns:
    """The runs of the modes `(extent, first side's stride, second side's stride)` of a
    one-to-one map that need not be dense (as `run_plan` for a copy map): modes merged where
    they continue each other on both sides, the first one the contiguous fragment when it has
    stride 1 on both, the largest of the rest the run's stride, the others enumerated. The
    first side's offsets start at `base_a`."""
    merged = _merged_modes(modes)
    fragment = 1
    if merged and merged[0][1] == 1 and merged[0][2] == 1:
        fragment = merged.pop(0)[0]
    if not merged:
        return StridedRuns([(base_a, 0)], fragment, 1, fragment, fragment)
    k = max(range(len(merged)), key=lambda j: (merged[j][0], -j))
    count, ls, cs = merged.pop(k)
    offsets = sorted((base_a + sum(i * m[1] for i, m in zip(idx, merged)),
                      sum(i * m[2] for i, m in zip(idx, merged)))
                     for idx in product(*(range(m[0]) for m in merged)))
    return StridedRuns(offsets, fragment, count, ls, cs)


def pad_fragments(inst: Instance) -> list[tuple[int, int]]:
    """(offset, size) of a pad's bytes, from its local digits."""
    modes = sorted(((ls, n) for n, ls, _ in inst.local if n != 1))
    size = 1
    while modes and modes[0][0] == size:
        size *= modes.pop(0)[1]
    return [(inst.local_base + sum(i * s for i, (s, _) in zip(idx, modes)), size)
            for idx in product(*(range(n) for _, n in modes))]


def _pad(inst: Instance) -> str:
    """A pad's name, as its part family names it (`quant_split.tail`: the pad `tail`)."""
    return "pad " + region_of(inst.family)


def _rank_bases(inst: Instance) -> list[tuple[int, int]]:
    """(canonical base, writer index) of every rank in rank order (the rank digits are a mixed
    radix, so expanding them most significant first enumerates ranks in order)."""
    ranks = [(inst.canonical_base, 0)]
    for n, _, c, replica in sorted(inst.ranks, key=lambda r: -r.rank):
        ranks = [(base + v * c, writer * n + v if replica else writer) for base, writer in ranks for v in range(n)]
    return ranks


def _sweep(pieces, size: int, what: str, family: str) -> None:
    """`pieces` ((offset, bytes, region or pad), ...) must tile [0, size) exactly; else a
    `TilingError` naming the bytes and the regions at fault."""
    flaw = intervals.flaw(pieces, size)
    if flaw is None:
        return
    a, b, before, after = flaw.start, flaw.end, flaw.before, flaw.after
    if flaw.kind == "end":
        raise TilingError(f"the {what} has {size} bytes but its regions and pads cover {a}"
                          + (f" (the last, '{before}', ends there)" if before else ""), family)
    gap = (f"bytes [{a}, {b}) belong to no region (after '{before}')" if flaw.kind == "gap" and before else
           f"bytes [{a}, {b}) belong to no region (before '{after}')" if flaw.kind == "gap" else
           f"byte {a} lies in two regions, '{before}' and '{after}'")
    raise TilingError(f"the {what} is not tiled exactly by its regions and pads: {gap}", family)


def lower_page(page, layout_id: str = "") -> tuple[CanonicalPageMapping, ...]:
    """Every rank's mapping of a page of regions, certified: each region one-to-one on both
    sides, and the regions with the pads tiling the local page and (one writer class each)
    the canonical page, by a sweep over their fragments. Each run carries its region's
    writer election (`CanonicalPageMapping.run_writers`)."""
    plans = [(r, inst, region_plan(inst, r)) for r, inst in page.regions]
    count = sum(len(p[0]) * p[2] * inst.world for _, inst, p in plans)
    count += sum(len(pad_fragments(p)) for p in page.local_pads + page.canonical_pads)
    if count > MAX_PAGE_FRAGMENTS:
        raise TilingError(f"the page has {count} fragments over all ranks, more than the "
                          f"{MAX_PAGE_FRAGMENTS} its tiling is checked on at run time", page.family)
    local, canonical = [], []
    for r, inst, (offsets, fs, nf, ls, cs) in plans:
        local += [(lo + i * ls, fs, r) for lo, _ in offsets for i in range(nf)]
        for base, writer in _rank_bases(inst):
            if writer == 0:
                canonical += [(base + co + i * cs, fs, r) for _, co in offsets for i in range(nf)]
    local += [(*f, _pad(p)) for p in page.local_pads for f in pad_fragments(p)]
    canonical += [(*f, _pad(p)) for p in page.canonical_pads for f in pad_fragments(p)]
    _sweep(local, page.local_page, "local page", page.family)
    _sweep(canonical, page.canonical_page, "canonical page", page.family)
    per_rank = None
    for _, inst, (offsets, fs, nf, ls, cs) in plans:
        writers = 1
        for n, _, _, replica in inst.ranks:
            writers *= n if replica else 1
        rows = [[(CopyRun(lo, co + base, fs, nf, ls, cs), (writers, writer)) for lo, co in offsets]
                for base, writer in _rank_bases(inst)]
        per_rank = rows if per_rank is None else [a + b for a, b in zip(per_rank, rows)]
    out = []
    tilings = tuple(Tiling(tuple(i.local), tuple(i.ranks), i.canonical_base, i.local_base) for _, i in page.regions)
    for rows in per_rank:
        rows.sort(key=lambda x: x[0].local_offset)
        runs, elect = tuple(r for r, _ in rows), tuple(w for _, w in rows)
        same = len(set(elect)) == 1
        nw, w = elect[0] if same else (1, 0)
        out.append(CanonicalPageMapping(page.canonical_page, page.local_page, runs, nw, w, page.agnostic,
                                        layout_id, () if same else elect, tilings=tilings))
    return tuple(out)


# ---- the reference's start-up check: do a configuration's runs tile both pages ------------

def _partition(pieces, size) -> str | None:
    """None when the (offset, bytes) `pieces` tile [0, size) exactly, else the first gap or overlap."""
    flaw = intervals.flaw([(lo, n, None) for lo, n in pieces], size)
    if flaw is None:
        return None
    a, b = flaw.start, flaw.end
    if flaw.kind != "end":
        return f"bytes [{a}, {b}) are {'not covered' if flaw.kind == 'gap' else 'covered twice'}"
    return f"bytes [{a}, {size}) are not covered" if a < size else f"runs reach byte {a} past the page end {size}"


def tiling_errors(maps: tuple[CanonicalPageMapping, ...], local_pads=(), canonical_pads=()) -> list[str]:
    """The reference's start-up check, on intervals of the runs (and of a page's pads, which
    are never copied: `(offset, size)` intervals)."""
    errors = []
    for rank, m in enumerate(maps):
        why = _partition([(lo, n) for r in m.runs for lo, _, n in r.triples()] + list(local_pads),
                         m.local_page_size_bytes)
        if why:
            errors.append(f"rank {rank}, local page: {why}")
    nw = 1
    for m in maps:
        for n, _ in m.elections:
            nw = lcm(nw, n)  # every combination of writer turns comes round within nw blocks
    for block in range(nw):
        stored = [(co, n) for m in maps for r in m.written_runs(block) for _, co, n in r.triples()]
        why = _partition(stored + list(canonical_pads), maps[0].canonical_page_size_bytes)
        if why:
            errors.append(f"block {block}, canonical page: {why}")
    return errors


def pads(inst) -> tuple[list, list]:
    """The local and canonical pad intervals of a page of regions (none for one box)."""
    return ([f for p in getattr(inst, "local_pads", ()) for f in pad_fragments(p)],
            [f for p in getattr(inst, "canonical_pads", ()) for f in pad_fragments(p)])

"""Converting canonical pages between configurations of another cp.

Under cp context-parallel ranks a canonical page covers `block_size * cp` tokens, so two
configurations of one family with another cp read pages of two formats: one page of the
larger holds `k` pages of the smaller, consecutive in the token sequence. The canonical
layout is the same layout at both sizes, with only the extent of the family's `sequence`
index (its tokens) differing; so the conversion is a layout composition, in the algebra:

    big page  --A^-1-->  (element byte, indices..., token split as (t_small, page j))
              --B----->  byte of the group of k small pages (page j at j * small page)

with `A` and `B` the two canonical layouts over that shared index space. The result is a
`CanonicalPageMapping` whose local page is one big page and whose canonical page is the
group of `k` small pages: copy plans execute it as they execute any mapping.

This module composes the runs from two families of boxes (`Box`: a canonical layout's
indices, extents and strides at some sizes). `compiled_boxes` reads them from a compiled
family (`Instance.canonical_form`: the numbers the runtime executes and the page format id is
made of), so `page_conversion` imports no parser, sympy or Z3. What a conversion rests on,
proved offline for all sizes, is looked up as data by `plans.conversion`; `verify.conversions`
also checks the boxes against the spec's own reading at the pair's sizes. Copies execute a
conversion (`copy.direct.convert`).
"""
from __future__ import annotations

from typing import NamedTuple

from ..algebra import intervals
from ..algebra.ops import NotCompact, coalesce, invert_and_compose
from ..errors import LayoutalgError
from ..algebra.layout import Layout
from ..runtime.lower import run_plan
from ..mapping import CanonicalPageMapping, CopyRun, PageConversion


class Box(NamedTuple):
    """One canonical box (the page of a layout of one box, or one region of a page) at some sizes."""

    names: tuple       # its indices
    ext: dict          # index -> extent
    strides: dict      # index -> byte stride
    element: int       # bytes an element
    base: int          # byte of index 0 in the page (0 for a layout of one box)
    page: int          # bytes of the whole canonical page


def compiled_boxes(cf, sizes: dict, names: dict) -> list[Box]:
    """The canonical boxes of compiled family `cf` (a `CompiledFamily` or a `CompiledPage`) at
    `sizes`: one box, or one per data region of a page, in the order of its parts. `names`
    gives each part's canonical index names in the layout's order (key '' for a family of one
    box, else the region's name): the compiled form holds numbers only. Raises
    `LayoutalgError` where the family does not apply at these sizes."""
    from ..compile.compiled import GuardFailed
    bad = next(((n, v) for n, v in dict(sizes).items() if type(v) is not int), None)
    if bad is not None:
        raise LayoutalgError(f"{cf.name}: size {bad[0]} = {bad[1]!r} is not an integer")
    try:
        inst = cf.evaluate(dict(sizes))
    except (GuardFailed, KeyError) as err:
        raise LayoutalgError(f"{cf.name} does not apply at {_shown(sizes)}: {err}") from None
    parts = inst.regions if hasattr(inst, "regions") else (("", inst),)
    out = []
    for region, part in parts:
        base, element, dims = part.canonical_form
        idx = names.get(region)
        if idx is None or len(idx) != len(dims):
            raise LayoutalgError(f"{cf.name}: the index names of its canonical layout{_in(region)} are not those the "
                                 f"conversion's record gives ({idx}): prove the family again")
        out.append(Box(tuple(idx), {n: e for n, (e, _) in zip(idx, dims)},
                       {n: element * k for n, (_, k) in zip(idx, dims)}, element, element * base,
                       inst.canonical_page))
    if not hasattr(inst, "regions") and out[0].base != 0:
        raise LayoutalgError(f"{cf.name}: the canonical layout starts at byte {out[0].base}, not 0")
    return out


def page_conversion(cf, big: dict, small: dict, token: str, names: dict) -> PageConversion:
    """The conversion from canonical pages of `big` sizes to those of `small` sizes (fewer
    tokens a page) of compiled family `cf`, joined along its `sequence` index `token`, its
    boxes from the compiled family (`compiled_boxes`). The algebra only: the proofs it rests on
    are the caller's (`plans.conversion.conversion` looks them up). Raises `LayoutalgError`
    where the two pages are not parts of one another."""
    from ..runtime.formats import format_id, names_data
    parts = [f"{cf.name}.{region}" for region, _ in cf.parts] if hasattr(cf, "parts") else [cf.name]
    boxes_b, boxes_s = compiled_boxes(cf, big, names), compiled_boxes(cf, small, names)
    k = pages_joined(cf.name, parts, boxes_b, boxes_s, token)
    m = page_runs(cf.name, parts, boxes_b, boxes_s, token, k)
    fmt = [format_id(cf.layout_id, inst, names_data(inst), dict(sizes))
           for sizes in (big, small) for inst in [cf.evaluate(dict(sizes))]]
    return PageConversion(k, token, m, boxes_b[0].page, boxes_s[0].page, *fmt)


def _in(region: str) -> str:
    return f" (region '{region}')" if region else ""


def _shown(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def pages_joined(family: str, parts: list, boxes_b: list, boxes_s: list, tok: str) -> int:
    """How many small pages one big page joins along the sequence index `tok`, the same for
    every region. Raises `LayoutalgError` where the two pages are not parts of one another.

    Pre-conditions: `boxes_b[i]` and `boxes_s[i]` are region `parts[i]` at the big and the small
    sizes (a family of one box has `parts == [family]`).
    """
    ks = {_parts_in(family if part == family else f"{family}: region '{part.split('.')[-1]}'", b, sm, tok)
          for part, b, sm in zip(parts, boxes_b, boxes_s)}
    if len(ks) != 1:
        raise LayoutalgError(f"{family}: its regions join {sorted(ks)} small pages a big one: a big page is not "
                             f"one whole number of small pages")
    return ks.pop()


def page_runs(family: str, parts: list, boxes_b: list, boxes_s: list, tok: str, k: int) -> CanonicalPageMapping:
    """The mapping from one big page (its local page) onto the group of `k` small pages (its
    canonical page), region by region for a page of regions.

    Pre-conditions: `k == pages_joined(family, parts, boxes_b, boxes_s, tok)`; each box an
    affine layout of its indices at its sizes.
    Post-conditions: every byte of a data region of the big page is copied exactly once, to the
    byte of the same index in the small page holding its token (pads are not copied).
    """
    if parts == [family]:
        runs = _compact_runs(family, _modes(boxes_b[0], boxes_s[0], tok, k))
    else:
        runs = _region_runs(family, parts, boxes_b, boxes_s, tok, k)
    return CanonicalPageMapping(k * boxes_s[0].page, boxes_b[0].page, runs, 1, 0, False)

def _parts_in(what: str, b: Box, sm: Box, tok: str) -> int:
    """How many small boxes one big box joins along `tok` (a `LayoutalgError` where it joins none)."""
    if b.names != sm.names or b.element != sm.element:
        raise LayoutalgError(f"{what}: the two canonical layouts have other indices or elements")
    if tok not in b.names:
        raise LayoutalgError(f"{what}: `sequence {tok}` names no index of its canonical layout ({', '.join(b.names)})")
    differ = [n for n in b.names if b.ext[n] != sm.ext[n]]
    if differ != [tok]:
        shown = "nothing" if not differ else ", ".join(differ)
        raise LayoutalgError(f"{what}: the two canonical pages differ in {shown}; pages of another cp differ in "
                             f"the sequence index '{tok}' alone")
    if sm.ext[tok] < 1 or b.ext[tok] % sm.ext[tok]:
        raise LayoutalgError(f"{what}: the larger page's {b.ext[tok]} values of '{tok}' are not a multiple of "
                             f"{sm.ext[tok]}, the smaller page's: a big page is not a whole number of small pages")
    return b.ext[tok] // sm.ext[tok]


def _modes(b: Box, sm: Box, tok: str, k: int) -> list[tuple[int, int, int]]:
    """(extent, big page stride, small group stride) of one box: the token split into its
    place in a small page and the small page it lies in (page j at j * small page)."""
    modes = [(b.element, 1, 1)]
    for n in b.names:
        if n == tok:
            modes += [(sm.ext[tok], b.strides[tok], sm.strides[tok]), (k, sm.ext[tok] * b.strides[tok], sm.page)]
        else:
            modes.append((b.ext[n], b.strides[n], sm.strides[n]))
    return modes


def _compact_runs(family: str, modes) -> tuple[CopyRun, ...]:
    """A layout of one box: the big page is its box, so the conversion is `B o A^-1` in the algebra."""
    A = Layout(tuple(n for n, _, _ in modes), tuple(s for _, s, _ in modes))
    B = Layout(tuple(n for n, _, _ in modes), tuple(s for _, _, s in modes))
    try:
        C = coalesce(invert_and_compose(B, A))
    except NotCompact as err:
        raise LayoutalgError(f"{family}: the big canonical page is not compact in its indices: {err}") from None
    offsets, frag, count, ls, cs = run_plan(C)
    return tuple(CopyRun(lo, co, frag, count, ls, cs) for lo, co in offsets)


def _region_runs(family: str, parts, boxes_b, boxes_s, tok: str, k: int) -> tuple[CopyRun, ...]:
    """A page of regions: each region's box one-to-one on both sides, its runs from its modes,
    and no byte of either page in two regions (a sweep over the fragments)."""
    from ..runtime.lower import TilingError, check_injective, strided_runs
    runs = []
    for part, b, sm in zip(parts, boxes_b, boxes_s):
        modes = _modes(b, sm, tok, k)
        try:
            check_injective([(n, ls) for n, ls, _ in modes], f"big canonical page's region '{part}'", family)
            check_injective([(n, cs) for n, _, cs in modes], f"small canonical pages' region '{part}'", family)
        except TilingError as err:
            raise LayoutalgError(str(err)) from None
        if any(n == 0 for n, _, _ in modes):
            continue  # an empty region
        offsets, frag, count, ls, cs = strided_runs(modes, b.base)
        runs += [CopyRun(lo, co + sm.base, frag, count, ls, cs) for lo, co in offsets]
    for side, page in ((0, boxes_b[0].page), (1, k * boxes_s[0].page)):
        flaw = intervals.flaw([(t[side], t[2], None) for r in runs for t in r.triples()], page, gaps=True)
        if flaw is not None:
            which = "big" if side == 0 else "small"
            raise LayoutalgError(f"{family}: region boxes of the {which} canonical pages "
                                 + (f"overlap at byte {flaw.start}" if flaw.kind == "overlap" else
                                    f"reach byte {flaw.start}, past the {page}-byte page"))
    return tuple(sorted(runs))



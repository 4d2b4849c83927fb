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

Each layout is read from the spec (`interpret`); its strides are probed at unit indices,
and Z3 proves, at these sizes, that the spec's offset is exactly that affine function on
the whole index box, so the algebra composes what the spec says. The runtime never
imports this module.
"""
from __future__ import annotations

from typing import NamedTuple

from ..algebra.ops import NotCompact, coalesce, invert_and_compose
from ..errors import LayoutalgError
from ..algebra.layout import Layout
from ..runtime.lower import run_plan
from ..mapping import CanonicalPageMapping, CopyRun, PageConversion  # noqa: F401 - PageConversion: its record


class Box(NamedTuple):
    """One canonical box (the page of a layout of one box, or one region of a page) at some sizes."""

    names: tuple       # its indices
    ext: dict          # index -> extent
    strides: dict      # index -> byte stride
    element: int       # bytes an element
    base: int          # byte of index 0 in the page (0 for a layout of one box)
    page: int          # bytes of the whole canonical page


def canonical_boxes(lib, family: str, sizes: dict) -> list[Box]:
    """The family's canonical layout at `sizes`: one box, or one per data region of a page
    (pads hold no data and are never converted), each proved affine by Z3 at these sizes
    (a `LayoutalgError` otherwise)."""
    bad = next(((n, v) for n, v in dict(sizes).items() if type(v) is not int), None)
    if bad is not None:
        raise LayoutalgError(f"{family}: size {bad[0]} = {bad[1]!r} is not an integer")
    if family not in lib.families or lib.family_def(family).page is not None:
        raise LayoutalgError(f"{family}: not a family of canonical pages in this library")
    boxes = [_box(lib, part, sizes, family) for part in lib.parts_of(family)]
    if lib.parts_of(family) == [family] and boxes[0].base != 0:
        raise LayoutalgError(f"{family}: the canonical layout starts at byte {boxes[0].base}, not 0")
    return boxes


def _box(lib, part: str, sizes: dict, family: str) -> Box:
    from ..dsl.interpret import Reading
    try:
        r = Reading(lib, part, dict(sizes))
        if not all(ok is True for ok, _ in r.cases + r.guards):
            raise LayoutalgError(f"{family} does not apply at {_shown(sizes)}: its cases or guards do not hold")
    except (ArithmeticError, LookupError) as e:
        raise LayoutalgError(f"{family} cannot be read at {_shown(sizes)}: {e}") from None
    ldef, bound = r.layout("canonical")
    ext = r.extents("canonical")
    names = tuple(ext)
    e = r.expr(ldef.element, bound) if ldef.element is not None else 1
    zero = {n: 0 for n in names}
    base = r.offset("canonical", zero)
    strides = {n: r.offset("canonical", {**zero, n: 1}) - base for n in names}
    _prove_affine(lib, part, sizes, names, ext, strides, base)
    return Box(names, ext, strides, e, base, r.page("canonical"))


def _shown(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _prove_affine(lib, family, sizes, names, ext, strides, base) -> None:
    import z3
    from ..dsl.interpret import Reading
    from ..verify.prove.z3ops import Z3Ops, solver
    ops = Z3Ops("conv.")
    r = Reading(lib, family, dict(sizes), ops)
    idx = {n: z3.Int(f"conv.{n}") for n in names}
    off = r.offset("canonical", idx)
    s = solver(20_000_000)
    s.add(*[z3.And(v >= 0, v < ext[n]) for n, v in idx.items()], *ops.side)
    s.add(off != base + sum(strides[n] * v for n, v in idx.items()))
    if s.check() != z3.unsat:
        raise LayoutalgError(f"{family}: its canonical layout is not affine in its indices at these sizes "
                             f"(or Z3 could not show it): pages of two cp cannot be converted by strides")


def conversion(lib, family: str, big: dict, small: dict) -> PageConversion:
    """The conversion from canonical pages of `big` sizes to those of `small` sizes (fewer
    tokens a page). Raises `LayoutalgError` saying why two formats do not convert.

    A page of regions converts region by region: each data region of the big page is the
    same region of its `k` small pages joined along the `sequence` index; pads are not
    copied. The family's `sequence` claim (canonical token t is the token's place in the
    sequence, the grid's `token(t)`) is proved by Z3 at both sizes first: joining pages
    along the index keeps the sequence's order only where it holds."""
    seq = lib.family_def(family).sequence if family in lib.families else None
    boxes_b, boxes_s = canonical_boxes(lib, family, big), canonical_boxes(lib, family, small)
    if seq is None:
        raise LayoutalgError(f"{family} declares no `sequence` index: its pages under two configurations are not "
                             f"parts of one another (a page of another cp joins along the tokens it names)")
    tok, ks, parts = seq.id, set(), lib.parts_of(family)
    for part, b, sm in zip(parts, boxes_b, boxes_s):
        ks.add(_parts_in(family if part == family else f"{family}: region '{part.split('.')[-1]}'", b, sm, tok))
    if len(ks) != 1:
        raise LayoutalgError(f"{family}: its regions join {sorted(ks)} small pages a big one: a big page is not "
                             f"one whole number of small pages")
    k = ks.pop()
    from ..verify.prove.reshard import sequence_unshown
    from ..verify.prove.runner import Budgets
    why = sequence_unshown(lib, family, big, small, Budgets.of().config, ("big page's", "small page's"))
    if why:  # the conversion joins pages by the canonical token index: the sequence's order only where this holds
        raise LayoutalgError(f"{family}: not converted: {why}")
    from ..verify.prove.meaning import unshown
    why = unshown(lib, family, (big, small), Budgets.of().config, ("big page's", "small page's"))
    if why:  # each canonical index one engine element at both: what a page of one cp means at the other
        raise LayoutalgError(f"{family}: not converted: {why}")
    page_b, page_s = boxes_b[0].page, boxes_s[0].page
    if parts == [family]:
        runs = _compact_runs(family, _modes(boxes_b[0], boxes_s[0], tok, k))
    else:
        runs = _region_runs(family, parts, boxes_b, boxes_s, tok, k)
    m = CanonicalPageMapping(k * page_s, page_b, runs, 1, 0, False)
    from ..compile.codegen import compile_named
    cf = compile_named(lib, family)  # once for both formats
    conv = PageConversion(k, tok, m, page_b, page_s, _format(cf, family, big), _format(cf, family, small))
    _keeps_elements(lib, family, big, small, conv)
    return conv


def _keeps_elements(lib, family: str, big: dict, small: dict, conv: PageConversion) -> None:
    """Refuses a conversion that does not give every engine element of a big page back in its small
    pages, at these sizes (`oracle.unkept`: each byte named by the engine's element, read from the
    grid's placements, never from the canonical layouts the conversion was made from). A family
    whose shard map places an element one way under one cp and another way under the other tiles
    at both, and its `sequence` claim holds. `one-format` (Z3, at both sizes) shows each page
    means what a single rank holding it reads; this shows the two single-rank readings, pages of
    two block sizes, are parts of one another (no proof does yet), through the runs the lowering
    emits, on pages of up to `oracle.MAX_CHECKED` bytes."""
    from ..compile.compiled import GuardFailed
    from ..runtime.lower import TilingError
    from ..verify.oracle import unkept
    try:
        why = unkept(lib, family, big, small, conv)
    except (LookupError, ValueError, GuardFailed, TilingError) as e:
        raise LayoutalgError(f"{family}: not converted: its pages' elements could not be read at these sizes: "
                             f"{e}") from None
    if why:
        raise LayoutalgError(f"{family}: not converted: {why}")


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
        raise LayoutalgError(f"{what}: {b.ext[tok]} {tok} a page is not a multiple of {sm.ext[tok]}: a big page is "
                             f"not a whole number of small pages")
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
    from ..runtime.lower import TilingError, _injective, strided_runs
    runs = []
    for part, b, sm in zip(parts, boxes_b, boxes_s):
        modes = _modes(b, sm, tok, k)
        try:
            _injective([(n, ls) for n, ls, _ in modes], f"big canonical page's region '{part}'", family)
            _injective([(n, cs) for n, _, cs in modes], f"small canonical pages' region '{part}'", family)
        except TilingError as err:
            raise LayoutalgError(str(err)) from None
        if any(n == 0 for n, _, _ in modes):
            continue  # an empty region
        offsets, frag, count, ls, cs = strided_runs(modes, b.base)
        runs += [CopyRun(lo, co + sm.base, frag, count, ls, cs) for lo, co in offsets]
    for side, page in ((0, boxes_b[0].page), (1, k * boxes_s[0].page)):
        at = 0
        for lo, n in sorted((t[side], t[2]) for r in runs for t in r.triples()):
            if lo < at or lo + n > page:
                raise LayoutalgError(f"{family}: region boxes of the {'big' if side == 0 else 'small'} canonical "
                                     f"pages overlap or leave the page at byte {lo}")
            at = lo + n
    return tuple(sorted(runs))


def _format(cf, family: str, sizes: dict) -> str:
    """The page format (without element types) a group of these sizes has at run time."""
    from ..compile.compiled import GuardFailed
    from ..runtime.derive import format_id, names_data
    try:
        inst = cf.evaluate(dict(sizes))
    except (GuardFailed, KeyError) as err:
        raise LayoutalgError(f"{family} does not hold pages at {_shown(sizes)}: {err}") from None
    return format_id(cf.layout_id, inst, names_data(inst), dict(sizes))


def convert(conv: PageConversion, big, small, to_small: bool) -> None:
    """Copy between `big` (G, big page) and `small` (G * k, small page) uint8 page tensors:
    big page g is small pages k*g .. k*g + k - 1 (consecutive in the token sequence)."""
    import torch
    from ..copy.executor import plan
    if not isinstance(big, torch.Tensor) or not isinstance(small, torch.Tensor):
        raise LayoutalgError(f"convert: big and small must be uint8 torch tensors of pages, got "
                             f"{type(big).__name__} and {type(small).__name__}")
    groups = big.shape[0] if big.dim() == 2 else -1
    if big.dim() != 2 or small.dim() != 2 or big.dtype != torch.uint8 or small.dtype != torch.uint8 or \
            big.shape[1] != conv.big_page or small.shape[1] != conv.small_page or \
            small.shape[0] != conv.k * groups or not small.is_contiguous():
        raise LayoutalgError(f"convert: expected (G, {conv.big_page}) big and contiguous (G * {conv.k}, "
                             f"{conv.small_page}) small uint8 pages, got {tuple(big.shape)} {big.dtype} and "
                             f"{tuple(small.shape)} {small.dtype}")
    grouped, ids = small.view(groups, conv.k * conv.small_page), torch.arange(groups)
    p = plan(conv.mapping, big)
    if to_small:
        p.store(big, ids, grouped, ids)   # one writer: every byte of every group
    else:
        p.load(grouped, ids, big, ids)

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

from .algebra import NotCompact, coalesce, invert_and_compose
from .errors import LayoutalgError
from .layout import Layout
from .lower import run_plan
from .mapping import CanonicalPageMapping, CopyRun


class PageConversion(NamedTuple):
    """`mapping` sends each byte of one big page to its byte in the group of `k` small pages."""

    k: int
    token: str              # the family's `sequence` index, the one whose extent differs
    mapping: CanonicalPageMapping
    big_page: int
    small_page: int
    big_format: str = ""    # the page formats it converts between (`runtime.form_part` of a mapping's
    small_format: str = ""  # format id): plans across another cp use it only between groups of those


def canonical_layout(lib, family: str, sizes: dict) -> tuple[tuple[str, ...], dict, dict, int, int]:
    """(index names, extents, byte strides, element bytes, page bytes) of the family's
    canonical layout at `sizes`, its affinity proved by Z3 (a `LayoutalgError` otherwise)."""
    from .interpret import Reading
    bad = next(((n, v) for n, v in dict(sizes).items() if type(v) is not int), None)
    if bad is not None:
        raise LayoutalgError(f"{family}: size {bad[0]} = {bad[1]!r} is not an integer")
    if family not in lib.families or lib.parts_of(family) != [family]:
        raise LayoutalgError(f"{family}: not a family of one canonical layout in this library (pages of regions "
                             f"do not convert yet)")
    try:
        r = Reading(lib, family, dict(sizes))
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
    if base != 0:
        raise LayoutalgError(f"{family}: the canonical layout starts at byte {base}, not 0")
    _prove_affine(lib, family, sizes, names, ext, strides)
    return names, ext, strides, e, r.page("canonical")


def _shown(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _prove_affine(lib, family, sizes, names, ext, strides) -> None:
    import z3
    from .interpret import Reading
    from .prove.z3ops import Z3Ops
    ops = Z3Ops("conv.")
    r = Reading(lib, family, dict(sizes), ops)
    idx = {n: z3.Int(f"conv.{n}") for n in names}
    off = r.offset("canonical", idx)
    s = z3.Solver()
    s.set("rlimit", 20_000_000)
    s.add(*[z3.And(v >= 0, v < ext[n]) for n, v in idx.items()], *ops.side)
    s.add(off != sum(strides[n] * v for n, v in idx.items()))
    if s.check() != z3.unsat:
        raise LayoutalgError(f"{family}: its canonical layout is not affine in its indices at these sizes "
                             f"(or Z3 could not show it): pages of two cp cannot be converted by strides")


def conversion(lib, family: str, big: dict, small: dict) -> PageConversion:
    """The conversion from canonical pages of `big` sizes to those of `small` sizes (fewer
    tokens a page). Raises `LayoutalgError` saying why two formats do not convert."""
    nb, eb, sb, elem_b, page_b = canonical_layout(lib, family, big)
    ns, es, ss, elem_s, page_s = canonical_layout(lib, family, small)
    if nb != ns or elem_b != elem_s:
        raise LayoutalgError(f"{family}: the two canonical layouts have other indices or elements")
    seq = lib.family_def(family).sequence
    if seq is None:
        raise LayoutalgError(f"{family} declares no `sequence` index: its pages under two configurations are not "
                             f"parts of one another (a page of another cp joins along the tokens it names)")
    if seq.id not in nb:
        raise LayoutalgError(f"{family}: `sequence {seq.id}` names no index of its canonical layout "
                             f"({', '.join(nb)})")
    differ = [n for n in nb if eb[n] != es[n]]
    if differ != [seq.id]:
        what = "nothing" if not differ else ", ".join(differ)
        raise LayoutalgError(f"{family}: the two canonical pages differ in {what}; pages of another cp differ in "
                             f"the sequence index '{seq.id}' alone")
    tok = seq.id
    if es[tok] < 1 or eb[tok] % es[tok]:
        raise LayoutalgError(f"{family}: {eb[tok]} {tok} a page is not a multiple of {es[tok]}: a big page is "
                             f"not a whole number of small pages")
    k = eb[tok] // es[tok]
    modes_a, modes_b = [(elem_b, 1)], [(elem_s, 1)]
    for n in nb:
        if n == tok:
            modes_a += [(es[tok], sb[tok]), (k, es[tok] * sb[tok])]
            modes_b += [(es[tok], ss[tok]), (k, page_s)]
        else:
            modes_a.append((eb[n], sb[n]))
            modes_b.append((es[n], ss[n]))
    A = Layout(tuple(n for n, _ in modes_a), tuple(s for _, s in modes_a))
    B = Layout(tuple(n for n, _ in modes_b), tuple(s for _, s in modes_b))
    try:
        C = coalesce(invert_and_compose(B, A))
    except NotCompact as err:
        raise LayoutalgError(f"{family}: the big canonical page is not compact in its indices: {err}") from None
    offsets, frag, count, ls, cs = run_plan(C)
    runs = tuple(CopyRun(lo, co, frag, count, ls, cs) for lo, co in offsets)
    m = CanonicalPageMapping(k * page_s, page_b, runs, 1, 0, False)
    from .compile import compile_named
    cf = compile_named(lib, family)  # once for both formats
    return PageConversion(k, tok, m, page_b, page_s, _format(cf, family, big), _format(cf, family, small))


def _format(cf, family: str, sizes: dict) -> str:
    """The page format (without element types) a group of these sizes has at run time."""
    from .compiled import GuardFailed
    from .runtime import format_id
    try:
        inst = cf.evaluate(dict(sizes))
    except (GuardFailed, KeyError) as err:
        raise LayoutalgError(f"{family} does not hold pages at {_shown(sizes)}: {err}") from None
    return format_id(cf.layout_id, inst, cf.claims_agnostic, dict(sizes))


def spec_coordinates(lib, family: str, big: dict, small: dict, k: int, token: str):
    """(k, small page) int64: the big page byte that byte `c` of part `j` of a big page holds,
    by enumerating the spec's own reading of both canonical layouts (no conversion run is
    used: this is what a conversion is checked against)."""
    import itertools

    import torch
    from .interpret import Reading
    rb, rs = Reading(lib, family, dict(big)), Reading(lib, family, dict(small))
    ext = rs.extents("canonical")
    ldef, bound = rs.layout("canonical")
    e = rs.expr(ldef.element, bound) if ldef.element is not None else 1
    out = torch.full((k, rs.page("canonical")), -1, dtype=torch.int64)
    for values in itertools.product(*(range(ext[n]) for n in ext)):
        idx = dict(zip(ext, values))
        at = rs.offset("canonical", idx)
        for j in range(k):
            there = rb.offset("canonical", {**idx, token: idx[token] + j * ext[token]})
            out[j, at:at + e] = torch.arange(there, there + e)
    return out


def convert(conv: PageConversion, big, small, to_small: bool) -> None:
    """Copy between `big` (G, big page) and `small` (G * k, small page) uint8 page tensors:
    big page g is small pages k*g .. k*g + k - 1 (consecutive in the token sequence)."""
    import torch
    from .copy import plan
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

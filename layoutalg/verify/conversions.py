"""Page conversions between configurations of another cp, made where they are proved: the one
place a `PageConversion` is built.

Each canonical layout is read from the spec (`dsl.interpret`); its strides are probed at unit
indices, and Z3 proves, at these sizes, that the spec's offset is exactly that affine function
on the whole index box, so the algebra (`plans.pageformat.page_runs`) composes what the spec
says. The family's `sequence` claim and its one format are proved at both sizes, and the
engine-level oracle (`oracle.unkept`) checks that the runs give every element back.
"""
from __future__ import annotations

import z3

from ..compile.codegen import compile_named
from ..compile.compiled import GuardFailed
from ..dsl.interpret import Reading
from ..errors import LayoutalgError
from ..mapping import PageConversion
from ..plans.pageformat import Box, page_runs, pages_joined
from ..runtime.formats import format_id, names_data
from ..runtime.lower import TilingError
from .oracle import unkept
from .prove import meaning
from .prove.reshard import sequence_unshown
from .prove.runner import Budgets
from .prove.z3ops import Z3Ops, solver


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
    tok, parts = seq.id, lib.parts_of(family)
    k = pages_joined(family, parts, boxes_b, boxes_s, tok)
    why = sequence_unshown(lib, family, big, small, Budgets.of().config, ("big page's", "small page's"))
    if why:  # the conversion joins pages by the canonical token index: the sequence's order only where this holds
        raise LayoutalgError(f"{family}: not converted: {why}")
    why = meaning.unshown(lib, family, (big, small), Budgets.of().config, ("big page's", "small page's"))
    if why:  # each canonical index one engine element at both: what a page of one cp means at the other
        raise LayoutalgError(f"{family}: not converted: {why}")
    m = page_runs(family, parts, boxes_b, boxes_s, tok, k)
    cf = compile_named(lib, family)  # once for both formats
    conv = PageConversion(k, tok, m, boxes_b[0].page, boxes_s[0].page, _format(cf, family, big),
                          _format(cf, family, small))
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
    try:
        why = unkept(lib, family, big, small, conv)
    except (LookupError, ValueError, GuardFailed, TilingError) as e:
        raise LayoutalgError(f"{family}: not converted: its pages' elements could not be read at these sizes: "
                             f"{e}") from None
    if why:
        raise LayoutalgError(f"{family}: not converted: {why}")


def _format(cf, family: str, sizes: dict) -> str:
    """The page format (without element types) a group of these sizes has at run time."""
    try:
        inst = cf.evaluate(dict(sizes))
    except (GuardFailed, KeyError) as err:
        raise LayoutalgError(f"{family} does not hold pages at {_shown(sizes)}: {err}") from None
    return format_id(cf.layout_id, inst, names_data(inst), dict(sizes))

"""Page conversions between configurations of another cp, proved offline.

`record` proves for all sizes what a conversion rests on (`plans.conversion.REQUIRED`, cached
as the library's proofs are) and keeps it as data the runtime reads (`plans.conversion.facts`);
`layoutalg prove` calls it for every family it proves.

`conversion` is the offline entry (the CLI's, the tests'): the runtime's conversion
(`plans.pageformat.page_conversion`, from the compiled family) checked at the pair's sizes
against the spec. Each canonical layout is read from the spec (`dsl.interpret`); its strides
are probed at unit indices, Z3 proves at these sizes that the spec's offset is exactly that
affine function on the whole index box, and the compiled family's boxes must be those. The
family's `sequence` claim and its one format are proved at both sizes, and the engine-level
oracle (`oracle.unkept`) checks that the runs give every element back.
"""
from __future__ import annotations

import z3

from ..verdicts import Check, Reason, Verdict
from ..compile.codegen import compile_named
from ..compile.compiled import GuardFailed
from ..dsl.interpret import Reading
from ..errors import LayoutalgError
from ..mapping import PageConversion
from ..plans import conversion as data
from ..plans.pageformat import Box, compiled_boxes, page_conversion, pages_joined
from ..runtime.lower import TilingError
from .oracle import unkept
from .prove import meaning
from .prove.reshard import sequence_unshown
from .prove.runner import Budgets
from .prove.z3ops import Z3Ops, bare_false, solver


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
    e = r.element(ldef, bound)
    zero = {n: 0 for n in names}
    base = r.offset("canonical", zero)
    strides = {n: r.offset("canonical", {**zero, n: 1}) - base for n in names}
    _prove_affine(lib, part, sizes, names, ext, strides, base, r.path)
    return Box(names, ext, strides, e, base, r.page("canonical"))


def _shown(sizes: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _prove_affine(lib, family, sizes, names, ext, strides, base, path: tuple) -> None:
    """The canonical layout at `sizes` is `base` plus `strides` at every index of its box (Z3),
    read on the case path the numbers take (`path`): no other path's divisions among its side
    conditions, and none that is a bare false (a division by 0), which would make the query
    unsat with nothing shown."""
    ops = Z3Ops("conv.")
    r = Reading(lib, family, dict(sizes), ops, path)
    idx = {n: z3.Int(f"conv.{n}") for n in names}
    off = r.offset("canonical", idx)
    if any(bare_false(c) for c in ops.side):
        raise LayoutalgError(f"{family}: its canonical layout divides by 0 at these sizes: pages of two cp cannot be "
                             f"converted by strides")
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
    cf = compile_named(lib, family)
    names = _names(lib, family)
    for sizes, spec_boxes in ((big, boxes_b), (small, boxes_s)):
        if compiled_boxes(cf, sizes, names) != spec_boxes:  # the runtime's numbers, against the spec's reading
            raise LayoutalgError(f"{family}: the compiled canonical layout is not the spec's at {_shown(sizes)}: "
                                 f"its conversion could not be made at run time")
    conv = page_conversion(cf, big, small, tok, names)
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


def _names(lib, family: str) -> dict:
    """Each part's canonical index names ('' for a family of one box, else the region), one
    tuple in every case of the grid (a `LayoutalgError` otherwise)."""
    from ..ir.family import resolve
    out = {}
    for part in lib.parts_of(family):
        seen = {tuple(v.canonical.indices) for v in resolve(lib, part).variants}
        if len(seen) != 1:
            raise LayoutalgError(f"{part}: its grid's cases give its canonical layout other indices "
                                 f"({' / '.join(map(', '.join, sorted(seen)))}): pages of two cp are not converted")
        out["" if part == family else lib.parts[part].shard.region] = seen.pop()
    return out


def record(lib, family: str, rlimit: int | None = None, table: list[dict] | None = None) -> Reason | None:
    """Prove for all sizes what `family`'s page conversions rest on (`data.REQUIRED` in every
    data region: from `table`, the rows of `family`'s table where the caller has just proved them
    from these bytes, else `layoutalg prove`'s cached table where it holds the row, else proved
    and cached a row at a time, `store.row`) and keep the record the runtime reads
    (`plans.conversion.facts`). Returns None where it was kept, else why not (a family without
    `sequence` has no conversions: nothing is kept)."""
    from .prove import RLIMIT, store
    from .prove.runner import Budgets, one_format, prove_obligation
    from ..ir.family import resolve
    rlimit = rlimit or RLIMIT
    fdef = lib.family_def(family) if family in lib.families else None
    if fdef is None or fdef.page is not None or fdef.sequence is None:
        return Reason(Check.SEQUENCE, "no family of canonical pages with a `sequence` index").by(family)
    try:
        names = _names(lib, family)
    except LayoutalgError as e:
        return Reason(Check.FORMAT, str(e), family=family)
    files = set(store.dependencies(lib, family))
    parsed = {m.path: m.digest for m in lib.modules}  # the bytes proved are those `lib` was parsed from
    changed = _changed(files, parsed)
    if changed:
        return Reason(Check.STALE, changed, family=family)
    before = {p: parsed[p] for p in files}
    if table is None:  # (`prove`'s worker gives the rows it has just proved of these bytes)
        table = store.read(store.proof_key(lib, family, rlimit)) or []
    budgets = Budgets.of(rlimit)
    provers = {"sequence-order": lambda part: prove_obligation(lib, part, "sequence-order", {}, budgets),
               "one-format": lambda part: one_format(lib, part, budgets),
               "digits-match-spec": lambda part: prove_obligation(lib, part, "digits-match-spec", {}, budgets,
                                                                  fam=resolve(lib, part))}
    rows, why = [], []
    for part in lib.parts_of(family):
        region = "" if part == family else lib.parts[part].shard.region
        files |= store.dependencies(lib, part)
        for name in data.REQUIRED:
            hit = next((r for r in table if r["family"] == part and r["obligation"] == name), None)
            r = store.Row(**hit) if hit else store.row(lib, part, name, rlimit, lambda: provers[name](part))
            if r.status == Verdict.PROVED and r.method.startswith(data.ALL_SIZES):
                rows.append((name, region, r.method))
            else:
                why.append(f"{name}{f' ({region})' if region else ''}: {r.status}, {r.detail or r.method}")
    if why:
        return Reason(Check.UNPROVED, "its page conversions are not proved for all sizes: " + "; ".join(why)).by(family)
    changed = _changed(files, parsed)  # (the proof key re-reads the files: an edit meanwhile keys the old proof)
    if changed:
        return Reason(Check.STALE, changed, family=family)
    before.update({p: parsed[p] for p in files if p not in before})
    data.write(family, fdef.span.file, compile_named(lib, family).layout_id, fdef.sequence.id, names, rows,
               tuple(before.items()))
    return None


def _changed(files, parsed: dict) -> str:
    """'' where every file is on disk as the library parsed it, else which is not: a record is
    made only of the bytes its proofs read."""
    moved = sorted(p for p in files if parsed.get(p) is None or data.digest(p) != parsed[p])
    return (f"not recorded: {', '.join(moved)} changed since the library was read (prove again)"
            if moved else "")

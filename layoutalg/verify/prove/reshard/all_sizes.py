"""Direct reshard plans for all sizes: one configuration pair, every model size.

`layoutalg.plans.reshard` builds a consumer rank's direct plan at one set of sizes, from the two
groups' runs, and `prove.reshard` checks that plan at those sizes. Here the plan is built
once for every size, in the algebra (`prove.reshard.symplan`: the common refinement of the two
configurations' digit tables), and checked by Z3 for every size.

The plan is not trusted. With the two configurations' grid names as numbers and every other
size a Z3 variable (one for both configurations: one model, two groups), each consumer
rank's plan is read against the spec's own reading (`interpret`) of both sides:

    reshard-cover  every consumer byte is written exactly once, from a byte inside one of
                   the producers' pages;
    reshard-match  that byte holds the same canonical byte (the two canonical pages are
                   first shown to be one layout: same extents, element and offsets).

A name the rank grid is built from that is not a grid number (GQA: `total_heads < tp` gives
`total_heads` ranks holding distinct heads) takes each of its few values in turn, found by
Z3 under both configurations' guards; every other size stays symbolic.

Across another cp the small side's ranks are `k` virtual ranks each (`symplan.Cross`), and
the match asks that the two bytes name one canonical index, the small page's token shifted
by its part: the token's own place only where the family's `sequence` claim holds, which is
proved first. Where a rank's chunks of tokens need not divide evenly among the small pages
the plan comes in cases, one per residue (`symplan.cases`), each checked on its domain
(`block_size % 2 == 0`, `(block_size - 1) % 2 == 0`): that domain is assumed by every query
of the case, a case whose domain Z3 shows empty checks nothing and covers nothing, and the
sizes no case covers (none, where the cases are every residue) are a row of their own
(`reshard-domain`), never proved.

A page of regions (Mamba2 and GDN state, quantised KV with its scales) is proved region by
region: each region's plan is built as above from its own digit tables, its sources and
destinations shifted by the region's base in each local page, and checked against the
region's reading (its bytes, as many as the region holds, read from the same region of the
producer's page); a region whose rows have the other regions between them is refined as the
compact tiling it is (`algebra.refine.pieces`). The regions and pads of both pages share no byte
(the regions-tile-local certificate for all sizes, else at each configuration, else Z3
case by case), so together the plans write every data byte once and never a pad, each
from a producer byte of one region.
"""
from __future__ import annotations

import itertools
import time

import sympy
import z3

from ....verdicts import Verdict
from .... import params
from ....errors import LayoutalgError
from ....ir.family import resolve
from ....dsl.interpret import paths
from ....dsl.library import Library
from ..obligations import Budget, Model, family_names, query, value
from .at_sizes import solve_query, sequence_unproved as _sequence_unproved, showing
from .. import store
from ..store import RESHARD, Row
from ..certificates import cuts, divided
from ..structural import page_tiles
from .plan_queries import (Sides, Terms, canonical_differs, case_atoms, cover_violations, grid_short, malformed,
                           match_violations, outside_page, same_shape, sizes_at, unread, z3_run)
from .symplan import PER_SIDE, Cross, NotEstablished, block_ratio, cases, cross_of, rank_names

DOMAIN_ROW = "reshard-domain"
MAX_VALUES = 64  # values of the rank grid's other names tried in turn; beyond, unknown


# ---- proving: the plan against both readings of the spec, every size symbolic ---------------

def prove_all_sizes(lib: Library, family: str, store: dict, load: dict, budget: Budget, edit=None) -> list[Row]:
    """The rows `reshard-cover` and `reshard-match` of the plan from `store` to `load` (each a
    configuration: numbers for `params.CONFIG_NAMES`), for every other size in the declared domain.
    `edit`, for tests, changes the built plans before they are checked (a mutant plan)."""
    from ....compile.codegen import compile_family
    t0 = time.perf_counter()
    if family not in lib.families:
        raise LayoutalgError(f"prove_all_sizes: no family {family!r}; the library's: {', '.join(lib.families)}")
    spec = lib.family_def(family).span.file

    def rows(status, method, detail=""):
        return [Row(spec, family, n, status, method, time.perf_counter() - t0, detail) for n in RESHARD]
    parts = lib.parts_of(family)
    try:
        fams = {p: resolve(lib, p) for p in parts}
    except LayoutalgError as e:
        return rows(Verdict.UNKNOWN, f"not in normal form: {e}")
    if not all(compile_family(f).claims_agnostic for f in fams.values()):
        return rows(Verdict.UNKNOWN, "the family's pages carry the configuration in their format id (no agnostic claim "
                               "backed by the grid): no direct plan between two configurations")
    given = [c.get("block_size") for c in (store, load)]
    sx, sy, bounds, store, load = _sizes(lib, family, store, load)
    blocks = "" if "block_size" not in store and "block_size" not in load else \
        f" (block sizes {given[0]} and {given[1]} read as B and {max(given) // min(given)} * B, for every B)"
    if blocks:  # the numbers given fix only k: each must still be a block size the family serves
        alone = _served_nowhere(lib, parts[0], {**sx, "block_size": given[0]}, {**sy, "block_size": given[1]}, bounds,
                                budget, ("xb.", "yb."))
        if alone:
            return rows(Verdict.UNKNOWN, f"the {alone} configuration's block_size={given[alone == 'load']} is served by no "
                                   f"case of the family at any size (its cases, guards and page do not hold there)")
    checked, cases, seen, outside, crossing, splits = 0, 0, [], [], False, set()
    verdict: dict = {}  # row -> (status, detail): the first failure, a refutation before an unknown

    def note(row, status, why):
        if status != Verdict.PROVED and (row not in verdict or status == Verdict.REFUTED != verdict[row][0]):
            verdict[row] = (status, why)
    # a page of regions: each region's plan is proved as a layout of its own, from its base of
    # both pages; the regions and pads of both pages share no byte (the regions-tile-local
    # certificate for all sizes, else `_pages_tiled` by Z3), so together the plans write every
    # data byte of the consumer page once and no pad, each from a producer byte of one region
    one = parts == [family]
    tiled = one or page_tiles(lib, family, "local").status == Verdict.PROVED  # both pages; else Z3, case pair by pair
    for k, part in enumerate(parts):
        where = "" if one else f"region '{lib.family_def(part).shard.region}': "
        tags = ("x.", "y.") if one else (f"x{k}.", f"y{k}.")
        found, c, n, s, out, crossed = _prove_cases(lib, fams[part], part, sx, sy, bounds, store, load, budget, edit, tags)
        for row, (st, why) in found.items():
            note(row, st, where + why)
        outside += [(where + said, at, pair) for said, at, pair in out]
        crossing = crossing or crossed[0]
        splits |= crossed[1]
        checked += n
        if not c:
            alone = _served_nowhere(lib, part, sx, sy, bounds, budget, tags)
            if alone:
                return rows(Verdict.UNKNOWN, f"{where if k else ''}the {alone} configuration "
                                       f"({_shown_config(store if alone == 'store' else load)}) is served by no case "
                                       f"of the family at any size: its cases, guards and page do not hold there")
            return rows(Verdict.UNKNOWN, f"{where if k else ''}no case of the family applies at both configurations, with "
                                   f"canonical pages of one shape (or k of one along the sequence index, across "
                                   f"another cp), at any size: the runtime plans only between pages of one format "
                                   f"or parts of one another")
        if k == 0:  # every region is read under the same cases and grid
            cases, seen = c, s
        elif c != cases:  # a case pair some region was not checked at: its bytes there are not shown
            return rows(Verdict.UNKNOWN, f"{where}applies at case pairs {c} (store, load), the first region at {cases}")
    if not tiled:
        for row, (st, why) in _pages_tiled(lib, parts[0], cases, sx, sy, bounds, budget).items():
            note(row, st, why)
    for part in parts:  # the match takes a canonical index for one element at both configurations
        st, why = _one_format_unproved(lib, part, budget)
        if why:
            for row in RESHARD:
                note(row, st, why)
    if crossing:  # the match takes the canonical `sequence` index for the token's place: the claim must hold
        for part in parts:
            why = _sequence_unproved(lib, part, budget)
            if why:
                for row in RESHARD:
                    note(row, Verdict.UNKNOWN, why)
    taken = f"; rank grids at {'; '.join(sorted(s for s in seen if s))}" if any(seen) else ""
    what = f"{len(cases)} case pair(s), {checked} consumer plans" if one else \
        f"{len(cases)} case pair(s), {len(parts)} regions each, {checked} consumer region plans"
    shape = "where the canonical pages have one shape" if not crossing else \
        "across another cp or block size, where a big canonical page is k small ones along the sequence index" + \
        blocks + \
        ("" if not outside else ", at the sizes where the plan's divisions are whole (see reshard-domain)") + \
        ("" if not splits else f", by cases of how a rank's chunks of tokens fall into the small pages "
                               f"({'; '.join(sorted(splits))})")
    out = [Row(spec, family, n, *verdict[n][:1], "symbolic sizes, this configuration pair",
               time.perf_counter() - t0, verdict[n][1]) if n in verdict else
           Row(spec, family, n, Verdict.PROVED, f"all sizes at this configuration pair {shape}: {what}, symbolic fragment "
                                          f"and byte{taken}", time.perf_counter() - t0) for n in RESHARD]
    if outside:  # the rest of the domain: the plan's pieces do not divide there, so nothing is proved of it
        by: dict = {}
        for said, at, pair in outside:
            by.setdefault(said, ([], at))[0].append(pair)
        out.append(Row(spec, family, DOMAIN_ROW, Verdict.UNKNOWN, "the sizes outside the plan's domain: no plan of strided "
                                                        "pieces there (the runtime's plan is proved per pair)",
                       time.perf_counter() - t0,
                       "; ".join(f"the plan holds only where {said} (case pairs {', '.join(map(str, pairs))}; "
                                 f"{at})" for said, (pairs, at) in by.items())))
    return out


def _one_format_unproved(lib, part: str, budget: Budget) -> tuple[str, str]:
    """(status, why) where the part's pages are not shown one format for all sizes (a plan
    matches canonical indices, which must name one element of the engine's at both
    configurations: the `one-format` row), else ('proved', '')."""
    from ..runner import Budgets, safely, one_format
    row = store.row(lib, part, "one-format", budget.rlimit,
                    lambda: safely(lib.family_def(part).span.file, part, "one-format",
                                    lambda: one_format(lib, part, Budgets.of(budget.rlimit, budget.guard_s))))
    if row.status == Verdict.PROVED and row.method.startswith("symbolic: all sizes"):
        return Verdict.PROVED, ""
    return (Verdict.REFUTED if row.status == Verdict.REFUTED else Verdict.UNKNOWN,
            f"the plan matches canonical indices, each one element of the engine's at both configurations only "
            f"where one-format holds; it is not proved for all sizes ({row.status}: {row.detail or row.method})")


def _prove_cases(lib, fam, family, sx, sy, bounds, store, load, budget, edit, tags):
    """({row: (status, why)} of the failures, the case pairs that apply, consumer plans
    checked, rank grid values taken) for every case pair of one layout (a family, or a region
    of a page: `family` a part, its models tagged apart from the other regions')."""
    found_all: dict = {}
    checked, cases, seen, outside, crossed, splits = 0, [], [], [], [], set()
    seq = lib.family_def(family).sequence

    def note(row, status, why):
        if row not in found_all or status == Verdict.REFUTED != found_all[row][0]:
            found_all[row] = (status, why)
    for (kx, px), (ky, py) in itertools.product(enumerate(paths(lib, family)), repeat=2):
        try:
            mx = Model(lib, family, px, sizes=sx, tag=tags[0])
            my = Model(lib, family, py, sizes=sy, tag=tags[1])
            mx.touch()  # the divisions the spec reads lazily join the side conditions before the pair
            my.touch()  # is found to apply: one that is never exact leaves it applying nowhere
        except (ArithmeticError, LookupError, TypeError) as e:  # not shown to apply nowhere: unknown
            for row in RESHARD:
                note(row, Verdict.UNKNOWN, f"cases {kx} (store) and {ky} (load): the spec cannot be read at these "
                                     f"configurations ({e})")
            continue
        cross = cross_of(fam, fam.variants[kx], fam.variants[ky], store, load, seq.id if seq is not None else None)
        shape = same_shape(mx, my, cross)  # the runtime plans only between pages of one format (or k of one)
        with showing(f"cases {kx} (store) and {ky} (load) apply together at no size with canonical pages of one "
                     f"shape (or k of one along the sequence index): the pair has no plan to check", applies=True):
            status, _ = solve_query(mx, my, z3.And(*bounds, shape), budget)
        if status == "unsat":
            continue
        cases.append((kx, ky))
        crossed.append(cross)
        try:
            if status != "sat":
                raise NotEstablished("undecided whether the two cases apply together")
            for extra, vx, vy in _values(fam, mx, my, kx, ky, store, load, bounds, budget):
                at = f"cases {kx} (store) and {ky} (load)" + "".join(f", {n}={v}" for n, v in sorted({**vx, **vy}.items()))
                found, n, out, split = _check(fam, mx, my, fam.variants[kx], fam.variants[ky], {**store, **vx},
                                              {**load, **vy}, bounds + extra + [shape], budget, edit, cross, at)
                if split:
                    splits.add(split)
                for row, (st, why) in found.items():
                    note(row, st, f"cases {kx} (store) and {ky} (load): {why}")
                if out:
                    outside.append((*out, (kx, ky)))
                checked += n
                seen.append(", ".join(f"{n}={v}" for n, v in sorted({**vx, **vy}.items())))
        except NotEstablished as e:
            for row in RESHARD:
                note(row, Verdict.UNKNOWN, f"cases {kx} (store) and {ky} (load): {e}")
    return found_all, cases, checked, seen, outside, (any(c is not None for c in crossed), splits)


def _served_nowhere(lib, family: str, sx: dict, sy: dict, bounds: list, budget: Budget, tags) -> str:
    """"store" or "load" where no case of the family applies to that configuration at any size
    (Z3 shows each case unsatisfiable there), else ''."""
    for side, sizes, tag in (("store", sx, tags[0]), ("load", sy, tags[1])):
        for path in paths(lib, family):
            try:
                m = Model(lib, family, path, sizes=sizes, tag=tag)
                m.touch()
            except (ArithmeticError, LookupError, TypeError):
                break  # not shown to apply nowhere
            if solve_query(m, None, z3.And(*bounds), budget)[0] != "unsat":
                break
        else:
            return side
    return ""


def _shown_config(config: dict) -> str:
    return params.Configuration({n: v for n, v in config.items() if n in params.CONFIG_NAMES}).text


def _pages_tiled(lib, part: str, cases: list, sx: dict, sy: dict, bounds: list, budget: Budget) -> dict:
    """{row: (status, why)} where the regions and pads of a page may share a byte, in either
    configuration, at some case pair that applies ({} where Z3 shows them apart).

    In the consumer's page two data regions sharing a byte is one byte written by two
    regions' plans, and a pad sharing one with a region is a pad byte written (reshard-cover,
    refuted); in the producer's page it is one byte read as two canonical bytes
    (reshard-match, refuted). Anything else that keeps the page from being tiled (two pads
    that meet, a pad not one-to-one in the page) leaves both rows unknown: the runtime
    refuses such a page."""
    out: dict = {}
    for side, tag, sizes, row, ks in (("consumer", "ya.", sy, "reshard-cover", {ky for _, ky in cases}),
                                      ("producer", "xa.", sx, "reshard-match", {kx for kx, _ in cases})):
        for k in sorted(ks):
            if row in out:
                break
            found = _tiling_violation(lib, part, k, side, tag, sizes, bounds, budget)
            if found is None:
                continue
            if found[0] == Verdict.REFUTED:
                out[row] = found
            else:  # a page not shown tiled: neither row is shown
                out = {**dict.fromkeys(RESHARD, found), **out}
    return out


def _tiling_violation(lib, part: str, k: int, side: str, tag: str, sizes: dict, bounds: list, budget: Budget):
    """The first way case `k` of one configuration's page is not tiled, as (status, why), or None
    (shown tiled: by the sympy certificate at this configuration, else by Z3)."""
    config = {n: v for n, v in sizes.items() if type(v) is int}  # this configuration's numbers
    if page_tiles(lib, lib.family_def(part).part_of, "local", k, config).status == Verdict.PROVED:
        return None
    m = Model(lib, part, paths(lib, part)[k], sizes=sizes, tag=tag)
    _, w = query(m, "regions-tile-local")
    case = f"case {k} of the {'load' if side == 'consumer' else 'store'} configuration"
    undecided = None  # every part is asked: a refutation of one outranks another left undecided
    # a hunt first: every part within a twentieth of the budget (a byte two regions share is
    # found quickly where there is one), then those it left undecided within the whole budget,
    # so that one hard part does not keep a refutation of another waiting. The first part, in
    # this order, found sat decides: on a page with two flaws, the one found within the hunt
    # is the one said (a pad's, unknown; two data regions', refuted), whichever comes first
    parts = list(enumerate(zip(w.parts, w.meaning)))
    hunt = Budget(max(1, budget.rlimit // 20), budget.guard_s)
    decided = set()
    for (i, (part_query, (kind, a, c))), within in [(p, hunt) for p in parts] + [(p, budget) for p in parts]:
        if i in decided:
            continue
        with showing(f"{case}: regions '{a[0]}' and '{c[0]}' of the {side} page share no byte" if kind == "overlap"
                     else f"{case}: pad '{a[0]}' of the {side} page is one-to-one inside it",
                     lambda: cuts(m, "regions-tile-local", w, bounds)):
            status, model = solve_query(m, None, z3.And(*bounds, part_query), within)
        if status == "unsat":
            decided.add(i)
            continue
        if status != "sat" and within is hunt:
            continue  # asked again within the whole budget
        what = f"regions '{a[0]}' and '{c[0]}'" if kind == "overlap" else f"pad '{a[0]}'"
        if status != "sat":
            undecided = undecided or (Verdict.UNKNOWN, f"{case}: undecided whether {what} of the {side} page share a byte"
                                      if kind == "overlap" else
                                      f"{case}: undecided whether {what} of the {side} page is one-to-one inside it")
            continue
        at = sizes_at(None, m, model) if side == "consumer" else sizes_at(m, None, model)
        if kind != "overlap" or (a[1].pad and c[1].pad):
            return Verdict.UNKNOWN, f"{case}: the {side} page is not tiled by its regions and pads ({what}, at {at}): the " \
                              f"runtime refuses it"
        meaning = ("a byte both their plans write" if not (a[1].pad or c[1].pad) else
                   "a pad byte the region's plan writes") if side == "consumer" else "one byte read as two canonical bytes"
        return Verdict.REFUTED, f"{case}: {what} of the {side} page share a byte, {meaning}, at {at}"
    return undecided


def _sizes(lib: Library, family: str, store: dict, load: dict):
    """Both sides' sizes (configuration numbers, per-side and shared Z3 variables), the domain
    bounds of every variable, and both configurations in full (what was not given at its
    default)."""
    vocab = lib.vocabulary()
    full = []
    for side, config in (("store", store), ("load", load)):
        fixed = {}
        for n, default in params.DEFAULTS.items():
            v = config.get(n, default)
            if type(v) is not int:
                raise LayoutalgError(f"prove_all_sizes: the {side} configuration's {n} is {v!r}, not a whole number")
            if n not in vocab:  # a library whose grids never read it: only its default means anything
                if v != default:
                    raise LayoutalgError(f"prove_all_sizes: the {side} configuration sets {n}={v}, but the "
                                         f"loaded specs declare no {n}")
                continue
            why = params.outside(n, v, vocab[n].lo, vocab[n].hi)
            if why:
                raise LayoutalgError(f"prove_all_sizes: the {side} configuration's {why}")
            fixed[n] = v
        extra = sorted(set(config) - set(params.CONFIG_NAMES) - {"block_size"})
        if extra:
            raise LayoutalgError(f"prove_all_sizes: the {side} configuration names {extra[0]!r}; a configuration "
                                 f"gives {', '.join(params.CONFIG_NAMES)}")
        full.append(fixed)
    names = family_names(lib, family) | set(PER_SIDE)
    shared = {n: z3.Int(n) for n in names if n in vocab and n not in params.CONFIG_NAMES and n not in PER_SIDE}
    sides = [{**shared, **{n: z3.Int(tag + n) for n in PER_SIDE}, **fixed} for tag, fixed in zip(("x.", "y."), full)]
    k, big = block_ratio(store, load, "block_size" in shared, vocab.get("block_size"))
    if k > 1:  # one block size k times the other: every block size B against k * B, B symbolic
        sides[big]["block_size"] = k * shared["block_size"]
        full[big]["block_size"] = k * sympy.Symbol("block_size", integer=True)
    bounds = [c for s in sides for n, x in s.items() if z3.is_expr(x)
              for c in (x >= vocab[n].lo, x <= vocab[n].hi)]
    return sides[0], sides[1], bounds, full[0], full[1]


def _values(fam, mx, my, kx, ky, store, load, bounds, budget):
    """(constraints, store values, load values) for each value of the names the two rank grids
    read beyond the configuration (none: one empty assignment)."""
    names = [(n, "x") for n in sorted(rank_names(fam, fam.variants[kx], store))] + \
        [(n, "y") for n in sorted(rank_names(fam, fam.variants[ky], load))]
    if not names:
        yield [], {}, {}
        return
    terms = [(mx if side == "x" else my).sizes[n] for n, side in names]
    block, found = [], 0
    while True:
        with showing(f"cases {kx} (store) and {ky} (load): the rank grids' names "
                     f"({', '.join(n for n, _ in names)}) take no value beyond the {found} checked"):
            status, model = solve_query(mx, my, z3.And(*bounds, *block), budget)
        if status == "unsat":
            return
        if status != "sat" or found >= MAX_VALUES:
            raise NotEstablished(f"the rank grids read {', '.join(n for n, _ in names)}, whose values under the "
                                 f"guards were not all found ({found} so far)")
        vals = [value(model, t) for t in terms]
        found += 1
        block.append(z3.Or(*[t != v for t, v in zip(terms, vals)]))
        # a shared name has its value on both sides; a name of one side only there
        shared = {n: v for (n, s), v in zip(names, vals) if n not in PER_SIDE}
        yield [t == v for t, v in zip(terms, vals)], \
            {**shared, **{n: v for (n, s), v in zip(names, vals) if s == "x"}}, \
            {**shared, **{n: v for (n, s), v in zip(names, vals) if s == "y"}}


def _check(fam, mx: Model, my: Model, vx, vy, store: dict, load: dict, extra: list, budget: Budget, edit=None,
           cross: Cross | None = None, at: str = ""):
    """({row: (status, what)}, consumer plans checked, the sizes left outside the plan's
    domain as (where it holds, an example outside) or None) for one case pair at one
    assignment of the rank grids' names."""
    where = z3.And(*extra)

    def solve(violation, what, cut=None):
        with showing(lambda: f"{at}: {what() if callable(what) else what}", cut):
            return solve_query(mx, my, z3.And(where, violation), budget)

    def both(status, why):
        return {row: (status, why) for row in RESHARD}, 0, None, ""
    status, model = solve(grid_short(mx, my), "each rank grid's digits number exactly its world")
    if status != "unsat":  # then some rank has no digits: a plan for it, or read from it, is vacuous
        return both(Verdict.UNKNOWN, "a rank grid's digits are not shown to number exactly its world (tp * pcp ranks; "
                               "`layoutalg prove` checks writers-cover)" +
                    (f" (at {sizes_at(mx, my, model)})" if status == "sat" else ""))
    status, model = solve(canonical_differs(mx, my), "the two configurations' canonical pages are one layout") \
        if cross is None else ("unsat", None)
    if status != "unsat":  # (across a cp the match compares canonical indices, each page's own layout)
        return both(Verdict.UNKNOWN, "the two configurations' canonical pages are not shown to be one layout" +
                    (f" (they differ at {sizes_at(mx, my, model)})" if status == "sat" else ""))
    found, checked, held = {}, 0, []
    # the spec's own properties the plan's checks lean on: they hold at every size where they hold
    # at all, so they are asked once, without any case's domain (`cover_violations` says what each spares)
    def inside(m):
        v, w = outside_page(m)
        return solve(v, f"the spec keeps each element of the {'load' if m is my else 'store'} configuration's local "
                        f"page inside it", lambda: cuts(m, None, w, [where]))[0] == "unsat"
    in_page = all(inside(m) for m in (my, mx))
    bijective = query(my, "local-bijective")
    one_to_one = solve(bijective[0], "the load configuration's local layout is one-to-one",
                       lambda: cuts(my, "local-bijective", bijective[1], [where]))[0] == "unsat"
    for built in cases(fam, vx, vy, store, load, cross):  # across a cp: one case per residue, each on its domain
        built = edit(built) if edit is not None else built
        out = _check_case(fam, mx, my, built, where, budget, cross, (in_page, one_to_one), at)
        if out is None:  # no size lies in this case's domain: it checks nothing, and covers nothing
            continue
        case, n, domain = out
        for row, v in case.items():
            if row not in found or v[0] == Verdict.REFUTED != found[row][0]:
                found[row] = v
        checked += n
        held.append(domain)
    if not held:
        return both(Verdict.UNKNOWN, "no size is shown where the plan's pieces divide")
    outside = None
    said = " or ".join(_divisible(d) or "always" for d in held)
    if any(held):  # the sizes no case's domain holds: nothing is proved there, and the row says so
        status, model = solve(z3.Not(z3.Or(*[z3.And(*[c for _, _, c in d], z3.BoolVal(True)) for d in held])),
                              "every size lies in some case's domain")
        if status != "unsat":
            outside = (said, f"not at {sizes_at(mx, my, model)}" if status == "sat" else "undecided elsewhere")
    return found, checked, outside, said if len(held) > 1 else ""


def _divisible(domain) -> str:
    """A case's domain in words: `(block_size - 1) % 2 == 0 and ...`."""
    return " and ".join(f"{f'({a})' if a.is_Add else a} % {b} == 0" for a, b, _ in domain)


def _check_case(fam, mx: Model, my: Model, built, where, budget: Budget, cross, spec_facts, at: str = ""):
    """({row: (status, what)} of the failures, consumer plans checked, the case's domain as
    (dividend, divisor, Z3 condition)) for the plans of one case, or None where Z3 shows no
    size in its domain (a refuted shape or an unknown division: the pair's verdict).
    `spec_facts`: (in_page, one_to_one) as `cover_violations` takes them, shown for the pair."""
    def solve(violation, what, cut=None):
        with showing(lambda: f"{at}{said}: {what() if callable(what) else what}", cut):
            return solve_query(mx, my, z3.And(where, violation), budget)

    own, clash = case_atoms(fam, built)
    z = Terms(fam, mx, my, own)
    pairs = tuple(dict.fromkeys(d for p in built for d in p.domain))
    clash = clash or unread(pairs, z)
    domain = () if clash else tuple((a, b, z(a) % int(b) == 0) for a, b in pairs)

    def both(status, why):
        return {row: (status, why) for row in RESHARD}, 0, domain
    if clash:  # Z3 and the runtime would read the case otherwise: what Z3 checked would not be the plan
        return both(Verdict.UNKNOWN, f"not checked: {clash}")
    said = f", where {_divisible(domain)}" if domain else ""  # (said of the case; its steps' words are made
    # only where recorded: a term printed for every division of every plan would cost the proof its time)
    if domain:  # the plan is the pair's plan where its pieces divide: proved there, the rest said by the caller
        status, _ = solve(z3.And(*[c for _, _, c in domain]), "no size lies in this case's domain: it checks nothing")
        if status == "unsat":
            return None
        if status != "sat":
            return both(Verdict.UNKNOWN, f"undecided whether any size lies where the plan's pieces divide "
                                   f"({_divisible(domain)})")
        # a residue case's q = (n - rho) / k is an atom of the plan: that it is exact here is a
        # consequence of the domain, stated linearly (Z3 rarely finds it through the division)
        exact = [z(s) * int(a.den) == z(a.num) for s, a in z.atoms.items()
                 if a.op == "/" and (a.num, a.den) in {(n, d) for n, d, _ in domain}]
        where = z3.And(where, *[c for _, _, c in domain], *exact)
        if exact:  # a fact that held nowhere would make every query below vacuously unsat
            status, _ = solve_query(mx, my, where, budget)
            if status != "sat":
                return both(Verdict.UNKNOWN, "the case's quotients are not shown exact at any size of its domain "
                                       f"({_divisible(domain)}; {status})")
    shape = malformed(built)
    if shape:
        return both(Verdict.REFUTED, f"not a plan: {shape}")
    worlds = [z3.simplify(z3.IntVal(0) + m.r.world) for m in (mx, my)]
    if not all(z3.is_int_value(w) for w in worlds):
        return both(Verdict.UNKNOWN, f"the groups' worlds are {worlds[0]} and {worlds[1]}, not numbers")
    sides = Sides(*(w.as_long() for w in worlds), cross)
    consumers = sorted(p.consumer for p in built)
    if consumers != list(range(sides.consumers)):
        return {"reshard-cover": (Verdict.REFUTED, f"plans for consumer ranks {consumers}; the load group has "
                                             f"{sides.consumers} {'virtual ' if sides.consumers != sides.world_y else ''}"
                                             f"ranks, each written once"),
                "reshard-match": (Verdict.UNKNOWN, "the plans are not one for each consumer rank")}, 0, domain
    queries, readings = [], []
    # every byte the plan copies is checked to be the spec's byte of an index in its box (the
    # readings, first), so where the spec keeps such bytes inside its page, so does the plan:
    # a query on the spec alone, which spares Z3 the plan's products of sizes
    for plan in built:
        runs = [z3_run(z, r) for r in plan.runs]
        queries += [(plan, "reshard-cover", what, v) for what, v in cover_violations(mx, my, runs, sides, *spec_facts)]
        for k, run in enumerate(runs):
            reading, match = match_violations(mx, my, plan.consumer, run, sides)
            readings.append((plan, k, reading))
            queries.append((plan, "reshard-match", "a byte is read from a producer byte holding another canonical "
                                                   "byte", match))
    divisions = z.divisions
    # each division of the plan's sizes: by a positive divisor, and `/` exact, wherever the spec applies
    # (one query a division: together they are one nonlinear query Z3 may leave to its budget)
    for op, n, d in {(op, str(n), str(d)): (op, n, d) for op, n, d in divisions}.values():
        # where the spec divides the same terms, its remainder is defined (n = q * d + r, 0 <= r < d):
        # a linear fact for Z3, where `n % d` of two sizes is a nonlinear one it may leave undecided
        qr = next((q for q in (m.ops.quotient(n, d) for m in (mx, my)) if q is not None), None)
        rest = qr[1] if qr is not None else n % d
        status, model = solve(z3.Or(d <= 0, rest != 0) if op == "/" else d <= 0,
                              lambda n=n, d=d, op=op: f"the plan divides {n} by {d} only where it is positive"
                                                      f"{' and divides it' if op == '/' else ''}")
        if status != "unsat":
            return both(Verdict.UNKNOWN, f"the plan divides {n} by {d} where the guards do not show the divisor positive"
                                   f"{' and the division exact' if op == '/' else ''}" +
                        (f" (at {sizes_at(mx, my, model)})" if status == "sat" else " (undecided)"))
    for plan, k, violation in readings:  # the plan's own reading of its bytes, which both rows take
        status, model = solve(violation, f"consumer rank {plan.consumer}, run {k}: the plan's spec index of each "
                                         f"byte it copies is the spec's", lambda v=violation: divided(v, mx, my))
        if status != "unsat":
            return both(Verdict.UNKNOWN, f"consumer rank {plan.consumer}: the plan's spec index of a byte it copies is "
                                   f"not shown to be the spec's" +
                        (f" (at {sizes_at(mx, my, model)})" if status == "sat" else ""))
    found = {}
    for plan, row, what, violation in queries:
        if row in found:
            continue
        status, model = solve(violation, f"consumer rank {plan.consumer} ({row}): no size where {what}",
                              lambda v=violation: divided(v, mx, my))
        if status == "sat":
            found[row] = (Verdict.REFUTED, f"consumer rank {plan.consumer}: {what}, at {sizes_at(mx, my, model)}")
        elif status != "unsat":
            found[row] = (Verdict.UNKNOWN, f"undecided for consumer rank {plan.consumer} ({what})")
    return found, len(built), domain



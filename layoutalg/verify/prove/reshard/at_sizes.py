"""Direct reshard plans against the spec, with Z3.

A plan (`layoutalg.plans.reshard.direct_plans`) is built from the two groups' copy runs. Here it
is checked against the spec's own reading of both configurations, not against those runs:
for each consumer rank, with the fragment, the byte, and the spec indices symbolic,

    reshard-cover  every consumer byte is written exactly once, and every byte read lies
                   inside the producer's local page;
    reshard-match  the producer byte a consumer byte comes from holds the same canonical
                   byte: the consumer's spec index of the destination and the producer's of
                   the source name one canonical byte (each through its own shard map).

The sizes of both configurations are numbers (a plan exists per configuration pair), so
each row is "proved on this pair", never "for all sizes". What makes the pair's plan
exist at all for every size is the two configurations' own rows (each tiles the one
canonical page exactly: `layoutalg prove`).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import NamedTuple, Sequence

import z3

from ....verdicts import Check, Reason, Verdict
from ....dsl.interpret import Reading
from ....dsl.library import Library
from ..obligations import Budget, Model, value
from ..store import RESHARD, Row
from ..witness import Plan
from ..z3ops import ask



def prove_plans(lib: Library, family: str, store: dict, load: dict, plans: Sequence, budget: Budget) -> list[Row]:
    """The two rows for the plans of every consumer rank of `load` reading from `store`."""
    return _prove(lib, family, store, load, [(tuple(plans), None)], budget)


def prove_cross_plans(lib: Library, family: str, store: dict, load: dict, cross, token: str,
                      budget: Budget) -> list[Row]:
    """The same rows for plans across another cp (`reshard.CrossPlans`): a consumer byte's
    source must hold the same canonical index, with the token of the small page shifted by
    its part of the big page (`token`: the canonical index the two formats differ in)."""
    if not cross.parts:
        return _prove(lib, family, store, load, [((), None)], budget)
    why = sequence_unshown(lib, family, store, load, budget)
    if why:
        return [Row(lib.family_def(family).span.file, family, n, Verdict.UNKNOWN, "symbolic byte, one configuration pair",
                    0.0, why) for n in RESHARD]
    return _prove(lib, family, store, load, [(tuple(plans), _Cross(cross.k, cross.small, cross.world, j, token))
                                             for j, plans in enumerate(cross.parts)], budget)


def sequence_unshown(lib, family: str, store: dict, load: dict, budget: Budget,
                     sides=("store", "load")) -> Reason | None:
    """Why the `sequence` claim (canonical index t is the token's place, the grid's token(t),
    a bijection of a page's tokens) is not shown (a `Reason` of check `sequence`), or None: proved for all sizes in every part
    (the `sequence-order` row, from the proof cache), and the family shown to apply at both
    configurations. The plans and conversions are checked by canonical indices, the small
    page's token shifted by its part, which is the token's own place only where it holds."""
    from ..obligations import query
    for part in lib.parts_of(family):  # for all sizes first: a bijection of the tokens, never at two sizes alone
        why = sequence_unproved(lib, part, budget)
        if why:
            return why.said(after="" if part == family else f" in region {part!r}")
    for side, sizes in zip(sides, (store, load)):
        for part in lib.parts_of(family):
            try:  # (a token's place is no matter of the page's size: the page is not assumed)
                m = Model(lib, part, tuple(Reading(lib, part, sizes).taken), sizes=sizes, page_guard=False)
                violation, _ = query(m, "sequence-order")
                applies, _ = solve_query(m, None, z3.BoolVal(True), budget)
                status = solve_query(m, None, violation, budget)[0] if applies == "sat" else None
            except (ArithmeticError, LookupError, TypeError) as e:
                return Reason(Check.SEQUENCE, f"the {side} configuration's `sequence` claim cannot be read ({e})",
                              family=part)
            if applies != "sat":  # assumptions that contradict each other would show any claim
                return Reason(Check.SEQUENCE, f"the family is not shown to apply at the {side} configuration (its "
                              f"cases and guards {'do not hold' if applies == 'unsat' else 'are undecided'} there): "
                              f"its `sequence` claim shows nothing", family=part)
            if status != "unsat":
                return Reason(Check.SEQUENCE, f"pages of another cp are joined by the canonical `sequence` index, the "
                              f"token's place only where the claim holds (every local token t at canonical t = "
                              f"token(t)); at the {side} configuration it is "
                              f"{'refuted' if status == 'sat' else 'undecided'}"
                              f"{'' if part == family else f' in region {part!r}'} (`layoutalg prove` shows a "
                              f"counterexample)", family=part)
    return None


def sequence_unproved(lib, part: str, budget: Budget) -> Reason | None:
    """Why the part's `sequence` claim (canonical index t is the token's place in the
    sequence, the grid's token(t), a bijection of the page's tokens) is not proved for all
    sizes, or None. Across another cp or block size a plan or conversion joins pages by
    canonical indices, the small page's token shifted by its part: that is the token's own
    place only where the claim holds (a shard map placing tokens by another fn, or two
    tokens at one place, would otherwise be proved). The row comes from the proof cache."""
    from .. import store
    from ..runner import Budgets, prove_obligation
    row = store.row(lib, part, "sequence-order", budget.rlimit,
                    lambda: prove_obligation(lib, part, "sequence-order", {}, Budgets.of(budget.rlimit, budget.guard_s)))
    if row.status == Verdict.PROVED and row.method.startswith("symbolic: all sizes"):
        return None
    return Reason(Check.SEQUENCE, f"pages of another cp or block size are matched by the canonical index "
                  f"'{lib.family_def(part).sequence.id}', the token's place only where `sequence` holds; sequence-order "
                  f"is not proved for all sizes ({row.status}: {row.detail or row.method})", family=part)


class _Cross(NamedTuple):
    k: int
    small: str        # "consumer" or "producer": which group reads the small pages
    world: int        # producer ranks
    part: int         # with small consumers: the part of the big page these plans fill
    token: str


def _prove(lib, family, store, load, groups, budget) -> list[Row]:
    if family not in lib.families:
        from ....errors import LayoutalgError
        raise LayoutalgError(f"prove_plans: no family {family!r}; the library's: {', '.join(lib.families)}")
    fdef = lib.family_def(family)
    spec = fdef.span.file
    if fdef.page is not None:
        return [Row(spec, family, n, Verdict.UNKNOWN, "a part of a page: prove the page's family", 0.0) for n in RESHARD]
    if lib.parts_of(family) != [family]:
        return _prove_pages(lib, family, store, load, groups, budget)
    if not all(plans for plans, _ in groups):
        return [Row(spec, family, n, Verdict.UNKNOWN, "no consumer plan to check", 0.0) for n in RESHARD]
    try:
        mx, my = _fresh(lib, family, store, load)
    except (ArithmeticError, LookupError, TypeError) as e:
        return [Row(spec, family, n, Verdict.UNKNOWN, f"the family does not apply at these configurations ({e})", 0.0)
                for n in RESHARD]
    for who, m in (("store", mx), ("load", my)):  # a configuration the family does not serve proves nothing
        status = solve_query(m, None, z3.BoolVal(True), budget)[0]
        if status != "sat":
            why = "its guards, cases and page do not hold there" if status == "unsat" else "undecided"
            return [Row(spec, family, n, Verdict.UNKNOWN, f"the family does not apply at the {who} configuration ({why})",
                        0.0) for n in RESHARD]
    rows = _not_one_format(lib, family, store, load, budget)
    if rows:
        return rows
    for plans, cross in groups:
        bad = _malformed(plans, mx, my, cross)
        if bad:
            return [Row(spec, family, n, Verdict.REFUTED, "the plan's shape, checked before Z3", 0.0, bad)
                    for n in RESHARD]
    count = sum(len(plans) for plans, _ in groups)
    what = "this configuration pair" if groups[0][1] is None else \
        f"this configuration pair across another cp or block size ({groups[0][1].k} small pages a big one)"
    rows = []
    for name in RESHARD:
        t0 = time.perf_counter()
        row = None
        for plans, cross in groups:
            for plan in plans:
                mx, my = _fresh(lib, family, store, load)
                violation, w = (_cover if name == "reshard-cover" else _match)(mx, my, plan, cross)
                status, model = solve_query(mx, my, violation, budget)
                if status != "unsat":
                    detail = _explain(name, mx, my, plan, model, w) if status == "sat" else \
                        f"undecided for consumer rank {plan.consumer}"
                    row = Row(spec, family, name, Verdict.REFUTED if status == "sat" else Verdict.UNKNOWN,
                              "symbolic byte, one configuration pair", time.perf_counter() - t0, detail)
                    break
            if row:
                break
        rows.append(row or Row(spec, family, name, Verdict.PROVED,
                               f"symbolic fragment and byte, {count} consumer plans of {what}",
                               time.perf_counter() - t0))
    return rows


def _not_one_format(lib, family: str, store: dict, load: dict, budget: Budget) -> list[Row]:
    """The rows of a pair whose pages are not shown one format at both configurations (a plan
    matches canonical indices, which must name one element of the engine's at both), else []."""
    if dict(store) == dict(load):
        return []
    from ..meaning import verdict
    status, why = verdict(lib, family, (store, load), budget)
    spec = lib.family_def(family).span.file
    return [Row(spec, family, n, status, "one-format at both configurations, symbolic rank and index", 0.0, why)
            for n in RESHARD] if why else []


def _producers(mx: Model, cross) -> int:
    """How many producers a plan may read: the ranks, or with small producers each rank's k parts."""
    return mx.r.world * (cross.k if cross is not None and cross.small == "producer" else 1)


def _fresh(lib, family, store, load) -> tuple[Model, Model]:
    return (Model(lib, family, tuple(Reading(lib, family, store).taken), sizes=store, tag="x."),
            Model(lib, family, tuple(Reading(lib, family, load).taken), sizes=load, tag="y."))


def _malformed(plans, mx: Model, my: Model, cross=None) -> Reason | None:
    """What makes the plans no plan of this pair at all (None when nothing): one per consumer
    rank of the load grid, each for the spec's own pages, runs of non-negative integers
    reading producers of the store grid."""
    from ....plans.reshard import DirectPlan, DirectRun
    if not all(isinstance(p, DirectPlan) and all(isinstance(r, DirectRun) for r in p.runs) for p in plans):
        return Reason(Check.PLAN, "the plans must be DirectPlans of DirectRuns")
    consumers = sorted(p.consumer for p in plans if type(p.consumer) is int)
    if len(consumers) != len(plans) or consumers != list(range(my.r.world)):
        return Reason(Check.PLAN, f"plans for consumer ranks {consumers}, expected one for each of the {my.r.world} ranks",
                      expected=tuple(range(my.r.world)), actual=tuple(consumers))
    for p in plans:
        if p.local_page_size_bytes != my.r.page("local") or p.producer_page_size_bytes != mx.r.page("local"):
            return Reason(Check.PLAN, f"consumer rank {p.consumer}: the plan is for {p.producer_page_size_bytes}-byte "
                          f"producer and {p.local_page_size_bytes}-byte consumer pages; the spec's are "
                          f"{mx.r.page('local')} and {my.r.page('local')} bytes")
        for k, r in enumerate(p.runs):
            if any(type(v) is not int or v < 0 for v in r) or r.producer >= _producers(mx, cross):
                return Reason(Check.PLAN, f"consumer rank {p.consumer}: run {k} {tuple(r)} is not non-negative integers "
                              f"reading one of the {_producers(mx, cross)} producers")
    return None


def _pick(m: Model, plan):
    """One fragment byte of one run of the plan, symbolic: (producer, src byte, dst byte)."""
    P, S, D, F, N, SS, DS = (m.fresh(n) for n in ("producer", "src", "dst", "size", "count", "sstride", "dstride"))
    pick = z3.Or(*[z3.And(P == r.producer, S == r.src_offset, D == r.dst_offset, F == r.fragment_size,
                          N == r.num_fragments, SS == r.src_stride, DS == r.dst_stride) for r in plan.runs])
    i, k = m.fresh("i"), m.fresh("k")
    return z3.And(pick, i >= 0, i < N, k >= 0, k < F), P, S + i * SS + k, D + i * DS + k, (P, S, D, i, k)


def _cover(mx: Model, my: Model, plan, cross=None):
    frag, p, src, dst, key = _pick(my, plan)
    frag2, _, _, dst2, key2 = _pick(my, plan)
    twice = z3.And(frag, frag2, z3.Or(*[a != b for a, b in zip(key, key2)]), dst == dst2)
    outside = z3.And(frag, z3.Or(dst < 0, dst >= my.r.page("local"), src < 0, src >= mx.r.page("local"),
                                 p < 0, p >= _producers(mx, cross)))
    total = sum(r.fragment_size * r.num_fragments for r in plan.runs)
    short = z3.BoolVal(total != my.r.page("local"))  # with no byte twice, the count says none is missed
    return z3.Or(twice, outside, short), Plan(dst=dst, src=src, p=p, twice=twice, outside=outside, total=total)


def _match(mx: Model, my: Model, plan, cross=None):
    frag, p, src, dst, _ = _pick(my, plan)
    dy, cdy = my.digits("")
    iy, ciy = my.index("local", "")
    by = my.fresh("b")
    dx, cdx = mx.digits("")
    ix, cix = mx.index("local", "")
    bx = mx.fresh("b")
    ey, ex = my.element(), mx.element()
    rank = p if cross is None or cross.small == "consumer" else p % cross.world  # (`mapping.virtual_rank`, of a Z3 term)
    here = [my.rank_of(dy) == plan.consumer, dst == my.r.offset("local", iy) + by, by >= 0, by < ey,
            mx.rank_of(dx) == rank, src == mx.r.offset("local", ix) + bx, bx >= 0, bx < ex]
    if cross is None:  # one page format: the same canonical byte
        cy, cx = my.canonical_byte(iy, dy) + by, mx.canonical_byte(ix, dx) + bx
        differ = cy != cx
    else:  # pages of another cp: the same canonical index, the small page's token shifted by its part
        differ, cy, cx, shift = _other_index(mx, my, iy, dy, ix, dx, by, bx, p, cross)
        t = cross.token
        return z3.And(frag, *cdy, *ciy, *cdx, *cix, *here, differ), \
            Plan(dst=dst, src=src, p=p, iy=iy, ix=ix, cy=cy, cx=cx, shift=shift, small=cross.small, token=t)
    return z3.And(frag, *cdy, *ciy, *cdx, *cix, *here, differ), Plan(dst=dst, src=src, p=p, iy=iy, ix=ix, cy=cy, cx=cx)


_STEPS: list | None = None  # while `recording`: (what, assertions, chain files, lemmas, answer, goal) of each query kept
_SHOWING: list = []  # what the query asked now shows where unsat (`showing`), innermost last


@contextmanager
def recording():
    """While on, each query `solve_query` answers unsat is kept as (what it shows, its assertions,
    the chain files and lemmas it rests on): the steps of a proof, each a file a second solver
    can re-check (`certificate_files.step_texts`)."""
    global _STEPS
    outer, _STEPS = _STEPS, []
    try:
        yield _STEPS
    finally:
        _STEPS = outer


@contextmanager
def showing(what, cut=None, applies=False):
    """What the queries asked inside show where unsat, for their recorded steps (words, or a
    function that makes them where a step is kept); `cut`, where given, makes what such a step
    rests on (`certificates.cuts`: instances, chain files, lemmas). With `applies`, a query
    answered sat is kept too: it shows where its assumptions hold (a case pair that applies)."""
    _SHOWING.append((what, cut, applies))
    try:
        yield
    finally:
        _SHOWING.pop()


def solve_query(mx: Model, my: Model | None, violation, budget: Budget):
    models = [m for m in (mx, my) if m is not None]
    given = [a for m in models for a in m.assumptions()] + [violation]
    # the definitions of the quotients these terms read, not those every earlier query made,
    # with the two readings' divisions of one shared size equal (one quotient): fewer
    # constraints, so unsat here is unsat with all of them; a model is looked for again with
    # every definition, so that a counterexample meets every condition the query ever had (the
    # theorems between quotients, monotonicity and the shared equalities, hold in every model
    # of the definitions: asking them again would only cost time, quadratic in the divisions)
    asked = given + models[0].ops.side_for(given, *[m.ops for m in models[1:]])
    res, s = _check_z3(budget, asked)
    if res == z3.sat:
        asked = given + [c for m in models for c in m.ops.definitions]
        res, s = _check_z3(budget, asked)
    if _STEPS is not None and (res == z3.unsat or (res == z3.sat and _SHOWING and _SHOWING[-1][2])):
        _record(models, asked, "unsat" if res == z3.unsat else "sat", len(given) - 1)  # (as answered: with
        # every definition, where that decided)
    return ("sat", s.model()) if res == z3.sat else ("unsat", None) if res == z3.unsat else ("unknown", None)


def _record(models: list, asked: list, answer: str = "unsat", goal: int | None = None) -> None:
    """Keep a query as a step (`answer` unsat; sat where its `showing` keeps those: a case pair
    that applies), with what it rests on where its `showing` says (`certificates.cuts`: instances
    asserted with their side conditions, chain files, lemmas) and the index of its violation
    among its assertions (`goal`)."""
    what, cut, _ = _SHOWING[-1] if _SHOWING else ("a query of the proof", None, False)
    what = what() if callable(what) else what  # (words made only where kept)
    found, chains, kinds = cut() if cut is not None and answer == "unsat" else ([], [], set())
    _STEPS.append((what, [*asked, *found, *models[0].ops.side_for(found, *[m.ops for m in models[1:]])],
                   chains, kinds, answer, goal))


def _check_z3(budget: Budget, constraints: list):
    return ask(constraints, budget.rlimit, budget.guard_s)


def _explain(name, mx, my, plan, model, w) -> str:
    def v(x):
        return value(model, x)

    who = f"consumer rank {plan.consumer}"
    if name == "reshard-cover":
        if z3.is_true(model.eval(w.twice, model_completion=True)):
            return f"{who}: local byte {v(w.dst)} is written twice"
        if z3.is_true(model.eval(w.outside, model_completion=True)):
            return (f"{who}: reads producer rank {v(w.p)} byte {v(w.src)} into local byte {v(w.dst)}, "
                    f"outside a page")
        return f"{who}: the plan writes {w.total} bytes of a {v(my.r.page('local'))}-byte local page"

    def idx(x):
        return ", ".join(f"{n}={v(t)}" for n, t in x.items())

    def canon(x):
        return f"canonical ({idx(x)})" if isinstance(x, dict) else f"canonical byte {v(x)}"
    part = ""
    if w.shift is not None:
        side = "consumer's" if w.small == "consumer" else "producer's"
        part = (f"; the {side} small page is the part of the big one at {w.token} + {v(w.shift)}, "
                f"so the two must differ by that")
    return (f"{who}: local byte {v(w.dst)} (spec index {idx(w.iy)}) holds {canon(w.cy)}, "
            f"but the plan reads producer {v(w.p)} byte {v(w.src)} (spec index {idx(w.ix)}), "
            f"which holds {canon(w.cx)}{part}")


# ---- pages of regions: each byte of a page lies in one region or pad (regions-tile-*) -----------

def _page_models(lib, family: str, sizes: dict, side: str) -> tuple[list, list]:
    """(region name, Model) of every data region and Model of every local pad, at `sizes`."""
    def model(part, k):
        return Model(lib, part, tuple(Reading(lib, part, sizes).taken), sizes=sizes, tag=f"{side}{k}.")
    data = [(lib.family_def(p).shard.region, model(p, k)) for k, p in enumerate(lib.parts_of(family))]
    pads = [p for p in lib.parts_of(family, pads=True) if p not in lib.parts_of(family) and not p.endswith("'")]
    return data, [model(p, len(data) + k) for k, p in enumerate(pads)]


def _in(m: Model, byte):
    """Constraints that `byte` is byte `b` of element `i` of `m`'s local layout (its region or pad)."""
    i, ci = m.index("local", "")
    b = m.fresh("b")
    return i, [*ci, byte == m.r.offset("local", i) + b, b >= 0, b < m.element()], b


def _prove_pages(lib, family, store, load, groups, budget) -> list[Row]:
    """reshard-cover and reshard-match for a family of pages, at one configuration pair. Every
    byte of a page lies in exactly one data region or pad (the regions-tile rows), so: a plan
    covers the consumer's data once when it writes no byte twice, no pad byte and as many
    bytes as the data regions hold; it matches when each byte it reads lies in the same region
    of the producer's page, at the same canonical byte (never in another region or a pad).
    Across another cp (`groups` of plans with their `_Cross`), "the same canonical byte" is
    the same canonical index of the region, its token shifted by the small page's part."""
    spec = lib.family_def(family).span.file
    try:
        xs, xpads = _page_models(lib, family, store, "x")
        ys, ypads = _page_models(lib, family, load, "y")
    except (ArithmeticError, LookupError, TypeError) as e:
        return [Row(spec, family, n, Verdict.UNKNOWN, f"the family does not apply at these configurations ({e})", 0.0)
                for n in RESHARD]
    for who, m in (("store", xs[0][1]), ("load", ys[0][1])):
        status = solve_query(m, None, z3.BoolVal(True), budget)[0]
        if status != "sat":
            return [Row(spec, family, n, Verdict.UNKNOWN, f"the family does not apply at the {who} configuration", 0.0)
                    for n in RESHARD]
    if not all(plans for plans, _ in groups):
        return [Row(spec, family, n, Verdict.UNKNOWN, "no consumer plan to check", 0.0) for n in RESHARD]
    rows = _not_one_format(lib, family, store, load, budget)
    if rows:
        return rows
    for plans, cross in groups:
        bad = _malformed(plans, xs[0][1], ys[0][1], cross)
        if bad:
            return [Row(spec, family, n, Verdict.REFUTED, "the plan's shape, checked before Z3", 0.0, bad) for n in RESHARD]
    data = sum(m.r.bytes_of(*m.r.layout("local")) for _, m in ys)
    count = sum(len(plans) for plans, _ in groups)
    what = "this configuration pair" if groups[0][1] is None else \
        f"this configuration pair across another cp or block size ({groups[0][1].k} small pages a big one)"
    rows = []
    for name in RESHARD:
        t0, found = time.perf_counter(), None
        for plan, cross in ((plan, cross) for plans, cross in groups for plan in plans):
            for violation, m1, m2, meaning in _page_violations(name, plan, xs, xpads, ys, ypads, data, cross):
                status, model = solve_query(m1, m2, violation, budget)
                if status != "unsat":
                    found = (status, f"consumer rank {plan.consumer}: {meaning}" if status == "sat" else
                             f"undecided for consumer rank {plan.consumer}")
                    break
            if found:
                break
        if found:
            rows.append(Row(spec, family, name, Verdict.REFUTED if found[0] == "sat" else Verdict.UNKNOWN,
                            "symbolic byte, one configuration pair", time.perf_counter() - t0, found[1]))
        else:
            rows.append(Row(spec, family, name, Verdict.PROVED, f"symbolic fragment and byte, every region and pad, "
                                                          f"{count} consumer plans of {what}",
                            time.perf_counter() - t0))
    return rows


def _page_violations(name, plan, xs, xpads, ys, ypads, data, cross=None):
    """(violation, model, other model, what it means) of each query the row asks."""
    my0, mx0 = ys[0][1], xs[0][1]
    if name == "reshard-cover":
        frag, p, src, dst, key = _pick(my0, plan)
        frag2, _, _, dst2, key2 = _pick(my0, plan)
        yield z3.And(frag, frag2, z3.Or(*[a != b for a, b in zip(key, key2)]), dst == dst2), my0, None, \
            "a local byte is written twice"
        yield z3.And(frag, z3.Or(dst < 0, dst >= my0.r.page("local"), src < 0, src >= mx0.r.page("local"),
                                 p < 0, p >= _producers(mx0, cross))), mx0, my0, "a byte outside a page is read or written"
        total = sum(r.fragment_size * r.num_fragments for r in plan.runs)
        yield z3.BoolVal(total != data), my0, None, f"the plan writes {total} bytes; the data regions hold {data}"
        for pad in ypads:
            frag, _, _, dst, _ = _pick(pad, plan)
            _, inside, _ = _in(pad, dst)
            yield z3.And(frag, *inside), pad, None, "the plan writes a byte of the local page's padding"
        return
    for ry, my in ys:
        for rx, mx in xs:
            frag, p, src, dst, _ = _pick(my, plan)
            dy, cdy = my.digits("")
            dx, cdx = mx.digits("")
            iy, in_y, by = _in(my, dst)
            ix, in_x, bx = _in(mx, src)
            rank = p if cross is None or cross.small == "consumer" else p % cross.world  # (`mapping.virtual_rank`, of a Z3 term)
            here = [frag, *cdy, *cdx, my.rank_of(dy) == plan.consumer, mx.rank_of(dx) == rank, *in_y, *in_x]
            if rx != ry:
                yield z3.And(*here), mx, my, f"a byte of region '{ry}' is read from region '{rx}' of the producer"
            elif cross is None:
                yield z3.And(*here, my.canonical_byte(iy, dy) + by != mx.canonical_byte(ix, dx) + bx), mx, my, \
                    f"a byte of region '{ry}' is read from a producer byte holding another canonical byte"
            else:
                yield z3.And(*here, _other_index(mx, my, iy, dy, ix, dx, by, bx, p, cross)[0]), mx, my, \
                    (f"a byte of region '{ry}' is read from a producer byte holding another canonical index "
                     f"(the {cross.small}'s small page is part of the big one along '{cross.token}')")
        for pad in xpads:
            frag, p, src, dst, _ = _pick(my, plan)
            iy, in_y, _ = _in(my, dst)
            _, in_pad, _ = _in(pad, src)
            yield z3.And(frag, *in_y, *in_pad), pad, my, f"a byte of region '{ry}' is read from the producer's padding"


def _other_index(mx: Model, my: Model, iy, dy, ix, dx, by, bx, p, cross):
    """Pages of another cp: (the two bytes name other canonical indices or other bytes of an
    element, the consumer's canonical index, the producer's, the token shift): the small
    page's token is shifted by the part of the big page it is."""
    cy, cx = my.r.shard(iy, dy), mx.r.shard(ix, dx)
    t = cross.token
    if cross.small == "consumer":
        shift = cross.part * my.r.extents("canonical")[t]
        same_token = cx[t] == cy[t] + shift
    else:
        shift = (p / cross.world) * mx.r.extents("canonical")[t]  # Z3 integer division: p >= 0
        same_token = cy[t] == cx[t] + shift
    return z3.Or(z3.Not(same_token), bx != by, *[cx[n] != cy[n] for n in cx if n != t]), cy, cx, shift

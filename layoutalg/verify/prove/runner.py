"""Which obligations are proved how, with counterexamples.

For each family and each path through its grid's cases:
0. `page-size`: the path applies somewhere: Z3 finds a configuration in the declared
   domain (`params.TABLE` and each `param`) where its guards hold and the local layout is the page (the
   runtime's own check). Such witnesses also seed the per-configuration steps, so a
   family that applies anywhere is exercised there. A path with no configuration at all
   is dead (the runtime never takes it); a family with no live path is refuted.
1. every other obligation, fully symbolic over the declared domain: unsat proves it for
   every size and rank; a counterexample found there is shown again at small sizes when
   Z3 finds one quickly;
2. where the whole domain is undecided within its budget: a hunt for counterexamples at
   small sizes, then symbolic rank on each configuration of that path; never on zero
   configurations (that is unknown, not proved).
Budgets are Z3 resource units (`rlimit`), so verdicts do not depend on the machine or
its load. A wall-clock guard remains as a last resort; a result reached under it is
marked not final and never cached.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import z3

from ...verdicts import Verdict
from ...compile.codegen import compile_family
from ...compile.compiled import GuardFailed
from ...errors import SpecError
from ...ir.family import resolve
from ...dsl.interpret import paths
from ...dsl.library import Library
from ...runtime.lower import TilingError, region_plan, run_plan, certify as certify_instance
from . import GUARD_S
from . import RLIMIT
from . import meaning
from .meaning import LAYOUT_CLAIM, PAD_CLAIM, claim_row
from .explain import names_used, where_in_spec, witness_config, explain
from .obligations import PAGE, PER_CONFIGURATION, SYMBOLIC, UNDECIDED, Budget, Model, EMPTY_BOX, box_empty, runs_query
from .obligations import query as _asked
from .registry import obligation
from .store import Row
from .at_sizes import first_reason, never_applies, structure_at_sizes, unserved_part
from .structural import Certificate, certify, page_tiles
from .configurations import SMALL, WITNESS, configurations_by_path, witnesses
from .witness import Witness
from .z3ops import bare_false


def query(m: Model, name: str, *extra):
    """(violation, witness terms) of obligation `name` on `m`: one-format's from `meaning` (its
    elements are the oracle's), every other row's from `obligations`."""
    return meaning.query(m) if obligation(name).query == "meaning" else _asked(m, name, *extra)

@dataclass(frozen=True)
class Budgets:
    full: Budget
    small: Budget
    config: Budget
    seeds: int = 3

    @staticmethod
    def of(rlimit: int = RLIMIT, guard_s: float = GUARD_S) -> "Budgets":
        return Budgets(Budget(rlimit, guard_s), Budget(max(1, rlimit // 20), guard_s),
                       Budget(max(1, rlimit // 10), guard_s))


def prove_applies(lib: Library, family: str, budgets: Budgets, quick: bool = False) -> tuple[Row, dict]:
    """The `page-size` row, and each path's status: 'live' (with witnesses), 'dead' or 'unknown'.

    A family applies only where its local layout holds exactly the runtime's page
    (`page_size`): the runtime checks it at every use, so a layout of the wrong size is
    never copied; this row shows the check can pass, with a configuration where it does.
    """
    t0 = time.perf_counter()
    spec = lib.family_def(family).span.file
    status, shown = {}, []
    for path in paths(lib, family):
        found, st = witnesses(lib, family, path, 1, budgets.config)
        status[path] = ("live", found) if found else ("dead" if st == "unsat" else UNDECIDED, [])
        if found and not shown:
            shown = found
    live = [p for p, (s, _) in status.items() if s == "live"]
    unknown = [p for p, (s, _) in status.items() if s == UNDECIDED]
    unserved = None if quick else unserved_part(lib, family, budgets)
    if live:
        used = names_used(lib, family)  # (once: it reads the family's files)
        example = ", ".join(f"{k}={v}" for k, v in shown[0].items() if k in used)
        dead = len(status) - len(live) - len(unknown)
        note = f"; {dead} of {len(status)} case(s) apply nowhere" if dead else ""
        note += f"; warning: part of the declared domain is never served: {unserved}" if unserved else ""
        how = "runtime page check" if quick or not _page_implied(lib, family, live, budgets) else \
            "symbolic: all sizes (the guards make the local layout the page)"
        return Row(spec, family, "page-size", Verdict.UNKNOWN if quick else Verdict.PROVED,
                   f"{how}; applies at {example}{note}", time.perf_counter() - t0), status
    elapsed = time.perf_counter() - t0
    if unknown:
        return Row(spec, family, "page-size", Verdict.UNKNOWN, "no configuration found within the budget",
                   elapsed), status
    return Row(spec, family, "page-size", Verdict.REFUTED, "symbolic sizes: no configuration", elapsed,
               never_applies(lib, family, budgets, unserved, WITNESS)), status


def _page_implied(lib: Library, family: str, live: list, budgets: Budgets) -> bool:
    """Whether the guards alone make the local layout exactly `page_size` bytes on every live path."""
    for path in live:
        m = Model(lib, family, path, page_guard=False)
        if m.solve(z3.Not(m.page_fits()), budgets.config)[0] != "unsat":
            return False
    return True


LEMMAS = tuple(n for n in obligation("writers-cover").parts if n is not None)
"""The rows whose queries are, word for word, parts 1-4 of writers-cover (part 0 is the count):
its registry entry's `parts`."""


def solve(m: Model, v, w: Witness, budget: Budget, seeds: int = 1, known: tuple = (), how=None):
    """`m.solve(v)`, or part by part where the query is a disjunction of parts (each gets the
    budget). `known[k]` true: part k is an obligation this run already proved for all sizes
    on this path, so it is not asked again. `how`: the obligation (`Model.solve`)."""
    parts = w.parts
    if not parts:
        return m.solve(v, budget, seeds, how)
    result = "unsat", None
    for k, part in enumerate(parts):
        if k < len(known) and known[k]:
            continue
        st, model = m.solve(part, budget, seeds, how)
        if st == "sat":
            return st, model
        if st == UNDECIDED:
            result = st, None
    return result


def _smaller(lib, family, name, path, extra, budgets, m, model, w):
    """The same violation at small sizes when Z3 finds one there quickly; else the one given."""
    small = Model(lib, family, path, bounds=SMALL)
    v2, w2 = query(small, name, *extra)
    st, model2 = solve(small, v2, w2, budgets.small, how=obligation(name))
    return (small, model2, w2) if st == "sat" else (m, model, w)


def prove_obligation(lib: Library, family: str, name: str, by_path: dict, budgets: Budgets,
                     quick: bool = False, fam=None, status: dict | None = None, proved: dict | None = None) -> Row:
    """One obligation on every case path. `proved` maps obligation -> the paths already proved
    for all sizes in this run; this row's own such paths are added to it."""
    proved = {} if proved is None else proved
    t0 = time.perf_counter()
    spec = lib.family_def(family).span.file
    asked = obligation(name)
    if asked.query == "digits" and fam is None:  # (its query reads the family IR)
        return Row(spec, family, name, Verdict.UNKNOWN, "not in normal form", 0.0)
    methods, proved_configs, undecided, guard = [], [], [], False
    for k, path in enumerate(paths(lib, family)):
        if status and status.get(path, ("live",))[0] == "dead":
            methods.append("dead")
            continue
        extra = (fam.variants[k], fam.atoms) if asked.query == "digits" else ()
        # the whole domain first: unsat proves it. A counterexample (from there, or from the
        # small-size hunt where the whole domain is undecided) is shown at small sizes if any.
        steps = ((SMALL, budgets.small),) if quick else ((None, budgets.full), (SMALL, budgets.small))
        decided = False
        for bounds, budget in steps:
            m = Model(lib, family, path, bounds=bounds)
            v, w = query(m, name, *extra)
            known = tuple(n is not None and path in proved.get(n, ()) for n in asked.parts) \
                if bounds is None else ()  # (its parts that are rows of their own: `Obligation.parts`)
            st, model = solve(m, v, w, budget, 1 if bounds is SMALL else budgets.seeds, known, asked)
            guard |= m.guard_hit
            if st == "sat" and _no_reference(name, model, w):
                return Row(spec, family, name, Verdict.UNKNOWN, "symbolic sizes, symbolic rank", time.perf_counter() - t0,
                           explain(lib, family, name, m, model, w), final=not guard)
            if st == "sat":
                if bounds is None:
                    m, model, w = _smaller(lib, family, name, path, extra, budgets, m, model, w)
                return Row(spec, family, name, Verdict.REFUTED, "symbolic sizes, symbolic rank",
                           time.perf_counter() - t0, explain(lib, family, name, m, model, w),
                           witness=witness_config(m, model))
            if st == "unsat" and bounds is None:
                methods.append("symbolic")
                proved.setdefault(name, set()).add(path)
                decided = True
                break
        if decided or quick:
            continue
        configs = by_path.get(path, [])
        done = 0
        for sizes in configs:
            m = Model(lib, family, path, sizes=sizes)
            v, w = query(m, name, *extra)
            st, model = solve(m, v, w, budgets.config, how=asked)
            guard |= m.guard_hit
            if st == "sat" and _no_reference(name, model, w):
                return Row(spec, family, name, Verdict.UNKNOWN, "symbolic rank, one configuration",
                           time.perf_counter() - t0, explain(lib, family, name, m, model, w), final=not guard)
            if st == "sat":
                return Row(spec, family, name, Verdict.REFUTED, "symbolic rank, one configuration",
                           time.perf_counter() - t0, explain(lib, family, name, m, model, w), witness=dict(sizes))
            if st == "unsat":
                proved_configs.append(sizes)
                done += 1
        if done == 0 or done < len(configs):  # zero witnesses prove nothing
            undecided.append(k)
        methods.append(f"{done} configurations")
    elapsed = time.perf_counter() - t0
    if quick:  # quick mode only hunts counterexamples: finding none proves nothing
        return Row(spec, family, name, Verdict.UNKNOWN, "quick mode: no counterexample on small sizes", elapsed)
    if undecided:
        return Row(spec, family, name, Verdict.UNKNOWN,
                   f"undecided in case(s) {', '.join(map(str, undecided))}: the symbolic query exceeded its "
                   f"budget and not every configuration of the case was proved", elapsed, final=not guard)
    live = [x for x in methods if x != "dead"]
    if not live:
        return Row(spec, family, name, Verdict.UNKNOWN, "no case of the family applies anywhere", elapsed)
    sym = live.count("symbolic")
    if sym == len(live):
        return Row(spec, family, name, Verdict.PROVED, "symbolic: all sizes, all ranks", elapsed, final=not guard)
    # an obligation for all sizes that held on sampled configurations only is not proved: the
    # runtime re-checks none of sequence-order, single-rank-identity or digits-match-spec, and
    # a spec may break it at a size no sample reaches
    rest = [str(k) for k, x in enumerate(methods) if x not in ("dead", "symbolic")]
    return Row(spec, family, name, Verdict.UNKNOWN,
               f"symbolic in {sym} of {len(live)} cases; symbolic rank on {len(proved_configs)} configurations "
               f"for the rest", elapsed, f"undecided for all sizes in case(s) {', '.join(rest)}: it holds on the "
               f"{len(proved_configs)} configurations checked, which shows nothing of the others",
               configurations=proved_configs, final=not guard)


def prove_runs(lib: Library, family: str, name: str, by_path: dict, budgets: Budgets, cf) -> Row:
    """A runs obligation on each configuration: the runs are what the lowering emits there."""
    t0 = time.perf_counter()
    spec = lib.family_def(family).span.file
    proved, guard = [], False
    for path, configs in by_path.items():
        for sizes in configs:
            text = ", ".join(f"{k}={v}" for k, v in sizes.items())
            try:
                inst = cf.evaluate(sizes)
                region = lib.family_def(family).shard.region if lib.family_def(family).page else None
                plan = region_plan(inst, region) if region else run_plan(certify_instance(inst))
            except GuardFailed as e:
                return Row(spec, family, name, Verdict.UNKNOWN, "the compiled family disagrees with the spec",
                           time.perf_counter() - t0, f"{where_in_spec(lib, family, name)}: the spec applies at "
                                                      f"{text} but the compiled family fails closed: {e}")
            except TilingError as e:
                return Row(spec, family, name, Verdict.REFUTED, "lowering certificate, one configuration",
                           time.perf_counter() - t0, f"{where_in_spec(lib, family, name)}: {e}, with {text}",
                           witness=dict(sizes))
            m = Model(lib, family, path, sizes=sizes)
            v, w = runs_query(m, name, inst, plan)
            status, model = m.solve(v, budgets.config)
            guard |= m.guard_hit
            if status == "sat":
                return Row(spec, family, name, Verdict.REFUTED, "symbolic rank, one configuration",
                           time.perf_counter() - t0, explain(lib, family, name, m, model, w), witness=dict(sizes))
            if status == UNDECIDED:
                return Row(spec, family, name, Verdict.UNKNOWN, f"undecided at {text}", time.perf_counter() - t0,
                           final=not guard)
            proved.append(sizes)
    if not proved:  # a check that finds nothing to check is not a pass
        return Row(spec, family, name, Verdict.UNKNOWN, "no configuration to check", time.perf_counter() - t0)
    order = paths(lib, family)  # numbered as prove_obligation numbers the cases
    unreached = [str(order.index(path)) if path in order else repr(path) for path, configs in by_path.items()
                 if not configs]
    if unreached:  # a live case no configuration exercised: its runs were never compared
        return Row(spec, family, name, Verdict.UNKNOWN, f"no configuration small enough to lower reaches live case(s) "
                   f"{', '.join(unreached)}; the others' runs match on {len(proved)} configurations",
                   time.perf_counter() - t0, configurations=proved, final=not guard)
    return Row(spec, family, name, Verdict.PROVED,
               f"symbolic rank on {len(proved)} configurations (per configuration: the runs are what the numeric "
               f"lowering emits there; digits-match-spec is their all-sizes counterpart)",
               time.perf_counter() - t0, configurations=proved, final=not guard)


def prove_page(lib: Library, family: str, budgets: Budgets, quick: bool = False, only=None) -> list[Row]:
    """A family of pages: every obligation of each data region's part (`family.region`, with
    'page' the whole page), then that the regions and pads tile both pages (`only`: as
    `prove_family`'s)."""
    parts = lib.parts_of(family)
    rows, found, asked = [], {}, _asking(only)
    tiling = [n for n in PAGE if asked(n)]
    for part in parts:  # (a page's tiling rests on its regions' digit tables)
        rows += prove_family(lib, part, budgets, quick, found if part == parts[0] else None,
                             None if only is None else {*only, *(["digits-match-spec"] if tiling else [])})
        if quick and any(r.status == Verdict.REFUTED for r in rows):
            return rows
    first = parts[0]
    applies = next((r for r in rows if r.family == first and r.obligation == "page-size"), None)
    spec = lib.family_def(family).span.file
    if applies is not None and applies.status == Verdict.REFUTED:
        return [_nowhere(r) for r in rows] + [Row(spec, family, n, Verdict.UNKNOWN, "the family applies nowhere", 0.0)
                                             for n in tiling]
    status, by_path = found.get("status", {}), found.get("by_path", {})  # the first region's: one grid, one page
    pads = [p for p in lib.parts_of(family, pads=True) if p not in parts]
    if not quick and (asked("digits-match-spec") or tiling):  # the concatenation argument reads the pads' digit tables
        rows += [safely(spec, pad, "digits-match-spec", lambda: _pad_digits(lib, pad, budgets)) for pad in pads]
    if not quick and asked("one-format"):  # the canonical page's size and places are its pads' too
        rows += [r for pad in pads if pad.endswith("'") for r in claim_row(spec, pad, resolve(lib, pad), PAD_CLAIM)]
    for name in tiling:
        t0 = time.perf_counter()
        try:
            cert = page_tiles(lib, family, name.split("-")[-1]) if not quick else None
        except (LookupError, TypeError, ValueError, ArithmeticError, RecursionError, SpecError) as e:
            cert = Certificate(Verdict.UNKNOWN, f"the concatenation argument failed: {type(e).__name__}: {e}")
        if cert is not None and cert.status == Verdict.PROVED and any(
                r.obligation == "digits-match-spec" and r.status != Verdict.PROVED for r in rows):
            cert = Certificate(Verdict.UNKNOWN, "a region's digit table is not shown to be the spec's")
        if cert is not None and cert.status == Verdict.PROVED:
            rows.append(Row(spec, family, name, Verdict.PROVED, cert.detail, time.perf_counter() - t0))
            continue
        # where the concatenation argument does not hold, the page is likely broken: Z3 hunts with
        # the small budget (each region pair is its own query) before the stated configurations
        hunt = Budgets(budgets.small, budgets.small, budgets.config, budgets.seeds)
        row = safely(spec, family, name, lambda: prove_obligation(lib, first, name, by_path, hunt, quick,
                                                                   None, status))
        if cert is not None and row.status != Verdict.REFUTED:
            row = Row(**{**asdict(row), "detail": (row.detail + "; " if row.detail else "") +
                         f"structural: {cert.detail}"})
        rows.append(Row(**{**asdict(row), "family": family}))
    return rows


def _pad_digits(lib: Library, pad: str, budgets: Budgets) -> Row:
    """`digits-match-spec` of a pad (`family.pad`, or `family.pad'` of the canonical page): its
    digit table gives the spec's offsets, for all sizes. No page assumption: the pad's part
    reads one page's layout with its own arguments. On a case path where the pad's box is
    empty at every size (`box_empty`), the row holds with nothing to read, and the method says
    so; elsewhere the query is asked, and an unsat that rests on a bare `false` among its side
    conditions (a digit dividing by a constant at most 0) proves nothing: unknown."""
    t0 = time.perf_counter()
    fam, spec = resolve(lib, pad), lib.family_def(pad).span.file
    empty = []
    for k, path in enumerate(paths(lib, pad)):
        if box_empty(Model(lib, pad, path, page_guard=False), budgets.full, budgets.seeds):
            empty.append(k)
            continue
        m = Model(lib, pad, path, page_guard=False)
        v, w = query(m, "digits-match-spec", fam.variants[k], fam.atoms)
        if any(bare_false(c) for c in m.ops.side):
            return Row(spec, pad, "digits-match-spec", Verdict.UNKNOWN, f"case {k}: its digit table divides by a constant "
                       f"at most 0 on a box that is not shown empty", time.perf_counter() - t0)
        st, model = m.solve(v, budgets.full, budgets.seeds, obligation("digits-match-spec"))
        if st == "sat":
            return Row(spec, pad, "digits-match-spec", Verdict.REFUTED, "symbolic sizes, symbolic rank",
                       time.perf_counter() - t0, explain(lib, pad, "digits-match-spec", m, model, w))
        if st != "unsat":
            return Row(spec, pad, "digits-match-spec", Verdict.UNKNOWN, f"undecided in case {k}", time.perf_counter() - t0,
                       final=not m.guard_hit)
    said = f" ({'case paths' if len(empty) > 1 else 'case path'} {', '.join(map(str, empty))}: {EMPTY_BOX})" \
        if empty else ""
    return Row(spec, pad, "digits-match-spec", Verdict.PROVED, f"symbolic: all sizes, all ranks{said}",
               time.perf_counter() - t0)


def prove_family(lib: Library, family: str, budgets: Budgets | None = None, quick: bool = False,
                 found: dict | None = None, only=None) -> list[Row]:
    """Every obligation of one family, plus its structural certificate. `found`, when given,
    receives each case path's status and configurations (a family of pages reuses its first
    region's for the page's own rows).

    `quick` hunts counterexamples only (small sizes, a few configurations) and stops at
    the first refutation: what the mutation tests need. It never reports "proved".
    `only` (obligation names) asks those rows alone, each as the whole table asks it: `page-size`
    (the case paths every row reads) always, and what a row's verdict rests on (a page's tiling
    rows rest on its regions' and pads' `digits-match-spec`).
    """
    budgets = budgets or Budgets.of()
    if lib.parts_of(family) != [family]:
        return prove_page(lib, family, budgets, quick, only)
    asked = _asking(only)
    rows = []
    t0 = time.perf_counter()
    spec = lib.family_def(family).span.file
    try:
        fam = resolve(lib, family)
    except SpecError as e:  # the runtime cannot compile it, so it applies nowhere: nothing to prove
        why = f"not in normal form: {e.message}"
        return [Row(spec, family, "structure", Verdict.UNKNOWN, "stride chains (sympy): all sizes",
                    time.perf_counter() - t0, why)][:int(asked("structure"))] + \
            [Row(spec, family, n, Verdict.UNKNOWN, "the runtime never applies a family it cannot compile", 0.0, why)
             for n in ("page-size", *filter(asked, SYMBOLIC + PER_CONFIGURATION))]
    cf = compile_family(fam) if fam is not None else None
    if fam is not None and not quick and asked("structure"):
        certs = [certify(fam, v) for v in fam.variants]
        bad = [c.detail for c in certs if c.status != Verdict.PROVED]
        rows.append(Row(spec, family, "structure", Verdict.UNKNOWN if bad else Verdict.PROVED,
                        "stride chains (sympy): all sizes", time.perf_counter() - t0, first_reason(bad)))
    claim = claim_row(spec, family, fam, LAYOUT_CLAIM) if fam is not None and not quick and asked("one-format") else []
    applies, status = safely(spec, family, "page-size", lambda: prove_applies(lib, family, budgets, quick),
                              lambda row: (row, {}))
    rows.append(applies)
    if applies.status == Verdict.REFUTED:  # a claim of no configuration checked nothing: not a proof
        return [_nowhere(r) for r in rows + claim] + [Row(spec, family, n, Verdict.UNKNOWN, "the family applies nowhere",
                                                         0.0) for n in filter(asked, SYMBOLIC + PER_CONFIGURATION)]
    by_path = configurations_by_path(lib, family, cf, status, budgets, 6 if quick else 24, 1 if quick else 8) \
        if fam is not None else {}
    if found is not None:
        found.update(status=status, by_path=by_path)
    if rows[0].obligation == "structure":
        rows[0] = structure_at_sizes(lib, family, rows[0], cf, by_path)  # (unchanged unless structure not proved)
    lemmas: dict = {}
    for name in filter(asked, SYMBOLIC):
        rows.append(safely(spec, family, name, lambda: prove_obligation(lib, family, name, by_path, budgets, quick,
                                                                         fam, status, lemmas)))
        if quick and rows[-1].status == Verdict.REFUTED:
            return rows
    if lib.family_def(family).sequence is not None and asked("sequence-order"):  # the claim pages of another cp are converted by
        rows.append(safely(spec, family, "sequence-order", lambda: prove_obligation(
            lib, family, "sequence-order", by_path, budgets, quick, fam, status, lemmas)))
        if quick and rows[-1].status == Verdict.REFUTED:
            return rows
    # pages read under another configuration than the writer's
    if asked("one-format") and meaning.shared_paths(lib, family, fam):
        row = safely(spec, family, "one-format", lambda: one_format(lib, family, budgets, by_path, quick, fam,
                                                                     status, lemmas))
        if claim and row.status != Verdict.REFUTED:  # a refutation says more than a claim not shown
            row = claim[0] if claim[0].status != Verdict.PROVED else \
                Row(**{**asdict(row), "method": f"{row.method}; where claimed agnostic, {LAYOUT_CLAIM}"})
        rows.append(row)
        if quick and rows[-1].status == Verdict.REFUTED:
            return rows
    else:  # pages only their writer's configuration reads, but for what the claim says (none not asked)
        rows += claim
    for name in filter(asked, PER_CONFIGURATION):
        if fam is None:
            rows.append(Row(spec, family, name, Verdict.UNKNOWN, "not lowered", 0.0))
            continue
        row = safely(spec, family, name, lambda: prove_runs(lib, family, name, by_path, budgets, cf))
        if quick and row.status == Verdict.PROVED:  # a handful of configurations is a hunt, not a proof
            row = Row(spec, family, name, Verdict.UNKNOWN, "quick mode: no counterexample on a few configurations",
                      row.seconds)
        rows.append(row)
        if quick and row.status == Verdict.REFUTED:
            return rows
    if applies.status != Verdict.PROVED:  # no configuration shown to apply: a proof may hold of nothing
        rows = [r if r.obligation in ("structure", "page-size") else
                _nowhere(r, "no configuration was found where the family applies (page-size undecided): not shown "
                            "to hold of any") for r in rows]
    return rows


def _asking(only):
    """Whether a row is asked: every row, or those `only` names (`prove_family`)."""
    return (lambda name: True) if only is None else (lambda name: name in only)


def one_format(lib: Library, family: str, budgets: Budgets, by_path: dict | None = None, quick: bool = False,
               fam=None, status: dict | None = None, proved: dict | None = None) -> Row:
    """The `one-format` row: on every case path whose pages another configuration reads
    (`meaning.shared_paths`), each canonical byte holds the element it holds on a single rank holding the
    page (`prove.meaning`); unknown where no path's pages are read elsewhere (nothing shown)."""
    fam = resolve(lib, family) if fam is None else fam
    shared = meaning.shared_paths(lib, family, fam)
    if not shared:
        return Row(lib.family_def(family).span.file, family, "one-format", Verdict.UNKNOWN,
                   "no case's pages are read under another configuration", 0.0)
    dead = {**(status or {}), **{p: ("dead", []) for p in paths(lib, family) if p not in shared}}
    try:
        return prove_obligation(lib, family, "one-format", by_path or {}, budgets, quick, fam, dead, proved)
    except LookupError as e:  # an element the engine does not name (the spec's own arithmetic): no proof
        return Row(lib.family_def(family).span.file, family, "one-format", Verdict.UNKNOWN,
                   "the engine's names of its elements", 0.0, str(e))


def _no_reference(name: str, model, w: Witness) -> bool:
    """A `one-format` violation that finds no single-rank reading to compare with: unknown."""
    if obligation(name).query != "meaning":
        return False
    return meaning.no_reference(model, w)


def _nowhere(row: Row, why: str = "the family applies nowhere: no configuration to hold of") -> Row:
    """`row` of a family that applies nowhere (or, `why`, is not shown to apply anywhere): a claim
    proved "for all sizes" may hold of no configuration the family serves, so it is unknown, saying so."""
    if row.status != Verdict.PROVED:
        return row
    return Row(**{**asdict(row), "status": Verdict.UNKNOWN, "detail": f"holds of the spec's tables, but {why}"})


def safely(spec: str, family: str, name: str, prove, wrap=lambda row: row):
    """`prove()`, or an unknown row saying what stopped it: a spec the reader cannot take
    (say, one the compiler rejects) gets an honest row, never a traceback."""
    try:
        return prove()
    except (LookupError, TypeError, ValueError, ArithmeticError, RecursionError, AttributeError, SpecError,
            z3.Z3Exception) as e:
        text = str(e).splitlines()[0] if str(e) else ""
        return wrap(Row(spec, family, name, Verdict.UNKNOWN, "not checked: the spec's direct reading failed", 0.0,
                        f"{type(e).__name__}: {text}"))


def to_json(rows: list[Row]) -> list[dict]:
    return [asdict(r) for r in rows]

"""Rows settled at concrete sizes: where a symbolic argument stops short, a configuration.

- `structure_at_sizes`: a `structure` row sympy could not show is refuted where the runtime's
  lowering fails at a configuration the family applies at and the spec, read element by
  element there, does not tile (`verify.collision`): ranks, indices, byte, clause.
- `unserved_part`: configurations the guards admit whose grid is not the worker group
  (`world` other than tp * pcp): the runtime never serves them, so the `page-size` row says so.
"""
from __future__ import annotations

import itertools

import z3

from ...verdicts import Check, Reason, Verdict
from ... import params
from ...compile.compiled import GuardFailed
from ...dsl.interpret import paths
from ...dsl.library import Library
from ...runtime.lower import TilingError, lower
from ..collision import CLAUSE, SEARCHES, spec_line, tiling_counterexample
from ..samples import configurations, fitted_instance, sample_domain
from .explain import sizes_text, where_in_spec
from .obligations import Model, value
from .store import Row


def first_reason(reasons: list) -> str:
    """The first reason, and how many cases give another (a long list of chains is no help)."""
    reasons = list(dict.fromkeys(reasons))
    more = len(reasons) - 1
    return reasons[0] + (f" (and {more} other reason(s) in other cases)" if more else "") if reasons else ""


STRUCTURE_SAMPLES = 4096
"""Most sample configurations a structure row not shown for all sizes is lowered at, for a counterexample."""


def structure_at_sizes(lib: Library, family: str, row: Row, cf, by_path: dict) -> Row:
    """A structure row not shown for all sizes, refuted where the runtime's lowering fails at a
    configuration the family applies at (its path configurations, then `check`'s samples) and
    the spec, read element by element there, does not tile (`collision`): the chain's failure
    said as ranks, indices and bytes. Otherwise (a row proved, or of another obligation) the row as it was."""
    if row.obligation != "structure" or row.status == Verdict.PROVED:
        return row
    searched = 0
    tried = itertools.islice(itertools.chain((s for c in by_path.values() for s in c),
                                             configurations(sample_domain(lib, cf))), STRUCTURE_SAMPLES)
    for sizes in tried:
        try:
            inst, sizes = fitted_instance(cf, sizes)
            lower(inst)
            continue
        except TilingError:
            pass
        except (GuardFailed, ArithmeticError, LookupError, ValueError):
            continue
        searched += 1
        if searched > SEARCHES:
            break
        found = tiling_counterexample(lib, family, sizes)
        if found is not None:
            clause, why = found
            read = {b.name for b in cf.bounds} | set(params.PARALLEL)
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in read)
            return Row(row.spec, row.family, row.obligation, Verdict.REFUTED, "the spec read element by element at "
                       "one configuration", row.seconds, f"{spec_line(lib, family, clause)}: {why}, with {shown}; "
                       f"look at the {CLAUSE[clause]}", witness=dict(sizes))
    return row


def unserved_part(lib: Library, family: str, budgets) -> Reason | None:
    """None unless the family's guards admit a configuration whose grid is not the worker group
    (its world is not tp * pcp): the runtime never serves it, so no row proved there counts.
    Says the grid's `world` and a witness. A grid whose world is tp * pcp as written asks Z3 nothing."""
    for path in paths(lib, family):
        m = Model(lib, family, path, world_guard=False)
        try:
            if z3.is_true(z3.simplify(m.served())):
                continue  # its world is the group's, as written
            m.touch()
            status, model = m.solve(z3.Not(m.served()), budgets.config)
        except (ArithmeticError, LookupError, TypeError):
            continue
        if status == "sat":
            world = value(model, m.r.world)
            return Reason(Check.GROUP, f"where its guards hold, its grid's world ({world} ranks) is not the worker "
                          f"group the runtime runs (tp * pcp ranks, times pp for a stage grid, one that reads pp), "
                          f"e.g. at {sizes_text(m, model)}", family=family, actual=world)
    return None


def never_applies(lib: Library, family: str, budgets, unserved: Reason | None, bounds: dict) -> str:
    """Why no configuration passes: the grid is never the worker group (`unserved`), the page
    never fits, or the guards never hold (asked within `bounds`, small sizes for a readable witness)."""
    where = where_in_spec(lib, family, "page-size")
    if unserved:
        return f"{where}: the family never applies: {unserved}"
    for path in paths(lib, family):
        m = Model(lib, family, path, bounds=bounds, page_guard=False, compiled=False)  # the spec's guards alone
        page = m.r.page("local")  # before solving: its divisions bring definitions the model must obey
        status, model = m.solve(z3.BoolVal(True), budgets.config)
        if status == "sat":
            exact = Model(lib, family, path, bounds=bounds, page_guard=False)
            exact.touch()
            if exact.solve(z3.BoolVal(True), budgets.config)[0] == "unsat":
                return (f"{where}: the family never applies: where its guards hold, a '/' it reads (in its layouts, "
                        f"a page's regions and pads, the shard map or a `sequence` claim's token fn) is never exact, e.g. at "
                        f"{sizes_text(m, model)}")
            try:
                local = value(model, page)
                return (f"{where}: the family never applies: its local layout never holds exactly page_size bytes "
                        f"(e.g. {local} bytes with {sizes_text(m, model)}), and the runtime copies a page only "
                        f"where it does")
            except Exception:  # noqa: BLE001
                break
    return (f"{where}: the family never applies: no configuration in the declared domain satisfies its grid "
            f"cases and guards with the local layout exactly the page")

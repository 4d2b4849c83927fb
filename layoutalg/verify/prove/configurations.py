"""Which configurations a family's per-configuration rows are asked at: the sample values of
the names it reads, by case path (`sample_configurations`), topped up with Z3's witnesses of a
path's guards (`witnesses`) to a least number a live path (`configurations_by_path`); and the
capped bounds the prover's hunts and witnesses search (`SMALL`, `WITNESS`)."""
from __future__ import annotations

import itertools

import z3

from ... import params
from ...compile.compiled import GuardFailed
from ...dsl.interpret import Reading, paths
from ...dsl.library import Library
from ..samples import fitted_instance, sample_domain
from .obligations import Budget, Model, value


class _Capped(dict):
    """Bounds of every runtime name capped at `cap` (page_size at `page`): a dict that
    answers for names a spec declares too, capped the same way."""

    def __init__(self, cap: int, page: int):
        super().__init__()
        self.cap, self.page = cap, page

    def get(self, name, domain):
        lo, hi = domain
        return (lo, min(hi, self.page if name == "page_size" else max(lo, self.cap)))


SMALL = _Capped(8, 1 << 20)
"""Sizes for the counterexample hunt: small, so counterexamples are easy to read."""

WITNESS = _Capped(16, 1 << 24)
"""Sizes for witness configurations: small enough to lower and to enumerate."""


def sample_configurations(lib: Library, family: str, cf, limit: int = 48, wanted=None) -> dict[tuple, list[dict]]:
    """Configurations from the sample values of the names the family reads where it applies, by case path,
    the first `limit` of each in the samples' order. With `wanted` (case paths), the samples are read
    only until each of those has its `limit` (the paths a caller keeps: the others' are as found by then)."""
    out: dict[tuple, list[dict]] = {}
    wanted = None if wanted is None else set(wanted)
    if wanted is not None and not wanted:
        return out
    seen = set()
    samples = sample_domain(lib, cf)
    names = list(samples)
    for values in itertools.product(*(samples[n] for n in names)):
        try:
            inst, sizes = fitted_instance(cf, dict(zip(names, values)))
        except (GuardFailed, ArithmeticError):
            continue
        key = tuple(sorted(sizes.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            path = tuple(Reading(lib, family, sizes).taken)
        except (LookupError, ArithmeticError):
            continue
        group = out.setdefault(path, [])
        if len(group) < limit:
            group.append(sizes)
            if wanted is not None and len(group) == limit and path in wanted:
                wanted.discard(path)
                if not wanted:
                    break
    return out


def witnesses(lib: Library, family: str, path: tuple, n: int, budget: Budget, avoid=()) -> tuple[list[dict], str]:
    """Up to `n` configurations of one case path, found by Z3 as models of its guards.

    Small sizes are asked for first (every size at most 2, then 4, then 16), so the
    configurations are cheap to lower and easy to read; failing those, any size in the
    declared domain. Returns (configurations, status of the last query): 'unsat' with no
    configuration means the path applies nowhere in the domain.
    """
    found, status = [], "sat"
    m = Model(lib, family, path, bounds=_Capped(2, WITNESS.page))
    m.touch()
    other = lambda sizes: z3.Or(*[m.sizes[k] != v for k, v in sizes.items() if k in m.sizes])  # noqa: E731
    for cap in (2, 4, 16):
        m.rebound(_Capped(cap, WITNESS.page))  # (one model: its terms are the spec's whatever the bounds)
        block = [other(sizes) for sizes in [*avoid, *found]]
        while len(found) < n:
            status, model = m.solve(z3.And(*block) if block else z3.BoolVal(True), budget)
            if status != "sat":
                break
            found.append({k: value(model, v) for k, v in m.sizes.items()})
            block.append(other(found[-1]))
        if len(found) >= n:
            break
    if not found:  # nothing small: a path is dead only if nothing in the whole domain takes it
        m.rebound(None)
        status, model = m.solve(z3.BoolVal(True), budget)
        if status == "sat":
            found.append({k: value(model, v) for k, v in m.sizes.items()})
    return found, status


def configurations_by_path(lib: Library, family: str, cf, status: dict, budgets,
                           limit: int = 48, least: int = 8) -> dict[tuple, list[dict]]:
    """Per live path: sample configurations, topped up with Z3 witnesses to at least `least`."""
    # the paths kept below: the live ones, and any the status does not name (all, where the
    # page-size row could not be read)
    kept = [p for p in paths(lib, family) if p not in status or status[p][0] == "live"]
    by_path = sample_configurations(lib, family, cf, limit, kept)
    for path, (st, found) in status.items():
        if st != "live":
            by_path.pop(path, None)
            continue
        have = by_path.setdefault(path, [])
        if len(have) < least:
            extra, _ = witnesses(lib, family, path, least - len(have), budgets.config, avoid=have)
            have += [s for s in extra if s not in have and _lowerable(cf, s)]
    return by_path


def _lowerable(cf, sizes: dict) -> bool:
    """Small enough to lower and to state as one Z3 query per configuration."""
    try:
        inst = cf.evaluate(sizes)
    except GuardFailed:
        return True  # kept: prove_runs reports the disagreement with the spec
    return max(inst.local_page, inst.canonical_page) <= params.CHECK_PAGE_LIMIT and inst.world <= 4096

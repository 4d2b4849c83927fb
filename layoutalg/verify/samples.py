"""Which configurations of a family exist, and with what page: the sample values of every
runtime name, their product, and a family's instance at one of them with a page that fits.
`check` enumerates them; the prover takes its per-configuration steps and witnesses from them.
"""
from __future__ import annotations

import itertools

from .. import params
from ..compile.compiled import CompiledFamily, CompiledPage, GuardFailed, at_page, fitted_page, group_of, misfit
from ..dsl.library import Library
from ..verdicts import Check

DEFAULT_DOMAIN = params.SAMPLES
"""The configurations `check` enumerates for the built-in names (page_size is fitted to each)."""


def sample_domain(lib: Library, cf: CompiledFamily | None = None) -> dict:
    """The sample values of every runtime name the library knows, declared ones included.

    With `cf`, only the names the family reads are varied (the others keep their first
    sample): a name it never reads only multiplies the same configuration.
    """
    read = {b.name for b in cf.bounds} if cf is not None and cf.bounds else None
    return {n: p.samples if read is None or n in read else p.samples[:1]
            for n, p in lib.vocabulary().items() if n != "page_size"}


def configurations(domain: dict = DEFAULT_DOMAIN):
    names = list(domain)
    for values in itertools.product(*(domain[n] for n in names)):
        yield dict(zip(names, values))


class NeverServed(GuardFailed):
    """The family's guards hold but its grid's world is not the worker group (tp * pcp ranks):
    the runtime never serves such a configuration, whatever the page (`misfit`)."""


def fitted_instance(cf: CompiledFamily, sizes: dict):
    """The family's instance at `sizes`, with page_size chosen to fit its local layout.
    Raises `NeverServed` where its guards hold but its grid is not the worker group."""
    trial, later = [], [sizes.get("block_size", 1) * k for k in (3, 8)]  # (a family that reads no block_size: any page)
    try:
        trial.append(fitted_page(cf, {"block_size": 1, "head_size": 1, "dtype_bytes": 1, **sizes}))
        if isinstance(cf, CompiledPage):  # a page padded to the runtime's page: with room to spare too
            trial.append(trial[0] + 2 * sizes.get("block_size", 1))
    except (GuardFailed, ZeroDivisionError) as e:
        if isinstance(e, GuardFailed) and e.guard is not None and not isinstance(cf, CompiledPage) \
                and {"block_size", "head_size", "dtype_bytes"} <= sizes.keys() and e.guard in cf.page_free() \
                and not cf.outside_domain({**sizes, "page_size": later[-1]}):  # no page fits: the last one tried
            raise e from None  # below would fail so (a page's regions may fail otherwise at other pages: tried in turn)
    trial += later
    last = None
    for page in trial:
        try:
            inst, why = at_page(cf, sizes, page)
        except GuardFailed as e:
            last = e
            continue
        group = group_of(cf, sizes)
        if inst.world != group:  # no page fits a grid that is not the group
            raise NeverServed(misfit(inst, inst.local_page, group))
        if not why:  # what the runtime demands
            return inst, {**sizes, "page_size": page}
    raise last or GuardFailed("no page size fits the local layout", Check.PAGE)

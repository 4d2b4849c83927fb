"""Verification by enumeration: what `layoutalg check` runs on small configurations.

Two independent checks per configuration:
- tiling: each rank's runs cover its local page exactly once, and for every block the
  elected writers' runs cover the canonical page exactly once (interval arithmetic on
  the runs, as the reference does at start-up);
- oracle: the runs agree byte for byte with a direct reading of the spec text
  (`interpret.byte_map`), which shares no code with the algebra.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .compiled import CompiledFamily, GuardFailed
from .interpret import Reading, byte_map
from .library import Library
from .lower import TilingError, lower
from .mapping import CanonicalPageMapping

DEFAULT_DOMAIN = {
    "tp": (1, 2, 4), "pcp": (1, 2), "dcp": (1, 2), "interleave": (1, 2), "total_heads": (1, 2, 4),
    "heads": (1, 2), "block_size": (4,), "head_size": (4,), "dtype_bytes": (1, 2),
    "per_token_head_quant": (0,), "compress_ratio": (1,),
}
"""The configurations `check` enumerates (page_size is derived per configuration)."""


def _partition(intervals, size) -> str:
    """'' when intervals tile [0, size) exactly, else the first gap or overlap."""
    at = 0
    for lo, n in sorted(intervals):
        if lo > at:
            return f"bytes [{at}, {lo}) are not covered"
        if lo < at:
            return f"bytes [{lo}, {min(at, lo + n)}) are covered twice"
        at = lo + n
    return "" if at == size else (f"bytes [{at}, {size}) are not covered" if at < size
                                  else f"runs reach byte {at} past the page end {size}")


def tiling_errors(maps: tuple[CanonicalPageMapping, ...]) -> list[str]:
    """The reference's start-up check, on intervals of the runs."""
    errors = []
    for rank, m in enumerate(maps):
        why = _partition([(lo, n) for r in m.runs for lo, _, n in r.triples()], m.local_page_size_bytes)
        if why:
            errors.append(f"rank {rank}, local page: {why}")
    nw = maps[0].num_writers
    for block in range(nw):
        stored = [(co, n) for m in maps if m.is_writer(block) for r in m.runs for _, co, n in r.triples()]
        why = _partition(stored, maps[0].canonical_page_size_bytes)
        if why:
            errors.append(f"block {block}, canonical page: {why}")
    return errors


def configurations(domain: dict = DEFAULT_DOMAIN):
    names = list(domain)
    for values in itertools.product(*(domain[n] for n in names)):
        yield dict(zip(names, values))


def instantiate(cf: CompiledFamily, sizes: dict):
    """The family's instance at `sizes`, with page_size chosen to fit its local layout."""
    trial = []
    try:
        inst = cf.evaluate({**sizes, "page_size": 0})
        if inst.local_page > 0:
            trial.append(inst.local_page)
    except (GuardFailed, ZeroDivisionError):
        pass
    trial += [sizes["block_size"] * k for k in (3, 8)]
    last = None
    for page in trial:
        try:
            inst = cf.evaluate({**sizes, "page_size": page})
        except GuardFailed as e:
            last = e
            continue
        if inst.local_page == page:
            return inst, {**sizes, "page_size": page}
    raise last or GuardFailed("no page size fits the local layout")


def _variety(maps) -> tuple:
    """How much an example shows: distinct rank mappings, then ranks."""
    return len({m.runs for m in maps}), len(maps)


@dataclass
class FamilyReport:
    family: str
    certified: int = 0
    failed_closed: int = 0
    oracle_checked: int = 0
    errors: list = field(default_factory=list)
    example: tuple | None = None  # (sizes, mappings): the configuration whose ranks differ most


def check_family(lib: Library, cf: CompiledFamily, domain: dict = DEFAULT_DOMAIN,
                 oracle_limit: int = 40) -> FamilyReport:
    rep = FamilyReport(cf.name)
    for sizes in configurations(domain):
        try:
            inst, sizes = instantiate(cf, sizes)
        except GuardFailed:
            rep.failed_closed += 1
            continue
        where = ", ".join(f"{k}={v}" for k, v in sizes.items() if k in ("tp", "pcp", "dcp", "interleave",
                                                                       "total_heads", "heads", "dtype_bytes"))
        try:
            maps = lower(inst)
        except TilingError as e:
            rep.errors.append(f"{where}: {e}")
            continue
        rep.certified += 1
        if rep.example is None or _variety(maps) > _variety(rep.example[1]):
            rep.example = (sizes, maps)
        rep.errors += [f"{where}: {e}" for e in tiling_errors(maps)]
        if rep.oracle_checked < oracle_limit:
            rep.oracle_checked += 1
            reading = Reading(lib, cf.name, sizes)
            for rank, m in enumerate(maps):
                got = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
                if got != byte_map(reading, rank):
                    rep.errors.append(f"{where}: rank {rank}: runs differ from the spec's direct reading")
                    break
    return rep

"""Which two families of one kind can be offered one layer, for all sizes (Z3).

The runtime offers a layer to the families of its kind in turn; one whose guards hold, whose
local layout is the layer's page and whose grid is the worker group takes it. Two families
can both be offered one layer only at sizes where both hold at once: the same runtime names
(a layer gives one value of each), the same page, the same group. Where Z3 shows no such
sizes in the declared domain, the two are told apart for every size, whatever tensor the
layer brings. Where it finds some, they are configurations to compare the two families'
readings at (`recognition.confusions`), beside the library's samples: a look-alike pair
whose guards meet only at sizes no sample reaches (a head size of 576, say) is still met.

The tensors are not modelled here: a pair that can share a layer may still never share a
tensor; that is the byte-by-byte comparison's to find, at the configurations found.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import z3

from ..interpret import paths
from ..library import Library
from . import GUARD_S
from .obligations import Budget, Model, family_names, value
from .z3ops import check, solver

CAPS = (2, 4, 16)
"""Every size at most this, in turn, then any size whose page and group the comparison can
read (`MAX_PAGE`, `MAX_WORLD`): small configurations first, cheap to compare and to read."""
MAX_PAGE = 1 << 12
MAX_WORLD = 8
RLIMIT = 2_000_000
WITNESSES = 3
"""Configurations asked for a pair that can share a layer (each another than those before)."""


class Together(NamedTuple):
    """Whether families `first` and `second` can be offered one layer: 'apart' (no size in
    the declared domain serves both: Z3, all sizes), 'together' (with `found`, configurations
    where both apply, each a dict of runtime names), or 'unknown' (`why`)."""
    first: str
    second: str
    status: str
    found: tuple = ()
    why: str = ""


def _applies(lib: Library, family: str, sizes: dict, tag: str):
    """Z3: the family applies at `sizes` (Z3 terms, shared with the other family): some case
    path's guards, page and group hold. None where a path cannot be read (nothing is shown of
    it, so nothing may be concluded from its absence)."""
    part = lib.parts_of(family)[0]  # a page of regions: its first region's part reads the page's guards
    held = []
    for k, path in enumerate(paths(lib, part)):
        try:
            m = Model(lib, part, path, sizes=sizes, tag=f"{tag}{k}.")
            m.touch()
            held.append(z3.And(*m.assumptions(), *m.ops.side))
        except (ArithmeticError, LookupError, TypeError, z3.Z3Exception):
            return None
    return z3.Or(*held) if held else z3.BoolVal(False)


def _bounds(lib: Library, sizes: dict, cap: int | None, readable: bool = True) -> list:
    """The declared domain of every size, each at most `cap` where given; `readable`: with a
    page and a group the comparison can read."""
    vocab = lib.vocabulary()
    out = []
    for n, x in sizes.items():
        lo, hi = vocab[n].lo, vocab[n].hi
        out += [x >= lo, x <= (hi if cap is None else min(hi, max(lo, cap)))]
    if readable:
        out += [sizes["page_size"] <= MAX_PAGE, sizes["tp"] * sizes["pcp"] <= MAX_WORLD]
    return out


def _solve(given: list, budget: Budget):
    s = solver(budget.rlimit, budget.guard_s)
    s.add(*given)
    res, s = check(s, budget.rlimit, budget.guard_s)
    return ("sat", s.model()) if res == z3.sat else ("unsat", None) if res == z3.unsat else ("unknown", None)


def together(lib: Library, first: str, second: str, budget: Budget | None = None) -> Together:
    """Whether `first` and `second` (families of one kind) can be offered one layer."""
    sizes = _sizes(lib, (first, second))
    return _together(lib, first, second, _applies(lib, first, sizes, "a"), _applies(lib, second, sizes, "b"),
                     sizes, budget or Budget(RLIMIT, GUARD_S))


def _sizes(lib: Library, families) -> dict:
    """One Z3 variable a runtime name the families read (a layer gives each one value)."""
    names = set().union(*(family_names(lib, f) for f in families)) | {"page_size", "tp", "pcp"}
    return {n: z3.Int(n) for n in sorted(names & set(lib.vocabulary()))}


def _together(lib: Library, first: str, second: str, a, b, every: dict, budget: Budget) -> Together:
    if a is None or b is None:
        return Together(first, second, "unknown", why=f"a case of {first if a is None else second} cannot be read "
                                                      f"symbolically")
    reads = {n for f in (first, second) for n in family_names(lib, f)} | {"page_size", "tp", "pcp"}
    sizes = {n: x for n, x in every.items() if n in reads}
    status, _ = _solve([a, b, *_bounds(lib, sizes, None, readable=False)], budget)
    if status == "unsat":  # (most pairs: a word one requires and the other refuses)
        return Together(first, second, "apart")
    found: list = []
    for cap in (*CAPS, None):
        while len(found) < WITNESSES:
            block = [z3.Or(*[sizes[n] != v for n, v in f.items()]) for f in found]
            status, model = _solve([a, b, *_bounds(lib, sizes, cap), *block], budget)
            if status != "sat":
                break
            found.append({n: value(model, x) for n, x in sizes.items()})
        if len(found) >= WITNESSES:
            break
    if found:
        return Together(first, second, "together", tuple(found))
    if status == "sat":
        return Together(first, second, "unknown", why="they can be offered one layer only where its page is over "
                                                      f"{MAX_PAGE} bytes or its group over {MAX_WORLD} ranks, which "
                                                      f"are not compared byte by byte")
    return Together(first, second, "unknown", why="undecided whether any size serves both")


def pairs(lib: Library, families: dict) -> dict:
    """`together` of every two families of one kind (`families`: name -> compiled family; the
    fallback is no family of a kind), keyed by the pair of names in order."""
    from ..runtime import FALLBACK
    by_kind: dict = {}
    for cf in families.values():
        if cf.serves != FALLBACK:
            by_kind.setdefault(cf.serves, []).append(cf.name)
    kinds = [sorted(m) for m in by_kind.values() if len(m) > 1]
    sizes = _sizes(lib, [f for m in kinds for f in m])
    applies = {f: _applies(lib, f, sizes, f"{f}.") for m in kinds for f in m}  # each family read once
    budget = Budget(RLIMIT, GUARD_S)
    return {(x, y): _together(lib, x, y, applies[x], applies[y], sizes, budget) for m in kinds
            for x, y in itertools.combinations(m, 2)}

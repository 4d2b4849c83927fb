"""Which two families of one kind can be offered one layer, for all sizes (Z3).

The runtime offers a layer to the families of its kind in turn; one whose guards hold, whose
local layout is the layer's page and whose grid is the worker group takes it, where it
also finds the tensor it names. Two families can both take one layer only at sizes where
both hold at once: the same runtime names (a layer gives one value of each), the same page,
the same group, and, for two families each recognised by one tensor of named dims, one
tensor both accept (one shape, the block dim included, and the strides each checks). Where
Z3 shows no such sizes in the declared domain, the two are told apart for every size. Where
it finds some, they are configurations to compare the two families' readings at
(`recognition.confusions`), beside the library's samples: a look-alike pair whose guards
meet only at sizes no sample reaches (a head size of 576, say) is still met.

A family of pages, or one that names no tensor dims, is held to its guards alone here: the
byte-by-byte comparison finds whether its tensors meet another's, at the configurations found.
"""
from __future__ import annotations

import itertools
from typing import NamedTuple

import z3

from ...dsl.interpret import paths
from ...dsl.library import Library
from . import GUARD_S
from .obligations import Budget, Model, family_names, value
from .z3ops import ask

CAPS = (2, 4, 16)
"""Every size at most this, in turn, then any size whose page and group the comparison can
read (`MAX_PAGE`, `MAX_WORLD`): small configurations first, cheap to compare and to read."""
MAX_PAGE = 1 << 12
MAX_WORLD = 8
RLIMIT = 2_000_000
WITNESSES = 3
"""Configurations asked for a pair that can share a layer (each another than those before)."""


class Together(NamedTuple):
    """Whether families `first` and `second` can both take one layer: 'apart' (no size in the
    declared domain serves both, with one tensor where both name one: Z3, all sizes),
    'together' (with `found`, configurations where both apply, each a dict of runtime names),
    or 'unknown' (`why`)."""
    first: str
    second: str
    status: str
    found: tuple = ()
    why: str = ""


class _Applies(NamedTuple):
    """Z3: where a family takes a layer (`when`), and, for a family recognised by one tensor
    of named dims, that tensor's shape and strides as the runtime checks them (`tensor`:
    (outer dims, shape after the block dim, strides), each a Z3 variable the case taken
    sets), else None."""
    when: object
    tensor: tuple | None


def _applies(lib: Library, family: str, sizes: dict, tag: str, cf=None) -> _Applies | None:
    """Where the family applies at `sizes` (Z3 terms, shared with the other family): some case
    path's guards, page and group hold. None where a path cannot be read (nothing is shown of
    it, so nothing may be concluded from its absence). With `cf` (the compiled family) one
    recognised by a tensor of named dims also says that tensor (`runtime.derive._mismatch`)."""
    from ...compile.compiled import CompiledPage
    from .obligations import case_variant, size_to_z3
    part = lib.parts_of(family)[0]  # a page of regions: its first region's part reads the page's guards
    dims = len(cf.tensor) if cf is not None and not isinstance(cf, CompiledPage) else 0
    shape = [z3.Int(f"{tag}shape{d}") for d in range(dims)]
    stride = [z3.Int(f"{tag}stride{d}") for d in range(dims)]
    held = []
    for k, path in enumerate(paths(lib, part)):
        try:
            m = Model(lib, part, path, sizes=sizes, tag=f"{tag}{k}.")
            m.touch()
            said = []
            if dims:
                v, atoms = case_variant(lib, part, path)
                pos = {n: i for i, n in enumerate(v.local.indices)}
                said = [x == size_to_z3(m, atoms, v.local.extents[pos[n]]) for x, n in zip(shape, v.local.tensor)] + \
                    [x == size_to_z3(m, atoms, v.local.coefficients[pos[n]]) for x, n in zip(stride, v.local.tensor)]
            held.append(z3.And(*m.assumptions(), *said, *m.ops.side))
        except (ArithmeticError, LookupError, TypeError, z3.Z3Exception):
            return None
    when = z3.Or(*held) if held else z3.BoolVal(False)
    return _Applies(when, (cf.tensor_outer, shape, stride) if dims else None)


def _one_tensor(a: _Applies, b: _Applies, blocks) -> list:
    """Z3: one tensor both families accept (`runtime.derive._mismatch`): one shape, block dim and all,
    and the strides each checks (those of the dims after its block dim) alike where both
    check them. [] where either is not recognised by a tensor of named dims (nothing is said
    of the tensor: only the guards decide)."""
    if a.tensor is None or b.tensor is None:
        return []
    (ka, sa, ta), (kb, sb, tb) = a.tensor, b.tensor
    if len(sa) != len(sb):
        return [z3.BoolVal(False)]  # the runtime takes only a tensor of as many dims as the family names
    full_a, full_b = sa[:ka] + [blocks] + sa[ka:], sb[:kb] + [blocks] + sb[kb:]
    same = [x == y for x, y in zip(full_a, full_b)]
    # tensor dim d (d > k) has stride strides[d - 1] for a family whose block dim is k
    same += [ta[d - 1] == tb[d - 1] for d in range(max(ka, kb) + 1, len(sa) + 1)]
    return same


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
    res, s = ask(given, budget.rlimit, budget.guard_s)
    return ("sat", s.model()) if res == z3.sat else ("unsat", None) if res == z3.unsat else ("unknown", None)


def together(lib: Library, first: str, second: str, budget: Budget | None = None) -> Together:
    """Whether `first` and `second` (families of one kind) can be offered one layer."""
    from ...compile.codegen import compile_named
    sizes = _sizes(lib, (first, second))
    return _together(lib, first, second, _applies(lib, first, sizes, "a.", compile_named(lib, first)),
                     _applies(lib, second, sizes, "b.", compile_named(lib, second)), sizes,
                     budget or Budget(RLIMIT, GUARD_S))


def _sizes(lib: Library, families) -> dict:
    """One Z3 variable a runtime name the families read (a layer gives each one value)."""
    names = set().union(*(family_names(lib, f) for f in families)) | {"page_size", "tp", "pcp"}
    return {n: z3.Int(n) for n in sorted(names & set(lib.vocabulary()))}


def _together(lib: Library, first: str, second: str, a: _Applies | None, b: _Applies | None, every: dict,
              budget: Budget) -> Together:
    if a is None or b is None:
        return Together(first, second, "unknown", why=f"a case of {first if a is None else second} cannot be read "
                                                      f"symbolically")
    reads = {n for f in (first, second) for n in family_names(lib, f)} | {"page_size", "tp", "pcp"}
    sizes = {n: x for n, x in every.items() if n in reads}
    blocks = z3.Int("#blocks")  # (a name no runtime name can have: a spec may declare `blocks`)
    both = [a.when, b.when, *_one_tensor(a, b, blocks), blocks >= 1]
    status, _ = _solve([*both, *_bounds(lib, sizes, None, readable=False)], budget)
    if status == "unsat":  # (most pairs: a word one requires and the other refuses; else the tensor)
        return Together(first, second, "apart")
    found: list = []
    for cap in (*CAPS, None):
        while len(found) < WITNESSES:
            block = [z3.Or(*[sizes[n] != v for n, v in f.items()]) for f in found]
            status, model = _solve([*both, blocks <= 3, *_bounds(lib, sizes, cap), *block], budget)
            if status != "sat":
                break
            found.append({n: value(model, x) for n, x in sizes.items()})
        if len(found) >= WITNESSES:
            break
    if found:
        return Together(first, second, "together", tuple(found))
    if status == "unsat":  # the last query was the widest the comparison can read
        return Together(first, second, "unknown", why=f"they can take one layer only where its page is over {MAX_PAGE} "
                                                      f"bytes, its group over {MAX_WORLD} ranks or its tensor over 3 "
                                                      f"blocks, which are not compared byte by byte")
    return Together(first, second, "unknown", why="undecided whether a size the comparison can read serves both")


def pairs(lib: Library, families: dict) -> dict:
    """`together` of every two families of one kind (`families`: name -> compiled family; the
    fallback is no family of a kind), keyed by the pair of names in order."""
    from ..recognition import by_kind
    kinds = [sorted(cf.name for cf in m) for m in by_kind(families).values() if len(m) > 1]
    sizes = _sizes(lib, [f for m in kinds for f in m])
    applies = {f: _applies(lib, f, sizes, f"{f}.", families[f]) for m in kinds for f in m}  # each read once
    budget = Budget(RLIMIT, GUARD_S)
    return {(x, y): _together(lib, x, y, applies[x], applies[y], sizes, budget) for m in kinds
            for x, y in itertools.combinations(m, 2)}

"""The structural certificate: the tiling certificate (`tiling`) on the symbolic digit table.

With the guards as rewrite rules (`heads == total_heads / shards` replaces `heads`),
the three stride chains the lowering checks per configuration (local page, rank grid,
canonical page over every digit but the replicas) are shown here for all sizes: only
equalities are used, so sympy settles them at once. A chain that cannot be shown is
reported here as "not established" (unknown), by its digits' names; the runner refutes the
row only with a configuration where the spec, read element by element, does not tile
(`verify.collision`), never from sympy's failure alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ...verdicts import Verdict
from ...ir.claims import cases_text, claim_norm, claims_differ, unplaced_target
from ...ir.family import Family, Variant, guard_rewrites, guarded_equality
from ...ir.guards import rewrite
from ...ir.sizes import cancel
from ...algebra.tiling import broken, chains


@dataclass
class Certificate:
    status: Verdict  # proved | unknown
    detail: str

    def __post_init__(self):
        self.status = Verdict.of(self.status)


def certify(family: Family, v: Variant) -> Certificate:
    norm, eq = guarded_equality(family, v)

    local = [d for d in v.digits if not d.is_rank]
    ranks = [d for d in v.digits if d.is_rank]
    checks = chains(local, ranks, v.local.size_bytes(), v.world, v.canonical.size_bytes())
    if family.region is not None:  # a region need not be dense in its page: Z3's rows show it one-to-one
        checks = [c for c in checks if c.what == "rank grid"]
    why = broken(checks, eq)
    if why:
        return Certificate(Verdict.UNKNOWN, f"not established for all sizes: {why}")
    for t in v.targets:
        top = t.sum.base + sum(c * (sp.extent - 1) for sp, c in t.sum.terms)
        if not eq(top, t.extent - 1) or not _nonneg(norm(t.sum.base)) or \
                any(not _nonneg(norm(c)) for _, c in t.sum.terms):
            return Certificate(Verdict.UNKNOWN, f"canonical index {t.index}: range [base, {top}] not shown "
                                          f"to be [0, {t.extent})")
    if family.region is not None:
        return Certificate(Verdict.PROVED, "rank stride chain and canonical index ranges hold for all sizes")
    return Certificate(Verdict.PROVED, "local, rank and canonical stride chains hold for all sizes")


def _nonneg(x) -> bool:
    """Shown non-negative (False: not shown, never "negative")."""
    if not x.free_symbols:
        return bool(x >= 0)
    try:
        return bool(x.is_nonnegative) or all(c > 0 for c in sympy.Poly(sympy.numer(x)).coeffs())
    except (sympy.PolynomialError, sympy.GeneratorsNeeded, TypeError):
        return False



from ...params import MOVES_WITH_THE_GROUP  # noqa: E402 - beside the code that reads it


def agnostic_family(family: Family) -> Certificate | None:
    """`agnostic` for every case that claims it, and across them: where the claim holds in
    two cases, which case applies may itself depend on tp, so their canonical layouts must
    be one and the same. None when no case claims anything (there is nothing to show)."""
    claims = [v for v in family.variants if v.agnostic not in (False, sympy.false)]
    if not claims:
        return None
    for v in claims:
        c = agnostic(family, v)
        if c.status != Verdict.PROVED:
            return c
    differ = claims_differ(family)
    if differ:
        a, b, what = differ
        return Certificate(Verdict.UNKNOWN, f"agnostic is claimed both when {cases_text(a)} and when "
                                      f"{cases_text(b)}, but the {what} of those cases differ")
    return Certificate(Verdict.PROVED, f"the canonical page is built from no parallel quantity, and is the same "
                                 f"in all {len(claims)} case(s) that claim it")


def agnostic(family: Family, v: Variant) -> Certificate:
    """Where `agnostic when ...` holds, the canonical page may not depend on the parallel
    configuration: its layout (extents, strides, base, element) must be built, after the
    case's rewrites, from no name that moves with the group, nor a rank digit.

    Shown for all sizes with sympy; a dependence that is only not shown to cancel is
    reported as not established (unknown), never as refuted.
    """
    if v.agnostic in (False, sympy.false):
        return Certificate(Verdict.PROVED, "not claimed in this case")
    # reason where the claim holds: its equalities rewrite like the case's own (cp == 1
    # makes dcp and pcp 1), so a claim that contradicts the case leaves nothing to show
    norm = claim_norm(family, v)
    c = v.canonical
    moving = {sympy.Symbol(n, integer=True) for n in MOVES_WITH_THE_GROUP} | \
        {sympy.Symbol(n) for n in v.rank_digits} | {sympy.Symbol(n, integer=True) for n in v.rank_digits}
    page, assumed = _page_moves(family, v, norm, moving)
    moving |= page
    for what, x in [*((f"extent of '{i}'", e) for i, e in zip(c.indices, c.extents)),
                    *((f"stride of '{i}'", k) for i, k in zip(c.indices, c.coefficients)),
                    ("element size", c.element), ("base", c.base)]:
        free = family.atoms.expand(norm(x)).free_symbols
        free |= {s for a in _atoms_in(family, norm(x)) for s in a}
        hit = sorted(str(s) for s in free & moving)
        if hit:
            cases = " and ".join(g.text.removeprefix("case ") for g in v.cases)
            where = f" (when {cases})" if cases else ""
            return Certificate(Verdict.UNKNOWN, f"agnostic is claimed{where} but the canonical {what} is "
                                          f"{norm(x)}, which depends on {', '.join(hit)}")
    unplaced = unplaced_target(family, v, norm)  # after the layout: a layout that moves is the first finding
    if unplaced:
        return Certificate(Verdict.UNKNOWN, f"agnostic is claimed but canonical index '{unplaced[0]}' could hold other "
                                      f"engine elements in other configurations: {unplaced[1]}{unplaced[2]}")
    return Certificate(Verdict.PROVED, "the canonical page is built from no parallel quantity" + (
        f"; the runtime's page (page_size) is read as a model size: {assumed}" if assumed else ""))


def _page_moves(family: Family, v: Variant, norm, moving: set) -> tuple[set, str]:
    """The runtime's page is per rank, so it moves with the group unless the family's local
    layout says otherwise: ({page_size} and '') where the local page is built from a moving
    name (or, a region of a page, cannot be told here), (set(), why it does not) where the
    local page is the page itself, from nothing that moves (MLA's latent, the same on every
    rank). The runtime applies a family only where its local layout is exactly the page."""
    symbols = {sympy.Symbol("page_size", integer=True), sympy.Symbol("page_size")}
    if family.region is not None or "." in family.name:  # a region's or a pad's part: the page is all of them
        return symbols, ""
    size = v.local.size_bytes()
    free = family.atoms.expand(norm(size)).free_symbols | {s for a in _atoms_in(family, norm(size)) for s in a}
    forms = {sympy.srepr(guarded_equality(family, w)[0](w.local.size_bytes())) for w in family.variants}
    if free & moving or len(forms) > 1 or _page_tied(family, moving, symbols):  # (another case, another page)
        return symbols, ""
    return set(), f"the local page, {size}, is built from no parallel quantity, and no guard ties it to one"


def _page_tied(family: Family, moving: set, page: set) -> bool:
    """Whether a guard or case ties page_size to the configuration: one that reads it beside a
    name that moves, or guards on it that differ from case to case (`case tp == 1` with
    `page_size == 2 * block_size`, `case tp == 2` with 3): either way the page is a function
    of the group, not of the model."""
    seen = None
    for w in family.variants:
        subs, keys = guard_rewrites(w, family.atoms), set()
        for g in (*w.cases, *w.guards):
            c = family.atoms.expand(sympy.sympify(g.cond))
            c = rewrite(c, subs)  # the case's own rewrites (its lets are already values)
            free = c.free_symbols | {s for a in _atoms_in(family, c) for s in a}
            if free & page:
                if free & moving:
                    return True
                keys.add(sympy.srepr(c))
        if seen is not None and keys != seen:
            return True
        seen = keys
    return False


def _atoms_in(family: Family, x) -> list[set]:
    """The free symbols of every division atom in `x`, unfolded to any depth."""
    out, todo, seen = [], list(getattr(x, "free_symbols", ())), set()
    while todo:
        s = todo.pop()
        if s in seen or s not in family.atoms.by_symbol:
            continue
        seen.add(s)
        a = family.atoms.by_symbol[s]
        syms = a.num.free_symbols | a.den.free_symbols
        out.append(syms)
        todo.extend(syms)
    return out



def page_tiles(lib, family: str, role: str, case: int | None = None, values: dict | None = None) -> Certificate:
    """The regions and pads of a family's `role` page tile it, for all sizes (sympy); with
    `case` only in that case, and with `values` (names to ints: a configuration) only there.

    In every case: the modes all regions share (same extent, same stride) are set aside;
    what is left of each region must be dense from its base, the regions must follow each
    other in the order written from byte 0, and the shared modes must continue where they
    end, up to the page's size (the regions' bytes together). A page laid out any other way
    is "not established" here (Z3 decides it). A data region's canonical side is its writers'
    image (local digits and non-replica rank digits), as stored for one block."""
    from ...ir.family import resolve
    canonical = role == "canonical"
    data = lib.parts_of(family)
    page = lib.parts[data[0]].page[1 if canonical else 0]
    by_region = {}
    for p in lib.parts_of(family, pads=True):
        if p in data:
            by_region[lib.parts[p].shard.region] = resolve(lib, p)
        elif p.endswith("'") == canonical:
            by_region[p.split(".", 1)[1].rstrip("'")] = resolve(lib, p)
    order = [r.split(".", 1)[1] for r in lib.pages[page]]
    if len({len(f.variants) for f in by_region.values()}) != 1:
        return Certificate(Verdict.UNKNOWN, "the regions' parts take different numbers of grid cases")
    for k in range(len(by_region[order[0]].variants)):
        if case is not None and k != case:
            continue
        regions, total = [], sympy.Integer(0)
        for name in order:
            fam = by_region[name]
            v = fam.variants[k]
            norm, _ = guarded_equality(fam, v)
            if values:
                norm = _at(fam, values, norm)
            local = [d for d in v.digits if not d.is_rank]
            if canonical and fam.region is not None:
                owners = local + [d for d in v.digits if d.is_rank and not d.replica]
                modes, base, size = [(d.extent, d.canonical) for d in owners], v.canonical_base, v.canonical.size_bytes()
            else:
                modes, base, size = [(d.extent, d.local) for d in local], v.local_base, v.local.size_bytes()
            regions.append((name, _coalesced([(norm(n), norm(x)) for n, x in modes if norm(n) != 1]), norm(base)))
            total += norm(size)
        why = _concatenated(regions, sympy.expand(total))
        if why:
            text = " and ".join(g.text.removeprefix("case ") for g in v.cases) or "always"
            return Certificate(Verdict.UNKNOWN, f"when {text}: {why}")
    return Certificate(Verdict.PROVED, f"the {role} page's regions and pads follow each other in the order written, "
                                 f"under the modes they share (sympy): all sizes")


def _at(fam: Family, values: dict, norm):
    """`norm` with `values` put in first, each division of numbers then a number."""
    return lambda x: norm(fam.atoms.put_in(x, values, sympy.expand))


def _same(a, b) -> bool:
    return a == b or cancel(a - b) == 0


def _coalesced(modes: list) -> list:
    """Merge every mode into one it continues (stride = the other's stride times its extent),
    so a token index cut into interleave digits in one region matches it whole in another."""
    modes = list(modes)
    merged = True
    while merged:
        merged = False
        for i, j in ((i, j) for i in range(len(modes)) for j in range(len(modes)) if i != j):
            (n, s), (m, t) = modes[i], modes[j]
            if _same(t, sympy.expand(s * n)):
                modes[i] = (sympy.expand(n * m), s)
                modes.pop(j)
                merged = True
                break
    return modes


def _take(modes: list, stride):
    """Remove and return the extent of the mode of `stride` (None when there is none)."""
    j = next((j for j, (_, s) in enumerate(modes) if _same(s, stride)), None)
    return None if j is None else modes.pop(j)[0]


def _shared(regions) -> list:
    """The modes every region of `regions` has (same extent, same stride)."""
    return [m for m in regions[0][1] if not _same(m[1], 1)  # a region's own dense bytes are never set aside:
            # regions alike inside (a head's K stretch, then its V stretch) follow each other under what is outer
            and all(any(_same(m[0], n) and _same(m[1], s) for n, s in r[1]) for r in regions[1:])]


def _dense(modes: list):
    """The size of modes that walk a stride chain from 1 (a dense block), else why not."""
    modes, run = list(modes), sympy.Integer(1)
    while modes:
        n = _take(modes, run)
        if n is None:
            return f"no mode of stride {run}"
        run = run * n
    return run


def _union(regions):
    """`(modes, base)` of consecutive regions that share modes: under those, each region must be
    dense and follow the one before it; the union is the shared modes over the bytes they fill.
    A string says what is not shown."""
    common = _shared(regions) if len(regions) > 1 else []
    at = regions[0][2]
    for name, modes, base in regions:
        rest = list(modes)
        for n, s in common:
            j = next((j for j, (n2, s2) in enumerate(rest) if _same(n, n2) and _same(s, s2)), None)
            if j is None:
                return f"region '{name}' repeats a mode the others have once"
            rest.pop(j)
        if not _same(base, at):
            return f"region '{name}' starts at {base}, not where the one before it ends ({at})"
        if len(regions) == 1:
            return _coalesced(rest), base
        size = _dense(rest)
        if isinstance(size, str):
            return f"region '{name}' is not dense under the modes it shares ({size})"
        at = sympy.expand(at + size)
    return _coalesced(common + [(sympy.expand(at - regions[0][2]), sympy.Integer(1))]), regions[0][2]


def _concatenated(regions, total) -> str:
    """'' when the regions `(name, modes, base)` tile a page of `total` bytes, else what is not
    shown: consecutive regions that share modes (a conv state's rows of x | B | C) are first
    joined into one; then every joined group must be dense and follow the one before it."""
    groups, current = [], [regions[0]]
    for r in regions[1:]:
        if _shared(current + [r]):
            current.append(r)
        else:
            groups.append(current)
            current = [r]
    groups.append(current)
    at = sympy.Integer(0)
    for group in groups:
        joined = _union(group)
        if isinstance(joined, str):
            return joined
        modes, base = joined
        names = ", ".join(f"'{g[0]}'" for g in group)
        if not _same(base, at):
            return f"region(s) {names} start at {base}, not where the ones before end ({at})"
        size = _dense(modes)
        if isinstance(size, str):
            return f"region(s) {names} are not dense ({size})"
        at = sympy.expand(at + size)
    return "" if _same(at, total) else f"the regions fill {at} bytes of a {total}-byte page"

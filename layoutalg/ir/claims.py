"""Claims about canonical indices: which sizes a canonical layout's numbers fix, and whether a
case's canonical indices name the engine's elements.

Two configurations whose canonical layouts have the same numbers hold one page format only
where each canonical index names one and the same element of the model in both: an `agnostic`
claim says so of every configuration of a case, `names_data` of one configuration at a time.
Both rest on one reading of the shard map's targets (`unplaced_target`): a target may read the
local indices and the sizes the canonical numbers fix; a target written as one of the grid's
fns (`head(h)`) is the engine's own name for the element (the grid's word on which rank holds
which element), and only its index arguments are held to that rule.

A size is fixed by the canonical numbers when its value follows from theirs: a name alone, a
number times powers of names whose other names are fixed and nonzero (`_fixed`), or a product
of powers of positive names that is a product of rational powers of the canonical sizes
(`ssm_heads * ssm_head_dim / tp` under a canonical extent `ssm_heads * ssm_head_dim`, with tp
the configuration's own: `_Fixing`).
"""

from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction
from typing import NamedTuple

import sympy

from .guards import guarded_equality
from .resolved import Family, Guard, Target, Variant
from .itersum import IterSum
from .sizes import cancel
from ..params import MOVES_WITH_THE_GROUP


def unplaced_target(family: Family, v: Variant, norm=None) -> tuple[str, str, str] | None:
    """(canonical index, why, how to write it instead or "") of the first target of `v` whose value could differ between two
    configurations of one model, else None. `norm` rewrites sizes under the case's claims
    (default: under its `agnostic` claim).

    A target is the same function of the local indices in every configuration when it reads
    no rank digit, and no size the canonical layout's numbers do not fix (`_Fixing`), in its
    base, its coefficients, where it cuts an index (`d // tp`) or where it wraps one short of
    its box (`d % w`). A target written as the grid's placement (`head(h)`) names the element
    as the engine does, whatever its body reads (the grid's word: `token(t)` deals tokens by
    cp); only its index arguments are held to the rule (`head(heads - 1 - h)` is not). A
    size counts as fixed read under the guards or as written: `n_side` fixes itself even
    where a guard writes it `m_f * k_f`, but `w * g` fixes neither w nor g."""
    if norm is None:
        norm = claim_norm(family, v)
    c = v.canonical
    sizes_of = (*c.extents, *c.coefficients, c.base, c.element)
    moving = frozenset({*MOVES_WITH_THE_GROUP, *v.rank_digits})  # (a canonical layout that reads them is no agnostic one)
    fix_norm = _fixing(family, [_size(family, norm(x)) for x in sizes_of], moving)
    fix_written = _fixing(family, [_size(family, x) for x in sizes_of], moving)
    for t in v.targets:
        if t.misplaced:
            return t.index, t.misplaced, ""
        for s in _sums(t):
            live = _live(family, norm, s)
            ranks = sorted({sp.source for sp, _ in live if sp.source in v.rank_digits})
            sizes = sorted(_loose(_size_reads(family, v, norm, s), fix_norm, fix_written))
            if ranks or sizes:
                what = f"the rank ({', '.join(ranks)})" if ranks else f"{', '.join(sizes)}, which the canonical " \
                    f"layout's numbers do not fix"
                how = f"an argument of the grid's {t.placed}(...) reads {what}" if t.placed else \
                    f"it reads {what} and is not placed by a fn of the grid"
                hint = " (where a canonical index moves with the rank, write it as the grid's placement, e.g. " \
                    "head(h))" if ranks and not t.placed else ""
                return t.index, how, hint
    return None


def _sums(t: Target) -> tuple[IterSum, ...]:
    """The sums of a target held to the rule: an unplaced target whole, a placed one by its
    index arguments."""
    return t.placed_args if t.placed else (t.sum,)


def _live(family: Family, norm, s: IterSum) -> list:
    """The terms of a sum whose scale is not 0 under `norm`."""
    return [(sp, k) for sp, k in s.terms if sympy.expand(family.atoms.expand(norm(k))) != 0]


def claim_norm(family: Family, v: Variant):
    """`guarded_equality`'s norm of a case where its `agnostic` claim holds too."""
    return guarded_equality(family, _claimed(v))[0]


def _claimed(v: Variant) -> Variant:
    return dataclasses.replace(v, guards=v.guards + (Guard(v.agnostic, "agnostic", None),))


class _Size(NamedTuple):
    """A size read one way: its terms as {name: power} (`_powers`; None where it is not a sum
    of such terms over one) and the names it is built from (`_symbols`)."""
    powers: tuple | None
    names: frozenset


class _Read(NamedTuple):
    """A size a target reads, under the guards and as written."""
    norm: _Size
    written: _Size


class _Fixing(NamedTuple):
    """What a set of canonical sizes fix: the names they fix one by one (`_fixed`), and the
    products of powers of positive names not among those that their values fix, as the rows of
    a reduced echelon basis ((pivot, {name: power}), each pivot in its own row only)."""
    fixed: frozenset
    basis: tuple


def _size(family: Family, x) -> _Size:
    x = sympy.sympify(x)
    if x not in family.sizes_read:  # the family's atoms and vocabulary are fixed: the reading is too
        family.sizes_read[x] = _Size(_powers(family, x), frozenset(_symbols(family, x)))
    return family.sizes_read[x]


def _size_reads(family: Family, v: Variant, norm, s: IterSum) -> list[_Read]:
    """Each size a target's sum reads (its base, its live digits' scales and lower ends, and
    the extent of a digit that wraps short of its index's box, `a % w`), under the guards and
    as written."""
    box: dict = {}
    for d in v.digits:
        if d.split is not None:
            box[d.split.source] = box.get(d.split.source, sympy.Integer(1)) * d.extent
    live = _live(family, norm, s)
    short = [sp.extent for sp, _ in live if sp.source in box and
             sympy.expand(norm(sp.lower * sp.extent) - norm(box[sp.source])) != 0]
    return [_Read(_size(family, norm(x)), _size(family, x))
            for x in (s.base, *(k for _, k in live), *(sp.lower for sp, _ in live), *short)]


def _loose(reads: list[_Read], fix_norm: _Fixing, fix_written: _Fixing) -> set[str]:
    """The names of the sizes read that neither reading leaves fixed (`_left`), as under the guards."""
    out = set()
    for r in reads:
        left = _left(r.norm, fix_norm)
        if left and _left(r.written, fix_written):
            out |= left
    return out


def _left(size: _Size, fixing: _Fixing) -> set[str]:
    """The names of a size whose value the fixing leaves open: each term's names must be fixed
    one by one, or the rest be positive with powers in the basis's span."""
    if size.powers is None:
        return set(size.names - fixing.fixed)
    out: set[str] = set()
    for term in size.powers:
        rest = {k: Fraction(e) for k, e, lo in term if k not in fixing.fixed}
        if rest and (any(lo < 1 for k, e, lo in term if k in rest) or _reduce(fixing.basis, rest)):
            out |= set(rest)
    return out


def _fixing(family: Family, sizes: list[_Size], moving: frozenset) -> _Fixing:
    """What the canonical sizes `sizes` fix (`_Fixing`); names that move with the group are
    never fixed. A canonical size joins the basis where it is one term of positive names, none
    of which moves."""
    monomials = [frozenset(k for k, _, _ in s.powers[0]) if s.powers and len(s.powers) == 1 else None
                 for s in sizes]
    fixed = frozenset(_fixed(family, monomials, moving))
    basis: list = []
    for s in sizes:
        if not s.powers or len(s.powers) != 1 or any(k in moving or lo < 1 for k, _, lo in s.powers[0]):
            continue
        row = _reduce(basis, {k: Fraction(e) for k, e, _ in s.powers[0] if k not in fixed})
        if row:
            pivot = min(row)
            row = {k: e / row[pivot] for k, e in row.items()}
            basis = [(p, _minus(r, row, r.get(pivot, 0))) for p, r in basis] + [(pivot, row)]
    return _Fixing(fixed, tuple(basis))


def _reduce(basis, v: dict) -> dict:
    """`v` less its part in the basis's span: {} where it lies in the span."""
    for pivot, row in basis:
        if v.get(pivot):
            v = _minus(v, row, v[pivot])
    return v


def _minus(a: dict, b: dict, c) -> dict:
    """a - c * b, without zero entries."""
    out = dict(a)
    for k, e in b.items():
        out[k] = out.get(k, 0) - c * e
    return {k: e for k, e in out.items() if e}


def _powers(family: Family, x) -> tuple | None:
    """Each term of a size that is a sum of numbers times powers of names, over one such
    product, as ((name, power, the name's least value), ...); None where it is not.

    Examples:
        (with m, n runtime names)
        _powers(f, m * n / 2) == ((("m", 1, lo_m), ("n", 1, lo_n)),)
        _powers(f, m + 1) == ((("m", 1, lo_m),), ())
    """
    x = cancel(family.atoms.expand(sympy.sympify(x)))
    num, den = x.as_numer_denom()
    below = _term_powers(family, den)
    if below is None:
        return None
    out = []
    for term in sympy.Add.make_args(sympy.expand(num)):
        p = _term_powers(family, term)
        if p is None:
            return None
        for k, e in below.items():
            p[k] = p.get(k, 0) - e
        out.append(tuple(sorted((k, e, _lowest(family, k)) for k, e in p.items() if e)))
    return tuple(out)


def _term_powers(family: Family, term) -> dict | None:
    out: dict = {}
    for f in sympy.Mul.make_args(term.as_coeff_Mul()[1]):
        b, e = (f.base, f.exp) if isinstance(f, sympy.Pow) and f.exp.is_Integer else (f, 1)
        if isinstance(b, sympy.Symbol) and b not in family.atoms.by_symbol:
            out[str(b)] = out.get(str(b), 0) + int(e)
        elif not f.is_number:
            return None
    return out


def _lowest(family: Family, name: str) -> int:
    """A name's least value; a name the library does not declare may be anything."""
    vocabulary = family.vocabulary or {}
    return vocabulary[name].lo if name in vocabulary else -1


def _fixed(family: Family, monomials, moving) -> set[str]:
    """The names whose values the numbers of sizes fix one by one, each size's names given
    where it is a number times powers of names (None where not): such a size fixes its one
    name the others do not already fix (`head_size * dtype_bytes` fixes
    head_size where dtype_bytes is fixed; `n_side * n_side` fixes n_side; `w * g` neither).
    Names that move with the group are never counted fixed (an agnostic layout reads none),
    and a monomial fixes its name only where the others cannot be 0 (`q * n` with q in 0 .. 1
    is 0 whatever n is) and the name cannot be negative (`n * n`).

    Examples:
        (with head_size, dtype_bytes, w and g runtime names)
        _fixed(f, [{"dtype_bytes"}, {"head_size", "dtype_bytes"}], set()) == {"dtype_bytes", "head_size"}
        _fixed(f, [{"w", "g"}], set()) == set()
    """
    monomials = [m for m in monomials if m]
    fixed: set[str] = set()
    while True:
        new = {next(iter(m - fixed)) for m in monomials if len(m - fixed) == 1 and not (m - fixed) & moving
               and _lowest(family, next(iter(m - fixed))) >= 0 and all(_lowest(family, x) >= 1 for x in m & fixed)}
        if not new:
            return fixed
        fixed |= new


def _contradicted(family: Family, v: Variant) -> bool:
    """The case's own conditions fail where its claim holds (`cp > 1` under `cp == 1`): the
    claim is of no configuration of the case, so its forms are nothing to compare."""
    norm = claim_norm(family, v)
    return any(norm(c.cond) in (False, sympy.false) for c in v.cases)


def _claimed_form(family: Family, v: Variant, norm=None) -> tuple:
    """(the canonical layout, where each target puts the local indices) under the case's
    claim: what must be one across the claiming cases. A target placed by the grid's fn
    counts by its index arguments, an unplaced one whole; per index, its digits (an index's
    top digit without its extent: it runs to the box, whose size may move). A `let` that is
    a constant in each case (`p = 2` when tp == 2) hides from each case alone that the shard
    map puts an element elsewhere in another. (`norm`: of other guards than the claim's.)"""
    norm = norm or claim_norm(family, v)
    c = v.canonical
    box: dict = {}  # each index's (or rank digit's) extent: the product of its digits
    for d in v.digits:
        if d.split is not None:
            box[d.split.source] = box.get(d.split.source, sympy.Integer(1)) * d.extent

    def form(x):
        return sympy.srepr(sympy.expand(family.atoms.expand(norm(x))))

    tops = {src: form(x) for src, x in box.items()}

    def sum_form(s):  # per index: (its box, its digits as (lower, lower * extent, scale, runs to the box))
        out = {src: (top, []) for src, top in tops.items()}
        for source, lower, extent, k in _joined(family, norm, s.terms):
            if form(extent) != _ONE:  # a digit of one value is 0
                end = form(lower * extent)
                top, digits = out.setdefault(source, (end, []))
                digits.append((form(lower), end, form(k), end == top))
        return form(s.base), {src: (top, tuple(sorted(ds))) for src, (top, ds) in out.items()}
    layout = tuple(form(x) for x in (*c.extents, *c.coefficients, c.element, c.base)) + tuple(c.indices)
    return layout, tuple((t.index, t.placed, tuple(sum_form(a) for a in (t.placed_args if t.placed else (t.sum,))))
                         for t in v.targets)


_ONE = sympy.srepr(sympy.Integer(1))


def _joined(family: Family, norm, terms) -> list[tuple]:
    """A sum's digits as (index, lower, extent, scale), two that continue each other joined
    into one: `(i // l) % e * k + (i // (l * e)) % f * (k * e)` is `(i // l) % (e * f) * k`,
    so a case that splits an index in two and a case that keeps it whole compare alike.

    Examples:
        (digits of d: (1, 2, 1) and (2, D / 2, 2), as `d % 2 + (d // 2) * 2` writes it)
        _joined(f, norm, terms) == [("d", 1, D, 1)]
    """
    def zero(x):
        return cancel(sympy.expand(family.atoms.expand(norm(x)))) == 0
    digits = [(sp.source, norm(sp.lower), norm(sp.extent), norm(k)) for sp, k in terms]
    joined = True
    while joined:
        joined = False
        for i, j in itertools.permutations(range(len(digits)), 2):
            (src, lo, e, k), (src2, lo2, f, k2) = digits[i], digits[j]
            if src == src2 and zero(lo2 - lo * e) and zero(k2 - k * e):
                digits = [d for n, d in enumerate(digits) if n not in (i, j)] + [(src, lo, norm(e * f), k)]
                joined = True
                break
    return digits


def _same_targets(ta: tuple, tb: tuple) -> bool:
    """Two cases' targets put alike every local index that both hold (an index's box may
    differ between the cases: they are compared where both boxes reach)."""
    if len(ta) != len(tb):
        return False
    for (ia, pa, aa), (ib, pb, ab) in zip(ta, tb):
        if (ia, pa, len(aa)) != (ib, pb, len(ab)):
            return False
        for (ba, da), (bb, db) in zip(aa, ab):
            if ba != bb or not all(_same_digits(da.get(src, ("", ())), db.get(src, ("", ())))
                                   for src in set(da) | set(db)):
                return False
    return True


def _same_digits(a: tuple, b: tuple) -> bool:
    """One index's digits in two cases, (box, ((lower, lower * extent, scale, top), ...)),
    give it one value wherever both boxes reach. A digit from the other's box up is 0 there
    (a head digit where the other case holds one head); two digits that each run to their
    box agree below both, whatever their extents; an index of one value is at its base."""
    (box_a, da), (box_b, db) = a, b
    if _ONE in (box_a, box_b):
        return True
    da = {d[0]: d[1:] for d in da if d[0] != box_b}
    db = {d[0]: d[1:] for d in db if d[0] != box_a}
    return da.keys() == db.keys() and all(
        da[lo][1] == db[lo][1] and (da[lo][0] == db[lo][0] or da[lo][2] and db[lo][2]) for lo in da)


def cases_text(v: Variant) -> str:
    """A variant's grid and family cases, as the spec writes them."""
    return " and ".join(g.text.removeprefix("case ") for g in v.cases) or "always"


def claims_differ(family: Family):
    """(case, case, what differs) for two cases that claim `agnostic` (and whose conditions
    hold where it does) but differ in their canonical layout or in where their shard maps
    put a local index, else None: which case applies may itself move with tp, so a page
    stored under one must read alike under the other."""
    live = [v for v in family.variants if v.agnostic not in (False, sympy.false) and not _contradicted(family, v)]
    forms = [_claimed_form(family, v) for v in live]
    for (a, (la, ta)), (b, (lb, tb)) in itertools.combinations(zip(live, forms), 2):  # all pairs: an index of
        # one value in a middle case would otherwise link two that differ
        if la != lb or not _same_targets(ta, tb):
            return a, b, "canonical layouts" if la != lb else "shard maps (where a local index lands)"
    return None


def names_data(family: Family) -> tuple[bool, ...]:
    """Per variant: whether its canonical indices name the engine's elements wherever the case
    applies, `agnostic` or not (a page of DCP-dealt tokens names each token by its place in
    the sequence: `token(t)` is the grid's word), so that two configurations of it with one
    canonical layout hold one page format (`runtime.formats.format_id`). A case qualifies when no
    target reads a rank digit or a size the canonical numbers do not fix under the case's own
    guards (`unplaced_target`), and its targets put every local index where each other such
    case, and each agnostic claim, puts it (`_same_targets`), with the sizes they read fixed
    by the same canonical numbers (`_fixed_alike`); where any two differ, neither does. A
    family whose agnostic claim is dropped (`compile.codegen.unbacked`) names data nowhere.

    Post-conditions: a configuration whose variant is False here is keyed by its sizes (its
    pages are one format only under that configuration)."""
    return tuple(not why for why in unnamed(family))


def unnamed(family: Family) -> tuple[str, ...]:
    """Per variant: why its canonical indices are not shown to name the engine's elements
    (`names_data`), or "" where they are."""
    cases, hits = [], []
    for v in family.variants:
        norm, _ = guarded_equality(family, v)
        hits.append(unplaced_target(family, v, norm))
        cases.append(_case_record(family, v, norm))
    claims = [_case_record(family, v, claim_norm(family, v)) for v in family.variants
              if v.agnostic not in (False, sympy.false) and not _contradicted(family, v)]
    others = claims + [c for c, hit in zip(cases, hits) if hit is None]
    out = []
    for c, hit in zip(cases, hits):
        if hit is not None:
            out.append(f"canonical index '{hit[0]}': {hit[1]}")
        elif not all(_same_targets(c[0], o[0]) for o in others):
            out.append("its shard map puts a local index where another case (or the agnostic claim) does not")
        elif not all(_fixed_alike(family, c, o) for o in others):
            out.append("another case (or the agnostic claim) fixes the sizes its shard map reads by other "
                       "canonical numbers")
        else:
            out.append("")
    return tuple(out)


def _case_record(family: Family, v: Variant, norm) -> tuple:
    """What `names_data` compares of a case under `norm`: (its targets' forms, its canonical
    sizes as ((normal form, `_Size`), (form as written, `_Size`)), each size its targets read
    (`_Read`), the sizes that move with its group)."""
    c = v.canonical
    moving = frozenset({*MOVES_WITH_THE_GROUP, *v.rank_digits})

    def form(x):
        return sympy.srepr(sympy.expand(family.atoms.expand(x))), _size(family, x)
    sizes = tuple((form(norm(x)), form(x)) for x in (*c.extents, *c.coefficients, c.base, c.element))
    reads = [r for t in v.targets for s in _sums(t) for r in _size_reads(family, v, norm, s)]
    return _claimed_form(family, v, norm)[1], sizes, reads, moving


def _fixed_alike(family: Family, a: tuple, b: tuple) -> bool:
    """Two cases (`_case_record`) fix every size their targets read by the same canonical
    numbers: each size is fixed (`_Fixing`) by the canonical sizes that are one in both
    cases, read under the guards or as written. (c = n in one case and c = 2 * n in the
    other fix n apart from the one number c; head_size, an extent in every case, alike.)"""
    if len(a[1]) != len(b[1]):
        return False
    moving = a[3] | b[3]
    fix_norm = _fixing(family, [x[0][1] for x, y in zip(a[1], b[1]) if x[0][0] == y[0][0]], moving)
    fix_written = _fixing(family, [x[1][1] for x, y in zip(a[1], b[1]) if x[1][0] == y[1][0]], moving)
    return not _loose(a[2] + b[2], fix_norm, fix_written)


def _symbols(family: Family, x) -> set[str]:
    """The names a size is built from, through division atoms to any depth."""
    x = family.atoms.expand(sympy.sympify(x))
    out, todo, seen = set(), list(getattr(x, "free_symbols", ())), set()
    while todo:
        sym = todo.pop()
        if sym in seen:
            continue
        seen.add(sym)
        a = family.atoms.by_symbol.get(sym)
        if a is None:
            out.add(str(sym))
        else:
            todo.extend(a.num.free_symbols | a.den.free_symbols)
    return out



"""Name tables -> family IR: each family as symbolic digit tables, one per grid case.

A family joins a local layout, a canonical layout and a shard map over a rank grid.
Resolving it cuts every index and rank digit into mixed-radix digits (`itersum`) and
gives each digit three strides, all sympy sizes:

    local      bytes it moves in the rank's page
    canonical  bytes it moves in the canonical page
    rank       how much it adds to the rank id

After that every map is linear: "compose with the inverse" is a re-sort of the same
digits by another stride (see `algebra.invert_and_compose`).

The records are in `ir`, the statements' reading in `statements`, layout instantiation in
`layout_ir` and guard rewriting in `guards`; this module joins them into digit tables.
"""

from __future__ import annotations

import dataclasses
import itertools

import sympy

from .errors import SpecError
from .itersum import IterSum, Split, digits_of, expand_call, normalise
from .library import Library
from .sizes import Atoms, Scope, param
from .syntax import BinOp, Call, Expr, FamilyDef, Name, Neg
from .guards import _conjuncts, _rewrites, guarded_equality  # noqa: F401 - the family's own API
from .ir import Digit, Family, Guard, LayoutIR, Target, Variant  # noqa: F401
from .layout_ir import check_layouts, instantiate, layout_ir  # noqa: F401
from .statements import _State, _divisors_positive, _let_size, _reads, _run  # noqa: F401
from .params import MOVES_WITH_THE_GROUP


def resolve(lib: Library, name: str) -> Family:
    """The family IR of `name`: one `Variant` per combination of grid cases."""
    try:
        return _resolve(lib, name)
    except RecursionError:
        # lets substituted into each other can nest deeper than any one statement does
        raise SpecError(f"family '{name}': its expressions nest too deeply once lets and fns are "
                        f"substituted", lib.family_def(name).span) from None


def _resolve(lib: Library, name: str) -> Family:
    fdef: FamilyDef = lib.family_def(name)
    where = f"family '{name}'"
    if fdef.shards or name in lib.families and lib.parts_of(name) != [name]:
        raise SpecError(f"{where} has pages of regions: each region is resolved as a part of its own "
                        f"({', '.join(lib.parts_of(name))})", fdef.span)
    for clause in ("grid", "local", "canonical", "shard"):
        if getattr(fdef, clause) is None and not (clause == "shard" and fdef.shards):
            raise SpecError(f"{where} has no '{clause}' clause", fdef.span)
    gdef = lib.grids.get(fdef.grid.id)
    if gdef is None:
        raise SpecError(f"unknown grid '{fdef.grid.id}'" + (f"; known: {', '.join(sorted(lib.grids))}"
                                                            if lib.grids else ""), fdef.grid.span)
    atoms = Atoms()
    vocabulary = lib.vocabulary()
    top = Scope(atoms, {n: param(n) for n in vocabulary}, fns=dict(lib.fns))
    for fn in lib.fns.values():
        if fn.name in vocabulary:
            raise SpecError(f"'{fn.name}' is a runtime name ({vocabulary[fn.name].meaning}); a fn may not take "
                            f"its name", fn.span)
    for let in lib.lets.values():
        if let.name in vocabulary:  # one meaning per name, in every file of the library
            raise SpecError(f"'{let.name}' is a runtime name ({vocabulary[let.name].meaning}); a let may not "
                            f"redefine it", let.span)
        top.names[let.name] = _let_size(top, let)
    fam = Family(name, fdef.serves, fdef.order, fdef.span.file, fdef.span, atoms, vocabulary=vocabulary,
                 region=fdef.shard.region if fdef.page is not None and fdef.shard else None)
    start = _State(top, {}, [], [])
    _divisors_positive(start)  # in the library's shared lets
    for s in _run(gdef.body, start, f"grid '{gdef.name}'"):
        if s.ranks is None:
            raise SpecError(f"grid '{gdef.name}' has no 'ranks' line", gdef.span)
        if s.world is None:
            raise SpecError(f"grid '{gdef.name}' has no 'world' line", gdef.span)
        for v in _run(fdef.body, s, where):
            fam.variants.append(_variant(lib, fdef, v))
    seq = getattr(fdef, "sequence", None)
    if seq is not None and fam.variants and seq.id not in fam.variants[0].canonical.indices:
        raise SpecError(f"{where}: 'sequence {seq.id}' names no index of the canonical layout "
                        f"'{fam.variants[0].canonical.name}' (its indices: "
                        f"{', '.join(fam.variants[0].canonical.indices)})", seq.span)
    return fam


def placed_by(lib: Library, target, idx_scope, local: tuple) -> tuple[str, tuple]:
    """(the grid's fn a canonical target is written as, the normal forms of its arguments
    that read a local index), or ('', ()) when it is not written as one.

    Where a canonical index depends on the rank, which slot holds which of the engine's
    heads, channels or tokens is the grid's word (`fn head(h) = head_shard * heads + h`:
    the engine shards heads contiguously), said once for every family on the grid. A
    target counts as placed when it is a call of a fn the grid (not a spec file's top
    level) defines; what its arguments may read is `unplaced_target`'s to judge."""
    if not isinstance(target, Call) or target.fn not in idx_scope.scope.fns or target.fn in lib.fns:
        return "", ()
    args = tuple(idx_scope.normalise(a) for a in target.args)
    return target.fn, tuple(a for a in args if {sp.source for sp, _ in a.terms} & set(local))


def unplaced_target(family: Family, v: Variant, norm=None) -> tuple[str, str] | None:
    """(canonical index, why) of the first target of `v` whose value could differ between two
    configurations of one model, else None. `norm` rewrites sizes under the case's claims
    (default: under its `agnostic` claim).

    A target is the same function of the local indices in every configuration when it reads
    no rank digit, and no size the canonical layout's numbers do not fix (`_fixed`), in its
    base, its coefficients, where it cuts an index (`d // tp`) or where it wraps one short of
    its box (`d % w`); a target written as the grid's placement (`head(h)`) is the grid's
    word, and only its index arguments are held to that rule (`head(heads - 1 - h)` is not).
    A size counts as fixed read under the guards or as written: `n_side` fixes itself even
    where a guard writes it `m_f * k_f`, but `w * g` fixes neither w nor g."""
    if norm is None:
        norm = claim_norm(family, v)
    c = v.canonical
    sizes_of = (*c.extents, *c.coefficients, c.base, c.element)
    moving = {*MOVES_WITH_THE_GROUP, *v.rank_digits}  # (a canonical layout that reads them is no agnostic one)
    fixed_norm = _fixed(family, [_monomial(family, norm(x)) for x in sizes_of], moving)
    fixed_written = _fixed(family, [_monomial(family, x) for x in sizes_of], moving)

    def reads(s: IterSum) -> tuple[list[str], list[str]]:
        live = [sp for sp, k in s.terms if sympy.expand(family.atoms.expand(norm(k))) != 0]
        return sorted({sp.source for sp in live if sp.source in v.rank_digits}), \
            sorted(_loose(_size_names(family, v, norm, s), fixed_norm, fixed_written))
    for t in v.targets:
        for s in (t.placed_args if t.placed else (t.sum,)):
            ranks, sizes = reads(s)
            if ranks or sizes:
                what = f"the rank ({', '.join(ranks)})" if ranks else f"{', '.join(sizes)}, which the canonical " \
                    f"layout's numbers do not fix"
                how = f"an argument of the grid's {t.placed}(...) reads {what}" if t.placed else \
                    f"it reads {what} and is not placed by a fn of the grid"
                return t.index, how
    return None


def claim_norm(family: Family, v: Variant):
    """`guarded_equality`'s norm of a case where its `agnostic` claim holds too."""
    return guarded_equality(family, _claimed(v))[0]


def _claimed(v: Variant) -> Variant:
    return dataclasses.replace(v, guards=v.guards + (Guard(v.agnostic, "agnostic", None),))


def _loose(names: list, fixed_norm: set, fixed_written: set) -> set[str]:
    """The names of sizes read, each as (names under the guards, names as written), that
    neither reading fixes."""
    return set().union(*(n - fixed_norm for n, w in names if n - fixed_norm and w - fixed_written))


def _size_names(family: Family, v: Variant, norm, s: IterSum) -> list[tuple[set, set]]:
    """(names under the guards, names as written) of each size a target's sum reads: its
    base, its live digits' scales and lower ends, and the extent of a digit that wraps short
    of its index's box (`a % w`)."""
    box: dict = {}
    for d in v.digits:
        if d.split is not None:
            box[d.split.source] = box.get(d.split.source, sympy.Integer(1)) * d.extent
    live = [(sp, k) for sp, k in s.terms if sympy.expand(family.atoms.expand(norm(k))) != 0]
    short = [sp.extent for sp, _ in live if sp.source in box and
             sympy.expand(norm(sp.lower * sp.extent) - norm(box[sp.source])) != 0]
    return [(_symbols(family, norm(x)), _symbols(family, x))
            for x in (s.base, *(k for _, k in live), *(sp.lower for sp, _ in live), *short)]


def _monomial(family: Family, x) -> frozenset[str] | None:
    """The names of a size that is a number times powers of names, else None."""
    x = sympy.cancel(family.atoms.expand(sympy.sympify(x)))
    names = set()
    for part in x.as_numer_denom():
        for f in sympy.Mul.make_args(part.as_coeff_Mul()[1]):
            b = f.base if isinstance(f, sympy.Pow) and f.exp.is_Integer else f
            if isinstance(b, sympy.Symbol) and b not in family.atoms.by_symbol:
                names.add(str(b))
            elif not f.is_number:
                return None
    return frozenset(names) if names else None


def _fixed(family: Family, monomials, moving: set) -> set[str]:
    """The names whose values the numbers of sizes fix, each size's names given where it is
    a number times powers of names (`_monomial`; None where not): such a size fixes its one
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
    vocabulary = family.vocabulary or {}

    def lowest(name):  # a name the library does not declare may be anything
        return vocabulary[name].lo if name in vocabulary else -1

    fixed: set[str] = set()
    while True:
        new = {next(iter(m - fixed)) for m in monomials if len(m - fixed) == 1 and not (m - fixed) & moving
               and lowest(next(iter(m - fixed))) >= 0 and all(lowest(x) >= 1 for x in m & fixed)}
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
        for sp, k in s.terms:
            if form(sp.extent) != _ONE:  # a digit of one value is 0
                end = form(sp.lower * sp.extent)
                top, digits = out.setdefault(sp.source, (end, []))
                digits.append((form(sp.lower), end, form(k), end == top))
        return form(s.base), {src: (top, tuple(sorted(ds))) for src, (top, ds) in out.items()}
    layout = tuple(form(x) for x in (*c.extents, *c.coefficients, c.element, c.base)) + tuple(c.indices)
    return layout, tuple((t.index, t.placed, tuple(sum_form(a) for a in (t.placed_args if t.placed else (t.sum,))))
                         for t in v.targets)


_ONE = sympy.srepr(sympy.Integer(1))


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
    canonical layout hold one page format (`runtime.format_id`). A case qualifies when no
    target reads a rank digit or a size the canonical numbers do not fix under the case's own
    guards (`unplaced_target`), and its targets put every local index where each other such
    case, and each agnostic claim, puts it (`_same_targets`), with the sizes they read fixed
    by the same canonical numbers (`_fixed_alike`); where any two differ, neither does. A
    family whose agnostic claim is dropped (`compile.unbacked`) names data nowhere.

    Post-conditions: a configuration whose variant is False here is keyed by its sizes (its
    pages are one format only under that configuration)."""
    cases, named = [], []
    for v in family.variants:
        norm, _ = guarded_equality(family, v)
        named.append(unplaced_target(family, v, norm) is None)
        cases.append(_case_record(family, v, norm))
    claims = [_case_record(family, v, claim_norm(family, v)) for v in family.variants
              if v.agnostic not in (False, sympy.false) and not _contradicted(family, v)]
    others = claims + [c for c, ok in zip(cases, named) if ok]
    return tuple(ok and all(_same_targets(c[0], o[0]) and _fixed_alike(family, c, o) for o in others)
                 for c, ok in zip(cases, named))


def _case_record(family: Family, v: Variant, norm) -> tuple:
    """What `names_data` compares of a case under `norm`: (its targets' forms, its canonical
    sizes as ((normal form, monomial), (form as written, monomial)), the names of each size
    its targets read (`_size_names`), the sizes that move with its group)."""
    c = v.canonical

    def form(x):
        return sympy.srepr(sympy.expand(family.atoms.expand(x))), _monomial(family, x)
    sizes = tuple((form(norm(x)), form(x)) for x in (*c.extents, *c.coefficients, c.base, c.element))
    reads = [n for t in v.targets for s in (t.placed_args if t.placed else (t.sum,))
             for n in _size_names(family, v, norm, s)]
    return _claimed_form(family, v, norm)[1], sizes, reads, {*MOVES_WITH_THE_GROUP, *v.rank_digits}


def _fixed_alike(family: Family, a: tuple, b: tuple) -> bool:
    """Two cases (`_case_record`) fix every size their targets read by the same canonical
    numbers: each size is fixed (`_fixed`) by the canonical sizes that are one in both
    cases, read under the guards or as written. (c = n in one case and c = 2 * n in the
    other fix n apart from the one number c; head_size, an extent in every case, alike.)"""
    if len(a[1]) != len(b[1]):
        return False
    moving = a[3] | b[3]
    fixed_norm = _fixed(family, [x[0][1] for x, y in zip(a[1], b[1]) if x[0][0] == y[0][0]], moving)
    fixed_written = _fixed(family, [x[1][1] for x, y in zip(a[1], b[1]) if x[1][0] == y[1][0]], moving)
    return not _loose(a[2] + b[2], fixed_norm, fixed_written)


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


def _variant(lib: Library, fdef: FamilyDef, s: _State) -> Variant:
    scope = s.scope
    shards = [fdef.shard] + list(fdef.shards or ())
    _reads(s, *fdef.local.call.args, *fdef.canonical.call.args,
           *[t for sh in shards if sh is not None for t in sh.targets])
    local = instantiate(lib, fdef.local, scope, "local")
    canon = instantiate(lib, fdef.canonical, scope, "canonical")
    if not scope.atoms.equal(local.element, canon.element):
        raise SpecError(f"local elements are {local.element} bytes but canonical ones "
                        f"{canon.element}; the shard map moves whole elements", fdef.canonical.span)
    if fdef.part_of is None and not scope.atoms.equal(local.base, 0):
        raise SpecError(f"layout '{local.name}' starts at element {local.base}, not 0", local.span)
    shard = fdef.shard
    srcs = tuple(n.id for n in shard.sources)
    if srcs != local.indices:
        raise SpecError(f"shard names ({', '.join(srcs)}) but the local layout '{local.name}' has "
                        f"indices ({', '.join(local.indices)})", shard.span)
    if len(shard.targets) != len(canon.indices):
        raise SpecError(f"shard gives {len(shard.targets)} canonical indices but layout "
                        f"'{canon.name}' has {len(canon.indices)} ({', '.join(canon.indices)})", shard.span)
    rank_decl = s.ranks.digits
    rank_ext = [scope.size(d.extent, f"extent of rank digit '{d.name}'") for d in rank_decl]
    for r in s.replicas:
        if r not in {d.name for d in rank_decl}:
            raise SpecError(f"replica '{r}' is not a rank digit (rank digits: "
                            f"{', '.join(d.name for d in rank_decl)})", s.replica_spans.get(r, s.ranks.span))
    iters = dict(zip(local.indices, local.extents))
    iters.update({d.name: e for d, e in zip(rank_decl, rank_ext)})
    clash = set(local.indices) & {d.name for d in rank_decl}
    if clash:
        raise SpecError(f"index '{sorted(clash)[0]}' has the name of a rank digit", shard.span)
    idx_scope = _IndexScope(scope, s.index_lets, iters)
    targets = tuple(Target(ci, ce, idx_scope.normalise(t), *placed_by(lib, t, idx_scope, local.indices))
                    for ci, ce, t in zip(canon.indices, canon.extents, shard.targets))
    seq = getattr(fdef, "sequence", None)
    if seq is not None and "token" in scope.fns and seq.id in local.indices:
        # the claim reads the token fn as the shard reads an index (affine, split by // and %):
        # `t / interleave` would hold it only of the tokens it divides, and prove it of those
        idx_scope.normalise(Call("token", (Name(seq.id, seq.span),), seq.span))
    e = local.element
    splits: dict[str, list[tuple[Split, list]]] = {}
    for t in targets:
        for sp, _ in t.sum.terms:
            splits.setdefault(sp.source, []).append(sp)
    digits = [Digit("byte", e, sympy.Integer(1), sympy.Integer(1), sympy.Integer(0), False)]
    coef_l = dict(zip(local.indices, local.coefficients))
    coef_c = dict(zip(canon.indices, canon.coefficients))

    def canonical_stride(sp: Split) -> sympy.Expr:
        return sympy.expand(e * sum(coef_c[t.index] * dict(t.sum.terms).get(sp, 0) for t in targets))

    for name, ext in zip(local.indices, local.extents):
        chain = digits_of(name, ext, splits.get(name, []), scope.atoms.equal, shard.span)
        for sp in chain:
            digits.append(Digit(_label(sp, chain), sp.extent, sympy.expand(e * coef_l[name] * sp.lower),
                                canonical_stride(sp), sympy.Integer(0), False, False, sp))
    rank_stride = sympy.Integer(1)
    rank_strides = {}
    for d, ext in reversed(list(zip(rank_decl, rank_ext))):
        rank_strides[d.name] = rank_stride
        rank_stride = sympy.expand(rank_stride * ext)
    for d, ext in zip(rank_decl, rank_ext):
        used = splits.get(d.name, [])
        chain = digits_of(d.name, ext, used, scope.atoms.equal, shard.span) if used else \
            [Split(d.name, sympy.Integer(1), ext)]
        for sp in chain:
            digits.append(Digit(_label(sp, chain), sp.extent, sympy.Integer(0),
                                canonical_stride(sp) if used else sympy.Integer(0),
                                sympy.expand(rank_strides[d.name] * sp.lower), True, d.name in s.replicas, sp))
    base = sympy.expand(e * (canon.base + sum(coef_c[t.index] * t.sum.base for t in targets)))
    _divisors_positive(s)  # divisions in the layouts' arguments and the rank extents
    return Variant(fdef.name, tuple(s.cases), tuple(s.guards), local, canon, tuple(digits),
                   tuple(d.name for d in rank_decl), base, targets, s.world, s.agnostic,
                   dict(scope.names), sympy.expand(e * local.base))


def symbolic_copy_map(family: Family, v: Variant):
    """The copy map `canonical o local^-1` of a variant as a layout of formulas, or None.

    Its modes, in order of local stride, are (extent, canonical stride); the first is the
    contiguous fragment when its canonical stride is 1. Digits whose extent may be 1 are
    kept, so this is the generic shape of the runs (`lower.run_plan` drops such modes at
    a concrete configuration).
    """
    from .algebra import NotCompact, coalesce, invert_and_compose
    from .layout import Layout
    norm, eq = guarded_equality(family, v)
    local = [d for d in v.digits if not d.is_rank]
    ext = tuple(d.extent for d in local)
    try:
        C = coalesce(invert_and_compose(Layout(ext, tuple(d.canonical for d in local)),
                                        Layout(ext, tuple(d.local for d in local)), eq), eq)
    except NotCompact:
        return None
    return Layout(tuple(norm(n) for n in C.shape), tuple(norm(s) for s in C.stride))


def _label(sp: Split, chain: list[Split]) -> str:
    if len(chain) == 1:
        return sp.source
    if sp.lower == 1:
        return f"{sp.source}%{sp.extent}"
    return f"{sp.source}//{sp.lower}"


class _IndexScope:
    """Normalises shard targets: iterators, index-valued `let`s and `fn`s."""

    def __init__(self, scope: Scope, index_lets: dict[str, Expr], iters: dict[str, sympy.Expr]):
        self.scope, self.index_lets, self.iters = scope, index_lets, iters

    def normalise(self, e: Expr) -> IterSum:
        return normalise(self.inline(e), self.iters, self.scope)

    def inline(self, e: Expr, depth: int = 0) -> Expr:
        """Expand `fn` calls and index-valued `let`s (they may use rank digits)."""
        if depth > 32:
            raise SpecError("functions or lets refer to each other without end", getattr(e, "span", None))
        if isinstance(e, Name) and e.id in self.index_lets and e.id not in self.iters:
            return self.inline(self.index_lets[e.id], depth + 1)
        if isinstance(e, Call):
            return self.inline(expand_call(e, self.scope), depth + 1)
        if isinstance(e, BinOp):
            return BinOp(e.op, self.inline(e.left, depth), self.inline(e.right, depth), e.span)
        if isinstance(e, Neg):
            return Neg(self.inline(e.arg, depth), e.span)
        return e

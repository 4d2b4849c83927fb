"""Name tables -> family IR: each family as symbolic digit tables, one per grid case.

A family joins a local layout, a canonical layout and a shard map over a rank grid.
Resolving it cuts every index and rank digit into mixed-radix digits (`itersum`) and
gives each digit three strides, all sympy sizes:

    local      bytes it moves in the rank's page
    canonical  bytes it moves in the canonical page
    rank       how much it adds to the rank id

After that every map is linear: "compose with the inverse" is a re-sort of the same
digits by another stride (see `algebra.invert_and_compose`).
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from math import prod

import sympy

from .errors import Span, SpecError
from .itersum import IterSum, Split, digits_of, expand_call, normalise
from .library import Library
from .sizes import Atoms, Scope, param
from .syntax import (Agnostic, BinOp, Call, Expr, FamilyDef, Fn, LayoutDef, Let,
                     Name, Neg, Ranks, Replica, Require, World, grouped)

@dataclass(frozen=True)
class Guard:
    """A condition that must hold for the family to apply (fail closed otherwise)."""

    cond: object  # sympy boolean
    text: str
    span: Span | None


@dataclass(frozen=True)
class LayoutIR:
    """A layout instantiated with sizes: index extents and element offsets."""

    name: str
    indices: tuple[str, ...]
    extents: tuple[sympy.Expr, ...]
    coefficients: tuple[sympy.Expr, ...]  # element stride of each index
    base: sympy.Expr
    element: sympy.Expr  # bytes per element
    tensor: tuple[str, ...] | None
    span: Span

    def size_bytes(self) -> sympy.Expr:
        return sympy.expand(self.element * prod(self.extents))


@dataclass(frozen=True)
class Digit:
    """One mixed-radix digit with its extent and its three strides."""

    name: str
    extent: sympy.Expr
    local: sympy.Expr
    canonical: sympy.Expr
    rank: sympy.Expr
    is_rank: bool
    replica: bool = False
    split: Split | None = None  # which index (or rank digit) it is a digit of; None: byte in element


@dataclass(frozen=True)
class Target:
    """One canonical index as a normal form over the digits."""

    index: str
    extent: sympy.Expr
    sum: IterSum


@dataclass
class Variant:
    """A family under one combination of grid cases: guards and a digit table."""

    family: str
    cases: tuple[Guard, ...]
    guards: tuple[Guard, ...]
    local: LayoutIR
    canonical: LayoutIR
    digits: tuple[Digit, ...]
    rank_digits: tuple[str, ...]
    canonical_base: sympy.Expr
    targets: tuple[Target, ...]
    world: sympy.Expr
    agnostic: object  # sympy boolean
    lets: dict[str, sympy.Expr]
    local_base: sympy.Expr = sympy.Integer(0)  # bytes before the region, in a page of regions


@dataclass
class Family:
    name: str
    serves: str
    order: int
    path: str
    span: Span
    atoms: Atoms
    variants: list[Variant] = field(default_factory=list)
    vocabulary: dict = field(default_factory=dict)  # runtime name -> params.Param, what the specs may read
    region: str | None = None  # the region of a page this part family maps (None: a layout of one box)

    @property
    def tensor(self) -> tuple[str, ...] | None:
        return self.variants[0].local.tensor


def _text(span: Span | None) -> str:
    """The statement as written, without its comment."""
    return span.text.split("#")[0].strip().rstrip(":") if span and span.text else ""


@dataclass
class _State:
    scope: Scope
    index_lets: dict[str, Expr]
    cases: list[Guard]
    guards: list[Guard]
    ranks: Ranks | None = None
    replicas: tuple[str, ...] = ()
    world: sympy.Expr | None = None
    agnostic: object = sympy.false
    replica_spans: dict = field(default_factory=dict)  # where each replica was named

    def copy(self) -> "_State":
        return _State(self.scope.child({}), dict(self.index_lets), list(self.cases), list(self.guards),
                      self.ranks, self.replicas, self.world, self.agnostic, dict(self.replica_spans))


def _names(e) -> set[str]:
    """Every name an expression or condition mentions (any node of the syntax tree)."""
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, (list, tuple)):
        return set().union(*(_names(x) for x in e)) if e else set()
    if dataclasses.is_dataclass(e) and not isinstance(e, type):
        return set().union(*(_names(getattr(e, f.name)) for f in dataclasses.fields(e) if f.name != "span"))
    return set()


def _run(stmts, state: _State, where: str) -> list[_State]:
    """Execute grid/family statements; `case` groups fork the state."""
    states = [state]
    for item in grouped(stmts):
        if isinstance(item, list):
            forked = []
            for s in states:
                for case in item:
                    c = s.copy()
                    _reads(c, case.cond)
                    c.cases.append(Guard(c.scope.cond(case.cond), _text(case.span), case.span))
                    _divisors_positive(c)
                    forked.extend(_run(case.body, c, where))
            states = forked
        else:
            for s in states:
                _step(item, s, where)
                _divisors_positive(s)
    return states


def _let_size(scope: Scope, let) -> sympy.Expr:
    """A size let's value; the exact divisions it made are kept with it, to be checked by a
    state only where something it reads names the let (the spec's reading evaluates a let
    only where it is used, and so does the prover)."""
    atoms = scope.atoms
    mark = len(atoms.exact)
    value = scope.size(let.value, f"'let {let.name}'")
    made = atoms.exact[mark:]
    del atoms.exact[mark:]
    for n in _names(let.value):
        made += atoms.let_exact.get(n, [])
    atoms.let_exact[let.name] = made
    return value


def _reads(s: _State, *exprs) -> None:
    """The exact divisions of the lets these expressions name, now read by this state: through
    the index lets and functions they use, whose bodies are read where they are used."""
    atoms = s.scope.atoms
    todo, names = [e for e in exprs if e is not None], set()
    while todo:
        e = todo.pop()
        for n in _names(e) - names:
            names.add(n)
            if n in s.index_lets:
                todo.append(s.index_lets[n])
        for fn in _calls(e):
            body = s.scope.fns.get(fn)
            if body is not None and fn not in names:
                names.add(fn)
                todo.append(body.body)
    for n in sorted(names):  # in one order on every machine: guards become Z3 assumptions in this order
        atoms.exact.extend(atoms.let_exact.get(n, []))


def _calls(e) -> set[str]:
    """The functions an expression calls."""
    if isinstance(e, Call):
        return {e.fn} | set().union(*(_calls(a) for a in e.args))
    if dataclasses.is_dataclass(e) and not isinstance(e, type):
        return set().union(*(_calls(getattr(e, f.name)) for f in dataclasses.fields(e) if f.name != "span"))
    if isinstance(e, (list, tuple)):
        return set().union(*(_calls(x) for x in e)) if e else set()
    return set()


def _divisors_positive(s: _State) -> None:
    """Exact divisions that cancelled symbolically still hold only where the divisor is
    positive (as the prover reads `/`): each becomes a guard of the state that divided. So
    does each exact division's remainder being zero, which an atom that later cancels
    would never check."""
    atoms = s.scope.atoms
    exact, atoms.exact = atoms.exact, []
    for den, span, text in atoms.positive:
        s.guards.append(Guard(sympy.Gt(den, 0), f"the divisor of {text} is positive", span))
    atoms.positive.clear()
    have = {g.text for g in s.guards}
    for num, den, span, text in exact:
        rem = atoms.make("%", num, den, span)
        if f"{text} is a whole number" not in have:
            have.add(f"{text} is a whole number")
            s.guards.append(Guard(sympy.Eq(rem, 0), f"{text} is a whole number", span))
    atoms.positive.clear()  # (the remainders' divisors are the divisions' own, already guarded)


def _step(stmt, s: _State, where: str) -> None:
    if isinstance(stmt, Let):
        rank_names = {d.name for d in s.ranks.digits} if s.ranks else set()
        if stmt.name in s.scope.names or stmt.name in s.index_lets or stmt.name in rank_names:
            # one meaning per name: a let read lazily and a let fixed where it is written
            # would otherwise disagree about which definition a use sees
            raise SpecError(f"'{stmt.name}' is already defined (a runtime name, a rank digit or an earlier let); "
                            f"a let may not redefine a name", stmt.span)
        if _names(stmt.value) & (rank_names | set(s.index_lets) | {"rank"}):
            s.index_lets[stmt.name] = stmt.value
        else:
            s.scope.names[stmt.name] = _let_size(s.scope, stmt)
    elif isinstance(stmt, Require):
        _reads(s, stmt.cond)
        s.guards.append(Guard(s.scope.cond(stmt.cond), _text(stmt.span), stmt.span))
    elif isinstance(stmt, Fn):
        if stmt.name in s.scope.names:  # one meaning per name: `tp(x)` beside `tp` would read as two
            raise SpecError(f"'{stmt.name}' is already a runtime name or a let; a fn may not take its name",
                            stmt.span)
        s.scope.fns[stmt.name] = stmt
    elif isinstance(stmt, World):
        _reads(s, stmt.size)
        s.world = s.scope.size(stmt.size, "world size")
    elif isinstance(stmt, Ranks):
        if s.ranks is not None:
            raise SpecError(f"{where} declares its ranks twice", stmt.span)
        seen = set()
        for d in stmt.digits:
            if d.name in seen or d.name in s.scope.names:
                raise SpecError(f"rank digit '{d.name}' is declared twice or shadows a size", d.span)
            seen.add(d.name)
        s.ranks = stmt
        _reads(s, *(d.extent for d in stmt.digits))
        rank = Name(stmt.digits[0].name, stmt.digits[0].span)
        for d in stmt.digits[1:]:
            rank = BinOp("+", BinOp("*", rank, d.extent, d.span), Name(d.name, d.span), d.span)
        s.index_lets["rank"] = rank
    elif isinstance(stmt, Replica):
        s.replicas = s.replicas + tuple(n for n in dict.fromkeys(stmt.names) if n not in s.replicas)
        s.replica_spans.update({n: stmt.span for n in stmt.names})
    elif isinstance(stmt, Agnostic):
        _reads(s, stmt.cond)
        s.agnostic = s.scope.cond(stmt.cond)
    else:  # pragma: no cover - the grammar admits nothing else
        raise TypeError(stmt)


def instantiate(lib: Library, use, scope: Scope, role: str) -> LayoutIR:
    """A layout definition applied to size arguments."""
    call: Call = use.call
    ldef: LayoutDef | None = lib.layouts.get(call.fn)
    if ldef is not None and ldef.regions:
        raise SpecError(f"layout '{ldef.name}' is a page of regions ({', '.join(r.name for r in ldef.regions)}): "
                        f"a family of pages names each region's shard map ('shard REGION (...) -> (...)')",
                        call.span)
    if ldef is None:
        raise SpecError(f"unknown layout '{call.fn}'" + (f"; known: {', '.join(sorted(lib.layouts))}"
                                                         if lib.layouts else ""), call.span)
    if len(call.args) != len(ldef.params):
        raise SpecError(f"layout '{ldef.name}' takes {len(ldef.params)} size(s) "
                        f"({', '.join(ldef.params)}), given {len(call.args)}", call.span)
    bound = {p: scope.size(a, f"argument '{p}' of {role} layout") for p, a in zip(ldef.params, call.args)}
    return layout_ir(ldef, bound, scope.atoms)


def layout_ir(ldef: LayoutDef, bound: dict, atoms: Atoms) -> LayoutIR:
    """A layout definition with its parameters bound to sizes; checks the definition."""
    if len(set(ldef.params)) != len(ldef.params):
        raise SpecError(f"layout '{ldef.name}' names a parameter twice", ldef.span)
    inner = Scope(atoms, bound)
    names, extents = [], []
    for d in ldef.indices:
        if d.name in names:
            raise SpecError(f"index '{d.name}' is declared twice in layout '{ldef.name}'", d.span)
        if d.name in bound:
            raise SpecError(f"index '{d.name}' has the name of a parameter of layout '{ldef.name}'", d.span)
        names.append(d.name)
        extents.append(inner.size(d.extent, f"extent of index '{d.name}'"))
    iters = dict(zip(names, extents))
    off = normalise(ldef.offset, iters, inner)
    coef = {n: sympy.Integer(0) for n in names}
    for split, c in off.terms:
        if split.lower != 1 or not atoms.equal(split.extent, iters[split.source]):
            raise SpecError(f"layout offsets are affine in whole indices: '{split.source}' is split "
                            f"with // or %", ldef.span)
        coef[split.source] = c
    element = inner.size(ldef.element, "element size") if ldef.element is not None else sympy.Integer(1)
    tensor = None
    if ldef.tensor is not None:
        tensor = []
        for n in ldef.tensor:
            if n.id not in iters:
                raise SpecError(f"tensor dimension '{n.id}' is not an index of layout '{ldef.name}'", n.span)
            if n.id in tensor:
                raise SpecError(f"index '{n.id}' is used twice in the tensor of layout '{ldef.name}'", n.span)
            tensor.append(n.id)
        tensor = tuple(tensor)
    return LayoutIR(ldef.name, tuple(names), tuple(extents), tuple(coef[n] for n in names), off.base,
                    element, tensor, ldef.span)


def check_layouts(lib: Library) -> None:
    """Check every layout definition on its own, its parameters taken as free sizes."""
    for ldef in lib.layouts.values():
        if ldef.regions:
            continue  # a page: each region is a layout of its own ('page.region')
        layout_ir(ldef, {p: sympy.Symbol(p, integer=True, positive=True) for p in ldef.params}, Atoms())


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
    targets = tuple(Target(ci, ce, idx_scope.normalise(t))
                    for ci, ce, t in zip(canon.indices, canon.extents, shard.targets))
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


def _rewrites(v: Variant, atoms) -> dict:
    """Substitutions implied by equality guards and cases: `x == e` with x a parameter."""
    subs = {}
    for g in list(v.cases) + list(v.guards):
        for c in _conjuncts(g.cond):
            if isinstance(c, sympy.Eq) and c.rhs == 0 and c.lhs in atoms.by_symbol:
                a = atoms.by_symbol[c.lhs]
                if a.op == "%" and a.num == 1 and isinstance(a.den, sympy.Symbol):
                    subs[a.den] = sympy.Integer(1)  # a positive divisor of 1 is 1
            if isinstance(c, sympy.Eq):
                lhs, rhs = atoms.expand(c.lhs), atoms.expand(c.rhs)
                if isinstance(lhs, sympy.Symbol) and lhs not in rhs.free_symbols:
                    subs[lhs] = rhs
                elif rhs == 1 and isinstance(lhs, sympy.Mul) and all(
                        isinstance(f, sympy.Symbol) and f not in atoms.by_symbol for f in lhs.args):
                    # runtime names are never negative, so a product of them that is 1 has every
                    # factor 1; a quotient (an atom) may be negative, so it is left alone
                    subs.update({f: sympy.Integer(1) for f in lhs.args})
    return subs


def _conjuncts(c):
    return list(c.args) if isinstance(c, sympy.And) else [c]


def guarded_equality(family: Family, v: Variant):
    """`(norm, eq)` for sizes of a variant: equal for every size where its guards hold.

    Equality guards and cases become rewrite rules (`heads == total_heads / shards`
    replaces `heads`), exact divisions become rational functions; `eq` compares the
    results exactly. False means "not shown", not "different".
    """
    atoms, subs = family.atoms, _rewrites(v, family.atoms)

    def norm(x):
        x = atoms.expand(sympy.sympify(x))
        for _ in range(4):
            y = x.subs(subs)
            if y == x:
                break
            x = y
        return sympy.cancel(x)

    def eq(a, b):
        return norm(a) == norm(b) or sympy.cancel(norm(a) - norm(b)) == 0

    return norm, eq


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

"""Name tables -> family IR: each family as symbolic digit tables, one per grid case.

A family joins a local layout, a canonical layout and a shard map over a rank grid.
Resolving it cuts every index and rank digit into mixed-radix digits (`itersum`) and
gives each digit three strides, all sympy sizes:

    local      bytes it moves in the rank's page
    canonical  bytes it moves in the canonical page
    rank       how much it adds to the rank id

After that every map is linear: "compose with the inverse" is a re-sort of the same
digits by another stride (see `algebra.ops.invert_and_compose`).

The records are in `ir`, the statements' reading in `statements`, layout instantiation in
`layout_ir`, guard rewriting in `guards` and what the canonical indices claim in `claims`;
this module joins them into digit tables.
"""

from __future__ import annotations


import sympy

from ..errors import SpecError
from .itersum import IterSum, Split, digits_of, expand_call, normalise
from ..dsl.library import Library
from .sizes import Atoms, Scope, param
from ..dsl.tree import BinOp, Call, Expr, FamilyDef, Name, Neg
from .guards import conjuncts, guard_rewrites, guarded_equality  # noqa: F401 - the family's own API
from .resolved import Digit, Family, Guard, LayoutIR, Target, Variant  # noqa: F401
from .layouts import check_layouts, instantiate, layout_ir  # noqa: F401
from .statements import RunState, divisors_positive, let_size, read_divisions, run_statements  # noqa: F401


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
        top.names[let.name] = let_size(top, let)
    fam = Family(name, fdef.serves, fdef.order, fdef.span.file, fdef.span, atoms, vocabulary=vocabulary,
                 region=fdef.shard.region if fdef.page is not None and fdef.shard else None)
    start = RunState(top, {}, [], [])
    divisors_positive(start)  # in the library's shared lets
    for s in run_statements(gdef.body, start, f"grid '{gdef.name}'"):
        if s.ranks is None:
            raise SpecError(f"grid '{gdef.name}' has no 'ranks' line", gdef.span)
        if s.world is None:
            raise SpecError(f"grid '{gdef.name}' has no 'world' line", gdef.span)
        for v in run_statements(fdef.body, s, where):
            fam.variants.append(_variant(lib, fdef, v))
    seq = getattr(fdef, "sequence", None)
    if seq is not None and fam.variants and seq.id not in fam.variants[0].canonical.indices:
        raise SpecError(f"{where}: 'sequence {seq.id}' names no index of the canonical layout "
                        f"'{fam.variants[0].canonical.name}' (its indices: "
                        f"{', '.join(fam.variants[0].canonical.indices)})", seq.span)
    return fam


def placed_by(lib: Library, target, idx_scope, local: tuple) -> tuple[str, tuple, str]:
    """(the grid's fn a canonical target is written as, the normal forms of its arguments
    that read a local index, why the call cannot be taken as the grid's placement or ""),
    or ('', (), why) when it is not taken as one.

    Where a canonical index depends on the rank, which slot holds which of the engine's
    heads, channels or tokens is the grid's word (`fn head(h) = head_shard * heads + h`:
    the engine shards heads contiguously), said once for every family on the grid. A
    target counts as placed when it is a call of a fn the grid (not a spec file's top
    level) defines; what its index arguments may read is `unplaced_target`'s to judge. A
    call that also passes sizes (`by_rank(j, n)`: n channels a rank) says what the rank's
    share is, and the family could pass any: it counts only where it has one index
    argument, which numbers its box densely from 0 (`j`, or `i + n_i * j`), and every size
    passed is that box's size; else the target is read as written, whole."""
    if not isinstance(target, Call) or target.fn not in idx_scope.scope.fns or target.fn in lib.fns:
        return "", (), ""
    args = tuple(idx_scope.normalise(a) for a in target.args)
    indexed = tuple(a for a in args if {sp.source for sp, _ in a.terms} & set(local))
    sizes = [a for a in args if not a.terms]
    if sizes:
        box = _dense_box(indexed, idx_scope.scope.atoms.equal)
        if box is None or not all(idx_scope.scope.atoms.equal(a.base, box) for a in sizes):
            shown = idx_scope.scope.atoms.expand
            return "", (), (f"the grid's {target.fn}(...) is passed sizes "
                            f"({', '.join(str(shown(a.base)) for a in sizes)}) that are not the size of its one index "
                            f"argument's box ({'not one box numbered densely from 0' if box is None else shown(box)}):"
                            f" the share it gives is the family's word, not the grid's")
    return target.fn, indexed, ""


def _dense_box(indexed: tuple, equal):
    """The size of the box one index argument numbers densely from 0 (each digit's scale the
    product of the extents below it), else None."""
    if len(indexed) != 1 or not equal(indexed[0].base, 0):
        return None
    box = sympy.Integer(1)
    terms = [(sp, k) for sp, k in indexed[0].terms if not equal(sp.extent, 1)]  # a digit of one value steps nowhere
    while terms:
        k = next((k for k, (_, scale) in enumerate(terms) if equal(scale, box)), None)
        if k is None:
            return None
        sp, _ = terms.pop(k)
        box = sympy.expand(box * sp.extent)
    return box


def _variant(lib: Library, fdef: FamilyDef, s: RunState) -> Variant:
    scope = s.scope
    shards = [fdef.shard] + list(fdef.shards or ())
    read_divisions(s, *fdef.local.call.args, *fdef.canonical.call.args,
           *[t for sh in shards if sh is not None for t in sh.targets])
    local = instantiate(lib, fdef.local, scope, "local")
    canon = instantiate(lib, fdef.canonical, scope, "canonical")
    if not scope.atoms.equal(local.element, canon.element):
        raise SpecError(f"local elements are {local.element} bytes but canonical ones "
                        f"{canon.element}; the shard map moves whole elements", fdef.canonical.span)
    if fdef.part_of is None and not scope.atoms.equal(local.base, 0):
        raise SpecError(f"layout '{local.name}' starts at element {local.base}, not 0: its offset at index 0 must "
                        f"be the page's first element (layouts are read with every index stepping forward, so an "
                        f"index that counts down, such as T - 1 - t, is not supported)", local.span)
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
    divisors_positive(s)  # divisions in the layouts' arguments and the rank extents
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
    from ..algebra.ops import NotCompact, coalesce, invert_and_compose
    from ..algebra.layout import Layout
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

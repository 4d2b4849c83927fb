"""Family IR -> a Python function per family: sizes in, a numeric digit table out.

The symbolic digit table of each grid case is printed once as straight-line Python
(integers only, every division checked exact) and compiled with `compile`. The
runtime then never touches sympy, lark or Z3: instantiating a family for a
configuration is one call of plain Python.
"""
from __future__ import annotations

import sympy

from .. import params
from .compiled import Bound, CompiledFamily
from ..errors import LayoutalgError
from ..ir.family import Family, Variant
from ..ir.identity import layout_id


_REL = {"==": "==", "!=": "!=", "<=": "<=", ">=": ">=", "<": "<", ">": ">"}


class _Printer:
    def __init__(self, family: Family):
        self.atoms = list(family.atoms.by_symbol.values())
        self.index = {a.symbol: k for k, a in enumerate(self.atoms)}
        self.fn = {"/": "_exact", "//": "_floor", "%": "_mod"}
        self.vocabulary = family.vocabulary or params.TABLE
        self.used: set[str] = set()  # the runtime names printed so far

    def __call__(self, e) -> str:
        if e is sympy.true or e is True:
            return "True"
        if e is sympy.false or e is False:
            return "False"
        if isinstance(e, (int,)) or getattr(e, "is_Integer", False):
            return str(int(e))
        if isinstance(e, sympy.Symbol):
            if e in self.index:
                a = self.atoms[self.index[e]]
                return f"{self.fn[a.op]}({self(a.num)}, {self(a.den)}, {self.index[e]})"
            if e.name not in self.vocabulary:
                raise LayoutalgError(f"internal: unbound symbol {e}")
            self.used.add(e.name)
            return e.name
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return f"({self(e.base)} ** {int(e.exp)})"
        if isinstance(e, sympy.core.relational.Relational):
            return f"({self(e.lhs)} {_REL[e.rel_op]} {self(e.rhs)})"
        # `&` and `|` on bools, not `and`/`or`: every operand is evaluated, so a division in
        # one that short-circuiting would skip still fails closed, as the prover assumes
        if isinstance(e, sympy.And):
            return "(" + " & ".join(f"bool({self(a)})" for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " | ".join(f"bool({self(a)})" for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"(not {self(e.args[0])})"
        raise LayoutalgError(f"internal: cannot print {e!r} ({type(e).__name__})")


def _tup(items) -> str:
    return "(" + "".join(f"{x}, " for x in items) + ")"


def _variant_source(v: Variant, k: int, pr: _Printer, agnostic=None, named: bool = False) -> str:
    pr.used = set()
    lines = []
    for c in v.cases:
        lines.append(f"    if not {pr(c.cond)}: return None")
    for j, g in enumerate(v.guards):
        lines.append(f"    if not {pr(g.cond)}: raise _Guard({k}, {j})")
    local = [d for d in v.digits if not d.is_rank]
    ranks = [d for d in v.digits if d.is_rank]
    loc = _tup(_tup((pr(d.extent), pr(d.local), pr(d.canonical))) for d in local)
    rk = _tup(_tup((pr(d.extent), pr(d.rank), pr(d.canonical), str(d.replica))) for d in ranks)
    tensor = v.local.tensor or ()
    pos = {n: i for i, n in enumerate(v.local.indices)}
    shape = _tup(pr(v.local.extents[pos[n]]) for n in tensor)
    strides = _tup(pr(v.local.coefficients[pos[n]]) for n in tensor)
    targets = _tup(
        _tup((pr(t.extent), pr(t.sum.base),
              _tup(_tup((pr(c), pr(sp.extent))) for sp, c in t.sum.terms)))
        for t in v.targets)
    lines.append("    return _Instance(" + ", ".join([
        repr(v.family), loc, rk, pr(v.canonical_base), pr(v.local.size_bytes()),
        pr(v.canonical.size_bytes()), pr(v.world), f"bool({pr(v.agnostic if agnostic is None else agnostic)})",
        pr(v.local.element),
        shape, strides, targets, repr(tuple(d.name for d in local)),
        repr(tuple(d.name for d in ranks)), pr(v.local_base),
        *(_tup((pr(lay.base), pr(lay.element), _tup(_tup((pr(e), pr(c))) for e, c in zip(lay.extents,
                                                                                      lay.coefficients))))
          for lay in (v.canonical, v.local)), str(bool(named))]) + ")")
    # read only the names this case uses: a runtime that lacks one fails closed naming it
    prelude = [f"    {n} = P[{n!r}]" if pr.vocabulary[n].default is None else
               f"    {n} = P.get({n!r}, {int(pr.vocabulary[n].default)})" for n in sorted(pr.used)]
    return "\n".join([f"def _variant_{k}(P):", *prelude, *lines])


def compile_family(family: Family, unplaced: bool | None = None, reading: str = "") -> CompiledFamily:
    """Print and compile the family's variants into Python functions.

    An `agnostic` claim the grid does not back is dropped (`unplaced`: some case puts an index
    that moves with the rank in slots of the family's own choosing, `claims.unplaced_target`;
    None: find out): its pages are then one format only under one configuration, so a reader
    under another never takes them for its own (the prover reports the claim unknown). Each
    case records whether its canonical indices name the engine's elements where the claim
    does not hold (`claims.names_data`); one that does not is keyed by its configuration too."""
    pr = _Printer(family)
    from ..ir.claims import names_data
    if unplaced is None:
        unplaced = unbacked(family)
    named = (False,) * len(family.variants) if unplaced else names_data(family)
    sources, read = [], set()
    for k, v in enumerate(family.variants):
        sources.append(_variant_source(v, k, pr, sympy.false if unplaced else None, named[k]))
        read |= pr.used
    src = "\n\n".join(sources)
    vocabulary = family.vocabulary or params.TABLE
    bounds = tuple(Bound(n, vocabulary[n].lo, vocabulary[n].hi) for n in sorted(read | {"page_size"}))
    guards = tuple(tuple((str(g.span), g.text) for g in v.guards) for v in family.variants)
    atoms = tuple((str(a.span), a.op, a.text) for a in pr.atoms)
    claims = not unplaced and any(v.agnostic is not sympy.false for v in family.variants)
    return CompiledFamily(family.name, family.serves, family.order, str(family.span), src, guards, atoms,
                          tuple(family.tensor or ()), layout_id(family), bounds, family, claims,
                          family.tensor_outer, reading)


def unbacked(family: Family) -> bool:
    """Whether a case claims agnostic with a canonical index that moves with the rank and is
    not a placement of the grid, or two claiming cases put the bytes apart (`claims_differ`)."""
    from ..ir.claims import claims_differ, unplaced_target
    return any(v.agnostic is not sympy.false and unplaced_target(family, v) for v in family.variants) or \
        claims_differ(family) is not None


def compiled_reads(lib, family: str, otherwise) -> frozenset:
    """The runtime names the compiled family (or one region's part) reads, its `bounds`: what the
    runtime decides a stage grid by (`compiled.group_of`), so the prover serves what it serves.
    A family the compiler refuses: `otherwise(lib, family)` (the prover's reading of its text)."""
    memo = lib.__dict__.setdefault("_compiled_reads", {})
    if family not in memo:
        from ..ir.family import resolve
        try:
            memo[family] = frozenset(b.name for b in compile_family(resolve(lib, family)).bounds)
        except (LayoutalgError, ArithmeticError, TypeError, ValueError):
            memo[family] = frozenset(otherwise(lib, family))
    return memo[family]


def compile_named(lib, name: str):
    """The family `name` of a library compiled: a `CompiledFamily`, or for a family of pages a
    `CompiledPage` of its parts (one per data region, and its pads)."""
    from .compiled import CompiledPage
    from ..ir.family import resolve
    from ..ir.identity import page_id
    parts = lib.parts_of(name)
    if parts == [name]:
        return compile_family(resolve(lib, name), reading=reading_key(lib, name))
    fdef = lib.families[name]
    resolved = {p: resolve(lib, p) for p in parts}
    unplaced = any(unbacked(f) for f in resolved.values())  # one region's unbacked claim drops the page's
    data = [(lib.parts[p].shard.region, compile_family(f, unplaced)) for p, f in resolved.items()]
    pads = [p for p in lib.parts_of(name, pads=True) if p not in parts]
    local_pads = tuple(compile_family(resolve(lib, p), unplaced) for p in pads if not p.endswith("'"))
    canonical_pads = tuple(compile_family(resolve(lib, p), unplaced) for p in pads if p.endswith("'"))
    return CompiledPage(name, fdef.serves, fdef.order, str(fdef.span), tuple(data), local_pads, canonical_pads,
                        page_id(lib, name), views=_views(lib.layouts[fdef.local.call.fn]))


def _views(page) -> tuple:
    """(tensor name, (region or pad, ...), dims merged) of each tensor viewing the local page,
    in page order; dims merged: how many indices each tensor dim holds, () where one each."""
    views: dict[str, list[str]] = {}
    groups: dict[str, tuple] = {}
    for r in page.regions:
        if r.tensor_name is not None:
            views.setdefault(r.tensor_name, []).append(r.name)
            groups[r.tensor_name] = r.tensor_groups
    return tuple((name, tuple(regions), groups[name]) for name, regions in views.items())


def reading_key(lib, name: str) -> str:
    """How family `name` reads a tensor it takes, as the spec's terms (a hash), or '' where no
    structural argument covers it. Two families of one kind with one key read every byte of
    any tensor both take as the same engine element, at every size: the runtime takes a tensor
    only where its shape and strides (those after the block dim) are the family's, so both
    decode a byte to the same values of the same named indices (each local index a tensor dim,
    in one order; the dims before the block outermost, where the dense layout's strides are
    fixed by the extents); the same grid and the same shard terms, by canonical index name,
    then name the same element (`oracle.naming`'s notion). A family that names no tensor dims
    reads its page's bytes as they lie: there the local layout's offset, extents and element,
    as terms, decode a byte, so equal terms read alike. Covered: a family of one box, not a
    page, whose statements are requires only (a `let` or `case` may change what the terms mean),
    and, for one recognised by a tensor, whose local layout is dense in its indices' order and
    names every index as a tensor dim."""
    import hashlib
    from ..dsl.tree import Require
    fdef = lib.families[name]
    if fdef.grid is None or fdef.local is None or fdef.canonical is None or fdef.shard is None or fdef.shards \
            or not all(isinstance(s, Require) for s in fdef.body):
        return ""
    local, canon = lib.layouts.get(fdef.local.call.fn), lib.layouts.get(fdef.canonical.call.fn)
    if local is None or canon is None or local.regions:
        return ""
    bound = dict(zip(local.params, fdef.local.call.args))
    indices = tuple(i.name for i in local.indices)
    extents = sorted((i.name, _bound_text(i.extent, bound)) for i in local.indices)
    element = _bound_text(local.element, bound) if local.element is not None else "1"
    names = sorted(zip((i.name for i in canon.indices), map(repr, fdef.shard.targets)))
    if local.tensor is None:  # read as its page's bytes lie: the offset's terms say which index a byte is
        offset = _bound_text(local.offset, bound) if local.offset is not None else ""
        key = (fdef.serves, fdef.grid.id, "page", indices, offset, element, extents, names)
        return hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    tensor = _tensor_names(local, indices)
    outer = local.tensor_outer
    if not _dense(local) or tensor is None or sorted(tensor) != sorted(indices) or tensor[:outer] != indices[:outer]:
        return ""
    key = (fdef.serves, fdef.grid.id, "tensor", tensor, outer, element, extents, names)
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def _dense(layout) -> bool:
    """Whether a layout's offset is the dense one of its indices in declaration order (the last
    fastest), as a layout without an `offset` statement gets."""
    from ..dsl.tree import BinOp, Name
    if not layout.indices:
        return False
    dense = Name(layout.indices[0].name, None)
    for i in layout.indices[1:]:
        dense = BinOp("+", BinOp("*", dense, i.extent, None), Name(i.name, None), None)
    return layout.offset == dense


def _tensor_names(layout, indices: tuple) -> tuple | None:
    """The index each tensor dim holds, the block dim aside (`tensor (block, ...)`: every index in
    order), or None where a dim is not one index."""
    names = tuple(n.id for n in layout.tensor)
    if "..." in names:
        return indices if names == ("...",) else None
    return names if not layout.tensor_groups else None


def _bound_text(expr, bound: dict) -> str:
    """A layout expression with its parameters replaced by the family's arguments, as text
    (spans aside: the tree's reprs leave them out)."""
    from ..dsl.tree import BinOp, Call, Name, Neg
    if isinstance(expr, Name):
        return _bound_text(bound[expr.id], {}) if expr.id in bound else repr(expr)
    if isinstance(expr, BinOp):
        return f"({_bound_text(expr.left, bound)} {expr.op} {_bound_text(expr.right, bound)})"
    if isinstance(expr, Neg):
        return f"(-{_bound_text(expr.arg, bound)})"
    if isinstance(expr, Call):
        return f"{expr.fn}({', '.join(_bound_text(a, bound) for a in expr.args)})"
    return repr(expr)

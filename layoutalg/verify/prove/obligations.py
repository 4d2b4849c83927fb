"""A family's proof obligations as Z3 queries over the spec's direct reading.

Every query asks for a *violation* ("exists a collision", "exists an index out of
range"), quantifier-free: unsat proves the obligation, sat gives a counterexample,
anything else is unknown. Sizes are either Z3 variables over the declared domain
(fully symbolic) or ints (one configuration); the rank is always symbolic.
"""
from __future__ import annotations

import dataclasses
import weakref
from math import prod
from typing import NamedTuple

import sympy
import z3
from z3 import z3util

from ... import params
from ...errors import LayoutalgError
from ...ir.family import resolve
from ...dsl.interpret import Reading, paths
from ...compile.codegen import compiled_reads
from ...dsl.library import Library
from ...dsl.tree import Name
from .z3ops import ask
from .sequence import sequence_query
from .store import OBLIGATIONS  # noqa: F401 - re-exported: the obligations and what they mean
from .registry import ENTRIES, check_table, in_mode, obligation
from .z3ops import Z3Ops, bare_false
from .page_tiling import distinct, tiling_query
from .witness import Cover, Digits, Layout, Runs, Shard, Witness

SYMBOLIC, PER_CONFIGURATION = in_mode("symbolic"), in_mode("per-configuration")  # (views of the registry)
UNDECIDED = "unknown"
"""Z3's third answer as `Model.solve` gives it (beside "sat" and "unsat"): a solver's word, not a
row's `Verdict`, though both are spelt "unknown"."""
PAGE = in_mode("page")
"""A family of pages: its regions and pads are pairwise disjoint and the pads one-to-one inside
the page (each data region's own rows show it one-to-one inside the page); the page is by
definition as large as its regions together, so they tile it exactly."""


class Budget(NamedTuple):
    """How hard one query may try: Z3 resource units decide; seconds only guard."""

    rlimit: int
    guard_s: float


def family_names(lib: Library, family: str) -> set[str]:
    """Every runtime name the family's spec text could read: the names written in its grid,
    its statements, its layouts (every region of its pages) and the library's shared lets and
    fns, with tp, pcp and page_size, which every model assumes about. A symbolic model
    quantifies over these: a name only another loaded file's family reads changes no query
    and no witness; and since the spec's reading evaluates nothing outside these texts, no
    name it reads is left at a default (the compiled form, which cancels `foo - foo`, would
    be too few)."""
    cache = lib.__dict__.setdefault("_prover_names", {})
    if family not in cache:
        fdef = lib.family_def(family)
        layouts = {fdef.local.call.fn, fdef.canonical.call.fn, *(fdef.page or ())}
        texts = [lib.grids[fdef.grid.id].body if fdef.grid is not None and fdef.grid.id in lib.grids else (), fdef,
                 *(lib.layouts[n] for n in layouts if n in lib.layouts), *lib.lets.values(), *lib.fns.values()]
        found: set[str] = set()
        _names_in(texts, found, set())
        cache[family] = (found & set(lib.vocabulary())) | {"tp", "pcp", "page_size"}
    return cache[family]


def _names_in(x, found: set, seen: set) -> None:
    """Every `Name` in a syntax tree (dataclasses, tuples and lists of them)."""
    if isinstance(x, (list, tuple)):
        for y in x:
            _names_in(y, found, seen)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type) and id(x) not in seen:
        seen.add(id(x))
        if isinstance(x, Name):
            found.add(x.id)
        for f in dataclasses.fields(x):
            _names_in(getattr(x, f.name), found, seen)


_SHADOWS: dict[int, tuple] = {}
"""`Model._shadows`' terms by library: id -> (a weak reference to it, {key: terms}). An entry
goes with its library (a library is not changed once loaded)."""


def _shadow_memo(lib: Library) -> dict:
    i = id(lib)
    held = _SHADOWS.get(i)
    if held is None or held[0]() is not lib:
        held = _SHADOWS[i] = (weakref.ref(lib, lambda _, i=i: _SHADOWS.pop(i, None)), {})
    return held[1]


def _shadow_key(family: str, path: tuple, sizes: dict):
    """(family, path, each size's name and value) where every value is an int or a named Z3
    constant (what the terms are a function of), else None (not memoised)."""
    said = []
    for n, v in sorted(sizes.items()):
        if isinstance(v, int):
            said.append((n, "int", v))
        elif z3.is_const(v) and v.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            said.append((n, "z3", v.decl().name()))
        else:
            return None
    return family, path, tuple(said)


class Model:
    """One case path of one family, with sizes as Z3 variables or ints."""

    def __init__(self, lib: Library, family: str, path: tuple, sizes: dict | None = None,
                 bounds: dict | None = None, page_guard: bool = True, tag: str = "", compiled: bool = True,
                 world_guard: bool = True):
        self.lib, self.family, self.path = lib, family, path
        self.page_guard = page_guard
        self.world_guard = world_guard  # False: configurations whose grid is not the worker group too (never served)
        self.compiled = compiled  # False: the spec's own guards only (to say why a family applies nowhere)
        self.tag = tag  # two models in one query (a reshard: producer and consumer) name their variables apart
        self.ops = Z3Ops(tag)
        self.symbolic = sizes is None
        vocabulary = lib.vocabulary()
        if sizes is None:  # quantify over the names the family reads, whatever else the library declares
            reads = family_names(lib, family)
            vocabulary = {n: p for n, p in vocabulary.items() if n in reads}
        self.sizes = {n: z3.Int(n) for n in vocabulary} if sizes is None else dict(sizes)
        self.rebound(bounds, vocabulary)
        self.r = Reading(lib, family, self.sizes, self.ops, path)
        self.fdef = lib.family_def(family)
        self.shadows = self._shadows()
        self.part = self.fdef.page is not None  # one region of a page: its box need not start at 0 or be dense
        self._n = 0
        self.guard_hit = False

    def rebound(self, bounds: dict | None, vocabulary: dict | None = None) -> None:
        """Bound the symbolic sizes by `bounds` (None: the declared domain) from the next query on;
        the terms and side conditions stay (a hunt that widens its bounds reads the spec once)."""
        domain = {n: (p.lo, p.hi) for n, p in (vocabulary or self.lib.vocabulary()).items() if n in self.sizes}
        self.bounds = {n: (domain if bounds is None else bounds).get(n, domain[n]) for n in domain}
        self._assumed = None  # (the flags it was made under, `assumptions`)

    # -- assumptions
    def assumptions(self) -> list:
        """What every query of this model assumes: the declared domain (symbolic sizes), this
        path's cases and no earlier path's, the spec's and the compiler's guards, the page and
        the worker group. Made once (a proof asks thousands of queries of one model, and each
        reading of the terms costs Python time): the terms are the model's sizes' and reading's
        alone, and their divisions are memoised by `ops`, so a second reading is the first."""
        key = (self.symbolic, self.page_guard, self.compiled, self.world_guard)
        if self._assumed is None or self._assumed[0] != key:
            self._assumed = (key, self._assume())
        return list(self._assumed[1])

    def _assume(self) -> list:
        a = []
        if self.symbolic:
            for n, (lo, hi) in self.bounds.items():
                a += [self.sizes[n] >= lo, self.sizes[n] <= hi]
        a += [c for c, _ in self.r.cases] + [g for g, _ in self.r.guards] + self.shadows
        if self.page_guard:
            a.append(self.page_fits())
        a += self.extents_nonnegative()
        a += self.compiled_guards() if self.compiled else []
        if self.world_guard:
            a.append(self.served())  # the runtime's other check
        return a

    def served(self):
        """The runtime's check that the grid is the worker group: its world is tp * pcp ranks
        (times pp for a stage grid's family, one that reads `pp`: `params.group`)."""
        reads = compiled_reads(self.lib, self.family, family_names) if "pp" in self.sizes else ()
        return self.r.world == params.group(self.sizes, reads)

    def compiled_guards(self) -> list:
        """The guards the runtime checks on this path, as the compiler wrote them: the spec's
        `require`s and those the compiler adds of its own (a digit split exactly, so
        `block_size / interleave` a whole number; every divisor positive). The runtime
        refuses a size that breaks one, so no verdict is drawn there. A guard that cannot be
        read here is left out, which only widens the sizes asked about."""
        variant = case_variant(self.lib, self.family, self.path)
        if variant is None:
            return []
        out = []
        for g in variant[0].guards:
            try:
                c = cond_to_z3(self, variant[1], g.cond)
            except (TypeError, KeyError, ArithmeticError):
                continue
            if not (isinstance(c, bool) and c):
                out.append(c)
        return out

    def _shadows(self) -> list:
        """The runtime takes the first path whose cases all hold, so this path runs only where
        every earlier path has a case that fails. Without this, cases that overlap would refute
        a path at sizes an earlier path serves: a verdict about bytes this path never copies.

        Each earlier path is read with arithmetic of its own (its divisions must not constrain
        this path); one whose cases divide is left out, which only weakens the assumption.
        The terms are the sizes' alone, so a model of the same library, family, path and sizes
        (each an int or a named Z3 constant) takes them from `_shadow_memo` (a proof builds
        models of one path many times, and reading every earlier path is most of a build)."""
        key = _shadow_key(self.family, self.path, self.sizes)
        memo = _shadow_memo(self.lib) if key is not None else {}
        if key not in memo:
            memo[key] = self._read_shadows()
        return list(memo[key])

    def _read_shadows(self) -> list:
        out = []
        for path in paths(self.lib, self.family):
            if path == self.path:
                return out
            try:
                cases = [c for c, _ in Reading(self.lib, self.family, self.sizes, Z3Ops(), path).cases]
            except (ArithmeticError, LookupError):
                continue
            if not cases or any(c is False for c in cases):
                continue
            terms = [c for c in cases if not isinstance(c, bool)]
            if any("!" in str(v) for t in terms for v in z3util.get_vars(t)):
                continue  # a quotient of its own: not a function of the sizes alone
            out.append(z3.Not(z3.And(*terms)) if terms else z3.BoolVal(False))
        return out

    def extents_nonnegative(self) -> list:
        """The runtime's guard: no index of any layout (every region of a page) has a negative
        extent; an empty box is a box, a negative extent is no size at all."""
        out = []
        for role in ("local", "canonical"):
            layouts = [self.r.region(role, n) for n in self.r.regions(role)] if self.part else [self.r.layout(role)]
            for ldef, bound in layouts:
                out += [self.r.expr(d.extent, bound) >= 0 for d in ldef.indices]
        return [c for c in out if not (isinstance(c, bool) and c)]

    def page_fits(self):
        """The runtime's own guard: a family applies only where its local layout is the page
        (and, always assumed, where its grid's world is the worker group, tp * pcp)."""
        return self.r.page("local") == self.sizes["page_size"]

    def solve(self, violation, budget: "Budget", seeds: int = 1, how=None) -> tuple[str, z3.ModelRef | None]:
        """sat (with a model), unsat, or unknown (`UNDECIDED`), as `z3ops.ask` decides within
        `budget.rlimit`, shared by a fixed portfolio of `seeds` (nonlinear queries are sensitive to
        the seed). Where the wall-clock guard decides, `guard_hit` is set: the result is not final.
        `how`: the obligation asked (None: an ordinary query), whose `first_try` and `blast` say
        how `ask` asks it."""
        first, blast = (True, True) if how is None else (how.first_try, how.blast)
        for seed in range(seeds):
            assumed = self.assumptions()
            # the side conditions last: the violation's terms (read before this) and the assumptions' add definitions
            res, s = ask([*assumed, violation, *self.ops.side], budget.rlimit // seeds, budget.guard_s, seed,
                         first=first, blast=blast)
            if res == z3.sat:
                return "sat", s.model()
            if res == z3.unsat:
                return "unsat", None
            if "timeout" in s.reason_unknown():
                self.guard_hit = True
        return UNDECIDED, None

    # -- variables
    def fresh(self, name: str):
        self._n += 1
        return z3.Int(f"{self.tag}{name}@{self._n}")

    def index(self, role: str, tag: str, bounded: bool = True):
        """(a fresh index of layout `role`, its bounds: [] where not `bounded`, a reading that
        only wants the divisions its terms make, which `touch` is)."""
        ext = self.r.extents(role)
        idx = {n: self.fresh(f"{n}{tag}") for n in ext}
        return idx, [z3.And(v >= 0, v < ext[n]) for n, v in idx.items()] if bounded else []

    def digits(self, tag: str, bounded: bool = True):
        rext = self.r.rank_extents()
        d = {n: self.fresh(f"{n}{tag}") for n, _ in rext}
        return d, [z3.And(d[n] >= 0, d[n] < e) for n, e in rext] if bounded else []

    def rank_of(self, digits: dict):
        r = 0
        for n, e in self.r.rank_extents():
            r = r * e + digits[n]
        return r

    def touch(self) -> None:
        """Read the local layout, the shard map, a `sequence` claim's token fn and, in a region
        of a page, every region and pad of both pages once, at fresh indices and digits, so
        that their exact divisions join the side conditions: a configuration found after this
        is one where every term of the family can be exact (a division that never is would
        otherwise leave every query vacuously unsat, "proved")."""
        for read in (self._touch_page, self._touch_sequence, self._touch_regions):
            try:  # each on its own: one that cannot be read does not keep the others out
                read()
            except (ArithmeticError, LookupError):
                pass  # what cannot be read here is reported by the obligations that read it

    def _touch_page(self) -> None:
        page, bound = self.r.layout("local")
        if page.regions:  # a family of pages: each region's offset (its parts read their shard maps)
            for region in page.regions:
                self.r.expr(region.offset, {**bound, **{d.name: self.fresh(d.name + "~") for d in region.indices}})
            return
        i, _ = self.index("local", "~", bounded=False)
        d, _ = self.digits("~", bounded=False)
        self.r.offset("local", i)
        self.canonical_byte(i, d)

    def _touch_sequence(self) -> None:
        if self.fdef.sequence is not None and not self.r.layout("local")[0].regions:  # the claim's token fn
            i, _ = self.index("local", "~t", bounded=False)
            d, _ = self.digits("~t", bounded=False)
            self.r.sequence_place(i, d)

    def _touch_regions(self) -> None:
        # a region of a page: the page's other regions and pads, as its tiling rows read them
        if self.part and not self.r.layout("local")[0].regions:
            for role in ("local", "canonical"):
                for name in self.r.regions(role):
                    ldef, b = self.r.region(role, name)
                    for x in (*(ix.extent for ix in ldef.indices), ldef.element):
                        if x is not None:
                            self.r.expr(x, b)
                    self.r.expr(ldef.offset, {**b, **{ix.name: self.fresh(ix.name + "~") for ix in ldef.indices}})

    def canonical_byte(self, idx: dict, digits: dict):
        return self.r.offset("canonical", self.r.shard(idx, digits))

    def element(self, role: str = "local"):
        ldef, bound = self.r.layout(role)
        return self.r.element(ldef, bound)


def _bijective_query(m: Model, role: str):
    i, ci = m.index(role, "")
    j, cj = m.index(role, "'")
    ldef, bound = m.r.layout(role)
    off = lambda x: m.r.expr(ldef.offset, {**bound, **x})  # noqa: E731 - element offsets
    size = prod(m.r.extents(role).values()) if not m.symbolic else product(m.r.extents(role).values())
    clash = z3.And(*ci, *cj, distinct(i, j), off(i) == off(j))
    out = z3.And(*ci, z3.Or(off(i) < 0, off(i) >= size))
    if m.part:  # a region: one-to-one, and every element inside the whole page
        size, e = m.r.page(role), m.element(role)
        out = z3.And(*ci, z3.Or(off(i) < 0, e * off(i) + e > size))
    return z3.Or(clash, out), Layout(i=i, j=j, role=role, clash=clash, size=size)


def _in_range_query(m: Model):
    d, cd = m.digits("")
    i, ci = m.index("local", "")
    ext = m.r.extents("canonical")
    c = m.r.shard(i, d)
    return z3.And(*ci, *cd, z3.Or(*[z3.Or(c[n] < 0, c[n] >= ext[n]) for n in c])), Shard(i=i, d=d, c=c)


def _injective_query(m: Model):
    d, cd = m.digits("")
    i, ci = m.index("local", "")
    j, cj = m.index("local", "'")
    ci_, cj_ = m.r.shard(i, d), m.r.shard(j, d)
    same = z3.And(*[ci_[n] == cj_[n] for n in ci_])
    return z3.And(*ci, *cj, *cd, distinct(i, j), same), Shard(i=i, d=d, j=j)


def _disjoint_query(m: Model):
    d, cd = m.digits("")
    e, ce = m.digits("'")
    i, ci = m.index("local", "")
    j, cj = m.index("local", "'")
    same_writer = z3.And(*[d[n] == e[n] for n in m.r.replicas]) if m.r.replicas else z3.BoolVal(True)
    # at index level: with canonical-bijective and shard-in-range, two canonical bytes
    # coincide exactly when their canonical indices (and byte in the element) do
    a, b = m.r.shard(i, d), m.r.shard(j, e)
    hit = z3.And(*[a[n] == b[n] for n in a])
    return z3.And(*cd, *ce, *ci, *cj, distinct(d, e), same_writer, hit), Shard(i=i, d=d, j=j, e=e)


def _identity_query(m: Model):
    d, _ = m.digits("")
    i, ci = m.index("local", "")
    one = z3.And(*[e == 1 for _, e in m.r.rank_extents()])
    zero = {n: 0 for n in d}
    differs = m.r.offset("local", i) != m.canonical_byte(i, zero)
    if not m.part:  # one box: the pages themselves are one (a page of regions may pad only its local page)
        differs = z3.Or(differs, m.r.page("local") != m.r.page("canonical"))
    return z3.And(one, *ci, differs), Shard(i=i)


QUERIES = {
    "local-bijective": lambda m: _bijective_query(m, "local"),
    "canonical-bijective": lambda m: _bijective_query(m, "canonical"),
    "shard-in-range": _in_range_query,
    "shard-injective": _injective_query,
    "writers-disjoint": _disjoint_query,
    "writers-cover": lambda m: _cover_query(m, *m.digits("")),
    "single-rank-identity": _identity_query,
    "sequence-order": sequence_query,
    "regions-tile-local": lambda m: tiling_query(m, "local"),
    "regions-tile-canonical": lambda m: tiling_query(m, "canonical"),
}
"""Obligation name -> its query on a `Model`: (violation formula, what each witness term
means): the rows whose `registry` query is "model". The rows asked otherwise: `digits-match-spec`
(`_digits_query`, of the family IR), `one-format` (`meaning.query`), `runs-*` (`runs_query`),
`structure` (sympy) and `page-size` (witnesses)."""
check_table("obligations.QUERIES", QUERIES, [o.name for o in ENTRIES if o.query == "model"])


def box_empty(m: Model, budget: Budget, seeds: int = 1) -> bool:
    """Whether no index lies in the local index box of `m` (a fresh model: nothing asked of it
    yet) at any size on its path: its assumptions and an index inside the box are unsat (Z3).
    A canonical pad the regions always fill is such a box; its digit table is never read (and
    may divide by an extent that is 0). An answer resting on a bare `false` among the side
    conditions (a constant divisor at most 0) is not taken: False."""
    _, inside = m.index("local", "")
    if any(bare_false(c) for c in m.ops.side):
        return False
    return m.solve(z3.And(*inside), budget, seeds)[0] == "unsat"


EMPTY_BOX = "the pad's box is empty at every size (no index lies in it under the path's assumptions), " \
            "so its digit table is never read"
"""What a pad's `digits-match-spec` says of a case path where its box is empty (`box_empty`)."""


def query(m: Model, name: str, variant=None, atoms=None):
    """(violation formula, what each witness variable means) for obligation `name`.

    `digits-match-spec` checks the family IR (`variant`, a `family.Variant`, with the
    family's `atoms`) against the spec's direct reading: translation validation of the
    normal form, for all sizes.
    """
    if obligation(name).query == "digits":
        return _digits_query(m, variant, atoms)
    return QUERIES[name](m)


def _cover_query(m: Model, d: dict, cd: list):
    """Every canonical byte has a writer (surjectivity), shown on its own by pigeonhole.

    Within one writer class (the replica digits fixed) the map (rank, local index) ->
    canonical index must be injective and stay inside the canonical box; the canonical
    layout must send its box one-to-one into its page; and the class must hold exactly as
    many elements, of the same size, as the canonical page. An injection between finite
    sets of equal size is onto, so then no canonical byte is left unwritten.
    """
    rext = dict(m.r.rank_extents())
    world_digits = product(rext.values())
    writers = product(rext[n] for n in m.r.replicas)
    lext, cext = m.r.extents("local"), m.r.extents("canonical")
    count = z3.Or(world_digits != m.r.world,
                  world_digits * product(lext.values()) != writers * product(cext.values()),
                  m.element("local") != m.element("canonical"))
    e, ce = m.digits("'")
    i, ci = m.index("local", "")
    j, cj = m.index("local", "'")
    a, b = m.r.shard(i, d), m.r.shard(j, e)
    same_class = [d[n] == e[n] for n in m.r.replicas]
    same = [a[n] == b[n] for n in a]
    collide = z3.Or(z3.And(*cd, *ce, *ci, *cj, *same_class, distinct(d, e), *same),
                    z3.And(*cd, *ci, *cj, distinct(i, j), *[a[n] == m.r.shard(j, d)[n] for n in a]))
    outside = z3.And(*cd, *ci, z3.Or(*[z3.Or(a[n] < 0, a[n] >= cext[n]) for n in a]))
    k, ck = m.index("canonical", "c")
    l_, cl = m.index("canonical", "c'")
    ldef, bound = m.r.layout("canonical")
    off = lambda x: m.r.expr(ldef.offset, {**bound, **x})  # noqa: E731 - element offsets
    inside = z3.Or(off(k) < 0, off(k) >= product(cext.values()))
    if m.part:  # a region of the canonical page: inside the page, which the regions tile
        ce = m.element("canonical")
        inside = z3.Or(off(k) < 0, ce * off(k) + ce > m.r.page("canonical"))
    canon = z3.Or(z3.And(*ck, *cl, distinct(k, l_), off(k) == off(l_)), z3.And(*ck, inside))
    w = Cover(d=d, e=e, i=i, j=j, a=a, k=k, l=l_, count=count, collide=collide, outside=outside, canon=canon,
              world=world_digits, writers=writers, local=m.r.page("local"), canon_page=m.r.page("canonical"),
              # solved one by one: each is easier alone, and all must be unsat
              parts=(count, collide.children()[0], collide.children()[1], outside, canon))
    return z3.Or(count, collide, outside, canon), w


def _digits_query(m: Model, v, atoms):
    idx, ci = m.index("local", "")
    d, cd = m.digits("")
    e, b = m.element(), m.fresh("b")
    local, canon = size_to_z3(m, atoms, v.local_base), size_to_z3(m, atoms, v.canonical_base)
    for dg in v.digits:
        if dg.split is None:
            val = b
        else:
            src = d[dg.split.source] if dg.is_rank else idx[dg.split.source]
            val = m.ops.mod(m.ops.floordiv(src, size_to_z3(m, atoms, dg.split.lower)),
                            size_to_z3(m, atoms, dg.split.extent))
        if not dg.is_rank:
            local = local + val * size_to_z3(m, atoms, dg.local)
        canon = canon + val * size_to_z3(m, atoms, dg.canonical)
    want_local, want_canon = m.r.offset("local", idx) + b, m.canonical_byte(idx, d) + b
    bad = z3.Or(local != want_local, canon != want_canon)
    inside = [*ci, *cd, b >= 0, b < e]
    return z3.And(*inside, bad), Digits(i=idx, d=d, local=local, canon=canon, want_local=want_local,
                                        want_canon=want_canon, sides=(z3.And(*inside, local != want_local),
                                                                      z3.And(*inside, canon != want_canon)))


def size_to_z3(m: Model, atoms, e):
    """A sympy size of the IR (polynomial over parameters and division atoms) as a Z3 term."""
    if isinstance(e, int) or e.is_Integer:
        return int(e)
    if isinstance(e, sympy.Symbol):
        if e in atoms.by_symbol:
            a = atoms.by_symbol[e]
            op = {"/": m.ops.exact, "//": m.ops.floordiv, "%": m.ops.mod}[a.op]
            return op(size_to_z3(m, atoms, a.num), size_to_z3(m, atoms, a.den))
        return m.sizes[e.name]
    if isinstance(e, (sympy.Add, sympy.Mul)):
        parts = [size_to_z3(m, atoms, x) for x in e.args]
        out = parts[0]
        for x in parts[1:]:
            out = out + x if isinstance(e, sympy.Add) else out * x
        return out
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return product([size_to_z3(m, atoms, e.base)] * int(e.exp))
    raise TypeError(f"not a polynomial size: {e}")


def cond_to_z3(m: Model, atoms, c):
    """A sympy condition of the IR (a guard: comparisons of sizes, and, or, not) as a Z3 term."""
    if c is sympy.true or c is sympy.false:
        return bool(c)
    if isinstance(c, (sympy.And, sympy.Or)):
        parts = [cond_to_z3(m, atoms, x) for x in c.args]
        return m.ops.and_(parts) if isinstance(c, sympy.And) else m.ops.or_(parts)
    if isinstance(c, sympy.Not):
        return m.ops.not_(cond_to_z3(m, atoms, c.args[0]))
    if isinstance(c, sympy.core.relational.Relational):
        a, b = size_to_z3(m, atoms, c.lhs), size_to_z3(m, atoms, c.rhs)
        return m.ops.cmp[c.rel_op](a, b)
    raise TypeError(f"not a condition: {c}")


def case_variant(lib: Library, family: str, path: tuple):
    """(the compiled IR's variant for this case path, the family's atoms), or None where the
    family has no normal form (the runtime then serves it nowhere but by its fallback)."""
    memo = lib.__dict__.setdefault("_prover_variants", {})
    if family not in memo:
        try:
            fam = resolve(lib, family)
            memo[family] = (dict(zip(paths(lib, family), fam.variants)), fam.atoms)
        except (LayoutalgError, ArithmeticError, TypeError, ValueError):
            memo[family] = None
    got = memo[family]
    return None if got is None or path not in got[0] else (got[0][path], got[1])


def product(xs):
    out = 1
    for x in xs:
        out = out * x
    return out


def holding(model: z3.ModelRef, w: Witness):
    """The meaning (`w.meaning`) of the first part of a violation (`w.parts`) that `model`
    satisfies, or None."""
    return next((said for part, said in zip(w.parts, w.meaning)
                 if z3.is_true(model.eval(part, model_completion=True))), None)


def value(model: z3.ModelRef, x) -> int:
    return x if isinstance(x, int) else model.eval(x, model_completion=True).as_long()


# ---- per configuration: the runs the lowering emits, against the spec ------------------

def runs_query(m: Model, name: str, inst, runs):
    """Violation of a runs obligation at one configuration (sizes are ints), symbolic rank, of
    the `runs` the lowering emits there (`lower.StridedRuns`: local, then canonical). In a
    region of a page the runs cover the region's bytes once, all inside the page."""
    offsets, fs, nf, ls, cs = runs.offsets, runs.fragment, runs.count, runs.stride_a, runs.stride_b
    region, page = inst.local_page, m.r.page("local") if m.part else inst.local_page
    LO, CO, i, k = m.fresh("run_lo"), m.fresh("run_co"), m.fresh("i"), m.fresh("k")
    pick = z3.Or(*[z3.And(LO == lo, CO == co) for lo, co in offsets])
    frag = z3.And(pick, i >= 0, i < nf, k >= 0, k < fs)
    x = LO + i * ls + k
    if name == "runs-cover-local":
        LO2, i2, k2 = m.fresh("run_lo"), m.fresh("i"), m.fresh("k")
        pick2 = z3.Or(*[LO2 == lo for lo, _ in offsets])
        frag2 = z3.And(pick2, i2 >= 0, i2 < nf, k2 >= 0, k2 < fs)
        overlap = z3.And(frag, frag2, z3.Or(LO != LO2, i != i2, k != k2), x == LO2 + i2 * ls + k2)
        outside = z3.And(frag, z3.Or(x < 0, x >= page))
        total = len(offsets) * nf * fs
        return z3.Or(overlap, outside, z3.BoolVal(total != region)), Runs(x=x, total=total)
    d, cd = m.digits("")
    rank = m.rank_of(d)
    base = inst.canonical_base
    for n, rs, c, _ in inst.ranks:
        base = base + m.ops.mod(m.ops.floordiv(rank, rs), n) * c
    idx, ci = m.index("local", "")
    e = m.element()
    b = m.fresh("b")
    here = z3.And(b >= 0, b < e, x == m.r.offset("local", idx) + b)
    claimed = CO + base + i * cs + k
    return z3.And(frag, *cd, *ci, here, claimed != m.canonical_byte(idx, d) + b), \
        Runs(x=x, i=idx, d=d, claimed=claimed, b=b)

"""The reshard obligations over a plan built for all sizes (`symplan`), as Z3 queries: the
terms both readings share (`Terms`: one Z3 variable per size the two configurations share),
a run's fragment bytes picked symbolically, and `reshard-cover` and `reshard-match` asked of
one consumer rank's runs against the spec's own reading of both sides (`all_sizes` drives them).
"""
from __future__ import annotations

from typing import NamedTuple

import sympy
import z3

from ....mapping import rank_and_part
from ....verdicts import Check, Reason
from ..obligations import Model, query, value
from ..witness import Shard
from .symplan import DIVISIONS, PER_SIDE, Cross, NotEstablished, SymbolicRun


class Sides(NamedTuple):
    """The two groups' worlds, and across another cp which of them reads small pages: its
    ranks are then `k` virtual ranks each, `part * world + rank`."""

    world_x: int
    world_y: int
    cross: Cross | None

    @property
    def producers(self) -> int:
        return self.world_x * (self.cross.k if self.cross is not None and self.cross.small == "producer" else 1)

    @property
    def consumers(self) -> int:
        return self.world_y * (self.cross.k if self.cross is not None and self.cross.small == "consumer" else 1)

    def producer(self, v: int) -> tuple[int, int]:
        """(rank, part) of (virtual) producer `v`."""
        return rank_and_part(v, self.world_x) if self.producers != self.world_x else (v, 0)

    def consumer(self, v: int) -> tuple[int, int]:
        return rank_and_part(v, self.world_y) if self.consumers != self.world_y else (v, 0)


def sizes_at(mx: Model | None, my: Model | None, model) -> str:
    out = {}
    for tag, m in (("store ", mx), ("load ", my)):
        if m is None:  # a query of one configuration: the other's sizes mean nothing there
            continue
        other = my if m is mx else mx
        for n, x in sorted(m.sizes.items()):
            if z3.is_expr(x):
                apart = str(x).startswith(("x.", "y.")) or other is not None and n in other.sizes and \
                    not _same_term(x, other.sizes[n])
                out[(tag if apart else "") + n] = value(model, x)
    return ", ".join(f"{n}={v}" for n, v in out.items())


def _same_term(a, b) -> bool:
    """Whether two sizes are one term (or one number)."""
    if z3.is_expr(a) and z3.is_expr(b):
        return a.eq(b)
    return not z3.is_expr(a) and not z3.is_expr(b) and a == b


class Terms:
    """The plan's sympy sizes as Z3 terms over both configurations' sizes (`x.heads`, `y.heads`
    and the shared ones). A division is Z3's own, total: it adds no side condition, which
    could empty the domain and leave every query vacuously unsat. Each is listed instead
    (`divisions`: op, dividend, divisor) to be shown positive and, for `/`, exact wherever
    the spec applies (`_check`)."""

    def __init__(self, fam, mx: Model, my: Model, own: dict):
        self.sizes = {n: x for n, x in mx.sizes.items() if n not in PER_SIDE}
        # a name of both sides with a value of each (one block size k times the other's): the
        # plan's symbol is the shared size, each side's value a term of it
        self.sizes.update({n: z3.Int(n) for n, x in mx.sizes.items()
                           if n not in PER_SIDE and n in my.sizes and not _same_term(x, my.sizes[n])})
        self.sizes.update({f"x.{n}": mx.sizes[n] for n in PER_SIDE}, **{f"y.{n}": my.sizes[n] for n in PER_SIDE})
        self.atoms = {**fam.atoms.by_symbol, **own}
        self.divisions: list = []
        self.models = (my, mx)
        self._memo: dict = {}  # the plans of a case repeat their sizes: each is read once

    def __call__(self, e):
        e = sympy.sympify(e)
        if e not in self._memo:
            n, d = sympy.fraction(sympy.together(sympy.cancel(e)))  # (1/2 as a coefficient too)
            self._memo[e] = self._div("/", self._term(sympy.expand(n)), self._term(sympy.expand(d))) if d != 1 \
                else self._term(sympy.expand(n))
        return self._memo[e]

    def _div(self, op, a, b):
        if op not in DIVISIONS:
            raise NotEstablished(f"a division {op!r} is none of /, //, %")
        if isinstance(a, int) and isinstance(b, int):
            if b > 0 and (op != "/" or a % b == 0):
                return a // b if op != "%" else a % b
            a, b = z3.IntVal(a), z3.IntVal(b)  # listed, so shown never to hold: no proof reads it
        self.divisions.append((op, a, b))
        # the spec's reading divides the same terms: its quotient, defined by its side conditions
        # (equal to Z3's where the divisor is positive, which `divisions` shows), keeps the two
        # readings of one size one term, where Z3's own division would leave it a nonlinear fact
        for m in self.models:
            q = m.ops.quotient(a, b)
            if q is not None:
                return q[1] if op == "%" else q[0]
        return a % b if op == "%" else a / b

    def _term(self, e):
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            if e in self.atoms:
                a = self.atoms[e]
                return self._div(a.op, self._term(sympy.expand(a.num)), self._term(sympy.expand(a.den)))
            if e.name not in self.sizes:
                raise NotEstablished(f"a size of the plan reads {e.name}, whose side is not known")
            return self.sizes[e.name]
        if e.is_Add or e.is_Mul:
            parts = [self._term(x) for x in e.args]
            out = parts[0]
            for x in parts[1:]:
                out = out + x if e.is_Add else out * x
            return out
        if e.is_Pow and e.exp.is_Integer and e.exp > 0:
            out = 1
            for _ in range(int(e.exp)):
                out = out * self._term(e.base)
            return out
        raise NotEstablished(f"a size of the plan, {e}, is not a polynomial of sizes and divisions")


def z3_run(z: Terms, r: SymbolicRun):
    """(producer, src, dst, [(extent, src stride, dst stride)], dst reading, src reading) as Z3 terms."""
    def at(table):
        return [(i, z(base), [z(w) for w in ws]) for i, base, ws in table]
    return (r.producer, z(r.src), z(r.dst), [(z(e), z(a), z(b)) for e, a, b in r.modes], at(r.dst_at), at(r.src_at))


def _pick(m: Model, run):
    """One byte of a run, symbolic: (constraints, coordinates, src byte, dst byte)."""
    _, src, dst, modes = run[:4]
    cs = [m.fresh("c") for _ in modes]
    inside = [z3.And(c >= 0, c < e) for c, (e, _, _) in zip(cs, modes)]
    return inside, cs, src + sum(c * a for c, (_, a, _) in zip(cs, modes)), \
        dst + sum(c * b for c, (_, _, b) in zip(cs, modes))


def outside_page(m: Model):
    """A byte of an element the spec's local layout puts outside the local page, and its
    witnesses (the element's index `i`)."""
    i, ci = m.index("local", "")
    b = m.fresh("b")
    byte = m.r.offset("local", i) + b
    return z3.And(*ci, b >= 0, b < m.element(), z3.Or(byte < 0, byte >= m.r.page("local"))), Shard(i=i)


def cover_violations(mx: Model, my: Model, runs, sides: Sides, in_page: bool = False, one_to_one: bool = False):
    """(meaning, violation) of each way the plan can fail to write every consumer byte once.
    `in_page`: both local layouts are shown to keep their bytes inside their pages, so the
    plan's bytes (the spec's, by its readings) are inside too, and that query is not asked;
    `one_to_one`: the consumer's local layout is shown one-to-one (else it is asked here)."""
    if not in_page:
        yield "the plan writes a byte of more than a consumer page", z3.Or(*[z3.And(*inside, z3.Or(
            dst < 0, dst >= my.r.page("local"), src < 0, src >= mx.r.page("local")))
            for inside, _, src, dst in (_pick(my, r) for r in runs)], z3.BoolVal(False))
    yield "a mode of the plan has a negative extent", \
        z3.Or(*[e < 0 for r in runs for e, _, _ in r[3]], z3.BoolVal(False))
    yield "the plan reads a producer rank outside the group", \
        z3.Or(*[z3.Or(z3.IntVal(r[0]) < 0, z3.IntVal(r[0]) >= sides.producers) for r in runs], z3.BoolVal(False))
    total = sum((prod_z3(e for e, _, _ in r[3]) for r in runs), z3.IntVal(0))
    if my.part:  # a region of a page: the plan writes its bytes, the pads between regions never
        yield f"the plan writes fewer or more bytes than region '{my.fdef.shard.region}' of the consumer page " \
              f"holds", total != my.r.bytes_of(*my.r.layout("local"))
    else:
        yield "the plan writes fewer or more bytes than the consumer page holds", total != my.r.page("local")
    # no byte twice: the plan's readings of its bytes are the spec's (checked first, `match_violations`)
    # and the local layout is one-to-one, so two writes of one byte are writes of one element
    if not one_to_one:
        yield "the consumer's local layout is not one-to-one", query(my, "local-bijective")[0]
    # two bytes of each run, each with its reading: a pair of runs takes one of each (a byte of
    # each copy, apart even for one run); the queries are solved apart, so they may share names
    picks = [[_pick(my, r) for r in runs] for _ in range(2)]
    reads = [[_reading(my, cs, r[4], dst, "") for (_, cs, _, dst), r in zip(copy, runs)] for copy in picks]
    for j in range(len(runs)):
        for k in range(j, len(runs)):
            (ia, ca, _, _), (ib, cb, _, _) = picks[0][j], picks[1][k]
            (iy, by, _), (iy2, by2, _) = reads[0][j], reads[1][k]
            apart = z3.BoolVal(True) if j != k else z3.Or(*[x != y for x, y in zip(ca, cb)], z3.BoolVal(False))
            yield f"runs {j} and {k} write one consumer byte twice", \
                z3.And(*ia, *ib, apart, by == by2, *[iy[n] == iy2[n] for n in iy])


def prod_z3(xs):
    out = z3.IntVal(1)
    for x in xs:
        out = out * x
    return out


def _reading(m: Model, cs, table, byte, what: str):
    """The spec index and byte the plan says `byte` is, and what makes that reading wrong: an
    index outside the spec's box, or a byte the spec's offset puts elsewhere."""
    values = {i: base + sum((c * w for c, w in zip(cs, ws)), z3.IntVal(0)) for i, base, ws in table}
    ext = m.r.extents("local")
    idx = {n: values.get(n, z3.IntVal(0)) for n in ext}
    b = values.get("", z3.IntVal(0))
    wrong = z3.Or(*[z3.Or(idx[n] < 0, idx[n] >= ext[n]) for n in ext], b < 0, b >= m.element(),
                  byte != m.r.offset("local", idx) + b)
    return idx, b, wrong


def match_violations(mx: Model, my: Model, consumer: int, run, sides: Sides):
    """(violation of the plan's reading of its bytes, violation of the match given it). The
    first is the construction's fault (unknown), the second a plan that reads the wrong byte.
    Across another cp the two bytes must name one canonical index (each page's own), the
    small page's token shifted by the part of the big page it is, and one byte of it."""
    inside, cs, src, dst = _pick(my, run)
    iy, by, wrong_y = _reading(my, cs, run[4], dst, "consumer")
    ix, bx, wrong_x = _reading(mx, cs, run[5], src, "producer")
    dy, cdy = my.digits("")
    dx, cdx = mx.digits("")
    (s, sj), (p, pj) = sides.consumer(consumer), sides.producer(run[0])
    ranks = [*cdy, *cdx, my.rank_of(dy) == s, mx.rank_of(dx) == p]
    nowhere = z3.Or(z3.IntVal(run[0]) < 0, z3.IntVal(run[0]) >= sides.producers)  # no producer holds anything there
    unreal = z3.Or(*[e < 0 for e, _, _ in run[3]], z3.BoolVal(False))  # no byte of the run exists: none matched
    if sides.cross is None:
        differ = my.canonical_byte(iy, dy) + by != mx.canonical_byte(ix, dx) + bx
    else:
        cy, cx, t = my.r.shard(iy, dy), mx.r.shard(ix, dx), sides.cross.token
        shifted = cy[t] + sj * my.r.extents("canonical")[t] == cx[t] + pj * mx.r.extents("canonical")[t]
        differ = z3.Or(z3.Not(shifted), by != bx, *[cx[n] != cy[n] for n in cx if n != t])
    return z3.And(*inside, z3.Or(wrong_y, wrong_x)), \
        z3.Or(z3.And(*inside, nowhere), unreal, z3.And(*inside, *ranks, differ))


def same_shape(mx: Model, my: Model, cross: Cross | None = None):
    """The two canonical pages have the same indices, extents and element size (a region of a
    page: and the pages the same size): where they do not, their formats differ and the
    runtime builds no direct plan (assumed, not proved). Across another cp, the small page's
    token extent is the big one's over `k` (the runtime converts between such pages)."""
    ex, ey = mx.r.extents("canonical"), my.r.extents("canonical")
    if set(ex) != set(ey):
        return z3.BoolVal(False)
    if cross is not None:
        t, k = cross.token, cross.k
        token = ey[t] == k * ex[t] if cross.small == "producer" else ex[t] == k * ey[t]
        return z3.And(token, *[ex[n] == ey[n] for n in ex if n != t],
                      mx.element("canonical") == my.element("canonical"))
    page = [mx.r.page("canonical") == my.r.page("canonical")] if mx.part else []  # its regions and pads together
    return z3.And(*[ex[n] == ey[n] for n in ex], mx.element("canonical") == my.element("canonical"), *page)


def case_atoms(fam, built) -> tuple[dict, Reason | None]:
    """The one table of derived sizes (atoms) Z3 reads for every plan of a case, and what keeps
    it from being each plan's own as the runtime reads it (`symplan.evaluate`: the family's
    atoms, then the plan's) (None when nothing): every plan of the case defines the same atoms,
    and none otherwise than the family does."""
    table = dict(built[0].atoms) if built else {}
    for p in built:
        for s in {*p.atoms, *table}:
            if p.atoms.get(s) != table.get(s):
                said = lambda a: a.text if a is not None else "nothing"  # noqa: E731
                return table, Reason(Check.PLAN, f"consumer rank {p.consumer}'s plan defines {s} as "
                                     f"{said(p.atoms.get(s))}, consumer rank {built[0].consumer}'s as "
                                     f"{said(table.get(s))}", name=str(s))
    for s, a in table.items():
        if fam.atoms.by_symbol.get(s, a) != a:
            return table, Reason(Check.PLAN, f"the plans define {s} as {a.text}, the family as "
                                 f"{fam.atoms.by_symbol[s].text}", name=str(s))
    return {**fam.atoms.by_symbol, **table}, None


def unread(pairs, z: "Terms") -> Reason | None:
    """What keeps a case from meaning one thing to Z3 and to the runtime (None when nothing):
    no derived size (atom) under the name of a size, which the runtime would take for the
    size where a plan does not define it; the domain, pairs (dividend, divisor), each divisor
    a positive whole number and each dividend a polynomial in sizes alone (a derived size
    there is read with Z3's division, shown exact only inside the domain it would decide)."""
    for s, a in z.atoms.items():
        if s.name in z.sizes:
            return Reason(Check.PLAN, f"the plans define {s.name} as {a.text}, the name of a size", name=s.name)
    for a, b in pairs:
        if not (isinstance(b, int) or getattr(b, "is_Integer", False)) or int(b) <= 0:
            return Reason(Check.PLAN, f"the case's domain divides {a} by {b}, not by a positive whole number")
        e = sympy.sympify(a)
        odd = [s for s in e.free_symbols if s in z.atoms or s.name not in z.sizes]
        if odd or not e.is_polynomial():
            return Reason(Check.PLAN, f"the case's domain reads {a}, whose {odd[0] if odd else 'form'} is no size")
    return None


def malformed(built) -> Reason | None:
    """What makes `built` no plan at all (None when nothing): consumers and producers are ranks,
    plain ints (a float would be truncated by one check and compared exactly by another), and
    every division of its sizes is one the language has."""
    for p in built:
        if type(p.consumer) is not int or any(type(r.producer) is not int for r in p.runs):
            return Reason(Check.PLAN, f"consumer {p.consumer!r} reads producers {[r.producer for r in p.runs]!r}: "
                          f"ranks are ints")
        bad = [a.op for a in p.atoms.values() if a.op not in DIVISIONS]
        if bad:
            return Reason(Check.PLAN, f"a division {bad[0]!r} of its sizes is none of /, //, %")
    return None


def grid_short(mx: Model, my: Model):
    """A configuration's rank digits do not number exactly its world: some rank would have none."""
    return z3.Or(*[prod_z3(e for _, e in m.r.rank_extents()) != m.r.world for m in (mx, my)])


def canonical_differs(mx: Model, my: Model):
    """Some canonical index of one shape has another offset in the two configurations."""
    idx, inside = my.index("canonical", "")
    return z3.And(*inside, mx.r.offset("canonical", idx) != my.r.offset("canonical", idx))

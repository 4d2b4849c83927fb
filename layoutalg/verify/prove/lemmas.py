"""Cut lemmas: facts a certificate proves once, in a file of their own, and asserts at its terms.

A solver that cannot find an argument by itself may still check each step of it. A dense
layout is one-to-one, and stays in its box, by one fact about one digit, used once a digit:

    DIGIT:     x + a*X = y + a*Y,  0 <= x, y < a              gives  x = y  and  X = Y
    RANGE:     0 <= x < a,  0 <= X < M                         gives  0 <= x + a*X < a*M
    QUOTIENT:  0 <= q*b + r < Q*b,  0 <= r < b                 gives  0 <= q < Q

Each is a formula over fresh integers, valid for all of them, and certified once
(`shared()`: its negation, unsat). They apply to a term through its CHAIN: the term (a
layout's offset, a coordinate of the shard map) is its base plus the Horner form of its
atoms (indices, rank digits, and an index's quotient or remainder by a size), fastest first,

    term = base + (a0 + E0 * (a1 + E1 * (... + E(n-2) * a(n-1))))

with each atom's extent (a quotient's `Q` with `E = Q*b`) and the box the atoms fill: an
identity certified for every point of the box under the case's assumptions in a file of
the row's own. A certificate then asserts instances of them at its own terms. An instance
of a valid formula is valid, so asserting it changes no answer: the query is unsat with
them exactly when it is without them, and what is left for the second solver is linear in
the monomials. Nothing here is trusted: a wrong order, a term that is not dense, or a
chain that does not hold makes its identity file sat (or undecided), and the row is not
certified.

A region of a page places its bytes between its first and last element's, by four more:

    BOUND:     x <= A,  X <= B,  r >= 0                        gives  x + r*X <= A + r*B
    SCALE:     x < M,  e > 0                                   gives  e*x + e <= e*M
    LOW:       x >= 0,  X >= 0,  r >= 0                        gives  x + r*X >= 0
    ABOVE:     x >= y,  e >= 0                                 gives  e*x >= e*y

And a digit table, which reads an index through remainders of its quotients, meets the
spec's reading of the index itself by DIGIT and QUOTIENT between divisions (`divisions`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import z3
from z3 import z3util

from .obligations import product
from .z3ops import ask, remembered, term_key

SHARED = "shared-lemmas"
"""The folder (in a certificate folder) of the lemmas every chain asserts instances of; its
name is no identifier, so no family's folder can take it."""


def _ints(*xs) -> list:
    """`xs` as Z3 terms (a Python int as its literal): a lemma's instance prints as the lemma's own
    text does, which `verify.audit` matches term for term (`0 >= 0` would be Python's True)."""
    return [z3.IntVal(x) if isinstance(x, int) else x for x in xs]


@remembered(200_000)
def digit(a, x, X, y, Y):
    """DIGIT at (a, x, X, y, Y): two mixed-radix numbers with equal value agree in their digit."""
    a, x, X, y, Y = _ints(a, x, X, y, Y)
    return z3.Implies(z3.And(x + a * X == y + a * Y, x >= 0, x < a, y >= 0, y < a), z3.And(x == y, X == Y))


@remembered(200_000)
def range_(a, x, X, M):
    """RANGE at (a, x, X, M): a digit below `a` over a number below `M` is a number below `a*M`."""
    a, x, X, M = _ints(a, x, X, M)
    return z3.Implies(z3.And(x >= 0, x < a, X >= 0, X < M), z3.And(x + a * X >= 0, x + a * X < a * M))


@remembered(200_000)
def quotient(b, q, r, Q):
    """QUOTIENT at (b, q, r, Q): a number below `Q*b` has its quotient by `b` below `Q`."""
    b, q, r, Q = _ints(b, q, r, Q)
    return z3.Implies(z3.And(q * b + r >= 0, q * b + r < Q * b, r >= 0, r < b), z3.And(q >= 0, q < Q))


@remembered(200_000)
def bound(A, x, r, X, B):
    """BOUND at (A, x, r, X, B): a digit at most `A` over a number at most `B`, by a radix that
    is not negative, is a number at most `A + r*B`."""
    A, x, r, X, B = _ints(A, x, r, X, B)
    return z3.Implies(z3.And(x <= A, X <= B, r >= 0), x + r * X <= A + r * B)


@remembered(200_000)
def scale(e, x, M):
    """SCALE at (e, x, M): an element below `M`, of `e` bytes, ends by byte `e*M`."""
    e, x, M = _ints(e, x, M)
    return z3.Implies(z3.And(x < M, e > 0), e * x + e <= e * M)


@remembered(200_000)
def low(x, r, X):
    """LOW at (x, r, X): a digit and a number that are not negative, by a radix that is not,
    make a number that is not negative."""
    x, r, X = _ints(x, r, X)
    return z3.Implies(z3.And(x >= 0, X >= 0, r >= 0), x + r * X >= 0)


@remembered(200_000)
def above(e, x, y):
    """ABOVE at (e, x, y): an element at offset `x` at least `y`, of `e` bytes, starts at byte
    `e*y` or later."""
    e, x, y = _ints(e, x, y)
    return z3.Implies(z3.And(x >= y, e >= 0), e * x >= e * y)


@remembered(200_000)
def monotone(b, a, q, r, A, Q, R):
    """MONOTONE at (b, a, q, r, A, Q, R): floor division by `b` is monotone in the dividend,
    `a = q*b + r` and `A = Q*b + R` (remainders in [0, b)) with `a <= A` give `q <= Q`."""
    b, a, q, r, A, Q, R = _ints(b, a, q, r, A, Q, R)
    return z3.Implies(z3.And(a == q * b + r, r >= 0, r < b, A == Q * b + R, R >= 0, R < b, a <= A), q <= Q)


@remembered(200_000)
def strict(b, a, q, r, A, Q, R):
    """STRICT at (b, a, q, r, A, Q, R): a dividend below an exact multiple `A = Q*b` has a
    smaller quotient, `a = q*b + r` (0 <= r < b) with `a < A` gives `q < Q`."""
    b, a, q, r, A, Q, R = _ints(b, a, q, r, A, Q, R)
    return z3.Implies(z3.And(a == q * b + r, r >= 0, r < b, A == Q * b + R, R == 0, a < A), q < Q)


@remembered(200_000)
def same(b, a, q, r, A, Q, R):
    """SAME at (b, a, q, r, A, Q, R): one dividend divided by one divisor twice (two
    configurations' readings of a shared size) has one quotient and one remainder."""
    b, a, q, r, A, Q, R = _ints(b, a, q, r, A, Q, R)
    return z3.Implies(z3.And(a == q * b + r, r >= 0, r < b, A == Q * b + R, R >= 0, R < b, a == A),
                      z3.And(q == Q, r == R))


LEMMAS = {
    "digit": (digit, 5, "x + a*X = y + a*Y with 0 <= x, y < a gives x = y and X = Y"),
    "range": (range_, 4, "0 <= x < a and 0 <= X < M give 0 <= x + a*X < a*M"),
    "quotient": (quotient, 4, "0 <= q*b + r < Q*b with 0 <= r < b gives 0 <= q < Q"),
    "bound": (bound, 5, "x <= A, X <= B and r >= 0 give x + r*X <= A + r*B"),
    "scale": (scale, 3, "x < M and e > 0 give e*x + e <= e*M"),
    "low": (low, 3, "x >= 0, X >= 0 and r >= 0 give x + r*X >= 0"),
    "above": (above, 3, "x >= y and e >= 0 give e*x >= e*y"),
    "monotone": (monotone, 7, "a = q*b + r, A = Q*b + R with 0 <= r, R < b and a <= A give q <= Q"),
    "strict": (strict, 7, "a = q*b + r with 0 <= r < b, A = Q*b + R with R = 0, and a < A give q < Q"),
    "same": (same, 7, "a = q*b + r, A = Q*b + R with 0 <= r, R < b and a = A give q = Q and r = R"),
}
"""Lemma name -> (its formula at given terms, how many terms, what it says)."""


def shared() -> list[tuple[str, str, list]]:
    """(name, what it says, assertions whose unsat certifies it) of every lemma: its negation
    at fresh integers (which include every integer, so unsat shows it for all)."""
    out = []
    for name, (formula, arity, said) in LEMMAS.items():
        terms = z3.Ints(" ".join(f"{name}_{k}" for k in range(arity)))
        out.append((name, said, [z3.Not(formula(*terms))]))
    return out


def native(terms) -> list[tuple]:
    """(dividend, divisor, quotient, remainder) of each integer division written as Z3's own
    `div` in `terms` (a plan's size whose dividend is no term the spec divides), each once."""
    out, seen, todo = [], set(), [t for t in terms if z3.is_expr(t)]
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_app_of(t, z3.Z3_OP_IDIV):
            a, b = t.children()
            out.append((a, b, t, a % b))
        todo.extend(t.children())
    return out


def divisions(*arithmetics, extra=()) -> tuple[list, set]:
    """(instances, the lemmas they use) that tie the divisions of `arithmetics` (`Z3Ops`: a
    model's, and those of the other configurations a query reads) to one another: DIGIT at each
    division `x = q*b + r` against `x = 0*b + x` (a dividend already below its divisor is its
    own remainder, quotient 0), and between two divisions by one divisor DIGIT (equal dividends
    have equal quotients and remainders) and QUOTIENT (a dividend below the other's multiple of
    the divisor has a smaller quotient). A digit table splits an index by remainders of
    quotients; a solver that does not divide by itself then reads each digit as the spec's term.
    """
    out, uses, seen = [], set(), {}
    for x, b, q, r in [*(d for ops in arithmetics for d in ops.divisions()), *extra]:
        out.append(digit(b, x, 0, r, q))
        uses.add("digit")
        for q2, r2 in seen.get(term_key(b), ()):
            out += [digit(b, r, q, r2, q2), quotient(b, q, r, q2), quotient(b, q2, r2, q)]
            uses.add("quotient")
        seen.setdefault(term_key(b), []).append((q, r))
    return out, uses


@dataclass(frozen=True)
class Chain:
    """A term as its base plus the Horner form of its atoms. A point is (index, rank digits);
    an atom is ("index", n), ("digit", n), or ("quot" | "rem", n, b): index n by size b.

    `order` the atoms fastest first; `extents` their extents; `term(point)` the term;
    `base` the term with every atom 0; `facts` what the sizes must satisfy for the extents
    (a quotient's `E == Q*b`); `box` the extent the term fills (None: not claimed)."""

    order: tuple
    extents: dict
    base: object
    term: Callable
    ops: object
    facts: tuple = ()
    box: object = None
    within: dict | None = None  # a point's extents by name: where the identity is shown
    radix: dict | None = None  # an atom's radix, its next atom's stride over its own (None: its extent, dense)
    within_point: tuple | None = None  # a point of its own its identity's file is shown at (None: the row's)

    def r(self, a: tuple):
        return self.extents[a] if self.radix is None else self.radix[a]

    def bounds(self, point: tuple) -> list:
        """The point inside the box its identity is shown on."""
        return [z3.And(v >= 0, v < self.within[n]) for part in point for n, v in part.items()]

    def atom(self, a: tuple, point: tuple):
        return _atom(self.ops, a, point)

    def horner(self, point: tuple, start: int = 0):
        """The Horner form of the atoms `order[start:]` at `point`."""
        h = self.atom(self.order[-1], point)
        for a in reversed(self.order[start:-1]):
            h = self.atom(a, point) + self.r(a) * h
        return h

    def identity(self, point: tuple):
        """The chain at `point`: the term is the base plus its Horner form, with the facts."""
        box = [] if self.box is None else [self.box == product(self.extents[a] for a in self.order)]
        return z3.And(self.term(point) == self.base + self.horner(point), *self.facts, *box)

    def top(self, start: int = 0):
        """The largest value of the Horner form of `order[start:]` in the box: each atom at its
        extent less one (with a radix above the extent, the rows' last element)."""
        h = self.extents[self.order[-1]] - 1
        for a in reversed(self.order[start:-1]):
            h = self.extents[a] - 1 + self.r(a) * h
        return h

    def fits(self, element, page):
        """A region's chain inside its page: the base is no offset below the page's first
        element, and the region's last element, of `element` bytes, ends by byte `page`."""
        return z3.And(self.base >= 0, element >= 1, element * (self.base + self.top() + 1) <= page)

    def inside(self, point: tuple, element) -> list:
        """BOUND at each digit of `point` (its Horner form at most `top`), and SCALE at the term:
        with the chain and `fits`, the term's last byte ends by the page's."""
        out = [bound(self.extents[a] - 1, self.atom(a, point), self.r(a), self.horner(point, k + 1), self.top(k + 1))
               for k, a in enumerate(self.order[:-1])]
        return out + [scale(element, self.term(point), self.base + self.top() + 1)]

    def above(self, point: tuple, element) -> list:
        """LOW at each digit of `point` (its Horner form not negative) and ABOVE at the term:
        with the chain, the term's first byte is at or after the base's, `element * base`."""
        out = [low(self.atom(a, point), self.r(a), self.horner(point, k + 1)) for k, a in enumerate(self.order[:-1])]
        return out + [above(element, self.term(point), self.base)]

    def uses(self, two: bool) -> set:
        """The lemmas `instances` asserts at one point, or (`two`) between two."""
        out = {"quotient"} if any(a[0] == "quot" for a in self.order) else set()
        if len(self.order) > 1:
            out |= {"range", "digit"} if two else {"range"}
        return out

    def instances(self, point: tuple, other: tuple | None = None) -> list:
        """The chain at each point inside its box (as its file shows it: an identity is not
        claimed outside), QUOTIENT at each quotient atom, RANGE at each digit of `point`
        and, with `other`, DIGIT between the two points."""
        out = []
        for p in (point,) if other is None else (point, other):
            out.append(z3.Implies(z3.And(*self.bounds(p)), self.identity(p)))  # what its file shows, no more
            for a in self.order:
                if a[0] == "quot":
                    q, r = self.atom(a, p), self.atom(("rem", *a[1:]), p)
                    out.append(quotient(a[2], q, r, self.extents[a]))
        for k, a in enumerate(self.order[:-1]):
            e, rest = self.r(a), self.horner(point, k + 1)
            below = product([*(self.r(x) for x in self.order[k + 1:-1]), self.extents[self.order[-1]]])
            out.append(range_(e, self.atom(a, point), rest, below))
            if other is not None:
                out.append(digit(e, self.atom(a, point), rest, self.atom(a, other), self.horner(other, k + 1)))
        return out


def chain(m, term: Callable, point: tuple, extents: dict, box=None, rlimit: int = 5_000_000) -> Chain | None:
    """The chain of `term` (a function of a point) on `m`'s case path, or None where Z3 does
    not show its identity within `rlimit` at `point` (fresh index and digits, bounded by
    `extents`, the index's and digits' extents by name). The atoms are read from the term's
    constants and their order from their strides at one configuration of the path; Z3 only
    chooses them, the identity's own certificate shows the chain for all sizes."""
    at = term(point)
    atoms = _atoms(m, at, point) if z3.is_expr(at) else None
    if not atoms:
        return None
    ext, facts = {}, []
    for a in atoms:
        if a[0] in ("index", "digit"):
            ext[a] = extents[a[1]]
        elif a[0] == "rem":
            ext[a] = a[2]
        else:  # a quotient of an index below E by b is below E / b, where b divides E
            ext[a] = m.ops.floordiv(extents[a[1]], a[2])
            facts.append(extents[a[1]] == ext[a] * a[2])
    values = {a: _atom(m.ops, a, point) for a in atoms}
    base = z3.substitute(at, *[(v, z3.IntVal(0)) for v in values.values()])
    steps = {a: z3.substitute(at, *[(v, z3.IntVal(int(b == a))) for b, v in values.items()]) - base for a in atoms}
    sample = _sample(m, list(steps.values()))  # (after the terms: their divisions are among the side conditions)
    if sample is None:
        return None
    stride = {a: sample.eval(x, model_completion=True) for a, x in steps.items()}
    if not all(z3.is_int_value(s) and s.as_long() > 0 for s in stride.values()):
        return None
    place = {n: k for k, n in enumerate(extents)}  # on a tie (an extent of 1), the later declared is the faster
    order = tuple(sorted(atoms, key=lambda a: (stride[a].as_long(), -place[a[1]], a[0] != "rem")))
    dense = Chain(order, ext, base, term, m.ops, tuple(facts), box, dict(extents))
    if _shown(m, dense, point, rlimit):
        return dense
    # rows further apart than a digit's extent (a region of a page): each radix is the next
    # stride over this one, at least the extent; the fastest stride must be 1
    if not z3.is_true(z3.simplify(steps[order[0]] == 1)):
        return None
    radix = {a: _ratio(steps[b], steps[a]) for a, b in zip(order, order[1:])}
    if any(r is None for r in radix.values()):
        return None
    spread = [f for a, b in zip(order, order[1:]) for f in (steps[b] == radix[a] * steps[a], ext[a] <= radix[a])]
    c = Chain(order, ext, base, term, m.ops, (*facts, *spread), None, dict(extents), radix)
    return c if _shown(m, c, point, rlimit) else None


def holds(m, fact, rlimit: int = 5_000_000) -> bool:
    """Whether Z3 shows `fact` (of the sizes) on `m`'s case path within `rlimit`; its own file
    shows it to the second solver."""
    return ask([*m.assumptions(), z3.Not(fact), *m.ops.side], rlimit)[0] == z3.unsat


def _ratio(num, den):
    """`num / den` as a polynomial in the sizes (a z3 term), or None where it is none: each
    radix of a strided chain, the next stride over this one, is a term of its own, so no
    division (which would assert its divisor positive beside every query) is needed."""
    import sympy
    names, seen = {}, {}
    num, den = z3.simplify(num), z3.simplify(den)  # (both held while read: `seen` is keyed by their terms' ids)
    try:
        q = sympy.cancel(_to_sympy(num, names, seen) / _to_sympy(den, names, seen))
    except LookupError:  # (a term that is no polynomial: no radix)
        return None
    n, d = sympy.fraction(sympy.together(q))
    if d != 1 or not n.is_polynomial(*names.values()) or \
            not all(c.is_Integer for c in sympy.Poly(n, *names.values()).coeffs()):
        return None  # (x/2 + 1 is a polynomial over the rationals, and no radix)
    back = {v: k for k, v in names.items()}
    return _to_z3(sympy.expand(n), back)


def _to_sympy(x, names: dict, seen: dict):
    """`x` as a sympy expression, each shared subterm read once (`seen`: a term's id -> it;
    a term is a graph, and read as a tree it can be exponentially larger)."""
    import sympy
    if x.get_id() not in seen:
        if z3.is_int_value(x):
            seen[x.get_id()] = sympy.Integer(x.as_long())
        elif z3.is_const(x):
            seen[x.get_id()] = names.setdefault(x, sympy.Symbol(f"v{len(names)}"))
        else:
            kids = [_to_sympy(k, names, seen) for k in x.children()]
            if z3.is_add(x):
                seen[x.get_id()] = sympy.Add(*kids)
            elif z3.is_mul(x):
                seen[x.get_id()] = sympy.Mul(*kids)
            elif z3.is_sub(x):
                seen[x.get_id()] = kids[0] - sympy.Add(*kids[1:])
            elif x.decl().kind() == z3.Z3_OP_UMINUS:
                seen[x.get_id()] = -kids[0]
            else:
                raise LookupError(f"a stride read as a polynomial: {x}")
    return seen[x.get_id()]


def _to_z3(e, back: dict):
    if e.is_Integer:
        return z3.IntVal(int(e))
    if e.is_Symbol:
        return back[e]
    if not (e.is_Add or e.is_Mul or (e.is_Pow and e.exp.is_Integer and e.exp > 0)):
        raise LookupError(f"a radix that is no integer polynomial: {e}")
    kids = [_to_z3(e.base, back)] * int(e.exp) if e.is_Pow else [_to_z3(k, back) for k in e.args]
    return z3.Sum(*kids) if e.is_Add else z3.Product(*kids)


def _atom(ops, a: tuple, point: tuple):
    """Atom `a`'s value at `point` (index, rank digits), a quotient or remainder by `ops`."""
    idx, digits = point
    if a[0] == "index":
        return idx[a[1]]
    if a[0] == "digit":
        return digits[a[1]]
    return (ops.floordiv if a[0] == "quot" else ops.mod)(idx[a[1]], a[2])


def _shown(m, c: Chain, point: tuple, rlimit: int) -> bool:
    """Whether Z3 shows `c`'s identity at `point`, inside its box, on `m`'s path."""
    return ask([*m.assumptions(), *c.bounds(point), z3.Not(c.identity(point)), *m.ops.side], rlimit)[0] == z3.unsat


def _atoms(m, term, point: tuple) -> list | None:
    """The atoms `term` reads at `point`, or None where it reads the point otherwise (a
    division of something other than an index by something that is not a size)."""
    idx, digits = point
    names = {v.get_id(): ("index", n) for n, v in idx.items()}
    names.update({v.get_id(): ("digit", n) for n, v in digits.items()})
    out = []
    for v in _vars(term):
        if v.get_id() in names:
            out.append(names[v.get_id()])
            continue
        division = m.ops.divided(v)
        if division is None:
            continue  # a size
        a, b, kind = division
        if not {x.get_id() for x in _vars(a) + _vars(b)} & names.keys():
            continue  # a quotient of sizes: a coefficient
        if not z3.is_expr(a) or a.get_id() not in names or names[a.get_id()][0] != "index" or \
                {x.get_id() for x in _vars(b)} & names.keys():
            return None
        out.append((kind, names[a.get_id()][1], b))
    return list(dict.fromkeys(out))


def _vars(x) -> list:
    return z3util.get_vars(x) if z3.is_expr(x) else []


def _sample(m, strides=()):
    """A configuration of `m`'s path with each size at least 2 and the `strides` apart where
    its bounds and guards allow (a size of 1 ties strides, say a rank's heads `heads / tp`,
    and the order a tie gives need not be the term's): the wishes that conflict are dropped
    one at a time, as the solver's unsat cores name them. Asked once per process for the same
    assertions, sizes and strides (every row of a case path asks its chains: `_SAMPLES`)."""
    asserted, sizes = [*m.assumptions(), *m.ops.side], [m.sizes[n] for n in sorted(m.sizes)]
    key = tuple(tuple(map(term_key, xs)) for xs in (asserted, sizes, strides))
    if key in _SAMPLES:
        return _SAMPLES[key][1]
    if len(_SAMPLES) >= 10_000:
        _SAMPLES.clear()
    found = _SAMPLES[key] = ((asserted, sizes, strides), _configuration(asserted, sorted(m.sizes), sizes, strides))
    return found[1]


_SAMPLES: dict = {}
"""The terms' keys -> (the terms, which the memo holds so no other term takes their ids, the sample)."""


def _configuration(asserted: list, names: list, sizes: list, strides):
    s = z3.Solver()
    s.set("rlimit", 20_000_000)
    s.add(*asserted)
    wish = {z3.Bool(f"wide!{n}"): x >= 2 for n, x in zip(names, sizes)}
    wish.update({z3.Bool(f"apart!{j}!{k}"): strides[j] != strides[k]
                 for j in range(len(strides)) for k in range(j + 1, len(strides))})
    s.add(*[z3.Implies(b, c) for b, c in wish.items()])
    keep = list(wish)
    while True:
        res = s.check(*keep)
        if res == z3.sat:
            return s.model()
        core = s.unsat_core() if res == z3.unsat else []
        if not core:
            return None
        keep.remove(core[0])

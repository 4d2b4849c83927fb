"""Cut lemmas: facts a certificate proves once, in a file of their own, and asserts at its terms.

A solver that cannot find an argument by itself may still check each step of it. A dense
layout is one-to-one, and stays in its box, by one fact about one digit, used once a digit:

    DIGIT:  x + a*X = y + a*Y,  0 <= x, y < a           gives  x = y  and  X = Y
    RANGE:  0 <= x < a,  0 <= X < M                      gives  0 <= x + a*X < a*M

Each is a formula over fresh integers, valid for all of them, and certified once
(`shared()`: its negation, unsat). They apply to a layout through its CHAIN: the offset is
its base plus the Horner form of its indices, fastest stride first,

    offset(i) = base + (i0 + E0 * (i1 + E1 * (... + E(n-2) * i(n-1))))

an identity certified for every index of the box under the case's assumptions in a file
of the row's own. A certificate then asserts instances of all three at its own terms. An
instance of a valid formula is valid, so asserting it changes no answer: the query is
unsat with them exactly when it is without them, and what is left for the second solver
is linear in the monomials. Nothing here is trusted: a wrong order, a layout that is not
dense, or a chain that does not hold makes its identity file sat (or undecided), and the
row is not certified.
"""
from __future__ import annotations

from dataclasses import dataclass

import z3

from .obligations import _prod

SHARED = "shared-lemmas"
"""The folder (in a certificate folder) of the lemmas every chain asserts instances of; its
name is no identifier, so no family's folder can take it."""


def digit(a, x, X, y, Y):
    """DIGIT at (a, x, X, y, Y): two mixed-radix numbers with equal value agree in their digit."""
    return z3.Implies(z3.And(x + a * X == y + a * Y, x >= 0, x < a, y >= 0, y < a), z3.And(x == y, X == Y))


def range_(a, x, X, M):
    """RANGE at (a, x, X, M): a digit below `a` over a number below `M` is a number below `a*M`."""
    return z3.Implies(z3.And(x >= 0, x < a, X >= 0, X < M), z3.And(x + a * X >= 0, x + a * X < a * M))


LEMMAS = {
    "digit": (digit, 5, "x + a*X = y + a*Y with 0 <= x, y < a gives x = y and X = Y"),
    "range": (range_, 4, "0 <= x < a and 0 <= X < M give 0 <= x + a*X < a*M"),
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


@dataclass(frozen=True)
class Chain:
    """A layout's offset as base + Horner form: `order` its indices fastest first, `extents`
    their extents (Z3 terms), `base` the offset at index 0, `offset` the offset at an index."""

    order: tuple
    extents: dict
    base: object
    offset: object

    def horner(self, idx: dict, start: int = 0):
        """The Horner form of the digits `order[start:]` of index `idx`."""
        h = idx[self.order[-1]]
        for n in reversed(self.order[start:-1]):
            h = idx[n] + self.extents[n] * h
        return h

    def identity(self, idx: dict):
        """The chain at `idx`: its offset is the base plus its Horner form."""
        return self.offset(idx) == self.base + self.horner(idx)

    def instances(self, idx: dict, other: dict | None = None) -> list:
        """The chain, RANGE at each digit of `idx` and, with `other`, DIGIT between the two."""
        out = [self.identity(idx)] + ([self.identity(other)] if other is not None else [])
        for k, n in enumerate(self.order[:-1]):
            a, rest = self.extents[n], self.horner(idx, k + 1)
            out.append(range_(a, idx[n], rest, _prod([self.extents[x] for x in self.order[k + 1:]])))
            if other is not None:
                out.append(digit(a, idx[n], rest, other[n], self.horner(other, k + 1)))
        return out


def chain(m, role: str, rlimit: int = 5_000_000) -> Chain | None:
    """The chain of `m`'s `role` layout on its case path, or None where Z3 does not show the
    identity within `rlimit` (the layout is not dense in one order, or the order depends on
    the sizes). The order is read from the strides at one configuration of the path; Z3 only
    chooses it, the identity's own certificate shows it for all."""
    ldef, bound = m.r.layout(role)
    if ldef.regions or not ldef.indices:
        return None
    ext = m.r.extents(role)
    offset = lambda x: m.r.expr(ldef.offset, {**bound, **x})  # noqa: E731 - element offsets
    i, ci = m.index(role, "#")
    unit = lambda n: {x: z3.IntVal(int(x == n)) for x in i}  # noqa: E731 - the index 1 at n
    base = offset({x: z3.IntVal(0) for x in i})
    steps = {n: offset(unit(n)) - base for n in i}
    sample = _sample(m)  # (after the offsets: their divisions are among the side conditions it satisfies)
    if sample is None:
        return None
    stride = {n: sample.eval(x, model_completion=True) for n, x in steps.items()}
    if not all(z3.is_int_value(s) for s in stride.values()):
        return None
    c = Chain(tuple(sorted(i, key=lambda n: stride[n].as_long())), ext, base, offset)
    s = z3.Solver()
    s.set("rlimit", rlimit)
    s.add(*m.assumptions(), *ci, z3.Not(c.identity(i)), *m.ops.side)
    return c if s.check() == z3.unsat else None


def _sample(m):
    """A configuration of `m`'s path with each size at least 2 where its bounds and guards
    allow (a size of 1 ties strides, and the order it gives need not be the layout's): the
    wishes that conflict are dropped one at a time, as the solver's unsat cores name them."""
    s = z3.Solver()
    s.set("rlimit", 20_000_000)
    s.add(*m.assumptions(), *m.ops.side)
    wish = {z3.Bool(f"wide!{n}"): m.sizes[n] >= 2 for n in sorted(m.sizes)}
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

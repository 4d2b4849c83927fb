"""Integer arithmetic for `interpret.Reading` over Z3 terms.

`//` and `%` are encoded by their definition (a = q*b + r, 0 <= r < b, for b > 0) and
exact `/` by a = q*b, each with a fresh quotient: nothing of the algebra's normal form
is reused, so the proofs read the spec independently of the code they check. Two ints
are combined in Python, so configurations with concrete sizes stay linear.
"""
from __future__ import annotations

import z3

from ..interpret import Ops


def _is_int(x) -> bool:
    return isinstance(x, int)


def _key(x):
    return ("i", x) if _is_int(x) else ("z", x.get_id())


class Z3Ops(Ops):
    """Z3 arithmetic; `side` collects the definitions of quotients and remainders."""

    def __init__(self, tag: str = ""):
        self.tag = tag  # names this arithmetic's quotients apart from another's in one query
        self.side: list = []
        self._memo: dict = {}
        self._by_divisor: dict = {}
        self._alive: list = []
        self._n = 0
        self.cmp = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
                    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}

    def _fresh(self, what: str):
        self._n += 1
        return z3.Int(f"{self.tag}{what}!{self._n}")

    def _divmod(self, a, b):
        key = (_key(a), _key(b))
        if key not in self._memo:
            q, r = self._fresh("q"), self._fresh("r")
            self.side += [b > 0, a == q * b + r, r >= 0, r < b]
            # Floor division is monotone in the dividend. Z3's nonlinear arithmetic rarely
            # finds this itself (it needs dividing an inequality by b), so state it for every
            # pair of divisions by the same divisor: theorems, hence sound to add.
            for (ka, kb), (a2, q2, r2) in self._by_divisor.items():
                if kb == key[1]:
                    self.side += [z3.Implies(a <= a2, q <= q2), z3.Implies(a2 <= a, q2 <= q),
                                  z3.Implies(z3.And(a < a2, r2 == 0), q < q2),
                                  z3.Implies(z3.And(a2 < a, r == 0), q2 < q)]
            self._by_divisor[key] = (a, q, r)
            self._memo[key] = (q, r)
            self._alive.append((a, b))  # a key is its terms' ids: held, no other term can take them
        return self._memo[key]

    def shared(self, other: "Z3Ops") -> list:
        """Equalities between this arithmetic's divisions and `other`'s of one dividend by one
        divisor (the same terms: two configurations' readings of a size over the sizes they
        share, each with a quotient of its own). Both define `a = q*b + r, 0 <= r < b, b > 0`,
        so the two quotients and remainders are equal: a theorem, stated because Z3's
        nonlinear arithmetic rarely derives it. Only these: monotonicity between every pair of
        one divisor would cost other queries their budget."""
        out = []
        for key, (q, r) in self._memo.items():
            if key in other._memo:
                q2, r2 = other._memo[key]
                out += [q == q2, r == r2]
        return out

    def quotient(self, a, b):
        """(quotient, remainder) of `a` by `b` where this arithmetic has already defined them
        (its side conditions say so), else None: defines nothing."""
        return self._memo.get((_key(a), _key(b)))

    def floordiv(self, a, b):
        if _is_int(a) and _is_int(b):
            return a // b if self._positive(b) else 0
        return self._divmod(a, b)[0]

    def mod(self, a, b):
        if _is_int(a) and _is_int(b):
            return a % b if self._positive(b) else 0
        return self._divmod(a, b)[1]

    def _positive(self, b: int) -> bool:
        """A divisor must be positive (the runtime fails closed otherwise): else nothing holds."""
        if b <= 0:
            self.side.append(z3.BoolVal(False))
        return b > 0

    def exact(self, a, b):
        if _is_int(a) and _is_int(b):
            if b <= 0 or a % b:
                self.side.append(z3.BoolVal(False))
                return 0
            return a // b
        q, r = self._divmod(a, b)
        self.side.append(r == 0)
        return q

    def and_(self, xs):
        return z3.And(*xs) if any(not isinstance(x, bool) for x in xs) else all(xs)

    def or_(self, xs):
        return z3.Or(*xs) if any(not isinstance(x, bool) for x in xs) else any(xs)

    def not_(self, x):
        return z3.Not(x) if not isinstance(x, bool) else not x

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
        # the same side conditions by what they define (`side_for`): a quotient's or remainder's
        # Z3 id -> (its definition, dividend, divisor, the ids of both), and the theorems
        # relating two quotients
        self._defines: dict = {}
        self._lemmas: list = []   # (the ids of both quotients, constraints)
        self._always: list = []   # conditions of no quotient (a division by a non-positive int)
        self._const_memo: dict = {}  # a term's id -> the ids of its constants (`_consts`)
        self._held: list = []        # the terms of those ids, held so that no id is reused
        self._shared_memo: tuple = (None, None, [])  # (other, both memo sizes, `shared(other)`)
        self.cmp = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
                    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}

    def _fresh(self, what: str):
        self._n += 1
        return z3.Int(f"{self.tag}{what}!{self._n}")

    def _divmod(self, a, b):
        key = (_key(a), _key(b))
        if key not in self._memo:
            q, r = self._fresh("q"), self._fresh("r")
            definition = [b > 0, a == q * b + r, r >= 0, r < b]
            self.side += definition
            self._defines[q.get_id()] = self._defines[r.get_id()] = (definition, a, b, (q.get_id(), r.get_id()))
            # Floor division is monotone in the dividend. Z3's nonlinear arithmetic rarely
            # finds this itself (it needs dividing an inequality by b), so state it for every
            # pair of divisions by the same divisor: theorems, hence sound to add.
            for (ka, kb), (a2, q2, r2) in self._by_divisor.items():
                if kb == key[1]:
                    lemma = [z3.Implies(a <= a2, q <= q2), z3.Implies(a2 <= a, q2 <= q),
                             z3.Implies(z3.And(a < a2, r2 == 0), q < q2),
                             z3.Implies(z3.And(a2 < a, r == 0), q2 < q)]
                    self.side += lemma
                    self._lemmas.append(({q.get_id(), q2.get_id()}, lemma))
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
        one divisor would cost other queries their budget. Each pair of equalities comes with
        the ids of the two quotients it names (`side_for` takes those its terms read)."""
        return [({q.get_id(), q2.get_id()}, [q == q2, r == r2])
                for key, (q, r) in self._memo.items() if key in other._memo
                for q2, r2 in [other._memo[key]]]

    def shared_equal(self, other: "Z3Ops") -> list:
        """Every equality of `shared`."""
        return [c for _, equal in self.shared(other) for c in equal]

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

    def side_for(self, terms, *others: "Z3Ops") -> list:
        """The side conditions of this arithmetic and `others` that the quotients `terms` read
        need: each one's definition, those its dividend and divisor read in turn, and the
        theorems between two of them (of one arithmetic, and `shared` between two). A
        definition of a quotient the terms never read is left out: its constraints only add
        conditions, so a query unsat without them is unsat with them, and Z3 is spared the
        definitions every earlier query made. `side` (and `shared`) are all of them.

        Post-conditions: every returned constraint is in some `side` or `shared`; a quotient
        read by `terms` has its definition returned."""
        arith = (self, *others)
        defines = {n: d for o in arith for n, d in o._defines.items()}
        out = [c for o in arith for c in o._always]
        reached: set = set()
        taken: set = set()
        todo = set().union(*[self._consts(e) for e in terms]) & defines.keys()
        while todo:
            definition, a, b, pair = defines[todo.pop()]
            reached |= set(pair)  # a remainder read is its quotient defined: the theorems on either hold
            if id(definition) not in taken:
                taken.add(id(definition))
                out += definition
                todo |= (self._consts(a) | self._consts(b)) & defines.keys() - reached
        out += [c for o in arith for names, lemma in o._lemmas if names <= reached for c in lemma]
        for i, o in enumerate(arith):
            out += [c for o2 in arith[i + 1:] for names, lemma in o._shared_of(o2) if names <= reached for c in lemma]
        return out

    def _consts(self, e) -> frozenset:
        """The ids of the constants in `e`, remembered for every subterm (a proof's queries
        share their terms: each is walked once). The terms are held, so no id is reused."""
        if not z3.is_expr(e):
            return frozenset()
        memo = self._const_memo
        stack = [(e, None)]
        while stack:
            x, kids = stack.pop()
            i = x.get_id()
            if i in memo:
                continue
            if kids is None:
                kids = x.children()
                stack.append((x, kids))
                stack += [(c, None) for c in kids if c.get_id() not in memo]
                continue
            leaf = z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED
            memo[i] = frozenset((i,)) if leaf else frozenset().union(*[memo[c.get_id()] for c in kids])
            self._held.append(x)
        return memo[e.get_id()]

    def _shared_of(self, other: "Z3Ops") -> list:
        """`shared(other)`, made again only when either arithmetic has divided since (the
        cache holds `other` itself: an id alone could be a new arithmetic's at a reused address)."""
        held, sizes, pairs = self._shared_memo
        if held is not other or sizes != (len(self._memo), len(other._memo)):
            pairs = self.shared(other)
            self._shared_memo = (other, (len(self._memo), len(other._memo)), pairs)
        return pairs

    def _positive(self, b: int) -> bool:
        """A divisor must be positive (the runtime fails closed otherwise): else nothing holds."""
        if b <= 0:
            self.side.append(z3.BoolVal(False))
            self._always.append(z3.BoolVal(False))
        return b > 0

    def exact(self, a, b):
        if _is_int(a) and _is_int(b):
            if b <= 0 or a % b:
                self.side.append(z3.BoolVal(False))
                self._always.append(z3.BoolVal(False))
                return 0
            return a // b
        q, r = self._divmod(a, b)
        self.side.append(r == 0)
        self._defines[q.get_id()][0].append(r == 0)  # (the list `side` took: exactness joins the definition)
        return q

    def and_(self, xs):
        return z3.And(*xs) if any(not isinstance(x, bool) for x in xs) else all(xs)

    def or_(self, xs):
        return z3.Or(*xs) if any(not isinstance(x, bool) for x in xs) else any(xs)

    def not_(self, x):
        return z3.Not(x) if not isinstance(x, bool) else not x

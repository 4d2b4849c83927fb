"""Guard rewriting: the substitutions a variant's equality guards and cases imply, and the
sizes of a variant normalised by them (`guarded_equality`), as the identity and the
structural prover read them."""
from __future__ import annotations

import sympy

from .resolved import Family, Variant
from .sizes import cancel


def guard_rewrites(v: Variant, atoms) -> dict:
    """Substitutions implied by equality guards and cases: `x == e` with x a parameter."""
    subs = {}
    for g in list(v.cases) + list(v.guards):
        for c in conjuncts(g.cond):
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


_REWRITTEN: dict = {}
_REWRITTEN_HELD = 100_000
"""The most normal forms `rewritten` keeps (compiling the shipped library makes about 3,000)."""


def rewritten(x, subs: dict, key: frozenset):
    """`x` (its atoms expanded) under the rewrites `subs` (`key`: their items), as a cancelled
    rational function. A function of the two alone, whatever family they came from: remembered
    for the process (families resolved again, and families alike, ask for the same forms)."""
    held = _REWRITTEN.get((x, key))
    if held is None:
        if len(_REWRITTEN) >= _REWRITTEN_HELD:
            _REWRITTEN.clear()
        held = _REWRITTEN[(x, key)] = cancel(rewrite(x, subs))
    return held


def rewrite(x, subs: dict, rounds: int = 4):
    """`x` with the rewrites `subs` (each key a symbol) applied until nothing changes, at most
    `rounds` times. Where no rewrite's value reads another's key, one structural replacement
    (`xreplace`) is what sympy's `subs` gives, without the sorting `subs` does on every call;
    a chain of rewrites (`a -> b`, `b -> c`, or a cycle) is applied by `subs`, in its order."""
    keys = set(subs)
    chained = any(keys & v.free_symbols for v in subs.values() if isinstance(v, sympy.Basic))
    for _ in range(rounds):
        y = x.subs(subs) if chained else x.xreplace(subs)
        if y == x:
            break
        x = y
    return x


def conjuncts(c):
    return list(c.args) if isinstance(c, sympy.And) else [c]


def guarded_equality(family: Family, v: Variant):
    """`(norm, eq)` for sizes of a variant: equal for every size where its guards hold.

    Equality guards and cases become rewrite rules (`heads == total_heads / shards`
    replaces `heads`), exact divisions become rational functions; `eq` compares the
    results exactly. False means "not shown", not "different".
    """
    atoms, subs = family.atoms, guard_rewrites(v, family.atoms)
    # the compiler and the prover ask for the same sizes many times over, under few sets of
    # rewrites; a norm depends on the family's atoms and the rewrites alone (sympy applies a
    # dict of them in an order of its own, not the dict's), so they key what is remembered
    seen: dict = family.normals.setdefault(frozenset(subs.items()), {})

    def norm(x):
        x = sympy.sympify(x)
        if x not in seen:
            seen[x] = _normal(x)
        return seen[x]

    rewrites = frozenset(subs.items())

    def _normal(x):
        return rewritten(atoms.expand(x), subs, rewrites)

    def eq(a, b):
        return norm(a) == norm(b) or cancel(norm(a) - norm(b)) == 0

    return norm, eq

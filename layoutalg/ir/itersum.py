"""IR of index expressions: the mixed-radix normal form (TVM's IterSum, CuTe's shape:stride).

An index expression over iterators (layout indices and rank digits) is normalised to

    base + sum(scale_k * digit_k),   digit_k = (source // lower) % extent

Each `Split(source, lower, extent)` is one mixed-radix digit of an iterator. `t // I`
and `t % I` split `t` into the digits `(t, I, T/I)` and `(t, 1, I)`; once every iterator
is cut into digits, every map in a family is *linear* in the digits, with no div or mod.
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from ..errors import SpecError
from .sizes import Scope
from ..dsl.tree import BinOp, Call, Expr, Name, Neg, Num


@dataclass(frozen=True)
class Split:
    """Digit `(source // lower) % extent` of an iterator."""

    source: str
    lower: sympy.Expr
    extent: sympy.Expr


@dataclass(frozen=True)
class IterSum:
    """`base + sum(scale * digit)`; `terms` maps each Split to its scale."""

    terms: tuple[tuple[Split, sympy.Expr], ...]
    base: sympy.Expr

    @staticmethod
    def const(c: sympy.Expr) -> "IterSum":
        return IterSum((), c)

    def scaled(self, k: sympy.Expr) -> "IterSum":
        return IterSum(tuple((s, sympy.expand(k * c)) for s, c in self.terms), sympy.expand(k * self.base))

    def __add__(self, other: "IterSum") -> "IterSum":
        terms = dict(self.terms)
        for s, c in other.terms:
            terms[s] = sympy.expand(terms.get(s, 0) + c)
        return IterSum(tuple((s, c) for s, c in terms.items() if c != 0), sympy.expand(self.base + other.base))


def normalise(e: Expr, iterators: dict[str, sympy.Expr], scope: Scope) -> IterSum:
    """Normal form of an index expression.

    `iterators` maps each iterator name to its extent. Sub-expressions free of iterators
    are sizes (see `sizes.Scope`). Raises `SpecError` for anything not affine in the
    digits: a product of two indices, `//` or `%` of a sum, a call of an unknown function.

    Examples:
        >>> from layoutalg.dsl.syntax import parse
        >>> from layoutalg.ir.sizes import Atoms, Scope
        >>> e = parse("fn f(t) = (t // 4) * 8 + t % 4\\n").fns[0].body
        >>> s = normalise(e, {"t": sympy.Integer(16)}, Scope(Atoms(), {}))
        >>> sorted((str(k.lower), str(k.extent), str(c)) for k, c in s.terms)
        [('1', '4', '1'), ('4', '4', '8')]
    """
    if isinstance(e, Name) and e.id in iterators:
        return IterSum(((Split(e.id, sympy.Integer(1), iterators[e.id]), sympy.Integer(1)),), sympy.Integer(0))
    if isinstance(e, (Num, Name)):
        return IterSum.const(scope.size(e, "index expression"))
    if isinstance(e, Neg):
        return normalise(e.arg, iterators, scope).scaled(-1)
    if isinstance(e, Call):
        return normalise(expand_call(e, scope), iterators, scope)
    assert isinstance(e, BinOp)
    a = normalise(e.left, iterators, scope)
    if e.op in ("//", "%"):
        return _split(e, a, scope.size(e.right, f"divisor of '{e.op}'"), scope)
    b = normalise(e.right, iterators, scope)
    if e.op == "+":
        return a + b
    if e.op == "-":
        return a + b.scaled(-1)
    if e.op == "*":
        if a.terms and b.terms:
            raise SpecError("not affine: this multiplies two indices", e.span)
        return a.scaled(b.base) if not b.terms else b.scaled(a.base)
    if not a.terms and not b.terms:  # a quotient of sizes (a region's base in its own elements)
        return IterSum.const(scope.size(e, "index expression"))
    raise SpecError("'/' divides sizes exactly; split an index with '//' and '%'", e.span)


def _split(e: BinOp, a: IterSum, k: sympy.Expr, scope: Scope) -> IterSum:
    if len(a.terms) != 1 or a.base != 0 or a.terms[0][1] != 1:
        raise SpecError(f"'{e.op}' applies to a single index (or digit) here, not to a sum", e.span)
    s = a.terms[0][0]
    high = scope.atoms.make("/", s.extent, k, e.span)  # exact: the split must tile the index
    if e.op == "//":
        return IterSum(((Split(s.source, sympy.expand(s.lower * k), high), sympy.Integer(1)),), sympy.Integer(0))
    return IterSum(((Split(s.source, s.lower, k), sympy.Integer(1)),), sympy.Integer(0))


def expand_call(e: Call, scope: Scope) -> Expr:
    """Inline a user `fn`: its body with the parameters replaced by the arguments."""
    fn = scope.fns.get(e.fn)
    if fn is None:
        raise SpecError(f"unknown function '{e.fn}'" + (f"; known: {', '.join(sorted(scope.fns))}"
                                                        if scope.fns else ""), e.span)
    if len(fn.params) != len(e.args):
        raise SpecError(f"'{e.fn}' takes {len(fn.params)} argument(s), given {len(e.args)}", e.span)
    return substitute(fn.body, dict(zip(fn.params, e.args)))


def substitute(e: Expr, env: dict[str, Expr]) -> Expr:
    """Replace names by expressions (syntactically)."""
    if isinstance(e, Name):
        return env.get(e.id, e)
    if isinstance(e, Num):
        return e
    if isinstance(e, Neg):
        return Neg(substitute(e.arg, env), e.span)
    if isinstance(e, BinOp):
        return BinOp(e.op, substitute(e.left, env), substitute(e.right, env), e.span)
    if isinstance(e, Call):
        return Call(e.fn, tuple(substitute(a, env) for a in e.args), e.span)
    raise TypeError(e)  # pragma: no cover


def digits_of(source: str, extent: sympy.Expr, splits: list[Split], equal, span) -> list[Split]:
    """Order the splits of one iterator from least significant up; they must tile it.

    Walks the chain lower = 1, extent_0, extent_0 * extent_1, ... and fails with a
    `SpecError` where a digit is missing (a gap: the map is not injective in `source`)
    or used twice.
    """
    left = list(dict.fromkeys(splits))
    if len(left) != len(splits):
        raise SpecError(f"index '{source}' is used twice by the shard map", span)
    out, lower = [], sympy.Integer(1)
    while left:
        nxt = next((s for s in left if equal(s.lower, lower)), None)
        if nxt is None:
            raise SpecError(f"the shard map uses digits of '{source}' that overlap or leave a gap "
                            f"(no digit starts at {lower})", span)
        out.append(nxt)
        left.remove(nxt)
        lower = sympy.expand(lower * nxt.extent)
    if not equal(lower, extent):
        raise SpecError(f"the shard map uses only part of index '{source}' "
                        f"(digits cover {lower} of {extent} values)", span)
    return out

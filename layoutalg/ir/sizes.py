"""IR of sizes: spec expressions without indices, as sympy polynomials over atoms.

A size is a polynomial with integer coefficients in *atoms*: runtime parameters
(`tp`, `block_size`, ...) and one fresh atom per division that is not exact as a
polynomial (`tp / total_heads` becomes `q0` with `q0 * total_heads == tp`). Keeping
sizes polynomial makes them exact to evaluate with Python integers, easy to compare
symbolically and direct to state to Z3 (each atom brings its defining equation).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import sympy

from .. import params
from ..errors import SpecError, Span
from ..dsl.tree import BinOp, BoolOp, Call, Compare, Cond, Expr, Name, Neg, Not, Num


@lru_cache(maxsize=1 << 16)
def cancel(e: sympy.Expr) -> sympy.Expr:
    """sympy's `cancel` of `e`, remembered for the process: compiling, checking and proving a
    library cancel the same few thousand fractions over and over (a division's atom, a size at a
    configuration), and a sympy expression is immutable, so one answer serves every caller.

    >>> n = sympy.Symbol("n")
    >>> cancel(2 * n / (4 * n))
    1/2
    """
    return sympy.cancel(e)


MAX_DEGREE = 32
"""Highest degree of a size polynomial. `let` chains square sizes (`let b = a * a`); without
a bound, thirty lines ask sympy for a polynomial of degree 2**30."""

MAX_TERMS = 512
"""Most terms of a size polynomial, checked before a product is expanded."""

MAX_COEFFICIENT = 2 ** 63 - 1
"""Largest constant in a size: sizes are 64-bit quantities at run time."""

MAX_ATOM_NESTING = 16
"""Deepest nesting of divisions (`(x // 2) // 2 ...`, also through `let`s): compile prints
each as a nested call, and Python refuses more than 200 nested parentheses."""


def param(name: str) -> sympy.Symbol:
    """The sympy symbol of a runtime parameter (`params.NAMES`)."""
    return sympy.Symbol(name, integer=True)


@dataclass(frozen=True)
class Atom:
    """A size that is not a polynomial: `num / den` (exact), `num // den` or `num % den`."""

    symbol: sympy.Symbol
    op: str  # "/", "//", "%"
    num: sympy.Expr
    den: sympy.Expr
    span: Span | None = field(default=None, compare=False)

    @property
    def text(self) -> str:
        return f"({self.num}) {self.op} ({self.den})"


def divided(op: str, n: int, d: int) -> sympy.Expr:
    """`n op d` of two ints (`d > 0`) as sympy: `/` a rational where it is not whole.

    Examples:
        >>> divided("/", 6, 4), divided("//", 7, 2), divided("%", 7, 2)
        (3/2, 3, 1)
    """
    return sympy.Rational(n, d) if op == "/" else sympy.Integer(n // d if op == "//" else n % d)


class Atoms:
    """The atoms of one compilation unit, shared so that equal divisions share a symbol."""

    def __init__(self) -> None:
        self.by_symbol: dict[sympy.Symbol, Atom] = {}
        self.positive: list[tuple] = []  # (divisor, span, text) of exact divisions that cancelled
        self.exact: list[tuple] = []     # (numerator, divisor, span, text) of exact divisions kept as atoms
        self.let_exact: dict[str, list] = {}  # those a `let` made: checked only where the let is read
        self._by_key: dict[tuple, Atom] = {}
        self._nesting: dict[sympy.Symbol, int] = {}

    def make(self, op: str, num: sympy.Expr, den: sympy.Expr, span: Span | None) -> sympy.Expr:
        if den == 0:
            raise SpecError(f"division by zero in '{num} {op} {den}'", span)
        if den.is_Integer and den < 0:
            raise SpecError(f"divisor {den} in '{num} {op} {den}' is negative; divisors are positive", span)
        if not den.is_Integer:
            # every division means "where the divisor is positive", even one that cancels or
            # that sympy later drops (`(tp // k) * 0`): the state that divided turns it into a guard
            self.positive.append((den, span, f"({num}) {op} ({den})"))
        if op == "/":
            q = cancel(num / den)
            n, d = sympy.fraction(q)
            if d == 1 and _int_poly(n):
                return sympy.expand(n)
            if not (num.is_Integer and den.is_Integer):
                # the atom may cancel later (`tp / 2 - tp / 2`) and never be evaluated, while
                # the prover reads every `/` as exact: the state that divided checks it itself
                self.exact.append((num, den, span, f"({num}) / ({den})"))
        if num.is_Integer and den.is_Integer:
            a, b = int(num), int(den)
            if op == "/":
                raise SpecError(f"{a} / {b} is not an integer", span)
            return sympy.Integer(a // b if op == "//" else a % b)
        key = (op, num, den)
        if key not in self._by_key:
            nesting = 1 + max((self._nesting.get(s, 0) for s in num.free_symbols | den.free_symbols), default=0)
            if nesting > MAX_ATOM_NESTING:
                raise SpecError(f"divisions nested too deeply: {nesting} levels (counting those in "
                                f"'let's), at most {MAX_ATOM_NESTING}", span)
            prefix = {"/": "_q", "//": "_f", "%": "_m"}[op]
            sym = sympy.Symbol(f"{prefix}{len(self._by_key)}", integer=True)
            atom = Atom(sym, op, num, den, span)
            self._by_key[key] = atom
            self.by_symbol[sym] = atom
            self._nesting[sym] = nesting
        return self._by_key[key].symbol

    def put_in(self, x, values: dict, finish=lambda e: e):
        """`x` with `values` (names to ints) put in, and each division that becomes one of
        numbers its value (`/` a rational where it is not whole); `finish` (sympy's `cancel`,
        say) rewrites what changed.

        Examples:
            >>> a = Atoms()
            >>> q = a.make("//", sympy.Symbol("n", integer=True), sympy.Symbol("tp", integer=True), None)
            >>> a.put_in(3 * q, {"n": 8, "tp": 2})
            12
        """
        x = sympy.sympify(x)
        subs = {}
        for sym in x.free_symbols:
            if sym.name in values:
                v = values[sym.name]  # a number, or a size of others (the other side's block_size * k)
                subs[sym] = sympy.Integer(v) if isinstance(v, int) else sympy.sympify(v)
            elif sym in self.by_symbol:
                a = self.by_symbol[sym]
                n, d = self.put_in(a.num, values, finish), self.put_in(a.den, values, finish)
                if n.is_Integer and d.is_Integer and d > 0:
                    subs[sym] = divided(a.op, int(n), int(d))
        return finish(x.xreplace(subs)) if subs else x

    def expand(self, e: sympy.Expr) -> sympy.Expr:
        """Replace exact-division atoms by rational functions (for symbolic comparison)."""
        subs = {}
        for sym, atom in self.by_symbol.items():
            if atom.op == "/" and sym in e.free_symbols:
                subs[sym] = self.expand(atom.num) / self.expand(atom.den)
        return e.xreplace(subs) if subs else e

    def equal(self, a, b) -> bool:
        """True when `a == b` for every value of the parameters (divisions taken as exact)."""
        if a == b:
            return True
        return cancel(self.expand(sympy.sympify(a) - sympy.sympify(b))) == 0


def _terms(e: sympy.Expr) -> int:
    return len(e.args) if e.is_Add else 1


def _degree(e: sympy.Expr) -> int:
    """Total degree of an expanded polynomial (atoms count as variables)."""
    if e.is_Add:
        return max(_degree(a) for a in e.args)
    if e.is_Mul:
        return sum(_degree(a) for a in e.args)
    if e.is_Pow:
        return int(e.exp) * _degree(e.base) if e.exp.is_Integer else MAX_DEGREE + 1
    return 1 if e.is_Symbol else 0


def _bounded(e: sympy.Expr, span: Span | None, what: str) -> sympy.Expr:
    """`e`, when its terms, degree and constants are within the bounds above; else a SpecError."""
    if _terms(e) > MAX_TERMS:
        raise SpecError(f"{what} is too large a polynomial: more than {MAX_TERMS} terms", span)
    degree = _degree(e)
    if degree > MAX_DEGREE:
        raise SpecError(f"{what} has degree {degree}; at most {MAX_DEGREE}", span)
    for term in (e.args if e.is_Add else (e,)):
        c = term.as_coeff_Mul()[0]
        if c.is_Integer and abs(int(c)) > MAX_COEFFICIENT:
            raise SpecError(f"{what} has a constant too large ({int(c).bit_length()} bits); "
                            f"at most {MAX_COEFFICIENT} (2**63 - 1)", span)
    return e


def _int_poly(e: sympy.Expr) -> bool:
    if not e.free_symbols:
        return e.is_Integer
    try:
        return all(c.is_Integer for c in sympy.Poly(e, *sorted(e.free_symbols, key=str)).coeffs())
    except sympy.PolynomialError:
        return False


class Scope:
    """Names visible to size expressions: runtime parameters, `let`s and layout parameters."""

    def __init__(self, atoms: Atoms, names: dict[str, sympy.Expr] | None = None,
                 fns: dict | None = None):
        self.atoms = atoms
        self.names = dict(names) if names is not None else {n: param(n) for n in params.NAMES}
        self.fns = dict(fns or {})

    def child(self, extra: dict[str, sympy.Expr]) -> "Scope":
        s = Scope(self.atoms, {**self.names, **extra}, self.fns)
        return s

    def size(self, e: Expr, what: str = "size") -> sympy.Expr:
        """Convert a spec expression that has no index into a sympy size."""
        if isinstance(e, Num):
            if "." in e.value:
                raise SpecError(f"{what} must be an integer, not {e.value}", e.span)
            return sympy.Integer(int(e.value))
        if isinstance(e, Name):
            if e.id not in self.names:
                raise SpecError(f"unknown name '{e.id}' in {what}; known here: "
                                + ", ".join(sorted(self.names)), e.span)
            return self.names[e.id]
        if isinstance(e, Neg):
            return -self.size(e.arg, what)
        if isinstance(e, BinOp):
            a, b = self.size(e.left, what), self.size(e.right, what)
            if e.op == "+":
                return _bounded(sympy.expand(a + b), e.span, what)
            if e.op == "-":
                return _bounded(sympy.expand(a - b), e.span, what)
            if e.op == "*":
                if _terms(a) * _terms(b) > MAX_TERMS:
                    raise SpecError(f"{what} is too large a polynomial: more than {MAX_TERMS} terms", e.span)
                return _bounded(sympy.expand(a * b), e.span, what)
            return self.atoms.make(e.op, a, b, e.span)
        if isinstance(e, Call):
            if e.fn == "max" or e.fn == "min":
                raise SpecError(f"'{e.fn}' is not supported; state the cases with 'case'", e.span)
            raise SpecError(f"function '{e.fn}' cannot be used in a {what}", e.span)
        raise TypeError(e)  # pragma: no cover

    def cond(self, c: Cond):
        """Convert a condition into a sympy boolean over sizes."""
        if isinstance(c, Compare):
            a, b = self.size(c.left, "condition"), self.size(c.right, "condition")
            return {"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge,
                    "<": sympy.Lt, ">": sympy.Gt}[c.op](a, b, evaluate=False)
        if isinstance(c, BoolOp):
            parts = [self.cond(x) for x in c.args]
            return (sympy.And if c.op == "and" else sympy.Or)(*parts, evaluate=False)
        if isinstance(c, Not):
            return sympy.Not(self.cond(c.arg), evaluate=False)
        raise TypeError(c)  # pragma: no cover

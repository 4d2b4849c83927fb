"""A query as the text of an SMT-LIB 2 benchmark, its side theorems written as lemma instances.

The arithmetic (`z3ops`) states, beside each division's definition `a == q*b + r`, theorems
between two divisions (floor division is monotone; one division read twice is one value). A
certificate cannot assert those as they are: `certify` accepts an implication only as an
instance of a lemma it has re-proved. `smt_body` rewrites each into its lemma's instance, with
both divisions' definitions as hypotheses.

A family's certificates hold hundreds of queries sharing most of their assertions (the side
conditions of one arithmetic), so what an assertion is (its operator, the division it
defines, the lemma instance it becomes) is worked out once per process and remembered by the
assertion (`_FACTS`, `_THEOREMS`), which the memo keeps alive so its id names no other term.
"""
from __future__ import annotations

import re

import z3

from ...errors import LayoutalgError
from . import lemmas


def smt2_text(assertions) -> str:
    """The assertions as an SMT-LIB 2 benchmark, as `z3.Solver.to_smt2` prints them (without
    making a solver: a certificate's queries hold hundreds of assertions). Z3 prints an empty
    conjunction (disjunction) as a bare `and` (`or`), which is not SMT-LIB: it is written
    `true` (`false`).

    >>> z3.parse_smt2_string(smt2_text([z3.Int("x") > 0, z3.Or()]))
    [x > 0, False]
    """
    es = [e if isinstance(e, z3.ExprRef) else z3.BoolSort().cast(e) for e in assertions]
    *init, last = es or [z3.BoolVal(True)]
    v = (z3.Ast * len(init))(*[e.as_ast() for e in init])
    text = z3.Z3_benchmark_to_smtlib_string(last.ctx.ref(), "benchmark generated from python API", "", "unknown", "",
                                            len(init), v, last.as_ast())
    return _EMPTY.sub(lambda m: "true" if m.group(0) == "and" else "false", text)


_EMPTY = re.compile(r"(?<=\s)(and|or)(?=[\s)])")
"""`and`/`or` as an operand rather than an operator (an operator follows its parenthesis)."""


def smt_body(assertions) -> tuple[str, set]:
    """(SMT-LIB text, lemmas its theorems use) of `assertions`, each theorem between two divisions
    the arithmetic states as a side condition (`Z3Ops._lemma`: floor division is monotone;
    `shared_equal`: one division read twice) written as an instance of its lemma (MONOTONE,
    STRICT, SAME) with both divisions' definitions as hypotheses, so `certify` matches it
    against a lemma its file names. A theorem whose divisions are not defined in `assertions`
    is left as it is (and `certify` refuses an implication it cannot match)."""
    facts = [_facts(e) if isinstance(e, z3.ExprRef) else None for e in assertions]
    defs = {}
    for f in facts:
        if f is not None and f[2] is not None:
            defs.setdefault(f[3][0], f[2])
            defs.setdefault(f[3][1], f[2])
    out, kinds = [], set()
    for e, f in zip(assertions, facts):
        if e is False or (f is not None and f[1] == z3.Z3_OP_FALSE):
            # (a division by a constant at most 0: the file would rest on it, and prove nothing)
            raise LayoutalgError("certificates: a query asserts a bare false (a constant divisor at most 0); "
                                 "no certificate rests on false")
        got = _instance(e, f, defs) if f is not None and f[1] in (z3.Z3_OP_IMPLIES, z3.Z3_OP_EQ) else None
        out.append(e if got is None else got[0])
        kinds |= set() if got is None else {got[1]}
    text = smt2_text(out)
    if _FALSE.search(text):
        raise LayoutalgError("certificates: a query's text asserts a bare false (an empty disjunction); "
                             "no certificate rests on false")
    return text, kinds


_FALSE = re.compile(r"\(assert\s+false\s*\)")

_FACTS: dict = {}
"""(context, ast id) -> (the assertion, its operator, the division it defines or None, the ids
of that division's quotient and remainder): `_facts`."""

_THEOREMS: dict = {}
"""(context, ast id) -> [the assertion, then (the definitions `_theorem` read, as (quotient or
remainder id, the definition found or None), its answer) ...]: `_instance`."""

_LIMIT = 200_000
"""Assertions the memos keep before they start afresh (each entry keeps its terms alive)."""


def _facts(e) -> tuple:
    """(e, its operator, the division it defines, (its quotient's id, its remainder's id)),
    worked out once per assertion."""
    key = (id(e.ctx), e.get_id())
    got = _FACTS.get(key)
    if got is None:
        if len(_FACTS) >= _LIMIT:  # (both memos at once: an entry of either holds its assertion)
            _FACTS.clear()
            _THEOREMS.clear()
        op = _op(e)
        d = _definition(e, op)
        got = _FACTS[key] = (e, op, d, None if d is None else (d[2].get_id(), d[3].get_id()))
    return got


class _Reading:
    """The definitions of one query as `_theorem` reads them, each read recorded: its answer
    holds for any query whose definitions give the same at every key it read."""

    __slots__ = ("defs", "read")

    def __init__(self, defs: dict):
        self.defs, self.read = defs, []

    def get(self, key):
        d = self.defs.get(key)
        self.read.append((key, d))
        return d


def _instance(e, facts: tuple, defs: dict):
    """`_theorem(e, defs)`, remembered by `e` and the definitions it read (the definitions are
    the memo's own tuples, so one found again is the same object)."""
    key = (id(e.ctx), e.get_id())
    seen = _THEOREMS.get(key)
    for read, answer in (seen or [None])[1:]:
        if all(defs.get(k) is d for k, d in read):
            return answer
    reading = _Reading(defs)
    answer = _theorem(e, reading, facts[1])
    _THEOREMS.setdefault(key, [e]).append((tuple(reading.read), answer))  # (e first: held, its id is its own)
    return answer


def _op(e) -> int:
    """Z3's kind of `e`'s operator (a `Z3_OP_*`), -1 where `e` is no application. A certificate's
    queries hold hundreds of assertions each, and `z3.is_eq` and its kin make several calls
    into Z3 and an object apiece: each node is asked once here."""
    ctx, a = e.ctx_ref(), e.as_ast()
    return z3.Z3_get_decl_kind(ctx, z3.Z3_get_app_decl(ctx, a)) if z3.Z3_get_ast_kind(ctx, a) == z3.Z3_APP_AST else -1


def _args(e) -> int:
    return z3.Z3_get_app_num_args(e.ctx_ref(), e.as_ast())


def _definition(e, op: int | None = None):
    """(dividend, divisor, quotient, remainder) where `e` is a division's definition
    `a == q*b + r` (either way round; q and r constants), else None."""
    if (_op(e) if op is None else op) != z3.Z3_OP_EQ:
        return None
    for a, rhs in ((e.arg(0), e.arg(1)), (e.arg(1), e.arg(0))):
        if _op(rhs) == z3.Z3_OP_ADD and _args(rhs) == 2:
            m = rhs.arg(0)
            if _op(m) == z3.Z3_OP_MUL and _args(m) == 2:
                q, b, r = m.arg(0), m.arg(1), rhs.arg(1)
                if _op(q) == z3.Z3_OP_UNINTERPRETED and _args(q) == 0 and \
                        _op(r) == z3.Z3_OP_UNINTERPRETED and _args(r) == 0:
                    return a, b, q, r
    return None


def _theorem(e, defs, op: int | None = None):
    """(the lemma instance, its name) where `e` is a theorem between two divisions of `defs`
    (their quotients' or remainders' ids -> definitions): `a <= A => q <= Q`, `a < A and R == 0
    => q < Q`, or `q == Q` / `r == R` for one dividend and divisor; else None."""
    op = _op(e) if op is None else op
    if op not in (z3.Z3_OP_IMPLIES, z3.Z3_OP_EQ):
        return None

    def division(x, which):
        d = defs.get(x.get_id()) if _op(x) == z3.Z3_OP_UNINTERPRETED and _args(x) == 0 else None
        return d if d is not None and d[which].get_id() == x.get_id() else None

    def apart(d1, d2):
        return d1 is not None and d2 is not None and d1[2].get_id() != d2[2].get_id() and z3.eq(d1[1], d2[1])
    if op == z3.Z3_OP_IMPLIES:
        hyp, con = e.arg(0), e.arg(1)
        for strict_, c in ((False, _cmp(con, False)), (True, _cmp(con, True))):
            d1, d2 = (division(c[0], 2), division(c[1], 2)) if c else (None, None)
            if not apart(d1, d2):
                continue
            (a, b, q, r), (A, _, Q, R) = d1, d2
            h = _cmp(hyp, strict_) if not strict_ else \
                (_cmp(hyp.arg(0), True) if _op(hyp) == z3.Z3_OP_AND and _args(hyp) == 2 and _zero(hyp.arg(1), R)
                 else None)
            if h and z3.eq(h[0], a) and z3.eq(h[1], A):
                return (lemmas.strict if strict_ else lemmas.monotone)(b, a, q, r, A, Q, R), \
                    "strict" if strict_ else "monotone"
        return None
    for which in (2, 3):
        d1, d2 = division(e.arg(0), which), division(e.arg(1), which)
        if apart(d1, d2) and z3.eq(d1[0], d2[0]):
            return lemmas.same(d1[1], d1[0], d1[2], d1[3], d2[0], d2[2], d2[3]), "same"
    return None


_ORDER = {False: (z3.Z3_OP_LE, z3.Z3_OP_GE), True: (z3.Z3_OP_LT, z3.Z3_OP_GT)}


def _cmp(e, strict: bool):
    """(x, y) where `e` says `x < y` (strict) or `x <= y`, in either direction; else None."""
    op = _op(e)
    if op == _ORDER[strict][0]:
        return e.arg(0), e.arg(1)
    if op == _ORDER[strict][1]:
        return e.arg(1), e.arg(0)
    return None


def _zero(e, r) -> bool:
    """Whether `e` says `r == 0` (either way round)."""
    return _op(e) == z3.Z3_OP_EQ and any(z3.eq(e.arg(i), r) and z3.is_int_value(e.arg(1 - i)) and
                                         e.arg(1 - i).as_long() == 0 for i in (0, 1))

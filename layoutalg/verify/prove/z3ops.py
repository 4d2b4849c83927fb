"""Integer arithmetic for `interpret.Reading` over Z3 terms.

`//` and `%` are encoded by their definition (a = q*b + r, 0 <= r < b, for b > 0) and
exact `/` by a = q*b, each with a fresh quotient: nothing of the algebra's normal form
is reused, so the proofs read the spec independently of the code they check. Two ints
are combined in Python, so configurations with concrete sizes stay linear.
"""
from __future__ import annotations

import time
from functools import wraps
from typing import Callable, NamedTuple

import z3
from z3 import z3core as C

from ...dsl.interpret import Ops


def _is_int(x) -> bool:
    return isinstance(x, int)


def bare_false(e) -> bool:
    """Whether `e` is false itself, Python's False (a constant divisor at most 0: `b > 0` of an
    int) or Z3's: a query asserting it is unsat by it alone, and shows nothing.

    >>> bare_false(False), bare_false(z3.BoolVal(False)), bare_false(z3.Int("x") > 0)
    (True, True, False)
    """
    return e is False or (isinstance(e, z3.BoolRef) and z3.is_false(e))


def term_key(x):
    return ("i", x) if _is_int(x) else ("z", x.get_id())


def remembered(held: int):
    """A function of terms (ints or Z3 terms), made once per process for the same terms: keyed by
    the terms' ids (`term_key`), which what it made holds (every term is one of its subterms, so
    no other term can take their ids); past `held` entries the memo starts again. A proof builds
    many arithmetics of one case path (each model its own), and a family's certificates many
    queries of one, over the same terms under the same names: building their formulas again is
    most of their Python time."""
    def wrap(make: Callable) -> Callable:
        memo: dict = {}

        @wraps(make)
        def made(*xs):
            key = tuple(map(term_key, xs))
            got = memo.get(key)
            if got is None:
                if len(memo) >= held:
                    memo.clear()
                got = memo[key] = make(*xs)
            return got
        return made
    return wrap


@remembered(50_000)  # (proving five of the shipped families in one process makes under a thousand)
def monotone(a, q, r, a2, q2, r2) -> list:
    """Floor division's monotonicity in the dividend, for `a = q * b + r` and `a2 = q2 * b + r2`
    by one divisor `b`: four theorems, made once per process for the same six terms."""
    return [z3.Implies(a <= a2, q <= q2), z3.Implies(a2 <= a, q2 <= q),
            z3.Implies(z3.And(a < a2, r2 == 0), q < q2), z3.Implies(z3.And(a2 < a, r == 0), q2 < q)]


class _Division(NamedTuple):
    """One division `a = q * b + r` of an arithmetic: its memo key (the ids of a and b), and its
    place in the order the divisions were made."""

    key: tuple
    order: int
    a: object
    q: object
    r: object
    b: object


class Z3Ops(Ops):
    """Z3 arithmetic; `side` is the definitions of its quotients and remainders and the
    theorems between them, `definitions` the first alone."""

    def __init__(self, tag: str = ""):
        self.tag = tag  # names this arithmetic's quotients apart from another's in one query
        # the side conditions in the order made: a constraint, or (a quotient's id, how many
        # divisions by its divisor came before) for the monotonicity theorems between it and
        # each of those, built only when asked (`_lemma`): a proof that reads many divisions by
        # one divisor would otherwise build theorems for every pair, its time and memory quadratic
        self._events: list = []
        self._memo: dict = {}
        self._by_divisor: dict = {}  # a divisor's key -> the ids of the quotients by it, in the order made
        self._divisions: dict = {}  # a quotient's id -> its `_Division`
        self._lemma_memo: dict = {}
        self._alive: list = []
        self._n = 0
        # the definitions by what they define (`side_for`): a quotient's or remainder's Z3 id ->
        # (its definition, dividend, divisor, the ids of both)
        self._defines: dict = {}
        self._always: list = []   # conditions of no quotient (a division by a non-positive int)
        self._exact: set = set()  # the remainders stated zero (`exact`): each once
        self._const_memo: dict = {}  # a term's id -> the ids of its constants (`_consts`)
        self._held: list = []        # the terms of those ids, held so that no id is reused
        self.cmp = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<=": lambda a, b: a <= b,
                    ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, ">": lambda a, b: a > b}

    def _fresh(self, what: str):
        self._n += 1
        return z3.Int(f"{self.tag}{what}!{self._n}")

    def _divmod(self, a, b):
        key = (term_key(a), term_key(b))
        if key not in self._memo:
            q, r = self._fresh("q"), self._fresh("r")
            known = self._known(a, b)
            definition = [b > 0, a == q * b + r, r >= 0, r < b] if known is None else \
                [b > 0, a == q * b + r, q == known, r == 0]  # (the same four places: `apart` reads them so)
            self._events += definition
            self._defines[q.get_id()] = self._defines[r.get_id()] = (definition, a, b, (q.get_id(), r.get_id()))
            # Floor division is monotone in the dividend: theorems for every pair of divisions
            # by the same divisor (`_lemma`), listed here, built when asked
            same = self._by_divisor.setdefault(key[1], [])
            self._events.append((q.get_id(), len(same)))
            same.append(q.get_id())
            self._divisions[q.get_id()] = _Division(key, len(self._divisions), a, q, r, b)
            self._memo[key] = (q, r)
            self._alive.append((a, b))  # a key is its terms' ids: held, no other term can take them
        return self._memo[key]

    def _known(self, a, b):
        """A quotient of `a` by `b` this arithmetic states outright where `b` is positive, or None
        (none here; `prove.meaning.Cancelling` states one)."""
        return None

    @property
    def side(self) -> list:
        """Every side condition made so far: definitions and theorems, in the order made."""
        out: list = []
        for e in self._events:
            if type(e) is tuple:  # a division: its theorems with each earlier one by its divisor
                q, n = e
                for older in self._by_divisor[self._divisions[q].key[1]][:n]:
                    out += self._lemma((q, older))
            else:
                out.append(e)
        return out

    @property
    def definitions(self) -> list:
        """The side conditions that are not theorems: every model of them satisfies `side`."""
        return [e for e in self._events if type(e) is not tuple]

    def _lemma(self, pair: tuple) -> list:
        """The monotonicity theorems of the divisions whose quotients' ids are `pair` (the
        newer first), made once. Floor division is monotone in the dividend; Z3's nonlinear
        arithmetic rarely finds this itself (it needs dividing an inequality by b), so it is
        stated: theorems, hence sound to add."""
        if pair not in self._lemma_memo:
            (_, _, a, q, r, _), (_, _, a2, q2, r2, _) = self._divisions[pair[0]], self._divisions[pair[1]]
            self._lemma_memo[pair] = monotone(a, q, r, a2, q2, r2)
        return self._lemma_memo[pair]

    def _lemmas_among(self, reached: set) -> list:
        """The theorems between two of this arithmetic's divisions whose quotients are both in
        `reached` (ids)."""
        out, by = [], {}
        for i in sorted((i for i in reached if i in self._divisions), key=lambda i: self._divisions[i].order):
            by.setdefault(self._divisions[i].key[1], []).append(i)
        for same in by.values():  # each in the order made, as `side` lists them
            for j, newer in enumerate(same):
                for older in same[:j]:
                    out += self._lemma((newer, older))
        return out

    def shared_equal(self, other: "Z3Ops") -> list:
        """Equalities between this arithmetic's divisions and `other`'s of one dividend by one
        divisor (the same terms: two configurations' readings of a size over the sizes they
        share, each with a quotient of its own). Both define `a = q*b + r, 0 <= r < b, b > 0`,
        so the two quotients and remainders are equal: a theorem, stated because Z3's
        nonlinear arithmetic rarely derives it. Only these: monotonicity between every pair of
        one divisor would cost other queries their budget. `side_for` states those of the
        quotients its terms read (`_shared_among`); here, every one."""
        return self._shared_among(other, set(self._divisions) | {q.get_id() for q, _ in other._memo.values()})

    def apart(self) -> tuple[list, list]:
        """(definitions, conditions) of this arithmetic's divisions, apart: each definition holds
        wherever its divisor is positive (so it is satisfiable in every model, and makes the
        quotient and remainder functions of the dividend and divisor where they matter), and the
        conditions are where every division is one the runtime makes (a positive divisor, an exact
        `/` exact, no int divisor that fails). Together they are `definitions`. Apart, a query may
        ask whether the conditions hold, or fail, of a reading it does not assume (a case of
        another configuration), its quotients fixed by the definitions either way."""
        defs, conds, seen = [], list(self._always), set()
        for definition, _, _, _ in self._defines.values():
            if id(definition) in seen:
                continue
            seen.add(id(definition))
            positive, *rest = definition
            defs.append(z3.Implies(positive, z3.And(*rest[:3])))
            conds += [positive, *rest[3:]]  # the remainder zero, where a `/` made it
        return defs, conds

    def divisions(self) -> list[tuple]:
        """(dividend, divisor, quotient, remainder) of every division made, in the order made."""
        return [(d.a, d.b, d.q, d.r) for d in self._divisions.values()]

    def quotient(self, a, b):
        """(quotient, remainder) of `a` by `b` where this arithmetic has already defined them
        (its side conditions say so), else None: defines nothing."""
        return self._memo.get((term_key(a), term_key(b)))

    def divided(self, v) -> tuple | None:
        """(dividend, divisor, "quot" or "rem") where `v` is a quotient or remainder this
        arithmetic made, else None."""
        found = self._defines.get(v.get_id())
        if found is None:
            return None
        _, a, b, (q, _) = found
        return a, b, "quot" if v.get_id() == q else "rem"

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
        theorems between two of them (of one arithmetic, and `shared_equal` between two). A
        definition of a quotient the terms never read is left out: its constraints only add
        conditions, so a query unsat without them is unsat with them, and Z3 is spared the
        definitions every earlier query made. `side` (and `shared_equal`) are all of them.

        Post-conditions: every returned constraint is in some `side` or `shared_equal`; a quotient
        read by `terms` has its definition returned."""
        arith = (self, *others)
        out = [c for o in arith for c in o._always]
        reached: set = set()
        taken: set = set()
        todo = set().union(*[self._consts(e) for e in terms])
        while todo:  # (each arithmetic's table looked up in turn: merged, it would cost every query
            i = todo.pop()  # time in all the divisions made so far)
            found = next((o._defines[i] for o in arith if i in o._defines), None)
            if found is None:
                continue
            definition, a, b, pair = found
            reached |= set(pair)  # a remainder read is its quotient defined: the theorems on either hold
            if id(definition) not in taken:
                taken.add(id(definition))
                out += definition
                todo |= (self._consts(a) | self._consts(b)) - reached
        out += [c for o in arith for c in o._lemmas_among(reached)]
        for i, o in enumerate(arith):
            out += [c for o2 in arith[i + 1:] for c in o._shared_among(o2, reached)]
        return out

    def _shared_among(self, other: "Z3Ops", reached: set) -> list:
        """The equalities of `shared_equal(other)` whose two quotients are both in `reached` (ids)."""
        out = []
        for i in sorted(i for i in reached if i in self._divisions):
            key, q, r = self._divisions[i].key, self._divisions[i].q, self._divisions[i].r
            if key in other._memo and other._memo[key][0].get_id() in reached:
                q2, r2 = other._memo[key]
                out += [q == q2, r == r2]
        return out

    def _consts(self, e) -> frozenset:
        """The ids of the constants in `e`, remembered for every subterm (a proof's queries
        share their terms: each is walked once). The walk reads Z3's terms through its C API,
        without a Python object per subterm (a proof walks hundreds of thousands); `e` is held,
        and with it every subterm, so no id is reused."""
        if not z3.is_expr(e):
            return frozenset()
        memo, ctx = self._const_memo, e.ctx.ref()
        top = e.as_ast()
        if C.Z3_get_ast_id(ctx, top) in memo:
            return memo[C.Z3_get_ast_id(ctx, top)]
        self._held.append(e)
        stack = [(top, None)]
        while stack:
            a, kids = stack.pop()
            i = C.Z3_get_ast_id(ctx, a)
            if i in memo:
                continue
            if kids is None:
                kids = _kids(ctx, a)
                stack.append((a, kids))
                stack += [(k, None) for k in kids]
                continue
            leaf = not kids and C.Z3_get_ast_kind(ctx, a) == z3.Z3_APP_AST and C.Z3_get_decl_kind(
                ctx, C.Z3_get_app_decl(ctx, C.Z3_to_app(ctx, a))) == z3.Z3_OP_UNINTERPRETED
            memo[i] = frozenset((i,)) if leaf else frozenset().union(*[memo[C.Z3_get_ast_id(ctx, k)] for k in kids])
        return memo[C.Z3_get_ast_id(ctx, top)]

    def _positive(self, b: int) -> bool:
        """A divisor must be positive (the runtime fails closed otherwise): else nothing holds."""
        if b <= 0:
            self._events.append(z3.BoolVal(False))
            self._always.append(z3.BoolVal(False))
        return b > 0

    def exact(self, a, b):
        if _is_int(a) and _is_int(b):
            if b <= 0 or a % b:
                self._events.append(z3.BoolVal(False))
                self._always.append(z3.BoolVal(False))
                return 0
            return a // b
        q, r = self._divmod(a, b)
        if r.get_id() not in self._exact:  # once: a reading that divides again adds nothing to either list
            self._exact.add(r.get_id())
            self._events.append(r == 0)
            self._defines[q.get_id()][0].append(r == 0)  # (the list `side` took: exactness joins the definition)
        return q

    def and_(self, xs):
        return z3.And(*xs) if any(not isinstance(x, bool) for x in xs) else all(xs)

    def or_(self, xs):
        return z3.Or(*xs) if any(not isinstance(x, bool) for x in xs) else any(xs)

    def not_(self, x):
        return z3.Not(x) if not isinstance(x, bool) else not x


def _kids(ctx, a) -> list:
    """The direct subterms of the Z3 term `a` (a pointer): an application's arguments, a
    quantifier's body."""
    kind = C.Z3_get_ast_kind(ctx, a)
    if kind == z3.Z3_APP_AST:
        app = C.Z3_to_app(ctx, a)
        return [C.Z3_get_app_arg(ctx, app, j) for j in range(C.Z3_get_app_num_args(ctx, app))]
    return [C.Z3_get_quantifier_body(ctx, a)] if kind == z3.Z3_QUANTIFIER_AST else []


def solver(rlimit: int, guard_s: float | None = None, seed: int = 0) -> z3.Solver:
    """The solver every proof query runs on: bounded by Z3's resource count (`rlimit`), with a
    wall-clock `guard_s` as a last guard only (where it decides, the caller says the verdict
    is not final).

    Not yet a function of the query and `rlimit` alone: for nonlinear integer queries
    `z3.Solver()` runs Z3's `qfnia` tactic, whose SMT and nlsat stages are given seconds of
    wall clock (`try_for`), so a query near those bounds may be decided on an idle machine
    and not under load. The SMT core alone (`SimpleSolver`) and the tactic's stages without
    the clocks were tried: both left the shipped proofs many times slower.
    """
    return _bounded(z3.Solver(), rlimit, guard_s, seed)


PEAK = {"unsat": 0, "sat": 0}
"""The most resource units one decided query (`ask`) has used in this process: how close the
budget is to deciding otherwise (printed by benchmarks/prove_bench.py)."""
_seen = [0]


def _account(s: z3.Solver, res) -> None:
    try:
        total = s.statistics().get_key_value("rlimit count")
    except z3.Z3Exception:
        return
    used, _seen[0] = total - _seen[0], total
    if res in (z3.sat, z3.unsat):
        PEAK[str(res)] = max(PEAK[str(res)], used)


FALLBACK_SHARE = 4
"""The fallback's budget: this fraction of the query's own (`ask`)."""

DEFAULT_RLIMIT = 12_000_000
"""The default tactic's budget (`ask`), within the query's own. Over every shipped family's
proof it decided what it decided within 5,400,000 units (10,700,000 at most in another run), and
where it gave up after the 40,000,000 it was once given (3 and 4 queries in two runs, 4 to 6 s
each), the SMT core after it decided each in a tenth of a second."""

FIRST_RLIMIT = 1_000_000
"""The first try's budget (`ask`). Measured on the 3,026 queries of five families' proofs
(split NHD, MLA, Mamba2, AITER's shuffled page, quant_packed), the first try decides 99% of
queries within it (half within 1,200), and costs about half a second where it does not."""

_FIRST = []


def _first_try():
    """Z3's SMT core behind the preprocessing that solves the arithmetic's definitions away
    (`solve-eqs`), with no clock anywhere: a tactic made once, a solver of it a query."""
    if not _FIRST:
        _FIRST.append(z3.Then("simplify", "propagate-values", "solve-eqs", "elim-uncnstr", "smt"))
    return _FIRST[0].solver()


def ask(constraints, rlimit: int, guard_s: float | None = None, seed: int = 0, default: z3.Solver | None = None,
        first: bool = True, blast: bool = True):
    """(result, the solver that reached it) of the conjunction of `constraints`.

    First asked of `_first_try` within `FIRST_RLIMIT` of Z3's resource count: most queries are
    a few thousand resource units there, where the default tactic for nonlinear integers
    (`qfnia`: bit-blasting, then its SMT stage on a two-second clock, then nlsat on a clock of
    its own) spends a hundredth of a second to seconds on the same query. What it decides it
    decides the same way on every run, under any load. Past its budget, the default tactic
    (`default`, else a `solver` made only here, within `DEFAULT_RLIMIT`: most queries never
    need one), then Z3's SMT core alone where the default tactic leaves it unknown for any reason but the
    wall-clock guard. The default's nonlinear stages stop on clocks of their own, so under
    load a query it decides when idle can come back unknown; the SMT core consults no clock,
    so what it decides within its resource budget (`rlimit // FALLBACK_SHARE`) it decides the
    same way on every run. A verdict is then unknown only where none decides: the same every
    time wherever the first try or the core decides alone. All are sound, so any one's sat or
    unsat is the query's. `seed` is every stage's random seed (a caller's portfolio of seeds
    asks each stage differently).

    `first` False: a query of a kind the first try seldom decides within its budget (an
    identity of nested divisions, which the default tactic's SMT stage settles in a tenth of a
    second: `Obligation.first_try`) goes to the default tactic at once, and the first try is
    asked after it, where it gives up, before the SMT core: every stage is still asked before
    unknown, so what the first try decides is decided on every run as before, except where the
    wall-clock guard stops the default tactic first (an answer the caller marks not final).
    The SMT core says `canceled` where the guard stops it, as where its budget runs out: the
    clock tells the two apart (`_core_stage`).

    `blast` False: the default tactic made here skips its bit-blasting stage (`_unblasted`), for
    a kind of query it only slows (`Obligation.blast`); a `default` given is asked as it is."""
    tactic = _default_stage if blast or default is not None else _unblasted_stage
    stages = (_first_stage, tactic, _core_stage) if first else (tactic, _first_stage, _core_stage)
    gave_up = {}
    for stage in stages:
        res, s = gave_up[stage] = stage(constraints, rlimit, guard_s, seed, default)
        if res != z3.unknown or "timeout" in s.reason_unknown():
            return _answered(res, s)
    return gave_up[tactic]  # (unknown, with the default tactic's reason)


def _bounded(s, rlimit: int, guard_s: float | None, seed: int):
    """`s` within `rlimit` resource units (and the wall-clock guard), asked with `seed`."""
    s.set("rlimit", max(1, rlimit))
    s.set("random_seed", seed)
    if guard_s is not None:
        s.set("timeout", max(1, int(guard_s * 1000)))
    return s


def _first_stage(constraints, rlimit, guard_s, seed, default):
    """`ask`'s clock-free first try, within `FIRST_RLIMIT`."""
    s = _bounded(_first_try(), min(FIRST_RLIMIT, rlimit), guard_s, seed)
    _add(s, constraints)
    return s.check(), s


def _default_stage(constraints, rlimit, guard_s, seed, default):
    """Z3's default tactic (`default`, else a `solver` made here, within `DEFAULT_RLIMIT`)."""
    s = default
    if s is None:
        s = solver(min(rlimit, DEFAULT_RLIMIT), guard_s, seed)
        _add(s, constraints)
    return s.check(), s


_UNBLASTED = []


def _unblasted():
    """Z3's default tactic for nonlinear integers (`qfnia`) without its first stage, which
    writes every integer as a 64-bit vector and bit-blasts the query (`nla2bv`): given vectors
    of 2 bits, that stage fails at once on any query with an integer that needs more, and gives
    way to the SMT and nlsat stages (where every integer fits, it may find a model; what it
    encodes is marked an under-approximation, so it never answers unsat). With 64 bits it
    decides bounded queries, satisfiable or not, where those stages may not, so it stays in the
    default tactic; on an identity of nested divisions its SAT search only costs time (a tenth
    of a second to a second a query) before the SMT stage settles it."""
    if not _UNBLASTED:
        _UNBLASTED.append(z3.With("qfnia", nla2bv_max_bv_size=2))
    return _UNBLASTED[0].solver()


def _unblasted_stage(constraints, rlimit, guard_s, seed, default):
    """`_default_stage` without the bit-blasting (`_unblasted`), within `DEFAULT_RLIMIT`."""
    s = _bounded(_unblasted(), min(rlimit, DEFAULT_RLIMIT), guard_s, seed)
    _add(s, constraints)
    return s.check(), s


def _core_stage(constraints, rlimit, guard_s, seed, default):
    """Z3's SMT core alone, clock-free, within `rlimit // FALLBACK_SHARE`; where the wall-clock
    guard stopped it (its check took the guard's time: Z3 says only `canceled`), `GuardFired`."""
    s = _bounded(z3.SimpleSolver(), rlimit // FALLBACK_SHARE, guard_s, seed)
    _add(s, constraints)
    t0 = time.perf_counter()
    res = s.check()
    if res == z3.unknown and guard_s is not None and time.perf_counter() - t0 >= guard_s:
        return res, GuardFired()
    return res, s


class GuardFired:
    """`ask`'s answer where the wall-clock guard stopped Z3's SMT core: unknown, its reason a
    timeout (what every caller reads to mark a verdict not final), and no model."""

    def reason_unknown(self) -> str:
        return "timeout: the wall-clock guard stopped Z3's SMT core"


def _add(s: z3.Solver, constraints) -> None:
    """`s.add(*constraints)`, each Boolean term asserted through Z3's C API as `add` does, less
    the Python API's checks of its sort (a `BoolRef` is Boolean: a proof's queries assert
    hundreds of terms each, thousands of times); anything else (a Python bool) through `add`."""
    ctx, ref = s.ctx.ref(), s.solver
    for c in constraints:
        if isinstance(c, z3.BoolRef):
            C.Z3_solver_assert(ctx, ref, c.as_ast())
        else:
            s.add(c)


def _answered(res, s):
    if isinstance(s, z3.Solver):
        _account(s, res)
    return res, s

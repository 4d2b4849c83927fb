"""`Z3Ops.side_for`: the side conditions a query's terms need, and only those.

A reshard proof asks hundreds of queries of two models whose arithmetic keeps every
quotient any earlier query defined. `side_for` gives a query the definitions its own terms
read (transitively: a quotient of a quotient), the theorems between two of them, and
nothing else. Checked here on random towers of divisions, by enumerating what each term
reads."""
import itertools
import random

import pytest
import z3

from layoutalg.verify.prove.z3ops import Z3Ops


def _consts(e, out=None):
    out = set() if out is None else out
    if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
        out.add(str(e))
    for c in e.children():
        _consts(c, out)
    return out


def _random_tower(rng, ops, sizes):
    """Terms built from `sizes` by random floor divisions, remainders and exact divisions,
    some of earlier quotients: each with the names of the quotients it reads (transitively)."""
    terms = [(s, set()) for s in sizes]
    for _ in range(rng.randint(3, 9)):
        (a, ra), (b, rb) = rng.choice(terms), rng.choice(terms[:len(sizes)])
        op = rng.choice(["floordiv", "mod", "exact"])
        t = getattr(ops, op)(a + rng.randint(0, 3), b)
        terms.append((t, ra | rb | _pair(ops, t)))
    return terms


def _pair(ops, t):
    """The names of the quotient and remainder one definition of `ops` gives `t`."""
    return next({str(q), str(r)} for q, r in ops._memo.values() if z3.eq(t, q) or z3.eq(t, r))


def _check_side_for(ops, other, term, reads):
    side = ops.side_for([term], other)
    everything = {c.get_id() for c in ops.side + other.side + ops.shared_equal(other)}
    assert all(c.get_id() in everything for c in side), "side_for gave a condition no arithmetic has"
    named = set().union(*[_consts(c) for c in side]) if side else set()
    assert reads <= named, f"{term}: the definitions of {reads - named} are missing"
    defined = {str(q) for o in (ops, other) for pair in o._memo.values() for q in pair}
    stray = (named & defined) - reads
    assert not stray, f"{term}: side_for defines {stray}, which it does not read"


def test_side_for_takes_each_terms_definitions_and_no_others():
    rng = random.Random(20261204)
    for _ in range(60):
        x, y = Z3Ops("x."), Z3Ops("y.")
        sizes = [z3.Int(f"s{i}") for i in range(3)]
        towers = _random_tower(rng, x, sizes) + _random_tower(rng, y, sizes)
        for term, reads in towers:
            _check_side_for(x, y, term, reads)


def test_side_for_keeps_a_shared_quotient_equal_only_where_both_are_read():
    """Two arithmetics dividing one size by another: their quotients are one (a theorem
    `shared_equal` states); a query reading both gets the equality, one reading only one does not."""
    x, y = Z3Ops("x."), Z3Ops("y.")
    a, b = z3.Int("a"), z3.Int("b")
    qx, qy = x.floordiv(a, b), y.floordiv(a, b)
    both = z3.Solver()
    both.add(qx != qy, *x.side_for([qx != qy], y))
    assert both.check() == z3.unsat
    assert len(x.side_for([qx], y)) < len(x.side_for([qx + qy], y))
    assert not any(z3.eq(c, qx == qy) for c in x.side_for([qx], y))


def test_the_check_fails_a_side_for_that_stops_at_the_outer_quotient(monkeypatch):
    """The check above is not vacuous: a side_for that gives a term's own quotient's
    definition but not those of the quotients inside it fails; so does one giving all."""
    x, y = Z3Ops("x."), Z3Ops("y.")
    s = [z3.Int("s0"), z3.Int("s1")]
    inner = x.floordiv(s[0], s[1])
    outer = x.floordiv(inner + 1, s[1])
    x.floordiv(s[1], s[0])  # a quotient no term below reads
    reads = _pair(x, inner) | _pair(x, outer)
    _check_side_for(x, y, outer, reads)
    whole = Z3Ops.side_for
    for broken in (lambda self, terms, *o: whole(self, terms, *o)[:4], lambda self, terms, *o: list(self.side)):
        monkeypatch.setattr(Z3Ops, "side_for", broken)
        with pytest.raises(AssertionError):
            _check_side_for(x, y, outer, reads)


def test_side_for_reading_only_remainders_keeps_their_theorems():
    """Two arithmetics' remainders of one division are one: a query reading only the
    remainders gets the equality too (it names the quotients, which the remainders define)."""
    x, y = Z3Ops("x."), Z3Ops("y.")
    a, b = z3.Int("a"), z3.Int("b")
    rx, ry = x.mod(a, b), y.mod(a, b)
    side = x.side_for([rx != ry], y)
    assert any(z3.eq(c, rx == ry) for c in side)
    s = z3.Solver()
    s.add(rx != ry, *side)
    assert s.check() == z3.unsat


def _theorems_hold(definitions, theorems, sizes, values) -> bool:
    """Every model of `definitions` with `sizes` at `values` satisfies `theorems` (with the
    sizes fixed each quotient and remainder is one number: the model found is the only one)."""
    s = z3.Solver()
    s.add(*definitions, *[v == n for v, n in zip(sizes, values)])
    if s.check() != z3.sat:
        return True  # no model there
    m = s.model()
    return all(z3.is_true(m.eval(t, model_completion=True)) for t in theorems)


def test_every_side_condition_beyond_the_definitions_is_a_theorem_of_them():
    """A model is looked for again with `definitions` alone (`reshard.at_sizes.solve_query`): sound only
    where the rest of `side` (monotonicity) and the shared equalities hold in every model of
    the definitions. Checked on random towers of divisions of two arithmetics, at every size
    in a small box."""
    rng = random.Random(4122026)
    for _ in range(8):
        x, y = Z3Ops("x."), Z3Ops("y.")
        sizes = [z3.Int(f"s{i}") for i in range(3)]
        _random_tower(rng, x, sizes), _random_tower(rng, y, sizes)
        definitions = x.definitions + y.definitions
        known = {c.get_id() for c in definitions}
        theorems = [c for c in x.side + y.side if c.get_id() not in known] + x.shared_equal(y)
        assert theorems and {c.get_id() for c in definitions} <= {d.get_id() for d in x.side + y.side}
        for values in itertools.product(range(-1, 5), repeat=3):
            assert _theorems_hold(definitions, theorems, sizes, values), f"a theorem fails at {values}"


def test_the_theorem_check_fails_a_condition_that_is_no_theorem():
    x = Z3Ops("x.")
    a, b = z3.Int("a"), z3.Int("b")
    q = x.floordiv(a, b)
    assert _theorems_hold(x.definitions, [q * b <= a], [a, b], (7, 2))
    assert not _theorems_hold(x.definitions, [q * b == a], [a, b], (7, 2))  # true only where b divides a


def test_side_lists_each_condition_once_and_the_theorems_in_the_order_made():
    """An exact division read again adds nothing; the monotonicity theorems of divisions by one
    divisor follow the newer one's definition, as many as the earlier divisions by it."""
    x = Z3Ops("x.")
    a, b, c = z3.Int("a"), z3.Int("b"), z3.Int("c")
    for _ in range(3):
        x.exact(a, b)
    assert len(x.side) == 5  # b > 0, a == q*b + r, r >= 0, r < b, r == 0
    x.floordiv(a + 1, b)
    x.floordiv(c, b)
    x.floordiv(a, c)  # another divisor: no theorem with the others
    assert len(x.definitions) == 5 + 4 * 3
    kinds = ["theorem" if z3.is_implies(e) else "definition" for e in x.side]
    assert kinds == ["definition"] * 9 + ["theorem"] * 4 + ["definition"] * 4 + ["theorem"] * 8 + \
        ["definition"] * 4


def test_side_for_gives_the_shared_equalities_of_exactly_the_pairs_read():
    """Two arithmetics reading the same tower (two configurations' readings of one size): a
    term reading a quotient of each gets their equalities where they divide the same terms,
    and no equality of a pair it does not read."""
    for seed in range(20):
        x, y = Z3Ops("x."), Z3Ops("y.")
        sizes = [z3.Int(f"s{i}") for i in range(3)]
        tx = _random_tower(random.Random(seed), x, sizes)
        ty = _random_tower(random.Random(seed), y, sizes)
        pick = random.Random(-seed)
        for _ in range(5):
            (a, ra), (b, rb) = pick.choice(tx), pick.choice(ty)
            side = x.side_for([a + b], y)
            pairs = [(({str(q), str(r)}, {str(q2), str(r2)}), [q == q2, r == r2])
                     for key, (q, r) in x._memo.items() if key in y._memo for q2, r2 in [y._memo[key]]]
            assert pairs  # the towers' first divisions read sizes alone: those two are one
            for (nx, ny), equal in pairs:
                read = nx <= ra and ny <= rb
                assert all(any(z3.eq(c, d) for d in side) == read for c in equal), f"seed {seed}: {equal}, read {read}"


def test_a_query_the_first_try_decides_is_not_asked_of_the_default_tactic():
    """`ask` asks the clock-free first try (SMT core after solving the definitions away) within
    `FIRST_RLIMIT`; what it decides is the answer, and `default` (the default tactic's solver) is never run. A
    query past that budget goes on to `default`."""
    import z3
    from layoutalg.verify.prove import z3ops

    class Counted(z3.Solver):
        asked = 0

        def check(self, *a):
            Counted.asked += 1
            return super().check(*a)
    x, y, q, r = z3.Ints("x y q r")
    s0 = Counted()
    s0.add(x * y == 12, x > 1, y > 1, x < y)
    res, s = z3ops.ask(s0.assertions(), 1_000_000, default=s0)
    assert res == z3.sat and s is not s0 and s.model().eval(x * y).as_long() == 12 and Counted.asked == 0
    division = Counted()  # a division's definition, and a quotient said too big: unsat
    division.add(x == q * 4 + r, r >= 0, r < 4, x >= 0, x < 64, q >= 16)
    assert z3ops.ask(division.assertions(), 1_000_000, default=division)[0] == z3.unsat and Counted.asked == 0
    a, b, c = z3.Ints("a b c")  # past the first try's budget of 1: `s` (unbounded here) is asked
    hard = Counted()
    hard.add(a * a * a + b * b * b == c * c * c, a > 0, b > 0, c > 0, a < 4, b < 4)
    res, s = z3ops.ask(hard.assertions(), 1, default=hard)
    assert Counted.asked == 1 and res == z3.unsat and s is hard  # (no cubes sum to a cube)


def test_a_query_the_default_tactic_gives_up_on_is_asked_of_the_smt_core_again(monkeypatch):
    """Z3's default nonlinear tactic stops its stages on clocks of its own (unknown under load, where
    it decides when idle): `ask` asks the clock-free SMT core again, within a share of the budget.
    A query stopped by the wall-clock guard is not asked again (its verdict is marked not final).
    (The first try is given no budget here, so every query reaches the default tactic.)"""
    import z3
    from layoutalg.verify.prove import z3ops
    monkeypatch.setattr(z3ops, "FIRST_RLIMIT", 1)
    x, y = z3.Ints("x y")
    gives_up = z3.Tactic("fail").solver()  # a stand-in for a tactic whose stages ran out of time
    gives_up.add(x * y == 12, x > 1, y > 1, x < y)
    res, s = z3ops.ask(gives_up.assertions(), 1_000_000, default=gives_up)
    assert res == z3.sat and s is not gives_up and s.model().eval(x * y).as_long() == 12
    gives_up = z3.Tactic("fail").solver()
    gives_up.add(x * x == 2)
    assert z3ops.ask(gives_up.assertions(), 1_000_000, default=gives_up)[0] == z3.unsat
    hard = z3.Solver()
    hard.set("timeout", 1)
    a, b, c = z3.Ints("a b c")
    hard.add(a * a * a + b * b * b == c * c * c, a > 0, b > 0, c > 0)
    res, s = z3ops.ask(hard.assertions(), 1_000_000_000, default=hard)
    assert res == z3.unknown and s is hard and "timeout" in s.reason_unknown()


def test_a_query_of_a_kind_the_first_try_seldom_decides_goes_to_the_default_tactic_first(monkeypatch):
    """`first=False` (an obligation's `first_try`): the default tactic is asked first, and what it
    decides is the answer; where it gives up, the first try is asked before the SMT core (given no
    budget here, so a decided query was decided by the first try)."""
    import z3
    from layoutalg.verify.prove import z3ops

    class Counted(z3.Solver):
        asked = 0

        def check(self, *a):
            Counted.asked += 1
            return super().check(*a)
    x, y = z3.Ints("x y")
    s0 = Counted()
    s0.add(x * y == 12, x > 1, y > 1, x < y)
    res, s = z3ops.ask(s0.assertions(), 1_000_000, default=s0, first=False)
    assert res == z3.sat and s is s0 and Counted.asked == 1
    monkeypatch.setattr(z3ops, "FALLBACK_SHARE", 10 ** 9)  # the core: a budget of 1 unit, which decides nothing
    gives_up = z3.Tactic("fail").solver()
    gives_up.add(x * y == 12, x > 1, y > 1, x < y)
    res, s = z3ops.ask(gives_up.assertions(), 1_000_000, default=gives_up, first=False)
    assert res == z3.sat and s is not gives_up and s.model().eval(x * y).as_long() == 12
    monkeypatch.setattr(z3ops, "FIRST_RLIMIT", 1)  # none decides: unknown, with the default tactic's reason
    res, s = z3ops.ask(gives_up.assertions(), 1_000_000, default=gives_up, first=False)
    assert res == z3.unknown and s is gives_up


def test_an_obligations_first_try_is_the_order_its_queries_are_asked_in(monkeypatch):
    """The digit tables' queries (`first_try=False`, `blast=False` in the registry) ask the default
    tactic first, without its bit-blasting, a family's own and its pads'; every other query of the
    proof (page-size's witnesses, a pad's empty box) keeps the first try first and the whole tactic."""
    from conftest import ROOT
    from layoutalg.dsl.library import load
    from layoutalg.verify.prove import obligations, runner
    from layoutalg.verify.prove.registry import obligation
    assert obligation("digits-match-spec").first_try is False and obligation("writers-disjoint").first_try
    assert obligation("digits-match-spec").blast is False and obligation("writers-disjoint").blast
    digits, held, seen, real, real_query = set(), [], [], obligations.ask, obligations._digits_query

    def spy(constraints, *a, first=True, blast=True, **k):
        assert first == blast  # (the two go together in the shipped registry)
        seen.append((any(isinstance(c, z3.AstRef) and c.get_id() in digits for c in constraints), first))
        return real(constraints, *a, first=first, blast=blast, **k)

    def query(*a):
        v, w = real_query(*a)
        digits.add(v.get_id())
        held.append(v)  # (held: a freed term's id is given to another)
        return v, w
    monkeypatch.setattr(obligations, "ask", spy)
    monkeypatch.setattr(obligations, "_digits_query", query)
    rows = runner.prove_family(load([ROOT / "specs" / "mamba2.lal"]), "mamba2", only={"digits-match-spec"})
    assert {r.family for r in rows if r.obligation == "digits-match-spec"} >= {"mamba2.x", "mamba2.tail'"}
    assert all(r.status == "proved" for r in rows)
    assert (True, False) in seen and (False, True) in seen
    assert all(is_digits != first for is_digits, first in seen), seen


def test_a_query_asked_without_bit_blasting_skips_only_that_stage(monkeypatch):
    """`blast=False`: the default tactic made by `ask` is `_unblasted`, whose bit-blasting stage
    cannot encode a query (2-bit vectors) and gives way to the SMT stage, which decides: an
    identity of nested divisions is proved, and a false one refuted with a model; `blast` True
    (every obligation but the digit tables') asks the whole tactic."""
    from layoutalg.verify.prove import z3ops
    used = []
    for name in ("_default_stage", "_unblasted_stage"):
        real = getattr(z3ops, name)
        monkeypatch.setattr(z3ops, name, lambda *a, _real=real, _name=name: used.append(_name) or _real(*a))
    i, n, a, b = z3.Ints("i n a b")
    box = [a >= 1, a <= 1 << 20, b >= 1, b <= 1 << 20, n == a * b, i >= 0, i < n]
    nested = (i / a) / b != i / (a * b)  # floor division: (i // a) // b == i // (a * b)
    assert z3ops.ask([*box, nested], 40_000_000, first=False, blast=False)[0] == z3.unsat
    res, s = z3ops.ask([*box, (i / a) % b != i % b], 40_000_000, first=False, blast=False)
    assert res == z3.sat and s.model().eval((i / a) % b != i % b)
    assert used == ["_unblasted_stage", "_unblasted_stage"]
    used.clear()
    assert z3ops.ask([*box, nested], 40_000_000, first=False)[0] == z3.unsat and used == ["_default_stage"]


def test_the_smt_core_stopped_by_the_wall_clock_guard_is_a_timeout(monkeypatch):
    """Z3's SMT core says `canceled` where the wall-clock guard stops it, as where its budget runs
    out: `ask` tells the two apart by the clock, so a verdict the guard decided is marked not final
    (`Model.solve` reads `timeout` in the reason), and one the budget decided is not."""
    from layoutalg.verify.prove import z3ops
    monkeypatch.setattr(z3ops, "FIRST_RLIMIT", 1)  # the first try gives up at once
    x, y = z3.Ints("x y")
    hard = [x * x == 2 * y * y, x > 0, y > 0]  # no integers: the core searches on
    res, s = z3ops.ask(hard, 10 ** 10, guard_s=0.5, default=z3.Tactic("fail").solver())
    assert res == z3.unknown and "timeout" in s.reason_unknown() and isinstance(s, z3ops.GuardFired)
    res, s = z3ops.ask(hard, 400, guard_s=60.0, default=z3.Tactic("fail").solver())  # the budget, not the clock
    assert res == z3.unknown and "timeout" not in s.reason_unknown()


def test_the_default_tactic_is_given_at_most_its_own_budget(monkeypatch):
    """Past the first try, the default tactic gets `DEFAULT_RLIMIT` of the query's budget (where it
    gives up past that it seldom decides at all, and the SMT core after it gets its own share)."""
    from layoutalg.verify.prove import z3ops
    given, real = [], z3ops.solver
    monkeypatch.setattr(z3ops, "solver", lambda rlimit, *a: given.append(rlimit) or real(rlimit, *a))
    monkeypatch.setattr(z3ops, "FIRST_RLIMIT", 1)  # every query reaches the default tactic
    x, y = z3.Ints("x y")
    assert z3ops.ask([x * y == 12, x > 1, y > 1, x < y], 10 ** 9)[0] == z3.sat
    assert z3ops.ask([x * y == 12, x > 1, y > 1, x < y], 200_000)[0] == z3.sat
    assert given == [z3ops.DEFAULT_RLIMIT, 200_000]


def test_a_querys_terms_are_asserted_as_add_asserts_them():
    """`ask` asserts Boolean terms through Z3's C API: the solver holds what `add` would give it,
    a Python bool among them, in order, and answers alike."""
    from layoutalg.verify.prove.z3ops import _add
    x, y = z3.Ints("x y")
    terms = [x > 0, True, z3.Or(x == y, y < 0), x * y == 6, False]
    mine, theirs = z3.Solver(), z3.Solver()
    _add(mine, terms)
    theirs.add(*terms)
    assert len(mine.assertions()) == 5 and all(a.eq(b) for a, b in zip(mine.assertions(), theirs.assertions()))
    assert mine.check() == theirs.check() == z3.unsat


def test_a_box_resting_on_a_bare_false_is_not_shown_empty():
    """A division by a constant 0 puts Python's False among the side conditions, which makes any
    query unsat: `box_empty` takes no answer resting on it (Z3's `is_false` reads no Python bool)."""
    from conftest import ROOT
    from layoutalg.dsl.interpret import paths
    from layoutalg.dsl.library import load
    from layoutalg.verify.prove.obligations import Model, box_empty
    from layoutalg.verify.prove.runner import Budgets
    from layoutalg.verify.prove.z3ops import bare_false
    lib = load([ROOT / "specs" / "split_nhd.lal"])
    m = Model(lib, "split_nhd", paths(lib, "split_nhd")[0])
    m.ops.floordiv(m.sizes["tp"], 0)
    assert any(c is False for c in m.ops.side) and any(bare_false(c) for c in m.ops.side)
    assert not box_empty(m, Budgets.of().small)

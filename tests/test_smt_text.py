"""A query's SMT-LIB text (`verify/prove/smt_text`): what Z3's own printer writes, each side
theorem an instance of its lemma with the definitions of this query, whatever was written before."""
import z3

from layoutalg.verify.prove.smt_text import smt2_text, smt_body


def test_the_text_is_what_a_solver_prints():
    x, y = z3.Ints("x y")
    for asserted in ([x > 0, z3.Or(x == y, y < 2), True], [x + y == 3], []):
        s = z3.Solver()
        s.add(*asserted)
        assert smt2_text(asserted) == s.to_smt2()


def test_a_theorem_is_its_lemmas_instance_under_this_querys_definitions():
    """The memo of an assertion's instance is keyed by the definitions it read: the same theorem
    in a query where its quotient divides another dividend is no instance (it is written as it
    is, and `certify` then refuses it), though an earlier query made it one."""
    a, big, b, q, r, big_q, big_r, other = z3.Ints("a A b q r Q R other")
    mine, theirs = a == q * b + r, big == big_q * b + big_r
    theorem = z3.Implies(a <= big, q <= big_q)
    text, kinds = smt_body([mine, theirs, theorem])
    assert kinds == {"monotone"} and not _asserts(text, theorem)
    text, kinds = smt_body([other == q * b + r, theirs, theorem])
    assert kinds == set() and _asserts(text, theorem)
    text, kinds = smt_body([theorem])  # (no definition at all)
    assert kinds == set() and _asserts(text, theorem)
    assert smt_body([mine, theirs, theorem])[1] == {"monotone"}  # (and the first query's answer again)


def _asserts(text: str, e) -> bool:
    return any(x.eq(e) for x in z3.parse_smt2_string(text))


def test_a_memo_started_afresh_gives_no_dead_assertions_answer_to_a_new_one(monkeypatch):
    """Both memos start afresh together, and each entry holds its assertion: an id Z3 gives a
    new term after the old one died is never answered from the old one's entry."""
    from layoutalg.verify.prove import smt_text
    monkeypatch.setattr(smt_text, "_LIMIT", 4)
    monkeypatch.setattr(smt_text, "_FACTS", {})
    monkeypatch.setattr(smt_text, "_THEOREMS", {})
    a, big, b, q, r, big_q, big_r, x, y = z3.Ints("a A b q r Q R x y")
    mine, theirs = a == q * b + r, big == big_q * b + big_r
    hyp, con, lhs, rhs = a <= big, q <= big_q, x + 1, y * 2
    old = lhs == rhs  # (it reads no definition: its answer is none)
    assert smt_body([old])[1] == set()
    for k in range(4):  # the memos fill and start afresh
        smt_body([x > k])
    dead = old.get_id()
    del old
    theorem = z3.Implies(hyp, con)  # (Z3 may give it the dead term's id)
    assert smt_body([mine, theirs, theorem])[1] == {"monotone"}, theorem.get_id() == dead

"""`layoutalg certify` checks a certificate folder's content, not its names: each forgery a
reviewer found is a folder it must reject, saying why (`verify.audit`)."""
import io
import re

import pytest

from conftest import ROOT
from layoutalg.dsl.library import load
from layoutalg.verify.certify import certify
from layoutalg.verify.prove import lemmas
from layoutalg.verify.prove.certificates import APPLIES, lemma_text, texts


@pytest.fixture(scope="module")
def made():
    """split_nhd's writers-disjoint files of case path 0 (one head a rank), its applies file and
    the lemmas they rest on: name -> text."""
    lib = load([str(ROOT / "specs" / "split_nhd.lal")])
    out = {f"split_nhd/{stem}.smt2": text for stem, text in texts(lib, "split_nhd", "writers-disjoint")
           if stem.startswith("writers-disjoint.case0")}
    out.update({f"split_nhd/{stem}.smt2": text for stem, text in texts(lib, "split_nhd", APPLIES)
                if stem == "applies.case0"})
    out.update({f"shared-lemmas/{n}.smt2": lemma_text(n, said, a) for n, said, a in lemmas.shared()})
    return out


def _run(tmp_path, files: dict) -> tuple[int, str]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    out = io.StringIO()
    return certify(str(tmp_path), 20, 2, out), out.getvalue()


QUERY = "split_nhd/writers-disjoint.case0.smt2"
CHAIN = "split_nhd/writers-disjoint.case0.chain-shard-h.smt2"


def test_the_folder_as_written_is_certified(made, tmp_path):
    rc, out = _run(tmp_path, made)
    assert rc == 0, out
    assert "1 of 1 goals' assumptions shown satisfiable" in out


def test_a_forged_instance_of_a_chain_is_rejected_with_the_mismatch(made, tmp_path):
    text = made[QUERY]
    shard = re.search(r"\(\* (head_shard@\d+) heads\)", text).group(1)
    forged = text.replace(f"(* {shard} heads)", f"(* {shard} (- heads 1))")
    assert forged != text
    rc, out = _run(tmp_path, {**made, QUERY: forged})
    assert rc == 1
    assert "asserts an implication that is no instance of a lemma" in out and "chain-shard-h.smt2: " in out, out


def test_a_chain_file_of_assert_false_is_rejected(made, tmp_path):
    rc, out = _run(tmp_path, {**made, CHAIN: "; expect: unsat\n(assert false)\n(check-sat)\n"})
    assert rc == 1
    assert "asserts a bare false" in out and "a chain file states no goal" in out, out


def test_a_lemma_of_assert_false_is_rejected(made, tmp_path):
    rc, out = _run(tmp_path, {**made, "shared-lemmas/digit.smt2": "; expect: unsat\n(assert false)\n(check-sat)\n"})
    assert rc == 1 and "shared-lemmas/digit.smt2:2: not the lemma digit" in out, out


def test_expect_sat_on_a_broken_query_is_rejected(made, tmp_path):
    broken = made[QUERY].replace("; expect: unsat", "; expect: sat").replace("(check-sat)", "(assert (= tp tp))\n(check-sat)")
    rc, out = _run(tmp_path, {**made, QUERY: broken})
    assert rc == 1 and "expects sat, which only a case's applies file may" in out, out


def test_a_vacuous_query_is_rejected(made, tmp_path):
    vacuous = made[QUERY].replace("(check-sat)", "(assert (< tp 0))\n(check-sat)")  # no size left: unsat for nothing
    rc, out = _run(tmp_path, {**made, QUERY: vacuous})
    assert rc == 1 and "vacuous? its assertions without its goal answer unsat" in out, out


def test_a_missing_applies_file_is_rejected(made, tmp_path):
    rc, out = _run(tmp_path, {k: v for k, v in made.items() if "applies" not in k})
    assert rc == 1 and "case 0 has no applies.case0.smt2" in out, out


def test_the_lemmas_certify_knows_are_those_the_prover_writes(tmp_path):
    from layoutalg.verify import audit, smtlib
    terms = smtlib.Terms()
    known = audit.templates(terms)
    assert set(known) == set(lemmas.LEMMAS)
    for name, said, negation in lemmas.shared():
        (tmp_path / f"{name}.smt2").write_text(lemma_text(name, said, negation))
        assert audit.check_lemma(smtlib.read(str(tmp_path / f"{name}.smt2"), terms), name, known, terms) is None, name
    (tmp_path / "bad.smt2").write_text(lemma_text("range", "", lemmas.shared()[0][2]))  # digit's text, named range
    assert "not the lemma range" in audit.check_lemma(smtlib.read(str(tmp_path / "bad.smt2"), terms), "range", known, terms)


def test_a_witness_cannot_excuse_a_vacuous_query_and_must_name_its_constants(made, tmp_path):
    text = made[QUERY]
    assert "; witness: " in text
    # values that meet the added assumption (tp = -1) but not the declared bounds: the witnessed query is
    # unsat, the query without them too: vacuous still
    vacuous = re.sub(r"; witness: [^\n]*", "; witness: (= tp (- 1))", text).replace(
        "(check-sat)", "(assert (< tp 0))\n(check-sat)")
    rc, out = _run(tmp_path, {**made, QUERY: vacuous})
    assert rc == 1 and "vacuous? its assertions without its goal answer unsat" in out, out
    forged = re.sub(r"; witness: [^\n]*", "; witness: (= nowhere 1)", text)
    rc, out = _run(tmp_path / "b", {**made, QUERY: forged})
    assert rc == 1 and "not a declared constant and an integer" in out, out


def test_the_witness_answers_the_vacuity_query(made, tmp_path):
    rc, out = _run(tmp_path, made)
    assert rc == 0 and re.search(r"^sat +witness .*writers-disjoint\.case0\.smt2 without its goal$", out, re.M), out


def test_the_reader_reads_a_stretch_met_again_at_its_own_lines_and_reads_only_what_a_solver_reads(tmp_path):
    from layoutalg.verify import smtlib
    body = ("(declare-fun x () Int)\n(assert (let ((a!1 (+ x 1))) (let ((a!1 (* a!1 2)) (b a!1)) (>= a!1 b))))\n"
            "(assert (! (> x 0) :named p))\n(check-sat)\n")
    (tmp_path / "a.smt2").write_text("; one\n" + body)
    (tmp_path / "b.smt2").write_text("; one\n; two\n\n" + body)
    terms = smtlib.Terms()
    a, b = (smtlib.read(str(tmp_path / n), terms) for n in ("a.smt2", "b.smt2"))
    assert [c.line for c in a.commands] == [2, 3, 4, 5] and [c.line for c in b.commands] == [4, 5, 6, 7]
    assert [b.text[slice(*c.span)] for c in b.commands] == [a.text[slice(*c.span)] for c in a.commands]
    first, second = (x.term for x in a.assertions)
    # parallel let: b is the outer a!1 (x + 1); the inner a!1 is (x + 1) * 2; >= read as <= mirrored
    assert smtlib.show(terms, first) == "(<= (+ x 1) (* (+ x 1) 2))" and smtlib.show(terms, second) == "(< 0 x)"
    assert [x.term for x in b.assertions] == [first, second]
    for bad, why in [("(assert (= x |y))\n", "no token this reader reads"), ('(assert (= x "a b"))\n', "no token"),
                     ("(assert (let ((a 1)) a a))\n", "takes no symbol"), ("(assert (let ((a 1))))\n", "malformed"), ("(assert (= x 1)\n", "never closed"),
                     ("(assert (= x 1)))\n", "closes nothing"), ("(assert ((f) x))\n", "no operator")]:
        (tmp_path / "c.smt2").write_text("(declare-fun x () Int)\n" + bad)
        with pytest.raises(smtlib.SmtError, match=why):
            smtlib.read(str(tmp_path / "c.smt2"), terms)

"""Verdicts are enums (`layoutalg.verdicts.Verdict`, the runtime's `Outcome`) that read as their
bare words everywhere text is made; a record refuses a word outside its set where it is built;
and no module of the prover, the CLI or the runtime compares a status with a bare word."""
import ast
import json
import pickle

import pytest

from conftest import ROOT
from layoutalg.runtime.records import CERTIFIED, LayerResult, Outcome
from layoutalg.verdicts import Verdict
from layoutalg.verify.prove.store import Row, cacheable
from layoutalg.verify.prove.structural import Certificate


def _row(status, **more):
    return Row("s.lal", "f", "local-bijective", status, "symbolic: all sizes, all ranks", 0.0, **more)


@pytest.mark.parametrize("enum", [Verdict, Outcome])
def test_each_member_reads_as_its_bare_word(enum):
    for v in enum:
        word = v.value
        assert (str(v), f"{v}", f"{v:<12}", "%s" % v, "{}".format(v), repr(v)) == (
            word, word, f"{word:<12}", word, word, repr(word))
        assert v == word and hash(v) == hash(word) and {word: 1}[v] == 1 and v in {word}
        assert json.dumps({"status": v, v: [v]}) == json.dumps({"status": word, word: [word]})
        assert enum(word) is v and enum.of(word) is v and enum.of(v) is v
        assert pickle.loads(pickle.dumps(v)) is v


def test_a_row_holds_a_verdict_and_refuses_another_word():
    row = _row("proved")
    assert row.status is Verdict.PROVED and _row(Verdict.REFUTED).status is Verdict.REFUTED
    for bad in ("proven", "PROVED", "", "sat"):
        with pytest.raises(ValueError, match="not a valid Verdict"):
            _row(bad)
    for bad in (None, 1, True):
        with pytest.raises(TypeError, match="a Verdict is one of proved, refuted, unknown"):
            _row(bad)
    with pytest.raises(ValueError):
        Certificate("maybe", "")
    assert Certificate("unknown", "why").status is Verdict.UNKNOWN


def test_a_rows_json_and_its_cache_entry_are_what_a_plain_word_made(tmp_path, monkeypatch):
    """A cached row is written as the plain word and read back as the Verdict: the proof cache's
    files are the bytes they were when a status was a `str`."""
    from dataclasses import asdict

    from layoutalg.verify.prove import store
    row = _row(Verdict.REFUTED, detail="at tp=2", witness={"tp": 2})
    plain = {**asdict(row), "status": "refuted"}
    assert json.dumps(asdict(row)) == json.dumps(plain)
    assert type(plain["status"]) is str and Row(**plain) == row and Row(**plain).status is Verdict.REFUTED
    assert cacheable([asdict(row)]) and not cacheable([asdict(_row(Verdict.UNKNOWN))])
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path))
    tmp_path.chmod(0o700)
    store.write("k" * 64, [asdict(row)])
    (path,) = tmp_path.glob("proof-*.json")
    assert path.read_text() == json.dumps({"key": "k" * 64, "rows": [plain]})
    assert store.read("k" * 64) == [plain] and Row(**store.read("k" * 64)[0]) == row
    path.write_text(json.dumps({"key": "k" * 64, "rows": [{**plain, "status": "proven"}]}))
    assert store.read("k" * 64) is None  # a word outside the three is no row


def test_a_layer_result_holds_an_outcome_and_refuses_another_word():
    res = LayerResult("certified", "split_nhd", ())
    assert res.result is Outcome.CERTIFIED is CERTIFIED and res == LayerResult(CERTIFIED, "split_nhd", ())
    assert hash(res) == hash(LayerResult(Outcome.CERTIFIED, "split_nhd", ()))
    assert repr(res) == "LayerResult(result='certified', family='split_nhd', mappings=(), reasons=())"
    with pytest.raises(ValueError, match="not a valid Outcome"):
        LayerResult("proved", None, ())
    with pytest.raises(TypeError):
        LayerResult(None, None, ())


WORDS = frozenset(v.value for enum in (Verdict, Outcome) for v in enum)
FOLDERS = ("verify", "cli", "runtime")


def bare_comparisons(tree: ast.AST) -> list:
    """(line, source) of each comparison with a verdict's or an outcome's bare word (or a tuple,
    list or set of them, for `in`). A solver's answers are compared through their names
    (`obligations.UNDECIDED`, `certify.UNDECIDED`): "unknown" is a Verdict's word too."""
    def words(node):
        if isinstance(node, ast.Constant):
            return [node.value] if node.value in WORDS else []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [w for e in node.elts for w in words(e)]
        return []
    return sorted((n.lineno, ast.unparse(n)) for n in ast.walk(tree) if isinstance(n, ast.Compare)
                  and any(words(side) for side in (n.left, *n.comparators)))


def test_no_module_compares_a_status_with_a_bare_word():
    files = [p for folder in FOLDERS for p in sorted((ROOT / "layoutalg" / folder).rglob("*.py"))]
    assert len(files) > 40  # the control: the folders were read
    found = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in files
             for line, text in bare_comparisons(ast.parse(p.read_text()))]
    assert found == [], "\n".join(found)
    # it finds each kind: ==, !=, a chained comparison, `in` a tuple, a subscript, a runtime outcome
    made = ast.parse("a = r.status == 'proved'\nif s != \"unknown\": pass\nx = s == 'refuted' != t[0]\n"
                     "y = r['status'] in ('refuted', 'unknown')\nz = res.result != 'certified'\n"
                     "ok = r.status == Verdict.PROVED or st == 'sat' or 'proved' + s\n")
    assert [line for line, _ in bare_comparisons(made)] == [1, 2, 3, 4, 5]

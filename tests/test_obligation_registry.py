"""One registry of obligations (`verify/prove/registry`): every row the prover makes is named
there, once, and the tables that once said what an obligation is are views of it."""
import ast
import subprocess
import sys

import pytest

from layoutalg.dsl.library import load
from layoutalg.verify.prove import certificates, explain, obligations, registry, runner, store
from layoutalg.verify.prove.registry import ENTRIES, REGISTRY, UnknownObligation, obligation

from conftest import ROOT

PROVE = ROOT / "layoutalg" / "verify" / "prove"


def _row_names() -> set:
    """Every obligation name written as a literal where a prover module makes a row
    (`Row(spec, family, NAME, ...)`, `safely(...)` and `prove_obligation(...)` alike), or names
    one (`DOMAIN_ROW`)."""
    found = set()
    for p in PROVE.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Row", "safely", "prove_obligation") and len(node.args) >= 3 \
                    and isinstance(node.args[2], ast.Constant) and isinstance(node.args[2].value, str):
                found.add(node.args[2].value)
    from layoutalg.verify.prove.reshard.all_sizes import DOMAIN_ROW
    return found | {DOMAIN_ROW}


def test_every_row_the_prover_makes_is_registered(monkeypatch):
    literal = _row_names()
    assert {"structure", "page-size", "digits-match-spec", "one-format", "sequence-order"} <= literal  # the control
    assert literal <= set(REGISTRY), literal - set(REGISTRY)
    assert set(obligations.SYMBOLIC + obligations.PER_CONFIGURATION + obligations.PAGE + store.RESHARD) <= set(REGISTRY)
    # a family's table, every query undecided (fast): each row it makes is a registered obligation
    monkeypatch.setattr(obligations.Model, "solve", lambda self, v, b, seeds=1, how=None: ("unknown", None))
    lib = load([ROOT / "specs" / "opaque.lal"])
    rows = runner.prove_family(lib, "opaque")
    assert len(rows) >= len(obligations.SYMBOLIC) + 3
    assert {r.obligation for r in rows} <= set(REGISTRY)
    assert not [r for r in rows if "Error" in (r.detail or "")]  # undecided by the stub, not a crash in it


def test_names_are_unique_and_the_records_frozen():
    names = [o.name for o in ENTRIES]
    assert len(names) == len(set(names)) == len(REGISTRY)
    with pytest.raises(AttributeError):
        obligation("structure").meaning = "changed"  # frozen
    with pytest.raises(ValueError):
        registry.Obligation("x", "y", "no-such-mode")


def test_an_unknown_name_is_refused_clearly():
    with pytest.raises(UnknownObligation, match=r"'writers-kover' is no obligation of the prover \(known: structure"):
        obligation("writers-kover")
    with pytest.raises(LookupError):  # what `runner.safely` turns into an honest row
        obligation("writers-kover")
    with pytest.raises(ValueError, match="missing \\['b'\\], not registered \\['c'\\]"):
        registry.check_table("a table", {"a": 1, "c": 2}, ["a", "b"])


def test_the_old_tables_are_views_of_the_registry():
    by = {m: [o.name for o in ENTRIES if o.mode == m] for m in registry.MODES}
    library = [o for o in ENTRIES if o.mode in registry.LIBRARY_MODES]
    assert store.OBLIGATIONS == {o.name: o.meaning for o in library}
    assert store.RESHARD_OBLIGATIONS == {o.name: o.meaning for o in ENTRIES if o.mode in registry.RESHARD_MODES}
    assert store.RESHARD == tuple(by["reshard"]) == ("reshard-cover", "reshard-match")
    assert obligations.SYMBOLIC == tuple(by["symbolic"])
    assert obligations.PER_CONFIGURATION == tuple(by["per-configuration"]) == ("runs-match-spec", "runs-cover-local")
    assert obligations.PAGE == tuple(by["page"]) == ("regions-tile-local", "regions-tile-canonical")
    assert set(obligations.QUERIES) == {o.name for o in ENTRIES if o.query == "model"}
    assert set(explain.EXPLAIN) == {o.name for o in ENTRIES if o.query is not None}
    assert set(certificates.SMT_ROWS) == {o.name for o in ENTRIES if o.smt}
    assert certificates.NO_SMT == {o.name: o.no_smt for o in ENTRIES if o.no_smt}
    assert set(certificates.DIVIDED) == {o.name for o in ENTRIES if o.divided} == {"digits-match-spec", "one-format"}
    assert certificates.SHARD_POINTS == {o.name: dict(o.shard_points) for o in ENTRIES if o.shard_points}
    assert certificates.LAYOUT_POINTS == {o.name: o.layout_points for o in ENTRIES if o.layout_points}
    assert runner.LEMMAS == tuple(n for n in obligation("writers-cover").parts if n)
    # what the tables said before the registry (the facts a certificate's files are made of)
    assert certificates.SHARD_POINTS["writers-cover"] == {1: (("i", "d"), ("j", "e")), 2: (("i", "d"), ("j", "d")),
                                                          3: (("i", "d"),)}
    assert certificates.LAYOUT_POINTS["writers-cover"] == ("canonical", (4,), "k", "l")
    assert runner.LEMMAS == ("writers-disjoint", "shard-injective", "shard-in-range", "canonical-bijective")
    assert set(certificates.SMT_ROWS) == set(obligations.QUERIES) | {"digits-match-spec", "one-format", "page-size"}
    # each part that is a row of its own is one the registry holds
    for o in ENTRIES:
        assert all(n is None or n in REGISTRY for n in o.parts)


def test_the_registry_and_its_views_in_store_import_no_solver():
    code = "import sys\nimport layoutalg.verify.prove.store\nprint('z3' in sys.modules, 'sympy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]

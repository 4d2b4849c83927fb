"""`sequence t` is a claim the conversions across another cp rely on: it is proved (every local
token at canonical t = token(t), the grid's sequence place), refuted with a counterexample, or
unknown where the grid says nothing to check it against; never proved by default."""

import pytest

from layoutalg.dsl.library import load
from layoutalg.verify.prove.runner import Budgets, prove_obligation

from conftest import ROOT

SPECS = ROOT / "specs"


def _row(path, family):
    lib = load([path])
    return prove_obligation(lib, family, "sequence-order", {}, Budgets.of())


def _copy(tmp_path, old, new, grids=None):
    (tmp_path / "grids.lal").write_text(grids or (SPECS / "grids.lal").read_text())
    text = (SPECS / "split_nhd.lal").read_text()
    assert old in text
    (tmp_path / "f.lal").write_text(text.replace(old, new))
    return tmp_path / "f.lal"


@pytest.mark.parametrize("family", ["split_nhd", "mla"])
def test_the_shipped_token_order_is_proved(family):
    row = _row(SPECS / f"{family}.lal", family)
    assert row.status == "proved" and row.method == "symbolic: all sizes, all ranks", row


def test_canonical_tokens_in_rank_order_are_refuted(tmp_path):
    """A valid tiling (every prover row but this one proves it), but the canonical page holds
    the CP ranks' tokens one rank after another: pages of another cp would join out of order."""
    path = _copy(tmp_path, "(kv, token(t), head(h)", "(kv, cp_rank * block_size + t, head(h)")
    row = _row(path, "split_nhd")
    assert row.status == "refuted" and row.witness["dcp"] * row.witness["pcp"] > 1, row
    assert "is its place in the sequence" in row.detail and "token(" in row.detail


def test_a_grid_without_a_token_function_leaves_the_claim_unknown(tmp_path):
    grids = (SPECS / "grids.lal").read_text().replace("fn token(t) =", "fn place(t) =")
    path = _copy(tmp_path, "(kv, token(t), head(h)", "(kv, place(t), head(h)", grids)
    lib = load([path])
    from layoutalg.verify.prove.runner import safely, prove_obligation
    row = safely(path, "split_nhd", "sequence-order",  # as `prove` asks it: the reader's refusal is a row
                  lambda: prove_obligation(lib, "split_nhd", "sequence-order", {}, Budgets.of()))
    assert row.status == "unknown" and "fn token" in row.detail
    disjoint = prove_obligation(lib, "split_nhd", "writers-disjoint", {}, Budgets.of())
    assert disjoint.status == "proved"   # the rest of the family is still proved (the whole: `prove`)

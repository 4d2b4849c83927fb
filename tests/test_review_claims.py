"""Sixth review, fixed: claims "proved" that checked nothing or were false. A `sequence t`
claim whose token fn is never exact, or divides an index, or that Z3 leaves undecided; an
`agnostic` claim whose guards rename the canonical layout's sizes. Each spec in
`tests/data/review/` says what it does; each test fails on the prover before the fix."""
import subprocess
import sys

import pytest

from layoutalg.compile import compile_family
from layoutalg.errors import SpecError
from layoutalg.family import resolve
from layoutalg.library import load
from layoutalg.prove.runner import prove_family

from conftest import ROOT

REVIEW = ROOT / "tests/data/review"


def _rows(name, family):
    return {r.obligation: r for r in prove_family(load([REVIEW / f"{name}.lal"]), family)}


def test_a_token_fn_never_exact_leaves_the_family_applying_nowhere():
    rows = _rows("token_never_exact", "chunked")
    assert rows["page-size"].status == "refuted"
    assert "token fn of its `sequence` claim) is never exact" in rows["page-size"].detail
    assert not [n for n, r in rows.items() if r.status == "proved"], {n: r.status for n, r in rows.items()}


def test_a_token_fn_dividing_an_index_is_a_spec_error_with_its_place():
    with pytest.raises(SpecError) as e:
        resolve(load([REVIEW / "token_divides.lal"]), "divided")
    assert "'/' divides sizes exactly" in e.value.message
    assert e.value.span.line == 13 and "token_divides.lal" in e.value.span.file
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "check", REVIEW / "token_divides.lal"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "token_divides.lal:13:21:" in proc.stdout + proc.stderr


def test_an_obligation_undecided_for_all_sizes_is_unknown_though_every_sample_holds():
    """False at q = 162690 (pcp=2, interleave=2); every sampled configuration holds."""
    rows = _rows("knob_token", "knobbed")
    seq = rows["sequence-order"]
    assert seq.status == "unknown", (seq.status, seq.method)
    assert seq.configurations and "shows nothing of the others" in seq.detail


def test_guards_that_rename_the_canonical_sizes_back_no_agnostic_claim():
    """tp=1 and tp=2 of total_heads=8 put engine head 1 in slot 1 and slot 2 under one format id."""
    lib = load([REVIEW / "product_heads.lal"])
    assert not compile_family(resolve(lib, "product")).claims_agnostic
    rows = [r for r in prove_family(lib, "product") if r.obligation == "agnostic"]
    assert rows and all(r.status == "unknown" for r in rows), [(r.status, r.detail) for r in rows]
    assert "reads g, w, which the canonical layout is not built from" in rows[0].detail

"""A slice of the mutation soundness run (`python tests/mutants/soundness.py` runs more):
a mutant whose emitted runs do not tile, or disagree with the spec, is never proved."""
import re
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "mutants"))
import soundness  # noqa: E402

SLICE = list(soundness.mutants(10, seed=20261129))


@pytest.fixture(scope="module")
def verdicts():
    with tempfile.TemporaryDirectory() as tmp:
        return [(family, what, soundness.judge(text, family, Path(tmp))) for family, what, text in SLICE]


def test_no_broken_mutant_is_proved(verdicts):
    judged = [(f, w, r) for f, w, r in verdicts if r is not None]
    broken = [(f, w, r) for f, w, r in judged if r["faults"]]
    assert len(judged) >= 5 and broken, "the slice must hold well-formed and broken mutants to mean anything"
    unsound = [(f, w, r["faults"][0]) for f, w, r in broken if r["verdict"] == "proved"]
    assert not unsound, unsound


def test_most_broken_mutants_are_refuted(verdicts):
    broken = [r for _, _, r in verdicts if r is not None and r["faults"]]
    assert sum(r["verdict"] == "refuted" for r in broken) >= 0.8 * len(broken)


def test_a_refutation_names_a_spec_line(verdicts):
    for _, _, r in verdicts:
        if r is not None and r["verdict"] == "refuted":
            detail = next(x.detail for x in r["rows"] if x.status == "refuted")
            assert re.match(r"^\S+\.lal:\d+: ", detail), detail


def test_the_mutator_is_seeded():
    again = list(soundness.mutants(10, seed=20261129))
    assert [w for _, w, _ in again] == [w for _, w, _ in SLICE]

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

SEED, WANT = 20261129, 2
"""The slice: the first WANT well-formed mutants of this seed."""


@pytest.fixture(scope="module")
def verdicts():
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for family, what, text in soundness.mutants(60, seed=SEED):
            res = soundness.judge(text, family, Path(tmp))
            if res is not None:
                out.append((family, what, res))
            if len(out) == WANT:
                break
    return out


def test_no_broken_mutant_is_proved(verdicts):
    broken = [(f, w, r) for f, w, r in verdicts if r["faults"]]
    assert len(verdicts) == WANT and broken, "the slice must hold well-formed and broken mutants to mean anything"
    unsound = [(f, w, r["faults"][0]) for f, w, r in broken if r["verdict"] == "proved"]
    assert not unsound, unsound


def test_most_broken_mutants_are_refuted(verdicts):
    broken = [r for _, _, r in verdicts if r["faults"]]
    assert sum(r["verdict"] == "refuted" for r in broken) >= 0.8 * len(broken)


def test_a_refutation_names_a_spec_line(verdicts):
    for _, _, r in verdicts:
        if r["verdict"] == "refuted":
            detail = next(x.detail for x in r["rows"] if x.status == "refuted")
            assert re.match(r"^\S+\.lal:\d+: ", detail), detail


def test_the_mutator_is_seeded():
    assert [w for _, w, _ in soundness.mutants(10, SEED)] == [w for _, w, _ in soundness.mutants(10, SEED)]


def test_no_broken_grid_mutant_is_proved():
    """A slice of `soundness.py --grids`: one-token edits of the grid or rules a family reads in
    the shared grids.lal, judged by the runs' enumeration and by `check` (which samples the
    declared names, pcp_replicas among them)."""
    seen, broken = 0, []
    with tempfile.TemporaryDirectory() as tmp:
        # seed 8's first well-formed mutant edits the rules grids share (`cp = dcp + 1` in cp_tokens)
        for family, what, text in soundness.mutants(10, seed=8, families=("split_nhd",), grids=Path(tmp)):
            res = soundness.judge(text, family, Path(tmp))
            if res is None:
                continue
            seen += 1
            if res["faults"]:
                broken.append((family, what, res["verdict"], res["faults"][0]))
                break
    assert broken, f"no broken mutant among {seen} well-formed grid mutants: the slice shows nothing"
    assert all(v != "proved" for _, _, v, _ in broken), broken

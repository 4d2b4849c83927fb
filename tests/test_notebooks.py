"""Every notebook runs top to bottom (its cells assert what they show)."""
from pathlib import Path

import pytest

from layoutalg.notebook import run

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    outputs = run(path, write=False)
    assert any("certified split_nhd" in o for o in outputs) or path.name != "01_tour.ipynb"


def test_there_is_a_tour():
    assert Path(ROOT / "notebooks" / "01_tour.ipynb") in NOTEBOOKS

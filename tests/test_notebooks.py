"""Every notebook runs top to bottom on a real Jupyter kernel (nbclient; its cells assert what
they show), and its pictures are real cell outputs."""
from pathlib import Path

import nbformat
import pytest

from layoutalg.notebook import run

from conftest import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SHOWS = {"01_tour.ipynb": ["certified split_nhd"],
         "02_author_a_family.ipynb": ["writers-disjoint   refuted", "both write canonical byte",
                                      "32 cells with two writers", "tp=2 -> tp=4: every byte in place"],
         "03_reshard.ipynb": ["4 of 4 consumer ranks hold every byte", "reshard-match proved",
                              "direct plan: every byte in place", "refused: direct reshard",
                              "2 pages of 1024 bytes are one of 2048, along 't'", "4 passed, 0 failed"]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_on_a_kernel(path):
    text = "".join(run(path, write=False))
    for shown in SHOWS[path.name]:
        assert shown in text, (path.name, shown)


def test_every_notebook_is_named_here_and_the_pictures_are_stored():
    assert {p.name for p in NOTEBOOKS} == set(SHOWS)
    for name in ("02_author_a_family.ipynb", "03_reshard.ipynb"):
        nb = nbformat.read(str(ROOT / "notebooks" / name), as_version=4)
        assert any("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_a_cell_that_raises_fails_the_run(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("assert 1 == 2, 'shown wrong'")],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    path = tmp_path / "bad.ipynb"
    nbformat.write(nb, str(path))
    with pytest.raises(Exception, match="shown wrong"):
        run(path, write=False)
    assert Path(path).exists()

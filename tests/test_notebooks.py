"""Every notebook runs top to bottom on a real Jupyter kernel (nbclient; its cells assert what
they show), and its pictures are real cell outputs."""
from pathlib import Path

import nbformat
import pytest

from layoutalg.tools.notebook import run

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


def notebook(folder, source: str):
    """A notebook of one code cell, written to `folder`."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    path = folder / "n.ipynb"
    nbformat.write(nb, str(path))
    return path


def test_a_cell_that_raises_fails_the_run(tmp_path):
    path = notebook(tmp_path, "assert 1 == 2, 'shown wrong'")
    with pytest.raises(Exception, match="shown wrong"):
        run(path, write=False)
    assert Path(path).exists()


def test_the_runner_writes_nothing_unless_asked(tmp_path):
    import subprocess
    import sys
    path = notebook(tmp_path, "print(6 * 7)")
    before = path.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "layoutalg.tools.notebook", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0 and path.read_bytes() == before, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "layoutalg.tools.notebook", "--inplace", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "42" in "".join(o.get("text", "") for o in nbformat.read(str(path), as_version=4).cells[0].outputs)
    proc = subprocess.run([sys.executable, "-m", "layoutalg.tools.notebook", str(tmp_path / "missing.ipynb")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and len(proc.stderr.splitlines()) == 1

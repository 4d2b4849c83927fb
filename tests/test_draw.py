"""`layoutalg draw`: who writes which bytes, as a picture; the owners it draws are the runs'."""
import subprocess
import sys

import pytest

from layoutalg.draw import cell_bytes, draw, exact, owners
from layoutalg.errors import LayoutalgError

from conftest import ROOT
from test_reshard import _group



@pytest.mark.parametrize("config, writers", [("tp=4", 4), ("tp=8", 4), ("tp=8,dcp=2", 8)])
def test_every_canonical_byte_has_one_writer_and_replicas_are_marked(config, writers):
    g = _group("split_nhd", 4, config)
    writer, holders, local = owners(g.mappings)
    assert -1 not in writer and len(set(writer)) == writers
    assert set(writer) == {r for r, m in enumerate(g.mappings) if m.is_writer(0)}
    replicated = g.world // writers
    assert set(holders) == {replicated}
    for rank, here in enumerate(local):          # each local byte names a canonical byte its rank holds
        assert -1 not in here and len(set(here)) == len(here)


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_draw_writes_the_picture(tmp_path, suffix):
    g = _group("split_hnd", 4, "tp=8")
    out = tmp_path / f"page.{suffix}"
    line = draw(g.mappings, str(out), "split_hnd tp=8")
    assert out.stat().st_size > 1000 and "8 local pages" in line
    assert exact(g.mappings, cell_bytes(g.mappings))
    if suffix == "svg":
        assert "rank 0 writes" in out.read_text() and "held by more than one rank" in out.read_text()


def test_draw_refuses_what_it_cannot_draw(tmp_path):
    with pytest.raises(LayoutalgError, match=r"\.svg or \.png"):
        draw(_group("mla", 1, "tp=2").mappings, str(tmp_path / "page.pdf"))
    with pytest.raises(LayoutalgError, match="no rank mapping"):
        draw([], str(tmp_path / "page.png"))


def test_draw_command(tmp_path):
    out = tmp_path / "p.png"
    ok = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "--tp", "2", "--heads", "4",
                         "--block-size", "4", "--head-size", "16", "-o", str(out)], capture_output=True, text=True,
                        cwd=ROOT)
    assert ok.returncode == 0 and out.exists(), ok.stderr
    bad = subprocess.run([sys.executable, "-m", "layoutalg", "draw", "specs/split_nhd.lal", "--tp", "3", "--heads", "4",
                          "-o", str(tmp_path / "q.png")], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 1 and "does not apply" in bad.stdout and not (tmp_path / "q.png").exists()

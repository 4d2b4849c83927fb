"""Bad specs get a clear error naming file, line and column with a caret; never a traceback."""
import subprocess
import sys

import pytest

from layoutalg.errors import SpecError
from layoutalg.family import check_layouts, resolve
from layoutalg.library import load

from conftest import ROOT

GRIDS = (ROOT / "specs" / "grids.lal").read_text()


def error_of(tmp_path, text: str, name: str = "bad.lal") -> SpecError:
    (tmp_path / "grids.lal").write_text(GRIDS)
    (tmp_path / name).write_text(text)
    with pytest.raises(SpecError) as info:
        lib = load([tmp_path / name])
        check_layouts(lib)
        for f in lib.families:
            resolve(lib, f)
    return info.value


CASES = [
    ("layout a(T):\n    index t < T\n    offset t +\n", 3, 15, "expected"),
    ("layout a(T):\n    index t < T\n    offset Q * t\n", 3, 12, "unknown name 'Q'"),
    ("layout a(T):\n    index t < T, t < 4\n    offset t\n", 2, 18, "declared twice"),
    ("layout a(T):\n    index t < T, s < 2\n    offset t * s\n", 3, 12, "not affine"),
    ("layout a(T):\n    index t < 2.5\n    offset t\n", 2, 15, "must be an integer, not 2.5"),
    ("layout a(T):\n    index t < T\n      offset t\n", 3, 7, "unexpected indentation"),
    ("layout a(T):\n    index t < T\n", 1, 1, "no 'offset' clause"),
    ("layout a(T):\n    index t < T\n    offset t // 2\n", 1, 1, "affine in whole indices"),
    ("layout a(T):\n    index t < T\n    offset t\n    tensor (block, s)\n", 4, 20, "not an index"),
    ('import "nope.lal"\n', 1, 1, "not found"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T, s < 2\n    offset t + T * s\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t, s) -> (t, t)\n', 9, 5, "index 't' is used twice by the shard map"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid nosuch\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t) -> (t)\n', 6, 10, "unknown grid 'nosuch'; known: heads, latent, private"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size * 2)\n'
     '    shard (t) -> (t // 2)\n', 9, 5, "digits of 't' that overlap or leave a gap"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t) -> (t, t)\n', 9, 5, "gives 2 canonical indices"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves fallback:\n    grid private\n    local a(page_size)\n    canonical a(page_sise)\n'
     '    shard (t) -> (t)\n', 8, 17, "unknown name 'page_sise'"),
    ('import "grids.lal"\nlayout a(T):\n    index t < T\n    offset t\n'
     'family f serves everything:\n    grid private\n    local a(page_size)\n    canonical a(page_size)\n'
     '    shard (t) -> (t)\n', 5, 1, "serves one of attention, mla, fallback"),
]


@pytest.mark.parametrize("text,line,column,message", CASES)
def test_error_points_at_the_problem(tmp_path, text, line, column, message):
    e = error_of(tmp_path, text)
    assert message in e.message
    assert (e.span.line, e.span.column) == (line, column)
    rendered = str(e).splitlines()
    assert rendered[0].startswith(f"{tmp_path / 'bad.lal'}:{line}:{column}: ")
    assert rendered[-1] == " " * (column - 1) + "^"


def test_cli_reports_errors_without_traceback(tmp_path):
    (tmp_path / "bad.lal").write_text("layout a(T):\n    index t < T\n    offset Q * t\n")
    proc = subprocess.run([sys.executable, "-m", "layoutalg.cli", "check", str(tmp_path / "bad.lal")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert f"{tmp_path / 'bad.lal'}:3:12: unknown name 'Q'" in proc.stderr
    assert proc.stderr.rstrip().endswith("^")

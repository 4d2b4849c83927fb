"""The library's figures in the docs are a script's (`benchmarks/library.py --write`), and name
every shipped family: a family added without a fresh run shows here."""
import re

from conftest import ROOT
from layoutalg.dsl.library import load_default

BEGIN, END = "<!-- library: begin (benchmarks/library.py --write) -->", "<!-- library: end -->"


def _block(name: str) -> str:
    text = (ROOT / "docs" / name).read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"docs/{name}: the script's marks"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def test_the_figures_name_every_shipped_family():
    families = set(load_default().families)
    table = set(re.findall(r"^\| (\w+) \| (?:proved|refuted|unknown) \|", _block("benchmarks.md"), re.M))
    assert table == families
    said = re.search(r"over (\d+) families", _block("proofs.md"))
    assert said and int(said.group(1)) == len(families)
    assert "0 refuted, 0 unknown" in _block("proofs.md")

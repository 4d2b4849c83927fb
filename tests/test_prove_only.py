"""`prove_family(..., only=...)` and `layoutalg prove --obligation`: the rows named, each as the
whole table asks it, with page-size and what a row rests on; never cached."""
import pytest

from conftest import ROOT
from layoutalg.cli import main
from layoutalg.dsl.library import load
from layoutalg.verify.prove.runner import prove_family


def _key(r):
    return r.family, r.obligation, r.status, r.method


def test_the_rows_named_are_the_whole_tables_rows():
    lib = load([ROOT / "specs" / "mla.lal"])
    whole = {(r.family, r.obligation): _key(r) for r in prove_family(lib, "mla")}
    some = prove_family(lib, "mla", only={"writers-cover", "one-format"})
    assert [r.obligation for r in some] == ["page-size", "writers-cover", "one-format"]
    assert all(_key(r) == whole[r.family, r.obligation] for r in some)


def test_a_pages_tiling_row_brings_the_digit_tables_it_rests_on():
    lib = load([ROOT / "specs" / "mamba2.lal"])
    rows = prove_family(lib, "mamba2", only={"regions-tile-local"})
    names = {r.obligation for r in rows}
    assert names == {"page-size", "digits-match-spec", "regions-tile-local"}, names
    assert {r.family for r in rows if r.obligation == "digits-match-spec"} >= {"mamba2.x", "mamba2.tail'"}
    assert all(r.status == "proved" for r in rows)
    claims = prove_family(lib, "mamba2", only={"one-format"})  # the canonical pad's claim too
    assert {r.obligation for r in claims} == {"page-size", "one-format"} and \
        "mamba2.tail'" in {r.family for r in claims if r.obligation == "one-format"}


def test_the_command_proves_the_rows_named_and_caches_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    assert main(["prove", str(ROOT / "specs" / "mla.lal"), "--obligation", "shard-injective", "--jobs", "1"]) == 0
    text = capsys.readouterr().out
    assert "2 obligations: 2 proved for all sizes" in text and "shard-injective" in text and "writers-cover" not in text
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*")), \
        list((tmp_path / "cache").rglob("*"))  # (no table, and no conversion record resting on one)


@pytest.mark.parametrize("args, said", [
    (["--obligation", "writer-cover"], "no obligation 'writer-cover'; a library's: structure, page-size"),
    (["--obligation", "writers-cover", "--reshard", "tp=1", "tp=2"], "--reshard and --pipeline prove rows of their own"),
])
def test_an_obligation_misnamed_or_beside_a_reshard_is_refused(args, said, capsys):
    assert main(["prove", str(ROOT / "specs" / "mla.lal"), *args]) == 2
    assert said in capsys.readouterr().err


def test_a_row_no_family_here_has_is_an_error_not_a_pass(capsys):
    """mla is no page of regions: it has no regions-tile row, and asking for one checks nothing."""
    assert main(["prove", str(ROOT / "specs" / "mla.lal"), "--obligation", "regions-tile-local", "--no-cache"]) == 2
    assert "prove --obligation regions-tile-local: no family proved here has that row" in capsys.readouterr().err

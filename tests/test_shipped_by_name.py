"""The shipped library from any folder: `import "grids.lal"` finds the user's own file first,
then the shipped one; `layoutalg/NAME` is always the shipped one; the same definitions read
from two copies are one definition; `layoutalg specs` says where the shipped files are and
`prove --family` proves one shipped family."""
import shutil

import pytest

from layoutalg.dsl.library import load
from layoutalg.errors import SpecError
from layoutalg.runtime.derive import Deriver

from conftest import ROOT
from test_cli import run

SPECS = ROOT / "specs"


def _own(folder, name, imports='"grids.lal"'):
    folder.mkdir(exist_ok=True)
    text = (SPECS / "split_nhd.lal").read_text().replace('"grids.lal"', imports)
    text = text.replace("family split_nhd serves attention, before split_hnd:", f"family {name} serves attention:")
    (folder / "mine.lal").write_text(text)
    return folder / "mine.lal"


def test_a_users_folder_imports_the_shipped_grids_without_a_copy(tmp_path):
    lib = load([_own(tmp_path / "a", "mine")])
    assert "heads" in lib.grids and str(lib.grids["heads"].span.file).startswith(str(SPECS.resolve()))
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    import torch
    kv = torch.empty(2, 2, 4, 1, 8, dtype=torch.bfloat16)
    res = Deriver(str(tmp_path / "a")).derive(LayerSpec("attention", 128, 4, 1, 8, 2), TensorLayout.of(kv),
                                              ParallelConfig(2, 2), 2)
    assert res.result == "certified" and res.family == "mine", res


def test_two_folders_check_together_and_copies_are_one_definition(tmp_path):
    a, b = _own(tmp_path / "a", "mine_a"), _own(tmp_path / "b", "mine_b")
    shutil.copy(SPECS / "grids.lal", tmp_path / "b" / "grids.lal")  # b brings a copy of its own
    lib = load([a, b])  # (was: "'heads' is already defined at .../grids.lal", before `check` read a byte)
    assert {"mine_a", "mine_b"} <= set(lib.families) and len(lib.grids) == 3


def test_a_different_definition_of_one_name_is_still_an_error(tmp_path):
    a, b = _own(tmp_path / "a", "mine_a"), _own(tmp_path / "b", "mine_b")
    grids = (SPECS / "grids.lal").read_text().replace("fn head(h) = head_shard * heads + h",
                                                        "fn head(h) = h * shards + head_shard")
    (tmp_path / "b" / "grids.lal").write_text(grids)
    with pytest.raises(SpecError, match="'heads' is already defined at"):
        load([a, b])


def test_the_shipped_prefix_names_the_shipped_file_whatever_the_folder_holds(tmp_path):
    spec = _own(tmp_path / "a", "mine", imports='"layoutalg/grids.lal"')
    (tmp_path / "a" / "grids.lal").write_text("# not the grids\n")
    lib = load([spec])
    assert "heads" in lib.grids
    (tmp_path / "a" / "other.lal").write_text('import "nowhere.lal"\n')
    with pytest.raises(SpecError, match="'nowhere.lal' not found .*nor in the shipped library"):
        load([tmp_path / "a" / "other.lal"])


def test_the_specs_command_and_one_shipped_familys_proof():
    where = run("specs", "--where")
    assert where.returncode == 0 and (ROOT / "specs").resolve() == __import__("pathlib").Path(
        where.stdout.strip()).resolve()
    assert 'import "grids.lal"' in run("specs").stdout
    out = run("prove", "--family", "opaque", "--jobs", "1")
    assert out.returncode == 0 and " opaque " in out.stdout and "split_nhd" not in out.stdout, out.stdout + out.stderr
    wrong = run("prove", "--family", "nothing", "--jobs", "1")
    assert wrong.returncode == 2 and "no family 'nothing'" in wrong.stderr


def test_the_shipped_prefix_cannot_leave_the_shipped_folder(tmp_path):
    (tmp_path / "evil.lal").write_text('param evil in 0 .. 1 default 0 "x"\n')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "a.lal").write_text(f'import "layoutalg/{"../" * 12}{str(tmp_path / "evil.lal").lstrip("/")}"\n')
    with pytest.raises(SpecError, match="leaves the shipped library"):
        load([tmp_path / "a" / "a.lal"])


def test_a_folder_that_gains_its_own_file_is_never_served_the_shipped_one(tmp_path, monkeypatch):
    """Folder y imports x's spec, whose `import "grids.lal"` the shipped library answered: a
    grids.lal written into x later is another source, in this process and the next (the
    library is never cached on disk while it rests on a file's absence)."""
    from layoutalg.dsl.library import load_default
    from layoutalg.runtime.derive import compiled_library, forget_compiled
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    shutil.copy(SPECS / "split_nhd.lal", tmp_path / "x" / "split_nhd.lal")
    (tmp_path / "y" / "use.lal").write_text('import "../x/split_nhd.lal"\n')
    first = compiled_library(str(tmp_path / "y"))["split_nhd"].to_json()
    assert load_default(tmp_path / "y") is load_default(tmp_path / "y")  # (served again while nothing changes)
    (tmp_path / "x" / "grids.lal").write_text((SPECS / "grids.lal").read_text().replace(
        "fn head(h) = head_shard * heads + h", "fn head(h) = h * shards + head_shard"))
    assert str(load_default(tmp_path / "y").grids["heads"].span.file) == str(tmp_path / "x" / "grids.lal")
    assert compiled_library(str(tmp_path / "y"))["split_nhd"].to_json() != first
    forget_compiled()
    assert compiled_library(str(tmp_path / "y"))["split_nhd"].to_json() != first  # as a fresh process


def test_a_spec_argument_not_here_is_the_shipped_librarys(tmp_path, monkeypatch):
    """The examples of `--help` and the README name `specs/...`: from any folder (an installed
    wheel's user has no specs/ folder) they read the shipped files; a file of the user's own of
    that name comes first, and a name neither has is left for the command to refuse."""
    from layoutalg.resources import specs_dir
    from layoutalg.cli.specs import spec_path
    monkeypatch.chdir(tmp_path)
    assert spec_path("specs/split_nhd.lal") == str(specs_dir() / "split_nhd.lal")
    assert spec_path("split_nhd.lal") == str(specs_dir() / "split_nhd.lal")
    assert spec_path("specs/") == str(specs_dir())
    (tmp_path / "split_nhd.lal").write_text("# mine\n")
    assert spec_path("split_nhd.lal") == "split_nhd.lal"
    assert spec_path("nothere.lal") == "nothere.lal" and spec_path("specs/../x.lal") == "specs/../x.lal"

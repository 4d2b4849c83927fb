"""The precompiled cache is a trust boundary: what enters it is checked, and only what is inside it runs.

A library is written to it only if every family's source has exactly the shape compile.py
prints; a file whose checksum does not match its content is ignored; a cache folder or file
that another user can write is neither read nor written. Source handed in as data anywhere
else (`CompiledFamily.from_json`) is checked before it runs. A folder's index finds its entry
by the times of the files it was made from, and never past an edit.
"""
import logging
import marshal
import os
from pathlib import Path

import pytest

from layoutalg.compile import cache
from layoutalg.compile.codegen import compile_family, compile_named
from layoutalg.compile.compiled import CompiledFamily, valid_entry, valid_json
from layoutalg.compile.whitelist import UnsafeSource, check_source
from layoutalg.ir.family import resolve
from layoutalg.dsl.library import load
from layoutalg.runtime.derive import Deriver, compiled_library, forget_compiled
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

from conftest import ROOT

SPLIT_NHD = compile_family(resolve(load([ROOT / "specs" / "split_nhd.lal"]), "split_nhd"))


def layer():
    """An 8-head split-NHD layer on tp=2: certified by split_nhd, 2 ranks."""
    spec = LayerSpec("attention", 2 * 16 * 4 * 128 * 2, block_size=16, num_kv_heads=4, head_size=128, dtype_bytes=2)
    tensor = TensorLayout((10, 2, 16, 4, 128), (16384, 8192, 512, 128, 1), 2)
    return spec, tensor, ParallelConfig(tp=2, total_kv_heads=8)


@pytest.fixture(scope="session")
def lib(tmp_path_factory):
    """A library of the two split families (and the grids they import): what these tests
    damage and recompile is any library's entry, and this one compiles in a second, not 11."""
    folder = tmp_path_factory.mktemp("lib")
    for name in ("grids", "split_nhd", "split_hnd"):
        (folder / f"{name}.lal").write_bytes((ROOT / "specs" / f"{name}.lal").read_bytes())
    return str(folder)


@pytest.fixture(scope="session")
def stored_entry(tmp_path_factory, lib):
    """(name, bytes) of the library's entry as the cache writes it: compiled once, not per test."""
    folder = tmp_path_factory.mktemp("template") / "cache"
    old = os.environ.get("LAYOUTALG_CACHE")
    os.environ["LAYOUTALG_CACHE"] = str(folder)
    try:
        forget_compiled()
        compiled_library(lib)
        (p,) = folder.glob("library-*.bin")
        return p.name, p.read_bytes()
    finally:
        forget_compiled()
        if old is None:
            del os.environ["LAYOUTALG_CACHE"]
        else:
            os.environ["LAYOUTALG_CACHE"] = old


@pytest.fixture
def empty_cache_folder(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("LAYOUTALG_CACHE", str(folder))
    monkeypatch.setattr(cache, "_warned", set())
    # an index is written only for files older than its time: layoutalg's own sources count, and
    # in a working tree they may be seconds old, so the index's clock is an hour ahead here
    monkeypatch.setattr(cache, "clock", lambda: __import__("time").time_ns() + 3_600 * 10**9)
    forget_compiled()
    yield folder
    forget_compiled()


@pytest.fixture
def cache_folder(empty_cache_folder, stored_entry):
    """A private cache folder holding the entry compiled_library() would have stored there."""
    empty_cache_folder.mkdir(mode=0o700)
    name, data = stored_entry
    (empty_cache_folder / name).write_bytes(data)
    (empty_cache_folder / name).chmod(0o600)
    return empty_cache_folder


def entry_path(folder: Path) -> Path:
    (p,) = folder.glob("library-*.bin")
    return p


def rewrite(p: Path, edit, fix_digest: bool = True) -> None:
    """Edit the data of an entry as an attacker would: with the checksum recomputed to match."""
    raw = p.read_bytes()
    entry = cache.read_file(p)
    edit(entry["data"])
    if fix_digest:
        cache.write_file(p, entry)
    else:  # the checksum of the entry as it was
        n = len(cache._MAGIC)
        p.write_bytes(raw[:n + 4] + marshal.dumps(entry))


def derive_fresh(lib):
    forget_compiled()
    return Deriver(lib).derive(*layer())


def family_of(data, name):
    return next(d for d in data if d["name"] == name)


# ---- (a) only the shape compile.py prints is ever executed ------------------------------

PAYLOADS = {
    "module-level import": lambda src, m: f"import os\nos.system('touch {m}')\n" + src,
    "__import__ in a guard": lambda src, m: src.replace(
        "    if not", f"    if not __import__('os').system('touch {m}'): return None\n    if not", 1),
    "open() in a guard": lambda src, m: src.replace(
        "    if not", f"    if not open('{m}', 'w').write('x'): return None\n    if not", 1),
    "default argument": lambda src, m: src.replace("def _variant_0(P):", f"def _variant_0(P, _=open('{m}', 'w')):"),
    "decorator": lambda src, m: src.replace("def _variant_0(P):", f"@(lambda f: open('{m}', 'w') and f)\n"
                                                                   "def _variant_0(P):"),
    "attribute walk": lambda src, m: src.replace(
        "    if not", "    if not tp.__class__.__mro__[1].__subclasses__(): return None\n    if not", 1),
    "statement in the body": lambda src, m: src.replace("    if not", f"    open('{m}', 'w')\n    if not", 1),
}


def with_source(family: dict, source: str) -> None:
    """Give a family entry another source and the bytecode of that source, as a writer would."""
    family["source"] = source
    family["code"] = marshal.dumps(compile(source, "<edited>", "exec"))


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_an_entry_the_whitelist_refuses_is_never_stored(empty_cache_folder, tmp_path, payload, lib):
    marker = tmp_path / "pwned"
    compiled_library(lib)  # compiles and stores the clean entry
    p = entry_path(empty_cache_folder)
    entry, clean = cache.read_file(p), cache.read_file(p)["data"]
    data = entry["data"]
    with_source(family_of(data, "split_nhd"), PAYLOADS[payload](family_of(data, "split_nhd")["source"], marker))
    p.unlink()
    cache.store("library", entry["key"], entry["files"], data)
    assert list(empty_cache_folder.glob("library-*.bin")) == []  # refused at the boundary
    assert not marker.exists()
    cache.store("library", entry["key"], entry["files"], clean)
    assert entry_path(empty_cache_folder).exists()  # the control: the clean data is stored


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_compiled_family_refuses_unsafe_source_before_running_it(tmp_path, payload):
    marker = tmp_path / "pwned"
    d = SPLIT_NHD.to_json()
    d["source"] = PAYLOADS[payload](d["source"], marker)
    assert not valid_json(d)
    with pytest.raises(UnsafeSource):
        CompiledFamily.from_json(d)
    assert not marker.exists()


def edit(old: str, new: str):
    def apply(src):
        assert old in src
        return src.replace(old, new, 1)
    return apply


# each is one small step away from what compile.py prints; every one is refused
REFUSED = {
    "dunder key": edit("tp = P['tp']", "tp = P['__class__']"),
    "unknown runtime name": edit("tp = P['tp']", "tq = P['tq']"),
    "name bound twice": edit("pcp = P['pcp']", "tp = P['tp']"),
    "other call": edit("_mod(total_heads, tp, 0)", "eval('1')"),
    "helper with 2 arguments": edit("_mod(total_heads, tp, 0)", "_mod(total_heads, tp)"),
    "atom index out of range": edit("_mod(total_heads, tp, 0)", "_mod(total_heads, tp, 99)"),
    "guard index out of range": edit("raise _Guard(0, 0)", "raise _Guard(0, 99)"),
    "guard of another variant": edit("raise _Guard(0, 0)", "raise _Guard(1, 0)"),
    "huge exponent": edit("(total_heads >= tp)", "(total_heads ** 99999 >= tp)"),
    "string in a guard": edit("(total_heads >= tp)", "('a' == 'a')"),
    "subscript in a guard": edit("(total_heads >= tp)", "(P['tp'] >= tp)"),
    "lambda": edit("(total_heads >= tp)", "(lambda: 1)()"),
    "comprehension": edit("(total_heads >= tp)", "[x for x in ()]"),
    "walrus": edit("(total_heads >= tp)", "(x := 1)"),
    "unbound name": edit("(total_heads >= tp)", "(__builtins__ >= tp)"),
    "loop": edit("    if not (total_heads >= tp): return None", "    while True: pass"),
    "else branch": edit("    if not (total_heads >= tp): return None",
                        "    if not (total_heads >= tp): return None\n    else: return None"),
    "keyword argument": edit("return _Instance('split_nhd', ", "return _Instance(family='split_nhd', local="),
    "renamed function": edit("def _variant_0(P):", "def _variant_9(P):"),
    "two parameters": edit("def _variant_0(P):", "def _variant_0(P, Q):"),
    "async def": edit("def _variant_0(P):", "async def _variant_0(P):"),
    "null byte": edit("tp = P['tp']", "tp = P['tp']\0"),
    "does not parse": edit("def _variant_0(P):", "def _variant_0(P)"),
}


def test_the_unedited_source_is_accepted():
    guards = tuple(len(g) for g in SPLIT_NHD.guards)
    check_source(SPLIT_NHD.source, guards, len(SPLIT_NHD.atoms))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_whitelist_refuses(name):
    guards = tuple(len(g) for g in SPLIT_NHD.guards)
    with pytest.raises(UnsafeSource):
        check_source(REFUSED[name](SPLIT_NHD.source), guards, len(SPLIT_NHD.atoms))


MUTANT_SPECS = sorted((ROOT / "tests" / "mutants").rglob("*.lal"))
SOME_MUTANTS = MUTANT_SPECS if os.environ.get("LAYOUTALG_FULL") == "1" else MUTANT_SPECS[::4]
"""Every fourth mutant and equivalent spec in the suite (their shapes: a region, a gap, a swap),
all of them with `LAYOUTALG_FULL=1`; the shipped specs always."""


def every_compiled_family():
    for spec in [ROOT / "specs"] + SOME_MUTANTS:
        lib = load([spec])
        for name in lib.families:
            if Path(lib.families[name].span.file).parent == spec.parent or spec.is_dir():
                for part in lib.parts_of(name, pads=True):  # each region of a page is compiled on its own
                    yield f"{spec.name}:{part}", compile_family(resolve(lib, part))


def test_compile_output_always_passes_the_whitelist():
    seen = 0
    for where, cf in every_compiled_family():
        assert valid_json(cache._plain(cf.to_json())), where  # as the cache holds it
        seen += 1
    pages = [compile_named(load([ROOT / "specs"]), n) for n in ("mamba2", "quant_packed")]
    assert all(valid_entry(cache._plain(p.to_json())) for p in pages)
    assert not valid_entry({**pages[0].to_json(), "parts": []})  # a page of no region is not an entry
    assert seen >= 19 + len(SOME_MUTANTS)  # the shipped families' parts, and each mutant's own family


def test_compiled_code_sees_no_builtins():
    assert all(fn.__globals__["__builtins__"] == {} for fn in SPLIT_NHD._variants)


# ---- integrity: a corrupted entry is ignored, not half used -----------------------------


def change_a_stride(data):
    """An edit the whitelist allows, so that only the digest can catch it."""
    family = family_of(data, "split_nhd")
    old, new = "(head_size, dtype_bytes, dtype_bytes, )", "(head_size, dtype_bytes, 3, )"
    assert old in family["source"]
    with_source(family, family["source"].replace(old, new))


def test_an_entry_runs_its_bytecode_without_parsing_its_source_again(cache_folder, lib, monkeypatch):
    from layoutalg.compile import whitelist
    compiled_library(lib)
    monkeypatch.setattr(whitelist, "check_source", lambda *a: pytest.fail("the source was parsed again"))
    whitelist._checked_code.cache_clear()  # (this process admitted the source when it compiled the library)
    assert derive_fresh(lib).result == "certified"


def test_an_entry_of_another_form_is_compiled_again(cache_folder, lib):
    """A digest-valid entry whose families lack a field (written by another layoutalg the key did
    not tell apart) is not half used: the library is compiled and stored again."""
    compiled_library(lib)
    rewrite(entry_path(cache_folder), lambda data: family_of(data, "split_nhd").pop("atoms"))
    assert cache.load("library", Path(lib))[1] is None
    assert derive_fresh(lib).result == "certified"
    stored = cache.read_file(entry_path(cache_folder))["data"]
    assert "atoms" in family_of(stored, "split_nhd")


def test_the_bytecode_stored_is_compiled_from_the_admitted_source_never_taken_as_given(empty_cache_folder, tmp_path,
                                                                                         lib):
    """A writer that hands `store` a clean source with other bytecode beside it gets the bytecode
    of the source: only what passed the whitelist is ever run."""
    marker = tmp_path / "pwned"
    compiled_library(lib)
    p = entry_path(empty_cache_folder)
    entry = cache.read_file(p)
    data = entry["data"]
    family = family_of(data, "split_nhd")
    clean = family["source"]
    with_source(family, PAYLOADS["module-level import"](clean, marker))
    family["source"] = clean  # the source checked, the payload's bytecode beside it
    p.unlink()
    cache.store("library", entry["key"], entry["files"], data)
    assert derive_fresh(lib).result == "certified"
    assert not marker.exists()


@pytest.mark.parametrize("code", ["1 // 0", "undefined_name", "def _variant_0(P):\n    return None"])
def test_a_family_whose_bytecode_fails_runs_its_admitted_source(cache_folder, lib, code, monkeypatch):
    from layoutalg.compile import whitelist
    compiled_library(lib)
    rewrite(entry_path(cache_folder), lambda data: family_of(data, "split_nhd").update(
        code=marshal.dumps(compile(code, "<bad>", "exec"))))
    checked = []
    monkeypatch.setattr(whitelist, "check_source", lambda *a, real=whitelist.check_source: checked.append(1) or real(*a))
    whitelist._checked_code.cache_clear()  # (this process admitted the source when it compiled the library)
    result = derive_fresh(lib)
    assert (result.result, result.family, len(checked)) == ("certified", "split_nhd", 1)


def test_an_entry_without_bytecode_runs_its_source_only_through_the_whitelist(cache_folder, lib, tmp_path):
    compiled_library(lib)
    marker = tmp_path / "pwned"

    def unsafe(data):
        family = family_of(data, "split_nhd")
        family.pop("code")
        family["source"] = PAYLOADS["module-level import"](family["source"], marker)
    rewrite(entry_path(cache_folder), unsafe)
    assert derive_fresh(lib).result == "certified"
    assert not marker.exists()


def test_edit_without_matching_digest_is_ignored(cache_folder, lib):
    compiled_library(lib)
    good = derive_fresh(lib).mappings
    p = entry_path(cache_folder)
    original = p.read_bytes()
    rewrite(p, change_a_stride, fix_digest=True)
    assert derive_fresh(lib).mappings != good  # the control: this edit matters when it is used
    p.write_bytes(original)
    rewrite(p, change_a_stride, fix_digest=False)
    assert cache.load("library", Path(lib))[1] is None
    assert derive_fresh(lib).mappings == good
    assert family_of(cache.read_file(p)["data"], "split_nhd")["source"] == SPLIT_NHD.source


@pytest.mark.parametrize("damage", ["truncated", "not ours", "a list", "no checksum", "a byte flipped", "wrong key",
                                    "data not a list"])
def test_damaged_entry_is_ignored(cache_folder, damage, lib):
    compiled_library(lib)
    p = entry_path(cache_folder)
    raw = p.read_bytes()
    entry = cache.read_file(p)
    n = len(cache._MAGIC)
    if damage == "truncated":
        p.write_bytes(raw[:len(raw) // 2])
    elif damage == "not ours":
        p.write_bytes(b"\xff\xfe" + b"[" * 100000)
    elif damage == "a list":
        cache.write_file(p, [1, 2, 3])
    elif damage == "no checksum":
        p.write_bytes(raw[:n] + raw[n + 4:])
    elif damage == "a byte flipped":
        p.write_bytes(raw[:len(raw) // 2] + bytes([raw[len(raw) // 2] ^ 1]) + raw[len(raw) // 2 + 1:])
    elif damage == "wrong key":
        cache.write_file(p, {**entry, "key": "0" * 64})
    else:
        cache.write_file(p, {**entry, "data": "[{"})
    assert cache.load("library", Path(lib))[1] is None
    assert derive_fresh(lib).result == "certified"
    assert cache.load("library", Path(lib))[1] is not None  # rewritten whole


# ---- (b) a folder or file another user can write is not used ----------------------------


def test_world_writable_cache_folder_is_refused(cache_folder, caplog, lib):
    compiled_library(lib)
    assert cache.load("library", Path(lib))[1] is not None
    cache_folder.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="layoutalg.compile.cache"):
        assert cache.load("library", Path(lib))[1] is None
        assert cache.load("library", Path(lib))[1] is None
    assert [r.getMessage() for r in caplog.records] == [
        f"layoutalg: not using the cache at {cache_folder}: it is writable by group or others (mode 777); "
        "working uncached"]
    for p in cache_folder.iterdir():
        p.unlink()
    assert derive_fresh(lib).result == "certified"  # works uncached ...
    assert list(cache_folder.iterdir()) == []  # ... and writes nothing there


def test_group_writable_cache_file_is_refused(cache_folder, lib):
    compiled_library(lib)
    p = entry_path(cache_folder)
    p.chmod(0o620)
    assert cache.load("library", Path(lib))[1] is None


def test_new_cache_folder_is_private(empty_cache_folder, lib):
    compiled_library(lib)
    assert empty_cache_folder.stat().st_mode & 0o777 == 0o700
    assert entry_path(empty_cache_folder).stat().st_mode & 0o777 == 0o600


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="giving a folder away needs root")
def test_cache_folder_owned_by_another_user_is_refused(cache_folder, lib):
    compiled_library(lib)
    os.chown(cache_folder, 12345, -1)
    assert cache.load("library", Path(lib))[1] is None


@pytest.mark.parametrize("on", [False, True])
def test_a_spec_edited_between_two_derivers_of_one_process_is_read_again(tmp_path, monkeypatch, on):
    """The compiled library is held per process, but never past an edit of a file it was
    compiled from: the second Deriver maps by the edited spec (the imported grids file too)."""
    import shutil
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache") if on else "off")
    folder = tmp_path / "specs"
    folder.mkdir()
    shutil.copy(ROOT / "specs/grids.lal", tmp_path / "grids.lal")  # imported from outside the folder
    spec = (ROOT / "tests/data/broken/grid_fn_size.lal").read_text().replace("../../../specs/", "../")
    (folder / "dealt.lal").write_text(spec)
    layer = LayerSpec("attention", 8, block_size=1, num_kv_heads=1, head_size=1, dtype_bytes=1, sizes={"m": 8, "n": 4})

    def runs():
        res = Deriver(folder).derive(layer, TensorLayout((8, 8), (8, 1), 1), ParallelConfig(tp=2, total_kv_heads=1), 8)
        assert res.family == "slotted", res.reasons
        return res.mappings[0].runs
    dealt = runs()
    (folder / "dealt.lal").write_text(spec.replace("(i % n) * (m / n) + i // n", "i"))
    assert runs() != dealt
    held = compiled_library(str(folder))
    assert compiled_library(str(folder)) is held  # unedited: held, not compiled again
    (tmp_path / "grids.lal").write_text((tmp_path / "grids.lal").read_text() + "\n# an edit of the import\n")
    assert compiled_library(str(folder)) is not held


def _linked_library(tmp_path):
    """lib/s.lal imports cur/g.lal, where cur is a link to A (one layout) and B holds two."""
    for name, layouts in (("A", ["flat"]), ("B", ["flat", "flat2"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "g.lal").write_text("".join(f"layout {n}(M):\n    index i < M\n    element 1 bytes\n"
                                                        for n in layouts))
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "s.lal").write_text('import "cur/g.lal"\n')
    (tmp_path / "lib" / "cur").symlink_to(tmp_path / "A")
    return tmp_path / "lib"


@pytest.mark.parametrize("on", [False, True])
def test_an_import_through_a_link_pointed_elsewhere_is_read_again(tmp_path, monkeypatch, on):
    """The held library was checked by the files it resolved to, which a re-pointed
    link leaves as they were."""
    from layoutalg.dsl.library import load_default
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache") if on else "off")
    folder = _linked_library(tmp_path)
    assert sorted(load_default(folder).layouts) == ["flat"]
    held = compiled_library(str(folder))
    (folder / "cur").unlink()
    (folder / "cur").symlink_to(tmp_path / "B")
    assert sorted(load_default(folder).layouts) == ["flat", "flat2"]
    assert compiled_library(str(folder)) is not held
    forget_compiled()
    assert compiled_library(str(folder)) == {}  # no family, from the cache or compiled: and no stale entry


def test_an_import_edited_while_the_library_is_read_is_read_again(tmp_path, monkeypatch):
    """The held library was recorded with the digest of the files as they were after
    the read, so an edit that landed during it was never seen."""
    from layoutalg.dsl import library
    folder = _linked_library(tmp_path)
    real = library.load

    def edited_meanwhile(paths):
        lib = real(paths)
        (tmp_path / "A" / "g.lal").write_text((tmp_path / "B" / "g.lal").read_text())  # after it was parsed
        return lib
    monkeypatch.setattr(library, "load", edited_meanwhile)
    assert sorted(library.load_default(folder).layouts) == ["flat"]
    monkeypatch.setattr(library, "load", real)
    assert sorted(library.load_default(folder).layouts) == ["flat", "flat2"]


# ---- the folder's index: a fresh process finds its entry by the files' times alone ------


def settled_copy(tmp_path, lib) -> str:
    """A copy of the library whose files were last written an hour ago."""
    folder = tmp_path / "settled"
    folder.mkdir()
    old = __import__("time").time() - 3600
    for f in Path(lib).glob("*.lal"):
        (folder / f.name).write_bytes(f.read_bytes())
        os.utime(folder / f.name, (old, old))
    return os.path.realpath(folder)


def index_of(cache_dir: Path) -> list:
    return list(cache_dir.glob("index-library-*.bin"))


def test_a_load_through_the_index_hashes_and_parses_nothing(empty_cache_folder, tmp_path, lib, monkeypatch):
    from layoutalg.compile import whitelist
    folder = settled_copy(tmp_path, lib)
    good = derive_fresh(folder).mappings  # compiles, stores the entry and the folder's index
    assert len(index_of(empty_cache_folder)) == 1
    forget_compiled()
    from layoutalg.dsl import sources
    for module in (cache, sources):  # the cache's keys and the files' digests
        monkeypatch.setattr(module, "sha256_hex", lambda *a: pytest.fail("a file was hashed"))
    monkeypatch.setattr(whitelist, "check_source", lambda *a: pytest.fail("the source was parsed again"))
    whitelist._checked_code.cache_clear()  # (this process admitted the source when it compiled the library)
    assert derive_fresh(folder).mappings == good


def test_the_index_is_written_only_once_the_files_times_vouch_for_them(empty_cache_folder, tmp_path, lib):
    folder = tmp_path / "fresh"
    folder.mkdir()
    now = __import__("time").time()
    for f in Path(lib).glob("*.lal"):
        (folder / f.name).write_bytes(f.read_bytes())
        os.utime(folder / f.name, (now + 7200, now + 7200))  # past the index's clock (an hour ahead): times
    compiled_library(str(folder))                           # that vouch for nothing, however long the compile
    assert entry_path(empty_cache_folder).exists() and index_of(empty_cache_folder) == []
    old = now - 3600
    for f in folder.glob("*.lal"):
        os.utime(f, (old, old))
    forget_compiled()
    compiled_library(str(folder))
    assert len(index_of(empty_cache_folder)) == 1


def _same_size_replaced(folder: Path) -> None:
    """split_nhd.lal written whole again (another inode), one digit changed, its times put back."""
    f = folder / "split_nhd.lal"
    st, text = f.stat(), f.read_text()
    tmp = folder / "split_nhd.tmp"
    tmp.write_text(text.replace("d fastest", "h fastest", 1))
    assert len(tmp.read_bytes()) == st.st_size and tmp.read_text() != text
    os.replace(tmp, f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


EDITS = {
    "a spec edited": lambda folder: (folder / "split_nhd.lal").write_text(
        (folder / "split_nhd.lal").read_text() + "\n# edited\n"),
    "a spec of the same size replaced, its times put back": _same_size_replaced,
    "a spec touched": lambda folder: os.utime(folder / "split_nhd.lal"),
    "a spec added": lambda folder: (folder / "extra.lal").write_text("# nothing yet\n"),
    "a spec removed": lambda folder: (folder / "split_hnd.lal").unlink(),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_the_index_names_no_entry_past_an_edit(empty_cache_folder, tmp_path, lib, edit):
    folder = settled_copy(tmp_path, lib)
    compiled_library(folder)
    assert cache.recall("library", folder) is not None  # the control: found by the index
    EDITS[edit](Path(folder))
    assert cache.recall("library", folder) is None
    forget_compiled()
    assert ("split_hnd" in compiled_library(folder)) == (edit != "a spec removed")  # read the long way


def test_a_damaged_or_borrowed_index_names_no_entry(empty_cache_folder, tmp_path, lib):
    folder = settled_copy(tmp_path, lib)
    compiled_library(folder)
    (index,) = index_of(empty_cache_folder)
    raw = index.read_bytes()
    index.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    assert cache.recall("library", folder) is None
    index.write_bytes(raw)
    assert cache.recall("library", folder) is not None
    other = tmp_path / "other"  # another folder's name for this index: it records its own folder
    other.mkdir()
    Path(cache._index_path("library", str(other))).write_bytes(raw)
    assert cache.recall("library", str(other)) is None


def _family_file(path: Path, name: str, lib) -> None:
    path.write_text((Path(lib) / "split_nhd.lal").read_text().replace(", before split_hnd", "")
                    .replace("family split_nhd ", f"family {name} "))


def test_a_spec_file_that_is_a_link_pointed_elsewhere_is_read_again(empty_cache_folder, tmp_path, lib):
    """The index recorded the file a link resolved to, never the link, so a re-pointed
    link was served stale (in a fresh process, and the same process)."""
    there = tmp_path / "x"
    there.mkdir()
    (there / "grids.lal").write_bytes((Path(lib) / "grids.lal").read_bytes())
    for name in ("one", "two"):
        _family_file(there / f"{name}.lal", f"fam_{name}", lib)
    old = __import__("time").time() - 3600
    for f in there.iterdir():
        os.utime(f, (old, old))
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "a.lal").symlink_to(there / "one.lal")
    assert sorted(compiled_library(str(folder))) == ["fam_one"]
    forget_compiled()
    assert sorted(compiled_library(str(folder))) == ["fam_one"]  # (by the index, as a fresh process)
    (folder / "a.lal").unlink()
    (folder / "a.lal").symlink_to(there / "two.lal")
    assert sorted(compiled_library(str(folder))) == ["fam_two"]  # the same process
    forget_compiled()
    assert sorted(compiled_library(str(folder))) == ["fam_two"]  # a fresh one


def test_a_spec_added_while_the_index_is_written_is_never_left_out(empty_cache_folder, tmp_path, lib, monkeypatch):
    """The index's key and its listing were two readings of the folder; a spec added
    between them was in the listing, not in the key, and never read."""
    import sys
    folder = settled_copy(tmp_path, lib)
    real = cache.key_of

    def key_of(*args):
        out = real(*args)
        if sys._getframe(1).f_code.co_name == "remember":  # the key read: a writer adds a family now
            text = (Path(lib) / "split_nhd.lal").read_text()
            (Path(folder) / "late.lal").write_text('import "grids.lal"\nimport "split_nhd.lal"\n' + text[
                text.index("family split_nhd"):].replace("family split_nhd serves attention, before split_hnd",
                                                         "family fam_late serves late"))
        return out
    monkeypatch.setattr(cache, "key_of", key_of)
    compiled_library(folder)
    monkeypatch.setattr(cache, "key_of", real)
    assert (Path(folder) / "late.lal").exists()
    forget_compiled()
    assert "fam_late" in compiled_library(folder)


def test_a_spec_file_that_links_to_nothing_is_named(empty_cache_folder, tmp_path):
    from layoutalg.errors import SpecError
    (tmp_path / "bad.lal").symlink_to(tmp_path / "gone.lal")
    with pytest.raises(SpecError, match=r"bad.lal: it is a link to .*gone.lal, which does not exist"):
        Deriver(tmp_path)

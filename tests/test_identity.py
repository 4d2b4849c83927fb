"""Layout identity: derived from the normalised canonical layout, carried by every mapping."""
import shutil

import pytest

from layoutalg.ir.family import resolve
from layoutalg.compile.codegen import compile_named
from layoutalg.ir.identity import layout_id
from layoutalg.dsl.library import load, load_default
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

from conftest import ROOT

SPECS = ROOT / "specs"


def _id(path, family):
    return layout_id(resolve(load([path]), family))


def _copy(tmp_path, src, edits, name):
    shutil.copy(SPECS / "grids.lal", tmp_path / "grids.lal")
    text = (SPECS / f"{src}.lal").read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / f"{name}.lal").write_text(text)
    return tmp_path / f"{name}.lal"


def test_the_shipped_formats_all_differ_but_where_the_canonical_page_is_one():
    """FlashAttention's tensors hold split NHD's and split HND's bytes apart: the same canonical
    page, so one id (a page stored by one is read by the other); every other family its own."""
    from layoutalg.runtime.derive import compiled_library
    lib = load_default()
    held = compiled_library()  # as the runtime holds them (compiled once, or from the cache: the ids it keeps)
    assert sorted(held) == sorted(lib.families)
    ids = {f: cf.layout_id for f, cf in held.items()}
    assert all(i.startswith("lal3-") and len(i) == 21 for i in ids.values())
    shared = {frozenset(f for f in ids if ids[f] == i) for i in ids.values()}
    assert {s for s in shared if len(s) > 1} == {frozenset({"flash_nhd", "split_nhd"}),
                                                  frozenset({"flash_hnd", "split_hnd"})}
    assert len(set(ids.values())) == len(ids) - 2


def test_the_same_canonical_bytes_written_another_way_share_the_id(tmp_path):
    """Other comments, layout and parameter names, an expanded offset and another local layout."""
    path = _copy(tmp_path, "split_nhd", [
        ("layout split_nhd(H, T, D, e):", "# rewritten\nlayout rows(Heads, Tokens, Dim, bytes_per):"),
        ("    index kv < 2, t < T, h < H, d < D            # dense, in this order: d fastest\n"
         "    element e bytes",
         "    index kv < 2, t < Tokens, h < Heads, d < Dim\n"
         "    offset d + Dim * h + Dim * Heads * t + Dim * Heads * Tokens * kv\n    element bytes_per bytes"),
        ("tensor (block, ...)                          # the torch tensor's dims: the block, then these",
         "tensor (block, kv, t, h, d)"),
        ("local     split_nhd(", "local     rows("), ("canonical split_nhd(", "canonical rows("),
        ("family split_nhd serves attention, before split_hnd:", "family other serves attention, order 3:")], "other")
    assert _id(path, "other") == _id(SPECS / "split_nhd.lal", "split_nhd")


def test_another_canonical_placement_gets_another_id(tmp_path):
    longer = _copy(tmp_path, "split_nhd", [("block_size * cp, head_size", "block_size * cp * 2, head_size")], "longer")
    assert _id(longer, "split_nhd") != _id(SPECS / "split_nhd.lal", "split_nhd")
    assert _id(SPECS / "split_nhd.lal", "split_nhd") != _id(SPECS / "split_hnd.lal", "split_hnd")


def test_divisions_are_named_by_what_they_divide_not_by_their_number(tmp_path):
    a = _copy(tmp_path, "opaque", [("canonical bytes(page_size * tp * pcp)", "canonical bytes(page_size // 2 * tp * pcp * 2)")], "a")
    b_dir = tmp_path / "b"
    b_dir.mkdir()
    b = _copy(b_dir, "opaque", [("canonical bytes(page_size * tp * pcp)", "canonical bytes(page_size // 4 * tp * pcp * 2)")], "b")
    assert _id(a, "opaque") != _id(b, "opaque")


def test_every_mapping_carries_the_family_id():
    d = Deriver()
    layer = LayerSpec("attention", 2 * 16 * 2 * 8 * 2, 16, 2, 8, 2)
    shape = (4, 2, 16, 2, 8)
    tensor = TensorLayout(shape, (512, 256, 16, 8, 1), 2)
    res = d.derive(layer, tensor, ParallelConfig(tp=4, total_kv_heads=8), 4)
    assert res.result == "certified"
    assert {m.layout_id for m in res.mappings} == {_id(SPECS / f"{res.family}.lal", res.family)}


KEPT = ("grids", "split_nhd", "state", "gdn")
"""A library of a family and a family of pages (its regions' entries): each kind of entry the
compiled library holds, compiled in seconds where the shipped library takes tens (twice with the
cache off)."""


@pytest.mark.parametrize("cache", ["off", "tmp"])
def test_the_compiled_library_keeps_the_id(tmp_path, monkeypatch, cache):
    from layoutalg.runtime.derive import compiled_library, forget_compiled
    specs = tmp_path / "specs"
    specs.mkdir()
    for name in KEPT:
        shutil.copy(SPECS / f"{name}.lal", specs / f"{name}.lal")
    monkeypatch.setenv("LAYOUTALG_CACHE", "off" if cache == "off" else str(tmp_path / "cache"))
    forget_compiled()
    try:
        first = {n: cf.layout_id for n, cf in compiled_library(str(specs)).items()}
        forget_compiled()
        again = {n: cf.layout_id for n, cf in compiled_library(str(specs)).items()}  # from the cache, if on
    finally:
        forget_compiled()
    assert first == again and all(first.values())
    assert sorted(first) == ["gdn", "split_nhd"]
    assert (cache == "tmp") == any((tmp_path / "cache").glob("library-*.bin"))  # the second was read from it


def test_the_shard_map_is_part_of_the_format(tmp_path):
    """Same layouts, heads dealt out another way: canonical head h holds other data."""
    other = _copy(tmp_path, "split_nhd", [("head(h)", "h * shards + head_shard")], "other")
    assert _id(other, "split_nhd") != _id(SPECS / "split_nhd.lal", "split_nhd")


def test_cases_that_swap_their_layouts_do_not_share_an_id(tmp_path):
    grids = (SPECS / "grids.lal").read_text()
    lines = grids.splitlines()
    i = next(k for k, line in enumerate(lines) if "case pcp_replicas == 0" in line)
    j = next(k for k, line in enumerate(lines) if "case pcp_replicas == 1" in line)
    lines[i], lines[j] = lines[i].replace("== 0", "== 1"), lines[j].replace("== 1", "== 0")
    swapped = "\n".join(lines) + "\n"
    assert swapped != grids
    (tmp_path / "grids.lal").write_text(swapped)
    shutil.copy(SPECS / "split_nhd.lal", tmp_path / "split_nhd.lal")
    assert _id(tmp_path / "split_nhd.lal", "split_nhd") != _id(SPECS / "split_nhd.lal", "split_nhd")


def test_conditions_with_and_or_not_have_an_id_and_load(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYOUTALG_CACHE", "off")
    (tmp_path / "m.lal").write_text(
        "layout bytes(P):\n    index b < P\n    offset b\n"
        "grid g:\n    world tp * pcp\n    ranks pcp_rank < pcp, tp_rank < tp\n"
        "    case tp == 1 or not pcp == 1:\n        let k = 1\n    case tp > 1 and pcp == 1:\n        let k = 1\n"
        "family m serves fallback:\n    grid g\n    local     bytes(page_size)\n"
        "    canonical bytes(page_size * tp * pcp)\n    shard (b) -> (rank * page_size + b)\n")
    assert _id(tmp_path / "m.lal", "m").startswith("lal3-")
    assert Deriver(str(tmp_path)).derive(LayerSpec("x", 8), None, ParallelConfig(2, 1)).result == "opaque"


def test_rank_digits_in_another_order_are_another_format(tmp_path):
    """Which rank holds which shard is part of the format: swapping two rank digits moves ranks'
    bytes to other canonical places."""
    for name in ("grids.lal", "split_nhd.lal"):
        shutil.copy(ROOT / "specs" / name, tmp_path / name)
    grids = tmp_path / "grids.lal"
    text = grids.read_text()
    swapped = "ranks head_shard < shards, pcp_rank < pcp, writer < tp / shards / dcp, dcp_rank < dcp"
    assert "ranks pcp_rank < pcp, head_shard < shards" in text
    grids.write_text(text.replace("ranks pcp_rank < pcp, head_shard < shards, writer < tp / shards / dcp, "
                                  "dcp_rank < dcp", swapped))
    assert swapped in grids.read_text()
    shipped = layout_id(resolve(load_default(), "split_nhd"))
    assert layout_id(resolve(load([tmp_path / "split_nhd.lal"]), "split_nhd")) != shipped


def test_every_format_id_is_made_and_read_by_one_record(deriver):
    """runtime.formats.FormatId: an id the runtime gives reads back to itself part by part, and a
    string that is no id (a record's corrupted field) is a ConfigError naming it, never a part."""
    from layoutalg.errors import ConfigError
    from layoutalg.runtime.formats import FormatId, assumed_id, element_part, form_part, unread
    layer = LayerSpec("attention", 2 * 16 * 2 * 8 * 2, 16, 2, 8, 2)
    tensor = TensorLayout((4, 2, 16, 2, 8), (512, 256, 16, 8, 1), 2, "torch.bfloat16")
    res = deriver.derive(layer, tensor, ParallelConfig(tp=4, total_kv_heads=8), 4)
    assert res.result == "certified"
    fmt = res.mappings[0].format_id
    assert element_part(fmt)  # (the tensor names its element type)
    f = FormatId.parse(fmt)
    assert str(f) == fmt and form_part(fmt) == f.form_part and element_part(fmt) == f.types
    assert unread(assumed_id(fmt)) and not unread(fmt) and FormatId.parse(assumed_id(fmt)).form == f.form
    for bad in ("", "lal3-0", "a..b", "a.b.c.d", "a.assumed-", 7, None):
        with pytest.raises(ConfigError, match="not a page format id"):
            FormatId.parse(bad)
    assert form_part("") == element_part("") == "" and not unread("")  # a mapping made with no id
    with pytest.raises(ConfigError, match="not a page format id"):
        form_part("garbage")
    with pytest.raises(ConfigError, match="no '.'"):
        FormatId("lal3-0.x", "abc")

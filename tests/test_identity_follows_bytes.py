"""A page's identity follows its bytes on every path (issue 51, item 3).

- Derived from its sizes alone, an attention layer's bytes lie as its tensor says (NHD or HND at
  one size): the derivation is refused, never given an id two engines could share. A layer whose
  kind no family reads from a tensor gets an id marked `assumed-`, one whatever the process.
- `ModelPlan.load` compares the stored pages' format itself, given the storer's record.
- The vLLM adapter's DSA indexer tensor `(blocks, 64, 132)` is taken by the copy plan too.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from layoutalg.errors import LayoutMismatch
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.formats import unread
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

BS, H, D = 4, 2, 8
ATTENTION = LayerSpec("attention", 2 * BS * H * D * 2, BS, H, D, 2)
PAR = ParallelConfig(tp=2, total_kv_heads=4)
NHD = TensorLayout((3, 2, BS, H, D), (128, 64, 16, 8, 1), 2)
HND = TensorLayout((3, 2, BS, H, D), (128, 64, 8, 32, 1), 2)


def test_an_attention_layer_from_its_sizes_alone_is_refused_naming_the_tensor_families():
    """One Deriver asked for an NHD and an HND engine's layer without their tensors gave both one
    id (72 of 96 bytes of one read wrong by the other); now neither gets a mapping, and the reason
    names the families that read the tensor."""
    d = Deriver()
    res = d.derive(ATTENTION, None, PAR, 3)
    assert (res.result, res.mappings) == ("no_mappings", ()), res
    why = res.reasons[-1]
    assert "derived from its sizes alone" in why and "derive the layer with its tensor" in why
    assert all(f in why for f in ("split_nhd", "split_hnd", "packed_nhd", "packed_hnd")), why
    # with the tensors: two formats, each certified and found again below in another process
    nhd, hnd = d.derive(ATTENTION, NHD, PAR, 3), d.derive(ATTENTION, HND, PAR, 3)
    assert (nhd.family, hnd.family) == ("split_nhd", "split_hnd")
    assert nhd.mappings[0].format_id != hnd.mappings[0].format_id
    assert not unread(nhd.mappings[0].format_id)


def _in_a_process(code: str) -> str:
    return subprocess.run([sys.executable, "-c", "from layoutalg.runtime.derive import *\n" + code],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_layout_assumed_from_sizes_has_one_id_in_every_process_and_none_a_tensor_has():
    """A kind no family serves (vLLM's Mamba layer stored opaque) and an MLA layer no MLA case
    holds, from their sizes alone: the id says the layout was assumed, is the same from a fresh
    Deriver, after the memo is cleared and in another process, and differs from the id of the same
    layer derived with its tensor."""
    state = LayerSpec("opaque", 3072)
    mla = LayerSpec("mla", 4 * 3 * 64, 4, 1, 3 * 64 // 1, 1, compress_ratio=2)  # no MLA case: the fallback
    par = ParallelConfig(tp=4, total_kv_heads=8)
    d = Deriver()
    ids = {}
    for name, layer in (("state", state), ("mla", mla)):
        res = d.derive(layer, None, par, 3)
        assert res.result == "opaque", (name, res.reasons)
        ids[name] = res.mappings[0].format_id
        assert unread(ids[name]) and ".assumed-" in ids[name]
        assert {m.format_id for m in res.mappings} == {ids[name]}
        d._memo.cache_clear()
        assert Deriver().derive(layer, None, par, 3).mappings[0].format_id == ids[name]
    other = _in_a_process("p = ParallelConfig(tp=4, total_kv_heads=8)\n"
                          "print(Deriver().derive(LayerSpec('opaque', 3072), None, p, 3).mappings[0].format_id)")
    assert other == ids["state"]
    told = d.derive(state, TensorLayout((3, 3072), (3072, 1), 1), par, 3)
    assert told.result == "opaque" and not unread(told.mappings[0].format_id)
    assert told.mappings[0].format_id != ids["state"]


def test_a_tensor_derived_id_is_found_again_in_another_process():
    code = ("l = LayerSpec('attention', 256, 4, 2, 8, 2)\n"
            "print(Deriver().derive(l, {}, ParallelConfig(tp=2, total_kv_heads=4), 3).mappings[0].format_id)")
    ids = {k: _in_a_process(code.format(t)) for k, t in (("nhd", repr(NHD)), ("hnd", repr(HND)))}
    here = Deriver().derive(ATTENTION, NHD, PAR, 3).mappings[0].format_id
    assert here == ids["nhd"] != ids["hnd"]


NHD1 = TensorLayout((3, 2, BS, H, D), (128, 64, 16, 8, 1), 2, "torch.bfloat16")


def _model(deriver, names, filled: bool):
    """A model plan of split NHD layers `names` at tp 1, and their tensors (`filled`: each byte
    numbered, else zeros)."""
    from layoutalg.copy import plan_model
    maps = {n: deriver.derive(ATTENTION, NHD1, ParallelConfig(tp=1, total_kv_heads=H), 3).mappings[0]
            for n in names}
    numbered = torch.arange(3 * 2 * BS * H * D, dtype=torch.int16).view(torch.bfloat16).reshape(3, 2, BS, H, D)
    kvs = {n: numbered.clone() if filled else torch.zeros_like(numbered) for n in names}
    return plan_model(maps, kvs), kvs


def test_a_model_plan_load_compares_the_stored_format_itself():
    """Pages stored with the layers named `a.*` and loaded by a plan whose layers are named `b.*`
    (one size, one place each): a load given the storer's record (`stamped`) or id refuses,
    naming the layers; the same names load byte for byte."""
    d = Deriver()
    store, kvs = _model(d, ["a.0", "a.1"], True)
    pages = torch.zeros(3, store.page_size_bytes, dtype=torch.uint8)
    ids = torch.arange(3)
    store.store(kvs, ids, store.stamped(pages), ids)
    renamed, out = _model(d, ["b.0", "b.1"], False)
    assert renamed.page_size_bytes == store.page_size_bytes  # plain pages would load without a word
    with pytest.raises(LayoutMismatch, match=r"layers 'a.0', 'a.1', 'b.0', 'b.1' are in one page and not the other"):
        renamed.load(store.stamped(pages), ids, out, ids)
    with pytest.raises(LayoutMismatch, match="stored as model page format"):
        renamed.load(pages, ids, out, ids, format_id=store.format_id)
    assert all(not torch.any(t.view(torch.int16)) for t in out.values())  # nothing moved
    same, back = _model(d, ["a.0", "a.1"], False)
    assert same.load(store.stamped(pages), ids, back, ids) == {"a.0": 3, "a.1": 3}
    assert all(torch.equal(back[n].view(torch.int16), kvs[n].view(torch.int16)) for n in kvs)
    with pytest.raises(LayoutMismatch, match="is not the format of the pages given"):
        same.load(store.stamped(pages), ids, back, ids, format_id="x")


def test_the_indexer_tensor_the_adapter_takes_is_the_one_a_copy_plan_takes():
    """vLLM's DSA indexer cache `(blocks, 64, 132)` uint8: derived by the adapter, planned with the
    same tensor (the plan refused it: it wanted `(blocks, page)`), stored and loaded back byte for
    byte at tp 2 -> 2; its flat `(blocks, page)` bytes plan too, and a tensor of another row
    length is still refused."""
    sys.path.insert(0, str(__import__("conftest").ROOT / "tests"))
    from test_dsa_indexer import NAME, SCALE, VALUES
    from test_vllm_adapter import cache_config, config, mla
    from layoutalg import derive_canonical_mappings
    from layoutalg.copy import plan
    spec = mla(block_size=64, head_size=VALUES + SCALE, dtype=torch.uint8)
    gen = torch.Generator().manual_seed(51)
    kvs = [torch.randint(0, 256, (3, 64, 132), dtype=torch.uint8, generator=gen) for _ in range(2)]
    maps = [derive_canonical_mappings(config(tp=2, dcp=2, total=1, rank=r), cache_config([(spec, [NAME])],
                                      num_blocks=3), {NAME: kvs[r]})[NAME] for r in range(2)]
    pages = torch.zeros(3, maps[0].canonical_page_size_bytes, dtype=torch.uint8)
    blocks, page_ids = torch.tensor([2, 0, 1]), torch.tensor([0, 1, 2])
    for m, kv in zip(maps, kvs):
        plan(m, kv).store(kv, blocks, pages, page_ids)
    for m, kv in zip(maps, kvs):
        back = torch.zeros_like(kv)
        assert plan(m, back).load(pages, page_ids, back, blocks) == 3
        assert torch.equal(back[blocks], kv[blocks])
        flat = torch.zeros(3, 64 * 132, dtype=torch.uint8)
        plan(m, flat).load(pages, page_ids, flat, blocks)
        assert torch.equal(flat, back.view(3, -1))
    assert all(m.tensors[0].shape == (64, 132) for m in maps)  # the view is the tensor as given
    with pytest.raises(LayoutMismatch):
        plan(maps[0], torch.zeros(3, 132, 64, dtype=torch.uint8))

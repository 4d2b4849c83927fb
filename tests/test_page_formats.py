"""Page formats that must differ do, conversions are tied to the groups they convert between,
element types are checked, and memory two tensors share or odd inputs are refused."""
import numpy as np
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.errors import ConfigError, LayoutMismatch
from layoutalg.dsl.library import load_default
from layoutalg.verify.conversions import conversion
from layoutalg.plans.reshard import ReshardError, cross_plans, direct_plans
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.formats import element_part, form_part
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
from layoutalg.runtime.vllm import derive_canonical_mappings

from conftest import ROOT
from test_reshard import _group
from test_vllm_adapter import attention, cache_config, config, mamba2_spec, mla, state_config

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def test_a_conversion_is_used_only_between_the_groups_it_was_made_for():
    lib = load_default()
    big, small = _group("split_nhd", 2, "tp=4,dcp=2"), _group("split_nhd", 2, "tp=1")
    conv = conversion(lib, "split_nhd", big.sizes, small.sizes)
    assert cross_plans(big.mappings, small.mappings, conv).k == 2        # the groups it was made for
    other = conversion(lib, "split_nhd", {**big.sizes, "head_size": big.sizes["head_size"] // 2,
                                          "page_size": big.sizes["page_size"] // 2},
                       {**small.sizes, "head_size": small.sizes["head_size"] // 2,
                        "page_size": small.sizes["page_size"] // 2})
    # a half-size model's conversion: k small pages a big one as here, but other formats
    with pytest.raises(ReshardError, match="made for other sizes or another family"):
        cross_plans(big.mappings, small.mappings, other)
    with pytest.raises(ReshardError, match="must be a PageConversion"):
        cross_plans(big.mappings, small.mappings, conv.mapping)


def test_groups_of_other_element_types_get_no_cross_cp_plan():
    lib = load_default()
    x = Deriver()
    layer = lambda h: LayerSpec("attention", 2 * 16 * h * 8 * 2, block_size=16, num_kv_heads=h, head_size=8,  # noqa: E731
                                dtype_bytes=2)
    t = lambda h, d: TensorLayout((4, 2, 16, h, 8), (256 * h, 128 * h, 8 * h, 8, 1), 2, d)  # noqa: E731
    big = x.derive(layer(1), t(1, "torch.bfloat16"), ParallelConfig(tp=4, total_kv_heads=2, dcp=2))
    small_bf, small_fp = (x.derive(layer(2), t(2, d), ParallelConfig(tp=1, total_kv_heads=2))
                          for d in ("torch.bfloat16", "torch.float16"))
    assert form_part(small_bf.mappings[0].format_id) == form_part(small_fp.mappings[0].format_id)
    assert element_part(small_bf.mappings[0].format_id) != element_part(small_fp.mappings[0].format_id)
    sizes = lambda h, tp, dcp: {"tp": tp, "pcp": 1, "dcp": dcp, "interleave": 1, "total_heads": 2, "heads": h,  # noqa: E731
                                "block_size": 16, "head_size": 8, "dtype_bytes": 2, "page_size": 2 * 16 * h * 8 * 2,
                                "per_token_head_quant": 0, "compress_ratio": 1}
    conv = conversion(lib, "split_nhd", sizes(1, 4, 2), sizes(2, 1, 1))
    assert cross_plans(big.mappings, small_bf.mappings, conv).k == 2
    with pytest.raises(ReshardError, match="other element types"):
        cross_plans(big.mappings, small_fp.mappings, conv)


def test_opaque_pages_of_an_nhd_and_an_hnd_tensor_are_two_formats():
    d = Deriver()
    layer = LayerSpec("attention", 2 * 4 * 2 * 4, block_size=4, num_kv_heads=2, head_size=4, dtype_bytes=1,
                      per_token_head_quant=True)
    nhd = torch.zeros(3, 2, 4, 2, 4, dtype=torch.int8)
    hnd = torch.zeros(3, 2, 2, 4, 4, dtype=torch.int8).transpose(2, 3)
    a, b = (d.derive(layer, TensorLayout.of(t), ParallelConfig(tp=1, total_kv_heads=2)) for t in (nhd, hnd))
    assert a.result == b.result == "opaque"
    assert a.mappings[0].format_id != b.mappings[0].format_id
    with pytest.raises(ReshardError, match="page format"):
        direct_plans(a.mappings, b.mappings)


@pytest.mark.parametrize("spec_a, spec_b", [
    (mla(cache_dtype_str="fp8_e4m3", dtype=torch.uint8), mla(cache_dtype_str="fp8_e5m2", dtype=torch.uint8)),
    (mla(dtype=torch.bfloat16), mla(dtype=torch.float16)),       # no tensor read: the spec says the type
])
def test_the_spec_names_the_encoding_of_a_page(spec_a, spec_b):
    ids = []
    for spec in (spec_a, spec_b):
        out = derive_canonical_mappings(config(tp=1, total=1), cache_config([(spec, ["l"])]), {})
        ids.append(out["l"].format_id)
    assert ids[0] != ids[1] and form_part(ids[0]) == form_part(ids[1])


def test_state_pages_of_other_dtypes_are_two_formats():
    ids = []
    for dt in (torch.bfloat16, torch.float16):
        spec = mamba2_spec(2)
        spec = type(spec)(block_size=spec.block_size, shapes=spec.shapes, dtypes=(dt, spec.dtypes[1]),
                          mamba_type=spec.mamba_type)
        out = derive_canonical_mappings(state_config(2, 0), cache_config([(spec, ["m"])]), {}, state_layers=True)
        ids.append(out["m"].format_id)
    assert ids[0] != ids[1]


def _hnd_uint8_mapping():
    d = Deriver()
    kv = torch.zeros(3, 2, 2, 4, 4, dtype=torch.uint8).transpose(2, 3)       # fp8 HND, as vLLM allocates it
    layer = LayerSpec("attention", 2 * 4 * 2 * 4, block_size=4, num_kv_heads=2, head_size=4, dtype_bytes=1)
    res = d.derive(layer, TensorLayout.of(kv), ParallelConfig(tp=1, total_kv_heads=2))
    assert res.family == "split_hnd"
    return res.mappings[0], kv


def test_a_uint8_tensor_of_the_views_dims_is_checked_as_typed():
    m, kv = _hnd_uint8_mapping()
    plan(m, kv)                                                  # the tensor it was derived for
    plan(m, kv.contiguous().view(3, -1))                         # raw bytes of the pages: taken as bytes
    with pytest.raises(LayoutMismatch, match="dimension"):
        plan(m, torch.zeros(3, 2, 4, 2, 4, dtype=torch.uint8))  # an NHD uint8 tensor for an HND mapping


def test_a_tensor_of_another_type_of_one_size_is_refused():
    d = Deriver()
    kv = torch.zeros(3, 2, 4, 2, 4, dtype=torch.bfloat16)
    layer = LayerSpec("attention", 2 * 4 * 2 * 4 * 2, block_size=4, num_kv_heads=2, head_size=4, dtype_bytes=2)
    m = d.derive(layer, TensorLayout.of(kv), ParallelConfig(tp=1, total_kv_heads=2)).mappings[0]
    plan(m, kv)
    with pytest.raises(LayoutMismatch, match="elements are torch.float16, the mapping's are torch.bfloat16"):
        plan(m, kv.view(torch.float16))


def test_buffers_that_alias_one_memory_through_two_storages_are_refused():
    m, _ = _hnd_uint8_mapping()
    page = m.local_page_size_bytes
    mem = np.zeros(8 * page, dtype=np.uint8)
    kv = torch.from_numpy(mem)[: 3 * page].view(3, page)
    pages = torch.from_numpy(mem[100: 100 + 3 * m.canonical_page_size_bytes]).view(3, -1)  # a storage of its own
    assert kv.untyped_storage().data_ptr() + 100 == pages.untyped_storage().data_ptr()
    before = (kv.clone(), pages.clone())
    with pytest.raises(LayoutMismatch, match="share memory"):
        plan(m, kv).store(kv, [0, 1, 2], pages, [0, 1, 2])
    assert torch.equal(kv, before[0]) and torch.equal(pages, before[1])


def test_meta_tensors_hold_no_bytes_to_copy():
    m, _ = _hnd_uint8_mapping()
    kv = torch.empty(3, m.local_page_size_bytes, dtype=torch.uint8, device="meta")
    pages = torch.empty(3, m.canonical_page_size_bytes, dtype=torch.uint8, device="meta")
    with pytest.raises(LayoutMismatch, match="meta device"):
        plan(m, kv).store(kv, [0], pages, [0])


@pytest.mark.parametrize("ids", [{0: 1}, {0}, "01"])
def test_ids_without_an_order_are_refused(ids):
    m, kv = _hnd_uint8_mapping()
    pages = torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="must be a 1-D int64 tensor or a sequence of ints"):
        plan(m, kv).store(kv, ids, pages, [0])


def test_layer_names_given_as_one_string_are_refused():
    kv = cache_config([(attention(), ["x"])])
    kv.kv_cache_groups[0].layer_names = "layers.0.attn"
    with pytest.raises(ConfigError, match="must be a list of layer names, got the string"):
        derive_canonical_mappings(config(), kv, {})


def test_a_layer_in_two_groups_is_refused():
    kv = cache_config([(attention(), ["a"]), (mla(), ["a"])])
    with pytest.raises(ConfigError, match="layer 'a' is in kv_cache_config.kv_cache_groups\\[0\\] and in"):
        derive_canonical_mappings(config(), kv, {})


@pytest.mark.parametrize("src, dst", [(2, 1), (1, 4), (4, 2)])
def test_vllms_per_token_head_layout_moves_across_tp(src, dst):
    """vLLM's per-token-head KV with inline scales, (blocks, heads, bs, 2 * R) bytes, each K and V
    row its data, its fp32 scale and padding: stored at one tp and loaded at another, every data and
    scale byte comes back where the engine's own tensor had it (checked by slicing that tensor)."""
    D, S, R, BS, H, N = 12, 4, 16, 4, 4, 3
    gen = torch.Generator().manual_seed(7)
    full = torch.randint(0, 256, (N, H, BS, 2 * R), dtype=torch.uint8, generator=gen)
    d = Deriver()

    def group(tp):
        h = H // tp
        layer = LayerSpec("attention", h * BS * 2 * R, block_size=BS, num_kv_heads=h, head_size=D, dtype_bytes=1,
                          per_token_head_quant=True, sizes={"kv_scales": 1, "scale_bytes": S, "row_align": R})
        res = d.derive(layer, TensorLayout.of(full[:, :h]), ParallelConfig(tp=tp, total_kv_heads=H), N)
        assert res.family == "quant_packed", res.reasons
        return res.mappings, h

    stored, h = group(src)
    pages = torch.zeros(N, stored[0].canonical_page_size_bytes, dtype=torch.uint8)
    ids = torch.tensor([2, 0, 1])
    for rank, m in enumerate(stored):
        kv = full[:, rank * h:(rank + 1) * h].contiguous()
        plan(m, kv).store(kv, torch.arange(N), pages, ids)
    loaded, h = group(dst)
    held = torch.zeros(2 * R, dtype=torch.bool)
    held[:D + S] = held[R:R + D + S] = True              # data and scale of K and of V; the rest is padding
    for rank, m in enumerate(loaded):
        kv = torch.zeros(N, h, BS, 2 * R, dtype=torch.uint8)
        plan(m, kv).load(pages, ids, kv, torch.arange(N))
        assert torch.equal(kv[..., held], full[:, rank * h:(rank + 1) * h][..., held]), (src, dst, rank)


def _per_token_head(h=4, tp=1, D=12, S=4, R=32, BS=4):
    return (LayerSpec("attention", h * BS * 2 * R, block_size=BS, num_kv_heads=h, head_size=D, dtype_bytes=1,
                      per_token_head_quant=True, sizes={"kv_scales": 1, "scale_bytes": S, "row_align": R}),
            ParallelConfig(tp=tp, total_kv_heads=h * tp))


def test_the_per_token_head_page_is_one_tensor_with_kv_and_the_row_in_its_last_dim():
    """quant_packed names vLLM's tensor, (blocks, heads, bs, 2 * R) bytes: its last dim is kv and
    the row (data, scale, padding) merged, so a tensor of another layout is not read as it."""
    layer, par = _per_token_head()
    d = Deriver()
    res = d.derive(layer, TensorLayout((3, 4, 4, 64), (1024, 256, 64, 1), 1, "torch.uint8"), par, 3)
    assert res.family == "quant_packed", res.reasons
    assert [(v.name, v.shape, v.strides, v.element) for v in res.mappings[0].tensors] == \
        [("kv", (4, 4, 64), (256, 64, 1), 1)]
    other = d.derive(layer, TensorLayout((3, 2, 4, 4, 32), (1024, 512, 128, 32, 1), 1, "torch.uint8"), par, 3)
    assert other.family != "quant_packed"
    assert any("quant_packed" in r and "tensor (kv): shape (3, 2, 4, 4, 32) is not (3, 4, 4, 64)" in r
               for r in other.reasons), other.reasons


def test_a_copy_plan_refuses_a_uint8_tensor_of_another_layout_of_the_per_token_head_page():
    layer, par = _per_token_head()
    m = Deriver().derive(layer, TensorLayout((3, 4, 4, 64), (1024, 256, 64, 1), 1), par, 3).mappings[0]
    pages = torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8)
    scrambled = torch.randint(0, 256, (3, 2, 4, 4, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    with pytest.raises(LayoutMismatch, match=r"not the tensor 'kv' the mapping was derived for: shape "
                                             r"\(3, 2, 4, 4, 32\) is not \(3, 4, 4, 64\)"):
        plan(m, scrambled)
    assert not pages.any()
    good = scrambled.reshape(3, 4, 4, 64)
    plan(m, good).store(good, torch.arange(3), pages, torch.arange(3))
    raw = torch.zeros(3, 1024, dtype=torch.uint8)                 # the raw (blocks, page) bytes are the page too
    plan(m, raw).load(pages, torch.arange(3), raw, torch.arange(3))
    # data and scale of K, of V, and the padding of each row: it lies inside the engine's tensor, so
    # it is a region and travels with the rest (a pad is never inside a tensor)
    assert torch.equal(raw.reshape(3, 4, 4, 64), good)


def _padded_apart(text: str) -> str:
    """quant_packed with its rows' padding a pad outside the tensor, not a region inside it."""
    for old, new in (("    region tail:\n", "    pad tail:\n"), ("        tensor kv (block, h, t, (kv, p))\n", ""),
                     ("    shard tail  (kv, t, h, p) -> (kv, token(t), head(h), p)\n", "")):
        assert old in text
        text = text.replace(old, new)
    return text


def test_a_merged_tensor_dim_whose_indices_are_not_contiguous_fails_closed(tmp_path):
    """With its padding outside the tensor, a row's kv stride (R) is not the data and scale's
    width: the view cannot be one dim, and the runtime says so rather than read another tensor."""
    text = (ROOT / "specs" / "quant_packed.lal").read_text()
    (tmp_path / "quant_packed.lal").write_text(_padded_apart(text))
    for f in ("grids.lal", "quant_kv.lal", "split_nhd.lal"):
        (tmp_path / f).write_text((ROOT / "specs" / f).read_text())
    layer, par = _per_token_head()
    res = Deriver(tmp_path).derive(layer, TensorLayout((3, 4, 4, 64), (1024, 256, 64, 1), 1), par, 3)
    assert res.family != "quant_packed"
    assert any("tensor 'kv' of family 'quant_packed': its dimension 3 holds indices of extents (2, 16) and "
               "strides (32, 1) (elements), which are not contiguous" in r for r in res.reasons), res.reasons


def test_a_page_one_tensor_views_only_in_part_is_not_that_tensor(tmp_path):
    """With its padding outside the tensor, and without the merge, quant_packed's one tensor views
    512 of the page's 1024 bytes a block: the runtime does not take a tensor of that view for the page."""
    text = _padded_apart((ROOT / "specs" / "quant_packed.lal").read_text())
    for clause in ("(kv, d)", "(kv, s)"):
        text = text.replace(clause, clause[1:-1])
    (tmp_path / "quant_packed.lal").write_text(text)
    for f in ("grids.lal", "quant_kv.lal", "split_nhd.lal"):
        (tmp_path / f).write_text((ROOT / "specs" / f).read_text())
    layer, par = _per_token_head()
    kv = torch.zeros(3, 4, 4, 2, 32, dtype=torch.uint8)[..., :16]
    res = Deriver(tmp_path).derive(layer, TensorLayout.of(kv), par, 3)
    assert res.family != "quant_packed"
    assert any("views bytes [0, 512) of a block but the page is 1024 bytes" in r for r in res.reasons), res.reasons


def test_a_tampered_view_is_refused_by_the_cache_or_fails_closed():
    from layoutalg.compile.codegen import compile_named
    from layoutalg.compile.compiled import GuardFailed, _merged, valid_entry
    from layoutalg.dsl.library import load
    import json
    entry = json.loads(json.dumps(compile_named(load([ROOT / "specs"]), "quant_packed").to_json()))
    assert valid_entry(entry)
    for views in ([["kv", [["data"]], [1]]], [["kv", [{"a": 1}], [1]]], [["kv", ["data", "nowhere"], [1]]],
                  [["kv", ["data"], [0]]], [["kv", ["data"]]]):
        assert not valid_entry({**entry, "views": views}), views
    with pytest.raises(GuardFailed, match="its dims hold 5 indices but its regions have 4"):
        _merged((2, 4, 2, 16), (128, 32, 16, 1), (1, 1, 3), "tensor 'kv'")

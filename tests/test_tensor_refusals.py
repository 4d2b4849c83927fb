"""Tensors a family never looked at, memory two groups share and byte views of another layout
are refused with the reason; a command that can do nothing says so and fails, never ends in a
traceback or in success."""
import subprocess
import sys

import pytest
import torch

from layoutalg import derive_canonical_mappings
from layoutalg.plans import reshard
from layoutalg.copy import direct
from layoutalg.copy.executor import plan
from layoutalg.errors import LayoutMismatch, SpecError
from layoutalg.dsl.library import load
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

from conftest import ROOT
from test_vllm_adapter import attention, cache_config, config, mla

N, T, L = 3, 4, 6  # blocks, tokens a block, latent elements


def _mla(x, rank=0):
    return derive_canonical_mappings(config(tp=2, rank=rank, total=1, dcp=2),
                                     cache_config([(mla(block_size=T, head_size=L, dtype=torch.int32), ["mla"])], N),
                                     {"mla": x})["mla"]


def test_mla_reads_a_row_major_tensor_and_keeps_its_view():
    x = torch.arange(N * T * L, dtype=torch.int32).view(N, T, L)
    m = _mla(x)
    assert m.format_id.startswith(Deriver().families["mla"].layout_id)  # certified, not the fallback
    (v,) = m.tensors
    assert (v.shape, v.strides, v.element, v.dtype) == ((T, L), (L, 1), 4, "torch.int32")
    with pytest.raises(LayoutMismatch, match="dimension 1 has stride 1, expected 6"):
        plan(m, torch.empty(N, L, T, dtype=torch.int32).transpose(1, 2))  # one size, another memory order


def test_a_column_major_mla_tensor_is_not_read_as_token_rows():
    """It was certified as MLA and stored 138 of 144 canonical elements in wrong places."""
    x = torch.empty(N, L, T, dtype=torch.int32).transpose(1, 2)
    res = Deriver().derive(LayerSpec("mla", T * L * 4, T, 1, L, 4), TensorLayout.of(x),
                           ParallelConfig(tp=2, total_kv_heads=1, dcp=2), N)
    assert (res.result, res.family) == ("opaque", "opaque")
    assert any("dimension 2 has stride 4, expected 1" in r for r in res.reasons), res.reasons
    # the fallback's page is the bytes as they lie, its view the tensor as given: a round trip holds
    m = res.mappings[0]
    assert m.tensors[0].strides == (1, 4)
    x.copy_(torch.arange(N * T * L, dtype=torch.int32).view(N, T, L))
    pages = torch.zeros(N, m.canonical_page_size_bytes, dtype=torch.uint8)
    p = plan(m, x)
    p.store(x, range(N), pages, range(N))
    back = torch.zeros_like(x)
    p.load(pages, range(N), back, range(N))
    assert torch.equal(back, x)


@pytest.mark.parametrize("shape, dtype, certified", [
    ((N, T, L), torch.int32, True),               # vLLM's (blocks, block_size, head_size)
    ((N, T * L * 4), torch.uint8, True),          # flat page bytes: nothing to contradict the rows
    ((N, T, 2, L // 2), torch.int32, True),       # a row in two halves: still token-major
    ((N, 2, T // 2, L), torch.int32, True),       # the tokens in two dims, row-major
    ((N, L, T), torch.int32, False),              # row-major, dense, page-sized: its rows are latents
    ((N, 2 * T, L // 2), torch.int32, False),     # half rows: no dim is the token
])
def test_an_mla_tensor_is_certified_only_where_its_dims_group_the_token_rows(shape, dtype, certified):
    """A dense row-major `(N, L, T)` tensor was certified and its latent rows read as tokens:
    under dcp=2 a store put them in other tokens' places."""
    x = torch.zeros(shape, dtype=dtype)
    res = Deriver().derive(LayerSpec("mla", T * L * 4, T, 1, L, 4), TensorLayout.of(x),
                           ParallelConfig(tp=2, total_kv_heads=1, dcp=2), N)
    assert (res.result == "certified") == certified, res.reasons
    if not certified:
        assert res.family == "opaque" and any("neither groups the other" in r for r in res.reasons), res.reasons


@pytest.mark.parametrize("dims, certified", [((192,), True), ((1, 192), True), ((2, 4, 2, 12), False)])
def test_quantised_split_kv_takes_a_given_tensor_only_as_flat_page_bytes(dims, certified):
    """Its page is the data, then the scales: a packed-looking (2, T, H, D + S) tensor,
    dense and page-sized, was certified and its rows read as the split regions."""
    x = torch.zeros((N, *dims), dtype=torch.uint8)
    layer = LayerSpec("attention", 192, 4, 2, 8, 1, True, sizes=(("kv_scales", 2), ("scale_bytes", 4)))
    res = Deriver().derive(layer, TensorLayout.of(x), ParallelConfig(tp=2, total_kv_heads=4), N)
    assert (res.result, res.family) == (("certified", "quant_split") if certified else ("opaque", "opaque"))
    if not certified:
        assert any("only as flat (blocks, page) elements" in r for r in res.reasons), res.reasons


def test_an_mla_tensor_of_other_blocks_than_the_layer_is_not_certified():
    x = torch.zeros(5, T, L, dtype=torch.int32)
    res = Deriver().derive(LayerSpec("mla", T * L * 4, T, 1, L, 4), TensorLayout.of(x),
                           ParallelConfig(tp=1, total_kv_heads=1), 3)
    assert res.result == "opaque" and any("5 blocks, the layer 3" in r for r in res.reasons), res.reasons


def test_a_uint8_view_of_another_layout_is_refused_and_of_the_right_one_copies_alike():
    H, D = 2, 2
    nhd = torch.randn(N, 2, T, H, D).to(torch.bfloat16)
    m = derive_canonical_mappings(config(tp=2, total=4),
                                  cache_config([(attention(block_size=T, heads=H, head_size=D), ["l"])], N),
                                  {"l": nhd})["l"]
    hnd = nhd.transpose(2, 3).contiguous().transpose(2, 3)  # the same values, HND in memory
    with pytest.raises(LayoutMismatch, match=r"kv \(bytes\) is not the tensor 'kv'.*dimension 2 has stride 4, "
                                             r"expected 8"):
        plan(m, hnd.view(torch.uint8))
    want = torch.zeros(N, m.canonical_page_size_bytes, dtype=torch.uint8)
    plan(m, nhd).store(nhd, range(N), want, range(N))
    for raw in (nhd.view(torch.uint8), nhd.view(torch.uint8).view(N, -1)):  # its byte view, its (blocks, page)
        got = torch.zeros_like(want)
        plan(m, raw).store(raw, range(N), got, range(N))
        assert torch.equal(got, want)


def _int_group(tp, tensors, total, d):
    """Every rank's mapping of a split NHD int32 layer of `total` heads at `tp`, for `tensors`."""
    spec = attention(block_size=T, heads=total // tp, head_size=d, dtype=torch.int32)
    return [derive_canonical_mappings(config(tp=tp, rank=r, total=total), cache_config([(spec, ["l"])], N),
                                      {"l": tensors[r]})["l"] for r in range(tp)]


def test_direct_reshard_refuses_a_consumer_sharing_memory_with_a_producer():
    """Producer by producer, the first scatter overwrote bytes the second producer was read from."""
    H, D, TOT = 2, 2, 4
    full = torch.arange(N * 2 * T * TOT * D, dtype=torch.int32).view(N, 2, T, TOT, D)

    buf = torch.zeros(2 * full.numel(), dtype=torch.int32)
    consumer = buf[:full.numel()].view(N, 2, T, TOT, D)
    p0, p1 = full[:, :, :, :H].contiguous(), buf[:full.numel() // 2].view(N, 2, T, H, D)
    p1.copy_(full[:, :, :, H:])
    plans = reshard.direct_plans(_int_group(2, [p0, p1], TOT, D), _int_group(1, [consumer], TOT, D))
    before = buf.clone()
    with pytest.raises(LayoutMismatch, match="producer 1 kv and the consumer kv share memory in the blocks asked for"):
        direct.execute(plans[0], [p0, p1], [0, 1], consumer, [0, 1])
    assert torch.equal(buf, before)  # nothing written


def test_direct_reshard_lets_a_consumer_share_a_producers_tensor_in_other_blocks():
    """The overlap check is by the blocks asked for: a producer read from memory the consumer
    holds blocks in, but not the blocks it fills, is no overlap (whole tensors were refused)."""
    H, D, TOT = 2, 2, 4
    full = torch.arange(N * 2 * T * TOT * D, dtype=torch.int32).view(N, 2, T, TOT, D)

    block = 2 * T * TOT * D  # a consumer block, in elements
    buf = torch.zeros(2 * full.numel(), dtype=torch.int32)
    consumer = buf[:full.numel()].view(N, 2, T, TOT, D)
    p0, p1 = full[:, :, :, :H].contiguous(), buf[2 * block:2 * block + full.numel() // 2].view(N, 2, T, H, D)
    p1.copy_(full[:, :, :, H:])  # its blocks 0 and 1 lie in the consumer's block 2
    plans = reshard.direct_plans(_int_group(2, [p0, p1], TOT, D), _int_group(1, [consumer], TOT, D))
    direct.execute(plans[0], [p0, p1], [0, 1], consumer, [0, 1])
    assert torch.equal(consumer[:2], full[:2])
    with pytest.raises(LayoutMismatch, match="producer 1 kv and the consumer kv share memory in the blocks"):
        direct.execute(plans[0], [p0, p1], [0, 1], consumer, [1, 2])  # block 2 is where producer 1 is read


def test_the_fallback_does_not_read_a_tensor_that_keeps_kv_outside_the_blocks():
    """At two blocks, (2, 2, ...) read block first stored K of both blocks as block 0's page."""
    t = TensorLayout((2, 2, T, 3, 8), (2 * T * 24, T * 24, 24, 8, 1), 1)  # quantised: no flash family serves it
    res = Deriver().derive(LayerSpec("attention", 2 * T * 3 * 8, T, 3, 8, 1, per_token_head_quant=True,
                                     sizes=(("kv_blocks_second", 1),)), t, ParallelConfig(tp=2, total_kv_heads=6), 2)
    assert res.result == "no_mappings" and not res.mappings
    assert any("opaque (fallback)" in r and "kv_blocks_second == 0" in r for r in res.reasons), res.reasons


def test_block_ids_on_the_meta_device_are_refused_clearly():
    x = torch.arange(N * T * L, dtype=torch.int32).view(N, T, L)
    m = _mla(x)
    pages = torch.zeros(N, m.canonical_page_size_bytes, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="meta device"):
        plan(m, x).store(x, torch.arange(N, device="meta"), pages, range(N))


def test_a_literal_element_below_one_byte_is_a_spec_error_with_a_caret(tmp_path):
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    text = (ROOT / "specs" / "split_nhd.lal").read_text().replace("element e bytes", "element 0 bytes")
    (tmp_path / "s.lal").write_text(text)
    with pytest.raises(SpecError) as e:
        load([tmp_path / "s.lal"])
    assert "s.lal:7:13" in str(e.value) and "at least 1" in str(e.value) and "^" in str(e.value)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_check_says_why_a_family_applies_nowhere(tmp_path):
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    text = (ROOT / "specs" / "split_nhd.lal").read_text().replace("index kv < 2, t < T", "index kv < 2, t < -T")
    (tmp_path / "s.lal").write_text(text)
    out = _cli("check", str(tmp_path / "s.lal"))
    assert out.returncode != 0
    assert "certified on no configuration" in out.stdout and "digit 't' has a negative extent" in out.stdout, out.stdout


def test_commands_that_would_do_nothing_or_crash_say_why(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = _cli("derive-corpus", str(empty))
    assert out.returncode == 2 and "holds no layer lines" in out.stdout + out.stderr and not out.stdout.strip(
        ).startswith("{")
    out = _cli("draw", "specs/split_nhd.lal", "-o", str(tmp_path / "no" / "such" / "x.svg"))
    assert out.returncode == 2 and "does not exist" in out.stdout + out.stderr and "Traceback" not in out.stderr
    out = _cli("reshard", "--family", "opaque", "--store", "tp=2", "--load", "tp=2", "--blocks", "2", "--layers", "1")
    assert out.returncode == 2 and "the library's fallback" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr


def test_a_plan_of_a_mapping_without_runs_is_refused():
    """Its load reported every block filled and filled none."""
    from layoutalg.errors import ConfigError
    from layoutalg.mapping import CanonicalPageMapping
    m = CanonicalPageMapping(64, 64, (), 1, 0, True)
    with pytest.raises(ConfigError, match="holds no run"):
        plan(m, torch.zeros(4, 64, dtype=torch.uint8))


# second look at the fixes above: what they must not refuse
def test_a_model_wide_flash_word_leaves_its_mamba_layers_opaque():
    """`kv_blocks_second = 1` is the attention layers' word; the fallback refusing it lost every
    Mamba layer of a hybrid model."""
    from test_vllm_adapter import mamba
    caches = {"l0.attn": torch.zeros(2, 3, 16, 2, 64, dtype=torch.bfloat16)}
    kv = cache_config([(attention(), ["l0.attn"]), (mamba(), ["l1.mamba"])])
    out = derive_canonical_mappings(config(tp=2, rank=0), kv, caches, sizes={"kv_blocks_second": 1})
    assert sorted(out) == ["l0.attn", "l1.mamba"]
    assert out["l0.attn"].parallelism_agnostic and not out["l1.mamba"].parallelism_agnostic


def test_an_fp8_cache_and_its_uint8_bytes_are_one_tensor():
    x = torch.zeros(N, T, L, dtype=torch.float8_e4m3fn)
    res = Deriver().derive(LayerSpec("mla", T * L, T, 1, L, 1), TensorLayout.of(x), ParallelConfig(tp=1, total_kv_heads=1), N)
    assert res.result == "certified"
    m = res.mappings[0]
    for kv in (x, x.view(torch.uint8)):  # vLLM keeps fp8 caches as uint8: either is the same bytes
        plan(m, kv)
    with pytest.raises(LayoutMismatch, match="another encoding"):
        plan(m, x.view(torch.float8_e5m2))


def test_one_producer_may_reshard_within_its_own_tensor():
    """It is gathered whole before the scatter: blocks 0, 1 into blocks 2, 3 of one tensor."""
    kv = torch.arange(4 * 2 * T * 2 * 2, dtype=torch.int32).view(4, 2, T, 2, 2)
    spec = attention(block_size=T, heads=2, head_size=2, dtype=torch.int32)
    (m,) = [derive_canonical_mappings(config(tp=1, rank=0, total=2), cache_config([(spec, ["l"])], 4), {"l": kv})["l"]]
    p, = reshard.direct_plans([m], [m])
    direct.execute(p, [kv], [0, 1], kv, [2, 3])
    assert torch.equal(kv[2:], kv[:2])


def test_quant_packed_refuses_vllms_default_nhd_strided_tensor_naming_the_stride():
    """vLLM's Triton backend states no KV layout, so its page takes LBNHC: physical (blocks,
    block_size, heads, cell) under the logical (blocks, heads, block_size, cell) view. quant_packed
    names (block, h, t, ...) with head-major strides: that tensor is neither certified as it nor
    copied by a plan of it, each naming the tensor, the dimension and both strides."""
    from test_page_formats import _per_token_head
    layer, par = _per_token_head()                       # 4 heads, block_size 4, a cell of 2 * 32 bytes
    nhd = torch.zeros(3, 4, 4, 64, dtype=torch.uint8).permute(0, 2, 1, 3)
    assert nhd.shape == (3, 4, 4, 64) and nhd.stride() == (1024, 64, 256, 1)
    res = Deriver().derive(layer, TensorLayout.of(nhd), par, 3)
    assert (res.result, res.family) == ("opaque", "opaque")
    assert "quant_packed: tensor (kv): dimension 1 has stride 64, expected 256 (elements)" in res.reasons, res.reasons
    m = Deriver().derive(layer, TensorLayout((3, 4, 4, 64), (1024, 256, 64, 1), 1, "torch.uint8"), par, 3).mappings[0]
    with pytest.raises(LayoutMismatch, match=r"kv is not the tensor 'kv' the mapping was derived for: dimension 1 "
                                             r"has stride 64, expected 256 \(elements\)"):
        plan(m, nhd)

"""`layoutalg conform` with vLLM 0.32's own writers, run on the CPU (`tools.vllm_writers`):
Triton's `triton_reshape_and_cache_flash` under the interpreter, the CPU attention backend's
`_C` cache op, the CPU Mamba ops and the CPU gated delta net op, with vLLM's own slot mapping
(DCP token dealing) and its layers' weight loaders (which heads, channels and groups a TP rank
holds). The shipped families
are what vLLM writes; mutants the prover proves are refuted by the real writers."""
import os

os.environ["TRITON_INTERPRET"] = "1"  # before vLLM decorates its kernels: run by Triton's interpreter

import pytest  # noqa: E402

from layoutalg.dsl.library import load  # noqa: E402
from layoutalg.params import parse_config  # noqa: E402
from layoutalg.tools import conform, vllm_writers as vw  # noqa: E402
from layoutalg.verify.prove.runner import Budgets, prove_obligation  # noqa: E402

from test_conform import B_REGION, MAMBA, X_REGION, _mutant  # noqa: E402

BLOCKS = conform.BLOCKS

FLASH = {"kv_blocks_second": 1}


def _check(family, config, writer, heads, head_size=8, block_size=4, names=None, specs=None, describe=None):
    return conform.check(family, parse_config(config), writer, heads=heads, block_size=block_size,
                         head_size=head_size, dtype="fp32", names=names, specs=specs, describe=describe)


def test_vllm_deals_heads_and_tokens_as_the_grid_says():
    """The two rules the writers take from vLLM, seen directly: QKVParallelLinear's K heads of a
    rank (contiguous; GQA replicas share one), and the block table's slot mapping at DCP 2."""
    assert vw.kv_heads(4, 2, 1, 8) == [2, 3] and vw.kv_heads(2, 4, 3, 8) == [1]
    s = vw.slots(4, 2, 1, 1, [1, 0], 16).tolist()  # dcp rank 1 keeps the odd tokens; page 0 in block 1
    assert s == [-1, 4, -1, 5, -1, 6, -1, 7, -1, 0, -1, 1, -1, 2, -1, 3]


ATTENTION = [("tp=2", 4), ("tp=4", 2), ("tp=2,dcp=2,interleave=2", 1)]  # heads cut; GQA replicas; DCP pairs


@pytest.mark.parametrize("family", ["split_nhd", "split_hnd", "flash_nhd", "flash_hnd"])
def test_attention_families_are_what_vllms_triton_writer_writes(family):
    for config, heads in ATTENTION:
        r = _check(family, config, vw.WRITERS[family](), heads, names=FLASH if "flash" in family else None)
        assert r.status == "conformant" and r.compared > 0, str(r)


@pytest.mark.parametrize("config, groups", [("tp=2", 2), ("tp=4", 4), ("tp=2", 1), ("tp=4", 1)])
def test_mamba2_is_what_vllms_cpu_mamba_ops_write(config, groups):
    """n_groups = 1 at tp 2 and 4: vLLM's loader gives every rank the one group (replicated)."""
    r = _check("mamba2", config, vw.mamba2(), heads=1, head_size=None, names=dict(MAMBA, n_groups=groups))
    assert r.status == "conformant" and r.compared > 0, str(r)


@pytest.mark.parametrize("config, groups", [("tp=2", 2), ("tp=4", 1)])
def test_mamba2_ds_is_what_vllms_cpu_mamba_ops_write_under_the_ds_conv_layout(config, groups):
    """VLLM_SSM_CONV_STATE_LAYOUT=DS: the conv state `(channels, conv_kernel - 1)` as vLLM's shape
    calculator gives it and its mixer hands the op; mamba2_ds's page (the SSM state as mamba2's)."""
    r = _check("mamba2_ds", config, vw.WRITERS["mamba2_ds"](), heads=1, head_size=None,
               names=dict(MAMBA, n_groups=groups, conv_dim_first=1))
    assert r.status == "conformant" and r.compared > 0, str(r)


def test_the_ds_conv_layout_is_not_mamba2s():
    """mamba2 (SD) read against vLLM writing its DS conv layout: the conv state lands transposed,
    refuted (so the test above can fail)."""
    ds = vw.mamba2()

    def write(sizes, rank, pages, page_of_block):
        ds(dict(sizes, conv_dim_first=1), rank, pages, page_of_block)
    r = _check("mamba2", "tp=2", write, heads=1, head_size=None, names=dict(MAMBA, n_groups=2),
               describe=vw.describe_mamba2(MAMBA))
    assert r.status == "refuted" and "rank" in str(r), str(r)


def test_mamba2_groups_vllm_will_not_shard_are_an_error():
    from layoutalg.errors import ConfigError
    with pytest.raises(ConfigError, match="n_groups % tp == 0 or n_groups == 1"):
        _check("mamba2", "tp=4", vw.mamba2(), heads=1, head_size=None, names=MAMBA)  # 2 groups, 4 ranks


def test_heads_dealt_round_robin_are_refuted_by_vllms_writer(tmp_path):
    specs = _mutant(tmp_path, "grids.lal", "fn head(h) = head_shard * heads + h",
                    "fn head(h) = h * shards + head_shard")
    lib = load([tmp_path / "split_nhd.lal"])
    assert prove_obligation(lib, "split_nhd", "writers-disjoint", {}, Budgets.of()).status == "proved"
    r = _check("split_nhd", "tp=2", vw.triton_flash("NHD"), 4, specs=specs, describe=vw.describe_kv(4, 8, 8))
    assert r.status == "refuted" and r.misplaced, str(r)
    m = r.misplaced[0]
    assert m.rank == 0 and "the writer put the element (K of token" in m.what and "head 1" in m.what, str(r)
    assert "the spec sends this byte to canonical byte" in m.what, str(r)


def test_a_mamba2_conv_row_b_x_c_is_refuted_by_vllms_writer(tmp_path):
    b_first = B_REGION.replace("offset X + j +", "offset j +") + X_REGION.replace("offset j +", "offset G * N + j +")
    specs = _mutant(tmp_path, "mamba2.lal", X_REGION + B_REGION, b_first)
    r = _check("mamba2", "tp=2", vw.mamba2(), heads=1, head_size=None, names=MAMBA, specs=specs,
               describe=vw.describe_mamba2(MAMBA))
    assert r.status == "refuted", str(r)
    m = r.misplaced[0]
    assert m.rank == 0 and m.block == 0 and "(conv step 0 of page 1, x channel 2)" in m.what, str(r)
    assert "the spec sends this byte to canonical byte 18" in m.what, str(r)  # x channel 2 sent after B


def test_the_cpu_backends_own_cache_write_against_packed_hnd():
    """vLLM's CPU attention backend allocates `(blocks, heads, block_size, 2 * head_size)`, the
    tensor packed HND describes, but its `_C` op writes a head's K of every token first (dim-major:
    a dim's tokens side by side) and then its V, not K|V side by side per token. Under TP a head's
    stretch moves whole, so the bytes land alike (conformant); where DCP changes a page's token
    count the spec sends them elsewhere (refuted): packed_hnd is not the CPU backend's layout."""
    write = vw.cpu_attn()
    r = _check("packed_hnd", "tp=2", write, 2, head_size=32, block_size=32)
    assert r.status == "conformant" and r.compared == 2 * 2 * 32 * 64 * 4, str(r)
    r = _check("packed_hnd", "tp=2,dcp=2", write, 1, head_size=32, block_size=32, describe=vw.describe_kv(1, 32, 128))
    assert r.status == "refuted", str(r)
    m = r.misplaced[0]
    assert m.rank == 0 and "K of token" in m.what and "the spec sends this byte" in m.what, str(r)


CPU = {"cpu_attn_layout": 1}  # what the adapter says of a layer on vLLM's CPU backend (its vec kernels)


@pytest.mark.parametrize("config, heads, tp", [("tp=2", 4, 2), ("tp=4", 2, 4), ("tp=2,dcp=2", 1, 2),
                                               ("tp=4,dcp=2,interleave=2", 2, 4)])
def test_cpu_attn_is_what_vllms_cpu_backend_writes(config, heads, tp):
    """The CPU backend's `_C` op, heads dealt by QKVParallelLinear's loader and DCP tokens by the
    block table's slot mapping: every byte where `cpu_attn` says (heads cut; GQA replicas, each
    written; DCP dealing tokens singly and in pairs). Every rank's every byte is compared."""
    r = _check("cpu_attn", config, vw.cpu_attn(), heads, head_size=32, block_size=32, names=CPU)
    per_rank = max(1, heads // tp) * 2 * 32 * 32 * 4 * BLOCKS  # its heads' K and V, fp32, every block
    assert r.status == "conformant" and r.compared == tp * per_rank, str(r)


@pytest.mark.parametrize("isa, block_size, head_size", [("vec16", 32, 32), ("vec", 16, 64), ("vec", 64, 80)])
def test_cpu_attn_holds_for_both_vec_kernels_and_other_sizes(isa, block_size, head_size):
    """vec16 (vLLM's kernel for head sizes of 16 but not 32 elements, or blocks not of 32 tokens)
    writes as vec does; so do other block and head sizes (no tiling by vector width)."""
    r = _check("cpu_attn", "tp=2,dcp=2", vw.cpu_attn(isa), 1, head_size=head_size, block_size=block_size, names=CPU)
    assert r.status == "conformant" and r.compared > 0, str(r)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cpu_attn_two_byte_elements_lie_where_fp32_ones_do(dtype):
    """Conform tags fp32 elements; the op puts bf16 and fp16 ones (tagged by their bit patterns,
    every one a distinct finite number) in the same places: one layout whatever the dtype."""
    import torch
    from vllm import _custom_ops as ops

    def places(dt, tags):
        n = tags.numel() // 2
        cache = torch.zeros(BLOCKS, 1, 32, 64, dtype=dt)
        k, v = cache.view(BLOCKS, 1, 64, 32).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(tags[:n].view(-1, 1, 32), tags[n:].view(-1, 1, 32), k, v,
                                       torch.arange(BLOCKS * 32), "vec")
        return cache
    n = 2 * BLOCKS * 32 * 32
    bits = (0x0400 + torch.arange(n)).to(torch.int16).view(getattr(torch, dtype))
    wide = places(torch.float32, torch.arange(n, dtype=torch.float32))
    assert torch.equal(places(bits.dtype, bits).view(torch.int16).long() - 0x0400, wide.long())


def test_packed_hnd_does_not_take_a_cpu_backend_layer():
    """Said to be the CPU backend's, the layer is no longer packed HND's (its guard refuses it)."""
    from layoutalg.errors import ConfigError
    with pytest.raises(ConfigError, match="cpu_attn_layout == 0"):
        _check("packed_hnd", "tp=2", vw.cpu_attn(), 2, head_size=32, block_size=32, names=CPU)


def test_the_command_names_vllms_writers():
    from layoutalg.cli.conform import _writer
    from layoutalg.errors import LayoutalgError
    r = _check("split_hnd", "tp=2", _writer("vllm", "split_hnd"), 2)
    assert r.status == "conformant", str(r)
    with pytest.raises(LayoutalgError, match="no vLLM writer runs aiter's layer on a CPU"):
        _writer("vllm", "aiter")


GDN = dict(gdn_k_heads=4, gdn_v_heads=4, gdn_k_dim=2, gdn_v_dim=3, conv_kernel=3, conv_bytes=2, ssm_bytes=2)
GDN_PREFILL = dict(GDN, gdn_k_heads=2, gdn_v_heads=2, gdn_k_dim=64, gdn_v_dim=64, ssm_bytes=4)
"""Small heads for the decode path; the prefill kernel (`_C.chunk_gated_delta_rule_cpu`) takes
key and value heads of one size, 64 or 128, only."""


def test_vllm_deals_gdn_channels_and_heads_in_contiguous_runs():
    """The rule the GDN writer takes from vLLM's loaders: each of q, k, v cut in tp runs, a
    rank's value heads the run its v rows hold."""
    own = vw.gdn_shards(dict(GDN, tp=2), 1)
    assert own["channels"].tolist() == [4, 5, 6, 7, 12, 13, 14, 15] + list(range(22, 28))
    assert own["v_heads"].tolist() == [2, 3]


@pytest.mark.parametrize("family, config, names, path", [
    ("gdn", "tp=2", GDN, "decode"), ("gdn", "tp=4", dict(GDN, ssm_bytes=4), "decode"),
    ("gdn_ds", "tp=2", dict(GDN, conv_dim_first=1), "decode"),
    ("gdn_ds", "tp=4", dict(GDN, conv_dim_first=1, conv_bytes=4, ssm_bytes=4), "decode"),
    ("gdn", "tp=2", GDN_PREFILL, "prefill"), ("gdn_ds", "tp=2", dict(GDN_PREFILL, conv_dim_first=1), "prefill")])
def test_gdn_is_what_vllms_cpu_gdn_op_writes(family, config, names, path):
    """vLLM's CPU GDN op (`cpu_gdn_attention_core`, its decode and its prefill path) writing each
    rank's conv state (SD and DS) and recurrent state, bf16 and fp32: every byte of every rank
    where gdn and gdn_ds say (the ranks' shares add up to the whole page, every block)."""
    r = _check(family, config, vw.gdn(path), heads=1, head_size=None, names=names, describe=vw.describe_gdn(names))
    k1 = names["conv_kernel"] - 1
    channels = 2 * names["gdn_k_heads"] * names["gdn_k_dim"] + names["gdn_v_heads"] * names["gdn_v_dim"]
    page = k1 * channels * names["conv_bytes"] + \
        names["gdn_v_heads"] * names["gdn_k_dim"] * names["gdn_v_dim"] * names["ssm_bytes"]
    assert r.status == "conformant" and r.compared == page * BLOCKS, str(r)


def test_gdn_value_heads_dealt_round_robin_are_refuted_by_vllms_gdn_op():
    """tests/data/conform/gdn_v_heads_round_robin: the recurrent state's value heads dealt
    round-robin. It tiles and its recurrent region is proved; vLLM's op gives rank 0 value heads
    0 and 1 (the spec: 0 and 2), so rank 0's second head is refuted."""
    from pathlib import Path
    from layoutalg.verify.prove.runner import page_tiles
    specs = Path(__file__).parent.parent / "data" / "conform" / "gdn_v_heads_round_robin"
    lib = load([specs / "gdn.lal"])
    assert page_tiles(lib, "gdn", "local").status == page_tiles(lib, "gdn", "canonical").status == "proved"
    assert prove_obligation(lib, "gdn.recurrent", "writers-disjoint", {}, Budgets.of()).status == "proved"
    r = _check("gdn", "tp=2", vw.gdn("decode"), heads=1, head_size=None, names=GDN, specs=str(specs),
               describe=vw.describe_gdn(GDN))
    assert r.status == "refuted", str(r)
    m = r.misplaced[0]
    assert m.rank == 0 and m.block == 0 and "(a recurrent state element)" in m.what, str(r)
    assert "the spec sends this byte to canonical byte" in m.what, str(r)
    assert _check("gdn", "tp=1", vw.gdn("decode"), heads=1, head_size=None, names=GDN,
                  specs=str(specs)).status == "conformant"  # one rank holds every head: alike

"""The reference's behaviour, case by case, with numbers worked out by hand."""
import pytest
import torch

from layoutalg import LayerSpec, ParallelConfig, TensorLayout
from conftest import load_all as load, store_all as store


def split_nhd(n, bs, h, d, dtype=torch.float16):
    return torch.zeros(n, 2, bs, h, d, dtype=dtype)


def split_hnd(n, bs, h, d, dtype=torch.float16):
    return torch.zeros(n, 2, h, bs, d, dtype=dtype).transpose(2, 3)


def packed_nhd(n, bs, h, d, dtype=torch.float16):
    return torch.zeros(n, bs, h, 2 * d, dtype=dtype).transpose(1, 2)


def packed_hnd(n, bs, h, d, dtype=torch.float16):
    return torch.zeros(n, h, bs, 2 * d, dtype=dtype)


def attention(t, bs, h, d):
    return LayerSpec("attention", t[0].numel() * t.element_size(), bs, h, d, t.element_size())


def derive(deriver, t, bs, h, d, **par):
    return deriver.derive(attention(t, bs, h, d), TensorLayout.of(t), ParallelConfig(**par), t.shape[0])


def test_single_rank_is_one_whole_page_run(deriver):
    t = split_nhd(3, 16, 8, 128)
    res = derive(deriver, t, 16, 8, 128, tp=1, total_kv_heads=8)
    (m,) = res.mappings
    assert res.result == "certified" and res.family == "split_nhd"
    assert [tuple(r) for r in m.runs] == [(0, 0, 65536, 1, 65536, 65536)]
    assert (m.canonical_page_size_bytes, m.num_writers, m.writer_index, m.parallelism_agnostic) == (65536, 1, 0, True)


def test_split_nhd_tp2_places_each_head_shard(deriver):
    # 4 heads of 8 fp16 elements = 16 B each; a token row is 32 B locally, 64 B canonically
    t = split_nhd(2, 4, 2, 8)
    res = derive(deriver, t, 4, 2, 8, tp=2, total_kv_heads=4)
    r0, r1 = res.mappings
    assert r0.canonical_page_size_bytes == 512 and r0.local_page_size_bytes == 256
    assert [tuple(r) for r in r1.runs] == [(0, 32, 32, 8, 32, 64)]  # K and V rows: one strided run
    assert [tuple(r) for r in r0.runs] == [(0, 0, 32, 8, 32, 64)]


def test_split_hnd_heads_are_contiguous_blocks(deriver):
    t = split_hnd(2, 4, 2, 8)
    res = derive(deriver, t, 4, 2, 8, tp=2, total_kv_heads=4)
    assert res.family == "split_hnd"
    # local half = 2 heads x 4 tokens x 16 B = 128 B; canonical half = 4 heads x 64 B = 256 B
    assert [tuple(r) for r in res.mappings[1].runs] == [(0, 128, 128, 2, 128, 256)]


def test_gqa_replicas_take_turns_writing(deriver):
    t = packed_nhd(4, 4, 1, 8)
    res = derive(deriver, t, 4, 1, 8, tp=4, total_kv_heads=2)
    assert [(m.num_writers, m.writer_index) for m in res.mappings] == [(2, 0), (2, 1), (2, 0), (2, 1)]
    assert res.mappings[0].runs == res.mappings[1].runs != res.mappings[2].runs
    assert [m.is_writer(5) for m in res.mappings] == [False, True, False, True]


def test_mla_latent_is_replicated_over_tp(deriver):
    layer = LayerSpec("mla", 16 * 576 * 2, 16, 1, 576, 2)
    res = deriver.derive(layer, None, ParallelConfig(tp=4, total_kv_heads=1, dcp=2, interleave=1))
    assert res.family == "mla"
    assert [(m.num_writers, m.writer_index) for m in res.mappings] == [(2, 0), (2, 0), (2, 1), (2, 1)]
    m1 = res.mappings[1]  # dcp_rank 1: odd tokens of a 32-token canonical block
    assert m1.canonical_page_size_bytes == 2 * 16 * 1152
    assert [tuple(r) for r in m1.runs] == [(0, 1152, 1152, 16, 1152, 2304)]
    assert not m1.parallelism_agnostic


def test_context_parallel_token_interleave(deriver):
    # pcp=2, dcp=2, interleave=2: local token l of cp rank c is canonical ((l//2)*4 + c)*2 + l%2
    t = packed_hnd(1, 4, 1, 1, dtype=torch.uint8)  # one head, 2-byte rows
    res = derive(deriver, t, 4, 1, 1, tp=2, total_kv_heads=1, pcp=2, dcp=2, interleave=2)
    for rank, m in enumerate(res.mappings):
        cp_rank = (rank // 2) * 2 + rank % 2          # pcp_rank * dcp + dcp_rank
        rows = {lo // 2: co // 2 for r in m.runs for lo, co, n in r.triples() for lo, co in
                [(lo + k, co + k) for k in range(0, n, 2)]}
        assert rows == {l: ((l // 2) * 4 + cp_rank) * 2 + l % 2 for l in range(4)}
        assert m.canonical_page_size_bytes == 4 * 8


@pytest.mark.parametrize("change,result", [
    (dict(per_token_head_quant=True), "opaque"),
    (dict(par=dict(tp=3, total_kv_heads=2)), "opaque"),                      # 2 heads over 3 ranks
    (dict(par=dict(tp=2, total_kv_heads=4, dcp=2, pcp=1, interleave=3)), "opaque"),  # 4 % 3
    (dict(par=dict(tp=2, total_kv_heads=4, world_size=4)), "no_mappings"),   # pipeline parallel
    (dict(par=dict(tp=2, total_kv_heads=4, dcp=2)), "opaque"),               # DCP without replicas
    (dict(heads=4), "opaque"),                                               # local heads != 4 // 2
    (dict(tensor=None), "no_mappings"),  # sizes alone: its bytes lie as an NHD or HND tensor says
    (dict(stride_fix=True), "opaque"),                                       # unrecognised strides
])
def test_fail_closed(deriver, change, result):
    t = split_nhd(2, 4, 2, 8)
    par = change.get("par", dict(tp=2, total_kv_heads=4))
    layer = attention(t, 4, change.get("heads", 2), 8)
    if "per_token_head_quant" in change:
        layer = LayerSpec(**{**layer.__dict__, "per_token_head_quant": True})
    tensor = TensorLayout.of(t)
    if change.get("stride_fix"):
        tensor = TensorLayout(tensor.shape, (tensor.stride[0], tensor.stride[1], 16, 16, 1), 2)
    if "tensor" in change:
        tensor = None
    res = deriver.derive(layer, tensor, ParallelConfig(**par), 2)
    assert res.result == result
    if result == "opaque":
        ranks = par["tp"] * par.get("pcp", 1)
        page = layer.page_size_bytes
        assert [tuple(m.runs[0]) for m in res.mappings] == [(0, r * page, page, 1, page, page) for r in range(ranks)]
        assert all(m.canonical_page_size_bytes == ranks * page and not m.parallelism_agnostic for m in res.mappings)
        assert res.reasons  # says why each candidate family did not apply


def test_mamba_is_opaque_and_unknown_page_is_omitted(deriver):
    res = deriver.derive(LayerSpec("mamba", 3072), None, ParallelConfig(tp=4, total_kv_heads=8))
    assert res.result == "opaque" and res.mappings[3].runs[0].canonical_offset == 9216
    assert deriver.derive(LayerSpec("mamba", None), None, ParallelConfig(tp=4, total_kv_heads=8)).result == "omitted"


def hashed(shape):
    """Every element a distinct value derived from its coordinate (the TensorRT-LLM oracle)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.int64) * 2654435761 % 65521).to(torch.int16).reshape(shape)


@pytest.mark.parametrize("make,hdim", [(split_nhd, 3), (split_hnd, 3), (packed_nhd, 1), (packed_hnd, 1)])
def test_store_under_tp2_load_under_tp4(deriver, make, hdim):
    """Bytes stored by a tp=2 group come back to a tp=4 group where tp=4 expects them."""
    n, bs, total, d = 5, 4, 4, 8
    full = make(n, bs, total, d, dtype=torch.int16)
    full.copy_(hashed(full.shape))

    def shards(tp):
        h = max(1, total // tp)
        out = []
        for r in range(tp):
            local = make(n, bs, h, d, dtype=torch.int16)
            local.copy_(full.narrow(hdim, (r // max(1, tp // total)) * h, h))
            out.append(local)
        return out

    layer2 = attention(shards(2)[0], bs, 2, d)
    canonical = torch.zeros(n, layer2.page_size_bytes * 2, dtype=torch.uint8)
    for local, m in zip(shards(2), derive(deriver, shards(2)[0], bs, 2, d, tp=2, total_kv_heads=total).mappings):
        store(local, canonical, m)
    reference = make(n, bs, total, d, dtype=torch.int16)
    reference.copy_(full)
    single = derive(deriver, reference, bs, total, d, tp=1, total_kv_heads=total).mappings[0]
    back = make(n, bs, total, d, dtype=torch.int16)
    load(canonical, back, single)
    assert torch.equal(back, full)  # the canonical page is the single-rank page
    for want, m in zip(shards(4), derive(deriver, shards(4)[0], bs, 1, d, tp=4, total_kv_heads=total).mappings):
        got = make(n, bs, 1, d, dtype=torch.int16)
        load(canonical, got, m)
        assert torch.equal(got, want)


def test_unrecognised_tensor_says_which_dimension_and_stride(deriver):
    t = split_nhd(2, 4, 2, 8)
    tensor = TensorLayout.of(t)
    bad = TensorLayout(tensor.shape, (tensor.stride[0], tensor.stride[1], 16, 16, 1), 2)
    res = deriver.derive(attention(t, 4, 2, 8), bad, ParallelConfig(tp=2, total_kv_heads=4), 2)
    assert res.result == "opaque"
    assert "split_nhd: KV tensor dimension 3 (h) has stride 16, expected 8 (elements)" in res.reasons
    assert "packed_nhd: needs a KV tensor of 4 dimensions" in res.reasons


def test_copies_reject_pages_that_do_not_fit(deriver):
    from layoutalg.errors import LayoutMismatch
    t = split_nhd(2, 4, 2, 8)
    m = derive(deriver, t, 4, 2, 8, tp=2, total_kv_heads=4).mappings[0]
    small = torch.zeros(2, m.canonical_page_size_bytes - 1, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match=r"store: pages must be a \(num_pages, 512\) uint8 tensor, got "
                                             r"\(\(2, 511\), torch.uint8\)"):
        store(t, small, m)
    overlapping = torch.zeros(768, dtype=torch.uint8).as_strided((2, 512), (256, 1))
    with pytest.raises(LayoutMismatch, match=r"store: pages tensor, dimension 0 \(block\): stride 256 elements "
                                             r"\(256 bytes\), expected at least 512 bytes"):
        store(t, overlapping, m)
    with pytest.raises(LayoutMismatch, match=r"plan: kv is not the tensor 'kv' the mapping was derived for: shape "
                                             r"\(2, 1, 4, 2, 8\) is not \(2, 2, 4, 2, 8\)"):
        load(torch.zeros(2, 512, dtype=torch.uint8), t[:, :1], m)
    with pytest.raises(LayoutMismatch, match=r"plan: kv \(bytes\) is not the tensor 'kv' the mapping was derived for: "
                                             r"shape \(2, 1, 4, 2, 16\) is not \(2, 2, 4, 2, 16\)"):
        load(torch.zeros(2, 512, dtype=torch.uint8), t[:, :1].view(torch.uint8), m)  # bytes, a page too short
    offset_view = torch.zeros(2 * 128 + 64, dtype=torch.float16)[64:].view(2, 2, 4, 2, 8)
    load(torch.zeros(2, 512, dtype=torch.uint8), offset_view, m)  # a view at an offset is fine

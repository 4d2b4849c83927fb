"""ROCm AITER's layout, (blocks, 2, block_size, heads * head_size): a spec file and a declared
name (`aiter_kv`) settle what the tensor alone cannot at heads == 2, where it has packed
HND's shape and strides."""
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

TOTAL, BS, D, N = 4, 4, 8, 6



def _derive(deriver, tp, total=TOTAL, aiter=1):
    h = max(1, total // tp)
    kv = torch.zeros(N, 2, BS, h * D, dtype=torch.bfloat16)
    res = deriver.derive(LayerSpec("attention", kv[0].numel() * 2, BS, h, D, 2, sizes={"aiter_kv": aiter}),
                         TensorLayout.of(kv), ParallelConfig(tp, total), N)
    return res, kv


def test_the_declared_name_settles_heads_two(deriver):
    """Two local heads: packed HND's shape and strides. Said to be AITER, it is read as AITER."""
    as_packed, _ = _derive(deriver, 2, total=4, aiter=0)
    as_aiter, _ = _derive(deriver, 2, total=4, aiter=1)
    assert (as_packed.result, as_packed.family) == ("certified", "packed_hnd")
    assert (as_aiter.result, as_aiter.family) == ("certified", "aiter")
    assert as_packed.mappings != as_aiter.mappings        # the two readings put bytes in other places


def test_aiter_moves_the_bytes_split_nhd_does(deriver):
    """Its bytes are split NHD's (heads and dims merged in one row): the same runs on every rank."""
    res, kv = _derive(deriver, 2)
    split = deriver.derive(LayerSpec("attention", kv[0].numel() * 2, BS, 2, D, 2),
                           TensorLayout.of(kv.view(N, 2, BS, 2, D)), ParallelConfig(2, TOTAL), N)
    assert split.family == "split_nhd"
    assert [m.runs for m in res.mappings] == [m.runs for m in split.mappings]
    assert res.mappings[0].layout_id != split.mappings[0].layout_id  # a format of its own


def _coordinates():
    """The whole model's KV: each element a hash of (block, kv, token, head, dim)."""
    b, kv, t, h, d = torch.meshgrid(*(torch.arange(n) for n in (N, 2, BS, TOTAL, D)), indexing="ij")
    return ((((b * 2 + kv) * BS + t) * TOTAL + h) * D + d).to(torch.int16)


def _shard(full, tp, rank):
    h = max(1, TOTAL // tp)
    first = rank * h if TOTAL >= tp else rank // (tp // TOTAL)
    return full[:, :, :, first:first + h, :].reshape(N, 2, BS, h * D).contiguous()


@pytest.mark.parametrize("src, dst", [(2, 4), (4, 1), (1, 8), (8, 2)])
def test_store_under_one_tp_load_under_another(deriver, src, dst):
    full = _coordinates()
    stored, _ = _derive(deriver, src)
    loaded, like = _derive(deriver, dst)
    assert stored.family == loaded.family == "aiter"
    pages = torch.zeros(N, stored.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    ids = torch.tensor([4, 0, 5, 2, 1, 3])
    for rank, m in enumerate(stored.mappings):  # the coordinates' bits, in the bf16 tensor derived for
        kv = _shard(full, src, rank).view(torch.bfloat16)
        plan(m, kv).store(kv, torch.arange(N), pages, ids)
    for rank, m in enumerate(loaded.mappings):
        kv = torch.zeros(like.shape, dtype=torch.bfloat16)
        plan(m, kv).load(pages, ids, kv, torch.arange(N))
        assert torch.equal(kv.view(torch.int16), _shard(full, dst, rank)), (src, dst, rank)


def test_a_name_given_outside_its_domain_takes_no_family_but_the_fallback(deriver):
    """aiter_kv = 3 is no backend: the packed family, which does not read the name, must not take it."""
    res, _ = _derive(deriver, 2, total=4, aiter=3)
    assert (res.result, res.family) == ("opaque", "opaque")
    assert "aiter_kv = 3 is outside the proved domain [0, 2]" in res.reasons[0]

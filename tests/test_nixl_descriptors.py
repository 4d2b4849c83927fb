"""The descriptor lists a NIXL direct reshard hands to each transfer (`tools.nixl.descriptors`),
with no NIXL: built from real direct plans, applied here with memmove, they fill the consumer
exactly as the torch executor (`copy.execute`) does; contiguous runs are merged, and the count
is what the layout says; the executors' checks refuse what `copy.gather`/`scatter` refuse."""
import ctypes

import numpy as np
import pytest
import torch

from layoutalg.copy.direct import execute
from layoutalg.errors import LayoutalgError
from layoutalg.plans.reshard import DirectPlan, DirectRun, direct_plans
from layoutalg.tools.distributed import group_of, parse_config
from layoutalg.tools.nixl import (Stretches, consumer_side, descriptors, merged, producer_side, registered)

HEADS, BLOCK, HEAD = 4, 4, 16


def groups(family, store, load, heads=HEADS, blocks=6):
    names = {"kv_blocks_second": 1} if family.startswith("flash") else None  # FlashAttention's (2, blocks, ...)
    a = group_of(family, parse_config(store), heads, BLOCK, HEAD, "fp16", blocks, names=names)
    b = group_of(family, parse_config(load), heads, BLOCK, HEAD, "fp16", blocks, names=names)
    return a, b


def _random(group, seed):
    g = torch.Generator().manual_seed(seed)
    kv = group.empty()
    raw = kv.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, generator=g, dtype=torch.uint8))
    return kv


def _applied(rows):
    for src, dst, n in rows.tolist():
        ctypes.memmove(dst, src, n)


@pytest.mark.parametrize("family,store,load", [("split_nhd", "tp=2", "tp=4"), ("split_hnd", "tp=2", "tp=4"),
                                               ("split_nhd", "tp=4", "tp=2"), ("flash_nhd", "tp=2", "tp=4")])
def test_descriptors_fill_the_consumer_as_the_torch_executor_does(family, store, load):
    a, b = groups(family, store, load)
    plans = direct_plans(a.mappings, b.mappings)
    producers = [_random(a, r) for r in range(a.world)]
    src_blocks, dst_blocks = [5, 0, 3, 1], [2, 4, 0, 5]  # shuffled, and not every block
    for plan in plans:
        want, got = b.empty().zero_(), b.empty().zero_()
        execute(plan, producers, src_blocks, want, dst_blocks)
        for p in plan.producers():
            src, sb = producer_side(plan, p, producers[p], src_blocks)
            dst, db = consumer_side(plan, p, got, dst_blocks)
            rows = descriptors(plan, p, src, dst, sb, db)
            assert rows.shape[1] == 3 and (rows[:, 2] > 0).all()
            assert rows[:, 2].sum() == plan.bytes_from(p) * len(src_blocks)  # every byte once, no more
            _applied(rows)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (family, plan.consumer)


def test_contiguous_runs_merge_and_the_count_is_the_layouts():
    # split HND (kv, head, token, dim): at tp=2 -> tp=4 a consumer's page is, for K and for V, one head of
    # its producer's two: one stretch of BLOCK * HEAD * 2 bytes each, so one descriptor per (block, K|V)
    a, b = groups("split_hnd", "tp=2", "tp=4")
    plan = direct_plans(a.mappings, b.mappings)[1]
    (p,) = plan.producers()
    src, dst = Stretches((1 << 20,), (a.mappings[0].local_page_size_bytes,)), \
        Stretches((1 << 30,), (b.mappings[0].local_page_size_bytes,))
    fragments = descriptors(plan, p, src, dst, [0, 1, 2], [0, 1, 2], merge=False)
    rows = descriptors(plan, p, src, dst, [0, 1, 2], [0, 1, 2])
    assert rows.shape[0] == 3 * 2 and fragments.shape[0] >= rows.shape[0]
    assert (rows[:, 2] == BLOCK * HEAD * 2).all()
    # consecutive blocks on both sides, and the whole page moved (tp=2 -> tp=2): one descriptor for all
    a2, b2 = groups("split_hnd", "tp=2", "tp=2")
    same = direct_plans(a2.mappings, b2.mappings)[0]
    page = a2.mappings[0].local_page_size_bytes
    whole = descriptors(same, 0, Stretches((1 << 20,), (page,)), Stretches((1 << 30,), (page,)), range(6), range(6))
    assert whole.tolist() == [[1 << 20, 1 << 30, 6 * page]]
    # the same blocks in another order on one side: no two blocks continue each other
    apart = descriptors(same, 0, Stretches((1 << 20,), (page,)), Stretches((1 << 30,), (page,)),
                        [1, 0, 3, 2, 5, 4], range(6))
    assert apart.shape[0] == 6


def test_merging_joins_only_rows_that_continue_on_both_sides():
    rows = np.array([[0, 100, 4], [4, 104, 4], [8, 200, 4], [12, 204, 4], [20, 208, 4]], dtype=np.int64)
    assert merged(rows).tolist() == [[0, 100, 8], [8, 200, 8], [20, 208, 4]]
    assert merged(rows[:1]).tolist() == [[0, 100, 4]]


def test_descriptors_cut_where_a_page_lies_in_stretches_apart():
    # FlashAttention's (2, blocks, ...): K of every block, then V of every block: each side two stretches
    a, b = groups("flash_nhd", "tp=2", "tp=4")
    plan = direct_plans(a.mappings, b.mappings)[0]
    kv = _random(a, 0)
    src, _ = producer_side(plan, 0, kv, [0])
    assert len(src.addresses) == 2 and src.addresses[1] - src.addresses[0] == kv.stride(0) * kv.element_size()


def test_the_checks_refuse_what_the_torch_executor_refuses():
    a, b = groups("split_nhd", "tp=2", "tp=4")
    plan = direct_plans(a.mappings, b.mappings)[0]
    kv = a.empty()
    with pytest.raises(LayoutalgError, match="outside"):
        producer_side(plan, 0, kv, [0, a.blocks])
    with pytest.raises(LayoutalgError, match="repeats"):
        consumer_side(plan, 0, b.empty(), [1, 1])
    with pytest.raises(LayoutalgError):
        producer_side(plan, 0, b.empty(), [0])  # the consumer's tensor is not the producer's
    with pytest.raises(LayoutalgError, match="producer rank"):
        producer_side(plan, -1, kv, [0])
    bad = plan._replace(runs=(DirectRun(0, 0, 0, 10 ** 9, 1, 0, 0),))
    with pytest.raises(LayoutalgError, match="past"):
        consumer_side(bad, 0, b.empty(), [0])
    with pytest.raises(LayoutalgError):
        consumer_side(DirectPlan(0, (DirectRun(0, 0, 0, 4, 2, 4, 0),), 8, 8), 0, torch.zeros(2, 8, dtype=torch.uint8),
                      [0])  # one consumer byte written twice


def test_each_storage_is_registered_once():
    buf = torch.zeros(2, 4, 8, dtype=torch.uint8)
    regions = registered([buf[0], buf[1], [buf[0], buf[1]]])
    assert regions == [(buf.data_ptr(), buf.numel(), 0, "cpu")]

"""A copy plan refuses what it cannot copy exactly, before the first byte moves: the tensor, the
ids, the mapping's runs; and a store writes only its own bytes."""
from __future__ import annotations

import re

import pytest
import torch

from layoutalg import LayerSpec, ParallelConfig, TensorLayout
from layoutalg.errors import ConfigError, LayoutalgError, LayoutMismatch
from layoutalg.mapping import CanonicalPageMapping, CopyRun
from layoutalg.copy.executor import plan
from layoutalg.copy.views import page_bytes

from conftest import load_all as load, store_all as store




def mapping_for(deriver, kv: torch.Tensor, tp=2, rank=0, total=4) -> CanonicalPageMapping:
    """What the runtime derives for `kv` as an attention layer of 2 KV heads a rank."""
    layer = LayerSpec("attention", kv[0].numel() * kv.element_size(), kv.shape[2], 2, kv.shape[-1],
                      kv.element_size())
    return deriver.derive(layer, TensorLayout.of(kv), ParallelConfig(tp=tp, total_kv_heads=total),
                          kv.shape[0]).mappings[rank]


def random_bytes(shape, dtype, seed):
    """Seeded random bytes seen as `dtype` (the last dimension shrinks by its element size)."""
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed)).view(dtype)


def split_nhd(n=3, bs=4, h=2, d=8, seed=0):
    return random_bytes((n, 2, bs, h, d * 2), torch.uint8, seed).view(torch.float16)


def test_a_padded_view_is_refused(deriver):
    """`kv[..., :64]` of a 128-wide tensor: each block's bytes are not one page in memory."""
    full = split_nhd(d=16)
    kv = full[..., :8]
    m = mapping_for(deriver, kv)
    assert m.num_writers == 1 and not m.parallelism_agnostic  # its strides are no family's: the fallback
    with pytest.raises(LayoutMismatch, match=re.escape("plan: kv tensor, dimension 3: stride 16 elements, "
                                                       "expected 8 for each block to be one dense page")):
        plan(m, kv)


def test_a_dense_block_in_another_dimension_order_is_accepted(deriver):
    """A transposed view whose blocks are still one page each: the fallback round trip is exact."""
    kv = random_bytes((3, 2, 2, 4, 16), torch.uint8, 1).view(torch.float16).transpose(2, 3)  # HND memory, NHD view
    m = mapping_for(deriver, kv)
    canonical = torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8)
    store(kv, canonical, m)
    back = torch.zeros(3, 2, 2, 4, 8, dtype=torch.float16).transpose(2, 3)
    load(canonical, back, m)
    assert torch.equal(back.view(torch.int16), kv.view(torch.int16))


@pytest.mark.parametrize("op,pages", [("load", 1), ("store", 2)])
def test_ids_past_the_pages_given_are_refused(deriver, op, pages):
    kv = split_nhd()
    m = mapping_for(deriver, kv)
    short = torch.zeros(pages, m.canonical_page_size_bytes, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match=rf"{op}: page_ids holds {pages}, outside the {pages} there are "
                                             rf"\(valid: 0 to {pages - 1}\)"):
        load(short, kv, m) if op == "load" else store(kv, short, m)


@pytest.mark.parametrize("blocks,message", [
    (torch.tensor([-1]), "store: block_ids holds -1, outside the 3 there are (valid: 0 to 2)"),
    (torch.tensor([0, 3]), "store: block_ids holds 3, outside the 3 there are (valid: 0 to 2)"),
    (torch.tensor([2, 0, 2]), "store: page_ids repeats an id: two sources would write one destination"),
    (torch.tensor([0, 1], dtype=torch.int32), "store: block_ids must be a 1-D int64 tensor or a sequence of ints, "
                                              "got 1-D torch.int32"),
    (torch.tensor([[0, 1]]), "store: block_ids must be a 1-D int64 tensor or a sequence of ints, got 2-D "
                             "torch.int64"),
    ({0, 1}, "store: block_ids must be a 1-D int64 tensor or a sequence of ints, got a set"),
])
def test_block_ids_are_checked(deriver, blocks, message):
    kv = split_nhd()
    m = mapping_for(deriver, kv)
    with pytest.raises(LayoutMismatch, match=re.escape(message)):
        store(kv, torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8), m, blocks)


def test_selected_blocks_are_stored_and_no_others(deriver):
    kv = split_nhd()
    m = mapping_for(deriver, kv, tp=1, total=2)
    canonical = torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8)
    store(kv, canonical, m, torch.tensor([2, 0]))
    pages = page_bytes(kv, m.local_page_size_bytes)
    assert torch.equal(canonical[0], pages[0]) and torch.equal(canonical[2], pages[2])
    assert not canonical[1].any()


def overrunning(m: CanonicalPageMapping) -> CanonicalPageMapping:
    """`m` with a last run that reaches past the end of the local page (into the next block)."""
    page = m.local_page_size_bytes
    runs = (CopyRun(0, 0, 8, 1, 8, 8), CopyRun(page - 8, 8, 16, 1, 16, 16))
    return CanonicalPageMapping(m.canonical_page_size_bytes, page, runs, 1, 0, False)


def no_writers(m: CanonicalPageMapping) -> CanonicalPageMapping:
    return CanonicalPageMapping(m.canonical_page_size_bytes, m.local_page_size_bytes, m.runs, 0, 0, False)


# (local, canonical, mapping, block ids) of a call to refuse, from a 16-wide tensor `full`, its
# dense 8-wide copy `kv`, a canonical tensor and kv's mapping
REJECTED = {
    "padded view": lambda full, kv, can, m: (full[..., :8], can, m, None),
    "block counts": lambda full, kv, can, m: (kv, can[:2], m, None),
    "negative id": lambda full, kv, can, m: (kv, can, m, torch.tensor([0, -1])),
    "duplicate ids": lambda full, kv, can, m: (kv, can, m, torch.tensor([1, 1])),
    "run past the page": lambda full, kv, can, m: (kv, can, overrunning(m), None),
    "no writers": lambda full, kv, can, m: (kv, can, no_writers(m), None),
}
TAKES_IDS = {"negative id", "duplicate ids"}  # load copies every block: it takes no block ids


@pytest.mark.parametrize("op,case", [(op, case) for case in sorted(REJECTED) for op in ("store", "load")
                                     if op == "store" or case not in TAKES_IDS])
def test_a_rejected_call_leaves_both_tensors_untouched(deriver, op, case):
    full = split_nhd(d=16, seed=2)
    kv = full[..., :8].contiguous()
    m = mapping_for(deriver, kv)
    canonical = random_bytes((3, m.canonical_page_size_bytes), torch.uint8, 3)
    local, can, mapping, blocks = REJECTED[case](full, kv, canonical, m)
    before = [t.clone() for t in (full, kv, canonical)]
    with pytest.raises(LayoutalgError):
        store(local, can, mapping, blocks) if op == "store" else load(can, local, mapping)
    for was, now in zip(before, (full, kv, canonical)):
        assert torch.equal(was.view(torch.uint8), now.view(torch.uint8))


def test_a_mapping_run_outside_the_page_is_named(deriver):
    kv = split_nhd()
    m = overrunning(mapping_for(deriver, kv))
    with pytest.raises(ConfigError, match=re.escape(f"plan: run 1 ({m.local_page_size_bytes - 8}, 8, 16, 1, 16, 16) "
                                                    f"reaches local bytes [{m.local_page_size_bytes - 8}, "
                                                    f"{m.local_page_size_bytes + 8})")):
        load(torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8), kv, m)


def test_not_a_tensor_is_named():
    m = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True)
    with pytest.raises(LayoutMismatch, match=r"plan: kv must be a torch.Tensor, got list"):
        plan(m, [1, 2])


def test_a_store_writes_only_its_own_bytes_so_ranks_sharing_pages_never_race(deriver, monkeypatch):
    """Rank 1 stores while rank 0's store is under way (forced: right when rank 0 copies its
    first run). A store that copied pages out and wrote them back whole lost rank 1's bytes."""
    from layoutalg.copy import executor
    kvs = [torch.full((3, 2, 4, 1, 8), 257 * (r + 1), dtype=torch.int16) for r in range(2)]
    m0, m1 = (mapping_for(deriver, kvs[0], tp=2, rank=r, total=2) for r in range(2))
    pages = torch.zeros(3, m0.canonical_page_size_bytes, dtype=torch.uint8)
    copy_run, fired = executor.copy_run, []

    def meanwhile(*args, **kw):
        if not fired:
            fired.append(1)
            monkeypatch.setattr(executor, "copy_run", copy_run)
            store(kvs[1], pages, m1)          # the other rank, in between
            monkeypatch.setattr(executor, "copy_run", meanwhile)
        return copy_run(*args, **kw)

    monkeypatch.setattr(executor, "copy_run", meanwhile)
    store(kvs[0], pages, m0)
    assert fired and int((pages == 1).sum()) == int((pages == 2).sum()) == 3 * m0.local_page_size_bytes


@pytest.mark.parametrize("run, message", [
    (CopyRun(0, 0, 4.0, 1, 4, 4), r"run 1 is .* expected a CopyRun of six integers"),
    (CopyRun(0, 0, True, 1, 4, 4), r"run 1 is .* expected a CopyRun of six integers"),
    (CopyRun(8, 8, 1, 2 ** 34, 0, 0), r"run 1 .* its local fragments overlap \(stride 0 < fragment 1\)"),
    (CopyRun(8, 8, 4, 1, -4, 4), r"run 1 .* has a negative local stride"),
])
def test_hand_built_runs_are_refused_before_any_byte_moves(run, message):
    from layoutalg.copy.executor import plan
    m = CanonicalPageMapping(16, 16, (CopyRun(0, 0, 8, 1, 8, 8), run), 1, 0, True)
    kv = torch.arange(32, dtype=torch.uint8).reshape(2, 16)
    pages = torch.zeros(2, 16, dtype=torch.uint8)
    for call in (lambda: plan(m, kv), lambda: store(kv, pages, m), lambda: load(pages, kv.clone(), m)):
        with pytest.raises(ConfigError, match=message):
            call()
    assert not pages.any()


def _bypassed(cls, values):
    """A record of `values` built past its constructor, as unpickling a protocol 0 or 1 pickle
    does (`copyreg._reconstructor`)."""
    import copyreg
    return copyreg._reconstructor(cls, tuple, tuple(values))


@pytest.mark.parametrize("build", ["by_hand", "bypassed", "at"])
def test_a_run_however_built_is_refused_by_its_values_before_any_byte_moves(build):
    """A plan checks what it moves by the run's values, not by how the run was made: by hand,
    past its constructor, or moved by `Run.at` to a negative offset."""
    bad = (-4, 0, 4, 1, 4, 4)
    run = {"by_hand": lambda: CopyRun(*bad), "bypassed": lambda: _bypassed(CopyRun, bad),
           "at": lambda: CopyRun(0, 0, 4, 1, 4, 4).at("src", -4, 0)}[build]()
    assert not run.sound
    m = CanonicalPageMapping(16, 16, (CopyRun(4, 4, 8, 1, 8, 8), run), 1, 0, True)
    kv = torch.arange(48, dtype=torch.uint8).reshape(3, 16)[1:]  # a byte before it is another block's
    pages, before = torch.zeros(2, 16, dtype=torch.uint8), kv.clone()
    for call in (lambda: plan(m, kv), lambda: store(kv, pages, m), lambda: load(pages, kv, m)):
        with pytest.raises(ConfigError, match=r"run 1 .* has a negative local offset"):
            call()
    assert not pages.any() and torch.equal(kv, before)
    assert CopyRun(0, 0, 4, 1, 4, 4).at("src", 2.5, 0).sound is False  # a float offset: unsound by its values


@pytest.mark.parametrize("protocol", range(6))
def test_runs_and_plans_pickle_through_their_checking_constructors(protocol):
    import pickle
    from layoutalg.plans.reshard import DirectPlan, DirectRun
    good, bad = CopyRun(0, 4, 4, 2, 8, 8), CopyRun(0, 0, 8, 2, 4, 8)
    assert pickle.loads(pickle.dumps(good, protocol)).sound and not pickle.loads(pickle.dumps(bad, protocol)).sound
    plan_ = DirectPlan(0, (DirectRun(0, 0, 0, 4, 1, 4, 4),), 4, 4)
    wrong = plan_._replace(runs=(DirectRun(0, 0, 2, 4, 1, 4, 4),))  # past the consumer's 4-byte page
    assert plan_.sound and not wrong.sound
    assert pickle.loads(pickle.dumps(plan_, protocol)) == plan_ and pickle.loads(pickle.dumps(plan_, protocol)).sound
    assert not pickle.loads(pickle.dumps(wrong, protocol)).sound


def test_a_direct_plan_built_past_its_constructor_is_refused_before_any_byte_moves():
    from layoutalg.copy.direct import scatter
    from layoutalg.plans.reshard import DirectPlan, DirectRun, ReshardError
    forged = _bypassed(DirectPlan, (0, (_bypassed(DirectRun, (0, 0, -16, 16, 1, 16, 16)),), 32, 32,
                                    (), (), "", "", (), ()))
    assert not forged.sound  # only the checking constructor makes a plan sound
    kv = torch.zeros(3, 32, dtype=torch.uint8)
    with pytest.raises(ReshardError, match="must be a DirectRun of non-negative integers"):
        scatter(forged, 0, torch.ones(16, dtype=torch.uint8), kv[1:], [0])
    assert not kv.any()


def test_a_mapping_that_is_not_one_is_named():
    from layoutalg.copy.executor import plan
    with pytest.raises(ConfigError, match="mapping must be a CanonicalPageMapping, got str"):
        plan("x", torch.zeros(2, 16, dtype=torch.uint8))


def test_pages_in_the_memory_of_the_kv_blocks_are_refused():
    """Page 0 is block 1's own bytes: a copy would read what it has already written."""
    from layoutalg.copy.executor import plan
    m = CanonicalPageMapping(16, 16, (CopyRun(0, 8, 8, 1, 8, 8), CopyRun(8, 0, 8, 1, 8, 8)), 1, 0, False)
    raw = torch.arange(48, dtype=torch.uint8)
    kv, pages = raw[0:32].view(2, 16), raw[16:48].view(2, 16)
    before = raw.clone()
    with pytest.raises(LayoutMismatch, match="kv and pages share memory"):
        plan(m, kv).store(kv, [1], pages, [0])
    assert torch.equal(raw, before)
    apart = raw[32:48].view(1, 16)                           # the same buffer, other bytes: fine
    plan(m, raw[0:16].view(1, 16)).store(raw[0:16].view(1, 16), [0], apart, [0])

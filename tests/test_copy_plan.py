"""Copy plans: store under one TP, load under another, byte for byte; writers by page id;
descriptors that a memcpy engine can execute; every bad argument refused untouched."""
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.errors import ConfigError, LayoutMismatch
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

TOTAL, BS, D, N = 8, 4, 8, 6



def group(deriver, tp, layout="nhd"):
    """Every rank's (mapping, KV tensor shape) of a split layout at `tp`."""
    h = max(1, TOTAL // tp)
    shape = (N, 2, BS, h, D) if layout == "nhd" else (N, 2, h, BS, D)
    kv = torch.zeros(shape, dtype=torch.bfloat16)
    if layout == "hnd":
        kv = kv.transpose(2, 3)
    res = deriver.derive(LayerSpec("attention", 2 * BS * h * D * 2, BS, h, D, 2),
                         TensorLayout(kv.shape, kv.stride(), 2), ParallelConfig(tp, TOTAL), N)
    assert res.result == "certified", res.reasons
    return res.mappings, kv


def shard(full, tp, rank, like):
    """Rank `rank`'s heads of the whole-model KV, in the memory order of `like`."""
    h = max(1, TOTAL // tp)
    first = (rank * h) % TOTAL if TOTAL >= tp else rank // (tp // TOTAL)
    out = torch.empty_like(like)
    out.copy_(full[:, :, :, first:first + h, :])
    return out


@pytest.mark.parametrize("src,dst,layout", [(4, 2, "nhd"), (2, 4, "nhd"), (8, 1, "hnd"), (1, 8, "nhd"), (16, 4, "hnd")])
@pytest.mark.parametrize("executor", ["numpy rows", "torch rows and views"])
def test_store_under_one_tp_load_under_another(deriver, src, dst, layout, executor, monkeypatch):
    from layoutalg.copy import move
    if executor != "numpy rows":  # what runs off the CPU (a CUDA tensor) or without numpy
        monkeypatch.setattr(move, "numpy", None)
    monkeypatch.setattr(move, "_CHUNK", 3 * 1024)  # several chunks a batch, a last one short
    full = torch.randn(N, 2, BS, TOTAL, D, generator=torch.Generator().manual_seed(src * 10 + dst)).to(torch.bfloat16)
    maps, like = group(deriver, src, layout)
    pages = torch.zeros(N + 3, maps[0].canonical_page_size_bytes, dtype=torch.uint8)
    page_ids, block_ids = torch.tensor([7, 2, 8, 0, 4, 5]), torch.tensor([3, 1, 0, 5, 4, 2])
    written = 0
    for rank, m in enumerate(maps):
        kv = shard(full, src, rank, like)
        written += plan(m, kv).store(kv, block_ids, pages, page_ids)
    assert written == N * len(maps) // maps[0].num_writers      # each page by one writer of each class
    maps2, like2 = group(deriver, dst, layout)
    for rank, m in enumerate(maps2):
        kv = torch.zeros_like(like2)
        assert plan(m, kv).load(pages, page_ids, kv, block_ids) == N
        assert torch.equal(kv, shard(full, dst, rank, like2)), (src, dst, rank)


def test_writers_take_turns_by_page_id_not_block_id(deriver):
    maps, like = group(deriver, 16)                       # 2 replicas of each head
    assert maps[0].num_writers == 2
    pages = torch.zeros(4, maps[0].canonical_page_size_bytes, dtype=torch.uint8)
    kv = torch.ones_like(like)
    p = plan(maps[0], kv)                                 # writer 0: even page ids
    assert p.store(kv, [0, 0], pages, [1, 2]) == 1
    assert pages[1].sum() == 0 and pages[2].sum() > 0


def test_descriptors_replay_the_store(deriver):
    maps, like = group(deriver, 4)
    kv = torch.randn(like.shape).to(torch.bfloat16)
    p = plan(maps[1], kv)
    pages = torch.zeros(N, maps[1].canonical_page_size_bytes, dtype=torch.uint8)
    blocks, ids = [2, 0, 1], [5, 3, 4]
    p.store(kv, blocks, pages, ids)
    desc = p.descriptors(blocks, ids)
    src, dst = kv.view(-1).view(torch.uint8), torch.zeros(pages.numel(), dtype=torch.uint8)
    for s, d, n in desc.tolist():
        dst[d:d + n] = src[s:s + n]
    assert torch.equal(dst.view_as(pages), pages)
    frags = sum(r.num_fragments for r in maps[1].runs) * len(blocks)
    assert int(desc[:, 2].sum()) == len(blocks) * maps[1].local_page_size_bytes and desc.shape[0] <= frags


def test_descriptors_merge_what_continues_in_both(deriver):
    maps, like = group(deriver, 1)                        # one rank: the map is the identity
    p = plan(maps[0], like)
    desc = p.descriptors([0, 1, 2], [0, 1, 2])
    assert desc.tolist() == [[0, 0, 3 * maps[0].local_page_size_bytes]]


@pytest.mark.parametrize("break_it,message", [
    (lambda kv, pages, b, i: (kv[:, :, :2], pages, b, i), "not the tensor this plan was made for"),
    (lambda kv, pages, b, i: (kv, pages.view(torch.int8), b, i), "uint8 tensor"),
    (lambda kv, pages, b, i: (kv, pages, [0, 1], [0]), "2 block ids but 1 page ids"),
    (lambda kv, pages, b, i: (kv, pages, [0, N], [0, 1]), f"block_ids holds {N}, outside"),
    (lambda kv, pages, b, i: (kv, pages, [0, 1], [-1, 1]), "page_ids holds -1, outside"),
    (lambda kv, pages, b, i: (kv, pages, [0, 1], [2, 2]), "page_ids repeats an id"),
    (lambda kv, pages, b, i: (kv, pages, torch.tensor([[0]]), [0]), "block_ids must be a 1-D int64"),
])
def test_bad_arguments_change_nothing(deriver, break_it, message):
    maps, like = group(deriver, 2)
    kv = torch.randn(like.shape).to(torch.bfloat16)
    p = plan(maps[1], kv)
    pages = torch.randint(0, 255, (N, maps[1].canonical_page_size_bytes), dtype=torch.uint8)
    before = (kv.clone(), pages.clone())
    args = break_it(kv, pages, [0, 1], [0, 1])
    with pytest.raises(LayoutMismatch, match=message):
        p.store(args[0], args[2], args[1], args[3])
    assert torch.equal(kv, before[0]) and torch.equal(pages, before[1])


def test_a_plan_refuses_a_tensor_that_is_not_one_page_a_block(deriver):
    maps, like = group(deriver, 2)
    padded = torch.zeros(N, 2, BS, like.shape[3], 2 * D, dtype=torch.bfloat16)[..., :D]
    with pytest.raises(LayoutMismatch, match="dimension 1 has stride 256, expected 128"):
        plan(maps[0], padded)  # the tensor the mapping was derived for has other strides
    with pytest.raises(LayoutMismatch, match=r"kv \(bytes\) is not the tensor .*dimension 1 has stride 512, "
                                             r"expected 256"):
        plan(maps[0], padded.view(torch.uint8))  # its bytes: they say the same, and are not one page a block


def test_a_plan_refuses_a_tensor_of_another_layout_with_the_same_page(deriver):
    maps, like = group(deriver, 2)
    other = torch.zeros(like.shape, dtype=like.dtype).transpose(2, 3).contiguous().transpose(2, 3)  # HND memory
    assert other.shape == like.shape and other.stride() != like.stride()
    with pytest.raises(LayoutMismatch, match=r"not the tensor 'kv' the mapping was derived for: dimension 2 has "
                                             r"stride"):
        plan(maps[0], other)
    plan(maps[0], other.contiguous().view(torch.uint8))  # its bytes, as bytes: the caller's word


def test_ids_that_are_not_integers_are_refused(deriver):
    maps, like = group(deriver, 2)
    kv = torch.randn(like.shape).to(torch.bfloat16)
    p = plan(maps[1], kv)
    pages = torch.zeros(N, maps[1].canonical_page_size_bytes, dtype=torch.uint8)
    for bad in ([1.9, 3.2], [True, False]):
        with pytest.raises(LayoutMismatch, match="block_ids must be a 1-D int64"):
            p.store(kv, bad, pages, [0, 2])
    assert pages.sum() == 0


def test_descriptors_follow_a_padded_block_stride_and_check_their_ids(deriver):
    maps, like = group(deriver, 2)
    big = torch.randn((N, 2) + tuple(like.shape[1:])).to(torch.bfloat16)
    kv = big[:, 0]                                      # blocks two pages apart
    p = plan(maps[1], kv)
    pages = torch.zeros(N, maps[1].canonical_page_size_bytes, dtype=torch.uint8)
    p.store(kv, [1, 3], pages, [0, 2])
    src, dst = big.view(-1).view(torch.uint8), torch.zeros(pages.numel(), dtype=torch.uint8)
    for s, d, n in p.descriptors([1, 3], [0, 2], kv_base=kv.storage_offset() * 2).tolist():
        dst[d:d + n] = src[s:s + n]
    assert torch.equal(dst.view_as(pages), pages)
    for blocks, ids, message in (([-1], [0], "not negative"), ([0, 1], [2, 2], "repeats an id")):
        with pytest.raises(LayoutMismatch, match=message):
            p.descriptors(blocks, ids)
    with pytest.raises(LayoutMismatch, match="would overlap"):
        p.descriptors([0], [0], block_bytes=1)


def test_plan_refuses_any_bad_run_before_a_byte_moves(deriver):
    from layoutalg.errors import ConfigError
    from layoutalg.mapping import CanonicalPageMapping, CopyRun
    good = CopyRun(0, 0, 8, 1, 8, 8)
    for runs, nw, w in [((good, CopyRun(8, 8, 8, 2, -8, 8)), 1, 0),   # a later run with a negative stride
                        ((good,), 2, 2), ((good,), 0, 0), ((good,), -2, -1)]:
        m = CanonicalPageMapping(64, 64, runs, nw, w, False)
        with pytest.raises((ConfigError, LayoutMismatch)):
            plan(m, torch.zeros(2, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match="one \\(num_writers, writer_index\\) per run"):
        CanonicalPageMapping(64, 64, (good, good), 1, 0, False, run_writers=((1, 0),))


@pytest.mark.parametrize("executor", ["numpy rows", "torch rows and views"])
def test_ids_that_live_in_the_bytes_being_copied_are_read_once(deriver, executor, monkeypatch):
    """Ids held in the kv tensor (load) or in the pages (store) were re-read by each
    chunk of the copy, after earlier chunks had overwritten them: the wrong blocks were filled."""
    from layoutalg.copy import move
    if executor != "numpy rows":
        monkeypatch.setattr(move, "numpy", None)
    monkeypatch.setattr(move, "_CHUNK", 512)  # one block a chunk: the ids are read again after each
    maps, like = group(deriver, 2)
    m, P = maps[0], maps[0].canonical_page_size_bytes
    pages = torch.randint(0, 256, (N, P), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    want = torch.zeros_like(like)
    plan(m, want).load(pages, torch.arange(N), want, torch.arange(N))

    kv = torch.zeros_like(like)
    ids = torch.empty(0, dtype=torch.int64).set_(kv.untyped_storage(), 0, (N,), (1,))  # block 0's first bytes
    ids.copy_(torch.arange(N))
    assert plan(m, kv).load(pages, torch.arange(N), kv, ids) == N
    assert torch.equal(kv.view(torch.int16), want.view(torch.int16))  # bytes: random ones hold NaNs

    out = torch.zeros_like(pages)
    pids = torch.empty(0, dtype=torch.int64).set_(out.untyped_storage(), 0, (N,), (1,))  # page 0's first bytes
    pids.copy_(torch.arange(N))
    plan(m, want).store(want, torch.arange(N), out, pids)
    back = torch.zeros_like(like)
    plan(m, back).load(out, torch.arange(N), back, torch.arange(N))
    assert torch.equal(back.view(torch.int16), want.view(torch.int16))


# ---- every layer of a model in one call ----------------------------------------------------------

def model_group(deriver, tp):
    """Each rank's {layer: mapping} and {layer: kv} of a three-layer model at `tp`: NHD and HND
    layers of head size 8 and an NHD one of head size 16 (a page twice as big)."""
    layers = {"l.0": ("nhd", D), "l.1": ("hnd", D), "l.2": ("nhd", 2 * D)}
    h = max(1, TOTAL // tp)
    ranks = [({}, {}) for _ in range(tp)]
    for name, (layout, d) in layers.items():
        shape = (N, 2, BS, h, d) if layout == "nhd" else (N, 2, h, BS, d)
        kv = torch.zeros(shape, dtype=torch.bfloat16)
        kv = kv.transpose(2, 3) if layout == "hnd" else kv
        res = deriver.derive(LayerSpec("attention", 2 * BS * h * d * 2, BS, h, d, 2),
                             TensorLayout(kv.shape, kv.stride(), 2), ParallelConfig(tp, TOTAL), N)
        assert res.result == "certified", res.reasons
        for rank, m in enumerate(res.mappings):
            ranks[rank][0][name] = m
            ranks[rank][1][name] = torch.zeros_like(kv)
    return ranks


def model_full(seed=3):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randint(-2000, 2000, (N, 2, BS, TOTAL, d), generator=g).to(torch.bfloat16)
            for n, d in (("l.0", D), ("l.1", D), ("l.2", 2 * D))}


def model_shards(full, tp, rank, kvs):
    return {n: shard(full[n], tp, rank, kv) for n, kv in kvs.items()}


@pytest.mark.parametrize("by_layer", [False, True], ids=["model pages", "pages by layer"])
@pytest.mark.parametrize("src,dst", [(2, 4), (8, 1)])
def test_a_model_stored_under_one_tp_loads_under_another(deriver, src, dst, by_layer):
    from layoutalg.copy.executor import plan_model
    full = model_full()
    stored = model_group(deriver, src)
    plans = [plan_model(*r) for r in stored]
    assert plans[0].offsets == {"l.0": 0, "l.1": 2 * BS * TOTAL * D * 2, "l.2": 4 * BS * TOTAL * D * 2}
    assert plans[0].page_size_bytes == 8 * BS * TOTAL * D * 2
    if by_layer:
        pages = {n: torch.zeros(N + 2, p.mapping.canonical_page_size_bytes, dtype=torch.uint8)
                 for n, p in plans[0].plans.items()}
    else:
        pages = torch.zeros(N + 2, plans[0].page_size_bytes, dtype=torch.uint8)
    page_ids, block_ids = torch.tensor([7, 2, 6, 0, 4, 5]), torch.tensor([3, 1, 0, 5, 4, 2])
    for rank, (p, (maps, kvs)) in enumerate(zip(plans, stored)):
        assert p.store(model_shards(full, src, rank, kvs), block_ids, pages, page_ids) == \
            {n: N // maps[n].num_writers for n in maps}
    loaded = model_group(deriver, dst)
    for rank, (maps, kvs) in enumerate(loaded):
        p = plan_model(maps, kvs)
        assert p.format_id == plans[0].format_id  # one model page at every tp: the layers are agnostic
        assert p.load(pages, page_ids, kvs, block_ids) == {n: N for n in maps}
        for n, want in model_shards(full, dst, rank, kvs).items():
            assert torch.equal(kvs[n], want), (n, rank)


def test_pipeline_stages_store_one_model_page_that_loads_on_one_stage(deriver):
    """pp=2, tp=2 -> pp=1, tp=4: stage 0 owns l.0 and l.1, stage 1 owns l.2 (an uneven split);
    each stage's plan writes its layers' parts of the whole model page, and the one-stage
    loader reads every layer back. The stages are checked to write each layer once."""
    from layoutalg.copy.executor import plan_model, stages_tile
    full = model_full()
    stored = model_group(deriver, 2)
    owned = ({"l.0", "l.1"}, {"l.2"})
    stages = [[plan_model(maps, {n: kv for n, kv in kvs.items() if n in own}, stage=True) for maps, kvs in stored]
              for own in owned]
    stages_tile([s[0] for s in stages])
    whole = plan_model(*stored[0])
    assert all(p.format_id == whole.format_id and p.page_size_bytes == whole.page_size_bytes
               for s in stages for p in s)  # every stage names the whole model page
    pages = torch.zeros(N, whole.page_size_bytes, dtype=torch.uint8)
    ids = torch.arange(N)
    for own, plans in zip(owned, stages):
        for rank, (p, (maps, kvs)) in enumerate(zip(plans, stored)):
            assert set(p.store(model_shards(full, 2, rank, {n: kvs[n] for n in own}), ids, pages, ids)) == own
    for rank, (maps, kvs) in enumerate(model_group(deriver, 4)):
        assert plan_model(maps, kvs).load(pages, ids, kvs, ids) == {n: N for n in maps}
        for n, want in model_shards(full, 4, rank, kvs).items():
            assert torch.equal(kvs[n], want), (n, rank)
    with pytest.raises(ConfigError, match="layer 'l.1' is written by stages \\[0, 1\\]"):
        stages_tile([stages[0][0], plan_model(stored[0][0], {"l.1": stored[0][1]["l.1"]}, stage=True)])
    with pytest.raises(ConfigError, match="no stage writes layer 'l.2'"):
        stages_tile([stages[0][0]])
    with pytest.raises(ConfigError, match="at least one"):
        plan_model(stored[0][0], {}, stage=True)


def test_a_model_plan_checks_every_layer_before_a_byte_moves(deriver):
    from layoutalg.copy.executor import plan_model
    (maps, kvs), = model_group(deriver, 1)
    full = model_full()
    kvs = model_shards(full, 1, 0, kvs)
    p = plan_model(maps, kvs)
    pages = torch.zeros(N, p.page_size_bytes, dtype=torch.uint8)
    ids = torch.arange(N)
    bad = {**kvs, "l.2": kvs["l.2"][:, :, :, :, :D]}  # the last layer's tensor is not the planned one
    with pytest.raises(LayoutMismatch, match="layer 'l.2'.*not the tensor"):
        p.store(bad, ids, pages, ids)
    assert not pages.any()  # l.0 and l.1 were fine, and were not written either
    with pytest.raises(LayoutMismatch, match="layer 'l.1'.*page_ids holds 6, outside"):
        p.load(pages, {"l.0": ids, "l.1": ids + 3, "l.2": ids}, kvs, ids)
    assert torch.equal(kvs["l.0"], model_shards(full, 1, 0, kvs)["l.0"])  # l.0 kept its bytes
    inside = {**kvs, "l.1": pages[:, :kvs["l.1"][0].numel() * 2].view(torch.bfloat16).view(kvs["l.1"].shape)}
    with pytest.raises(LayoutMismatch):
        p.store(inside, ids, pages, ids)  # a layer's tensor inside the pages (its own plan refuses it too)
    with pytest.raises(ConfigError, match=r"\['l.2'\] have a mapping or a tensor but not both"):
        plan_model(maps, {n: kv for n, kv in kvs.items() if n != "l.2"})
    with pytest.raises(ConfigError, match="no layer"):
        plan_model({}, {})


def test_a_model_page_is_named_by_its_layers_formats(deriver):
    from layoutalg.copy.executor import plan_model
    (maps, kvs), = model_group(deriver, 1)
    p = plan_model(maps, kvs)
    assert plan_model(dict(reversed(maps.items())), kvs).format_id == p.format_id  # built in any order
    swapped = {**maps, "l.0": maps["l.1"], "l.1": maps["l.0"]}  # an HND page where an NHD one was
    assert plan_model(swapped, {**kvs, "l.0": kvs["l.1"], "l.1": kvs["l.0"]}).format_id != p.format_id


def test_a_model_plan_moves_the_ids_it_checked(deriver):
    """Page ids held in the pages that the first layer writes were read again by the
    later layers, after that write: they stored by other ids, or failed with l.0 written."""
    from layoutalg.copy.executor import plan_model
    (maps, kvs), = model_group(deriver, 1)
    kvs = model_shards(model_full(), 1, 0, kvs)
    p = plan_model(maps, kvs)
    want = torch.zeros(N, p.page_size_bytes, dtype=torch.uint8)
    p.store(kvs, torch.arange(N), want, torch.arange(N))
    pages = torch.zeros_like(want)
    page_ids = pages[5, :8 * N].view(torch.int64)  # inside l.0's part of page 5
    page_ids.copy_(torch.arange(N))
    assert p.store(kvs, torch.arange(N), pages, page_ids) == {n: N for n in maps}
    assert torch.equal(pages, want)


def test_layers_that_would_fill_the_same_memory_are_refused(deriver):
    """Layers may share a tensor where they fill other blocks of it (a hybrid model's groups);
    filling the same blocks of it, the later load would overwrite the earlier."""
    from layoutalg.copy.executor import plan_model
    (maps, kvs), = model_group(deriver, 1)
    shared = kvs["l.0"]
    p = plan_model({"a": maps["l.0"], "b": maps["l.0"]}, {"a": shared, "b": shared})
    pages = torch.randint(0, 256, (N, p.page_size_bytes), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    with pytest.raises(LayoutMismatch, match="layer .a.'s kv and layer .b.'s kv share memory in the blocks asked for"):
        p.load(pages, torch.arange(N), {"a": shared, "b": shared}, torch.arange(N))
    assert not shared.view(torch.int16).any()  # refused before a byte moved
    half = {"a": torch.arange(3), "b": torch.arange(3, 6)}  # other blocks of one tensor: each its own
    assert p.load(pages, torch.arange(3), {"a": shared, "b": shared}, half) == {"a": 3, "b": 3}
    with pytest.raises(LayoutMismatch, match=r"block_ids by layer must name exactly the planned layers; \['c'\]"):
        p.load(pages, torch.arange(3), {"a": shared, "b": shared}, {**half, "c": torch.arange(3)})
    with pytest.raises(LayoutMismatch, match=r"page_ids by layer must name exactly the planned layers; \['b'\]"):
        p.store({"a": shared, "b": shared}, torch.arange(3), pages, {"a": torch.arange(3)})


@pytest.mark.parametrize("numpy", [True, False], ids=["numpy", "torch"])
def test_a_repeated_id_is_found_by_the_table_and_by_the_sort(numpy, monkeypatch):
    """`has_repeats` (a table of flags where ids span a range not many times their count, else
    a sort) says what a set says, on ids of both kinds of range."""
    import random

    from layoutalg.copy import ids as copy_mod
    from layoutalg.copy import move
    if not numpy:
        monkeypatch.setattr(move, "numpy", None)
    rng = random.Random(17)
    for n in (1, 5, 300, 5000, 100000):  # 5000 and 100000 past the table's reach for 300 ids
        for _ in range(60):
            k = rng.randint(0, min(n, 300))
            t = torch.tensor([rng.randrange(n) for _ in range(k)], dtype=torch.int64)
            assert copy_mod.has_repeats(t, n) == (len(set(t.tolist())) != k), (n, t)
    assert not copy_mod.has_repeats(torch.empty(0, dtype=torch.int64), 0)


@pytest.mark.parametrize("chunk", [1 << 21, 40 * 1024], ids=["one chunk", "several chunks"])
def test_big_fragments_go_through_the_staging_array_and_land_exactly(deriver, chunk, monkeypatch):
    """Fragments of whole 4 KiB multiples go numpy to numpy through a staging array placed
    apart from both sides modulo 4 KiB (`_copy_staged`): every rank's store and load gives
    the bytes the plain gather of numpy gives (the staging turned off)."""
    from layoutalg.copy import move as copy_mod
    monkeypatch.setattr(copy_mod, "_CHUNK", chunk)
    bs, d, n = 16, 128, 6                                  # split HND tp=4: 8 KiB fragments
    kv = torch.randn(n, 2, 2, bs, d, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16).transpose(2, 3)
    maps = deriver.derive(LayerSpec("attention", 2 * bs * 2 * d * 2, bs, 2, d, 2),
                          TensorLayout(kv.shape, kv.stride(), 2), ParallelConfig(4, 8), n).mappings
    assert all(r.fragment_size % copy_mod._STAGED == 0 for m in maps for r in m.runs)
    staged, calls = copy_mod._copy_staged, []

    def counted(*args):  # each call's answer (whether it staged the run), passed on
        calls.append(staged(*args))
        return calls[-1]
    monkeypatch.setattr(copy_mod, "_copy_staged", counted)
    page_ids, block_ids = [7, 2, 8, 0, 4, 5], [3, 1, 0, 5, 4, 2]

    def round_trip(m):
        pages = torch.zeros(n + 3, m.canonical_page_size_bytes, dtype=torch.uint8)
        plan(m, kv).store(kv, block_ids, pages, page_ids)
        back = torch.zeros_like(kv)
        plan(m, back).load(pages, page_ids, back, block_ids)
        return pages, back
    for m in maps:
        got = round_trip(m)
        monkeypatch.setattr(copy_mod, "_STAGED", 1 << 40)
        want = round_trip(m)
        monkeypatch.setattr(copy_mod, "_STAGED", 4096)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]) and want[0].any()
    assert True in calls and False in calls  # staged, and (turned off) not


def test_the_staging_array_lies_apart_from_both_sides():
    """`_apart`: at least 64 bytes past the source and 64 before the destination, modulo 4 KiB
    (a copy 1 to 31 bytes ahead of its source modulo 4 KiB runs at a tenth of the speed on AMD
    EPYC), for its every fragment of whole 4 KiB multiples, of the size asked for."""
    import random

    from layoutalg.copy.move import _apart
    rng = random.Random(23)
    for _ in range(500):
        src, dst, n, f = rng.randrange(1 << 40), rng.randrange(1 << 40), rng.randint(1, 64), rng.choice([4096, 8192])
        a = _apart(n, f, src, dst)
        for k in (0, n - 1):                               # (each a whole 4 KiB multiple on)
            at = a.ctypes.data + k * f
            assert 64 <= (at - src) % 4096 <= 4032 and 64 <= (dst - at) % 4096 <= 4032, (src % 4096, dst % 4096)
        assert a.shape == (n,) and a.dtype.itemsize == f


def test_descriptors_refuse_a_destination_named_twice(deriver):
    """Two triples writing one destination are refused, by page on a store and by block on a
    load; ids far apart (a sort, not a table of flags) are no repeat."""
    maps, like = group(deriver, 4)
    p = plan(maps[0], torch.zeros_like(like))
    with pytest.raises(LayoutMismatch, match="descriptors: page_ids repeats an id"):
        p.descriptors([0, 1], [3, 3])
    with pytest.raises(LayoutMismatch, match="descriptors: block_ids repeats an id"):
        p.descriptors([2, 2], [0, 1], store=False)
    assert p.descriptors([0, 1], [10 ** 12, 3]).shape[0] > 0

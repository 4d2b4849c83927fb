"""Copy plans across devices: a GPU's KV cache stored into pages in host memory (pinned or
not, or on the GPU) and loaded back moves the bytes the same plan moves with everything on
the CPU. Such a copy gathers on one device by one executor and scatters on the other by
another; on the CPU, the halves of such a copy (one side through numpy, the other through
torch) are checked against a copy on one executor, so the pairing is tested without a GPU."""
import pytest
import torch

import layoutalg.copy.move as copy_mod
from layoutalg.copy.executor import plan, plan_model
from layoutalg.tools.distributed import group_of, parse_config
from layoutalg.errors import LayoutMismatch
from layoutalg.mapping import CopyRun
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import ParallelConfig, TensorLayout

from test_layer_tensors import layer as mamba_layer

BLOCKS = 6
CASES = [
    ("split_nhd", 2, "tp=8", None),                      # GQA: one rank of four writes each page
    ("split_hnd", 4, "tp=8,dcp=2,interleave=2", None),   # heads outside tokens, tokens dealt out
    ("flash_hnd", 4, "tp=4", {"kv_blocks_second": 1}),   # (2, blocks, ...): a page in two stretches
    ("quant_packed", 4, "tp=4", {"kv_scales": 1, "row_align": 8}),  # int8 KV and its scales: regions
    ("mla", 1, "tp=2,dcp=2", None),
]
IDS = [f"{c[0]} {c[2]}" for c in CASES]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """Every byte of `t`'s storage (padding included), on the CPU."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).cpu()


def _on(device, like: torch.Tensor, fill=None) -> torch.Tensor:
    """A tensor of `like`'s shape and strides on `device` holding `like`'s bytes (or `fill`'s)."""
    out = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=device)
    torch.empty(0, dtype=torch.uint8, device=device).set_(out.untyped_storage()).copy_(
        _bytes(like) if fill is None else fill)
    return out


def _groups(case):
    family, heads, config, names = case
    dtype = "int8" if family.startswith("quant") else "bf16"
    g = group_of(family, parse_config(config), heads, 4, 8 if family == "mla" else 16, dtype, BLOCKS, names=names)
    gen = torch.Generator().manual_seed(len(family) * 7 + heads)
    kvs = [_on("cpu", g.empty(), torch.randint(0, 256, (_bytes(g.empty()).numel(),), generator=gen, dtype=torch.uint8))
           for _ in g.mappings]
    return g, kvs


def _round_trip(m, kv, pages_start, page_ids, block_ids, kv_device, pages_device, pin=False):
    """(pages after the store, kv bytes after a load into a zeroed tensor, the two counts)."""
    pages = pages_start.to(pages_device, copy=True)  # (`to` the device it is on is no copy)
    if pin:
        pages = pages.pin_memory()
    kv = _on(kv_device, kv)
    stored = plan(m, kv).store(kv, block_ids, pages, page_ids)
    back = _on(kv_device, kv, torch.zeros(_bytes(kv).numel(), dtype=torch.uint8))
    loaded = plan(m, back).load(pages, page_ids, back, block_ids)
    return pages.cpu(), _bytes(back), stored, loaded


def _case_ids(g):
    n = g.mappings[0].canonical_page_size_bytes
    start = torch.randint(0, 256, (BLOCKS + 3, n), generator=torch.Generator().manual_seed(11), dtype=torch.uint8)
    return start, torch.tensor([7, 2, 8, 0, 4, 5]), torch.tensor([3, 1, 0, 5, 4, 2])


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("source", ["numpy", "torch"])
def test_a_gather_by_one_executor_scatters_by_the_other(case, source, monkeypatch):
    """What a copy between devices does (`copy_run`: one `_side` gathers, the other's
    scatters), both on the CPU: each run's source through one executor, its destination
    through the other, in chunks of a few blocks: byte for byte the copy on one executor."""
    g, kvs = _groups(case)
    start, ids, blocks = _case_ids(g)
    want = [_round_trip(m, kv, start, ids, blocks, "cpu", "cpu") for m, kv in zip(g.mappings, kvs)]
    real, calls = copy_mod._side, []

    def mixed(*args):  # copy_run asks for the source's side, then the destination's
        through_torch = (len(calls) % 2 == 0) == (source == "torch")
        calls.append(through_torch)
        if through_torch:
            with monkeypatch.context() as mp:
                mp.setattr(copy_mod, "numpy", None)
                return real(*args)
        return real(*args)
    monkeypatch.setattr(copy_mod, "_side", mixed)
    monkeypatch.setattr(copy_mod, "_CHUNK", 2 * 1024)  # several chunks a batch, a last one short
    got = [_round_trip(m, kv, start, ids, blocks, "cpu", "cpu") for m, kv in zip(g.mappings, kvs)]
    assert True in calls and False in calls
    for rank, (w, o) in enumerate(zip(want, got)):
        assert torch.equal(w[0], o[0]), (rank, "store")
        assert torch.equal(w[1], o[1]), (rank, "load")
        assert w[2:] == o[2:]
    assert any(not torch.equal(w[0], start) for w in want) and want[0][1].any()  # the copies moved bytes


@cuda
@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("kv_device, pages_device, pin", [
    ("cuda", "cpu", False), ("cuda", "cpu", True), ("cuda", "cuda", False), ("cpu", "cuda", False)],
    ids=["kv on the GPU, host pages", "kv on the GPU, pinned host pages", "both on the GPU", "host kv, GPU pages"])
def test_a_plan_moves_between_devices_the_bytes_it_moves_on_the_cpu(case, kv_device, pages_device, pin):
    g, kvs = _groups(case)
    start, ids, blocks = _case_ids(g)
    for rank, (m, kv) in enumerate(zip(g.mappings, kvs)):
        want = _round_trip(m, kv, start, ids, blocks, "cpu", "cpu")
        got = _round_trip(m, kv, start, ids, blocks, kv_device, pages_device, pin)
        assert torch.equal(want[0], got[0]), (rank, "store")
        assert torch.equal(want[1], got[1]), (rank, "load")
        assert want[2:] == got[2:]


@cuda
def test_the_state_tensors_of_a_mamba_layer_on_the_gpu_round_trip_through_host_pages():
    spec, raw, tensors = mamba_layer(2, 4)
    maps = Deriver().derive(spec, TensorLayout.of(tensors), ParallelConfig(2, 1)).mappings
    blocks, ids = [4, 0, 2], [1, 2, 0]
    dev_raw = raw.cuda()
    from test_layer_tensors import engine_tensors
    shapes, dtypes = [t.shape[1:] for t in tensors], (torch.int16, torch.int32)
    on_gpu = engine_tensors(dev_raw.flatten(), shapes, dtypes, raw.shape[1])
    host = torch.zeros(3, maps[0].canonical_page_size_bytes, dtype=torch.uint8).pin_memory()
    want = torch.zeros_like(host)
    for m in maps:
        plan(m, tensors).store(tensors, blocks, want, ids)
        plan(m, on_gpu).store(on_gpu, blocks, host, ids)
    assert torch.equal(host, want) and want.any()
    for m in maps:
        back = engine_tensors(torch.zeros_like(dev_raw).flatten(), shapes, dtypes, raw.shape[1])
        plan(m, back).load(host, ids, back, blocks)
        ref = engine_tensors(torch.zeros_like(raw).flatten(), shapes, dtypes, raw.shape[1])
        plan(m, ref).load(want, ids, ref, blocks)
        for b, r in zip(back, ref):
            assert torch.equal(b.cpu(), r)


@cuda
def test_a_model_on_the_gpu_stores_into_host_model_pages_and_loads_back():
    (g, kvs), (h, kvs2) = _groups(CASES[0]), _groups(CASES[4])
    maps = {"attn": g.mappings[1], "mla": h.mappings[1]}
    host = {"attn": kvs[1], "mla": kvs2[1]}
    dev = {n: _on("cuda", t) for n, t in host.items()}
    ids, blocks = [5, 0, 3], [1, 4, 2]
    want = torch.zeros(6, plan_model(maps, host).page_size_bytes, dtype=torch.uint8)
    got = torch.zeros_like(want).pin_memory()  # as an offload worker's host buffer
    plan_model(maps, host).store(host, blocks, want, ids)
    plan_model(maps, dev).store(dev, blocks, got, ids)
    assert torch.equal(got, want) and want.any()
    back = {n: _on("cuda", t, torch.zeros(_bytes(t).numel(), dtype=torch.uint8)) for n, t in host.items()}
    ref = {n: _on("cpu", t, torch.zeros(_bytes(t).numel(), dtype=torch.uint8)) for n, t in host.items()}
    plan_model(maps, back).load(want, ids, back, blocks)
    plan_model(maps, ref).load(want, ids, ref, blocks)
    for n in maps:
        assert torch.equal(_bytes(back[n]), _bytes(ref[n])), n


@cuda
def test_a_bad_call_across_devices_changes_nothing():
    g, kvs = _groups(CASES[1])
    m, kv = g.mappings[0], _on("cuda", kvs[0])
    p = plan(m, kv)
    pages = torch.randint(0, 256, (4, m.canonical_page_size_bytes), dtype=torch.uint8)
    before_pages, before_kv = pages.clone(), _bytes(kv)
    with pytest.raises(LayoutMismatch, match="page_ids holds 9, outside the 4 there are"):
        p.store(kv, [0, 1], pages, [1, 9])
    with pytest.raises(LayoutMismatch, match="block_ids repeats an id"):
        p.load(pages, [0, 1], kv, [2, 2])
    with pytest.raises(LayoutMismatch, match="meta device"):
        p.store(kv, [0], torch.empty(4, m.canonical_page_size_bytes, dtype=torch.uint8, device="meta"), [0])
    assert torch.equal(pages, before_pages) and torch.equal(_bytes(kv), before_kv)


@pytest.mark.parametrize("run", [CopyRun(0, 16, 16, 2, 32, 48), CopyRun(0, 8, 16, 2, 32, 24)],
                         ids=["fragments on rows", "fragments off rows (a strided view)"])
@pytest.mark.parametrize("numpy", [True, False], ids=["numpy host side", "torch host side"])
def test_a_copy_to_another_device_moves_every_chunk_and_index_there(run, numpy, monkeypatch):
    """Without a GPU, `meta` stands for the other device: one side on the CPU, the other on
    meta, store and load a few blocks at a time (`_ACROSS` small). Meta holds no values, but
    a chunk or an index left on the CPU where it meets the meta side raises: the carry
    between devices (`_carried`) and each side's move of its ids are exercised here. A load
    gathers on meta and then cannot carry (meta has no bytes): it gets that far."""
    if not numpy:
        monkeypatch.setattr(copy_mod, "numpy", None)
    monkeypatch.setattr(copy_mod, "_ACROSS", 40)  # two blocks of 32 bytes a chunk: two chunks
    host = torch.zeros((4, 8), dtype=torch.int64)                  # 64-byte local pages
    other = torch.empty((4, 12), dtype=torch.int64, device="meta")  # 96-byte canonical pages
    ids = torch.tensor([2, 0, 3])
    local = (host, run.local_offset, run.local_stride, ids)
    canon = (other, run.canonical_offset, run.canonical_stride, ids)
    assert (copy_mod._rows(other, run.canonical_offset, run.canonical_stride, run, ids) is None) == \
        (run.canonical_offset == 8)
    copy_mod.copy_run(local, canon, run)  # a store onto the other device
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        copy_mod.copy_run(canon, local, run)  # a load from it: gathered there, then no bytes to carry

"""Runtime inputs: a direct reshard's scatter never receives into memory it has yet to read; a
mapping derived from sizes alone reads only a tensor whose dims are its rows; derive-corpus
writes nothing when it fails; a gated delta net state of key dim 0 is a clear error; block ids
on the meta device are refused before torch sees them; a model plan's errors name the layer."""
import gzip
import io
import logging

import pytest
import torch

from layoutalg import derive_canonical_mappings
from conftest import store_all
from layoutalg.copy.executor import plan, plan_model
from layoutalg.runtime.corpus import CorpusError, derive_corpus
from layoutalg.errors import ConfigError, LayoutMismatch
from layoutalg.mapping import CanonicalPageMapping, CopyRun
from layoutalg.plans.reshard import direct_plans
from layoutalg.copy.direct import gather, scatter

from conftest import ROOT
from test_vllm_adapter import MambaSpec, attention, cache_config, config, mla, split_nhd, state_config


def test_a_scatter_received_into_the_consumers_own_memory_fills_it_right():
    spec = lambda h: attention(block_size=4, heads=h, head_size=8, dtype=torch.float16)  # noqa: E731
    torch.manual_seed(0)
    full = torch.randn(3, 2, 4, 4, 8).half()                          # (blocks, kv, t, heads, d)
    prod = [full[:, :, :, r:r + 1].contiguous() for r in range(4)]    # tp=4: a head a rank
    cons = torch.zeros(3, 2, 4, 2, 8, dtype=torch.float16)            # tp=2 rank 0: heads 0 and 1
    xs = [derive_canonical_mappings(config(tp=4, rank=r), cache_config([(spec(1), ["l"])]), {"l": prod[r]})["l"]
          for r in range(4)]
    ys = [derive_canonical_mappings(config(tp=2, rank=r), cache_config([(spec(2), ["l"])]), {"l": cons})["l"]
          for r in range(2)]
    p = direct_plans(xs, ys)[0]
    data = gather(p, 0, prod[0], [0, 1, 2])  # head 0
    recv = torch.empty(0, dtype=torch.uint8).set_(cons.untyped_storage())[:data.numel()]  # staged in the pool
    recv.copy_(data)
    scatter(p, 0, recv, cons, [0, 1, 2])
    assert torch.equal(cons[:, :, :, 0], full[:, :, :, 0])


def test_a_mapping_derived_from_sizes_alone_takes_only_flat_pages():
    """MLA derived with no tensor carried no view: a (block, d, token) tensor passed as its rows.
    Now it carries the box its family reads, and a plan takes a tensor as the runtime would."""
    logging.disable(logging.WARNING)
    try:
        kvc = cache_config([(mla(block_size=16, head_size=576), ["mla"])], num_blocks=2)
        m = derive_canonical_mappings(config(tp=2, dcp=2, total=1, rank=0), kvc, {})["mla"]
    finally:
        logging.disable(logging.NOTSET)
    assert m.tensors == () and m.reads  # no view: the box its family reads instead
    head_major = torch.zeros(2, 576, 16, dtype=torch.bfloat16)
    with pytest.raises(LayoutMismatch, match=r"has dims \(2, 576, 16\): KV tensor dims \(576, 16\) .* neither "
                                             r"groups the other"):
        plan(m, head_major)
    pages = torch.zeros(2, m.canonical_page_size_bytes, dtype=torch.uint8)
    for ok in (torch.zeros(2, 16 * 576 * 2, dtype=torch.uint8), torch.zeros(2, 16, 576, dtype=torch.bfloat16)):
        plan(m, ok).store(ok, [0, 1], pages, [0, 1])  # its pages as bytes, and the engine's own (block, t, d)
    hand_built = CanonicalPageMapping(m.canonical_page_size_bytes, m.local_page_size_bytes, m.runs, 1, 0, False)
    plan(hand_built, head_major)  # a mapping from outside (no format) describes bytes as they lie


def test_derive_corpus_writes_nothing_when_a_line_fails_on_several_workers(tmp_path):
    rows = gzip.open(ROOT / "tests/data/vllm_reference.jsonl.gz", "rb").readlines()[:4000]
    corpus = tmp_path / "bad_tail.jsonl"
    corpus.write_bytes(b"".join(rows) + b'{"id": 1, "spec": [1]}\n')
    out = io.StringIO()
    with pytest.raises(CorpusError, match="bad_tail.jsonl:4001"):
        derive_corpus(str(corpus), out, jobs=2)
    assert out.getvalue() == ""


def test_a_gated_delta_net_state_of_key_dim_zero_is_opaque_with_its_reason(caplog):
    spec = MambaSpec(block_size=16, shapes=((2, 10), (2, 3, 0)), dtypes=(torch.bfloat16, torch.float32),
                     mamba_type="gdn_attention")
    with caplog.at_level(logging.WARNING):
        m = derive_canonical_mappings(state_config(2, 0), cache_config([(spec, ["g"])]), {}, state_layers=True)["g"]
    assert not m.parallelism_agnostic
    assert "has key dim 0" in caplog.text


def test_block_ids_on_the_meta_device_are_refused_by_a_store():
    m = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True)
    canonical = torch.zeros(3, 8, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="block_ids are on the meta device: they hold no values"):
        store_all(torch.ones(3, 8, dtype=torch.uint8), canonical, m, torch.arange(3, device="meta"))
    assert not canonical.any()


def test_a_model_plan_names_the_layer_whose_tensor_is_wrong():
    names = [f"layers.{i}.attn" for i in range(3)]
    caches = {n: split_nhd() for n in names}
    maps = derive_canonical_mappings(config(tp=2), cache_config([(attention(), names)]), caches)
    caches["layers.1.attn"] = split_nhd().transpose(2, 3).contiguous().transpose(2, 3)
    with pytest.raises(LayoutMismatch, match="plan_model: layer 'layers.1.attn': plan: kv is not the tensor"):
        plan_model(maps, caches)


def test_check_takes_a_family_that_reads_no_block_size(tmp_path):
    """Its page was sized from block_size whenever the family's own page could not be read at
    page_size 0 (here a size argument whose division is exact only at some sizes): KeyError."""
    import shutil
    from test_cli import run
    shutil.copy(ROOT / "specs/state.lal", tmp_path / "state.lal")
    (tmp_path / "ex.lal").write_text(
        'import "state.lal"\n'
        'param nx in 1 .. 4096 samples 4, 8 "channels of the whole model"\n'
        "layout row(X, e):\n    index j < X\n    element e bytes\n"
        "family ex serves ex:\n    grid tp_ranks\n    require nx % tp == 0\n    let L = nx / tp\n"
        "    local     row(L, dtype_bytes)\n    canonical row(nx, dtype_bytes)\n"
        "    shard (j) -> (by_rank(j, L + 0 * (nx / 3)))\n")
    proc = run("check", str(tmp_path / "ex.lal"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "[1/1] ex: ok" in proc.stderr


def test_a_strided_receive_buffer_reaching_into_the_consumers_pages_fills_them_right():
    """The overlap test took a strided buffer's elements for its span."""
    spec = lambda h: attention(block_size=4, heads=h, head_size=8, dtype=torch.float16)  # noqa: E731
    torch.manual_seed(0)
    full = torch.randn(2, 3, 4, 4, 8).half()                     # FlashAttention's (kv, blocks, t, heads, d)
    prod = [full[:, :, :, r:r + 1].contiguous() for r in range(4)]
    pool = torch.zeros(4096 + 2 * 3 * 4 * 2 * 8 * 2, dtype=torch.uint8)
    cons = pool[4096:].view(torch.float16).view(2, 3, 4, 2, 8)
    xs = [derive_canonical_mappings(config(tp=4, rank=r), cache_config([(spec(1), ["l"])]), {"l": prod[r]})["l"]
          for r in range(4)]
    ys = [derive_canonical_mappings(config(tp=2, rank=r), cache_config([(spec(2), ["l"])]), {"l": cons})["l"]
          for r in range(2)]
    p = direct_plans(xs, ys)[0]
    data = gather(p, 0, prod[0], [0, 1, 2])
    recv = pool[4096 - data.numel(): 4096 + data.numel(): 2]     # every other byte, half of them in the pages
    recv.copy_(data)
    scatter(p, 0, recv, cons, [0, 1, 2])
    assert torch.equal(cons[:, :, :, 0], full[:, :, :, 0])


def test_direct_plans_of_mappings_from_sizes_alone_take_the_engines_tensors_and_refuse_others():
    """Gather and scatter raised AttributeError for any tensor of more than
    two dims (a plan's side carried no format); now they check it as a copy plan does."""
    from layoutalg.copy.direct import execute
    logging.disable(logging.WARNING)
    try:
        kvc = cache_config([(mla(block_size=16, head_size=576), ["mla"])], num_blocks=2)
        xs = [derive_canonical_mappings(config(tp=2, total=1, rank=r), kvc, {})["mla"] for r in range(2)]
        y = derive_canonical_mappings(config(tp=1, total=1, rank=0), kvc, {})["mla"]
    finally:
        logging.disable(logging.NOTSET)
    p = direct_plans(xs, [y])[0]
    torch.manual_seed(1)
    src = [torch.randn(2, 16, 576).bfloat16() for _ in range(2)]   # the engine's (blocks, block_size, head_size)
    out = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
    execute(p, src, [0, 1], out, [0, 1])
    assert torch.equal(out, src[p.runs[0].producer])
    with pytest.raises(LayoutMismatch, match="neither groups the other"):
        gather(p, 0, src[0].transpose(1, 2).contiguous(), [0, 1])  # (blocks, head_size, block_size)


def _two_layers(blocks=4):
    names = ["layers.0.attn", "layers.1.attn"]
    torch.manual_seed(1)
    kvs = {n: torch.randn(blocks, 2, 4, 2, 8).to(torch.bfloat16) for n in names}
    spec = attention(block_size=4, heads=2, head_size=8, dtype=torch.bfloat16)
    maps = derive_canonical_mappings(config(tp=1, rank=0, total=2), cache_config([(spec, names)], num_blocks=blocks),
                                     kvs)
    return names, kvs, maps


@pytest.mark.parametrize("one_shot", [lambda n: (i for i in range(n)), lambda n: iter(range(n)),
                                      lambda n: map(int, range(n))])
def test_a_model_plan_reads_ids_given_once_for_every_layer(one_shot):
    """ModelPlan handed one generator of ids to each layer in turn: the first
    used it up, the others stored (and loaded) no block, and said so only in their counts."""
    names, kvs, maps = _two_layers()
    mp = plan_model(maps, kvs)
    pages = torch.zeros(4, mp.page_size_bytes, dtype=torch.uint8)
    assert mp.store(kvs, one_shot(4), pages, one_shot(4)) == {n: 4 for n in names}
    out = {n: torch.zeros_like(kvs[n]) for n in names}
    assert mp.load(pages, one_shot(4), out, one_shot(4)) == {n: 4 for n in names}
    assert all(torch.equal(out[n], kvs[n]) for n in names)


def test_execute_reads_block_ids_given_once():
    """Execute's checks used up generator ids; the copy then moved nothing."""
    from layoutalg.copy.direct import execute
    spec = lambda h: attention(block_size=4, heads=h, head_size=8, dtype=torch.bfloat16)  # noqa: E731
    torch.manual_seed(2)
    full = torch.randn(4, 2, 4, 4, 8).to(torch.bfloat16)
    xs = [derive_canonical_mappings(config(tp=1, total=4), cache_config([(spec(4), ["l"])], num_blocks=4),
                                    {"l": full})["l"]]
    parts = [torch.zeros(4, 2, 4, 2, 8, dtype=torch.bfloat16) for _ in range(2)]
    ys = [derive_canonical_mappings(config(tp=2, rank=r, total=4), cache_config([(spec(2), ["l"])], num_blocks=4),
                                    {"l": parts[r]})["l"] for r in range(2)]
    for r, p in enumerate(direct_plans(xs, ys)):
        execute(p, [full], (b for b in range(4)), parts[r], (b for b in range(4)))
        assert torch.equal(parts[r], full[:, :, :, 2 * r:2 * r + 2])


def test_ids_as_a_reversed_numpy_array_are_ids():
    np = pytest.importorskip("numpy")
    names, kvs, maps = _two_layers()
    p = plan(maps[names[0]], kvs[names[0]])
    pages = torch.zeros(4, maps[names[0]].canonical_page_size_bytes, dtype=torch.uint8)
    assert p.store(kvs[names[0]], np.arange(4)[::-1], pages, np.arange(4)) == 4
    out = torch.zeros_like(kvs[names[0]])
    p.load(pages, np.arange(4), out, np.arange(4)[::-1])
    assert torch.equal(out, kvs[names[0]])


@pytest.mark.parametrize("key", [0, None, ("layers", 1)])
def test_a_model_plan_of_layers_not_named_by_strings_is_a_clear_error(key):
    names, kvs, maps = _two_layers()
    import re
    with pytest.raises(ConfigError, match=f"plan_model: layers are named by strings .*, got {re.escape(repr(key))}"):
        plan_model({**maps, key: maps[names[0]]}, {**kvs, key: kvs[names[0]].clone()})
    mp = plan_model(maps, kvs)
    with pytest.raises(LayoutMismatch, match="kv_caches must be a dict of the planned layers"):
        mp.store({**kvs, key: kvs[names[0]]}, [0], torch.zeros(1, mp.page_size_bytes, dtype=torch.uint8), [0])


def test_a_tensor_no_family_reads_says_so_when_planned(caplog):
    """A tensor of another block count than the cache's falls back to the
    opaque page with no tensor view; planning it said it came from sizes alone."""
    kv = torch.randn(2, 2, 4, 2, 8).to(torch.bfloat16)
    spec = attention(block_size=4, heads=2, head_size=8, dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="layoutalg"):
        m = derive_canonical_mappings(config(tp=2, total=4), cache_config([(spec, ["L"])], num_blocks=3), {"L": kv})["L"]
    assert "is not (3, 2, 4, 2, 8)" in caplog.text
    with pytest.raises(LayoutMismatch, match="or from a tensor no family could read as this layer's: derivation "
                                             "logs why"):
        plan(m, kv)


@pytest.mark.parametrize("layout", ["nhd", "hnd", "mla"])
def test_the_device_path_keeps_every_index_on_the_tensors_device(layout):
    """On a GPU, the copy of whole-row runs added a CPU tensor of fragment
    numbers to the block ids moved to the device: every `--device cuda` store and load raised.
    Here the device is `meta` (no CPU tensor may meet it); the numpy path never runs there.
    Block ids come on the CPU, as `CopyPlan._batch` gives them: every index made from them
    must be moved to the words' device before it meets them."""
    import layoutalg.copy.executor as copy
    if layout == "mla":
        kv = torch.zeros(4, 4, 24, dtype=torch.bfloat16)
        spec, cfg = mla(block_size=4, head_size=24), config(tp=2, rank=1)
    else:
        kv = torch.zeros(4, 2, 4, 2, 16, dtype=torch.bfloat16)
        kv = kv if layout == "nhd" else torch.zeros(4, 2, 2, 4, 16, dtype=torch.bfloat16).transpose(2, 3)
        spec, cfg = attention(block_size=4, heads=2, head_size=16, dtype=torch.bfloat16), config(tp=2, rank=1, total=4)
    m = derive_canonical_mappings(cfg, cache_config([(spec, ["l"])], num_blocks=4), {"l": kv})["l"]
    w = plan(m, kv).word
    kind = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[w]
    words = {n: torch.empty((4, size // w), dtype=kind, device="meta") for n, size in (("local", m.local_page_size_bytes),
                                                            ("canonical", m.canonical_page_size_bytes))}
    ids = torch.tensor([2, 0, 3])
    for r in m.runs:
        local = (words["local"], r.local_offset, r.local_stride, ids)
        canon = (words["canonical"], r.canonical_offset, r.canonical_stride, ids)
        copy.copy_run(local, canon, r)   # a store
        copy.copy_run(canon, local, r)   # a load

"""FlashAttention's KV tensor, (2, num_blocks, block_size, heads, head_size): K of every block,
then V of every block. A block's page is two stretches of memory apart; `tensor (kv, block,
...)` says so in the spec, and every byte mover (copy plans, their descriptors, the legacy
store/load, direct reshard plans, the process runs) reads each stretch where it lies.
Expected pages are built here from a block-first tensor of the same values (split NHD/HND,
the reference's layout), never from the spec."""
import pytest
import torch

from layoutalg.plans import reshard
from layoutalg.copy import direct
from layoutalg.copy import views as torch_copy
from conftest import load_all, store_all
from layoutalg.copy.executor import plan
from layoutalg.errors import LayoutMismatch, SpecError
from layoutalg.dsl.library import load
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

BS, D, N, TOTAL = 16, 8, 5, 8



def _full(seed=0):
    """The whole model's KV, block first: (blocks, kv, token, head, dim)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-30000, 30000, (N, 2, BS, TOTAL, D), generator=g, dtype=torch.int16).view(torch.bfloat16)


def _same(a, b) -> bool:
    """Bit for bit (random bits hold NaNs, which never equal themselves)."""
    return a.shape == b.shape and torch.equal(a.view(torch.int16), b.view(torch.int16))


def _rank_tensor(full, tp, rank, flash, hnd):
    h = max(1, TOTAL // tp)
    first = rank * h if TOTAL >= tp else rank // (tp // TOTAL)
    part = full[:, :, :, first:first + h]                        # (N, 2, bs, h, D)
    order = (1, 0, 3, 2, 4) if flash else (0, 1, 3, 2, 4)         # the memory order: kv or block outermost
    mem = part.permute(*order) if hnd else part.permute(*(order[:2] + (2, 3, 4)))
    mem = mem.contiguous()
    if hnd:  # back to the (.., bs, h, D) shape vLLM shows, HND strides
        return mem.permute(0, 1, 3, 2, 4)
    return mem


def _group(deriver, full, tp, flash, hnd, said=None):
    """Every rank's tensor and mappings; a FlashAttention layer says so (`kv_blocks_second`)."""
    kvs = [_rank_tensor(full, tp, r, flash, hnd) for r in range(tp)]
    h = max(1, TOTAL // tp)
    sizes = {"kv_blocks_second": int(flash if said is None else said)}
    res = deriver.derive(LayerSpec("attention", 2 * BS * h * D * 2, BS, h, D, 2, sizes=sizes),
                         TensorLayout.of(kvs[0]), ParallelConfig(tp, TOTAL), N)
    return res, kvs


@pytest.mark.parametrize("hnd", [False, True])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_flash_tensors_store_the_split_layouts_canonical_pages(deriver, tp, hnd):
    """Every rank's store fills the bytes the block-first tensor of the same values fills, and a
    load gives the tensor back; the two share one page format."""
    full = _full(tp)
    flash, fk = _group(deriver, full, tp, True, hnd)
    split, sk = _group(deriver, full, tp, False, hnd)
    assert (flash.family, split.family) == (("flash_hnd", "split_hnd") if hnd else ("flash_nhd", "split_nhd"))
    ids = list(range(N))
    for rank in range(tp):
        fm, sm = flash.mappings[rank], split.mappings[rank]
        assert (fm.format_id, fm.layout_id) == (sm.format_id, sm.layout_id)
        a = torch.zeros(N, sm.canonical_page_size_bytes, dtype=torch.uint8)
        b = torch.zeros_like(a)
        plan(sm, sk[rank]).store(sk[rank], ids, a, ids)
        p = plan(fm, fk[rank])
        p.store(fk[rank], ids, b, ids)
        assert torch.equal(a, b) and a.count_nonzero() > 0
        back = torch.zeros_like(fk[rank])
        p.load(b, ids[::-1], back, ids[::-1])
        assert _same(back, fk[rank])


def test_descriptors_address_each_stretch_where_it_lies(deriver):
    """Replayed as memcpy triples over the tensor's memory, the descriptors write the pages a
    store writes, for a batch of blocks out of order."""
    full = _full(3)
    res, kvs = _group(deriver, full, 2, True, False)
    m, kv = res.mappings[1], kvs[1]
    p = plan(m, kv)
    blocks, pages = [4, 0, 2], [1, 2, 0]
    want = torch.zeros(3, m.canonical_page_size_bytes, dtype=torch.uint8)
    p.store(kv, blocks, want, pages)
    src = torch.empty(0, dtype=torch.uint8).set_(kv.untyped_storage())
    got = torch.zeros(3 * m.canonical_page_size_bytes, dtype=torch.uint8)
    for s, d, n in p.descriptors(blocks, pages).tolist():
        got[d:d + n] = src[s:s + n]
    assert torch.equal(got.view(3, -1), want)


def test_the_legacy_store_and_load_read_the_stretches(deriver):
    full = _full(4)
    flash, fk = _group(deriver, full, 4, True, True)
    split, sk = _group(deriver, full, 4, False, True)
    m = flash.mappings[2]
    a = torch.zeros(N, m.canonical_page_size_bytes, dtype=torch.uint8)
    b = torch.zeros_like(a)
    store_all(sk[2], a, split.mappings[2])
    store_all(fk[2], b, m)
    assert torch.equal(a, b)
    back = torch.zeros_like(fk[2])
    load_all(b, back, m)
    assert _same(back, fk[2])


@pytest.mark.parametrize("x, y", [((2, True), (4, False)), ((4, False), (1, True)), ((8, True), (2, True))])
def test_direct_plans_between_flash_and_split_groups(deriver, x, y):
    """Consumer ranks filled straight from producer ranks, each side read in its own layout."""
    full = _full(5)
    px, kx = _group(deriver, full, x[0], x[1], False)
    py, want = _group(deriver, full, y[0], y[1], False)
    for c, p in enumerate(reshard.direct_plans(px.mappings, py.mappings)):
        got = torch.zeros_like(want[c])
        direct.execute(p, kx, list(range(N)), got, list(range(N)))
        assert _same(got, want[c])


def test_a_flash_tensor_is_read_only_where_the_layer_says_so(deriver):
    """Unsaid, a (2, N, ...) tensor fails closed, as the reference reads it; said, a tensor whose
    shape shows the block first (N != 2) contradicts the layer and fails closed too: split NHD
    takes only a layer that keeps K and V inside its blocks (with two blocks the two tensors
    look alike, and only the name tells them apart)."""
    full = _full(7)
    unsaid, _ = _group(deriver, full, 2, True, False, said=False)
    assert unsaid.result == "opaque" and any("kv_blocks_second == 1" in r for r in unsaid.reasons)
    block_first, _ = _group(deriver, full, 2, False, False, said=True)
    assert block_first.result == "no_mappings", block_first
    assert any(r.startswith("split_nhd:") and "kv_blocks_second == 0" in r for r in block_first.reasons)


def test_two_blocks_are_read_as_the_layer_says(deriver):
    """(2, 2, ...) is both tensors: block first unless the layer says kv_blocks_second = 1, and
    the two readings put bytes apart."""
    kv = torch.zeros(2, 2, BS, 4, D, dtype=torch.bfloat16)
    layer = dict(kind="attention", page_size_bytes=2 * BS * 4 * D * 2, block_size=BS, num_kv_heads=4,
                 head_size=D, dtype_bytes=2)
    plain = deriver.derive(LayerSpec(**layer), TensorLayout.of(kv), ParallelConfig(2, TOTAL), 2)
    said = deriver.derive(LayerSpec(**layer, sizes={"kv_blocks_second": 1}), TensorLayout.of(kv),
                          ParallelConfig(2, TOTAL), 2)
    assert (plain.family, said.family) == ("split_nhd", "flash_nhd")
    data = torch.arange(kv.numel(), dtype=torch.int16).view(torch.bfloat16).view(kv.shape)
    a = torch.zeros(2, plain.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    b = torch.zeros_like(a)
    plan(plain.mappings[0], data).store(data, [0, 1], a, [0, 1])
    plan(said.mappings[0], data).store(data, [0, 1], b, [0, 1])
    assert not torch.equal(a, b)


def _flash_plan(deriver):
    full = _full(6)
    res, kvs = _group(deriver, full, 2, True, False)
    return res.mappings[0], kvs[0]


@pytest.mark.parametrize("bad, message", [
    (lambda kv: kv.as_strided(kv.shape, (0,) + kv.stride()[1:]), "overlap"),          # K and V one memory
    (lambda kv: kv.as_strided(kv.shape, (kv.stride(1) // 2,) + kv.stride()[1:]), "overlap"),  # V inside K's blocks
    (lambda kv: kv.as_strided(kv.shape, kv.stride()[:1] + (kv.stride(1) // 2,) + kv.stride()[2:]),
     "expected at least"),                                                            # blocks overlap
    (lambda kv: kv.transpose(0, 1).contiguous(), "shape"),                            # block first
    (lambda kv: kv[:, :, :, :, :4].contiguous(), "shape"),                            # another head size
])
def test_a_flash_tensor_whose_stretches_meet_is_refused_and_nothing_is_written(deriver, bad, message):
    m, kv = _flash_plan(deriver)
    p = plan(m, kv)
    pages = torch.full((N, m.canonical_page_size_bytes), 7, dtype=torch.uint8)
    wrong = bad(kv)
    before = wrong.clone()
    with pytest.raises(LayoutMismatch, match=message):
        p.store(wrong, [0, 1], pages, [0, 1])
    with pytest.raises(LayoutMismatch, match=message):
        p.load(pages, [0, 1], wrong, [0, 1])
    assert torch.equal(pages, torch.full_like(pages, 7)) and _same(wrong, before)


def test_stretches_that_interleave_without_meeting_are_read_where_they_lie(deriver):
    """A (2, N, ...) view of a block-first buffer: K and V of one block side by side, the
    blocks two stretches apart. Nothing overlaps, so it is a FlashAttention tensor too."""
    m, kv = _flash_plan(deriver)
    interleaved = kv.transpose(0, 1).contiguous().transpose(0, 1)
    assert interleaved.stride(0) < interleaved.stride(1)
    a = torch.zeros(N, m.canonical_page_size_bytes, dtype=torch.uint8)
    b = torch.zeros_like(a)
    plan(m, kv).store(kv, range(N), a, range(N))
    plan(m, interleaved).store(interleaved, range(N), b, range(N))
    assert torch.equal(a, b)


def test_a_block_first_byte_view_is_refused_for_a_flash_mapping(deriver):
    m, kv = _flash_plan(deriver)
    with pytest.raises(LayoutMismatch, match="stretches apart"):
        torch_copy.layer_bytes(kv, m)


ONE_BOX = """\
layout l(T):
    index {indices}
    tensor ({dims})

grid g:
    world tp
    ranks r < tp

family f serves thing:
    grid g
    local l(4)
    canonical l(4)
    shard (kv, t) -> (kv, t)
"""


@pytest.mark.parametrize("indices, dims, message", [
    ("t < T, kv < 2", "kv, block, t", "tensor dimension 'kv' of layout 'l' comes before 'block'"),
    ("kv < 2, t < T\n    offset kv * T + t + 1", "kv, block, t", "the layout starts at 1"),
])
def test_dims_before_the_block_must_be_outermost(tmp_path, indices, dims, message):
    spec = tmp_path / "f.lal"
    spec.write_text(ONE_BOX.format(indices=indices, dims=dims))
    with pytest.raises(SpecError, match=message) as e:
        from layoutalg.compile.codegen import compile_named
        compile_named(load([spec]), "f")
    assert e.value.span is not None and e.value.span.file.endswith("f.lal") and \
        e.value.span.text.strip().startswith("tensor (kv, block")


def test_a_region_of_a_page_starts_its_tensor_with_the_block(tmp_path):
    spec = tmp_path / "p.lal"
    spec.write_text("layout pg(T):\n    region a:\n        index kv < 2, t < T\n        tensor x (kv, block, t)\n"
                    "    region b:\n        index t < T\n        offset 2 * T + t\n        tensor y (block, t)\n")
    with pytest.raises(SpecError, match="dims before 'block' are for a layout of one box") as e:
        load([spec])
    assert e.value.span.line == 4


# ---- ways to read the stretches wrongly, each refused -------------------------------------

def test_the_flash_tensor_in_a_list_or_as_bytes_is_refused_and_nothing_moves(deriver):
    """A list holding it, a byte view of it and a block-first byte view of its memory would each
    read dim 0 (K or V) as the blocks."""
    m, kv = _flash_plan(deriver)
    pages = torch.full((N, m.canonical_page_size_bytes), 7, dtype=torch.uint8)
    for wrong, message in (([kv], "must be the one tensor"), (kv.view(torch.uint8), "is not the tensor"),
                           (kv.view(torch.uint8).reshape(N, -1), "is not the tensor")):
        with pytest.raises(LayoutMismatch, match=message):
            plan(m, wrong)
        with pytest.raises(LayoutMismatch, match=message):
            store_all(wrong, pages, m)
    with pytest.raises(LayoutMismatch, match="no \\(blocks, page\\) view"):
        torch_copy.layer_bytes([kv], m)
    assert torch.equal(pages, torch.full_like(pages, 7))
    full = _full(8)
    px, kx = _group(deriver, full, 2, True, False)
    py, ky = _group(deriver, full, 4, True, False)
    p = reshard.direct_plans(px.mappings, py.mappings)[0]
    got = torch.zeros_like(ky[0])
    with pytest.raises(LayoutMismatch, match="must be the one tensor"):
        direct.execute(p, [[k] for k in kx], list(range(N)), got, list(range(N)))
    assert not got.any()


def test_descriptors_refuse_a_block_stride_under_which_stretches_meet(deriver):
    m, kv = _flash_plan(deriver)
    p = plan(m, kv)
    with pytest.raises(LayoutMismatch, match="stretch 1 of block 0 and stretch 0 of block 1"):
        p.descriptors(range(2), range(2), store=False, block_bytes=N * p.length)  # K of block 1 on V of block 0
    assert p.descriptors(range(2), range(2), store=False, block_bytes=(N + 1) * p.length).shape[0] > 0
    with pytest.raises(LayoutMismatch, match="past what an int64 descriptor holds"):
        p.descriptors(range(N), range(N), kv_base=(1 << 63) - 6000)
    assert p.descriptors(range(N), range(N)).shape[0] > 0


def test_a_hand_made_view_must_lay_its_outer_dims_row_major_over_the_page():
    """Outer dims column-major within the page would send stretch 1's bytes to stretch 2's place."""
    from layoutalg.mapping import CanonicalPageMapping, CopyRun, TensorView
    runs = (CopyRun(0, 0, 8, 1, 8, 8),)
    kv = torch.arange(2 * 2 * 3 * 2, dtype=torch.uint8).view(2, 2, 3, 2)
    good = CanonicalPageMapping(8, 8, runs, 1, 0, True, tensors=(TensorView("kv", 0, (2, 2, 2), (4, 2, 1), 1, outer=2),))
    bad = good.__class__(8, 8, runs, 1, 0, True, tensors=(TensorView("kv", 0, (2, 2, 2), (2, 4, 1), 1, outer=2),))
    pages = torch.zeros(3, 8, dtype=torch.uint8)
    plan(good, kv).store(kv, range(3), pages, range(3))
    assert pages[1].tolist() == kv[:, :, 1].reshape(-1).tolist()
    with pytest.raises(LayoutMismatch, match="row-major"):
        plan(bad, kv)
    for outer in (None, "1", 1.0, True, 4):
        weird = good.__class__(8, 8, runs, 1, 0, True, tensors=(good.tensors[0]._replace(outer=outer),))
        with pytest.raises(LayoutMismatch, match="whole number of them"):
            plan(weird, kv)


def test_no_blocks_and_one_stretch_are_plans_too(deriver):
    m, kv = _flash_plan(deriver)
    empty = torch.zeros(2, 0, *kv.shape[2:], dtype=kv.dtype)
    assert plan(m, empty).store(empty, [], torch.zeros(0, m.canonical_page_size_bytes, dtype=torch.uint8), []) == 0


def test_a_page_in_too_many_stretches_fails_closed(tmp_path):
    """Dims before the block that cut the page into slivers: the layer is not certified, and a
    hand-made mapping of that view is refused by the copy."""
    from layoutalg.mapping import CanonicalPageMapping, CopyRun, TensorView
    spec = tmp_path / "f.lal"
    spec.write_text(ONE_BOX.format(indices="kv < 2, t < T", dims="kv, t, block").replace("(4)", "(40)"))
    res = Deriver(str(tmp_path)).derive(LayerSpec("thing", 80, 40, 1, 1, 1),
                                        TensorLayout((2, 40, 3), (120, 3, 1), 1), ParallelConfig(1, 1), 3)
    assert res.result == "no_mappings" and "80 stretches apart" in res.reasons[0], res.reasons
    m = CanonicalPageMapping(80, 80, (CopyRun(0, 0, 80, 1, 80, 80),), 1, 0, True,
                             tensors=(TensorView("kv", 0, (2, 40), (40, 1), 1, outer=2),))
    with pytest.raises(LayoutMismatch, match="more than the 64"):
        plan(m, torch.zeros(2, 40, 3, dtype=torch.uint8))


def test_an_index_may_not_be_named_block(tmp_path):
    spec = tmp_path / "f.lal"
    spec.write_text(ONE_BOX.format(indices="block < 2, t < T", dims="block, block, t").replace("kv", "block"))
    with pytest.raises(SpecError, match="index 'block' of layout 'l' has a reserved name") as e:
        from layoutalg.compile.codegen import compile_named
        compile_named(load([spec]), "f")
    assert e.value.span.line == 2


def test_nhd_is_read_before_hnd_where_both_fit(deriver):
    """One head and one token a block: both FlashAttention forms fit; NHD is taken, as split NHD
    is before split HND, so the two groups' pages share a format."""
    kv = torch.zeros(2, N, 1, 1, D, dtype=torch.bfloat16)
    flash = deriver.derive(LayerSpec("attention", 2 * D * 2, 1, 1, D, 2, sizes={"kv_blocks_second": 1}),
                           TensorLayout.of(kv), ParallelConfig(2, 2), N)
    split = deriver.derive(LayerSpec("attention", 2 * D * 2, 1, 1, D, 2),
                           TensorLayout.of(kv.transpose(0, 1).contiguous()), ParallelConfig(2, 2), N)
    assert (flash.family, split.family) == ("flash_nhd", "split_nhd")
    assert flash.mappings[0].format_id == split.mappings[0].format_id

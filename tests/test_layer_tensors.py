"""A layer of several tensors: vLLM views a Mamba layer's page through two tensors, the
conv state and the SSM state, in one buffer. The spec names the tensor that views each
region; the runtime recognises the tensors by shape, strides and element size, and copy
plans take them as given, checked to sit where their views say, in one memory."""
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.errors import LayoutMismatch
from layoutalg.mapping import TensorView
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

M = dict(ssm_heads=4, ssm_head_dim=4, state_size=2, conv_kernel=4, conv_bytes=2, ssm_bytes=4)
PAD = 8
BLOCKS = 5



def state_shapes(tp, ng, ds=False):
    """vLLM's per-rank Mamba2 state shapes: conv (K - 1, channels) (or dim-first), SSM (heads, dim, N)."""
    K, N = M["conv_kernel"] - 1, M["state_size"]
    groups = ng // tp if ng % tp == 0 else 1
    channels = M["ssm_heads"] // tp * M["ssm_head_dim"] + 2 * groups * N
    conv = (channels, K) if ds else (K, channels)
    return conv, (M["ssm_heads"] // tp, M["ssm_head_dim"], N)


def engine_tensors(raw: torch.Tensor, shapes, dtypes, page: int):
    """The tensors as vLLM's model runner makes them: each state a strided view of the raw
    buffer, one page a block, the states one after the other within the page."""
    out, start, blocks = [], 0, raw.numel() // page
    for shape, dtype in zip(shapes, dtypes):
        e = torch.empty(0, dtype=dtype).element_size()
        inner = torch.empty((1, *shape)).stride()[1:]
        out.append(torch.as_strided(raw.view(dtype), (blocks, *shape), (page // e, *inner), start // e))
        start += e * torch.Size(shape).numel()
    return out


def layer(tp, ng, ds=False):
    shapes = state_shapes(tp, ng, ds)
    page = 2 * torch.Size(shapes[0]).numel() + 4 * torch.Size(shapes[1]).numel() + PAD
    raw = (torch.arange(BLOCKS * page, dtype=torch.int64) * 7 % 251).to(torch.uint8)
    tensors = engine_tensors(raw, shapes, (torch.int16, torch.int32), page)
    spec = LayerSpec("mamba2", page, sizes={**M, "n_groups": ng, "conv_dim_first": int(ds)})
    return spec, raw.view(BLOCKS, page), tensors


@pytest.mark.parametrize("tp,ng,ds", [(2, 4, False), (4, 1, False), (2, 4, True), (1, 2, True)])
def test_the_engines_tensors_are_recognised_and_carried_by_every_mapping(deriver, tp, ng, ds):
    spec, _, tensors = layer(tp, ng, ds)
    res = deriver.derive(spec, TensorLayout.of(tensors), ParallelConfig(tp, 1))
    assert res.result == "certified" and res.family == ("mamba2_ds" if ds else "mamba2"), res.reasons
    conv, ssm = state_shapes(tp, ng, ds)
    for m in res.mappings:
        assert [v.name for v in m.tensors] == ["conv", "ssm"]
        assert m.tensors[0] == TensorView("conv", 0, conv, tuple(tensors[0].stride()[1:]), 2, "torch.int16")
        assert m.tensors[1] == TensorView("ssm", 2 * torch.Size(conv).numel(), ssm, tuple(tensors[1].stride()[1:]), 4,
                                          "torch.int32")


@pytest.mark.parametrize("tp,ng,ds", [(2, 4, False), (4, 1, False), (2, 4, True)])
def test_a_plan_over_the_tensors_moves_the_bytes_of_the_raw_page(deriver, tp, ng, ds):
    spec, raw, tensors = layer(tp, ng, ds)
    maps = deriver.derive(spec, TensorLayout.of(tensors), ParallelConfig(tp, 1)).mappings
    blocks, ids = [4, 0, 2], [1, 2, 0]
    via_tensors = torch.zeros(3, maps[0].canonical_page_size_bytes, dtype=torch.uint8)
    via_raw = torch.zeros_like(via_tensors)
    for m in maps:  # every rank stores (its writers' share); the raw pages stand in for each rank's state
        plan(m, tensors).store(tensors, blocks, via_tensors, ids)
        plan(m, raw).store(raw, blocks, via_raw, ids)
    assert torch.equal(via_tensors, via_raw) and via_tensors.any()
    for m in maps:
        loaded_raw = torch.zeros_like(raw)
        plan(m, loaded_raw).load(via_raw, ids, loaded_raw, blocks)
        back = engine_tensors(torch.zeros_like(raw).flatten(), [t.shape[1:] for t in tensors],
                              (torch.int16, torch.int32), raw.shape[1])
        plan(m, back).load(via_raw, ids, back, blocks)
        again = engine_tensors(loaded_raw.flatten(), [t.shape[1:] for t in tensors], (torch.int16, torch.int32),
                               raw.shape[1])
        for b, a in zip(back, again):
            assert torch.equal(b, a)                      # every state element, through either path
    if ng % tp == 0:                                      # nothing copied: each rank reloads its own state
        for t, b in zip(tensors, back):
            assert torch.equal(t[blocks], b[blocks])


def test_tensors_in_another_order_or_shape_fail_closed_by_name(deriver):
    spec, _, (conv, ssm) = layer(2, 4)
    swapped = deriver.derive(spec, TensorLayout.of([ssm, conv]), ParallelConfig(2, 1))
    assert swapped.result == "opaque"
    assert any("tensor 0 (conv): shape" in r for r in swapped.reasons), swapped.reasons
    one = deriver.derive(spec, TensorLayout.of(conv), ParallelConfig(2, 1))
    assert one.result == "opaque" and any("viewed by 2 tensor(s) (conv, ssm) and one tensor is of 2-byte elements, "
                                          "not the raw bytes (uint8 or int8) of the page" in r for r in one.reasons), one.reasons
    ds_sizes = layer(2, 4, ds=True)[0]            # the sizes say dim-first; the tensors are kernel-first
    res = deriver.derive(ds_sizes, TensorLayout.of([conv, ssm]), ParallelConfig(2, 1))
    assert res.result == "opaque" and any("mamba2_ds: tensor 0 (conv)" in r for r in res.reasons), res.reasons


@pytest.mark.parametrize("break_it, message", [
    (lambda c, s: [s, c], r"kv\[0\] \(conv\) is not the tensor 'conv'"),
    (lambda c, s: [c], r"holds 1 tensors but the page is viewed by 2 \(conv, ssm\)"),
    (lambda c, s: [c.clone(), s], None),           # tensors apart, each its stretch of every block: taken
    (lambda c, s: [c, torch.as_strided(s, s.shape, s.stride(), s.storage_offset() + 1)],
     r"kv\[1\] \(ssm\) and kv\[0\] \(conv\) share bytes"),  # apart, but into the next block's conv
    (lambda c, s: [c[1:], s[1:]], None),           # a view of later blocks is still the page's memory
    (lambda c, s: [c, s[:3]], r"kv\[1\] \(ssm\) has 3 blocks but kv\[0\] has 5"),
    # the same bytes in elements of another type: the pages would say int32 of float32 bytes
    (lambda c, s: [c, s.view(torch.float32)], r"kv\[1\] \(ssm\).*elements are torch.float32, the mapping's are torch.int32"),
    (lambda c, s: [c, s.view(torch.int16)], r"kv\[1\] \(ssm\) is not the tensor 'ssm'.*shape \(5, 2, 4, 4\)"),
    (lambda c, s: c, r"kv is one tensor but the page is viewed by 2 \(conv, ssm\)"),
    (lambda c, s: [c, 3], r"kv must be a torch.Tensor, got list \(of Tensor, int\)"),
])
def test_a_plan_refuses_tensors_that_are_not_the_page(deriver, break_it, message):
    spec, raw, (conv, ssm) = layer(2, 4)
    m = deriver.derive(spec, TensorLayout.of([conv, ssm]), ParallelConfig(2, 1)).mappings[0]
    given = break_it(conv, ssm)
    if message is None:
        plan(m, given)
        return
    with pytest.raises(LayoutMismatch, match=message):
        plan(m, given)


def test_a_rejected_call_moves_nothing(deriver):
    spec, raw, (conv, ssm) = layer(2, 4)
    m = deriver.derive(spec, TensorLayout.of([conv, ssm]), ParallelConfig(2, 1)).mappings[0]
    p = plan(m, [conv, ssm])
    pages = torch.zeros(BLOCKS, m.canonical_page_size_bytes, dtype=torch.uint8)
    before = raw.clone()
    with pytest.raises(LayoutMismatch, match="not the tensors this plan was made for"):
        p.store([ssm, conv], [0], pages, [0])
    with pytest.raises(LayoutMismatch, match="block_ids holds 9"):
        p.load(pages, [0, 1], [conv, ssm], [0, 9])
    assert not pages.any() and torch.equal(raw, before)


def test_a_page_with_no_tensor_views_takes_no_list(deriver):
    from layoutalg.mapping import CanonicalPageMapping, CopyRun
    m = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True)
    t = torch.zeros(2, 8, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="the mapping names no tensor views"):
        plan(m, [t])


def test_regions_of_one_tensor_that_do_not_join_fail_closed(tmp_path):
    spec = tmp_path / "p.lal"
    spec.write_text(
        "param n_things in 1 .. 64 samples 2 \"things\"\n"
        "layout pg(T):\n"
        "    region a:\n        index t < T\n        offset 2 * t\n        tensor s (block, t)\n"
        "    region b:\n        index t < T\n        offset 2 * t + 1\n        tensor s (block, t)\n"
        "grid one:\n    world tp * pcp\n    ranks r < tp * pcp\n"
        "family f serves things:\n    grid one\n    require tp == 1 and pcp == 1\n"
        "    local pg(n_things)\n    canonical pg(n_things)\n"
        "    shard a (t) -> (t)\n    shard b (t) -> (t)\n")
    res = Deriver(tmp_path).derive(LayerSpec("things", 4, sizes={"n_things": 2}), None, ParallelConfig(1, 1))
    assert res.result == "no_mappings" and any("tensor 's' of family 'f' does not view its regions as one tensor"
                                               in r for r in res.reasons), res.reasons
    from layoutalg.verify.check import check_family
    from layoutalg.compile.codegen import compile_named
    from layoutalg.dsl.library import load
    lib = load([spec])
    report = check_family(lib, compile_named(lib, "f"))    # check says so too, never "ok"
    assert not report.ok and any("does not view its regions as one tensor" in e for e in report.errors)


# ---- vLLM v0's paged attention: a page in two tensors apart, one family ---------------------

V0 = __import__("pathlib").Path(__file__).parent / "data" / "v0"


def v0_caches(blocks: int, heads: int, head_size: int, block_size: int, fill=None):
    """vLLM v0's cache of one layer: one (2, blocks, block_size * heads * head_size) fp32 buffer,
    K viewed (blocks, heads, head_size / x, block_size, x) with x = 16 bytes of elements, V
    (blocks, heads, head_size, block_size); `fill(kv, block, head, channel, token)` gives each
    element as int32 codes."""
    x = 16 // 4
    buf = torch.zeros(2, blocks, block_size * heads * head_size, dtype=torch.float32)
    key = buf[0].view(blocks, heads, head_size // x, block_size, x)
    value = buf[1].view(blocks, heads, head_size, block_size)
    if fill is not None:
        b, h, d, t = torch.meshgrid(torch.arange(blocks), torch.arange(heads), torch.arange(head_size),
                                    torch.arange(block_size), indexing="ij")
        key.view(torch.int32).copy_(fill(0, b, h, d, t).view(blocks, heads, head_size // x, x, block_size)
                                    .permute(0, 1, 2, 4, 3))
        value.view(torch.int32).copy_(fill(1, b, h, d, t))
    return buf, [key, value]


def test_vllm_v0s_paged_attention_is_one_family_moved_across_a_tp_change_byte_for_byte():
    """Two tensors apart (each its half of one buffer) derive as one family of two regions, the
    copy plans take them as they are, and a page stored by tp=2 and loaded by tp=4 gives every
    element back where vLLM's own head sharding puts it."""
    from layoutalg.copy.executor import plan
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    total, d, bs, blocks = 4, 8, 4, 3
    where = [2, 0, 1]  # page p lies in block where[p]

    def engine(tp, rank):  # codes of (K or V, token of the sequence, head of the model, channel)
        here = total // tp
        page = torch.tensor([where.index(b) for b in range(blocks)])
        return lambda kv, b, h, c, t: 1 + c + d * ((rank * here + h) + total * ((page[b] * bs + t) + blocks * bs * kv))
    pages = torch.zeros(blocks, 2 * bs * total * d * 4, dtype=torch.uint8)
    for tp, op in ((2, "store"), (4, "load")):
        for rank in range(tp):
            here = total // tp
            buf, kv = v0_caches(blocks, here, d, bs, engine(tp, rank))
            layer = LayerSpec("attention", 2 * bs * here * d * 4, bs, here, d, 4)
            res = Deriver(V0).derive(layer, tuple(TensorLayout.of(t) for t in kv), ParallelConfig(tp, total), blocks)
            assert (res.result, res.family) == ("certified", "v0_paged"), res.reasons
            m = res.mappings[rank]
            assert [(v.name, v.offset) for v in m.tensors] == [("key_cache", 0), ("value_cache", bs * here * d * 4)]
            if op == "store":
                plan(m, kv).store(kv, where, pages, list(range(blocks)))
                continue
            expected = buf.clone()
            buf.zero_()
            plan(m, kv).load(pages, list(range(blocks)), kv, where)
            assert torch.equal(buf, expected), f"tp=4 rank {rank}: {int((buf != expected).sum())} elements differ"


def test_vllm_v0s_whole_buffer_is_its_two_views_stacked_before_the_block():
    """The same layer given as vLLM v0 allocates it, one (2, blocks, ...) buffer: derive takes it
    as the family's two views stacked before the block, and its plans move the same bytes as the
    two views' plans (stored by the views at tp=2, loaded by the whole buffer at tp=4, and back)."""
    from layoutalg.copy.executor import plan
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    total, d, bs, blocks = 4, 8, 4, 3
    fill = lambda kv, b, h, c, t: 1 + c + d * (h + total * (t + bs * (b + blocks * kv)))  # noqa: E731
    ids = list(range(blocks))
    for tp_store, tp_load, whole_first in ((2, 4, False), (4, 2, True)):
        pages = torch.zeros(blocks, 2 * bs * total * d * 4, dtype=torch.uint8)
        sides = []
        for tp, whole in ((tp_store, whole_first), (tp_load, not whole_first)):
            here = total // tp
            layer = LayerSpec("attention", 2 * bs * here * d * 4, bs, here, d, 4)
            for rank in range(tp):
                buf, kv = v0_caches(blocks, here, d, bs, lambda kv, b, h, c, t: fill(kv, b, h + rank * here, c, t))
                given = buf if whole else kv
                tensor = TensorLayout.of(given) if whole else tuple(TensorLayout.of(t) for t in kv)
                res = Deriver(V0).derive(layer, tensor, ParallelConfig(tp, total), blocks)
                assert (res.result, res.family) == ("certified", "v0_paged"), res.reasons
                sides.append((res.mappings[rank], buf, given, whole))
        for m, buf, given, whole in sides[:tp_store]:
            if whole:
                assert [(v.name, v.outer, v.shape[0]) for v in m.tensors] == [("key_cache|value_cache", 1, 2)]
            plan(m, given).store(given, ids, pages, ids)
        for m, buf, given, whole in sides[tp_store:]:
            expected = buf.clone()
            buf.zero_()
            plan(m, given).load(pages, ids, given, ids)
            assert torch.equal(buf, expected), f"{int((buf != expected).sum())} elements differ"
    # the buffer's slices swapped in memory (V's blocks first): another tensor, refused by the plan
    m = sides[-1][0]
    buf = sides[-1][1]
    with pytest.raises(LayoutMismatch):
        plan(m, buf.transpose(0, 1)).store(buf.transpose(0, 1), ids, pages, ids)


def test_a_buffer_that_is_no_stack_of_the_views_is_refused_by_name():
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    layer = LayerSpec("attention", 2 * 4 * 2 * 8 * 4, 4, 2, 8, 4)
    res = Deriver(V0).derive(layer, TensorLayout((3, 2, 64), (128, 64, 1), 4), ParallelConfig(2, 4), 3)
    assert res.result != "certified"
    assert any("nor are its views stacked before the block: it has shape (3, 2, 64), not (2, 3, ...)" in r
               for r in res.reasons), res.reasons


def test_a_plan_refuses_tensors_apart_laid_out_otherwise_than_it_was_made_for(deriver):
    """A plan made for views of one buffer kept its cuts, and took tensors of the same
    strides lying apart, reading the second state past the first's stretch."""
    spec, raw, (conv, ssm) = layer(2, 4)
    m = deriver.derive(spec, TensorLayout.of([conv, ssm]), ParallelConfig(2, 1)).mappings[0]
    apart = [torch.as_strided(torch.zeros(t.shape[0] * t.stride(0), dtype=t.dtype), t.shape, t.stride(), 0)
             for t in (conv, ssm)]
    pages = torch.zeros(conv.shape[0], m.canonical_page_size_bytes, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="this plan was made for stretches cut at none"):
        plan(m, [conv, ssm]).store(apart, list(range(conv.shape[0])), pages, list(range(conv.shape[0])))
    plan(m, apart).store(apart, list(range(conv.shape[0])), pages, list(range(conv.shape[0])))  # the control


def test_runs_past_the_bytes_tensors_apart_hold_are_refused():
    from layoutalg.mapping import CanonicalPageMapping, CopyRun
    from conftest import store_all as store
    views = (TensorView("k", 0, (2,), (1,), 2), TensorView("v", 4, (1,), (1,), 2))
    m = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True, tensors=views)
    a, vb = torch.arange(6, dtype=torch.int16).view(3, 2), torch.arange(100, 106, dtype=torch.int16).view(3, 2)
    with pytest.raises(LayoutMismatch, match="runs reach local byte 8, past the 6 bytes its tensors hold"):
        store([a, vb[:, :1]], torch.zeros(3, 8, dtype=torch.uint8), m)

"""ROCm AITER FA's shuffled two-slot page (`specs/aiter_shuffle.lal`, the deployment word
`aiter_kv = 2`): against the engine model of vLLM 0.32's `reshape_and_cache_shuffle_kernel`
(`engine_models.aiter("shuffle")`), and moved through the runtime from tp=2 to tp=1 byte for byte.

What conform can tell here: AITER FA serves no DCP or PCP, so a head's K tile and V tile move
whole with the head, and an order inside a tile is the same on every rank. A spec that gets the
inside of a tile wrong (or ROCM_ATTN's paged writer, whose tiles differ from the shuffle's only
inside a head) is conformant under TP; what it misplaces across heads or slots is refuted."""
import shutil
from pathlib import Path

import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.dsl.library import load
from layoutalg.params import parse_config
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
from layoutalg.tools import conform, engine_models as em
from layoutalg.verify.prove.runner import Budgets, prove_obligation
from layoutalg.verify.prove.structural import page_tiles

SPECS = Path(__file__).parent.parent / "specs"
NAMES = dict(aiter_kv=2)


def _conform(config, writer, heads, specs=None, block_size=8):
    return conform.check("aiter_shuffle", parse_config(config), writer, heads=heads, block_size=block_size,
                         head_size=8, dtype="fp32", names=NAMES, specs=specs)   # fp32: x = 4


@pytest.mark.parametrize("config, heads", [("tp=2", 4), ("tp=4", 4), ("tp=4", 2), ("tp=8", 2)])
def test_the_spec_is_what_aiter_fa_writes(config, heads):
    """Heads sharded (tp=2, tp=4 of 4 heads) and GQA replicas (tp=4 and tp=8 of 2 heads)."""
    r = _conform(config, em.WRITERS["aiter_shuffle"](), heads)
    assert r.status == "conformant" and r.compared > 0, str(r)
    # ROCM_SEGMENTED_ATTN's token-major slots are not this page (heads cut another way)
    r = _conform(config, em.aiter("segmented"), heads)
    assert r.status == "refuted" and "rank 0" in str(r), str(r)


def test_aiter_fa_serves_no_context_parallelism():
    with pytest.raises(Exception, match="dcp == 1 and pcp == 1 does not hold"):
        _conform("tp=2,dcp=2", em.aiter("shuffle"), 1)


def _mutant(tmp_path, old, new):
    for name in ("grids.lal", "aiter_shuffle.lal"):
        shutil.copy(SPECS / name, tmp_path / name)
    f = tmp_path / "aiter_shuffle.lal"
    text = f.read_text()
    assert text.count(old) == 1
    f.write_text(text.replace(old, new))
    return tmp_path


KEY = "offset d0 + X * (t + T1 * X * (d1 + D1 * h))"


def test_heads_inside_the_key_rows_are_proved_and_refuted(tmp_path):
    """K's rows of x-element chunks with the heads inside each row of chunks, (d // x, head, slot,
    x): one-to-one, the regions tile, the writers are apart; the kernel puts a head's whole tile
    first (head * head_size * block_size)."""
    specs = _mutant(tmp_path, KEY, "offset d0 + X * (t + T1 * X * (h + H * d1))")
    lib = load([specs / "aiter_shuffle.lal"])
    for claim in ("local-bijective", "canonical-bijective", "writers-disjoint"):
        assert prove_obligation(lib, "aiter_shuffle.key", claim, {}, Budgets.of()).status == "proved", claim
    assert page_tiles(lib, "aiter_shuffle", "local").status == "proved"
    r = _conform("tp=2", em.aiter("shuffle"), 4, specs=str(specs))
    assert r.status == "refuted", str(r)
    first = str(r).splitlines()[1]
    assert "rank 0, block 0" in first and "K of token" in first, first
    assert _conform("tp=1", em.aiter("shuffle"), 4, specs=str(specs)).status == "conformant"  # one rank: alike


def test_an_order_inside_a_head_tile_is_not_seen_under_tp(tmp_path):
    """K's chunks ordered (slot, d // x) instead of (d // x, slot): a tile of its own, moved whole
    with its head, so under TP (AITER FA's only parallelism) conform cannot refute it; nor ROCM_ATTN's
    paged writer, whose K tile is the shuffle's and whose V tile is (head_size, block_size)."""
    specs = _mutant(tmp_path, KEY, "offset d0 + X * (d1 + D1 * (t + T1 * X * h))")
    assert _conform("tp=2", em.aiter("shuffle"), 4, specs=str(specs)).status == "conformant"
    assert _conform("tp=2", em.aiter("paged"), 4).status == "conformant"


# Through the runtime: vLLM's memory as AITER FA's kernel fills it (restated from the kernel here,
# not from the spec or the engine model), stored by tp=2 and loaded by tp=1.
TOTAL, D, BS, N = 4, 16, 16, 3        # bf16: x = 8, two x-chunks of dims and of tokens
X = 8


def _engine(tp, rank, planes: bool):
    """One rank's KV memory and the kernel's two views of it: `planes` LHBNC (K of every block, then V
    of every block), else LBHNC (a block's K slot, then its V slot). Each element's bits hold the code
    of (page, K or V, token, head of the model, dim)."""
    h = TOTAL // tp
    where = [2, 0, 1]                                     # page p lies in block where[p]
    mem = torch.zeros((2, N, BS * h * D) if planes else (N, 2, BS * h * D), dtype=torch.int16)
    k, v = (mem[0], mem[1]) if planes else (mem[:, 0], mem[:, 1])
    for b in range(N):
        p = where.index(b)
        for i in range(h):
            g = rank * h + i
            for s in range(BS):
                for d in range(D):
                    code = lambda kv: (((p * 2 + kv) * BS + s) * TOTAL + g) * D + d + 1  # noqa: E731
                    k[b, i * D * BS + d // X * BS * X + s * X + d % X] = code(0)
                    v[b, i * D * BS + s // X * D * X + d * X + s % X] = code(1)
    key = k.view(N, h, D // X, BS, X).view(torch.bfloat16)
    value = v.view(N, h, BS // X, D, X).view(torch.bfloat16)
    return mem, (key, value), where


def _derive(deriver, tp, tensors):
    h = TOTAL // tp
    res = deriver.derive(LayerSpec("attention", 2 * BS * h * D * 2, BS, h, D, 2, sizes=dict(NAMES)),
                         tensors, ParallelConfig(tp, TOTAL), N)
    assert (res.result, res.family) == ("certified", "aiter_shuffle"), res.reasons
    return res


@pytest.mark.parametrize("planes", [True, False])
def test_stored_at_tp2_loaded_at_tp1_byte_for_byte(deriver, planes):
    ids = list(range(N))
    pages = None
    for rank in range(2):
        _, views, where = _engine(2, rank, planes)
        m = _derive(deriver, 2, tuple(TensorLayout.of(t) for t in views)).mappings[rank]
        assert [v.name for v in m.tensors] == ["key_cache", "value_cache"]
        if pages is None:
            pages = torch.zeros(N, m.canonical_page_size_bytes, dtype=torch.uint8)
        plan(m, list(views)).store(list(views), where, pages, ids)
    mem, views, where = _engine(1, 0, planes)
    expected = mem.clone()
    mem.zero_()
    m = _derive(deriver, 1, tuple(TensorLayout.of(t) for t in views)).mappings[0]
    plan(m, list(views)).load(pages, ids, list(views), where)
    assert torch.equal(mem, expected), f"{int((mem != expected).sum())} elements differ"
    # the canonical page is the single rank's own memory, block by block
    flat = expected.view(N, -1) if not planes else expected.permute(1, 0, 2).reshape(N, -1)
    assert torch.equal(pages[ids].view(torch.int16), flat[where]), "the canonical page is not tp=1's memory"


def test_the_planes_given_as_one_tensor_and_the_raw_page(deriver):
    """LHBNC's (2, blocks, ...) tensor is the two views stacked before the block. A bf16 page's raw
    bytes are refused: the element size is the tensor's, 1 byte, so x would be 16 and the layout
    half the page (raw bytes serve an fp8 cache only). vLLM's own (blocks, 2, block_size, heads *
    head_size) tensor is neither: the kernel ignores its strides, so it is refused (stored opaque)."""
    mem, _, _ = _engine(2, 0, planes=True)
    res = _derive(deriver, 2, TensorLayout.of(mem.view(torch.bfloat16)))
    assert [(v.name, v.outer) for v in res.mappings[0].tensors] == [("key_cache|value_cache", 1)]
    mem, _, _ = _engine(2, 0, planes=False)
    h = TOTAL // 2
    layer = LayerSpec("attention", 2 * BS * h * D * 2, BS, h, D, 2, sizes=dict(NAMES))
    raw = deriver.derive(layer, TensorLayout.of(mem.view(N, -1).view(torch.uint8)), ParallelConfig(2, TOTAL), N)
    assert raw.family == "opaque" and any("aiter_shuffle: layout holds 1024 bytes" in w for w in raw.reasons)
    kv = mem.view(torch.bfloat16)                          # (blocks, 2, block_size, heads * head_size)
    res = deriver.derive(layer, TensorLayout.of(kv), ParallelConfig(2, TOTAL), N)
    assert res.family == "opaque", (res.result, res.family)


def test_no_other_family_takes_an_aiter_fa_layer(deriver):
    """aiter_kv = 2 is AITER FA's word: split NHD's tensor said to be its is read by no family but the
    fallback, and FlashAttention's (2, blocks, ...) as AITER FA's two planes, never as FlashAttention's."""
    h = TOTAL // 2
    for shape, second, family in (((N, 2, BS, h, D), 0, "opaque"), ((2, N, BS, h, D), 1, "aiter_shuffle")):
        layer = LayerSpec("attention", 2 * BS * h * D * 2, BS, h, D, 2, sizes=dict(NAMES, kv_blocks_second=second))
        res = deriver.derive(layer, TensorLayout.of(torch.zeros(shape, dtype=torch.bfloat16)),
                             ParallelConfig(2, TOTAL), N)
        assert res.family == family, (shape, res.family, res.reasons)

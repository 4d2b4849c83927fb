"""NVFP4 KV as vLLM writes it for FlashInfer's trtllm-gen kernels (SM100), filled by an engine
model of that writer (no spec involved): stored at tp=4 and loaded at tp=1, every byte of the
values and of the scales comes back where the engine's own tp=1 cache holds it."""
import torch

from layoutalg.copy.executor import plan
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

TOTAL, D, BS, BLOCKS = 4, 64, 8, 3   # heads of the model, values a head, tokens a block, blocks
S = D // 16                          # fp8 scales a head and token


def _byte(kind: int, page: int, token: int, head: int, i: int) -> int:
    """A byte's content as a hash of what it holds: values (kind 0, 2) or scales (1, 3) of K or V."""
    x = (((kind * 7 + page) * 64 + token) * 64 + head) * 4096 + i + 0x9E3779B9
    x = (x ^ (x >> 13)) * 0x5BD1E995 & 0xFFFFFFFF
    return (x ^ (x >> 15)) & 0xFF


def engine_cache(tp: int, rank: int, page_of_block: list, swizzled: bool = True) -> torch.Tensor:
    """vLLM's uint8 (num_blocks, 2 * heads, block_size, D * 9 / 16) cache of one rank, written as its
    NVFP4 kernel writes a block: K values, K scales, V values, V scales, each head-major; V's scales
    of four tokens transposed: scale g of token t at (t // 4) * 4 * S + 4 * g + t % 4."""
    heads = TOTAL // tp
    out = torch.zeros(len(page_of_block), 2 * heads, BS, D * 9 // 16, dtype=torch.uint8)
    flat = out.view(len(page_of_block), -1)
    values, scales = heads * BS * D // 2, heads * BS * S
    for b, page in enumerate(page_of_block):
        for side in (0, 1):
            base = side * (values + scales)
            for h in range(heads):
                head = rank * heads + h
                for t in range(BS):
                    for i in range(D // 2):
                        flat[b, base + h * BS * D // 2 + t * D // 2 + i] = _byte(2 * side, page, t, head, i)
                    for g in range(S):
                        at = (t // 4) * 4 * S + 4 * g + t % 4 if side and swizzled else t * S + g
                        flat[b, base + values + h * BS * S + at] = _byte(2 * side + 1, page, t, head, g)
    return out


def _mapping(tp: int, rank: int, swizzle: int = 1):
    page = 2 * (TOTAL // tp) * BS * D * 9 // 16
    layer = LayerSpec("attention", page, BS, TOTAL // tp, D, 1, sizes={"nvfp4": 1, "nvfp4_v_swizzle": swizzle})
    res = Deriver().derive(layer, TensorLayout((BLOCKS, page), (page, 1), 1, "torch.uint8"),
                           ParallelConfig(tp, TOTAL), BLOCKS)
    assert res.result == "certified", res.reasons
    return res


def test_nvfp4_pages_stored_at_tp4_load_at_tp1_values_and_scales_byte_for_byte():
    where = [2, 0, 1]                                   # page p lies in block where[p]
    page_of_block = [where.index(b) for b in range(BLOCKS)]
    res4 = _mapping(4, 0)
    assert res4.family == "nvfp4"
    pages = torch.zeros(BLOCKS, res4.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    for rank, m in enumerate(res4.mappings):
        kv = engine_cache(4, rank, page_of_block).view(BLOCKS, -1)   # the raw bytes of each block
        plan(m, kv).store(kv, where, pages, list(range(BLOCKS)))
    m1 = _mapping(1, 0).mappings[0]
    assert m1.format_id == res4.mappings[0].format_id   # one page format at every tp
    got = torch.zeros(BLOCKS, m1.local_page_size_bytes, dtype=torch.uint8)
    plan(m1, got).load(pages, list(range(BLOCKS)), got, where)
    want = engine_cache(1, 0, page_of_block).view(BLOCKS, -1)
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} bytes differ"


def test_plain_and_swizzled_v_scales_are_two_page_formats():
    """An SM120 reader expects V's scales plain: the engine says which (`nvfp4_v_swizzle`), and the
    two placements never share a format id, so neither reads the other's pages."""
    swizzled, plain = _mapping(2, 0, 1), _mapping(2, 0, 0)
    assert (swizzled.family, plain.family) == ("nvfp4", "nvfp4_plain")
    assert swizzled.mappings[0].format_id != plain.mappings[0].format_id
    # the control: the engine's swizzled cache read as plain puts V's scales elsewhere
    assert not torch.equal(engine_cache(1, 0, [0], swizzled=True), engine_cache(1, 0, [0], swizzled=False))


def test_a_layer_that_is_not_nvfp4_is_never_taken_by_it():
    page = 2 * TOTAL * BS * D * 9 // 16
    res = Deriver().derive(LayerSpec("attention", page, BS, TOTAL, D, 1), TensorLayout((BLOCKS, page), (page, 1), 1),
                           ParallelConfig(1, TOTAL), BLOCKS)
    assert res.family not in ("nvfp4", "nvfp4_plain"), res.family


def test_the_spec_reads_each_byte_as_the_engine_writes_it():
    """At tp=1 every index of each region, read by the spec (`interpret.Reading`, the spec text
    itself), lands on the byte where the engine model wrote that element; the plain family read
    over the swizzled engine misses V's scales, so the check can fail."""
    import itertools
    from layoutalg.dsl.interpret import Reading
    from layoutalg.dsl.library import load_default
    lib = load_default()
    sizes = dict(tp=1, pcp=1, dcp=1, interleave=1, total_heads=TOTAL, heads=TOTAL, block_size=BS, head_size=D,
                 dtype_bytes=1, page_size=2 * TOTAL * BS * D * 9 // 16, per_token_head_quant=0, pcp_replicas=0,
                 nvfp4=1)
    cache = engine_cache(1, 0, [0]).view(-1)

    def misses(family, swizzle):
        wrong = 0
        for region, kind in (("k_values", 0), ("k_scales", 1), ("v_values", 2), ("v_scales", 3)):
            r = Reading(lib, f"{family}.{region}", {**sizes, "nvfp4_v_swizzle": swizzle})
            ext = r.extents("local")
            for idx in itertools.product(*(range(n) for n in ext.values())):
                i = dict(zip(ext, idx))
                token = i["t"] if "t" in i else 4 * i["q"] + i["r"]
                wrong += int(cache[r.offset("local", i)]) != _byte(kind, 0, token, i["h"], i.get("b", i.get("g")))
        return wrong
    assert misses("nvfp4", 1) == 0
    assert misses("nvfp4_plain", 0) > 0

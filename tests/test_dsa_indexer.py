"""The sparse-attention indexer's key cache (DeepSeek V3.2, GLM-5) is never stored as MLA rows.

vLLM describes it with an `MLAAttentionSpec` (head_size 132, uint8), but its backend writes a
block as every token's 128 fp8 values, then every token's fp32 scale. The adapter takes the
layer's kind from the engine's own word (the layer's class, or vLLM's layer name), and the
pages are checked against an engine model of that write (no spec involved): the canonical page
is what one rank holding every token would write.
"""
from __future__ import annotations

import torch
import pytest

from layoutalg import derive_canonical_mappings
from layoutalg.runtime.vllm import engine_kind

from test_vllm_adapter import cache_config, config, mla

VALUES, SCALE = 128, 4
NAME = "model.layers.3.self_attn.indexer.k_cache"


class DeepseekV32IndexerCache:  # the engine's layer class, as vLLM names it
    pass


class Glm5IndexerCache(DeepseekV32IndexerCache):
    pass


def engine_page(tokens: list[int], block_size: int) -> bytes:
    """A block as the indexer's kernel writes it: the values of `tokens` (global token numbers),
    then their scales; each byte names its token and place."""
    values = [(7 * g + v) % 251 for g in tokens for v in range(VALUES)]
    scales = [(3 * g + s + 101) % 253 for g in tokens for s in range(SCALE)]
    assert len(tokens) == block_size
    return bytes(values + scales)


def canonical_from(mappings, pages: list[bytes]) -> bytearray:
    out = bytearray(mappings[0].canonical_page_size_bytes)
    for m, page in zip(mappings, pages):
        if not m.is_writer(0):
            continue
        for r in m.runs:
            for src, dst, size in r.triples():
                out[dst:dst + size] = page[src:src + size]
    return out


def derive_all(tp, dcp, block_size, names_it, context=None):
    spec = mla(block_size=block_size, head_size=VALUES + SCALE, dtype=torch.uint8)
    name = NAME if names_it == "name" else "model.layers.3.attn_cache"
    out = []
    for rank in range(tp):
        vc = config(tp=tp, dcp=dcp, total=1, rank=rank)
        if context is not None:
            vc.compilation_config = type("CompilationConfig", (), {"static_forward_context": {name: context}})()
        caches = {name: torch.zeros(2, block_size, VALUES + SCALE, dtype=torch.uint8)}
        out.append(derive_canonical_mappings(vc, cache_config([(spec, [name])], num_blocks=2), caches)[name])
    return out


@pytest.mark.parametrize("tp,dcp", [(1, 1), (2, 2), (4, 2), (8, 8)])
@pytest.mark.parametrize("word", ["name", "class", "subclass"])
def test_indexer_pages_hold_what_the_engine_wrote(tp, dcp, word):
    block_size = 4
    context = {"class": DeepseekV32IndexerCache(), "subclass": Glm5IndexerCache()}.get(word)
    maps = derive_all(tp, dcp, block_size, "name" if word == "name" else "other", context)
    assert {m.layout_id for m in maps} == {maps[0].layout_id} and maps[0].parallelism_agnostic == (dcp == 1)
    # rank r holds the tokens of its dcp rank: global token t * dcp + dcp_rank (interleave 1)
    pages = [engine_page([t * dcp + r % dcp for t in range(block_size)], block_size) for r in range(tp)]
    assert canonical_from(maps, pages) == engine_page(list(range(block_size * dcp)), block_size * dcp)


def test_without_the_engine_word_the_layer_is_mla_rows_and_the_oracle_sees_it():
    """The control: read by its spec class alone it is MLA's token rows, and a cp change moves its
    bytes wrong, which the engine model above catches."""
    maps = derive_all(2, 2, 4, "other")
    pages = [engine_page([t * 2 + r for t in range(4)], 4) for r in range(2)]
    assert canonical_from(maps, pages) != engine_page(list(range(8)), 8)


def test_the_engine_names_the_kind_not_the_shape():
    cfg = config()
    assert engine_kind(cfg, NAME) == "dsa_indexer"
    assert engine_kind(cfg, "model.layers.3.self_attn.attn") is None
    cfg.compilation_config = type("C", (), {"static_forward_context": {"x": Glm5IndexerCache(), NAME: object()}})()
    assert engine_kind(cfg, "x") == "dsa_indexer"
    assert engine_kind(cfg, NAME) is None  # the engine's layer object outranks its name

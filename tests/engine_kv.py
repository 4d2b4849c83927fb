"""An attention layer's KV cache filled by the engine's own sharding rules, never by a spec: the
oracle for "a page stored under one configuration means the same under another".

vLLM's rules, restated: rank = pcp_rank * tp + tp_rank; KV heads are cut contiguously over TP
(with fewer heads than ranks, tp / heads consecutive ranks share one); DCP splits the ranks
holding one head set, dcp_rank = tp_rank % dcp; cp = dcp * pcp and cp_rank = pcp_rank * dcp +
dcp_rank deal tokens out in chunks of `interleave`. Block b of a rank holds its share of the
tokens of one page: local token l is token ((l // interleave) * cp + cp_rank) * interleave +
l % interleave of that page, whose tokens follow the previous page's.

Each element holds a code of (K or V, token of the sequence, head of the model, channel): a
loaded tensor equals the engine's fill exactly when every element came home.
"""
from __future__ import annotations

import torch


def code(kv: int, token: int, head: int, channel: int, heads: int, head_size: int, tokens: int) -> int:
    return 1 + channel + head_size * (head + heads * (token + tokens * kv))


def engine_fill(config: dict, rank: int, total_heads: int, head_size: int, block_size: int, page_of_block: list,
                tokens: int) -> torch.Tensor:
    """The engine's (blocks, 2, block_size, local heads, head_size) int32 codes on `rank`."""
    tp, pcp, dcp, step = config["tp"], config["pcp"], config["dcp"], config["interleave"]
    tp_rank, pcp_rank = rank % tp, rank // tp
    cp, cp_rank = dcp * pcp, pcp_rank * dcp + tp_rank % dcp
    if total_heads >= tp:
        here = total_heads // tp
        heads = [tp_rank * here + h for h in range(here)]
    else:
        heads = [tp_rank // (tp // total_heads)]
    out = torch.zeros(len(page_of_block), 2, block_size, len(heads), head_size, dtype=torch.int32)
    for b, page in enumerate(page_of_block):
        for l in range(block_size):
            token = page * block_size * cp + ((l // step) * cp + cp_rank) * step + l % step
            for k in range(2):
                for h, head in enumerate(heads):
                    for c in range(head_size):
                        out[b, k, l, h, c] = code(k, token, head, c, total_heads, head_size, tokens)
    return out


def round_trip(store, load, conv, total_heads: int, head_size: int) -> tuple[int, int]:
    """Fill `store`'s ranks (fp32 `distributed.Group`s, split-NHD tensors) by the engine, store
    their canonical pages by layoutalg's plans, convert them to `load`'s format (`conv`, a
    `PageConversion`, or None for one format), load them on `load`'s ranks and
    compare with the engine's own fill there: (elements wrong, elements compared)."""
    from layoutalg.copy.executor import plan
    from layoutalg.copy.direct import convert
    blocks_x, blocks_y = store.blocks, load.blocks
    tokens = blocks_x * store.sizes["block_size"] * store.config["dcp"] * store.config["pcp"]
    pages_x = torch.arange(blocks_x)
    where_x = torch.randperm(blocks_x, generator=torch.Generator().manual_seed(1))  # page i in block where_x[i]
    canonical = torch.zeros(blocks_x, store.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
    for rank, m in enumerate(store.mappings):
        page_of_block = [0] * blocks_x
        for page, block in enumerate(where_x.tolist()):
            page_of_block[block] = page
        kv = store.empty().zero_()
        kv.view(torch.int32).view(-1).copy_(engine_fill(store.config, rank, total_heads, head_size,
                                                        store.sizes["block_size"], page_of_block, tokens).view(-1))
        plan(m, kv).store(kv, where_x, canonical, pages_x)
    pages_y = torch.arange(blocks_y)
    if conv is None:
        loaded = canonical
    else:
        loaded = torch.zeros(blocks_y, load.mappings[0].canonical_page_size_bytes, dtype=torch.uint8)
        if conv.big_page == loaded.shape[1]:
            convert(conv, loaded, canonical, to_small=False)
        else:
            convert(conv, canonical, loaded, to_small=True)
    wrong = compared = 0
    where_y = torch.randperm(blocks_y, generator=torch.Generator().manual_seed(2))
    for rank, m in enumerate(load.mappings):
        page_of_block = [0] * blocks_y
        for page, block in enumerate(where_y.tolist()):
            page_of_block[block] = page
        kv = load.empty().zero_()
        plan(m, kv).load(loaded, pages_y, kv, where_y)
        want = engine_fill(load.config, rank, total_heads, head_size, load.sizes["block_size"], page_of_block, tokens)
        have = kv.view(torch.int32).reshape(want.shape)
        wrong += int((have != want).sum())
        compared += want.numel()
    return wrong, compared

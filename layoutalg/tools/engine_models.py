"""Writers of vLLM's KV memory for `tools.conform`, written from vLLM 0.32's own rules and never
from a spec: which heads, channels and tokens a rank holds (its layers' weight sharding and its
context-parallel token dealing), and where its cache writer puts each of them in a block.

They stand in for vLLM's cache writers where those do not run here (CUDA kernels): the
attention backends' `reshape_and_cache` (a token's K and V rows at slot `t` of its block, NHD
`(2, block_size, heads, head_size)` or HND `(2, heads, block_size, head_size)` a block), and the
Mamba2 layer's conv and SSM state (`(conv_kernel - 1, x | B | C)` then `(heads, head_dim,
state_size)`, each dense, from byte 0 of the page). Each element is written as the 4-byte code
of its place in the whole model (`fp32` layers: the code's bits, not a float value), so a byte in
the wrong place never holds the right value.

vLLM's rules, restated: rank = pcp_rank * tp + tp_rank; KV heads are cut contiguously over TP
(fewer heads than ranks: tp / heads consecutive ranks share one); dcp_rank = tp_rank % dcp; cp
= dcp * pcp and cp_rank = pcp_rank * dcp + dcp_rank deal tokens out in chunks of `interleave`:
local token l of a block of page p is token p * block_size * cp + ((l // interleave) * cp +
cp_rank) * interleave + l % interleave. Mamba2's x channels and heads are cut contiguously over
TP, its B and C groups too (fewer groups than ranks: tp / n_groups consecutive ranks share one).
"""
from __future__ import annotations

import torch


def _put(pages: torch.Tensor, b: int, at: int, codes: torch.Tensor) -> None:
    raw = codes.to(torch.int32).contiguous().view(-1).view(torch.uint8)
    pages[b, at:at + raw.numel()] = raw


def _heads(sizes: dict, rank: int) -> list:
    tp, total = sizes["tp"], sizes["total_heads"]
    tp_rank = rank % tp
    if total >= tp:
        here = total // tp
        return [tp_rank * here + h for h in range(here)]
    return [tp_rank // (tp // total)]


def _tokens(sizes: dict, rank: int, page: int) -> torch.Tensor:
    """The tokens of the sequence a rank's block of canonical page `page` holds, in slot order."""
    tp, pcp, dcp, step, bs = sizes["tp"], sizes["pcp"], sizes["dcp"], sizes["interleave"], sizes["block_size"]
    replicas = sizes.get("pcp_replicas", 0)
    cp = dcp * (1 if replicas else pcp)
    cp_rank = (0 if replicas else (rank // tp) * dcp) + (rank % tp) % dcp
    slot = torch.arange(bs)
    return page * bs * cp + ((slot // step) * cp + cp_rank) * step + slot % step


def attention(order: str = "NHD"):
    """A writer of split K/V blocks as vLLM's attention backends lay them out: `NHD`, a block
    `(2, block_size, heads, head_size)`; `HND`, `(2, heads, block_size, head_size)`. Elements of
    4 bytes (run conform with dtype fp32)."""
    if order not in ("NHD", "HND"):
        raise ValueError(f"attention order must be NHD or HND, got {order!r}")

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        heads, d, total = _heads(sizes, rank), sizes["head_size"], sizes["total_heads"]
        if sizes["dtype_bytes"] != 4:
            raise ValueError("the attention engine model writes 4-byte codes: use dtype fp32")
        for b, page in enumerate(page_of_block):
            token = _tokens(sizes, rank, page).view(1, -1, 1, 1)
            head = torch.tensor(heads).view(1, 1, -1, 1)
            kv = torch.arange(2).view(-1, 1, 1, 1)
            code = 1 + torch.arange(d).view(1, 1, 1, -1) + d * (head + total * (token + (1 << 16) * kv))
            if order == "HND":
                code = code.transpose(1, 2)
            _put(pages, b, 0, code)
    return write


def latent(sizes_row: int | None = None):
    """A writer of MLA latent rows, one a token, as vLLM's MLA backends lay a block out:
    `(block_size, row bytes)`, a row the token's 4-byte codes (every TP rank the same)."""

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        row = pages.shape[1] // sizes["block_size"]
        if row % 4:
            raise ValueError(f"a latent row of {row} bytes holds no whole 4-byte codes")
        for b, page in enumerate(page_of_block):
            token = _tokens(sizes, rank, page).view(-1, 1)
            _put(pages, b, 0, 1 + torch.arange(row // 4).view(1, -1) + (row // 4) * token)
    return write


def mamba2(order: str = "xBC"):
    """A writer of a Mamba2 layer's state as vLLM lays it out in a page: the conv state
    `(conv_kernel - 1, x | B | C)` kernel-first, then the SSM state `(heads, head_dim,
    state_size)`, both of 4-byte elements (conv_bytes = ssm_bytes = 4). `order` is the conv row's
    component order (vLLM: `xBC`; anything else is a model of another engine)."""

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        tp, k1 = sizes["tp"], sizes["conv_kernel"] - 1
        heads, hd, n, groups = sizes["ssm_heads"], sizes["ssm_head_dim"], sizes["state_size"], sizes["n_groups"]
        if sizes["conv_bytes"] != 4 or sizes["ssm_bytes"] != 4:
            raise ValueError("the Mamba2 engine model writes 4-byte codes: conv_bytes = ssm_bytes = 4")
        x_here = heads * hd // tp
        shards = tp if groups % tp == 0 else groups
        g_here, g_first = groups // shards, (rank // (tp // shards)) * (groups // shards)
        x_total, gn = heads * hd, groups * n
        parts = {"x": rank * x_here + torch.arange(x_here),
                 "B": x_total + g_first * n + torch.arange(g_here * n),
                 "C": x_total + gn + g_first * n + torch.arange(g_here * n)}
        column = torch.cat([parts[c] for c in order])
        width = x_total + 2 * gn
        for b, page in enumerate(page_of_block):
            base = 1 + page * (k1 * width + heads * hd * n)
            _put(pages, b, 0, base + column.view(1, -1) + width * torch.arange(k1).view(-1, 1))
            head = rank * (heads // tp) + torch.arange(heads // tp)
            ssm = base + k1 * width + torch.arange(n).view(1, 1, -1) + n * (
                torch.arange(hd).view(1, -1, 1) + hd * head.view(-1, 1, 1))
            _put(pages, b, 4 * k1 * column.numel(), ssm)
    return write


WRITERS = {"split_nhd": lambda: attention("NHD"), "split_hnd": lambda: attention("HND"), "mla": latent,
           "mamba2": mamba2}
"""The shipped families conform checks against an engine model by default, and the model's writer."""

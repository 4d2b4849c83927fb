"""Writers of vLLM's KV memory for `tools.conform`, written from vLLM 0.32's own rules and never
from a spec: which heads, channels and tokens a rank holds (its layers' weight sharding and its
context-parallel token dealing), and where its cache writer puts each of them in a block.

They stand in for vLLM's cache writers where those do not run here (CUDA kernels): the
attention backends' `reshape_and_cache` (a token's K and V rows at slot `t` of its block, NHD
`(2, block_size, heads, head_size)` or HND `(2, heads, block_size, head_size)` a block), and the
Mamba2 layer's conv and SSM state (`(conv_kernel - 1, x | B | C)` then `(heads, head_dim,
state_size)`, each dense, from byte 0 of the page), per-token-head quantised KV (`quantised`) and
NVFP4 KV (`nvfp4`), whose writers are CUDA, FlashInfer or Triton kernels that vLLM CPU does not run. Each element is written as the 4-byte code
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


def _kv_code(kv, token, head, dim, d: int, total: int) -> torch.Tensor:
    """The 4-byte code of K (`kv` 0) or V (1) of `token`, `head`, `dim` (broadcast tensors): the
    attention models' tag, read back by `_kv_codes`' `describe`."""
    return 1 + dim + d * (head + total * (token + (1 << 16) * kv))


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
            code = _kv_code(kv, token, head, torch.arange(d).view(1, 1, 1, -1), d, total)
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


# Quantised KV (vLLM 0.32, `v1/attention/backends/triton_attn.py` and
# `v1/attention/ops/triton_reshape_and_cache_flash.py`; the per-token-head writer is a Triton
# kernel that stores an fp8 or int8 row and one fp32 scale per (token, head)), and NVFP4
# (`v1/attention/backends/flashinfer.py`, `utils/torch_utils.py`). Their values are 1 byte (or
# two 4-bit values a byte), too narrow for a tag of their own: a row's bytes are tagged in
# aligned fours, byte j of a four holding j in its top two bits and 6 bits of the four's code,
# so the four reads as one 4-byte code (`describe` names its element) and a byte moved inside
# its four is told too. Scales are fp32 values whose integer value codes (K/V, token, head); an
# fp32 scale's top byte is under 0x80, a data four's is 0xC0 or more, so the two never meet.
FOUR = 1 << 24
SCALES = 1 << 22   # NVFP4's fp8 scales take codes from here up, its values below


def _fours(codes: torch.Tensor) -> torch.Tensor:
    """(..., n) codes of fours -> (..., 4 n) bytes."""
    if int(codes.max()) >= FOUR or int(codes.min()) < 0:
        raise ValueError("an engine model's tag codes run past 2**24: give smaller sizes")
    j = torch.arange(4)
    return (((codes.unsqueeze(-1) >> (6 * j)) & 63) | (j << 6)).flatten(-2).to(torch.uint8)


def _code_of(tag: bytes):
    """A four's code, or None where the 4 bytes are no data four."""
    if [b >> 6 for b in tag] != [0, 1, 2, 3]:
        return None
    return sum((b & 63) << (6 * j) for j, b in enumerate(tag))


def _scale_bytes(codes: torch.Tensor) -> torch.Tensor:
    """(...) integer codes as fp32 scale values, (..., 4) bytes."""
    return codes.to(torch.float32).contiguous().view(torch.uint8).view(*codes.shape, 4)


def quantised(form: str = "packed", order: str = "HND"):
    """A writer of per-token-head quantised KV (`int8_per_token_head`, `fp8_per_token_head`: 1-byte
    values, one fp32 scale per token and head). `form="packed"`: vLLM's Triton backend, which
    widens each (head, slot) cell to `2 * (head_size + 4)` bytes, `[K | K scale | V | V scale]`
    (`customize_spec`, `_ensure_scale_caches`), in the logical `(blocks, heads, block_size, cell)`
    page with `order`'s strides (`HND`: KVCacheLayout LBHNC, heads outer; `NHD`: LBNHC, vLLM's
    default preference where no backend states one, slots outer). `form="split"`: the kernel's
    own tensors (`key_cache`, `value_cache` `(blocks, block_size, heads, head_size)`; `k_scale_cache`,
    `v_scale_cache` `(blocks, block_size, heads)` fp32) dense and one after the other in a block's
    page: vLLM 0.32 carves no such page itself (its scales live inline), so this form is the
    kernel's indexing with its tensors laid K, V, K scales, V scales, said here. Tags: fours
    (see above); `write.describe(tag)` names a tag's element."""
    if form not in ("packed", "split") or order not in ("NHD", "HND"):
        raise ValueError(f"quantised KV: form packed|split and order NHD|HND, got {form!r}, {order!r}")
    seen: dict = {}

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        heads, d, total, bs = _heads(sizes, rank), sizes["head_size"], sizes["total_heads"], sizes["block_size"]
        if sizes["dtype_bytes"] != 1 or d % 4:
            raise ValueError("the quantised KV engine model writes 1-byte values, head_size a multiple of 4")
        h = len(heads)
        want = h * bs * 2 * (d + 4)   # vLLM: one fp32 scale (4 bytes of 1-byte elements) per K and V row
        if pages.shape[1] != want:
            raise ValueError(f"vLLM's per-token-head page holds {want} bytes ({h} heads x {bs} slots x 2 x "
                             f"(head_size {d} + a 4-byte fp32 scale)); the spec's page holds {pages.shape[1]} "
                             f"(its scale_bytes, row_align or kv_scales say another page)")
        seen.update(d=d, total=total)
        head = torch.tensor(heads).view(1, -1, 1)
        kv = torch.arange(2).view(-1, 1, 1)
        for b, page in enumerate(page_of_block):
            token = _tokens(sizes, rank, page).view(1, 1, -1)                       # (kv, head, slot)
            cell = kv + 2 * (head + total * token)
            data = _fours(1 + torch.arange(d // 4) + (d // 4) * cell.unsqueeze(-1))  # (kv, head, slot, d)
            scale = _scale_bytes(1 + cell)                                            # (kv, head, slot, 4)
            if form == "packed":
                rows = torch.cat([data, scale], dim=-1).permute(1, 2, 0, 3)           # (head, slot, kv, d + 4)
                if order == "NHD":
                    rows = rows.transpose(0, 1)
                _put_bytes(pages, b, 0, rows)
            else:
                _put_bytes(pages, b, 0, data.permute(0, 2, 1, 3))                     # (kv, slot, head, d)
                _put_bytes(pages, b, data.numel(), scale.permute(0, 2, 1, 3))         # (kv, slot, head, 4)

    def describe(tag: bytes) -> str:
        code = _code_of(tag)
        if code is None:
            cell = int(torch.tensor(list(tag), dtype=torch.uint8).view(torch.float32)) - 1
            return _cell(cell, seen["total"]) + "'s fp32 scale"
        cell, four = divmod(code - 1, seen["d"] // 4)
        return _cell(cell, seen["total"]) + f", values {4 * four}..{4 * four + 3}"
    write.tag_bytes, write.describe = 4, describe
    return write


def _cell(cell: int, total: int) -> str:
    kv, rest = cell % 2, cell // 2
    return f"{'KV'[kv]} of token {rest // total}, head {rest % total}"


def _put_bytes(pages: torch.Tensor, b: int, at: int, raw: torch.Tensor) -> None:
    raw = raw.contiguous().view(-1)
    pages[b, at:at + raw.numel()] = raw


def nvfp4(v_swizzle: bool = False):
    """A writer of vLLM's NVFP4 KV (kv_cache_dtype `nvfp4`): a block is `(2 * heads, block_size,
    head_size / 2 + head_size / 16)` bytes, K's heads then V's (`customize_spec`: `num_head_slots =
    2 * num_kv_heads`), each side `[values | scales]` as `_nvfp4_kv_views` and
    `nvfp4_split_data_scale` carve it from the HND page: the side's 4-bit values two a byte
    `(heads, block_size, head_size / 2)`, then its fp8 scales, one per 16 values,
    `(heads, block_size, head_size / 16)`. That is the FlashInfer FA2 writer's page (SM80/90/120),
    V's scales token by token. `v_swizzle=True` models the trtllm-gen writer (SM100, vLLM's CUDA
    `reshape_and_cache_flash`, whose source is not in the wheel): each head's V scales in tiles of 4
    tokens, scale g of token t at `(t // 4) * 4 * S + 4 * g + t % 4` (S = head_size / 16), a rule
    read from the spec's own comment (`specs/nvfp4.lal`), not from vLLM. Tags: fours of a row's value
    bytes; a head's scale tile in fours by their place in the tile. A permutation inside a head's tile
    moves whole with the head under every TP, so no writer-against-spec check tells the two orders
    apart (both writers lay the same bytes; `v_swizzle` only names which token and group a scale
    byte is, in `describe`): which of the two a reader expects stays configuration."""
    seen: dict = {}

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        heads, d, total, bs = _heads(sizes, rank), sizes["head_size"], sizes["total_heads"], sizes["block_size"]
        if sizes["dtype_bytes"] != 1 or d % 16 or bs % 4:
            raise ValueError("the NVFP4 engine model writes bytes: head_size a multiple of 16, block_size of 4")
        h, s, half = len(heads), d // 16, d // 2
        if pages.shape[1] != 2 * h * bs * (half + s):
            raise ValueError(f"vLLM's NVFP4 page holds {2 * h * bs * (half + s)} bytes; the spec's {pages.shape[1]}")
        seen.update(d=d, total=total, bs=bs)
        head = torch.tensor(heads).view(-1, 1)
        t = torch.arange(bs).view(1, -1)
        for b, page in enumerate(page_of_block):
            for kv in range(2):
                row = kv + 2 * (t + bs * (head + total * page))                       # (head, slot)
                codes = 1 + torch.arange(half // 4) + (half // 4) * row.unsqueeze(-1)
                if int(codes.max()) >= SCALES:
                    raise ValueError("the NVFP4 engine model's value codes run past 2**22: give smaller sizes")
                # a head's scale tile, (slot, group) plain or swizzled: its fours are coded by their place in
                # the tile, which moves whole with its head (see `describe`)
                fours = SCALES + (kv + 2 * (head + total * page)) * (bs * s // 4) + torch.arange(bs * s // 4)
                side = kv * h * bs * (half + s)
                _put_bytes(pages, b, side, _fours(codes))
                _put_bytes(pages, b, side + h * bs * half, _fours(fours))

    def describe(tag: bytes) -> str:
        code = _code_of(tag)
        if code is None:
            return "no tag of this model"
        d, total, bs = seen["d"], seen["total"], seen["bs"]
        s = d // 16
        if code >= SCALES:
            side, four = divmod(code - SCALES, bs * s // 4)
            kv, rest = side % 2, side // 2
            at = [4 * four + j for j in range(4)]
            held = [(p // (4 * s) * 4 + p % 4, p % (4 * s) // 4) if kv and v_swizzle else (p // s, p % s) for p in at]
            return (f"{'KV'[kv]} scales of head {rest % total}: " +
                    ", ".join(f"token {tk} group {g}" for tk, g in held))
        row, four = divmod(code - 1, d // 8)
        kv, rest = row % 2, row // 2
        return f"{'KV'[kv]} values of token {rest % bs}, head {rest // bs % total}, bytes {4 * four}..{4 * four + 3}"
    write.tag_bytes, write.describe = 4, describe
    return write


def _kv_codes(write, seen: dict):
    """`write` with a `describe` of `_kv_code`'s 4-byte codes: K or V, token, head, dim."""
    def describe(tag: bytes) -> str:
        code = int.from_bytes(tag, "little") - 1
        d, rest = code % seen["d"], code // seen["d"]
        head, rest = rest % seen["total"], rest // seen["total"]
        return f"{'KV'[rest >> 16]} of token {rest & 0xFFFF}, head {head}, dim {d}"
    write.tag_bytes, write.describe = 4, describe
    return write


def packed(order: str = "NHD"):
    """A writer of packed K|V cells, vLLM 0.32's default attention cache: the layer's tensor is the
    logical `(blocks, heads, block_size, 2 * head_size)` (`v1/kv_cache_layout.py`: the logical shape
    is always `[L, B, H, N, C]`), and the backends take K and V out of the content dim,
    `key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)`
    (`v1/attention/backends/flash_attn.py`, `FlashAttentionImpl.do_kv_cache_update`; the same line
    in `triton_attn.py`, `flex_attention.py`, `rocm_aiter_unified_attn.py`): K is `[..., :head_size]`
    of a (head, slot) cell, V `[..., head_size:]`. The writer (`reshape_and_cache_flash`, CUDA; its
    Triton twin `v1/attention/ops/triton_reshape_and_cache_flash.py`) stores K[t, h, d] at
    `block * stride(0) + slot * stride(1) + head * stride(2) + d` of those views, so the bytes follow
    the tensor's strides. `order` is the physical order the KVCacheLayout gives them: `NHD`,
    `LBNHC` (`v1/attention/backends/utils.py`, `_DEFAULT_LAYOUT_PREFERENCE`: what FlashAttention,
    which states no layout, gets; FlexAttention and hpc_attn state it), a block `(block_size,
    heads, 2 * head_size)` in memory; `HND`, `LBHNC` (ROCm AITER FA without the shuffle, CPU),
    `(heads, block_size, 2 * head_size)`. Elements of 4 bytes (run conform with dtype fp32); codes
    as `attention`'s."""
    if order not in ("NHD", "HND"):
        raise ValueError(f"packed order must be NHD or HND, got {order!r}")
    seen: dict = {}

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        heads, d, total = _heads(sizes, rank), sizes["head_size"], sizes["total_heads"]
        if sizes["dtype_bytes"] != 4:
            raise ValueError("the packed engine model writes 4-byte codes: use dtype fp32")
        seen.update(d=d, total=total)
        for b, page in enumerate(page_of_block):
            token = _tokens(sizes, rank, page).view(1, -1, 1, 1)
            head = torch.tensor(heads).view(-1, 1, 1, 1)
            kv = torch.arange(2).view(1, 1, -1, 1)
            code = _kv_code(kv, token, head, torch.arange(d).view(1, 1, 1, -1), d, total)
            code = code.flatten(-2)                                      # (head, slot, [K | V])
            if order == "NHD":
                code = code.transpose(0, 1)                              # LBNHC: slots outer in memory
            _put(pages, b, 0, code)
    return _kv_codes(write, seen)


def aiter(writer: str = "shuffle", x: int | None = None):
    """Writers of vLLM 0.32's ROCm page of two head slots: `customize_spec` publishes K and V as
    `num_head_slots=2`, `state_content_bytes = heads * head_size * dtype`, so the layer's tensor is
    `(blocks, 2, block_size, heads * head_size)` (KVCacheLayout LBHNC: a block is K's slot then V's;
    under LHBNC, which these backends prefer, each slot is a plane over all blocks and a block's
    bytes are no page). Three backends carve it, each its own way, `x = 16 // element_size`:

    `writer="shuffle"`: ROCM_AITER_FA with `rocm_aiter_ops.is_shuffle_kv_cache_enabled()`
    (`v1/attention/backends/rocm_aiter_fa.py`: `AiterFlashAttentionBackend.customize_spec`,
    `AiterFlashAttentionImpl._split_kv_cache`, `do_kv_cache_update` ->
    `reshape_and_cache_shuffle_triton` / `reshape_and_cache_shuffle_kernel`), whose kernel ignores
    the `(blocks, block_size, heads, head_size)` views' strides and writes

        K: block * stride(0) + head * head_size * block_size + d // x * block_size * x + slot * x + d % x
        V: block * stride(0) + head * head_size * block_size + slot // x * head_size * x + d * x + slot % x

    `writer="paged"`: ROCM_ATTN (`v1/attention/backends/rocm_attn.py`, `RocmAttentionImpl.
    do_kv_cache_update`: `PagedAttention.split_kv_cache(kv_cache.transpose(0, 1), ...)`,
    `v1/attention/ops/paged_attn.py`: `key_cache.view(num_blocks, num_kv_heads, head_size // x, -1,
    x)`, `value_cache.view(num_blocks, num_kv_heads, head_size, -1)`; written by `ops.reshape_and_cache`
    or, stride-aware, `triton_reshape_and_cache_flash`'s `use_head_major_layout` branch): K
    `(heads, head_size / x, block_size, x)`, V `(heads, head_size, block_size)`.

    `writer="segmented"`: ROCM_SEGMENTED_ATTN (`v1/attention/backends/rocm_segmented_attn.py`,
    `_split_kv_cache`: `kv_cache[:, 0].unflatten(-1, (num_kv_heads, head_size))`, the same for V;
    `do_kv_cache_update` -> `triton_reshape_and_cache_flash`, stride-aware): each slot token-major,
    `(block_size, heads, head_size)`.

    `x` defaults to vLLM's `16 // dtype_bytes`. Elements of 4 bytes (dtype fp32: x = 4); codes as
    `attention`'s."""
    if writer not in ("shuffle", "paged", "segmented"):
        raise ValueError(f"aiter writer must be shuffle, paged or segmented, got {writer!r}")
    seen: dict = {}

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        heads, d, total, bs = _heads(sizes, rank), sizes["head_size"], sizes["total_heads"], sizes["block_size"]
        if sizes["dtype_bytes"] != 4:
            raise ValueError("the AITER engine model writes 4-byte codes: use dtype fp32")
        w = x or 16 // sizes["dtype_bytes"]
        if d % w or bs % w:
            raise ValueError(f"vLLM's ROCm caches need head_size and block_size multiples of x = {w}")
        h = len(heads)
        seen.update(d=d, total=total)
        for b, page in enumerate(page_of_block):
            token = _tokens(sizes, rank, page).view(1, -1, 1)
            head = torch.tensor(heads).view(-1, 1, 1)
            for kv in range(2):
                code = _kv_code(kv, token, head, torch.arange(d).view(1, 1, -1), d, total)  # (h, slot, d)
                if writer == "segmented":
                    side = code.transpose(0, 1)                                 # (slot, h, d)
                elif kv == 0:
                    side = code.view(h, bs, d // w, w).permute(0, 2, 1, 3)     # (h, d // x, slot, x)
                elif writer == "shuffle":
                    side = code.view(h, bs // w, w, d).permute(0, 1, 3, 2)     # (h, slot // x, d, slot % x)
                else:
                    side = code.transpose(1, 2)                                 # (h, d, slot)
                _put(pages, b, 4 * kv * h * bs * d, side)
    return _kv_codes(write, seen)


def indexer(shuffle: bool = False, tile: int = 16):
    """A writer of the sparse-attention indexer's key cache (DeepSeek V3.2: `DeepseekV32IndexerCache`,
    `model_executor/models/deepseek_v2.py`: an `MLAAttentionSpec` of uint8 rows, `num_kv_heads=1`,
    `max_tp_shards=1`, head_size `head_dim + head_dim // quant_block_size * 4`, the same keys on every
    TP rank). The writer is CUDA's `indexer_k_quant_and_cache` (`_custom_ops.py`, source not in the
    wheel); its Python-visible twins restate it: `_fp8_quant_and_cache_write` (`models/deepseek_v32/
    common/kernels.py`, the fused norm/rope kernel's cache write) and `indexer_k_quant_and_cache_triton`
    (`v1/attention/ops/rocm_aiter_mla_sparse.py`: "we store the first portion as kv cache value and
    second portion as kv cache scale"): a block's `block_size * head_dim` fp8 values first, token t's
    at `t * head_dim + v`, then one fp32 scale a token at byte `block_size * head_dim + 4 * t`
    (`scale_byte_off = block_start + cache_block_size * HEAD_DIM + block_offset * 4`). `shuffle=True`
    is the ROCm reader's layout (`DeepseekV32ROCmIndexerCache.uses_shuffled_layout`, block_size > 1):
    values `[blk / 16, head_dim / 16, 16, 16]`, value v of token t at `t // 16 * 16 * head_dim +
    t % 16 * 16 + v // 16 * 256 + v % 16` (`SHUFFLE` in both kernels), the scales as before. Tokens
    dealt over cp as MLA's (see the module). Tags: fours of a token's values, fp32 scales equal to
    an integer code of the token (`describe`)."""
    seen: dict = {}

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        bs, v, s = sizes["block_size"], sizes["indexer_values"], sizes["indexer_scale_bytes"]
        if sizes["dtype_bytes"] != 1 or v % 4 or (shuffle and (v % tile or bs % tile)):
            raise ValueError("the indexer engine model writes 1-byte values, indexer_values a multiple of 4"
                             + (f" (shuffled: of {tile}, block_size too)" if shuffle else ""))
        if s != 4:
            raise ValueError(f"vLLM's indexer writes one fp32 scale a token (4 bytes); indexer_scale_bytes is {s}")
        if pages.shape[1] != bs * (v + 4):
            raise ValueError(f"vLLM's indexer page holds {bs * (v + 4)} bytes; the spec's {pages.shape[1]}")
        seen.update(v=v)
        for b, page in enumerate(page_of_block):
            token = _tokens(sizes, rank, page).view(-1, 1)
            values = _fours(1 + torch.arange(v // 4).view(1, -1) + (v // 4) * token)      # (slot, v)
            if shuffle:
                values = values.view(bs // tile, tile, v // tile, tile).permute(0, 2, 1, 3)
            _put_bytes(pages, b, 0, values)
            _put_bytes(pages, b, bs * v, _scale_bytes(1 + token.flatten()))

    def describe(tag: bytes) -> str:
        code = _code_of(tag)
        if code is None:
            return f"token {int(torch.tensor(list(tag), dtype=torch.uint8).view(torch.float32)) - 1}'s fp32 scale"
        token, four = divmod(code - 1, seen["v"] // 4)
        return f"token {token}'s values {4 * four}..{4 * four + 3}"
    write.tag_bytes, write.describe = 4, describe
    return write


WRITERS = {"split_nhd": lambda: attention("NHD"), "split_hnd": lambda: attention("HND"), "mla": latent,
           "mamba2": mamba2, "quant_packed": lambda: quantised("packed", "HND"),
           "quant_split": lambda: quantised("split"), "nvfp4": lambda: nvfp4(v_swizzle=True),
           "nvfp4_plain": lambda: nvfp4(v_swizzle=False), "packed_nhd": lambda: packed("NHD"),
           "packed_hnd": lambda: packed("HND"), "dsa_indexer": indexer,
           "aiter_shuffle": lambda: aiter("shuffle")}
"""The shipped families conform checks against an engine model by default, and the model's writer
(quant_packed: the HND page, `VLLM_KV_CACHE_LAYOUT=HND`; vLLM's default for the Triton backend is
NHD strides, `quantised("packed", "NHD")`, which quant_packed is not; aiter_shuffle: AITER FA's
shuffle kernel; `aiter` has none, three ROCm backends writing its tensor apart: `aiter(writer)`)."""

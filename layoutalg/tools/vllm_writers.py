"""vLLM 0.32's own cache writers, run on a CPU, as writers for `tools.conform`.

Each adapter drives the engine's code, not a model of it: the writer kernel or op that puts a
layer's state in its memory, vLLM's slot mapping (which of a sequence's tokens a DCP rank keeps,
and at which slot), and its layers' weight loaders (which KV heads, Mamba channels, groups and
heads a TP rank holds). What is restated here, and said so: rank = pcp_rank * tp + tp_rank and
dcp_rank = tp_rank % dcp (vLLM's process groups), and where a Mamba2 layer's two state tensors
sit in a block's page (conv state from byte 0, the SSM state after it).

- `triton_flash(order, kv_first)`: `triton_reshape_and_cache_flash` (Triton, run by Triton's
  interpreter: `TRITON_INTERPRET=1`), into split (`(blocks, 2, ...)`) or FlashAttention
  (`(2, blocks, ...)`) K/V memory with NHD or HND strides;
- `cpu_attn(isa)`: the CPU attention backend's `torch.ops._C.cpu_attn_reshape_and_cache`, into its
  `(blocks, heads, block_size, 2 * head_size)` tensor (the `cpu_attn` family; `isa` the kernel,
  vec or vec16, as vLLM's backend chooses it);
- `mamba2()`: the CPU Mamba ops (`causal_conv1d_fn_cpu`, `selective_state_update`), channels,
  groups and heads of a rank from `mamba_v2_sharded_weight_loader`.

Tags are integer-valued fp32 (exact below 2**24). vLLM's CPU build turns Triton off where the
Triton wheel has no CPU backend (vllm.triton_utils then hands out placeholders); under the
interpreter the real `triton` serves, so `_triton()` binds it and re-imports the two kernel
modules. Importing this module imports no vLLM; the first writer call does.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys

import torch

EXACT = 1 << 24


def _triton():
    """vLLM's Triton kernel modules bound to the real `triton`, run by its interpreter."""
    os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl
    import vllm.triton_utils as tu
    if not hasattr(tu.triton, "next_power_of_2"):  # the CPU build's placeholder
        tu.triton, tu.tl = triton, tl
    mods = []
    for name in ("vllm.v1.attention.ops.triton_reshape_and_cache_flash", "vllm.v1.worker.block_table"):
        mod = sys.modules.get(name)
        if mod is None:
            mod = importlib.import_module(name)
        elif not hasattr(mod.triton, "next_power_of_2"):
            mod = importlib.reload(mod)
        mods.append(mod)
    return mods


@contextlib.contextmanager
def _tp(tp: int, tp_rank: int):
    """vLLM's TP rank and size, as its linear layers read them, without process groups."""
    from unittest import mock
    import vllm.model_executor.layers.linear as linear
    import vllm.model_executor.parameter as parameter
    with contextlib.ExitStack() as stack:
        for mod in (linear, parameter):
            stack.enter_context(mock.patch.object(mod, "get_tensor_model_parallel_rank", lambda: tp_rank))
            stack.enter_context(mock.patch.object(mod, "get_tensor_model_parallel_world_size", lambda: tp))
        yield


def kv_heads(total: int, tp: int, tp_rank: int, head_size: int) -> list:
    """The global KV heads a TP rank holds, in its order, as `QKVParallelLinear`'s weight loader
    deals them: a full K weight whose row r holds r, loaded into the rank's layer."""
    from vllm.model_executor.layers.linear import QKVParallelLinear
    with _tp(tp, tp_rank):
        layer = QKVParallelLinear(1, head_size, total * max(1, tp // total), total, bias=False,
                                  params_dtype=torch.float32)
        full = torch.arange(total * head_size, dtype=torch.float32).view(-1, 1)
        layer.weight.data.fill_(-1)
        layer.weight_loader(layer.weight, full, "k")
    q = layer.num_heads * head_size
    rows = layer.weight.data[q:q + layer.num_kv_heads * head_size, 0].long()
    return (rows[::head_size] // head_size).tolist()


def slots(block_size: int, dcp: int, dcp_rank: int, interleave: int, block_of_page: list, tokens: int):
    """vLLM's slot of each of a sequence's `tokens` on one DCP rank (-1: another rank keeps it),
    from the block table's own slot-mapping kernel; virtual block p of the sequence is block
    `block_of_page[p]`."""
    _, bt = _triton()
    out = torch.full((tokens + 1,), -7, dtype=torch.int64)
    table = torch.tensor(block_of_page, dtype=torch.int32).view(1, -1)
    bt.ComputeSlotMappingKernel.kernel[(2,)](
        tokens, tokens + 1, torch.tensor([0, tokens], dtype=torch.int32), torch.arange(tokens), table,
        table.stride(0), out, KV_CACHE_BLOCK_SIZE=block_size, TOTAL_CP_WORLD_SIZE=dcp, TOTAL_CP_RANK=dcp_rank,
        CP_KV_CACHE_INTERLEAVE_SIZE=interleave, PAD_ID=-1, BLOCK_SIZE=1024)
    return out[:tokens]


def _sequence(sizes: dict, rank: int, page_of_block: list):
    """(the rank's global KV heads, the sequence's token count, its slot mapping on this rank).
    One sequence holds every block: virtual block p is the block that holds canonical page p."""
    tp, dcp = sizes["tp"], sizes["dcp"]
    if sizes["pcp"] != 1:
        raise ValueError("vLLM 0.32's slot mapping deals tokens over DCP only: run with pcp = 1")
    if sizes["dtype_bytes"] != 4:
        raise ValueError("vLLM's writers are run over fp32 tags: use dtype fp32")
    tp_rank = rank % tp
    heads = kv_heads(sizes["total_heads"], tp, tp_rank, sizes["head_size"])
    block_of_page = [page_of_block.index(p) for p in range(len(page_of_block))]
    tokens = len(page_of_block) * sizes["block_size"] * dcp
    return heads, tokens, slots(sizes["block_size"], dcp, tp_rank % dcp, sizes["interleave"], block_of_page, tokens)


def _kv(sizes: dict, heads: list, tokens: int):
    """Key and value `(tokens, heads, head_size)`, each element 1 + its place in the whole model."""
    d, total = sizes["head_size"], sizes["total_heads"]
    if 2 * tokens * total * d >= EXACT:
        raise ValueError("too many elements for exact fp32 tags: fewer tokens, heads or a smaller head size")
    code = 1 + torch.arange(d).view(1, 1, -1) + d * (torch.tensor(heads).view(1, -1, 1)
                                                      + total * torch.arange(tokens).view(-1, 1, 1))
    code = code.to(torch.float32)
    return code, code + tokens * total * d


def triton_flash(order: str = "NHD", kv_first: bool = False):
    """`triton_reshape_and_cache_flash` writing one rank's K/V. `order`: NHD, a block
    `(block_size, heads, head_size)`, or HND, `(heads, block_size, head_size)` in memory (vLLM's
    stride order, the tensor's shape NHD either way). `kv_first`: FlashAttention's `(2, blocks,
    ...)` memory (a block's page: its K stretch, then its V stretch), else `(blocks, 2, ...)`."""
    if order not in ("NHD", "HND"):
        raise ValueError(f"order must be NHD or HND, got {order!r}")

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        kernel, _ = _triton()
        heads, tokens, slot = _sequence(sizes, rank, page_of_block)
        n, bs, d = pages.shape[0], sizes["block_size"], sizes["head_size"]
        inner = (bs, len(heads), d) if order == "NHD" else (len(heads), bs, d)
        mem = pages.view(torch.float32).view(n, 2, *inner)
        if kv_first:  # the engine's memory: all K blocks, then all V blocks
            mem = mem.transpose(0, 1).contiguous()
            k_cache, v_cache = mem[0], mem[1]
        else:
            k_cache, v_cache = mem[:, 0], mem[:, 1]
        if order == "HND":
            k_cache, v_cache = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        key, value = _kv(sizes, heads, tokens)
        one = torch.tensor(1.0)
        with _capability():
            kernel.triton_reshape_and_cache_flash(key, value, k_cache, v_cache, slot, "auto", one, one)
        if kv_first:
            pages.view(torch.float32).view(n, 2, -1).copy_(mem.transpose(0, 1).reshape(n, 2, -1))
    return write


@contextlib.contextmanager
def _capability():
    """The CUDA branch of the launcher asks the device's capability (for a tile size only)."""
    from unittest import mock
    with mock.patch.object(torch.cuda, "get_device_capability", lambda *a: (9, 0)):
        yield


def cpu_attn(isa: str = "vec"):
    """The CPU attention backend's cache write, `torch.ops._C.cpu_attn_reshape_and_cache`, into
    its tensor `(blocks, heads, block_size, 2 * head_size)` viewed as the backend does: `(blocks,
    heads, 2 * block_size, head_size)` cut in two along dim 2, K then V (block size a multiple of
    32, head size one the backend serves)."""

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        from vllm import _custom_ops as ops
        heads, tokens, slot = _sequence(sizes, rank, page_of_block)
        n, bs, d = pages.shape[0], sizes["block_size"], sizes["head_size"]
        cache = pages.view(torch.float32).view(n, len(heads), bs, 2 * d).view(n, len(heads), 2 * bs, d)
        k_cache, v_cache = cache.chunk(2, dim=2)
        key, value = _kv(sizes, heads, tokens)
        ops.cpu_attn_reshape_and_cache(key, value, k_cache, v_cache, slot, isa)
    return write


def mamba2_shards(sizes: dict, tp_rank: int) -> dict:
    """Global indices a TP rank holds, as `mamba_v2_sharded_weight_loader` deals in_proj's rows
    (gate | x | B | C | dt, the groups extended to accompany the head shards as MambaMixer2
    does): `x` channels, `B` and `C` (group * state_size + n), and `heads`."""
    from vllm.model_executor.layers.mamba.mamba_mixer2 import mamba_v2_sharded_weight_loader
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as shapes
    tp, heads, hd, n, groups = sizes["tp"], sizes["ssm_heads"], sizes["ssm_head_dim"], sizes["state_size"], \
        sizes["n_groups"]
    if groups % tp and groups != 1:
        raise ValueError(f"vLLM's MambaMixer2 takes n_groups % tp == 0 or n_groups == 1 ({groups} at tp={tp})")
    inter = heads * hd
    extended = groups + shapes.extra_groups_for_head_shards(groups, tp)
    group = (extended * n, (extended - groups) * n, groups == 1)
    spec = [(inter, 0, False), (inter, 0, False), group, group, (heads, 0, False)]
    full = torch.cat([torch.arange(inter), torch.arange(inter), torch.arange(groups * n), torch.arange(groups * n),
                      torch.arange(heads)]).to(torch.float64).view(-1, 1)
    cuts = [inter // tp, inter // tp, extended * n // tp, extended * n // tp, heads // tp]
    param = torch.full((sum(cuts), 1), -1, dtype=torch.float64)
    mamba_v2_sharded_weight_loader(spec, tp, tp_rank)(param, full)
    parts = param.view(-1).long().split(cuts)
    return {"x": parts[1], "B": parts[2], "C": parts[3], "heads": parts[4]}


def mamba2():
    """A Mamba2 layer's state written by vLLM's CPU Mamba ops: `causal_conv1d_fn_cpu` leaves each
    block's conv state (its sequence's last conv_kernel - 1 inputs, memory `(conv_kernel - 1,
    channels)` handed to the op transposed, as MambaMixer2 does), `selective_state_update` its SSM
    state `(heads, head_dim, state_size)` (A so negative that the old state drops out, dt = 1: the
    new state is B * x, x odd tags, B minus powers of two: each element's value is its own, and
    negative, apart from the conv state's positive tags). The conv
    state from byte 0 of a block's page, the SSM state after it; shapes from vLLM's
    `MambaStateShapeCalculator.mamba2_state_shape`."""

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as shapes
        from vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d import causal_conv1d_fn_cpu
        from vllm.model_executor.layers.mamba.ops.cpu.mamba_ssm import selective_state_update
        if sizes["conv_bytes"] != 4 or sizes["ssm_bytes"] != 4:
            raise ValueError("vLLM's Mamba ops are run over fp32 tags: conv_bytes = ssm_bytes = 4")
        tp, k1 = sizes["tp"], sizes["conv_kernel"] - 1
        heads, hd, n, groups = sizes["ssm_heads"], sizes["ssm_head_dim"], sizes["state_size"], sizes["n_groups"]
        inter, blocks = heads * hd, pages.shape[0]
        conv_shape, ssm_shape = shapes.mamba2_state_shape(tp, inter, groups, heads, hd, n, k1 + 1)
        if tuple(conv_shape)[0] != k1:
            raise ValueError(f"conv state shape {tuple(conv_shape)}: run with vLLM's SD conv layout")
        own = mamba2_shards(sizes, rank % tp)
        width = inter + 2 * groups * n
        channel = torch.cat([own["x"], inter + own["B"], inter + groups * n + own["C"]])
        conv_bytes = 4 * k1 * channel.numel()
        flat = pages.view(torch.float32)
        conv = flat[:, :k1 * channel.numel()].view(blocks, k1, -1)
        ssm = flat[:, conv_bytes // 4:conv_bytes // 4 + ssm_shape[0] * hd * n].view(blocks, *ssm_shape)
        page = torch.tensor(page_of_block).view(-1, 1, 1)
        odd = 1 + 2 * inter * (int(page.max()) + 1)  # the largest SSM x tag
        if (int(page.max()) + 1) * k1 * width >= EXACT or odd * 2 ** (n * groups) >= EXACT:
            raise ValueError("too many elements for exact fp32 tags")
        # conv: block b's sequence is k1 steps; step s of channel c holds 1 + c + width * (s + k1 * page)
        x = 1 + channel.view(1, -1, 1) + width * (torch.arange(k1).view(1, 1, -1) + k1 * page)
        x = x.permute(1, 0, 2).reshape(channel.numel(), -1).to(torch.float32)
        weight = torch.zeros(channel.numel(), k1 + 1)
        starts = torch.arange(blocks + 1, dtype=torch.int32) * k1
        causal_conv1d_fn_cpu(x, weight, None, conv.transpose(-1, -2), starts, torch.arange(blocks, dtype=torch.int32),
                             torch.zeros(blocks, dtype=torch.bool), activation=None)
        # SSM: head h, dim d of block b's token is odd, B of group g, state n a power of two
        h = own["heads"]
        xs = 1 + 2 * (torch.arange(hd).view(1, 1, -1) + hd * (h.view(1, -1, 1) + heads * page.view(-1, 1, 1)))
        ng = own["B"].numel() // n
        g = (own["B"].view(ng, n)[:, 0] // n).view(1, -1, 1)
        bmat = -(2.0 ** (torch.arange(n).view(1, 1, -1) + n * g)).expand(blocks, ng, n).to(torch.float32)
        a = torch.full((len(h), hd, n), -1e4)
        dt = torch.ones(blocks, len(h), hd)
        idx = torch.arange(blocks, dtype=torch.int32)
        selective_state_update(ssm, xs.to(torch.float32), dt, a, bmat, bmat.clone(),
                               state_batch_indices=idx, dst_state_batch_indices=idx, null_block_id=-1,
                               out=torch.empty(blocks, len(h), hd))  # (blocks here are 0.., none vLLM's null block)
    return write


WRITERS = {"split_nhd": lambda: triton_flash("NHD"), "split_hnd": lambda: triton_flash("HND"),
           "flash_nhd": lambda: triton_flash("NHD", True), "flash_hnd": lambda: triton_flash("HND", True),
           "cpu_attn": cpu_attn, "mamba2": mamba2}
"""The shipped families checked against vLLM's own writer, and the writer."""


def describe_kv(total_heads: int, head_size: int, tokens: int):
    """Names the element a K/V tag of `_kv` is (the sequence's `tokens`: blocks * block_size * cp),
    for conform's counterexamples."""
    def name(tag: bytes) -> str:
        code = int(torch.frombuffer(bytearray(tag), dtype=torch.float32)[0]) - 1
        kv, rest = divmod(code, tokens * total_heads * head_size)
        token, rest = divmod(rest, total_heads * head_size)
        return f"{'KV'[kv]} of token {token}, head {rest // head_size}, dim {rest % head_size}"
    return name


def describe_mamba2(sizes: dict):
    """Names the element a Mamba2 tag of `mamba2()` is: a conv state step of an x, B or C
    channel (positive tags), or an SSM state element (negative)."""
    k1, inter = sizes["conv_kernel"] - 1, sizes["ssm_heads"] * sizes["ssm_head_dim"]
    gn = sizes["n_groups"] * sizes["state_size"]

    def name(tag: bytes) -> str:
        v = float(torch.frombuffer(bytearray(tag), dtype=torch.float32)[0])
        if v < 0:
            return "an SSM state element"
        rest, c = divmod(int(v) - 1, inter + 2 * gn)
        part = "x" if c < inter else "B" if c < inter + gn else "C"
        at = c if part == "x" else (c - inter) % gn
        return f"conv step {rest % k1} of page {rest // k1}, {part} channel {at}"
    return name

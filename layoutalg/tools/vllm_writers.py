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
- `gdn(path)`: the CPU gated delta net op, `cpu_gdn_attention_core` (its prefill or its decode
  path, the conv state SD or DS), a rank's conv channels and value heads from the layer's
  `mamba_v2_sharded_weight_loader` and `sharded_weight_loader(0)`.

Tags are integer-valued fp32 (exact below 2**24), for the GDN op bf16 (see `gdn`). vLLM's CPU
build turns Triton off where the Triton wheel has no CPU backend (vllm.triton_utils then hands
out placeholders); under the interpreter the real `triton` serves, so `_triton()` binds it and
re-imports the two kernel modules. Importing this module imports no vLLM; the first writer call does.
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


def _conv_layout(sizes: dict):
    """(vLLM's `mamba_utils`, a context in which it lays conv state as `sizes`' `conv_dim_first`
    says: SD `(conv_kernel - 1, channels)` or DS `(channels, conv_kernel - 1)`). vLLM reads
    VLLM_SSM_CONV_STATE_LAYOUT once (`get_conv_state_layout` is lru_cached), so the read is patched."""
    from unittest import mock
    from vllm.model_executor.layers.mamba import mamba_utils
    layout = "DS" if sizes.get("conv_dim_first", 0) else "SD"
    return mamba_utils, mock.patch.object(mamba_utils, "get_conv_state_layout", lambda: layout)


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
    `MambaStateShapeCalculator.mamba2_state_shape`, under the conv layout `conv_dim_first` names
    (vLLM's VLLM_SSM_CONV_STATE_LAYOUT: SD `(conv_kernel - 1, channels)`, handed to the op
    transposed, or DS `(channels, conv_kernel - 1)`, handed as it lies, as MambaMixer2 does:
    `_conv_layout`)."""

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        from vllm.model_executor.layers.mamba.ops.cpu.causal_conv1d import causal_conv1d_fn_cpu
        from vllm.model_executor.layers.mamba.ops.cpu.mamba_ssm import selective_state_update
        if sizes["conv_bytes"] != 4 or sizes["ssm_bytes"] != 4:
            raise ValueError("vLLM's Mamba ops are run over fp32 tags: conv_bytes = ssm_bytes = 4")
        tp, k1 = sizes["tp"], sizes["conv_kernel"] - 1
        heads, hd, n, groups = sizes["ssm_heads"], sizes["ssm_head_dim"], sizes["state_size"], sizes["n_groups"]
        inter, blocks = heads * hd, pages.shape[0]
        dim_first = bool(sizes.get("conv_dim_first", 0))
        mamba_utils, layout = _conv_layout(sizes)
        with layout:
            conv_shape, ssm_shape = mamba_utils.MambaStateShapeCalculator.mamba2_state_shape(
                tp, inter, groups, heads, hd, n, k1 + 1)
            if mamba_utils.is_conv_state_dim_first() != dim_first or tuple(conv_shape)[int(dim_first)] != k1:
                raise ValueError(f"vLLM gives the conv state shape {tuple(conv_shape)} for conv_dim_first={int(dim_first)}")
        own = mamba2_shards(sizes, rank % tp)
        width = inter + 2 * groups * n
        channel = torch.cat([own["x"], inter + own["B"], inter + groups * n + own["C"]])
        conv_bytes = 4 * k1 * channel.numel()
        flat = pages.view(torch.float32)
        conv = flat[:, :k1 * channel.numel()].view(blocks, *conv_shape)
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
        causal_conv1d_fn_cpu(x, weight, None, conv if dim_first else conv.transpose(-1, -2), starts, torch.arange(blocks, dtype=torch.int32),
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


def gdn_shards(sizes: dict, tp_rank: int) -> dict:
    """Global indices a TP rank of a gated delta net layer holds, as `QwenGatedDeltaNetAttention`'s
    loaders deal them: `channels`, the rank's conv rows (of the model's q | k | v rows, in the
    rank's order) from `mamba_v2_sharded_weight_loader` over the layer's shard spec (key_dim,
    key_dim, value_dim: the three settings restated from the layer's `__init__`, which builds
    the loader but needs a whole VllmConfig to construct), and `v_heads`, the value heads from
    `sharded_weight_loader(0)`, the loader of its A_log and dt_bias."""
    from unittest import mock
    import vllm.model_executor.model_loader.weight_utils as wu
    from vllm.model_executor.layers.mamba.mamba_mixer2 import mamba_v2_sharded_weight_loader
    tp, kh, vh = sizes["tp"], sizes["gdn_k_heads"], sizes["gdn_v_heads"]
    key_dim, value_dim = kh * sizes["gdn_k_dim"], vh * sizes["gdn_v_dim"]
    if kh % tp or vh % tp:
        raise ValueError(f"vLLM's gated delta net divides its key and value heads by tp ({kh}, {vh} at tp={tp})")
    conv_dim = 2 * key_dim + value_dim
    full = torch.arange(conv_dim, dtype=torch.float64).view(-1, 1)
    param = torch.full((conv_dim // tp, 1), -1, dtype=torch.float64)
    mamba_v2_sharded_weight_loader([(key_dim, 0, False), (key_dim, 0, False), (value_dim, 0, False)], tp,
                                   tp_rank)(param, full)
    heads = torch.full((vh // tp,), -1, dtype=torch.float64)
    with mock.patch.object(wu, "get_tensor_model_parallel_rank", lambda: tp_rank):
        wu.sharded_weight_loader(0)(heads, torch.arange(vh, dtype=torch.float64))
    return {"channels": param.view(-1).long(), "v_heads": heads.long()}


GDN_DTYPES = {2: "bfloat16", 4: "float32"}


def gdn(path: str = "prefill"):
    """A gated delta net layer's state written by vLLM's CPU GDN op, `cpu_gdn_attention_core`
    (`ops/cpu/gdn_attention.py`), in place, in the two tensors vLLM's
    `MambaStateShapeCalculator.gated_delta_net_state_shape` and
    `MambaStateDtypeCalculator.gated_delta_net_state_dtype` give (a bf16 model: the op asserts bf16
    input; conv_bytes 2 is the model's dtype, 4 mamba_cache_dtype float32; ssm_bytes 2 or 4 its
    mamba_ssm_cache_dtype). The conv state SD `(conv_kernel - 1, channels)` or, where
    `conv_dim_first` = 1, DS `(channels, conv_kernel - 1)`: vLLM's VLLM_SSM_CONV_STATE_LAYOUT
    (`_conv_layout`).

    `path`: "prefill", one prompt of conv_kernel tokens a block: `causal_conv1d_fn_cpu` leaves the
    conv state, `_C.chunk_gated_delta_rule_cpu` the recurrent state (that kernel takes key and value
    heads of one size, 64 or 128, only); "decode", conv_kernel decode steps a block (any head
    sizes): `_C.causal_conv1d_update_cpu_vec` and `_C.fused_sigmoid_gating_delta_rule_update_cpu`
    (A_log so large that the decay is exactly 0: the last step's state is its own, whatever the
    block held, the sentinels included).

    Restated, and said so: the layer (a stand-in holding what the op reads of
    `QwenGatedDeltaNetAttention`: kv_cache, conv1d weight, A_log, dt_bias, activation, and the
    layer's own `rearrange_mixed_qkv`, the real method, bound to it), the forward context that hands
    the op its layer and `GDNAttentionMetadata` (built here: one sequence a block, block b its state
    slot, block 0 the null block), and where the two state tensors sit in a block's page (conv state from byte 0, the
    recurrent state after it, as vLLM cuts a MambaSpec page). The layer's activation is None (Qwen's
    is silu: it changes values, not where they go; with it the tags would not stay distinct), and the
    torch conv path is taken on every CPU (the op's C++ conv, chosen on AVX512-BF16 or ARM bf16 CPUs,
    wants weights packed at load time).

    Tags: the conv weight is 1 at tap 0 only, so the conv output of the last token is the first
    token's input and every earlier output of a prompt is 0 (a 0 key adds nothing). Tokens 1.. are
    what the conv state keeps: channel c of step s of page p holds the bf16 whose bits are
    0x4080 + c + channels * (s + (conv_kernel - 1) * p) (4 and up, each its own). Token 0 feeds the
    recurrence: key channel i of every key head 2**(i - k_dim / 2), value channel j of value head h
    of page p the n-th (n = j + v_dim * (h + v_heads * p)) of bf16 values +-[1, 2) of distinct
    mantissas. The state, beta * the L2-normed key x the value, is then 2**i times a strictly
    increasing function of the value, of magnitude below 2: each element its own (the tags give
    out at 256 value channels a page for an fp32 state, 128 for bf16)."""
    if path not in ("prefill", "decode"):
        raise ValueError(f"path must be prefill or decode, got {path!r}")

    def write(sizes: dict, rank: int, pages: torch.Tensor, page_of_block: list) -> None:
        from types import SimpleNamespace
        from unittest import mock
        from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention
        from vllm.model_executor.layers.mamba.ops.cpu import gdn_attention as cpu_gdn
        from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata
        cb, sb = sizes["conv_bytes"], sizes["ssm_bytes"]
        if cb not in GDN_DTYPES or sb not in GDN_DTYPES:
            raise ValueError(f"vLLM's GDN state is bf16 or fp32 here: conv_bytes, ssm_bytes in 2, 4 (got {cb}, {sb})")
        write.tag_bytes = 2 if cb == sb == 2 else 4  # (conform reads it after the single rank's run)
        tp, width = sizes["tp"], sizes["conv_kernel"]
        kh, vh, kd, vd = sizes["gdn_k_heads"], sizes["gdn_v_heads"], sizes["gdn_k_dim"], sizes["gdn_v_dim"]
        key_dim, value_dim = kh * kd, vh * vd
        conv_dim, blocks, k1 = 2 * key_dim + value_dim, pages.shape[0], width - 1
        cap = 128 if sb == 4 else 64  # distinct value mantissas of one sign (bf16 state: every other one)
        pages_n = max(page_of_block) + 1
        if pages_n * k1 * conv_dim > 0x3E00 or pages_n * value_dim > 2 * cap or kd > 128:
            raise ValueError("too many elements for the GDN tags: fewer heads, channels or blocks")
        own = gdn_shards(sizes, rank % tp)
        chan = own["channels"]
        v_rows = chan[chan >= 2 * key_dim] - 2 * key_dim
        if not torch.equal(v_rows[::vd] // vd, own["v_heads"]):  # the recurrence reads v rows head by head
            raise ValueError(f"vLLM's loaders give rank {rank} v rows of heads {(v_rows[::vd] // vd).tolist()} but "
                             f"A_log of heads {own['v_heads'].tolist()}")
        mamba_utils, layout = _conv_layout(sizes)
        with layout:
            conv_shape, ssm_shape = mamba_utils.MambaStateShapeCalculator.gated_delta_net_state_shape(
                tp, kh, vh, kd, vd, width)
            conv_dtype, ssm_dtype = mamba_utils.MambaStateDtypeCalculator.gated_delta_net_state_dtype(
                torch.bfloat16, "auto" if cb == 2 else "float32", GDN_DTYPES[sb])
            cbytes = conv_dtype.itemsize * conv_shape[0] * conv_shape[1]
            sbytes = ssm_dtype.itemsize * ssm_shape[0] * ssm_shape[1] * ssm_shape[2]
            # block 0 of vLLM's cache is its null block, which the decode path's conv update skips
            # (NULL_BLOCK_ID): the blocks here are 1.., copied in and back
            mem = torch.cat([torch.zeros_like(pages[:1]), pages])
            conv = mem[:, :cbytes].view(conv_dtype).view(blocks + 1, *conv_shape)
            ssm = mem[:, cbytes:cbytes + sbytes].view(ssm_dtype).view(blocks + 1, *ssm_shape)
            page = torch.tensor(page_of_block).view(-1, 1, 1)
            # tokens (block, step, local channel): step 0 for the recurrence, steps 1.. for the conv state
            bits = 0x4080 + chan.view(1, 1, -1) + conv_dim * (torch.arange(k1).view(1, -1, 1) + k1 * page)
            x = torch.empty(blocks, width, chan.numel(), dtype=torch.bfloat16)
            x[:, 1:] = bits.to(torch.int16).view(torch.bfloat16)
            key = 2.0 ** ((chan - key_dim) % kd - kd // 2)
            n = (chan - 2 * key_dim).view(1, -1) + value_dim * page.view(-1, 1)
            value = (1 - 2 * (n // cap)) * (1 + (128 // cap) * (n % cap) / 128)
            recur = torch.where((chan < key_dim).view(1, -1), 1.0, torch.where((chan < 2 * key_dim).view(1, -1),
                                                                               key.view(1, -1), value))
            x[:, 0] = recur.to(torch.bfloat16)
            weight = torch.zeros(chan.numel(), 1, width, dtype=torch.bfloat16)
            weight[:, :, 0] = 1
            decode = path == "decode"
            layer = SimpleNamespace(
                prefix="gdn", kv_cache=(conv, ssm), conv1d=SimpleNamespace(weight=weight, bias=None),
                activation=None, A_log=torch.full((vh // tp,), 10.0 if decode else 0.0),
                dt_bias=torch.zeros(vh // tp, dtype=torch.bfloat16),
                key_dim=key_dim, value_dim=value_dim, tp_size=tp, head_k_dim=kd, head_v_dim=vd)
            layer.rearrange_mixed_qkv = QwenGatedDeltaNetAttention.rearrange_mixed_qkv.__get__(layer)
            slots = torch.arange(1, blocks + 1, dtype=torch.int32)
            calls = []
            if decode:  # step s: one token a block
                meta = GDNAttentionMetadata(
                    num_prefills=0, num_prefill_tokens=0, num_decodes=blocks, num_decode_tokens=blocks,
                    num_spec_decodes=0, num_spec_decode_tokens=0, num_actual_tokens=blocks,
                    non_spec_query_start_loc=torch.arange(blocks + 1, dtype=torch.int32),
                    non_spec_state_indices_tensor=slots)
                calls = [(x[:, s].contiguous(), meta) for s in range(width)]
            else:  # one prompt of conv_kernel tokens a block
                meta = GDNAttentionMetadata(
                    num_prefills=blocks, num_prefill_tokens=blocks * width, num_decodes=0, num_decode_tokens=0,
                    num_spec_decodes=0, num_spec_decode_tokens=0, num_actual_tokens=blocks * width,
                    has_initial_state=torch.zeros(blocks, dtype=torch.bool),
                    non_spec_query_start_loc=torch.arange(blocks + 1, dtype=torch.int32) * width,
                    non_spec_state_indices_tensor=slots)
                calls = [(x.reshape(blocks * width, -1), meta)]
            for mixed_qkv, meta in calls:
                context = SimpleNamespace(no_compile_layers={"gdn": layer}, attn_metadata={"gdn": meta})
                ba = torch.zeros(mixed_qkv.shape[0], vh // tp, dtype=torch.bfloat16)
                out = torch.zeros(mixed_qkv.shape[0], vh // tp, vd, dtype=torch.bfloat16)
                with mock.patch.object(cpu_gdn, "get_forward_context", lambda: context), \
                        mock.patch.object(cpu_gdn, "is_arm_bf16", lambda: False), \
                        mock.patch.object(torch.cpu, "_is_avx512_bf16_supported", lambda: False):
                    cpu_gdn.cpu_gdn_attention_core(mixed_qkv, ba, ba.clone(), out, "gdn")
        pages.copy_(mem[1:])
    return write


WRITERS = {"split_nhd": lambda: triton_flash("NHD"), "split_hnd": lambda: triton_flash("HND"),
           "flash_nhd": lambda: triton_flash("NHD", True), "flash_hnd": lambda: triton_flash("HND", True),
           "cpu_attn": cpu_attn, "mamba2": mamba2, "mamba2_ds": mamba2, "gdn": gdn, "gdn_ds": gdn}
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


def describe_gdn(sizes: dict):
    """Names the element a tag of `gdn()` is: a conv state step of a q, k or v channel (4 and up;
    in a 4-byte tag, its first bf16), or a recurrent state element (magnitude below 2)."""
    k1 = sizes["conv_kernel"] - 1
    key_dim = sizes["gdn_k_heads"] * sizes["gdn_k_dim"]
    conv_dim = 2 * key_dim + sizes["gdn_v_heads"] * sizes["gdn_v_dim"]

    def name(tag: bytes) -> str:
        dtype = torch.bfloat16 if len(tag) == 2 else torch.float32
        if abs(float(torch.frombuffer(bytearray(tag), dtype=dtype)[0])) < 4:
            return "a recurrent state element"
        rest, c = divmod(int(torch.frombuffer(bytearray(tag[:2]), dtype=torch.int16)[0]) - 0x4080, conv_dim)
        part = "q" if c < key_dim else "k" if c < 2 * key_dim else "v"
        at = c % key_dim if part != "v" else c - 2 * key_dim
        return f"conv step {rest % k1} of page {rest // k1}, {part} channel {at}"
    return name

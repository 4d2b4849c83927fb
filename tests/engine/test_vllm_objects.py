"""The vLLM adapter on vLLM 0.32's own objects, built by vLLM's own code: a `VllmConfig` with a
`ModelConfig` read from a local config.json, `MambaSpec`s from vLLM's state shape and dtype
calculators (their `mamba_type` the `MambaAttentionBackendEnum`), the KV cache config from
`get_kv_cache_config_from_groups` and the tensors from `allocate_kv_cache`. Nothing here is a
stand-in but the engine's fill of its states, written from vLLM's sharding rules (the
columns and heads of each component cut contiguously over TP), never from a spec."""
import json
from math import prod

import pytest
import torch

from vllm.config import ModelConfig, ParallelConfig, VllmConfig
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups
from vllm.v1.kv_cache_interface import KVCacheGroupSpec, MambaSpec
from vllm.v1.worker.utils import allocate_kv_cache

from layoutalg import derive_canonical_mappings
from layoutalg.copy.executor import plan

BLOCKS = 3
LAYER = "model.layers.0.mixer"

# Tiny models, written here (no download): their configs are what vLLM reads.
MODELS = {
    "mamba2": dict(config={"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 32,
                           "num_hidden_layers": 1, "num_heads": 8, "head_dim": 8, "expand": 2, "n_groups": 4,
                           "state_size": 16, "conv_kernel": 4, "vocab_size": 256, "torch_dtype": "bfloat16"},
                   backend=MambaAttentionBackendEnum.MAMBA2),
    "gdn": dict(config={"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 32,
                        "num_hidden_layers": 1, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
                        "linear_key_head_dim": 4, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
                        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 256,
                        "intermediate_size": 64, "torch_dtype": "bfloat16"},
                backend=MambaAttentionBackendEnum.GDN_ATTN),
}


@pytest.fixture(scope="module")
def model_configs(tmp_path_factory):
    out = {}
    for name, m in MODELS.items():
        folder = tmp_path_factory.mktemp(name)
        (folder / "config.json").write_text(json.dumps(m["config"]))
        out[name] = ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16")
    return out


def shapes(name: str, tp: int):
    """The state's shapes and component widths as vLLM computes them (conv: the components'
    columns side by side; the state: heads and two inner dims)."""
    c = MODELS[name]["config"]
    if name == "mamba2":
        inner = c["expand"] * c["hidden_size"]
        s = MambaStateShapeCalculator.mamba2_state_shape(tp, inner, c["n_groups"], c["num_heads"], c["head_dim"],
                                                         c["state_size"], c["conv_kernel"])
        parts = (inner, c["n_groups"] * c["state_size"], c["n_groups"] * c["state_size"])  # x | B | C
        return s, parts, c["num_heads"]
    s = MambaStateShapeCalculator.gated_delta_net_state_shape(
        tp, c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
        c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
    k = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    return s, (k, k, c["linear_num_value_heads"] * c["linear_value_head_dim"]), c["linear_num_value_heads"]  # q|k|v


def engine(name: str, model_config, tp: int, rank: int):
    """(vllm_config, kv_cache_config, the layer's raw tensor, its (conv, state) views) of one rank."""
    vc = VllmConfig(model_config=model_config, parallel_config=ParallelConfig(tensor_parallel_size=tp))
    vc.parallel_config.rank = rank
    vc.cache_config.kv_cache_layout = "LBHNC"  # (the engine core resolves it; one layer, one group: any)
    dtypes = MambaStateDtypeCalculator.mamba2_state_dtype(torch.bfloat16, "auto", "float32")
    spec = MambaSpec(block_size=16, shapes=shapes(name, tp)[0], dtypes=dtypes, mamba_type=MODELS[name]["backend"])
    kcc = get_kv_cache_config_from_groups(vc, [KVCacheGroupSpec([LAYER], spec)], spec.page_size_bytes * BLOCKS)
    raw = allocate_kv_cache(kcc, torch.device("cpu"), vc.cache_config.get_resolved_kv_cache_layout())[LAYER]
    views, start = [], 0
    for shape, dtype in zip(spec.shapes, spec.dtypes):  # conv, then the state, each dense in the page
        inner = torch.empty((1, *shape)).stride()[1:]
        views.append(torch.as_strided(raw.view(-1).view(dtype), (raw.shape[0], *shape),
                                      (spec.page_size_bytes // dtype.itemsize, *inner), start // dtype.itemsize))
        start += dtype.itemsize * prod(shape)
    return vc, kcc, raw, views, spec


def fill(name: str, tp: int, rank: int, views, page_of_block):
    """Each element a code of its place in the whole model: (page, kernel step, model column) for
    the conv state, (page, model head, inner indices) for the state, cut as vLLM's layers cut them."""
    (k1, width), (heads, a, b) = (views[0].shape[1:], views[1].shape[1:])
    _, parts, total_heads = shapes(name, tp)
    total = sum(parts)
    if name == "mamba2" and MODELS[name]["config"]["n_groups"] % tp:
        raise AssertionError("this model's groups shard evenly at every tp it is run at")
    column = torch.cat([sum(parts[:i]) + rank * (n // tp) + torch.arange(n // tp) for i, n in enumerate(parts)])
    assert column.numel() == width
    page = torch.tensor(page_of_block).view(-1, 1, 1)
    conv = 1 + column.view(1, 1, -1) + total * (torch.arange(k1).view(1, -1, 1) + k1 * page)
    head = (rank * heads + torch.arange(heads)).view(1, -1, 1, 1)
    state = 1 + torch.arange(a * b).view(1, 1, a, b) + a * b * (head + total_heads * page.view(-1, 1, 1, 1))
    views[0].view(torch.int16).copy_(conv.to(torch.int32).to(torch.int16))
    views[1].view(torch.int32).copy_(state.to(torch.int32))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_state_layers_are_certified_with_vllms_enum(name, model_configs):
    vc, kcc, raw, views, spec = engine(name, model_configs[name], 2, 1)
    assert isinstance(spec.mamba_type, MambaAttentionBackendEnum)
    opaque = derive_canonical_mappings(vc, kcc, {LAYER: raw})[LAYER]
    m = derive_canonical_mappings(vc, kcc, {LAYER: raw}, state_layers=True, gdn_recurrent="vk")[LAYER]
    assert m.parallelism_agnostic and not opaque.parallelism_agnostic
    assert m.canonical_page_size_bytes == engine(name, model_configs[name], 1, 0)[4].page_size_bytes


@pytest.mark.parametrize("form", ["raw", "views"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_state_layers_move_across_tp_byte_for_byte(name, form, model_configs):
    """Stored by four ranks, loaded by two and by one: every element comes home where vLLM's own
    sharding puts it on the loading ranks (tensors as `allocate_kv_cache` gives them)."""
    where = [2, 0, 1]  # page p lies in block where[p]
    page_of_block = [where.index(b) for b in range(BLOCKS)]
    pages = None
    for tp, op in ((4, "store"), (2, "load"), (1, "load")):
        for rank in range(tp):
            vc, kcc, raw, views, spec = engine(name, model_configs[name], tp, rank)
            fill(name, tp, rank, views, page_of_block)
            given = raw if form == "raw" else views
            m = derive_canonical_mappings(vc, kcc, {LAYER: given}, state_layers=True, gdn_recurrent="vk")[LAYER]
            assert m.parallelism_agnostic, (tp, rank)
            if pages is None:
                pages = torch.zeros(BLOCKS, m.canonical_page_size_bytes, dtype=torch.uint8)
            if op == "store":
                plan(m, given).store(given, where, pages, list(range(BLOCKS)))
                continue
            expected = [v.clone() for v in views]
            raw.zero_()  # (every code is nonzero: a byte left unloaded is caught)
            plan(m, given).load(pages, list(range(BLOCKS)), given, where)
            for g, e, codes in zip(views, expected, (torch.int16, torch.int32)):
                g, e = g.view(codes), e.view(codes)
                assert torch.equal(g, e), f"{name} tp={tp} rank {rank}: {int((g != e).sum())} of {g.numel()} differ"


# An attention layer on vLLM's CPU backend: a real `Attention` (the platform picks CPU_ATTN), its
# spec from the layer, its tensor from `allocate_kv_cache`, written by the backend's own `_C` op.
ATTN = "model.layers.0.self_attn.attn"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 64,
         "vocab_size": 256, "torch_dtype": "float32"}


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    (folder / "config.json").write_text(json.dumps(LLAMA))
    return ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float32")


def cpu_engine(model_config, tp: int, rank: int):
    """(vllm_config, kv_cache_config, the layer's tensor (blocks, heads, block_size, 2 * head_size), its layer)."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.attention import Attention
    vc = VllmConfig(model_config=model_config, parallel_config=ParallelConfig(tensor_parallel_size=tp))
    vc.parallel_config.rank = rank
    vc.cache_config.block_size = 32
    vc.cache_config.kv_cache_layout = "LBHNC"
    heads, kv_heads = LLAMA["num_attention_heads"] // tp, max(1, LLAMA["num_key_value_heads"] // tp)
    with set_current_vllm_config(vc):
        layer = Attention(num_heads=heads, head_size=32, scale=1.0, num_kv_heads=kv_heads, prefix=ATTN)
    spec = layer.get_kv_cache_spec(vc)
    kcc = get_kv_cache_config_from_groups(vc, [KVCacheGroupSpec([ATTN], spec)], spec.page_size_bytes * BLOCKS)
    kv = allocate_kv_cache(kcc, torch.device("cpu"), vc.cache_config.get_resolved_kv_cache_layout())[ATTN]
    return vc, kcc, kv, layer


def test_a_cpu_backend_layer_is_cpu_attn_not_packed_hnd(llama):
    """The backend's tensor has packed HND's shape; the layer's backend says which it is."""
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig as Parallel, TensorLayout
    vc, kcc, kv, layer = cpu_engine(llama, 2, 1)
    assert layer.attn_backend.get_name() == "CPU_ATTN" and tuple(kv.shape) == (BLOCKS, 1, 32, 64)
    m = derive_canonical_mappings(vc, kcc, {ATTN: kv})[ATTN]
    d, flat = Deriver(), TensorLayout.of(kv.view(BLOCKS, -1))
    said = d.derive(LayerSpec("attention", kv[0].numel() * 4, 32, 1, 32, 4, sizes={"cpu_attn_layout": 1}), flat,
                    Parallel(2, 2), BLOCKS)
    unsaid = d.derive(LayerSpec("attention", kv[0].numel() * 4, 32, 1, 32, 4), TensorLayout.of(kv), Parallel(2, 2),
                      BLOCKS)
    assert (said.family, unsaid.family) == ("cpu_attn", "packed_hnd")
    assert m.runs == said.mappings[1].runs != unsaid.mappings[1].runs and m.layout_id == said.mappings[1].layout_id
    assert m.tensors[0].shape == (1, 32, 64)  # the engine's tensor as given, for the copy plan
    vc.compilation_config.static_forward_context.clear()  # no layer object to name the backend: packed HND
    assert derive_canonical_mappings(vc, kcc, {ATTN: kv})[ATTN].runs == unsaid.mappings[1].runs


def test_a_cpu_backend_layer_on_another_kernel_is_left_opaque(llama):
    """AMX (bf16 on a CPU with AMX tiles) tiles a block otherwise: no family takes the layer."""
    vc, kcc, kv, layer = cpu_engine(llama, 2, 0)
    layer.isa = "amx"
    m = derive_canonical_mappings(vc, kcc, {ATTN: kv})[ATTN]
    assert not m.parallelism_agnostic


def _cpu_write(kv, tp: int, rank: int, page_of_block: list):
    """The backend's own cache write of this rank's K/V heads (tags: each element's place in the model)."""
    from vllm import _custom_ops as ops
    from layoutalg.tools import vllm_writers as vw
    total, d, bs = LLAMA["num_key_value_heads"], 32, 32
    heads = vw.kv_heads(total, tp, rank, d)
    tokens = BLOCKS * bs
    slot = torch.tensor([page_of_block.index(t // bs) * bs + t % bs for t in range(tokens)])
    key, value = vw._kv({"head_size": d, "total_heads": total}, heads, tokens)
    k_cache, v_cache = kv.view(BLOCKS, len(heads), 2 * bs, d).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(key, value, k_cache, v_cache, slot, "vec")


def test_cpu_backend_pages_move_across_tp_byte_for_byte(llama):
    """Written by the backend's op at tp 2, stored, loaded at tp 1 (and back at tp 2): every byte
    is what the op writes there. (Under packed HND's reading, this holds too: TP moves whole heads.)"""
    where = [2, 0, 1]
    page_of_block = [where.index(b) for b in range(BLOCKS)]
    pages = None
    for tp, op in ((2, "store"), (1, "load"), (2, "load")):
        for rank in range(tp):
            vc, kcc, kv, _ = cpu_engine(llama, tp, rank)
            _cpu_write(kv, tp, rank, page_of_block)
            m = derive_canonical_mappings(vc, kcc, {ATTN: kv})[ATTN]
            if pages is None:
                pages = torch.zeros(BLOCKS, m.canonical_page_size_bytes, dtype=torch.uint8)
            if op == "store":
                plan(m, kv).store(kv, where, pages, list(range(BLOCKS)))
                continue
            expected = kv.clone()
            kv.zero_()
            plan(m, kv).load(pages, list(range(BLOCKS)), kv, where)
            assert torch.equal(kv, expected), f"tp={tp} rank {rank}: {int((kv != expected).sum())} differ"

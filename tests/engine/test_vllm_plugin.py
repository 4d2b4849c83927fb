"""layoutalg's vLLM plugin on vLLM 0.32 itself: loaded by vLLM's own plugin loader, it changes
nothing unless switched on; switched on, vLLM's offloading worker derives with layoutalg, in
vLLM's record types, equal to vLLM's own mappings where vLLM certifies a layer, and beyond
them where it does not (state layers)."""
import importlib
import json
import logging

import pytest
import torch
import vllm
from vllm.config import ModelConfig, ParallelConfig, VllmConfig
from vllm.v1.core.kv_cache_utils import get_kv_cache_config_from_groups
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec
from vllm.v1.kv_offload import base
from vllm.v1.worker.utils import allocate_kv_cache

from layoutalg.errors import ConfigError
from layoutalg.runtime import vllm_plugin

from test_vllm_objects import LAYER, MODELS, engine

WORKER = importlib.import_module(vllm_plugin.WORKER)
REFERENCE = importlib.import_module(vllm_plugin.REFERENCE)
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
         "vocab_size": 256, "torch_dtype": "bfloat16"}


@pytest.fixture
def vllms_own():
    """The offloading worker's derive as vLLM shipped it, put back after each test."""
    yield
    WORKER.derive_canonical_mappings = REFERENCE.derive_canonical_mappings


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    (folder / "config.json").write_text(json.dumps(LLAMA))
    return ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16")


def test_vllms_loader_finds_the_plugin_and_switched_off_it_changes_nothing(monkeypatch, vllms_own):
    from importlib.metadata import entry_points
    monkeypatch.delenv(vllm_plugin.SWITCH, raising=False)
    assert [e.value for e in entry_points(group="vllm.general_plugins") if e.name == "layoutalg"] == [
        "layoutalg.runtime.vllm_plugin:register"]
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    vllm_plugin.register()
    assert WORKER.derive_canonical_mappings is REFERENCE.derive_canonical_mappings


def test_switched_on_the_worker_derives_with_layoutalg_and_says_so_once(monkeypatch, caplog, vllms_own):
    monkeypatch.setenv(vllm_plugin.SWITCH, "1")
    monkeypatch.setattr(vllm_plugin, "_said", set())
    with caplog.at_level(logging.INFO, logger="vllm.layoutalg"):
        vllm_plugin.register()
        vllm_plugin.register()  # (vLLM may load plugins more than once in a process)
    assert WORKER.derive_canonical_mappings is vllm_plugin.derive
    said = [r.getMessage() for r in caplog.records if "derives vLLM's canonical page mappings" in r.getMessage()]
    assert len(said) == 1 and "vLLM 0.32.0" in said[0], said


def test_a_version_not_tested_is_refused(monkeypatch, vllms_own):
    monkeypatch.setenv(vllm_plugin.SWITCH, "1")
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(ConfigError, match="tested with vLLM 0.32.0, not 0.99.0"):
        vllm_plugin.register()
    assert WORKER.derive_canonical_mappings is REFERENCE.derive_canonical_mappings


def attention(model_config, tp: int, rank: int):
    vc = VllmConfig(model_config=model_config, parallel_config=ParallelConfig(tensor_parallel_size=tp))
    vc.parallel_config.rank = rank
    vc.cache_config.kv_cache_layout = "LBHNC"
    spec = FullAttentionSpec(block_size=16, num_kv_heads=LLAMA["num_key_value_heads"] // tp, head_size=32,
                             dtype=torch.bfloat16)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(LLAMA["num_hidden_layers"])]
    kcc = get_kv_cache_config_from_groups(vc, [KVCacheGroupSpec(names, spec)], spec.page_size_bytes * 4 * len(names))
    return vc, kcc, allocate_kv_cache(kcc, torch.device("cpu"), vc.cache_config.get_resolved_kv_cache_layout())


@pytest.mark.parametrize("tp", [1, 2])
def test_attention_mappings_are_vllms_own(llama, tp):
    for rank in range(tp):
        vc, kcc, caches = attention(llama, tp, rank)
        ours, theirs = vllm_plugin.derive(vc, kcc, caches), REFERENCE.derive_canonical_mappings(vc, kcc, caches)
        assert ours and ours == theirs and all(isinstance(m, base.CanonicalPageMapping) for m in ours.values())
        assert all(m.parallelism_agnostic for m in ours.values())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_state_layers_are_certified_beyond_vllms_own(name, monkeypatch, caplog):
    folder_config = ModelConfig(model=_folder(name, monkeypatch), skip_tokenizer_init=True, dtype="bfloat16")
    vc, kcc, raw, _, _ = engine(name, folder_config, 2, 0)
    monkeypatch.setenv("LAYOUTALG_VLLM_STATE_LAYERS", "1")
    monkeypatch.setenv("LAYOUTALG_VLLM_GDN_RECURRENT", "vk")
    monkeypatch.setattr(vllm_plugin, "_said", set())
    theirs = REFERENCE.derive_canonical_mappings(vc, kcc, {LAYER: raw})
    with caplog.at_level(logging.INFO, logger="vllm.layoutalg"):
        ours = vllm_plugin.derive(vc, kcc, {LAYER: raw})
    assert ours[LAYER].parallelism_agnostic and not theirs[LAYER].parallelism_agnostic
    assert isinstance(ours[LAYER], base.CanonicalPageMapping)
    assert any(f"beyond vLLM's own derive: {LAYER}" in r.getMessage() for r in caplog.records)
    monkeypatch.delenv("LAYOUTALG_VLLM_STATE_LAYERS")
    assert not vllm_plugin.derive(vc, kcc, {LAYER: raw})[LAYER].parallelism_agnostic  # off: opaque, as vLLM


def _folder(name, monkeypatch):
    import tempfile
    folder = tempfile.mkdtemp(prefix=f"{name}-")
    with open(f"{folder}/config.json", "w") as f:
        json.dump(MODELS[name]["config"], f)
    return folder

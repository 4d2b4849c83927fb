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
GATE = importlib.import_module(vllm_plugin.GATE)
CONNECTOR = importlib.import_module(vllm_plugin.GATE_IMPORTERS[0])
VLLMS_BUILD = GATE.build_offloading_config
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
         "vocab_size": 256, "torch_dtype": "bfloat16"}


@pytest.fixture
def vllms_own():
    """The offloading worker's derive and the connector's gate as vLLM shipped them, put back after each test."""
    yield
    WORKER.derive_canonical_mappings = REFERENCE.derive_canonical_mappings
    GATE.build_offloading_config = CONNECTOR.build_offloading_config = VLLMS_BUILD


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
    assert CONNECTOR.build_offloading_config is VLLMS_BUILD and GATE.build_offloading_config is VLLMS_BUILD


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


def attention(model_config, tp: int, rank: int, block_size: int = 16, dtype=torch.bfloat16):
    vc = VllmConfig(model_config=model_config, parallel_config=ParallelConfig(tensor_parallel_size=tp))
    vc.parallel_config.rank = rank
    vc.cache_config.kv_cache_layout = "LBHNC"
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=LLAMA["num_key_value_heads"] // tp, head_size=32,
                             dtype=dtype)
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


# --- the connector's parallelism-agnostic gate ---------------------------------------------------

vllms_gate = vllms_own


def connected(vc, store, canonical=True):
    from vllm.config import KVTransferConfig
    vc.cache_config.block_size = 16  # the specs' block size (as the engine aligns them)
    vc.kv_transfer_config = KVTransferConfig(
        kv_connector="OffloadingConnector", kv_role="kv_both", engine_id="layoutalg-gate-test",
        kv_connector_extra_config={"spec_name": "TieringOffloadingSpec", "cpu_bytes_to_use": 1 << 20,
                                   "canonical_layout": canonical,
                                   "secondary_tiers": [{"type": "fs", "root_dir": str(store)}]})
    return vc


def mamba_engine(name, tp, rank, monkeypatch, folder=None):
    model = ModelConfig(model=folder or _folder(name, monkeypatch), skip_tokenizer_init=True, dtype="bfloat16")
    vc, kcc, raw, _, _ = engine(name, model, tp, rank)
    return vc, kcc, raw


def test_vllm_names_every_importer_of_the_gate():
    """Every module of vLLM that imports `build_offloading_config` by name is one the plugin patches."""
    import pathlib
    root = pathlib.Path(vllm.__file__).parent
    importers = sorted(str(f.relative_to(root.parent)).removesuffix(".py").replace("/", ".")
                       for f in root.rglob("*.py") if "build_offloading_config" in f.read_text(errors="replace"))
    assert set(importers) - {vllm_plugin.GATE} == set(vllm_plugin.GATE_IMPORTERS)


def test_switched_off_the_gate_is_vllms(monkeypatch, tmp_path, vllms_gate):
    monkeypatch.delenv(vllm_plugin.SWITCH, raising=False)
    monkeypatch.setenv("LAYOUTALG_VLLM_STATE_LAYERS", "1")
    vllm_plugin.register()
    assert CONNECTOR.build_offloading_config is VLLMS_BUILD and GATE.build_offloading_config is VLLMS_BUILD
    vc, kcc, _ = mamba_engine("mamba2", 2, 0, monkeypatch)
    assert not CONNECTOR.build_offloading_config(connected(vc, tmp_path), kcc).parallel.is_parallelism_agnostic


@pytest.mark.parametrize("name", sorted(MODELS))
def test_switched_on_the_gate_widens_to_state_layers_layoutalg_certifies(name, monkeypatch, tmp_path, caplog,
                                                                         vllms_gate):
    monkeypatch.setenv(vllm_plugin.SWITCH, "1")
    monkeypatch.setenv("LAYOUTALG_VLLM_STATE_LAYERS", "1")
    monkeypatch.setenv("LAYOUTALG_VLLM_GDN_RECURRENT", "vk")
    monkeypatch.setattr(vllm_plugin, "_said", set())
    vllm_plugin.register()
    assert CONNECTOR.build_offloading_config is vllm_plugin.build_offloading_config
    for tp in (1, 2):
        for rank in range(tp):
            vc, kcc, raw = mamba_engine(name, tp, rank, monkeypatch)
            vc = connected(vc, tmp_path)
            theirs = VLLMS_BUILD(vc, kcc)
            with caplog.at_level(logging.INFO, logger="vllm.layoutalg"):
                ours = CONNECTOR.build_offloading_config(vc, kcc)
            assert not theirs.parallel.is_parallelism_agnostic and ours.parallel.is_parallelism_agnostic
            # nothing else changes
            assert ours == __import__("dataclasses").replace(theirs, parallel=__import__("dataclasses").replace(
                theirs.parallel, is_parallelism_agnostic=True))
            # the worker's check (fails closed on the flag) agrees: every mapping it gets is agnostic
            mappings = WORKER.derive_canonical_mappings(vc, kcc, {LAYER: raw})
            assert mappings and all(m.parallelism_agnostic for m in mappings.values())
    assert any("widened vLLM's parallelism-agnostic gate" in r.getMessage() and LAYER in r.getMessage()
               for r in caplog.records)
    # state layers off: layoutalg does not certify them either, so vLLM's verdict stands
    monkeypatch.delenv("LAYOUTALG_VLLM_STATE_LAYERS")
    vc, kcc, _ = mamba_engine(name, 2, 0, monkeypatch)
    assert not CONNECTOR.build_offloading_config(connected(vc, tmp_path), kcc).parallel.is_parallelism_agnostic


def test_the_gate_keeps_vllms_verdict_without_canonical_layout_and_where_vllm_says_yes(llama, monkeypatch, tmp_path,
                                                                                     vllms_gate):
    monkeypatch.setenv(vllm_plugin.SWITCH, "1")
    monkeypatch.setenv("LAYOUTALG_VLLM_STATE_LAYERS", "1")
    vllm_plugin.register()
    vc, kcc, _ = mamba_engine("mamba2", 2, 0, monkeypatch)
    off = CONNECTOR.build_offloading_config(connected(vc, tmp_path, canonical=False), kcc)
    assert off == VLLMS_BUILD(vc, kcc) and not off.parallel.is_parallelism_agnostic
    vc, kcc, _ = attention(llama, 2, 1)
    vc = connected(vc, tmp_path)
    assert CONNECTOR.build_offloading_config(vc, kcc) == VLLMS_BUILD(vc, kcc)
    assert VLLMS_BUILD(vc, kcc).parallel.is_parallelism_agnostic


def test_the_widened_gate_drops_tp_and_rank_from_the_store_folder(monkeypatch, tmp_path, vllms_gate):
    """vLLM's connector on the scheduler side, built as the engine builds it: with the plugin, the
    fs tier's folder of a TP 2 and of a TP 1 Mamba2 engine is one; with vLLM's gate, two."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    monkeypatch.setenv("LAYOUTALG_VLLM_STATE_LAYERS", "1")
    folders, model = {}, _folder("mamba2", monkeypatch)  # (the model's path is hashed too)
    for plugin in (False, True):
        monkeypatch.setenv(vllm_plugin.SWITCH, "1" if plugin else "0")
        if plugin:
            vllm_plugin.register()
        for tp in (1, 2):
            vc, kcc, _ = mamba_engine("mamba2", tp, 0, monkeypatch, model)
            c = CONNECTOR.OffloadingConnector(connected(vc, tmp_path / str(plugin)), KVConnectorRole.SCHEDULER, kcc)
            folders[plugin, tp] = folder_of(c)
            c.shutdown()
    assert folders[True, 1] == folders[True, 2]
    assert folders[False, 1] != folders[False, 2]


def folder_of(connector):
    """The fs tier's folder (its path hashes the run's fields) as the connector's spec built it."""
    from vllm.v1.kv_offload.file_mapper import FileMapper
    found = []

    def walk(obj, depth=0):
        if depth > 4 or obj is None:
            return
        if isinstance(obj, FileMapper):
            found.append(obj.base_path)
            return
        for v in list(getattr(obj, "__dict__", {}).values()):
            if isinstance(v, (list, tuple)):
                for x in v:
                    walk(x, depth + 1)
            elif hasattr(v, "__dict__") and type(v).__module__.startswith("vllm"):
                walk(v, depth + 1)
    walk(connector)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("amx, dtype, narrowed", [(True, torch.bfloat16, True), (True, torch.float16, False),
                                                  (False, torch.bfloat16, False)])
def test_the_gate_is_narrowed_where_the_workers_will_write_attention_with_a_kernel_no_spec_describes(
        amx, dtype, narrowed, llama, monkeypatch, tmp_path, caplog, vllms_gate):
    """vLLM says yes to sharing attention pages across TP by the tensor's shape. On a host with AMX
    its CPU backend writes bfloat16 attention (32 tokens a block) with its AMX kernel, whose blocks no
    spec describes: each worker's layoutalg derive keeps those layers opaque, which vLLM refuses to
    start with under a widened gate. The gate (in the engine core, which holds no layer object)
    foresees the kernel and keeps tp and rank in the store's folder there; elsewhere (float16, or no
    AMX: the vec kernel, `specs/cpu_attn.lal`) it is vLLM's."""
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setenv(vllm_plugin.SWITCH, "1")
    monkeypatch.setattr(vllm_plugin, "_said", set())
    vllm_plugin.register()
    vc, kcc, _ = attention(llama, 2, 0, block_size=32, dtype=dtype)
    vc = connected(vc, tmp_path)
    assert VLLMS_BUILD(vc, kcc).parallel.is_parallelism_agnostic  # vLLM's own verdict: yes
    why = vllm_plugin.unseen_kernel(vc, kcc)
    assert bool(why) == narrowed and (not narrowed or "kernel 'amx'" in why and why.check == "kernel"), why
    with caplog.at_level(logging.INFO, logger="vllm.layoutalg"):
        ours = CONNECTOR.build_offloading_config(vc, kcc)
    assert ours.parallel.is_parallelism_agnostic == (not narrowed)
    assert narrowed == any("narrowed vLLM's parallelism-agnostic gate" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("amx", [True, False])
def test_a_worker_and_the_engine_core_narrow_alike_for_a_backend_vllm_subclasses(amx, llama, monkeypatch):
    """vLLM subclasses CPU_ATTN for some layers (`subclass_attention_backend`: a class made by `type`,
    its module `abc`); a worker reads the kernel through the class it derives from, so it answers as
    the engine core does, which holds no layer object and asks the backend which kernel it will choose."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.attention.backend import subclass_attention_backend
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    vc, kcc, _ = attention(llama, 2, 0, block_size=32)
    core = vllm_plugin.unseen_kernel(vc, kcc)
    backend = subclass_attention_backend("StaticSink_", CPUAttentionBackend, CPUAttentionBackend.get_builder_cls())
    assert backend.__module__ != CPUAttentionBackend.__module__ and backend.get_name() == "CPU_ATTN"
    layers = {name: type("Layer", (), {"attn_backend": backend})() for name in kcc.kv_cache_groups[0].layer_names}
    vc.compilation_config.static_forward_context = layers
    worker = vllm_plugin.unseen_kernel(vc, kcc)
    assert bool(core) == bool(worker) == amx, (core, worker)

"""derive_canonical_mappings with objects shaped like vLLM 0.32's (names, hierarchy, fields).

The fakes below are written here, not imported: the classes carry vLLM's names and MRO
(KVCacheSpec -> AttentionSpec -> FullAttentionSpec -> MLAAttentionSpec; MambaSpec;
UniformTypeKVCacheSpecs; HiSparseHotSpec) and the fields the adapter reads, with vLLM's
page-size arithmetic (`tokens_per_state` states, `head_size_v`, `page_size_padded`).
"""
from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum, IntEnum
from fractions import Fraction
from math import prod

import pytest
import torch

import layoutalg
from layoutalg import derive_canonical_mappings


class KVQuantMode(IntEnum):
    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2
    FP8_PER_TOKEN_HEAD = 3

    @property
    def is_per_token_head(self) -> bool:
        return self in (KVQuantMode.INT8_PER_TOKEN_HEAD, KVQuantMode.FP8_PER_TOKEN_HEAD)


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int

    @property
    def page_size_bytes(self) -> int:
        raise NotImplementedError

    @property
    def tokens_per_state(self):
        raise NotImplementedError

    @property
    def num_states(self) -> int:
        return self.block_size // self.tokens_per_state if self.tokens_per_state > 0 else 1


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    head_size_v: int = None
    kv_quant_mode: KVQuantMode = KVQuantMode.NONE
    page_size_padded: int | None = None
    tokens_per_state: int | Fraction = 1

    def __post_init__(self):
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)

    @property
    def real_page_size_bytes(self) -> int:
        return self.num_kv_heads * self.num_states * (self.head_size + self.head_size_v) * self.dtype.itemsize

    @property
    def unpadded_page_size_bytes(self) -> int:  # as vLLM's: a per-token-head mode adds an fp32 scale per K/V, token, head
        scales = 2 * self.num_states * self.num_kv_heads * 4 if self.kv_quant_mode.is_per_token_head else 0
        return self.real_page_size_bytes + scales

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_padded if self.page_size_padded is not None else self.unpadded_page_size_bytes


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    sliding_window: int | None = None
    attention_chunk_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: str | None = None
    head_size_v: int = 0  # one latent per state, no separate V


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    shapes: tuple
    dtypes: tuple
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    tokens_per_state: int = -1

    @property
    def page_size_bytes(self) -> int:
        size = sum(prod(s) * d.itemsize for s, d in zip(self.shapes, self.dtypes))
        return self.page_size_padded if self.page_size_padded is not None else size


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    kv_cache_specs: dict

    @property
    def page_size_bytes(self) -> int:
        return sum(s.page_size_bytes for s in self.kv_cache_specs.values())


@dataclass(frozen=True)
class HiSparseHotSpec(KVCacheSpec):
    page_size: int
    blocks_per_request: int

    @property
    def page_size_bytes(self) -> int:
        return self.page_size


@dataclass
class KVCacheGroupSpec:
    layer_names: list
    kv_cache_spec: KVCacheSpec


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list
    kv_cache_groups: list


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    cp_kv_cache_interleave_size: int = 1
    world_size: int = 1
    rank: int = 0


@dataclass
class ModelConfig:
    total_num_kv_heads: int

    def get_total_num_kv_heads(self) -> int:
        return self.total_num_kv_heads


@dataclass
class VllmConfig:
    parallel_config: ParallelConfig
    model_config: ModelConfig


def config(tp=2, rank=0, total=4, pcp=1, dcp=1, interleave=1, world=None) -> VllmConfig:
    return VllmConfig(ParallelConfig(tp, pcp, dcp, interleave, world if world is not None else tp * pcp, rank),
                      ModelConfig(total))


def cache_config(groups, num_blocks=3) -> KVCacheConfig:
    return KVCacheConfig(num_blocks, [], [KVCacheGroupSpec(list(names), spec) for spec, names in groups])


def attention(block_size=16, heads=2, head_size=64, dtype=torch.bfloat16, **kw) -> FullAttentionSpec:
    return FullAttentionSpec(block_size=block_size, num_kv_heads=heads, head_size=head_size, dtype=dtype, **kw)


def mla(block_size=16, head_size=576, dtype=torch.bfloat16, **kw) -> MLAAttentionSpec:
    return MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=head_size, dtype=dtype, **kw)


def split_nhd(n=3, block_size=16, heads=2, head_size=64, dtype=torch.bfloat16):
    return torch.zeros(n, 2, block_size, heads, head_size, dtype=dtype)


def mamba() -> MambaSpec:
    return MambaSpec(block_size=16, shapes=((3, 256), (4, 64, 16)), dtypes=(torch.bfloat16, torch.float32))


MAMBA_PAGE = 3 * 256 * 2 + 4 * 64 * 16 * 4


def whole_page_run(page, rank):
    return (0, rank * page, page, 1, page, page)


def test_whole_model_mixed_layers():
    names = [f"layers.{i}.attn" for i in range(4)]
    caches = {n: split_nhd() for n in names}
    kv = cache_config([(attention(), names), (mla(), ["layers.9.mla"]), (mamba(), ["layers.10.mamba"])])
    out = derive_canonical_mappings(config(tp=2, rank=1), kv, caches)
    assert set(out) == set(names) | {"layers.9.mla", "layers.10.mamba"}
    a = out["layers.0.attn"]
    assert a.local_page_size_bytes == 2 * 16 * 2 * 64 * 2
    assert a.canonical_page_size_bytes == 2 * a.local_page_size_bytes and a.parallelism_agnostic
    assert out["layers.9.mla"].num_writers == 2 and out["layers.9.mla"].writer_index == 1
    assert out["layers.9.mla"].local_page_size_bytes == 16 * 576 * 2
    m = out["layers.10.mamba"]
    assert tuple(m.runs[0]) == whole_page_run(MAMBA_PAGE, 1) and not m.parallelism_agnostic


@pytest.mark.parametrize("tokens_per_state", [2, 4, Fraction(2), Fraction(1, 2), Fraction(3, 2)])
def test_compressed_mla_goes_to_the_fallback_as_vllm_sends_it(tokens_per_state):
    """vLLM 0.32 names the compression `tokens_per_state`; anything but 1 is not one latent row a token."""
    spec = mla(block_size=32, tokens_per_state=tokens_per_state)
    page = spec.unpadded_page_size_bytes
    out = derive_canonical_mappings(config(tp=2, dcp=2, total=1, rank=1), cache_config([(spec, ["mla"])]), {})
    m = out["mla"]
    assert (m.local_page_size_bytes, m.canonical_page_size_bytes) == (page, 2 * page)
    assert [tuple(r) for r in m.runs] == [whole_page_run(page, 1)]
    assert (m.num_writers, m.writer_index, m.parallelism_agnostic) == (1, 0, False)


@pytest.mark.parametrize("one", [1, Fraction(1, 1)])
def test_uncompressed_mla_is_certified(one):
    spec = mla(block_size=32, tokens_per_state=one)
    m = derive_canonical_mappings(config(tp=2, dcp=2, total=1, rank=1), cache_config([(spec, ["mla"])]), {})["mla"]
    assert (m.num_writers, m.writer_index, m.canonical_page_size_bytes) == (1, 0, 2 * 32 * 1152)
    assert [tuple(r) for r in m.runs] == [(0, 1152, 1152, 32, 1152, 2304)]  # dcp rank 1: odd tokens


@pytest.mark.parametrize("compress_ratio,writers", [(1, 2), (4, 1)])
def test_older_vllm_compress_ratio_is_still_read(compress_ratio, writers):
    class AttentionSpec:  # the older shape: no tokens_per_state, `compress_ratio` on MLA specs
        pass

    class MLAAttentionSpec(AttentionSpec):
        block_size, num_kv_heads, head_size, dtype = 16, 1, 576, torch.bfloat16
        kv_quant_mode = KVQuantMode.NONE
        real_page_size_bytes = 16 * 576 * 2

        def __init__(self, compress_ratio):
            self.compress_ratio = compress_ratio

    kv = cache_config([(MLAAttentionSpec(compress_ratio), ["mla"])])
    out = derive_canonical_mappings(config(tp=2, total=1), kv, {})
    assert out["mla"].num_writers == writers  # 2: certified, replicated over TP; 1: the opaque fallback


def test_layers_vllm_leaves_out_are_left_out():
    """Neither an attention nor a Mamba spec: no mapping, as in vLLM (not an opaque one)."""
    hot = HiSparseHotSpec(block_size=16, page_size=4096, blocks_per_request=8)
    uniform = UniformTypeKVCacheSpecs(block_size=16, kv_cache_specs={"a0": attention(), "m0": mla()})
    caches = {"a0": split_nhd(), "a1": split_nhd()}
    kv = cache_config([(hot, ["hot.0"]), (uniform, ["a0", "m0", "a1"])])  # a1 has no per-layer spec
    out = derive_canonical_mappings(config(tp=2), kv, caches)
    assert set(out) == {"a0", "m0"}
    assert out["a0"].parallelism_agnostic and out["m0"].num_writers == 2


def test_a_deployments_own_spec_class_is_read_as_the_kind_it_names():
    """The kind comes from a table along the class hierarchy (`SPEC_KINDS`), which a
    deployment extends: a spec class of its own, no AttentionSpec, is read as attention."""
    from layoutalg.errors import ConfigError
    from layoutalg.runtime.vllm import spec_kind

    class ForkAttentionSpec:  # a fork's spec: the attention fields, no vLLM base class
        block_size, num_kv_heads, head_size, dtype = 16, 2, 64, torch.bfloat16
        kv_quant_mode = KVQuantMode.NONE
        real_page_size_bytes = 2 * 16 * 2 * 64 * 2

    assert (spec_kind(mla()), spec_kind(attention()), spec_kind(mamba())) == ("mla", "attention", "mamba")
    assert spec_kind(ForkAttentionSpec()) == "other"
    kv = cache_config([(ForkAttentionSpec(), ["fork"]), (attention(), ["attn"])])
    caches = {"fork": split_nhd(), "attn": split_nhd()}
    assert set(derive_canonical_mappings(config(tp=2), kv, caches)) == {"attn"}  # left out, as vLLM would
    out = derive_canonical_mappings(config(tp=2), kv, caches, kinds={"ForkAttentionSpec": "attention"})
    assert out["fork"].runs == out["attn"].runs and out["fork"].parallelism_agnostic
    with pytest.raises(ConfigError, match=r"kinds\['ForkAttentionSpec'\] = 'attn'.*one of attention, mla, mamba"):
        derive_canonical_mappings(config(tp=2), kv, caches, kinds={"ForkAttentionSpec": "attn"})
    with pytest.raises(ConfigError, match="kinds.*one of"):
        spec_kind(ForkAttentionSpec(), {"ForkAttentionSpec": "bogus"})  # checked wherever it is read
    for every in ("object", "KVCacheSpec"):  # a kind for a class every spec is, is one for all
        with pytest.raises(ConfigError, match=f"every spec is a {every}"):
            derive_canonical_mappings(config(tp=2), kv, caches, kinds={every: "attention"})
    from unittest.mock import MagicMock
    assert spec_kind(MagicMock(spec=FullAttentionSpec)) == "attention"  # as isinstance reads a mock


def test_padding_is_not_part_of_the_page():
    """vLLM maps the unpadded page: the real page of attention, the state itself of Mamba."""
    padded = attention(page_size_padded=8192 + 512)
    state = MambaSpec(block_size=16, shapes=((3, 256),), dtypes=(torch.bfloat16,), page_size_padded=4096)
    kv = cache_config([(padded, ["attn"]), (state, ["mamba"])])
    out = derive_canonical_mappings(config(tp=2, rank=1), kv, {"attn": split_nhd()})
    assert out["attn"].local_page_size_bytes == 8192 and out["attn"].parallelism_agnostic
    assert [tuple(r) for r in out["mamba"].runs] == [whole_page_run(3 * 256 * 2, 1)]


def test_per_token_head_quant_fails_closed():
    spec = attention(dtype=torch.int8, kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD)
    out = derive_canonical_mappings(config(tp=2), cache_config([(spec, ["q"])]), {"q": split_nhd(dtype=torch.int8)})
    assert [tuple(r) for r in out["q"].runs] == [whole_page_run(spec.unpadded_page_size_bytes, 0)]


def test_per_token_head_quant_maps_where_the_deployment_says_where_the_scales_are():
    """vLLM's page of a per-token-head layer holds the data and an fp32 scale per K/V, token and
    head; where the deployment says they lie in a region after the data, it is `quant_split`."""
    spec = attention(heads=2, dtype=torch.int8, kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD)
    kv = cache_config([(spec, ["q"])])
    maps = [derive_canonical_mappings(config(tp=2, rank=r), kv, {}, sizes={"kv_scales": 2, "scale_bytes": 4})["q"]
            for r in range(2)]
    assert maps[0].local_page_size_bytes == spec.unpadded_page_size_bytes == 2 * 16 * 2 * (64 + 4)
    assert maps[0].canonical_page_size_bytes == 2 * maps[0].local_page_size_bytes and maps[0].parallelism_agnostic
    assert maps[0].format_id == maps[1].format_id and maps[0].runs != maps[1].runs
    written = sorted((r.canonical_offset + i * r.canonical_stride, r.fragment_size)
                     for m in maps for r in m.runs for i in range(r.num_fragments))
    assert sum(n for _, n in written) == maps[0].canonical_page_size_bytes  # the two ranks tile the page
    assert all(a + n <= b for (a, n), (b, _) in zip(written, written[1:]))


def test_fail_closed_reasons_are_warned_once_per_kind_and_reason(caplog):
    names = [f"layers.{i}.mamba" for i in range(80)]
    quant = attention(dtype=torch.int8, kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD)
    kv = cache_config([(mamba(), names), (quant, ["q0", "q1"]), (attention(), ["ok"])])
    caches = {"q0": split_nhd(dtype=torch.int8), "q1": split_nhd(dtype=torch.int8), "ok": split_nhd()}
    with caplog.at_level(logging.WARNING, logger="layoutalg"):
        out = derive_canonical_mappings(config(tp=2), kv, caches)
    assert len(out) == 83
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    mamba_line = next(w for w in warnings if "MambaSpec" in w)
    assert "80 MambaSpec layer(s)" in mamba_line and "opaque" in mamba_line and "and 77 more" in mamba_line
    quant_line = next(w for w in warnings if "FullAttentionSpec" in w)
    assert "2 FullAttentionSpec layer(s) (q0, q1)" in quant_line and "per_token_head_quant == 0" in quant_line


def test_world_not_the_grid_gives_nothing():
    kv = cache_config([(attention(dtype=torch.float16), ["l0"])])
    caches = {"l0": split_nhd(dtype=torch.float16)}
    assert derive_canonical_mappings(config(tp=2, world=4), kv, caches) == {}


def test_a_list_of_tensors_fails_closed():
    kv = cache_config([(attention(dtype=torch.float16), ["l0"])])
    caches = {"l0": [torch.zeros(3, 16, 2, 64, dtype=torch.float16)] * 2}
    m = derive_canonical_mappings(config(tp=2), kv, caches)["l0"]
    assert m.num_writers == 1 and not m.parallelism_agnostic and len(m.runs) == 1


def test_identical_layers_are_derived_once():
    deriver = layoutalg.Deriver()
    spec = layoutalg.LayerSpec("attention", 8192, 16, 2, 64, 2)
    tensor = layoutalg.TensorLayout((3, 2, 16, 2, 64), (8192 // 2, 2048, 128, 64, 1), 2)
    par = layoutalg.ParallelConfig(tp=4, total_kv_heads=8)
    first = deriver.derive(spec, tensor, par, 3)
    for _ in range(79):
        assert deriver.derive(spec, tensor, par, 3) is first
    assert deriver.cache_info().misses == 1


def test_runtime_never_imports_z3_or_matplotlib():
    code = ("import sys, layoutalg, torch\n"
            "d = layoutalg.Deriver()\n"
            "t = torch.zeros(3, 2, 16, 2, 64, dtype=torch.float16)\n"
            "r = d.derive(layoutalg.LayerSpec('attention', 8192, 16, 2, 64, 2), layoutalg.TensorLayout.of(t),\n"
            "             layoutalg.ParallelConfig(tp=2, total_kv_heads=4), 3)\n"
            "assert r.result == 'certified'\n"
            "import layoutalg.copy.executor, layoutalg.plans.reshard\n"
            "print('z3' in sys.modules, 'matplotlib' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_specs_are_parsed_once_per_process():
    from layoutalg.dsl import syntax
    from layoutalg.runtime.derive import compiled_library
    compiled_library()
    before = syntax._parse_cached.cache_info().misses
    layoutalg.Deriver()
    layoutalg.Deriver()
    assert syntax._parse_cached.cache_info().misses == before


def test_precompiled_library_skips_lark_and_sympy(tmp_path):
    code = ("import sys, layoutalg\n"
            "layoutalg.Deriver()\n"
            "print('lark' in sys.modules, 'sympy' in sys.modules)\n")
    env = {**__import__("os").environ, "LAYOUTALG_CACHE": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert first.stdout.split() == ["True", "True"]      # compiled: parsed and reasoned about
    assert second.stdout.split() == ["False", "False"]   # loaded from the cache
    assert len(list(tmp_path.glob("library-*.bin"))) == 1


def test_deployment_sizes_choose_the_pcp_replica_grid():
    """`sizes` hands every layer a runtime name the specs declare: PCP ranks as KV replicas."""
    caches = {"attn": split_nhd()}
    kv = cache_config([(attention(), ["attn"])])
    shards = derive_canonical_mappings(config(tp=2, pcp=2, rank=2), kv, caches)["attn"]
    replicas = derive_canonical_mappings(config(tp=2, pcp=2, rank=2), kv, caches, sizes={"pcp_replicas": 1})["attn"]
    page = 2 * 16 * 2 * 64 * 2
    assert shards.canonical_page_size_bytes == 2 * 2 * page and shards.num_writers == 1
    assert replicas.canonical_page_size_bytes == 2 * page
    assert (replicas.num_writers, replicas.writer_index) == (2, 1)


# ---- state layers (opt-in): vLLM's MambaSpec onto the mamba2 and gdn families ---------

@dataclass
class HFConfig:
    n_groups: int


@dataclass
class HybridModelConfig(ModelConfig):
    hf_config: HFConfig | None = None


def state_config(tp, rank, n_groups=1):
    c = config(tp=tp, rank=rank)
    return VllmConfig(c.parallel_config, HybridModelConfig(c.model_config.total_num_kv_heads, HFConfig(n_groups)))


def mamba2_spec(tp, n_groups=1, heads=8, head_dim=4, n=2, k=4):
    groups_here = n_groups // tp if n_groups % tp == 0 else 1
    conv = (k - 1, heads // tp * head_dim + 2 * groups_here * n)
    return MambaSpec(block_size=16, shapes=(conv, (heads // tp, head_dim, n)), dtypes=(torch.bfloat16, torch.float32),
                     mamba_type="mamba2")


def gdn_spec(tp, k_heads=2, v_heads=4, k_dim=2, v_dim=3, k=3):
    conv = (k - 1, (2 * k_heads * k_dim + v_heads * v_dim) // tp)
    return MambaSpec(block_size=16, shapes=(conv, (v_heads // tp, v_dim, k_dim)), dtypes=(torch.bfloat16, torch.float32),
                     mamba_type="gdn_attention")


@pytest.mark.parametrize("make,n_groups", [(mamba2_spec, 1), (mamba2_spec, 4), (gdn_spec, 1)])
def test_state_layers_map_onto_their_families(make, n_groups):
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.vllm import state_layer
    spec = make(2, n_groups) if make is mamba2_spec else make(2)
    kv = cache_config([(spec, ["layers.0.mixer"])])
    default = derive_canonical_mappings(state_config(2, 1, n_groups), kv, {})
    assert default["layers.0.mixer"].canonical_page_size_bytes == 2 * spec.page_size_bytes  # opaque, as vLLM
    out = derive_canonical_mappings(state_config(2, 1, n_groups), kv, {}, state_layers=True)["layers.0.mixer"]
    layer, why = state_layer(spec, 2, state_config(2, 1, n_groups).model_config)
    assert why is None and layer.kind == spec.mamba_type
    res = Deriver().derive(layer, None, layoutalg_parallel(2))
    assert res.result == "certified" and out == res.mappings[1]
    assert out.canonical_page_size_bytes == (make(1, n_groups) if make is mamba2_spec else make(1)).page_size_bytes


def layoutalg_parallel(tp):
    from layoutalg.runtime.records import ParallelConfig as PC
    return PC(tp, 4)


def test_state_layers_fail_closed_on_what_they_cannot_read(monkeypatch, caplog):
    kv = cache_config([(mamba2_spec(2), ["m"])])
    no_groups = derive_canonical_mappings(config(tp=2, rank=0), kv, {}, state_layers=True)  # no hf_config
    assert no_groups["m"].canonical_page_size_bytes == 2 * mamba2_spec(2).page_size_bytes    # opaque
    assert any("n_groups" in r.message for r in caplog.records)
    monkeypatch.setenv("VLLM_SSM_CONV_STATE_LAYOUT", "SIDEWAYS")
    caplog.clear()
    derive_canonical_mappings(state_config(2, 0), kv, {}, state_layers=True)
    assert any("neither SD nor DS" in r.message for r in caplog.records)


def test_dim_first_conv_state_maps_onto_its_own_format(monkeypatch):
    from layoutalg.runtime.derive import Deriver
    sd = derive_canonical_mappings(state_config(2, 1), cache_config([(mamba2_spec(2), ["m"])]), {},
                                   state_layers=True)["m"]
    monkeypatch.setenv("VLLM_SSM_CONV_STATE_LAYOUT", "DS")
    spec = mamba2_spec(2)
    ds_spec = MambaSpec(block_size=16, shapes=(spec.shapes[0][::-1], spec.shapes[1]), dtypes=spec.dtypes,
                        mamba_type="mamba2")
    ds = derive_canonical_mappings(state_config(2, 1), cache_config([(ds_spec, ["m"])]), {}, state_layers=True)["m"]
    assert ds.layout_id == Deriver().families["mamba2_ds"].layout_id != sd.layout_id
    assert ds.runs != sd.runs and ds.canonical_page_size_bytes == sd.canonical_page_size_bytes


def test_hybrid_model_with_attention_and_mamba_groups():
    from layoutalg.runtime.derive import Deriver
    names = [f"layers.{i}.attn" for i in range(2)]
    kv = cache_config([(attention(), names), (mamba2_spec(2), ["layers.2.mixer", "layers.3.mixer"])])
    out = derive_canonical_mappings(state_config(2, 0), kv, {n: split_nhd() for n in names}, state_layers=True)
    assert set(out) == set(names) | {"layers.2.mixer", "layers.3.mixer"}
    assert out["layers.0.attn"].canonical_page_size_bytes == 2 * out["layers.0.attn"].local_page_size_bytes
    mixer = out["layers.2.mixer"]
    assert mixer.run_writers and mixer.canonical_page_size_bytes == mamba2_spec(1).page_size_bytes
    assert mixer.layout_id == Deriver().families["mamba2"].layout_id


@pytest.mark.parametrize("tp,true_groups,claimed", [(1, 4, 2), (2, 4, 2), (4, 8, 4)])
def test_a_model_config_that_disagrees_with_the_shapes_stays_opaque(tp, true_groups, claimed, caplog):
    spec = mamba2_spec(tp, true_groups)
    out = derive_canonical_mappings(state_config(tp, 0, claimed), cache_config([(spec, ["m"])]), {},
                                    state_layers=True)["m"]
    assert out.canonical_page_size_bytes == tp * spec.page_size_bytes and out.layout_id != ""  # opaque
    assert any("is not" in r.message and "n_groups" in r.message for r in caplog.records)


def test_state_mappings_are_parallelism_agnostic():
    out = derive_canonical_mappings(state_config(2, 0), cache_config([(mamba2_spec(2), ["m"]), (gdn_spec(2), ["g"])]),
                                    {}, state_layers=True)
    assert out["m"].parallelism_agnostic and out["g"].parallelism_agnostic


def engine_state_tensors(spec, num_blocks=3):
    """A Mamba layer's tensors as vLLM's model runner views them: one raw buffer of a page a
    block, each state an `as_strided` view of it after the previous one."""
    raw = torch.zeros(num_blocks * spec.page_size_bytes, dtype=torch.uint8)
    out, start = [], 0
    for shape, dtype in zip(spec.shapes, spec.dtypes):
        e = dtype.itemsize
        inner = torch.empty((1, *shape)).stride()[1:]
        out.append(torch.as_strided(raw.view(dtype), (num_blocks, *shape), (spec.page_size_bytes // e, *inner),
                                    start // e))
        start += e * prod(shape)
    return out


def test_a_state_layers_tensors_are_recognised_and_planned():
    from layoutalg.copy.executor import plan
    spec = mamba2_spec(2, 4)
    kv = cache_config([(spec, ["m"])], num_blocks=3)
    tensors = engine_state_tensors(spec, kv.num_blocks)
    out = derive_canonical_mappings(state_config(2, 1, 4), kv, {"m": tensors}, state_layers=True)["m"]
    assert [v.name for v in out.tensors] == ["conv", "ssm"] and out.run_writers == ()
    assert out.tensors[1].offset == 2 * prod(spec.shapes[0]) and out.tensors[1].shape == spec.shapes[1]
    plan(out, tensors)                                   # the engine's own tensors, as they are
    swapped = derive_canonical_mappings(state_config(2, 1, 4), kv, {"m": tensors[::-1]}, state_layers=True)["m"]
    assert swapped.canonical_page_size_bytes == 2 * spec.page_size_bytes  # opaque: not the tensors the spec views


def test_sizes_may_not_contradict_what_the_layer_spec_gives():
    kv = cache_config([(mamba2_spec(2, 4), ["m"])])
    with pytest.raises(layoutalg.errors.ConfigError, match=r"sizes\['ssm_heads'\] = 4, but the layer's own spec "
                                                           r"gives ssm_heads = 8"):
        derive_canonical_mappings(state_config(2, 1, 4), kv, {}, sizes={"ssm_heads": 4}, state_layers=True)
    same = derive_canonical_mappings(state_config(2, 1, 4), kv, {}, sizes={"ssm_heads": 8}, state_layers=True)
    assert same["m"].parallelism_agnostic                    # the same value is no contradiction


def test_opaque_state_layers_of_other_specs_are_other_formats(monkeypatch):
    """Stored opaque, a layer's page is its own bytes: one page size is not one format when
    the state's shapes, dtypes or conv orientation differ."""
    a = mamba2_spec(2, 2)
    b = MambaSpec(block_size=16, shapes=(a.shapes[0][::-1], a.shapes[1]), dtypes=a.dtypes, mamba_type="mamba2")
    out = {}
    for key, spec, layout in (("sd", a, "SD"), ("ds", b, "DS"), ("sd again", a, "SD")):
        monkeypatch.setenv("VLLM_SSM_CONV_STATE_LAYOUT", layout)
        m = derive_canonical_mappings(state_config(2, 0, 2), cache_config([(spec, ["m"])]), {})["m"]
        out[key] = m
    assert out["sd"].canonical_page_size_bytes == out["ds"].canonical_page_size_bytes
    assert out["sd"].format_id != out["ds"].format_id and out["sd"].format_id == out["sd again"].format_id


def test_element_types_of_one_size_are_other_formats():
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    ids = set()
    for dtype in (torch.bfloat16, torch.float16):
        kv = torch.zeros(3, 2, 16, 2, 64, dtype=dtype)
        res = Deriver().derive(LayerSpec("attention", kv[0].numel() * 2, 16, 2, 64, 2), TensorLayout.of(kv),
                               ParallelConfig(2, 4))
        ids.add(res.mappings[0].format_id)
    assert len(ids) == 2


def test_flash_attention_order_is_read_from_the_tensor_where_its_shape_tells():
    """(2, num_blocks, ...) with num_blocks other than 2 is FlashAttention's order, K and V
    outside the blocks: served by its family without the layer saying so. (2, 2, ...) cannot
    tell and is read blocks first unless said; a layer that says 0 is taken at its word."""
    kv = cache_config([(attention(), ["l0"])], num_blocks=3)
    flash = {"l0": torch.zeros(2, 3, 16, 2, 64, dtype=torch.bfloat16)}
    out = derive_canonical_mappings(config(tp=2, rank=0), kv, flash)
    said = derive_canonical_mappings(config(tp=2, rank=0), kv, flash, sizes={"kv_blocks_second": 1})
    def seen(m):  # the runs, and the tensor view the mapping was derived for (K and V outside: outer 1)
        return m, m.format_id, m.tensors
    assert seen(out["l0"]) == seen(said["l0"]) and out["l0"].parallelism_agnostic
    assert [t.outer for t in out["l0"].tensors] == [1]
    refused = derive_canonical_mappings(config(tp=2, rank=0), kv, flash, sizes={"kv_blocks_second": 0})
    assert not refused["l0"].parallelism_agnostic  # the fallback: this rank's bytes as they lie
    two = cache_config([(attention(), ["l0"])], num_blocks=2)
    square = {"l0": torch.zeros(2, 2, 16, 2, 64, dtype=torch.bfloat16)}
    blocks_first = derive_canonical_mappings(config(tp=2, rank=0), two, square)["l0"]
    split = derive_canonical_mappings(config(tp=2, rank=0), two, {"l0": split_nhd(2)})["l0"]
    flash_two = derive_canonical_mappings(config(tp=2, rank=0), two, square, sizes={"kv_blocks_second": 1})["l0"]
    assert seen(blocks_first) == seen(split) and [t.outer for t in blocks_first.tensors] == [0]
    assert [t.outer for t in flash_two.tensors] == [1]


@pytest.mark.parametrize("word,family", [(None, None), ("vk", "gdn"), ("kv", None)])
def test_a_gdn_state_whose_key_and_value_dims_are_one_size_needs_the_word_that_orders_them(word, family):
    """(heads, 128, 128) does not say which dim is the value dim (vLLM swapped them between
    versions): without the deployment's word, or with an order no family reads, the layer is
    opaque and says why; with it, the gdn family holds it. Dims of two sizes need no word."""
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.vllm import state_layer
    spec = gdn_spec(2, k_dim=3, v_dim=3)
    layer, why = state_layer(spec, 2, state_config(2, 0).model_config, gdn_recurrent=word)
    if family is None:
        assert layer is None and ("one size" in why if word is None else "no shipped family" in why), why
    else:
        assert Deriver().derive(layer, None, ParallelConfig_(2), 2).family == family
    distinct, why = state_layer(gdn_spec(2), 2, state_config(2, 0).model_config)
    assert distinct is not None, why
    with pytest.raises(layoutalg.errors.ConfigError, match="gdn_recurrent must be one of"):
        derive_canonical_mappings(state_config(2, 0), cache_config([(spec, ["g"])]), {}, gdn_recurrent="v,k")


def ParallelConfig_(tp):
    from layoutalg.runtime.records import ParallelConfig as RuntimeParallel
    return RuntimeParallel(tp=tp, total_kv_heads=1)


# ---- a real hybrid model's state layers, moved across a TP change by an engine oracle ------

# Nemotron-H-like Mamba2 (8 groups, state 128, 128 heads of 64, conv kernel 4) and Qwen3-Next-like
# gated delta net (16 key heads, 32 value heads, 128 channels each, conv kernel 4).
HYBRID = {"mamba2": dict(make=lambda tp: mamba2_spec(tp, n_groups=8, heads=128, head_dim=64, n=128, k=4), groups=8,
                         conv=lambda tp: (128 * 64 // tp, 8 * 128 // tp, 8 * 128 // tp), heads=128),
          "gdn": dict(make=lambda tp: gdn_spec(tp, k_heads=16, v_heads=32, k_dim=128, v_dim=128, k=4), groups=1,
                      conv=lambda tp: (16 * 128 // tp, 16 * 128 // tp, 32 * 128 // tp), heads=32)}


def engine_states(model: str, tp: int, rank: int, page_of_block: list) -> tuple:
    """A rank's (conv, state) as vLLM's rules shard them, never read from a spec: the conv
    state's columns are its components side by side (Mamba2: x | B | C; GDN: q | k | v), each
    component cut contiguously over TP; the state's heads are cut contiguously. Each conv
    element holds a code (int16, wrapping) of (page, kernel step, column of the whole model),
    each state element (int32) one of (page, head of the whole model, its two inner indices)."""
    spec, parts = HYBRID[model]["make"](tp), HYBRID[model]["conv"](tp)
    (k1, width), (heads, a, b) = spec.shapes
    total_width, total_heads = sum(parts) * tp, HYBRID[model]["heads"]
    column = torch.cat([sum(parts[:i]) * tp + rank * n + torch.arange(n) for i, n in enumerate(parts)])
    page = torch.tensor(page_of_block).view(-1, 1, 1)
    conv = 1 + column.view(1, 1, -1) + total_width * (torch.arange(k1).view(1, -1, 1) + k1 * page)
    head = (rank * heads + torch.arange(heads)).view(1, -1, 1, 1)
    state = 1 + torch.arange(a * b).view(1, 1, a, b) + a * b * (head + total_heads * page.view(-1, 1, 1, 1))
    return conv.to(torch.int32).to(torch.int16), state.to(torch.int32)


def engine_buffer(model: str, tp: int, rank: int, page_of_block: list) -> tuple:
    """(the raw page buffer vLLM allocates, (blocks, 1, 1, page bytes) int8; the conv and state
    views its model runner makes of it), filled by `engine_states`."""
    spec, blocks = HYBRID[model]["make"](tp), len(page_of_block)
    raw = torch.zeros(blocks, 1, 1, spec.page_size_bytes, dtype=torch.int8)
    views, start = [], 0
    for shape, dtype in zip(spec.shapes, spec.dtypes):
        e = dtype.itemsize
        inner = torch.empty((1, *shape)).stride()[1:]
        views.append(torch.as_strided(raw.view(-1).view(dtype), (blocks, *shape), (spec.page_size_bytes // e, *inner),
                                      start // e))
        start += e * prod(shape)
    conv, state = engine_states(model, tp, rank, page_of_block)
    views[0].view(torch.int16).copy_(conv)
    views[1].view(torch.int32).copy_(state)
    return raw, views


@pytest.mark.parametrize("form", ["raw page", "state views", "states apart"])
@pytest.mark.parametrize("model", sorted(HYBRID))
def test_a_hybrid_models_state_moves_across_a_tp_change_byte_for_byte(model, form):
    """Stored by two ranks, loaded by four, through layoutalg's own plans of the mappings the vLLM
    adapter derives from the engine's tensors as they are: every element comes home, as the
    engine's own sharding puts it on the loading ranks."""
    from layoutalg.copy.executor import plan
    where = [1, 0]  # page p lies in block where[p]
    page_of_block = [where.index(b) for b in range(2)]
    pages = None
    for tp, op in ((2, "store"), (4, "load")):
        spec = HYBRID[model]["make"](tp)
        for rank in range(tp):
            raw, views = engine_buffer(model, tp, rank, page_of_block)
            given = {"raw page": raw, "state views": views, "states apart": [v.clone() for v in views]}[form]
            m = derive_canonical_mappings(state_config(tp, rank, HYBRID[model]["groups"]),
                                          cache_config([(spec, ["s"])], num_blocks=2), {"s": given},
                                          state_layers=True, gdn_recurrent="vk")["s"]  # vLLM 0.32's order
            assert m.parallelism_agnostic and [v.name for v in m.tensors] == ["conv", spec_state(model)]
            if pages is None:
                pages = torch.zeros(2, m.canonical_page_size_bytes, dtype=torch.uint8)
            if op == "store":
                plan(m, given).store(given, where, pages, [0, 1])
                continue
            expected = [v.clone() for v in views]
            assert all(v.count_nonzero() == v.numel() for v in (views[0].view(torch.int16), views[1].view(torch.int32)))
            for t in ([raw] if form == "raw page" else given):  # (every element of the engine's fill is a
                t.zero_()                                     # nonzero code: zeros left anywhere are caught)
            plan(m, given).load(pages, [0, 1], given, where)
            got = views if form != "states apart" else given
            for g, e, codes in zip(got, expected, (torch.int16, torch.int32)):  # (codes, not floats: no NaN)
                g, e = g.view(codes), e.view(codes)
                assert torch.equal(g, e), f"tp=4 rank {rank}: {int((g != e).sum())} elements differ"


def spec_state(model: str) -> str:
    return {"mamba2": "ssm", "gdn": "recurrent"}[model]


# ---- vLLM 0.32's mamba_type is an enum (tests/engine runs the same on vLLM's own objects) ----

class MambaAttentionBackendEnum(Enum):
    """Imitates vLLM 0.32's `vllm.v1.attention.backends.registry.MambaAttentionBackendEnum`: each
    member's value is the backend's class path, which a deployment may override."""
    MAMBA1 = "vllm.v1.attention.backends.mamba1_attn.Mamba1AttentionBackend"
    MAMBA2 = "vllm.v1.attention.backends.mamba2_attn.Mamba2AttentionBackend"
    GDN_ATTN = "vllm.v1.attention.backends.gdn_attn.GDNAttentionBackend"


@pytest.mark.parametrize("make,member", [(mamba2_spec, "MAMBA2"), (gdn_spec, "GDN_ATTN")])
def test_vllms_backend_enum_names_the_state_family(make, member):
    import dataclasses
    spec = dataclasses.replace(make(2), mamba_type=MambaAttentionBackendEnum[member])
    kv = cache_config([(spec, ["layers.0.mixer"])])
    by_enum = derive_canonical_mappings(state_config(2, 1), kv, {}, state_layers=True)["layers.0.mixer"]
    by_name = derive_canonical_mappings(state_config(2, 1), cache_config([(make(2), ["layers.0.mixer"])]), {},
                                        state_layers=True)["layers.0.mixer"]
    assert by_enum.parallelism_agnostic and by_enum == by_name


def test_a_backend_with_no_state_family_stays_opaque_and_says_why(caplog):
    import dataclasses
    from layoutalg.runtime.vllm import state_layer
    spec = dataclasses.replace(mamba2_spec(2), mamba_type=MambaAttentionBackendEnum.MAMBA1)
    layer, why = state_layer(spec, 2, state_config(2, 0).model_config)
    assert layer is None and "MAMBA1" in why and "GDN_ATTN" in why


def test_a_model_of_state_layers_alone_has_no_kv_heads():
    """vLLM gives `get_total_num_kv_heads() == 0` for a model with no attention layer."""
    c = state_config(2, 1)
    c.model_config.total_num_kv_heads = 0
    m = derive_canonical_mappings(c, cache_config([(mamba2_spec(2), ["m"])]), {}, state_layers=True)["m"]
    assert m.parallelism_agnostic


def test_the_old_import_path_is_the_adapter():
    import importlib
    old, new = importlib.import_module("layoutalg.vllm"), importlib.import_module("layoutalg.runtime.vllm")
    from layoutalg.vllm import STATE_KINDS, derive_canonical_mappings as old_derive
    assert old_derive is new.derive_canonical_mappings and STATE_KINDS is new.STATE_KINDS
    assert "state_layer" in dir(old) and old.state_layer is new.state_layer


def test_the_vllm_plugin_switched_off_touches_nothing(monkeypatch):
    """vLLM runs the plugin in every process; unset, it returns before importing vLLM (the engine
    job, `.ci/engine`, tests it switched on inside vLLM 0.32 itself)."""
    from layoutalg.runtime import vllm_plugin
    monkeypatch.delenv(vllm_plugin.SWITCH, raising=False)
    monkeypatch.setitem(sys.modules, "vllm", None)  # importing vllm would now raise
    assert vllm_plugin.register() is None
    assert not vllm_plugin.switched_on({"LAYOUTALG_VLLM": "0"}) and vllm_plugin.switched_on({"LAYOUTALG_VLLM": "on"})
    monkeypatch.setenv(vllm_plugin.SWITCH, "1")
    with pytest.raises(ImportError):
        vllm_plugin.register()  # (the control: switched on, it does import vLLM)

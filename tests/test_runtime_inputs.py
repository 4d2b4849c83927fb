"""Runtime inputs: every one gets a result or a clear `LayoutalgError`, never a wrong answer.

- a family, the fallback included, applies only where it holds exactly the layer's page;
  where not even the fallback does, the layer has no mapping (never a partial copy);
- parallel sizes below 1 and ranks outside the group are configuration errors;
- layer sizes that are integers but make no sense fail the layer closed;
- values that are not integers at all are errors naming the field and the value.
"""
from __future__ import annotations

import logging
import random
import re
import shutil
from fractions import Fraction
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest
import torch

from layoutalg import Deriver, LayerSpec, ParallelConfig, TensorLayout, derive_canonical_mappings
from layoutalg.errors import ConfigError, LayoutalgError
from layoutalg.mapping import CanonicalPageMapping

from conftest import ROOT
from test_vllm_adapter import (KVQuantMode, ModelConfig, ParallelConfig as VllmParallelConfig, VllmConfig,
                               attention, cache_config, config, mamba, split_nhd)

SPECS = ROOT / "specs"


class Library(NamedTuple):
    deriver: Deriver
    folder: str


KEPT = ("grids.lal", "split_nhd.lal", "opaque.lal")
"""What a library here holds: the grids, a family that reads a tensor and the fallback (the
shipped library's other families would only be compiled, and refuse these layers, too)."""


def library(tmp_path_factory, name: str, edits: dict[str, list[tuple[str, str]]]) -> Library:
    """A copy of the shipped specs `KEPT` with `edits` applied (file -> [(old, new)]), compiled without the cache."""
    folder = tmp_path_factory.mktemp(name)
    for f in KEPT:
        shutil.copy(SPECS / f, folder)
    for file, changes in edits.items():
        text = (folder / file).read_text()
        for old, new in changes:
            assert text.count(old) == 1, (file, old)
            text = text.replace(old, new)
        (folder / file).write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAYOUTALG_CACHE", "off")
        return Library(Deriver(str(folder)), str(folder))


@pytest.fixture(scope="module")
def half_page(tmp_path_factory):
    """The opaque fallback rewritten to hold half of each page."""
    return library(tmp_path_factory, "half_page", {"opaque.lal": [
        ("local     bytes(page_size)", "let half = page_size / 2\n    local     bytes(half)"),
        ("canonical bytes(page_size * tp * pcp)", "canonical bytes(half * tp * pcp)"),
        ("shard (b) -> (rank * page_size + b)", "shard (b) -> (rank * half + b)")]})


@pytest.fixture(scope="module")
def two_byte_split(tmp_path_factory):
    """split_nhd with its element fixed at 2 bytes, whatever the tensor's element size."""
    return library(tmp_path_factory, "two_byte_split", {"split_nhd.lal": [
        ("local     split_nhd(heads, block_size, head_size, dtype_bytes)",
         "local     split_nhd(heads, block_size, head_size, 2)"),
        ("canonical split_nhd(total_heads, block_size * cp, head_size, dtype_bytes)",
         "canonical split_nhd(total_heads, block_size * cp, head_size, 2)")]})



def covers_page_once(m: CanonicalPageMapping, page: int) -> bool:
    """The runs of `m` copy every byte of the local page [0, page) exactly once."""
    spans = sorted((lo, n) for r in m.runs for lo, _, n in r.triples())
    end = 0
    for lo, n in spans:
        if lo != end:
            return False
        end = lo + n
    return end == page == m.local_page_size_bytes


# --- every family, the fallback included, holds exactly the page -----------------------

def test_a_fallback_that_holds_half_the_page_gives_no_mapping(half_page):
    res = half_page.deriver.derive(LayerSpec("mamba", 1024), None, ParallelConfig(tp=2, total_kv_heads=2))
    assert (res.result, res.family, res.mappings) == ("no_mappings", None, ())
    assert res.reasons == ("opaque (fallback): layout holds 512 bytes but the page is 1024",)


def test_an_uncertified_attention_layer_with_that_fallback_has_no_mapping(half_page):
    res = half_page.deriver.derive(LayerSpec("attention", 8192, 16, 2, 64, 2), None, ParallelConfig(tp=2, total_kv_heads=4))
    assert res.result == "no_mappings" and res.mappings == ()
    assert "split_nhd: needs a KV tensor of 5 dimensions" in res.reasons
    # from its sizes alone: refused before the fallback, as families reading a tensor would hold it
    assert res.reasons[-1].startswith("derived from its sizes alone (no tensor)") and "split_nhd" in res.reasons[-1]


def test_the_adapter_leaves_such_a_layer_out_and_says_why(half_page, caplog):
    kv = cache_config([(mamba(), ["mamba"]), (attention(), ["attn"])])
    with caplog.at_level(logging.WARNING, logger="layoutalg"):
        out = derive_canonical_mappings(config(tp=2), kv, {"attn": split_nhd()}, specs=half_page.folder)
    assert set(out) == {"attn"}  # certified by split_nhd; the Mamba state has no mapping at all
    assert any("MambaSpec" in r.getMessage() and "layout holds" in r.getMessage() for r in caplog.records)


def test_a_family_reading_a_tensor_must_find_the_page_in_each_block(two_byte_split):
    t = torch.zeros(3, 2, 16, 2, 64, dtype=torch.float32)  # 16384 bytes a block; the spec says 2-byte elements
    layer = LayerSpec("attention", 8192, 16, 2, 64, 4)
    res = two_byte_split.deriver.derive(layer, TensorLayout.of(t), ParallelConfig(tp=2, total_kv_heads=4), 3)
    assert res.result == "opaque"
    assert "split_nhd: KV tensor holds 16384 bytes per block but the page is 8192" in res.reasons


# --- ranks --------------------------------------------------------------------------------

def one_layer():
    return cache_config([(attention(), ["attn"])]), {"attn": split_nhd()}


@pytest.mark.parametrize("rank", [-1, 2, 7])
def test_a_rank_outside_the_group_is_an_error(rank):
    with pytest.raises(ConfigError, match=rf"parallel_config.rank = {rank} is outside the worker group: "
                                          r"valid ranks are 0 to 1"):
        derive_canonical_mappings(config(tp=2, rank=rank), *one_layer())


@pytest.mark.parametrize("rank,shown", [("1", "'1' (str)"), (1.0, "1.0 (float)"), (True, "True (bool)"),
                                        (None, "None (NoneType)")])
def test_a_rank_that_is_not_an_integer_is_an_error(rank, shown):
    with pytest.raises(ConfigError, match=re.escape(f"parallel_config.rank must be an integer, got {shown}")):
        derive_canonical_mappings(config(tp=2, rank=rank), *one_layer())


@pytest.mark.parametrize("rank", [np.int64(1), torch.tensor(1)])
def test_integer_scalars_of_numpy_and_torch_are_ranks(rank):
    assert derive_canonical_mappings(config(tp=2, rank=rank), *one_layer()) == \
        derive_canonical_mappings(config(tp=2, rank=1), *one_layer())


# --- parallel sizes -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tensor_parallel_size", "prefill_context_parallel_size",
                                  "decode_context_parallel_size", "cp_kv_cache_interleave_size", "world_size"])
@pytest.mark.parametrize("value", [0, -2])
def test_parallel_sizes_below_one_are_errors(name, value):
    cfg = config(tp=2)
    setattr(cfg.parallel_config, name, value)
    with pytest.raises(ConfigError, match=rf"parallel_config.{name} must be an integer >= 1, got {value}"):
        derive_canonical_mappings(cfg, *one_layer())


@pytest.mark.parametrize("name", ["prefill_context_parallel_size", "decode_context_parallel_size",
                                  "cp_kv_cache_interleave_size"])
def test_a_missing_or_none_cp_size_means_one(name):
    expected = derive_canonical_mappings(config(tp=2), *one_layer())
    cfg = config(tp=2)
    setattr(cfg.parallel_config, name, None)
    assert derive_canonical_mappings(cfg, *one_layer()) == expected
    bare = SimpleNamespace(**{k: v for k, v in vars(config(tp=2).parallel_config).items() if k != name})
    assert derive_canonical_mappings(VllmConfig(bare, ModelConfig(4)), *one_layer()) == expected


def test_total_kv_heads_below_zero_is_an_error_and_none_leaves_attention_opaque(caplog):
    """vLLM gives 0 for a model of state layers alone; an attention layer then has no heads to be
    sharded by, and fails closed to the fallback (saying which name it lacks)."""
    with pytest.raises(ConfigError, match=r"get_total_num_kv_heads\(\) must be an integer >= 0, got -1"):
        derive_canonical_mappings(config(tp=2, total=-1), *one_layer())
    with caplog.at_level(logging.WARNING, logger="layoutalg"):
        out = derive_canonical_mappings(config(tp=2, total=0), *one_layer())
    assert not out["attn"].parallelism_agnostic and "'total_heads', which this layer does not give" in caplog.text


@pytest.mark.parametrize("field", ["tp", "total_kv_heads", "pcp", "dcp", "interleave", "world_size"])
def test_parallel_config_refuses_sizes_below_one(field):
    with pytest.raises(ConfigError, match=rf"ParallelConfig.{field} must be an integer >= 1, got 0"):
        ParallelConfig(**{"tp": 2, "total_kv_heads": 4, field: 0})


# --- layer sizes that are integers but make no sense ----------------------------------------

def test_a_zero_block_size_leaves_the_layer_out_and_says_why(caplog):
    kv = cache_config([(attention(block_size=0), ["empty"]), (attention(), ["attn"])])
    with caplog.at_level(logging.WARNING, logger="layoutalg"):
        out = derive_canonical_mappings(config(tp=2), kv, {"empty": split_nhd(block_size=0), "attn": split_nhd()})
    assert set(out) == {"attn"}  # vLLM's page of a zero-token block is 0 bytes: nothing to map
    assert any("the page is 0 bytes" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


@pytest.mark.parametrize("sizes", [dict(block_size=0), dict(block_size=-16), dict(num_kv_heads=0),
                                   dict(head_size=-64), dict(dtype_bytes=0)])
def test_nonsense_layer_sizes_with_a_real_page_get_the_fallback(deriver, sizes):
    layer = LayerSpec("attention", 8192, **{**dict(block_size=16, num_kv_heads=2, head_size=64, dtype_bytes=2),
                                            **sizes})
    res = deriver.derive(layer, None, ParallelConfig(tp=2, total_kv_heads=4))
    assert res.result == "opaque" and res.reasons
    assert all(covers_page_once(m, 8192) for m in res.mappings)


def test_mla_with_a_zero_block_size_fails_closed_with_the_reason(deriver):
    res = deriver.derive(LayerSpec("mla", 8192, 0, 1, 576, 2), None, ParallelConfig(tp=2, total_kv_heads=1))
    assert res.result == "opaque"
    assert any(r.startswith("mla: ") and "block_size = 0 is outside the proved domain" in r for r in res.reasons)


@pytest.mark.parametrize("page", [0, -1024])
def test_an_empty_or_negative_page_has_no_mapping(deriver, page):
    res = deriver.derive(LayerSpec("mamba", page), None, ParallelConfig(tp=2, total_kv_heads=2))
    assert (res.result, res.mappings) == ("no_mappings", ())
    assert res.reasons == (f"the page is {page} bytes: no family holds an empty or negative page",)


# --- values that are not integers -------------------------------------------------------------

NOT_INTEGERS = [("16", "'16' (str)"), (16.0, "16.0 (float)"), (True, "True (bool)"), (None, "None (NoneType)"),
                (Fraction(1, 2), "Fraction(1, 2) (Fraction)")]


@pytest.mark.parametrize("field", ["block_size", "num_kv_heads", "head_size", "dtype_bytes", "compress_ratio"])
@pytest.mark.parametrize("value,shown", NOT_INTEGERS)
def test_layer_spec_names_the_field_and_the_value(field, value, shown):
    with pytest.raises(ConfigError, match=re.escape(f"LayerSpec.{field} must be an integer, got {shown}")):
        LayerSpec("attention", 8192, **{field: value})


@pytest.mark.parametrize("value,shown", NOT_INTEGERS[:3])
def test_a_page_size_that_is_not_an_integer_is_an_error(value, shown):
    with pytest.raises(ConfigError, match=re.escape(f"LayerSpec.page_size_bytes must be an integer, got {shown}")):
        LayerSpec("mamba", value)


@pytest.mark.parametrize("field", ["tp", "total_kv_heads", "pcp", "dcp", "interleave", "world_size"])
@pytest.mark.parametrize("value,shown", NOT_INTEGERS[:3])
def test_parallel_config_names_the_field_and_the_value(field, value, shown):
    with pytest.raises(ConfigError, match=re.escape(f"ParallelConfig.{field} must be an integer, got {shown}")):
        ParallelConfig(**{"tp": 2, "total_kv_heads": 4, field: value})


def test_tensor_layout_is_checked():
    with pytest.raises(ConfigError, match=r"TensorLayout.shape\[1\] must be an integer, got 'a' \(str\)"):
        TensorLayout((3, "a"), (2, 1), 2)
    with pytest.raises(ConfigError, match=r"shape \(3, 2\) has 2 dimensions but stride \(2,\) has 1"):
        TensorLayout((3, 2), (2,), 2)
    with pytest.raises(ConfigError, match=r"TensorLayout.element_size must be an integer >= 1, got 0"):
        TensorLayout((3, 2), (2, 1), 0)
    with pytest.raises(ConfigError, match=r"TensorLayout.shape must be a sequence of integers, got 5"):
        TensorLayout(5, (1,), 2)


def test_integer_scalars_are_normalised_so_they_share_the_memo(deriver):
    plain = LayerSpec("attention", 8192, 16, 2, 64, 2)
    scalars = LayerSpec("attention", np.int64(8192), np.int32(16), torch.tensor(2), np.uint8(64), 2)
    assert scalars == plain and hash(scalars) == hash(plain)
    assert all(type(v) is int for v in (scalars.page_size_bytes, scalars.block_size, scalars.num_kv_heads))
    tensor = TensorLayout(torch.Size([3, 2, 16, 2, 64]), [4096, 2048, 128, 64, 1], np.int64(2))
    assert tensor == TensorLayout((3, 2, 16, 2, 64), (4096, 2048, 128, 64, 1), 2)
    par = ParallelConfig(tp=np.int64(2), total_kv_heads=4)
    assert deriver.derive(scalars, tensor, par, np.int64(3)) is deriver.derive(plain, tensor, par, 3)


@pytest.mark.parametrize("args,message", [
    (("layer", None, ParallelConfig(tp=2, total_kv_heads=4)), r"layer must be a LayerSpec, got str"),
    ((LayerSpec("mamba", 64), None, "tp=2"), r"parallel must be a ParallelConfig, got str"),
    ((LayerSpec("mamba", 64), (3, 64), ParallelConfig(tp=2, total_kv_heads=4)), r"tensor must be a TensorLayout"),
    ((LayerSpec("mamba", 64), None, ParallelConfig(tp=2, total_kv_heads=4), -1), r"num_blocks must be an integer "
                                                                                  r">= 0, got -1"),
    ((LayerSpec("mamba", 64), None, ParallelConfig(tp=2, total_kv_heads=4), 3.0), r"num_blocks must be an integer"),
])
def test_derive_checks_what_it_is_given(deriver, args, message):
    with pytest.raises(ConfigError, match=message):
        deriver.derive(*args)


@pytest.mark.parametrize("vllm_config,kv_cache_config,kv_caches,message", [
    (None, None, {}, r"vllm_config.parallel_config is missing \(NoneType has no 'parallel_config'\)"),
    (SimpleNamespace(parallel_config=VllmParallelConfig()), None, {}, r"vllm_config.model_config is missing"),
    (config(), None, {}, r"kv_cache_config.num_blocks is missing"),
    (config(), SimpleNamespace(num_blocks=3), {}, r"kv_cache_config.kv_cache_groups is missing"),
    (config(), SimpleNamespace(num_blocks="3", kv_cache_groups=[]), {}, r"kv_cache_config.num_blocks must be an "
                                                                         r"integer, got '3' \(str\)"),
    (config(), SimpleNamespace(num_blocks=3, kv_cache_groups=7), {}, r"kv_cache_groups must be a list, got int"),
    (config(), cache_config([(attention(), ["a"])]), None, r"kv_caches must be a dict"),
    (config(), SimpleNamespace(num_blocks=3, kv_cache_groups=[SimpleNamespace(kv_cache_spec=attention())]), {},
     r"kv_cache_groups\[0\].layer_names is missing"),
    (config(), cache_config([(attention(), [3])]), {}, r"layer_names holds 3 \(int\), not a layer name"),
])
def test_the_adapter_names_what_is_missing_or_malformed(vllm_config, kv_cache_config, kv_caches, message):
    with pytest.raises(ConfigError, match=message):
        derive_canonical_mappings(vllm_config, kv_cache_config, kv_caches)


def duck(*names: str, **fields):
    """A duck-typed spec: a class hierarchy with vLLM's class `names` (base first) and plain fields."""
    cls = SimpleNamespace
    for name in names:
        cls = type(name, (cls,), {})
    return cls(**fields)


def test_a_spec_field_that_is_not_an_integer_names_the_layer_and_field():
    spec = duck("AttentionSpec", block_size="16", num_kv_heads=2, head_size=64, dtype=torch.bfloat16,
                real_page_size_bytes=8192)
    with pytest.raises(ConfigError, match=r"layer 'attn' \(AttentionSpec\): kv_cache_spec.block_size must be an "
                                          r"integer, got '16' \(str\)"):
        derive_canonical_mappings(config(tp=2), cache_config([(spec, ["attn"])]), {})


def test_a_float_tokens_per_state_is_an_error():
    spec = duck("AttentionSpec", "MLAAttentionSpec", block_size=16, num_kv_heads=1, head_size=576,
                dtype=torch.bfloat16, tokens_per_state=2.0, real_page_size_bytes=8 * 1152)
    with pytest.raises(ConfigError, match=r"tokens_per_state must be an integer, got 2.0 \(float\)"):
        derive_canonical_mappings(config(tp=2, total=1), cache_config([(spec, ["m"])]), {})


# --- fuzzing: a result or a LayoutalgError, and a result never copies part of a page -----------

def test_derive_on_random_sizes(deriver):
    rng = random.Random(20261130)

    def size():
        return rng.choice([-3, -1, 0, 1, 1, 2, 2, 3, 4, 5, 8, 16])

    kinds = {"certified": 0, "opaque": 0, "no_mappings": 0, "omitted": 0}
    for _ in range(1500):
        bs, h, d, e = size(), size(), size(), rng.choice([1, 2, 4, 0, -1])
        page = rng.choice([None, 2 * bs * h * d * abs(e), bs * d * abs(e), 64 * size(), 0])
        shape = tuple(size() for _ in range(rng.choice([3, 4, 5])))
        tp, pcp = rng.choice([1, 2, 3, 4, 8]), rng.choice([1, 1, 2])
        try:  # a negative extent or stride is refused where the TensorLayout is built
            layer = LayerSpec(rng.choice(["attention", "mla", "mamba"]), page, bs, h, d, e, rng.random() < 0.1,
                              rng.choice([1, 1, 2, 0, -1]))
            tensor = rng.choice([None, TensorLayout(shape, tuple(size() for _ in shape), rng.choice([1, 2, 4])),
                                 TensorLayout((3, 2, bs, h, d), (0, bs * h * d, h * d, d, 1), max(e, 1))])
            par = ParallelConfig(tp=tp, pcp=pcp, total_kv_heads=rng.choice([1, 2, 4, 8, 3]),
                                 dcp=rng.choice([1, 1, 2, 4]), interleave=rng.choice([1, 2, 3, 16]),
                                 world_size=rng.choice([None, tp * pcp, 3]))
        except ConfigError:
            continue
        res = deriver.derive(layer, tensor, par, rng.choice([None, 3, 0]))  # checked inputs: a result, always
        kinds[res.result] += 1
        assert (res.result in ("certified", "opaque")) == bool(res.mappings)
        assert all(covers_page_once(m, layer.page_size_bytes) for m in res.mappings), (layer, tensor, par, res)
    assert min(kinds.values()) > 0, kinds  # the sample reaches every outcome


def test_derive_canonical_mappings_on_random_configs():
    """Fields drawn from integers, nonsense integers and non-integers; some attributes missing."""
    rng = random.Random(20261201)
    odd = ["2", 2.0, True, None, Fraction(1, 2), np.int64(2), object()]

    def value(good):
        r = rng.random()
        return good if r < 0.9 else rng.choice([0, -1, 3]) if r < 0.95 else rng.choice(odd)

    def maybe_drop(obj):
        if rng.random() < 0.05:
            fields = vars(obj)
            fields.pop(rng.choice(sorted(fields)))
        return obj

    results = errors = 0
    for _ in range(400):
        tp = rng.choice([1, 2, 4])
        parallel = maybe_drop(SimpleNamespace(
            tensor_parallel_size=value(tp), prefill_context_parallel_size=value(1),
            decode_context_parallel_size=value(rng.choice([1, 2])), cp_kv_cache_interleave_size=value(1),
            world_size=value(tp), rank=value(rng.randrange(tp))))
        model = SimpleNamespace(get_total_num_kv_heads=lambda v=value(4): v)
        bs, heads = value(16), value(max(1, 4 // tp))
        specs = [attention(block_size=16, heads=max(1, 4 // tp)), mamba(),
                 maybe_drop(duck("AttentionSpec", "MLAAttentionSpec", block_size=bs, num_kv_heads=1,
                                 head_size=576, dtype=torch.bfloat16, tokens_per_state=value(1),
                                 real_page_size_bytes=value(16 * 1152))),
                 maybe_drop(duck("AttentionSpec", block_size=bs, num_kv_heads=heads, head_size=value(64),
                                 dtype=torch.bfloat16, real_page_size_bytes=value(2 * 16 * max(1, 4 // tp) * 64 * 2),
                                 kv_quant_mode=rng.choice([KVQuantMode.NONE, KVQuantMode.INT8_PER_TOKEN_HEAD])))]
        names = [f"l{i}" for i in range(len(specs))]
        caches = {n: rng.choice([split_nhd(heads=max(1, 4 // tp)), None, torch.zeros(3, 8)]) for n in names}
        kv = SimpleNamespace(num_blocks=value(3), kv_cache_groups=[
            SimpleNamespace(kv_cache_spec=s, layer_names=[n]) for s, n in zip(specs, names)])
        try:
            out = derive_canonical_mappings(SimpleNamespace(parallel_config=parallel, model_config=model), kv, caches)
        except LayoutalgError:
            errors += 1
            continue
        results += 1
        assert set(out) <= set(names)
        for m in out.values():
            assert covers_page_once(m, m.local_page_size_bytes) and m.local_page_size_bytes > 0
    assert results > 100 and errors > 100, (results, errors)


@pytest.mark.parametrize("args, message", [
    (({}, None, ParallelConfig(1, 1)), "layer must be a LayerSpec, got dict"),
    ((LayerSpec("attention", 64), None, ParallelConfig(1, 1), [3]), r"num_blocks must be an integer, got \[3\]"),
    ((LayerSpec("attention", 64), [1], ParallelConfig(1, 1)), "tensor must be a TensorLayout"),
])
def test_unhashable_arguments_are_named_not_a_traceback(args, message):
    from layoutalg.errors import ConfigError
    with pytest.raises(ConfigError, match=message):
        Deriver().derive(*args)


def test_a_layer_missing_a_name_every_family_of_its_kind_reads_is_a_config_error():
    import pytest
    from layoutalg.errors import ConfigError, MissingNames
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    sizes = {"ssm_heads": 8, "ssm_head_dim": 4, "state_size": 16, "conv_kernel": 4, "conv_bytes": 2, "ssm_bytes": 4}
    par = ParallelConfig(tp=2, total_kv_heads=1)
    with pytest.raises(MissingNames, match="a 'mamba2' layer must give 'n_groups'") as e:
        Deriver().derive(LayerSpec("mamba2", 4096, sizes=sizes), None, par, 4)
    assert isinstance(e.value, ConfigError)
    # the engine's adapter asks for the fallback instead: stored opaque, the reason kept
    res = Deriver().derive(LayerSpec("mamba2", 4096, sizes=sizes), None, par, 4, strict=False)
    assert res.result == "opaque" and any("'n_groups'" in r for r in res.reasons)
    # the control: given the name, the family holds the layer (no error for a layer it can read)
    page = 3 * (4 * 4 + 2 * 16) * 2 + 4 * 4 * 16 * 4  # a rank: 4 heads of 4, one group of 16 copied
    ok = Deriver().derive(LayerSpec("mamba2", page, sizes={**sizes, "n_groups": 1}), None, par, 4)
    assert ok.result == "certified", ok.reasons


def test_a_state_layer_needs_no_attention_fields_and_an_attention_layer_is_told_what_it_lacks():
    import pytest
    from layoutalg.errors import MissingNames
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout
    sizes = {"ssm_heads": 8, "ssm_head_dim": 4, "state_size": 16, "conv_kernel": 4, "conv_bytes": 2, "ssm_bytes": 4,
             "n_groups": 1}
    page = 3 * (4 * 4 + 2 * 16) * 2 + 4 * 4 * 16 * 4
    state = Deriver().derive(LayerSpec("mamba2", page, sizes=sizes), None, ParallelConfig(tp=2), 4)
    assert state.result == "certified", state.reasons
    layer, t = LayerSpec("attention", 2 * 16 * 128 * 2, 16, 1, 128, 2), TensorLayout((4, 2, 16, 1, 128),
                                                                                  (4096, 2048, 128, 128, 1), 2)
    with pytest.raises(MissingNames, match=r"ParallelConfig.total_kv_heads \(the KV heads of the whole model\) is "
                                           r"not given, and a 'attention' layer needs it: families .*split_nhd"):
        Deriver().derive(layer, t, ParallelConfig(tp=2), 4)
    assert Deriver().derive(layer, t, ParallelConfig(tp=2, total_kv_heads=2), 4).family == "split_nhd"  # the control

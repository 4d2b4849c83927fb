"""The whole-model entry point, shaped like vLLM's `derive_canonical_mappings`.

Accepts vLLM's config objects or anything with the same attributes (duck typing, as
vLLM's own unit tests build them with mocks); imports nothing from vLLM.
"""
from __future__ import annotations

import logging

from .mapping import CanonicalPageMapping
from .runtime import Deriver, LayerSpec, ParallelConfig, TensorLayout

_DERIVERS: dict = {}
_log = logging.getLogger("layoutalg")


def _deriver(specs) -> Deriver:
    key = str(specs) if specs else None
    if key not in _DERIVERS:
        _DERIVERS[key] = Deriver(key)
    return _DERIVERS[key]


def _class_names(obj) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def _page_size(spec) -> int | None:
    for attr in ("real_page_size_bytes", "page_size_bytes"):
        try:
            value = getattr(spec, attr)
        except Exception:  # noqa: BLE001 - some specs raise for sizes they do not know
            continue
        if isinstance(value, int):
            return value
    return None


def layer_spec(spec) -> LayerSpec:
    """A `LayerSpec` from a vLLM KV cache spec (AttentionSpec, MLAAttentionSpec, MambaSpec, ...)."""
    names = _class_names(spec)
    kind = "mla" if "MLAAttentionSpec" in names else "attention" if "AttentionSpec" in names else "opaque"
    page = _page_size(spec)
    if kind == "opaque":
        return LayerSpec("opaque", page)
    dtype = getattr(spec, "dtype", None)
    dtype_bytes = getattr(dtype, "itemsize", None) or getattr(spec, "dtype_bytes", 0) or 0
    quant = getattr(spec, "kv_quant_mode", None)
    return LayerSpec(kind, page, block_size=spec.block_size, num_kv_heads=spec.num_kv_heads,
                     head_size=spec.head_size, dtype_bytes=int(dtype_bytes),
                     per_token_head_quant=bool(getattr(quant, "is_per_token_head", False)),
                     compress_ratio=getattr(spec, "compress_ratio", 1) or 1)


def parallel_config(vllm_config) -> ParallelConfig:
    pc = vllm_config.parallel_config
    return ParallelConfig(
        tp=pc.tensor_parallel_size, total_kv_heads=vllm_config.model_config.get_total_num_kv_heads(),
        pcp=getattr(pc, "prefill_context_parallel_size", 1) or 1,
        dcp=getattr(pc, "decode_context_parallel_size", 1) or 1,
        interleave=getattr(pc, "cp_kv_cache_interleave_size", 1) or 1, world_size=pc.world_size)


def derive_canonical_mappings(vllm_config, kv_cache_config, kv_caches: dict,
                              specs=None) -> dict[str, CanonicalPageMapping]:
    """This worker's canonical page mapping of every layer.

    Empty when the worker group is not exactly the tp x pcp grid; a layer is absent when
    no family certifies it and its page size is unknown. Layers no family certifies get
    the opaque fallback. `specs` names another spec library (default: the shipped one).
    """
    deriver = _deriver(specs)
    parallel = parallel_config(vllm_config)
    if parallel.world_size != parallel.tp * parallel.pcp:
        return {}
    rank = vllm_config.parallel_config.rank
    num_blocks = kv_cache_config.num_blocks
    out: dict[str, CanonicalPageMapping] = {}
    for group in kv_cache_config.kv_cache_groups:
        group_spec = group.kv_cache_spec
        per_layer = getattr(group_spec, "kv_cache_specs", None) or {}
        for name in group.layer_names:
            layer = layer_spec(per_layer.get(name, group_spec))
            tensor = TensorLayout.of(kv_caches.get(name))
            result = deriver.derive(layer, tensor, parallel, num_blocks)
            if result.result != "certified":
                _log.info("layer %s: %s (%s)", name, result.result, "; ".join(result.reasons) or "no family")
            if result.mappings:
                out[name] = result.mappings[rank]
    return out

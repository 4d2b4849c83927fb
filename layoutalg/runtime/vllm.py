"""The whole-model entry point, shaped like vLLM's `derive_canonical_mappings`.

Accepts vLLM's config objects or anything with the same attributes (duck typing, as
vLLM's own unit tests build them with mocks); imports nothing from vLLM. A spec's layer
kind is read from a table (`SPEC_KINDS`: spec class name -> kind), matched along its class
hierarchy nearest class first, as vLLM's `isinstance` tells them apart; a deployment whose
specs are classes of its own passes `kinds` to extend it:

- `MLAAttentionSpec` (and subclasses): the `mla` families;
- any other `AttentionSpec`: the `attention` families;
- `MambaSpec`: the opaque fallback, as vLLM's reference does; with `state_layers=True`,
  the state families by `mamba_type` (`STATE_KINDS`: `mamba2`, `gdn_attention`), their
  sizes read from the spec's shapes and dtypes (and `n_groups` from the model's config);
- anything else (e.g. `HiSparseHotSpec`, or a `UniformTypeKVCacheSpecs` group spec that
  has no entry for the layer): left out, as vLLM leaves it out.

Malformed input (a config object without a field, a size that is not an integer, a rank
outside the group) raises `ConfigError` naming the field and the value received.
"""
from __future__ import annotations

import dataclasses
import logging
import numbers
import os
from math import prod
from pathlib import Path

from ..errors import ConfigError
from ..mapping import CanonicalPageMapping
from ..record import replace
from ..verdicts import Check, Reason
from .derive import Deriver
from .records import LayerResult, LayerSpec, Outcome, ParallelConfig, TensorLayout, as_int

_DERIVERS: dict = {}
_log = logging.getLogger("layoutalg")
_MISSING = object()

# A non-integral tokens_per_state (a Fraction such as 1/2: several states per token) has no integer form. Any
# value but 1 fails the MLA family's `compress_ratio == 1` guard; this one also reads as "not one state per token".
_NON_INTEGRAL_RATIO = 2


def _deriver(specs) -> Deriver:
    key = str(Path(specs).resolve()) if specs else None  # a relative path means another folder after a chdir
    if key not in _DERIVERS:
        _DERIVERS[key] = Deriver(key)
    return _DERIVERS[key]


SPEC_KINDS = {"MLAAttentionSpec": "mla", "AttentionSpec": "attention", "MambaSpec": "mamba"}
"""vLLM KV cache spec class -> the layer kind its layers are: how their fields are read
(attention and mla: block size, heads, head size, dtype, quantisation; mamba: the state's
shapes and dtypes) and which families may serve them. Any other class is left out."""

ENGINE_LAYERS = {"DeepseekV32IndexerCache": "dsa_indexer"}
"""vLLM layer class -> the layer kind it is where its spec class says otherwise, read from the
layer's entry in `compilation_config.static_forward_context` along its class hierarchy
(GLM-5's indexer cache subclasses DeepSeek's). The sparse-attention indexer's key cache is an
`MLAAttentionSpec` of uint8 rows, but a block holds every token's fp8 values and then every
token's fp32 scales, not MLA's latent rows (`specs/dsa_indexer.lal`). Its fields are read as
an MLA spec's."""

LAYER_SUFFIXES = {".indexer.k_cache": "dsa_indexer"}
"""Layer-name endings that say the same where the engine's layer objects are not at hand (vLLM
names the indexer's cache `<attention prefix>.indexer.k_cache`)."""

READERS = ("attention", "mla", "mamba")
_EVERY_SPEC = ("object", "KVCacheSpec")  # classes every spec is: a kind for them is a kind for all


def spec_kind(spec, kinds: dict | None = None) -> str:
    """The kind of the nearest class of `spec`'s hierarchy the table names, else "other".

    Examples:
        (with vLLM's classes, or mocks of those names)
        spec_kind(MLAAttentionSpec(...)) == "mla"        # an AttentionSpec too: the nearest wins
        spec_kind(FullAttentionSpec(...)) == "attention"
        spec_kind(HiSparseHotSpec(...)) == "other"
    """
    table = {**SPEC_KINDS, **_kinds(kinds)}
    cls = getattr(spec, "__class__", type(spec))  # as isinstance reads it: a mock's spec class too
    return next((table[c.__name__] for c in cls.__mro__ if c.__name__ in table), "other")


def _kinds(kinds) -> dict:
    """`kinds` checked: class names to kinds this adapter can read."""
    if kinds is None:
        return {}
    if not isinstance(kinds, dict):
        raise ConfigError(f"kinds must be a dict of spec class name to layer kind, got {type(kinds).__name__}")
    for cls, kind in kinds.items():
        if not isinstance(cls, str) or kind not in READERS:
            raise ConfigError(f"kinds[{cls!r}] = {kind!r}: a spec class name must map to one of "
                              f"{', '.join(READERS)} (how its fields are read)")
        if cls in _EVERY_SPEC:
            raise ConfigError(f"kinds[{cls!r}]: every spec is a {cls}, so this would read every layer (sparse "
                              f"and group specs too) as {kind}; name the spec's own class")
    return dict(kinds)


def _field(obj, path: str, name: str, default=_MISSING):
    """`obj.name`, or `ConfigError` naming `path.name` when it is missing (and has no default)."""
    try:
        return getattr(obj, name)
    except (AttributeError, NotImplementedError):  # vLLM's base KVCacheSpec raises for what it does not know
        if default is _MISSING:
            raise ConfigError(f"{path}.{name} is missing ({type(obj).__name__} has no '{name}')") from None
        return default


def _page_size(spec, kind: str, path: str) -> int | None:
    """The unpadded page, as vLLM's canonical mapping reads it; None where vLLM has none."""
    if kind in ("attention", "mla"):
        for attr in ("unpadded_page_size_bytes", "real_page_size_bytes", "page_size_bytes"):
            value = _field(spec, path, attr, None)
            if value is not None:
                return as_int(value, f"{path}.{attr}")
        return None
    if kind == "mamba":
        if _field(spec, path, "page_size_padded", None) is not None and dataclasses.is_dataclass(spec):
            try:
                spec = dataclasses.replace(spec, page_size_padded=None)  # the state itself, not its padding
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{path}: cannot read the unpadded page of a {type(spec).__name__}: {e}") from None
        value = _field(spec, path, "page_size_bytes", None)
        return None if value is None else as_int(value, f"{path}.page_size_bytes")
    return None


def _compress_ratio(spec, path: str) -> int:
    """Tokens per stored state: vLLM 0.32's `tokens_per_state`, older versions' `compress_ratio`."""
    for attr in ("tokens_per_state", "compress_ratio"):
        value = _field(spec, path, attr, None)
        if value is not None:
            break
    else:
        return 1
    if isinstance(value, numbers.Rational) and not isinstance(value, numbers.Integral):  # a Fraction
        return int(value) if value.denominator == 1 else _NON_INTEGRAL_RATIO
    return as_int(value, f"{path}.{attr}")


def _dtype_bytes(spec, path: str) -> int:
    itemsize = getattr(_field(spec, path, "dtype", None), "itemsize", None)
    value = itemsize if itemsize is not None else _field(spec, path, "dtype_bytes", 0)
    return as_int(value, f"{path}.dtype")


def engine_kind(vllm_config, name: str) -> str | None:
    """The kind the engine says layer `name` is, or None: by its layer object where the engine's
    context holds one (`ENGINE_LAYERS`), else by its name (`LAYER_SUFFIXES`)."""
    context = getattr(getattr(vllm_config, "compilation_config", None), "static_forward_context", None)
    layer = context.get(name) if isinstance(context, dict) else None
    if layer is not None:  # the engine's own layer says, whatever its name
        return next((ENGINE_LAYERS[c.__name__] for c in type(layer).__mro__ if c.__name__ in ENGINE_LAYERS), None)
    return next((kind for end, kind in LAYER_SUFFIXES.items() if name.endswith(end)), None)


CPU_ATTN = "cpu_attn_layout"
"""The name a layer says vLLM's CPU attention backend with (`specs/grids.lal`): its tensor has packed HND's
shape, but its vec kernels' cache write stores a head's K dim-major, then its V (`specs/cpu_attn.lal`, 1); AMX,
Arm and fp8 KV tile a block otherwise (2: no family but the fallback). Any other backend: 0, as a silent layer."""

CPU_ATTN_ISAS = ("vec", "vec16")
"""The CPU backend's kernels (`layer.isa`) whose cache write `specs/cpu_attn.lal` describes, each
seen through vLLM 0.32's own op (tests/engine/test_conform_vllm.py)."""


def backend_name(backend) -> str | None:
    """vLLM's name of an attention backend: an `AttentionBackendEnum` member's name (never its
    value, a class path a deployment may override), a backend class's `get_name()`, or a string.

    Examples:
        >>> import enum
        >>> backend_name(enum.Enum("E", {"CPU_ATTN": "x.CPUAttentionBackend"}).CPU_ATTN), backend_name(None)
        ('CPU_ATTN', None)
    """
    if isinstance(backend, str) or backend is None:
        return backend
    if hasattr(type(backend), "__members__"):
        name = getattr(backend, "name", None)
    else:
        get = getattr(backend, "get_name", None)
        try:
            name = get() if callable(get) else None
        except Exception:  # (a backend that cannot name itself names no family)
            name = None
    return name if isinstance(name, str) else None


def cpu_attn_layout(vllm_config, name: str, spec, path: str = "kv_cache_spec", unseen=None) -> tuple[int, Reason | None]:
    """(the `cpu_attn_layout` of attention layer `name`, why a CPU layer is no family's): 0 unless
    its layer object's backend (`attn_backend`; `unseen`, where this process holds no layer
    object of that name) is vLLM's CPU_ATTN; then 1 where the kernel vLLM chose for it
    (`layer.isa`, set by the backend's metadata builder, else the backend's own `_get_attn_isa`
    of the layer's dtype, block size, head size and cache dtype) is one of `CPU_ATTN_ISAS` and
    the cache holds no fp8, else 2."""
    context = getattr(getattr(vllm_config, "compilation_config", None), "static_forward_context", None)
    layer = context.get(name) if isinstance(context, dict) else None
    backend = getattr(layer, "attn_backend", None) if layer is not None else unseen
    if backend_name(backend) != "CPU_ATTN":
        return 0, None
    cache = getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", "auto")
    isa = getattr(layer, "isa", None)
    if isa is None:
        import sys
        # the chooser of the backend's module, or of a class it derives from: a backend vLLM subclasses
        # (`subclass_attention_backend`, made by `type`, its module `abc`) has none of its own
        choose = next((f for k in getattr(backend, "__mro__", (backend,))
                       for f in [getattr(sys.modules.get(getattr(k, "__module__", "")), "_get_attn_isa", None)]
                       if callable(f)), None)
        try:
            isa = choose(_field(spec, path, "dtype"), _field(spec, path, "block_size"),
                         _field(spec, path, "head_size"), cache) if callable(choose) else None
        except Exception as e:  # vLLM refuses the layer itself (fp8 without AVX-512): no kernel, no layout
            return 2, Reason(Check.KERNEL, f"vLLM's CPU attention backend chooses no kernel for this layer: {e}")
    if str(cache).startswith("fp8") or isa not in CPU_ATTN_ISAS:
        return 2, Reason(Check.KERNEL, f"vLLM's CPU attention backend with kernel {isa!r} and cache dtype {cache!r}: "
                         f"its blocks are not the layout of its {'/'.join(CPU_ATTN_ISAS)} kernels with an unquantised "
                         f"cache (specs/cpu_attn.lal)")
    return 1, None


def layer_spec(spec, path: str = "kv_cache_spec", kinds: dict | None = None, engine: str | None = None) -> LayerSpec:
    """A `LayerSpec` from a vLLM KV cache spec (AttentionSpec, MLAAttentionSpec, MambaSpec, ...),
    its kind by `spec_kind`, or `engine`'s where the engine names the layer's kind (its fields
    read as an MLA spec's). A spec vLLM gives no mapping gets `page_size_bytes=None` (the
    layer is omitted).
    """
    kind = spec_kind(spec, kinds)
    if engine is not None and kind in ("mla", "attention"):
        kind = engine
    page = _page_size(spec, "mla" if kind == engine else kind, path)
    if kind not in ("mla", "attention") and kind != engine:
        return LayerSpec(kind, page)
    quant = _field(spec, path, "kv_quant_mode", None)
    return LayerSpec(kind, page,
                     block_size=as_int(_field(spec, path, "block_size"), f"{path}.block_size"),
                     num_kv_heads=as_int(_field(spec, path, "num_kv_heads"), f"{path}.num_kv_heads"),
                     head_size=as_int(_field(spec, path, "head_size"), f"{path}.head_size"),
                     dtype_bytes=_dtype_bytes(spec, path),
                     per_token_head_quant=bool(getattr(quant, "is_per_token_head", False)),
                     compress_ratio=_compress_ratio(spec, path))


def _mamba2_sizes(shapes, tp: int, model) -> dict:
    """Mamba2 (kernel-first conv state): ((K - 1, x + 2 G N), (heads, head_dim, N)) on this rank."""
    (k1, width), (heads, head_dim, n) = shapes
    groups = getattr(getattr(model, "hf_config", None), "n_groups", None)
    if groups is None:
        raise ValueError("the model config gives no n_groups (hf_config.n_groups)")
    groups = as_int(groups, "vllm_config.model_config.hf_config.n_groups", minimum=1)
    # the conv width must be what those groups make on a rank (vLLM's extra_groups_for_head_shards):
    # a model config that disagrees with the spec's shapes is not guessed around
    here = groups // tp if groups % tp == 0 else 1 if tp % groups == 0 else None
    if here is None or width != heads * head_dim + 2 * here * n:
        raise ValueError(f"conv width {width} is not {heads} x {head_dim} + 2 x {here} groups x {n} for "
                         f"hf_config.n_groups = {groups} at tp = {tp}")
    return {"conv_kernel": k1 + 1, "ssm_heads": heads * tp, "ssm_head_dim": head_dim, "state_size": n,
            "n_groups": groups}


GDN_ORDERS = ("vk", "kv")
"""How a gated delta net's recurrent state orders its dims after the value heads: `vk`, (value
dim, key dim), as vLLM 0.32 and the `gdn` family read it; `kv`, the order of vLLM versions
before it (no shipped family reads it)."""


def _gdn_sizes(shapes, tp: int, model, order: str | None = None) -> dict:
    """Gated delta net: ((K - 1, 2 Hk dk + Hv dv), (Hv, dv, dk)) on this rank. Where the key
    and value dims are one size the shapes cannot say which is which: `order` must."""
    (k1, width), (v_heads, v_dim, k_dim) = shapes
    if order == "kv":
        raise ValueError("the recurrent state is (value heads, key dim, value dim) (gdn_recurrent='kv'), an order "
                         "no shipped family reads")
    if order is None and v_dim == k_dim:
        raise ValueError(f"the recurrent state {shapes[1]} has key and value dims of one size, so its shape does "
                         f"not say which is which (vLLM swapped them between versions): pass "
                         f"gdn_recurrent='vk' (value dim, then key dim: vLLM 0.32) or 'kv'")
    hf = getattr(model, "hf_config", None)
    for attr, have in (("linear_value_head_dim", v_dim), ("linear_key_head_dim", k_dim)):
        want = getattr(hf, attr, None)  # (heads, value dim, key dim) as vLLM's newer shapes; older ones swap them
        if want is not None and want != have:
            raise ValueError(f"the recurrent state {shapes[1]} is not (value heads, {attr} = {want}, ...): "
                             f"its dims are in another order than the gdn family reads")
    if k_dim < 1:  # (a divisor of the conv width below)
        raise ValueError(f"the recurrent state {shapes[1]} has key dim {k_dim}: no key channels to read the conv "
                         f"width {width} by")
    k_heads, rest = divmod(width - v_heads * v_dim, 2 * k_dim)
    if rest or k_heads < 1:
        raise ValueError(f"conv width {width} is not 2 x key heads x {k_dim} + {v_heads} x {v_dim}")
    return {"conv_kernel": k1 + 1, "gdn_k_heads": k_heads * tp, "gdn_v_heads": v_heads * tp,
            "gdn_k_dim": k_dim, "gdn_v_dim": v_dim}


STATE_KINDS = {"mamba2": _mamba2_sizes, "gdn_attention": _gdn_sizes}
"""vLLM `MambaSpec.mamba_type` -> how that state's runtime names read from its shapes: the
layer kind is the type's own name (`specs/mamba2.lal`, `specs/gdn.lal`). The conv state is
read kernel-first ("SD", vLLM's default) or dim-first ("DS") as VLLM_SSM_CONV_STATE_LAYOUT
says, and `conv_dim_first` selects the family of that page format."""


STATE_BACKENDS = {"MAMBA2": "mamba2", "GDN_ATTN": "gdn_attention"}
"""vLLM's `MambaAttentionBackendEnum` member name -> the state kind (`STATE_KINDS`): vLLM 0.32's
`MambaSpec.mamba_type` is that enum, earlier versions gave the kind's own string."""


def state_kind(mamba_type) -> str | None:
    """The state kind a `MambaSpec.mamba_type` names: the string itself, or an enum member read
    by its name (never by its value, a backend class path that a deployment may override);
    None for anything else.

    Examples:
        >>> import enum
        >>> state_kind("mamba2"), state_kind(enum.Enum("E", {"GDN_ATTN": "x.GDNBackend"}).GDN_ATTN)
        ('mamba2', 'gdn_attention')
        >>> state_kind(enum.Enum("E", {"MAMBA1": "x"}).MAMBA1) is None
        True
    """
    if isinstance(mamba_type, str):
        return mamba_type
    name = getattr(mamba_type, "name", None)
    return STATE_BACKENDS.get(name) if isinstance(name, str) and hasattr(type(mamba_type), "__members__") else None


def state_layer(spec, tp: int, model, path: str = "kv_cache_spec",
                gdn_recurrent: str | None = None) -> tuple[LayerSpec | None, Reason | None]:
    """The state family's `LayerSpec` of a `MambaSpec`, or (None, why it stays opaque)."""
    given = _field(spec, path, "mamba_type", None)
    mamba_type = state_kind(given)
    read = STATE_KINDS.get(mamba_type)
    if read is None:
        return None, Reason(Check.LIBRARY, f"mamba_type {given!r} has no state family (known: "
                            f"{', '.join(STATE_KINDS)}, or vLLM's MambaAttentionBackendEnum {', '.join(STATE_BACKENDS)})")
    layout = os.environ.get("VLLM_SSM_CONV_STATE_LAYOUT", "SD").upper()  # as vLLM's is_conv_state_dim_first
    if layout not in ("SD", "DS"):
        return None, Reason(Check.KERNEL, f"VLLM_SSM_CONV_STATE_LAYOUT is {layout!r}, neither SD nor DS")
    shapes, dtypes = _field(spec, path, "shapes"), _field(spec, path, "dtypes")
    try:
        shapes = tuple(tuple(as_int(x, f"{path}.shapes") for x in s) for s in shapes)
        if len(shapes) != 2 or len(shapes[0]) != 2 or len(shapes[1]) != 3 or len(dtypes) != 2:
            raise ValueError(f"shapes {shapes} are not a (conv, state) pair of 2 and 3 dimensions")
        if layout == "DS":  # (channels, K - 1): read as (K - 1, channels), laid out dim-first
            shapes = (shapes[0][::-1], shapes[1])
        sizes = read(shapes, tp, model, gdn_recurrent) if read is _gdn_sizes else read(shapes, tp, model)
        sizes["conv_dim_first"] = int(layout == "DS")
        sizes.update(conv_bytes=as_int(dtypes[0].itemsize, f"{path}.dtypes[0]"),
                     ssm_bytes=as_int(dtypes[1].itemsize, f"{path}.dtypes[1]"))
    except (ValueError, TypeError, AttributeError, ConfigError) as e:
        return None, Reason(Check.TENSOR, f"{mamba_type} state not read from its spec: {e}")
    return LayerSpec(mamba_type, _page_size(spec, "mamba", path), sizes=sizes), None


def _size(pc, name: str, default=_MISSING) -> int:
    """A parallel size: missing or None means `default`; anything else must be an integer >= 1."""
    value = _field(pc, "parallel_config", name, default)
    if value is None and default is not _MISSING:
        value = default
    return as_int(value, f"parallel_config.{name}", minimum=1)


def parallel_config(vllm_config) -> ParallelConfig:
    pc = _field(vllm_config, "vllm_config", "parallel_config")
    model = _field(vllm_config, "vllm_config", "model_config")
    total = _field(model, "vllm_config.model_config", "get_total_num_kv_heads")
    if not callable(total):
        raise ConfigError(f"vllm_config.model_config.get_total_num_kv_heads must be a method, got {total!r}")
    heads = as_int(total(), "vllm_config.model_config.get_total_num_kv_heads()", minimum=0)
    return ParallelConfig(
        tp=_size(pc, "tensor_parallel_size"),
        total_kv_heads=heads or None,  # a model of state layers alone has none (vLLM says 0): attention reads it
        pcp=_size(pc, "prefill_context_parallel_size", 1),
        dcp=_size(pc, "decode_context_parallel_size", 1),
        interleave=_size(pc, "cp_kv_cache_interleave_size", 1),
        world_size=_size(pc, "world_size"))


def _rank(vllm_config, world: int) -> int:
    rank = as_int(_field(vllm_config.parallel_config, "parallel_config", "rank"), "parallel_config.rank")
    if not 0 <= rank < world:
        raise ConfigError(f"parallel_config.rank = {rank} is outside the worker group: valid ranks are "
                          f"0 to {world - 1} (world_size {world} = tensor_parallel_size x "
                          f"prefill_context_parallel_size)")
    return rank


def _items(value, field: str):
    try:
        return iter(value)
    except TypeError:
        raise ConfigError(f"{field} must be a list, got {type(value).__name__}") from None


def layer_specs(kv_cache_config):
    """(layer name, spec) of every layer of every group, as vLLM pairs them."""
    groups = _field(kv_cache_config, "kv_cache_config", "kv_cache_groups")
    seen: dict[str, str] = {}
    for g, group in enumerate(_items(groups, "kv_cache_config.kv_cache_groups")):
        where = f"kv_cache_config.kv_cache_groups[{g}]"
        group_spec = _field(group, where, "kv_cache_spec")
        per_layer = getattr(group_spec, "kv_cache_specs", None)
        if per_layer is None:
            per_layer = {}
        elif not hasattr(per_layer, "get"):
            raise ConfigError(f"{where}.kv_cache_spec.kv_cache_specs must be a dict of layer name to spec, "
                              f"got {type(per_layer).__name__}")
        names = _field(group, where, "layer_names")
        if isinstance(names, (str, bytes)):  # iterating it would give one 'layer' per character
            raise ConfigError(f"{where}.layer_names must be a list of layer names, got the string {names!r}")
        for name in _items(names, f"{where}.layer_names"):
            if not isinstance(name, str):
                raise ConfigError(f"{where}.layer_names holds {name!r} ({type(name).__name__}), not a layer name")
            if name in seen:  # which group's spec describes its tensor? vLLM gives each layer one
                raise ConfigError(f"layer {name!r} is in {seen[name]} and in {where}: a layer belongs to one "
                                  f"KV cache group")
            seen[name] = where
            # a layer missing from its group's per-layer specs keeps the group spec, which
            # is no attention or Mamba spec: vLLM leaves such a layer out, and so do we
            yield name, per_layer.get(name, group_spec)


def derive_canonical_mappings(vllm_config, kv_cache_config, kv_caches: dict,
                              specs=None, sizes=None, state_layers: bool = False,
                              kinds: dict | None = None,
                              gdn_recurrent: str | None = None) -> dict[str, CanonicalPageMapping]:
    """This worker's canonical page mapping of every layer.

    Empty when the worker group is not exactly the tp x pcp grid. A layer no family
    certifies gets the opaque fallback; a layer vLLM gives no mapping (neither an
    attention nor a Mamba spec), or whose page not even the fallback holds, is absent.
    Why each layer failed closed is logged once per (spec class, reason) at WARNING.
    `specs` names another spec library (default: the shipped one). `sizes` gives every
    layer more runtime names the specs declare: deployment configuration such as
    `{"pcp_replicas": 1}` (PCP ranks hold replicas of the KV rather than token shards).
    `state_layers` maps Mamba2 and gated-delta-net state (`STATE_KINDS`) onto their families,
    whose canonical page is the whole model's state at any TP (`parallelism_agnostic`); off,
    every `MambaSpec` is opaque, as vLLM's reference maps it. `hf_config.n_groups` is trusted
    where the shapes cannot tell (groups sharded one a rank, or one group copied on two).
    `kinds` adds spec classes to `SPEC_KINDS` (`{"MyAttentionSpec": "attention"}`): a
    deployment's own spec classes, read as the kind they name. `gdn_recurrent` says how a gated
    delta net's recurrent state orders its dims (`GDN_ORDERS`); where the key and value dims are
    one size (Qwen3-Next: 128 and 128) the shapes cannot tell, and without it the layer is opaque.
    """
    if gdn_recurrent not in (None,) + GDN_ORDERS:
        raise ConfigError(f"gdn_recurrent must be one of {', '.join(GDN_ORDERS)} or None, got {gdn_recurrent!r}")
    kinds = _kinds(kinds)
    deriver = _deriver(specs)
    parallel = parallel_config(vllm_config)
    if parallel.world_size != parallel.tp * parallel.pcp:
        _log.warning("no canonical mappings: world_size %d is not tensor_parallel_size %d x "
                     "prefill_context_parallel_size %d (pipeline or data parallel ranks are not a KV grid)",
                     parallel.world_size, parallel.tp, parallel.pcp)
        return {}
    rank = _rank(vllm_config, parallel.world_size)
    num_blocks = as_int(_field(kv_cache_config, "kv_cache_config", "num_blocks"), "kv_cache_config.num_blocks",
                        minimum=0)
    if not hasattr(kv_caches, "get"):
        raise ConfigError(f"kv_caches must be a dict of layer name to tensor, got {type(kv_caches).__name__}")
    out: dict[str, CanonicalPageMapping] = {}
    failed: dict[tuple, list[str]] = {}
    for name, spec in layer_specs(kv_cache_config):
        try:
            engine = engine_kind(vllm_config, name)
            layer, why = layer_spec(spec, kinds=kinds, engine=engine), None
            cpu = 0
            if layer.kind == "attention":
                cpu, why = cpu_attn_layout(vllm_config, name, spec)
                if cpu:
                    layer = replace(layer, sizes={**dict(layer.sizes), CPU_ATTN: cpu})
            if state_layers and layer.kind == "mamba":
                state, why = state_layer(spec, parallel.tp, _field(vllm_config, "vllm_config", "model_config"),
                                         gdn_recurrent=gdn_recurrent)
                layer = state or layer
            if sizes:
                layer = _with_sizes(layer, sizes, deriver)
            given = tensor = TensorLayout.of(kv_caches.get(name))
            if (engine is not None and layer.kind == engine) or cpu == 1:  # (a page of regions: read flat)
                tensor = _as_bytes(tensor)
            layer = _kv_outside_blocks(layer, tensor, num_blocks, deriver)
        except ConfigError as e:
            raise ConfigError(f"layer {name!r} ({type(spec).__name__}): {e}") from None
        result = _derive(deriver, layer, tensor, parallel, num_blocks, type(spec).__name__)
        if why:
            result = replace(result, reasons=(why,) + result.reasons)
        if result.result != Outcome.CERTIFIED:
            failed.setdefault((type(spec).__name__, result.result, result.reasons), []).append(name)
        if result.mappings:
            m = _as_given(result.mappings[rank], tensor, given)
            # the encoding is the spec's too (fp8 e4m3 and e5m2 are both uint8 tensors), and an opaque
            # page holds the rank's bytes as the layer lays them out: the whole spec
            out[name] = replace(m, format_id=_spec_format(m.format_id, spec, result.result == Outcome.OPAQUE,
                                                                      vllm_config, kinds))
    _warn(failed)
    return out


def _as_bytes(tensor):
    """A dense block-first tensor as its flat (num_blocks, page) elements: a layer the engine names
    (the indexer's `(num_blocks, block_size, 132)` uint8 rows) is its bytes as they lie, whatever
    dims its backend views them by; any other tensor is left as it is, for the families to refuse."""
    if not isinstance(tensor, TensorLayout) or len(tensor.shape) < 2:
        return tensor
    from .tensors import dense_gap
    if dense_gap(tensor.shape, tensor.stride, row_major=True):
        return tensor
    page = 1
    for n in tensor.shape[1:]:
        page *= n
    return TensorLayout((tensor.shape[0], page), (tensor.stride[0], 1), tensor.element_size, tensor.dtype)


def _as_given(m, flat, given):
    """The mapping `m`, derived for `flat` (`_as_bytes` of the tensor the engine `given`), viewing
    the tensor as given: its dims after the block, row-major over the same bytes of each block
    (`_as_bytes` flattens only such a tensor), so that a copy plan takes the tensor the
    derivation took (the indexer's `(num_blocks, block_size, 132)`), and its flat bytes too."""
    if flat is given or len(m.tensors) != 1 or len(m.tensors[0].shape) != 1:
        return m
    v = m.tensors[0]
    if v.strides != (1,) or v.shape[0] * v.element != prod(given.shape[1:]) * given.element_size:
        return m
    shaped = v._replace(shape=tuple(given.shape[1:]), strides=tuple(given.stride[1:]), element=given.element_size)
    return replace(m, tensors=(shaped,))


KV_OUTSIDE = "kv_blocks_second"
"""The name a layer says FlashAttention's tensor order with, (2, num_blocks, ...) (`specs/grids.lal`)."""


def _kv_outside_blocks(layer: LayerSpec, tensor, num_blocks: int, deriver) -> LayerSpec:
    """An attention layer whose one tensor keeps K and V outside the blocks, shape (2,
    num_blocks, ...) with num_blocks other than 2, as FlashAttention's does, says so
    (`kv_blocks_second = 1`) where the layer does not already say, and some family serving
    its kind reads the name. Where the shape cannot tell ((2, 2, ...): num_blocks == 2) the
    layer is read blocks first, as the reference reads it, unless it says otherwise."""
    if (KV_OUTSIDE in dict(layer.sizes) or not isinstance(tensor, TensorLayout) or num_blocks == 2
            or KV_OUTSIDE not in deriver.reads(layer.kind) or tensor.shape[:2] != (2, num_blocks)):
        return layer
    return replace(layer, sizes={**dict(layer.sizes), KV_OUTSIDE: 1})


def _with_sizes(layer: LayerSpec, sizes, deriver=None) -> LayerSpec:
    """The layer with the deployment's names added; a name the layer's own spec already gives
    (a state's heads or groups, read from its shapes) may not be given another value. A name
    some family reads, but none of those serving this layer's kind, is the deployment's word
    about other layers (`kv_blocks_second` for attention, not a Mamba layer's): left out."""
    given = dict(LayerSpec(layer.kind, None, sizes=sizes).sizes)  # checked as LayerSpec.sizes checks them
    if deriver is not None:
        mine = deriver.reads(layer.kind)
        given = {n: v for n, v in given.items() if n in mine or n not in deriver.names}
    own = dict(layer.sizes)
    clash = next((n for n in given if n in own and own[n] != given[n]), None)
    if clash is not None:
        raise ConfigError(f"sizes[{clash!r}] = {given[clash]}, but the layer's own spec gives {clash} = "
                          f"{own[clash]} (read from its shapes and the model config)")
    return replace(layer, sizes={**own, **given})


_ELEMENT_FIELDS = ("dtype", "dtypes", "kv_quant_mode", "cache_dtype_str")
"""What a spec says of its elements' encoding (a uint8 tensor may hold fp8 e4m3 or e5m2)."""

_OPAQUE_FIELDS = _ELEMENT_FIELDS + ("shapes", "mamba_type", "block_size", "num_kv_heads", "head_size")
"""An opaque page holds the rank's bytes as the layer lays them out, so two layers of one page
size are one format only if their specs are one: also the class, a state's shapes and conv
orientation, an attention layer's heads and sizes."""


def _spec_format(fmt: str, spec, opaque: bool, vllm_config=None, kinds=None) -> str:
    """`fmt` with what the spec (and the deployment's cache dtype) says of the bytes folded into
    its element part (`runtime.formats.element_part`), so the form part still names the layout."""
    from .formats import element_part, with_element_words
    seen = [element_part(fmt)] + [f"{f}={getattr(spec, f, None)!r}" for f in (_OPAQUE_FIELDS if opaque
                                                                                else _ELEMENT_FIELDS)]
    cache = getattr(getattr(vllm_config, "cache_config", None), "cache_dtype", None)
    seen.append(f"cache_dtype={cache!r}")
    if opaque:
        seen.append(type(spec).__name__)
        if spec_kind(spec, kinds) == "mamba":
            seen.append(os.environ.get("VLLM_SSM_CONV_STATE_LAYOUT", "SD").upper())
    return with_element_words(fmt, seen)


def _derive(deriver: Deriver, layer: LayerSpec, tensor, parallel, num_blocks, cls: str) -> LayerResult:
    if layer.kind == "other":
        return LayerResult(Outcome.OMITTED, None, (), (Reason(Check.LIBRARY, f"{cls} is neither an attention nor a "
                                                              "Mamba spec, so vLLM gives it no canonical mapping"),))
    return deriver.derive(layer, tensor, parallel, num_blocks, strict=False)  # a layer it cannot read: opaque


def _warn(failed: dict) -> None:
    """One warning per (spec class, result, reasons), not one per layer: 80 identical layers, one line."""
    for (cls, result, reasons), names in failed.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        what = {Outcome.OPAQUE: "opaque fallback (stored whole, reusable only under the same parallel config)",
                Outcome.NO_MAPPINGS: "no mapping (left out)",
                Outcome.OMITTED: "no mapping (left out)"}.get(result, result)
        _log.warning("%d %s layer(s) (%s): %s; because: %s", len(names), cls, shown, what,
                     "; ".join(reasons) or f"no family serves {cls}")

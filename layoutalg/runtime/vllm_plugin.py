"""layoutalg as a vLLM plugin: every vLLM process derives its canonical page mappings with
layoutalg, when the deployment says so.

vLLM calls `register` in each of its processes (main, engine core, every worker) through the
`vllm.general_plugins` entry point this package declares. Switched off (the default), it
returns at once and vLLM runs as it would without layoutalg installed. Switched on
(`LAYOUTALG_VLLM=1` in the environment vLLM's processes inherit), it replaces the
`derive_canonical_mappings` that vLLM's offloading worker calls (`offloading/worker.py` imports
the name directly, so the name is replaced there) with `derive`: layoutalg's mappings, in
vLLM's own record types. A layer layoutalg's mapping cannot be said in vLLM's record (runs
written by different replicas) keeps vLLM's own mapping. Only vLLM versions whose offloading
worker was read and tested (`TESTED`) are patched; any other is refused with the reason.

Other switches, read where vLLM's processes start: `LAYOUTALG_VLLM_STATE_LAYERS=1` maps Mamba2
and gated-delta-net state layers onto their families (`runtime.vllm.derive_canonical_mappings`,
`state_layers`), `LAYOUTALG_VLLM_GDN_RECURRENT` (`vk` or `kv`) says how a GDN recurrent state
orders its dims where its shape cannot, `LAYOUTALG_VLLM_SPECS` names another spec library.
"""
from __future__ import annotations

import logging
import os

from ..errors import ConfigError
from ..verdicts import Check, Reason

SWITCH = "LAYOUTALG_VLLM"
TESTED = ("0.32.0",)
"""The vLLM versions whose offloading worker this plugin was written against and tested with."""

WORKER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker"
REFERENCE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.canonical_mapping"
GATE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config"
GATE_IMPORTERS = ("vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector",)
"""The modules of vLLM 0.32.0 that import `build_offloading_config` by name (grep of vllm/)."""

_log = logging.getLogger("vllm.layoutalg")  # vLLM's handlers show it, in its format
_said: set = set()


def switched_on(env=None) -> bool:
    """Whether the deployment asked for layoutalg's derive (`LAYOUTALG_VLLM` = 1, true, on, yes)."""
    return (env if env is not None else os.environ).get(SWITCH, "").strip().lower() in ("1", "true", "on", "yes")


def register() -> None:
    """The `vllm.general_plugins` entry point: nothing where the switch is off; else replace the
    offloading worker's derive (once a process), or raise `ConfigError` saying why not."""
    if not switched_on():
        return
    import importlib

    import vllm
    version = getattr(vllm, "__version__", "unknown")
    if version not in TESTED:
        raise ConfigError(f"layoutalg's vLLM plugin ({SWITCH}=1) was tested with vLLM {', '.join(TESTED)}, not "
                          f"{version}: its offloading worker may call another derive, so it is not patched. Unset "
                          f"{SWITCH} to run vLLM's own derive")
    worker, reference = importlib.import_module(WORKER), importlib.import_module(REFERENCE)
    current = getattr(worker, "derive_canonical_mappings", None)
    if current is derive:
        return
    if current is not getattr(reference, "derive_canonical_mappings", None):
        raise ConfigError(f"layoutalg's vLLM plugin: {WORKER}.derive_canonical_mappings is not vLLM's own "
                          f"({REFERENCE}.derive_canonical_mappings) but {current!r}: another plugin replaced it, "
                          f"or this vLLM is not the one tested; not patched")
    gate = importlib.import_module(GATE)
    importers = [importlib.import_module(m) for m in GATE_IMPORTERS]
    vllms = getattr(gate, "build_offloading_config", None)
    for module in importers:
        if getattr(module, "build_offloading_config", None) not in (vllms, build_offloading_config):
            raise ConfigError(f"layoutalg's vLLM plugin: {module.__name__}.build_offloading_config is not vLLM's own "
                              f"({GATE}.build_offloading_config): another plugin replaced it, or this vLLM is not "
                              f"the one tested; not patched")
    global _vllms_build
    if vllms is not build_offloading_config:
        _vllms_build = vllms
    worker.derive_canonical_mappings = derive
    gate.build_offloading_config = build_offloading_config
    for module in importers:
        module.build_offloading_config = build_offloading_config
    _once("on", "layoutalg derives vLLM's canonical page mappings (%s=1; vLLM %s; state layers %s)", SWITCH,
          version, "on" if _state_layers() else "off")


def derive(vllm_config, kv_cache_config, kv_caches) -> dict:
    """vLLM's `derive_canonical_mappings(vllm_config, kv_cache_config, kv_caches)`, answered by
    layoutalg (`runtime.vllm.derive_canonical_mappings`) in vLLM's record types. Logs once which
    layers layoutalg certified beyond vLLM's own derive (parallelism-agnostic here, opaque or
    absent there)."""
    import importlib

    from .vllm import derive_canonical_mappings
    reference = importlib.import_module(REFERENCE)
    base = importlib.import_module("vllm.v1.kv_offload.base")
    ours = derive_canonical_mappings(vllm_config, kv_cache_config, kv_caches, specs=os.environ.get(
        "LAYOUTALG_VLLM_SPECS") or None, state_layers=_state_layers(),
        gdn_recurrent=os.environ.get("LAYOUTALG_VLLM_GDN_RECURRENT") or None)
    theirs = reference.derive_canonical_mappings(vllm_config, kv_cache_config, kv_caches)
    out, kept = {}, []
    for name, m in ours.items():
        if len(set(m.run_writers)) > 1:  # runs written by different replicas: vLLM's record has one writer
            kept.append(name)
            if name in theirs:
                out[name] = theirs[name]
            continue
        out[name] = as_vllm(m, base)
    beyond = sorted(n for n, m in out.items() if m.parallelism_agnostic and not (
        n in theirs and theirs[n].parallelism_agnostic))
    _once(("beyond", tuple(beyond)), "layoutalg certified %d layer(s) beyond vLLM's own derive%s", len(beyond),
          (": " + ", ".join(beyond[:8]) + (f" and {len(beyond) - 8} more" if len(beyond) > 8 else "")) if beyond
          else "")
    if kept:
        _once(("kept", tuple(kept)), "layoutalg kept vLLM's own mapping of %d layer(s) whose runs have writers of "
              "their own: %s", len(kept), ", ".join(kept[:8]))
    return out


_vllms_build = None
"""vLLM's own `build_offloading_config`, kept where `register` replaced it."""


def build_offloading_config(vllm_config, kv_cache_config):
    """vLLM's `build_offloading_config`, with its parallelism-agnostic gate widened to the
    configurations layoutalg certifies (module docstring), and narrowed where vLLM's CPU backend
    will write an attention layer with a kernel whose blocks no spec describes (`unseen_kernel`:
    each worker keeps that layer opaque); vLLM's verdict everywhere else."""
    import dataclasses

    config = _vllms_build(vllm_config, kv_cache_config)
    if not config.canonical_layout:
        return config
    if config.parallel.is_parallelism_agnostic:
        try:
            why = unseen_kernel(vllm_config, kv_cache_config)
        except ConfigError:  # (a KV cache config layoutalg cannot read: vLLM's verdict, as before)
            return config
        if not why:
            return config
        # vLLM says yes by the tensor's shape; its workers will write this layer with a kernel whose
        # blocks are another layout, which layoutalg's derive keeps opaque (and vLLM then refuses to
        # start under a widened gate): the store keeps tp and rank in its folder's hash
        _once(("gate narrowed", why), "layoutalg narrowed vLLM's parallelism-agnostic gate: %s", why)
        return dataclasses.replace(config, parallel=dataclasses.replace(config.parallel, is_parallelism_agnostic=False))
    layers = certified_agnostic(vllm_config, kv_cache_config)
    if not layers:
        return config
    _once(("gate", tuple(layers)), "layoutalg widened vLLM's parallelism-agnostic gate (tp and rank leave the "
          "store's folder hash) for %d layer(s) it certifies: %s", len(layers),
          ", ".join(layers[:8]) + (f" and {len(layers) - 8} more" if len(layers) > 8 else ""))
    return dataclasses.replace(config, parallel=dataclasses.replace(config.parallel, is_parallelism_agnostic=True))


def certified_agnostic(vllm_config, kv_cache_config) -> list[str]:
    """Every layer of every KV cache group, where layoutalg's derive (from the specs' sizes alone,
    the switches as the worker's derive reads them) certifies each parallelism-agnostic with one
    writer; else [] (a layer refused, opaque, absent or with runs of several writers)."""
    from .vllm import layer_specs, derive_canonical_mappings
    names = [name for name, _ in layer_specs(kv_cache_config)]
    if not names:
        return []
    why = unseen_kernel(vllm_config, kv_cache_config)
    if why:
        _once(("gate unseen", why), "layoutalg keeps vLLM's parallelism-agnostic gate: %s", why)
        return []
    try:
        ours = derive_canonical_mappings(vllm_config, kv_cache_config, {}, specs=os.environ.get(
            "LAYOUTALG_VLLM_SPECS") or None, state_layers=_state_layers(),
            gdn_recurrent=os.environ.get("LAYOUTALG_VLLM_GDN_RECURRENT") or None)
    except ConfigError as e:
        _once(("gate refused", str(e)), "layoutalg keeps vLLM's parallelism-agnostic gate: %s", e)
        return []
    for name in names:
        m = ours.get(name)
        if m is None or not m.parallelism_agnostic or len(set(m.run_writers)) > 1:
            return []
    return names


def unseen_kernel(vllm_config, kv_cache_config) -> Reason | None:
    """Why the gate cannot vouch for an attention layer of vLLM's CPU platform, else None.

    vLLM's CPU backend writes a layer with the kernel it chooses for it; a kernel whose blocks no
    spec describes (AMX, for bfloat16 at a multiple of 32 tokens a block, on a host that has it)
    leaves the layer opaque in each worker's layoutalg derive, which vLLM refuses to start with
    under a widened gate. The kernel is the derive's own reading (`vllm.cpu_attn_layout`): of the
    layer object where this process holds it (a worker), else of the backend vLLM's CPU platform
    gives every attention layer (vLLM's engine core runs no model: the kernel the backend will
    choose), so the engine core and every worker agree. Off the CPU platform, or where vLLM's
    modules are not importable: None. The reason names the layer (`name`)."""
    from .vllm import cpu_attn_layout, layer_specs, spec_kind
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return None
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except Exception:  # noqa: BLE001 - no vLLM CPU backend here: nothing to foresee
        return None
    for name, spec in layer_specs(kv_cache_config):
        if spec_kind(spec) == "attention":
            code, why = cpu_attn_layout(vllm_config, name, spec, unseen=CPUAttentionBackend)
            if code == 2:
                return Reason(Check.KERNEL, f"layer {name}: {why}", name=name)
    return None


def as_vllm(m, base):
    """A layoutalg `CanonicalPageMapping` as vLLM's (`vllm.v1.kv_offload.base`), field for field."""
    runs = tuple(base.CopyRun(r.local_offset, r.canonical_offset, r.fragment_size, r.num_fragments,
                              r.local_stride, r.canonical_stride) for r in m.runs)
    writers, index = m.run_writers[0] if m.run_writers else (m.num_writers, m.writer_index)
    return base.CanonicalPageMapping(canonical_page_size_bytes=m.canonical_page_size_bytes,
                                     local_page_size_bytes=m.local_page_size_bytes, runs=runs, num_writers=writers,
                                     writer_index=index, parallelism_agnostic=m.parallelism_agnostic)


def _state_layers() -> bool:
    return os.environ.get("LAYOUTALG_VLLM_STATE_LAYERS", "").strip().lower() in ("1", "true", "on", "yes")


def _once(key, message: str, *args) -> None:
    if key not in _said:
        _said.add(key)
        _log.info(message, *args)

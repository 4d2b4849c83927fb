"""Runtime: derive every rank's canonical page mapping of a layer from a spec library.

    deriver = Deriver()                       # the shipped specs, compiled once per process
    result = deriver.derive(layer, tensor, parallel)

The path is plain Python over compiled families: no parsing after the first use of a
library, no sympy evaluation, never Z3. Results are memoised by (layer sizes, tensor
strides, parallel config), so 80 identical layers cost one derivation.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from .compiled import CompiledFamily, GuardFailed, Instance
from .lower import lower
from .mapping import CanonicalPageMapping

CERTIFIED, OPAQUE, NO_MAPPINGS, OMITTED = "certified", "opaque", "no_mappings", "omitted"


@dataclass(frozen=True)
class LayerSpec:
    """What the engine knows about one layer's KV page on one rank."""

    kind: str  # "attention", "mla", or anything else (opaque: Mamba state, ...)
    page_size_bytes: int | None
    block_size: int = 0
    num_kv_heads: int = 0
    head_size: int = 0
    dtype_bytes: int = 0
    per_token_head_quant: bool = False
    compress_ratio: int = 1


@dataclass(frozen=True)
class ParallelConfig:
    """The worker group: tp x pcp ranks, DCP inside TP, CP token interleave."""

    tp: int
    total_kv_heads: int
    pcp: int = 1
    dcp: int = 1
    interleave: int = 1
    world_size: int | None = None  # defaults to tp * pcp


@dataclass(frozen=True)
class TensorLayout:
    """A KV tensor as the runtime sees it: shape, strides (elements), element bytes."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    element_size: int

    @staticmethod
    def of(tensor) -> "TensorLayout | None":
        """From a torch tensor (or anything with shape/stride/element_size); None otherwise."""
        if not all(hasattr(tensor, a) for a in ("shape", "stride", "element_size")):
            return None
        return TensorLayout(tuple(tensor.shape), tuple(tensor.stride()), int(tensor.element_size()))


@dataclass(frozen=True)
class LayerResult:
    """Every rank's mapping of one layer, and how it was obtained."""

    result: str  # certified | opaque | no_mappings | omitted
    family: str | None
    mappings: tuple[CanonicalPageMapping, ...]
    reasons: tuple[str, ...] = ()  # why candidate families did not apply


class Deriver:
    """Derives layer mappings from a compiled spec library (the shipped one by default)."""

    def __init__(self, spec_dir: str | Path | None = None):
        self.families = compiled_library(str(spec_dir) if spec_dir else None)
        self._by_kind: dict[str, list[CompiledFamily]] = {}
        for cf in sorted(self.families.values(), key=lambda f: (f.order, f.name)):
            self._by_kind.setdefault(cf.serves, []).append(cf)
        fallback = self._by_kind.get("fallback", [])
        if len(fallback) != 1:
            raise ValueError(f"a spec library needs exactly one 'fallback' family, found {len(fallback)}")
        self.fallback = fallback[0]
        self.derive = functools.lru_cache(maxsize=4096)(self._derive)

    def _derive(self, layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig,
                num_blocks: int | None = None) -> LayerResult:
        sizes = _sizes(layer, tensor, parallel)
        world = parallel.world_size if parallel.world_size is not None else parallel.tp * parallel.pcp
        if world != parallel.tp * parallel.pcp:
            return LayerResult(NO_MAPPINGS, None, (), (f"world size {world} != tp * pcp",))
        reasons = []
        for cf in self._by_kind.get(layer.kind, []):
            if cf.tensor_dims and (tensor is None or len(tensor.shape) != cf.tensor_dims + 1):
                reasons.append(f"{cf.name}: needs a KV tensor of {cf.tensor_dims + 1} dimensions")
                continue
            try:
                inst = cf.evaluate(sizes)
            except GuardFailed as e:
                reasons.append(f"{cf.name}: {e}")
                continue
            why = _mismatch(inst, cf.tensor, layer, tensor, num_blocks)
            if why:
                reasons.append(f"{cf.name}: {why}")
                continue
            return LayerResult(CERTIFIED, cf.name, lower(inst), tuple(reasons))
        if layer.page_size_bytes is None:
            return LayerResult(OMITTED, None, (), tuple(reasons))
        inst = self.fallback.evaluate(sizes)
        return LayerResult(OPAQUE, self.fallback.name, lower(inst), tuple(reasons))


def _sizes(layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig) -> dict:
    return {
        "tp": parallel.tp, "pcp": parallel.pcp, "dcp": parallel.dcp, "interleave": parallel.interleave,
        "total_heads": parallel.total_kv_heads, "heads": layer.num_kv_heads,
        "block_size": layer.block_size, "head_size": layer.head_size,
        "dtype_bytes": tensor.element_size if tensor is not None else layer.dtype_bytes,
        "page_size": layer.page_size_bytes if layer.page_size_bytes is not None else 0,
        "per_token_head_quant": int(bool(layer.per_token_head_quant)),
        "compress_ratio": layer.compress_ratio,
    }


def _mismatch(inst: Instance, names: tuple, layer: LayerSpec, tensor: TensorLayout | None, num_blocks) -> str:
    """Why the instance does not describe this layer ('' when it does)."""
    if inst.tensor_shape:  # the family reads a tensor: recognise it by shape and strides
        if tensor is None:
            return "no KV tensor to recognise"
        blocks = num_blocks if num_blocks is not None else (tensor.shape[0] if tensor.shape else None)
        expected = (blocks,) + inst.tensor_shape
        dims = ", ".join(("block",) + names)
        if tensor.shape != expected:
            return f"KV tensor shape {tensor.shape} is not {expected} = ({dims})"
        for dim, (name, want, got) in enumerate(zip(names, inst.tensor_strides, tensor.stride[1:]), start=1):
            if want != got:
                return f"KV tensor dimension {dim} ({name}) has stride {got}, expected {want} (elements)"
    if inst.local_page != layer.page_size_bytes:
        return f"layout holds {inst.local_page} bytes but the page is {layer.page_size_bytes}"
    return ""


@functools.lru_cache(maxsize=8)
def compiled_library(spec_dir: str | None = None) -> dict[str, CompiledFamily]:
    """Every family of a library, compiled once per process (or loaded precompiled)."""
    from . import cache
    from ._resources import specs_dir
    folder = Path(spec_dir or specs_dir()).resolve()
    key, data = cache.load("library", folder)
    if data is not None:
        return {d["name"]: CompiledFamily.from_json(d) for d in data}
    from .compile import compile_family
    from .family import resolve
    from .library import load_default
    lib = load_default(folder)
    out = {name: compile_family(resolve(lib, name)) for name in lib.families}
    cache.store("library", key, [m.path for m in lib.modules], [cf.to_json() for cf in out.values()])
    return out

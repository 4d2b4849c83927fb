"""layoutalg: a layout-algebra DSL for sharded KV-cache pages, with symbolic verification.

The pipeline, one module a room:
    grammar/layoutalg.lark -> syntax -> library -> sizes, itersum, ir, family, claims (IR)
    -> layout, algebra -> compile -> tiling, lower -> runtime, vllm, corpus -> copy, torch_copy
    -> direct, reshard -> cli
    verification: check (enumeration), interpret (direct reading), prove (Z3)
"""
from .mapping import CanonicalPageMapping, CopyRun
from .runtime import Deriver, LayerResult, LayerSpec, ParallelConfig, TensorLayout
from .vllm import derive_canonical_mappings

__all__ = ["CanonicalPageMapping", "CopyRun", "Deriver", "LayerResult", "LayerSpec", "ParallelConfig",
           "TensorLayout", "derive_canonical_mappings"]
__version__ = "0.1.0"

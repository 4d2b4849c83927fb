"""layoutalg: a layout-algebra DSL for sharded KV-cache pages, with symbolic verification.

The pipeline, one module a room:
    grammar/layoutalg.lark -> syntax -> library -> sizes, itersum, ir, family, claims (IR)
    -> layout, algebra -> compile -> tiling, lower -> runtime, vllm, corpus -> copy, torch_copy
    -> direct, reshard -> cli
    verification: check (enumeration), interpret (direct reading), prove (Z3)
"""
_PUBLIC = {"CanonicalPageMapping": "mapping", "CopyRun": "mapping", "Deriver": "runtime",
           "LayerResult": "runtime", "LayerSpec": "runtime", "ParallelConfig": "runtime",
           "TensorLayout": "runtime", "derive_canonical_mappings": "vllm"}
__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    """The public names, each imported where it is first read: an engine that derives from its
    own objects never pays for the vLLM adapter, a CLI command never for the runtime."""
    import importlib
    if name not in _PUBLIC:  # a submodule read as an attribute (`layoutalg.runtime`) is imported
        if not name.startswith("_"):
            try:
                return importlib.import_module(f".{name}", __name__)
            except ModuleNotFoundError as e:
                if e.name != f"{__name__}.{name}":
                    raise  # the submodule is there and lacks something it imports: say what
        raise AttributeError(f"module 'layoutalg' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))

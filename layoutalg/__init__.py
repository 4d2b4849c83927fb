"""layoutalg: a layout-algebra DSL for sharded KV-cache pages, with symbolic verification.

The pipeline, one folder a room (docs/design.md):
    grammar/layoutalg.lark -> dsl (syntax, library) -> ir -> algebra -> compile
    -> runtime (lower, derive, vllm) -> plans (reshard, pageformat) -> copy -> tools, cli
    verification: verify (check, oracle, recognition, prove with Z3)
"""
_PUBLIC = {"CanonicalPageMapping": "mapping", "CopyRun": "mapping",
           **dict.fromkeys(("Deriver", "LayerResult", "LayerSpec", "ParallelConfig", "TensorLayout",
                            "derive_canonical_mappings"), "runtime")}  # (`runtime` says which of its modules)
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

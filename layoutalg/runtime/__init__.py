"""The engine's path: lowering a configuration's digit table to copy runs (`lower`), deriving
every rank's canonical page mapping of a layer (`derive`: `Deriver`), the vLLM adapter
(`vllm`) and the conformance corpus format (`corpus`). Never imports the parser or Z3.
"""
_PUBLIC = {"Deriver": "derive", "compiled_library": "derive", "LayerResult": "records", "LayerSpec": "records",
           "ParallelConfig": "records", "TensorLayout": "records", "derive_canonical_mappings": "vllm"}


def __getattr__(name: str):
    """The runtime's public names, each imported where it is first read (as `layoutalg`'s)."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'layoutalg.runtime' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)

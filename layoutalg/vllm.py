"""The old path of the vLLM adapter: every name of `layoutalg.runtime.vllm`, read from it.

Code written against `layoutalg.vllm` keeps working; new code imports
`layoutalg.runtime.vllm` (or `layoutalg.derive_canonical_mappings`). A name is looked up in
the adapter each time it is read, so a patch of the adapter is seen here too.
"""
from .runtime import vllm as _adapter


def __getattr__(name: str):
    return getattr(_adapter, name)


def __dir__():
    return sorted(n for n in dir(_adapter) if not n.startswith("__"))

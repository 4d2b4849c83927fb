"""`layoutalg conform`: a family's spec against the engine's own writer, rank by rank
(`tools.conform`)."""
from __future__ import annotations

import importlib

from ..errors import LayoutalgError
from .common import sizes_once


def _writer(text: str | None, family: str):
    """The writer a `--writer MODULE:FUNCTION` names (called with no argument, it gives the
    writer), `--writer vllm` vLLM's own writer of a shipped family, or by default the engine
    model of vLLM's writer."""
    from ..tools import engine_models
    if text == "vllm":  # vLLM's own writers, run on the CPU (needs vLLM CPU and triton: tools/vllm_writers)
        from ..tools import vllm_writers
        if family not in vllm_writers.WRITERS:
            raise LayoutalgError(f"conform: no vLLM writer runs {family}'s layer on a CPU (writers: "
                                 f"{', '.join(sorted(vllm_writers.WRITERS))})")
        return vllm_writers.WRITERS[family]()
    if text is None:
        if family not in engine_models.WRITERS:
            raise LayoutalgError(f"conform: no engine model writes {family}'s layer (models: "
                                 f"{', '.join(sorted(engine_models.WRITERS))}); give --writer MODULE:FUNCTION")
        return engine_models.WRITERS[family]()
    module, _, name = text.partition(":")
    if not module or not name:
        raise LayoutalgError(f"conform: --writer {text!r} is not MODULE:FUNCTION")
    try:
        return getattr(importlib.import_module(module), name)()
    except (ImportError, AttributeError) as e:
        raise LayoutalgError(f"conform: --writer {text}: {e}") from None


def conform_command(args) -> int:
    from ..params import parse_config
    from ..tools.conform import check
    names = sizes_once("conform", args.size)
    write = _writer(args.writer, args.family)
    failed = 0
    for text in args.config:
        result = check(args.family, parse_config(text), write, args.heads, args.block_size, args.head_size,
                       args.dtype, names, args.specs)
        print(result)
        failed += result.status != "conformant"
    return 1 if failed else 0

"""The names a spec may use for the quantities the runtime knows.

A spec never invents a runtime quantity: every free name in a family, grid or `let`
is one of these, a `let` it defined, a rank digit or a layout index.
"""
from __future__ import annotations

PARALLEL = {
    "tp": "tensor-parallel ranks",
    "pcp": "prefill context-parallel ranks",
    "dcp": "decode context-parallel ranks (they subdivide TP)",
    "interleave": "tokens per context-parallel chunk",
    "total_heads": "KV heads of the whole model",
}

LAYER = {
    "heads": "KV heads this rank holds (the layer spec's num_kv_heads)",
    "block_size": "tokens per block",
    "head_size": "elements per head",
    "dtype_bytes": "bytes per element (the KV tensor's element size when there is one)",
    "page_size": "bytes of one block of this layer on one rank (unpadded)",
    "per_token_head_quant": "1 when K/V carry per-token-head scales, else 0",
    "compress_ratio": "tokens per stored state (MLA compression; 1 when none)",
}

RUNTIME = {**PARALLEL, **LAYER}
"""Every runtime name with its meaning, in a fixed order."""

NAMES = tuple(RUNTIME)

DOMAIN = {
    "tp": (1, 1024), "pcp": (1, 64), "dcp": (1, 64), "interleave": (1, 1024), "total_heads": (1, 1024),
    "heads": (1, 1024), "block_size": (1, 4096), "head_size": (1, 4096), "dtype_bytes": (1, 8),
    "page_size": (1, 1 << 31), "per_token_head_quant": (0, 1), "compress_ratio": (1, 64),
}
"""The declared parameter domain the prover quantifies over (inclusive bounds)."""

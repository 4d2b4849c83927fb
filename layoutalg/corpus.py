"""The conformance corpus format (tests/data/vllm_reference.jsonl.gz), read and written.

Input: one JSON object a line with `spec`, `tensor`, `parallel`, `num_blocks`.
Output: `{"id", "result", "ranks": [{page sizes, writers, agnostic, "runs": [[lo, co, fs, nf, ls, cs], ...]}]}`.
"""
from __future__ import annotations

import gzip
import io
import json
from typing import IO, Iterator

from .runtime import Deriver, LayerSpec, ParallelConfig, TensorLayout


def read_lines(path: str) -> Iterator[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def layer_of(row: dict) -> tuple[LayerSpec, TensorLayout | None, ParallelConfig, int]:
    s, t, p = row["spec"], row.get("tensor"), row["parallel"]
    layer = LayerSpec(
        kind=s.get("kind", "opaque"), page_size_bytes=s.get("page_size_bytes"),
        block_size=s.get("block_size") or 0, num_kv_heads=s.get("num_kv_heads") or 0,
        head_size=s.get("head_size") or 0, dtype_bytes=s.get("dtype_bytes") or 0,
        per_token_head_quant=bool(s.get("per_token_head_quant")), compress_ratio=s.get("compress_ratio") or 1)
    tensor = TensorLayout(tuple(t["shape"]), tuple(t["stride"]), t["dtype_bytes"]) if t else None
    par = ParallelConfig(tp=p["tp"], total_kv_heads=p["total_kv_heads"], pcp=p.get("pcp", 1),
                         dcp=p.get("dcp", 1), interleave=p.get("interleave", 1), world_size=p.get("world_size"))
    return layer, tensor, par, row.get("num_blocks")


def derive_row(deriver: Deriver, row: dict) -> dict:
    res = deriver.derive(*layer_of(row))
    out = {"id": row.get("id"), "result": res.result}
    if res.mappings:
        out["ranks"] = [
            {"canonical_page_size_bytes": m.canonical_page_size_bytes,
             "local_page_size_bytes": m.local_page_size_bytes,
             "num_writers": m.num_writers, "writer_index": m.writer_index,
             "parallelism_agnostic": m.parallelism_agnostic,
             "runs": [list(r) for r in m.runs]}
            for m in res.mappings]
    return out


def derive_corpus(path: str, out: IO[str], spec_dir: str | None = None) -> int:
    """Write one result line per input line; returns the number of lines."""
    deriver = Deriver(spec_dir)
    buf = io.StringIO()
    n = 0
    for row in read_lines(path):
        buf.write(json.dumps(derive_row(deriver, row), separators=(",", ":")))
        buf.write("\n")
        n += 1
    out.write(buf.getvalue())
    return n

"""The conformance corpus format (tests/data/vllm_reference.jsonl.gz), read and written.

Input: one JSON object a line with `spec`, `tensor`, `parallel`, `num_blocks`.
Output: `{"id", "result", "ranks": [{page sizes, writers, agnostic, "runs": [[lo, co, fs, nf, ls, cs], ...]}]}`.
"""
from __future__ import annotations

import gzip
import json
import multiprocessing
import os
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
             "runs": m.runs}  # CopyRun is a tuple: JSON writes each as [lo, co, fs, nf, ls, cs]
            for m in res.mappings]
    return out


def _derive_lines(args) -> str:
    spec_dir, lines = args
    deriver = Deriver(spec_dir)
    return "".join(json.dumps(derive_row(deriver, json.loads(line)), separators=(",", ":")) + "\n"
                   for line in lines if line.strip())


def derive_corpus(path: str, out: IO[str], spec_dir: str | None = None, jobs: int | None = None) -> int:
    """Write one result line per input line, in input order; returns the number of lines.

    The lines are independent, so `jobs` processes (default: one per core, at most 4)
    each derive a contiguous share; the spec library is compiled once, before forking.
    """
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [line for line in f if line.strip()]
    Deriver(spec_dir)  # compile (or load) the library once, so forked workers inherit it
    jobs = max(1, min(jobs or os.cpu_count() or 1, 4, len(lines) // 2000 or 1))
    if jobs == 1:
        out.write(_derive_lines((spec_dir, lines)))
        return len(lines)
    step = -(-len(lines) // jobs)
    chunks = [(spec_dir, lines[i:i + step]) for i in range(0, len(lines), step)]
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ctx.Pool(jobs) as pool:
        for text in pool.imap(_derive_lines, chunks):
            out.write(text)
    return len(lines)

"""The conformance corpus format (tests/data/vllm_reference.jsonl.gz), read and written.

Input: one JSON object a line with `spec`, `tensor`, `parallel`, `num_blocks`.
Output: `{"id", "result", "ranks": [{page sizes, writers, agnostic, "runs": [[lo, co, fs, nf, ls, cs], ...]}]}`.

A corpus that cannot be read, or a line that is not such an object, is a `CorpusError`
naming the file and the line.
"""
from __future__ import annotations

import gzip
import io
import json
import multiprocessing
import os
import stat
import zlib
from typing import IO, Iterator

from ..errors import LayoutalgError
from .derive import Deriver
from .records import LayerSpec, ParallelConfig, TensorLayout


class CorpusError(LayoutalgError):
    """A corpus file is unreadable, or one of its lines is not a layer (the message says which)."""


class _BadRow(ValueError):
    """A line's JSON is not a corpus row; the caller adds the file and line number."""


_LINE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, ArithmeticError, RecursionError, LayoutalgError)
"""What deriving one line may raise when the line is malformed (json's errors are ValueErrors)."""


def _raw_lines(path: str) -> list[bytes]:
    """Every line of the file (blank ones too, so an index is a line number), undecoded. The
    file is read once (a pipe, `<(zcat ...)`, cannot be read twice)."""
    try:
        mode = os.stat(path).st_mode if os.path.exists(path) else 0
        if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISFIFO(mode)):
            raise CorpusError(f"cannot read corpus {path}: not a file (a device such as /dev/zero has no end to "
                              f"read to)")
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        why = "it is a folder" if os.path.isdir(path) else (e.strerror or str(e)).lower()
        raise CorpusError(f"cannot read corpus {path}: {why}") from None
    if path.endswith(".gz"):
        if data[:2] != b"\x1f\x8b":
            raise CorpusError(f"{path}: not a gzip file, though its name ends in .gz")
        try:
            data = gzip.decompress(data)
        except gzip.BadGzipFile as e:
            raise CorpusError(f"{path}: the gzip data is corrupt ({e})") from None
        except (EOFError, zlib.error) as e:
            raise CorpusError(f"{path}: the gzip data is truncated or corrupt ({e})") from None
    return io.BytesIO(data).readlines()  # (lines end at b"\n" alone, as a file's do)


def read_lines(path: str) -> Iterator[dict]:
    """The rows of a corpus file, in order."""
    for n, line in enumerate(_raw_lines(path), 1):
        if line.strip():
            yield _row(line, path, n)


def _row(line: bytes | str, path: str, n: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        column = min(e.pos, len(e.doc.rstrip("\r\n"))) + 1  # a line cut short fails at its end, not past it
        raise CorpusError(f"{path}:{n}: not a JSON line: {e.msg} at column {column}") from None
    except UnicodeDecodeError as e:
        byte = e.object[e.start]
        raise CorpusError(f"{path}:{n}: not UTF-8: byte 0x{byte:02x} at column {e.start + 1}") from None
    except RecursionError:
        raise CorpusError(f"{path}:{n}: not a JSON line: nested too deeply") from None
    except ValueError as e:  # (an integer of more digits than Python converts, say)
        raise CorpusError(f"{path}:{n}: not a JSON line: {e}") from None
    if not isinstance(row, dict):
        raise CorpusError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
    return row


def _object(row: dict, key: str, required: bool = True) -> dict | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, dict):
        raise _BadRow(f"'{key}' must be an object, got {'nothing' if value is None else type(value).__name__}")
    return value


def _field(obj: dict, key: str, where: str):
    if key not in obj:
        raise _BadRow(f"'{where}' has no '{key}'")
    return obj[key]


def _flag(obj: dict, key: str) -> bool:
    value = obj.get(key, False)
    if value is None or value in (0, 1) and type(value) in (bool, int):
        return bool(value)
    raise _BadRow(f"'spec.{key}' must be true or false, got {value!r}")


def _sequence(obj: dict, key: str, where: str) -> tuple:
    value = _field(obj, key, where)
    if not isinstance(value, list):
        raise _BadRow(f"'{where}.{key}' must be a list, got {type(value).__name__}")
    return tuple(value)


def layer_of(row: dict) -> tuple[LayerSpec, TensorLayout | None, ParallelConfig, int]:
    s, t, p = _object(row, "spec"), _object(row, "tensor", required=False), _object(row, "parallel")
    layer = LayerSpec(
        kind=s.get("kind", "opaque"), page_size_bytes=s.get("page_size_bytes"),
        block_size=s.get("block_size") or 0, num_kv_heads=s.get("num_kv_heads") or 0,
        head_size=s.get("head_size") or 0, dtype_bytes=s.get("dtype_bytes") or 0,
        per_token_head_quant=_flag(s, "per_token_head_quant"), compress_ratio=s.get("compress_ratio") or 1,
        sizes=_object(s, "sizes", required=False) or ())  # runtime names the specs declare
    tensor = None
    if t is not None:
        tensor = TensorLayout(_sequence(t, "shape", "tensor"), _sequence(t, "stride", "tensor"),
                              _field(t, "dtype_bytes", "tensor"))
    par = ParallelConfig(tp=_field(p, "tp", "parallel"), total_kv_heads=_field(p, "total_kv_heads", "parallel"),
                         pcp=p.get("pcp", 1), dcp=p.get("dcp", 1), interleave=p.get("interleave", 1),
                         world_size=p.get("world_size"))
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


def _derive_line(deriver: Deriver, line: bytes, path: str, n: int) -> str:
    row = _row(line, path, n)
    try:
        out = derive_row(deriver, row)
    except _LINE_ERRORS as e:
        why = f"missing field {e}" if isinstance(e, KeyError) else str(e) or type(e).__name__
        raise CorpusError(f"{path}:{n}: {why}") from None
    return json.dumps(out, separators=(",", ":")) + "\n"


def _derive_lines(args) -> str:
    spec_dir, path, first, lines = args
    deriver = Deriver(spec_dir)
    return "".join(_derive_line(deriver, line, path, n) for n, line in enumerate(lines, first) if line.strip())


def derive_corpus(path: str, out: IO[str], spec_dir: str | None = None, jobs: int | None = None) -> int:
    """Write one result line per input line, in input order; returns the number of lines.
    Nothing is written unless every line derives.

    The lines are independent, so `jobs` processes (default: one per core, at most 4)
    each derive a contiguous share; the spec library is compiled once, before forking.
    Raises `CorpusError` naming the file and line of the first line that is not a layer.
    """
    lines = _raw_lines(path)
    count = sum(1 for line in lines if line.strip())
    try:
        Deriver(spec_dir)  # compile (or load) the library once, so forked workers inherit it
    except ValueError as e:  # a library without exactly one fallback family
        raise CorpusError(f"spec library {spec_dir or '(shipped)'}: {e}") from None
    jobs = max(1, min(jobs or os.cpu_count() or 1, 4, count // 2000 or 1))
    if jobs == 1:
        out.write(_derive_lines((spec_dir, path, 1, lines)))
        return count
    step = -(-len(lines) // jobs)
    chunks = [(spec_dir, path, i + 1, lines[i:i + step]) for i in range(0, len(lines), step)]
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    with ctx.Pool(jobs) as pool:  # every share derived before any line is written: a bad line
        texts = pool.map(_derive_lines, chunks)  # anywhere leaves the output empty, as with one job
    for text in texts:
        out.write(text)
    return count

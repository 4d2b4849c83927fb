"""A mapping's runs checked as a mapping: every run inside both pages, no byte sent twice on
either side, every writer election sound. What a copy plan and a direct plan trust once these
pass (`check_runs`), and the one sweep for a shared byte (`shared_byte`).
"""
from __future__ import annotations

import torch

from ..errors import ConfigError
from ..mapping import CanonicalPageMapping, CopyRun


def check_runs(m: CanonicalPageMapping, op: str) -> None:
    """Every run inside both pages, so no view reaches into the next block, and no two
    fragments sharing a byte on either side (a local byte copied to two canonical bytes,
    or two local bytes into one, is no mapping)."""
    if not isinstance(m, CanonicalPageMapping):
        raise ConfigError(f"{op}: mapping must be a CanonicalPageMapping, got {type(m).__name__}")
    if not isinstance(m.runs, tuple):
        raise ConfigError(f"{op}: mapping.runs must be a tuple of CopyRun, got {type(m.runs).__name__}")
    # each run's values are checked here, however it was made (by hand, a pickle, `tuple.__new__`):
    # a few comparisons a run beside the sweep below
    for i, run in enumerate(m.runs):
        if not isinstance(run, CopyRun) or not all(type(v) is int for v in run):
            raise ConfigError(f"{op}: run {i} is {run!r}, expected a CopyRun of six integers")
        if run.fragment_size < 1 or run.num_fragments < 1:  # an empty view fails mid-batch on some paths
            raise ConfigError(f"{op}: run {i} {tuple(run)} moves no byte (fragment size {run.fragment_size}, "
                              f"{run.num_fragments} fragments); a mapping's runs each move at least one")
    if type(m.num_writers) is not int or type(m.writer_index) is not int \
            or type(m.local_page_size_bytes) is not int or type(m.canonical_page_size_bytes) is not int:
        raise ConfigError(f"{op}: mapping sizes and writers must be integers, got pages "
                          f"{m.local_page_size_bytes!r}/{m.canonical_page_size_bytes!r}, writer {m.writer_index!r} "
                          f"of {m.num_writers!r}")
    if m.num_writers < 1 or not 0 <= m.writer_index < m.num_writers:
        raise ConfigError(f"{op}: mapping has writer_index {m.writer_index} of {m.num_writers} writers, expected "
                          f"num_writers >= 1 and 0 <= writer_index < num_writers")
    check_writers(m, op)
    for i, run in enumerate(m.runs):
        for side, offset, stride, page in (("local", run.local_offset, run.local_stride, m.local_page_size_bytes),
                                           ("canonical", run.canonical_offset, run.canonical_stride,
                                            m.canonical_page_size_bytes)):
            end = offset + (run.num_fragments - 1) * stride + run.fragment_size
            negative = next((f for f, v in (("offset", offset), ("stride", stride), ("fragment size",
                                                                                  run.fragment_size),
                                                ("fragment count", run.num_fragments)) if v < 0), None)
            if negative:
                raise ConfigError(f"{op}: run {i} {tuple(run)} has a negative {side} {negative}")
            if run.num_fragments > 1 and 0 <= stride < run.fragment_size:  # before the sweep: 2**34 of them
                raise ConfigError(f"{op}: run {i} {tuple(run)}: its {side} fragments overlap (stride {stride} < "
                                  f"fragment {run.fragment_size}); a mapping sends each byte once")
            if end > page:
                raise ConfigError(f"{op}: run {i} {tuple(run)} reaches {side} bytes [{offset}, {end}), "
                                  f"outside the {page}-byte {side} page")
    for side in ("local", "canonical"):
        clash = _shared_byte(m.runs, side)
        if clash is not None:
            raise ConfigError(f"{op}: two fragments of the runs share {side} byte {clash}: a mapping sends each "
                              f"byte once")


def _shared_byte(runs, side: str) -> int | None:
    """The first byte two fragments of `runs` share on `side`, or None."""
    return shared_byte([(r.local_offset, r.local_stride, r.num_fragments, r.fragment_size) if side == "local" else
                        (r.canonical_offset, r.canonical_stride, r.num_fragments, r.fragment_size) for r in runs])


def shared_byte(progressions) -> int | None:
    """The first byte two fragments share, of (offset, stride, count, size) progressions of
    fragments; None where they are disjoint. Sorted starts, vectorised: a million fragments
    take milliseconds."""
    starts, sizes = [], []
    for off, stride, n, size in progressions:
        if n > 0 and size > 0:
            starts.append(off + stride * torch.arange(n, dtype=torch.int64))
            sizes.append(torch.full((n,), size, dtype=torch.int64))
    if not starts:
        return None
    start, size = torch.cat(starts), torch.cat(sizes)
    order = torch.argsort(start, stable=True)
    start, end = start[order], (start + size)[order]
    bad = torch.nonzero(start[1:] < end[:-1])
    return int(start[1:][bad[0, 0]]) if bad.numel() else None


def check_writers(m: CanonicalPageMapping, op: str) -> None:
    """`run_writers`, when given, elects a writer for every run: (n, w) with n >= 1, 0 <= w < n."""
    if not m.run_writers:
        return
    if len(m.run_writers) != len(m.runs):
        raise ConfigError(f"{op}: mapping has {len(m.runs)} runs but {len(m.run_writers)} run writers")
    for i, e in enumerate(m.run_writers):
        if not (isinstance(e, tuple) and len(e) == 2 and all(type(x) is int for x in e) and 0 <= e[1] < e[0]):
            raise ConfigError(f"{op}: run {i} has writer {e!r}, expected (num_writers, writer_index) "
                              f"with 0 <= writer_index < num_writers")

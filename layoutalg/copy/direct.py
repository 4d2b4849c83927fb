"""Executing direct reshard plans (`plans.reshard.DirectPlan`): `gather` on a producer rank,
`scatter` on a consumer rank, or `execute` both in one process. Each run's side moves as a
copy plan's does (`move.gather_rows`, `move.scatter_rows`: numpy's row gather on the CPU,
torch's index ops elsewhere), for every block at once, on the tensors' own device.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from ..errors import ConfigError, LayoutalgError
from ..mapping import PageConversion
from ..plans.reshard import DirectPlan, admit, validate
from .ids import block_ids_of
from .ids import id_tensor as read_ids
from .move import WORDS, as_words, gather_rows, scatter_rows, side_word
from .executor import plan
from .views import check_blocks_apart, in_segments, layer_segments, overlap, stretch_length


def _side(plan: DirectPlan, producer: int, kv, block_ids, op: str):
    """Checked before anything moves: the plan (sound where built, else validated: `admit`),
    the producer, the tensor's pages (the producer's for a gather, the consumer's for a
    scatter) and the block ids; with the producer's runs that move bytes, cut where the
    tensor's page lies in stretches apart (on the side this rank holds)."""
    if type(producer) is not int or producer < 0:
        raise ConfigError(f"{op}: producer rank must be a non-negative int, got {producer!r}")
    admit(plan)
    segs = side_segments(plan, kv, op == "gather", op)
    raw = segs[0].bytes
    blocks = block_ids_of(block_ids, raw.shape[0], op).to(raw.device)  # an index on the tensor's own device (CUDA too)
    runs = tuple(r for r in plan.runs_from(producer) if r.num_fragments and r.fragment_size)
    # cut where the tensor holds its page in stretches apart, in the runs' byte order: what the
    # gather sends in that order the scatter receives in it, however either side is cut
    pieces = in_segments(runs, stretch_length(segs), "src" if op == "gather" else "dst")
    return segs, blocks, pieces


def gather(plan: DirectPlan, producer: int, kv, block_ids):
    """Producer side: the bytes consumer `plan.consumer` reads from `producer`, for each block
    of `block_ids` in turn, as one flat uint8 tensor (what travels over the wire): each run's
    source side gathered into rows for every block at once."""
    segs, blocks, pieces = _side(plan, producer, kv, block_ids, "gather")
    if not pieces or not blocks.numel():
        return torch.zeros(0, dtype=torch.uint8, device=segs[0].bytes.device)
    w = side_word(segs, [r for _, r in pieces], "src")
    words = [as_words(seg.bytes, w) for seg in segs]
    parts = [gather_rows(words[s], r.src, r, blocks) for s, r in pieces]
    data = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)  # (one run: no second copy)
    return data.view(torch.uint8).reshape(-1)


def scatter(plan: DirectPlan, producer: int, data, kv, block_ids) -> None:
    """Consumer side: put what `gather` sent from `producer` into the blocks `block_ids` of `kv`."""
    segs, blocks, pieces = _side(plan, producer, kv, block_ids, "scatter")
    raw = segs[0].bytes
    per_block = sum(r.bytes for _, r in pieces)
    if not isinstance(data, torch.Tensor) or data.dtype != torch.uint8 or data.dim() != 1 or \
            data.numel() != blocks.numel() * per_block:
        raise ConfigError(f"scatter: received {tuple(getattr(data, 'shape', ()))} {getattr(data, 'dtype', type(data))} "
                          f"from producer rank {producer}, "
                          f"expected {blocks.numel()} blocks x {per_block} bytes of uint8")
    if not pieces or not blocks.numel():
        return
    w = side_word(segs, [r for _, r in pieces], "dst")
    if not data.is_contiguous() or any(overlap(data.view(1, -1), seg.bytes) for seg in segs):  # received into the
        data = data.clone(memory_format=torch.contiguous_format)  # kv's own memory, the runs would overwrite bytes
        # they have yet to read (a strided buffer spans more than its elements: copied as well)
    rows = data.to(raw.device).view(blocks.numel(), per_block)
    words = [as_words(seg.bytes, w) for seg in segs]
    at = 0
    for s, r in pieces:
        scatter_rows(words[s], r.dst, r, blocks, rows[:, at:at + r.bytes].contiguous().view(WORDS[w]))
        at += r.bytes


def execute(plan: DirectPlan, producer_kvs: Sequence, src_blocks, kv, dst_blocks) -> None:
    """In one process: fill consumer blocks `dst_blocks` of `kv` from producer blocks `src_blocks`
    (block i of one is block i of the other) of every producer rank's tensor."""
    if not isinstance(plan, DirectPlan):
        raise ConfigError(f"execute: expected a DirectPlan, got {type(plan).__name__}")
    if isinstance(producer_kvs, torch.Tensor) or not isinstance(producer_kvs, Sequence):
        raise ConfigError(f"execute: producer_kvs must be a list of every producer rank's tensor, got "
                          f"{type(producer_kvs).__name__}")
    validate(plan, [plan.producer_page_size_bytes] * len(producer_kvs))
    into = side_segments(plan, kv, False, "execute")
    src_blocks = read_ids(src_blocks, "producer block ids", "execute")  # read once (a generator is read
    dst = dst_blocks = block_ids_of(dst_blocks, into[0].bytes.shape[0], "execute")  # once only)
    several = len(plan.producers()) > 1
    for p in plan.producers():  # everything checked before the first byte moves
        segs = side_segments(plan, producer_kvs[p], True, "execute", f"producer {p} kv")
        src = block_ids_of(src_blocks, segs[0].bytes.shape[0], "execute")
        if src.numel() != dst.numel():
            raise ConfigError(f"execute: {src.numel()} producer blocks for {dst.numel()} consumer blocks")
        # producer by producer, a scatter into memory a later producer is read from would
        # hand it bytes already overwritten: the consumer blocks share none with any producer's
        # blocks read (one producer is gathered whole before the scatter: it may be the consumer)
        if several:
            check_blocks_apart([(f"producer {p} kv", segs, src), ("the consumer kv", into, dst)], "execute",
                               "a producer scattered first would overwrite bytes a later one is read from")
    for p in plan.producers():
        scatter(plan, p, gather(plan, p, producer_kvs[p], src_blocks), kv, dst_blocks)


class _Side(NamedTuple):
    tensors: tuple
    local_page_size_bytes: int
    format_id: str = ""
    reads: tuple = ()


def side_segments(plan: DirectPlan, kv, producer: bool, op: str, name: str = ""):
    """One side's pages (every executor of direct plans reads a side here: gather, scatter,
    execute, `tools.nixl`) as `Segment`s of `(blocks, bytes)`, the tensor checked against the views
    its group's mappings were derived for (`copy.views.layer_segments`, as a copy plan checks it)."""
    side = _Side(plan.producer_tensors, plan.producer_page_size_bytes, plan.producer_format, plan.producer_reads) \
        if producer else _Side(plan.consumer_tensors, plan.local_page_size_bytes, plan.consumer_format,
                               plan.consumer_reads)
    return layer_segments(kv, side, name or ("producer kv" if producer else "consumer kv"), op)


def convert(conv: PageConversion, big, small, to_small: bool) -> None:
    """Copy between `big` (G, big page) and `small` (G * k, small page) uint8 page tensors:
    big page g is small pages k*g .. k*g + k - 1 (consecutive in the token sequence)."""
    if not isinstance(big, torch.Tensor) or not isinstance(small, torch.Tensor):
        raise LayoutalgError(f"convert: big and small must be uint8 torch tensors of pages, got "
                             f"{type(big).__name__} and {type(small).__name__}")
    groups = big.shape[0] if big.dim() == 2 else -1
    if big.dim() != 2 or small.dim() != 2 or big.dtype != torch.uint8 or small.dtype != torch.uint8 or \
            big.shape[1] != conv.big_page or small.shape[1] != conv.small_page or \
            small.shape[0] != conv.k * groups or not small.is_contiguous():
        raise LayoutalgError(f"convert: expected (G, {conv.big_page}) big and contiguous (G * {conv.k}, "
                             f"{conv.small_page}) small uint8 pages, got {tuple(big.shape)} {big.dtype} and "
                             f"{tuple(small.shape)} {small.dtype}")
    grouped, ids = small.view(groups, conv.k * conv.small_page), torch.arange(groups)
    p = plan(conv.mapping, big)
    if to_small:
        p.store(big, ids, grouped, ids)   # one writer: every byte of every group
    else:
        p.load(grouped, ids, big, ids)

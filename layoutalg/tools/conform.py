"""Conformance of a spec to the engine's own writer: where the spec says a rank's bytes sit, the
engine's code put them there.

The prover holds everything between a rank's page and the canonical page; it cannot hold the
first premise, that the spec's local layout and grid are what the engine writes. Here the
engine's writer is run (a callable: vLLM's writers through `tools.engine_models`, or a user's
own) for every rank of a configuration, over input whose every element holds a tag of its own,
and for a single rank holding the whole canonical page (tp = pcp = dcp = 1, every head, the
canonical page's tokens): by the canonical page's definition that rank's page IS the canonical
page. Each rank's page must then be exactly what the spec's mapping loads from it:

    for every rank r, every byte x the spec maps:   writer_r[x] == single[canonical(r, x)]

A writer is `write(sizes, rank, pages, page_of_block)`: it fills `pages`, a `(blocks, page
bytes)` uint8 view of the rank's KV memory, as the engine lays that memory out, block b holding
its share of canonical page `page_of_block[b]` (the engine's sharding of heads, channels and
tokens is the writer's, never the spec's). `sizes` are the runtime names of the rank (tp, pcp,
dcp, interleave, total_heads, heads, block_size, head_size, dtype_bytes and the names the
family declares). Each writer runs twice, its memory first filled with two sentinels, so that a
byte the writer never touches is told from one it writes: a byte the spec maps but the writer
never fills, or one the writer fills where the spec has a pad or nothing, is a failure too.

A check that compares nothing is no pass: a writer whose tags do not tell the page's elements
apart (fewer distinct values than elements) leaves the verdict unknown.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from ..errors import ConfigError
from ..params import Configuration
from ..mapping import CanonicalPageMapping

SENTINELS = (0xA5, 0x5A)
BLOCKS = 2


class Misplaced(NamedTuple):
    """One byte where the writer and the spec disagree."""
    rank: int
    block: int
    local_byte: int
    what: str        # the disagreement, in words


class Conformance(NamedTuple):
    """`status`: "conformant", "refuted" (with `misplaced`, the first few) or "unknown" (`why`);
    `compared`: bytes compared over every rank and block."""
    family: str
    config: Configuration
    status: str
    compared: int
    misplaced: tuple
    why: str = ""

    def __str__(self) -> str:
        where = Configuration(self.config).joined(", ")
        if self.status == "conformant":
            return f"{self.family} at {where}: conformant, {self.compared} bytes compared with the engine's writer"
        if self.status == "unknown":
            return f"{self.family} at {where}: unknown: {self.why}"
        shown = "\n".join(f"  rank {m.rank}, block {m.block}, local byte {m.local_byte}: {m.what}"
                          for m in self.misplaced)
        return f"{self.family} at {where}: refuted: {self.why}\n{shown}"


def _written(write: Callable, sizes: dict, rank: int, blocks: int, page: int, page_of_block: list):
    """(the page bytes the writer leaves, a mask of the bytes it wrote): it runs twice, over
    memory filled with each sentinel; a byte is written where both runs agree on it and it is
    not the sentinel of both."""
    runs = []
    for s in SENTINELS:
        mem = torch.full((blocks, page), s, dtype=torch.uint8)
        try:
            write(dict(sizes), rank, mem, list(page_of_block))
        except Exception as e:  # noqa: BLE001 - a writer is the user's code: say where it failed
            raise ConfigError(f"conform: the writer failed on rank {rank} of tp={sizes['tp']}, pcp={sizes['pcp']}, "
                              f"dcp={sizes['dcp']}: {type(e).__name__}: {e}") from None
        runs.append(mem)
    a, b = runs
    untouched = (a == SENTINELS[0]) & (b == SENTINELS[1])
    if bool(((a != b) & ~untouched).any()):
        raise ConfigError(f"conform: the writer of rank {rank} wrote other bytes in its two runs (it must be a "
                          f"function of its input alone)")
    return a, ~untouched


def _canonical_of(m: CanonicalPageMapping) -> torch.Tensor:
    """Local byte -> canonical byte of one mapping, -1 where no run copies the byte (a pad)."""
    out = torch.full((m.local_page_size_bytes,), -1, dtype=torch.long)
    for r in m.runs:
        for lo, co, n in r.triples():
            out[lo:lo + n] = torch.arange(co, co + n)
    return out


def check(family: str, config: dict, write: Callable, heads: int, block_size: int, head_size: int | None = None,
          dtype: str = "fp32", names: dict | None = None, specs: str | None = None, element: int | None = None,
          describe: Callable | None = None, blocks: int = BLOCKS, shown: int = 5) -> Conformance:
    """The family's spec at `config` against the writer `write` (see the module). `element` is
    the width in bytes of one tag (default: the writer's `tag_bytes` attribute, else the dtype's: a
    writer of 1-byte values tags them in wider groups); `describe(bytes)` names the element a tag
    is, for the messages (default: the writer's `describe` attribute). Raises `ConfigError` where the family does not serve the
    configuration."""
    config = Configuration(config)
    cp = config.dcp * (1 if config.pcp_replicas else config.pcp)
    one = {**config, "tp": 1, "pcp": 1, "dcp": 1, "interleave": 1, "pcp_replicas": 0}
    whole = _group(family, one, heads, block_size * cp, head_size, dtype, blocks, names, specs)
    group = _group(family, config, heads, block_size, head_size, dtype, blocks, names, specs)
    page_of_block = list(range(blocks))[::-1]  # block b holds page blocks - 1 - b: blocks are not pages
    m1 = whole.mappings[0]
    single, wrote = _written(write, whole.sizes, 0, blocks, m1.local_page_size_bytes, page_of_block)
    c1 = _canonical_of(m1)
    data1 = c1 >= 0
    canonical = torch.zeros(blocks, m1.canonical_page_size_bytes, dtype=torch.uint8)
    canonical[:, c1[data1]] = single[:, data1]  # the single rank's page is the canonical page
    e = element or getattr(write, "tag_bytes", None) or torch.empty(0, dtype=_dtype(dtype)).element_size()
    describe = describe or getattr(write, "describe", None)
    never = (data1 & ~wrote).nonzero().tolist()
    if never:  # the single rank's page is the reference: every byte of it the spec maps must be written
        return Conformance(family, config, "refuted", 0, tuple(
            Misplaced(0, b, x, "the writer of the single rank holding the whole page never writes this byte, which "
                               "the spec maps (as canonical byte {})".format(int(c1[x]))) for b, x in never[:shown]),
            "the engine's writer leaves bytes the spec maps unwritten")
    why = _untagged(single, data1, e)
    if why:
        return Conformance(family, config, "unknown", 0, (), why)
    found: list = []
    compared = 0
    for rank, m in enumerate(group.mappings):
        got, wrote = _written(write, group.sizes, rank, blocks, m.local_page_size_bytes, page_of_block)
        to = _canonical_of(m)
        data = to >= 0
        want = canonical[:, to.clamp(min=0)]
        compared += int(data.sum()) * blocks
        for b in range(blocks):
            bad = (data & ((got[b] != want[b]) | ~wrote[b])).nonzero().flatten().tolist()
            found += [_said(rank, b, x, got, want, to, canonical, e, describe, wrote) for x in bad[:shown]]
            extra = (~data & wrote[b]).nonzero().flatten().tolist()
            found += [Misplaced(rank, b, x, "the writer wrote this byte, which the spec maps to no canonical byte "
                                            "(a pad, or outside its regions)") for x in extra[:shown]]
        if len(found) >= shown:
            break
    if found:
        return Conformance(family, config, "refuted", compared, tuple(found[:shown]),
                           "the engine's writer puts these bytes elsewhere than the spec says")
    return Conformance(family, config, "conformant", compared, ())


def _group(family, config, *model):
    """`distributed.group_of`, its refusals said as conform's."""
    from .distributed import group_of
    try:
        return group_of(family, config, *model)
    except ConfigError as e:
        raise ConfigError("conform: " + str(e).removeprefix("reshard: ")) from None


def _dtype(name: str):
    from .distributed import DTYPES
    if name not in DTYPES:
        raise ConfigError(f"conform: dtype {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[name]


def _untagged(single: torch.Tensor, data: torch.Tensor, e: int) -> str:
    """Why the single rank's page does not tell its elements apart by their tags, or ''."""
    if int(data.sum()) == 0:
        return "the spec maps no byte of the page: nothing to compare"
    rows = single[:, data]
    if rows.shape[1] % e:
        return f"the page's {rows.shape[1]} data bytes are no whole number of {e}-byte tags"
    tags = rows.reshape(-1, e)
    distinct = torch.unique(tags, dim=0).shape[0]
    if distinct < tags.shape[0]:
        return (f"the writer's tags name {distinct} distinct values for {tags.shape[0]} elements: a byte in the "
                f"wrong place could hold the right value (give each element a tag of its own, or a wider dtype)")
    return ""


def _said(rank, b, x, got, want, to, canonical, e, describe, wrote) -> Misplaced:
    if not bool(wrote[b, x]):
        return Misplaced(rank, b, x, f"the spec maps it to canonical byte {int(to[x])}, but the writer never "
                                     f"writes it")
    lo = x - x % e
    tag = bytes(got[b, lo:lo + e].tolist())
    page = canonical[b].reshape(-1)
    where = _find(page, tag, e)
    name = f" ({describe(tag)})" if describe is not None else ""
    there = f"canonical byte {where + x % e}" if where is not None else "no byte of the canonical page"
    return Misplaced(rank, b, x, f"the writer put the element{name} that the single-rank engine holds at {there}; "
                                 f"the spec sends this byte to canonical byte {int(to[x])}")


def _find(page: torch.Tensor, tag: bytes, e: int):
    n = page.numel() - page.numel() % e
    rows = page[:n].reshape(-1, e)
    hit = (rows == torch.tensor(list(tag), dtype=torch.uint8)).all(dim=1).nonzero().flatten()
    return int(hit[0]) * e if hit.numel() else None

"""Copy plans: a mapping's runs, prepared once for one KV tensor, executed for any batch.

    p = plan(mapping, kv)                          # checks kv against the mapping once
    p.store(kv, block_ids, pages, page_ids)        # this rank's bytes of each block, where it writes
    p.load(pages, page_ids, kv, block_ids)         # every block, from its canonical page
    m = plan_model(mappings, kv_caches)            # every layer of a model, checked as one
    m.store(kv_caches, block_ids, pages, page_ids) # model pages: each layer's page at m.offsets[name]

`pages` is a `(num_pages, canonical_page_size_bytes)` uint8 tensor (pinned or shared host
memory, a file mapped into memory, a device buffer), on `kv`'s device or another (a GPU's
KV cache offloaded to host pages: each chunk is gathered on one device, carried, and
scattered on the other); block `block_ids[i]` of `kv` goes to or comes from page
`page_ids[i]`. Writers take turns by canonical page id
(`page_id % num_writers == writer_index`), as engines key them by the offload page.

Each run is a progression of equal fragments on each side. Where a side's fragments start
on rows of one dense `(rows, fragment)` view of its buffer (offsets, strides and the block
stride multiples of the fragment; fragments that continue each other make one row a
block), the run moves whole rows by row number: on the CPU through numpy's row indexing
of the same memory (several times faster than torch's index ops on small rows), else
`index_select` / `index_copy_`. Elsewhere it is a 3-D strided view `(blocks, fragments,
fragment words)` on that side. A batch goes a chunk of blocks at a time: on the CPU 2 MiB of
fragments, so what is gathered is still in cache when it is scattered; on a GPU up to 256
MiB (each chunk costs launches, not cache); between devices 32 MiB, a temporary of that
size on each side. A store writes
exactly this rank's bytes of each page and nothing else: ranks storing into one shared
page never race. The words are the widest (8, 4, 2 or 1 bytes) that divide every offset,
size and stride, so a fragment of 256 bytes moves as 32 words. `descriptors` lists the
same plan as flat `(src, dst, size)` byte triples for a batched-memcpy engine, merged
where contiguous across fragments.
Every argument is checked before the first byte moves; a rejected call changes nothing.
An error in the copy itself (a GPU out of memory for a chunk's temporary) raises with the
batch partly moved: the caller retries the batch, as after any failed transfer.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

try:  # on the CPU, numpy's row gather and scatter run several times faster than torch's index ops
    import numpy as _np
except ImportError:  # pragma: no cover - torch works without it, and so do the plans
    _np = None

from ..errors import ConfigError, LayoutMismatch
from ..mapping import CanonicalPageMapping
from ..runtime.runs import check_runs
from .views import (CANONICAL, LOCAL, check_apart, check_blocks_apart, check_stretches_apart, in_segments,
                    layer_segments, outer_of, page_bytes, stretch_length, stretch_starts)


def plan(mapping: CanonicalPageMapping, kv) -> "CopyPlan":
    """A plan for `kv`: a tensor holding the mapping's local page in each block, or the
    list of tensors that view it (a Mamba layer's conv and SSM state), checked against the
    tensors the mapping was derived for (`torch_copy.layer_bytes`)."""
    check_runs(mapping, "plan")  # a mapping, every run inside both pages, every writer election sound
    if not mapping.runs:  # a store would write nothing and a load fill nothing, each reporting its blocks done
        raise ConfigError(f"plan: the mapping holds no run: not one byte of its {mapping.local_page_size_bytes}-byte "
                          f"local page has a canonical byte")
    segs = layer_segments(kv, mapping, "kv", "plan")
    word = _word(mapping, segs)
    outer = outer_of(mapping.tensors, "kv", "plan")
    return CopyPlan(mapping, _signature(kv), word, isinstance(kv, (list, tuple)), stretch_length(segs), outer)


def plan_model(mappings: dict, kv_caches: dict, stage: bool = False) -> "ModelPlan":
    """A plan for every layer of a model: `mappings` and `kv_caches` keyed by layer name (as
    `derive_canonical_mappings` and vLLM's `kv_caches` are), one `plan` a layer. A model page
    holds each layer's canonical page side by side, in the order of the layer names sorted
    (`ModelPlan.offsets`), so a store and a load agree whatever order their dicts were built
    in; `ModelPlan.format_id` names that page, from each layer's `format_id`.

    A pipeline stage (`stage=True`) holds the KV of its own layers only: `mappings` names every
    layer of the model page, `kv_caches` the stage's, and the plan stores and loads those
    layers' parts of the whole model page (`stages_tile` checks a pipeline's stages write
    each layer once)."""
    if not isinstance(mappings, dict) or not isinstance(kv_caches, dict):
        raise ConfigError(f"plan_model: mappings and kv_caches must be dicts keyed by layer name, got "
                          f"{type(mappings).__name__} and {type(kv_caches).__name__}")
    if not mappings:
        raise ConfigError("plan_model: no layer: a model plan of no layer would store and load nothing")
    odd = [k for k in (*mappings, *kv_caches) if not isinstance(k, str)]
    if odd:  # (names sort the model page's layers)
        raise ConfigError(f"plan_model: layers are named by strings (as vLLM's kv_caches are), got {odd[0]!r} "
                          f"({type(odd[0]).__name__})")
    if set(mappings) != set(kv_caches) and not (stage and set(kv_caches) < set(mappings) and kv_caches):
        # a layer left out would come back unloaded, with no word said
        only = sorted(set(mappings) ^ set(kv_caches)) if not stage else sorted(set(kv_caches) - set(mappings))
        raise ConfigError(f"plan_model: layers {only[:4]}{' ...' if len(only) > 4 else ''} have a mapping or a "
                          f"tensor but not both; pass the same layers in both (a layer without a mapping is not "
                          f"offloaded; a pipeline stage passes stage=True, every layer's mapping and its own "
                          f"layers' tensors, at least one)" if only else
                          "plan_model: a pipeline stage must hold at least one of the model's layers")
    names = sorted(mappings)
    odd = next((n for n in names if not isinstance(mappings[n], CanonicalPageMapping)), None)
    if odd is not None:
        raise ConfigError(f"plan_model: the mapping of layer {odd!r} is a {type(mappings[odd]).__name__}, not a "
                          f"CanonicalPageMapping")
    plans = {}
    for n in names:
        if n not in kv_caches:
            continue  # (another stage's layer: its place in the page only)
        try:
            plans[n] = plan(mappings[n], kv_caches[n])
        except (LayoutMismatch, ConfigError) as e:  # which layer of the model, first
            raise type(e)(f"plan_model: layer {n!r}: {e}") from None
    offsets, at = {}, 0
    for n in names:
        offsets[n], at = at, at + mappings[n].canonical_page_size_bytes
    layout = tuple((n, offsets[n], mappings[n].canonical_page_size_bytes, mappings[n].format_id) for n in names)
    return ModelPlan(plans, {n: offsets[n] for n in plans}, at, layout)


def stages_tile(stages) -> None:
    """Raises `ConfigError` unless the `ModelPlan`s of a pipeline's stages read one model page
    (one `format_id`) and write each of its layers exactly once: two stages writing one layer
    would race for its bytes, a layer no stage writes would come back as whatever the page
    held."""
    stages = list(stages)
    if not stages:
        raise ConfigError("stages_tile: no stage: a pipeline of no stage writes no layer")
    if not all(isinstance(p, ModelPlan) and p.layout for p in stages):
        raise ConfigError("stages_tile: each stage must be a ModelPlan of plan_model, which names every layer "
                          "of the model page")
    ids = {p.format_id for p in stages}
    if len(ids) > 1:
        raise ConfigError(f"stages_tile: the stages read {len(ids)} model page formats ({', '.join(sorted(ids))}): "
                          f"a page written by one is not a page of another")
    writers = {n: [k for k, p in enumerate(stages) if n in p.plans] for n, *_ in stages[0].layout}
    twice = next(((n, w) for n, w in writers.items() if len(w) > 1), None)
    if twice:
        raise ConfigError(f"stages_tile: layer {twice[0]!r} is written by stages {twice[1]}: one layer, one writer")
    none = [n for n, w in writers.items() if not w]
    if none:
        raise ConfigError(f"stages_tile: no stage writes layer{'s' if len(none) > 1 else ''} "
                          f"{', '.join(map(repr, none[:4]))}{' ...' if len(none) > 4 else ''} of the model page")


def _signature(kv) -> tuple:
    """(shape, stride, dtype, device) of a tensor, or a tuple of them for a list of tensors."""
    if isinstance(kv, (list, tuple)):
        return tuple(_signature(t) for t in kv)
    return (tuple(kv.shape), tuple(kv.stride()), kv.dtype, kv.device)


def _same_tensor(planned: tuple, kv, several: bool, outer: int = 0) -> bool:
    """`kv` is the planned tensor (or list of them) but for the block count (and the strides
    of dims before the block, which follow it: `layer_segments` checks them every call)."""
    if several:
        return (isinstance(kv, (list, tuple)) and len(kv) == len(planned)
                and all(_same_tensor(p, t, False) for p, t in zip(planned, kv)))
    if not isinstance(kv, torch.Tensor):
        return False
    shape, stride, dtype, device = planned
    k = outer
    return (tuple(kv.shape[:k] + kv.shape[k + 1:]), tuple(kv.stride()[k + 1:]), kv.dtype, kv.device) == (
        shape[:k] + shape[k + 1:], stride[k + 1:], dtype, device)


@dataclass(frozen=True)
class CopyPlan:
    mapping: CanonicalPageMapping
    tensor: tuple  # (shape, stride, dtype, device) of the KV tensor the plan was made for (of each, `several`)
    word: int      # bytes moved per element of the views
    several: bool = False  # made for a list of tensors viewing the page (a Mamba layer's conv and SSM state)
    length: int = 0  # bytes of one stretch where the tensor holds the page in stretches apart, else 0
    outer: int = 0   # dims of the tensor before its block dim (FlashAttention's (2, blocks, ...): 1)

    def store(self, kv: torch.Tensor, block_ids, pages: torch.Tensor, page_ids) -> int:
        """Copy this rank's bytes of each block into its canonical page, where this rank is the
        page's writer. Returns how many blocks it wrote."""
        return self._store(*self._batch("store", kv, block_ids, pages, page_ids, unique_pages=True))

    def _store(self, blocks, ids, sides) -> int:
        """The store of a checked batch (`_batch`'s ids and views)."""
        wrote = torch.zeros_like(ids, dtype=torch.bool)
        for (n, w), runs in _by_election(self.mapping):  # regions replicated differently elect their own
            mine = (ids % n) == w
            wrote |= mine
            self._move(sides, blocks[mine], ids[mine], to_pages=True, runs=runs)
        return int(wrote.sum())

    def load(self, pages: torch.Tensor, page_ids, kv: torch.Tensor, block_ids) -> int:
        """Fill each block from its canonical page (every rank, every block): every byte the
        mapping's runs hold (a derived mapping's hold the whole page but its padding, which is
        never copied). Returns the count."""
        blocks, ids, sides = self._batch("load", kv, block_ids, pages, page_ids, unique_blocks=True)
        return self._move(sides, blocks, ids, to_pages=False)

    def _move(self, sides, blocks, ids, to_pages: bool, runs=None) -> int:
        """Each run: one gather from the source views and one scatter into the destination's.
        `sides` are both buffers as words (`_words_of`), checked once by `_batch`."""
        if ids.numel():
            local, canon = sides
            for seg, r in _split(tuple(self.mapping.runs if runs is None else runs), self.length):
                src, dst = ((local[seg], r.local_offset, r.local_stride, blocks), (canon, r.canonical_offset,
                                                                                   r.canonical_stride, ids))
                if not to_pages:
                    src, dst = dst, src
                _copy_run(src, dst, r)
        return int(ids.numel())

    def descriptors(self, block_ids, page_ids, store: bool = True, kv_base: int = 0, pages_base: int = 0,
                    block_bytes: int | None = None) -> torch.Tensor:
        """The batch as `(n, 3)` int64 `(src, dst, size)` byte triples for a batched memcpy.

        Offsets count from `kv_base` (block b at `kv_base + b * block_bytes`, by default the
        planned tensor's block stride) and `pages_base` (page p at `pages_base + p *
        canonical page`). Where the tensor holds the page in stretches apart (dims before the
        block), `kv_base` is its first element's address and each stretch lies where the
        planned tensor's strides put it.
        On store only the pages this rank writes appear. Fragments that continue each
        other in both source and destination are merged.
        """
        m = self.mapping
        if self.several and self.length:
            raise LayoutMismatch(f"descriptors: the page lies in {len(self.tensor)} tensors apart (each its own "
                                 f"stretch of every block), which no one base address places; copy with store and load")
        blocks, ids = _ids(block_ids, "block_ids", "descriptors"), _ids(page_ids, "page_ids", "descriptors")
        if blocks.numel() != ids.numel():
            raise LayoutMismatch(f"descriptors: {blocks.numel()} block ids but {ids.numel()} page ids")
        for name, t in (("block_ids", blocks), ("page_ids", ids)):
            if t.numel() and int(t.min()) < 0:
                raise LayoutMismatch(f"descriptors: {name} holds {int(t.min())}; ids are not negative")
        dst_name, dst = ("page_ids", ids) if store else ("block_ids", blocks)
        if dst.numel() and _repeats(dst, int(dst.max()) + 1):
            raise LayoutMismatch(f"descriptors: {dst_name} repeats an id: two sources would write one destination")
        for name, v in (("kv_base", kv_base), ("pages_base", pages_base), ("block_bytes", block_bytes)):
            if not (type(v) is int and v >= 0 or name == "block_bytes" and v is None):
                raise LayoutMismatch(f"descriptors: {name} is {v!r}; expected a non-negative int (a byte address)")
        shape, stride, dtype, _ = self.tensor[0] if self.several else self.tensor
        e, k = torch.empty(0, dtype=dtype).element_size(), self.outer
        step = stride[k] * e if block_bytes is None else block_bytes
        if blocks.numel() and int(blocks.max()) >= shape[k]:
            raise LayoutMismatch(f"descriptors: block_ids holds {int(blocks.max())}, but the planned tensor has "
                                 f"{shape[k]} blocks")
        at = stretch_starts(shape[:k], stride[:k], e)
        if blocks.numel() and self.outer:  # stretches of the blocks asked for, `step` apart, must not meet
            check_stretches_apart(at, step, self.length, int(blocks.max()) + 1, "kv", "descriptors")
        top = max(kv_base + max(at) + (int(blocks.max()) + 1) * step if blocks.numel() else 0,
                  pages_base + (int(ids.max()) + 1) * m.canonical_page_size_bytes if ids.numel() else 0)
        if top >= 1 << 63:
            raise LayoutMismatch(f"descriptors: addresses reach {top}, past what an int64 descriptor holds")
        if step < (self.length or m.local_page_size_bytes):
            raise LayoutMismatch(f"descriptors: blocks {step} bytes apart would overlap "
                                 f"{self.length or m.local_page_size_bytes}-byte {'stretches' if self.length else 'pages'}")
        out = []
        for (n, w), runs in _by_election(m) if store else [((1, 0), m.runs)]:
            mine = (ids % n) == w
            out.append(self._triples(runs, blocks[mine], ids[mine], step, [kv_base + a for a in at], pages_base, store))
        return _merge(torch.cat(out)) if len(out) > 1 else out[0]

    def _triples(self, runs, blocks, ids, step, kv_bases, pages_base, store) -> torch.Tensor:
        """`kv_bases[s]`: where stretch s of block 0 is (`kv_base` plus its place in the tensor)."""
        frags = sorted((kv_bases[s] + r.local_offset + i * r.local_stride, r.canonical_offset + i * r.canonical_stride,
                        r.fragment_size) for s, r in _split(tuple(runs), self.length) for i in range(r.num_fragments))
        f = torch.tensor(frags, dtype=torch.int64).reshape(-1, 3)
        lo = blocks[:, None] * step + f[None, :, 0]
        co = pages_base + ids[:, None] * self.mapping.canonical_page_size_bytes + f[None, :, 1]
        size = f[None, :, 2].expand_as(lo)
        src, dst = (lo, co) if store else (co, lo)
        return _merge(torch.stack([src.reshape(-1), dst.reshape(-1), size.reshape(-1)], 1))

    # -- checks, then views
    def _batch(self, op, kv, block_ids, pages, page_ids, unique_pages=False, unique_blocks=False):
        if not _same_tensor(self.tensor, kv, self.several, self.outer):
            got = _signature(kv) if isinstance(kv, torch.Tensor) or (
                isinstance(kv, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in kv)) else type(kv)
            raise LayoutMismatch(f"{op}: kv is not the tensor{'s' if self.several else ''} this plan was made for: "
                                 f"shape, stride, dtype and device {self.tensor} expected (any block count), got {got}")
        if not isinstance(pages, torch.Tensor) or pages.dtype != torch.uint8 or pages.dim() != 2 \
                or pages.shape[1] != self.mapping.canonical_page_size_bytes:
            got = (tuple(pages.shape), pages.dtype) if isinstance(pages, torch.Tensor) else type(pages)
            raise LayoutMismatch(f"{op}: pages must be a (num_pages, {self.mapping.canonical_page_size_bytes}) "
                                 f"uint8 tensor, got {got}")
        segs = layer_segments(kv, self.mapping, "kv", op)
        if stretch_length(segs) != self.length:  # same strides, memory laid out otherwise: the cuts differ
            raise LayoutMismatch(f"{op}: kv holds the page in stretches cut at {stretch_length(segs) or 'none'}, "
                                 f"but this plan was made for stretches cut at {self.length or 'none'}")
        cb = page_bytes(pages, self.mapping.canonical_page_size_bytes, "pages", op)
        for seg in segs:
            check_apart(seg.bytes, cb, op)
        blocks, ids = _ids(block_ids, "block_ids", op), _ids(page_ids, "page_ids", op)
        if blocks.numel() != ids.numel():
            raise LayoutMismatch(f"{op}: {blocks.numel()} block ids but {ids.numel()} page ids")
        _in_range(blocks, segs[0].bytes.shape[0], "block_ids", op)
        _in_range(ids, pages.shape[0], "page_ids", op)
        for name, t, n, must in (("page_ids", ids, pages.shape[0], unique_pages),
                                 ("block_ids", blocks, segs[0].bytes.shape[0], unique_blocks)):
            if must and _repeats(t, n):
                raise LayoutMismatch(f"{op}: {name} repeats an id: two sources would write one destination")
        return blocks, ids, self._words_of(segs, cb)  # (ids on the CPU: each side moves them to its device once)

    def _words_of(self, segs: tuple, cb: torch.Tensor) -> tuple[tuple, torch.Tensor]:
        """Both sides (`(blocks, bytes)` views: the local page's stretches, the pages) as words
        of w bytes, w the plan's word or less where a base demands."""
        w = self.word
        views = [s.bytes for s in segs] + [cb]
        while w > 1 and any(x % w for t in views for x in (t.storage_offset(), t.stride(0))):
            w //= 2
        return tuple(_words(s.bytes, w) for s in segs), _words(cb, w)


@dataclass(frozen=True)
class ModelPlan:
    """Every layer's `CopyPlan`, executed as one: all layers' arguments are checked before the
    first byte of any layer moves. `pages` is one `(num_pages, page_size_bytes)` uint8 tensor
    of model pages (layer `n`'s canonical page at byte `offsets[n]` of each) or a dict of each
    layer's `(num_pages, canonical page)` tensor; `block_ids` and `page_ids` are one sequence
    for every layer or a dict by layer (a hybrid model's groups have block tables of their own).

    Examples:
        (m1, m2 the mappings of two layers of 512- and 256-byte canonical pages)
        plan_model({"b": m2, "a": m1}, kvs).offsets == {"a": 0, "b": 512}
        plan_model({"b": m2, "a": m1}, kvs).page_size_bytes == 768
    """
    plans: dict
    offsets: dict
    page_size_bytes: int
    layout: tuple = ()  # (name, offset, canonical page bytes, format_id) of every layer of the page

    @property
    def format_id(self) -> str:
        """The model page's format: each layer's name, place and `format_id` (every layer of the
        page, a pipeline stage's too). A loader whose id differs would read another layout's
        bytes; compare it with the storer's."""
        import hashlib
        text = repr(self.layout or tuple((n, self.offsets[n], p.mapping.canonical_page_size_bytes, p.mapping.format_id)
                                         for n, p in self.plans.items()))  # repr quotes names: none forges another
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def store(self, kv_caches: dict, block_ids, pages, page_ids) -> dict:
        """Each layer's `CopyPlan.store`; returns the blocks each wrote, by layer."""
        batches = self._batches("store", kv_caches, block_ids, pages, page_ids)
        return {n: self.plans[n]._store(*b) for n, b in batches.items()}

    def load(self, pages, page_ids, kv_caches: dict, block_ids) -> dict:
        """Each layer's `CopyPlan.load`; returns the blocks each filled, by layer."""
        batches = self._batches("load", kv_caches, block_ids, pages, page_ids)
        return {n: self.plans[n]._move(b[2], b[0], b[1], to_pages=False) for n, b in batches.items()}

    def _batches(self, op, kv_caches, block_ids, pages, page_ids) -> dict:
        """(blocks, page ids, views) of each layer as its plan checks them (`CopyPlan._batch`: ids
        copied once, so what runs is what was checked), every layer's tensors checked against
        all the pages and, on load, the blocks each layer fills against every other layer's,
        before anything moves."""
        if not isinstance(kv_caches, dict) or set(kv_caches) != set(self.plans):
            got = sorted(kv_caches, key=repr) if isinstance(kv_caches, dict) else type(kv_caches).__name__
            raise LayoutMismatch(f"{op}: kv_caches must be a dict of the planned layers {sorted(self.plans)[:4]}..., "
                                 f"got {got if not isinstance(got, list) else got[:4]}")
        whole = None
        if isinstance(pages, dict):
            if set(pages) != set(self.plans):
                raise LayoutMismatch(f"{op}: pages by layer must name every planned layer, got {sorted(pages, key=repr)[:4]}")
            views = pages
        else:
            if not isinstance(pages, torch.Tensor) or pages.dtype != torch.uint8 or pages.dim() != 2 \
                    or pages.shape[1] != self.page_size_bytes:
                got = (tuple(pages.shape), pages.dtype) if isinstance(pages, torch.Tensor) else type(pages)
                raise LayoutMismatch(f"{op}: pages must be a (num_pages, {self.page_size_bytes}) uint8 tensor of model "
                                     f"pages (or a dict of each layer's), got {got}")
            whole = page_bytes(pages, self.page_size_bytes, "pages", op)
            views = {n: pages[:, o:o + self.plans[n].mapping.canonical_page_size_bytes]
                     for n, o in self.offsets.items()}
        for name, x in (("block_ids", block_ids), ("page_ids", page_ids)):
            if isinstance(x, dict) and set(x) != set(self.plans):
                odd = sorted(set(x) ^ set(self.plans), key=repr)
                raise LayoutMismatch(f"{op}: {name} by layer must name exactly the planned layers; "
                                     f"{odd[:4]} {'is' if len(odd) == 1 else 'are'} not in both")
        # read once, here: one generator handed to every layer would be used up by the first
        block_ids, page_ids = (_read_once(x, name, op) for x, name in ((block_ids, "block_ids"), (page_ids, "page_ids")))
        out = {}
        for n, p in self.plans.items():
            ids = [x[n] if isinstance(x, dict) else x for x in (block_ids, page_ids)]
            try:
                out[n] = p._batch(op, kv_caches[n], ids[0], views[n], ids[1], unique_pages=op == "store",
                                  unique_blocks=op == "load")
            except (LayoutMismatch, ConfigError) as e:
                raise type(e)(f"layer {n!r}: {e}") from None
        if op == "load":
            self._apart_on_load(kv_caches, {n: b[0] for n, b in out.items()})
        spans = [whole] if whole is not None else [page_bytes(v, self.plans[n].mapping.canonical_page_size_bytes,
                                                              "pages", op) for n, v in views.items()]
        if op == "store":  # layers' pages that share memory: one layer's store would overwrite another's
            for i, a in enumerate(spans):
                for b in spans[:i]:
                    check_apart(a, b, op, "two layers' pages")
        for n, p in self.plans.items():  # a layer's tensor inside another layer's pages: each would overwrite
            for seg in layer_segments(kv_caches[n], p.mapping, "kv", op):
                for cb in spans:
                    check_apart(seg.bytes, cb, op, f"layer {n!r}'s kv and the pages")
        return out

    def _apart_on_load(self, kv_caches: dict, blocks: dict) -> None:
        """No byte one layer's load fills is a byte another's fills: layers may share a tensor (a
        hybrid model's groups do) where they fill other blocks of it, never the same memory."""
        check_blocks_apart([(f"layer {n!r}'s kv", layer_segments(kv_caches[n], p.mapping, "kv", "load"), blocks[n])
                            for n, p in self.plans.items()], "load",
                           "both layers would fill those bytes, and the one loaded later overwrite the other")


def _by_election(m: CanonicalPageMapping) -> list:
    """The mapping's runs grouped by the writer election they follow, `[((n, w), runs), ...]`."""
    groups: dict = {}
    for r, e in zip(m.runs, m.elections):
        groups.setdefault(e, []).append(r)
    return sorted(groups.items())


@functools.lru_cache(maxsize=256)
def _split(runs: tuple, length: int) -> tuple:
    """`(stretch, run)` of each run, cut at the stretches of `length` bytes of the local page
    (`torch_copy.in_segments`, remembered: a plan cuts the same runs every batch)."""
    return in_segments(runs, length, LOCAL, CANONICAL)


def _words(raw: torch.Tensor, w: int) -> torch.Tensor:
    """The bytes `raw` (a `page_bytes` view) as words of `w` bytes."""
    dtype = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[w]
    words = torch.empty(0, dtype=dtype, device=raw.device).set_(raw.untyped_storage())
    return words.as_strided((raw.shape[0], raw.shape[1] // w), (raw.stride(0) // w, 1), raw.storage_offset() // w)


_CHUNK = 1 << 21
"""Bytes of fragments gathered at a time on the CPU: the chunk is still in cache when it is scattered."""
_ACROSS = 1 << 25
"""Bytes of fragments a chunk carries between devices: each carry waits for the copy, so fewer, larger."""
_DEVICE = 1 << 28
"""Bytes of fragments gathered at a time on a GPU: each chunk costs kernel launches, not cache."""


def _rows(words: torch.Tensor, offset: int, stride: int, r, which: torch.Tensor):
    """The run's fragments of blocks `which` as rows of one `(rows, fragment words)` view of
    the whole buffer, and their row numbers `(blocks, rows a block)`, where every fragment
    starts on a row (offsets, strides and the block stride multiples of the fragment); else
    None. Fragments that continue each other are one row a block. Rows of a dense 2-D view
    copy at the speed of whole pages, where a 3-D strided view goes element-wise."""
    w = words.element_size()
    if r.num_fragments > 1 and stride == r.fragment_size:  # one dense stretch a block: one row each
        r = r._replace(fragment_size=r.fragment_size * r.num_fragments, num_fragments=1)
    n = r.fragment_size // w
    step = words.stride(0)
    if n == 0 or (offset // w) % n or (step % n if words.shape[0] > 1 else 0) or \
            (r.num_fragments > 1 and (stride // w) % n):
        return None
    total = ((words.shape[0] - 1) * step + words.shape[1]) // n
    rows = words.as_strided((total, n), (n, 1), words.storage_offset())
    frag = offset // w // n + torch.arange(r.num_fragments, dtype=torch.int64, device=which.device) * (stride // w // n)
    return rows, which[:, None] * (step // n) + frag[None, :]  # (blocks, rows a block)


class _Frags(NamedTuple):
    """A side on the CPU through numpy: `frags` the run's fragments of every block (`_np_view`),
    `ids` the blocks asked for, `dtype` the words."""
    frags: object
    ids: object
    dtype: torch.dtype

    def take(self, lo: int, hi: int) -> torch.Tensor:
        return torch.from_numpy(self.frags[self.ids[lo:hi]].view(_np.uint8)).view(self.dtype)

    def put(self, lo: int, hi: int, data: torch.Tensor) -> None:
        bytes_ = data.contiguous().view(torch.uint8).numpy()
        self.frags[self.ids[lo:hi]] = bytes_.view(self.frags.dtype).reshape(-1, self.frags.shape[1])


class _Indexed(NamedTuple):
    """A side through torch's index ops: `take(lo, hi)` and `put(lo, hi, data)` (`_side`)."""
    take: Callable
    put: Callable


def _side(words: torch.Tensor, offset: int, stride: int, r, which: torch.Tensor):
    """One side of run `r` for blocks `which`, whose `take(lo, hi)` gives the fragments of
    blocks `which[lo:hi]` as words on this side's device, one block a row in fragment order,
    and `put(lo, hi, data)` writes such rows there. On the CPU (with numpy) an array of
    whole fragments (`_Frags`) indexed a block at a time; elsewhere whole rows of a dense
    2-D view (`_rows`) by torch's index ops, else a 3-D strided view of the run."""
    if _np is not None and words.device.type == "cpu":
        return _Frags(_np_view(words, offset, stride, r), which.cpu().numpy(), words.dtype)
    width = r.num_fragments * r.fragment_size // words.element_size()  # words of the run a block
    rows = _rows(words, offset, stride, r, which.to(words.device))  # (blocks moved, rows made there)
    if rows:
        buf, nums = rows
        return _Indexed(lambda lo, hi: buf.index_select(0, nums[lo:hi].reshape(-1)).reshape(-1, width),
                        lambda lo, hi, data: buf.index_copy_(0, nums[lo:hi].reshape(-1),
                                                             data.reshape(-1, buf.shape[1])))
    view, ids = _view(words, offset, stride, r), which.to(words.device)
    return _Indexed(lambda lo, hi: view.index_select(0, ids[lo:hi]).reshape(-1, width),
                    lambda lo, hi, data: view.index_copy_(0, ids[lo:hi], data.reshape(-1, *view.shape[1:])))


def _copy_run(src: tuple, dst: tuple, r) -> None:
    """Copy run `r` of blocks `src[3]` into blocks `dst[3]` (each side `(words, offset, stride,
    which)`), a chunk of blocks at a time: gathered on the source's device (`_side`), carried
    to the destination's where the two differ (a GPU's KV cache and pages in host memory),
    and scattered there, while still in cache where both are one. Numpy to numpy, each
    fragment is one memcpy each way (an element of both sides' arrays), fragments of whole
    4 KiB multiples through a staging array placed apart from both sides (`_copy_staged`)."""
    (sw, so, ss, sb), (dw, do, ds, db) = src, dst
    if r.num_fragments > 1 and ss == ds == r.fragment_size:  # dense on both sides: one stretch a block
        r = r._replace(fragment_size=r.fragment_size * r.num_fragments, num_fragments=1)
    chunk = _ACROSS if sw.device != dw.device else _CHUNK if sw.device.type == "cpu" else _DEVICE
    per = max(1, chunk // max(1, r.fragment_size * r.num_fragments))
    a, b = _side(sw, so, ss, r, sb), _side(dw, do, ds, r, db)
    if isinstance(a, _Frags) and isinstance(b, _Frags):
        if not _copy_staged(src, a, b, r, per):
            for at in range(0, sb.numel(), per):  # numpy indexes the block axis of strided views: one index a block
                b.frags[b.ids[at:at + per]] = a.frags[a.ids[at:at + per]]
        return
    for at in range(0, sb.numel(), per):
        if sw.device == dw.device:
            b.put(at, at + per, a.take(at, at + per))
        else:
            b.put(at, at + per, _carried(a, at, at + per, dw.device))


def _np_elements(words: torch.Tensor, offset: int, stride: int, r):
    """The buffer from the run's first fragment on as one C-contiguous 1-D numpy array of
    whole fragments, and the elements from one block to the next and from one fragment to
    the next: `(elements, per_block, between)`; None where a fragment would not start on one."""
    w, f = words.element_size(), r.fragment_size
    step = words.stride(0) * w
    if step % f or (r.num_fragments > 1 and stride % f):
        return None
    raw, base = _np_bytes(words, offset)
    elements = _np.ndarray(((raw.size - base) // f,), dtype=_np.dtype((_np.void, f)), buffer=raw, offset=base)
    return elements, step // f, (stride // f if r.num_fragments > 1 else 0)


def _copy_staged(src: tuple, a: _Frags, b: _Frags, r, per: int) -> bool:
    """Side `a`'s fragments (of `src`, `_copy_run`'s source) into side `b`'s, numpy to numpy
    through a staging array placed apart from both sides modulo 4 KiB, where fragments are
    whole 4 KiB multiples and each starts on an element of the source (`_np_elements`);
    False, having copied nothing, elsewhere.
    On AMD EPYC (glibc 2.36's `rep movsb`) a copy of 4 KiB or more whose destination lies 1
    to 31 bytes past its source modulo 4 KiB runs at a tenth of the speed, and the temporary
    numpy makes for a gather lands 16 bytes past a page where it is mapped afresh: a store of
    8 KiB fragments of page-aligned KV ran at 1.5-1.8 GB/s in one process of two, 7 here.
    `np.take` gathers into the array given (a strided source it would first copy whole:
    hence the contiguous elements); `mode="clip"` needs no buffer, every index is checked
    against the elements first."""
    words, offset, stride, _ = src
    elems = _np_elements(words, offset, stride, r) if r.fragment_size % _STAGED == 0 else None
    if elems is None:
        return False
    elements, per_block, between = elems
    if not a.ids.size:
        return True
    if int(a.ids.max()) * per_block + (r.num_fragments - 1) * between >= elements.size:
        return False  # (never, for checked ids: `mode="clip"` would clamp such an index)
    frag = _np.arange(r.num_fragments, dtype=_np.int64) * between
    stage = _apart(per * r.num_fragments, r.fragment_size, elements.ctypes.data, b.frags.ctypes.data)
    for at in range(0, a.ids.size, per):
        ids = a.ids[at:at + per]
        out = stage[:ids.size * r.num_fragments]
        _np.take(elements, (ids[:, None] * per_block + frag[None, :]).reshape(-1), axis=0, out=out, mode="clip")
        b.frags[b.ids[at:at + per]] = out.reshape(ids.size, r.num_fragments)
    return True


_STAGED = 4096
"""Fragments of a whole multiple of this many bytes are staged (`_copy_staged`): glibc copies
shorter ones without `rep movsb`, where staging would only add its cost, and a staging array
lies apart from every fragment only where each is a whole 4 KiB apart from the next."""
_STAGE = threading.local()
"""Each thread's staging bytes for `_apart`, kept: fresh ones would be mapped and faulted in each call."""


def _apart(n: int, f: int, src: int, dst: int):
    """An array of `n` fragments of `f` bytes at an address halfway between source address
    `src` and destination address `dst` modulo 4 KiB (at least 64 bytes from either): for
    every fragment where fragments, and each side's strides, are whole multiples of 4 KiB.
    A thread keeps one of up to twice a chunk's bytes; a larger one is made for the call."""
    g = (dst - src) % 4096
    at = (src + (g // 2 if g >= 128 else (g + 4096) // 2)) % 4096
    need = n * f + 4096
    raw = getattr(_STAGE, "raw", None)
    if raw is None or raw.size < need:
        raw = _np.empty(need, dtype=_np.uint8)
        if need <= 2 * _CHUNK + 4096:
            _STAGE.raw = raw
    return _np.ndarray((n,), dtype=_np.dtype((_np.void, f)), buffer=raw, offset=(at - raw.ctypes.data) % 4096)


def _carried(a, lo: int, hi: int, device: torch.device) -> torch.Tensor:
    """Side `a`'s fragments of blocks `lo:hi`, on `device`. From a GPU to the host they pass
    through pinned memory, which torch's caching host allocator hands out again chunk after
    chunk: each carry is one DMA, where a fresh pageable chunk of many MiB is mapped and
    faulted in anew each time (offload stores of 8,192 blocks on an H200: 3.0-6.0 GB/s,
    were 1.1-3.3). To a GPU a chunk goes from the host's gather as it is: gathering into
    pinned memory with `np.take(out=)` ran at a tenth of the speed: numpy first makes a
    strided source contiguous, here a copy of the whole page buffer (4,096 of 16,384 pages
    of 64 KiB on this project's CPU: 69 ms, the index 16 ms)."""
    data = a.take(lo, hi)
    if data.device.type == "cuda" and device.type == "cpu":
        host = torch.empty(data.shape, dtype=data.dtype, pin_memory=True)
        return host.copy_(data)  # (a blocking copy: the host bytes are there when it returns)
    return data.to(device)


def _np_view(words: torch.Tensor, offset: int, stride: int, r):
    """The run's fragments of every block as a numpy `(blocks, fragments)` array over the same
    memory whose elements are whole fragments (a void type of `fragment_size` bytes): numpy
    copies each with one memcpy, where a `(blocks, fragments, words)` view goes word by word."""
    w = words.element_size()
    raw, base = _np_bytes(words, offset)
    return _np.ndarray((words.shape[0], r.num_fragments), dtype=_np.dtype((_np.void, r.fragment_size)), buffer=raw,
                       offset=base, strides=(words.stride(0) * w, stride if r.num_fragments > 1 else r.fragment_size))


def _np_bytes(words: torch.Tensor, offset: int) -> tuple:
    """The whole storage of `words` as a numpy byte array, and where byte `offset` of its first row is."""
    raw = torch.empty(0, dtype=torch.uint8).set_(words.untyped_storage()).numpy()
    return raw, words.storage_offset() * words.element_size() + offset


def _view(words: torch.Tensor, offset: int, stride: int, r) -> torch.Tensor:
    """One run's fragments of every block: `(blocks, fragments, fragment words)`."""
    w = words.element_size()
    return words.as_strided((words.shape[0], r.num_fragments, r.fragment_size // w),
                            (words.stride(0), stride // w, 1), words.storage_offset() + offset // w)


def _word(m: CanonicalPageMapping, segs: tuple) -> int:
    """The widest word dividing every size, offset and stride of the plan (and the tensor's bases)."""
    values = [m.local_page_size_bytes, m.canonical_page_size_bytes]
    for seg in segs:
        values += [seg.start, seg.bytes.storage_offset(), seg.bytes.stride(0)]
    for r in m.runs:
        values += [r.local_offset, r.canonical_offset, r.fragment_size]
        if r.num_fragments > 1:
            values += [r.local_stride, r.canonical_stride]
    return next(w for w in (8, 4, 2, 1) if all(v % w == 0 for v in values))


_INTEGER = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _read_once(ids, name: str, op: str):
    """Ids (or a dict of each layer's) as tensors of their own, each read once."""
    if isinstance(ids, dict):
        return {k: _ids(v, f"{name}[{k!r}]", op) for k, v in ids.items()}
    return _ids(ids, name, op)


def _ids(ids, name: str, op: str) -> torch.Tensor:
    """Ids as a 1-D int64 CPU tensor of their own; floats and bools are refused, never truncated."""
    if isinstance(ids, (dict, set, frozenset, str, bytes)):  # no order, or characters: never ids
        raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints, got a "
                             f"{type(ids).__name__}")
    try:
        if not isinstance(ids, torch.Tensor) and not hasattr(ids, "__array__"):
            ids = list(ids)
            if any(isinstance(x, bool) or type(x).__name__ == "bool_" or
                   isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in ids):  # [0, True] is no [0, 1]
                raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints, got a bool")
        try:
            t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(ids)
        except ValueError:  # an array of negative strides (numpy's reversed view): its values, copied
            if not hasattr(ids, "__array__") or not hasattr(ids, "copy"):
                raise
            t = torch.as_tensor(ids.copy())
    except (TypeError, ValueError, RuntimeError):
        raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints") from None
    if t.device.type == "meta":  # no values to read
        raise LayoutMismatch(f"{op}: {name} are on the meta device: they hold no values")
    if t.numel() == 0 and t.dtype == torch.float32:
        t = t.to(torch.int64)  # an empty list has no element type to refuse
    wanted = (torch.int64,) if isinstance(ids, torch.Tensor) else _INTEGER  # a tensor says int64 itself
    if t.dim() != 1 or t.dtype not in wanted:
        raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints, "
                             f"got {t.dim()}-D {t.dtype}")
    # always a copy of its own: ids that live in the kv tensor or the pages (or that another
    # thread edits) would otherwise change under the copy that reads them, after their check
    return t.to(device="cpu", dtype=torch.int64, copy=True)


def _repeats(t: torch.Tensor, n: int) -> bool:
    """Whether ids `t`, each in [0, n), hold one twice: by a table of n flags where n is
    not many times the ids (a batch's blocks or pages), else by sorting them. A sort is
    what `torch.unique` does, several times slower on the CPU (0.47 ms for 8,192 ids,
    a table 0.07 ms): at 8,192 ids it was half the time of a batch's checks, host work that
    bounds a plan on a GPU."""
    if n <= 8 * t.numel() + 4096:
        seen = torch.zeros(n, dtype=torch.bool)
        seen[t] = True
        return int(seen.sum()) != t.numel()
    s = _np.sort(t.numpy()) if _np is not None else torch.sort(t).values
    return bool((s[1:] == s[:-1]).any())


def _in_range(t: torch.Tensor, n: int, name: str, op: str) -> None:
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        bad = int(t[(t < 0) | (t >= n)][0])
        valid = f"valid: 0 to {n - 1}" if n else "there are none"
        raise LayoutMismatch(f"{op}: {name} holds {bad}, outside the {n} there are ({valid})")


def _merge(d: torch.Tensor) -> torch.Tensor:
    """Merge consecutive triples whose source and destination both continue the previous one."""
    if d.shape[0] < 2:
        return d
    cont = (d[1:, 0] == d[:-1, 0] + d[:-1, 2]) & (d[1:, 1] == d[:-1, 1] + d[:-1, 2])
    start = torch.ones(d.shape[0], dtype=torch.bool)
    start[1:] = ~cont
    group = torch.cumsum(start.to(torch.int64), 0) - 1
    sizes = torch.zeros(int(group[-1]) + 1, dtype=torch.int64).index_add_(0, group, d[:, 2])
    heads = d[start]
    return torch.stack([heads[:, 0], heads[:, 1], sizes], 1)

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
from typing import NamedTuple
from dataclasses import dataclass

import torch

from ..errors import ConfigError, LayoutMismatch
from ..mapping import CanonicalPageMapping
from ..runtime.runs import check_runs
from .ids import id_tensor, in_range, merge_triples, read_once, has_repeats
from .move import copy_run, plan_word, as_words
from .views import (check_apart, check_blocks_apart, check_stretches_apart, in_segments,
                    layer_segments, outer_of, page_bytes, stretch_length, stretch_starts)


def plan(mapping: CanonicalPageMapping, kv) -> "CopyPlan":
    """A plan for `kv`: a tensor holding the mapping's local page in each block, or the
    list of tensors that view it (a Mamba layer's conv and SSM state), checked against the
    tensors the mapping was derived for (`copy.views.layer_bytes`)."""
    check_runs(mapping, "plan")  # a mapping, every run inside both pages, every writer election sound
    if not mapping.runs:  # a store would write nothing and a load fill nothing, each reporting its blocks done
        raise ConfigError(f"plan: the mapping holds no run: not one byte of its {mapping.local_page_size_bytes}-byte "
                          f"local page has a canonical byte")
    segs = layer_segments(kv, mapping, "kv", "plan")
    word = plan_word(mapping, segs)
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
                src, dst = (local[seg], *r.src, blocks), (canon, *r.dst, ids)  # (a CopyRun's src is the local page)
                if not to_pages:
                    src, dst = dst, src
                copy_run(src, dst, r)
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
        blocks, ids = id_tensor(block_ids, "block_ids", "descriptors"), id_tensor(page_ids, "page_ids", "descriptors")
        if blocks.numel() != ids.numel():
            raise LayoutMismatch(f"descriptors: {blocks.numel()} block ids but {ids.numel()} page ids")
        for name, t in (("block_ids", blocks), ("page_ids", ids)):
            if t.numel() and int(t.min()) < 0:
                raise LayoutMismatch(f"descriptors: {name} holds {int(t.min())}; ids are not negative")
        dst_name, dst = ("page_ids", ids) if store else ("block_ids", blocks)
        if dst.numel() and has_repeats(dst, int(dst.max()) + 1):
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
        return merge_triples(torch.cat(out)) if len(out) > 1 else out[0]

    def _triples(self, runs, blocks, ids, step, kv_bases, pages_base, store) -> torch.Tensor:
        """`kv_bases[s]`: where stretch s of block 0 is (`kv_base` plus its place in the tensor)."""
        frags = sorted((kv_bases[s] + r.local_offset + i * r.local_stride, r.canonical_offset + i * r.canonical_stride,
                        r.fragment_size) for s, r in _split(tuple(runs), self.length) for i in range(r.num_fragments))
        f = torch.tensor(frags, dtype=torch.int64).reshape(-1, 3)
        lo = blocks[:, None] * step + f[None, :, 0]
        co = pages_base + ids[:, None] * self.mapping.canonical_page_size_bytes + f[None, :, 1]
        size = f[None, :, 2].expand_as(lo)
        src, dst = (lo, co) if store else (co, lo)
        return merge_triples(torch.stack([src.reshape(-1), dst.reshape(-1), size.reshape(-1)], 1))

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
        blocks, ids = id_tensor(block_ids, "block_ids", op), id_tensor(page_ids, "page_ids", op)
        if blocks.numel() != ids.numel():
            raise LayoutMismatch(f"{op}: {blocks.numel()} block ids but {ids.numel()} page ids")
        in_range(blocks, segs[0].bytes.shape[0], "block_ids", op)
        in_range(ids, pages.shape[0], "page_ids", op)
        for name, t, n, must in (("page_ids", ids, pages.shape[0], unique_pages),
                                 ("block_ids", blocks, segs[0].bytes.shape[0], unique_blocks)):
            if must and has_repeats(t, n):
                raise LayoutMismatch(f"{op}: {name} repeats an id: two sources would write one destination")
        return blocks, ids, self._words_of(segs, cb)  # (ids on the CPU: each side moves them to its device once)

    def _words_of(self, segs: tuple, cb: torch.Tensor) -> tuple[tuple, torch.Tensor]:
        """Both sides (`(blocks, bytes)` views: the local page's stretches, the pages) as words
        of w bytes, w the plan's word or less where a base demands."""
        w = self.word
        views = [s.bytes for s in segs] + [cb]
        while w > 1 and any(x % w for t in views for x in (t.storage_offset(), t.stride(0))):
            w //= 2
        return tuple(as_words(s.bytes, w) for s in segs), as_words(cb, w)


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
        from ..runtime.formats import model_page_id
        return model_page_id(self.layout or tuple((n, self.offsets[n], p.mapping.canonical_page_size_bytes,
                                                   p.mapping.format_id) for n, p in self.plans.items()))

    def store(self, kv_caches: dict, block_ids, pages, page_ids) -> dict:
        """Each layer's `CopyPlan.store`; returns the blocks each wrote, by layer (`pages` may be a
        `ModelPages` of this plan's format)."""
        pages = self._same_format(pages, None, "store")
        batches = self._batches("store", kv_caches, block_ids, pages, page_ids)
        return {n: self.plans[n]._store(*b) for n, b in batches.items()}

    def stamped(self, pages) -> "ModelPages":
        """`pages` (what `store` and `load` take) with this plan's page format: hand the record to
        the loader, whose `load` then compares the format itself."""
        return ModelPages(pages, self.format_id, self.layout)

    def load(self, pages, page_ids, kv_caches: dict, block_ids, format_id: str | None = None) -> dict:
        """Each layer's `CopyPlan.load`; returns the blocks each filled, by layer. The stored pages'
        format is compared with this plan's before anything moves (`LayoutMismatch` naming the
        layers that differ) where the pages say it: `pages` a `ModelPages` (the storer's
        `stamped`), or `format_id` the storer's `ModelPlan.format_id`. Plain pages with no
        `format_id` are loaded as before: the caller vouches that one format stored them."""
        pages = self._same_format(pages, format_id, "load")
        batches = self._batches("load", kv_caches, block_ids, pages, page_ids)
        return {n: self.plans[n]._move(b[2], b[0], b[1], to_pages=False) for n, b in batches.items()}

    def _same_format(self, pages, format_id: str | None, op: str):
        """The page tensor(s) of `pages`, once the format they were stored under (a `ModelPages`'s,
        or `format_id`) is found to be this plan's; raises `LayoutMismatch` naming the layers whose
        name, place, size or format differ."""
        layout = ()
        if isinstance(pages, ModelPages):
            if format_id is not None and format_id != pages.format_id:
                raise LayoutMismatch(f"{op}: format_id {format_id!r} is not the format of the pages given "
                                     f"({pages.format_id!r})")
            pages, format_id, layout = pages.pages, pages.format_id, pages.layout
        if format_id is None or format_id == self.format_id:
            return pages
        if not isinstance(format_id, str):
            raise ConfigError(f"{op}: format_id must be a ModelPlan.format_id (a str), got {type(format_id).__name__}")
        raise LayoutMismatch(f"{op}: the pages were stored as model page format {format_id!r}, and this plan's is "
                             f"{self.format_id!r}: {_layout_differs(layout, self.layout)}")

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
        block_ids, page_ids = (read_once(x, name, op) for x, name in ((block_ids, "block_ids"), (page_ids, "page_ids")))
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


class ModelPages(NamedTuple):
    """Model pages with the format they hold (`ModelPlan.stamped`): `pages` as `ModelPlan.store`
    and `load` take them, `format_id` the storing plan's `ModelPlan.format_id`, `layout` its
    `ModelPlan.layout` (which layers differ, said on a mismatch)."""
    pages: object
    format_id: str
    layout: tuple = ()


def _layout_differs(stored: tuple, mine: tuple) -> str:
    """Which layers of two model pages' layouts ((name, offset, bytes, format_id) each) differ."""
    if not stored:
        return "a page of one format loaded as another reads other bytes (compare the layers' format ids)"
    a, b = {x[0]: x[1:] for x in stored}, {x[0]: x[1:] for x in mine}
    only = sorted(set(a) ^ set(b))
    if only:
        return (f"layers {', '.join(map(repr, only[:4]))}{' ...' if len(only) > 4 else ''} are in one page and not "
                f"the other (layers named differently on load?)")
    odd = [n for n in sorted(a) if a[n] != b[n]]
    return (f"layer{'s' if len(odd) > 1 else ''} {', '.join(map(repr, odd[:4]))} differ (offset, canonical bytes, "
            f"format id: {a[odd[0]]} stored, {b[odd[0]]} here)" if odd else "their layouts are one (another id?)")


def _by_election(m: CanonicalPageMapping) -> list:
    """The mapping's runs grouped by the writer election they follow, `[((n, w), runs), ...]`."""
    groups: dict = {}
    for r, e in zip(m.runs, m.elections):
        groups.setdefault(e, []).append(r)
    return sorted(groups.items())


@functools.lru_cache(maxsize=256)
def _split(runs: tuple, length: int) -> tuple:
    """`(stretch, run)` of each run, cut at the stretches of `length` bytes of the local page
    (`copy.views.in_segments`, remembered: a plan cuts the same runs every batch)."""
    return in_segments(runs, length, "src")



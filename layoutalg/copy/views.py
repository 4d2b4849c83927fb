"""A layer's tensors as the bytes of its pages: each block one dense page (`page_bytes`,
`layer_bytes`), or stretches apart (`layer_segments`: a page held by several tensors, or by
one tensor whose blocks interleave); the runs cut where those stretches end (`in_segments`);
and the checks that two tensors, or two batches of blocks, share no byte (`check_apart`,
`check_blocks_apart`). Every refusal names the tensor, the dimension and the expected versus
the actual stride; what the copy plans (`executor`) and direct plans (`direct`) read.
"""
from __future__ import annotations

import bisect
from typing import NamedTuple

import torch

from ..errors import LayoutMismatch
from ..mapping import MAX_STRETCHES, CanonicalPageMapping
from ..verdicts import Reason


def page_bytes(pages: torch.Tensor, page_size: int, name: str = "pages", op: str = "page_bytes") -> torch.Tensor:
    """The memory of `pages` (dim 0 is the block) as a (num_blocks, page_size) uint8 view.

    Reads the storage itself, so the page keeps its physical byte order whatever the
    strides of the other dimensions (a transposed HND view stays HND in memory).
    Raises `LayoutMismatch` when a block does not hold one page, is not one dense page
    in memory (a padded view such as `kv[..., :64]` of a 128-wide tensor), or the blocks
    overlap (torch keeps every view inside its storage, so the pages are then in bounds).
    """
    if not isinstance(pages, torch.Tensor):
        raise LayoutMismatch(f"{op}: {name} must be a torch.Tensor, got {type(pages).__name__}")
    if pages.dim() == 0:
        raise LayoutMismatch(f"{op}: {name} tensor has no block dimension (it is a scalar)")
    elem = pages.element_size()
    held = pages[0].numel() * elem if pages.shape[0] else page_size
    if held != page_size:
        raise LayoutMismatch(f"{op}: {name} tensor: one block is {tuple(pages.shape[1:])} elements of {elem} bytes = "
                             f"{held} bytes, expected a {page_size}-byte page")
    _check_dense(pages, name, op)
    step = pages.stride(0) * elem
    if pages.shape[0] > 1 and step < page_size:
        raise LayoutMismatch(f"{op}: {name} tensor, dimension 0 (block): stride {pages.stride(0)} elements "
                             f"({step} bytes), expected at least {page_size} bytes, one page")
    raw = torch.empty(0, dtype=torch.uint8, device=pages.device).set_(pages.untyped_storage())
    return raw.as_strided((pages.shape[0], page_size), (step, 1), pages.storage_offset() * elem)


_RAW = (torch.uint8, torch.int8)
"""Tensors of these may be a page's raw bytes (vLLM allocates a Mamba layer's pages as int8)."""


def layer_bytes(kv, m: CanonicalPageMapping, name: str = "kv", op: str = "layer_bytes") -> torch.Tensor:
    """A layer's local pages as a `(num_blocks, local page)` uint8 view, from its tensor or
    tensors, checked against the views the mapping was derived for (`m.tensors`).

    - A uint8 (or int8) tensor is the pages' own bytes: any dense `(blocks, ...)` view of them, unless
      the view's elements are bytes (vLLM's fp8 and per-token-head quantised caches are uint8
      tensors of the logical shape): then it is checked as a typed tensor, or is the raw
      `(blocks, page)` bytes.
    - A typed tensor must be the mapping's one view: shape, strides, element size and, where
      both name it, element type.
    - A list or tuple (vLLM's Mamba layer: conv state, SSM state) must be the mapping's
      views, in order, over one memory: each tensor where its view says in every block,
      the blocks one stride apart, and the whole page inside that memory.
    Raises `LayoutMismatch` naming the tensor, the dimension and the expected and actual
    stride, offset or size.
    """
    views = m.tensors
    if outer_of(views, name, op):  # no list, no byte view of it either: neither is its pages block first
        raise LayoutMismatch(f"{op}: {name}: the mapping's tensor '{views[0].name}' holds the page in "
                             f"{views[0].segments} stretches apart (dims {tuple(views[0].shape[:views[0].outer])} "
                             f"before the block): its pages have no (blocks, page) view; `layer_segments` gives "
                             f"one a stretch, from that one tensor")
    if isinstance(kv, (list, tuple)):
        if not kv or not all(isinstance(t, torch.Tensor) for t in kv):
            kinds = ", ".join(sorted({type(t).__name__ for t in kv})) or "nothing"
            raise LayoutMismatch(f"{op}: {name} must be a torch.Tensor, got {type(kv).__name__} (of {kinds}); "
                                 f"a page viewed by several tensors takes a list of those tensors")
        return _from_views(list(kv), views, m.local_page_size_bytes, name, op)
    if isinstance(kv, torch.Tensor) and views and (kv.dtype not in _RAW or (
            len(views) == 1 and views[0].element == 1 and (kv.dim() != 2 or len(views[0].shape) == 1))):
        if len(views) > 1:
            raise LayoutMismatch(f"{op}: {name} is one tensor but the page is viewed by {len(views)} "
                                 f"({', '.join(v.name for v in views)}): give them as a list, in that order")
        _check_view(kv, views[0], f"{name}", op)
    elif isinstance(kv, torch.Tensor) and len(views) == 1 and kv.dim() != 2:
        _check_view(kv, byte_form(views[0], name, op), f"{name} (bytes)", op)  # a uint8 tensor, a typed view
    elif isinstance(kv, torch.Tensor) and not views and kv.dim() > 2 and m.format_id:
        # derived from the layer's sizes alone: its format assumes the spec's order of the page, and
        # another order of the same dims would pass as it. Where the family's box is known, the
        # tensor is taken as the runtime would have taken it (a mapping built by hand, with no
        # format, describes bytes as they lie)
        page_bytes(kv, m.local_page_size_bytes, name, op)  # (a tensor that is no pages at all says so first)
        why = "the mapping names no tensor view nor the box its family reads (it was derived from the layer's " \
              "sizes alone, or from a tensor no family could read as this layer's: derivation logs why)"
        if m.reads:
            from ..runtime.tensors import as_it_lies
            from ..runtime.records import TensorLayout
            t = TensorLayout(tuple(kv.shape), tuple(kv.stride()), kv.element_size())
            lies = as_it_lies(t, kv.shape[0], m.local_page_size_bytes, True, m.reads[0])
            why = lies if isinstance(lies, Reason) else None
        if why:
            raise LayoutMismatch(f"{op}: {name} has dims {tuple(kv.shape)}: {why}; give its pages as (blocks, page), "
                                 f"or derive the mapping with this tensor")
    return page_bytes(kv, m.local_page_size_bytes, name, op)


def byte_form(v, name: str, op: str):
    """View `v` as its tensor's `.view(torch.uint8)` sees it: the last dim widened by the
    element bytes. A uint8 tensor of more dims than `(blocks, page)` given for a typed view
    is checked as that: its shape and strides say where each element lies, and a byte view
    of another layout of one size (HND for NHD) must not pass as raw page bytes.

    Examples:
        >>> from layoutalg.mapping import CopyRun, TensorView
        >>> tuple(byte_form(TensorView("kv", 0, (2, 4, 8), (32, 8, 1), 2), "kv", "plan"))[2:5]
        ((2, 4, 16), (64, 16, 1), 1)
    """
    if not v.shape or v.strides[-1] != 1 and v.shape[-1] != 1:
        raise LayoutMismatch(f"{op}: {name} is a uint8 tensor of dims {'' if not v.shape else 'after the block '}"
                             f"but the mapping's tensor '{v.name}' {tuple(v.shape)} (strides {tuple(v.strides)}) "
                             f"has no byte view: give that tensor, or its pages as (blocks, page) bytes")
    e = v.element
    return v._replace(shape=tuple(v.shape[:-1]) + (v.shape[-1] * e,),
                      strides=tuple(x * e for x in v.strides[:-1]) + (1,), element=1, dtype="")


def outer_of(views: tuple, name: str = "kv", op: str = "outer_of") -> int:
    """How many dims of the mapping's one tensor come before its block dim (0: block first).
    Raises `LayoutMismatch` where a view says so but is not the page's only view, or where
    `outer` is no whole number of its dims."""
    k = [getattr(v, "outer", 0) for v in views]
    if not any(x != 0 for x in k):
        return 0
    v = views[0]
    if len(views) != 1:
        raise LayoutMismatch(f"{op}: {name}: a page of {len(views)} tensors ({', '.join(x.name for x in views)}) "
                             f"puts dims before the block in one of them: only a page of one tensor may")
    if type(v.outer) is not int or not isinstance(v.shape, tuple) or not isinstance(v.strides, tuple) or \
            len(v.strides) != len(v.shape) or not 0 < v.outer <= len(v.shape):
        raise LayoutMismatch(f"{op}: {name}: the view '{v.name}' puts the block after {v.outer!r} of its "
                             f"dims {v.shape!r}; expected a whole number of them")
    return v.outer


class Segment(NamedTuple):
    """One stretch of a layer's local page, `start` bytes into it: a `(blocks, length)` uint8
    view of the memory that holds it in every block."""
    start: int
    bytes: torch.Tensor


def layer_segments(kv, m: CanonicalPageMapping, name: str = "kv", op: str = "layer_segments") -> tuple:
    """A layer's local pages as `Segment`s, in page order: one, `layer_bytes`, where every
    block's page is one stretch of memory; else one a value of the tensor's dims before the
    block (FlashAttention's `(2, blocks, bs, H, D)`: K of every block, then V of every
    block), from that tensor itself (no list, no byte view of it), each stretch checked in
    the tensor's storage, the blocks one stride apart, and no two stretches of any blocks
    sharing a byte.

    Examples:
        >>> from layoutalg.mapping import CopyRun, TensorView
        >>> m = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True,
        ...                          tensors=(TensorView("kv", 0, (2, 2), (2, 1), 2, outer=1),))
        >>> kv = torch.arange(12, dtype=torch.int16).view(2, 3, 2)   # (kv, block, d)
        >>> [(s.start, s.bytes.view(torch.int16)[1].tolist()) for s in layer_segments(kv, m)]
        [(0, [2, 3]), (4, [8, 9])]
    """
    views = m.tensors
    k = outer_of(views, name, op)
    if not k:
        apart = _apart(kv, views, m.local_page_size_bytes, name, op) if isinstance(kv, (list, tuple)) else None
        if apart:
            held = apart[-1].start + apart[-1].bytes.shape[1]
            reach = max((r.src_offset + (r.num_fragments - 1) * r.src_stride + r.fragment_size for r in m.runs),
                        default=0)
            if reach > held:
                raise LayoutMismatch(f"{op}: {name}: the mapping's runs reach local byte {reach}, past the "
                                     f"{held} bytes its tensors hold")
        return apart or (Segment(0, layer_bytes(kv, m, name, op)),)
    v = views[0]
    if not isinstance(kv, torch.Tensor):
        raise LayoutMismatch(f"{op}: {name} must be the one tensor '{v.name}' the mapping was derived for, "
                             f"(outer dims, blocks, ...) {tuple(v.shape)}; got a {type(kv).__name__}")
    length = _stretch(v, m.local_page_size_bytes, name, op)
    _check_view(kv, v, name, op)
    e, blocks = kv.element_size(), kv.shape[k]
    step = kv.stride(k) * e
    if blocks > 1 and step < length:
        raise LayoutMismatch(f"{op}: {name}, dimension {k} (block): stride {kv.stride(k)} elements ({step} bytes), "
                             f"expected at least {length} bytes, one stretch of the page")
    _check_dense(kv[(0,) * k], name, op)  # a block of one stretch is one dense run of memory
    raw = torch.empty(0, dtype=torch.uint8, device=kv.device).set_(kv.untyped_storage())
    starts = [kv.storage_offset() * e + at for at in stretch_starts(kv.shape[:k], kv.stride()[:k], e)]
    out = []
    for s, base in enumerate(starts):
        end = base + (blocks - 1) * step + length
        if blocks and (base < 0 or end > kv.untyped_storage().nbytes()):
            raise LayoutMismatch(f"{op}: {name}: stretch {s} of the page spans bytes [{base}, {end}) of a "
                                 f"{kv.untyped_storage().nbytes()}-byte buffer")
        out.append(Segment(s * length, raw.as_strided((blocks, length), (step, 1), max(base, 0))))
    check_stretches_apart(starts, step, length, blocks, name, op)
    return tuple(out)


def _apart(tensors, views: tuple, page: int, name: str, op: str) -> tuple | None:
    """The page as one `Segment` a tensor where its tensors are block-strided tensors apart
    (vLLM v0's key and value caches, each its half of one buffer): the views, in page order,
    hold the page's bytes from byte 0 one after another (what follows them is pads, never
    copied), and each tensor holds its stretch of every block as one dense run of memory, the
    tensors sharing no byte. None where the tensors are views of one page a block (a Mamba
    layer's states in one buffer), or the views do not follow one another: `layer_bytes` takes
    them, or says why not.

    Examples:
        >>> from layoutalg.mapping import CopyRun, TensorView
        >>> m = CanonicalPageMapping(8, 8, (CopyRun(0, 0, 8, 1, 8, 8),), 1, 0, True, tensors=(
        ...     TensorView("k", 0, (2,), (1,), 2), TensorView("v", 4, (2,), (1,), 2)))
        >>> buf = torch.arange(12, dtype=torch.int16).view(2, 3, 2)   # (kv, block, d): K blocks, then V blocks
        >>> [(s.start, s.bytes.view(torch.int16)[1].tolist()) for s in layer_segments([buf[0], buf[1]], m)]
        [(0, [2, 3]), (4, [8, 9])]
    """
    n = len(views)
    if n < 2 or len(tensors) != n or not all(isinstance(t, torch.Tensor) and t.dim() for t in tensors):
        return None
    order = sorted(range(n), key=lambda i: views[i].offset)  # the tensors in page order
    at = 0
    for i in order:
        if views[i].offset != at or not views[i].bytes_per_block:
            return None
        at += views[i].bytes_per_block
    if at > page:
        return None
    starts = {t.storage_offset() * t.element_size() - v.offset for t, v in zip(tensors, views)}
    if len({(t.untyped_storage().data_ptr(), t.device) for t in tensors}) == 1 and len(starts) == 1:
        return None  # views of one page a block: one stretch
    out = []
    for i in order:
        t, v, what = tensors[i], views[i], f"{name}[{i}] ({views[i].name})"
        _check_view(t, v, what, op)
        if t.device != tensors[0].device or t.shape[0] != tensors[0].shape[0]:
            raise LayoutMismatch(f"{op}: {what} has {t.shape[0]} blocks on {t.device}, but {name}[0] has "
                                 f"{tensors[0].shape[0]} on {tensors[0].device}")
        out.append(Segment(v.offset, page_bytes(t, v.bytes_per_block, what, op)))
    for a, i in enumerate(order):
        for b in range(a):
            where = overlap(out[a].bytes, out[b].bytes)
            if where:
                raise LayoutMismatch(f"{op}: {name}[{i}] ({views[i].name}) and {name}[{order[b]}] "
                                     f"({views[order[b]].name}) share bytes [{where[0]}, {where[1]}) of memory")
    return tuple(out)


def _stretch(v, page: int, name: str, op: str) -> int:
    """The bytes of one stretch of view `v` over a `page`-byte page: the view covers the page from
    byte 0, at most `MAX_STRETCHES` stretches, its outer dims row-major over them."""
    n = v.segments
    if v.offset or v.bytes_per_block != page or page % n:
        raise LayoutMismatch(f"{op}: {name}: the view '{v.name}' holds {v.bytes_per_block} bytes from byte "
                             f"{v.offset}, not the {page}-byte page in {n} stretches")
    if n > MAX_STRETCHES:
        raise LayoutMismatch(f"{op}: {name}: the view '{v.name}' holds the page in {n} stretches apart, more "
                             f"than the {MAX_STRETCHES} a copy takes (dims {tuple(v.shape[:v.outer])} before the block)")
    want = page // n // v.element
    for d in reversed(range(v.outer)):  # in the page the outer dims step over whole stretches, row-major
        if v.strides[d] != want and v.shape[d] != 1:
            raise LayoutMismatch(f"{op}: {name}: the view '{v.name}', dimension {d} (before the block): stride "
                                 f"{v.strides[d]} elements in the page, expected {want} (row-major over the "
                                 f"{n} stretches of {page // n} bytes)")
        want *= v.shape[d]
    return page // n


def stretch_starts(shape: tuple, stride: tuple, element: int) -> list:
    """Byte distance from a tensor's first element to each stretch (row-major over its dims
    before the block, of these extents and strides); [0] where there are none."""
    out = [0]
    for extent, st in zip(shape, stride):
        out = [a + i * st * element for a in out for i in range(extent)]
    return out


def check_stretches_apart(starts: list, step: int, length: int, blocks: int, name: str, op: str) -> None:
    """No two stretches of any blocks share a byte: stretch i of block b is `length` bytes at
    `starts[i] + b * step`, so i and j meet where some block distance k (|k| < blocks) brings
    `starts[j] - starts[i] + k * step` within `length` of 0 (the two k nearest to that, each
    pair: at most `MAX_STRETCHES` stretches)."""
    for i in range(len(starts)):
        for j in range(i + 1, len(starts)):
            d = starts[j] - starts[i]
            near = {0} if blocks < 2 or step == 0 else {max(-(blocks - 1), min(blocks - 1, q))
                                                          for q in (-d // step, -(-(-d) // step))}
            k = next((k for k in sorted(near) if abs(d + k * step) < length), None)
            if k is not None and blocks:
                raise LayoutMismatch(f"{op}: {name}: stretches {i} and {j} of the page overlap (stretch {j} of block "
                                     f"{max(0, k)} and stretch {i} of block {max(0, -k)} share memory): the dims "
                                     f"before the block must keep them apart")


def stretch_length(segs: tuple) -> int | tuple:
    """Where `layer_segments`' stretches are cut: 0 where the page is one stretch, the bytes of
    one stretch where they are of one length, else the start of each (`in_segments` takes either)."""
    if len(segs) < 2:
        return 0
    starts, lengths = tuple(s.start for s in segs), {s.bytes.shape[1] for s in segs}
    uniform = len(lengths) == 1 and starts == tuple(k * starts[1] for k in range(len(starts)))
    return starts[1] if uniform else starts


def _locate(cuts, at: int) -> tuple:
    """(stretch, offset in it, bytes left in it) of byte `at` of a page cut at `cuts` (`stretch_length`)."""
    if isinstance(cuts, int):
        s, x = divmod(at, cuts)
        return s, x, cuts - x
    s = bisect.bisect_right(cuts, at) - 1
    return s, at - cuts[s], (cuts[s + 1] if s + 1 < len(cuts) else float("inf")) - at


def in_segments(runs, length: int | tuple, which: str) -> tuple:
    """Each run cut where its fragments on side `which` (`"src"` or `"dst"`, as `Run.side` reads
    it) cross from one stretch of `length` bytes (or from the stretches starting at each of
    `length`'s offsets, `stretch_length`) to the next: `(stretch, run)` with that side's
    offset counted from the stretch's start, in the runs' byte order (so what one side
    gathers in run order the other scatters in the same order); `(0, run)` each where
    `length` is 0 (the page is one stretch).

    Examples:
        >>> from layoutalg.mapping import CopyRun
        >>> r = CopyRun(0, 0, 8, 2, 8, 8)
        >>> [(s, tuple(p)) for s, p in in_segments([r], 4, "src")]
        [(0, (0, 0, 4, 1, 8, 8)), (1, (0, 4, 4, 1, 8, 8)), (2, (0, 8, 4, 1, 8, 8)), (3, (0, 12, 4, 1, 8, 8))]
    """
    if not length:  # the page is one stretch
        return tuple((0, r) for r in runs)
    out = []
    for r in runs:
        (o, st), (o2, st2) = r.side(which), r.side("dst" if which == "src" else "src")
        size, n, i = r.fragment_size, r.num_fragments, 0
        while i < n:
            s, x, room = _locate(length, o + i * st)
            if size <= room:  # fragments i, i+1, ... inside stretch s
                j = i + 1
                while j < n:
                    s2, _, room2 = _locate(length, o + j * st)
                    if s2 != s or size > room2:
                        break
                    j += 1
                out.append((s, r.at(which, x, o2 + i * st2, num_fragments=j - i)))
                i = j
                continue
            done = 0  # a fragment across stretches: its pieces, one a stretch
            while done < size:
                s, x, room = _locate(length, o + i * st + done)
                k = min(size - done, room)
                out.append((s, r.at(which, x, o2 + i * st2 + done, fragment_size=k, num_fragments=1)))
                done += k
            i += 1
    return tuple(out)


def _check_view(t: torch.Tensor, v, name: str, op: str) -> None:
    from ..runtime.tensors import view_mismatch  # the runtime's own test, on the tensor itself
    why = view_mismatch(v, tuple(t.shape), tuple(t.stride()), t.element_size())
    if not why and v.dtype and str(t.dtype) != v.dtype and "torch.uint8" not in (str(t.dtype), v.dtype):
        # (uint8 is bytes of any encoding: vLLM keeps fp8 caches as uint8, either may be given)
        why = f"its elements are {t.dtype}, the mapping's are {v.dtype} (one size, another encoding)"
    if why:
        raise LayoutMismatch(f"{op}: {name} is not the tensor '{v.name}' the mapping was derived for: {why}")


def _from_views(tensors: list, views: tuple, page: int, name: str, op: str) -> torch.Tensor:
    if not views:
        raise LayoutMismatch(f"{op}: {name} is a list of {len(tensors)} tensors, but the mapping names no tensor "
                             f"views (its family's spec gives none): give the pages as one tensor (a vLLM "
                             f"Mamba layer's [conv, ssm] list is taken by a mapping that names those views: "
                             f"derive_canonical_mappings(..., state_layers=True))")
    if len(tensors) != len(views):
        raise LayoutMismatch(f"{op}: {name} holds {len(tensors)} tensors but the page is viewed by {len(views)} "
                             f"({', '.join(v.name for v in views)})")
    first = tensors[0]
    base = None
    for i, (t, v) in enumerate(zip(tensors, views)):
        what = f"{name}[{i}] ({v.name})"
        if not isinstance(t, torch.Tensor) or t.dim() == 0:
            raise LayoutMismatch(f"{op}: {what} must be a torch.Tensor with a block dimension, got "
                                 f"{type(t).__name__ if not isinstance(t, torch.Tensor) else 'a scalar'}")
        _check_view(t, v, what, op)
        if t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or t.device != first.device:
            raise LayoutMismatch(f"{op}: {what} is not in the memory of {name}[0]: a page's tensors are views of "
                                 f"one buffer (one page a block)")
        if t.shape[0] != first.shape[0]:
            raise LayoutMismatch(f"{op}: {what} has {t.shape[0]} blocks but {name}[0] has {first.shape[0]}")
        step = t.stride(0) * t.element_size()
        if t.shape[0] > 1 and step != first.stride(0) * first.element_size():
            raise LayoutMismatch(f"{op}: {what}, dimension 0 (block): {step} bytes a block but {name}[0] has "
                                 f"{first.stride(0) * first.element_size()}")
        start = t.storage_offset() * t.element_size() - v.offset  # where this tensor says the page starts
        if base is None:
            base = start
        elif start != base:
            raise LayoutMismatch(f"{op}: {what} starts at byte {v.offset + start - base} of the page, expected "
                                 f"{v.offset} (its place after {name}[0])")
    step = first.stride(0) * first.element_size() if first.shape[0] > 1 else page
    if step < page:
        raise LayoutMismatch(f"{op}: {name}: blocks are {step} bytes apart, less than the {page}-byte page")
    blocks = first.shape[0]
    end = base + (blocks - 1) * step + page if blocks else base
    if base < 0 or end > first.untyped_storage().nbytes():
        raise LayoutMismatch(f"{op}: {name}: the pages span bytes [{base}, {end}) of a "
                             f"{first.untyped_storage().nbytes()}-byte buffer")
    raw = torch.empty(0, dtype=torch.uint8, device=first.device).set_(first.untyped_storage())
    return raw.as_strided((blocks, page), (step, 1), base)


def overlap(a: torch.Tensor, b: torch.Tensor) -> tuple:
    """The address spans `[start, end)` of two `(blocks, bytes)` byte views (rows dense, one
    stride apart) where they have an address in common, else (): on other devices, or
    either empty, they have none."""
    if not a.numel() or not b.numel() or a.device != b.device:
        return ()
    spans = [(t.data_ptr(), t.data_ptr() + (t.shape[0] - 1) * t.stride(0) + t.shape[1]) for t in (a, b)]
    return tuple(spans) if spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1] else ()


def check_apart(a: torch.Tensor, b: torch.Tensor, op: str, names: str = "kv and pages") -> None:
    """Two `(blocks, page)` byte views must not share a byte of memory: a copy between
    overlapping buffers would read bytes it has already overwritten. Compared by address,
    not by storage: two storages may alias one memory (`torch.from_numpy` of one array
    twice, two maps of one file)."""
    if "meta" in (a.device.type, b.device.type):
        raise LayoutMismatch(f"{op}: {names}: a tensor on the meta device holds no bytes to copy")
    spans = overlap(a, b)
    if spans:
        raise LayoutMismatch(f"{op}: {names} share memory (addresses [{spans[0][0]:#x}, {spans[0][1]:#x}) "
                             f"and [{spans[1][0]:#x}, {spans[1][1]:#x})): a copy between them would read what "
                             f"it has already written")


def check_blocks_apart(sides: list, op: str, why: str) -> None:
    """No two of `sides`, each `(name, segments, block ids)`, touch a byte in common in the
    blocks asked for: finer than `check_apart`, since tensors that share memory (a hybrid
    model's groups, a producer and its consumer) may each use other blocks of it.
    Each block's stretch of each segment is an address interval; within a side they are
    apart (its plan checks that), so sorted by start an overlap between two sides shows in
    two neighbours."""
    by_device: dict = {}
    for i, (_, segs, blocks) in enumerate(sides):
        for seg in segs:
            b = seg.bytes
            start = b.data_ptr() + blocks.cpu() * b.stride(0)
            by_device.setdefault(str(b.device), []).append(
                torch.stack([start, start + b.shape[1], torch.full_like(start, i)], 1))
    for spans in by_device.values():
        spans = torch.cat(spans)
        spans = spans[torch.argsort(spans[:, 0])]
        hit = ((spans[1:, 0] < spans[:-1, 1]) & (spans[1:, 2] != spans[:-1, 2])).nonzero()
        if hit.numel():
            (a0, e0, i0), (a1, e1, i1) = sorted((spans[int(hit[0])].tolist(), spans[int(hit[0]) + 1].tolist()),
                                                key=lambda x: x[2])  # named in the order the sides are given
            raise LayoutMismatch(f"{op}: {sides[i0][0]} and {sides[i1][0]} share memory in the blocks asked for "
                                 f"(addresses [{a0:#x}, {e0:#x}) and [{a1:#x}, {e1:#x})): {why}")


def _check_dense(pages: torch.Tensor, name: str, op: str) -> None:
    """A block's elements must fill one contiguous stretch of memory, in some dimension order.

    Sorted by stride, each dimension must step over exactly the dimensions below it;
    otherwise the page read from memory holds gaps (padding, another layer) or overlaps.
    """
    from ..runtime.tensors import dense_gap  # the runtime's own test, on the tensor's shape and strides
    gap = dense_gap(tuple(pages.shape), tuple(pages.stride()))
    if gap:
        d, stride, expected = gap
        raise LayoutMismatch(f"{op}: {name} tensor, dimension {d}: stride {stride} elements, expected {expected} "
                             f"for each block to be one dense page (a padded or overlapping view?)")



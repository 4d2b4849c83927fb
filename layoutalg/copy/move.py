"""Moving one run's bytes for a batch of blocks: the widest word the run allows, the strided
views of a side, numpy's row gather and scatter on the CPU, torch's index ops on other
devices, and staging through a buffer where the two sides are on different devices.
What every plan executes: copy plans (`executor.CopyPlan`, `ModelPlan`) a run from one side
to the other (`copy_run`), direct plans a run's side gathered into rows on the producer and
scattered from them on the consumer (`gather_rows`, `scatter_rows`); a run is the one
`mapping.Run` for both, read side by side (`Run.src`, `Run.dst`). A device kernel goes in
`_side` (its `take` and `put`).
"""
from __future__ import annotations

import threading
from typing import Callable, NamedTuple

import torch

try:  # on the CPU, numpy's row gather and scatter run several times faster than torch's index ops
    import numpy
except ImportError:  # pragma: no cover - torch works without it, and so do the plans
    numpy = None

from ..mapping import CanonicalPageMapping


WORDS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}
"""The integer type a word of so many bytes is moved as."""


def widest_word(values) -> int:
    """The widest word (8, 4, 2 or 1 bytes) dividing every one of `values`: the offsets, sizes
    and strides a plan moves by, and the tensors' bases."""
    return next(w for w in (8, 4, 2, 1) if all(v % w == 0 for v in values))


def as_words(raw: torch.Tensor, w: int) -> torch.Tensor:
    """The bytes `raw` (a `page_bytes` view) as words of `w` bytes."""
    words = torch.empty(0, dtype=WORDS[w], device=raw.device).set_(raw.untyped_storage())
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
        r = r.fused()
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
        return torch.from_numpy(self.frags[self.ids[lo:hi]].view(numpy.uint8)).view(self.dtype)

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
    if numpy is not None and words.device.type == "cpu":
        return _Frags(_np_view(words, offset, stride, r), which.cpu().numpy(), words.dtype)
    width = r.num_fragments * r.fragment_size // words.element_size()  # words of the run a block
    rows = _rows(words, offset, stride, r, which.to(words.device))  # (blocks moved, rows made there)
    if rows:
        buf, nums = rows
        return _Indexed(lambda lo, hi: buf.index_select(0, nums[lo:hi].reshape(-1)).reshape(-1, width),
                        lambda lo, hi, data: buf.index_copy_(0, nums[lo:hi].reshape(-1),
                                                             data.reshape(-1, buf.shape[1])))
    view, ids = run_view(words, offset, stride, r), which.to(words.device)
    return _Indexed(lambda lo, hi: view.index_select(0, ids[lo:hi]).reshape(-1, width),
                    lambda lo, hi, data: view.index_copy_(0, ids[lo:hi], data.reshape(-1, *view.shape[1:])))


def copy_run(src: tuple, dst: tuple, r) -> None:
    """Copy run `r` of blocks `src[3]` into blocks `dst[3]` (each side `(words, offset, stride,
    which)`), a chunk of blocks at a time: gathered on the source's device (`_side`), carried
    to the destination's where the two differ (a GPU's KV cache and pages in host memory),
    and scattered there, while still in cache where both are one. Numpy to numpy, each
    fragment is one memcpy each way (an element of both sides' arrays), fragments of whole
    4 KiB multiples through a staging array placed apart from both sides (`_copy_staged`)."""
    (sw, so, ss, sb), (dw, do, ds, db) = src, dst
    if r.num_fragments > 1 and ss == ds == r.fragment_size:  # dense on both sides: one stretch a block
        r = r.fused()
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


def gather_rows(words: torch.Tensor, side, r, which: torch.Tensor) -> torch.Tensor:
    """Run `r`'s fragments on `side` (its `Run.src` or `Run.dst`) of blocks `which` of `words`,
    as `(blocks, run words)` rows on the words' device, fragments in order (`_side`): what
    a direct plan's producer sends."""
    return _side(words, side.offset, side.stride, r, which).take(0, which.numel())


def scatter_rows(words: torch.Tensor, side, r, which: torch.Tensor, rows: torch.Tensor) -> None:
    """`gather_rows` inverted: rows `(blocks, run words)` into run `r`'s fragments on `side` of
    blocks `which` of `words` (ids each once: a direct plan's consumer receiving)."""
    _side(words, side.offset, side.stride, r, which).put(0, which.numel(), rows)


def _np_elements(words: torch.Tensor, offset: int, stride: int, r):
    """The buffer from the run's first fragment on as one C-contiguous 1-D numpy array of
    whole fragments, and the elements from one block to the next and from one fragment to
    the next: `(elements, per_block, between)`; None where a fragment would not start on one."""
    w, f = words.element_size(), r.fragment_size
    step = words.stride(0) * w
    if step % f or (r.num_fragments > 1 and stride % f):
        return None
    raw, base = _np_bytes(words, offset)
    elements = numpy.ndarray(((raw.size - base) // f,), dtype=numpy.dtype((numpy.void, f)), buffer=raw, offset=base)
    return elements, step // f, (stride // f if r.num_fragments > 1 else 0)


def _copy_staged(src: tuple, a: _Frags, b: _Frags, r, per: int) -> bool:
    """Side `a`'s fragments (of `src`, `copy_run`'s source) into side `b`'s, numpy to numpy
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
    frag = numpy.arange(r.num_fragments, dtype=numpy.int64) * between
    stage = _apart(per * r.num_fragments, r.fragment_size, elements.ctypes.data, b.frags.ctypes.data)
    for at in range(0, a.ids.size, per):
        ids = a.ids[at:at + per]
        out = stage[:ids.size * r.num_fragments]
        numpy.take(elements, (ids[:, None] * per_block + frag[None, :]).reshape(-1), axis=0, out=out, mode="clip")
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
        raw = numpy.empty(need, dtype=numpy.uint8)
        if need <= 2 * _CHUNK + 4096:
            _STAGE.raw = raw
    return numpy.ndarray((n,), dtype=numpy.dtype((numpy.void, f)), buffer=raw, offset=(at - raw.ctypes.data) % 4096)


def _carried(a, lo: int, hi: int, device: torch.device) -> torch.Tensor:
    """Side `a`'s fragments of blocks `lo:hi`, on `device`. From a GPU to the host they pass
    through pinned memory, which torch's caching host allocator hands out again chunk after
    chunk: each carry is one DMA, where a fresh pageable chunk of many MiB is mapped and
    faulted in anew each time. To a GPU a chunk goes from the host's gather as it is:
    gathering into pinned memory with `np.take(out=)` is far slower, as numpy first makes a
    strided source contiguous, here a copy of the whole page buffer."""
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
    return numpy.ndarray((words.shape[0], r.num_fragments), dtype=numpy.dtype((numpy.void, r.fragment_size)), buffer=raw,
                       offset=base, strides=(words.stride(0) * w, stride if r.num_fragments > 1 else r.fragment_size))


def _np_bytes(words: torch.Tensor, offset: int) -> tuple:
    """The whole storage of `words` as a numpy byte array, and where byte `offset` of its first row is."""
    raw = torch.empty(0, dtype=torch.uint8).set_(words.untyped_storage()).numpy()
    return raw, words.storage_offset() * words.element_size() + offset


def run_view(words: torch.Tensor, offset: int, stride: int, r) -> torch.Tensor:
    """One run's fragments of every block: `(blocks, fragments, fragment words)`."""
    w = words.element_size()
    return words.as_strided((words.shape[0], r.num_fragments, r.fragment_size // w),
                            (words.stride(0), stride // w, 1), words.storage_offset() + offset // w)


def side_word(segs: tuple, runs, which: str) -> int:
    """The widest word dividing every run's offset, size and stride on side `which` (`Run.side`),
    and the base, block stride and length of each of `segs` (`views.Segment`s): a direct plan's
    side, which moves alone."""
    values = [x for seg in segs for x in (seg.bytes.storage_offset(), seg.bytes.stride(0), seg.bytes.shape[1])]
    for r in runs:
        at = r.side(which)
        values += [at.offset, r.fragment_size, at.stride if r.num_fragments > 1 else 0]
    return widest_word(values)


def plan_word(m: CanonicalPageMapping, segs: tuple) -> int:
    """The widest word dividing every size, offset and stride of the plan (and the tensor's bases)."""
    values = [m.local_page_size_bytes, m.canonical_page_size_bytes]
    for seg in segs:
        values += [seg.start, seg.bytes.storage_offset(), seg.bytes.stride(0)]
    for r in m.runs:
        values += [r.src_offset, r.dst_offset, r.fragment_size]
        if r.num_fragments > 1:
            values += [r.src_stride, r.dst_stride]
    return widest_word(values)

"""The engine's tensors against a family's page: whether a tensor holds each block's page where
the family reads it, and the views a layer's tensors give its pages (`stacked`, `as_it_lies`,
`raw_page`, `view_mismatch`). Every refusal is a `Reason` of check `tensor` that names the
tensor, the dimension and the expected versus the actual stride, in words and in its fields.
"""
from __future__ import annotations

from math import prod

from ..mapping import TensorView
from ..record import named_tuple
from ..verdicts import Check, Reason
from .records import TensorLayout


def block_tensor(shape: tuple, strides: tuple, element: int, outer: int, blocks: int, page: int) -> TensorLayout:
    """The engine tensor of `blocks` blocks a view describes (`shape` and `strides` in elements after
    any `outer` dims, `page` bytes a block): the block dim after the outer dims, a block's stretch
    its stride, the outer dims stepping over every block's stretch.

    Examples:
        >>> block_tensor((2, 4, 8), (32, 8, 1), 2, 1, 3, 128)
        TensorLayout(shape=(2, 3, 4, 8), stride=(96, 32, 8, 1), element_size=2, dtype='')
    """
    step = page // element // prod(shape[:outer])
    return TensorLayout(tuple(shape[:outer]) + (blocks,) + tuple(shape[outer:]),
                        tuple(s * blocks for s in strides[:outer]) + (step,) + tuple(strides[outer:]), element)


def _no(text: str, **fields) -> Reason:
    return Reason(Check.TENSOR, text, **fields)


def as_it_lies(t: TensorLayout, num_blocks, page: int, in_order: bool, box: tuple | None = ()) -> tuple | Reason:
    """The views, else why not (a `Reason`), for a family whose spec names no tensor dims (MLA's latent rows, the
    opaque fallback) given one tensor: it reads block `b`'s page as the bytes of `t[b]` in
    memory, so `t` must be block first with each block one dense page. A certified family
    reads them in the tensor's own index order (`in_order`: its dims after the block
    row-major), and where its local index `box` is known (`Instance.local_form`), only if
    the tensor's dims group the box's or the box's group the tensor's (`_cuts`): MLA's
    `(t, b)` box takes `(blocks, block_size, head_size)` and flat `(blocks, page)` bytes, but
    not `(blocks, head_size, block_size)`, whose tokens are not its rows. A page of regions
    (`box` None: no one box) takes only flat `(blocks, page)` elements, as no tensor's dims
    group regions of other rows (quantised split KV: the data, then the scales). The fallback takes
    them in any order, its format covering the strides (`physical_layout`). The view (the tensor as given) lets a copy
    plan refuse another tensor of one size. The fallback gets no view, as before, where the
    tensor is no such block-first page (no views, and no reason): a copy plan then refuses it.

    Examples:
        >>> as_it_lies(TensorLayout((3, 4, 6), (24, 6, 1), 2), 3, 48, True)[0].strides
        (6, 1)
        >>> why = as_it_lies(TensorLayout((3, 4, 6), (24, 1, 4), 2), 3, 48, True)
        >>> str(why), (why.dim, why.expected, why.actual)
        ('KV tensor dimension 2 has stride 4, expected 1 (elements): the family reads a block as its elements in row-major order (its spec names no tensor dims)', (2, 1, 4))
        >>> as_it_lies(TensorLayout((3, 4, 6), (24, 1, 4), 2), 3, 48, False)[0].strides
        (1, 4)
    """
    def no(text, **fields):
        return _no(text, **fields) if in_order else ()
    if not t.shape:
        return no("the KV tensor has no block dimension")
    if num_blocks is not None and t.shape[0] != num_blocks:
        return no(f"KV tensor dimension 0 (block) has {t.shape[0]} blocks, the layer {num_blocks}", dim=0,
                  expected=num_blocks, actual=t.shape[0])
    held = prod(t.shape[1:]) * t.element_size
    if held != page:
        return no(f"KV tensor holds {held} bytes per block but the page is {page}", expected=page, actual=held)
    gap = dense_gap(t.shape, t.stride, row_major=in_order)
    if gap:
        return no(f"KV tensor dimension {gap.dim} has stride {gap.stride}, expected {gap.expected} (elements): the "
                  f"family reads a block as its elements in row-major order (its spec names no tensor dims)",
                  dim=gap.dim, expected=gap.expected, actual=gap.stride)
    if box is None and len([n for n in t.shape[1:] if n != 1]) > 1:
        return no(f"KV tensor dims {tuple(t.shape[1:])} are not the family's page of regions, which names no tensor "
                  f"dims: it reads a given tensor only as flat (blocks, page) elements")
    if box:
        _, element, dims = box  # the local index box: (base, element bytes, ((extent, stride), ...))
        mine = _cuts(zip(t.shape[1:], (s * t.element_size for s in t.stride[1:])))
        spec = _cuts((e, c * element) for e, c in dims)
        if not (mine <= spec or spec <= mine):
            return no(f"KV tensor dims {tuple(t.shape[1:])} ({t.element_size}-byte elements) cut a block at bytes "
                      f"{sorted(mine)}, the family's local index box {tuple(e for e, _ in dims)} "
                      f"({element}-byte elements) at {sorted(spec)}: neither groups the other, so the tensor's "
                      f"dims are not the spec's indices (its spec names no tensor dims)")
    return (TensorView("kv", 0, tuple(t.shape[1:]), tuple(t.stride[1:]), t.element_size),)


def _cuts(dims) -> set:
    """Where the dims of a dense block end, in bytes (extent times byte stride, dims of one
    element aside): one factorisation groups another's dims exactly where its cuts are
    among the other's.

    Examples:
        >>> _cuts([(16, 1152), (576, 2)]) == _cuts([(16, 1152), (1152, 1)]) == {1152, 18432}
        True
    """
    return {e * s for e, s in dims if e != 1}


@named_tuple
class Gap:
    """Where a block is not one dense stretch: the dim, its stride, the stride it needs (elements)."""
    dim: int
    stride: int
    expected: int


def dense_gap(shape: tuple, stride: tuple, row_major: bool = False) -> Gap | None:
    """The first dim after the block (dim 0) keeping a block from being one dense stretch of
    memory, as (dim, its stride, the stride expected), or None. Dense in some order (sorted by
    stride, each dim steps over exactly those below it), or with `row_major` in index order,
    the last dim fastest. Dims of one element have no stride to misread; a block of no
    element has no memory to misread.

    Examples:
        >>> dense_gap((3, 4, 6), (24, 1, 4)), dense_gap((3, 4, 6), (24, 1, 4), row_major=True)
        (None, Gap(dim=2, stride=4, expected=1))
    """
    dims = [d for d in range(1, len(shape)) if shape[d] != 1]
    if any(shape[d] == 0 for d in dims):
        return None
    want = 1
    for d in reversed(dims) if row_major else sorted(dims, key=lambda d: (stride[d], shape[d], d)):
        if stride[d] != want:
            return Gap(d, stride[d], want)
        want *= shape[d]
    return None


def physical_layout(tensors: tuple) -> tuple:
    """How the tensors lay a block out (dims after the block, their strides): where the
    canonical page is the rank's bytes as they lie (the opaque fallback), an NHD and an HND
    tensor of one size are two formats."""
    return tuple((t.shape[1:], t.stride[1:], t.element_size) for t in tensors)


def mismatch_views(views: tuple, tensors, num_blocks, page: int) -> Reason | None:
    """Why a page's tensors are not the ones its family views (None when they are, or when the
    layer gives none: then its kind and sizes alone select the family, and copy plans check
    the tensors they are given against the mapping's views)."""
    if tensors is None:
        return None
    names = ", ".join(v.name for v in views)
    if not views:
        return None  # a page whose spec names no tensors is read from its sizes alone
    if isinstance(tensors, TensorLayout):
        if len(views) > 1 or views[0].element == 1 and len(tensors.shape) == 2:  # no view of the page: its bytes
            why = raw_page(tensors, num_blocks, page)
            if why and len(views) > 1:  # (a stack of the views is one view of an outer dim: not here)
                why = why.said(after=f"; nor are its views stacked before the block: it "
                                     f"{stacked(views, tensors, num_blocks, page)}")
            return why and why.said(f"the page is viewed by {len(views)} tensor(s) ({names}) and one tensor ")
        # a page one tensor views whole (quantised KV: data, scales and padding in its rows)
        why = view_mismatch(views[0], tensors.shape, tensors.stride, tensors.element_size, num_blocks)
        if not why and (views[0].offset, views[0].bytes_per_block) != (0, page):
            why = _no(f"it views bytes [{views[0].offset}, {views[0].offset + views[0].bytes_per_block}) of a "
                      f"block but the page is {page} bytes: one tensor must hold the whole page", name=views[0].name,
                      expected=page, actual=views[0].bytes_per_block)
        return why and why.said(f"tensor ({views[0].name}): ")
    if len(tensors) != len(views):
        return _no(f"the layer gives {len(tensors)} tensor(s) but the page is viewed by {len(views)} ({names})",
                   expected=len(views), actual=len(tensors))
    for i, (v, t) in enumerate(zip(views, tensors)):
        why = view_mismatch(v, t.shape, t.stride, t.element_size, num_blocks)
        if why:
            return why.said(f"tensor {i} ({v.name}): ")
    return None


def stacked(views: tuple, t: TensorLayout, num_blocks, page: int):
    """One tensor holding a page's views stacked before the block, as a `TensorView` of its outer
    dim (one stretch of the page a view), else why not (a `Reason`). vLLM v0 allocates a layer's
    key and value caches as one `(2, num_blocks, ...)` buffer: slice i holds view i of every
    block, one dense stretch a block. The views must follow one another from byte 0 in equal
    stretches (the slices of one tensor are alike), each of the tensor's elements.

    Examples:
        >>> kv = (TensorView("key", 0, (2, 4), (4, 1), 2), TensorView("value", 16, (4, 2), (2, 1), 2))
        >>> stacked(kv, TensorLayout((2, 5, 8), (40, 8, 1), 2), 5, 32)
        TensorView(name='key|value', offset=0, shape=(2, 8), strides=(8, 1), element=2, dtype='', outer=1)
        >>> str(stacked(kv, TensorLayout((5, 2, 8), (16, 8, 1), 2), 5, 32))
        'has shape (5, 2, 8), not (2, 5, ...): the 2 views, then the blocks'
    """
    n, e = len(views), t.element_size
    if len(t.shape) < 3 or t.shape[0] != n or num_blocks is not None and t.shape[1] != num_blocks:
        return _no(f"has shape {t.shape}, not ({n}, {'blocks' if num_blocks is None else num_blocks}, ...): the {n} "
                   f"views, then the blocks", actual=t.shape)
    if page % n or any((v.offset, v.bytes_per_block) != (i * (page // n), page // n) for i, v in enumerate(views)):
        return _no(f"stacks {n} slices alike, but the views ({', '.join(v.name for v in views)}) are not {n} equal "
                   f"stretches of the {page}-byte page, one after another")
    if any(v.element not in (e, 1) and e != 1 for v in views) or prod(t.shape[2:]) * e != page // n:
        return _no(f"holds {prod(t.shape[2:]) * e} bytes a slice of a block ({e}-byte elements), not a "
                   f"{page // n}-byte view", expected=page // n, actual=prod(t.shape[2:]) * e)
    gap = dense_gap(t.shape[1:], t.stride[1:])
    if gap:
        return _no(f"has stride {gap.stride} in dimension {gap.dim + 1}, expected {gap.expected}: a slice of a block "
                   f"is no dense stretch", dim=gap.dim + 1, expected=gap.expected, actual=gap.stride)
    return TensorView("|".join(v.name for v in views), 0, (n,) + tuple(t.shape[2:]),
                      (page // n // e,) + tuple(t.stride[2:]), e, t.dtype, outer=1)


def raw_page(t: TensorLayout, num_blocks, page: int) -> Reason | None:
    """Why `t` is not a page's raw bytes (None when it is): bytes (one-byte elements), the block
    dim first, each block one dense `page`-byte stretch of memory, the blocks apart. It is how
    vLLM allocates a Mamba layer's pages (`(num_blocks, 1, 1, page bytes)` int8) and how a copy
    plan takes a page of regions in one tensor (`copy.views.page_bytes`): the spec's views say
    where each region lies in it.

    Examples:
        >>> raw_page(TensorLayout((3, 1, 1, 96), (96, 96, 96, 1), 1), 3, 96) is None
        True
        >>> raw_page(TensorLayout((3, 48), (48, 1), 2), 3, 96)
        Reason('tensor', 'is of 2-byte elements, not the raw bytes (uint8 or int8) of the page', expected=1, actual=2)
    """
    if t.element_size != 1 or t.dtype not in ("", "torch.uint8", "torch.int8"):  # (as copy plans take raw bytes)
        what = f"{t.element_size}-byte" if t.element_size != 1 else t.dtype
        return _no(f"is of {what} elements, not the raw bytes (uint8 or int8) of the page",
                   **(dict(expected=1, actual=t.element_size) if t.element_size != 1 else
                      dict(expected=("torch.uint8", "torch.int8"), actual=t.dtype)))
    blocks = t.shape[0] if t.shape else None
    if len(t.shape) < 2 or num_blocks is not None and blocks != num_blocks:
        return _no(f"has shape {t.shape}, not ({'blocks' if num_blocks is None else num_blocks}, ...) of the page's "
                   f"bytes", actual=t.shape)
    if prod(t.shape[1:]) != page:
        return _no(f"holds {prod(t.shape[1:])} bytes a block (shape {t.shape}), not the {page}-byte page",
                   expected=page, actual=prod(t.shape[1:]))
    gap = dense_gap(t.shape, t.stride)
    if gap:
        return _no(f"has stride {gap.stride} in dimension {gap.dim}, expected {gap.expected}: a block is no dense page",
                   dim=gap.dim, expected=gap.expected, actual=gap.stride)
    if blocks > 1 and t.stride[0] < page:
        return _no(f"has block stride {t.stride[0]} bytes, less than the {page}-byte page", dim=0, expected=page,
                   actual=t.stride[0])
    return None


def view_mismatch(v: TensorView, shape: tuple, stride: tuple, element: int, num_blocks=None) -> Reason | None:
    """Why a tensor of `shape` and `stride` (elements) is not view `v` (None when it is). The
    strides of dims before the block dim (`v.outer`) are the tensor's own: `copy.views`
    checks that they keep its segments apart."""
    k = v.outer
    blocks = num_blocks if num_blocks is not None else (shape[k] if len(shape) > k else None)
    expected = tuple(v.shape[:k]) + (blocks,) + tuple(v.shape[k:])
    if tuple(shape) != expected:
        return _no(f"shape {tuple(shape)} is not {expected} ({'the outer dims, ' if k else ''}blocks, then the view's "
                   f"dims)", name=v.name, expected=expected, actual=tuple(shape))
    if element != v.element:
        return _no(f"elements of {element} bytes, expected {v.element}", name=v.name, expected=v.element,
                   actual=element)
    for dim, (want, got, extent) in enumerate(zip(v.strides[k:], stride[k + 1:], shape[k + 1:]), start=k + 1):
        if want != got and extent != 1:  # a dim of one element has no stride to misread
            return _no(f"dimension {dim} has stride {got}, expected {want} (elements)", name=v.name, dim=dim,
                       expected=want, actual=got)
    return None

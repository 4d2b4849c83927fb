"""Executing copy runs with torch: one strided view copy per run, for many blocks at once.

A run is an arithmetic progression of equal fragments in both pages, so it is one
`as_strided` view on each side, `(blocks, num_fragments, fragment_size)`; copying a
run is a single `copy_` between views, for every block of the batch together.
"""
from __future__ import annotations

import torch

from .errors import LayoutMismatch
from .mapping import CanonicalPageMapping, CopyRun


def page_bytes(pages: torch.Tensor, page_size: int, name: str = "pages") -> torch.Tensor:
    """The memory of `pages` (dim 0 is the block) as a (num_blocks, page_size) uint8 view.

    Reads the storage itself, so the page keeps its physical byte order whatever the
    strides of the other dimensions (a transposed HND view stays HND in memory).
    Raises `LayoutMismatch` when a block does not hold one page or the blocks overlap
    (torch keeps every view inside its storage, so the pages are then in bounds).
    """
    if pages.dim() == 0:
        raise LayoutMismatch(f"{name} tensor has no block dimension (it is a scalar)")
    elem = pages.element_size()
    held = pages[0].numel() * elem if pages.shape[0] else page_size
    if held != page_size:
        raise LayoutMismatch(f"{name} tensor: one block is {tuple(pages.shape[1:])} elements of {elem} bytes = "
                             f"{held} bytes, expected a {page_size}-byte page")
    step = pages.stride(0) * elem
    if pages.shape[0] > 1 and step < page_size:
        raise LayoutMismatch(f"{name} tensor, dimension 0 (block): stride {pages.stride(0)} elements "
                             f"({step} bytes), expected at least {page_size} bytes, one page")
    raw = torch.empty(0, dtype=torch.uint8, device=pages.device).set_(pages.untyped_storage())
    return raw.as_strided((pages.shape[0], page_size), (step, 1), pages.storage_offset() * elem)


def _view(b: torch.Tensor, run: CopyRun, local: bool) -> torch.Tensor:
    off, stride = (run.local_offset, run.local_stride) if local else (run.canonical_offset, run.canonical_stride)
    return b.as_strided((b.shape[0], run.num_fragments, run.fragment_size),
                        (b.stride(0), stride, 1), b.storage_offset() + off)


def store(local: torch.Tensor, canonical: torch.Tensor, m: CanonicalPageMapping,
          blocks: torch.Tensor | None = None) -> None:
    """Copy this rank's local pages into canonical pages (same block ids), where it is the writer.

    `local` is (num_blocks, ...) with `m.local_page_size_bytes` bytes per block and
    `canonical` (num_blocks, canonical_page_size_bytes) uint8; `blocks` selects block ids.
    """
    lb = page_bytes(local, m.local_page_size_bytes, "local")
    cb = page_bytes(canonical, m.canonical_page_size_bytes, "canonical")
    ids = torch.arange(lb.shape[0]) if blocks is None else blocks
    mine = ids[(ids % m.num_writers) == m.writer_index]
    if mine.numel() == 0:
        return
    src, dst = lb[mine], torch.empty((mine.numel(), cb.shape[1]), dtype=torch.uint8)
    dst.copy_(cb[mine])
    for run in m.runs:
        _view(dst, run, local=False).copy_(_view(src, run, local=True))
    cb[mine] = dst


def load(canonical: torch.Tensor, local: torch.Tensor, m: CanonicalPageMapping) -> None:
    """Fill this rank's local pages from canonical pages (every block, every rank)."""
    lb = page_bytes(local, m.local_page_size_bytes, "local")
    cb = page_bytes(canonical, m.canonical_page_size_bytes, "canonical")
    for run in m.runs:
        _view(lb, run, local=True).copy_(_view(cb, run, local=False))

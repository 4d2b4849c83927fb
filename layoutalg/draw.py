"""Pictures of who writes which bytes (`layoutalg draw`), with matplotlib.

The canonical page of block 0 is drawn as a grid of cells, row-major by canonical byte,
each cell coloured by the rank that writes it; a cell is hatched where more than one rank
holds its bytes (replicas: only the writer of the block stores them). Below, each rank's
local page in its own physical byte order, each cell coloured by the rank that writes the
canonical bytes it holds, hatched where that is another rank (this rank holds a replica).
A cell is `unit` bytes, the largest power of two dividing every fragment of every run so
that a cell never straddles two owners, doubled until a page fits in 4,096 cells; the
legend says how many bytes a cell is, and where a cell had to merge bytes of several owners
to fit (it then shows its first byte's). The runtime never imports this module.
"""
from __future__ import annotations

from math import gcd
from typing import Sequence

from .errors import LayoutalgError
from .mapping import CanonicalPageMapping

MAX_CELLS = 4096


def cell_bytes(maps: Sequence[CanonicalPageMapping]) -> int:
    """The bytes of one cell: a power of two dividing every offset and fragment, grown until
    the canonical page and every local page fit in `MAX_CELLS` cells (cells then mix owners
    only where the page is too large to draw byte-exact: `exact` says whether it did).

    Examples:
        >>> from layoutalg.mapping import CopyRun
        >>> cell_bytes([CanonicalPageMapping(64, 32, (CopyRun(0, 0, 16, 2, 16, 32),), 1, 0, True)])
        16
    """
    g = 0
    for m in maps:
        for r in m.runs:
            for v in (r.local_offset, r.canonical_offset, r.fragment_size,
                      r.local_stride if r.num_fragments > 1 else 0, r.canonical_stride if r.num_fragments > 1 else 0):
                g = gcd(g, v)
    unit = 1
    while g and g % (unit * 2) == 0:
        unit *= 2
    biggest = max([maps[0].canonical_page_size_bytes] + [m.local_page_size_bytes for m in maps])
    while biggest > unit * MAX_CELLS:
        unit *= 2
    return unit


def exact(maps: Sequence[CanonicalPageMapping], unit: int) -> bool:
    """Whether cells of `unit` bytes never straddle two fragments."""
    return all(v % unit == 0 for m in maps for r in m.runs
               for v in (r.local_offset, r.canonical_offset, r.fragment_size,
                         r.local_stride if r.num_fragments > 1 else 0, r.canonical_stride if r.num_fragments > 1 else 0))


def owners(maps: Sequence[CanonicalPageMapping], block: int = 0):
    """(writer of each canonical byte, holders of each canonical byte, per rank: canonical
    byte of each local byte), for block `block`; -1 where nobody writes or holds."""
    size = maps[0].canonical_page_size_bytes
    writer, holders = [-1] * size, [0] * size
    local = []
    for rank, m in enumerate(maps):
        written = set(id(r) for r in m.written_runs(block))
        here = [-1] * m.local_page_size_bytes
        for r in m.runs:
            for lo, co, n in r.triples():
                for k in range(n):
                    here[lo + k] = co + k
                    holders[co + k] += 1
                    if id(r) in written:
                        writer[co + k] = rank
        local.append(here)
    return writer, holders, local


def draw(maps: Sequence[CanonicalPageMapping], path: str, title: str = "", block: int = 0) -> str:
    """Write the picture to `path` (.svg or .png); returns a line saying what was drawn."""
    if not maps:
        raise LayoutalgError("draw: no rank mapping to draw")
    if not str(path).endswith((".svg", ".png")):
        raise LayoutalgError(f"draw: {path}: the picture must be .svg or .png")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    unit = cell_bytes(maps)
    writer, holders, local = owners(maps, block)
    cmap = plt.get_cmap("tab20" if len(maps) > 10 else "tab10")
    colour = (lambda r: "white" if r < 0 else cmap(r % cmap.N))
    pages = [("canonical page", [(writer[c], holders[c] > 1) for c in range(0, len(writer), unit)])]
    for rank, here in enumerate(local):
        cells = []
        for b in range(0, len(here), unit):
            c = here[b]
            w = writer[c] if c >= 0 else -1
            cells.append((w, w != rank))
        pages.append((f"rank {rank}", cells))
    cols = min(64, max(len(c) for _, c in pages))
    heights = [max(1, -(-len(c) // cols)) for _, c in pages]
    fig, axes = plt.subplots(len(pages), 1, figsize=(10, 1.6 + 0.22 * sum(heights) + 0.35 * len(pages)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, cells), rows in zip(axes[:, 0], pages, heights):
        for i, (w, hatched) in enumerate(cells):
            ax.add_patch(Rectangle((i % cols, rows - 1 - i // cols), 1, 1, facecolor=colour(w), edgecolor="white",
                                   linewidth=0.3, hatch="///" if hatched else None))
        ax.set_xlim(0, cols)
        ax.set_ylim(0, rows)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
    shown = sorted({w for _, cells in pages for w, _ in cells if w >= 0})
    legend = [Patch(facecolor=colour(r), label=f"rank {r} writes") for r in shown]
    legend.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="held by more than one rank"))
    fig.legend(handles=legend, loc="lower center", fontsize=7, ncol=min(6, len(legend)), frameon=False)
    merged = "" if exact(maps, unit) else " (a cell shows its first byte's owner: fragments are smaller)"
    fig.suptitle(f"{title}\none cell = {unit} bytes{merged}, {cols} cells a row; block {block}'s writers", fontsize=9,
                 x=0.02, ha="left")
    fig.subplots_adjust(top=1 - 0.9 / fig.get_figheight(), bottom=0.6 / fig.get_figheight())
    fig.savefig(path)
    plt.close(fig)
    return (f"wrote {path}: canonical page of {maps[0].canonical_page_size_bytes} bytes and {len(maps)} local "
            f"pages, one cell = {unit} bytes")

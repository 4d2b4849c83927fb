"""Pictures of who writes which bytes (`layoutalg draw`), with matplotlib.

The canonical page of block 0 is drawn as a grid of cells, row-major by canonical byte,
each cell coloured by the rank that writes it; a cell is hatched where more than one rank
holds its bytes (replicas: only the writer of the block stores them). Below, each rank's
local page in its own physical byte order, each cell coloured by the rank that writes the
canonical bytes it holds, hatched where that is another rank (this rank holds a replica).

Two sources: the runs the runtime moves (`owners`, from mappings), or the spec's own
reading (`owners_of_reading`), which also draws a spec that does not tile: a canonical
cell two writers claim is outlined in red and crossed, a cell nobody writes is grey and
crossed, as a prover counterexample says.

A cell is `unit` bytes, the largest power of two dividing every fragment, doubled until a
page fits in 4,096 cells (then a cell shows its first byte's owner, and the title says
so). The runtime never imports this module.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import textwrap
from math import gcd
from typing import NamedTuple, Sequence

from ..errors import LayoutalgError
from ..mapping import CanonicalPageMapping

MAX_CELLS = 4096
MAX_READING_BYTES = 1 << 18  # pages drawn from the spec's reading are enumerated element by element
MAX_DRAWN_BYTES = 1 << 24  # pages drawn from runs are followed byte by byte (a list entry each)


def _drawable(total: int, what: str) -> None:
    if total > MAX_DRAWN_BYTES:
        raise LayoutalgError(f"draw: {what} hold {total} bytes; a picture follows each byte, up to {MAX_DRAWN_BYTES} "
                             f"in all: try smaller sizes")


class Owners(NamedTuple):
    """Who writes and who holds each canonical byte of one block, and what each local byte is."""

    writers: list      # per canonical byte: the ranks that write it for this block
    holders: list      # per canonical byte: how many ranks hold it
    local: list        # per rank, per local byte: its canonical byte (-1: none)
    unit: int          # bytes per cell
    exact: bool        # whether no cell straddles two fragments
    pads: list | None = None  # per canonical byte: padding, never copied (a page of regions)


def _cell(gcd_of: int, biggest: int) -> tuple[int, bool]:
    unit = 1
    while gcd_of and gcd_of % (unit * 2) == 0:
        unit *= 2
    exact = True
    while biggest > unit * MAX_CELLS:
        unit, exact = unit * 2, exact and gcd_of % (unit * 2) == 0
    return unit, exact


def cell_bytes(maps: Sequence[CanonicalPageMapping]) -> tuple[int, bool]:
    """(bytes of one cell, whether cells never straddle two fragments) for these mappings.

    Examples:
        >>> from layoutalg.mapping import CopyRun
        >>> cell_bytes([CanonicalPageMapping(64, 32, (CopyRun(0, 0, 16, 2, 16, 32),), 1, 0, True)])
        (16, True)
    """
    g = 0
    for m in maps:
        for r in m.runs:
            for v in (r.local_offset, r.canonical_offset, r.fragment_size,
                      r.local_stride if r.num_fragments > 1 else 0, r.canonical_stride if r.num_fragments > 1 else 0):
                g = gcd(g, v)
    return _cell(g, max([maps[0].canonical_page_size_bytes] + [m.local_page_size_bytes for m in maps]))


def owners(maps: Sequence[CanonicalPageMapping], block: int = 0) -> Owners:
    """Who writes which bytes of block `block`, by the mappings' runs."""
    size = maps[0].canonical_page_size_bytes
    _drawable(size + sum(m.local_page_size_bytes for m in maps), "the canonical page and the ranks' pages")
    writers, holders, local = [[] for _ in range(size)], [0] * size, []
    for rank, m in enumerate(maps):
        written = set(id(r) for r in m.written_runs(block))
        here = [-1] * m.local_page_size_bytes
        for r in m.runs:
            for lo, co, n in r.triples():
                for k in range(n):
                    here[lo + k] = co + k
                    holders[co + k] += 1
                    if id(r) in written:
                        writers[co + k].append(rank)
        local.append(here)
    return Owners(writers, holders, local, *cell_bytes(maps))


def owners_of_reading(lib, family: str, sizes: dict) -> Owners:
    """Who writes which bytes of block 0 by the spec's own reading (`interpret`), whether or not
    the family tiles there: a rank writes block 0 where every replica digit of it is 0 (of
    each region's own replicas, for a page of regions; the canonical page's pads are marked)."""
    from ..dsl.interpret import Reading, byte_map, rank_digits
    if family not in lib.families:
        raise LayoutalgError(f"draw: {family} is not a family of this library (a part of a page is drawn with "
                             f"its page)")
    parts = lib.parts_of(family)
    pads = [p for p in lib.parts_of(family, pads=True) if p.endswith("'")]  # the canonical page's
    try:
        readings = [Reading(lib, p, dict(sizes)) for p in parts]
        pad_readings = [Reading(lib, p, dict(sizes)) for p in pads]
    except (ArithmeticError, LookupError) as e:
        raise LayoutalgError(f"draw: {family} cannot be read at these sizes: {e}") from None
    first = readings[0]
    for role in ("local", "canonical"):
        if first.page(role) > MAX_READING_BYTES:
            raise LayoutalgError(f"draw: the {role} page is {first.page(role)} bytes; drawn from the spec's reading "
                                 f"(element by element) only up to {MAX_READING_BYTES}: try smaller sizes")
    world = 1
    for _, e in first.rank_extents():
        world *= e
    canon = first.page("canonical")
    writers, holders, local = [[] for _ in range(canon)], [0] * canon, []
    g = 0
    for rank in range(world):
        here = [-1] * first.page("local")
        for r in readings:
            digits = rank_digits(r.rank_extents(), rank)
            writes = all(digits[n] == 0 for n in r.replicas)
            for lo, co in byte_map(r, rank).items():
                if 0 <= lo < len(here):
                    here[lo] = co
                if 0 <= co < canon:
                    holders[co] += 1
                    if writes:
                        writers[co].append(rank)
        local.append(here)
    for r in readings:
        ldef, bound = r.layout("local")
        g = gcd(g, r.element(ldef, bound))
    padded = [False] * canon
    for r in pad_readings:  # a pad maps onto itself: its bytes are where its box lies
        for lo in byte_map(r, 0):
            if 0 <= lo < canon:
                padded[lo] = True
    unit, exact = _cell(g, max([canon] + [len(h) for h in local]))
    return Owners(writers, holders, local, unit, exact, padded if any(padded) else None)


def canonical_names(lib, family: str, sizes: dict) -> list | None:
    """Per canonical byte of `family`'s page at `sizes`, its element's canonical index as
    ((name, value), ...), a page of regions' region first (("region", "x"), ...); None for a
    byte no region holds. None altogether where the page cannot be read here or is too large
    to enumerate (`MAX_READING_BYTES`): the picture then goes without labels."""
    from ..dsl.interpret import Reading, index_box
    try:
        parts = lib.parts_of(family)
        readings = [(p, Reading(lib, p, dict(sizes))) for p in parts]
        size = readings[0][1].page("canonical")
        if size > MAX_READING_BYTES:
            return None
        out: list = [None] * size
        for part, r in readings:
            ldef, bound = r.layout("canonical")
            elem = r.element(ldef, bound)
            ext = r.extents("canonical")
            region = (("region", part.partition(".")[2]),) if part != family else ()
            for index in index_box(ext):
                at = r.offset("canonical", index)
                for b in range(elem):
                    if 0 <= at + b < size:
                        out[at + b] = region + tuple(index.items())
        return out
    except (ArithmeticError, LookupError, ValueError):
        return None


def draw(source, path: str, title: str = "", block: int = 0, names: list | None = None) -> str:
    """Write the picture of `source` (mappings, or an `Owners`) to `path` (.svg or .png);
    returns a line saying what was drawn. `names` (`canonical_names`) labels each page by the
    canonical indices its bytes hold: the outermost index's boundaries drawn thick and named
    (K/V, a layer, a region), the next one's thin, named where they fit."""
    if not isinstance(source, Owners):
        if not source:
            raise LayoutalgError("draw: no rank mapping to draw")
        source = owners(source, block)
    _check_path(path)
    o, unit = source, source.unit

    def first(ws):
        return ws[0] if ws else -1

    pad = o.pads or [False] * len(o.writers)
    canon = [(first(o.writers[c]), o.holders[c] > 1, "clash" if len(o.writers[c]) > 1 else
              "pad" if pad[c] and not o.writers[c] else "gap" if not o.writers[c] else None)
             for c in range(0, len(o.writers), unit)]

    def named(c):
        return names[c] if names is not None and 0 <= c < len(names) else None

    pages = [("canonical page", canon, [named(c) for c in range(0, len(o.writers), unit)])]
    for rank, here in enumerate(o.local):
        cells = []
        for b in range(0, len(here), unit):
            c = here[b]
            ws = o.writers[c] if 0 <= c < len(o.writers) else []
            w = rank if rank in ws else first(ws)
            cells.append((w, w != rank, None))
        pages.append((f"rank {rank}", cells, [named(here[b]) for b in range(0, len(here), unit)]))
    clashes = sum(1 for _, _, m in canon if m == "clash")
    gaps = sum(1 for _, _, m in canon if m == "gap")
    merged = "" if o.exact else " (a cell shows its first byte's owner: fragments are smaller)"
    _render(pages, path, f"{title}\none cell = {unit} bytes{merged}", "writes", "held by more than one rank",
            len(o.local), clashes, gaps, f"block {block}'s writers", unit)
    broken = f"; {clashes} cells with two writers, {gaps} cells nobody writes" if clashes or gaps else ""
    return (f"wrote {path}: canonical page of {len(o.writers)} bytes and {len(o.local)} local pages, "
            f"one cell = {unit} bytes{broken}")


def draw_reshard(plans, producers: int, path: str, title: str = "", labels=None, rank_of=None,
                 names: list | None = None) -> str:
    """A direct reshard as a picture: each consumer rank's local page in its own byte order,
    each cell coloured by the producer rank it is read from (`reshard.DirectPlan`s, with
    `producers` ranks). Across another cp, `labels` names each plan's row (a consumer's part
    of a big page) and `rank_of` turns a virtual producer (part * world + rank) into its rank.
    `names`, per plan and per local byte, the canonical index it holds (`canonical_names`
    through the consumer's mapping): which canonical bytes move, from whom."""
    rank_of = rank_of or (lambda v: v)
    if not plans:
        raise LayoutalgError("draw: no consumer plan to draw")
    _check_path(path)
    _drawable(sum(p.local_page_size_bytes for p in plans), "the consumers' pages")
    g = 0
    for p in plans:
        for r in p.runs:
            for v in (r.dst_offset, r.fragment_size, r.dst_stride if r.num_fragments > 1 else 0):
                g = gcd(g, v)
    unit, exact = _cell(g, max(p.local_page_size_bytes for p in plans))
    pages = []
    for k, p in enumerate(plans):
        source = [-1] * p.local_page_size_bytes
        for r in p.runs:
            for _, d, n in r.triples():
                source[d:d + n] = [rank_of(r.producer)] * n
        name = labels[k] if labels else f"consumer {p.consumer}"
        pages.append((name, [(source[b], False, None if source[b] >= 0 else "gap")
                             for b in range(0, len(source), unit)],
                      [names[k][b] for b in range(0, len(source), unit)] if names else None))
    merged = "" if exact else " (a cell shows its first byte's source)"
    _render(pages, path, f"{title}\none cell = {unit} bytes{merged}", "feeds", None, producers, 0,
            sum(1 for _, cells, _ in pages for _, _, m in cells if m), "the producer each byte is read from",
            unit)
    return f"wrote {path}: {len(plans)} consumer pages, each cell coloured by its producer, one cell = {unit} bytes"


def need_matplotlib():
    """matplotlib, or a `MissingExtra` naming the `draw` extra (asked before any work is done)."""
    from ..errors import optional
    return optional("matplotlib", "draw", "drawing a picture")


def _check_path(path) -> None:
    if not str(path).endswith((".svg", ".png")):
        raise LayoutalgError(f"draw: {path}: the picture must be .svg or .png")


def _segments(labels: list, level: int) -> list[tuple[int, str]]:
    """(cell, label) where the canonical index's first `level` + 1 names change along a page's
    cells: the start of each K/V half, layer, region, ... (`labels`: each cell's index, or None)."""
    out, last = [], object()
    for i, lab in enumerate(labels):
        key = lab[:level + 1] if lab else None
        if key != last and key is not None and len(key) > level:
            out.append((i, f"{key[level][0]}={key[level][1]}" if key[level][0] != "region" else key[level][1]))
        last = key
    return out


def _render(pages, path: str, title: str, verb: str, hatch_label, ranks: int, clashes: int, gaps: int,
            what: str, unit: int = 1) -> None:
    """Rows of cells, `pages` as (name, [(rank or -1, hatched, None | "clash" | "gap"), ...],
    each cell's canonical index or None); each row says its first byte (`unit` bytes a cell)."""
    matplotlib = need_matplotlib()
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # an SVG's words stay words: searchable, and small
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Polygon, Rectangle

    cmap = plt.get_cmap("tab20" if ranks > 10 else "tab10")

    def colour(w):
        return "#d0d0d0" if w < 0 else cmap(w % cmap.N)

    cols = min(64, max(1, max(len(c) for _, c, _ in pages)))
    heights = [max(1, -(-len(c) // cols)) for _, c, _ in pages]
    fig, axes = plt.subplots(len(pages), 1, figsize=(10, 1.6 + 0.22 * sum(heights) + 0.35 * len(pages)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, (name, cells, labels), rows in zip(axes[:, 0], pages, heights):
        for i, (w, hatched, mark) in enumerate(cells):
            x, y = i % cols, rows - 1 - i // cols
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour(w), edgecolor="white", linewidth=0.3,
                                   hatch="///" if hatched and mark is None else None))
            if mark == "pad":
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor="white", edgecolor="#d0d0d0", linewidth=0.3))
            elif mark:
                ax.add_patch(Rectangle((x, y), 1, 1, fill=False, edgecolor="red" if mark == "clash" else "black",
                                       linewidth=1.2, hatch="xx"))
        for level, (width, size, up) in enumerate(((1.6, 6, 0.76), (0.6, 5, 0.47), (0, 4.5, 0.18))):
            marks = _segments(labels, level) if labels else []  # the outermost index, then the next two
            if level and (len(marks) > 24 or cols > 32):
                break  # too many to read, or cells too small: the outer boundaries say enough
            for i, text in marks:
                x, y = i % cols, rows - 1 - i // cols
                if i and width:
                    ax.plot([x, x], [y, y + 1], color="black", linewidth=width, solid_capstyle="butt")
                ax.text(x + 0.08, y + up, text, fontsize=size, va="center", ha="left",
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.2, "alpha": 0.8})
        last = len(cells) - (rows - 1) * cols  # cells in the last row: the page's outline, at its own width
        ax.add_patch(Polygon([(0, 0), (last, 0), (last, 1), (cols, 1), (cols, rows), (0, rows)] if rows > 1 else
                             [(0, 0), (last, 0), (last, 1), (0, 1)], closed=True, fill=False, edgecolor="black",
                             linewidth=0.8))
        for spine in ax.spines.values():  # no frame past the page's end: that is no memory of it
            spine.set_visible(False)
        ax.set_xlim(0, cols)
        ax.set_ylim(0, rows)
        ax.set_aspect("equal")
        ax.set_xticks([])
        step = max(1, -(-rows // 8))
        ax.yaxis.tick_right()
        ax.set_yticks([rows - 1 - r + 0.5 for r in range(0, rows, step)],
                      [f"byte {r * cols * unit}" for r in range(0, rows, step)], fontsize=6)
        ax.tick_params(axis="y", length=0)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        ax.yaxis.set_label_position("left")
    shown = sorted({w for _, cells, _ in pages for w, _, _ in cells if w >= 0})
    legend = [Patch(facecolor=colour(r), label=f"rank {r} {verb}") for r in shown]
    if hatch_label:
        legend.append(Patch(facecolor="white", edgecolor="black", hatch="///", label=hatch_label))
    if clashes:
        legend.append(Patch(facecolor="white", edgecolor="red", hatch="xx", label=f"two writers ({clashes} cells)"))
    if gaps:
        legend.append(Patch(facecolor="#d0d0d0", edgecolor="black", hatch="xx", label=f"nobody writes ({gaps} cells)"))
    if any(m == "pad" for _, cells, _ in pages for _, _, m in cells):
        legend.append(Patch(facecolor="white", edgecolor="#d0d0d0", label="padding (never copied)"))
    fig.legend(handles=legend, loc="lower center", fontsize=7, ncol=min(6, len(legend)), frameon=False)
    head, _, tail = title.rpartition("\n")
    head = "\n".join(textwrap.wrap(head, 125))
    fig.suptitle(f"{head}\n{tail}, {cols} cells a row; {what}", fontsize=9, x=0.02, ha="left")
    fig.subplots_adjust(top=1 - 0.9 / fig.get_figheight(), bottom=0.6 / fig.get_figheight())
    tmp = None
    try:  # into a file of its own beside the picture, then renamed: never a half-written picture
        if os.path.lexists(path) and not os.path.isfile(path) or os.path.islink(path):
            raise LayoutalgError(f"draw: cannot write the picture {path}: it is not a regular file")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=os.path.splitext(path)[1])
        with os.fdopen(fd, "wb") as f:
            fig.savefig(f, format=os.path.splitext(path)[1][1:] or None)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a file opened for writing would be, not mkstemp's 0600
        os.replace(tmp, path)
        tmp = None
    except OSError as e:  # a folder that is not there, no permission, a full disk: say so, not a traceback
        raise LayoutalgError(f"draw: cannot write the picture {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

"""The runtime data types, with the reference's field names.

`Run`: the one run record, a progression of equal fragments between two byte spaces: for
i < num_fragments, source bytes [src_offset + i*src_stride, +fragment_size) are destination
bytes [dst_offset + i*dst_stride, +fragment_size), from source rank `producer` where there
are several. It goes by two names, which differ only in what they call its fields:
`CopyRun` (local page -> canonical page: the local side is the source) and `DirectRun`
(a producer rank's local page -> a consumer's, the producer first).
`CanonicalPageMapping`: one rank's runs for one layer, and who stores which block.
"""
from __future__ import annotations

from collections import namedtuple

from .record import field, named_tuple, record


@named_tuple
class Side:
    """One side of a run: where its first fragment starts, and the step to the next."""

    offset: int
    stride: int


SIDES = ("src", "dst")
"""A run's two sides, as `Run.side` names them (`CopyRun`: src the local page, dst the canonical)."""


class Run(tuple):
    """A strided run of equal fragments from a source byte space to a destination byte space
    (see the module's docstring), a tuple of its fields as its name orders them.

    Built as given, by position or by name (a run that breaks an invariant is still built: the
    plan given it refuses it, naming what is wrong, before a byte moves); `sound` says whether
    its values hold the invariants (`why_refused`: every field an int, none negative; a copy
    run moves a byte and its fragments do not overlap on either side). A plan checks what it
    moves by the values, never by how the run was made: a pickle, `tuple.__new__` or a hand
    can build any tuple.

    Examples:
        >>> r = Run(0, 100, 4, 3, 8, 16)
        >>> r == CopyRun(0, 100, 4, 3, 8, 16), r.src, r.dst
        (True, Side(offset=0, stride=8), Side(offset=100, stride=16))
        >>> list(r.triples()), r.at("dst", 4, 0, num_fragments=1)
        ([(0, 100, 4), (8, 116, 4), (16, 132, 4)], CopyRun(local_offset=0, canonical_offset=4, fragment_size=4, num_fragments=1, local_stride=8, canonical_stride=16))
        >>> Run(4, 0, 4, 1, 4, 4, producer=1)
        DirectRun(producer=1, src_offset=4, dst_offset=0, fragment_size=4, num_fragments=1, src_stride=4, dst_stride=4)
        >>> Run(0, 0, 4, 1, -4, 4).sound, Run(0, 0, 4, 1, -4, 4).why_refused()
        (False, 'local_stride is negative')
    """

    __slots__ = ()
    producer = None   # the source rank, where there are several (`DirectRun`)

    def __new__(cls, src_offset, dst_offset, fragment_size, num_fragments, src_stride, dst_stride, producer=None):
        if producer is None:
            return CopyRun(src_offset, dst_offset, fragment_size, num_fragments, src_stride, dst_stride)
        return DirectRun(producer, src_offset, dst_offset, fragment_size, num_fragments, src_stride, dst_stride)

    @property
    def sound(self) -> bool:
        """Whether the run's values hold its invariants."""
        return self.why_refused() is None

    @property
    def src(self) -> Side:
        return Side(self.src_offset, self.src_stride)

    @property
    def dst(self) -> Side:
        return Side(self.dst_offset, self.dst_stride)

    def side(self, which: str) -> Side:
        """The `"src"` or `"dst"` side."""
        if which not in SIDES:
            raise ValueError(f"a run's sides are {SIDES}, not {which!r}")
        return self.src if which == "src" else self.dst

    def at(self, which: str, offset: int, other: int, fragment_size=None, num_fragments=None) -> Run:
        """This run (of the same name and producer) starting at `offset` on side `which` and
        `other` on the other side, with its fragments resized or counted anew where given."""
        if which not in SIDES:
            raise ValueError(f"a run's sides are {SIDES}, not {which!r}")
        size = self.fragment_size if fragment_size is None else fragment_size
        count = self.num_fragments if num_fragments is None else num_fragments
        src, dst = (offset, other) if which == "src" else (other, offset)
        return self._of(src, dst, size, count)

    def fused(self) -> Run:
        """The run as one fragment of all its bytes: what it is on a side where each fragment
        continues the last (stride = fragment size), which the caller has seen."""
        return self._of(self.src_offset, self.dst_offset, self.fragment_size * self.num_fragments, 1)

    @property
    def bytes(self) -> int:
        """The bytes the run moves."""
        return self.fragment_size * self.num_fragments

    def triples(self):
        """The fragments as (source offset, destination offset, size)."""
        so, do, ss, ds, f = self.src_offset, self.dst_offset, self.src_stride, self.dst_stride, self.fragment_size
        for i in range(self.num_fragments):
            yield (so + i * ss, do + i * ds, f)

    def why_refused(self) -> str | None:
        """The first invariant the run breaks, or None."""
        for name, v in zip(self._fields, self):
            if type(v) is not int:
                return f"{name} is not an int"
        for name, v in zip(self._fields, self):
            if v < 0:
                return f"{name} is negative"
        return None


_CopyFields = namedtuple("CopyRun", ["local_offset", "canonical_offset", "fragment_size", "num_fragments",
                                     "local_stride", "canonical_stride"], module=__name__)


class CopyRun(_CopyFields, Run):
    """A `Run` of a local page (the source side) into the canonical page (the destination):
    local bytes [local_offset + i*local_stride, +fragment_size) are canonical bytes
    [canonical_offset + i*canonical_stride, +fragment_size). A mapping's run moves at least
    one byte, its fragments apart on both sides.

    Examples:
        >>> list(CopyRun(0, 100, 4, 3, 8, 16).triples())
        [(0, 100, 4), (8, 116, 4), (16, 132, 4)]
        >>> CopyRun(0, 100, 4, 3, 8, 16).src_offset, CopyRun(0, 0, 8, 2, 4, 8).sound
        (0, False)
    """

    __slots__ = ()
    src_offset, dst_offset = _CopyFields.local_offset, _CopyFields.canonical_offset
    src_stride, dst_stride = _CopyFields.local_stride, _CopyFields.canonical_stride

    def _of(self, src, dst, size, count) -> Run:
        return CopyRun(src, dst, size, count, self.local_stride, self.canonical_stride)

    def why_refused(self) -> str | None:
        why = Run.why_refused(self)
        if why is None and (self.fragment_size < 1 or self.num_fragments < 1):
            return "it moves no byte"
        if why is None and self.num_fragments > 1 and \
                min(self.local_stride, self.canonical_stride) < self.fragment_size:
            return "its fragments overlap"
        return why


_DirectFields = namedtuple("DirectRun", ["producer", "src_offset", "dst_offset", "fragment_size", "num_fragments",
                                         "src_stride", "dst_stride"], module=__name__)


class DirectRun(_DirectFields, Run):
    """A `Run` of producer rank `producer`'s local page (the source) into a consumer's (the
    destination), for a direct reshard plan (`plans.reshard.DirectPlan`).

    Examples:
        >>> list(DirectRun(1, 0, 8, 4, 2, 4, 8).triples())
        [(0, 8, 4), (4, 16, 4)]
    """

    __slots__ = ()
    producer = _DirectFields.producer

    def _of(self, src, dst, size, count) -> Run:
        return DirectRun(self.producer, src, dst, size, count, self.src_stride, self.dst_stride)


MAX_STRETCHES = 64
"""Stretches a page may lie in (the values of a tensor's dims before the block): beyond, a layer
fails closed rather than copy thousands of slivers a block (FlashAttention's K and V: 2)."""


@named_tuple
class TensorView:
    """A layer tensor as the mapping was derived for it: block `b`'s element `idx` is the
    `element` bytes at `b * block stride + offset + element * sum(idx * strides)`.

    Examples:
        >>> v = TensorView("ssm", 96, (2, 4), (4, 1), 4)
        >>> v.bytes_per_block
        32
    """

    name: str
    offset: int      # bytes from the start of the page to element 0
    shape: tuple     # extents of the dims after the block dim
    strides: tuple   # their strides, in elements
    element: int     # bytes per element
    dtype: str = ""  # the element type's name where the tensor named it ('torch.bfloat16')
    # dims before the block dim: the tensor is (shape[:outer], blocks, shape[outer:]) and each
    # value of its outer dims is a block-strided tensor of one stretch of the page, `segment`
    # bytes (FlashAttention's (2, blocks, ...): K of every block, then V). Their strides here
    # count within the page; in the tensor they are whatever keeps the segments apart.
    outer: int = 0

    @property
    def placing(self) -> tuple:
        """Where the view puts a tensor's bytes in a block's page: two views alike here read one
        tensor's memory as the same page bytes."""
        return self.offset, self.outer, tuple(self.shape), tuple(self.strides), self.element

    @property
    def segments(self) -> int:
        """How many stretches of the page the tensor holds apart (1 where the block is first)."""
        n = 1
        for extent in self.shape[:self.outer]:
            n *= extent
        return n

    @property
    def bytes_per_block(self) -> int:
        n = self.element
        for extent in self.shape:
            n *= extent
        return n


@named_tuple
class Tiling:
    """How a group of ranks tiles (a region of) the canonical page at one configuration, the
    same for every rank of the group: its local digits `(extent, local byte stride, canonical
    byte stride)`, its rank digits `(extent, rank stride, canonical byte stride, replica)`,
    the canonical base of rank 0 and the bytes before the region in the local page. Direct
    reshard plans are composed from two groups' tilings (`layoutalg.algebra.refine`), then
    certified against the runs."""

    local: tuple
    ranks: tuple
    canonical_base: int
    local_base: int = 0


@record(frozen=True)
class CanonicalPageMapping:
    """How one rank's page of one layer maps onto the canonical page.

    Examples:
        >>> m = CanonicalPageMapping(256, 128, (CopyRun(0, 0, 128, 1, 128, 128),), 2, 1, True)
        >>> [m.is_writer(b) for b in range(4)]
        [False, True, False, True]
    """

    canonical_page_size_bytes: int
    local_page_size_bytes: int
    runs: tuple[CopyRun, ...]
    num_writers: int
    writer_index: int
    parallelism_agnostic: bool
    # the canonical page format (`layoutalg id`): key stored pages by it. Not part of equality,
    # so a mapping still equals one built with the reference's six fields
    layout_id: str = field(default="", compare=False)
    # a page of regions replicated differently (Mamba's B and C conv slices on fewer groups
    # than ranks, its x slice sharded): (num_writers, writer_index) of each run; empty when
    # every run follows the mapping's own
    run_writers: tuple[tuple[int, int], ...] = ()
    # the layer tensor(s) the mapping was derived for, where the family reads them: one view
    # of the page (`tensor (block, ...)`), or one per tensor of a page of regions (Mamba's
    # conv and SSM state); copy plans check the tensors they are given against them
    tensors: tuple[TensorView, ...] = field(default=(), compare=False)
    # the concrete page format: `layout_id` and the sizes that place each byte at this
    # configuration (the canonical layout's numbers; for a page that is not parallelism-
    # agnostic, the whole configuration). Key stored pages by it: two mappings share it only
    # where a canonical byte of one is the same byte of the other
    format_id: str = field(default="", compare=False)
    # the group's tiling of the canonical page, one per region of a page (one for a layout of
    # one box), where the lowering made the runs; empty for a mapping from outside. Direct
    # plans compose two groups' tilings in the algebra
    tilings: tuple[Tiling, ...] = field(default=(), compare=False)
    # derived with no tensor, for a family whose spec names no tensor dims (MLA's latent rows):
    # `(box,)`, the local index box a given tensor's dims must group or be grouped by
    # (`runtime.tensors.as_it_lies`; None: a page of regions, read as flat pages only); () otherwise
    reads: tuple = field(default=(), compare=False)

    def __post_init__(self):
        rw = self.run_writers
        if rw and (not isinstance(rw, tuple) or not isinstance(self.runs, tuple) or len(rw) != len(self.runs)):
            raise ValueError(f"CanonicalPageMapping.run_writers must be a tuple of one (num_writers, writer_index) "
                             f"per run ({len(self.runs) if hasattr(self.runs, '__len__') else '?'} runs), "
                             f"got {rw!r}")

    @property
    def elections(self) -> tuple[tuple[int, int], ...]:
        """(num_writers, writer_index) of every run: `run_writers`, or the mapping's own for each."""
        return self.run_writers or ((self.num_writers, self.writer_index),) * len(self.runs)

    def is_writer(self, block_id: int) -> bool:
        """Whether this rank stores any run of the page keyed `block_id`. Writers take turns by
        that key, whichever id the caller keys pages by: `copy.CopyPlan.store` keys them by the
        canonical page id (engines elect by the offload page, not the GPU block), so a caller
        gating a store on this passes the page id too, or pages go unwritten."""
        if self.run_writers:
            return any(block_id % n == w for n, w in self.run_writers)
        return block_id % self.num_writers == self.writer_index

    def written_runs(self, block_id: int) -> tuple[CopyRun, ...]:
        """The runs this rank stores for block (or canonical page) `block_id`.

        Examples:
            >>> m = CanonicalPageMapping(8, 4, (CopyRun(0, 0, 2, 1, 2, 2), CopyRun(2, 6, 2, 1, 2, 2)), 1, 0,
            ...                          False, run_writers=((1, 0), (2, 1)))
            >>> m.written_runs(0), m.written_runs(1) == m.runs
            ((CopyRun(local_offset=0, canonical_offset=0, fragment_size=2, num_fragments=1, local_stride=2, canonical_stride=2),), True)
        """
        return tuple(r for r, (n, w) in zip(self.runs, self.elections) if block_id % n == w)


def merged_triples(runs) -> list[tuple[int, int, int]]:
    """The byte map of `runs`: fragments sorted by local offset, merged where contiguous in both.

    Examples:
        >>> merged_triples([CopyRun(4, 14, 4, 1, 4, 4), CopyRun(0, 10, 4, 1, 4, 4)])
        [(0, 10, 8)]
    """
    out: list[list[int]] = []
    for lo, co, n in sorted(t for r in runs for t in r.triples()):
        if out and out[-1][0] + out[-1][2] == lo and out[-1][1] + out[-1][2] == co:
            out[-1][2] += n
        else:
            out.append([lo, co, n])
    return [tuple(t) for t in out]


@named_tuple
class PageConversion:
    """`mapping` sends each byte of one big page to its byte in the group of `k` small pages."""

    k: int
    token: str              # the family's `sequence` index, the one whose extent differs
    mapping: CanonicalPageMapping
    big_page: int
    small_page: int
    big_format: str = ""    # the page formats it converts between (`runtime.formats.form_part` of a mapping's
    small_format: str = ""  # format id): plans across another cp use it only between groups of those


def virtual_rank(rank: int, part: int, world: int) -> int:
    """Across another cp a rank that reads small pages is `k` virtual ranks, one for each part of
    the big page its pages join into: part `part` of rank `rank` of a `world`-rank group.

    Examples:
        >>> virtual_rank(1, 2, 4)
        9
        >>> rank_and_part(9, 4)
        (1, 2)
    """
    return part * world + rank


def rank_and_part(v: int, world: int) -> tuple[int, int]:
    """`(rank, part)` of virtual rank `v` of a `world`-rank group (`virtual_rank` inverted)."""
    return v % world, v // world

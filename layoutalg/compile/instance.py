"""A family at one configuration (`Instance`): every size and stride as an int, the digit
table the compiled code returns and the lowering reads; and the domain a family's runtime
names are proved over (`Bound`).
"""
from __future__ import annotations

from ..record import named_tuple


@named_tuple
class Bound:
    """A runtime name a family reads, and the domain it is proved over (inclusive)."""
    name: str
    lo: int
    hi: int


@named_tuple
class LocalDigit:
    """A digit of the local index at one configuration: its extent and its byte strides in the
    local and the canonical page."""

    extent: int
    local: int
    canonical: int


@named_tuple
class RankDigit:
    """A digit of the rank number at one configuration: its extent, its stride in the rank
    number, its byte stride in the canonical page, and whether ranks that differ only in it
    hold the same bytes (replicas, which take turns writing)."""

    extent: int
    rank: int
    canonical: int
    replica: bool


@named_tuple
class Instance:
    """A family at one configuration: every size and stride as an int."""

    family: str
    local: tuple        # (LocalDigit, ...) for each local digit
    ranks: tuple        # (RankDigit, ...) for each rank digit
    canonical_base: int
    local_page: int
    canonical_page: int
    world: int
    agnostic: bool
    element: int
    tensor_shape: tuple   # extents of the tensor's dims after the block dim
    tensor_strides: tuple  # their strides in elements
    targets: tuple        # ((canonical extent, base, ((scale, digit extent), ...)), ...)
    local_names: tuple
    rank_names: tuple
    local_base: int = 0   # bytes before the region (a page of regions); 0 for a layout of one box
    canonical_form: tuple = ()  # (base, element, ((extent, stride), ...)) of the canonical layout
    local_form: tuple = ()  # the same of the local layout: its index box, as the spec writes it
    names_data: bool = False  # its canonical indices name the engine's elements (`claims.names_data`)

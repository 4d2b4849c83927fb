"""The family IR: what resolving a family makes of it (`family.resolve`).

A family is one `Variant` per combination of its grid's cases; a variant is its guards,
its local and canonical layouts (`LayoutIR`) and its digit table (`Digit`s, each with a
local, a canonical and a rank stride, all sympy sizes), plus the canonical targets.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import sympy

from ..errors import Span
from .itersum import IterSum, Split
from .sizes import Atoms


@dataclass(frozen=True)
class Guard:
    """A condition that must hold for the family to apply (fail closed otherwise)."""

    cond: object  # sympy boolean
    text: str
    span: Span | None


@dataclass(frozen=True)
class LayoutIR:
    """A layout instantiated with sizes: index extents and element offsets."""

    name: str
    indices: tuple[str, ...]
    extents: tuple[sympy.Expr, ...]
    coefficients: tuple[sympy.Expr, ...]  # element stride of each index
    base: sympy.Expr
    element: sympy.Expr  # bytes per element
    tensor: tuple[str, ...] | None
    span: Span
    tensor_outer: int = 0  # dims of `tensor` before the block dimension (`tensor (kv, block, ...)`)

    def size_bytes(self) -> sympy.Expr:
        return sympy.expand(self.element * prod(self.extents))


@dataclass(frozen=True)
class Digit:
    """One mixed-radix digit with its extent and its three strides."""

    name: str
    extent: sympy.Expr
    local: sympy.Expr
    canonical: sympy.Expr
    rank: sympy.Expr
    is_rank: bool
    replica: bool = False
    split: Split | None = None  # which index (or rank digit) it is a digit of; None: byte in element


@dataclass(frozen=True)
class Target:
    """One canonical index as a normal form over the digits."""

    index: str
    extent: sympy.Expr
    sum: IterSum
    placed: str = ""  # the grid's fn that places it (`head(h)`), when the shard map writes it so (`family.placed_by`)
    placed_args: tuple = ()  # the normal forms of that call's arguments that read a local index
    misplaced: str = ""  # why a call of the grid's fn is not taken as its placement (`family.placed_by`)


@dataclass
class Variant:
    """A family under one combination of grid cases: guards and a digit table."""

    family: str
    cases: tuple[Guard, ...]
    guards: tuple[Guard, ...]
    local: LayoutIR
    canonical: LayoutIR
    digits: tuple[Digit, ...]
    rank_digits: tuple[str, ...]
    canonical_base: sympy.Expr
    targets: tuple[Target, ...]
    world: sympy.Expr
    agnostic: object  # sympy boolean
    lets: dict[str, sympy.Expr]
    local_base: sympy.Expr = sympy.Integer(0)  # bytes before the region, in a page of regions


@dataclass
class Family:
    name: str
    serves: str
    order: int
    path: str
    span: Span
    atoms: Atoms
    variants: list[Variant] = field(default_factory=list)
    vocabulary: dict = field(default_factory=dict)  # runtime name -> params.Param, what the specs may read
    region: str | None = None  # the region of a page this part family maps (None: a layout of one box)
    # sizes already read as powers of names (`claims._size`): the compiler asks for a few
    # hundred 50 times over. Not an init field, so `dataclasses.replace` starts a fresh one
    sizes_read: dict = field(default_factory=dict, init=False, compare=False, repr=False)
    # sizes normalised under a set of guard rewrites (`guards.guarded_equality`), by that set:
    # variants whose guards imply the same rewrites share their work
    normals: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    @property
    def tensor(self) -> tuple[str, ...] | None:
        return self.variants[0].local.tensor

    @property
    def tensor_outer(self) -> int:
        return self.variants[0].local.tensor_outer

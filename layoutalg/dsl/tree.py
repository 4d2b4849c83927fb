"""The syntax tree of a .lal file: plain dataclasses, each node keeping the `Span` it came
from so later passes can point at the exact spot of a problem (`syntax.parse` builds them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Union

from ..errors import Span, SpecError


# ---- expressions and conditions -------------------------------------------------------


@dataclass(frozen=True)
class Num:
    value: str  # as written; integrality is checked by the IR
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Name:
    id: str
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class BinOp:
    op: str  # + - * / // %
    left: "Expr"
    right: "Expr"
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Neg:
    arg: "Expr"
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple["Expr", ...]
    span: Span = field(compare=False, repr=False)


Expr = Union[Num, Name, BinOp, Neg, Call]


@dataclass(frozen=True)
class Compare:
    op: str  # == != <= >= < >
    left: Expr
    right: Expr
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class BoolOp:
    op: str  # and / or
    args: tuple["Cond", ...]
    span: Span = field(compare=False, repr=False)


@dataclass(frozen=True)
class Not:
    arg: "Cond"
    span: Span = field(compare=False, repr=False)


Cond = Union[Compare, BoolOp, Not]

# ---- statements and definitions -------------------------------------------------------


@dataclass(frozen=True)
class IndexDecl:
    name: str
    extent: Expr
    span: Span


@dataclass(frozen=True)
class Require:
    cond: Cond
    span: Span


@dataclass(frozen=True)
class Let:
    name: str
    value: Expr
    span: Span


@dataclass(frozen=True)
class Fn:
    name: str
    params: tuple[str, ...]
    body: Expr
    span: Span


@dataclass(frozen=True)
class World:
    size: Expr
    span: Span


@dataclass(frozen=True)
class Ranks:
    digits: tuple[IndexDecl, ...]
    span: Span


@dataclass(frozen=True)
class Replica:
    names: tuple[str, ...]
    span: Span


@dataclass(frozen=True)
class Agnostic:
    cond: Cond
    span: Span


@dataclass(frozen=True)
class Case:
    cond: Cond
    body: tuple
    span: Span


@dataclass(frozen=True)
class Use:
    """`use NAME` in a grid: the statements of `rules NAME`, in place (spliced by `Library`)."""
    name: str
    span: Span


def grouped(stmts) -> list:
    """Statements in order, each run of consecutive `case`s gathered into one list (a case group).

    Examples:
        >>> from layoutalg.dsl.syntax import parse
        >>> m = parse("grid g:\\n    case tp == 1:\\n        let a = 1\\n    case tp > 1:\\n        let a = 2\\n    world tp\\n")
        >>> [type(x).__name__ for x in grouped(m.grids[0].body)]
        ['list', 'World']
    """
    out: list = []
    for s in stmts:
        if isinstance(s, Case) and out and isinstance(out[-1], list):
            out[-1].append(s)
        else:
            out.append([s] if isinstance(s, Case) else s)
    return out


def check_views(page: str, regions) -> None:
    """A page's tensors: every data region names the tensor that views it, or none does; no pad
    is part of a tensor (`_box` refuses its tensor clause)."""
    data = [r for r in regions if not r.pad]
    named = [r for r in data if r.tensor is not None]
    if named and len(named) != len(data):
        r = next(r for r in data if r.tensor is None)
        raise SpecError(f"region '{r.name}' of layout '{page}' has no tensor view, but region '{named[0].name}' "
                        f"has one: the layer's tensors view every data region of the page, or none", r.span)
    for r in named:
        if r.tensor_name is None:
            raise SpecError(f"region '{r.name}' of layout '{page}': a page is viewed by several tensors; name "
                            f"the one that views this region ('tensor NAME (block, ...)')",
                            r.tensor[0].span if r.tensor else r.span)
    first: dict[str, LayoutDef] = {r.tensor_name: r for r in reversed(named)}
    joined: dict[str, list] = {}  # the one place (of the flattened indices) a tensor's regions differ
    for r in regions:
        if r.tensor is None:
            continue
        f = first[r.tensor_name]
        differ = [k for k, (a, b) in enumerate(zip(r.tensor, f.tensor)) if a.id != b.id]
        if len(r.tensor) == len(f.tensor) and r.tensor_groups == f.tensor_groups and (
                len(differ) > 1 or differ and differ != joined.setdefault(r.tensor_name, differ)):
            raise SpecError(f"{'pad' if r.pad else 'region'} '{r.name}' of layout '{page}' views tensor "
                            f"'{r.tensor_name}' as ({_dims_shown(r)}) but region '{f.name}' as ({_dims_shown(f)}): "
                            f"the regions of one tensor name the same index in every place but the one they join "
                            f"along, so each dim means one thing", r.tensor[differ[-1]].span)
        if len(r.tensor) != len(f.tensor) or r.tensor_groups != f.tensor_groups:
            shown = lambda x: len(x.tensor_groups or x.tensor)  # noqa: E731
            raise SpecError(f"{'pad' if r.pad else 'region'} '{r.name}' of layout '{page}' views tensor "
                            f"'{r.tensor_name}' with {shown(r)} dimension(s) after the block "
                            f"({_dims_shown(r)}), region '{f.name}' with {shown(f)} ({_dims_shown(f)}): the regions "
                            f"of one tensor join along one of its dimensions, so they name its dims alike",
                            r.tensor[0].span if r.tensor else r.span)


def _dims_shown(r) -> str:
    names, out = [n.id for n in r.tensor], []
    for g in r.tensor_groups or (1,) * len(names):
        out.append(names[0] if g == 1 else "(" + ", ".join(names[:g]) + ")")
        names = names[g:]
    return ", ".join(out)


RESERVED = {"P", "bool", "rank", "block"}
"""Names the compiled code, the shard map or the tensor clause already give a meaning."""


class FamilyOption(NamedTuple):
    """`order N` or `before F, G` on a family's line."""
    kind: str
    value: object
    at: Span


@dataclass(frozen=True)
class LayoutDef:
    """One index box and its offset, or (`regions`) a page of several named boxes.

    A page's regions share the layout's parameters; each has its own index box, offset,
    element size and tensor view. A `pad` region holds bytes that are never copied."""

    name: str
    params: tuple[str, ...]
    indices: tuple[IndexDecl, ...]
    offset: Expr | None
    element: Expr | None
    tensor: tuple[Name, ...] | None  # the index of each dimension after the block dimension
    span: Span
    regions: tuple["RegionDef", ...] = ()
    pad: bool = False  # a region that is padding (`pad NAME:`)
    tensor_name: str | None = None  # a region: the layer tensor that views it (`tensor conv (block, ...)`)
    # how many indices of `tensor` each tensor dim holds, where one holds several (`(kv, d)`): (1, 1, 2)
    tensor_groups: tuple[int, ...] = ()
    # how many dims of `tensor` come before the block dimension (`tensor (kv, block, ...)`): 0 for block first
    tensor_outer: int = 0


class Merged(NamedTuple):
    """`(kv, d)` in a tensor clause: one tensor dimension holding several indices, the first outermost."""
    names: tuple
    span: Span

    def shown(self) -> str:
        return "(" + ", ".join(n.id for n in self.names) + ")"


RegionDef = LayoutDef
"""A region of a page is a layout of its own (named `page.region` in a `Library`)."""


@dataclass(frozen=True)
class GridDef:
    name: str
    body: tuple
    span: Span


@dataclass(frozen=True)
class RulesDef:
    """`rules NAME:` grid statements several grids share (`use NAME`)."""
    name: str
    body: tuple
    span: Span


@dataclass(frozen=True)
class LayoutUse:
    call: Call
    span: Span


@dataclass(frozen=True)
class Shard:
    sources: tuple[Name, ...]
    targets: tuple[Expr, ...]
    span: Span
    region: str | None = None  # `shard NAME (...)`: the map of that region of a page
    replicas: tuple[str, ...] = ()  # rank digits holding the same bytes in this region only


@dataclass(frozen=True)
class FamilyDef:
    name: str
    serves: str
    order: int
    grid: Name | None
    local: LayoutUse | None
    canonical: LayoutUse | None
    shard: Shard | None
    body: tuple  # requires and lets, in order
    span: Span
    shards: tuple[Shard, ...] = ()  # one per data region, when the layouts are pages of regions
    part_of: str | None = None  # a region's part of a family of pages (made by `Library`)
    page: tuple[str, str] | None = None  # (local, canonical) page layouts a part's regions belong to
    sequence: Name | None = None  # the canonical index pages of another cp join along (`sequence t`)
    before: tuple[Name, ...] = ()  # families of the same kind this one is tried before (`before F, G`)


@dataclass(frozen=True)
class Import:
    path: str
    span: Span


@dataclass(frozen=True)
class ParamDef:
    """A runtime name a spec reads beyond the built-in ones (`params.TABLE`): its meaning,
    the bounds the prover quantifies over and the values `check` samples."""

    name: str
    lo: int
    hi: int
    samples: tuple[int, ...]
    meaning: str
    span: Span
    default: int | None = None  # what a layer that does not give the name gets; None: it must give it


@dataclass(frozen=True)
class Module:
    """One parsed .lal file."""

    path: str
    imports: tuple[Import, ...]
    layouts: tuple[LayoutDef, ...]
    grids: tuple[GridDef, ...]
    families: tuple[FamilyDef, ...]
    lets: tuple[Let, ...]
    fns: tuple[Fn, ...]
    params: tuple[ParamDef, ...] = ()
    rules: tuple[RulesDef, ...] = ()
    digest: str = ""  # sha256 of the bytes it was parsed from (`library.sources`)

"""Lark's parse tree -> the syntax tree (`tree`): one method per grammar rule, each node with
the span it came from, and the checks a single node can make (numbers in range, one offset a
layout, the regions of a page viewed alike).
"""
from __future__ import annotations

from lark import Token, v_args
from lark.visitors import Transformer_NonRecursive

from ..errors import Span, SpecError
from .tree import (Agnostic, BinOp, BoolOp, Call, Case, Compare, Expr, FamilyDef, Fn, GridDef, Import,
                   IndexDecl, LayoutDef, LayoutUse, Let, Module, Name, Neg, Not, Num, ParamDef, RESERVED,
                   Ranks, Replica, Require, RulesDef, Shard, Use, World, Merged, FamilyOption, check_views)

MAX_NUMBER = 2 ** 63 - 1
"""Largest integer literal: sizes and strides are 64-bit quantities at run time."""


@v_args(meta=True)
class Builder(Transformer_NonRecursive):
    """Lark tree -> dataclasses. Each method receives the node's meta for its span.

    Non-recursive, so tree depth never meets Python's recursion limit while building."""

    def __init__(self, path: str, span):
        super().__init__()
        self._path = path
        self._span = span

    def _at(self, meta) -> Span:
        return self._span(getattr(meta, "line", 1), getattr(meta, "column", 1))

    def _tok(self, tok: Token) -> Span:
        return self._span(tok.line, tok.column)

    # expressions
    def number(self, meta, c):
        _check_number(c[0], self._tok(c[0]))
        return Num(str(c[0]), self._tok(c[0]))

    def name(self, meta, c):
        return Name(str(c[0]), self._tok(c[0]))

    def _bin(self, op, meta, c):
        return BinOp(op, c[0], c[1], self._at(meta))

    def add(self, meta, c):
        return self._bin("+", meta, c)

    def sub(self, meta, c):
        return self._bin("-", meta, c)

    def mul(self, meta, c):
        return self._bin("*", meta, c)

    def div(self, meta, c):
        return self._bin("/", meta, c)

    def floordiv(self, meta, c):
        return self._bin("//", meta, c)

    def mod(self, meta, c):
        return self._bin("%", meta, c)

    def neg(self, meta, c):
        return Neg(c[0], self._at(meta))

    def call(self, meta, c):
        return Call(str(c[0]), tuple(c[1] or ()), self._tok(c[0]))

    def exprs(self, meta, c):
        return tuple(c)

    def names(self, meta, c):
        return tuple(Name(str(t), self._tok(t)) for t in c)

    # conditions
    def compare(self, meta, c):
        return Compare(str(c[1]), c[0], c[2], self._at(meta))

    def or_cond(self, meta, c):
        return BoolOp("or", tuple(c), self._at(meta))

    def and_cond(self, meta, c):
        return BoolOp("and", tuple(c), self._at(meta))

    def not_(self, meta, c):
        return Not(c[0], self._at(meta))

    # statements
    def index_decl(self, meta, c):
        return IndexDecl(str(c[0]), c[1], self._tok(c[0]))

    def require_stmt(self, meta, c):
        return Require(c[0], self._at(meta))

    def binding(self, meta, c):
        return Let(str(c[0]), c[1], self._tok(c[0]))

    def let_stmt(self, meta, c):
        return tuple(c)

    def fn_stmt(self, meta, c):
        return Fn(str(c[0]), tuple(n.id for n in c[1]), c[2], self._tok(c[0]))

    def world_stmt(self, meta, c):
        return World(c[0], self._at(meta))

    def ranks_stmt(self, meta, c):
        return Ranks(tuple(c), self._at(meta))

    def replica_stmt(self, meta, c):
        return Replica(tuple(n.id for n in c[0]), self._at(meta))

    def agnostic_stmt(self, meta, c):
        return Agnostic(c[0], self._at(meta))

    def case_stmt(self, meta, c):
        return Case(c[0], _flatten(c[1:]), self._at(meta))

    def use_stmt(self, meta, c):
        return Use(str(c[0]), self._tok(c[0]))

    family_case = case_stmt

    # layouts
    def index_clause(self, meta, c):
        return ("index", tuple(c), self._at(meta))

    def offset_clause(self, meta, c):
        return ("offset", c[0], self._at(meta))

    def element_clause(self, meta, c):
        if isinstance(c[0], Num) and (not c[0].value.isdigit() or int(c[0].value) < 1):
            raise SpecError(f"element {c[0].value} bytes: an element is a whole number of bytes, at least 1",
                            c[0].span)
        return ("element", c[0], self._at(meta))

    def tensor_clause(self, meta, c):
        name = None if c[0] is None else Name(str(c[0]), self._tok(c[0]))
        at = next(i for i, t in enumerate(c) if i and isinstance(t, Token) and t.type == "BLOCK")
        rest = [t for t in c[at + 1:] if isinstance(t, Token) and t.type == "REST"]
        if len(rest) > 1:
            raise SpecError("a tensor clause says '...' (the indices it does not name) at most once",
                            self._tok(rest[1]))
        dims = tuple(t if isinstance(t, Merged) else Name(str(t), self._tok(t)) for t in c[1:at] + c[at + 1:])
        return ("tensor", (name, dims, at - 1), self._at(meta))

    def merged_dim(self, meta, c):
        return Merged(tuple(Name(str(t), self._tok(t)) for t in c), self._at(meta))

    def region_kind(self, meta, c):
        return str(c[0])

    def region_def(self, meta, c):
        kind, name, items = c[0], c[1], c[2:]
        return self._box(f"{kind} '{name}'", str(name), (), items, self._tok(name), pad=kind == "pad", region=True)

    def layout_def(self, meta, c):
        name, params, items = str(c[0]), c[1], c[2:]
        where = self._at(meta)
        names = tuple(n.id for n in params or ())
        if items and isinstance(items[0], LayoutDef):
            seen: dict[str, LayoutDef] = {}
            for r in items:
                if r.name in seen:
                    raise SpecError(f"layout '{name}' has two regions named '{r.name}'", r.span)
                seen[r.name] = r
            if all(r.pad for r in items):
                raise SpecError(f"layout '{name}' is all padding: at least one region must hold data", where)
            check_views(name, items)
            regions = tuple(LayoutDef(r.name, names, r.indices, r.offset, r.element, r.tensor, r.span, (), r.pad,
                                      r.tensor_name, r.tensor_groups) for r in items)
            return LayoutDef(name, names, (), None, None, None, where, regions)
        return self._box(f"layout '{name}'", name, names, items, where)

    @staticmethod
    def _box(what: str, name: str, params: tuple, items, where: Span, pad: bool = False,
             region: bool = False) -> LayoutDef:
        found: dict[str, tuple] = {}
        for kind, value, at in items:
            if kind in found:
                raise SpecError(f"{what} has a second '{kind}' clause", at)
            found[kind] = (value, at)
        if "index" not in found:
            raise SpecError(f"{what} has no 'index' clause", where)
        indices, at = found["index"]
        if "offset" not in found:  # dense and row-major in the order the index clause gives
            found["offset"] = (_row_major(indices, at), at)
        view, dims, outer = found.get("tensor", ((None, None, 0),))[0]
        groups: tuple = ()
        if outer and region:
            raise SpecError(f"{what} is a region of a page: its tensor starts with the block dimension (a page of "
                            f"regions is one block-strided buffer); dims before 'block' are for a layout of one box",
                            dims[0].span)
        if dims is not None:
            merged = next((d for d in dims if isinstance(d, Merged)), None)
            if merged is not None and not region:
                raise SpecError(f"{what} is one box: write a tensor dimension that holds two indices as one index "
                                f"(as aiter's c < H * D) rather than {merged.shown()}", merged.span)
            dims, groups = _rest_filled(dims, indices)
            missing = [d.name for d in indices if d.name not in {n.id for n in dims}]
            if missing and {n.id for n in dims} <= {d.name for d in indices}:  # (an unknown one is named where it is)
                raise SpecError(f"the tensor clause of {what} names no dimension for index '{missing[0]}': a tensor "
                                f"views every index of its box (name it, or write '...' for the rest)",
                                found["tensor"][1])
        if view is not None and view.id in RESERVED:
            raise SpecError(f"{what} names its tensor '{view.id}', a reserved name", view.span)
        if view is not None and not region:
            raise SpecError(f"{what} is one box, viewed by the layer's one tensor: only a region of a page "
                            f"names its tensor ('tensor (block, ...)' here)", view.span)
        if pad and dims is not None:
            raise SpecError(f"{what} is padding, never copied, but names a tensor view: every byte a layer's "
                            f"tensor views may hold the engine's data, so a pad lies outside every tensor (padding "
                            f"inside a tensor's rows is a region, copied with the data)", found["tensor"][1])
        return LayoutDef(name, params, found["index"][0], found["offset"][0], found.get("element", (None,))[0],
                         dims, where, (), pad, view.id if view is not None else None, groups, outer)

    # grids and families
    def grid_def(self, meta, c):
        return GridDef(str(c[0]), _flatten(c[1:]), self._at(meta))

    def rules_def(self, meta, c):
        return RulesDef(str(c[0]), _flatten(c[1:]), self._at(meta))

    def grid_ref(self, meta, c):
        return ("grid", Name(str(c[0]), self._tok(c[0])), self._at(meta))

    def local_stmt(self, meta, c):
        return ("local", LayoutUse(c[0], self._at(meta)), self._at(meta))

    def canonical_stmt(self, meta, c):
        return ("canonical", LayoutUse(c[0], self._at(meta)), self._at(meta))

    def sequence_stmt(self, meta, c):
        return ("sequence", Name(str(c[0]), self._tok(c[0])), self._at(meta))

    def shard_stmt(self, meta, c):
        region, sources, targets, replicas = c
        at = self._at(meta)
        shard = Shard(sources, targets, at, str(region) if region is not None else None,
                      tuple(n.id for n in replicas or ()))
        return ("shard" if region is None else ("shard", str(region)), shard, at)

    def order_option(self, meta, c):
        return FamilyOption("order", c[0], self._at(meta))

    def before_option(self, meta, c):
        names = tuple(Name(str(t), self._tok(t)) for t in c if not isinstance(t, FamilyOption))
        return [FamilyOption("before", names, self._at(meta)), *(t for t in c if isinstance(t, FamilyOption))]

    def family_def(self, meta, c):
        name, serves = str(c[0]), str(c[1])
        rest = [y for x in c[2:] for y in (x if isinstance(x, list) else [x])]
        options = [x for x in rest if isinstance(x, FamilyOption)]
        items = [x for x in rest if not isinstance(x, FamilyOption)]
        given: dict[str, FamilyOption] = {}
        for o in options:
            if o.kind in given:
                raise SpecError(f"family '{name}' says '{o.kind}' twice", o.at)
            given[o.kind] = o
        order = given["order"].value if "order" in given else None
        before = given["before"].value if "before" in given else ()
        where = self._at(meta)
        found: dict[object, object] = {}
        body = []
        for item in _flatten(items):
            if isinstance(item, tuple):
                kind, value, at = item
                if kind in found:
                    what = f"'shard {kind[1]}'" if isinstance(kind, tuple) else f"'{kind}'"
                    raise SpecError(f"family '{name}' has a second {what} clause", at)
                found[kind] = value
            else:
                body.append(item)
        shards = tuple(v for k, v in found.items() if isinstance(k, tuple))
        if shards and "shard" in found:
            raise SpecError(f"family '{name}' has both an unnamed shard map and shard maps of regions; "
                            f"a page of regions names each region's map", found["shard"].span)
        return FamilyDef(name, serves, self._order(order), found.get("grid"),
                         found.get("local"), found.get("canonical"), found.get("shard"),
                         tuple(body), where, shards, sequence=found.get("sequence"), before=tuple(before or ()))

    def _order(self, tok: Token | None) -> int:
        if tok is None:
            return 0
        _check_number(tok, self._tok(tok))
        if "." in tok:
            raise SpecError(f"a family's order must be an integer, not {tok}", self._tok(tok))
        return int(tok)

    def import_def(self, meta, c):
        return Import(str(c[0])[1:-1], self._at(meta))

    def param_samples(self, meta, c):
        return ("samples", tuple(c))

    def param_default(self, meta, c):
        return ("default", c[0])

    def param_def(self, meta, c):
        name, lo, hi, samples, default, meaning = c
        where = self._tok(name)

        def whole(tok) -> int:
            _check_number(tok, self._tok(tok))
            if "." in tok:
                raise SpecError(f"param '{name}': {tok} is not a whole number", self._tok(tok))
            return int(tok)

        lo_v, hi_v = whole(lo), whole(hi)
        if lo_v > hi_v:
            raise SpecError(f"param '{name}': empty range {lo_v} .. {hi_v}", where)
        picked = []
        for tok in (samples[1] if samples else ()) + ((default[1],) if default else ()):
            v = whole(tok)
            if not lo_v <= v <= hi_v:
                raise SpecError(f"param '{name}': {v} is outside {lo_v} .. {hi_v}", self._tok(tok))
            picked.append(v)
        fallback = picked.pop() if default else None
        chosen = tuple(picked) or tuple(sorted({lo_v, min(hi_v, lo_v + 1)}))
        if fallback is not None and fallback not in chosen:
            chosen += (fallback,)  # check exercises what a layer gets when it says nothing
        return ParamDef(str(name), lo_v, hi_v, chosen, str(meaning)[1:-1], where, fallback)

    def start(self, meta, c):
        items = _flatten(c)
        pick = lambda t: tuple(i for i in items if isinstance(i, t))  # noqa: E731
        return Module(self._path, pick(Import), pick(LayoutDef), pick(GridDef), pick(FamilyDef),
                      pick(Let), pick(Fn), pick(ParamDef), pick(RulesDef))


def _row_major(indices: tuple[IndexDecl, ...], at: Span) -> Expr:
    """The offset of a dense box, last index fastest: `((i0 * e1 + i1) * e2 + i2) ...`.

    Examples:
        >>> from layoutalg.dsl.syntax import parse
        >>> m = parse("layout l(A, B):\\n    index a < A, b < B\\n")
        >>> m.layouts[0].offset == parse("layout l(A, B):\\n    index a < A, b < B\\n    offset a * B + b\\n").layouts[0].offset
        True
    """
    out: Expr = Name(indices[0].name, at)
    for d in indices[1:]:
        out = BinOp("+", BinOp("*", out, d.extent, at), Name(d.name, at), at)
    return out


def _rest_filled(dims: tuple, indices: tuple[IndexDecl, ...]) -> tuple[tuple[Name, ...], tuple[int, ...]]:
    """A tensor clause's indices, `...` replaced by those it does not name (in index order), and
    how many indices each tensor dim holds (empty where each holds one)."""
    named = {n.id for d in dims for n in (d.names if isinstance(d, Merged) else (d,)) if n.id != "..."}
    out: list[Name] = []
    groups: list[int] = []
    for n in dims:
        if isinstance(n, Merged):
            out.extend(n.names)
            groups.append(len(n.names))
            continue
        more = [Name(d.name, n.span) for d in indices if d.name not in named] if n.id == "..." else [n]
        out.extend(more)
        groups.extend([1] * len(more))
    return tuple(out), (tuple(groups) if any(g > 1 for g in groups) else ())


def _check_number(tok: Token, where: Span) -> None:
    """Refuse literals past MAX_NUMBER before anything converts them (int() refuses 4,300 digits)."""
    whole = tok.split(".")[0].lstrip("0")
    shown = tok if len(tok) <= 40 else f"{tok[:20]}... ({len(tok)} characters)"
    if len(whole) > len(str(MAX_NUMBER)) or (whole and int(whole) > MAX_NUMBER):
        raise SpecError(f"number too large: {shown}; at most {MAX_NUMBER} (2**63 - 1)", where)
    if len(tok) > 40:  # only zeros can make a number this long, and they only make messages unreadable
        raise SpecError(f"number too long: {shown}; at most 40 characters", where)


def _flatten(items) -> tuple:
    out = []
    for item in items:
        if isinstance(item, tuple) and item and isinstance(item[0], Let):
            out.extend(item)
        else:
            out.append(item)
    return tuple(out)

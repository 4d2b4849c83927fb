"""Grammar -> syntax tree: parse a .lal file with lark into plain dataclasses.

Every node keeps the `Span` it came from, so later passes can point at the exact
spot of a problem. Parse errors are turned into `SpecError`s that name the file, line
and column, show the line with a caret and say what was expected.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Union

from lark import Lark, Token, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.indenter import DedentError, Indenter
from lark.visitors import Transformer_NonRecursive

from .._resources import grammar_path
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


def _check_views(page: str, regions) -> None:
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


class _Option(NamedTuple):
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


class _Merged(NamedTuple):
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


# ---- the parser -------------------------------------------------------------------------


MAX_DEPTH = 100
"""Deepest expression nesting a spec may use (`a + a + ... + a` with 101 terms is too deep).

Every later pass (sizes, itersum, the direct reading for Z3, compile) walks expressions
recursively; this bound keeps them far from Python's recursion limit. The shipped specs
nest at most 7 deep."""

MAX_FILE_BYTES = 4 << 20
"""Largest spec file read (4 MiB; the shipped ones are under 4 KiB)."""

MAX_CASE_DEPTH = 16
"""Deepest nesting of `case` blocks."""

MAX_NUMBER = 2 ** 63 - 1
"""Largest integer literal: sizes and strides are 64-bit quantities at run time."""

_EXPR_NODES = frozenset({"add", "sub", "mul", "div", "floordiv", "mod", "neg", "call", "compare",
                         "not_", "and_cond", "or_cond"})


class _DedentAt(DedentError):
    """lark's DedentError carries no position; this one knows where the line starts."""

    def __init__(self, line: int, column: int, indent: int, expected: list[int]):
        super().__init__(f"dedent to column {indent}")
        self.line, self.column, self.indent, self.expected = line, column, indent, expected


class _TabAt(_DedentAt):
    """Tabs and spaces mixed in indentation: a tab's width is the editor's choice, the block is not."""


class _Indenter(Indenter):
    NL_type = "_NL"
    OPEN_PAREN_types = ["LPAR"]
    CLOSE_PAREN_types = ["RPAR"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 4

    indent_chars = ""

    def process(self, stream):
        self.indent_chars = ""  # the parser is shared: each file sets its own
        return super().process(stream)

    def handle_NL(self, token: Token):
        # lark's own version raises DedentError without a position
        if self.paren_level > 0:
            return
        yield token
        indent_str = token.rsplit("\n", 1)[1]
        if indent_str:  # a file indents with tabs or with spaces; mixed, a tab's width would decide the block
            self.indent_chars = self.indent_chars or indent_str[0]
            if set(indent_str) != {self.indent_chars}:
                other = next(i for i, c in enumerate(indent_str) if c != self.indent_chars)
                raise _TabAt(token.end_line, other + 1, 0, [])
        indent = indent_str.count(" ") + indent_str.count("\t") * self.tab_len
        if indent > self.indent_level[-1]:
            self.indent_level.append(indent)
            yield Token.new_borrow_pos(self.INDENT_type, indent_str, token)
            return
        open_levels = list(self.indent_level)
        while indent < self.indent_level[-1]:
            self.indent_level.pop()
            yield Token.new_borrow_pos(self.DEDENT_type, indent_str, token)
        if indent != self.indent_level[-1]:
            raise _DedentAt(token.end_line, token.end_column, indent, open_levels)


def grammar_text() -> str:
    """The grammar shipped with the package (grammar/layoutalg.lark in the repository)."""
    return grammar_path().read_text()


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    # cache=True keeps the LALR tables in a temporary file keyed by the grammar's hash
    return Lark(grammar_text(), parser="lalr", postlex=_Indenter(), propagate_positions=True,
                maybe_placeholders=True, cache=True)


_TOKEN_WORDS = {
    "_NL": "end of line", "_INDENT": "an indented block", "_DEDENT": "end of block",
    "NAME": "a name", "NUMBER": "a number", "STRING": "a quoted path", "CMP": "a comparison",
    "LPAR": "'('", "RPAR": "')'", "COMMA": "','", "COLON": "':'", "LESSTHAN": "'<'",
    "EQUAL": "'='", "PLUS": "'+'", "MINUS": "'-'", "STAR": "'*'", "SLASH": "'/'",
    "PERCENT": "'%'", "__ANON_0": "'->'", "$END": "end of file",
}


def _describe_expected(expected) -> str:
    words = sorted({_TOKEN_WORDS.get(t, repr(t.lower()) if t.isupper() else t) for t in expected})
    if len(words) > 8:
        words = words[:8] + ["..."]
    return ", ".join(words)


def parse(text: str, path: str = "<spec>") -> Module:
    """Parse spec text into a `Module`; raises `SpecError` with a caret on bad input.

    Examples:
        >>> m = parse("layout row(R):\\n    index b < R\\n    offset b\\n")
        >>> m.layouts[0].name, [i.name for i in m.layouts[0].indices]
        ('row', ['b'])
    """
    # lark counts lines by '\n' only; str.splitlines would also split on '\f', '\x1c', ...
    lines = [line.rstrip("\r") for line in text.split("\n")]
    if not text.endswith("\n"):
        text += "\n"

    def span(line: int, column: int) -> Span:
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        return Span(path, line, column, src)

    tree = _parse_tree(text, lines, span)
    _check_nesting(tree, span)
    try:
        return _Build(path, span).transform(tree)
    except VisitError as e:
        if isinstance(e.orig_exc, SpecError):
            raise e.orig_exc from None
        raise


def _parse_tree(text: str, lines: list[str], span) -> Tree:
    """The lark tree of `text`; every lark error becomes a `SpecError` at its position."""
    try:
        return _parser().parse(text)
    except UnexpectedToken as e:
        if e.token.type == "_INDENT":
            nxt = e.line + 1
            src = lines[nxt - 1] if nxt <= len(lines) else ""
            raise SpecError("unexpected indentation; a block opens only after a line ending in ':'",
                            span(nxt, len(src) - len(src.lstrip()) + 1)) from None
        if e.token.type == "_DEDENT" or e.token.type == "$END":
            where = span(e.line if e.line > 0 else len(lines), max(e.column, 1))
        else:
            where = span(e.line, e.column)
        got = "end of line" if e.token.type == "_NL" else repr(str(e.token))
        raise SpecError(f"unexpected {got}; expected {_describe_expected(e.expected)}", where) from None
    except UnexpectedCharacters as e:
        raise SpecError(f"unexpected character {text[e.pos_in_stream]!r}", span(e.line, e.column)) from None
    except UnexpectedEOF as e:
        raise SpecError(f"unexpected end of file; expected {_describe_expected(e.expected)}",
                        span(len(lines), 1)) from None
    except _TabAt as e:
        raise SpecError("this indentation mixes tabs and spaces (the file indents with one of them): how wide a "
                        "tab is depends on the editor, so which block the line belongs to would too",
                        span(e.line, e.column)) from None
    except _DedentAt as e:
        levels = ", ".join(map(str, e.expected))
        raise SpecError(f"inconsistent indentation: this line is indented by {e.indent}, which matches no "
                        f"enclosing block (those are indented by {levels})", span(e.line, e.column)) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark errors carry a position too
        raise SpecError(str(e).splitlines()[0], span(e.line, e.column)) from None


def _check_nesting(tree: Tree, span) -> None:
    """Refuse expressions nested deeper than MAX_DEPTH and `case`s deeper than MAX_CASE_DEPTH.

    Walks the tree with an explicit stack: the point is to stay clear of Python's
    recursion limit, here and in every pass after this one.
    """
    deepest: dict[int, list] = {}  # statement id -> [depth reached, statement]
    stack = [(tree, 0, 0, tree)]
    while stack:
        node, depth, cases, stmt = stack.pop()
        if node.data in _EXPR_NODES:
            depth += 1
        elif node.data != "exprs":
            stmt, depth = node, 0
        if node.data in ("case_stmt", "family_case"):
            cases += 1
            if cases > MAX_CASE_DEPTH:
                raise SpecError(f"'case' blocks nested too deeply: more than {MAX_CASE_DEPTH} levels",
                                _meta_span(node, span))
        seen = deepest.setdefault(id(stmt), [0, stmt])
        seen[0] = max(seen[0], depth)
        stack.extend((c, depth, cases, stmt) for c in node.children if isinstance(c, Tree))
    too_deep = [(_position(st), d) for d, st in deepest.values() if d > MAX_DEPTH]
    if too_deep:
        (line, column), depth = min(too_deep)
        raise SpecError(f"expression too deeply nested: {depth} levels, at most {MAX_DEPTH}",
                        span(line, column))


def _position(node: Tree) -> tuple[int, int]:
    meta = node.meta
    return (getattr(meta, "line", 1), getattr(meta, "column", 1)) if not meta.empty else (1, 1)


def _meta_span(node: Tree, span) -> Span:
    return span(*_position(node))


@functools.lru_cache(maxsize=None)
def _parse_cached(path: str, text: str) -> Module:
    return parse(text, path)


def parse_file(path: str | Path, named_at: Span | None = None) -> Module:
    """Parse a file once per process (keyed by path and content).

    A file that cannot be read, or is not UTF-8, is a `SpecError` at `named_at` (the
    `import` that names it) when given.
    """
    p = Path(path)
    try:
        if p.exists() and not p.is_dir() and not p.is_file():  # a device or a pipe: reading may never end
            raise SpecError(f"cannot read spec file {p}: it is not a regular file", named_at)
        size = p.stat().st_size if p.is_file() else 0
        if size > MAX_FILE_BYTES:
            raise SpecError(f"cannot read spec file {p}: {size} bytes, more than a spec file's {MAX_FILE_BYTES}",
                            named_at)
        data = p.read_bytes()
    except OSError as e:
        why = "it is a folder" if p.is_dir() else (e.strerror or type(e).__name__).lower()
        raise SpecError(f"cannot read spec file {p}: {why}", named_at) from None
    return dataclasses.replace(_parse_cached(str(p), decode(data, str(p))), digest=hashlib.sha256(data).hexdigest())


def decode(data: bytes, path: str) -> str:
    """Spec text from file bytes: UTF-8 (a byte-order mark is dropped), any newline convention.

    Examples:
        >>> decode(b"let a = 1\\r\\nlet b = 2\\r", "x.lal")
        'let a = 1\\nlet b = 2\\n'
        >>> try:
        ...     decode(b"let a = 1\\nlet \\xe9 = 2\\n", "x.lal")
        ... except SpecError as e:
        ...     print(e)
        x.lal:2:5: the file is not UTF-8 text: byte 0xe9 (byte 14 of the file) cannot be decoded; save it as UTF-8
        let \ufffd = 2
            ^
    """
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise _not_utf8(data, e.start, path) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _not_utf8(data: bytes, pos: int, path: str) -> SpecError:
    line_start = data.rfind(b"\n", 0, pos) + 1
    line_end = data.find(b"\n", pos)
    line_bytes = data[line_start:line_end if line_end >= 0 else len(data)]
    before = data[line_start:pos].decode("utf-8", "replace")
    src = line_bytes.decode("utf-8", "replace").rstrip("\r")
    line = data.count(b"\n", 0, pos) + 1
    return SpecError(f"the file is not UTF-8 text: byte 0x{data[pos]:02x} (byte {pos} of the file) "
                     f"cannot be decoded; save it as UTF-8", Span(path, line, len(before) + 1, src))


@v_args(meta=True)
class _Build(Transformer_NonRecursive):
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
        dims = tuple(t if isinstance(t, _Merged) else Name(str(t), self._tok(t)) for t in c[1:at] + c[at + 1:])
        return ("tensor", (name, dims, at - 1), self._at(meta))

    def merged_dim(self, meta, c):
        return _Merged(tuple(Name(str(t), self._tok(t)) for t in c), self._at(meta))

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
            _check_views(name, items)
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
            merged = next((d for d in dims if isinstance(d, _Merged)), None)
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
        return _Option("order", c[0], self._at(meta))

    def before_option(self, meta, c):
        names = tuple(Name(str(t), self._tok(t)) for t in c if not isinstance(t, _Option))
        return [_Option("before", names, self._at(meta)), *(t for t in c if isinstance(t, _Option))]

    def family_def(self, meta, c):
        name, serves = str(c[0]), str(c[1])
        rest = [y for x in c[2:] for y in (x if isinstance(x, list) else [x])]
        options = [x for x in rest if isinstance(x, _Option)]
        items = [x for x in rest if not isinstance(x, _Option)]
        given: dict[str, _Option] = {}
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
    named = {n.id for d in dims for n in (d.names if isinstance(d, _Merged) else (d,)) if n.id != "..."}
    out: list[Name] = []
    groups: list[int] = []
    for n in dims:
        if isinstance(n, _Merged):
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

"""Grammar -> syntax tree: parse a .lal file with lark into the dataclasses of `tree` (built by
`build`, one method per grammar rule).

Every node keeps the `Span` it came from, so later passes can point at the exact
spot of a problem. Parse errors are turned into `SpecError`s that name the file, line
and column, show the line with a caret and say what was expected.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.indenter import DedentError, Indenter

from ..resources import grammar_path
from ..errors import Span, SpecError
from .build import Builder
from .tree import Module

MAX_DEPTH = 100
"""Deepest expression nesting a spec may use (`a + a + ... + a` with 101 terms is too deep).

Every later pass (sizes, itersum, the direct reading for Z3, compile) walks expressions
recursively; this bound keeps them far from Python's recursion limit. The shipped specs
nest at most 7 deep."""

MAX_FILE_BYTES = 4 << 20
"""Largest spec file read (4 MiB; the shipped ones are under 4 KiB)."""

MAX_CASE_DEPTH = 16
"""Deepest nesting of `case` blocks."""

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
        return Builder(path, span).transform(tree)
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
        got = "end of line" if e.token.type == "_NL" else "end of file" if e.token.type == "$END" else \
            "end of the block" if e.token.type == "_DEDENT" else repr(str(e.token))
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

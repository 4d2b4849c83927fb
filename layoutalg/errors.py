"""Errors a user can act on.

`SpecError` points into a spec file (file, line, column, the line itself and a caret);
`LayoutMismatch` names a runtime tensor, its dimension and the expected versus actual
stride or size. Neither ever surfaces as a traceback from the command line.
"""
from __future__ import annotations

from .record import record


@record(frozen=True)
class Span:
    """A position in a spec file (1-based line and column)."""

    file: str
    line: int
    column: int
    text: str = ""  # the whole source line, for the caret

    def __str__(self) -> str:
        return f"{printable(str(self.file))}:{self.line}:{self.column}"  # (a file's name may hold escapes too)


class LayoutalgError(Exception):
    """Base of every error layoutalg raises on purpose."""


class SpecError(LayoutalgError):
    """A spec file is malformed or meaningless; says where, what and why.

    Examples:
        >>> e = SpecError("unknown name 'Q'", Span("a.lal", 3, 12, "    offset Q * d"))
        >>> print(e)
        a.lal:3:12: unknown name 'Q'
            offset Q * d
                   ^
    """

    def __init__(self, message: str, span: Span | None = None):
        self.message = message
        self.span = span
        super().__init__(self._render())

    def _render(self) -> str:
        if self.span is None:
            return self.message
        out = f"{self.span}: {self.message}"
        if self.span.text:
            shown, column = window(printable(self.span.text.rstrip("\r\n")), self.span.column)
            out += "\n" + shown + "\n" + " " * (column - 1) + "^"
        return out


SHOWN = 120
"""The most characters of a source line an error shows: around the caret, with '...' where cut."""


def window(line: str, column: int) -> tuple[str, int]:
    """`line` as an error shows it, and the caret's column in that: a line longer than `SHOWN`
    is cut to the `SHOWN` characters around `column`, marked '...' where it was cut.

    Examples:
        >>> window("x = 1", 5)
        ('x = 1', 5)
        >>> shown, at = window("a" * 300 + "!" + "b" * 300, 301)
        >>> len(shown) <= SHOWN + 6, shown[at - 1], shown[:3], shown[-3:]
        (True, '!', '...', '...')
    """
    if len(line) <= SHOWN:
        return line, column
    start = max(0, min(column - 1 - SHOWN // 2, len(line) - SHOWN))
    head, tail = ("..." if start > 0 else ""), ("..." if start + SHOWN < len(line) else "")
    return head + line[start:start + SHOWN] + tail, column - start + len(head)


def printable(line: str) -> str:
    """The source line as a terminal may show it: one character for one, a tab as a space (the
    caret counts characters) and any other character that does not print as U+FFFD (a terminal's
    escape sequences, a bidi override: never passed through)."""
    return "".join(c if c.isprintable() else " " if c == "\t" else "\ufffd" for c in line)


class LayoutMismatch(LayoutalgError):
    """A runtime tensor does not have the layout a spec describes."""


class ConfigError(LayoutalgError):
    """A runtime input (parallel configuration, layer sizes, block ids) is malformed or out of range.

    The message names the field, the value received and what would be valid.
    """


class MissingNames(ConfigError):
    """A layer names its kind but not a runtime name every family serving that kind reads."""


class MissingExtra(LayoutalgError):
    """An optional dependency a command needs is not installed; says which extra brings it."""


def optional(module: str, extra: str, what: str):
    """`module`, imported; raises `MissingExtra` naming the extra that installs it.

    Examples:
        >>> optional("json", "none", "reading").__name__ == "json"
        True
        >>> optional("no_such_module_xyz", "draw", "layoutalg draw")
        Traceback (most recent call last):
        ...
        layoutalg.errors.MissingExtra: layoutalg draw needs no_such_module_xyz, which is not installed: pip install "layoutalg[draw]"
    """
    import importlib
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module.split(".")[0] and e.name != module:
            raise  # the module is there and something it imports is broken: that is not this
        raise MissingExtra(f'{what} needs {module}, which is not installed: pip install "layoutalg[{extra}]"') from None

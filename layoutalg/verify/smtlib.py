"""A small reader of the SMT-LIB 2 certificates `prove --certificates` writes: enough to compare
their content (`audit`), never to decide them.

A term is an int of a `Terms` table: a constant or literal is its token (a str), an
application `(f a b)` the tuple `("f", id(a), id(b))`. `let` is expanded (each bound name
replaced by its term) and `>=`/`>` read as `<=`/`<` mirrored, so two files that print one
formula with other sharing read alike, and equal terms are one int.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property


class SmtError(ValueError):
    """A file this reader cannot read, with its line."""


@dataclass
class Command:
    """One top-level command: its head (`assert`, `declare-fun`, ...), its arguments as read,
    the line it starts on, and (for `assert`) its term with every `let` expanded."""
    head: str
    args: tuple
    line: int
    span: tuple = (0, 0)
    term: object = None


@dataclass
class Script:
    """A certificate as read: its header fields (`; key: value` lines before the first
    command), commands, the constants it declares (name -> sort), and its assertions."""
    path: str
    text: str = ""
    header: dict = field(default_factory=dict)
    commands: list = field(default_factory=list)
    declared: dict = field(default_factory=dict)

    @cached_property
    def assertions(self) -> list:
        """The `assert` commands, in order (asked once the script is read)."""
        return [c for c in self.commands if c.head == "assert"]


_SPLIT = re.compile(r"\|[^|]*\||\(|\)|[^\s()|]+")


def sexprs(text: str, path: str) -> list:
    """The top-level s-expressions of `text` as (nested tuples of tokens, first line, (start,
    end) offsets in `text`). Comments are dropped; a line's number is counted only at a
    top-level command (a certificate holds tens of thousands of tokens)."""
    body = re.sub(r";[^\n]*", lambda m: " " * len(m.group(0)), text)  # (offsets kept)
    out, stack, first = [], [], 0
    for m in _SPLIT.finditer(body):
        tok = m.group(0)
        if tok == "(":
            if not stack:
                first = m.start()
            stack.append([])
        elif tok == ")":
            if not stack:
                raise SmtError(f"{path}:{body.count(chr(10), 0, m.start()) + 1}: a ')' closes nothing")
            done = tuple(stack.pop())
            if stack:
                stack[-1].append(done)
            else:
                out.append((done, body.count("\n", 0, first) + 1, (first, m.end())))
        elif stack:
            stack[-1].append(tok)
        else:
            out.append((tok, body.count("\n", 0, m.start()) + 1, (m.start(), m.end())))
    if stack:
        raise SmtError(f"{path}:{body.count(chr(10), 0, first) + 1}: a '(' is never closed")
    return out


FLIP = {">=": "<=", ">": "<"}
"""Comparisons read as their mirror (Z3 prints `x <= 1` as `(>= 1 x)`): `a >= b` is `b <= a`."""


class Terms:
    """Interned terms: each distinct tree is one int. A leaf (a constant, literal or operator)
    is `node(i)` a str; an application `node(i)` a tuple (operator, child ids...)."""

    def __init__(self):
        self._ids: dict = {}
        self.nodes: list = []
        self.stretches: dict = {}  # (a text's stretch of whole commands -> its commands: `_commands`)

    def make(self, key) -> int:
        """The id of the leaf (a str) or application ((operator, child ids...)) `key`."""
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.nodes)
            self.nodes.append(key)
        return i

    def node(self, i: int):
        return self.nodes[i]

    def expand(self, x, env: dict | None = None) -> int:
        """`x` with each `let` replaced by its bindings, interned. Pre: `x` is a read s-expression."""
        env = {} if env is None else env
        if isinstance(x, str):
            return env[x] if x in env else self.make(x)
        if x and x[0] == "let" and len(x) == 3:
            inner = dict(env)
            for name, value in x[1]:
                inner[name] = self.expand(value, env)  # (parallel binding: each value in the outer scope)
            return self.expand(x[2], inner)
        if x and x[0] == "!":  # an annotated term: the term itself
            return self.expand(x[1], env)
        if not x or not isinstance(x[0], str):
            raise SmtError(f"an application of no operator: {x!r}")
        if x[0] in FLIP and len(x) == 3:  # (>= a b) is (<= b a): one form of each comparison
            x = (FLIP[x[0]], x[2], x[1])
        return self.make((x[0], *(self.expand(k, env) for k in x[1:])))


def _header(text: str) -> dict:
    """`; key: value` and `; key value` lines before the first command, by key (the words
    before the first ':')."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(";"):
            if line.strip():
                break
            continue
        body = line[1:].strip()
        if ":" in body:
            key, value = body.split(":", 1)
            out.setdefault(key.strip(), value.strip())
    return out


def read(path: str, terms: Terms | None = None) -> Script:
    """The certificate at `path`, read. Raises `SmtError` (file and line) where it is not SMT-LIB
    this reader knows, `OSError` where it cannot be read."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    terms = terms or Terms()
    out = Script(path, text, _header(text))
    for c in _commands(text, path, terms):
        if c.head == "assert":
            if len(c.args) != 1:
                raise SmtError(f"{path}:{c.line}: an assert takes one term")
            c.term = c.args[0]
        elif c.head == "declare-fun" and len(c.args) == 3 and c.args[1] == () and isinstance(c.args[0], str):
            out.declared[c.args[0]] = c.args[2]
        elif c.head == "declare-const" and len(c.args) == 2 and isinstance(c.args[0], str):
            out.declared[c.args[0]] = c.args[1]
        out.commands.append(c)
    return out


_TOK = re.compile(r'(\()|(\))|(;[^\n]*)|(\|[^|]*\||[^\s()|;"]+)|(\S)')
"""A token: an opening or closing parenthesis, a comment (skipped), a symbol or literal; or a
character this reader does not read (a lone `|`, a string's `"`), an error: what it reads
must be what a solver reads."""

_TERM, _LET, _BINDS, _BIND, _BODY, _NOTE, _RAW, _TOP = range(8)
"""What an open parenthesis is, in `_Reader`: an application (its operator, then its
arguments' ids), a `let` before its bindings, its bindings, one binding (name, id), the `let`
past its bindings (its body's id), an annotation `(! term ...)`, a list read as is (a
command's arguments other than an assert's), a top-level command."""


def _commands(text: str, path: str, terms: Terms) -> list:
    """The top-level commands of `text`, read in one pass over its tokens: an `assert`'s
    argument interned as it is read (`Terms`: each `let` expanded, `>=`/`>` mirrored, an
    annotation its term), any other command's arguments as nested tuples of tokens.

    A stretch of lines that starts at the top level and reads as whole commands is read once
    a `Terms` table: the files of a folder repeat most of their commands word for word, and
    a stretch met again is its commands again (their lines and offsets moved). Tokens never
    span a line's end (a quoted `|symbol|` may: a text holding one is read as one stretch)."""
    reader = _Reader(text, path, terms)
    starts = [0] if _quoted(text) else [0, *(k + 1 for k in _starts(text))]
    memo = terms.stretches
    for a, b in zip(starts, [*starts[1:], len(text)]):
        if reader.stack:
            reader.tokens(a, b)
            continue
        piece = text[a:b]
        known = memo.get(piece)
        line = reader.line + text.count("\n", reader.last, a)
        if known is None:
            n = len(reader.out)
            reader.tokens(a, b)
            if not reader.stack:
                memo[piece] = [(c.head, c.args, c.line - line, c.span[0] - a, c.span[1] - a) for c in reader.out[n:]]
            continue
        reader.out += [Command(h, x, line + dl, (a + s, a + e)) for h, x, dl, s, e in known]
        reader.line, reader.last = line, a
    if reader.stack:
        raise SmtError(f"{path}:{reader.where(reader.first)}: a '(' is never closed")
    return reader.out


def _quoted(text: str) -> bool:
    """Whether `text` holds a quoted symbol: a `|` with no `;` before it on its line (a quoted
    symbol's first `|` is outside any comment; a `;` inside an earlier one follows a `|`)."""
    at = text.find("|")
    while at >= 0:
        if ";" not in text[text.rfind("\n", 0, at) + 1:at]:
            return True
        at = text.find("|", at + 1)
    return False


def _starts(text: str):
    """The offsets of each `\n(` in `text`: where a line starts with a parenthesis."""
    at = text.find("\n(")
    while at >= 0:
        yield at
        at = text.find("\n(", at + 1)


class _Reader:
    """`_commands`'s state: the commands read, the open parentheses (`[what, items]`), the
    `let` scopes, and the line of the offset `last`."""

    def __init__(self, text: str, path: str, terms: Terms):
        self.text, self.path, self.terms = text, path, terms
        self.out, self.stack, self.envs, self.env = [], [], [], {}
        self.line, self.last, self.first = 1, 0, 0

    def where(self, at: int) -> int:
        return self.line + self.text.count("\n", self.last, at)

    def fail(self, at: int, why: str):
        raise SmtError(f"{self.path}:{self.where(at)}: {why}")

    def tokens(self, a: int, b: int) -> None:
        """Read the tokens of text[a:b] (`_commands`)."""
        text, make, ids, stack, env = self.text, self.terms.make, self.terms._ids, self.stack, self.env
        for m in _TOK.finditer(text, a, b):
            k = m.lastindex
            if k == 4:  # a symbol or literal
                tok = m.group(4)
                if not stack:
                    self.fail(m.start(), f"{tok!r} is no command")
                f = stack[-1]
                kind, items = f
                if kind == _TERM:
                    if items:
                        v = env.get(tok)
                        if v is None:
                            v = ids.get(tok)
                            if v is None:
                                v = make(tok)
                        items.append(v)
                    elif tok == "let":
                        f[0] = _LET
                    elif tok == "!":
                        f[0] = _NOTE
                    else:
                        items.append(tok)
                elif kind == _RAW or (kind == _TOP and (not items or items[0] != "assert")) or \
                        (kind == _BIND and not items):
                    items.append(tok)
                elif kind == _TOP or (kind == _BIND and len(items) == 1) or (kind in (_BODY, _NOTE) and not items):
                    v = env.get(tok)
                    items.append(make(tok) if v is None else v)
                elif kind != _NOTE:  # (an annotation's attributes are skipped)
                    self.fail(m.start(), f"{tok!r} where a 'let' takes no symbol")
            elif k == 1:
                if not stack:
                    self.line, self.last = self.where(m.start()), m.start()
                    self.first = m.start()
                    stack.append([_TOP, []])
                    continue
                kind, items = stack[-1]
                if kind == _TERM or kind == _TOP:
                    if not items:
                        self.fail(m.start(), "an application of no operator")
                    stack.append([_TERM if kind == _TERM or items[0] == "assert" else _RAW, []])
                elif kind == _RAW or (kind == _NOTE and items):
                    stack.append([_RAW, []])
                elif kind == _LET:
                    stack.append([_BINDS, []])
                elif kind == _BINDS:
                    stack.append([_BIND, []])
                elif (kind == _BIND and len(items) == 1) or (kind in (_BODY, _NOTE) and not items):
                    stack.append([_TERM, []])
                else:
                    self.fail(m.start(), "a 'let' malformed (a '(' where it takes none)")
            elif k == 2:
                if not stack:
                    self.fail(m.start(), "a ')' closes nothing")
                kind, items = stack.pop()
                if kind == _TERM:
                    if not items:
                        self.fail(m.start(), "an application of no operator")
                    v = make((FLIP[items[0]], items[2], items[1]) if len(items) == 3 and items[0] in FLIP
                             else tuple(items))
                elif kind == _RAW:
                    v = tuple(items)
                elif kind == _TOP:
                    if not items or not isinstance(items[0], str):
                        raise SmtError(f"{self.path}:{self.line}: {tuple(items)!r} is no command")
                    self.out.append(Command(items[0], tuple(items[1:]), self.line, (self.first, m.end())))
                    continue
                elif kind == _BINDS:
                    self.envs.append(env)
                    env = self.env = {**env, **dict(items)}  # (each value was read in the outer scope)
                    stack[-1][0] = _BODY
                    continue
                elif kind == _BIND and len(items) == 2:
                    v = tuple(items)
                elif (kind == _BODY and len(items) == 1) or (kind == _NOTE and items):
                    v = items[0]
                    if kind == _BODY:
                        env = self.env = self.envs.pop()
                else:
                    self.fail(m.start(), "a 'let' or annotation malformed")
                stack[-1][1].append(v)
            elif k == 5:
                self.fail(m.start(), f"{m.group(5)!r} is no token this reader reads")


def head(terms: Terms, t: int) -> str | None:
    """The operator of `t`, None for a leaf."""
    n = terms.nodes[t]
    return None if isinstance(n, str) else n[0]


def args(terms: Terms, t: int) -> tuple:
    n = terms.nodes[t]
    return () if isinstance(n, str) else n[1:]


def conjuncts(terms: Terms, t: int) -> list:
    """The conjuncts of `t`, nested `and`s flattened (a term that is no `and` is its own)."""
    n = terms.nodes[t]
    if not isinstance(n, str) and n[0] == "and":
        return [c for k in n[1:] for c in conjuncts(terms, k)]
    return [t]


def constants(terms: Terms, t: int, out: set | None = None) -> set:
    """The names of the constants of `t` (leaves that are not literals)."""
    out = set() if out is None else out
    n = terms.nodes[t]
    if isinstance(n, str):
        if not (n[0].isdigit() or n in ("true", "false")):
            out.add(n)
    else:
        for k in n[1:]:
            constants(terms, k, out)
    return out


def unify(terms: Terms, pattern: int, term: int, variables: set, sigma: dict) -> bool:
    """Extend `sigma` (variable name -> term id) so that `pattern` with it is `term`; False
    (sigma then partly extended: pass a copy) where no extension does. `=` is read either way."""
    p = terms.nodes[pattern]
    if isinstance(p, str):
        if p in variables:
            if p in sigma:
                return sigma[p] == term
            sigma[p] = term
            return True
        return pattern == term
    t = terms.nodes[term]
    if isinstance(t, str) or len(p) != len(t) or p[0] != t[0]:
        return False
    if p[0] == "=" and len(p) == 3:
        first = dict(sigma)
        if unify(terms, p[1], t[1], variables, first) and unify(terms, p[2], t[2], variables, first):
            sigma.update(first)
            return True
        return unify(terms, p[1], t[2], variables, sigma) and unify(terms, p[2], t[1], variables, sigma)
    return all(unify(terms, a, b, variables, sigma) for a, b in zip(p[1:], t[1:]))


def substitute(terms: Terms, t: int, sigma: dict, memo: dict | None = None) -> int:
    """`t` with each constant named in `sigma` replaced by its term (each shared subterm once)."""
    memo = {} if memo is None else memo
    if t not in memo:
        n = terms.nodes[t]
        if isinstance(n, str):
            memo[t] = sigma.get(n, t)
        else:
            memo[t] = terms.make((n[0], *(substitute(terms, k, sigma, memo) for k in n[1:])))
    return memo[t]


def show(terms: Terms, t: int, limit: int = 300) -> str:
    """`t` as SMT-LIB text, cut near `limit` characters."""
    out: list = []

    def go(i):
        if sum(map(len, out)) > limit:
            return
        n = terms.nodes[i]
        if isinstance(n, str):
            out.append(n)
            return
        out.append("(" + n[0])
        for k in n[1:]:
            out.append(" ")
            go(k)
        out.append(")")
    go(t)
    s = "".join(out)
    return s if len(s) <= limit else s[:limit] + " ..."

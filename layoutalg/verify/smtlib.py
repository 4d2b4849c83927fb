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

_TOKEN = re.compile(r"\s+|;[^\n]*|\|[^|]*\||\(|\)|[^\s()|;]+")


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

    @property
    def assertions(self) -> list:
        """The `assert` commands, in order."""
        return [c for c in self.commands if c.head == "assert"]


_SPLIT = re.compile(r"\|[^|]*\||\(|\)|[^\s()|]+")


def _sexprs(text: str, path: str) -> list:
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
    for x, line, span in _sexprs(text, path):
        if isinstance(x, str) or not x or not isinstance(x[0], str):
            raise SmtError(f"{path}:{line}: {x!r} is no command")
        c = Command(x[0], x[1:], line, span)
        if c.head == "assert":
            if len(x) != 2:
                raise SmtError(f"{path}:{line}: an assert takes one term")
            c.term = terms.expand(x[1])
        elif c.head == "declare-fun" and len(x) == 4 and x[2] == ():
            out.declared[x[1]] = x[3]
        elif c.head == "declare-const" and len(x) == 3:
            out.declared[x[1]] = x[2]
        out.commands.append(c)
    return out


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

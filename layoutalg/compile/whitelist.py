"""The whitelist of compiled source: exactly the shapes `compile.codegen` prints, nothing else.

Source handed in as data (`CompiledFamily.from_json`) and every library written to the
precompiled cache (`cache.store`) pass `check_source` before any of it runs; only the
bytecode compiled here from admitted source is ever executed or stored. A load from the
cache runs that bytecode and never imports this module (nor `ast`).
"""
from __future__ import annotations

import ast
import functools

from .. import params
from .instance import Instance
from ..errors import LayoutalgError


class UnsafeSource(LayoutalgError):
    """Compiled source that is not of the form `compile.codegen` prints; it is never executed."""


MAX_EXPONENT = 64
"""Largest power in compiled source (sizes have degree at most `sizes.MAX_DEGREE`)."""

_HELPERS = ("_exact", "_floor", "_mod")
_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.Pow, ast.BitAnd, ast.BitOr)
_UNARY = (ast.USub, ast.UAdd, ast.Not)
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


@functools.lru_cache(maxsize=64)
def check_source(source: str, guards: tuple[int, ...], atoms: int) -> ast.Module:
    """The syntax tree of `source`; raises `UnsafeSource` unless it is what `compile.codegen` prints.

    That is: one `def _variant_K(P):` per variant K (`guards[K]` is its guard count),
    each made of `name = P['name']` for runtime names, then `if not C: return None` and
    `if not C: raise _Guard(K, j)`, then `return _Instance(...)`. Expressions use only
    ints, True/False, the names bound from P, `+ - * **` (small int exponents),
    comparisons, `not`, `bool(x) & bool(y)` and `|` (every operand evaluated), `bool(x)` and `_exact`/`_floor`/`_mod(a, b, k)` with
    k an atom index; strings and tuples only inside `_Instance(...)`. Anything else
    (imports, attributes, other calls, subscripts, lambdas, dunder names) is refused.

    Examples:
        >>> source = "def _variant_0(P):\\n    tp = P['tp']\\n    return _Instance(" + "tp, " * 18 + ")"
        >>> _ = check_source(source, (0,), 0)
        >>> check_source("def _variant_0(P):\\n    import os\\n    return None", (0,), 0)
        Traceback (most recent call last):
        ...
        layoutalg.compile.whitelist.UnsafeSource: compiled source, line 2: 'Import' is not allowed here
    """
    try:
        tree = ast.parse(source)
        if len(tree.body) != len(guards):
            raise UnsafeSource(f"compiled source has {len(tree.body)} statements for {len(guards)} variants")
        for k, fn in enumerate(tree.body):
            _Checker(k, guards[k], atoms).function(fn)
        return tree
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise UnsafeSource(f"compiled source does not parse: {type(e).__name__}: {e}") from None


def checked_code(name: str, source: str, guards, atoms):
    """The bytecode of a family's `source`, which `check_source` admits first (`UnsafeSource` else)."""
    return _checked_code(name, source, tuple(len(g) for g in guards), len(atoms))


@functools.lru_cache(maxsize=256)
def _checked_code(name: str, source: str, guards: tuple, atoms: int):
    # once a process for one source: a prover compiles a page's parts again with the page, and
    # keeps a family's record where it compiled it (what is checked is the text and the counts)
    tree = check_source(source, guards, atoms)
    try:
        return compile(tree, f"<layoutalg family {name}>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise UnsafeSource(f"family '{name}' does not compile: {type(e).__name__}: {e}") from None


def _runtime_name(name: str) -> bool:
    """A name compiled code may bind from `P`: built in, or declared by a spec (`param`).

    Binding an int to any other identifier is harmless (the code runs without builtins),
    but the helpers the code calls must not be shadowed.
    """
    return name in params.TABLE or (name.isidentifier() and not name.startswith("_")
                                    and name not in ("P", "bool"))


def _reads(v, name: str) -> bool:
    """`P['name']`"""
    return (isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id == "P"
            and isinstance(v.slice, ast.Constant) and v.slice.value == name)


def _reads_or_default(v, name: str) -> bool:
    """`P.get('name', 3)`: a declared name with a default"""
    return (isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and isinstance(v.func.value, ast.Name)
            and v.func.value.id == "P" and v.func.attr == "get" and not v.keywords and len(v.args) == 2
            and isinstance(v.args[0], ast.Constant) and v.args[0].value == name
            and isinstance(v.args[1], ast.Constant) and type(v.args[1].value) is int)


class _Checker:
    """The whitelist for one `_variant_K` function."""

    def __init__(self, variant: int, guards: int, atoms: int):
        self.variant, self.guards, self.atoms = variant, guards, atoms
        self.bound: set[str] = set()

    def refuse(self, node, why: str | None = None):
        line = getattr(node, "lineno", "?")
        why = why or f"{type(node).__name__!r} is not allowed here"
        raise UnsafeSource(f"compiled source, line {line}: {why}")

    def function(self, fn) -> None:
        a = getattr(fn, "args", None)
        if not (isinstance(fn, ast.FunctionDef) and fn.name == f"_variant_{self.variant}"
                and not fn.decorator_list and fn.returns is None and not getattr(fn, "type_params", None)
                and not (a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults or a.kw_defaults)
                and [(x.arg, x.annotation) for x in a.args] == [("P", None)]):
            self.refuse(fn, f"expected 'def _variant_{self.variant}(P):'")
        body = list(fn.body)
        while body and isinstance(body[0], ast.Assign):
            self.assign(body.pop(0))
        if not body:
            self.refuse(fn, "no return statement")
        for stmt in body[:-1]:
            self.if_not(stmt)
        self.instance(body[-1])

    def assign(self, node: ast.Assign) -> None:
        t, v = node.targets, node.value
        if not (len(t) == 1 and isinstance(t[0], ast.Name) and _runtime_name(t[0].id)
                and t[0].id not in self.bound and (_reads(v, t[0].id) or _reads_or_default(v, t[0].id))):
            self.refuse(node, "expected 'name = P[\'name\']' or 'name = P.get(\'name\', int)' for a runtime name")
        self.bound.add(t[0].id)

    def if_not(self, node) -> None:
        if not isinstance(node, ast.If):
            self.refuse(node)
        if not (not node.orelse and len(node.body) == 1
                and isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)):
            self.refuse(node, "expected 'if not ...: return None' or 'if not ...: raise _Guard(...)'")
        self.expr(node.test.operand)
        then = node.body[0]
        if isinstance(then, ast.Return) and isinstance(then.value, ast.Constant) and then.value.value is None:
            return
        if isinstance(then, ast.Raise) and then.cause is None and self._call(then.exc, "_Guard", 2):
            k, j = (self.int_constant(x) for x in then.exc.args)
            if k == self.variant and 0 <= j < self.guards:
                return
        self.refuse(then, "expected 'return None' or 'raise _Guard(variant, guard)'")

    def instance(self, node) -> None:
        if not (isinstance(node, ast.Return) and self._call(node.value, "_Instance", len(Instance._fields))):
            self.refuse(node, "expected 'return _Instance(...)' last")
        for arg in node.value.args:
            self.expr(arg, data=True)

    def expr(self, e, data: bool = False) -> None:
        if isinstance(e, ast.Constant):
            if type(e.value) in (int, bool) or (data and type(e.value) is str):
                return
        elif isinstance(e, ast.Name) and isinstance(e.ctx, ast.Load):
            if e.id in self.bound:
                return
        elif isinstance(e, ast.BinOp) and isinstance(e.op, _BINOPS):
            self.expr(e.left)
            if isinstance(e.op, ast.Pow):
                if 0 <= self.int_constant(e.right) <= MAX_EXPONENT:
                    return
            else:
                return self.expr(e.right)
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, _UNARY):
            return self.expr(e.operand)
        elif isinstance(e, ast.BoolOp):
            for v in e.values:
                self.expr(v)
            return
        elif isinstance(e, ast.Compare) and all(isinstance(op, _COMPARE) for op in e.ops):
            for v in [e.left, *e.comparators]:
                self.expr(v)
            return
        elif isinstance(e, ast.Call) and self._call(e, "bool", 1):
            return self.expr(e.args[0])
        elif isinstance(e, ast.Call) and any(self._call(e, h, 3) for h in _HELPERS):
            self.expr(e.args[0])
            self.expr(e.args[1])
            if 0 <= self.int_constant(e.args[2]) < self.atoms:
                return
        elif isinstance(e, ast.Tuple) and data and isinstance(e.ctx, ast.Load):
            for v in e.elts:
                self.expr(v, data=True)
            return
        self.refuse(e)

    def int_constant(self, e) -> int:
        if not (isinstance(e, ast.Constant) and type(e.value) is int):
            self.refuse(e, "expected an integer constant")
        return e.value

    @staticmethod
    def _call(e, fn: str, nargs: int) -> bool:
        return (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == fn
                and not e.keywords and len(e.args) == nargs
                and not any(isinstance(a, ast.Starred) for a in e.args))

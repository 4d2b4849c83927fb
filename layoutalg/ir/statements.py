"""Grid and family statements -> states: `let`, `require`, `case`, `ranks`, `replica`,
`world` and `agnostic` read in order, one `RunState` per path through the cases.

Divisions are exact where they are read (a `let` is read where something uses it), and
every divisor is positive: each becomes a guard of the state that divided.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import sympy

from ..errors import Span, SpecError
from .resolved import Guard
from .sizes import Scope
from ..dsl.tree import (Agnostic, BinOp, Call, Expr, Fn, Let, Name, Ranks, Replica, Require, World, grouped)


def _text(span: Span | None) -> str:
    """The statement as written, without its comment."""
    return span.text.split("#")[0].strip().rstrip(":") if span and span.text else ""


@dataclass
class RunState:
    scope: Scope
    index_lets: dict[str, Expr]
    cases: list[Guard]
    guards: list[Guard]
    ranks: Ranks | None = None
    replicas: tuple[str, ...] = ()
    world: sympy.Expr | None = None
    agnostic: object = sympy.false
    replica_spans: dict = field(default_factory=dict)  # where each replica was named

    def copy(self) -> "RunState":
        return RunState(self.scope.child({}), dict(self.index_lets), list(self.cases), list(self.guards),
                      self.ranks, self.replicas, self.world, self.agnostic, dict(self.replica_spans))


def _names(e) -> set[str]:
    """Every name an expression or condition mentions (any node of the syntax tree)."""
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, (list, tuple)):
        return set().union(*(_names(x) for x in e)) if e else set()
    if dataclasses.is_dataclass(e) and not isinstance(e, type):
        return set().union(*(_names(getattr(e, f.name)) for f in dataclasses.fields(e) if f.name != "span"))
    return set()


def run_statements(stmts, state: RunState, where: str) -> list[RunState]:
    """Execute grid/family statements; `case` groups fork the state."""
    states = [state]
    for item in grouped(stmts):
        if isinstance(item, list):
            forked = []
            for s in states:
                for case in item:
                    c = s.copy()
                    read_divisions(c, case.cond)
                    c.cases.append(Guard(c.scope.cond(case.cond), _text(case.span), case.span))
                    divisors_positive(c)
                    forked.extend(run_statements(case.body, c, where))
            states = forked
        else:
            for s in states:
                _step(item, s, where)
                divisors_positive(s)
    return states


def let_size(scope: Scope, let) -> sympy.Expr:
    """A size let's value; the exact divisions it made are kept with it, to be checked by a
    state only where something it reads names the let (the spec's reading evaluates a let
    only where it is used, and so does the prover)."""
    atoms = scope.atoms
    mark = len(atoms.exact)
    value = scope.size(let.value, f"'let {let.name}'")
    made = atoms.exact[mark:]
    del atoms.exact[mark:]
    for n in _names(let.value):
        made += atoms.let_exact.get(n, [])
    atoms.let_exact[let.name] = made
    return value


def read_divisions(s: RunState, *exprs) -> None:
    """The exact divisions of the lets these expressions name, now read by this state: through
    the index lets and functions they use, whose bodies are read where they are used."""
    atoms = s.scope.atoms
    todo, names = [e for e in exprs if e is not None], set()
    while todo:
        e = todo.pop()
        for n in _names(e) - names:
            names.add(n)
            if n in s.index_lets:
                todo.append(s.index_lets[n])
        for fn in _calls(e):
            body = s.scope.fns.get(fn)
            if body is not None and fn not in names:
                names.add(fn)
                todo.append(body.body)
    for n in sorted(names):  # in one order on every machine: guards become Z3 assumptions in this order
        atoms.exact.extend(atoms.let_exact.get(n, []))


def _calls(e) -> set[str]:
    """The functions an expression calls."""
    if isinstance(e, Call):
        return {e.fn} | set().union(*(_calls(a) for a in e.args))
    if dataclasses.is_dataclass(e) and not isinstance(e, type):
        return set().union(*(_calls(getattr(e, f.name)) for f in dataclasses.fields(e) if f.name != "span"))
    if isinstance(e, (list, tuple)):
        return set().union(*(_calls(x) for x in e)) if e else set()
    return set()


def divisors_positive(s: RunState) -> None:
    """Exact divisions that cancelled symbolically still hold only where the divisor is
    positive (as the prover reads `/`): each becomes a guard of the state that divided. So
    does each exact division's remainder being zero, which an atom that later cancels
    would never check."""
    atoms = s.scope.atoms
    exact, atoms.exact = atoms.exact, []
    for den, span, text in atoms.positive:
        s.guards.append(Guard(sympy.Gt(den, 0), f"the divisor of {text} is positive", span))
    atoms.positive.clear()
    have = {g.text for g in s.guards}
    for num, den, span, text in exact:
        rem = atoms.make("%", num, den, span)
        if f"{text} is a whole number" not in have:
            have.add(f"{text} is a whole number")
            s.guards.append(Guard(sympy.Eq(rem, 0), f"{text} is a whole number", span))
    atoms.positive.clear()  # (the remainders' divisors are the divisions' own, already guarded)


def _step(stmt, s: RunState, where: str) -> None:
    if isinstance(stmt, Let):
        rank_names = {d.name for d in s.ranks.digits} if s.ranks else set()
        if stmt.name in s.scope.names or stmt.name in s.index_lets or stmt.name in rank_names:
            # one meaning per name: a let read lazily and a let fixed where it is written
            # would otherwise disagree about which definition a use sees
            raise SpecError(f"'{stmt.name}' is already defined (a runtime name, a rank digit or an earlier let); "
                            f"a let may not redefine a name", stmt.span)
        if _names(stmt.value) & (rank_names | set(s.index_lets) | {"rank"}):
            s.index_lets[stmt.name] = stmt.value
        else:
            s.scope.names[stmt.name] = let_size(s.scope, stmt)
    elif isinstance(stmt, Require):
        read_divisions(s, stmt.cond)
        s.guards.append(Guard(s.scope.cond(stmt.cond), _text(stmt.span), stmt.span))
    elif isinstance(stmt, Fn):
        if stmt.name in s.scope.names:  # one meaning per name: `tp(x)` beside `tp` would read as two
            raise SpecError(f"'{stmt.name}' is already a runtime name or a let; a fn may not take its name",
                            stmt.span)
        if stmt.name in s.scope.fns:  # a later definition would silently win over the one a reader saw first
            first = s.scope.fns[stmt.name].span
            raise SpecError(f"fn '{stmt.name}' is already defined{f' at {first}' if first else ''}; a fn has one "
                            f"definition on each path through the cases", stmt.span)
        s.scope.fns[stmt.name] = stmt
    elif isinstance(stmt, World):
        read_divisions(s, stmt.size)
        s.world = s.scope.size(stmt.size, "world size")
    elif isinstance(stmt, Ranks):
        if s.ranks is not None:
            raise SpecError(f"{where} declares its ranks twice", stmt.span)
        seen = set()
        for d in stmt.digits:
            if d.name in seen or d.name in s.scope.names:
                raise SpecError(f"rank digit '{d.name}' is declared twice or shadows a size", d.span)
            seen.add(d.name)
        s.ranks = stmt
        read_divisions(s, *(d.extent for d in stmt.digits))
        rank = Name(stmt.digits[0].name, stmt.digits[0].span)
        for d in stmt.digits[1:]:
            rank = BinOp("+", BinOp("*", rank, d.extent, d.span), Name(d.name, d.span), d.span)
        s.index_lets["rank"] = rank
    elif isinstance(stmt, Replica):
        s.replicas = s.replicas + tuple(n for n in dict.fromkeys(stmt.names) if n not in s.replicas)
        s.replica_spans.update({n: stmt.span for n in stmt.names})
    elif isinstance(stmt, Agnostic):
        read_divisions(s, stmt.cond)
        s.agnostic = s.scope.cond(stmt.cond)
    else:  # pragma: no cover - the grammar admits nothing else
        raise TypeError(stmt)

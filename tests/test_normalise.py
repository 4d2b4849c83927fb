"""itersum.normalise: the normal form evaluates like the expression it came from."""
import itertools

import pytest
import sympy

from layoutalg.errors import SpecError
from layoutalg.dsl.interpret import Ops
from layoutalg.ir.itersum import normalise
from layoutalg.ir.sizes import Atoms, Scope
from layoutalg.dsl.syntax import parse


def expr(text):
    return parse(f"fn f(t, s) = {text}\n").fns[0].body


def evaluate(e, env):
    """Direct integer evaluation of an expression syntax tree."""
    from layoutalg.dsl.tree import Name, Neg, Num
    if isinstance(e, Num):
        return int(e.value)
    if isinstance(e, Name):
        return env[e.id]
    if isinstance(e, Neg):
        return -evaluate(e.arg, env)
    ops = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "//": int.__floordiv__, "%": int.__mod__}
    return ops[e.op](evaluate(e.left, env), evaluate(e.right, env))


def normalise_post(text, extents):
    """sum(scale * ((src // lower) % extent)) + base equals the expression at every point."""
    s = normalise(expr(text), {k: sympy.Integer(v) for k, v in extents.items()}, Scope(Atoms(), {}))
    for values in itertools.product(*(range(v) for v in extents.values())):
        env = dict(zip(extents, values))
        got = int(s.base) + sum(int(c) * ((env[sp.source] // int(sp.lower)) % int(sp.extent)) for sp, c in s.terms)
        assert got == evaluate(expr(text), env), (text, env)


@pytest.mark.parametrize("text", [
    "t", "3 * t + s", "((t // 2) * 3 + s) * 2 + t % 2", "t // 4 + (t % 4) * 3", "(t // 2) % 2 + 5 * (t % 2)",
    "2 * (t + 4 * s) - s", "-t + 7",
])
def test_normal_form_evaluates_like_the_expression(text):
    normalise_post(text, {"t": 8, "s": 3})


def test_random_interleaves(rng):
    for _ in range(60):
        i = rng.choice((1, 2, 4))
        cp, c = rng.choice((1, 2, 3)), rng.randrange(3)
        normalise_post(f"((t // {i}) * {cp} + {c}) * {i} + t % {i}", {"t": 8, "s": 1})


@pytest.mark.parametrize("text,message", [
    ("t * s", "multiplies two indices"), ("(t + s) // 2", "single index"), ("t / 2", "divides sizes exactly"),
])
def test_not_affine_is_rejected(text, message):
    with pytest.raises(SpecError, match=message):
        normalise(expr(text), {"t": sympy.Integer(8), "s": sympy.Integer(2)}, Scope(Atoms(), {}))


def test_symbolic_split_records_an_exact_division():
    T, interleave = sympy.symbols("T interleave", integer=True)
    atoms = Atoms()
    s = normalise(expr("t // interleave"), {"t": T}, Scope(atoms, {"interleave": interleave}))
    (split, scale), = s.terms
    assert split.lower == interleave and scale == 1
    atom = atoms.by_symbol[split.extent]
    assert (atom.op, atom.num, atom.den) == ("/", T, interleave)


def test_ops_exact_division():
    with pytest.raises(ArithmeticError):
        Ops().exact(7, 2)

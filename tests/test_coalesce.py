import sympy

from layoutalg.algebra.ops import coalesce
from layoutalg.algebra.layout import Layout
from layouts import random_layout


def coalesce_post(L: Layout, C: Layout) -> None:
    """coalesce(L) is the same function as L, with no extent-1 mode."""
    assert C.size() == L.size()
    assert [C(i) for i in range(L.size())] == [L(i) for i in range(L.size())]
    assert all(n != 1 for n in C.shape) or C == Layout((1,), (0,))


def test_coalesce_random(rng):
    for _ in range(500):
        L = random_layout(rng)
        coalesce_post(L, coalesce(L))


def test_coalesce_merges_a_chain_into_one_mode():
    assert coalesce(Layout((2, 3, 4), (1, 2, 6))) == Layout((24,), (1,))


def test_coalesce_symbolic():
    D, H = sympy.symbols("D H", positive=True, integer=True)
    assert coalesce(Layout((D, H), (1, D))) == Layout((D * H,), (1,))

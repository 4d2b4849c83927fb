import pytest
import sympy

from layoutalg.algebra.ops import NotCompact, right_inverse
from layoutalg.algebra.layout import Layout
from layoutalg.ir.sizes import Atoms
from layouts import random_compact, random_layout


def right_inverse_post(L: Layout, R: Layout) -> None:
    """L(R(x)) == x for every offset x of the compact layout L."""
    assert R.size() == L.size()
    assert [L(R(x)) for x in range(L.size())] == list(range(L.size()))


def is_bijection(L: Layout) -> bool:
    return sorted(L(i) for i in range(L.size())) == list(range(L.size()))


def test_right_inverse_of_compact_layouts(rng):
    for _ in range(500):
        L = random_compact(rng)
        right_inverse_post(L, right_inverse(L))


def test_right_inverse_rejects_exactly_the_non_bijections(rng):
    for _ in range(1000):
        L = random_layout(rng)
        if is_bijection(L):
            right_inverse_post(L, right_inverse(L))
        else:
            with pytest.raises(NotCompact):
                right_inverse(L)


def test_right_inverse_names_the_missing_stride():
    with pytest.raises(NotCompact, match="no mode has stride 2"):
        right_inverse(Layout((2, 2), (1, 4)))


def test_right_inverse_symbolic_walks_the_chain():
    T, H, D = sympy.symbols("T H D", positive=True, integer=True)
    atoms = Atoms()
    L = Layout((T, H, D), (D * H, D, 1))          # NHD: token outer, head, then dim
    R = right_inverse(L, atoms.equal)
    assert R == Layout((D, H, T), (T * H, T, 1))

import pytest

from layoutalg.algebra import NotCompact, invert_and_compose
from layoutalg.layout import Layout
from layouts import random_compact


def invert_and_compose_post(B: Layout, A: Layout, C: Layout) -> None:
    """C(A(i)) == B(i): C carries A's offsets to B's through the shared index."""
    assert [C(A(i)) for i in range(A.size())] == [B(i) for i in range(A.size())]


def test_invert_and_compose_random(rng):
    for _ in range(500):
        A = random_compact(rng)
        B = Layout(A.shape, tuple(rng.choice((0, 1, 5, 7, 30)) for _ in A.shape))
        invert_and_compose_post(B, A, invert_and_compose(B, A))


def test_invert_and_compose_needs_a_compact_source():
    with pytest.raises(NotCompact):
        invert_and_compose(Layout((2, 2), (1, 1)), Layout((2, 2), (1, 1)))


def test_invert_and_compose_needs_equal_shapes():
    with pytest.raises(ValueError, match="shapes differ"):
        invert_and_compose(Layout((4,), (1,)), Layout((2, 2), (1, 2)))

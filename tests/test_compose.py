import pytest

from layoutalg.algebra.ops import compose
from layoutalg.algebra.layout import Layout
from layouts import random_layout


def compose_post(B: Layout, A: Layout, C: Layout) -> None:
    """compose(B, A)(i) == B(A(i)) for every index of A."""
    assert [C(i) for i in range(A.size())] == [B(A(i)) for i in range(A.size())]


def test_compose_mode_selections(rng):
    for _ in range(500):
        B = random_layout(rng)
        order = list(range(len(B.shape)))
        rng.shuffle(order)
        strides = B.index_strides()
        A = Layout(tuple(B.shape[k] for k in order), tuple(strides[k] for k in order))
        compose_post(B, A, compose(B, A))


def test_compose_rejects_a_partial_mode():
    with pytest.raises(ValueError, match="selects no whole mode"):
        compose(Layout((4, 2), (1, 4)), Layout((2,), (1,)))

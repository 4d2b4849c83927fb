"""`refine`: the common refinement of two compact layouts, checked by enumeration."""
import pytest
import sympy

from layoutalg.algebra.ops import NotCompact, refine
from layoutalg.algebra.layout import Layout
from layouts import random_compact


def _grouped(rng, factors):
    """A compact layout whose chain is `factors` (in order) grouped at random, modes shuffled."""
    shape, stride, run, k = [], [], 1, 0
    while k < len(factors):
        n = rng.randint(1, len(factors) - k)
        e = 1
        for f in factors[k:k + n]:
            e *= f
        shape.append(e)
        stride.append(run)
        run *= e
        k += n
    order = list(range(len(shape)))
    rng.shuffle(order)
    return Layout(tuple(shape[i] for i in order), tuple(stride[i] for i in order))


def refine_post(A: Layout, B: Layout, pieces) -> None:
    """Offset by offset, the pieces' coordinates are A's and B's coordinates of that offset."""
    for x in range(A.size()):
        ca, cb, run = [0] * len(A.shape), [0] * len(B.shape), 1
        for p in pieces:
            c = (x // run) % p.extent
            ca[p.a[0]] += c * p.a[1]
            cb[p.b[0]] += c * p.b[1]
            run *= p.extent
        assert sum(c * d for c, d in zip(ca, A.stride)) == x
        assert sum(c * d for c, d in zip(cb, B.stride)) == x
        assert all(c < n for c, n in zip(ca, A.shape)) and all(c < n for c, n in zip(cb, B.shape))


def test_refine_of_two_groupings_of_one_chain(rng):
    for _ in range(400):
        factors = [rng.choice((2, 3, 2, 5)) for _ in range(rng.randint(1, 5))]
        A, B = _grouped(rng, factors), _grouped(rng, factors)
        refine_post(A, B, refine(A, B))


def test_refine_is_right_or_says_why(rng):
    same = 0
    for _ in range(400):
        A, B = random_compact(rng), random_compact(rng)
        if A.size() != B.size():
            with pytest.raises(NotCompact, match="not of one size|neither divides"):
                refine(A, B)
            continue
        same += 1
        try:
            pieces = refine(A, B)
        except NotCompact as e:
            assert "neither divides" in str(e)
            continue
        refine_post(A, B, pieces)
    assert same > 20
    with pytest.raises(NotCompact, match="extents 3 .* and 2 .*neither divides"):
        refine(Layout((3, 2), (1, 3)), Layout((2, 3), (1, 2)))  # chains 3,2 and 2,3: no common refinement


def test_refine_symbolic_with_a_constant_ratio():
    H, D = sympy.symbols("H D", positive=True, integer=True)

    def quotient(n, d):
        q = sympy.cancel(sympy.sympify(n) / d)
        return int(q) if q.is_Integer and q > 0 else None
    # tp=2 against tp=4: (D, H/2 local, 2 ranks) and (D, H/4 local, 4 ranks), strides in elements
    A = Layout((D, H / 2, 2), (1, D, D * H / 2))
    B = Layout((D, H / 4, 4), (1, D, D * H / 4))
    pieces = refine(A, B, quotient)
    assert [(p.extent, p.a, p.b) for p in pieces] == [(D, (0, 1), (0, 1)), (H / 4, (1, 1), (1, 1)),
                                                      (2, (1, H / 4), (2, 1)), (2, (2, 1), (2, 2))]
    with pytest.raises(NotCompact, match="neither divides"):
        refine(Layout((D, H), (1, D)), Layout((H, D), (1, H)), quotient)

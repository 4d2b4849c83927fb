import pytest

from layoutalg.algebra.ops import NotCompact, invert_and_compose
from layoutalg.algebra.layout import Layout
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


def test_symbolic_copy_map_instantiates_to_the_numeric_one():
    """The copy map derived once with formulas equals the one computed from numbers."""
    import sympy

    from layoutalg.ir.family import resolve, symbolic_copy_map
    from layoutalg.dsl.library import load_default
    from layoutalg.runtime.lower import copy_map
    from layoutalg.runtime.derive import compiled_library
    lib = load_default()
    sizes = dict(tp=4, pcp=2, dcp=1, interleave=2, total_heads=8, heads=2, block_size=8, head_size=4,
                 dtype_bytes=2, page_size=2 * 8 * 2 * 4 * 2, per_token_head_quant=0, compress_ratio=1)
    for name in ("split_nhd", "split_hnd", "packed_nhd", "packed_hnd"):
        fam = resolve(lib, name)
        v = next(v for v in fam.variants
                 if [c.text for c in v.cases] == ["case total_heads >= tp", "case pcp_replicas == 0", "case cp > 1"])
        C = symbolic_copy_map(fam, v)
        subs = {sympy.Symbol(k, integer=True): val for k, val in sizes.items()}
        numeric = Layout(tuple(int(n.subs(subs)) for n in C.shape), tuple(int(c.subs(subs)) for c in C.stride))
        assert numeric == copy_map(compiled_library()[name].evaluate(sizes)), name

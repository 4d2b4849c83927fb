"""Which sizes the canonical numbers fix (`claims._Fixing`), checked by enumeration: where a
size is counted fixed, every two assignments of the names that give the canonical sizes the
same values give it the same value too. A format id keyed by canonical numbers rests on it."""
import itertools

import sympy
from hypothesis import given, settings, strategies as st

from layoutalg.ir.claims import _fixing, _joined, _left, _size
from layoutalg.ir.resolved import Family
from layoutalg.params import Param
from layoutalg.ir.sizes import Atoms

NAMES = ("a", "b", "c")
SYMS = sympy.symbols(NAMES, integer=True)
SETTINGS = settings(derandomize=True, database=None, deadline=None, max_examples=400)


def _family(lows):
    vocabulary = {n: Param(n, lo, 4, (lo,)) for n, lo in zip(NAMES, lows)}
    return Family("f", "x", 0, "", None, Atoms(), vocabulary=vocabulary)


def _values(exprs, env):
    try:
        out = tuple(sympy.sympify(e).subs(env) for e in exprs)
    except ZeroDivisionError:
        return None
    return None if any(v.has(sympy.zoo, sympy.nan, sympy.oo) for v in out) else out


def _witness(family, canonical, read):
    """Two assignments that agree on every canonical size and not on `read`, else None."""
    lows = [family.vocabulary[n].lo for n in NAMES]
    seen = {}
    for vals in itertools.product(*(range(lo, 5) for lo in lows)):
        env = dict(zip(SYMS, vals))
        key, val = _values(canonical, env), _values([read], env)
        if key is None or val is None:
            continue
        if key in seen and seen[key][1] != val:
            return seen[key][0], vals
        seen.setdefault(key, (vals, val))
    return None


def _left_of(family, canonical, read, moving=frozenset()):
    return _left(_size(family, read), _fixing(family, [_size(family, x) for x in canonical], moving))


monomial = st.builds(lambda k, ea, eb, ec: k * SYMS[0] ** ea * SYMS[1] ** eb * SYMS[2] ** ec,
                     st.sampled_from([1, 2]), *[st.integers(-1, 2)] * 3)
size = st.one_of(monomial, st.builds(lambda x, y: x + y, monomial, monomial))


@SETTINGS
@given(st.tuples(*[st.sampled_from([0, 1])] * 3), st.lists(size, min_size=1, max_size=3), size)
def test_a_size_counted_fixed_takes_one_value_wherever_the_canonical_sizes_do(lows, canonical, read):
    family = _family(lows)
    if not _left_of(family, canonical, read):
        assert _witness(family, canonical, read) is None, (lows, canonical, read)


def test_a_product_fixes_itself_and_no_factor():
    a, b, c = SYMS
    family = _family((1, 1, 1))
    assert _left_of(family, [2 * a * b], a * b) == set()
    assert _left_of(family, [2 * a * b], a * b / 2 + 3) == set()
    assert _left_of(family, [a * b, c], a * b * c) == set()
    assert _left_of(family, [a * b], a) == {"a"} and _witness(family, [a * b], a)
    assert _left_of(family, [a * b], a + b) == {"a", "b"} and _witness(family, [a * b], a + b)
    # a ratio of canonical sizes is fixed; a size that moves with the group fixes nothing
    assert _left_of(family, [a * b, a * c], b / c) == set()
    assert _left_of(family, [a * b], a * b, moving=frozenset({"b"})) == {"a", "b"}


def test_a_name_that_can_be_zero_fixes_no_product():
    a, b, _ = SYMS
    family = _family((0, 1, 1))
    assert _left_of(family, [a * b], a * b) == {"a", "b"}
    assert _left_of(family, [a, a * b], b) == {"b"} and _witness(family, [a, a * b], b)


# ---- joined digits (`claims._joined`): the sum they give is the sum of the digits as written

def _digit_sum(digits, i):
    return sum((i // lo) % e * k for _, lo, e, k in digits)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8, 12]), st.integers(1, 4), st.integers(0, 9)),
                min_size=1, max_size=4), st.booleans())
def test_joined_digits_give_the_same_sum(raw, chain):
    """Random digits of one index (with `chain`, each continuing the one before, the case that
    joins): wherever the index runs, the joined digits sum to what the written ones do."""
    from layoutalg.ir.itersum import Split
    if chain:  # lower_{n+1} = lower_n * extent_n, scale_{n+1} = scale_n * extent_n
        lo, k, digits = raw[0][0], raw[0][2] or 1, []
        for _, e, _ in raw:
            digits.append((lo, e, k))
            lo, k = lo * e, k * e
    else:
        digits = [(lo, e, k) for lo, e, k in raw]
    terms = [(Split("i", sympy.Integer(lo), sympy.Integer(e)), sympy.Integer(k)) for lo, e, k in digits]
    joined = _joined(_family((1, 1, 1)), lambda x: x, terms)
    if chain:
        assert len(joined) == 1
    box = max(lo * e for lo, e, _ in digits)
    written = [("i", lo, e, k) for lo, e, k in digits]
    assert all(_digit_sum(joined, i) == _digit_sum(written, i) for i in range(2 * box))


def test_digits_whose_scales_do_not_continue_are_not_joined():
    from layoutalg.ir.itersum import Split
    one = sympy.Integer(1)
    terms = [(Split("i", one, sympy.Integer(2)), one), (Split("i", sympy.Integer(2), sympy.Integer(3)), sympy.Integer(3))]
    assert len(_joined(_family((1, 1, 1)), lambda x: x, terms)) == 2  # (i % 2) + 3 (i // 2 % 3) is no i % 6

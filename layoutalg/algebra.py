"""The layout algebra: small free functions on `Layout`, after CuTe.

Each works on ints or on sympy sizes; `eq` decides equality of two sizes (plain `==`
for ints, `Atoms.equal` for symbolic sizes). The copy map of a family is one call:

    invert_and_compose(canonical, local)   # canonical o local^-1, local offset -> canonical offset
"""
from __future__ import annotations

import operator

from .errors import LayoutalgError
from .layout import Layout


class NotCompact(LayoutalgError):
    """A layout that should be a bijection onto [0, size) is not one."""


def _is_one(n, eq) -> bool:
    return eq(n, 1)


def coalesce(L: Layout, eq=operator.eq) -> Layout:
    """Drop extent-1 modes and merge neighbours that continue each other.

    Modes `(n0, d0), (n1, d1)` merge into `(n0 * n1, d0)` when `d1 == n0 * d0`.

    Pre-conditions: none.
    Post-conditions: `coalesce(L)(i) == L(i)` for all `i < L.size()`; no mode has extent 1
    (an empty layout is `(1):(0)`).

    Examples:
        >>> str(coalesce(Layout((2, 1, 3), (1, 7, 2))))
        '(6):(1)'
        >>> str(coalesce(Layout((2, 3), (1, 4))))
        '(2,3):(1,4)'
        >>> str(coalesce(Layout((1, 1), (5, 9))))
        '(1):(0)'
    """
    shape, stride = [], []
    for n, d in L.modes():
        if _is_one(n, eq):
            continue
        if shape and eq(d, shape[-1] * stride[-1]):
            shape[-1] = shape[-1] * n
        else:
            shape.append(n)
            stride.append(d)
    if not shape:
        return Layout((1,), (0,))
    return Layout(tuple(shape), tuple(stride))


def right_inverse(L: Layout, eq=operator.eq) -> Layout:
    """The inverse of a compact layout: `L(right_inverse(L)(x)) == x`.

    Walks the stride chain: the mode of stride 1 first, then the mode whose stride is
    the product of the extents taken so far, and so on (no sorting, so it works on
    symbolic strides that can only be compared for equality).

    Pre-conditions: `L` is compact, a bijection from its index space onto `[0, L.size())`;
    otherwise raises `NotCompact` naming the offset no mode starts at.
    Post-conditions: `R.size() == L.size()` and `L(R(x)) == x` for all `x < L.size()`.

    Examples:
        >>> L = Layout((2, 3), (3, 1))
        >>> R = right_inverse(L)
        >>> str(R), [L(R(x)) for x in range(6)]
        ('(3,2):(2,1)', [0, 1, 2, 3, 4, 5])
    """
    index_strides = L.index_strides()
    if eq is operator.eq and all(type(d) is int for d in L.stride):
        return _right_inverse_int(L, index_strides)
    left = [k for k, n in enumerate(L.shape) if not _is_one(n, eq)]
    shape, stride, run = [], [], 1
    while left:
        k = next((k for k in left if eq(L.stride[k], run)), None)
        if k is None:
            raise NotCompact(f"layout {L} is not compact: no mode has stride {run} "
                             f"(modes left: {[(L.shape[j], L.stride[j]) for j in left]})")
        left.remove(k)
        shape.append(L.shape[k])
        stride.append(index_strides[k])
        run = run * L.shape[k]
    if not shape:
        return Layout((1,), (0,))
    return Layout(tuple(shape), tuple(stride))


def _right_inverse_int(L: Layout, index_strides: tuple) -> Layout:
    """`right_inverse` for integer strides: sort by stride, then check the chain."""
    modes = sorted((d, n, s) for n, d, s in zip(L.shape, L.stride, index_strides) if n != 1)
    run = 1
    for d, n, _ in modes:
        if d != run:
            raise NotCompact(f"layout {L} is not compact: no mode has stride {run}")
        run *= n
    if not modes:
        return Layout((1,), (0,))
    return Layout(tuple(m[1] for m in modes), tuple(m[2] for m in modes))


def compose(B: Layout, A: Layout, eq=operator.eq) -> Layout:
    """`B o A`: first `A` (into B's index space), then `B`.

    Pre-conditions: each mode of `A` either has extent 1 or selects one whole mode of `B`:
    its stride is that mode's index stride in `B` and its extent that mode's extent.
    (This is the case `invert_and_compose` needs; general CuTe composition also splits
    modes.) Otherwise raises `ValueError`.
    Post-conditions: `compose(B, A)(i) == B(A(i))` for all `i < A.size()`.

    Examples:
        >>> B = Layout((2, 3), (1, 10))
        >>> str(compose(B, Layout((3, 2), (2, 1))))
        '(3,2):(10,1)'
    """
    index_strides = B.index_strides()
    shape, stride = [], []
    fast = {s: k for k, s in enumerate(index_strides) if B.shape[k] != 1} if eq is operator.eq else None
    for n, d in A.modes():
        if _is_one(n, eq):
            continue
        if fast is not None:
            k = fast.get(d)
            k = k if k is not None and B.shape[k] == n else None
        else:
            k = next((k for k, s in enumerate(index_strides) if eq(s, d) and eq(B.shape[k], n)), None)
        if k is None:
            raise ValueError(f"compose: mode {n}:{d} of {A} selects no whole mode of {B}")
        shape.append(n)
        stride.append(B.stride[k])
    if not shape:
        return Layout((1,), (0,))
    return Layout(tuple(shape), tuple(stride))


def invert_and_compose(B: Layout, A: Layout, eq=operator.eq) -> Layout:
    """`B o A^-1`: offsets of `A` to offsets of `B` through their common index space.

    This is the copy map: with `A` the local layout and `B` the canonical offsets of the
    same digits, the result sends each local byte to its canonical byte.

    Pre-conditions: `A` compact (else `NotCompact`) and `B.shape == A.shape`.
    Post-conditions: `C(A(i)) == B(i)` for every index `i`; `C`'s modes are in the order
    of increasing local stride.

    Examples:
        >>> A = Layout((2, 3), (3, 1))           # local: the 2-mode is outer
        >>> B = Layout((2, 3), (1, 2))           # canonical: the 2-mode is inner
        >>> C = invert_and_compose(B, A)
        >>> str(C), [C(A(i)) == B(i) for i in range(6)] == [True] * 6
        ('(3,2):(2,1)', True)
    """
    if len(B.shape) != len(A.shape) or not all(eq(a, b) for a, b in zip(A.shape, B.shape)):
        raise ValueError(f"invert_and_compose: shapes differ: {A} vs {B}")
    return compose(B, right_inverse(A, eq), eq)

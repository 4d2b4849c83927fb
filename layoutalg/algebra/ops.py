"""The layout algebra: small free functions on `Layout`, after CuTe.

Each works on ints or on sympy sizes; `eq` decides equality of two sizes (plain `==`
for ints, `Atoms.equal` for symbolic sizes). The copy map of a family is one call:

    invert_and_compose(canonical, local)   # canonical o local^-1, local offset -> canonical offset
"""
from __future__ import annotations

import operator

from ..errors import LayoutalgError
from .layout import Layout
from ..record import named_tuple


class NotCompact(LayoutalgError):
    """A layout that should be a bijection onto [0, size) is not one. From `right_inverse`, where
    its walk stopped: `run`, the stride no mode has; `taken`, the modes that chained before it, in
    walk order; `left`, the modes left (indices into the layout's modes)."""

    def __init__(self, message: str, run=None, taken: tuple = (), left: tuple = ()):
        super().__init__(message)
        self.run, self.taken, self.left = run, taken, left


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
    shape, stride, run, taken = [], [], 1, []
    while left:
        k = next((k for k in left if eq(L.stride[k], run)), None)
        if k is None:
            raise NotCompact(f"layout {L} is not compact: no mode has stride {run} "
                             f"(modes left: {[(L.shape[j], L.stride[j]) for j in left]})", run, tuple(taken),
                             tuple(left))
        left.remove(k)
        taken.append(k)
        shape.append(L.shape[k])
        stride.append(index_strides[k])
        run = run * L.shape[k]
    if not shape:
        return Layout((1,), (0,))
    return Layout(tuple(shape), tuple(stride))


def _right_inverse_int(L: Layout, index_strides: tuple) -> Layout:
    """`right_inverse` for integer strides: sort by stride, then check the chain."""
    modes = sorted((d, n, s, k) for k, (n, d, s) in enumerate(zip(L.shape, L.stride, index_strides)) if n != 1)
    run = 1
    for i, (d, n, _, _) in enumerate(modes):
        if d != run:
            raise NotCompact(f"layout {L} is not compact: no mode has stride {run}", run,
                             tuple(m[3] for m in modes[:i]), tuple(m[3] for m in modes[i:]))
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


@named_tuple
class Piece:
    """One mode of a common refinement: `extent` consecutive steps that mode `a[0]` of A
    takes with step `a[1]` (in A's coordinate of that mode), and mode `b[0]` of B with `b[1]`."""

    extent: object
    a: tuple
    b: tuple


def _quotient(n, d):
    """`n / d` where `d` divides `n` (ints), else None."""
    return n // d if n % d == 0 else None


def _chain(L: Layout, quotient) -> list[int]:
    """The modes of a compact layout by increasing stride, extent-1 modes left out."""
    left = [k for k, n in enumerate(L.shape) if quotient(n, 1) != 1]
    order, run = [], 1
    while left:
        k = next((k for k in left if quotient(L.stride[k], run) == 1), None)
        if k is None:
            raise NotCompact(f"layout {L} is not compact: no mode has stride {run}")
        left.remove(k)
        order.append(k)
        run = run * L.shape[k]
    return order


def refine(A: Layout, B: Layout, quotient=_quotient) -> list[Piece]:
    """The common refinement of two compact layouts onto one range `[0, N)`: the coarsest
    list of pieces such that, offset by offset, each piece is a digit of both A and B.

    Walking both stride chains from offset 1, the mode that ends first cuts the other:
    extents must divide one another. `quotient(n, d)` is `n / d` where it is a whole number
    for every size (ints: `n % d == 0`; symbolic: a positive constant, or a size known to be
    whole, such as another mode's extent), else None.
    This composes one layout with the inverse of the other where their modes do not match
    one for one (`invert_and_compose` needs whole modes): a direct reshard's map.

    Pre-conditions: A and B compact, of equal size; otherwise `NotCompact`, which also names
    two extents neither of which divides the other.
    Post-conditions: with pieces `p_0, p_1, ...` of offset strides `1, n_0, n_0 n_1, ...`, the
    coordinate of offset `x` along mode `k` of A is the sum over pieces `p` with `p.a[0] == k`
    of `((x // stride(p)) % p.extent) * p.a[1]`; likewise for B.

    Examples:
        >>> [tuple(p) for p in refine(Layout((4, 2), (1, 4)), Layout((2, 4), (1, 2)))]
        [(2, (0, 1), (0, 1)), (2, (0, 2), (1, 1)), (2, (1, 1), (1, 2))]
        >>> [tuple(p) for p in refine(Layout((3, 2), (2, 1)), Layout((6,), (1,)))]
        [(2, (1, 1), (0, 1)), (3, (0, 1), (0, 2))]
    """
    a, b = _chain(A, quotient), _chain(B, quotient)
    pieces, i, j = [], 0, 0
    ra, ma = (A.shape[a[0]] if a else 1), 1
    rb, mb = (B.shape[b[0]] if b else 1), 1
    while i < len(a) and j < len(b):
        ab, ba = quotient(ra, rb), quotient(rb, ra)
        if ab is None and ba is None:
            raise NotCompact(f"refine: mode extents {ra} of {A} and {rb} of {B}: neither divides the other")
        n = rb if ab is not None else ra
        pieces.append(Piece(n, (a[i], ma), (b[j], mb)))
        if ab is not None and ab != 1:
            ra, ma = ab, ma * n
        else:
            i += 1
            ra, ma = (A.shape[a[i]] if i < len(a) else 1), 1
        if ba is not None and ba != 1:
            rb, mb = ba, mb * n
        else:
            j += 1
            rb, mb = (B.shape[b[j]] if j < len(b) else 1), 1
    if i < len(a) or j < len(b):
        raise NotCompact(f"refine: {A} and {B} are not of one size")
    return pieces

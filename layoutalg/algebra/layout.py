"""IR of layouts: a flat `shape:stride` map from a mixed-radix index to an offset.

    L(i) = sum(((i // prod(shape[:k])) % shape[k]) * stride[k])

The first mode varies fastest (colexicographic, as CuTe). Shapes and strides are
Python ints at run time, or sympy expressions when the algebra works symbolically.
"""
from __future__ import annotations

from math import prod

from ..record import record


@record(frozen=True)
class Layout:
    """A layout `shape:stride`.

    Examples:
        >>> L = Layout((2, 3), (3, 1))
        >>> [L(i) for i in range(L.size())]
        [0, 3, 1, 4, 2, 5]
        >>> str(L)
        '(2,3):(3,1)'
    """

    shape: tuple
    stride: tuple

    def __post_init__(self):
        if len(self.shape) != len(self.stride):
            raise ValueError(f"layout has {len(self.shape)} extents but {len(self.stride)} strides")

    def size(self):
        """Number of indices in the domain."""
        return prod(self.shape)

    def cosize(self):
        """One past the largest offset (for non-negative strides)."""
        return sum((n - 1) * d for n, d in zip(self.shape, self.stride)) + 1

    def index_strides(self) -> tuple:
        """The colexicographic stride of each mode in the *index* space."""
        out, run = [], 1
        for n in self.shape:
            out.append(run)
            run = run * n
        return tuple(out)

    def coords(self, i) -> tuple:
        """The mode coordinates of index `i`."""
        out = []
        for n in self.shape:
            out.append(i % n)
            i //= n
        return tuple(out)

    def __call__(self, i):
        return sum(c * d for c, d in zip(self.coords(i), self.stride))

    def __len__(self) -> int:
        return len(self.shape)

    def modes(self):
        return zip(self.shape, self.stride)

    def __str__(self) -> str:
        return f"({','.join(map(str, self.shape))}):({','.join(map(str, self.stride))})"


def make_layout(*modes) -> Layout:
    """A layout from `(extent, stride)` pairs.

    Examples:
        >>> make_layout((4, 1), (2, 4)) == Layout((4, 2), (1, 4))
        True
    """
    return Layout(tuple(n for n, _ in modes), tuple(d for _, d in modes))

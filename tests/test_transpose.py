"""`direct.transposed`: a k-by-n grid and its transpose as k * k strided pieces, one case per
residue of n mod k, checked by enumeration (the pieces across another cp where a rank's
chunks of tokens do not divide evenly among the small pages)."""
import pytest

from layoutalg.algebra.refine import transposed


def transposed_post(k: int, rho: int, q: int, pieces) -> None:
    """Every offset z of [0, k n) lies in exactly one piece, and the piece says its digits:
    z mod k, z // n (fixed), z mod n and z // k (stepping with the piece)."""
    n = k * q + rho
    seen = []
    for kl, nh, steps, n_low, k_high in pieces:
        assert steps >= 0
        for j in range(steps):
            z = kl + k * (k_high + j)
            assert (z % k, z // n, z % n, z // k) == (kl, nh, n_low + k * j, k_high + j), (k, rho, q, z)
            seen.append(z)
    assert sorted(seen) == list(range(k * n)), (k, rho, q)


def test_transposed_tiles_the_grid_for_every_residue():
    for k in range(1, 7):
        for rho in range(k):
            for q in range(0, 6):
                if k * q + rho:
                    transposed_post(k, rho, q, transposed(k, rho, q))


def test_a_wrong_residue_is_caught_by_the_post_condition():
    """The helper can fail: the pieces of n = 5 read as n = 4 miss offsets or misplace them."""
    with pytest.raises(AssertionError):
        transposed_post(2, 0, 2, transposed(2, 1, 2))

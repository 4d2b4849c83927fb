"""`algebra.intervals.flaw` against counting every byte, on many small random piece sets."""
import random

from layoutalg.algebra.intervals import flaw, union


def _counts(pieces, size):
    reach = max([size] + [lo + n for lo, n, _ in pieces])
    count = [0] * reach
    for lo, n, _ in pieces:
        for b in range(lo, lo + n):
            count[b] += 1
    return count


def test_flaw_is_none_exactly_when_the_bytes_say_so():
    rng = random.Random(36)
    seen = {"gap": 0, "overlap": 0, "end": 0, None: 0}
    for _ in range(3000):
        size = rng.randint(1, 12)
        pieces = [(rng.randint(0, 12), rng.randint(1, 5), i) for i in range(rng.randint(0, 4))]
        count = _counts(pieces, size)
        for gaps in (False, True):
            f = flaw(pieces, size, gaps)
            ok = all(c <= 1 for c in count) and len(count) == size and (gaps or all(c == 1 for c in count))
            assert (f is None) == ok, (pieces, size, gaps, f)
            seen[f.kind if f else None] += 1
            if f and f.kind == "overlap":  # the byte it names is covered twice
                assert count[f.start] >= 2
            if f and f.kind == "gap":  # the bytes it names are covered by nothing
                assert all(count[b] == 0 for b in range(f.start, f.end))
    assert all(seen.values()), seen  # every verdict was reached


def test_union_covers_exactly_the_bytes_of_its_pieces():
    rng = random.Random(38)
    for _ in range(2000):
        pieces = [(rng.randint(0, 12), rng.randint(0, 5)) for _ in range(rng.randint(0, 5))]
        spans = union(pieces)
        covered = {b for lo, n in pieces for b in range(lo, lo + n)}
        assert {b for a, e in spans for b in range(a, e)} == covered
        assert all(a < e for a, e in spans)  # none empty
        assert all(e1 < a2 for (_, e1), (a2, _) in zip(spans, spans[1:]))  # disjoint, apart, in order

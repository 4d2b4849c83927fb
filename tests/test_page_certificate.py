"""The runtime's page certificate (`lower.lower_page`) against brute force, on seeded random
pages: whatever it accepts tiles both pages exactly and copies each byte where its digits say;
what it refuses is really broken, or outside what it can show (never a silent mis-copy)."""
import random
from itertools import product

from layoutalg.compile.compiled import Instance, LocalDigit, Page, RankDigit
from layoutalg.runtime.lower import TilingError, lower_page


def _dense(rng, size):
    """A random mixed radix of `size` as (extent, stride) modes, in random order."""
    extents, left = [], size
    for f in (2, 3, 5, 7):
        while left % f == 0:
            extents.append(f)
            left //= f
    if left > 1:
        extents.append(left)
    rng.shuffle(extents)
    modes, stride = [], 1
    for n in extents:
        modes.append((n, stride))
        stride *= n
    rng.shuffle(modes)
    return modes


def _region(name, local_modes, canonical_modes, base, cbase):
    local = tuple(LocalDigit(n, ls, cs) for (n, ls), (_, cs) in zip(local_modes, canonical_modes))
    size = 1
    for n, _, _ in local:
        size *= n
    return Instance(name, local, (RankDigit(1, 1, 0, False),), cbase, size, size, 1, False, 1, (), (), (),
                    tuple(f"d{k}" for k in range(len(local))), ("r",), base)


def random_page(rng):
    """Regions laid end to end on both pages (each in its own random digit order), then maybe one
    number perturbed."""
    sizes = [rng.choice((1, 2, 3, 4, 6, 8)) for _ in range(rng.randint(1, 3))]
    order = list(range(len(sizes)))
    rng.shuffle(order)  # canonical places in another order than local ones
    local_at, canon_at, at = [], [0] * len(sizes), 0
    for s in sizes:
        local_at.append(at)
        at += s
    c = 0
    for k in order:
        canon_at[k] = c
        c += sizes[k]
    regions = []
    for k, s in enumerate(sizes):
        lm = _dense(rng, s)
        perm = list(range(len(lm)))
        rng.shuffle(perm)
        # canonical strides: the same extents as lm, laid densely in another order
        extents = [n for n, _ in lm]
        cm, stride = [None] * len(lm), 1
        for j in perm:
            cm[j] = (extents[j], stride)
            stride *= extents[j]
        regions.append(_region(f"r{k}", lm, cm, local_at[k], canon_at[k]))
    if rng.random() < 0.6:  # break something
        k = rng.randrange(len(regions))
        r = regions[k]
        what = rng.choice(("base", "cbase", "stride", "cstride", "extent"))
        local = list(r.local)
        j = rng.randrange(len(local)) if local else 0
        delta = rng.choice((-1, 1))
        if what == "base":
            r = r._replace(local_base=max(0, r.local_base + delta))
        elif what == "cbase":
            r = r._replace(canonical_base=max(0, r.canonical_base + delta))
        elif local:
            n, ls, cs = local[j]
            local[j] = LocalDigit(*{"stride": (n, max(0, ls + delta), cs), "cstride": (n, ls, max(0, cs + delta)),
                                    "extent": (max(0, n + delta), ls, cs)}[what])
            size = 1
            for x, _, _ in local:
                size *= x
            r = r._replace(local=tuple(local), local_page=size, canonical_page=size)
        regions[k] = r
    total = sum(r.local_page for r in regions)
    return Page("p", tuple((r.family, r) for r in regions), (), (), total, total, 1, False)


def brute_force(page):
    """'' when the page's digits tile both pages and the map is a bijection, else why not."""
    local, canon = {}, {}
    for _, r in page.regions:
        for idx in product(*(range(n) for n, _, _ in r.local)):
            lo = r.local_base + sum(i * ls for i, (_, ls, _) in zip(idx, r.local))
            co = r.canonical_base + sum(i * cs for i, (_, _, cs) in zip(idx, r.local))
            if lo in local or co in canon:
                return "a byte twice"
            local[lo], canon[co] = co, lo
    if set(local) != set(range(page.local_page)) or set(canon) != set(range(page.canonical_page)):
        return "a byte left out"
    return ""


def test_what_the_page_certificate_accepts_tiles_and_copies_exactly():
    rng = random.Random(20261201)
    accepted = refused = 0
    for _ in range(4000):
        page = random_page(rng)
        try:
            maps = lower_page(page)
        except TilingError:
            refused += 1
            continue
        accepted += 1
        assert brute_force(page) == "", page
        got = {lo + b: co + b for r in maps[0].runs for lo, co, n in r.triples() for b in range(n)}
        want = {}
        for _, r in page.regions:
            for idx in product(*(range(n) for n, _, _ in r.local)):
                want[r.local_base + sum(i * ls for i, (_, ls, _) in zip(idx, r.local))] = \
                    r.canonical_base + sum(i * cs for i, (_, _, cs) in zip(idx, r.local))
        assert got == want, page
    assert accepted > 1000 and refused > 500, (accepted, refused)  # both sides exercised (on this seed:
    # every valid page accepted, none refused: the certificate is exact on these shapes)

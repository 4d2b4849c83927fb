"""Direct reshard plans as formulas: one configuration pair, every model size (`prove.reshard.all_sizes`
checks them).

Each configuration's symbolic digit table (`family.Variant`) tiles the canonical page, its
owner digits (every digit but the replicas) by canonical stride. The common refinement of
the two tilings (`algebra.refine`) says, piece by piece, which consumer digit and which
producer digit step together through the canonical bytes. For consumer rank `s` a piece of
a consumer rank digit is fixed by `s`; a piece of a producer rank digit picks the producer
(its values are enumerated: the grids are numbers); every other piece is a mode of the
plan, its extent and strides formulas in the sizes. Where replicas hold a byte, consumer
`s` reads the `s`-th of them modulo their number (as `reshard.direct_plans` does).

Across another cp (dcp=1 to dcp=2: one big canonical page is `k` small ones along the
family's `sequence` index) each small rank is `k` virtual ranks, `part * world + rank`: its
digits are moved onto the big page (`_in_big`) and refined as above. A piece whose extent
is a size over a number (`block_size / 2`: a rank's `n` chunks of tokens dealt among `k`
small pages) is the middle of a `refine.Transpose` block where `k` need not divide `n`:
the plan is then built once per residue of `n` mod `k`, each case on its domain (where
`(n - rho) / k` is whole), and the cases together cover every size. A piece of no such
block holds only where the number divides it: the plan's `domain`, which the checker
assumes and reports.

Nothing here trusts itself: the plans are a construction, and `prove.reshard.all_sizes` checks them
against the spec's reading of both configurations. At one pair's sizes (`plans_at`,
`triples_at`) they are what the runtime's plan must be.
"""
from __future__ import annotations

import dataclasses
import itertools
from math import prod
from typing import NamedTuple

import sympy

from ....algebra import refine
from ....algebra.ops import NotCompact
from ....errors import LayoutalgError
from ....ir.family import resolve
from ....ir.guards import guarded_equality
from ....dsl.interpret import Reading, paths
from ....dsl.library import Library
from .... import params
from ....params import CONFIG_NAMES
from ....ir.sizes import Atom, cancel, divided

PER_SIDE = ("heads", "page_size")
"""Names each configuration has its own value of, fixed by its guards (a rank's heads, its page)."""
_OWN = set(PER_SIDE) | set(CONFIG_NAMES)  # a division reading one of these means one thing per side


class NotEstablished(LayoutalgError):
    """No plan for all sizes is built here: the reason says what is not a number or does not divide."""


class SymbolicRun(NamedTuple):
    """Consumer local bytes `dst + sum(c_k * dst_stride_k)` come from producer `producer`'s
    local bytes `src + sum(c_k * src_stride_k)`, for `0 <= c_k < extent_k` (modes: (extent,
    src_stride, dst_stride)); sizes are sympy expressions.

    `dst_at` and `src_at` say which spec index each byte is, as the digit tables read it:
    (index, base, (coefficient per mode)) with index '' the byte within the element. Z3
    checks that reading against the spec's own before it trusts it."""

    producer: int
    src: object
    dst: object
    modes: tuple
    dst_at: tuple = ()
    src_at: tuple = ()


class SymbolicPlan(NamedTuple):
    consumer: int
    runs: tuple
    atoms: dict = {}  # the divisions its sizes read of one configuration (`x._q3`: that side's page_size / ...)
    domain: tuple = ()  # (dividend, divisor) pairs: the plan is the pair's plan where each divides (across a cp)


class Cross(NamedTuple):
    """A pair of another cp: `k` canonical pages of the `small` side ("producer" or
    "consumer") make one of the other's, joined along the canonical index `token`. The
    small side's ranks become `k` virtual ranks each, `v = part * world + rank`: rank `rank`'s
    page as part `part` of the big page."""

    token: str
    k: int
    small: str


# ---- building: the refinement of two digit tables ----------------------------------------------

def _instantiate(fam, v, values: dict, tag: str = "", atoms: dict | None = None):
    """The variant's digits with `values` put in, a size of one configuration (`PER_SIDE`)
    renamed `tag + name`; and the normaliser that rewrites those by the variant's guards
    (`heads` by `total_heads / shards`), to decide how the two sides' extents divide."""
    norm, _ = guarded_equality(fam, v)
    own: dict = {}
    mine = _OWN | {n for n, x in values.items() if not isinstance(x, int)}  # (a side's block_size: k * B)

    def at(x):
        return fam.atoms.put_in(x, values, cancel)

    def raw(x):
        x = at(x)
        subs = {}
        for s in x.free_symbols:
            if s.name in PER_SIDE:
                subs[s] = own.setdefault(s, sympy.Symbol(tag + s.name, integer=True, positive=True))
            elif s in fam.atoms.by_symbol and _deep(fam, s) & mine:  # a division reading this side's sizes
                a = fam.atoms.by_symbol[s]
                if s not in own:
                    own[s] = sympy.Symbol(tag + s.name, integer=True)
                    (atoms if atoms is not None else {})[own[s]] = dataclasses.replace(a, symbol=own[s], num=raw(a.num),
                                                                                    den=raw(a.den))
                subs[s] = own[s]
        return x.xreplace(subs) if subs else x

    def normal(x):
        back = {t: s for s, t in own.items() if s.name in PER_SIDE or s in fam.atoms.by_symbol}
        x = sympy.sympify(x)
        return at(norm(x.xreplace({t: b for t, b in back.items() if t in x.free_symbols})))
    digits = [d.__class__(d.name, raw(d.extent), raw(d.local), raw(d.canonical), raw(d.rank), d.is_rank,
                          d.replica, d.split) for d in v.digits]
    return digits, raw, normal


DIVISIONS = ("/", "//", "%")


def _divided(op: str, n: int, d: int):
    """`n op d` of two ints, as sympy (`/` a rational where it is not whole)."""
    if op not in DIVISIONS:
        raise NotEstablished(f"a division {op!r} is none of /, //, %")
    return divided(op, n, d)


def _int(x, what: str) -> int:
    if not sympy.sympify(x).is_Integer:
        raise NotEstablished(f"{what} is {x}, not a number at this configuration pair")
    return int(x)


def rank_names(fam, v, config: dict) -> set[str]:
    """The runtime names a variant's rank grid reads once `config` is put in: those take
    each of their values in turn (a rank is a number)."""
    digits, _, normal = _instantiate(fam, v, config)
    out = set()
    for d in digits:
        if d.is_rank:
            for x in (d.extent, d.rank):
                out |= _deep(fam, normal(x))
    return out


def _deep(fam, x) -> set[str]:
    names = set()
    for s in sympy.sympify(x).free_symbols:
        if s in fam.atoms.by_symbol:
            a = fam.atoms.by_symbol[s]
            names |= _deep(fam, a.num) | _deep(fam, a.den)
        else:
            names.add(s.name)
    return names


def cases(fam, vx, vy, store: dict, load: dict, cross: Cross | None = None) -> tuple[tuple[SymbolicPlan, ...], ...]:
    """Every consumer rank's plan, reading producers of `vx` at `store` into `vy` at `load`
    (both dicts give every name of the rank grids a number): one tuple of plans, or across
    another cp one for each residue a `Transpose` block is cut by (each plan's `domain` says
    where it is the pair's plan: together the cases cover every size where the digits are
    whole). Across another cp (`cross`), the small side's digits tile the big canonical page
    as its `k` virtual ranks do (`_in_big`), and with small consumers there is a plan for
    each virtual consumer."""
    own: dict = {}
    dx, rx, nx = _instantiate(fam, vx, store, "x.", own)
    dy, ry, ny = _instantiate(fam, vy, load, "y.", own)

    def both(x):  # under both configurations' guards at once (the query assumes both)
        return ny(nx(x))

    def num(x, what):
        return _int(both(x), what)
    if cross is not None:  # the small side's owners as digits of the big page (which canonical bytes are
        small = cross.small == "producer"  # which is read from the big side's layout; Z3 checks the plan)
        args = (vx, dx, rx, vy, ry) if small else (vy, dy, ry, vx, rx)
        moved = _in_big(fam, *args, cross, num(prod(d.extent for d in args[1] if d.is_rank), "a rank grid's world"))
        dx, dy = (moved, dy) if small else (dx, moved)
    # a region of a page: its bytes start at a base of each page; the canonical one is the same
    # on both sides (one canonical format), the local ones shift every source and destination
    elif sympy.expand(both(rx(vx.canonical_base)) - both(ry(vy.canonical_base))) != 0:
        raise NotEstablished(f"the region starts at canonical byte {vx.canonical_base} in one configuration and "
                             f"{vy.canonical_base} in the other: not shown to be one canonical format")
    src_base, dst_base = rx(vx.local_base), ry(vy.local_base)

    wholes = [d.extent for d in dx + dy if not sympy.sympify(d.extent).is_Integer]
    domain: list = []

    def quotient(n, d):  # a positive constant, or a digit's extent (a whole number by its guards)
        q = cancel(both(n) / both(d))
        if q.is_Integer:
            return int(q) if q > 0 else None
        for e in wholes:  # k * e, for a constant k
            k = cancel(q / both(e))
            if k.is_Integer and k > 0:
                return int(k) * e
        if cross is not None:  # across a cp: block_size / 2, a whole number where 2 divides it (the plan's domain)
            a, b = sympy.fraction(q)
            if b.is_Integer and b > 1 and a.free_symbols and a.is_polynomial() and all(c > 0 for c in sympy.Poly(a).coeffs()):
                if (a, b) not in domain:
                    domain.append((a, b))
                return q
        return None
    ox, oy = [d for d in dx if not d.replica], [d for d in dy if not d.replica]  # Digits read as owners
    try:
        cut = refine.pieces(ox, oy, quotient)
    except NotCompact as e:
        raise NotEstablished(f"the two configurations cut the canonical page into pieces that do not nest (one "
                             f"side's pieces straddle the other's), so the plan is no set of strided pieces for all "
                             f"sizes; the per-pair proof at concrete sizes still applies (the digits that do not "
                             f"nest: {e})") from None
    return tuple(_plans(cut, where, ox, oy, dx, dy, rx, ry, num, src_base, dst_base, {**own, **atoms}, cross)
                 for cut, where, atoms in _residues(cut, domain, ox, oy))


def _plans(cut, domain, ox, oy, dx, dy, rx, ry, num, src_base, dst_base, own, cross) -> tuple[SymbolicPlan, ...]:
    """The plans of every consumer rank from one refinement (`cut`, of `Piece`s and `Transpose`
    blocks) of the producers' owners `ox` and the consumers' `oy`."""
    world = prod(num(d.extent, f"consumer rank digit {d.name}'s extent") for d in dy if d.is_rank)
    replicas = [(num(d.extent, "a replica digit's extent"), num(d.rank, "a replica digit's rank stride"))
                for d in dx if d.replica]
    replicas = sorted(((e, r) for e, r in replicas if e != 1), key=lambda x: x[1])  # holders by rank number
    out = []
    ranks = world // cross.k if cross is not None and cross.small == "consumer" else world  # the real consumers
    for s in range(world):
        runs = []
        for r in refine.consumer_runs(cut, ox, oy, replicas, s, lambda x: num(x, "a size the plan's ranks read"),
                                      s % ranks):  # replicas spread by the consumer's own rank, as at run time
            fixed, at = {}, {}
            for k, i in r.src:
                fixed[_index(ox[i])] = fixed.get(_index(ox[i]), 0) + k * rx(_weight(ox[i]))
            for k, j in r.dst:
                at[_index(oy[j])] = at.get(_index(oy[j]), 0) + k * ry(_weight(oy[j]))
            runs.append(SymbolicRun(
                _int(r.producer, "a producer rank"), sympy.expand(src_base + sum(k * ox[i].local for k, i in r.src)),
                sympy.expand(dst_base + sum(k * oy[j].local for k, j in r.dst)),
                tuple((p.extent, p.a[1] * ox[p.a[0]].local, p.b[1] * oy[p.b[0]].local) for p in r.modes),
                _table(at, [(_index(oy[p.b[0]]), p.b[1] * ry(_weight(oy[p.b[0]]))) for p in r.modes]),
                _table(fixed, [(_index(ox[p.a[0]]), p.a[1] * rx(_weight(ox[p.a[0]]))) for p in r.modes])))
        out.append(SymbolicPlan(s, tuple(runs), own, tuple(domain)))
    return tuple(out)


def _residues(cut: list, domain: list, ox: list, oy: list) -> list[tuple[list, tuple, dict]]:
    """(refinement, domain, atoms) of each case: across another cp a piece `n / k` (where `k`
    need not divide `n`) between two pieces `k` that make a `refine.Transpose` block is cut
    into `k * k` pieces per residue of `n` mod `k`, on the domain where `q = (n - rho) / k`
    is whole (`q` an atom of the plan: one term for Z3, never a fraction spread over a sum);
    every other such piece stays, on the domain where `k` divides `n`."""
    fractions = {cancel(a / b): (a, b) for a, b in domain}
    blocks, kept = [], dict(fractions)
    for i in range(1, len(cut) - 1):
        t = _block(cut[i - 1], cut[i], cut[i + 1], fractions, ox, oy)
        if t is not None and (not blocks or blocks[-1][0] < i - 2):
            blocks.append((i - 1, t))
            kept.pop(cut[i].extent, None)
    out = []
    for rhos in itertools.product(*(range(int(t.low.extent)) for _, t in blocks)):
        new, where, atoms = list(cut), list(kept.values()), {}
        for j, ((i, t), rho) in sorted(enumerate(zip(blocks, rhos)), key=lambda x: -x[1][0][0]):
            n, d = sympy.fraction(sympy.together(t.mid.extent - sympy.Rational(rho, int(t.low.extent))))
            q = sympy.Symbol(f"block{j}.q", integer=True, nonnegative=True)  # (a dot: no name of a spec)
            atoms[q] = Atom(q, "/", sympy.expand(n), d)
            new[i:i + 3] = [t._replace(rho=rho, q=q)]
            where.append((sympy.expand(n), d))
        out.append((new, tuple(where), atoms))
    return out


def _block(low, mid, high, fractions: dict, ox: list, oy: list):
    """The `refine.Transpose` block of pieces `low, mid, high` (`k`, `n / k`, `k`: `mid`'s
    extent a fraction the refinement took to be whole), or None: one side's digit runs on
    from `low` into `mid` (its N side, reading `z mod n`), the other's from `mid` into `high`
    (its K side, reading `z // k`), and those two digits are local ones (they step with the
    piece that replaces `mid`; a rank digit cannot)."""
    k = low.extent
    if mid.extent not in fractions or not (sympy.sympify(k).is_Integer and k > 1 and high.extent == k):
        return None

    def same(u, v):
        return sympy.expand(u - v) == 0
    for n_side, k_side, sides in (("a", "b", (ox, oy)), ("b", "a", (oy, ox))):
        (nl, ml), (nm, mm), (kl, km), (kh, mh) = getattr(low, n_side), getattr(mid, n_side), \
            getattr(mid, k_side), getattr(high, k_side)
        if nl == nm and same(mm, k * ml) and kl == kh and same(mh, mid.extent * km) and \
                not sides[0][nl].is_rank and not sides[1][kl].is_rank:
            return refine.Transpose(low, mid, high, n_side == "a", 0, mid.extent)
    return None


def block_ratio(store: dict, load: dict, read: bool, domain=None) -> tuple[int, int]:
    """(k, the side of the larger block: 0 store, 1 load) where the two configurations give
    block sizes k > 1 to one, else (1, 0): pages of B and of k * B tokens are parts of one
    another along the sequence index, as pages of another cp are, for every B (the numbers
    given fix only k; given alike, or on neither side, one block size). `read`: whether the
    family reads block_size (a page no block size shapes is one format at both); `domain`:
    block_size's declared `Param`, which each number given must lie in.

    Examples:
        >>> block_ratio({"block_size": 16}, {"block_size": 64}, True)
        (4, 1)
        >>> block_ratio({"block_size": 48}, {"block_size": 16}, True)
        (3, 0)
    """
    given = [c.get("block_size") for c in (store, load)]
    for side, v in zip(("store", "load"), given):
        if v is not None and (type(v) is not int or v < 1):
            raise LayoutalgError(f"the {side} configuration's block_size is {v!r}, not a whole number of at least 1")
        why = None if v is None or domain is None else params.outside("block_size", v, domain.lo, domain.hi)
        if why:
            raise LayoutalgError(f"the {side} configuration's {why}")
    if given[0] == given[1]:
        return 1, 0
    if None in given:
        raise LayoutalgError(f"block_size is given for the {'store' if given[0] else 'load'} configuration only: "
                             f"give both sides' block sizes (their ratio is what is proved)")
    small, big = sorted(given)
    if not read:  # (a page no block size shapes: one format at both)
        return 1, 0
    if big % small:
        raise LayoutalgError(f"block sizes {given[0]} and {given[1]}: neither is a whole multiple of the other, so "
                             f"neither side's pages are parts of the other's")
    return big // small, given.index(big)


def cross_of(fam, vx, vy, store: dict, load: dict, token: str | None) -> Cross | None:
    """The pair as pages of another cp, where the two canonical pages' `token` extents are
    `k` to one (`k` > 1), else None (pages of one format, or of no such pair)."""
    ex, ey = (dict(zip(v.canonical.indices, v.canonical.extents)).get(token) for v in (vx, vy))
    if token is None or ex is None or ey is None:
        return None
    _, rx, nx = _instantiate(fam, vx, store, "x.")
    _, ry, ny = _instantiate(fam, vy, load, "y.")
    q = cancel(ny(nx(ry(ey))) / ny(nx(rx(ex))))
    for ratio, small in ((q, "producer"), (1 / q, "consumer")):
        if ratio.is_Integer and ratio > 1:
            return Cross(token, int(ratio), small)
    return None


def _in_big(fam, v, digits, raw, big, raw_big, cross: Cross, world: int) -> list:
    """The small side's digits (`v`'s, instantiated: `digits`, `raw`) as digits of the big
    canonical page (`big`'s layout): each digit's canonical stride is where its step moves
    the canonical index in the big page, and a rank digit `part` (extent `k`, rank stride
    `world`) steps the token by a small page's tokens. A construction only: what the plan
    reads is checked against both readings of the spec."""
    e = raw(v.local.element)
    coef = {i: raw_big(c) for i, c in zip(big.canonical.indices, big.canonical.coefficients)}
    if set(coef) != set(v.canonical.indices) or cross.token not in coef:
        raise NotEstablished(f"the canonical pages index ({', '.join(v.canonical.indices)}) and "
                             f"({', '.join(big.canonical.indices)}): not one layout of another cp along "
                             f"'{cross.token}'")

    def stride(sp):
        return sympy.expand(e * sum(coef[t.index] * raw(dict(t.sum.terms).get(sp, 0)) for t in v.targets))
    out = [d if d.split is None else dataclasses.replace(d, canonical=stride(d.split)) for d in digits]
    tokens = raw(dict(zip(v.canonical.indices, v.canonical.extents))[cross.token])
    return out + [dataclasses.replace(out[0], name="part", extent=sympy.Integer(cross.k), local=sympy.Integer(0),
                                      canonical=sympy.expand(e * coef[cross.token] * tokens),
                                      rank=sympy.Integer(world), is_rank=True, replica=False, split=None)]


def _index(d) -> str:
    return d.split.source if d.split is not None else ""


def _weight(d):
    return d.split.lower if d.split is not None else 1


def _table(base: dict, per_mode: list) -> tuple:
    """(index, its value where every mode's coordinate is 0, its coefficient per mode)."""
    names = sorted(set(base) | {i for i, _ in per_mode})
    return tuple((i, sympy.expand(base.get(i, 0)), tuple(w if j == i else 0 for j, w in per_mode)) for i in names)


def evaluate(fam, plan: SymbolicPlan, x, store: dict, load: dict) -> int:
    """A size of `plan` at the store and load sizes (each a full dict of runtime names)."""
    atoms = {**fam.atoms.by_symbol, **plan.atoms}

    def ev(e):
        e = sympy.sympify(e)
        subs = {}
        for s in e.free_symbols:
            if s in atoms:
                a = atoms[s]
                subs[s] = _divided(a.op, ev(a.num), ev(a.den))
            elif s.name.startswith(("x.", "y.")):
                subs[s] = (store if s.name[0] == "x" else load)[s.name[2:]]
            else:
                subs[s] = store[s.name]
        v = sympy.sympify(e.xreplace(subs) if subs else e)
        if not v.is_Integer:
            raise NotEstablished(f"{x} is {v} at these sizes, not a whole number")
        return int(v)
    return ev(x)


def triples(fam, plan: SymbolicPlan, store: dict, load: dict) -> set[tuple[int, int, int]]:
    """The plan at the given sizes as (producer, src byte, dst byte) of every byte it copies."""
    out = set()
    for r in plan.runs:
        modes = [(evaluate(fam, plan, e, store, load), evaluate(fam, plan, a, store, load),
                  evaluate(fam, plan, b, store, load)) for e, a, b in r.modes]
        src, dst = evaluate(fam, plan, r.src, store, load), evaluate(fam, plan, r.dst, store, load)
        for cs in itertools.product(*(range(e) for e, _, _ in modes)):
            out.add((r.producer, src + sum(c * a for c, (_, a, _) in zip(cs, modes)),
                     dst + sum(c * b for c, (_, _, b) in zip(cs, modes))))
    return out


def plans_at(lib: Library, family: str, store: dict, load: dict) -> tuple[SymbolicPlan, ...]:
    """The plans for the case each side takes at these sizes (full dicts of runtime names),
    built with only the configuration and the rank grids' names as numbers, of the residue
    case (`cases`) these sizes lie in: `triples` of them at these sizes are what the proof
    covers there."""
    fam = resolve(lib, family)
    order = paths(lib, family)
    kx, ky = (order.index(tuple(Reading(lib, family, s).taken)) for s in (store, load))
    vx, vy = fam.variants[kx], fam.variants[ky]
    cx, cy = ({n: s[n] for n in CONFIG_NAMES if n in s} for s in (store, load))
    from ..obligations import family_names  # (what the proof asks: `all_sizes._sizes`)
    k, big = block_ratio(store, load, "block_size" in family_names(lib, family))
    if k > 1:  # as the proof takes them: B symbolic, the larger side's k * B
        (cx, cy)[big]["block_size"] = k * sympy.Symbol("block_size", integer=True)
        store, load = at_smaller_block(store, load)
    nx, ny = rank_names(fam, vx, cx), rank_names(fam, vy, cy)
    shared = {n for n in nx | ny if n not in PER_SIDE}  # as the proof takes them: one value on both sides
    seq = lib.family_def(family).sequence
    cross = cross_of(fam, vx, vy, cx, cy, seq.id if seq is not None else None)
    for plans in cases(fam, vx, vy, cx | {n: store[n] for n in nx | shared}, cy | {n: load[n] for n in ny | shared},
                       cross):
        # the case's domain is every plan's (as the proof takes it)
        if all(evaluate(fam, p, a, store, load) % int(b) == 0 for p in plans for a, b in p.domain):
            return plans
    raise NotEstablished("these sizes lie outside the domain of every plan built for all sizes (where its pieces "
                         "divide): the runtime's plan is proved per pair there")


def at_smaller_block(store: dict, load: dict) -> tuple[dict, dict]:
    """Both sides' sizes with the smaller of their block sizes, B: a plan across two block
    sizes reads B, the larger side's k * B written out (`block_ratio`)."""
    if store.get("block_size") == load.get("block_size"):
        return store, load
    b = min(store["block_size"], load["block_size"])
    return {**store, "block_size": b}, {**load, "block_size": b}


def triples_at(lib: Library, family: str, store: dict, load: dict) -> list[set[tuple[int, int, int]]]:
    """Consumer rank by rank, the bytes of the plans proved for all sizes (`plans_at`), at
    these sizes: of every region of a page together. What the runtime's plans must be."""
    said = {n: p.default for n, p in lib.vocabulary().items() if p.default is not None}  # what a layer that says
    store, load = {**said, **store}, {**said, **load}                                     # nothing gets
    at = at_smaller_block(store, load)  # what the plans read (`plans_at`)
    out: list[set] = []
    for part in lib.parts_of(family):
        fam = resolve(lib, part)
        for s, plan in enumerate(plans_at(lib, part, store, load)):
            if s == len(out):
                out.append(set())
            out[s] |= triples(fam, plan, *at)
    return out

"""The engine's name of every byte of a rank's page: an oracle that does not trust the spec under test.

A byte is an element of the engine's KV (a head's channel of a token, a scale, a state
entry). The engine names it by the local layout's index names, each a global index: a
local head `h` is the engine's head `head(h)`, a local token `t` the token `token(t)` of
the canonical page, as the grid's placements say (the engine's word, trusted). Nothing
else of the spec is read: not the canonical layout, not the shard map's arithmetic. A
page stored under one configuration and loaded under another is then checked element by
element: a family whose canonical page means one thing under one configuration and
another thing under the other fails, though each configuration tiles.

Where a placement reads an expression of the index (AITER's `head(c // head_size)`: a head's
channels side by side in one index), the element is also the index's ordinal among the
values that expression groups together (the channel within its head), never the shard
map's own arithmetic for it. A shard target that is neither an index, a grid placement of
an index, nor arithmetic of the rank's digits names its indices as the local layout does (`d` is channel `d`, however
the shard map moves it). Arithmetic of the rank's digits written in the shard map itself
(`tp_rank * heads + h`, no placement) is where the engine's element cannot be told
without the spec: it is taken from the spec and reported (`Naming.trusted`).
"""
from __future__ import annotations

import hashlib
import itertools
from typing import NamedTuple

from ..dsl.interpret import LETS_MEMO, Reading, Lazy, index_box, rank_digits
from ..dsl.tree import BinOp, Call, Name, Neg, Num
from ..verdicts import Check, Reason

NO_TOKEN = -1


class Naming(NamedTuple):
    """Per local byte of one rank's page: `element`, an id of the engine element and byte within
    it (-1: a pad byte, never copied); `token`, its token in the canonical page (-1: no
    sequence index); `tokens`, the tokens of a canonical page; `trusted`, what was taken from
    the spec (`region.index: why`)."""
    element: list
    token: list
    tokens: int
    trusted: tuple


def _names(e) -> set:
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, BinOp):
        return _names(e.left) | _names(e.right)
    if isinstance(e, Neg):
        return _names(e.arg)
    if isinstance(e, Call):
        return set().union(*(_names(a) for a in e.args)) if e.args else set()
    return set()


def _calls(e) -> set:
    if isinstance(e, Call):
        return {e.fn}.union(*(_calls(a) for a in e.args))
    if isinstance(e, BinOp):
        return _calls(e.left) | _calls(e.right)
    if isinstance(e, Neg):
        return _calls(e.arg)
    return set()


def _reads_rank(r: Reading, e, digits: set, seen=None) -> bool:
    """Whether `e` reads a rank digit (or `rank`), through the lets it reads."""
    seen = set() if seen is None else seen
    for call in _calls(e):  # a fn's body reads what it reads (a placement's is the grid's word: not asked)
        fn = r.fns.get(call)
        if fn is not None and ("fn", call) not in seen and not _placement(r, call):
            seen.add(("fn", call))
            if _reads_rank(r, fn.body, digits - set(fn.params), seen):
                return True
    for n in _names(e):
        if n in digits or n == "rank":
            return True
        v = r.env.get(n)
        if isinstance(v, Lazy) and n not in seen:
            seen.add(n)
            if _reads_rank(r, v.e, digits, seen):
                return True
    return False


def _roles(r: Reading, local: list) -> tuple[dict, list]:
    """How each local index is named: ("index",), ("placed", target) or ("spec", target, canonical
    index name); and what is taken from the spec."""
    canon, _ = r.layout("canonical")
    digits = {n for n, _ in r.ranks}
    renamed = {s.id: local[k] for k, s in enumerate(r.fdef.shard.sources)}
    roles, trusted = {n: ("index",) for n in local}, []
    for cname, t in zip((d.name for d in canon.indices), r.fdef.shard.targets):
        uses = [renamed.get(n, n) for n in _names(t) if renamed.get(n, n) in local]
        if isinstance(t, Name) or len(uses) != 1:
            continue
        (i,) = uses
        if isinstance(t, Call) and _placement(r, t.fn) and len(_names(t) & set(renamed)) == 1:
            roles[i] = ("placed", t)
        elif _reads_rank(r, t, digits):
            roles[i] = ("spec", t, cname)
            trusted.append(f"{r.family}.{i}: the shard map places it by the rank's digits, not by a grid placement")
    return roles, trusted


def _placement(r: Reading, fn: str) -> bool:
    """Whether `fn` is a placement of the grid (`Reading.placements`): the engine's word on where an
    element lives. A fn of the library or the family is the spec's own arithmetic."""
    return fn in r.placements


def trusted(lib, family: str, sizes: dict) -> tuple:
    """What naming a byte of `family` takes from the spec at `sizes` (`Naming.trusted`), without
    naming any byte."""
    out = []
    for part in lib.parts_of(family):
        r = Reading(lib, part, dict(sizes))
        out += _roles(r, list(r.extents("local")))[1]
    return tuple(dict.fromkeys(out))


def element_terms(r: Reading, index: dict, digits: dict) -> dict:
    """The engine element local `index` holds on the rank with these digit values, in `r`'s own
    arithmetic (ints or Z3 terms): each local index name -> its coordinates, as `naming` names
    it (the index; a placement's value and the index's ordinal among the values the placement's
    argument groups; a spec target's value under '=' and its canonical index). The ordinal has a
    closed form where the argument is the index (0) or the index floor-divided by a size (the
    remainder); elsewhere `LookupError` says so.
    """
    local = list(r.extents("local"))
    roles, _ = _roles(r, local)
    seq = r.fdef.sequence.id if r.fdef.sequence is not None else None
    rank = 0
    for n, ext in r.rank_extents():
        rank = r.ops.add(r.ops.mul(rank, ext), digits[n])
    env = {**r.env, **digits, **index, LETS_MEMO: {}, "rank": rank}
    out = {}
    for n in local:
        role = roles[n]
        if role[0] == "index":
            out[n] = (index[n],)
        elif role[0] == "spec":
            out["=" + role[2]] = (r.expr(role[1], env),)
        elif n == seq:
            out[n] = (r.expr(role[1], env),)
        else:
            out[n] = (r.expr(role[1], env), _ordinal(r, role[1], n, index, env))
    return out


def _injective(e, n: str) -> bool:
    """Whether `e` is `n`, or `n` plus, minus or times (by a positive size or number) an expression
    that does not read `n`: one value of `e` for each value of `n`, so each is its own group."""
    if isinstance(e, Name):
        return e.id == n
    if isinstance(e, BinOp) and e.op in ("+", "-", "*"):
        for a, b in ((e.left, e.right), (e.right, e.left)):
            positive = e.op != "*" or isinstance(b, Num) and int(b.value) > 0
            if n not in _names(b) and positive and _injective(a, n):
                return True
    return False


def _ordinal(r: Reading, placed, n: str, index: dict, env: dict):
    """Index `n`'s ordinal among the values the argument of `placed` (a placement call) groups."""
    arg = next(a for a in placed.args if n in _names(a))
    if _injective(arg, n):
        return 0
    if isinstance(arg, BinOp) and arg.op == "//" and arg.left == Name(n, arg.span) and n not in _names(arg.right):
        return r.ops.mod(index[n], r.expr(arg.right, env))
    raise LookupError(f"the placement {placed.fn}(...) reads index '{n}' through an expression other than "
                      f"'{n}' or '{n} // size': its element within the placed value has no closed form")


def _key(*parts) -> int:
    """A 40-bit id of an element (its bytes are `_key(...) << 12 | byte`)."""
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=5).digest(), "little")


def naming(lib, family: str, sizes: dict, rank: int, page_bytes: int, raw: bool = False) -> Naming:
    """Each local byte's engine element on `rank` (ints only), every data region of a page. With
    `raw`, each element is (region, its named indices, byte) rather than an id: a name another
    family's naming can be compared with (the region by its own name, not the family's)."""
    element, token = [-1] * page_bytes, [NO_TOKEN] * page_bytes
    trusted, tokens = [], 0
    for part in lib.parts_of(family):
        r = Reading(lib, part, dict(sizes))
        ldef, bound = r.layout("local")
        ext = r.extents("local")
        local = list(ext)
        elem = r.element(ldef, bound)
        roles, why = _roles(r, local)
        trusted += why
        seq = r.fdef.sequence.id if r.fdef.sequence is not None else None
        if seq is not None:
            tokens = r.extents("canonical")[seq]
        digits = rank_digits(r.rank_extents(), rank)
        values_of = {}  # a placement reads one index: its value for each value of that index, once
        for n in local:
            role = roles[n]
            if role[0] == "index":
                values_of[n] = list(range(ext[n]))
                continue

            def at(e, v):
                return r.expr(e, {**r.env, **digits, n: v, LETS_MEMO: {}, "rank": rank})
            values_of[n] = [at(role[1], v) for v in range(ext[n])]
            if role[0] == "placed" and n != seq:  # the element within what is placed: its ordinal among the
                arg = next(a for a in role[1].args if n in _names(a))  # values the placement's argument
                seen: dict = {}                                          # groups (aiter's c // head_size)
                for v in range(ext[n]):
                    group = at(arg, v)
                    values_of[n][v] = (values_of[n][v], seen.setdefault(group, [0])[0])
                    seen[group][0] += 1
        names = [n if roles[n][0] != "spec" else "=" + roles[n][2] for n in local]
        # the local layout is strided (`prove`'s digits-match-spec holds the runtime's digit table to
        # its offsets for all sizes): each index's stride read once, not the offset at every element
        zero = {n: 0 for n in local}
        base = r.offset("local", zero)
        strides = [r.offset("local", {**zero, n: 1}) - base if ext[n] > 1 else 0 for n in local]
        for values in itertools.product(*(range(ext[n]) for n in local)):
            index = dict(zip(local, values))
            named = tuple((names[k], values_of[n][v]) for k, (n, v) in enumerate(index.items()) if n != seq)
            tok = values_of[seq][index[seq]] if seq is not None else NO_TOKEN
            at = base + sum(k * v for k, v in zip(strides, values))
            if raw:
                region = part.rsplit(".", 1)[-1] if part != family else ""
                element[at:at + elem] = [(region, tuple(sorted(named)), b) for b in range(elem)]  # (index order aside)
            else:
                key = _key(part, named) << 12
                element[at:at + elem] = range(key, key + elem)
            token[at:at + elem] = [tok] * elem
    return Naming(element, token, tokens, tuple(dict.fromkeys(trusted)))


MAX_CHECKED = 1 << 22
"""Canonical bytes a page may have for `meaning` to read it by enumeration."""


def meaning(lib, family: str, sizes: dict) -> tuple[list, list]:
    """What each byte of the canonical page holds at `sizes`: (the engine element, its token in the
    page, -1 where none), from every rank's local bytes by the engine's naming (`naming`), placed
    where the family's runs send them (-1, -1: a byte no rank writes, a pad). Raises `LookupError`
    or `GuardFailed` where the family does not apply, `ValueError` where the page is too large."""
    from ..compile.codegen import compile_named
    from ..runtime.lower import lower
    compiled = lib.__dict__.setdefault("_oracle_compiled", {})  # one compile a library (check asks at each pair)
    cf = compiled[family] if family in compiled else compiled.setdefault(family, compile_named(lib, family))
    mappings = lower(cf.evaluate(dict(sizes), bounded=False), cf.layout_id)  # the runs `prove` holds to the spec
    page = mappings[0].canonical_page_size_bytes
    if page > MAX_CHECKED:
        raise ValueError(f"the canonical page has {page} bytes, more than the {MAX_CHECKED} read byte by byte")
    element, token = [-1] * page, [NO_TOKEN] * page
    for rank, m in enumerate(mappings):
        n = naming(lib, family, sizes, rank, m.local_page_size_bytes)
        for run in m.runs:
            for lo, co, size in run.triples():
                element[co:co + size], token[co:co + size] = n.element[lo:lo + size], n.token[lo:lo + size]
    return element, token


def unkept(lib, family: str, big: dict, small: dict, conv) -> Reason | None:
    """None where the conversion `conv` (`PageConversion`) gives every engine element of a
    big page back in its small pages, at these sizes; else the first byte it does not, said."""
    eb, tb = meaning(lib, family, big)
    es, ts = meaning(lib, family, small)
    tokens = None
    for p in lib.parts_of(family):
        r = Reading(lib, p, dict(small))
        if r.fdef.sequence is not None:
            tokens = r.extents("canonical")[r.fdef.sequence.id]
    compared = 0
    for r in conv.mapping.runs:  # the big page is the mapping's local page, the k small ones its canonical
        for at_big, at_small, size in r.triples():
            for b in range(size):
                x, compared = at_big + b, compared + (eb[at_big + b] >= 0)
                j, c = divmod(at_small + b, conv.small_page)  # part j of the big page, its byte c
                small_tok = ts[c] + j * tokens if ts[c] >= 0 and tokens else ts[c]
                if (es[c], small_tok) != (eb[x], tb[x]):
                    return Reason(Check.FORMAT, f"byte {x} of the big page (token {tb[x]}) is byte {c} of small page "
                                  f"{j}, which holds another element of the engine's (token {small_tok}): the "
                                  f"canonical index names one element at {_shown(big)} and another at {_shown(small)}",
                                  family=family)
    return None if compared else Reason(Check.FORMAT, "the conversion moves no byte an engine element is written to: "
                                        "nothing is shown kept", family=family)


def _shown(sizes: dict) -> str:
    return ", ".join(f"{k}={sizes[k]}" for k in ("tp", "pcp", "dcp", "interleave") if k in sizes)


def unkept_between(lib, family: str, big: dict, small: dict) -> Reason | None:
    """None where a big page at `big` sizes holds, at each canonical index, the engine element the
    small pages at `small` sizes hold at that index (the sequence index split into a part and a
    token of the part, as a conversion joins them), else the first that differs, said. No
    conversion is made: the canonical layouts are read as the spec writes them."""
    seq = lib.family_def(family).sequence
    eb, tb = meaning(lib, family, big)
    es, ts = meaning(lib, family, small)
    tokens = next(Reading(lib, p, dict(small)).extents("canonical")[seq.id] for p in lib.parts_of(family))
    k = next(Reading(lib, p, dict(big)).extents("canonical")[seq.id] for p in lib.parts_of(family)) // tokens
    table = spec_coordinates(lib, family, big, small, k, seq.id).tolist()
    compared = 0
    for j in range(k):
        for c, x in enumerate(table[j]):
            if x < 0 or eb[x] < 0:
                continue
            compared += 1
            small_tok = ts[c] + j * tokens if ts[c] >= 0 else ts[c]
            if (es[c], small_tok) != (eb[x], tb[x]):
                return Reason(Check.FORMAT, f"canonical byte {x} of a page at {_shown(big)} (token {tb[x]}) holds "
                              f"another element of the engine's than byte {c} of its part {j} at {_shown(small)} "
                              f"(token {small_tok}): a canonical index names one element under one and another "
                              f"under the other", family=family)
    return None if compared else Reason(Check.FORMAT, "no byte of the two pages holds an element to compare",
                                        family=family)


def spec_coordinates(lib, family: str, big: dict, small: dict, k: int, token: str):
    """(k, small page) int64: the big page byte that byte `c` of part `j` of a big page holds,
    by enumerating the spec's own reading of both canonical layouts, region by region for a
    page of regions (-1: a pad byte). No conversion run is used: this is what a conversion
    is checked against."""
    import torch
    from ..dsl.interpret import Reading
    out = None
    for part in lib.parts_of(family):
        rb, rs = Reading(lib, part, dict(big)), Reading(lib, part, dict(small))
        ext = rs.extents("canonical")
        ldef, bound = rs.layout("canonical")
        e = rs.element(ldef, bound)
        if out is None:
            out = torch.full((k, rs.page("canonical")), -1, dtype=torch.int64)
        for idx in index_box(ext):
            at = rs.offset("canonical", idx)
            for j in range(k):
                there = rb.offset("canonical", {**idx, token: idx[token] + j * ext[token]})
                out[j, at:at + e] = torch.arange(there, there + e)
    return out

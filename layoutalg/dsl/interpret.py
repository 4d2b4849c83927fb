"""A direct reading of a family's syntax tree: the independent oracle.

`Reading` evaluates a family straight from the spec text, with no normal form, no
digits and no algebra: a local index and a rank go in, the canonical byte comes out,
with `//` and `%` taken literally. The arithmetic is pluggable (`Ops`): Python ints
for enumeration checks, Z3 terms for proofs. Lowering bugs cannot hide from it
because it shares no code with `itersum`, `family`, `algebra` or `lower`.
"""
from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

from .library import Library
from .tree import (Agnostic, BoolOp, Call, Compare, Fn, LayoutDef, Let, Name, Neg, Not, Num, Ranks, Replica,
                   Require, World, grouped)
from ..verdicts import Check, Reason


class Ops:
    """Integer arithmetic for `Reading` (Python ints); `/` must divide exactly."""

    add, sub, mul = operator.add, operator.sub, operator.mul
    cmp = {"==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge,
           "<": operator.lt, ">": operator.gt}

    def floordiv(self, a, b):
        return a // _positive(a, "//", b)

    def mod(self, a, b):
        return a % _positive(a, "%", b)

    def exact(self, a, b):
        if a % _positive(a, "/", b):
            raise ArithmeticError(f"{a} / {b} is not exact")
        return a // b

    def and_(self, xs):
        return all(xs)

    def or_(self, xs):
        return any(xs)

    def not_(self, x):
        return not x


def _positive(a, op: str, b):
    """Divisors are positive in a spec's meaning (the runtime fails closed otherwise)."""
    if b <= 0:
        raise ArithmeticError(f"{a} {op} {b}: the divisor is not positive")
    return b


@dataclass
class Reading:
    """A family at one path through its grid's cases, over some arithmetic."""

    lib: Library
    family: str
    sizes: dict
    ops: Ops = field(default_factory=Ops)
    path: tuple = ()  # which case of each case group (None: choose by evaluating, ints only)
    env: dict = field(default_factory=dict)
    fns: dict = field(default_factory=dict)
    cases: list = field(default_factory=list)   # (condition value, text) taken
    guards: list = field(default_factory=list)  # (condition value, text)
    ranks: list = field(default_factory=list)   # (name, extent)
    replicas: tuple = ()
    world: object = None
    agnostic: object = False
    taken: list = field(default_factory=list)  # the case chosen in each group, in order
    placements: frozenset = frozenset()  # the fns the grid (and the rules it uses) defines, the family not again

    def __post_init__(self):
        if self.path or not all(type(v) is int for v in self.sizes.values()):
            self._read()
            return
        # ints and no path: the first path whose every case holds, as the compiled code
        # tries its cases in order (a case whose nested cases all fail falls through). The
        # first case that holds in each group, in order, is that path wherever it reads
        # through: any path before it takes a case whose condition was just seen false. Where
        # it does not (a nested group with no case that holds, a reading that fails), every
        # path is read in order.
        try:
            self._read()  # (`_run` picks each group's first case that holds)
            self.path = tuple(self.taken)
            return
        except (ArithmeticError, LookupError):
            pass
        for path in paths(self.lib, self.family):
            self.path, self.cases, self.guards, self.ranks, self.taken = path, [], [], [], []
            self.replicas, self.world, self.agnostic = (), None, False
            try:
                self._read()
            except (ArithmeticError, LookupError):
                continue
            if all(ok for ok, _ in self.cases):
                return
        raise LookupError("no case holds")

    def _read(self):
        self._layouts = {}  # role -> (definition, bound parameters): the terms are this reading's alone
        self.env = dict(self.sizes)
        for name, p in self.lib.vocabulary().items():  # what a layer that says nothing gets
            if name not in self.env and p.default is not None:
                self.env[name] = p.default
        self.fns = dict(self.lib.fns)
        for let in self.lib.lets.values():
            self.env[let.name] = Lazy(let.value)  # evaluated where used: an unused one cannot fail
        fdef = self.lib.family_def(self.family)
        self.fdef = fdef
        self._path = list(self.path)
        self._run(self.lib.grids[fdef.grid.id].body)
        grid = {n: f for n, f in self.fns.items() if self.lib.fns.get(n) is not f}
        self._run(fdef.body)
        self.placements = frozenset(n for n, f in grid.items() if self.fns.get(n) is f)  # (not the family's own)

    # -- statements
    def _run(self, stmts):
        for item in grouped(stmts):
            if not isinstance(item, list):
                self._step(item)
                continue
            pick = self._path.pop(0) if self._path else None
            if pick is None:
                pick = next((k for k, c in enumerate(item) if self.cond(c.cond)), None)
                if pick is None:
                    raise LookupError("no case holds")
            case = item[pick]
            self.taken.append(pick)
            self.cases.append((self.cond(case.cond), case.span))
            self._run(case.body)

    def _step(self, s):
        if isinstance(s, Let):
            self.env[s.name] = Lazy(s.value)
            self.env.pop(LETS_MEMO, None)  # a new let may shadow one evaluated before
        elif isinstance(s, Require):
            self.guards.append((self.cond(s.cond), s.span))
        elif isinstance(s, Fn):
            self.fns[s.name] = s
            self.env.pop(LETS_MEMO, None)  # a let read after it reads this fn (as a path read alone would)
        elif isinstance(s, World):
            self.world = self.expr(s.size)
        elif isinstance(s, Ranks):
            self.ranks = [(d.name, d.extent) for d in s.digits]
        elif isinstance(s, Replica):
            self.replicas += tuple(n for n in dict.fromkeys(s.names) if n not in self.replicas)
        elif isinstance(s, Agnostic):
            self.agnostic = self.cond(s.cond)

    # -- expressions
    def expr(self, e, env=None):
        env = self.env if env is None else env
        o = self.ops
        kind = type(e)  # (the tree's node classes are final: a type test is an isinstance test)
        if kind is Name:
            v = env[e.id]
            if isinstance(v, Lazy):
                # once per environment: a chain of lets that each use the previous one twice
                # would otherwise take time exponential in its length; a let reads the names
                # where it is written, never the parameters of a fn it is read inside
                outer = env.get(_OUTER, env)
                memo = outer.setdefault(LETS_MEMO, {})
                if e.id not in memo:
                    memo[e.id] = self.expr(v.e, outer)
                v = memo[e.id]
            return v
        if kind is Num:
            return int(e.value)
        if kind is Neg:
            return o.sub(0, self.expr(e.arg, env))
        if kind is Call:  # by value: the arguments here, the body with its parameters bound to them
            fn = self.fns.get(e.fn)
            if fn is None or len(fn.params) != len(e.args):
                raise LookupError(f"'{e.fn}' is no fn of {len(e.args)} argument(s) here")
            args = [self.expr(a, env) for a in e.args]
            return self.expr(fn.body, {**env, **dict(zip(fn.params, args)), _OUTER: env.get(_OUTER, env)})
        a, b = self.expr(e.left, env), self.expr(e.right, env)
        return getattr(o, _BINARY[e.op])(a, b)

    def cond(self, c, env=None):
        o = self.ops
        if isinstance(c, Compare):
            return o.cmp[c.op](self.expr(c.left, env), self.expr(c.right, env))
        if isinstance(c, BoolOp):
            parts = [self.cond(x, env) for x in c.args]
            return o.and_(parts) if c.op == "and" else o.or_(parts)
        if isinstance(c, Not):
            return o.not_(self.cond(c.arg, env))
        raise TypeError(c)

    # -- the family's maps
    def layout(self, role: str):
        """(definition, bound parameters) of the local or canonical layout: read once (every
        offset and shard reads it; the parameters are the reading's sizes' alone)."""
        held = self._layouts.get(role)
        if held is None:
            use = getattr(self.fdef, role)
            ldef: LayoutDef = self.lib.layouts[use.call.fn]
            held = self._layouts[role] = (ldef, {p: self.expr(a) for p, a in zip(ldef.params, use.call.args)})
        return held[0], dict(held[1])

    def element(self, ldef, bound):
        """Bytes of one element of layout `ldef` with its parameters `bound` (1 where it says none)."""
        return self.expr(ldef.element, bound) if ldef.element is not None else 1

    def extents(self, role: str) -> dict:
        ldef, bound = self.layout(role)
        return {d.name: self.expr(d.extent, bound) for d in ldef.indices}

    def offset(self, role: str, index: dict):
        """Byte offset of `index` (name -> value) in the local or canonical layout."""
        ldef, bound = self.layout(role)
        elem = self.element(ldef, bound)
        return self.ops.mul(elem, self.expr(ldef.offset, {**bound, **index}))

    def page(self, role: str):
        """Bytes of the local or canonical page: of the layout, or of every region (pads too)
        of the page the layout is a region of."""
        if self.fdef.page is None:
            return self.bytes_of(*self.layout(role))
        out = 0
        for name in self.regions(role):
            out = self.ops.add(out, self.bytes_of(*self.region(role, name)))
        return out

    def bytes_of(self, ldef, bound):
        elem = self.element(ldef, bound)
        out = elem
        for d in ldef.indices:
            out = self.ops.mul(out, self.expr(d.extent, bound))
        return out

    # -- the regions of a page (a part of a family of pages)
    def regions(self, role: str) -> tuple[str, ...]:
        """The region layouts (`page.region`) of the local or canonical page, pads included."""
        return self.lib.pages[self.fdef.page[0 if role == "local" else 1]]

    def region(self, role: str, name: str):
        """(definition, bound parameters) of region layout `name` of the role's page."""
        use = getattr(self.fdef, role)
        ldef: LayoutDef = self.lib.layouts[name]
        return ldef, {p: self.expr(a) for p, a in zip(ldef.params, use.call.args)}

    def rank_extents(self) -> list:
        return [(n, self.expr(e)) for n, e in self.ranks]

    def sequence_place(self, index: dict, rank_digits: dict):
        """Where the grid says local token `index[seq]` of this rank lies in the sequence of a
        canonical page (`token(t)`, the grid's sequence function), for a family that claims
        `sequence seq`. Raises `LookupError` naming what is missing."""
        seq = self.fdef.sequence
        if "token" not in self.fns:
            raise LookupError(f"'sequence {seq.id}' claims the token order, but the grid defines no fn token(t) "
                              f"(a token's place in the sequence) to check it against")
        if seq.id not in index:
            raise LookupError(f"'sequence {seq.id}': the local layout has no index '{seq.id}' (the local token)")
        env = {**self.env, **rank_digits, **index, LETS_MEMO: {}}
        return self.expr(Call("token", (Name(seq.id, seq.span),), seq.span), env)

    def token_shards(self):
        """The grid's count of token shards, its `cp` (1 where it names none): a canonical page
        holds block_size * cp tokens."""
        try:
            return self.expr(Name("cp", self.fdef.sequence.span if self.fdef.sequence else self.fdef.span))
        except LookupError:
            return 1

    def shard(self, index: dict, rank_digits: dict) -> dict:
        """Canonical index of local `index` on the rank with these digit values."""
        env = {**self.env, **rank_digits, **index, LETS_MEMO: {}}  # lets here may use the index
        canon, _ = self.layout("canonical")
        rank = 0
        for n, ext in self.rank_extents():
            rank = self.ops.add(self.ops.mul(rank, ext), rank_digits[n])
        env["rank"] = rank
        return {d.name: self.expr(t, env) for d, t in zip(canon.indices, self.fdef.shard.targets)}


_BINARY = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod", "/": "exact"}
"""An operator of the tree, as the name of the `Ops` method that reads it."""


@dataclass
class Lazy:
    e: object


LETS_MEMO = "#lets"
_OUTER = "#outer"  # inside a fn body: the environment its lets are read in
"""The key of an environment's evaluated lets (not a name a spec can write)."""


def paths(lib: Library, family: str) -> list[tuple]:
    """Every path through the case groups of a family (grid, then family)."""
    fdef = lib.family_def(family)

    def walk(stmts) -> list[tuple]:
        # case bodies may nest groups; enumerate depth-first in execution order
        result = [()]
        for g in grouped(stmts):
            if isinstance(g, list):
                result = [r + (k,) + sub for r in result for k, c in enumerate(g) for sub in walk(c.body)]
        return result

    return [a + b for a in walk(lib.grids[fdef.grid.id].body) for b in walk(fdef.body)]


def index_box(extents: dict):
    """Every index of a box, `{name: value}`, the last name fastest (ints only).

    Examples:
        >>> list(index_box({"kv": 2, "d": 2}))
        [{'kv': 0, 'd': 0}, {'kv': 0, 'd': 1}, {'kv': 1, 'd': 0}, {'kv': 1, 'd': 1}]
    """
    names = list(extents)
    for values in itertools.product(*(range(extents[n]) for n in names)):
        yield dict(zip(names, values))


def rank_digits(rext: list, rank: int) -> dict[str, int]:
    """The digits of `rank` in the grid's mixed radix, `rext` = [(digit, extent), ...], the
    first digit most significant.

    Examples:
        >>> rank_digits([("pcp_rank", 2), ("tp_rank", 4)], 6)
        {'tp_rank': 2, 'pcp_rank': 1}
    """
    digits, rest = {}, rank
    for n, ext in reversed(rext):
        digits[n], rest = rest % ext, rest // ext
    return digits


def misplaced_token(r: Reading, rank: int) -> Reason | None:
    """None where every local token of `rank` lands at its place in the sequence (canonical
    index `seq` equal to the grid's `token(t)`, for a family that says `sequence seq`), else
    the first that does not, said (ints only; a `LookupError` where the claim cannot be read)."""
    seq = r.fdef.sequence
    if seq is None or r.layout("local")[0].regions:  # (a page of regions: each region's own claim)
        return None
    digits = rank_digits(r.rank_extents(), rank)
    ext = r.extents("local")
    why = _miscounted(r, seq.id, ext[seq.id])
    if why:
        return why
    placed: dict = {}  # place in the sequence -> the local token there
    for index in index_box(ext):
        got, want = r.shard(index, digits)[seq.id], r.sequence_place(index, digits)
        if got != want:
            shown = ", ".join(f"{n}={v}" for n, v in index.items())
            return Reason(Check.SEQUENCE, f"rank {rank} puts local ({shown}) at canonical {seq.id}={got}, but its "
                          f"place in the sequence is token({index[seq.id]}) = {want}", name=seq.id, expected=want,
                          actual=got)
        if placed.setdefault(want, index[seq.id]) != index[seq.id]:
            return Reason(Check.SEQUENCE, f"rank {rank} sends local {seq.id}={placed[want]} and "
                          f"{seq.id}={index[seq.id]} to one place in the sequence, {want}: two tokens, one place",
                          name=seq.id)
    return None


def off_the_engine(r: Reading, rank: int) -> Reason | None:
    """None where the grid's placements give `rank` the KV heads and tokens vLLM gives it, else the
    first that differs, said (ints only; placements the grid does not define are not read; `name`:
    the placement, `head` or `token`; `expected`: vLLM's, `actual`: the grid's).

    vLLM numbers a worker group's ranks rank = (stage * pcp + pcp_rank) * tp + tp_rank, with
    dcp_rank = tp_rank % dcp. TP rank tp_rank holds KV heads [s * heads, (s + 1) * heads),
    s = tp_rank // (tp * heads / total_heads) (fewer heads than ranks: consecutive ranks hold one
    head); CP rank c = pcp_rank * dcp + dcp_rank (dcp_rank where PCP ranks are replicas, of
    cp = dcp) holds local token t at ((t // interleave) * cp + c) * interleave + t % interleave.
    A grid states its ranks' digits, most significant first, and `head(h)`, `token(t)` of them:
    here they are held to those rules at one configuration."""
    env, grid = r.env, r.lib.grids[r.fdef.grid.id]
    sizes = {n: env.get(n) for n in ("tp", "pcp", "dcp", "interleave", "heads", "total_heads", "block_size")}
    tp, pcp, dcp = (sizes[n] if type(sizes[n]) is int else 1 for n in ("tp", "pcp", "dcp"))
    tp_rank, pcp_rank = rank % tp, (rank // tp) % pcp
    digits = rank_digits(r.rank_extents(), rank)
    shown = ", ".join(f"{n}={v}" for n, v in digits.items())

    def placed(fn: str, arg: int):
        env_ = {**env, **digits, "#arg": arg, LETS_MEMO: {}}
        return r.expr(Call(fn, (Name("#arg", grid.span),), grid.span), env_)
    heads, total = sizes["heads"], sizes["total_heads"]
    if _one_arg(r, "head") and type(heads) is int and type(total) is int and total > 0 and (tp * heads) % total == 0:
        share = max(1, tp * heads // total)  # the ranks holding one rank's heads
        for h in range(heads):
            got, want = placed("head", h), (tp_rank // share) * heads + h
            if got != want:
                return Reason(Check.ENGINE, f"rank {rank} (its digits {shown}) holds head({h}) = {got} by the grid, "
                              f"but vLLM's rank {rank} (tp_rank {tp_rank}) holds KV head {want} there", name="head",
                              expected=want, actual=got)
    block, every = sizes["block_size"], sizes["interleave"] if type(sizes["interleave"]) is int else 1
    if _one_arg(r, "token") and type(block) is int and every > 0:
        replicas = env.get("pcp_replicas", 0) == 1
        cp, c = (dcp, tp_rank % dcp) if replicas else (dcp * pcp, pcp_rank * dcp + tp_rank % dcp)
        for t in range(block):
            got, want = placed("token", t), ((t // every) * cp + c) * every + t % every
            if got != want:
                return Reason(Check.ENGINE, f"rank {rank} (its digits {shown}) holds token({t}) = {got} by the grid, "
                              f"but vLLM's rank {rank} (pcp_rank {pcp_rank}, dcp_rank {tp_rank % dcp}) holds token "
                              f"{want} there", name="token", expected=want, actual=got)
    return None


def _one_arg(r: Reading, fn: str) -> bool:
    return fn in r.placements and len(r.fns[fn].params) == 1


def _miscounted(r: Reading, seq: str, local: int) -> Reason | None:
    """Why the `sequence` index does not run over a page's tokens (local: the block's
    block_size; canonical: block_size * cp, the grid's `cp` or 1), or None."""
    tokens = r.env.get("block_size")
    if not isinstance(tokens, int):
        return Reason(Check.SEQUENCE, f"`sequence {seq}` claims the page's tokens, but the family never reads "
                      f"block_size (tokens per block)", name=seq)
    if local != tokens:
        return Reason(Check.SEQUENCE, f"`sequence {seq}` claims the page's tokens, but the local index {seq} runs "
                      f"over {local} place(s) where a block holds block_size = {tokens} tokens", name=seq,
                      expected=tokens, actual=local)
    cp = r.token_shards()
    canon = r.extents("canonical")[seq]
    if canon != tokens * cp:
        return Reason(Check.SEQUENCE, f"`sequence {seq}` claims the page's tokens, but the canonical index {seq} runs "
                      f"over {canon} place(s) where a canonical page holds block_size * cp = {tokens} * {cp} tokens",
                      name=seq, expected=tokens * cp, actual=canon)
    return None


def byte_map(r: Reading, rank: int) -> dict[int, int]:
    """local byte -> canonical byte on one rank, by enumerating every element (ints only)."""
    digits = rank_digits(r.rank_extents(), rank)
    ldef, bound = r.layout("local")
    ext = r.extents("local")
    elem = r.element(ldef, bound)
    out = {}
    for index in index_box(ext):
        lo, co = r.offset("local", index), r.offset("canonical", r.shard(index, digits))
        for b in range(elem):
            out[lo + b] = co + b
    return out

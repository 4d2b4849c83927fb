"""One page format across configurations, for all sizes: the `one-format` obligation.

A canonical page is a format shared by every configuration that holds it: pages stored under
tp=2 are read under tp=4, pages of another cp are joined along the tokens. That is sound only
where each canonical byte holds one and the same engine element whatever the configuration
that wrote it. The reference is a single rank holding the whole page: the configuration with
tp = pcp = dcp = 1 and a block of as many tokens as the canonical page has (`block_size`
scaled by the canonical page's tokens over the local page's), every other size kept. The
obligation, for every configuration X where the family applies, every rank of X and every
local index i of it:

    the byte rank r writes for i at X holds, at the single rank S of the same page, the
    element i holds at X

where an element is the engine's name of what a byte holds (`oracle.element_terms`: a local
index name made global by the grid's placements, `head(h)`, `token(t)`), never the shard map's
arithmetic. So a family whose shard map puts a head's channels one way at cp = 1 and another
way at cp > 1 (each configuration tiling exactly) is refuted with the byte, and a page stored
under X and read under Y gives every element back: each means what S reads.

The violation, quantifier-free: at X's byte some region of S's page writes, from an index j
in its box on S's one rank, another element (or another region's); or no case of the family
holds at S; or S's canonical page has another size. S's tiling (each byte of its page written
once) is the family's other rows at S, which is a configuration the family applies at.
"""
from __future__ import annotations

import time

import z3

from ...verdicts import Check, Reason, Verdict
from ...dsl.interpret import Reading, paths
from ...dsl.library import Library
from ...ir.family import resolve
from ..oracle import element_terms
from .store import Row
from .structural import agnostic_family
from .witness import Meaning, Witness
from .z3ops import Z3Ops

SINGLE = {"tp": 1, "pcp": 1, "dcp": 1, "interleave": 1, "pcp_replicas": 0}
"""The worker group's names on a single rank holding the whole page (and `heads`, a rank's KV
heads: all of them, `total_heads`); every other size is the model's, X's."""

NO_REFERENCE = ("nowhere", "page")
"""Parts of the violation that find no reference reading (no case serves the single rank, or it
reads another canonical layout): unknown, never refuted (the reference is this obligation's
choice, not the engine's)."""


class Cancelling(Z3Ops):
    """S's arithmetic: a division whose divisor is a product of some of the dividend's factors
    (the canonical page by the tokens of one block of it) is those other factors, exactly, where
    the divisor is positive: the identity (x * y) // x = y, stated rather than left for Z3's
    nonlinear arithmetic to find."""

    def _known(self, a, b):
        return _cancel(a, b)


def _factors(x) -> list:
    if isinstance(x, int) or not z3.is_mul(x):
        return [x]
    return [f for c in x.children() for f in _factors(c)]


def _cancel(a, b):
    """The product of `a`'s factors without `b`'s (each once), or None where `b`'s are not among them."""
    if isinstance(a, int) or isinstance(b, int):
        return None
    rest = _factors(a)
    for f in _factors(b):
        k = next((k for k, g in enumerate(rest) if not isinstance(g, int) and not isinstance(f, int) and g.eq(f)
                  or isinstance(g, int) and isinstance(f, int) and g == f), None)
        if k is None:
            return None
        rest.pop(k)
    out = 1
    for f in rest:
        out = out * f
    return out


def single_sizes(m, page_size) -> dict:
    """The sizes of S, the single rank holding the canonical page of `m` (model X): one rank, all
    of the heads, a block of as many tokens as X's canonical page (`sequence`: block_size scaled
    by the canonical page's tokens over the local page's), and `page_size` the canonical page."""
    sizes = {**m.sizes, **{n: v for n, v in SINGLE.items() if n in m.sizes}, "page_size": page_size}
    if "heads" in m.sizes:
        sizes["heads"] = m.sizes["total_heads"] if "total_heads" in m.sizes else m.r.env.get("total_heads")
    seq = m.r.fdef.sequence
    if seq is not None and "block_size" in m.sizes:
        tokens, local, block = m.r.extents("canonical")[seq.id], m.r.extents("local")[seq.id], m.sizes["block_size"]
        if _same(local, block):  # the local page holds one block of tokens: S's block is the canonical page's
            sizes["block_size"] = tokens
        else:
            sizes["block_size"] = m.ops.exact(m.ops.mul(block, tokens), local)
    return sizes


def _same(a, b) -> bool:
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a.eq(b)


def no_reference(model, w: Witness) -> bool:
    """Whether the violation `model` satisfies is one of `NO_REFERENCE`'s (unknown, not refuted)."""
    from .obligations import holding
    hit = holding(model, w)
    return hit is not None and hit[0] in NO_REFERENCE


def query(m):
    """(violation, witness terms) of `one-format` for model X (`obligations.Model`).

    S's canonical layout is X's with the same arguments (else the page differs: refuted), so a
    canonical byte is one canonical index at both, and only the same region can write it at S
    (S's regions tile its page, which is X's): the elements are compared index by index. Each
    case path of S is read in an arithmetic of its own (`Z3Ops.apart`): its divisions are
    conditions of that case applying, never constraints on X (a case S does not take must not
    narrow the configurations X ranges over)."""
    d, cd = m.digits("")
    i, ci = m.index("local", "")
    c = m.r.shard(i, d)
    mine = element_terms(m.r, i, d)
    spec = sorted(k[1:] for k in mine if k.startswith("="))
    if spec:  # its element is the shard map's arithmetic: no engine name to compare
        raise LookupError(f"the shard map places canonical index {spec[0]!r} by the rank's digits, not by a "
                          f"placement of the grid: which engine element it holds is the spec's word")
    page_size = m.r.page("canonical")  # a single rank's page is the canonical page: all of it
    sizes = single_sizes(m, page_size)
    _, bound = m.r.layout("canonical")
    earlier, applies, defs, parts_out, meaning, arithmetics = [], [], [], [], [], []
    for k, path in enumerate(paths(m.lib, m.family)):
        ops = Cancelling(f"{m.tag}S{k}.")
        try:
            rs = Reading(m.lib, m.family, sizes, ops, path)
            cases = [x for x, _ in rs.cases]
            guards = [g for g, _ in rs.guards]
            fits = _nonnegative(rs)  # (its page need not be page_size: S is a reading, not a layer offered)
            _, theirs_bound = rs.layout("canonical")
            moved = [_ne(bound[p], theirs_bound[p]) for p in bound]
            ext = rs.extents("local")
            j = {n: m.fresh(f"{n}@single") for n in ext}
            cj = [z3.And(v >= 0, v < ext[n]) for n, v in j.items()]
            s_digits = {n: 0 for n, _ in rs.rank_extents()}
            cs = rs.shard(j, s_digits)
            theirs = element_terms(rs, j, s_digits)
        except (ArithmeticError, LookupError):
            continue  # a case S cannot read is one S never takes
        arithmetics.append(ops)
        held, conds = ops.apart()
        defs += held
        here = _all(cases)
        taken = z3.And(here, *[z3.Not(x) for x in earlier])
        earlier.append(here)
        ok = z3.And(taken, _all(guards), _all(fits), _all(conds))
        applies.append(ok)
        other = z3.Or(*moved, z3.BoolVal(False))
        parts_out.append(z3.And(ok, *cj, *[cs[n] == c[n] for n in c], _differ(mine, theirs)))
        meaning.append(("element", path, (j, theirs)))
        # another canonical layout on S: one byte that holds two elements refutes it all the same
        b, bj = m.fresh("b"), m.fresh("b@single")
        e, ej = m.element(), _element(rs)
        here, there = m.r.offset("canonical", c) + b, rs.offset("canonical", cs) + bj
        parts_out.append(z3.And(ok, other, *cj, b >= 0, b < e, bj >= 0, bj < ej, here == there,
                                z3.Or(b != bj, _differ(mine, theirs))))
        meaning.append(("byte", path, (j, theirs)))
        parts_out.append(z3.And(ok, other))
        meaning.append(("page", path, None))
    parts_out.insert(0, z3.Not(z3.Or(*applies, z3.BoolVal(False))))
    meaning.insert(0, ("nowhere", None, None))
    at = [*ci, *cd, *defs]
    parts_out = [z3.And(*at, p) for p in parts_out]
    w = Meaning(i=i, d=d, c=c, mine=mine, sizes=sizes, parts=tuple(parts_out), meaning=tuple(meaning),
                arithmetics=tuple(arithmetics))
    return z3.Or(*parts_out), w


def _all(xs):
    """The conjunction of conditions, some of them Python bools."""
    if any(x is False for x in xs):
        return z3.BoolVal(False)
    return z3.And(*[x for x in xs if x is not True])


def _ne(a, b):
    x = a != b
    return z3.BoolVal(x) if isinstance(x, bool) else x


def _element(rs):
    ldef, bound = rs.layout("local")
    return rs.element(ldef, bound)


def _differ(mine: dict, theirs: dict):
    """Whether two elements differ: other names, or another value of one."""
    if set(mine) != set(theirs) or any(len(mine[k]) != len(theirs[k]) for k in mine):
        return z3.BoolVal(True)
    return z3.Or(*[z3.BoolVal(x != y) if isinstance(x != y, bool) else x != y
                   for k in mine for x, y in zip(mine[k], theirs[k])], z3.BoolVal(False))


def _nonnegative(rs) -> list:
    out = []
    for role in ("local", "canonical"):
        ldef, bound = rs.layout(role)
        out += [rs.expr(x.extent, bound) >= 0 for x in ldef.indices]
    return [c for c in out if c is not True]


def explain(m, model, w: Witness, where: str, sizes: str) -> str:
    """The counterexample in the spec's names: which byte, which element, which configuration."""
    def val(x):
        return x if isinstance(x, int) else model.eval(x, model_completion=True).as_long()

    def named(el):
        return "; ".join(f"{k} " + "/".join(str(val(x)) for x in v) for k, v in el.items())

    single = ", ".join(f"{n}={val(w.sizes[n])}" for n in ("tp", "pcp", "dcp", "heads", "block_size")
                       if n in w.sizes)
    from .obligations import holding
    hit = holding(model, w)
    if hit is not None:
        kind, _, extra = hit
        if kind == "nowhere":
            return (f"{where}: no case of the family holds on a single rank holding the whole canonical page "
                    f"({single}), with {sizes}: the page has no reading to be one format with")
        if kind == "page":
            hint = "" if m.r.fdef.sequence is not None else (
                "; where pages of another cp hold more tokens, say which index they join along (`sequence t`), "
                "so the single rank holds a block of all of them")
            return (f"{where}: a single rank holding the canonical page ({single}) reads another canonical layout "
                    f"(its arguments differ), with {sizes}{hint}")
        j, theirs = extra
        said = "that canonical index" if kind == "element" else "whose own canonical layout puts another element at that byte:"
        idx = ", ".join(f"{n}={val(v)}" for n, v in w.i.items())
        canon = ", ".join(f"{n}={val(v)}" for n, v in w.c.items())
        them = ", ".join(f"{n}={val(v)}" for n, v in j.items())
        return (f"{where}: rank {val(m.rank_of(w.d))} writes local ({idx}), the engine's element [{named(w.mine)}], "
                f"to canonical ({canon}); on a single rank holding the page ({single}), {said} "
                f"local ({them}), the element [{named(theirs)}], with {sizes}: one page format names two elements "
                f"of the engine's")
    return f"{where}: the canonical page means another thing on a single rank holding it ({single}), with {sizes}"


def unshown(lib, family: str, configurations, budget, sides=("store", "load")) -> Reason | None:
    """Why the pages of `family` at these configurations (sizes dicts) are not shown to be one
    format (`one-format` at each, symbolic rank and index, its sizes numbers), or None."""
    why = verdict(lib, family, configurations, budget, sides)[1]
    return Reason(Check.FORMAT, why, family=family) if why else None


def verdict(lib, family: str, configurations, budget, sides=("store", "load")) -> tuple[str, str]:
    """('proved', ''), or ('refuted' | 'unknown', why) of `one-format` at each configuration. A case
    whose pages no other configuration reads (keyed by its sizes, `shared_paths`) asks
    nothing: its reader is its writer's configuration."""
    from ...ir.family import resolve
    from .obligations import Model
    for side, sizes in zip(sides, configurations):
        for part in lib.parts_of(family):
            where = "" if part == family else f" in region {part.split('.')[-1]!r}"
            try:
                path = tuple(Reading(lib, part, dict(sizes)).taken)
                if path not in shared_paths(lib, part, resolve(lib, part)):
                    continue
                m = Model(lib, part, path, sizes=dict(sizes))
                violation, w = query(m)
                status, model = m.solve(violation, budget)
            except (ArithmeticError, LookupError, TypeError, z3.Z3Exception) as e:
                return Verdict.UNKNOWN, f"the {side} configuration's page cannot be read as one format{where} ({e})"
            if status == "sat" and no_reference(model, w):
                return Verdict.UNKNOWN, (f"at the {side} configuration{where} there is no single-rank reading to compare "
                                   f"with: " + explain(m, model, w, part, _shown(m, model)))
            if status == "sat":
                return Verdict.REFUTED, (f"at the {side} configuration{where} the canonical page is not one format with a "
                                   f"single rank's: " + explain(m, model, w, part, _shown(m, model)))
            if status != "unsat":
                return Verdict.UNKNOWN, (f"at the {side} configuration{where} it is undecided whether each canonical byte "
                                   f"holds one element of the engine's at every configuration (`one-format`)")
    return Verdict.PROVED, ""


def _shown(m, model) -> str:
    return ", ".join(f"{n}={v}" for n, v in m.sizes.items() if isinstance(v, int))


def shared_paths(lib, family: str, fam) -> list:
    """The case paths whose pages another configuration reads: every path of a family whose
    pages of another cp are joined (`sequence`), else those whose canonical indices name the
    engine's elements (`claims.names_data`: the runtime keys their format by the canonical
    layout alone). A path keyed by its sizes (the opaque fallback) is read by its writer's
    configuration only."""
    every = paths(lib, family)
    if lib.family_def(family).sequence is not None:
        return every
    if fam is None:
        return []
    from ...ir.claims import names_data
    return [p for p, named in zip(every, names_data(fam)) if named]


LAYOUT_CLAIM = "canonical layout free of parallel sizes and one across the claiming cases (sympy): all sizes"


PAD_CLAIM = "canonical pad free of parallel sizes (sympy): all sizes"


def claim_row(spec: str, name: str, fam, method: str) -> list[Row]:
    """The `one-format` row of one part's `agnostic` claim alone (sympy), or none where no case
    claims anything (nothing to show)."""
    t0 = time.perf_counter()
    claim = agnostic_family(fam) if fam is not None else None
    return [] if claim is None else [Row(spec, name, "one-format", claim.status, method, time.perf_counter() - t0,
                                         claim.detail if claim.status != Verdict.PROVED else "")]


def agnostic_rows(lib: Library, family: str) -> list[Row]:
    """The `one-format` rows of the family's `agnostic` claim alone (each data region's part and
    canonical pad of a page), without the Z3 queries that take minutes: for a question about
    the claim alone.

    Post-conditions: a row unknown here is unknown in `prove_family`; a row proved here may
    still be unknown or refuted there, where a shared page means another thing at another
    configuration (the Z3 half of `one-format`) or the family applies nowhere."""
    spec = lib.family_def(family).span.file
    parts = lib.parts_of(family)
    rows = [r for part in parts for r in claim_row(spec, part, resolve(lib, part), LAYOUT_CLAIM)]
    if parts != [family]:
        rows += [r for pad in lib.parts_of(family, pads=True) if pad not in parts and pad.endswith("'")
                 for r in claim_row(spec, pad, resolve(lib, pad), PAD_CLAIM)]
    return rows

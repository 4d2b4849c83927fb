"""Certificates: every row Z3 proved for all sizes, as SMT-LIB 2 a second solver can re-check.

A row proved for all sizes is, on each case path, an unsat query: the declared bounds of
every size, the path's guards, the layouts, shard map and rank digits as integer terms
(floor division and remainder by their definitions: `a = q * b + r, 0 <= r < b`), and the
negation of the obligation. A certificate is that query, self-contained, with a header
saying which spec lines it reads and what `unsat` means. A query asked in parts (a
disjunction, each part its own query) is one file a part; all are unsat when the row holds.

Rows proved by an argument outside SMT have no file, and the index says why (`NO_SMT`).
Nothing here trusts the prover's verdicts beyond choosing which rows to write: a file is
built from the spec alone, so `certify` answering `unsat` on it re-proves the row, and a
file of a broken spec is answered `sat`. The folders the files go into: `certificate_files`.
"""
from __future__ import annotations

import dataclasses

import z3

from ...dsl.interpret import paths
from ...dsl.library import Library
from ...ir.family import resolve
from ..certify import DEPENDS
from . import lemmas, meaning
from .obligations import PAGE, Model, product
from .obligations import box_empty
from .page_tiling import Box
from .runner import Budgets, query
from .registry import ENTRIES
from .smt_text import smt2_text, smt_body
from .store import OBLIGATIONS
from .witness import Digits, Meaning, Witness
from .z3ops import ask

APPLIES = "applies"
"""The file a case path gets beside its certificates: its assumptions alone, which must be sat."""

ALL_SIZES = "symbolic: all sizes"
"""How a row Z3 proved for every size begins its method."""

NO_SMT = {o.name: o.no_smt for o in ENTRIES if o.no_smt}
"""Why a row proved for all sizes outside SMT has no SMT-LIB file (`Obligation.no_smt`); for
`one-format`, why its agnostic claim (indexed as `one-format/claim`) has none."""


SMT_ROWS = tuple(o.name for o in ENTRIES if o.smt)
"""The rows whose all-sizes proof is a Z3 query, so a certificate (`Obligation.smt`)."""


def _pads(lib: Library) -> set:
    return {p for f in lib.families for p in lib.parts_of(f, pads=True) if p not in lib.parts_of(f)}


def spec_lines(lib: Library, family: str) -> tuple[str, int, list[str]]:
    """(file, first line, the family's lines as written) of the family a certificate reads."""
    span = lib.family_def(family.split(".")[0]).span
    try:
        with open(span.file, encoding="utf-8") as f:
            lines = f.read().splitlines()[span.line - 1:]
    except OSError:
        return span.file, span.line, [span.text]
    body = [lines[0]]
    for line in lines[1:]:
        if line.strip() and not line[:1].isspace():
            break
        body.append(line)
    while body and not body[-1].strip():
        body.pop()
    return span.file, span.line, body


def texts(lib: Library, family: str, name: str, memo: dict | None = None) -> list[tuple[str, str]]:
    """(file stem, SMT-LIB text) of every query of obligation `name` of `family` over the
    whole declared domain: one a case path and part. `family` may be a region or a pad of a
    family of pages (`fam.region`, `fam.pad'`). `memo` keeps which case paths are dead across
    calls (one Z3 check a path, whatever the row).

    Pre-conditions: `name` is a row Z3 asks symbolically (`SYMBOLIC`, `sequence-order`,
    `one-format`, or a row of `PAGE` asked of the page's first region).
    Post-conditions: each text is unsat exactly when the row holds on its path and part.
    """
    model_of = lib.parts_of(family)[0]  # (a page's rows are asked of its first region)
    fam = resolve(lib, model_of)
    pad = model_of in _pads(lib)
    cases = list(paths(lib, model_of))
    shared = meaning.shared_paths(lib, model_of, fam) if name == "one-format" else cases
    out = []
    for k, path in enumerate(cases):
        if path not in shared:
            continue
        m = Model(lib, model_of, path, page_guard=not pad)
        cases_text = " and ".join(c.text.removeprefix("case ") for c in fam.variants[k].cases)
        assumed = m.assumptions()
        memo = {} if memo is None else memo
        if (model_of, k) not in memo:
            memo[model_of, k] = _dead([*assumed, *m.ops.side])
        dead = memo[model_of, k]
        if name == APPLIES:  # the assumptions alone: sat, or the case applies nowhere (then unsat)
            body, kinds = smt_body([*assumed, *m.ops.side])
            out.append((f"{APPLIES}.case{k}", _header(lib, family, name, k, cases_text, 0, 1,
                                                      "unsat" if dead else "sat", uses=lemma_files(kinds),
                                                      witness="" if dead else find_model([*assumed, *m.ops.side]))
                        + body))
            continue
        if dead:  # the runtime never takes it: its applies file shows that, and nothing else holds of it
            continue
        base = _fixed(_model([*assumed, *m.ops.side], WITNESS_RLIMIT[1]))  # (the case's sizes, for each file's witness)
        if name == "page-size":  # the guards alone make the local layout the page
            asked, g = _page_query(lib, model_of, path)
            body, kinds = smt_body(asked)
            out.append((f"{name}.case{k}", _header(lib, family, name, k, cases_text, 0, 1, uses=lemma_files(kinds), goal=g,
                                                   witness=find_model(asked[:g] + asked[g + 1:], base)) + body))
            continue
        if name == "digits-match-spec" and pad:  # a pad the regions always fill: its box is empty
            probe = Model(lib, model_of, path, page_guard=not pad)
            if box_empty(probe, Budgets.of().full):
                _, inside = probe.index("local", "")  # (fresh constants: the same box box_empty asked of)
                asked = [*probe.assumptions(), z3.And(*inside)]
                body, kinds = smt_body([*asked, *probe.ops.side])
                out.append((f"{name}.case{k}", _header(lib, family, name, k, cases_text, 0, 1, uses=lemma_files(kinds),
                                                       goal=len(asked) - 1, empty=True,
                                                       witness=find_model([*asked[:-1], *probe.ops.side], base))
                            + body))
                continue
        extra = (fam.variants[k], fam.atoms) if name == "digits-match-spec" else ()
        v, w = query(m, name, *extra)
        parts = w.parts or (w.sides if isinstance(w, Digits) else ()) or \
            ([w.clash, v.children()[1]] if name in LAYOUT_POINTS else [v])
        asserted, chains = _cuts(m, name, w)
        if name in DIVIDED:
            tied, uses = lemmas.divisions(m.ops, *(w.arithmetics if isinstance(w, Meaning) else ()))
            for j in range(len(parts)):
                got = asserted.setdefault(j, ([], [], set()))
                got[0].extend(tied)
                got[2].update(uses)
        identities = _identities(m, chains, assumed)
        # one witness for every part: each asserts the case's assumptions and side conditions, and
        # besides its goal only instances of valid formulas, which hold in any model of those
        wit = find_model([*assumed, *m.ops.side], base)
        for j, part in enumerate(parts):
            stem = f"{name}.case{k}" + (f".part{j}" if len(parts) > 1 else "")
            used, labels, kinds = asserted.get(j, ([], [], set()))
            body, more = smt_body([*assumed, part, *used, *m.ops.side])
            needs = [f"{name}.case{k}.chain-{label}.smt2" for label in labels] + lemma_files(kinds | more)
            out.append((stem, _header(lib, family, name, k, cases_text, j, len(parts), uses=needs,
                                      goal=len(assumed), witness=wit) + body))
        for label, said, query_ in identities:  # (each claim negated last: its goal)
            body, kinds = smt_body([*query_, *m.ops.side_for(query_)])  # (the divisions its terms read, no others)
            out.append((f"{name}.case{k}.chain-{label}", _header(lib, family, name, k, cases_text, 0, 1, chain=said,
                                                                 uses=lemma_files(kinds), goal=len(query_) - 1) + body))
    return out


DIVIDED = tuple(o.name for o in ENTRIES if o.divided)
"""The rows whose certificates tie every division to the others (`lemmas.divisions`): a digit
table reads an index through remainders of quotients, the spec through the index itself."""

def _identities(m: Model, chains: list, assumed: list) -> list[tuple[str, str, list]]:
    """(label, what it says, assertions) of each chain's own file (`_cuts`): its identity at a
    point of its own, or its claim of the sizes alone, denied under the case's assumptions.
    Its terms are made here, before any file reads the side conditions."""
    out = []
    for label, c, said, role, ranked, claim in chains:
        if claim is not None:  # a fact of the sizes alone
            out.append((label, said, [*assumed, z3.Not(claim)]))
            continue
        if isinstance(role, tuple):  # a point of its own (a region of a page's tiling)
            i, d = role
        else:
            i, _ = m.index(role, "#")
            d = m.digits("#")[0] if ranked else {}
        out.append((label, said, [*assumed, *c.bounds((i, d)), z3.Not(c.identity((i, d)))]))
    return out


class _Assuming:
    """A model with more assumptions (a direct plan's query reads the sizes' bounds and its
    case's conditions beside the model's own): what `_cuts` and its chains show, they show there."""

    def __init__(self, m: Model, more: list):
        self._m, self._more = m, more

    def __getattr__(self, name):
        return getattr(self._m, name)

    def assumptions(self) -> list:
        return [*self._m.assumptions(), *self._more]


def cuts(m: Model, name: str, w: Witness, assumed=()) -> tuple[list, list, set]:
    """What a query asking row `name` of `m` whole (`w` its witnesses) may rest on, as a
    certificate of it would, where `assumed` holds beside `m`'s assumptions: (the instances
    its parts assert, all at once; each chain's file as (label, what it says, assertions, with
    the side conditions its terms read, the index of its goal: the claim negated); the lemmas used). With `name` None, a byte of the local layout at
    `w.i` inside the page (`reshard.plan_queries.outside_page`): the layout's chain, its
    fits and both ends of its element."""
    m = _Assuming(m, list(assumed))
    asserted, chains = _cuts(m, name or "local-bijective", w if name else dataclasses.replace(w, j=w.i))
    if name is None:
        local = next((c for label, c, *_ in chains if label == "local"), None)
        asserted = {0: asserted.get(0, ([], [], set()))}
        if local is not None:  # its element's first byte at or after the base's, its last by the top's
            got, e = asserted[0], m.element("local")
            got[0].extend([*local.above((w.i, {}), e), *local.inside((w.i, {}), e)])
            got[2].update({"low", "above", "bound", "scale"})
    files = _identities(m, chains, m.assumptions())
    found = [x for got in asserted.values() for x in got[0]]
    return found, [(label, said, [*a, *m.ops.side_for(a)], len(a) - 1) for label, said, a in files], \
        set().union(*[got[2] for got in asserted.values()])


def divided(query, *models) -> tuple[list, list, set]:
    """What a query reading its terms through divisions rests on (`cuts`' form): DIGIT and
    QUOTIENT between every division of `models`' arithmetics and each `div` the query writes
    (`lemmas.divisions`, `lemmas.native`); no chain file."""
    found, uses = lemmas.divisions(*[m.ops for m in models], extra=lemmas.native([query]))
    return found, [], uses


SHARD_POINTS = {o.name: dict(o.shard_points) for o in ENTRIES if o.shard_points}
"""The rows that read the shard map at one or two points: part -> the points' witness names
(`Obligation.shard_points`)."""

LAYOUT_POINTS = {o.name: o.layout_points for o in ENTRIES if o.layout_points is not None}
"""The rows that show a layout one-to-one in its box: (the layout, the parts that show it,
the witness names of its two indices: `Obligation.layout_points`). A bijectivity row's certificate is in two parts: two
indices at one offset, and an offset outside the page."""


def _cuts(m: Model, name: str, w: Witness) -> tuple[dict, list]:
    """(part -> (the chain instances it asserts, the labels of their chains, the lemmas they
    use)), and each chain as (label, chain, what its identity says, the layout its index is
    of, whether it reads rank digits, the claim of its file where it is not the identity):
    the chains (`lemmas`) of the layout a row's query shows one-to-one and of each coordinate
    of the shard map it reads, each found once and asserted as found, and for a region of a
    page that its chain fits the page (`Chain.fits`). A term whose chain is not shown gets
    none; a part with none is written whole."""
    if name in PAGE:
        return _tiling_cuts(m, w)
    asserted, chains = {}, {}

    def add(part, label, c, points):
        got = asserted.setdefault(part, ([], [], set()))
        got[0].extend(c.instances(*points))
        got[1].append(label)
        got[2].update(c.uses(len(points) > 1))
    if name in LAYOUT_POINTS:
        role, parts, a, b = LAYOUT_POINTS[name]
        ldef, bound = m.r.layout(role)
        ext = m.r.extents(role)
        c = lemmas.chain(m, lambda p: m.r.expr(ldef.offset, {**bound, **p[0]}), (w.term(a), {}), ext,
                         None if m.part else product(ext.values()))
        if c is not None and len(c.order) > 1:  # (one atom: nothing to split: the query is linear in it)
            for part in parts:
                add(part, role, c, [(w.term(a), {}), (w.term(b), {})])
            chains[role] = (role, c, f"the {role} layout's offset is its base plus the Horner form of its atoms "
                                     f"({_atoms_text(c)}, fastest first) at every index of its box; "
                                     f"{_facts_text(c)}", role, False, None)
            if m.part:  # a region: its last byte ends by the page's, which is the sum of its regions
                e = m.element(role)
                fits = c.fits(e, m.r.page(role))
                if lemmas.holds(m, fits):
                    for part in parts:
                        got = asserted[part]
                        got[0].extend([fits, *c.inside((w.term(a), {}), e), *c.inside((w.term(b), {}), e)])
                        got[1].append(f"{role}-fits")
                        got[2].update({"bound", "scale"})
                    chains[f"{role}-fits"] = (f"{role}-fits", c, f"the {role} region's base is at least 0 and its "
                                              f"last element ({_atoms_text(c)} at their extents less one) ends by "
                                              f"the page's last byte", role, False, fits)
    local, ranks = m.r.extents("local"), dict(m.r.rank_extents())
    if local.keys() & ranks.keys():  # (a point's bounds are by name: one name for two things has none)
        return asserted, list(chains.values())
    cext, found = m.r.extents("canonical"), {}
    for part, points in SHARD_POINTS.get(name, {}).items():
        at = [(w.term(i), w.term(d)) for i, d in points]
        for n in cext:
            if n not in found:  # found once, at the first part's point: the same chain for every part
                found[n] = lemmas.chain(m, lambda p, n=n: m.r.shard(*p)[n], at[0], {**local, **ranks}, cext[n])
            c = found[n]
            if c is None or len(c.order) < 2:
                continue
            add(part, f"shard-{n}", c, at)
            chains.setdefault(f"shard-{n}", (
                f"shard-{n}", c, f"canonical index {n} of the shard map is its base plus the Horner form of its atoms "
                                 f"({_atoms_text(c)}, fastest first) at every local index and rank; "
                                 f"{_facts_text(c)}", "local", True, None))
    return asserted, list(chains.values())


def _tiling_cuts(m: Model, w: Witness) -> tuple[dict, list]:
    """`_cuts` of a page's tiling row: two regions that share no byte lie in byte ranges one
    before the other. Each region's offset gets its chain (the identity at a point of its own),
    its first and last bytes by ABOVE and LOW (at or after `element * base`) and BOUND and SCALE
    (by `element * (base + top + 1)`), and the pair a file of the sizes alone: the earlier
    region ends by the later's first byte. A pair whose regions have no chain, or whose order
    Z3 does not show, is written whole."""
    asserted, chains, found = {}, {}, {}
    for part, (kind, *boxes) in enumerate(w.meaning):
        if kind != "overlap":
            continue
        for box in boxes:
            if box.name not in found:
                found[box.name] = _region_chain(m, box)
        got = [(box, found[box.name]) for box in boxes]
        if any(c is None for _, c in got):
            continue
        ends = [(box.element * c.base, box.element * (c.base + c.top() + 1), _short(box.name)) for box, c in got]
        order = next((o for o in (ends, ends[::-1]) if lemmas.holds(m, o[0][1] <= o[1][0])), None)
        if order is None:  # (neither first: they may share a byte; the part is written whole)
            continue
        (_, end, first), (start, _, second) = order
        label = f"{first}-before-{second}"
        chains.setdefault(label, (label, None, f"region {first} ends (its last element's last byte) by region "
                                               f"{second}'s first byte", None, False, end <= start))
        mine = asserted.setdefault(part, ([], [], set()))
        for box, c in got:
            point, name = (box.idx, {}), _short(box.name)
            mine[0].extend([*c.instances(point), *c.inside(point, box.element), *c.above(point, box.element)])
            mine[1].append(f"region-{name}")
            mine[2].update(c.uses(False) | {"bound", "scale", "low", "above"})
            chains.setdefault(box.name, (f"region-{name}", c, f"region {name}'s offset is its base plus the Horner "
                                                            f"form of its atoms ({_atoms_text(c)}, fastest first) at "
                                                            f"every index of its box; {_facts_text(c)}",
                                       c.within_point, False, None))
        mine[0].append(end <= start)
        mine[1].append(label)
    return asserted, list(chains.values())


def _short(region: str) -> str:
    return region.rsplit(".", 1)[-1]  # (`layout.region`: one page's regions have names of their own)


def _region_chain(m: Model, box: Box):
    """The chain of a region's offset (a `page_tiling.Box`), with a point of its own for
    its identity's file (`within_point`), or None."""
    name, ldef, bound = box.name, box.ldef, box.bound
    ext = {d.name: m.r.expr(d.extent, bound) for d in ldef.indices}
    c = lemmas.chain(m, lambda p: m.r.expr(ldef.offset, {**bound, **p[0]}), (box.idx, {}), ext)
    if c is None:
        return None
    own = ({n: m.fresh(f"{n}#@{name}") for n in ext}, {})
    c.term(own)  # (its divisions made before any file reads the side conditions)
    return dataclasses.replace(c, within_point=own)


def _facts_text(c: lemmas.Chain) -> str:
    said = ["each radix (the next atom's stride over its own) at least its atom's extent"] if c.radix else []
    said += [f"{a[1]} // {a[2]} below {c.extents[a]}" for a in c.order if a[0] == "quot"]
    said += ["the atoms' extents fill the box"] if c.box is not None else []
    return "; ".join(said) or "nothing more"


def _atoms_text(c: lemmas.Chain) -> str:
    return ", ".join(a[1] if a[0] in ("index", "digit") else f"{a[1]} {'//' if a[0] == 'quot' else '%'} {a[2]}"
                     for a in c.order)


def _dead(assumptions) -> bool:
    """Whether Z3 finds no sizes where a case path's assumptions hold: the prover's dead case,
    which the runtime never takes. Z3 only chooses what a case's files claim; cvc5 re-checks it."""
    return ask(assumptions, 20_000_000)[0] == z3.unsat


def _page_query(lib: Library, family: str, path) -> tuple[list, int]:
    """(assertions, the goal's index) of `page-size` on one live case path: its guards without
    the runtime's page check, and a local layout that is not the page (unsat: the guards alone
    make the layout the page)."""
    m = Model(lib, family, path, page_guard=False)
    implied = [*m.assumptions(), z3.Not(m.page_fits())]
    return [*implied, *m.ops.side], len(implied) - 1


def lemma_files(kinds) -> list[str]:
    """The shared lemma files (relative to a family's folder) of the lemmas `kinds`."""
    return [f"../{lemmas.SHARED}/{n}.smt2" for n in lemmas.LEMMAS if n in kinds]


def _header(lib: Library, family: str, name: str, k: int, cases: str, j: int, parts: int,
            expect: str = "unsat", uses=(), chain: str = "", goal: int | None = None, empty: bool = False,
            witness: str = "") -> str:
    file, line, body = spec_lines(lib, family)
    part = f", part {j + 1} of {parts} (the row holds where every part is unsat)" if parts > 1 else ""
    if empty:
        part = ", the pad's box empty at every size"
        meant = [f"obligation: {OBLIGATIONS.get(name, name)}",
                 "Its goal (the assertion the goal line names) puts an index inside the pad's box, each index at",
                 "least 0 and below its extent. unsat means: no sizes within their declared bounds",
                 "satisfying the path's guards admit one: the box is empty at every size, so the digit table",
                 "is never read and the row holds on this path with nothing to compute. sat: an index exists,",
                 "and this file shows nothing."]
    elif chain:
        part = ", its chain (a step of the row's argument)"
        meant = [f"claim: {chain}.",
                 "unsat means: no sizes within their declared bounds satisfying the path's guards, and no index",
                 f"of the box, break it; the row's other files on case path {k} assert it at their own indices."]
    elif name == APPLIES and expect == "sat":
        meant = ["sat means: some sizes within their declared bounds satisfy the path's guards, so the",
                 f"certificates of case path {k} speak of configurations that exist (unsat: they are vacuous)."]
    elif name == APPLIES:
        meant = [f"unsat means: case path {k} applies nowhere: no sizes within their declared bounds satisfy",
                 "its guards (with the runtime's page check), so the runtime never takes it and the family's",
                 "rows hold on it with nothing to show; it has no other certificate."]
    else:
        meant = [f"obligation: {OBLIGATIONS.get(name, name)}",
                 "unsat means: no value of the sizes within their declared bounds (asserted below), no rank and no",
                 "index satisfies the path's guards together with the negation of the obligation, so the",
                 "obligation holds for every size, rank and index. sat means a counterexample exists."]
    lines = [f"layoutalg certificate: family {family}, obligation {name}, case path {k}{part}",
             f"expect: {expect}", *goal_line(goal), *([f"witness: {witness}"] if witness else []),
             f"spec: {file}:{line}", *(f"  | {t}" for t in body),
             f"case path {k}: {cases or 'the family has one case'}", *meant,
             *(["It asserts instances of the identities and lemmas certified in the files below: instances of",
                "valid formulas where those files are unsat, so the answer is then the query's own, and the row",
                "holds where this file and every file below are unsat (`layoutalg certify` checks them together).",
                f"{DEPENDS} {' '.join(uses)}"] if uses else []),
             "Sizes and indices are integer constants; x // b and x % b are q and r with x = q * b + r, 0 <= r < b."]
    return "".join(f"; {t}\n" for t in lines) + "(set-logic ALL)\n"


WITNESS_RLIMIT = (1_000_000, 4_000_000)
"""Z3's budgets for a witness (`find_model`): with the case's sizes fixed, then free; past both,
the file has none and cvc5 searches alone."""


def _model(assertions, rlimit: int = WITNESS_RLIMIT[1]):
    """A Z3 model of `assertions`, None where Z3 finds none within `rlimit`."""
    res, s = ask(assertions, rlimit)
    return s.model() if res == z3.sat else None


def _fixed(model) -> list:
    """`model`'s values of its integer constants, as equalities (a case's sizes, for `find_model`)."""
    if model is None:
        return []
    return [z3.Int(d.name()) == model[d] for d in model.decls()
            if d.arity() == 0 and d.range() == z3.IntSort() and z3.is_int_value(model[d])]


def find_model(assertions, base=()) -> str:
    """A model Z3 finds of `assertions` (a file's assertions without its goal, or a case's
    assumptions), as SMT-LIB equalities `(= NAME VALUE)` of its integer constants: certify asks
    the file's assumptions with them too, a ground query cvc5 evaluates at once (a model of the
    assumptions with the equalities is one of the assumptions: its sat is theirs). Tried first
    with `base` (the case's sizes, `_fixed`: what is left is nearly linear), then without; ''
    where Z3 finds none within `WITNESS_RLIMIT` (certify then asks cvc5 without)."""
    model = _model([*assertions, *base], WITNESS_RLIMIT[0]) if base else None
    model = model if model is not None else _model(assertions, WITNESS_RLIMIT[1])
    return " ".join(sorted(e.sexpr() for e in _fixed(model)))


def goal_line(goal: int | None) -> list[str]:
    """The header line naming the goal among the assertions (from 1): `certify` asks the file
    again without it, sat expected (its assumptions are not vacuous), and reads a chain file's
    claim as its negation."""
    return [] if goal is None else [f"goal: assertion {goal + 1} (the assertions without it are satisfiable: "
                                    f"the assumptions are not vacuous)"]


def lemma_text(name: str, said: str, assertions) -> str:
    lines = [f"layoutalg certificate: the lemma {name}, asserted at their own terms by certificates that name it",
             "expect: unsat", f"lemma: {said}, for all integers.",
             "unsat means: no integers break it (the assertion below is its negation), so every instance of it",
             "holds, whatever terms it is asserted at."]
    return "".join(f"; {t}\n" for t in lines) + "(set-logic ALL)\n" + smt2_text(assertions)

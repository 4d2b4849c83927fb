"""What `layoutalg certify` checks of a certificate folder's CONTENT, before and beside cvc5's answers.

A solver's `unsat` on a file shows that file's formula unsatisfiable, nothing more. A
folder is a proof only where its files fit together; this module reads them (`smtlib`) and
says where they do not:

- a shared lemma's file states the lemma this module knows (`LEMMA_TEXT`), negated, and
  nothing else: a folder cannot bring a lemma of its own;
- every implication a file asserts (other than its goal) is an instance of a known lemma that
  its `; depends on:` line names, or of the claim of a chain (fits, order) file it names: the
  claim with its constants replaced by terms of the file, every other assertion of that file
  so replaced being an assertion of this one, a hypothesis of the implication, or a lemma's
  instance;
- no file asserts a bare `false`;
- `; expect: sat` only on a case's applies file; every case a family's files speak of has
  its applies file, answered sat; a case whose applies file is unsat (dead) has no other file;
- every file stating its goal (`; goal: assertion N`) gets a vacuity query: its assertions
  without the goal, which must be sat (`vacuity_text`; certify runs it). Where its header
  gives a `; witness:` (values of its constants, `(= NAME VALUE)`), certify asks the query
  with them first (a ground query: sat there is sat without them) and, failing that, without.

Nothing here decides a formula: the solver does. Pure Python, no solver imported.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from . import smtlib

SHARED = "shared-lemmas"
"""The folder of the lemmas (`prove.lemmas.SHARED`, named here without importing the prover)."""

LEMMA_TEXT = {
    "digit": ("a x X y Y", "(=> (and (= (+ x (* a X)) (+ y (* a Y))) (>= x 0) (< x a) (>= y 0) (< y a)) "
                           "(and (= x y) (= X Y)))"),
    "range": ("a x X M", "(=> (and (>= x 0) (< x a) (>= X 0) (< X M)) (and (>= (+ x (* a X)) 0) "
                         "(< (+ x (* a X)) (* a M))))"),
    "quotient": ("b q r Q", "(=> (and (>= (+ (* q b) r) 0) (< (+ (* q b) r) (* Q b)) (>= r 0) (< r b)) "
                            "(and (>= q 0) (< q Q)))"),
    "bound": ("A x r X B", "(=> (and (<= x A) (<= X B) (>= r 0)) (<= (+ x (* r X)) (+ A (* r B))))"),
    "scale": ("e x M", "(=> (and (< x M) (> e 0)) (<= (+ (* e x) e) (* e M)))"),
    "low": ("x r X", "(=> (and (>= x 0) (>= X 0) (>= r 0)) (>= (+ x (* r X)) 0))"),
    "above": ("e x y", "(=> (and (>= x y) (>= e 0)) (>= (* e x) (* e y)))"),
    "monotone": ("b a q r A Q R", "(=> (and (= a (+ (* q b) r)) (>= r 0) (< r b) (= A (+ (* Q b) R)) (>= R 0) "
                                  "(< R b) (<= a A)) (<= q Q))"),
    "strict": ("b a q r A Q R", "(=> (and (= a (+ (* q b) r)) (>= r 0) (< r b) (= A (+ (* Q b) R)) (= R 0) "
                                "(< a A)) (< q Q))"),
    "same": ("b a q r A Q R", "(=> (and (= a (+ (* q b) r)) (>= r 0) (< r b) (= A (+ (* Q b) R)) (>= R 0) "
                              "(< R b) (= a A)) (and (= q Q) (= r R)))"),
}
"""Each lemma this checker knows: (its variables, its formula in SMT-LIB), valid for all integers.
`prove.lemmas` builds the same formulas (`tests/test_certify_forgery.py` holds them alike)."""

GOAL = re.compile(r"^assertion (\d+)\b")
CASE = re.compile(r"^(?P<row>.+?)\.case(?P<k>\d+)(?:\.|$)")
STEP = re.compile(r"^(?P<plan>.+)\.step\d+$")
"""A direct plan's step file (`certificate_files.step_texts`; its chain files are `STEP.chain-LABEL`)."""
PAIR_APPLIES = re.compile(r"^(?P<plan>.+)\.applies\.case(?P<x>\d+)-(?P<y>\d+)(?:\.r\d+)?$")
"""A direct plan's applies file of a case pair (store, load): `certificate_files.applies_name`."""
STEP_PAIR = re.compile(r"^cases (\d+) \(store\) and (\d+) \(load\)(?!.* apply together at no size)")
"""A step of one case pair that applies, as its `; step:` line says."""
DEAD_PAIR = re.compile(r"^cases \d+ \(store\) and \d+ \(load\) apply together at no size")
"""A step showing a case pair applies nowhere: its assumptions are what it shows empty (no goal)."""


class Known(dict):
    """Lemma name -> (its variables, its formula as a term of one `Terms` table), with what
    `lemma_instance` found of each term it was asked (a term is one int of that table, so the
    answer holds for every file read into it) and each lemma's shape."""

    def __init__(self, terms: smtlib.Terms):
        super().__init__()
        self.memo: dict = {}
        self.shapes: dict = {}
        for name, (names, text) in LEMMA_TEXT.items():
            ((tree, _, _),) = smtlib.sexprs(text, f"<lemma {name}>")
            self[name] = (names.split(), terms.expand(tree))
            self.shapes[name] = _shape(terms, self[name][1])


def templates(terms: smtlib.Terms) -> Known:
    """Lemma name -> (its variables, its formula as a term of `terms`)."""
    return Known(terms)


def _shape(terms: smtlib.Terms, t: int) -> tuple:
    """The operators and arities of an implication's top, hypothesis and conclusion: a term
    that is a lemma's instance has the lemma's (its variables are leaves below them)."""
    def one(x):
        return smtlib.head(terms, x), len(smtlib.args(terms, x))
    parts = smtlib.args(terms, t)
    return (one(t), *(one(x) for x in parts)) if len(parts) == 2 else (one(t),)


def goal(script: smtlib.Script, errors: list) -> int | None:
    """The index (from 0) among `script`'s assertions of its goal (`; goal: assertion N`, from
    1), None where it states none; a goal out of range is an error."""
    said = script.header.get("goal")
    if said is None:
        return None
    m = GOAL.match(said)
    if not m or not 1 <= int(m.group(1)) <= len(script.assertions):
        errors.append(f"{script.path}:1: its goal line says {said!r}, and it has {len(script.assertions)} assertions")
        return None
    return int(m.group(1)) - 1


def check_lemma(script: smtlib.Script, name: str, known: dict, terms: smtlib.Terms) -> str | None:
    """Why `script` (a shared lemma's file) is not the lemma `name` this checker knows, negated,
    and nothing else; None where it is. Its variables must be distinct declared constants."""
    if name not in known:
        return f"{script.path}:1: no lemma {name!r} is known to certify (known: {', '.join(sorted(known))})"
    variables, formula = known[name]
    asserted = script.assertions
    if len(asserted) != 1:
        return f"{script.path}:1: a lemma's file asserts its negation alone; it has {len(asserted)} assertions"
    t = asserted[0].term
    sigma: dict = {}
    if not (smtlib.head(terms, t) == "not" and
            smtlib.unify(terms, formula, smtlib.args(terms, t)[0], set(variables), sigma)):
        return (f"{script.path}:{asserted[0].line}: not the lemma {name} ({LEMMA_TEXT[name][1]}) negated: "
                f"it asserts {smtlib.show(terms, t)}")
    values = [terms.node(sigma[v]) for v in variables]
    if len(set(values)) != len(values) or any(v not in script.declared for v in values):
        return f"{script.path}:{asserted[0].line}: the lemma {name} at {values}, not at distinct fresh constants"
    if script.header.get("expect", "unsat") != "unsat":
        return f"{script.path}:1: a lemma's file must expect unsat"
    return None


def lemma_instance(terms: smtlib.Terms, t: int, allowed, known: dict):
    """(lemma name, substitution) where `t` is an instance of a lemma in `allowed`, else None.
    (Memoised in `known` where it is a `Known`; a lemma of another shape is not tried.)"""
    memo, shapes = getattr(known, "memo", None), getattr(known, "shapes", {})
    key = (t, tuple(allowed))
    if memo is not None and key in memo:
        return memo[key]
    shape, got = _shape(terms, t), None
    for name in allowed:
        variables, formula = known[name]
        if name in shapes and shapes[name] != shape:
            continue
        sigma: dict = {}
        if smtlib.unify(terms, formula, t, set(variables), sigma):
            got = name, sigma
            break
    if memo is not None:
        memo[key] = got
    return got


def chain_claim(terms: smtlib.Terms, script: smtlib.Script, errors: list):
    """(claim, the other assertions, its constants) of a chain, fits or order file: its goal is
    the claim negated; None (with an error) where it states no such goal."""
    g = goal(script, errors)
    if g is None:
        errors.append(f"{script.path}:1: a chain file states no goal (`; goal: assertion N`, the claim negated)")
        return None
    t = script.assertions[g].term
    if smtlib.head(terms, t) != "not":
        errors.append(f"{script.path}:{script.assertions[g].line}: its goal is no negated claim: "
                      f"{smtlib.show(terms, t)}")
        return None
    return smtlib.args(terms, t)[0], [a.term for k, a in enumerate(script.assertions) if k != g], script.declared


def instance_of_chain(terms: smtlib.Terms, t: int, chain, mine: dict, facts: set, allowed,
                      known: dict) -> tuple[dict | None, str]:
    """(substitution, '') where the implication `t` is an instance of `chain`'s claim
    (`chain_claim`): its conclusion the claim with the chain file's constants replaced (a
    constant this file also declares, `mine`, and the claim does not read, by itself; one
    it does not, by a term of this file found by matching), and each other assertion of the
    chain file so replaced a conjunction of this file's assertions' conjuncts (`facts`) and
    of `t`'s hypothesis, or an instance of a lemma in `allowed`; else (None, the mismatch)."""
    claim, premises, declared = chain
    conclusion = smtlib.args(terms, t)[1]
    sigma: dict = {}
    if not smtlib.unify(terms, claim, conclusion, set(declared), sigma):
        return None, f"its conclusion is not the claim {smtlib.show(terms, claim, 200)}"
    hypothesis = smtlib.conjuncts(terms, smtlib.args(terms, t)[0])
    have = facts | set(hypothesis)
    by_head: dict = {}
    for c in dict.fromkeys([*hypothesis, *facts]):  # (the implication's own hypothesis tried first)
        by_head.setdefault(smtlib.head(terms, c), []).append(c)
    budget = [20_000]  # (matching steps: a search that runs past it fails, never passes)
    stuck: list = []
    found = _premises(terms, premises, 0, sigma, set(declared), mine, have, by_head, allowed, known, budget, stuck)
    if found is None:
        q = smtlib.substitute(terms, stuck[0][0], stuck[0][1]) if stuck else claim
        return None, (f"no substitution puts the chain's assertion {smtlib.show(terms, q, 200)} among this file's "
                      f"(at {{{', '.join(f'{k} -> {smtlib.show(terms, v, 40)}' for k, v in list((stuck[0][1] if stuck else sigma).items())[-10:])}}})")
    return found, ""


def _premises(terms, premises, k, sigma, declared, mine, have, by_head, allowed, known, budget, stuck):
    """A substitution extending `sigma` under which premises[k:] each hold in this file
    (`_holds`), or None. A constant not yet bound is tried first as itself (where this file
    declares it), then as what matching a premise's conjuncts against `have` makes it."""
    if k == len(premises):
        return sigma
    budget[0] -= 1
    if budget[0] < 0:
        return None
    p = premises[k]
    free = smtlib.constants(terms, p) & declared - set(sigma)
    if not free:
        if _holds(terms, smtlib.substitute(terms, p, sigma), have, allowed, known):
            return _premises(terms, premises, k + 1, sigma, declared, mine, have, by_head, allowed, known, budget, stuck)
        if not stuck or len(stuck) < 1:
            stuck.append((p, dict(sigma)))
        return None
    same = {**sigma, **{n: terms.make(n) for n in free if n in mine}}
    if len(same) - len(sigma) == len(free) and _holds(terms, smtlib.substitute(terms, p, same), have, allowed, known):
        got = _premises(terms, premises, k + 1, same, declared, mine, have, by_head, allowed, known, budget, stuck)
        if got is not None:
            return got
    parts = smtlib.conjuncts(terms, p)

    def go(j, s):
        if j == len(parts):
            return _premises(terms, premises, k + 1, s, declared, mine, have, by_head, allowed, known, budget, stuck)
        for c in by_head.get(smtlib.head(terms, parts[j]), ()):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            s2 = dict(s)
            if smtlib.unify(terms, parts[j], c, declared, s2):
                got = go(j + 1, s2)
                if got is not None:
                    return got
        return None
    got = go(0, same) if len(same) > len(sigma) else None
    got = go(0, dict(sigma)) if got is None else got
    if got is None and not stuck:
        stuck.append((p, same))
    return got


def _holds(terms, q: int, have: set, allowed, known) -> bool:
    """Whether `q` (a chain file's assertion, substituted) holds in this file: each of its
    conjuncts is among `have`, or it is an instance of a lemma in `allowed`."""
    return all(c in have or terms.node(c) == "true" for c in smtlib.conjuncts(terms, q)) or \
        (smtlib.head(terms, q) == "=>" and lemma_instance(terms, q, allowed, known) is not None)


_INT = re.compile(r"^\d+$")


def witness_lines(s: smtlib.Script, errors: list) -> str | None:
    """`s`'s `; witness:` values as assertions: each `(= NAME VALUE)` (either way round) of a
    constant `s` declares and an integer literal (or its negation); None where it gives none,
    and an error where one is not of that form (a witness names values, nothing else)."""
    said = s.header.get("witness")
    if not said:
        return None
    try:
        pairs = smtlib.sexprs(said, s.path)
    except smtlib.SmtError as e:
        errors.append(f"{s.path}:1: its witness line cannot be read ({e})")
        return None
    lines = []
    for tree, _, _ in pairs:
        if not (isinstance(tree, tuple) and len(tree) == 3 and tree[0] == "="):
            errors.append(f"{s.path}:1: its witness line holds {tree!r}, not (= NAME VALUE)")
            return None
        a, b = tree[1:]
        name, value = (a, b) if isinstance(a, str) and a in s.declared else (b, a)
        number = value if isinstance(value, str) else (value[1] if len(value) == 2 and value[0] == "-" else None)
        if not (isinstance(name, str) and name in s.declared and isinstance(number, str) and _INT.match(number)):
            errors.append(f"{s.path}:1: its witness line holds {tree!r}, not a declared constant and an integer")
            return None
        lines.append(f"(assert (= {name} {number if isinstance(value, str) else f'(- {number})'}))\n")
    return "; the witness's values\n" + "".join(lines)


def witnessed(s: smtlib.Script, text: str, errors: list) -> str | None:
    """`text` (`s`'s, or its vacuity query) with `s`'s witness's values (`witness_lines`)
    asserted before its `(check-sat)`; None where it gives none."""
    lines = witness_lines(s, errors)
    return None if lines is None else _with(text, lines)


def _with(text: str, lines: str) -> str | None:
    at = text.rfind("(check-sat)")
    return None if at < 0 else text[:at] + lines + text[at:]


@dataclass(frozen=True)
class Query:
    """A query certify asks of a file beside the file itself, made when asked (a library's
    queries are as large as its files): the file's text as audited (its digest) without the
    assertions at the spans `drop` (a vacuity query: its goal's assumptions, to be sat), and
    that text with its witness's values (`witness_lines`) where it gives them."""
    path: str
    digest: str
    drop: tuple = ()
    witness: str | None = None

    def texts(self) -> tuple[str, str | None]:
        """(the query's text, with the witness or None). Raises ValueError where the file is not
        the one audited (changed since)."""
        with open(self.path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if _digest(text) != self.digest:
            raise ValueError(f"{self.path}: changed since its content was audited")
        if self.drop:
            text = vacuity_text(text, self.drop)
        return text, (None if self.witness is None else _with(text, self.witness))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def audit(folder: str, files: list[str], jobs: int = 1) -> tuple[list[str], list[Query], dict]:
    """(problems, vacuity queries, witnessed sat files) of the certificate files `files` under
    `folder`: each problem names the file, its line and what is violated; each vacuity query
    (`Query`: the file's assertions without its goal) is to be answered sat; each file
    expecting sat with a witness maps (by its absolute path) to its `Query` (no span dropped).

    Each folder's files are read into a table of their own (`_group`), in `jobs` processes
    where there are several folders: a file rests only on files of its own folder and the
    shared lemmas (a file it names elsewhere is read there too)."""
    run = {os.path.abspath(p) for p in files}
    groups: dict = {}
    for path in files:
        groups.setdefault(os.path.dirname(os.path.abspath(path)), []).append(path)
    work = list(groups.values())
    if jobs > 1 and len(work) > 1 and len(files) > 64:
        from concurrent.futures import ProcessPoolExecutor
        order = sorted(range(len(work)), key=lambda k: -len(work[k]))  # (the largest first: the last to end)
        with ProcessPoolExecutor(max_workers=min(jobs, len(work))) as pool:
            futures = {k: pool.submit(_group, work[k], run) for k in order}
            done = [futures[k].result() for k in range(len(work))]
    else:
        done = [_group(paths, run) for paths in work]
    errors, vacuity, sat, expects, needs = [], [], {}, {}, []
    for e, v, s, (x, n) in done:
        errors += e
        vacuity += v
        sat.update(s)
        expects.update(x)
        needs += n
    return errors + _case_problems(expects) + _pair_problems(needs, expects), vacuity, sat


def _group(paths: list[str], run: set) -> tuple[list[str], list[Query], dict, dict]:
    """`audit` of the files `paths` (one folder's), in a `Terms` table of their own: (problems,
    vacuity queries, witnessed sat files, each file's `expect` by its absolute path)."""
    terms = smtlib.Terms()
    known = templates(terms)
    errors, scripts = [], {}
    for path in paths:
        try:
            scripts[os.path.abspath(path)] = smtlib.read(path, terms)
        except (OSError, smtlib.SmtError) as e:
            errors.append(f"{path}: cannot be read ({e})")
    mine = dict(scripts)
    for path, s in mine.items():  # (a file this one names outside its folder: read here too, checked there)
        for d in _depends(path, s):
            if d in run and d not in scripts and os.path.basename(os.path.dirname(d)) != SHARED:
                try:
                    scripts[d] = smtlib.read(d, terms)
                except (OSError, smtlib.SmtError):
                    pass  # (its own folder's run says why)
    vacuity, sat, needs = [], {}, []
    for path, s in mine.items():
        errors += _file_problems(path, s, scripts, known, terms, vacuity, needs)
        if s.header.get("expect") == "sat":
            lines = witness_lines(s, errors)
            if lines is not None:
                sat[path] = Query(path, _digest(s.text), (), lines)
    return errors, vacuity, sat, ({p: s.header.get("expect") for p, s in mine.items()}, needs)


def _depends(path: str, s: smtlib.Script) -> list[str]:
    here = os.path.dirname(path)
    return [os.path.normpath(os.path.join(here, x)) for x in s.header.get("depends on", "").split()]


def _file_problems(path: str, s: smtlib.Script, scripts: dict, known: dict, terms, vacuity: list,
                   needs: list) -> list[str]:
    """The problems of one file (`audit`), appending its vacuity query to `vacuity` and, for a
    direct plan's step of a case pair, (the file, its pair's applies file) to `needs`."""
    errors = []
    folder_name = os.path.basename(os.path.dirname(path))
    name = os.path.basename(path)[:-len(".smt2")]
    if folder_name == SHARED:
        bad = check_lemma(s, name, known, terms)
        return [bad] if bad else []
    for a in s.assertions:
        if terms.node(a.term) == "false":
            errors.append(f"{path}:{a.line}: asserts a bare false (a certificate must not rest on false)")
    expect = s.header.get("expect", "unsat")
    if expect == "sat" and not (name.startswith("applies.case") or PAIR_APPLIES.match(name)):
        errors.append(f"{path}:1: expects sat, which only a case's applies file may (its case applies somewhere)")
    step = STEP.match(name)
    if step and s.header.get("goal") is None and not DEAD_PAIR.match(s.header.get("step", "")):
        errors.append(f"{path}:1: a direct plan's step states no goal (`; goal: assertion N`): nothing shows its "
                      f"assumptions satisfiable")
    pair = STEP_PAIR.match(s.header.get("step", "")) if step else None
    if pair:  # (the pair's applies file, answered sat: `_case_problems`)
        needs.append((path, os.path.join(os.path.dirname(path), f"{step.group('plan')}.applies.case{pair.group(1)}-"
                                                                 f"{pair.group(2)}.smt2")))
    deps = _depends(path, s)
    allowed = [n for n in _lemmas_named(deps) if n in known]
    chains = []
    for d in deps:
        if os.path.basename(os.path.dirname(d)) == SHARED or d not in scripts or \
                PAIR_APPLIES.match(os.path.basename(d)[:-len(".smt2")]):
            continue  # (a lemma; a case pair's applies file; or a file not in the run: `dependency_problems` says so)
        found = chain_claim(terms, scripts[d], errors)
        if found is not None:
            theirs = _lemmas_named(_depends(d, scripts[d]))
            chains.append((d, found, [n for n in dict.fromkeys([*allowed, *theirs]) if n in known]))
    g = goal(s, errors)
    facts = {c for a in s.assertions for c in smtlib.conjuncts(terms, a.term)}
    shown = set()  # the implications matched: valid where their files are unsat, so the vacuity query drops them
    for k, a in enumerate(s.assertions):
        if k == g or smtlib.head(terms, a.term) != "=>":
            continue
        shown.add(k)
        if lemma_instance(terms, a.term, allowed, known):
            continue
        why = []
        for d, chain, chain_allowed in chains:
            sigma, mismatch = instance_of_chain(terms, a.term, chain, s.declared, facts, chain_allowed, known)
            if sigma is not None:
                break
            why.append(f"{os.path.basename(d)}: {mismatch}")
        else:
            shown.discard(k)
            errors.append(f"{path}:{a.line}: asserts an implication that is no instance of a lemma its depends line "
                          f"names ({', '.join(allowed) or 'none'}) nor of a chain file it names: "
                          f"{smtlib.show(terms, a.term, 240)}" + "".join(f"\n    {w}" for w in why))
    if g is not None and ".chain-" not in name:
        dropped = {g} | shown
        drop = tuple(a.span for k, a in enumerate(s.assertions) if k in dropped)
        vacuity.append(Query(path, _digest(s.text), drop, witness_lines(s, errors)))
    return errors


def vacuity_text(text: str, drop: tuple) -> str:
    """`text` without the assertions at the spans `drop` (its goal, and the instances matched,
    which hold in every model of the rest, so dropping them keeps sat and unsat), expecting sat:
    the goal's assumptions are satisfiable. Pre: `drop` holds its goal's span, in order."""
    out, at = [], 0
    for start, end in drop:
        out.append(text[at:start])
        at = end
    out.append(text[at:])
    return "".join(out).replace("; expect: unsat", "; expect: sat", 1)


def _lemmas_named(deps: list[str]) -> list[str]:
    """The shared lemmas among the files `deps`, by name."""
    return [os.path.basename(d)[:-len(".smt2")] for d in deps if os.path.basename(os.path.dirname(d)) == SHARED]


def _pair_problems(needs: list, expects: dict) -> list[str]:
    """A direct plan's step of a case pair needs the pair's applies file in the run, expecting
    sat (certify then asks it): else nothing shows that its sizes exist."""
    return [f"{path}:1: its case pair has no applies file expecting sat ({os.path.basename(want)}) in this run: "
            f"nothing shows that the pair applies somewhere (the step could be vacuous)"
            for path, want in needs if expects.get(want) != "sat"]


def _case_problems(expects: dict) -> list[str]:
    """Each family folder's cases: a file of case K needs `applies.caseK.smt2` expecting sat;
    an applies file expecting unsat (a dead case) leaves no other file of its case. (`expects`:
    each file's `expect` header, or None, by its absolute path.)"""
    errors, by_folder = [], {}
    for path, s in expects.items():
        here, name = os.path.split(path)
        m = CASE.match(name[:-len(".smt2")])
        if m and os.path.basename(here) != SHARED and not name.startswith("stages-tile"):
            by_folder.setdefault(here, {}).setdefault(int(m.group("k")), []).append((m.group("row"), path, s))
    for here, cases in by_folder.items():
        for k, made in sorted(cases.items()):
            applies = next(((p, x) for row, p, x in made if row == "applies"), None)
            others = [p for row, p, _ in made if row != "applies"]
            if applies is None:
                errors.append(f"{others[0]}:1: case {k} has no applies.case{k}.smt2 in this run: nothing shows "
                              f"that the case applies somewhere (its certificates could all be vacuous)")
            elif applies[1] == "unsat" and others:
                errors.append(f"{others[0]}:1: case {k} is dead (applies.case{k}.smt2 expects unsat) and yet has "
                              f"{len(others)} other file(s)")
            elif applies[1] not in ("sat", "unsat"):
                errors.append(f"{applies[0]}:1: an applies file expects sat (or unsat: a dead case)")
    return errors

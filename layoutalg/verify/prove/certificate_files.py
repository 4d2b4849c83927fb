"""Certificate folders: the files `certificates` makes, written into a new folder with the
shared lemmas they rest on and an index (`write`, a library's rows; `write_steps`, a direct
plan's steps and the pipeline row). A folder is written whole or not at all.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager

from ...verdicts import Verdict
from ...dsl.library import Library
from ...errors import LayoutalgError
from ..certify import DEPENDS, folder_of
from . import lemmas
from .certificates import (ALL_SIZES, APPLIES, NO_SMT, SMT_ROWS, goal_line, lemma_text, lemma_files, spec_lines,
                           find_model, texts)
from .smt_text import smt2_text, smt_body
from .z3ops import bare_false
from .store import Row


_LEMMA_USED = re.compile(rf"\.\./{lemmas.SHARED}/(\w+)\.smt2")
"""A shared lemma named on a file's `; depends on:` line."""


def check_target(folder: str) -> None:
    """A `LayoutalgError` unless `folder` can take certificates: a new or empty folder, under
    folders (not a file). `prove --certificates` asks it before proving, `write` again."""
    if os.path.exists(folder) and (not os.path.isdir(folder) or os.listdir(folder)):
        raise LayoutalgError(f"prove --certificates {folder}: exists and is not an empty folder "
                             f"(certificates are written only into a new one)")
    above = os.path.dirname(os.path.abspath(folder))
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise LayoutalgError(f"prove --certificates {folder}: {above} is a file, not a folder")


def _put(where: str, made) -> None:
    os.makedirs(where, exist_ok=True)
    for stem, text in made:
        with open(os.path.join(where, stem + ".smt2"), "w", encoding="utf-8") as f:
            f.write(text)


def write(lib: Library, rows: list[Row], folder: str) -> list[tuple[str, str, str]]:
    """Write the certificate of every row in `rows` proved for all sizes into `folder`
    (FAMILY/OBLIGATION.caseK[.partJ].smt2, and `index.tsv`: one line a row, its files or why
    it has none). Returns the index's (family, obligation, what) lines.

    Nothing is half-written: the files are made in a fresh folder beside `folder`, which
    takes its place at the end; `folder` must not exist or be empty. A library with no row
    proved for all sizes is an error, not an empty folder.
    """
    check_target(folder)
    proved = [r for r in rows if r.status == Verdict.PROVED and "all sizes" in r.method]
    if not proved:
        raise LayoutalgError(f"prove --certificates {folder}: no row is proved for all sizes: nothing to certify")
    dead, applied = {}, set()
    with _writing(folder) as (tmp, index, used):
        for r in proved:
            if not (r.method.startswith(ALL_SIZES) and r.obligation in SMT_ROWS):
                why = NO_SMT.get(r.obligation, f"proved by {r.method}, an argument outside SMT")
                index.append((r.family, r.obligation, f"none: {why}"))
                continue
            made = texts(lib, r.family, r.obligation, dead)
            if not made:
                raise LayoutalgError(f"{r.family}: {r.obligation} is proved but has no query to certify")
            where = os.path.join(tmp, folder_of(r.family))
            _put(where, made)
            index.append((r.family, r.obligation, f"{len(made)} file(s)"))
            if r.family not in applied:  # a family's cases once, whatever its rows
                applied.add(r.family)
                cases = texts(lib, r.family, APPLIES, dead)
                _put(where, cases)
                used.update(n for _, text in cases for n in _LEMMA_USED.findall(text))
            if r.obligation == "one-format" and "agnostic" in r.method:
                index.append((r.family, "one-format/claim", f"none: {NO_SMT['one-format']}"))
            used.update(n for _, text in made for n in _LEMMA_USED.findall(text))
    return index


@contextmanager
def _writing(folder: str):
    """(a new folder beside `folder` to fill, its index lines, the lemmas its files rest on):
    on leaving, the lemmas and `index.tsv` are written into it and it takes `folder`'s place
    (`_finish`); on any failure it is removed, so nothing is half-written."""
    parent = os.path.dirname(os.path.abspath(folder))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".certificates-", dir=parent)
    index, used = [], set()
    try:
        yield tmp, index, used
        index += _finish(tmp, folder, index, used)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise



def _finish(tmp: str, folder: str, index: list, used: set) -> list:
    """Write the lemmas some file rests on (once) and `index.tsv` into `tmp`, which then takes
    `folder`'s place. Returns the lemmas' index lines."""
    shared = [(lemmas.SHARED, n, "1 file(s)") for n in lemmas.LEMMAS if n in used]
    if used:
        _put(os.path.join(tmp, lemmas.SHARED), [(n, lemma_text(n, said, a)) for n, said, a in lemmas.shared()
                                                if n in used])
    with open(os.path.join(tmp, "index.tsv"), "w", encoding="utf-8") as f:
        f.write("family\tobligation\tcertificate\n" + "".join("\t".join(x) + "\n" for x in index + shared))
    if os.path.isdir(folder):
        os.rmdir(folder)
    os.replace(tmp, folder)
    return shared


RESHARD_STEP = "reshard"
"""The prefix of a direct plan's step files: `reshard.STORE-to-LOAD.stepN.smt2` in its family's folder."""


def pair_name(store: str, load: str) -> str:
    """A configuration pair as a file name's part: 'tp=2,dcp=1' to 'tp=1' is `tp2.dcp1-to-tp1`."""
    def one(config: str) -> str:
        return ".".join(re.sub(r"[^A-Za-z0-9_]", "", p) for p in config.split(",") if p.strip()) or "default"
    return f"{RESHARD_STEP}.{one(store)}-to-{one(load)}"


def step_texts(lib: Library, family: str, store: str, load: str, steps: list) -> list[tuple[str, str]]:
    """(file stem, SMT-LIB text) of each step of a direct plan's proof for all sizes (`steps`:
    (what it shows, its assertions, chains, lemmas, answer, the index of its violation), each a
    query Z3 answered unsat, or sat where it shows a case pair applies: `reshard.at_sizes.recording`),
    one file a distinct query: a step's file names its goal (certify asks its assertions without
    it, to be sat); a case pair that applies has its applies file (`applies_name`), expecting sat
    with Z3's witness, and every step of that pair rests on the pair applying somewhere."""
    made: dict = {}
    held, applies = [], {}  # (steps whose query asserts a bare false: a guard the prover evaluated false)
    for what, asserted, chains, kinds, answer, goal in steps:  # (a term in `what` may print on several lines)
        what = " ".join(what.split())
        if answer == "sat":
            pair = _PAIR.search(what)
            if pair and not any(bare_false(e) for e in asserted):
                applies.setdefault((int(pair.group(1)), int(pair.group(2))), []).append(asserted)
            continue
        if any(bare_false(e) for e in asserted):
            held.append(what)
            continue
        body, more = smt_body(asserted)
        goal = None if _PAIR.search(what) else goal  # (a dead pair: its assumptions are what it shows empty)
        made.setdefault(body, (what, chains, kinds | more, goal, asserted))
    name, out = pair_name(store, load), []
    pairs = [_PAIR.search(w) for w in held]
    alone = " ".join(f"{p.group(1)}-{p.group(2)}" if p else w for p, w in zip(pairs, held))
    for (kx, ky), queries in sorted(applies.items()):
        for j, asserted in enumerate(queries):  # (one a region of a page of regions)
            body, _ = smt_body(asserted)
            out.append((applies_name(name, kx, ky, j), _applies_header(lib, family, store, load, kx, ky, asserted)
                        + body))
    for n, (body, (what, chains, kinds, goal, asserted)) in enumerate(made.items()):
        stem = f"{name}.step{n:03d}"
        needs = [f"{stem}.chain-{label}.smt2" for label, *_ in chains] + lemma_files(kinds)
        pair = _STEP_PAIR.match(what)
        if pair and not _PAIR.search(what):
            needs.append(applies_name(name, int(pair.group(1)), int(pair.group(2))) + ".smt2")
        wit = "" if goal is None else find_model(asserted[:goal] + asserted[goal + 1:])
        out.append((stem, _step_header(lib, family, store, load, n, len(made), what, needs, alone=alone, goal=goal,
                                       witness=wit) + body))
        for label, said, a, g in chains:
            text, used = smt_body(a)
            out.append((f"{stem}.chain-{label}", _step_header(lib, family, store, load, n, len(made), said,
                                                              lemma_files(used), chain=True, goal=g) + text))
    return out


def applies_name(name: str, kx: int, ky: int, j: int = 0) -> str:
    """The stem of a direct plan's applies file of the case pair (kx, ky) (`j`: its region, past the first)."""
    return f"{name}.applies.case{kx}-{ky}" + (f".r{j}" if j else "")


_STEP_PAIR = re.compile(r"^cases (\d+) \(store\) and (\d+) \(load\)")
"""A step of one case pair: its store and load cases (the words `all_sizes._check` starts with)."""


def _applies_header(lib: Library, family: str, store: str, load: str, kx: int, ky: int, asserted) -> str:
    file, line, body = spec_lines(lib, family)
    wit = find_model(asserted)
    lines = [f"layoutalg certificate: family {family}, the direct plan from {store} to {load} (`layoutalg prove "
             f"--reshard`), case pair {kx} (store) and {ky} (load) applies", "expect: sat",
             *([f"witness: {wit}"] if wit else []), f"spec: {file}:{line}", *(f"  | {t}" for t in body),
             "sat means: some sizes within their declared bounds satisfy both cases' guards at these configurations,",
             "with canonical pages of one shape (or k of one along the sequence index): the plan's steps of this",
             "pair speak of sizes that exist (they rest on this file answering sat)."]
    return "".join(f"; {t}\n" for t in lines) + "(set-logic ALL)\n"


_PAIR = re.compile(r"^cases (\d+) \(store\) and (\d+) \(load\) apply together at no size")
"""A step that shows a case pair never applies: its store and load cases."""


def _step_header(lib: Library, family: str, store: str, load: str, n: int, total: int, what: str,
                 uses=(), chain: bool = False, goal: int | None = None, alone: str = "", witness: str = "") -> str:
    """A step file's header (a chain file's with `chain`); `goal`: its violation's index, and
    `witness` Z3's values of a model of the rest (certify asks the rest, sat expected)."""
    file, line, body = spec_lines(lib, family)
    if chain:
        return "".join(f"; {t}\n" for t in [
            f"layoutalg certificate: family {family}, the direct plan from {store} to {load} (`layoutalg prove "
            f"--reshard`), a chain step {n + 1} of {total} rests on", "expect: unsat", *goal_line(goal),
            f"spec: {file}:{line}", *(f"  | {t}" for t in body), f"claim: {what}.",
            "unsat means: no sizes within their declared bounds satisfying the case's guards, and no index",
            "of the box, break it; the step asserts it at its own indices.",
            *([f"{DEPENDS} {' '.join(uses)}"] if uses else [])]) + "(set-logic ALL)\n"
    lines = [f"layoutalg certificate: family {family}, the direct plan from {store} to {load} "
             f"(`layoutalg prove --reshard`), step {n + 1} of {total}",
             "expect: unsat", *goal_line(goal), *([f"witness: {witness}"] if witness else []),
             f"spec: {file}:{line}", *(f"  | {t}" for t in body), f"step: {what}.",
             "unsat means: no value of the sizes within their declared bounds, and no rank, byte or index,",
             "satisfies the query below, so the step holds for every size. The plan's rows (reshard-cover,",
             "reshard-match) hold where every step is unsat, with the family's one-format row (and, across",
             "another cp, its sequence-order row; for a page of regions, its regions-tile rows), which",
             "`layoutalg prove SPEC --certificates` certifies or says why not. Which steps a plan takes (its",
             "case pairs, consumers and regions) is the prover's; each step is here to re-check.",
             *([f"prover alone: {alone} (store-load case pairs, or steps, whose query asserts a guard the prover",
                "evaluated false at the configurations' numbers: no file, a query resting on false proves nothing)"]
               if alone else []),
             *(["It asserts instances of the identities and lemmas the files below certify (valid where they",
                "are unsat: the answer is the query's own).", f"{DEPENDS} {' '.join(uses)}"] if uses else []),
             "Sizes and indices are integer constants; x // b and x % b are q and r with x = q * b + r, 0 <= r < b."]
    return "".join(f"; {t}\n" for t in lines) + "(set-logic ALL)\n"


def write_steps(made: list, folder: str) -> list[tuple[str, str, str]]:
    """Write each family's step files (`made`: (family, obligation, its files, or why none))
    into `folder`, with `index.tsv`, as `write` does: nothing half-written, `folder` new or
    empty, and no file at all an error."""
    check_target(folder)
    if not any(files for _, _, files in made if not isinstance(files, str)):
        raise LayoutalgError(f"prove --reshard --certificates {folder}: no plan is proved for all sizes: "
                             f"nothing to certify")
    with _writing(folder) as (tmp, index, used):
        for family, obligation, files in made:
            if isinstance(files, str):
                index.append((family, obligation, f"none: {files}"))
                continue
            _put(os.path.join(tmp, folder_of(family)), files)
            index.append((family, obligation, f"{len(files)} file(s)"))
            used.update(n for _, text in files for n in _LEMMA_USED.findall(text))
    return index


def stages_text() -> list[tuple[str, str]]:
    """(file stem, SMT-LIB text) of the `stages-tile` row (`prove --pipeline`): one query."""
    from .pipeline import LAYERS, stages_query
    lines = ["layoutalg certificate: vLLM's split of a model's layers over pipeline stages (`layoutalg prove "
             "--pipeline`), obligation stages-tile", "expect: unsat",
             "obligation: each layer lies in exactly one stage, for every layer count and stage count",
             "Stage s of pp owns layers [start(s), start(s + 1)), start(s) = s * q + max(0, s - (pp - 1 - r)) with",
             f"q, r the quotient and remainder of layers by pp, start(pp) = layers; 1 <= pp <= layers <= {LAYERS}.",
             "unsat means: no layer count and stage count have a stage that owns no layer, a first stage that",
             "does not start at layer 0, or a last that does not end at the last layer: the stages tile the layers."]
    return [("stages-tile.case0", "".join(f"; {t}\n" for t in lines) + "(set-logic ALL)\n" + smt2_text(stages_query()[0]))]

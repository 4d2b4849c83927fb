"""`layoutalg certify DIR`: re-check certificates with cvc5, a second solver from another team.

Each file runs in a fresh process (nothing one query leaves behind can decide another),
under a small portfolio of cvc5 configurations, each with a time limit and killed past it;
the first `sat` or `unsat` is the file's answer (any of them is sound, each answers the
same formula). A certificate holds when its answer is `unsat`; anything else (`sat`: the
row is broken; `unknown`: undecided in the time given; `error`: the file does not parse)
fails the run.

cvc5 is an optional dependency (`pip install layoutalg[certify]`): nothing else imports it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ..errors import LayoutalgError
from .audit import audit

UNDECIDED = "unknown"
"""A solver's answer where it decides neither sat nor unsat (its word, not a proof row's `Verdict`)."""

PORTFOLIO = (
    ("default", {}),
    ("tplanes", {"nl-ext-tplanes": "true", "nl-ext-tplanes-interleave": "true"}),
    ("nl-cov", {"nl-cov": "true"}),
)
"""cvc5 configurations tried in turn: its defaults, tangent planes for products of sizes, and
cylindrical algebraic coverings (nonlinear queries each decides that another leaves open)."""


def solve_file(path: str, options: dict) -> str:
    """cvc5's answer to the SMT-LIB file at `path` under `options` (in this process)."""
    import cvc5
    tm = cvc5.TermManager()
    s = cvc5.Solver(tm)
    for k, v in options.items():
        s.setOption(k, v)
    sm = cvc5.SymbolManager(tm)
    parser = cvc5.InputParser(s, sm)
    parser.setFileInput(cvc5.InputLanguage.SMT_LIB_2_6, path)
    answers = []
    while True:
        cmd = parser.nextCommand()
        if cmd.isNull():
            break
        out = cmd.invoke(s, sm).strip()
        if out:
            answers.append(out)
    if len(answers) != 1:
        return f"error: expected one answer to one (check-sat), got {answers!r}"
    return answers[0].split()[0]


LONGER = 6
"""A file every configuration leaves unknown is asked once more of cvc5's defaults with this many
times the time: a few certificates (a token fn's injectivity under an interleave) take cvc5 half a
minute on a loaded machine, and unknown fails the folder."""


def check_file(path: str, seconds: float) -> tuple[str, str, float]:
    """(answer, the configuration that gave it, seconds) of one certificate, each
    configuration in a fresh process killed after `seconds`; where all leave it unknown, the
    defaults once more with `LONGER` times the time (named `default-long`)."""
    t0, last = time.perf_counter(), (UNDECIDED, "-")
    for name, options, limit in (*((n, o, seconds) for n, o in PORTFOLIO), ("default-long", {}, seconds * LONGER)):
        if name == "default-long" and last[0] != UNDECIDED:
            break  # an error is the file's or the machine's: more time would not answer it
        cmd = [sys.executable, "-m", "layoutalg.verify.certify", path, json.dumps(
            {**options, "tlimit-per": str(int(limit * 1000))})]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit + 10)
        except subprocess.TimeoutExpired:
            continue
        if not done.stdout.strip():  # the process died (out of memory, a crash): the next may not
            last = (f"error: {(done.stderr.strip().splitlines() or ['no answer'])[-1]}", name)
            continue
        answer = done.stdout.strip().splitlines()[-1]
        if answer in ("sat", "unsat") or answer.startswith("error"):  # (an error: the file, not the solver)
            return answer, name, time.perf_counter() - t0
        if not last[0].startswith("error"):
            last = (UNDECIDED, name)
    return last[0], "-", time.perf_counter() - t0


def folder_of(family: str) -> str:
    """The folder a family's certificates lie in (a canonical pad `fam.pad'` as `fam.pad-canonical`)."""
    return family.replace("'", "-canonical")


def _field(path: str, key: str) -> str | None:
    """The value of a certificate header's `; KEY VALUE` line (the comments before its first
    command), or None where it has none."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.startswith(";"):
                break
            if line.startswith(f"; {key} "):
                return line[len(key) + 2:].strip()
    return None


def expected(path: str) -> str:
    """What a certificate's header says it must answer: `unsat` (a row's query), or `sat`
    (a case path's assumptions alone: the configurations its certificates speak of exist)."""
    said = _field(path, "expect:")
    if said is not None and said not in ("sat", "unsat"):
        raise ValueError(f"its header expects {said!r}; a certificate expects sat or unsat")
    return said or "unsat"


DEPENDS = "depends on:"
"""A certificate header's line naming the files (relative to its folder) whose unsat it rests on."""


def depends(path: str) -> list[str]:
    """The files (absolute) whose unsat a certificate rests on, as its header's `; depends on:`
    line names them (relative to its folder): a query asserting instances of a chain and of
    lemmas holds only with them."""
    here = os.path.dirname(os.path.abspath(path))
    return [os.path.normpath(os.path.join(here, x)) for x in (_field(path, DEPENDS) or "").split()]


def dependency_problems(answers: dict) -> list[str]:
    """Where a certificate rests on a file not checked in the same run, or not answered as
    expected (`answers`: absolute path -> whether it answered as its header expects)."""
    out = []
    for path in sorted(answers):
        try:
            needs = depends(path)
        except OSError:
            continue  # (unreadable: it has failed already)
        for need in needs:
            if need not in answers:
                out.append(f"{path}: rests on {need}, which was not checked in this run")
            elif not answers[need]:
                out.append(f"{path}: rests on {need}, which did not answer as expected")
    return out


def index_problems(folder: str) -> list[str]:
    """Where the folder's files differ from its `index.tsv` (a certificate removed, or one
    added): each row's count of files must be the files there."""
    index = os.path.join(folder, "index.tsv")
    if not os.path.exists(index):
        return []
    out = []
    with open(index, encoding="utf-8", errors="replace") as f:
        for line in f.read().splitlines()[1:]:
            family, obligation, what = (line.split("\t") + ["", "", ""])[:3]
            if not what.endswith("file(s)"):
                continue
            where = os.path.join(folder, folder_of(family))
            have = len([n for n in (os.listdir(where) if os.path.isdir(where) else [])
                        if (n.startswith((obligation + ".case", obligation + ".step", obligation + ".applies."))
                            and n.endswith(".smt2"))
                        or n == obligation + ".smt2"])
            if str(have) != what.split()[0]:
                out.append(f"{family} {obligation}: index.tsv lists {what}, the folder holds {have}")
    return out


def certify(folder: str, seconds: float = 20.0, jobs: int = 1, out=None) -> int:
    """Check every `*.smt2` under `folder`; print a line a file and a summary; 0 when each
    answers what its header expects (`unsat`, unless it says `expect: sat`) and every file a
    certificate rests on (its `; depends on:` line) was checked with it and did too, else 1.
    A folder with no certificate is an error, not a pass."""
    out = sys.stdout if out is None else out
    if importlib.util.find_spec("cvc5") is None:  # say it before starting a process a file
        raise LayoutalgError("certify: needs the cvc5 package (pip install cvc5, or layoutalg[certify])")
    if not os.path.isdir(folder):
        raise LayoutalgError(f"certify: {folder}: not a folder of certificates (write one with "
                             f"`layoutalg prove SPEC --certificates {folder}`)")
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder, followlinks=False) for f in fs
                   if f.endswith(".smt2"))  # (a linked folder is not followed: it may loop)
    if not files:
        raise LayoutalgError(f"certify: {folder} holds no .smt2 certificate: nothing is re-checked")
    t0, counts, good = time.perf_counter(), {}, 0

    def one(path):
        try:
            want = expected(path)
        except (OSError, ValueError) as e:
            return "unreadable", (f"error: {e.strerror if isinstance(e, OSError) else e}", "-", 0.0)
        given = sat.get(os.path.abspath(path))
        if want == "sat" and given is not None:  # its witness's values first: sat with them is sat without
            try:
                got = _check_text(given.texts()[1], seconds)
            except (OSError, ValueError) as e:
                return want, (f"error: {e}", "-", 0.0)
            if got[0] == "sat":
                return want, (got[0], "witness", got[2])
        return want, check_file(path, seconds)

    t1 = time.perf_counter()
    content, vacuity, sat = audit(folder, files, jobs)  # (read before any solver runs: a forged folder fails either way)
    print(f"audit: {len(files)} files read, {len(content)} problem(s) ({time.perf_counter() - t1:.1f} s)",
          file=out, flush=True)
    answers = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for path, (want, (answer, how, secs)) in zip(files, pool.map(one, files)):
            got = answer.split(":")[0]
            good += got == want
            answers[os.path.abspath(path)] = got == want
            counts[got] = counts.get(got, 0) + (got != want)
            print(f"{answer:<8} {how:<8} {secs:7.2f}s  {os.path.relpath(path, folder)}"
                  + ("" if got == want else f"  FAIL (expected {want})"), file=out, flush=True)
        empty = vacuity_problems(folder, vacuity, seconds, pool, out)
    wrong = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("sat", "unsat", "unknown", "error"))
    print(f"{len(files)} certificates: {good} as expected; not as expected: {wrong}; "
          f"{len(vacuity) - len(empty)} of {len(vacuity)} goals' assumptions shown satisfiable "
          f"(cvc5, {time.perf_counter() - t0:.1f} s)", file=out)
    missing = content + empty + index_problems(folder) + dependency_problems(answers)
    for line in missing:
        print(f"error: {line}", file=out)
    return 0 if good == len(files) and not missing else 1


def vacuity_problems(folder: str, queries: list, seconds: float, pool, out) -> list[str]:
    """Ask each vacuity query (`audit.Query`: a file's assertions without its goal) of cvc5 in a
    fresh process, each line printed; a problem for each that is not sat: the file's unsat
    would not rest on its goal (its assumptions alone are unsat, or undecided)."""
    if not queries:
        return []

    def ask(query):
        try:
            text, given = query.texts()
        except (OSError, ValueError) as e:
            return f"error: {e}", "-", 0.0
        if given is not None:  # the witness's values first: a ground query, sat there is sat without them
            got = _check_text(given, seconds)
            if got[0] == "sat":
                return got[0], "witness", got[2]
        return _check_text(text, seconds)
    problems = []
    for path, (answer, how, secs) in zip((q.path for q in queries), pool.map(ask, queries)):
        print(f"{answer:<8} {how:<8} {secs:7.2f}s  {os.path.relpath(path, folder)} without its goal"
              + ("" if answer == "sat" else "  FAIL (expected sat)"), file=out, flush=True)
        if answer != "sat":
            problems.append(f"{path}: vacuous? its assertions without its goal answer {answer}, not sat: "
                            f"its unsat would not rest on the obligation")
    return problems


def _check_text(text: str, seconds: float) -> tuple[str, str, float]:
    """`check_file` of an SMT-LIB text (a query `certify` makes: a vacuity query, a witnessed one),
    from a temporary file removed after."""
    fd, path = tempfile.mkstemp(prefix="layoutalg-query-", suffix=".smt2")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return check_file(path, seconds)
    finally:
        os.unlink(path)


if __name__ == "__main__":  # one file, one configuration: what `check_file` runs in a fresh process
    options = json.loads(sys.argv[2])
    if hasattr(signal, "alarm"):  # its own end, should the run that started it be killed: cvc5's
        # time limit is checked between steps, and one configuration (nl-cov) may run on past it
        signal.alarm(int(options.get("tlimit-per", "600000")) // 1000 + 20)  # (after `check_file` kills it)
    try:
        print(solve_file(sys.argv[1], options))
    except Exception as e:  # noqa: BLE001 - a file cvc5 cannot read is answered, not raised
        print(f"error: {type(e).__name__}: {e}".replace("\n", " "))

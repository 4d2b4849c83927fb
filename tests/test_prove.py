"""The prover: shipped specs proved, every mutant refuted with a counterexample, honest unknowns."""
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from layoutalg.compile.codegen import compile_family
from layoutalg.ir.family import resolve
from layoutalg.dsl.library import load
from layoutalg.verify.prove import obligations
from layoutalg.verify.prove.runner import Budgets, one_format, prove_applies, prove_family, prove_obligation

from conftest import ROOT

ALL_MUTANTS = sorted((ROOT / "tests" / "mutants").glob("m*.lal"))
ALL_EQUIVALENT = sorted((ROOT / "tests" / "mutants" / "equivalent").glob("e*.lal"))
NAMED = {"m03", "m08", "m33"}  # the tests below read their counterexamples
MUTANTS = ALL_MUTANTS if os.environ.get("LAYOUTALG_ALL_MUTANTS") == "1" else \
    [p for k, p in enumerate(ALL_MUTANTS) if k % 5 == 0 or p.stem in NAMED]
EQUIVALENT = ALL_EQUIVALENT if os.environ.get("LAYOUTALG_ALL_MUTANTS") == "1" else ALL_EQUIVALENT[::2]
"""Every fifth mutant (and those named) and every second equivalent one in the suite;
`LAYOUTALG_ALL_MUTANTS=1` proves all of them (a minute and a half on two cores)."""


def _own_families(lib, path):
    return [n for n in lib.families if lib.families[n].span.file == str(Path(path).resolve())]


def _expected(path) -> str:
    """The obligation a mutant's header says refutes it (`Expected: refuted (<obligation>)`)."""
    return re.search(r"Expected: refuted \(([\w-]+)\)", Path(path).read_text()).group(1)


def _quick(path):
    """An equivalent mutant: every obligation of its families hunted (quick mode), as `prove` does."""
    lib = load([path])
    return [r for n in _own_families(lib, path) for r in prove_family(lib, n, Budgets.of(), quick=True)]


def _refute(path):
    """A mutant: its family's `page-size` row and case paths (quick mode, as `prove_family` starts),
    then only the obligation its header names, hunted on the live paths as `prove_family` would
    (the other obligations' hunts are what made the whole family's quick proof slow)."""
    lib = load([path])
    (family,) = _own_families(lib, path)
    budgets, fam, name = Budgets.of(), resolve(lib, family), _expected(path)
    applies, status = prove_applies(lib, family, budgets, quick=True)
    if applies.status == "refuted":  # prove_family stops here too
        return [applies]
    if name == "one-format":
        return [applies, one_format(lib, family, budgets, None, True, fam, status, {})]
    return [applies, prove_obligation(lib, family, name, {}, budgets, True, fam, status, {})]


def _rows(path):
    return _quick(path) if path in ALL_EQUIVALENT else _refute(path)


@pytest.fixture(scope="module")
def mutant_rows():
    with ProcessPoolExecutor(max_workers=2) as pool:
        return dict(zip(EQUIVALENT + MUTANTS, pool.map(_rows, EQUIVALENT + MUTANTS)))


def test_there_are_at_least_30_mutants():
    assert len(ALL_MUTANTS) >= 30 and len(MUTANTS) >= 10


@pytest.mark.parametrize("path", MUTANTS, ids=[p.stem for p in MUTANTS])
def test_mutant_is_refuted_with_a_counterexample(mutant_rows, path):
    rows = mutant_rows[path]
    refuted = [r for r in rows if r.status == "refuted"]
    assert refuted, f"{path.name} was not refuted: {[(r.obligation, r.status) for r in rows]}"
    detail = refuted[0].detail
    assert re.match(r"^\S+\.lal:\d+: ", detail), detail        # file and line
    assert "tp=" in detail and "with " in detail                 # the parameter values
    expected = _expected(path)
    assert expected in obligations.OBLIGATIONS
    assert refuted[0].obligation == expected, (refuted[0].obligation, expected)  # refuted by what it breaks
    # the counterexample is a size the runtime serves: the prover reads the compiler's guards too
    lib = load([path])
    for r in refuted:
        if r.witness:
            compile_family(resolve(lib, r.family)).evaluate(r.witness)


@pytest.mark.parametrize("path", EQUIVALENT, ids=[p.stem for p in EQUIVALENT])
def test_equivalent_mutant_is_not_refuted(mutant_rows, path):
    assert path.read_text().startswith("# Equivalent")             # argued in a comment
    assert not [r for r in mutant_rows[path] if r.status == "refuted"]


def test_writers_counterexample_names_ranks_block_index_and_byte(mutant_rows):
    detail = next(r.detail for r in mutant_rows[ROOT / "tests" / "mutants" / "m03.lal"] if r.status == "refuted")
    assert re.search(r"m03\.lal:\d+: ranks \d+ and \d+ both write canonical byte \d+ of block \d+ "
                     r"\(kv=\d+, t=\d+, h=\d+, d=\d+\) with tp=\d+", detail), detail


def test_gap_is_named_in_bytes(mutant_rows):
    rows = mutant_rows[ROOT / "tests" / "mutants" / "m08.lal"]
    detail = next(r.detail for r in rows if r.status == "refuted")
    assert re.search(r"canonical page: bytes \[\d+, \d+\) are not covered", detail), detail


def test_shipped_family_is_proved_for_all_sizes():
    lib = load([ROOT / "specs" / "mla.lal"])
    rows = prove_family(lib, "mla")
    assert {r.status for r in rows} == {"proved"}
    symbolic = [r.obligation for r in rows if "all sizes" in r.method]
    assert set(obligations.SYMBOLIC) <= set(symbolic) and {"structure", "page-size"} <= set(symbolic)


def test_a_bug_in_the_algebra_is_caught_by_digits_match_spec():
    """Translation validation: a wrong stride in the IR (not in the spec) is refuted."""
    import dataclasses

    from layoutalg.ir.family import resolve
    from layoutalg.verify.prove.runner import prove_obligation
    lib = load([ROOT / "specs" / "split_hnd.lal"])
    fam = resolve(lib, "split_hnd")
    v = fam.variants[0]
    broken = [dataclasses.replace(d, canonical=d.canonical * 2) if d.name == "h" else d for d in v.digits]
    fam.variants[0] = dataclasses.replace(v, digits=tuple(broken))
    row = prove_obligation(lib, "split_hnd", "digits-match-spec", {}, Budgets.of(), fam=fam)
    assert row.status == "refuted"
    assert re.search(r"by the digit table, but at \d+ and \d+ by the spec", row.detail), row.detail


def test_unknown_is_never_proved(monkeypatch):
    monkeypatch.setattr(obligations.Model, "solve", lambda self, v, b, seeds=1, how=None: ("unknown", None))
    lib = load([ROOT / "specs" / "opaque.lal"])
    rows = prove_family(lib, "opaque")
    by = {r.obligation: r for r in rows}
    assert all(by[n].status == "unknown" for n in ("page-size",) + obligations.SYMBOLIC + obligations.PER_CONFIGURATION)
    assert by["structure"].status == "proved"  # the sympy certificate does not use Z3
    assert not [r for r in rows if "Error" in (r.detail or "")]  # undecided by the stub, not a crash in it


def test_prove_command_caches_and_fails_on_refutation(tmp_path):
    env = {**os.environ, "LAYOUTALG_CACHE": str(tmp_path)}
    # a generous budget: these proofs take well under a second, but CI machines can be slow
    cmd = [sys.executable, "-m", "layoutalg.cli", "prove", "specs/opaque.lal", "--jobs", "1"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "12 obligations: 10 proved for all sizes, 2 proved on stated configurations" in first.stdout
    assert "[1/1] opaque: proved" in first.stderr                 # progress, one line per family
    second = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert second.returncode == 0 and "cached" in second.stdout
    bad = subprocess.run([sys.executable, "-m", "layoutalg.cli", "prove", "tests/mutants/m21.lal"],
                         capture_output=True, text=True, cwd=ROOT, env=env)
    assert bad.returncode == 1 and "refuted" in bad.stdout and "m21.lal:" in bad.stdout


def test_runtime_asks_coverage_without_z3(tmp_path):
    env = {**os.environ, "LAYOUTALG_CACHE": str(tmp_path)}
    subprocess.run([sys.executable, "-m", "layoutalg.cli", "prove", "specs/opaque.lal"],
                   capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    code = ("import sys\nfrom layoutalg.verify.coverage import coverage\n"
            "c = coverage('opaque', dict(tp=2, pcp=1, dcp=1, interleave=1, total_heads=4, heads=2, block_size=16,"
            " head_size=128, dtype_bytes=2, page_size=16384, per_token_head_quant=0, compress_ratio=1))\n"
            "print(sorted(c.proved)[:2], sorted(c.not_covered), 'z3' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                         check=True).stdout
    assert out.strip().endswith("False")                  # never imported z3
    assert "['runs-cover-local', 'runs-match-spec']" in out  # runs are proved on enumerated configurations only


@pytest.mark.parametrize("path", ALL_MUTANTS + ALL_EQUIVALENT, ids=[p.stem for p in ALL_MUTANTS + ALL_EQUIVALENT])
def test_mutant_is_a_well_formed_spec(path):
    """A mutant must be wrong, not malformed: it parses, resolves and compiles."""
    from layoutalg.compile.codegen import compile_family
    from layoutalg.ir.family import check_layouts, resolve
    lib = load([path])
    check_layouts(lib)
    for name in _own_families(lib, path):
        assert lib.families[name].serves in ("attention", "mla", "fallback")
        compile_family(resolve(lib, name))


def test_quick_mode_never_reports_proved():
    """Counterexample hunting on small sizes finds nothing in a correct spec, and proves nothing."""
    lib = load([ROOT / "specs" / "opaque.lal"])
    rows = prove_family(lib, "opaque", quick=True)
    assert rows and {r.status for r in rows} == {"unknown"}


def test_every_registered_obligation_has_one_query_and_one_explanation():
    """The registry (`store.OBLIGATIONS`) names each row once; each Z3 row has its query in
    `obligations.QUERIES` (or one of the queries made otherwise) and its words in
    `explain.EXPLAIN`, and neither table holds a name the registry does not."""
    from layoutalg.verify.prove.explain import EXPLAIN
    from layoutalg.verify.prove.obligations import PAGE, PER_CONFIGURATION, QUERIES, SYMBOLIC
    registered = set(obligations.OBLIGATIONS)
    elsewhere = {"digits-match-spec", "one-format", "runs-match-spec", "runs-cover-local"}  # own queries
    not_z3 = {"structure", "page-size"}  # sympy's certificate; Z3's witnesses, no violation to explain
    assert set(QUERIES) | elsewhere | not_z3 == registered and not set(QUERIES) & (elsewhere | not_z3)
    assert set(EXPLAIN) == registered - not_z3
    assert set(SYMBOLIC) | set(PER_CONFIGURATION) | set(PAGE) <= registered


def test_the_families_with_the_most_case_paths_are_handed_to_workers_first():
    """`prove --jobs` starts the longest proofs first (case paths over a family's parts, a rough
    measure), so one does not start last and run alone; ties keep the order given, and a
    family whose paths cannot be read is no error (the prover says what it cannot read)."""
    from layoutalg.cli.prove import heaviest_first
    from layoutalg.dsl.library import load_default
    lib = load_default()
    order = heaviest_first(lib, ["mla", "split_hnd", "nvfp4", "split_nhd"])
    assert order == ["nvfp4", "split_hnd", "split_nhd", "mla"]  # 32 paths, 8 and 8 (as given), 4

    class Unread:
        def parts_of(self, family):
            raise LookupError(family)
    assert heaviest_first(Unread(), ["a", "b"]) == ["a", "b"]

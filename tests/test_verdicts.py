"""Every verdict means what it says: regressions for the ways a row could say "proved" or
"ok" having checked nothing, or be wrong, and for commands that crashed or exited 0."""
import re
import shutil
import subprocess
import sys

import pytest

from layoutalg.compile.codegen import compile_family
from layoutalg.verify.check import check_family
from layoutalg.ir.family import resolve
from layoutalg.dsl.library import load
from layoutalg.verify.prove.configurations import configurations_by_path
from layoutalg.verify.prove.runner import Budgets, prove_applies, prove_family, prove_obligation, prove_runs
from layoutalg.verify.prove.meaning import agnostic_rows

from conftest import ROOT

SPECS = ROOT / "specs"

HALF_PAGE = """\
import "grids.lal"

layout bytes(P):
    index b < P
    offset b

family halfpage serves fallback:
    grid private
    let half = page_size / 2
    local     bytes(half)
    canonical bytes(half * tp * pcp)
    shard (b) -> (rank * half + b)
"""


def _folder(tmp_path, **files):
    shutil.copy(SPECS / "grids.lal", tmp_path / "grids.lal")
    for name, text in files.items():
        (tmp_path / f"{name}.lal").write_text(text)
    return tmp_path


def _variant(src: str, old: str, new: str, name: str) -> str:
    text = (SPECS / f"{src}.lal").read_text()
    assert old in text
    return text.replace(old, new).replace(f"family {src}", f"family {name}")


def _cli(*args, env=None, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "layoutalg.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env)


def _rows(path, family):
    lib = load([path])
    return {r.obligation: r for r in prove_family(lib, family)}


def _one_row(path, family, name):
    """One obligation's row as `prove_family` reaches it, without the other obligations' proofs."""
    rows = {r.obligation: r for r in prove_family(load([path]), family, only={name})}
    assert set(rows) == {"page-size", name} and rows["page-size"].status == "proved", rows["page-size"]
    return rows[name]


def test_half_page_fallback_is_refuted_by_page_size(tmp_path):
    folder = _folder(tmp_path, half=HALF_PAGE)
    rows = _rows(folder / "half.lal", "halfpage")
    assert rows["page-size"].status == "refuted"
    assert "half.lal:10: the family never applies" in rows["page-size"].detail
    assert "holds exactly page_size bytes" in rows["page-size"].detail
    assert not [r for r in rows.values() if r.status == "proved"]
    assert rows["structure"].status == "unknown" and "applies nowhere" in rows["structure"].detail


def test_a_page_of_regions_that_applies_nowhere_proves_nothing(tmp_path):
    """The regions' stride chains hold, but of no configuration: no row is proved."""
    shutil.copy(SPECS / "state.lal", tmp_path / "state.lal")
    text = (SPECS / "mamba2.lal").read_text()
    old = "require ssm_heads % tp == 0"
    assert old in text
    (tmp_path / "mamba2.lal").write_text(text.replace(old, old + " and conv_kernel > 4096"))
    rows = prove_family(load([tmp_path / "mamba2.lal"]), "mamba2")
    assert any(r.obligation == "page-size" and r.status == "refuted" for r in rows)
    assert not [r for r in rows if r.status == "proved"], [(r.family, r.obligation) for r in rows if r.status == "proved"]


def test_check_fails_a_family_certified_nowhere(tmp_path):
    folder = _folder(tmp_path, half=HALF_PAGE)
    proc = _cli("check", folder / "half.lal")
    assert proc.returncode == 1, proc.stdout
    assert "certified on no configuration" in proc.stdout and " ok " not in proc.stdout


def test_writers_cover_is_surjectivity_on_its_own(tmp_path):
    """Ranks that overlap leave half the canonical page unwritten: writers-cover alone refutes it."""
    text = _variant("split_nhd", "head(h)", "(head_shard // 2) * heads + h", "overlap")
    folder = _folder(tmp_path, overlap=text)
    lib = load([folder / "overlap.lal"])
    row = prove_obligation(lib, "overlap", "writers-cover", {}, Budgets.of())
    assert row.status == "refuted", row
    assert "never written" in row.detail and "tp=" in row.detail


def test_writers_cover_refutes_a_short_canonical_page_by_counting():
    cover = prove_obligation(load([ROOT / "tests" / "mutants" / "m08.lal"]), "split_nhd_m08", "writers-cover", {},
                             Budgets.of())
    assert cover.status == "refuted" and "writer class(es) store" in cover.detail and "canonical page" in cover.detail


def test_a_family_outside_the_samples_is_exercised_from_its_guards(tmp_path):
    """`require per_token_head_quant == 1`: no sample applies, Z3 finds configurations that do."""
    text = _variant("split_nhd", "require per_token_head_quant == 0", "require per_token_head_quant == 1", "quant")
    folder = _folder(tmp_path, quant=text)
    lib = load([folder / "quant.lal"])
    cf = compile_family(resolve(lib, "quant"))
    applies, status = prove_applies(lib, "quant", Budgets.of())
    assert applies.status == "proved" and "live" in {s for s, _ in status.values()}, (applies, status)
    by_path = configurations_by_path(lib, "quant", cf, status, Budgets.of(), 24, 8)
    runs = prove_runs(lib, "quant", "runs-match-spec", by_path, Budgets.of(), cf)
    assert runs.status == "proved", (runs.method, runs.detail)
    assert len(runs.configurations) > 0 and all(c["per_token_head_quant"] == 1 for c in runs.configurations)
    rep = check_family(lib, cf)
    assert rep.ok and rep.witnesses > 0 and rep.certified > 0


def test_zero_witnesses_are_unknown_never_proved():
    """With no budget Z3 decides nothing: no configuration, no proof; every row says unknown."""
    lib = load([SPECS / "split_nhd.lal"])
    rows = prove_family(lib, "split_nhd", Budgets.of(rlimit=1))
    assert {r.status for r in rows if r.obligation != "structure"} == {"unknown"}


def test_runs_on_no_configuration_are_unknown():
    lib = load([SPECS / "opaque.lal"])
    cf = compile_family(resolve(lib, "opaque"))
    from layoutalg.verify.prove.runner import prove_runs
    row = prove_runs(lib, "opaque", "runs-match-spec", {}, Budgets.of(), cf)
    assert row.status == "unknown" and "no configuration" in row.method


def test_configurations_come_from_every_live_case():
    lib = load([SPECS / "split_hnd.lal"])
    cf = compile_family(resolve(lib, "split_hnd"))
    _, status = prove_applies(lib, "split_hnd", Budgets.of())
    by_path = configurations_by_path(lib, "split_hnd", cf, status, Budgets.of())
    live = [p for p, (s, _) in status.items() if s == "live"]
    assert len(live) >= 4 and all(len(by_path[p]) >= 8 for p in live)


def test_refuted_grid_prints_its_table(tmp_path):
    """`writer < tp % shards` was refuted, then crashed formatting the gap."""
    grids = (SPECS / "grids.lal").read_text().replace("writer < tp / shards / dcp", "writer < tp % shards")
    (tmp_path / "grids.lal").write_text(grids)
    shutil.copy(SPECS / "split_nhd.lal", tmp_path / "split_nhd.lal")
    proc = _cli("prove", tmp_path / "split_nhd.lal", "--jobs", "1", env={"LAYOUTALG_CACHE": "off", "PATH": ""})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "refuted" in proc.stdout and "obligations:" in proc.stdout


def test_prove_into_a_closed_pipe_still_exits_1_on_refutation():
    p = subprocess.Popen([sys.executable, "-m", "layoutalg.cli", "prove", "tests/mutants/m21.lal", "--jobs", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env={"LAYOUTALG_CACHE": "off"})
    p.stdout.readline()
    p.stdout.close()  # what `| head -1` does
    err = p.stderr.read().decode()
    assert p.wait() == 1 and "Traceback" not in err


@pytest.mark.parametrize("what", ["empty folder", "empty file", "grids only"])
@pytest.mark.parametrize("cmd", ["check", "prove"])
def test_nothing_to_check_is_an_error(tmp_path, what, cmd):
    target = {"empty folder": tmp_path, "empty file": tmp_path / "e.lal", "grids only": tmp_path / "grids.lal"}[what]
    (tmp_path / "e.lal").write_text("" if what == "empty file" else "# nothing\n")
    if what == "grids only":
        shutil.copy(SPECS / "grids.lal", target)
    if what == "empty folder":
        (tmp_path / "e.lal").unlink()
    proc = _cli(cmd, target, env={"LAYOUTALG_CACHE": "off"})
    assert proc.returncode == 2 and "nothing to" in proc.stderr, proc.stdout + proc.stderr


def test_check_refuses_an_extent_it_cannot_enumerate(tmp_path):
    text = _variant("split_nhd", "index kv < 2,", "index kv < 2 * 1000000000,", "huge")
    folder = _folder(tmp_path, huge=text)
    proc = _cli("check", folder / "huge.lal", env={"LAYOUTALG_CACHE": "off"})
    assert proc.returncode == 1 and "beyond what check enumerates" in proc.stdout, proc.stdout + proc.stderr
    assert "huge.lal:" in proc.stdout


def test_check_findings_name_the_spec_line():
    lib = load([ROOT / "tests" / "mutants" / "m01.lal"])
    name = next(n for n in lib.families if n.endswith("m01"))
    rep = check_family(lib, compile_family(resolve(lib, name)))
    assert rep.errors and all(e.startswith("tests/mutants/m01.lal:") for e in rep.errors), rep.errors[:3]


def test_verdicts_are_the_same_on_every_run():
    """Budgets are Z3 resource counts and every family is proved in a process of its own,
    started from one state: the same table (times aside) whatever else runs beside it."""
    def table(*specs, jobs="1"):
        out = _cli("prove", *specs, "--jobs", jobs, env={"LAYOUTALG_CACHE": "off"}).stdout
        return [line.split()[1:4] + line.split()[5:] for line in out.splitlines() if " mla " in line]

    alone = table("specs/mla.lal")  # a second run, and one beside another family's proof
    assert alone and alone == table("specs/opaque.lal", "specs/mla.lal", jobs="2")


def test_a_guard_decided_result_is_never_cached():
    from layoutalg.cli.prove import cacheable
    row = dict(spec="s", family="f", obligation="local-bijective", status="proved",
               method="symbolic: all sizes, all ranks", seconds=0.0, detail="", configurations=[], final=True)
    assert cacheable([row]) and cacheable([{**row, "status": "refuted"}])
    assert not cacheable([{**row, "final": False}])       # the wall-clock guard decided part of it
    assert not cacheable([row, {**row, "status": "unknown"}])
    assert not cacheable([])


def test_a_forged_proof_cache_entry_is_not_believed(tmp_path, monkeypatch):
    import json
    from layoutalg.verify.prove import store
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path))
    tmp_path.chmod(0o700)
    lib = load([SPECS / "opaque.lal"])
    key = store.proof_key(lib, "opaque")
    rows = [dict(spec="s", family="opaque", obligation="x", status="proved", method="m", seconds=0.0, detail="",
                 configurations=[], final=True, witness={})]
    store.write(key, rows)
    assert store.read(key) == rows
    path = next(tmp_path.glob("proof-*.json"))
    path.write_text(json.dumps({"key": "another key", "rows": rows}))     # moved from another entry
    assert store.read(key) is None
    path.write_text(json.dumps({"key": key, "rows": [{"status": "proved"}]}))  # not a row
    assert store.read(key) is None
    path.write_text(json.dumps({"key": key, "rows": rows}))
    tmp_path.chmod(0o777)                                                 # anyone could have written it
    assert store.read(key) is None
    tmp_path.chmod(0o700)


NEGATIVE_DIVISOR = """\
import "grids.lal"

layout bytes(P):
    index b < P
    offset b

family neg serves fallback:
    grid private
    let d = (head_size - 128) * (head_size - 128) - 1
    let k = (d - 1) // d
    local     bytes(page_size)
    canonical bytes(page_size * tp * pcp)
    shard (b) -> (rank * page_size + b + k)
"""


def test_a_negative_divisor_fails_closed_where_the_prover_assumes_it_positive(tmp_path):
    """At head_size = 128 the divisor is -1: the prover reads `//` for positive divisors only,
    so the runtime must not apply the family there (it used to, and wrote outside the page)."""
    folder = _folder(tmp_path, neg=NEGATIVE_DIVISOR)
    lib = load([folder / "neg.lal"])
    cf = compile_family(resolve(lib, "neg"))
    sizes = dict(tp=2, pcp=1, dcp=1, interleave=1, total_heads=1, heads=1, block_size=4, head_size=128,
                 dtype_bytes=1, page_size=8, per_token_head_quant=0, compress_ratio=1)
    from layoutalg.compile.compiled import GuardFailed
    with pytest.raises(GuardFailed, match="not positive|is positive does not hold"):
        cf.evaluate(sizes)
    rows = {r.obligation: r for r in prove_family(lib, "neg")}
    assert rows["shard-in-range"].status == "proved"   # true wherever the family applies


TRANSPOSE_ABOVE_16 = """\
layout rows(R, C, A, B):
    index r < R, c < C
    offset A * r + B * c

grid g:
    world tp * pcp
    ranks pcp_rank < pcp, tp_rank < tp
    replica pcp_rank, tp_rank
    case block_size <= 16:
        let A = 4, B = 1
    case block_size > 16:
        let A = 1, B = block_size

family tr serves fallback:
    grid g
    local     rows(block_size, 4, 4, 1)
    canonical rows(block_size, 4, A, B)
    shard (r, c) -> (r, c)
"""


def test_a_case_that_applies_only_to_large_sizes_is_not_dead(tmp_path):
    (tmp_path / "tr.lal").write_text(TRANSPOSE_ABOVE_16)
    rows = {r.obligation: r for r in prove_family(load([tmp_path / "tr.lal"]), "tr")}
    assert rows["single-rank-identity"].status == "refuted"
    assert "apply nowhere" not in rows["page-size"].method


def test_check_sees_a_single_rank_that_moves_bytes(tmp_path):
    (tmp_path / "tr.lal").write_text(TRANSPOSE_ABOVE_16.replace("<= 16", "<= 2").replace("> 16", "> 2"))
    lib = load([tmp_path / "tr.lal"])
    rep = check_family(lib, compile_family(resolve(lib, "tr")))
    assert not rep.ok and "the canonical page is not the local page" in rep.errors[0]


def test_a_group_past_the_proved_domain_is_refused():
    from layoutalg.errors import ConfigError
    from layoutalg.runtime.records import ParallelConfig
    with pytest.raises(ConfigError, match=r"pcp = 1000000 is outside the proved domain \[1, 64\]"):
        ParallelConfig(1024, 1, pcp=10 ** 6)


def test_an_agnostic_claim_the_canonical_page_does_not_bear_is_not_proved(tmp_path):
    """`agnostic when tp >= 1` on the private grid: the canonical page grows with tp and pcp.
    (Only the claim and one-format are read: the other rows' proofs are left out.)"""
    grids = (SPECS / "grids.lal").read_text().replace(
        "    ranks pcp_rank < pcp, tp_rank < tp", "    ranks pcp_rank < pcp, tp_rank < tp\n    agnostic when tp >= 1")
    (tmp_path / "grids.lal").write_text(grids)
    shutil.copy(SPECS / "opaque.lal", tmp_path / "opaque.lal")
    rows = {r.obligation: r for r in prove_family(load([tmp_path / "opaque.lal"]), "opaque", only={"one-format"})}
    assert rows["one-format"].status == "unknown"
    assert "page_size*pcp*tp, which depends on pcp, tp" in rows["one-format"].detail
    shipped = {r.obligation: r for r in prove_family(load([SPECS / "mla.lal"]), "mla", only={"one-format"})}
    assert shipped["one-format"].status == "proved" and "where claimed agnostic" in shipped["one-format"].method


def test_a_family_the_compiler_rejects_gets_rows_not_a_traceback(tmp_path):
    """`local block_size(...)` names no layout: the direct reading fails too; every row says why."""
    text = (SPECS / "split_hnd.lal").read_text().replace("local     split_hnd(", "local     block_size(")
    _folder(tmp_path, broken=text)
    rows = prove_family(load([tmp_path / "broken.lal"]), "split_hnd")
    assert rows and {r.status for r in rows} == {"unknown"}
    assert "unknown layout 'block_size'" in rows[0].detail
    proc = _cli("prove", tmp_path / "broken.lal", "--jobs", "1", env={"LAYOUTALG_CACHE": "off"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr


def test_a_division_behind_or_is_evaluated_and_fails_closed(tmp_path, monkeypatch):
    """`tp == 1 or block_size / 2 >= 1`: Python's `or` used to skip the division the prover assumes exact."""
    monkeypatch.setenv("LAYOUTALG_CACHE", "off")
    (tmp_path / "sc.lal").write_text(
        "layout rows(T, R):\n    index t < T, b < R\n    offset b + R * t\n"
        "grid g:\n    world tp * pcp\n    ranks pcp_rank < pcp, tp_rank < tp\n"
        "family sc serves blob:\n    grid g\n    require page_size % block_size == 0\n"
        "    require tp == 1 or block_size / 2 >= 1\n"
        "    local     rows(block_size, page_size / block_size)\n"
        "    canonical rows(block_size * tp * pcp, page_size / block_size)\n"
        "    shard (t, b) -> (rank * block_size + t, b)\n")
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    d = Deriver(str(tmp_path))
    assert d.derive(LayerSpec("blob", 8, 4), None, ParallelConfig(1, 1)).result == "certified"
    res = d.derive(LayerSpec("blob", 6, 3), None, ParallelConfig(1, 1))
    assert res.result == "no_mappings" and any("3 / 2 is not a whole number" in r for r in res.reasons)


def test_agnostic_must_be_one_layout_across_the_cases_that_claim_it(tmp_path):
    """Which case applies depends on tp; both claim agnostic but place bytes differently."""
    (tmp_path / "ag.lal").write_text(
        "layout rows(R, C, A, B):\n    index r < R, c < C\n    offset A * r + B * c\n"
        "grid g:\n    world tp * pcp\n    ranks pcp_rank < pcp, tp_rank < tp\n    replica pcp_rank, tp_rank\n"
        "    agnostic when tp >= 1\n"
        "    case tp == 1:\n        let A = 4, B = 1\n    case tp > 1:\n        let A = 1, B = block_size\n"
        "family ag serves fallback:\n    grid g\n    local     rows(block_size, 4, 4, 1)\n"
        "    canonical rows(block_size, 4, A, B)\n    shard (r, c) -> (r, c)\n")
    lib = load([tmp_path / "ag.lal"])
    (claim,) = agnostic_rows(lib, "ag")
    assert claim.status == "unknown" and "canonical layouts of those cases differ" in claim.detail
    rows = {r.obligation: r for r in prove_family(lib, "ag")}  # and Z3 finds the byte the two read apart
    assert rows["one-format"].status == "refuted" and "one page format names two elements" in rows["one-format"].detail


def test_a_family_that_claims_nothing_and_shares_no_page_has_no_one_format_row():
    rows = prove_family(load([SPECS / "opaque.lal"]), "opaque")
    assert "one-format" not in {r.obligation for r in rows}


def test_the_proof_cache_key_follows_a_grid_taken_from_a_file_not_imported(tmp_path):
    from layoutalg.verify.prove.store import proof_key
    shutil.copy(SPECS / "grids.lal", tmp_path / "grids.lal")
    (tmp_path / "split_nhd.lal").write_text((SPECS / "split_nhd.lal").read_text().replace('import "grids.lal"', ""))
    before = proof_key(load([tmp_path]), "split_nhd")
    grids = (tmp_path / "grids.lal").read_text().replace("        replica pcp_rank\n", "")
    (tmp_path / "grids.lal").write_text(grids)
    assert proof_key(load([tmp_path]), "split_nhd") != before


def test_a_size_no_family_reads_is_an_error():
    from layoutalg.errors import ConfigError
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    with pytest.raises(ConfigError, match="no family of this spec library reads 'pcp_replica'"):
        Deriver().derive(LayerSpec("attention", 64, 4, 1, 8, 2, sizes={"pcp_replica": 1}), None, ParallelConfig(1, 1))


def test_runs_refuses_built_in_names_in_size_and_a_grid_that_is_not_the_group(tmp_path):
    assert _cli("runs", "specs/split_nhd.lal", "--size", "tp=4").returncode == 2
    (tmp_path / "w.lal").write_text(
        "layout bytes(P):\n    index b < P\n    offset b\n"
        "grid g:\n    world tp\n    ranks tp_rank < tp\n"
        "family w serves fallback:\n    grid g\n    local     bytes(page_size)\n"
        "    canonical bytes(page_size * tp)\n    shard (b) -> (tp_rank * page_size + b)\n")
    proc = _cli("runs", tmp_path / "w.lal", "--tp", "2", "--pcp", "2", "--page-size", "8")
    assert proc.returncode == 1 and "worker group has tp * pcp = 4" in proc.stdout


OVERLAPPING_CASES = """\
layout heads_page(H, D, e):
    index h < H, d < D
    offset d + D * h
    element e bytes

grid g:
    world tp * pcp
    require pcp == 1
    case tp == 1:
        let mult = 1
    case tp >= 1:                      # overlaps the first case at tp == 1, which wins there
        let mult = (tp + STEP) // tp
    ranks head_shard < tp

family ov serves attention:
    grid g
    require total_heads % tp == 0
    require heads == total_heads / tp * mult
    local     heads_page(heads, head_size, dtype_bytes)
    canonical heads_page(total_heads, head_size, dtype_bytes)
    shard (h, d) -> (head_shard * heads + h, d)
"""


@pytest.mark.parametrize("step, sound", [(1, True), (2, False)])
def test_cases_that_overlap_are_read_first_match_as_the_runtime_takes_them(tmp_path, step, sound):
    """The second case is wrong only where the first one already holds (tp == 1, step 1): the
    runtime never takes it there, so nothing is refuted. With step 2 it is wrong at tp == 2,
    where it does run, and that is refuted with a counterexample there."""
    folder = _folder(tmp_path, ov=OVERLAPPING_CASES.replace("STEP", str(step)))
    if sound:  # every row: none refuted
        rows = _rows(folder / "ov.lal", "ov")
        refuted = {n: r for n, r in rows.items() if r.status == "refuted"}
        assert not refuted, refuted
        assert rows["shard-in-range"].status == rows["writers-cover"].status == "proved"
    else:  # only the row that breaks, proved as prove_family proves it
        row = _one_row(folder / "ov.lal", "ov", "shard-in-range")
        assert row.status == "refuted" and "tp=2" in row.detail, (row.status, row.detail)


CANCELLED_DIVISION = """\
import "grids.lal"

layout bytes(P):
    index b < P
    offset b

family van serves fallback:
    grid private
    require pcp == 1
    require tp / 2 - tp / 2 == 0          # the division cancels: nothing would evaluate it
    local     bytes(page_size)
    canonical bytes(page_size * (tp - tp % 2))
    shard (b) -> (tp_rank * page_size + b)
"""


def test_an_exact_division_that_cancels_is_still_checked_where_the_prover_assumes_it(tmp_path):
    """The prover reads every `/` as exact; so must the runtime, even where sympy cancels the
    division away. Else odd tp passed the guards the prover took to exclude it."""
    from layoutalg.compile.compiled import GuardFailed
    folder = _folder(tmp_path, van=CANCELLED_DIVISION)
    cf = compile_family(resolve(load([folder / "van.lal"]), "van"))
    sizes = {"tp": 1, "pcp": 1, "page_size": 12}
    with pytest.raises(GuardFailed, match=r"van.lal:10:.*\(tp\) / \(2\) is a whole number"):
        cf.evaluate(sizes)
    assert cf.evaluate({**sizes, "tp": 2}).canonical_page == 24


UNUSED_LET = """\
import "grids.lal"

let junk = tp / 3                        # read by nothing: never evaluated, so never a guard

layout bytes(P):
    index b < P
    offset b

family lets serves fallback:
    grid private
    let unused = tp / 5
    let half = page_size / 2
    require half - half == 0             # reads half: its division is checked
    local     bytes(page_size)
    canonical bytes(page_size * tp * pcp)
    shard (b) -> (rank * page_size + b)
"""


def test_a_division_in_a_let_is_checked_only_where_the_let_is_read(tmp_path):
    """As the spec's reading (and the prover) evaluates a let only where it is used."""
    from layoutalg.compile.compiled import GuardFailed
    folder = _folder(tmp_path, lets=UNUSED_LET)
    cf = compile_family(resolve(load([folder / "lets.lal"]), "lets"))
    assert cf.evaluate({"tp": 2, "pcp": 1, "page_size": 8}).canonical_page == 16   # tp / 3, tp / 5 not asked
    with pytest.raises(GuardFailed, match=r"\(page_size\) / \(2\) is a whole number"):
        cf.evaluate({"tp": 2, "pcp": 1, "page_size": 7})


THROUGH_A_FUNCTION = """\
layout bytes(P):
    index b < P
    offset b

grid g:
    world tp * pcp
    require pcp == 1
    let half = page_size / 2
    fn off(x) = x + half - half          # the shard map reads half through the function
    ranks tp_rank < tp

family viafn serves fallback:
    grid g
    local     bytes(page_size)
    canonical bytes(page_size * tp)
    shard (b) -> (tp_rank * page_size + off(b))
"""


def test_a_let_read_through_a_function_has_its_division_checked(tmp_path):
    from layoutalg.compile.compiled import GuardFailed
    folder = _folder(tmp_path, viafn=THROUGH_A_FUNCTION)
    cf = compile_family(resolve(load([folder / "viafn.lal"]), "viafn"))
    assert cf.evaluate({"tp": 2, "pcp": 1, "page_size": 8}).canonical_page == 16
    with pytest.raises(GuardFailed, match=r"\(page_size\) / \(2\) is a whole number"):
        cf.evaluate({"tp": 2, "pcp": 1, "page_size": 7})


def test_an_agnostic_claim_read_through_the_per_rank_page_is_not_proved():
    """page_size is each rank's page: where the local layout builds it from heads it moves with
    tp, so a canonical page built from it is not agnostic (both the region and its pads)."""
    lib = load([ROOT / "tests/data/broken/agnostic_page_size.lal"])
    rows = agnostic_rows(lib, "lead3")
    assert rows and all(r.status == "unknown" for r in rows), [(r.family, r.status) for r in rows]
    assert any("depends on page_size" in r.detail for r in rows)


def test_mlas_agnostic_claim_says_it_reads_the_page_as_a_model_size():
    from layoutalg.dsl.library import load_default
    row = next(r for r in prove_family(load_default(), "mla") if r.obligation == "one-format")
    assert row.status == "proved"
    from layoutalg.verify.prove.structural import agnostic
    fam = resolve(load_default(), "mla")
    details = [agnostic(fam, v).detail for v in fam.variants if str(v.agnostic) != "False"]
    assert any("page_size) is read as a model size" in d for d in details), details


def test_single_rank_identity_compares_the_pages_too(tmp_path):
    spec = _folder(tmp_path, **{"twice": """
grid one:
    world tp * pcp
    require pcp == 1 and dcp == 1
    ranks r < tp

layout bytes(P):
    index b < P
    offset b

family twice serves twice:
    grid one
    local     bytes(page_size)
    canonical bytes(2 * page_size)
    shard (b) -> (r * page_size + b)
"""})
    row = _rows(spec / "twice.lal", "twice")["single-rank-identity"]
    assert row.status == "refuted" and "the local page is" in row.detail and "canonical page is" in row.detail, \
        (row.status, row.detail)


def test_rows_of_a_spec_that_changed_during_the_run_are_not_cached(tmp_path, monkeypatch):
    """The parent keys each family by the bytes it read at the start; a worker proves what it
    reads later. Where the two differ the rows are not stored (a stale 'proved' for a
    broken spec would otherwise be replayed): the parent's key is made to differ here."""
    import io
    from layoutalg.cli import prove as cli
    monkeypatch.setenv("LAYOUTALG_CACHE", str(tmp_path / "cache"))
    written = []
    monkeypatch.setattr(cli, "_write", lambda key, data: written.append(key))
    spec = shutil.copy(SPECS / "opaque.lal", tmp_path / "opaque.lal")
    shutil.copy(SPECS / "grids.lal", tmp_path / "grids.lal")
    real = cli.proof_key
    monkeypatch.setattr(cli, "proof_key", lambda lib, fam, rlimit: "stale-" + real(lib, fam, rlimit))
    cli.prove_paths([spec], jobs=1, use_cache=False, out=io.StringIO())
    assert written == []
    monkeypatch.setattr(cli, "proof_key", real)
    cli.prove_paths([spec], jobs=1, use_cache=False, out=io.StringIO())
    assert len(written) == 1                     # the same bytes on both sides: cached as before


def test_a_term_that_is_never_exact_proves_nothing():
    """Every query assumes each division exact; where one never is, no row may be proved:
    the witness search reads the shard map too, so the family applies nowhere."""
    rows = _rows(ROOT / "tests/data/broken/never_exact.lal", "vacuous")
    assert rows["page-size"].status == "refuted"
    assert not [n for n, r in rows.items() if r.status == "proved"], {n: r.status for n, r in rows.items()}


@pytest.mark.parametrize("spec", ["agnostic_tied_agn", "agnostic_tied_agn3", "agnostic_tied_agn4"])
def test_a_page_tied_to_tp_by_a_case_or_a_guard_is_not_agnostic(spec):
    """The local page is page_size itself, but a case (`k` per tp) or a guard (`page_size /
    block_size == tp + 1`) makes it a function of tp: one model, a canonical page per tp."""
    rows = agnostic_rows(load([ROOT / f"tests/data/broken/{spec}.lal"]), "wobble")
    assert rows and all(r.status == "unknown" for r in rows), [(r.status, r.detail) for r in rows]


def test_a_family_the_runtime_cannot_compile_proves_nothing():
    """`r / 2 * 2`: not in normal form, so the runtime never applies it; Z3 read the division
    as exact and 'proved' rows that held only for even ranks."""
    rows = _rows(ROOT / "tests/data/broken/rank_division.lal", "rhalf")
    assert rows and all(r.status == "unknown" for r in rows.values()), {n: r.status for n, r in rows.items()}
    assert "not in normal form" in rows["writers-cover"].detail


def test_check_says_when_a_family_was_exercised_on_few_configurations_and_why():
    """vLLM v0's layout needs head_size % (16 / dtype_bytes) == 0, which no built-in sample meets:
    it passes on Z3's configurations, and check says so, with the guard that refused the samples."""
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "check", "tests/data/v0/"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"note: exercised on \d+ configuration\(s\) only, all found by Z3 from the family's guards: "
                     r"none of the \d+ sample configuration\(s\) meets them \(the commonest refusal.*"
                     r"v0_paged.lal:\d+:\d+: require head_size % x == 0 does not hold\)", proc.stdout), proc.stdout
    shipped = subprocess.run([sys.executable, "-m", "layoutalg", "check", "specs/split_nhd.lal"], capture_output=True,
                             text=True, cwd=ROOT)
    assert "exercised on" not in shipped.stdout  # the control: a family the samples meet says nothing


def test_the_samples_read_until_each_wanted_path_is_full_give_the_same_configurations(monkeypatch):
    """`sample_configurations` with `wanted` paths stops once each has its `limit`: those paths
    get the very configurations (and order) a reading of every sample gives them, in fewer readings."""
    from layoutalg.verify.prove import configurations
    lib = load([SPECS / "dsa_indexer.lal"])
    part = lib.parts_of("dsa_indexer")[0]
    cf = compile_family(resolve(lib, part))
    read = []

    class Counted(configurations.Reading):
        def __post_init__(self):
            read.append(1)
            super().__post_init__()
    monkeypatch.setattr(configurations, "Reading", Counted)
    every = configurations.sample_configurations(lib, part, cf, 24)
    all_reads = len(read)
    wanted = [p for p, group in every.items() if len(group) == 24]
    assert len(wanted) >= 2
    read.clear()
    some = configurations.sample_configurations(lib, part, cf, 24, wanted)
    assert {p: some[p] for p in wanted} == {p: every[p] for p in wanted}
    assert 0 < len(read) < all_reads
    assert configurations.sample_configurations(lib, part, cf, 24, []) == {}


def test_configurations_are_kept_for_every_path_where_no_path_status_was_read():
    """Where the page-size row could not be read (no status for any path), the sample
    configurations of every path are kept for the per-configuration rows, as before the
    samples were read only until the live paths had their share; a status with live paths
    keeps theirs alone."""
    lib = load([SPECS / "split_nhd.lal"])
    cf = compile_family(resolve(lib, "split_nhd"))
    every = configurations_by_path(lib, "split_nhd", cf, {}, Budgets.of(), 24, 0)
    assert len(every) > 2 and all(every.values())
    one = next(iter(every))
    dead = {p: ("dead", []) for p in every if p != one}
    assert configurations_by_path(lib, "split_nhd", cf, {one: ("live", []), **dead}, Budgets.of(), 24, 0) == \
        {one: every[one]}
    assert configurations_by_path(lib, "split_nhd", cf, {one: ("live", [])}, Budgets.of(), 24, 0) == every

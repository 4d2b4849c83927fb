"""Certificates: rows proved for all sizes as SMT-LIB files, re-checked by cvc5 (`layoutalg certify`)."""
import csv
import io
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from layoutalg.dsl.library import load
from layoutalg.errors import LayoutalgError
from layoutalg.verify.audit import audit
from layoutalg.verify.certify import certify, check_file
from layoutalg.verify.prove.certificates import texts
from layoutalg.verify.prove.certificate_files import write
from layoutalg.verify.prove.store import Row

def run(*args):
    return subprocess.run([sys.executable, "-m", "layoutalg.cli", *args], capture_output=True, text=True, cwd=ROOT)


ALL_SIZES = ("local-bijective", "canonical-bijective", "shard-in-range", "shard-injective", "writers-disjoint",
             "writers-cover", "single-rank-identity", "digits-match-spec", "sequence-order", "one-format")
"""split_nhd's rows Z3 proves for all sizes (`layoutalg prove specs/split_nhd.lal`)."""


@pytest.fixture(scope="module")
def proved(tmp_path_factory):
    """split_nhd's certificates, from rows as `prove` gives them (the files are the spec's; the
    rows only choose which are written), so the suite does not prove the family again."""
    folder = tmp_path_factory.mktemp("c") / "certs"
    lib = load([str(ROOT / "specs" / "split_nhd.lal")])
    rows = [Row("split_nhd.lal", "split_nhd", "structure", "proved", "stride chains (sympy): all sizes", 1.0),
            Row("split_nhd.lal", "split_nhd", "runs-match-spec", "proved", "symbolic rank on 168 configurations", 1.0)]
    rows += [Row("split_nhd.lal", "split_nhd", n, "proved", "symbolic: all sizes, all ranks", 1.0) for n in ALL_SIZES]
    write(lib, rows, str(folder))
    return folder, ""


def test_prove_writes_certificates_of_the_rows_it_proves(tmp_path):
    r = run("prove", "specs/opaque.lal", "--certificates", str(tmp_path / "c"), "--jobs", "1")
    assert r.returncode == 0, r.stderr
    # digits-match-spec writes the arithmetic's side theorems as instances of MONOTONE and STRICT
    assert "certificates: 25 SMT-LIB files for 9 rows and 5 shared lemmas" in r.stdout and "layoutalg certify" in r.stdout, r.stdout
    rows = {x["obligation"]: x["certificate"] for x in csv.DictReader(open(tmp_path / "c" / "index.tsv"),
                                                                      delimiter="\t")}
    assert rows["page-size"] == "1 file(s)" and rows["writers-cover"] == "6 file(s)"
    assert rows["structure"].startswith("none: ") and "runs-match-spec" not in rows
    assert (tmp_path / "c" / "opaque" / "applies.case0.smt2").exists()


def test_prove_writes_a_file_a_case_and_says_which_rows_have_none(proved):
    folder, _ = proved
    rows = {(r["family"], r["obligation"]): r["certificate"]
            for r in csv.DictReader(open(folder / "index.tsv"), delimiter="\t")}
    # one query a live case path of the heads grid, and the chains of head(h) and (where cp > 1) token(t)
    assert rows[("split_nhd", "shard-in-range")] == "17 file(s)"
    assert rows[("split_nhd", "writers-cover")] == "52 file(s)"  # five parts, the canonical layout's chain and those
    assert rows[("split_nhd", "local-bijective")] == "21 file(s)"  # the query's two parts and its chain a path
    assert rows[("shared-lemmas", "digit")] == "1 file(s)"
    assert rows[("split_nhd", "structure")].startswith("none: the stride chains")
    assert ("split_nhd", "runs-match-spec") not in rows  # proved on configurations, not for all sizes
    assert len([f for f in (folder / "split_nhd").glob("shard-in-range.case*.smt2") if "chain" not in f.name]) == 7
    text = (folder / "split_nhd" / "shard-in-range.case4.smt2").read_text()
    assert re.search(r"; spec: .*split_nhd\.lal:\d+", text) and "; case path 4: " in text
    # case path 3 (pcp replicas with cp > 1) applies nowhere: its one file says so, and no row's file is written
    dead = (folder / "split_nhd" / "applies.case3.smt2").read_text()
    assert "; expect: unsat" in dead and "applies nowhere" in dead
    assert [f.name for f in (folder / "split_nhd").glob("*.case3*.smt2")] == ["applies.case3.smt2"]
    assert "(set-logic ALL)" in text and "(check-sat)" in text and "(declare-fun tp () Int)" in text


def test_a_page_of_regions_certifies_each_region_and_says_why_the_tiling_has_none(tmp_path):
    lib = load([str(ROOT / "specs" / "mamba2.lal")])  # rows as `prove` gives them (which rows is all write reads)
    proved = [Row("mamba2.lal", "mamba2", "regions-tile-local", "proved", "concatenation: all sizes", 1.0),
              Row("mamba2.lal", "mamba2.x", "page-size", "proved",
                  "symbolic: all sizes (the guards make the local layout the page); applies at tp=1", 1.0),
              Row("mamba2.lal", "mamba2.tail'", "digits-match-spec", "proved", "symbolic: all sizes, all ranks", 1.0),
              Row("mamba2.lal", "mamba2.x", "one-format", "proved",
                  "canonical layout free of parallel sizes and one across the claiming cases (sympy): all sizes", 1.0)]
    write(lib, proved, str(tmp_path / "m"))
    rows = {(x["family"], x["obligation"]): x["certificate"]
            for x in csv.DictReader(open(tmp_path / "m" / "index.tsv"), delimiter="\t")}
    assert rows[("mamba2", "regions-tile-local")].startswith("none: the concatenation argument")
    assert rows[("mamba2.x", "page-size")] == "2 file(s)"  # its guards make the layout the page, per case
    assert rows[("mamba2.x", "one-format")].startswith("none: the agnostic claim")
    # a canonical pad the regions always fill: a file a case shows its box empty, none asserts false
    pad = tmp_path / "m" / "mamba2.tail-canonical"
    assert sorted(f.name for f in pad.glob("digits-match-spec.*")) == ["digits-match-spec.case0.smt2",
                                                                       "digits-match-spec.case1.smt2"]
    assert "the pad's box empty at every size" in (pad / "digits-match-spec.case0.smt2").read_text()
    assert not [f for f in (tmp_path / "m").rglob("*.smt2") if re.search(r"\(assert\s+false\s*\)", f.read_text())]
    assert all(v.startswith("none: ") or v.endswith("file(s)") for v in rows.values())


def test_a_certificate_of_a_broken_spec_is_sat(tmp_path):
    lib = load([str(ROOT / "tests" / "mutants" / "m04.lal")])  # head-shard offset off by one shard
    family = next(iter(lib.families))
    stem, text = texts(lib, family, "shard-in-range")[0]  # the first case: one head a rank
    assert "; layoutalg certificate: family split_nhd_m04, obligation shard-in-range, case path 0" in text
    (tmp_path / f"{stem}.smt2").write_text(text)
    assert check_file(str(tmp_path / f"{stem}.smt2"), 20)[0] == "sat"
    r = run("certify", str(tmp_path), "--timeout", "20")
    assert r.returncode == 1 and re.search(r"^sat .*FAIL \(expected unsat\)$", r.stdout, re.M), r.stdout


def test_a_case_that_applies_nowhere_fails_its_applies_file(proved, tmp_path):
    folder, _ = proved
    text = (folder / "split_nhd" / "applies.case0.smt2").read_text()
    assert "; expect: sat" in text
    # the case's assumptions include the arithmetic's side theorems, instances of shared lemmas: they travel with it
    (tmp_path / "split_nhd").mkdir()
    shutil.copytree(folder / "shared-lemmas", tmp_path / "shared-lemmas")
    (tmp_path / "split_nhd" / "applies.case0.smt2").write_text(text)
    assert run("certify", str(tmp_path)).returncode == 0  # some sizes satisfy case path 0's guards
    (tmp_path / "split_nhd" / "applies.case0.smt2").write_text(
        text.replace("(check-sat)", "(assert (< tp 1))\n(check-sat)"))
    r = run("certify", str(tmp_path))  # no sizes left: the case's certificates would be vacuous
    assert r.returncode == 1 and "FAIL (expected sat)" in r.stdout, r.stdout


def test_editing_one_constant_changes_the_answer(proved, tmp_path):
    folder, _ = proved
    text = (folder / "split_nhd" / "shard-in-range.case0.smt2").read_text()
    edited, n = re.subn(r"\(>= (kv@\d+) 2\)", r"(>= \1 1)", text, count=1)  # the canonical box: kv < 1
    assert n == 1
    (tmp_path / "as_written.smt2").write_text(text)
    (tmp_path / "edited.smt2").write_text(edited)
    assert check_file(str(tmp_path / "as_written.smt2"), 20)[0] == "unsat"
    assert check_file(str(tmp_path / "edited.smt2"), 20)[0] == "sat"


def test_nothing_to_check_is_an_error_not_a_pass(tmp_path):
    with pytest.raises(LayoutalgError, match="holds no .smt2 certificate"):
        certify(str(tmp_path))
    (tmp_path / "broken.smt2").write_text("(assert (> x 0))\n(check-sat)\n")  # x is never declared
    assert check_file(str(tmp_path / "broken.smt2"), 5)[0].startswith("error")
    lib = load([str(ROOT / "specs" / "split_nhd.lal")])
    row = Row("split_nhd.lal", "split_nhd", "runs-match-spec", "proved", "symbolic rank on 168 configurations", 1.0)
    with pytest.raises(LayoutalgError, match="no row is proved for all sizes"):
        write(lib, [row], str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()


def test_prove_refuses_a_folder_that_holds_files_before_proving(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    r = run("prove", "specs/split_nhd.lal", "--certificates", str(tmp_path))
    assert r.returncode != 0 and "is not an empty folder" in r.stderr
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_bad_headers_and_a_changed_folder_fail(proved, tmp_path):
    folder, _ = proved
    (tmp_path / "a.smt2").write_text("; expect: unknown\n(set-logic ALL)\n(assert (foo\n")  # no header may excuse a file
    r = run("certify", str(tmp_path))
    assert r.returncode == 1 and "expects 'unknown'" in r.stdout, r.stdout
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    for f in (copy / "split_nhd").glob("*.smt2"):  # keep one row's files (and its cases'), then remove one of them
        if not f.name.startswith(("single-rank-identity", "applies")):
            f.unlink()
    next((copy / "split_nhd").glob("single-rank-identity.case*.smt2")).unlink()
    (copy / "index.tsv").rename(tmp_path / "index.tsv")
    out = io.StringIO()
    assert certify(str(copy), 20, 2, out) == 0, out.getvalue()  # no index there: file by file
    (tmp_path / "index.tsv").rename(copy / "index.tsv")
    out = io.StringIO()
    assert certify(str(copy), 20, 2, out) == 1  # the index says 7
    assert "error: split_nhd single-rank-identity: index.tsv lists 7 file(s), the folder holds 6" in out.getvalue()


def test_an_empty_conjunction_is_written_as_smt_lib(tmp_path):
    import z3
    from layoutalg.verify.prove.smt_text import smt2_text
    text = smt2_text([z3.Or(z3.And(), z3.Bool("x")), z3.Not(z3.Or())])  # z3 prints these as bare `and` / `or`
    assert " and" not in text.replace("(and", "") and "true" in text and "false" in text
    (tmp_path / "t.smt2").write_text("; expect: sat\n(set-logic ALL)\n" + text)
    assert check_file(str(tmp_path / "t.smt2"), 10)[0] == "sat"


def test_a_folder_under_a_file_is_refused_before_proving(tmp_path):
    (tmp_path / "F").write_text("")
    r = run("prove", "specs/split_nhd.lal", "--certificates", str(tmp_path / "F" / "certs"))
    assert r.returncode == 2 and "is a file, not a folder" in r.stderr, r.stderr


def test_the_shard_map_rows_are_certified_along_their_chains_by_cvc5(proved, tmp_path):
    folder, _ = proved  # case path 5: GQA heads on several ranks, tokens dealt out over DCP and PCP
    shutil.copytree(folder / "shared-lemmas", tmp_path / "shared-lemmas")
    here = tmp_path / "split_nhd"
    here.mkdir()
    for row in ("shard-in-range", "writers-disjoint", "writers-cover"):  # (every file of the library: the benchmark)
        for f in (folder / "split_nhd").glob(f"{row}.case5.*smt2"):
            shutil.copy(f, here / f.name)
    shutil.copy(folder / "split_nhd" / "applies.case3.smt2", here)  # the dead case: unsat, as it says
    shutil.copy(folder / "split_nhd" / "applies.case5.smt2", here)  # case path 5 applies: sat, as it says
    chain = (folder / "split_nhd" / "local-bijective.case5.chain-local.smt2").read_text()
    assert "Horner form of its atoms (d, h, t, kv, fastest first)" in chain
    token = (here / "writers-disjoint.case5.chain-shard-t.smt2").read_text()
    assert "(t % interleave, dcp_rank, pcp_rank, t // interleave, fastest first)" in token
    uses = (here / "writers-disjoint.case5.smt2").read_text()
    # (MONOTONE and STRICT: the arithmetic's side theorems between divisions by tp, written as their instances)
    assert "; depends on: writers-disjoint.case5.chain-shard-t.smt2 writers-disjoint.case5.chain-shard-h.smt2 " \
           "../shared-lemmas/digit.smt2 ../shared-lemmas/range.smt2 ../shared-lemmas/quotient.smt2 " \
           "../shared-lemmas/monotone.smt2 ../shared-lemmas/strict.smt2\n" in uses
    inside = (here / "shard-in-range.case5.smt2").read_text()  # one point: no two numbers to tell apart
    assert "../shared-lemmas/range.smt2 ../shared-lemmas/quotient.smt2 " in inside and "digit.smt2" not in inside
    n = len(list(tmp_path.rglob("*.smt2")))
    assert n == 21  # 5 lemmas, the dead case, case 5's applies file and 14 of its files: 7 queries (writers-cover's
    # in 5 parts), 7 chains
    out = io.StringIO()
    assert certify(str(tmp_path), 20, 2, out) == 0, out.getvalue()
    assert f"{n} certificates: {n} as expected" in out.getvalue()


def _local_chain(lib, family):
    from layoutalg.dsl.interpret import paths
    from layoutalg.verify.prove import lemmas
    from layoutalg.verify.prove.obligations import Model
    m = Model(lib, family, next(iter(paths(lib, family))))
    ldef, bound = m.r.layout("local")
    i, ci = m.index("local", "x")
    return m, lemmas.chain(m, lambda p: m.r.expr(ldef.offset, {**bound, **p[0]}), (i, {}), m.r.extents("local")), i, ci


def test_a_chain_in_the_wrong_order_or_a_lemma_without_its_bound_is_sat(tmp_path):
    import z3
    from layoutalg.verify.prove import lemmas
    from layoutalg.verify.prove.smt_text import smt2_text
    m, c, i, ci = _local_chain(load([str(ROOT / "specs" / "split_nhd.lal")]), "split_nhd")
    assert [a[1] for a in c.order] == ["d", "h", "t", "kv"]
    claimed = c.instances((i, {}))[0]  # only inside the box, as its own file shows it
    assert z3.is_implies(claimed) and z3.eq(claimed.arg(0), z3.And(*c.bounds((i, {}))))
    swapped = lemmas.Chain((c.order[1], c.order[0], *c.order[2:]), c.extents, c.base, c.term, c.ops)
    for name, chain in (("right", c), ("swapped", swapped)):
        text = smt2_text([*m.assumptions(), *ci, z3.Not(chain.identity((i, {}))), *m.ops.side])
        (tmp_path / f"{name}.smt2").write_text("(set-logic ALL)\n" + text)
    assert check_file(str(tmp_path / "right.smt2"), 20)[0] == "unsat"
    assert check_file(str(tmp_path / "swapped.smt2"), 20)[0] == "sat"
    for name, said, negation in lemmas.shared():
        (tmp_path / f"{name}.smt2").write_text("(set-logic ALL)\n" + smt2_text(negation))
        assert check_file(str(tmp_path / f"{name}.smt2"), 20)[0] == "unsat", said
    a, x, X, y, Y = z3.Ints("a x X y Y")  # DIGIT without `x < a`: 3 + 2*0 = 1 + 2*1
    loose = z3.Implies(z3.And(x + a * X == y + a * Y, x >= 0, y >= 0, y < a), z3.And(x == y, X == Y))
    (tmp_path / "loose.smt2").write_text("(set-logic ALL)\n" + smt2_text([z3.Not(loose)]))
    assert check_file(str(tmp_path / "loose.smt2"), 20)[0] == "sat"


def test_a_layout_that_is_not_one_to_one_has_no_chain():
    lib = load([str(ROOT / "tests" / "mutants" / "m10.lal")])  # the head stride is H, not D
    family = next(iter(lib.families))
    assert _local_chain(lib, family)[1] is None
    made = texts(lib, family, "local-bijective")  # the query whole, as before (cvc5: sat, in 11 s)
    assert [stem for stem, _ in made][:2] == ["local-bijective.case0.part0", "local-bijective.case0.part1"]
    assert not any("chain" in text for _, text in made)


def test_a_certificate_checked_without_the_files_it_rests_on_fails(proved, tmp_path):
    folder, _ = proved
    alone = tmp_path / "split_nhd"
    alone.mkdir()
    shutil.copy(folder / "split_nhd" / "local-bijective.case0.part0.smt2", alone)  # its chain and lemmas left behind
    out = io.StringIO()
    assert certify(str(alone), 20, 1, out) == 1, out.getvalue()
    assert "1 certificates: 1 as expected" in out.getvalue()  # unsat alone, but not a proof alone
    assert "rests on " + str(alone / "local-bijective.case0.chain-local.smt2") + ", which was not checked" \
           in out.getvalue() and "shared-lemmas/digit.smt2, which was not checked" in out.getvalue()
    shutil.copytree(folder / "shared-lemmas", tmp_path / "shared-lemmas")
    shutil.copy(folder / "split_nhd" / "local-bijective.case0.chain-local.smt2", alone)
    shutil.copy(folder / "split_nhd" / "applies.case0.smt2", alone)  # (its case applies: certify asks it)
    out = io.StringIO()
    assert certify(str(tmp_path), 20, 2, out) == 0, out.getvalue()


def test_a_region_in_rows_wider_than_itself_is_chained_by_its_radix():
    lib = load([str(ROOT / "specs" / "gdn.lal")])  # k's channels j in rows of 2Q + V: w's stride is no extent
    m, c, i, _ = _local_chain(lib, "gdn.k")
    assert [a[1] for a in c.order] == ["j", "w"] and c.radix is not None and c.box is None
    text = next(t for stem, t in texts(lib, "gdn.k", "local-bijective") if stem.endswith("chain-local"))
    assert "each radix (the next atom's stride over its own) at least its atom's extent" in text


def test_a_region_ends_inside_its_page_by_a_fits_file_and_two_lemmas(tmp_path):
    """The page of a region is the sum of its regions: the out-of-page part rests on the
    region's `fits` (its last element ends by the page's last byte), BOUND and SCALE; the
    fits claim holds with no byte to spare for GDN's last region, and fails with one less."""
    import z3
    from layoutalg.verify.prove import lemmas
    from layoutalg.verify.prove.smt_text import smt2_text
    lib = load([str(ROOT / "specs" / "gdn.lal")])
    m, c, _, _ = _local_chain(lib, "gdn.recurrent")
    e, page = m.element("local"), m.r.page("local")
    assert lemmas.holds(m, c.fits(e, page)) and not lemmas.holds(m, c.fits(e, page - 1))
    rows = [Row("gdn.lal", "gdn.recurrent", "local-bijective", "proved", "symbolic: all sizes, all ranks", 1.0)]
    write(lib, rows, str(tmp_path / "c"))
    out_part = (tmp_path / "c" / "gdn.recurrent" / "local-bijective.case0.part1.smt2").read_text()
    assert "local-bijective.case0.chain-local-fits.smt2" in out_part and "../shared-lemmas/scale.smt2" in out_part \
        and "../shared-lemmas/bound.smt2" in out_part
    out = io.StringIO()
    assert certify(str(tmp_path / "c"), 20, 2, out) == 0, out.getvalue()
    # 2 parts, chain, fits, the case's applies file; DIGIT, RANGE, BOUND, SCALE, and MONOTONE and STRICT (the
    # arithmetic's side theorems between divisions by tp)
    assert "11 certificates: 11 as expected" in out.getvalue()
    x, M, E, A, r, X, B = z3.Ints("x M E A r X B")  # each lemma without one hypothesis: sat
    for name, loose in (("scale", z3.Implies(E > 0, E * x + E <= E * M)),                    # no x < M
                        ("bound", z3.Implies(z3.And(x <= A, X <= B), x + r * X <= A + r * B)),  # no r >= 0
                        ("low", z3.Implies(z3.And(x >= 0, X >= 0), x + r * X >= 0)),             # no r >= 0
                        ("above", z3.Implies(x >= M, E * x >= E * M))):                         # no e >= 0
        (tmp_path / f"{name}.smt2").write_text("(set-logic ALL)\n" + smt2_text([z3.Not(loose)]))
        assert check_file(str(tmp_path / f"{name}.smt2"), 20)[0] == "sat", name


def test_rows_whose_strides_are_products_of_sizes_get_polynomial_radices():
    """quant_packed's rows: d, then K and V of a token R bytes apart, then tokens and heads;
    each radix is the next stride over this one, a polynomial, never a division."""
    import z3
    from layoutalg.verify.prove.lemmas import _ratio
    m, c, _, _ = _local_chain(load([str(ROOT / "specs" / "quant_packed.lal")]), "quant_packed.data")
    assert [a[1] for a in c.order] == ["d", "kv", "t", "h"]
    radix = {a[1]: z3.simplify(r) for a, r in c.radix.items()}
    assert str(radix["kv"]) == "2" and str(radix["t"]) == "block_size", radix
    R, T = z3.Ints("R T")
    assert z3.eq(z3.simplify(_ratio(2 * R * T, 2 * R)), T) and _ratio(R, 2 * R * T) is None and _ratio(R + 1, R) is None
    assert _ratio(R + 1, z3.IntVal(2)) is None and _ratio(2 * R + 3 * R * T, z3.IntVal(2)) is None  # halves
    assert z3.eq(z3.simplify(_ratio(2 * R + 4 * T, z3.IntVal(2)) - (R + 2 * T)), z3.IntVal(0))


def _digits_files(lib, family, case, tmp_path):
    """`family`'s digits-match-spec files of case path `case` and the shared lemmas they rest
    on, written into `tmp_path`: name -> path."""
    from layoutalg.verify.prove import lemmas
    from layoutalg.verify.prove.certificates import lemma_text
    out = {}
    for name, said, assertions in lemmas.shared():
        (tmp_path / f"{name}.smt2").write_text(lemma_text(name, said, assertions))
    for stem, text in texts(lib, family, "digits-match-spec"):
        if stem.startswith(f"digits-match-spec.case{case}."):
            (tmp_path / f"{stem}.smt2").write_text(text)
            out[stem] = tmp_path / f"{stem}.smt2"
    return out


def test_a_digit_table_that_splits_tokens_by_the_interleave_is_certified_and_a_wrong_stride_is_sat(tmp_path,
                                                                                                  monkeypatch):
    # packed HND with context parallelism (case path 1): the digit table reads a token as t % interleave
    # and (t // interleave) % (block_size / interleave), the spec as t itself and token(t); the files tie
    # each division to the others (DIGIT, QUOTIENT), which is what lets cvc5 read them as one token
    import dataclasses

    from layoutalg.verify.prove import certificates
    lib = load([str(ROOT / "specs" / "packed_hnd.lal")])
    (tmp_path / "good").mkdir()
    good = _digits_files(lib, "packed_hnd", 1, tmp_path / "good")
    assert sorted(good) == ["digits-match-spec.case1.part0", "digits-match-spec.case1.part1"]  # local, canonical
    canonical = good["digits-match-spec.case1.part1"].read_text()
    assert "; depends on: ../shared-lemmas/digit.smt2 ../shared-lemmas/quotient.smt2" in canonical
    assert [check_file(str(p), 20)[0] for p in good.values()] == ["unsat", "unsat"]
    assert check_file(str(tmp_path / "good" / "digit.smt2"), 20)[0] == "unsat"
    assert check_file(str(tmp_path / "good" / "quotient.smt2"), 20)[0] == "unsat"

    real = certificates.resolve

    def wrong(lib_, family):  # the canonical stride of t // interleave off by one interleave: a broken table
        fam = real(lib_, family)
        v = fam.variants[1]
        digits = [dataclasses.replace(d, canonical=d.canonical + d.local) if d.name == "t//interleave" else d
                  for d in v.digits]
        assert digits != list(v.digits)
        variants = list(fam.variants)
        variants[1] = dataclasses.replace(v, digits=tuple(digits))
        return dataclasses.replace(fam, variants=variants)
    monkeypatch.setattr(certificates, "resolve", wrong)
    (tmp_path / "bad").mkdir()
    bad = _digits_files(lib, "packed_hnd", 1, tmp_path / "bad")
    assert check_file(str(bad["digits-match-spec.case1.part0"]), 20)[0] == "unsat"  # the local strides are right
    assert check_file(str(bad["digits-match-spec.case1.part1"]), 20)[0] == "sat"


def test_the_regions_of_a_page_tiled_by_z3_are_ordered_by_files_of_their_own_and_an_overlap_is_sat(tmp_path):
    """gdn_ds's page (the tiling row Z3 proves directly): each pair of regions rests on both
    regions' chains, their first and last bytes (LOW, ABOVE, BOUND, SCALE) and a file of the
    sizes alone that one ends by the other's first byte; all unsat under cvc5. With v moved one
    row of channels back into k, no order holds of k and v and their part is satisfiable: Z3
    finds the byte they share."""
    from layoutalg.verify.prove import lemmas
    from layoutalg.verify.prove.certificates import lemma_text
    (tmp_path / "c" / "gdn_ds").mkdir(parents=True)
    (tmp_path / "c" / "shared-lemmas").mkdir()
    for name, said, assertions in lemmas.shared():
        (tmp_path / "c" / "shared-lemmas" / f"{name}.smt2").write_text(lemma_text(name, said, assertions))
    made = dict(texts(load([str(ROOT / "specs" / "gdn_ds.lal")]), "gdn_ds", "regions-tile-local"))
    cases = dict(texts(load([str(ROOT / "specs" / "gdn_ds.lal")]), "gdn_ds", "applies"))  # (certify asks each case)
    for stem, text in {**made, **cases}.items():
        (tmp_path / "c" / "gdn_ds" / f"{stem}.smt2").write_text(text)
    k_v = next(stem for stem, text in made.items() if "chain-k-before-v.smt2" in text)
    assert "chain-region-k.smt2" in made[k_v] and "../shared-lemmas/above.smt2" in made[k_v]
    assert "claim: region k ends (its last element's last byte) by region v's first byte." in \
        made["regions-tile-local.case0.chain-k-before-v"]
    out = io.StringIO()
    assert certify(str(tmp_path / "c"), 20, 2, out) == 0, out.getvalue()
    n = len(made) + len(cases) + len(lemmas.LEMMAS)
    assert f"{n} certificates: {n} as expected" in out.getvalue()

    for f in (ROOT / "specs").glob("*.lal"):
        (tmp_path / f.name).write_text(f.read_text())
    spec = (tmp_path / "gdn_ds.lal").read_text()
    assert spec.count("offset w + K * (2 * Q + j)") == 1
    (tmp_path / "gdn_ds.lal").write_text(spec.replace("offset w + K * (2 * Q + j)", "offset w + K * (2 * Q - 1 + j)"))
    broken = dict(texts(load([str(tmp_path / "gdn_ds.lal")]), "gdn_ds", "regions-tile-local"))
    assert "regions-tile-local.case0.chain-k-before-v" not in broken and "before-v" not in broken[k_v]
    (tmp_path / "broken.smt2").write_text(broken[k_v])
    import z3
    s = z3.Solver()
    s.from_string(broken[k_v])
    assert s.check() == z3.sat  # a byte of k and one of v at the same place: the file is a counterexample


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """split_nhd's direct plan tp=2 -> tp=1, its certificates written by `prove --reshard`."""
    folder = tmp_path_factory.mktemp("plan") / "c"
    r = run("prove", "specs/split_nhd.lal", "--reshard", "tp=2", "tp=1", "--family", "split_nhd",
            "--certificates", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"certificates: \d+ SMT-LIB files for 1 plans in ", r.stdout), r.stdout
    return folder


def test_a_plan_with_pcp_ranks_as_replicas_is_certified_too(tmp_path):
    """Plans are certified at pcp_replicas = 1 as at 0: PCP ranks holding replicas of the KV,
    stored under tp=2,pcp=2 and loaded at tp=2: its applies files and steps, all as expected."""
    folder = tmp_path / "c"
    r = run("prove", "specs/split_nhd.lal", "--reshard", "tp=2,pcp=2,pcp_replicas=1", "tp=2", "--family", "split_nhd",
            "--certificates", str(folder))
    assert r.returncode == 0, r.stdout + r.stderr
    files = sorted((folder / "split_nhd").glob("reshard.tp2.pcp2.pcp_replicas1-to-tp2.*.smt2"))
    assert any(".applies.case" in f.name for f in files) and sum(".step" in f.name for f in files) > 10
    out = io.StringIO()
    assert certify(str(folder), 20, 2, out) == 0, out.getvalue()
    assert re.search(r"(\d+) certificates: \1 as expected", out.getvalue()), out.getvalue()[-500:]


def test_a_direct_plans_proof_for_all_sizes_is_written_as_steps_cvc5_re_checks(plan):
    """`prove --reshard --certificates`: each query the plan's proof answered unsat is a step
    file (the local layout's one-to-one step along its chain, DIGIT and RANGE; its elements
    inside the page by LOW, ABOVE, BOUND and SCALE), all unsat; each case pair that applies
    has its applies file (sat), and each step its goal (its assumptions sat without it)."""
    rows = {(x["family"], x["obligation"]): x["certificate"]
            for x in csv.DictReader(open(plan / "index.tsv"), delimiter="\t")}
    steps = sorted((plan / "split_nhd").glob("reshard.tp2-to-tp1.step*.smt2"))
    applies = sorted((plan / "split_nhd").glob("reshard.tp2-to-tp1.applies.case*.smt2"))
    assert [f.name for f in applies] == ["reshard.tp2-to-tp1.applies.case0-0.smt2",
                                         "reshard.tp2-to-tp1.applies.case4-0.smt2"]
    assert all("; expect: sat\n; witness: (= " in f.read_text() for f in applies)
    assert rows[("split_nhd", "reshard.tp2-to-tp1")] == f"{len(steps) + len(applies)} file(s)" and len(steps) > 20
    said = [f.read_text() for f in steps]
    assert any("; step: cases 0 (store) and 0 (load): consumer rank 0 (reshard-match): no size where a byte is read "
               "from a producer byte holding another canonical byte." in t for t in said)
    bijective = next(t for t in said if "the load configuration's local layout is one-to-one" in t)
    assert re.search(r"; depends on: reshard\.tp2-to-tp1\.step\d+\.chain-local\.smt2 \.\./shared-lemmas/digit\.smt2",
                     bijective)
    of_pair = [t for t in said if t.count("; step: cases 0 (store) and 0 (load): ")]
    assert of_pair and all("; goal: assertion " in t and "reshard.tp2-to-tp1.applies.case0-0.smt2" in t for t in of_pair)
    dead = [t for t in said if "apply together at no size" in t]
    assert dead and not any("; goal: " in t for t in dead)  # (a dead pair's assumptions are what it shows empty)
    out = io.StringIO()
    assert certify(str(plan), 20, 2, out) == 0, out.getvalue()
    shared = {f.stem for f in (plan / "shared-lemmas").glob("*.smt2")}
    assert {"digit", "range", "low", "above", "bound", "scale"} <= shared  # along the chain; each element in the page
    n = len(steps) + len(applies) + len(shared)
    assert f"{n} certificates: {n} as expected" in out.getvalue()
    goals = sum(1 for t in said if "; goal: " in t and ".chain-" not in t)
    assert f"{goals} of {goals} goals' assumptions shown satisfiable" in out.getvalue()


def test_a_direct_plan_without_its_pairs_applies_file_or_a_steps_goal_is_rejected(plan, tmp_path):
    """A step of a case pair that applies rests on the pair's applies file (sat): removed, or
    forged to expect unsat, certify's audit rejects the folder; so it does a step whose goal line
    is gone. The folder as written has no problem."""
    assert audit(str(plan), sorted(str(f) for f in plan.rglob("*.smt2")))[0] == []
    where = "split_nhd/reshard.tp2-to-tp1.applies.case0-0.smt2"
    step = next(f for f in sorted((plan / "split_nhd").glob("reshard.tp2-to-tp1.step*.smt2"))
                if "; step: cases 0 (store) and 0 (load): consumer rank 0" in f.read_text())
    for k, edit in enumerate(["remove", "unsat", "goal"]):
        copy = tmp_path / f"c{k}"
        shutil.copytree(plan, copy)
        (copy / "index.tsv").unlink()
        if edit == "remove":
            (copy / where).unlink()
        elif edit == "unsat":
            (copy / where).write_text((copy / where).read_text().replace("; expect: sat", "; expect: unsat"))
        else:
            text = (copy / "split_nhd" / step.name).read_text()
            (copy / "split_nhd" / step.name).write_text(re.sub(r"; goal: [^\n]*\n", "", text))
        files = sorted(str(f) for f in copy.rglob("*.smt2"))
        said = "\n".join(audit(str(copy), files)[0])  # (certify's content audit: it fails the run on any line)
        if edit == "goal":
            assert f"{step.name}:1: a direct plan's step states no goal" in said, said
        else:
            assert "its case pair has no applies file expecting sat (reshard.tp2-to-tp1.applies.case0-0.smt2)" in said, said


def test_a_plan_not_proved_for_all_sizes_gets_no_certificate_and_nothing_is_written(tmp_path):
    r = run("prove", "tests/mutants/m04.lal", "--reshard", "tp=2", "tp=1", "--certificates", str(tmp_path / "c"))
    assert r.returncode == 2 and "no plan is proved for all sizes: nothing to certify" in r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "c").exists()


def test_the_pipeline_row_is_one_certificate_and_one_edit_breaks_it(tmp_path):
    r = run("prove", "--pipeline", "--certificates", str(tmp_path / "c"))
    assert r.returncode == 0 and "certificates: 1 SMT-LIB file in" in r.stdout, r.stdout + r.stderr
    text = (tmp_path / "c" / "pipeline" / "stages-tile.case0.smt2").read_text()
    assert "; expect: unsat" in text and text.count("(- pp 1)") == 1
    assert certify(str(tmp_path / "c"), 20, 1, io.StringIO()) == 0
    (tmp_path / "edited.smt2").write_text(text.replace("(- pp 1)", "(- pp 2)"))  # one stage too many gets a layer more
    assert check_file(str(tmp_path / "edited.smt2"), 20)[0] == "sat"


def test_an_always_empty_pad_is_certified_by_its_empty_box_never_by_false(tmp_path):
    """mamba2's canonical pad is the page less its regions: 0 at every size. Its digit table
    would divide by that 0; its files show the box empty instead (an index inside it, under
    each case's assumptions: unsat), and the prover's row says that is why it holds. The local
    pad, which holds bytes, is not taken for empty."""
    from layoutalg.verify.prove.certificates import APPLIES
    from layoutalg.verify.prove.runner import EMPTY_BOX, Budgets, _pad_digits
    lib = load([str(ROOT / "specs" / "mamba2.lal")])
    made = texts(lib, "mamba2.tail'", "digits-match-spec")
    assert [stem for stem, _ in made] == ["digits-match-spec.case0", "digits-match-spec.case1"]
    here = tmp_path / "c" / "mamba2.tail-canonical"
    here.mkdir(parents=True)
    for stem, text in [*made, *texts(lib, "mamba2.tail'", APPLIES)]:
        assert not re.search(r"\(assert\s+false\s*\)", text) and "; witness: " in text
        (here / f"{stem}.smt2").write_text(text)
    from layoutalg.verify.prove import lemmas
    from layoutalg.verify.prove.certificates import lemma_text
    (tmp_path / "c" / "shared-lemmas").mkdir(exist_ok=True)
    for name, said, assertions in lemmas.shared():
        (tmp_path / "c" / "shared-lemmas" / f"{name}.smt2").write_text(lemma_text(name, said, assertions))
    out = io.StringIO()
    assert certify(str(tmp_path / "c"), 20, 2, out) == 0, out.getvalue()
    assert "2 of 2 goals' assumptions shown satisfiable" in out.getvalue()
    assert EMPTY_BOX in _pad_digits(lib, "mamba2.tail'", Budgets.of()).method
    assert EMPTY_BOX not in _pad_digits(lib, "mamba2.tail", Budgets.of()).method
    assert all(".part" in stem for stem, _ in texts(lib, "mamba2.tail", "digits-match-spec"))


def test_a_file_the_portfolio_leaves_unknown_is_asked_once_more_with_longer(monkeypatch):
    """Three configurations unknown: cvc5's defaults once more with LONGER times the time; an
    error stops there (more time would not answer it). The solver is a stand-in here, answering
    what cvc5 answers on a hard certificate (unknown within the limit, unsat past it)."""
    import json as _json
    import subprocess as sp
    from layoutalg.verify import certify as c
    asked = []

    def fake(cmd, **kw):
        limit = int(_json.loads(cmd[-1])["tlimit-per"])
        asked.append(limit)
        return sp.CompletedProcess(cmd, 0, "unsat\n" if limit > 20_000 else "unknown\n", "")
    monkeypatch.setattr(c.subprocess, "run", fake)
    assert check_file("x.smt2", 20)[:2] == ("unsat", "default-long")
    assert asked == [20_000, 20_000, 20_000, 20_000 * c.LONGER]
    asked.clear()
    monkeypatch.setattr(c.subprocess, "run", lambda cmd, **kw: asked.append(1) or sp.CompletedProcess(cmd, 1, "", "boom"))
    assert check_file("x.smt2", 20)[0].startswith("error") and len(asked) == 3

"""A claim is proved only where it holds of something: a `sequence t` claim whose token fn is
never exact, divides an index, or is left undecided by Z3; a pad whose division is never
exact; an `agnostic` claim whose guards rename the canonical layout's sizes, or whose cases
put a channel in other places: each is refuted or unknown, never proved. Each spec in
`tests/data/broken/` says what it does."""
import shutil
import subprocess
import sys

import pytest

from layoutalg.compile.codegen import compile_family, compile_named
from layoutalg.errors import SpecError
from layoutalg.ir.claims import names_data
from layoutalg.ir.family import resolve
from layoutalg.dsl.library import load, load_default
from layoutalg.verify.prove.runner import prove_family
from layoutalg.verify.prove.meaning import agnostic_rows
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

from conftest import ROOT

BROKEN = ROOT / "tests/data/broken"


def _edited(tmp_path, name, old, new):
    """`name`.lal of the broken specs, copied beside the shipped grids with `old` made `new`."""
    shutil.copy(ROOT / "specs/grids.lal", tmp_path / "grids.lal")
    text = (BROKEN / f"{name}.lal").read_text().replace("../../../specs/", "")
    assert old in text
    (tmp_path / f"{name}.lal").write_text(text.replace(old, new))
    return tmp_path / f"{name}.lal"


def _rows(name, family, budgets=None, only=None):
    return {r.obligation: r for r in prove_family(load([BROKEN / f"{name}.lal"]), family, budgets, only=only)}


def test_a_token_fn_never_exact_leaves_the_family_applying_nowhere():
    rows = _rows("token_never_exact", "chunked")
    assert rows["page-size"].status == "refuted"
    assert "`sequence` claim's token fn) is never exact" in rows["page-size"].detail
    assert not [n for n, r in rows.items() if r.status == "proved"], {n: r.status for n, r in rows.items()}


def test_a_token_fn_dividing_an_index_is_a_spec_error_with_its_place():
    with pytest.raises(SpecError) as e:
        resolve(load([BROKEN / "token_divides.lal"]), "divided")
    assert "'/' divides sizes exactly" in e.value.message
    assert e.value.span.line == 13 and "token_divides.lal" in e.value.span.file
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "check", BROKEN / "token_divides.lal"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode != 0 and "token_divides.lal:13:21:" in proc.stdout + proc.stderr


def test_an_obligation_undecided_for_all_sizes_is_unknown_though_every_sample_holds():
    """False at q = 162690 (pcp=2, interleave=2); every sampled configuration holds. (A fifth of
    the prover's budget: undecided at any budget, it is spent in full.)"""
    from layoutalg.verify.prove import RLIMIT
    from layoutalg.verify.prove.runner import Budgets
    rows = _rows("knob_token", "knobbed", Budgets.of(RLIMIT // 5), only={"sequence-order"})
    seq = rows["sequence-order"]
    assert seq.status == "unknown", (seq.status, seq.method)
    assert seq.configurations and "shows nothing of the others" in seq.detail


def test_guards_that_rename_the_canonical_sizes_back_no_agnostic_claim():
    """tp=1 and tp=2 of total_heads=8 put engine head 1 in slot 1 and slot 2 under one format id."""
    lib = load([BROKEN / "product_heads.lal"])
    assert not compile_family(resolve(lib, "product")).claims_agnostic
    rows = agnostic_rows(lib, "product")
    assert rows and all(r.status == "unknown" for r in rows), [(r.status, r.detail) for r in rows]
    assert "reads g, w, which the canonical layout's numbers do not fix" in rows[0].detail


def test_a_canonical_layout_written_as_a_product_fixes_neither_factor(tmp_path):
    """`canonical nhd(w * g, ...)` in place of total_heads kept the claim, as the
    placement reads only names the canonical layout is written with; but configurations that
    agree on w * g (tp=1: w=8, g=1; tp=2: w=4, g=2) put engine head 1 in slots 1 and 2."""
    old = "canonical nhd(total_heads,"
    lib = load([_edited(tmp_path, "product_heads", old, "canonical nhd(w * g,")])
    assert not compile_family(resolve(lib, "product")).claims_agnostic
    (row,) = agnostic_rows(lib, "product")
    assert row.status == "unknown" and "reads g, w, which the canonical layout's numbers do not fix" in row.detail
    # the same layout with the heads placed as the grid places them keeps the claim
    (tmp_path / "plain.lal").write_text((tmp_path / "product_heads.lal").read_text().replace(
        "head((h % a) * g + h // a)", "head(h)"))
    assert compile_family(resolve(load([tmp_path / "plain.lal"]), "product")).claims_agnostic


def test_a_pad_division_never_exact_leaves_the_page_applying_nowhere(tmp_path):
    """A pad's offset carried `0 * ((2 * K + 1) / 2)`; the runtime never applies
    the family, but the regions' parts read only their own offsets and every row was proved."""
    shutil.copy(ROOT / "specs/state.lal", tmp_path / "state.lal")
    text = (ROOT / "specs/mamba2.lal").read_text()
    old = "offset K * (X + 2 * G * N) * ec + H * D * N * es + z\n"
    assert text.count(old) == 1
    (tmp_path / "mamba2.lal").write_text(text.replace(old, old[:-1] + " + 0 * ((2 * K + 1) / 2)\n"))
    rows = prove_family(load([tmp_path / "mamba2.lal"]), "mamba2")
    assert [r for r in rows if r.obligation == "page-size" and r.status == "refuted"]
    assert not [r for r in rows if r.status == "proved"], [(r.family, r.obligation) for r in rows if r.status == "proved"]


def _channel_format_ids(tmp_path, spec: str, family: str) -> set:
    """The format ids the runtime gives a 2-head split NHD page (head size 4) of the broken
    spec at tp=1 and tp=2."""
    shutil.copy(ROOT / "specs/grids.lal", tmp_path / "grids.lal")
    (tmp_path / f"{spec}.lal").write_text((BROKEN / f"{spec}.lal").read_text().replace("../../../specs/", ""))
    deriver, ids = Deriver(tmp_path), set()
    for tp in (1, 2):
        heads = 2 // tp
        layer = LayerSpec("attention", 2 * heads * 4, block_size=1, num_kv_heads=heads, head_size=4, dtype_bytes=1)
        tensor = TensorLayout((8, 2, 1, heads, 4), (8 * heads, 4 * heads, 4 * heads, 4, 1), 1)
        res = deriver.derive(layer, tensor, ParallelConfig(tp=tp, total_kv_heads=2), 8)
        assert res.family == family, res.reasons
        ids.add(res.mappings[0].format_id)
    return ids


def test_cases_that_put_a_channel_apart_back_no_agnostic_claim(tmp_path):
    lib = load([BROKEN / "case_permuted.lal"])
    assert not compile_family(resolve(lib, "permuted")).claims_agnostic
    (row,) = agnostic_rows(lib, "permuted")
    assert row.status == "unknown" and "shard maps (where a local index lands)" in row.detail
    proc = subprocess.run([sys.executable, "-m", "layoutalg", "check", BROKEN / "case_permuted.lal"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "shard maps (where a local index lands) of those cases differ" in proc.stdout
    assert len(_channel_format_ids(tmp_path, "case_permuted", "permuted")) == 2  # the runtime keys them apart


def test_cases_that_split_a_channel_and_keep_it_whole_keep_the_claim(tmp_path):
    """`d % p + (d // p) * p` is d at p = 2 and at p = 1, but its digits
    were compared as written (two against one), and the claim was dropped."""
    lib = load([BROKEN / "case_split_whole.lal"])
    assert compile_family(resolve(lib, "split_whole")).claims_agnostic
    assert [r.status for r in agnostic_rows(lib, "split_whole")] == ["proved"]
    assert len(_channel_format_ids(tmp_path, "case_split_whole", "split_whole")) == 1  # stored at tp=2, read at 1


def test_cases_that_transpose_the_page_back_no_agnostic_claim(tmp_path):
    """Tp == 1 stores (a, b) at (a, b), tp == n_side at (b, a), under one format id."""
    lib = load([BROKEN / "case_transposed.lal"])
    assert not compile_family(resolve(lib, "transposed")).claims_agnostic
    (row,) = agnostic_rows(lib, "transposed")
    assert row.status == "unknown" and "shard maps (where a local index lands)" in row.detail
    # the same cases, each cutting the indices at x but putting them back, keep the claim
    shutil.copy(ROOT / "specs/grids.lal", tmp_path / "grids.lal")
    text = (BROKEN / "case_transposed.lal").read_text().replace("../../../specs/", "")
    old = "(a // x + b % x, a % x + b // x)"
    assert old in text
    (tmp_path / "same.lal").write_text(text.replace(old, "(a // x * x + a % x, b // x * x + b % x)"))
    assert compile_family(resolve(load([tmp_path / "same.lal"]), "transposed")).claims_agnostic


def test_every_shipped_family_but_the_fallback_keeps_its_agnostic_claim():
    """An index whose box shrinks in one case (AITER's row of heads * head_size when one head
    is left) is compared where both boxes reach, and keeps the claim."""
    lib = load_default()
    dropped = {f for f in lib.families if not compile_named(lib, f).claims_agnostic}
    assert dropped == {"opaque"}


def test_a_size_the_guards_rename_keeps_the_claim_when_the_map_reads_it_as_written(tmp_path):
    """`n_side == m_f * k_f` rewrote the shard map's n_side into m_f * k_f, which
    the canonical layout (written with n_side) is not built from, and the claim was dropped."""
    lib = load([BROKEN / "guard_renamed.lal"])
    assert compile_family(resolve(lib, "factored")).claims_agnostic
    rows = prove_family(lib, "factored", only={"one-format"})
    assert {r.obligation: r.status for r in rows}["one-format"] == "proved"
    assert [r.status for r in agnostic_rows(lib, "factored")] == \
        [r.status for r in rows if r.obligation == "one-format"]
    # a map whose row order depends on how n_side factors moves bytes between configurations
    # that agree on n_side: the claim goes
    lib = load([_edited(tmp_path, "guard_renamed", "(a * n_side + b)", "(a * n_side + (b % m_f) * k_f + b // m_f)")])
    assert not compile_family(resolve(lib, "factored")).claims_agnostic
    (row,) = agnostic_rows(lib, "factored")
    assert row.status == "unknown" and "reads k_f, m_f" in row.detail


def _format_ids(tmp_path, name, family, configs, n):
    """The format id the runtime gives each configuration of `name`'s square of side n."""
    shutil.copy(ROOT / "specs/grids.lal", tmp_path / "grids.lal")
    (tmp_path / f"{name}.lal").write_text((BROKEN / f"{name}.lal").read_text().replace("../../../specs/", ""))
    deriver, ids = Deriver(tmp_path), []
    layer = LayerSpec("attention", n * n, block_size=1, num_kv_heads=1, head_size=1, dtype_bytes=1,
                      sizes={"n_side": n})
    for config in configs:
        res = deriver.derive(layer, TensorLayout((8, n, n), (n * n, n, 1), 1),
                             ParallelConfig(total_kv_heads=1, **config), 8)
        assert res.family == family, res.reasons
        ids.append((res.mappings[0].format_id, res.mappings[0].parallelism_agnostic))
    return ids


def test_a_configuration_outside_the_claim_is_keyed_by_its_sizes(tmp_path):
    """At tp=2, dcp == 2 deals the square's rows out and dcp == 1 does not, and
    both took one format id (the family claims agnostic, so every configuration was keyed by
    its canonical numbers alone). A case whose map reads dcp names no elements of the model."""
    (one, agn), (two, not_agn) = _format_ids(tmp_path, "dealt_rows", "dealt", [dict(tp=2), dict(tp=2, dcp=2)], 4)
    assert agn and not not_agn
    assert one != two


def test_a_case_outside_the_claim_that_places_elements_apart_is_keyed_by_its_sizes(tmp_path):
    """The claim in the tp == 1 case only, and tp == n_side storing the square
    transposed, took the tp == 1 format id: cases were compared only where both claim."""
    lib = load([BROKEN / "transposed_one_claim.lal"])
    fam = resolve(lib, "transposed")
    assert names_data(fam) == (False, False)
    (one, agn), (two, not_agn) = _format_ids(tmp_path, "transposed_one_claim", "transposed",
                                             [dict(tp=1), dict(tp=2)], 2)
    assert agn and not not_agn and one != two


def test_every_case_of_every_shipped_family_but_the_fallback_names_its_elements():
    """DCP-dealt pages of attention name each token by its place in the sequence (the grid's
    token(t)): two tp of one dcp share a format, as the cross-tp reshards rely on."""
    lib = load_default()
    unnamed = {p for f in lib.families for p in lib.parts_of(f) if not all(names_data(resolve(lib, p)))}
    assert unnamed == {"opaque"}


def _placements(tmp_path, name, family, configs):
    """(format id, local byte -> canonical byte) of each configuration (a flat page of 8 bytes)."""
    from layoutalg.mapping import merged_triples
    _edited(tmp_path, name, "import", "import")
    deriver, out = Deriver(tmp_path), []
    for tp, sizes in configs:
        layer = LayerSpec("attention", 8, block_size=1, num_kv_heads=1, head_size=1, dtype_bytes=1, sizes=sizes)
        res = deriver.derive(layer, TensorLayout((8, 8), (8, 1), 1), ParallelConfig(tp=tp, total_kv_heads=1), 8)
        assert res.family == family, res.reasons
        m = res.mappings[0]
        out.append((m.format_id, tuple(c + j for lo, c, k in sorted(merged_triples(m.runs)) for j in range(k))))
    return out


def test_cases_that_fix_a_size_their_own_way_share_no_format(tmp_path):
    """C = n at tp == 2 and c = 2 * n at tp == 4 fix n apart from one number."""
    (a, pa), (b, pb) = _placements(tmp_path, "rot_cases", "rot", [(2, {"m": 8, "n": 4}), (4, {"m": 8, "n": 2})])
    assert pa != pb and a != b
    assert names_data(resolve(load([BROKEN / "rot_cases.lal"]), "rot")) == (False, False)


def test_a_size_that_can_be_zero_fixes_no_other(tmp_path):
    """Q * n with q = 0 fixed n; the claim was proved and one id covered two placements."""
    lib = load([BROKEN / "zero_factor.lal"])
    assert not compile_family(resolve(lib, "zero")).claims_agnostic
    (row,) = agnostic_rows(lib, "zero")
    assert row.status == "unknown" and "reads n, which the canonical layout's numbers do not fix" in row.detail
    (a, pa), (b, pb) = _placements(tmp_path, "zero_factor", "zero",
                                   [(2, {"m": 8, "n": 4, "q": 0}), (2, {"m": 8, "n": 2, "q": 0})])
    assert pa != pb and a != b


def test_a_grid_fn_names_elements_as_the_engine_does_and_the_same_order_in_a_shard_map_does_not(tmp_path):
    """The grid's slot(i) deals the elements out by n, which flat(m) never
    reads, and n = 2 and n = 4 share one format. That is the grid's word: canonical index c
    holds the model's element c at both (as head(h) does at tp=2 and tp=4). The same order
    in the family's shard map is the family's own: there c holds element 4 at n = 2 and
    element 2 at n = 4, so it keeps no claim and each n is a format of its own."""
    lib = load([BROKEN / "grid_fn_size.lal"])
    assert compile_family(resolve(lib, "slotted")).claims_agnostic and names_data(resolve(lib, "slotted")) == (True,)
    assert [r.status for r in agnostic_rows(lib, "slotted")] == ["proved"]
    configs = [(2, {"m": 8, "n": 2}), (2, {"m": 8, "n": 4})]
    (a, pa), (b, pb) = _placements(tmp_path, "grid_fn_size", "slotted", configs)
    assert pa != pb and a == b
    own = ("fn slot(i) = (i % n) * (m / n) + i // n", "fn slot(i) = i")
    spec = _edited(tmp_path, "grid_fn_size", *own)
    spec.write_text(spec.read_text().replace("shard (i) -> (slot(i))", "shard (i) -> ((i % n) * (m / n) + i // n)"))
    fam = resolve(load([spec]), "slotted")
    assert not compile_family(fam).claims_agnostic and names_data(fam) == (False,)
    (row,) = agnostic_rows(load([spec]), "slotted")
    assert row.status == "unknown" and "reads n, which the canonical layout's numbers do not fix" in row.detail
    deriver = Deriver(tmp_path)
    ids = {deriver.derive(LayerSpec("attention", 8, block_size=1, num_kv_heads=1, head_size=1, dtype_bytes=1,
                                    sizes=sizes), TensorLayout((8, 8), (8, 1), 1),
                          ParallelConfig(tp=tp, total_kv_heads=1), 8).mappings[0].format_id for tp, sizes in configs}
    assert len(ids) == 2


def test_check_says_which_cases_key_their_pages_by_their_sizes():
    def check(path):
        proc = subprocess.run([sys.executable, "-m", "layoutalg", "check", path], capture_output=True, text=True,
                              cwd=ROOT)
        return proc.returncode, [line.strip() for line in proc.stdout.splitlines() if "keys its pages" in line]
    rc, notes = check(BROKEN / "dealt_rows.lal")
    assert rc == 0 and notes == ["note: tests/data/broken/dealt_rows.lal:25: dealt in every case keys its pages by "
                                 "their sizes too (but where its agnostic claim holds): canonical index 'a': it "
                                 "reads dcp, which the canonical layout's numbers do not fix and is not placed by "
                                 "a fn of the grid"]
    rc, notes = check(BROKEN / "zero_factor.lal")
    assert rc == 1 and len(notes) == 1 and "its agnostic claim is dropped" in notes[0]
    assert check(ROOT / "specs/split_nhd.lal") == (0, [])


def _share_placements(tmp_path, family, configs):
    """(format id, local byte -> canonical byte of rank 1) of each (tp, sizes), nx=16 one-byte channels."""
    from layoutalg.mapping import merged_triples
    shutil.copy(ROOT / "specs/state.lal", tmp_path / "state.lal")
    (tmp_path / "fn_share.lal").write_text((BROKEN / "fn_share.lal").read_text().replace("../../../specs/", ""))
    deriver, out = Deriver(tmp_path), []
    for tp, sizes in configs:
        layer = LayerSpec(family, 16 // tp, dtype_bytes=1, sizes={"nx": 16, **sizes})
        res = deriver.derive(layer, None, ParallelConfig(tp=tp, total_kv_heads=1), 16 // tp)
        assert res.family == family, res.reasons
        m = res.mappings[1]
        out.append((m.format_id, tuple(c + j for lo, c, k in sorted(merged_triples(m.runs)) for j in range(k))))
    return out


@pytest.mark.parametrize("family, configs", [
    ("split_share", [(2, {}), (4, {})]),                 # the split case against the whole one
    ("split_knob", [(2, {"q": 1}), (2, {"q": 0})]),      # a model size choosing the split, one tp
])
def test_a_grid_fn_passed_a_share_that_is_not_its_index_box_backs_no_claim(tmp_path, family, configs):
    """By_rank(j + a * (nx / 2), B) was taken as the grid's placement whatever B
    the family passed; the claim was proved and one format id covered two placements."""
    lib = load([BROKEN / "fn_share.lal"])
    assert not compile_family(resolve(lib, family)).claims_agnostic
    rows = agnostic_rows(lib, family)
    assert rows and all(r.status == "unknown" for r in rows), [(r.status, r.detail) for r in rows]
    assert "by_rank(...) is passed sizes" in rows[0].detail and "not one box numbered densely" in rows[0].detail
    (a, pa), (b, pb) = _share_placements(tmp_path, family, configs)
    assert pa != pb and a != b


def _rank_major_sizes(dcp):
    return {"tp": 2, "pcp": 1, "dcp": dcp, "interleave": 1, "pcp_replicas": 0, "total_heads": 2,
            "heads": 2 // (2 // dcp), "block_size": 2, "head_size": 1, "dtype_bytes": 1, "per_token_head_quant": 0,
            "kv_blocks_second": 0, "page_size": 2 * 2 * (2 // (2 // dcp)), "compress_ratio": 1}


def test_a_false_sequence_claim_fails_check_and_no_conversion_joins_pages_by_it(tmp_path):
    """`sequence t` false under dcp=2 (a rank's tokens stored in one stretch)
    passed `check` (its oracle reads cp=1 first, where each token is its own place), and the
    conversion between pages of another cp joined pages along t: the sequence reordered."""
    from layoutalg.verify.check import check_family
    from layoutalg.errors import LayoutalgError
    from layoutalg.verify.conversions import conversion
    lib = load([BROKEN / "rank_major_tokens.lal"])
    rep = check_family(lib, compile_named(lib, "rank_major"))
    assert len(rep.errors) == 1 and "rank_major_tokens.lal:30: `sequence t` does not hold: rank 0 puts local " \
        "(kv=0, t=1, h=0, d=0) at canonical t=1, but its place in the sequence is token(1) = 2" in rep.errors[0]
    assert "dcp=2" in rep.errors[0]
    big, small = _rank_major_sizes(2), _rank_major_sizes(1)
    for wrong_page in (None, 999):  # (a page size that contradicts the layout assumed no claim shown by it)
        with pytest.raises(LayoutalgError, match="rank_major: not converted: .* sequence-order is not proved for all "
                                                 "sizes \\(refuted"):
            conversion(lib, "rank_major", {**big, "page_size": wrong_page or big["page_size"]}, small)
    rows = _rows("rank_major_tokens", "rank_major")
    assert rows["sequence-order"].status == "refuted"
    fixed = load([_edited(tmp_path, "rank_major_tokens", "(kv, stretch(t), head(h), d)", "(kv, token(t), head(h), d)")])
    assert check_family(fixed, compile_named(fixed, "rank_major")).errors == []
    assert conversion(fixed, "rank_major", big, small).k == 2



def test_check_enumerates_the_sequence_claim_at_several_block_sizes_of_a_configuration():
    """The claim holds at block_size 4 and not at 6; check read each parallel
    configuration at its first two model sizes only (they differ in dtype alone)."""
    from layoutalg.verify.check import check_family
    lib = load([BROKEN / "sequence_chunked.lal"])
    rep = check_family(lib, compile_named(lib, "chunked"))
    assert len(rep.errors) == 1 and "sequence_chunked.lal:47: `sequence t` does not hold" in rep.errors[0]
    assert rep.notes == []


def test_check_says_where_its_budget_left_the_sequence_claim_unread(monkeypatch):
    import layoutalg.verify.check as check
    monkeypatch.setattr(check, "SEQUENCE_ELEMENTS", 2000)
    lib = load_default()
    rep = check.check_family(lib, compile_named(lib, "split_nhd"))
    assert rep.ok and len(rep.notes) == 1
    assert "the `sequence` claim was enumerated under " in rep.notes[0] and "past check's budget of 2000 elements: " \
        "`layoutalg prove` shows it for all" in rep.notes[0]

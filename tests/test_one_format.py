"""A page stored under one configuration means the same under every other (`one-format`).

Each mutant below tiles and proves every other row at every configuration, and its `sequence`
claim holds; only what a canonical byte *means* moves with the configuration. The row refutes
it for all sizes, the conversion and the reshard prover refuse it, and the engine's own fill
(`engine_kv`: vLLM's sharding rules, no spec) shows the bytes it would lose.
"""
from __future__ import annotations

import itertools
import random

import pytest

from conftest import ROOT
from engine_kv import round_trip
from layoutalg.tools.distributed import group_of, library_of
from layoutalg.errors import LayoutalgError
from layoutalg.dsl.library import load, load_default
from layoutalg.params import parse_config
from layoutalg.verify.prove.runner import Budgets, one_format, prove_family

ACROSS = ROOT / "tests" / "data" / "across"

MUTANT = '''import "grids.lal"

layout digits(H, T, e):
    index kv < 2, t < T, h < H, c2 < 2, c1 < 2, c0 < 2   # a head's 8 channels as three binary digits
    element e bytes
    tensor (block, ...)

family mutant serves attention:
    grid heads
    require per_token_head_quant == 0 and head_size == 8
    case {when}:
        let p2 = {p2}, p1 = {p1}, p0 = {p0}
    case {otherwise}:
        let p2 = 2, p1 = 1, p0 = 0
    local     digits(heads, block_size, dtype_bytes)
    canonical digits(total_heads, block_size * cp, dtype_bytes)
    sequence t
    shard (kv, t, h, c2, c1, c0) -> (kv, token(t), head(h), {d2}, {d1}, {d0})
'''
"""A split NHD family whose canonical channel digits are a permutation (p2, p1, p0) of the local
ones where `when` holds, and the identity elsewhere: `dk` is the local digit in canonical place k,
written as arithmetic of the lets (c2 * (p2 == 2) + ...), which every configuration reads alike."""

WHEN = (("cp > 1", "cp == 1"), ("dcp > 1", "dcp == 1"), ("pcp > 1", "pcp == 1"))


def _pick(k: int) -> str:
    """The local digit whose number is the let p{k}: c2 where p{k} = 2, and so on (0/1 arithmetic)."""
    p = f"p{k}"
    return f"(c2 * ({p} * ({p} - 1) / 2) + c1 * ({p} * (2 - {p})) + c0 * (({p} - 1) * ({p} - 2) / 2))"


def mutant(tmp_path, perm: tuple, when: tuple) -> str:
    """A folder holding the mutant of permutation `perm` (canonical place k holds local digit perm[k])."""
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    text = MUTANT.format(when=when[0], otherwise=when[1], p2=perm[0], p1=perm[1], p0=perm[2],
                         d2=_pick(2), d1=_pick(1), d0=_pick(0))
    (tmp_path / "mutant.lal").write_text(text)
    return str(tmp_path)


def _mutants(seed: int, n: int):
    rng = random.Random(seed)
    perms = [p for p in itertools.permutations((2, 1, 0)) if p != (2, 1, 0)]
    return [(rng.choice(perms), rng.choice(WHEN)) for _ in range(n)]


def _row(specs: str, family: str):
    return one_format(load([specs]), family, Budgets.of())


def _groups(specs, family, a, b, blocks):
    x = group_of(family, parse_config(a), 1, 4, 8, "fp32", blocks, specs=specs)
    y = group_of(family, parse_config(b), 1, 4, 8, "fp32", blocks // 2, specs=specs)
    return x, y


@pytest.mark.parametrize("perm, when", _mutants(seed=34, n=1))
def test_a_fresh_mutant_is_refuted_refused_and_loses_elements(tmp_path, monkeypatch, perm, when):
    specs = mutant(tmp_path, perm, when)
    lib = load([specs])
    rows = prove_family(lib, "mutant", quick=True)  # (a hunt: it stops at the first refutation)
    others = [r for r in rows if r.obligation != "one-format"]
    assert others and all(r.status != "refuted" for r in others), [(r.obligation, r.status) for r in others]
    (row,) = [r for r in rows if r.obligation == "one-format"]
    assert row.status == "refuted", (row.status, row.detail)
    assert "mutant.lal:18" in row.detail and "one page format names two elements" in row.detail, row.detail
    # the page path: the conversion between cp 1 and cp 2 is refused, naming the row
    config = {"cp > 1": "tp=2,dcp=2", "dcp > 1": "tp=2,dcp=2", "pcp > 1": "tp=1,pcp=2"}[when[0]]
    x, y = _groups(specs, "mutant", "tp=2", config, 4)
    from layoutalg.verify import conversions
    with pytest.raises(LayoutalgError, match="not one format with a single rank's"):
        conversions.conversion(library_of(specs), "mutant", y.sizes, x.sizes)
    # what it would lose: with both checks taken away, the engine's elements do not come home
    import layoutalg.verify.prove.meaning as meaning
    monkeypatch.setattr(meaning, "unshown", lambda *a, **k: "")
    monkeypatch.setattr(conversions, "_keeps_elements", lambda *a: None)
    conv = conversions.conversion(library_of(specs), "mutant", y.sizes, x.sizes)
    wrong, compared = round_trip(x, y, conv, 1, 8)
    assert compared and wrong, (wrong, compared)


def test_the_identity_permutation_is_proved_and_keeps_every_element(tmp_path):
    """The control: the same family, no permutation, proved; its pages convert and every element
    of the engine's fill comes home under the other cp."""
    specs = mutant(tmp_path, (2, 1, 0), WHEN[0])
    assert _row(specs, "mutant").status == "proved"
    from layoutalg.verify import conversions
    x, y = _groups(specs, "mutant", "tp=2", "tp=2,dcp=2", 4)
    conv = conversions.conversion(library_of(specs), "mutant", y.sizes, x.sizes)
    wrong, compared = round_trip(x, y, conv, 1, 8)
    assert compared == 2 * 2 * 2 * 4 * 8 and wrong == 0  # 2 ranks, 2 blocks, K/V, 4 tokens, 1 head, 8 channels


@pytest.mark.parametrize("name, line", [("swapped_channels", 23), ("swapped_aiter", 27), ("swapped_nhd", 28)])
def test_the_broken_families_of_the_issue_are_refuted(name, line):
    row = _row(str(ACROSS / f"{name}.lal"), name)
    assert row.status == "refuted" and f"{name}.lal:{line}" in row.detail, (row.status, row.detail)


def test_rows_proved_before_do_not_stand_in_for_one_format(tmp_path):
    """`writers-cover` skips its parts that are, word for word, rows this run already proved; no
    other row may: one-format's parts are other questions. With every such row proved on every
    path, a family whose channels swap past one rank is still refuted (it was proved)."""
    from layoutalg.dsl.interpret import paths
    from layoutalg.verify.prove.runner import LEMMAS
    lib = load([str(ACROSS / "swapped_tp.lal")])
    proved = {n: set(paths(lib, "swapped_tp")) for n in LEMMAS}
    row = one_format(lib, "swapped_tp", Budgets.of(), proved=proved)
    assert row.status == "refuted" and "swapped_tp.lal:20" in row.detail, (row.status, row.detail)
    assert "c1=1, c0=0" in row.detail or "c1=0, c0=1" in row.detail, row.detail


@pytest.mark.parametrize("family", ["split_nhd", "aiter", "flash_hnd", "packed_hnd", "mla", "quant_split.scale",
                                    "mamba2.b", "gdn.recurrent", "dsa_indexer.values"])
def test_shipped_families_are_one_format_for_all_sizes(family):
    row = one_format(load_default(), family, Budgets.of())
    assert (row.status, row.method) == ("proved", "symbolic: all sizes, all ranks"), (row.status, row.detail)


def test_a_family_read_only_by_its_writer_has_no_row():
    """The opaque fallback keys its pages by the configuration: nothing is read elsewhere, so
    `prove` gives no row, and asking for one says unknown (zero cases shown is no proof)."""
    lib = load_default()
    assert not [r for r in prove_family(lib, "opaque") if r.obligation == "one-format"]
    row = one_format(lib, "opaque", Budgets.of())
    assert row.status == "unknown" and "no case" in row.method


def test_the_reshard_prover_refuses_a_pair_of_a_family_that_is_not_one_format(tmp_path):
    from layoutalg.verify.prove.reshard import prove_plans
    specs = mutant(tmp_path, (1, 2, 0), WHEN[0])
    x, y = _groups(specs, "mutant", "tp=2", "tp=2,dcp=2", 4)
    rows = prove_plans(library_of(specs), "mutant", x.sizes, y.sizes, [object()], Budgets.of().config)
    assert [r.status for r in rows] == ["refuted", "refuted"] and "one format" in rows[0].detail


SPLIT = '''import "grids.lal"

layout split_nhd(H, T, D, e):
    index kv < 2, t < T, h < H, d < D
    element e bytes
    tensor (block, ...)
{extra}
family f serves attention:
    grid heads
    require per_token_head_quant == 0{require}
    local     split_nhd(heads, block_size, head_size, dtype_bytes)
    canonical split_nhd(total_heads, block_size * cp, head_size, dtype_bytes)
    sequence t
    shard (kv, t, h, d) -> (kv, token(t), {head}, d)
'''


def _split(tmp_path, head="head(h)", require="", extra=""):
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    (tmp_path / "f.lal").write_text(SPLIT.format(head=head, require=require, extra=extra))
    return one_format(load([tmp_path / "f.lal"]), "f", Budgets.of())


def test_a_fn_of_the_library_or_rank_arithmetic_is_no_placement(tmp_path):
    """Heads dealt round-robin, by a fn the spec file defines or written inline: the engine's name of
    the head is not the grid's word, so nothing is proved (it was: the element was taken to be the
    canonical index itself)."""
    row = _split(tmp_path, "dealt(h)", extra="\nfn dealt(h) = h * shards + head_shard\n")
    assert row.status == "unknown" and "by the rank's digits" in row.detail, (row.status, row.detail)
    row = _split(tmp_path, "h * shards + head_shard")
    assert row.status == "unknown" and "by the rank's digits" in row.detail, (row.status, row.detail)


def test_a_family_no_single_rank_serves_is_unknown_not_refuted(tmp_path):
    """The reference reading is this row's choice, not the engine's: where no case serves a single
    rank holding the page, the row says so, unknown."""
    row = _split(tmp_path, require=" and tp >= 2")
    assert row.status == "unknown" and "no case of the family holds on a single rank" in row.detail, row


def test_a_placement_of_an_index_shifted_is_proved(tmp_path):
    assert _split(tmp_path, "head(h + 0)").status == "proved"


TOKSWAP = '''import "grids.lal"

layout kv_digits(H, T, e):
    index kv < 2, t < T, h < H, c1 < 2, c0 < 2
    element e bytes
    tensor (block, ...)

layout kv_sw(H, T, e, s):      # where s == 1 the index a is the fast channel digit
    index kv < 2, t < T, h < H, a < 2, b < 2
    offset (b + 2 * a) * (1 - s) + (a + 2 * b) * s + 4 * (h + H * (t + T * kv))
    element e bytes

family f serves attention:
    grid heads
    require per_token_head_quant == 0 and head_size == 4
    case block_size * cp >= 8:
        let s = 1
    case block_size * cp < 8:
        let s = 0
    local     kv_digits(heads, block_size, dtype_bytes)
    canonical kv_sw(total_heads, block_size * cp, dtype_bytes, s)
    sequence t
    shard (kv, t, h, c1, c0) -> (kv, token(t), head(h), c1 * (1 - s) + c0 * s, c0 * (1 - s) + c1 * s)
'''


def test_pages_of_two_block_sizes_are_compared_element_by_element(tmp_path):
    """Each configuration means what a single rank holding its page reads (the row is proved), but
    the single ranks of a big and a small page read channels apart (the canonical layout swaps them
    from 8 tokens a page): no proof relates two block sizes yet, so the conversion reads the
    elements of both and refuses, naming the byte."""
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    (tmp_path / "f.lal").write_text(TOKSWAP)
    assert one_format(load([tmp_path / "f.lal"]), "f", Budgets.of()).status == "proved"
    from layoutalg.verify import conversions
    x = group_of("f", parse_config("tp=2"), 1, 4, 4, "fp32", 4, specs=str(tmp_path))
    y = group_of("f", parse_config("tp=2,dcp=2"), 1, 4, 4, "fp32", 2, specs=str(tmp_path))
    with pytest.raises(LayoutalgError, match="not converted: byte .* which holds another element"):
        conversions.conversion(library_of(str(tmp_path)), "f", y.sizes, x.sizes)


def test_a_refutation_is_not_hidden_behind_an_agnostic_claim_not_shown(tmp_path):
    """swapped_tp with its canonical heads written `total_heads * tp // tp`: the grid's agnostic
    claim is not shown (the extent reads tp), and the pages, shared along `sequence t`, still
    mean two things; the row says refuted, not the claim's unknown. (Only the claim and
    one-format are asked: the other rows are the family's own tests'.)"""
    text = (ACROSS / "swapped_tp.lal").read_text()
    old = "canonical kv_digits_tp(total_heads, block_size * cp, dtype_bytes)"
    assert old in text
    (tmp_path / "swapped_tp.lal").write_text(text.replace('import "../../../specs/grids.lal"', 'import "grids.lal"')
                                             .replace(old, old.replace("total_heads,", "total_heads * tp // tp,")))
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    lib = load([tmp_path / "swapped_tp.lal"])
    from layoutalg.verify.prove.meaning import agnostic_rows
    assert [r.status for r in agnostic_rows(lib, "swapped_tp")] == ["unknown"]
    (row,) = [r for r in prove_family(lib, "swapped_tp", only={"one-format"}) if r.obligation == "one-format"]
    assert row.status == "refuted" and "one page format names two elements" in row.detail, (row.status, row.detail)

"""`sequence t` is a bijection between a page's tokens and the places in the sequence it
covers, proved for all sizes; every conversion and plan across another cp or block size rests
on that proof, never on the claim read at the pair's sizes alone.

Each mutant below tiles (every other prover row proves it) and its token fn places each local
token where its shard map does, yet a page joined along `t` would put tokens out of order:
before the claim was a bijection, `prove`, `prove --reshard` and `reshard` across a block size
all passed them while most bytes loaded wrong."""
import pytest

from layoutalg.dsl.library import load
from layoutalg.errors import LayoutalgError
from layoutalg.params import parse_config
from layoutalg.tools.distributed import group_of
from layoutalg.verify.prove.reshard import sequence_unshown
from layoutalg.verify.prove.runner import Budgets, prove_obligation

from conftest import ROOT

GRIDS = (ROOT / "specs" / "grids.lal").read_text()

HALF = """import "grids.lal"

# Two tokens share a place: the page's T tokens are (j, s), j the more significant, and the
# claim names s alone (T / 2 places).
layout halfseq(H, T, D, e):
    index kv < 2, j < 2, s < T / 2, h < H, d < D
    element e bytes
    tensor (block, kv, ..., h, d)

family halfseq serves attention:
    grid heads
    require per_token_head_quant == 0 and kv_blocks_second == 0 and block_size % 2 == 0
    local     halfseq(heads, block_size, head_size, dtype_bytes)
    canonical halfseq(total_heads, block_size * cp, head_size, dtype_bytes)
    sequence s
    shard (kv, j, s, h, d) -> (kv, j, token(s), head(h), d)
"""

CHUNKS = """import "grids.lal"

# Each CP rank's tokens one chunk after another: the canonical `t` runs over one rank's tokens,
# a canonical page holds cp times as many.
layout chunked(H, C, T, D, e):
    index kv < 2, c < C, t < T, h < H, d < D
    element e bytes

family chunked serves attention:
    grid heads
    require per_token_head_quant == 0 and kv_blocks_second == 0
    local     chunked(heads, 1, block_size, head_size, dtype_bytes)
    canonical chunked(total_heads, cp, block_size, head_size, dtype_bytes)
    sequence t
    shard (kv, c, t, h, d) -> (kv, cp_rank, t, head(h), d)
"""


def _library(tmp_path, text, grids=GRIDS):
    (tmp_path / "grids.lal").write_text(grids)
    (tmp_path / "f.lal").write_text(text)
    return load([tmp_path / "f.lal"])


@pytest.fixture(scope="module")
def half(tmp_path_factory):
    """(folder, library) of the HALF mutant, written once for the tests that read it: its
    `sequence-order` row (refuted) is proved once and read from the proof cache after, which keys
    a row by its spec files' paths."""
    folder = tmp_path_factory.mktemp("half")
    return folder, _library(folder, HALF)


def _row(lib, family):
    return prove_obligation(lib, family, "sequence-order", {}, Budgets.of())


def test_two_tokens_at_one_place_are_refuted_though_every_other_row_proves(half):
    _, lib = half
    for name in ("shard-in-range", "shard-injective", "writers-disjoint"):  # (`prove` proves every other row)
        assert prove_obligation(lib, "halfseq", name, {}, Budgets.of()).status == "proved", name
    row = _row(lib, "halfseq")
    assert row.status == "refuted", row
    assert "runs over" in row.detail and "block_size =" in row.detail, row.detail
    w = row.witness
    assert w["block_size"] >= 2 and w["block_size"] % 2 == 0


def test_a_conversion_across_block_sizes_rests_on_the_claim_for_all_sizes(half):
    from layoutalg.verify.conversions import conversion
    folder, lib = half
    big, small = (group_of("halfseq", parse_config("tp=2"), 4, b, 8, "bf16", 1, specs=str(folder)).sizes
                  for b in (64, 16))
    with pytest.raises(LayoutalgError, match="sequence-order is not proved for all sizes \\(refuted"):
        conversion(lib, "halfseq", big, small)


def test_plans_across_another_cp_rest_on_the_claim_for_all_sizes(half):
    """`prove --reshard tp=1,pcp=2 tp=2` proved both rows of this pair for all sizes; the plans
    of all sizes read the same row (`all_sizes`, tested on another mutant in test_replan.py)."""
    folder, lib = half
    x, y = (group_of("halfseq", parse_config(c), 4, 8, 8, "bf16", 2, specs=str(folder)).sizes
            for c in ("tp=1,pcp=2", "tp=2"))
    why = sequence_unshown(lib, "halfseq", x, y, Budgets.of().config)
    assert "sequence-order is not proved for all sizes (refuted" in why


def test_a_region_whose_tokens_share_places_is_refuted(tmp_path):
    """A quantised page of values and scales: the scale region names half the token."""
    kv = (ROOT / "specs" / "quant_kv.lal").read_text()
    text = (ROOT / "specs" / "quant_split.lal").read_text()
    old = "index kv < 2, t < T, h < H, s < S"
    assert old in text
    text = text.replace(old, "index kv < 2, u < 2, t < T / 2, h < H, s < S")
    (tmp_path / "quant_kv.lal").write_text(kv)
    lib = _library(tmp_path, text)
    scale = next(p for p in lib.parts_of("quant_split") if p.endswith("scale"))
    data = next(p for p in lib.parts_of("quant_split") if p.endswith("data"))
    assert _row(lib, data).status == "proved"
    row = _row(lib, scale)
    assert row.status == "refuted" and "block_size" in row.detail, row


def test_pages_that_hold_one_ranks_tokens_are_refuted(tmp_path):
    """The canonical `t` runs over block_size places though a canonical page holds cp ranks'
    tokens: two tokens (one of each rank) at every place."""
    lib = _library(tmp_path, CHUNKS, GRIDS.replace(
        "fn token(t) = ((t // interleave) * cp + cp_rank) * interleave + t % interleave", "fn token(t) = t"))
    assert prove_obligation(lib, "chunked", "writers-disjoint", {}, Budgets.of()).status == "proved"
    row = _row(lib, "chunked")
    assert row.status == "refuted" and "block_size * cp" in row.detail, row
    assert row.witness["dcp"] * row.witness["pcp"] > 1


@pytest.mark.parametrize("family", ["split_nhd", "mla", "quant_packed.scale", "dsa_indexer.values"])
def test_the_shipped_claims_are_bijections(family):
    lib = load(sorted((ROOT / "specs").glob("*.lal")))
    row = _row(lib, family)
    assert row.status == "proved" and row.method == "symbolic: all sizes, all ranks", row


def test_check_enumerates_the_bijection_too(half):
    from test_cli import run
    folder, _ = half
    out = run("check", str(folder / "f.lal"))
    assert out.returncode != 0
    assert "`sequence s` does not hold" in out.stdout and "runs over" in out.stdout, out.stdout

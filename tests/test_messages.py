"""Failures said in the spec's words: `check` and prove's `structure` row name the ranks, the
indices and the byte where a tiling breaks, and the clause to look at; no digit-table or sympy
dump is all a user gets (issue 56: a shard map that forgets `head(h)`)."""
import re
import textwrap

from layoutalg.dsl.library import load
from layoutalg.verify.collision import tiling_counterexample

SPEC = '''\
# split NHD, written by a newcomer
import "grids.lal"

layout mine(H, T, D, e):
    index kv < 2, t < T, h < H, d < D
    element e bytes
    tensor (block, ...)

family mine serves attention:
    grid heads
    require per_token_head_quant == 0
    local     mine(heads, block_size, head_size, dtype_bytes)
    canonical mine(total_heads, block_size * cp, head_size, dtype_bytes)
    sequence t
    shard (kv, t, h, d) -> (kv, token(t), {h}, d)
'''


def _lib(tmp_path, h="h"):
    f = tmp_path / "mine.lal"
    f.write_text(SPEC.format(h=h))
    return load([f]), f


SIZES = dict(tp=2, pcp=1, dcp=1, interleave=1, total_heads=2, heads=1, block_size=4, head_size=4,
             dtype_bytes=1, per_token_head_quant=0, pcp_replicas=0)


def test_a_forgotten_placement_names_two_ranks_one_byte_and_the_shard_map(tmp_path):
    lib, _ = _lib(tmp_path)
    clause, why = tiling_counterexample(lib, "mine", SIZES)
    assert clause == "shard"
    assert why == ("ranks 0 and 1 both write canonical byte 0 of block 0 (kv=0, t=0, h=0, d=0) "
                   "(from local (kv=0, t=0, h=0, d=0) and (kv=0, t=0, h=0, d=0))")


def test_the_right_spec_has_no_counterexample_and_a_wrong_one_each_kind(tmp_path):
    right, _ = _lib(tmp_path, h="head(h)")
    assert tiling_counterexample(right, "mine", SIZES) is None
    # a rank's heads sent past the canonical page: outside
    (tmp_path / "b").mkdir()
    past, _ = _lib(tmp_path / "b", h="head(h) + 1")
    clause, why = tiling_counterexample(past, "mine", SIZES)
    assert clause == "shard" and "rank 1 sends local (kv=0, t=0, h=0, d=0) to canonical" in why \
        and "h=2 is outside the canonical page's h < 2" in why
    # a canonical page of twice the heads the ranks hold: bytes nobody writes
    (tmp_path / "c").mkdir()
    f = tmp_path / "c" / "mine.lal"
    f.write_text(SPEC.format(h="head(h)").replace("canonical mine(total_heads,", "canonical mine(2 * total_heads,"))
    clause, why = tiling_counterexample(load([f]), "mine", SIZES)
    assert (clause, why) == ("shard", "no rank writes canonical byte 8 of block 0 (kv=0, t=0, h=2, d=0): the "
                                      "ranks' pages hold 64 of the canonical page's 128 elements")
    # a local layout whose offset sends two indices to one byte
    (tmp_path / "d").mkdir()
    f = tmp_path / "d" / "mine.lal"
    f.write_text(SPEC.format(h="head(h)").replace("    element e bytes\n",
                                                  "    offset ((kv * T + t) * H + h) * D\n    element e bytes\n"))
    clause, why = tiling_counterexample(load([f]), "mine", SIZES)
    assert clause == "local" and re.fullmatch(r"local \(.*\) and \(.*\) share local byte \d+: the local layout "
                                              r"is not one-to-one", why), why


def test_a_family_that_does_not_apply_there_has_no_counterexample(tmp_path):
    lib, _ = _lib(tmp_path)
    assert tiling_counterexample(lib, "mine", {**SIZES, "per_token_head_quant": 1}) is None


def test_check_says_it_in_the_spec_words_with_the_shard_line(tmp_path, monkeypatch):
    from layoutalg.compile.codegen import compile_family
    from layoutalg.ir.family import resolve
    from layoutalg.verify.check import check_family
    lib, f = _lib(tmp_path)
    rep = check_family(lib, compile_family(resolve(lib, "mine")))
    first = rep.errors[0]
    assert "mine.lal:15: ranks 0 and 1 both write canonical byte 0 of block 0 (kv=0, t=0, h=0, d=0)" in first
    assert "look at the shard map" in first and "tp=2" in first
    assert sum("both write" in e for e in rep.errors) == 1  # once a family; the rest are short
    assert all("layout (" not in e for e in rep.errors)


def test_proves_structure_row_is_refuted_at_a_configuration_in_the_spec_words(tmp_path):
    from layoutalg.verify.prove.runner import prove_family
    lib, _ = _lib(tmp_path)
    rows = {r.obligation: r for r in prove_family(lib, "mine")}
    s = rows["structure"]
    assert s.status == "refuted", (s.status, s.detail)
    assert "mine.lal:15: ranks 0 and 1 both write canonical byte 0 of block 0 (kv=0, t=0, h=0, d=0)" in s.detail
    assert "look at the shard map" in s.detail and s.witness["tp"] == 2
    assert "layout (" not in s.detail and "is not compact" not in s.detail


def test_a_chain_not_shown_for_all_sizes_names_its_digits():
    """Where no configuration shows it, the unknown row says the chain by the digits' names."""
    from collections import namedtuple
    from layoutalg.algebra.tiling import broken, chains
    L = namedtuple("L", "name extent local canonical")
    R = namedtuple("R", "name extent rank canonical replica")
    local = [L("d", 4, 1, 1), L("h", 2, 4, 8)]
    why = broken(chains(local, [R("head_shard", 2, 1, 8, False)], 8, 2, 16))
    assert why == ("the canonical page is not tiled exactly: the digits d reach stride 4, and no digit has "
                   "canonical stride 4 (left: h (extent 2, stride 8); head_shard (extent 2, stride 8))")

"""`layoutalg conform`: a spec against the engine's own writer. The engine models
(`tools.engine_models`, vLLM's rules restated, never read from a spec) find the shipped families
conformant, and refute mutants the prover proves: each tiles and keeps its claims, but says the
engine writes a byte where it does not."""
import shutil
from pathlib import Path

import pytest

from layoutalg.dsl.library import load
from layoutalg.params import parse_config
from layoutalg.tools import conform, engine_models as em
from layoutalg.verify.prove.runner import Budgets, prove_obligation

SPECS = Path(__file__).parent.parent / "specs"  # (not conftest's ROOT: tests/engine imports this module)
MAMBA = dict(ssm_heads=4, ssm_head_dim=2, state_size=2, n_groups=2, conv_kernel=3, conv_bytes=4, ssm_bytes=4)


def _check(family, config, writer, heads=4, head_size=8, names=None, specs=None):
    return conform.check(family, parse_config(config), writer, heads=heads, block_size=4, head_size=head_size,
                         dtype="fp32", names=names, specs=specs)


@pytest.mark.parametrize("family, config, heads, head_size", [
    ("split_nhd", "tp=2", 4, 8), ("split_nhd", "tp=4", 2, 8),            # heads sharded; GQA replicas
    ("split_nhd", "tp=2,dcp=2,interleave=2", 1, 8),                      # tokens dealt by DCP in pairs
    ("split_hnd", "tp=1,pcp=2", 2, 8), ("mla", "tp=2,dcp=2", 1, 16)])
def test_the_shipped_families_are_what_the_engine_writes(family, config, heads, head_size):
    r = _check(family, config, em.WRITERS[family](), heads, head_size)
    assert r.status == "conformant" and r.compared > 0, str(r)


def test_mamba2_is_what_the_engine_writes():
    for config in ("tp=1", "tp=2", "tp=4"):  # (n_groups = 2: at tp=4 each group held by two ranks)
        r = _check("mamba2", config, em.mamba2(), heads=1, head_size=None, names=MAMBA)
        assert r.status == "conformant", str(r)


NEEDS = {"grids.lal": ("grids.lal", "split_nhd.lal"), "mamba2.lal": ("state.lal", "mamba2.lal")}
"""The files a mutant folder holds: the edited one and those it imports or is imported by (a
folder of a few families compiles in a fraction of the whole library's time)."""


def _mutant(tmp_path, file, old, new):
    for name in NEEDS[file]:
        shutil.copy(SPECS / name, tmp_path / name)
    text = (tmp_path / file).read_text()
    assert old in text
    (tmp_path / file).write_text(text.replace(old, new))
    return str(tmp_path)


def test_heads_dealt_round_robin_are_refuted(tmp_path):
    specs = _mutant(tmp_path, "grids.lal", "fn head(h) = head_shard * heads + h", "fn head(h) = h * shards + head_shard")
    lib = load([tmp_path / "split_nhd.lal"])
    assert prove_obligation(lib, "split_nhd", "writers-disjoint", {}, Budgets.of()).status == "proved"
    r = _check("split_nhd", "tp=2", em.attention("NHD"), specs=specs)
    assert r.status == "refuted" and r.misplaced, str(r)
    assert "the spec sends this byte to canonical byte" in str(r) and "rank 0" in str(r)
    assert _check("split_nhd", "tp=1", em.attention("NHD"), specs=specs).status == "conformant"  # one rank: alike


def test_tokens_dealt_in_contiguous_chunks_are_refuted(tmp_path):
    specs = _mutant(tmp_path, "grids.lal",
                    "fn token(t) = ((t // interleave) * cp + cp_rank) * interleave + t % interleave",
                    "fn token(t) = cp_rank * block_size + t")
    lib = load([tmp_path / "split_nhd.lal"])
    assert prove_obligation(lib, "split_nhd", "sequence-order", {}, Budgets.of()).status == "proved"
    r = _check("split_nhd", "tp=2,dcp=2", em.attention("NHD"), heads=1, specs=specs)
    assert r.status == "refuted", str(r)


X_REGION = """    region x:
        index k < K, j < X
        offset j + (X + 2 * G * N) * k
        element ec bytes
        tensor conv (block, k, j)
"""
B_REGION = """    region b:
        index k < K, j < G * N
        offset X + j + (X + 2 * G * N) * k
        element ec bytes
        tensor conv (block, k, j)
"""


def test_a_mamba2_conv_row_of_another_order_is_refuted(tmp_path):
    """The conv row written B | x | C (vLLM writes x | B | C): the regions still tile the page and
    view one conv tensor, and the runtime certifies the layer."""
    b_first = B_REGION.replace("offset X + j +", "offset j +") + X_REGION.replace("offset j +", "offset G * N + j +")
    specs = _mutant(tmp_path, "mamba2.lal", X_REGION + B_REGION, b_first)
    r = _check("mamba2", "tp=2", em.mamba2(), heads=1, head_size=None, names=MAMBA, specs=specs)
    assert r.status == "refuted", str(r)
    assert _check("mamba2", "tp=2", em.mamba2("BxC"), heads=1, head_size=None, names=MAMBA,
                  specs=specs).status == "conformant"  # (the control: an engine that writes B | x | C)


def test_a_users_own_writer_that_leaves_a_byte_unwritten_is_refuted():
    """The Python API takes any writer: this one writes split NHD, but rank 1 leaves the last
    element of its page as it found it."""
    r = _check("split_nhd", "tp=2", _skipping(em.attention("NHD")))
    assert r.status == "refuted" and "never writes it" in str(r) and "rank 1" in str(r), str(r)


def _skipping(write):
    def w(sizes, rank, pages, page_of_block):
        keep = pages[:, -4:].clone()
        write(sizes, rank, pages, page_of_block)
        if rank == 1:
            pages[:, -4:] = keep  # this rank's writer leaves its last element as it found it
    return w


def test_tags_that_do_not_tell_elements_apart_leave_it_unknown():
    def zeros(sizes, rank, pages, page_of_block):
        pages.zero_()
    r = _check("split_nhd", "tp=2", zeros)
    assert r.status == "unknown" and "distinct values" in r.why


def test_the_command(tmp_path):
    from test_cli import run
    out = run("conform", "--family", "split_nhd", "--config", "tp=2", "--config", "tp=4,dcp=2", "--heads", "2",
              "--head-size", "8")
    assert out.returncode == 0 and out.stdout.count("conformant") == 2, out.stdout + out.stderr
    specs = _mutant(tmp_path, "grids.lal", "fn head(h) = head_shard * heads + h",
                    "fn head(h) = h * shards + head_shard")
    out = run("conform", "--family", "split_nhd", "--config", "tp=2", "--specs", specs, "--head-size", "8")
    assert out.returncode == 1 and "refuted" in out.stdout, out.stdout + out.stderr
    from layoutalg.cli.conform import _writer
    from layoutalg.errors import LayoutalgError
    with pytest.raises(LayoutalgError, match="no engine model writes aiter"):
        _writer(None, "aiter")


def test_a_byte_no_run_writes_is_refuted_though_both_sides_hold_the_sentinel():
    """Every 4th byte of each element left unwritten, by the single rank too: both sides hold the
    sentinel there, which must not count as agreeing."""
    nhd = em.attention("NHD")

    def partial(sizes, rank, pages, page_of_block):
        keep = pages.clone()
        nhd(sizes, rank, pages, page_of_block)
        pages[:, 3::4] = keep[:, 3::4]
    r = _check("split_nhd", "tp=2", partial)
    assert r.status == "refuted" and "never writes this byte" in str(r), str(r)


def test_a_writer_that_raises_is_an_error_naming_the_rank():
    from layoutalg.errors import ConfigError

    def boom(sizes, rank, pages, page_of_block):
        raise ValueError("no such head")
    with pytest.raises(ConfigError, match="conform: the writer failed on rank 0 .*ValueError: no such head"):
        _check("split_nhd", "tp=2", boom)
    with pytest.raises(ConfigError, match="^conform: split_nhd cannot size a page"):
        _check("split_nhd", "tp=3", em.attention("NHD"))


# Quantised KV and NVFP4: no vLLM writer of theirs runs on a CPU (docs/trust.md), so engine models
# stand in (`engine_models.quantised`, `engine_models.nvfp4`): 1-byte values tagged in fours.
CONFORM_MUTANTS = Path(__file__).parent / "data" / "conform"
QUANT = {"quant_packed": dict(kv_scales=1, scale_bytes=4, row_align=4),   # rows of head_size 8 + 4: unpadded
         "quant_split": dict(kv_scales=2, scale_bytes=4)}
NVFP4 = {"nvfp4": dict(nvfp4=1, nvfp4_v_swizzle=1), "nvfp4_plain": dict(nvfp4=1, nvfp4_v_swizzle=0)}


def _check_bytes(family, config, writer, heads=4, specs=None):
    names, head_size = (QUANT[family], 8) if family in QUANT else (NVFP4[family], 32)
    return conform.check(family, parse_config(config), writer, heads=heads, block_size=4, head_size=head_size,
                         dtype="int8", names=names, specs=specs)


@pytest.mark.parametrize("family, config, heads", [
    (f, c, h) for f in QUANT for c, h in (("tp=2", 4), ("tp=4", 2), ("tp=2,dcp=2,interleave=2", 1))] + [
    (f, c, h) for f in NVFP4 for c, h in (("tp=2", 4), ("tp=4", 2))])   # (NVFP4 serves no cp)
def test_quantised_and_nvfp4_families_are_what_the_engine_model_writes(family, config, heads):
    r = _check_bytes(family, config, em.WRITERS[family](), heads)
    assert r.status == "conformant" and r.compared > 0, str(r)


def test_quantised_scales_written_head_major_are_proved_and_refuted():
    """quant_split with its scales (K/V, head, token) where vLLM's per-token-head writer stores
    them (K/V, token, head): the prover proves it; conform names the scale that moved."""
    from layoutalg.verify.prove.runner import page_tiles
    specs = CONFORM_MUTANTS / "quant_scales_head_major"
    lib = load([specs / "quant_split.lal"])
    assert page_tiles(lib, "quant_split", "local").status == page_tiles(lib, "quant_split", "canonical").status \
        == "proved"
    assert prove_obligation(lib, "quant_split.scale", "local-bijective", {}, Budgets.of()).status == "proved"
    r = _check_bytes("quant_split", "tp=2", em.quantised("split"), specs=str(specs))
    assert r.status == "refuted", str(r)
    first = str(r).splitlines()[1]
    assert "rank 0, block 0, local byte" in first and "fp32 scale" in first and "token" in first, first
    assert "single-rank engine holds at canonical byte" in first and "the spec sends this byte to canonical" in first
    assert all(m.rank == 0 for m in r.misplaced)  # (the first few: rank 0's scales, its data where the spec says)


def test_nvfp4_scale_tiles_ordered_group_head_are_proved_and_refuted():
    """nvfp4_plain with each side's scales ordered (group, head, token) where vLLM's page holds
    them (head, token, group)."""
    from layoutalg.verify.prove.runner import page_tiles
    specs = CONFORM_MUTANTS / "nvfp4_tiles_group_head"
    lib = load([specs / "nvfp4_plain.lal"])
    assert page_tiles(lib, "nvfp4_plain", "local").status == page_tiles(lib, "nvfp4_plain", "canonical").status \
        == "proved"
    assert prove_obligation(lib, "nvfp4_plain.k_scales", "writers-disjoint", {}, Budgets.of()).status == "proved"
    r = _check_bytes("nvfp4_plain", "tp=2", em.nvfp4(), specs=str(specs))
    assert r.status == "refuted", str(r)
    first = str(r).splitlines()[1]
    assert "rank 0, block 0, local byte" in first and "K scales of head" in first and "canonical byte" in first, first
    # one rank holds every head: the mutant's order is the same permutation on both pages
    assert _check_bytes("nvfp4_plain", "tp=1", em.nvfp4(), specs=str(specs)).status == "conformant"


def test_quant_packed_is_the_head_major_page_not_vllms_default_nhd_strides():
    """vLLM's Triton backend states no KV layout, so its page takes the default preference, LBNHC:
    the packed (token, head) cells slot-major. quant_packed is the LBHNC (HND) page; under NHD
    strides its rank pages read other tokens than a single rank's."""
    r = _check_bytes("quant_packed", "tp=2", em.quantised("packed", "NHD"))
    assert r.status == "refuted" and "token" in str(r), str(r)
    with pytest.raises(Exception, match="vLLM's per-token-head page holds 384 bytes"):  # row_align 16: a padded row
        conform.check("quant_packed", parse_config("tp=2"), em.quantised("packed"), heads=4, block_size=4,
                      head_size=8, dtype="int8", names=dict(QUANT["quant_packed"], row_align=16))

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


# The DSA indexer, packed NHD and ROCm's two-slot page: no vLLM writer of theirs runs on a CPU
# (docs/trust.md), so engine models restate them from vLLM 0.32's source
# (`engine_models.indexer`, `engine_models.packed`, `engine_models.aiter`).
INDEXER = dict(indexer_values=8, indexer_scale_bytes=4)   # a token: 8 fp8 values, one fp32 scale


def _indexer(config, writer, specs=None, block_size=4, values=8):
    return conform.check("dsa_indexer", parse_config(config), writer, heads=1, block_size=block_size,
                         head_size=values + 4, dtype="int8", names=dict(INDEXER, indexer_values=values), specs=specs)


@pytest.mark.parametrize("config", ["tp=2", "tp=4", "tp=2,dcp=2", "tp=1,pcp=2", "tp=2,dcp=2,interleave=2"])
def test_the_dsa_indexer_is_what_the_engine_model_writes(config):
    r = _indexer(config, em.WRITERS["dsa_indexer"]())
    assert r.status == "conformant" and r.compared > 0, str(r)


def test_indexer_scales_placed_before_values_are_proved_and_refuted_under_cp():
    """Every token's scales, then every token's values, where vLLM's writer stores the values from
    byte 0. The keys are alike on every TP rank, so TP alone cannot tell (each rank's page is the
    single rank's); context parallelism deals the tokens out and does."""
    from layoutalg.verify.prove.runner import page_tiles
    specs = CONFORM_MUTANTS / "dsa_scales_first"
    lib = load([specs / "dsa_indexer.lal"])
    for region in ("values", "scales"):
        assert prove_obligation(lib, f"dsa_indexer.{region}", "local-bijective", {}, Budgets.of()).status == "proved"
    # (that the two regions tile the page: not refuted, but unknown to the default budget, where the
    # shipped order is proved)
    assert "refuted" not in (page_tiles(lib, "dsa_indexer", "local").status,
                             page_tiles(lib, "dsa_indexer", "canonical").status)
    assert _indexer("tp=2", em.indexer(), specs=str(specs)).status == "conformant"   # (replicated: alike)
    r = _indexer("tp=2,dcp=2", em.indexer(), specs=str(specs))
    assert r.status == "refuted", str(r)
    first = str(r).splitlines()[1]
    assert "rank 0, block 0, local byte 4" in first and "token 8's values 4..7" in first, first


def test_rocms_shuffled_indexer_is_not_the_shipped_spec_under_cp():
    """ROCm's reader wants the values shuffled in 16 x 16 tiles (`uses_shuffled_layout`, block_size
    > 1); the shipped spec is the CUDA writer's row-major values."""
    assert _indexer("tp=2", em.indexer(shuffle=True), block_size=16, values=32).status == "conformant"
    r = _indexer("tp=2,dcp=2", em.indexer(shuffle=True), block_size=16, values=32)
    assert r.status == "refuted" and "values" in str(r), str(r)


def _packed(config, writer, heads=4, specs=None, family="packed_nhd"):
    return conform.check(family, parse_config(config), writer, heads=heads, block_size=4, head_size=8, dtype="fp32",
                         specs=specs)


@pytest.mark.parametrize("family, config, heads", [
    (f, c, h) for f in ("packed_nhd", "packed_hnd") for c, h in (("tp=2", 4), ("tp=4", 2),
                                                                 ("tp=2,dcp=2,interleave=2", 1))])
def test_packed_families_are_what_the_engine_model_writes(family, config, heads):
    r = _packed(config, em.WRITERS[family](), heads, family=family)
    assert r.status == "conformant" and r.compared > 0, str(r)


def test_packed_nhd_with_heads_outer_is_proved_and_refuted():
    """Packed NHD with a block's cells head-major: one-to-one, tiles; vLLM's LBNHC page is token-major."""
    specs = CONFORM_MUTANTS / "packed_nhd_heads_outer"
    lib = load([specs / "packed_nhd.lal"])
    for claim in ("local-bijective", "writers-disjoint"):
        assert prove_obligation(lib, "packed_nhd", claim, {}, Budgets.of()).status == "proved", claim
    r = _packed("tp=2", em.packed("NHD"), specs=str(specs))
    assert r.status == "refuted", str(r)
    first = str(r).splitlines()[1]
    assert "rank 0, block 0, local byte" in first and "K of token 5, head 0, dim 0" in first, first
    assert _packed("tp=1", em.packed("NHD"), specs=str(specs)).status == "conformant"  # one rank: alike
    # and the shipped packed_nhd is not the head-major page LBHNC gives
    assert _packed("tp=2", em.packed("HND")).status == "refuted"


AITER = dict(aiter_kv=1)


def _aiter(config, writer, heads, specs=None):
    return conform.check("aiter", parse_config(config), writer, heads=heads, block_size=16, head_size=8,
                         dtype="fp32", names=AITER, specs=specs)


@pytest.mark.parametrize("config, heads", [("tp=2", 4), ("tp=4", 2), ("tp=2,dcp=2", 1)])
def test_the_aiter_spec_is_rocm_segmented_attention_not_aiter_fa_or_rocm_attn(config, heads):
    """The shipped `aiter` spec reads the two-slot page `(blocks, 2, block_size, heads * head_size)`
    as split NHD bytes: what ROCM_SEGMENTED_ATTN's stride-aware writer lays. ROCM_AITER_FA (its
    shuffle path, the only one that carves this page) and ROCM_ATTN write each head's K as
    `(head_size / x, block_size, x)` tiles and V shuffled or `(head_size, block_size)`: the
    shipped spec is refuted against both, naming the rank and the K element."""
    assert _aiter(config, em.aiter("segmented"), heads).status == "conformant"
    for writer in ("shuffle", "paged"):
        r = _aiter(config, em.aiter(writer), heads)
        assert r.status == "refuted" and "rank 0, block 0" in str(r) and "K of token" in str(r), str(r)

"""Bad inputs to a copy plan, its descriptors or the spec library: each refused with a clear
error before anything moves, never half-applied."""
import pytest
import torch

from layoutalg.copy.executor import plan
from layoutalg.errors import ConfigError, LayoutMismatch, SpecError
from layoutalg.dsl.library import load
from layoutalg.mapping import CanonicalPageMapping, CopyRun

from conftest import ROOT


def _kv():
    return torch.arange(4 * 64, dtype=torch.int64).remainder(251).to(torch.uint8).view(4, 64)


def _mapping(*runs):
    return CanonicalPageMapping(128, 64, tuple(runs), 1, 0, False)


@pytest.mark.parametrize("empty", [CopyRun(8, 8, 0, 1, 0, 0), CopyRun(8, 8, 8, 0, 8, 8)])
def test_a_run_that_moves_no_byte_is_refused_before_any_copy(empty, monkeypatch):
    """It failed mid-batch on the torch path, with the runs before it already copied."""
    from layoutalg.copy import move
    monkeypatch.setattr(move, "numpy", None)  # the path every non-CPU device takes
    m = _mapping(CopyRun(0, 0, 8, 1, 8, 8), empty, CopyRun(16, 16, 48, 1, 48, 48))
    pages = torch.zeros(4, 128, dtype=torch.uint8)
    with pytest.raises(ConfigError, match="moves no byte"):
        plan(m, _kv()).store(_kv(), [0, 1], pages, [0, 1])
    assert not pages.any()


def test_a_run_that_is_a_plain_tuple_is_a_clear_error():
    with pytest.raises(ConfigError, match="expected a CopyRun of six integers"):
        plan(_mapping((0, 0, 64, 1, 64, 64)), _kv())


@pytest.mark.parametrize("args, message", [
    (dict(block_ids=[2 ** 62], page_ids=[0]), "block_ids holds 4611686018427387904, but the planned tensor has 4"),
    (dict(block_ids=[4], page_ids=[0]), "block_ids holds 4, but the planned tensor has 4 blocks"),
    (dict(block_ids=[0], page_ids=[2 ** 57]), "past what an int64 descriptor holds"),
    (dict(block_ids=[0], page_ids=[0], kv_base=-100), "kv_base is -100"),
    (dict(block_ids=[0], page_ids=[0], kv_base=True), "kv_base is True"),
    (dict(block_ids=[0], page_ids=[0], pages_base=1.5), "pages_base is 1.5"),
    (dict(block_ids=[0], page_ids=[0], block_bytes="64"), "block_bytes is '64'"),
])
def test_descriptors_refuse_ids_and_bases_that_address_nothing(args, message):
    p = plan(_mapping(CopyRun(0, 0, 64, 1, 64, 64)), _kv())
    assert p.descriptors([3], [5]).tolist() == [[192, 640, 64]]
    with pytest.raises(LayoutMismatch, match=message.replace("*", r"\*")):
        p.descriptors(**args)


def test_a_bool_among_ids_is_refused():
    p = plan(_mapping(CopyRun(0, 0, 64, 1, 64, 64)), _kv())
    pages = torch.zeros(4, 128, dtype=torch.uint8)
    with pytest.raises(LayoutMismatch, match="block_ids must be a 1-D int64 tensor or a sequence of ints, got a bool"):
        p.store(_kv(), [0, True], pages, [0, 2])
    assert not pages.any()


@pytest.mark.parametrize("clash", ["param shards in 1 .. 4", "param kv in 1 .. 4"])
def test_a_param_named_like_a_let_or_an_index_names_both(tmp_path, clash):
    """It was blamed on the grid's let alone, or (an index) silently shadowed."""
    (tmp_path / "grids.lal").write_text((ROOT / "specs" / "grids.lal").read_text())
    text = (ROOT / "specs" / "split_nhd.lal").read_text()
    (tmp_path / "s.lal").write_text(f'{clash} "x"\n' + text)
    with pytest.raises(SpecError) as e:
        load([tmp_path / "s.lal"])
    name = clash.split()[1]
    assert f"param '{name}' has the name of" in e.value.message and "s.lal:1" in str(e.value)
    assert ("grids.lal" in e.value.message) == (name == "shards")


def test_a_bool_tensor_or_numpy_bool_among_ids_is_refused():
    import numpy as np
    from layoutalg.copy.ids import id_tensor
    for bad in ([torch.tensor(True), 0], [np.bool_(True), 0]):
        with pytest.raises(LayoutMismatch):
            id_tensor(bad, "block_ids", "store")
    assert id_tensor([np.int64(3), torch.tensor(2)], "block_ids", "store").tolist() == [3, 2]


def test_reshard_names_a_builtin_given_as_a_size_and_the_names_left_at_defaults():
    from layoutalg.tools.distributed import group_of, parse_config
    with pytest.raises(ConfigError, match="--size block_size: 'block_size' is a built-in runtime name"):
        group_of("quant_packed", parse_config("tp=2"), 2, 4, 8, "int8", 4, names={"block_size": 4})
    with pytest.raises(ConfigError, match=r"left at their defaults: kv_scales=0, row_align=16, scale_bytes=4"):
        group_of("quant_packed", parse_config("tp=2"), 2, 4, 8, "int8", 4)
    assert group_of("quant_packed", parse_config("tp=2"), 2, 4, 8, "int8", 4, names={"kv_scales": 1}).world == 2


def test_reshard_refuses_a_size_the_family_does_not_read():
    """A --size the family never reads would change nothing: most likely meant for another family."""
    from layoutalg.tools.distributed import group_of, parse_config
    with pytest.raises(ConfigError, match=r"split_nhd does not read kv_scales \(it reads aiter_kv, cpu_attn_layout, kv_blocks_second\)"):
        group_of("split_nhd", parse_config("tp=2"), 8, 4, 8, "bf16", 4, names={"kv_scales": 1})
    with pytest.raises(ConfigError, match=r"quant_packed does not read n_groups \(it reads kv_scales, "):
        group_of("quant_packed", parse_config("tp=2"), 2, 4, 8, "int8", 4, names={"kv_scales": 1, "n_groups": 2})


NAMES_GRID = """\
grid g:
    world tp * pcp
    require pcp == 1 and dcp == 1
    ranks tp_rank < tp
    fn token(t) = t + shift

layout box(T, D):
    index t < T, d < D
    element 1 bytes
    tensor (block, ...)

family f serves attention:
    grid g
    require per_token_head_quant == 0 and dtype_bytes == 1 and total_heads == tp and heads == 1
    local     box(LOCAL, head_size)
    canonical box(block_size, head_size * tp)
    SEQUENCE
    shard (t, d) -> (t, tp_rank * head_size + d)
"""


@pytest.mark.parametrize("param, local, sequence, row, status", [
    # a name only the spec's reading reads (the grid's fn token): quantified, not left at its default
    ('param shift in 0 .. 8 default 0 "x"', "block_size", "sequence t", "sequence-order", "refuted"),
    # a name the compiler cancels (foo - foo) is still one the reading reads: no row fails to read it
    ('param foo in 1 .. 8 samples 1, 2 "x"\nparam shift in 0 .. 8 default 0 "x"', "block_size + foo - foo", "",
     "local-bijective", "proved"),
])
def test_a_model_quantifies_over_every_name_the_spec_text_reads(tmp_path, param, local, sequence, row, status):
    from layoutalg.verify.prove.runner import prove_family
    text = param + "\n\n" + NAMES_GRID.replace("LOCAL", local).replace("SEQUENCE", sequence)
    (tmp_path / "f.lal").write_text(text)
    rows = {r.obligation: r for r in prove_family(load([tmp_path / "f.lal"]), "f")}
    assert rows[row].status == status, rows[row]
    assert not [r for r in rows.values() if "direct reading failed" in r.method], rows

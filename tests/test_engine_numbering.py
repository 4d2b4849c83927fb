"""`check` holds a grid's placements to vLLM's rank numbering: rank = pcp_rank * tp + tp_rank,
dcp_rank = tp_rank % dcp, a TP rank's KV heads dealt in order (consecutive ranks sharing one
where there are fewer heads than ranks), CP ranks' tokens interleaved. A grid that states its
digits in another order proves and tiles (every rank's bytes are some head's, once), and
copies wrong bytes: the engine's rank 1 holds KV head 0 where the grid says head 1."""
import re

import pytest

from layoutalg.compile.codegen import compile_named
from layoutalg.dsl.interpret import Reading, off_the_engine
from layoutalg.dsl.library import load
from layoutalg.verify.check import check_family

from conftest import ROOT

RANKS = "    ranks pcp_rank < pcp, head_shard < shards, writer < tp / shards / dcp, dcp_rank < dcp\n"


def _library(tmp_path, ranks: str):
    """split NHD over a copy of the shipped grids whose `heads` grid states its digits `ranks`."""
    grids = (ROOT / "specs" / "grids.lal").read_text()
    assert RANKS in grids
    (tmp_path / "grids.lal").write_text(grids.replace(RANKS, ranks))
    (tmp_path / "split_nhd.lal").write_text((ROOT / "specs" / "split_nhd.lal").read_text())
    return load([tmp_path / "split_nhd.lal"])


def test_the_shipped_grid_numbers_ranks_as_vllm_does():
    lib = load([ROOT / "specs" / "split_nhd.lal"])
    for tp, total, dcp, pcp in ((4, 2, 1, 1), (8, 2, 2, 1), (4, 1, 2, 2), (2, 4, 1, 2)):
        sizes = dict(tp=tp, pcp=pcp, dcp=dcp, interleave=2, total_heads=total, heads=max(1, total // tp),
                     block_size=4, head_size=4, dtype_bytes=2, per_token_head_quant=0)
        r = Reading(lib, "split_nhd", {**sizes, "page_size": 2 * 4 * sizes["heads"] * 4 * 2})
        assert [off_the_engine(r, rank) for rank in range(tp * pcp)] == [None] * (tp * pcp)


@pytest.mark.parametrize("ranks, said", [
    # GQA replicas first, then the head: the engine's rank 1 shares rank 0's head
    ("    ranks pcp_rank < pcp, writer < tp / shards / dcp, head_shard < shards, dcp_rank < dcp\n",
     r"holds head\(0\) = 1 by the grid, but vLLM's rank 1 \(tp_rank 1\) holds KV head 0 there"),
    # DCP rank most significant within TP: vLLM's dcp_rank is tp_rank % dcp
    ("    ranks pcp_rank < pcp, dcp_rank < dcp, head_shard < shards, writer < tp / shards / dcp\n",
     r"holds (head\(0\) = \d+ by the grid, but vLLM's rank \d+ \(tp_rank \d+\) holds KV head \d+|"
     r"token\(\d+\) = \d+ by the grid, but vLLM's rank \d+ \(pcp_rank \d+, dcp_rank \d+\) holds token \d+)"),
])
def test_a_grid_that_numbers_ranks_otherwise_fails_check(tmp_path, ranks, said):
    lib = _library(tmp_path, ranks)
    rep = check_family(lib, compile_named(lib, "split_nhd"))
    mine = [e for e in rep.errors if "misstates vLLM's ranks" in e]
    assert len(mine) == 1 and re.search(said, mine[0]), rep.errors
    assert re.match(r"\S*grids\.lal:\d+: grid 'heads' misstates", mine[0]), mine[0]


def test_the_same_grid_in_the_shipped_order_passes(tmp_path):
    lib = _library(tmp_path, RANKS)
    assert check_family(lib, compile_named(lib, "split_nhd")).errors == []

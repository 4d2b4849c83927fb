"""Regressions of a review of the prover and check: a verdict that checked nothing is no pass."""
import shutil

from layoutalg.check import check_family
from layoutalg.compile import compile_named
from layoutalg.library import load
from layoutalg.prove.runner import prove_family

from conftest import ROOT

UNREACHED = '''import "grids.lal"

layout L(T, D):
    index t < T, d < D

family cov serves attention:
    grid private
    case block_size < 1025:
        let x = 1
    case block_size >= 1025:             # live, but only at pages too large to lower
        require head_size >= 4096
        let x = 1
    local     L(block_size, head_size * x)
    canonical L(block_size * tp * pcp, head_size)
    shard (t, d) -> (rank * block_size + t, d)
'''

BLEND = '''import "grids.lal"

layout blend(H, T, D, e, f):             # f = 0: split NHD order; f = 1: split HND order
    index kv < 2, t < T, h < H, d < D
    offset d + D * ((1 - f) * (h + H * t) + f * (t + T * h)) + D * H * T * kv
    element e bytes

family ag serves attention:
    grid heads
    require per_token_head_quant == 0
    case tp == 4:
        let f = 1
    case tp != 4:
        let f = 0
    local     blend(heads, block_size, head_size, dtype_bytes, 0)
    canonical blend(total_heads, block_size * cp, head_size, dtype_bytes, f)
    shard (kv, t, h, d) -> (kv, token(t), head_shard * heads + h, d)
'''


def _lib(tmp_path, text):
    shutil.copy(ROOT / "specs" / "grids.lal", tmp_path / "grids.lal")
    (tmp_path / "f.lal").write_text(text)
    return load([tmp_path / "f.lal"])


def test_runs_rows_of_a_live_case_no_configuration_reaches_are_unknown(tmp_path):
    rows = {r.obligation: r for r in prove_family(_lib(tmp_path, UNREACHED), "cov")}
    for name in ("runs-match-spec", "runs-cover-local"):
        assert rows[name].status == "unknown" and "reaches live case(s) 1" in rows[name].method, rows[name]
    assert rows["writers-cover"].status == "proved"


def test_check_compares_agnostic_layouts_on_every_configuration(tmp_path):
    """The first 40 configurations the oracle reads are all tp=1: the layout changes at tp=4."""
    lib = _lib(tmp_path, BLEND)
    rep = check_family(lib, compile_named(lib, "ag"))
    assert any("agnostic is claimed with tp=1" in e and "tp=4" in e for e in rep.errors), rep.errors[:3]


def test_check_says_when_z3s_configurations_all_fail_closed(tmp_path):
    """The spec's direct reading applies where the compiled family does not (a `//` the normal form
    reads as exact): the error says the two readings disagree, not that Z3 found nothing."""
    lib = _lib(tmp_path, '''import "grids.lal"

layout L(T, D):
    index t < T, d < D

family F6 serves attention:
    grid private
    local     L(block_size, head_size)
    canonical L(block_size * tp * pcp, head_size)
    shard (t, d) -> (rank * block_size + t // 4 % 3 * 4 + t % 4 + t // 12 * 12, d)
''')
    rep = check_family(lib, compile_named(lib, "F6"))
    assert rep.witnesses and any("where the spec's direct reading applies, but the compiled family fails closed"
                                 in e for e in rep.errors), rep.errors

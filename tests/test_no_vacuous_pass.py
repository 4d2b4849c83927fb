"""The prover and `check`: a verdict that checked nothing is no pass."""
import shutil

from layoutalg.verify.check import check_family
from layoutalg.compile.codegen import compile_named
from layoutalg.dsl.library import load
from layoutalg.dsl.interpret import paths
from layoutalg.verify.prove.configurations import witnesses
from layoutalg.verify.prove.runner import Budgets, prove_family

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
    shard (kv, t, h, d) -> (kv, token(t), head(h), d)
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
    """The first 40 configurations the oracle reads are all tp=1: the layout changes at tp=4.
    The two cases' canonical layouts are compared symbolically (`claims.claims_differ`), so
    the compiled family drops the claim and check names both cases."""
    lib = _lib(tmp_path, BLEND)
    rep = check_family(lib, compile_named(lib, "ag"))
    assert any("tp == 4" in e and "tp != 4" in e and "canonical layouts of those cases differ" in e
               for e in rep.errors), rep.errors[:3]
    assert not compile_named(lib, "ag").claims_agnostic


def test_z3s_configurations_are_ones_the_runtime_serves(tmp_path):
    """The normal form reads `t // 4 % 3` as exact splits of t, a guard of the compiler's own that
    the spec does not state: Z3 looks for configurations under that guard too, so each one it
    finds is one the compiled family serves (it found only sizes that fail closed before)."""
    lib = _lib(tmp_path, '''import "grids.lal"

layout L(T, D):
    index t < T, d < D

family F6 serves attention:
    grid private
    local     L(block_size, head_size)
    canonical L(block_size * tp * pcp, head_size)
    shard (t, d) -> (rank * block_size + t // 4 % 3 * 4 + t % 4 + t // 12 * 12, d)
''')
    cf = compile_named(lib, "F6")
    rep = check_family(lib, cf)
    assert rep.witnesses and rep.certified and not rep.errors, rep.errors
    paths_ = paths(lib, "F6")
    for k, path in enumerate(paths_):
        for sizes in witnesses(lib, "F6", path, 3, Budgets.of().small)[0]:
            assert cf.evaluate(sizes), sizes       # served, not failed closed


OVERLAP = '''import "grids.lal"

layout nhd(H, T, D, e):
    index kv < 2, t < T, h < H, d < D
    element e bytes
    tensor (block, ...)

family f serves attention:
    grid heads
    require per_token_head_quant == 0
    case heads >= 1:
        let sa = heads, sb = 1
    case heads == 2:                     # overlaps the first: never taken while it comes second
        let sa = 1, sb = shards
    local     nhd(heads, block_size, head_size, dtype_bytes)
    canonical nhd(total_heads, block_size * cp, head_size, dtype_bytes)
    sequence t
    shard (kv, t, h, d) -> (kv, token(t), head_shard * sa + h * sb, d)
'''


def test_overlapping_cases_in_another_order_are_another_format(tmp_path):
    from layoutalg.ir.identity import layout_id
    from layoutalg.ir.family import resolve
    first = _lib(tmp_path, OVERLAP)
    (tmp_path / "b").mkdir()
    a, b = OVERLAP.index("    case heads >= 1:"), OVERLAP.index("    local ")
    mid = OVERLAP.index("    case heads == 2:")
    swapped = OVERLAP[:a] + OVERLAP[mid:b] + OVERLAP[a:mid] + OVERLAP[b:]
    assert swapped != OVERLAP
    second = _lib(tmp_path / "b", swapped)
    assert layout_id(resolve(first, "f")) != layout_id(resolve(second, "f"))


def test_a_sequence_claim_on_a_page_of_regions_is_proved_region_by_region(tmp_path):
    text = (ROOT / "specs" / "quant_packed.lal").read_text()
    text = text.replace("(kv, token(t), head(h), d)", "(kv, cp_rank * block_size + t, head(h), d)")
    shutil.copy(ROOT / "specs" / "quant_kv.lal", tmp_path / "quant_kv.lal")
    lib = _lib(tmp_path, text)
    from layoutalg.verify.prove.runner import Budgets, prove_obligation
    data = prove_obligation(lib, "quant_packed.data", "sequence-order", {}, Budgets.of())
    scale = prove_obligation(lib, "quant_packed.scale", "sequence-order", {}, Budgets.of())
    assert data.status == "refuted" and scale.status == "proved", (data, scale)


def test_rules_that_double_at_each_level_are_refused_quickly(tmp_path):
    from layoutalg.errors import SpecError
    import pytest
    lines = ["rules r0:", "    require tp >= 1"]
    for i in range(1, 25):
        lines += [f"rules r{i}:", f"    use r{i - 1}", f"    require tp >= {i}", f"    use r{i - 1}"]
    lines += ["grid g:", "    world tp", "    ranks tp_rank < tp", "    use r24"]
    (tmp_path / "bomb.lal").write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError, match="makes a grid of more than 1024 statements"):
        load([tmp_path / "bomb.lal"])


def test_an_index_named_after_a_runtime_quantity_is_a_spec_error(tmp_path):
    from layoutalg.errors import SpecError
    from layoutalg.ir.family import check_layouts
    import pytest
    (tmp_path / "f.lal").write_text("layout l(P):\n    index pcp < 1, b < P\n")
    with pytest.raises(SpecError, match="index 'pcp' of layout 'l' has the name of a runtime quantity"):
        check_layouts(load([tmp_path / "f.lal"]))


def test_opaque_pages_of_two_layer_kinds_are_two_formats():
    from layoutalg.runtime.derive import Deriver
    from layoutalg.runtime.records import LayerSpec, ParallelConfig
    d = Deriver()
    ids = {kind: d.derive(LayerSpec(kind, 512), None, ParallelConfig(tp=2, total_kv_heads=2)).mappings[0].format_id
           for kind in ("attention", "mla", "somekind")}
    assert len(set(ids.values())) == 3, ids


def test_a_fn_defined_twice_on_one_path_is_a_spec_error(tmp_path):
    """A rule's `fn token` after the grid's own would silently win: one definition a path."""
    from layoutalg.errors import SpecError
    from layoutalg.ir.family import resolve
    import pytest
    (tmp_path / "f.lal").write_text(
        "rules r:\n    fn token(t) = t + 1\ngrid g:\n    world tp\n    ranks tp_rank < tp\n    fn token(t) = t\n"
        "    use r\nlayout a(T):\n    index t < T\nfamily f serves fallback:\n    grid g\n    local a(page_size)\n"
        "    canonical a(page_size * tp)\n    shard (t) -> (tp_rank * page_size + token(t))\n")
    with pytest.raises(SpecError, match="fn 'token' is already defined at") as info:
        resolve(load([tmp_path / "f.lal"]), "f")
    assert info.value.span.line == 2

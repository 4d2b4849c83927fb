"""A family with a new layer kind and new runtime names, written as a spec file only:
proved, checked and derived at run time from a temporary folder, with no Python edit."""
import shutil

import pytest

from layoutalg.verify.check import check_family
from layoutalg.compile.codegen import compile_family
from layoutalg.errors import SpecError
from layoutalg.ir.family import resolve
from layoutalg.dsl.library import load
from layoutalg.verify.prove.runner import prove_family
from layoutalg.runtime.derive import Deriver
from layoutalg.runtime.records import LayerSpec, ParallelConfig, TensorLayout

from conftest import DATA

SPEC = DATA / "specs" / "mamba_ssm.lal"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LAYOUTALG_CACHE", "off")
    shutil.copy(SPEC, tmp_path / "mamba_ssm.lal")
    return tmp_path


def test_declared_names_are_proved_over_their_declared_bounds(folder):
    lib = load([folder])
    assert lib.vocabulary()["state_size"].hi == 1024 and lib.vocabulary()["tp"].hi == 1024
    rows = {r.obligation: r for r in prove_family(lib, "mamba_ssm")}
    assert {r.status for r in rows.values()} == {"proved"}
    assert all("all sizes" in rows[n].method for n in ("writers-cover", "digits-match-spec", "shard-in-range"))
    assert all(c["state_size"] in (2, 3) or c["state_size"] <= 16 for c in rows["runs-match-spec"].configurations)


def test_check_samples_the_declared_values(folder):
    lib = load([folder])
    rep = check_family(lib, compile_family(resolve(lib, "mamba_ssm")))
    assert rep.ok and rep.certified > 0


def _ssm_layer(tp=2, heads=4, head_dim=3, state=5, e=2, **drop):
    sizes = {"ssm_heads": heads, "head_dim": head_dim, "state_size": state}
    for k in drop:
        sizes.pop(k)
    page = heads // tp * head_dim * state * e
    return LayerSpec("mamba_ssm", page, dtype_bytes=e, sizes=sizes), ParallelConfig(tp=tp, total_kv_heads=1)


def test_the_runtime_serves_the_new_kind_byte_for_byte(folder):
    tp, heads, head_dim, state, e = 2, 4, 3, 5, 2
    layer, par = _ssm_layer(tp, heads, head_dim, state, e)
    res = Deriver(str(folder)).derive(layer, None, par)
    assert res.result == "certified" and res.family == "mamba_ssm" and len(res.mappings) == tp
    local_heads = heads // tp
    for rank, m in enumerate(res.mappings):
        got = {lo + b: co + b for r in m.runs for lo, co, n in r.triples() for b in range(n)}
        want = {}
        for h in range(local_heads):
            for p in range(head_dim):
                for n in range(state):
                    lo = ((h * head_dim + p) * state + n) * e
                    co = (((rank * local_heads + h) * head_dim + p) * state + n) * e
                    want.update({lo + b: co + b for b in range(e)})
        assert got == want


def test_a_layer_that_lacks_a_declared_name_is_an_error_naming_it(folder):
    """The layer says its kind, and every family of that kind reads the name: a `ConfigError`
    naming it; asked not to be strict (the vLLM adapter), it fails closed with the reason."""
    from layoutalg.errors import MissingNames
    layer, par = _ssm_layer(state_size=None)
    with pytest.raises(MissingNames, match="a 'mamba_ssm' layer must give 'state_size'"):
        Deriver(str(folder)).derive(layer, None, par)
    res = Deriver(str(folder)).derive(layer, None, par, strict=False)
    assert res.result == "no_mappings" and any("'state_size'" in r for r in res.reasons), res.reasons


def test_a_kind_no_family_serves_fails_closed_without_a_fallback(folder):
    res = Deriver(str(folder)).derive(LayerSpec("attention", 64, 4, 1, 8, 2), None, ParallelConfig(1, 1))
    assert res.result == "no_mappings" and "no fallback" in " ".join(res.reasons)


def test_a_declared_name_may_not_shadow_a_built_in_one(tmp_path):
    (tmp_path / "a.lal").write_text('param tp in 1 .. 4 "ranks"\n')
    with pytest.raises(SpecError, match="'tp' is a built-in runtime name"):
        load([tmp_path / "a.lal"])


def test_a_declared_range_must_hold_its_samples(tmp_path):
    (tmp_path / "a.lal").write_text('param g in 1 .. 4 samples 8 "groups"\n')
    with pytest.raises(SpecError, match="8 is outside 1 .. 4"):
        load([tmp_path / "a.lal"])


def test_pcp_as_replicas_is_a_grid_variant_chosen_by_a_runtime_name():
    """The shipped grids deal tokens out over PCP unless a layer says pcp_replicas = 1; then
    PCP ranks hold the same tokens and take turns writing, like GQA replicas."""
    from layoutalg.verify.check import tiling_errors
    d = Deriver()
    tp, pcp, bs, heads, dim, e = 2, 2, 4, 2, 8, 2
    page = 2 * bs * heads * dim * e
    tensor = TensorLayout((3, 2, bs, heads, dim), (2 * bs * heads * dim, bs * heads * dim, heads * dim, dim, 1), e)
    par = ParallelConfig(tp=tp, total_kv_heads=tp * heads, pcp=pcp)
    shards = d.derive(LayerSpec("attention", page, bs, heads, dim, e), tensor, par, 3)
    replicas = d.derive(LayerSpec("attention", page, bs, heads, dim, e, sizes={"pcp_replicas": 1}), tensor, par, 3)
    assert shards.family == replicas.family == "split_nhd"
    assert shards.mappings[0].canonical_page_size_bytes == pcp * tp * page     # tokens of both PCP ranks
    assert replicas.mappings[0].canonical_page_size_bytes == tp * page         # one copy of the tokens
    assert [m.writer_index for m in replicas.mappings] == [0, 0, 1, 1] and replicas.mappings[0].num_writers == 2
    assert replicas.mappings[0].runs == replicas.mappings[2].runs               # PCP ranks hold the same bytes
    assert tiling_errors(replicas.mappings) == [] and tiling_errors(shards.mappings) == []
    assert shards.mappings[0].layout_id == replicas.mappings[0].layout_id      # one family, one format id


SOLO = """\
grid solo:
    world tp * pcp
    require pcp == 1 and dcp == 1
    ranks tp_rank < tp

layout halves(X):
    index h < 2, l < X
    offset l + X * h

layout inter(X, T):
    index h < 2, r < T, l < X
    offset h + 2 * (l + X * r)
"""


def _lib(tmp_path, monkeypatch, text):
    monkeypatch.setenv("LAYOUTALG_CACHE", "off")
    (tmp_path / "t.lal").write_text(SOLO + text)
    return Deriver(str(tmp_path))


def test_an_exact_division_that_cancels_still_needs_a_positive_divisor(tmp_path, monkeypatch):
    """`(w * k) / k` is `w` as a polynomial, but not where k = 0: the runtime must fail closed there."""
    d = _lib(tmp_path, monkeypatch, """
param w in 1 .. 64 samples 1 "row width"
param k in 0 .. 4 "copies"
family f serves thing:
    grid solo
    local     halves(w * k / k)
    canonical halves(w * k / k * tp)
    shard (h, l) -> (h, tp_rank * w + l)
""")
    at = lambda k: d.derive(LayerSpec("thing", 4, sizes={"w": 2, "k": k}), None, ParallelConfig(1, 1))  # noqa: E731
    assert at(1).result == "certified"
    res = at(0)
    assert res.result == "no_mappings" and any("the divisor of" in r and "is positive" in r for r in res.reasons)


def test_a_declared_name_outside_its_bounds_fails_closed(tmp_path, monkeypatch):
    d = _lib(tmp_path, monkeypatch, """
param w in 1 .. 1 samples 1 "row width"
family f serves thing:
    grid solo
    local     halves(w)
    canonical inter(w, tp)
    shard (h, l) -> (h, tp_rank, l)
""")
    assert d.derive(LayerSpec("thing", 2, sizes={"w": 1}), None, ParallelConfig(1, 1)).result == "certified"
    res = d.derive(LayerSpec("thing", 4, sizes={"w": 2}), None, ParallelConfig(1, 1))
    assert res.result == "no_mappings" and any("w = 2 is outside the proved domain [1, 1]" in r for r in res.reasons)


def test_a_grid_that_is_not_the_worker_group_fails_closed(tmp_path, monkeypatch):
    d = _lib(tmp_path, monkeypatch, """
param k in 1 .. 4 samples 1 "copies"
grid wide:
    world tp * pcp * k
    require dcp == 1
    ranks pcp_rank < pcp, tp_rank < tp * k

layout bytes(P):
    index b < P
    offset b

family f serves thing:
    grid wide
    local bytes(page_size)
    canonical bytes(page_size * tp * pcp * k)
    shard (b) -> (rank * page_size + b)
""")
    assert d.derive(LayerSpec("thing", 4, sizes={"k": 1}), None, ParallelConfig(2, 1)).result == "certified"
    res = d.derive(LayerSpec("thing", 4, sizes={"k": 2}), None, ParallelConfig(2, 1))
    assert res.result == "no_mappings" and any("the grid has 4 ranks but the worker group has" in r
                                               for r in res.reasons)


@pytest.mark.parametrize("name", ["class", "None", "lambda", "P", "_x"])
def test_a_param_may_not_take_a_python_or_reserved_name(tmp_path, name):
    (tmp_path / "a.lal").write_text(f'param {name} in 1 .. 4 "x"\n')
    with pytest.raises(SpecError, match="reserved|unexpected"):
        load([tmp_path / "a.lal"])


def test_layer_sizes_none_is_no_sizes_and_a_name_twice_is_an_error():
    from layoutalg.errors import ConfigError
    assert LayerSpec("x", 4, sizes=None).sizes == ()
    with pytest.raises(ConfigError, match="'k' is given twice"):
        LayerSpec("x", 4, sizes=[("k", 1), ("k", 2)])


def test_the_corpus_format_carries_declared_sizes():
    from layoutalg.runtime.corpus import layer_of
    layer, *_ = layer_of({"spec": {"kind": "mamba_ssm", "page_size_bytes": 8, "sizes": {"state_size": 2}},
                          "parallel": {"tp": 1, "total_kv_heads": 1}})
    assert layer.sizes == (("state_size", 2),)


def test_a_floor_division_that_sympy_drops_still_needs_a_positive_divisor(tmp_path, monkeypatch):
    """`(tp // k) * 0` is 0 as a polynomial, but the prover reads it where k > 0 only."""
    d = _lib(tmp_path, monkeypatch, """
param k in 0 .. 4 samples 1 "a size"
family f serves thing:
    grid solo
    require (tp // k) * 0 == 0
    local     halves(1)
    canonical halves(tp)
    shard (h, l) -> (h, tp_rank + l)
""")
    assert d.derive(LayerSpec("thing", 2, sizes={"k": 1}), None, ParallelConfig(1, 1)).result == "certified"
    assert d.derive(LayerSpec("thing", 2, sizes={"k": 0}), None, ParallelConfig(1, 1)).result == "no_mappings"


def test_empty_sizes_are_no_sizes():
    assert LayerSpec("x", 4, sizes={}).sizes == () == LayerSpec("x", 4, sizes=[]).sizes
    hash(LayerSpec("x", 4, sizes={}))


# ---- preferences between families: `before` ----------------------------------------------

TWIN = """grid one:
    world tp * pcp
    require pcp == 1
    ranks r < tp
layout flat(N):
    index i < N
    offset i
family {a} serves twin{a_pref}:
    grid one
    require tp == 1
    local     flat(page_size)
    canonical flat(page_size)
    shard (i) -> (i)
family {b} serves {b_kind}{b_pref}:
    grid one
    require tp == 1
    local     flat(page_size)
    canonical flat(page_size)
    shard (i) -> (i)
"""


def _twins(tmp_path, a_pref="", b_pref="", b_kind="twin", a="zeta", b="alpha"):
    (tmp_path / "t.lal").write_text(TWIN.format(a=a, b=b, a_pref=a_pref, b_pref=b_pref, b_kind=b_kind))
    return tmp_path / "t.lal"


@pytest.mark.parametrize("a_pref, b_pref, taken", [("", "", "alpha"), (", before alpha", "", "zeta"),
                                                     ("", ", before zeta", "alpha"), (", order 0", ", order 1", "zeta"),
                                                     (", before alpha, order 5", "", "zeta"),
                                                     (", order 5, before alpha", "", "zeta")])
def test_where_two_families_hold_a_layer_the_preference_decides(tmp_path, a_pref, b_pref, taken):
    _twins(tmp_path, a_pref, b_pref)
    res = Deriver(tmp_path).derive(LayerSpec("twin", 64), None, ParallelConfig(1, 1))
    assert res.result == "certified" and res.family == taken   # without one, by name: alpha


@pytest.mark.parametrize("a_pref, b_pref, b_kind, message", [
    (", before alpha", ", before zeta", "twin", "the preferences between families alpha and zeta go round in a circle"),
    (", before alpha", "", "other", "family 'zeta' serves 'twin' but 'alpha' serves 'other'"),
    (", before zeta", "", "twin", "family 'zeta' is preferred before itself"),
    (", before flat", "", "twin", "family 'zeta' is preferred before 'flat', which is a layout, not a family"),
    (", before one", "", "twin", "family 'zeta' is preferred before 'one', which is a grid, not a family"),
    (", order 1, order 2", "", "twin", "family 'zeta' says 'order' twice"),
])
def test_a_preference_that_cannot_hold_is_a_spec_error(tmp_path, a_pref, b_pref, b_kind, message):
    from layoutalg.errors import SpecError
    with pytest.raises(SpecError, match=message):
        load([_twins(tmp_path, a_pref, b_pref, b_kind)])


def test_a_preference_over_a_family_not_loaded_is_noted_by_check(tmp_path):
    import subprocess
    import sys
    spec = _twins(tmp_path, ", before gamma")
    out = subprocess.run([sys.executable, "-m", "layoutalg", "check", str(spec)], capture_output=True, text=True)
    assert "family 'zeta' is preferred before 'gamma', which is not loaded with it" in out.stdout, out.stdout

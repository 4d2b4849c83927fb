"""A family with a new layer kind and new runtime names, written as a spec file only:
proved, checked and derived at run time from a temporary folder, with no Python edit."""
import shutil

import pytest

from layoutalg.check import check_family
from layoutalg.compile import compile_family
from layoutalg.errors import SpecError
from layoutalg.family import resolve
from layoutalg.library import load
from layoutalg.prove.runner import prove_family
from layoutalg.runtime import Deriver, LayerSpec, ParallelConfig

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


def test_a_layer_that_lacks_a_declared_name_fails_closed_naming_it(folder):
    layer, par = _ssm_layer(state_size=None)
    res = Deriver(str(folder)).derive(layer, None, par)
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
    with pytest.raises(SpecError, match="sample 8 is outside 1 .. 4"):
        load([tmp_path / "a.lal"])

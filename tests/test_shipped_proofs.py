"""Each shipped family the other tests do not already prove whole is proved for all sizes:
every obligation `proved`, none `unknown` (`layoutalg prove specs/`, the main job, proves
them all; the heavier attention families are proved there and by their own tests' slices)."""
import pytest

from layoutalg.dsl.library import load
from layoutalg.verify.prove.runner import prove_family

from conftest import ROOT

FAMILIES = ("aiter", "dsa_indexer", "flash_nhd", "gdn", "mamba2", "opaque")
"""The mirrors (flash_hnd, gdn_ds, mamba2_ds: another order of the same page) are proved by the
main job, as the attention families and nvfp4 are (tests/test_nvfp4.py holds nvfp4 to an
engine model of vLLM's writer)."""


@pytest.mark.parametrize("family", FAMILIES)
def test_shipped_family_is_proved_whole(family):
    lib = load([ROOT / "specs" / f"{family}.lal"])
    rows = prove_family(lib, family)
    assert rows, f"{family}: no obligation was checked"
    bad = [(r.family, r.obligation, r.status, r.detail[:200]) for r in rows if r.status != "proved"]
    assert not bad, bad

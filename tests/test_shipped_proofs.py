"""Each shipped family the other tests do not already prove whole is proved for all sizes:
every obligation `proved`, none `unknown`. The suite proves the three quick ones, a page of
regions of each kind and the fallback; `.ci/proofs` runs the main job (`layoutalg prove specs/`,
every family, cold) apart from pytest, and `LAYOUTALG_FULL=1` proves all six here."""
import pytest

from layoutalg.dsl.library import load
from layoutalg.verify.prove.runner import prove_family

from conftest import FULL, ROOT

FAMILIES = ("aiter", "dsa_indexer", "flash_nhd", "gdn", "mamba2", "opaque")
"""The mirrors (flash_hnd, gdn_ds, mamba2_ds: another order of the same page) are proved by the
main job, as the attention families and nvfp4 are (tests/test_nvfp4.py holds nvfp4 to an
engine model of vLLM's writer)."""
SLICE = ("gdn", "mamba2", "opaque")


@pytest.mark.parametrize("family", FAMILIES if FULL else SLICE)
def test_shipped_family_is_proved_whole(family):
    lib = load([ROOT / "specs" / f"{family}.lal"])
    rows = prove_family(lib, family)
    assert rows, f"{family}: no obligation was checked"
    bad = [(r.family, r.obligation, r.status, r.detail[:200]) for r in rows if r.status != "proved"]
    assert not bad, bad

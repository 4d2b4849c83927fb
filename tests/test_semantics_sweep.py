"""Configurations outside the corpus (tp 16, pcp 4, dcp 8, block sizes 1 to 64, head sizes
1 to 128, 4-byte elements, one or five blocks), against a clean-room oracle of
SEMANTICS.md: a seeded slice here, the whole sweep from `tests/semantics_sweep.py`."""
import io
import random

import semantics_oracle
from semantics_sweep import differ, sweep

from layoutalg.runtime.derive import Deriver


def test_a_slice_of_the_sweep_agrees_with_the_oracle():
    out = io.StringIO()
    agreed, bad, results = sweep(1500, seed=7, out=out)
    assert bad == 0, out.getvalue()[:2000]
    assert results["certified"] > 600 and results["opaque"] > 300 and results["no_mappings"] > 20


def test_the_oracle_sees_a_token_placed_one_chunk_off(monkeypatch):
    """The comparison can fail: an oracle whose cp ranks deal tokens one rank over disagrees."""
    rank = semantics_oracle._rank

    def shifted(par, r):
        ctx = rank(par, r)
        token = ctx["token"]
        return {**ctx, "token": lambda t: token(t) if ctx["cp"] == 1 else token(t) ^ 1}
    monkeypatch.setattr(semantics_oracle, "_rank", shifted)
    rng, deriver = random.Random(3), Deriver()
    rows = [semantics_oracle.random_row(rng) for _ in range(400)]
    served = [r for r in rows if semantics_oracle.expected(r)["result"] == "certified"
              and r["parallel"]["dcp"] * r["parallel"]["pcp"] > 1]
    assert served and all(differ(r, deriver) for r in served)

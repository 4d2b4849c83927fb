"""The whole reshard matrix, in one process (the suite runs a slice: tests/test_reshard.py).

    python tests/reshard_matrix.py [--prove]

Every ordered pair of the configurations below that share a canonical page format, for
every family of one layout: the direct plan and the path through canonical pages give
the same consumer bytes, each the hash of its coordinate in the spec; with --prove, Z3
proves each pair's plan against the spec. Pairs of different page formats (another cp)
are counted apart, as refused. Last line: `N passed, M failed`; exits 1 on any failure.
"""
from __future__ import annotations

import itertools
import sys
import time

from layoutalg.errors import ConfigError
from layoutalg.library import load_default
from layoutalg.prove.reshard import prove_plans
from layoutalg.prove.runner import Budgets
from layoutalg.reshard import ReshardError, direct_plans

import test_reshard as t

CONFIGS = ["tp=1", "tp=2", "tp=4", "tp=8", "tp=16", "tp=8,dcp=2", "tp=16,dcp=2", "tp=8,dcp=2,interleave=2",
           "tp=16,dcp=2,interleave=2", "tp=1,pcp=2", "tp=2,pcp=2", "tp=4,pcp=2", "tp=2,pcp=2,pcp_replicas=1",
           "tp=4,pcp=2,pcp_replicas=1", "tp=2,dcp=2", "tp=4,dcp=2,interleave=2"]
FAMILIES = [("split_nhd", 4), ("split_hnd", 4), ("packed_nhd", 4), ("packed_hnd", 2), ("mla", 1)]


def main(prove: bool) -> int:
    passed = failed = refused = unserved = 0
    t0 = time.perf_counter()
    for family, heads in FAMILIES:
        groups = {}
        for c in CONFIGS:
            try:
                groups[c] = t._group(family, heads, c)
            except ConfigError:
                unserved += 1
        for a, b in itertools.permutations(groups, 2):
            x, y = groups[a], groups[b]
            try:
                plans = direct_plans(x.mappings, y.mappings)
            except ReshardError:
                refused += 1
                continue
            try:
                t.test_direct_plan_equals_the_path_through_canonical_pages(family, heads, a, b)
                if prove:
                    rows = prove_plans(load_default(), family, x.sizes, y.sizes, plans, Budgets.of().config)
                    assert all(r.status == "proved" for r in rows), rows
                passed += 1
            except AssertionError as e:
                failed += 1
                print(f"FAILED {family} {a} -> {b}: {e}")
    print(f"{unserved} (family, configuration) not served, {refused} pairs of different page formats refused, "
          f"{time.perf_counter() - t0:.1f} s")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    sys.exit(main("--prove" in sys.argv))

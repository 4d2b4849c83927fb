"""Sweep configurations outside the corpus against the clean-room oracle of SEMANTICS.md.

    python tests/semantics_sweep.py [--count 5000] [--seed 1]

Prints one line per disagreement and a last line `N agreed, M differ` (exit 1 if any
differ, 2 if nothing was compared). The suite runs a slice (tests/test_semantics_sweep.py).
"""
from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from semantics_oracle import expected, random_row  # noqa: E402

from layoutalg.runtime.corpus import derive_row  # noqa: E402
from layoutalg.mapping import CopyRun, merged_triples  # noqa: E402
from layoutalg.runtime.derive import Deriver  # noqa: E402

FIELDS = ("canonical_page_size_bytes", "local_page_size_bytes", "num_writers", "writer_index",
          "parallelism_agnostic")


def differ(row: dict, deriver: Deriver) -> str:
    """'' when layoutalg answers the row as the oracle does, else what differs."""
    want, got = expected(row), derive_row(deriver, row)
    if got["result"] != want["result"]:
        return f"result {got['result']} != {want['result']}"
    if "ranks" not in want:
        return "" if "ranks" not in got else "ranks present for no_mappings"
    if len(got["ranks"]) != len(want["ranks"]):
        return f"{len(got['ranks'])} ranks != {len(want['ranks'])}"
    for rank, (g, w) in enumerate(zip(got["ranks"], want["ranks"])):
        for f in FIELDS:
            if g[f] != w[f]:
                return f"rank {rank}: {f} {g[f]} != {w[f]}"
        if [list(t) for t in merged_triples([CopyRun(*r) for r in g["runs"]])] != w["triples"]:
            return f"rank {rank}: byte map differs"
    return ""


def sweep(count: int, seed: int, out=sys.stdout) -> tuple[int, int, Counter]:
    rng, deriver = random.Random(seed), Deriver()
    agreed, bad, results = 0, 0, Counter()
    for k in range(count):
        row = random_row(rng)
        why = differ(row, deriver)
        results[expected(row)["result"]] += 1
        if why:
            bad += 1
            print(f"row {k}: {why}: {row}", file=out)
        else:
            agreed += 1
    return agreed, bad, results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    agreed, bad, results = sweep(a.count, a.seed)
    print(f"results: {dict(results)}")
    print(f"{agreed} agreed, {bad} differ")
    return 1 if bad else 2 if agreed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())

"""All-sizes reshard proofs: how long `prove --reshard` takes for one configuration pair.

    python benchmarks/replan_bench.py [--slow]

Each pair is proved in a fresh process (`prove.replan.prove_all_sizes`, the shipped
library, default budgets), so no pair inherits another's Z3 terms. Pairs across another
cp with k = 2, 4 and 8 small pages a big one (k * k strided pieces a residue case, one case
per residue); --slow adds split HND tp=8,dcp=8,interleave=4 -> tp=8 (64 virtual producers
in 8 cases: about 17 minutes on 2 cores). A pair whose rows are not all proved is printed
as such: a time of a proof that failed is no benchmark.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PAIRS = [
    ("split_nhd", "tp=2", "tp=2,dcp=2"),
    ("split_nhd", "tp=2", "tp=2,dcp=2,interleave=4"),
    ("split_hnd", "tp=2", "tp=2,dcp=2,interleave=16"),
    ("mla", "tp=4,dcp=2,interleave=4", "tp=2"),
    ("quant_split", "tp=2,dcp=2", "tp=2"),
    ("split_nhd", "tp=2,dcp=2,interleave=4", "tp=4,dcp=4,interleave=4"),
    ("split_hnd", "tp=8", "tp=2"),  # one cp: GQA replicas, no residue cases
    ("split_nhd", "tp=4", "tp=4,dcp=4,interleave=2"),  # k = 4
    ("split_nhd", "tp=8", "tp=8,dcp=8"),  # k = 8
    ("split_nhd", "tp=2,block_size=16", "tp=4,block_size=64"),  # another block size: B against 4 * B, every B
    ("split_hnd", "tp=4,block_size=48", "tp=2,block_size=16"),  # big producer pages, each read as 3
]
SLOW = [("split_hnd", "tp=8,dcp=8,interleave=4", "tp=8")]

_ONE = """
import sys
from layoutalg.dsl.library import load_default
from layoutalg.params import parse_config
from layoutalg.verify.prove.reshard.all_sizes import prove_all_sizes
from layoutalg.verify.prove.runner import Budgets
rows = prove_all_sizes(load_default(), sys.argv[1], parse_config(sys.argv[2], also=("block_size",)),
                       parse_config(sys.argv[3], also=("block_size",)), Budgets.of().full)
print(" ".join(f"{r.obligation}={r.status}" for r in rows))
"""


def one(family: str, store: str, load: str) -> tuple[float, str]:
    subprocess.run([sys.executable, "-c", "import layoutalg.dsl.library"], cwd=ROOT, check=True)  # warm the disk cache
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _ONE, family, store, load], capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - t
    if out.returncode:
        return took, f"failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}"
    return took, out.stdout.strip()


def main(slow: bool) -> int:
    print("| family | store | load | rows | time |\n|---|---|---|---|---|")
    bad = 0
    for family, store, load in PAIRS + (SLOW if slow else []):
        took, rows = one(family, store, load)
        ok = rows and all(r.endswith("=proved") for r in rows.split())
        bad += not ok
        print(f"| {family} | {store} | {load} | {'proved' if ok else rows} | {took:.1f} s |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main("--slow" in sys.argv))

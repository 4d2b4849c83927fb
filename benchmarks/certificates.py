"""Certificates of the whole shipped library, re-checked by cvc5: how many of each row's files
cvc5 answers unsat, and how long it takes.

    python benchmarks/certificates.py [--timeout S] [--jobs N] [SPEC|DIR ...]

Writes the certificates into a fresh temporary folder (`layoutalg prove --certificates`),
runs `layoutalg certify` on it, and prints a table: one line an obligation, with its files,
how many are unsat / unknown / sat / error, and the seconds cvc5 took on them.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

from layoutalg.cli.app import main as cli
from layoutalg.verify.certify import certify


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="*", default=[])
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--summarise", metavar="LOG", help="only print the table of an earlier run's certify.log")
    a = ap.parse_args()
    if a.summarise:
        summarise(a.summarise)
        return 0
    folder = os.path.join(tempfile.mkdtemp(prefix="layoutalg-certificates-"), "certs")
    t0 = time.perf_counter()
    cli(["prove", *a.specs, "--certificates", folder])
    made = time.perf_counter() - t0
    log = os.path.join(os.path.dirname(folder), "certify.log")
    t0 = time.perf_counter()
    with open(log, "w") as out:  # line by line, so a run cut short can still be read
        rc = certify(folder, a.timeout, a.jobs, out=out)
    checked = time.perf_counter() - t0
    summarise(log)
    print(f"prove and write: {made:.1f} s; certify (timeout {a.timeout:g} s a configuration, {a.jobs} jobs): "
          f"{checked:.1f} s; certificates in {folder}")
    return rc


def summarise(log: str) -> None:
    """The table of a `layoutalg certify` output (`log`), one line an obligation."""
    lines = open(log).read().splitlines()
    last = lines[-1] if lines and "certificates:" in lines[-1] else "(cut short: no summary line)"
    rows = collections.defaultdict(lambda: collections.Counter())
    for line in (x for x in lines if "certificates:" not in x):
        answer, _, secs, path = line.split(maxsplit=3)
        file = os.path.basename(path.split("  FAIL")[0])
        name = file.split(".case")[0].removesuffix(".smt2") + (" (chains)" if ".chain-" in file else "")
        rows[name][answer.rstrip(":")] += 1
        rows[name]["FAIL"] += "  FAIL" in path
        rows[name]["seconds"] += float(secs.rstrip("s"))
    print(f"\n{'obligation':<30} {'files':>6} {'unsat':>6} {'sat':>4} {'unknown':>8} {'error':>6} {'failed':>7} "
          f"{'cvc5 s':>8}")
    for name, c in sorted(rows.items()):
        files = sum(v for k, v in c.items() if k not in ("seconds", "FAIL"))
        print(f"{name:<30} {files:>6} {c['unsat']:>6} {c['sat']:>4} {c['unknown']:>8} {c['error']:>6} {c['FAIL']:>7} "
              f"{c['seconds']:>8.1f}")
    print(last)


if __name__ == "__main__":
    sys.exit(main())

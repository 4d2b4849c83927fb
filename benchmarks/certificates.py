"""Certificates of the whole shipped library, re-checked by cvc5: how many of each row's files
cvc5 answers unsat, and how long it takes.

    python benchmarks/certificates.py [--timeout S] [--jobs N] [--folder DIR] [SPEC|DIR ...]

Writes the certificates into a fresh temporary folder (`layoutalg prove --certificates`;
`--folder` takes one written before instead), runs `layoutalg certify` on it, and prints a
table: one line an obligation, with its files, how many are unsat / unknown / sat / error,
and the seconds cvc5 took on them; then the content audit's line and the run's times.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
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
    ap.add_argument("--folder", metavar="DIR", help="certify this folder of certificates (written before) instead")
    a = ap.parse_args()
    if a.summarise:
        summarise(a.summarise)
        return 0
    made = 0.0
    if a.folder:
        folder = os.path.abspath(a.folder)
    else:
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
    print(("" if a.folder else f"prove and write: {made:.1f} s; ") + f"certify (timeout {a.timeout:g} s a configuration, {a.jobs} jobs): "
          f"{checked:.1f} s; certificates in {folder}")
    return rc


def summarise(log: str) -> None:
    """The table of a `layoutalg certify` output (`log`), one line an obligation."""
    lines = open(log).read().splitlines()
    last = next((x for x in lines if " certificates: " in x), "(cut short: no summary line)")
    rows = collections.defaultdict(lambda: collections.Counter())
    for line in lines:
        if not re.match(r"^\S+ +\S+ +[\d.]+s  ", line):  # (the audit's line, the summary, the errors)
            continue
        answer, _, secs, path = line.split(maxsplit=3)
        vacuity = " without its goal" in path  # (a file's goal dropped: to be sat)
        file = os.path.basename(path.split("  FAIL")[0].replace(" without its goal", ""))
        name = file.split(".case")[0].removesuffix(".smt2") + (" (chains)" if ".chain-" in file else "") + \
            (" (vacuity)" if vacuity else "")
        rows[name][answer.rstrip(":")] += 1
        rows[name]["FAIL"] += "  FAIL" in path
        rows[name]["seconds"] += float(secs.rstrip("s"))
    print(f"\n{'obligation':<30} {'files':>6} {'unsat':>6} {'sat':>4} {'unknown':>8} {'error':>6} {'failed':>7} "
          f"{'cvc5 s':>8}")
    for name, c in sorted(rows.items()):
        files = sum(v for k, v in c.items() if k not in ("seconds", "FAIL"))
        print(f"{name:<30} {files:>6} {c['unsat']:>6} {c['sat']:>4} {c['unknown']:>8} {c['error']:>6} {c['FAIL']:>7} "
              f"{c['seconds']:>8.1f}")
    print(next((x for x in lines if x.startswith("audit: ")), "audit: (no line)"))
    print(last)
    errors = [x for x in lines if x.startswith("error: ")]
    print(f"{len(errors)} error line(s)" + "".join(f"\n  {x[:300]}" for x in errors[:20]))


if __name__ == "__main__":
    sys.exit(main())

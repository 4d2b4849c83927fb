"""The shipped library's figures, from a fresh run: what `docs/proofs.md` and `docs/benchmarks.md` say.

    python benchmarks/library.py [--jobs N] [--write]

Runs `layoutalg prove` and `layoutalg check` on the shipped library with the cache off
(a fresh `LAYOUTALG_CACHE`), and prints the counts (families, obligations, each verdict)
and each family's times as markdown. With `--write` it puts them between the
`<!-- library: begin -->` and `<!-- library: end -->` marks of both documents, so the
figures there are the last run's, never typed.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = {"proofs": ROOT / "docs" / "proofs.md", "benchmarks": ROOT / "docs" / "benchmarks.md"}
BEGIN, END = "<!-- library: begin (benchmarks/library.py --write) -->", "<!-- library: end -->"


def _run(args: list, env: dict) -> tuple[str, str, float]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "layoutalg", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    return p.stdout, p.stderr, time.perf_counter() - t


def measure(jobs: int) -> dict:
    env = {**os.environ, "LAYOUTALG_CACHE": tempfile.mkdtemp(prefix="layoutalg-library-")}
    out, err, prove_s = _run(["prove", "specs/", "--jobs", str(jobs)], env)
    summary = next((x for x in out.splitlines() if re.match(r"\d+ obligations:", x)), "")
    if not summary:
        raise SystemExit(f"prove gave no summary line:\n{out[-2000:]}\n{err[-2000:]}")
    per = {m.group(1): (m.group(2), int(m.group(3)), float(m.group(4)))
           for m in re.finditer(r"^\[\d+/\d+\] (\S+): (\w+) \((\d+) rows, ([\d.]+) s\)", err, re.M)}
    pages = sum(1 for f in per if re.search(rf"^specs/\S+\s+{re.escape(f)}\.\w+\s", out, re.M))
    cout, _, check_s = _run(["check", "specs/"], env)
    checks = {m.group(1): (m.group(2).strip(), float(m.group(3)))
              for m in re.finditer(r"^(\w+)\s+\d+\s+\d+\s+\d+\s+(.+?) \(([\d.]+) s", cout, re.M)}
    return {"summary": summary, "per": per, "pages": pages, "prove_s": prove_s, "check_s": check_s,
            "checks": checks, "jobs": jobs, "date": datetime.date.today().isoformat()}


def proofs_text(m: dict) -> str:
    return (f"On the shipped library, `layoutalg prove specs/` gives, over {len(m['per'])} families ({m['pages']} "
            f"of them pages of regions, proved region by region), {m['summary'].rstrip('.')} ({m['date']}; "
            f"time and budget in [benchmarks.md](benchmarks.md#proofs)).")


def benchmarks_text(m: dict) -> str:
    rows = "\n".join(f"| {f} | {v} | {n} | {s:.1f} s | {m['checks'].get(f, ('-', 0.0))[1]:.2f} s |"
                     for f, (v, n, s) in sorted(m["per"].items()))
    return (f"`python benchmarks/library.py --jobs {m['jobs']}` ({m['date']}, cache off, two cores): "
            f"`layoutalg prove specs/` {m['prove_s']:.0f} s, `layoutalg check specs/` {m['check_s']:.0f} s. "
            f"Over {len(m['per'])} families, {m['summary'].rstrip('.')}.\n\n"
            f"| family | verdict | rows | prove (one worker) | check |\n|---|---|---|---|---|\n{rows}")


def write(name: str, text: str) -> None:
    path = DOCS[name]
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} marks to write between")
    head, rest = doc.split(BEGIN, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--write", action="store_true", help="write the figures into docs/proofs.md and docs/benchmarks.md")
    a = ap.parse_args()
    m = measure(a.jobs)
    texts = {"proofs": proofs_text(m), "benchmarks": benchmarks_text(m)}
    for name, text in texts.items():
        print(text, end="\n\n")
        if a.write:
            write(name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Prover speed: the whole shipped library from a cold cache, one configuration, a warm cache;
and the compiler's, the library compiled from its specs.

    python benchmarks/prove_bench.py

Runs `layoutalg prove` in fresh processes with a private cache folder, so "cold"
really compiles and proves everything and "warm" only reads the cache.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def prove(env, *args) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "layoutalg.cli", "prove", *args], capture_output=True, text=True,
                         cwd=ROOT, env=env).stdout
    return time.perf_counter() - t, out


def one_configuration() -> float:
    """The symbolic obligations of split HND at one configuration (tp=8, pcp=2, dcp=2), symbolic rank."""
    from layoutalg.ir.family import resolve
    from layoutalg.dsl.interpret import Reading, paths
    from layoutalg.dsl.library import load_default
    from layoutalg.verify.prove.obligations import SYMBOLIC, Model, query
    from layoutalg.verify.prove.runner import Budgets
    lib = load_default()
    fam = resolve(lib, "split_hnd")
    sizes = dict(tp=8, pcp=2, dcp=2, interleave=4, total_heads=8, heads=1, block_size=16, head_size=128,
                 dtype_bytes=2, page_size=2 * 16 * 128 * 2, per_token_head_quant=0, compress_ratio=1)
    path = tuple(Reading(lib, "split_hnd", sizes).taken)
    variant = fam.variants[paths(lib, "split_hnd").index(path)]
    t = time.perf_counter()
    for name in SYMBOLIC:
        m = Model(lib, "split_hnd", path, sizes=sizes)
        v, _ = query(m, name, variant, fam.atoms)
        status, _ = m.solve(v, Budgets.of().config)
        assert status == "unsat", (name, status)
    return time.perf_counter() - t


def compile_library() -> float:
    """Compiling the shipped library from its specs in a fresh process (what the first
    `Deriver()` on a machine does before the cache holds it), best of three."""
    code = ("import time; t = time.perf_counter(); from layoutalg.runtime.derive import compiled_library; "
            "compiled_library(); print(time.perf_counter() - t)")
    env = {**os.environ, "LAYOUTALG_CACHE": "off"}
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                    env=env, check=True).stdout) for _ in range(3))


def budget_margin() -> str:
    """The most Z3 resource units any decided query of the shipped library used, against the budget.

    Verdicts are decided by this count, not by seconds: the margin says how far the
    hardest proof is from turning unknown (on any machine, under any load).
    """
    from layoutalg.dsl.library import load_default
    from layoutalg.verify.prove import RLIMIT
    from layoutalg.verify.prove.z3ops import PEAK
    from layoutalg.verify.prove.runner import prove_family
    lib = load_default()
    for family in lib.families:
        prove_family(lib, family)
    return (f"hardest proof (unsat) used {PEAK['unsat']:,} resource units, hardest counterexample (sat) "
            f"{PEAK['sat']:,}; budget {RLIMIT:,} per symbolic query, {RLIMIT // 10:,} per configuration")


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "LAYOUTALG_CACHE": cache}
        cold, out = prove(env, "specs/", "--jobs", "2")
        warm, _ = prove(env, "specs/")
    summary = next(line for line in out.splitlines() if "obligations:" in line and "proved" in line)
    print("| what | time |\n|---|---|")
    print(f"| `layoutalg prove specs/ --jobs 2`, cold cache | {cold:.1f} s |")
    print(f"| the same, warm cache | {warm:.2f} s |")
    print(f"| compile the shipped library (a fresh process, cache off), best of 3 | {compile_library():.1f} s |")
    print(f"| the 8 symbolic obligations of split HND at one configuration, symbolic rank | "
          f"{one_configuration():.2f} s |")
    print(f"\n{summary}")
    print(f"\n{budget_margin()}")
    fams = {}
    for line in out.splitlines():
        m = re.match(r"^\S+\s+([\w.']+)\s+[\w-]+\s+\w+\s+([\d.]+)s", line)
        if m:  # a family of pages is the sum of its regions' parts (`mamba2.x`, ...) and its own rows
            f = m.group(1).split(".")[0]
            fams[f] = fams.get(f, 0.0) + float(m.group(2))
    print("\n| family | prover time (all obligations) |\n|---|---|")
    for f, t in fams.items():
        print(f"| {f} | {t:.1f} s |")


if __name__ == "__main__":
    main()

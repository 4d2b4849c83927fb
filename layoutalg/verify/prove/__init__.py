"""Proofs with Z3 (offline; the runtime never imports this package).

    structural  the stride-chain certificate on the digit table, for all sizes (sympy)
    z3ops       integer arithmetic of the spec's direct reading, as Z3 terms
    obligations the proof obligations of a family, as Z3 queries with counterexamples
    runner      which obligations, in which mode, cached by spec and prover version
    reshard     one configuration pair's direct plans, checked at its sizes
    symplan     a pair's direct plans for every model size, built in the algebra
    replan      those plans checked by Z3 for every size (across another cp too)
    coverage    the runtime's question "is this configuration proved?", without Z3
"""

PROVER_VERSION = "3"

RLIMIT = 120_000_000
"""Z3 resource units for one fully symbolic query (shared by its seeds); the counterexample
hunt gets a twentieth, a query at one configuration a tenth. Resource units, unlike
seconds, give the same verdict on every machine and under any load. Calibrated on the
shipped specs (see benchmarks/prove_bench.py)."""

GUARD_S = 120.0
"""Seconds after which a query is abandoned whatever its budget: a last guard only."""

"""Proofs with Z3 (offline; the runtime never imports this package).

    structural  the stride-chain certificate on the digit table, for all sizes (sympy)
    z3ops       integer arithmetic of the spec's direct reading, as Z3 terms
    obligations the proof obligations of a family, as Z3 queries
    registry    what each obligation is (one record a name, in one list)
    store       the rows, the meanings (views of the registry), the cache
    runner      which obligations, in which mode, for each family
    explain     counterexamples in words
    meaning     one page format across configurations (`one-format`)
    together    which two families of one kind can take one layer
    pipeline    a model page written by the stages of a pipeline
    reshard/    direct plans between two configurations: at given sizes (`at_sizes`), and
                built for every size (`symplan`) and checked for every size (`all_sizes`)
"""

PROVER_VERSION = "3"

RLIMIT = 120_000_000
"""Z3 resource units for one fully symbolic query (shared by its seeds); the counterexample
hunt gets a twentieth, a query at one configuration a tenth. Resource units, unlike
seconds, give the same verdict on every machine and under any load. Calibrated on the
shipped specs (see benchmarks/prove_bench.py)."""

GUARD_S = 120.0
"""Seconds after which a query is abandoned whatever its budget: a last guard only."""

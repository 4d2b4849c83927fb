"""Proofs with Z3 (offline; the runtime never imports this package).

    structural  the stride-chain certificate on the digit table, for all sizes (sympy)
    z3ops       integer arithmetic of the spec's direct reading, as Z3 terms
    obligations the proof obligations of a family, as Z3 queries with counterexamples
    runner      which obligations, in which mode, cached by spec and prover version
    coverage    the runtime's question "is this configuration proved?", without Z3
"""

PROVER_VERSION = "1"

"""Verification, each check sharing as little as possible with what it checks: enumeration
(`check`), the configurations of a family and their pages (`samples`), an engine-level oracle
(`oracle`), tensor recognition (`recognition`), whether a configuration is covered by a proof
(`coverage`), and the Z3 prover (`prove`).
"""

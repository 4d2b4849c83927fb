"""The spec language: grammar -> syntax tree (`syntax`), syntax trees -> name tables
(`library`), and a direct reading of a family's syntax tree with no algebra (`interpret`),
the independent oracle the checks and the prover read.
"""

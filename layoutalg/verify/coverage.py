"""The runtime's question "is this family proved, and at this configuration?", without Z3.

Reads what `layoutalg prove` cached (see `cli.prove`): an obligation proved for all
sizes covers every configuration; one proved on enumerated configurations covers
those. The answer is only as fresh as the last `layoutalg prove` on the same specs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..verdicts import Verdict



@dataclass(frozen=True)
class Coverage:
    family: str
    proved: tuple[str, ...]      # obligations that cover the configuration
    not_covered: tuple[str, ...]  # obligations proved elsewhere, refuted or unknown

    @property
    def complete(self) -> bool:
        return not self.not_covered and bool(self.proved)


def coverage(family: str, sizes: dict, spec_dir: str | Path | None = None) -> Coverage | None:
    """Which cached proofs cover `family` at `sizes`; None when nothing is cached."""
    from ..dsl.library import load_default
    from .prove.store import proof_key, read
    lib = load_default(spec_dir)
    if family not in lib.families:
        return None
    rows = read(proof_key(lib, family))
    if rows is None:
        return None
    key = {k: sizes[k] for k in sizes}
    proved, missing = [], []
    for r in rows:
        ok = r["status"] == Verdict.PROVED and ("all sizes" in r["method"] or any(
            all(c.get(k) == key.get(k) for k in c) for c in r["configurations"]))
        (proved if ok else missing).append(r["obligation"])
    return Coverage(family, tuple(proved), tuple(missing))

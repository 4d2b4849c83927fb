"""Verdicts: the closed sets of words a proof or a derivation answers with, as enums.

A `Word` is a `str` (an enum with `str` mixed in) that reads, prints, formats, hashes, pickles
to JSON and compares exactly as its bare word: `Verdict.PROVED == "proved"`, `f"{v:<8}"`,
`json.dumps`, a cached proof's rows and the CLI's tables are what they were when the verdicts
were plain strings. What it adds is the closed set: `Verdict("proven")` raises `ValueError`,
so a record that carries one (`store.Row`, the runtime's `LayerResult`) checks its word once,
where it is built, and a misspelt comparison is a name that does not exist (`Verdict.PROVEN`)
rather than a test that is silently always false.

Examples:
    >>> v = Verdict("proved")
    >>> (v is Verdict.PROVED, v == "proved", str(v), f"{v}|{v:>8}|", repr(v))
    (True, True, 'proved', 'proved|  proved|', "'proved'")
    >>> import json; json.dumps({"status": Verdict.REFUTED, Verdict.UNKNOWN: 1})
    '{"status": "refuted", "unknown": 1}'
    >>> {"proved": 1}[Verdict.PROVED], Verdict.PROVED in {"proved"}
    (1, True)
    >>> Verdict("proven")
    Traceback (most recent call last):
    ...
    ValueError: 'proven' is not a valid Verdict
"""
from __future__ import annotations

import enum


class Word(str, enum.Enum):
    """An enum of words, each the plain `str` it stands for in every text form (`str`, format
    specs, `repr`, JSON) and in hashing, so a dict or set of plain words finds it."""

    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__
    __hash__ = str.__hash__

    @classmethod
    def of(cls, value) -> "Word":
        """`value` as a member: a member as it is, its word as the member; anything else raises
        `ValueError` (a word outside the set) or `TypeError` (not a word at all)."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, str):
            raise TypeError(f"a {cls.__name__} is one of {', '.join(m.value for m in cls)}, "
                            f"not a {type(value).__name__} ({value!r})")
        return cls(value)


class Verdict(Word):
    """A proof obligation's answer: `proved` (for the sizes its method says), `refuted` (a
    counterexample), or `unknown` (neither, within the budget)."""

    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"

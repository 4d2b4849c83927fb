"""Verdicts: the closed sets of words a proof or a derivation answers with, as enums, and the
reasons a check refuses with, as records (`Reason`, of a `Check`).

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
import functools


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


class Check(Word):
    """What a refusal is about: the test of a layer, a page, a plan or a claim that refused."""

    DOMAIN = "domain"        # a size lies outside the domain declared for its name
    MISSING = "missing"      # a family reads a runtime name the layer does not give (`Reason.name`)
    GUARD = "guard"          # a family's guard, case or exact division refuses the sizes
    GROUP = "group"          # the grid's ranks are not those that run (`expected`: those that run, `actual`: the grid's)
    PAGE = "page"            # the layout is not the layer's page (`expected`: the page's bytes, `actual`: the layout's)
    TENSOR = "tensor"        # the tensors given (or none) are not those the family reads (`expected`: the family's)
    TILING = "tiling"        # the ranks' layouts do not tile the canonical page
    AMBIGUOUS = "ambiguous"  # two families take one tensor and are not shown to read it alike
    LIBRARY = "library"      # no family of the library serves the layer, not even a fallback
    KERNEL = "kernel"        # the engine writes the blocks in a layout no spec describes (its kernel's, a state's)
    SEQUENCE = "sequence"    # a `sequence` claim (a token's place) fails, or is not shown where it is relied on
    ENGINE = "engine"        # the grid places a rank's heads or tokens otherwise than the engine does
    FORMAT = "format"        # a canonical index is not shown to name one engine element at both configurations
    PLAN = "plan"            # a copy plan is no plan of the pages it names
    UNPROVED = "unproved"    # what a conversion rests on is not proved for all sizes
    STALE = "stale"          # the files changed since they were read: a record would be of other bytes


_REASON_FIELDS = ("check", "family", "name", "dim", "expected", "actual")
_FIELDS = frozenset(_REASON_FIELDS)


class Reason(str):
    """Why a check refused: the sentence it says (a `str`, so a reason prints, formats, joins,
    compares and goes to JSON as the sentence always did) and what the sentence is about as
    fields, set once where the reason is made and read-only after:

    - `check`: a `Check`, the test that refused (a word outside the set raises `ValueError`);
    - `family`: the family refused, where one was (`by` names it and says it first);
    - `name`: the name it is about: a runtime name (missing, out of its domain), a tensor's
      dim or view, the engine's layer, a size a plan defines;
    - `dim`, `expected`, `actual`: the dimension and the values that differ, where the
      sentence compares two: `expected` what the test demands of the thing it checks (a
      tensor, a family's layout or grid, a size), `actual` what that thing has.

    A function that says why across a module line returns a `Reason` or None, never ''; one
    that wraps another's reason keeps its fields (`said`), so a layer's reasons say which test
    refused and where without anyone reading the sentence back.

    Examples:
        >>> why = Reason(Check.TENSOR, "dimension 2 has stride 4, expected 1", dim=2, expected=1, actual=4)
        >>> (why == "dimension 2 has stride 4, expected 1", why.check is Check.TENSOR, why.dim, why.expected)
        (True, True, 2, 1)
        >>> said = why.said("tensor (key): ").by("split_nhd")
        >>> (str(said), said.family, said.check, said.actual)
        ('split_nhd: tensor (key): dimension 2 has stride 4, expected 1', 'split_nhd', 'tensor', 4)
        >>> Reason("stride", "no such check")
        Traceback (most recent call last):
        ...
        ValueError: 'stride' is not a valid Check
        >>> why.dim = 3
        Traceback (most recent call last):
        ...
        AttributeError: a Reason is read-only: its fields are set where it is made
    """

    def __new__(cls, check, text: str, *, family: str | None = None, name: str | None = None,
                dim: int | None = None, expected=None, actual=None):
        if not isinstance(text, str) or not text:
            raise ValueError(f"a Reason says why in words, not {text!r}")
        out = str.__new__(cls, text)
        # (a layer's derivation makes a few a family it refuses: set in one step, not six)
        out.__dict__.update(check=check if check.__class__ is Check else Check.of(check), family=family, name=name,
                            dim=dim, expected=expected, actual=actual)
        return out

    def __setattr__(self, name, *value):
        raise AttributeError("a Reason is read-only: its fields are set where it is made")

    __delattr__ = __setattr__

    def __repr__(self) -> str:
        fields = "".join(f", {f}={getattr(self, f)!r}" for f in _REASON_FIELDS[1:] if getattr(self, f) is not None)
        return f"Reason({self.check.value!r}, {str(self)!r}{fields})"

    def __reduce__(self):  # (a str's own reduction would rebuild it from the sentence alone)
        return _reason, (str(self),) + tuple(getattr(self, f) for f in _REASON_FIELDS)

    def fields(self) -> dict:
        """The fields that are set, by name (`check` always)."""
        return {f: getattr(self, f) for f in _REASON_FIELDS if getattr(self, f) is not None}

    def said(self, before: str = "", after: str = "", **fields) -> "Reason":
        """The same reason in a longer sentence (`before` + this one + `after`), its fields kept
        unless `fields` gives them anew."""
        if not fields.keys() <= _FIELDS:
            raise TypeError(f"a Reason has no field {', '.join(sorted(fields.keys() - _FIELDS))}")
        if "check" in fields:
            fields["check"] = Check.of(fields["check"])
        out = str.__new__(Reason, before + self + after)
        out.__dict__.update(self.__dict__, **fields)
        return out

    def by(self, family: str) -> "Reason":
        """The reason a family gives, said as `family: sentence` and with `family` set (one
        object for one reason of one family: a library refuses alike in every layer it refuses)."""
        try:
            return _by(self, tuple(self.__dict__.values()), family)
        except TypeError:  # a field that is no hashable value
            return self.said(f"{family}: ", family=family)

    @staticmethod
    def shared(check, text: str, **fields) -> "Reason":
        """`Reason(check, text, **fields)`, one object for one sentence and fields: for a refusal
        said alike in every layer it refuses (a family's guard, its tensor's dimensions)."""
        try:
            return _shared(Check.of(check), text, tuple(fields.items()))
        except TypeError:  # a field that is no hashable value
            return Reason(check, text, **fields)


def _reason(text, check, *fields):
    return Reason(check, text, **dict(zip(_REASON_FIELDS[1:], fields)))


@functools.lru_cache(maxsize=4096)
def _by(reason: Reason, fields: tuple, family: str) -> Reason:  # (`fields`: the key tells reasons of one sentence apart)
    return reason.said(f"{family}: ", family=family)


@functools.lru_cache(maxsize=4096)
def _shared(check: Check, text: str, fields: tuple) -> Reason:
    return Reason(check, text, **dict(fields))

"""Records: classes of named fields for the modules a fresh process imports.

`dataclasses` imports `inspect` (and with it `ast`, `dis` and `tokenize`), and
`typing.NamedTuple` imports `typing`: together a large part of what importing the runtime
and loading its library take in a fresh process (`benchmarks/derive_bench.py`). The runtime's records are made
here instead, with the meaning those give them:

- `record` makes a class as `dataclasses.dataclass` does: its fields are its annotations in
  order, a class attribute is a field's default (`field(default, compare=False)` leaves it
  out of equality and hashing), `__init__` takes the fields by position or name and then
  calls `__post_init__`, `__repr__` names them, `__eq__` compares the class and the fields;
  a `frozen` record refuses assignment and hashes its fields (its `__post_init__`
  normalises through `object.__setattr__`, as with dataclasses).
- `named_tuple` makes a class as `typing.NamedTuple` does (a `collections.namedtuple` with
  the class's methods and docstring).

`replace(r, **changes)` is `dataclasses.replace` for a record (`copy.replace` too), and the
`dataclasses` functions take a record as a dataclass (`replace`, `fields`, `asdict`,
`is_dataclass`): its `__dataclass_fields__` are made when first read, so only a process that
asks imports `dataclasses`.

Examples:
    >>> @record(frozen=True)
    ... class P:
    ...     x: int
    ...     y: int = 0
    >>> (P(1) == P(1, 0), hash(P(1)) == hash(P(x=1)), P(1) == (1, 0))
    (True, True, False)
    >>> P(1)
    P(x=1, y=0)
    >>> replace(P(1), y=2)
    P(x=1, y=2)
    >>> import dataclasses
    >>> (dataclasses.replace(P(1), y=3), dataclasses.asdict(P(1)))
    (P(x=1, y=3), {'x': 1, 'y': 0})
    >>> @named_tuple
    ... class Q:
    ...     a: int
    ...     b: int = 2
    ...     def total(self):
    ...         return self.a + self.b
    >>> (Q(1), Q(1).total(), Q(1)._replace(b=5), Q._fields)
    (Q(a=1, b=2), 3, Q(a=1, b=5), ('a', 'b'))
"""
from __future__ import annotations

from collections import namedtuple

_MISSING = object()


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class field:
    """A field's default, and whether equality and hashing read it (`compare`)."""

    __slots__ = ("default", "compare")

    def __init__(self, default=_MISSING, compare: bool = True):
        self.default, self.compare = default, compare


def _annotated(cls) -> list[str]:
    return [n for n, a in cls.__dict__.get("__annotations__", {}).items()
            if not (isinstance(a, str) and a.startswith(("ClassVar", "typing.ClassVar")))]


def record(cls=None, *, frozen: bool = False):
    """The class as a record of the fields it annotates (see the module's docstring)."""
    def make(cls):
        names = list(getattr(cls, "__record_fields__", ()))  # a record's subclass: its fields first
        defaults = dict(getattr(cls, "__record_defaults__", {}))
        compared = list(getattr(cls, "__record_compare__", ()))
        for name in _annotated(cls):
            again = name in names  # declared again: it keeps its place, with its new default
            defaults.pop(name, None)
            compared = [n for n in compared if n != name]
            value = cls.__dict__.get(name, _MISSING)
            compare = True
            if isinstance(value, field):
                value, compare = value.default, value.compare
            if value is _MISSING:
                if defaults and not again:
                    raise TypeError(f"{cls.__name__}: field '{name}' without a default follows one with a default")
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                defaults[name] = value
                setattr(cls, name, value)
            names += [] if again else [name]
            compared += [name] if compare else []
        made, own = _methods(cls, names, defaults, compared, frozen), cls.__dict__
        cls.__record_fields__, cls.__record_compare__ = tuple(names), tuple(compared)
        cls.__record_defaults__ = defaults
        cls.__match_args__ = tuple(names)
        cls.__init__ = made["__init__"]
        cls.__repr__, cls.__eq__ = own.get("__repr__", _repr), own.get("__eq__", made["__eq__"])
        cls.__replace__ = replace
        cls.__dataclass_fields__ = _AsDataclass(names, defaults, compared, frozen)
        # equal by value: hashed by value when frozen, unhashable when not (as a dataclass is)
        cls.__hash__ = own["__hash__"] if own.get("__hash__") is not None else made["__hash__"] if frozen else None
        if frozen:
            cls.__setattr__, cls.__delattr__ = _refused, _refused
        return cls
    return make if cls is None else make(cls)


def _methods(cls, names: list, defaults: dict, compared: list, frozen: bool) -> dict:
    """`__init__`, `__eq__` and `__hash__` written out for the fields, as dataclasses writes them
    (a record is hashed on every memoised call: no loop over its fields at run time)."""
    params = ", ".join(f"{n}=_d_{n}" if n in defaults else n for n in names)
    sets = [f"_set(self, {n!r}, {n})" if frozen else f"self.{n} = {n}" for n in names]
    if hasattr(cls, "__post_init__"):
        sets.append("self.__post_init__()")
    mine = "(" + "".join(f"self.{n}, " for n in compared) + ")"
    theirs = "(" + "".join(f"other.{n}, " for n in compared) + ")"
    env = {f"_d_{n}": v for n, v in defaults.items()} | {"_set": object.__setattr__}
    exec(f"def __init__(self, {params}):\n    " + "\n    ".join(sets or ["pass"]) + "\n"  # noqa: S102 - our own text
         f"def __eq__(self, other):\n"
         f"    if other.__class__ is not self.__class__:\n        return NotImplemented\n"
         f"    return {mine} == {theirs}\n"
         f"def __hash__(self):\n    return hash({mine})\n", env)
    for m in ("__init__", "__eq__", "__hash__"):
        env[m].__qualname__ = f"{cls.__qualname__}.{m}"
    return env


class _AsDataclass:
    """A record's `__dataclass_fields__`, made by `dataclasses` itself when first read."""

    def __init__(self, names, defaults, compared, frozen):
        self.spec = (tuple(names), dict(defaults), frozenset(compared), frozen)

    def __get__(self, obj, cls):
        made = cls.__dict__.get("_dataclass_twin")
        if made is None:
            import dataclasses
            names, defaults, compared, frozen = self.spec
            made = dataclasses.make_dataclass(cls.__name__, [
                (n, "object", dataclasses.field(default=defaults.get(n, dataclasses.MISSING), compare=n in compared))
                for n in names], frozen=frozen)
            cls._dataclass_twin = made  # a frozen record's own setattr refuses, not the class's
        return made.__dataclass_fields__


def _repr(self) -> str:
    return (f"{type(self).__qualname__}("
            + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__record_fields__) + ")")


def _refused(self, name, *value):
    raise FrozenInstanceError(f"cannot assign to field '{name}' of a frozen {type(self).__name__}")


def fields(r) -> tuple[str, ...]:
    """The names of a record's fields, in order."""
    return r.__record_fields__


def replace(r, **changes):
    """A copy of record `r` with `changes` (its `__post_init__` runs again)."""
    unknown = set(changes) - set(r.__record_fields__)
    if unknown:
        raise TypeError(f"{type(r).__name__} has no field {', '.join(map(repr, sorted(unknown)))}")
    return type(r)(**{n: changes.get(n, getattr(r, n)) for n in r.__record_fields__})


def named_tuple(cls):
    """The class as `typing.NamedTuple` makes it: a `collections.namedtuple` of its annotated
    fields (a class attribute is a default) with the class's own methods and docstring."""
    names = _annotated(cls)
    defaults = [cls.__dict__[n] for n in names if n in cls.__dict__]
    if any(n not in cls.__dict__ for n in names[len(names) - len(defaults):]):
        raise TypeError(f"{cls.__name__}: a field without a default follows one with a default")
    base = namedtuple(cls.__name__, names, defaults=defaults or None, module=cls.__module__)
    body = {k: v for k, v in cls.__dict__.items()
            if k not in names and k not in ("__dict__", "__weakref__", "__annotations__")}
    out = type(cls.__name__, (base,), {**body, "__slots__": ()})
    out.__qualname__ = cls.__qualname__
    return out

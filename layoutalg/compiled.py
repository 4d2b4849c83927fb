"""Compiled families: what the runtime executes (plain Python, no sympy, lark or Z3).

A `CompiledFamily` is the printed Python source of a family's grid cases plus the
texts and spec positions its failure messages need. It can be rebuilt from that data
alone, which is how the precompiled cache (`cache.py`) skips parsing and compiling.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .errors import LayoutalgError


class GuardFailed(LayoutalgError):
    """The family does not apply to this configuration; the layer fails closed."""


class Instance(NamedTuple):
    """A family at one configuration: every size and stride as an int."""

    family: str
    local: tuple        # ((extent, local stride, canonical stride), ...) for each local digit
    ranks: tuple        # ((extent, rank stride, canonical stride, replica), ...)
    canonical_base: int
    local_page: int
    canonical_page: int
    world: int
    agnostic: bool
    element: int
    tensor_shape: tuple   # extents of the tensor's dims after the block dim
    tensor_strides: tuple  # their strides in elements
    targets: tuple        # ((canonical extent, base, ((scale, digit extent), ...)), ...)
    local_names: tuple
    rank_names: tuple


def _exact(a, b, k):
    if b == 0 or a % b:
        raise _AtomFailed(k, a, b)
    return a // b


def _floor(a, b, k):
    if b == 0:
        raise _AtomFailed(k, a, b)
    return a // b


def _mod(a, b, k):
    if b == 0:
        raise _AtomFailed(k, a, b)
    return a % b


class _AtomFailed(Exception):
    def __init__(self, k, a, b):
        self.k, self.a, self.b = k, a, b


class _Guard(Exception):
    def __init__(self, variant, index):
        self.variant, self.index = variant, index


@dataclass
class CompiledFamily:
    """A family ready for the runtime: `evaluate(sizes)` gives its `Instance`.

    `guards[v][k]` is (spec position, text) of guard k of variant v; `atoms[k]` is
    (spec position, operator, text) of division k.
    """

    name: str
    serves: str
    order: int
    where: str  # spec position of the family
    source: str
    guards: tuple
    atoms: tuple
    tensor: tuple = ()  # index of each dim of the tensor the family recognises, after the block dim
    family: object = None  # the family IR, when compiled in this process

    def __post_init__(self):
        env = {"_exact": _exact, "_floor": _floor, "_mod": _mod, "_Guard": _Guard, "_Instance": Instance}
        exec(compile(self.source, f"<layoutalg family {self.name}>", "exec"), env)
        self._variants = tuple(env[f"_variant_{k}"] for k in range(len(self.guards)))

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "serves", "order", "where", "source", "guards", "atoms",
                                           "tensor")}

    @staticmethod
    def from_json(d: dict) -> "CompiledFamily":
        return CompiledFamily(d["name"], d["serves"], d["order"], d["where"], d["source"],
                              tuple(tuple(tuple(g) for g in v) for v in d["guards"]),
                              tuple(tuple(a) for a in d["atoms"]), tuple(d["tensor"]))

    @property
    def tensor_dims(self) -> int:
        return len(self.tensor)

    def evaluate(self, sizes: dict) -> Instance:
        """The numeric digit table at `sizes` (every name in `params.NAMES`).

        Raises `GuardFailed` naming the spec line of the first guard that fails.
        """
        for k, fn in enumerate(self._variants):
            try:
                out = fn(sizes)
            except _Guard as g:
                where, text = self.guards[g.variant][g.index]
                raise GuardFailed(f"{where}: {text} does not hold") from None
            except _AtomFailed as a:
                where, op, text = self.atoms[a.k]
                what = "is not a whole number" if op == "/" else "divides by zero"
                raise GuardFailed(f"{where}: {text} = {a.a} {op} {a.b} {what}") from None
            if out is not None:
                return out
        raise GuardFailed(f"{self.where}: no case of the grid holds for family '{self.name}'")

"""A model page written by the stages of a pipeline: vLLM's split of the layers over `pp`
stages (`params.stage_layers`) proved a partition for all sizes, so the stages' writers of
each layer's part of a model page are disjoint and cover it.

Stage s of `pp` owns layers [start(s), start(s + 1)): with q = L // pp and r = L % pp, every
stage q layers and the r stages before the last one more, so

    start(s) = s * q + max(0, s - (pp - 1 - r))       (0 <= s <= pp - 1),  start(pp) = L.

Each layer lies in exactly one stage exactly when start(0) = 0, start(pp) = L and every
stage owns at least one layer (the starts then climb through [0, L]). `tests/test_pipeline.py`
holds this formula to `stage_layers` by enumeration.
"""
from __future__ import annotations

import time

import z3

from ...verdicts import Verdict
from .store import Row
from .z3ops import ask


LAYERS = 1 << 16
"""The most layers a model is proved for."""


def _start(s, q, r, pp):
    """The first layer of stage s (the end of the last stage, s = pp: q each and the r extras)."""
    return z3.If(s == pp, pp * q + r, s * q + z3.If(s - (pp - 1 - r) > 0, s - (pp - 1 - r), 0))


def stages_query() -> tuple[list, tuple]:
    """(assertions, (layers, pp, s)) of `stages-tile`'s violation: unsat when the row holds."""
    layers, pp, s, q, r = z3.Ints("layers pp s q r")
    domain = [pp >= 1, pp <= layers, layers <= LAYERS, layers == q * pp + r, r >= 0, r < pp]  # q, r: L's division
    violation = z3.Or(z3.And(s >= 0, s < pp, _start(s + 1, q, r, pp) - _start(s, q, r, pp) < 1),
                      _start(0, q, r, pp) != 0, _start(pp, q, r, pp) != layers)
    return [*domain, violation], (layers, pp, s)


def stages_row(rlimit: int, guard_s: float | None = None) -> Row:
    """The `stages-tile` row: for every 1 <= pp <= L <= the layers' bound, no stage owns no layer,
    the first starts at layer 0 and the last ends at L (unsat of their negation)."""
    t0 = time.perf_counter()
    top = LAYERS
    asserted, (layers, pp, s) = stages_query()
    res, sv = ask(asserted, rlimit, guard_s)
    status = Verdict.PROVED if res == z3.unsat else Verdict.REFUTED if res == z3.sat else Verdict.UNKNOWN
    detail = ""
    if res == z3.sat:
        m = sv.model()
        detail = (f"vLLM's split of {m.eval(layers)} layers over {m.eval(pp)} stages: stage {m.eval(s)} "
                  f"owns no layer, or the stages do not start at 0 and end at the last layer")
    return Row("(vLLM's pipeline split)", "model page", "stages-tile", status,
               f"symbolic: all sizes, every 1 <= pp <= layers <= {top}", time.perf_counter() - t0, detail)

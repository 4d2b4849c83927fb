"""Block and page ids as every plan reads them: a 1-D int64 CPU tensor of their own, read once,
with floats, bools and unordered collections refused (`LayoutMismatch` naming the argument),
never truncated; the range and repeat checks on them.
"""
from __future__ import annotations

import torch

from ..errors import LayoutMismatch
from . import move  # (whether numpy is there: one switch for every copy path)


_INTEGER = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def read_once(ids, name: str, op: str):
    """Ids (or a dict of each layer's) as tensors of their own, each read once."""
    if isinstance(ids, dict):
        return {k: id_tensor(v, f"{name}[{k!r}]", op) for k, v in ids.items()}
    return id_tensor(ids, name, op)


def id_tensor(ids, name: str, op: str) -> torch.Tensor:
    """Ids as a 1-D int64 CPU tensor of their own; floats and bools are refused, never truncated."""
    if isinstance(ids, (dict, set, frozenset, str, bytes)):  # no order, or characters: never ids
        raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints, got a "
                             f"{type(ids).__name__}")
    try:
        if not isinstance(ids, torch.Tensor) and not hasattr(ids, "__array__"):
            ids = list(ids)
            if any(isinstance(x, bool) or type(x).__name__ == "bool_" or
                   isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in ids):  # [0, True] is no [0, 1]
                raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints, got a bool")
        try:
            t = ids if isinstance(ids, torch.Tensor) else torch.as_tensor(ids)
        except ValueError:  # an array of negative strides (numpy's reversed view): its values, copied
            if not hasattr(ids, "__array__") or not hasattr(ids, "copy"):
                raise
            t = torch.as_tensor(ids.copy())
    except (TypeError, ValueError, RuntimeError):
        raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints") from None
    if t.device.type == "meta":  # no values to read
        raise LayoutMismatch(f"{op}: {name} are on the meta device: they hold no values")
    if t.numel() == 0 and t.dtype == torch.float32:
        t = t.to(torch.int64)  # an empty list has no element type to refuse
    wanted = (torch.int64,) if isinstance(ids, torch.Tensor) else _INTEGER  # a tensor says int64 itself
    if t.dim() != 1 or t.dtype not in wanted:
        raise LayoutMismatch(f"{op}: {name} must be a 1-D int64 tensor or a sequence of ints, "
                             f"got {t.dim()}-D {t.dtype}")
    # always a copy of its own: ids that live in the kv tensor or the pages (or that another
    # thread edits) would otherwise change under the copy that reads them, after their check
    return t.to(device="cpu", dtype=torch.int64, copy=True)


def has_repeats(t: torch.Tensor, n: int) -> bool:
    """Whether ids `t`, each in [0, n), hold one twice: by a table of n flags where n is
    not many times the ids (a batch's blocks or pages), else by sorting them. A sort is
    what `torch.unique` does, several times slower on the CPU than the table: host work
    that bounds a plan on a GPU (`benchmarks/copy_bench.py`)."""
    if n <= 8 * t.numel() + 4096:
        seen = torch.zeros(n, dtype=torch.bool)
        seen[t] = True
        return int(seen.sum()) != t.numel()
    s = move.numpy.sort(t.numpy()) if move.numpy is not None else torch.sort(t).values
    return bool((s[1:] == s[:-1]).any())


def in_range(t: torch.Tensor, n: int, name: str, op: str) -> None:
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= n):
        bad = int(t[(t < 0) | (t >= n)][0])
        valid = f"valid: 0 to {n - 1}" if n else "there are none"
        raise LayoutMismatch(f"{op}: {name} holds {bad}, outside the {n} there are ({valid})")


def block_ids_of(ids, n: int, op: str, name: str = "block_ids") -> torch.Tensor:
    """Block ids of a tensor of `n` blocks (`id_tensor`): each in range, none twice (every
    executor of direct plans reads them here: gather, scatter, execute, `tools.nixl`)."""
    t = id_tensor(ids, name, op)
    in_range(t, n, name, op)
    if has_repeats(t, n):
        raise LayoutMismatch(f"{op}: {name} repeats an id: two sources would write one destination")
    return t


def merge_triples(d: torch.Tensor) -> torch.Tensor:
    """Merge consecutive triples whose source and destination both continue the previous one."""
    if d.shape[0] < 2:
        return d
    cont = (d[1:, 0] == d[:-1, 0] + d[:-1, 2]) & (d[1:, 1] == d[:-1, 1] + d[:-1, 2])
    start = torch.ones(d.shape[0], dtype=torch.bool)
    start[1:] = ~cont
    group = torch.cumsum(start.to(torch.int64), 0) - 1
    sizes = torch.zeros(int(group[-1]) + 1, dtype=torch.int64).index_add_(0, group, d[:, 2])
    heads = d[start]
    return torch.stack([heads[:, 0], heads[:, 1], sizes], 1)

"""Which family takes a tensor: two families of one kind that can both take one must read it alike.

The runtime takes a layer with the first family of its kind, by the library's preferences,
whose guards hold at the layer's runtime names and whose tensor views match the engine's
tensors (shape, strides, element size). Two families whose tensors look the same at some
size (FlashAttention's `(2, blocks, ...)` and split NHD's `(blocks, 2, ...)` at two blocks)
both take such a tensor; where they read it differently, the preferred one reads the other
engine's tensor in its own order and stores a wrong page under its own format.

`confusions` looks for that on the library's sample configurations, and on those Z3 found
where both families of a pair apply (`prove.together`, which also shows most pairs apart for
every size: no layer reaches both): each family's own tensors at 1, 2 and 3 blocks, offered
to every other family of its kind as the runtime offers them (`runtime.derive.apply_family`). Where
another family takes them too, the two must read every byte of the tensor as the same engine element (`oracle.naming`: local index names made
global by the grid's placements, region by region). Otherwise a runtime name must tell them
apart: a guard that one requires and the other refuses at those sizes, so that the runtime
never offers one layer to both. Layers whose pages are larger than `MAX_PAGE` bytes, or whose
group is larger than `MAX_WORLD` ranks, are not compared (said in the report).
"""
from __future__ import annotations

import itertools
import random
from math import prod
from typing import NamedTuple

from .samples import fitted_instance
from ..compile.compiled import CompiledPage, GuardFailed, at_page
from ..runtime.lower import TilingError
from ..verdicts import Reason

BLOCKS = (1, 2, 3)
MAX_PAGE = 1 << 12
MAX_WORLD = 8


class Confusion(NamedTuple):
    """Two families that take one tensor at `sizes` and read it differently, said in `why`."""
    first: str
    second: str
    sizes: dict
    blocks: int
    tensors: tuple
    why: str


def tensors_of(cf, inst, blocks: int) -> tuple:
    """The engine tensors `cf` takes at `inst` with `blocks` blocks, one a view (a family that
    names no tensor dims: the flat `(blocks, page)` bytes)."""
    from ..runtime.tensors import block_tensor
    from ..runtime.records import TensorLayout
    page = inst.local_page
    if isinstance(cf, CompiledPage):
        views = [(v.shape, v.strides, v.element, v.outer) for v in cf.tensor_views(inst)]
    else:
        views = [(tuple(inst.tensor_shape), tuple(inst.tensor_strides), inst.element, cf.tensor_outer)] \
            if inst.tensor_shape else []
    if not views:
        return (TensorLayout((blocks, page), (page, 1), 1),)
    return tuple(block_tensor(shape, strides, element, k, blocks, page) for shape, strides, element, k in views)


def _layer(cf, sizes: dict):
    from ..runtime.records import LayerSpec
    from .. import params
    return LayerSpec(cf.serves, sizes["page_size"], sizes.get("block_size", 0), sizes.get("heads", 0),
                     sizes.get("head_size", 0), sizes.get("dtype_bytes", 0),
                     sizes={n: v for n, v in sizes.items() if n not in params.TABLE})


def _taken(cf, sizes: dict, tensors: tuple, blocks: int):
    """`cf`'s mappings of the layer at `sizes` given `tensors`, or None where it does not take it."""
    from ..runtime.derive import apply_family
    try:
        runs = apply_family(cf, sizes, _layer(cf, sizes), tensors[0] if len(tensors) == 1 else tensors, blocks)
    except (GuardFailed, TilingError, ArithmeticError, LookupError):
        return None
    return None if isinstance(runs, Reason) else runs


def _read_apart(lib, a: str, b: str, sizes: dict, ma, mb) -> str:
    """'' where families `a` and `b` read every rank's tensor bytes as the same engine elements
    (their mappings `ma`, `mb` at `sizes`), else the first byte they read apart, said."""
    from .oracle import naming
    for rank, (x, y) in enumerate(zip(ma, mb)):
        if [v.placing for v in x.tensors] != [v.placing for v in y.tensors]:
            return (f"they place the tensor's bytes in a block's page differently ({a}: views "
                    f"{_views(x.tensors)}; {b}: {_views(y.tensors)}), so a byte is one element to one and "
                    f"another to the other")
        page = x.local_page_size_bytes
        na, nb = naming(lib, a, sizes, rank, page, raw=True), naming(lib, b, sizes, rank, page, raw=True)
        for at in range(page):
            if (na.element[at], na.token[at]) != (nb.element[at], nb.token[at]):
                return (f"rank {rank} reads byte {at} of a block's page as {_element(na, at)} by {a} and "
                        f"{_element(nb, at)} by {b}")
    return ""


def _views(views) -> str:
    return ", ".join(f"{v.name} at byte {v.offset}" + (f" behind {v.outer} outer dim(s)" if v.outer else "")
                     for v in views) or "the flat page"


def _element(n, at: int) -> str:
    e = n.element[at]
    if e == -1:
        return "padding"
    region, named, byte = e
    where = f"region {region!r}, " if region else ""
    token = f"token {n.token[at]}, " if n.token[at] >= 0 else ""
    return f"({where}{token}" + ", ".join(f"{k}={v}" for k, v in named) + f", byte {byte})"


def alike(a, b) -> bool:
    """Whether compiled families `a` and `b` are shown to read alike every tensor both take, at
    every size: one non-empty reading key (`codegen.reading_key`: the same grid, shard terms by
    canonical index name, tensor dims and element). The runtime takes a layer two families both
    take only where this holds (`runtime.derive._taken_twice`)."""
    return bool(a.reading) and a.reading == b.reading


class Unproved(NamedTuple):
    """Two families of one kind neither shown apart for every size (`together`'s status and
    `why`) nor shown to read alike (`alike`): the runtime refuses a layer both take."""
    first: str
    second: str
    status: str
    why: str


def unproved(families: dict, together: dict) -> list[Unproved]:
    """The pairs of `together` (`prove.together.pairs`) that are not 'apart' and whose families
    (`families`: name -> compiled family) are not `alike`, in order."""
    return [Unproved(t.first, t.second, t.status, t.why) for key, t in sorted(together.items())
            if t.status != "apart" and not alike(families[t.first], families[t.second])]


class Tally(NamedTuple):
    """What `confusions` looked at: pairs of families of one kind, layers of one family offered
    to another, and those the other took too (each then compared byte by byte); of the pairs,
    those shown never to be offered one layer at any size (`apart`), and the configurations
    where both apply found beyond the samples (`found`)."""
    pairs: int
    offered: int
    taken: int
    apart: int = 0
    found: int = 0


def confusions(lib, families: dict, domain: dict, limit: int = 1000,
               together: dict | None = None) -> tuple[list[Confusion], Tally]:
    """(the pairs of families of one kind that take one tensor and read it apart, what was looked
    at), on `domain`'s configurations (at most `limit` a pair) at each of `BLOCKS`. The fallback
    is no family of a kind. `together` (`prove.together.pairs`), where given, says of each pair
    whether any size serves both: a pair shown apart is not compared (no layer reaches both),
    and the configurations found where both apply are compared first."""
    found, pairs, offered, taken, apart, extra = [], 0, 0, 0, 0, 0
    for members in by_kind(families).values():
        for a, b in itertools.permutations(sorted(members, key=lambda c: c.name), 2):
            known = (together or {}).get(tuple(sorted((a.name, b.name))))
            pairs += 1
            if known is not None and known.status == "apart":
                apart += 1
                continue
            shown = [{**{n: v[0] for n, v in domain.items()}, **f} for f in known.found] if known is not None else []
            extra += len(shown)
            hit, n, both = _pair(lib, a, b, domain, limit, shown)
            offered, taken = offered + n, taken + both
            if hit is not None and not any({c.first, c.second} == {a.name, b.name} for c in found):
                found.append(hit)
    return found, Tally(pairs // 2, offered, taken, apart // 2, extra // 2)


def by_kind(families: dict) -> dict:
    """The compiled families (`families`: name -> compiled family) of each kind they serve, the
    fallback aside (it is no family of a kind: it takes what none of them does)."""
    from ..runtime.records import FALLBACK
    out: dict = {}
    for cf in families.values():
        if cf.serves != FALLBACK:
            out.setdefault(cf.serves, []).append(cf)
    return out


def _sampled(domain: dict, limit: int):
    """Every configuration of `domain`, or `limit` of them drawn evenly (seeded) where there are
    more: the first `limit` in order would vary only the last names."""
    keys = list(domain)
    radix = [len(domain[k]) for k in keys]
    total = prod(radix)
    picks = range(total) if total <= limit else sorted(random.Random(total).sample(range(total), limit))
    for n in picks:
        sizes = {}
        for k, r in zip(reversed(keys), reversed(radix)):
            n, i = divmod(n, r)
            sizes[k] = domain[k][i]
        yield {k: sizes[k] for k in keys}


def _at(cf, sizes: dict):
    """(instance, sizes) of `cf` at `sizes`: at its page where it gives one that fits (a
    configuration found by Z3), else at a page chosen to fit (`samples.fitted_instance`)."""
    if "page_size" in sizes:
        try:
            inst, why = at_page(cf, sizes, sizes["page_size"])
            if not why:
                return inst, sizes
        except GuardFailed:
            pass
    return fitted_instance(cf, {n: v for n, v in sizes.items() if n != "page_size"})


def _pair(lib, a, b, domain: dict, limit: int, first: list = ()):
    """The first layer `a`'s tensors describe that `b` takes too and reads apart, how many layers
    `a` took and offered to `b`, and how many `b` took too: at the configurations `first`,
    then at `domain`'s."""
    reads = {x.name for cf in (a, b) for x in (cf.bounds or ())}
    names = {n: v if n in reads else v[:1] for n, v in domain.items()}
    both = offered = 0
    for sizes in itertools.chain(first, _sampled(names, limit)):
        try:
            inst, sizes = _at(a, sizes)
        except (GuardFailed, ArithmeticError):
            continue
        if inst.local_page > MAX_PAGE or sizes["tp"] * sizes["pcp"] > MAX_WORLD:
            continue
        for blocks in BLOCKS:
            try:
                tensors = tensors_of(a, inst, blocks)
            except (GuardFailed, ValueError, ArithmeticError):
                break
            ma = _taken(a, sizes, tensors, blocks)
            if ma is None:
                continue
            offered += 1
            mb = _taken(b, sizes, tensors, blocks)
            if mb is None:
                continue
            both += 1
            why = _read_apart(lib, a.name, b.name, sizes, ma, mb)
            if why:
                return Confusion(a.name, b.name, sizes, blocks, tensors, why), offered, both
    return None, offered, both

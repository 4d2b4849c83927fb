"""Runtime: derive every rank's canonical page mapping of a layer from a spec library.

    deriver = Deriver()                       # the shipped specs, compiled once per process
    result = deriver.derive(layer, tensor, parallel)

The path is plain Python over compiled families: no parsing after the first use of a
library, no sympy evaluation, never Z3. Results are memoised by (layer sizes, tensor
strides, parallel config), so 80 identical layers cost one derivation.

Inputs are checked where they are built (`LayerSpec`, `ParallelConfig`, `TensorLayout`
raise `ConfigError` for a value that is not an integer, or a parallel size below 1), so
the memoised path never re-checks them. Layer sizes that are integers but make no sense
(a zero block size, a negative page) are not errors: no family applies and the layer
fails closed, as the reference's derivation returns no certified mapping for it.
"""
from __future__ import annotations

import functools
import os
from math import prod

from .. import params
from ..dsl import sources as files
from ..compile.compiled import (CompiledFamily, CompiledPage, GuardFailed, Instance, at_page, from_entry, group_of, misfit,
                                stage_grid)
from ..errors import ConfigError, MissingNames
from .lower import TilingError, lower
from ..mapping import MAX_STRETCHES, TensorView
from ..record import replace
from ..verdicts import Check, Reason
from .formats import layer_dtypes, assumed_id, format_id, names_data
from .records import (CERTIFIED, FALLBACK, NO_MAPPINGS, OMITTED, OPAQUE, LayerResult, LayerSpec, ParallelConfig,
                      TensorLayout, as_int)
from .tensors import mismatch_views, physical_layout, as_it_lies, raw_page, stacked


class Deriver:
    """Derives layer mappings from a compiled spec library (the shipped one by default)."""

    def __init__(self, spec_dir: str | os.PathLike | None = None):
        self.families = compiled_library(str(spec_dir) if spec_dir else None)
        if not self.families:  # every layer would fail closed, and a run would look like one of layers no family serves
            raise ConfigError(f"spec library {spec_dir or '(shipped)'} holds no family: nothing to derive a mapping "
                              f"from")
        self._by_kind: dict[str, list[CompiledFamily]] = {}
        for cf in sorted(self.families.values(), key=lambda f: (f.order, f.name)):
            self._by_kind.setdefault(cf.serves, []).append(cf)
        fallback = self._by_kind.get(FALLBACK, [])
        if len(fallback) > 1:
            raise ConfigError(f"spec library {spec_dir or '(shipped)'}: at most one family may serve "
                              f"'{FALLBACK}', found {len(fallback)} ({', '.join(cf.name for cf in fallback)})")
        self.fallback = fallback[0] if fallback else None  # a library without one fails closed instead
        self.names = {b.name for cf in self.families.values() for b in cf.bounds}  # every name some family reads
        self.domains = {b.name: (b.lo, b.hi) for cf in self.families.values() for b in cf.bounds}
        self._memo = functools.lru_cache(maxsize=4096)(self._derive)

    def derive(self, layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig,
               num_blocks: int | None = None, strict: bool = True) -> LayerResult:
        """Every rank's mapping of `layer` (memoised: the arguments are hashable records).

        Raises `MissingNames` where every family serving the layer's kind reads a runtime name
        the layer does not give; with `strict` False such a layer goes to the fallback (the vLLM
        adapter's choice: a model's layer it cannot read is stored opaque, with a warning)."""
        try:
            return self._memo(layer, tensor, parallel, num_blocks, strict)
        except TypeError:  # an argument that is no hashable record: say which, as on a cache miss
            _check_arguments(layer, tensor, parallel, num_blocks)
            raise

    def reads(self, kind: str) -> set[str]:
        """The runtime names the families serving `kind` read (the fallback aside)."""
        return {b.name for cf in self._by_kind.get(kind, []) for b in cf.bounds}

    def cache_info(self):
        """Hits and misses of the memoised derivations (`functools.lru_cache`)."""
        return self._memo.cache_info()

    def _derive(self, layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig,
                num_blocks: int | None = None, strict: bool = True) -> LayerResult:
        num_blocks = _check_arguments(layer, tensor, parallel, num_blocks)  # on cache misses only
        unread = sorted(n for n, _ in layer.sizes if n not in self.names)
        if unread:  # a misspelt name would otherwise silently select another grid's semantics
            raise ConfigError(f"LayerSpec.sizes: no family of this spec library reads {', '.join(map(repr, unread))}; "
                              f"the names they read: {', '.join(sorted(self.names))}")
        world = parallel.world_size if parallel.world_size is not None else parallel.tp * parallel.pcp
        if world not in (parallel.tp * parallel.pcp, parallel.tp * parallel.pcp * parallel.pp):
            return LayerResult(NO_MAPPINGS, None, (), (Reason(
                Check.GROUP, f"world size {world} is neither tp * pcp nor tp * pcp * pp", actual=world),))
        if layer.page_size_bytes is None:
            return LayerResult(OMITTED, None, (), (Reason(Check.PAGE, "the page size is unknown"),))
        if layer.page_size_bytes < 1:
            return LayerResult(NO_MAPPINGS, None, (), (Reason(Check.PAGE, f"the page is {layer.page_size_bytes} bytes: "
                                                              "no family holds an empty or negative page",
                                                              actual=layer.page_size_bytes),))
        sizes = _sizes(layer, tensor, parallel)
        reasons = [why.said(after=": no family reads this layer but the fallback") for n, v in layer.sizes
                   if n in self.domains for why in [params.outside(n, v, *self.domains[n])] if why]
        # a name given out of its domain is a misdeclared deployment (`aiter_kv = 3`): a family
        # that does not read it must not take the layer in its place
        missing = {}
        kind = self._by_kind.get(layer.kind, []) if not reasons else []
        for k, cf in enumerate(kind):
            runs = apply_family(cf, sizes, layer, tensor, num_blocks, world=parallel.world_size)
            if isinstance(runs, Reason):
                reasons.append(runs.by(cf.name))
                missing[cf.name] = runs.name if runs.check is Check.MISSING else None
                continue
            why = _taken_twice(cf, runs, kind[k + 1:], sizes, layer, tensor, num_blocks)
            if not why:
                return LayerResult(CERTIFIED, cf.name, runs, tuple(reasons))
            reasons.append(why)  # two readings of one tensor: neither is the engine's for certain
            break
        if strict and parallel.total_kv_heads is None and "total_heads" in missing.values():
            raise MissingNames(f"ParallelConfig.total_kv_heads (the KV heads of the whole model) is not given, and "
                               f"a '{layer.kind}' layer needs it: families "
                               f"{', '.join(f for f, n in missing.items() if n == 'total_heads')} read it as "
                               f"total_heads (state layers go without it)")
        if strict and missing and all(missing.values()):  # the layer is of this kind, but says too little
            names = sorted(set(missing.values()))
            raise MissingNames(f"LayerSpec.sizes: a '{layer.kind}' layer must give {', '.join(map(repr, names))}: "
                               f"{'; '.join(f'family {f} reads {n!r}' for f, n in missing.items())}, and the layer "
                               f"gives {', '.join(sorted(n for n, _ in layer.sizes)) or 'no runtime name'}")
        readers = _tensor_readers(kind, sizes, layer.page_size_bytes) if tensor is None else []
        if readers:  # the fallback's page is the rank's bytes as its tensor lays them out, and none was given
            reasons.append(Reason(Check.TENSOR, f"derived from its sizes alone (no tensor), and families "
                                  f"{', '.join(readers)} of kind '{layer.kind}' would each hold this page, its bytes "
                                  f"lying as their tensor says: an opaque page of the sizes alone would share one "
                                  f"format id between engines whose bytes lie otherwise (NHD and HND); derive the "
                                  f"layer with its tensor"))
            return LayerResult(NO_MAPPINGS, None, (), tuple(reasons))
        if self.fallback is None:
            reasons.append(Reason(Check.LIBRARY, f"no family serves '{layer.kind}' here and the library declares no "
                                  f"fallback" if not reasons else "the library declares no fallback"))
            return LayerResult(NO_MAPPINGS, None, (), tuple(reasons))
        runs = apply_family(self.fallback, sizes, layer, tensor, num_blocks, fallback=True, world=parallel.world_size)
        if isinstance(runs, Reason):  # not even the fallback holds the page: no mapping beats a partial copy
            reasons.append(runs.said(f"{self.fallback.name} (fallback): ", family=self.fallback.name))
            return LayerResult(NO_MAPPINGS, None, (), tuple(reasons))
        return LayerResult(OPAQUE, self.fallback.name, runs, tuple(reasons))


def _tensor_readers(kind: list, sizes: dict, page: int) -> list[str]:
    """The families of a layer's kind (`kind`) recognised by a tensor of named dims that would
    hold the layer at `sizes` given one (their guards hold, their page is the layer's and their
    grid the group): from its sizes alone, its bytes may lie as any of their tensors says."""
    out = []
    for cf in kind:
        if not cf.tensor_dims:
            continue
        try:
            _, why = at_page(cf, sizes, page)
        except (GuardFailed, ArithmeticError, LookupError):
            continue
        if not why:
            out.append(cf.name)
    return out


def _taken_twice(cf, runs, later, sizes, layer, tensor, num_blocks) -> Reason | None:
    """Why the layer `cf` takes is not certainly its (None when it is): a family tried after it takes the same
    tensor too, and the two are not shown to read it alike, so the preference alone would choose
    between two readings of one tensor. Shown alike: one place in a block's page for every
    tensor byte (their views), one tensor shape and strides, and one reading of their terms,
    computed when the library was compiled (`codegen.reading_key`: the same grid, shard terms
    and tensor dims; never a proof run here). Two families that place the bytes alike and read
    them apart past what `layoutalg check` compares (pages over 4096 bytes) are refused here."""
    mine = _placed(runs)
    for other in later:
        theirs = apply_family(other, sizes, layer, tensor, num_blocks)  # (the group checked where it took the layer)
        if isinstance(theirs, Reason):
            continue
        if _placed(theirs) != mine:
            return Reason(Check.AMBIGUOUS, f"{cf.name} and {other.name} both take this tensor and place its bytes in a "
                          f"block's page differently: no runtime name the layer gives tells them apart, so neither "
                          f"reading is certain (a guard one requires and the other refuses would)", family=cf.name)
        if not (cf.reading and cf.reading == other.reading):
            return Reason(Check.AMBIGUOUS, f"families {cf.name} and {other.name} both take this tensor, and they are "
                          f"not shown to read it alike (nor to be offered no one layer) for every size: neither "
                          f"reading is certain, so the layer is refused (`layoutalg check` of the library says so; a "
                          f"guard one requires and the other refuses would tell them apart)", family=cf.name)
    return None


def _placed(runs) -> list:
    """Where each rank's tensors lie in a block's page, and their shapes, strides and elements."""
    return [tuple((v.placing, v.shape, v.strides, v.element) for v in m.tensors) for m in runs]


def _check_arguments(layer, tensor, parallel, num_blocks) -> int | None:
    for value, cls, what in ((layer, LayerSpec, "layer"), (parallel, ParallelConfig, "parallel")):
        if not isinstance(value, cls):
            raise ConfigError(f"Deriver.derive: {what} must be a {cls.__name__}, got {type(value).__name__}")
    if tensor is not None and not isinstance(tensor, TensorLayout) and not (
            type(tensor) is tuple and tensor and all(isinstance(t, TensorLayout) for t in tensor)):
        raise ConfigError(f"Deriver.derive: tensor must be a TensorLayout, a tuple of them (a layer of several "
                          f"tensors) or None, got {type(tensor).__name__}")
    if num_blocks is None or type(num_blocks) is int and num_blocks >= 0:
        return num_blocks
    return as_int(num_blocks, "Deriver.derive: num_blocks", minimum=0)


def apply_family(cf: CompiledFamily, sizes: dict, layer: LayerSpec, tensor: TensorLayout | None, num_blocks,
           fallback: bool = False, world: int | None = None):
    """Every rank's mappings where `cf` describes the layer exactly, else why not (a `Reason`).
    `sizes` may give `pp`: only a stage grid's family reads it (no other family's reading or
    format id sees it); `world`, where the caller gives one, must be the family's group."""
    if "pp" in sizes and not stage_grid(cf):
        sizes = {k: v for k, v in sizes.items() if k != "pp"}
    group = group_of(cf, sizes)
    if world is not None and world != group:
        return Reason(Check.GROUP, f"the caller's world is {world} ranks but this family's grid is one group of "
                      f"{'tp * pcp * pp' if stage_grid(cf) else 'tp * pcp'} = {group} ranks", expected=world,
                      actual=group)
    if cf.tensor_dims and (not isinstance(tensor, TensorLayout) or len(tensor.shape) != cf.tensor_dims + 1):
        return Reason.shared(Check.TENSOR, f"needs a KV tensor of {cf.tensor_dims + 1} dimensions" + (
            f", got a list of {len(tensor)} tensors" if isinstance(tensor, tuple) else ""), expected=cf.tensor_dims + 1,
            actual=len(tensor.shape) if isinstance(tensor, TensorLayout) else None)
    try:
        inst = cf.evaluate(sizes)
        views = cf.tensor_views(inst) if isinstance(cf, CompiledPage) else \
            (TensorView("kv", 0, inst.tensor_shape, inst.tensor_strides, inst.element, outer=cf.tensor_outer),) \
            if inst.tensor_shape else ()
    except GuardFailed as e:
        return e.reason
    if views and views[0].segments > MAX_STRETCHES:
        return Reason(Check.TENSOR, f"its tensor holds the page in {views[0].segments} stretches apart (dims before "
                      f"the block), more than the {MAX_STRETCHES} a copy takes", expected=MAX_STRETCHES,
                      actual=views[0].segments)
    if isinstance(tensor, TensorLayout) and len(views) > 1 and raw_page(tensor, num_blocks, layer.page_size_bytes):
        one = stacked(views, tensor, num_blocks, layer.page_size_bytes)  # its views stacked before the block?
        views = (one,) if isinstance(one, TensorView) else views  # (else `mismatch_views` says why not)
    why = (mismatch_views(views, tensor, num_blocks, layer.page_size_bytes) if isinstance(cf, CompiledPage) else
           _mismatch(inst, cf, layer, tensor, num_blocks)) or misfit(inst, layer.page_size_bytes, group)
    box = () if fallback else getattr(inst, "local_form", None)
    if not why and not views and isinstance(tensor, TensorLayout):
        views = as_it_lies(tensor, num_blocks, layer.page_size_bytes, in_order=not fallback, box=box)
        why = views if isinstance(views, Reason) else None
    if why:
        return why
    try:
        runs = lower(inst, cf.layout_id)
    except TilingError as e:  # the spec does not tile at these sizes: fail closed, say why
        return e.reason
    tensors = tensor if isinstance(tensor, tuple) else (tensor,) if isinstance(tensor, TensorLayout) else ()
    if len(tensors) == len(views):  # each view with the element type its tensor names
        views = tuple(v._replace(dtype=t.dtype) for v, t in zip(views, tensors))
    named = names_data(inst)
    fmt = format_id(cf.layout_id, inst, named, sizes, layer_dtypes(tensors),
                    () if named else (layer.kind,) + physical_layout(tensors))
    if not named and not tensors:  # where a rank's bytes lie is assumed (the family's layout, the kind's)
        fmt = assumed_id(fmt)
    reads = (box,) if tensor is None and not views and not fallback else ()  # what a plan's tensor must be
    return tuple(replace(m, tensors=views, format_id=fmt, reads=reads) for m in runs)


def _sizes(layer: LayerSpec, tensor: TensorLayout | None, parallel: ParallelConfig) -> dict:
    return params.configuration(
        tp=parallel.tp, pcp=parallel.pcp, dcp=parallel.dcp, interleave=parallel.interleave,
        total_heads=parallel.total_kv_heads, heads=layer.num_kv_heads, block_size=layer.block_size,
        head_size=layer.head_size,
        dtype_bytes=tensor.element_size if isinstance(tensor, TensorLayout) else layer.dtype_bytes,
        page_size=layer.page_size_bytes if layer.page_size_bytes is not None else 0,
        per_token_head_quant=int(bool(layer.per_token_head_quant)), compress_ratio=layer.compress_ratio,
        pp=parallel.pp, **dict(layer.sizes))


def _mismatch(inst: Instance, cf: CompiledFamily, layer: LayerSpec, tensor: TensorLayout | None,
              num_blocks) -> Reason | None:
    """Why the instance does not describe this layer's tensor (None when it does): a family
    that reads the tensor must find its shape, strides and page in each block. (That the
    layout is the page and the grid the group is `compiled.misfit`, for every family.)
    Dims before the block dim (`cf.tensor_outer`) are matched by extent: their strides are
    the tensor's, held apart by `copy.views` where bytes move."""
    page, names, k = layer.page_size_bytes, cf.tensor, cf.tensor_outer
    if inst.tensor_shape:  # the family reads a tensor: recognise it by shape and strides
        if tensor is None:
            return Reason(Check.TENSOR, "no KV tensor to recognise")
        blocks = num_blocks if num_blocks is not None else (tensor.shape[k] if len(tensor.shape) > k else None)
        expected = inst.tensor_shape[:k] + (blocks,) + inst.tensor_shape[k:]
        dims = ", ".join(names[:k] + ("block",) + names[k:])
        if tensor.shape != expected:
            return Reason(Check.TENSOR, f"KV tensor shape {tensor.shape} is not {expected} = ({dims})",
                          expected=expected, actual=tensor.shape)
        for dim, (name, want, got) in enumerate(zip(names[k:], inst.tensor_strides[k:], tensor.stride[k + 1:]),
                                                start=k + 1):
            if want != got:
                return Reason(Check.TENSOR, f"KV tensor dimension {dim} ({name}) has stride {got}, expected {want} "
                              f"(elements)", name=name, dim=dim, expected=want, actual=got)
        held = prod(inst.tensor_shape) * tensor.element_size
        if held != page:
            return Reason(Check.TENSOR, f"KV tensor holds {held} bytes per block but the page is {page}",
                          expected=page, actual=held)
    return None


class Held:
    """A compiled library this process holds for a folder: its `families`, the folder's spec
    files (`listing`) and what vouches for them: the times of the files it was made from and
    when they were recorded (`stamp`: (`sources.stats`, ns), from the folder's index), or else
    the sources it was compiled from (`made_from`, `library.sources`)."""

    __slots__ = ("stamp", "made_from", "listing", "families")

    def __init__(self, stamp, made_from: tuple, listing: tuple, families: dict):
        self.stamp, self.made_from, self.listing, self.families = stamp, made_from, listing, families


_COMPILED: dict[str, Held] = {}
"""Per folder (a real path): the library this process holds (at most 8 folders)."""


def compiled_library(spec_dir: str | None = None) -> dict[str, CompiledFamily]:
    """Every family of a library, compiled once per process (or loaded precompiled), and again
    whenever a file it was compiled from, or a file of its folder, changes: a spec edited
    between two `Deriver`s of one process is never served stale."""
    from ..compile import cache
    from ..resources import specs_folder
    folder = os.path.realpath(os.fspath(spec_dir or specs_folder()))
    hit = _COMPILED.get(folder)
    if hit is not None and _still(hit, folder):
        return hit.families
    listing = files.folder_listing(folder)
    recalled = cache.recall("library", folder) if os.path.isdir(folder) else None
    out = _from_entries(recalled.data) if recalled is not None else None
    if out is not None:  # by the folder's index: nothing hashed, nothing parsed
        return _held(folder, Held((recalled.sig, recalled.at), (), listing, out))
    # the disk cache is keyed by a folder's spec files: a path that is no folder (a file, nothing)
    # has none, and would be served any empty folder's entry; it is read (or refused) as given
    found = cache.load("library", folder) if os.path.isdir(folder) else None
    key, data = (found.key, found.data) if found is not None else (None, None)
    read = files.snapshot(found.made_from[0]) if data is not None else (None, ())
    if data is not None and read[0] == found.made_from[1]:  # the files as read now are those the entry was made from
        out, made_from = _from_entries(data), read[1]
    if out is None:
        from ..compile.codegen import compile_named
        from ..dsl.library import load_default, sources
        lib = load_default(folder)
        out, made_from = {name: compile_named(lib, name) for name in lib.families}, sources(lib)
        if key is not None:
            cache.store("library", key, [p for p, _ in made_from], [cf.to_json() for cf in out.values()],
                        made_from, folder)
    if key is not None:
        cache.remember("library", folder, key, [p for p, _ in made_from])
    return _held(folder, Held(None, made_from, listing, out))


def _held(folder: str, held: Held) -> dict:
    if len(_COMPILED) >= 8:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[folder] = held
    return held.families


def _still(hit: Held, folder: str) -> bool:
    """Whether a library this process holds may be served again: the files it was made from
    have the times recorded (and those vouch for them), else the bytes it was compiled from."""
    if hit.stamp is not None:
        sig, at = hit.stamp
        return (hit.listing == files.folder_listing(folder) and files.settled(sig, at)
                and files.stats(p for p, *_ in sig) == sig)
    return files.unchanged(hit.made_from, folder, hit.listing)


def _from_entries(data: list) -> dict | None:
    """The families of a cache entry, or None where one is not of the form `store` admitted
    (an entry of another layoutalg that the key did not tell apart): the library is compiled."""
    try:
        return {d["name"]: from_entry(d, trusted=True) for d in data}
    except Exception:  # noqa: BLE001 - whatever a damaged entry raises, the library is compiled afresh
        return None


def forget_compiled() -> None:
    """Drop the compiled libraries this process holds: the next `compiled_library` reads the
    on-disk cache (or compiles) again."""
    _COMPILED.clear()
